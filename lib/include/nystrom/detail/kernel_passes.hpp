#pragma once
/// @file kernel_passes.hpp
/// The tiled kernel evaluation behind every matrix-free kernel operator (operators.hpp's KernelOperator):
/// tiles of G = κ(X, Y) (row panel × column tile) evaluated on the fly, threaded with OpenMP, every product
/// accumulated in double (docs/mathematics.md §1, §7):
///   exponential  logits s·X_P Y_Cᵀ by a GEMM in T, then exp(· − c) in double
///   Laplacian    ‖x − y‖₁ by a register-blocked tile loop in T, then exp(−·/λ − c) in double
///   Gaussian     ‖x − y‖₂² by the same loop, then exp(−·/(2h²) − c) in double
/// with c the kernel's log_shift (kernels.hpp).
///
/// Cost model: one *kernel pass* evaluates every entry of G once (O(rows·cols·d)). A pass can form G x, Gᵀu
/// and the fused Gram product Gᵀ(G x − s) together: in the Gram pass a row panel G_P is evaluated once, kept
/// (panel_rows × cols doubles per thread), multiplied by x, then its transpose by the panel's part of G x −
/// s.

#include "nystrom/kernels.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Tiling of the kernel passes.
struct MatrixFreeOptions {
  Index panel_rows =
      128;  ///< rows of G per panel (a thread's unit of work; Gram passes keep one panel per thread)
  Index tile_cols =
      512;  ///< columns per tile: panel_rows × tile_cols entries are evaluated together (cache-sized)

  /// Throws std::invalid_argument naming the value unless both are ≥ 1.
  void validate() const;
};

/// Kernel passes over G = κ(X, Y) (X: rows×d, Y: cols×d) in tiles; stores copies of X and Y only
/// (O((rows+cols)d)). Every product below costs exactly one kernel pass and accumulates in double.
template <class T>
class KernelPasses {
 public:
  /// Throws std::invalid_argument naming the value for mismatched d, empty or non-finite tokens, a bad kernel
  /// parameter or bad tiling.
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
  /// subtract). Gᵀu and Gᵀr are summed over groups of row panels in a fixed order (detail::reduction_groups):
  /// the same bits on every run and on 1 to 16 threads.
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

}  // namespace nystrom
