// The fuzz suite (ctest -L fuzz): valid but adversarial dumps through `nystrom sweep` (its default grid, and
// a small-m grid over every method) and `nystrom spectrum`. Every run must exit 0, or 2 with a message naming
// m where m exceeds N (a crash by a signal ends the case as failed), and every NaN in /sweep must be
// explained by another column of its row (the table nan_rules). The case "write fuzz dumps" writes the dumps
// once into <build>/fuzz/ (the ctest fixture fuzz_dumps); each "fuzz: ..." case runs `nystrom` on its own
// dumps.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cli_test_support.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

const fs::path dump_dir = fs::path(NYSTROM_BINARY_DIR) / "fuzz";

std::string dump_path(const std::string& name) {
  return (dump_dir / (name + ".h5")).string();
}

// ---------------------------------------------------------------------------------------------------------------
// The rules a results row must follow

/// A column that may hold NaN, and the condition on its row that explains it.
struct NanRule {
  const char* column;
  const char* reason;
  std::function<bool(const Table&, std::size_t)> explains;
};

bool is_text(const Table& t, std::size_t r, const char* column, const std::string& value) {
  return t.text(r, column) == value;
}

/// Why each float64 column of /sweep may be NaN (docs/formats.md §2); any other NaN fails the row.
const std::vector<NanRule>& nan_rules() {
  const auto no_matrix = [](const Table& t, std::size_t r) { return is_text(t, r, "error_matrix", "none"); };
  const auto no_values = [](const Table& t, std::size_t r) { return t.number(r, "dv") == 0; };
  const auto no_terms = [](const Table& t, std::size_t r) { return !is_text(t, r, "method", "pnp-nystra"); };
  const auto not_applying = [](const char* flag) {
    return [flag](const Table& t, std::size_t r) { return t.number(r, flag) == 0; };
  };
  const auto no_finite_error = [=](const Table& t, std::size_t r) {
    return no_matrix(t, r) || std::isnan(t.number(r, "spectral_error"));
  };
  const auto ratio_of = [=](const char* numerator, const char* denominator) {
    return [=](const Table& t, std::size_t r) {
      const double a = t.number(r, numerator), b = t.number(r, denominator);
      return no_matrix(t, r) || std::isnan(a) || std::isnan(b) || (a == 0 && b == 0);
    };
  };
  static const std::vector<NanRule> rules = {
      {"spectral_error", "error_matrix = none (the method implies no matrix)", no_matrix},
      {"relative_spectral_error", "error_matrix = none", no_matrix},
      {"frobenius_error", "error_matrix = none, or matrix_free = 1",
       [=](const Table& t, std::size_t r) { return no_matrix(t, r) || t.number(r, "matrix_free") == 1; }},
      {"output_relative_error", "dv = 0 (no v)", no_values},
      {"output_max_error", "dv = 0", no_values},
      {"output_mean_abs_error", "dv = 0", no_values},
      {"sigma1_ext", "method without landmark terms (not pnp-nystra)", no_terms},
      {"sigma_m1_ext", "method without landmark terms", no_terms},
      {"sigma_m1_margin", "method without landmark terms", no_terms},
      {"sigma_m_core", "method without landmark terms", no_terms},
      {"theorem3_k", "method without landmark terms", no_terms},
      {"bound_ratio", "method without landmark terms, or 0/0 (sigma_m1_ext = sigma_m_core = 0)",
       [=](const Table& t, std::size_t r) {
         return no_terms(t, r) || (t.number(r, "sigma_m1_ext") == 0 && t.number(r, "sigma_m_core") == 0);
       }},
      {"theorem1_bound", "theorem1_applies = 0", not_applying("theorem1_applies")},
      {"theorem2_bound", "theorem2_applies = 0", not_applying("theorem2_applies")},
      {"theorem3_bound", "theorem3_applies = 0", not_applying("theorem3_applies")},
      {"c_emp", "method without landmark terms, or sigma_m1_ext = 0",
       [=](const Table& t, std::size_t r) { return no_terms(t, r) || t.number(r, "sigma_m1_ext") == 0; }},
      {"c_emp_normalized", "method without landmark terms, or sigma_m1_ext = 0",
       [=](const Table& t, std::size_t r) { return no_terms(t, r) || t.number(r, "sigma_m1_ext") == 0; }},
      {"pinv_residual", "pinv = none (the method has no pseudoinverse)",
       [](const Table& t, std::size_t r) { return is_text(t, r, "pinv", "none"); }},
      {"optimal_error", "error_matrix = none", no_matrix},
      {"relative_optimal_error", "error_matrix = none", no_matrix},
      {"optimal_error_lower", "error_matrix = none", no_matrix},
      {"attention_optimal_error", "error_matrix = none", no_matrix},
      {"optimality_ratio", "error_matrix = none, spectral_error NaN, or 0/0",
       ratio_of("spectral_error", "optimal_error")},
      {"optimality_ratio_upper", "error_matrix = none, spectral_error_upper NaN, or 0/0",
       ratio_of("spectral_error_upper", "optimal_error_lower")},
      {"spectral_error_lower", "error_matrix = none or a non-finite approximation", no_finite_error},
      {"spectral_error_upper", "error_matrix = none or a non-finite approximation", no_finite_error},
      {"spectral_error_upper_failure", "error_matrix = none or a non-finite approximation", no_finite_error},
      {"attention_relative_error",
       "error_matrix = none, a non-finite approximation or non-finite output rows",
       [=](const Table& t, std::size_t r) {
         return no_finite_error(t, r) || t.number(r, "nonfinite_output_rows") > 0;
       }},
  };
  return rules;
}

