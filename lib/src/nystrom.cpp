#include "nystrom/nystrom.hpp"

#include <algorithm>
#include <cmath>

#include "nystrom/error.hpp"

namespace nystrom {

std::string to_string(Stabilization stabilization) {
  switch (stabilization) {
    case Stabilization::none:
      return "none";
    case Stabilization::row_max:
      return "row-max";
    case Stabilization::clamped:
      return "clamped";
  }
  return "unknown";
}

Stabilization stabilization_from_string(const std::string& name) {
  for (auto value : {Stabilization::none, Stabilization::row_max, Stabilization::clamped})
    if (name == to_string(value)) return value;
  throw std::invalid_argument("unknown stabilization '" + name + "' (expected none, row-max or clamped)");
}

void NystromOptions::validate(Index n, Index d) const {
  kernel.validate();
  landmarks.validate(n, d);
  pinv.validate();
}

namespace {

/// Checks Q and K (N×d each, finite) and the options; `where` names the caller in messages.
template <class T>
void check_tokens(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const NystromOptions& options,
                  const char* where) {
  require(Q.cols() == K.cols(),
          describe(where, ": token dimensions differ, Q has d = ", Q.cols(), " and K has d = ", K.cols()));
  require(Q.rows() == K.rows(),
          describe(where, ": Q has N = ", Q.rows(), " tokens and K has N = ", K.rows(), " (must be equal)"));
  require(Q.rows() > 0 && Q.cols() > 0,
          describe(where, ": empty tokens, N = ", Q.rows(), ", d = ", Q.cols()));
  require_finite(Q, describe(where, ": Q"));
  require_finite(K, describe(where, ": K"));
  options.validate(Q.rows(), Q.cols());
}

/// The authors' clamped exponential exp(min(x, 5)) + max(x − 5, 0) (PnP-Nystra public code), elementwise in
/// place.
template <class T>
void clamped_exp(Matrix<T>& x) {
  x = x.unaryExpr([](T v) { return std::exp(std::min(v, T(5))) + std::max(v - T(5), T(0)); });
}

/// Row maxima of an exponent block (the log of PnP-Nystra's M_L or M_U, eq. (8)).
template <class T>
Vector<T> row_max(const Matrix<T>& exponent) {
  return exponent.rowwise().maxCoeff();
}

}  // namespace

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options) {
  check_tokens<T>(Q, K, options, "generalized_nystrom");
  NystromFactors<T> f;
  f.options = options;
  f.landmarks = select_landmarks<T>(Q, K, options.landmarks);
  const Kernel& kernel = options.kernel;
  // Exponent blocks φ of G_L = κ(Q, K̄), G_A = κ(Q̄, K̄), G_U = κ(Q̄, K) (MATH.md §2).
  f.left = kernel.exponent_block<T>(Q, f.landmarks.k);
  f.core = kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  f.upper = kernel.exponent_block<T>(f.landmarks.q, K);
  const Index m = f.core.rows();
  f.left_log_scale = Vector<T>::Zero(f.left.rows());
  f.upper_log_scale = Vector<T>::Zero(m);
  switch (options.stabilization) {
    case Stabilization::none:
      break;
    case Stabilization::row_max:
      // PnP-Nystra eq. (8): M_L = diag(exp(max_j φ(Q, K̄)_ij)), M_U = diag(exp(max_j φ(Q̄, K)_ij)); M_U scales
      // the rows of both G_A and G_U, so Ĝ = M_L G_Lⁿ (G_Aⁿ)⁺ G_Uⁿ for a nonsingular G_A.
      f.left_log_scale = row_max(f.left);
      f.upper_log_scale = row_max(f.upper);
      f.left.colwise() -= f.left_log_scale;
      f.core.colwise() -= f.upper_log_scale;
      f.upper.colwise() -= f.upper_log_scale;
      break;
    case Stabilization::clamped:
      clamped_exp(f.left);
      clamped_exp(f.core);
      clamped_exp(f.upper);
      f.pinv = pseudoinverse<T>(f.core, options.pinv);
      return f;
  }
  f.left = f.left.array().exp().matrix();
  f.core = f.core.array().exp().matrix();
  f.upper = f.upper.array().exp().matrix();
  f.pinv = pseudoinverse<T>(f.core, options.pinv);
  return f;
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const NystromOptions& options) {
  check_tokens<T>(Q, K, options, "symmetric_nystrom");
  require(options.stabilization != Stabilization::row_max,
          "symmetric_nystrom: stabilization row-max is not defined for the symmetric form C W+ C^T (its row "
          "and column "
          "scalings differ); use none or clamped");
  NystromFactors<T> f;
  f.options = options;
  f.landmarks = select_landmarks<T>(Q, K, options.landmarks);
  const Kernel& kernel = options.kernel;
  // LaplacianFormer Alg. 1: W = κ(Q̄, K̄), C = κ(Q, K̄), Ĝ = C W⁺ Cᵀ.
  f.left = kernel.exponent_block<T>(Q, f.landmarks.k);
  f.core = kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  if (options.stabilization == Stabilization::clamped) {
    clamped_exp(f.left);
    clamped_exp(f.core);
  } else {
    f.left = f.left.array().exp().matrix();
    f.core = f.core.array().exp().matrix();
  }
  f.upper = f.left.transpose();
  f.left_log_scale = Vector<T>::Zero(f.left.rows());
  f.upper_log_scale = Vector<T>::Zero(f.core.rows());
  f.pinv = pseudoinverse<T>(f.core, options.pinv);
  return f;
}

