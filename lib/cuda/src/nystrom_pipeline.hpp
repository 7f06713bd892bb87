#pragma once
/// @file nystrom_pipeline.hpp
/// PnP-Nystra on the device for a batch of heads (internal): the generalized Nyström blocks with their
/// stabilization, the pseudoinverses of the cores, and Algorithm 1, each step one batched launch or one
/// strided batched cuBLAS call for all heads. Shared by the single-head functions of attention.hpp (one head,
/// column-major host matrices, landmarks from the host) and the batched plan (row-major [B, H, N, d] device
/// tensors, landmarks pooled on the device).

#include "device.hpp"
#include "nystrom/nystrom.hpp"
#include "pinv.hpp"

namespace nystrom::cuda::detail {

/// Work buffers of Algorithm 1 for `count` heads with dv value columns.
template <class T>
struct AlgorithmBuffers {
  DeviceBuffer<T> reduced, core_side;  ///< [G_U V, G_U 1] and W = Z [G_U V, G_U 1], m×(dv+1) per head

  AlgorithmBuffers() = default;
  AlgorithmBuffers(int count, int m, int dv);
};

/// The blocks of docs/mathematics.md §2 for `count` heads, stored so that every row max runs down a
/// contiguous column: left_t = G_Lᵀ (m×N per head, column i is query i), upper_t = G_Uᵀ (N×m, column j is
/// landmark j), core = G_A (m×m), heads one after another; the shifts log diag(M_L) (N per head) and log
/// diag(M_U) (m per head) are zero unless row-max stabilized (left unset in attention mode, where only the
/// row-max M_U is read). The buffers are allocated once and reused by
/// every compute().
template <class T>
struct DeviceFactors {
  int count = 0, n = 0, m = 0;
  DeviceBuffer<T> left_t, upper_t, core, left_shift, upper_shift;
  DevicePinv<T> pinv;

  DeviceFactors() = default;
  DeviceFactors(int count, int n, int m, const PinvOptions& pinv_options);

  /// Queues the blocks of every head from its tokens q_b, k_b (N×d operands) and landmarks Q̄_b, K̄_b
  /// (column-major m×d, at q_bar + b·m·d), then Z_b ≈ G_A,b⁺ (with the batch α when `shared_alpha`). With
  /// `attention` (for nystrom_output), left_t keeps the exponents φ(K̄, Q), which Algorithm 1 maps and
  /// normalizes in one pass once W is known, and the sums G_Uⁿ1 go straight to the last column of
  /// attention->reduced.
  void compute(const NystromOptions& options, Operand<T> q, Operand<T> k, int d, const T* q_bar,
               const T* k_bar, bool shared_alpha, AlgorithmBuffers<T>* attention = nullptr);
};

/// PnP-Nystra Algorithm 1 for every head, queued, on factors computed with `work` as their `attention`: W = Z
/// [G_U V, G_U 1] (m×(dv+1)), then each query's column of left_t mapped (row max, exp) and multiplied by
/// 1/(G_L W_1 + offset) in one pass, and Ô = (diag(G_L W_1 + offset)⁻¹ G_L) W_V (m divisions per query
/// instead of dv), never N×N. V_b is an N×dv operand; Ô_b is written row-major (out + b·N·dv, the [B, H, N,
/// dv] layout) or, with `row_major_out` false, column-major N×dv (one head). The row scale M_L cancels in the
/// ratio; the clamped variant's offset is 1e-12 as in the authors' code, else 0.
template <class T>
void nystrom_output(DeviceFactors<T>& factors, const NystromOptions& options, Operand<T> v, int dv,
                    AlgorithmBuffers<T>& work, T* out, bool row_major_out);

/// The map of the blocks' exponents for `options` (exp, or the clamped exponential with its threshold).
ExpMap exp_map(const NystromOptions& options);

}  // namespace nystrom::cuda::detail
