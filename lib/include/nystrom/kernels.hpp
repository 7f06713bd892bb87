#pragma once
/// @file kernels.hpp
/// Kernels κ(q, k) = exp(φ(q, k) − c) as small value types evaluated on blocks of token rows
/// (docs/mathematics.md §1):
///   exponential  φ = s·qᵀk                 (PnP-Nystra eq. (2); softmax attention S = D⁻¹G)
///   Laplacian    φ = −‖q − k‖₁ / λ          (LaplacianFormer Alg. 1)
///   Gaussian     φ = −‖q − k‖₂² / (2h²)     (LaplacianFormer, for comparison)
/// with a log-shift c (`log_shift`, 0 by default): κ_c = e^{−c}κ, so a head whose logits reach a few hundred
/// has kernel matrices, Gram products and spectra of representable size, every singular value, norm and
/// error bound scaled by exactly e^{−c} (docs/mathematics.md §1, "Large logits").
/// Callers evaluate only the panels they need, `kernel.block(Q.middleRows(r, b), K)`; nothing here forms an
/// N×N matrix unless the caller passes all N rows on both sides.

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <type_traits>

#include <omp.h>

#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// The kernel families of docs/mathematics.md §1.
enum class KernelType { exponential, laplacian, gaussian };

/// "exp", "laplacian", "gaussian".
std::string to_string(KernelType type);
/// Inverse of to_string; throws std::invalid_argument naming an unknown kernel.
KernelType kernel_type_from_string(const std::string& name);

/// A kernel κ = exp(φ − log_shift) with its one parameter: the scale s (exponential), λ (Laplacian) or h
/// (Gaussian).
struct Kernel {
  KernelType type = KernelType::exponential;
  double param = 0.125;  ///< s for exponential (1/√d by convention), λ > 0 for Laplacian, h > 0 for Gaussian
  double log_shift = 0;  ///< c of κ_c = exp(φ − c) (finite); softmax attention S = D⁻¹G does not depend on it

  static Kernel exponential(double scale) { return {KernelType::exponential, scale}; }
  static Kernel laplacian(double lambda) { return {KernelType::laplacian, lambda}; }
  static Kernel gaussian(double bandwidth) { return {KernelType::gaussian, bandwidth}; }

  /// Throws std::invalid_argument naming the parameter unless it is finite (and > 0 for Laplacian and
  /// Gaussian), or naming log_shift unless it is finite.
  void validate() const;

  /// "exp(s=0.125)", "laplacian(lambda=4)", ...; "exp(s=0.125, log_shift=312.5)" with a shift.
  std::string label() const;

  /// The same kernel with log_shift = c.
  Kernel shifted(double c) const {
    Kernel kernel = *this;
    kernel.log_shift = c;
    return kernel;
  }

  /// Throws std::invalid_argument naming the value unless the parameter is valid, X (n×d) and Y (p×e) share
  /// d = e, and the output block is n×p.
  void require_block(Index n, Index p, Index d, Index e, Index out_rows, Index out_cols) const;

  /// The factor f of a distance kernel's exponent φ = f·dist in T: −1/λ of the L1 distance (laplacian),
  /// −1/(2h²) of the squared L2 distance (gaussian). Throws std::invalid_argument naming the parameter where
  /// f overflows T: coincident tokens would get 0·(−∞) = NaN instead of κ = 1.
  template <class T>
  T distance_factor() const;

  /// out(i, j) = φ(X_i, Y_j) for the rows of X (n×d) and Y (p×d), without the log-shift; out must be n×p.
  /// O(n·p·d).
  template <class T>
  void exponent(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, MatrixRef<T> out) const;

  /// out(i, j) = κ(X_i, Y_j) = exp(φ(X_i, Y_j) − log_shift); out must be n×p. O(n·p·d). Blocks above
  /// detail::parallel_work multiply-adds are filled in row panels over the OpenMP threads (threads.hpp).
  template <class T>
  void evaluate(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, MatrixRef<T> out) const;

  /// The block κ(X, Y) as a new n×p matrix.
  template <class T>
  Matrix<T> block(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y) const {
    Matrix<T> out(X.rows(), Y.rows());
    evaluate<T>(X, Y, out);
    return out;
  }

  /// The exponent block φ(X, Y) (without the log-shift) as a new n×p matrix.
  template <class T>
  Matrix<T> exponent_block(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y) const {
    Matrix<T> out(X.rows(), Y.rows());
    exponent<T>(X, Y, out);
    return out;
  }
};

/// Writes Kernel::label() into a stream: a message streams the kernel, so the label is formatted only when a
/// message is built.
std::ostream& operator<<(std::ostream& out, const Kernel& kernel);

/// log(DBL_MAX): exp(x) overflows double for x above it.
constexpr double double_exponent_limit = 709.782712893384;

/// max_{i,j} φ(X_i, Y_j) over every pair (without the log-shift), from row panels of the exponent block
/// spread over the OpenMP threads; nothing n×p is stored. O(n·p·d).
template <class T>
double largest_exponent(const Kernel& kernel, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y);

/// The log-shift c of kernel matrices in T whose largest exponent is `largest` (docs/mathematics.md §1,
/// "Large logits"): for the exponential kernel `largest` itself where it is above 0 (entries beyond 1,
/// overflowing from 88.7 in float and 709.8 in double) or below −½·log(max T) (entries whose squares
/// underflow T; all of G from −87 in float and −745 in double), else 0; so every entry of κ_c(X, Y) is ≤ 1,
/// and so is every entry of the landmark blocks of G̃ (landmarks are rows or averages of rows, and s·q̄ᵀk is
/// then an average of logits). For the Laplacian and Gaussian kernels max(0, largest): their landmark blocks
/// are not bounded by the tokens' largest exponent (a landmark pair may lie far closer than any token pair),
/// so no negative shift keeps them representable. Throws std::invalid_argument naming the largest logit when
/// exp of it overflows double (above double_exponent_limit), where no shift recovers G in double, or when it
/// is not finite (exponents that overflowed T as they were computed).
template <class T>
double log_shift_for(const Kernel& kernel, double largest);

