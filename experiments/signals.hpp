#pragma once
/// @file signals.hpp
/// SIGINT and SIGTERM as a request to stop a long run between two units of work (a sweep between points), so
/// that every finished result stays readable (docs/formats.md §2).

namespace nystrom::cli {

/// While alive, SIGINT and SIGTERM only record that a stop was requested; the previous handlers come back on
/// destruction.
class StopOnSignals {
 public:
  StopOnSignals();
  ~StopOnSignals();
  StopOnSignals(const StopOnSignals&) = delete;
  StopOnSignals& operator=(const StopOnSignals&) = delete;

  /// The signal received since construction (0: none).
  int received() const;
};

}  // namespace nystrom::cli
