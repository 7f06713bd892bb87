#pragma once
/// @file primitives.cuh
/// Raw device primitives of the CUDA backend (internal). Everything here works on device pointers to
/// column-major matrices with a leading dimension, like Eigen's Matrix<T>; nothing includes Eigen, so nvcc
/// compiles only this layer. Every launcher is asynchronous on `stream`; cuBLAS/cuSOLVER products live in the
/// C++ layer (device.hpp).

#include <cuda_runtime.h>

#include <cstdint>

namespace nystrom::cuda::detail {

using Offset = std::int64_t;

/// Distance exponents of MATH.md §1: L1 (Laplacian) or squared L2 (Gaussian).
enum class Distance { l1, squared_l2 };

/// The elementwise map applied to an exponent x: exp(x), or with `clamped` the authors' clamped exponential
/// exp(min(x, c)) + max(x − c, 0) with c = `threshold` (PnP-Nystra public code; docs/mathematics.md §2).
struct ExpMap {
  bool clamped = false;
  double threshold = 5;
};

/// out(i, j) = factor · Σ_c dist(x(i, c), y(j, c)) for x n×d, y p×d, out n×p (LaplacianFormer Alg. 1 with
/// factor = −1/λ). Tiled in shared memory, direct differences (no ‖x‖² + ‖y‖² − 2xᵀy cancellation). O(n·p·d).
template <class T>
void distance_exponent(const T* x, Offset ldx, int n, const T* y, Offset ldy, int p, int d, Distance distance,
                       T factor, T* out, Offset ldo, cudaStream_t stream);

/// The fused row-max / exp / row-sum kernel on the columns ("lines") of a column-major block: for each of
/// `lines` columns of `length` entries, shift = max (when `stabilize`, PnP-Nystra eq. (8)) or 0, x ← map(x −
/// shift) in place, and the column's shift and sum written to `shift_out` / `sum_out` when non-null. One pass
/// to find the max, one to map, store and sum.
template <class T>
void map_lines(T* data, Offset ld, int length, int lines, ExpMap map, bool stabilize, T* shift_out,
               T* sum_out, cudaStream_t stream);

/// data(i, j) ← map(data(i, j) − row_shift[i]) for a rows×cols block (row_shift may be null: no shift).
template <class T>
void map_rows_shifted(T* data, Offset ld, int rows, int cols, ExpMap map, const T* row_shift,
                      cudaStream_t stream);

/// out[l] = Σ_k exp(data(k, l)) · x[k] for each of `lines` columns of `length` entries: the
/// kernel-times-vector product fused with the exponential, so exp(φ) is never stored (the Lanczos matvec).
template <class T>
void exp_dot_lines(const T* data, Offset ld, int length, int lines, const T* x, T* out, cudaStream_t stream);

/// data(i, c) ← data(i, c) / (denominators[i] + offset) for a rows×cols block (the ⊘ of attention).
template <class T>
void divide_rows(T* data, Offset ld, int rows, int cols, const T* denominators, T offset,
                 cudaStream_t stream);

/// data[0 .. count) ← value.
template <class T>
void fill(T* data, Offset count, T value, cudaStream_t stream);

/// a(i, i) += value for an m×m block.
template <class T>
void add_to_diagonal(T* a, Offset lda, int m, T value, cudaStream_t stream);

/// out[i] = static_cast<To>(in[i]) for i < count.
template <class From, class To>
void convert(const From* in, To* out, Offset count, cudaStream_t stream);

/// Status codes written by pinv_iterate (mirroring nystrom::PinvStatus).
enum PinvCode : int { pinv_converged = 0, pinv_completed = 1, pinv_diverged = 2, pinv_non_finite = 3 };

/// Razavi or Newton–Schulz iteration for Z ≈ M⁺ (MATH.md §4) in ONE thread block (m is the landmark count,
/// small): Z₀ = αMᵀ (α = alpha, or 1/(‖M‖₁‖M‖_∞) when alpha ≤ 0), then Razavi Z ← ¼ Z(13I − MZ(15I − MZ(7I −
/// MZ))) or Newton–Schulz Z ← Z(2I − MZ), recording ‖I − MZ_k‖_F (in double) in residuals[0..iterations].
/// Stops as nystrom::pseudoinverse does: converged (residual ≤ tolerance > 0), non-finite, or diverged (the
/// residual grows past its start or its previous value by more than rounding). `workspace` holds 4·m²
/// entries. Writes info = {status, iterations run} and alpha_out. No host synchronization: the whole
/// iteration is one launch.
template <class T>
void pinv_iterate(const T* m_matrix, int m, bool razavi, int iterations, double alpha, double tolerance, T* z,
                  T* workspace, double* residuals, int* info, double* alpha_out, cudaStream_t stream);

/// inverse[i] = 1/σ_i for σ_i > cut·σ₀ (σ sorted descending), else 0; rank_out = number kept. One block.
void invert_singular_values(const double* sigma, int m, double cut, double* inverse, int* rank_out,
                            cudaStream_t stream);

/// residual_out = ‖I − M Z‖_F (product and norm in double) for m×m M and Z. One block.
template <class T>
void identity_residual(const T* m_matrix, const T* z, int m, double* residual_out, cudaStream_t stream);

}  // namespace nystrom::cuda::detail
