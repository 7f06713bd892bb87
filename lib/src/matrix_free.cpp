#include "nystrom/matrix_free.hpp"

#include <algorithm>
#include <cmath>

#include "nystrom/detail/kernel_passes.hpp"
#include "nystrom/error.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/threads.hpp"

namespace nystrom {

void MatrixFreeOptions::validate() const {
  require(panel_rows >= 1, "MatrixFreeOptions: panel_rows = ", panel_rows, " must be >= 1");
  require(tile_cols >= 1, "MatrixFreeOptions: tile_cols = ", tile_cols, " must be >= 1");
}

namespace {

/// Rows of X per register block of the distance tile loop (one 512-bit vector of floats, two of doubles).
constexpr Index kRowBlock = 16;
/// Columns of the tile per register block: kRowBlock × kColumnBlock accumulators stay in registers over d.
constexpr Index kColumnBlock = 8;

Index round_up(Index value, Index multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/// out(i, j) += Σ_f δ(x(i, f) − y(j, f)) for δ = |·| (L1) or (·)² over one kRowBlock × columns register
/// block. x: panel of X rows, column-major with leading dimension x_stride; y: Y column-major with leading
/// dimension y_stride, already offset to the block's first column. The inner loop over rows is contiguous and
/// vectorizes.
template <class T, bool squared, Index columns>
void distance_block(const T* x, Index x_stride, const T* y, Index y_stride, Index d, T* out,
                    Index out_stride) {
  T acc[columns][kRowBlock] = {};
  for (Index f = 0; f < d; ++f) {
    const T* xf = x + f * x_stride;
    const T* yf = y + f * y_stride;
    for (Index jj = 0; jj < columns; ++jj) {
      const T yv = yf[jj];
      for (Index ii = 0; ii < kRowBlock; ++ii) {
        const T diff = xf[ii] - yv;
        acc[jj][ii] += squared ? diff * diff : std::abs(diff);
      }
    }
  }
  for (Index jj = 0; jj < columns; ++jj)
    for (Index ii = 0; ii < kRowBlock; ++ii) out[jj * out_stride + ii] = acc[jj][ii];
}

/// out(i, j) = Σ_f δ(x(i, f) − y(j, f)) for a whole tile: x has `padded_rows` (a multiple of kRowBlock) rows.
template <class T, bool squared>
void distance_tile(const T* x, Index padded_rows, const T* y, Index y_stride, Index tile_cols, Index d,
                   T* out) {
  for (Index i0 = 0; i0 < padded_rows; i0 += kRowBlock) {
    Index j0 = 0;
    for (; j0 + kColumnBlock <= tile_cols; j0 += kColumnBlock)
      distance_block<T, squared, kColumnBlock>(x + i0, padded_rows, y + j0, y_stride, d,
                                               out + j0 * padded_rows + i0, padded_rows);
    for (; j0 < tile_cols; ++j0)
      distance_block<T, squared, 1>(x + i0, padded_rows, y + j0, y_stride, d, out + j0 * padded_rows + i0,
                                    padded_rows);
  }
}

/// x widened to double.
template <class S>
Vector<double> widen(const S* x, Index n) {
  return Eigen::Map<const Vector<S>>(x, n).template cast<double>();
}

/// y = v narrowed to S.
template <class S>
void narrow(const Vector<double>& v, S* y) {
  Eigen::Map<Vector<S>>(y, v.size()) = v.template cast<S>();
}

/// A column-major view with a leading dimension.
using StridedMap = Eigen::Map<Matrix<double>, 0, Eigen::OuterStride<>>;

/// tile = exp(factor · exponent − log_shift) in double. Widening first and exponentiating in place keeps
/// Eigen's vectorized exp (a fused cast-and-exp expression falls back to scalar std::exp, measured 2x slower
/// per pass).
template <class Exponent>
void exponentiate(const Exponent& exponent, double factor, double log_shift, StridedMap& tile) {
  tile = factor * exponent.template cast<double>();
  if (log_shift != 0) tile.array() -= log_shift;
  tile.array() = tile.array().exp();
}

}  // namespace

template <class T>
KernelPasses<T>::KernelPasses(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, const Kernel& kernel,
                              const MatrixFreeOptions& options)
    : x_(X), y_(Y), kernel_(kernel), options_(options) {
  kernel.validate();
  options.validate();
  require(X.cols() == Y.cols(), "matrix-free kernel: token dimensions differ, d = ", X.cols(), " and ",
          Y.cols());
  require(X.rows() >= 1 && Y.rows() >= 1 && X.cols() >= 1, "matrix-free kernel: empty tokens, ", X.rows(),
          "x", X.cols(), " and ", Y.rows(), "x", Y.cols());
  require_finite(X, "matrix-free kernel: X");
  require_finite(Y, "matrix-free kernel: Y");
  if (kernel.type == KernelType::exponential) x_ *= T(kernel.param);  // as Kernel::exponent: (s·X) Yᵀ
}

template <class T>
void KernelPasses<T>::evaluate_tile(Index r0, Index nr, Index c0, Index nc, Matrix<T>& exponent_buffer,
                                    double* out, Index out_stride) const {
  StridedMap tile(out, nr, nc, Eigen::OuterStride<>(out_stride));
  if (kernel_.type == KernelType::exponential) {
    // PnP-Nystra eq. (2): logits s·q_iᵀk_j by a GEMM in T, exp(· − log_shift) in double.
    auto logits = exponent_buffer.topLeftCorner(nr, nc);
    logits.noalias() = x_.middleRows(r0, nr) * y_.middleRows(c0, nc).transpose();
    exponentiate(logits, 1.0, kernel_.log_shift, tile);
    return;
  }
  // Laplacian (LaplacianFormer Alg. 1) and Gaussian: distances by the register-blocked loop on a padded panel
  // copy.
  const bool laplacian = kernel_.type == KernelType::laplacian;
  const Index padded = round_up(nr, kRowBlock);
  const Index d = x_.cols();
  // The padded X panel lives after the distance tile in the same buffer (allocated large enough by pass()).
  T* distances = exponent_buffer.data();
  T* panel = distances + padded * nc;
  for (Index f = 0; f < d; ++f) {
    for (Index i = 0; i < nr; ++i) panel[f * padded + i] = x_(r0 + i, f);
    for (Index i = nr; i < padded; ++i) panel[f * padded + i] = T(0);
  }
  const T* y = y_.data() + c0;
  if (laplacian)
    distance_tile<T, false>(panel, padded, y, y_.rows(), nc, d, distances);
  else
    distance_tile<T, true>(panel, padded, y, y_.rows(), nc, d, distances);
  const double factor = laplacian ? -1.0 / kernel_.param : -0.5 / (kernel_.param * kernel_.param);
  const Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>> distance(distances, nr, nc,
                                                                      Eigen::OuterStride<>(padded));
  exponentiate(distance, factor, kernel_.log_shift, tile);
}

template <class T>
Matrix<double> KernelPasses<T>::tile(Index r0, Index nr, Index c0, Index nc) const {
  require(r0 >= 0 && nr >= 0 && r0 + nr <= rows() && c0 >= 0 && nc >= 0 && c0 + nc <= cols(),
          "KernelPasses::tile: block (", r0, ", ", c0, ") of ", nr, "x", nc, " outside ", rows(), "x",
          cols());
  Matrix<double> out(nr, nc);
  Matrix<T> buffer(round_up(std::max<Index>(nr, 1), kRowBlock), std::max<Index>(nc, 1) + x_.cols());
  if (nr > 0 && nc > 0) evaluate_tile(r0, nr, c0, nc, buffer, out.data(), nr);
  return out;
}

template <class T>
void KernelPasses<T>::pass(const double* x, const double* u, double* product, double* transpose, bool gram,
                           const double* subtract) const {
  require(!gram || (x != nullptr && transpose != nullptr),
          "KernelPasses::pass: a Gram pass needs x and transpose");
  ++passes_;
  const Index n_rows = rows(), n_cols = cols();
  const Index panel_rows = std::min(options_.panel_rows, n_rows);
  const Index tile_cols = std::min(options_.tile_cols, n_cols);
  const Index panel_count = (n_rows + panel_rows - 1) / panel_rows;
  const Index padded_rows = round_up(panel_rows, kRowBlock);
  const bool accumulate_transpose = transpose != nullptr;
  const Eigen::Map<const Vector<double>> x_in(x, x ? n_cols : 0);
  const Eigen::Map<const Vector<double>> u_in(u, u ? n_rows : 0);
  if (accumulate_transpose) Eigen::Map<Vector<double>>(transpose, n_cols).setZero();

  // Gᵀu sums over the row panels: by detail::reduction_groups, the same bits on every run.
  const Index groups = detail::reduction_groups(panel_count);
  Matrix<double> group_transposes = Matrix<double>::Zero(accumulate_transpose ? n_cols : 0, groups);

  const SingleThreadedBlas single_threaded_blas;
#pragma omp parallel
  {
    // Per thread: the exponent tile in T (plus room for the padded X panel of the distance kernels), the
    // evaluated tile in double (a whole row panel for Gram passes).
    Matrix<T> exponent_buffer(padded_rows, tile_cols + x_.cols());
    Matrix<double> values(panel_rows, gram ? n_cols : tile_cols);
    Vector<double> row_sums(panel_rows);

#pragma omp for schedule(dynamic, 1)
    for (Index group = 0; group < groups; ++group) {
      auto group_transpose = group_transposes.col(group);
      const Index end = detail::group_start(group + 1, groups, panel_count);
      for (Index p = detail::group_start(group, groups, panel_count); p < end; ++p) {
        const Index r0 = p * panel_rows;
        const Index nr = std::min(panel_rows, n_rows - r0);
        auto sums = row_sums.head(nr);
        sums.setZero();
        for (Index c0 = 0; c0 < n_cols; c0 += tile_cols) {
          const Index nc = std::min(tile_cols, n_cols - c0);
          double* destination = values.data() + (gram ? c0 * panel_rows : 0);
          evaluate_tile(r0, nr, c0, nc, exponent_buffer, destination, panel_rows);
          const StridedMap tile(destination, nr, nc, Eigen::OuterStride<>(panel_rows));
          if (x) sums.noalias() += tile * x_in.segment(c0, nc);
          if (!gram && u)
            group_transpose.segment(c0, nc).noalias() += tile.transpose() * u_in.segment(r0, nr);
        }
        if (gram) {
          // Fused Gram product: r_P = G_P x − subtract_P, then Gᵀ r accumulates G_Pᵀ r_P from the kept panel.
          if (subtract) sums -= Eigen::Map<const Vector<double>>(subtract + r0, nr);
          const StridedMap panel(values.data(), nr, n_cols, Eigen::OuterStride<>(panel_rows));
          group_transpose.noalias() += panel.transpose() * sums;
        }
        if (product) Eigen::Map<Vector<double>>(product + r0, nr) = sums;
      }
    }
  }
  if (accumulate_transpose) {
    Eigen::Map<Vector<double>> out(transpose, n_cols);
    for (Index group = 0; group < groups; ++group) out += group_transposes.col(group);
  }
}

template <class T, class S>
KernelOperator<T, S>::KernelOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                                     const Kernel& kernel, const MatrixFreeOptions& tiling)
    : forward_(X, Y, kernel, tiling), backward_(Y, X, kernel, tiling) {}

template <class T, class S>
KernelOperator<T, S>::KernelOperator(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                                     const Kernel& kernel, Index panel_rows)
    : KernelOperator(X, Y, kernel, MatrixFreeOptions{.panel_rows = panel_rows}) {}

template <class T, class S>
void KernelOperator<T, S>::perform_op(const S* x, S* y) const {
  Vector<double> out(rows());
  forward_.pass(widen(x, cols()).data(), nullptr, out.data(), nullptr);
  narrow(out, y);
}

template <class T, class S>
void KernelOperator<T, S>::perform_transpose_op(const S* x, S* y) const {
  Vector<double> out(cols());
  backward_.pass(widen(x, rows()).data(), nullptr, out.data(), nullptr);
  narrow(out, y);
}

template <class T, class S>
void KernelOperator<T, S>::perform_inner_gram_residual_op(const S* x, const S* subtract, S* residual,
                                                          S* y) const {
  const Vector<double> shift = subtract ? widen(subtract, rows()) : Vector<double>();
  Vector<double> r(rows()), out(cols());
  forward_.pass(widen(x, cols()).data(), nullptr, r.data(), out.data(), true,
                subtract ? shift.data() : nullptr);
  if (residual) narrow(r, residual);
  narrow(out, y);
}

template <class T, class S>
void KernelOperator<T, S>::perform_outer_gram_residual_op(const S* x, const S* subtract, S* residual,
                                                          S* y) const {
  const Vector<double> shift = subtract ? widen(subtract, cols()) : Vector<double>();
  Vector<double> r(cols()), out(rows());
  backward_.pass(widen(x, rows()).data(), nullptr, r.data(), out.data(), true,
                 subtract ? shift.data() : nullptr);
  if (residual) narrow(r, residual);
  narrow(out, y);
}

template <class T, class S>
void KernelOperator<T, S>::perform_inner_gram_op(const S* x, S* y) const {
  perform_inner_gram_residual_op(x, nullptr, nullptr, y);
}

template <class T, class S>
void KernelOperator<T, S>::perform_outer_gram_op(const S* x, S* y) const {
  perform_outer_gram_residual_op(x, nullptr, nullptr, y);
}

template <class T, class S>
void KernelOperator<T, S>::perform_augmented_op(const S* x, S* y) const {
  const Vector<double> top = widen(x, rows());              // multiplies Gᵀ
  const Vector<double> bottom = widen(x + rows(), cols());  // multiplies G
  Vector<double> out(rows() + cols());
  forward_.pass(bottom.data(), top.data(), out.data(), out.data() + rows());
  narrow(out, y);
}

template <class T>
NystromFactors<double> widened_factors(const NystromFactors<T>& factors) {
  NystromFactors<double> wide;
  wide.left = factors.left.template cast<double>();
  wide.core = factors.core.template cast<double>();
  wide.upper = factors.upper.template cast<double>();
  wide.left_log_scale = factors.left_log_scale.template cast<double>();
  wide.upper_log_scale = factors.upper_log_scale.template cast<double>();
  wide.pinv.z = factors.pinv.z.template cast<double>();
  wide.pinv.status = factors.pinv.status;
  wide.options = factors.options;
  return wide;
}

template <class T>
NystromFactors<double> widened_factors(const NystromFactors<T>& factors, double log_shift) {
  NystromFactors<double> wide = widened_factors(factors);
  const double change = log_shift - factors.options.kernel.log_shift;
  if (change == 0) return wide;
  wide.left_log_scale.array() -= change;
  if (wide.options.stabilization == Stabilization::row_max) wide.upper_log_scale.array() -= change;
  wide.options.kernel.log_shift = log_shift;
  return wide;
}

template <class T>
SpectralResult matrix_free_error_norm(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromFactors<T>& factors, const Kernel& kernel,
                                      const SpectralOptions& options, const MatrixFreeOptions& tiling) {
  const KernelOperator<T, double> g(Q, K, kernel, tiling);
  const NystromFactors<double> wide = widened_factors(factors, kernel.log_shift);
  const NystromOperator<double> approximation(wide);
  const DifferenceOperator<KernelOperator<T, double>, NystromOperator<double>> error(g, approximation);
  return spectral_norm(error, options);
}

template <class T>
SpectralResult matrix_free_kernel_norm(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const Kernel& kernel, const SpectralOptions& options,
                                       const MatrixFreeOptions& tiling) {
  return spectral_norm(KernelOperator<T, double>(Q, K, kernel, tiling), options);
}

template <class T>
SpectralResult matrix_free_top_singular_values(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                               const Kernel& kernel, Index k, const SpectralOptions& options,
                                               const MatrixFreeOptions& tiling) {
  return top_singular_values(KernelOperator<T, double>(Q, K, kernel, tiling), k, options);
}

#define NYSTROM_INSTANTIATE(T)                                                                           \
  template class KernelPasses<T>;                                                                        \
  template class KernelOperator<T, T>;                                                                   \
  template NystromFactors<double> widened_factors<T>(const NystromFactors<T>&);                          \
  template NystromFactors<double> widened_factors<T>(const NystromFactors<T>&, double);                  \
  template SpectralResult matrix_free_error_norm<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,  \
                                                    const NystromFactors<T>&, const Kernel&,             \
                                                    const SpectralOptions&, const MatrixFreeOptions&);   \
  template SpectralResult matrix_free_kernel_norm<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, \
                                                     const Kernel&, const SpectralOptions&,              \
                                                     const MatrixFreeOptions&);                          \
  template SpectralResult matrix_free_top_singular_values<T>(                                            \
      const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const Kernel&, Index, const SpectralOptions&,  \
      const MatrixFreeOptions&);

NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE
template class KernelOperator<float, double>;

}  // namespace nystrom
