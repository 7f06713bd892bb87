#pragma once
/// @file emulation.hpp
/// The steps of a computation in emulated half or bfloat16 storage (internal to the library;
/// docs/mathematics.md §8, after Higham & Pranesh, "Simulating low precision floating-point arithmetic",
/// SIAM J. Sci. Comput. 41(5), 2019): float32 arithmetic, products summed in float32 in a fixed order, and
/// every matrix a step writes rounded to the format, with what the rounding did counted. Each function that
/// takes an Emulation is one step with one rounding point.

#include <algorithm>
#include <cmath>
#include <limits>

#include <omp.h>

#include "nystrom/kernels.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"

namespace nystrom::detail {

/// The format of one emulated computation and what its rounding points did. One per call and thread: the
/// steps of a parallel loop each take their own and add the counts afterwards.
class Emulation {
 public:
  explicit Emulation(Precision format) : format_(format) {}

  Precision format() const { return format_; }
  const RoundingCounts& counts() const { return counts_; }

  /// A rounding point: x rounded in place to the format, and counted.
  template <WritableFloatBlock X>
  void store(X&& x) {
    counts_ += round_in_place(format_, x);
  }

  /// x rounded to the format, as a new matrix (the inputs, the landmarks).
  Matrix<float> stored(const ConstMatrixRef<float>& x) {
    Matrix<float> out = x;
    store(out);
    return out;
  }

  /// x rounded once from double (parameters held in double: Performer's Ω, Linformer's E and F, Z₀ = αMᵀ).
  Matrix<float> stored_from_double(const Matrix<double>& x) {
    Matrix<float> out(x.rows(), x.cols());
    counts_ += round_into(format_, x.data(), x.size(), out.data());
    return out;
  }

