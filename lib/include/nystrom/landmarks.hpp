#pragma once
/// @file landmarks.hpp
/// Landmark strategies of docs/mathematics.md §5: pooling strategies (segment means, 2-D window pooling,
/// k-means) return averages; selection strategies (step, random, top-sum, top-abs, top-embed, given indices)
/// return rows of Q and K and their indices. Forced tokens (e.g. a CLS token) are always included by
/// selection strategies.
///
/// Prefix tokens (LandmarkOptions::prefix_tokens = p, e.g. a ViT's class token before its patch window) are
/// the leading p tokens, which are not on the window grid. Every strategy but `given` takes them as landmarks
/// of their own, the first p rows of Q̄ and K̄ (as CURformer's forced tokens), and places the other m − p
/// landmarks on the N − p remaining tokens: segment means of those tokens in m − p segments, window pooling
/// of their h×w window (h·w = N − p) in m − p cells, k-means of them with m − p centroids, or a selection
/// among them (the prefix tokens join the forced ones). `given` uses its indices as they are.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "nystrom/error.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Landmark strategies (docs/mathematics.md §5).
enum class LandmarkStrategy {
  segment_means,  ///< means of contiguous segments, uneven when N % m ≠ 0 (Nyströmformer)
  window_pool,    ///< adaptive average pooling on an h×w token grid (PnP-Nystra code)
  step,           ///< every ⌊N/m⌋-th token (CURformer "Step")
  random,         ///< m tokens without replacement, seeded (CURformer)
  top_sum,        ///< top-m rows by row sum (CURformer "Sum")
  top_abs,        ///< top-m rows by row sum of |x| (CURformer "Abs")
  top_embed,      ///< top-m rows by one embedding column (CURformer "Embed")
  kmeans,         ///< centroids of seeded k-means++ (Nyströmformer limitations)
  given,          ///< user-given indices
  cross,          ///< adaptive cross approximation of G with partial pivoting, 8 probe columns and restarts
                  ///< (ACA+): query rows I and key columns J (Bebendorf 2000; Grasedyck 2005)
  softmax_cross,  ///< cross with pivots on the rows of S = D⁻¹G (row sums estimated from m random columns):
                  ///< aimed at the attention output, which weighs every row of S alike
  maxvol,                ///< cross, then alternating (rectangular) maxvol sweeps toward a dominant G(I, J)
                         ///< (Goreinov et al. 2010; Mikhalev & Oseledets 2018)
  rpcholesky,            ///< randomly pivoted Cholesky on the PSD kernel of the joint tokens [Q; K], shared
                         ///< landmarks (Chen, Epperly, Tropp & Webber 2025; Epperly, Tropp & Webber 2024)
  farthest_point,        ///< farthest-point sampling of the tokens [q_i | k_i], the same rows for Q and K
  farthest_point_means,  ///< means of Q and K over the Voronoi cells of farthest-point centres on [q_i |
                         ///< k_i] (nested: the query landmarks' first m cells are the keys'), for the output
  oracle_qdeim           ///< O(N²d) oracle: Q-DEIM rows and columns of the exact top-m singular vectors of G
                         ///< (Drmač & Gugercin 2016)
};

/// "segment-means", "window-pool", "step", "random", "top-sum", "top-abs", "top-embed", "kmeans", "given",
/// "cross", "softmax-cross", "maxvol", "rpcholesky", "farthest-point", "farthest-point-means",
/// "oracle-qdeim".
std::string to_string(LandmarkStrategy strategy);
/// Inverse of to_string; throws std::invalid_argument naming an unknown strategy.
LandmarkStrategy landmark_strategy_from_string(const std::string& name);
/// True for strategies whose landmarks are rows of Q and K (step, random, top-*, given, cross, softmax-cross,
/// maxvol, farthest-point, oracle-qdeim).
bool is_selection(LandmarkStrategy strategy);
/// True for the strategies that evaluate kernel entries to choose (cross, softmax-cross, maxvol, rpcholesky,
/// oracle-qdeim): select_landmarks reads its kernel only for them.
bool uses_kernel(LandmarkStrategy strategy);
/// True for the strategies that search all N tokens (cross, softmax-cross, maxvol, rpcholesky,
/// farthest-point, farthest-point-means, oracle-qdeim, docs/mathematics.md §9.3): they take no forced or
/// prefix tokens.
bool is_searched(LandmarkStrategy strategy);

/// The pooling grid gh×gw (gh·gw = cells) of window-pool on an h×w window (docs/mathematics.md §5).
enum class WindowGrid {
  aspect,  ///< the factorization whose aspect gh/gw is closest to h/w (in log ratio), ties to the squarer
           ///< grid, then gh ≤ gw: m = 16 on 8×32 gives 2×8; on a square window, the closest-square grid
  square   ///< the closest-square factors, gh ≤ gw, whatever the window (PnP-Nystra's code)
};

/// "aspect", "square".
std::string to_string(WindowGrid grid);
/// Inverse of to_string; throws std::invalid_argument naming an unknown grid.
WindowGrid window_grid_from_string(const std::string& name);

/// Options for select_landmarks.
/// Whether an h×w token grid (h, w ≥ 1) holds exactly `tokens` tokens, decided without forming h·w, which
/// wraps around for sides near 2⁶³.
inline bool window_holds(const std::array<Index, 2>& window, Index tokens) {
  return window[0] >= 1 && window[1] >= 1 && tokens % window[0] == 0 && tokens / window[0] == window[1];
}

