#include "nystrom/approximation.hpp"

#include <utility>

#include "nystrom/attention.hpp"
#include "nystrom/detail/enum_names.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<Method>, 7> method_names{{
    {Method::pnp_nystra, "pnp-nystra"},
    {Method::nystromformer, "nystromformer"},
    {Method::cur, "cur"},
    {Method::symmetric_nystrom, "symmetric-nystrom"},
    {Method::performer, "performer"},
    {Method::linformer, "linformer"},
    {Method::exact, "exact"},
}};

constexpr std::array<EnumName<ErrorMatrix>, 3> error_matrix_names{
    {{ErrorMatrix::none, "none"}, {ErrorMatrix::kernel, "G"}, {ErrorMatrix::attention, "S"}}};
}  // namespace

std::string to_string(ErrorMatrix matrix) {
  return name_of(matrix, error_matrix_names);
}

ErrorMatrix error_matrix(Method method) {
  switch (method) {
    case Method::pnp_nystra:
    case Method::symmetric_nystrom:
      return ErrorMatrix::kernel;
    case Method::exact:
      return ErrorMatrix::none;
    case Method::nystromformer:
    case Method::cur:
    case Method::performer:
    case Method::linformer:
      return ErrorMatrix::attention;
  }
  return ErrorMatrix::none;
}

std::string to_string(Method method) {
  return name_of(method, method_names);
}

Method method_from_string(const std::string& name) {
  return parse(name, method_names, "method");
}

std::string implied_matrix(Method method) {
  switch (method) {
    case Method::pnp_nystra:
      return "S_hat = diag(1/(G_hat 1)) G_hat, G_hat = G_L pinv(G_A) G_U (PnP-Nystra eq. 5)";
    case Method::nystromformer:
      return "S_hat = F~ pinv(A~) B~ (Nystromformer eq. 15; rows need not sum to 1)";
    case Method::cur:
      return "S_hat = C pinv(U) R (CURformer Alg. 1; without copied rows)";
    case Method::symmetric_nystrom:
      return "S_hat = diag(1/(G_hat 1)) G_hat, G_hat = C pinv(W) C^T (LaplacianFormer Alg. 1)";
    case Method::performer:
      return "S_hat = diag(1/(Phi_Q Phi_K^T 1)) Phi_Q Phi_K^T (FAVOR+)";
    case Method::linformer:
      return "S_hat = softmax(s Q (E K)^T) F (Linformer eq. 7)";
    case Method::exact:
      return "none";
  }
  return "unknown";
}

const PinvOptions* pinv_options(Method method, const ApproximationOptions& options) {
  switch (method) {
    case Method::pnp_nystra:
      return &options.pnp_nystra.pinv;
    case Method::symmetric_nystrom:
      return &options.symmetric_nystrom.pinv;
    case Method::nystromformer:
      return &options.nystromformer.pinv;
    case Method::cur:
      return &options.cur.pinv;
    default:
      return nullptr;
  }
}

PinvOptions* pinv_options(Method method, ApproximationOptions& options) {
  return const_cast<PinvOptions*>(pinv_options(method, std::as_const(options)));
}

namespace {

/// The Nyström options of pnp-nystra or symmetric-nystrom as approximate_attention runs them: the method's,
/// with `kernel` and `storage` of `options`.
NystromOptions method_nystrom_options(Method method, const ApproximationOptions& options) {
  NystromOptions nystrom = method == Method::pnp_nystra ? options.pnp_nystra : options.symmetric_nystrom;
  nystrom.kernel = options.kernel;
  nystrom.storage = options.storage;
  return nystrom;
}

}  // namespace

void ApproximationOptions::validate(Method method, Index n, Index d) const {
  kernel.validate();
  require(error_matrix(method) != ErrorMatrix::attention || kernel.type == KernelType::exponential,
          to_string(method), " is a softmax method and needs the exponential kernel, not ", kernel);
  require(error_matrix(method) != ErrorMatrix::attention || kernel.param > 0, to_string(method),
          " is a softmax method and needs a scale s > 0, got s = ", kernel.param);
  switch (method) {
    case Method::pnp_nystra:
    case Method::symmetric_nystrom:
      method_nystrom_options(method, *this).validate(n, d);
      return;
    case Method::nystromformer:
      nystromformer.validate(n);
      return;
    case Method::cur:
      cur.validate(n, d);
      return;
    case Method::performer:
      performer.validate(d);
      return;
    case Method::linformer:
      linformer.validate(n);
      return;
    case Method::exact:
      return;
  }
}

