#pragma once
/// @file softmax_panels.hpp
/// The thin softmax blocks of Nyströmformer, CUR attention and Linformer (internal to the library,
/// docs/mathematics.md §6) in panels of tokens over the threads (panels.hpp): F̃ = softmax(s·Q K̄ᵀ) (N×m) and B̃
/// = softmax(s·Q̄ Kᵀ) (m×N) with B̃V, and the output rows F̃ W. Every sum over N is added panel by panel in
/// order, so the results are the same bits on 1 and 2 threads.

#include "blas_gemm.hpp"
#include "nystrom/softmax.hpp"
#include "nystrom/types.hpp"
#include "panels.hpp"

namespace nystrom::detail {

/// softmax_rows(s·X Yᵀ) for many rows X (N×d) and few Y (m×d): N×m, row panels of X in parallel.
template <class T>
Matrix<T> tall_softmax(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, double scale) {
  Matrix<T> out(X.rows(), Y.rows());
  for_each_panel(X.rows(), double(X.rows()) * double(Y.rows()) * double(X.cols()), [&](const Panel& panel) {
    auto block = out.middleRows(panel.first, panel.rows);
    gemm<T>(Op::plain, Op::transposed, T(scale), X.middleRows(panel.first, panel.rows), Y, T(0), block);
    softmax_rows<T>(block);
  });
  return out;
}

/// R = softmax_rows(s·X Yᵀ) (m×N) and R V (m×dv) of wide_softmax.
template <class T>
struct WideSoftmax {
  Matrix<T> matrix;
  Matrix<T> times_values;
};

/// softmax_rows(s·X Yᵀ) for few rows X (m×d) and many Y (N×d), with `zero_keys` more keys of logit 0 (a zero
/// key, Nyströmformer's front padding) that enter the denominators only, and its product with V (N×dv; a zero
/// key's value is 0). Column panels of Y: their logits and row maxima, then the exponentials, their row sums
/// and their products with V's rows, reduced over the panels in order; R V = diag(1/sums)·(exp V).
template <class T>
WideSoftmax<T> wide_softmax(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                            const ConstMatrixRef<T>& V, double scale, Index zero_keys = 0) {
  const Index m = X.rows(), n = Y.rows(), dv = V.cols();
  const double work = double(m) * double(n) * double(X.cols() + dv);
  WideSoftmax<T> out;
  out.matrix.resize(m, n);
  Matrix<T> panel_max(m, panel_count(n));
  for_each_panel(n, work, [&](const Panel& panel) {
    auto block = out.matrix.middleCols(panel.first, panel.rows);
    gemm<T>(Op::plain, Op::transposed, T(scale), X, Y.middleRows(panel.first, panel.rows), T(0), block);
    panel_max.col(panel.index) = block.rowwise().maxCoeff();
  });
  Vector<T> row_max = panel_max.rowwise().maxCoeff();
  if (zero_keys > 0) row_max = row_max.cwiseMax(T(0));
  PanelTerms<T> terms(n, m, dv + 1);  // [exp·V, exp·1] of each panel
  for_each_panel(n, work, [&](const Panel& panel) {
    auto block = out.matrix.middleCols(panel.first, panel.rows);
    block.colwise() -= row_max;
    block = block.array().exp().matrix();
    auto term = terms.term(panel);
    gemm<T>(Op::plain, Op::plain, T(1), block, V.middleRows(panel.first, panel.rows), T(0),
            term.leftCols(dv));
    term.col(dv) = block.rowwise().sum();
  });
  const Matrix<T> sums = terms.sum();
  Vector<T> inverse_sum = sums.col(dv);
  if (zero_keys > 0) inverse_sum.array() += T(zero_keys) * (-row_max.array()).exp();
  inverse_sum = inverse_sum.cwiseInverse();
  out.times_values = inverse_sum.asDiagonal() * sums.leftCols(dv);
  for_each_panel(n, double(m) * double(n), [&](const Panel& panel) {
    out.matrix.middleCols(panel.first, panel.rows).array().colwise() *= inverse_sum.array();
  });
  return out;
}

/// L W for L (N×m) and W (m×dv), row panels of L in parallel.
template <class T>
Matrix<T> tall_product(const ConstMatrixRef<T>& L, const ConstMatrixRef<T>& W) {
  Matrix<T> out(L.rows(), W.cols());
  for_each_panel(L.rows(), double(L.rows()) * double(L.cols()) * double(W.cols()), [&](const Panel& panel) {
    gemm<T>(Op::plain, Op::plain, T(1), L.middleRows(panel.first, panel.rows), W, T(0),
            out.middleRows(panel.first, panel.rows));
  });
  return out;
}

}  // namespace nystrom::detail
