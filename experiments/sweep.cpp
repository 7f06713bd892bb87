// `nystrom sweep`: options → settings → run. The grid comes from sweep_grid.hpp, every point is evaluated by
// the library (evaluation.hpp's HeadEvaluator) and written as the cells of point_record.hpp into the
// resumable results file of resume_store.hpp; SIGINT and SIGTERM stop the run between points (signals.hpp).
//
// Reuse: an evaluator (each of --threads evaluating threads of one process, or an MPI rank) keeps one
// HeadEvaluator (its kernel references, landmarks and landmark terms) and works through the points of one
// head in grid order before it takes another (cache-affinity scheduling, distribute.hpp; at the end an idle
// evaluator takes points from the tail of another's head), so it rebuilds them only when it moves to another
// head. The evaluating threads run single-threaded inside (OpenBLAS always is, threads.hpp), the last ones
// left share the threads.
//
// Writing: the process's main thread (rank 0's under MPI) alone reads and writes the results files, works out
// the pending points (and broadcasts them to the ranks, which each read the dump), and appends rows as any
// evaluator finishes them. At the end the rows are sorted by grid position, so the file equals a
// one-evaluator run's whatever --threads and the ranks. All input is validated (on every rank) before any
// output exists, so a bad run leaves no file behind.
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <unordered_map>

#include "atomic_files.hpp"
#include "distribute.hpp"
#include "dumps.hpp"
#include "hdf5_handles.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/point_record.hpp"
#include "nystrom/threads.hpp"
#include "progress.hpp"
#include "results_files.hpp"
#include "resume_store.hpp"
#include "signals.hpp"
#include "subcommands.hpp"
#include "sweep_grid.hpp"

#ifndef NYSTROM_SOURCE_DIR
#define NYSTROM_SOURCE_DIR ""
#endif

