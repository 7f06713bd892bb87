#pragma once
/// @file selection.hpp
/// Near-optimal landmark selection, kernel-agnostic: the algorithms see a matrix only through an oracle that
/// evaluates whole rows and columns on demand (a kernel matrix κ(Q, K), never formed), and report how many
/// entries they asked for. Within the budget of one PnP-Nystra call, O(N·m) entries:
/// - cross_approximation: adaptive cross approximation with partial pivoting (Bebendorf, Numer. Math. 86
///   (2000); Bebendorf & Rjasanow, Computing 70 (2003)), random probe columns that steer the row choice and
///   restarts when a residual row vanishes (ACA+, Grasedyck, Computing 74 (2005); Börm & Grasedyck's
///   reference rows and columns); the row choice of htool's partialACA. Exact on a rank-r matrix after r
///   crosses (docs/mathematics.md §3, Corollary 2.2).
/// - rpcholesky: randomly pivoted Cholesky on a PSD matrix (Chen, Epperly, Tropp, Webber, Comm. Pure Appl.
///   Math. 2025, arXiv:2207.06503) in the accelerated block form with rejection sampling
///   (Epperly, Tropp, Webber, arXiv:2410.03969, Algorithm 2.2; eepperly/Randomly-Pivoted-Cholesky,
///   rpcholesky.py, accelerated_rpcholesky; BallisticLA/RandLAPACK, rl_rpchol.hh for the block update).
/// - maxvol, rect_maxvol, alternating_maxvol: dominant submatrices (Goreinov, Oseledets, Savostyanov,
///   Tyrtyshnikov, Zamarashkin, "How to find a good submatrix", 2010; Mikhalev & Oseledets, "Rectangular
///   maximum-volume submatrices and their applications", Linear Algebra Appl. 538 (2018); the maxvolpy
///   package's maxvol and rect_maxvol).
/// And, on tokens or exact singular vectors rather than an oracle:
/// - farthest_point_sampling: greedy max-min Euclidean distance (Gonzalez, Theor. Comput. Sci. 38 (1985)).
/// - qdeim: Q-DEIM row selection (Drmač & Gugercin, SIAM J. Sci. Comput. 38 (2016)), an O(N²d) oracle.
/// Everything is computed in double. Bad arguments throw std::invalid_argument naming the value; numerical
/// outcomes (a singular submatrix, a residual exhausted before the requested rank) are reported in the
/// results.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "nystrom/types.hpp"

namespace nystrom {

/// An N×M matrix known by its rows and columns, evaluated on demand (a kernel matrix never formed).
struct EntryOracle {
  Index rows = 0, cols = 0;                          ///< N and M
  std::function<void(Index i, double* out)> row;     ///< out[0..cols) = A(i, :)
  std::function<void(Index j, double* out)> column;  ///< out[0..rows) = A(:, j)
};

/// A symmetric positive semidefinite N×N matrix known by its diagonal and its columns, evaluated on demand.
struct PsdOracle {
  Index size = 0;                                    ///< N
  std::function<void(double* out)> diagonal;         ///< out[0..size) = diag(A)
  std::function<void(Index j, double* out)> column;  ///< out[0..size) = A(:, j)
};

// ---------------------------------------------------------------------------------------------------------
// Adaptive cross approximation

/// Options for cross_approximation.
struct CrossOptions {
  Index start_row = 0;       ///< the first row visited (the caller passes the query of largest norm)
  std::uint64_t seed = 0;    ///< seeds the restarts (std::mt19937_64)
  double tolerance = 1e-12;  ///< a residual row vanishes when max|r| ≤ tolerance·(largest |pivot| so far);
                             ///< about 4500·eps: rounding in r grows with the rank and the pivots' growth
  std::optional<Index> max_restarts;  ///< restarts allowed (≥ 0); empty: `rank`
  std::vector<double> row_scale;      ///< empty, or N finite weights w > 0: pivots are chosen on diag(w)·A
  Index probes = 8;  ///< p: random probe columns (≥ 0, capped at M) whose residuals steer the row choice
                     ///< towards blocks the pivot chain misses; costs p·N entries and O(N·p) flops per
                     ///< cross; 0: plain ACA with restarts

