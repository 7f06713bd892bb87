#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>

#include "nystrom/pinv.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// A random m×m matrix U·diag(σ)·Vᵀ with singular values spread evenly over [low, high] (U, V Haar-like
/// orthogonal from QR of Gaussian matrices): non-symmetric with condition number high/low.
template <class T>
Matrix<T> conditioned_matrix(Index m, double low, double high, std::uint64_t seed) {
  const Matrix<double> U =
      Eigen::HouseholderQR<Matrix<double>>(random_matrix<double>(m, m, seed)).householderQ();
  const Matrix<double> V =
      Eigen::HouseholderQR<Matrix<double>>(random_matrix<double>(m, m, seed + 1)).householderQ();
  const Vector<double> sigma = Vector<double>::LinSpaced(m, high, low);
  return (U * sigma.asDiagonal() * V.transpose()).template cast<T>();
}

/// σ₁ of A by a full SVD in double (the oracle used to place α relative to the convergence ranges).
template <class T>
double largest_singular_value(const Matrix<T>& A) {
  return Eigen::JacobiSVD<Matrix<double>>(A.template cast<double>()).singularValues()(0);
}

/// True when two pseudoinverse results hold the same bits: Z, the residuals (NaN included), the status and
/// the iteration count.
template <class T>
bool same_bits(const PinvResult<T>& a, const PinvResult<T>& b) {
  const auto bytes = [](const auto& values) { return values.size() * sizeof(values.data()[0]); };
  return a.z.rows() == b.z.rows() && a.z.cols() == b.z.cols() &&
         std::memcmp(a.z.data(), b.z.data(), bytes(a.z)) == 0 && a.residuals.size() == b.residuals.size() &&
         std::memcmp(a.residuals.data(), b.residuals.data(), bytes(a.residuals)) == 0 &&
         a.status == b.status && a.iterations == b.iterations && a.alpha == b.alpha;
}

PinvOptions iterative(PinvMethod method, double alpha, int iterations, double tolerance = 0) {
  PinvOptions options;
  options.method = method;
  options.alpha = alpha;
  options.iterations = iterations;
  options.tolerance = tolerance;
  return options;
}

/// Tolerance on ‖Z − A⁺‖_F/‖A⁺‖_F after convergence: 1e-10 in double as the issue asks, the √m·eps scale in
/// float.
template <class T>
double inverse_tolerance(Index m) {
  return std::is_same_v<T, double> ? 1e-10 : 50 * tolerance<T>(m);
}

constexpr PinvMethod iterative_methods[] = {PinvMethod::razavi, PinvMethod::newton_schulz};

}  // namespace

TEST_CASE("pinv names round-trip") {
  for (auto method : {PinvMethod::exact, PinvMethod::razavi, PinvMethod::newton_schulz})
    CHECK(pinv_method_from_string(to_string(method)) == method);
  CHECK(throws_naming([] { pinv_method_from_string("cholesky"); }, "cholesky"));
  CHECK(to_string(PinvStatus::non_finite) == "non-finite");
  CHECK(to_string(PinvStatus::diverged) == "diverged");
}

