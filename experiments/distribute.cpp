#include "distribute.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"

#ifdef NYSTROM_WITH_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only: OpenMPI's deprecated C++ bindings do not compile warning-free
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

namespace nystrom::cli {

namespace {

/// Appends trivially copyable values and strings to a byte buffer.
class ByteWriter {
 public:
  template <class Value>
  void put(const Value& value) {
    static_assert(std::is_trivially_copyable_v<Value>);
    const auto* first = reinterpret_cast<const char*>(&value);
    bytes_.insert(bytes_.end(), first, first + sizeof(Value));
  }
  void put_string(const std::string& text) {
    put<std::uint64_t>(text.size());
    bytes_.insert(bytes_.end(), text.begin(), text.end());
  }
  std::vector<char> take() { return std::move(bytes_); }

 private:
  std::vector<char> bytes_;
};

/// Reads what ByteWriter wrote; throws std::invalid_argument when the buffer is too short.
class ByteReader {
 public:
  ByteReader(const char* data, std::size_t size) : data_(data), size_(size) {}
  template <class Value>
  Value get() {
    Value value;
    std::memcpy(&value, take(sizeof(Value)), sizeof(Value));
    return value;
  }
  std::string get_string() {
    const auto length = get<std::uint64_t>();
    const char* first = take(length);
    return std::string(first, first + length);
  }
  bool at_end() const { return position_ == size_; }

 private:
  const char* take(std::size_t count) {
    require(count <= size_ - position_, "malformed rows message: ", count, " bytes wanted at offset ",
            position_, " of ", size_);
    const char* at = data_ + position_;
    position_ += count;
    return at;
  }
  const char* data_;
  std::size_t size_;
  std::size_t position_ = 0;
};

/// Cell type tags in a serialized row (the order of the Cell variant).
enum class CellTag : std::uint8_t { text = 0, integer = 1, real = 2 };

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// The first failure of a distributed run, rethrown on rank 0 once every rank is released: a failure on rank
/// 0 itself (its evaluation or on_done) as the original exception, a worker's as std::invalid_argument or
/// std::runtime_error with its message.
struct Failure {
  bool failed = false;
  bool invalid_argument = false;
  std::string message;
  std::exception_ptr original;

