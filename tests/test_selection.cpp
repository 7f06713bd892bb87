#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "nystrom/selection.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

// ---------------------------------------------------------------------------------------------------------
// Oracles over dense matrices, and the documented random transforms restated

/// A dense matrix behind an EntryOracle that counts the rows and columns it evaluates.
class CountingMatrix {
 public:
  explicit CountingMatrix(Matrix<double> a) : a_(std::move(a)) {}
  CountingMatrix(const CountingMatrix&) = delete;
  CountingMatrix& operator=(const CountingMatrix&) = delete;

  EntryOracle oracle() {
    return {a_.rows(), a_.cols(),
            [this](Index i, double* out) {
              ++row_calls;
              Eigen::Map<Vector<double>>(out, a_.cols()) = a_.row(i).transpose();
            },
            [this](Index j, double* out) {
              ++column_calls;
              Eigen::Map<Vector<double>>(out, a_.rows()) = a_.col(j);
            }};
  }
  /// M per row evaluated, N per column.
  Index entries() const { return row_calls * a_.cols() + column_calls * a_.rows(); }

  Index row_calls = 0, column_calls = 0;

 private:
  Matrix<double> a_;
};

/// A dense PSD matrix behind a PsdOracle that counts its diagonal and column evaluations.
class CountingPsd {
 public:
  explicit CountingPsd(Matrix<double> a) : a_(std::move(a)) {}
  CountingPsd(const CountingPsd&) = delete;
  CountingPsd& operator=(const CountingPsd&) = delete;

  PsdOracle oracle() {
    return {a_.rows(),
            [this](double* out) {
              ++diagonal_calls;
              Eigen::Map<Vector<double>>(out, a_.rows()) = a_.diagonal();
            },
            [this](Index j, double* out) {
              ++column_calls;
              Eigen::Map<Vector<double>>(out, a_.rows()) = a_.col(j);
            }};
  }
  Index entries() const { return (diagonal_calls + column_calls) * a_.rows(); }

  Index diagonal_calls = 0, column_calls = 0;

 private:
  Matrix<double> a_;
};

/// random.hpp's uniform_below as selection.hpp documents it: rejection from the largest multiple of bound.
Index draw_below(std::mt19937_64& engine, Index bound) {
  const auto range = static_cast<std::uint64_t>(bound);
  const std::uint64_t top = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t draw;
  do draw = engine();
  while (draw >= top - top % range);
  return static_cast<Index>(draw % range);
}

/// random.hpp's uniform_unit: the top 53 bits of one draw.
double draw_unit(std::mt19937_64& engine) {
  return static_cast<double>(engine() >> 11) * 0x1.0p-53;
}

/// estimated_row_sums' column draws as selection.hpp states them: o = (0, …, n−1); for l < count, swap o_l
/// with o_{l+u}, u = uniform_below(engine, n − l); the first `count` entries of o.
std::vector<Index> shuffled_prefix(std::mt19937_64& engine, Index n, Index count) {
  std::vector<Index> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), Index{0});
  for (Index l = 0; l < count; ++l)
    std::swap(order[static_cast<std::size_t>(l)],
              order[static_cast<std::size_t>(l + draw_below(engine, n - l))]);
  order.resize(static_cast<std::size_t>(count));
  return order;
}

/// True when the indices are distinct and inside [0, n).
bool distinct_within(const std::vector<Index>& indices, Index n) {
  const std::set<Index> unique(indices.begin(), indices.end());
  return unique.size() == indices.size() &&
         (indices.empty() || (*unique.begin() >= 0 && *unique.rbegin() < n));
}

/// The position of the largest |x_i| among the allowed i, ties to the smallest; −1 when none is allowed.
template <class Allowed>
Index first_largest(const Vector<double>& x, Allowed allowed) {
  Index best = -1;
  for (Index i = 0; i < x.size(); ++i)
    if (allowed(i) && (best < 0 || std::abs(x(i)) > std::abs(x(best)))) best = i;
  return best;
}

/// exp(−‖x_i − x_j‖²/(2h²)) for the rows of X, by a double loop: a PSD matrix with unit diagonal and a
/// decaying spectrum.
Matrix<double> gaussian_kernel(const Matrix<double>& X, double h) {
  Matrix<double> A(X.rows(), X.rows());
  for (Index i = 0; i < X.rows(); ++i)
    for (Index j = 0; j < X.rows(); ++j)
      A(i, j) = std::exp(-(X.row(i) - X.row(j)).squaredNorm() / (2 * h * h));
  return A;
}

/// Points uniform in the unit cube [0, 1)^d, deterministic for a seed.
Matrix<double> uniform_points(Index n, Index d, std::uint64_t seed) {
  std::mt19937_64 engine(seed);
  Matrix<double> X(n, d);
  for (Index i = 0; i < n; ++i)
    for (Index c = 0; c < d; ++c) X(i, c) = draw_unit(engine);
  return X;
}

// ---------------------------------------------------------------------------------------------------------
// Cross approximation oracle

/// What the brute-force cross approximation chose and evaluated.
struct BruteCross {
  std::vector<Index> rows, cols, probes;
  Index restarts = 0, row_evaluations = 0, column_evaluations = 0;
};