TEST_CASE_TEMPLATE("exact pinv equals the dense SVD pseudoinverse", T, float, double) {
  const Index m = 16;
  SUBCASE("full rank") {
    const Matrix<T> A = random_matrix<T>(m, m, 1001);
    const PinvResult<T> result = pseudoinverse<T>(A, PinvOptions{});
    const Matrix<double> oracle =
        dense_pinv(A.template cast<double>(), m * std::numeric_limits<T>::epsilon());
    const double condition = largest_singular_value<T>(A) * oracle.norm();
    CHECK(result.status == PinvStatus::converged);
    CHECK(result.rank == m);
    CHECK(result.alpha == 0);
    CHECK(result.residuals.size() == 1);
    CHECK(relative_difference(result.z, oracle) <= tolerance<T>(m) * condition);
    CHECK(result.residual() <= tolerance<T>(m) * condition);
  }
  SUBCASE("rank deficient: the four Penrose conditions") {
    const Matrix<T> A = random_low_rank<T>(m, m, 5, 1002);
    const PinvResult<T> result = pseudoinverse<T>(A, PinvOptions{});
    CHECK(result.rank == 5);
    const Matrix<double> a = A.template cast<double>(), z = result.z.template cast<double>();
    const Matrix<double> oracle = dense_pinv(a, m * std::numeric_limits<T>::epsilon());
    const double condition =
        largest_singular_value<T>(A) * Eigen::JacobiSVD<Matrix<double>>(oracle).singularValues()(0);
    const double tol = tolerance<T>(m) * condition;
    CHECK(relative_difference(a * z * a, a) <= tol);
    CHECK(relative_difference(z * a * z, z) <= tol);
    CHECK(relative_difference((a * z).transpose(), a * z) <= tol);
    CHECK(relative_difference((z * a).transpose(), z * a) <= tol);
    CHECK(relative_difference(z, oracle) <= tol);
    // The residual ‖I − AZ‖_F of a rank-5 projector is √(m − 5).
    CHECK(result.residual() == doctest::Approx(std::sqrt(double(m - 5))).epsilon(tol));
  }
  SUBCASE("repeated landmarks: a kernel core with exactly repeated rows and columns") {
    // 12 landmarks, 4 distinct tokens each repeated 3 times (segment means of block-constant tokens with
    // m > blocks): rank exactly 4, the case a divide-and-conquer SVD must not trip over.
    const Matrix<T> distinct = random_matrix<T>(4, 6, 1004), other = random_matrix<T>(4, 6, 1005);
    Matrix<T> q(12, 6), k(12, 6);
    for (Index i = 0; i < 12; ++i) {
      q.row(i) = distinct.row(i / 3);
      k.row(i) = other.row(i % 4);
    }
    const Matrix<T> A = Kernel::exponential(0.4).block<T>(q, k);
    const PinvResult<T> result = pseudoinverse<T>(A, PinvOptions{});
    CHECK(result.status == PinvStatus::converged);
    CHECK(result.rank == 4);
    const Matrix<double> a = A.template cast<double>(), z = result.z.template cast<double>();
    const Matrix<double> oracle = dense_pinv(a, 12 * std::numeric_limits<T>::epsilon());
    const double tol = tolerance<T>(12) * largest_singular_value<T>(A) *
                       Eigen::JacobiSVD<Matrix<double>>(oracle).singularValues()(0);
    CHECK(relative_difference(a * z * a, a) <= tol);
    CHECK(relative_difference(z * a * z, z) <= tol);
    CHECK(relative_difference(z, oracle) <= tol);
  }
  SUBCASE("a relative cut drops the small singular values") {
    // Singular values 1..0.1 evenly; a cut at 0.5 keeps those > 0.5·σ₁.
    const Matrix<T> A = conditioned_matrix<T>(m, 0.1, 1, 1003);
    PinvOptions options;
    options.tolerance = 0.5;
    const PinvResult<T> result = pseudoinverse<T>(A, options);
    const Matrix<double> oracle = dense_pinv(A.template cast<double>(), 0.5);
    // σ_k = 1 − 0.06k: those above 0.5 are k = 0..8.
    CHECK(result.rank == 9);
    CHECK(relative_difference(result.z, oracle) <= tolerance<T>(m) * 20);
  }
  SUBCASE("the zero matrix has the zero pseudoinverse") {
    const PinvResult<T> result = pseudoinverse<T>(Matrix<T>::Zero(4, 4), PinvOptions{});
    CHECK(result.rank == 0);
    CHECK(result.z.isZero(0));
    CHECK(pseudoinverse<T>(Matrix<T>::Zero(4, 4), iterative(PinvMethod::razavi, 0, 3)).z.isZero(0));
  }
}

TEST_CASE_TEMPLATE("Razavi and Newton-Schulz converge to the pseudoinverse for alpha inside the range", T,
                   float, double) {
  const Index m = 16;
  const Matrix<T> A = conditioned_matrix<T>(m, 1, 3, 2001);
  const double sigma1 = largest_singular_value<T>(A);
  const Matrix<double> oracle = dense_pinv(A.template cast<double>(), 1e-12);
  // Residual target: the rounding floor of ‖I − AZ‖ in T, with room.
  const double target = std::is_same_v<T, double> ? 1e-13 : 10 * tolerance<T>(m);
  for (PinvMethod method : iterative_methods) {
    const double upper =
        method == PinvMethod::razavi ? 3 : 2;  // monotone ranges: ασ₁² < 3 (Razavi), < 2 (N–S)
    for (double fraction : {0.5, 0.9}) {
      CAPTURE(to_string(method));
      CAPTURE(fraction);
      const double alpha = fraction * upper / (sigma1 * sigma1);
      const PinvResult<T> result = pseudoinverse<T>(A, iterative(method, alpha, 60, target));
      CHECK(result.status == PinvStatus::converged);
      CHECK(result.alpha == alpha);
      CHECK(result.iterations < 60);
      CHECK(result.residuals.size() == static_cast<std::size_t>(result.iterations) + 1);
      CHECK(result.residual() <= target);
      CHECK(relative_difference(result.z, oracle) <= inverse_tolerance<T>(m));
    }
    // The default α is the per-matrix safe one and converges as well.
    const PinvResult<T> safe = pseudoinverse<T>(A, iterative(method, 0, 60, target));
    CHECK(safe.alpha == doctest::Approx(safe_alpha<T>(A)));
    CHECK(safe.status == PinvStatus::converged);
    CHECK(relative_difference(safe.z, oracle) <= inverse_tolerance<T>(m));
  }
}