namespace nystrom::cli {

namespace {

namespace fs = std::filesystem;

/// The grid and the run settings, parsed and validated.
struct SweepSettings {
  std::string input, output;
  std::string input_digest;    ///< file_digest of the input, the root attribute `input_digest`
  bool default_input = false;  ///< no --input: the bundled dump and its default head subset
  SweepGrid grid;
  EvaluationOptions evaluation;
  bool quiet = false;
  std::int64_t stop_after = 0;
  int threads = 1;
  std::string command_line;
  bool model_reference = false;     ///< --reference model: heads carry their layer's bias and mask
  std::string attention_reference;  ///< the root attribute of that name (docs/formats.md §2)
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
      "kernels: exp, laplacian, gaussian")("scale", real_value(0),
                                           "exp: scale s (0: the layer's scale attribute, else 1/sqrt(d))")(
      "lambda", po::value<std::string>()->default_value("4"), "laplacian: lambda values (> 0)")(
      "bandwidth", po::value<std::string>()->default_value("8"), "gaussian: bandwidths h (> 0)");
  add_method_option(options, "pnp-nystra",
                    "approximation methods: pnp-nystra, nystromformer, cur, symmetric-nystrom, performer, "
                    "linformer, exact; the softmax methods (nystromformer, cur, performer, linformer) skip "
                    "non-exp kernels");
  options.add_options()(
      "strategy",
      po::value<std::string>()->default_value(
          "segment-means,window-pool,step,random,cross,farthest-point-means"),
      "landmark strategies: segment-means, window-pool, step, random, top-sum, top-abs, top-embed, kmeans, "
      "cross, softmax-cross, maxvol, rpcholesky, farthest-point, farthest-point-means, oracle-qdeim (cur "
      "uses "
      "the ones that select rows; window-pool only layers with a token window); column selection_entries")(
      "landmarks,m", po::value<std::string>()->value_name("LIST"),
      "landmark counts m: list and ranges, e.g. 4:256:x2 or 8:64:+8 (default: 8, 16, 32, 64, 128 below each "
      "layer's N, and N)")(
      "oversampling", po::value<std::string>()->default_value("1"),
      "pnp-nystra: query landmarks per key landmark, a list (>= 1; above 1 the core is rectangular and the "
      "pseudoinverse exact, truncated or oracle-core)")(
      "pinv", po::value<std::string>()->default_value("exact,razavi"),
      "pseudoinverses: exact, razavi, newton-schulz, truncated (SVD cut at "
      "--pinv-tolerance, default sqrt(eps)), "
      "oracle-core (the optimal core C+ G R+, an O(N^2 d) oracle)")(
      "pinv-iters", po::value<std::string>()->default_value("2,4,6"),
      "iteration counts of the iterative pseudoinverses (razavi, newton-schulz); column pinv_iters")(
      "pinv-tolerance", real_value(0),
      "relative singular-value cut of exact and truncated (0: max(p, m) eps and sqrt(eps)), stopping "
      "residual "
      "of the iterations")("stabilization", po::value<std::string>()->default_value("row-max"),
                           "pnp-nystra: none, row-max, clamped, row-sum (other methods: none)")(
      "features", po::value<std::string>()->value_name("LIST"),
      "performer: random-feature counts r (default: the --landmarks values); column `features`")(
      "projected", po::value<std::string>()->value_name("LIST"),
      "linformer: projected lengths k (default: the --landmarks values); column `projected`")(
      "share-projections", po::bool_switch(), "linformer: F = E (share_kv)")(
      "copy-rows", po::bool_switch(), "cur: copy the exact rows (R V) into the output")(
      "different-indices", po::bool_switch(), "cur: select rows of Q and K separately")(
      "front-padding", po::bool_switch(), "nystromformer: the package's front zero padding when N % m != 0");
  add_deprecated_alias(options, "iterations", "pinv-iters");
  add_precision_option(options, "double", PrecisionValues::emulated_list);
  add_memory_option(options, "the matrix-free path is taken (column matrix_free)");
  options.add_options()("matrix-free", po::bool_switch(), "force the matrix-free (Lanczos) path")(
      "certificates-only", po::bool_switch(),
      "no exact spectral_error: only its certified bounds spectral_error_lower/upper (for heads whose exact "
      "norm "
      "costs too much)")("certificate-steps", po::value<int>()->default_value(CertificateOptions{}.steps),
                         "Lanczos steps of the certificates of spectral_error (Kuczynski-Wozniakowski)")(
      "certificate-failure", real_value(CertificateOptions{}.failure_probability),
      "failure probability of spectral_error_upper (column spectral_error_upper_failure)")(
      "dense-svd-limit", po::value<Index>()->default_value(EvaluationOptions{}.dense_svd_limit),
      "sigma(G~) of matrices up to this size by full SVDs, larger ones by Lanczos (a stored G~ falls back to "
      "a full SVD where its Lanczos value is not certified to 1e-10); norms of stored matrices by Lanczos, "
      "a full SVD up to this size where it does not converge");
  add_device_option(options,
                    "where the PnP-Nystra factors, exact attention and the matrix-free products run");
  add_reference_option(options);
  add_quiet_option(options, "no progress output");
  options.add_options()("stop-after", po::value<std::int64_t>()->default_value(0),
                        "testing: stop as if interrupted (SIGINT) after this many new points (0: never)");
  return options;
}

/// The kernels of --kernel with their parameter lists. --lambda and --bandwidth are checked whether or not
/// --kernel names their kernel: a bad value is bad input either way.
std::vector<Kernel> parse_kernels(const po::variables_map& values) {
  const Kernel exponential = kernel_option(KernelType::exponential, real_option(values, "scale"), "scale");
  const auto parameter_kernels = [&](KernelType type, const char* option) {
    std::vector<Kernel> kernels;
    for (double param : parse_double_list(values[option].as<std::string>(), option))
      kernels.push_back(kernel_option(type, param, option));
    return kernels;
  };
  const std::vector<Kernel> laplacian = parameter_kernels(KernelType::laplacian, "lambda"),
                            gaussian = parameter_kernels(KernelType::gaussian, "bandwidth");
  std::vector<Kernel> kernels;
  for (auto type :
       parse_enum_list<KernelType>(values["kernel"].as<std::string>(), "kernel", kernel_type_from_string)) {
    if (type == KernelType::exponential) {
      kernels.push_back(exponential);
      continue;
    }
    const std::vector<Kernel>& with_parameters = type == KernelType::laplacian ? laplacian : gaussian;
    kernels.insert(kernels.end(), with_parameters.begin(), with_parameters.end());
  }
  return kernels;
}

/// The grid axes of the options (the default input sweeps its default head subset).
SweepGrid parse_grid(const po::variables_map& values, bool default_input) {
  SweepGrid grid;
  auto layers = values["layers"].as<std::string>(), heads = values["heads"].as<std::string>();
  if (default_input && layers.empty() && heads.empty()) {
    layers = default_layers;
    heads = default_heads;
  }
  if (!layers.empty()) grid.layers = split_list(layers, "layers");
  if (const auto text = values["batch"].as<std::string>(); !text.empty())
    grid.batches = parse_index_list(text, "batch", 0);
  if (!heads.empty()) grid.heads = parse_index_list(heads, "heads", 0);
  grid.kernels = parse_kernels(values);
  grid.strategies = parse_enum_list<LandmarkStrategy>(values["strategy"].as<std::string>(), "strategy",
                                                      command_line_strategy);
  grid.oversamplings = parse_double_list(values["oversampling"].as<std::string>(), "oversampling");
  const auto index_list = [&](const char* name) {
    return values.count(name) ? parse_index_list(values[name].as<std::string>(), name, 1)
                              : std::vector<Index>{};
  };
  grid.landmarks = index_list("landmarks");
  grid.features = index_list("features");  // empty: each layer's landmark counts (sweep_grid.hpp)
  grid.projected = index_list("projected");
  const auto iterations = parse_index_list(option_text(values, "pinv-iters", "iterations"), "pinv-iters", 1);
  for (auto count : iterations)
    require(count <= max_pinv_iterations, "option --pinv-iters: ", count, " is above ", max_pinv_iterations);
  for (auto method :
       parse_enum_list<PinvMethod>(values["pinv"].as<std::string>(), "pinv", pinv_method_from_string)) {
    if (is_iterative(method))
      for (auto count : iterations) grid.pinvs.emplace_back(method, int(count));
    else
      grid.pinvs.emplace_back(method, 0);
  }
  grid.stabilizations = parse_enum_list<Stabilization>(values["stabilization"].as<std::string>(),
                                                       "stabilization", stabilization_from_string);
  grid.methods = parse_methods(values);
  grid.switches.copy_rows = values["copy-rows"].as<bool>();
  grid.switches.different_indices = values["different-indices"].as<bool>();
  grid.switches.front_padding = values["front-padding"].as<bool>();
  grid.switches.share_projections = values["share-projections"].as<bool>();
  grid.switches.pinv_tolerance = real_option(values, "pinv-tolerance");
  grid.precisions = parse_formats(values);
  grid.seed = seed_option(values);
  return grid;
}

SweepSettings parse_settings(const po::variables_map& values) {
  SweepSettings settings;
  settings.default_input = !values.count("input");
  settings.input = settings.default_input ? default_dump_path() : values["input"].as<std::string>();
  settings.output = values["output"].as<std::string>();
  require(!settings.output.empty(), "option --output: empty file name");
  settings.grid = parse_grid(values, settings.default_input);
  settings.evaluation.memory_budget = parse_bytes(values["memory"].as<std::string>(), "memory");
  settings.evaluation.matrix_free = values["matrix-free"].as<bool>();
  settings.evaluation.certificates_only = values["certificates-only"].as<bool>();
  settings.evaluation.certificate.steps = values["certificate-steps"].as<int>();
  settings.evaluation.certificate.failure_probability = real_option(values, "certificate-failure");
  settings.evaluation.dense_svd_limit = values["dense-svd-limit"].as<Index>();
  require(settings.evaluation.dense_svd_limit >= 0, "option --dense-svd-limit: must be >= 0");
  settings.evaluation.device = parse_device(values);
  try {
    settings.evaluation.validate();
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(describe("options: ", error.what()));
  }
  settings.model_reference = parse_model_reference(values);
  settings.quiet = values["quiet"].as<bool>();
  settings.stop_after = values["stop-after"].as<std::int64_t>();
  require(settings.stop_after >= 0, "option --stop-after: must be >= 0");
  return settings;
}

/// The root attributes a sweep resumes only into files that share: `reference` (`kernel` or `model`) and
/// `input_digest`, the input's (docs/formats.md §2).
std::vector<RunSetting> run_settings(const SweepSettings& settings) {
  return {{"reference", settings.model_reference ? "model" : "kernel", "kernel"},
          {"input_digest", settings.input_digest, std::nullopt}};
}

/// Root attributes of a sweep's results file: provenance, the evaluation settings and the points left out.
void write_sweep_attributes(hid_t file, const SweepSettings& settings, const Skipped& skipped) {
  write_results_header(file, make_provenance(settings.command_line, settings.threads, settings.input));
  write_attribute(file, "memory_budget", std::vector<double>{settings.evaluation.memory_budget});
  write_attribute(file, "matrix_free", std::vector<std::int64_t>{settings.evaluation.matrix_free});
  write_attribute(file, "device", to_string(settings.evaluation.device));
  for (const auto& setting : run_settings(settings)) write_attribute(file, setting.name, setting.value);
  write_attribute(file, "attention_reference", settings.attention_reference);
  std::string skipped_text;
  for (const auto& line : skipped.lines()) skipped_text += line + "\n";
  write_attribute(file, "skipped", skipped_text);
}

/// The heads a sweep evaluates, read (non-finite values rejected) and checked for kernels that overflow even
/// in double before any output exists (on every rank).
template <class T>
class SweepHeads {
 public:
  SweepHeads(const DumpInfo& dump, const std::vector<DumpLayer>& layers,
             const std::vector<PointDescription>& points, bool model_reference)
      : path_(dump.path) {
    for (const auto& layer : layers) {
      heads_[layer.name] = read_layer_heads<T>(dump, layer, model_reference);
      head_counts_[layer.name] = layer.heads;
    }
    std::map<std::string, const PointDescription*> checked;  // one point per head and kernel
    for (const auto& point : points) checked.emplace(reference_group(point), &point);
    for (const auto& [group, point] : checked)
      require_representable_kernel(head(*point), point->options.kernel, where(*point));
  }
  const Head<T>& head(const PointDescription& point) const {
    return heads_.at(point.layer)[point.batch * head_counts_.at(point.layer) + point.head];
  }
  /// "dump.h5: /layers/00 batch 0 head 3" for messages.
  std::string where(const PointDescription& point) const {
    return describe(path_, ": /layers/", point.layer, " batch ", point.batch, " head ", point.head);
  }

