#include "nystrom/cuda/attention.hpp"

#include "device.hpp"
#include "nystrom/error.hpp"
#include "pinv.hpp"

namespace nystrom::cuda {

using namespace detail;

namespace {

/// The generalized Nyström blocks on the device, stored so that every row-max runs down a contiguous column:
/// left_t = G_Lᵀ (m×N, column i is query i), upper_t = G_Uᵀ (N×m, column i is landmark i), core = G_A (m×m).
template <class T>
struct DeviceFactors {
  DeviceMatrix<T> left_t, upper_t, core;
  DeviceBuffer<T> left_shift, upper_shift;  ///< log diag(M_L), log diag(M_U) (row_max only)
  DevicePinv<T> pinv;
};

template <class T>
void check_landmarks(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Landmarks<T>& landmarks,
                     const char* where) {
  require(Q.cols() == K.cols() && Q.rows() == K.rows(),
          describe(where, ": Q is ", Q.rows(), "x", Q.cols(), ", K is ", K.rows(), "x", K.cols(),
                   " (must be equal)"));
  require(landmarks.q.rows() >= 1 && landmarks.q.rows() == landmarks.k.rows() &&
              landmarks.q.cols() == Q.cols() && landmarks.k.cols() == Q.cols(),
          describe(where, ": landmarks are ", landmarks.q.rows(), "x", landmarks.q.cols(), " and ",
                   landmarks.k.rows(), "x", landmarks.k.cols(), ", expected m x ", Q.cols()));
}

/// G_L, G_A, G_U of MATH.md §2 with the requested stabilization, and Z ≈ G_A⁺, all on the device.
template <class T>
DeviceFactors<T> device_factors(const DeviceMatrix<T>& q, const DeviceMatrix<T>& k,
                                const Landmarks<T>& landmarks, const NystromOptions& options) {
  const Kernel& kernel = options.kernel;
  const int n = q.rows, d = q.cols, m = static_cast<int>(landmarks.q.rows());
  const cudaStream_t stream = context().stream;
  const DeviceMatrix<T> q_bar = upload<T>(landmarks.q), k_bar = upload<T>(landmarks.k);
  DeviceFactors<T> f{DeviceMatrix<T>(m, n), DeviceMatrix<T>(n, m), DeviceMatrix<T>(m, m),
                     DeviceBuffer<T>(n),    DeviceBuffer<T>(m),    {}};
  // φ is symmetric in its arguments: φ(K̄, Q) = φ(Q, K̄)ᵀ and φ(K, Q̄) = φ(Q̄, K)ᵀ.
  exponent(kernel, k_bar.data(), k_bar.ld(), m, q.data(), q.ld(), n, d, f.left_t.data(), f.left_t.ld());
  exponent(kernel, k.data(), k.ld(), n, q_bar.data(), q_bar.ld(), m, d, f.upper_t.data(), f.upper_t.ld());
  exponent(kernel, q_bar.data(), q_bar.ld(), m, k_bar.data(), k_bar.ld(), m, d, f.core.data(), f.core.ld());
  const bool row_max = options.stabilization == Stabilization::row_max;
  const ExpMap map{options.stabilization == Stabilization::clamped, options.clamp_threshold};
  if (!row_max) {
    fill<T>(f.left_shift.data(), n, T(0), stream);
    fill<T>(f.upper_shift.data(), m, T(0), stream);
  }
  // PnP-Nystra eq. (8): G_Lⁿ = M_L⁻¹G_L, G_Uⁿ = M_U⁻¹G_U and G_Aⁿ = M_U⁻¹G_A, the shifts found by the fused
  // row-max / exp kernel on the columns of left_t and upper_t.
  map_lines<T>(f.left_t.data(), f.left_t.ld(), m, n, map, row_max, row_max ? f.left_shift.data() : nullptr,
               nullptr, stream);
  map_lines<T>(f.upper_t.data(), f.upper_t.ld(), n, m, map, row_max, row_max ? f.upper_shift.data() : nullptr,
               nullptr, stream);
  map_rows_shifted<T>(f.core.data(), f.core.ld(), m, m, map, row_max ? f.upper_shift.data() : nullptr,
                      stream);
  f.pinv = device_pseudoinverse<T>(f.core, options.pinv);
  return f;
}

}  // namespace

template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel) {
  require(Q.cols() == K.cols(), describe("cuda::exact_attention: token dimensions differ, Q has d = ",
                                         Q.cols(), " and K has d = ", K.cols()));
  require(V.rows() == K.rows(),
          describe("cuda::exact_attention: V has ", V.rows(), " rows, K has N = ", K.rows()));
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
    map_lines<T>(logits.data(), logits.ld(), keys, b, ExpMap{}, true, nullptr, sums.data(), stream);
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
  const DeviceMatrix<T> q = upload<T>(Q), k = upload<T>(K);
  const DeviceFactors<T> device = device_factors<T>(q, k, landmarks, options);
  NystromFactors<T> f;
  f.options = options;
  f.landmarks = landmarks;
  f.left =
      download(device.left_t.data(), device.left_t.ld(), device.left_t.rows, device.left_t.cols).transpose();
  f.upper = download(device.upper_t.data(), device.upper_t.ld(), device.upper_t.rows, device.upper_t.cols)
                .transpose();
  f.core = download(device.core.data(), device.core.ld(), device.core.rows, device.core.cols);
  f.left_log_scale.resize(Q.rows());
  f.upper_log_scale.resize(landmarks.q.rows());
  download(device.left_shift.data(), f.left_log_scale.data(), device.left_shift.size());
  download(device.upper_shift.data(), f.upper_log_scale.data(), device.upper_shift.size());
  f.pinv = device.pinv.result();
  return f;
}

