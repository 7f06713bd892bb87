#include <doctest/doctest.h>

#include <cmath>

#include "nystrom/bounds.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/spectral.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// ‖A‖₂ by JacobiSVD in double.
double norm2(const Matrix<double>& a) {
  return Eigen::JacobiSVD<Matrix<double>>(a).singularValues()(0);
}

/// The bounds of a directly built G̃ = [[G_A, G_U], [G_L, G]] with an m×m core, checked against E = G − G_L
/// G_A⁺ G_U.
struct Case {
  BoundReport report;
  bool singular_core = false;
};

Case bounds_of(const Matrix<double>& extended, Index m) {
  const Index n = extended.rows() - m;
  const Matrix<double> core = extended.topLeftCorner(m, m), upper = extended.topRightCorner(m, n);
  const Matrix<double> left = extended.bottomLeftCorner(n, m), g = extended.bottomRightCorner(n, n);
  const Matrix<double> error = g - left * dense_pinv(core, 1e-14) * upper;
  const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(extended).singularValues();
  const Vector<double> sigma_core = Eigen::JacobiSVD<Matrix<double>>(core).singularValues();
  const BoundInputs inputs{sigma(0), sigma(m), sigma_core(m - 1), norm2(error),
                           theorem3_constant<double>(left, core, upper)};
  return {evaluate_bounds(inputs), !(sigma_core(m - 1) > 1e-14 * sigma_core(0))};
}

}  // namespace

TEST_CASE("theorems 1–3 hold on random and low-rank-plus-noise extended matrices whenever they apply") {
  int cases = 0, theorem1 = 0, theorem2 = 0, theorem3 = 0;
  std::uint64_t seed = 1000;
  for (int trial = 0; trial < 1200; ++trial) {
    const Index m = 1 + trial % 6;
    const Index size = m + 4 + (trial * 7) % (40 - m - 4 + 1);  // N + m ≤ 40
    Matrix<double> extended;
    switch (trial % 3) {
      case 0:
        extended = random_matrix<double>(size, size, ++seed);
        break;
      case 1: {  // rank m plus noise of decreasing size: the regime where the bounds apply
        const double noise = std::pow(10.0, -1.0 - (trial % 9));
        extended =
            random_low_rank<double>(size, size, m, ++seed) + random_matrix<double>(size, size, ++seed, noise);
        break;
      }
      default: {  // a positive kernel-like matrix exp(X Yᵀ / 4) of low-dimensional tokens
        const Matrix<double> X = random_matrix<double>(size, 3, ++seed),
                             Y = random_matrix<double>(size, 3, ++seed);
        extended = (X * Y.transpose() / 4.0).array().exp().matrix();
      }
    }
    const Case c = bounds_of(extended, m);
    ++cases;
    theorem1 += c.report.theorem1_applies;
    theorem2 += c.report.theorem2_applies;
    theorem3 += c.report.theorem3_applies;
    CAPTURE(trial);
    CAPTURE(c.report.spectral_error);
    CAPTURE(c.report.theorem1);
    CAPTURE(c.report.theorem2);
    CAPTURE(c.report.theorem3);
    if (!c.singular_core) CHECK(c.report.holds(1e-8));
  }
  CHECK(cases >= 1000);
  // Each theorem is exercised on many matrices, not only vacuously.
  CHECK(theorem1 >= 200);
  CHECK(theorem2 >= 1000);
  CHECK(theorem3 >= 100);
}

TEST_CASE("Corollary 2.2: a rank-m extended matrix gives E = 0 and zero bounds") {
  const Index m = 4, size = 30;
  const Case c = bounds_of(random_low_rank<double>(size, size, m, 7), m);
  CHECK(c.report.spectral_error <= 1e-10 * c.report.sigma1_ext);
  CHECK(c.report.theorem1_applies);
  CHECK(c.report.theorem1 <= 1e-10 * c.report.sigma1_ext);
  CHECK(c.report.holds());
}

