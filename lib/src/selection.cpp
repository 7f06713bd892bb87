#include "nystrom/selection.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <utility>

#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"
#include "random.hpp"

namespace nystrom {

namespace {

constexpr std::array<EnumName<MaxvolStatus>, 3> maxvol_status_names{{
    {MaxvolStatus::dominant, "dominant"},
    {MaxvolStatus::swap_limit, "swap-limit"},
    {MaxvolStatus::singular, "singular"},
}};

/// Throws unless every index lies in [0, n) and none repeats; `what` names the list in the message.
void require_distinct_indices(const std::vector<Index>& indices, Index n, const std::string& what) {
  std::set<Index> seen;
  for (Index index : indices) {
    require(index >= 0 && index < n, what, " index ", index, " is outside [0, ", n, ")");
    require(seen.insert(index).second, what, " index ", index, " appears twice");
  }
}

/// Throws unless the oracle has a positive size and both of its functions.
void require_oracle(const EntryOracle& oracle, const std::string& what) {
  require(oracle.rows >= 1 && oracle.cols >= 1, what, ": the matrix is ", oracle.rows, "x", oracle.cols,
          " (rows and cols must be >= 1)");
  require(static_cast<bool>(oracle.row) && static_cast<bool>(oracle.column), what,
          ": the oracle lacks its row or column function");
}

/// The position of the largest |x_i| among the i with allowed(i), ties to the smallest; −1 when none is
/// allowed.
template <class Allowed>
Index argmax_abs(const Vector<double>& x, Allowed allowed) {
  Index best = -1;
  double largest = -1;
  for (Index i = 0; i < x.size(); ++i) {
    if (allowed(i) && std::abs(x(i)) > largest) {
      best = i;
      largest = std::abs(x(i));
    }
  }
  return best;
}

/// The rows of A listed in `rows`, in that order.
Matrix<double> gather_rows(const ConstMatrixRef<double>& A, const std::vector<Index>& rows) {
  Matrix<double> out(static_cast<Index>(rows.size()), A.cols());
  for (std::size_t t = 0; t < rows.size(); ++t) out.row(static_cast<Index>(t)) = A.row(rows[t]);
  return out;
}

/// The first `count` entries of a partial Fisher–Yates shuffle of (0, 1, …, n−1) (count ≤ n): the l-th is
/// uniform among those not drawn before (estimated_row_sums states the draws).
std::vector<Index> draw_without_replacement(std::mt19937_64& engine, Index n, Index count) {
  std::vector<Index> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), Index{0});
  for (Index l = 0; l < count; ++l) {
    const Index pick = l + detail::uniform_below(engine, n - l);
    std::swap(order[static_cast<std::size_t>(l)], order[static_cast<std::size_t>(pick)]);
  }
  order.resize(static_cast<std::size_t>(count));
  return order;
}

// ---------------------------------------------------------------------------------------------------------
// Adaptive cross approximation

/// Where a row stands in a cross approximation.
enum class RowState : char {
  unvisited,  ///< never evaluated
  pivot,      ///< in I (a cross or a fill pair)
  vanished    ///< evaluated, its residual vanished, then left for a restart
};

/// A cross approximation in progress (cross_approximation's algorithm, stated in selection.hpp).
class CrossBuilder {
 public:
  CrossBuilder(const EntryOracle& oracle, Index rank, const CrossOptions& options)
      : oracle_(oracle),
        options_(options),
        rank_(rank),
        max_restarts_(options.max_restarts.value_or(rank)),
        engine_(options.seed),
        state_(static_cast<std::size_t>(oracle.rows), RowState::unvisited),
        col_used_(static_cast<std::size_t>(oracle.cols), false),
        unvisited_(oracle.rows) {
    result_.u = Matrix<double>::Zero(oracle.rows, rank);
    result_.v = Matrix<double>::Zero(rank, oracle.cols);
  }

