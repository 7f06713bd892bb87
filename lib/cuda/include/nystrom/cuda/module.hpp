#pragma once
/// @file module.hpp
/// The CUDA backend as a module (libnystrom_cuda.so) that nystrom/backend.hpp loads on the first request for
/// Device::cuda, so CPU runs never load the CUDA libraries (cuBLAS, cuSOLVER and the runtime cost ~60 ms at
/// every process start). The module exports one C symbol, nystrom_cuda_module(), returning this table of its
/// entry points; both sides are built from the same headers and compiler flags in one CMake build.

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>

#include "nystrom/backend.hpp"
#include "nystrom/cuda/batched.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cuda {

/// The backend's operations in one scalar type (the cuda:: functions of attention.hpp, batched.hpp,
/// kernels.hpp, operators.hpp and runtime.hpp).
template <class T>
struct Operations {
  Matrix<T> (*exact_attention)(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                               const ConstMatrixRef<T>& V, const Kernel& kernel);
  PinvResult<T> (*pseudoinverse)(const ConstMatrixRef<T>& A, const PinvOptions& options);
  NystromFactors<T> (*generalized_nystrom)(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                           const Landmarks<T>& landmarks, const NystromOptions& options);
  Matrix<T> (*nystrom_attention)(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                 const ConstMatrixRef<T>& V, const Landmarks<T>& landmarks,
                                 const NystromOptions& options);
  Matrix<T> (*kernel_block)(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel);
  AnyOperator<T> (*kernel_operator)(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                                    const Kernel& kernel);
  AnyOperator<T> (*error_operator)(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                   const NystromFactors<T>& factors);
  double (*gemm_seconds)(Index n);
  std::unique_ptr<nystrom::detail::BatchedRunner<T>> (*batched_plan)(Method method, const BatchShape& shape,
                                                                     const ApproximationOptions& options,
                                                                     AlphaScope alpha_scope,
                                                                     const LandmarkPooling& pooling);
};

/// Everything the module offers.
struct Module {
  int (*device_count)();
  std::string (*device_description)();
  void* (*allocate)(std::size_t bytes);
  void (*release)(void* data);
  void (*copy_to_device)(void* device, const void* host, std::size_t bytes);
  void (*copy_to_host)(void* host, const void* device, std::size_t bytes);
  Operations<float> single_precision;
  Operations<double> double_precision;

  template <class T>
  const Operations<T>& operations() const {
    if constexpr (std::is_same_v<T, float>)
      return single_precision;
    else
      return double_precision;
  }
};

}  // namespace nystrom::cuda

/// The module's entry point (dlsym name "nystrom_cuda_module").
extern "C" const nystrom::cuda::Module* nystrom_cuda_module();
