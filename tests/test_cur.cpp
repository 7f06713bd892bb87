#include <doctest/doctest.h>

#include <numeric>

#include "attention_oracles.hpp"
#include "nystrom/cur.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// CURformer Alg. 1 in double with the exact pseudoinverse: C pinv(C[q_idx]) (R V).
Matrix<double> oracle(const Matrix<double>& Q, const Matrix<double>& K, const Matrix<double>& V, double s,
                      const std::vector<Index>& q_idx, const std::vector<Index>& k_idx) {
  const Matrix<double> C = naive_softmax(Q, rows_at(K, k_idx), s);
  const Matrix<double> R = naive_softmax(rows_at(Q, q_idx), K, s);
  return C * dense_pinv(rows_at(C, q_idx), 1e-13) * (R * V);
}

CurOptions given(const std::vector<Index>& q_idx, const std::vector<Index>& k_idx) {
  CurOptions options;
  options.selection.strategy = LandmarkStrategy::given;
  options.selection.count = static_cast<Index>(q_idx.size());
  options.selection.q_indices = q_idx;
  options.selection.k_indices = k_idx;
  return options;
}

}  // namespace

TEST_CASE_TEMPLATE("cur with given different indices equals the dense CURformer formula", T, float, double) {
  // 600 tokens: three panels, the last one partial.
  for (const Index n : {Index(50), Index(600)}) {
    CAPTURE(n);
    const Matrix<T> Q = random_matrix<T>(n, 8, 1), K = random_matrix<T>(n, 8, 2),
                    V = random_matrix<T>(n, 5, 3);
    const std::vector<Index> q_idx = {0, 7, 13, 21, 30, 44}, k_idx = {3, 9, 17, 25, 38, n - 1};
    const auto result = cur_attention<T>(Q, K, V, 0.35, given(q_idx, k_idx));
    const Matrix<double> expected = oracle(Q.template cast<double>(), K.template cast<double>(),
                                           V.template cast<double>(), 0.35, q_idx, k_idx);
    CHECK(relative_difference(result.output, expected) < 100 * tolerance<T>(n));
    CHECK(result.q_indices == q_idx);
    CHECK(result.k_indices == k_idx);
    CHECK(relative_difference(Matrix<T>(result.attention_operator().dense() * V), result.output) <
          10 * tolerance<T>(n));
  }
}

TEST_CASE_TEMPLATE("cur selecting every token recovers exact attention", T, float, double) {
  const Index n = 20;
  const Matrix<T> Q = random_matrix<T>(n, 6, 4, 0.5), K = random_matrix<T>(n, 6, 5, 0.5),
                  V = random_matrix<T>(n, 3, 6);
  std::vector<Index> all(n);
  std::iota(all.begin(), all.end(), Index(0));
  const auto result = cur_attention<T>(Q, K, V, 0.4, given(all, all));  // C = R = U = S: S S⁺ S V = S V
  const Matrix<double> exact = naive_attention(Q, K, V, 0.4);
  CHECK(relative_difference(result.output, exact) < 1000 * tolerance<T>(n));
}

TEST_CASE("cur copies the exact rows RV at the selected queries") {
  const Index n = 40;
  const Matrix<double> Q = random_matrix<double>(n, 8, 7), K = random_matrix<double>(n, 8, 8),
                       V = random_matrix<double>(n, 4, 9);
  CurOptions options;
  options.selection.strategy = LandmarkStrategy::step;
  options.selection.count = 5;
  options.copy_rows = true;
  const auto result = cur_attention<double>(Q, K, V, 0.35, options);
  const Matrix<double> exact = naive_attention(Q, K, V, 0.35);
  for (Index i : result.q_indices)
    CHECK((result.output.row(i) - exact.row(i)).norm() < 1e-12 * exact.row(i).norm());
  options.copy_rows = false;
  const auto plain = cur_attention<double>(Q, K, V, 0.35, options);
  const Matrix<double> expected = oracle(Q, K, V, 0.35, plain.q_indices, plain.k_indices);
  CHECK(relative_difference(plain.output, expected) < 1e-10);
}

TEST_CASE("cur selection strategies: same or different indices, forced tokens") {
  const Index n = 64;
  const Matrix<double> Q = random_matrix<double>(n, 8, 10), K = random_matrix<double>(n, 8, 11),
                       V = random_matrix<double>(n, 4, 12);
  for (auto strategy : {LandmarkStrategy::step, LandmarkStrategy::random, LandmarkStrategy::top_sum,
                        LandmarkStrategy::top_abs, LandmarkStrategy::top_embed}) {
    CAPTURE(to_string(strategy));
    for (bool same : {true, false}) {
      CurOptions options;
      options.selection.strategy = strategy;
      options.selection.count = 8;
      options.selection.different_indices = !same;
      options.selection.forced = {0};
      const auto result = cur_attention<double>(Q, K, V, 0.35, options);
      REQUIRE(result.q_indices.size() == 8);
      REQUIRE(result.k_indices.size() == 8);
      CHECK(std::find(result.q_indices.begin(), result.q_indices.end(), 0) != result.q_indices.end());
      if (same) CHECK(result.q_indices == result.k_indices);
      const Matrix<double> expected = oracle(Q, K, V, 0.35, result.q_indices, result.k_indices);
      CHECK(relative_difference(result.output, expected) < 1e-9);
    }
  }
}

TEST_CASE("cur rejects pooling strategies and bad counts naming the value") {
  const Matrix<double> Q = random_matrix<double>(10, 4, 1), V = random_matrix<double>(10, 2, 2);
  CurOptions options;
  options.selection.strategy = LandmarkStrategy::segment_means;
  CHECK(throws_naming([&] { cur_attention<double>(Q, Q, V, 0.5, options); }, "segment-means"));
  options.selection.strategy = LandmarkStrategy::step;
  options.selection.count = 11;
  CHECK(throws_naming([&] { cur_attention<double>(Q, Q, V, 0.5, options); }, "11"));
}
