#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "nystrom/landmarks.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// Segment boundaries straight from the rule of docs/mathematics.md §5, built one segment length at a time.
std::vector<Index> segment_starts(Index n, Index m) {
  const Index s = n / m;
  std::vector<Index> starts{0};
  for (Index segment = 0; segment < m; ++segment)
    starts.push_back(starts.back() + (segment < (s + 1) * m - n ? s : s + 1));
  return starts;
}

/// Mean of the listed rows of X, in double.
template <class T>
Vector<double> mean_of_rows(const Matrix<T>& X, const std::vector<Index>& rows) {
  Vector<double> sum = Vector<double>::Zero(X.cols());
  for (Index r : rows) sum += X.row(r).transpose().template cast<double>();
  return sum / static_cast<double>(rows.size());
}

/// The m indices with the largest score, ties to the lower index, by a full sort (the oracle for top-*).
std::vector<Index> top_by_sort(const Vector<double>& score, Index m) {
  std::vector<Index> order(static_cast<std::size_t>(score.size()));
  std::iota(order.begin(), order.end(), Index{0});
  std::stable_sort(order.begin(), order.end(), [&](Index a, Index b) { return score(a) > score(b); });
  order.resize(static_cast<std::size_t>(m));
  std::sort(order.begin(), order.end());
  return order;
}

/// Adaptive average pooling straight from docs/mathematics.md §5 (bins [⌊I·H/h⌋, ⌈(I+1)·H/h⌉) by
/// floating-point floor and ceil) of the window tokens rows [first, first + h·w) of X to a gh×gw grid, cells
/// row-major, in double.
template <class T>
Matrix<double> pooling_oracle(const Matrix<T>& X, Index first, Index h, Index w, Index gh, Index gw) {
  Matrix<double> out(gh * gw, X.cols());
  for (Index I = 0; I < gh; ++I) {
    for (Index J = 0; J < gw; ++J) {
      std::vector<Index> rows;
      for (Index r = Index(std::floor(double(I) * h / gh)); r < Index(std::ceil(double(I + 1) * h / gh)); ++r)
        for (Index c = Index(std::floor(double(J) * w / gw)); c < Index(std::ceil(double(J + 1) * w / gw));
             ++c)
          rows.push_back(first + r * w + c);
      out.row(I * gw + J) = mean_of_rows<T>(X, rows).transpose();
    }
  }
  return out;
}

LandmarkOptions options_for(LandmarkStrategy strategy, Index m) {
  LandmarkOptions options;
  options.strategy = strategy;
  options.count = m;
  return options;
}

}  // namespace

TEST_CASE("landmark strategy names round-trip") {
  for (auto s : {LandmarkStrategy::segment_means, LandmarkStrategy::window_pool, LandmarkStrategy::step,
                 LandmarkStrategy::random, LandmarkStrategy::top_sum, LandmarkStrategy::top_abs,
                 LandmarkStrategy::top_embed, LandmarkStrategy::kmeans, LandmarkStrategy::given})
    CHECK(landmark_strategy_from_string(to_string(s)) == s);
  CHECK(throws_naming([] { landmark_strategy_from_string("landmark-x"); }, "landmark-x"));
  CHECK(is_selection(LandmarkStrategy::top_abs));
  CHECK_FALSE(is_selection(LandmarkStrategy::kmeans));
}

