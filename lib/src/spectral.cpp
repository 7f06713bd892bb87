#include "nystrom/spectral.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "lapack.hpp"
#include "nystrom/error.hpp"

namespace nystrom {

void SpectralOptions::validate() const {
  require(subspace >= 0, "spectral options: subspace = ", subspace, " must be >= 0 (0 selects the default)");
  require(max_restarts >= 1, "spectral options: max_restarts = ", max_restarts, " must be >= 1");
  require(std::isfinite(tolerance) && tolerance > 0, "spectral options: tolerance = ", tolerance,
          " must be finite and > 0");
}

template <class T>
DenseSvd dense_svd(const ConstMatrixRef<T>& a, SvdVectors vectors) {
  require_finite(a, "dense_svd: matrix");
  const auto lapack_limit = static_cast<Index>(std::numeric_limits<lapack_int>::max());
  require(a.rows() <= lapack_limit && a.cols() <= lapack_limit, "dense_svd: a ", a.rows(), "x", a.cols(),
          " matrix exceeds LAPACK's index range");
  DenseSvd svd;
  if (a.size() == 0) {
    svd.u.resize(vectors == SvdVectors::thin ? a.rows() : 0, 0);
    svd.v.resize(vectors == SvdVectors::thin ? a.cols() : 0, 0);
    return svd;
  }
  const bool with_vectors = vectors == SvdVectors::thin;
  Matrix<double> vt;
  lapack_int info = 0;
  for (const detail::SvdDriver driver : {detail::SvdDriver::gesdd, detail::SvdDriver::gesvd}) {
    Matrix<double> work = a.template cast<double>();  // LAPACK overwrites its input
    info = detail::lapack_svd(driver, work, with_vectors, svd.values, svd.u, vt);
    if (info < 0)
      throw std::logic_error(describe("dense_svd: LAPACK ", detail::driver_name(driver),
                                      " rejected argument ", -info, " for a ", a.rows(), "x", a.cols(),
                                      " matrix"));
    if (info == 0) {
      if (with_vectors) svd.v = vt.transpose();
      return svd;
    }
  }
  throw std::runtime_error(describe("dense_svd: LAPACK's dgesdd and dgesvd did not converge on a ", a.rows(),
                                    "x", a.cols(), " matrix (dgesvd info = ", info, ")"));
}

template <class T>
Vector<double> singular_values(const ConstMatrixRef<T>& a) {
  return dense_svd<T>(a, SvdVectors::none).values;
}

namespace detail {

namespace {

/// Block Lanczos state: an orthonormal basis V (n × up to `capacity` columns) of the Krylov space of M and
/// T = VᵀMV, whose upper triangle is filled column by column from the orthogonalization coefficients.
class KrylovBasis {
 public:
  KrylovBasis(Index n, Index capacity)
      : basis_(n, capacity), projected_(Matrix<double>::Zero(capacity, capacity)), engine_(0x5eedULL) {}

  Index size() const { return used_; }
  auto columns(Index first, Index count) const { return basis_.middleCols(first, count); }
  const Matrix<double>& projected() const { return projected_; }

  /// Appends the columns of `block` orthonormalized against the basis and each other: block Gram–Schmidt
  /// twice against the basis, then column by column (a third pass where a column lost most of its norm).
  /// Their coefficients go to column `target` + c of T (the basis vector whose product gave column c; none
  /// for the starting block, target < 0); the b×b coupling of the appended columns to the block is returned
  /// in `coupling` (upper triangular). A column with no component above `floor` outside the basis (an
  /// invariant subspace) is replaced by a random direction orthogonal to the basis, with coupling 0.
  void append(Matrix<double> block, Index target, double floor, Matrix<double>& coupling) {
    const Index b = block.cols(), old = used_;
    const Vector<double> before = block.colwise().norm();
    const auto previous = basis_.leftCols(old);
    Matrix<double> coefficients = previous.transpose() * block;
    block.noalias() -= previous * coefficients;
    const Matrix<double> again = previous.transpose() * block;
    block.noalias() -= previous * again;
    coefficients += again;
    coupling = Matrix<double>::Zero(b, b);
    for (Index c = 0; c < b; ++c) {
      Vector<double> w = block.col(c);
      for (int pass = 0; pass < 2; ++pass) orthogonalize(w, old, used_, coupling.col(c).head(c));
      if (w.norm() < 1e-3 * before(c)) {  // heavy cancellation: one more pass against everything
        Vector<double> extra = basis_.leftCols(old).transpose() * w;
        w.noalias() -= basis_.leftCols(old) * extra;
        coefficients.col(c) += extra;
        orthogonalize(w, old, used_, coupling.col(c).head(c));
      }
      const double norm = w.norm();
      if (norm > floor) {
        coupling(c, c) = norm;
        basis_.col(used_++) = w / norm;
      } else {
        append_random_direction();
      }
    }
    if (target >= 0) projected_.block(0, target, old, b) = coefficients;
  }