/// Every NaN of every float64 column of `table` is explained by nan_rules; a bound that applies is finite.
void check_nan_rules(const Table& table) {
  REQUIRE_FALSE(table.rows.empty());
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    for (const auto& column : table.columns) {
      if (column.type != cli::ColumnType::float64) continue;
      if (!std::isnan(table.number(r, column.name))) continue;
      const NanRule* rule = nullptr;
      for (const NanRule& candidate : nan_rules())
        if (column.name == candidate.column) rule = &candidate;
      CAPTURE(r);
      CAPTURE(column.name);
      CAPTURE(table.text(r, "method"));
      CAPTURE(table.text(r, "strategy"));
      CAPTURE(table.number(r, "landmarks"));
      CAPTURE(table.text(r, "pinv"));
      CAPTURE(table.text(r, "kernel"));
      REQUIRE_MESSAGE(rule != nullptr, "a NaN in a column that has no rule for it");
      CAPTURE(rule->reason);
      CHECK_MESSAGE(rule->explains(table, r), "a NaN that no column of its row explains");
    }
  }
}

/// Every value of the spectra of `path` is finite (the dense path: every singular value is computed).
void check_spectra(const std::string& path) {
  cli::Handle file = cli::open_file(path, false);
  for (const auto& layer : cli::list_group(cli::open_group(file.get(), "spectra").get())) {
    for (const char* prefix : {"sv_", "decay_", "energy_"}) {
      for (const char* matrix : {"G", "S", "Gext"}) {
        const std::string name = "spectra/" + layer + "/" + prefix + matrix;
        CAPTURE(name);
        for (double value : read_doubles(path, name).values) CHECK(std::isfinite(value));
      }
    }
  }
}

/// A `nystrom` run of a case: exit 0, or 2 with a message naming an m that exceeds N where `m_may_exceed_n`.
/// Returns true when it exited 0 (so its output is there to read).
bool run_ok(const std::vector<std::string>& args, bool m_may_exceed_n) {
  const CliRun run = run_cli(args);
  CAPTURE(run.err);
  if (run.status == 2 && m_may_exceed_n) {
    CHECK(run.err.find("m = ") != std::string::npos);
    CHECK(run.err.find("exceeds") != std::string::npos);
    return false;
  }
  CHECK(run.status == 0);
  return run.status == 0;
}

/// Removes an output and what a run may leave beside it.
std::string fresh_output(const TempDir& dir, const std::string& name) {
  const std::string path = dir / name;
  fs::remove(path);
  fs::remove(path + ".partial");
  return path;
}

/// The small grid: every method, both kernels, the given landmark counts and strategies, every pseudoinverse.
std::vector<std::string> small_grid(const std::string& landmarks, const std::string& strategies) {
  return {"--kernel",
          "exp,laplacian",
          "--method",
          "pnp-nystra,nystromformer,cur,symmetric-nystrom,performer,linformer,exact",
          "--strategy",
          strategies,
          "--landmarks",
          landmarks,
          "--pinv",
          "exact,razavi,newton-schulz",
          "--pinv-iters",
          "2,6",
          "-q"};
}

