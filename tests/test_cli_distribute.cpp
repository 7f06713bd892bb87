/// Dynamic work distribution (experiments/distribute.hpp). Runs as one process under plain ctest, and as a
/// real coordinator/worker run under `mpirun -n 2 test_cli_distribute` (every rank runs every test case in
/// the same order, as run_points is collective; the checks on delivered rows are made on rank 0).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "distribute.hpp"
#include "nystrom/threads.hpp"

namespace nystrom::cli {
namespace {

/// MPI for the whole executable (initialized on first use, finalized at exit); a no-op without MPI.
void ensure_mpi() {
  static int argc = 0;
  static char** argv = nullptr;
  static const MpiSession session(argc, argv);
}

/// The rows a point evaluates to: a function of the index only, in all three cell types.
PointRows rows_of(std::size_t index) {
  Row row{std::string("point-") + std::to_string(index), static_cast<std::int64_t>(index * index),
          std::sqrt(static_cast<double>(index))};
  PointRows rows{row};
  if (index % 5 == 0)
    rows.push_back(Row{std::string("extra"), std::int64_t{-1}, -0.5});  // a group of two rows
  return rows;
}

/// rows_of as run_points' evaluate, on any slot.
PointRows evaluate_rows(std::size_t index, std::size_t) {
  return rows_of(index);
}

/// The points `scheduler` hands out to `evaluator`, in order, until it has none for it.
std::vector<std::size_t> drain(PointScheduler& scheduler, int evaluator) {
  std::vector<std::size_t> taken;
  while (const auto next = scheduler.next(evaluator)) taken.push_back(*next);
  return taken;
}

/// True when every group appears in `groups` as one contiguous run (an evaluator never returns to a group it
/// left, so it builds each group's state once).
bool contiguous_runs(const std::vector<std::string>& groups) {
  std::set<std::string> left;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (left.count(groups[i])) return false;
    if (i + 1 < groups.size() && groups[i + 1] != groups[i]) left.insert(groups[i]);
  }
  return true;
}

}  // namespace

TEST_CASE("the scheduler without groups hands out points largest cost first, ties by index") {
  DistributionOptions options;
  options.estimated_cost = [](std::size_t index) { return double(index % 3); };
  PointScheduler scheduler({7, 0, 3, 5, 1, 4, 2}, options);
  CHECK(scheduler.unassigned() == 7);
  CHECK(drain(scheduler, 0) == std::vector<std::size_t>{2, 5, 1, 4, 7, 0, 3});
  CHECK(scheduler.unassigned() == 0);
  CHECK(scheduler.steals() == 0);
  PointScheduler uniform({3, 1, 2}, {});
  CHECK(drain(uniform, 0) == std::vector<std::size_t>{1, 2, 3});
  PointScheduler empty({}, options);
  CHECK_FALSE(empty.next(0).has_value());
}

TEST_CASE(
    "the scheduler keeps an evaluator in its group, claims groups largest first, steals only at the end") {
  // Groups g0 {0,3,6,9}, g1 {1,4,7,10}, g2 {2,5,8,11}; g2 costs 8, g0 and g1 4 each (tie: g0 has the first
  // point), so they go out g2, g0, g1.
  DistributionOptions options;
  options.group = [](std::size_t index) { return "g" + std::to_string(index % 3); };
  options.estimated_cost = [](std::size_t index) { return index % 3 == 2 ? 2.0 : 1.0; };
  std::vector<std::size_t> points(12);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i;
  PointScheduler scheduler(points, options);
  const int a = 0, b = 5;          // any ids
  CHECK(scheduler.next(a) == 2u);  // a claims g2, the largest
  CHECK(scheduler.next(b) == 0u);  // b claims g0: the next unclaimed, not a point of a's group
  CHECK(scheduler.next(a) == 5u);
  CHECK(scheduler.next(a) == 8u);
  CHECK(scheduler.next(b) == 3u);
  CHECK(scheduler.next(a) == 11u);
  CHECK(scheduler.next(a) == 1u);  // g2 done: a claims g1 rather than helping b with g0
  CHECK(scheduler.next(b) == 6u);
  CHECK(scheduler.next(b) == 9u);
  CHECK(scheduler.steals() == 0);
  CHECK(scheduler.next(b) == 10u);  // nothing unclaimed: b steals the end of g1 ({4, 7, 10} left)
  CHECK(scheduler.steals() == 1);
  CHECK(scheduler.next(a) == 4u);  // a keeps g1's order from the front
  CHECK(scheduler.next(b) == 7u);  // b goes on from the end
  CHECK(scheduler.steals() == 2);
  CHECK_FALSE(scheduler.next(a).has_value());
  CHECK_FALSE(scheduler.next(b).has_value());
  CHECK(scheduler.unassigned() == 0);
}

