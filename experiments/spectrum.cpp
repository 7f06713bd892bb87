// `nystrom spectrum`: singular-value decay of G = κ(Q, K), S = D⁻¹G, the extended matrix G̃ = κ([Q̄;Q], [K̄;K])
// and the model's own `attn` (when the dump has it), per layer and head (docs/mathematics.md §7; PnP-Nystra
// Fig. 1). Dense or matrix-free by the evaluation's one rule (EvaluationOptions::matrix_free, --memory):
// small heads take the dense path (full SVD, so the energy fractions and ranks use every singular value),
// larger heads the matrix-free Lanczos path for G and G̃ (energy over the top k, S not computed). The kernel
// blocks and the Lanczos products run on --device (backend.hpp); SVDs and Spectra's iterations stay on the
// CPU. The heads of a layer are evaluated --threads at once (run_points, distribute.hpp; one process only).
//
// --reference model: the heads of a layer with a `bias` or `mask` carry their sum (read_layer_heads), and G,
// S and G̃ are those of the exact side with it (evaluation.hpp: head_kernel_matrix, head_attention_matrix,
// head_extended_matrix), always stored (matrix_free_head).
//
// Large logits: G and G̃ are analysed as κ_c = e^{−c}κ with the head's log-shift c (kernel_log_shift), and
// their singular values written multiplied back by e^{c} in double (finite wherever they are representable;
// decay, energy and rank do not depend on c); /spectra/<layer>/log_shift [B, H] records c.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <numeric>

#include "atomic_files.hpp"
#include "distribute.hpp"
#include "dumps.hpp"
#include "hdf5_handles.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/threads.hpp"
#include "progress.hpp"
#include "results_files.hpp"
#include "subcommands.hpp"

