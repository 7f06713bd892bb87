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

/// Distance exponents of docs/mathematics.md §1: L1 (Laplacian) or squared L2 (Gaussian).
enum class Distance { l1, squared_l2 };

/// The elementwise map applied to an exponent x: exp(x), or with `clamped` the authors' clamped exponential
/// exp(min(x, c)) + max(x − c, 0) with c = `threshold` (PnP-Nystra public code; docs/mathematics.md §2).
struct ExpMap {
  bool clamped = false;
  double threshold = 5;
};

/// Where entry (i, c) of matrix b of a batch lies: data[b·batch + i·row + c·column]. A column-major matrix
/// with leading dimension ld has {1, ld, ·}, a row-major one (a head of a [B, H, N, d] tensor) {ld, 1, ·}.
struct Strides {
  Offset row = 1;
  Offset column = 0;
  Offset batch = 0;
};

/// out_b(i, j) = factor · Σ_c dist(x_b(i, c), y_b(j, c)) for `batch` matrices x_b n×d, y_b p×d and
/// column-major out_b n×p (leading dimension ldo, out_b at out + b·out_stride) (LaplacianFormer Alg. 1 with
/// factor = −1/λ). Tiled in shared memory, direct differences (no ‖x‖² + ‖y‖² − 2xᵀy cancellation).
/// O(batch·n·p·d).
template <class T>
void distance_exponent(const T* x, Strides xs, int n, const T* y, Strides ys, int p, int d, Distance distance,
                       T factor, T* out, Offset ldo, Offset out_stride, int batch, cudaStream_t stream);

/// What map_lines does with each line's sum s_l = Σ_k x_k (or Σ_k x_k w_k with `weights`), the lines taken
/// in groups of `group` (a head's lines): written to out[(l / group)·out_stride + l % group] when `out` is
/// non-null; with `normalize`, every entry of the line multiplied by 1/(s_l + offset) afterwards. The
/// weights of line l are the `length` entries at weights + (l / group)·weight_stride.
template <class T>
struct LineSums {
  T* out = nullptr;
  Offset out_stride = 0;
  const T* weights = nullptr;
  Offset weight_stride = 0;
  Offset group = Offset(1) << 62;
  bool normalize = false;
  T offset = 0;
};

/// The fused row-max / exp / row-sum kernel on the columns ("lines") of a column-major block: for each of
/// `lines` columns of `length` entries, shift = max (when `stabilize`, PnP-Nystra eq. (8)) or 0, x ← map(x −
/// shift) in place, the column's shift written to `shift_out` when non-null, and its sum used as `sums`
/// says. One pass to find the max, one to map, store and sum (and one to normalize).
template <class T>
void map_lines(T* data, Offset ld, int length, int lines, ExpMap map, bool stabilize, T* shift_out,
               const LineSums<T>& sums, cudaStream_t stream);

/// data_b(i, j) ← map(data_b(i, j) − row_shift_b[i]) for `batch` rows×cols blocks, data_b at data + b·stride
/// and row_shift_b at row_shift + b·shift_stride (row_shift may be null: no shift).
template <class T>
void map_rows_shifted(T* data, Offset ld, int rows, int cols, ExpMap map, const T* row_shift, int batch,
                      Offset stride, Offset shift_stride, cudaStream_t stream);

/// out[l] = Σ_k exp(data(k, l)) · x[k] for each of `lines` columns of `length` entries: the
/// kernel-times-vector product fused with the exponential, so exp(φ) is never stored (the Lanczos matvec).
template <class T>
void exp_dot_lines(const T* data, Offset ld, int length, int lines, const T* x, T* out, cudaStream_t stream);

/// data(i, c) ← data(i, c) / (denominators[i] + offset) for a rows×cols block (the ⊘ of attention).
template <class T>
void divide_rows(T* data, Offset ld, int rows, int cols, const T* denominators, T offset,
                 cudaStream_t stream);

/// data(i, j) ← data(i, j) / (denominators[j] + offset) for a rows×cols block: the ⊘ of attention when each
/// column is one query's output (a row-major N×dv head is a column-major dv×N block).
template <class T>
void divide_columns(T* data, Offset ld, int rows, int cols, const T* denominators, T offset,
                    cudaStream_t stream);

/// data[0 .. count) ← value.
template <class T>
void fill(T* data, Offset count, T value, cudaStream_t stream);