TEST_CASE_TEMPLATE("uneven segment means equal the rule's oracle", T, float, double) {
  const Index n = 1000, d = 5;
  const Matrix<T> X = random_matrix<T>(n, d, 101);
  for (Index m : {7, 16, 33, 1000, 1}) {
    CAPTURE(m);
    const Matrix<T> means = segment_means<T>(X, m);
    REQUIRE(means.rows() == m);
    const std::vector<Index> starts = segment_starts(n, m);
    REQUIRE(starts.back() == n);
    for (Index segment = 0; segment < m; ++segment) {
      std::vector<Index> rows(static_cast<std::size_t>(starts[segment + 1] - starts[segment]));
      std::iota(rows.begin(), rows.end(), starts[segment]);
      const Vector<double> oracle = mean_of_rows<T>(X, rows);
      CHECK((means.row(segment).transpose().template cast<double>() - oracle).norm() <=
            tolerance<T>(n / m + 1) * (1 + oracle.norm()));
    }
  }
  // Lengths of the m = 7 split of 1000: s = 142, the first 143·7 − 1000 = 1 segment has 142 rows, six have
  // 143.
  const std::vector<Index> starts = segment_starts(n, 7);
  CHECK(starts[1] - starts[0] == 142);
  CHECK(starts[2] - starts[1] == 143);
  // m = N returns X itself, m = 1 the overall mean.
  CHECK(segment_means<T>(X, n) == X);
  CHECK((segment_means<T>(X, 1).transpose().template cast<double>() -
         X.template cast<double>().colwise().mean().transpose())
            .norm() <= tolerance<T>(n));
  // The strategy entry point uses the same means for Q and K and returns no indices.
  const Matrix<T> K = random_matrix<T>(n, d, 102);
  const Landmarks<T> marks =
      select_landmarks<T>(X, K, options_for(LandmarkStrategy::segment_means, 33), Kernel{});
  CHECK(marks.q == segment_means<T>(X, 33));
  CHECK(marks.k == segment_means<T>(K, 33));
  CHECK(marks.q_indices.empty());
}

TEST_CASE("closest-square factors") {
  CHECK(closest_square_factors(16) == std::array<Index, 2>{4, 4});
  CHECK(closest_square_factors(32) == std::array<Index, 2>{4, 8});
  CHECK(closest_square_factors(12) == std::array<Index, 2>{3, 4});
  CHECK(closest_square_factors(7) == std::array<Index, 2>{1, 7});
  CHECK(closest_square_factors(1) == std::array<Index, 2>{1, 1});
  CHECK(closest_square_factors(48) == std::array<Index, 2>{6, 8});
  CHECK(throws_naming([] { closest_square_factors(0); }, "m = 0"));
}

TEST_CASE_TEMPLATE("window pooling equals block means, with overlapping bins when uneven", T, float, double) {
  SUBCASE("32x32 window, m = 16: the 4x4 grid of 8x8 block means") {
    const Matrix<T> X = random_matrix<T>(32 * 32, 3, 201);
    const Matrix<T> pooled = window_pool<T>(X, 32, 32, 16, WindowGrid::aspect);
    REQUIRE(pooled.rows() == 16);
    for (Index I = 0; I < 4; ++I) {
      for (Index J = 0; J < 4; ++J) {
        std::vector<Index> rows;
        for (Index r = 8 * I; r < 8 * I + 8; ++r)
          for (Index c = 8 * J; c < 8 * J + 8; ++c) rows.push_back(r * 32 + c);
        const Vector<double> oracle = mean_of_rows<T>(X, rows);
        CHECK((pooled.row(I * 4 + J).transpose().template cast<double>() - oracle).norm() <=
              tolerance<T>(64) * (1 + oracle.norm()));
      }
    }
    // The strategy with a square default window gives the same.
    LandmarkOptions options = options_for(LandmarkStrategy::window_pool, 16);
    CHECK(select_landmarks<T>(X, X, options, Kernel{}).q == pooled);
  }
  SUBCASE("7x7 window, m = 4: overlapping bins [0,4) and [3,7)") {
    // Token value = its index t = 7r + c, so each bin mean is known in closed form: mean(7r) + mean(c).
    Matrix<T> X(49, 1);
    for (Index t = 0; t < 49; ++t) X(t, 0) = T(t);
    const Matrix<T> pooled = window_pool<T>(X, 7, 7, 4, WindowGrid::aspect);
    const double low = (0 + 1 + 2 + 3) / 4.0, high = (3 + 4 + 5 + 6) / 4.0;  // means over [0,4) and [3,7)
    CHECK(double(pooled(0, 0)) == doctest::Approx(7 * low + low));
    CHECK(double(pooled(1, 0)) == doctest::Approx(7 * low + high));
    CHECK(double(pooled(2, 0)) == doctest::Approx(7 * high + low));
    CHECK(double(pooled(3, 0)) == doctest::Approx(7 * high + high));
  }
  SUBCASE("rectangular window and a non-square m") {
    // 6x10 grid, m = 8 → 2x4 bins with either grid: rows [0,3),[3,6); columns [0,3),[2,5),[5,8),[7,10).
    const Matrix<T> X = random_matrix<T>(60, 2, 202);
    const Matrix<T> pooled = window_pool<T>(X, 6, 10, 8, WindowGrid::square);
    CHECK(window_pool<T>(X, 6, 10, 8, WindowGrid::aspect) == pooled);
    const Index column_bins[4][2] = {{0, 3}, {2, 5}, {5, 8}, {7, 10}};
    for (Index I = 0; I < 2; ++I) {
      for (Index J = 0; J < 4; ++J) {
        std::vector<Index> rows;
        for (Index r = 3 * I; r < 3 * I + 3; ++r)
          for (Index c = column_bins[J][0]; c < column_bins[J][1]; ++c) rows.push_back(r * 10 + c);
        const Vector<double> oracle = mean_of_rows<T>(X, rows);
        CHECK((pooled.row(I * 4 + J).transpose().template cast<double>() - oracle).norm() <=
              tolerance<T>(9) * (1 + oracle.norm()));
      }
    }
  }
}

