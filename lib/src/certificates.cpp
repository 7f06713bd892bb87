#include "nystrom/certificates.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "nystrom/error.hpp"
#include "random.hpp"

namespace nystrom {

namespace {

/// Throws std::invalid_argument naming `where` unless 0 < δ < 1.
void require_failure_probability(double failure_probability, const char* where) {
  require(failure_probability > 0 && failure_probability < 1, where,
          ": failure_probability = ", failure_probability, " must lie in (0, 1)");
}

/// ln(1.648·√n/δ): √ε·(2q − 1) at which Kuczyński & Woźniakowski's bound 1.648·√n·e^{−√ε(2q − 1)} equals δ.
double log_failure_ratio(Index n, double failure_probability) {
  return std::log(1.648 * std::sqrt(static_cast<double>(n)) / failure_probability);
}

/// A unit vector uniform on the sphere of ℝⁿ: a standard normal vector (redrawn in the 2⁻⁵³-per-entry event
/// that every entry is 0) normalized.
Vector<double> random_unit_vector(Index n, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  Vector<double> v(n);
  do
    for (Index i = 0; i < n; ++i) v(i) = detail::standard_normal(engine);
  while (v.squaredNorm() == 0);
  return v.normalized();
}

/// The largest eigenvalue of the symmetric tridiagonal matrix with diagonal α and off-diagonal β.
double largest_tridiagonal_eigenvalue(const Vector<double>& alpha, const Vector<double>& beta) {
  Eigen::SelfAdjointEigenSolver<Matrix<double>> solver;
  solver.computeFromTridiagonal(alpha, beta, Eigen::EigenvaluesOnly);
  return solver.eigenvalues().maxCoeff();
}

}  // namespace

void CertificateOptions::validate() const {
  require(steps >= 1, "certificate options: steps = ", steps, " must be >= 1");
  require_failure_probability(failure_probability, "certificate options");
}

double certificate_epsilon(int steps, Index n, double failure_probability) {
  require(steps >= 1, "certificate_epsilon: steps = ", steps, " must be >= 1");
  require(n >= 1, "certificate_epsilon: n = ", n, " must be >= 1");
  require_failure_probability(failure_probability, "certificate_epsilon");
  const double root = log_failure_ratio(n, failure_probability) / (2 * static_cast<double>(steps) - 1);
  return root * root;
}

int steps_for(double ratio, Index n, double failure_probability) {
  require(std::isfinite(ratio) && ratio > 1, "steps_for: ratio = ", ratio, " must be finite and > 1");
  require(n >= 1, "steps_for: n = ", n, " must be >= 1");
  require_failure_probability(failure_probability, "steps_for");
  // 1/√(1 − ε) ≤ ratio ⇔ √ε ≤ √(1 − 1/ratio²) ⇔ 2q − 1 ≥ ln(1.648·√n/δ)/√(1 − 1/ratio²).
  const double root = std::sqrt(1 - 1 / (ratio * ratio));
  const double estimate = std::ceil((log_failure_ratio(n, failure_probability) / root + 1) / 2);
  require(estimate < std::numeric_limits<int>::max(), "steps_for: ratio = ", ratio,
          " needs more steps than an int holds (", estimate, ")");
  // The closed form can miss by one in rounding: settle q on the ratio certificate_epsilon gives.
  const auto meets = [&](int q) {
    return 1 / std::sqrt(1 - certificate_epsilon(q, n, failure_probability)) <= ratio;
  };
  int q = std::max(1, static_cast<int>(estimate));
  while (q > 1 && meets(q - 1)) --q;
  while (!meets(q)) ++q;
  return q;
}

double singular_value_lower_bound(double ritz_value, double sigma1, Index n, double eps) {
  require(std::isfinite(ritz_value) && ritz_value >= 0,
          "singular_value_lower_bound: ritz_value = ", ritz_value, " must be finite and >= 0");
  require(std::isfinite(sigma1) && sigma1 >= 0, "singular_value_lower_bound: sigma1 = ", sigma1,
          " must be finite and >= 0");
  require(n >= 1, "singular_value_lower_bound: n = ", n, " must be >= 1");
  require(eps >= 0 && eps < 1, "singular_value_lower_bound: eps = ", eps, " must lie in [0, 1)");
  const double scale = std::max(sigma1, ritz_value);
  if (scale == 0) return 0;
  const double ratio = ritz_value / scale;  // on σ/scale: no overflow of σ² near the top of double's range
  return scale * std::sqrt(std::max(ratio * ratio - rounding_allowance(n, eps), 0.0));
}

namespace detail {

TopRitzValue top_ritz_value(Index n, const SymmetricProduct& product, double rounding,
                            const CertificateOptions& options) {
  const Index limit = std::min<Index>(options.steps, n);
  Matrix<double> basis(n, limit);
  basis.col(0) = random_unit_vector(n, options.seed);
  Vector<double> alpha(limit), beta(limit), w(n);
  double largest = 0;  // max ‖M v_j‖: the scale of the products' rounding
  TopRitzValue top;
  while (top.steps < limit) {
    const Index j = top.steps++;
    product(basis.col(j).data(), w.data());
    require_finite_product(w, n);
    largest = std::max(largest, w.norm());
    // Full reorthogonalization: two classical Gram–Schmidt passes against v_0 … v_j; α_j = v_jᵀ M v_j.
    alpha(j) = 0;
    for (int pass = 0; pass < 2; ++pass) {
      const Vector<double> coefficients = basis.leftCols(top.steps).transpose() * w;
      w.noalias() -= basis.leftCols(top.steps) * coefficients;
      alpha(j) += coefficients(j);
    }
    beta(j) = w.norm();
    if (beta(j) <= rounding * largest) break;  // M maps the Krylov space into itself to rounding
    if (top.steps < limit) basis.col(top.steps) = w / beta(j);
  }
  top.invariant = top.steps < options.steps;
  top.theta = std::max(largest_tridiagonal_eigenvalue(alpha.head(top.steps), beta.head(top.steps - 1)), 0.0);
  return top;
}

NormCertificate certify(const TopRitzValue& top, double root, Index n, double rounding,
                        const CertificateOptions& options) {
  NormCertificate certificate;
  const bool spans = top.steps == n;  // T is M in an orthonormal basis of ℝⁿ: θ = λ₁ up to rounding
  certificate.epsilon = spans ? 0 : certificate_epsilon(options.steps, n, options.failure_probability);
  certificate.failure_probability = spans ? 0 : options.failure_probability;
  certificate.rounding = rounding;
  certificate.steps = top.steps;
  certificate.invariant = top.invariant;
  certificate.estimate = std::sqrt(top.theta) * root;
  certificate.lower = certificate.estimate * std::sqrt(std::max(1 - rounding, 0.0));
  // θ ≥ (1 − ε)(1 − ρ)·λ₁ except with probability δ.
  certificate.upper = certificate.epsilon < 1 && rounding < 1
                          ? certificate.estimate / std::sqrt((1 - certificate.epsilon) * (1 - rounding))
                          : std::numeric_limits<double>::infinity();
  return certificate;
}

}  // namespace detail

}  // namespace nystrom
