#pragma once
/// @file kernels.hpp
/// Kernel blocks κ(X, Y) on the GPU (docs/mathematics.md §1), mirroring nystrom::Kernel::block: the exponent
/// φ by one cuBLAS GEMM (exponential) or a tiled L1 / squared-L2 distance kernel (Laplacian, Gaussian), then
/// the exponential. The row-max stabilized blocks of PnP-Nystra eq. (8) are made inside
/// cuda::generalized_nystrom by the fused row-max / exp kernel. Inputs and outputs are host matrices; the
/// work is on device 0.

#include "nystrom/kernels.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cuda {

/// κ(X, Y) for X (n×d) and Y (p×d) as a new n×p matrix. O(n·p·d) on the device.
template <class T>
Matrix<T> kernel_block(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel);

}  // namespace nystrom::cuda
