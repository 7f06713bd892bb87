#pragma once
/// @file spectral_impl.hpp
/// Spectra glue for spectral.hpp: the Gram operator AᵀA / AAᵀ of any operator (operators.hpp) in double, and
/// the Lanczos driver. Included by spectral.hpp; not a public header of its own.

#include <Spectra/SymEigsSolver.h>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <limits>
#include <type_traits>

#include "nystrom/error.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

namespace detail {

template <class Op>
concept HasOuterGram = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y) {
  op.perform_outer_gram_op(x, y);
};

template <class Op>
concept HasInnerGram = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y) {
  op.perform_inner_gram_op(x, y);
};

/// The symmetric positive semidefinite Gram operator of `op` on its smaller side (AAᵀ when rows ≤ cols, else
/// AᵀA), in double for Spectra whatever the operator's scalar; counts the operator products it spends.
template <class Operator>
class GramOperator {
 public:
  using Scalar = double;
  using OpScalar = typename Operator::Scalar;

  explicit GramOperator(const Operator& op)
      : op_(op),
        outer_(op.rows() <= op.cols()),
        in_(size()),
        out_(size()),
        middle_(outer_ ? op.cols() : op.rows()) {}

  Index rows() const { return outer_ ? op_.rows() : op_.cols(); }
  Index cols() const { return rows(); }
  Index size() const { return rows(); }
  int products() const { return products_; }

  /// y = AAᵀx or AᵀAx.
  void perform_op(const double* x, double* y) const {
    in_ = Eigen::Map<const Vector<double>>(x, size()).template cast<OpScalar>();
    if (outer_) {
      if constexpr (HasOuterGram<Operator>) {
        op_.perform_outer_gram_op(in_.data(), out_.data());
      } else {
        op_.perform_transpose_op(in_.data(), middle_.data());
        op_.perform_op(middle_.data(), out_.data());
      }
    } else {
      if constexpr (HasInnerGram<Operator>) {
        op_.perform_inner_gram_op(in_.data(), out_.data());
      } else {
        op_.perform_op(in_.data(), middle_.data());
        op_.perform_transpose_op(middle_.data(), out_.data());
      }
    }
    products_ += 2;
    Eigen::Map<Vector<double>>(y, size()) = out_.template cast<double>();
  }

 private:
  const Operator& op_;
  bool outer_;
  mutable Vector<OpScalar> in_, out_, middle_;
  mutable int products_ = 0;
};

/// The operator as a dense matrix in double, formed column by column from its products (small sizes only).
template <class Operator>
Matrix<double> materialize(const Operator& op, int& products) {
  using OpScalar = typename Operator::Scalar;
  const bool by_columns = op.cols() <= op.rows();
  const Index count = by_columns ? op.cols() : op.rows();
  Matrix<double> dense(op.rows(), op.cols());
  Vector<OpScalar> unit = Vector<OpScalar>::Zero(count);
  Vector<OpScalar> image(by_columns ? op.rows() : op.cols());
  for (Index j = 0; j < count; ++j) {
    unit(j) = 1;
    if (by_columns) {
      op.perform_op(unit.data(), image.data());
      dense.col(j) = image.template cast<double>();
    } else {
      op.perform_transpose_op(unit.data(), image.data());
      dense.row(j) = image.template cast<double>().transpose();
    }
    unit(j) = 0;
  }
  products += static_cast<int>(count);
  return dense;
}

}  // namespace detail

template <class Operator>
SpectralResult top_singular_values(const Operator& op, Index k, const SpectralOptions& options) {
  options.validate();
  const Index n = std::min(op.rows(), op.cols());
  require(k >= 1 && k <= n,
          describe("top_singular_values: k = ", k, " must be in [1, min(rows, cols) = ", n, "]"));
  const Index default_basis = std::max<Index>(2 * k + 1, 10);
  const Index basis =
      std::min<Index>(options.subspace > 0 ? std::max<Index>(options.subspace, k + 1) : default_basis, n);
  SpectralResult result;
  if (basis <= k || basis >= n) {
    // The Krylov basis would span the whole Gram matrix: a full SVD of the formed operator is cheaper and
    // exact.
    const Matrix<double> dense = detail::materialize(op, result.matvecs);
    result.values = Eigen::BDCSVD<Matrix<double>>(dense).singularValues().head(k);
    result.converged = true;
    return result;
  }
  detail::GramOperator<Operator> gram(op);
  Spectra::SymEigsSolver<detail::GramOperator<Operator>> eigs(gram, k, basis);
  eigs.init();
  eigs.compute(Spectra::SortRule::LargestAlge, options.max_restarts, options.tolerance,
               Spectra::SortRule::LargestAlge);
  result.converged = eigs.info() == Spectra::CompInfo::Successful;
  result.matvecs = gram.products();
  const Vector<double> eigenvalues = eigs.eigenvalues();
  result.values = eigenvalues.cwiseMax(0.0).cwiseSqrt();
  if (!result.converged && result.values.size() < k) {
    // Spectra returns only the converged pairs; report the rest as NaN so the caller sees what is missing.
    Vector<double> padded = Vector<double>::Constant(k, std::numeric_limits<double>::quiet_NaN());
    padded.head(result.values.size()) = result.values;
    result.values = padded;
  }
  return result;
}

template <class Operator>
SpectralResult spectral_norm(const Operator& op, const SpectralOptions& options) {
  return top_singular_values(op, 1, options);
}

}  // namespace nystrom
