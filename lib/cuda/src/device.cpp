#include "device.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace nystrom::cuda::detail {

namespace {

[[noreturn]] void fail(const char* call, const std::string& error) {
  throw std::runtime_error(std::string("CUDA backend: ") + call + " failed: " + error);
}

}  // namespace

void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) fail(call, cudaGetErrorString(status));
}

void check(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS) fail(call, cublasGetStatusString(status));
}

void check(cusolverStatus_t status, const char* call) {
  if (status != CUSOLVER_STATUS_SUCCESS)
    fail(call, "cuSOLVER status " + std::to_string(static_cast<int>(status)));
}

Context::Context() {
  NYSTROM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  NYSTROM_CUDA_CHECK(cublasCreate(&blas));
  NYSTROM_CUDA_CHECK(cublasSetStream(blas, stream));
  NYSTROM_CUDA_CHECK(cusolverDnCreate(&solver));
  NYSTROM_CUDA_CHECK(cusolverDnSetStream(solver, stream));
  // The stream-ordered pool keeps freed memory instead of returning it to the driver at each synchronization,
  // so the per-call buffers of DeviceBuffer are reused without new mappings.
  int device = 0;
  NYSTROM_CUDA_CHECK(cudaGetDevice(&device));
  cudaMemPool_t pool = nullptr;
  NYSTROM_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep_all = UINT64_MAX;
  NYSTROM_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
}

Context::~Context() {
  if (solver) cusolverDnDestroy(solver);
  if (blas) cublasDestroy(blas);
  if (stream) cudaStreamDestroy(stream);
}

void Context::synchronize() const {
  NYSTROM_CUDA_CHECK(cudaStreamSynchronize(stream));
}

Context& context() {
  thread_local Context instance;
  return instance;
}

template <class T>
DeviceMatrix<T>::DeviceMatrix(Index r, Index c)
    : buffer(static_cast<std::size_t>(r * c)), rows(static_cast<int>(r)), cols(static_cast<int>(c)) {}

template <class T>
DeviceMatrix<T> upload(const ConstMatrixRef<T>& host) {
  DeviceMatrix<T> device(host.rows(), host.cols());
  if (host.size() == 0) return device;
  NYSTROM_CUDA_CHECK(cudaMemcpy2DAsync(device.data(), host.rows() * sizeof(T), host.data(),
                                       host.outerStride() * sizeof(T), host.rows() * sizeof(T), host.cols(),
                                       cudaMemcpyHostToDevice, context().stream));
  // From pageable host memory the call returns only once the data is staged, so `host` may go away now.
  return device;
}

template <class T>
void upload(const T* host, T* device, std::size_t count) {
  if (count == 0) return;
  NYSTROM_CUDA_CHECK(
      cudaMemcpyAsync(device, host, count * sizeof(T), cudaMemcpyHostToDevice, context().stream));
}

template <class T>
Matrix<T> download(const T* device, Offset ld, Index rows, Index cols) {
  Matrix<T> host(rows, cols);
  if (host.size() == 0) return host;
  NYSTROM_CUDA_CHECK(cudaMemcpy2DAsync(host.data(), rows * sizeof(T), device, ld * sizeof(T),
                                       rows * sizeof(T), cols, cudaMemcpyDeviceToHost, context().stream));
  context().synchronize();
  return host;
}

template <class T>
void download(const T* device, T* host, std::size_t count) {
  if (count > 0)
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(host, device, count * sizeof(T), cudaMemcpyDeviceToHost, context().stream));
  context().synchronize();
}

void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha, const float* a,
          Offset lda, const float* b, Offset ldb, float beta, float* c, Offset ldc) {
  NYSTROM_CUDA_CHECK(cublasSgemm(context().blas, op_a, op_b, m, n, k, &alpha, a, static_cast<int>(lda), b,
                                 static_cast<int>(ldb), &beta, c, static_cast<int>(ldc)));
}

void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, double alpha, const double* a,
          Offset lda, const double* b, Offset ldb, double beta, double* c, Offset ldc) {
  NYSTROM_CUDA_CHECK(cublasDgemm(context().blas, op_a, op_b, m, n, k, &alpha, a, static_cast<int>(lda), b,
                                 static_cast<int>(ldb), &beta, c, static_cast<int>(ldc)));
}

void gemm_batched(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, float alpha,
                  const float* a, Offset lda, Offset stride_a, const float* b, Offset ldb, Offset stride_b,
                  float beta, float* c, Offset ldc, Offset stride_c, int count) {
  NYSTROM_CUDA_CHECK(cublasSgemmStridedBatched(context().blas, op_a, op_b, m, n, k, &alpha, a,
                                               static_cast<int>(lda), stride_a, b, static_cast<int>(ldb),
                                               stride_b, &beta, c, static_cast<int>(ldc), stride_c, count));
}

