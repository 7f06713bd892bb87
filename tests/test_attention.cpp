#include <doctest/doctest.h>

#include <limits>

#include <cmath>

#include "nystrom/attention.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// softmax(φ(Q, K)) row by row in long double, each row shifted by its maximum (the textbook definition).
template <class T>
Matrix<double> naive_attention_matrix(const Matrix<T>& Q, const Matrix<T>& K, const Kernel& kernel) {
  Matrix<double> S(Q.rows(), K.rows());
  for (Index i = 0; i < Q.rows(); ++i) {
    std::vector<long double> phi(K.rows());
    long double top = -INFINITY;
    for (Index j = 0; j < K.rows(); ++j) {
      long double dot = 0, l1 = 0;
      for (Index c = 0; c < Q.cols(); ++c) {
        dot += static_cast<long double>(Q(i, c)) * K(j, c);
        l1 += std::abs(static_cast<long double>(Q(i, c)) - K(j, c));
      }
      phi[j] = kernel.type == KernelType::exponential ? kernel.param * dot : -l1 / kernel.param;
      top = std::max(top, phi[j]);
    }
    long double sum = 0;
    for (Index j = 0; j < K.rows(); ++j) sum += std::exp(phi[j] - top);
    for (Index j = 0; j < K.rows(); ++j) S(i, j) = static_cast<double>(std::exp(phi[j] - top) / sum);
  }
  return S;
}

}  // namespace

TEST_CASE_TEMPLATE("exact attention equals softmax(φ(Q,K)) V, also with logits far beyond exp's range", T,
                   float, double) {
  const Index n = 150, d = 8, dv = 5;  // n is not a multiple of the row panel
  const Matrix<T> V = random_matrix<T>(n, dv, 3);
  for (double scale : {1.0, 40.0}) {  // scale 40 gives logits of order 10^4
    const Matrix<T> Q = random_matrix<T>(n, d, 1, scale);
    const Matrix<T> K = random_matrix<T>(n, d, 2, scale);
    for (const Kernel& kernel : {Kernel::exponential(1 / std::sqrt(8.0)), Kernel::laplacian(4.0)}) {
      CAPTURE(scale);
      CAPTURE(kernel.label());
      const Matrix<double> S = naive_attention_matrix<T>(Q, K, kernel);
      const Matrix<T> O = exact_attention<T>(Q, K, V, kernel);
      CHECK(O.allFinite());
      // A float logit of size L carries an absolute rounding error of about L·eps, hence the scale factor.
      const double tol =
          tolerance<T>(n * d) * (kernel.type == KernelType::exponential ? scale * scale : scale);
      CHECK(relative_difference(O, S * V.template cast<double>()) <= tol);
      const Matrix<T> A = attention_matrix<T>(Q, K, kernel);
      CHECK(relative_difference(A, S) <= tol);
      CHECK((A.template cast<double>().rowwise().sum().array() - 1).abs().maxCoeff() <= tolerance<T>(n));
      // Into a block of a larger matrix (an outer stride): the same values to rounding (exp vectorized
      // differently), and nothing outside it written.
      Matrix<T> into = Matrix<T>::Constant(n + 3, n, T(-7));
      attention_matrix<T>(Q, K, kernel, into.topRows(n));
      CHECK(relative_difference(into.topRows(n), A.template cast<double>()) <= tolerance<T>(n));
      CHECK((into.bottomRows(3).array() == T(-7)).all());
    }
  }
}

TEST_CASE_TEMPLATE("exact attention over several key tiles rescales its running sums (online softmax)", T,
                   float, double) {
  // 2,600 keys span six 512-key tiles (the last one ragged); 300 queries span two panels. The first keys
  // get small logits and later ones large, so the running max grows from tile to tile.
  const Index queries = 300, keys = 2600, d = 6, dv = 3;
  const Matrix<T> Q = random_matrix<T>(queries, d, 51, 4.0);
  Matrix<T> K = random_matrix<T>(keys, d, 52);
  for (Index j = 0; j < keys; ++j) K.row(j) *= T(1 + 8 * j / keys);
  const Matrix<T> V = random_matrix<T>(keys, dv, 53);
  for (const Kernel& kernel : {Kernel::exponential(1 / std::sqrt(6.0)), Kernel::laplacian(4.0)}) {
    CAPTURE(kernel.label());
    const Matrix<double> S = naive_attention_matrix<T>(Q, K, kernel);
    const Matrix<T> O = exact_attention<T>(Q, K, V, kernel);
    CHECK(relative_difference(O, S * V.template cast<double>()) <= tolerance<T>(keys * d) * 64);
  }
}

TEST_CASE_TEMPLATE(
    "exact attention: the same bits on one, two and three threads, from 1 to 2 panels and more", T, float,
    double) {
  const int before = threads();
  for (const Index queries : {1, 31, 90, 300, 511, 700}) {
    CAPTURE(queries);
    const Matrix<T> Q = random_matrix<T>(queries, 6, 71), K = random_matrix<T>(600, 6, 72);
    const Matrix<T> V = random_matrix<T>(600, 3, 73);
    set_threads(1);
    const Matrix<T> one = exact_attention<T>(Q, K, V, Kernel::exponential(0.6));
    for (int thread_count : {2, 3}) {
      CAPTURE(thread_count);
      set_threads(thread_count);
      CHECK(exact_attention<T>(Q, K, V, Kernel::exponential(0.6)) == one);
    }
  }
  set_threads(before);
}

