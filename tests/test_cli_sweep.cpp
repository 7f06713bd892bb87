// End-to-end tests of `nystrom sweep` and `nystrom spectrum`: every row recomputed independently from the
// library's dense path (dense Ĝ, full SVDs in double), provenance attributes, exact recovery on
// block-constant tokens, bad options (exit 2, no file, an existing file intact), and an interrupted sweep
// resumed to the same rows as a clean run.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "cli_test_support.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/bounds.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/precision.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// A small dump: 1 layer × 2 heads, N = 40, d = 6, dv = 5, float64.
std::string make_dump(const TempDir& dir, const std::string& kind = "gaussian") {
  const auto path = dir / (kind + ".h5");
  REQUIRE(run_cli({"synth",   "-o",          path,       "--kind", kind,    "--layers", "1",
                   "--heads", "2",           "--tokens", "40",     "--dim", "6",        "--value-dim",
                   "5",       "--precision", "double",   "--seed", "3",     "--blocks", "4"})
              .status == 0);
  return path;
}

const std::vector<std::string> grid = {"--kernel",
                                       "exp,laplacian",
                                       "--lambda",
                                       "3",
                                       "--strategy",
                                       "segment-means,step,random",
                                       "--landmarks",
                                       "4,8",
                                       "--pinv",
                                       "exact,razavi,newton-schulz",
                                       "--pinv-iters",
                                       "3,12",
                                       "-q"};

