#pragma once
/// @file random.hpp
/// Random numbers that are the same on every platform (internal): the library's draws come from
/// std::mt19937_64, whose stream the standard fixes, through these transforms, whose algorithms it does not
/// leave to the implementation (std::uniform_int_distribution, uniform_real_distribution and
/// normal_distribution differ between standard libraries).

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>

#include "nystrom/types.hpp"

namespace nystrom::detail {

/// A uniform integer in [0, bound) (bound ≥ 1) by rejection from one or more draws.
inline Index uniform_below(std::mt19937_64& engine, Index bound) {
  const auto range = static_cast<std::uint64_t>(bound);
  const std::uint64_t limit =
      std::numeric_limits<std::uint64_t>::max() - std::numeric_limits<std::uint64_t>::max() % range;
  std::uint64_t draw;
  do draw = engine();
  while (draw >= limit);
  return static_cast<Index>(draw % range);
}

/// A uniform double in [0, 1) from the top 53 bits of one draw.
inline double uniform_unit(std::mt19937_64& engine) {
  return static_cast<double>(engine() >> 11) * 0x1.0p-53;
}

/// A standard normal double by the Box–Muller transform of two uniform draws (the cosine branch; 1 − u keeps
/// the logarithm's argument in (0, 1]).
inline double standard_normal(std::mt19937_64& engine) {
  const double u = 1 - uniform_unit(engine), v = uniform_unit(engine);
  return std::sqrt(-2 * std::log(u)) * std::cos(2 * std::numbers::pi * v);
}

}  // namespace nystrom::detail
