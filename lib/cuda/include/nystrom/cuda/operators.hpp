#pragma once
/// @file operators.hpp
/// GPU operators in the operator concept of nystrom/operators.hpp (rows, cols, perform_op,
/// perform_transpose_op on host pointers), for Spectra's Lanczos: each product copies the vector to the
/// device, evaluates κ in panels there (the logits by GEMM or the distance kernel, then one fused exp-and-dot
/// kernel, so exp(φ) is never stored), and copies the result back. Products accumulate in T. Not thread-safe
/// (one set of device buffers per operator).

#include <memory>

#include "nystrom/kernels.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cuda {

template <class T>
class DifferenceOperator;

/// G = κ(X, Y) (X: rows×d, Y: cols×d), kept as X and Y on the device and evaluated panel by panel in each
/// product. Each product costs O(rows·cols·d) on the device; device memory O((rows + cols)·d +
/// panel·max(rows, cols)).
template <class T>
class KernelOperator {
 public:
  using Scalar = T;
  /// `panel` lines (rows of G for perform_op, columns for the transpose) per step; 0 picks them by a memory
  /// budget.
  KernelOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
                 Index panel = 0);
  ~KernelOperator();
  KernelOperator(KernelOperator&&) noexcept;
  KernelOperator& operator=(KernelOperator&&) noexcept;
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  /// y = G x (x: cols(), y: rows()).
  void perform_op(const T* x, T* y) const;
  /// y = Gᵀx (x: rows(), y: cols()).
  void perform_transpose_op(const T* x, T* y) const;

 private:
  friend class DifferenceOperator<T>;
  struct State;
  std::unique_ptr<State> state_;
  Index rows_ = 0, cols_ = 0;
};

/// E = G − Ĝ with G = κ(Q, K) evaluated blockwise on the device and Ĝ = diag(exp(l)) G_L Z G_U from the
/// factors (docs/mathematics.md §7). O(N²d + Nm) per product; the factors are copied to the device once.
template <class T>
class DifferenceOperator {
 public:
  using Scalar = T;
  DifferenceOperator(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const NystromFactors<T>& factors,
                     Index panel = 0);
  ~DifferenceOperator();
  DifferenceOperator(DifferenceOperator&&) noexcept;
  DifferenceOperator& operator=(DifferenceOperator&&) noexcept;
  Index rows() const { return kernel_.rows(); }
  Index cols() const { return kernel_.cols(); }
  /// y = (G − Ĝ)x.
  void perform_op(const T* x, T* y) const;
  /// y = (G − Ĝ)ᵀx.
  void perform_transpose_op(const T* x, T* y) const;

 private:
  struct Factors;
  KernelOperator<T> kernel_;
  std::unique_ptr<Factors> factors_;
};

}  // namespace nystrom::cuda
