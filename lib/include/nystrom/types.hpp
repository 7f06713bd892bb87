#pragma once
/// @file types.hpp
/// Dense matrix aliases shared by the whole library. Token matrices (Q, K, V) hold one token per row: N×d.

#include <Eigen/Dense>

namespace nystrom {

using Index = Eigen::Index;

/// Column-major dense matrix of scalar T (float or double).
template <class T>
using Matrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;

/// Dense column vector of scalar T.
template <class T>
using Vector = Eigen::Matrix<T, Eigen::Dynamic, 1>;

/// Read-only view of any dense matrix expression (blocks, maps, matrices) without a copy.
template <class T>
using ConstMatrixRef = Eigen::Ref<const Matrix<T>>;

/// Writable view of a dense block.
template <class T>
using MatrixRef = Eigen::Ref<Matrix<T>>;

/// Row-major dense matrix of scalar T: one head of a [B, H, N, d] batch as numpy and torch hold it.
template <class T>
using RowMajorMatrix = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Read-only view of a row-major dense block without a copy.
template <class T>
using ConstRowMajorRef = Eigen::Ref<const RowMajorMatrix<T>>;

/// Read-only view of row-major memory with a row stride (a C-ordered numpy array or torch tensor, one head of
/// a [B, H, N, d] batch), for the entry points that read tokens in place. Unlike ConstRowMajorRef it never
/// binds to (and copies) a column-major matrix, so overloads on it and on ConstMatrixRef do not compete.
template <class T>
using ConstRowMajorMap = Eigen::Map<const RowMajorMatrix<T>, 0, Eigen::OuterStride<>>;

/// Writable view of a row-major dense block.
template <class T>
using RowMajorRef = Eigen::Ref<RowMajorMatrix<T>>;

}  // namespace nystrom