TEST_CASE("window grid names round-trip and pooling grids: aspect, square, ties") {
  for (auto grid : {WindowGrid::aspect, WindowGrid::square})
    CHECK(window_grid_from_string(to_string(grid)) == grid);
  CHECK(to_string(WindowGrid::aspect) == "aspect");
  CHECK(to_string(WindowGrid::square) == "square");
  CHECK(throws_naming([] { window_grid_from_string("round"); }, "round"));
  using Grid = std::array<Index, 2>;
  // m = 16 on an 8×32 window: aspect 2×8 (exactly h/w), square 4×4; transposed windows transpose the grid.
  CHECK(pooling_grid(8, 32, 16, WindowGrid::aspect) == Grid{2, 8});
  CHECK(pooling_grid(32, 8, 16, WindowGrid::aspect) == Grid{8, 2});
  CHECK(pooling_grid(8, 32, 16, WindowGrid::square) == Grid{4, 4});
  // Ties in log ratio (1×8 and 2×4 are both a factor 2 from 8/32) go to the squarer grid.
  CHECK(pooling_grid(8, 32, 8, WindowGrid::aspect) == Grid{2, 4});
  // m = h·w: the window itself. Otherwise the closest aspect in log ratio (5×7, m = 6: 2×3 is 7% off, 3×2
  // 110%), also where no grid fits (2×5, m = 9: 3×3 repeats rows, as the square grid does, but is closer
  // than 1×9).
  CHECK(pooling_grid(3, 5, 15, WindowGrid::aspect) == Grid{3, 5});
  CHECK(pooling_grid(5, 3, 15, WindowGrid::aspect) == Grid{5, 3});
  CHECK(pooling_grid(2, 50, 16, WindowGrid::aspect) == Grid{1, 16});
  CHECK(pooling_grid(5, 7, 6, WindowGrid::aspect) == Grid{2, 3});
  CHECK(pooling_grid(2, 5, 9, WindowGrid::aspect) == Grid{3, 3});
  // On square windows aspect equals the closest-square grid, for every m up to N.
  for (Index side = 1; side <= 12; ++side)
    for (Index m = 1; m <= side * side; ++m) {
      CAPTURE(side);
      CAPTURE(m);
      CHECK(pooling_grid(side, side, m, WindowGrid::aspect) == closest_square_factors(m));
    }
  CHECK(throws_naming([] { pooling_grid(0, 4, 2, WindowGrid::aspect); }, "0x4"));
  CHECK(throws_naming([] { pooling_grid(4, 4, 0, WindowGrid::square); }, "cells = 0"));
}

