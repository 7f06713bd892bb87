#include "nystrom/performer.hpp"

#include <cmath>
#include <random>

#include "attention_inputs.hpp"
#include "nystrom/threads.hpp"

namespace nystrom {

Index PerformerOptions::feature_count(Index d) const {
  if (projection.size()) return projection.rows();
  if (features > 0) return features;
  return std::max<Index>(1, static_cast<Index>(static_cast<double>(d) * std::log(static_cast<double>(d))));
}

void PerformerOptions::validate(Index d) const {
  require(features >= 0, describe("performer: features = ", features, " must be >= 0 (0: d ln d)"));
  require(std::isfinite(feature_epsilon) && feature_epsilon >= 0,
          describe("performer: feature_epsilon = ", feature_epsilon, " must be finite and >= 0"));
  if (projection.size()) {
    require(projection.cols() == d,
            describe("performer: projection has ", projection.cols(), " columns, expected d = ", d));
    require(
        features == 0 || features == projection.rows(),
        describe("performer: features = ", features, " but the projection has ", projection.rows(), " rows"));
    require_finite(projection, "performer: projection");
  }
}

Matrix<double> performer_projection(Index features, Index d, std::uint64_t seed, bool orthogonal) {
  require(features >= 1, describe("performer_projection: features = ", features, " must be >= 1"));
  require(d >= 1, describe("performer_projection: d = ", d, " must be >= 1"));
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> normal;
  const auto gaussian = [&](Index rows, Index cols) {
    Matrix<double> g(rows, cols);
    for (Index j = 0; j < cols; ++j)
      for (Index i = 0; i < rows; ++i) g(i, j) = normal(engine);
    return g;
  };
  if (!orthogonal) return gaussian(features, d);

  Matrix<double> omega(features, d);
  for (Index start = 0; start < features; start += d) {
    const Eigen::HouseholderQR<Matrix<double>> qr(gaussian(d, d));
    const Matrix<double> block = Matrix<double>(qr.householderQ()).transpose();  // orthonormal rows
    const Index rows = std::min(d, features - start);
    omega.middleRows(start, rows) = block.topRows(rows);
  }
  const Vector<double> norms =
      gaussian(features, d).rowwise().norm();  // χ_d row norms, as Gaussian rows have
  return norms.asDiagonal() * omega;
}

namespace {

/// φ(x) for the rows of X scaled by s^{1/2}: exp(ωᵀx − ‖x‖²/2 − shift) + ε, times 1/√r; the shift is the
/// per-row max of ωᵀx (queries) or its global max (keys).
template <class T>
Matrix<T> random_features(const ConstMatrixRef<T>& X, const Matrix<T>& omega, double scale,
                          bool per_row_shift, double epsilon) {
  const T root_scale = T(std::sqrt(scale));
  Matrix<T> projected(X.rows(), omega.rows());
  projected.noalias() = (root_scale * X) * omega.transpose();  // ωᵀx
  const Vector<T> half_norms = (T(0.5) * T(scale)) * X.rowwise().squaredNorm();
  projected.colwise() -= half_norms;
  if (per_row_shift) {
    // The package subtracts the max of ωᵀx before removing ‖x‖²/2; do the same so ε enters identically.
    const Vector<T> row_max = (projected.colwise() + half_norms).rowwise().maxCoeff();
    projected.colwise() -= row_max;
  } else {
    const T global_max = (projected.colwise() + half_norms).maxCoeff();
    projected.array() -= global_max;
  }
  const T ratio = T(1 / std::sqrt(static_cast<double>(omega.rows())));
  return ratio * (projected.array().exp() + T(epsilon)).matrix();
}

}  // namespace

template <class T>
PerformerResult<T> performer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, double scale,
                                       const PerformerOptions& options) {
  detail::require_attention_inputs<T>(Q, K, V, scale, "performer");
  options.validate(Q.cols());
  PerformerResult<T> result;
  result.projection =
      options.projection.size()
          ? options.projection
          : performer_projection(options.feature_count(Q.cols()), Q.cols(), options.seed, options.orthogonal);
  const Matrix<T> omega = result.projection.template cast<T>();
  const auto query_features = [&] {
    result.q_features = random_features<T>(Q, omega, scale, true, options.feature_epsilon);
  };
  const auto key_features = [&] {
    result.k_features = random_features<T>(K, omega, scale, false, options.feature_epsilon);
  };
  // Φ_Q and Φ_K, most of the work, side by side on two threads above detail::parallel_work multiply-adds
  // each.
  if (double(Q.rows()) * double(Q.cols()) * double(omega.rows()) >= detail::parallel_work) {
    run_concurrently(query_features, key_features);
  } else {
    query_features();
    key_features();
  }
  const Matrix<T> context = result.k_features.transpose() * V;              // Φ_Kᵀ V, r×dv
  const Vector<T> key_sum = result.k_features.colwise().sum().transpose();  // Φ_Kᵀ 1_N
  result.normalizer.noalias() = result.q_features * key_sum;
  result.output.noalias() = result.q_features * context;
  result.output = result.normalizer.cwiseInverse().asDiagonal() * result.output;
  return result;
}

template PerformerResult<float> performer_attention<float>(const ConstMatrixRef<float>&,
                                                           const ConstMatrixRef<float>&,
                                                           const ConstMatrixRef<float>&, double,
                                                           const PerformerOptions&);
template PerformerResult<double> performer_attention<double>(const ConstMatrixRef<double>&,
                                                             const ConstMatrixRef<double>&,
                                                             const ConstMatrixRef<double>&, double,
                                                             const PerformerOptions&);

}  // namespace nystrom