TEST_CASE_TEMPLATE(
    "Corollary 2.2 on block-constant tokens: σ_{m+1}(G̃) at the rounding floor, every bound finite", T, float,
    double) {
  // The sweep's exact-recovery case: segment-constant tokens and m = blocks segment-means landmarks give
  // rank(G̃) = m, so σ_{m+1}(G̃) is O((N + m)·eps·σ₁) and the bounds are tiny, finite and respected.
  for (auto [n, d, m] : {std::array<Index, 3>{480, 12, 8}, {301, 3, 5}}) {
    CAPTURE(n);
    const Matrix<T> Q = segment_constant<T>(n, d, m, 81), K = segment_constant<T>(n, d, m, 82);
    LandmarkOptions options;
    options.count = m;
    const Landmarks<T> marks = select_landmarks<T>(Q, K, options, Kernel{});
    const Kernel kernel = Kernel::exponential(1 / std::sqrt(double(d)));
    // The four blocks are cut from one G̃, so that E and the bounds are of the same matrix: blocks evaluated
    // on their own may round otherwise (BLAS kernels without FMA sum each entry's product by the block's
    // shape), a difference of eps·σ₁ that a rounding-level E and bound would not survive.
    const ExtendedTokens<T> tokens = extended_tokens<T>(Q, K, marks);
    const Matrix<T> extended = kernel.block<T>(tokens.queries, tokens.keys);
    const Matrix<T> core = extended.topLeftCorner(m, m), upper = extended.topRightCorner(m, n),
                    left = extended.bottomLeftCorner(n, m), g = extended.bottomRightCorner(n, n);
    const Vector<double> sigma = singular_values<T>(extended);
    const double floor = double(n + m) * std::numeric_limits<T>::epsilon() * sigma(0);
    CHECK(sigma(m) <= floor);
    const Matrix<double> a = core.template cast<double>();
    const double sigma_m_core = singular_values<T>(core)(m - 1);
    CHECK(sigma_m_core > 1e-8 * sigma(0));  // a nonsingular core
    const Matrix<double> error = g.template cast<double>() -
                                 left.template cast<double>() * a.inverse() * upper.template cast<double>();
    const BoundReport report = evaluate_bounds(
        {sigma(0), sigma(m), sigma_m_core, norm2(error), theorem3_constant<T>(left, core, upper)});
    CHECK(report.spectral_error <= floor);
    CHECK(report.theorem1_applies);
    CHECK(report.theorem2_applies);
    CHECK(report.theorem3_applies);
    for (double bound : {report.ratio, report.theorem1, report.theorem2, report.theorem3, report.theorem3_k})
      CHECK(std::isfinite(bound));
    CHECK(report.ratio <= floor / sigma_m_core);
    CHECK(report.holds(1e-8));
  }
}

TEST_CASE(
    "evaluate_bounds follows the table of docs/mathematics.md §3, NaN and false where a bound does not "
    "apply") {
  // σ₁ = 10, σ_{m+1} = 1, a = 2, ‖E‖₂ = 3, K = 1.5.
  BoundReport r = evaluate_bounds({10, 1, 2, 3, 1.5});
  CHECK(r.ratio == doctest::Approx(0.5));
  CHECK(r.theorem1_applies);
  CHECK(r.theorem1 == doctest::Approx(100.0 / (2 - 1) * 1 / 2));
  CHECK(r.theorem2 == doctest::Approx(2 * 100.0 * 1 / 4));
  CHECK(r.theorem3_applies);
  CHECK(r.theorem3 == doctest::Approx(1.5));
  CHECK(r.c_emp == doctest::Approx(3.0 * 2 / 1));
  CHECK(r.c_emp_normalized == doctest::Approx(6.0 / 100));
  CHECK_FALSE(r.holds());  // theorem 3 (1.5) is below the error 3
  // a ≤ σ_{m+1}: theorem 1 does not apply; K σ_{m+1} ≥ a: theorem 3 does not apply.
  r = evaluate_bounds({10, 2, 1, 0.5, 4});
  CHECK_FALSE(r.theorem1_applies);
  CHECK(std::isnan(r.theorem1));
  CHECK_FALSE(r.theorem3_applies);
  CHECK(std::isnan(r.theorem3));
  CHECK(r.theorem2_applies);
  CHECK(r.holds());
  // Singular core: only the ratio (Inf) and C_emp remain.
  r = evaluate_bounds({10, 2, 0, 0.5, std::numeric_limits<double>::infinity()});
  CHECK_FALSE(r.theorem2_applies);
  CHECK(std::isnan(r.theorem2));
  CHECK(std::isinf(r.ratio));
  CHECK(r.holds());
  CHECK(throws_naming([] { evaluate_bounds({-1, 0, 0, 0, 0}); }, "-1"));
}