  void record(bool is_invalid_argument, const std::string& text) {
    if (failed) return;
    failed = true;
    invalid_argument = is_invalid_argument;
    message = text;
  }
  /// Records the exception in flight (call inside a catch block), naming where it happened.
  void record_current(const std::string& where) {
    if (!failed) original = std::current_exception();
    try {
      throw;
    } catch (const std::invalid_argument& error) {
      record(true, error.what());
    } catch (const std::exception& error) {
      record(false, where + ": " + error.what());
    } catch (...) {
      record(false, where + ": unknown exception");
    }
  }
  void rethrow() const {
    if (!failed) return;
    if (original) std::rethrow_exception(original);
    if (invalid_argument) throw std::invalid_argument(message);
    throw std::runtime_error(message);
  }
};

}  // namespace

std::vector<char> serialize_rows(const PointRows& rows) {
  ByteWriter writer;
  writer.put<std::uint64_t>(rows.size());
  for (const auto& row : rows) {
    writer.put<std::uint64_t>(row.size());
    for (const auto& cell : row) {
      if (const auto* text = std::get_if<std::string>(&cell)) {
        writer.put(CellTag::text);
        writer.put_string(*text);
      } else if (const auto* integer = std::get_if<std::int64_t>(&cell)) {
        writer.put(CellTag::integer);
        writer.put(*integer);
      } else {
        writer.put(CellTag::real);
        writer.put(std::get<double>(cell));
      }
    }
  }
  return writer.take();
}

PointRows deserialize_rows(const std::vector<char>& bytes) {
  ByteReader reader(bytes.data(), bytes.size());
  PointRows rows(reader.get<std::uint64_t>());
  for (auto& row : rows) {
    row.resize(reader.get<std::uint64_t>());
    for (auto& cell : row) {
      switch (reader.get<CellTag>()) {
        case CellTag::text:
          cell = reader.get_string();
          break;
        case CellTag::integer:
          cell = reader.get<std::int64_t>();
          break;
        case CellTag::real:
          cell = reader.get<double>();
          break;
        default:
          throw std::invalid_argument("malformed rows message: unknown cell type");
      }
    }
  }
  require(reader.at_end(), "malformed rows message: ", bytes.size(), " bytes, trailing data");
  return rows;
}

PointScheduler::PointScheduler(const std::vector<std::size_t>& points, const DistributionOptions& options)
    : unassigned_(points.size()), steal_minimum_(std::max<std::size_t>(1, options.steal_minimum)) {
  std::vector<std::size_t> sorted = points;
  std::sort(sorted.begin(), sorted.end());
  const auto duplicate = std::adjacent_find(sorted.begin(), sorted.end());
  require(duplicate == sorted.end(), "point ", duplicate == sorted.end() ? 0 : *duplicate,
          " is listed more than once");
  // Groups in order of their first point; each group's points in index order.
  std::map<std::string, std::size_t> group_of_name;
  for (const std::size_t index : sorted) {
    std::size_t group = groups_.size();
    if (options.group) group = group_of_name.emplace(options.group(index), groups_.size()).first->second;
    if (group == groups_.size()) groups_.emplace_back();
    groups_[group].points.push_back(index);
    groups_[group].cost += options.estimated_cost ? options.estimated_cost(index) : 1.0;
  }
  // Largest total cost first; stable, so ties keep the order of first points.
  std::stable_sort(groups_.begin(), groups_.end(),
                   [](const Group& a, const Group& b) { return a.cost > b.cost; });
}

std::optional<std::size_t> PointScheduler::next(int evaluator) {
  require(evaluator >= 0, "evaluator id ", evaluator, " is negative");
  const auto id = static_cast<std::size_t>(evaluator);
  if (evaluators_.size() <= id) evaluators_.resize(id + 1);
  auto& state = evaluators_[id];
  if (!state || groups_[state->group].points.empty()) {
    state.reset();
    if (next_unclaimed_ < groups_.size()) {
      state = Evaluator{next_unclaimed_++, false};
    } else {
      // Every group is claimed: steal from the end of the one with the most unassigned points.
      std::size_t victim = groups_.size();
      for (std::size_t g = 0; g < groups_.size(); ++g)
        if (groups_[g].points.size() >= steal_minimum_ &&
            (victim == groups_.size() || groups_[g].points.size() > groups_[victim].points.size()))
          victim = g;
      if (victim == groups_.size()) return std::nullopt;
      state = Evaluator{victim, true};
    }
  }
  auto& group = groups_[state->group].points;
  std::size_t index = 0;
  if (state->stealing) {
    index = group.back();
    group.pop_back();
    ++steals_;
  } else {
    index = group.front();
    group.pop_front();
  }
  --unassigned_;
  return index;
}

#ifdef NYSTROM_WITH_MPI

namespace {

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

/// Message tags of the coordinator protocol.
enum Tag : int {
  kReady = 1,   ///< worker → 0, empty: send me points
  kResult = 2,  ///< worker → 0: u64 index, then serialize_rows
  kFailed = 3,  ///< worker → 0: u64 index, u8 invalid_argument, message
  kAssign = 4,  ///< 0 → worker: u64 index
  kStop = 5     ///< 0 → worker, empty: no more points
};

/// How many points a worker holds at once: one being evaluated, one queued, so it never waits on rank 0.
constexpr std::size_t kPointsInFlight = 2;

void send(int destination, Tag tag, const std::vector<char>& bytes) {
  MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, destination, tag, MPI_COMM_WORLD);
}

std::vector<char> receive(const MPI_Status& status) {
  int count = 0;
  MPI_Get_count(&status, MPI_BYTE, &count);
  std::vector<char> bytes(static_cast<std::size_t>(count));
  MPI_Recv(bytes.data(), count, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  return bytes;
}

std::vector<char> index_message(std::size_t index) {
  ByteWriter writer;
  writer.put<std::uint64_t>(index);
  return writer.take();
}

/// Completes `request`, sleeping `poll_interval` between tests: MPI's own blocking calls may busy-wait
/// (OpenMPI spins at 100% CPU), which would take a core from a rank that evaluates.
void wait_without_spinning(MPI_Request& request,
                           std::chrono::milliseconds poll_interval = std::chrono::milliseconds(1)) {
  for (int completed = 0;;) {
    MPI_Test(&request, &completed, MPI_STATUS_IGNORE);
    if (completed) return;
    std::this_thread::sleep_for(poll_interval);
  }
}

/// A worker rank: asks for points, evaluates them, sends back rows (or the failure), until told to stop.
void run_worker(const EvaluatePoint& evaluate, std::chrono::milliseconds poll_interval) {
  send(0, kReady, {});
  std::deque<std::size_t> assigned;
  for (;;) {
    bool stop = false;
    for (;;) {  // take every pending message; wait (sleeping) only when there is nothing to evaluate
      MPI_Status status;
      int arrived = 0;
      MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &arrived, &status);
      if (!arrived && assigned.empty()) {
        std::this_thread::sleep_for(poll_interval);
        continue;
      }
      if (!arrived) break;
      const std::vector<char> bytes = receive(status);
      if (status.MPI_TAG == kStop) {
        stop = true;
        break;
      }
      assigned.push_back(ByteReader(bytes.data(), bytes.size()).get<std::uint64_t>());
    }
    if (stop) return;  // rank 0 stops a worker only when it holds no points
    const std::size_t index = assigned.front();
    assigned.pop_front();
    ByteWriter writer;
    writer.put<std::uint64_t>(index);
    try {
      const std::vector<char> rows = serialize_rows(evaluate(index, 0));
      std::vector<char> message = writer.take();
      message.insert(message.end(), rows.begin(), rows.end());
      send(0, kResult, message);
    } catch (...) {
      Failure failure;
      failure.record_current(describe("rank ", mpi_rank(), ", point ", index));
      writer.put<std::uint8_t>(failure.invalid_argument ? 1 : 0);
      writer.put_string(failure.message);
      send(0, kFailed, writer.take());
    }
  }
}

}  // namespace

