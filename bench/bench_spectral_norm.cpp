/// @file bench_spectral_norm.cpp
/// ‖G − Ĝ‖₂ at N = 4096, d = 64, m = 32 in double (issue #2's performance figure): Lanczos (Spectra) on the
/// stored error E, on G − Ĝ as a difference of a stored G and the factored Ĝ, and matrix-free. Optionally
/// writes E as raw little-endian doubles (column-major) so numpy.linalg.norm(E, 2) can be timed on the same
/// matrix:
///   bench_spectral_norm [N] [E.bin]
///   python3 -c "import numpy as np,time; E=np.fromfile('E.bin').reshape(N,N,order='F'); t=time.time();
///               print(np.linalg.norm(E,2), time.time()-t)"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
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

}  // namespace

int main(int argc, char** argv) {
  const Index n = argc > 1 ? std::stol(argv[1]) : 4096, d = 64, m = 32;
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
  if (argc > 2)
    std::ofstream(argv[2], std::ios::binary).write(reinterpret_cast<const char*>(E.data()), E.size() * 8);
  return 0;
}
