#pragma once
/// @file matrix_errors.hpp
/// The error measures of a point (internal to the library; evaluation.hpp states the rules): ‖·‖₂ of a stored
/// matrix by the dense-or-Lanczos rule, ‖A − B‖_F accumulated in row panels, and the errors of a kernel
/// approximation Ĝ against G or of an implied attention matrix Ŝ against S = D⁻¹G, dense or matrix-free.

#include <algorithm>
#include <cmath>
#include <limits>

#include "nystrom/backend.hpp"
#include "nystrom/certificates.hpp"
#include "nystrom/detail/power_of_two.hpp"
#include "nystrom/error.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/factored_operator.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/spectral.hpp"

namespace nystrom::detail {

/// ‖E‖₂, ‖E‖_F and the certificate of ‖E‖₂ of one error matrix (NaN where the approximation is not finite;
/// spectral NaN where only the certificate was asked for, EvaluationOptions::certificates_only).
struct MatrixErrors {
  static constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  double spectral = nan, frobenius = nan;
  double spectral_lower = nan, spectral_upper = nan, failure = nan;  ///< NormCertificate's

  /// The certificate's bounds of an operator (norm_certificate).
  void certify(const NormCertificate& certificate) {
    spectral_lower = certificate.lower;
    spectral_upper = certificate.upper;
    failure = certificate.failure_probability;
  }
  /// Every norm and bound multiplied by 2ᵖ (of a matrix measured scaled by 2⁻ᵖ).
  MatrixErrors times_power_of_two(int p) const {
    MatrixErrors out = *this;
    for (double* value : {&out.spectral, &out.frobenius, &out.spectral_lower, &out.spectral_upper})
      *value = std::ldexp(*value, p);
    return out;
  }
};

/// ‖op‖₂ by Lanczos (spectral_norm) unless only certificates are asked for, and the certificate of ‖op‖₂.
template <class Operator>
MatrixErrors operator_errors(const Operator& op, const EvaluationOptions& options) {
  MatrixErrors errors;
  if (!options.certificates_only) errors.spectral = spectral_norm(op, options.spectral).values(0);
  errors.certify(norm_certificate(op, options.certificate));
  return errors;
}

/// 2ᵖ·norm(2⁻ᵖA) for a norm of degree 1 of a stored A whose entries lie beyond a quarter of T's exponent
/// range (2ᵖ ≤ max|aᵢⱼ| < 2ᵖ⁺¹), where the squares in its Gram products or sums would overflow or underflow;
/// norm(A) itself otherwise, without a copy. Exact: the scaling is by a power of two.
template <class T, class Norm>
double scaled_norm(const Matrix<T>& a, const Norm& norm) {
  const int p = largest_exponent(a);
  if (std::abs(p) <= std::numeric_limits<T>::max_exponent / 4) return norm(a);
  return std::ldexp(norm(Matrix<T>(times_power_of_two(a, -p))), p);
}

/// ‖A‖₂ of a stored matrix: Lanczos on the stored matrix (one-pass Gram products, σ₁² to options.spectral's
/// relative tolerance), and where it does not converge the full SVD up to options.dense_svd_limit; NaN for a
/// matrix with NaN or ±Inf entries. Only σ₁ is needed: at N = 256 Lanczos took a third of the full SVD's time
/// and agreed with it to 3e-15 (the default sweep on the bundled dump).
template <class T>
double stored_norm(const Matrix<T>& a, const EvaluationOptions& options) {
  if (!all_finite(a)) return std::numeric_limits<double>::quiet_NaN();
  return scaled_norm(a, [&](const Matrix<T>& x) {
    const SpectralResult lanczos = spectral_norm(DenseOperator<T>(x), options.spectral);
    if (!lanczos.converged && std::max(x.rows(), x.cols()) <= options.dense_svd_limit)
      return singular_values<T>(x)(0);
    return lanczos.values(0);
  });
}

/// ‖E‖₂ (stored_norm's rule, unless only certificates are asked for), ‖E‖_F and the certificate of ‖E‖₂ of a
/// stored error matrix, on 2⁻ᵖE where E's entries lie beyond a quarter of T's exponent range (scaled_norm).
template <class T>
MatrixErrors stored_errors(const Matrix<T>& error, const EvaluationOptions& options) {
  if (!all_finite(error)) return {};  // an approximation that overflows although its factors do not
  const auto measure = [&](const Matrix<T>& x) {
    MatrixErrors errors;
    if (!options.certificates_only) errors.spectral = stored_norm(x, options);
    errors.frobenius = frobenius_norm<T>(x);
    errors.certify(norm_certificate(DenseOperator<T>(x), options.certificate));
    return errors;
  };
  const int p = largest_exponent(error);
  if (std::abs(p) <= std::numeric_limits<T>::max_exponent / 4) return measure(error);
  return measure(Matrix<T>(nystrom::times_power_of_two(error, -p))).times_power_of_two(p);
}

/// The errors `compute()` gives of a matrix-free error operator, or NaN where one of its products is not
/// finite: an approximation that overflows although every factor is finite (C Z Cᵀ of a huge Z), as
/// stored_errors gives for a stored one.
template <class Compute>
MatrixErrors unless_overflowing(const Compute& compute) {
  try {
    return compute();
  } catch (const NonFiniteProduct&) {
    return {};
  }
}

/// ‖A − B‖_F for N×N matrices given by their row panels, `exact(first, count)` and `approximate(first,
/// count)` (count×N each), evaluated panel by panel over the threads (reduce_over_panels) and accumulated in
/// double; `work` is the multiply-adds of the whole sweep. Nothing N×N is stored.
template <class T, class Exact, class Approximate>
double panel_frobenius(Index n, Index panel_rows, double work, const Exact& exact,
                       const Approximate& approximate) {
  const Vector<double> total =
      reduce_over_panels(n, panel_rows, 1, work, [&](Index first, Index count, Vector<double>& partial) {
        Matrix<T> block = exact(first, count);
        block -= approximate(first, count);
        partial(0) += block.template cast<double>().squaredNorm();
      });
  return std::sqrt(total(0));
}

/// The exponent p of a bound on Ĝ_c's entries, max_i ‖(M_L G_L)_i‖ · max_j ‖(Z G_U)_j‖ (Cauchy–Schwarz;
/// O(m²N), in logarithms), where it passes 2²⁵⁶, a quarter of double's exponent range, beyond which the Gram
/// products of E_c = G_c − Ĝ_c in double overflow (an approximation that blows up although every factor is
/// finite); 0 otherwise and where the bound is not finite. On κ_c the blocks' entries are at most 1 (row-max
/// and log-shifted exponentials) or e^τ (clamped), so such a Ĝ_c owes its size to Z.
template <class T>
int error_scale_exponent(const NystromFactors<T>& factors) {
  const Matrix<double> right = factors.pinv.z.template cast<double>() * factors.upper.template cast<double>();
  const Vector<double> left = factors.left.template cast<double>().rowwise().stableNorm().array().log() +
                              factors.left_log_scale.template cast<double>().array();
  const double exponent =
      std::floor((left.maxCoeff() + std::log(right.colwise().stableNorm().maxCoeff())) / std::log(2.0));
  if (!std::isfinite(exponent) || exponent <= std::numeric_limits<double>::max_exponent / 4) return 0;
  return int(exponent);
}

/// ‖G_c − Ĝ_c‖₂ and ‖G_c − Ĝ_c‖_F of kernel factors, matrix-free: Lanczos on error_operator (on
/// options.device, products in double) and the Frobenius norm in row panels of κ_c on the host; where
/// error_scale_exponent gives p ≠ 0, both on κ_{c + p ln 2}, whose Ĝ is 2⁻ᵖĜ_c exactly (Z scaled by 2⁻ᵖ),
/// multiplied back by 2ᵖ.
template <class T>
MatrixErrors matrix_free_kernel_errors(const Head<T>& head, const NystromFactors<T>& factors,
                                       const EvaluationOptions& options) {
  if (const int p = error_scale_exponent(factors); p != 0) {
    NystromFactors<T> scaled = factors;
    scaled.pinv.z = times_power_of_two(factors.pinv.z, -p);
    scaled.options.kernel.log_shift += p * std::log(2.0);
    return matrix_free_kernel_errors(head, scaled, options).times_power_of_two(p);
  }
  MatrixErrors errors = operator_errors(
      error_operator<T, double>(options.device, head.q, head.k, factors, options.tiling()), options);
  const Kernel& kernel = factors.options.kernel;
  const Matrix<T> right = factors.pinv.z * factors.upper;  // Z G_U, m×N
  const Vector<T> row_scale = factors.left_log_scale.array().exp();
  const double work =
      double(head.q.rows()) * double(head.k.rows()) * double(head.q.cols() + factors.left.cols());
  errors.frobenius = panel_frobenius<T>(
      head.q.rows(), options.panel_rows, work,
      [&](Index first, Index count) { return kernel.block<T>(head.q.middleRows(first, count), head.k); },
      [&](Index first, Index count) {
        Matrix<T> rows = factors.left.middleRows(first, count) * right;
        rows.array().colwise() *= row_scale.segment(first, count).array();
        return rows;
      });
  return errors;
}

/// ‖S − Ŝ‖₂ and ‖S − Ŝ‖_F for S = D⁻¹G_c (row sums `row_sums` = G_c 1) and an implied attention matrix,
/// matrix-free: Lanczos on the difference of the row-scaled kernel operator (on options.device) and Ŝ in
/// double, the Frobenius norm in row panels of κ_c on the host.
template <class T>
MatrixErrors matrix_free_attention_errors(const Head<T>& head, const Kernel& shifted,
                                          const Vector<double>& row_sums, const FactoredOperator<T>& implied,
                                          const EvaluationOptions& options) {
  const AnyOperator<double> g =
      kernel_operator<T, double>(options.device, head.q, head.k, shifted, options.tiling());
  const RowScaledOperator<AnyOperator<double>> exact(g, row_sums.cwiseInverse());
  const FactoredOperator<double> approximate(
      implied.left().template cast<double>(), implied.middle().template cast<double>(),
      implied.right().template cast<double>(), implied.row_scale().template cast<double>());
  const DifferenceOperator<RowScaledOperator<AnyOperator<double>>, FactoredOperator<double>> difference(
      exact, approximate);
  MatrixErrors errors = operator_errors(difference, options);
  const Matrix<T> right =
      implied.middle().size() ? Matrix<T>(implied.middle() * implied.right()) : implied.right();
  const Vector<T> inverse_sums = row_sums.cwiseInverse().template cast<T>();
  const double work = double(head.q.rows()) * double(head.k.rows()) * double(head.q.cols() + right.rows());
  errors.frobenius = panel_frobenius<T>(
      head.q.rows(), options.panel_rows, work,
      [&](Index first, Index count) {
        Matrix<T> rows = shifted.block<T>(head.q.middleRows(first, count), head.k);
        rows.array().colwise() *= inverse_sums.segment(first, count).array();
        return rows;
      },
      [&](Index first, Index count) {
        Matrix<T> rows = implied.left().middleRows(first, count) * right;
        if (implied.row_scale().size())
          rows.array().colwise() *= implied.row_scale().segment(first, count).array();
        return rows;
      });
  return errors;
}

/// True when every factor of Ĝ is finite (a numerical failure, e.g. plain blocks that overflowed, leaves the
/// errors NaN instead of feeding NaN into a Lanczos run).
template <class T>
bool finite_factors(const NystromFactors<T>& f) {
  return all_finite(f.left) && all_finite(f.upper) && all_finite(f.pinv.z) && all_finite(f.left_log_scale);
}

/// True when every factor of Ŝ is finite.
template <class T>
bool finite_factors(const FactoredOperator<T>& f) {
  return all_finite(f.left()) && all_finite(f.middle()) && all_finite(f.right()) && all_finite(f.row_scale());
}

}  // namespace nystrom::detail
