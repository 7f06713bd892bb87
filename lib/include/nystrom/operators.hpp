#pragma once
/// @file operators.hpp
/// One operator concept for G, Ĝ, G − Ĝ and G̃, compatible with Spectra's matrix operations:
///   typename Scalar;  Index rows() const;  Index cols() const;
///   void perform_op(const Scalar* x, Scalar* y) const;            // y = A x   (x: cols(), y: rows())
///   void perform_transpose_op(const Scalar* x, Scalar* y) const;  // y = Aᵀx  (x: rows(), y: cols())
/// Optionally, an operator that can form a Gram product in one pass over its data offers
///   void perform_outer_gram_op(const Scalar* x, Scalar* y) const; // y = A Aᵀ x (x, y: rows())
///   void perform_inner_gram_op(const Scalar* x, Scalar* y) const; // y = AᵀA x  (x, y: cols())
/// and spectral.hpp uses it instead of two products (halving the memory traffic or kernel evaluations).
/// KernelOperator is the one matrix-free kernel operator: it evaluates κ on the fly in tiles
/// (kernel_passes.hpp, threaded, accumulating in double), so no N×N matrix is stored. It and DenseOperator
/// fuse Gram products with a subtraction, so that DifferenceOperator's EᵀE x = Gᵀ(Gx − Ĝx) − Ĝᵀ(Gx − Ĝx)
/// costs one kernel pass, or one pass over a stored G.

#include <algorithm>
#include <memory>
#include <vector>

#include <omp.h>

#include "nystrom/detail/kernel_passes.hpp"
#include "nystrom/detail/operator_concepts.hpp"
#include "nystrom/error.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

namespace detail {

/// Runs body(first, count, partial) over [0, n) split in panels of `panel` on up to all threads (one below
/// `parallel_work`), adding each panel's contribution into the double vector `partial` (of length `length`)
/// of its reduction group; returns the sum of the partials in group order (detail::reduction_groups: the
/// same bits on every run and thread count). BLAS is single-threaded inside.
template <class Body>
Vector<double> reduce_over_panels(Index n, Index panel, Index length, double work, const Body& body) {
  const Index panels = (n + panel - 1) / panel;
  const Index groups = reduction_groups(panels);
  const int workers = workers_for(groups, work);
  std::vector<Vector<double>> partials(groups, Vector<double>::Zero(length));
  SingleThreadedBlas guard;
#pragma omp parallel for schedule(dynamic, 1) num_threads(workers)
  for (Index g = 0; g < groups; ++g)
    for (Index p = group_start(g, groups, panels); p < group_start(g + 1, groups, panels); ++p)
      body(p * panel, std::min(panel, n - p * panel), partials[g]);
  Vector<double> total = Vector<double>::Zero(length);
  for (const Vector<double>& partial : partials) total += partial;
  return total;
}

/// Runs body(first, count) over [0, n) in panels of `panel` on up to all threads (disjoint outputs), BLAS
/// single-threaded; one thread below `parallel_work` multiply-adds.
template <class Body>
void for_each_panel(Index n, Index panel, double work, const Body& body) {
  const Index panels = (n + panel - 1) / panel;
  SingleThreadedBlas guard;
#pragma omp parallel for schedule(static) num_threads(workers_for(panels, work))
  for (Index p = 0; p < panels; ++p) body(p * panel, std::min(panel, n - p * panel));
}

/// Lines per panel (columns of a column panel, rows of a row panel) so that a panel of lines `length` doubles
/// long stays within about 256 KiB (L2-resident between its two uses).
inline Index cache_panel(Index length) {
  return std::max<Index>(8, (Index{1} << 15) / std::max<Index>(length, 1));
}

}  // namespace detail

