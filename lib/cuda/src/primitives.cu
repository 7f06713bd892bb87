#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "primitives.cuh"

namespace nystrom::cuda::detail {

namespace {

constexpr int block_threads = 256;  ///< threads per block for the line and elementwise kernels
constexpr int pinv_threads = 256;   ///< threads of the single-block m×m kernels
constexpr int tile = 32;            ///< output tile edge of the distance kernel
constexpr int tile_depth = 16;      ///< token-dimension chunk staged in shared memory per step
constexpr int tile_rows_per_thread = tile / (block_threads / tile);

/// Throws std::runtime_error naming the kernel if its launch failed.
void check_launch(const char* kernel) {
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw std::runtime_error(std::string("CUDA launch of ") + kernel +
                             " failed: " + cudaGetErrorString(error));
}

int blocks_for(Offset count, int threads) {
  const Offset blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 65535 * 16 ? (blocks > 0 ? blocks : 1) : 65535 * 16);
}

__device__ inline float exp_of(float x) {
  return expf(x);
}
__device__ inline double exp_of(double x) {
  return exp(x);
}
__device__ inline float abs_of(float x) {
  return fabsf(x);
}
__device__ inline double abs_of(double x) {
  return fabs(x);
}
__device__ inline float max_of(float a, float b) {
  return fmaxf(a, b);
}
__device__ inline double max_of(double a, double b) {
  return fmax(a, b);
}
__device__ inline float min_of(float a, float b) {
  return fminf(a, b);
}
__device__ inline double min_of(double a, double b) {
  return fmin(a, b);
}

template <class T>
__device__ inline T apply_map(ExpMap map, T x) {
  // PnP-Nystra public code: exp(min(x, c)) + max(x − c, 0) keeps large logits from overflowing.
  if (map.clamped) {
    const T c = static_cast<T>(map.threshold);
    return exp_of(min_of(x, c)) + max_of(x - c, T(0));
  }
  return exp_of(x);
}

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct MaxOp {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return max_of(a, b);
  }
};

/// Reduces `value` over a group of Group threads (8 or 16 lanes of a warp, a warp, or the whole block of
/// block_threads); every thread of the group receives the result. Every lane of the warp must take part.
/// `shared` holds one entry per warp of the block.
template <int Group, class T, class Op>
__device__ T group_reduce(T value, Op op, T* shared) {
  for (int offset = (Group < 32 ? Group : 32) / 2; offset > 0; offset /= 2)
    value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
  if constexpr (Group <= 32) {
    return value;
  } else {
    const int warp = threadIdx.x / 32;
    __syncthreads();  // a previous reduction may still be reading `shared`
    if (threadIdx.x % 32 == 0) shared[warp] = value;
    __syncthreads();
    T total = shared[0];
    for (int w = 1; w < Group / 32; ++w) total = op(total, shared[w]);
    return total;
  }
}

/// Sum over the whole (single) block, in double, every thread receiving the result.
__device__ double block_sum(double value) {
  __shared__ double shared[32];
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = value;
  __syncthreads();
  double total = 0;
  for (int w = 0; w < static_cast<int>((blockDim.x + 31) / 32); ++w) total += shared[w];
  return total;
}

/// Maximum over the whole (single) block, every thread receiving the result.
__device__ double block_max(double value) {
  __shared__ double shared[32];
  for (int offset = 16; offset > 0; offset /= 2)
    value = fmax(value, __shfl_xor_sync(0xffffffffu, value, offset));
  __syncthreads();
  if (threadIdx.x % 32 == 0) shared[threadIdx.x / 32] = value;
  __syncthreads();
  double total = shared[0];
  for (int w = 1; w < static_cast<int>((blockDim.x + 31) / 32); ++w) total = fmax(total, shared[w]);
  return total;
}

template <class T, Distance D>
__global__ void distance_kernel(const T* x, Strides xs, int n, const T* y, Strides ys, int p, int d, T factor,
                                T* out, Offset ldo, Offset out_stride) {
  __shared__ T x_tile[tile_depth][tile + 1];
  __shared__ T y_tile[tile_depth][tile + 1];
  x += blockIdx.z * xs.batch;
  y += blockIdx.z * ys.batch;
  out += blockIdx.z * out_stride;
  const int tx = threadIdx.x % tile;  // output row within the tile (coalesced along the column)
  const int ty = threadIdx.x / tile;  // first output column within the tile
  const int i0 = blockIdx.x * tile;
  const int j0 = blockIdx.y * tile;
  T acc[tile_rows_per_thread] = {};
  for (int c0 = 0; c0 < d; c0 += tile_depth) {
    for (int e = ty; e < tile_depth; e += block_threads / tile) {
      const int c = c0 + e;
      x_tile[e][tx] = (i0 + tx < n && c < d) ? x[(i0 + tx) * xs.row + c * xs.column] : T(0);
      y_tile[e][tx] = (j0 + tx < p && c < d) ? y[(j0 + tx) * ys.row + c * ys.column] : T(0);
    }
    __syncthreads();
    const int depth = min(tile_depth, d - c0);
    for (int e = 0; e < depth; ++e) {
      const T xv = x_tile[e][tx];
      for (int r = 0; r < tile_rows_per_thread; ++r) {
        const T diff = xv - y_tile[e][ty + r * (block_threads / tile)];
        acc[r] += D == Distance::l1 ? abs_of(diff) : diff * diff;
      }
    }
    __syncthreads();
  }
  for (int r = 0; r < tile_rows_per_thread; ++r) {
    const int i = i0 + tx;
    const int j = j0 + ty + r * (block_threads / tile);
    if (i < n && j < p) out[i + j * ldo] = factor * acc[r];
  }
}