 private:
  std::string path_;
  std::map<std::string, std::vector<Head<T>>> heads_;
  std::map<std::string, Index> head_counts_;
};

/// Rank 0 opens the results store and decides which points are pending (one byte per point, 1: pending, and a
/// last byte: anything to do at all); every rank receives the bytes. Where rank 0 fails, every rank throws
/// (on_every_rank).
std::vector<char> pending_points(const SweepSettings& settings, const std::vector<PointDescription>& points,
                                 const Skipped& skipped, std::optional<ResumeStore>& store) {
  std::vector<char> pending;
  on_every_rank([&] {
    if (mpi_rank() != 0) return;
    store.emplace(settings.output, settings.input, run_settings(settings), "sweep", point_columns(),
                  [&](hid_t file) { write_sweep_attributes(file, settings, skipped); });
    bool any = store->unfinished();
    for (const auto& point : points) {
      pending.push_back(store->done().count(row_key(point_columns(), point_cells(point, {}))) ? 0 : 1);
      any = any || pending.back();
    }
    if (any) store->require_appendable();
    pending.push_back(any ? 1 : 0);
  });
  broadcast_from_root(pending);
  return pending;
}

/// Thrown by the writer to stop the distribution after a signal (or --stop-after).
struct SweepStopped : std::runtime_error {
  SweepStopped() : std::runtime_error("sweep stopped by a signal") {}
};

/// Loads, validates and sweeps in scalar type T.
template <class T>
int sweep(const SweepSettings& settings, const DumpInfo& dump, const std::vector<DumpLayer>& layers,
          const std::vector<PointDescription>& points, const Skipped& skipped) {
  std::optional<SweepHeads<T>> loaded;
  on_every_rank([&] { loaded.emplace(dump, layers, points, settings.model_reference); });
  const SweepHeads<T>& heads = *loaded;
  std::optional<ResumeStore> store;
  const std::vector<char> pending = pending_points(settings, points, skipped, store);
  if (!pending.back()) {
    if (store && !settings.quiet)
      std::cerr << "nystrom sweep: all " << points.size() << " points are already in " << settings.output
                << "\n";
    return 0;
  }
  std::vector<std::size_t> todo;
  for (std::size_t i = 0; i < points.size(); ++i)
    if (pending[i]) todo.push_back(i);

  if (store) store->open();
  const StopOnSignals stop;
  Progress progress(std::int64_t(points.size()), std::int64_t(points.size() - todo.size()),
                    settings.quiet || !store, std::cerr);
  std::int64_t computed = 0;
  // Cache affinity: the points of one head form a group that one evaluator works through in grid order
  // (kernel by kernel); groups go out largest first (each point costs about N²). An evaluator keeps the
  // HeadEvaluator of its head.
  DistributionOptions distribution;
  distribution.group = [&](std::size_t index) { return head_name(points[index]); };
  distribution.estimated_cost = [&](std::size_t index) { return double(points[index].n) * points[index].n; };
  // One process evaluates on --threads threads at once, each with its own evaluator (MPI ranks on one each).
  distribution.evaluators = mpi_size() > 1 ? 1 : std::size_t(settings.threads);
  struct CachedEvaluator {
    std::optional<HeadEvaluator<T>> evaluator;
    std::string head;
  };
  std::vector<CachedEvaluator> cached(distribution.evaluators);
  const auto evaluate = [&](std::size_t index, std::size_t slot) -> PointRows {
    const PointDescription& point = points[index];
    auto& [evaluator, evaluator_head] = cached[slot];
    if (head_name(point) != evaluator_head) {
      evaluator.reset();
      evaluator.emplace(heads.head(point), settings.evaluation, heads.where(point));
      evaluator_head = head_name(point);
    }
    return {point_cells(point, evaluator->evaluate(point.method, point.options))};
  };
  const auto on_done = [&](std::size_t index, const PointRows& rows) {
    for (const auto& row : rows) store->append(row);
    ++computed;
    progress.advance(point_label(points[index]));
    if (settings.stop_after > 0 && computed == settings.stop_after) std::raise(SIGINT);
    if (stop.received()) throw SweepStopped();
  };
  bool stopped = false;
  try {
    run_points(todo, evaluate, on_done, distribution);
  } catch (const SweepStopped&) {
    stopped = true;
  } catch (...) {
    if (store) store->abandon();
    throw;
  }
  if (!store) return 0;
  const auto rows = store->rows();
  if (stopped) {
    store->close();
    progress.finish(describe("stopped by signal ", stop.received(), " after ", computed, " new points; ",
                             rows, " rows kept in ", store->partial(),
                             "; run the same command again to resume"));
    return 128 + stop.received();
  }
  std::unordered_map<std::string, std::size_t> position;
  for (std::size_t i = 0; i < points.size(); ++i)
    position.emplace(row_key(point_columns(), point_cells(points[i], {})), i);
  store->commit(position);
  progress.finish(describe("wrote ", settings.output, ": ", rows, " rows (", computed, " computed now)"));
  return 0;
}

}  // namespace

