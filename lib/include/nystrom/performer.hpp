#pragma once
/// @file performer.hpp
/// Performer's FAVOR+ attention (Choromanski et al. 2021, Lemma 1 and §2.4; docs/mathematics.md §6): positive
/// orthogonal random features φ(x) = exp(ωᵀx − ‖x‖²/2)/√r of x = s^{1/2}q and x = s^{1/2}k with r rows ω of a
/// projection Ω (r×d), so that E[φ(q)ᵀφ(k)] = exp(s qᵀk); Ô = (Φ_Q(Φ_Kᵀ V)) ⊘ (Φ_Q(Φ_Kᵀ 1_N)). The implied
/// attention matrix is Ŝ = D̂⁻¹ Φ_Q Φ_Kᵀ with D̂ = diag(Φ_Q Φ_Kᵀ 1_N). O(Nr(d + dv)).
///
/// The exponents are shifted so that no token norm makes Ô divide by 0, and the shifts cancel in Ô exactly:
/// by default each feature's key exponents by their max over the keys m_f, the query exponents by +m_f and
/// then per row by their max (docs/mathematics.md §6), so that Φ_Q Φ_Kᵀ 1 ≥ 1/r. With `feature_epsilon` > 0
/// they are shifted as the PyPI package `performer-pytorch` does (the max of ΩᵀX per query row and over all
/// keys), which adds ε = 1e-4 to every shifted feature (set feature_epsilon = 1e-4 to reproduce it). The
/// package also redraws Ω on its own schedule during training (not modelled: Ω is fixed by the seed, or given
/// explicitly).

#include <cstdint>

#include <utility>

#include "nystrom/factored_operator.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Options for performer_attention.
struct PerformerOptions {
  Index features = 0;          ///< r, the number of random features (0: ⌊d ln d⌋, the package's default)
  std::uint64_t seed = 0;      ///< seed of Ω when `projection` is empty
  bool orthogonal = true;      ///< orthogonal blocks (FAVOR+) or i.i.d. Gaussian rows
  double feature_epsilon = 0;  ///< added to every shifted feature before the 1/√r factor (the package: 1e-4)
  Matrix<double> projection;   ///< explicit Ω (r×d) for cross-checks; empty: drawn from `seed`
  /// The format every matrix is stored in (docs/mathematics.md §8): half and bfloat16 are emulated in float32
  /// (T = float), Ω included; float32 and float64 round nothing.
  Precision storage = Precision::float64;

  /// Throws std::invalid_argument naming the bad value (features < 0, ε < 0, projection not r×d or
  /// non-finite).
  void validate(Index d) const;
  /// r for token dimension d (the explicit projection's rows, else `features`, else ⌊d ln d⌋).
  Index feature_count(Index d) const;
};

/// Ω (r×d) as in the package's gaussian_orthogonal_random_matrix (scaling 0): stacked d×d blocks Qᵀ from QR
/// of Gaussian matrices (the last block truncated), each row rescaled by the norm of an independent Gaussian
/// d-vector (so row norms are χ_d distributed like Gaussian rows). With orthogonal = false, i.i.d. N(0, 1)
/// rows.
Matrix<double> performer_projection(Index features, Index d, std::uint64_t seed, bool orthogonal = true);

/// The random features and the output.
template <class T>
struct PerformerResult {
  Matrix<T> output;           ///< Ô, N×dv
  Matrix<T> q_features;       ///< Φ_Q (N×r), with its shifts (see above)
  Matrix<T> k_features;       ///< Φ_K (N×r), with its shifts
  Vector<T> normalizer;       ///< Φ_Q(Φ_Kᵀ1_N), N
  Matrix<double> projection;  ///< Ω used (r×d), as drawn or given (not rounded)
  RoundingCounts rounding;    ///< what rounding to options.storage did, over every rounding point

  /// Ŝ = diag(1/normalizer) Φ_Q Φ_Kᵀ as an operator (N×N implied; rows sum to 1).
  FactoredOperator<T> attention_operator() const& {
    return {q_features, Matrix<T>(), k_features.transpose(), normalizer.cwiseInverse()};
  }
  /// The same, taking Φ_Q over instead of copying it.
  FactoredOperator<T> attention_operator() && {
    return {std::move(q_features), Matrix<T>(), k_features.transpose(), normalizer.cwiseInverse()};
  }
};

/// FAVOR+ attention for Q, K (N×d), V (N×dv) and scale s (1/√d by convention). In an emulated
/// options.storage (T = float; docs/mathematics.md §8) Q, K, V and Ω are rounded, and so are the scaled
/// tokens, the projections, the half norms, the exponents, the features and every product.
template <class T>
PerformerResult<T> performer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, double scale,
                                       const PerformerOptions& options);

}  // namespace nystrom