TEST_CASE_TEMPLATE("exact attention is the same with one and two threads over ragged panels and tiles", T,
                   float, double) {
  // 1,100 queries: five 256-query panels with one and two threads (the last ragged); 1,300 keys: three tiles.
  const Index queries = 1100, keys = 1300, d = 5, dv = 4;
  const Matrix<T> Q = random_matrix<T>(queries, d, 61);
  const Matrix<T> K = random_matrix<T>(keys, d, 62);
  const Matrix<T> V = random_matrix<T>(keys, dv, 63);
  const int before = threads();
  for (const Kernel& kernel : {Kernel::exponential(0.7), Kernel::laplacian(2.0)}) {
    CAPTURE(kernel.label());
    const Matrix<double> expected = naive_attention_matrix<T>(Q, K, kernel) * V.template cast<double>();
    for (int thread_count : {1, 2}) {
      CAPTURE(thread_count);
      set_threads(thread_count);
      CHECK(relative_difference(exact_attention<T>(Q, K, V, kernel), expected) <= tolerance<T>(keys * d) * 8);
    }
  }
  set_threads(before);
}

TEST_CASE_TEMPLATE("output errors are the relative Frobenius, max and mean absolute differences", T, float,
                   double) {
  Matrix<T> exact(2, 2), approximate(2, 2);
  exact << 3, 0, 0, 4;         // ‖O‖_F = 5
  approximate << 3, 1, -2, 4;  // differences 0, -1, 2, 0
  const OutputErrors errors = output_errors<T>(exact, approximate);
  CHECK(errors.relative_frobenius == doctest::Approx(std::sqrt(5.0) / 5.0));
  CHECK(errors.max_abs == doctest::Approx(2.0));
  CHECK(errors.mean_abs == doctest::Approx(0.75));
  const Matrix<T> wrong(3, 2);
  CHECK(throws_naming([&] { output_errors<T>(exact, wrong); }, "3x2"));
  // The relative error at any scale the type holds (sums of squares over- and underflowed: NaN), NaN wherever
  // an entry is NaN (max_abs skipped it), 0 between two zero outputs.
  for (const double scale :
       {double(std::numeric_limits<T>::max()) / 8, double(std::numeric_limits<T>::min())}) {
    CAPTURE(scale);
    const OutputErrors scaled = output_errors<T>((exact * T(scale)).eval(), (approximate * T(scale)).eval());
    CHECK(scaled.relative_frobenius == doctest::Approx(std::sqrt(5.0) / 5.0));
  }
  // O = s·I and Ô = −s·I with s near the largest value: O − Ô = 2s·I overflows double (it was NaN), and the
  // absolute errors are Inf where 2s is.
  const T s = std::numeric_limits<T>::max() / T(1.5);
  const Matrix<T> large = Matrix<T>::Identity(2, 2) * s;
  const OutputErrors opposite = output_errors<T>(large, (-large).eval());
  CHECK(opposite.relative_frobenius == doctest::Approx(2.0));
  CHECK(opposite.max_abs == 2 * double(s));
  CHECK(opposite.mean_abs == doctest::Approx(double(s)));
  Matrix<T> undefined = approximate;
  undefined(1, 0) = std::numeric_limits<T>::quiet_NaN();
  const OutputErrors with_nan = output_errors<T>(exact, undefined);
  CHECK(std::isnan(with_nan.relative_frobenius));
  CHECK(std::isnan(with_nan.max_abs));
  CHECK(std::isnan(with_nan.mean_abs));
  const Matrix<T> zero = Matrix<T>::Zero(2, 2);
  CHECK(output_errors<T>(zero, zero).relative_frobenius == 0);
}

TEST_CASE("exact attention rejects bad arguments naming the value") {
  const Matrix<double> Q = random_matrix<double>(10, 4, 5);
  const Matrix<double> K = random_matrix<double>(10, 3, 6);
  const Matrix<double> V = random_matrix<double>(9, 2, 7);
  CHECK(throws_naming([&] { exact_attention<double>(Q, K, V, Kernel::exponential(0.5)); }, "d = 3"));
  CHECK(throws_naming([&] { exact_attention<double>(Q, Q, V, Kernel::exponential(0.5)); }, "9"));
  CHECK(throws_naming([&] { attention_matrix<double>(Q, Q, Kernel::laplacian(0)); }, "lambda = 0"));
  Matrix<double> bad = Q;
  bad(0, 0) = INFINITY;
  CHECK(throws_naming([&] { attention_matrix<double>(bad, Q, Kernel::exponential(0.5)); }, "non-finite"));
  Matrix<double> out(10, 9);
  CHECK(throws_naming([&] { attention_matrix<double>(Q, Q, Kernel::exponential(0.5), out); },
                      "attention_matrix: out is 10x9, expected 10x10"));
}
