#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <iterator>
#include <stdexcept>
#include <thread>
#include <vector>

#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

// First in the file: doctest runs the cases in file order, and this one counts the process's threads before
// any OpenMP region has started the OpenMP pool (ctest runs each case in a process of its own anyway).
TEST_CASE("set_threads stops OpenBLAS's worker pool, BlasThreads restarts it and stops it again") {
  const auto running_threads = [] {
    return std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                         std::filesystem::directory_iterator());
  };
  const int before = threads();
  set_threads(2);  // no OpenMP region has run in this process yet: only the calling thread is left
  CHECK(running_threads() == 1);
  {
    const BlasThreads blas(2);
    const Matrix<double> a = Matrix<double>::Random(512, 512);
    const Matrix<double> b = a * a;  // a threaded GEMM (on a machine with two cores or more)
    CHECK(b.allFinite());
  }
  CHECK(running_threads() == 1);
  set_threads(before);
}

TEST_CASE("set_threads sets the OpenMP count and rejects counts below one or above max_threads") {
  const int before = threads();
  set_threads(1);
  CHECK(threads() == 1);
  CHECK(throws_naming([] { set_threads(0); }, "0"));
  CHECK(throws_naming([] { set_threads(-3); }, "-3"));
  CHECK(throws_naming([] { set_threads(max_threads + 1); }, std::to_string(max_threads + 1)));
  CHECK(threads() == 1);
  set_threads(before);
  CHECK(threads() == before);
}

TEST_CASE("run_concurrently runs both tasks at once, splits the threads and rethrows after both finish") {
  const int before = threads();
  set_threads(3);
  int main_threads = 0, side_threads = 0;
  std::thread::id main_id, side_id;
  // Each task waits for the other's signal: run one after the other, both would time out.
  std::promise<void> main_started, side_started;
  bool main_saw_side = false, side_saw_main = false;
  run_concurrently(
      [&] {
        main_threads = threads();
        main_id = std::this_thread::get_id();
        main_started.set_value();
        main_saw_side =
            side_started.get_future().wait_for(std::chrono::seconds(20)) == std::future_status::ready;
      },
      [&] {
        side_threads = threads();
        side_id = std::this_thread::get_id();
        side_started.set_value();
        side_saw_main =
            main_started.get_future().wait_for(std::chrono::seconds(20)) == std::future_status::ready;
      });
  CHECK(main_saw_side);
  CHECK(side_saw_main);
  CHECK(main_id == std::this_thread::get_id());
  CHECK(side_id != main_id);
  CHECK(main_threads == 2);
  CHECK(side_threads == 1);
  CHECK(threads() == 3);

  bool side_finished = false;
  CHECK(throws_naming(
      [&] {
        run_concurrently([] { throw std::invalid_argument("main failed"); }, [&] { side_finished = true; });
      },
      "main failed"));
  CHECK(side_finished);
  CHECK(threads() == 3);
  CHECK(throws_naming([] { run_concurrently([] {}, [] { throw std::invalid_argument("side failed"); }); },
                      "side failed"));
  CHECK(throws_naming(
      [] {
        run_concurrently([] { throw std::invalid_argument("main first"); },
                         [] { throw std::invalid_argument("side second"); });
      },
      "main first"));

  set_threads(1);  // one thread: main task, then side task, both on the calling thread
  std::vector<std::thread::id> order;
  std::vector<int> counts;
  run_concurrently(
      [&] {
        order.push_back(std::this_thread::get_id());
        counts.push_back(threads());
      },
      [&] {
        order.push_back(std::this_thread::get_id());
        counts.push_back(threads());
      });
  CHECK(order == std::vector<std::thread::id>(2, std::this_thread::get_id()));
  CHECK(counts == std::vector<int>{1, 1});

  set_threads(2);  // inside a parallel region: one after the other on the region's own thread
  std::vector<std::thread::id> inside(2);
  std::thread::id region_thread;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    {
      region_thread = std::this_thread::get_id();
      run_concurrently([&] { inside[0] = std::this_thread::get_id(); },
                       [&] { inside[1] = std::this_thread::get_id(); });
    }
  }
  CHECK(inside == std::vector<std::thread::id>(2, region_thread));
  set_threads(before);
}

TEST_CASE("PanelSchedule: each thread takes its own range in order, then the others' from their ends") {
  // Outside a parallel region the caller is thread 0 and takes every panel: its range [0, 2), then the
  // last panels left in the ranges [2, 4) and [4, 7) of threads 1 and 2.
  detail::PanelSchedule schedule(7, 3);
  std::vector<std::ptrdiff_t> order;
  schedule.for_each([&](std::ptrdiff_t p) { order.push_back(p); });
  CHECK(order == std::vector<std::ptrdiff_t>{0, 1, 3, 2, 6, 5, 4});
  CHECK(throws_naming([] { detail::PanelSchedule(-1, 2); }, "-1"));
}

TEST_CASE("PanelSchedule: every panel runs exactly once, whatever the team and its speed") {
  for (std::ptrdiff_t count : {0, 1, 2, 5, 16, 17, 1000}) {
    for (int threads : {1, 2, 3, 7}) {
      for (int team : {1, 2, 3}) {
        CAPTURE(count);
        CAPTURE(threads);
        CAPTURE(team);
        std::vector<std::atomic<int>> runs(static_cast<std::size_t>(count));
        detail::PanelSchedule schedule(count, threads);
#pragma omp parallel num_threads(team)
        schedule.for_each([&](std::ptrdiff_t p) { runs[static_cast<std::size_t>(p)].fetch_add(1); });
        int wrong = 0;
        for (const auto& r : runs) wrong += r.load() != 1;
        CHECK(wrong == 0);
      }
    }
  }
  // A thread held up in a panel of its own range: the other thread runs every other panel meanwhile.
  const std::ptrdiff_t count = 16;
  detail::PanelSchedule schedule(count, 2);
  std::atomic<int> done{0};
  std::atomic<bool> waited_out{true};
  std::vector<std::atomic<int>> runs(count);
#pragma omp parallel num_threads(2)
  schedule.for_each([&](std::ptrdiff_t p) {
    if (p == count / 2) {  // thread 1's first panel, unless thread 0 got there first
      const auto start = std::chrono::steady_clock::now();
      while (done.load() < count - 1)
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(20)) {
          waited_out = false;
          break;
        }
    }
    runs[static_cast<std::size_t>(p)].fetch_add(1);
    done.fetch_add(1);
  });
  CHECK(waited_out.load());
  CHECK(done.load() == count);
  int wrong = 0;
  for (const auto& r : runs) wrong += r.load() != 1;
  CHECK(wrong == 0);
}
