#pragma once
/// @file nystromformer.hpp
/// Nyströmformer attention (Xiong et al. 2021, eq. (15); docs/mathematics.md §6): with segment-means
/// landmarks Q̄, K̄ (m×d),
///   F̃ = softmax(sQK̄ᵀ) (N×m),  Ã = softmax(sQ̄K̄ᵀ) (m×m),  B̃ = softmax(sQ̄Kᵀ) (m×N),  Ô = F̃ Ã⁺ (B̃ V),
/// where Ã⁺ is Razavi's iterative pseudoinverse (pinv.hpp) by default. The implied attention matrix Ŝ = F̃ Ã⁺
/// B̃ is N×N and its rows need not sum to 1. O(Nm(d + dv) + m³) time; nothing N×N is formed.
///
/// Differences from the PyPI package `nystrom-attention` (lucidrains), each reproducible by an option:
///  - the package starts the iteration from Z₀ = Ãᵀ/(max_b ‖Ã_b‖_∞ · max_b ‖Ã_b‖₁) with the maxima over the
///  whole
///    batch and all heads; here α is per matrix unless set explicitly (nystromformer_batch_alpha computes the
///    peer's);
///  - when N % m ≠ 0 the package prepends m − N % m zero tokens (zero q, k and v; the zero keys still enter
///  the
///    softmax of B̃) and uses equal segments; here landmarks are uneven segment means unless `front_padding`
///    is set.

#include <vector>

#include <utility>

#include "nystrom/factored_operator.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Options for nystromformer_attention.
struct NystromformerOptions {
  Index landmarks = 64;  ///< m, the number of segment-means landmarks (1 ≤ m ≤ N)
  PinvOptions pinv = {PinvMethod::razavi,
                      6};  ///< pseudoinverse of Ã; the package uses Razavi with 6 iterations
  bool front_padding =
      false;  ///< the package's padding: prepend m − N % m zero tokens, equal segments, drop them
  /// The format every matrix is stored in (docs/mathematics.md §8): half and bfloat16 are emulated in float32
  /// (T = float), the pseudoinverse included (its pinv.storage is replaced by this); float32 and float64
  /// round nothing.
  Precision storage = Precision::float64;

  /// Throws std::invalid_argument naming the bad value (m < 1, m > N, bad pinv options).
  void validate(Index n) const;
};

/// The three softmax blocks, the pseudoinverse and the output.
template <class T>
struct NystromformerResult {
  Matrix<T> output;    ///< Ô, N×dv
  Matrix<T> left;      ///< F̃ = softmax(sQK̄ᵀ), N×m
  Matrix<T> core;      ///< Ã = softmax(sQ̄K̄ᵀ), m×m
  Matrix<T> upper;     ///< B̃ = softmax(sQ̄Kᵀ), m×N
  PinvResult<T> pinv;  ///< Z ≈ Ã⁺ with its diagnostics
  /// What rounding to options.storage did, over every rounding point but the pseudoinverse's (pinv.rounding).
  RoundingCounts rounding;

  /// Ŝ = F̃ Z B̃ as an operator (N×N implied).
  FactoredOperator<T> attention_operator() const& { return {left, pinv.z, upper}; }
  /// The same, taking the blocks over instead of copying them.
  FactoredOperator<T> attention_operator() && {
    return {std::move(left), std::move(pinv.z), std::move(upper)};
  }
};

/// The softmax core Ã = softmax(sQ̄K̄ᵀ) alone (what the batch-wide α of the package is computed from). O(Nd +
/// m²d).
template <class T>
Matrix<T> nystromformer_core(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, double scale,
                             const NystromformerOptions& options);

/// The package's batch-wide start α = 1/(max_b ‖A_b‖_∞ · max_b ‖A_b‖₁) over every head's core (≤ each
/// per-matrix α).
template <class T>
double nystromformer_batch_alpha(const std::vector<Matrix<T>>& cores);

/// Nyströmformer attention for Q, K (N×d), V (N×dv) and scale s (1/√d by convention). In an emulated
/// options.storage (T = float; docs/mathematics.md §8) the landmarks are the segment means of Q and K as
/// given, then Q, K, V and the landmarks are rounded, the three softmax blocks are rounded softmax rows of
/// rounded logits, and Ô = R(F̃ R(Z R(B̃ V))).
template <class T>
NystromformerResult<T> nystromformer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                               const ConstMatrixRef<T>& V, double scale,
                                               const NystromformerOptions& options);

}  // namespace nystrom
