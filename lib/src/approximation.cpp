#include "nystrom/approximation.hpp"

#include "nystrom/attention.hpp"
#include "nystrom/operators.hpp"

namespace nystrom {

namespace {
constexpr Method all_methods[] = {
    Method::pnp_nystra, Method::nystromformer, Method::cur,  Method::symmetric_nystrom,
    Method::performer,  Method::linformer,     Method::exact};

bool is_softmax_method(Method method) {
  return method == Method::nystromformer || method == Method::cur || method == Method::performer ||
         method == Method::linformer;
}
}  // namespace

std::string to_string(Method method) {
  switch (method) {
    case Method::pnp_nystra:
      return "pnp-nystra";
    case Method::nystromformer:
      return "nystromformer";
    case Method::cur:
      return "cur";
    case Method::symmetric_nystrom:
      return "symmetric-nystrom";
    case Method::performer:
      return "performer";
    case Method::linformer:
      return "linformer";
    case Method::exact:
      return "exact";
  }
  return "unknown";
}

Method method_from_string(const std::string& name) {
  for (auto method : all_methods)
    if (name == to_string(method)) return method;
  throw std::invalid_argument(
      "unknown method '" + name +
      "' (expected pnp-nystra, nystromformer, cur, symmetric-nystrom, performer, linformer "
      "or exact)");
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

void ApproximationOptions::validate(Method method, Index n, Index d) const {
  kernel.validate();
  require(!is_softmax_method(method) || kernel.type == KernelType::exponential,
          describe(to_string(method), " is a softmax method and needs the exponential kernel, not ",
                   kernel.label()));
  switch (method) {
    case Method::pnp_nystra:
    case Method::symmetric_nystrom: {
      NystromOptions with_kernel = method == Method::pnp_nystra ? nystrom : symmetric;
      with_kernel.kernel = kernel;
      with_kernel.validate(n, d);
      return;
    }
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

namespace {

/// Ŝ = diag(1/(Ĝⁿ1)) Ĝⁿ from Nyström factors (the row scales exp(l) of a stabilized Ĝ cancel).
template <class T>
FactoredOperator<T> normalized_nystrom(const NystromFactors<T>& f) {
  const Vector<T> row_sums = f.left * (f.pinv.z * f.upper.rowwise().sum());
  return {f.left, f.pinv.z, f.upper, row_sums.cwiseInverse()};
}

template <class T, class Pinv>
void record_pinv(Approximation<T>& out, const Pinv& pinv) {
  out.pinv_status = pinv.status;
  out.pinv_residual = pinv.residual();
}

}  // namespace

template <class T>
Approximation<T> approximate_attention(Method method, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, const ApproximationOptions& options) {
  options.validate(method, Q.rows(), Q.cols());
  const double s = options.kernel.param;
  Approximation<T> out;
  out.method = method;
  switch (method) {
    case Method::pnp_nystra:
    case Method::symmetric_nystrom: {
      NystromOptions nystrom = method == Method::pnp_nystra ? options.nystrom : options.symmetric;
      nystrom.kernel = options.kernel;
      out.kernel_factors = method == Method::pnp_nystra ? generalized_nystrom<T>(Q, K, nystrom)
                                                        : symmetric_nystrom<T>(Q, K, nystrom);
      out.output = nystrom_attention<T>(*out.kernel_factors, V);
      out.attention = normalized_nystrom(*out.kernel_factors);
      record_pinv(out, out.kernel_factors->pinv);
      break;
    }
    case Method::nystromformer: {
      auto r = nystromformer_attention<T>(Q, K, V, s, options.nystromformer);
      out.attention = r.attention_operator();
      record_pinv(out, r.pinv);
      out.output = std::move(r.output);
      break;
    }
    case Method::cur: {
      auto r = cur_attention<T>(Q, K, V, s, options.cur);
      out.attention = r.attention_operator();
      record_pinv(out, r.pinv);
      out.output = std::move(r.output);
      break;
    }
    case Method::performer: {
      auto r = performer_attention<T>(Q, K, V, s, options.performer);
      out.attention = r.attention_operator();
      out.output = std::move(r.output);
      break;
    }
    case Method::linformer: {
      auto r = linformer_attention<T>(Q, K, V, s, options.linformer);
      out.attention = r.attention_operator();
      out.output = std::move(r.output);
      break;
    }
    case Method::exact:
      out.output = exact_attention<T>(Q, K, V, options.kernel);
      break;
  }
  return out;
}

template <class T>
AttentionMatrixErrors attention_matrix_errors(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                              const Kernel& kernel, const FactoredOperator<T>& approximate,
                                              bool dense, const SpectralOptions& spectral) {
  require(approximate.rows() == Q.rows() && approximate.cols() == K.rows(),
          describe("attention_matrix_errors: S_hat is ", approximate.rows(), "x", approximate.cols(),
                   ", expected ", Q.rows(), "x", K.rows()));
  AttentionMatrixErrors errors;
  if (dense) {
    const Matrix<double> exact = attention_matrix<T>(Q, K, kernel).template cast<double>();
    const Matrix<double> difference = exact - approximate.dense().template cast<double>();
    errors.spectral = singular_values<double>(difference)(0);
    errors.relative_spectral = errors.spectral / singular_values<double>(exact)(0);
    errors.frobenius = difference.norm();
    return errors;
  }
  errors.matrix_free = true;
  const KernelOperator<T> g(Q, K, kernel);
  Vector<T> row_sums(g.rows());
  const Vector<T> ones = Vector<T>::Ones(g.cols());
  g.perform_op(ones.data(), row_sums.data());
  const RowScaledOperator<KernelOperator<T>> exact(g, row_sums.cwiseInverse());
  const DifferenceOperator<RowScaledOperator<KernelOperator<T>>, FactoredOperator<T>> difference(exact,
                                                                                                 approximate);
  errors.spectral = spectral_norm(difference, spectral).values(0);
  errors.relative_spectral = errors.spectral / spectral_norm(exact, spectral).values(0);
  return errors;
}

#define NYSTROM_INSTANTIATE(T)                                                                             \
  template Approximation<T> approximate_attention<T>(Method, const ConstMatrixRef<T>&,                     \
                                                     const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,   \
                                                     const ApproximationOptions&);                         \
  template AttentionMatrixErrors attention_matrix_errors<T>(                                               \
      const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const Kernel&, const FactoredOperator<T>&, bool, \
      const SpectralOptions&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