TEST_CASE_TEMPLATE("iterative pinv records one residual per iteration, decreasing for a well-conditioned A",
                   T, float, double) {
  const Matrix<T> A = conditioned_matrix<T>(12, 1, 2, 3001);
  for (PinvMethod method : iterative_methods) {
    CAPTURE(to_string(method));
    const PinvResult<T> result = pseudoinverse<T>(A, iterative(method, 0, 4));
    CHECK(result.status == PinvStatus::completed);
    CHECK(result.iterations == 4);
    REQUIRE(result.residuals.size() == 5);
    for (std::size_t k = 1; k < result.residuals.size(); ++k)
      CHECK(result.residuals[k] < result.residuals[k - 1]);
    // Each entry is ‖I − AZ_k‖_F of the iterate it belongs to: recompute the last one from Z.
    const Matrix<double> product = A.template cast<double>() * result.z.template cast<double>();
    CHECK(result.residual() ==
          doctest::Approx((Matrix<double>::Identity(12, 12) - product).norm()).epsilon(1e-12));
    // The start is Z₀ = αAᵀ.
    CHECK(result.residuals[0] ==
          doctest::Approx((Matrix<double>::Identity(12, 12) -
                           result.alpha * A.template cast<double>() * A.template cast<double>().transpose())
                              .norm())
              .epsilon(tolerance<T>(12) * 10));
  }
  // Newton–Schulz squares the residual matrix each step (I − AX_{k+1} = (I − AX_k)²), so
  // ‖E_{k+1}‖_F ≤ ‖E_k‖_2·‖E_k‖_F ≤ ‖E_k‖_F².
  const PinvResult<T> ns = pseudoinverse<T>(A, iterative(PinvMethod::newton_schulz, 0, 4));
  for (std::size_t k = 1; k < ns.residuals.size(); ++k)
    CHECK(ns.residuals[k] <= ns.residuals[k - 1] * ns.residuals[k - 1] * (1 + 100 * tolerance<T>(12)));
}

TEST_CASE_TEMPLATE("divergence is reported for alpha beyond the convergence range", T, float, double) {
  const Index m = 16;
  const Matrix<T> A = conditioned_matrix<T>(m, 1, 3, 4001);
  const double sigma1 = largest_singular_value<T>(A);
  struct Case {
    PinvMethod method;
    double alpha_sigma1_squared;
  };
  for (const Case c : {Case{PinvMethod::razavi, 4.5}, Case{PinvMethod::razavi, 6},
                       Case{PinvMethod::razavi, 20}, Case{PinvMethod::newton_schulz, 2.2},
                       Case{PinvMethod::newton_schulz, 3}, Case{PinvMethod::newton_schulz, 20}}) {
    CAPTURE(to_string(c.method));
    CAPTURE(c.alpha_sigma1_squared);
    const PinvResult<T> result =
        pseudoinverse<T>(A, iterative(c.method, c.alpha_sigma1_squared / (sigma1 * sigma1), 12));
    CHECK(result.status == PinvStatus::diverged);
    CHECK(result.iterations < 12);  // stopped early, before overflow
    CHECK(std::isfinite(result.residual()));
    CHECK(result.residual() > result.residuals[result.residuals.size() - 2]);
  }
  // An α so large that the iterate overflows: a status, not a crash.
  const PinvResult<T> overflow = pseudoinverse<T>(A, iterative(PinvMethod::newton_schulz, 1e300, 5));
  CHECK(overflow.status == PinvStatus::non_finite);
}

