#pragma once
/// @file distribute.hpp
/// Dynamic distribution of sweep points over MPI ranks (issue 6). Points differ in cost by orders of
/// magnitude, so they are handed out one at a time, largest estimated cost first: rank 0 is the coordinator
/// and the only writer (its main thread does all MPI calls and all on_done calls; a second thread on rank 0
/// evaluates points too), every other rank asks for a point, evaluates it and sends back its rows. Without
/// MPI (NYSTROM_WITH_MPI undefined) or with one rank, run_points is a plain loop in the same order.
///
/// Ordering and resumability: on_done is called as points finish, in any order, so the writer can append and
/// flush each row at once (an interrupted run keeps every finished row); a restart passes only the unfinished
/// points. The writer sorts the rows by point index when the sweep completes, which makes the file equal to a
/// single-process run's (which is also delivered largest-cost-first).

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "hdf5_io.hpp"

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

/// This process's rank (0 without MPI or before MPI_Init).
int mpi_rank();
/// Number of ranks (1 without MPI or before MPI_Init).
int mpi_size();
/// OpenMP threads each rank should use so the ranks on one machine share its cores: max(1, cores / local
/// ranks).
int threads_per_rank();

/// The rows one point produced (usually one; a point may also stand for a group, e.g. every row of one head).
using PointRows = std::vector<Row>;

/// Bytes of `rows` for a message: counts, then per cell a type byte and its value. deserialize_rows inverts
/// it and throws std::invalid_argument on a malformed buffer.
std::vector<char> serialize_rows(const PointRows& rows);
PointRows deserialize_rows(const std::vector<char>& bytes);

/// How run_points schedules.
struct DistributionOptions {
  /// Estimated cost of a point (any unit); points are handed out largest first, ties by index. Empty: index
  /// order.
  std::function<double(std::size_t)> estimated_cost;
  /// Rank 0 also evaluates points (in a second thread) while coordinating.
  bool coordinator_evaluates = true;
  /// How often rank 0's coordinator polls for messages and for its own finished point.
  std::chrono::milliseconds poll_interval{2};
};

/// Who evaluated what.
struct DistributionSummary {
  std::vector<std::size_t> points_per_rank;  ///< points evaluated by each rank (rank 0 only; empty elsewhere)
  double seconds = 0;                        ///< wall time of run_points
};

/// Evaluates every point index in `points` exactly once over all ranks and calls on_done(index, rows) on rank
/// 0 for each, as they finish. Collective: every rank calls it; only rank 0's `points`, on_done and options
/// are used, workers just evaluate what they are sent. If evaluate throws anywhere (or on_done throws), rank
/// 0 stops handing out points, lets the busy ranks finish, releases them, and rethrows on rank 0
/// (std::invalid_argument keeps its type; other errors become std::runtime_error naming the rank and point);
/// workers return normally.
DistributionSummary run_points(const std::vector<std::size_t>& points,
                               const std::function<PointRows(std::size_t)>& evaluate,
                               const std::function<void(std::size_t, const PointRows&)>& on_done,
                               const DistributionOptions& options = {});

}  // namespace nystrom::cli