std::vector<std::string> sweep_args(const std::string& input, const std::string& output,
                                    std::vector<std::string> extra = grid) {
  std::vector<std::string> args = {"sweep", "-i", input, "-o", output, "--seed", "11"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

/// The tables of two sweeps of `point` on `input`: dense (dir/dense.h5) and matrix-free (dir/free.h5, with
/// `matrix_free`), each required to exit 0.
std::pair<Table, Table> dense_and_matrix_free(const TempDir& dir, const std::string& input,
                                              const std::vector<std::string>& point,
                                              const std::vector<std::string>& matrix_free = {
                                                  "--matrix-free"}) {
  auto free_args = sweep_args(input, dir / "free.h5", point);
  free_args.insert(free_args.end(), matrix_free.begin(), matrix_free.end());
  REQUIRE(run_cli(sweep_args(input, dir / "dense.h5", point)).status == 0);
  REQUIRE(run_cli(free_args).status == 0);
  return {read_sweep(dir / "dense.h5"), read_sweep(dir / "free.h5")};
}

double largest_singular_value(const Matrix<double>& a) {
  return Eigen::JacobiSVD<Matrix<double>>(a).singularValues()(0);
}

/// Every row of `a` and `b` is equal, bit for bit, in every column but the wall times.
void check_same_results(const Table& a, const Table& b) {
  REQUIRE(a.rows.size() == b.rows.size());
  REQUIRE(a.columns.size() == b.columns.size());
  for (std::size_t r = 0; r < a.rows.size(); ++r)
    for (const auto& column : a.columns) {
      if (column.name.ends_with("seconds")) continue;  // wall times differ; everything else is deterministic
      CAPTURE(r);
      CAPTURE(column.name);
      const auto& x = a.rows[r][a.index(column.name)];
      const auto& y = b.rows[r][b.index(column.name)];
      if (const auto* d = std::get_if<double>(&x); d && std::isnan(*d))
        CHECK(std::isnan(std::get<double>(y)));
      else
        CHECK(x == y);
    }
}

}  // namespace

TEST_CASE("sweep: every row matches an independent dense recomputation, provenance attributes are present") {
  TempDir dir("sweep");
  const auto input = make_dump(dir);
  const auto output = dir / "out/results.h5";
  const auto run = run_cli(sweep_args(input, output));
  REQUIRE(run.status == 0);
  CHECK_FALSE(fs::exists(output + ".partial"));
  const Table table = read_sweep(output);
  // 2 heads × 2 kernels × 3 strategies × 2 landmark counts × (exact + 2 methods × 2 iteration counts).
  REQUIRE(table.rows.size() == 2 * 2 * 3 * 2 * 5);
  for (const char* column : {"layer",
                             "kernel",
                             "strategy",
                             "pinv",
                             "method",
                             "batch",
                             "head",
                             "n",
                             "d",
                             "landmarks",
                             "pinv_iters",
                             "seed",
                             "kernel_param",
                             "spectral_error",
                             "relative_spectral_error",
                             "frobenius_error",
                             "output_relative_error",
                             "output_max_error",
                             "output_mean_abs_error",
                             "sigma1_ext",
                             "sigma_m1_ext",
                             "sigma_m_core",
                             "bound_ratio",
                             "theorem1_bound",
                             "theorem2_bound",
                             "theorem3_bound",
                             "theorem3_k",
                             "c_emp",
                             "pinv_residual",
                             "seconds",
                             "elapsed_seconds",
                             "features",
                             "projected",
                             "log_shift",
                             "landmark_terms_converged"})
    CHECK_NOTHROW(table.index(column));

  const auto dump = cli::inspect_dump(input);
  const auto heads = cli::read_layer_heads<double>(dump, dump.layers[0]);
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CAPTURE(r);
    const auto& head = heads[Index(table.number(r, "head"))];
    CHECK(table.text(r, "layer") == "00");
    CHECK(table.text(r, "method") == "pnp-nystra");
    CHECK(table.number(r, "seed") == 11);
    CHECK(table.number(r, "n") == 40);
    NystromOptions options;
    options.kernel =
        Kernel{kernel_type_from_string(table.text(r, "kernel")), table.number(r, "kernel_param")};
    if (options.kernel.type == KernelType::exponential)
      CHECK(options.kernel.param == doctest::Approx(1 / std::sqrt(6.0)));
    else
      CHECK(options.kernel.param == 3);
    options.landmarks.strategy = landmark_strategy_from_string(table.text(r, "strategy"));
    options.landmarks.count = Index(table.number(r, "landmarks"));
    options.landmarks.seed = 11;
    options.pinv.method = pinv_method_from_string(table.text(r, "pinv"));
    const int iterations = int(table.number(r, "pinv_iters"));
    CHECK((options.pinv.method == PinvMethod::exact) == (iterations == 0));
    if (iterations) options.pinv.iterations = iterations;
    options.stabilization = stabilization_from_string(table.text(r, "stabilization"));

    // The dense oracle: G, Ĝ from the factors, exact attention, and G̃ from the landmarks, all by full SVDs.
    const Matrix<double> g = options.kernel.block<double>(head.q, head.k);
    const auto factors = generalized_nystrom<double>(head.q, head.k, options);
    const Matrix<double> error = g - factors.dense();
    const double g_norm = largest_singular_value(g);
    const double spectral = largest_singular_value(error);
    const double tol = 1e-9;
    CHECK(table.number(r, "spectral_error") == doctest::Approx(spectral).epsilon(tol).scale(g_norm));
    CHECK(table.number(r, "relative_spectral_error") ==
          doctest::Approx(spectral / g_norm).epsilon(tol).scale(1));
    CHECK(table.number(r, "frobenius_error") == doctest::Approx(error.norm()).epsilon(tol).scale(g_norm));
    const Matrix<double> exact = attention_matrix<double>(head.q, head.k, options.kernel) * head.v;
    const Matrix<double> approximate = nystrom_attention<double>(factors, head.v);
    CHECK(table.number(r, "output_relative_error") ==
          doctest::Approx((exact - approximate).norm() / exact.norm()).epsilon(1e-7).scale(1e-12));
    CHECK(table.number(r, "output_max_error") ==
          doctest::Approx((exact - approximate).cwiseAbs().maxCoeff()).epsilon(1e-7).scale(1e-12));
    CHECK(table.number(r, "output_mean_abs_error") ==
          doctest::Approx((exact - approximate).cwiseAbs().mean()).epsilon(1e-7).scale(1e-12));
    const auto& marks = factors.landmarks;
    const Index m = marks.q.rows();
    Matrix<double> q_ext(m + 40, 6), k_ext(m + 40, 6);
    q_ext << marks.q, head.q;
    k_ext << marks.k, head.k;
    const Vector<double> sigma_ext =
        Eigen::JacobiSVD<Matrix<double>>(options.kernel.block<double>(q_ext, k_ext)).singularValues();
    const Vector<double> sigma_core =
        Eigen::JacobiSVD<Matrix<double>>(options.kernel.block<double>(marks.q, marks.k)).singularValues();
    CHECK(table.number(r, "sigma1_ext") == doctest::Approx(sigma_ext(0)).epsilon(tol));
    CHECK(table.number(r, "sigma_m1_ext") == doctest::Approx(sigma_ext(m)).epsilon(tol).scale(sigma_ext(0)));
    CHECK(table.number(r, "sigma_m_core") ==
          doctest::Approx(sigma_core(m - 1)).epsilon(1e-6).scale(1e-12 * sigma_core(0)));
    const double ratio = table.number(r, "sigma_m1_ext") / table.number(r, "sigma_m_core");
    CHECK(table.number(r, "bound_ratio") == doctest::Approx(ratio).epsilon(1e-12));
    const double s1 = table.number(r, "sigma1_ext");
    CHECK(table.number(r, "theorem2_bound") ==
          doctest::Approx(2 * s1 * s1 * ratio / table.number(r, "sigma_m_core")).epsilon(1e-12));
    CHECK(table.number(r, "c_emp") ==
          doctest::Approx(table.number(r, "spectral_error") / ratio).epsilon(1e-12));
    CHECK(table.number(r, "theorem1_applies") ==
          (table.number(r, "sigma_m_core") > table.number(r, "sigma_m1_ext") ? 1 : 0));
    // With the exact pseudoinverse the measured error respects every bound that applies (docs/mathematics.md
    // §3).
    if (iterations == 0) CHECK(table.number(r, "bounds_hold") == 1);
    CHECK(table.number(r, "pinv_residual") ==
          doctest::Approx(factors.pinv.residual()).epsilon(1e-9).scale(1e-12));
    CHECK(table.text(r, "pinv_status") == to_string(factors.pinv.status));
    CHECK(table.number(r, "landmark_terms_converged") == 1);
    // The log-shift of the kernel matrices: the head's largest logit for exp (Laplacian values are ≤ 1).
    CHECK(
        table.number(r, "log_shift") ==
        doctest::Approx(options.kernel.type == KernelType::exponential
                            ? std::max(0.0, options.kernel.exponent_block<double>(head.q, head.k).maxCoeff())
                            : 0.0)
            .epsilon(1e-12));
    CHECK(table.number(r, "seconds") > 0);
    // Not elapsed ≥ seconds: the rows of a landmark set share one set of factors and continue one another's
    // iterations, and `seconds` counts that shared work on every row (test_evaluation checks the values).
    CHECK(table.number(r, "elapsed_seconds") > 0);
  }

  cli::Handle file = cli::open_file(output, false);
  CHECK(cli::read_string_attribute(file.get(), "format") == "nystrom-results");
  CHECK(cli::read_numeric_attribute(file.get(), "format_version") == std::vector<double>{4});
  CHECK(!cli::read_string_attribute(file.get(), "program_version").empty());
  CHECK(!cli::read_string_attribute(file.get(), "git_revision").empty());
  CHECK(cli::read_string_attribute(file.get(), "command_line").starts_with("nystrom sweep -i "));
  CHECK(std::regex_match(cli::read_string_attribute(file.get(), "created"),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  CHECK(cli::read_numeric_attribute(file.get(), "threads")[0] >= 1);
  CHECK(cli::read_string_attribute(file.get(), "input") == fs::weakly_canonical(input).string());
  CHECK(cli::read_numeric_attribute(file.get(), "matrix_free") == std::vector<double>{0});
}

TEST_CASE("sweep: block-constant tokens with aligned segment-means landmarks are recovered exactly") {
  TempDir dir("exact");
  const auto input = make_dump(dir, "block-constant");
  const auto output = dir / "exact.h5";
  REQUIRE(run_cli(sweep_args(input, output,
                             {"--kernel", "exp,laplacian", "--strategy", "segment-means", "--landmarks", "4",
                              "--pinv", "exact", "--stabilization", "none,row-max", "-q"}))
              .status == 0);
  const Table table = read_sweep(output);
  REQUIRE(table.rows.size() == 2 * 2 * 2);
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CAPTURE(r);
    CHECK(table.number(r, "relative_spectral_error") < 1e-10);
    CHECK(table.number(r, "output_relative_error") < 1e-10);
    CHECK(table.number(r, "sigma_m1_ext") < 1e-10 * table.number(r, "sigma1_ext"));
  }
}

TEST_CASE("sweep: one thread, two and three (heads evaluated at once) give the same rows in the same order") {
  TempDir dir("threads");
  const auto small = make_dump(dir);
  // Also heads large enough for parallel products (N = 256), which the last evaluator left runs on all
  // threads.
  const auto large = dir / "large.h5";
  REQUIRE(run_cli({"synth", "-o", large, "--kind", "gaussian", "--layers", "1", "--heads", "3", "--tokens",
                   "256", "--dim", "16", "--precision", "double", "--seed", "5"})
              .status == 0);
  const std::vector<std::string> large_grid = {
      "--kernel", "exp,laplacian", "--strategy",   "segment-means,random", "--landmarks",
      "8,32",     "--pinv",        "exact,razavi", "--pinv-iters",         "6",
      "-q"};
  for (const auto& [input, extra] : {std::pair{small, grid}, std::pair{std::string(large), large_grid}}) {
    CAPTURE(input);
    std::map<std::string, std::string> outputs;
    for (const std::string threads : {"1", "2", "3"}) {
      outputs[threads] = dir / ("threads-" + threads + "-" + fs::path(input).filename().string());
      auto args = sweep_args(input, outputs[threads], extra);
      args.insert(args.end(), {"--threads", threads});
      REQUIRE(run_cli(args).status == 0);
    }
    const Table one = read_sweep(outputs["1"]);
    CHECK(one.rows.size() >= 40);
    check_same_results(one, read_sweep(outputs["2"]));
    check_same_results(one, read_sweep(outputs["3"]));
  }
}

TEST_CASE("sweep: interrupted and resumed on three threads gives the rows of a one-thread run") {
  TempDir dir("resume-threads");
  const auto input = make_dump(dir);
  const auto clean = dir / "clean.h5", resumed = dir / "resumed.h5";
  auto args = sweep_args(input, clean);
  args.insert(args.end(), {"--threads", "1"});
  REQUIRE(run_cli(args).status == 0);
  args = sweep_args(input, resumed);
  args.insert(args.end(), {"--threads", "3", "--stop-after", "17"});
  CHECK(run_cli(args).status == 128 + SIGINT);
  REQUIRE(fs::exists(resumed + ".partial"));
  CHECK(read_sweep(resumed + ".partial").rows.size() == 17);  // the points still running are not kept
  args.resize(args.size() - 2);
  REQUIRE(run_cli(args).status == 0);
  CHECK_FALSE(fs::exists(resumed + ".partial"));
  check_same_results(read_sweep(clean), read_sweep(resumed));
}

TEST_CASE(
    "sweep: a row that cannot be written (a full disk) ends the run with exit 1, keeping a resumed file") {
  TempDir dir("full_disk");
  const auto input = make_dump(dir);
  const auto clean = dir / "clean.h5", output = dir / "out.h5", partial = output + ".partial";
  REQUIRE(run_cli(sweep_args(input, clean)).status == 0);
  auto args = sweep_args(input, output);
  args.insert(args.end(), {"--threads", "1", "--stop-after", "2"});
  REQUIRE(run_cli(args).status == 128 + SIGINT);
  args.resize(args.size() - 2);
  // Files may not grow beyond the partial file's next kilobyte: a few rows fit, then a flush fails.
  const auto limit = (fs::file_size(partial) / 1024 + 1) * 1024;
  const auto full = run_program(args, limit);
  CHECK(full.status == 1);
  CHECK_MESSAGE(full.err.find(partial + ": cannot write the file") != std::string::npos, full.err);
  CHECK_FALSE(fs::exists(output));
  const auto kept = read_sweep(partial).rows.size();
  CHECK(kept >= 2);
  CHECK(kept < read_sweep(clean).rows.size());
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK_MESSAGE(entry.path().string().find(".tmp-") == std::string::npos, entry.path());
  // With room again the same command completes it.
  REQUIRE(run_cli(args).status == 0);
  check_same_results(read_sweep(clean), read_sweep(output));
}

TEST_CASE("sweep: an output replaced beside a partial file keeps its rows when the partial is finished") {
  TempDir dir("stale_partial");
  const auto input = make_dump(dir);
  const auto output = dir / "out.h5", elsewhere = dir / "elsewhere.h5";
  const auto args = [&](const std::string& path, const std::string& landmarks) {
    return sweep_args(input, path, {"--landmarks", landmarks, "--strategy", "step", "--kernel", "exp", "-q"});
  };
  auto stopped = args(output, "4");
  stopped.insert(stopped.end(), {"--stop-after", "1"});
  REQUIRE(run_cli(stopped).status == 128 + SIGINT);
  // A results file of the same input finished elsewhere, copied onto the output beside the partial file.
  REQUIRE(run_cli(args(elsewhere, "8")).status == 0);
  const auto copied = read_sweep(elsewhere).rows.size();
  fs::rename(elsewhere, output);
  REQUIRE(run_cli(args(output, "4")).status == 0);
  const Table table = read_sweep(output);
  std::map<double, std::size_t> per_count;
  for (std::size_t r = 0; r < table.rows.size(); ++r) ++per_count[table.number(r, "landmarks")];
  CHECK(per_count[8] == copied);
  CHECK(per_count[4] > 0);
  CHECK(table.rows.size() == per_count[4] + per_count[8]);
}

TEST_CASE("sweep: interrupted (SIGINT after some points) and resumed gives the rows of one clean run") {
  TempDir dir("resume");
  const auto input = make_dump(dir);
  const auto clean = dir / "clean.h5", resumed = dir / "resumed.h5";
  REQUIRE(run_cli(sweep_args(input, clean)).status == 0);
  auto args = sweep_args(input, resumed);
  args.insert(args.end(), {"--stop-after", "17"});
  const auto stopped = run_cli(args);
  CHECK(stopped.status == 128 + SIGINT);
  CHECK_FALSE(fs::exists(resumed));
  REQUIRE(fs::exists(resumed + ".partial"));
  CHECK(read_sweep(resumed + ".partial").rows.size() == 17);
  args.back() = "5";  // stop again after 5 more
  CHECK(run_cli(args).status == 128 + SIGINT);
  CHECK(read_sweep(resumed + ".partial").rows.size() == 22);
  REQUIRE(run_cli(sweep_args(input, resumed)).status == 0);
  CHECK_FALSE(fs::exists(resumed + ".partial"));

  const Table a = read_sweep(clean);
  check_same_results(a, read_sweep(resumed));

  // A rerun of a finished sweep computes nothing and leaves the file byte-for-byte intact.
  const auto bytes = file_bytes(resumed);
  const auto rerun = run_cli(
      sweep_args(input, resumed,
                 {"--kernel", "exp,laplacian", "--lambda", "3", "--strategy", "segment-means,step,random",
                  "--landmarks", "4,8", "--pinv", "exact,razavi,newton-schulz", "--pinv-iters", "3,12"}));
  CHECK(rerun.status == 0);
  CHECK(rerun.err.find("already") != std::string::npos);
  CHECK(file_bytes(resumed) == bytes);
  // Extending the grid keeps the finished rows and adds only the new points.
  REQUIRE(run_cli(sweep_args(input, resumed,
                             {"--kernel", "exp", "--strategy", "step", "--landmarks", "4,16", "--pinv",
                              "exact", "-q"}))
              .status == 0);
  CHECK(read_sweep(resumed).rows.size() == a.rows.size() + 2);

  // Results format version 4 is this build's /sweep table; version 3 (the method switches an attribute, not
  // columns) is refused, as is version 1 (r and k in `landmarks`).
  const auto set_version = [&](std::int64_t version) {
    cli::Handle file = cli::open_file(clean, true);
    cli::write_attribute(file.get(), "format_version", std::vector<std::int64_t>{version});
  };
  const std::vector<std::string> extension = {"--kernel", "exp",    "--strategy", "step", "--landmarks",
                                              "4,16",     "--pinv", "exact",      "-q"};
  REQUIRE(run_cli(sweep_args(input, clean, extension)).status == 0);
  CHECK(read_sweep(clean).rows.size() == a.rows.size() + 2);
  CHECK(cli::read_numeric_attribute(cli::open_file(clean, false).get(), "format_version") ==
        std::vector<double>{4});
  for (const std::int64_t version : {3, 1}) {
    set_version(version);
    const auto old = run_cli(sweep_args(input, clean, extension));
    CHECK(old.status == 2);
    CHECK_MESSAGE(old.err.find(describe("format_version ", version)) != std::string::npos, old.err);
  }
}

TEST_CASE(
    "sweep: bad options exit 2 with a message naming the option, leave no file and keep an existing one") {
  TempDir dir("badopts");
  const auto input = make_dump(dir);
  const auto existing = dir / "existing.h5";
  REQUIRE(run_cli(sweep_args(
                      input, existing,
                      {"--kernel", "exp", "--strategy", "step", "--landmarks", "4", "--pinv", "exact", "-q"}))
              .status == 0);
  const auto bytes = file_bytes(existing);
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--landmarks", "8,41"}, "m = 41 exceeds N = 40"},
      {{"--landmarks", "0"}, "--landmarks"},
      {{"--kernel", "laplacian", "--lambda", "2,0"}, "--lambda"},
      {{"--kernel", "laplacian", "--lambda", "-1"}, "lambda = -1"},
      // a bad parameter is bad input even where --kernel does not use it
      {{"--kernel", "exp", "--lambda", "0"}, "option --lambda: kernel laplacian: lambda = 0 must be > 0"},
      {{"--kernel", "exp,laplacian", "--bandwidth", "-2"},
       "option --bandwidth: kernel gaussian: h = -2 must be > 0"},
      {{"--kernel", "cosine"}, "unknown kernel 'cosine'"},
      {{"--strategy", "step,given"}, "option --strategy: 'given' takes landmark indices"},
      {{"--strategy", "step,best"}, "--strategy"},
      {{"--pinv", "cholesky"}, "--pinv"},
      {{"--method", "magic"}, "unknown method 'magic'"},
      {{"--stabilization", "max"}, "--stabilization"},
      {{"--pinv-iters", "0"}, "--pinv-iters"},
      {{"--heads", "5"}, "--heads: index 5 out of range"},
      {{"--layers", "07"}, "no layer /layers/07"},
      {{"--precision", "quarter"}, "--precision"},
      {{"--precision", "float", "--dtype", "float32"}, "--precision and --dtype"},
      {{"--precision", "float,double"}, "double runs alone"},
      {{"--method", "exact", "--methods", "exact"}, "--method and --methods"},
      {{"--landmark", "4"}, "landmark"},
      {{"--threads", "-2"}, "--threads"},
      {{"--method", "pnp-nystra,bogus"}, "unknown method 'bogus'"},
      {{"--method", "performer", "--features", "0"}, "--features"},
      {{"--method", "linformer", "--projected", "8,x"}, "--projected: 'x'"},
      {{"--memory", "12Q"}, "--memory: '12Q'"},
      {{"--memory", "0"}, "--memory: '0'"},
      {{"--device", "tpu"}, "--device"},
      {{"--method", "cur", "--kernel", "exp", "--landmarks", "41"}, "m = 41 exceeds N = 40"},
      // Checked before the first point (it failed there, leaving a partial file with the points before it).
      {{"--method", "pnp-nystra,nystromformer", "--kernel", "exp", "--scale", "-1"}, "needs a scale s > 0"},
      {{"--kernel", "exp", "--scale", "nan"}, "option --scale: 'nan' is not a finite number"},
      {{"--threads", "100000"}, "--threads: 100000"},
      // An empty value is a slip, not the default (it ran the default grid).
      {{"--layers", ""}, "option --layers: empty value"},
      {{"--kernel", "laplacian", "--lambda", " "}, "option --lambda: empty value"},
      {{"--config", "/"}, "option --config: cannot read config file '/'"},
  };
  for (const auto& [extra, expect] : cases) {
    CAPTURE(expect);
    for (const auto& output : {dir / "new.h5", existing}) {
      auto args = sweep_args(input, output, extra);
      args.push_back("-q");
      // A small grid: one strategy, one landmark count.
      if (std::find(extra.begin(), extra.end(), "--landmarks") == extra.end())
        args.insert(args.end(), {"--landmarks", "4"});
      if (std::find(extra.begin(), extra.end(), "--strategy") == extra.end())
        args.insert(args.end(), {"--strategy", "step"});
      const auto run = run_cli(args);
      CAPTURE(run.err);
      CHECK(run.status == 2);
      CHECK(run.err.find(expect) != std::string::npos);
      CHECK_FALSE(fs::exists(dir / "new.h5"));
      CHECK_FALSE(fs::exists(output + ".partial"));
      CHECK(file_bytes(existing) == bytes);
    }
  }
  // An output path that holds something else (here the dump itself) is never overwritten.
  const auto dump_bytes = file_bytes(input);
  const auto clobber = run_cli(sweep_args(input, input, {"--landmarks", "4", "--strategy", "step", "-q"}));
  CHECK(clobber.status == 2);
  CHECK(clobber.err.find("is not a file nystrom sweep writes") != std::string::npos);
  CHECK(file_bytes(input) == dump_bytes);
  // Results for another input are not mixed into an existing file.
  const auto other = make_dump(dir, "low-rank");
  const auto mixed = run_cli(sweep_args(other, existing, {"--landmarks", "4", "--strategy", "step", "-q"}));
  CHECK(mixed.status == 2);
  CHECK(mixed.err.find("choose another --output") != std::string::npos);
  CHECK(file_bytes(existing) == bytes);
  // The method switches are parameter columns: points of other switches are new rows of the same file.
  const auto both = dir / "switches.h5";
  const std::vector<std::string> points = {
      "--landmarks", "4",     "--strategy", "step", "--method", "cur,linformer",
      "--pinv",      "exact", "--heads",    "0",    "-q"};
  std::vector<std::string> switches = points;
  switches.insert(switches.end(), {"--copy-rows", "--share-projections"});
  REQUIRE(run_cli(sweep_args(input, both, points)).status == 0);
  REQUIRE(run_cli(sweep_args(input, both, switches)).status == 0);
  const Table table = read_sweep(both);
  REQUIRE(table.rows.size() == 4);
  int switched = 0;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    const bool cur = table.text(r, "method") == "cur";
    switched += int(table.number(r, cur ? "copy_rows" : "share_projections"));
    CHECK(table.number(r, cur ? "share_projections" : "copy_rows") == 0);
  }
  CHECK(switched == 2);
  const auto again = run_cli(sweep_args(input, both, switches));
  CHECK(again.status == 0);
  CHECK(again.err.empty());
  // Nor results of the same path holding another dump (regenerated, here with other data).
  fs::copy_file(other, input, fs::copy_options::overwrite_existing);
  const auto regenerated =
      run_cli(sweep_args(input, existing, {"--landmarks", "4", "--strategy", "step", "-q"}));
  CHECK(regenerated.status == 2);
  CHECK_MESSAGE(regenerated.err.find("holds results of input_digest '") != std::string::npos,
                regenerated.err);
  CHECK(file_bytes(existing) == bytes);
}

