#pragma once
/// @file matrix_free.hpp
/// Matrix-free analysis of large kernels (MATH.md §7): ‖G − Ĝ‖₂, ‖G‖₂ and the top-k spectrum of G = κ(Q, K)
/// for N up to 65,536 without storing an N×N matrix. Kernel tiles (row panel × column tile) are evaluated on
/// the fly, threaded with OpenMP, and every product is accumulated in double:
///   exponential  logits s·Q_P K_Cᵀ by a GEMM in T, then exp in double
///   Laplacian    ‖q − k‖₁ by a register-blocked, auto-vectorized tile loop in T, then exp(−·/λ) in double
///   Gaussian     ‖q − k‖₂² by the same loop, then exp(−·/(2h²)) in double
///
/// Cost model: one *kernel pass* evaluates every entry of G once (O(N²d)); everything else is O(Nm) per
/// product. The fused Gram products EᵀE x = Σ_P E_Pᵀ (E_P x) and EEᵀ x cost ONE pass each: a row panel E_P is
/// evaluated once, kept (panel_rows × N doubles per thread), multiplied by x, then its transpose by the
/// panel's part of E x. Lanczos on EᵀE therefore reaches a given accuracy in about half the kernel passes of
/// Lanczos on the augmented operator [[0, E], [Eᵀ, 0]] (also one pass per product, but its Chebyshev rate per
/// product is that of EᵀE per *two* products); bench/bench_matrix_free.cpp measures both. spectral.hpp's
/// Lanczos uses the fused Gram products automatically (perform_inner_gram_op / perform_outer_gram_op).

#include <Spectra/SymEigsSolver.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "nystrom/error.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Tiling of the matrix-free kernel passes.
struct MatrixFreeOptions {
  Index panel_rows =
      128;  ///< rows of G per panel (a thread's unit of work; Gram products keep one panel per thread)
  Index tile_cols =
      512;  ///< columns per tile: panel_rows × tile_cols entries are evaluated together (cache-sized)

  /// Throws std::invalid_argument naming the value unless both are ≥ 1.
  void validate() const;
};

/// Kernel passes over G = κ(X, Y) (X: rows×d, Y: cols×d) in tiles; stores copies of X and Y only
/// (O((rows+cols)d)). Every product below costs exactly one kernel pass (O(rows·cols·d)) and accumulates in
/// double.
template <class T>
class KernelPasses {
 public:
  KernelPasses(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
               const MatrixFreeOptions& options = {});

  Index rows() const { return x_.rows(); }
  Index cols() const { return y_.rows(); }
  const Kernel& kernel() const { return kernel_; }
  /// Number of kernel passes made so far.
  long passes() const { return passes_; }

  /// One pass computing whichever of these is requested (null pointers skip a term):
  ///   product   = G x                            (x: cols, product: rows)
  ///   transpose = Gᵀ u                           (u: rows, transpose: cols)
  /// With `gram` true, u is not an input: the pass forms r = G x − subtract (subtract: rows, may be null)
  /// panel by panel, writes r to `product` and Gᵀ r to `transpose`, i.e. the fused Gram product Gᵀ(G x −
  /// subtract).
  void pass(const double* x, const double* u, double* product, double* transpose, bool gram = false,
            const double* subtract = nullptr) const;

  /// The dense tile κ(X_{r0..r0+nr}, Y_{c0..c0+nc}) in double (tests and the dense comparison only).
  Matrix<double> tile(Index r0, Index nr, Index c0, Index nc) const;

 private:
  void evaluate_tile(Index r0, Index nr, Index c0, Index nc, Matrix<T>& exponent_buffer, double* out,
                     Index out_stride) const;

  Matrix<T> x_, y_;  ///< tokens; x_ pre-scaled by s for the exponential kernel (as Kernel::exponent does)
  Kernel kernel_;
  MatrixFreeOptions options_;
  mutable long passes_ = 0;
};

/// E = G − Ĝ (or G alone) as an operator of the concept in operators.hpp, in double, matrix-free:
/// Scalar = double; rows() cols() perform_op perform_transpose_op (one kernel pass each), plus the fused
/// one-pass Gram products perform_inner_gram_op (EᵀE x) and perform_outer_gram_op (EEᵀ x) that spectral.hpp's
/// Lanczos uses, and perform_augmented_op ([[0, E], [Eᵀ, 0]] in one pass). Ĝ products use the factors widened
/// to double, O(Nm).
template <class T>
class MatrixFreeOperator {
 public:
  using Scalar = double;