/// What one dump goes through.
struct Plan {
  std::string landmarks = "1,2,3";                       ///< m of the small grid
  std::string strategies = "segment-means,step,random";  ///< strategies of the small grid
  std::string spectrum_landmarks = "3";                  ///< m of the second spectrum run
  Index n = 0;                                           ///< tokens: the default grids' m may exceed it
};

/// Sweep with the defaults, sweep over the small grid, spectrum with the defaults and with small m; every
/// table follows nan_rules, every spectrum is finite.
void fuzz_dump(const std::string& name, const Plan& plan) {
  CAPTURE(name);
  const std::string input = dump_path(name);
  REQUIRE_MESSAGE(fs::exists(input), "run the fixture test 'write fuzz dumps' first");
  TempDir dir("fuzz_" + name);
  const std::string defaults = fresh_output(dir, "defaults.h5");
  if (run_ok({"sweep", "-i", input, "-o", defaults, "-q"}, plan.n < 64))
    check_nan_rules(read_sweep(defaults));
  std::vector<std::string> args = {"sweep", "-i", input, "-o", fresh_output(dir, "small.h5")};
  const auto grid = small_grid(plan.landmarks, plan.strategies);
  args.insert(args.end(), grid.begin(), grid.end());
  if (run_ok(args, false)) check_nan_rules(read_sweep(dir / "small.h5"));
  const std::string spectrum = fresh_output(dir, "spectrum.h5");
  if (run_ok({"spectrum", "-i", input, "-o", spectrum, "-q"}, plan.n < 16)) check_spectra(spectrum);
  const std::string small_spectrum = fresh_output(dir, "small_spectrum.h5");
  if (run_ok({"spectrum", "-i", input, "-o", small_spectrum, "--landmarks", plan.spectrum_landmarks, "--top",
              "20", "-q"},
             false))
    check_spectra(small_spectrum);
}

// ---------------------------------------------------------------------------------------------------------------
// The dumps

/// One head's tokens and values in double.
struct HeadData {
  Matrix<double> q, k, v;
};

/// Writes a one-layer dump of `heads` in T (docs/formats.md §1) with optional window and prefix_tokens
/// attributes.
template <class T>
void write_dump(const std::string& name, const std::vector<HeadData>& heads, std::array<Index, 2> window = {},
                Index prefix_tokens = 0) {
  cli::DumpLayerData<T> data;
  data.heads = Index(heads.size());
  data.tokens = heads[0].q.rows();
  data.dim = heads[0].q.cols();
  data.value_dim = heads[0].v.cols();
  data.scale = 1 / std::sqrt(double(data.dim));
  data.window = window;
  for (const HeadData& head : heads)
    for (const auto& [source, target] : {std::pair{&head.q, &data.q}, {&head.k, &data.k}, {&head.v, &data.v}})
      for (Index i = 0; i < source->rows(); ++i)
        for (Index j = 0; j < source->cols(); ++j) target->push_back(T((*source)(i, j)));
  cli::AtomicFile file(dump_path(name), test_dump);
  cli::write_dump_header(file.get(), "nystrom fuzz suite: " + name);
  cli::write_dump_layer(file.get(), "00", data);
  if (prefix_tokens > 0) {
    cli::Handle group = cli::open_group(file.get(), "layers/00");
    cli::write_attribute(group.get(), "prefix_tokens", std::vector<std::int64_t>{prefix_tokens});
  }
  file.commit();
}

/// `nystrom synth` with the given options into the dump `name`.
void synth(const std::string& name, std::vector<std::string> options) {
  std::vector<std::string> args = {"synth", "-o", dump_path(name), "--layers", "1"};
  args.insert(args.end(), options.begin(), options.end());
  const CliRun run = run_cli(args);
  REQUIRE_MESSAGE(run.status == 0, run.err);
}

/// The block-constant families: N (odd, even, square and not), d and block counts; 17 seeds each.
struct Family {
  Index n, d, blocks;
};
constexpr Family families[] = {{300, 8, 6}, {197, 3, 5}, {400, 16, 10}};
constexpr int seeds_per_family = 17;

std::string block_constant_name(const Family& family, int seed) {
  return "block_constant_" + std::to_string(family.n) + "_" + std::to_string(seed);
}