  CrossResult run() {
    start_probes();
    bool filling = false;
    Index i = options_.start_row;
    while (true) {
      const Vector<double> a = scaled_row(i);
      const Index l = size();
      Vector<double> r = a;
      if (l > 0) r.noalias() -= (result_.u.row(i).head(l) * result_.v.topRows(l)).transpose();
      const Index j = argmax_abs(r, [&](Index c) { return !col_used_[static_cast<std::size_t>(c)]; });
      if (std::abs(r(j)) > options_.tolerance * largest_pivot_) {
        const Vector<double> c = add_cross(i, j, r);
        if (size() == rank_) break;
        i = row_after_cross(c);
        continue;
      }
      const bool was_unvisited = state(i) == RowState::unvisited;
      if (!filling && result_.restarts < max_restarts_ && unvisited_ - (was_unvisited ? 1 : 0) > 0) {
        visit(i, RowState::vanished);
        vanished_.push_back(i);
        i = restart_row();
        ++result_.restarts;
        continue;
      }
      filling = true;
      add_fill(i, a);
      if (size() == rank_) break;
      i = next_fill_row();
    }
    // U was built for D = diag(w)·A; U_A = diag(w)⁻¹U_D.
    if (!options_.row_scale.empty())
      result_.u.array().colwise() /=
          Eigen::Map<const Vector<double>>(options_.row_scale.data(), oracle_.rows).array();
    return std::move(result_);
  }

 private:
  Index size() const { return static_cast<Index>(result_.rows.size()); }
  Index probe_col(Index t) const { return result_.probe_cols[static_cast<std::size_t>(t)]; }
  RowState state(Index i) const { return state_[static_cast<std::size_t>(i)]; }
  double weight(Index i) const {
    return options_.row_scale.empty() ? 1.0 : options_.row_scale[static_cast<std::size_t>(i)];
  }

  void visit(Index i, RowState next) {
    if (state(i) == RowState::unvisited) --unvisited_;
    state_[static_cast<std::size_t>(i)] = next;
  }

  /// D(i, :) = w_i·A(i, :).
  Vector<double> scaled_row(Index i) {
    Vector<double> a(oracle_.cols);
    oracle_.row(i, a.data());
    result_.entries += oracle_.cols;
    require_finite(a, describe("cross_approximation: row ", i, " of the matrix"));
    return a * weight(i);
  }

  /// D(:, j) = w ⊙ A(:, j).
  Vector<double> scaled_column(Index j) {
    Vector<double> c(oracle_.rows);
    oracle_.column(j, c.data());
    result_.entries += oracle_.rows;
    require_finite(c, describe("cross_approximation: column ", j, " of the matrix"));
    if (!options_.row_scale.empty())
      c.array() *= Eigen::Map<const Vector<double>>(options_.row_scale.data(), oracle_.rows).array();
    return c;
  }

  /// Appends the cross at (i, j) of the residual row r (Bebendorf 2000, Algorithm 1): U gets c/r_j, V gets
  /// r. Returns the residual column c.
  Vector<double> add_cross(Index i, Index j, const Vector<double>& r) {
    const Index l = size();
    Vector<double> c = scaled_column(j);
    if (l > 0) c.noalias() -= result_.u.leftCols(l) * result_.v.col(j).head(l);
    result_.u.col(l) = c / r(j);
    result_.v.row(l) = r.transpose();
    largest_pivot_ = std::max(largest_pivot_, std::abs(r(j)));
    ++result_.crosses;
    append(i, j);
    update_probes(l);
    return c;
  }

  /// Draws the probe columns P and evaluates R_P = D(:, P).
  void start_probes() {
    const Index p = std::min(options_.probes, oracle_.cols);
    result_.probe_cols = draw_without_replacement(engine_, oracle_.cols, p);
    probe_residual_.resize(oracle_.rows, p);
    for (Index t = 0; t < p; ++t) probe_residual_.col(t) = scaled_column(probe_col(t));
  }

  /// R_P ← R_P − U(:, l)·V(l, P) after cross l.
  void update_probes(Index l) {
    for (Index t = 0; t < probe_residual_.cols(); ++t)
      probe_residual_.col(t) -= result_.u.col(l) * result_.v(l, probe_col(t));
  }

  /// The unvisited row holding the largest probe entry |R_P(x, t)| > tolerance·p_max (ties: smallest x),
  /// with that entry's magnitude; row −1 when no unvisited row holds one.
  std::pair<Index, double> probe_row() const {
    std::pair<Index, double> best{-1, options_.tolerance * largest_pivot_};
    if (probe_residual_.cols() == 0) return best;
    for (Index x = 0; x < oracle_.rows; ++x) {
      if (state(x) != RowState::unvisited) continue;
      const double entry = probe_residual_.row(x).cwiseAbs().maxCoeff();
      if (entry > best.second) best = {x, entry};
    }
    return best;
  }