namespace nystrom::cli {

namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();

/// The spectrum quantities of one matrix for one head.
struct SpectrumSummary {
  std::vector<double> values;  ///< top k singular values (NaN-padded), of κ_c where log_shift is set
  std::vector<double> energy;  ///< energy fraction of the first i + 1 values
  std::int64_t rank = -1;      ///< numerical rank at the tolerance (-1: not computed)
  double log_shift = 0;        ///< c: the singular values of κ are e^{c} times `values`
};

/// Summary from a singular-value vector (all of them on the dense path, the top k on the matrix-free path).
SpectrumSummary summarize(const Vector<double>& singular_values, Index k, double rank_tol,
                          double log_shift = 0) {
  SpectrumSummary summary;
  summary.values.assign(k, nan);
  summary.energy.assign(k, nan);
  // Lanczos pads the values it did not converge to with NaN: energy and rank are over the values computed.
  Index computed = 0;
  while (computed < singular_values.size() && std::isfinite(singular_values[computed])) ++computed;
  const Vector<double> known = singular_values.head(computed);
  for (Index i = 0; i < std::min<Index>(k, singular_values.size()); ++i) {
    summary.values[i] = singular_values[i];
    if (i < computed) summary.energy[i] = energy_fraction(known, i + 1);
  }
  summary.rank = numerical_rank(known, rank_tol);
  summary.log_shift = log_shift;
  return summary;
}

/// Which matrices are analysed, with their dataset suffixes.
enum SpectrumMatrix { g_matrix, s_matrix, ext_matrix, attn_matrix, matrix_count };
constexpr std::array<const char*, matrix_count> matrix_names = {"G", "S", "Gext", "attn"};

struct SpectrumSettings {
  std::string input, output;
  std::vector<std::string> layers;
  Kernel kernel;
  LandmarkOptions landmarks;
  bool landmarks_given = false;  ///< --landmarks given: m on every layer; else 16, at most each layer's N
  Index top = 50;
  double rank_tol = 1e-6;
  EvaluationOptions evaluation;  ///< memory budget (the dense-or-matrix-free rule) and device
  bool model_reference = false;  ///< --reference model: heads carry their layer's bias and mask
  std::string precision = "double";
  bool quiet = false;
};

/// The landmarks of G̃ on `layer`: --landmarks on the layer's token grid, or without it 16 capped at the
/// layer's N (as --top is).
LandmarkOptions layer_landmarks(const SpectrumSettings& settings, const DumpLayer& layer) {
  LandmarkOptions landmarks = on_token_grid(settings.landmarks, layer.window, layer.prefix_tokens);
  if (!settings.landmarks_given) landmarks.count = std::min(landmarks.count, layer.tokens);
  return landmarks;
}

/// Every spectrum of one head, in T; reads the dump's `attn` under `reading` (HDF5 calls one at a time: the
/// HDF5 library may be built without thread safety).
template <class T>
std::array<SpectrumSummary, matrix_count> head_spectra(const DumpInfo& dump, const DumpLayer& layer,
                                                       const Head<T>& head, Index b, Index h,
                                                       const SpectrumSettings& settings, Index k, bool dense,
                                                       std::mutex& reading) {
  std::array<SpectrumSummary, matrix_count> spectra;
  const std::string where = describe(dump.path, ": /layers/", layer.name, " batch ", b, " head ", h);
  // The checks of sweep's evaluation (a bias row of −∞ alone leaves its softmax undefined), naming the head.
  head.validate(where);
  const Kernel kernel = settings.kernel.shifted(head_log_shift(head, settings.kernel, where));
  const ExtendedTokens<T> extended = extended_tokens<T>(
      head.q, head.k, select_landmarks<T>(head.q, head.k, layer_landmarks(settings, layer), kernel));
  const EvaluationOptions& evaluation = settings.evaluation;
  const auto stored_spectrum = [&](const Matrix<T>& matrix) {
    return summarize(singular_values<T>(matrix), k, settings.rank_tol, kernel.log_shift);
  };
  const auto kernel_spectrum = [&](const Matrix<T>& x, const Matrix<T>& y) {
    if (dense) return stored_spectrum(kernel_block<T>(evaluation.device, x, y, kernel));
    const SpectralResult top =
        top_singular_values(kernel_operator<T, double>(evaluation.device, x, y, kernel, evaluation.tiling()),
                            k, evaluation.spectral);
    return summarize(top.values, k, settings.rank_tol, kernel.log_shift);
  };
  if (head.bias.size() > 0) {  // --reference model: the stored G and G̃ with the bias (dense is set)
    spectra[g_matrix] = stored_spectrum(head_kernel_matrix(head, kernel));
    spectra[ext_matrix] = stored_spectrum(head_extended_matrix(head, kernel, extended));
  } else {
    spectra[g_matrix] = kernel_spectrum(head.q, head.k);
    spectra[ext_matrix] = kernel_spectrum(extended.queries, extended.keys);
  }
  if (dense) {
    spectra[s_matrix] =
        summarize(singular_values<T>(head_attention_matrix(head, settings.kernel)), k, settings.rank_tol);
  } else {
    spectra[s_matrix].values.assign(k, nan);  // S = D⁻¹G has no matrix-free path here
    spectra[s_matrix].energy.assign(k, nan);
  }
  if (layer.has_attention) {
    Matrix<T> attention;
    {
      const std::lock_guard lock(reading);
      attention = read_attention<T>(dump, layer, b, h);
    }
    spectra[attn_matrix] = summarize(singular_values<T>(attention), k, settings.rank_tol);
  }
  return spectra;
}

/// Writes /spectra/<layer>/{sv,decay,energy}_<X> [B, H, k] and rank_<X> [B, H] for one layer.
void write_layer(hid_t file, const DumpLayer& layer, const SpectrumSettings& settings, Index k, bool dense,
                 const std::vector<std::array<SpectrumSummary, matrix_count>>& spectra) {
  Handle group = create_group(file, "spectra/" + layer.name);
  const std::vector<hsize_t> dims = {hsize_t(layer.batch), hsize_t(layer.heads), hsize_t(k)};
  for (int matrix = 0; matrix < matrix_count; ++matrix) {
    if (matrix == attn_matrix && !layer.has_attention) continue;
    std::vector<double> values, decay, energy;
    std::vector<std::int64_t> ranks;
    for (const auto& head : spectra) {
      const auto& s = head[matrix];
      const double scale = std::exp(s.log_shift);
      for (double x : s.values) values.push_back(x * scale);
      energy.insert(energy.end(), s.energy.begin(), s.energy.end());
      for (double x : s.values) decay.push_back(x / s.values[0]);
      ranks.push_back(s.rank);
    }
    const std::string suffix = matrix_names[matrix];
    write_array(group.get(), "sv_" + suffix, dims, values.data());
    write_array(group.get(), "decay_" + suffix, dims, decay.data());
    write_array(group.get(), "energy_" + suffix, dims, energy.data());
    write_array(group.get(), "rank_" + suffix, {dims[0], dims[1]}, ranks.data());
  }
  std::vector<double> shifts;
  for (const auto& head : spectra) shifts.push_back(head[g_matrix].log_shift);
  write_array(group.get(), "log_shift", {hsize_t(layer.batch), hsize_t(layer.heads)}, shifts.data());
  write_attribute(group.get(), "k", std::vector<std::int64_t>{k});
  write_attribute(group.get(), "N", std::vector<std::int64_t>{layer.tokens});
  write_attribute(group.get(), "d", std::vector<std::int64_t>{layer.dim});
  write_attribute(group.get(), "kernel", to_string(settings.kernel.type));
  write_attribute(group.get(), "kernel_param", std::vector<double>{settings.kernel.param});
  write_attribute(group.get(), "strategy", to_string(settings.landmarks.strategy));
  write_attribute(group.get(), "landmarks",
                  std::vector<std::int64_t>{layer_landmarks(settings, layer).count});
  write_attribute(group.get(), "seed", std::vector<std::int64_t>{std::int64_t(settings.landmarks.seed)});
  write_attribute(group.get(), "rank_tol", std::vector<double>{settings.rank_tol});
  write_attribute(group.get(), "path", std::string(dense ? "dense" : "matrix-free"));
  write_attribute(group.get(), "energy_denominator",
                  std::string(dense ? "all singular values" : "the top k singular values"));
}

template <class T>
void compute_and_write(const DumpInfo& dump, const std::vector<DumpLayer>& layers,
                       const SpectrumSettings& settings, AtomicFile& file) {
  std::int64_t total = 0;
  for (const auto& layer : layers) total += layer.batch * layer.heads;
  Progress progress(total, 0, settings.quiet, std::cerr);
  // --threads heads at once, each on one thread (the last ones left share the threads), in one process.
  DistributionOptions distribution;
  distribution.evaluators = std::size_t(threads());
  std::mutex reading;
  for (const auto& layer : layers) {
    const auto heads = read_layer_heads<T>(dump, layer, settings.model_reference);
    const Index k = std::min(settings.top, layer.tokens);
    const bool dense = !matrix_free_head(heads.front(), settings.evaluation);  // the layer's heads alike
    std::vector<std::array<SpectrumSummary, matrix_count>> spectra(heads.size());
    std::vector<std::size_t> indices(heads.size());
    std::iota(indices.begin(), indices.end(), std::size_t{0});
    const auto position = [&](std::size_t index) {
      return std::pair{Index(index) / layer.heads, Index(index) % layer.heads};
    };
    run_points(
        indices,
        [&](std::size_t index, std::size_t) {
          const auto [b, h] = position(index);
          spectra[index] = head_spectra(dump, layer, heads[index], b, h, settings, k, dense, reading);
          return PointRows{};
        },
        [&](std::size_t index, const PointRows&) {
          const auto [b, h] = position(index);
          progress.advance(describe(layer.name, "/b", b, "/h", h));
        },
        distribution);
    write_layer(file.get(), layer, settings, k, dense, spectra);
  }
  progress.finish(describe("wrote ", settings.output));
}

}  // namespace

