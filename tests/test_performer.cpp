#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "attention_oracles.hpp"
#include "nystrom/performer.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// FAVOR+ without any shift, in double: φ(x) = exp(ωᵀx − ‖x‖²/2)/√r (+ε·exp(shift) folded in when ε > 0 is
/// not used).
Matrix<double> naive_features(const Matrix<double>& X, const Matrix<double>& omega, double s) {
  Matrix<double> out(X.rows(), omega.rows());
  for (Index i = 0; i < X.rows(); ++i)
    for (Index j = 0; j < omega.rows(); ++j) {
      const Vector<double> x = std::sqrt(s) * X.row(i).transpose();
      out(i, j) = std::exp(omega.row(j).dot(x) - 0.5 * x.squaredNorm()) / std::sqrt(double(omega.rows()));
    }
  return out;
}

Matrix<double> favor(const Matrix<double>& phi_q, const Matrix<double>& phi_k, const Matrix<double>& V) {
  const Matrix<double> s_hat = phi_q * phi_k.transpose();
  return s_hat.rowwise().sum().cwiseInverse().asDiagonal() * (s_hat * V);
}

}  // namespace

TEST_CASE_TEMPLATE(
    "performer equals the unshifted FAVOR+ formula (the shifts cancel), in one panel of tokens and "
    "in several with a partial last one",
    T, float, double) {
  const Index d = 8;
  for (const Index n : {Index(40), Index(600)}) {
    CAPTURE(n);
    const Matrix<T> Q = random_matrix<T>(n, d, 1), K = random_matrix<T>(n, d, 2),
                    V = random_matrix<T>(n, 4, 3);
    PerformerOptions options;
    options.features = 20;
    options.seed = 5;
    const auto result = performer_attention<T>(Q, K, V, 1 / std::sqrt(8.0), options);
    const Matrix<double> omega = performer_projection(20, d, 5);
    CHECK(result.projection == omega);
    const Matrix<double> expected = favor(
        naive_features(Q.template cast<double>(), omega, 1 / std::sqrt(8.0)),
        naive_features(K.template cast<double>(), omega, 1 / std::sqrt(8.0)), V.template cast<double>());
    CHECK(relative_difference(result.output, expected) < 100 * tolerance<T>(n));
    CHECK(relative_difference(Matrix<T>(result.attention_operator().dense() * V), result.output) <
          10 * tolerance<T>(n));
  }
}