TEST_CASE("the scheduler leaves a group's last points to its owner below steal_minimum") {
  DistributionOptions options;
  options.group = [](std::size_t) { return std::string("one group"); };
  PointScheduler scheduler({0, 1, 2, 3}, options);  // steal_minimum 2 by default
  CHECK(scheduler.next(0) == 0u);
  CHECK(scheduler.next(0) == 1u);
  CHECK(scheduler.next(1) == 3u);              // two left: stolen from the end
  CHECK_FALSE(scheduler.next(2).has_value());  // one left: its holders take it
  CHECK(scheduler.next(0) == 2u);
  CHECK_FALSE(scheduler.next(1).has_value());

  options.steal_minimum = 1;
  PointScheduler eager({0, 1, 2}, options);
  CHECK(eager.next(0) == 0u);
  CHECK(eager.next(0) == 1u);
  CHECK(eager.next(1) == 2u);
  CHECK(eager.steals() == 1);
}

TEST_CASE("the scheduler rejects duplicate points and negative evaluator ids") {
  CHECK_THROWS_WITH_AS(PointScheduler({4, 2, 4}, {}), doctest::Contains("point 4"), std::invalid_argument);
  PointScheduler scheduler({1}, {});
  CHECK_THROWS_WITH_AS(scheduler.next(-1), doctest::Contains("-1"), std::invalid_argument);
}

TEST_CASE("the scheduler hands every point out once under random requests, with the affinity rules") {
  std::mt19937 random(11);
  for (int trial = 0; trial < 50; ++trial) {
    const std::size_t point_count = 1 + random() % 80, group_count = 1 + random() % 9;
    const int evaluator_count = 1 + int(random() % 4);
    std::vector<std::size_t> points;
    for (std::size_t i = 0; i < point_count; ++i)
      if (random() % 4 != 0) points.push_back(i);  // as after a resume
    std::shuffle(points.begin(), points.end(), random);
    std::vector<double> cost(point_count);
    for (auto& c : cost) c = double(random() % 5);
    std::vector<std::size_t> group_of(point_count);
    for (auto& g : group_of) g = random() % group_count;
    DistributionOptions options;
    options.group = [&](std::size_t index) { return std::to_string(group_of[index]); };
    options.estimated_cost = [&](std::size_t index) { return cost[index]; };
    options.steal_minimum = 1 + random() % 3;
    PointScheduler scheduler(points, options);

    // The oracle: groups by total cost, descending, ties by first point; points of a group ascending.
    std::map<std::size_t, std::vector<std::size_t>> members;
    std::map<std::size_t, double> total;
    for (const std::size_t index : points) {
      members[group_of[index]].push_back(index);
      total[group_of[index]] += cost[index];
    }
    for (auto& [group, list] : members) std::sort(list.begin(), list.end());
    std::vector<std::size_t> group_order;
    for (const auto& [group, list] : members) group_order.push_back(group);
    std::stable_sort(group_order.begin(), group_order.end(), [&](std::size_t x, std::size_t y) {
      return total[x] != total[y] ? total[x] > total[y] : members[x].front() < members[y].front();
    });

    std::map<std::size_t, int> owner;             // who claimed each group
    std::vector<std::size_t> claimed;             // groups in the order they were claimed
    std::map<int, std::vector<std::size_t>> got;  // per evaluator, in order
    std::set<int> finished;
    std::multiset<std::size_t> handed;
    while (int(finished.size()) < evaluator_count) {
      const int evaluator = int(random() % evaluator_count);
      const std::size_t before = scheduler.unassigned();
      const auto next = scheduler.next(evaluator);
      if (!next) {
        finished.insert(evaluator);  // once nothing, always nothing
        continue;
      }
      REQUIRE_FALSE(finished.count(evaluator));
      CHECK(scheduler.unassigned() == before - 1);
      const std::size_t group = group_of[*next];
      if (!owner.count(group)) {
        owner[group] = evaluator;
        claimed.push_back(group);
      } else if (owner[group] != evaluator &&
                 (got[evaluator].empty() || group_of[got[evaluator].back()] != group)) {
        CHECK(claimed.size() == members.size());  // a steal: only when every group is claimed
      }
      got[evaluator].push_back(*next);
      handed.insert(*next);
    }
    CHECK(scheduler.unassigned() == 0);
    CHECK(std::vector<std::size_t>(handed.begin(), handed.end()) == [&] {
      auto sorted = points;
      std::sort(sorted.begin(), sorted.end());
      return sorted;
    }());
    CHECK(claimed == group_order);
    for (const auto& [evaluator, list] : got) {
      std::vector<std::string> groups;
      for (const std::size_t index : list) groups.push_back(std::to_string(group_of[index]));
      CHECK(contiguous_runs(groups));
      // The owner of a group takes its points in index order, a thief from the end backwards.
      for (std::size_t i = 1; i < list.size(); ++i) {
        if (group_of[list[i]] != group_of[list[i - 1]]) continue;
        if (owner[group_of[list[i]]] == evaluator)
          CHECK(list[i] > list[i - 1]);
        else
          CHECK(list[i] < list[i - 1]);
      }
    }
    if (evaluator_count == 1) {  // one evaluator: exactly the oracle's order
      std::vector<std::size_t> expected;
      for (const std::size_t group : group_order)
        expected.insert(expected.end(), members[group].begin(), members[group].end());
      CHECK(got[0] == expected);
    }
  }
}