  /// G = κ(X, Y).
  MatrixFreeOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
                     const MatrixFreeOptions& options = {});
  /// E = κ(X, Y) − Ĝ with Ĝ from `factors` (of the same X, Y and kernel).
  MatrixFreeOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
                     const NystromFactors<T>& factors, const MatrixFreeOptions& options = {});

  Index rows() const { return forward_.rows(); }
  Index cols() const { return forward_.cols(); }
  /// Kernel passes made so far (both orientations).
  long passes() const { return forward_.passes() + backward_.passes(); }

  /// y = E x (x: cols, y: rows). One pass.
  void perform_op(const double* x, double* y) const;
  /// y = Eᵀ x (x: rows, y: cols). One pass over Gᵀ = κ(Y, X).
  void perform_transpose_op(const double* x, double* y) const;
  /// y = EᵀE x (x, y: cols). One pass: Σ_P E_Pᵀ(E_P x) over row panels, then − Ĝᵀ(E x).
  void perform_inner_gram_op(const double* x, double* y) const;
  /// y = EEᵀ x (x, y: rows). One pass over the row panels of Eᵀ.
  void perform_outer_gram_op(const double* x, double* y) const;
  /// [y_top; y_bottom] = [[0, E], [Eᵀ, 0]] [x_top; x_bottom] (x_top: rows, x_bottom: cols). One pass.
  void perform_augmented_op(const double* x, double* y) const;

 private:
  KernelPasses<T> forward_;   ///< G = κ(X, Y)
  KernelPasses<T> backward_;  ///< Gᵀ = κ(Y, X) (every kernel here is symmetric in its arguments)
  std::unique_ptr<NystromFactors<double>> approximation_;  ///< Ĝ in double, or null for G alone
  mutable Vector<double> scratch_rows_, scratch_cols_;
};

/// The symmetric augmented operator [[0, A], [Aᵀ, 0]] ((rows+cols)² , eigenvalues ±σᵢ(A)) of an operator with
/// perform_augmented_op, for Spectra. Kept for the comparison with the Gram products (bench_matrix_free).
template <class Operator>
class AugmentedOperator {
 public:
  using Scalar = double;
  explicit AugmentedOperator(const Operator& op) : op_(op) {}
  Index rows() const { return op_.rows() + op_.cols(); }
  Index cols() const { return rows(); }
  void perform_op(const double* x, double* y) const {
    op_.perform_augmented_op(x, y);
    ++products_;
  }
  int products() const { return products_; }

 private:
  const Operator& op_;
  mutable int products_ = 0;
};

/// ‖A‖₂ = λ_max([[0, A], [Aᵀ, 0]]) by Lanczos (Spectra) on the augmented operator. Same options as
/// spectral_norm.
template <class Operator>
SpectralResult augmented_spectral_norm(const Operator& op, const SpectralOptions& options = {}) {
  options.validate();
  AugmentedOperator<Operator> augmented(op);
  const Index size = augmented.rows();
  const Index basis = std::min<Index>(options.subspace > 0 ? std::max(options.subspace, 2) : 20, size - 1);
  require(basis >= 2,
          describe("augmented_spectral_norm: operator of size ", size, " is too small for Lanczos"));
  Spectra::SymEigsSolver<AugmentedOperator<Operator>> eigs(augmented, 1, basis);
  eigs.init();
  eigs.compute(Spectra::SortRule::LargestAlge, options.max_restarts, options.tolerance,
               Spectra::SortRule::LargestAlge);
  SpectralResult result;
  result.converged = eigs.info() == Spectra::CompInfo::Successful;
  result.matvecs = 2 * augmented.products();  // each augmented product applies A and Aᵀ
  result.values = result.converged ? Vector<double>(eigs.eigenvalues().cwiseMax(0.0))
                                   : Vector<double>::Constant(1, std::numeric_limits<double>::quiet_NaN());
  return result;
}

/// ‖G − Ĝ‖₂ for G = κ(Q, K) and Ĝ from `factors`, matrix-free (MATH.md §7). O(N²d) per Lanczos step, memory
/// O(N(d + m) + threads·panel_rows·N). `matvecs` counts E and Eᵀ products (2 per fused Gram step = 1 kernel
/// pass).
template <class T>
SpectralResult matrix_free_error_norm(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromFactors<T>& factors, const Kernel& kernel,
                                      const SpectralOptions& options = {},
                                      const MatrixFreeOptions& tiling = {});

/// ‖G‖₂ for G = κ(Q, K), matrix-free.
template <class T>
SpectralResult matrix_free_kernel_norm(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const Kernel& kernel, const SpectralOptions& options = {},
                                       const MatrixFreeOptions& tiling = {});

/// The top-k singular values of G = κ(Q, K), σ₁ first, matrix-free.
template <class T>
SpectralResult matrix_free_top_singular_values(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                               const Kernel& kernel, Index k,
                                               const SpectralOptions& options = {},
                                               const MatrixFreeOptions& tiling = {});

}  // namespace nystrom