TEST_CASE("sweep: float arithmetic agrees with double to float accuracy") {
  TempDir dir("float");
  const auto input = make_dump(dir);
  const std::vector<std::string> small = {
      "--kernel", "exp", "--strategy", "segment-means", "--landmarks", "4", "--pinv", "exact", "-q"};
  auto single = small, alias = small;
  single.insert(single.end(), {"--precision", "float"});
  alias.insert(alias.end(), {"--dtype", "float32", "--methods", "pnp-nystra"});  // the deprecated spellings
  REQUIRE(run_cli(sweep_args(input, dir / "d.h5", small)).status == 0);
  REQUIRE(run_cli(sweep_args(input, dir / "f.h5", single)).status == 0);
  REQUIRE(run_cli(sweep_args(input, dir / "alias.h5", alias)).status == 0);
  const Table d = read_sweep(dir / "d.h5"), f = read_sweep(dir / "f.h5");
  REQUIRE(d.rows.size() == f.rows.size());
  const Table aliased = read_sweep(dir / "alias.h5");
  REQUIRE(aliased.rows.size() == f.rows.size());
  for (std::size_t r = 0; r < d.rows.size(); ++r) {
    CHECK(d.text(r, "precision") == "double");
    CHECK(f.text(r, "precision") == "float");
    CHECK(aliased.text(r, "precision") == "float");
    CHECK(aliased.number(r, "spectral_error") == f.number(r, "spectral_error"));
    CHECK(f.number(r, "sigma1_ext") == doctest::Approx(d.number(r, "sigma1_ext")).epsilon(1e-5));
    CHECK(f.number(r, "output_relative_error") ==
          doctest::Approx(d.number(r, "output_relative_error")).epsilon(1e-2).scale(1e-4));
  }
}

