#pragma once
/// @file device.hpp
/// The host side of the CUDA backend (internal): error checks, RAII device memory, the per-thread
/// cuBLAS/cuSOLVER context, typed cuBLAS wrappers, transfers from and to Eigen matrices, and the kernel
/// exponent φ(X, Y) on device blocks. Compiled by the host compiler; the device code it launches lives in
/// primitives.cu.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusolverDn.h>

#include <cstddef>
#include <utility>

#include "nystrom/kernels.hpp"
#include "nystrom/types.hpp"
#include "primitives.cuh"

namespace nystrom::cuda::detail {

/// Throw std::runtime_error naming the call and the CUDA, cuBLAS or cuSOLVER error (system failures, not bad
/// input).
void check(cudaError_t status, const char* call);
void check(cublasStatus_t status, const char* call);
void check(cusolverStatus_t status, const char* call);

#define NYSTROM_CUDA_CHECK(call) ::nystrom::cuda::detail::check((call), #call)

/// Per-thread handles on one stream; everything the backend launches runs on this stream, in order.
struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  Context();
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  void synchronize() const;
};

/// The calling thread's context (created on first use).
Context& context();

/// Owning device array of `size` elements of T (uninitialized), allocated from the stream-ordered pool of the
/// calling thread's stream (cudaMallocAsync), so neither allocation nor release synchronizes the device.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t size) : size_(size), stream_(context().stream) {
    if (size > 0)
      NYSTROM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&data_), size * sizeof(T), stream_));
  }
  ~DeviceBuffer() {
    if (data_) cudaFreeAsync(data_, stream_);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        stream_(other.stream_) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(stream_, other.stream_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
  cudaStream_t stream_ = nullptr;
};

/// A column-major rows×cols matrix on the device with leading dimension rows.
template <class T>
struct DeviceMatrix {
  DeviceBuffer<T> buffer;
  int rows = 0;
  int cols = 0;
  DeviceMatrix() = default;
  DeviceMatrix(Index r, Index c);
  T* data() { return buffer.data(); }
  const T* data() const { return buffer.data(); }
  Offset ld() const { return rows; }
};

/// Copies a host matrix (any outer stride) to a new device matrix.
template <class T>
DeviceMatrix<T> upload(const ConstMatrixRef<T>& host);
/// Copies `count` host values to `device` (asynchronously on the context stream; the host array must outlive
/// it).
template <class T>
void upload(const T* host, T* device, std::size_t count);
/// Copies the leading rows×cols block of a device array with leading dimension ld into a new host matrix
/// (waits).
template <class T>
Matrix<T> download(const T* device, Offset ld, Index rows, Index cols);
/// Copies `count` device values to `host` (waits).
template <class T>
void download(const T* device, T* host, std::size_t count);

/// cuBLAS column-major C = α·op(A)·op(B) + β·C.
void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha, const float* a,
          Offset lda, const float* b, Offset ldb, float beta, float* c, Offset ldc);
void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, double alpha, const double* a,
          Offset lda, const double* b, Offset ldb, double beta, double* c, Offset ldc);
/// cuBLAS C_b = α·op(A_b)·op(B_b) + β·C_b for `count` products, A_b at a + b·stride_a (likewise B_b, C_b).
void gemm_batched(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                  const float* a, Offset lda, Offset stride_a, const float* b, Offset ldb, Offset stride_b,
                  float beta, float* c, Offset ldc, Offset stride_c, int count);
void gemm_batched(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, double alpha,
                  const double* a, Offset lda, Offset stride_a, const double* b, Offset ldb, Offset stride_b,
                  double beta, double* c, Offset ldc, Offset stride_c, int count);
/// cuBLAS y = α·op(A)·x + β·y for an m×n A.
void gemv(cublasOperation_t op, int m, int n, float alpha, const float* a, Offset lda, const float* x,
          float beta, float* y);
void gemv(cublasOperation_t op, int m, int n, double alpha, const double* a, Offset lda, const double* x,
          double beta, double* y);
/// cuBLAS C = α·op(A) + β·op(B) (used for transposes and copies).
void geam(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, float alpha, const float* a,
          Offset lda, float beta, const float* b, Offset ldb, float* c, Offset ldc);
void geam(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, double alpha, const double* a,
          Offset lda, double beta, const double* b, Offset ldb, double* c, Offset ldc);

/// A batch of device matrices as an operand of exponent(): entry (i, c) of matrix b at data[b·stride + i +
/// c·ld] (column-major) or data[b·stride + i·ld + c] (row-major, like a head of a [B, H, N, d] tensor).
template <class T>
struct Operand {
  const T* data = nullptr;
  Offset ld = 0;
  bool row_major = false;
  Offset stride = 0;

  Strides strides() const { return row_major ? Strides{ld, 1, stride} : Strides{1, ld, stride}; }
};

/// out_b (n×p, column-major, leading dimension ldo, at out + b·out_stride) = φ(X_b, Y_b) for `count` pairs of
/// device matrices X_b (n×d) and Y_b (p×d): one strided batched cuBLAS GEMM s·X_bY_bᵀ for the exponential
/// kernel, the tiled distance kernel for Laplacian and Gaussian (docs/mathematics.md §1).
template <class T>
void exponent(const Kernel& kernel, Operand<T> x, int n, Operand<T> y, int p, int d, T* out, Offset ldo,
              Offset out_stride, int count);

/// The same for one pair of column-major matrices X (n×d, leading dimension ldx) and Y (p×d).
template <class T>
void exponent(const Kernel& kernel, const T* x, Offset ldx, int n, const T* y, Offset ldy, int p, int d,
              T* out, Offset ldo) {
  exponent<T>(kernel, {x, ldx}, n, {y, ldy}, p, d, out, ldo, 0, 1);
}

/// Entries of the backend's largest work buffer (logit panels): 2^26, 256 MiB in float, 512 MiB in double.
constexpr Index panel_budget = Index(1) << 26;

/// Rows per panel so that a panel of `length`×rows entries stays within panel_budget.
int panel_rows(Index length, Index rows);

}  // namespace nystrom::cuda::detail
