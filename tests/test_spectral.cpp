#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "nystrom/landmarks.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/spectral.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// All singular values by JacobiSVD in double: the oracle.
Vector<double> oracle_singular_values(const Matrix<double>& a) {
  return Eigen::JacobiSVD<Matrix<double>>(a).singularValues();
}

/// A = U diag(σ) Vᵀ (rows×cols, orthonormal U, V from seeded QRs) with σ_i = 10^(-i) for i < 12, then a flat
/// tail at 1e-13.
Matrix<double> graded_matrix(Index rows, Index cols, std::uint64_t seed) {
  const Eigen::HouseholderQR<Matrix<double>> left(random_matrix<double>(rows, cols, seed));
  const Eigen::HouseholderQR<Matrix<double>> right(random_matrix<double>(cols, cols, seed + 1));
  const Matrix<double> U = left.householderQ() * Matrix<double>::Identity(rows, cols);
  const Matrix<double> V = right.householderQ() * Matrix<double>::Identity(cols, cols);
  Vector<double> sigma = Vector<double>::Constant(cols, 1e-13);
  for (Index i = 0; i < 12; ++i) sigma(i) = std::pow(10.0, -double(i));
  return U * sigma.asDiagonal() * V.transpose();
}

/// Distance from `value` to the nearest of `spectrum`.
double distance_to_spectrum(double value, const Vector<double>& spectrum) {
  return (spectrum.array() - value).abs().minCoeff();
}

/// G̃ = κ([Q̄; Q], [K̄; K]) (exponential kernel) of segment-constant tokens with `blocks` segment-means
/// landmarks: its rows (and columns) repeat within each block, so rank(G̃) ≤ blocks exactly (Corollary 2.2).
template <class T>
Matrix<T> exactly_low_rank_extended(Index n, Index d, Index blocks, std::uint64_t seed) {
  const Matrix<T> Q = segment_constant<T>(n, d, blocks, seed),
                  K = segment_constant<T>(n, d, blocks, seed + 1);
  LandmarkOptions options;
  options.strategy = LandmarkStrategy::segment_means;
  options.count = blocks;
  const ExtendedTokens<T> tokens = extended_tokens<T>(Q, K, select_landmarks<T>(Q, K, options, Kernel{}));
  return Kernel::exponential(1 / std::sqrt(double(d))).block<T>(tokens.queries, tokens.keys);
}

/// A stored matrix offering only single-vector products (and the one-pass Gram product): top_singular_values
/// takes Spectra's restarted Lanczos on it, where a DenseOperator takes the block Lanczos.
template <class T>
struct VectorProductsOnly {
  using Scalar = T;
  DenseOperator<T> dense;
  Index rows() const { return dense.rows(); }
  Index cols() const { return dense.cols(); }
  void perform_op(const T* x, T* y) const { dense.perform_op(x, y); }
  void perform_transpose_op(const T* x, T* y) const { dense.perform_transpose_op(x, y); }
  void perform_outer_gram_op(const T* x, T* y) const { dense.perform_outer_gram_op(x, y); }
  void perform_inner_gram_op(const T* x, T* y) const { dense.perform_inner_gram_op(x, y); }
};

}  // namespace

