#pragma once
/// @file power_of_two.hpp
/// Exact rescaling by powers of two, for computations whose intermediate values would over- or underflow at
/// the data's own scale (entries of 1e±250 in double, 1e±30 in float) but whose results scale with the data.

#include <Eigen/Core>
#include <cmath>

namespace nystrom {

/// The exponent p with 2ᵖ ≤ max|xᵢ| < 2ᵖ⁺¹, so that 2⁻ᵖX has its largest entry in [1, 2); 0 for a zero X and
/// for one with a non-finite entry (left to the caller's own check).
template <class Derived>
int largest_exponent(const Eigen::MatrixBase<Derived>& x) {
  if (x.size() == 0) return 0;
  const double largest = static_cast<double>(x.cwiseAbs().maxCoeff());
  return std::isfinite(largest) && largest > 0 ? std::ilogb(largest) : 0;
}

/// 2ᵉX entry by entry: exact wherever the result is a normal number.
template <class Derived>
auto times_power_of_two(const Eigen::MatrixBase<Derived>& x, int e) {
  using Scalar = typename Derived::Scalar;
  return x.unaryExpr([e](Scalar v) { return std::ldexp(v, e); });
}

}  // namespace nystrom
