#pragma once
/// @file pinv.hpp
/// Pseudoinverse of the m×m core G_A (MATH.md §4): exact (SVD with a relative cut), Razavi's third-order
/// iteration (Nyströmformer, PnP-Nystra), Newton–Schulz (LaplacianFormer); optional Tikhonov or εI
/// regularization. A numerical failure is a status, never an exception.

#include <string>
#include <vector>

#include "nystrom/types.hpp"

namespace nystrom {

/// Pseudoinverse methods (MATH.md §4).
enum class PinvMethod {
  exact,         ///< SVD; singular values ≤ tol·σ₁ are dropped
  razavi,        ///< Z ← ¼ Z(13I − AZ(15I − AZ(7I − AZ))), Z₀ = αAᵀ
  newton_schulz  ///< X ← X(2I − AX), X₀ = αAᵀ
};

/// "exact", "razavi", "newton-schulz".
std::string to_string(PinvMethod method);
/// Inverse of to_string; throws std::invalid_argument naming an unknown method.
PinvMethod pinv_method_from_string(const std::string& name);

/// How an iteration ended.
enum class PinvStatus {
  converged,  ///< exact method, or the residual ‖I − AZ‖_F fell below `tolerance`
  completed,  ///< ran every requested iteration, finite and not diverging, without reaching `tolerance`
  diverged,  ///< the residual grew past its starting value (α outside the convergence range, or a singular A)
  non_finite  ///< NaN or Inf appeared
};

/// "converged", "completed", "diverged", "non-finite".
std::string to_string(PinvStatus status);

/// Options for pseudoinverse.
struct PinvOptions {
  PinvMethod method = PinvMethod::exact;
  int iterations = 6;  ///< iterative methods: number of iterations (≥ 1)
  double alpha = 0;  ///< iterative start Z₀ = αAᵀ; 0 selects the per-matrix safe α = 1/(‖A‖₁‖A‖_∞)
  double tolerance =
      0;  ///< exact: relative singular-value cut (0: max(m)·eps); iterative: stop when ‖I−AZ‖_F ≤ it
  double tikhonov = 0;  ///< ε > 0: invert (AᵀA + εI)⁻¹Aᵀ instead of A⁺ (non-symmetric safe regularization)
  double shift = 0;  ///< ε > 0: invert A + εI (LaplacianFormer; valid for symmetric PSD A)

  /// Throws std::invalid_argument naming the bad value (iterations < 1, α < 0, negative ε, non-finite
  /// values).
  void validate() const;
};

/// A pseudoinverse with its diagnostics.
template <class T>
struct PinvResult {
  Matrix<T> z;  ///< Z ≈ A⁺ (m×m)
  PinvStatus status = PinvStatus::converged;
  double alpha = 0;               ///< α used by an iterative method (0 for exact)
  int iterations = 0;             ///< iterations run
  std::vector<double> residuals;  ///< ‖I − AZ_k‖_F for k = 0 (start) .. iterations; one entry for exact
  Index rank = 0;                 ///< exact: singular values kept
  double residual() const { return residuals.empty() ? 0.0 : residuals.back(); }
};

/// The safe per-matrix starting scale α = 1/(‖A‖₁‖A‖_∞) (Nyströmformer's "exact" init); ασ₁² ≤ 1.
template <class T>
double safe_alpha(const ConstMatrixRef<T>& A);

/// Z ≈ A⁺ for a square A by `options`; the residuals are computed in double.
template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options);

}  // namespace nystrom