/// cross_approximation's pivoting rule (selection.hpp) re-implemented on the dense D = diag(w)·A: the
/// residual E = D − UV is formed and updated by each cross, the probes' residual is E(:, P); probe rows,
/// restarts and fill pairs as documented.
BruteCross brute_force_cross(const Matrix<double>& A, Index rank, const CrossOptions& options) {
  const Index n = A.rows(), m = A.cols();
  Matrix<double> D = A;
  for (std::size_t i = 0; i < options.row_scale.size(); ++i)
    D.row(static_cast<Index>(i)) *= options.row_scale[i];
  Matrix<double> E = D;
  enum State { unvisited, pivot, vanished };
  std::vector<State> state(static_cast<std::size_t>(n), unvisited);
  std::vector<bool> used(static_cast<std::size_t>(m), false);
  std::vector<Index> vanished_rows;
  std::mt19937_64 engine(options.seed);
  BruteCross out;
  out.probes = shuffled_prefix(engine, m, std::min(options.probes, m));
  out.column_evaluations = static_cast<Index>(out.probes.size());
  const auto at = [&](Index i) { return state[static_cast<std::size_t>(i)]; };
  const auto unused = [&](Index j) { return !used[static_cast<std::size_t>(j)]; };
  const auto is_unvisited = [&](Index i) { return at(i) == unvisited; };
  const auto unvisited_count = [&] {
    return static_cast<Index>(std::count(state.begin(), state.end(), unvisited));
  };
  const auto fill_row = [&] {
    for (Index x = 0; x < n; ++x)
      if (at(x) == unvisited) return x;
    for (Index x : vanished_rows)
      if (at(x) == vanished) return x;
    return Index{-1};
  };
  double largest = 0;
  // The unvisited row of the largest |E(x, P_t)| > tolerance·largest, and that entry.
  const auto probe_row = [&] {
    Index best = -1;
    double entry = options.tolerance * largest;
    for (Index x = 0; x < n; ++x)
      for (Index j : out.probes)
        if (is_unvisited(x) && std::abs(E(x, j)) > entry) {
          best = x;
          entry = std::abs(E(x, j));
        }
    return std::pair{best, entry};
  };
  const auto take = [&](Index i, Index j) {
    out.rows.push_back(i);
    out.cols.push_back(j);
    used[static_cast<std::size_t>(j)] = true;
    state[static_cast<std::size_t>(i)] = pivot;
  };
  bool filling = false;
  Index i = options.start_row;
  while (true) {
    ++out.row_evaluations;
    const Vector<double> r = E.row(i).transpose();
    const Index j = first_largest(r, unused);
    if (std::abs(r(j)) > options.tolerance * largest) {
      ++out.column_evaluations;
      const Vector<double> c = E.col(j);
      E -= c * r.transpose() / r(j);
      largest = std::max(largest, std::abs(r(j)));
      take(i, j);
      if (static_cast<Index>(out.rows.size()) == rank) break;
      const Index natural = first_largest(c, is_unvisited);
      const auto [probe, entry] = probe_row();
      i = natural < 0 ? fill_row() : probe >= 0 && entry > std::abs(c(natural)) ? probe : natural;
      continue;
    }
    const Index others = unvisited_count() - (at(i) == unvisited ? 1 : 0);
    if (!filling && out.restarts < options.max_restarts.value_or(rank) && others > 0) {
      state[static_cast<std::size_t>(i)] = vanished;
      vanished_rows.push_back(i);
      i = probe_row().first;
      if (i < 0) {
        Index u = draw_below(engine, unvisited_count());
        for (Index x = 0; x < n; ++x)
          if (at(x) == unvisited && u-- == 0) {
            i = x;
            break;
          }
      }
      ++out.restarts;
      continue;
    }
    filling = true;
    take(i, first_largest(Vector<double>(D.row(i).transpose()), unused));
    if (static_cast<Index>(out.rows.size()) == rank) break;
    i = fill_row();
  }
  return out;
}

/// Runs cross_approximation on `matrix` and checks it against brute_force_cross: the same rows, columns,
/// restarts and evaluations, and the entries the oracle counted.
CrossResult checked_cross(const Matrix<double>& A, Index rank, const CrossOptions& options) {
  CountingMatrix matrix(A);
  const CrossResult result = cross_approximation(matrix.oracle(), rank, options);
  const BruteCross oracle = brute_force_cross(A, rank, options);
  CHECK(result.rows == oracle.rows);
  CHECK(result.cols == oracle.cols);
  CHECK(result.restarts == oracle.restarts);
  CHECK(result.probe_cols == oracle.probes);
  CHECK(matrix.row_calls == oracle.row_evaluations);
  CHECK(matrix.column_calls == oracle.column_evaluations);
  CHECK(result.entries == matrix.entries());
  // The documented budget: at most 2·rank + max_restarts rows and rank + p columns.
  const auto p = static_cast<Index>(oracle.probes.size());
  CHECK(result.entries <=
        (2 * rank + options.max_restarts.value_or(rank)) * A.cols() + (rank + p) * A.rows());
  CHECK(static_cast<Index>(result.rows.size()) == rank);
  CHECK(distinct_within(result.rows, A.rows()));
  CHECK(distinct_within(result.cols, A.cols()));
  return result;
}

/// A block-diagonal matrix: a rank-2 block on rows [0, 20) × cols [0, 15) and a rank-2 block 100 times
/// larger on rows [20, 37) × cols [15, 27), zeros elsewhere (N = 37 odd, M = 27).
Matrix<double> block_diagonal(std::uint64_t seed) {
  Matrix<double> A = Matrix<double>::Zero(37, 27);
  A.topLeftCorner(20, 15) = random_low_rank<double>(20, 15, 2, seed);
  A.bottomRightCorner(17, 12) = 100 * random_low_rank<double>(17, 12, 2, seed + 7);
  return A;
}

/// ‖A‖₂ by a Jacobi SVD.
double spectral_norm(const Matrix<double>& A) {
  return Eigen::JacobiSVD<Matrix<double>>(A).singularValues()(0);
}

/// An attention-head-like 61×53 matrix of two nearly decoupled positive blocks: B₁ = X₁Y₁ᵀ (rank 3, factors
/// uniform in [0, 1)) plus a full-rank tail of entries below 1e-11 on rows [0, 40) × cols [0, 36), and
/// B₂ = 2·X₂Y₂ᵀ (rank 2, entries up to twice B₁'s) on rows [40, 61) × cols [36, 53); entries below 1e-13
/// elsewhere. The residual of B₁ never vanishes (its tail sits far above tolerance·pivot), and the residual
/// columns of B₁ are larger on B₁'s rows than on B₂'s.
Matrix<double> decoupled_blocks(std::uint64_t seed) {
  Matrix<double> A = 1e-13 * uniform_points(61, 53, seed);
  A.topLeftCorner(40, 36) = uniform_points(40, 3, seed + 1) * uniform_points(36, 3, seed + 2).transpose() +
                            1e-11 * uniform_points(40, 36, seed + 3);
  A.bottomRightCorner(21, 17) =
      2 * uniform_points(21, 2, seed + 4) * uniform_points(17, 2, seed + 5).transpose();
  return A;
}

// ---------------------------------------------------------------------------------------------------------
// Randomly pivoted Cholesky oracles

/// What the dense RPCholesky reference chose.
struct ReferenceCholesky {
  std::vector<Index> pivots;
  Matrix<double> factor;
  Index sampled = 0, rounds = 0, rejections = 0;
};

/// rpcholesky's algorithm (selection.hpp) on the dense A with the same draws: the residual matrix
/// E = A − FFᵀ is formed; a round proposes candidates ∝ d by a linear scan of the running sums, then accepts
/// candidate c iff v·E₀(c,c) < E(c,c) (E₀ the residual at the round's start) and eliminates it at once
/// (sequential Schur complements, no block solve).
ReferenceCholesky reference_rpcholesky(const Matrix<double>& A, Index k, Index block, std::uint64_t seed,
                                       double tolerance = 1e-13) {
  const Index n = A.rows();
  Matrix<double> E = A;
  ReferenceCholesky out;
  out.factor = Matrix<double>::Zero(n, k);
  Vector<double> d = A.diagonal();
  std::vector<bool> chosen(static_cast<std::size_t>(n), false);
  std::mt19937_64 engine(seed);
  while (out.sampled < k) {
    std::vector<double> running(static_cast<std::size_t>(n));
    double total = 0;
    for (Index i = 0; i < n; ++i) running[static_cast<std::size_t>(i)] = total += d(i);
    if (!(total > tolerance * A.trace())) break;
    std::vector<Index> candidates;
    for (Index t = 0; t < std::min(block, k - out.sampled); ++t) {
      const double threshold = draw_unit(engine) * total;
      Index c = 0;
      while (!(running[static_cast<std::size_t>(c)] > threshold)) ++c;
      if (std::find(candidates.begin(), candidates.end(), c) == candidates.end()) candidates.push_back(c);
    }
    const Matrix<double> start = E;
    for (Index c : candidates) {
      const double v = draw_unit(engine);
      if (start(c, c) <= 0) d(c) = 0;
      if (!(start(c, c) > 0 && v * start(c, c) < E(c, c))) {
        ++out.rejections;
        continue;
      }
      const Vector<double> column = E.col(c) / std::sqrt(E(c, c));
      out.factor.col(out.sampled++) = column;
      E -= column * column.transpose();
      chosen[static_cast<std::size_t>(c)] = true;
      out.pivots.push_back(c);
    }
    for (Index i = 0; i < n; ++i) d(i) = chosen[static_cast<std::size_t>(i)] ? 0.0 : std::max(E(i, i), 0.0);
    ++out.rounds;
  }
  for (Index i = 0; i < n && static_cast<Index>(out.pivots.size()) < k; ++i)
    if (!chosen[static_cast<std::size_t>(i)]) out.pivots.push_back(i);
  return out;
}