TEST_CASE_TEMPLATE("block Lanczos (stored matrices) and Spectra's restarted Lanczos both equal the SVD", T,
                   float, double) {
  const double eps = std::numeric_limits<T>::epsilon();
  struct Case {
    const char* name;
    Matrix<double> a;
    Index k;
  };
  // A clustered kernel spectrum (the sweep's G̃), a graded one, an exactly rank-3 one (the Krylov space is
  // invariant after one block: deflated directions), tall and wide.
  const Matrix<double> X = random_matrix<double>(330, 16, 91), Y = random_matrix<double>(330, 16, 92);
  const Case cases[] = {{"kernel", Kernel::exponential(0.25).block<double>(X, Y), 17},
                        {"graded", graded_matrix(300, 240, 93), 6},
                        {"rank 3 tall", random_low_rank<double>(320, 260, 3, 94), 6},
                        {"rank 3 wide", random_low_rank<double>(260, 320, 3, 95), 6},
                        {"k = 1", random_matrix<double>(300, 280, 96), 1}};
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Matrix<T> A = c.a.template cast<T>();
    const Vector<double> oracle = oracle_singular_values(A.template cast<double>());
    const double slack = std::sqrt(double(A.size())) * eps * oracle(0);
    const SpectralResult block = top_singular_values(DenseOperator<T>(A), c.k);
    const SpectralResult spectra = top_singular_values(VectorProductsOnly<T>{DenseOperator<T>(A)}, c.k);
    for (const SpectralResult* result : {&block, &spectra}) {
      CAPTURE(result == &block);
      CHECK(result->converged);
      REQUIRE(result->values.size() == c.k);
      // Values resolvable by a Gram method (above √eps·σ₁) to the products' rounding; the rest within their
      // certificate where it is finite.
      for (Index i = 0; i < c.k; ++i) {
        CAPTURE(i);
        if (oracle(i) >= 10 * std::sqrt(eps) * oracle(0))
          CHECK(std::abs(result->values(i) - oracle(i)) <= 10 * slack * oracle(0) / oracle(i));
      }
      if (std::isfinite(result->last_error_bound))
        CHECK(distance_to_spectrum(result->values(c.k - 1), oracle) <= result->last_error_bound + slack);
    }
  }
}

TEST_CASE("singular values do not depend on the operator's scale: every Lanczos form, 1e-150 to 1e150") {
  // Spectra's convergence test has an absolute floor and its norms square the entries: before the products
  // were brought to unit scale, A·1e-10 gave values 13% low and A·1e100 30% low, marked converged.
  const Matrix<double> a = random_matrix<double>(140, 120, 97);
  const Vector<double> oracle = oracle_singular_values(a);
  const Index k = 3;
  for (const double scale : {1e-150, 1e-100, 1e-50, 1e-10, 1.0, 1e10, 1e50, 1e100, 1e150}) {
    CAPTURE(scale);
    const Matrix<double> scaled = scale * a;
    const SpectralResult block = top_singular_values(DenseOperator<double>(scaled), k);
    const SpectralResult spectra =
        top_singular_values(VectorProductsOnly<double>{DenseOperator<double>(scaled)}, k);
    const SpectralResult augmented = top_singular_values_augmented(DenseOperator<double>(scaled), k);
    for (const SpectralResult* result : {&block, &spectra, &augmented}) {
      CAPTURE(result == &block);
      CAPTURE(result == &augmented);
      REQUIRE(result->converged);
      REQUIRE(result->values.size() == k);
      for (Index i = 0; i < k; ++i)
        CHECK(std::abs(result->values(i) / scale - oracle(i)) <= 1e-12 * oracle(0));
      CHECK(distance_to_spectrum(result->values(k - 1) / scale, oracle) <=
            result->last_error_bound / scale + 1e-13 * oracle(0));
    }
  }
}

TEST_CASE(
    "block Lanczos: a non-finite product gives NaN values and a basis it cannot fill is left to Spectra") {
  Vector<double> ritz;
  const detail::BlockProduct nan_product = [](const ConstMatrixRef<double>& x, Matrix<double>& y) {
    y = Matrix<double>::Constant(x.rows(), x.cols(), std::numeric_limits<double>::quiet_NaN());
  };
  const SpectralResult bad = detail::block_lanczos(500, 3, nan_product, ritz, {});
  REQUIRE(bad.values.size() == 3);
  CHECK(std::isnan(bad.values(0)));
  CHECK_FALSE(bad.converged);
  // The identity: every Ritz value is 1 at once, converged on the first check.
  const detail::BlockProduct identity = [](const ConstMatrixRef<double>& x, Matrix<double>& y) { y = x; };
  const SpectralResult one = detail::block_lanczos(500, 5, identity, ritz, {});
  CHECK(one.converged);
  CHECK((one.values.array() - 1).abs().maxCoeff() <= 1e-14);
  CHECK(ritz.size() == 500);
  // Too small for a basis of k + b vectors beside the operator size: empty values, for the caller's path.
  CHECK(detail::block_lanczos(20, 17, identity, ritz, {}).values.size() == 0);
  CHECK(ritz.size() == 0);
}

