/// @file bench_spectral_norm.cpp
/// ‖G − Ĝ‖₂ at N = 4096, d = 64, m = 32 in double: Lanczos (Spectra) on the
/// stored error E, on G − Ĝ as a difference of a stored G and the factored Ĝ, and matrix-free; then, in the
/// same run, numpy.linalg.norm(E, 2) on the same E (written as raw little-endian doubles, column-major, and
/// read by `python3 -c`), with the speed-up and the relative difference:
///   bench_spectral_norm [N=4096] [python=/usr/bin/python3] [E.bin=<temporary>]
/// python "none" skips the numpy comparison. OPENBLAS_CORETYPE (logged) applies to both sides.

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>

#include "nystrom/nystrom.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/threads.hpp"

using namespace nystrom;

namespace {

Matrix<double> gaussian(Index rows, Index cols, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal;
  Matrix<double> out(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) out(i, j) = normal(engine);
  return out;
}

template <class F>
double seconds(F&& run) {
  const auto start = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// N from the first argument (default 4096): an integer above m; throws std::invalid_argument naming it.
Index tokens_argument(int argc, char** argv, Index m) {
  if (argc < 2) return 4096;
  const std::string text = argv[1];
  std::size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  require(used == text.size() && used > 0 && n > m, "bench_spectral_norm: N = '", text,
          "' is not an integer above m = ", m, " (usage: bench_spectral_norm [N] [python] [E.bin])");
  return Index(n);
}

}  // namespace

int main(int argc, char** argv) try {
  const Index d = 64, m = 32, n = tokens_argument(argc, argv, m);
  const Matrix<double> Q = gaussian(n, d, 1), K = gaussian(n, d, 2);
  NystromOptions options;
  options.kernel = Kernel::exponential(1 / std::sqrt(double(d)));
  options.landmarks.count = m;
  const auto factors = generalized_nystrom<double>(Q, K, options);
  const Matrix<double> G = options.kernel.block<double>(Q, K);
  Matrix<double> E;
  const double form = seconds([&] { E = G - factors.dense(); });
  std::printf("N=%ld d=%ld m=%ld threads=%d blas=%s\n", long(n), long(d), long(m), threads(),
              blas_core().c_str());

  SpectralResult stored, difference, free;
  const double t_stored = seconds([&] { stored = spectral_norm(DenseOperator<double>(E)); });
  std::printf("stored E     : %.15e  %.3f s (+%.3f s forming E)  %d products  converged=%d\n",
              stored.values(0), t_stored, form, stored.matvecs, int(stored.converged));
  const DenseOperator<double> g(G);
  const NystromOperator<double> approximation(factors);
  const double t_difference = seconds([&] {
    difference =
        spectral_norm(DifferenceOperator<DenseOperator<double>, NystromOperator<double>>(g, approximation));
  });
  std::printf("stored G - Ĝ : %.15e  %.3f s  %d products\n", difference.values(0), t_difference,
              difference.matvecs);
  const KernelOperator<double> kernel(Q, K, options.kernel);
  const double t_free = seconds([&] {
    free = spectral_norm(
        DifferenceOperator<KernelOperator<double>, NystromOperator<double>>(kernel, approximation));
  });
  std::printf("matrix-free  : %.15e  %.3f s  %d products\n", free.values(0), t_free, free.matvecs);
  const std::string python = argc > 2 ? argv[2] : "/usr/bin/python3";
  if (python == "none") return 0;
  const std::string path = argc > 3 ? argv[3]
                                    : (std::filesystem::temp_directory_path() /
                                       ("bench_spectral_norm_E_" + std::to_string(getpid()) + ".bin"))
                                          .string();
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(E.data()), E.size() * 8);
  const std::string script = "import numpy as np, time; E = np.fromfile('" + path + "').reshape(" +
                             std::to_string(n) + ", " + std::to_string(n) +
                             ", order='F'); t = time.perf_counter(); s = np.linalg.norm(E, 2); "
                             "print(repr(float(s)), time.perf_counter() - t)";
  FILE* pipe = popen((python + " -c \"" + script + "\"").c_str(), "r");
  double numpy_norm = 0, numpy_seconds = 0;
  const bool read = pipe && std::fscanf(pipe, "%lf %lf", &numpy_norm, &numpy_seconds) == 2;
  if (pipe) pclose(pipe);
  if (argc <= 3) std::filesystem::remove(path);
  if (!read) {
    std::fprintf(stderr, "bench_spectral_norm: %s could not time numpy.linalg.norm(E, 2)\n", python.c_str());
    return 1;
  }
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  std::printf("numpy        : %.15e  %.3f s  (numpy.linalg.norm(E, 2), OPENBLAS_CORETYPE=%s)\n", numpy_norm,
              numpy_seconds, core ? core : "unset");
  std::printf("speed-up vs numpy: stored E %.1fx, stored G - Ĝ %.1fx, matrix-free %.1fx\n",
              numpy_seconds / t_stored, numpy_seconds / t_difference, numpy_seconds / t_free);
  std::printf("relative difference to numpy: stored E %.2e, stored G - Ĝ %.2e, matrix-free %.2e\n",
              std::abs(stored.values(0) - numpy_norm) / numpy_norm,
              std::abs(difference.values(0) - numpy_norm) / numpy_norm,
              std::abs(free.values(0) - numpy_norm) / numpy_norm);
  return 0;
} catch (const std::invalid_argument& error) {
  std::fprintf(stderr, "%s\n", error.what());
  return 2;
}