/// The exact probability of each ordered pivot sequence of sequential RPCholesky (k steps) on A:
/// P(p₁, …, p_k) = Π_t E_t(p_t, p_t)/tr(E_t), E_t the Schur complement after t − 1 steps.
void pivot_sequence_probabilities(const Matrix<double>& E, Index steps, std::vector<Index>& prefix,
                                  double probability, std::map<std::vector<Index>, double>& out) {
  if (steps == 0) {
    out[prefix] = probability;
    return;
  }
  const double trace = E.trace();
  for (Index p = 0; p < E.rows(); ++p) {
    if (!(E(p, p) > 1e-12 * trace)) continue;
    const Vector<double> g = E.col(p) / std::sqrt(E(p, p));
    prefix.push_back(p);
    pivot_sequence_probabilities(E - g * g.transpose(), steps - 1, prefix, probability * E(p, p) / trace,
                                 out);
    prefix.pop_back();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Maxvol oracles

/// |det A(rows, :)| by a full-pivoting LU.
double volume(const Matrix<double>& A, const std::vector<Index>& rows) {
  Matrix<double> sub(static_cast<Index>(rows.size()), A.cols());
  for (std::size_t t = 0; t < rows.size(); ++t) sub.row(static_cast<Index>(t)) = A.row(rows[t]);
  return std::abs(sub.fullPivLu().determinant());
}

/// max|A A_I⁻¹| formed densely with a full-pivoting LU solve.
double largest_coefficient(const Matrix<double>& A, const std::vector<Index>& rows) {
  Matrix<double> sub(static_cast<Index>(rows.size()), A.cols());
  for (std::size_t t = 0; t < rows.size(); ++t) sub.row(static_cast<Index>(t)) = A.row(rows[t]);
  const Matrix<double> B = sub.transpose().fullPivLu().solve(A.transpose()).transpose();
  return B.cwiseAbs().maxCoeff();
}

/// rect_maxvol's greedy rule densely: the next row maximizes a_x (A_IᵀA_I)⁻¹ a_xᵀ among the rows outside I
/// (ties: smallest x), the inverse formed afresh at every step.
std::vector<Index> greedy_rect_rows(const Matrix<double>& A, std::vector<Index> rows, Index count) {
  while (static_cast<Index>(rows.size()) < count) {
    Matrix<double> sub(static_cast<Index>(rows.size()), A.cols());
    for (std::size_t t = 0; t < rows.size(); ++t) sub.row(static_cast<Index>(t)) = A.row(rows[t]);
    const Matrix<double> gram_inverse = (sub.transpose() * sub).inverse();
    Index best = -1;
    double best_score = -1;
    for (Index x = 0; x < A.rows(); ++x) {
      if (std::find(rows.begin(), rows.end(), x) != rows.end()) continue;
      const double score = A.row(x) * gram_inverse * A.row(x).transpose();
      if (score > best_score) {
        best = x;
        best_score = score;
      }
    }
    rows.push_back(best);
  }
  return rows;
}

/// ‖A − A(:,J) A(I,J)⁺ A(I,:)‖_F / ‖A‖_F, A(I,J)⁺A(I,:) by the least-squares solve of a Jacobi SVD.
double cross_error(const Matrix<double>& A, const std::vector<Index>& rows, const std::vector<Index>& cols) {
  const auto r = static_cast<Index>(rows.size()), c = static_cast<Index>(cols.size());
  Matrix<double> C(A.rows(), c), R(r, A.cols()), core(r, c);
  for (Index t = 0; t < c; ++t) C.col(t) = A.col(cols[static_cast<std::size_t>(t)]);
  for (Index t = 0; t < r; ++t) R.row(t) = A.row(rows[static_cast<std::size_t>(t)]);
  for (Index s = 0; s < r; ++s)
    for (Index t = 0; t < c; ++t)
      core(s, t) = A(rows[static_cast<std::size_t>(s)], cols[static_cast<std::size_t>(t)]);
  const Eigen::JacobiSVD<Matrix<double>> svd(core, Eigen::ComputeThinU | Eigen::ComputeThinV);
  return relative_difference(Matrix<double>(C * svd.solve(R)), A);
}

/// All k-subsets of {0, …, n−1}, ascending.
std::vector<std::vector<Index>> subsets(Index n, Index k) {
  std::vector<std::vector<Index>> out;
  std::vector<Index> current;
  const auto extend = [&](const auto& self, Index from) -> void {
    if (static_cast<Index>(current.size()) == k) {
      out.push_back(current);
      return;
    }
    for (Index i = from; i < n; ++i) {
      current.push_back(i);
      self(self, i + 1);
      current.pop_back();
    }
  };
  extend(extend, 0);
  return out;
}

// ---------------------------------------------------------------------------------------------------------
// Farthest-point and Q-DEIM oracles

/// Farthest-point sampling by brute force, O(N²m): every step recomputes each unchosen point's squared
/// distance to every chosen one with a plain loop, and takes the largest minimum (ties: smallest index).
std::vector<Index> brute_force_fps(const Matrix<double>& X, Index m, Index start) {
  std::vector<Index> chosen{start};
  while (static_cast<Index>(chosen.size()) < m) {
    Index best = -1;
    double best_distance = -1;
    for (Index i = 0; i < X.rows(); ++i) {
      if (std::find(chosen.begin(), chosen.end(), i) != chosen.end()) continue;
      double nearest = std::numeric_limits<double>::infinity();
      for (Index c : chosen) {
        double squared = 0;
        for (Index t = 0; t < X.cols(); ++t) squared += (X(i, t) - X(c, t)) * (X(i, t) - X(c, t));
        nearest = std::min(nearest, squared);
      }
      if (nearest > best_distance) {
        best = i;
        best_distance = nearest;
      }
    }
    chosen.push_back(best);
  }
  return chosen;
}

/// The first m column pivots of QR with column pivoting of W (m×N) by Gram–Schmidt: each step takes the
/// column of largest residual norm (recomputed in full; ties: smallest index) and projects it out of all.
std::vector<Index> pivoted_gram_schmidt(Matrix<double> W) {
  std::vector<Index> pivots;
  std::vector<bool> taken(static_cast<std::size_t>(W.cols()), false);
  for (Index t = 0; t < W.rows(); ++t) {
    Index best = -1;
    for (Index j = 0; j < W.cols(); ++j)
      if (!taken[static_cast<std::size_t>(j)] && (best < 0 || W.col(j).norm() > W.col(best).norm())) best = j;
    const Vector<double> q = W.col(best).normalized();
    W -= q * (q.transpose() * W);
    taken[static_cast<std::size_t>(best)] = true;
    pivots.push_back(best);
  }
  return pivots;
}

/// An N×m matrix with orthonormal columns (Q of a Gaussian matrix).
Matrix<double> orthonormal_columns(Index n, Index m, std::uint64_t seed) {
  return Eigen::HouseholderQR<Matrix<double>>(random_matrix<double>(n, m, seed)).householderQ() *
         Matrix<double>::Identity(n, m);
}

}  // namespace

// =========================================================================================================
// Cross approximation

TEST_CASE("cross approximation recovers an exactly rank-r matrix (Corollary 2.2)") {
  const Index r = 5;
  const Matrix<double> A = random_low_rank<double>(51, 40, r, 301);
  SUBCASE("rank = r: r rows and columns, and the probes' p·N entries") {
    for (Index probes : {Index{0}, Index{8}}) {
      CAPTURE(probes);
      CrossOptions options;
      options.start_row = 7;
      options.probes = probes;
      const CrossResult result = checked_cross(A, r, options);
      CHECK(result.crosses == r);
      CHECK(result.restarts == 0);
      CHECK(relative_difference(Matrix<double>(result.u * result.v), A) < 1e-10);
      CHECK(result.entries == probes * 51 + r * (40 + 51));
    }
  }
  SUBCASE("rank > r: fill pairs after the residual vanished") {
    for (Index rank : {Index{6}, Index{9}, Index{40}}) {
      CAPTURE(rank);
      const CrossResult result = checked_cross(A, rank, CrossOptions{});
      CHECK(result.crosses == r);
      CHECK(result.restarts == rank);  // every restart lands on a vanishing row
      CHECK(relative_difference(Matrix<double>(result.u * result.v), A) < 1e-10);
      CHECK(result.u.rightCols(rank - r).isZero(0));
      CHECK(result.v.bottomRows(rank - r).isZero(0));
      CHECK(result.u.allFinite());
    }
  }
}

TEST_CASE("cross approximation follows the brute-force pivoting rule") {
  const Matrix<double> A = random_matrix<double>(31, 26, 302);
  for (Index probes : {Index{0}, Index{3}, Index{8}}) {
    for (Index start : {Index{0}, Index{13}, Index{30}}) {
      for (Index rank : {Index{1}, Index{6}, Index{26}}) {
        CAPTURE(probes);
        CAPTURE(start);
        CAPTURE(rank);
        CrossOptions options;
        options.start_row = start;
        options.probes = probes;
        options.seed = static_cast<std::uint64_t>(start);
        const CrossResult result = checked_cross(A, rank, options);
        CHECK(result.crosses == rank);
        CHECK(result.restarts == 0);
        if (rank == 26) CHECK(relative_difference(Matrix<double>(result.u * result.v), A) < 1e-9);
      }
    }
  }
  SUBCASE("probes take rows from the probe columns") {
    // Every column a probe: some next row comes from a probe instead of the residual column.
    CrossOptions options;
    options.probes = 26;
    const CrossResult with = checked_cross(A, 12, options);
    options.probes = 0;
    const CrossResult without = checked_cross(A, 12, options);
    CHECK(with.rows != without.rows);
  }
  SUBCASE("more probes than columns: every column once") {
    const Matrix<double> wide = random_matrix<double>(9, 5, 309);
    CrossOptions options;
    options.probes = 8;
    const CrossResult result = checked_cross(wide, 3, options);
    std::vector<Index> sorted = result.probe_cols;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == std::vector<Index>{0, 1, 2, 3, 4});
    CHECK(result.restarts == 0);
    CHECK(result.entries == 5 * 9 + 3 * 5 + 3 * 9);  // p·N + M per row + N per pivot column
  }
  SUBCASE("the first pivot column is the largest entry of the start row") {
    const CrossResult result = checked_cross(A, 1, CrossOptions{});
    Index j = 0;
    A.row(0).cwiseAbs().maxCoeff(&j);
    CHECK(result.rows == std::vector<Index>{0});
    CHECK(result.cols == std::vector<Index>{j});
  }
  SUBCASE("a zero matrix gives fill pairs only, without dividing by zero") {
    const Matrix<double> zero = Matrix<double>::Zero(9, 12);
    const CrossResult result = checked_cross(zero, 4, CrossOptions{});
    CHECK(result.crosses == 0);
    CHECK(result.u.isZero(0));
    CHECK(result.v.isZero(0));
  }
}