ApproximationOptions with_drawn_projections(Method method, const ApproximationOptions& options, Index n,
                                            Index d) {
  ApproximationOptions drawn = options;
  PerformerOptions& performer = drawn.performer;
  if (method == Method::performer && performer.projection.size() == 0)
    performer.projection =
        performer_projection(performer.feature_count(d), d, performer.seed, performer.orthogonal);
  LinformerOptions& linformer = drawn.linformer;
  if (method == Method::linformer &&
      (!linformer.e.size() || (!linformer.f.size() && !linformer.share_projections))) {
    LinformerProjections projections =
        linformer_projections(linformer.projected, n, linformer.seed, linformer.share_projections);
    if (!linformer.e.size()) linformer.e = std::move(projections.e);
    if (!linformer.f.size() && !linformer.share_projections) linformer.f = std::move(projections.f);
  }
  return drawn;
}

namespace {

template <class T, class Pinv>
void record_pinv(Approximation<T>& out, const Pinv& pinv) {
  out.pinv_status = pinv.status;
  out.pinv_residual = pinv.residual();
}

/// Moves a softmax method's output, its implied Ŝ, its rounding counts and (for methods with a pseudoinverse)
/// the pinv diagnostics and counts into `out`.
template <class T, class Result>
void take_softmax_result(Approximation<T>& out, Result result) {
  if constexpr (requires { result.pinv; }) {
    record_pinv(out, result.pinv);
    out.rounding += result.pinv.rounding;
  }
  out.rounding += result.rounding;
  out.output = std::move(result.output);
  out.softmax_attention = std::move(result).attention_operator();
}

/// run(method_options) with method_options.storage = `storage` (copied only where it differs: Linformer's
/// and Performer's explicit projections are large).
template <class Options, class Run>
auto with_storage(const Options& method_options, Precision storage, const Run& run) {
  if (method_options.storage == storage) return run(method_options);
  Options stored = method_options;
  stored.storage = storage;
  return run(stored);
}

}  // namespace

template <class T>
Approximation<T> approximate_attention(Method method, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, const ApproximationOptions& options) {
  options.validate_in<T>(method, Q.rows(), Q.cols());
  const double s = options.kernel.param;
  Approximation<T> out;
  out.method = method;
  const Precision storage = options.storage;
  switch (method) {
    case Method::pnp_nystra:
    case Method::symmetric_nystrom: {
      const NystromOptions nystrom = method_nystrom_options(method, options);
      NystromFactors<T>& factors = out.kernel_factors.emplace();
      // The fused call for native pnp-nystra; emulated, the factors and then Algorithm 1 with its counts.
      if (method == Method::pnp_nystra && !is_emulated(storage)) {
        out.output = generalized_nystrom_attention<T>(Q, K, V, nystrom, factors);
      } else {
        factors = method == Method::pnp_nystra ? generalized_nystrom<T>(Q, K, nystrom)
                                               : symmetric_nystrom<T>(Q, K, nystrom);
        out.output = nystrom_attention<T>(factors, V, out.rounding);
      }
      record_pinv(out, factors.pinv);
      out.rounding += factors.rounding;
      out.rounding += factors.pinv.rounding;
      out.selection_entries = factors.landmarks.entries;
      break;
    }
    case Method::nystromformer:
      take_softmax_result(out, with_storage(options.nystromformer, storage, [&](const auto& method_options) {
                            return nystromformer_attention<T>(Q, K, V, s, method_options);
                          }));
      break;
    case Method::cur: {
      CurResult<T> cur = with_storage(options.cur, storage, [&](const auto& method_options) {
        return cur_attention<T>(Q, K, V, s, method_options);
      });
      out.selection_entries = cur.selection_entries;
      take_softmax_result(out, std::move(cur));
      break;
    }
    case Method::performer:
      take_softmax_result(out, with_storage(options.performer, storage, [&](const auto& method_options) {
                            return performer_attention<T>(Q, K, V, s, method_options);
                          }));
      break;
    case Method::linformer:
      take_softmax_result(out, with_storage(options.linformer, storage, [&](const auto& method_options) {
                            return linformer_attention<T>(Q, K, V, s, method_options);
                          }));
      break;
    case Method::exact:
      out.output = exact_attention<T>(Q, K, V, options.kernel, storage, out.rounding);
      break;
  }
  return out;
}

template <class T>
std::optional<FactoredOperator<T>> Approximation<T>::attention() const {
  if (!kernel_factors) return softmax_attention;
  return implied_attention(*kernel_factors);
}

template <class T>
FactoredOperator<T> implied_attention(const NystromFactors<T>& f) {
  const Vector<T> row_sums = f.left * (f.pinv.z * f.upper.rowwise().sum());
  return FactoredOperator<T>(f.left, f.pinv.z, f.upper, row_sums.cwiseInverse());
}

#define NYSTROM_INSTANTIATE(T)                                                                           \
  template struct Approximation<T>;                                                                      \
  template FactoredOperator<T> implied_attention<T>(const NystromFactors<T>&);                           \
  template Approximation<T> approximate_attention<T>(Method, const ConstMatrixRef<T>&,                   \
                                                     const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, \
                                                     const ApproximationOptions&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
