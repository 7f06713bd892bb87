#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nystrom/certificates.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/spectral.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// A stored matrix offering only the two products of the operator concept: a Gram product is Aᵀ(A x).
/// Counts its products.
struct ProductsOnly {
  using Scalar = double;
  const Matrix<double>* a;
  mutable int products = 0;
  Index rows() const { return a->rows(); }
  Index cols() const { return a->cols(); }
  void perform_op(const double* x, double* y) const {
    ++products;
    Eigen::Map<Vector<double>>(y, rows()) = *a * Eigen::Map<const Vector<double>>(x, cols());
  }
  void perform_transpose_op(const double* x, double* y) const {
    ++products;
    Eigen::Map<Vector<double>>(y, cols()) = a->transpose() * Eigen::Map<const Vector<double>>(x, rows());
  }
};

/// The same matrix with one-pass Gram products too (counted apart).
struct WithGram : ProductsOnly {
  mutable int gram_products = 0;
  void perform_inner_gram_op(const double* x, double* y) const {
    ++gram_products;
    Eigen::Map<Vector<double>>(y, cols()) =
        a->transpose() * (*a * Eigen::Map<const Vector<double>>(x, cols()));
  }
  void perform_outer_gram_op(const double* x, double* y) const {
    ++gram_products;
    Eigen::Map<Vector<double>>(y, rows()) =
        *a * (a->transpose() * Eigen::Map<const Vector<double>>(x, rows()));
  }
};

/// All singular values by a full JacobiSVD: the oracle.
Vector<double> oracle_singular_values(const Matrix<double>& a) {
  return Eigen::JacobiSVD<Matrix<double>>(a).singularValues();
}

/// How a test hands a matrix to the library: products only, with one-pass Gram products, or as the library's
/// DenseOperator (one-pass and block Gram products: top_singular_values takes block Lanczos).
enum class Kind { products_only, with_gram, dense };

/// The operator kind for sweep case `index`.
Kind kind_of(int index) {
  return static_cast<Kind>(index % 3);
}

/// The norm certificate of `a` through an operator of `kind`.
NormCertificate certificate_of(const Matrix<double>& a, Kind kind, const CertificateOptions& options = {}) {
  switch (kind) {
    case Kind::products_only:
      return norm_certificate(ProductsOnly{&a}, options);
    case Kind::with_gram:
      return norm_certificate(WithGram{{&a}}, options);
    default:
      return norm_certificate(DenseOperator<double>(a), options);
  }
}

/// The top k singular values of `a` by top_singular_values through an operator of `kind`.
SpectralResult top_values_of(const Matrix<double>& a, Index k, Kind kind) {
  switch (kind) {
    case Kind::products_only:
      return top_singular_values(ProductsOnly{&a}, k);
    case Kind::with_gram:
      return top_singular_values(WithGram{{&a}}, k);
    default:
      return top_singular_values(DenseOperator<double>(a), k);
  }
}

/// U diag(σ) Vᵀ (rows×cols) with orthonormal U, V from seeded QRs; σ has min(rows, cols) entries.
Matrix<double> with_singular_values(Index rows, Index cols, const Vector<double>& sigma, std::uint64_t seed) {
  const Index p = sigma.size();
  const Eigen::HouseholderQR<Matrix<double>> left(random_matrix<double>(rows, p, seed));
  const Eigen::HouseholderQR<Matrix<double>> right(random_matrix<double>(cols, p, seed + 1));
  const Matrix<double> U = left.householderQ() * Matrix<double>::Identity(rows, p);
  const Matrix<double> V = right.householderQ() * Matrix<double>::Identity(cols, p);
  return U * sigma.asDiagonal() * V.transpose();
}

/// exp(s·QKᵀ − max) (rows×cols, tokens of d N(0, 1/d) entries) times `scale`: a kernel matrix whose logits
/// span about ±s.
Matrix<double> exp_logits(Index rows, Index cols, double s, double scale, std::uint64_t seed) {
  const Index d = 16;
  const Matrix<double> Q = random_matrix<double>(rows, d, seed, 1 / std::sqrt(double(d)));
  const Matrix<double> K = random_matrix<double>(cols, d, seed + 1, 1 / std::sqrt(double(d)));
  const Matrix<double> logits = s * Q * K.transpose();
  return (logits.array() - logits.maxCoeff()).exp().matrix() * scale;
}