TEST_CASE_TEMPLATE(
    "window pooling equals the naive pooling oracle: square and rectangular windows, prefix tokens, "
    "odd sizes, m = N",
    T, float, double) {
  struct Case {
    Index prefix, h, w, m;  // m counts the prefix tokens
    WindowGrid grid;
    Index gh, gw;  // the expected grid of the m − prefix cells
  };
  const Case cases[] = {
      {0, 8, 32, 16, WindowGrid::aspect, 2, 8},  {0, 8, 32, 16, WindowGrid::square, 4, 4},
      {0, 32, 8, 16, WindowGrid::aspect, 8, 2},  {1, 14, 14, 17, WindowGrid::aspect, 4, 4},
      {1, 14, 14, 50, WindowGrid::aspect, 7, 7}, {2, 5, 7, 8, WindowGrid::aspect, 2, 3},
      {3, 9, 11, 10, WindowGrid::square, 1, 7},  {0, 7, 9, 63, WindowGrid::aspect, 7, 9},
      {1, 3, 5, 16, WindowGrid::aspect, 3, 5},   {1, 3, 5, 16, WindowGrid::square, 3, 5},
      {0, 2, 6, 12, WindowGrid::square, 3, 4},  // gh > h: repeated bins, as the authors' code
  };
  for (const Case& c : cases) {
    CAPTURE(c.prefix);
    CAPTURE(c.h);
    CAPTURE(c.w);
    CAPTURE(c.m);
    CAPTURE(to_string(c.grid));
    const Index n = c.prefix + c.h * c.w;
    REQUIRE(pooling_grid(c.h, c.w, c.m - c.prefix, c.grid) == std::array<Index, 2>{c.gh, c.gw});
    const Matrix<T> Q = random_matrix<T>(n, 3, 211 + std::uint64_t(n)), K = random_matrix<T>(n, 3, 212);
    LandmarkOptions options = options_for(LandmarkStrategy::window_pool, c.m);
    options.window = {c.h, c.w};
    options.window_grid = c.grid;
    options.prefix_tokens = c.prefix;
    const Landmarks<T> marks = select_landmarks<T>(Q, K, options, Kernel{});
    REQUIRE(marks.q.rows() == c.m);
    CHECK(marks.q_indices.empty());
    for (const auto& [X, pooled] : {std::pair{&Q, &marks.q}, {&K, &marks.k}}) {
      // The prefix tokens themselves, then the oracle's cells.
      CHECK(pooled->topRows(c.prefix) == X->topRows(c.prefix));
      const Matrix<double> oracle = pooling_oracle<T>(*X, c.prefix, c.h, c.w, c.gh, c.gw);
      CHECK((pooled->bottomRows(c.m - c.prefix).template cast<double>() - oracle).cwiseAbs().maxCoeff() <=
            tolerance<T>(n) * (1 + oracle.cwiseAbs().maxCoeff()));
    }
    // m = N: every cell is one token, so the landmarks are the tokens.
    if (c.m == n && c.gh == c.h) CHECK(marks.q == Q);
  }
  // Without a window, N − p square: the square window is inferred (197 = 1 + 14²).
  const Matrix<T> X = random_matrix<T>(197, 2, 213);
  LandmarkOptions inferred = options_for(LandmarkStrategy::window_pool, 17);
  inferred.prefix_tokens = 1;
  LandmarkOptions explicit_window = inferred;
  explicit_window.window = {14, 14};
  CHECK(select_landmarks<T>(X, X, inferred, Kernel{}).q ==
        select_landmarks<T>(X, X, explicit_window, Kernel{}).q);
}

