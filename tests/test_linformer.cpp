#include <doctest/doctest.h>

#include "attention_oracles.hpp"
#include "nystrom/linformer.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE_TEMPLATE(
    "linformer equals softmax(sQ(EK)^T)(FV) computed densely, in one panel of tokens and in "
    "several with a partial last one",
    T, float, double) {
  const Index k = 12;
  for (const Index n : {Index(48), Index(600)}) {
    CAPTURE(n);
    const Matrix<T> Q = random_matrix<T>(n, 8, 1), K = random_matrix<T>(n, 8, 2),
                    V = random_matrix<T>(n, 5, 3);
    for (const bool share : {false, true}) {
      CAPTURE(share);
      LinformerOptions options;
      options.projected = k;
      options.seed = 7;
      options.share_projections = share;
      const auto result = linformer_attention<T>(Q, K, V, 0.35, options);
      const auto drawn = linformer_projections(k, n, 7, share);
      const Matrix<double> expected =
          naive_softmax(Q.template cast<double>(), drawn.e * K.template cast<double>(), 0.35) *
          (drawn.f * V.template cast<double>());
      CHECK(relative_difference(result.output, expected) < 10 * tolerance<T>(n));
      CHECK(relative_difference(Matrix<T>(result.attention_operator().dense() * V), result.output) <
            10 * tolerance<T>(n));
    }
  }
}

TEST_CASE("linformer with E = F = I (k = N) is exact attention, explicit and shared projections are used") {
  const Index n = 16;
  const Matrix<double> Q = random_matrix<double>(n, 4, 4), K = random_matrix<double>(n, 4, 5),
                       V = random_matrix<double>(n, 3, 6);
  LinformerOptions options;
  options.projected = n;
  options.e = Matrix<double>::Identity(n, n);
  options.share_projections = true;
  CHECK(relative_difference(linformer_attention<double>(Q, K, V, 0.5, options).output,
                            naive_attention(Q, K, V, 0.5)) < 1e-13);
}

TEST_CASE("linformer projections: seeded, uniform in [-1/sqrt(k), 1/sqrt(k)], shared on request") {
  const auto a = linformer_projections(9, 30, 3), b = linformer_projections(9, 30, 3);
  CHECK(a.e == b.e);
  CHECK(a.f == b.f);
  CHECK(a.e != a.f);
  CHECK(a.e.cwiseAbs().maxCoeff() <= 1 / 3.0);
  CHECK(std::abs(a.e.mean()) < 0.05);
  const auto shared = linformer_projections(9, 30, 3, true);
  CHECK(shared.e == shared.f);
}

TEST_CASE("linformer rejects bad input naming the value") {
  const Matrix<double> Q = random_matrix<double>(10, 4, 1), V = random_matrix<double>(10, 2, 2);
  LinformerOptions options;
  options.projected = 0;
  CHECK(throws_naming([&] { linformer_attention<double>(Q, Q, V, 0.5, options); }, "k = 0"));
  options.projected = 3;
  options.e = Matrix<double>::Ones(3, 9);
  CHECK(throws_naming([&] { linformer_attention<double>(Q, Q, V, 0.5, options); }, "E is 3x9"));
}
