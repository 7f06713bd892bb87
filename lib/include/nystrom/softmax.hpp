#pragma once
/// @file softmax.hpp
/// Row-wise softmax with the per-row max shift, shared by the attention-type approximations
/// (docs/mathematics.md §6).

#include "nystrom/types.hpp"

namespace nystrom {

/// In place: logits(i, :) ← exp(logits(i, :) − max_j logits(i, j)) / Σ_j exp(logits(i, j) − max_j logits(i,
/// j)). Overflow-free for any finite logits. O(rows·cols).
template <class T>
void softmax_rows(MatrixRef<T> logits) {
  if (logits.cols() == 0) return;
  const Vector<T> row_max = logits.rowwise().maxCoeff();
  logits.colwise() -= row_max;
  logits = logits.array().exp().matrix();
  const Vector<T> inverse_sum = logits.rowwise().sum().cwiseInverse();
  logits = inverse_sum.asDiagonal() * logits;
}

/// softmax_rows(s · X Yᵀ) as a new rows(X)×rows(Y) matrix (X: n×d, Y: p×d). O(npd).
template <class T>
Matrix<T> softmax_logits(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, double scale) {
  Matrix<T> out(X.rows(), Y.rows());
  out.noalias() = (T(scale) * X) * Y.transpose();
  softmax_rows<T>(out);
  return out;
}

}  // namespace nystrom
