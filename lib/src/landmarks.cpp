#include "nystrom/landmarks.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <random>
#include <set>

#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"
#include "random.hpp"
#include "searched_landmarks.hpp"

namespace nystrom {

namespace {

constexpr std::array<EnumName<LandmarkStrategy>, 16> strategy_names{{
    {LandmarkStrategy::segment_means, "segment-means"},
    {LandmarkStrategy::window_pool, "window-pool"},
    {LandmarkStrategy::step, "step"},
    {LandmarkStrategy::random, "random"},
    {LandmarkStrategy::top_sum, "top-sum"},
    {LandmarkStrategy::top_abs, "top-abs"},
    {LandmarkStrategy::top_embed, "top-embed"},
    {LandmarkStrategy::kmeans, "kmeans"},
    {LandmarkStrategy::given, "given"},
    {LandmarkStrategy::cross, "cross"},
    {LandmarkStrategy::softmax_cross, "softmax-cross"},
    {LandmarkStrategy::maxvol, "maxvol"},
    {LandmarkStrategy::rpcholesky, "rpcholesky"},
    {LandmarkStrategy::farthest_point, "farthest-point"},
    {LandmarkStrategy::farthest_point_means, "farthest-point-means"},
    {LandmarkStrategy::oracle_qdeim, "oracle-qdeim"},
}};

constexpr std::array<EnumName<WindowGrid>, 2> window_grid_names{{
    {WindowGrid::aspect, "aspect"},
    {WindowGrid::square, "square"},
}};

/// The tokens a pooling window must hold, as a message names them: "N = n", or "N - prefix_tokens = n - p =
/// n − p" after a prefix.
struct HeldTokens {
  Index n = 0, prefix = 0;
};

std::ostream& operator<<(std::ostream& out, const HeldTokens& held) {
  if (held.prefix > 0)
    return out << "N - prefix_tokens = " << held.n << " - " << held.prefix << " = " << held.n - held.prefix;
  return out << "N = " << held.n;
}

/// Throws unless every index lies in [0, n) and none repeats; `what` names the list in the message.
void require_valid_indices(const std::vector<Index>& indices, Index n, const std::string& what) {
  std::set<Index> seen;
  for (Index index : indices) {
    require(index >= 0 && index < n, "landmarks: ", what, " index ", index, " is outside [0, ", n, ")");
    require(seen.insert(index).second, "landmarks: ", what, " index ", index, " appears twice");
  }
}

/// The rows of X listed in `indices`, in that order.
template <class Tokens>
Matrix<typename Tokens::Scalar> gather_rows(const Tokens& X, const std::vector<Index>& indices) {
  Matrix<typename Tokens::Scalar> out(static_cast<Index>(indices.size()), X.cols());
  for (std::size_t r = 0; r < indices.size(); ++r) out.row(static_cast<Index>(r)) = X.row(indices[r]);
  return out;
}

/// The tokens a selection strategy may still choose: every index in [0, n) not forced, ascending.
std::vector<Index> unforced_tokens(Index n, const std::vector<Index>& forced) {
  const std::set<Index> excluded(forced.begin(), forced.end());
  std::vector<Index> free;
  for (Index t = 0; t < n; ++t)
    if (!excluded.count(t)) free.push_back(t);
  return free;
}

/// The per-row score a top-* strategy ranks by (CURformer "Sum", "Abs", "Embed"), in double.
template <class Tokens>
Vector<double> row_scores(const Tokens& X, const LandmarkOptions& options) {
  const Matrix<double> x = X.template cast<double>();
  switch (options.strategy) {
    case LandmarkStrategy::top_sum:
      return x.rowwise().sum();
    case LandmarkStrategy::top_abs:
      return x.cwiseAbs().rowwise().sum();
    default:
      return x.col(options.embed_column);
  }
}

/// The tokens every selection includes: options.forced and the prefix tokens 0 … p − 1, ascending, each once.
std::vector<Index> forced_tokens(const LandmarkOptions& options) {
  std::set<Index> forced(options.forced.begin(), options.forced.end());
  for (Index t = 0; t < options.prefix_tokens; ++t) forced.insert(t);
  return {forced.begin(), forced.end()};
}

/// Selection (docs/mathematics.md §5): the forced tokens (forced_tokens) plus m − |forced| tokens of X chosen
/// by the strategy among the others; returned ascending. `engine` drives the random strategy.
template <class Tokens>
std::vector<Index> select_rows(const Tokens& X, const LandmarkOptions& options, std::mt19937_64& engine) {
  const std::vector<Index> forced = forced_tokens(options);
  std::vector<Index> free = unforced_tokens(X.rows(), forced);
  const auto wanted = static_cast<std::size_t>(options.count) - forced.size();
  std::vector<Index> chosen = forced;
  switch (options.strategy) {
    case LandmarkStrategy::step: {
      // CURformer "Step": every ⌊n/k⌋-th of the n free tokens, starting with the first.
      const std::size_t stride = wanted > 0 ? free.size() / wanted : 1;
      for (std::size_t r = 0; r < wanted; ++r) chosen.push_back(free[r * stride]);
      break;
    }
    case LandmarkStrategy::random: {
      // Partial Fisher–Yates shuffle: `wanted` distinct tokens, uniformly.
      for (std::size_t r = 0; r < wanted; ++r) {
        const auto pick =
            r + static_cast<std::size_t>(detail::uniform_below(engine, static_cast<Index>(free.size() - r)));
        std::swap(free[r], free[pick]);
        chosen.push_back(free[r]);
      }
      break;
    }
    default: {
      // Top-m by score, ties broken by the lower index.
      const Vector<double> score = row_scores(X, options);
      std::partial_sort(
          free.begin(), free.begin() + static_cast<std::ptrdiff_t>(wanted), free.end(),
          [&](Index a, Index b) { return score(a) > score(b) || (score(a) == score(b) && a < b); });
      chosen.insert(chosen.end(), free.begin(), free.begin() + static_cast<std::ptrdiff_t>(wanted));
      break;
    }
  }
  std::sort(chosen.begin(), chosen.end());
  return chosen;
}

/// Squared Euclidean distance between row i of X and row c of C, in double.
double squared_distance(const Matrix<double>& X, Index i, const Matrix<double>& C, Index c) {
  return (X.row(i) - C.row(c)).squaredNorm();
}

/// Centroids of seeded k-means++ (Arthur & Vassilvitskii 2007) refined by at most `iterations` Lloyd steps,
/// stopping when the assignment no longer changes; at that point every centroid is the mean of the rows
/// nearest to it. Computed in double on a column-major copy of the tokens (the same sums for either layout of
/// `tokens`). An empty cluster keeps its centroid.
template <class Tokens>
Matrix<typename Tokens::Scalar> kmeans_centroids(const Tokens& tokens, Index m, int iterations,
                                                 std::mt19937_64& engine) {
  const Matrix<double> X = tokens.template cast<double>();
  const Index n = X.rows();
  Matrix<double> centroids(m, X.cols());
  // k-means++ seeding: the first centre uniformly, each next one with probability ∝ D(x)², the squared
  // distance to the nearest centre so far.
  centroids.row(0) = X.row(detail::uniform_below(engine, n));
  Vector<double> nearest(n);
  for (Index i = 0; i < n; ++i) nearest(i) = squared_distance(X, i, centroids, 0);
  for (Index c = 1; c < m; ++c) {
    const double total = nearest.sum();
    Index pick = 0;
    if (total > 0) {
      double target = detail::uniform_unit(engine) * total;
      for (Index i = 0; i < n; ++i) {
        if (nearest(i) <= 0) continue;
        pick = i;  // the last row with D > 0 also absorbs rounding in the running sum
        target -= nearest(i);
        if (target < 0) break;
      }
    } else {
      pick = detail::uniform_below(engine, n);  // fewer distinct rows than m: any row
    }
    centroids.row(c) = X.row(pick);
    for (Index i = 0; i < n; ++i) nearest(i) = std::min(nearest(i), squared_distance(X, i, centroids, c));
  }
  // Lloyd iterations.
  std::vector<Index> assignment(static_cast<std::size_t>(n), -1);
  for (int it = 0; it < iterations; ++it) {
    bool changed = false;
    for (Index i = 0; i < n; ++i) {
      Index best = 0;
      double best_distance = squared_distance(X, i, centroids, 0);
      for (Index c = 1; c < m; ++c) {
        const double distance = squared_distance(X, i, centroids, c);
        if (distance < best_distance) best = c, best_distance = distance;
      }
      changed |= assignment[static_cast<std::size_t>(i)] != best;
      assignment[static_cast<std::size_t>(i)] = best;
    }
    if (!changed) break;
    Matrix<double> sums = Matrix<double>::Zero(m, X.cols());
    Vector<double> counts = Vector<double>::Zero(m);
    for (Index i = 0; i < n; ++i) {
      sums.row(assignment[static_cast<std::size_t>(i)]) += X.row(i);
      counts(assignment[static_cast<std::size_t>(i)]) += 1;
    }
    for (Index c = 0; c < m; ++c)
      if (counts(c) > 0) centroids.row(c) = sums.row(c) / counts(c);
  }
  return centroids.template cast<typename Tokens::Scalar>();
}

}  // namespace

std::string to_string(LandmarkStrategy strategy) {
  return name_of(strategy, strategy_names);
}

LandmarkStrategy landmark_strategy_from_string(const std::string& name) {
  return parse(name, strategy_names, "landmark strategy");
}

std::string to_string(WindowGrid grid) {
  return name_of(grid, window_grid_names);
}

WindowGrid window_grid_from_string(const std::string& name) {
  return parse(name, window_grid_names, "window grid");
}

bool is_selection(LandmarkStrategy strategy) {
  switch (strategy) {
    case LandmarkStrategy::step:
    case LandmarkStrategy::random:
    case LandmarkStrategy::top_sum:
    case LandmarkStrategy::top_abs:
    case LandmarkStrategy::top_embed:
    case LandmarkStrategy::given:
    case LandmarkStrategy::cross:
    case LandmarkStrategy::softmax_cross:
    case LandmarkStrategy::maxvol:
    case LandmarkStrategy::farthest_point:
    case LandmarkStrategy::oracle_qdeim:
      return true;
    default:
      return false;
  }
}

bool is_searched(LandmarkStrategy strategy) {
  switch (strategy) {
    case LandmarkStrategy::cross:
    case LandmarkStrategy::softmax_cross:
    case LandmarkStrategy::maxvol:
    case LandmarkStrategy::rpcholesky:
    case LandmarkStrategy::farthest_point:
    case LandmarkStrategy::farthest_point_means:
    case LandmarkStrategy::oracle_qdeim:
      return true;
    default:
      return false;
  }
}

bool uses_kernel(LandmarkStrategy strategy) {
  return is_searched(strategy) && strategy != LandmarkStrategy::farthest_point &&
         strategy != LandmarkStrategy::farthest_point_means;
}

std::array<Index, 2> closest_square_factors(Index m) {
  require(m >= 1, "closest_square_factors: m = ", m, " must be >= 1");
  auto a = static_cast<Index>(std::sqrt(static_cast<double>(m)));
  while (a * a > m) --a;
  while ((a + 1) * (a + 1) <= m) ++a;
  while (m % a != 0) --a;
  return {a, m / a};
}

std::array<Index, 2> pooling_grid(Index h, Index w, Index cells, WindowGrid grid) {
  require(h >= 1 && w >= 1, "pooling_grid: window ", h, "x", w, " must have sides >= 1");
  require(cells >= 1, "pooling_grid: cells = ", cells, " must be >= 1");
  if (grid == WindowGrid::square) return closest_square_factors(cells);
  // Aspect: the factorization gh·gw = cells with the smallest |log(gh/gw) − log(h/w)|, ties to the squarer
  // grid (larger min(gh, gw)), then gh ≤ gw.
  const double target = std::log(static_cast<double>(h) / static_cast<double>(w));
  std::array<Index, 2> best{0, 0};
  double best_distance = 0;
  for (Index gh = 1; gh <= cells; ++gh) {
    if (cells % gh != 0) continue;
    const Index gw = cells / gh;
    const double distance = std::abs(std::log(static_cast<double>(gh) / static_cast<double>(gw)) - target);
    const double tie = 1e-12 * (1 + distance);
    const bool better = best[0] == 0 || distance < best_distance - tie ||
                        (distance <= best_distance + tie && std::min(gh, gw) > std::min(best[0], best[1]));
    if (better) {
      best = {gh, gw};
      best_distance = distance;
    }
  }
  return best;
}

Index LandmarkOptions::query_count() const {
  return oversampling == 1 ? count : static_cast<Index>(std::ceil(oversampling * static_cast<double>(count)));
}

void LandmarkOptions::validate(Index n, Index d) const {
  const std::string name = to_string(strategy);
  require(n >= 1, "landmarks: no tokens (N = ", n, ")");
  require(count >= 1, "landmarks: m = ", count, " must be >= 1");
  require(count <= n, "landmarks: m = ", count, " exceeds the number of tokens N = ", n);
  require(std::isfinite(oversampling) && oversampling >= 1, "landmarks: oversampling = ", oversampling,
          " must be finite and >= 1");
  require(oversampling == 1 || strategy != LandmarkStrategy::given,
          "landmarks: oversampling applies to every strategy but given (whose q_indices say the query rows)");
  require(oversampling <= static_cast<double>(n) / static_cast<double>(count) && query_count() <= n,
          "landmarks: oversampling = ", oversampling, " asks for ", oversampling * static_cast<double>(count),
          " query landmarks, more than N = ", n);
  require(prefix_tokens >= 0, "landmarks: prefix_tokens = ", prefix_tokens, " must be >= 0");
  if (strategy != LandmarkStrategy::given)
    require(prefix_tokens < count, "landmarks: prefix_tokens = ", prefix_tokens, " must be < m = ", count,
            " (the other N - prefix_tokens tokens need at least one landmark)");
  require(!is_searched(strategy) || (forced.empty() && prefix_tokens == 0), "landmarks: ", name,
          " searches all N tokens: it takes no forced or prefix tokens");
  if (!forced.empty()) {
    require(is_selection(strategy) && strategy != LandmarkStrategy::given,
            "landmarks: forced indices apply to step, random and top-* selection, not to ", name);
    require_valid_indices(forced, n, "forced");
    const auto total = forced_tokens(*this).size();
    require(static_cast<Index>(total) <= count, "landmarks: ", total, " forced indices",
            prefix_tokens > 0 ? " (prefix tokens included)" : "", " exceed m = ", count);
  }
  if (strategy == LandmarkStrategy::given) {
    require(static_cast<Index>(q_indices.size()) == count, "landmarks: given ", q_indices.size(),
            " q_indices, expected m = ", count);
    require_valid_indices(q_indices, n, "q_indices");
    require(k_indices.empty() || static_cast<Index>(k_indices.size()) == count, "landmarks: given ",
            k_indices.size(), " k_indices, expected m = ", count, " (or none)");
    require_valid_indices(k_indices, n, "k_indices");
  }
  if (strategy == LandmarkStrategy::window_pool) {
    require(window[0] >= 0 && window[1] >= 0, "landmarks: window ", window[0], "x", window[1],
            " has a negative side");
    const Index tokens = n - prefix_tokens;
    const HeldTokens held{n, prefix_tokens};
    if (window[0] == 0 && window[1] == 0) {
      const auto side = static_cast<Index>(std::llround(std::sqrt(static_cast<double>(tokens))));
      require(side * side == tokens, "landmarks: ", held,
              " is not a square; window-pool needs the token grid h x w (LandmarkOptions::window; in a dump, "
              "the layer's `window` attribute)");
    } else {
      require(window_holds(window, tokens), "landmarks: window ", window[0], "x", window[1],
              " does not hold ", held, " tokens");
    }
  }
  if (strategy == LandmarkStrategy::top_embed)
    require(embed_column >= 0 && embed_column < d, "landmarks: embed_column = ", embed_column,
            " is outside [0, d = ", d, ")");
  if (strategy == LandmarkStrategy::kmeans)
    require(kmeans_iterations >= 0, "landmarks: kmeans_iterations = ", kmeans_iterations, " must be >= 0");
}

namespace {

/// segment_means for X of either layout. Each mean is summed in double over 16 interleaved partial sums (row
/// i of a segment into sum i mod 16, the remainder into sum 0, then the 16 added in order), which the
/// compiler vectorizes into independent vector accumulators: over a column's contiguous rows for a
/// column-major X, over a row's contiguous d values for a row-major X. The order of the additions is the same
/// for both layouts, so the means are the same bits. Columns (row-major: the segments) run in parallel from
/// 128K entries (N·d) up: below, a parallel region costs about what it saves; at N = 4096, d = 64 on two
/// threads a PnP-Nystra head took 0.34 ms with parallel means and 0.39–0.43 ms without (`nystrom bench`).
template <class Tokens>
Matrix<typename Tokens::Scalar> segment_means_of(const Tokens& X, Index m) {
  using T = typename Tokens::Scalar;
  const Index n = X.rows(), d = X.cols();
  require(m >= 1 && m <= n, "segment_means: m = ", m, " must lie in [1, N = ", n, "]");
  // Nyströmformer: s = ⌊N/m⌋; the first (s+1)m − N segments have s rows, the rest s+1.
  const Index s = n / m;
  const Index short_segments = (s + 1) * m - n;
  const auto segment_start = [&](Index segment) {
    return segment * s + std::max<Index>(0, segment - short_segments);
  };
  const auto segment_length = [&](Index segment) { return segment < short_segments ? s : s + 1; };
  Matrix<T> means(m, d);
  constexpr int lanes = 16;
  const bool parallel = double(n) * double(d) >= double(1 << 17);
  if constexpr (Tokens::IsRowMajor) {
    // partial(j, k): lane k of column j.
#pragma omp parallel if (parallel)
    {
      Eigen::Matrix<double, Eigen::Dynamic, lanes> partial(d, lanes);
#pragma omp for schedule(static)
      for (Index segment = 0; segment < m; ++segment) {
        const Index begin = segment_start(segment), length = segment_length(segment);
        partial.setZero();
        Index i = 0;
        for (; i + lanes <= length; i += lanes)
          for (int k = 0; k < lanes; ++k)
            partial.col(k) += X.row(begin + i + k).transpose().template cast<double>();
        for (; i < length; ++i) partial.col(0) += X.row(begin + i).transpose().template cast<double>();
        Vector<double> total = Vector<double>::Zero(d);
        for (int k = 0; k < lanes; ++k) total += partial.col(k);
        means.row(segment) = (total / static_cast<double>(length)).transpose().template cast<T>();
      }
    }
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (Index j = 0; j < d; ++j) {
      const T* column = X.col(j).data();
      for (Index segment = 0; segment < m; ++segment) {
        const Index length = segment_length(segment);
        const T* x = column + segment_start(segment);
        double partial[lanes] = {};
        Index i = 0;
        for (; i + lanes <= length; i += lanes)
          for (int k = 0; k < lanes; ++k) partial[k] += static_cast<double>(x[i + k]);
        for (; i < length; ++i) partial[0] += static_cast<double>(x[i]);
        double total = 0;
        for (double p : partial) total += p;
        means(segment, j) = static_cast<T>(total / static_cast<double>(length));
      }
    }
  }
  return means;
}

}  // namespace

template <class T>
Matrix<T> segment_means(const ConstMatrixRef<T>& X, Index m) {
  return segment_means_of(X, m);
}

namespace {

/// window_pool for X of either layout.
template <class Tokens>
Matrix<typename Tokens::Scalar> window_pool_of(const Tokens& X, Index h, Index w, Index m, WindowGrid grid) {
  using T = typename Tokens::Scalar;
  require(h >= 1 && w >= 1 && h * w == X.rows(), "window_pool: window ", h, "x", w,
          " does not hold N = ", X.rows(), " tokens");
  require(m >= 1 && m <= X.rows(), "window_pool: m = ", m, " must lie in [1, N = ", X.rows(), "]");
  const auto [grid_rows, grid_cols] = pooling_grid(h, w, m, grid);
  // Adaptive average pooling (PnP-Nystra code): bin I covers [⌊I·h/gh⌋, ⌈(I+1)·h/gh⌉); bins may overlap.
  const auto bin = [](Index i, Index size, Index bins) {
    return std::array<Index, 2>{i * size / bins, ((i + 1) * size + bins - 1) / bins};
  };
  Matrix<T> pooled(m, X.cols());
  for (Index I = 0; I < grid_rows; ++I) {
    const auto [r0, r1] = bin(I, h, grid_rows);
    for (Index J = 0; J < grid_cols; ++J) {
      const auto [c0, c1] = bin(J, w, grid_cols);
      Vector<double> sum = Vector<double>::Zero(X.cols());
      for (Index r = r0; r < r1; ++r)
        for (Index c = c0; c < c1; ++c) sum += X.row(r * w + c).transpose().template cast<double>();
      pooled.row(I * grid_cols + J) =
          (sum / static_cast<double>((r1 - r0) * (c1 - c0))).transpose().template cast<T>();
    }
  }
  return pooled;
}

/// select_landmarks for Q and K of either layout.
template <class Tokens>
Landmarks<typename Tokens::Scalar> landmarks_of(const Tokens& Q, const Tokens& K,
                                                const LandmarkOptions& options, const Kernel& kernel) {
  using T = typename Tokens::Scalar;
  require(Q.rows() == K.rows() && Q.cols() == K.cols(), "landmarks: Q is ", Q.rows(), "x", Q.cols(),
          " but K is ", K.rows(), "x", K.cols());
  options.validate(Q.rows(), Q.cols());
  // Segment means include every token, so a non-finite token makes a mean non-finite (NaN or ±∞ in the sum):
  // Q and K are scanned only then (the scan cost as much as the means). The other strategies scan first:
  // selection and k-means compare values, which NaN breaks.
  const bool every_token_pooled = options.strategy == LandmarkStrategy::segment_means;
  const auto require_finite_tokens = [&] {
    require_finite(Q, "landmarks: Q");
    require_finite(K, "landmarks: K");
  };
  if (!every_token_pooled) require_finite_tokens();
  const Index n = Q.rows(), m = options.count, p = options.prefix_tokens;
  Landmarks<T> out;
  if (is_searched(options.strategy)) {
    if (uses_kernel(options.strategy)) kernel.validate();
    detail::SearchedLandmarks searched =
        detail::searched_landmarks(Q.template cast<double>(), K.template cast<double>(), options, kernel);
    out.q = searched.q.template cast<T>();
    out.k = searched.k.template cast<T>();
    out.q_indices = std::move(searched.q_indices);
    out.k_indices = std::move(searched.k_indices);
    out.joint_indices = std::move(searched.joint_indices);
    out.entries = searched.entries;
    return out;
  }
  std::mt19937_64 engine(options.seed);
  if (!is_selection(options.strategy)) {
    // Pooling: the p prefix tokens themselves, then count − p landmarks pooled from the other N − p tokens
    // (count = m for K̄, the query count for Q̄).
    const auto pooled = [&](const Tokens& X, Index m) {
      const auto tokens = X.bottomRows(n - p);
      Matrix<T> marks(m, X.cols());
      marks.topRows(p) = X.topRows(p);
      switch (options.strategy) {
        case LandmarkStrategy::segment_means:
          marks.bottomRows(m - p) = segment_means_of(tokens, m - p);
          break;
        case LandmarkStrategy::window_pool: {
          Index h = options.window[0], w = options.window[1];
          if (h == 0 && w == 0)
            h = w = static_cast<Index>(std::llround(std::sqrt(static_cast<double>(n - p))));
          marks.bottomRows(m - p) = window_pool_of(tokens, h, w, m - p, options.window_grid);
          break;
        }
        default:
          marks.bottomRows(m - p) = kmeans_centroids(tokens, m - p, options.kmeans_iterations, engine);
          break;
      }
      return marks;
    };
    out.q = pooled(Q, options.query_count());
    out.k = pooled(K, m);
    if (every_token_pooled && !(all_finite(out.q) && all_finite(out.k))) require_finite_tokens();
    return out;
  }
  switch (options.strategy) {
    case LandmarkStrategy::given:
      out.q_indices = options.q_indices;
      out.k_indices = options.k_indices.empty() ? options.q_indices : options.k_indices;
      break;
    default: {
      // Same indices: scored on Q and shared; different: Q and K each scored on their own rows (CURformer).
      // Oversampled, the query rows are a selection of their own count, drawn from the same seed (random
      // selections are then nested: the key rows are the first m drawn).
      LandmarkOptions queries = options;
      queries.count = options.query_count();
      out.q_indices = select_rows(Q, queries, engine);
      if (options.different_indices) {
        out.k_indices = select_rows(K, options, engine);
      } else if (queries.count != m) {
        std::mt19937_64 again(options.seed);
        out.k_indices = select_rows(Q, options, again);
      } else {
        out.k_indices = out.q_indices;
      }
      break;
    }
  }
  out.q = gather_rows(Q, out.q_indices);
  out.k = gather_rows(K, out.k_indices);
  return out;
}

}  // namespace

template <class T>
Matrix<T> window_pool(const ConstMatrixRef<T>& X, Index h, Index w, Index m, WindowGrid grid) {
  return window_pool_of(X, h, w, m, grid);
}

template <class T>
Landmarks<T> select_landmarks(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                              const LandmarkOptions& options, const Kernel& kernel) {
  return landmarks_of(Q, K, options, kernel);
}

template <class T>
Landmarks<T> select_landmarks(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                              const LandmarkOptions& options, const Kernel& kernel) {
  return landmarks_of(Q, K, options, kernel);
}

template Landmarks<float> select_landmarks<float>(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                                                  const LandmarkOptions&, const Kernel&);
template Landmarks<double> select_landmarks<double>(const ConstMatrixRef<double>&,
                                                    const ConstMatrixRef<double>&, const LandmarkOptions&,
                                                    const Kernel&);
template Landmarks<float> select_landmarks<float>(const ConstRowMajorMap<float>&,
                                                  const ConstRowMajorMap<float>&, const LandmarkOptions&,
                                                  const Kernel&);
template Landmarks<double> select_landmarks<double>(const ConstRowMajorMap<double>&,
                                                    const ConstRowMajorMap<double>&, const LandmarkOptions&,
                                                    const Kernel&);
template Matrix<float> segment_means<float>(const ConstMatrixRef<float>&, Index);
template Matrix<double> segment_means<double>(const ConstMatrixRef<double>&, Index);
template Matrix<float> window_pool<float>(const ConstMatrixRef<float>&, Index, Index, Index, WindowGrid);
template Matrix<double> window_pool<double>(const ConstMatrixRef<double>&, Index, Index, Index, WindowGrid);

}  // namespace nystrom