TEST_CASE_TEMPLATE(
    "prefix tokens are landmarks of their own and the strategy places the others on the remaining "
    "tokens",
    T, float, double) {
  const Index n = 101, d = 4, p = 2, m = 9;
  const Matrix<T> Q = random_matrix<T>(n, d, 221), K = random_matrix<T>(n, d, 222);
  SUBCASE("pooling strategies: the prefix rows, then the strategy on the other N − p tokens with m − p") {
    for (auto strategy : {LandmarkStrategy::segment_means, LandmarkStrategy::kmeans}) {
      CAPTURE(to_string(strategy));
      LandmarkOptions with_prefix = options_for(strategy, m);
      with_prefix.prefix_tokens = p;
      with_prefix.seed = 5;
      LandmarkOptions rest = options_for(strategy, m - p);
      rest.seed = 5;
      const Landmarks<T> marks = select_landmarks<T>(Q, K, with_prefix, Kernel{});
      const Matrix<T> q_rest = Q.bottomRows(n - p), k_rest = K.bottomRows(n - p);
      const Landmarks<T> others = select_landmarks<T>(q_rest, k_rest, rest, Kernel{});
      REQUIRE(marks.q.rows() == m);
      CHECK(marks.q.topRows(p) == Q.topRows(p));
      CHECK(marks.k.topRows(p) == K.topRows(p));
      CHECK(marks.q.bottomRows(m - p) == others.q);
      CHECK(marks.k.bottomRows(m - p) == others.k);
    }
  }
  SUBCASE("selection strategies: the prefix tokens are forced rows") {
    for (auto strategy : {LandmarkStrategy::step, LandmarkStrategy::random, LandmarkStrategy::top_sum,
                          LandmarkStrategy::top_abs, LandmarkStrategy::top_embed}) {
      CAPTURE(to_string(strategy));
      LandmarkOptions with_prefix = options_for(strategy, m);
      with_prefix.prefix_tokens = p;
      with_prefix.different_indices = true;
      with_prefix.forced = {1, 50};  // overlaps the prefix in token 1
      LandmarkOptions forced = with_prefix;
      forced.prefix_tokens = 0;
      forced.forced = {0, 1, 50};
      const Landmarks<T> marks = select_landmarks<T>(Q, K, with_prefix, Kernel{});
      const Landmarks<T> oracle = select_landmarks<T>(Q, K, forced, Kernel{});
      CHECK(marks.q_indices == oracle.q_indices);
      CHECK(marks.k_indices == oracle.k_indices);
      CHECK(std::vector<Index>(marks.q_indices.begin(), marks.q_indices.begin() + 2) ==
            std::vector<Index>{0, 1});
      CHECK(marks.q.row(0) == Q.row(0));
    }
  }
  SUBCASE("given indices are used as they are") {
    LandmarkOptions options = options_for(LandmarkStrategy::given, 2);
    options.q_indices = {7, 9};
    options.prefix_tokens = 5;
    CHECK(select_landmarks<T>(Q, K, options, Kernel{}).q_indices == std::vector<Index>{7, 9});
  }
}

TEST_CASE_TEMPLATE("top-sum, top-abs and top-embed pick the rows a full sort ranks first", T, float, double) {
  const Index n = 200, d = 6, m = 12;
  const Matrix<T> Q = random_matrix<T>(n, d, 301), K = random_matrix<T>(n, d, 302);
  const Matrix<double> q = Q.template cast<double>(), k = K.template cast<double>();
  struct Case {
    LandmarkStrategy strategy;
    Vector<double> q_score, k_score;
  };
  const Case cases[] = {
      {LandmarkStrategy::top_sum, q.rowwise().sum(), k.rowwise().sum()},
      {LandmarkStrategy::top_abs, q.cwiseAbs().rowwise().sum(), k.cwiseAbs().rowwise().sum()},
      {LandmarkStrategy::top_embed, q.col(4), k.col(4)}};
  for (const Case& c : cases) {
    CAPTURE(to_string(c.strategy));
    LandmarkOptions options = options_for(c.strategy, m);
    options.embed_column = 4;
    const Landmarks<T> same = select_landmarks<T>(Q, K, options, Kernel{});
    CHECK(same.q_indices == top_by_sort(c.q_score, m));
    CHECK(same.k_indices == same.q_indices);  // same indices: scored on Q
    options.different_indices = true;
    const Landmarks<T> different = select_landmarks<T>(Q, K, options, Kernel{});
    CHECK(different.q_indices == top_by_sort(c.q_score, m));
    CHECK(different.k_indices == top_by_sort(c.k_score, m));
    CHECK(different.q_indices != different.k_indices);
    // The landmark rows are the rows of Q and K behind the indices.
    for (Index r = 0; r < m; ++r) {
      CHECK(different.q.row(r) == Q.row(different.q_indices[r]));
      CHECK(different.k.row(r) == K.row(different.k_indices[r]));
    }
  }
}