TEST_CASE("cross approximation finds a far block through its restarts") {
  CrossOptions options;
  options.max_restarts = 16;
  options.probes = 0;
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    CAPTURE(seed);
    options.seed = seed;
    const Matrix<double> A = block_diagonal(303 + seed);
    const CrossResult result = checked_cross(A, 4, options);
    CHECK(result.restarts >= 1);
    CHECK(result.crosses == 4);
    CHECK(relative_difference(Matrix<double>(result.u * result.v), A) < 1e-10);
  }
  SUBCASE("without restarts the large block is missed") {
    options.max_restarts = 0;
    const Matrix<double> A = block_diagonal(303);
    const CrossResult result = checked_cross(A, 4, options);
    CHECK(result.crosses == 2);
    CHECK(relative_difference(Matrix<double>(result.u * result.v), A) > 0.9);
  }
}

TEST_CASE("cross approximation finds a far block through its probes") {
  for (std::uint64_t seed = 0; seed < 5; ++seed) {
    CAPTURE(seed);
    const Matrix<double> A = block_diagonal(303 + seed);
    CrossOptions options;
    options.seed = seed;
    SUBCASE("without restarts the chain still reaches the large block") {
      // A probe among its columns [15, 27) leads the chain there after the first cross. The large block then
      // has its two crosses (its residual vanishes), the small one only its first: the large block is exact.
      options.max_restarts = 0;
      const CrossResult result = checked_cross(A, 4, options);
      REQUIRE(
          std::any_of(result.probe_cols.begin(), result.probe_cols.end(), [](Index j) { return j >= 15; }));
      CHECK(result.rows[1] >= 20);
      CHECK(result.crosses == 3);
      const Matrix<double> residual = A - result.u * result.v;
      CHECK(residual.bottomRightCorner(17, 12).norm() < 1e-10 * A.norm());
    }
    SUBCASE("a restart at the probe row reaches the rest: exact") {
      const CrossResult result = checked_cross(A, 4, options);
      CHECK(result.restarts == 1);
      CHECK(result.crosses == 4);
      CHECK(relative_difference(Matrix<double>(result.u * result.v), A) < 1e-10);
    }
  }
}

