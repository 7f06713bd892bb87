#pragma once
/// @file attention.hpp
/// Exact attention and its error measures (docs/mathematics.md §1, §7): O = (G V) ⊘ (G 1_N) = S V with S =
/// D⁻¹G. Computed in tiles with a per-row max shift, so nothing N×N is stored and large logits do not
/// overflow.

#include "nystrom/kernels.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// O = (κ(Q,K) V) ⊘ (κ(Q,K) 1_N) by the online softmax over key tiles (FlashAttention's tiling): query panels
/// spread over the OpenMP threads (single-threaded BLAS inside), one logit GEMM and one output GEMM per
/// 256-query × 512-key tile (two panels below 512 queries), running row max and sums; Q: n×d, K: N×d, V:
/// N×dv. The panels depend on n alone: the same bits on any thread count. O(nN(d + dv)) time,
/// O(threads·tile·panel) memory.
template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel);

/// Exact attention as a kernel that stores its matrices in `storage` computes it (docs/mathematics.md §8),
/// adding what rounding did to `rounding`: half and bfloat16 are emulated in float32 (T = float), as
/// FlashAttention in half stores P and accumulates in float32, with the whole row as one key tile: Q, K and V
/// rounded, then per query row the logits R(φ), their maximum μ, P = R(exp(φ − μ)), ℓ = R(P 1), and O =
/// R(R(P V) / ℓ). Panels of 64 queries over the OpenMP threads; the same bits on any thread count. O(nN(d +
/// dv)) time, O(threads·64·N) memory. The native formats are exact_attention above (nothing counted); an
/// emulated storage with T = double throws std::invalid_argument naming it.
template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel, Precision storage, RoundingCounts& rounding);

/// The dense attention matrix S = D⁻¹G (row-stochastic), computed with a per-row max shift. Small N only.
template <class T>
Matrix<T> attention_matrix(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel);

/// The same into `out` (n×N; memory of the caller's, such as a new numpy array); throws std::invalid_argument
/// naming its shape when it is not n×N.
template <class T>
void attention_matrix(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel,
                      MatrixRef<T> out);

/// Output error measures against exact attention (docs/formats.md §2): ‖O − Ô‖_F/‖O‖_F, max|O − Ô|, mean|O −
/// Ô|.
struct OutputErrors {
  double relative_frobenius = 0;
  double max_abs = 0;
  double mean_abs = 0;
};

/// Errors of `approximate` against `exact` (same shape), accumulated in double.
template <class T>
OutputErrors output_errors(const ConstMatrixRef<T>& exact, const ConstMatrixRef<T>& approximate);

}  // namespace nystrom
