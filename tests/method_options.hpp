#pragma once
/// @file method_options.hpp
/// The methods of approximation.hpp and small options for every one of them, shared by the method tests.

#include "nystrom/approximation.hpp"

namespace nystrom::test {

/// Every method of approximation.hpp.
inline constexpr Method methods[] = {
    Method::pnp_nystra, Method::nystromformer, Method::cur,  Method::symmetric_nystrom,
    Method::performer,  Method::linformer,     Method::exact};

/// Options of every method with m landmarks (r = 4m random features, k = m projections) and the kernel
/// exp(0.25·qᵀk).
inline ApproximationOptions small_options(Index m) {
  ApproximationOptions options;
  options.kernel = Kernel::exponential(0.25);
  options.pnp_nystra.landmarks.count = m;
  options.symmetric_nystrom.landmarks.count = m;
  options.nystromformer.landmarks = m;
  options.cur.selection.count = m;
  options.performer.features = 4 * m;
  options.linformer.projected = m;
  return options;
}

}  // namespace nystrom::test
