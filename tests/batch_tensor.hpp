#pragma once
/// @file batch_tensor.hpp
/// Seeded [B, H, N, dim] tensors in the dump layout (row-major contiguous) for the batched tests.

#include <cstdint>
#include <vector>

#include "nystrom/batched.hpp"
#include "test_support.hpp"

namespace nystrom::test {

/// A [B, H, N, dim] tensor of seeded N(0, scale²) values, row-major contiguous, with its views.
template <class T>
struct Tensor {
  std::vector<T> values;
  Index batch, heads, tokens, dim;

  Tensor(Index b, Index h, Index n, Index d, std::uint64_t seed, double scale = 1)
      : batch(b), heads(h), tokens(n), dim(d) {
    const Matrix<T> random = random_matrix<T>(b * h * n * d, 1, seed, scale);
    values.assign(random.data(), random.data() + random.size());
  }
  /// B, H and N of `shape` with `d` values per token.
  Tensor(const BatchShape& shape, Index d, std::uint64_t seed, double scale = 1)
      : Tensor(shape.batch, shape.heads, shape.tokens, d, seed, scale) {}
  BatchView<const T> view() const { return {values.data(), batch, heads, tokens, dim}; }
  BatchView<T> view() { return {values.data(), batch, heads, tokens, dim}; }
  /// Head i as a column-major N×dim matrix.
  Matrix<T> head(Index i) const { return view().head(i); }
};

}  // namespace nystrom::test