template <int Group, class T>
__global__ void map_lines_kernel(T* data, Offset ld, int length, int lines, ExpMap map, bool stabilize,
                                 T* shift_out, LineSums<T> sums) {
  __shared__ T shared[block_threads / 32];
  const int lane = threadIdx.x % Group;
  const Offset line = static_cast<Offset>(blockIdx.x) * (block_threads / Group) + threadIdx.x / Group;
  // Groups past the last line stay for the reductions (a warp may hold several groups).
  const int end = line < lines ? length : 0;
  T* column = data + line * ld;
  T shift = 0;
  if (stabilize) {
    // PnP-Nystra eq. (8): shift each row of exponents by its maximum, so every exponent is ≤ 0.
    T largest = -INFINITY;
    for (int k = lane; k < end; k += Group) largest = max_of(largest, column[k]);
    shift = group_reduce<Group>(largest, MaxOp{}, shared);
  }
  const Offset head = line / sums.group;
  const T* weights = sums.weights ? sums.weights + head * sums.weight_stride : nullptr;
  T sum = 0;
  for (int k = lane; k < end; k += Group) {
    const T value = apply_map(map, column[k] - shift);
    column[k] = value;
    sum += weights ? value * weights[k] : value;
  }
  sum = group_reduce<Group>(sum, SumOp{}, shared);
  if (sums.normalize) {
    const T inverse = T(1) / (sum + sums.offset);
    for (int k = lane; k < end; k += Group) column[k] *= inverse;
  }
  if (lane == 0 && line < lines) {
    if (shift_out) shift_out[line] = shift;
    if (sums.out) sums.out[head * sums.out_stride + line % sums.group] = sum;
  }
}

template <int Group, class T>
__global__ void exp_dot_lines_kernel(const T* data, Offset ld, int length, int lines, const T* x, T* out) {
  __shared__ T shared[block_threads / 32];
  const int lane = threadIdx.x % Group;
  const Offset line = static_cast<Offset>(blockIdx.x) * (block_threads / Group) + threadIdx.x / Group;
  if (line >= lines) return;
  const T* column = data + line * ld;
  T sum = 0;
  for (int k = lane; k < length; k += Group) sum += exp_of(column[k]) * x[k];
  sum = group_reduce<Group>(sum, SumOp{}, shared);
  if (lane == 0) out[line] = sum;
}

template <class T>
__global__ void map_rows_shifted_kernel(T* data, Offset ld, int rows, int cols, ExpMap map,
                                        const T* row_shift, int batch, Offset stride, Offset shift_stride) {
  const Offset per_block = static_cast<Offset>(rows) * cols, count = per_block * batch;
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<Offset>(gridDim.x) * blockDim.x) {
    const Offset b = e / per_block, r = e % per_block, i = r % rows, j = r / rows;
    T& value = data[b * stride + i + j * ld];
    value = apply_map(map, value - (row_shift ? row_shift[b * shift_stride + i] : T(0)));
  }
}

template <class T>
__global__ void divide_rows_kernel(T* data, Offset ld, int rows, int cols, const T* denominators, T offset) {
  const Offset count = static_cast<Offset>(rows) * cols;
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<Offset>(gridDim.x) * blockDim.x) {
    const Offset i = e % rows, j = e / rows;
    data[i + j * ld] /= denominators[i] + offset;
  }
}

template <class T>
__global__ void divide_columns_kernel(T* data, Offset ld, int rows, int cols, const T* denominators,
                                      T offset) {
  const Offset count = static_cast<Offset>(rows) * cols;
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<Offset>(gridDim.x) * blockDim.x) {
    const Offset i = e % rows, j = e / rows;
    data[i + j * ld] /= denominators[j] + offset;
  }
}

template <class T>
__global__ void fill_kernel(T* data, Offset rows, Offset cols, Offset ld, Offset stride, Offset count,
                            T value) {
  const Offset total = rows * cols * count;
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<Offset>(gridDim.x) * blockDim.x) {
    const Offset i = e % rows, j = (e / rows) % cols, b = e / (rows * cols);
    data[b * stride + j * ld + i] = value;
  }
}