TEST_CASE("cross approximation with probes recovers nearly decoupled blocks that plain ACA misses") {
  // An attention-head-like matrix on which plain ACA's residual never vanishes, so it never restarts and
  // spends every cross in the start row's block; a probe column in the other block leads there. The
  // optimum rank-6 error is ‖A − ⟦A⟧₆‖₂ = σ₇.
  const Matrix<double> A = decoupled_blocks(311);
  const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(A).singularValues();
  CHECK(sigma(1) > 0.5 * sigma(0));    // two comparable blocks
  CHECK(sigma(5) < 1e-10 * sigma(0));  // σ₆ on: the tail
  CHECK(A.bottomRightCorner(21, 17).maxCoeff() > A.topLeftCorner(40, 36).maxCoeff());  // the larger entries
  CrossOptions plain;
  plain.probes = 0;
  const CrossResult missed = checked_cross(A, 6, plain);
  CHECK(missed.restarts == 0);
  CHECK(missed.crosses == 6);
  CHECK(*std::max_element(missed.rows.begin(), missed.rows.end()) < 40);
  CHECK(relative_difference(Matrix<double>(missed.u * missed.v), A) > 0.5);
  CHECK(spectral_norm(A - missed.u * missed.v) > 1e9 * sigma(6));
  Index hits = 0;
  for (std::uint64_t seed = 0; seed < 20; ++seed) {
    CAPTURE(seed);
    CrossOptions options;
    options.seed = seed;
    const CrossResult result = checked_cross(A, 6, options);
    CHECK(result.crosses == 6);
    CHECK(result.entries == 8 * 61 + (6 + result.restarts) * 53 + 6 * 61);  // p·N + rows·M + crosses·N
    // A probe among the second block's columns [36, 53) is all it takes.
    if (std::none_of(result.probe_cols.begin(), result.probe_cols.end(), [](Index j) { return j >= 36; }))
      continue;
    ++hits;
    CHECK(relative_difference(Matrix<double>(result.u * result.v), A) <= 1e-8);
    CHECK(spectral_norm(A - result.u * result.v) <= 10 * sigma(6));
  }
  CHECK(hits >= 15);
}

TEST_CASE("cross approximation with row_scale pivots on diag(w)·A and approximates A") {
  std::mt19937_64 engine(304);
  std::vector<double> weights(41);
  for (double& w : weights) w = std::exp(4 * draw_unit(engine) - 2);
  CrossOptions scaled;
  scaled.row_scale = weights;
  SUBCASE("the pivots of the scaled brute-force rule, different from the unscaled ones") {
    const Matrix<double> A = random_matrix<double>(41, 30, 305);
    const CrossResult plain = checked_cross(A, 8, CrossOptions{});
    const CrossResult result = checked_cross(A, 8, scaled);
    CHECK(result.rows != plain.rows);
  }
  SUBCASE("exact recovery of A itself, not of diag(w)·A") {
    const Matrix<double> A = random_low_rank<double>(41, 30, 4, 306);
    const CrossResult result = checked_cross(A, 6, scaled);
    CHECK(result.crosses == 4);
    CHECK(relative_difference(Matrix<double>(result.u * result.v), A) < 1e-10);
  }
}

TEST_CASE("estimated_row_sums is unbiased") {
  const Index n = 13, m = 20, samples = 5, runs = 2000;
  const Matrix<double> A = random_matrix<double>(n, m, 307).array().exp();
  const Vector<double> truth = A.rowwise().sum();
  Vector<double> sum = Vector<double>::Zero(n), sum_squares = Vector<double>::Zero(n);
  for (Index seed = 0; seed < runs; ++seed) {
    CountingMatrix matrix(A);
    const RowSumEstimate estimate =
        estimated_row_sums(matrix.oracle(), samples, static_cast<std::uint64_t>(seed));
    CHECK(estimate.entries == n * samples);
    CHECK(estimate.entries == matrix.entries());
    CHECK((estimate.sums.array() > 0).all());
    sum += estimate.sums;
    sum_squares += estimate.sums.cwiseAbs2();
  }
  const Vector<double> mean = sum / runs;
  const Vector<double> variance = (sum_squares / runs - mean.cwiseAbs2()) * (runs / (runs - 1.0));
  for (Index i = 0; i < n; ++i) {
    CAPTURE(i);
    CHECK(std::abs(mean(i) - truth(i)) <= 4 * std::sqrt(variance(i) / runs));
  }
  SUBCASE("the documented columns") {
    CountingMatrix matrix(A);
    std::mt19937_64 engine(9);
    Vector<double> sums = Vector<double>::Zero(n);
    for (Index j : shuffled_prefix(engine, m, samples)) sums += A.col(j);
    CHECK(relative_difference(estimated_row_sums(matrix.oracle(), samples, 9).sums,
                              sums * (double(m) / samples)) < 1e-14);
  }
  SUBCASE("every column sampled: the exact sums") {
    CountingMatrix matrix(A);
    CHECK(relative_difference(estimated_row_sums(matrix.oracle(), m, 1).sums, truth) < 1e-14);
  }
}

TEST_CASE("cross approximation rejects bad arguments") {
  CountingMatrix matrix(random_matrix<double>(7, 5, 308));
  const EntryOracle oracle = matrix.oracle();
  CHECK(throws_naming([&] { cross_approximation(oracle, 0, CrossOptions{}); }, "rank = 0"));
  CHECK(throws_naming([&] { cross_approximation(oracle, 6, CrossOptions{}); }, "rank = 6"));
  CrossOptions options;
  options.start_row = 7;
  CHECK(throws_naming([&] { cross_approximation(oracle, 2, options); }, "start_row = 7"));
  options = CrossOptions{};
  options.tolerance = -1;
  CHECK(throws_naming([&] { cross_approximation(oracle, 2, options); }, "tolerance = -1"));
  options = CrossOptions{};
  options.max_restarts = -2;
  CHECK(throws_naming([&] { cross_approximation(oracle, 2, options); }, "max_restarts = -2"));
  options = CrossOptions{};
  options.probes = -1;
  CHECK(throws_naming([&] { cross_approximation(oracle, 2, options); }, "probes = -1"));
  options = CrossOptions{};
  options.row_scale = {1, 1, 1, 0, 1, 1, 1};
  CHECK(throws_naming([&] { cross_approximation(oracle, 2, options); }, "row_scale[3] = 0"));
  options.row_scale = {1, 1};
  CHECK(throws_naming([&] { cross_approximation(oracle, 2, options); }, "2 weights for 7 rows"));
  CHECK(throws_naming([&] { estimated_row_sums(oracle, 6, 0); }, "samples = 6"));
  CHECK(throws_naming(
      [&] {
        cross_approximation(EntryOracle{3, 3, {}, {}}, 1, CrossOptions{});
      },
      "lacks its row or column function"));
}

// =========================================================================================================
// Randomly pivoted Cholesky