TEST_CASE(
    "sweep --precision half,bfloat16: rows per format, output errors against the float64 exact output") {
  TempDir dir("formats");
  const auto input = make_dump(dir);
  const std::vector<std::string> point = {"--kernel",    "exp",
                                          "--method",    "exact,pnp-nystra,nystromformer",
                                          "--landmarks", "8",
                                          "--pinv",      "exact",
                                          "--strategy",  "segment-means",
                                          "-q"};
  auto formats = point;
  formats.insert(formats.end(), {"--precision", "float,half,bfloat16"});
  REQUIRE(run_cli(sweep_args(input, dir / "formats.h5", formats)).status == 0);
  const Table table = read_sweep(dir / "formats.h5");
  // 2 heads × 3 methods × 3 formats.
  REQUIRE(table.rows.size() == 2 * 3 * 3);
  const auto dump = cli::inspect_dump(input);
  const auto heads = cli::read_layer_heads<double>(dump, dump.layers[0]);
  std::map<std::string, double> exact_error;  // by format and head
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CAPTURE(r);
    const std::string format = table.text(r, "precision");
    const Method method = method_from_string(table.text(r, "method"));
    CHECK(table.number(r, "nonfinite_output_rows") == 0);
    CHECK(table.number(r, "overflowed_entries") == 0);
    CHECK(table.number(r, "nan_entries") == 0);
    if (format == "float") CHECK(table.number(r, "underflowed_entries") == 0);
    if (method != Method::exact) continue;
    // The oracle of an exact row: the library's exact attention in the format against a dense float64 one.
    const auto& head = heads[Index(table.number(r, "head"))];
    ApproximationOptions options;
    options.kernel = Kernel{KernelType::exponential, table.number(r, "kernel_param")};
    options.storage = precision_from_string(format);
    const Matrix<float> q = head.q.cast<float>(), k = head.k.cast<float>(), v = head.v.cast<float>();
    const Matrix<double> computed =
        approximate_attention<float>(Method::exact, q, k, v, options).output.cast<double>();
    const Matrix<double> reference =
        attention_matrix<double>(q.cast<double>(), k.cast<double>(), options.kernel) * v.cast<double>();
    const double error = (computed - reference).norm() / reference.norm();
    if (format != "float")
      CHECK(table.number(r, "output_relative_error") == doctest::Approx(error).epsilon(1e-9));
    exact_error[format + std::to_string(int(table.number(r, "head")))] =
        table.number(r, "output_relative_error");
  }
  // Exact attention loses the format's precision: bfloat16 (8 significant bits) more than half (11), half
  // far more than float32 (24).
  for (const char* h : {"0", "1"}) {
    CHECK(exact_error.at(std::string("bfloat16") + h) > exact_error.at(std::string("half") + h));
    CHECK(exact_error.at(std::string("half") + h) > 100 * exact_error.at(std::string("float") + h));
    CHECK(exact_error.at(std::string("half") + h) < 1e-2);
  }

  auto mixed = point;
  mixed.insert(mixed.end(), {"--precision", "double,half"});
  const auto refused = run_cli(sweep_args(input, dir / "mixed.h5", mixed));
  CHECK(refused.status == 2);
  CHECK(refused.err.find("double runs alone") != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "mixed.h5"));
  auto unknown = point;
  unknown.insert(unknown.end(), {"--precision", "quarter"});
  const auto bad = run_cli(sweep_args(input, dir / "bad.h5", unknown));
  CHECK(bad.status == 2);
  CHECK(bad.err.find("quarter") != std::string::npos);
}

TEST_CASE("spectrum: without --landmarks m is 16 capped at each layer's N, and a larger m is refused") {
  TempDir dir("spectrum_small");
  const auto input = dir / "small.h5";
  REQUIRE(run_cli({"synth", "-o", input, "--kind", "gaussian", "--layers", "1", "--heads", "1", "--tokens",
                   "5", "--dim", "3"})
              .status == 0);
  REQUIRE(run_cli({"spectrum", "-i", input, "-o", dir / "default.h5", "-q"}).status == 0);
  cli::Handle file = cli::open_file(dir / "default.h5", false);
  cli::Handle group = cli::open_group(file.get(), "spectra/00");
  CHECK(cli::read_numeric_attribute(group.get(), "landmarks") == std::vector<double>{5});
  const auto given = run_cli({"spectrum", "-i", input, "-o", dir / "given.h5", "--landmarks", "16", "-q"});
  CHECK(given.status == 2);
  CHECK_MESSAGE(given.err.find("m = 16 exceeds the number of tokens N = 5") != std::string::npos, given.err);
  CHECK(!std::filesystem::exists(dir / "given.h5"));
}

TEST_CASE("spectrum: singular values of G, S, G~ and attn match full SVDs of the dense matrices") {
  TempDir dir("spectrum");
  const auto input = dir / "attn.h5", output = dir / "spectra.h5";
  REQUIRE(run_cli({"synth",   "-o",          input,     "--kind",      "low-rank", "--layers", "1",
                   "--batch", "2",           "--heads", "2",           "--tokens", "30",       "--dim",
                   "4",       "--precision", "double",  "--with-attn", "--rank",   "2"})
              .status == 0);
  const auto spectrum = [&](const std::string& to, const std::string& threads) {
    return run_cli({"spectrum", "-i", input, "-o", to, "--landmarks", "5", "--strategy", "step", "--top",
                    "12", "--rank-tol", "1e-8", "--threads", threads, "-q"});
  };
  REQUIRE(spectrum(output, "3").status == 0);  // three heads at once
  const auto dump = cli::inspect_dump(input);
  const auto heads = cli::read_layer_heads<double>(dump, dump.layers[0]);
  cli::Handle file = cli::open_file(output, false);
  CHECK(cli::read_string_attribute(file.get(), "format") == "nystrom-results");
  cli::Handle group = cli::open_group(file.get(), "spectra/00");
  CHECK(cli::read_numeric_attribute(group.get(), "k") == std::vector<double>{12});
  CHECK(cli::read_numeric_attribute(group.get(), "N") == std::vector<double>{30});
  auto read = [&](const std::string& name) {
    cli::Handle dataset = cli::open_dataset(group.get(), name);
    CHECK(cli::dataset_dims(dataset.get()) == std::vector<hsize_t>{2, 2, 12});
    std::vector<double> values(2 * 2 * 12);
    H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
    return values;
  };
  const auto sv_g = read("sv_G"), sv_s = read("sv_S"), sv_ext = read("sv_Gext"), sv_attn = read("sv_attn");
  const auto decay_g = read("decay_G"), energy_g = read("energy_G");
  const Kernel kernel = Kernel::exponential(1 / 2.0);
  for (Index i = 0; i < 4; ++i) {
    CAPTURE(i);
    const auto& head = heads[i];
    const Vector<double> g =
        Eigen::JacobiSVD<Matrix<double>>(kernel.block<double>(head.q, head.k)).singularValues();
    const Matrix<double> s_matrix = attention_matrix<double>(head.q, head.k, kernel);
    const Vector<double> s = Eigen::JacobiSVD<Matrix<double>>(s_matrix).singularValues();
    const Vector<double> attn =
        Eigen::JacobiSVD<Matrix<double>>(cli::read_attention<double>(dump, dump.layers[0], i / 2, i % 2))
            .singularValues();
    // G~ with the library's step landmarks (m = 5).
    LandmarkOptions step;
    step.strategy = LandmarkStrategy::step;
    step.count = 5;
    const auto marks = select_landmarks<double>(head.q, head.k, step, Kernel{});
    Matrix<double> q_ext(35, 4), k_ext(35, 4);
    q_ext << marks.q, head.q;
    k_ext << marks.k, head.k;
    const Vector<double> ext =
        Eigen::JacobiSVD<Matrix<double>>(kernel.block<double>(q_ext, k_ext)).singularValues();
    double total = g.squaredNorm(), cumulative = 0;
    for (Index j = 0; j < 12; ++j) {
      CAPTURE(j);
      CHECK(sv_g[i * 12 + j] == doctest::Approx(g(j)).epsilon(1e-10).scale(1e-12 * g(0)));
      CHECK(sv_s[i * 12 + j] == doctest::Approx(s(j)).epsilon(1e-10).scale(1e-12 * s(0)));
      CHECK(sv_attn[i * 12 + j] == doctest::Approx(s(j)).epsilon(1e-10).scale(1e-12 * s(0)));
      CHECK(sv_attn[i * 12 + j] == doctest::Approx(attn(j)).epsilon(1e-10).scale(1e-12 * s(0)));
      CHECK(sv_ext[i * 12 + j] == doctest::Approx(ext(j)).epsilon(1e-10).scale(1e-12 * ext(0)));
      CHECK(decay_g[i * 12 + j] == doctest::Approx(g(j) / g(0)).epsilon(1e-10).scale(1e-12));
      cumulative += g(j) * g(j);
      CHECK(energy_g[i * 12 + j] == doctest::Approx(cumulative / total).epsilon(1e-10));
    }
  }
  // One head at a time gives the same values, bit for bit.
  const auto one = dir / "one.h5";
  REQUIRE(spectrum(one, "1").status == 0);
  cli::Handle one_file = cli::open_file(one, false);
  cli::Handle one_group = cli::open_group(one_file.get(), "spectra/00");
  for (const std::string matrix : {"G", "S", "Gext", "attn"})
    for (const std::string quantity : {"sv_", "decay_", "energy_"}) {
      CAPTURE(quantity + matrix);
      std::vector<double> values(2 * 2 * 12);
      cli::Handle dataset = cli::open_dataset(one_group.get(), quantity + matrix);
      H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
      const auto threaded = read(quantity + matrix);
      CHECK(std::memcmp(values.data(), threaded.data(), values.size() * sizeof(double)) == 0);
    }
  // Bad options leave no file.
  CHECK(run_cli({"spectrum", "-i", input, "-o", dir / "bad.h5", "--landmarks", "31", "-q"}).status == 2);
  CHECK(run_cli({"spectrum", "-i", input, "-o", dir / "bad.h5", "--landmarks", "0", "-q"})
            .err.find("option --landmarks: m = 0 must be >= 1") != std::string::npos);
  CHECK(run_cli({"spectrum", "-i", input, "-o", dir / "bad.h5", "--strategy", "given", "-q"})
            .err.find("option --strategy: 'given' takes landmark indices") != std::string::npos);
  CHECK(run_cli({"spectrum", "-i", input, "-o", dir / "bad.h5", "--kernel", "laplacian", "--lambda", "0"})
            .status == 2);
  const auto unused_bandwidth =
      run_cli({"spectrum", "-i", input, "-o", dir / "bad.h5", "--kernel", "exp", "--bandwidth", "0", "-q"});
  CHECK(unused_bandwidth.status == 2);
  CHECK_MESSAGE(unused_bandwidth.err.find("option --bandwidth: kernel gaussian: h = 0 must be > 0") !=
                    std::string::npos,
                unused_bandwidth.err);
  CHECK_FALSE(fs::exists(dir / "bad.h5"));
}

