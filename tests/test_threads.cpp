#include <doctest/doctest.h>

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

TEST_CASE("set_threads sets the OpenMP count and rejects counts below one") {
  const int before = threads();
  set_threads(1);
  CHECK(threads() == 1);
  CHECK(throws_naming([] { set_threads(0); }, "0"));
  CHECK(throws_naming([] { set_threads(-3); }, "-3"));
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
