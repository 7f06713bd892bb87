#pragma once
/// @file linformer.hpp
/// Linformer attention, training-free variant (Wang et al. 2020, eq. (7); docs/mathematics.md §6): fixed
/// random projections E, F ∈ R^{k×N} compress the keys and values along the sequence, Ô =
/// softmax(sQ(EK)ᵀ)(FV). The implied attention matrix is Ŝ = P F with P = softmax(sQ(EK)ᵀ) (N×k); rows of Ŝ
/// need not sum to 1. O(Nk(d + dv)).
///
/// E and F are drawn like the PyPI package `linformer` initialises proj_k and proj_v (i.i.d. uniform on
/// [−1/√k, 1/√k]); the package stores them transposed (N×k), so E = proj_kᵀ, F = proj_vᵀ. Pass them
/// explicitly to cross-check.

#include <cstdint>

#include <utility>

#include "nystrom/factored_operator.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Options for linformer_attention.
struct LinformerOptions {
  Index projected = 64;            ///< k, the projected sequence length (≥ 1)
  std::uint64_t seed = 0;          ///< seed of E and F when they are not given
  bool share_projections = false;  ///< F = E (the package's share_kv)
  Matrix<double> e, f;             ///< explicit E, F (k×N) for cross-checks; empty: drawn from `seed`
  /// The format every matrix is stored in (docs/mathematics.md §8): half and bfloat16 are emulated in float32
  /// (T = float), E and F included; float32 and float64 round nothing.
  Precision storage = Precision::float64;

  /// Throws std::invalid_argument naming the bad value (k < 1, explicit E/F not k×N or non-finite).
  void validate(Index n) const;
};

/// E and F (k×N each, i.i.d. uniform on [−1/√k, 1/√k]) from one seed; F = E when `share`.
struct LinformerProjections {
  Matrix<double> e, f;
};
LinformerProjections linformer_projections(Index k, Index n, std::uint64_t seed, bool share = false);

/// The compressed blocks and the output.
template <class T>
struct LinformerResult {
  Matrix<T> output;         ///< Ô, N×dv
  Matrix<T> attention;      ///< P = softmax(sQ(EK)ᵀ), N×k
  Matrix<T> value_proj;     ///< F (k×N) used, in T (rounded to an emulated storage)
  RoundingCounts rounding;  ///< what rounding to options.storage did, over every rounding point

  /// Ŝ = P F as an operator (N×N implied).
  FactoredOperator<T> attention_operator() const& { return {attention, Matrix<T>(), value_proj}; }
  /// The same, taking the blocks over instead of copying them.
  FactoredOperator<T> attention_operator() && {
    return {std::move(attention), Matrix<T>(), std::move(value_proj)};
  }
};

/// Linformer attention for Q, K (N×d), V (N×dv) and scale s (1/√d by convention). In an emulated
/// options.storage (T = float; docs/mathematics.md §8) Q, K, V, E and F are rounded, and Ô = R(P R(F̃ Ṽ)) with
/// P the rounded softmax rows of the rounded logits of Q̃ and R(Ẽ K̃).
template <class T>
LinformerResult<T> linformer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, double scale,
                                       const LinformerOptions& options);

}  // namespace nystrom