namespace {

/// The library options of one row of a method sweep, rebuilt from the row's parameter columns.
ApproximationOptions row_options(const Table& table, std::size_t r, const Kernel& kernel) {
  ApproximationOptions options;
  options.kernel = kernel;
  const Method method = method_from_string(table.text(r, "method"));
  const Index size =
      Index(table.number(r, "landmarks") + table.number(r, "features") + table.number(r, "projected"));
  PinvOptions pinv;
  if (table.text(r, "pinv") != "none") {
    pinv.method = pinv_method_from_string(table.text(r, "pinv"));
    if (pinv.method != PinvMethod::exact) pinv.iterations = int(table.number(r, "pinv_iters"));
  }
  LandmarkOptions marks;
  if (table.text(r, "strategy") != "none")
    marks.strategy = landmark_strategy_from_string(table.text(r, "strategy"));
  marks.count = size;
  marks.seed = 11;
  switch (method) {
    case Method::symmetric_nystrom:
      options.symmetric_nystrom.landmarks = marks;
      pinv.shift = options.symmetric_nystrom.pinv.shift;
      options.symmetric_nystrom.pinv = pinv;
      break;
    case Method::nystromformer:
      options.nystromformer.landmarks = size;
      options.nystromformer.pinv = pinv;
      break;
    case Method::cur:
      options.cur.selection = marks;
      options.cur.pinv = pinv;
      options.cur.copy_rows = true;
      break;
    case Method::performer:
      options.performer.features = size;
      options.performer.seed = 11;
      break;
    case Method::linformer:
      options.linformer.projected = size;
      options.linformer.seed = 11;
      break;
    default:
      break;
  }
  return options;
}

}  // namespace

TEST_CASE("sweep --method: every method's rows match dense recomputations, softmax methods skip laplacian") {
  TempDir dir("methods");
  const auto input = make_dump(dir);
  const auto output = dir / "methods.h5";
  const auto run = run_cli(sweep_args(input, output,
                                      {"--method",
                                       "nystromformer,cur,symmetric-nystrom,performer,linformer,exact",
                                       "--kernel",
                                       "exp,laplacian",
                                       "--lambda",
                                       "3",
                                       "--strategy",
                                       "segment-means,step",
                                       "--landmarks",
                                       "4,8",
                                       "--pinv",
                                       "exact,razavi",
                                       "--pinv-iters",
                                       "3",
                                       "--features",
                                       "8",
                                       "--projected",
                                       "6",
                                       "--copy-rows",
                                       "--threads",
                                       "1"}));
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  // Both skips are announced once at the start.
  CHECK(run.err.find("skipping") != std::string::npos);
  CHECK(run.err.find("softmax method") != std::string::npos);
  CHECK(run.err.find("segment-means is a pooling strategy") != std::string::npos);
  const Table table = read_sweep(output);
  // Per head: exp: nystromformer 2 m x 2 pinv, cur (step only) 2 x 2, symmetric 2 strategies x 2 x 2,
  // performer 1, linformer 1, exact 1 = 19; laplacian: symmetric 8 + exact 1 = 9.
  REQUIRE(table.rows.size() == 2 * (19 + 9));

  const auto dump = cli::inspect_dump(input);
  const auto heads = cli::read_layer_heads<double>(dump, dump.layers[0]);
  std::map<std::string, int> seen;
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CAPTURE(r);
    const auto& head = heads[Index(table.number(r, "head"))];
    const Kernel kernel{kernel_type_from_string(table.text(r, "kernel")), table.number(r, "kernel_param")};
    const Method method = method_from_string(table.text(r, "method"));
    CAPTURE(table.text(r, "method"));
    ++seen[table.text(r, "method") + "/" + table.text(r, "kernel")];
    const bool softmax = method == Method::nystromformer || method == Method::cur ||
                         method == Method::performer || method == Method::linformer;
    if (softmax) CHECK(kernel.type == KernelType::exponential);
    if (method == Method::cur) CHECK(table.text(r, "strategy") == "step");
    // m, r and k each in their own column (results format_version 2).
    CHECK(table.number(r, "features") == (method == Method::performer ? 8 : 0));
    CHECK(table.number(r, "projected") == (method == Method::linformer ? 6 : 0));
    if (method == Method::performer || method == Method::linformer || method == Method::exact)
      CHECK(table.number(r, "landmarks") == 0);
    CHECK(table.text(r, "stabilization") == "none");
    for (const char* bound : {"sigma1_ext", "sigma_m1_ext", "sigma_m_core", "bound_ratio", "theorem1_bound",
                              "theorem2_bound", "theorem3_bound", "theorem3_k", "c_emp"})
      CHECK(std::isnan(table.number(r, bound)));

    const Matrix<double> exact = attention_matrix<double>(head.q, head.k, kernel) * head.v;
    const auto approximation =
        approximate_attention<double>(method, head.q, head.k, head.v, row_options(table, r, kernel));
    const Matrix<double> output_error = exact - approximation.output;
    CHECK(table.number(r, "output_relative_error") ==
          doctest::Approx(output_error.norm() / exact.norm()).epsilon(1e-7).scale(1e-5));
    CHECK(table.number(r, "output_max_error") ==
          doctest::Approx(output_error.cwiseAbs().maxCoeff()).epsilon(1e-7).scale(1e-5));

    // The implied matrix: Ĝ against G for the kernel methods, Ŝ against S = D⁻¹G for the softmax ones.
    Matrix<double> reference, approximate;
    if (method == Method::symmetric_nystrom) {
      CHECK(table.text(r, "error_matrix") == "G");
      reference = kernel.block<double>(head.q, head.k);
      approximate = approximation.kernel_factors->dense();
    } else if (method == Method::exact) {
      CHECK(table.text(r, "error_matrix") == "none");
      CHECK(table.number(r, "output_relative_error") < 1e-13);
      CHECK(std::isnan(table.number(r, "spectral_error")));
      continue;
    } else {
      CHECK(table.text(r, "error_matrix") == "S");
      reference = attention_matrix<double>(head.q, head.k, kernel);
      approximate = approximation.softmax_attention->dense();
    }
    const double norm = largest_singular_value(reference);
    const double spectral = largest_singular_value(reference - approximate);
    CHECK(table.number(r, "spectral_error") == doctest::Approx(spectral).epsilon(1e-9).scale(norm));
    CHECK(table.number(r, "relative_spectral_error") ==
          doctest::Approx(spectral / norm).epsilon(1e-9).scale(1e-12));
    CHECK(table.number(r, "frobenius_error") ==
          doctest::Approx((reference - approximate).norm()).epsilon(1e-9).scale(norm));
    CHECK(table.number(r, "matrix_free") == 0);
  }
  CHECK(seen["exact/laplacian"] == 2);
  CHECK(seen["symmetric-nystrom/laplacian"] == 16);
  CHECK(seen.count("performer/laplacian") == 0);
}

TEST_CASE("sweep --memory: a tiny budget takes the matrix-free path, records it, and agrees with dense") {
  TempDir dir("memory");
  const auto input = make_dump(dir);
  const std::vector<std::string> small = {"--kernel",    "exp,laplacian",
                                          "--lambda",    "3",
                                          "--strategy",  "step",
                                          "--landmarks", "4",
                                          "--pinv",      "exact",
                                          "--method",    "pnp-nystra,linformer,symmetric-nystrom",
                                          "--projected", "6",
                                          "-q"};
  auto dense_args = sweep_args(input, dir / "dense.h5", small);
  dense_args.insert(dense_args.end(), {"--memory", "2G"});
  auto lean_args = sweep_args(input, dir / "lean.h5", small);
  lean_args.insert(lean_args.end(), {"--memory", "1K"});
  REQUIRE(run_cli(dense_args).status == 0);
  REQUIRE(run_cli(lean_args).status == 0);
  const Table dense = read_sweep(dir / "dense.h5"), lean = read_sweep(dir / "lean.h5");
  REQUIRE(dense.rows.size() == lean.rows.size());
  REQUIRE(dense.rows.size() == 2 * (3 + 2));
  for (std::size_t r = 0; r < dense.rows.size(); ++r) {
    CAPTURE(r);
    CHECK(dense.number(r, "matrix_free") == 0);
    CHECK(lean.number(r, "matrix_free") == 1);
    CHECK(lean.text(r, "method") == dense.text(r, "method"));
    CHECK(lean.number(r, "spectral_error") ==
          doctest::Approx(dense.number(r, "spectral_error")).epsilon(1e-9));
    // The matrix-free Frobenius norm is accumulated in row panels, for G and S alike.
    CHECK(lean.number(r, "frobenius_error") ==
          doctest::Approx(dense.number(r, "frobenius_error")).epsilon(1e-10));
    CHECK(lean.number(r, "output_relative_error") ==
          doctest::Approx(dense.number(r, "output_relative_error")).epsilon(1e-12));
  }
  cli::Handle file = cli::open_file(dir / "lean.h5", false);
  CHECK(cli::read_numeric_attribute(file.get(), "memory_budget") == std::vector<double>{1024});
  cli::Handle other = cli::open_file(dir / "dense.h5", false);
  CHECK(cli::read_numeric_attribute(other.get(), "memory_budget") == std::vector<double>{2.0 * (1 << 30)});
  CHECK(cli::read_string_attribute(other.get(), "device") == "cpu");
}

