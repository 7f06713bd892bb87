#pragma once
/// @file searched_landmarks.hpp
/// The landmark strategies that search (internal to landmarks.cpp): over kernel entries, through the
/// algorithms of selection.hpp on entry oracles of G = κ(Q, K) or of the joint kernel κ([Q; K], [Q; K])
/// (cross, softmax-cross, maxvol, rpcholesky, oracle-qdeim), or over token distances (farthest-point,
/// farthest-point-means). docs/mathematics.md §5 states each.

#include <vector>

#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/types.hpp"

namespace nystrom::detail {

/// Landmarks in double: the rows or means Q̄ (p×d) and K̄ (m×d), the token indices behind them, and the
/// kernel entries the search evaluated.
struct SearchedLandmarks {
  Matrix<double> q, k;
  std::vector<Index> q_indices, k_indices, joint_indices;
  double entries = 0;
};

/// The landmarks of `options` (a searched strategy, validated, without forced or prefix tokens) for the
/// finite tokens Q, K (N×d, in double) and `kernel`.
SearchedLandmarks searched_landmarks(const Matrix<double>& Q, const Matrix<double>& K,
                                     const LandmarkOptions& options, const Kernel& kernel);

}  // namespace nystrom::detail
