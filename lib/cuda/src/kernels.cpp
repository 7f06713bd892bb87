#include "nystrom/cuda/kernels.hpp"

#include "device.hpp"
#include "nystrom/error.hpp"

namespace nystrom::cuda {

using namespace detail;

namespace {

template <class T>
void check_block_inputs(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const char* where) {
  require(X.cols() == Y.cols(), where, ": token dimensions differ, d = ", X.cols(), " and ", Y.cols());
}

}  // namespace

template <class T>
Matrix<T> kernel_block(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel) {
  check_block_inputs<T>(X, Y, "cuda::kernel_block");
  const DeviceMatrix<T> x = upload<T>(X), y = upload<T>(Y);
  DeviceMatrix<T> out(X.rows(), Y.rows());
  exponent(kernel, x.data(), x.ld(), x.rows, y.data(), y.ld(), y.rows, x.cols, out.data(), out.ld());
  map_rows_shifted<T>(out.data(), out.ld(), out.rows, out.cols, ExpMap{}, nullptr, 1, 0, 0, context().stream);
  return download(out.data(), out.ld(), out.rows, out.cols);
}

#define NYSTROM_CUDA_INSTANTIATE(T) \
  template Matrix<T> kernel_block<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const Kernel&);
NYSTROM_CUDA_INSTANTIATE(float)
NYSTROM_CUDA_INSTANTIATE(double)
#undef NYSTROM_CUDA_INSTANTIATE

}  // namespace nystrom::cuda
