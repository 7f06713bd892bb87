#pragma once
/// @file attention_oracles.hpp
/// Slow, obviously correct dense oracles for the attention approximations (docs/mathematics.md §6), in double
/// by naive loops.

#include <cmath>
#include <vector>

#include "nystrom/types.hpp"

namespace nystrom::test {

/// softmax_j(s · x_iᵀ y_j) by a naive double loop, in double.
inline Matrix<double> naive_softmax(const Matrix<double>& X, const Matrix<double>& Y, double scale) {
  Matrix<double> out(X.rows(), Y.rows());
  for (Index i = 0; i < X.rows(); ++i) {
    double row_max = -INFINITY;
    for (Index j = 0; j < Y.rows(); ++j) {
      double dot = 0;
      for (Index c = 0; c < X.cols(); ++c) dot += X(i, c) * Y(j, c);
      out(i, j) = scale * dot;
      row_max = std::max(row_max, out(i, j));
    }
    double sum = 0;
    for (Index j = 0; j < Y.rows(); ++j) sum += (out(i, j) = std::exp(out(i, j) - row_max));
    for (Index j = 0; j < Y.rows(); ++j) out(i, j) /= sum;
  }
  return out;
}

/// Exact softmax attention S V in double, from inputs of any scalar type.
template <class DerivedQ, class DerivedK, class DerivedV>
Matrix<double> naive_attention(const Eigen::MatrixBase<DerivedQ>& Q, const Eigen::MatrixBase<DerivedK>& K,
                               const Eigen::MatrixBase<DerivedV>& V, double scale) {
  return naive_softmax(Q.template cast<double>(), K.template cast<double>(), scale) *
         V.template cast<double>();
}

/// Means of m contiguous segments of the rows of X; the first (s+1)m − N have s = ⌊N/m⌋ rows, the rest s+1.
inline Matrix<double> naive_segment_means(const Matrix<double>& X, Index m) {
  const Index n = X.rows(), s = n / m, short_segments = (s + 1) * m - n;
  Matrix<double> out = Matrix<double>::Zero(m, X.cols());
  Index row = 0;
  for (Index segment = 0; segment < m; ++segment) {
    const Index length = segment < short_segments ? s : s + 1;
    for (Index r = 0; r < length; ++r, ++row) out.row(segment) += X.row(row);
    out.row(segment) /= static_cast<double>(length);
  }
  return out;
}

/// The rows of X at `indices`.
inline Matrix<double> rows_at(const Matrix<double>& X, const std::vector<Index>& indices) {
  Matrix<double> out(static_cast<Index>(indices.size()), X.cols());
  for (size_t i = 0; i < indices.size(); ++i) out.row(static_cast<Index>(i)) = X.row(indices[i]);
  return out;
}

}  // namespace nystrom::test