TEST_CASE_TEMPLATE("dense_svd equals the JacobiSVD oracle: values and thin vectors, both orientations", T,
                   float, double) {
  for (auto [rows, cols] : {std::pair<Index, Index>{70, 40}, {40, 70}, {50, 50}, {1, 9}, {9, 1}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const Index p = std::min(rows, cols);
    const Matrix<T> A = random_matrix<T>(rows, cols, 61);
    const Matrix<double> a = A.template cast<double>();  // exact: the SVD is computed in double
    const Vector<double> oracle = oracle_singular_values(a);
    const DenseSvd values = dense_svd<T>(A);
    REQUIRE(values.values.size() == p);
    CHECK(values.u.size() == 0);
    CHECK(values.v.size() == 0);
    CHECK((values.values - oracle).cwiseAbs().maxCoeff() <= tolerance<double>(rows * cols) * oracle(0));
    CHECK(singular_values<T>(A) == values.values);
    const DenseSvd thin = dense_svd<T>(A, SvdVectors::thin);
    REQUIRE(thin.u.rows() == rows);
    REQUIRE(thin.u.cols() == p);
    REQUIRE(thin.v.rows() == cols);
    REQUIRE(thin.v.cols() == p);
    CHECK((thin.values - oracle).cwiseAbs().maxCoeff() <= tolerance<double>(rows * cols) * oracle(0));
    const Matrix<double> identity = Matrix<double>::Identity(p, p);
    CHECK((thin.u.transpose() * thin.u - identity).norm() <= tolerance<double>(rows * p));
    CHECK((thin.v.transpose() * thin.v - identity).norm() <= tolerance<double>(cols * p));
    CHECK((thin.u * thin.values.asDiagonal() * thin.v.transpose() - a).norm() <=
          tolerance<double>(rows * cols) * a.norm());
  }
  const DenseSvd empty = dense_svd<T>(Matrix<T>(0, 3), SvdVectors::thin);
  CHECK(empty.values.size() == 0);
  CHECK(empty.v.rows() == 3);
  Matrix<T> bad = random_matrix<T>(4, 4, 62);
  bad(1, 2) = std::numeric_limits<T>::infinity();
  CHECK(throws_naming([&] { dense_svd<T>(bad); }, "non-finite"));
}

TEST_CASE_TEMPLATE(
    "exactly rank-deficient G̃: the SVD and both Lanczos forms place σ_{m+1} at the rounding "
    "floor and certify it",
    T, float, double) {
  // The sweep's Corollary 2.2 case (N = 480, d = 12, 8 blocks, m = 8) and an uneven split: rank(G̃) = m.
  for (auto [n, d, m] : {std::array<Index, 3>{480, 12, 8}, {333, 5, 7}}) {
    CAPTURE(n);
    CAPTURE(m);
    const Matrix<T> extended = exactly_low_rank_extended<T>(n, d, m, 71 + std::uint64_t(n));
    const Matrix<double> wide = extended.template cast<double>();
    const Vector<double> oracle = oracle_singular_values(wide);
    const double sigma1 = oracle(0);
    // Rows repeat exactly (or up to the kernel's rounding in T): every σ beyond the m-th lies at the floor.
    const double floor = double(n + m) * std::numeric_limits<T>::epsilon() * sigma1;
    REQUIRE(oracle(m) <= floor);
    REQUIRE(oracle(m - 1) > 1e-6 * sigma1);  // the m nonzero values are resolvable by every method
    const Vector<double> sigma = singular_values<T>(extended);
    CHECK((sigma.head(m) - oracle.head(m)).cwiseAbs().maxCoeff() <= tolerance<double>(n * n) * sigma1);
    CHECK(sigma.tail(n).maxCoeff() <= floor);
    // Lanczos on the operator in T: its products carry the rounding slack n·eps(T)·σ₁.
    const DenseOperator<T> op(extended);
    const double slack = double(n + m) * std::numeric_limits<T>::epsilon() * sigma1;
    struct Run {
      const char* form;
      SpectralResult top;
      bool squared;  // the Gram form: σ_i carries about slack·σ₁/σ_i
    };
    const Run runs[] = {{"gram", top_singular_values(op, m + 1), true},
                        {"augmented", top_singular_values_augmented(op, m + 1), false}};
    for (const Run& run : runs) {
      CAPTURE(run.form);
      CAPTURE(run.top.last_error_bound);
      const SpectralResult& top = run.top;
      REQUIRE(top.values.size() == m + 1);
      for (Index i = 0; i < m; ++i)
        CHECK(std::abs(top.values(i) - oracle(i)) <=
              (run.squared ? slack * sigma1 / oracle(i) : slack) + 1e-12 * sigma1);
      // σ_{m+1} lies within its certificate of the true spectrum (the floor) up to the products' rounding.
      // In double both forms return it; with float products the augmented form may stop short of the
      // zero cluster and say so (NaN value and certificate, as documented).
      if (std::is_same_v<T, double>) REQUIRE(std::isfinite(top.last_error_bound));
      if (std::isnan(top.last_error_bound)) continue;
      CHECK(std::isfinite(top.values(m)));
      CHECK(distance_to_spectrum(top.values(m), oracle) <= top.last_error_bound + slack);
    }
  }
}

TEST_CASE("Lanczos ‖A‖₂ and top-k equal the dense SVD for stored matrices of both orientations") {
  for (auto [rows, cols] : {std::pair<Index, Index>{400, 250}, {250, 400}, {300, 300}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const Matrix<double> A = random_matrix<double>(rows, cols, 1);
    const Vector<double> sigma = oracle_singular_values(A);
    const DenseOperator<double> op(A);
    const SpectralResult norm = spectral_norm(op);
    CHECK(norm.converged);
    CHECK(std::abs(norm.values(0) - sigma(0)) <= 1e-10 * sigma(0));
    const SpectralResult top = top_singular_values(op, 6);
    REQUIRE(top.values.size() == 6);
    for (Index i = 0; i < 6; ++i) CHECK(std::abs(top.values(i) - sigma(i)) <= 1e-10 * sigma(0));
    CHECK(top.matvecs > 0);
  }
}

TEST_CASE("Lanczos ‖·‖₂ of kernel and difference operators equals the dense SVD") {
  const Index n = 400, d = 8;
  const Matrix<double> Q = random_matrix<double>(n, d, 11, 0.8), K = random_matrix<double>(n, d, 12, 0.8);
  for (const Kernel& kernel : {Kernel::exponential(0.35), Kernel::laplacian(4.0)}) {
    CAPTURE(kernel.label());
    const Matrix<double> G = naive_kernel<double>(Q, K, kernel);
    const KernelOperator<double> g(Q, K, kernel, 64);
    const double sigma_g = oracle_singular_values(G)(0);
    CHECK(std::abs(spectral_norm(g).values(0) - sigma_g) <= 1e-10 * sigma_g);
    NystromOptions options;
    options.kernel = kernel;
    options.landmarks.count = 12;
    const auto f = generalized_nystrom<double>(Q, K, options);
    const NystromOperator<double> approximation(f);
    const DifferenceOperator<KernelOperator<double>, NystromOperator<double>> error(g, approximation);
    const Vector<double> sigma_e = oracle_singular_values(G - f.dense());
    const SpectralResult top = top_singular_values(error, 3);
    CHECK(top.converged);
    for (Index i = 0; i < 3; ++i) CHECK(std::abs(top.values(i) - sigma_e(i)) <= 1e-10 * sigma_e(0));
  }
}

TEST_CASE_TEMPLATE("zero operators: Lanczos returns 0, certified, where Spectra's start was 0/0", T, float,
                   double) {
  // Spectra starts from A·v0/‖A·v0‖; a zero operator made that NaN and its tridiagonal eigensolver throw. The
  // Gram form, the augmented form and a rank-1 operator whose null space holds nothing random all run.
  const Index rows = 60, cols = 45, k = 3;
  const Matrix<T> zeros = Matrix<T>::Zero(rows, cols);
  const VectorProductsOnly<T> zero{DenseOperator<T>(zeros)};
  for (const SpectralResult& result :
       {top_singular_values(zero, k), top_singular_values_augmented(zero, k), spectral_norm(zero)}) {
    CHECK(result.converged);
    CHECK(result.values == Vector<double>::Zero(result.values.size()));
    CHECK(result.last_error_bound == 0);
  }
  const Matrix<T> rank_one = random_matrix<T>(rows, 1, 5) * random_matrix<T>(1, cols, 6);
  const Vector<double> sigma = oracle_singular_values(rank_one.template cast<double>());
  const SpectralResult top = top_singular_values(VectorProductsOnly<T>{DenseOperator<T>(rank_one)}, k);
  CHECK(std::abs(top.values(0) - sigma(0)) <= tolerance<T>(rows * cols) * sigma(0));
  CHECK(top.values.tail(k - 1).maxCoeff() <= tolerance<T>(rows * cols) * sigma(0));
  // Equal tokens: G = e^{s c² d}·11ᵀ, rank 1 (Spectra returned 28926 for 33.9 here, as converged).
  const Matrix<T> equal = Matrix<T>::Constant(33, 8, T(0.1));
  const Kernel kernel = Kernel::exponential(1 / std::sqrt(8.0));
  const double g = oracle_singular_values(
      naive_kernel<double>(equal.template cast<double>(), equal.template cast<double>(), kernel))(0);
  CHECK(std::abs(spectral_norm(KernelOperator<T, double>(equal, equal, kernel, 16)).values(0) - g) <=
        tolerance<T>(33 * 33) * g);
}

TEST_CASE("an operator with a non-finite entry is refused naming it, not left to Spectra's NaN") {
  Matrix<double> A = random_matrix<double>(60, 45, 7);
  A(3, 4) = std::numeric_limits<double>::infinity();
  const VectorProductsOnly<double> op{DenseOperator<double>(A)};
  CHECK(throws_naming([&] { spectral_norm(op); }, "not finite"));
  CHECK(throws_naming([&] { top_singular_values_augmented(op, 2); }, "not finite"));
  CHECK(throws_naming([&] { spectral_norm(DenseOperator<double>(A)); }, "not finite"));  // block Lanczos
}

TEST_CASE_TEMPLATE("float operators are solved in double to the accuracy of their products", T, float,
                   double) {
  const Matrix<T> A = random_matrix<T>(200, 150, 21);
  const double sigma = oracle_singular_values(A.template cast<double>())(0);
  CHECK(std::abs(spectral_norm(DenseOperator<T>(A)).values(0) - sigma) <= tolerance<T>(200 * 150) * sigma);
}

TEST_CASE("augmented Lanczos resolves singular values far below sqrt(eps)·σ₁, where the Gram form cannot") {
  // σ_8 = 1e-8 ≪ √eps·σ₁.
  const Index rows = 300, cols = 240, k = 9;
  const Matrix<double> A = graded_matrix(rows, cols, 41);
  const Vector<double> oracle = oracle_singular_values(A);
  const SpectralResult augmented = top_singular_values_augmented(DenseOperator<double>(A), k);
  REQUIRE(augmented.converged);
  REQUIRE(augmented.values.size() == k);
  // Absolute error of a few eps·σ₁: σ_8 = 1e-8 to ~1e-7 relative.
  for (Index i = 0; i < k; ++i) CHECK(std::abs(augmented.values(i) - oracle(i)) <= 1e-14 * oracle(0) * cols);
  CHECK(std::abs(augmented.values(k - 1) - 1e-8) <= 1e-7 * 1e-8 * cols);
  CHECK(std::abs(augmented_spectral_norm(DenseOperator<double>(A)).values(0) - oracle(0)) <=
        1e-12 * oracle(0));
  // The small-size path and bad k.
  const Matrix<double> small = random_matrix<double>(7, 5, 43);
  const SpectralResult all = top_singular_values_augmented(DenseOperator<double>(small), 5);
  CHECK((all.values - oracle_singular_values(small)).cwiseAbs().maxCoeff() <= 1e-13);
  CHECK(throws_naming([&] { top_singular_values_augmented(DenseOperator<double>(small), 6); }, "k = 6"));
}

TEST_CASE_TEMPLATE("last_error_bound certifies σ_k against a full SVD, flat and graded spectra", T, float,
                   double) {
  const double eps = std::numeric_limits<T>::epsilon();
  for (const bool graded : {false, true}) {
    for (auto [rows, cols] : {std::pair<Index, Index>{320, 240}, {240, 320}}) {
      const Matrix<T> A = (graded ? graded_matrix(std::max(rows, cols), std::min(rows, cols), 51)
                                  : random_matrix<double>(rows, cols, 52))
                              .template cast<T>();
      const Vector<double> oracle = oracle_singular_values(A.template cast<double>());
      for (Index k : {1, 5, 10}) {
        CAPTURE(graded);
        CAPTURE(rows);
        CAPTURE(k);
        const DenseOperator<T> op(A);
        // The products' own rounding, √n·eps·σ₁, is the slack of the computed certificate.
        const double slack = std::sqrt(double(rows * cols)) * eps * oracle(0);
        // The Gram form resolves σ_k ≳ √eps·σ₁ (else its value may be wrong, and the certificate must say
        // so); the augmented form's values are accurate to the rounding floor, but Spectra's relative
        // convergence test (residual estimate ≤ tolerance·σ_k) is met only by chance below about √eps·σ₁:
        // σ_k = 1e-9·σ₁ converged with one rounding of the products and not with another (NaN).
        const std::pair<SpectralResult, bool> runs[] = {
            {top_singular_values(op, k), oracle(k - 1) >= 10 * std::sqrt(eps) * oracle(0)},
            {top_singular_values_augmented(op, k),
             oracle(k - 1) >= std::max(1e3 * slack, std::sqrt(eps) * oracle(0))}};
        for (const auto& [top, resolvable] : runs) {
          CAPTURE(resolvable);
          REQUIRE(top.values.size() == k);
          if (!resolvable && std::isnan(top.last_error_bound)) continue;
          CHECK(distance_to_spectrum(top.values(k - 1), oracle) <= top.last_error_bound + slack);
          if (resolvable) CHECK(top.last_error_bound <= 100 * slack);
        }
      }
    }
  }
}

TEST_CASE_TEMPLATE("a stored matrix's top k come from its full SVD from k = min(rows, cols)/6 on", T, float,
                   double) {
  for (auto [rows, cols] : {std::pair<Index, Index>{300, 240}, {240, 300}}) {
    CAPTURE(rows);
    const Matrix<T> A = random_matrix<double>(rows, cols, 33).template cast<T>();
    const Vector<double> sigma = singular_values<T>(A);
    const SpectralResult full = top_singular_values(DenseOperator<T>(A), 40);  // 6·40 = 240
    CHECK(full.values == sigma.head(40));
    CHECK(full.converged);
    CHECK(full.matvecs == 0);  // the stored matrix itself, not formed from products
    CHECK(full.last_error_bound == 0);
    const SpectralResult lanczos = top_singular_values(DenseOperator<T>(A), 39);
    CHECK(lanczos.matvecs > 0);
    REQUIRE(lanczos.values.size() == 39);
    const double slack = std::sqrt(double(rows * cols)) * std::numeric_limits<T>::epsilon() * sigma(0);
    CHECK(distance_to_spectrum(lanczos.values(38), sigma) <= lanczos.last_error_bound + slack);
  }
}

TEST_CASE("small operators take the dense path and k = min(rows, cols) is allowed") {
  const Matrix<double> A = random_matrix<double>(9, 6, 31);
  const Vector<double> sigma = oracle_singular_values(A);
  const SpectralResult all = top_singular_values(DenseOperator<double>(A), 6);
  CHECK(all.converged);
  CHECK((all.values - sigma).cwiseAbs().maxCoeff() <= 1e-13 * sigma(0));
  CHECK(throws_naming(
      [&] { top_singular_values(DenseOperator<double>(A), 7); },
      "top_singular_values: k = 7 must be in [1, 6] (the smaller dimension of the 9x6 operator)"));
  CHECK(throws_naming([&] { top_singular_values(DenseOperator<double>(A), 0); }, "k = 0"));
}

TEST_CASE_TEMPLATE("singular values, numerical rank, energy fraction and Frobenius norm", T, float, double) {
  const Matrix<T> L = random_low_rank<T>(60, 40, 5, 41);
  const Vector<double> sigma = singular_values<T>(L);
  CHECK((sigma - oracle_singular_values(L.template cast<double>())).cwiseAbs().maxCoeff() <=
        tolerance<T>(60) * sigma(0));
  CHECK(numerical_rank(sigma, 1e4 * std::numeric_limits<T>::epsilon()) == 5);
  CHECK(numerical_rank(sigma, 0) >= 5);
  CHECK(energy_fraction(sigma, 5) == doctest::Approx(1.0).epsilon(1e-4));
  const Vector<double> s = (Vector<double>(3) << 3, 4, 0).finished();
  CHECK(energy_fraction(s, 1) == doctest::Approx(9.0 / 25.0));
  CHECK(energy_fraction(s, 0) == 0.0);
  // Values whose squares overflow double (spectra of kernels with logits near 700).
  CHECK(energy_fraction(s * 1e300, 1) == doctest::Approx(9.0 / 25.0));
  CHECK(energy_fraction(Vector<double>::Zero(2), 1) == 1.0);
  CHECK(numerical_rank(s, 0.5) == 2);  // 0.5·σ_max = 2: values 3 and 4 exceed it
  CHECK(throws_naming([&] { energy_fraction(s, 4); }, "k = 4"));
  // Singular values are finite and >= 0: a NaN or a negative value is refused, not counted (it gave rank 0,
  // 2).
  for (const double bad : {std::nan(""), -2.0, std::numeric_limits<double>::infinity()}) {
    CAPTURE(bad);
    Vector<double> with_bad = s;
    with_bad(1) = bad;
    CHECK(throws_naming([&] { numerical_rank(with_bad, 0); }, "singular value 1"));
    CHECK(throws_naming([&] { energy_fraction(with_bad, 1); }, "singular value 1"));
  }
  CHECK(throws_naming([&] { numerical_rank(s, std::nan("")); }, "tol = nan"));
  CHECK(frobenius_norm<T>(L) ==
        doctest::Approx(L.template cast<double>().norm()).epsilon(tolerance<T>(60 * 40)));
}

TEST_CASE("spectral options validate") {
  SpectralOptions options;
  options.tolerance = -1;
  CHECK(throws_naming([&] { options.validate(); }, "tolerance = -1"));
  options = {};
  options.max_restarts = 0;
  CHECK(throws_naming([&] { options.validate(); }, "max_restarts = 0"));
}
