#include "nystrom/cuda/operators.hpp"

#include <algorithm>
#include <cmath>

#include "device.hpp"
#include "nystrom/error.hpp"

namespace nystrom::cuda {

using namespace detail;

/// X, Y and the work buffers on the device.
template <class T>
struct KernelOperator<T>::State {
  DeviceMatrix<T> x, y;
  Kernel kernel;
  int panel_op = 0, panel_transpose = 0;
  DeviceBuffer<T> panel, in, out;

  /// out = G in (transpose: Gᵀ in), both on the device. Per panel of lines: the logits with the summed-over
  /// index down each column (φ symmetric: φ(Y, X_panel) is the transposed panel of G), then exp fused with
  /// the dot product.
  void product(bool transpose) {
    const DeviceMatrix<T>& outer = transpose ? y : x;  // the lines: rows of G (op) or its columns (transpose)
    const DeviceMatrix<T>& inner = transpose ? x : y;  // the index summed over
    const int step = transpose ? panel_transpose : panel_op;
    for (int r = 0; r < outer.rows; r += step) {
      const int b = std::min(step, outer.rows - r);
      exponent(kernel, inner.data(), inner.ld(), inner.rows, outer.data() + r, outer.ld(), b, x.cols,
               panel.data(), inner.rows);
      exp_dot_lines<T>(panel.data(), inner.rows, inner.rows, b, in.data(), out.data() + r, context().stream);
    }
  }
};

template <class T>
KernelOperator<T>::KernelOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                                  const Kernel& kernel, Index panel)
    : rows_(X.rows()), cols_(Y.rows()) {
  require(X.cols() == Y.cols(), "cuda::KernelOperator: token dimensions differ, d = ", X.cols(), " and ",
          Y.cols());
  require(panel >= 0, "cuda::KernelOperator: panel = ", panel, " must be >= 0");
  state_ = std::make_unique<State>();
  state_->x = upload<T>(X);
  state_->y = upload<T>(Y);
  state_->kernel = kernel;
  state_->panel_op = panel > 0 ? static_cast<int>(std::min(panel, rows_)) : panel_rows(cols_, rows_);
  state_->panel_transpose = panel > 0 ? static_cast<int>(std::min(panel, cols_)) : panel_rows(rows_, cols_);
  const Index largest = std::max(rows_, cols_);
  state_->panel = DeviceBuffer<T>(
      static_cast<std::size_t>(std::max(cols_ * state_->panel_op, rows_ * state_->panel_transpose)));
  state_->in = DeviceBuffer<T>(static_cast<std::size_t>(largest));
  state_->out = DeviceBuffer<T>(static_cast<std::size_t>(largest));
}

template <class T>
KernelOperator<T>::~KernelOperator() = default;
template <class T>
KernelOperator<T>::KernelOperator(KernelOperator&&) noexcept = default;
template <class T>
KernelOperator<T>& KernelOperator<T>::operator=(KernelOperator&&) noexcept = default;

template <class T>
void KernelOperator<T>::perform_op(const T* x, T* y) const {
  upload(x, state_->in.data(), static_cast<std::size_t>(cols_));
  state_->product(false);
  download(state_->out.data(), y, static_cast<std::size_t>(rows_));
}

template <class T>
void KernelOperator<T>::perform_transpose_op(const T* x, T* y) const {
  upload(x, state_->in.data(), static_cast<std::size_t>(rows_));
  state_->product(true);
  download(state_->out.data(), y, static_cast<std::size_t>(cols_));
}

/// Ĝ = diag(exp(l)) G_L Z G_U on the device, the row scale folded into G_L once.
template <class T>
struct DifferenceOperator<T>::Factors {
  DeviceMatrix<T> left;   ///< diag(exp(l)) G_L, N×m
  DeviceMatrix<T> z;      ///< Z ≈ G_A⁺, m×m
  DeviceMatrix<T> upper;  ///< G_U, m×N
  DeviceBuffer<T> reduced, core_side;
};

template <class T>
DifferenceOperator<T>::DifferenceOperator(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                          const NystromFactors<T>& factors, Index panel)
    : kernel_(Q, K, factors.options.kernel, panel) {
  require(factors.rows() == Q.rows() && factors.cols() == K.rows(), "cuda::DifferenceOperator: factors are ",
          factors.rows(), "x", factors.cols(), ", G is ", Q.rows(), "x", K.rows());
  const Matrix<T> scaled_left = (factors.left.template cast<double>().array().colwise() *
                                 factors.left_log_scale.template cast<double>().array().exp())
                                    .matrix()
                                    .template cast<T>();
  factors_ = std::make_unique<Factors>();
  factors_->left = upload<T>(scaled_left);
  factors_->z = upload<T>(factors.pinv.z);
  factors_->upper = upload<T>(factors.upper);
  factors_->reduced = DeviceBuffer<T>(static_cast<std::size_t>(factors.pinv.z.rows()));
  factors_->core_side = DeviceBuffer<T>(static_cast<std::size_t>(factors.pinv.z.rows()));
}

template <class T>
DifferenceOperator<T>::~DifferenceOperator() = default;
template <class T>
DifferenceOperator<T>::DifferenceOperator(DifferenceOperator&&) noexcept = default;
template <class T>
DifferenceOperator<T>& DifferenceOperator<T>::operator=(DifferenceOperator&&) noexcept = default;

template <class T>
void DifferenceOperator<T>::perform_op(const T* x, T* y) const {
  auto& g = *kernel_.state_;
  Factors& f = *factors_;
  const int n = f.left.rows, m = f.z.rows, cols = f.upper.cols;
  upload(x, g.in.data(), static_cast<std::size_t>(cols));
  g.product(false);  // out = G x
  gemv(CUBLAS_OP_N, m, cols, T(1), f.upper.data(), f.upper.ld(), g.in.data(), T(0), f.reduced.data());
  gemv(CUBLAS_OP_N, m, m, T(1), f.z.data(), f.z.ld(), f.reduced.data(), T(0), f.core_side.data());
  gemv(CUBLAS_OP_N, n, m, T(-1), f.left.data(), f.left.ld(), f.core_side.data(), T(1), g.out.data());  // − Ĝx
  download(g.out.data(), y, static_cast<std::size_t>(n));
}

template <class T>
void DifferenceOperator<T>::perform_transpose_op(const T* x, T* y) const {
  auto& g = *kernel_.state_;
  Factors& f = *factors_;
  const int n = f.left.rows, m = f.z.rows, cols = f.upper.cols;
  upload(x, g.in.data(), static_cast<std::size_t>(n));
  g.product(true);  // out = Gᵀx
  gemv(CUBLAS_OP_T, n, m, T(1), f.left.data(), f.left.ld(), g.in.data(), T(0), f.reduced.data());
  gemv(CUBLAS_OP_T, m, m, T(1), f.z.data(), f.z.ld(), f.reduced.data(), T(0), f.core_side.data());
  gemv(CUBLAS_OP_T, m, cols, T(-1), f.upper.data(), f.upper.ld(), f.core_side.data(), T(1),
       g.out.data());  // − Ĝᵀx
  download(g.out.data(), y, static_cast<std::size_t>(cols));
}

template class KernelOperator<float>;
template class KernelOperator<double>;
template class DifferenceOperator<float>;
template class DifferenceOperator<double>;

}  // namespace nystrom::cuda