  /// The row after a cross with residual column c: the probe row when its entry exceeds every unvisited
  /// |c_x|, else argmax |c_x| over the unvisited rows; the fill row once no row is unvisited.
  Index row_after_cross(const Vector<double>& c) const {
    const Index natural = argmax_abs(c, [&](Index x) { return state(x) == RowState::unvisited; });
    if (natural < 0) return next_fill_row();
    const auto [probe_x, entry] = probe_row();
    return probe_x >= 0 && entry > std::abs(c(natural)) ? probe_x : natural;
  }

  /// Appends the fill pair (i, argmax |D(i, j)| over unused j) with a zero column of U and row of V.
  void add_fill(Index i, const Vector<double>& a) {
    append(i, argmax_abs(a, [&](Index c) { return !col_used_[static_cast<std::size_t>(c)]; }));
  }

  void append(Index i, Index j) {
    result_.rows.push_back(i);
    result_.cols.push_back(j);
    col_used_[static_cast<std::size_t>(j)] = true;
    visit(i, RowState::pivot);
  }

  /// The smallest unvisited row, else the earliest vanished row not in I (one exists while |I| < rank).
  Index next_fill_row() const {
    for (Index i = 0; i < oracle_.rows; ++i)
      if (state(i) == RowState::unvisited) return i;
    return *std::find_if(vanished_.begin(), vanished_.end(),
                         [&](Index i) { return state(i) == RowState::vanished; });
  }

  /// The probe row, else the u-th unvisited row in ascending order, u = uniform_below(engine, #unvisited)
  /// (ACA+ restart).
  Index restart_row() {
    const Index probe_x = probe_row().first;
    if (probe_x >= 0) return probe_x;
    Index u = detail::uniform_below(engine_, unvisited_);
    for (Index i = 0;; ++i)
      if (state(i) == RowState::unvisited && u-- == 0) return i;
  }

  const EntryOracle& oracle_;
  const CrossOptions& options_;
  Index rank_ = 0;
  Index max_restarts_ = 0;
  std::mt19937_64 engine_;
  std::vector<RowState> state_;
  std::vector<bool> col_used_;
  Index unvisited_ = 0;            ///< rows still unvisited
  std::vector<Index> vanished_;    ///< rows left for a restart, in that order
  double largest_pivot_ = 0;       ///< the largest |pivot| so far
  Matrix<double> probe_residual_;  ///< R_P = D(:, P) − U·V(:, P), N×p
  CrossResult result_;
};

// ---------------------------------------------------------------------------------------------------------
// Randomly pivoted Cholesky

/// `count` candidates drawn i.i.d. with probability d_i/Σd from the running sums `cumulative` of d
/// (inverse transform: the first i with cumulative_i > u·Σd), repeats dropped, first occurrences in order.
/// u·Σd < Σd for every u ≤ 1 − 2⁻⁵³ in round-to-nearest, so an index always exists, and an i with d_i = 0
/// is never drawn (its running sum equals its predecessor's).
std::vector<Index> propose(const std::vector<double>& cumulative, Index count, std::mt19937_64& engine) {
  const double total = cumulative.back();
  std::vector<Index> candidates;
  for (Index t = 0; t < count; ++t) {
    const double threshold = detail::uniform_unit(engine) * total;
    const auto candidate = static_cast<Index>(
        std::upper_bound(cumulative.begin(), cumulative.end(), threshold) - cumulative.begin());
    if (std::find(candidates.begin(), candidates.end(), candidate) == candidates.end())
      candidates.push_back(candidate);
  }
  return candidates;
}

