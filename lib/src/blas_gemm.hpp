#pragma once
/// @file blas_gemm.hpp
/// C = α·op(A)·op(B) + β·C straight through BLAS ?gemm (internal to the library). Eigen's
/// `C.noalias() = A * B` zeroes C and then accumulates into it with β = 1: a wasted write and read of C,
/// which costs a few percent when C is a large logit tile and the inner dimension is only d = 64.

#include <algorithm>
#include <type_traits>
#include <utility>

#include "nystrom/kernels.hpp"
#include "nystrom/types.hpp"

namespace nystrom::detail {

/// Whether an operand enters the product as is or transposed.
enum class Op { plain, transposed };

/// C = alpha·op(A)·op(B) + beta·C; with beta = 0, C is overwritten without being read (NaNs in C do not
/// propagate). Shapes must agree (op(A): r×k, op(B): k×c, C: r×c); callers pass blocks with unit inner
/// stride.
template <class T>
void gemm(Op op_a, Op op_b, T alpha, const ConstMatrixRef<T>& A, const ConstMatrixRef<T>& B, T beta,
          MatrixRef<T> C) {
  eigen_assert((op_a == Op::plain ? A.rows() : A.cols()) == C.rows());
  eigen_assert((op_b == Op::plain ? B.cols() : B.rows()) == C.cols());
  const int rows = int(C.rows()), cols = int(C.cols()), inner = int(op_a == Op::plain ? A.cols() : A.rows());
  if (rows == 0 || cols == 0) return;
#ifdef NYSTROM_WITH_OPENBLAS
  const char trans_a = op_a == Op::plain ? 'N' : 'T', trans_b = op_b == Op::plain ? 'N' : 'T';
  // BLAS requires leading dimensions ≥ 1 even for empty operands.
  const int lda = int(std::max<Index>(1, A.outerStride())), ldb = int(std::max<Index>(1, B.outerStride())),
            ldc = int(std::max<Index>(1, C.outerStride()));
  if constexpr (std::is_same_v<T, float>)
    sgemm_(&trans_a, &trans_b, &rows, &cols, &inner, &alpha, A.data(), &lda, B.data(), &ldb, &beta, C.data(),
           &ldc);
  else
    dgemm_(&trans_a, &trans_b, &rows, &cols, &inner, &alpha, A.data(), &lda, B.data(), &ldb, &beta, C.data(),
           &ldc);
#else
  (void)inner;
  if (beta == T(0))
    C.setZero();
  else if (beta != T(1))
    C *= beta;
  if (op_a == Op::plain && op_b == Op::plain)
    C.noalias() += alpha * A * B;
  else if (op_a == Op::plain)
    C.noalias() += alpha * A * B.transpose();
  else if (op_b == Op::plain)
    C.noalias() += alpha * A.transpose() * B;
  else
    C.noalias() += alpha * A.transpose() * B.transpose();
#endif
}

/// An operand of either layout as BLAS reads it: a column-major X as is, a row-major X as the column-major
/// Xᵀ over the same memory with the opposite op, so that op(X) is the same matrix; a view, never a copy (X
/// has unit inner stride).
template <class X>
std::pair<Op, ConstMatrixRef<typename X::Scalar>> blas_operand(Op op, const X& x) {
  using T = typename X::Scalar;
  if constexpr (X::IsRowMajor)
    return {op == Op::plain ? Op::transposed : Op::plain, ConstMatrixRef<T>(x.transpose())};
  else
    return {op, ConstMatrixRef<T>(x)};
}

/// out = φ(X, Y) (docs/mathematics.md §1) without Eigen's extra pass over `out`, X and Y of either layout:
/// the exponential kernel's s·X·Yᵀ is one gemm with α = s reading them in place; the distance kernels go
/// through Kernel::exponent (row-major operands then copied to column-major).
template <class T, class X, class Y>
void kernel_exponent(const Kernel& kernel, const X& x, const Y& y, MatrixRef<T> out) {
  if (kernel.type == KernelType::exponential && X::IsRowMajor && !Y::IsRowMajor) {
    // Both operands would enter transposed, and OpenBLAS's small-matrix kernel for that case took twice as
    // long as the plain one (G_L = s·Q K̄ᵀ of row-major Q at N = 4096, m = 16): outᵀ = s·Y Xᵀ with both plain
    // (a row-major X is Xᵀ in column-major), then transposed into `out` (m·b values).
    thread_local Matrix<T> transposed;
    transposed.resize(out.cols(), out.rows());
    gemm<T>(Op::plain, Op::plain, T(kernel.param), y, x.transpose(), T(0), transposed);
    out = transposed.transpose();
  } else if (kernel.type == KernelType::exponential) {
    const auto [op_x, x_blas] = blas_operand(Op::plain, x);
    const auto [op_y, y_blas] = blas_operand(Op::transposed, y);
    gemm<T>(op_x, op_y, T(kernel.param), x_blas, y_blas, T(0), out);
  } else {
    kernel.exponent<T>(x, y, out);
  }
}

}  // namespace nystrom::detail
