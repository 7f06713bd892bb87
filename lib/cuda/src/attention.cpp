#include "nystrom/cuda/attention.hpp"

#include "device.hpp"
#include "nystrom/error.hpp"
#include "nystrom_pipeline.hpp"

namespace nystrom::cuda {

using namespace detail;

namespace {

template <class T>
void check_landmarks(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Landmarks<T>& landmarks,
                     const char* where) {
  require(Q.cols() == K.cols() && Q.rows() == K.rows(), where, ": Q is ", Q.rows(), "x", Q.cols(), ", K is ",
          K.rows(), "x", K.cols(), " (must be equal)");
  require(landmarks.q.rows() >= 1 && landmarks.q.rows() == landmarks.k.rows() &&
              landmarks.q.cols() == Q.cols() && landmarks.k.cols() == Q.cols(),
          where, ": landmarks are ", landmarks.q.rows(), "x", landmarks.q.cols(), " and ", landmarks.k.rows(),
          "x", landmarks.k.cols(), ", expected m x ", Q.cols());
}

/// One head's tokens and landmarks on the device and its factors (nystrom_pipeline.hpp with one head).
template <class T>
struct OneHead {
  DeviceMatrix<T> q, k, q_bar, k_bar;
  DeviceFactors<T> factors;

  /// The factors, or with `attention` those of Algorithm 1 (DeviceFactors::compute).
  OneHead(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Landmarks<T>& landmarks,
          const NystromOptions& options, AlgorithmBuffers<T>* attention = nullptr)
      : q(upload<T>(Q)),
        k(upload<T>(K)),
        q_bar(upload<T>(landmarks.q)),
        k_bar(upload<T>(landmarks.k)),
        factors(1, q.rows, q_bar.rows, options.pinv) {
    factors.compute(options, {q.data(), q.ld()}, {k.data(), k.ld()}, q.cols, q_bar.data(), k_bar.data(),
                    false, attention);
  }
};

}  // namespace

template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel) {
  require(Q.cols() == K.cols(), "cuda::exact_attention: token dimensions differ, Q has d = ", Q.cols(),
          " and K has d = ", K.cols());
  require(V.rows() == K.rows(), "cuda::exact_attention: V has ", V.rows(), " rows, K has N = ", K.rows());
  const DeviceMatrix<T> q = upload<T>(Q), k = upload<T>(K), v = upload<T>(V);
  const int n = q.rows, keys = k.rows, d = q.cols, dv = v.cols;
  const int panel = panel_rows(keys, n);
  const cudaStream_t stream = context().stream;
  DeviceMatrix<T> out(n, dv), logits(keys, panel);
  DeviceBuffer<T> sums(static_cast<std::size_t>(panel));
  for (int r = 0; r < n; r += panel) {
    const int b = std::min(panel, n - r);
    // Logits of queries r .. r+b as columns (keys × b), so each query's row-max and sum run down a column.
    exponent(kernel, k.data(), k.ld(), keys, q.data() + r, q.ld(), b, d, logits.data(), logits.ld());
    map_lines<T>(logits.data(), logits.ld(), keys, b, ExpMap{}, true, nullptr, {sums.data()}, stream);
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, b, dv, keys, T(1), logits.data(), logits.ld(), v.data(), v.ld(), T(0),
         out.data() + r, out.ld());
    divide_rows<T>(out.data() + r, out.ld(), b, dv, sums.data(), T(0), stream);
  }
  return download(out.data(), out.ld(), n, dv);
}

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options) {
  check_landmarks<T>(Q, K, landmarks, "cuda::generalized_nystrom");
  const OneHead<T> head(Q, K, landmarks, options);
  const DeviceFactors<T>& device = head.factors;
  const Index n = Q.rows(), m = landmarks.q.rows();
  NystromFactors<T> f;
  f.options = options;
  f.landmarks = landmarks;
  f.left = download(device.left_t.data(), m, m, n).transpose();
  f.upper = download(device.upper_t.data(), n, n, m).transpose();
  f.core = download(device.core.data(), m, m, m);
  f.left_log_scale.resize(n);
  f.upper_log_scale.resize(m);
  download(device.left_shift.data(), f.left_log_scale.data(), std::size_t(n));
  download(device.upper_shift.data(), f.upper_log_scale.data(), std::size_t(m));
  f.pinv = device.pinv.result(0);
  return f;
}

template <class T>
Matrix<T> nystrom_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                            const ConstMatrixRef<T>& V, const Landmarks<T>& landmarks,
                            const NystromOptions& options) {
  check_landmarks<T>(Q, K, landmarks, "cuda::nystrom_attention");
  require(V.rows() == Q.rows(), "cuda::nystrom_attention: V has ", V.rows(),
          " rows, expected N = ", Q.rows());
  const DeviceMatrix<T> v = upload<T>(V);
  const int n = v.rows, dv = v.cols;
  AlgorithmBuffers<T> work(1, int(landmarks.q.rows()), dv);
  OneHead<T> head(Q, K, landmarks, options, &work);
  DeviceMatrix<T> out(n, dv);
  nystrom_output<T>(head.factors, options, {v.data(), v.ld()}, dv, work, out.data(), false);
  return download(out.data(), out.ld(), n, dv);
}

#define NYSTROM_CUDA_INSTANTIATE(T)                                                                     \
  template Matrix<T> exact_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,             \
                                        const ConstMatrixRef<T>&, const Kernel&);                       \
  template NystromFactors<T> generalized_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, \
                                                    const Landmarks<T>&, const NystromOptions&);        \
  template Matrix<T> nystrom_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,           \
                                          const ConstMatrixRef<T>&, const Landmarks<T>&,                \
                                          const NystromOptions&);
NYSTROM_CUDA_INSTANTIATE(float)
NYSTROM_CUDA_INSTANTIATE(double)
#undef NYSTROM_CUDA_INSTANTIATE

}  // namespace nystrom::cuda