  /// Throws std::invalid_argument naming the bad value (start_row outside [0, rows), a negative or
  /// non-finite tolerance, max_restarts < 0, row_scale of the wrong length or with a weight ≤ 0 or not
  /// finite, probes < 0).
  void validate(Index rows) const;
};

/// A cross (skeleton) approximation A ≈ U·V on `rank` rows and columns.
struct CrossResult {
  std::vector<Index> rows;  ///< I, the pivot rows in the order chosen (`rank` distinct)
  std::vector<Index> cols;  ///< J, the pivot columns, cols[l] paired with rows[l] (`rank` distinct)
  Matrix<double> u;         ///< N×rank
  Matrix<double> v;         ///< rank×M
  Index crosses = 0;   ///< crosses with a nonzero pivot; the last rank − crosses pairs are fill pairs (zero
                       ///< columns of U, zero rows of V) taken once the residual had vanished
  Index entries = 0;   ///< matrix entries evaluated: M per row, N per column (the probes' p·N included)
  Index restarts = 0;  ///< restarts taken after a vanished residual row (at a probe's row or a random one)
  std::vector<Index> probe_cols;  ///< P, the probe columns in the order drawn (min(probes, M) distinct)
};

/// Adaptive cross approximation with partial pivoting (Bebendorf 2000, Algorithm 1; Bebendorf & Rjasanow
/// 2003) and probe columns (ACA+, Grasedyck 2005) of the N×M matrix A (1 ≤ rank ≤ min(N, M)); with
/// options.row_scale = w the pivots are chosen on D = diag(w)·A and U is returned for A (U_A = diag(w)⁻¹U_D:
/// a cross approximation with fixed indices is equivariant under row scaling, only the pivots change).
///
/// Probes, before the first row: p = min(probes, M) distinct columns P, drawn as estimated_row_sums draws
/// its columns (a partial Fisher–Yates shuffle by uniform_below, random.hpp) from the engine seeded by
/// `seed`, whose later draws are the restarts', and evaluated once (p·N entries). Their residual
/// R_P = D(:,P) − U·V(:,P) is updated after every cross (O(N·p) flops). A probe entry counts when
/// |R_P(x,t)| > tolerance·p_max, the level at which a residual row vanishes (below it an entry is rounding,
/// as in the column of a probe that joined J). The probe row is the unvisited row holding the largest
/// counted entry (ties: smallest row), if any. Probes find a block of A that the pivot chain never reaches
/// although no residual row vanishes (nearly decoupled blocks, as in some attention heads), where restarts
/// never trigger.
///
/// Step l (l crosses so far), at row i (first i = start_row):
/// - residual row r = D(i,:) − U(i,:)V; j = argmax |r_j| over the columns not in J (ties: smallest j).
/// - |r_j| > tolerance·p_max (p_max the largest |pivot| so far, 0 before the first): a cross. Residual
///   column c = D(:,j) − U·V(:,j); U gets c/r_j, V gets r; i joins I and j joins J. The next row is the
///   probe row if its entry exceeds every |c_x| on the unvisited rows, else argmax |c_x| over the unvisited
///   rows (ties: smallest x). (c is the residual before this cross: once a block is exhausted its argmax
///   leads to a vanishing row, and the restart goes to the probe row.)
/// - otherwise the row has vanished. Restart: while fewer than max_restarts restarts were taken and
///   unvisited rows remain, the next row is the probe row, else (no counted probe entry) the u-th unvisited
///   row in ascending order, u = uniform_below(engine, #unvisited) (Grasedyck's random restart). Once
///   restarts are spent or no unvisited row remains, the residual counts as vanished and the approximation is
///   filled: this row and every later one whose residual also vanishes becomes a fill pair (i, j) with
///   j = argmax |D(i, j)| over the columns not in J (ties: smallest j), a zero column of U and a zero row of
///   V, so no division; the next row is the smallest unvisited row, else the earliest vanished row not in I
///   (evaluated again). A row whose residual does not vanish still gets a true cross.
/// Always returns exactly `rank` distinct rows and columns; exact on an A of rank r ≤ rank whenever the
/// crosses reach every part of A (a block the visited rows never reach is found only through a probe column
/// or a restart landing in it). Costs at most (2·rank + max_restarts) row and rank + p column evaluations,
/// O(rank·(N + M) + p·N) entries, and O((N + M)·rank² + N·p·rank) flops.
CrossResult cross_approximation(const EntryOracle& oracle, Index rank, const CrossOptions& options);

/// Row sums estimated from sampled columns.
struct RowSumEstimate {
  Vector<double> sums;  ///< N-vector, an unbiased estimate of A·1
  Index entries = 0;    ///< N per sampled column
};

/// An unbiased estimate of the row sums A·1 of the N×M matrix A from `samples` columns j_1..j_s drawn
/// uniformly without replacement by a partial Fisher–Yates shuffle of o = (0, 1, …, M−1) with
/// std::mt19937_64(seed): for l = 0, 1, …, swap o_l with o_{l+u}, u = uniform_below(engine, M − l), and
/// j_{l+1} = o_l. Estimate (M/s)·Σ_l A(:, j_l). Positive for a positive A (an exponential kernel). For
/// cross_approximation's output-aimed pivots pass row_scale w = 1/estimate: pivots on D⁻¹A, softmax's S =
/// D⁻¹G, which weights every query row alike where pivots on G favour the rows of largest entries. O(N·s)
/// entries; 1 ≤ samples ≤ M.
RowSumEstimate estimated_row_sums(const EntryOracle& oracle, Index samples, std::uint64_t seed);

// ---------------------------------------------------------------------------------------------------------
// Randomly pivoted Cholesky

/// Options for rpcholesky.
struct RpcholeskyOptions {
  Index block_size = 16;     ///< b, candidates proposed per round (≥ 1); 1: the sequential algorithm
  std::uint64_t seed = 0;    ///< seeds the proposals and the acceptance tests (std::mt19937_64)
  double tolerance = 1e-13;  ///< the residual is exhausted when Σd ≤ tolerance·tr(A) (the reference code's
                             ///< stoptol); then the remaining pivots are filled (see rpcholesky)

