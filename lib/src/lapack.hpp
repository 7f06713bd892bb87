#pragma once
/// @file lapack.hpp
/// The library's one door to LAPACK (internal): the dense SVD drivers dgesdd (divide and conquer) and dgesvd
/// (QR iteration) through LAPACKE, on a column-major double matrix. spectral.cpp's dense_svd is their only
/// caller.

#include <lapacke.h>

#include <algorithm>

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

}  // namespace nystrom::detail