 private:
  Precision format_;
  RoundingCounts counts_;
};

/// C = A·B for A (r×k) and any k×c expression B read entry by entry (such as Yᵀ): every entry one float32
/// sum over k = 0, 1, … of fused multiply-adds from +0, not rounded. A product of two half or bfloat16 values
/// is exact in float32 (unless bfloat16's leaves float32's range), so the sums alone round, in this order.
/// Columns of C over the OpenMP threads above parallel_work multiply-adds (outside a parallel region); every
/// entry is the same on any thread count. O(rkc).
template <class B>
Matrix<float> ordered_product(const ConstMatrixRef<float>& A, const B& b) {
  const Index rows = A.rows(), inner = A.cols(), cols = b.cols();
  Matrix<float> C = Matrix<float>::Zero(rows, cols);
  const bool threaded = double(rows) * double(inner) * double(cols) >= parallel_work && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (threaded)
  for (Index j = 0; j < cols; ++j) {
    float* const c = C.col(j).data();
    for (Index k = 0; k < inner; ++k) {
      const float factor = b(k, j);
      const float* const a = A.col(k).data();
      for (Index i = 0; i < rows; ++i) c[i] = std::fma(a[i], factor, c[i]);
    }
  }
  return C;
}

/// The rounding point of a product: R(α·(A B)), the ordered sums scaled by α in float32 (as a GEMM applies
/// its α) and rounded.
template <class B>
Matrix<float> rounded_product(Emulation& emulation, const ConstMatrixRef<float>& A, const B& b,
                              float alpha = 1) {
  Matrix<float> C = ordered_product(A, b);
  if (alpha != 1) C *= alpha;
  emulation.store(C);
  return C;
}

/// The rounding point of row sums: R(x·1), each an ordered float32 sum over the columns.
inline Vector<float> rounded_row_sums(Emulation& emulation, const ConstMatrixRef<float>& x) {
  Matrix<float> sums = ordered_product(x, Vector<float>::Ones(x.cols()));
  emulation.store(sums);
  return sums.col(0);
}

/// The largest entry of each row (NaN entries skipped; −∞ for a row without a number); exact, no rounding.
inline Vector<float> row_max(const ConstMatrixRef<float>& x) {
  Vector<float> out = Vector<float>::Constant(x.rows(), -std::numeric_limits<float>::infinity());
  for (Index j = 0; j < x.cols(); ++j)
    for (Index i = 0; i < x.rows(); ++i)
      if (x(i, j) > out(i)) out(i) = x(i, j);
  return out;
}

/// The rounding point of an exponential block: R(exp(x − shift_i)) in place, x − shift_i and its exponential
/// (std::exp, the C library's expf) in float32.
inline void rounded_exp(Emulation& emulation, MatrixRef<float> x, const Vector<float>& shift) {
  for (Index j = 0; j < x.cols(); ++j)
    for (Index i = 0; i < x.rows(); ++i) x(i, j) = std::exp(x(i, j) - shift(i));
  emulation.store(x);
}

/// The rounding point of the authors' clamped exponential: R(exp(min(x, τ)) + max(x − τ, 0)) in place, in
/// float32 (PnP-Nystra public code; docs/mathematics.md §2).
inline void rounded_clamped_exp(Emulation& emulation, MatrixRef<float> x, float threshold) {
  for (Index j = 0; j < x.cols(); ++j)
    for (Index i = 0; i < x.rows(); ++i)
      x(i, j) = std::exp(std::min(x(i, j), threshold)) + std::max(x(i, j) - threshold, 0.0f);
  emulation.store(x);
}

/// The rounding point of a row division: R(x_ij / (d_i + δ)) in place, in float32.
inline void rounded_row_division(Emulation& emulation, MatrixRef<float> x, const Vector<float>& d,
                                 float delta = 0) {
  for (Index j = 0; j < x.cols(); ++j)
    for (Index i = 0; i < x.rows(); ++i) x(i, j) = x(i, j) / (d(i) + delta);
  emulation.store(x);
}

/// Softmax rows of rounded logits L in place, in three rounding points: E = R(exp(L − μ)) with μ the row
/// maxima (row_max), σ = R(E 1), S = R(E ⊘ σ).
inline void rounded_softmax_rows(Emulation& emulation, MatrixRef<float> logits) {
  rounded_exp(emulation, logits, row_max(logits));
  rounded_row_division(emulation, logits, rounded_row_sums(emulation, logits));
}

/// The rounding point of the exponents φ(X, Y) of `kernel` (docs/mathematics.md §1, without its log-shift)
/// for rounded tokens X (n×d) and Y (p×d): the exponential kernel's R(s·(X Yᵀ)) with s in float32 applied to
/// the ordered sums, the distance kernels' R(f·Σ_c |x_c − y_c|) and R(f·Σ_c (x_c − y_c)²) (f =
/// Kernel::distance_factor<float>(), the sums over c in order, the squares as fused multiply-adds). O(npd).
inline Matrix<float> rounded_exponents(Emulation& emulation, const Kernel& kernel,
                                       const ConstMatrixRef<float>& X, const ConstMatrixRef<float>& Y) {
  kernel.require_block(X.rows(), Y.rows(), X.cols(), Y.cols(), X.rows(), Y.rows());
  if (kernel.type == KernelType::exponential)
    return rounded_product(emulation, X, Y.transpose(), float(kernel.param));
  const bool l1 = kernel.type == KernelType::laplacian;
  Matrix<float> out = Matrix<float>::Zero(X.rows(), Y.rows());
  for (Index j = 0; j < Y.rows(); ++j) {
    float* const sum = out.col(j).data();
    for (Index c = 0; c < X.cols(); ++c) {
      const float y = Y(j, c);
      const float* const x = X.col(c).data();
      for (Index i = 0; i < X.rows(); ++i)
        sum[i] = l1 ? sum[i] + std::abs(x[i] - y) : std::fma(x[i] - y, x[i] - y, sum[i]);
    }
  }
  out *= kernel.distance_factor<float>();
  emulation.store(out);
  return out;
}

/// The rounding point of R(c·I − P) for a square P, in float32.
inline Matrix<float> rounded_identity_minus(Emulation& emulation, float c, const Matrix<float>& P) {
  Matrix<float> out = -P;
  out.diagonal().array() += c;
  emulation.store(out);
  return out;
}

}  // namespace nystrom::detail
