#include "nystrom/batched.hpp"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <type_traits>

#include "batch_inputs.hpp"
#include "nystrom/enum_names.hpp"
#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"

#ifdef NYSTROM_WITH_OPENBLAS
extern "C" {
void cblas_somatcopy(int order, int trans, int rows, int cols, float alpha, const float* a, int lda, float* b,
                     int ldb);
void cblas_domatcopy(int order, int trans, int rows, int cols, double alpha, const double* a, int lda,
                     double* b, int ldb);
}
#endif

namespace nystrom {

namespace {
constexpr std::array<EnumName<AlphaScope>, 2> alpha_scope_names{
    {{AlphaScope::matrix, "matrix"}, {AlphaScope::batch, "batch"}}};
}  // namespace

std::string to_string(AlphaScope scope) {
  return name_of(scope, alpha_scope_names);
}

AlphaScope alpha_scope_from_string(const std::string& name) {
  return parse(name, alpha_scope_names, "alpha scope");
}

PinvOptions* pinv_options(Method method, ApproximationOptions& options) {
  switch (method) {
    case Method::pnp_nystra:
      return &options.nystrom.pinv;
    case Method::symmetric_nystrom:
      return &options.symmetric.pinv;
    case Method::nystromformer:
      return &options.nystromformer.pinv;
    case Method::cur:
      return &options.cur.pinv;
    default:
      return nullptr;
  }
}

namespace {

/// out (rows×cols, column-major) = in (rows×cols, row-major), through OpenBLAS's omatcopy: Eigen's
/// element-by-element assignment writes with a stride of `rows` and took 60 µs for 1024×64 floats, omatcopy
/// 12 µs.
template <class T>
void transpose_copy(const T* in, Index rows, Index cols, T* out) {
#ifdef NYSTROM_WITH_OPENBLAS
  constexpr int row_major = 101, transposed = 112;  // CblasRowMajor, CblasTrans
  if constexpr (std::is_same_v<T, float>)
    cblas_somatcopy(row_major, transposed, int(rows), int(cols), 1.0f, in, int(cols), out, int(rows));
  else
    cblas_domatcopy(row_major, transposed, int(rows), int(cols), 1.0, in, int(cols), out, int(rows));
#else
  Eigen::Map<Matrix<T>>(out, rows, cols) = Eigen::Map<const RowMajorMatrix<T>>(in, rows, cols);
#endif
}

/// One head's q, k, v copied to column-major N×d matrices for the per-head code; one per thread, reused.
template <class T>
struct HeadTokens {
  Matrix<T> q, k, v;

  void load(const BatchView<const T>& Q, const BatchView<const T>& K, const BatchView<const T>& V, Index i) {
    load_one(Q, i, q);
    load_one(K, i, k);
    load_one(V, i, v);
  }

