#include "searched_landmarks.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "nystrom/error.hpp"
#include "nystrom/selection.hpp"
#include "nystrom/spectral.hpp"

namespace nystrom::detail {

namespace {

/// The largest exponent a selection's kernel entries may reach before double overflows them: entries are
/// only compared and combined, so a common factor changes no pivot (cross, maxvol and rpcholesky are
/// equivariant under scaling the matrix).
constexpr double selection_exponent_limit = 700;

/// `kernel`, or where its own log-shift is 0 and the Cauchy–Schwarz bound |s|·max‖x‖·max‖y‖ on the
/// exponential kernel's logits passes selection_exponent_limit, the kernel shifted by the excess: every entry
/// of κ(X, Y) is then at most e^700 (O(N·d)).
Kernel selection_kernel(const Kernel& kernel, const Matrix<double>& X, const Matrix<double>& Y) {
  if (kernel.type != KernelType::exponential || kernel.log_shift != 0) return kernel;
  const double bound = std::abs(kernel.param) * X.rowwise().norm().maxCoeff() * Y.rowwise().norm().maxCoeff();
  return bound > selection_exponent_limit ? kernel.shifted(bound - selection_exponent_limit) : kernel;
}

/// G = κ(X, Y) by rows κ(x_i, Y) and columns κ(X, y_j).
EntryOracle kernel_oracle(const Matrix<double>& X, const Matrix<double>& Y, const Kernel& kernel) {
  EntryOracle oracle;
  oracle.rows = X.rows();
  oracle.cols = Y.rows();
  oracle.row = [&X, &Y, kernel](Index i, double* out) {
    Eigen::Map<Matrix<double>> row(out, 1, Y.rows());
    kernel.evaluate<double>(X.row(i), Y, row);
  };
  oracle.column = [&X, &Y, kernel](Index j, double* out) {
    Eigen::Map<Matrix<double>> column(out, X.rows(), 1);
    kernel.evaluate<double>(X, Y.row(j), column);
  };
  return oracle;
}

/// The PSD kernel matrix H = κ(X, X) of the joint tokens X (NLA: exp(s xᵀy) has nonnegative Taylor
/// coefficients, so H is PSD; the Laplacian and Gaussian kernels are positive definite), shifted so that
/// its largest diagonal entry is 1 (every entry is then ≤ 1, by Cauchy–Schwarz for the exponential kernel).
PsdOracle joint_oracle(const Matrix<double>& X, const Kernel& kernel) {
  Kernel shifted = kernel;
  if (kernel.type == KernelType::exponential)
    shifted = kernel.shifted(kernel.param * X.rowwise().squaredNorm().maxCoeff());
  PsdOracle oracle;
  oracle.size = X.rows();
  oracle.diagonal = [&X, shifted](double* out) {
    for (Index i = 0; i < X.rows(); ++i) {
      Eigen::Map<Matrix<double>> entry(out + i, 1, 1);
      shifted.evaluate<double>(X.row(i), X.row(i), entry);
    }
  };
  oracle.column = [&X, shifted](Index j, double* out) {
    Eigen::Map<Matrix<double>> column(out, X.rows(), 1);
    shifted.evaluate<double>(X, X.row(j), column);
  };
  return oracle;
}

/// The row of X with the largest Euclidean norm (ties: the first): ACA's start, the query whose kernel row
/// holds the largest entries of the exponential kernel.
Index largest_row(const Matrix<double>& X) {
  Index row = 0;
  X.rowwise().squaredNorm().maxCoeff(&row);
  return row;
}

/// The rows of X listed in `indices`.
Matrix<double> rows_of(const Matrix<double>& X, const std::vector<Index>& indices) {
  Matrix<double> out(static_cast<Index>(indices.size()), X.cols());
  for (std::size_t r = 0; r < indices.size(); ++r) out.row(static_cast<Index>(r)) = X.row(indices[r]);
  return out;
}

/// The first `count` entries of `indices`.
std::vector<Index> first(const std::vector<Index>& indices, Index count) {
  return {indices.begin(), indices.begin() + count};
}

/// Landmarks that are rows: Q̄ = Q_I, K̄ = K_J.
SearchedLandmarks token_rows(const Matrix<double>& Q, const Matrix<double>& K, std::vector<Index> rows,
                             std::vector<Index> cols, double entries) {
  SearchedLandmarks out;
  out.q = rows_of(Q, rows);
  out.k = rows_of(K, cols);
  out.q_indices = std::move(rows);
  out.k_indices = std::move(cols);
  out.entries = entries;
  return out;
}

/// cross (and softmax-cross, whose pivots are taken on the rows of G normalized by `row_scale`): ACA+ on G
/// started at the largest query, m crosses; oversampled, the p query rows are the rectangular maxvol rows of
/// G(:, J) (N·m more entries) from the crosses' rows.
SearchedLandmarks cross_landmarks(const Matrix<double>& Q, const Matrix<double>& K, const LandmarkOptions& o,
                                  const EntryOracle& oracle, std::vector<double> row_scale, double entries) {
  CrossOptions options;
  options.start_row = largest_row(Q);
  options.seed = o.seed;
  options.row_scale = std::move(row_scale);
  const CrossResult cross = cross_approximation(oracle, o.count, options);
  entries += double(cross.entries);
  std::vector<Index> rows = cross.rows;
  if (o.query_count() > o.count) {
    Matrix<double> columns(oracle.rows, o.count);
    for (Index l = 0; l < o.count; ++l) oracle.column(cross.cols[std::size_t(l)], columns.col(l).data());
    entries += double(columns.size());
    rows = rect_maxvol(columns, o.query_count(), {}, cross.rows).rows;
  }
  return token_rows(Q, K, std::move(rows), cross.cols, entries);
}

/// maxvol: alternating maxvol sweeps from the cross's columns (rows rectangular when oversampled).
SearchedLandmarks maxvol_landmarks(const Matrix<double>& Q, const Matrix<double>& K, const LandmarkOptions& o,
                                   const EntryOracle& oracle) {
  CrossOptions options;
  options.start_row = largest_row(Q);
  options.seed = o.seed;
  const CrossResult cross = cross_approximation(oracle, o.count, options);
  const AlternatingMaxvolResult sweeps = alternating_maxvol(oracle, cross.cols, o.query_count(), {});
  return token_rows(Q, K, sweeps.rows, sweeps.cols, double(cross.entries + sweeps.entries));
}

/// rpcholesky: p pivots of H = κ(X, X), X = [Q; K]; Q̄ the p pivot tokens, K̄ the first m of them.
SearchedLandmarks rpcholesky_landmarks(const Matrix<double>& Q, const Matrix<double>& K,
                                       const LandmarkOptions& o, const Kernel& kernel) {
  Matrix<double> joint(Q.rows() + K.rows(), Q.cols());
  joint << Q, K;
  RpcholeskyOptions options;
  options.seed = o.seed;
  const RpcholeskyResult result = rpcholesky(joint_oracle(joint, kernel), o.query_count(), options);
  SearchedLandmarks out;
  out.q = rows_of(joint, result.pivots);
  out.k = out.q.topRows(o.count);
  out.joint_indices = result.pivots;
  out.entries = double(result.entries);
  return out;
}

/// The tokens [q_i | k_i] (N×2d) and the FPS centres on them: p = query_count(), started at the token
/// farthest from the tokens' mean.
std::vector<Index> token_centres(const Matrix<double>& Q, const Matrix<double>& K, const LandmarkOptions& o,
                                 Matrix<double>& tokens) {
  tokens.resize(Q.rows(), Q.cols() + K.cols());
  tokens << Q, K;
  const Matrix<double> centred = tokens.rowwise() - tokens.colwise().mean();
  return farthest_point_sampling(tokens, o.query_count(), largest_row(centred));
}

/// Means of the rows of X over the Voronoi cells of the first `count` centres among `tokens` (each token in
/// the cell of its nearest centre, ties to the earlier centre: the cells one farthest-point pass tracks); an
/// empty cell (a centre that duplicates an earlier one) takes its centre's own row. O(N·count·d).
Matrix<double> cell_means(const Matrix<double>& X, const Matrix<double>& tokens,
                          const std::vector<Index>& centres, Index count) {
  Matrix<double> sums = Matrix<double>::Zero(count, X.cols());
  Vector<double> sizes = Vector<double>::Zero(count);
  for (Index i = 0; i < tokens.rows(); ++i) {
    Index nearest = 0;
    double best = std::numeric_limits<double>::infinity();
    for (Index c = 0; c < count; ++c) {
      const double distance = (tokens.row(i) - tokens.row(centres[std::size_t(c)])).squaredNorm();
      if (distance < best) {
        best = distance;
        nearest = c;
      }
    }
    sums.row(nearest) += X.row(i);
    sizes(nearest) += 1;
  }
  for (Index c = 0; c < count; ++c)
    sums.row(c) = sizes(c) > 0 ? Matrix<double>(sums.row(c) / sizes(c))
                               : Matrix<double>(X.row(centres[std::size_t(c)]));
  return sums;
}

/// oracle-qdeim: Q-DEIM on the exact top singular vectors of G (a full SVD of the dense G, N² entries).
SearchedLandmarks qdeim_landmarks(const Matrix<double>& Q, const Matrix<double>& K, const LandmarkOptions& o,
                                  const Kernel& kernel) {
  const DenseSvd svd = dense_svd<double>(kernel.block<double>(Q, K), SvdVectors::thin);
  return token_rows(Q, K, qdeim(svd.u.leftCols(o.query_count())), qdeim(svd.v.leftCols(o.count)),
                    double(Q.rows()) * double(K.rows()));
}

}  // namespace

SearchedLandmarks searched_landmarks(const Matrix<double>& Q, const Matrix<double>& K,
                                     const LandmarkOptions& options, const Kernel& kernel) {
  const Index m = options.count;
  switch (options.strategy) {
    case LandmarkStrategy::cross:
      return cross_landmarks(Q, K, options, kernel_oracle(Q, K, selection_kernel(kernel, Q, K)), {}, 0);
    case LandmarkStrategy::softmax_cross: {
      // Pivots on S = D⁻¹G: the rows weighted by 1/(G1), estimated from m uniformly drawn columns.
      const EntryOracle oracle = kernel_oracle(Q, K, selection_kernel(kernel, Q, K));
      const RowSumEstimate sums = estimated_row_sums(oracle, m, options.seed);
      std::vector<double> weights(std::size_t(Q.rows()));
      for (Index i = 0; i < Q.rows(); ++i) weights[std::size_t(i)] = sums.sums(i) > 0 ? 1 / sums.sums(i) : 1;
      return cross_landmarks(Q, K, options, oracle, std::move(weights), double(sums.entries));
    }
    case LandmarkStrategy::maxvol:
      return maxvol_landmarks(Q, K, options, kernel_oracle(Q, K, selection_kernel(kernel, Q, K)));
    case LandmarkStrategy::rpcholesky:
      return rpcholesky_landmarks(Q, K, options, kernel);
    case LandmarkStrategy::farthest_point: {
      Matrix<double> tokens;
      const std::vector<Index> centres = token_centres(Q, K, options, tokens);
      return token_rows(Q, K, centres, first(centres, m), 0);
    }
    case LandmarkStrategy::farthest_point_means: {
      Matrix<double> tokens;
      const std::vector<Index> centres = token_centres(Q, K, options, tokens);
      SearchedLandmarks out;
      out.q = cell_means(Q, tokens, centres, options.query_count());
      out.k = cell_means(K, tokens, centres, m);
      return out;
    }
    case LandmarkStrategy::oracle_qdeim:
      return qdeim_landmarks(Q, K, options, selection_kernel(kernel, Q, K));
    default:
      throw std::invalid_argument(
          describe("searched_landmarks: ", to_string(options.strategy), " is not a searched strategy"));
  }
}

}  // namespace nystrom::detail