TEST_CASE(
    "sweep: a G̃ of rank 1 to rounding, dense and matrix-free: no theorem applies on a σ_{m+1} below its "
    "margin") {
  // Heavy-tailed block-constant windows: σ₁(G̃) = 1.5e98 while σ_m(G_A) = 0.01, far below the rounding of
  // σ_{m+1}(G̃) (about 1e-13·σ₁). The dense SVD gives σ_{m+1} = 2.9e81, the matrix-free rank-1 shortcut 0:
  // both rounding. At σ_{m+1} itself, theorems 1 and 3 applied on the matrix-free path with bound 0 against
  // an error of 1.5e98.
  TempDir dir("rank_one");
  const auto input = dir / "heavy.h5";
  REQUIRE(run_cli({"synth",       "-o",     input,     "--kind",      "block-constant,heavy-tailed,window",
                   "--layers",    "3",      "--heads", "1",           "--tokens",
                   "1024",        "--dim",  "32",      "--value-dim", "16",
                   "--precision", "double", "-q",      "--seed",      "2"})
              .status == 0);
  const std::vector<std::string> point = {
      "--layers",      "01", "--kernel", "exp",    "--method", "pnp-nystra", "--strategy",
      "segment-means", "-m", "8",        "--pinv", "exact",    "-q"};
  const auto [dense, free] = dense_and_matrix_free(dir, input, point);
  for (const Table* path : {&dense, &free}) {
    CAPTURE(path == &free);
    const Table& table = *path;
    REQUIRE(table.rows.size() == 1);
    const double sigma1 = table.number(0, "sigma1_ext"), margin = table.number(0, "sigma_m1_margin");
    CHECK(table.number(0, "spectral_error") > 0.5 * sigma1);
    CHECK(table.number(0, "sigma_m_core") < 1e-20 * sigma1);
    CHECK(table.number(0, "sigma_m1_ext") <= margin);
    CHECK(margin >= rounding_factor<double>(1024, 8) * sigma1);
    CHECK(table.number(0, "theorem1_applies") == 0);
    CHECK(table.number(0, "theorem3_applies") == 0);
    CHECK(table.number(0, "theorem2_applies") == 1);
    CHECK(table.number(0, "bounds_hold") == 1);
  }
}

TEST_CASE("sweep: an approximation whose Ĝ overflows where its factors do not is a row, not an abort") {
  // Logits near 700 (--scale 53.14 on Gaussian tokens) and Razavi's 6 steps on symmetric Nyström's m = 4
  // core: every factor is finite, E_c = G_c − Ĝ_c has entries near 1e206 and its Gram products overflowed, so
  // the sweep stopped with exit 2 on a valid input, dense and matrix-free. Now both scale E by a power of two
  // (the stored E itself, the matrix-free one through Z and κ's log-shift): ‖E‖₂ = Inf beyond double, the
  // relative error finite, the same on both paths (the matrix-free row was NaN).
  TempDir dir("overflowing");
  const auto input = dir / "x.h5";
  REQUIRE(run_cli({"synth", "-o", input, "--layers", "1", "--heads", "2", "--tokens", "40", "--dim", "6",
                   "--value-dim", "5", "-q"})
              .status == 0);
  const std::vector<std::string> point = {"--scale",    "53.144904992293334",
                                          "--kernel",   "exp",
                                          "--method",   "symmetric-nystrom",
                                          "-m",         "4",
                                          "--pinv",     "razavi",
                                          "--strategy", "step",
                                          "--heads",    "1",
                                          "-q"};
  const auto [dense, lean] = dense_and_matrix_free(dir, input, point, {"--memory", "1"});
  REQUIRE(dense.rows.size() == 3);
  for (std::size_t r = 0; r < dense.rows.size(); ++r) {
    CAPTURE(r);
    CHECK(dense.number(r, "relative_spectral_error") > 1e100);
    CHECK(std::isfinite(dense.number(r, "relative_spectral_error")));
    CHECK(std::isinf(dense.number(r, "spectral_error")));  // e^700 · 1e206 exceeds double
    CHECK(std::isinf(lean.number(r, "spectral_error")));
    CHECK(lean.number(r, "relative_spectral_error") ==
          doctest::Approx(dense.number(r, "relative_spectral_error")).epsilon(1e-10));
    CHECK(std::isinf(dense.number(r, "frobenius_error")));
    CHECK(std::isinf(lean.number(r, "frobenius_error")));
    CHECK(lean.number(r, "output_relative_error") == dense.number(r, "output_relative_error"));
  }
}

TEST_CASE("sweep and spectrum --device cuda: exit 2 and no file where no CUDA device is usable") {
  TempDir dir("device");
  const auto input = make_dump(dir);
  const auto output = dir / "gpu.h5";
  auto args = sweep_args(input, output, {"--strategy", "step", "--landmarks", "4", "--pinv", "exact", "-q"});
  args.insert(args.end(), {"--device", "cuda"});
  if (cuda_available()) {
    MESSAGE("a CUDA device is present: --device cuda must run and agree with the CPU");
    REQUIRE(run_cli(args).status == 0);
    auto cpu_args = sweep_args(input, dir / "cpu.h5",
                               {"--strategy", "step", "--landmarks", "4", "--pinv", "exact", "-q"});
    REQUIRE(run_cli(cpu_args).status == 0);
    const Table gpu = read_sweep(output), cpu = read_sweep(dir / "cpu.h5");
    REQUIRE(gpu.rows.size() == cpu.rows.size());
    for (std::size_t r = 0; r < gpu.rows.size(); ++r)
      CHECK(gpu.number(r, "output_relative_error") ==
            doctest::Approx(cpu.number(r, "output_relative_error")).epsilon(1e-6).scale(1e-12));
    // spectrum: dense path (kernel blocks on the GPU) and matrix-free path (GPU Lanczos products).
    const auto singular_values_of = [&](const fs::path& file_name, const std::string& name) {
      cli::Handle file = cli::open_file(file_name, false);
      cli::Handle group = cli::open_group(file.get(), "spectra/00");
      cli::Handle dataset = cli::open_dataset(group.get(), name);
      hsize_t count = 1;
      for (hsize_t dim : cli::dataset_dims(dataset.get())) count *= dim;
      std::vector<double> values(count);
      H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
      return values;
    };
    for (const char* memory : {"4G", "1K"}) {
      CAPTURE(memory);
      for (const char* device : {"cpu", "cuda"})
        REQUIRE(run_cli({"spectrum", "-i", input, "-o", dir / (std::string(device) + memory + ".h5"), "--top",
                         "6", "--memory", memory, "--device", device, "-q"})
                    .status == 0);
      for (const char* name : {"sv_G", "sv_Gext"}) {
        const auto on_gpu = singular_values_of(dir / (std::string("cuda") + memory + ".h5"), name);
        const auto on_cpu = singular_values_of(dir / (std::string("cpu") + memory + ".h5"), name);
        REQUIRE(on_gpu.size() == on_cpu.size());
        for (std::size_t i = 0; i < on_gpu.size(); ++i)
          CHECK(on_gpu[i] == doctest::Approx(on_cpu[i]).epsilon(1e-8).scale(1e-12 * on_cpu[0]));
      }
    }
    return;
  }
  const std::string expected = cuda_compiled() ? "--device cuda: no CUDA device found"
                                               : "--device cuda: this build has no CUDA backend";
  const auto sweep_run = run_cli(args);
  CHECK(sweep_run.status == 2);
  CHECK(sweep_run.err.find(expected) != std::string::npos);
  CHECK_FALSE(fs::exists(output));
  CHECK_FALSE(fs::exists(output + ".partial"));
  const auto spectrum_run =
      run_cli({"spectrum", "-i", input, "-o", dir / "spectrum.h5", "--device", "cuda", "-q"});
  CHECK(spectrum_run.status == 2);
  CHECK(spectrum_run.err.find(expected) != std::string::npos);
  CHECK_FALSE(fs::exists(dir / "spectrum.h5"));
}

namespace {

/// Writes a one-layer, one-head dump of the given tokens (row-major [1, 1, N, ·]) with its attributes.
void write_head_dump(const std::string& path, const Matrix<double>& q, const Matrix<double>& k,
                     const Matrix<double>& v, double scale, std::array<Index, 2> window = {},
                     Index prefix_tokens = 0) {
  cli::AtomicFile file(path, test_dump);
  cli::write_dump_header(file.get(), "test");
  cli::DumpLayerData<double> data;
  data.tokens = q.rows();
  data.dim = q.cols();
  data.value_dim = v.cols();
  const auto row_major = [](const Matrix<double>& m) {
    std::vector<double> out;
    for (Index i = 0; i < m.rows(); ++i)
      for (Index j = 0; j < m.cols(); ++j) out.push_back(m(i, j));
    return out;
  };
  data.q = row_major(q);
  data.k = row_major(k);
  data.v = row_major(v);
  data.scale = scale;
  data.window = window;
  data.prefix_tokens = prefix_tokens;
  cli::write_dump_layer(file.get(), "00", data);
  file.commit();
}

/// The skipped attribute of a results file.
std::string skipped_attribute(const std::string& path) {
  cli::Handle file = cli::open_file(path, false);
  return cli::read_string_attribute(file.get(), "skipped");
}

}  // namespace