/// The matrix constant on the blocks of a b₁×b₂ partition of rows×cols into contiguous segments.
Matrix<double> block_constant(Index rows, Index cols, Index b1, Index b2, std::uint64_t seed) {
  const Matrix<double> values = random_matrix<double>(b1, b2, seed);
  Matrix<double> out(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) out(i, j) = values(i * b1 / rows, j * b2 / cols);
  return out;
}

/// One test matrix and the family it comes from.
struct Case {
  std::string family;
  Matrix<double> a;
};

/// The families of the sweep: random, rank 1, exactly low rank, equal rows, block-constant, exp(large
/// logits) scaled to 1e±150, zero, σ₁ = σ₂ (no gap), an equispaced spectrum (slow Lanczos convergence), ±1
/// signs (‖|A|‖ ≫ ‖A‖), one row or column, and kernel matrices exp(s·QKᵀ) with large s (some N×N, N odd).
constexpr int family_count = 13;
const char* const kernel_family = "kernel";

/// Case `index` of the sweep: family index mod family_count, sizes from 1×1 to 120×90, seeded by index.
Case sweep_case(int index) {
  std::mt19937_64 engine(0xce27ULL + std::uint64_t(index));
  const auto below = [&](Index bound) { return Index(engine() % std::uint64_t(bound)); };
  const Index rows = 1 + below(120), cols = 1 + below(90), p = std::min(rows, cols);
  const std::uint64_t seed = 7000 + 3 * std::uint64_t(index);
  switch (index % family_count) {
    case 0:
      return {"gaussian", random_matrix<double>(rows, cols, seed)};
    case 1:
      return {"rank 1", random_low_rank<double>(rows, cols, 1, seed)};
    case 2:
      return {"low rank", random_low_rank<double>(rows, cols, std::min<Index>(p, 2 + below(5)), seed)};
    case 3:
      return {"equal rows", Matrix<double>::Ones(rows, 1) * random_matrix<double>(1, cols, seed)};
    case 4:
      return {"block constant", block_constant(rows, cols, 1 + below(std::min<Index>(rows, 6)),
                                               1 + below(std::min<Index>(cols, 6)), seed)};
    case 5:
      return {"logits 1e150", exp_logits(rows, cols, 20 + double(below(40)), 1e150, seed)};
    case 6:
      return {"logits 1e-150", exp_logits(rows, cols, 20 + double(below(40)), 1e-150, seed)};
    case 7:
      return {"zero", Matrix<double>::Zero(rows, cols)};
    case 8: {
      Vector<double> sigma = (random_matrix<double>(p, 1, seed + 2).array().abs() * 0.9).matrix();
      std::sort(sigma.begin(), sigma.end(), std::greater<>());
      sigma.head(std::min<Index>(p, 2)).setOnes();
      return {"no gap", with_singular_values(rows, cols, sigma, seed)};
    }
    case 9:
      return {"equispaced", with_singular_values(rows, cols, Vector<double>::LinSpaced(p, 1, 0), seed)};
    case 10:
      return {"signs", random_matrix<double>(rows, cols, seed).array().sign().matrix()};
    case 11: {  // 1×1, one row, one column
      const Index shape = (index / family_count) % 3;
      return {"thin", random_matrix<double>(shape == 2 ? rows : 1, shape == 1 ? cols : 1, seed)};
    }
    default: {
      const Index n = 1 + 2 * below(60);  // N odd, square
      const bool square = below(2) == 0;
      return {kernel_family,
              exp_logits(square ? n : rows, square ? n : cols, 4 + double(below(12)), 1, seed)};
    }
  }
}

/// The q-quantile of `values` (nearest rank).
double quantile(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, std::size_t(q * double(values.size())))];
}

/// Kuczyński & Woźniakowski's failure bound 1.648·√n·e^{−√ε(2q − 1)}, evaluated directly.
double kw_failure_bound(double epsilon, int q, Index n) {
  return 1.648 * std::sqrt(double(n)) * std::exp(-std::sqrt(epsilon) * (2 * q - 1));
}

}  // namespace

