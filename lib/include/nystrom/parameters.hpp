#pragma once
/// @file parameters.hpp
/// The flat parameters a user sets for one approximation: the vocabulary every surface speaks. Each field's
/// name is the Python keyword (`nystrom.attention(..., pinv_iters=6)`), the `/sweep` column where the field
/// is one, and, with '_' written '-', the command-line option (`nystrom sweep --pinv-iters 6`). The library's
/// per-method options (ApproximationOptions: NystromOptions, CurOptions, ...) are what the algorithms read;
/// `Parameters::options` is the one translation from these names to them and `Parameters::of` the one back
/// (docs/design.md, "Vocabulary").

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "nystrom/approximation.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// The parameters of one approximation. std::nullopt and 0 where noted mean "the method's own default", so
/// one Parameters value describes a point of any method (the fields a method does not have are ignored).
struct Parameters {
  Method method = Method::pnp_nystra;

  /// κ (docs/mathematics.md §1). `scale` 0 means 1/√d (a sweep: the layer's `scale` attribute).
  KernelType kernel = KernelType::exponential;
  double scale = 0;      ///< exp: s
  double lambda = 4;     ///< laplacian: λ > 0
  double bandwidth = 8;  ///< gaussian: h > 0

  /// Landmarks (docs/mathematics.md §5): m, the strategy (nullopt: segment-means; cur: step; nystromformer
  /// always segment means) and the strategy's own settings.
  Index landmarks = 16;
  std::optional<LandmarkStrategy> strategy;
  double oversampling = 1;  ///< query landmarks per key landmark: Q̄ has ⌈oversampling·m⌉ rows (pnp-nystra)
  std::uint64_t seed = 0;  ///< random and k-means landmarks, rpcholesky, Performer's Ω, Linformer's E and F
  bool different_indices = false;  ///< selection strategies and cur: rows of Q and K chosen separately
  std::vector<Index> forced;       ///< selection strategies: tokens always selected (counted within m)
  std::vector<Index> q_indices;    ///< given: rows of Q
  std::vector<Index> k_indices;    ///< given: rows of K (empty: q_indices)
  std::array<Index, 2> window{};   ///< window-pool: the h×w token grid ({0, 0}: square)
  WindowGrid window_grid = WindowGrid::aspect;  ///< window-pool: the pooling grid
  Index prefix_tokens = 0;     ///< leading tokens off the window grid, landmarks of their own
  Index embed_column = 0;      ///< top-embed: the column scored
  int kmeans_iterations = 25;  ///< kmeans: Lloyd iterations

  /// The pseudoinverse of the core (docs/mathematics.md §4); nullopt and 0: the method's own (exact for
  /// pnp-nystra and cur, razavi × 6 for nystromformer, newton-schulz × 20 on W + 1e-6 I for
  /// symmetric-nystrom).
  std::optional<PinvMethod> pinv;
  std::optional<int> pinv_iters;  ///< iterations of razavi and newton-schulz
  double alpha = 0;               ///< start Z₀ = αAᵀ (0: 1/(‖A‖₁‖A‖_∞) per matrix)
  double pinv_tolerance = 0;    ///< exact: relative singular-value cut (0: m·eps); iterative: stop below it
  double tikhonov = 0;          ///< ε > 0: Z = (AᵀA + εI)⁻¹Aᵀ
  std::optional<double> shift;  ///< ε > 0: invert A + εI (nullopt: 0; symmetric-nystrom: 1e-6)

  /// pnp-nystra: how the blocks are scaled (nullopt: row-max; symmetric-nystrom: none), and the threshold c
  /// of the clamped map exp(min(x, c)) + max(x − c, 0).
  std::optional<Stabilization> stabilization;
  double clamp_threshold = 5;

  std::optional<Index> features;   ///< performer: r (nullopt: landmarks)
  std::optional<Index> projected;  ///< linformer: k (nullopt: landmarks)
  bool share_projections = false;  ///< linformer: F = E
  bool copy_rows = false;          ///< cur: copy the exact rows (R V) into Ô
  bool front_padding = false;      ///< nystromformer: the package's front zero padding when N % m ≠ 0
  /// The format the matrices are stored in (ApproximationOptions::storage, docs/mathematics.md §8): half
  /// and bfloat16 emulated in float32; float32 and float64 the computation in its own type.
  Precision precision = Precision::float64;

  /// `kernel` and its parameter (scale, lambda or bandwidth) from κ (its log-shift is not a parameter).
  void use_kernel(const Kernel& kernel);

  /// κ for tokens of dimension d (the exponential scale 1/√d where `scale` is 0). Throws
  /// std::invalid_argument naming the parameter for d < 1 or a bad λ, h or s.
  Kernel kernel_for(Index d) const;

  /// The landmark options of the landmark parameters, `fallback` where `strategy` is not given.
  LandmarkOptions landmark_options(LandmarkStrategy fallback) const;

  /// `base` with the pseudoinverse parameters that were given.
  PinvOptions pinv_options(PinvOptions base) const;

  /// The Nyström options of pnp-nystra, or of symmetric-nystrom where `method` says so, for dimension d.
  /// Throws std::invalid_argument for the other methods.
  NystromOptions nystrom_options(Index d) const;

  /// The library's options of `method` for tokens of dimension d: the one translation (features and
  /// projected default to landmarks; nystromformer always uses segment means). Not validated:
  /// ApproximationOptions::validate(method, n, d) says what does not fit N and d.
  ApproximationOptions options(Index d) const;

  /// The parameters that `options(d)` of `method` would give back `options` from (the inverse translation,
  /// for records of options built directly): kernel, landmarks, pseudoinverse and switches of `method`'s
  /// own member; the other fields keep their defaults.
  static Parameters of(Method method, const ApproximationOptions& options);
};

/// One parameter's name, as every surface spells it.
struct ParameterName {
  std::string_view name;  ///< snake case: the Parameters field, the Python keyword, the /sweep column
  bool column;            ///< a /sweep parameter column of this name
};

/// Every field of Parameters, in declaration order.
const std::vector<ParameterName>& parameter_names();

/// The command-line spelling of a parameter: `pinv_iters` → `pinv-iters`.
std::string option_name(std::string_view name);

}  // namespace nystrom
