#pragma once
/// @file head.hpp
/// One attention head as the evaluation sees it: its tokens and, for 2-D windows, the token grid
/// (docs/formats.md §1: the `window` and `prefix_tokens` attributes of a dump layer).

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

  Index tokens() const { return q.rows(); }
  /// Throws std::invalid_argument naming `where` for N·d = 0, mismatched shapes, non-finite values, a prefix
  /// outside [0, N) or a window that does not hold the N − prefix_tokens grid tokens.
  void validate(const std::string& where) const;
};

}  // namespace nystrom