TEST_CASE_TEMPLATE("step, random and given selections", T, float, double) {
  const Index n = 100, d = 4;
  const Matrix<T> Q = random_matrix<T>(n, d, 401), K = random_matrix<T>(n, d, 402);
  SUBCASE("step takes every floor(N/m)-th token") {
    const Landmarks<T> marks = select_landmarks<T>(Q, K, options_for(LandmarkStrategy::step, 7), Kernel{});
    CHECK(marks.q_indices == std::vector<Index>{0, 14, 28, 42, 56, 70, 84});
    CHECK(marks.k_indices == marks.q_indices);
  }
  SUBCASE("random is seeded, without replacement, and changes with the seed") {
    LandmarkOptions options = options_for(LandmarkStrategy::random, 30);
    options.seed = 7;
    const Landmarks<T> first = select_landmarks<T>(Q, K, options, Kernel{});
    const Landmarks<T> again = select_landmarks<T>(Q, K, options, Kernel{});
    CHECK(first.q_indices == again.q_indices);
    CHECK(std::set<Index>(first.q_indices.begin(), first.q_indices.end()).size() == 30);
    CHECK(std::all_of(first.q_indices.begin(), first.q_indices.end(),
                      [&](Index i) { return i >= 0 && i < n; }));
    options.seed = 8;
    CHECK(select_landmarks<T>(Q, K, options, Kernel{}).q_indices != first.q_indices);
    options.different_indices = true;
    const Landmarks<T> different = select_landmarks<T>(Q, K, options, Kernel{});
    CHECK(different.q_indices != different.k_indices);
    // m = N selects every token exactly once.
    options.count = n;
    const Landmarks<T> all = select_landmarks<T>(Q, K, options, Kernel{});
    std::vector<Index> expected(static_cast<std::size_t>(n));
    std::iota(expected.begin(), expected.end(), Index{0});
    CHECK(all.q_indices == expected);
    // Every token is reachable: over many seeds of m = 1 each index shows up.
    std::set<Index> seen;
    options.count = 1;
    for (std::uint64_t seed = 0; seed < 2000; ++seed) {
      options.seed = seed;
      seen.insert(select_landmarks<T>(Q, K, options, Kernel{}).q_indices[0]);
    }
    CHECK(seen.size() == static_cast<std::size_t>(n));
  }
  SUBCASE("forced tokens are always included and counted within m") {
    for (auto strategy : {LandmarkStrategy::step, LandmarkStrategy::random, LandmarkStrategy::top_sum,
                          LandmarkStrategy::top_abs, LandmarkStrategy::top_embed}) {
      CAPTURE(to_string(strategy));
      LandmarkOptions options = options_for(strategy, 10);
      options.forced = {0, 57};
      options.different_indices = true;
      const Landmarks<T> marks = select_landmarks<T>(Q, K, options, Kernel{});
      for (const auto* indices : {&marks.q_indices, &marks.k_indices}) {
        CHECK(indices->size() == 10);
        CHECK(std::set<Index>(indices->begin(), indices->end()).size() == 10);
        CHECK(std::count(indices->begin(), indices->end(), 0) == 1);
        CHECK(std::count(indices->begin(), indices->end(), 57) == 1);
      }
    }
    // Top-sum with a forced token: the other m − 1 are the best of the rest.
    LandmarkOptions options = options_for(LandmarkStrategy::top_sum, 5);
    const Vector<double> score = Q.template cast<double>().rowwise().sum();
    Index worst = 0;
    score.minCoeff(&worst);
    options.forced = {worst};
    Vector<double> rest = score;
    rest(worst) = -1e300;
    std::vector<Index> expected = top_by_sort(rest, 4);
    expected.push_back(worst);
    std::sort(expected.begin(), expected.end());
    CHECK(select_landmarks<T>(Q, K, options, Kernel{}).q_indices == expected);
  }
  SUBCASE("given indices, the same or different for Q and K") {
    LandmarkOptions options = options_for(LandmarkStrategy::given, 3);
    options.q_indices = {5, 2, 90};
    const Landmarks<T> same = select_landmarks<T>(Q, K, options, Kernel{});
    CHECK(same.k_indices == options.q_indices);
    CHECK(same.q.row(0) == Q.row(5));
    CHECK(same.k.row(2) == K.row(90));
    options.k_indices = {1, 3, 4};
    const Landmarks<T> different = select_landmarks<T>(Q, K, options, Kernel{});
    CHECK(different.k_indices == options.k_indices);
    CHECK(different.k.row(1) == K.row(3));
  }
}

