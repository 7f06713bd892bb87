#pragma once
/// @file test_support.hpp
/// Shared helpers for the doctest suite: seeded random matrices, slow and obviously correct dense oracles
/// computed in double, tolerances tied to √n·eps, and a check that an exception message names the bad value.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

#include "nystrom/kernels.hpp"
#include "nystrom/types.hpp"

namespace nystrom::test {

/// A rows×cols matrix of independent N(0, scale²) entries, deterministic for a given seed (std::mt19937_64).
template <class T>
Matrix<T> random_matrix(Index rows, Index cols, std::uint64_t seed, double scale = 1) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal(0.0, scale);
  Matrix<T> out(rows, cols);
  for (Index j = 0; j < cols; ++j)
    for (Index i = 0; i < rows; ++i) out(i, j) = static_cast<T>(normal(engine));
  return out;
}

/// A random rows×cols matrix of rank `rank` (product of two Gaussian factors), deterministic for a given
/// seed.
template <class T>
Matrix<T> random_low_rank(Index rows, Index cols, Index rank, std::uint64_t seed) {
  const Matrix<double> left = random_matrix<double>(rows, rank, seed);
  const Matrix<double> right = random_matrix<double>(rank, cols, seed + 1);
  return (left * right).template cast<T>();
}

/// Tokens constant on the `blocks` segments of the segment-means partition of N rows (docs/mathematics.md §5:
/// with s = ⌊N/blocks⌋ the first (s+1)·blocks − N segments have s rows, the rest s+1), one N(0, 1) row per
/// block: with `blocks` segment-means landmarks, G̃ = κ([Q̄; Q], [K̄; K]) has rank ≤ blocks (Corollary 2.2).
template <class T>
Matrix<T> segment_constant(Index n, Index d, Index blocks, std::uint64_t seed) {
  const Matrix<T> values = random_matrix<T>(blocks, d, seed);
  const Index s = n / blocks, short_segments = (s + 1) * blocks - n;
  Matrix<T> out(n, d);
  Index row = 0;
  for (Index b = 0; b < blocks; ++b)
    for (Index i = 0; i < (b < short_segments ? s : s + 1); ++i) out.row(row++) = values.row(b);
  return out;
}

/// Relative tolerance for a computation whose error accumulates over n terms: 8·√n·eps(T).
template <class T>
double tolerance(Index n) {
  return 8.0 * std::sqrt(static_cast<double>(std::max<Index>(n, 1))) * std::numeric_limits<T>::epsilon();
}

/// Relative difference ‖a − b‖_F / max(‖b‖_F, tiny), computed in double.
template <class A, class B>
double relative_difference(const A& a, const B& b) {
  const Matrix<double> da = a.template cast<double>();
  const Matrix<double> db = b.template cast<double>();
  const double reference = std::max(db.norm(), std::numeric_limits<double>::min());
  return (da - db).norm() / reference;
}

/// The dense kernel κ(X_i, Y_j) by a naive double loop in double precision straight from docs/mathematics.md
/// §1, cast to T.
template <class T>
Matrix<T> naive_kernel(const Matrix<T>& X, const Matrix<T>& Y, const Kernel& kernel) {
  Matrix<T> out(X.rows(), Y.rows());
  for (Index i = 0; i < X.rows(); ++i) {
    for (Index j = 0; j < Y.rows(); ++j) {
      double dot = 0, l1 = 0, l2 = 0;
      for (Index c = 0; c < X.cols(); ++c) {
        const double x = X(i, c), y = Y(j, c);
        dot += x * y;
        l1 += std::abs(x - y);
        l2 += (x - y) * (x - y);
      }
      double phi = 0;
      switch (kernel.type) {
        case KernelType::exponential:
          phi = kernel.param * dot;
          break;
        case KernelType::laplacian:
          phi = -l1 / kernel.param;
          break;
        case KernelType::gaussian:
          phi = -l2 / (2 * kernel.param * kernel.param);
          break;
      }
      out(i, j) = static_cast<T>(std::exp(phi));
    }
  }
  return out;
}

/// The Moore–Penrose pseudoinverse of a matrix of any shape in double by a thin JacobiSVD, singular values ≤
/// tol·σ₁ dropped.
inline Matrix<double> dense_pinv(const Matrix<double>& A, double relative_tolerance) {
  Eigen::JacobiSVD<Matrix<double>> svd(A, Eigen::ComputeThinU | Eigen::ComputeThinV);
  const auto& sigma = svd.singularValues();
  Vector<double> inverse = Vector<double>::Zero(sigma.size());
  const double cut = sigma.size() > 0 ? relative_tolerance * sigma(0) : 0;
  for (Index i = 0; i < sigma.size(); ++i)
    if (sigma(i) > cut) inverse(i) = 1 / sigma(i);
  return svd.matrixV() * inverse.asDiagonal() * svd.matrixU().transpose();
}

/// True when `action` throws std::invalid_argument whose message contains `needle` (e.g. the bad value).
inline bool throws_naming(const std::function<void()>& action, const std::string& needle) {
  try {
    action();
  } catch (const std::invalid_argument& error) {
    return std::string(error.what()).find(needle) != std::string::npos;
  }
  return false;
}

}  // namespace nystrom::test
