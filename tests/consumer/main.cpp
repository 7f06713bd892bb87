// Uses the installed library through its public headers only: the generalized Nyström factors and PnP-Nystra
// attention against exact attention (docs/mathematics.md §1–2), checked against values computed here.
#include <nystrom/all.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

namespace {

int failures = 0;

void check(bool condition, const char* what, double value) {
  std::printf("%s %s: %.3e\n", condition ? "ok  " : "FAIL", what, value);
  if (!condition) ++failures;
}

}  // namespace

int main() {
  using Matrix = nystrom::Matrix<double>;
  const nystrom::Index n = 48, d = 8;
  const double eps = std::numeric_limits<double>::epsilon();
  const Matrix Q = Matrix::Random(n, d), K = Matrix::Random(n, d), V = Matrix::Random(n, 5);
  const nystrom::Kernel kernel = nystrom::Kernel::exponential(1 / std::sqrt(double(d)));

  // Exact attention against O = (G V) ⊘ (G 1_N), with G formed here entry by entry.
  Matrix G(n, n);
  for (nystrom::Index i = 0; i < n; ++i)
    for (nystrom::Index j = 0; j < n; ++j) G(i, j) = std::exp(kernel.param * Q.row(i).dot(K.row(j)));
  const Matrix expected = (G * V).array().colwise() / (G.rowwise().sum()).array();
  const Matrix exact = nystrom::exact_attention<double>(Q, K, V, kernel);
  const double exact_error = (exact - expected).norm() / expected.norm();
  check(exact_error < 100 * n * eps, "exact_attention against (G V) / (G 1)", exact_error);

  // With every token a landmark (m = N, segment means of length 1), G_A = G and Ĝ = G G⁺ G = G: exact
  // recovery.
  nystrom::NystromOptions options;
  options.kernel = kernel;
  options.landmarks.count = n;
  const nystrom::NystromFactors<double> factors = nystrom::generalized_nystrom<double>(Q, K, options);
  const double recovery = (factors.dense() - G).norm() / G.norm();
  check(recovery < 1e-8, "generalized_nystrom with m = N recovers G", recovery);
  const Matrix approximate = nystrom::nystrom_attention<double>(factors, V);
  const double output_error = (approximate - exact).norm() / exact.norm();
  check(output_error < 1e-8, "nystrom_attention with m = N against exact attention", output_error);

  // Fewer landmarks: a real approximation, finite and better than nothing.
  options.landmarks.count = 8;
  const double coarse =
      (nystrom::nystrom_attention<double>(nystrom::Device::cpu, Q, K, V, options) - exact).norm() /
      exact.norm();
  check(std::isfinite(coarse) && coarse < 1, "nystrom_attention with m = 8 (relative error below 1)", coarse);
  std::printf("CUDA backend compiled in: %s\n", nystrom::cuda_compiled() ? "yes" : "no");
  return failures == 0 ? 0 : 1;
}