/// Randomly pivoted Cholesky in progress (rpcholesky's algorithm, stated in selection.hpp).
class RpcholeskyBuilder {
 public:
  RpcholeskyBuilder(const PsdOracle& oracle, Index k, const RpcholeskyOptions& options)
      : oracle_(oracle), options_(options), k_(k), engine_(options.seed) {
    const Index n = oracle.size;
    diagonal_.resize(n);
    oracle.diagonal(diagonal_.data());
    for (Index i = 0; i < n; ++i)
      require(std::isfinite(diagonal_(i)) && diagonal_(i) >= 0, "rpcholesky: diagonal entry ", i, " = ",
              diagonal_(i), " must be finite and >= 0 (a PSD matrix)");
    residual_ = diagonal_;
    chosen_.assign(static_cast<std::size_t>(n), false);
    result_.factor = Matrix<double>::Zero(n, k);
    result_.entries = n;
  }

  RpcholeskyResult run() {
    const double trace = diagonal_.sum();
    std::vector<double> cumulative(static_cast<std::size_t>(oracle_.size));
    while (result_.sampled < k_) {
      std::partial_sum(residual_.begin(), residual_.end(), cumulative.begin());
      if (!(cumulative.back() > options_.tolerance * trace)) break;
      const Index count = std::min(options_.block_size, k_ - result_.sampled);
      run_round(propose(cumulative, count, engine_));
      ++result_.rounds;
    }
    // Exhausted residual: the indices not yet chosen, ascending, with zero columns of F.
    for (Index i = 0; i < oracle_.size && static_cast<Index>(result_.pivots.size()) < k_; ++i)
      if (!chosen_[static_cast<std::size_t>(i)]) result_.pivots.push_back(i);
    return std::move(result_);
  }

 private:
  /// One round: rejection sampling over the candidates (Epperly, Tropp, Webber, Algorithm 2.2, the
  /// rejection_cholesky step, with A(c, accepted) read from the accepted columns), then the block update.
  void run_round(const std::vector<Index>& candidates) {
    const Index n = oracle_.size, l = result_.sampled, s = static_cast<Index>(candidates.size());
    const auto& F = result_.factor;
    Matrix<double> columns(n, s), cholesky = Matrix<double>::Zero(s, s);
    Vector<double> row(s);
    std::vector<Index> accepted;
    for (Index c : candidates) {
      const double v = detail::uniform_unit(engine_);
      const auto a = static_cast<Index>(accepted.size());
      const double start = diagonal_(c) - F.row(c).head(l).squaredNorm();
      for (Index t = 0; t < a; ++t) {
        const double h = columns(c, t) - F.row(c).head(l).dot(F.row(accepted[t]).head(l));
        row(t) = (h - row.head(t).dot(cholesky.row(t).head(t).transpose())) / cholesky(t, t);
      }
      const double current = start - row.head(a).squaredNorm();
      if (start <= 0) residual_(c) = 0;  // rounding: the candidate has no residual left
      if (!(start > 0 && v * start < current)) {
        ++result_.rejections;
        continue;
      }
      cholesky.row(a).head(a) = row.head(a).transpose();
      cholesky(a, a) = std::sqrt(current);
      oracle_.column(c, columns.col(a).data());
      result_.entries += n;
      require_finite(columns.col(a), describe("rpcholesky: column ", c, " of the matrix"));
      accepted.push_back(c);
    }
    update(accepted, columns.leftCols(static_cast<Index>(accepted.size())),
           cholesky.topLeftCorner(static_cast<Index>(accepted.size()), static_cast<Index>(accepted.size())));
  }

  /// The block update (RandLAPACK rl_rpchol.hh): G = A(:,S') − F F(S',:)ᵀ, F_new = G L⁻ᵀ,
  /// d ← max(d − rowsum(F_new²), 0), d_S' = 0.
  void update(const std::vector<Index>& accepted, const Eigen::Ref<const Matrix<double>>& columns,
              const Eigen::Ref<const Matrix<double>>& cholesky) {
    const Index l = result_.sampled, a = static_cast<Index>(accepted.size());
    auto& F = result_.factor;
    Matrix<double> G = columns;
    if (l > 0) G.noalias() -= F.leftCols(l) * gather_rows(F.leftCols(l), accepted).transpose();
    cholesky.triangularView<Eigen::Lower>().transpose().solveInPlace<Eigen::OnTheRight>(G);
    F.middleCols(l, a) = G;
    residual_ = (residual_ - G.rowwise().squaredNorm()).cwiseMax(0.0);
    for (Index p : accepted) {
      residual_(p) = 0;
      chosen_[static_cast<std::size_t>(p)] = true;
      result_.pivots.push_back(p);
    }
    result_.sampled += a;
  }

