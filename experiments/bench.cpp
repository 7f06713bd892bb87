// `nystrom bench`: wall time of exact attention against every approximation of approximation.hpp over N (per
// head, d = dv = 64 by default, float32 and float64, 1 and 2 threads), and the per-step timings of PnP-Nystra
// Algorithm 1 (paper Table 1). Writes /bench and /bench_steps tables (FORMATS.md §2 conventions) and prints
// both.
//
// OpenBLAS picks its kernels when the library is loaded, from OPENBLAS_CORETYPE; the default shell presets
// Haswell, which halves the SGEMM peak on AVX-512 machines. With --blas-core set (default SkylakeX) and a
// different environment value, the program re-executes itself with the variable set, and logs the core in
// use.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <limits>
#include <random>

#include "hdf5_io.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/threads.hpp"
#include "subcommands.hpp"

namespace nystrom::cli {

namespace {

constexpr const char* reexec_marker = "NYSTROM_BENCH_REEXEC";

struct BenchSettings {
  std::vector<Index> sizes;
  Index dim = 64, value_dim = 64;
  std::vector<std::string> dtypes;
  std::vector<Index> thread_counts;
  std::vector<Method> methods;
  Index landmarks = 16;  ///< m of pnp-nystra, nystromformer, cur, symmetric-nystrom
  Index features = 64;   ///< r of performer
  Index projected = 64;  ///< k of linformer
  double min_seconds = 0.2;
  int max_repeats = 50;
  bool steps = true;
  std::uint64_t seed = 0;
  std::string blas_core = "SkylakeX";
  std::string output = "results/bench.h5";
  bool quiet = false;
};

/// Re-executes the program with OPENBLAS_CORETYPE = `core` when it differs (once; OpenBLAS reads it at load
/// time).
void ensure_blas_core(const std::string& core, const Invocation& invocation) {
  if (core.empty() || core == "default") return;
  const char* current = std::getenv("OPENBLAS_CORETYPE");
  if (current && core == current) return;
  if (std::getenv(reexec_marker)) {
    std::cerr << "nystrom bench: warning: OPENBLAS_CORETYPE is still '" << (current ? current : "") << "'\n";
    return;
  }
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv(reexec_marker, "1", 1);
  std::vector<std::string> arguments = {"nystrom", invocation.subcommand};
  arguments.insert(arguments.end(), invocation.args.begin(), invocation.args.end());
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  std::cout.flush();
  execv("/proc/self/exe", argv.data());
  std::cerr << "nystrom bench: warning: could not re-execute with OPENBLAS_CORETYPE=" << core << "\n";
}

/// Minimum wall time of `work` over repeats until `min_seconds` have been spent (at least 2 runs after a
/// warm-up, except for runs longer than min_seconds, timed once after the warm-up).
template <class Work>
double time_min(Work&& work, const BenchSettings& settings) {
  using clock = std::chrono::steady_clock;
  const auto seconds_of = [&] {
    const auto start = clock::now();
    work();
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  double best = seconds_of();  // warm-up (also times it)
  double spent = best;
  if (best > settings.min_seconds) return std::min(best, seconds_of());
  for (int repeat = 0; repeat < settings.max_repeats && (repeat < 2 || spent < settings.min_seconds);
       ++repeat) {
    const double t = seconds_of();
    best = std::min(best, t);
    spent += t;
  }
  return best;
}

/// Nominal floating-point operations of one head (multiply and add counted separately; exp not counted).
double nominal_flops(Method method, double n, double d, double dv, const BenchSettings& settings) {
  const double m = double(settings.landmarks);
  switch (method) {
    case Method::exact:
      return 2 * n * n * d + 2 * n * n * dv;
    case Method::pnp_nystra:
    case Method::nystromformer:
    case Method::cur:
    case Method::symmetric_nystrom:
      return 2 * n * m * (2 * d + 2 * dv + m);
    case Method::performer:
      return 4 * n * double(settings.features) * (d + dv);
    case Method::linformer:
      return 4 * n * double(settings.projected) * (d + dv);
  }
  return 0;
}

ApproximationOptions method_options(const BenchSettings& settings) {
  ApproximationOptions options;
  options.kernel = Kernel::exponential(1 / std::sqrt(double(settings.dim)));
  options.nystrom.landmarks.count = settings.landmarks;
  options.symmetric.landmarks.count = settings.landmarks;
  options.nystromformer.landmarks = settings.landmarks;
  options.cur.selection.count = settings.landmarks;
  options.performer.features = settings.features;
  options.performer.seed = settings.seed;
  options.linformer.projected = settings.projected;
  options.linformer.seed = settings.seed;
  return options;
}

std::vector<Column> bench_columns() {
  return {{"method", ColumnType::text, true},
          {"n", ColumnType::int64, true},
          {"d", ColumnType::int64, true},
          {"dv", ColumnType::int64, true},
          {"dtype", ColumnType::text, true},
          {"threads", ColumnType::int64, true},
          {"landmarks", ColumnType::int64, true},
          {"seconds", ColumnType::float64, false},
          {"flops", ColumnType::float64, false},
          {"gflops", ColumnType::float64, false},
          {"speedup_vs_exact", ColumnType::float64, false},
          {"output_relative_error", ColumnType::float64, false},
          {"blas_core", ColumnType::text, false}};
}

std::vector<Column> step_columns() {
  return {{"step", ColumnType::text, true},         {"step_index", ColumnType::int64, true},
          {"n", ColumnType::int64, true},           {"d", ColumnType::int64, true},
          {"dtype", ColumnType::text, true},        {"threads", ColumnType::int64, true},
          {"landmarks", ColumnType::int64, true},   {"seconds", ColumnType::float64, false},
          {"fraction", ColumnType::float64, false}, {"blas_core", ColumnType::text, false}};
}

/// The parameter reported in the `landmarks` column: m, r or k.
Index size_parameter(Method method, const BenchSettings& settings) {
  switch (method) {
    case Method::performer:
      return settings.features;
    case Method::linformer:
      return settings.projected;
    case Method::exact:
      return 0;
    default:
      return settings.landmarks;
  }
}

template <class T>
Matrix<T> random_tokens(Index rows, Index cols, std::mt19937_64& engine) {
  std::normal_distribution<double> normal;
  Matrix<T> out(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) out(i, j) = T(normal(engine));
  return out;
}

/// PnP-Nystra Algorithm 1 step by step (segment-means landmarks, exact pinv of the m×m core, no row-max
/// scaling): the seven timed steps of the paper's Table 1.
template <class T>
std::vector<std::pair<std::string, double>> time_steps(const Matrix<T>& Q, const Matrix<T>& K,
                                                       const Matrix<T>& V, const BenchSettings& settings) {
  const Kernel kernel = Kernel::exponential(1 / std::sqrt(double(settings.dim)));
  const Index m = settings.landmarks;
  Matrix<T> q_bar, k_bar, left, core, upper, upper_values, p, out;
  Vector<T> upper_ones;
  PinvResult<T> pinv;
  PinvOptions pinv_options;
  std::vector<std::pair<std::string, double>> steps;
  const auto step = [&](const char* name, auto&& work) {
    steps.emplace_back(name, time_min(work, settings));
  };
  step("1 landmarks", [&] {
    q_bar = segment_means<T>(Q, m);
    k_bar = segment_means<T>(K, m);
  });
  step("2 G_L", [&] { left = kernel.block<T>(Q, k_bar); });
  step("3 G_A", [&] { core = kernel.block<T>(q_bar, k_bar); });
  step("4 G_U", [&] { upper = kernel.block<T>(q_bar, K); });
  step("5 pinv", [&] { pinv = pseudoinverse<T>(core, pinv_options); });
  step("6 G_U V, G_U 1", [&] {
    upper_values.noalias() = upper * V;
    upper_ones = upper.rowwise().sum();
  });
  step("7 P, products, normalization", [&] {
    p.noalias() = left * pinv.z;
    out.noalias() = p * upper_values;
    const Vector<T> normalizer = p * upper_ones;
    out = normalizer.cwiseInverse().asDiagonal() * out;
  });
  return steps;
}

struct BenchTables {
  ResultsTable bench, steps;
};

template <class T>
void run_configuration(Index n, Index threads_count, const BenchSettings& settings, BenchTables& tables,
                       const std::string& dtype) {
  set_threads(int(threads_count));
  std::mt19937_64 engine(settings.seed + std::uint64_t(n));
  const Matrix<T> Q = random_tokens<T>(n, settings.dim, engine);
  const Matrix<T> K = random_tokens<T>(n, settings.dim, engine);
  const Matrix<T> V = random_tokens<T>(n, settings.value_dim, engine);
  const ApproximationOptions options = method_options(settings);
  const std::string core = blas_core();

  Matrix<T> exact;
  double exact_seconds = std::numeric_limits<double>::quiet_NaN();
  std::vector<Method> order = {Method::exact};  // exact first: the speedups and errors refer to it
  for (auto method : settings.methods)
    if (method != Method::exact) order.push_back(method);
  const bool want_exact =
      std::find(settings.methods.begin(), settings.methods.end(), Method::exact) != settings.methods.end();
  const auto record = [&](Method method, double seconds, const Matrix<T>& output) {
    const double flops =
        nominal_flops(method, double(n), double(settings.dim), double(settings.value_dim), settings);
    const double error = output_errors<T>(exact, output).relative_frobenius;
    const double speedup = exact_seconds / seconds;
    tables.bench.append({to_string(method), std::int64_t(n), std::int64_t(settings.dim),
                         std::int64_t(settings.value_dim), dtype, std::int64_t(threads_count),
                         std::int64_t(size_parameter(method, settings)), seconds, flops,
                         flops / seconds * 1e-9, speedup, error, core});
    if (!settings.quiet)
      std::cout << std::left << std::setw(18) << to_string(method) << std::right << std::setw(7) << n
                << std::setw(9) << dtype << std::setw(4) << threads_count << std::setw(13) << std::scientific
                << std::setprecision(3) << seconds << std::fixed << std::setprecision(1) << std::setw(10)
                << flops / seconds * 1e-9 << std::setw(10) << speedup << std::scientific
                << std::setprecision(2) << std::setw(11) << error << std::defaultfloat << "\n";
  };
  for (auto method : order) {
    if (method != Method::exact &&
        (settings.landmarks > n || (method == Method::linformer && settings.projected > n)))
      continue;
    Matrix<T> output;
    const double seconds =
        time_min([&] { output = approximate_attention<T>(method, Q, K, V, options).output; }, settings);
    if (method == Method::exact) {
      exact = output;
      exact_seconds = seconds;
      if (!want_exact) continue;
    }
    record(method, seconds, output);
  }
  if (!settings.steps || settings.landmarks > n) return;
  const auto steps = time_steps<T>(Q, K, V, settings);
  double total = 0;
  for (const auto& [name, seconds] : steps) total += seconds;
  for (size_t i = 0; i < steps.size(); ++i)
    tables.steps.append({steps[i].first, std::int64_t(i + 1), std::int64_t(n), std::int64_t(settings.dim),
                         dtype, std::int64_t(threads_count), std::int64_t(settings.landmarks),
                         steps[i].second, steps[i].second / total, core});
  if (!settings.quiet) {
    std::cout << "  pnp-nystra steps (m = " << settings.landmarks << "):";
    for (const auto& [name, seconds] : steps)
      std::cout << "  [" << name << "] " << std::scientific << std::setprecision(2) << seconds;
    std::cout << std::defaultfloat << "\n";
  }
}

}  // namespace

int run_bench(const Invocation& invocation) {
  po::options_description description("bench options");
  std::string sizes = "256:16384:x2", dtypes = "float32,float64", thread_list = "1,2",
              methods = "exact,pnp-nystra,nystromformer,cur,symmetric-nystrom,performer,linformer";
  BenchSettings settings;
  // clang-format off
  description.add_options()
    ("n", po::value(&sizes)->default_value(sizes), "token counts N (list or range first:last:xF)")
    ("d", po::value(&settings.dim)->default_value(settings.dim), "query/key dimension d")
    ("dv", po::value(&settings.value_dim)->default_value(settings.value_dim), "value dimension dv")
    ("dtype", po::value(&dtypes)->default_value(dtypes), "scalar types: float32, float64")
    ("threads-list", po::value(&thread_list)->default_value(thread_list), "thread counts to time")
    ("methods", po::value(&methods)->default_value(methods), "methods (approximation.hpp names)")
    ("landmarks", po::value(&settings.landmarks)->default_value(settings.landmarks),
     "m of pnp-nystra, nystromformer, cur, symmetric-nystrom")
    ("features", po::value(&settings.features)->default_value(settings.features), "r of performer")
    ("projected", po::value(&settings.projected)->default_value(settings.projected), "k of linformer")
    ("min-seconds", po::value(&settings.min_seconds)->default_value(settings.min_seconds),
     "time each point for at least this long (minimum over repeats is reported)")
    ("steps", po::value(&settings.steps)->default_value(settings.steps), "time PnP-Nystra Algorithm 1 step by step")
    ("seed", po::value(&settings.seed)->default_value(settings.seed), "seed of the Gaussian Q, K, V")
    ("blas-core", po::value(&settings.blas_core)->default_value(settings.blas_core),
     "OPENBLAS_CORETYPE to run under (re-executes when the environment differs; 'default': keep)")
    ("output,o", po::value(&settings.output)->default_value(settings.output), "results file (HDF5)")
    ("quiet", po::bool_switch(&settings.quiet), "no table on stdout");
  // clang-format on
  add_common_options(description, false);
  po::variables_map values;
  if (!parse_options(invocation, "[options]", description, {}, values)) return 0;
  ensure_blas_core(settings.blas_core, invocation);

  settings.sizes = parse_index_list(sizes, "n");
  settings.thread_counts = parse_index_list(thread_list, "threads-list");
  settings.methods = parse_enum_list<Method>(methods, "methods", method_from_string);
  settings.dtypes = split_list(dtypes, "dtype");
  for (const auto& dtype : settings.dtypes)
    require(dtype == "float32" || dtype == "float64",
            describe("option --dtype: '", dtype, "' (expected float32 or float64)"));
  require(settings.dim >= 1 && settings.value_dim >= 1,
          describe("options --d = ", settings.dim, " and --dv = ", settings.value_dim, " must be >= 1"));
  require(settings.landmarks >= 1 && settings.features >= 1 && settings.projected >= 1,
          describe("options --landmarks = ", settings.landmarks, ", --features = ", settings.features,
                   ", --projected = ", settings.projected, " must be >= 1"));
  require(settings.min_seconds >= 0,
          describe("option --min-seconds = ", settings.min_seconds, " must be >= 0"));

  const std::string core = blas_core();
  std::cout << "nystrom bench: BLAS core " << core << ", OPENBLAS_CORETYPE="
            << (std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)") << "\n";
  AtomicFile file(settings.output);
  int max_threads = 1;
  for (auto t : settings.thread_counts) max_threads = std::max(max_threads, int(t));
  Provenance provenance = make_provenance(invocation.command_line, max_threads, "synthetic:gaussian");
  write_results_header(file.get(), provenance);
  write_attribute(file.get(), "blas_core", core);
  BenchTables tables{ResultsTable::create(file.get(), "bench", bench_columns()),
                     ResultsTable::create(file.get(), "bench_steps", step_columns())};
  if (!settings.quiet)
    std::cout << "method                  n    dtype thr      seconds    GFLOP/s   speedup  rel.error\n";
  for (const auto& dtype : settings.dtypes)
    for (auto threads_count : settings.thread_counts)
      for (auto n : settings.sizes) {
        if (dtype == "float32")
          run_configuration<float>(n, threads_count, settings, tables, dtype);
        else
          run_configuration<double>(n, threads_count, settings, tables, dtype);
        H5Fflush(file.get(), H5F_SCOPE_GLOBAL);
      }
  file.commit();
  std::cout << "wrote " << settings.output << "\n";
  return 0;
}

}  // namespace nystrom::cli