/// The rows of `base` each repeated `times` times, in a seeded shuffled order.
Matrix<double> repeated_rows(const Matrix<double>& base, Index times, std::uint64_t seed) {
  std::vector<Index> order;
  for (Index i = 0; i < base.rows() * times; ++i) order.push_back(i % base.rows());
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  Matrix<double> out(Index(order.size()), base.cols());
  for (std::size_t i = 0; i < order.size(); ++i) out.row(Index(i)) = base.row(order[i]);
  return out;
}

/// Tokens of norm in [35, 53], nearly aligned with one direction: with s = 1/4 (d = 16) the logits s·qᵀk lie
/// in about [300, 700], far beyond float's exp range (88.7) and at the edge of double's (709.8).
Matrix<double> huge_aligned_tokens(Index n, Index d, std::uint64_t seed) {
  Matrix<double> x = 0.05 * random_matrix<double>(n, d, seed);
  x.col(0).array() += 1;
  std::mt19937_64 engine(seed + 1);
  std::uniform_real_distribution<double> norm(35, 53);
  for (Index i = 0; i < n; ++i) x.row(i) *= norm(engine) / x.row(i).norm();
  return x;
}

}  // namespace

TEST_CASE("write fuzz dumps") {
  fs::remove_all(dump_dir);
  fs::create_directories(dump_dir);
  for (const Family& family : families)
    for (int seed = 1; seed <= seeds_per_family; ++seed)
      synth(block_constant_name(family, seed),
            {"--kind", "block-constant", "--heads", "1", "--tokens", std::to_string(family.n), "--dim",
             std::to_string(family.d), "--value-dim", "4", "--blocks", std::to_string(family.blocks),
             "--precision", seed % 2 ? "double" : "float", "--seed", std::to_string(seed)});
  const Index n = 64, d = 8;
  const Matrix<double> v = random_matrix<double>(n, 4, 3);
  // All tokens equal: G is the constant exp(s·qᵀk) matrix of rank 1.
  write_dump<double>("all_equal", {{random_matrix<double>(1, d, 1).replicate(n, 1),
                                    random_matrix<double>(1, d, 2).replicate(n, 1), v}});
  // Zero queries (N = 100, not a square): G = 1 1ᵀ.
  write_dump<float>("zero_queries", {{Matrix<double>::Zero(100, d), random_matrix<double>(100, d, 4),
                                      random_matrix<double>(100, 4, 5)}});
  // Every token three times, shuffled (N = 81 = 9², float32).
  write_dump<float>("duplicated", {{repeated_rows(random_matrix<double>(27, d, 6), 3, 7),
                                    repeated_rows(random_matrix<double>(27, d, 8), 3, 9),
                                    random_matrix<double>(81, 4, 10)}});
  // float32 logits s·qᵀk ≈ 300–700 (N = 49 = 7²).
  write_dump<float>("huge_logits", {{huge_aligned_tokens(49, 16, 11), huge_aligned_tokens(49, 16, 13),
                                     random_matrix<double>(49, 4, 15)}});
  // Queries, keys and values around 1e-9 (N = 36 = 6², float32).
  write_dump<float>("tiny_values",
                    {{1e-9 * random_matrix<double>(36, d, 16), 1e-9 * random_matrix<double>(36, d, 17),
                      1e-9 * random_matrix<double>(36, 4, 18)}});
  // A ViT head: one class token and a 14×14 patch window (N = 197).
  write_dump<float>("vit_prefix",
                    {{random_matrix<double>(197, d, 19), random_matrix<double>(197, d, 20),
                      random_matrix<double>(197, 4, 21)}},
                    {14, 14}, 1);
  // N = 2, d = 1, a rectangular 8×32 window, and N = 36 for m = N.
  synth("n2", {"--heads", "2", "--tokens", "2", "--dim", "4", "--value-dim", "3", "--seed", "22"});
  synth("d1", {"--heads", "2", "--tokens", "50", "--dim", "1", "--value-dim", "3", "--seed", "23"});
  synth("window_8x32", {"--kind", "window", "--window", "8x32", "--heads", "2", "--tokens", "256", "--dim",
                        "8", "--value-dim", "4", "--seed", "24"});
  synth("m_equals_n", {"--heads", "2", "--tokens", "36", "--dim", "4", "--value-dim", "3", "--seed", "25"});
  // synth checks --blocks only for block-constant layers.
  const CliRun blocks = run_cli(
      {"synth", "-o", dump_path("bad"), "--kind", "block-constant", "--tokens", "4", "--blocks", "5"});
  CHECK(blocks.status == 2);
  CHECK(blocks.err.find("--blocks: 5 exceeds N = 4") != std::string::npos);
}

