// End-to-end tests of `nystrom bench` on tiny sizes: every table holds one row per timed point with every
// column; speedups and GEMM fractions are the stated ratios of values in the same file; exact attention
// recovered where the approximation is exact (m = N); the GEMM reference and the matrix-free matvec tables;
// bad input (exit status 2, a message naming the value, no output file, an existing file left
// byte-identical);
// `--device cuda` (GPU rows where a CUDA device is present, the reason for exit 2 elsewhere).
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "cli_test_support.hpp"
#include "nystrom/backend.hpp"
#include "options.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

using cli::ColumnType;

/// The contract of each table (bench.cpp, read by notebooks/nystrom_results.py): column names and types.
const std::vector<cli::Column> bench_columns = {{"method", ColumnType::text, true},
                                                {"n", ColumnType::int64, true},
                                                {"d", ColumnType::int64, true},
                                                {"dv", ColumnType::int64, true},
                                                {"precision", ColumnType::text, true},
                                                {"threads", ColumnType::int64, true},
                                                {"landmarks", ColumnType::int64, true},
                                                {"strategy", ColumnType::text, true},
                                                {"features", ColumnType::int64, true},
                                                {"projected", ColumnType::int64, true},
                                                {"seconds", ColumnType::float64, false},
                                                {"flops", ColumnType::float64, false},
                                                {"gflops", ColumnType::float64, false},
                                                {"speedup_vs_exact", ColumnType::float64, false},
                                                {"output_relative_error", ColumnType::float64, false},
                                                {"blas_core", ColumnType::text, false},
                                                {"gemm_fraction", ColumnType::float64, false},
                                                {"device", ColumnType::text, true}};
const std::vector<cli::Column> step_columns = {
    {"step", ColumnType::text, true},        {"step_index", ColumnType::int64, true},
    {"n", ColumnType::int64, true},          {"d", ColumnType::int64, true},
    {"precision", ColumnType::text, true},   {"threads", ColumnType::int64, true},
    {"landmarks", ColumnType::int64, true},  {"strategy", ColumnType::text, true},
    {"seconds", ColumnType::float64, false}, {"fraction", ColumnType::float64, false},
    {"blas_core", ColumnType::text, false}};
const std::vector<cli::Column> gemm_columns = {
    {"device", ColumnType::text, true},      {"precision", ColumnType::text, true},
    {"threads", ColumnType::int64, true},    {"n", ColumnType::int64, true},
    {"seconds", ColumnType::float64, false}, {"gflops", ColumnType::float64, false},
    {"blas_core", ColumnType::text, false}};
const std::vector<cli::Column> matvec_columns = {
    {"device", ColumnType::text, true},     {"precision", ColumnType::text, true},
    {"threads", ColumnType::int64, true},   {"n", ColumnType::int64, true},
    {"d", ColumnType::int64, true},         {"seconds", ColumnType::float64, false},
    {"gflops", ColumnType::float64, false}, {"gemm_fraction", ColumnType::float64, false},
    {"blas_core", ColumnType::text, false}};
const std::vector<cli::Column> batch_columns = {{"device", ColumnType::text, true},
                                                {"precision", ColumnType::text, true},
                                                {"threads", ColumnType::int64, true},
                                                {"batch", ColumnType::int64, true},
                                                {"heads", ColumnType::int64, true},
                                                {"n", ColumnType::int64, true},
                                                {"d", ColumnType::int64, true},
                                                {"method", ColumnType::text, true},
                                                {"landmarks", ColumnType::int64, true},
                                                {"features", ColumnType::int64, true},
                                                {"projected", ColumnType::int64, true},
                                                {"best_seconds", ColumnType::float64, false},
                                                {"median_seconds", ColumnType::float64, false},
                                                {"copy_seconds", ColumnType::float64, false},
                                                {"speedup_vs_exact", ColumnType::float64, false},
                                                {"heads_per_second", ColumnType::float64, false},
                                                {"output_relative_error", ColumnType::float64, false},
                                                {"blas_core", ColumnType::text, false}};