  /// Throws std::invalid_argument naming the bad value (block_size < 1, a negative or non-finite
  /// tolerance).
  void validate() const;
};

/// A Nyström approximation A ≈ F·Fᵀ = A(:,S) A(S,S)⁺ A(S,:) of a PSD matrix.
struct RpcholeskyResult {
  std::vector<Index> pivots;  ///< S, k distinct indices in the order chosen
  Matrix<double> factor;      ///< F, N×k (lower trapezoidal in the pivot order)
  Index sampled = 0;          ///< pivots chosen by sampling; the last k − sampled are fill pivots with zero
                              ///< columns of F, taken once the residual was exhausted
  Index rounds = 0;           ///< proposal rounds
  Index rejections = 0;       ///< proposed candidates rejected (duplicates within a round not counted)
  Index entries = 0;          ///< N for the diagonal plus N per evaluated column: (sampled + 1)·N
};

/// Randomly pivoted Cholesky (Chen, Epperly, Tropp, Webber 2025) on the N×N PSD matrix A, k pivots
/// (1 ≤ k ≤ N), in the accelerated form of Epperly, Tropp, Webber (arXiv:2410.03969, Algorithm 2.2): the
/// same distribution as the sequential algorithm (sample p ∝ d, g = A(:,p) − F F(p,:)ᵀ, F ← [F, g/√g_p],
/// d ← max(d − g², 0)), the residual updates done by blocks.
///
/// A round, with l pivots so far and d the residual diagonal (d = 0 at the pivots):
/// 1. If Σd ≤ tolerance·tr(A), stop sampling. Otherwise draw s = min(block_size, k − l) candidates i.i.d.
///    ∝ d: candidate = the first i with D_i > u·Σd, D the running sums d_0 + … + d_i, u = uniform_unit.
///    Repeated candidates are dropped (the repeat would be rejected with certainty).
/// 2. Rejection sampling, candidates in order: draw v = uniform_unit; with u_c = A_cc − ‖F(c,:)‖² (the
///    residual at the round's start) and h_c its value after the candidates accepted this round (a
///    Cholesky row of the residual block, from the accepted candidates' columns), accept c iff
///    v·u_c < h_c; A(:, c) is evaluated only then. A candidate with u_c ≤ 0 (rounding) gets d_c = 0.
///    An accepted candidate is distributed ∝ the current residual diagonal, so the accepted sequence is
///    that of sequential RPCholesky; the first candidate is always accepted (h = u > 0).
/// 3. Block update: G = A(:,S') − F F(S',:)ᵀ, F_new = G L⁻ᵀ (L the Cholesky factor of the accepted residual
///    block), d ← max(d − rowsum(F_new²), 0), d_S' = 0.
/// Exhausted residual (A of rank < k, or Σd at rounding level): the remaining pivots are the indices not
/// yet chosen, ascending, with zero columns of F (no entries evaluated; F Fᵀ unchanged, never NaN).
/// Entries: (k + 1)·N at most; flops O(N·k² + k²·b). Guarantee (Chen et al.'s trace-norm bound):
/// E tr(A − FFᵀ) ≤ (1 + ε)·tr(A − ⟦A⟧_r) once k ≥ r/ε + r·log(1/(εη)), η = tr(A − ⟦A⟧_r)/tr(A).
/// Throws std::invalid_argument for k outside [1, N], a missing oracle function, or a diagonal entry that
/// is negative or not finite.
RpcholeskyResult rpcholesky(const PsdOracle& oracle, Index k, const RpcholeskyOptions& options);

// ---------------------------------------------------------------------------------------------------------
// Maximum-volume submatrices

/// Options for maxvol, rect_maxvol and alternating_maxvol.
struct MaxvolOptions {
  double tolerance = 0.01;  ///< δ: stop once max|B_ij| ≤ 1 + δ (B = A A_I⁻¹); ≥ 0
  Index max_swaps = 1000;   ///< swaps allowed per maxvol call (≥ 0)
  Index sweeps = 4;         ///< alternating_maxvol: row steps at most (≥ 1)