template <class T>
__global__ void add_to_diagonal_kernel(T* a, Offset lda, int m, T value, int batch, Offset stride) {
  const Offset count = static_cast<Offset>(m) * batch;
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<Offset>(gridDim.x) * blockDim.x) {
    const Offset b = e / m, i = e % m;
    a[b * stride + i + i * lda] += value;
  }
}

template <class From, class To>
__global__ void convert_kernel(const From* in, To* out, Offset count) {
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < count;
       e += static_cast<Offset>(gridDim.x) * blockDim.x)
    out[e] = static_cast<To>(in[e]);
}

/// c = diagonal·I + scale·a·b for m×m blocks (ld = m), by the whole block; c must not alias a or b.
template <class T>
__device__ void block_matmul(const T* a, const T* b, T* c, int m, T diagonal = 0, T scale = 1) {
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) {
    const int i = e % m, j = e / m;
    T sum = 0;
#pragma unroll 8
    for (int k = 0; k < m; ++k) sum += a[i + k * m] * b[k + j * m];
    c[e] = (i == j ? diagonal : T(0)) + scale * sum;
  }
  __syncthreads();
}

/// ‖I − p‖_F in double for an m×m product p.
template <class T>
__device__ double residual_of(const T* product, int m) {
  double sum = 0;
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) {
    const double r = (e % m == e / m ? 1.0 : 0.0) - static_cast<double>(product[e]);
    sum += r * r;
  }
  return sqrt(block_sum(sum));
}

/// ‖I − p‖_F and ‖z‖_F (NaN if an entry of z is not finite) in double for m×m blocks, in one reduction.
template <class T>
__device__ void residual_and_norm(const T* product, const T* z, int m, double& residual, double& z_norm) {
  double r = 0, s = 0, bad = 0;
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) {
    const double p = (e % m == e / m ? 1.0 : 0.0) - static_cast<double>(product[e]);
    r += p * p;
    const double v = static_cast<double>(z[e]);
    if (isfinite(v))
      s += v * v;
    else
      bad += 1;
  }
  __shared__ double shared[32][3];
  for (int offset = 16; offset > 0; offset /= 2) {
    r += __shfl_xor_sync(0xffffffffu, r, offset);
    s += __shfl_xor_sync(0xffffffffu, s, offset);
    bad += __shfl_xor_sync(0xffffffffu, bad, offset);
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    shared[threadIdx.x / 32][0] = r;
    shared[threadIdx.x / 32][1] = s;
    shared[threadIdx.x / 32][2] = bad;
  }
  __syncthreads();
  r = s = bad = 0;
  for (int w = 0; w < static_cast<int>((blockDim.x + 31) / 32); ++w) {
    r += shared[w][0];
    s += shared[w][1];
    bad += shared[w][2];
  }
  residual = sqrt(r);
  z_norm = bad > 0 ? NAN : sqrt(s);
}

/// (‖a‖_F, whether every entry is finite) for an m×m block.
template <class T>
__device__ double frobenius_or_nan(const T* a, int m) {
  double sum = 0, bad = 0;
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) {
    const double v = static_cast<double>(a[e]);
    if (isfinite(v))
      sum += v * v;
    else
      bad += 1;
  }
  bad = block_sum(bad);
  sum = block_sum(sum);
  return bad > 0 ? NAN : sqrt(sum);
}

/// The largest absolute column sum ‖M‖₁ and row sum ‖M‖_∞ of one m×m matrix, by the whole block (every
/// thread receives both).
template <class T>
__device__ void absolute_sums(const T* M, int m, double& norm_1, double& norm_inf) {
  double col = 0, row = 0;
  for (int j = threadIdx.x; j < m; j += blockDim.x) {
    double c = 0, r = 0;
    for (int i = 0; i < m; ++i) {
      c += fabs(static_cast<double>(M[i + j * m]));
      r += fabs(static_cast<double>(M[j + i * m]));
    }
    col = fmax(col, c);
    row = fmax(row, r);
  }
  norm_1 = block_max(col);
  norm_inf = block_max(row);
}

/// The m×m matrices of pinv_iterate_kernel in shared memory (M, Z and four products) when they fit the
/// default 48 KiB; else Z and the products stay in global memory.
template <class T>
std::size_t pinv_shared_bytes(int m) {
  const std::size_t bytes = 6 * sizeof(T) * static_cast<std::size_t>(m) * m;
  return bytes <= 48 * 1024 ? bytes : 0;
}

