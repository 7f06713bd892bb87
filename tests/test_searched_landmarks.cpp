// The landmark strategies that search (docs/mathematics.md §5, lib/src/searched_landmarks.cpp) through
// select_landmarks: cross, softmax-cross, maxvol, rpcholesky, farthest-point, farthest-point-means and the
// oracle-qdeim, against brute-force oracles, exact recovery of a rank-r G (Corollary 2.2) through
// generalized_nystrom, oversampled (p×m) landmarks, the kernel entries each evaluates, and bad options.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

constexpr LandmarkStrategy searched[] = {
    LandmarkStrategy::cross,       LandmarkStrategy::softmax_cross,  LandmarkStrategy::maxvol,
    LandmarkStrategy::rpcholesky,  LandmarkStrategy::farthest_point, LandmarkStrategy::farthest_point_means,
    LandmarkStrategy::oracle_qdeim};

LandmarkOptions options_of(LandmarkStrategy strategy, Index m, double oversampling = 1,
                           std::uint64_t seed = 3) {
  LandmarkOptions options;
  options.strategy = strategy;
  options.count = m;
  options.oversampling = oversampling;
  options.seed = seed;
  return options;
}

/// The rows of `x` in a seeded random order (tokens of one block scattered over the sequence).
Matrix<double> shuffled_rows(const Matrix<double>& x, std::uint64_t seed) {
  std::vector<Index> order(static_cast<std::size_t>(x.rows()));
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
  Matrix<double> out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i) out.row(i) = x.row(order[std::size_t(i)]);
  return out;
}

/// Brute-force farthest-point sampling on [q_i | k_i]: start at the token farthest from the tokens' mean,
/// then the token with the largest distance to the chosen set (ties: smallest index), O(N²) distances per
/// step.
std::vector<Index> brute_force_centres(const Matrix<double>& Q, const Matrix<double>& K, Index count) {
  Matrix<double> x(Q.rows(), Q.cols() + K.cols());
  x << Q, K;
  const auto distance = [&](Index i, Index j) { return (x.row(i) - x.row(j)).squaredNorm(); };
  const Vector<double> mean = x.colwise().mean().transpose();
  Index start = 0;
  for (Index i = 1; i < x.rows(); ++i)
    if ((x.row(i).transpose() - mean).squaredNorm() > (x.row(start).transpose() - mean).squaredNorm())
      start = i;
  std::vector<Index> chosen = {start};
  while (Index(chosen.size()) < count) {
    Index best = -1;
    double farthest = -1;
    for (Index i = 0; i < x.rows(); ++i) {
      if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) continue;
      double nearest = std::numeric_limits<double>::infinity();
      for (Index c : chosen) nearest = std::min(nearest, distance(i, c));
      if (nearest > farthest) {
        farthest = nearest;
        best = i;
      }
    }
    chosen.push_back(best);
  }
  return chosen;
}

std::vector<Index> sorted(std::vector<Index> indices) {
  std::sort(indices.begin(), indices.end());
  return indices;
}

}  // namespace

TEST_CASE_TEMPLATE("searched strategies give p query and m key landmarks, rows of Q and K where they select",
                   T, float, double) {
  const Index n = 67, d = 5, m = 6;
  const Matrix<T> Q = random_matrix<T>(n, d, 11), K = random_matrix<T>(n, d, 12);
  const Kernel kernel = Kernel::exponential(0.4);
  for (const LandmarkStrategy strategy : searched)
    for (const double oversampling : {1.0, 2.0}) {
      CAPTURE(to_string(strategy));
      CAPTURE(oversampling);
      const LandmarkOptions options = options_of(strategy, m, oversampling);
      const Landmarks<T> marks = select_landmarks<T>(Q, K, options, kernel);
      const Index p = options.query_count();
      REQUIRE(marks.q.rows() == p);
      REQUIRE(marks.k.rows() == m);
      CHECK(all_finite(marks.q));
      CHECK(all_finite(marks.k));
      // Deterministic for a seed.
      const Landmarks<T> again = select_landmarks<T>(Q, K, options, kernel);
      CHECK(again.q == marks.q);
      CHECK(again.k == marks.k);
      if (is_selection(strategy)) {
        REQUIRE(Index(marks.q_indices.size()) == p);
        REQUIRE(Index(marks.k_indices.size()) == m);
        CHECK(std::set<Index>(marks.q_indices.begin(), marks.q_indices.end()).size() == std::size_t(p));
        CHECK(std::set<Index>(marks.k_indices.begin(), marks.k_indices.end()).size() == std::size_t(m));
        for (Index r = 0; r < p; ++r) CHECK(marks.q.row(r) == Q.row(marks.q_indices[std::size_t(r)]));
        for (Index r = 0; r < m; ++r) CHECK(marks.k.row(r) == K.row(marks.k_indices[std::size_t(r)]));
      }
      // Kernel entries: none for the token searches, O(N·m) for the cross and Cholesky searches, N² for the
      // oracle.
      switch (strategy) {
        case LandmarkStrategy::farthest_point:
        case LandmarkStrategy::farthest_point_means:
          CHECK(marks.entries == 0);
          break;
        case LandmarkStrategy::oracle_qdeim:
          CHECK(marks.entries == double(n * n));
          break;
        default:
          CHECK(marks.entries > 0);
          CHECK(marks.entries <= 12.0 * double(n) * double(p + 8));
      }
    }
}