/// A stored dense matrix as an operator (small N, tests, and the dense path).
template <class T>
class DenseOperator {
 public:
  using Scalar = T;
  explicit DenseOperator(const ConstMatrixRef<T>& a) : a_(a) {}
  Index rows() const { return a_.rows(); }
  Index cols() const { return a_.cols(); }
  /// The stored matrix A.
  const ConstMatrixRef<T>& matrix() const { return a_; }
  /// y = A x, threaded over row panels.
  void perform_op(const T* x, T* y) const;
  /// y = Aᵀx, threaded over column panels.
  void perform_transpose_op(const T* x, T* y) const;
  /// y = A Aᵀ x in one pass over A: Σ_J A_J (A_Jᵀ x) over cache-sized column panels J (column-major storage).
  void perform_outer_gram_op(const T* x, T* y) const {
    perform_outer_gram_residual_op(x, nullptr, nullptr, y);
  }
  /// y = AᵀA x in one pass over A: Σ_P A_Pᵀ(A_P x) over cache-sized row panels P.
  void perform_inner_gram_op(const T* x, T* y) const {
    perform_inner_gram_residual_op(x, nullptr, nullptr, y);
  }
  /// r = A x − s (s: rows, may be null; r may be null), y = Aᵀr, in one pass over A by row panels P
  /// (r_P = A_P x − s_P, then y += A_Pᵀ r_P while A_P is in cache): DifferenceOperator's EᵀE x for a stored
  /// G reads G once.
  void perform_inner_gram_residual_op(const T* x, const T* subtract, T* residual, T* y) const;
  /// r = Aᵀx − s (s: cols, may be null; r may be null), y = A r, in one pass over A by column panels J.
  void perform_outer_gram_residual_op(const T* x, const T* subtract, T* residual, T* y) const;
  /// Y = A AᵀX for a block X of `count` vectors (rows × count, column-major) in one pass over A by column
  /// panels: on a matrix beyond the caches a few vectors cost about what one does (the pass is memory-bound),
  /// so it is threaded where a one-vector product is (spectral.hpp's block Lanczos).
  void perform_outer_gram_block_op(const T* x, Index count, T* y) const;
  /// Y = AᵀA X for a block X (cols × count) in one pass over A by row panels.
  void perform_inner_gram_block_op(const T* x, Index count, T* y) const;

 private:
  double work() const { return double(rows()) * double(cols()); }
  ConstMatrixRef<T> a_;
};

/// G = κ(X, Y) (X: rows×d, Y: cols×d) matrix-free: every product is one kernel pass over tiles evaluated on
/// the fly (kernel_passes.hpp; O(rows·cols·d) time, O(threads·panel_rows·cols) memory), accumulated in
/// double. Products take and return vectors of S (default T); KernelOperator<float, double> evaluates float
/// tokens for Lanczos in double. Gᵀ products are passes over κ(Y, X) (every kernel here is symmetric in its
/// arguments). Member definitions: matrix_free.cpp (instantiated for <float>, <double>, <float, double>).
template <class T, class S = T>
class KernelOperator {
 public:
  using Scalar = S;
  /// Throws std::invalid_argument naming the value (mismatched d, empty or non-finite tokens, bad kernel
  /// parameter, tiling < 1).
  KernelOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
                 const MatrixFreeOptions& tiling = {});
  /// The same with `panel_rows` rows per panel and the default column tile.
  KernelOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
                 Index panel_rows);
  Index rows() const { return forward_.rows(); }
  Index cols() const { return forward_.cols(); }
  /// Kernel passes made so far (both orientations).
  long passes() const { return forward_.passes() + backward_.passes(); }

  /// y = G x (x: cols, y: rows).
  void perform_op(const S* x, S* y) const;
  /// y = Gᵀx (x: rows, y: cols).
  void perform_transpose_op(const S* x, S* y) const;
  /// y = GᵀG x (x, y: cols): Σ_P G_Pᵀ(G_P x) with each row panel evaluated once.
  void perform_inner_gram_op(const S* x, S* y) const;
  /// y = GGᵀx (x, y: rows).
  void perform_outer_gram_op(const S* x, S* y) const;
  /// r = G x − s (s: rows, may be null; r may be null), y = Gᵀ r, in one pass.
  void perform_inner_gram_residual_op(const S* x, const S* subtract, S* residual, S* y) const;
  /// r = Gᵀx − s (s: cols, may be null; r may be null), y = G r, in one pass.
  void perform_outer_gram_residual_op(const S* x, const S* subtract, S* residual, S* y) const;
  /// [y_top; y_bottom] = [[0, G], [Gᵀ, 0]] [x_top; x_bottom] (x_top: rows, x_bottom: cols), in one pass.
  void perform_augmented_op(const S* x, S* y) const;

 private:
  KernelPasses<T> forward_;   ///< G = κ(X, Y)
  KernelPasses<T> backward_;  ///< Gᵀ = κ(Y, X)
};