#endif

namespace {

/// Rank 0's evaluating threads, beside the coordinator on the calling thread: each evaluates one point at a
/// time, as the coordinator starts it, on the OpenMP threads it is given, and wakes the coordinator when it
/// has finished.
class LocalEvaluators {
 public:
  LocalEvaluators(std::size_t count, const EvaluatePoint& evaluate) : evaluate_(evaluate), slots_(count) {
    for (std::size_t slot = 0; slot < count; ++slot) threads_.emplace_back([this, slot] { loop(slot); });
  }
  ~LocalEvaluators() {
    {
      std::lock_guard lock(mutex_);
      quit_ = true;
    }
    work_.notify_all();
    for (auto& thread : threads_) thread.join();
  }
  LocalEvaluators(const LocalEvaluators&) = delete;
  LocalEvaluators& operator=(const LocalEvaluators&) = delete;

  std::size_t size() const { return slots_.size(); }
  /// Number of slots with a point started and not taken yet.
  std::size_t busy() const {
    std::lock_guard lock(mutex_);
    return std::size_t(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.busy; }));
  }
  /// Starts point `index` on the idle `slot`, on `threads` OpenMP threads.
  void start(std::size_t slot, std::size_t index, int threads) {
    {
      std::lock_guard lock(mutex_);
      Slot& started = slots_[slot];
      started = Slot{};
      started.busy = true;
      started.index = index;
      started.threads = threads;
    }
    work_.notify_all();
  }
  /// A slot whose point has finished, waiting for one up to `timeout` (none: until one finishes; call it only
  /// while a slot is busy then).
  std::optional<std::size_t> finished(std::optional<std::chrono::milliseconds> timeout) {
    std::unique_lock lock(mutex_);
    const auto any_done = [this] {
      return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.done; });
    };
    if (timeout)
      finished_.wait_for(lock, *timeout, any_done);
    else
      finished_.wait(lock, any_done);
    for (std::size_t slot = 0; slot < slots_.size(); ++slot)
      if (slots_[slot].done) return slot;
    return std::nullopt;
  }
  /// The point of `slot`.
  std::size_t index(std::size_t slot) const {
    std::lock_guard lock(mutex_);
    return slots_[slot].index;
  }
  /// The rows of the finished point of `slot` (rethrows its exception); the slot is idle afterwards.
  PointRows take(std::size_t slot) {
    std::lock_guard lock(mutex_);
    Slot taken = std::exchange(slots_[slot], Slot{});
    if (taken.error) std::rethrow_exception(taken.error);
    return std::move(taken.rows);
  }

 private:
  struct Slot {
    bool busy = false;  ///< started and not taken
    bool done = false;  ///< finished: rows or error are set
    std::size_t index = 0;
    int threads = 1;
    PointRows rows;
    std::exception_ptr error;
  };

  void loop(std::size_t slot) {
    std::unique_lock lock(mutex_);
    for (;;) {
      work_.wait(lock, [&] { return quit_ || (slots_[slot].busy && !slots_[slot].done); });
      if (quit_) return;
      const std::size_t index = slots_[slot].index;
      const int threads = slots_[slot].threads;
      lock.unlock();
      PointRows rows;
      std::exception_ptr error;
      try {
        set_threads(threads);  // this thread's OpenMP count; OpenBLAS stays single-threaded
        rows = evaluate_(index, slot);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      slots_[slot].rows = std::move(rows);
      slots_[slot].error = error;
      slots_[slot].done = true;
      finished_.notify_one();
    }
  }

  const EvaluatePoint& evaluate_;
  mutable std::mutex mutex_;
  std::condition_variable work_, finished_;
  bool quit_ = false;
  std::vector<Slot> slots_;
  std::vector<std::thread> threads_;  ///< one per slot, joined by the destructor
};

