#include "nystrom/linformer.hpp"

#include <cmath>
#include <random>

#include "attention_inputs.hpp"
#include "nystrom/softmax.hpp"
#include "nystrom/threads.hpp"

namespace nystrom {

void LinformerOptions::validate(Index n) const {
  require(projected >= 1, describe("linformer: projected length k = ", projected, " must be >= 1"));
  for (const auto* given : {&e, &f}) {
    if (!given->size()) continue;
    const char* name = given == &e ? "E" : "F";
    require(given->rows() == projected && given->cols() == n,
            describe("linformer: ", name, " is ", given->rows(), "x", given->cols(),
                     ", expected k x N = ", projected, "x", n));
    require_finite(*given, describe("linformer: ", name));
  }
  require(!(share && f.size()), "linformer: share = true but F was given explicitly");
}

LinformerProjections linformer_projections(Index k, Index n, std::uint64_t seed, bool share) {
  require(k >= 1 && n >= 1, describe("linformer_projections: k = ", k, " and N = ", n, " must be >= 1"));
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

template <class T>
LinformerResult<T> linformer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, double scale,
                                       const LinformerOptions& options) {
  detail::require_attention_inputs<T>(Q, K, V, scale, "linformer");
  const Index n = Q.rows();
  options.validate(n);
  LinformerProjections drawn;
  if (!options.e.size() || (!options.f.size() && !options.share))
    drawn = linformer_projections(options.projected, n, options.seed, options.share);
  const Matrix<double>& e = options.e.size() ? options.e : drawn.e;
  const Matrix<double>& f = options.share ? e : (options.f.size() ? options.f : drawn.f);
  LinformerResult<T> result;
  Matrix<T> keys, values;
  const auto project_keys = [&] { keys = e.template cast<T>() * K; };  // EK, k×d
  const auto project_values = [&] {
    result.value_proj = f.template cast<T>();
    values = result.value_proj * V;  // FV, k×dv
  };
  // EK and FV side by side on two threads above detail::parallel_work multiply-adds each.
  if (double(options.projected) * double(n) * double(K.cols()) >= detail::parallel_work) {
    run_concurrently(project_keys, project_values);
  } else {
    project_keys();
    project_values();
  }
  result.attention = softmax_logits<T>(Q, keys, scale);
  result.output.noalias() = result.attention * values;
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
