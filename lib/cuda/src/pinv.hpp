#pragma once
/// @file pinv.hpp
/// The m×m pseudoinverse on the device (internal; MATH.md §4), shared by cuda::pseudoinverse and the Nyström
/// pipeline. Diagnostics stay on the device until asked for, so Algorithm 1 never waits for them.

#include "device.hpp"
#include "nystrom/pinv.hpp"

namespace nystrom::cuda::detail {

/// Z ≈ A⁺ on the device with its diagnostics (still on the device).
template <class T>
struct DevicePinv {
  DeviceMatrix<T> z;
  DeviceBuffer<double> residuals;  ///< ‖I − MZ_k‖_F, k = 0 .. iterations (one entry for exact)
  DeviceBuffer<int> info;          ///< {PinvCode, iterations run, rank}
  DeviceBuffer<double> alpha;      ///< α used (iterative methods)
  bool exact = false;

  /// Copies the diagnostics and Z back into a PinvResult (waits for the device).
  PinvResult<T> result() const;
};

/// Z ≈ A⁺ for a square device matrix A by `options` (validated by the caller), as nystrom::pseudoinverse: the
/// matrix inverted is A, A + εI (shift) or AᵀA + εI (Tikhonov, then Z ← ZAᵀ); exact by cuSOLVER's SVD in
/// double with the relative cut, or the Razavi / Newton–Schulz iteration in a single kernel launch.
template <class T>
DevicePinv<T> device_pseudoinverse(const DeviceMatrix<T>& A, const PinvOptions& options);

}  // namespace nystrom::cuda::detail