TEST_CASE("rows serialize and deserialize exactly, and malformed buffers are rejected") {
  const PointRows rows{Row{std::string("a,b"), std::int64_t{-7}, 1.0 / 3.0},
                       Row{std::string(""), std::int64_t{1} << 62, std::nan("")}, Row{}};
  const PointRows back = deserialize_rows(serialize_rows(rows));
  REQUIRE(back.size() == rows.size());
  CHECK(std::get<std::string>(back[0][0]) == "a,b");
  CHECK(std::get<std::int64_t>(back[0][1]) == -7);
  CHECK(std::get<double>(back[0][2]) == 1.0 / 3.0);
  CHECK(std::get<std::int64_t>(back[1][1]) == (std::int64_t{1} << 62));
  CHECK(std::isnan(std::get<double>(back[1][2])));
  CHECK(back[2].empty());
  std::vector<char> bytes = serialize_rows(rows);
  bytes.pop_back();
  CHECK_THROWS_AS(deserialize_rows(bytes), std::invalid_argument);
  bytes = serialize_rows(rows);
  bytes.push_back(0);
  CHECK_THROWS_AS(deserialize_rows(bytes), std::invalid_argument);
}

TEST_CASE(
    "run_points evaluates every point once, delivers its rows on rank 0, largest cost first in one process") {
  ensure_mpi();
  std::vector<std::size_t> points;
  for (std::size_t i = 0; i < 60; ++i)
    if (i % 9 != 4) points.push_back(i);  // as after a resume: some points already finished
  std::map<std::size_t, PointRows> delivered;
  std::vector<std::size_t> order;
  DistributionOptions options;
  options.estimated_cost = [](std::size_t index) { return double(index % 7); };
  const auto evaluate = [](std::size_t index, std::size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + index % 3));  // unequal costs
    return rows_of(index);
  };
  const DistributionSummary summary = run_points(
      points, evaluate,
      [&](std::size_t index, const PointRows& rows) {
        CHECK(delivered.count(index) == 0);
        delivered[index] = rows;
        order.push_back(index);
      },
      options);
  if (mpi_rank() != 0) {
    CHECK(delivered.empty());  // workers never call on_done
    return;
  }
  REQUIRE(delivered.size() == points.size());
  for (const std::size_t index : points) {
    REQUIRE(delivered.count(index) == 1);
    CHECK(serialize_rows(delivered[index]) == serialize_rows(rows_of(index)));
  }
  REQUIRE(summary.points_per_rank.size() == static_cast<std::size_t>(mpi_size()));
  std::size_t total = 0;
  for (const std::size_t count : summary.points_per_rank) total += count;
  CHECK(total == points.size());
  if (mpi_size() == 1) {
    // One process: exactly the schedule (cost descending, ties by index).
    for (std::size_t i = 1; i < order.size(); ++i) {
      const double previous = double(order[i - 1] % 7), current = double(order[i] % 7);
      CHECK((previous > current || (previous == current && order[i - 1] < order[i])));
    }
  } else {
    for (const std::size_t count : summary.points_per_rank) CHECK(count > 0);  // every rank did work
  }
}

