#pragma once
/// @file lapack.hpp
/// The library's one door to LAPACK (internal), through LAPACKE on column-major double matrices: the dense
/// SVD drivers dgesdd (divide and conquer) and dgesvd (QR iteration), behind spectral.hpp's dense_svd, and
/// the symmetric eigensolver dsyevr: MRRR for the Rayleigh–Ritz step of spectral.cpp's block Lanczos,
/// values only for the largest eigenvalue (bounds.cpp's norms).

#include <lapacke.h>

#include <algorithm>
#include <vector>

#include "nystrom/types.hpp"

namespace nystrom::detail {

/// The LAPACK SVD drivers.
enum class SvdDriver { gesdd, gesvd };

/// "dgesdd" or "dgesvd", for messages.
inline const char* driver_name(SvdDriver driver) {
  return driver == SvdDriver::gesdd ? "dgesdd" : "dgesvd";
}

/// A = U diag(σ) Vᵀ by `driver`: σ (min(rows, cols), descending) always; with `vectors`, the thin U
/// (rows×p) and Vᵀ (p×cols). `a` is overwritten (LAPACK's workspace). Returns LAPACK's info: 0 success,
/// < 0 an illegal argument, > 0 the bidiagonal SVD did not converge.
inline lapack_int lapack_svd(SvdDriver driver, Matrix<double>& a, bool vectors, Vector<double>& sigma,
                             Matrix<double>& u, Matrix<double>& vt) {
  const auto rows = static_cast<lapack_int>(a.rows()), cols = static_cast<lapack_int>(a.cols());
  const lapack_int p = std::min(rows, cols);
  sigma.resize(p);
  u.resize(vectors ? rows : 0, vectors ? p : 0);
  vt.resize(vectors ? p : 0, vectors ? cols : 0);
  // LAPACK wants leading dimensions ≥ 1 even for arrays it does not reference.
  const lapack_int lda = std::max<lapack_int>(1, rows), ldu = std::max<lapack_int>(1, rows),
                   ldvt = std::max<lapack_int>(1, p);
  const char job = vectors ? 'S' : 'N';
  if (driver == SvdDriver::gesdd)
    return LAPACKE_dgesdd(LAPACK_COL_MAJOR, job, rows, cols, a.data(), lda, sigma.data(), u.data(), ldu,
                          vt.data(), ldvt);
  Vector<double> superdiagonal(std::max<lapack_int>(1, p - 1));
  return LAPACKE_dgesvd(LAPACK_COL_MAJOR, job, job, rows, cols, a.data(), lda, sigma.data(), u.data(), ldu,
                        vt.data(), ldvt, superdiagonal.data());
}

/// The `count` largest eigenvalues (descending) and their unit eigenvectors (columns) of the symmetric
/// matrix `a` (its upper triangle is read; `a` is overwritten) by dsyevr. Returns LAPACK's info (0 success).
inline lapack_int lapack_top_eigenpairs(Matrix<double>& a, Index count, Vector<double>& values,
                                        Matrix<double>& vectors) {
  // All pairs by MRRR: for the small projected matrices here (n of a few hundred) it is several times faster
  // than the bisection and inverse iteration dsyevr falls back to for a subset.
  const auto n = static_cast<lapack_int>(a.rows());
  lapack_int found = 0;
  Vector<double> ascending(n);
  Matrix<double> z(n, n);
  std::vector<lapack_int> support(2 * static_cast<std::size_t>(n));
  const lapack_int info =
      LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'V', 'A', 'U', n, a.data(), std::max<lapack_int>(1, n), 0.0, 0.0, 0, 0,
                     0.0, &found, ascending.data(), z.data(), std::max<lapack_int>(1, n), support.data());
  if (info != 0) return info;
  const Index top = std::min<Index>(count, found);
  values = ascending.segment(found - top, top).reverse();
  vectors = z.middleCols(found - top, top).rowwise().reverse();
  return 0;
}

/// The largest eigenvalue of the symmetric n×n matrix `a` (n ≥ 1; its upper triangle is read; `a` is
/// overwritten) by dsyevr without vectors: Householder tridiagonalization, then every eigenvalue by the
/// Pal–Walker–Kahan QR iteration (dsterf). Bisection for the one value (range 'I') failed with info = 2 on
/// degenerate spectra (equal tokens). Returns LAPACK's info (0 success).
inline lapack_int lapack_largest_eigenvalue(Matrix<double>& a, double& value) {
  const auto n = static_cast<lapack_int>(a.rows());
  lapack_int found = 0;
  Vector<double> ascending(n);
  std::vector<lapack_int> support(2 * static_cast<std::size_t>(n));  // referenced only with vectors
  double unused_vector = 0;
  const lapack_int info =
      LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'N', 'A', 'U', n, a.data(), std::max<lapack_int>(1, n), 0.0, 0.0, 0, 0,
                     0.0, &found, ascending.data(), &unused_vector, 1, support.data());
  if (info == 0) value = ascending.head(found).maxCoeff();
  return info;
}

}  // namespace nystrom::detail
