#pragma once
/// @file spectral.hpp
/// Spectral tools (docs/mathematics.md §7): ‖A‖₂ and top-k singular values of any operator (operators.hpp) by
/// Lanczos (Spectra's SymEigsSolver on AᵀA or AAᵀ, whichever is smaller, or on [[0, A], [Aᵀ, 0]] where small
/// singular values matter), with a dense SVD path for small sizes; numerical rank, normalized decay and
/// energy fractions of a spectrum.

#include <stdexcept>

#include "nystrom/types.hpp"

namespace nystrom {

/// Options for the Lanczos solvers.
struct SpectralOptions {
  int subspace = 0;  ///< Spectra's Lanczos basis size ncv (0: max(2k + 1, 10), capped at the operator size)
  int max_restarts = 1000;   ///< Spectra's maxit
  double tolerance = 1e-13;  ///< relative tolerance on the eigenvalues of AᵀA
  /// Throws std::invalid_argument naming the bad value (subspace < 0, max_restarts < 1, tolerance ≤ 0 or not
  /// finite).
  void validate() const;
};

/// What the Lanczos solvers throw where a product of the operator is not finite (an entry overflows or is
/// NaN): an std::invalid_argument, its own type for callers that record such an operator's norm as NaN.
struct NonFiniteProduct : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// A Lanczos result with its cost.
struct SpectralResult {
  Vector<double> values;  ///< singular values, σ₁ first
  int matvecs = 0;        ///< operator products (A and Aᵀ each count one)
  bool converged = false;
  /// Certificate of the last value σ_k: some singular value of the operator lies within this distance of it
  /// (residual bound on the Jordan–Wielandt matrix [[0, A], [Aᵀ, 0]] for σ_k's Ritz vector, checked with two
  /// more products, so it holds whatever squaring cost the Lanczos run; docs/mathematics.md §7). It cannot
  /// fall below the rounding of the products themselves, about eps·σ₁. 0 on the full-SVD paths, NaN where
  /// Lanczos did not return k values.
  double last_error_bound = 0;
};

/// Top-k singular values of `op` (1 ≤ k ≤ min(rows, cols)) by Lanczos in double on AᵀA or AAᵀ, whichever is
/// smaller: block Lanczos (full reorthogonalization, 4 vectors per one-pass block Gram product) where the
/// operator offers block Gram products (a stored matrix, operators.hpp's DenseOperator), else Spectra's
/// restarted SymEigsSolver using a one-pass Gram product when the operator offers one (and also where the
/// block basis would outgrow max(10(k + 4), 240) vectors). When the Lanczos basis would cover the whole Gram
/// matrix (small sizes), the operator is formed densely from its products and its singular values come from a
/// full SVD instead; so do a stored matrix's when k ≥ min(rows, cols)/6, where the full SVD is the faster.
/// Squaring limits accuracy in the worst case to an absolute error of about eps·σ₁²/σ_i on σ_i (in practice,
/// with accurate products, the values found come out far better, near eps·σ₁): `last_error_bound` says what
/// σ_k holds.
template <class Operator>
SpectralResult top_singular_values(const Operator& op, Index k, const SpectralOptions& options = {});

/// Top-k singular values of `op` by Lanczos (Spectra's SymEigsSolver) on the symmetric augmented operator
/// [[0, A], [Aᵀ, 0]], whose k largest eigenvalues are σ₁ … σ_k; one operator pass per product when the
/// operator offers perform_augmented_op. No squaring: σ_i carries an absolute error of about eps·σ₁ (against
/// eps·σ₁²/σ_i for top_singular_values), so values down to about eps·σ₁/tolerance are resolved; it needs
/// more products than the Gram form for the same accuracy of σ₁. Full SVD of the formed operator when the
/// basis would span it.
template <class Operator>
SpectralResult top_singular_values_augmented(const Operator& op, Index k,
                                             const SpectralOptions& options = {});

/// ‖op‖₂ by Lanczos on the augmented operator (k = 1).
template <class Operator>
SpectralResult augmented_spectral_norm(const Operator& op, const SpectralOptions& options = {});

/// ‖op‖₂ by Lanczos (k = 1).
template <class Operator>
SpectralResult spectral_norm(const Operator& op, const SpectralOptions& options = {});

/// Which parts of a dense SVD to compute.
enum class SvdVectors {
  none,  ///< singular values only (LAPACK jobz = 'N')
  thin   ///< also the thin U (rows×p) and V (cols×p), p = min(rows, cols) (jobz = 'S')
};

/// A thin singular value decomposition A = U diag(σ) Vᵀ of a dense rows×cols matrix, p = min(rows, cols).
struct DenseSvd {
  Vector<double> values;  ///< σ₁ ≥ … ≥ σ_p ≥ 0
  Matrix<double> u;       ///< rows×p left singular vectors (empty for SvdVectors::none)
  Matrix<double> v;       ///< cols×p right singular vectors (empty for SvdVectors::none)
};

/// The SVD of a dense matrix by LAPACK's dgesdd (divide and conquer) through LAPACKE, retried with dgesvd
/// (QR iteration) where dgesdd does not converge. Always computed in double: a float matrix is widened
/// (exactly), so the result is the SVD of the float matrix to double accuracy (absolute error about
/// p·eps(double)·σ₁ on every σ_i, so exactly rank-deficient matrices give trailing values at that floor).
/// O(rows·cols·p) time, one double copy of the matrix. Throws std::invalid_argument for NaN or Inf entries
/// or sides beyond LAPACK's 32-bit index, std::runtime_error naming both drivers, the shape and LAPACK's info
/// when neither converges.
template <class T>
DenseSvd dense_svd(const ConstMatrixRef<T>& a, SvdVectors vectors = SvdVectors::none);

/// All singular values of a dense matrix, σ₁ first: dense_svd's values (LAPACK dgesdd, jobz = 'N', in
/// double). The oracle of the Lanczos paths and their small-size path.
template <class T>
Vector<double> singular_values(const ConstMatrixRef<T>& a);

/// Number of singular values > tol·σ₁ (tol ≤ 0: n·eps(double) for n values). Throws std::invalid_argument
/// naming the value for a singular value that is not finite or is negative, or a NaN tol.
Index numerical_rank(const Vector<double>& singular_values, double tol);

/// Fraction of Σσᵢ² captured by the first k singular values (of those given); 0 ≤ k ≤ their count. Computed
/// on σ/σ_max, so it does not overflow for values near the top of double's range. Throws as numerical_rank.
double energy_fraction(const Vector<double>& singular_values, Index k);

/// ‖A‖_F of a dense matrix accumulated in double.
template <class T>
double frobenius_norm(const ConstMatrixRef<T>& a);

}  // namespace nystrom

#include "nystrom/detail/spectral_impl.hpp"