  const PsdOracle& oracle_;
  const RpcholeskyOptions& options_;
  Index k_ = 0;
  std::mt19937_64 engine_;
  Vector<double> diagonal_;  ///< diag(A)
  Vector<double> residual_;  ///< d, the residual diagonal
  std::vector<bool> chosen_;
  RpcholeskyResult result_;
};

// ---------------------------------------------------------------------------------------------------------
// Maximum volume

/// The first r pivot rows of Gaussian elimination with partial pivoting on the N×r matrix A (the largest
/// |entry| of the column below the diagonal, the first in elimination order on ties; LAPACK's dgetrf rule).
std::vector<Index> lu_pivot_rows(const ConstMatrixRef<double>& A) {
  const Index n = A.rows(), r = A.cols();
  Matrix<double> W = A;
  std::vector<Index> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), Index{0});
  for (Index t = 0; t < r; ++t) {
    Index p = 0;
    W.col(t).tail(n - t).cwiseAbs().maxCoeff(&p);
    p += t;
    W.row(t).swap(W.row(p));
    std::swap(order[static_cast<std::size_t>(t)], order[static_cast<std::size_t>(p)]);
    if (W(t, t) != 0)
      W.bottomRightCorner(n - t - 1, r - t - 1).noalias() -=
          (W.col(t).tail(n - t - 1) / W(t, t)) * W.row(t).tail(r - t - 1);
  }
  order.resize(static_cast<std::size_t>(r));
  return order;
}

/// The LU factorization of A_Iᵀ, or nothing when A_I is singular to rounding: an LU pivot at most
/// N·eps·(the largest pivot).
std::optional<Eigen::PartialPivLU<Matrix<double>>> submatrix_lu(const ConstMatrixRef<double>& A,
                                                                const std::vector<Index>& rows) {
  Eigen::PartialPivLU<Matrix<double>> lu(gather_rows(A, rows).transpose());
  const Vector<double> pivots = lu.matrixLU().diagonal().cwiseAbs();
  const double floor =
      static_cast<double>(A.rows()) * std::numeric_limits<double>::epsilon() * pivots.maxCoeff();
  if (!(pivots.minCoeff() > floor)) return std::nullopt;
  return lu;
}

/// B = A A_I⁻¹ (N×r) from the LU factorization of A_Iᵀ: Bᵀ = A_I⁻ᵀAᵀ; the rows of I set to the exact
/// identity rows they equal (so rounding never makes a row of I look like a swap candidate).
Matrix<double> interpolation_matrix(const ConstMatrixRef<double>& A, const std::vector<Index>& rows,
                                    const Eigen::PartialPivLU<Matrix<double>>& lu) {
  Matrix<double> B = lu.solve(A.transpose()).transpose();
  for (std::size_t t = 0; t < rows.size(); ++t)
    B.row(rows[t]) = Vector<double>::Unit(A.cols(), static_cast<Index>(t)).transpose();
  return B;
}

/// The entry of largest |B_ij| (ties: the first in column-major order).
std::pair<Index, Index> largest_entry(const Matrix<double>& B) {
  Index best_i = 0, best_j = 0;
  double largest = -1;
  for (Index j = 0; j < B.cols(); ++j) {
    for (Index i = 0; i < B.rows(); ++i) {
      if (std::abs(B(i, j)) > largest) {
        largest = std::abs(B(i, j));
        best_i = i;
        best_j = j;
      }
    }
  }
  return {best_i, best_j};
}

/// Throws unless A is a finite N×r matrix with N ≥ r ≥ 1 and `start_rows` is empty or r distinct rows.
void require_tall(const ConstMatrixRef<double>& A, const std::vector<Index>& start_rows,
                  const std::string& what) {
  require(A.cols() >= 1 && A.rows() >= A.cols(), what, ": A is ", A.rows(), "x", A.cols(),
          " (needs N >= r >= 1)");
  require_finite(A, what + ": A");
  require(start_rows.empty() || static_cast<Index>(start_rows.size()) == A.cols(), what, ": ",
          start_rows.size(), " start rows given for r = ", A.cols());
  require_distinct_indices(start_rows, A.rows(), what + ": start row");
}

