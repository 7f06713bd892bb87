// `nystrom bench`: wall time of exact attention against every approximation of approximation.hpp over N (per
// head, d = dv = 64 by default, float and double, 1 and 2 threads), the per-step timings of PnP-Nystra
// Algorithm 1 (paper Table 1), a GEMM reference rate measured in the same run (exact attention as a
// fraction of the GEMM peak) and, on request, the matrix-free kernel matvec y = κ(Q, K) x of Lanczos and
// whole [B, H, N, d] batches of heads through BatchedAttentionPlan (backend.hpp). Writes /bench,
// /bench_steps, /bench_gemm (unless --gemm-n 0), /bench_matvec (with --matvec-n) and /bench_batch (with
// --batch-shapes) tables (docs/formats.md §2 conventions) and prints them as one table.
//
// With --device cuda, exact attention and PnP-Nystra run through the CUDA backend (backend.hpp), which takes
// and returns host matrices: those timings include the host↔device copies. The other methods and the step
// table are CPU-only; the thread list does not apply (rows say threads = 1).
//
// OpenBLAS picks its kernels when the library is loaded (blas_core.hpp). With --blas-core set (default
// SkylakeX) and a different environment value, the program re-executes itself with the variable set (after
// the options are checked), and logs the core in use.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <tuple>

#include "atomic_files.hpp"
#include "blas_core.hpp"
#include "hdf5_handles.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/batched.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/parameters.hpp"
#include "nystrom/threads.hpp"
#include "results_files.hpp"
#include "subcommands.hpp"

namespace nystrom::cli {

namespace {

constexpr double not_measured = std::numeric_limits<double>::quiet_NaN();

struct BenchSettings {
  std::vector<Index> sizes;
  Index dim = 64, value_dim = 64;
  std::vector<std::string> precisions;  ///< "float", "double"
  std::vector<Index> thread_counts;
  std::vector<Method> methods;
  Device device = Device::cpu;
  Index landmarks = 16;            ///< m of pnp-nystra, nystromformer, cur, symmetric-nystrom
  Index features = 64;             ///< r of performer
  Index projected = 64;            ///< k of linformer
  std::optional<PinvMethod> pinv;  ///< --pinv of every method with a pseudoinverse (none: each its own)
  /// --strategy of pnp-nystra, cur and symmetric-nystrom and of the step table (none: each method's own;
  /// the steps take segment means)
  std::optional<LandmarkStrategy> strategy;
  int iterations = 0;               ///< --iterations of an iterative pseudoinverse (0: each method's own)
  Index gemm_size = 4096;           ///< n of the n×n×n reference GEMM; 0: none
  std::vector<Index> matvec_sizes;  ///< N of the kernel matvecs (none by default)
  std::vector<BatchShape> batch_shapes;  ///< --batch-shapes: [B, H, N, d] batches, dv = d (none by default)
  double min_seconds = 0.2;
  bool steps = true;
  std::uint64_t seed = 0;
  std::string blas_core = "SkylakeX";
  std::string output = "results/bench.h5";
  bool quiet = false;
};

/// Where one group of rows is timed: device, precision and thread count, the BLAS doing the products, and
/// the GEMM rate measured there (the reference of every `gemm_fraction`; NaN with --gemm-n 0).
struct TimingContext {
  Device device = Device::cpu;
  std::string precision;  ///< "float" or "double"
  Index threads = 1;
  std::string blas;  ///< the OpenBLAS core on the CPU, "cuBLAS" on the GPU
  double gemm_gflops = not_measured;