namespace {

po::options_description spectrum_options() {
  po::options_description options("spectrum options");
  add_common_options(options, true);
  options.add_options()("input,i", po::value<std::string>()->value_name("FILE"),
                        "attention dump (default: the bundled data/minilm-gettysburg.h5)")(
      "output,o", po::value<std::string>()->default_value("results/spectrum.h5")->value_name("FILE"),
      "results file with /spectra/<layer>/ (written atomically)")(
      "layers", po::value<std::string>()->default_value(""), "layer names, comma-separated (default: all)")(
      "kernel", po::value<std::string>()->default_value("exp"), "exp, laplacian or gaussian")(
      "scale", real_value(0), "exp: scale s (0: the layer's scale attribute)")(
      "lambda", real_value(4), "laplacian: lambda (> 0)")("bandwidth", real_value(8),
                                                          "gaussian: bandwidth h (> 0)")(
      "strategy", po::value<std::string>()->default_value("segment-means"), "landmark strategy for G~")(
      "landmarks,m", po::value<Index>()->default_value(16),
      "landmark count m for G~ (default: 16, at most each layer's N)")(
      "top,k", po::value<Index>()->default_value(50), "number of singular values kept (capped at N)")(
      "rank-tol", real_value(1e-6), "numerical rank: singular values > tol * sigma_1");
  add_memory_option(options, "the matrix-free path is taken (attribute path)");
  add_device_option(options, "kernel blocks and Lanczos products on the GPU");
  add_reference_option(options);
  add_precision_option(options, "double", PrecisionValues::one);
  add_quiet_option(options, "no progress output");
  return options;
}

SpectrumSettings parse_settings(const po::variables_map& values) {
  SpectrumSettings settings;
  settings.input = values.count("input") ? values["input"].as<std::string>() : default_dump_path();
  settings.output = values["output"].as<std::string>();
  if (const auto text = values["layers"].as<std::string>(); !text.empty())
    settings.layers = split_list(text, "layers");
  const auto type =
      parse_enum<KernelType>(values["kernel"].as<std::string>(), "kernel", kernel_type_from_string);
  // --lambda and --bandwidth are checked whichever kernel --kernel names: a bad value is bad input either
  // way.
  const Kernel laplacian = kernel_option(KernelType::laplacian, real_option(values, "lambda"), "lambda");
  const Kernel gaussian = kernel_option(KernelType::gaussian, real_option(values, "bandwidth"), "bandwidth");
  settings.kernel = type == KernelType::laplacian ? laplacian
                    : type == KernelType::gaussian
                        ? gaussian
                        : kernel_option(type, real_option(values, "scale"), "scale");
  settings.landmarks.strategy =
      parse_enum<LandmarkStrategy>(values["strategy"].as<std::string>(), "strategy", command_line_strategy);
  settings.landmarks.count = values["landmarks"].as<Index>();
  settings.landmarks_given = !values["landmarks"].defaulted();
  settings.landmarks.seed = seed_option(values);
  settings.top = values["top"].as<Index>();
  settings.rank_tol = real_option(values, "rank-tol");
  settings.evaluation.memory_budget = parse_bytes(values["memory"].as<std::string>(), "memory");
  settings.evaluation.device = parse_device(values);
  settings.model_reference = parse_model_reference(values);
  settings.quiet = values["quiet"].as<bool>();
  settings.precision = parse_precision(values);
  require(settings.landmarks.count >= 1, "option --landmarks: m = ", settings.landmarks.count,
          " must be >= 1");
  require(settings.top >= 1, "option --top: ", settings.top, " must be >= 1");
  require(settings.rank_tol > 0 && settings.rank_tol < 1, "option --rank-tol: must lie in (0, 1)");
  return settings;
}

/// The selected layers of the dump, every name checked, with the landmark options valid on each; the
/// exponential kernel's scale 0 becomes the layers' (which must agree: one file holds one kernel).
std::vector<DumpLayer> select_layers(const DumpInfo& dump, SpectrumSettings& settings) {
  std::vector<DumpLayer> layers;
  for (const auto& layer : dump.layers)
    if (settings.layers.empty() ||
        std::find(settings.layers.begin(), settings.layers.end(), layer.name) != settings.layers.end())
      layers.push_back(layer);
  for (const auto& name : settings.layers)
    require(std::any_of(layers.begin(), layers.end(), [&](const auto& l) { return l.name == name; }),
            "option --layers: ", settings.input, " has no layer /layers/", name);
  if (settings.kernel.type == KernelType::exponential && settings.kernel.param == 0) {
    settings.kernel.param = layers.front().scale;
    for (const auto& layer : layers)
      require(layer.scale == settings.kernel.param, settings.input,
              ": layers have different scales; give --scale or select --layers");
  }
  for (const auto& layer : layers) {
    try {
      layer_landmarks(settings, layer).validate(layer.tokens, layer.dim);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(describe(settings.input, ": /layers/", layer.name, ": ", error.what()));
    }
  }
  return layers;
}

}  // namespace