TEST_CASE("run_points with groups: each process works through a group before it moves to another") {
  ensure_mpi();
  std::vector<std::size_t> points(48);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i;
  const auto group_name = [](std::size_t index) { return "head-" + std::to_string(index % 6); };
  DistributionOptions options;
  options.group = group_name;
  options.estimated_cost = [](std::size_t index) { return 1.0 + double(index % 6 == 4); };  // head-4 first
  // Only one thread per process evaluates (rank 0's evaluating thread, or a worker's main thread).
  std::vector<std::size_t> evaluated;
  const auto evaluate = [&](std::size_t index, std::size_t) {
    evaluated.push_back(index);
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + index % 2));
    return rows_of(index);
  };
  std::map<std::size_t, PointRows> delivered;
  const DistributionSummary summary = run_points(
      points, evaluate, [&](std::size_t index, const PointRows& rows) { delivered[index] = rows; }, options);
  std::vector<std::string> groups;
  for (const std::size_t index : evaluated) groups.push_back(group_name(index));
  CHECK(contiguous_runs(groups));
  if (mpi_rank() != 0) return;
  REQUIRE(delivered.size() == points.size());
  for (const std::size_t index : points)
    CHECK(serialize_rows(delivered.at(index)) == serialize_rows(rows_of(index)));
  if (mpi_size() == 1) {
    CHECK(summary.steals == 0);
    REQUIRE(evaluated.size() == points.size());
    CHECK(evaluated.front() == 4);  // the largest group first, in index order
    CHECK(evaluated[1] == 10);
  }
}

TEST_CASE("a failing point stops the run and is rethrown on rank 0, keeping std::invalid_argument") {
  ensure_mpi();
  std::vector<std::size_t> points(40);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i;
  const auto evaluate = [](std::size_t index, std::size_t) {
    if (index == 13) throw std::invalid_argument("point 13 has a bad value");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return rows_of(index);
  };
  std::size_t delivered = 0;
  const auto on_done = [&](std::size_t, const PointRows&) { ++delivered; };
  if (mpi_rank() == 0) {
    CHECK_THROWS_WITH_AS(run_points(points, evaluate, on_done), doctest::Contains("point 13 has a bad value"),
                         std::invalid_argument);
    CHECK(delivered < points.size());
  } else {
    CHECK_NOTHROW(run_points(points, evaluate, on_done));
  }
}

TEST_CASE("a failing writer stops the run and its own exception is rethrown on rank 0") {
  ensure_mpi();
  const std::vector<std::size_t> points{0, 1, 2, 3, 4, 5, 6, 7};
  const auto on_done = [](std::size_t index, const PointRows&) {
    if (index == 2) throw std::runtime_error("disk full");
  };
  if (mpi_rank() == 0) {
    CHECK_THROWS_WITH_AS(run_points(points, evaluate_rows, on_done), doctest::Contains("disk full"),
                         std::runtime_error);
  } else {
    CHECK_NOTHROW(run_points(points, evaluate_rows, on_done));
  }
}