/// Ĝ = diag(exp(l)) G_L Z G_U from NystromFactors; O(Nm) per product.
template <class T>
class NystromOperator {
 public:
  using Scalar = T;
  explicit NystromOperator(const NystromFactors<T>& factors) : f_(factors) {}
  Index rows() const { return f_.rows(); }
  Index cols() const { return f_.cols(); }
  void perform_op(const T* x, T* y) const { f_.apply(x, y); }
  void perform_transpose_op(const T* x, T* y) const { f_.apply_transpose(x, y); }

 private:
  const NystromFactors<T>& f_;
};

/// A − B for two operators of the same shape (E = G − Ĝ). Both are held by reference.
template <class A, class B>
class DifferenceOperator {
 public:
  using Scalar = typename A::Scalar;
  DifferenceOperator(const A& a, const B& b);
  Index rows() const { return a_.rows(); }
  Index cols() const { return a_.cols(); }
  void perform_op(const Scalar* x, Scalar* y) const;
  void perform_transpose_op(const Scalar* x, Scalar* y) const;
  /// y = EᵀE x in one pass of A: r = A x − B x, y = Aᵀr − Bᵀr (when A fuses Gram products with a
  /// subtraction).
  void perform_inner_gram_op(const Scalar* x, Scalar* y) const requires detail::HasGramResidual<A> {
    Vector<Scalar> subtrahend(rows()), residual(rows()), correction(cols());
    b_.perform_op(x, subtrahend.data());
    a_.perform_inner_gram_residual_op(x, subtrahend.data(), residual.data(), y);
    b_.perform_transpose_op(residual.data(), correction.data());
    Eigen::Map<Vector<Scalar>>(y, cols()) -= correction;
  }
  /// y = EEᵀx in one pass of A: r = Aᵀx − Bᵀx, y = A r − B r.
  void perform_outer_gram_op(const Scalar* x, Scalar* y) const requires detail::HasGramResidual<A> {
    Vector<Scalar> subtrahend(cols()), residual(cols()), correction(rows());
    b_.perform_transpose_op(x, subtrahend.data());
    a_.perform_outer_gram_residual_op(x, subtrahend.data(), residual.data(), y);
    b_.perform_op(residual.data(), correction.data());
    Eigen::Map<Vector<Scalar>>(y, rows()) -= correction;
  }
  /// [[0, E], [Eᵀ, 0]] x in one pass of A.
  void perform_augmented_op(const Scalar* x, Scalar* y) const requires detail::HasAugmentedProduct<A> {
    Vector<Scalar> top(rows()), bottom(cols());
    a_.perform_augmented_op(x, y);
    b_.perform_op(x + rows(), top.data());
    b_.perform_transpose_op(x, bottom.data());
    Eigen::Map<Vector<Scalar>>(y, rows()) -= top;
    Eigen::Map<Vector<Scalar>>(y + rows(), cols()) -= bottom;
  }

 private:
  const A& a_;
  const B& b_;
};

/// The extended matrix G̃ = κ([Q̄; Q], [K̄; K]) ((N+m)×(N+m)) as a kernel operator (docs/mathematics.md §2).
template <class T>
KernelOperator<T> extended_kernel_operator(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                           const Landmarks<T>& landmarks, const Kernel& kernel,
                                           Index panel_rows = MatrixFreeOptions{}.panel_rows);

// ---------------------------------------------------------------------------------------------------------------

template <class T>
void DenseOperator<T>::perform_op(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, cols());
  Eigen::Map<Vector<T>> out(y, rows());
  detail::for_each_panel(rows(), std::max<Index>(64, rows() / 16 + 1), work(), [&](Index first, Index count) {
    out.segment(first, count).noalias() = a_.middleRows(first, count) * in;
  });
}

template <class T>
void DenseOperator<T>::perform_transpose_op(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, rows());
  Eigen::Map<Vector<T>> out(y, cols());
  detail::for_each_panel(cols(), std::max<Index>(64, cols() / 16 + 1), work(), [&](Index first, Index count) {
    out.segment(first, count).noalias() = a_.middleCols(first, count).transpose() * in;
  });
}

template <class T>
void DenseOperator<T>::perform_inner_gram_residual_op(const T* x, const T* subtract, T* residual,
                                                      T* y) const {
  Eigen::Map<const Vector<T>> in(x, cols());
  const Vector<double> total = detail::reduce_over_panels(
      rows(), detail::cache_panel(cols()), cols(), 2 * work(),
      [&](Index first, Index count, Vector<double>& partial) {
        const auto block = a_.middleRows(first, count);
        Vector<T> projected = block * in;
        if (subtract) projected -= Eigen::Map<const Vector<T>>(subtract + first, count);
        if (residual) Eigen::Map<Vector<T>>(residual + first, count) = projected;
        partial.noalias() += (block.transpose() * projected).template cast<double>();
      });
  Eigen::Map<Vector<T>>(y, cols()) = total.template cast<T>();
}