template <class T>
__global__ void pinv_iterate_kernel(const T* matrices, int m, bool razavi, int iterations, double alpha,
                                    const double* shared_alpha, double tolerance, T* z_out, T* workspace,
                                    double* residuals, int* info, double* alpha_out, bool staged) {
  // Matrix blockIdx.x of the batch.
  extern __shared__ __align__(16) unsigned char stage[];
  const Offset square = static_cast<Offset>(m) * m;
  const T* M = matrices + blockIdx.x * square;
  z_out += blockIdx.x * square;
  residuals += blockIdx.x * static_cast<Offset>(iterations + 1);
  info += 3 * static_cast<Offset>(blockIdx.x);
  alpha_out += blockIdx.x;
  T* z = z_out;
  T* mz = workspace + blockIdx.x * 4 * square;
  if (staged) {
    T* copy = reinterpret_cast<T*>(stage);
    for (int e = threadIdx.x; e < m * m; e += blockDim.x) copy[e] = M[e];
    M = copy;
    z = copy + square;
    mz = copy + 2 * square;
    __syncthreads();
  }
  T* w1 = mz + square;
  T* w2 = mz + 2 * square;
  T* next = mz + 3 * square;
  if (shared_alpha) {
    alpha = *shared_alpha;
  } else if (!(alpha > 0)) {
    // Nyströmformer's per-matrix safe start α = 1/(‖M‖₁‖M‖_∞), so that ασ₁² ≤ 1 (docs/mathematics.md §4).
    double norm_1 = 0, norm_inf = 0;
    absolute_sums(M, m, norm_1, norm_inf);
    const double product = norm_1 * norm_inf;
    alpha = product > 0 ? 1.0 / product : 1.0;
  }
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) z[e] = static_cast<T>(alpha) * M[e / m + (e % m) * m];
  __syncthreads();
  const double rounding =
      16.0 * m * (sizeof(T) == 4 ? 1.1920929e-7 : 2.220446049250313e-16) * frobenius_or_nan(M, m);
  block_matmul(M, z, mz, m);
  const double start = residual_of(mz, m);
  if (threadIdx.x == 0) residuals[0] = start;
  int status = pinv_completed, done = 0;
  if (!isfinite(start) || isnan(frobenius_or_nan(z, m)))
    status = pinv_non_finite;
  else if (tolerance > 0 && start <= tolerance)
    status = pinv_converged;
  else {
    double previous = start;
    // As on the CPU (pinv.cpp): the rise above the start that rounding excuses is at most the start, or the
    // rounding of MZ₀ where the start is that small.
    const double start_allowance = fmax(start, rounding * frobenius_or_nan(z, m));
    for (int k = 1; k <= iterations; ++k) {
      if (razavi) {
        // Razavi (Nyströmformer eq. (15), PnP-Nystra §3): Z ← ¼ Z(13I − MZ(15I − MZ(7I − MZ))).
        for (int e = threadIdx.x; e < m * m; e += blockDim.x) w1[e] = (e % m == e / m ? T(7) : T(0)) - mz[e];
        __syncthreads();
        block_matmul(mz, w1, w2, m, T(15), T(-1));
        block_matmul(mz, w2, w1, m, T(13), T(-1));
        block_matmul(z, w1, next, m, T(0), T(0.25));
      } else {
        // Newton–Schulz (LaplacianFormer Alg. 1): Z ← Z(2I − MZ).
        for (int e = threadIdx.x; e < m * m; e += blockDim.x) w1[e] = (e % m == e / m ? T(2) : T(0)) - mz[e];
        __syncthreads();
        block_matmul(z, w1, next, m);
      }
      T* previous_z = z;
      z = next;
      next = previous_z;
      done = k;
      block_matmul(M, z, mz, m);
      double residual = 0, z_norm = 0;
      residual_and_norm(mz, z, m, residual, z_norm);
      if (threadIdx.x == 0) residuals[k] = residual;
      if (!isfinite(residual) || isnan(z_norm)) {
        status = pinv_non_finite;
        break;
      }
      if (tolerance > 0 && residual <= tolerance) {
        status = pinv_converged;
        break;
      }
      // As on the CPU (pinv.cpp): a Z grown so large that its products' rounding reaches the start excuses
      // no rise above it.
      const double noise = rounding * z_norm;
      if (residual > start + fmin(noise, start_allowance) || residual > previous + noise) {
        status = pinv_diverged;
        break;
      }
      previous = residual;
    }
  }
  if (z != z_out)
    for (int e = threadIdx.x; e < m * m; e += blockDim.x) z_out[e] = z[e];
  if (threadIdx.x == 0) {
    info[0] = status;
    info[1] = done;
    info[2] = 0;
    *alpha_out = alpha;
  }
}