int run_spectrum(const Invocation& invocation) {
  const auto options = spectrum_options();
  po::variables_map values;
  if (!parse_options(invocation, "[--input FILE] [options]", options, {}, values)) return 0;
  SpectrumSettings settings = parse_settings(values);
  const DumpInfo dump = inspect_dump(settings.input);
  const std::vector<DumpLayer> layers = select_layers(dump, settings);
  const int threads = apply_threads(values);
  require(mpi_size() == 1,
          "spectrum runs in one process (--threads evaluates heads at once): start it without "
          "an MPI launcher");

  AtomicFile file(settings.output, {"spectrum", "nystrom-results", "spectra"});
  write_results_header(file.get(),
                       make_provenance(invocation.command_line, threads,
                                       std::filesystem::weakly_canonical(settings.input).string()));
  write_attribute(file.get(), "memory_budget", std::vector<double>{settings.evaluation.memory_budget});
  write_attribute(file.get(), "device", to_string(settings.evaluation.device));
  write_attribute(file.get(), "reference", std::string(settings.model_reference ? "model" : "kernel"));
  write_attribute(file.get(), "attention_reference", attention_reference(layers, settings.model_reference));
  if (!settings.quiet)
    print_attention_reference(std::cerr, "nystrom spectrum", layers, settings.model_reference);
  if (settings.precision == "float")
    compute_and_write<float>(dump, layers, settings, file);
  else
    compute_and_write<double>(dump, layers, settings, file);
  file.commit();
  return 0;
}

}  // namespace nystrom::cli