template <class T>
void NystromFactors<T>::apply(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, cols());
  Eigen::Map<Vector<T>> out(y, rows());
  const Vector<T> core_side = pinv.z * (upper * in);
  out.noalias() = left * core_side;
  out.array() *= left_log_scale.array().exp();
}

template <class T>
void NystromFactors<T>::apply_transpose(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, rows());
  Eigen::Map<Vector<T>> out(y, cols());
  const Vector<T> scaled = in.array() * left_log_scale.array().exp();
  const Vector<T> core_side = pinv.z.transpose() * (left.transpose() * scaled);
  out.noalias() = upper.transpose() * core_side;
}

template <class T>
Matrix<T> NystromFactors<T>::dense() const {
  const Matrix<T> right = pinv.z * upper;
  Matrix<T> out = left * right;
  out.array().colwise() *= left_log_scale.array().exp();
  return out;
}

template <class T>
Matrix<T> nystrom_attention(const NystromFactors<T>& factors, const ConstMatrixRef<T>& V) {
  require(V.rows() == factors.cols(),
          describe("nystrom_attention: V has ", V.rows(), " rows, expected N = ", factors.cols()));
  require_finite(V, "nystrom_attention: V");
  const Index dv = V.cols();
  // PnP-Nystra Algorithm 1 on [V, 1_N]: G_U [V, 1] (m×(dv+1)), then Z, then P = G_L Z row by row. The row
  // scale M_L cancels in the ratio, so it is never applied.
  Matrix<T> values(V.rows(), dv + 1);
  values.leftCols(dv) = V;
  values.col(dv).setOnes();
  const Matrix<T> reduced = factors.pinv.z * (factors.upper * values);
  const Matrix<T> numerator = factors.left * reduced;
  Vector<T> denominator = numerator.col(dv);
  if (factors.options.stabilization == Stabilization::clamped) denominator.array() += T(1e-12);
  return (numerator.leftCols(dv).array().colwise() / denominator.array()).matrix();
}

#define NYSTROM_INSTANTIATE(T)                                                                          \
  template struct NystromFactors<T>;                                                                    \
  template NystromFactors<T> generalized_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, \
                                                    const NystromOptions&);                             \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,   \
                                                  const NystromOptions&);                               \
  template Matrix<T> nystrom_attention<T>(const NystromFactors<T>&, const ConstMatrixRef<T>&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
