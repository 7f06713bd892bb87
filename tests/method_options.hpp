#pragma once
/// @file method_options.hpp
/// The methods of approximation.hpp and small options for every one of them, shared by the method tests.

#include "nystrom/approximation.hpp"
#include "nystrom/head.hpp"
#include "test_support.hpp"

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

/// A head of Gaussian tokens: Q and K N(0, scale²) (N×d), V N(0, 1) (N×dv), seeded.
template <class T>
Head<T> random_head(Index n, Index d, Index dv, std::uint64_t seed, double scale = 0.8) {
  Head<T> head;
  head.q = random_matrix<T>(n, d, seed, scale);
  head.k = random_matrix<T>(n, d, seed + 1, scale);
  head.v = random_matrix<T>(n, dv, seed + 2);
  return head;
}

}  // namespace nystrom::test
