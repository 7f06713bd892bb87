#pragma once
/// @file head.hpp
/// One attention head as the evaluation sees it: its tokens, for 2-D windows the token grid (docs/formats.md
/// §1: the `window` and `prefix_tokens` attributes of a dump layer) and optionally the additive score term
/// the model adds to its logits (the `bias` and `mask` datasets, summed), which the exact side then includes
/// (docs/mathematics.md §7.1).

#include <array>
#include <string>

#include "nystrom/types.hpp"

namespace nystrom {

/// One attention head: Q, K (N×d) and optionally V (N×dv; empty: no output errors).
template <class T>
struct Head {
  Matrix<T> q, k, v;
  /// h×w token grid of the N − prefix_tokens grid tokens ({0, 0}: none), row-major after the prefix tokens.
  std::array<Index, 2> window{};
  Index prefix_tokens = 0;  ///< leading tokens that are not on the grid (e.g. a ViT's CLS token)
  /// The model's additive score term B (N×N; empty: none): the exact side is exp(φ(Q, K) + B − c) and its
  /// rows normalised, softmax(s·QKᵀ + B) for the exponential kernel (evaluation.hpp, head_exponent). Entries
  /// may be −∞ (a masked pair); every row keeps at least one finite entry.
  Matrix<T> bias;

  Index tokens() const { return q.rows(); }
  /// Throws std::invalid_argument naming `where` for N·d = 0, mismatched shapes, non-finite values in Q, K,
  /// V, a bias that is not N×N or holds NaN or +∞ or a row of −∞ alone, a prefix outside [0, N) or a window
  /// that does not hold the N − prefix_tokens grid tokens.
  void validate(const std::string& where) const;
};

}  // namespace nystrom
