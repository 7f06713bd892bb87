#pragma once
/// @file error.hpp
/// Argument checking: programming and input errors throw std::invalid_argument with a message naming the
/// value; numerical outcomes (divergence, singular cores) are statuses in result structs, never exceptions.

#include <sstream>
#include <stdexcept>
#include <string>

namespace nystrom {

/// Builds a message from streamable parts: `describe("m = ", m, " exceeds N = ", n)`.
template <class... Parts>
std::string describe(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

/// Throws std::invalid_argument(describe(parts...)) unless `condition` holds:
/// `require(m <= n, "m = ", m, " exceeds N = ", n)`. The message is built only on failure (an ostringstream
/// per check cost 3–5% of a PnP-Nystra head at N = 4096).
template <class... Parts>
void require(bool condition, const Parts&... parts) {
  if (!condition) throw std::invalid_argument(describe(parts...));
}

/// True when every entry of the Eigen expression `x` is finite, in one vectorized pass: x·0 is 0 for a finite
/// entry and NaN for NaN or ±Inf, so the sum of x·0 is NaN exactly when some entry is not finite (Eigen's
/// allFinite() takes a scalar pass; this sum is memory-bound). Needs IEEE semantics (no -ffast-math).
template <class Derived>
bool all_finite(const Derived& x) {
  using Scalar = typename Derived::Scalar;
  const Scalar zeros = (x.array() * Scalar(0)).sum();
  return zeros == zeros;
}

/// Throws std::invalid_argument naming `what` unless every entry of `x` is finite.
template <class Derived>
void require_finite(const Derived& x, const std::string& what) {
  if (!all_finite(x)) throw std::invalid_argument(what + " contains non-finite values (NaN or Inf)");
}

}  // namespace nystrom