TEST_CASE_TEMPLATE("a singular matrix: the iterates reach A⁺, then long runs are reported diverged", T, float,
                   double) {
  // Rank 3 of 6: in floating point the null directions carry rounding, which every step amplifies by 13/4
  // (Razavi) or 2 (Newton–Schulz) where MZ cannot see it, until the products' rounding lifts the residual.
  const Index m = 6, rank = 3;
  const Matrix<double> exact = random_matrix<double>(m, rank, 51) * random_matrix<double>(rank, m, 52);
  const Matrix<T> A = exact.template cast<T>();
  // In float the rounded A has rank 6, its three extra singular values at float rounding: cut there.
  const Matrix<double> expected =
      dense_pinv(A.template cast<double>(), 100 * double(std::numeric_limits<T>::epsilon()));
  for (const PinvMethod method : iterative_methods) {
    CAPTURE(to_string(method));
    const PinvResult<T> early =
        pseudoinverse<T>(A, iterative(method, 0, method == PinvMethod::razavi ? 10 : 20));
    CHECK(early.status == PinvStatus::completed);
    CHECK((early.z.template cast<double>() - expected).norm() <= 1e3 * tolerance<T>(m) * expected.norm());
    // The residual stays at √(m − rank) while Z grows; it then rises above its start, and the run stops
    // there.
    const PinvResult<T> late = pseudoinverse<T>(A, iterative(method, 0, 1000));
    CHECK(late.status == PinvStatus::diverged);
    CHECK(late.iterations < 1000);
    CHECK(std::isfinite(late.residual()));
    CHECK(late.residual() > late.residuals.front());
  }
}

TEST_CASE("Razavi's scalar map: alpha*sigma1^2 slightly above 4 still converges") {
  // Derived: I − AZ_{k+1} = ¼E³(3I + E) with E = I − AZ_k, so a direction with e = 1 − ασ² < −3 maps to a
  // positive e; it diverges only when e³(3 + e)/4 > 1, i.e. ασ₁² ≳ 4.13. At ασ₁² = 4.05, e = −3.05 maps to
  // 0.355 and converges. Other directions at ασ² ≤ 1.8, away from Razavi's slow region near ασ² = 3 (e = −2
  // is a fixed point of the map).
  const Matrix<double> A = (Vector<double>(6) << 3, 2, 1.75, 1.5, 1.25, 1).finished().asDiagonal();
  const PinvResult<double> result =
      pseudoinverse<double>(A, iterative(PinvMethod::razavi, 4.05 / 9, 30, 1e-13));
  CHECK(result.status == PinvStatus::converged);
  CHECK(relative_difference(result.z, Matrix<double>(A.inverse())) <= 1e-12);
  const PinvResult<double> beyond =
      pseudoinverse<double>(A, iterative(PinvMethod::razavi, 4.2 / 9, 30, 1e-13));
  CHECK(beyond.status == PinvStatus::diverged);
}

TEST_CASE_TEMPLATE("Tikhonov and shift regularizations equal their closed forms", T, float, double) {
  const Index m = 10;
  // Singular (rank 6, entries of variance 1/6): only the regularized inverses exist; they have condition
  // ≈ 20.
  const Matrix<T> A = (random_low_rank<T>(m, m, 6, 5001) / T(6)).eval();
  const Matrix<double> a = A.template cast<double>();
  const double epsilon = 0.3;
  const Matrix<double> identity = Matrix<double>::Identity(m, m);
  SUBCASE("Tikhonov (AᵀA + εI)⁻¹Aᵀ") {
    const Matrix<double> oracle =
        (a.transpose() * a + epsilon * identity).partialPivLu().solve(a.transpose());
    PinvOptions options;
    options.tikhonov = epsilon;
    CHECK(relative_difference(pseudoinverse<T>(A, options).z, oracle) <= 100 * tolerance<T>(m));
    options = iterative(PinvMethod::newton_schulz, 0, 200, std::is_same_v<T, double> ? 1e-12 : 1e-4);
    options.tikhonov = epsilon;
    const PinvResult<T> result = pseudoinverse<T>(A, options);
    CHECK(result.status == PinvStatus::converged);
    CHECK(relative_difference(result.z, oracle) <= (std::is_same_v<T, double> ? 1e-9 : 1e-3));
  }
  SUBCASE("shift (A + εI)⁻¹ for a symmetric positive semidefinite A") {
    const Matrix<T> W = A * A.transpose();
    const Matrix<double> w = W.template cast<double>();
    const Matrix<double> oracle = (w + epsilon * identity).inverse();
    PinvOptions options;
    options.shift = epsilon;
    CHECK(relative_difference(pseudoinverse<T>(W, options).z, oracle) <= 100 * tolerance<T>(m) * w.norm());
    options = iterative(PinvMethod::razavi, 0, 200, std::is_same_v<T, double> ? 1e-12 : 1e-4);
    options.shift = epsilon;
    const PinvResult<T> result = pseudoinverse<T>(W, options);
    CHECK(result.status == PinvStatus::converged);
    CHECK(relative_difference(result.z, oracle) <= (std::is_same_v<T, double> ? 1e-9 : 1e-2));
  }
}

