#pragma once
/// @file cur.hpp
/// CUR attention (CURformer Alg. 1; docs/mathematics.md §6): with selected query rows q_idx and key rows
/// k_idx (m each),
///   C = softmax(sQK̂ᵀ) (N×m, K̂ = K[k_idx]),  R = softmax(sQ̂Kᵀ) (m×N, Q̂ = Q[q_idx]),  U = C[q_idx, :] (m×m),
///   Ô = C U⁺ (R V),
/// optionally with the exact output rows R V copied into Ô at q_idx (row i of R is the exact softmax row of
/// query q_idx[i]). Selection (Sum/Abs/Embed/Step/Random, same or different indices, forced tokens) comes
/// from landmarks.hpp. The implied attention matrix is Ŝ = C U⁺ R (without the copied rows). O(Nm(d + dv) +
/// m³).

#include <vector>

#include <utility>

#include "nystrom/factored_operator.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Options for cur_attention.
struct CurOptions {
  /// Row selection: strategy (step, random, top-sum, top-abs, top-embed or given), count m, same or different
  /// indices for Q and K, forced tokens, seed.
  LandmarkOptions selection = [] {
    LandmarkOptions step;
    step.strategy = LandmarkStrategy::step;
    return step;
  }();
  PinvOptions pinv;        ///< pseudoinverse of U (exact SVD by default)
  bool copy_rows = false;  ///< overwrite Ô[q_idx[i], :] with the exact row (R V)[i, :]
  /// The format every matrix is stored in (docs/mathematics.md §8): half and bfloat16 are emulated in float32
  /// (T = float), the pseudoinverse included (its pinv.storage is replaced by this); float32 and float64
  /// round nothing.
  Precision storage = Precision::float64;

  /// Throws std::invalid_argument naming the bad value (a pooling strategy, m > N, bad indices or pinv
  /// options).
  void validate(Index n, Index d) const;
};

/// The factors, the selected rows and the output.
template <class T>
struct CurResult {
  Matrix<T> output;              ///< Ô, N×dv
  Matrix<T> columns;             ///< C = softmax(sQK̂ᵀ), N×m
  Matrix<T> rows;                ///< R = softmax(sQ̂Kᵀ), m×N
  Matrix<T> intersection;        ///< U = C[q_idx, :], m×m
  PinvResult<T> pinv;            ///< Z ≈ U⁺
  std::vector<Index> q_indices;  ///< q_idx
  std::vector<Index> k_indices;  ///< k_idx
  double selection_entries = 0;  ///< kernel entries the row selection evaluated (Landmarks::entries)
  /// What rounding to options.storage did, over every rounding point but the pseudoinverse's (pinv.rounding).
  RoundingCounts rounding;

  /// Ŝ = C Z R as an operator (N×N implied; the copied rows are not part of it).
  FactoredOperator<T> attention_operator() const& { return {columns, pinv.z, rows}; }
  /// The same, taking the blocks over instead of copying them.
  FactoredOperator<T> attention_operator() && {
    return {std::move(columns), std::move(pinv.z), std::move(rows)};
  }
};

/// CUR attention for Q, K (N×d), V (N×dv) and scale s. In an emulated options.storage (T = float;
/// docs/mathematics.md §8) the rows are selected on Q and K as given, then Q, K and V are rounded, C and R
/// are rounded softmax rows of rounded logits, and Ô = R(C R(Z R(R V))).
template <class T>
CurResult<T> cur_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                           double scale, const CurOptions& options);

}  // namespace nystrom
