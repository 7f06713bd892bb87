#pragma once
/// @file spectral.hpp
/// Spectral tools (MATH.md §7): ‖A‖₂ and top-k singular values of any operator (operators.hpp) by Lanczos
/// (Spectra's SymEigsSolver on AᵀA or AAᵀ, whichever is smaller), with a dense SVD path for small sizes;
/// numerical rank, normalized decay and energy fractions of a spectrum.

#include "nystrom/types.hpp"

namespace nystrom {

/// Options for the Lanczos solvers.
struct SpectralOptions {
  int subspace = 0;              ///< Lanczos basis size ncv (0: max(2k + 1, 20), capped at the operator size)
  int max_restarts = 1000;       ///< Spectra's maxit
  double tolerance = 1e-13;      ///< relative tolerance on the eigenvalues of AᵀA
  void validate() const;
};

/// A Lanczos result with its cost.
struct SpectralResult {
  Vector<double> values;  ///< singular values, σ₁ first
  int matvecs = 0;        ///< operator products (A and Aᵀ each count one)
  bool converged = false;
};

/// Top-k singular values of `op` by Lanczos (Spectra). k < min(rows, cols).
template <class Operator>
SpectralResult top_singular_values(const Operator& op, Index k, const SpectralOptions& options = {});

/// ‖op‖₂ by Lanczos (k = 1).
template <class Operator>
SpectralResult spectral_norm(const Operator& op, const SpectralOptions& options = {});

/// All singular values of a dense matrix (full SVD in double), σ₁ first: the oracle and the small-N path.
template <class T>
Vector<double> singular_values(const ConstMatrixRef<T>& a);

/// Number of singular values > tol·σ₁ (tol ≤ 0: max(rows, cols)·eps of T).
Index numerical_rank(const Vector<double>& singular_values, double tol);

/// Fraction of Σσᵢ² captured by the first k singular values (of those given).
double energy_fraction(const Vector<double>& singular_values, Index k);

/// ‖A‖_F of a dense matrix accumulated in double.
template <class T>
double frobenius_norm(const ConstMatrixRef<T>& a);

}  // namespace nystrom

#include "nystrom/spectral_impl.hpp"