/// The k columns of A listed in `cols` (N×k), from the oracle.
Matrix<double> oracle_columns(const EntryOracle& oracle, const std::vector<Index>& cols, Index& entries) {
  Matrix<double> C(oracle.rows, static_cast<Index>(cols.size()));
  for (std::size_t t = 0; t < cols.size(); ++t) oracle.column(cols[t], C.col(static_cast<Index>(t)).data());
  entries += oracle.rows * static_cast<Index>(cols.size());
  require_finite(C, "alternating_maxvol: the columns of the matrix");
  return C;
}

/// The transposed rows A(rows, :)ᵀ (M×k), from the oracle.
Matrix<double> oracle_rows_transposed(const EntryOracle& oracle, const std::vector<Index>& rows,
                                      Index& entries) {
  Matrix<double> R(oracle.cols, static_cast<Index>(rows.size()));
  for (std::size_t t = 0; t < rows.size(); ++t) oracle.row(rows[t], R.col(static_cast<Index>(t)).data());
  entries += oracle.cols * static_cast<Index>(rows.size());
  require_finite(R, "alternating_maxvol: the rows of the matrix");
  return R;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------

void CrossOptions::validate(Index rows) const {
  require(start_row >= 0 && start_row < rows, "cross_approximation: start_row = ", start_row,
          " is outside [0, ", rows, ")");
  require(std::isfinite(tolerance) && tolerance >= 0, "cross_approximation: tolerance = ", tolerance,
          " must be finite and >= 0");
  require(!max_restarts || *max_restarts >= 0,
          "cross_approximation: max_restarts = ", max_restarts.value_or(0), " must be >= 0");
  require(probes >= 0, "cross_approximation: probes = ", probes, " must be >= 0");
  require(row_scale.empty() || static_cast<Index>(row_scale.size()) == rows,
          "cross_approximation: row_scale has ", row_scale.size(), " weights for ", rows, " rows");
  for (std::size_t i = 0; i < row_scale.size(); ++i)
    require(std::isfinite(row_scale[i]) && row_scale[i] > 0, "cross_approximation: row_scale[", i,
            "] = ", row_scale[i], " must be finite and > 0");
}

CrossResult cross_approximation(const EntryOracle& oracle, Index rank, const CrossOptions& options) {
  require_oracle(oracle, "cross_approximation");
  options.validate(oracle.rows);
  require(rank >= 1 && rank <= std::min(oracle.rows, oracle.cols), "cross_approximation: rank = ", rank,
          " is outside [1, min(N, M) = ", std::min(oracle.rows, oracle.cols), "]");
  return CrossBuilder(oracle, rank, options).run();
}

RowSumEstimate estimated_row_sums(const EntryOracle& oracle, Index samples, std::uint64_t seed) {
  require_oracle(oracle, "estimated_row_sums");
  require(samples >= 1 && samples <= oracle.cols, "estimated_row_sums: samples = ", samples,
          " is outside [1, M = ", oracle.cols, "]");
  std::mt19937_64 engine(seed);
  RowSumEstimate estimate{Vector<double>::Zero(oracle.rows), oracle.rows * samples};
  Vector<double> column(oracle.rows);
  for (Index j : draw_without_replacement(engine, oracle.cols, samples)) {
    oracle.column(j, column.data());
    estimate.sums += column;
  }
  estimate.sums *= static_cast<double>(oracle.cols) / static_cast<double>(samples);
  return estimate;
}

void RpcholeskyOptions::validate() const {
  require(block_size >= 1, "rpcholesky: block_size = ", block_size, " must be >= 1");
  require(std::isfinite(tolerance) && tolerance >= 0, "rpcholesky: tolerance = ", tolerance,
          " must be finite and >= 0");
}

RpcholeskyResult rpcholesky(const PsdOracle& oracle, Index k, const RpcholeskyOptions& options) {
  options.validate();
  require(oracle.size >= 1, "rpcholesky: size = ", oracle.size, " must be >= 1");
  require(static_cast<bool>(oracle.diagonal) && static_cast<bool>(oracle.column),
          "rpcholesky: the oracle lacks its diagonal or column function");
  require(k >= 1 && k <= oracle.size, "rpcholesky: k = ", k, " is outside [1, N = ", oracle.size, "]");
  return RpcholeskyBuilder(oracle, k, options).run();
}

void MaxvolOptions::validate() const {
  require(std::isfinite(tolerance) && tolerance >= 0, "maxvol: tolerance = ", tolerance,
          " must be finite and >= 0");
  require(max_swaps >= 0, "maxvol: max_swaps = ", max_swaps, " must be >= 0");
  require(sweeps >= 1, "maxvol: sweeps = ", sweeps, " must be >= 1");
}

std::string to_string(MaxvolStatus status) {
  return name_of(status, maxvol_status_names);
}

MaxvolResult maxvol(const ConstMatrixRef<double>& A, const MaxvolOptions& options,
                    const std::vector<Index>& start_rows) {
  options.validate();
  require_tall(A, start_rows, "maxvol");
  MaxvolResult result;
  result.start_rows = start_rows.empty() ? lu_pivot_rows(A) : start_rows;
  result.rows = result.start_rows;
  const auto lu = submatrix_lu(A, result.rows);
  if (!lu) {
    result.status = MaxvolStatus::singular;
    return result;
  }
  Matrix<double> B = interpolation_matrix(A, result.rows, *lu);
  // Goreinov et al. 2010, Algorithm 1: swap while some |B_ij| > 1 + δ.
  while (true) {
    const auto [i, j] = largest_entry(B);
    const double pivot = B(i, j);
    if (std::abs(pivot) <= 1 + options.tolerance) return result;
    if (static_cast<Index>(result.swaps.size()) == options.max_swaps) {
      result.status = MaxvolStatus::swap_limit;
      return result;
    }
    result.swaps.push_back({j, result.rows[static_cast<std::size_t>(j)], i, std::abs(pivot)});
    result.growth *= std::abs(pivot);
    result.rows[static_cast<std::size_t>(j)] = i;
    // B ← B − B(:,j)(B(i,:) − e_jᵀ)/B_ij (Sherman–Morrison for the replaced row of A_I). The other rows of I
    // have B(·, j) = 0 exactly and stay identity rows; row i becomes e_jᵀ.
    const Vector<double> column = B.col(j) / pivot;
    Vector<double> row = B.row(i).transpose();
    row(j) -= 1;
    B.noalias() -= column * row.transpose();
    B.row(i) = Vector<double>::Unit(A.cols(), j).transpose();
  }
}

MaxvolResult rect_maxvol(const ConstMatrixRef<double>& A, Index row_count, const MaxvolOptions& options,
                         const std::vector<Index>& start_rows) {
  require(row_count >= A.cols() && row_count <= A.rows(), "rect_maxvol: row_count = ", row_count,
          " is outside [r, N] = [", A.cols(), ", ", A.rows(), "]");
  MaxvolResult result = maxvol(A, options, start_rows);
  if (result.status == MaxvolStatus::singular || row_count == A.cols()) return result;
  // Mikhalev & Oseledets 2018, Algorithm 3 (maxvolpy's rect_maxvol): B = A A_I⁺ (N×|I|), the score of
  // row x is ‖B_x‖² = a_x (A_IᵀA_I)⁻¹ a_xᵀ. Adding row i, with v = B B_iᵀ and λ = 1/(1 + v_i) (Sherman–
  // Morrison on A_IᵀA_I + a_iᵀa_i): B ← [B − λ v B_i, λ v] and ‖B_x‖² ← ‖B_x‖² − λ v_x². The swaps only
  // raised |det A_I| above the start's, so A_I is nonsingular.
  const Index r = A.cols();
  const Eigen::PartialPivLU<Matrix<double>> lu(gather_rows(A, result.rows).transpose());
  Matrix<double> B(A.rows(), row_count);
  B.leftCols(r) = interpolation_matrix(A, result.rows, lu);
  Vector<double> score = B.leftCols(r).rowwise().squaredNorm();
  std::vector<bool> in_set(static_cast<std::size_t>(A.rows()), false);
  for (Index i : result.rows) in_set[static_cast<std::size_t>(i)] = true;
  for (Index width = r; width < row_count; ++width) {
    Index next = -1;
    for (Index x = 0; x < A.rows(); ++x)
      if (!in_set[static_cast<std::size_t>(x)] && (next < 0 || score(x) > score(next))) next = x;
    const Vector<double> b_next = B.row(next).head(width).transpose();
    const Vector<double> v = B.leftCols(width) * b_next;
    const double lambda = 1 / (1 + v(next));
    B.leftCols(width).noalias() -= (lambda * v) * b_next.transpose();
    B.col(width) = lambda * v;
    score -= lambda * v.cwiseAbs2();
    in_set[static_cast<std::size_t>(next)] = true;
    result.rows.push_back(next);
  }
  return result;
}

AlternatingMaxvolResult alternating_maxvol(const EntryOracle& oracle, std::vector<Index> start_cols,
                                           Index row_count, const MaxvolOptions& options) {
  require_oracle(oracle, "alternating_maxvol");
  options.validate();
  const auto k = static_cast<Index>(start_cols.size());
  require(k >= 1 && k <= std::min(oracle.rows, oracle.cols), "alternating_maxvol: ", k,
          " start columns given; needs 1 to min(N, M) = ", std::min(oracle.rows, oracle.cols));
  require_distinct_indices(start_cols, oracle.cols, "alternating_maxvol: start column");
  require(row_count >= k && row_count <= oracle.rows, "alternating_maxvol: row_count = ", row_count,
          " is outside [|J|, N] = [", k, ", ", oracle.rows, "]");
  AlternatingMaxvolResult result;
  result.cols = std::move(start_cols);
  std::vector<Index> square_rows;  // empty: the first row step starts from pivoted LU
  for (Index sweep = 1; sweep <= options.sweeps; ++sweep) {
    const Matrix<double> C = oracle_columns(oracle, result.cols, result.entries);
    const MaxvolResult rows = rect_maxvol(C, row_count, options, square_rows);
    result.rows = rows.rows;
    result.status = rows.status;
    result.sweeps = sweep;
    if (rows.status == MaxvolStatus::singular || sweep == options.sweeps) break;
    square_rows.assign(rows.rows.begin(), rows.rows.begin() + k);
    const Matrix<double> R = oracle_rows_transposed(oracle, square_rows, result.entries);
    const MaxvolResult cols = maxvol(R, options, result.cols);
    if (cols.status == MaxvolStatus::singular) {
      result.status = cols.status;
      break;
    }
    // Every swap raises |det A(I_sq, J)|, so no swap is the only way to end on the same set.
    if (cols.swaps.empty()) {
      result.converged = true;
      break;
    }
    result.cols = cols.rows;
  }
  return result;
}

std::vector<Index> farthest_point_sampling(const ConstMatrixRef<double>& X, Index m, Index start) {
  const Index n = X.rows();
  require(m >= 1 && m <= n, "farthest_point_sampling: m = ", m, " is outside [1, N = ", n, "]");
  require(start >= 0 && start < n, "farthest_point_sampling: start = ", start, " is outside [0, ", n, ")");
  require_finite(X, "farthest_point_sampling: X");
  const Matrix<double> points = X.transpose();  // one point per contiguous column
  Vector<double> distance = Vector<double>::Constant(n, std::numeric_limits<double>::infinity());
  std::vector<bool> chosen(static_cast<std::size_t>(n), false);
  std::vector<Index> order{start};
  chosen[static_cast<std::size_t>(start)] = true;
  while (static_cast<Index>(order.size()) < m) {
    const Index last = order.back();
    Index next = -1;
    for (Index i = 0; i < n; ++i) {
      if (chosen[static_cast<std::size_t>(i)]) continue;
      distance(i) = std::min(distance(i), (points.col(i) - points.col(last)).squaredNorm());
      if (next < 0 || distance(i) > distance(next)) next = i;
    }
    chosen[static_cast<std::size_t>(next)] = true;
    order.push_back(next);
  }
  return order;
}

std::vector<Index> qdeim(const ConstMatrixRef<double>& U) {
  require(U.cols() >= 1 && U.rows() >= U.cols(), "qdeim: U is ", U.rows(), "x", U.cols(),
          " (needs N >= m >= 1)");
  require_finite(U, "qdeim: U");
  const Eigen::ColPivHouseholderQR<Matrix<double>> qr(U.transpose());
  const auto& pivots = qr.colsPermutation().indices();
  return {pivots.data(), pivots.data() + U.cols()};
}

}  // namespace nystrom
