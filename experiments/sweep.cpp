// `nystrom sweep`: the Cartesian grid layers × batch × heads × kernel × method × strategy × landmarks ×
// stabilization × pseudoinverse × iterations over a dump, one results row per point (FORMATS.md §2). Each
// method spans only the axes it has: pnp-nystra all of them; symmetric-nystrom and cur strategy × m × pinv
// (stabilization none; cur only the selection strategies); nystromformer m × pinv (segment means);
// performer its feature counts, linformer its projected lengths (both in the `landmarks` column); exact one
// point. Softmax methods (nystromformer, cur, performer, linformer) skip non-exponential kernels, and say so.
//
// Reuse: the head reference (G, ‖G‖₂, exact attention) is built once per head and kernel, the landmark terms
// (σ₁(G̃), σ_{m+1}(G̃), σ_m(G_A), K) once per strategy and landmark count; the pseudoinverse variants share
// both. Each process (MPI rank) keeps its last head reference and landmark terms, and a rank works through
// the points of one head and kernel in grid order before it takes another (cache-affinity scheduling,
// distribute.hpp; at the end an idle rank takes points from the tail of another rank's group), so it rebuilds
// them only when it moves to another head, kernel or landmark set.
//
// MPI (issue 6): every rank reads the dump; rank 0 alone reads and writes the results files, works out the
// pending points and broadcasts them, and appends rows as any rank finishes them. At the end the rows are
// sorted by grid position, so the file equals a 1-process run's.
//
// Resumability: rows are appended to `<output>.partial` and flushed one by one; SIGINT and SIGTERM stop the
// run between points with the file closed and readable. A rerun with the same output skips every point whose
// parameter columns match a stored row (from the partial file, or from a finished `<output>`, which is copied
// first and never modified in place); at the end the partial file is renamed onto `<output>`. All input is
// validated before any output exists, so a bad run leaves no file behind.
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "distribute.hpp"
#include "hdf5_io.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/threads.hpp"
#include "progress.hpp"
#include "subcommands.hpp"

#ifndef NYSTROM_SOURCE_DIR
#define NYSTROM_SOURCE_DIR ""
#endif

