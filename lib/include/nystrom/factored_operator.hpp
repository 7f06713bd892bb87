#pragma once
/// @file factored_operator.hpp
/// The N×N matrices the approximate attention methods imply, kept in factored form (docs/mathematics.md §6),
/// as operators of the concept in operators.hpp (rows() cols() perform_op perform_transpose_op), so spectral
/// errors ‖S − Ŝ‖₂ can be computed by Lanczos without forming N×N:
///   FactoredOperator     Ŝ = diag(row_scale) · L · M · R    (L: N×m, M: m×p or identity, R: p×N)
///   RowScaledOperator    diag(w) · A for any operator A      (exact S = D⁻¹G from a kernel operator of G)

#include <utility>

#include "nystrom/error.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Ŝ = diag(row_scale) · left · middle · right, applied right to left in O((rows + cols)·m) per product.
/// An empty `middle` is the identity; an empty `row_scale` is all ones.
template <class T>
class FactoredOperator {
 public:
  using Scalar = T;

  FactoredOperator() = default;
  /// Throws std::invalid_argument naming the mismatched shapes.
  FactoredOperator(Matrix<T> left, Matrix<T> middle, Matrix<T> right, Vector<T> row_scale = {})
      : left_(std::move(left)),
        middle_(std::move(middle)),
        right_(std::move(right)),
        row_scale_(std::move(row_scale)) {
    const Index inner = middle_.size() ? middle_.cols() : left_.cols();
    require(!middle_.size() || middle_.rows() == left_.cols(), "factored operator: middle has ",
            middle_.rows(), " rows, left has ", left_.cols(), " columns");
    require(right_.rows() == inner, "factored operator: right has ", right_.rows(), " rows, expected ",
            inner);
    require(!row_scale_.size() || row_scale_.size() == left_.rows(), "factored operator: row scale has ",
            row_scale_.size(), " entries, expected ", left_.rows());
  }

  Index rows() const { return left_.rows(); }
  Index cols() const { return right_.cols(); }

  /// y = Ŝx (x: cols() entries, y: rows()).
  void perform_op(const T* x, T* y) const {
    Vector<T> inner = right_ * Eigen::Map<const Vector<T>>(x, cols());
    if (middle_.size()) inner = middle_ * inner;
    Eigen::Map<Vector<T>> out(y, rows());
    out.noalias() = left_ * inner;
    if (row_scale_.size()) out.array() *= row_scale_.array();
  }

  /// y = Ŝᵀx (x: rows() entries, y: cols()).
  void perform_transpose_op(const T* x, T* y) const {
    Vector<T> scaled = Eigen::Map<const Vector<T>>(x, rows());
    if (row_scale_.size()) scaled.array() *= row_scale_.array();
    Vector<T> inner = left_.transpose() * scaled;
    if (middle_.size()) inner = middle_.transpose() * inner;
    Eigen::Map<Vector<T>>(y, cols()).noalias() = right_.transpose() * inner;
  }

  /// Ŝ as a dense matrix (small N and tests only). O(N²m).
  Matrix<T> dense() const {
    Matrix<T> out = middle_.size() ? Matrix<T>(left_ * middle_ * right_) : Matrix<T>(left_ * right_);
    if (row_scale_.size()) out = row_scale_.asDiagonal() * out;
    return out;
  }

  const Matrix<T>& left() const { return left_; }
  const Matrix<T>& middle() const { return middle_; }
  const Matrix<T>& right() const { return right_; }
  const Vector<T>& row_scale() const { return row_scale_; }

 private:
  Matrix<T> left_, middle_, right_;
  Vector<T> row_scale_;
};

/// diag(weights) · A for an operator A (e.g. the exact attention matrix S = D⁻¹G with weights 1/(G1)).
template <class Operator>
class RowScaledOperator {
 public:
  using Scalar = typename Operator::Scalar;

  /// `weights` has one entry per row of `op`; `op` must outlive this operator.
  RowScaledOperator(const Operator& op, Vector<Scalar> weights) : op_(op), weights_(std::move(weights)) {
    require(weights_.size() == op_.rows(), "row-scaled operator: ", weights_.size(), " weights for ",
            op_.rows(), " rows");
  }
  Index rows() const { return op_.rows(); }
  Index cols() const { return op_.cols(); }
  void perform_op(const Scalar* x, Scalar* y) const {
    op_.perform_op(x, y);
    Eigen::Map<Vector<Scalar>>(y, rows()).array() *= weights_.array();
  }
  void perform_transpose_op(const Scalar* x, Scalar* y) const {
    const Vector<Scalar> scaled = Eigen::Map<const Vector<Scalar>>(x, rows()).cwiseProduct(weights_);
    op_.perform_transpose_op(scaled.data(), y);
  }

 private:
  const Operator& op_;
  Vector<Scalar> weights_;
};

}  // namespace nystrom
