#include "nystrom/spectral.hpp"

#include <cmath>
#include <limits>

#include "lapack.hpp"
#include "nystrom/error.hpp"

namespace nystrom {

void SpectralOptions::validate() const {
  require(subspace >= 0,
          describe("spectral options: subspace = ", subspace, " must be >= 0 (0 selects the default)"));
  require(max_restarts >= 1, describe("spectral options: max_restarts = ", max_restarts, " must be >= 1"));
  require(std::isfinite(tolerance) && tolerance > 0,
          describe("spectral options: tolerance = ", tolerance, " must be finite and > 0"));
}

template <class T>
DenseSvd dense_svd(const ConstMatrixRef<T>& a, SvdVectors vectors) {
  require_finite(a, "dense_svd: matrix");
  const auto lapack_limit = static_cast<Index>(std::numeric_limits<lapack_int>::max());
  require(a.rows() <= lapack_limit && a.cols() <= lapack_limit,
          describe("dense_svd: a ", a.rows(), "x", a.cols(), " matrix exceeds LAPACK's index range"));
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

Index numerical_rank(const Vector<double>& singular_values, double tol) {
  if (singular_values.size() == 0) return 0;
  if (tol <= 0) tol = static_cast<double>(singular_values.size()) * std::numeric_limits<double>::epsilon();
  const double cut = tol * singular_values.maxCoeff();
  return (singular_values.array() > cut).count();
}

double energy_fraction(const Vector<double>& singular_values, Index k) {
  require(k >= 0 && k <= singular_values.size(),
          describe("energy_fraction: k = ", k, " must be in [0, ", singular_values.size(), "]"));
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