TEST_CASE_TEMPLATE("k-means++ is deterministic per seed and its centroids are the means of their clusters", T,
                   float, double) {
  // Five well separated clusters of 40 points each in 3-D.
  const Index clusters = 5, per = 40, d = 3;
  Matrix<T> X = random_matrix<T>(clusters * per, d, 501, 0.1);
  for (Index c = 0; c < clusters; ++c) X.middleRows(c * per, per).col(c % d).array() += T(10 * (c + 1));
  const Matrix<T> K = random_matrix<T>(clusters * per, d, 502);
  LandmarkOptions options = options_for(LandmarkStrategy::kmeans, clusters);
  options.seed = 3;
  options.kmeans_iterations = 100;
  const Landmarks<T> first = select_landmarks<T>(X, K, options, Kernel{});
  CHECK(select_landmarks<T>(X, K, options, Kernel{}).q == first.q);
  CHECK(select_landmarks<T>(X, K, options, Kernel{}).k == first.k);
  CHECK(first.q_indices.empty());
  // Each centroid is the mean of the points nearest to it (a fixed point of Lloyd's iteration).
  using Pair = std::pair<const Matrix<T>*, const Matrix<T>*>;
  for (const auto& [data, centroids] : {Pair{&X, &first.q}, Pair{&K, &first.k}}) {
    std::vector<std::vector<Index>> members(static_cast<std::size_t>(clusters));
    for (Index i = 0; i < data->rows(); ++i) {
      Index best = 0;
      (centroids->template cast<double>().rowwise() - data->row(i).template cast<double>())
          .rowwise()
          .squaredNorm()
          .minCoeff(&best);
      members[static_cast<std::size_t>(best)].push_back(i);
    }
    for (Index c = 0; c < clusters; ++c) {
      if (members[static_cast<std::size_t>(c)].empty()) continue;
      const Vector<double> mean = mean_of_rows<T>(*data, members[static_cast<std::size_t>(c)]);
      CHECK((centroids->row(c).transpose().template cast<double>() - mean).norm() <=
            tolerance<T>(per) * (1 + mean.norm()));
    }
  }
  // On separated clusters k-means++ finds every cluster: each has exactly its 40 points.
  for (Index c = 0; c < clusters; ++c) {
    const Vector<double> mean = mean_of_rows<T>(X, [&] {
      std::vector<Index> rows(static_cast<std::size_t>(per));
      std::iota(rows.begin(), rows.end(), c * per);
      return rows;
    }());
    const Matrix<double> distances =
        (first.q.template cast<double>().rowwise() - mean.transpose()).rowwise().squaredNorm();
    CHECK(distances.minCoeff() <= 1e-6 * (1 + mean.squaredNorm()));
  }
}

