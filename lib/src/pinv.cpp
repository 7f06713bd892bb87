#include "nystrom/pinv.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "nystrom/enum_names.hpp"
#include "nystrom/error.hpp"
#include "nystrom/spectral.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<PinvMethod>, 3> method_names{{{PinvMethod::exact, "exact"},
                                                            {PinvMethod::razavi, "razavi"},
                                                            {PinvMethod::newton_schulz, "newton-schulz"}}};
constexpr std::array<EnumName<PinvStatus>, 4> status_names{{{PinvStatus::converged, "converged"},
                                                            {PinvStatus::completed, "completed"},
                                                            {PinvStatus::diverged, "diverged"},
                                                            {PinvStatus::non_finite, "non-finite"}}};
}  // namespace

std::string to_string(PinvMethod method) {
  return name_of(method, method_names);
}

PinvMethod pinv_method_from_string(const std::string& name) {
  return parse(name, method_names, "pseudoinverse method");
}

std::string to_string(PinvStatus status) {
  return name_of(status, status_names);
}

void PinvOptions::validate() const {
  require(iterations >= 1, "pinv: iterations = ", iterations, " must be >= 1");
  require(std::isfinite(alpha) && alpha >= 0, "pinv: alpha = ", alpha, " must be finite and >= 0");
  require(std::isfinite(tolerance) && tolerance >= 0, "pinv: tolerance = ", tolerance,
          " must be finite and >= 0");
  require(std::isfinite(tikhonov) && tikhonov >= 0, "pinv: tikhonov = ", tikhonov,
          " must be finite and >= 0");
  require(std::isfinite(shift) && shift >= 0, "pinv: shift = ", shift, " must be finite and >= 0");
  require(!(tikhonov > 0 && shift > 0), "pinv: tikhonov = ", tikhonov, " and shift = ", shift,
          " cannot both be > 0");
}

template <class T>
double safe_alpha(const ConstMatrixRef<T>& A) {
  require(A.size() > 0, "safe_alpha: A is empty (", A.rows(), "x", A.cols(), ")");
  require_finite(A, "safe_alpha: A");
  // Nyströmformer's init: ‖A‖₁‖A‖_∞ ≥ ‖A‖₂² = σ₁², so ασ₁² ≤ 1, inside both convergence ranges. The norms in
  // double, and α as (1/‖A‖₁)/‖A‖_∞: their product over- or underflowed for entries beyond 1e±154 (α 0 or ∞).
  const Matrix<double> a = A.template cast<double>();
  const double norm_1 = a.cwiseAbs().colwise().sum().maxCoeff();
  const double norm_inf = a.cwiseAbs().rowwise().sum().maxCoeff();
  return norm_1 > 0 ? 1.0 / norm_1 / norm_inf : 1.0;  // the zero matrix: every α gives Z₀ = 0 = A⁺
}

template <class T>
double batch_alpha(const std::vector<Matrix<T>>& matrices) {
  require(!matrices.empty(), "batch_alpha: no matrices given");
  double norm_1 = 0, norm_inf = 0;
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    const Matrix<T>& M = matrices[i];
    require(M.size() > 0, "batch_alpha: matrix ", i, " is empty (", M.rows(), "x", M.cols(), ")");
    if (!all_finite(M)) continue;  // an overflowed core: its pseudoinverse is NaN whatever α
    const Matrix<double> m = M.template cast<double>();
    norm_1 = std::max(norm_1, m.cwiseAbs().colwise().sum().maxCoeff());
    norm_inf = std::max(norm_inf, m.cwiseAbs().rowwise().sum().maxCoeff());
  }
  return norm_1 > 0 ? 1.0 / norm_1 / norm_inf : 1.0;  // all zero: every α gives Z₀ = 0 = M⁺
}

template <class T>
Matrix<T> inverted_matrix(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  if (options.tikhonov > 0) {
    Matrix<T> M = A.transpose() * A;
    M.diagonal().array() += T(options.tikhonov);
    return M;
  }
  Matrix<T> M = A;
  if (options.shift > 0) M.diagonal().array() += T(options.shift);
  return M;
}