TEST_SUITE("fuzz") {
  TEST_CASE("fuzz: block-constant heads: 51 seeds over three N + d + block counts") {
    for (const Family& family : families) {
      for (int seed = 1; seed <= seeds_per_family; ++seed) {
        const std::string name = block_constant_name(family, seed);
        CAPTURE(name);
        const std::string input = dump_path(name), m = std::to_string(family.blocks);
        REQUIRE_MESSAGE(fs::exists(input), "run the fixture test 'write fuzz dumps' first");
        if (seed == 1) {  // the whole plan on one seed per family, small grids on the others
          fuzz_dump(name, {.landmarks = "1," + m, .spectrum_landmarks = m, .n = family.n});
          continue;
        }
        TempDir dir("fuzz_block_constant");
        const std::string output = fresh_output(dir, "small.h5");
        if (run_ok({"sweep", "-i", input, "-o", output, "--kernel", "exp,laplacian", "--strategy",
                    "segment-means,step", "--landmarks", "2," + m, "--pinv", "exact,razavi", "--pinv-iters",
                    "3", "-q"},
                   false))
          check_nan_rules(read_sweep(output));
        const std::string spectrum = fresh_output(dir, "spectrum.h5");
        if (run_ok({"spectrum", "-i", input, "-o", spectrum, "--landmarks", m, "--top", "12", "-q"}, false))
          check_spectra(spectrum);
      }
    }
  }

  TEST_CASE("fuzz: all tokens equal") {
    fuzz_dump("all_equal", {.strategies = "segment-means,window-pool,step,random,cross,softmax-cross,maxvol,"
                                          "rpcholesky,farthest-point,farthest-point-means",
                            .n = 64});
  }

  TEST_CASE("fuzz: zero queries") {
    fuzz_dump("zero_queries", {.n = 100});
  }

  TEST_CASE("fuzz: duplicated tokens") {
    fuzz_dump("duplicated", {.strategies = "segment-means,window-pool,step,random,cross,softmax-cross,maxvol,"
                                           "rpcholesky,farthest-point,farthest-point-means",
                             .n = 81});
  }

  TEST_CASE("fuzz: float32 logits far beyond exp's range") {
    fuzz_dump("huge_logits", {.strategies = "segment-means,window-pool,step,random,cross,softmax-cross,"
                                            "maxvol,rpcholesky,farthest-point,farthest-point-means",
                              .n = 49});
  }

  TEST_CASE("fuzz: values around 1e-9") {
    fuzz_dump("tiny_values", {.strategies = "segment-means,window-pool,step,random,cross,softmax-cross,"
                                            "maxvol,rpcholesky,farthest-point,farthest-point-means",
                              .n = 36});
  }

  TEST_CASE("fuzz: N = 2") {
    fuzz_dump("n2", {.landmarks = "1,2", .spectrum_landmarks = "1", .n = 2});
  }

  TEST_CASE("fuzz: d = 1") {
    fuzz_dump("d1", {.n = 50});
  }

  TEST_CASE("fuzz: ViT head with one prefix token and a 14x14 window (N = 197)") {
    fuzz_dump("vit_prefix", {.landmarks = "2,5,17",
                             .strategies = "segment-means,window-pool,step,random,cross,softmax-cross,maxvol,"
                                           "rpcholesky,farthest-point,farthest-point-means",
                             .n = 197});
  }

  TEST_CASE("fuzz: rectangular 8x32 window") {
    fuzz_dump("window_8x32", {.landmarks = "1,2,16",
                              .strategies = "segment-means,window-pool,step,random,cross,softmax-cross,"
                                            "maxvol,rpcholesky,farthest-point,farthest-point-means",
                              .n = 256});
  }

  TEST_CASE("fuzz: m = N") {
    fuzz_dump("m_equals_n", {.landmarks = "35,36",
                             .strategies = "segment-means,window-pool,step,random,cross,softmax-cross,maxvol,"
                                           "rpcholesky,farthest-point,farthest-point-means",
                             .spectrum_landmarks = "36",
                             .n = 36});
  }
}