/// data_b(i, j) ← value for `count` column-major rows×cols blocks, data_b(i, j) at data[b·stride + j·ld + i]:
/// one launch for every block.
template <class T>
void fill(T* data, Offset rows, Offset cols, Offset ld, Offset stride, Offset count, T value,
          cudaStream_t stream);

/// a_b(i, i) += value for `batch` m×m blocks, a_b at a + b·stride.
template <class T>
void add_to_diagonal(T* a, Offset lda, int m, T value, int batch, Offset stride, cudaStream_t stream);

/// out[i] = static_cast<To>(in[i]) for i < count.
template <class From, class To>
void convert(const From* in, To* out, Offset count, cudaStream_t stream);

/// Status codes written by pinv_iterate (mirroring nystrom::PinvStatus).
enum PinvCode : int { pinv_converged = 0, pinv_completed = 1, pinv_diverged = 2, pinv_non_finite = 3 };

/// Razavi or Newton–Schulz iterations for Z_b ≈ M_b⁺ (docs/mathematics.md §4) for `count` m×m matrices M_b
/// (at m_matrix + b·m², column-major), one thread block per matrix (m is the landmark count, small). Start Z₀
/// = αM_bᵀ with α = *shared_alpha when that is non-null (the batch α), else `alpha` when > 0, else the
/// per-matrix 1/(‖M_b‖₁‖M_b‖_∞); then Razavi Z ← ¼ Z(13I − MZ(15I − MZ(7I − MZ))) or Newton–Schulz Z ← Z(2I −
/// MZ), recording ‖I − M_bZ_k‖_F (in double) at residuals + b·(iterations + 1). Stops as
/// nystrom::pseudoinverse does: converged (residual ≤ tolerance > 0), non-finite, or diverged (the residual
/// grows past its previous value by more than rounding, or past its start by more than the smaller of
/// rounding and the start itself). Z_b at z + b·m², workspace 4·m² entries
/// per matrix; writes info + 3b = {status, iterations run, 0} and alpha_out[b]. One launch for the whole
/// batch, no host synchronization.
template <class T>
void pinv_iterate(const T* m_matrix, int m, int count, bool razavi, int iterations, double alpha,
                  const double* shared_alpha, double tolerance, T* z, T* workspace, double* residuals,
                  int* info, double* alpha_out, cudaStream_t stream);

/// alpha_out = 1/(max_b ‖M_b‖₁ · max_b ‖M_b‖_∞) over the `count` m×m matrices (at m_matrix + b·m²) whose
/// entries are all finite: the batch α of the authors' code, without overflowed cores (1 when no such M_b
/// has a nonzero entry). One block.
template <class T>
void batch_alpha(const T* m_matrix, int m, int count, double* alpha_out, cudaStream_t stream);

/// The pseudoinverse from an SVD M_b = U_b Σ_b V_bᵀ (double, m×m, at u + b·m², v + b·m², sigma + b·m; v holds
/// V_bᵀ when `v_transposed`): singular values ≤ cut·max σ dropped, Z_b = V_b Σ_b⁺ U_bᵀ stored in T at z +
/// b·m², info + 3b = {converged, 0, rank} and residuals[b·residual_stride] = ‖I − M_b Z_b‖_F (M_b in T at
/// m_matrix + b·m², in double). One block per matrix.
template <class T>
void svd_pseudoinverse(const double* u, const double* v, bool v_transposed, const double* sigma, int m,
                       int count, double cut, const T* m_matrix, T* z, double* residuals,
                       Offset residual_stride, int* info, cudaStream_t stream);

/// Landmarks of `count` row-major N×d heads (head b at x + b·N·d) into column-major m×d matrices (at out +
/// b·m·d), in double sums (docs/mathematics.md §5): segment means (s = ⌊N/m⌋, the first (s+1)m − N segments
/// of s rows, the rest s+1), or with window_rows > 0 adaptive average pooling of the tokens t = r·window_cols
/// + c to a grid_rows × grid_cols grid (bin I covers rows [⌊I·h/gh⌋, ⌈(I+1)h/gh⌉), likewise columns).
/// A landmark's tokens are summed by several blocks where the heads have too few landmarks to fill the GPU;
/// their partial sums go to `scratch`, pooled_landmarks_scratch(n, d, count, m) doubles (0: none needed).
template <class T>
void pooled_landmarks(const T* x, int n, int d, int count, int m, int window_rows, int window_cols,
                      int grid_rows, int grid_cols, double* scratch, T* out, cudaStream_t stream);
Offset pooled_landmarks_scratch(int n, int d, int count, int m);

}  // namespace nystrom::cuda::detail