TEST_CASE("the theorems are taken at σ̄ = σ_{m+1} + its margin, the ratio and C_emp at σ_{m+1} itself") {
  // σ₁ = 10, σ_{m+1} = 1 with margin 0.5 (σ̄ = 1.5), a = 2, ‖E‖₂ = 3, K = 1.5.
  BoundReport r = evaluate_bounds({10, 1, 2, 3, 1.5, 0.5});
  CHECK(r.ratio == doctest::Approx(0.5));
  CHECK(r.theorem1_applies);
  CHECK(r.theorem1 == doctest::Approx(100.0 / (2 - 1.5) * 1.5 / 2));
  CHECK(r.theorem2 == doctest::Approx(2 * 100.0 * 1.5 / 4));
  CHECK_FALSE(r.theorem3_applies);  // K σ̄ = 2.25 ≥ a, where K σ_{m+1} = 1.5 < a
  CHECK(r.c_emp == doctest::Approx(3.0 * 2 / 1));
  CHECK(r.c_emp_normalized == doctest::Approx(6.0 / 100));
  // σ̄ = a: theorem 1 does not apply.
  r = evaluate_bounds({10, 1, 2, 3, 1.5, 1});
  CHECK_FALSE(r.theorem1_applies);
  CHECK(std::isnan(r.theorem1));
  // A G̃ of rank 1 to rounding (σ₁ = 1.5e98, σ_{m+1} computed as 0) and a = 0.01: a lies far below the
  // rounding floor of σ_{m+1}, so nothing says a > σ_{m+1}. Without the margin theorems 1 and 3 applied with
  // bound 0 against an error of 1.5e98.
  const double sigma1 = 1.5e98, margin = rounding_factor<double>(1024, 16) * sigma1;
  r = evaluate_bounds({sigma1, 0, 0.01, sigma1, 2, margin});
  CHECK_FALSE(r.theorem1_applies);
  CHECK_FALSE(r.theorem3_applies);
  CHECK(r.theorem2 == doctest::Approx(2 * sigma1 * sigma1 * margin / 1e-4));  // Inf: it overflows
  CHECK(r.holds());
  r = evaluate_bounds({sigma1, 0, 0.01, sigma1, 2});
  CHECK((r.theorem1_applies && r.theorem1 == 0 && r.theorem3_applies && r.theorem3 == 0));
  CHECK(throws_naming([] { evaluate_bounds({1, 0, 1, 0, 1, -0.25}); }, "-0.25"));
}