  double gemm_fraction(double gflops) const { return gflops / gemm_gflops; }
};

/// The tables of one run; /bench_gemm and /bench_matvec exist only when asked for.
struct BenchTables {
  hid_t file;
  ResultsTable bench, steps;
  std::optional<ResultsTable> gemm, matvec, batch;
};

/// Re-executes the program with OPENBLAS_CORETYPE = `core` when it differs (run_under_blas_core).
void ensure_blas_core(const std::string& core, const Invocation& invocation) {
  std::vector<std::string> arguments = {"nystrom", invocation.subcommand};
  arguments.insert(arguments.end(), invocation.args.begin(), invocation.args.end());
  std::vector<char*> argv;
  for (auto& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);
  run_under_blas_core(core, argv.data(), "nystrom bench");
}

/// Throws std::invalid_argument naming --blas-core when OpenBLAS runs another core than the one asked for (an
/// unknown name, or a core this CPU or this OpenBLAS build lacks; OpenBLAS then falls back silently); for the
/// default value a warning only, so that `nystrom bench` still runs on machines without that core.
void check_blas_core(const std::string& requested, const std::string& running, bool defaulted) {
  if (requested.empty() || requested == "default") return;
  const auto lower = [](std::string text) {
    std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
    return text;
  };
  if (lower(requested) == lower(running)) return;
  const std::string message = describe("--blas-core ", requested, ": OpenBLAS runs its core ", running,
                                       " instead (an unknown core name, or one this CPU or OpenBLAS build "
                                       "lacks); name the core it runs, or 'default'");
  require(defaulted, message);
  std::cerr << "nystrom bench: warning: " << message << "\n";
}

/// The wall times of repeated runs of one piece of work: the minimum over every run (the warm-up included)
/// and the median over the runs after the warm-up.
struct Timing {
  double best = not_measured, median = not_measured;
};

/// Times `work` over repeats until `min_seconds` have been spent (at least 2 runs after a warm-up, except for
/// runs longer than min_seconds, timed once after the warm-up).
template <class Work>
Timing time_repeats(Work&& work, const BenchSettings& settings) {
  using clock = std::chrono::steady_clock;
  const auto seconds_of = [&] {
    const auto start = clock::now();
    work();
    return std::chrono::duration<double>(clock::now() - start).count();
  };
  const double warm_up = seconds_of();
  std::vector<double> runs = {seconds_of()};
  double spent = warm_up + runs.front();
  if (warm_up <= settings.min_seconds)
    for (int repeat = 1; repeat < 2 || spent < settings.min_seconds; ++repeat) {
      runs.push_back(seconds_of());
      spent += runs.back();
    }
  std::sort(runs.begin(), runs.end());
  const std::size_t middle = runs.size() / 2;
  const double median = runs.size() % 2 ? runs[middle] : (runs[middle - 1] + runs[middle]) / 2;
  return {std::min(warm_up, runs.front()), median};
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

/// κ of every timed method: the softmax kernel exp(s q·k) with s = 1/√d.
Kernel bench_kernel(Index dim) {
  return Kernel::exponential(1 / std::sqrt(double(dim)));
}

/// The options of `method` for query/key dimension `dim` (--d, or a --batch-shapes shape's d), from the
/// bench's parameters (parameters.hpp).
ApproximationOptions method_options(const BenchSettings& settings, Method method, Index dim) {
  Parameters parameters;
  parameters.method = method;
  parameters.scale = bench_kernel(dim).param;
  parameters.landmarks = settings.landmarks;
  parameters.features = settings.features;
  parameters.projected = settings.projected;
  parameters.seed = settings.seed;
  parameters.pinv = settings.pinv;
  parameters.strategy = settings.strategy;
  if (settings.iterations > 0) parameters.pinv_iters = settings.iterations;
  return parameters.options(dim);
}

/// True for the methods the CUDA backend runs (backend.hpp: exact_attention, nystrom_attention).
bool runs_on_gpu(Method method) {
  return method == Method::exact || method == Method::pnp_nystra;
}

/// Ô of `method` on `device`: exact attention and PnP-Nystra through the backend (host matrices in and out,
/// so GPU timings include the host↔device copies), the other methods by the CPU library.
template <class T>
Matrix<T> method_output(Method method, Device device, const Matrix<T>& Q, const Matrix<T>& K,
                        const Matrix<T>& V, const ApproximationOptions& options) {
  switch (method) {
    case Method::exact:
      return exact_attention<T>(device, Q, K, V, options.kernel);
    case Method::pnp_nystra:
      return nystrom_attention<T>(device, Q, K, V, options.pnp_nystra);
    default:
      return approximate_attention<T>(method, Q, K, V, options).output;
  }
}

std::vector<Column> bench_columns() {
  return {{"method", ColumnType::text, true},
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
}

std::vector<Column> step_columns() {
  return {{"step", ColumnType::text, true},        {"step_index", ColumnType::int64, true},
          {"n", ColumnType::int64, true},          {"d", ColumnType::int64, true},
          {"precision", ColumnType::text, true},   {"threads", ColumnType::int64, true},
          {"landmarks", ColumnType::int64, true},  {"strategy", ColumnType::text, true},
          {"seconds", ColumnType::float64, false}, {"fraction", ColumnType::float64, false},
          {"blas_core", ColumnType::text, false}};
}

std::vector<Column> gemm_columns() {
  return {{"device", ColumnType::text, true},      {"precision", ColumnType::text, true},
          {"threads", ColumnType::int64, true},    {"n", ColumnType::int64, true},
          {"seconds", ColumnType::float64, false}, {"gflops", ColumnType::float64, false},
          {"blas_core", ColumnType::text, false}};
}

std::vector<Column> matvec_columns() {
  return {{"device", ColumnType::text, true},     {"precision", ColumnType::text, true},
          {"threads", ColumnType::int64, true},   {"n", ColumnType::int64, true},
          {"d", ColumnType::int64, true},         {"seconds", ColumnType::float64, false},
          {"gflops", ColumnType::float64, false}, {"gemm_fraction", ColumnType::float64, false},
          {"blas_core", ColumnType::text, false}};
}

std::vector<Column> batch_columns() {
  return {{"device", ColumnType::text, true},
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
}

/// The size of a method's approximation in the columns `landmarks` (m), `features` (performer's r) and
/// `projected` (linformer's k), as in /sweep: 0 where the method has no such axis.
struct ApproximationSize {
  Index landmarks = 0, features = 0, projected = 0;
};

ApproximationSize approximation_size(Method method, const BenchSettings& settings) {
  switch (method) {
    case Method::performer:
      return {0, settings.features, 0};
    case Method::linformer:
      return {0, 0, settings.projected};
    case Method::exact:
      return {};
    default:
      return {settings.landmarks, 0, 0};
  }
}

/// Prints the leading cells of one stdout row: what was timed, N, precision, threads, seconds, GFLOP/s and
/// `gemm_fraction` as a percentage (the bench rows append the speedup and the error).
void print_timing(const std::string& label, Index n, const TimingContext& context, double seconds,
                  double gflops, double gemm_fraction) {
  std::cout << std::left << std::setw(18) << label << std::right << std::setw(7) << n << std::setw(10)
            << context.precision << std::setw(4) << context.threads << std::setw(13) << std::scientific
            << std::setprecision(3) << seconds << std::fixed << std::setprecision(1) << std::setw(10)
            << gflops << std::setw(8) << 100 * gemm_fraction << std::defaultfloat;
}

template <class T>
Matrix<T> random_tokens(Index rows, Index cols, std::mt19937_64& engine) {
  std::normal_distribution<double> normal;
  Matrix<T> out(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) out(i, j) = T(normal(engine));
  return out;
}

/// The `strategy` cell of a bench row: --strategy, or "default" (each method's own; the steps' segment
/// means).
std::string strategy_label(const BenchSettings& settings) {
  return settings.strategy ? to_string(*settings.strategy) : "default";
}

/// PnP-Nystra Algorithm 1 step by step (the landmarks of --strategy, segment means by default; the m×m core's
/// pseudoinverse as --pinv gives it (exact by default), no row-max scaling): the seven timed steps of the
/// paper's Table 1, the first the landmark selection.
template <class T>
std::vector<std::pair<std::string, double>> time_steps(const Matrix<T>& Q, const Matrix<T>& K,
                                                       const Matrix<T>& V, const BenchSettings& settings) {
  const Kernel kernel = bench_kernel(settings.dim);
  const Index m = settings.landmarks;
  Matrix<T> q_bar, k_bar, left, core, upper, upper_values, p, out;
  Vector<T> upper_ones;
  PinvResult<T> pinv;
  const PinvOptions pinv_options = method_options(settings, Method::pnp_nystra, settings.dim).pnp_nystra.pinv;
  std::vector<std::pair<std::string, double>> steps;
  const auto step = [&](const char* name, auto&& work) {
    steps.emplace_back(name, time_repeats(work, settings).best);
  };
  const LandmarkOptions landmarks =
      method_options(settings, Method::pnp_nystra, settings.dim).pnp_nystra.landmarks;
  step("1 landmarks", [&] {
    if (!settings.strategy) {
      q_bar = segment_means<T>(Q, m);
      k_bar = segment_means<T>(K, m);
      return;
    }
    Landmarks<T> selected = select_landmarks<T>(Q, K, landmarks, kernel);
    q_bar = std::move(selected.q);
    k_bar = std::move(selected.k);
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

template <class T>
void time_step_table(const Matrix<T>& Q, const Matrix<T>& K, const Matrix<T>& V, Index n,
                     const TimingContext& context, const BenchSettings& settings, ResultsTable& table) {
  const auto steps = time_steps<T>(Q, K, V, settings);
  double total = 0;
  for (const auto& [name, seconds] : steps) total += seconds;
  for (size_t i = 0; i < steps.size(); ++i)
    table.append({steps[i].first, std::int64_t(i + 1), std::int64_t(n), std::int64_t(settings.dim),
                  context.precision, std::int64_t(context.threads), std::int64_t(settings.landmarks),
                  strategy_label(settings), steps[i].second, steps[i].second / total, context.blas});
  if (!settings.quiet) {
    std::cout << "  pnp-nystra steps (m = " << settings.landmarks << "):";
    for (const auto& [name, seconds] : steps)
      std::cout << "  [" << name << "] " << std::scientific << std::setprecision(2) << seconds;
    std::cout << std::defaultfloat << "\n";
  }
}

/// Every method (exact first: the speedups and errors refer to it) at N = n, then the step table on the CPU.
template <class T>
void time_methods(Index n, const TimingContext& context, const BenchSettings& settings, BenchTables& tables) {
  std::mt19937_64 engine(settings.seed + std::uint64_t(n));
  const Matrix<T> Q = random_tokens<T>(n, settings.dim, engine);
  const Matrix<T> K = random_tokens<T>(n, settings.dim, engine);
  const Matrix<T> V = random_tokens<T>(n, settings.value_dim, engine);
  Matrix<T> exact;
  double exact_seconds = not_measured;
  std::vector<Method> order = {Method::exact};
  for (auto method : settings.methods)
    if (method != Method::exact) order.push_back(method);
  const bool want_exact =
      std::find(settings.methods.begin(), settings.methods.end(), Method::exact) != settings.methods.end();
  for (auto method : order) {
    Matrix<T> output;
    // Performer's Ω and Linformer's E, F are a model's parameters: drawn before the clock starts.
    const ApproximationOptions drawn =
        with_drawn_projections(method, method_options(settings, method, settings.dim), n, settings.dim);
    const double seconds =
        time_repeats([&] { output = method_output<T>(method, context.device, Q, K, V, drawn); }, settings)
            .best;
    if (method == Method::exact) {
      exact = output;
      exact_seconds = seconds;
      if (!want_exact) continue;
    }
    const double flops =
        nominal_flops(method, double(n), double(settings.dim), double(settings.value_dim), settings);
    const double gflops = flops / seconds * 1e-9;
    const double error = output_errors<T>(exact, output).relative_frobenius;
    const double speedup = exact_seconds / seconds;
    const auto size = approximation_size(method, settings);
    tables.bench.append({to_string(method), std::int64_t(n), std::int64_t(settings.dim),
                         std::int64_t(settings.value_dim), context.precision, std::int64_t(context.threads),
                         std::int64_t(size.landmarks), size.landmarks ? strategy_label(settings) : "none",
                         std::int64_t(size.features), std::int64_t(size.projected), seconds, flops, gflops,
                         speedup, error, context.blas, context.gemm_fraction(gflops),
                         to_string(context.device)});
    if (!settings.quiet) {
      print_timing(to_string(method), n, context, seconds, gflops, context.gemm_fraction(gflops));
      std::cout << std::fixed << std::setprecision(1) << std::setw(10) << speedup << std::scientific
                << std::setprecision(2) << std::setw(11) << error << std::defaultfloat << "\n";
    }
  }
  if (settings.steps && context.device == Device::cpu)
    time_step_table<T>(Q, K, V, n, context, settings, tables.steps);
}

/// One /bench_gemm row: the n×n×n GEMM rate of this context (backend.hpp gemm_seconds); returns GFLOP/s.
template <class T>
double time_gemm(const TimingContext& context, const BenchSettings& settings, ResultsTable& table) {
  const Index n = settings.gemm_size;
  const double seconds = gemm_seconds<T>(context.device, n);
  const double gflops = 2 * std::pow(double(n), 3) / seconds * 1e-9;
  table.append({to_string(context.device), context.precision, std::int64_t(context.threads), std::int64_t(n),
                seconds, gflops, context.blas});
  if (!settings.quiet) {
    print_timing("[gemm n^3]", n, context, seconds, gflops, 1);
    std::cout << "\n";
  }
  return gflops;
}

/// One /bench_matvec row: y = G x with G = κ(Q, K) (N×N, exponential kernel, d = --d) applied matrix-free
/// on the context's device (kernel_operator), the Lanczos product of docs/mathematics.md §7. GFLOP/s counts
/// the 2N²d of the logits (exp and the dot products with x not counted).
template <class T>
void time_matvec(Index n, const TimingContext& context, const BenchSettings& settings, ResultsTable& table) {
  std::mt19937_64 engine(settings.seed + std::uint64_t(n));
  const Matrix<T> Q = random_tokens<T>(n, settings.dim, engine);
  const Matrix<T> K = random_tokens<T>(n, settings.dim, engine);
  const Vector<T> x = random_tokens<T>(n, 1, engine);
  Vector<T> y(n);
  const AnyOperator<T> G = kernel_operator<T>(context.device, Q, K, bench_kernel(settings.dim));
  const double seconds = time_repeats([&] { G.perform_op(x.data(), y.data()); }, settings).best;
  const double gflops = 2 * double(n) * double(n) * double(settings.dim) / seconds * 1e-9;
  table.append({to_string(context.device), context.precision, std::int64_t(context.threads), std::int64_t(n),
                std::int64_t(settings.dim), seconds, gflops, context.gemm_fraction(gflops), context.blas});
  if (!settings.quiet) {
    print_timing("[matvec G x]", n, context, seconds, gflops, context.gemm_fraction(gflops));
    std::cout << "\n";
  }
}

/// The /bench_batch rows of one [B, H, N, d] batch of Gaussian tokens (dv = d): exact attention first (the
/// reference of the speedups and errors), then every method, each through one BatchedAttentionPlan on the
/// context's device. The runs timed are device-resident (inputs and output in DeviceArrays, each run waited
/// for); one more run with host views in and out gives the output and the seconds of its copies alone (CUDA
/// events; backend.hpp), copy_seconds.
template <class T>
void time_batch(const BatchShape& shape, const TimingContext& context, const BenchSettings& settings,
                ResultsTable& table) {
  std::mt19937_64 engine(settings.seed + std::uint64_t(shape.count() * shape.tokens * shape.dim));
  const Index size = shape.count() * shape.tokens * shape.dim;
  const Matrix<T> q = random_tokens<T>(size, 1, engine), k = random_tokens<T>(size, 1, engine),
                  v = random_tokens<T>(size, 1, engine);
  const auto view = [&](const Matrix<T>& data) {
    return BatchView<const T>{data.data(), shape.batch, shape.heads, shape.tokens, shape.dim};
  };
  DeviceArray<T> q_device(context.device, size), k_device(context.device, size),
      v_device(context.device, size), out_device(context.device, size);
  q_device.copy_from(q.data());
  k_device.copy_from(k.data());
  v_device.copy_from(v.data());
  Matrix<T> exact(size, 1), out(size, 1);
  double exact_seconds = not_measured;
  const bool want_exact =
      std::find(settings.methods.begin(), settings.methods.end(), Method::exact) != settings.methods.end();
  std::vector<Method> order = {Method::exact};
  for (auto method : settings.methods)
    if (method != Method::exact) order.push_back(method);
  for (auto method : order) {
    BatchedAttentionPlan<T> plan(context.device, method, shape, method_options(settings, method, shape.dim));
    Matrix<T>& output = method == Method::exact ? exact : out;
    const BatchView<T> out_view{output.data(), shape.batch, shape.heads, shape.tokens, shape.dim};
    const Timing timing = time_repeats(
        [&] {
          plan.run(q_device.data(), k_device.data(), v_device.data(), out_device.data());
          plan.wait();
        },
        settings);
    const TransferSeconds phases = plan.run(view(q), view(k), view(v), out_view);
    const double copy_seconds = phases.to_device + phases.to_host;
    if (method == Method::exact) {
      exact_seconds = timing.best;
      if (!want_exact) continue;
    }
    const double speedup = exact_seconds / timing.best;
    const double heads_per_second = double(shape.count()) / timing.best;
    const double error = output_errors<T>(exact, output).relative_frobenius;
    const auto approximation = approximation_size(method, settings);
    table.append({to_string(context.device), context.precision, std::int64_t(context.threads),
                  std::int64_t(shape.batch), std::int64_t(shape.heads), std::int64_t(shape.tokens),
                  std::int64_t(shape.dim), to_string(method), std::int64_t(approximation.landmarks),
                  std::int64_t(approximation.features), std::int64_t(approximation.projected), timing.best,
                  timing.median, copy_seconds, speedup, heads_per_second, error, context.blas});
    if (!settings.quiet) {
      std::ostringstream label;
      label << to_string(method) << " " << shape.batch << "x" << shape.heads << "x" << shape.tokens << "x"
            << shape.dim;
      std::cout << std::left << std::setw(30) << label.str() << std::right << std::setw(10)
                << context.precision << std::setw(4) << context.threads << std::scientific
                << std::setprecision(3) << std::setw(12) << timing.best << std::setw(12) << timing.median
                << std::setw(12) << copy_seconds << std::fixed << std::setprecision(1) << std::setw(9)
                << speedup << std::setprecision(0) << std::setw(10) << heads_per_second << std::scientific
                << std::setprecision(2) << std::setw(11) << error << std::defaultfloat << "\n";
    }
  }
}

/// Everything timed in one context: the GEMM reference first, then the methods per N, the matvecs, the
/// batches.
template <class T>
void time_context(TimingContext context, const BenchSettings& settings, BenchTables& tables) {
  if (tables.gemm) context.gemm_gflops = time_gemm<T>(context, settings, *tables.gemm);
  for (auto n : settings.sizes) {
    time_methods<T>(n, context, settings, tables);
    H5Fflush(tables.file, H5F_SCOPE_GLOBAL);
  }
  for (auto n : settings.matvec_sizes) time_matvec<T>(n, context, settings, *tables.matvec);
  if (!settings.batch_shapes.empty() && !settings.quiet)
    std::cout << "batch (method BxHxNxd)        precision thr     best(s)   median(s)     copy(s)  speedup"
                 "   heads/s  rel.error\n";
  for (const auto& shape : settings.batch_shapes) {
    time_batch<T>(shape, context, settings, *tables.batch);
    H5Fflush(tables.file, H5F_SCOPE_GLOBAL);
  }
}

/// The shapes of --batch-shapes: a comma-separated list of BxHxNxd (dv = d), each count >= 1; throws
/// std::invalid_argument naming the value.
std::vector<BatchShape> parse_batch_shapes(const std::string& text) {
  std::vector<BatchShape> shapes;
  for (const auto& item : split_list(text, "batch-shapes")) {
    std::vector<Index> parts;
    std::stringstream dims(item);
    std::string part;
    while (std::getline(dims, part, 'x')) {
      const bool digits = !part.empty() && part.size() <= 12 &&
                          std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? std::stoll(part) : 0);
    }
    require(parts.size() == 4 && item.back() != 'x' &&
                std::all_of(parts.begin(), parts.end(), [](Index p) { return p >= 1; }),
            "option --batch-shapes: '", item, "' is not BxHxNxd with every count >= 1");
    shapes.push_back({parts[0], parts[1], parts[2], parts[3], parts[3]});
  }
  return shapes;
}

/// Checks what the options cannot check one by one; throws std::invalid_argument naming the values.
void validate(const BenchSettings& settings) {
  require(settings.dim >= 1 && settings.value_dim >= 1, "options --d = ", settings.dim,
          " and --dv = ", settings.value_dim, " must be >= 1");
  require(settings.landmarks >= 1 && settings.features >= 1 && settings.projected >= 1,
          "options --landmarks = ", settings.landmarks, ", --features = ", settings.features,
          ", --projected = ", settings.projected, " must be >= 1");
  require(settings.min_seconds >= 0, "option --min-seconds = ", settings.min_seconds, " must be >= 0");
  require(settings.gemm_size >= 0, "option --gemm-n = ", settings.gemm_size, " must be >= 0");
  if (settings.device == Device::cuda) {
    std::vector<std::string> cpu_only;
    for (auto method : settings.methods)
      if (!runs_on_gpu(method)) cpu_only.push_back(to_string(method));
    require(cpu_only.empty(), "option --method: ", join(cpu_only),
            " run on the CPU only (with --device cuda: exact, pnp-nystra)");
  }
  // The smallest N of --n and --batch-shapes, and the option naming it.
  Index smallest = std::numeric_limits<Index>::max();
  std::string smallest_option;
  for (auto n : settings.sizes)
    if (n < smallest) std::tie(smallest, smallest_option) = std::pair(n, describe("--n = ", n));
  for (const auto& shape : settings.batch_shapes)
    if (shape.tokens < smallest)
      std::tie(smallest, smallest_option) =
          std::pair(shape.tokens, describe("--batch-shapes N = ", shape.tokens, " (", shape.batch, "x",
                                           shape.heads, "x", shape.tokens, "x", shape.dim, ")"));
  const bool steps = settings.steps && settings.device == Device::cpu && !settings.sizes.empty();
  // Landmarks are tokens, so m ≤ N; Linformer's k and Performer's r may exceed N, as in the sweep.
  for (auto method : settings.methods) {
    if (method == Method::exact || method == Method::performer || method == Method::linformer) continue;
    require(settings.landmarks <= smallest, "option --landmarks = ", settings.landmarks,
            " exceeds the smallest ", smallest_option, " (method ", to_string(method), ")");
  }
  require(!steps || settings.landmarks <= smallest, "option --landmarks = ", settings.landmarks,
          " exceeds the smallest ", smallest_option, " (the PnP-Nystra step table; --steps 0 skips it)");
  for (auto method : settings.methods) {
    for (auto n : settings.sizes)
      method_options(settings, method, settings.dim).validate(method, n, settings.dim);
    for (const auto& shape : settings.batch_shapes)
      method_options(settings, method, shape.dim).validate(method, shape.tokens, shape.dim);
  }
}

/// Attribute `timing` of the file: what the rows time on this device.
std::string timing_note(Device device) {
  if (device == Device::cpu)
    return "one head on the host, minimum over repeats; threads = OpenMP threads (BLAS single-threaded "
           "inside; the GEMM reference uses OpenBLAS threads); /bench_batch: whole batches through "
           "BatchedAttentionPlan, heads spread over the OpenMP threads";
  return "exact and pnp-nystra through the CUDA backend with host matrices in and out (timings include the "
         "host<->device copies); threads = 1 (the thread list applies to the CPU only); /bench_steps is "
         "CPU-only and has no rows; the GEMM reference by cuBLAS, the matvec by the backend's kernel "
         "operator; /bench_batch: whole batches through BatchedAttentionPlan with host views in and out "
         "(device-resident: inputs and output in device memory; one run's host<->device copies in "
         "copy_seconds)";
}

/// The raw texts of the list options, parsed by complete_settings.
struct BenchOptionTexts {
  std::string sizes = "256:16384:x2", matvec_sizes, batch_shapes, pinv, strategy;
};

/// The options of `nystrom bench`, writing into `texts` and `settings`.
po::options_description bench_options(BenchOptionTexts& texts, BenchSettings& settings) {
  po::options_description description("bench options");
  // clang-format off
  description.add_options()
    ("n", po::value(&texts.sizes)->default_value(texts.sizes),
     "token counts N of the one-head tables (list or range first:last:xF); with --batch-shapes: none unless given")
    ("d", po::value(&settings.dim)->default_value(settings.dim), "query/key dimension d")
    ("dv", po::value(&settings.value_dim)->default_value(settings.value_dim), "value dimension dv");
  add_precision_option(description, "float,double", PrecisionValues::list);
  description.add_options()
    ("threads", po::value<std::string>()->default_value("1,2")->value_name("LIST"),
     "OpenMP thread counts to time, list or range (0: the OpenMP default; CPU only: --device cuda writes "
     "threads = 1)");
  add_deprecated_alias(description, "threads-list", "threads");
  add_method_option(description, "",
                    "methods (approximation.hpp names); default: all seven on the CPU, exact,pnp-nystra with "
                    "--device cuda");
  add_device_option(description,
                    "on cuda, exact and pnp-nystra run through the CUDA backend with host matrices in and out "
                    "(timings include the host<->device copies), the thread list does not apply and there is "
                    "no step table");
  description.add_options()
    ("landmarks", po::value(&settings.landmarks)->default_value(settings.landmarks),
     "m of pnp-nystra, nystromformer, cur, symmetric-nystrom")
    ("features", po::value(&settings.features)->default_value(settings.features), "r of performer")
    ("projected", po::value(&settings.projected)->default_value(settings.projected), "k of linformer")
    ("strategy", po::value(&texts.strategy),
     "landmark strategy of pnp-nystra, cur and symmetric-nystrom and of the step table, whose first step times "
     "it (default: each method's own; the steps take segment means)")
    ("pinv", po::value(&texts.pinv),
     "pseudoinverse of pnp-nystra, symmetric-nystrom, nystromformer and cur (exact, razavi, newton-schulz, ...; "
     "pinv.hpp names); default: each method's own (exact; nystromformer: razavi x6; symmetric-nystrom: "
     "newton-schulz x20 on W + 1e-6 I)")
    ("pinv-iters", po::value<std::string>()->default_value("0"),
     "iterations of an iterative --pinv; 0: each method's own (nystromformer 6, symmetric-nystrom 20)")
    ("gemm-n", po::value(&settings.gemm_size)->default_value(settings.gemm_size),
     "n of the n x n x n GEMM timed per precision and thread count (/bench_gemm, the reference of the "
     "gemm_fraction columns); 0: none")
    ("matvec-n", po::value(&texts.matvec_sizes),
     "N of the matrix-free kernel matvecs y = exp(s Q K^T) x timed per precision and thread count "
     "(/bench_matvec; list or range); default: none")
    ("batch-shapes", po::value<std::string>()->value_name("LIST"),
     "batches BxHxNxd (dv = d), comma-separated, e.g. 64x6x1024x64,16x8x4096x64: exact attention and every "
     "--method on the whole batch through BatchedAttentionPlan on --device, per precision and thread count "
     "(/bench_batch); default: none")
    ("min-seconds", real_value(settings.min_seconds),
     "time each point for at least this long (minimum over repeats is reported)")
    ("steps", po::value(&settings.steps)->default_value(settings.steps),
     "time PnP-Nystra Algorithm 1 step by step (CPU only)")
    ("blas-core", po::value(&settings.blas_core)->default_value(settings.blas_core),
     "OPENBLAS_CORETYPE to run under (re-executes when the environment differs; 'default': keep)")
    ("output,o", po::value(&settings.output)->default_value(settings.output), "results file (HDF5)");
  // clang-format on
  add_deprecated_alias(description, "iterations", "pinv-iters");
  add_deprecated_alias(description, "batch", "batch-shapes");
  add_seed_option(description);
  add_quiet_option(description, "no table on stdout");
  add_common_options(description, false);
  return description;
}

/// `settings` completed from the parsed options (sizes, thread counts, methods, precisions, seed).
void complete_settings(const po::variables_map& values, BenchOptionTexts& texts, BenchSettings& settings) {
  settings.device = parse_device(values);
  settings.min_seconds = real_option(values, "min-seconds");
  texts.batch_shapes = option_text(values, "batch-shapes", "batch");
  const auto iterations = parse_index_list(option_text(values, "pinv-iters", "iterations"), "pinv-iters", 0);
  require(iterations.size() == 1 && iterations[0] <= max_pinv_iterations,
          "option --pinv-iters: one count in [0, ", max_pinv_iterations, "] (0: each method's own)");
  settings.iterations = int(iterations[0]);
  if (!texts.batch_shapes.empty()) settings.batch_shapes = parse_batch_shapes(texts.batch_shapes);
  if (texts.batch_shapes.empty() || !values["n"].defaulted())
    settings.sizes = parse_index_list(texts.sizes, "n");
  settings.thread_counts = {1};
  if (settings.device == Device::cpu) {
    const Index default_threads = threads();  // the OpenMP default, before any set_threads
    settings.thread_counts.clear();
    for (auto count : parse_index_list(option_text(values, "threads", "threads-list"), "threads", 0)) {
      require(count <= max_threads, "option --threads: ", count, " must lie in [0, ", max_threads,
              "] (0: the OpenMP default)");
      const Index resolved = count > 0 ? count : default_threads;
      if (std::find(settings.thread_counts.begin(), settings.thread_counts.end(), resolved) ==
          settings.thread_counts.end())
        settings.thread_counts.push_back(resolved);
    }
  }
  settings.methods =
      parse_methods(values, settings.device == Device::cuda
                                ? "exact,pnp-nystra"
                                : "exact,pnp-nystra,nystromformer,cur,symmetric-nystrom,performer,linformer");
  settings.precisions = parse_precisions(values);
  settings.seed = seed_option(values);
  settings.quiet = values["quiet"].as<bool>();
  if (!texts.matvec_sizes.empty()) settings.matvec_sizes = parse_index_list(texts.matvec_sizes, "matvec-n");
  if (!texts.pinv.empty()) {
    const auto methods = parse_enum_list<PinvMethod>(texts.pinv, "pinv", pinv_method_from_string);
    require(methods.size() == 1, "option --pinv: one pseudoinverse, not '", texts.pinv, "'");
    settings.pinv = methods.front();
  }
  if (!texts.strategy.empty()) settings.strategy = landmark_strategy_from_string(texts.strategy);
  require(settings.iterations >= 0 && settings.iterations <= max_pinv_iterations,
          "option --iterations = ", settings.iterations, " must be between 0 and ", max_pinv_iterations);
}

/// The tables `settings` asks for, created in `file`.
BenchTables create_tables(hid_t file, const BenchSettings& settings) {
  BenchTables tables{file,
                     ResultsTable::create(file, "bench", bench_columns()),
                     ResultsTable::create(file, "bench_steps", step_columns()),
                     std::nullopt,
                     std::nullopt,
                     std::nullopt};
  if (settings.gemm_size > 0) tables.gemm = ResultsTable::create(file, "bench_gemm", gemm_columns());
  if (!settings.matvec_sizes.empty())
    tables.matvec = ResultsTable::create(file, "bench_matvec", matvec_columns());
  if (!settings.batch_shapes.empty())
    tables.batch = ResultsTable::create(file, "bench_batch", batch_columns());
  return tables;
}

}  // namespace

int run_bench(const Invocation& invocation) {
  BenchOptionTexts texts;
  BenchSettings settings;
  const po::options_description description = bench_options(texts, settings);
  po::variables_map values;
  if (!parse_options(invocation, "[options]", description, {}, values)) return 0;

  complete_settings(values, texts, settings);
  validate(settings);
  ensure_blas_core(settings.blas_core, invocation);
  const std::string core = blas_core();
  check_blas_core(settings.blas_core, core, values["blas-core"].defaulted());

  const std::string device_description = describe_device(settings.device);
  std::cout << "nystrom bench: device " << device_description << ", BLAS core " << core
            << ", OPENBLAS_CORETYPE="
            << (std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "(unset)") << "\n"
            << "timing: " << timing_note(settings.device) << "\n";
  AtomicFile file(settings.output, {"bench", "nystrom-results", "bench"});
  int most_threads = 1;
  for (auto t : settings.thread_counts) most_threads = std::max(most_threads, int(t));
  Provenance provenance = make_provenance(invocation.command_line, most_threads, "synthetic:gaussian");
  write_results_header(file.get(), provenance);
  write_attribute(file.get(), "blas_core", core);
  write_attribute(file.get(), "device", to_string(settings.device));
  write_attribute(file.get(), "device_description", device_description);
  write_attribute(file.get(), "timing", timing_note(settings.device));
  write_attribute(file.get(), "pinv", settings.pinv ? to_string(*settings.pinv) : std::string("default"));
  write_attribute(file.get(), "pinv_iters", std::vector<std::int64_t>{settings.iterations});
  BenchTables tables = create_tables(file.get(), settings);
  if (!settings.quiet && !settings.sizes.empty())
    std::cout
        << "method                  n precision thr      seconds    GFLOP/s   %GEMM   speedup  rel.error\n";
  for (const auto& precision : settings.precisions)
    for (auto threads_count : settings.thread_counts) {
      set_threads(int(threads_count));
      const TimingContext context{settings.device, precision, threads_count,
                                  settings.device == Device::cuda ? "cuBLAS" : core};
      if (precision == "float")
        time_context<float>(context, settings, tables);
      else
        time_context<double>(context, settings, tables);
      H5Fflush(file.get(), H5F_SCOPE_GLOBAL);
    }
  file.commit();
  std::cout << "wrote " << settings.output << "\n";
  return 0;
}

}  // namespace nystrom::cli
