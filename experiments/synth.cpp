// `nystrom synth`: seeded synthetic attention dumps in the docs/formats.md §1 layout. Random numbers come
// from SplitMix64 with Box–Muller normals, so a seed gives the same file on every platform and standard
// library.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <numbers>

#include "atomic_files.hpp"
#include "dumps.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/landmarks.hpp"
#include "subcommands.hpp"

namespace nystrom::cli {

namespace {

/// The generators of `nystrom synth --kind`.
enum class SynthKind { gaussian, low_rank, window, heavy_tailed, block_constant };

constexpr std::array synth_kind_names = {
    std::pair{SynthKind::gaussian, "gaussian"}, std::pair{SynthKind::low_rank, "low-rank"},
    std::pair{SynthKind::window, "window"}, std::pair{SynthKind::heavy_tailed, "heavy-tailed"},
    std::pair{SynthKind::block_constant, "block-constant"}};

const char* to_string(SynthKind kind) {
  for (const auto& [value, text] : synth_kind_names)
    if (value == kind) return text;
  throw std::logic_error("synth kind");
}

SynthKind synth_kind_from_string(const std::string& name) {
  for (const auto& [kind, text] : synth_kind_names)
    if (name == text) return kind;
  throw std::invalid_argument(describe(
      "unknown kind '", name, "' (expected gaussian, low-rank, window, heavy-tailed or block-constant)"));
}

/// SplitMix64 (Steele, Lea & Flood 2014) with Box–Muller normals: portable, reproducible streams.
class Random {
 public:
  explicit Random(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  /// Uniform in (0, 1).
  double uniform() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(2.0 * std::numbers::pi * uniform());
  }
  /// Student-t with `dof` degrees of freedom: Z / sqrt(χ²_ν / ν), with χ²_ν the sum of ν squared normals up
  /// to ν = 32 (the values of earlier files), else 2·Gamma(ν/2), whose cost does not grow with ν.
  double student_t(int dof) {
    double chi2 = 0;
    if (dof <= 32)
      for (int i = 0; i < dof; ++i) chi2 += std::pow(normal(), 2);
    else
      chi2 = 2 * gamma(0.5 * dof);
    return normal() / std::sqrt(chi2 / dof);
  }
  /// Gamma(shape, 1) for shape ≥ 1: Marsaglia & Tsang (2000), "A simple method for generating gamma
  /// variables", ACM TOMS 26(3), by rejection from a transformed normal.
  double gamma(double shape) {
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      const double x = normal(), v = std::pow(1 + c * x, 3);
      if (v > 0 && std::log(uniform()) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
  }
  Matrix<double> normal_matrix(Index rows, Index cols) {
    Matrix<double> m(rows, cols);
    for (Index j = 0; j < cols; ++j)
      for (Index i = 0; i < rows; ++i) m(i, j) = normal();
    return m;
  }

 private:
  std::uint64_t state_;
};

/// Settings of one synthetic dump.
struct SynthSpec {
  std::vector<SynthKind> kinds;  ///< cycled over the layers
  Index layers = 2, batch = 1, heads = 4, tokens = 256, dim = 64, value_dim = 64;
  Index rank = 8;                 ///< low-rank: rank of Q and K
  double noise = 0.01;            ///< low-rank and window: additive Gaussian noise level
  int dof = 3;                    ///< heavy-tailed: Student-t degrees of freedom
  Index blocks = 8;               ///< block-constant: number of constant token blocks
  std::array<Index, 2> window{};  ///< window: the h×w token grid (default: square)
  std::uint64_t seed = 0;
  bool with_attention = false;
};

/// Q (or K) of one head, N×d, for one kind.
Matrix<double> generate_tokens(SynthKind kind, const SynthSpec& spec, Random& random) {
  const Index n = spec.tokens, d = spec.dim;
  switch (kind) {
    case SynthKind::gaussian:
      return random.normal_matrix(n, d);
    case SynthKind::low_rank: {
      const Matrix<double> low = random.normal_matrix(n, spec.rank) * random.normal_matrix(spec.rank, d);
      return low / std::sqrt(double(spec.rank)) + spec.noise * random.normal_matrix(n, d);
    }
    case SynthKind::window: {
      // Smooth fields on the h×w grid: per channel, a sum of three low-frequency plane waves plus noise.
      const auto [h, w] = spec.window;
      Matrix<double> x(n, d);
      for (Index c = 0; c < d; ++c) {
        std::array<double, 9> wave{};
        for (auto& value : wave) value = random.normal();
        for (Index r = 0; r < h; ++r)
          for (Index col = 0; col < w; ++col) {
            double field = 0;
            for (int j = 0; j < 3; ++j)
              field += wave[3 * j] *
                       std::cos(2.0 * std::numbers::pi *
                                    (std::fmod(std::abs(wave[3 * j + 1]), 2.0) * double(r) / double(h) +
                                     std::fmod(std::abs(wave[3 * j + 2]), 2.0) * double(col) / double(w)) +
                                double(j));
            x(r * w + col, c) = field / std::sqrt(1.5) + spec.noise * random.normal();
          }
      }
      return x;
    }
    case SynthKind::heavy_tailed: {
      Matrix<double> x(n, d);
      for (Index j = 0; j < d; ++j)
        for (Index i = 0; i < n; ++i) x(i, j) = random.student_t(spec.dof);
      return x;
    }
    case SynthKind::block_constant: {
      // Blocks follow the segment-means partition (docs/mathematics.md §5), so m = blocks segment-means
      // landmarks are the block values and G̃ has rank ≤ m: Nyström is exact (Corollary 2.2).
      const Matrix<double> values = random.normal_matrix(spec.blocks, d);
      const Index s = n / spec.blocks, short_blocks = (s + 1) * spec.blocks - n;
      Matrix<double> x(n, d);
      Index row = 0;
      for (Index b = 0; b < spec.blocks; ++b)
        for (Index i = 0; i < (b < short_blocks ? s : s + 1); ++i) x.row(row++) = values.row(b);
      return x;
    }
  }
  throw std::logic_error("synth kind");
}

/// Appends the row-major copy of `x` to `out`.
template <class T>
void append_row_major(const Matrix<double>& x, std::vector<T>& out) {
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j) out.push_back(T(x(i, j)));
}

/// The group name of layer `layer` under /layers: 00, 01, …, 10, …
std::string layer_name(Index layer) {
  return describe(layer < 10 ? "0" : "", layer);
}

/// Throws std::invalid_argument naming --noise when `values`, the array `array` of layer `layer` of `kind`,
/// holds a non-finite value: the tokens' noise overflows the precision T (float32 ends near 3.4e38), or
/// their logits overflow attn's softmax. The other generators' values are bounded (|normals| < 9).
template <class T>
void require_finite_layer_array(const std::vector<T>& values, const SynthSpec& spec, Index layer,
                                SynthKind kind, const char* array) {
  require(std::all_of(values.begin(), values.end(), [](T x) { return std::isfinite(x); }),
          "option --noise: ", spec.noise, " is too large for --precision ",
          std::is_same_v<T, float> ? "float" : "double", ": /layers/", layer_name(layer), "/", array,
          " (--kind ", to_string(kind), ") would hold non-finite values; give a smaller --noise");
}

/// Layer `layer` of the dump: every head's arrays, row-major [B, H, N, ·], checked to be finite.
template <class T>
DumpLayerData<T> generate_layer(const SynthSpec& spec, Index layer, bool without_batch_axis) {
  const SynthKind kind = spec.kinds[layer % spec.kinds.size()];
  DumpLayerData<T> data;
  data.batch = spec.batch;
  data.heads = spec.heads;
  data.tokens = spec.tokens;
  data.dim = spec.dim;
  data.value_dim = spec.value_dim;
  data.scale = 1.0 / std::sqrt(double(spec.dim));
  data.without_batch_axis = without_batch_axis;
  if (kind == SynthKind::window) data.window = spec.window;
  // Reserved whole, so that the layer takes the memory require_feasible_size allows for, not up to twice it.
  const Index layer_rows = spec.batch * spec.heads * spec.tokens;
  data.q.reserve(layer_rows * spec.dim);
  data.k.reserve(layer_rows * spec.dim);
  data.v.reserve(layer_rows * spec.value_dim);
  if (spec.with_attention) data.attention.reserve(layer_rows * spec.tokens);
  for (Index b = 0; b < spec.batch; ++b)
    for (Index h = 0; h < spec.heads; ++h) {
      // One independent stream per head: the head's data do not depend on the other heads or layers.
      Random random(spec.seed * 0x100000001B3ULL +
                    std::uint64_t((layer * spec.batch + b) * spec.heads + h) * 7919 + 1);
      random.next();
      const Matrix<double> q = generate_tokens(kind, spec, random), k = generate_tokens(kind, spec, random);
      append_row_major(q, data.q);
      append_row_major(k, data.k);
      const Matrix<double> v = random.normal_matrix(spec.tokens, spec.value_dim);
      if (spec.value_dim > 0) append_row_major(v, data.v);
      if (spec.with_attention)
        append_row_major(attention_matrix<double>(q, k, Kernel::exponential(data.scale)), data.attention);
    }
  for (const auto& [array, values] :
       {std::pair{"q", &data.q}, {"k", &data.k}, {"v", &data.v}, {"attn", &data.attention}})
    require_finite_layer_array(*values, spec, layer, kind, array);
  return data;
}

/// Sizes in gigabytes (10⁹ bytes) for messages.
std::string gigabytes(double bytes) {
  return describe(std::setprecision(3), bytes / 1e9, " GB");
}

/// The bytes available on the file system that will hold `output` (that of its nearest existing directory;
/// unknown, and so unlimited, where it cannot be told).
double free_bytes_for(const std::string& output) {
  std::error_code error;
  auto directory = std::filesystem::absolute(output, error).parent_path();
  while (!std::filesystem::exists(directory, error) && directory.has_relative_path())
    directory = directory.parent_path();
  const auto space = std::filesystem::space(directory, error);
  return error ? INFINITY : double(space.available);
}

/// Refuses (std::invalid_argument naming the options and the size in GB) a dump that cannot be generated:
/// synth holds one layer in memory at a time (its arrays in the precision of `value_bytes`, and one head's
/// in double while it is drawn, with the rank-r factors of `low_rank`), which must fit this machine's
/// physical memory, and writes the whole dump, whose values alone (HDF5's metadata aside) must fit the free
/// space of the output's file system. The sizes are computed in double, which no product of the options
/// overflows (each < 2⁶³, their product < 2³¹⁵ ≪ DBL_MAX); whatever passes is far below 2⁶³ elements, so
/// the Index arithmetic of the generators cannot overflow either.
void require_feasible_size(const SynthSpec& spec, std::size_t value_bytes, bool low_rank,
                           const std::string& output) {
  const double values_per_token =
      2 * double(spec.dim) + double(spec.value_dim) + (spec.with_attention ? double(spec.tokens) : 0.0);
  const double head_values = double(spec.tokens) * values_per_token;
  const double factor_values = low_rank ? double(spec.rank) * (double(spec.tokens) + double(spec.dim)) : 0.0;
  const double layer_values = double(spec.batch) * double(spec.heads) * head_values;
  const std::string options =
      describe("--batch ", spec.batch, ", --heads ", spec.heads, ", --tokens ", spec.tokens, ", --dim ",
               spec.dim, ", --value-dim ", spec.value_dim, low_rank ? describe(", --rank ", spec.rank) : "");
  const std::string values = describe("B·H·N·(2d + dv", spec.with_attention ? " + N for --with-attn" : "",
                                      ") ", value_bytes == sizeof(float) ? "float32" : "float64", " values");
  const double layer_bytes =
      layer_values * double(value_bytes) + (head_values + factor_values) * sizeof(double);
  const double memory = double(::sysconf(_SC_PHYS_PAGES)) * double(::sysconf(_SC_PAGE_SIZE));
  require(layer_bytes <= memory, "options ", options, ": a layer (", values,
          low_rank ? ", and a head's rank-r factors" : "", ") takes ", gigabytes(layer_bytes),
          " of memory while it is generated, more than this machine's ", gigabytes(memory));
  const double dump_bytes = double(spec.layers) * layer_values * double(value_bytes);
  const double free = free_bytes_for(output);
  require(dump_bytes <= free, "options --layers ", spec.layers, ", ", options, ": the dump (layers·", values,
          ") takes ", gigabytes(dump_bytes), ", more than the ", gigabytes(free), " free for ", output);
}

std::array<Index, 2> parse_window(const std::string& text, Index tokens) {
  if (text.empty()) {
    const auto side = Index(std::llround(std::sqrt(double(tokens))));
    require(side * side == tokens, "option --window: N = ", tokens,
            " is not a square; give the grid as --window HxW");
    return {side, side};
  }
  const auto x = text.find('x');
  require(x != std::string::npos, "option --window: '", text, "' must read HxW, e.g. 16x16");
  const auto h = parse_index_list(text.substr(0, x), "window"),
             w = parse_index_list(text.substr(x + 1), "window");
  require(h.size() == 1 && w.size() == 1 && tokens % w[0] == 0 && h[0] == tokens / w[0],
          "option --window: ", text, " does not cover N = ", tokens, " tokens");
  return {h[0], w[0]};
}

}  // namespace

int run_synth(const Invocation& invocation) {
  po::options_description options("synth options");
  add_common_options(options, true);
  options.add_options()("output,o", po::value<std::string>()->value_name("FILE"),
                        "the dump to write (required)")(
      "kind", po::value<std::string>()->default_value("gaussian"),
      "generator(s), comma-separated and cycled over the layers: gaussian, low-rank, window, heavy-tailed, "
      "block-constant")("layers", po::value<Index>()->default_value(2), "number of layers")(
      "batch", po::value<Index>()->default_value(1), "B, windows per layer")(
      "heads", po::value<Index>()->default_value(4), "H, heads per layer")(
      "tokens,n", po::value<Index>()->default_value(256), "N, tokens per head")(
      "dim,d", po::value<Index>()->default_value(64), "d, query/key dimension")(
      "value-dim", po::value<Index>()->default_value(64), "dv, value dimension (0: no v)")(
      "rank", po::value<Index>()->default_value(8), "low-rank: rank of Q and K")(
      "noise", real_value(0.01), "low-rank, window: Gaussian noise level")(
      "dof", po::value<int>()->default_value(3), "heavy-tailed: Student-t degrees of freedom")(
      "blocks", po::value<Index>()->default_value(8), "block-constant: number of constant token blocks")(
      "window", po::value<std::string>()->default_value(""), "window: token grid HxW (default: square)")(
      "with-attn", po::bool_switch(), "also write attn, the exact softmax attention [B, H, N, N]")(
      "no-batch-axis", po::bool_switch(), "write rank-3 datasets [H, N, d] (needs --batch 1)");
  add_precision_option(options, "float", PrecisionValues::one);
  add_quiet_option(options, "no summary on stderr");
  po::variables_map values;
  if (!parse_options(invocation, "--output FILE [options]", options, {}, values)) return 0;
  require(values.count("output"), "option --output is required");

  SynthSpec spec;
  spec.kinds = parse_enum_list<SynthKind>(values["kind"].as<std::string>(), "kind", synth_kind_from_string);
  spec.layers = values["layers"].as<Index>();
  spec.batch = values["batch"].as<Index>();
  spec.heads = values["heads"].as<Index>();
  spec.tokens = values["tokens"].as<Index>();
  spec.dim = values["dim"].as<Index>();
  spec.value_dim = values["value-dim"].as<Index>();
  spec.rank = values["rank"].as<Index>();
  spec.noise = real_option(values, "noise");
  spec.dof = values["dof"].as<int>();
  spec.blocks = values["blocks"].as<Index>();
  spec.seed = seed_option(values);
  spec.with_attention = values["with-attn"].as<bool>();
  const auto precision = parse_precision(values);
  const bool without_batch_axis = values["no-batch-axis"].as<bool>();
  for (const auto& [name, value] : {std::pair{"layers", spec.layers},
                                    {"batch", spec.batch},
                                    {"heads", spec.heads},
                                    {"tokens", spec.tokens},
                                    {"dim", spec.dim},
                                    {"rank", spec.rank},
                                    {"blocks", spec.blocks}})
    require(value >= 1, "option --", name, ": ", value, " must be >= 1");
  require(spec.value_dim >= 0, "option --value-dim: ", spec.value_dim, " must be >= 0");
  const auto uses = [&](SynthKind kind) {
    return std::find(spec.kinds.begin(), spec.kinds.end(), kind) != spec.kinds.end();
  };
  require(spec.blocks <= spec.tokens || !uses(SynthKind::block_constant), "option --blocks: ", spec.blocks,
          " exceeds N = ", spec.tokens);
  require(spec.noise >= 0 && std::isfinite(spec.noise), "option --noise: ", spec.noise, " must be >= 0");
  require(spec.dof >= 1, "option --dof: ", spec.dof, " must be >= 1");
  require(!without_batch_axis || spec.batch == 1, "option --no-batch-axis needs --batch 1");
  const std::string output = values["output"].as<std::string>();
  require_feasible_size(spec, precision == "float" ? sizeof(float) : sizeof(double),
                        uses(SynthKind::low_rank), output);
  if (uses(SynthKind::window)) spec.window = parse_window(values["window"].as<std::string>(), spec.tokens);
  apply_threads(values);

  AtomicFile file(output, {"synth", "nystrom-dump", "layers", "synthetic: "});
  write_dump_header(file.get(), "synthetic: " + invocation.command_line);
  for (Index layer = 0; layer < spec.layers; ++layer) {
    const std::string name = layer_name(layer);
    if (precision == "float")
      write_dump_layer(file.get(), name, generate_layer<float>(spec, layer, without_batch_axis));
    else
      write_dump_layer(file.get(), name, generate_layer<double>(spec, layer, without_batch_axis));
  }
  file.commit();
  if (!values["quiet"].as<bool>())
    std::cerr << "nystrom synth: wrote " << output << " (" << spec.layers << " layers x "
              << spec.batch * spec.heads << " heads, N = " << spec.tokens << ", d = " << spec.dim << ")\n";
  return 0;
}

}  // namespace nystrom::cli