  static void load_one(const BatchView<const T>& X, Index i, Matrix<T>& to) {
    to.resize(X.tokens, X.dim);
    transpose_copy(X.data + i * X.head_size(), X.tokens, X.dim, to.data());
  }
};

/// Writes a head's column-major N×dv output into its place in `out`.
template <class T>
void store(const Matrix<T>& output, const BatchView<T>& out, Index i) {
  // The transpose of a column-major N×dv is a row-major dv×N: omatcopy reads it as rows×cols = dv×N.
  transpose_copy(output.data(), output.cols(), output.rows(), out.data + i * out.head_size());
}

/// Runs head(i, scratch) for i < count, each head on one thread. With threads() > 1 and more than one head,
/// the heads go one at a time (dynamic schedule) to the OpenMP threads, each of which sets its own thread
/// count to 1 first, so the per-head code sees threads() == 1 and opens no nested regions; otherwise in order
/// on the calling thread, the per-head code keeping the caller's threads. The first exception (naming the
/// head when it is std::invalid_argument) is rethrown once the threads have stopped.
template <class Scratch, class Head>
void for_each_head(Index count, Index heads_per_batch, const Head& head) {
  const auto run = [&](Index i, Scratch& scratch) {
    try {
      head(i, scratch);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(describe("batched attention, head ", i, " (b = ", i / heads_per_batch,
                                           ", h = ", i % heads_per_batch, "): ", error.what()));
    }
  };
  const int workers = int(std::min<Index>(threads(), count));
  if (workers < 2 || omp_in_parallel()) {
    Scratch scratch;
    for (Index i = 0; i < count; ++i) run(i, scratch);
    return;
  }
  std::exception_ptr error;
  const SingleThreadedBlas single_threaded_blas;
#pragma omp parallel num_threads(workers)
  {
    omp_set_num_threads(1);  // this thread's count: the steps of a head stay on it
    Scratch scratch;
#pragma omp for schedule(dynamic, 1)
    for (Index i = 0; i < count; ++i) {
      try {
        run(i, scratch);
      } catch (...) {
#pragma omp critical(nystrom_batched_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

/// `options` with Performer's Ω and Linformer's E, F drawn once for the batch (the per-head code would draw
/// the same ones from the seed for every head).
ApproximationOptions batch_options(Method method, const ApproximationOptions& options, Index n, Index d) {
  ApproximationOptions prepared = options;
  if (method == Method::performer && prepared.performer.projection.size() == 0)
    prepared.performer.projection = performer_projection(
        prepared.performer.feature_count(d), d, prepared.performer.seed, prepared.performer.orthogonal);
  LinformerOptions& linformer = prepared.linformer;
  if (method == Method::linformer && (!linformer.e.size() || (!linformer.f.size() && !linformer.share))) {
    LinformerProjections drawn =
        linformer_projections(linformer.projected, n, linformer.seed, linformer.share);
    if (!linformer.e.size()) linformer.e = std::move(drawn.e);
    if (!linformer.f.size() && !linformer.share) linformer.f = std::move(drawn.f);
  }
  return prepared;
}

/// The first pass of AlphaScope::batch for one head: the matrix its pseudoinverse inverts (the core of
/// docs/mathematics.md §2, §6) and, for the Nyström methods, the factors themselves, so that the second pass
/// only redoes the m×m pseudoinverse.
template <class T>
struct CoreOfHead {
  Matrix<T> inverted;
  std::optional<NystromFactors<T>> factors;
};

/// The Nyström methods' options as approximate_attention builds them (the kernel taken from `options`).
NystromOptions nystrom_options(Method method, const ApproximationOptions& options) {
  NystromOptions nystrom = method == Method::pnp_nystra ? options.nystrom : options.symmetric;
  nystrom.kernel = options.kernel;
  return nystrom;
}

template <class T>
CoreOfHead<T> core_of_head(Method method, const HeadTokens<T>& head, const ApproximationOptions& options,
                           const PinvOptions& pinv) {
  CoreOfHead<T> out;
  switch (method) {
    case Method::pnp_nystra:
      out.factors = generalized_nystrom<T>(head.q, head.k, nystrom_options(method, options));
      out.inverted = inverted_matrix<T>(out.factors->core, pinv);
      break;
    case Method::symmetric_nystrom:
      out.factors = symmetric_nystrom<T>(head.q, head.k, nystrom_options(method, options));
      out.inverted = inverted_matrix<T>(out.factors->core, pinv);
      break;
    case Method::nystromformer:
      out.inverted = inverted_matrix<T>(
          nystromformer_core<T>(head.q, head.k, options.kernel.param, options.nystromformer), pinv);
      break;
    default:  // cur: U = C[q_idx, :] needs C; the method runs once more in the second pass
      out.inverted = inverted_matrix<T>(
          cur_attention<T>(head.q, head.k, head.v, options.kernel.param, options.cur).intersection, pinv);
      break;
  }
  return out;
}

template <class T>
HeadDiagnostics diagnostics_of(const Approximation<T>& result) {
  return {result.pinv_status, result.pinv_residual};
}

}  // namespace

template <class T>
BatchedDiagnostics batched_attention(Method method, const BatchView<const T>& Q, const BatchView<const T>& K,
                                     const BatchView<const T>& V, const BatchView<T>& out,
                                     const ApproximationOptions& options, AlphaScope alpha_scope) {
  detail::require_batch<T>(Q, K, V, out, "batched_attention");
  options.validate(method, Q.tokens, Q.dim);
  const Index count = Q.count();
  ApproximationOptions prepared = batch_options(method, options, Q.tokens, Q.dim);
  BatchedDiagnostics result;
  result.heads.resize(static_cast<std::size_t>(count));
  PinvOptions* pinv = pinv_options(method, prepared);
  const bool batch_alpha_pass = alpha_scope == AlphaScope::batch && pinv && pinv->method != PinvMethod::exact;
  if (!batch_alpha_pass) {
    for_each_head<HeadTokens<T>>(count, Q.heads, [&](Index i, HeadTokens<T>& head) {
      head.load(Q, K, V, i);
      const Approximation<T> approximation =
          approximate_attention<T>(method, head.q, head.k, head.v, prepared);
      store<T>(approximation.output, out, i);
      result.heads[std::size_t(i)] = diagnostics_of(approximation);
    });
    return result;
  }
  // AlphaScope::batch: every head's core first, then α over all of them (docs/mathematics.md §4).
  std::vector<CoreOfHead<T>> cores(static_cast<std::size_t>(count));
  for_each_head<HeadTokens<T>>(count, Q.heads, [&](Index i, HeadTokens<T>& head) {
    head.load(Q, K, V, i);
    cores[std::size_t(i)] = core_of_head<T>(method, head, prepared, *pinv);
  });
  std::vector<Matrix<T>> inverted(static_cast<std::size_t>(count));
  for (std::size_t i = 0; i < cores.size(); ++i) inverted[i] = std::move(cores[i].inverted);
  result.alpha = batch_alpha<T>(inverted);
  pinv->alpha = result.alpha;
  for_each_head<HeadTokens<T>>(count, Q.heads, [&](Index i, HeadTokens<T>& head) {
    std::optional<NystromFactors<T>>& factors = cores[std::size_t(i)].factors;
    if (factors) {
      // approximate_attention's Nyström branch from the kept factors: only Z ≈ G_A⁺ depends on α.
      HeadTokens<T>::load_one(V, i, head.v);
      factors->pinv = pseudoinverse<T>(factors->core, *pinv);
      store<T>(nystrom_attention<T>(*factors, head.v), out, i);
      result.heads[std::size_t(i)] = {factors->pinv.status, factors->pinv.residual()};
      factors.reset();
      return;
    }
    head.load(Q, K, V, i);
    const Approximation<T> approximation = approximate_attention<T>(method, head.q, head.k, head.v, prepared);
    store<T>(approximation.output, out, i);
    result.heads[std::size_t(i)] = diagnostics_of(approximation);
  });
  return result;
}

#define NYSTROM_INSTANTIATE(T)                                                                 \
  template BatchedDiagnostics batched_attention<T>(                                            \
      Method, const BatchView<const T>&, const BatchView<const T>&, const BatchView<const T>&, \
      const BatchView<T>&, const ApproximationOptions&, AlphaScope);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