TEST_CASE_TEMPLATE("theorem3_constant equals (1+‖G_L G_A⁻¹‖₂)(1+‖G_A⁻¹G_U‖₂), +Inf for a singular core", T,
                   float, double) {
  const Index n = 25, m = 5;
  const Matrix<T> left = random_matrix<T>(n, m, 1), core = random_matrix<T>(m, m, 2),
                  upper = random_matrix<T>(m, n, 3);
  const Matrix<double> inverse = core.template cast<double>().inverse();
  const double expected = (1 + norm2(left.template cast<double>() * inverse)) *
                          (1 + norm2(inverse * upper.template cast<double>()));
  const double cond = norm2(core.template cast<double>()) * norm2(inverse);
  CHECK(std::abs(theorem3_constant<T>(left, core, upper) - expected) <= 1e-12 * cond * cond * expected);
  // core_terms: the same K, and σ_m(G_A) of the SVD of the core (scaled by a power of two: the same digits).
  const CoreTerms terms = core_terms<T>(left, core, upper);
  CHECK(terms.theorem3_k == theorem3_constant<T>(left, core, upper));
  const double sigma_m = singular_values<T>(core)(m - 1);
  CHECK(std::abs(terms.sigma_m_core - sigma_m) <= 2 * std::numeric_limits<double>::epsilon() * sigma_m);
  // Landmarks that are all the tokens (m = N): G_L = G_U = G_A, so K = (1 + ‖I‖₂)² = 4 up to cond·eps.
  CHECK(std::abs(theorem3_constant<T>(core, core, core) - 4) <=
        64 * cond * std::numeric_limits<double>::epsilon() * 4);
  // Equal tokens: G_L = G_Uᵀ = 1 (N×m) with G_A = I give Gram matrices N·11ᵀ, one eigenvalue N·m and m − 1
  // equal zeros (bisection for the top one alone failed on such spectra); ‖1‖₂ = √(Nm), K = (1 + √(Nm))².
  const double ones_norm = std::sqrt(double(n * m));
  CHECK(
      std::abs(theorem3_constant<T>(Matrix<T>::Ones(n, m), Matrix<T>::Identity(m, m), Matrix<T>::Ones(m, n)) -
               (1 + ones_norm) * (1 + ones_norm)) <=
      double(n * m) * std::numeric_limits<double>::epsilon() * (1 + ones_norm) * (1 + ones_norm));
  // No tokens (N = 0): empty G_L G_A⁻¹ and G_A⁻¹G_U have norm 0, K = 1.
  CHECK(theorem3_constant<T>(Matrix<T>(0, m), core, Matrix<T>(m, 0)) == 1);
  Matrix<T> singular = core;
  singular.row(4) = singular.row(3);
  CHECK(std::isinf(theorem3_constant<T>(left, singular, upper)));
  CHECK(throws_naming([&] { theorem3_constant<T>(left, Matrix<T>(m, m + 1), upper); }, "5x6"));
  CHECK(throws_naming([&] { theorem3_constant<T>(left, core, Matrix<T>(upper.leftCols(n - 1))); }, "5x24"));
  Matrix<T> infinite = left;
  infinite(3, 2) = std::numeric_limits<T>::infinity();
  CHECK(throws_naming([&] { theorem3_constant<T>(infinite, core, upper); }, "theorem3_constant: left"));
  // K does not change when the three blocks share a scale: the Gram products under- and overflowed at the
  // ends of the type's range (K off by a factor 170 at 1e-200 in double).
  for (const double scale :
       {double(std::numeric_limits<T>::min()) * 64, double(std::numeric_limits<T>::max()) / 64}) {
    CAPTURE(scale);
    const double scaled = theorem3_constant<T>((left.template cast<double>() * scale).template cast<T>(),
                                               (core.template cast<double>() * scale).template cast<T>(),
                                               (upper.template cast<double>() * scale).template cast<T>());
    CHECK(std::abs(scaled - expected) <= 1e-4 * cond * cond * expected);
  }
}

TEST_CASE("the bounds do not depend on the scale of the kernel: σ₁², a² and their ratios at 1e±200") {
  const BoundInputs unit{.sigma1_ext = 3.0,
                         .sigma_m1_ext = 1e-3,
                         .sigma_m_core = 0.5,
                         .spectral_error = 1e-4,
                         .theorem3_k = 7.0};
  const BoundReport reference = evaluate_bounds(unit);
  for (const double scale : {1e-200, 1e200}) {
    CAPTURE(scale);
    const BoundReport r = evaluate_bounds({.sigma1_ext = 3.0 * scale,
                                           .sigma_m1_ext = 1e-3 * scale,
                                           .sigma_m_core = 0.5 * scale,
                                           .spectral_error = 1e-4 * scale,
                                           .theorem3_k = 7.0});
    CHECK(r.theorem1_applies == reference.theorem1_applies);
    CHECK(r.theorem1 / scale == doctest::Approx(reference.theorem1).epsilon(1e-14));
    CHECK(r.theorem2 / scale == doctest::Approx(reference.theorem2).epsilon(1e-14));
    CHECK(r.theorem3 / scale == doctest::Approx(reference.theorem3).epsilon(1e-14));
    CHECK(r.c_emp / scale == doctest::Approx(reference.c_emp).epsilon(1e-14));
    CHECK(r.c_emp_normalized * scale == doctest::Approx(reference.c_emp_normalized).epsilon(1e-14));
    CHECK(r.holds() == reference.holds());
  }
  CHECK(throws_naming([&] { evaluate_bounds({.sigma1_ext = 1, .theorem3_k = -1}); }, "theorem3_k = -1"));
}