/// The batch α = 1/(max_b ‖M_b‖₁ · max_b ‖M_b‖_∞) over the `count` m×m matrices M_b with finite entries, as
/// batch_alpha on the CPU: an overflowed core's pseudoinverse is NaN whatever α, and its infinite sums would
/// make α 0 for every head. 1 when no such matrix has a nonzero entry. One block; a warp per matrix, its
/// lanes on the lines j (column j and row j).
template <class T>
__global__ void batch_alpha_kernel(const T* M, int m, int count, double* alpha_out) {
  const int lane = threadIdx.x % 32, warps = static_cast<int>(blockDim.x / 32);
  double col = 0, row = 0;  // the maxima over this warp's finite matrices (meaningful in lane 0)
  for (int b = static_cast<int>(threadIdx.x / 32); b < count; b += warps) {
    const T* a = M + static_cast<Offset>(b) * m * m;
    double c = 0, r = 0;
    bool finite = true;
    for (int j = lane; j < m; j += 32) {
      double column = 0, line = 0;
      for (int i = 0; i < m; ++i) {
        const double x = static_cast<double>(a[i + j * m]);
        finite = finite && isfinite(x);
        column += fabs(x);
        line += fabs(static_cast<double>(a[j + i * m]));
      }
      c = fmax(c, column);
      r = fmax(r, line);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      c = fmax(c, __shfl_xor_sync(0xffffffffu, c, offset));
      r = fmax(r, __shfl_xor_sync(0xffffffffu, r, offset));
    }
    if (__all_sync(0xffffffffu, finite)) {
      col = fmax(col, c);
      row = fmax(row, r);
    }
  }
  const double norm_1 = block_max(col), norm_inf = block_max(row);
  if (threadIdx.x == 0) *alpha_out = norm_1 > 0 ? 1.0 / norm_1 / norm_inf : 1.0;
}

template <class T>
__global__ void svd_pseudoinverse_kernel(const double* u, const double* v, bool v_transposed,
                                         const double* sigma, int m, double cut, const T* M, T* z,
                                         double* residuals, Offset residual_stride, int* info) {
  const Offset square = static_cast<Offset>(m) * m;
  u += blockIdx.x * square;
  v += blockIdx.x * square;
  sigma += blockIdx.x * static_cast<Offset>(m);
  M += blockIdx.x * square;
  z += blockIdx.x * square;
  // Singular values ≤ cut·σ₁ are dropped (docs/mathematics.md §4), σ₁ the largest.
  double largest = 0;
  for (int k = 0; k < m; ++k) largest = fmax(largest, sigma[k]);
  const double threshold = cut * largest;
  // Z = V Σ⁺ Uᵀ in double, stored in T.
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) {
    const int i = e % m, j = e / m;
    double sum = 0;
    for (int k = 0; k < m; ++k) {
      if (!(sigma[k] > threshold)) continue;
      const double v_ik = v_transposed ? v[k + i * m] : v[i + k * m];
      sum += v_ik * u[j + k * m] / sigma[k];
    }
    z[e] = static_cast<T>(sum);
  }
  __syncthreads();
  // ‖I − M Z‖_F of the stored Z, in double, as nystrom::pseudoinverse reports it.
  double squares = 0;
  for (int e = threadIdx.x; e < m * m; e += blockDim.x) {
    const int i = e % m, j = e / m;
    double product = 0;
    for (int k = 0; k < m; ++k)
      product += static_cast<double>(M[i + k * m]) * static_cast<double>(z[k + j * m]);
    const double r = (i == j ? 1.0 : 0.0) - product;
    squares += r * r;
  }
  squares = block_sum(squares);
  if (threadIdx.x == 0) {
    int rank = 0;
    for (int k = 0; k < m; ++k) rank += sigma[k] > threshold;
    residuals[blockIdx.x * residual_stride] = sqrt(squares);
    info[3 * blockIdx.x] = pinv_converged;
    info[3 * blockIdx.x + 1] = 0;
    info[3 * blockIdx.x + 2] = rank;
  }
}

/// The tokens of one landmark (docs/mathematics.md §5): rows [first, first + rows) of `width` tokens from
/// column c_first of a window `stride` tokens wide (segment means: a run of rows of width 1 and stride 1).
struct LandmarkTokens {
  int first = 0, rows = 0, c_first = 0, width = 1, stride = 1;
  __device__ int count() const { return rows * width; }
  /// The index in its head of the landmark's t-th token.
  __device__ Offset token(int t) const {
    return static_cast<Offset>(first + t / width) * stride + c_first + t % width;
  }
};

__device__ LandmarkTokens landmark_tokens(int landmark, int n, int m, int window_rows, int window_cols,
                                          int grid_rows, int grid_cols) {
  LandmarkTokens set;
  if (window_rows == 0) {
    // Nyströmformer's segments: s = ⌊N/m⌋, the first (s+1)m − N of s rows, the rest s+1.
    const int s = n / m, short_segments = (s + 1) * m - n;
    set.first =
        landmark < short_segments ? landmark * s : short_segments * s + (landmark - short_segments) * (s + 1);
    set.rows = landmark < short_segments ? s : s + 1;
  } else {
    // Adaptive average pooling (PnP-Nystra code): bin I covers [⌊I·h/gh⌋, ⌈(I+1)·h/gh⌉), likewise columns.
    const int I = landmark / grid_cols, J = landmark % grid_cols;
    set.first = I * window_rows / grid_rows;
    set.rows = ((I + 1) * window_rows + grid_rows - 1) / grid_rows - set.first;
    set.c_first = J * window_cols / grid_cols;
    set.width = ((J + 1) * window_cols + grid_cols - 1) / grid_cols - set.c_first;
    set.stride = window_cols;
  }
  return set;
}

constexpr int pooled_threads = 256;  ///< threads of pooled_sums_kernel

