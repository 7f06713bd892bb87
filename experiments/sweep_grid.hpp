#pragma once
/// @file sweep_grid.hpp
/// The grid of `nystrom sweep`: layers × batch × heads × kernel × method × precision × strategy × landmarks ×
/// stabilization × pseudoinverse × iterations over a dump, one point per combination a method has. Each
/// method spans only the axes it has: pnp-nystra all of them; symmetric-nystrom and cur strategy × m × pinv
/// (stabilization none; cur only the selection strategies); nystromformer m × pinv (segment means);
/// performer its feature counts (column `features`), linformer its projected lengths (column `projected`);
/// exact one point. Points a method cannot run are left out and counted by reason (Skipped): softmax methods
/// on other kernels than exp, cur with pooling strategies, window-pool on a layer without a token window
/// (neither a `window` attribute nor N − prefix_tokens a square), default landmark counts above a layer's N,
/// oversampled query landmarks (⌈oversampling·m⌉) above it;
/// so the default grid runs on any valid dump.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "dumps.hpp"
#include "nystrom/parameters.hpp"
#include "nystrom/point_record.hpp"
#include "nystrom/precision.hpp"

namespace nystrom::cli {

/// The axes of a sweep and the options that apply to every point.
struct SweepGrid {
  std::vector<std::string> layers;    ///< empty: all
  std::vector<Index> batches, heads;  ///< empty: all
  std::vector<Kernel> kernels;        ///< exponential scale 0 means the layer's scale
  std::vector<LandmarkStrategy> strategies;
  std::vector<double> oversamplings = {1};  ///< pnp-nystra: query landmarks per key landmark
  /// m; empty: the default counts of each layer (default_landmark_counts), so that the grid reaches m = N.
  std::vector<Index> landmarks;
  std::vector<Index> features;                    ///< performer's r; empty: the layer's landmark counts
  std::vector<Index> projected;                   ///< linformer's k; empty: the layer's landmark counts
  std::vector<std::pair<PinvMethod, int>> pinvs;  ///< method and iterations (0 for exact)
  std::vector<Stabilization> stabilizations;
  std::vector<Method> methods;
  /// What every point shares besides its axes: the switches different_indices, copy_rows, share_projections
  /// and front_padding (the method, kernel and seed of each point are set per point).
  Parameters switches;
  /// The formats of every point: float64 alone, or any of float32, half and bfloat16 (computed in float32;
  /// the emulated ones rounded to their format, docs/mathematics.md §8).
  std::vector<Precision> precisions = {Precision::float64};
  std::uint64_t seed = 0;
};

/// Grid points left out, counted by reason; reported once.
struct Skipped {
  std::map<std::string, std::int64_t> reasons;
  void add(const std::string& reason) { ++reasons[reason]; }
  /// One line per reason, "skipping <count> grid points: <reason>".
  std::vector<std::string> lines() const;
};

/// The default landmark counts of a layer of n tokens: 8, 16, 32, … below n, and n itself (exact recovery,
/// docs/mathematics.md §2), so that error figures show the whole path from small m to Ĝ = G. At m = n every
/// strategy selects every token: pnp-nystra and symmetric-nystrom keep that point for the grid's first
/// strategy alone (counted in Skipped).
std::vector<Index> default_landmark_counts(Index n);

/// The selected layers of the dump, every name checked.
std::vector<DumpLayer> select_layers(const DumpInfo& dump, const SweepGrid& grid);

/// Every point of the grid for the layers, in evaluation order (heads outermost, pseudoinverses innermost),
/// every option validated against the layer's N and d (std::invalid_argument naming `input`, the layer and
/// the method otherwise); points left out are counted in `skipped`.
std::vector<PointDescription> enumerate_points(const std::vector<DumpLayer>& layers, const SweepGrid& grid,
                                               const std::string& input, Skipped& skipped);

/// "00/b0/h3": the head a point is evaluated on.
std::string head_name(const PointDescription& point);
/// The head and kernel of a point: the head reference (HeadReference) it uses.
std::string reference_group(const PointDescription& point);
/// A short description of a point for progress lines.
std::string point_label(const PointDescription& point);

}  // namespace nystrom::cli
