#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "nystrom/kernels.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// Checks every entry of κ(X, Y) against the naive double-precision kernel. The exponent's rounding error is
/// at most tolerance(d)·(s·|x|ᵀ|y| or |φ|) (the condition of a sum of d terms), and exp turns an absolute
/// exponent error δ into a relative error δ in κ.
template <class T>
void check_block_against_naive(const Matrix<T>& X, const Matrix<T>& Y, const Kernel& kernel) {
  const Matrix<T> block = kernel.block<T>(X, Y);
  const Matrix<T> oracle = naive_kernel<T>(X, Y, kernel);
  REQUIRE(block.rows() == X.rows());
  REQUIRE(block.cols() == Y.rows());
  const Matrix<double> x = X.template cast<double>(), y = Y.template cast<double>();
  const double tol = tolerance<T>(X.cols());
  double worst = 0;
  for (Index i = 0; i < X.rows(); ++i) {
    for (Index j = 0; j < Y.rows(); ++j) {
      const double condition = kernel.type == KernelType::exponential
                                   ? kernel.param * x.row(i).cwiseAbs().dot(y.row(j).cwiseAbs())
                                   : std::abs(std::log(static_cast<double>(oracle(i, j))));
      const double error = std::abs(double(block(i, j)) - double(oracle(i, j))) / double(oracle(i, j));
      worst = std::max(worst, error / (tol * (1 + condition)));
    }
  }
  CHECK(worst <= 1.0);
}

const Kernel all_kernels[] = {Kernel::exponential(0.125), Kernel::laplacian(4), Kernel::gaussian(3)};

}  // namespace

TEST_CASE("kernel names round-trip and unknown names throw naming the name") {
  for (auto t : {KernelType::exponential, KernelType::laplacian, KernelType::gaussian})
    CHECK(kernel_type_from_string(to_string(t)) == t);
  CHECK(throws_naming([] { kernel_type_from_string("cosine"); }, "cosine"));
  CHECK(Kernel::laplacian(4).label() == "laplacian(lambda=4)");
}

TEST_CASE("Kernel::validate names the parameter and its value") {
  CHECK(throws_naming([] { Kernel::gaussian(-0.5).validate(); }, "kernel gaussian: h = -0.5 must be > 0"));
  CHECK(throws_naming([] { Kernel::laplacian(0).validate(); }, "kernel laplacian: lambda = 0 must be > 0"));
  CHECK(throws_naming([] { Kernel::exponential(std::nan("")).validate(); },
                      "kernel exp: s = nan is not finite"));
  CHECK(throws_naming([] { Kernel::gaussian(std::numeric_limits<double>::infinity()).validate(); },
                      "h = inf is not finite"));
  CHECK_NOTHROW(Kernel::exponential(-0.25).validate());  // a negative s is a valid (reversed) exponential
  CHECK_NOTHROW(Kernel::exponential(0).validate());
}

TEST_CASE_TEMPLATE("kernel blocks equal the naive dense kernel", T, float, double) {
  // Sizes straddle the 32/64-row register tile of the distance kernels (remainders, single partial tiles).
  const Index d = 64;
  const Matrix<T> Q = random_matrix<T>(77, d, 11, 0.5);
  const Matrix<T> K = random_matrix<T>(45, d, 12, 0.5);
  for (const Kernel& kernel : all_kernels) {
    CAPTURE(kernel.label());
    check_block_against_naive<T>(Q, K, kernel);  // more rows than columns
    check_block_against_naive<T>(K, Q, kernel);  // fewer rows than columns (transposed tiling)
    check_block_against_naive<T>(Q.topRows(1), K.topRows(1), kernel);
  }
}

TEST_CASE_TEMPLATE("large kernel blocks filled in row panels over two threads equal the naive kernel", T,
                   float, double) {
  // 700 × 900 × 8 = 5.0M multiply-adds: above detail::parallel_work, so the rows go out in 256-row panels.
  const Matrix<T> Q = random_matrix<T>(700, 8, 21, 0.5);
  const Matrix<T> K = random_matrix<T>(900, 8, 22, 0.5);
  REQUIRE(700.0 * 900.0 * 8.0 > detail::parallel_work);
  const int before = threads();
  for (int count : {1, 2}) {
    CAPTURE(count);
    set_threads(count);
    for (const Kernel& kernel : all_kernels) {
      CAPTURE(kernel.label());
      check_block_against_naive<T>(Q, K, kernel);
    }
  }
  set_threads(before);
}

