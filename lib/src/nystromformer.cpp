#include "nystrom/nystromformer.hpp"

#include <algorithm>
#include <utility>

#include "attention_inputs.hpp"
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