/// Blocks per landmark in pooled_landmarks: about 264 blocks in all (two per multiprocessor of an H100), each
/// with at least 16 tokens of about `tokens`.
int landmark_parts(Offset landmarks, Offset tokens) {
  return static_cast<int>(
      std::clamp<Offset>((264 + landmarks - 1) / landmarks, 1, std::max<Offset>(1, tokens / 16)));
}

/// `Lanes` consecutive entries, read by one load (16 bytes when Lanes · sizeof(T) = 16).
template <class T, int Lanes>
struct alignas(Lanes * sizeof(T)) Packed {
  T v[Lanes];
};

template <class T, int Lanes>
__global__ void pooled_sums_kernel(const T* x, int n, int d, int m, int window_rows, int window_cols,
                                   int grid_rows, int grid_cols, double* partial, T* out) {
  // Block (landmark ℓ of head h, part p of gridDim.y): thread (g, q) sums the Lanes columns of load q over
  // the tokens g, g + groups, … of the part (each pass of the groups reads consecutive tokens: coalesced
  // rows), then group 0 adds the groups' sums in order, so the result never depends on scheduling.
  __shared__ double sums[pooled_threads * Lanes];
  const int landmark = blockIdx.x % m;
  const Offset head = blockIdx.x / m;
  const LandmarkTokens set = landmark_tokens(landmark, n, m, window_rows, window_cols, grid_rows, grid_cols);
  const int tokens = set.count(), parts = gridDim.y, loads = d / Lanes;
  const int begin = static_cast<int>(static_cast<Offset>(tokens) * blockIdx.y / parts);
  const int end = static_cast<int>(static_cast<Offset>(tokens) * (blockIdx.y + 1) / parts);
  const int width = min(loads, static_cast<int>(blockDim.x)), groups = static_cast<int>(blockDim.x) / width;
  const int group = threadIdx.x / width, lane = threadIdx.x % width;
  x += head * n * static_cast<Offset>(d);
  for (int q0 = 0; q0 < loads; q0 += width) {
    const int q = q0 + lane;
    double sum[Lanes] = {};
    if (q < loads && group < groups)
#pragma unroll 4
      for (int t = begin + group; t < end; t += groups) {
        const Packed<T, Lanes> value =
            *reinterpret_cast<const Packed<T, Lanes>*>(x + set.token(t) * d + q * Lanes);
#pragma unroll
        for (int u = 0; u < Lanes; ++u) sum[u] += static_cast<double>(value.v[u]);
      }
#pragma unroll
    for (int u = 0; u < Lanes; ++u) sums[threadIdx.x * Lanes + u] = sum[u];
    __syncthreads();
    if (group == 0 && q < loads)
      for (int u = 0; u < Lanes; ++u) {
        double total = 0;
        for (int g = 0; g < groups; ++g) total += sums[(g * width + lane) * Lanes + u];
        const int c = q * Lanes + u;
        if (parts == 1)
          out[head * m * static_cast<Offset>(d) + landmark + c * static_cast<Offset>(m)] =
              static_cast<T>(total / tokens);
        else
          partial[(static_cast<Offset>(blockIdx.y) * gridDim.x + blockIdx.x) * d + c] = total;
      }
    __syncthreads();
  }
}

template <class T>
__global__ void pooled_parts_kernel(const double* partial, int parts, Offset landmarks, int n, int d, int m,
                                    int window_rows, int window_cols, int grid_rows, int grid_cols, T* out) {
  // The parts' sums of landmark ℓ, column c added in order.
  for (Offset e = blockIdx.x * static_cast<Offset>(blockDim.x) + threadIdx.x; e < landmarks * d;
       e += static_cast<Offset>(gridDim.x) * blockDim.x) {
    const Offset index = e / d, head = index / m;
    const int c = static_cast<int>(e % d), landmark = static_cast<int>(index % m);
    double total = 0;
    for (int p = 0; p < parts; ++p) total += partial[(p * landmarks + index) * d + c];
    const int tokens =
        landmark_tokens(landmark, n, m, window_rows, window_cols, grid_rows, grid_cols).count();
    out[head * m * static_cast<Offset>(d) + landmark + c * static_cast<Offset>(m)] =
        static_cast<T>(total / tokens);
  }
}

}  // namespace

template <class T>
void distance_exponent(const T* x, Strides xs, int n, const T* y, Strides ys, int p, int d, Distance distance,
                       T factor, T* out, Offset ldo, Offset out_stride, int batch, cudaStream_t stream) {
  if (n == 0 || p == 0) return;
  constexpr int max_grid_z = 65535;
  for (int b0 = 0; b0 < batch; b0 += max_grid_z) {
    const dim3 grid((n + tile - 1) / tile, (p + tile - 1) / tile, std::min(max_grid_z, batch - b0));
    const T* xb = x + b0 * xs.batch;
    const T* yb = y + b0 * ys.batch;
    T* ob = out + b0 * out_stride;
    if (distance == Distance::l1)
      distance_kernel<T, Distance::l1>
          <<<grid, block_threads, 0, stream>>>(xb, xs, n, yb, ys, p, d, factor, ob, ldo, out_stride);
    else
      distance_kernel<T, Distance::squared_l2>
          <<<grid, block_threads, 0, stream>>>(xb, xs, n, yb, ys, p, d, factor, ob, ldo, out_stride);
    check_launch("distance_exponent");
  }
}