TEST_CASE_TEMPLATE("kernel sub-blocks and panels equal the same entries of the full block", T, float,
                   double) {
  const Index n = 130, d = 16;
  const Matrix<T> Q = random_matrix<T>(n, d, 21), K = random_matrix<T>(n, d, 22);
  for (const Kernel& kernel : all_kernels) {
    CAPTURE(kernel.label());
    const Matrix<T> full = naive_kernel<T>(Q, K, kernel);
    // A row panel, a column panel and an interior block, each evaluated directly from views of Q and K.
    const Matrix<T> rows = kernel.block<T>(Q.middleRows(40, 33), K);
    const Matrix<T> cols = kernel.block<T>(Q, K.middleRows(97, 33));
    const Matrix<T> inner = kernel.block<T>(Q.middleRows(5, 70), K.middleRows(60, 9));
    const double tol = 50 * tolerance<T>(d);  // |φ| ≲ 50 for these sizes: κ's relative error ≤ tol·(1 + |φ|)
    CHECK(relative_difference(rows, full.middleRows(40, 33)) <= tol);
    CHECK(relative_difference(cols, full.middleCols(97, 33)) <= tol);
    CHECK(relative_difference(inner, full.block(5, 60, 70, 9)) <= tol);
    // The block written into a view of a larger matrix.
    Matrix<T> target = Matrix<T>::Zero(n, n);
    kernel.evaluate<T>(Q.middleRows(40, 33), K.middleRows(97, 33), target.block(40, 97, 33, 33));
    CHECK(relative_difference(target.block(40, 97, 33, 33), full.block(40, 97, 33, 33)) <= tol);
    CHECK(target.block(0, 0, 40, n).norm() == 0);
  }
}

TEST_CASE_TEMPLATE("kernel exponents match their definitions", T, float, double) {
  const Matrix<T> X = random_matrix<T>(3, 5, 31), Y = random_matrix<T>(4, 5, 32);
  const Matrix<double> x = X.template cast<double>(), y = Y.template cast<double>();
  const double tol = tolerance<T>(5) * 20;
  const Matrix<T> dot = Kernel::exponential(0.5).exponent_block<T>(X, Y);
  const Matrix<T> l1 = Kernel::laplacian(2).exponent_block<T>(X, Y);
  const Matrix<T> l2 = Kernel::gaussian(0.5).exponent_block<T>(X, Y);
  for (Index i = 0; i < 3; ++i) {
    for (Index j = 0; j < 4; ++j) {
      CHECK(double(dot(i, j)) == doctest::Approx(0.5 * x.row(i).dot(y.row(j))).epsilon(tol));
      CHECK(double(l1(i, j)) == doctest::Approx(-(x.row(i) - y.row(j)).cwiseAbs().sum() / 2).epsilon(tol));
      CHECK(double(l2(i, j)) == doctest::Approx(-(x.row(i) - y.row(j)).squaredNorm() / 0.5).epsilon(tol));
    }
  }
  // κ(x, x) = 1 for the distance kernels.
  CHECK(Kernel::laplacian(4).block<T>(X, X).diagonal().isOnes(0));
  CHECK(Kernel::gaussian(1).block<T>(X, X).diagonal().isOnes(0));
}

TEST_CASE_TEMPLATE("bad kernel parameters and shapes throw naming the value", T, float, double) {
  const Matrix<T> X = random_matrix<T>(4, 3, 41), Y = random_matrix<T>(5, 3, 42),
                  Z = random_matrix<T>(5, 2, 43);
  CHECK(throws_naming([&] { Kernel::laplacian(0).block<T>(X, Y); }, "lambda = 0"));
  CHECK(throws_naming([&] { Kernel::laplacian(-2).block<T>(X, Y); }, "-2"));
  CHECK(throws_naming([&] { Kernel::gaussian(-0.5).block<T>(X, Y); }, "-0.5"));
  CHECK(throws_naming([&] { Kernel::laplacian(std::nan("")).validate(); }, "nan"));
  CHECK(
      throws_naming([&] { Kernel::exponential(std::numeric_limits<double>::infinity()).validate(); }, "inf"));
  CHECK(throws_naming([&] { Kernel::exponential(0.1).block<T>(X, Z); }, "d = 3 and 2"));
  Matrix<T> wrong(4, 4);
  CHECK(throws_naming([&] { Kernel::laplacian(1).evaluate<T>(X, Y, wrong); }, "4x4"));
  CHECK_NOTHROW(Kernel::exponential(-0.25).validate());  // a negative scale is a valid (if unusual) kernel
}

