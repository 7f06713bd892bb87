#include "nystrom/nystromformer.hpp"

#include <algorithm>
#include <utility>

#include "attention_inputs.hpp"
#include "emulation.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/softmax.hpp"
#include "softmax_panels.hpp"

namespace nystrom {

void NystromformerOptions::validate(Index n) const {
  require(landmarks >= 1, "nystromformer: landmarks = ", landmarks, " must be >= 1");
  require(landmarks <= n, "nystromformer: landmarks = ", landmarks, " exceeds N = ", n);
  pinv.validate();
}

namespace {

/// Q, K (and V) as the package sees them: with `front_padding` and N % m ≠ 0, m − N % m zero rows prepended.
template <class T>
Matrix<T> padded(const ConstMatrixRef<T>& X, Index padding) {
  Matrix<T> out = Matrix<T>::Zero(X.rows() + padding, X.cols());
  out.bottomRows(X.rows()) = X;
  return out;
}

template <class T>
Index padding_rows(Index n, const NystromformerOptions& options) {
  const Index remainder = n % options.landmarks;
  return options.front_padding && remainder != 0 ? options.landmarks - remainder : 0;
}

/// Segment-means landmarks of the (possibly padded) tokens; with padding the segments are equal.
template <class T>
Matrix<T> landmarks_of(const ConstMatrixRef<T>& X, Index padding, Index m) {
  if (padding == 0) return segment_means<T>(X, m);
  return segment_means<T>(padded<T>(X, padding), m);
}

/// nystromformer_attention in emulated storage (docs/mathematics.md §8): the landmarks pooled from Q and K as
/// given, then Q, K (with the package's zero keys), V and the landmarks rounded; F̃, Ã and B̃ as rounded
/// softmax rows of rounded logits (B̃ over the zero keys too, which then drop out); Z = R(Ã⁺) in the same
/// storage; Ô = R(F̃ R(Z R(B̃ Ṽ))).
NystromformerResult<float> emulated_nystromformer(const ConstMatrixRef<float>& Q,
                                                  const ConstMatrixRef<float>& K,
                                                  const ConstMatrixRef<float>& V, double scale,
                                                  const NystromformerOptions& options) {
  using detail::rounded_exponents, detail::rounded_product, detail::rounded_softmax_rows;
  const Index n = Q.rows(), m = options.landmarks;
  const Index padding = padding_rows<float>(n, options);
  const Kernel kernel = Kernel::exponential(scale);
  detail::Emulation emulation(options.storage);
  const Matrix<float> q_landmarks = emulation.stored(landmarks_of<float>(Q, padding, m));
  const Matrix<float> k_landmarks = emulation.stored(landmarks_of<float>(K, padding, m));
  const Matrix<float> q = emulation.stored(Q), keys = emulation.stored(padded<float>(K, padding)),
                      v = emulation.stored(V);
  NystromformerResult<float> result;
  result.left = rounded_exponents(emulation, kernel, q, k_landmarks);  // F̃
  rounded_softmax_rows(emulation, result.left);
  result.core = rounded_exponents(emulation, kernel, q_landmarks, k_landmarks);  // Ã
  rounded_softmax_rows(emulation, result.core);
  Matrix<float> upper =
      rounded_exponents(emulation, kernel, q_landmarks, keys);  // B̃ with the zero keys first
  rounded_softmax_rows(emulation, upper);
  result.upper = upper.rightCols(n);
  PinvOptions pinv = options.pinv;
  pinv.storage = options.storage;
  result.pinv = core_pseudoinverse<float>(result.core, pinv);
  const Matrix<float> weights =
      rounded_product(emulation, result.pinv.z, rounded_product(emulation, result.upper, v));
  result.output = rounded_product(emulation, result.left, weights);
  result.rounding = emulation.counts();
  return result;
}

}  // namespace

template <class T>
Matrix<T> nystromformer_core(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, double scale,
                             const NystromformerOptions& options) {
  options.validate(Q.rows());
  const Index padding = padding_rows<T>(Q.rows(), options);
  const Matrix<T> q_landmarks = landmarks_of<T>(Q, padding, options.landmarks);
  const Matrix<T> k_landmarks = landmarks_of<T>(K, padding, options.landmarks);
  return softmax_logits<T>(q_landmarks, k_landmarks, scale);
}

template <class T>
double nystromformer_batch_alpha(const std::vector<Matrix<T>>& cores) {
  require(!cores.empty(), "nystromformer_batch_alpha: no cores given");
  return batch_alpha<T>(cores);
}

template <class T>
NystromformerResult<T> nystromformer_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                               const ConstMatrixRef<T>& V, double scale,
                                               const NystromformerOptions& options) {
  detail::require_attention_inputs<T>(Q, K, V, scale, "nystromformer");
  options.validate(Q.rows());
  if constexpr (std::is_same_v<T, float>)
    if (is_emulated(options.storage)) return emulated_nystromformer(Q, K, V, scale, options);
  require_storage_for<T>(options.storage, "nystromformer");
  const Index n = Q.rows(), m = options.landmarks;
  const Index padding = padding_rows<T>(n, options);
  const Matrix<T> q_landmarks = landmarks_of<T>(Q, padding, m);
  const Matrix<T> k_landmarks = landmarks_of<T>(K, padding, m);

  NystromformerResult<T> result;
  result.left = detail::tall_softmax<T>(Q, k_landmarks, scale);  // F̃; padded query rows are dropped anyway
  result.core = softmax_logits<T>(q_landmarks, k_landmarks, scale);  // Ã
  // B̃ and B̃V; the package's zero keys enter the softmax denominators, and their zero values add nothing to
  // B̃V.
  detail::WideSoftmax<T> upper = detail::wide_softmax<T>(q_landmarks, K, V, scale, padding);
  result.upper = std::move(upper.matrix);
  result.pinv = core_pseudoinverse<T>(result.core, options.pinv);
  result.output = detail::tall_product<T>(result.left, result.pinv.z * upper.times_values);
  return result;
}

#define NYSTROM_INSTANTIATE(T)                                                                         \
  template Matrix<T> nystromformer_core<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, double, \
                                           const NystromformerOptions&);                               \
  template double nystromformer_batch_alpha<T>(const std::vector<Matrix<T>>&);                         \
  template NystromformerResult<T> nystromformer_attention<T>(                                          \
      const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, double,            \
      const NystromformerOptions&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