namespace nystrom::cli {

namespace {

namespace fs = std::filesystem;

/// True for the softmax methods, which need the exponential kernel (approximation.hpp).
bool softmax_only(Method method) {
  return method == Method::nystromformer || method == Method::cur || method == Method::performer ||
         method == Method::linformer;
}

/// The matrix whose spectral error a method's row reports (column `error_matrix`): the kernel matrix G for
/// the kernel approximations, the attention matrix S = D⁻¹G for the softmax ones, none for exact.
std::string error_matrix(Method method) {
  switch (method) {
    case Method::pnp_nystra:
    case Method::symmetric_nystrom:
      return "G";
    case Method::exact:
      return "none";
    default:
      return "S";
  }
}

/// One point of the grid. Axes a method does not have are written as "none" / 0.
struct PointSpec {
  std::string layer;
  Index batch = 0, head = 0, n = 0, d = 0, dv = 0;
  Kernel kernel;
  Method method = Method::pnp_nystra;
  LandmarkStrategy strategy = LandmarkStrategy::segment_means;
  bool has_strategy = true;
  Index landmarks = 0;  ///< m; performer: feature count r; linformer: projected length k; exact: 0
  PinvMethod pinv = PinvMethod::exact;
  bool has_pinv = true;
  int pinv_iters = 0;  ///< 0 for the exact pseudoinverse
  Stabilization stabilization = Stabilization::row_max;
  std::string precision;
  std::uint64_t seed = 0;
};

/// Wall times on a row besides the point's own `seconds`.
struct RowSeconds {
  double reference = 0;  ///< make_reference for this head and kernel (on each row that uses it)
  double landmarks = 0;  ///< landmark_terms for this strategy and landmark count (on each row that uses them)
  double elapsed = 0;    ///< this row start to end, with the shared computations it built (overlapped or not)
};

/// One column of /sweep with how a row's cell is computed: the single source of the table's schema.
struct SweepColumn {
  Column column;
  std::function<Cell(const PointSpec&, const PointResult&, const RowSeconds&)> cell;
};

std::int64_t flag(bool value) {
  return value ? 1 : 0;
}

const std::vector<SweepColumn>& sweep_columns() {
  using S = const PointSpec&;
  using R = const PointResult&;
  using T = const RowSeconds&;
  static const std::vector<SweepColumn> columns = {
      {{"layer", ColumnType::text, true}, [](S s, R, T) { return s.layer; }},
      {{"batch", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.batch); }},
      {{"head", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.head); }},
      {{"n", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.n); }},
      {{"d", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.d); }},
      {{"kernel", ColumnType::text, true}, [](S s, R, T) { return to_string(s.kernel.type); }},
      {{"kernel_param", ColumnType::float64, true}, [](S s, R, T) { return s.kernel.param; }},
      {{"strategy", ColumnType::text, true},
       [](S s, R, T) { return s.has_strategy ? to_string(s.strategy) : std::string("none"); }},
      {{"landmarks", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.landmarks); }},
      {{"pinv", ColumnType::text, true},
       [](S s, R, T) { return s.has_pinv ? to_string(s.pinv) : std::string("none"); }},
      {{"pinv_iters", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.pinv_iters); }},
      {{"stabilization", ColumnType::text, true}, [](S s, R, T) { return to_string(s.stabilization); }},
      {{"method", ColumnType::text, true}, [](S s, R, T) { return to_string(s.method); }},
      {{"precision", ColumnType::text, true}, [](S s, R, T) { return s.precision; }},
      {{"seed", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.seed); }},
      {{"dv", ColumnType::int64, false}, [](S s, R, T) { return std::int64_t(s.dv); }},
      {{"error_matrix", ColumnType::text, false}, [](S s, R, T) { return error_matrix(s.method); }},
      {{"spectral_error", ColumnType::float64, false}, [](S, R r, T) { return r.spectral_error; }},
      {{"relative_spectral_error", ColumnType::float64, false},
       [](S, R r, T) { return r.relative_spectral_error; }},
      {{"frobenius_error", ColumnType::float64, false}, [](S, R r, T) { return r.frobenius_error; }},
      {{"output_relative_error", ColumnType::float64, false},
       [](S, R r, T) { return r.output_relative_error; }},
      {{"output_max_error", ColumnType::float64, false}, [](S, R r, T) { return r.output_max_error; }},
      {{"output_mean_abs_error", ColumnType::float64, false},
       [](S, R r, T) { return r.output_mean_abs_error; }},
      {{"sigma1_ext", ColumnType::float64, false}, [](S, R r, T) { return r.sigma1_ext; }},
      {{"sigma_m1_ext", ColumnType::float64, false}, [](S, R r, T) { return r.sigma_m1_ext; }},
      {{"sigma_m_core", ColumnType::float64, false}, [](S, R r, T) { return r.sigma_m_core; }},
      {{"bound_ratio", ColumnType::float64, false}, [](S, R r, T) { return r.bound_ratio; }},
      {{"theorem1_bound", ColumnType::float64, false}, [](S, R r, T) { return r.theorem1_bound; }},
      {{"theorem2_bound", ColumnType::float64, false}, [](S, R r, T) { return r.theorem2_bound; }},
      {{"theorem3_bound", ColumnType::float64, false}, [](S, R r, T) { return r.theorem3_bound; }},
      {{"theorem3_k", ColumnType::float64, false}, [](S, R r, T) { return r.theorem3_k; }},
      {{"theorem1_applies", ColumnType::int64, false},
       [](S, R r, T) { return flag(!std::isnan(r.theorem1_bound)); }},
      {{"theorem2_applies", ColumnType::int64, false},
       [](S, R r, T) { return flag(!std::isnan(r.theorem2_bound)); }},
      {{"theorem3_applies", ColumnType::int64, false},
       [](S, R r, T) { return flag(!std::isnan(r.theorem3_bound)); }},
      {{"bounds_hold", ColumnType::int64, false}, [](S, R r, T) { return flag(r.bounds_hold); }},
      {{"c_emp", ColumnType::float64, false}, [](S, R r, T) { return r.c_emp; }},
      {{"c_emp_normalized", ColumnType::float64, false}, [](S, R r, T) { return r.c_emp_normalized; }},
      {{"pinv_residual", ColumnType::float64, false}, [](S, R r, T) { return r.pinv_residual; }},
      {{"pinv_status", ColumnType::text, false}, [](S, R r, T) { return r.pinv_status; }},
      {{"matrix_free", ColumnType::int64, false}, [](S, R r, T) { return flag(r.matrix_free); }},
      {{"seconds", ColumnType::float64, false}, [](S, R r, T) { return r.seconds; }},
      {{"reference_seconds", ColumnType::float64, false}, [](S, R, T t) { return t.reference; }},
      {{"landmark_seconds", ColumnType::float64, false}, [](S, R, T t) { return t.landmarks; }},
      {{"elapsed_seconds", ColumnType::float64, false}, [](S, R, T t) { return t.elapsed; }},
  };
  return columns;
}

std::vector<Column> schema() {
  std::vector<Column> columns;
  for (const auto& c : sweep_columns()) columns.push_back(c.column);
  return columns;
}

Row make_row(const PointSpec& spec, const PointResult& result, const RowSeconds& seconds) {
  Row row;
  for (const auto& c : sweep_columns()) row.push_back(c.cell(spec, result, seconds));
  return row;
}

std::string point_key(const PointSpec& spec) {
  return row_key(schema(), make_row(spec, PointResult{}, {}));
}

// ---------------------------------------------------------------------------------------------------------------
// Signals: SIGINT and SIGTERM stop the sweep between two points.

volatile std::sig_atomic_t stop_signal = 0;

extern "C" void request_stop(int signal) {
  stop_signal = signal;
}

/// Installs the stop handler for SIGINT and SIGTERM while alive, restoring the previous handlers after.
class StopOnSignals {
 public:
  StopOnSignals() {
    stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_int_);
    sigaction(SIGTERM, &action, &previous_term_);
  }
  ~StopOnSignals() {
    sigaction(SIGINT, &previous_int_, nullptr);
    sigaction(SIGTERM, &previous_term_, nullptr);
  }
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

 private:
  struct sigaction previous_int_ {
  }, previous_term_{};
};

// ---------------------------------------------------------------------------------------------------------------
// Options

/// The grid and the run settings, parsed and validated.
struct SweepSettings {
  std::string input, output;
  bool default_input = false;         ///< no --input: the bundled dump and its default head subset
  std::vector<std::string> layers;    ///< empty: all
  std::vector<Index> batches, heads;  ///< empty: all
  std::vector<Kernel> kernels;        ///< exponential scale 0 means the layer's scale
  std::vector<LandmarkStrategy> strategies;
  std::vector<Index> landmarks, features, projected;
  std::vector<std::pair<PinvMethod, int>> pinvs;  ///< method and iterations (0 for exact)
  std::vector<Stabilization> stabilizations;
  std::vector<Method> methods;
  bool copy_rows = false, different_indices = false, front_padding = false, share_projections = false;
  std::string precision;
  std::uint64_t seed = 0;
  EvaluationOptions evaluation;
  bool quiet = false;
  std::int64_t stop_after = 0;
  int threads = 1;
  std::string command_line;
};