/// Rank 0: hands out points by the cache-affinity schedule (rank 0's evaluating thread k is evaluator 0 for
/// k = 0 and size − 1 + k after it, worker r evaluator r), delivers every result to on_done as it arrives,
/// and waits (sleeping) for its evaluating threads and the workers meanwhile.
DistributionSummary run_coordinator(const std::vector<std::size_t>& points, const EvaluatePoint& evaluate,
                                    const std::function<void(std::size_t, const PointRows&)>& on_done,
                                    const DistributionOptions& options) {
  require(options.evaluators >= 1, "run_points: options.evaluators must be >= 1");
  const int size = mpi_size();
  DistributionSummary summary;
  summary.points_per_rank.assign(static_cast<std::size_t>(size), 0);
  int running_workers = size - 1;
  Failure failure;
  std::optional<PointScheduler> scheduler;
  try {
    scheduler.emplace(points, options);
  } catch (...) {
    failure.record_current("scheduling");  // the workers are still released below
  }

  // Nothing is delivered after a failure (or a writer's stop): the rows on_done has are those before it.
  auto deliver = [&](int rank, std::size_t index, const PointRows& rows) {
    if (failure.failed) return;
    try {
      on_done(index, rows);
      ++summary.points_per_rank[static_cast<std::size_t>(rank)];
    } catch (...) {
      failure.record_current(describe("writing point ", index));
    }
  };
  // The next point for an evaluator; none after a failure.
  auto next_for = [&](int evaluator) -> std::optional<std::size_t> {
    if (failure.failed) return std::nullopt;
    return scheduler->next(evaluator);
  };

  LocalEvaluators local(options.evaluators, evaluate);
  const int threads = nystrom::threads();
  std::size_t local_left = options.coordinator_evaluates ? local.size() : 0;  // slots that may get points
  // Starts the idle `slot` on its next point, on its share of the threads; a slot the schedule has nothing
  // for never gets a point later.
  auto feed_local = [&](std::size_t slot) {
    const int evaluator = slot == 0 ? 0 : size - 1 + int(slot);
    if (const auto index = next_for(evaluator)) {
      local.start(slot, *index, std::max(1, threads / int(local_left)));
    } else {
      --local_left;
    }
  };
  if (options.coordinator_evaluates)
    for (std::size_t slot = 0; slot < local.size(); ++slot) feed_local(slot);

#ifdef NYSTROM_WITH_MPI
  std::vector<std::size_t> in_flight(static_cast<std::size_t>(size), 0);
  std::vector<bool> stopped(static_cast<std::size_t>(size), false);
  stopped[0] = true;
  // Gives a worker its next point, or stops it once it holds none and none are left for it (or a failure
  // happened); the scheduler never has a point for it later.
  auto feed = [&](int worker) {
    const auto w = static_cast<std::size_t>(worker);
    if (stopped[w]) return;
    if (const auto index = next_for(worker)) {
      send(worker, kAssign, index_message(*index));
      ++in_flight[w];
    } else if (in_flight[w] == 0) {
      send(worker, kStop, {});
      stopped[w] = true;
      --running_workers;
    }
  };
#endif

  while (running_workers > 0 || local.busy() > 0) {
    // Workers are polled every poll_interval; without them the coordinator sleeps until a point finishes.
    const auto waited = running_workers > 0 ? std::optional(options.poll_interval) : std::nullopt;
    if (const auto slot = local.finished(waited)) {
      const std::size_t index = local.index(*slot);
      std::optional<PointRows> rows;
      try {
        rows = local.take(*slot);
      } catch (...) {
        failure.record_current(describe("rank 0, point ", index));
      }
      feed_local(*slot);  // the slot goes on while the rows are written
      if (rows) deliver(0, index, *rows);
    }
#ifdef NYSTROM_WITH_MPI
    while (size > 1) {  // one process may not even have initialized MPI
      int arrived = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &arrived, &status);
      if (!arrived) break;
      const int worker = status.MPI_SOURCE;
      const std::vector<char> bytes = receive(status);
      if (status.MPI_TAG == kReady) {
        for (std::size_t k = 0; k < kPointsInFlight; ++k) feed(worker);
        continue;
      }
      --in_flight[static_cast<std::size_t>(worker)];
      ByteReader reader(bytes.data(), bytes.size());
      const auto index = reader.get<std::uint64_t>();
      if (status.MPI_TAG == kResult) {
        deliver(worker, index,
                deserialize_rows(std::vector<char>(bytes.begin() + sizeof(std::uint64_t), bytes.end())));
      } else {
        const bool invalid_argument = reader.get<std::uint8_t>() != 0;
        failure.record(invalid_argument, reader.get_string());
      }
      feed(worker);
    }
#endif
  }
  failure.rethrow();
  summary.steals = scheduler->steals();
  return summary;
}

}  // namespace