TEST_CASE_TEMPLATE(
    "distance kernels of a parameter so small that 1/λ overflows throw, below that they are exact", T, float,
    double) {
  // Coincident tokens have κ = 1 at any λ; with −1/λ = −∞ in T their exponent was 0·(−∞) = NaN.
  const Matrix<T> X = random_matrix<T>(4, 3, 44);
  const double tiny = std::is_same_v<T, float> ? 1e-40 : 1e-310,
               narrow = std::is_same_v<T, float> ? 1e-20 : 1e-160;
  CHECK(throws_naming([&] { Kernel::laplacian(tiny).block<T>(X, X); }, "-1/lambda"));
  CHECK(throws_naming([&] { Kernel::gaussian(narrow).block<T>(X, X); }, "-1/(2 h^2)"));
  // Where the factor is representable, distinct tokens underflow to 0 and coincident ones give 1.
  const double small = std::is_same_v<T, float> ? 1e-30 : 1e-300;
  for (const Kernel& kernel : {Kernel::laplacian(small), Kernel::gaussian(std::sqrt(small))}) {
    CAPTURE(kernel.label());
    const Matrix<T> g = kernel.block<T>(X, X);
    CHECK(g == Matrix<T>::Identity(4, 4));
  }
}

TEST_CASE_TEMPLATE("a log-shift c evaluates exp(φ − c), the largest exponent and the head's shift", T, float,
                   double) {
  // 600×40 tokens against 500: above detail::parallel_work, so the panels go over the threads.
  const Matrix<T> X = random_matrix<T>(600, 16, 81, 0.4), Y = random_matrix<T>(500, 16, 82, 0.4);
  for (const Kernel& kernel : {Kernel::exponential(0.7), Kernel::laplacian(2.0), Kernel::gaussian(3.0)}) {
    CAPTURE(kernel.label());
    const Matrix<double> exponent = kernel.exponent_block<T>(X, Y).template cast<double>();
    CHECK(largest_exponent<T>(kernel, X, Y) == exponent.maxCoeff());
    const Kernel shifted = kernel.shifted(2.5);
    CHECK(shifted.label().find("log_shift=2.5") != std::string::npos);
    const Matrix<double> expected =
        (naive_kernel<T>(X, Y, kernel).template cast<double>().array() * std::exp(-2.5)).matrix();
    CHECK(relative_difference(shifted.block<T>(X, Y), expected) <=
          tolerance<T>(16) * (3.5 + exponent.cwiseAbs().maxCoeff()));
    CHECK(kernel_log_shift<T>(kernel, X, Y) ==
          (kernel.type == KernelType::exponential ? std::max(0.0, exponent.maxCoeff()) : 0.0));
  }
  // All logits negative (positive against negative coordinates): no shift, the entries are below 1 already;
  // far below, where the entries' squares underflow T, c is the largest logit.
  const Matrix<T> positive = X.cwiseAbs(), negative = -Y.cwiseAbs();
  CHECK(largest_exponent<T>(Kernel::exponential(0.7), positive, negative) < 0);
  CHECK(kernel_log_shift<T>(Kernel::exponential(0.7), positive, negative) == 0);
  const double underflow = -0.5 * std::log(double(std::numeric_limits<T>::max()));  // −44.4, −354.9
  for (const double largest : {-1000.0, 2 * underflow, 1.01 * underflow, 0.99 * underflow, -1.0, 0.0, 3.0}) {
    CAPTURE(largest);
    const bool shifted = largest > 0 || largest < underflow;
    CHECK(log_shift_for<T>(Kernel::exponential(0.7), largest) == (shifted ? largest : 0.0));
    CHECK(log_shift_for<T>(Kernel::laplacian(2.0), largest) == std::max(0.0, largest));
  }
  const Matrix<T> far = (positive.array() + T(5000)).matrix();  // logits below −0.7·5000·min_j ‖y_j‖₁
  const double far_largest = largest_exponent<T>(Kernel::exponential(0.7), far, negative);
  CHECK(far_largest < 2 * underflow);
  CHECK(kernel_log_shift<T>(Kernel::exponential(0.7), far, negative) == far_largest);
  CHECK(kernel_log_shift<T>(Kernel::laplacian(2.0), far, negative) == 0);
  // Exponents that overflowed T as they were computed (products of tokens of 2e19 in float) are named.
  for (const double largest : {-INFINITY, INFINITY, NAN})
    CHECK(throws_naming([&] { log_shift_for<T>(Kernel::exponential(0.7), largest); }, "is not finite"));
  // A logit whose exp overflows double is named.
  const Matrix<T> big = Matrix<T>::Constant(3, 2, T(20));
  CHECK(throws_naming([&] { kernel_log_shift<T>(Kernel::exponential(1.0), big, big); }, "largest logit 800"));
  CHECK(throws_naming([] { Kernel{KernelType::exponential, 1.0, NAN}.validate(); }, "log_shift"));
}