/// log_shift_for the kernel matrices of the tokens X, Y: 0 for the Laplacian and Gaussian kernels (φ ≤ 0),
/// the exponential kernel's from one pass over the logits (largest_exponent).
template <class T>
double kernel_log_shift(const Kernel& kernel, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y);

namespace detail {

/// exp of every entry in place. A contiguous block is exponentiated as one flat array, which Eigen
/// vectorizes throughout; column by column, each column's unaligned head and tail would go to scalar exp
/// (other last bits), and short columns would be mostly loop overhead.
template <class Block>
void exp_in_place(Block&& x) {
  using T = typename std::decay_t<Block>::Scalar;
  if (x.outerStride() == x.rows()) {
    Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>> flat(x.data(), x.size());
    flat = flat.exp();
  } else {
    for (Index j = 0; j < x.cols(); ++j) x.col(j) = x.col(j).array().exp().matrix();
  }
}

/// out(i, j) = factor · Σ_c |X(i,c) − Y(j,c)| (L1) or factor · Σ_c (X(i,c) − Y(j,c))² (squared L2), by direct
/// differences (no ‖x‖² + ‖y‖² − 2xᵀy cancellation). Tiles of rows of X are packed contiguously and their
/// sums held in registers over the d coordinates: 2.5× faster than a column sweep at N = 4096, d = 64
/// (measured in double).
template <class T, bool L1>
void distance_exponent(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, MatrixRef<T> out, T factor) {
  constexpr Index tile = 256 / sizeof(T);  // rows of X per register tile: 32 doubles or 64 floats
  using Column = Eigen::Array<T, tile, 1>;
  const Index n = X.rows(), d = X.cols();
  const Matrix<T> coordinates = Y.transpose();  // the coordinates of each row of Y, contiguous
  Eigen::Array<T, tile, Eigen::Dynamic> packed(tile, d);
  for (Index first = 0; first < n; first += tile) {
    const Index rows = std::min(tile, n - first);
    if (rows < tile) packed.setZero();
    packed.topRows(rows) = X.middleRows(first, rows).array();
    for (Index j = 0; j < coordinates.cols(); ++j) {
      Column sum = Column::Zero();
      for (Index c = 0; c < d; ++c) {
        if constexpr (L1)
          sum += (packed.col(c) - coordinates(c, j)).abs();
        else
          sum += (packed.col(c) - coordinates(c, j)).square();
      }
      out.col(j).segment(first, rows) = factor * sum.head(rows).matrix();
    }
  }
}

}  // namespace detail

template <class T>
T Kernel::distance_factor() const {
  const bool l1 = type == KernelType::laplacian;
  const double factor = l1 ? -1.0 / param : -0.5 / param / param;
  // Named without Kernel's operator<< (the CUDA backend module instantiates this too).
  require(std::abs(factor) <= double(std::numeric_limits<T>::max()),
          l1 ? "kernel laplacian: lambda = " : "kernel gaussian: h = ", param, ": the exponent's factor ",
          l1 ? "-1/lambda" : "-1/(2 h^2)", " = ", factor, " overflows ", sizeof(T) == 4 ? "float" : "double",
          " (the kernel of any two distinct tokens underflows to 0)");
  return T(factor);
}

template <class T>
void Kernel::exponent(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, MatrixRef<T> out) const {
  require_block(X.rows(), Y.rows(), X.cols(), Y.cols(), out.rows(), out.cols());
  if (type == KernelType::exponential) {
    out.noalias() = (T(param) * X) * Y.transpose();
    return;
  }
  const bool l1 = type == KernelType::laplacian;
  const T factor = distance_factor<T>();
  const auto fill = [&](const ConstMatrixRef<T>& rows, const ConstMatrixRef<T>& columns, MatrixRef<T> block) {
    if (l1)
      detail::distance_exponent<T, true>(rows, columns, block, factor);
    else
      detail::distance_exponent<T, false>(rows, columns, block, factor);
  };
  // The distance is symmetric: tile the longer side, so a few landmark rows against N tokens (G_U) fill whole
  // tiles.
  if (X.rows() >= Y.rows()) {
    fill(X, Y, out);
  } else {
    Matrix<T> transposed(Y.rows(), X.rows());
    fill(Y, X, transposed);
    out = transposed.transpose();
  }
}

template <class T>
void Kernel::evaluate(const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y, MatrixRef<T> out) const {
  require_block(X.rows(), Y.rows(), X.cols(), Y.cols(), out.rows(), out.cols());
  constexpr Index panel = 256;
  const Index n = X.rows();
  const double work = double(n) * double(Y.rows()) * double(std::max<Index>(X.cols(), 1));
  const auto fill = [&](Index first, Index count) {
    auto block = out.middleRows(first, count);
    exponent<T>(X.middleRows(first, count), Y, block);
    if (log_shift != 0) block.array() -= T(log_shift);
    block = block.array().exp().matrix();
  };
  if (work < detail::parallel_work || n < 2 * panel || omp_get_max_threads() == 1) {
    fill(0, n);
    return;
  }
  const SingleThreadedBlas single_threaded_blas;
#pragma omp parallel for schedule(static)
  for (Index first = 0; first < n; first += panel) fill(first, std::min(panel, n - first));
}

}  // namespace nystrom
