#pragma once
/// @file batched.hpp
/// Batched exact and PnP-Nystra attention on the GPU, device-resident: the plan behind
/// nystrom::BatchedAttentionPlan for Device::cuda (nystrom/backend.hpp, which validates the options and
/// resolves the landmark pooling on the host). Q, K, V and the output are [B, H, N, d] / [B, H, N, dv]
/// row-major tensors in device memory; a run queues every step on the calling thread's stream and returns
/// without waiting.

#include <memory>

#include "nystrom/approximation.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/batched.hpp"

namespace nystrom::cuda {

/// How the plan's landmarks are pooled on the device (docs/mathematics.md §5): segment means when
/// window_rows is 0, else adaptive average pooling of the tokens of a window_rows × window_cols window to a
/// grid_rows × grid_cols grid (the closest-square factors of m).
struct LandmarkPooling {
  int window_rows = 0;
  int window_cols = 0;
  int grid_rows = 0;
  int grid_cols = 0;
};

/// A plan for `method` (exact or pnp-nystra) on `shape` with every device buffer allocated: exact attention
/// in chunks of heads (the logits of as many heads as 2^26 entries hold, one strided batched GEMM each for
/// the logits and for the values, one launch for the softmax of all their rows); PnP-Nystra with the
/// landmarks pooled on the device, the blocks and Algorithm 1 by strided batched GEMMs over all heads, and
/// the m×m pseudoinverses of all heads at once, the batch α (AlphaScope::batch) found on the device.
template <class T>
std::unique_ptr<nystrom::detail::BatchedRunner<T>> batched_plan(Method method, const BatchShape& shape,
                                                                const ApproximationOptions& options,
                                                                AlphaScope alpha_scope,
                                                                const LandmarkPooling& pooling);

}  // namespace nystrom::cuda