TEST_CASE("rpcholesky equals the dense reference with the same random numbers") {
  const Matrix<double> A = gaussian_kernel(uniform_points(61, 3, 401), 0.4);
  const Index k = 20;
  for (Index block : {Index{1}, Index{3}, Index{16}, Index{64}}) {
    for (std::uint64_t seed : {0u, 1u, 2u}) {
      CAPTURE(block);
      CAPTURE(seed);
      CountingPsd matrix(A);
      RpcholeskyOptions options;
      options.block_size = block;
      options.seed = seed;
      const RpcholeskyResult result = rpcholesky(matrix.oracle(), k, options);
      const ReferenceCholesky reference = reference_rpcholesky(A, k, block, seed);
      CHECK(result.pivots == reference.pivots);
      CHECK(relative_difference(result.factor, reference.factor) < 1e-12);
      CHECK(result.sampled == k);
      CHECK(result.rounds == reference.rounds);
      CHECK(result.rejections == reference.rejections);
      CHECK(result.entries == (k + 1) * A.rows());
      CHECK(result.entries == matrix.entries());
      if (block == 1) CHECK(result.rejections == 0);
    }
  }
}

TEST_CASE("block rpcholesky draws pivot sequences with the sequential distribution") {
  // Exact probabilities of the ordered first three pivots against frequencies over 20000 seeds; the block
  // form's rejection sampling must reproduce them (Epperly, Tropp, Webber, Algorithm 2.2).
  const Matrix<double> X = random_matrix<double>(6, 3, 402);
  Matrix<double> A = X * X.transpose();
  A.diagonal().array() += 0.05;
  std::map<std::vector<Index>, double> exact;
  std::vector<Index> prefix;
  pivot_sequence_probabilities(A, 3, prefix, 1, exact);
  const Index runs = 20000;
  for (Index block : {Index{1}, Index{3}}) {
    CAPTURE(block);
    std::map<std::vector<Index>, Index> counts;
    RpcholeskyOptions options;
    options.block_size = block;
    for (Index seed = 0; seed < runs; ++seed) {
      CountingPsd matrix(A);
      options.seed = static_cast<std::uint64_t>(seed);
      ++counts[rpcholesky(matrix.oracle(), 3, options).pivots];
    }
    for (const auto& [sequence, probability] : exact) {
      CAPTURE(sequence[0]);
      CAPTURE(sequence[1]);
      CAPTURE(sequence[2]);
      const double frequency = static_cast<double>(counts[sequence]) / runs;
      CHECK(std::abs(frequency - probability) <=
            5 * std::sqrt(probability * (1 - probability) / runs) + 1.0 / runs);
    }
    Index total = 0;
    for (const auto& [sequence, count] : counts) total += exact.count(sequence) ? count : 0;
    CHECK(total == runs);  // no sequence outside the support
  }
}

TEST_CASE("rpcholesky meets the expected trace error bound of Chen et al.") {
  // E tr(A − FFᵀ) ≤ (1 + ε)·tr(A − ⟦A⟧_r) once k ≥ r/ε + r·log(1/(εη)), η = tr(A − ⟦A⟧_r)/tr(A).
  const Matrix<double> A = gaussian_kernel(uniform_points(100, 2, 403), 0.5);
  const Vector<double> eigenvalues = Eigen::SelfAdjointEigenSolver<Matrix<double>>(A).eigenvalues().reverse();
  const Index r = 2;
  const double epsilon = 0.5, tail = eigenvalues.tail(A.rows() - r).sum(), eta = tail / A.trace();
  const auto k = static_cast<Index>(std::ceil(r / epsilon + r * std::log(1 / (epsilon * eta))));
  REQUIRE(k <= 12);
  const double bound = (1 + epsilon) * tail;
  const Index runs = 300;
  for (Index block : {Index{1}, Index{4}, Index{16}}) {
    CAPTURE(block);
    double sum = 0, sum_squares = 0;
    for (Index seed = 0; seed < runs; ++seed) {
      CountingPsd matrix(A);
      RpcholeskyOptions options;
      options.block_size = block;
      options.seed = static_cast<std::uint64_t>(seed);
      const RpcholeskyResult result = rpcholesky(matrix.oracle(), k, options);
      const double error = A.trace() - result.factor.squaredNorm();
      sum += error;
      sum_squares += error * error;
    }
    const double mean = sum / runs, variance = (sum_squares / runs - mean * mean) * runs / (runs - 1.0);
    CAPTURE(mean);
    CAPTURE(bound);
    CHECK(mean + 3 * std::sqrt(variance / runs) <= bound);
  }
}

TEST_CASE("rpcholesky on an exactly low-rank matrix: F Fᵀ = A, fill pivots, no NaN") {
  const Matrix<double> X = random_matrix<double>(40, 4, 404);
  Matrix<double> A = X * X.transpose();
  A.row(5).setZero();
  A.col(5).setZero();  // a zero diagonal entry is never sampled
  for (Index block : {Index{1}, Index{16}}) {
    CAPTURE(block);
    CountingPsd matrix(A);
    RpcholeskyOptions options;
    options.block_size = block;
    options.seed = 7;
    const RpcholeskyResult result = rpcholesky(matrix.oracle(), 10, options);
    CHECK(result.sampled == 4);
    CHECK(result.factor.allFinite());
    CHECK(relative_difference(Matrix<double>(result.factor * result.factor.transpose()), A) < 1e-10);
    CHECK(result.factor.rightCols(6).isZero(0));
    CHECK(distinct_within(result.pivots, 40));
    CHECK(result.pivots.size() == 10);
    CHECK(std::find(result.pivots.begin(), result.pivots.begin() + 4, 5) == result.pivots.begin() + 4);
    CHECK(result.entries == 5 * 40);
    CHECK(result.entries == matrix.entries());
    // The fill pivots are the unchosen indices in ascending order.
    std::vector<Index> unchosen;
    for (Index i = 0; i < 40 && unchosen.size() < 6; ++i)
      if (std::find(result.pivots.begin(), result.pivots.begin() + 4, i) == result.pivots.begin() + 4)
        unchosen.push_back(i);
    CHECK(std::vector<Index>(result.pivots.begin() + 4, result.pivots.end()) == unchosen);
  }
  SUBCASE("a zero matrix: only fill pivots") {
    CountingPsd matrix(Matrix<double>::Zero(9, 9));
    const RpcholeskyResult result = rpcholesky(matrix.oracle(), 9, RpcholeskyOptions{});
    CHECK(result.sampled == 0);
    CHECK(result.factor.isZero(0));
    CHECK(result.pivots == std::vector<Index>{0, 1, 2, 3, 4, 5, 6, 7, 8});
    CHECK(result.entries == 9);
  }
  SUBCASE("k = N on a full-rank matrix") {
    const Matrix<double> B = gaussian_kernel(uniform_points(7, 2, 405), 0.05);
    CountingPsd matrix(B);
    const RpcholeskyResult result = rpcholesky(matrix.oracle(), 7, RpcholeskyOptions{});
    CHECK(result.sampled == 7);
    CHECK(relative_difference(Matrix<double>(result.factor * result.factor.transpose()), B) < 1e-12);
  }
}