TEST_CASE(
    "run_points on several threads: at the same time, one thread per slot, rows delivered on the caller") {
  ensure_mpi();
  const int before = threads();
  set_threads(2);
  std::vector<std::size_t> points(40);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i;
  const auto group_name = [](std::size_t index) { return "head-" + std::to_string(index % 5); };
  DistributionOptions options;
  options.group = group_name;
  options.evaluators = 3;
  // Recorded under a lock by the evaluating threads, checked afterwards (doctest's checks are not
  // thread-safe).
  std::mutex mutex;
  std::condition_variable entered;
  int inside = 0, most_inside = 0;
  bool slot_shared = false;
  std::vector<int> slot_inside(options.evaluators, 0);
  std::map<std::size_t, std::vector<std::string>> groups_of_slot;
  std::vector<int> thread_counts;
  const auto evaluate = [&](std::size_t index, std::size_t slot) {
    {
      std::unique_lock lock(mutex);
      if (slot >= slot_inside.size() || slot_inside[slot]++ > 0) slot_shared = true;
      groups_of_slot[slot].push_back(group_name(index));
      thread_counts.push_back(threads());
      most_inside = std::max(most_inside, ++inside);
      entered.notify_all();
      // Rank 0 starts all its slots at once: the first point waits (bounded) for a second one to start.
      if (mpi_rank() == 0) entered.wait_for(lock, std::chrono::seconds(10), [&] { return most_inside >= 2; });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + index % 3));
    std::lock_guard lock(mutex);
    --inside;
    if (slot < slot_inside.size()) --slot_inside[slot];
    return rows_of(index);
  };
  const auto caller = std::this_thread::get_id();
  bool on_caller = true;
  std::map<std::size_t, PointRows> delivered;
  const DistributionSummary summary = run_points(
      points, evaluate,
      [&](std::size_t index, const PointRows& rows) {
        on_caller = on_caller && std::this_thread::get_id() == caller;
        delivered[index] = rows;
      },
      options);
  set_threads(before);
  CHECK_FALSE(slot_shared);
  for (const auto& [slot, groups] : groups_of_slot) {
    CAPTURE(slot);
    CHECK(contiguous_runs(groups));
  }
  if (mpi_rank() != 0) return;
  CHECK(most_inside >= 2);
  CHECK(on_caller);
  // Three evaluators share two threads: one each, both to the last one left.
  REQUIRE_FALSE(thread_counts.empty());
  CHECK(thread_counts.front() == 1);
  for (const int count : thread_counts) CHECK((count == 1 || count == 2));
  REQUIRE(delivered.size() == points.size());
  for (const std::size_t index : points)
    CHECK(serialize_rows(delivered.at(index)) == serialize_rows(rows_of(index)));
  std::size_t total = 0;
  for (const std::size_t count : summary.points_per_rank) total += count;
  CHECK(total == points.size());
}

TEST_CASE(
    "run_points on several threads: a writer's stop is the last delivery, a failing point is rethrown") {
  ensure_mpi();
  std::vector<std::size_t> points(30);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i;
  DistributionOptions options;
  options.evaluators = 2;
  const auto evaluate = [](std::size_t index, std::size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1 + index % 2));
    return rows_of(index);
  };
  std::size_t calls = 0;
  const auto stop_at_third = [&](std::size_t, const PointRows&) {
    if (++calls == 3) throw std::runtime_error("stopped");
  };
  const auto failing = [](std::size_t index, std::size_t) {
    if (index == 7) throw std::invalid_argument("point 7 has a bad value");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return rows_of(index);
  };
  if (mpi_rank() == 0) {
    CHECK_THROWS_WITH_AS(run_points(points, evaluate, stop_at_third, options), "stopped", std::runtime_error);
    CHECK(calls == 3);  // the points still running when it stopped are not delivered
    calls = 0;
    CHECK_THROWS_WITH_AS(run_points(
                             points, failing, [&](std::size_t, const PointRows&) { ++calls; }, options),
                         doctest::Contains("point 7 has a bad value"), std::invalid_argument);
    CHECK(calls < points.size());
  } else {
    CHECK_NOTHROW(run_points(points, evaluate, stop_at_third, options));
    CHECK_NOTHROW(run_points(points, failing, stop_at_third, options));
  }
}

}  // namespace nystrom::cli
