// `nystrom sweep`: the Cartesian grid layers × batch × heads × kernel × strategy × landmarks × stabilization
// × pseudoinverse × iterations × method over a dump, one results row per point (FORMATS.md §2).
//
// Reuse: the head reference (G, ‖G‖₂, exact attention) is built once per head and kernel, the landmark terms
// (σ₁(G̃), σ_{m+1}(G̃), σ_m(G_A), K) once per strategy and landmark count; the pseudoinverse variants share
// both.
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
#include <unordered_set>

#include "hdf5_io.hpp"
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

/// The methods a sweep can evaluate (FORMATS.md §2 `method`); the approximation family adds the others.
const std::vector<std::string> available_methods = {"pnp-nystra"};
const std::vector<std::string> known_methods = {"pnp-nystra", "nystromformer", "cur",  "symmetric-nystrom",
                                                "performer",  "linformer",     "exact"};

/// One point of the grid.
struct PointSpec {
  std::string layer;
  Index batch = 0, head = 0, n = 0, d = 0, dv = 0;
  Kernel kernel;
  LandmarkStrategy strategy = LandmarkStrategy::segment_means;
  Index landmarks = 0;
  PinvMethod pinv = PinvMethod::exact;
  int pinv_iters = 0;  ///< 0 for the exact pseudoinverse
  Stabilization stabilization = Stabilization::row_max;
  std::string method;
  std::string precision;
  std::uint64_t seed = 0;
};

/// Wall times of the computations shared by several points (reported on each row that uses them).
struct SharedSeconds {
  double reference = 0;  ///< make_reference for this head and kernel
  double landmarks = 0;  ///< landmark_terms for this strategy and landmark count
};

/// One column of /sweep with how a row's cell is computed: the single source of the table's schema.
struct SweepColumn {
  Column column;
  std::function<Cell(const PointSpec&, const PointResult&, const SharedSeconds&)> cell;
};

std::int64_t flag(bool value) {
  return value ? 1 : 0;
}

const std::vector<SweepColumn>& sweep_columns() {
  using S = const PointSpec&;
  using R = const PointResult&;
  using T = const SharedSeconds&;
  static const std::vector<SweepColumn> columns = {
      {{"layer", ColumnType::text, true}, [](S s, R, T) { return s.layer; }},
      {{"batch", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.batch); }},
      {{"head", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.head); }},
      {{"n", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.n); }},
      {{"d", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.d); }},
      {{"kernel", ColumnType::text, true}, [](S s, R, T) { return to_string(s.kernel.type); }},
      {{"kernel_param", ColumnType::float64, true}, [](S s, R, T) { return s.kernel.param; }},
      {{"strategy", ColumnType::text, true}, [](S s, R, T) { return to_string(s.strategy); }},
      {{"landmarks", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.landmarks); }},
      {{"pinv", ColumnType::text, true}, [](S s, R, T) { return to_string(s.pinv); }},
      {{"pinv_iters", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.pinv_iters); }},
      {{"stabilization", ColumnType::text, true}, [](S s, R, T) { return to_string(s.stabilization); }},
      {{"method", ColumnType::text, true}, [](S s, R, T) { return s.method; }},
      {{"precision", ColumnType::text, true}, [](S s, R, T) { return s.precision; }},
      {{"seed", ColumnType::int64, true}, [](S s, R, T) { return std::int64_t(s.seed); }},
      {{"dv", ColumnType::int64, false}, [](S s, R, T) { return std::int64_t(s.dv); }},
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
  };
  return columns;
}

std::vector<Column> schema() {
  std::vector<Column> columns;
  for (const auto& c : sweep_columns()) columns.push_back(c.column);
  return columns;
}

Row make_row(const PointSpec& spec, const PointResult& result, const SharedSeconds& seconds) {
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
  std::vector<std::string> layers;    ///< empty: all
  std::vector<Index> batches, heads;  ///< empty: all
  std::vector<Kernel> kernels;        ///< exponential scale 0 means the layer's scale
  std::vector<LandmarkStrategy> strategies;
  std::vector<Index> landmarks;
  std::vector<std::pair<PinvMethod, int>> pinvs;  ///< method and iterations (0 for exact)
  std::vector<Stabilization> stabilizations;
  std::vector<std::string> methods;
  std::string precision;
  std::uint64_t seed = 0;
  EvaluationOptions evaluation;
  bool quiet = false;
  std::int64_t stop_after = 0;
  int threads = 1;
};