TEST_CASE("bad landmark options throw naming the value") {
  const Matrix<double> Q = random_matrix<double>(20, 4, 601), K = random_matrix<double>(20, 4, 602);
  const auto fails = [&](LandmarkOptions options, const std::string& needle) {
    return throws_naming([&] { select_landmarks<double>(Q, K, options, Kernel{}); }, needle);
  };
  CHECK(fails(options_for(LandmarkStrategy::segment_means, 0), "m = 0"));
  CHECK(fails(options_for(LandmarkStrategy::step, 21), "m = 21"));
  LandmarkOptions options = options_for(LandmarkStrategy::top_sum, 4);
  options.forced = {3, 20};
  CHECK(fails(options, "index 20"));
  options.forced = {-1};
  CHECK(fails(options, "index -1"));
  options.forced = {3, 3};
  CHECK(fails(options, "index 3 appears twice"));
  options.forced = {0, 1, 2, 3, 4};
  CHECK(fails(options, "5 forced"));
  options = options_for(LandmarkStrategy::given, 2);
  options.q_indices = {1, 25};
  CHECK(fails(options, "25"));
  options.q_indices = {1};
  CHECK(fails(options, "given 1 q_indices"));
  options.q_indices = {1, 2};
  options.k_indices = {1, 2, 3};
  CHECK(fails(options, "given 3 k_indices"));
  options = options_for(LandmarkStrategy::window_pool, 4);
  CHECK(fails(options, "N = 20 is not a square"));
  options.window = {3, 7};
  CHECK(fails(options, "window 3x7"));
  options = options_for(LandmarkStrategy::window_pool, 4);
  options.prefix_tokens = -1;
  CHECK(fails(options, "prefix_tokens = -1"));
  options.prefix_tokens = 4;
  CHECK(fails(options, "prefix_tokens = 4 must be < m = 4"));
  options = options_for(LandmarkStrategy::segment_means, 3);
  options.prefix_tokens = 3;
  CHECK(fails(options, "prefix_tokens = 3"));
  options = options_for(LandmarkStrategy::window_pool, 4);
  options.prefix_tokens = 2;
  CHECK(fails(options, "N - prefix_tokens = 20 - 2 = 18 is not a square"));
  options.window = {4, 5};
  CHECK(fails(options, "window 4x5 does not hold N - prefix_tokens = 20 - 2 = 18"));
  options.window = {3, 6};
  CHECK_NOTHROW(select_landmarks<double>(Q, K, options, Kernel{}));
  // Sides whose product wraps around to N − prefix_tokens: 3 · 6148914691236517212 = 2⁶⁴ + 18.
  options.window = {3, 6148914691236517212};
  CHECK(fails(options, "window 3x6148914691236517212 does not hold"));
  options = options_for(LandmarkStrategy::step, 3);
  options.prefix_tokens = 2;
  options.forced = {5, 9};
  CHECK(fails(options, "4 forced indices (prefix tokens included) exceed m = 3"));
  options = options_for(LandmarkStrategy::top_embed, 4);
  options.embed_column = 4;
  CHECK(fails(options, "embed_column = 4"));
  const Matrix<double> short_k = random_matrix<double>(20, 3, 603);
  CHECK(throws_naming(
      [&] { select_landmarks<double>(Q, short_k, options_for(LandmarkStrategy::step, 2), Kernel{}); },
      "20x3"));
  Matrix<double> bad = Q;
  bad(2, 1) = std::nan("");
  CHECK(throws_naming(
      [&] { select_landmarks<double>(bad, K, options_for(LandmarkStrategy::step, 2), Kernel{}); },
      "non-finite"));
  CHECK(throws_naming([&] { segment_means<double>(Q, 21); }, "m = 21"));
  CHECK(throws_naming([&] { window_pool<double>(Q, 4, 4, 4, WindowGrid::aspect); }, "4x4"));
}
