#pragma once
/// @file bounds.hpp
/// The Lemma 2.1 error-bound terms and the derived explicit bounds of docs/mathematics.md §3. With σ₁ =
/// σ₁(G̃), σ_{m+1} = σ_{m+1}(G̃) as computed, σ̄ = σ_{m+1} + its margin (the most the exact value can lie
/// above the computed one), a = σ_m(G_A):
///   ratio      σ_{m+1}/a                                    (a term, always reported)
///   theorem 1  ‖E‖₂ ≤ σ₁²/(a − σ̄) · σ̄/a                    applies when a > σ̄
///   theorem 2  ‖E‖₂ ≤ 2σ₁² σ̄/a²                            applies when a > 0
///   theorem 3  ‖E‖₂ ≤ K σ̄, K = (1+‖G_L G_A⁻¹‖₂)(1+‖G_A⁻¹G_U‖₂)   applies when K σ̄ < a
///   C_emp = ‖E‖₂ · a / σ_{m+1}, and C_emp / σ₁²
/// Every bound increases with σ_{m+1}, so evaluated at σ̄ it bounds the exact statement's value; a hypothesis
/// a > σ_{m+1} that only rounding could make true is not taken as met. A bound that does not apply is NaN
/// with its flag false.

#include <algorithm>
#include <cmath>
#include <limits>

#include "nystrom/types.hpp"

namespace nystrom {

/// The spectral quantities the bounds are built from.
struct BoundInputs {
  double sigma1_ext = 0;      ///< σ₁(G̃)
  double sigma_m1_ext = 0;    ///< σ_{m+1}(G̃)
  double sigma_m_core = 0;    ///< σ_m(G_A)
  double spectral_error = 0;  ///< ‖G − Ĝ‖₂ (measured)
  double theorem3_k = 0;  ///< K = (1+‖G_L G_A⁻¹‖₂)(1+‖G_A⁻¹G_U‖₂) (Inf for a singular G_A)
  double sigma_m1_margin = 0;  ///< how far the exact σ_{m+1}(G̃) may lie above sigma_m1_ext (LandmarkTerms)
};

/// Every bound of docs/mathematics.md §3 with whether it applies and whether the measured error respects it.
struct BoundReport {
  double ratio = 0;
  double theorem1 = 0;
  double theorem2 = 0;
  double theorem3 = 0;
  double theorem3_k = 0;
  double c_emp = 0;
  double c_emp_normalized = 0;  ///< C_emp / σ₁²
  double spectral_error = 0;    ///< the measured ‖E‖₂ the bounds are checked against
  double sigma1_ext = 0;        ///< σ₁(G̃), the scale of rounding in E
  bool theorem1_applies = false;
  bool theorem2_applies = false;  ///< false only when σ_m(G_A) = 0
  bool theorem3_applies = false;
  /// True when every applicable bound B satisfies ‖E‖₂ ≤ B + slack·(B + σ₁(G̃)) (rounding in E is relative to
  /// σ₁; bound_slack for an E computed in a given precision). Throws std::invalid_argument unless slack is
  /// finite and ≥ 0.
  bool holds(double slack = 1e-10) const;
};

/// (N + m)·eps(T): the relative rounding floor of a singular value or of E for a matrix of order N + m whose
/// entries are computed in T (what a full SVD of G̃ reaches too).
template <class T>
double rounding_factor(Index n, Index m) {
  return double(n + m) * double(std::numeric_limits<T>::epsilon());
}

/// The margin of a σ_{m+1}(G̃) computed as `sigma_m1` with certificate `certificate` (SpectralResult::
/// last_error_bound: 0 for a full SVD, NaN when Lanczos gave none) from entries computed in T: the larger of
/// the certificate and the rounding floor rounding_factor<T>(n, m)·σ₁(G̃).
template <class T>
double sigma_m1_margin(Index n, Index m, double sigma1_ext, double certificate) {
  return std::fmax(certificate, rounding_factor<T>(n, m) * sigma1_ext);
}

/// The slack of BoundReport::holds for an error of an approximation computed in T from N tokens and m
/// landmarks: max(10⁻¹⁰, (N + m)·eps(T)·max(1, σ₁(G̃)/σ_m(G_A))), the larger of a fixed margin and the
/// rounding floor of E relative to σ₁ (the floor a full SVD has too), which solving with G_A amplifies by up
/// to its condition number σ₁(G_A)/σ_m(G_A) ≤ σ₁(G̃)/σ_m(G_A) (Higham, Accuracy and Stability of Numerical
/// Algorithms, §7.1: the forward error of a backward-stable solve). In double it is 10⁻¹⁰ below N + m ≈
/// 450,000 for a well-conditioned core; in float an exactly recovered kernel (Corollary 2.2) leaves E at
/// float rounding, about eps(float)·σ₁, far above 10⁻¹⁰σ₁. A singular or unknown σ_m(G_A) adds no factor (no
/// bound applies).
template <class T>
double bound_slack(Index n, Index m, double sigma1_ext = 0, double sigma_m_core = 0) {
  const double condition = sigma_m_core > 0 && sigma1_ext > sigma_m_core ? sigma1_ext / sigma_m_core : 1.0;
  const double slack = std::max(1e-10, rounding_factor<T>(n, m) * condition);
  return std::min(slack, std::numeric_limits<double>::max());  // finite, as holds requires
}

/// Evaluates the bounds from their inputs, in units of σ₁(G̃) (any kernel scale double holds). NaN inputs
/// are unknowns (NaN bounds); throws std::invalid_argument for a negative value or theorem3_k < 0.
BoundReport evaluate_bounds(const BoundInputs& inputs);

/// The core's terms of the bounds: σ_m(G_A) and Theorem 3's K.
struct CoreTerms {
  double sigma_m_core = 0;  ///< σ_m(G_A)
  double theorem3_k = 0;  ///< K = (1+‖G_L G_A⁻¹‖₂)(1+‖G_A⁻¹G_U‖₂), +Inf for a numerically singular G_A
};

/// σ_m(G_A) and K for the unscaled blocks G_L, G_A, G_U (N×m, m×m, m×N), in double on the blocks divided by
/// a common power of two (K is scale-invariant): σ_m from the values-only SVD of G_A, which also decides
/// whether G_A is numerically singular (σ_m ≤ m·eps·σ₁: K = +Inf); G_L G_A⁻¹ and G_A⁻¹G_U by LU solves with
/// G_A and their norms from their smaller Gram matrices. Throws std::invalid_argument naming the block for
/// mismatched shapes or non-finite entries.
template <class T>
CoreTerms core_terms(const ConstMatrixRef<T>& left, const ConstMatrixRef<T>& core,
                     const ConstMatrixRef<T>& upper);

/// K of core_terms alone.
template <class T>
double theorem3_constant(const ConstMatrixRef<T>& left, const ConstMatrixRef<T>& core,
                         const ConstMatrixRef<T>& upper);

}  // namespace nystrom
