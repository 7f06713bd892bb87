#include <doctest/doctest.h>

#include "attention_oracles.hpp"
#include "nystrom/nystromformer.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// Nyströmformer eq. (15) with the exact pseudoinverse, in double: F̃ pinv(Ã) (B̃V).
Matrix<double> oracle(const Matrix<double>& Q, const Matrix<double>& K, const Matrix<double>& V, double s,
                      Index m) {
  const Matrix<double> qm = naive_segment_means(Q, m), km = naive_segment_means(K, m);
  return naive_softmax(Q, km, s) * dense_pinv(naive_softmax(qm, km, s), 1e-13) *
         (naive_softmax(qm, K, s) * V);
}

}  // namespace

TEST_CASE_TEMPLATE("nystromformer with the exact pinv equals the dense formula", T, float, double) {
  // 67 % 8 != 0: uneven segment means; 600: three panels of tokens, the last one partial.
  for (Index n : {64, 67, 600}) {
    CAPTURE(n);
    const Matrix<T> Q = random_matrix<T>(n, 16, 1), K = random_matrix<T>(n, 16, 2),
                    V = random_matrix<T>(n, 8, 3);
    NystromformerOptions options;
    options.landmarks = 8;
    options.pinv.method = PinvMethod::exact;
    const double s = 0.25;
    const auto result = nystromformer_attention<T>(Q, K, V, s, options);
    const Matrix<double> expected =
        oracle(Q.template cast<double>(), K.template cast<double>(), V.template cast<double>(), s, 8);
    // The m×m core's condition number amplifies rounding; allow 100·√n·eps relative.
    CHECK(relative_difference(result.output, expected) < 100 * tolerance<T>(n));
    CHECK(result.left.rows() == n);
    CHECK(result.upper.cols() == n);
    // The operator Ŝ = F̃ Z B̃ applied to V reproduces Ô.
    CHECK(relative_difference(Matrix<T>(result.attention_operator().dense() * V), result.output) <
          10 * tolerance<T>(n));
  }
}

TEST_CASE_TEMPLATE("nystromformer with m = N recovers exact attention", T, float, double) {
  const Index n = 24;
  const Matrix<T> Q = random_matrix<T>(n, 8, 4, 0.5), K = random_matrix<T>(n, 8, 5, 0.5),
                  V = random_matrix<T>(n, 4, 6);
  NystromformerOptions options;
  options.landmarks = n;  // segments of one token: F̃ = Ã = B̃ = S, so S S⁺ S V = S V
  options.pinv.method = PinvMethod::exact;
  const auto result = nystromformer_attention<T>(Q, K, V, 0.3, options);
  const Matrix<double> exact = naive_attention(Q, K, V, 0.3);
  CHECK(relative_difference(result.output, exact) < 1000 * tolerance<T>(n));
}

TEST_CASE("nystromformer's Razavi iteration converges to the exact-pinv output") {
  const Index n = 128;
  const Matrix<double> Q = random_matrix<double>(n, 16, 7), K = random_matrix<double>(n, 16, 8),
                       V = random_matrix<double>(n, 8, 9);
  NystromformerOptions options;
  options.landmarks = 8;
  options.pinv = {PinvMethod::razavi, 60};
  const auto result = nystromformer_attention<double>(Q, K, V, 0.25, options);
  CHECK(relative_difference(result.output, oracle(Q, K, V, 0.25, 8)) < 1e-9);
  CHECK(result.pinv.iterations >= 1);
}

TEST_CASE(
    "front padding reproduces the package: zero tokens prepended, equal segments, zero keys in the softmax") {
  // n % 8 = 6 → 2 zero tokens in front; 606 tokens: three panels, the last one partial.
  const Index m = 8, padding = 2;
  for (const Index n : {Index(30), Index(606)}) {
    CAPTURE(n);
    const Matrix<double> Q = random_matrix<double>(n, 4, 10), K = random_matrix<double>(n, 4, 11),
                         V = random_matrix<double>(n, 3, 12);
    Matrix<double> Qp = Matrix<double>::Zero(n + padding, 4), Kp = Qp,
                   Vp = Matrix<double>::Zero(n + padding, 3);
    Qp.bottomRows(n) = Q;
    Kp.bottomRows(n) = K;
    Vp.bottomRows(n) = V;
    const Matrix<double> expected = oracle(Qp, Kp, Vp, 0.5, m).bottomRows(n);
    NystromformerOptions options;
    options.landmarks = m;
    options.pinv.method = PinvMethod::exact;
    options.front_padding = true;
    const auto padded = nystromformer_attention<double>(Q, K, V, 0.5, options);
    // Rounding amplified by the core's condition number (1.4e3 at n = 30, 8e5 at n = 606).
    const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(padded.core).singularValues();
    CHECK(relative_difference(padded.output, expected) < tolerance<double>(n) * sigma(0) / sigma(m - 1));
    options.front_padding = false;
    CHECK(relative_difference(nystromformer_attention<double>(Q, K, V, 0.5, options).output, expected) >
          1e-6);
  }
}

TEST_CASE("the batch-wide alpha is the package's and never exceeds a per-matrix alpha") {
  const Matrix<double> a = random_matrix<double>(6, 6, 13), b = 3 * random_matrix<double>(6, 6, 14);
  const double expected =
      1 / (std::max(a.cwiseAbs().rowwise().sum().maxCoeff(), b.cwiseAbs().rowwise().sum().maxCoeff()) *
           std::max(a.cwiseAbs().colwise().sum().maxCoeff(), b.cwiseAbs().colwise().sum().maxCoeff()));
  const double alpha = nystromformer_batch_alpha<double>({a, b});
  CHECK(alpha == doctest::Approx(expected).epsilon(1e-14));
  CHECK(alpha <= safe_alpha<double>(a));
  CHECK(alpha <= safe_alpha<double>(b));
}

TEST_CASE("nystromformer rejects bad input naming the value") {
  const Matrix<double> Q = random_matrix<double>(10, 4, 1), V = random_matrix<double>(10, 2, 2);
  NystromformerOptions options;
  options.landmarks = 11;
  CHECK(throws_naming([&] { nystromformer_attention<double>(Q, Q, V, 0.5, options); }, "landmarks = 11"));
  options.landmarks = 0;
  CHECK(throws_naming([&] { nystromformer_attention<double>(Q, Q, V, 0.5, options); }, "landmarks = 0"));
  options.landmarks = 2;
  CHECK(throws_naming([&] { nystromformer_attention<double>(Q, Q, V, -1, options); }, "scale = -1"));
  const Matrix<double> short_v = random_matrix<double>(9, 2, 3);
  CHECK(throws_naming([&] { nystromformer_attention<double>(Q, Q, short_v, 0.5, options); }, "V has 9 rows"));
}