struct LandmarkOptions {
  LandmarkStrategy strategy = LandmarkStrategy::segment_means;
  Index count = 16;                ///< m, the number of landmarks (1 ≤ m ≤ N)
  std::uint64_t seed = 0;          ///< seed for random and k-means++
  bool different_indices = false;  ///< selection: choose the rows of Q and K separately, not the same rows
                                   ///< (scored on Q)
  std::vector<Index> forced;       ///< selection: indices always included (counted within m)
  std::vector<Index> q_indices;    ///< given: indices into Q
  std::vector<Index> k_indices;    ///< given: indices into K (empty: the same as q_indices)
  std::array<Index, 2> window{};   ///< window-pool: the h×w grid of the N − prefix_tokens window tokens
                                   ///< (row-major, h·w = N − p); {0, 0}: a square grid, N − p a square
  WindowGrid window_grid = WindowGrid::aspect;  ///< window-pool: the pooling grid of the window
  Index prefix_tokens = 0;     ///< p leading tokens not on the window grid, landmarks of their own for every
                               ///< strategy but `given` (0 ≤ p < m; see the file comment)
  Index embed_column = 0;      ///< top-embed: the embedding column scored
  int kmeans_iterations = 25;  ///< k-means: Lloyd iterations after k-means++ seeding
  /// Query landmarks per key landmark (≥ 1): Q̄ gets p = ⌈oversampling·m⌉ rows and K̄ keeps m, so the core
  /// G_A = κ(Q̄, K̄) is p×m and Ĝ = G_L G_A⁺ G_U a least-squares fit over p landmark rows (Park &
  /// Nakatsukasa, arXiv:2405.06375; docs/mathematics.md §5). Every strategy but `given` takes it.
  double oversampling = 1;

  /// p = ⌈oversampling·m⌉, the number of query landmarks (m where oversampling is 1).
  Index query_count() const;

  /// Throws std::invalid_argument naming the bad value (m = 0, m > N, indices out of range, bad window,
  /// prefix_tokens < 0 or ≥ m, ...).
  void validate(Index n, Index d) const;
};

/// Landmarks Q̄ (p×d, p = m unless oversampled) and K̄ (m×d) and, for selection strategies, the rows they
/// were taken from.
template <class T>
struct Landmarks {
  Matrix<T> q;                   ///< Q̄, p×d (with prefix tokens, its first rows are theirs)
  Matrix<T> k;                   ///< K̄, m×d
  std::vector<Index> q_indices;  ///< rows of Q behind Q̄ (empty for pooling strategies)
  std::vector<Index> k_indices;  ///< rows of K behind K̄ (empty for pooling strategies)
  /// rpcholesky: the rows of [Q; K] behind the shared landmarks Q̄ = K̄ (index < N: a query, else N + a key)
  std::vector<Index> joint_indices;
  double entries = 0;  ///< kernel entries κ(x, y) the selection evaluated (0 for the strategies without)
};

/// The tokens of the extended matrix G̃ = κ([Q̄; Q], [K̄; K]) (docs/mathematics.md §2): landmarks first.
template <class T>
struct ExtendedTokens {
  Matrix<T> queries;  ///< [Q̄; Q], (m+N)×d
  Matrix<T> keys;     ///< [K̄; K], (m+N)×d
};

/// [Q̄; Q] and [K̄; K]; throws std::invalid_argument when the landmarks' dimension differs from d.
template <class T>
ExtendedTokens<T> extended_tokens(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                  const Landmarks<T>& landmarks) {
  require(landmarks.q.cols() == Q.cols() && landmarks.k.cols() == K.cols(),
          "extended tokens: landmark dimension ", landmarks.q.cols(), " differs from d = ", Q.cols());
  ExtendedTokens<T> tokens{Matrix<T>(landmarks.q.rows() + Q.rows(), Q.cols()),
                           Matrix<T>(landmarks.k.rows() + K.rows(), K.cols())};
  tokens.queries << landmarks.q, Q;
  tokens.keys << landmarks.k, K;
  return tokens;
}

/// Landmarks of Q and K (both N×d) by `options` (prefix tokens first where options.prefix_tokens > 0);
/// the strategies that evaluate kernel entries (uses_kernel) evaluate `kernel`'s, O(N·m) of them.
/// Deterministic for a given seed.
template <class T>
Landmarks<T> select_landmarks(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                              const LandmarkOptions& options, const Kernel& kernel);

/// The same on row-major Q and K (C-ordered arrays, heads of a batch), read in place; the same landmarks as
/// for column-major copies of them, bit for bit.
template <class T>
Landmarks<T> select_landmarks(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                              const LandmarkOptions& options, const Kernel& kernel);

/// Segment means of the rows of X (N×d) into m segments: with s = ⌊N/m⌋ the first (s+1)m − N segments have s
/// rows, the rest s+1 (Nyströmformer; docs/mathematics.md §5).
template <class T>
Matrix<T> segment_means(const ConstMatrixRef<T>& X, Index m);

/// Adaptive average pooling of the rows of X (tokens t = r·w + c on an h×w grid) to the gh×gw grid
/// pooling_grid(h, w, m, grid), cells row-major; bin I covers rows [⌊I·h/gh⌋, ⌈(I+1)h/gh⌉), likewise columns
/// (bins overlap when the window does not divide evenly, and repeat where gh > h or gw > w).
template <class T>
Matrix<T> window_pool(const ConstMatrixRef<T>& X, Index h, Index w, Index m, WindowGrid grid);

/// The pooling grid {gh, gw}, gh·gw = cells, of an h×w window by `grid` (WindowGrid). Throws
/// std::invalid_argument naming the value for h, w or cells < 1.
std::array<Index, 2> pooling_grid(Index h, Index w, Index cells, WindowGrid grid);

/// The closest-square factorisation m = a·b with a ≤ b and a as large as possible.
std::array<Index, 2> closest_square_factors(Index m);

}  // namespace nystrom
