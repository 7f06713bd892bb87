#include "nystrom/cuda/module.hpp"

#include <memory>

#include "nystrom/cuda/attention.hpp"
#include "nystrom/cuda/batched.hpp"
#include "nystrom/cuda/kernels.hpp"
#include "nystrom/cuda/operators.hpp"
#include "nystrom/cuda/runtime.hpp"

namespace nystrom::cuda {

namespace {

template <class T>
Operations<T> operations() {
  return {
      .exact_attention = &exact_attention<T>,
      .pseudoinverse = &pseudoinverse<T>,
      .generalized_nystrom = &generalized_nystrom<T>,
      .nystrom_attention = &nystrom_attention<T>,
      .kernel_block = &kernel_block<T>,
      .kernel_operator =
          [](const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel) {
            return AnyOperator<T>(std::make_shared<KernelOperator<T>>(X, Y, kernel));
          },
      .error_operator =
          [](const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const NystromFactors<T>& factors) {
            return AnyOperator<T>(std::make_shared<DifferenceOperator<T>>(Q, K, factors));
          },
      .gemm_seconds = &gemm_seconds<T>,
      .batched_plan = &batched_plan<T>,
  };
}

}  // namespace

}  // namespace nystrom::cuda

extern "C" const nystrom::cuda::Module* nystrom_cuda_module() {
  using namespace nystrom::cuda;
  static const Module module{&device_count,   &device_description, &allocate,           &release,
                             &copy_to_device, &copy_to_host,       operations<float>(), operations<double>()};
  return &module;
}
