#pragma once
/// @file pinv.hpp
/// The m×m pseudoinverses on the device (internal; docs/mathematics.md §4) for a batch of matrices, shared by
/// cuda::pseudoinverse, the single-head Nyström pipeline and the batched plan. Diagnostics stay on the device
/// until asked for, so Algorithm 1 never waits for them.

#include <cusolverDn.h>

#include <memory>
#include <type_traits>
#include <vector>

#include "device.hpp"
#include "nystrom/pinv.hpp"

namespace nystrom::cuda::detail {

/// Z_b ≈ A_b⁺ for `count` m×m device matrices A_b (column-major, A_b at a + b·m²) by `options`, as
/// nystrom::pseudoinverse: the matrix inverted is A_b, A_b + εI (shift) or A_bᵀA_b + εI (Tikhonov, then Z_b ←
/// Z_bA_bᵀ); exact by cuSOLVER's batched Jacobi SVD in double (m ≤ 32; one gesvd per matrix above), or all
/// the Razavi / Newton–Schulz iterations in one launch. Every buffer is allocated by the constructor and
/// reused by each compute(), which queues its work on the context stream and returns without waiting.
template <class T>
class DevicePinv {
 public:
  DevicePinv() = default;
  DevicePinv(int m, int count, const PinvOptions& options);
  ~DevicePinv();
  DevicePinv(DevicePinv&&) noexcept;
  DevicePinv& operator=(DevicePinv&&) noexcept;

  /// Queues Z_b ≈ A_b⁺ for the matrices at `a`; with `shared_alpha`, the iterations start from the batch α
  /// = 1/(max_b ‖M_b‖₁ · max_b ‖M_b‖_∞) (found on the device) instead of each matrix's own.
  void compute(const T* a, bool shared_alpha = false);
  /// Z_b at z() + b·m² (column-major, leading dimension m).
  const T* z() const;
  int m() const { return m_; }
  int count() const { return count_; }
  /// Whether compute() for m×m matrices by `options` can be captured in a CUDA graph: not where it takes one
  /// cuSOLVER gesvd per matrix (the exact method above m = 32), which synchronizes.
  static bool capturable(int m, const PinvOptions& options);

  /// Z_b with its diagnostics (waits for the device).
  PinvResult<T> result(int b) const;
  /// The status and last residual ‖I − M_bZ_b‖_F of every matrix (waits).
  std::vector<std::pair<PinvStatus, double>> statuses() const;
  /// The batch α of the last compute with shared_alpha (waits).
  double shared_alpha() const;

 private:
  struct Solver;
  int m_ = 0, count_ = 0;
  PinvOptions options_;
  int entries_ = 0;                 ///< residuals per matrix: 1 (exact) or iterations + 1
  DeviceBuffer<T> inverted_;        ///< M_b
  DeviceBuffer<T> z_, product_;     ///< Z_b; Z_bA_bᵀ (Tikhonov)
  DeviceBuffer<T> workspace_;       ///< iterations: 4·m² per matrix
  DeviceBuffer<double> residuals_;  ///< entries_ per matrix
  DeviceBuffer<double> alphas_;     ///< α used, per matrix
  DeviceBuffer<double> batch_alpha_;
  DeviceBuffer<int> info_;          ///< {PinvCode, iterations run, rank} per matrix
  std::unique_ptr<Solver> solver_;  ///< the exact method's SVD buffers
};

}  // namespace nystrom::cuda::detail
