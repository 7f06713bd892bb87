#include "nystrom/cuda/runtime.hpp"

#include <cuda_runtime.h>

#include <sstream>

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

}  // namespace nystrom::cuda
