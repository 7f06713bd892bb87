#include "nystrom/cuda/runtime.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <sstream>

#include "device.hpp"

namespace nystrom::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return count;
}

std::string device_description() {
  if (device_count() == 0) return "";
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, 0) != cudaSuccess) return "";
  std::ostringstream out;
  out << properties.name << " (sm_" << properties.major << properties.minor << ", "
      << (properties.totalGlobalMem >> 30) << " GiB)";
  return out.str();
}

void* allocate(std::size_t bytes) {
  void* data = nullptr;
  NYSTROM_CUDA_CHECK(cudaMalloc(&data, bytes));
  return data;
}

void release(void* data) {
  if (data) cudaFree(data);
}

void copy_to_device(void* device, const void* host, std::size_t bytes) {
  const detail::Context& context = detail::context();
  NYSTROM_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, context.stream));
  context.synchronize();
}

void copy_to_host(void* host, const void* device, std::size_t bytes) {
  const detail::Context& context = detail::context();
  NYSTROM_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, context.stream));
  context.synchronize();
}

template <class T>
double gemm_seconds(Index n) {
  using detail::context;
  const Matrix<T> host = Matrix<T>::Random(n, n);
  const detail::DeviceMatrix<T> a = detail::upload<T>(host), b = detail::upload<T>(host);
  detail::DeviceMatrix<T> c(n, n);
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 4; ++run) {
    context().synchronize();
    const auto start = std::chrono::steady_clock::now();
    detail::gemm(CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(n), int(n), T(1), a.data(), a.ld(), b.data(), b.ld(),
                 T(0), c.data(), c.ld());
    context().synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (run > 0) best = std::min(best, seconds);  // run 0 warms up cuBLAS
  }
  return best;
}

template double gemm_seconds<float>(Index);
template double gemm_seconds<double>(Index);

}  // namespace nystrom::cuda