TEST_CASE_TEMPLATE("safe alpha keeps alpha*sigma1^2 <= 1", T, float, double) {
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    const Matrix<T> A = random_matrix<T>(8, 8, 6000 + seed, 3);
    const double sigma1 = largest_singular_value<T>(A);
    CHECK(safe_alpha<T>(A) * sigma1 * sigma1 <= 1 + tolerance<T>(8));
  }
}

TEST_CASE_TEMPLATE("the iterations at the ends of the type's range: no overflow, no underflow", T, float,
                   double) {
  // A core of 1e-20 in float needs α = 1e40, beyond float (its start Z₀ = αAᵀ was infinite: status
  // non-finite); norms of 1e155 in double made ‖A‖₁‖A‖_∞ overflow (α = 0, Z = 0 "completed"), and at 1e±200
  // α = 1/(‖A‖₁‖A‖_∞) itself lies beyond double: the steps run on A scaled by a power of two.
  const bool is_float = std::is_same_v<T, float>;
  for (const double scale : {is_float ? 1e-20 : 1e-150, is_float ? 1e15 : 1e155, is_float ? 1e-30 : 1e-250,
                             is_float ? 1e34 : 1e250}) {
    for (const PinvMethod method : {PinvMethod::razavi, PinvMethod::newton_schulz}) {
      CAPTURE(scale);
      CAPTURE(to_string(method));
      const Matrix<T> A = (conditioned_matrix<double>(6, 1, 2, 9000) * scale).template cast<T>();
      const double target = std::is_same_v<T, double> ? 1e-13 : 10 * tolerance<T>(6);
      const PinvResult<T> result = pseudoinverse<T>(A, iterative(method, 0, 60, target));
      CHECK(result.status == PinvStatus::converged);
      // Compared at unit scale: the Frobenius norms of a 1e250 matrix overflow.
      const Matrix<double> oracle = dense_pinv((A.template cast<double>() / scale).eval(), 1e-12);
      CHECK(relative_difference((result.z.template cast<double>() * scale).eval(), oracle) <=
            1e3 * tolerance<T>(6));
    }
  }
  CHECK(
      throws_naming([] { safe_alpha<double>(Matrix<double>::Constant(2, 2, std::nan(""))); }, "safe_alpha"));
}

TEST_CASE_TEMPLATE("a pseudoinverse beyond the type's range is non-finite, an exact start is not divergence",
                   T, float, double) {
  const bool is_float = std::is_same_v<T, float>;
  // A = 1e-40·I in float, 1e-310·I in double (subnormal): A⁺ = 1e40·I, 1e310·I overflow T. Every method used
  // to return an infinite Z as converged or completed.
  const Matrix<T> tiny = Matrix<T>::Identity(4, 4) * T(is_float ? 1e-40 : 1e-310);
  PinvOptions exact;
  for (const PinvOptions& options :
       {exact, iterative(PinvMethod::razavi, 0, 6), iterative(PinvMethod::newton_schulz, 0, 6)}) {
    CAPTURE(to_string(options.method));
    CHECK(pseudoinverse<T>(tiny, options).status == PinvStatus::non_finite);
  }
  // A = c·I with c far from 1 (1e-30 in float, 1e-300 in double): Z₀ = αAᵀ is A⁻¹ to rounding, and the
  // steps' rounding above that start was reported diverged (residual 9e-16 in double).
  const double c = is_float ? 1e-30 : 1e-300;
  const Matrix<T> small = Matrix<T>::Identity(4, 4) * T(c);
  for (const PinvMethod method : {PinvMethod::razavi, PinvMethod::newton_schulz}) {
    CAPTURE(to_string(method));
    const PinvResult<T> result = pseudoinverse<T>(small, iterative(method, 0, 6));
    CHECK(result.status == PinvStatus::completed);
    CHECK(result.residual() <= 16 * 4 * std::numeric_limits<T>::epsilon());
    CHECK(relative_difference((result.z.template cast<double>() * c).eval(),
                              Matrix<double>::Identity(4, 4)) <= 4 * std::numeric_limits<T>::epsilon());
  }
}

