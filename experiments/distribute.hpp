#pragma once
/// @file distribute.hpp
/// Dynamic distribution of sweep points over evaluating threads and MPI ranks. Points differ in cost by
/// orders of magnitude and share expensive per-group state (a sweep's head reference), so they are handed out
/// one at a time with cache affinity (PointScheduler): an evaluator keeps taking points of the group it works
/// on, takes the largest unclaimed group when its own is used up, and only when no group is unclaimed steals
/// from the end of the group with the most points left. Rank 0 (the only process without MPI) is the
/// coordinator and the only writer: its main thread does all MPI calls and all on_done calls and sleeps while
/// it waits; DistributionOptions::evaluators threads of rank 0 evaluate points, each on its share of the
/// OpenMP threads; every other rank asks for points, evaluates them and sends back their rows. With one
/// process and one evaluator the points go in the schedule's order: groups largest first, points of a group
/// in index order.
///
/// Waiting never spins: ranks that wait for a message, a broadcast or MPI_Finalize poll with short sleeps, so
/// ranks oversubscribed on few cores leave the cores to the ranks that evaluate.
///
/// Ordering and resumability: on_done is called as points finish, in any order, so the writer can append and
/// flush each row at once (an interrupted run keeps every row delivered before it stopped); a restart passes
/// only the unfinished points. The writer sorts the rows by point index when the sweep completes, which makes
/// the file equal to a one-evaluator run's.

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "results_files.hpp"

namespace nystrom::cli {

/// RAII MPI session: MPI_Init_thread (MPI_THREAD_FUNNELED) on construction, MPI_Finalize on destruction, when
/// built with MPI and MPI is not already initialized; otherwise does nothing.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool initialized_here_ = false;
};

/// True when this process was started by an MPI launcher (mpirun/mpiexec/srun: OpenMPI, PMI or PMIx
/// variables in the environment); main() starts an MpiSession only then, so one-process runs never pay for
/// MPI_Init.
bool launched_by_mpi();

/// Copies rank 0's `bytes` into `bytes` on every rank (resized); collective. Without MPI or with one rank,
/// does nothing.
void broadcast_from_root(std::vector<char>& bytes);

/// Runs `step` on this rank, then agrees with every other rank whether it succeeded everywhere; collective.
/// Where it threw here, rethrows that; where it succeeded here but not on another rank, throws
/// std::invalid_argument saying so (that rank reports its own failure): every rank then ends, none waits for
/// a rank that is gone. Without MPI or with one rank, runs `step`.
void on_every_rank(const std::function<void()>& step);

/// This process's rank (0 without MPI or before MPI_Init).
int mpi_rank();
/// Number of ranks (1 without MPI or before MPI_Init).
int mpi_size();
/// OpenMP threads each rank should use so the ranks on one machine share its cores: max(1, cores / local
/// ranks).
int threads_per_rank();

/// The rows one point produced (usually one; a point may also stand for a group, e.g. every row of one head).
using PointRows = std::vector<Row>;

/// Evaluates point `index` on evaluating thread `slot` of this process (0 ≤ slot <
/// DistributionOptions::evaluators; always 0 on MPI workers): per-slot state such as a cached head evaluator
/// is only ever used by one thread at a time.
using EvaluatePoint = std::function<PointRows(std::size_t index, std::size_t slot)>;

/// Bytes of `rows` for a message: counts, then per cell a type byte and its value. deserialize_rows inverts
/// it and throws std::invalid_argument on a malformed buffer.
std::vector<char> serialize_rows(const PointRows& rows);
PointRows deserialize_rows(const std::vector<char>& bytes);

