#pragma once
/// @file spectral_impl.hpp
/// Spectra glue for spectral.hpp: the Gram operator AᵀA / AAᵀ of any operator (operators.hpp) in double, and
/// the Lanczos driver. Included by spectral.hpp; not a public header of its own.

#include <Spectra/SymEigsSolver.h>
#include <Spectra/Util/SimpleRandom.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

#include "nystrom/detail/operator_concepts.hpp"
#include "nystrom/error.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

namespace detail {

/// The power of four that Lanczos divides an operator's products by, fixed by the first nonzero product: 4^j
/// with 4^j ≤ max|yᵢ| < 4^(j+1). Lanczos then works at unit scale whatever the operator's: its convergence
/// tests have absolute floors (Spectra's eps^(2/3)) and its norms square the entries, so an operator scaled
/// by 1e-10 gave singular values off by 13% (1e-50: by 66%) marked converged, and one scaled by 1e100 by 30%.
/// Dividing by a power of two is exact, so operators of ordinary scale get the same bits as without it; the
/// square root of the scale, for the singular values of a Gram operator, is exact too.
class ProductScale {
 public:
  /// y ← y / scale(), fixing the scale at the first nonzero y.
  template <class Derived>
  void apply(Eigen::MatrixBase<Derived>& y) {
    if (!fixed_) {
      const double largest = y.cwiseAbs().maxCoeff();
      if (!(largest > 0) || !std::isfinite(largest)) return;
      exponent_ = std::ilogb(largest);
      exponent_ -= exponent_ & 1;  // even, floor toward −∞ (two's complement)
      fixed_ = true;
    }
    if (exponent_ != 0) y = y.unaryExpr([e = -exponent_](double v) { return std::ldexp(v, e); });
  }

  /// The scale 4^j (1 before the first nonzero product).
  double value() const { return std::ldexp(1.0, exponent_); }
  /// √value() = 2^j.
  double root() const { return std::ldexp(1.0, exponent_ / 2); }

 private:
  int exponent_ = 0;
  bool fixed_ = false;
};

/// The symmetric positive semidefinite Gram operator of `op` on its smaller side (AAᵀ when rows ≤ cols, else
/// AᵀA), in double for Spectra whatever the operator's scalar, its products divided by a ProductScale
/// (scale()); counts the operator products it spends.
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
  /// The scale the products are divided by.
  const ProductScale& scale() const { return scale_; }

  /// y = AAᵀx / scale or AᵀAx / scale.
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
    Eigen::Map<Vector<double>> image(y, size());
    image = out_.template cast<double>();
    scale_.apply(image);
  }

  /// For σ from a unit Ritz vector x of this Gram operator, a bound on |σ − σ_j| for some singular value σ_j:
  /// x is taken as the left (AAᵀ) or right (AᵀA) singular vector u, its partner v = Aᵀu/s with s = ‖Aᵀu‖
  /// (A and Aᵀ swapped for AᵀA), and the Jordan–Wielandt residual bound gives |s − σ_j| ≤ ‖Av − s·u‖; hence
  /// |σ − s| + ‖Av − s·u‖. Two operator products, unscaled (σ is a singular value of A itself).
  double singular_error_bound(const Vector<double>& x, double sigma) const {
    in_ = x.template cast<OpScalar>();
    if (outer_)
      op_.perform_transpose_op(in_.data(), middle_.data());
    else
      op_.perform_op(in_.data(), middle_.data());
    const Vector<double> partner = middle_.template cast<double>();
    const double s = partner.norm();
    if (s == 0) return sigma;  // x lies in the null space: σ_j = 0
    middle_ = (partner / s).template cast<OpScalar>();
    if (outer_)
      op_.perform_op(middle_.data(), out_.data());
    else
      op_.perform_transpose_op(middle_.data(), out_.data());
    products_ += 2;
    return std::abs(sigma - s) + (out_.template cast<double>() - s * x).norm();
  }

 private:
  const Operator& op_;
  bool outer_;
  mutable Vector<OpScalar> in_, out_, middle_;
  mutable int products_ = 0;
  mutable ProductScale scale_;
};