/// The bundled default dump (the real MiniLM dump, data/README.md): in the source tree, else next to the
/// executable's build tree.
constexpr const char* bundled_dump = "data/minilm-gettysburg.h5";
/// The heads the default run sweeps of the bundled dump (all 72 do not fit its 2-minute budget).
constexpr const char* default_layers = "00,01,02,03,04,05";
constexpr const char* default_heads = "0,6";

}  // namespace

std::string default_dump_path() {
  std::vector<fs::path> candidates;
  if (std::string(NYSTROM_SOURCE_DIR).size())
    candidates.push_back(fs::path(NYSTROM_SOURCE_DIR) / bundled_dump);
  std::error_code error;
  const auto executable = fs::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back(executable.parent_path().parent_path().parent_path() / bundled_dump);
  for (const auto& candidate : candidates)
    if (fs::exists(candidate)) return candidate.string();
  throw std::invalid_argument(
      describe("no --input given and the bundled dump ", bundled_dump, " was not found"));
}

namespace {

po::options_description sweep_options() {
  po::options_description options("sweep options");
  add_common_options(options, true);
  options.add_options()(
      "input,i", po::value<std::string>()->value_name("FILE"),
      describe("attention dump to sweep (default: the bundled ", bundled_dump, ", layers ", default_layers,
               " x heads ", default_heads, " unless --layers/--heads say otherwise)")
          .c_str())(
      "output,o", po::value<std::string>()->default_value("results/sweep.h5")->value_name("FILE"),
      "results file; rows are appended to FILE.partial while running, renamed onto FILE at the end")(
      "layers", po::value<std::string>()->default_value(""), "layer names, comma-separated (default: all)")(
      "batch", po::value<std::string>()->default_value(""), "batch indices, list or range (default: all)")(
      "heads", po::value<std::string>()->default_value(""),
      "head indices, list or range, e.g. 0:3:+1 (default: all)")(
      "kernel", po::value<std::string>()->default_value("exp,laplacian"),
      "kernels: exp, laplacian, gaussian")("scale", po::value<double>()->default_value(0),
                                           "exp: scale s (0: the layer's scale attribute, else 1/sqrt(d))")(
      "lambda", po::value<std::string>()->default_value("4"), "laplacian: lambda values (> 0)")(
      "bandwidth", po::value<std::string>()->default_value("8"), "gaussian: bandwidths h (> 0)")(
      "method", po::value<std::string>()->default_value("pnp-nystra"),
      "approximation methods: pnp-nystra, nystromformer, cur, symmetric-nystrom, performer, linformer, "
      "exact; "
      "the softmax methods (nystromformer, cur, performer, linformer) skip non-exp kernels")(
      "strategy", po::value<std::string>()->default_value("segment-means,window-pool,step,random"),
      "landmark strategies: segment-means, window-pool, step, random, top-sum, top-abs, top-embed, kmeans "
      "(cur uses the selection ones: step, random, top-*)")(
      "landmarks,m", po::value<std::string>()->default_value("8,16,32,64"),
      "landmark counts m: list and ranges, e.g. 4:256:x2 or 8:64:+8")(
      "pinv", po::value<std::string>()->default_value("exact,razavi"),
      "pseudoinverses: exact, razavi, newton-schulz")("iterations",
                                                      po::value<std::string>()->default_value("2,4,6"),
                                                      "iteration counts of the iterative pseudoinverses")(
      "stabilization", po::value<std::string>()->default_value("row-max"),
      "pnp-nystra: none, row-max, clamped (other methods: none)")(
      "features", po::value<std::string>()->value_name("LIST"),
      "performer: random-feature counts r (default: the --landmarks values); column `landmarks`")(
      "projected", po::value<std::string>()->value_name("LIST"),
      "linformer: projected lengths k (default: the --landmarks values); column `landmarks`")(
      "share-projections", po::bool_switch(), "linformer: F = E (share_kv)")(
      "copy-rows", po::bool_switch(), "cur: copy the exact rows (R V) into the output")(
      "different-indices", po::bool_switch(), "cur: select rows of Q and K separately")(
      "front-padding", po::bool_switch(), "nystromformer: the package's front zero padding when N % m != 0")(
      "precision", po::value<std::string>()->default_value("double"), "float or double arithmetic")(
      "memory", po::value<std::string>()->default_value("4G")->value_name("BYTES"),
      "bytes a dense N x N analysis may use (suffixes K, M, G, T: powers of 1024); above it the "
      "matrix-free path is taken (column matrix_free)")("matrix-free", po::bool_switch(),
                                                        "force the matrix-free (Lanczos) path")(
      "dense-svd-limit", po::value<Index>()->default_value(EvaluationOptions{}.dense_svd_limit),
      "matrices up to this size get full SVDs, larger ones Lanczos (sigma_{m+1}(G~) of a stored G~ falls "
      "back "
      "to a full SVD where its Lanczos value is not certified to 1e-10)")(
      "device", po::value<std::string>()->default_value("cpu"),
      "cpu or cuda: where exact attention, PnP-Nystra attention and the matrix-free error operator run")(
      "quiet,q", po::bool_switch(), "no progress output")(
      "stop-after", po::value<std::int64_t>()->default_value(0),
      "testing: stop as if interrupted (SIGINT) after this many new points (0: never)");
  return options;
}

SweepSettings parse_settings(const po::variables_map& values) {
  SweepSettings settings;
  settings.default_input = !values.count("input");
  settings.input = settings.default_input ? default_dump_path() : values["input"].as<std::string>();
  settings.output = values["output"].as<std::string>();
  require(!settings.output.empty(), "option --output: empty file name");
  auto layers = values["layers"].as<std::string>(), heads = values["heads"].as<std::string>();
  if (settings.default_input && layers.empty() && heads.empty()) {
    layers = default_layers;
    heads = default_heads;
  }
  if (!layers.empty()) settings.layers = split_list(layers, "layers");
  if (const auto text = values["batch"].as<std::string>(); !text.empty())
    settings.batches = parse_index_list(text, "batch", 0);
  if (!heads.empty()) settings.heads = parse_index_list(heads, "heads", 0);
  const double scale = values["scale"].as<double>();
  require(std::isfinite(scale), "option --scale: must be finite");
  for (auto type :
       parse_enum_list<KernelType>(values["kernel"].as<std::string>(), "kernel", kernel_type_from_string)) {
    const char* option = type == KernelType::laplacian ? "lambda" : "bandwidth";
    if (type == KernelType::exponential) {
      settings.kernels.push_back(Kernel::exponential(scale));
      continue;
    }
    for (double param : parse_double_list(values[option].as<std::string>(), option)) {
      const Kernel kernel{type, param};
      try {
        kernel.validate();
      } catch (const std::invalid_argument& error) {
        throw std::invalid_argument(describe("option --", option, ": ", error.what()));
      }
      settings.kernels.push_back(kernel);
    }
  }
  settings.strategies = parse_enum_list<LandmarkStrategy>(values["strategy"].as<std::string>(), "strategy",
                                                          landmark_strategy_from_string);
  settings.landmarks = parse_index_list(values["landmarks"].as<std::string>(), "landmarks", 1);
  settings.features = values.count("features")
                          ? parse_index_list(values["features"].as<std::string>(), "features", 1)
                          : settings.landmarks;
  settings.projected = values.count("projected")
                           ? parse_index_list(values["projected"].as<std::string>(), "projected", 1)
                           : settings.landmarks;
  const auto iterations = parse_index_list(values["iterations"].as<std::string>(), "iterations", 1);
  for (auto method :
       parse_enum_list<PinvMethod>(values["pinv"].as<std::string>(), "pinv", pinv_method_from_string)) {
    if (method == PinvMethod::exact)
      settings.pinvs.emplace_back(method, 0);
    else
      for (auto count : iterations) settings.pinvs.emplace_back(method, int(count));
  }
  settings.stabilizations = parse_enum_list<Stabilization>(values["stabilization"].as<std::string>(),
                                                           "stabilization", stabilization_from_string);
  settings.methods =
      parse_enum_list<Method>(values["method"].as<std::string>(), "method", method_from_string);
  settings.copy_rows = values["copy-rows"].as<bool>();
  settings.different_indices = values["different-indices"].as<bool>();
  settings.front_padding = values["front-padding"].as<bool>();
  settings.share_projections = values["share-projections"].as<bool>();
  settings.precision = values["precision"].as<std::string>();
  require(settings.precision == "float" || settings.precision == "double",
          describe("option --precision: '", settings.precision, "' (expected float or double)"));
  settings.seed = values["seed"].as<std::uint64_t>();
  settings.evaluation.memory_budget = parse_bytes(values["memory"].as<std::string>(), "memory");
  settings.evaluation.force_matrix_free = values["matrix-free"].as<bool>();
  settings.evaluation.dense_svd_limit = values["dense-svd-limit"].as<Index>();
  require(settings.evaluation.dense_svd_limit >= 0, "option --dense-svd-limit: must be >= 0");
  settings.evaluation.device =
      parse_enum<Device>(values["device"].as<std::string>(), "device", device_from_string);
  require_device(settings.evaluation.device);
  settings.quiet = values["quiet"].as<bool>();
  settings.stop_after = values["stop-after"].as<std::int64_t>();
  require(settings.stop_after >= 0, "option --stop-after: must be >= 0");
  return settings;
}

/// The selected layers of the dump, every name checked.
std::vector<DumpLayer> select_layers(const DumpInfo& dump, const SweepSettings& settings) {
  if (settings.layers.empty()) return dump.layers;
  std::vector<DumpLayer> selected;
  for (const auto& name : settings.layers) {
    auto found =
        std::find_if(dump.layers.begin(), dump.layers.end(), [&](const auto& l) { return l.name == name; });
    require(found != dump.layers.end(),
            describe("option --layers: ", dump.path, " has no layer /layers/", name));
    selected.push_back(*found);
  }
  return selected;
}

/// The batch or head indices selected for a layer, every index checked.
std::vector<Index> select_indices(const std::vector<Index>& requested, Index count, const DumpLayer& layer,
                                  const char* option) {
  if (requested.empty()) {
    std::vector<Index> all(count);
    for (Index i = 0; i < count; ++i) all[i] = i;
    return all;
  }
  for (auto index : requested)
    require(index < count, describe("option --", option, ": index ", index, " out of range for /layers/",
                                    layer.name, " (", count, " available)"));
  return requested;
}

/// The exponential kernel's scale: the option, else the layer's.
Kernel resolve_kernel(const Kernel& kernel, const DumpLayer& layer) {
  if (kernel.type == KernelType::exponential && kernel.param == 0) return Kernel::exponential(layer.scale);
  return kernel;
}

NystromOptions nystrom_options(const PointSpec& spec, const std::array<Index, 2>& window) {
  NystromOptions options;
  options.kernel = spec.kernel;
  options.landmarks.strategy = spec.strategy;
  options.landmarks.count = spec.landmarks;
  options.landmarks.seed = spec.seed;
  options.landmarks.window = window;
  options.pinv.method = spec.pinv;
  if (spec.pinv != PinvMethod::exact) options.pinv.iterations = spec.pinv_iters;
  options.stabilization = spec.stabilization;
  return options;
}

/// The pseudoinverse of a point: its method and iteration count over `base` (which keeps e.g. a shift).
PinvOptions point_pinv(const PointSpec& spec, PinvOptions base) {
  base.method = spec.pinv;
  if (spec.pinv != PinvMethod::exact) base.iterations = spec.pinv_iters;
  return base;
}

/// The library options of a point of any method (approximation.hpp).
ApproximationOptions approximation_options(const PointSpec& spec, const SweepSettings& settings,
                                           const std::array<Index, 2>& window) {
  ApproximationOptions options;
  options.kernel = spec.kernel;
  switch (spec.method) {
    case Method::pnp_nystra:
      options.nystrom = nystrom_options(spec, window);
      break;
    case Method::symmetric_nystrom:
      options.symmetric.kernel = spec.kernel;
      options.symmetric.landmarks = nystrom_options(spec, window).landmarks;
      options.symmetric.pinv = point_pinv(spec, options.symmetric.pinv);
      break;
    case Method::nystromformer:
      options.nystromformer.landmarks = spec.landmarks;
      options.nystromformer.pinv = point_pinv(spec, PinvOptions{});
      options.nystromformer.front_padding = settings.front_padding;
      break;
    case Method::cur:
      options.cur.selection = nystrom_options(spec, window).landmarks;
      options.cur.selection.same_indices = !settings.different_indices;
      options.cur.pinv = point_pinv(spec, PinvOptions{});
      options.cur.copy_exact_rows = settings.copy_rows;
      break;
    case Method::performer:
      options.performer.features = spec.landmarks;
      options.performer.seed = spec.seed;
      break;
    case Method::linformer:
      options.linformer.projected = spec.landmarks;
      options.linformer.seed = spec.seed;
      options.linformer.share = settings.share_projections;
      break;
    case Method::exact:
      break;
  }
  return options;
}

/// Grid points a method cannot run, reported once at the start.
struct Skipped {
  std::map<std::string, std::int64_t> reasons;
  void add(const std::string& reason) { ++reasons[reason]; }
  void report(bool quiet) const {
    if (quiet) return;
    for (const auto& [reason, count] : reasons)
      std::cerr << "nystrom sweep: skipping " << count << " grid points: " << reason << "\n";
  }
};

/// The points of one method on one head and kernel, in grid order (strategy, m, stabilization, pinv), with
/// `base` carrying the head, kernel and run fields.
void add_method_points(const PointSpec& base, const SweepSettings& settings, std::vector<PointSpec>& points,
                       Skipped& skipped) {
  const Method method = base.method;
  if (softmax_only(method) && base.kernel.type != KernelType::exponential) {
    skipped.add(
        describe(to_string(method), " is a softmax method; it has no ", base.kernel.label(), " version"));
    return;
  }
  auto add = [&](PointSpec spec) { points.push_back(std::move(spec)); };
  if (method == Method::exact) {
    PointSpec spec = base;
    spec.has_strategy = spec.has_pinv = false;
    spec.stabilization = Stabilization::none;
    return add(spec);
  }
  if (method == Method::performer || method == Method::linformer) {
    for (auto size : method == Method::performer ? settings.features : settings.projected) {
      PointSpec spec = base;
      spec.has_strategy = spec.has_pinv = false;
      spec.stabilization = Stabilization::none;
      spec.landmarks = size;
      add(spec);
    }
    return;
  }
  std::vector<LandmarkStrategy> strategies = settings.strategies;
  if (method == Method::nystromformer) strategies = {LandmarkStrategy::segment_means};
  const std::vector<Stabilization> stabilizations =
      method == Method::pnp_nystra ? settings.stabilizations : std::vector{Stabilization::none};
  for (auto strategy : strategies) {
    if (method == Method::cur && !is_selection(strategy)) {
      skipped.add(describe("cur selects rows; ", to_string(strategy), " is a pooling strategy"));
      continue;
    }
    for (auto m : settings.landmarks)
      for (auto stabilization : stabilizations)
        for (const auto& [pinv, iterations] : settings.pinvs) {
          PointSpec spec = base;
          spec.strategy = strategy;
          spec.landmarks = m;
          spec.stabilization = stabilization;
          spec.pinv = pinv;
          spec.pinv_iters = iterations;
          add(spec);
        }
  }
}

/// Every point of the grid for the layers, in evaluation order (heads outermost, pseudoinverses innermost),
/// with every option validated against the layer's N and d.
std::vector<PointSpec> enumerate_points(const std::vector<DumpLayer>& layers, const SweepSettings& settings,
                                        Skipped& skipped) {
  std::vector<PointSpec> points;
  for (const auto& layer : layers) {
    for (auto m : settings.landmarks)
      require(m <= layer.tokens, describe("option --landmarks: m = ", m, " exceeds N = ", layer.tokens,
                                          " of /layers/", layer.name, " in ", settings.input));
    for (auto b : select_indices(settings.batches, layer.batch, layer, "batch"))
      for (auto h : select_indices(settings.heads, layer.heads, layer, "heads"))
        for (const auto& kernel : settings.kernels)
          for (const auto method : settings.methods) {
            PointSpec base;
            base.layer = layer.name;
            base.batch = b;
            base.head = h;
            base.n = layer.tokens;
            base.d = layer.dim;
            base.dv = layer.value_dim;
            base.kernel = resolve_kernel(kernel, layer);
            base.method = method;
            base.precision = settings.precision;
            base.seed = settings.seed;
            const auto first = points.size();
            add_method_points(base, settings, points, skipped);
            for (auto p = first; p < points.size(); ++p) {
              try {
                approximation_options(points[p], settings, layer.window)
                    .validate(method, layer.tokens, layer.dim);
              } catch (const std::invalid_argument& error) {
                throw std::invalid_argument(describe(settings.input, ": /layers/", layer.name, ": method ",
                                                     to_string(method), ": ", error.what()));
              }
            }
          }
  }
  return points;
}

// ---------------------------------------------------------------------------------------------------------------
// The results file

/// Checks that an existing file is a results file of this input with a compatible /sweep table; returns its
/// rows.
std::vector<Row> existing_rows(const std::string& path, const std::string& input) {
  Handle file = open_file(path, false);
  require(
      has_attribute(file.get(), "format") && read_string_attribute(file.get(), "format") == "nystrom-results",
      describe(path, ": exists and is not a nystrom results file; refusing to overwrite it"));
  const auto stored_input =
      has_attribute(file.get(), "input") ? read_string_attribute(file.get(), "input") : "";
  require(stored_input == input, describe(path, ": holds results for input '", stored_input, "', not '",
                                          input, "'; choose another --output"));
  return ResultsTable::open(file.get(), "sweep", schema(), path).read_rows();
}

/// The partial file to append to: resumed when readable, else created (from a copy of a finished output when
/// there is one, so that the finished file is never modified in place).
struct PartialFile {
  Handle file;
  std::optional<ResultsTable> table;
};

/// Root attributes of a sweep's results file beyond the provenance.
void write_sweep_attributes(hid_t file, const SweepSettings& settings) {
  write_results_header(file, make_provenance(settings.command_line, settings.threads, settings.input));
  write_attribute(file, "memory_budget", std::vector<double>{settings.evaluation.memory_budget});
  write_attribute(file, "matrix_free_forced",
                  std::vector<std::int64_t>{settings.evaluation.force_matrix_free});
  write_attribute(file, "device", to_string(settings.evaluation.device));
}

PartialFile open_partial(const std::string& partial, const std::string& output, bool output_exists,
                         const SweepSettings& settings) {
  PartialFile result;
  if (fs::exists(partial)) {
    result.file = open_file(partial, true);
  } else if (output_exists) {
    fs::copy_file(output, partial);
    result.file = open_file(partial, true);
  } else {
    if (const auto parent = fs::path(partial).parent_path(); !parent.empty()) fs::create_directories(parent);
    result.file = create_file(partial);
    write_sweep_attributes(result.file.get(), settings);
    result.table = ResultsTable::create(result.file.get(), "sweep", schema());
    return result;
  }
  result.table = ResultsTable::open(result.file.get(), "sweep", schema(), partial);
  return result;
}

/// Rewrites the partial file's rows onto `output`, sorted by grid position (rows of points outside this grid,
/// from an earlier sweep into the same file, first in their stored order), so that any schedule and any
/// number of ranks give the same file. Returns the number of rows.
hsize_t write_sorted(const std::string& partial, const std::string& output,
                     const std::unordered_map<std::string, std::size_t>& position,
                     const SweepSettings& settings) {
  std::vector<Row> rows;
  {
    Handle file = open_file(partial, false);
    rows = ResultsTable::open(file.get(), "sweep", schema(), partial).read_rows();
  }
  const auto rank = [&](const Row& row) -> std::ptrdiff_t {
    const auto found = position.find(row_key(schema(), row));
    return found == position.end() ? -1 : std::ptrdiff_t(found->second);
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) { return rank(a) < rank(b); });
  AtomicFile sorted(output);
  write_sweep_attributes(sorted.get(), settings);
  auto table = ResultsTable::create(sorted.get(), "sweep", schema());
  for (const auto& row : rows) table.append(row);
  sorted.commit();
  fs::remove(partial);
  return rows.size();
}

