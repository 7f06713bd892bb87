#include "sweep_grid.hpp"

#include <algorithm>

#include "nystrom/error.hpp"

namespace nystrom::cli {

namespace {

/// The batch or head indices selected for a layer, every index checked.
std::vector<Index> select_indices(const std::vector<Index>& requested, Index count, const DumpLayer& layer,
                                  const char* option) {
  if (requested.empty()) {
    std::vector<Index> all(count);
    for (Index i = 0; i < count; ++i) all[i] = i;
    return all;
  }
  for (auto index : requested)
    require(index < count, "option --", option, ": index ", index, " out of range for /layers/", layer.name,
            " (", count, " available)");
  return requested;
}

/// The exponential kernel's scale: the option, else the layer's.
Kernel resolve_kernel(const Kernel& kernel, const DumpLayer& layer) {
  if (kernel.type == KernelType::exponential && kernel.param == 0) return Kernel::exponential(layer.scale);
  return kernel;
}

/// Why window pooling cannot place landmarks on the tokens of `layer` ("" when it can): the landmark options'
/// own check of the layer's window and prefix tokens (on_token_grid).
std::string window_pool_obstacle(const DumpLayer& layer) {
  LandmarkOptions pooled;
  pooled.strategy = LandmarkStrategy::window_pool;
  pooled.count = layer.prefix_tokens + 1;  // a landmark per prefix token and one pooled cell
  try {
    on_token_grid(pooled, layer.window, layer.prefix_tokens).validate(layer.tokens, layer.dim);
  } catch (const std::invalid_argument& error) {
    return describe("window-pool needs a token window; /layers/", layer.name, ": ", error.what());
  }
  return "";
}

/// The points of one method on one head and kernel, in grid order (strategy, m, stabilization, pinv), with
/// `base` carrying the head and run fields and `fixed` the method, kernel, seed and switches: every
/// combination of the axes the method has, each translated to the library's options once
/// (Parameters::options).
std::vector<PointDescription> method_points(const PointDescription& base, const Parameters& fixed,
                                            const SweepGrid& grid) {
  const Method method = fixed.method;
  const auto point_of = [&](const Parameters& parameters) {
    PointDescription point = base;
    point.options = parameters.options(base.d);
    return point;
  };
  if (method == Method::exact) return {point_of(fixed)};
  std::vector<PointDescription> points;
  if (method == Method::performer || method == Method::linformer) {
    for (auto size : method == Method::performer ? grid.features : grid.projected) {
      Parameters parameters = fixed;
      (method == Method::performer ? parameters.features : parameters.projected) = size;
      points.push_back(point_of(parameters));
    }
    return points;
  }
  const std::vector<LandmarkStrategy> strategies =
      method == Method::nystromformer ? std::vector{LandmarkStrategy::segment_means} : grid.strategies;
  const std::vector<double> oversamplings =
      method == Method::pnp_nystra ? grid.oversamplings : std::vector<double>{1};
  const std::vector<std::optional<Stabilization>> stabilizations =
      method == Method::pnp_nystra
          ? std::vector<std::optional<Stabilization>>(grid.stabilizations.begin(), grid.stabilizations.end())
          : std::vector<std::optional<Stabilization>>{std::nullopt};
  for (auto strategy : strategies)
    for (auto m : grid.landmarks)
      for (auto oversampling : oversamplings)
        for (auto stabilization : stabilizations)
          for (const auto& [pinv, iterations] : grid.pinvs) {
            Parameters parameters = fixed;
            parameters.strategy = strategy;
            parameters.landmarks = m;
            parameters.oversampling = oversampling;
            parameters.stabilization = stabilization;
            parameters.pinv = pinv;
            if (is_iterative(pinv)) parameters.pinv_iters = iterations;
            points.push_back(point_of(parameters));
          }
  return points;
}

/// The landmark options of a point of pnp-nystra, symmetric-nystrom or cur (its selection); null for the
/// other methods.
const LandmarkOptions* landmark_options_of(const PointDescription& point) {
  switch (point.method) {
    case Method::pnp_nystra:
      return &point.options.pnp_nystra.landmarks;
    case Method::symmetric_nystrom:
      return &point.options.symmetric_nystrom.landmarks;
    case Method::cur:
      return &point.options.cur.selection;
    default:
      return nullptr;
  }
}

/// Why a point of the grid cannot run on `layer` ("" when it can): a softmax method on another kernel than
/// exp, cur with a pooling strategy, window-pool without a token window (`window_obstacle`), a strategy that
/// searches all N tokens on a layer with prefix tokens (landmarks of their own).
std::string obstacle(const PointDescription& point, const std::string& window_obstacle, Index prefix_tokens) {
  const Method method = point.method;
  const Kernel& kernel = point.options.kernel;
  if (error_matrix(method) == ErrorMatrix::attention && kernel.type != KernelType::exponential)
    return describe(to_string(method), " is a softmax method; it has no ", kernel.label(), " version");
  if (method == Method::cur && !is_selection(point.options.cur.selection.strategy))
    return describe("cur selects rows; ", to_string(point.options.cur.selection.strategy),
                    " is a pooling strategy");
  const LandmarkOptions* landmarks = landmark_options_of(point);
  if (landmarks && landmarks->strategy == LandmarkStrategy::window_pool && !window_obstacle.empty())
    return window_obstacle;
  if (landmarks && prefix_tokens > 0 && is_searched(landmarks->strategy))
    return describe(to_string(landmarks->strategy),
                    " searches all N tokens; it takes no prefix tokens (landmarks of their own)");
  if (landmarks && landmarks->query_count() > point.n)
    return describe("oversampling ", landmarks->oversampling, " asks for more query landmarks than N tokens");
  return "";
}

/// Whether `point` is a pnp-nystra or symmetric-nystrom point at m = N with another strategy than `first`:
/// every strategy selects every token at m = N (exact recovery, docs/mathematics.md §3), so the default
/// landmark counts keep that point for the first strategy alone.
bool repeated_exact_recovery(const PointDescription& point, LandmarkStrategy first) {
  const LandmarkOptions* landmarks = landmark_options_of(point);
  return landmarks && point.method != Method::cur && landmarks->count == point.n &&
         landmarks->strategy != first;
}

/// The grid on a layer of n tokens: the default landmark counts where none were given, and performer's and
/// linformer's sizes following the landmark counts where they were not given.
SweepGrid on_layer(SweepGrid grid, Index n) {
  if (grid.landmarks.empty()) grid.landmarks = default_landmark_counts(n);
  if (grid.features.empty()) grid.features = grid.landmarks;
  if (grid.projected.empty()) grid.projected = grid.landmarks;
  return grid;
}

}  // namespace

std::vector<Index> default_landmark_counts(Index n) {
  std::vector<Index> counts;
  for (Index m = 8; m < n; m *= 2) counts.push_back(m);
  counts.push_back(n);
  return counts;
}

std::vector<std::string> Skipped::lines() const {
  std::vector<std::string> out;
  for (const auto& [reason, count] : reasons)
    out.push_back(describe("skipping ", count, " grid points: ", reason));
  return out;
}

std::vector<DumpLayer> select_layers(const DumpInfo& dump, const SweepGrid& grid) {
  if (grid.layers.empty()) return dump.layers;
  std::vector<DumpLayer> selected;
  for (const auto& name : grid.layers) {
    auto found =
        std::find_if(dump.layers.begin(), dump.layers.end(), [&](const auto& l) { return l.name == name; });
    require(found != dump.layers.end(), "option --layers: ", dump.path, " has no layer /layers/", name);
    selected.push_back(*found);
  }
  return selected;
}

std::vector<PointDescription> enumerate_points(const std::vector<DumpLayer>& layers, const SweepGrid& grid,
                                               const std::string& input, Skipped& skipped) {
  std::vector<PointDescription> points;
  for (const auto& layer : layers) {
    const std::string window_obstacle = window_pool_obstacle(layer);
    const SweepGrid layer_grid = on_layer(grid, layer.tokens);
    for (auto m : layer_grid.landmarks)
      require(m <= layer.tokens, "option --landmarks: m = ", m, " exceeds N = ", layer.tokens, " of /layers/",
              layer.name, " in ", input);
    for (auto b : select_indices(grid.batches, layer.batch, layer, "batch"))
      for (auto h : select_indices(grid.heads, layer.heads, layer, "heads"))
        for (const auto& kernel : grid.kernels)
          for (const auto method : grid.methods)
            for (const auto precision : grid.precisions) {
              PointDescription base;
              base.layer = layer.name;
              base.batch = b;
              base.head = h;
              base.n = layer.tokens;
              base.d = layer.dim;
              base.dv = layer.value_dim;
              base.method = method;
              base.precision = to_string(precision);
              base.seed = grid.seed;
              Parameters fixed = grid.switches;
              fixed.method = method;
              fixed.seed = grid.seed;
              fixed.precision = precision;
              fixed.use_kernel(resolve_kernel(kernel, layer));
              const auto first = points.size();
              for (auto& point : method_points(base, fixed, layer_grid)) {
                const std::string reason =
                    grid.landmarks.empty() && repeated_exact_recovery(point, grid.strategies.front())
                        ? "m = N of the default landmark counts with another strategy than the first: every "
                          "strategy selects every token there"
                        : obstacle(point, window_obstacle, layer.prefix_tokens);
                if (reason.empty())
                  points.push_back(std::move(point));
                else
                  skipped.add(reason);
              }
              for (auto p = first; p < points.size(); ++p) {
                try {
                  on_token_grid(points[p].options, layer.window, layer.prefix_tokens)
                      .validate(method, layer.tokens, layer.dim);
                } catch (const std::invalid_argument& error) {
                  throw std::invalid_argument(describe(input, ": /layers/", layer.name, ": method ",
                                                       to_string(method), ": ", error.what()));
                }
              }
            }
  }
  return points;
}

std::string head_name(const PointDescription& point) {
  return describe(point.layer, "/b", point.batch, "/h", point.head);
}

std::string reference_group(const PointDescription& point) {
  return describe(head_name(point), "/", point.options.kernel.label());
}

std::string point_label(const PointDescription& point) {
  const auto record = point_record(point, PointResult{});
  const auto cell = [&](const std::string& name) {
    for (const auto& c : record)
      if (c.column.name == name) return c.value;
    return Cell{};
  };
  const auto strategy = std::get<std::string>(cell("strategy"));
  const auto pinv = std::get<std::string>(cell("pinv"));
  const auto iterations = std::get<std::int64_t>(cell("pinv_iters"));
  const auto size = std::get<std::int64_t>(cell("landmarks")) + std::get<std::int64_t>(cell("features")) +
                    std::get<std::int64_t>(cell("projected"));
  return describe(head_name(point), " ", point.options.kernel.label(), " ", to_string(point.method),
                  strategy != "none" ? " " + strategy : "", " m=", size, pinv != "none" ? " " + pinv : "",
                  iterations ? describe("x", iterations) : "");
}

}  // namespace nystrom::cli