namespace {

/// M Z in double, the product behind both the residual ‖I − MZ‖_F and the next iteration step.
template <class T>
Matrix<double> product_in_double(const Matrix<double>& M, const Matrix<T>& Z) {
  return M * Z.template cast<double>();
}

/// ‖I − P‖_F of a square product P = M Z (in double).
double identity_residual(const Matrix<double>& product) {
  return (Matrix<double>::Identity(product.rows(), product.cols()) - product).stableNorm();  // no overflow
}

/// Exact pseudoinverse of M by SVD in double (docs/mathematics.md §4; spectral.hpp's dense_svd, LAPACK
/// dgesdd): singular values ≤ cut·σ₁ are dropped.
template <class T>
void exact_pseudoinverse(const Matrix<T>& M, double cut, PinvResult<T>& result) {
  const DenseSvd svd = dense_svd<T>(M, SvdVectors::thin);
  const Vector<double>& sigma = svd.values;
  const double threshold = sigma.size() > 0 ? cut * sigma(0) : 0;
  Vector<double> inverse = Vector<double>::Zero(sigma.size());
  for (Index i = 0; i < sigma.size(); ++i) {
    if (sigma(i) > threshold) {
      inverse(i) = 1 / sigma(i);
      ++result.rank;
    }
  }
  result.z = (svd.v * inverse.asDiagonal() * svd.u.transpose()).template cast<T>();
  result.residuals.push_back(
      identity_residual(product_in_double(M.template cast<double>().eval(), result.z)));
  result.status = PinvStatus::converged;
}

/// One step of the iteration on M from Z and MZ (the product the residual was measured on, rounded to T):
/// Razavi Z ← ¼ Z(13I − MZ(15I − MZ(7I − MZ))) (Nyströmformer eq. (15), PnP-Nystra §3) or Newton–Schulz X ←
/// X(2I − MX) (LaplacianFormer Alg. 1).
template <class T>
Matrix<T> iteration_step(PinvMethod method, const Matrix<T>& Z, const Matrix<T>& MZ) {
  const Index m = Z.rows();
  const Matrix<T> identity = Matrix<T>::Identity(m, m);
  if (method == PinvMethod::newton_schulz) return Z * (T(2) * identity - MZ);
  const Matrix<T> inner = MZ * (T(7) * identity - MZ);
  const Matrix<T> middle = MZ * (T(15) * identity - inner);
  return T(0.25) * (Z * (T(13) * identity - middle));
}

/// Runs the iteration from Z₀ = αMᵀ, recording ‖I − MZ_k‖_F in double and stopping at convergence, divergence
/// or a non-finite value; each MZ_k is formed once, in double, for its residual and the next step.
/// Divergence: the residual exceeds its starting value, or grows from one step to the next by more than
/// rounding (c·m·eps·‖M‖_F‖Z‖_F). In exact arithmetic inside the monotone ranges (ασ₁² < 2 Newton–Schulz,
/// ασ₁² < 3 Razavi) every direction's residual shrinks, so neither happens (docs/mathematics.md §4).
template <class T>
void iterative_pseudoinverse(const Matrix<T>& M, const PinvOptions& options, PinvResult<T>& result) {
  const Index m = M.rows();
  result.alpha = options.alpha > 0 ? options.alpha : safe_alpha<T>(M);
  // Z₀ = αMᵀ formed in double: α itself may lie beyond float's range (1e40 for a core of 1e-20).
  const Matrix<double> M_double = M.template cast<double>();
  result.z = (result.alpha * M_double.transpose()).template cast<T>();
  Matrix<double> product = product_in_double(M_double, result.z);
  result.residuals.push_back(identity_residual(product));
  const double start = result.residuals.front();
  const double rounding =
      16.0 * static_cast<double>(m) * std::numeric_limits<T>::epsilon() * static_cast<double>(M.norm());
  result.status = PinvStatus::completed;
  if (!std::isfinite(start) || !result.z.allFinite()) {
    result.status = PinvStatus::non_finite;
    return;
  }
  if (options.tolerance > 0 && start <= options.tolerance) {
    result.status = PinvStatus::converged;
    return;
  }
  for (int k = 1; k <= options.iterations; ++k) {
    result.z = iteration_step<T>(options.method, result.z, product.template cast<T>());
    result.iterations = k;
    product = product_in_double(M_double, result.z);
    const double residual = identity_residual(product);
    const double previous = result.residuals.back();
    result.residuals.push_back(residual);
    if (!std::isfinite(residual) || !result.z.allFinite()) {
      result.status = PinvStatus::non_finite;
      return;
    }
    if (options.tolerance > 0 && residual <= options.tolerance) {
      result.status = PinvStatus::converged;
      return;
    }
    const double noise = rounding * static_cast<double>(result.z.norm());
    if (residual > start + noise || residual > previous + noise) {
      result.status = PinvStatus::diverged;
      return;
    }
  }
}

}  // namespace

template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  options.validate();
  require(A.rows() == A.cols(), "pinv: A must be square, got ", A.rows(), "x", A.cols());
  require(A.rows() >= 1, "pinv: A is empty (", A.rows(), "x", A.cols(), ")");
  require_finite(A, "pinv: A");

  // The matrix actually inverted: A, A + εI (shift), or AᵀA + εI (Tikhonov; then Z = M⁻¹Aᵀ).
  const Index m = A.rows();
  const Matrix<T> M = inverted_matrix<T>(A, options);

  PinvResult<T> result;
  if (options.method == PinvMethod::exact) {
    const double cut = options.tolerance > 0 ? options.tolerance
                                             : static_cast<double>(m) * std::numeric_limits<T>::epsilon();
    exact_pseudoinverse(M, cut, result);
  } else {
    iterative_pseudoinverse(M, options, result);
  }
  if (options.tikhonov > 0) result.z = (result.z * A.transpose()).eval();
  return result;
}

template <class T>
PinvResult<T> core_pseudoinverse(const ConstMatrixRef<T>& core, const PinvOptions& options) {
  if (all_finite(core)) return pseudoinverse<T>(core, options);
  PinvResult<T> result;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  result.z = Matrix<T>::Constant(core.rows(), core.cols(), T(nan));
  result.status = PinvStatus::non_finite;
  result.residuals.push_back(nan);
  return result;
}

template PinvResult<float> core_pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template PinvResult<double> core_pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&);
template double batch_alpha<float>(const std::vector<Matrix<float>>&);
template double batch_alpha<double>(const std::vector<Matrix<double>>&);
template Matrix<float> inverted_matrix<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template Matrix<double> inverted_matrix<double>(const ConstMatrixRef<double>&, const PinvOptions&);
template double safe_alpha<float>(const ConstMatrixRef<float>&);
template double safe_alpha<double>(const ConstMatrixRef<double>&);
template PinvResult<float> pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template PinvResult<double> pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&);

}  // namespace nystrom