TEST_CASE("sweep: the default grid runs on a dump without a token window, leaving window-pool out once") {
  TempDir dir("default_grid");
  const auto input = dir / "n300.h5";
  write_head_dump(input, random_matrix<double>(300, 8, 1, 0.5), random_matrix<double>(300, 8, 2, 0.5),
                  random_matrix<double>(300, 4, 3), 1 / std::sqrt(8.0));
  const auto output = dir / "out.h5";
  const auto run = run_cli({"sweep", "-i", input, "-o", output});
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  // 2 kernels × 7 landmark counts (8, 16, …, 256 and N = 300) × 4 pseudoinverses per strategy, six
  // strategies; m = N only for the first (segment-means: 5 × 2 × 4 points left out), and window-pool's other
  // 48 points are left out.
  const std::string reason = "window-pool needs a token window";
  CHECK(run.err.find("skipping 48 grid points: " + reason) != std::string::npos);
  CHECK(run.err.find(reason) == run.err.rfind(reason));  // said once
  CHECK(run.err.find("skipping 40 grid points: m = N of the default landmark counts") != std::string::npos);
  const Table table = read_sweep(output);
  CHECK(table.rows.size() == 56 + 4 * 48);
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CHECK(table.text(r, "strategy") != "window-pool");
    if (table.number(r, "landmarks") == 300) CHECK(table.text(r, "strategy") == "segment-means");
  }
  CHECK(skipped_attribute(output).find("skipping 48 grid points: " + reason) != std::string::npos);
  // The default landmark counts of each layer end at its N (given counts above N are an error, see the
  // bad-options case), and at m = N with the exact pseudoinverse Ĝ = G (Corollary 2.2).
  const auto small = make_dump(dir);
  const auto few = run_cli({"sweep", "-i", small, "-o", dir / "few.h5", "--kernel", "exp", "--strategy",
                            "step", "--pinv", "exact", "-q"});
  CAPTURE(few.err);
  REQUIRE(few.status == 0);
  const Table small_table = read_sweep(dir / "few.h5");
  std::set<double> counts;
  for (std::size_t r = 0; r < small_table.rows.size(); ++r) {
    counts.insert(small_table.number(r, "landmarks"));
    if (small_table.number(r, "landmarks") == 40)
      CHECK(small_table.number(r, "relative_spectral_error") < 1e-10);
  }
  CHECK(counts == std::set<double>{8, 16, 32, 40});
  CHECK(small_table.rows.size() == 2 * 4);
}

TEST_CASE(
    "sweep: a ViT-like dump (N = 197, prefix_tokens = 1, window 14x14) is accepted by reader and sweep") {
  TempDir dir("vit");
  const auto input = dir / "vit.h5";
  write_head_dump(input, random_matrix<double>(197, 8, 4, 0.5), random_matrix<double>(197, 8, 5, 0.5),
                  random_matrix<double>(197, 4, 6), 1 / std::sqrt(8.0), {14, 14}, 1);
  const auto dump = cli::inspect_dump(input);
  CHECK(dump.layers[0].prefix_tokens == 1);
  CHECK(dump.layers[0].window == std::array<Index, 2>{14, 14});
  const auto heads = cli::read_layer_heads<double>(dump, dump.layers[0]);
  CHECK(heads[0].prefix_tokens == 1);
  CHECK(heads[0].window == std::array<Index, 2>{14, 14});
  const auto output = dir / "out.h5";
  const auto run = run_cli(
      {"sweep", "-i", input, "-o", output, "--kernel", "exp", "--landmarks", "4,9", "--pinv", "exact", "-q"});
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  const Table table = read_sweep(output);
  std::size_t pooled = 0;
  for (std::size_t r = 0; r < table.rows.size(); ++r) pooled += table.text(r, "strategy") == "window-pool";
  // Window pooling of the 196 grid tokens, the prefix token a landmark of its own.
  CHECK(pooled == 2);
  CHECK(table.rows.size() == 4 * 2);
  // A window that does not hold the N − prefix_tokens grid tokens, or a prefix outside [0, N), is rejected.
  write_head_dump(dir / "bad.h5", random_matrix<double>(197, 8, 4), random_matrix<double>(197, 8, 5),
                  random_matrix<double>(197, 4, 6), 0.3, {14, 14}, 0);
  CHECK(throws_naming([&] { cli::inspect_dump(dir / "bad.h5"); }, "prefix_tokens = 197"));
  write_head_dump(dir / "bad2.h5", random_matrix<double>(20, 8, 4), random_matrix<double>(20, 8, 5),
                  random_matrix<double>(20, 4, 6), 0.3, {}, 20);
  CHECK(throws_naming([&] { cli::inspect_dump(dir / "bad2.h5"); }, "prefix_tokens"));
}

TEST_CASE("sweep: heads with logits of a few hundred give finite rows, beyond double's exp range exit 2") {
  TempDir dir("logits");
  // Tokens with a common last coordinate: every logit is about `largest` (docs/mathematics.md §7: G =
  // e^{L}·G̃).
  const auto dump_with_logits = [&](const std::string& name, double largest) {
    Matrix<double> q(60, 5), k(60, 5);
    q << random_matrix<double>(60, 4, 7, 0.5), Vector<double>::Constant(60, std::sqrt(largest));
    k << random_matrix<double>(60, 4, 7, 0.5), Vector<double>::Constant(60, std::sqrt(largest));
    write_head_dump(dir / name, q, k, random_matrix<double>(60, 3, 9), 1.0);
    return dir / name;
  };
  const std::vector<std::string> grid_options = {
      "--kernel", "exp",    "--strategy", "segment-means,step", "--landmarks",
      "4",        "--pinv", "exact",      "--method",           "pnp-nystra,nystromformer,exact",
      "-q"};
  for (const char* precision : {"float", "double"}) {
    CAPTURE(precision);
    const auto input = dump_with_logits("large.h5", 400);
    const auto output = dir / (std::string(precision) + ".h5");
    auto args = sweep_args(input, output, grid_options);
    args.insert(args.end(), {"--precision", precision});
    const auto run = run_cli(args);
    CAPTURE(run.err);
    REQUIRE(run.status == 0);
    const Table table = read_sweep(output);
    for (std::size_t r = 0; r < table.rows.size(); ++r) {
      CHECK(table.number(r, "log_shift") > 400);
      CHECK(std::isfinite(table.number(r, "output_relative_error")));
      if (table.text(r, "method") == "exact") continue;
      CHECK(std::isfinite(table.number(r, "spectral_error")));
      CHECK(std::isfinite(table.number(r, "relative_spectral_error")));
      // Of G ≈ e^400: the absolute error carries the scale, the relative one does not.
      if (table.text(r, "method") == "pnp-nystra") CHECK(table.number(r, "sigma1_ext") > std::exp(400.0));
    }
  }
  const auto huge = dump_with_logits("huge.h5", 800);
  const auto output = dir / "huge_out.h5";
  const auto run = run_cli(sweep_args(huge, output, grid_options));
  CHECK(run.status == 2);
  CHECK(run.err.find("/layers/00 batch 0 head 0") != std::string::npos);
  CHECK(run.err.find("largest logit 8") != std::string::npos);
  CHECK_FALSE(fs::exists(output));
  CHECK_FALSE(fs::exists(output + ".partial"));
}

