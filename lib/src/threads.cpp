#include "nystrom/threads.hpp"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <limits>
#include <thread>

#include "nystrom/error.hpp"

#ifdef NYSTROM_WITH_OPENBLAS
extern "C" {
void openblas_set_num_threads(int);
int openblas_get_num_threads(void);
char* openblas_get_corename(void);
int blas_thread_shutdown_(void);
}
#endif

namespace nystrom {

namespace {

/// OpenBLAS on one thread, with its worker pool stopped. The pthread build starts the pool when the library
/// loads, and an idle worker busy-waits about 2^28 cycles (~0.1 s) before it sleeps: the whole of a small
/// sweep, on the core the library's own threads need (one N = 1024 sweep point on two threads measured 42 ms
/// instead of 22 ms in 5 runs of 8 while it spun). OpenBLAS starts the pool again when BlasThreads asks for
/// more threads. openblas_set_num_threads is called only to change the count: OpenBLAS 0.3.21 restarts a
/// stopped pool on every call (goto_set_num_threads), even one that keeps the count at 1.
void single_threaded_blas() {
#ifdef NYSTROM_WITH_OPENBLAS
  if (openblas_get_num_threads() != 1) openblas_set_num_threads(1);
  blas_thread_shutdown_();
#endif
}

/// The policy holds from the moment the library loads, for callers that never call set_threads (a C++
/// program, a test): with OpenBLAS's pool running, its threaded kernels split their sums by the workers free
/// at the time, so the same product gave other last bits from call to call (dsyevr of one 7×7 Gram matrix
/// on one thread, 3 ulps apart, with OpenBLAS 0.3.21's Prescott kernels on two cores).
[[maybe_unused]] const bool blas_single_threaded_at_load = (single_threaded_blas(), true);

}  // namespace

namespace detail {

int workers_for(std::ptrdiff_t panels, double work) {
  if (work < parallel_work) return 1;
  return static_cast<int>(
      std::max<std::ptrdiff_t>(1, std::min<std::ptrdiff_t>(panels, omp_get_max_threads())));
}

std::ptrdiff_t reduction_groups(std::ptrdiff_t panels) {
  return std::min<std::ptrdiff_t>(panels, std::max<std::ptrdiff_t>(reduction_group_count, threads()));
}

namespace {

std::uint64_t pack_range(std::ptrdiff_t first, std::ptrdiff_t end) {
  return static_cast<std::uint64_t>(first) | static_cast<std::uint64_t>(end) << 32;
}

}  // namespace

PanelSchedule::PanelSchedule(std::ptrdiff_t count, int threads)
    : ranges_(static_cast<std::size_t>(std::max(threads, 1))) {
  require(count >= 0 && count <= std::ptrdiff_t(std::numeric_limits<std::uint32_t>::max()),
          "PanelSchedule: count = ", count, " must lie in [0, 2^32)");
  const std::ptrdiff_t t_count = teams();
  for (std::ptrdiff_t t = 0; t < t_count; ++t)
    ranges_[static_cast<std::size_t>(t)].bounds.store(
        pack_range(t * count / t_count, (t + 1) * count / t_count), std::memory_order_relaxed);
}

int PanelSchedule::team_thread() {
  return omp_get_thread_num();
}

std::ptrdiff_t PanelSchedule::take(int r, bool first) {
  std::atomic<std::uint64_t>& bounds = ranges_[static_cast<std::size_t>(r)].bounds;
  std::uint64_t current = bounds.load(std::memory_order_relaxed);
  for (;;) {
    const auto begin = static_cast<std::ptrdiff_t>(current & 0xffffffffu);
    const auto end = static_cast<std::ptrdiff_t>(current >> 32);
    if (begin >= end) return -1;
    const std::uint64_t next = first ? pack_range(begin + 1, end) : pack_range(begin, end - 1);
    // Claiming is all the atomic orders: the panels write disjoint memory, and the region's closing barrier
    // publishes them.
    if (bounds.compare_exchange_weak(current, next, std::memory_order_relaxed))
      return first ? begin : end - 1;
  }
}

}  // namespace detail

void set_threads(int threads) {
  require(threads >= 1 && threads <= max_threads, "set_threads: threads = ", threads, " must lie in [1, ",
          max_threads, "]");
  omp_set_num_threads(threads);
  single_threaded_blas();
}

int threads() {
  return omp_get_max_threads();
}

void run_concurrently(const std::function<void()>& main_task, const std::function<void()>& side_task) {
  const int total = threads();
  if (total < 2 || omp_in_parallel()) {  // inside a caller's parallel region its threads are already busy
    main_task();
    side_task();
    return;
  }
  std::exception_ptr side_error;
  std::thread side([&] {
    try {
      omp_set_num_threads(1);  // a new thread starts from OpenMP's default count, not the caller's
      side_task();
    } catch (...) {
      side_error = std::current_exception();
    }
  });
  std::exception_ptr main_error;
  omp_set_num_threads(total - 1);
  try {
    main_task();
  } catch (...) {
    main_error = std::current_exception();
  }
  omp_set_num_threads(total);
  side.join();
  if (main_error) std::rethrow_exception(main_error);
  if (side_error) std::rethrow_exception(side_error);
}

std::string blas_core() {
#ifdef NYSTROM_WITH_OPENBLAS
  return openblas_get_corename();
#else
  return "Eigen";
#endif
}

BlasThreads::BlasThreads(int count) : count_(count) {
  require(count >= 1, "BlasThreads: count = ", count, " must be >= 1");
#ifdef NYSTROM_WITH_OPENBLAS
  // A guard that keeps the count calls nothing: with the pool stopped, openblas_set_num_threads(1) would
  // start a worker thread that the destructor's shutdown then joins, in every guarded call (0.6 ms each
  // measured with other jobs on both cores), and beside two OpenMP threads that worker takes a core.
  previous_ = openblas_get_num_threads();
  // Already at `count` (the usual case after set_threads): nothing to change. Setting it anyway restarts
  // OpenBLAS's stopped worker pool, one thread per guard, which then spins beside ours.
  if (previous_ != count) openblas_set_num_threads(count);
#else
  previous_ = count;
#endif
}

BlasThreads::~BlasThreads() {
#ifdef NYSTROM_WITH_OPENBLAS
  if (previous_ == count_) return;
  if (previous_ == 1)
    single_threaded_blas();
  else
    openblas_set_num_threads(previous_);
#endif
}

}  // namespace nystrom
