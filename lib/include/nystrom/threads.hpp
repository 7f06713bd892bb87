#pragma once
/// @file threads.hpp
/// Thread control. OpenMP is the library's one thread pool: every parallel loop is an OpenMP region with
/// single-threaded BLAS inside (large kernel blocks, exact and PnP-Nystra attention, matrix-free passes,
/// large stored products). OpenBLAS's own pthread workers stay off, from the moment the library loads (so
/// that results do not depend on which of its workers were free: its threaded kernels split their sums by
/// them): after each threaded call they spin for a
/// long time and stall the next OpenMP region on a 2-core machine (one N = 1024 sweep point with 2 threads:
/// head reference 9.5 ms and point 7.8 ms with 2 OpenBLAS threads, 5.6 ms and 3.0 ms with 1; oversubscription
/// inside regions measured 4× slower).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace nystrom {

namespace detail {

/// Products below this many multiply-adds (about half a millisecond on one core) run on one thread. A
/// parallel region costs microseconds on an idle machine, but when another process holds a core its barrier
/// waits for a scheduler time slice (milliseconds): Lanczos on a stored 1040×1040 matrix (1.1M multiply-adds
/// per product, hundreds of products) measured 30 ms on one thread and 1.1 s on two with one busy core.
constexpr double parallel_work = 1 << 22;

/// OpenMP threads for `panels` panels of work costing `work` multiply-adds: one below parallel_work, else
/// threads() but no more than the panels.
int workers_for(std::ptrdiff_t panels, double work);

/// Contiguous groups of panels for a sum over panels (a product Gᵀu over row panels): each group's panels are
/// added in order into the group's own partial sum, a thread takes a whole group, and the partials are added
/// in group order. The bits then do not depend on which thread ran what: a pass gives the same result on
/// every run, and on any thread count up to reduction_group_count (a per-thread partial under a dynamic
/// schedule varied in the last digits from run to run). Beyond that there is one group per thread.
constexpr std::ptrdiff_t reduction_group_count = 16;

/// The groups for `panels` panels: min(panels, max(reduction_group_count, threads())).
std::ptrdiff_t reduction_groups(std::ptrdiff_t panels);

/// First panel of group g of `groups` over `panels` panels (g = groups gives `panels`).
inline std::ptrdiff_t group_start(std::ptrdiff_t g, std::ptrdiff_t groups, std::ptrdiff_t panels) {
  return g * panels / groups;
}

/// Panels [0, count) handed out to the threads of an OpenMP parallel region. Thread t of T first takes, in
/// order, the panels of its own contiguous range [t·count/T, (t+1)·count/T), then the last panels left in
/// the other threads' ranges. Loops with the same count and team give each thread the same range, so what
/// one loop writes for a panel is still in that core's caches when the next loop reads it: with OpenMP's
/// dynamic schedule, whose panel-to-thread map changes from loop to loop, PnP-Nystra at N = 4096 on two
/// threads took 0.33 ms, with these ranges 0.29 ms. The stealing keeps what a dynamic schedule is for: the
/// panels of a thread that another process keeps off its core are taken by the others, so the loop waits
/// only for the panel that thread holds (and the region's closing barrier for the thread itself). Every panel
/// runs exactly once, whichever thread runs it; a team smaller than `threads` leaves the missing threads'
/// ranges to be stolen.
///
/// Construct one per loop outside the region (shared by the team), then call for_each from every thread of
/// the region. for_each ends without a barrier.
class PanelSchedule {
 public:
  /// Throws std::invalid_argument unless 0 ≤ count < 2³².
  PanelSchedule(std::ptrdiff_t count, int threads);
  PanelSchedule(const PanelSchedule&) = delete;
  PanelSchedule& operator=(const PanelSchedule&) = delete;

  /// Runs body(p) for each panel p the calling thread takes.
  template <class Body>
  void for_each(Body&& body) {
    const int own = team_thread() % teams();
    for (std::ptrdiff_t p; (p = take(own, true)) >= 0;) body(p);
    for (int k = 1; k < teams(); ++k)
      for (std::ptrdiff_t p; (p = take((own + k) % teams(), false)) >= 0;) body(p);
  }

 private:
  /// [first, end) of one thread's range, in one word so that its owner and a thief never take the same
  /// panel; a cache line each.
  struct alignas(64) Range {
    std::atomic<std::uint64_t> bounds{0};
  };

  int teams() const { return static_cast<int>(ranges_.size()); }
  /// The calling thread's number in its OpenMP team (0 outside a region).
  static int team_thread();
  /// The first (owner) or last (thief) panel left in range r, or −1 when it is empty.
  std::ptrdiff_t take(int r, bool first);

  std::vector<Range> ranges_;
};

}  // namespace detail

/// The most threads set_threads accepts. OpenMP aborts the process when it cannot start a thread (a sweep
/// asked for 40,000 ended in std::terminate), so counts far beyond any machine's cores are refused up front.
constexpr int max_threads = 1024;

/// Sets the number of OpenMP threads and keeps OpenBLAS single-threaded, stopping the worker pool OpenBLAS
/// starts when it loads (its idle workers busy-wait ~0.1 s first, beside our threads); throws
/// std::invalid_argument naming `threads` unless 1 ≤ threads ≤ max_threads (callers map a CLI "0: the
/// default" themselves).
void set_threads(int threads);

/// Number of OpenMP threads the library's parallel loops use.
int threads();

/// Runs `main_task` on the calling thread and `side_task` on a thread of its own at the same time, then
/// returns; with threads() == 1, or inside an OpenMP parallel region, it runs main_task, then side_task. The
/// side task is meant to be single-threaded work (it gets one OpenMP thread), the main task keeps threads() −
/// 1; coarse tasks like these never leave OpenMP workers spinning beside serial code. If a task throws, the
/// exception is rethrown (main_task's first) after both have finished.
void run_concurrently(const std::function<void()>& main_task, const std::function<void()>& side_task);

/// Name of the OpenBLAS core kernel set in use (e.g. "SkylakeX", "Haswell"), or "Eigen" without OpenBLAS.
std::string blas_core();

/// RAII guard: while alive, OpenBLAS runs on `count` threads (≥ 1), then returns to its previous count. For
/// measurements that want BLAS's own threading (the GEMM reference rate of `nystrom bench`).
class BlasThreads {
 public:
  explicit BlasThreads(int count);
  ~BlasThreads();
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int count_;
  int previous_;
};

/// RAII guard: while alive, OpenBLAS runs single-threaded (use around `#pragma omp parallel` regions that
/// call BLAS, so they stay safe for callers that did not go through set_threads).
class SingleThreadedBlas : public BlasThreads {
 public:
  SingleThreadedBlas() : BlasThreads(1) {}
};

}  // namespace nystrom
