#pragma once
/// @file wall_clock.hpp
/// Wall-time measurement inside the library (internal): the `*seconds` columns, PinvResult::seconds and the
/// backend's timings all use this clock.

#include <chrono>

namespace nystrom::detail {

using Clock = std::chrono::steady_clock;

/// Seconds from `start` to now.
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace nystrom::detail
