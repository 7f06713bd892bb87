/// Matrix-free kernel passes (kernel_passes.hpp), the kernel operator and the error operator built on it
/// (operators.hpp) and the matrix-free norms (matrix_free.hpp) against slow dense oracles in double: naive
/// kernel entries straight from docs/mathematics.md §1, Ĝ = diag(exp(l)) L Z U formed densely, and full SVDs.
#include <doctest/doctest.h>

#include <cmath>

#include "nystrom/matrix_free.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

namespace nystrom::test {
namespace {

/// Tokens whose entries are multiples of 1/8 (|x| ≲ 4): with a power-of-two kernel parameter every logit and
/// every L1 distance is exact in float, so float inputs must reproduce the double oracle to double accuracy.
template <class T>
Matrix<T> dyadic_tokens(Index n, Index d, std::uint64_t seed) {
  return (random_matrix<double>(n, d, seed).array() * 8.0).round().matrix().template cast<T>() / T(8);
}

/// The dense Ĝ = diag(exp(l)) · L · Z · U of docs/mathematics.md §2 in double from the factors as stored.
template <class T>
Matrix<double> dense_approximation(const NystromFactors<T>& f) {
  const Vector<double> scale = f.left_log_scale.template cast<double>().array().exp();
  return scale.asDiagonal() * f.left.template cast<double>() * f.pinv.z.template cast<double>() *
         f.upper.template cast<double>();
}

/// Largest singular values of a dense matrix in double.
Vector<double> dense_singular_values(const Matrix<double>& a) {
  return Eigen::BDCSVD<Matrix<double>>(a).singularValues();
}

/// Nyström factors with m landmarks by segment means, row-max stabilized, exact pseudoinverse.
template <class T>
NystromFactors<T> factors_for(const Matrix<T>& Q, const Matrix<T>& K, const Kernel& kernel, Index m) {
  NystromOptions options;
  options.kernel = kernel;
  options.landmarks.count = m;
  return generalized_nystrom<T>(Q, K, options);
}

/// Small tiles that do not divide the sizes, so ragged panels, padded register blocks and column tails all
/// run.
MatrixFreeOptions ragged_tiling() {
  return {.panel_rows = 40, .tile_cols = 100};
}

const Kernel kExponential16 = Kernel::exponential(0.25);  // s = 1/√16
const Kernel kLaplacian = Kernel::laplacian(4.0);         // LaplacianFormer's λ = 4

template <class T>
void check_norms(const Kernel& kernel, Index n, Index d, Index m) {
  const Matrix<T> Q = dyadic_tokens<T>(n, d, 11), K = dyadic_tokens<T>(n, d, 12);
  const Matrix<double> g = naive_kernel<double>(Q.template cast<double>(), K.template cast<double>(), kernel);
  const NystromFactors<T> factors = factors_for(Q, K, kernel, m);
  const Vector<double> sigma_g = dense_singular_values(g);
  const Vector<double> sigma_e = dense_singular_values(g - dense_approximation(factors));
  REQUIRE(sigma_e(0) > 1e-6 * sigma_g(0));  // a nontrivial error, so the comparison means something

  const SpectralResult error = matrix_free_error_norm<T>(Q, K, factors, kernel, {}, ragged_tiling());
  REQUIRE(error.converged);
  CHECK(std::abs(error.values(0) - sigma_e(0)) <= 1e-9 * sigma_e(0));

  const SpectralResult norm = matrix_free_kernel_norm<T>(Q, K, kernel, {}, ragged_tiling());
  REQUIRE(norm.converged);
  CHECK(std::abs(norm.values(0) - sigma_g(0)) <= 1e-9 * sigma_g(0));

  const Index k = 6;
  const SpectralResult top = matrix_free_top_singular_values<T>(Q, K, kernel, k, {}, ragged_tiling());
  REQUIRE(top.converged);
  REQUIRE(top.values.size() == k);
  for (Index i = 0; i < k; ++i) CHECK(std::abs(top.values(i) - sigma_g(i)) <= 1e-9 * sigma_g(0));
}

template <class T>
void check_products(const Kernel& kernel, Index rows, Index cols, Index d) {
  const Matrix<T> X = dyadic_tokens<T>(rows, d, 21), Y = dyadic_tokens<T>(cols, d, 22);
  // κ_c = e^{−c}κ for a log-shift c.
  const Matrix<double> g = std::exp(-kernel.log_shift) *
                           naive_kernel<double>(X.template cast<double>(), Y.template cast<double>(), kernel);
  const KernelOperator<T, double> op(X, Y, kernel, ragged_tiling());
  const double tol = 1e-13;

  const KernelPasses<T> passes(X, Y, kernel, ragged_tiling());
  CHECK(relative_difference(passes.tile(0, rows, 0, cols), g) <= tol);
  CHECK(relative_difference(passes.tile(17, 33, 5, 70), g.block(17, 5, 33, 70)) <= tol);

  const Vector<double> x = random_matrix<double>(cols, 1, 31), u = random_matrix<double>(rows, 1, 32);
  Vector<double> y(rows), z(cols), inner(cols), outer(rows), augmented(rows + cols), stacked(rows + cols);
  op.perform_op(x.data(), y.data());
  op.perform_transpose_op(u.data(), z.data());
  op.perform_inner_gram_op(x.data(), inner.data());
  op.perform_outer_gram_op(u.data(), outer.data());
  stacked << u, x;
  op.perform_augmented_op(stacked.data(), augmented.data());
  CHECK(relative_difference(y, g * x) <= tol);
  CHECK(relative_difference(z, g.transpose() * u) <= tol);
  CHECK(relative_difference(inner, g.transpose() * (g * x)) <= tol);
  CHECK(relative_difference(outer, g * (g.transpose() * u)) <= tol);
  CHECK(relative_difference(augmented.head(rows), g * x) <= tol);
  CHECK(relative_difference(augmented.tail(cols), g.transpose() * u) <= tol);
  CHECK(op.passes() == 5);  // every product above is a single kernel pass
}

}  // namespace

TEST_CASE(
    "matrix-free kernel tiles and one-pass products equal the dense kernel (rectangular, ragged tiles)") {
  for (const Kernel& kernel : {kExponential16, kLaplacian, Kernel::gaussian(2.0), kExponential16.shifted(7.0),
                               kLaplacian.shifted(-1.5)}) {
    CAPTURE(kernel.label());
    check_products<double>(kernel, 130, 97, 16);
    check_products<float>(kernel, 130, 97, 16);
  }
}

TEST_CASE("kernel passes and matrix-free norms give the same bits on 1 and 2 threads, run after run") {
  // 25 row panels in 16 groups of 1 or 2, so that two threads split the groups between them differently from
  // run to run; Gᵀu and the Gram product sum over all of them.
  const Index n = 1000, d = 16;
  const Matrix<float> X = random_matrix<float>(n, d, 41), Y = random_matrix<float>(n, d, 42);
  const KernelPasses<float> passes(X, Y, kExponential16, ragged_tiling());
  const Vector<double> x = random_matrix<double>(n, 1, 43), u = random_matrix<double>(n, 1, 44);
  const auto one_pass = [&](bool gram) {
    Matrix<double> out(n, 2);
    passes.pass(x.data(), gram ? nullptr : u.data(), out.col(0).data(), out.col(1).data(), gram);
    return out;
  };
  const NystromFactors<float> factors = factors_for(X, Y, kExponential16, 8);
  const auto error_norm = [&] {
    return matrix_free_error_norm<float>(X, Y, factors, kExponential16, {}, ragged_tiling()).values(0);
  };
  const int before = threads();
  set_threads(1);
  const Matrix<double> products = one_pass(false), gram = one_pass(true);
  const double norm = error_norm();
  set_threads(2);
  for (int run = 0; run < 20; ++run) {
    CAPTURE(run);
    CHECK(one_pass(false) == products);
    CHECK(one_pass(true) == gram);
  }
  CHECK(error_norm() == norm);
  CHECK(error_norm() == norm);
  set_threads(before);
}

TEST_CASE("matrix-free error products E = G - Ghat equal the dense E") {
  const Index n = 300, d = 16, m = 12;
  for (const Kernel& kernel : {kExponential16, kLaplacian}) {
    CAPTURE(kernel.label());
    const Matrix<double> Q = dyadic_tokens<double>(n, d, 41), K = dyadic_tokens<double>(n, d, 42);
    const NystromFactors<double> factors = factors_for(Q, K, kernel, m);
    const Matrix<double> e = naive_kernel<double>(Q, K, kernel) - dense_approximation(factors);
    const KernelOperator<double> g(Q, K, kernel, ragged_tiling());
    const NystromOperator<double> approximation(factors);
    const DifferenceOperator<KernelOperator<double>, NystromOperator<double>> op(g, approximation);
    const Vector<double> x = random_matrix<double>(n, 1, 43);
    Vector<double> y(n), z(n), inner(n), outer(n), augmented(2 * n), stacked(2 * n);
    op.perform_op(x.data(), y.data());
    op.perform_transpose_op(x.data(), z.data());
    op.perform_inner_gram_op(x.data(), inner.data());
    op.perform_outer_gram_op(x.data(), outer.data());
    stacked << x, x;
    op.perform_augmented_op(stacked.data(), augmented.data());
    const double tol = 1e-12;
    CHECK(relative_difference(y, e * x) <= tol);
    CHECK(relative_difference(z, e.transpose() * x) <= tol);
    CHECK(relative_difference(inner, e.transpose() * (e * x)) <= tol);
    CHECK(relative_difference(outer, e * (e.transpose() * x)) <= tol);
    CHECK(relative_difference(augmented, (Vector<double>(2 * n) << e * x, e.transpose() * x).finished()) <=
          tol);
    CHECK(g.passes() == 5);  // the Gram and augmented products of E cost one kernel pass each
  }
}

TEST_CASE("matrix-free ||G - Ghat||_2, ||G||_2 and top-k of G equal dense SVDs to 1e-9 (exponential)") {
  check_norms<double>(kExponential16, 640, 16, 16);
  check_norms<float>(kExponential16, 640, 16, 16);
}

TEST_CASE("matrix-free ||G - Ghat||_2, ||G||_2 and top-k of G equal dense SVDs to 1e-9 (Laplacian)") {
  check_norms<double>(kLaplacian, 640, 16, 16);
  check_norms<float>(kLaplacian, 640, 16, 16);
}

TEST_CASE("the augmented operator gives the same norm as the fused Gram Lanczos") {
  const Matrix<double> Q = dyadic_tokens<double>(400, 16, 51), K = dyadic_tokens<double>(400, 16, 52);
  const NystromFactors<double> factors = factors_for(Q, K, kExponential16, 8);
  const double dense =
      dense_singular_values(naive_kernel<double>(Q, K, kExponential16) - dense_approximation(factors))(0);
  const KernelOperator<double> g(Q, K, kExponential16);
  const NystromOperator<double> approximation(factors);
  const DifferenceOperator<KernelOperator<double>, NystromOperator<double>> op(g, approximation);
  const SpectralResult augmented = augmented_spectral_norm(op);
  REQUIRE(augmented.converged);
  CHECK(std::abs(augmented.values(0) - dense) <= 1e-9 * dense);
}

template <class T>
void check_shifted_error_norm(Stabilization stabilization) {
  // A last coordinate adds s·40·60 = 600 to every logit: ‖E‖₂ ≈ e^600 is finite in double, ‖E‖₂² is not. The
  // logits are exact in float too (dyadic tokens, s = 1/4).
  const Index n = 200, d = 16, m = 12;
  Matrix<T> Q(n, d + 1), K(n, d + 1);
  Q << dyadic_tokens<T>(n, d, 71), Matrix<T>::Constant(n, 1, T(40));
  K << dyadic_tokens<T>(n, d, 72), Matrix<T>::Constant(n, 1, T(60));
  const Kernel kernel = kExponential16;
  NystromOptions options;
  options.kernel = kernel;
  options.landmarks.count = m;
  options.stabilization = stabilization;
  const NystromFactors<T> factors = generalized_nystrom<T>(Q, K, options);
  const double c = kernel_log_shift<T>(kernel, Q, K);
  REQUIRE(c > 600);
  // The oracle on κ_c (docs/mathematics.md §1): E_c = e^{−c}(G − Ĝ), formed densely in double.
  const Matrix<double> g_c =
      std::exp(-c) * naive_kernel<double>(Q.template cast<double>(), K.template cast<double>(), kernel);
  const Matrix<double> e_c = g_c - std::exp(-c) * dense_approximation(factors);
  const double expected = dense_singular_values(e_c)(0);
  // Rounding of G's entries relative to ‖G‖₂, amplified by ‖G‖₂/‖E‖₂ in the difference.
  const double tol = 1e-13 * (1 + dense_singular_values(g_c)(0) / expected);

  const NystromFactors<double> wide = widened_factors(factors, c);
  CHECK(wide.options.kernel.log_shift == c);
  CHECK(relative_difference(dense_approximation(wide), std::exp(-c) * dense_approximation(factors)) <= 1e-13);
  const SpectralResult shifted =
      matrix_free_error_norm<T>(Q, K, factors, kernel.shifted(c), {}, ragged_tiling());
  REQUIRE(shifted.converged);
  CHECK(std::abs(shifted.values(0) - expected) <= tol * expected);
  // Unshifted, the Gram products overflow.
  CHECK_THROWS(matrix_free_error_norm<T>(Q, K, factors, kernel, {}, ragged_tiling()));
  if constexpr (std::is_same_v<T, double>) {
    // Factors built on κ_c (as the sweep builds them) give the same error.
    options.kernel = kernel.shifted(c);
    const NystromFactors<T> on_shifted = generalized_nystrom<T>(Q, K, options);
    CHECK(widened_factors(on_shifted, c).left_log_scale == widened_factors(on_shifted).left_log_scale);
    const SpectralResult direct =
        matrix_free_error_norm<T>(Q, K, on_shifted, kernel.shifted(c), {}, ragged_tiling());
    REQUIRE(direct.converged);
    CHECK(std::abs(direct.values(0) - expected) <= tol * expected);
  }
}

TEST_CASE("matrix-free ||G - Ghat||_2 on a log-shifted kernel: the factors of κ are brought to κ_c") {
  for (const Stabilization stabilization :
       {Stabilization::row_max, Stabilization::none, Stabilization::clamped}) {
    CAPTURE(to_string(stabilization));
    check_shifted_error_norm<double>(stabilization);
    // float blocks without row scales hold e^600: beyond float.
    if (stabilization != Stabilization::none) check_shifted_error_norm<float>(stabilization);
  }
}

TEST_CASE("float inputs of general values: logits rounded in float, accumulation in double (Weyl bound)") {
  // Entries differ from the double oracle by the float rounding of the exponent φ only: |ΔG_ij| ≲
  // c·d·eps·|φ_ij|·G_ij, so by Weyl |σ₁(mf) − σ₁(dense)| ≤ ‖ΔG‖_F ≤ c·d·eps·max|φ|·‖G‖_F (c = 4 covers the
  // GEMM and exp roundings).
  const Index n = 500, d = 16;
  const Matrix<float> Q = random_matrix<float>(n, d, 61), K = random_matrix<float>(n, d, 62);
  for (const Kernel& kernel : {kExponential16, kLaplacian}) {
    CAPTURE(kernel.label());
    const Matrix<double> phi = kernel.exponent_block<double>(Q.cast<double>(), K.cast<double>());
    const Matrix<double> g = phi.array().exp().matrix();
    const double bound =
        4.0 * d * std::numeric_limits<float>::epsilon() * phi.cwiseAbs().maxCoeff() * g.norm();
    const SpectralResult norm = matrix_free_kernel_norm<float>(Q, K, kernel);
    REQUIRE(norm.converged);
    CHECK(std::abs(norm.values(0) - dense_singular_values(g)(0)) <= bound);
  }
}

TEST_CASE("matrix-free bad inputs name the value") {
  const Matrix<double> Q = random_matrix<double>(20, 4, 1), K = random_matrix<double>(20, 4, 2);
  const Matrix<double> K3 = random_matrix<double>(20, 3, 3);
  CHECK(throws_naming([&] { KernelOperator<double>(Q, K, kExponential16, {.panel_rows = 0}); },
                      "panel_rows = 0"));
  CHECK(throws_naming([&] { KernelOperator<double>(Q, K, kExponential16, {.tile_cols = -3}); },
                      "tile_cols = -3"));
  CHECK(throws_naming([&] { KernelOperator<double>(Q, K3, kExponential16); }, "d = 4 and 3"));
  CHECK(throws_naming([&] { KernelOperator<double>(Q, K, Kernel::laplacian(-1)); }, "-1"));
  Matrix<double> bad = Q;
  bad(3, 2) = std::nan("");
  CHECK(throws_naming([&] { KernelOperator<double>(bad, K, kExponential16); }, "X"));
  const Matrix<double> Q30 = random_matrix<double>(30, 4, 4);
  const NystromFactors<double> factors = factors_for(Q30, Q30, kExponential16, 4);
  CHECK(throws_naming([&] { matrix_free_error_norm<double>(Q, K, factors, kExponential16); }, "30x30"));
}

}  // namespace nystrom::test