TEST_CASE("rpcholesky rejects bad arguments") {
  Matrix<double> A = Matrix<double>::Identity(5, 5);
  CountingPsd good(A);
  CHECK(throws_naming([&] { rpcholesky(good.oracle(), 0, RpcholeskyOptions{}); }, "k = 0"));
  CHECK(throws_naming([&] { rpcholesky(good.oracle(), 6, RpcholeskyOptions{}); }, "k = 6"));
  RpcholeskyOptions options;
  options.block_size = 0;
  CHECK(throws_naming([&] { rpcholesky(good.oracle(), 2, options); }, "block_size = 0"));
  options = RpcholeskyOptions{};
  options.tolerance = std::numeric_limits<double>::quiet_NaN();
  CHECK(throws_naming([&] { rpcholesky(good.oracle(), 2, options); }, "tolerance = nan"));
  A(3, 3) = -1;
  CountingPsd negative(A);
  CHECK(
      throws_naming([&] { rpcholesky(negative.oracle(), 2, RpcholeskyOptions{}); }, "diagonal entry 3 = -1"));
}

// =========================================================================================================
// Maxvol

TEST_CASE("maxvol swaps only raise |det A_I| and end on a dominant submatrix") {
  const Matrix<double> A = random_matrix<double>(50, 6, 501);
  for (bool from_lu : {true, false}) {
    CAPTURE(from_lu);
    const std::vector<Index> start = from_lu ? std::vector<Index>{} : std::vector<Index>{0, 1, 2, 3, 4, 5};
    MaxvolOptions options;
    const MaxvolResult result = maxvol(A, options, start);
    CHECK(result.status == MaxvolStatus::dominant);
    CHECK(distinct_within(result.rows, 50));
    CHECK(largest_coefficient(A, result.rows) <= 1 + options.tolerance + 1e-12);
    if (!from_lu) CHECK(result.swaps.size() >= 2);
    // Replay the swaps: each multiplies |det A_I| by its factor > 1 + δ.
    std::vector<Index> rows = result.start_rows;
    double product = 1;
    for (const MaxvolSwap& swap : result.swaps) {
      const double before = volume(A, rows);
      CHECK(rows[static_cast<std::size_t>(swap.position)] == swap.removed);
      rows[static_cast<std::size_t>(swap.position)] = swap.added;
      CHECK(swap.factor > 1 + options.tolerance);
      CHECK(volume(A, rows) / before == doctest::Approx(swap.factor).epsilon(1e-10));
      product *= swap.factor;
    }
    CHECK(rows == result.rows);
    CHECK(result.growth == doctest::Approx(product).epsilon(1e-12));
    CHECK(volume(A, result.rows) / volume(A, result.start_rows) ==
          doctest::Approx(result.growth).epsilon(1e-10));
  }
}

TEST_CASE("maxvol is within the Hadamard factor of the maximum volume") {
  // A dominant A_I (|A A_I⁻¹| ≤ 1 + δ) bounds every r×r volume: |det A_K| ≤ (√r(1 + δ))^r·|det A_I|.
  const Index n = 10, r = 3;
  const Matrix<double> A = random_matrix<double>(n, r, 502);
  std::vector<Index> best;
  double largest = 0;
  for (const std::vector<Index>& rows : subsets(n, r)) {
    if (volume(A, rows) > largest) {
      largest = volume(A, rows);
      best = rows;
    }
  }
  for (double delta : {0.0, 0.05, 0.5}) {
    CAPTURE(delta);
    MaxvolOptions options;
    options.tolerance = delta;
    const MaxvolResult result = maxvol(A, options);
    CHECK(largest <=
          std::pow(std::sqrt(double(r)) * (1 + delta), double(r)) * volume(A, result.rows) * (1 + 1e-12));
    // A maximum-volume submatrix is dominant: started there, maxvol takes no swap.
    CHECK(maxvol(A, options, best).swaps.empty());
  }
}

TEST_CASE("maxvol reports the swap limit and singular matrices") {
  const Matrix<double> A = random_matrix<double>(30, 4, 503);
  MaxvolOptions options;
  options.max_swaps = 0;
  const MaxvolResult limited = maxvol(A, options, {0, 1, 2, 3});
  CHECK(limited.status == MaxvolStatus::swap_limit);
  CHECK(limited.rows == std::vector<Index>{0, 1, 2, 3});
  const Matrix<double> rank_two = random_low_rank<double>(30, 4, 2, 504);
  const MaxvolResult singular = maxvol(rank_two, MaxvolOptions{});
  CHECK(singular.status == MaxvolStatus::singular);
  CHECK(singular.swaps.empty());
  CHECK(rect_maxvol(rank_two, 8, MaxvolOptions{}).rows.size() == 4);
  CHECK(to_string(MaxvolStatus::swap_limit) == "swap-limit");
  SUBCASE("N = r: every row") {
    const MaxvolResult square = maxvol(random_matrix<double>(5, 5, 505), MaxvolOptions{});
    CHECK(std::set<Index>(square.rows.begin(), square.rows.end()).size() == 5);
    CHECK(square.swaps.empty());
  }
}

TEST_CASE("rect_maxvol adds the rows of the dense greedy rule") {
  const Matrix<double> A = random_matrix<double>(60, 5, 506);
  const MaxvolResult square = maxvol(A, MaxvolOptions{});
  for (Index count : {Index{5}, Index{6}, Index{12}, Index{60}}) {
    CAPTURE(count);
    const MaxvolResult result = rect_maxvol(A, count, MaxvolOptions{});
    CHECK(static_cast<Index>(result.rows.size()) == count);
    CHECK(distinct_within(result.rows, 60));
    CHECK(std::equal(square.rows.begin(), square.rows.end(), result.rows.begin()));
    if (count <= 12) CHECK(result.rows == greedy_rect_rows(A, square.rows, count));
  }
  CHECK(throws_naming([&] { rect_maxvol(A, 4, MaxvolOptions{}); }, "row_count = 4"));
  CHECK(throws_naming([&] { rect_maxvol(A, 61, MaxvolOptions{}); }, "row_count = 61"));
}