template <class T>
void DenseOperator<T>::perform_outer_gram_residual_op(const T* x, const T* subtract, T* residual,
                                                      T* y) const {
  Eigen::Map<const Vector<T>> in(x, rows());
  const Vector<double> total =
      detail::reduce_over_panels(cols(), detail::cache_panel(rows()), rows(), 2 * work(),
                                 [&](Index first, Index count, Vector<double>& partial) {
                                   const auto block = a_.middleCols(first, count);
                                   Vector<T> projected = block.transpose() * in;
                                   if (subtract)
                                     projected -= Eigen::Map<const Vector<T>>(subtract + first, count);
                                   if (residual) Eigen::Map<Vector<T>>(residual + first, count) = projected;
                                   partial.noalias() += (block * projected).template cast<double>();
                                 });
  Eigen::Map<Vector<T>>(y, rows()) = total.template cast<T>();
}

template <class T>
void DenseOperator<T>::perform_outer_gram_block_op(const T* x, Index count, T* y) const {
  const Eigen::Map<const Matrix<T>> in(x, rows(), count);
  const Vector<double> total =
      detail::reduce_over_panels(cols(), detail::cache_panel(rows()), rows() * count, 2 * work(),
                                 [&](Index first, Index lines, Vector<double>& partial) {
                                   const auto block = a_.middleCols(first, lines);
                                   const Matrix<T> projected = block.transpose() * in;
                                   Eigen::Map<Matrix<double>>(partial.data(), rows(), count).noalias() +=
                                       (block * projected).template cast<double>();
                                 });
  Eigen::Map<Matrix<T>>(y, rows(), count) =
      Eigen::Map<const Matrix<double>>(total.data(), rows(), count).template cast<T>();
}

template <class T>
void DenseOperator<T>::perform_inner_gram_block_op(const T* x, Index count, T* y) const {
  const Eigen::Map<const Matrix<T>> in(x, cols(), count);
  const Vector<double> total =
      detail::reduce_over_panels(rows(), detail::cache_panel(cols()), cols() * count, 2 * work(),
                                 [&](Index first, Index lines, Vector<double>& partial) {
                                   const auto block = a_.middleRows(first, lines);
                                   const Matrix<T> projected = block * in;
                                   Eigen::Map<Matrix<double>>(partial.data(), cols(), count).noalias() +=
                                       (block.transpose() * projected).template cast<double>();
                                 });
  Eigen::Map<Matrix<T>>(y, cols(), count) =
      Eigen::Map<const Matrix<double>>(total.data(), cols(), count).template cast<T>();
}

template <class A, class B>
DifferenceOperator<A, B>::DifferenceOperator(const A& a, const B& b) : a_(a), b_(b) {
  require(a.rows() == b.rows() && a.cols() == b.cols(), "DifferenceOperator: shapes differ, ", a.rows(), "x",
          a.cols(), " and ", b.rows(), "x", b.cols());
}

template <class A, class B>
void DifferenceOperator<A, B>::perform_op(const Scalar* x, Scalar* y) const {
  Vector<Scalar> subtrahend(rows());
  a_.perform_op(x, y);
  b_.perform_op(x, subtrahend.data());
  Eigen::Map<Vector<Scalar>>(y, rows()) -= subtrahend;
}

template <class A, class B>
void DifferenceOperator<A, B>::perform_transpose_op(const Scalar* x, Scalar* y) const {
  Vector<Scalar> subtrahend(cols());
  a_.perform_transpose_op(x, y);
  b_.perform_transpose_op(x, subtrahend.data());
  Eigen::Map<Vector<Scalar>>(y, cols()) -= subtrahend;
}

template <class T>
KernelOperator<T> extended_kernel_operator(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                           const Landmarks<T>& landmarks, const Kernel& kernel,
                                           Index panel_rows) {
  const ExtendedTokens<T> tokens = extended_tokens<T>(Q, K, landmarks);
  return KernelOperator<T>(tokens.queries, tokens.keys, kernel, panel_rows);
}

}  // namespace nystrom
