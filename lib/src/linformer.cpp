#include "nystrom/linformer.hpp"

#include <cmath>
#include <random>

#include "attention_inputs.hpp"
#include "blas_gemm.hpp"
#include "emulation.hpp"
#include "panels.hpp"
#include "softmax_panels.hpp"

namespace nystrom {

void LinformerOptions::validate(Index n) const {
  require(projected >= 1, "linformer: projected length k = ", projected, " must be >= 1");
  for (const auto* given : {&e, &f}) {
    if (!given->size()) continue;
    const char* name = given == &e ? "E" : "F";
    require(given->rows() == projected && given->cols() == n, "linformer: ", name, " is ", given->rows(), "x",
            given->cols(), ", expected k x N = ", projected, "x", n);
    require_finite(*given, describe("linformer: ", name));
  }
  require(!(share_projections && f.size()), "linformer: share_projections = true but F was given explicitly");
}

LinformerProjections linformer_projections(Index k, Index n, std::uint64_t seed, bool share) {
  require(k >= 1 && n >= 1, "linformer_projections: k = ", k, " and N = ", n, " must be >= 1");
  std::mt19937_64 engine(seed);
  const double bound = 1 / std::sqrt(static_cast<double>(k));
  std::uniform_real_distribution<double> uniform(-bound, bound);
  const auto draw = [&] {
    Matrix<double> p(k, n);
    for (Index j = 0; j < n; ++j)
      for (Index i = 0; i < k; ++i) p(i, j) = uniform(engine);
    return p;
  };
  LinformerProjections out;
  out.e = draw();
  out.f = share ? out.e : draw();
  return out;
}

namespace {

/// linformer_attention in emulated storage (docs/mathematics.md §8): Q, K, V, E and F rounded, EK = R(Ẽ K̃)
/// and FV = R(F̃ Ṽ), P the rounded softmax rows of R(s·Q̃ (EK)ᵀ), Ô = R(P FV).
LinformerResult<float> emulated_linformer(const ConstMatrixRef<float>& Q, const ConstMatrixRef<float>& K,
                                          const ConstMatrixRef<float>& V, double scale,
                                          const Matrix<double>& e, const Matrix<double>& f,
                                          const LinformerOptions& options) {
  using detail::rounded_product;
  detail::Emulation emulation(options.storage);
  const Matrix<float> q = emulation.stored(Q), k = emulation.stored(K), v = emulation.stored(V);
  LinformerResult<float> result;
  const Matrix<float> e_rounded = emulation.stored_from_double(e);
  result.value_proj = options.share_projections ? e_rounded : emulation.stored_from_double(f);
  const Matrix<float> projected_keys = rounded_product(emulation, e_rounded, k);
  const Matrix<float> projected_values = rounded_product(emulation, result.value_proj, v);
  result.attention = detail::rounded_exponents(emulation, Kernel::exponential(scale), q, projected_keys);
  detail::rounded_softmax_rows(emulation, result.attention);
  result.output = rounded_product(emulation, result.attention, projected_values);
  result.rounding = emulation.counts();
  return result;
}

}  // namespace

template <class T>
LinformerResult<T> linformer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, double scale,
                                       const LinformerOptions& options) {
  detail::require_attention_inputs<T>(Q, K, V, scale, "linformer");
  const Index n = Q.rows();
  options.validate(n);
  LinformerProjections drawn;
  if (!options.e.size() || (!options.f.size() && !options.share_projections))
    drawn = linformer_projections(options.projected, n, options.seed, options.share_projections);
  const Matrix<double>& e = options.e.size() ? options.e : drawn.e;
  const Matrix<double>& f = options.share_projections ? e : (options.f.size() ? options.f : drawn.f);
  if constexpr (std::is_same_v<T, float>)
    if (is_emulated(options.storage)) return emulated_linformer(Q, K, V, scale, e, f, options);
  require_storage_for<T>(options.storage, "linformer");
  LinformerResult<T> result;
  // [EK, FV] (k×(d+dv)) summed over the panels of tokens in order; E's and F's columns are cast to T one
  // panel at a time (F's into the result).
  const Index projected = e.rows(), d = K.cols(), dv = V.cols();
  result.value_proj.resize(projected, n);
  const Matrix<T> projections = detail::sum_over_panels<T>(
      n, projected, d + dv, double(projected) * double(n) * double(d + dv),
      [&](const detail::Panel& panel, MatrixRef<T> term) {
        auto f_panel = result.value_proj.middleCols(panel.first, panel.rows);
        f_panel = f.middleCols(panel.first, panel.rows).template cast<T>();
        const Matrix<T> e_panel = options.share_projections
                                      ? Matrix<T>(f_panel)
                                      : Matrix<T>(e.middleCols(panel.first, panel.rows).template cast<T>());
        detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), e_panel,
                        K.middleRows(panel.first, panel.rows), T(0), term.leftCols(d));
        detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), f_panel,
                        V.middleRows(panel.first, panel.rows), T(0), term.rightCols(dv));
      });
  result.attention = detail::tall_softmax<T>(Q, projections.leftCols(d), scale);  // softmax(s·Q (EK)ᵀ)
  result.output = detail::tall_product<T>(result.attention, projections.rightCols(dv));  // Ô = P FV
  return result;
}

template LinformerResult<float> linformer_attention<float>(const ConstMatrixRef<float>&,
                                                           const ConstMatrixRef<float>&,
                                                           const ConstMatrixRef<float>&, double,
                                                           const LinformerOptions&);
template LinformerResult<double> linformer_attention<double>(const ConstMatrixRef<double>&,
                                                             const ConstMatrixRef<double>&,
                                                             const ConstMatrixRef<double>&, double,
                                                             const LinformerOptions&);

}  // namespace nystrom