void gemm_batched(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, double alpha,
                  const double* a, Offset lda, Offset stride_a, const double* b, Offset ldb, Offset stride_b,
                  double beta, double* c, Offset ldc, Offset stride_c, int count) {
  NYSTROM_CUDA_CHECK(cublasDgemmStridedBatched(context().blas, op_a, op_b, m, n, k, &alpha, a,
                                               static_cast<int>(lda), stride_a, b, static_cast<int>(ldb),
                                               stride_b, &beta, c, static_cast<int>(ldc), stride_c, count));
}

void gemv(cublasOperation_t op, int m, int n, float alpha, const float* a, Offset lda, const float* x,
          float beta, float* y) {
  NYSTROM_CUDA_CHECK(
      cublasSgemv(context().blas, op, m, n, &alpha, a, static_cast<int>(lda), x, 1, &beta, y, 1));
}

void gemv(cublasOperation_t op, int m, int n, double alpha, const double* a, Offset lda, const double* x,
          double beta, double* y) {
  NYSTROM_CUDA_CHECK(
      cublasDgemv(context().blas, op, m, n, &alpha, a, static_cast<int>(lda), x, 1, &beta, y, 1));
}

void geam(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, float alpha, const float* a,
          Offset lda, float beta, const float* b, Offset ldb, float* c, Offset ldc) {
  NYSTROM_CUDA_CHECK(cublasSgeam(context().blas, op_a, op_b, m, n, &alpha, a, static_cast<int>(lda), &beta, b,
                                 static_cast<int>(ldb), c, static_cast<int>(ldc)));
}

void geam(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, double alpha, const double* a,
          Offset lda, double beta, const double* b, Offset ldb, double* c, Offset ldc) {
  NYSTROM_CUDA_CHECK(cublasDgeam(context().blas, op_a, op_b, m, n, &alpha, a, static_cast<int>(lda), &beta, b,
                                 static_cast<int>(ldb), c, static_cast<int>(ldc)));
}

template <class T>
void exponent(const Kernel& kernel, Operand<T> x, int n, Operand<T> y, int p, int d, T* out, Offset ldo,
              Offset out_stride, int count) {
  require(kernel.log_shift == 0 || kernel.type == KernelType::exponential,
          "cuda: a log_shift is applied to the exponential kernel only");
  switch (kernel.type) {
    case KernelType::exponential: {
      // PnP-Nystra eq. (2): φ = s·qᵀk, one GEMM per pair; a row-major operand is the transpose of a
      // column-major one. With a log-shift c, the GEMMs accumulate onto −c.
      const bool shifted = kernel.log_shift != 0;
      if (shifted) fill<T>(out, n, p, ldo, out_stride, count, T(-kernel.log_shift), context().stream);
      gemm_batched(x.row_major ? CUBLAS_OP_T : CUBLAS_OP_N, y.row_major ? CUBLAS_OP_N : CUBLAS_OP_T, n, p, d,
                   T(kernel.param), x.data, x.ld, x.stride, y.data, y.ld, y.stride, T(shifted ? 1 : 0), out,
                   ldo, out_stride, count);
      return;
    }
    case KernelType::laplacian:
      // LaplacianFormer Alg. 1: φ = −‖q − k‖₁/λ.
      distance_exponent(x.data, x.strides(), n, y.data, y.strides(), p, d, Distance::l1,
                        kernel.distance_factor<T>(), out, ldo, out_stride, count, context().stream);
      return;
    case KernelType::gaussian:
      distance_exponent(x.data, x.strides(), n, y.data, y.strides(), p, d, Distance::squared_l2,
                        kernel.distance_factor<T>(), out, ldo, out_stride, count, context().stream);
      return;
  }
}

int panel_rows(Index length, Index rows) {
  const Index budget = std::max<Index>(1, panel_budget / std::max<Index>(length, 1));
  return static_cast<int>(std::clamp<Index>(rows, 1, budget));
}

#define NYSTROM_CUDA_INSTANTIATE(T)                               \
  template struct DeviceMatrix<T>;                                \
  template DeviceMatrix<T> upload<T>(const ConstMatrixRef<T>&);   \
  template void upload<T>(const T*, T*, std::size_t);             \
  template Matrix<T> download<T>(const T*, Offset, Index, Index); \
  template void download<T>(const T*, T*, std::size_t);           \
  template void exponent<T>(const Kernel&, Operand<T>, int, Operand<T>, int, int, T*, Offset, Offset, int);
NYSTROM_CUDA_INSTANTIATE(float)
NYSTROM_CUDA_INSTANTIATE(double)
#undef NYSTROM_CUDA_INSTANTIATE
template void download<int>(const int*, int*, std::size_t);

}  // namespace nystrom::cuda::detail
