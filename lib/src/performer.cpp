#include "nystrom/performer.hpp"

#include <cmath>
#include <random>

#include "attention_inputs.hpp"
#include "blas_gemm.hpp"
#include "panels.hpp"

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

/// φ(x) for the rows of X scaled by s^{1/2}: exp(ωᵀx − ‖x‖²/2 − shift) + ε, times 1/√r, the shift taken over
/// the row (queries) or over all rows (keys). With ε = 0 it is the max of the whole exponent ωᵀx − ‖x‖²/2, so
/// that the largest feature of each query row, and of all keys, is 1: where ‖x‖²/2 is large (logits of a few
/// hundred) the features cannot all underflow to 0, and the shifts still cancel in Ô exactly. With ε > 0 it
/// is the max of ωᵀx alone, subtracted after ‖x‖²/2, as performer-pytorch's softmax_kernel shifts, so that ε
/// enters identically. Panel by panel: the exponents and their row maxima, then the exponentials.
template <class T>
Matrix<T> random_features(const ConstMatrixRef<T>& X, const Matrix<T>& omega, double scale,
                          bool per_row_shift, double epsilon) {
  const Index n = X.rows(), r = omega.rows();
  const T root_scale = T(std::sqrt(scale)), half_scale = T(0.5 * scale);
  const T ratio = T(1 / std::sqrt(static_cast<double>(r)));
  const double work = double(n) * double(X.cols()) * double(r);
  const bool package_shift = epsilon > 0;
  Matrix<T> features(n, r);
  Vector<T> shift(n);
  detail::for_each_panel(n, work, [&](const detail::Panel& panel) {
    const auto rows = X.middleRows(panel.first, panel.rows);
    auto block = features.middleRows(panel.first, panel.rows);
    const Matrix<T> scaled = root_scale * rows;
    detail::gemm<T>(detail::Op::plain, detail::Op::transposed, T(1), scaled, omega, T(0), block);  // ωᵀx
    if (package_shift) shift.segment(panel.first, panel.rows) = block.rowwise().maxCoeff();
    block.colwise() -= half_scale * rows.rowwise().squaredNorm();
    if (!package_shift) shift.segment(panel.first, panel.rows) = block.rowwise().maxCoeff();
  });
  if (!per_row_shift) shift.setConstant(shift.maxCoeff());
  detail::for_each_panel(n, work, [&](const detail::Panel& panel) {
    auto block = features.middleRows(panel.first, panel.rows);
    block.colwise() -= shift.segment(panel.first, panel.rows);
    block = (ratio * (block.array().exp() + T(epsilon))).matrix();
  });
  return features;
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
  result.q_features = random_features<T>(Q, omega, scale, true, options.feature_epsilon);
  result.k_features = random_features<T>(K, omega, scale, false, options.feature_epsilon);
  // [Φ_Kᵀ V, Φ_Kᵀ 1] (r×(dv+1)) summed over the panels of keys in order, then each panel of queries: its
  // normalizers Φ_Q Φ_Kᵀ 1 and its rows of Ô = diag(1/normalizer) Φ_Q Φ_Kᵀ V.
  const Index n = Q.rows(), keys = K.rows(), r = omega.rows(), dv = V.cols();
  const Matrix<T> context = detail::sum_over_panels<T>(
      keys, r, dv + 1, double(keys) * double(r) * double(dv + 1),
      [&](const detail::Panel& panel, MatrixRef<T> term) {
        const auto features = result.k_features.middleRows(panel.first, panel.rows);
        detail::gemm<T>(detail::Op::transposed, detail::Op::plain, T(1), features,
                        V.middleRows(panel.first, panel.rows), T(0), term.leftCols(dv));
        term.col(dv) = features.colwise().sum().transpose();
      });
  result.normalizer.resize(n);
  result.output.resize(n, dv);
  detail::for_each_panel(n, double(n) * double(r) * double(dv + 1), [&](const detail::Panel& panel) {
    const auto features = result.q_features.middleRows(panel.first, panel.rows);
    auto normalizer = result.normalizer.segment(panel.first, panel.rows);
    auto rows = result.output.middleRows(panel.first, panel.rows);
    normalizer.noalias() = features * context.col(dv);
    detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), features, context.leftCols(dv), T(0), rows);
    rows.array().colwise() /= normalizer.array();
  });
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