template <class T>
void map_lines(T* data, Offset ld, int length, int lines, ExpMap map, bool stabilize, T* shift_out,
               const LineSums<T>& sums, cudaStream_t stream) {
  if (lines == 0) return;
  // Long lines get a whole block each; short ones (m landmarks) a warp, or 16 or 8 of its lanes, each.
  const auto launch = [&](auto kernel, int group) {
    const int per_block = block_threads / group;
    kernel<<<(lines + per_block - 1) / per_block, block_threads, 0, stream>>>(data, ld, length, lines, map,
                                                                              stabilize, shift_out, sums);
  };
  if (length >= 1024)
    launch(map_lines_kernel<block_threads, T>, block_threads);
  else if (length > 16)
    launch(map_lines_kernel<32, T>, 32);
  else if (length > 8)
    launch(map_lines_kernel<16, T>, 16);
  else
    launch(map_lines_kernel<8, T>, 8);
  check_launch("map_lines");
}

template <class T>
void map_rows_shifted(T* data, Offset ld, int rows, int cols, ExpMap map, const T* row_shift, int batch,
                      Offset stride, Offset shift_stride, cudaStream_t stream) {
  if (rows == 0 || cols == 0 || batch == 0) return;
  map_rows_shifted_kernel<T>
      <<<blocks_for(static_cast<Offset>(rows) * cols * batch, block_threads), block_threads, 0, stream>>>(
          data, ld, rows, cols, map, row_shift, batch, stride, shift_stride);
  check_launch("map_rows_shifted");
}

template <class T>
void exp_dot_lines(const T* data, Offset ld, int length, int lines, const T* x, T* out, cudaStream_t stream) {
  if (lines == 0) return;
  if (length >= 1024)
    exp_dot_lines_kernel<block_threads, T>
        <<<lines, block_threads, 0, stream>>>(data, ld, length, lines, x, out);
  else
    exp_dot_lines_kernel<32, T>
        <<<(lines + block_threads / 32 - 1) / (block_threads / 32), block_threads, 0, stream>>>(
            data, ld, length, lines, x, out);
  check_launch("exp_dot_lines");
}

template <class T>
void divide_rows(T* data, Offset ld, int rows, int cols, const T* denominators, T offset,
                 cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  divide_rows_kernel<T>
      <<<blocks_for(static_cast<Offset>(rows) * cols, block_threads), block_threads, 0, stream>>>(
          data, ld, rows, cols, denominators, offset);
  check_launch("divide_rows");
}

template <class T>
void divide_columns(T* data, Offset ld, int rows, int cols, const T* denominators, T offset,
                    cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  divide_columns_kernel<T>
      <<<blocks_for(static_cast<Offset>(rows) * cols, block_threads), block_threads, 0, stream>>>(
          data, ld, rows, cols, denominators, offset);
  check_launch("divide_columns");
}

template <class T>
void fill(T* data, Offset rows, Offset cols, Offset ld, Offset stride, Offset count, T value,
          cudaStream_t stream) {
  if (rows == 0 || cols == 0 || count == 0) return;
  fill_kernel<T><<<blocks_for(rows * cols * count, block_threads), block_threads, 0, stream>>>(
      data, rows, cols, ld, stride, count, value);
  check_launch("fill");
}

template <class T>
void fill(T* data, Offset count, T value, cudaStream_t stream) {
  fill(data, count, 1, count, count, 1, value, stream);
}

template <class T>
void add_to_diagonal(T* a, Offset lda, int m, T value, int batch, Offset stride, cudaStream_t stream) {
  if (m == 0 || batch == 0) return;
  add_to_diagonal_kernel<T>
      <<<blocks_for(static_cast<Offset>(m) * batch, block_threads), block_threads, 0, stream>>>(
          a, lda, m, value, batch, stride);
  check_launch("add_to_diagonal");
}

template <class From, class To>
void convert(const From* in, To* out, Offset count, cudaStream_t stream) {
  if (count == 0) return;
  convert_kernel<From, To><<<blocks_for(count, block_threads), block_threads, 0, stream>>>(in, out, count);
  check_launch("convert");
}

template <class T>
void pinv_iterate(const T* m_matrix, int m, int count, bool razavi, int iterations, double alpha,
                  const double* shared_alpha, double tolerance, T* z, T* workspace, double* residuals,
                  int* info, double* alpha_out, cudaStream_t stream) {
  if (count == 0) return;
  const std::size_t bytes = pinv_shared_bytes<T>(m);
  pinv_iterate_kernel<T><<<count, pinv_threads, bytes, stream>>>(m_matrix, m, razavi, iterations, alpha,
                                                                 shared_alpha, tolerance, z, workspace,
                                                                 residuals, info, alpha_out, bytes > 0);
  check_launch("pinv_iterate");
}