TEST_CASE("lower <= ||A||_2 <= upper on 1,300 random and adversarial matrices, upper/||A||_2 <= 1.5 mostly") {
  const int cases = 100 * family_count;
  int within = 0, positive = 0;
  std::vector<double> kernel_ratios;
  for (int index = 0; index < cases; ++index) {
    const Case c = sweep_case(index);
    const double norm = oracle_singular_values(c.a)(0);
    CertificateOptions options;
    options.seed = std::uint64_t(index);
    const NormCertificate certificate = certificate_of(c.a, kind_of(index), options);
    CAPTURE(index);
    CAPTURE(c.family);
    CAPTURE(c.a.rows());
    CAPTURE(c.a.cols());
    CHECK(certificate.lower <= norm);
    CHECK(norm <= certificate.upper);
    CHECK(certificate.lower <= certificate.estimate);
    CHECK(certificate.estimate <= certificate.upper);
    if (norm == 0) {
      CHECK(certificate.upper == 0);
      continue;
    }
    ++positive;
    const double ratio = certificate.upper / norm;
    within += ratio <= 1.5;
    if (c.family == kernel_family) kernel_ratios.push_back(ratio);
  }
  CHECK(within >= 0.95 * positive);
  REQUIRE(kernel_ratios.size() >= 90);
  const double median = quantile(kernel_ratios, 0.5), p95 = quantile(kernel_ratios, 0.95);
  MESSAGE("upper/||A||_2 on ", kernel_ratios.size(),
          " kernel matrices exp(s QK^T), 30 steps, delta = 1e-6: median ", median, ", 95th percentile ", p95,
          ", max ", quantile(kernel_ratios, 1.0));
  CHECK(p95 <= 1.5);
}

TEST_CASE(
    "epsilon solves the Kuczynski-Wozniakowski bound for delta, and steps_for is the least q that meets a "
    "ratio") {
  for (const Index n : {Index(1), Index(7), Index(1024), Index(1) << 20})
    for (const double delta : {0.5, 1e-6, 1e-15})
      for (const int q : {1, 2, 30, 1000}) {
        CAPTURE(n);
        CAPTURE(delta);
        CAPTURE(q);
        const double epsilon = certificate_epsilon(q, n, delta);
        CHECK(kw_failure_bound(epsilon, q, n) == doctest::Approx(delta).epsilon(1e-12));
      }
  // NLA background: n = 1024, ε = 0.05 gives ≤ 1e-4 at q = 30.
  CHECK(certificate_epsilon(30, 1024, 1e-4) <= 0.05);
  for (const Index n : {Index(1), Index(90), Index(1024), Index(1) << 20})
    for (const double delta : {0.5, 1e-6, 1e-15})
      for (const double ratio : {1.0001, 1.01, 1.1, 1.5, 4.0}) {
        CAPTURE(n);
        CAPTURE(delta);
        CAPTURE(ratio);
        const int q = steps_for(ratio, n, delta);
        const double epsilon = 1 - 1 / (ratio * ratio);  // 1/√(1 − ε) = ratio
        CHECK(kw_failure_bound(epsilon, q, n) <= delta * (1 + 1e-12));
        if (q > 1) CHECK(kw_failure_bound(epsilon, q - 1, n) > delta * (1 - 1e-12));
      }
  CHECK(steps_for(1.1, 1024, 1e-6) == 22);
}

TEST_CASE("the certificate's fields follow from its Ritz value, epsilon and rounding allowance") {
  const Matrix<double> a = random_matrix<double>(110, 80, 5);
  CertificateOptions options;
  for (const int steps : {1, 2, 10, 30}) {
    options.steps = steps;
    const NormCertificate certificate = certificate_of(a, Kind::products_only, options);
    CAPTURE(steps);
    CHECK(certificate.steps == steps);
    CHECK(!certificate.invariant);
    CHECK(certificate.matvecs == 2 * steps);
    CHECK(certificate.failure_probability == options.failure_probability);
    CHECK(certificate.epsilon == certificate_epsilon(steps, 80, options.failure_probability));
    CHECK(certificate.rounding == rounding_allowance(190));
    CHECK(certificate.lower ==
          doctest::Approx(certificate.estimate * std::sqrt(1 - certificate.rounding)).epsilon(1e-15));
    if (certificate.epsilon >= 1) {
      CHECK(certificate.upper == std::numeric_limits<double>::infinity());
    } else {
      CHECK(certificate.upper == doctest::Approx(certificate.estimate / std::sqrt((1 - certificate.epsilon) *
                                                                                  (1 - certificate.rounding)))
                                     .epsilon(1e-15));
    }
  }
}