int run_sweep(const Invocation& invocation) {
  const auto options = sweep_options();
  po::variables_map values;
  bool help = false;
  SweepSettings settings;
  DumpInfo dump;
  std::vector<DumpLayer> layers;
  Skipped skipped;
  std::vector<PointDescription> points;
  // Under MPI every rank reads the options and the dump itself; one that fails (a file one node lacks) ends
  // every rank.
  on_every_rank([&] {
    help = !parse_options(invocation, "[options]", options, {}, values);
    if (help) return;
    settings = parse_settings(values);
    settings.threads = apply_threads(values);
    settings.command_line = invocation.command_line;
    if (mpi_size() > 1 && values["threads"].as<int>() == 0) {
      settings.threads = threads_per_rank();
      set_threads(settings.threads);
    }
    dump = inspect_dump(settings.input);
    settings.input = fs::weakly_canonical(settings.input).string();
    settings.input_digest = file_digest(settings.input);
    layers = select_layers(dump, settings.grid);
    settings.attention_reference = attention_reference(layers, settings.model_reference);
    points = enumerate_points(layers, settings.grid, settings.input, skipped);
    if (points.empty()) {
      std::string reasons;
      for (const auto& line : skipped.lines()) reasons += "; " + line;
      throw std::invalid_argument("no grid points: every point was skipped" + reasons);
    }
  });
  if (help) return 0;
  if (mpi_rank() == 0 && !settings.quiet) {
    for (const auto& line : skipped.lines()) std::cerr << "nystrom sweep: " << line << "\n";
    print_attention_reference(std::cerr, "nystrom sweep", layers, settings.model_reference);
  }
  if (settings.grid.precisions.front() != Precision::float64)
    return sweep<float>(settings, dump, layers, points, skipped);
  return sweep<double>(settings, dump, layers, points, skipped);
}

}  // namespace nystrom::cli
