#pragma once
/// @file matrix_free.hpp
/// Matrix-free analysis of large kernels (docs/mathematics.md §7): ‖G − Ĝ‖₂, ‖G‖₂ and the top-k spectrum of G
/// = κ(Q, K) for N up to 65,536 without storing an N×N matrix, by Lanczos (spectral.hpp) on operators.hpp's
/// KernelOperator (tiles evaluated on the fly, kernel_passes.hpp) and DifferenceOperator, in double whatever
/// the token type.
///
/// Cost: one kernel pass evaluates every entry of G once (O(N²d)); everything else is O(Nm) per product.
/// Lanczos runs on the Gram operator EᵀE, whose products E ᵀ(E x) are fused into ONE kernel pass; on the
/// augmented operator [[0, E], [Eᵀ, 0]] (also one pass per product) its Chebyshev rate per product is that of
/// EᵀE per *two* products, so the Gram form reaches a given accuracy of σ₁ in about half the passes
/// (bench/bench_matrix_free.cpp measures both). The augmented form resolves small singular values better
/// (spectral.hpp's top_singular_values_augmented).

#include "nystrom/detail/kernel_passes.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Ĝ's factors converted to double, so Ĝ products accumulate in double whatever T is.
template <class T>
NystromFactors<double> widened_factors(const NystromFactors<T>& factors);

/// The same relative to κ_c for c = `log_shift`, from factors relative to their own kernel's log-shift c₀
/// (NystromFactors): Ĝ_c = e^{c₀−c}Ĝ_{c₀} (docs/mathematics.md §1, "Large logits"), by c − c₀ subtracted from
/// left_log_scale in double (and from upper_log_scale for row-max scaling, which keeps them l − c and u − c);
/// for factors without row scales the left scale becomes c₀ − c rather than their blocks being rescaled.
template <class T>
NystromFactors<double> widened_factors(const NystromFactors<T>& factors, double log_shift);

/// ‖G − Ĝ‖₂ for G = κ(Q, K) and Ĝ from `factors`, matrix-free (docs/mathematics.md §7). O(N²d) per Lanczos
/// step, memory O(N(d + m) + threads·panel_rows·N). `matvecs` counts E and Eᵀ products (2 per fused Gram step
/// = 1 kernel pass). Throws std::invalid_argument naming the shapes when the factors do not match Q and K.
/// G and Ĝ are both taken relative to `kernel`'s log-shift c: factors of another log-shift (those of the
/// unshifted kernel, with a `kernel` shifted by the tokens' largest logit as kernel_log_shift gives it) are
/// brought to κ_c by widened_factors(factors, c), so ‖E_c‖₂ = e^{−c}‖E‖₂ is computed wherever its square,
/// which the Gram products hold, would overflow (docs/mathematics.md §1, "Large logits").
template <class T>
SpectralResult matrix_free_error_norm(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromFactors<T>& factors, const Kernel& kernel,
                                      const SpectralOptions& options = {},
                                      const MatrixFreeOptions& tiling = {});

/// ‖G‖₂ for G = κ(Q, K), matrix-free.
template <class T>
SpectralResult matrix_free_kernel_norm(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const Kernel& kernel, const SpectralOptions& options = {},
                                       const MatrixFreeOptions& tiling = {});

/// The top-k singular values of G = κ(Q, K), σ₁ first, matrix-free.
template <class T>
SpectralResult matrix_free_top_singular_values(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                               const Kernel& kernel, Index k,
                                               const SpectralOptions& options = {},
                                               const MatrixFreeOptions& tiling = {});

}  // namespace nystrom