TEST_CASE("sweep: a run killed (SIGKILL) right after it starts leaves a readable partial file") {
  TempDir dir("killed");
  const auto input = make_dump(dir);
  const auto output = dir / "out.h5";
  const std::string program = std::string(NYSTROM_BINARY_DIR) + "/bin/nystrom";
  REQUIRE(fs::exists(program));
  std::vector<std::string> args = sweep_args(input, output);
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  // Kill it the moment the partial file appears (before its first row, at the latest right after it).
  const auto start = std::chrono::steady_clock::now();
  while (!fs::exists(output + ".partial") &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  kill(child, SIGKILL);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(fs::exists(output + ".partial"));
  CHECK_NOTHROW(read_sweep(output + ".partial"));
  const auto rerun = run_cli(sweep_args(input, output));
  CAPTURE(rerun.err);
  CHECK(rerun.status == 0);
  CHECK(rerun.err.find("discarding") == std::string::npos);
  CHECK(read_sweep(output).rows.size() == 2 * 2 * 3 * 2 * 5);
}

TEST_CASE("sweep: a point that fails midway removes the partial file of its run, not one it resumed") {
  TempDir dir("failed-midway");
  const auto input = make_dump(dir);
  const auto output = dir / "out.h5";
  // Performer's features are valid at any count; this many cannot be allocated (an error only once computed).
  const std::vector<std::string> grid = {"--kernel",    "exp",       "--strategy", "segment-means",
                                         "--method",    "performer", "--features", "9223372036854775807",
                                         "--landmarks", "4,8",       "-q"};
  const auto failed = run_cli(sweep_args(input, output, grid));
  CHECK(failed.status == 2);
  CHECK(failed.err.find("out of memory") != std::string::npos);
  CHECK_FALSE(fs::exists(output));
  CHECK_FALSE(fs::exists(output + ".partial"));
  // The directories created for the output go too.
  CHECK(run_cli(sweep_args(input, dir / "made/for/out.h5", grid)).status == 2);
  CHECK_FALSE(fs::exists(dir / "made"));
  // An interrupted run's partial file stays, with its rows, when the run resuming it fails.
  const std::vector<std::string> valid = {"--kernel",     "exp",        "--strategy",  "segment-means",
                                          "--method",     "pnp-nystra", "--landmarks", "4,8",
                                          "--stop-after", "1",          "-q"};
  REQUIRE(run_cli(sweep_args(input, output, valid)).status == 128 + SIGINT);
  REQUIRE(read_sweep(output + ".partial").rows.size() == 1);
  CHECK(run_cli(sweep_args(input, output, grid)).status == 2);
  CHECK_FALSE(fs::exists(output));
  CHECK(read_sweep(output + ".partial").rows.size() == 1);
}

TEST_CASE("sweep: an output with a column of fixed size is refused before it is copied, and left intact") {
  TempDir dir("fixed_column");
  const auto input = make_dump(dir);
  const auto output = dir / "out.h5";
  const std::vector<std::string> grid = {"--kernel", "exp",        "--strategy",  "step", "--pinv", "exact",
                                         "--method", "pnp-nystra", "--landmarks", "4",    "-q"};
  REQUIRE(run_cli(sweep_args(input, output, grid)).status == 0);
  // A column rewritten by another tool as a contiguous dataset (h5py's default) cannot be extended.
  {
    const Table table = read_sweep(output);
    std::vector<double> values;
    for (std::size_t r = 0; r < table.rows.size(); ++r) values.push_back(table.number(r, "spectral_error"));
    cli::Handle file = cli::open_file(output, true);
    REQUIRE(H5Ldelete(file.get(), "sweep/spectral_error", H5P_DEFAULT) >= 0);
    cli::write_array(file.get(), "sweep/spectral_error", {values.size()}, values.data());
  }
  const auto before = file_bytes(output);
  // Was "error: HDF5: extend spectral_error failed", exit 1.
  auto more = grid;
  more[1] = "exp,laplacian";  // --kernel: new points to append
  const auto run = run_cli(sweep_args(input, output, more));
  CAPTURE(run.err);
  CHECK(run.status == 2);
  CHECK(run.err.find(output + ": /sweep/spectral_error: a column of fixed size") != std::string::npos);
  CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  CHECK(file_bytes(output) == before);
  CHECK_FALSE(fs::exists(output + ".partial"));
  // With nothing to append, the file is read as it is.
  CHECK(run_cli(sweep_args(input, output, grid)).status == 0);
  CHECK(file_bytes(output) == before);
}

TEST_CASE("sweep: a repeated list item is one grid point, not a duplicate row") {
  TempDir dir("repeated_items");
  const auto input = make_dump(dir);
  const auto once = dir / "once.h5", twice = dir / "twice.h5";
  REQUIRE(
      run_cli(sweep_args(input, once,
                         {"--kernel", "exp,laplacian", "--lambda", "4", "--strategy", "step", "--landmarks",
                          "4", "--pinv", "exact", "--method", "pnp-nystra", "--layers", "00", "-q"}))
          .status == 0);
  REQUIRE(run_cli(sweep_args(input, twice,
                             {"--kernel", "exp,laplacian,exp", "--lambda", "4,4.0", "--strategy",
                              "step, step", "--landmarks", "4,4", "--pinv", "exact,exact", "--method",
                              "pnp-nystra,pnp-nystra", "--layers", "00,00", "-q"}))
              .status == 0);
  const Table a = read_sweep(once), b = read_sweep(twice);
  REQUIRE(a.rows.size() == 4);  // 2 heads × 2 kernels
  CHECK(b.rows.size() == a.rows.size());
}

TEST_CASE("sweep: a core that overflows is a status row (non-finite), not an aborted sweep") {
  // Under a Laplacian kernel of small λ (here 0.0005) a landmark pair lies far closer than any token pair:
  // the core's entries κ(q̄_a, k̄_b)/max_j κ(q̄_a, k_j) reach e^hundreds and overflow even in double.
  TempDir dir("core_overflow");
  const auto input = make_dump(dir);
  const auto output = dir / "out.h5";
  const auto run = run_cli(sweep_args(input, output,
                                      {"--kernel", "laplacian", "--lambda", "0.0005,4", "--strategy",
                                       "segment-means", "--landmarks", "8", "--pinv", "exact", "-q"}));
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  CHECK_FALSE(fs::exists(output + ".partial"));
  const Table table = read_sweep(output);
  REQUIRE(table.rows.size() == 4);  // 2 heads × 2 λ
  for (std::size_t row = 0; row < table.rows.size(); ++row) {
    CAPTURE(row);
    if (table.number(row, "kernel_param") == 4) {
      CHECK(table.text(row, "pinv_status") == "converged");
      CHECK(std::isfinite(table.number(row, "spectral_error")));
    } else {
      CHECK(table.text(row, "pinv_status") == "non-finite");
      CHECK(std::isnan(table.number(row, "spectral_error")));
      CHECK(std::isnan(table.number(row, "output_relative_error")));
      CHECK(std::isnan(table.number(row, "output_max_error")));
    }
  }
}

TEST_CASE("spectrum: logits of a few hundred give the singular values of G itself, dense and matrix-free") {
  TempDir dir("spectrum_logits");
  const Index n = 60;
  Matrix<double> q(n, 5);
  q << random_matrix<double>(n, 4, 7, 0.5), Vector<double>::Constant(n, std::sqrt(400.0));
  const auto input = dir / "large.h5";
  write_head_dump(input, q, q, random_matrix<double>(n, 3, 9), 1.0);
  // The oracle in long double: G = exp(QQᵀ) with entries near e^400, no shift, a full JacobiSVD.
  using LongMatrix = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
  const LongMatrix logits = q.cast<long double>() * q.cast<long double>().transpose();
  const auto sigma = Eigen::JacobiSVD<LongMatrix>(logits.array().exp().matrix()).singularValues();
  for (const char* memory : {"4G", "1K"}) {
    CAPTURE(memory);
    const auto output = dir / (std::string("spectrum") + memory + ".h5");
    REQUIRE(run_cli({"spectrum", "-i", input, "-o", output, "--top", "6", "--memory", memory, "-q"}).status ==
            0);
    cli::Handle file = cli::open_file(output, false);
    cli::Handle group = cli::open_group(file.get(), "spectra/00");
    const auto read = [&](const std::string& name, std::size_t count) {
      cli::Handle dataset = cli::open_dataset(group.get(), name);
      std::vector<double> values(count);
      H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
      return values;
    };
    const auto sv = read("sv_G", 6), decay = read("decay_G", 6), shift = read("log_shift", 1);
    CHECK(shift[0] == doctest::Approx(double(logits.maxCoeff())).epsilon(1e-12));
    for (Index j = 0; j < 6; ++j) {
      CAPTURE(j);
      CHECK(std::isfinite(sv[j]));
      CHECK(std::abs((long double)sv[j] - sigma(j)) <= 1e-9L * sigma(0));
      CHECK(decay[j] == doctest::Approx(double(sigma(j) / sigma(0))).epsilon(1e-9).scale(1e-9));
    }
  }
}

TEST_CASE("sweep and spectrum: a dump's bias and mask are not applied, and attention_reference says so") {
  TempDir dir("attention_reference");
  const auto plain = dir / "plain.h5", scored = dir / "scored.h5";
  for (const auto& path : {plain, scored})
    REQUIRE(run_cli({"synth", "-o", path, "--layers", "2", "--batch", "2", "--heads", "2", "--tokens", "16",
                     "--dim", "4", "--value-dim", "3", "--dtype", "float64", "--seed", "5"})
                .status == 0);
  {  // A position bias [H, N, N] on layer 00 and a shift mask (0 / −100) [B, N, N] on layer 01.
    cli::Handle file = cli::open_file(scored, true);
    const Matrix<double> bias = random_matrix<double>(2 * 16, 16, 7, 3.0);
    std::vector<double> bias_values(bias.data(), bias.data() + bias.size());
    std::vector<double> mask_values(2 * 16 * 16, 0.0);
    for (std::size_t i = 0; i < mask_values.size(); i += 3) mask_values[i] = -100;
    cli::Handle layer00 = cli::open_group(file.get(), "layers/00");
    cli::write_array(layer00.get(), "bias", {2, 16, 16}, bias_values.data());
    cli::Handle layer01 = cli::open_group(file.get(), "layers/01");
    cli::write_array(layer01.get(), "mask", {2, 16, 16}, mask_values.data());
  }
  const std::string kernel_text = "kernel(q, k) of each head's q and k alone (exp: exp(s q k^T)); ";
  const std::string not_applied =
      kernel_text +
      "not the model's attention softmax(s q k^T + bias + mask): bias not applied "
      "(layers 00), mask not applied (layers 01)";
  const auto reference = [](const std::string& path) {
    cli::Handle file = cli::open_file(path, false);
    return cli::read_string_attribute(file.get(), "attention_reference");
  };
  const std::vector<std::string> small_grid = {
      "--kernel", "exp,laplacian", "--strategy", "step", "--landmarks", "4", "--pinv", "exact"};
  std::map<std::string, Table> sweeps;
  for (const auto& input : {plain, scored}) {
    const auto run = run_cli(sweep_args(input, input + ".sweep.h5", small_grid));
    CAPTURE(run.err);
    REQUIRE(run.status == 0);
    CHECK((run.err.find("nystrom sweep: attention reference: " + not_applied + "\n") != std::string::npos) ==
          (input == scored));
    CHECK(reference(input + ".sweep.h5") ==
          (input == scored ? not_applied : kernel_text + "no layer has a bias or mask"));
    sweeps[input] = read_sweep(input + ".sweep.h5");
  }
  check_same_results(sweeps[plain], sweeps[scored]);  // bias and mask change nothing
  // A layer without them: the same reference as a dump without any.
  REQUIRE(run_cli(sweep_args(scored, dir / "one.h5",
                             {"--layers", "01", "--kernel", "exp", "--strategy", "step", "--landmarks", "4",
                              "--pinv", "exact", "-q"}))
              .status == 0);
  CHECK(reference(dir / "one.h5") == kernel_text +
                                         "not the model's attention softmax(s q k^T + bias + mask): "
                                         "mask not applied (layers 01)");

  const auto run = run_cli({"spectrum", "-i", scored, "-o", dir / "spectrum.h5", "--landmarks", "4",
                            "--strategy", "step", "--top", "16"});
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  CHECK(run.err.find("nystrom spectrum: attention reference: " + not_applied + "\n") != std::string::npos);
  CHECK(reference(dir / "spectrum.h5") == not_applied);
  // The oracle: σ(exp(s q kᵀ)) of every head, without the bias.
  const auto dump = cli::inspect_dump(scored);
  for (std::size_t l = 0; l < 2; ++l) {
    const auto heads = cli::read_layer_heads<double>(dump, dump.layers[l]);
    const Doubles sv = read_doubles(dir / "spectrum.h5", "spectra/" + dump.layers[l].name + "/sv_G");
    const Kernel kernel = Kernel::exponential(dump.layers[l].scale);
    for (std::size_t h = 0; h < heads.size(); ++h) {
      const Vector<double> expected =
          Eigen::JacobiSVD<Matrix<double>>(kernel.block<double>(heads[h].q, heads[h].k)).singularValues();
      for (Index i = 0; i < 16; ++i)
        CHECK(sv.values[h * 16 + i] ==
              doctest::Approx(expected(i)).epsilon(1e-10).scale(1e-12 * expected(0)));
    }
  }
}
