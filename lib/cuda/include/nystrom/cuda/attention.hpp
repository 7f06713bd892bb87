#pragma once
/// @file attention.hpp
/// Exact attention, the generalized Nyström factors and PnP-Nystra attention (Algorithm 1) on the GPU,
/// mirroring nystrom/attention.hpp and nystrom/nystrom.hpp. Landmarks are chosen on the host
/// (nystrom::select_landmarks, O(Nd)) and passed in; nystrom/backend.hpp does that and validates the options.
/// Inputs and outputs are host matrices.

#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cuda {

/// O = (κ(Q,K) V) ⊘ (κ(Q,K) 1) for Q (n×d), K (N×d), V (N×dv), in row panels: per panel one cuBLAS GEMM (or
/// the distance kernel) for the logits, the fused row-max / exp / row-sum kernel, one GEMM with V, and the
/// row division. O(nN(d + dv)) time, O(N·b) device memory for a panel of b rows (never n×N for large n).
template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel);

/// Z ≈ A⁺ for a square A by `options` (docs/mathematics.md §4), as nystrom::pseudoinverse: exact by
/// cuSOLVER's SVD in double, or the Razavi / Newton–Schulz iteration in one device kernel; residuals ‖I −
/// AZ_k‖_F in double.
template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options);

/// The generalized Nyström factors of G = κ(Q, K) (PnP-Nystra; docs/mathematics.md §2) for the given
/// landmarks, as nystrom::generalized_nystrom computes them (same stabilization and pseudoinverse), built on
/// the device and copied back. O(Nmd + m³).
template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options);

/// PnP-Nystra Algorithm 1 entirely on the device: the blocks G_L, G_A, G_U (fused row-max when stabilized), Z
/// ≈ G_A⁺, then Ô = (G_L (Z (G_U [V, 1]))) split into numerator and denominator. Four small GEMMs, O(Nm(d +
/// dv)), no host synchronization until Ô is copied back. Equal to nystrom_attention(generalized_nystrom(Q, K,
/// options), V).
template <class T>
Matrix<T> nystrom_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                            const ConstMatrixRef<T>& V, const Landmarks<T>& landmarks,
                            const NystromOptions& options);

}  // namespace nystrom::cuda