TEST_CASE("alternating maxvol recovers a rank-r matrix with A(:,J) A(I,J)⁺ A(I,:)") {
  const Index r = 4;
  const Matrix<double> A = random_low_rank<double>(45, 38, r, 507);
  for (Index row_count : {Index{4}, Index{9}}) {
    CAPTURE(row_count);
    CountingMatrix matrix(A);
    const AlternatingMaxvolResult result =
        alternating_maxvol(matrix.oracle(), {3, 17, 20, 31}, row_count, MaxvolOptions{});
    CHECK(result.status == MaxvolStatus::dominant);
    CHECK(static_cast<Index>(result.rows.size()) == row_count);
    CHECK(distinct_within(result.rows, 45));
    CHECK(distinct_within(result.cols, 38));
    CHECK(result.converged);
    CHECK(result.entries == matrix.entries());
    CHECK(matrix.column_calls == result.sweeps * r);
    CHECK(matrix.row_calls == result.sweeps * r);  // a column step after every row step that converged
    CHECK(cross_error(A, result.rows, result.cols) < 1e-9);
    // The square rows are dominant in A(:, J), the columns in A(I_sq, :).
    Matrix<double> C(45, r), R(38, r);
    for (Index t = 0; t < r; ++t) C.col(t) = A.col(result.cols[static_cast<std::size_t>(t)]);
    for (Index t = 0; t < r; ++t) R.col(t) = A.row(result.rows[static_cast<std::size_t>(t)]).transpose();
    CHECK(largest_coefficient(C, {result.rows.begin(), result.rows.begin() + r}) <= 1.01 + 1e-10);
    CHECK(largest_coefficient(R, result.cols) <= 1.01 + 1e-10);
  }
  SUBCASE("one sweep: the row step only") {
    CountingMatrix matrix(A);
    MaxvolOptions options;
    options.sweeps = 1;
    const AlternatingMaxvolResult result = alternating_maxvol(matrix.oracle(), {3, 17, 20, 31}, 6, options);
    CHECK(result.sweeps == 1);
    CHECK(result.cols == std::vector<Index>{3, 17, 20, 31});
    CHECK(result.entries == 45 * r);
  }
  SUBCASE("more columns than the rank: singular") {
    CountingMatrix matrix(A);
    const AlternatingMaxvolResult result =
        alternating_maxvol(matrix.oracle(), {0, 1, 2, 3, 4}, 5, MaxvolOptions{});
    CHECK(result.status == MaxvolStatus::singular);
  }
}

TEST_CASE("alternating maxvol never decreases the volume of its square core") {
  const Matrix<double> A = gaussian_kernel(uniform_points(40, 2, 508), 0.3).leftCols(33);
  std::vector<Index> cols{0, 1, 2, 3, 4, 5};
  double previous = 0;
  for (Index sweeps = 1; sweeps <= 4; ++sweeps) {
    CountingMatrix matrix(A);
    MaxvolOptions options;
    options.sweeps = sweeps;
    const AlternatingMaxvolResult result = alternating_maxvol(matrix.oracle(), cols, 6, options);
    Matrix<double> core(6, 6);
    for (Index s = 0; s < 6; ++s)
      for (Index t = 0; t < 6; ++t)
        core(s, t) = A(result.rows[static_cast<std::size_t>(s)], result.cols[static_cast<std::size_t>(t)]);
    const double current = std::abs(core.determinant());
    CHECK(current >= previous * (1 - 1e-12));
    previous = current;
  }
}

TEST_CASE("maxvol rejects bad arguments") {
  const Matrix<double> A = random_matrix<double>(6, 3, 509);
  CHECK(throws_naming([&] { maxvol(random_matrix<double>(2, 3, 1), MaxvolOptions{}); }, "needs N >= r >= 1"));
  CHECK(throws_naming([&] { maxvol(A, MaxvolOptions{}, {0, 1}); }, "2 start rows given for r = 3"));
  CHECK(throws_naming([&] { maxvol(A, MaxvolOptions{}, {0, 1, 1}); }, "index 1 appears twice"));
  MaxvolOptions options;
  options.tolerance = -0.5;
  CHECK(throws_naming([&] { maxvol(A, options); }, "tolerance = -0.5"));
  options = MaxvolOptions{};
  options.sweeps = 0;
  CountingMatrix matrix(random_matrix<double>(6, 5, 510));
  CHECK(throws_naming([&] { alternating_maxvol(matrix.oracle(), {0, 1}, 2, options); }, "sweeps = 0"));
  CHECK(throws_naming(
      [&] {
        alternating_maxvol(matrix.oracle(), {0, 5}, 2, MaxvolOptions{});
      },
      "index 5 is outside"));
  CHECK(throws_naming(
      [&] {
        alternating_maxvol(matrix.oracle(), {0, 1}, 7, MaxvolOptions{});
      },
      "row_count = 7"));
}

// =========================================================================================================
// Farthest-point sampling and Q-DEIM

TEST_CASE("farthest_point_sampling equals the brute-force O(N²m) rule") {
  SUBCASE("random points") {
    const Matrix<double> X = random_matrix<double>(41, 3, 601);
    for (Index m : {Index{1}, Index{10}, Index{41}})
      for (Index start : {Index{0}, Index{17}, Index{40}}) {
        CAPTURE(m);
        CAPTURE(start);
        CHECK(farthest_point_sampling(X, m, start) == brute_force_fps(X, m, start));
      }
  }
  SUBCASE("duplicated points: every distinct point first, then the rest ascending") {
    const Matrix<double> distinct = random_matrix<double>(6, 2, 602);
    Matrix<double> X(23, 2);
    for (Index i = 0; i < 23; ++i) X.row(i) = distinct.row((i * 5) % 6);
    const std::vector<Index> order = farthest_point_sampling(X, 23, 4);
    CHECK(order == brute_force_fps(X, 23, 4));
    std::set<std::vector<double>> seen;
    for (Index t = 0; t < 6; ++t)
      seen.insert({X(order[static_cast<std::size_t>(t)], 0), X(order[static_cast<std::size_t>(t)], 1)});
    CHECK(seen.size() == 6);
    CHECK(std::is_sorted(order.begin() + 6, order.end()));
  }
  CHECK(throws_naming([] { farthest_point_sampling(Matrix<double>::Zero(4, 2), 5, 0); }, "m = 5"));
  CHECK(throws_naming([] { farthest_point_sampling(Matrix<double>::Zero(4, 2), 2, 4); }, "start = 4"));
}

TEST_CASE("qdeim equals the dense pivoted QR and meets the Drmač–Gugercin bound") {
  for (Index m : {Index{1}, Index{7}, Index{20}}) {
    CAPTURE(m);
    const Index n = 50;
    const Matrix<double> U = orthonormal_columns(n, m, 700 + static_cast<std::uint64_t>(m));
    const std::vector<Index> rows = qdeim(U);
    CHECK(rows == pivoted_gram_schmidt(U.transpose()));
    CHECK(distinct_within(rows, n));
    Matrix<double> sub(m, m);
    for (Index t = 0; t < m; ++t) sub.row(t) = U.row(rows[static_cast<std::size_t>(t)]);
    const double inverse_norm = 1 / Eigen::JacobiSVD<Matrix<double>>(sub).singularValues()(m - 1);
    const double bound = std::sqrt(double(n - m + 1)) * std::sqrt(std::pow(4.0, double(m)) + 6.0 * m - 1) / 3;
    CHECK(inverse_norm <= bound);
    if (m == 1) {
      Index largest = 0;
      U.col(0).cwiseAbs().maxCoeff(&largest);
      CHECK(rows.front() == largest);  // the first pivot: the largest |U_i1|
    }
  }
  const Matrix<double> square = orthonormal_columns(6, 6, 710);
  const std::vector<Index> all = qdeim(square);
  CHECK(std::set<Index>(all.begin(), all.end()).size() == 6);
  CHECK(throws_naming([] { qdeim(Matrix<double>::Zero(3, 4)); }, "needs N >= m >= 1"));
}