/// The operator as a dense matrix in double: a stored operator's matrix, else formed column by column from
/// its products (small sizes only).
template <class Operator>
Matrix<double> materialize(const Operator& op, int& products) {
  using OpScalar = typename Operator::Scalar;
  if constexpr (requires { op.matrix(); }) return op.matrix().template cast<double>();
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

/// The symmetric augmented operator [[0, A], [Aᵀ, 0]] of `op` ((rows + cols)², eigenvalues ±σᵢ(A) and
/// |rows − cols| zeros) in double for Spectra, its products divided by a ProductScale (scale()); one pass of
/// A per product when the operator offers perform_augmented_op, else one A and one Aᵀ product.
template <class Operator>
class AugmentedOperator {
 public:
  using Scalar = double;
  using OpScalar = typename Operator::Scalar;

  explicit AugmentedOperator(const Operator& op) : op_(op), in_(rows()), out_(rows()) {}
  Index rows() const { return op_.rows() + op_.cols(); }
  Index cols() const { return rows(); }
  int products() const { return products_; }
  const ProductScale& scale() const { return scale_; }

  void perform_op(const double* x, double* y) const {
    in_ = Eigen::Map<const Vector<double>>(x, rows()).template cast<OpScalar>();
    if constexpr (HasAugmentedProduct<Operator>) {
      op_.perform_augmented_op(in_.data(), out_.data());
    } else {
      op_.perform_op(in_.data() + op_.rows(), out_.data());
      op_.perform_transpose_op(in_.data(), out_.data() + op_.rows());
    }
    products_ += 2;
    Eigen::Map<Vector<double>> image(y, rows());
    image = out_.template cast<double>();
    scale_.apply(image);
  }

 private:
  const Operator& op_;
  mutable Vector<OpScalar> in_, out_;
  mutable int products_ = 0;
  mutable ProductScale scale_;
};

/// Throws std::invalid_argument unless the product `y` of an n×n Lanczos operator is finite: an operator with
/// an overflowed or NaN entry, which Lanczos would turn into NaN values or a failed tridiagonal solve.
template <class Derived>
void require_finite_product(const Eigen::MatrixBase<Derived>& y, Index n) {
  if (!all_finite(y))
    throw NonFiniteProduct(
        describe("Lanczos: a product of the ", n, "x", n,
                 " operator is not finite (an entry of the operator overflows or is NaN)"));
}

/// An operator of rank ≤ 1 as Spectra's start reveals it: the eigenvalue λ (0 for the zero operator) and a
/// unit eigenvector of it.
struct RankOne {
  double value = 0;
  Vector<double> direction;
};

/// `symmetric` as Spectra sees it: every product checked (require_finite_product), and the start watched.
/// Spectra starts from v1 = A·v0/‖A·v0‖ for a random v0 and takes f = A·v1 − (v1ᵀA·v1)·v1 as its next
/// direction unless |f| < eps entrywise (SymEigsBase::init, Arnoldi::init). That start fails on operators of
/// rank ≤ 1: for a zero operator v1 is 0/0 (NaN throughout; its tridiagonal eigensolver throws); for a rank-1
/// one (G = c·11ᵀ of equal tokens) f is rounding noise, not orthogonal to v1, and Spectra 1.0.1 returned
/// wrong eigenvalues as converged (‖G‖₂ = 28926 for 33.9). So the first product stops the run with ZeroImage
/// where A·v0 = 0, and the second with RankOne where A·v1 lies along v1 to the rounding of the product
/// (16·√n·eps·‖A·v1‖): no product beyond Spectra's own.
template <class Symmetric>
class WatchedStart {
 public:
  using Scalar = double;
  struct ZeroImage {};

  explicit WatchedStart(const Symmetric& symmetric) : symmetric_(symmetric) {}
  Index rows() const { return symmetric_.rows(); }
  Index cols() const { return symmetric_.cols(); }

  void perform_op(const double* x, double* y) const {
    const Index n = rows();
    symmetric_.perform_op(x, y);
    const Eigen::Map<const Vector<double>> in(x, n), out(y, n);
    require_finite_product(out, n);
    if (++calls_ > 2) return;
    if (calls_ == 1) {
      if (out.norm() == 0) throw ZeroImage{};
      return;
    }
    const double value = in.dot(out);
    Vector<double> f = out - value * in;
    f -= in.dot(f) * in;
    if (f.norm() <= 16 * std::sqrt(double(n)) * std::numeric_limits<double>::epsilon() * out.norm())
      throw RankOne{value, in};
  }

 private:
  const Symmetric& symmetric_;
  mutable int calls_ = 0;
};

/// The k largest eigenvalues λ, 0, …, 0 of an operator of rank ≤ 1 into `result`; returns the unit Ritz
/// vector of the k-th: λ's eigenvector, or for 0 a unit vector orthogonal to it.
inline Vector<double> rank_one_eigenvalues(const RankOne& rank_one, Index k, SpectralResult& result) {
  result.converged = true;
  result.values = Vector<double>::Zero(k);
  result.values(0) = std::max(rank_one.value, 0.0);
  const Vector<double>& u = rank_one.direction;
  if (k == 1 && rank_one.value > 0) return u;
  Index j = 0;
  u.cwiseAbs().minCoeff(&j);
  return (Vector<double>::Unit(u.size(), j) - u(j) * u).normalized();
}

/// Spectra's k largest eigenvalues of a symmetric operator with basis size `basis`, NaN-padded to k where
/// Spectra did not converge (result.last_error_bound NaN then); counts the products in `result.matvecs`.
/// Returns the unit Ritz vector of the k-th value (empty when Spectra returned fewer than k). Spectra starts
/// from its own random v0; where the operator maps it to 0, from the next two of the same stream, and an
/// operator that maps all three to 0 is taken as zero. An operator of rank ≤ 1 (WatchedStart) gets its
/// eigenvalues from rank_one_eigenvalues. Throws as require_finite_product.
template <class Symmetric>
Vector<double> largest_eigenvalues(Symmetric& symmetric, Index k, Index basis, const SpectralOptions& options,
                                   SpectralResult& result) {
  const Index n = symmetric.rows();
  Spectra::SimpleRandom<double> random(0);
  for (int attempt = 0; attempt < 3; ++attempt) {
    const Vector<double> start = random.random_vec(n);
    WatchedStart<Symmetric> watched(symmetric);
    Spectra::SymEigsSolver<WatchedStart<Symmetric>> eigs(watched, k, basis);
    try {
      eigs.init(start.data());
      eigs.compute(Spectra::SortRule::LargestAlge, options.max_restarts, options.tolerance,
                   Spectra::SortRule::LargestAlge);
    } catch (const typename WatchedStart<Symmetric>::ZeroImage&) {
      continue;
    } catch (const RankOne& rank_one) {
      result.matvecs = symmetric.products();
      return rank_one_eigenvalues(rank_one, k, result);
    }
    result.converged = eigs.info() == Spectra::CompInfo::Successful;
    result.matvecs = symmetric.products();
    result.values = eigs.eigenvalues().cwiseMax(0.0);
    if (result.values.size() == k) return eigs.eigenvectors().col(k - 1);
    // Spectra returns only the converged pairs; report the rest as NaN so the caller sees what is missing.
    Vector<double> padded = Vector<double>::Constant(k, std::numeric_limits<double>::quiet_NaN());
    padded.head(result.values.size()) = result.values;
    result.values = padded;
    result.last_error_bound = std::numeric_limits<double>::quiet_NaN();
    return Vector<double>();
  }
  result.matvecs = symmetric.products();
  return rank_one_eigenvalues({0, Vector<double>::Unit(n, 0)}, k, result);
}

/// The k largest singular values of the formed operator by a full SVD (singular_values: LAPACK, when a
/// Krylov basis would span it).
template <class Operator>
SpectralResult dense_top_singular_values(const Operator& op, Index k) {
  SpectralResult result;
  const Matrix<double> dense = materialize(op, result.matvecs);
  result.values = singular_values<double>(dense).head(k);
  result.converged = true;
  return result;
}

/// A stored n×n matrix's top k singular values come from a full SVD when k ≥ n / dense_top_ratio: block
/// Lanczos (with its Rayleigh–Ritz steps) against LAPACK's dgesdd on the extended kernel matrices G̃ of the
/// bundled dumps (n = 264 to 1280, 1 thread) was faster up to k/n ≈ 0.12 and slower from k/n ≈ 0.2 on (1.4 to
/// 2.9 times the SVD's time).
constexpr Index dense_top_ratio = 6;

/// Columns of a block Lanczos block (at most; k when k is smaller): a one-pass Gram product of 4 vectors
/// costs about what one of a single vector does on a stored matrix (its memory traffic), and 4 vectors per
/// step need about a third of the passes of single-vector Lanczos for top-17 spectra (measured on the N =
/// 1024 sweep point's G̃).
constexpr Index block_lanczos_width = 4;

/// Y = M X for a symmetric positive semidefinite n×n operator M on a block X (n×b), in double.
using BlockProduct = std::function<void(const ConstMatrixRef<double>& x, Matrix<double>& y)>;

/// The k largest eigenvalues θ₁ ≥ … ≥ θ_k of the PSD operator M (n×n, by block products) by block Lanczos
/// with full reorthogonalization and no restart (block width min(k, block_lanczos_width), seeded random
/// start, basis up to max(10(k + b), 240) vectors); result.values are √θ_i, the singular values when M is a
/// Gram operator. Converged when every Ritz residual ‖M V y_i − θ_i V y_i‖ (from the next block's coupling)
/// is ≤ options.tolerance·θ_i or the products' rounding n·eps·θ₁; Rayleigh–Ritz steps are spaced by the rate
/// the residuals fall at. `ritz` gets the unit Ritz vector of θ_k. Returns empty values (and `ritz`) when the
/// basis capacity is reached first or n is too small for a basis, for the caller's other path; NaN values
/// when a product is not finite.
SpectralResult block_lanczos(Index n, Index k, const BlockProduct& product, Vector<double>& ritz,
                             const SpectralOptions& options);

/// top_singular_values by block Lanczos on the one-pass block Gram products of `op` (AAᵀ when rows ≤ cols,
/// else AᵀA, in double), with the certificate of the k-th value; empty values where block_lanczos gives up.
template <class Operator>
requires HasBlockGram<Operator> SpectralResult block_top_singular_values(const Operator& op, Index k,
                                                                         const SpectralOptions& options) {
  using OpScalar = typename Operator::Scalar;
  const bool outer = op.rows() <= op.cols();
  const Index n = outer ? op.rows() : op.cols();
  Matrix<OpScalar> in, out;
  ProductScale scale;
  const BlockProduct product = [&](const ConstMatrixRef<double>& x, Matrix<double>& y) {
    in = x.template cast<OpScalar>();
    out.resize(n, x.cols());
    if (outer)
      op.perform_outer_gram_block_op(in.data(), x.cols(), out.data());
    else
      op.perform_inner_gram_block_op(in.data(), x.cols(), out.data());
    y = out.template cast<double>();
    require_finite_product(y, n);
    scale.apply(y);
  };
  Vector<double> ritz;
  SpectralResult result = block_lanczos(n, k, product, ritz, options);
  result.values *= scale.root();
  if (ritz.size() == 0 || !result.converged) return result;
  GramOperator<Operator> gram(op);
  result.last_error_bound = gram.singular_error_bound(ritz, result.values(k - 1));
  result.matvecs += gram.products();
  return result;
}

/// Checks 1 ≤ k ≤ min(rows, cols) for `where`, naming k as `argument` (the Python module's `count`).
template <class Operator>
void require_rank_count(const Operator& op, Index k, const char* where, const char* argument = "k") {
  const Index n = std::min(op.rows(), op.cols());
  require(k >= 1 && k <= n, where, ": ", argument, " = ", k, " must be in [1, ", n,
          "] (the smaller dimension of the ", op.rows(), "x", op.cols(), " operator)");
}

}  // namespace detail