TEST_CASE("an invariant Krylov space stops Lanczos early with the exact Ritz value (rank 1, zero, small n)") {
  for (const auto& [rows, cols] : {std::pair<Index, Index>{60, 40}, {41, 97}, {120, 90}, {2, 1}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const Vector<double> u = random_matrix<double>(rows, 1, rows), v = random_matrix<double>(cols, 1, cols);
    const Matrix<double> a = u * v.transpose();
    const double norm = u.norm() * v.norm();
    for (const Kind kind : {Kind::products_only, Kind::with_gram, Kind::dense}) {
      const NormCertificate certificate = certificate_of(a, kind);
      CHECK(certificate.invariant);
      CHECK(certificate.steps <= 2);
      CHECK(std::abs(certificate.estimate - norm) <= 1e-14 * norm);
      CHECK(certificate.lower <= norm);
      CHECK(certificate.lower >= norm * (1 - certificate.rounding));
      CHECK(norm <= certificate.upper);
    }
  }
  const Matrix<double> zero = Matrix<double>::Zero(70, 50);
  const NormCertificate nothing = certificate_of(zero, Kind::with_gram);
  CHECK(nothing.lower == 0);
  CHECK(nothing.upper == 0);
  CHECK(nothing.steps == 1);
  CHECK(nothing.invariant);
  // n ≤ steps: the Krylov space spans ℝⁿ and the Ritz value is ‖A‖₂² without probability.
  const Matrix<double> small = random_matrix<double>(90, 12, 3);
  const NormCertificate whole = certificate_of(small, Kind::dense);
  const double norm = oracle_singular_values(small)(0);
  CHECK(whole.steps == 12);
  CHECK(whole.failure_probability == 0);
  CHECK(whole.epsilon == 0);
  CHECK(std::abs(whole.estimate - norm) <= 1e-13 * norm);
  CHECK(whole.lower <= norm);
  CHECK(norm <= whole.upper);
  CHECK(whole.upper <= norm * (1 + whole.rounding));
}

TEST_CASE("the Gram product is the operator's one-pass member where it has one, else two products") {
  const Matrix<double> tall = random_matrix<double>(50, 30, 11), wide = tall.transpose();
  CertificateOptions options;
  options.steps = 7;
  for (const Matrix<double>* a : {&tall, &wide}) {
    const WithGram with{{a}};
    const ProductsOnly without{a};
    const NormCertificate fused = norm_certificate(with, options), plain = norm_certificate(without, options);
    CHECK(with.gram_products == 7);
    CHECK(with.products == 0);
    CHECK(without.products == 14);
    CHECK(fused.matvecs == 14);
    CHECK(plain.matvecs == 14);
    CHECK(fused.estimate == doctest::Approx(plain.estimate).epsilon(1e-13));
  }
}

TEST_CASE("a fixed seed reproduces the certificate, and the guarantee holds over many seeds") {
  // An equispaced spectrum on [0, 1] is slow for Lanczos: with 4 steps the Ritz value varies with the start.
  const Matrix<double> a = with_singular_values(90, 90, Vector<double>::LinSpaced(90, 1, 0).cwiseSqrt(), 21);
  CertificateOptions options;
  options.steps = 4;
  options.failure_probability = 0.2;
  const NormCertificate first = certificate_of(a, Kind::products_only, options),
                        again = certificate_of(a, Kind::products_only, options);
  CHECK(first.estimate == again.estimate);
  CHECK(first.upper == again.upper);
  int failures = 0;
  double smallest = 1, largest = 0;
  for (std::uint64_t seed = 0; seed < 400; ++seed) {
    options.seed = seed;
    const NormCertificate certificate = certificate_of(a, kind_of(int(seed)), options);
    failures += certificate.upper < 1;
    smallest = std::min(smallest, certificate.estimate);
    largest = std::max(largest, certificate.estimate);
  }
  CHECK(largest - smallest > 1e-3);  // the seeds do give different starts
  CHECK(failures <= 0.2 * 400);
  MESSAGE("equispaced spectrum, 4 steps, delta = 0.2: ", failures,
          " of 400 seeds gave upper < ||A||_2; Ritz value ", smallest, " to ", largest);
}

TEST_CASE("singular_value_lower_bound is below the true sigma_k for Ritz values and exact SVDs") {
  int checked = 0;
  for (int index = 0; index < 20 * family_count; ++index) {
    const Case c = sweep_case(index);
    const Vector<double> sigma = oracle_singular_values(c.a);
    const Index n = c.a.rows() + c.a.cols(), p = sigma.size();
    CAPTURE(index);
    CAPTURE(c.family);
    // top_singular_values: block Lanczos (DenseOperator), Spectra's Lanczos on the Gram operator, or a full
    // SVD of the formed operator.
    const Index k = std::min<Index>(p, 1 + index % 6);
    const SpectralResult top = top_values_of(c.a, k, kind_of(index));
    // Rayleigh–Ritz on a random orthonormal basis V of 1 to cols columns: √ of the eigenvalues of VᵀAᵀAV.
    const Index width = 1 + index % c.a.cols();
    const Eigen::HouseholderQR<Matrix<double>> qr(random_matrix<double>(c.a.cols(), width, 500 + index));
    const Matrix<double> V = qr.householderQ() * Matrix<double>::Identity(c.a.cols(), width);
    const Matrix<double> projected = V.transpose() * (c.a.transpose() * (c.a * V));
    const Vector<double> ritz = Eigen::SelfAdjointEigenSolver<Matrix<double>>(projected)
                                    .eigenvalues()
                                    .reverse()
                                    .cwiseMax(0)
                                    .cwiseSqrt();
    for (const Vector<double>* values : {&top.values, &ritz, &sigma})
      for (Index j = 0; j < values->size(); ++j) {
        if (std::isnan((*values)(j))) continue;
        CAPTURE(j);
        const double exact = j < p ? sigma(j) : 0.0;  // a basis wider than min(rows, cols) sees zeros
        CHECK(singular_value_lower_bound((*values)(j), (*values)(0), n) <= exact);
        ++checked;
      }
  }
  CHECK(checked > 2000);
  // Not vacuous: a value well above √ρ·σ₁ loses only ρσ₁²/(2σ_k) ≈ 2n·eps·σ₁²/σ_k.
  CHECK(singular_value_lower_bound(0.5, 1, 200) == doctest::Approx(0.5).epsilon(1e-12));
  CHECK(singular_value_lower_bound(1e-9, 1, 200) == 0);
  CHECK(singular_value_lower_bound(3e299, 1e300, 200) == doctest::Approx(3e299).epsilon(1e-10));
  CHECK(singular_value_lower_bound(0, 0, 1) == 0);
}

TEST_CASE("bad arguments throw naming the value") {
  CertificateOptions options;
  options.steps = 0;
  CHECK(throws_naming([&] { options.validate(); }, "steps = 0"));
  options.steps = 30;
  options.failure_probability = 1;
  CHECK(throws_naming([&] { options.validate(); }, "failure_probability = 1"));
  options.failure_probability = 0;
  CHECK(throws_naming([&] { options.validate(); }, "failure_probability = 0"));
  const Matrix<double> a = random_matrix<double>(5, 4, 1), empty(0, 4);
  CHECK(throws_naming([&] { certificate_of(a, Kind::products_only, options); }, "failure_probability = 0"));
  CHECK(throws_naming([&] { certificate_of(empty, Kind::products_only); }, "0x4"));
  CHECK(throws_naming([&] { certificate_epsilon(0, 5, 1e-6); }, "steps = 0"));
  CHECK(throws_naming([&] { certificate_epsilon(3, 0, 1e-6); }, "n = 0"));
  CHECK(throws_naming([&] { steps_for(1, 5, 1e-6); }, "ratio = 1"));
  CHECK(throws_naming([&] { steps_for(std::nan(""), 5, 1e-6); }, "ratio = nan"));
  CHECK(throws_naming([&] { steps_for(1 + 1e-15, 5, 1e-300); }, "needs more steps"));
  CHECK(throws_naming([&] { steps_for(2, 5, 2); }, "failure_probability = 2"));
  CHECK(throws_naming([&] { singular_value_lower_bound(-1, 1, 5); }, "ritz_value = -1"));
  CHECK(throws_naming([&] { singular_value_lower_bound(1, std::nan(""), 5); }, "sigma1 = nan"));
  CHECK(throws_naming([&] { singular_value_lower_bound(1, 1, 0); }, "n = 0"));
  CHECK(throws_naming([&] { singular_value_lower_bound(1, 1, 5, 1); }, "eps = 1"));
  Matrix<double> overflowing = a;
  overflowing(0, 0) = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(certificate_of(overflowing, Kind::with_gram), NonFiniteProduct);
}