#ifdef NYSTROM_WITH_MPI

MpiSession::MpiSession(int& argc, char**& argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  initialized_here_ = true;
}

MpiSession::~MpiSession() {
  if (!initialized_here_ || !mpi_running()) return;
  // Ranks that finish first (workers, while rank 0 sorts the results file) wait here without spinning.
  MPI_Request request;
  MPI_Ibarrier(MPI_COMM_WORLD, &request);
  wait_without_spinning(request);
  MPI_Finalize();
}

void broadcast_from_root(std::vector<char>& bytes) {
  if (!mpi_running() || mpi_size() == 1) return;
  std::uint64_t size = bytes.size();
  MPI_Request request;
  MPI_Ibcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD, &request);
  wait_without_spinning(request);
  bytes.resize(size);
  if (size == 0) return;
  MPI_Ibcast(bytes.data(), int(size), MPI_CHAR, 0, MPI_COMM_WORLD, &request);
  wait_without_spinning(request);
}

namespace {

/// True when every rank passed true; collective.
bool all_ranks(bool value) {
  if (!mpi_running() || mpi_size() == 1) return value;
  int mine = value ? 1 : 0, all = 0;
  MPI_Request request;
  MPI_Iallreduce(&mine, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD, &request);
  wait_without_spinning(request);
  return all != 0;
}

}  // namespace

int mpi_rank() {
  if (!mpi_running()) return 0;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_size() {
  if (!mpi_running()) return 1;
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int threads_per_rank() {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (!mpi_running()) return cores;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int local_ranks = 1;
  MPI_Comm_size(local, &local_ranks);
  MPI_Comm_free(&local);
  return std::max(1, cores / std::max(1, local_ranks));
}

#else  // no MPI: one process

MpiSession::MpiSession(int&, char**&) {}
void broadcast_from_root(std::vector<char>&) {}
namespace {
bool all_ranks(bool value) {
  return value;
}
}  // namespace
MpiSession::~MpiSession() = default;
int mpi_rank() {
  return 0;
}
int mpi_size() {
  return 1;
}
int threads_per_rank() {
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

#endif

void on_every_rank(const std::function<void()>& step) {
  std::exception_ptr failure;
  try {
    step();
  } catch (...) {
    failure = std::current_exception();
  }
  if (all_ranks(!failure)) return;
  if (failure) std::rethrow_exception(failure);
  throw std::invalid_argument("another rank failed (its message names it); stopping");
}

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(variable)) return true;
  return false;
}

DistributionSummary run_points(const std::vector<std::size_t>& points, const EvaluatePoint& evaluate,
                               const std::function<void(std::size_t, const PointRows&)>& on_done,
                               const DistributionOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  DistributionSummary summary;
#ifdef NYSTROM_WITH_MPI
  if (mpi_rank() != 0) {
    run_worker(evaluate, options.poll_interval);
    summary.seconds = seconds_since(start);
    return summary;
  }
#endif
  summary = run_coordinator(points, evaluate, on_done, options);
  summary.seconds = seconds_since(start);
  return summary;
}

}  // namespace nystrom::cli