/// Table `group` of a results file, checked to have exactly `columns` (names and types).
Table read_table(const std::string& path, const std::string& group, const std::vector<cli::Column>& columns) {
  cli::Handle file = cli::open_file(path, false);
  std::set<std::string> expected, stored;
  for (const auto& column : columns) expected.insert(column.name);
  for (const auto& name : cli::list_group(cli::open_group(file.get(), group).get())) stored.insert(name);
  CHECK(stored == expected);
  return {columns, cli::ResultsTable::open(file.get(), group, columns, path).read_rows()};
}

bool has_table(const std::string& path, const std::string& group) {
  return cli::has_link(cli::open_file(path, false).get(), group);
}

std::string file_attribute(const std::string& path, const std::string& name) {
  return cli::read_string_attribute(cli::open_file(path, false).get(), name);
}

/// `nystrom bench` with the given options, on the OpenBLAS core already loaded (no re-execution: the tests
/// run the program in-process), writing `output`.
CliRun run_bench(const std::string& output, std::vector<std::string> options) {
  std::vector<std::string> args = {"bench",         "-o",    output,   "--blas-core", "default",
                                   "--min-seconds", "0.001", "--quiet"};
  args.insert(args.end(), options.begin(), options.end());
  return run_cli(args);
}

/// Where a row was timed: precision and thread count (the key of the GEMM reference rate).
using Context = std::pair<std::string, std::int64_t>;

Context context_of(const Table& table, std::size_t row) {
  return {table.text(row, "precision"), std::int64_t(table.number(row, "threads"))};
}

/// GEMM GFLOP/s per (precision, threads), checking one /bench_gemm row per context on `device` and gflops =
/// 2n³/s.
std::map<Context, double> gemm_rates(const Table& gemm, Index n, const std::string& device = "cpu") {
  std::map<Context, double> rates;
  for (std::size_t r = 0; r < gemm.rows.size(); ++r) {
    CHECK(gemm.text(r, "device") == device);
    CHECK(gemm.number(r, "n") == n);
    CHECK(!gemm.text(r, "blas_core").empty());
    const double seconds = gemm.number(r, "seconds");
    CHECK(seconds > 0);
    CHECK(gemm.number(r, "gflops") == doctest::Approx(2.0 * n * n * n / seconds * 1e-9).epsilon(1e-14));
    CHECK(rates.emplace(context_of(gemm, r), gemm.number(r, "gflops")).second);
  }
  return rates;
}

const std::vector<std::string> all_methods = {
    "exact", "pnp-nystra", "nystromformer", "cur", "symmetric-nystrom", "performer", "linformer"};

/// The columns `landmarks`, `features` and `projected` of each method's rows for --landmarks 8 --features 16
/// --projected 12: m, performer's r and linformer's k each in its own column, 0 elsewhere (as in /sweep).
std::array<double, 3> approximation_size(const std::string& method) {
  if (method == "exact") return {0, 0, 0};
  if (method == "performer") return {0, 16, 0};
  if (method == "linformer") return {0, 0, 12};
  return {8, 0, 0};
}

std::array<double, 3> size_cells(const Table& table, std::size_t row) {
  return {table.number(row, "landmarks"), table.number(row, "features"), table.number(row, "projected")};
}

}  // namespace