/// The bundled default dump: data/synthetic.h5 in the source tree, else next to the executable's build tree.
std::string default_input() {
  std::vector<fs::path> candidates;
  if (std::string(NYSTROM_SOURCE_DIR).size())
    candidates.push_back(fs::path(NYSTROM_SOURCE_DIR) / "data/synthetic.h5");
  std::error_code error;
  const auto executable = fs::read_symlink("/proc/self/exe", error);
  if (!error)
    candidates.push_back(executable.parent_path().parent_path().parent_path() / "data/synthetic.h5");
  for (const auto& candidate : candidates)
    if (fs::exists(candidate)) return candidate.string();
  throw std::invalid_argument("no --input given and the bundled dump data/synthetic.h5 was not found");
}

po::options_description sweep_options() {
  po::options_description options("sweep options");
  add_common_options(options, true);
  options.add_options()("input,i", po::value<std::string>()->value_name("FILE"),
                        "attention dump to sweep (default: the bundled data/synthetic.h5)")(
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
      "strategy", po::value<std::string>()->default_value("segment-means,window-pool,step,random"),
      "landmark strategies: segment-means, window-pool, step, random, top-sum, top-abs, top-embed, kmeans")(
      "landmarks,m", po::value<std::string>()->default_value("8,16,32,64"),
      "landmark counts m: list and ranges, e.g. 4:256:x2 or 8:64:+8")(
      "pinv", po::value<std::string>()->default_value("exact,razavi"),
      "pseudoinverses: exact, razavi, newton-schulz")("iterations",
                                                      po::value<std::string>()->default_value("2,4,6"),
                                                      "iteration counts of the iterative pseudoinverses")(
      "stabilization", po::value<std::string>()->default_value("row-max"), "none, row-max, clamped")(
      "method", po::value<std::string>()->default_value("pnp-nystra"), "approximation methods")(
      "precision", po::value<std::string>()->default_value("double"), "float or double arithmetic")(
      "memory-budget", po::value<double>()->default_value(4.0e9), "bytes a dense N x N analysis may use")(
      "matrix-free", po::bool_switch(), "force the matrix-free (Lanczos) path")(
      "dense-svd-limit", po::value<Index>()->default_value(EvaluationOptions{}.dense_svd_limit),
      "matrices up to this size get full SVDs, larger ones Lanczos")("quiet,q", po::bool_switch(),
                                                                     "no progress output")(
      "stop-after", po::value<std::int64_t>()->default_value(0),
      "testing: stop as if interrupted (SIGINT) after this many new points (0: never)");
  return options;
}