std::string point_label(const PointSpec& p) {
  return describe(p.layer, "/b", p.batch, "/h", p.head, " ", p.kernel.label(), " ", to_string(p.method),
                  p.has_strategy ? " " + to_string(p.strategy) : "", " m=", p.landmarks,
                  p.has_pinv ? " " + to_string(p.pinv) : "", p.pinv_iters ? describe("x", p.pinv_iters) : "");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// ---------------------------------------------------------------------------------------------------------------
// Evaluation

/// ‖G − Ĝ‖₂ (relative to ‖G‖₂) and ‖G − Ĝ‖_F of kernel factors: dense when the reference holds G, else
/// Lanczos on the matrix-free error operator on `device` (Frobenius NaN there).
template <class T>
void kernel_matrix_errors(const Head<T>& head, const HeadReference<T>& reference,
                          const NystromFactors<T>& factors, const SweepSettings& settings,
                          PointResult& result) {
  if (reference.matrix_free) {
    const auto error = error_operator<T>(settings.evaluation.device, head.q, head.k, factors);
    result.spectral_error = spectral_norm(error, settings.evaluation.spectral).values(0);
    result.frobenius_error = PointResult::nan;
  } else {
    const Matrix<T> error = reference.g - factors.dense();
    result.spectral_error = singular_values<T>(error)(0);
    result.frobenius_error = error.template cast<double>().norm();
  }
  result.relative_spectral_error = result.spectral_error / reference.g_norm2;
}

template <class T>
void set_output_errors(const HeadReference<T>& reference, const Matrix<T>& output, PointResult& result) {
  if (reference.output.size() == 0 || output.size() == 0) return;
  const OutputErrors errors = output_errors<T>(reference.output, output);
  result.output_relative_error = errors.relative_frobenius;
  result.output_max_error = errors.max_abs;
  result.output_mean_abs_error = errors.mean_abs;
}

/// A method other than pnp-nystra through the library's dispatcher: output errors against exact attention,
/// the implied matrix's errors (G or S, column error_matrix), the pseudoinverse diagnostics; no bounds.
template <class T>
PointResult evaluate_method(const PointSpec& spec, const Head<T>& head, const HeadReference<T>& reference,
                            const SweepSettings& settings, const std::array<Index, 2>& window) {
  const auto start = std::chrono::steady_clock::now();
  const Matrix<T> no_values(head.q.rows(), 0);
  const Approximation<T> approximation =
      approximate_attention<T>(spec.method, head.q, head.k, head.v.size() ? head.v : no_values,
                               approximation_options(spec, settings, window));
  PointResult result;
  result.matrix_free = reference.matrix_free;
  set_output_errors(reference, approximation.output, result);
  if (approximation.kernel_factors) {
    kernel_matrix_errors(head, reference, *approximation.kernel_factors, settings, result);
  } else if (approximation.softmax_attention) {
    const AttentionMatrixErrors errors =
        attention_matrix_errors<T>(head.q, head.k, spec.kernel, *approximation.softmax_attention,
                                   !reference.matrix_free, settings.evaluation.spectral);
    result.spectral_error = errors.spectral;
    result.relative_spectral_error = errors.relative_spectral;
    result.frobenius_error = errors.frobenius;
  }
  result.bounds_hold = true;
  result.pinv_residual = approximation.pinv_residual;
  result.pinv_status = approximation.pinv_status ? to_string(*approximation.pinv_status) : "none";
  result.seconds = seconds_since(start);
  return result;
}

/// The head and kernel a point's HeadReference belongs to: the cache key, and the scheduling group.
std::string reference_key(const PointSpec& point) {
  return describe(point.layer, "/", point.batch, "/", point.head, "/", point.kernel.label());
}

/// What one process keeps between points: the last head reference and landmark terms.
template <class T>
struct PointCache {
  std::optional<HeadReference<T>> reference;
  std::optional<LandmarkTerms> terms;
  std::string reference_key, terms_key;
  RowSeconds shared;  ///< reference and landmarks: the times of the cached computations
};

/// Evaluates one point (any method) on `device`, reusing the cache when the head/kernel and landmarks match.
/// New landmark terms of a pnp-nystra point are computed beside the head reference and the point where
/// run_with_landmark_terms overlaps them.
template <class T>
PointResult evaluate_point(const PointSpec& point, const Head<T>& head, const std::array<Index, 2>& window,
                           const SweepSettings& settings, PointCache<T>& cache) {
  const auto head_key = reference_key(point);
  const bool new_reference = head_key != cache.reference_key;
  if (new_reference) cache.terms_key.clear();
  const auto build_reference = [&] {
    const auto start = std::chrono::steady_clock::now();
    cache.reference = make_reference(head, point.kernel, settings.evaluation);
    cache.shared.reference = seconds_since(start);
    cache.reference_key = head_key;
  };
  if (point.method != Method::pnp_nystra) {
    if (new_reference) build_reference();
    return evaluate_method(point, head, *cache.reference, settings, window);
  }

  const NystromOptions options = nystrom_options(point, window);
  PointResult result;
  const auto measure = [&] {
    if (new_reference) build_reference();
    result = measure_nystrom(head, *cache.reference, options, settings.evaluation);
  };
  const auto landmark_key = describe(to_string(point.strategy), "/", point.landmarks);
  if (landmark_key == cache.terms_key) {
    measure();
  } else {
    const auto build_terms = [&] {
      const auto start = std::chrono::steady_clock::now();
      cache.terms = landmark_terms(head, point.kernel, select_landmarks<T>(head.q, head.k, options.landmarks),
                                   settings.evaluation);
      cache.shared.landmarks = seconds_since(start);
    };
    run_with_landmark_terms<T>(head.q.rows(), point.landmarks, settings.evaluation, measure, build_terms);
    cache.terms_key = landmark_key;
  }
  apply_landmark_terms(*cache.terms, result);
  return result;
}

/// Thrown by the writer to stop the distribution after a signal (or --stop-after).
struct SweepStopped : std::runtime_error {
  SweepStopped() : std::runtime_error("sweep stopped by a signal") {}
};

/// Pending points as one byte each (1: pending). Rank 0 broadcasts it with one more byte (0: nothing to do);
/// an empty message means rank 0 failed before the sweep (it reports the error; the other ranks just leave).
std::vector<char> pending_mask(const std::vector<PointSpec>& points,
                               const std::unordered_set<std::string>& done) {
  std::vector<char> mask(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) mask[i] = done.count(point_key(points[i])) ? 0 : 1;
  return mask;
}

/// Loads, validates and sweeps in scalar type T.
template <class T>
int sweep(const SweepSettings& settings, const DumpInfo& dump, const std::vector<DumpLayer>& layers,
          const std::vector<PointSpec>& points) {
  // Read every head first: non-finite values are rejected before any output exists (on every rank).
  std::map<std::string, std::vector<Head<T>>> heads;
  for (const auto& layer : layers) heads[layer.name] = read_layer_heads<T>(dump, layer);

  const bool writer = mpi_rank() == 0;
  const std::string& output = settings.output;
  const std::string partial = output + ".partial";
  std::unordered_set<std::string> done;
  bool output_exists = false, partial_usable = false;
  std::vector<char> pending;
  if (writer) {
    try {
      output_exists = fs::exists(output);
      if (output_exists)
        for (const auto& row : existing_rows(output, settings.input)) done.insert(row_key(schema(), row));
      partial_usable = fs::exists(partial);
      if (partial_usable) {
        try {
          for (const auto& row : existing_rows(partial, settings.input)) done.insert(row_key(schema(), row));
        } catch (const std::invalid_argument& error) {
          // Our own leftover that cannot be read (e.g. a killed process): discard it; the finished output is
          // untouched.
          std::cerr << "nystrom sweep: discarding unreadable " << partial << " (" << error.what() << ")\n";
          fs::remove(partial);
          partial_usable = false;
        }
      }
      pending = pending_mask(points, done);
    } catch (...) {
      std::vector<char> failed;
      broadcast_from_root(failed);
      throw;
    }
  }
  // Rank 0 decides, every rank follows: the last byte says whether there is anything to do at all.
  if (writer) {
    bool pending_any = partial_usable || !output_exists;
    for (char p : pending) pending_any = pending_any || p;
    pending.push_back(pending_any ? 1 : 0);
  }
  broadcast_from_root(pending);
  if (pending.empty()) return 2;  // rank 0 failed before the sweep and reports why
  if (!pending.back()) {
    if (writer && !settings.quiet)
      std::cerr << "nystrom sweep: all " << points.size() << " points are already in " << output << "\n";
    return 0;
  }
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (pending[i]) todo.push_back(i);

  std::optional<PartialFile> results;
  if (writer) results = open_partial(partial, output, output_exists, settings);
  StopOnSignals stop_on_signals;
  Progress progress(std::int64_t(points.size()), std::int64_t(points.size() - todo.size()),
                    settings.quiet || !writer, std::cerr);
  std::int64_t computed = 0;

  // Cache affinity: the points of one head and kernel (the cache's reference key) form a group that one rank
  // works through in grid order; groups go out largest first (each point costs about N²).
  DistributionOptions distribution;
  distribution.group = [&](std::size_t index) { return reference_key(points[index]); };
  distribution.estimated_cost = [&](std::size_t index) { return double(points[index].n) * points[index].n; };
  PointCache<T> cache;
  const auto evaluate = [&](std::size_t index) -> PointRows {
    set_threads(settings.threads);
    const PointSpec& point = points[index];
    const auto& layer =
        *std::find_if(layers.begin(), layers.end(), [&](const auto& l) { return l.name == point.layer; });
    const Head<T>& head = heads.at(point.layer)[point.batch * layer.heads + point.head];
    const auto start = std::chrono::steady_clock::now();
    const PointResult result = evaluate_point(point, head, layer.window, settings, cache);
    RowSeconds seconds = cache.shared;
    seconds.elapsed = seconds_since(start);
    if (point.method != Method::pnp_nystra) seconds.landmarks = 0;  // no landmark terms
    return {make_row(point, result, seconds)};
  };
  const auto on_done = [&](std::size_t index, const PointRows& rows) {
    for (const auto& row : rows) results->table->append(row);
    H5Fflush(results->file.get(), H5F_SCOPE_GLOBAL);
    ++computed;
    progress.advance(point_label(points[index]));
    if (settings.stop_after > 0 && computed == settings.stop_after) std::raise(SIGINT);
    if (stop_signal) throw SweepStopped();
  };
  bool stopped = false;
  try {
    run_points(todo, evaluate, on_done, distribution);
  } catch (const SweepStopped&) {
    stopped = true;
  }
  if (!writer) return 0;
  const auto rows = results->table->rows();
  results->table.reset();
  results->file.reset();
  if (stopped) {
    progress.finish(describe("stopped by signal ", int(stop_signal), " after ", computed, " new points; ",
                             rows, " rows kept in ", partial, "; run the same command again to resume"));
    return 128 + int(stop_signal);
  }
  std::unordered_map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < points.size(); ++i) position.emplace(point_key(points[i]), i);
  write_sorted(partial, output, position, settings);
  progress.finish(describe("wrote ", output, ": ", rows, " rows (", computed, " computed now)"));
  return 0;
}

}  // namespace

int run_sweep(const Invocation& invocation) {
  const auto options = sweep_options();
  po::variables_map values;
  if (!parse_options(invocation, "[options]", options, {}, values)) return 0;
  SweepSettings settings = parse_settings(values);
  settings.threads = apply_threads(values);
  settings.command_line = invocation.command_line;
  if (mpi_size() > 1 && values["threads"].as<int>() == 0) settings.threads = threads_per_rank();
  const DumpInfo dump = inspect_dump(settings.input);
  settings.input = fs::weakly_canonical(settings.input).string();
  const auto layers = select_layers(dump, settings);
  Skipped skipped;
  const auto points = enumerate_points(layers, settings, skipped);
  if (mpi_rank() == 0) skipped.report(settings.quiet);
  require(!points.empty(), "no grid points: every method was skipped for these kernels and strategies");
  if (settings.precision == "float") return sweep<float>(settings, dump, layers, points);
  return sweep<double>(settings, dump, layers, points);
}

}  // namespace nystrom::cli