  /// Appends a random unit vector orthogonal to the basis (the starting block, or a deflated direction).
  void append_random_direction() {
    std::normal_distribution<double> normal;
    Vector<double> w(basis_.rows());
    for (Index i = 0; i < w.size(); ++i) w(i) = normal(engine_);
    Vector<double> unused(used_);
    for (int pass = 0; pass < 2; ++pass) {
      unused.noalias() = basis_.leftCols(used_).transpose() * w;
      w.noalias() -= basis_.leftCols(used_) * unused;
    }
    basis_.col(used_++) = w / w.norm();
  }

 private:
  /// w −= Σ_{first ≤ i < last} (v_iᵀw) v_i one column at a time, adding the coefficients to `coefficients`.
  template <class Coefficients>
  void orthogonalize(Vector<double>& w, Index first, Index last, Coefficients coefficients) {
    for (Index i = first; i < last; ++i) {
      const double r = basis_.col(i).dot(w);
      w.noalias() -= r * basis_.col(i);
      coefficients(i - first) += r;
    }
  }

  Matrix<double> basis_, projected_;
  Index used_ = 0;
  std::mt19937_64 engine_;
};

}  // namespace

SpectralResult block_lanczos(Index n, Index k, const BlockProduct& product, Vector<double>& ritz,
                             const SpectralOptions& options) {
  const Index b = std::min<Index>(k, block_lanczos_width);
  const Index capacity = std::min<Index>(n - b, std::max<Index>(10 * (k + b), 240)) / b * b;
  SpectralResult result;
  ritz.resize(0);
  if (capacity < k + b) return result;  // no room for a Krylov basis: the caller's other path
  const double eps = std::numeric_limits<double>::epsilon();
  KrylovBasis krylov(n, capacity + b);
  for (Index c = 0; c < b; ++c) krylov.append_random_direction();
  Matrix<double> image(n, b), coupling;
  double scale = 0;          // largest ‖M v‖ seen: the scale of the products' rounding
  Index next_check = k + b;  // basis size of the next Rayleigh–Ritz step
  double last_excess = 0;    // the residual excess at the last check, and the basis size there
  Index last_size = 0;
  while (krylov.size() <= capacity) {
    const Index s = krylov.size() - b;  // the newest block, V_j = columns [s, s + b)
    product(krylov.columns(s, b), image);
    result.matvecs += 2 * int(b);
    if (!all_finite(image)) {
      result.values = Vector<double>::Constant(k, std::numeric_limits<double>::quiet_NaN());
      result.last_error_bound = std::numeric_limits<double>::quiet_NaN();
      return result;
    }
    scale = std::max(scale, image.colwise().norm().maxCoeff());
    krylov.append(image, s, eps * scale, coupling);
    const Index size = s + b;  // basis V_0 … V_j, whose T is complete
    const bool last = krylov.size() > capacity;
    if (size < next_check && !last) continue;
    // Rayleigh–Ritz on T = VᵀMV: Ritz pairs (θ_i, V y_i) with residual ‖M V y_i − θ_i V y_i‖ = ‖R_j
    // y_i,last‖, R_j the coupling of the next block.
    Matrix<double> projected = krylov.projected().topLeftCorner(size, size);
    Vector<double> theta;
    Matrix<double> y;
    if (lapack_top_eigenpairs(projected, k, theta, y) != 0 || theta.size() != k) return SpectralResult{};
    // A Ritz pair is converged when its residual r_i meets the tolerance on θ_i, or when the singular value
    // it gives is certified to the rounding of σ₁ (r_i/σ_i ≤ eps·σ₁, about what the certificate of
    // top_singular_values then reads), or when θ_i lies at the products' rounding floor √n·eps·θ₁ (a null
    // direction, where nothing better is available).
    const Vector<double> residual = (coupling * y.bottomRows(b)).colwise().norm();
    const double top = std::max(theta(0), 0.0), noise = std::sqrt(double(n)) * eps * top;
    double excess = 0;  // max over the k pairs of residual / allowed
    for (Index i = 0; i < k; ++i) {
      const double value = std::max(theta(i), 0.0);
      const double allowed =
          value <= noise ? noise : std::max(options.tolerance * value, eps * std::sqrt(top * value));
      excess = std::max(excess, allowed > 0 ? residual(i) / allowed : (residual(i) > 0 ? 1e300 : 0.0));
    }
    result.values = theta.cwiseMax(0.0).cwiseSqrt();
    ritz = krylov.columns(0, size) * y.col(k - 1);
    if (excess <= 1) {
      result.converged = true;
      return result;
    }
    // The residuals fall geometrically with the basis size: check again near where the last rate says they
    // reach the tolerance (at most 6 blocks on), so few Rayleigh–Ritz steps are spent.
    Index blocks = 1;
    if (last_size > 0 && excess < last_excess) {
      const double per_block = std::log(last_excess / excess) / double((size - last_size) / b);
      blocks = std::clamp<Index>(Index(0.8 * std::log(excess) / per_block), 1, 6);
    }
    last_excess = excess;
    last_size = size;
    next_check = size + blocks * b;
  }
  result.values.resize(0);  // basis capacity reached: the caller's other path
  ritz.resize(0);
  return result;
}

}  // namespace detail

namespace {

/// Throws std::invalid_argument naming `where` unless every singular value is finite and ≥ 0.
void require_singular_values(const Vector<double>& singular_values, const char* where) {
  for (Index i = 0; i < singular_values.size(); ++i)
    require(std::isfinite(singular_values(i)) && singular_values(i) >= 0, where, ": singular value ", i,
            " = ", singular_values(i), " must be finite and >= 0");
}

}  // namespace

Index numerical_rank(const Vector<double>& singular_values, double tol) {
  require_singular_values(singular_values, "numerical_rank");
  require(!std::isnan(tol), "numerical_rank: tol = nan (give a number; <= 0 for the default)");
  if (singular_values.size() == 0) return 0;
  if (tol <= 0) tol = static_cast<double>(singular_values.size()) * std::numeric_limits<double>::epsilon();
  const double cut = tol * singular_values.maxCoeff();
  return (singular_values.array() > cut).count();
}

double energy_fraction(const Vector<double>& singular_values, Index k) {
  require_singular_values(singular_values, "energy_fraction");
  require(k >= 0 && k <= singular_values.size(), "energy_fraction: k = ", k, " must be in [0, ",
          singular_values.size(), "]");
  // Σσ² of values near the top of double's range (kernels of logits near 700) overflows: scale by σ_max.
  const double largest = singular_values.size() > 0 ? singular_values.cwiseAbs().maxCoeff() : 0.0;
  if (largest == 0) return k == 0 ? 0.0 : 1.0;
  const Vector<double> scaled = singular_values / largest;
  return scaled.head(k).squaredNorm() / scaled.squaredNorm();
}

template <class T>
double frobenius_norm(const ConstMatrixRef<T>& a) {
  double sum = 0;
  for (Index j = 0; j < a.cols(); ++j) sum += a.col(j).template cast<double>().squaredNorm();
  return std::sqrt(sum);
}

#define NYSTROM_INSTANTIATE(T)                                          \
  template DenseSvd dense_svd<T>(const ConstMatrixRef<T>&, SvdVectors); \
  template Vector<double> singular_values<T>(const ConstMatrixRef<T>&); \
  template double frobenius_norm<T>(const ConstMatrixRef<T>&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