template <class Operator>
SpectralResult top_singular_values_augmented(const Operator& op, Index k, const SpectralOptions& options) {
  options.validate();
  detail::require_rank_count(op, k, "top_singular_values_augmented");
  detail::AugmentedOperator<Operator> augmented(op);
  const Index size = augmented.rows();
  const Index basis = std::min<Index>(
      options.subspace > 0 ? std::max<Index>(options.subspace, k + 1) : std::max<Index>(2 * k + 1, 20), size);
  if (basis >= size) return detail::dense_top_singular_values(op, k);
  SpectralResult result;
  const Vector<double> ritz = detail::largest_eigenvalues(augmented, k, basis, options, result);
  if (ritz.size() > 0) {
    // The eigenvalue residual of the augmented operator bounds the distance to one of its eigenvalues ±σ_j.
    Vector<double> image(size);
    augmented.perform_op(ritz.data(), image.data());
    result.matvecs = augmented.products();
    result.last_error_bound = (image - result.values(k - 1) * ritz).norm() * augmented.scale().value();
  }
  result.values *= augmented.scale().value();
  return result;
}

template <class Operator>
SpectralResult augmented_spectral_norm(const Operator& op, const SpectralOptions& options) {
  return top_singular_values_augmented(op, 1, options);
}

template <class Operator>
SpectralResult top_singular_values(const Operator& op, Index k, const SpectralOptions& options) {
  options.validate();
  detail::require_rank_count(op, k, "top_singular_values");
  const Index n = std::min(op.rows(), op.cols());
  const Index default_basis = std::max<Index>(2 * k + 1, 10);
  const Index basis =
      std::min<Index>(options.subspace > 0 ? std::max<Index>(options.subspace, k + 1) : default_basis, n);
  // When the Krylov basis would span the whole Gram matrix, a full SVD of the formed operator is cheaper and
  // exact.
  if (basis <= k || basis >= n) return detail::dense_top_singular_values(op, k);
  if constexpr (detail::HasBlockGram<Operator>) {
    if (detail::dense_top_ratio * k >= n) return detail::dense_top_singular_values(op, k);
    // Stored matrices: block Lanczos on one-pass block Gram products; Spectra below where it gives up.
    SpectralResult block = detail::block_top_singular_values(op, k, options);
    if (block.values.size() == k) return block;
  }
  detail::GramOperator<Operator> gram(op);
  SpectralResult result;
  const Vector<double> ritz = detail::largest_eigenvalues(gram, k, basis, options, result);
  result.values = result.values.cwiseSqrt() * gram.scale().root();
  if (ritz.size() > 0) {
    result.last_error_bound = gram.singular_error_bound(ritz, result.values(k - 1));
    result.matvecs = gram.products();
  }
  return result;
}

template <class Operator>
SpectralResult spectral_norm(const Operator& op, const SpectralOptions& options) {
  return top_singular_values(op, 1, options);
}

}  // namespace nystrom