template <class T>
void batch_alpha(const T* m_matrix, int m, int count, double* alpha_out, cudaStream_t stream) {
  batch_alpha_kernel<T><<<1, pinv_threads, 0, stream>>>(m_matrix, m, count, alpha_out);
  check_launch("batch_alpha");
}

template <class T>
void svd_pseudoinverse(const double* u, const double* v, bool v_transposed, const double* sigma, int m,
                       int count, double cut, const T* m_matrix, T* z, double* residuals,
                       Offset residual_stride, int* info, cudaStream_t stream) {
  if (count == 0) return;
  svd_pseudoinverse_kernel<T><<<count, pinv_threads, 0, stream>>>(u, v, v_transposed, sigma, m, cut, m_matrix,
                                                                  z, residuals, residual_stride, info);
  check_launch("svd_pseudoinverse");
}

Offset pooled_landmarks_scratch(int n, int d, int count, int m) {
  const Offset landmarks = static_cast<Offset>(count) * m;
  const int parts = landmark_parts(landmarks, n / m);
  return parts > 1 ? parts * landmarks * d : 0;
}

template <class T>
void pooled_landmarks(const T* x, int n, int d, int count, int m, int window_rows, int window_cols,
                      int grid_rows, int grid_cols, double* scratch, T* out, cudaStream_t stream) {
  if (count == 0) return;
  const Offset landmarks = static_cast<Offset>(count) * m;
  const int parts = landmark_parts(landmarks, n / m);
  // 16-byte loads where every token's row is 16-byte aligned, else one entry per load.
  constexpr int lanes = 16 / sizeof(T);
  const dim3 grid(static_cast<unsigned>(landmarks), parts);
  if (d % lanes == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0)
    pooled_sums_kernel<T, lanes><<<grid, pooled_threads, 0, stream>>>(x, n, d, m, window_rows, window_cols,
                                                                      grid_rows, grid_cols, scratch, out);
  else
    pooled_sums_kernel<T, 1><<<grid, pooled_threads, 0, stream>>>(x, n, d, m, window_rows, window_cols,
                                                                  grid_rows, grid_cols, scratch, out);
  check_launch("pooled_landmarks");
  if (parts == 1) return;
  pooled_parts_kernel<T><<<blocks_for(landmarks * d, block_threads), block_threads, 0, stream>>>(
      scratch, parts, landmarks, n, d, m, window_rows, window_cols, grid_rows, grid_cols, out);
  check_launch("pooled_landmarks");
}

#define NYSTROM_CUDA_INSTANTIATE(T)                                                                        \
  template void distance_exponent<T>(const T*, Strides, int, const T*, Strides, int, int, Distance, T, T*, \
                                     Offset, Offset, int, cudaStream_t);                                   \
  template void map_lines<T>(T*, Offset, int, int, ExpMap, bool, T*, const LineSums<T>&, cudaStream_t);    \
  template void map_rows_shifted<T>(T*, Offset, int, int, ExpMap, const T*, int, Offset, Offset,           \
                                    cudaStream_t);                                                         \
  template void exp_dot_lines<T>(const T*, Offset, int, int, const T*, T*, cudaStream_t);                  \
  template void divide_rows<T>(T*, Offset, int, int, const T*, T, cudaStream_t);                           \
  template void divide_columns<T>(T*, Offset, int, int, const T*, T, cudaStream_t);                        \
  template void fill<T>(T*, Offset, T, cudaStream_t);                                                      \
  template void fill<T>(T*, Offset, Offset, Offset, Offset, Offset, T, cudaStream_t);                      \
  template void add_to_diagonal<T>(T*, Offset, int, T, int, Offset, cudaStream_t);                         \
  template void pinv_iterate<T>(const T*, int, int, bool, int, double, const double*, double, T*, T*,      \
                                double*, int*, double*, cudaStream_t);                                     \
  template void batch_alpha<T>(const T*, int, int, double*, cudaStream_t);                                 \
  template void svd_pseudoinverse<T>(const double*, const double*, bool, const double*, int, int, double,  \
                                     const T*, T*, double*, Offset, int*, cudaStream_t);                   \
  template void pooled_landmarks<T>(const T*, int, int, int, int, int, int, int, int, double*, T*,         \
                                    cudaStream_t);
NYSTROM_CUDA_INSTANTIATE(float)
NYSTROM_CUDA_INSTANTIATE(double)
#undef NYSTROM_CUDA_INSTANTIATE
template void fill<int>(int*, Offset, int, cudaStream_t);
template void convert<float, double>(const float*, double*, Offset, cudaStream_t);
template void convert<double, float>(const double*, float*, Offset, cudaStream_t);

}  // namespace nystrom::cuda::detail