TEST_CASE("rpcholesky's landmarks are pivot tokens of [Q; K], the keys the first m of the queries'") {
  const Index n = 40, d = 4, m = 5;
  const Matrix<double> Q = random_matrix<double>(n, d, 21), K = random_matrix<double>(n, d, 22);
  const Landmarks<double> marks = select_landmarks<double>(
      Q, K, options_of(LandmarkStrategy::rpcholesky, m, 2), Kernel::exponential(0.3));
  REQUIRE(marks.joint_indices.size() == 10);
  for (Index r = 0; r < 10; ++r) {
    const Index j = marks.joint_indices[std::size_t(r)];
    CHECK(marks.q.row(r) == (j < n ? Q.row(j) : K.row(j - n)));
  }
  CHECK(marks.k == marks.q.topRows(m));
}

TEST_CASE("farthest-point and farthest-point-means equal brute-force centres and Voronoi means") {
  const Index n = 53, d = 3, m = 5;
  Matrix<double> Q = random_matrix<double>(n, d, 31), K = random_matrix<double>(n, d, 32);
  Q.row(7) = Q.row(3);  // a duplicate token: distance 0 to its twin
  K.row(7) = K.row(3);
  const Kernel kernel = Kernel::exponential(0.5);
  const std::vector<Index> centres = brute_force_centres(Q, K, 2 * m);
  const Landmarks<double> rows =
      select_landmarks<double>(Q, K, options_of(LandmarkStrategy::farthest_point, m, 2), kernel);
  CHECK(sorted(rows.q_indices) == sorted(centres));
  CHECK(sorted(rows.k_indices) == sorted({centres.begin(), centres.begin() + m}));
  // Means over the cells of the first `count` centres, nearest centre first in the order chosen.
  Matrix<double> x(n, 2 * d);
  x << Q, K;
  const auto means = [&](const Matrix<double>& X, Index count) {
    Matrix<double> sum = Matrix<double>::Zero(count, d);
    Vector<double> size = Vector<double>::Zero(count);
    for (Index i = 0; i < n; ++i) {
      Index nearest = 0;
      for (Index c = 1; c < count; ++c)
        if ((x.row(i) - x.row(centres[std::size_t(c)])).squaredNorm() <
            (x.row(i) - x.row(centres[std::size_t(nearest)])).squaredNorm())
          nearest = c;
      sum.row(nearest) += X.row(i);
      size(nearest) += 1;
    }
    return Matrix<double>(size.cwiseInverse().asDiagonal() * sum);
  };
  const Landmarks<double> cells =
      select_landmarks<double>(Q, K, options_of(LandmarkStrategy::farthest_point_means, m, 2), kernel);
  CHECK((cells.q - means(Q, 2 * m)).norm() <= 1e-14 * Q.norm());
  CHECK((cells.k - means(K, m)).norm() <= 1e-14 * K.norm());
}

TEST_CASE(
    "Corollary 2.2: cross, maxvol and oracle-qdeim recover a G of rank r at m = r, rpcholesky at m = 2r") {
  // r distinct query and key tokens scattered over N: G = exp(s Q Kᵀ) has rank r.
  const Index n = 61, d = 4, r = 5;
  const Matrix<double> Q = shuffled_rows(segment_constant<double>(n, d, r, 41), 1),
                       K = shuffled_rows(segment_constant<double>(n, d, r, 42), 2);
  const Kernel kernel = Kernel::exponential(0.7);
  const Matrix<double> g = kernel.block<double>(Q, K);
  for (const LandmarkStrategy strategy :
       {LandmarkStrategy::cross, LandmarkStrategy::softmax_cross, LandmarkStrategy::maxvol,
        LandmarkStrategy::oracle_qdeim, LandmarkStrategy::rpcholesky})
    for (const double oversampling : {1.0, 2.0}) {
      CAPTURE(to_string(strategy));
      CAPTURE(oversampling);
      NystromOptions options;
      options.kernel = kernel;
      options.stabilization = Stabilization::none;
      // rpcholesky's joint tokens hold 2r distinct rows; G's r query and r key tokens are all needed.
      options.landmarks =
          options_of(strategy, strategy == LandmarkStrategy::rpcholesky ? 2 * r : r, oversampling);
      const NystromFactors<double> factors = generalized_nystrom<double>(Q, K, options);
      CHECK((g - factors.dense()).norm() <= 1e-10 * g.norm());
    }
}

TEST_CASE("searched strategies refuse forced and prefix tokens, naming the strategy") {
  const Matrix<double> Q = random_matrix<double>(20, 3, 51), K = random_matrix<double>(20, 3, 52);
  LandmarkOptions options = options_of(LandmarkStrategy::cross, 4);
  options.forced = {0};
  CHECK(throws_naming([&] { select_landmarks<double>(Q, K, options, Kernel{}); }, "cross"));
  options.forced.clear();
  options.prefix_tokens = 1;
  CHECK(throws_naming([&] { select_landmarks<double>(Q, K, options, Kernel{}); }, "prefix"));
  options.prefix_tokens = 0;
  options.oversampling = 6;  // 24 query landmarks of 20 tokens
  CHECK(throws_naming([&] { select_landmarks<double>(Q, K, options, Kernel{}); }, "oversampling = 6"));
}