TEST_CASE(
    "bench: one row per method × N × precision × threads, with speedups, GEMM fractions and errors from one "
    "file") {
  TempDir dir("bench");
  const auto output = dir / "bench.h5";
  const std::vector<Index> sizes = {64, 128}, thread_counts = {1, 2};
  const auto run =
      run_bench(output, {"--n", "64,128", "--precision", "float,double", "--threads", "1,2", "--method",
                         "exact,pnp-nystra,nystromformer,cur,symmetric-nystrom,"
                         "performer,linformer",
                         "--landmarks", "8", "--features", "16", "--projected", "12", "--gemm-n", "64",
                         "--matvec-n", "256,300"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(file_attribute(output, "device") == "cpu");
  CHECK(file_attribute(output, "device_description") == "cpu");
  CHECK(!file_attribute(output, "blas_core").empty());
  CHECK(file_attribute(output, "format") == "nystrom-results");

  const auto gemm_gflops = gemm_rates(read_table(output, "bench_gemm", gemm_columns), 64);
  CHECK(gemm_gflops.size() == 2 * thread_counts.size());

  const Table bench = read_table(output, "bench", bench_columns);
  REQUIRE(bench.rows.size() == all_methods.size() * sizes.size() * 2 * thread_counts.size());
  // exact's seconds per (precision, threads, N): the reference of every speedup in the same file.
  std::map<std::tuple<std::string, std::int64_t, std::int64_t>, double> exact_seconds;
  for (std::size_t r = 0; r < bench.rows.size(); ++r)
    if (bench.text(r, "method") == "exact")
      exact_seconds[{bench.text(r, "precision"), std::int64_t(bench.number(r, "threads")),
                     std::int64_t(bench.number(r, "n"))}] = bench.number(r, "seconds");
  std::set<std::tuple<std::string, std::int64_t, std::string, std::int64_t>> points;
  for (std::size_t r = 0; r < bench.rows.size(); ++r) {
    const auto method = bench.text(r, "method");
    const auto n = std::int64_t(bench.number(r, "n"));
    const auto [precision, threads] = context_of(bench, r);
    CAPTURE(method);
    CAPTURE(n);
    CAPTURE(precision);
    CAPTURE(threads);
    CHECK((precision == "float" || precision == "double"));
    CHECK(points.emplace(method, n, precision, threads).second);
    CHECK(std::find(all_methods.begin(), all_methods.end(), method) != all_methods.end());
    CHECK(bench.number(r, "d") == 64);
    CHECK(bench.number(r, "dv") == 64);
    CHECK(size_cells(bench, r) == approximation_size(method));
    CHECK(bench.text(r, "device") == "cpu");
    CHECK(bench.text(r, "strategy") ==
          (method == "performer" || method == "linformer" || method == "exact" ? "none" : "default"));
    CHECK(!bench.text(r, "blas_core").empty());
    const double seconds = bench.number(r, "seconds"), gflops = bench.number(r, "gflops");
    CHECK(seconds > 0);
    CHECK(bench.number(r, "flops") > 0);
    CHECK(gflops == doctest::Approx(bench.number(r, "flops") / seconds * 1e-9).epsilon(1e-14));
    CHECK(bench.number(r, "gemm_fraction") == gflops / gemm_gflops.at({precision, threads}));
    CHECK(bench.number(r, "speedup_vs_exact") == exact_seconds.at({precision, threads, n}) / seconds);
    const double error = bench.number(r, "output_relative_error");
    if (method == "exact") {
      CHECK(bench.number(r, "flops") == 4.0 * n * n * 64);  // QKᵀ and (·)V, 2 flops per multiply-add
      CHECK(bench.number(r, "speedup_vs_exact") == 1);
      CHECK(error == 0);
    } else {
      CHECK(std::isfinite(error));
      CHECK(error > 0);
    }
    // On Gaussian tokens with m = 8 ≪ N only Nyströmformer's normalized softmax factors stay within the
    // output's norm; the other methods' errors exceed 1 there (m = N recovers exact attention, below).
    if (method == "nystromformer") CHECK(error < 1);
  }

  const Table steps = read_table(output, "bench_steps", step_columns);
  const std::vector<std::string> step_names = {
      "1 landmarks", "2 G_L", "3 G_A", "4 G_U", "5 pinv", "6 G_U V, G_U 1", "7 P, products, normalization"};
  REQUIRE(steps.rows.size() == step_names.size() * sizes.size() * 2 * thread_counts.size());
  for (std::size_t first = 0; first < steps.rows.size(); first += step_names.size()) {
    double fractions = 0;
    for (std::size_t i = 0; i < step_names.size(); ++i) {
      const std::size_t r = first + i;
      CHECK(steps.text(r, "step") == step_names[i]);
      CHECK(steps.number(r, "step_index") == double(i + 1));
      CHECK(steps.number(r, "n") == steps.number(first, "n"));
      CHECK(context_of(steps, r) == context_of(steps, first));
      CHECK(steps.number(r, "landmarks") == 8);
      CHECK(steps.text(r, "strategy") == "default");
      CHECK(steps.number(r, "seconds") > 0);
      fractions += steps.number(r, "fraction");
    }
    CHECK(fractions == doctest::Approx(1).epsilon(1e-12));
  }

  const Table matvec = read_table(output, "bench_matvec", matvec_columns);
  REQUIRE(matvec.rows.size() == 2 * 2 * thread_counts.size());
  std::set<std::tuple<Context, std::int64_t>> matvec_points;
  for (std::size_t r = 0; r < matvec.rows.size(); ++r) {
    const double n = matvec.number(r, "n"), seconds = matvec.number(r, "seconds");
    CHECK((n == 256 || n == 300));
    CHECK(matvec_points.emplace(context_of(matvec, r), std::int64_t(n)).second);
    CHECK(matvec.text(r, "device") == "cpu");
    CHECK(matvec.number(r, "d") == 64);
    CHECK(seconds > 0);
    CHECK(matvec.number(r, "gflops") == doctest::Approx(2 * n * n * 64 / seconds * 1e-9).epsilon(1e-14));
    CHECK(matvec.number(r, "gemm_fraction") ==
          matvec.number(r, "gflops") / gemm_gflops.at(context_of(matvec, r)));
  }
}

TEST_CASE(
    "bench: m = N recovers exact attention, and --gemm-n 0 leaves NaN GEMM fractions and no GEMM table") {
  TempDir dir("bench_exact");
  const auto output = dir / "bench.h5";
  constexpr Index n = 16;
  const auto run =
      run_bench(output, {"--n", "16", "--landmarks", "16", "--precision", "float,double", "--threads", "1",
                         "--method", "pnp-nystra,cur", "--gemm-n", "0", "--steps", "0"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK_FALSE(has_table(output, "bench_gemm"));
  CHECK_FALSE(has_table(output, "bench_matvec"));
  CHECK(read_table(output, "bench_steps", step_columns).rows.empty());
  const Table bench = read_table(output, "bench", bench_columns);
  REQUIRE(bench.rows.size() == 2 * 2);  // exact is timed for the speedups but not listed
  for (std::size_t r = 0; r < bench.rows.size(); ++r) {
    CAPTURE(bench.text(r, "method"));
    CAPTURE(bench.text(r, "precision"));
    CHECK(bench.text(r, "method") != "exact");
    CHECK(std::isnan(bench.number(r, "gemm_fraction")));
    CHECK(bench.number(r, "speedup_vs_exact") > 0);
    // With every token a landmark, G_A = G and Ĝ = G G⁺ G = G: the error is rounding amplified by the
    // conditioning of the 16×16 core (at most 1e3 here).
    const double eps_tolerance =
        bench.text(r, "precision") == "float" ? tolerance<float>(n) : tolerance<double>(n);
    CHECK(bench.number(r, "output_relative_error") < 1e3 * eps_tolerance);
  }
}

TEST_CASE("bench --pinv, --pinv-iters: every method with a pseudoinverse takes them, and the file says so") {
  TempDir dir("bench_pinv");
  const std::vector<std::string> common = {
      "--n",      "16",        "--landmarks", "16",       "--precision",
      "double",   "--threads", "1",           "--method", "pnp-nystra,nystromformer",
      "--gemm-n", "0",         "--steps",     "0"};
  const auto errors = [&](const std::string& name, std::vector<std::string> options) {
    options.insert(options.begin(), common.begin(), common.end());
    const auto output = dir / name;
    const auto run = run_bench(output, options);
    REQUIRE_MESSAGE(run.status == 0, run.err);
    const Table bench = read_table(output, "bench", bench_columns);
    REQUIRE(bench.rows.size() == 2);
    return std::pair{output, std::vector{bench.number(0, "output_relative_error"),
                                         bench.number(1, "output_relative_error")}};
  };
  // m = N: the exact pseudoinverse recovers exact attention (Corollary 2.2), one Razavi iteration from
  // Z₀ = αAᵀ does not.
  const auto [exact_file, exact] = errors("exact.h5", {"--pinv", "exact"});
  const auto [razavi_file, razavi] = errors("razavi.h5", {"--pinv", "razavi", "--pinv-iters", "1"});
  const auto [default_file, defaults] = errors("default.h5", {});
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    CHECK(exact[r] < 1e3 * tolerance<double>(16));
    CHECK(razavi[r] > 1e-3);
  }
  CHECK(defaults[0] == exact[0]);  // pnp-nystra's own: exact
  CHECK(defaults[1] != exact[1]);  // nystromformer's own: razavi, 6 iterations
  const auto iterations = [](const std::string& path) {
    return cli::read_numeric_attribute(cli::open_file(path, false).get(), "pinv_iters");
  };
  CHECK(file_attribute(exact_file, "pinv") == "exact");
  CHECK(file_attribute(razavi_file, "pinv") == "razavi");
  CHECK(iterations(razavi_file) == std::vector<double>{1});
  CHECK(file_attribute(default_file, "pinv") == "default");
  CHECK(iterations(default_file) == std::vector<double>{0});
}

TEST_CASE(
    "bench --batch: one /bench_batch row per shape × method × precision × threads, exact error 0, m = N "
    "recovers exact attention") {
  TempDir dir("bench_batch");
  const auto output = dir / "bench.h5";
  // Without --n only the batches are timed; m = 16 = N of the second shape makes its PnP-Nystra exact.
  const auto run = run_bench(
      output, {"--batch", "2x3x32x8,1x2x16x4", "--precision", "float,double", "--threads", "1,2", "--method",
               "exact,pnp-nystra,performer", "--landmarks", "16", "--features", "16", "--gemm-n", "0"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(read_table(output, "bench", bench_columns).rows.empty());
  CHECK(read_table(output, "bench_steps", step_columns).rows.empty());
  const Table batch = read_table(output, "bench_batch", batch_columns);
  REQUIRE(batch.rows.size() == 2 * 3 * 2 * 2);
  using Shape = std::array<std::int64_t, 4>;
  std::map<std::tuple<Shape, std::string, std::int64_t>, double> exact_seconds;
  for (std::size_t r = 0; r < batch.rows.size(); ++r)
    if (batch.text(r, "method") == "exact")
      exact_seconds[{Shape{std::int64_t(batch.number(r, "batch")), std::int64_t(batch.number(r, "heads")),
                           std::int64_t(batch.number(r, "n")), std::int64_t(batch.number(r, "d"))},
                     batch.text(r, "precision"), std::int64_t(batch.number(r, "threads"))}] =
          batch.number(r, "best_seconds");
  std::set<std::tuple<Shape, std::string, std::string, std::int64_t>> points;
  for (std::size_t r = 0; r < batch.rows.size(); ++r) {
    const Shape shape = {std::int64_t(batch.number(r, "batch")), std::int64_t(batch.number(r, "heads")),
                         std::int64_t(batch.number(r, "n")), std::int64_t(batch.number(r, "d"))};
    const auto method = batch.text(r, "method");
    const auto [precision, threads] = context_of(batch, r);
    CAPTURE(method);
    CAPTURE(shape[2]);
    CAPTURE(precision);
    CAPTURE(threads);
    CHECK((shape == Shape{2, 3, 32, 8} || shape == Shape{1, 2, 16, 4}));
    CHECK((threads == 1 || threads == 2));
    CHECK(points.emplace(shape, method, precision, threads).second);
    CHECK(batch.text(r, "device") == "cpu");
    CHECK(!batch.text(r, "blas_core").empty());
    const std::array<double, 3> size = {method == "pnp-nystra" ? 16.0 : 0.0,
                                        method == "performer" ? 16.0 : 0.0, 0};
    CHECK(size_cells(batch, r) == size);
    const double best = batch.number(r, "best_seconds");
    CHECK(best > 0);
    CHECK(batch.number(r, "median_seconds") >= best);
    CHECK(batch.number(r, "copy_seconds") == 0);  // host memory: no copies on the CPU
    CHECK(batch.number(r, "heads_per_second") == double(shape[0] * shape[1]) / best);
    CHECK(batch.number(r, "speedup_vs_exact") == exact_seconds.at({shape, precision, threads}) / best);
    const double error = batch.number(r, "output_relative_error");
    const double eps_tolerance = precision == "float" ? tolerance<float>(16) : tolerance<double>(16);
    if (method == "exact") {
      CHECK(error == 0);
    } else if (method == "pnp-nystra" && shape[2] == 16) {
      // Every token a landmark: Ĝ = G G⁺ G = G, up to rounding amplified by the 16×16 core's conditioning.
      CHECK(error < 1e3 * eps_tolerance);
    } else {
      CHECK(std::isfinite(error));
      CHECK(error > 1e3 * eps_tolerance);
    }
  }
}

TEST_CASE("bench: bad options exit 2 naming the value, write nothing and leave an existing file intact") {
  TempDir dir("bench_bad");
  const auto existing = dir / "existing.h5";
  REQUIRE(run_bench(existing, {"--n", "16", "--precision", "double", "--threads", "1", "--method", "exact",
                               "--gemm-n", "0"})
              .status == 0);
  const auto before = file_bytes(existing);
  // Options of each case, then the texts its message must contain. Every case fails before any timing.
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"--n", "16", "--method", "exact,bogus"}, {"--method", "bogus"}},
      {{"--n", "16", "--methods", "exact,bogus"}, {"--method", "bogus"}},
      {{"--n", "16", "--precision", "float,float16"}, {"--precision", "float16"}},
      {{"--n", "16", "--dtype", "float32,float16"}, {"--precision", "float16"}},
      {{"--n", "16", "--precision", "float", "--dtype", "float32"}, {"--precision and --dtype"}},
      {{"--n", "16", "--threads", "1", "--threads-list", "2"}, {"--threads and --threads-list"}},
      {{"--n", "64,32", "--landmarks", "40"}, {"--landmarks = 40", "--n = 32"}},
      {{"--n", "0"}, {"--n", "0"}},
      {{"--n", "16", "--threads", "1,-1"}, {"--threads", "-1"}},
      {{"--n", "16", "--gemm-n", "-1"}, {"--gemm-n = -1"}},
      {{"--n", "16", "--matvec-n", "256,0"}, {"--matvec-n", "0"}},
      {{"--n", "16", "--d", "0"}, {"--d = 0"}},
      {{"--n", "16", "--pinv", "bogus"}, {"--pinv", "bogus"}},
      {{"--n", "16", "--pinv", "exact,razavi"}, {"--pinv", "'exact,razavi'"}},
      {{"--n", "16", "--pinv-iters", "-1"}, {"--pinv-iters", "-1"}},
      {{"--n", "16", "--pinv-iters", "3", "--iterations", "2"}, {"--pinv-iters and --iterations"}},
      {{"--n", "16", "--device", "gpu"}, {"--device", "gpu"}},
      {{"--batch-shapes", "2x2x64"}, {"--batch-shapes", "'2x2x64'"}},
      {{"--batch-shapes", "2x2x64x16,2x0x64x16"}, {"--batch-shapes", "'2x0x64x16'"}},
      {{"--batch-shapes", "2x2x64x16x"}, {"--batch-shapes", "'2x2x64x16x'"}},
      {{"--batch-shapes", "2xax64x16"}, {"--batch-shapes", "'2xax64x16'"}},
      {{"--batch", "1x1x8x4,"}, {"--batch-shapes", "empty item"}},
      {{"--batch-shapes", "2x2x8x16", "--landmarks", "16"}, {"--landmarks = 16", "--batch-shapes N = 8"}},
  };
  for (const auto& [options, named] : cases) {
    CAPTURE(cli::join(options, " "));
    for (const auto& output : {dir / "new.h5", existing}) {
      const auto run = run_bench(output, options);
      CHECK(run.status == 2);
      for (const auto& text : named) CHECK_MESSAGE(run.err.find(text) != std::string::npos, run.err);
    }
    CHECK_FALSE(fs::exists(dir / "new.h5"));
    CHECK(file_bytes(existing) == before);
  }
  // A time limit of inf never ended the repeats of a point.
  const auto endless = run_cli(
      {"bench", "--output", dir / "new.h5", "--n", "16", "--min-seconds", "inf", "--blas-core", "default"});
  CHECK(endless.status == 2);
  CHECK_MESSAGE(endless.err.find("option --min-seconds: 'inf' is not a finite number") != std::string::npos,
                endless.err);
  CHECK_FALSE(fs::exists(dir / "new.h5"));
  // OpenBLAS falls back to another core for a name it does not know; the bench was then timed on it. The
  // program re-executes itself under the core asked for, so it runs as a process of its own.
  const auto unknown_core = run_program({"bench", "--output", dir / "new.h5", "--n", "16", "--method",
                                         "exact", "--quiet", "--blas-core", "NoSuchCore"});
  CHECK(unknown_core.status == 2);
  CHECK_MESSAGE(unknown_core.err.find("--blas-core NoSuchCore") != std::string::npos, unknown_core.err);
  CHECK_FALSE(fs::exists(dir / "new.h5"));
}

TEST_CASE(
    "bench --device cuda: exact and pnp-nystra rows on a GPU, and without one exit 2 naming the reason") {
  TempDir dir("bench_cuda");
  const auto output = dir / "bench.h5";
  if (!cuda_available()) {
    const auto run = run_bench(output, {"--device", "cuda", "--n", "64"});
    CHECK(run.status == 2);
    CHECK_MESSAGE(
        run.err.find(cuda_compiled() ? "--device cuda: no CUDA device found"
                                     : "--device cuda: this build has no CUDA backend") != std::string::npos,
        run.err);
    CHECK_FALSE(fs::exists(output));
    return;
  }
  const auto cpu_only =
      run_bench(output, {"--device", "cuda", "--n", "64", "--method", "exact,performer,cur"});
  CHECK(cpu_only.status == 2);
  CHECK_MESSAGE(cpu_only.err.find("--method: performer, cur run on the CPU only") != std::string::npos,
                cpu_only.err);
  CHECK_FALSE(fs::exists(output));

  // The thread list does not apply on the GPU; the default methods there are exact and pnp-nystra; N = m = 16
  // recovers exact attention (G_A = G), so the GPU's PnP-Nystra error is rounding only.
  constexpr Index n = 16;
  const auto run =
      run_bench(output, {"--device", "cuda", "--n", "16,64", "--landmarks", "16", "--precision",
                         "float,double", "--threads", "1,2", "--gemm-n", "64", "--matvec-n", "256"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  CHECK(file_attribute(output, "device") == "cuda");
  CHECK(file_attribute(output, "device_description") != "cpu");
  CHECK(read_table(output, "bench_steps", step_columns).rows.empty());
  const auto gemm_gflops = gemm_rates(read_table(output, "bench_gemm", gemm_columns), 64, "cuda");
  CHECK(gemm_gflops.size() == 2);
  const Table bench = read_table(output, "bench", bench_columns);
  REQUIRE(bench.rows.size() == 2 * 2 * 2);
  for (std::size_t r = 0; r < bench.rows.size(); ++r) {
    const auto method = bench.text(r, "method");
    CAPTURE(method);
    CHECK((method == "exact" || method == "pnp-nystra"));
    CHECK(bench.text(r, "device") == "cuda");
    CHECK(bench.text(r, "blas_core") == "cuBLAS");
    CHECK(bench.number(r, "threads") == 1);
    CHECK(bench.number(r, "seconds") > 0);
    CHECK(bench.number(r, "gemm_fraction") ==
          bench.number(r, "gflops") / gemm_gflops.at(context_of(bench, r)));
    const double error = bench.number(r, "output_relative_error");
    if (method == "exact") CHECK(error == 0);
    if (method == "pnp-nystra" && bench.number(r, "n") == n) {
      const double eps_tolerance =
          bench.text(r, "precision") == "float" ? tolerance<float>(n) : tolerance<double>(n);
      CHECK(error < 1e3 * eps_tolerance);
    }
  }
  const Table matvec = read_table(output, "bench_matvec", matvec_columns);
  REQUIRE(matvec.rows.size() == 2);
  for (std::size_t r = 0; r < matvec.rows.size(); ++r) {
    CHECK(matvec.text(r, "device") == "cuda");
    CHECK(matvec.number(r, "seconds") > 0);
    CHECK(matvec.number(r, "gemm_fraction") ==
          matvec.number(r, "gflops") / gemm_gflops.at(context_of(matvec, r)));
  }
}

TEST_CASE("bench: Linformer's k and Performer's r may exceed N as in the sweep, landmarks may not") {
  TempDir dir("bench_sizes");
  const auto output = dir / "bench.h5";
  const auto run = run_bench(
      output, {"--n", "16", "--precision", "double", "--threads", "1", "--method", "linformer,performer",
               "--projected", "24", "--features", "40", "--gemm-n", "0", "--steps", "0"});
  REQUIRE_MESSAGE(run.status == 0, run.err);
  const Table bench = read_table(output, "bench", bench_columns);
  REQUIRE(bench.rows.size() == 2);
  const std::array<double, 3> linformer = {0, 0, 24}, performer = {0, 40, 0};
  CHECK(size_cells(bench, 0) == linformer);
  CHECK(size_cells(bench, 1) == performer);
  for (std::size_t r = 0; r < 2; ++r) CHECK(std::isfinite(bench.number(r, "output_relative_error")));
  const auto landmarks = run_bench(dir / "refused.h5", {"--n", "16", "--method", "cur", "--landmarks", "17"});
  CHECK(landmarks.status == 2);
  CHECK_MESSAGE(
      landmarks.err.find("--landmarks = 17 exceeds the smallest --n = 16 (method cur)") != std::string::npos,
      landmarks.err);
}

TEST_CASE(
    "bench: the deprecated spellings --dtype, --threads-list, --methods give the rows of --precision, "
    "--threads, --method") {
  TempDir dir("bench_aliases");
  const std::vector<std::string> common = {"--n",         "32", "--landmarks", "8", "--features", "8",
                                           "--projected", "8",  "--gemm-n",    "0", "--steps",    "0"};
  // The current names, and the old ones (float32 = float, float64 = double).
  auto current = common, deprecated = common;
  current.insert(current.end(), {"--precision", "float,double", "--threads", "1", "--method",
                                 "pnp-nystra,performer,linformer"});
  deprecated.insert(deprecated.end(), {"--dtype", "float32,float64", "--threads-list", "1", "--methods",
                                       "pnp-nystra,performer,linformer"});
  const auto now = dir / "current.h5", old = dir / "deprecated.h5";
  const auto run_now = run_bench(now, current);
  REQUIRE_MESSAGE(run_now.status == 0, run_now.err);
  const auto run_old = run_bench(old, deprecated);
  REQUIRE_MESSAGE(run_old.status == 0, run_old.err);
  const Table a = read_table(now, "bench", bench_columns), b = read_table(old, "bench", bench_columns);
  REQUIRE(a.rows.size() == 3 * 2);
  REQUIRE(b.rows.size() == a.rows.size());
  for (std::size_t r = 0; r < a.rows.size(); ++r) {
    CAPTURE(a.text(r, "method"));
    CHECK(a.text(r, "precision") == (r < 3 ? "float" : "double"));
    CHECK(b.text(r, "precision") == a.text(r, "precision"));
    CHECK(b.text(r, "method") == a.text(r, "method"));
    CHECK(b.number(r, "threads") == 1);
    CHECK(a.number(r, "threads") == 1);
    CHECK(size_cells(b, r) == size_cells(a, r));
    // Same seeded inputs and arithmetic: the same output error.
    CHECK(b.number(r, "output_relative_error") == a.number(r, "output_relative_error"));
  }
  const std::array<double, 3> performer = {0, 8, 0}, linformer = {0, 0, 8}, pnp = {8, 0, 0};
  CHECK(size_cells(a, 0) == pnp);
  CHECK(size_cells(a, 1) == performer);
  CHECK(size_cells(a, 2) == linformer);
  CHECK(cli::read_numeric_attribute(cli::open_file(now, false).get(), "format_version") ==
        std::vector<double>{4});
}

TEST_CASE(
    "bench --strategy: pnp-nystra rows and the step table use the strategy, step 1 times its selection") {
  TempDir dir("bench_strategy");
  const auto output = dir / "bench.h5";
  const auto run = run_cli({"bench",
                            "--n",
                            "128",
                            "--d",
                            "16",
                            "--dv",
                            "8",
                            "--landmarks",
                            "8",
                            "--strategy",
                            "cross",
                            "--method",
                            "exact,pnp-nystra",
                            "--precision",
                            "double",
                            "--threads",
                            "1",
                            "--gemm-n",
                            "0",
                            "--min-seconds",
                            "0.001",
                            "--blas-core",
                            "default",
                            "-q",
                            "-o",
                            output});
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  const Table bench = read_table(output, "bench", bench_columns);
  REQUIRE(bench.rows.size() == 2);
  CHECK(bench.text(1, "method") == "pnp-nystra");
  CHECK(bench.text(1, "strategy") == "cross");
  CHECK(bench.number(1, "output_relative_error") > 0);
  const Table steps = read_table(output, "bench_steps", step_columns);
  REQUIRE(steps.rows.size() == 7);
  for (std::size_t r = 0; r < steps.rows.size(); ++r) CHECK(steps.text(r, "strategy") == "cross");
  const auto bad = run_cli({"bench", "--n", "128", "--strategy", "sideways", "-q", "-o", dir / "bad.h5"});
  CHECK(bad.status == 2);
  CHECK(bad.err.find("sideways") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "bad.h5"));
}
