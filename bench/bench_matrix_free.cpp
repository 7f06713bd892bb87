/// Benchmark of the matrix-free spectral error: ‖G − Ĝ‖₂ for N tokens of dimension d with m
/// landmarks, G = κ(Q, K) never stored. Compares Lanczos on the fused one-pass Gram product EᵀE (what
/// spectral_norm uses) with Lanczos on the augmented operator [[0, E], [Eᵀ, 0]] (also one pass per product),
/// in kernel passes and seconds.
///
/// Usage: bench_matrix_free [n=65536] [d=64] [m=64] [kernel=exp|laplacian] [precision=float|double]
///                          [solver=gram|augmented|both] [tolerance=1e-10] [panel_rows=128] [tile_cols=512]
///                          [threads=0] [seed=1]
/// Prints one `key=value` line per solver, plus the OpenBLAS core, threads and the time of one kernel pass.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <map>
#include <random>
#include <string>

#include "nystrom/matrix_free.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/threads.hpp"

namespace {

using namespace nystrom;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// key=value arguments with defaults; unknown keys are an error naming the key.
class Arguments {
 public:
  Arguments(int argc, char** argv) : values_(defaults()) {
    for (int i = 1; i < argc; ++i) {
      const std::string item = argv[i];
      const auto equals = item.find('=');
      require(equals != std::string::npos && values_.count(item.substr(0, equals)),
              describe("bench_matrix_free: unknown argument '", item, "' (expected key=value)"));
      values_[item.substr(0, equals)] = item.substr(equals + 1);
    }
  }
  /// The value of `key`, which must be one of `choices`.
  std::string choice(const std::string& key, std::initializer_list<std::string> choices) const {
    const std::string& value = values_.at(key);
    std::string names;
    for (const auto& name : choices) names += (names.empty() ? "" : ", ") + name;
    require(std::find(choices.begin(), choices.end(), value) != choices.end(), "bench_matrix_free: ", key,
            " = '", value, "' is not one of ", names);
    return value;
  }
  double number(const std::string& key) const {
    const std::string& value = values_.at(key);
    std::size_t used = 0;
    double parsed = 0;
    try {
      parsed = std::stod(value, &used);
    } catch (const std::exception&) {
    }
    require(used == value.size() && used > 0 && std::isfinite(parsed), "bench_matrix_free: ", key, " = '",
            value, "' is not a finite number");
    return parsed;
  }
  /// The value of `key`, an integer of at least `least`.
  Index integer(const std::string& key, Index least) const {
    const double parsed = number(key);
    require(parsed == std::floor(parsed) && parsed >= double(least) && parsed < 9e15,
            "bench_matrix_free: ", key, " = '", values_.at(key), "' is not an integer >= ", least);
    return Index(parsed);
  }

 private:
  static std::map<std::string, std::string> defaults() {
    return {{"n", "65536"},
            {"d", "64"},
            {"m", "64"},
            {"kernel", "exp"},
            {"precision", "float"},
            {"solver", "gram"},
            {"tolerance", "1e-10"},
            {"panel_rows", "128"},
            {"tile_cols", "512"},
            {"threads", "0"},
            {"seed", "1"}};
  }
  std::map<std::string, std::string> values_;
};

/// Gaussian tokens, N(0, 1) entries, deterministic for a seed.
template <class T>
Matrix<T> gaussian_tokens(Index n, Index d, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal;
  Matrix<T> out(n, d);
  for (Index j = 0; j < d; ++j)
    for (Index i = 0; i < n; ++i) out(i, j) = static_cast<T>(normal(engine));
  return out;
}

template <class T>
int run(const Arguments& args) {
  const Index n = args.integer("n", 2), d = args.integer("d", 1), m = args.integer("m", 1);
  require(m < n, "bench_matrix_free: m = ", m, " must be below n = ", n);
  const Kernel kernel = args.choice("kernel", {"exp", "laplacian"}) == "exp"
                            ? Kernel::exponential(1.0 / std::sqrt(double(d)))
                            : Kernel::laplacian(4.0);
  const MatrixFreeOptions tiling{.panel_rows = args.integer("panel_rows", 1),
                                 .tile_cols = args.integer("tile_cols", 1)};
  SpectralOptions spectral;
  spectral.tolerance = args.number("tolerance");
  const std::string solver = args.choice("solver", {"gram", "augmented", "both"});

  const auto seed = static_cast<std::uint64_t>(args.integer("seed", 0));
  const Matrix<T> Q = gaussian_tokens<T>(n, d, seed), K = gaussian_tokens<T>(n, d, seed + 1);
  auto start = Clock::now();
  NystromOptions options;
  options.kernel = kernel;
  options.landmarks.count = m;
  const NystromFactors<T> factors = generalized_nystrom<T>(Q, K, options);
  std::printf(
      "setup: n=%lld d=%lld m=%lld kernel=%s precision=%s threads=%d blas_core=%s factors_seconds=%.3f\n",
      static_cast<long long>(n), static_cast<long long>(d), static_cast<long long>(m), kernel.label().c_str(),
      args.choice("precision", {"float", "double"}).c_str(), threads(), blas_core().c_str(),
      seconds_since(start));

  // E = G − Ĝ in double: G's tiles from the T tokens, Ĝ's factors widened.
  const KernelOperator<T, double> kernel_operator(Q, K, kernel, tiling);
  const NystromFactors<double> wide = widened_factors(factors);
  const NystromOperator<double> approximation(wide);
  const DifferenceOperator<KernelOperator<T, double>, NystromOperator<double>> error(kernel_operator,
                                                                                     approximation);
  Vector<double> x = Vector<double>::Ones(n), y(n);
  start = Clock::now();
  error.perform_inner_gram_op(x.data(), y.data());
  std::printf("one_pass: gram_product_seconds=%.3f\n", seconds_since(start));
  std::fflush(stdout);

  auto report = [&](const char* name, const SpectralResult& result, long passes, double seconds) {
    std::printf("%s: norm=%.15e converged=%d matvecs=%d kernel_passes=%ld seconds=%.2f\n", name,
                result.values(0), int(result.converged), result.matvecs, passes, seconds);
    std::fflush(stdout);
  };
  if (solver == "gram" || solver == "both") {
    const long before = kernel_operator.passes();
    start = Clock::now();
    const SpectralResult result = spectral_norm(error, spectral);
    report("gram", result, kernel_operator.passes() - before, seconds_since(start));
  }
  if (solver == "augmented" || solver == "both") {
    const long before = kernel_operator.passes();
    start = Clock::now();
    const SpectralResult result = augmented_spectral_norm(error, spectral);
    report("augmented", result, kernel_operator.passes() - before, seconds_since(start));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Arguments args(argc, argv);
    if (const Index requested = args.integer("threads", 0); requested > 0)
      set_threads(static_cast<int>(requested));
    return args.choice("precision", {"float", "double"}) == "double" ? run<double>(args) : run<float>(args);
  } catch (const std::exception& error) {
    std::cerr << error.what() << "\n";
    return 2;
  }
}