  /// Throws std::invalid_argument naming the bad value (a negative or non-finite tolerance, max_swaps < 0,
  /// sweeps < 1).
  void validate() const;
};

/// How a maxvol search ended.
enum class MaxvolStatus {
  dominant,    ///< max|A A_I⁻¹| ≤ 1 + δ: A_I is a (1+δ)-dominant submatrix
  swap_limit,  ///< max_swaps swaps taken before the submatrix became dominant
  singular     ///< the start submatrix is singular to rounding (rank(A) < r): no swaps taken
};

/// "dominant", "swap-limit", "singular".
std::string to_string(MaxvolStatus status);

/// One row exchange of maxvol: rows[position] changes from `removed` to `added`, and |det A_I| is
/// multiplied by `factor` = |B(added, position)| > 1 + δ.
struct MaxvolSwap {
  Index position = 0;
  Index removed = 0;
  Index added = 0;
  double factor = 1;
};

/// Rows of a dominant submatrix, with the history of the search.
struct MaxvolResult {
  std::vector<Index> rows;        ///< I: r rows (maxvol) or the requested count (rect_maxvol)
  std::vector<Index> start_rows;  ///< the r rows the search started from
  std::vector<MaxvolSwap> swaps;  ///< every exchange, in order
  double growth = 1;              ///< |det A_I| / |det A_start| = the product of the swaps' factors
  MaxvolStatus status = MaxvolStatus::dominant;
};

/// A (1+δ)-dominant r×r submatrix of the N×r matrix A (N ≥ r ≥ 1) by maxvol (Goreinov et al. 2010,
/// Algorithm 1). Start rows: `start_rows` when given (r distinct indices), else the first r pivot rows of
/// Gaussian elimination with partial pivoting on A (largest |entry| in the column, ties: smallest row).
/// B = A A_I⁻¹ (N×r, B(I,:) = identity); while max|B_ij| > 1 + δ (the largest; ties: smallest j, then i),
/// row i replaces I_j, |det A_I| grows by |B_ij|, and B ← B − B(:,j)(B(i,:) − e_jᵀ)/B_ij (Sherman–Morrison,
/// O(N·r) per swap). Then every r×r submatrix A_K satisfies |det A_K| ≤ (√r·(1+δ))^r·|det A_I| (Hadamard's
/// inequality on B(K,:)). The start is singular when an LU pivot of A_I falls to N·eps·(its largest pivot):
/// status singular. The rows of I are kept exact identity rows of B, so rounding never proposes a row of I.
/// O(N·r²) for the start and B, O(N·r) per swap. Throws std::invalid_argument for N < r, r = 0, non-finite
/// entries, or bad start rows.
MaxvolResult maxvol(const ConstMatrixRef<double>& A, const MaxvolOptions& options,
                    const std::vector<Index>& start_rows = {});

/// `row_count` rows (r ≤ row_count ≤ N) of the N×r matrix A for an oversampled cross approximation
/// (Mikhalev & Oseledets 2018, Algorithm 3): maxvol's r rows, then greedily the row x outside I with the
/// largest ‖A_x A_I⁺‖₂² = a_x (A_IᵀA_I)⁻¹ a_xᵀ (ties: smallest x), updated by the Sherman–Morrison formula
/// in O(N·r) per row. rows = maxvol's rows followed by the added ones; the swaps and status are maxvol's
/// (a singular start returns only its r rows). `start_rows` as for maxvol.
MaxvolResult rect_maxvol(const ConstMatrixRef<double>& A, Index row_count, const MaxvolOptions& options,
                         const std::vector<Index>& start_rows = {});

/// Rows and columns of a cross approximation A ≈ A(:,J) A(I,J)⁺ A(I,:) by alternating maxvol.
struct AlternatingMaxvolResult {
  std::vector<Index> rows;  ///< I: row_count rows; the first |J| are the square maxvol rows of A(:, J)
  std::vector<Index> cols;  ///< J: the columns I was chosen for
  Index sweeps = 0;         ///< row steps taken
  bool converged = false;   ///< a column step left J unchanged
  MaxvolStatus status = MaxvolStatus::dominant;  ///< the last maxvol's (singular ends the sweeps)
  Index entries = 0;                             ///< N·|J| per row step, |J|·M per column step
};

/// Alternating maxvol sweeps on the N×M matrix A (Goreinov et al. 2010, the cross approximation), starting
/// from the columns `start_cols` (k ≥ 1 distinct, k ≤ min(N, M)). Row step: C = A(:, J) (N·k entries),
/// I = rect_maxvol(C, row_count) (started from the previous square rows after the first sweep). Unless it
/// was the last sweep, column step: R = A(I_sq, :) on the k square rows (k·M entries), J' = maxvol rows of
/// Rᵀ (M×k) started from J. If J' = J the sets are converged (the next row step would repeat I); else
/// J ← J' and the next sweep follows. |det A(I_sq, J)| never decreases. On an A of rank k with a nonsingular
/// A(I_sq, J) the result reproduces A exactly (docs/mathematics.md §3, Corollary 2.2). Throws
/// std::invalid_argument for bad columns, or row_count outside [k, N].
AlternatingMaxvolResult alternating_maxvol(const EntryOracle& oracle, std::vector<Index> start_cols,
                                           Index row_count, const MaxvolOptions& options);

// ---------------------------------------------------------------------------------------------------------
// Selection on tokens and singular vectors

/// Farthest-point sampling of the rows of X (N×d): `start` first, then repeatedly the row farthest from the
/// chosen set in Euclidean distance (the largest min_c ‖x_i − x_c‖², each squared distance a sum of squared
/// differences, so equal rows are at distance exactly 0), among the unchosen rows, ties to the smallest
/// index. Once every distinct point is chosen the distances are all 0 and the rule continues with the
/// unchosen indices in ascending order. m indices (1 ≤ m ≤ N) in the order chosen; O(N·m·d).
std::vector<Index> farthest_point_sampling(const ConstMatrixRef<double>& X, Index m, Index start);

/// Q-DEIM rows of U (N×m, orthonormal columns, m ≤ N; Drmač & Gugercin 2016, Algorithm 1): the first m
/// column pivots of the QR factorization with column pivoting of Uᵀ, by Eigen's ColPivHouseholderQR
/// (LAPACK's dgeqp3 where Eigen is built with EIGEN_USE_LAPACKE, as the OpenBLAS build is). Then
/// ‖U(I,:)⁻¹‖₂ ≤ √(N − m + 1)·√(4^m + 6m − 1)/3 (Drmač & Gugercin's Q-DEIM bound: the pivoted QR's last
/// diagonal entry is ≥ 1/√(N − m + 1) and the Faddeev–Kublanovskaya–Faddeeva bound on its triangle's
/// inverse). O(N·m²).
std::vector<Index> qdeim(const ConstMatrixRef<double>& U);

}  // namespace nystrom