template <class T>
Matrix<T> nystrom_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                            const ConstMatrixRef<T>& V, const Landmarks<T>& landmarks,
                            const NystromOptions& options) {
  check_landmarks<T>(Q, K, landmarks, "cuda::nystrom_attention");
  require(V.rows() == Q.rows(),
          describe("cuda::nystrom_attention: V has ", V.rows(), " rows, expected N = ", Q.rows()));
  const DeviceMatrix<T> q = upload<T>(Q), k = upload<T>(K);
  const int n = q.rows, m = static_cast<int>(landmarks.q.rows()), dv = static_cast<int>(V.cols());
  const cudaStream_t stream = context().stream;
  // [V, 1_N] (N×(dv+1)): the last column yields the denominators Ĝ1 alongside ĜV (PnP-Nystra Algorithm 1).
  DeviceMatrix<T> values(n, dv + 1);
  NYSTROM_CUDA_CHECK(cudaMemcpy2DAsync(values.data(), n * sizeof(T), V.data(), V.outerStride() * sizeof(T),
                                       n * sizeof(T), dv, cudaMemcpyHostToDevice, stream));
  fill<T>(values.data() + static_cast<Offset>(n) * dv, n, T(1), stream);
  const DeviceFactors<T> f = device_factors<T>(q, k, landmarks, options);
  DeviceMatrix<T> reduced(m, dv + 1), core_side(m, dv + 1), out(n, dv + 1);
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, m, dv + 1, n, T(1), f.upper_t.data(), f.upper_t.ld(), values.data(),
       values.ld(), T(0), reduced.data(), reduced.ld());  // G_U [V, 1]
  gemm(CUBLAS_OP_N, CUBLAS_OP_N, m, dv + 1, m, T(1), f.pinv.z.data(), f.pinv.z.ld(), reduced.data(),
       reduced.ld(), T(0), core_side.data(), core_side.ld());  // Z G_U [V, 1]
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, n, dv + 1, m, T(1), f.left_t.data(), f.left_t.ld(), core_side.data(),
       core_side.ld(), T(0), out.data(),
       out.ld());  // G_L Z G_U [V, 1]; the row scale M_L cancels in the ratio
  // The clamped variant divides by (Ĝ1 + 1e-12) as the authors' code does.
  const T offset = options.stabilization == Stabilization::clamped ? T(1e-12) : T(0);
  divide_rows<T>(out.data(), out.ld(), n, dv, out.data() + static_cast<Offset>(n) * dv, offset, stream);
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
