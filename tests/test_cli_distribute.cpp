/// Dynamic work distribution (experiments/distribute.hpp). Runs as one process under plain ctest, and as a
/// real coordinator/worker run under `mpirun -n 2 test_cli_distribute` (every rank runs every test case in
/// the same order, as run_points is collective; the checks on delivered rows are made on rank 0).
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <stdexcept>
#include <thread>

#include "distribute.hpp"

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

}  // namespace

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
  const auto evaluate = [](std::size_t index) {
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

TEST_CASE("a failing point stops the run and is rethrown on rank 0, keeping std::invalid_argument") {
  ensure_mpi();
  std::vector<std::size_t> points(40);
  for (std::size_t i = 0; i < points.size(); ++i) points[i] = i;
  const auto evaluate = [](std::size_t index) {
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
    CHECK_THROWS_WITH_AS(run_points(points, rows_of, on_done), doctest::Contains("disk full"),
                         std::runtime_error);
  } else {
    CHECK_NOTHROW(run_points(points, rows_of, on_done));
  }
}

}  // namespace nystrom::cli
