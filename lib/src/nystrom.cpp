#include "nystrom/nystrom.hpp"

#include <algorithm>
#include <cmath>

#include "attention_inputs.hpp"
#include "nystrom/enum_names.hpp"
#include "nystrom/error.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<Stabilization>, 3> stabilization_names{{{Stabilization::none, "none"},
                                                                      {Stabilization::row_max, "row-max"},
                                                                      {Stabilization::clamped, "clamped"}}};
}  // namespace

std::string to_string(Stabilization stabilization) {
  return name_of(stabilization, stabilization_names);
}

Stabilization stabilization_from_string(const std::string& name) {
  return parse(name, stabilization_names, "stabilization");
}

void NystromOptions::validate(Index n, Index d) const {
  kernel.validate();
  landmarks.validate(n, d);
  pinv.validate();
}

namespace {

/// The authors' clamped exponential exp(min(x, 5)) + max(x − 5, 0) (PnP-Nystra public code), elementwise in
/// place.
template <class T>
void clamped_exp(Matrix<T>& x) {
  x = x.unaryExpr([](T v) { return std::exp(std::min(v, T(5))) + std::max(v - T(5), T(0)); });
}

/// Row maxima of an exponent block (the log of PnP-Nystra's M_L or M_U, eq. (8)), one contiguous column at a
/// time (Eigen's rowwise() walks the strided rows of a column-major block one scalar at a time).
template <class T>
Vector<T> row_max(const Matrix<T>& exponent) {
  Vector<T> maxima = exponent.col(0);
  for (Index j = 1; j < exponent.cols(); ++j) maxima = maxima.cwiseMax(exponent.col(j));
  return maxima;
}

/// exp(φ − l 1ᵀ) in place: a stabilized kernel block from its exponent φ and row log-scales l.
template <class T>
void exp_shifted_rows(Matrix<T>& exponent, const Vector<T>& log_scale) {
  // Two passes on purpose: Eigen vectorizes exp of a plain array but calls scalar expf on the fused
  // broadcast expression (perf: ~20% of generalized_nystrom at N = 16384, m = 16, float).
  exponent.colwise() -= log_scale;
  exponent = exponent.array().exp().matrix();
}

/// The landmarks and the exponent blocks φ of G_L = κ(Q, K̄) and G_A = κ(Q̄, K̄) (MATH.md §2) with zero row
/// log-scales: the part PnP-Nystra and the symmetric Nyström share.
template <class T>
NystromFactors<T> landmark_exponents(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                     const NystromOptions& options) {
  NystromFactors<T> f;
  f.options = options;
  f.landmarks = select_landmarks<T>(Q, K, options.landmarks);
  f.left = options.kernel.exponent_block<T>(Q, f.landmarks.k);
  f.core = options.kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  f.left_log_scale = Vector<T>::Zero(f.left.rows());
  f.upper_log_scale = Vector<T>::Zero(f.core.rows());
  return f;
}

}  // namespace

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options) {
  detail::require_nystrom_inputs<T>(Q, K, options, "generalized_nystrom");
  NystromFactors<T> f = landmark_exponents<T>(Q, K, options);
  f.upper = options.kernel.exponent_block<T>(f.landmarks.q, K);  // φ of G_U = κ(Q̄, K)
  switch (options.stabilization) {
    case Stabilization::none:
      break;
    case Stabilization::row_max:
      // PnP-Nystra eq. (8): M_L = diag(exp(max_j φ(Q, K̄)_ij)), M_U = diag(exp(max_j φ(Q̄, K)_ij)); M_U scales
      // the rows of both G_A and G_U, so Ĝ = M_L G_Lⁿ (G_Aⁿ)⁺ G_Uⁿ for a nonsingular G_A.
      f.left_log_scale = row_max(f.left);
      f.upper_log_scale = row_max(f.upper);
      break;
    case Stabilization::clamped:
      clamped_exp(f.left);
      clamped_exp(f.core);
      clamped_exp(f.upper);
      f.pinv = pseudoinverse<T>(f.core, options.pinv);
      return f;
  }
  exp_shifted_rows(f.left, f.left_log_scale);
  exp_shifted_rows(f.core, f.upper_log_scale);
  exp_shifted_rows(f.upper, f.upper_log_scale);
  f.pinv = pseudoinverse<T>(f.core, options.pinv);
  return f;
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const NystromOptions& options) {
  detail::require_nystrom_inputs<T>(Q, K, options, "symmetric_nystrom");
  require(options.stabilization != Stabilization::row_max,
          "symmetric_nystrom: stabilization row-max is not defined for the symmetric form C W+ C^T (its row "
          "and column scalings differ); use none or clamped");
  // LaplacianFormer Alg. 1: W = κ(Q̄, K̄), C = κ(Q, K̄), Ĝ = C W⁺ Cᵀ.
  NystromFactors<T> f = landmark_exponents<T>(Q, K, options);
  if (options.stabilization == Stabilization::clamped) {
    clamped_exp(f.left);
    clamped_exp(f.core);
  } else {
    f.left = f.left.array().exp().matrix();
    f.core = f.core.array().exp().matrix();
  }
  f.upper = f.left.transpose();
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
  // PnP-Nystra Algorithm 1: G_U V and G_U 1 (m×dv, m), then P = G_L Z (N×m), then P(G_U V) and P(G_U 1). The
  // row scale M_L cancels in the ratio, so it is never applied.
  const Matrix<T> upper_values = factors.upper * V;
  const Vector<T> upper_ones = factors.upper.rowwise().sum();
  const Matrix<T> p = factors.left * factors.pinv.z;
  Matrix<T> out = p * upper_values;
  Vector<T> denominator = p * upper_ones;
  if (factors.options.stabilization == Stabilization::clamped) denominator.array() += T(1e-12);
  out.array().colwise() /= denominator.array();
  return out;
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