SweepSettings parse_settings(const po::variables_map& values) {
  SweepSettings settings;
  settings.input = values.count("input") ? values["input"].as<std::string>() : default_input();
  settings.output = values["output"].as<std::string>();
  require(!settings.output.empty(), "option --output: empty file name");
  if (const auto text = values["layers"].as<std::string>(); !text.empty())
    settings.layers = split_list(text, "layers");
  if (const auto text = values["batch"].as<std::string>(); !text.empty())
    settings.batches = parse_index_list(text, "batch", 0);
  if (const auto text = values["heads"].as<std::string>(); !text.empty())
    settings.heads = parse_index_list(text, "heads", 0);
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
  settings.methods = split_list(values["method"].as<std::string>(), "method");
  for (const auto& method : settings.methods) {
    require(std::find(known_methods.begin(), known_methods.end(), method) != known_methods.end(),
            describe("option --method: unknown method '", method, "' (expected ", join(known_methods), ")"));
    require(std::find(available_methods.begin(), available_methods.end(), method) != available_methods.end(),
            describe("option --method: '", method,
                     "' is not available in sweep yet (available: ", join(available_methods), ")"));
  }
  settings.precision = values["precision"].as<std::string>();
  require(settings.precision == "float" || settings.precision == "double",
          describe("option --precision: '", settings.precision, "' (expected float or double)"));
  settings.seed = values["seed"].as<std::uint64_t>();
  settings.evaluation.memory_budget = values["memory-budget"].as<double>();
  require(settings.evaluation.memory_budget > 0, "option --memory-budget: must be > 0");
  settings.evaluation.force_matrix_free = values["matrix-free"].as<bool>();
  settings.evaluation.dense_svd_limit = values["dense-svd-limit"].as<Index>();
  require(settings.evaluation.dense_svd_limit >= 0, "option --dense-svd-limit: must be >= 0");
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

/// Every point of the grid for the layers, in evaluation order (heads outermost, pseudoinverses innermost),
/// with every option validated against the layer's N and d.
std::vector<PointSpec> enumerate_points(const std::vector<DumpLayer>& layers, const SweepSettings& settings) {
  std::vector<PointSpec> points;
  for (const auto& layer : layers) {
    for (auto m : settings.landmarks)
      require(m <= layer.tokens, describe("option --landmarks: m = ", m, " exceeds N = ", layer.tokens,
                                          " of /layers/", layer.name, " in ", settings.input));
    for (auto b : select_indices(settings.batches, layer.batch, layer, "batch"))
      for (auto h : select_indices(settings.heads, layer.heads, layer, "heads"))
        for (const auto& kernel : settings.kernels)
          for (auto strategy : settings.strategies)
            for (auto m : settings.landmarks)
              for (auto stabilization : settings.stabilizations)
                for (const auto& [pinv, iterations] : settings.pinvs)
                  for (const auto& method : settings.methods) {
                    PointSpec spec{layer.name,
                                   b,
                                   h,
                                   layer.tokens,
                                   layer.dim,
                                   layer.value_dim,
                                   resolve_kernel(kernel, layer),
                                   strategy,
                                   m,
                                   pinv,
                                   iterations,
                                   stabilization,
                                   method,
                                   settings.precision,
                                   settings.seed};
                    try {
                      nystrom_options(spec, layer.window).validate(layer.tokens, layer.dim);
                    } catch (const std::invalid_argument& error) {
                      throw std::invalid_argument(
                          describe(settings.input, ": /layers/", layer.name, ": ", error.what()));
                    }
                    points.push_back(std::move(spec));
                  }
  }
  return points;
}

// ---------------------------------------------------------------------------------------------------------------
// The results file

/// Checks that an existing file is a results file of this input with a compatible /sweep table; returns its
/// keys.
std::unordered_set<std::string> existing_keys(const std::string& path, const std::string& input) {
  Handle file = open_file(path, false);
  require(
      has_attribute(file.get(), "format") && read_string_attribute(file.get(), "format") == "nystrom-results",
      describe(path, ": exists and is not a nystrom results file; refusing to overwrite it"));
  const auto stored_input =
      has_attribute(file.get(), "input") ? read_string_attribute(file.get(), "input") : "";
  require(stored_input == input, describe(path, ": holds results for input '", stored_input, "', not '",
                                          input, "'; choose another --output"));
  const auto table = ResultsTable::open(file.get(), "sweep", schema(), path);
  std::unordered_set<std::string> keys;
  for (const auto& row : table.read_rows()) keys.insert(row_key(schema(), row));
  return keys;
}

/// The partial file to append to: resumed when readable, else created (from a copy of a finished output when
/// there is one, so that the finished file is never modified in place).
struct PartialFile {
  Handle file;
  std::optional<ResultsTable> table;
};

PartialFile open_partial(const std::string& partial, const std::string& output, bool output_exists,
                         const Provenance& provenance) {
  PartialFile result;
  if (fs::exists(partial)) {
    result.file = open_file(partial, true);
  } else if (output_exists) {
    fs::copy_file(output, partial);
    result.file = open_file(partial, true);
  } else {
    if (const auto parent = fs::path(partial).parent_path(); !parent.empty()) fs::create_directories(parent);
    result.file = create_file(partial);
    write_results_header(result.file.get(), provenance);
    result.table = ResultsTable::create(result.file.get(), "sweep", schema());
    return result;
  }
  result.table = ResultsTable::open(result.file.get(), "sweep", schema(), partial);
  return result;
}

std::string point_label(const PointSpec& p) {
  return describe(p.layer, "/b", p.batch, "/h", p.head, " ", p.kernel.label(), " ", to_string(p.strategy),
                  " m=", p.landmarks, " ", to_string(p.pinv),
                  p.pinv_iters ? describe("x", p.pinv_iters) : "");
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Loads, validates and sweeps in scalar type T.
template <class T>
int sweep(const SweepSettings& settings, const DumpInfo& dump, const std::vector<DumpLayer>& layers,
          const std::vector<PointSpec>& points, const std::string& command_line) {
  // Read every head first: non-finite values are rejected before any output exists.
  std::map<std::string, std::vector<Head<T>>> heads;
  for (const auto& layer : layers) heads[layer.name] = read_layer_heads<T>(dump, layer);

  const std::string& output = settings.output;
  const std::string partial = output + ".partial";
  const bool output_exists = fs::exists(output);
  std::unordered_set<std::string> done;
  if (output_exists) done = existing_keys(output, settings.input);
  bool partial_usable = fs::exists(partial);
  if (partial_usable) {
    try {
      auto partial_keys = existing_keys(partial, settings.input);
      done.insert(partial_keys.begin(), partial_keys.end());
    } catch (const std::invalid_argument& error) {
      // Our own leftover that cannot be read (e.g. a killed process): discard it; the finished output is
      // untouched.
      std::cerr << "nystrom sweep: discarding unreadable " << partial << " (" << error.what() << ")\n";
      fs::remove(partial);
      partial_usable = false;
    }
  }
  std::int64_t pending = 0;
  for (const auto& p : points) pending += done.count(point_key(p)) ? 0 : 1;
  if (pending == 0 && !partial_usable && output_exists) {
    if (!settings.quiet)
      std::cerr << "nystrom sweep: all " << points.size() << " points are already in " << output << "\n";
    return 0;
  }

  auto results = open_partial(partial, output, output_exists,
                              make_provenance(command_line, settings.threads, settings.input));
  StopOnSignals stop_on_signals;
  Progress progress(std::int64_t(points.size()), std::int64_t(points.size()) - pending, settings.quiet,
                    std::cerr);
  std::int64_t computed = 0;

  // Shared computations, rebuilt only when the head/kernel or the landmark group of the next pending point
  // changes.
  std::optional<HeadReference<T>> reference;
  std::optional<LandmarkTerms> terms;
  std::string reference_key, terms_key;
  SharedSeconds shared;
  for (const auto& point : points) {
    if (stop_signal) break;
    if (done.count(point_key(point))) continue;
    const auto& layer =
        *std::find_if(layers.begin(), layers.end(), [&](const auto& l) { return l.name == point.layer; });
    const Head<T>& head = heads[point.layer][point.batch * layer.heads + point.head];
    const NystromOptions options = nystrom_options(point, layer.window);
    const auto head_key = describe(point.layer, "/", point.batch, "/", point.head, "/", point.kernel.label());
    if (head_key != reference_key) {
      const auto start = std::chrono::steady_clock::now();
      reference = make_reference(head, point.kernel, settings.evaluation);
      shared.reference = seconds_since(start);
      reference_key = head_key;
      terms_key.clear();
    }
    const auto landmark_key = describe(to_string(point.strategy), "/", point.landmarks);
    if (landmark_key != terms_key) {
      const auto start = std::chrono::steady_clock::now();
      NystromOptions exact = options;
      exact.pinv = PinvOptions{};
      exact.stabilization = Stabilization::none;
      const auto factors = generalized_nystrom<T>(head.q, head.k, exact);
      terms = landmark_terms(head, *reference, factors, settings.evaluation);
      shared.landmarks = seconds_since(start);
      terms_key = landmark_key;
    }
    const PointResult result = evaluate_nystrom(head, *reference, options, settings.evaluation, &*terms);
    results.table->append(make_row(point, result, shared));
    H5Fflush(results.file.get(), H5F_SCOPE_GLOBAL);
    ++computed;
    progress.advance(point_label(point));
    if (settings.stop_after > 0 && computed == settings.stop_after) std::raise(SIGINT);
  }
  const auto rows = results.table->rows();
  results.table.reset();
  results.file.reset();
  if (stop_signal) {
    progress.finish(describe("stopped by signal ", int(stop_signal), " after ", computed, " new points; ",
                             rows, " rows kept in ", partial, "; run the same command again to resume"));
    return 128 + int(stop_signal);
  }
  fs::rename(partial, output);
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
  const DumpInfo dump = inspect_dump(settings.input);
  settings.input = fs::weakly_canonical(settings.input).string();
  const auto layers = select_layers(dump, settings);
  const auto points = enumerate_points(layers, settings);
  if (settings.precision == "float")
    return sweep<float>(settings, dump, layers, points, invocation.command_line);
  return sweep<double>(settings, dump, layers, points, invocation.command_line);
}

}  // namespace nystrom::cli
