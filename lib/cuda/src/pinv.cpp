#include "pinv.hpp"

#include <limits>

#include "nystrom/cuda/attention.hpp"
#include "nystrom/error.hpp"

namespace nystrom::cuda {

namespace detail {

namespace {

/// Z = M⁺ by SVD in double (cuSOLVER gesvd), singular values ≤ cut·σ₁ dropped; rank into info[2].
template <class T>
void exact_on_device(const DeviceMatrix<T>& M, double cut, DevicePinv<T>& out) {
  const int m = M.rows;
  const cudaStream_t stream = context().stream;
  DeviceBuffer<double> a(static_cast<std::size_t>(m) * m), u(a.size()), vt(a.size()), scaled(a.size()),
      z(a.size()), sigma(m), inverse(m);
  DeviceBuffer<int> solver_info(1);
  if constexpr (std::is_same_v<T, double>)
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(a.data(), M.data(), a.size() * sizeof(double), cudaMemcpyDeviceToDevice, stream));
  else
    convert<T, double>(M.data(), a.data(), static_cast<Offset>(a.size()), stream);
  int work_size = 0;
  NYSTROM_CUDA_CHECK(cusolverDnDgesvd_bufferSize(context().solver, m, m, &work_size));
  DeviceBuffer<double> work(static_cast<std::size_t>(work_size > 0 ? work_size : 1));
  signed char job = 'A';
  NYSTROM_CUDA_CHECK(cusolverDnDgesvd(context().solver, job, job, m, m, a.data(), m, sigma.data(), u.data(),
                                      m, vt.data(), m, work.data(), work_size, nullptr, solver_info.data()));
  invert_singular_values(sigma.data(), m, cut, inverse.data(), out.info.data() + 2, stream);
  // Z = V Σ⁺ Uᵀ = (VT)ᵀ (U Σ⁺)ᵀ.
  NYSTROM_CUDA_CHECK(
      cublasDdgmm(context().blas, CUBLAS_SIDE_RIGHT, m, m, u.data(), m, inverse.data(), 1, scaled.data(), m));
  gemm(CUBLAS_OP_T, CUBLAS_OP_T, m, m, m, 1.0, vt.data(), m, scaled.data(), m, 0.0, z.data(), m);
  if constexpr (std::is_same_v<T, double>)
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(out.z.data(), z.data(), z.size() * sizeof(double), cudaMemcpyDeviceToDevice, stream));
  else
    convert<double, T>(z.data(), out.z.data(), static_cast<Offset>(z.size()), stream);
  identity_residual<T>(M.data(), out.z.data(), m, out.residuals.data(), stream);
  // info = {pinv_converged, 0 iterations, rank}: the first two are the zeros the caller filled in.
}

}  // namespace

template <class T>
DevicePinv<T> device_pseudoinverse(const DeviceMatrix<T>& A, const PinvOptions& options) {
  const int m = A.rows;
  const cudaStream_t stream = context().stream;
  // The matrix actually inverted: A, A + εI (shift), or AᵀA + εI (Tikhonov; then Z = M⁺Aᵀ), as on the CPU.
  DeviceMatrix<T> M(m, m);
  if (options.tikhonov > 0) {
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, T(1), A.data(), m, A.data(), m, T(0), M.data(), m);
    add_to_diagonal<T>(M.data(), m, m, T(options.tikhonov), stream);
  } else {
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(M.data(), A.data(), sizeof(T) * m * m, cudaMemcpyDeviceToDevice, stream));
    if (options.shift > 0) add_to_diagonal<T>(M.data(), m, m, T(options.shift), stream);
  }
  DevicePinv<T> out;
  out.z = DeviceMatrix<T>(m, m);
  out.info = DeviceBuffer<int>(3);
  out.alpha = DeviceBuffer<double>(1);
  out.exact = options.method == PinvMethod::exact;
  fill<int>(out.info.data(), 3, 0, stream);
  fill<double>(out.alpha.data(), 1, 0.0, stream);
  if (out.exact) {
    out.residuals = DeviceBuffer<double>(1);
    const double cut = options.tolerance > 0 ? options.tolerance : m * std::numeric_limits<T>::epsilon();
    exact_on_device(M, cut, out);
  } else {
    out.residuals = DeviceBuffer<double>(static_cast<std::size_t>(options.iterations) + 1);
    DeviceBuffer<T> workspace(4 * static_cast<std::size_t>(m) * m);
    pinv_iterate<T>(M.data(), m, options.method == PinvMethod::razavi, options.iterations, options.alpha,
                    options.tolerance, out.z.data(), workspace.data(), out.residuals.data(), out.info.data(),
                    out.alpha.data(), stream);
  }
  if (options.tikhonov > 0) {
    DeviceMatrix<T> product(m, m);
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, m, m, m, T(1), out.z.data(), m, A.data(), m, T(0), product.data(), m);
    out.z = std::move(product);
  }
  return out;
}

template <class T>
PinvResult<T> DevicePinv<T>::result() const {
  PinvResult<T> result;
  int codes[3] = {};
  download(info.data(), codes, 3);
  double used_alpha = 0;
  download(alpha.data(), &used_alpha, 1);
  const PinvStatus statuses[] = {PinvStatus::converged, PinvStatus::completed, PinvStatus::diverged,
                                 PinvStatus::non_finite};
  result.status = statuses[codes[0]];
  result.iterations = codes[1];
  result.rank = exact ? codes[2] : 0;
  result.alpha = exact ? 0.0 : used_alpha;
  result.residuals.resize(exact ? 1 : static_cast<std::size_t>(codes[1]) + 1);
  download(residuals.data(), result.residuals.data(), result.residuals.size());
  result.z = download(z.data(), z.ld(), z.rows, z.cols);
  return result;
}

template struct DevicePinv<float>;
template struct DevicePinv<double>;
template DevicePinv<float> device_pseudoinverse<float>(const DeviceMatrix<float>&, const PinvOptions&);
template DevicePinv<double> device_pseudoinverse<double>(const DeviceMatrix<double>&, const PinvOptions&);

}  // namespace detail

template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  require(A.rows() == A.cols(),
          describe("cuda::pseudoinverse: the core must be square, got ", A.rows(), "x", A.cols()));
  require(A.rows() >= 1, describe("cuda::pseudoinverse: the core is empty (", A.rows(), "x", A.cols(), ")"));
  require_finite(A, "cuda::pseudoinverse: the core");
  return detail::device_pseudoinverse<T>(detail::upload<T>(A), options).result();
}

template PinvResult<float> pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template PinvResult<double> pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&);

}  // namespace nystrom::cuda