/// How run_points schedules.
struct DistributionOptions {
  /// Estimated cost of a point (any unit). Groups are handed out largest total cost first, ties by their
  /// first index. Empty: every point costs the same.
  std::function<double(std::size_t)> estimated_cost;
  /// Names the reusable state a point needs (e.g. a sweep's head and kernel): points with the same name form
  /// a group that one evaluator works through in index order, so its cached state is built once. Empty: every
  /// point is its own group (largest cost first, ties by index).
  std::function<std::string(std::size_t)> group;
  /// Another evaluator steals from a group only while at least this many of its points are unassigned: the
  /// last points are left to the evaluator that already holds the group's state.
  std::size_t steal_minimum = 2;
  /// Rank 0 also evaluates points (in threads of its own) while coordinating.
  bool coordinator_evaluates = true;
  /// Threads of rank 0 that evaluate points at the same time (≥ 1). Each evaluates on threads() /
  /// evaluators OpenMP threads (at least one); once the schedule has nothing left for some of them, the
  /// others share their threads (threads() / evaluators still busy) from their next point on.
  std::size_t evaluators = 1;
  /// How long a waiting thread sleeps between polls: rank 0's coordinator (messages, its own finished point)
  /// and a worker with nothing to evaluate (the only option workers use).
  std::chrono::milliseconds poll_interval{2};
};

/// The cache-affinity schedule of run_points, as a pure function of the points, their groups and costs:
/// answers which point an evaluator (any integer id: a rank, or rank 0's own evaluating thread) takes next.
/// Every point is handed out exactly once.
class PointScheduler {
 public:
  /// `points` in any order (duplicates are an error: std::invalid_argument); uses options.group,
  /// options.estimated_cost and options.steal_minimum.
  PointScheduler(const std::vector<std::size_t>& points, const DistributionOptions& options);

  /// The next point for `evaluator`: the next one (in index order) of the group it works on; else the first
  /// point of the largest unclaimed group; else, stolen, the last point of the group with the most unassigned
  /// points (ties: the earlier group), if it has at least steal_minimum of them; else nothing. An evaluator
  /// that gets nothing never gets a point later, and every group left holds an evaluator that will ask again.
  std::optional<std::size_t> next(int evaluator);

  /// Points not handed out yet.
  std::size_t unassigned() const { return unassigned_; }
  /// Steals so far (points an evaluator took from a group another evaluator had claimed).
  std::size_t steals() const { return steals_; }

 private:
  struct Group {
    std::deque<std::size_t> points;  ///< unassigned, in index order
    double cost = 0;                 ///< total estimated cost of all its points
  };
  struct Evaluator {
    std::size_t group = 0;
    bool stealing = false;  ///< takes from the group's end
  };
  std::vector<Group> groups_;  ///< largest cost first
  std::size_t next_unclaimed_ = 0;
  std::vector<std::optional<Evaluator>> evaluators_;  ///< by evaluator id, grown on demand
  std::size_t unassigned_ = 0, steals_ = 0, steal_minimum_ = 2;
};

/// Who evaluated what.
struct DistributionSummary {
  std::vector<std::size_t> points_per_rank;  ///< points evaluated by each rank (rank 0 only; empty elsewhere)
  std::size_t steals = 0;  ///< points taken from a group another evaluator had claimed (rank 0 only)
  double seconds = 0;      ///< wall time of run_points
};

/// Evaluates every point index in `points` exactly once over all evaluating threads and ranks and calls
/// on_done(index, rows) on rank 0's calling thread for each, as they finish. Collective: every rank calls it;
/// only rank 0's `points`, on_done and options are used (workers only options.poll_interval), workers just
/// evaluate what they are sent. If evaluate throws anywhere (or on_done throws), rank 0 stops handing out
/// points, lets the busy threads and ranks finish (delivering nothing more), releases them, and rethrows on
/// rank 0 (std::invalid_argument keeps its type; other errors become std::runtime_error naming the rank and
/// point); workers return normally.
DistributionSummary run_points(const std::vector<std::size_t>& points, const EvaluatePoint& evaluate,
                               const std::function<void(std::size_t, const PointRows&)>& on_done,
                               const DistributionOptions& options = {});

}  // namespace nystrom::cli
