#pragma once
/// @file operator_concepts.hpp
/// The optional one-pass members of the operator concept (operators.hpp), detected at compile time by the
/// operators that compose others (DifferenceOperator) and by the Lanczos drivers (spectral.hpp).

#include <concepts>

#include "nystrom/types.hpp"

namespace nystrom::detail {

/// y = A Aᵀ x in one pass (x, y: rows).
template <class Op>
concept HasOuterGram = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y) {
  op.perform_outer_gram_op(x, y);
};

/// y = AᵀA x in one pass (x, y: cols).
template <class Op>
concept HasInnerGram = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y) {
  op.perform_inner_gram_op(x, y);
};

/// Gram products that subtract a vector inside the same pass (KernelOperator):
///   perform_inner_gram_residual_op(x, s, r, y): r = A x − s, y = Aᵀ r
///   perform_outer_gram_residual_op(x, s, r, y): r = Aᵀx − s, y = A r
template <class Op>
concept HasGramResidual = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y) {
  op.perform_inner_gram_residual_op(x, x, y, y);
  op.perform_outer_gram_residual_op(x, x, y, y);
};

/// Gram products of a block of `count` vectors in one pass (X, Y column-major): Y = A AᵀX (rows × count) and
/// Y = AᵀA X (cols × count). spectral.hpp's block Lanczos uses them.
template <class Op>
concept HasBlockGram = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y,
                                Index count) {
  op.perform_outer_gram_block_op(x, count, y);
  op.perform_inner_gram_block_op(x, count, y);
};

/// A one-pass product by [[0, A], [Aᵀ, 0]] (x, y: rows + cols).
template <class Op>
concept HasAugmentedProduct = requires(const Op& op, const typename Op::Scalar* x, typename Op::Scalar* y) {
  op.perform_augmented_op(x, y);
};

}  // namespace nystrom::detail
