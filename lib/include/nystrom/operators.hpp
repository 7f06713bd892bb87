#pragma once
/// @file operators.hpp
/// One operator concept for G, Ĝ, G − Ĝ and G̃ (STYLE.md §2), compatible with Spectra's matrix operations:
///   typename Scalar;  Index rows() const;  Index cols() const;
///   void perform_op(const Scalar* x, Scalar* y) const;            // y = A x   (x: cols(), y: rows())
///   void perform_transpose_op(const Scalar* x, Scalar* y) const;  // y = Aᵀx  (x: rows(), y: cols())
/// Spectra needs only the first three; spectral.hpp builds AᵀA or AAᵀ from both products. Kernel operators evaluate
/// κ on the fly in row panels (threaded, accumulating in double), so no N×N matrix is stored.

#include <memory>

#include "nystrom/kernels.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// A stored dense matrix as an operator (small N, tests, and the dense path).
template <class T>
class DenseOperator {
 public:
  using Scalar = T;
  explicit DenseOperator(const ConstMatrixRef<T>& a) : a_(a) {}
  Index rows() const { return a_.rows(); }
  Index cols() const { return a_.cols(); }
  void perform_op(const T* x, T* y) const;
  void perform_transpose_op(const T* x, T* y) const;

 private:
  ConstMatrixRef<T> a_;
};

/// G = κ(X, Y) (X: rows×d, Y: cols×d) evaluated panel by panel inside each product, never stored.
/// Each product costs O(rows·cols·d); memory O(panel·cols). Products are accumulated in double.
template <class T>
class KernelOperator {
 public:
  using Scalar = T;
  KernelOperator(Matrix<T> X, Matrix<T> Y, Kernel kernel, Index panel_rows = 256);
  Index rows() const { return x_.rows(); }
  Index cols() const { return y_.rows(); }
  void perform_op(const T* x, T* y) const;
  void perform_transpose_op(const T* x, T* y) const;

 private:
  Matrix<T> x_, y_;
  Kernel kernel_;
  Index panel_rows_;
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

/// A − B for two operators of the same shape (E = G − Ĝ).
template <class A, class B>
class DifferenceOperator {
 public:
  using Scalar = typename A::Scalar;
  DifferenceOperator(const A& a, const B& b);
  Index rows() const { return a_.rows(); }
  Index cols() const { return a_.cols(); }
  void perform_op(const Scalar* x, Scalar* y) const;
  void perform_transpose_op(const Scalar* x, Scalar* y) const;

 private:
  const A& a_;
  const B& b_;
};

/// The extended matrix G̃ = κ([Q̄; Q], [K̄; K]) ((N+m)×(N+m)) as a kernel operator (MATH.md §2).
template <class T>
KernelOperator<T> extended_kernel_operator(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                           const Landmarks<T>& landmarks, const Kernel& kernel);

}  // namespace nystrom