TEST_CASE_TEMPLATE("the iterations commute with scaling by a power of two, bit for bit", T, float, double) {
  // pinv(2ᵉA) = 2⁻ᵉpinv(A): the steps run on the same scaled matrix, so Z, the residuals and the status agree
  // to the bit, and α scales by 2⁻²ᵉ; with a given α (scaled alike) too.
  const Matrix<T> A = conditioned_matrix<T>(7, 0.01, 3, 9100);
  for (const PinvMethod method : {PinvMethod::razavi, PinvMethod::newton_schulz}) {
    for (const double alpha : {0.0, 0.5 / (3.0 * 3.0)}) {
      for (const int iterations : {1, 4, 9, 40}) {
        const PinvResult<T> base = pseudoinverse<T>(A, iterative(method, alpha, iterations));
        for (const int e : {-40, -3, 5, 60}) {
          CAPTURE(to_string(method));
          CAPTURE(alpha);
          CAPTURE(iterations);
          CAPTURE(e);
          const Matrix<T> scaled = A * T(std::ldexp(1.0, e));
          PinvResult<T> result =
              pseudoinverse<T>(scaled, iterative(method, std::ldexp(alpha, -2 * e), iterations));
          CHECK(result.alpha == std::ldexp(base.alpha, -2 * e));
          result.alpha = base.alpha;
          result.z *= T(std::ldexp(1.0, e));
          CHECK(same_bits(result, base));
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE(
    "empty matrices have no alpha: refused, naming the shape (the norms' maxima read past them)", T, float,
    double) {
  for (const auto& [rows, cols] : {std::pair{3, 0}, std::pair{0, 3}, std::pair{0, 0}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const std::string shape = std::to_string(rows) + "x" + std::to_string(cols);
    CHECK(throws_naming([&] { safe_alpha<T>(Matrix<T>(rows, cols)); }, "safe_alpha: A is empty (" + shape));
    const std::vector<Matrix<T>> cores = {Matrix<T>::Identity(2, 2), Matrix<T>(rows, cols)};
    CHECK(throws_naming([&] { batch_alpha<T>(cores); }, "batch_alpha: matrix 1 is empty (" + shape));
  }
}

TEST_CASE("bad pinv arguments throw naming the value") {
  const Matrix<double> A = random_matrix<double>(4, 4, 7001);
  const auto fails = [&](const PinvOptions& options, const std::string& needle) {
    return throws_naming([&] { pseudoinverse<double>(A, options); }, needle);
  };
  PinvOptions options;
  options.iterations = 0;
  CHECK(fails(options, "iterations = 0"));
  options.iterations = max_pinv_iterations + 1;
  CHECK(fails(options, "iterations = 10001 must be between 1 and 10000"));
  options = PinvOptions{};
  options.alpha = -1;
  CHECK(fails(options, "alpha = -1"));
  options = PinvOptions{};
  options.tolerance = std::nan("");
  CHECK(fails(options, "tolerance = nan"));
  options = PinvOptions{};
  options.tikhonov = -0.5;
  CHECK(fails(options, "tikhonov = -0.5"));
  options = PinvOptions{};
  options.tikhonov = 0.1;
  options.shift = 0.2;
  CHECK(fails(options, "shift = 0.2"));
  // An ε that the matrix's type holds as Inf or 0 (A + εI is formed in T): refused by name, where LAPACK's or
  // safe_alpha's "non-finite values" blamed A.
  const Matrix<float> A_float = A.cast<float>();
  for (const auto& [tikhonov, shift, needle] : std::vector<std::tuple<double, double, std::string>>{
           {1e39, 0, "tikhonov = 1e+39 lies beyond float's range"},
           {0, 1e308, "shift = 1e+308 lies beyond float's range"},
           {0, 1e-50, "shift = 1e-50 lies beyond float's range"}})
    for (const PinvMethod method : {PinvMethod::exact, PinvMethod::newton_schulz}) {
      options = PinvOptions{};
      options.method = method;
      options.tikhonov = tikhonov;
      options.shift = shift;
      CHECK(throws_naming([&] { pseudoinverse<float>(A_float, options); }, needle));
      CHECK(pseudoinverse<double>(A, options).z.allFinite());  // double holds all three
    }
  // A non-square core for an iteration or a shift, the oracle core (no pseudoinverse of one matrix) and
  // non-finite entries are input errors, not numerical outcomes.
  CHECK(throws_naming(
      [] {
        pseudoinverse<double>(Matrix<double>::Ones(3, 4), {PinvMethod::razavi, 4});
      },
      "pinv: A is 3x4; razavi needs a square A"));
  CHECK(throws_naming(
      [] { pseudoinverse<double>(Matrix<double>::Ones(3, 4), {.method = PinvMethod::exact, .shift = 0.1}); },
      "pinv: A is 3x4; shift needs a square A"));
  CHECK(throws_naming([] { pseudoinverse<double>(Matrix<double>::Ones(3, 3), {PinvMethod::oracle_core}); },
                      "oracle-core"));
  CHECK(
      throws_naming([] { pseudoinverse<double>(Matrix<double>(0, 0), PinvOptions{}); }, "pinv: A is empty"));
  Matrix<double> bad = A;
  bad(1, 2) = std::numeric_limits<double>::infinity();
  CHECK(throws_naming([&] { pseudoinverse<double>(bad, PinvOptions{}); }, "non-finite"));
}

TEST_CASE_TEMPLATE("an iteration run further equals pseudoinverse at every count, bit for bit", T, float,
                   double) {
  const Index m = 10;
  const Matrix<T> A = conditioned_matrix<T>(m, 1, 40, 8001);
  const double sigma1 = largest_singular_value<T>(A);
  struct Case {
    std::string name;
    PinvOptions options;
  };
  std::vector<Case> cases;
  for (PinvMethod method : iterative_methods) {
    cases.push_back({"completed", iterative(method, 0, 1)});
    cases.push_back({"converged", iterative(method, 0, 1, 1e-3)});
    cases.push_back({"diverged", iterative(method, 20 / (sigma1 * sigma1), 1)});
    cases.push_back({"non-finite", iterative(method, 1e300, 1)});
    PinvOptions tikhonov = iterative(method, 0, 1);
    tikhonov.tikhonov = 0.5;
    cases.push_back({"tikhonov", tikhonov});
    PinvOptions shift = iterative(method, 0, 1);
    shift.shift = 0.25;
    cases.push_back({"shift", shift});
  }
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CAPTURE(to_string(c.options.method));
    PinvIteration<T> iteration(A, c.options);
    for (int count : {1, 2, 3, 5, 8, 13, 30}) {
      CAPTURE(count);
      PinvOptions options = c.options;
      options.iterations = count;
      REQUIRE(iteration.continued_by(A, options));
      iteration.run(count);
      const PinvResult<T> continued = iteration.result();
      CHECK(same_bits(continued, pseudoinverse<T>(A, options)));
      CHECK(continued.seconds > 0);
    }
  }
  // The statuses the cases stand for, at 30 iterations.
  const auto status = [&](const PinvOptions& given) {
    PinvOptions options = given;
    options.iterations = 30;
    return pseudoinverse<T>(A, options).status;
  };
  CHECK(status(cases[0].options) == PinvStatus::completed);
  CHECK(status(cases[1].options) == PinvStatus::converged);
  CHECK(status(cases[2].options) == PinvStatus::diverged);
  CHECK(status(cases[3].options) == PinvStatus::non_finite);
}

TEST_CASE("an iteration is continued only by the same matrix and options and a count no smaller") {
  const Matrix<double> A = conditioned_matrix<double>(6, 1, 3, 8101);
  const PinvOptions options = iterative(PinvMethod::razavi, 0, 4);
  PinvIteration<double> iteration(A, options);
  iteration.run(4);
  CHECK(iteration.continued_by(A, options));
  PinvOptions other = options;
  other.iterations = 3;
  CHECK_FALSE(iteration.continued_by(A, other));  // fewer steps than have run
  other = options;
  other.method = PinvMethod::newton_schulz;
  CHECK_FALSE(iteration.continued_by(A, other));
  other = options;
  other.alpha = 0.01;
  CHECK_FALSE(iteration.continued_by(A, other));
  other = options;
  other.tolerance = 1e-9;
  CHECK_FALSE(iteration.continued_by(A, other));
  other = options;
  other.shift = 1e-3;
  CHECK_FALSE(iteration.continued_by(A, other));
  Matrix<double> changed = A;
  changed(2, 3) = std::nextafter(changed(2, 3), 10.0);  // one ulp
  CHECK_FALSE(iteration.continued_by(changed, options));
  CHECK_FALSE(iteration.continued_by(Matrix<double>::Identity(5, 5), options));
  CHECK(throws_naming([&] { PinvIteration<double>(A, PinvOptions{}); }, "exact does not iterate"));
  CHECK(throws_naming([&] { PinvIteration<double>(Matrix<double>::Ones(3, 4), options); }, "pinv: A is 3x4"));
}

TEST_CASE_TEMPLATE("core_pseudoinverse with an iteration: continued, replaced, or exact", T, float, double) {
  const Matrix<T> A = conditioned_matrix<T>(8, 1, 5, 8201), B = conditioned_matrix<T>(8, 1, 5, 8202);
  std::optional<PinvIteration<T>> iteration;
  for (int count : {2, 4, 6}) {
    const PinvOptions options = iterative(PinvMethod::razavi, 0, count);
    CHECK(same_bits(core_pseudoinverse<T>(A, options, iteration), core_pseudoinverse<T>(A, options)));
    REQUIRE(iteration);
    CHECK(iteration->continued_by(A, options));
  }
  // Another core, or fewer steps: a new iteration, the same results.
  const PinvOptions two = iterative(PinvMethod::razavi, 0, 2);
  CHECK(same_bits(core_pseudoinverse<T>(B, two, iteration), core_pseudoinverse<T>(B, two)));
  CHECK(iteration->continued_by(B, two));
  CHECK_FALSE(iteration->continued_by(A, two));
  // The exact method and a non-finite core leave no iteration.
  CHECK(
      same_bits(core_pseudoinverse<T>(A, PinvOptions{}, iteration), core_pseudoinverse<T>(A, PinvOptions{})));
  CHECK_FALSE(iteration);
  iteration.emplace(A, two);
  Matrix<T> overflowed = A;
  overflowed(0, 0) = std::numeric_limits<T>::infinity();
  const PinvResult<T> nan = core_pseudoinverse<T>(overflowed, two, iteration);
  CHECK(nan.status == PinvStatus::non_finite);
  CHECK_FALSE(iteration);
}

TEST_CASE_TEMPLATE("exact and truncated pseudoinverses of rectangular cores equal the dense SVD oracle", T,
                   float, double) {
  // An oversampled core (p×m, p > m; landmarks.hpp) and its transpose: Z = A⁺ by SVD, the residual of the
  // smaller product ‖I − ZA‖_F (tall) or ‖I − AZ‖_F (wide), which is at rounding for full column or row rank.
  const double eps = std::numeric_limits<T>::epsilon();
  for (const auto [rows, cols] : {std::pair<Index, Index>{9, 4}, {4, 9}, {16, 16}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const Matrix<double> a = random_matrix<double>(rows, cols, 71);
    const Matrix<double> oracle = dense_pinv(a, 0);
    for (const PinvMethod method : {PinvMethod::exact, PinvMethod::truncated}) {
      const PinvResult<T> result = pseudoinverse<T>(a.cast<T>(), {method});
      REQUIRE(result.z.rows() == cols);
      REQUIRE(result.z.cols() == rows);
      CHECK((result.z.template cast<double>() - oracle).norm() <= 1e3 * eps * oracle.norm());
      CHECK(result.rank == std::min(rows, cols));
      CHECK(result.residual() <= 1e3 * eps);
      CHECK(result.status == PinvStatus::converged);
    }
  }
  // truncated cuts at √eps relative by default: a singular value of 1e-2·√eps·σ₁ is dropped, exact keeps it.
  Vector<double> sigma(3);
  sigma << 1, 0.5, 1e-2 * std::sqrt(eps);
  const Matrix<double> graded = sigma.asDiagonal() * Matrix<double>::Identity(3, 3);
  CHECK(pseudoinverse<T>(graded.cast<T>(), {PinvMethod::truncated}).rank == 2);
  CHECK(pseudoinverse<T>(graded.cast<T>(), {PinvMethod::exact}).rank == 3);
  // A relative tolerance given keeps what lies above it.
  PinvOptions loose{PinvMethod::truncated};
  loose.tolerance = 0.75;
  CHECK(pseudoinverse<T>(graded.cast<T>(), loose).rank == 1);
}
