#pragma once
/// @file progress.hpp
/// Progress report on stderr for long runs: a redrawn bar (points done/total, rate, ETA) when stderr is a
/// terminal, plain log lines (at most one every few seconds, and the last) otherwise.

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <string>

namespace nystrom::cli {

/// Counts finished points of a run and reports them.
class Progress {
 public:
  /// `total` points in the run, of which `already_done` were finished before it started (resumed runs).
  /// `quiet` suppresses every report; `terminal` selects the bar (default: whether stderr is a TTY).
  Progress(std::int64_t total, std::int64_t already_done, bool quiet, std::ostream& out);
  /// Marks one more point finished; `label` describes it (shown in the bar or the log line).
  void advance(const std::string& label);
  /// Ends the bar's line (if any) and prints a final summary.
  void finish(const std::string& summary);

 private:
  void report(const std::string& label, bool force);
  std::int64_t total_, done_, started_with_;
  bool quiet_, terminal_;
  std::ostream& out_;
  std::chrono::steady_clock::time_point start_, last_report_;
};

}  // namespace nystrom::cli
