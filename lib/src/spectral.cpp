#include "nystrom/spectral.hpp"

#include <cmath>
#include <limits>

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
Vector<double> singular_values(const ConstMatrixRef<T>& a) {
  require_finite(a, "singular_values: matrix");
  if (a.size() == 0) return Vector<double>();
  return Eigen::BDCSVD<Matrix<double>>(a.template cast<double>()).singularValues();
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
  const double total = singular_values.squaredNorm();
  if (total == 0) return k == 0 ? 0.0 : 1.0;
  return singular_values.head(k).squaredNorm() / total;
}

template <class T>
double frobenius_norm(const ConstMatrixRef<T>& a) {
  double sum = 0;
  for (Index j = 0; j < a.cols(); ++j) sum += a.col(j).template cast<double>().squaredNorm();
  return std::sqrt(sum);
}

#define NYSTROM_INSTANTIATE(T)                                          \
  template Vector<double> singular_values<T>(const ConstMatrixRef<T>&); \
  template double frobenius_norm<T>(const ConstMatrixRef<T>&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