namespace {

/// FAVOR+ in logs, in double: w_ij = Σ_f exp(a_if + b_jf) with a, b the unshifted exponents ωᵀx − ‖x‖²/2
/// of φ(q_i), φ(k_j), and Ô_i = Σ_j w_ij v_j / Σ_j w_ij as a softmax over j of log w_ij (a logsumexp over
/// f): no exponent range limits it.
Matrix<double> favor_in_logs(const Matrix<double>& Q, const Matrix<double>& K, const Matrix<double>& V,
                             const Matrix<double>& omega, double s) {
  const auto exponents = [&](const Matrix<double>& X) {
    const Matrix<double> x = std::sqrt(s) * X;
    Matrix<double> e = x * omega.transpose();
    e.colwise() -= 0.5 * x.rowwise().squaredNorm();
    return e;
  };
  const Matrix<double> a = exponents(Q), b = exponents(K);
  Matrix<double> out(Q.rows(), V.cols());
  for (Index i = 0; i < Q.rows(); ++i) {
    Vector<double> log_w(K.rows());
    for (Index j = 0; j < K.rows(); ++j) {
      const Eigen::ArrayXd terms = a.row(i).transpose().array() + b.row(j).transpose().array();
      log_w(j) = terms.maxCoeff() + std::log((terms - terms.maxCoeff()).exp().sum());
    }
    const Eigen::ArrayXd w = (log_w.array() - log_w.maxCoeff()).exp();
    out.row(i) = (w.matrix().transpose() * V) / w.sum();
  }
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("performer stays finite and accurate at any token norm (features beyond exp's range)", T,
                   float, double) {
  const Index n = 40, d = 8, r = 20;
  const double s = 1 / std::sqrt(double(d));
  PerformerOptions options;
  options.projection = performer_projection(r, d, 14);
  const Matrix<double> V = random_matrix<double>(n, 3, 13);
  // Rows of equal norm R/s^{1/2}, so that ‖x‖²/2 = R²/2 exceeds the exponent range of T (e^{-128} underflows
  // float, e^{-882} double): with shifts by the max of ωᵀx alone every feature was 0, and Ô = 0/0. Gaussian
  // rows times 300: ‖x‖²/2 up to about 3·10⁵, and the keys' features differ by far more than any exponent
  // range, so that with one shift for all keys a query's features could meet only underflowed key sums.
  const double R = std::is_same_v<T, float> ? 16 : 42;
  const auto rows_of_norm = [&](std::uint64_t seed) {
    Matrix<double> X = random_matrix<double>(n, d, seed);
    X.rowwise().normalize();
    return Matrix<double>(X * (R / std::sqrt(s)));
  };
  const std::pair<Matrix<double>, Matrix<double>> inputs[] = {
      {rows_of_norm(11), rows_of_norm(12)},
      {random_matrix<double>(n, d, 15, 300), random_matrix<double>(n, d, 16, 300)}};
  for (const auto& [Q, K] : inputs) {
    const auto result =
        performer_attention<T>(Q.template cast<T>(), K.template cast<T>(), V.template cast<T>(), s, options);
    REQUIRE(all_finite(result.output));
    // ωᵀx − ‖x‖²/2 is rounded at the size of ‖x‖²/2, which moves each feature by about ‖x‖²·eps/2.
    const double largest =
        s * std::max(Q.rowwise().squaredNorm().maxCoeff(), K.rowwise().squaredNorm().maxCoeff());
    CHECK(relative_difference(result.output, favor_in_logs(Q, K, V, options.projection, s)) <
          largest * std::numeric_limits<T>::epsilon());
  }
}

TEST_CASE("performer's feature epsilon is added after the package's max shifts") {
  const Index n = 12, d = 4;
  const Matrix<double> Q = random_matrix<double>(n, d, 4), K = random_matrix<double>(n, d, 5),
                       V = random_matrix<double>(n, 3, 6);
  PerformerOptions options;
  options.projection = performer_projection(6, d, 9);
  options.feature_epsilon = 1e-4;
  const auto result = performer_attention<double>(Q, K, V, 0.5, options);
  const double root_s = std::sqrt(0.5);
  const Matrix<double> dash_q = root_s * Q * options.projection.transpose();
  const Matrix<double> dash_k = root_s * K * options.projection.transpose();
  Matrix<double> phi_q(n, 6), phi_k(n, 6);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < 6; ++j) {
      phi_q(i, j) =
          (std::exp(dash_q(i, j) - 0.25 * Q.row(i).squaredNorm() - dash_q.row(i).maxCoeff()) + 1e-4) /
          std::sqrt(6.0);
      phi_k(i, j) = (std::exp(dash_k(i, j) - 0.25 * K.row(i).squaredNorm() - dash_k.maxCoeff()) + 1e-4) /
                    std::sqrt(6.0);
    }
  CHECK(relative_difference(result.output, favor(phi_q, phi_k, V)) < 1e-13);
}

TEST_CASE("orthogonal projection: orthogonal rows within each d-block, chi-distributed norms") {
  const Index d = 16, r = 40;
  const Matrix<double> omega = performer_projection(r, d, 3);
  for (Index start = 0; start < r; start += d) {
    const Index rows = std::min(d, r - start);
    const Matrix<double> block = omega.middleRows(start, rows);
    const Matrix<double> gram = block * block.transpose();
    const Matrix<double> off_diagonal = gram - Matrix<double>(gram.diagonal().asDiagonal());
    CHECK(off_diagonal.cwiseAbs().maxCoeff() < 1e-10 * gram.diagonal().maxCoeff());
  }
  // E‖ω‖² = d for χ_d norms: the mean over 40 rows is within a few standard errors (sd of ‖ω‖² is √(2d)).
  CHECK(std::abs(omega.rowwise().squaredNorm().mean() - d) < 4 * std::sqrt(2.0 * d / r));
}

TEST_CASE("performer is unbiased: many features approach exact attention") {
  const Index n = 64, d = 8;
  const Matrix<double> Q = random_matrix<double>(n, d, 7, 0.5), K = random_matrix<double>(n, d, 8, 0.5),
                       V = random_matrix<double>(n, 4, 9);
  const Matrix<double> exact = naive_attention(Q, K, V, 1 / std::sqrt(8.0));
  PerformerOptions options;
  options.seed = 1;
  options.features = 16;
  const double coarse =
      relative_difference(performer_attention<double>(Q, K, V, 1 / std::sqrt(8.0), options).output, exact);
  options.features = 4096;
  const double fine =
      relative_difference(performer_attention<double>(Q, K, V, 1 / std::sqrt(8.0), options).output, exact);
  CHECK(fine < 0.05);
  CHECK(fine < coarse);
}

TEST_CASE("performer rejects bad input naming the value") {
  const Matrix<double> Q = random_matrix<double>(10, 4, 1), V = random_matrix<double>(10, 2, 2);
  PerformerOptions options;
  options.features = -3;
  CHECK(throws_naming([&] { performer_attention<double>(Q, Q, V, 0.5, options); }, "features = -3"));
  options.features = 0;
  options.projection = Matrix<double>::Ones(5, 3);
  CHECK(throws_naming([&] { performer_attention<double>(Q, Q, V, 0.5, options); }, "3 columns"));
  CHECK(PerformerOptions{}.feature_count(64) == 266);  // ⌊64 ln 64⌋, the package's default
}
