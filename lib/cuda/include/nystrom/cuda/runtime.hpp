#pragma once
/// @file runtime.hpp
/// What the CUDA runtime sees on this machine. Part of the nystrom_cuda target (built only with
/// NYSTROM_WITH_CUDA); the rest of the library reaches the GPU through nystrom/backend.hpp.

#include <cstddef>
#include <string>

#include "nystrom/types.hpp"

namespace nystrom::cuda {

/// Number of CUDA devices visible to this process; 0 when there is no device or no driver (never throws).
int device_count();

/// "NVIDIA H100 80GB HBM3 (sm_90, 79 GiB)" for device 0, or "" when there is none.
std::string device_description();

/// `bytes` of device memory on device 0 (cudaMalloc; throws std::runtime_error when it fails).
void* allocate(std::size_t bytes);
/// Frees memory from allocate (null is ignored).
void release(void* data);
/// Copies `bytes` from host memory to device memory, after the work queued on the calling thread's stream.
void copy_to_device(void* device, const void* host, std::size_t bytes);
/// Copies `bytes` from device memory to host memory, after the work queued on the calling thread's stream
/// (waits).
void copy_to_host(void* host, const void* device, std::size_t bytes);

/// Seconds of one n×n×n cuBLAS GEMM in T on device 0, synchronized (best of three after a warm-up): the
/// reference rate that `nystrom bench --device cuda` reports fractions of.
template <class T>
double gemm_seconds(Index n);

}  // namespace nystrom::cuda
