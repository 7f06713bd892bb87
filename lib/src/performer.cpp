#include "nystrom/performer.hpp"

#include <cmath>
#include <random>
#include <tuple>
#include <utility>

#include "attention_inputs.hpp"
#include "blas_gemm.hpp"
#include "emulation.hpp"
#include "panels.hpp"

namespace nystrom {

Index PerformerOptions::feature_count(Index d) const {
  if (projection.size()) return projection.rows();
  if (features > 0) return features;
  return std::max<Index>(1, static_cast<Index>(static_cast<double>(d) * std::log(static_cast<double>(d))));
}

void PerformerOptions::validate(Index d) const {
  require(features >= 0, "performer: features = ", features, " must be >= 0 (0: d ln d)");
  require(std::isfinite(feature_epsilon) && feature_epsilon >= 0,
          "performer: feature_epsilon = ", feature_epsilon, " must be finite and >= 0");
  if (projection.size()) {
    require(projection.cols() == d, "performer: projection has ", projection.cols(),
            " columns, expected d = ", d);
    require(features == 0 || features == projection.rows(), "performer: features = ", features,
            " but the projection has ", projection.rows(), " rows");
    require_finite(projection, "performer: projection");
  }
}

Matrix<double> performer_projection(Index features, Index d, std::uint64_t seed, bool orthogonal) {
  require(features >= 1, "performer_projection: features = ", features, " must be >= 1");
  require(d >= 1, "performer_projection: d = ", d, " must be >= 1");
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

/// What the exponent pass of feature_exponents also reduces.
enum class Reduction {
  projection_row_max,  ///< max_f ω_fᵀx per row: performer-pytorch's shifts
  column_max,          ///< the max over all rows of each column of the exponents: the keys' balancing shifts
  none
};

/// The multiply-adds of the exponents of X (n×d) with r features, which decide the threads of the panel loops
/// over them (an exponential costs about as much as d of them).
double feature_work(Index n, Index d, Index r) {
  return double(n) * double(d) * double(r);
}

/// E = ωᵀx − ‖x‖²/2 for the rows x of s^{1/2}X (n×r), by row panels, with `reduction` of it in `reduced`.
template <class T>
Matrix<T> feature_exponents(const ConstMatrixRef<T>& X, const Matrix<T>& omega, double scale,
                            Reduction reduction, Vector<T>& reduced) {
  const Index n = X.rows(), r = omega.rows();
  const T root_scale = T(std::sqrt(scale)), half_scale = T(0.5 * scale);
  Matrix<T> exponents(n, r);
  Matrix<T> panel_column_max(reduction == Reduction::column_max ? r : 0, detail::panel_count(n));
  if (reduction == Reduction::projection_row_max) reduced.resize(n);
  detail::for_each_panel(n, feature_work(n, X.cols(), r), [&](const detail::Panel& panel) {
    const auto rows = X.middleRows(panel.first, panel.rows);
    auto block = exponents.middleRows(panel.first, panel.rows);
    const Matrix<T> scaled = root_scale * rows;
    detail::gemm<T>(detail::Op::plain, detail::Op::transposed, T(1), scaled, omega, T(0), block);  // ωᵀx
    if (reduction == Reduction::projection_row_max)
      reduced.segment(panel.first, panel.rows) = block.rowwise().maxCoeff();
    block.colwise() -= half_scale * rows.rowwise().squaredNorm();
    if (reduction == Reduction::column_max)
      panel_column_max.col(panel.index) = block.colwise().maxCoeff().transpose();
  });
  if (reduction == Reduction::column_max) reduced = panel_column_max.rowwise().maxCoeff();
  return exponents;
}

/// φ = (exp(E + 1·offsetᵀ − shift) + ε)/√r in place of the exponents E (n×r), by row panels: `offset` (r
/// values; none where empty) added to every row, then from each row its `shift` (n values; none where empty),
/// or its max where `row_max`.
template <class T>
void exponentiate_features(Matrix<T>& exponents, const Vector<T>& offset, const Vector<T>& shift,
                           bool row_max, double epsilon, double work) {
  const T ratio = T(1 / std::sqrt(static_cast<double>(exponents.cols())));
  detail::for_each_panel(exponents.rows(), work, [&](const detail::Panel& panel) {
    auto block = exponents.middleRows(panel.first, panel.rows);
    if (offset.size()) block.rowwise() += offset.transpose();
    if (row_max)
      block.colwise() -= Vector<T>(block.rowwise().maxCoeff());
    else if (shift.size())
      block.colwise() -= shift.segment(panel.first, panel.rows);
    block = (ratio * (block.array().exp() + T(epsilon))).matrix();
  });
}

/// Φ_Q and Φ_K. With ε = 0 (docs/mathematics.md §6) each key exponent column is shifted by its max over the
/// keys, m_f, and each query exponent column by +m_f, then each query row by its max: every product
/// φ(q_i)_f φ(k_j)_f keeps its value up to the row's factor, which cancels in Ô, while the largest feature of
/// each query row is 1 and every feature's sum over the keys is at least 1, so Φ_Q Φ_Kᵀ 1 ≥ 1/r and no
/// exponent range can make Ô divide by 0. With ε > 0, performer-pytorch's shifts: the max of ωᵀx per query
/// row and over all keys, subtracted after ‖x‖²/2, so that ε enters identically.
template <class T>
std::pair<Matrix<T>, Matrix<T>> feature_maps(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                             const Matrix<T>& omega, double scale, double epsilon) {
  const bool package_shifts = epsilon > 0;
  Vector<T> query_shift, key_max;
  Matrix<T> queries = feature_exponents<T>(
      Q, omega, scale, package_shifts ? Reduction::projection_row_max : Reduction::none, query_shift);
  Matrix<T> keys = feature_exponents<T>(
      K, omega, scale, package_shifts ? Reduction::projection_row_max : Reduction::column_max, key_max);
  const double query_work = feature_work(Q.rows(), Q.cols(), omega.rows()),
               key_work = feature_work(K.rows(), K.cols(), omega.rows());
  if (package_shifts) {
    exponentiate_features<T>(queries, Vector<T>(), query_shift, false, epsilon, query_work);
    exponentiate_features<T>(keys, Vector<T>(), Vector<T>::Constant(K.rows(), key_max.maxCoeff()), false,
                             epsilon, key_work);
  } else {
    exponentiate_features<T>(queries, key_max, Vector<T>(), true, 0, query_work);
    exponentiate_features<T>(keys, Vector<T>(-key_max), Vector<T>(), false, 0, key_work);
  }
  return {std::move(queries), std::move(keys)};
}

/// The rounded exponents of rounded tokens X (n×d) in emulated storage, each a rounding point: the scaled
/// tokens X̃ = R(s^{1/2}X), the projections P = R(X̃ Ω̃ᵀ), the half squared norms h = R(½·Σ_c x̃_c²) (ordered
/// fused multiply-adds), and E = R(P − h 1ᵀ). P is kept for performer-pytorch's shifts.
struct EmulatedExponents {
  Matrix<float> projections;
  Matrix<float> exponents;
};
EmulatedExponents emulated_exponents(detail::Emulation& emulation, const Matrix<float>& X,
                                     const Matrix<float>& omega, double scale) {
  Matrix<float> scaled = float(std::sqrt(scale)) * X;
  emulation.store(scaled);
  EmulatedExponents out;
  out.projections = detail::rounded_product(emulation, scaled, omega.transpose());
  Vector<float> half_norms = Vector<float>::Zero(X.rows());
  for (Index c = 0; c < X.cols(); ++c)
    for (Index i = 0; i < X.rows(); ++i) half_norms(i) = std::fma(scaled(i, c), scaled(i, c), half_norms(i));
  half_norms *= 0.5f;
  emulation.store(half_norms);
  out.exponents = out.projections;
  out.exponents.colwise() -= half_norms;
  emulation.store(out.exponents);
  return out;
}

/// The rounding point of features in emulated storage, in place of the exponents E (n×r): R(ρ·(exp(E +
/// 1·offsetᵀ − shift) + ε)), ρ = 1/√r, the offset (none where empty) added first, then each row's `shift`
/// (none where empty) or its max where `row_max` subtracted, as exponentiate_features does in T.
void emulated_features(detail::Emulation& emulation, Matrix<float>& exponents, const Vector<float>& offset,
                       const Vector<float>& shift, bool row_max, double epsilon) {
  const float ratio = float(1 / std::sqrt(static_cast<double>(exponents.cols())));
  if (offset.size()) exponents.rowwise() += offset.transpose();
  if (row_max)
    exponents.colwise() -= detail::row_max(exponents);
  else if (shift.size())
    exponents.colwise() -= shift;
  for (Index j = 0; j < exponents.cols(); ++j)
    for (Index i = 0; i < exponents.rows(); ++i)
      exponents(i, j) = ratio * (std::exp(exponents(i, j)) + float(epsilon));
  emulation.store(exponents);
}

/// Φ_Q and Φ_K in emulated storage from rounded Q, K and Ω (feature_maps's shifts: with ε = 0 each key
/// column's max m_f over the keys, +m_f and the row max for the queries; with ε > 0 the package's).
std::pair<Matrix<float>, Matrix<float>> emulated_feature_maps(detail::Emulation& emulation,
                                                              const Matrix<float>& Q, const Matrix<float>& K,
                                                              const Matrix<float>& omega, double scale,
                                                              double epsilon) {
  EmulatedExponents queries = emulated_exponents(emulation, Q, omega, scale);
  EmulatedExponents keys = emulated_exponents(emulation, K, omega, scale);
  if (epsilon > 0) {
    const float key_shift = detail::row_max(keys.projections.reshaped().transpose())(0);
    emulated_features(emulation, queries.exponents, Vector<float>(), detail::row_max(queries.projections),
                      false, epsilon);
    emulated_features(emulation, keys.exponents, Vector<float>(),
                      Vector<float>::Constant(K.rows(), key_shift), false, epsilon);
  } else {
    const Vector<float> key_max = detail::row_max(keys.exponents.transpose());
    emulated_features(emulation, queries.exponents, key_max, Vector<float>(), true, 0);
    emulated_features(emulation, keys.exponents, Vector<float>(-key_max), Vector<float>(), false, 0);
  }
  return {std::move(queries.exponents), std::move(keys.exponents)};
}

/// performer_attention in emulated storage (docs/mathematics.md §8): Q, K, V and Ω rounded, the features of
/// emulated_feature_maps, then R(Φ_Kᵀ Ṽ), R(Φ_Kᵀ 1), the normalizers R(Φ_Q R(Φ_Kᵀ 1)) and Ô = R(R(Φ_Q R(Φ_Kᵀ
/// Ṽ)) ⊘ normalizers).
void emulated_performer(const ConstMatrixRef<float>& Q, const ConstMatrixRef<float>& K,
                        const ConstMatrixRef<float>& V, double scale, const PerformerOptions& options,
                        PerformerResult<float>& result) {
  using detail::rounded_product;
  detail::Emulation emulation(options.storage);
  const Matrix<float> q = emulation.stored(Q), k = emulation.stored(K), v = emulation.stored(V);
  const Matrix<float> omega = emulation.stored_from_double(result.projection);
  std::tie(result.q_features, result.k_features) =
      emulated_feature_maps(emulation, q, k, omega, scale, options.feature_epsilon);
  const Matrix<float> key_features = result.k_features.transpose();
  const Matrix<float> context = rounded_product(emulation, key_features, v);
  result.normalizer =
      rounded_product(emulation, result.q_features, detail::rounded_row_sums(emulation, key_features));
  result.output = rounded_product(emulation, result.q_features, context);
  detail::rounded_row_division(emulation, result.output, result.normalizer);
  result.rounding = emulation.counts();
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
  if constexpr (std::is_same_v<T, float>) {
    if (is_emulated(options.storage)) {
      emulated_performer(Q, K, V, scale, options, result);
      return result;
    }
  }
  require_storage_for<T>(options.storage, "performer");
  const Matrix<T> omega = result.projection.template cast<T>();
  std::tie(result.q_features, result.k_features) =
      feature_maps<T>(Q, K, omega, scale, options.feature_epsilon);
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
