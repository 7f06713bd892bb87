#include "pinv.hpp"

#include <limits>

#include "nystrom/cuda/attention.hpp"
#include "nystrom/error.hpp"

namespace nystrom::cuda {

namespace detail {

namespace {

/// The largest m for cuSOLVER's batched Jacobi SVD (gesvdjBatched).
constexpr int batched_svd_limit = 32;

}  // namespace

/// The exact method's SVD M_b = U_bΣ_bV_bᵀ in double: one gesvdjBatched call for m ≤ 32, one gesvd per
/// matrix above (which returns V_bᵀ).
template <class T>
struct DevicePinv<T>::Solver {
  int m, count;
  DeviceBuffer<double> a, u, v, sigma, work;
  DeviceBuffer<int> info;
  gesvdjInfo_t jacobi = nullptr;
  int work_size = 0;

  Solver(int m_, int count_)
      : m(m_),
        count(count_),
        a(std::size_t(m_) * m_ * count_),
        u(a.size()),
        v(a.size()),
        sigma(std::size_t(m_) * count_),
        info(std::size_t(count_)) {
    if (batched()) {
      NYSTROM_CUDA_CHECK(cusolverDnCreateGesvdjInfo(&jacobi));
      NYSTROM_CUDA_CHECK(cusolverDnXgesvdjSetSortEig(jacobi, 1));
      NYSTROM_CUDA_CHECK(cusolverDnDgesvdjBatched_bufferSize(context().solver, CUSOLVER_EIG_MODE_VECTOR, m, m,
                                                             a.data(), m, sigma.data(), u.data(), m, v.data(),
                                                             m, &work_size, jacobi, count));
    } else {
      NYSTROM_CUDA_CHECK(cusolverDnDgesvd_bufferSize(context().solver, m, m, &work_size));
    }
    work = DeviceBuffer<double>(std::size_t(work_size > 0 ? work_size : 1));
  }
  ~Solver() {
    if (jacobi) cusolverDnDestroyGesvdjInfo(jacobi);
  }
  bool batched() const { return m <= batched_svd_limit; }

  /// The SVDs of the matrices at `matrices` (in T), queued on the context stream.
  void decompose(const T* matrices) {
    if constexpr (std::is_same_v<T, double>)
      NYSTROM_CUDA_CHECK(cudaMemcpyAsync(a.data(), matrices, a.size() * sizeof(double),
                                         cudaMemcpyDeviceToDevice, context().stream));
    else
      convert<T, double>(matrices, a.data(), static_cast<Offset>(a.size()), context().stream);
    if (batched()) {
      NYSTROM_CUDA_CHECK(cusolverDnDgesvdjBatched(context().solver, CUSOLVER_EIG_MODE_VECTOR, m, m, a.data(),
                                                  m, sigma.data(), u.data(), m, v.data(), m, work.data(),
                                                  work_size, info.data(), jacobi, count));
      return;
    }
    signed char job = 'A';
    const Offset square = Offset(m) * m;
    for (int b = 0; b < count; ++b)
      NYSTROM_CUDA_CHECK(cusolverDnDgesvd(context().solver, job, job, m, m, a.data() + b * square, m,
                                          sigma.data() + Offset(b) * m, u.data() + b * square, m,
                                          v.data() + b * square, m, work.data(), work_size, nullptr,
                                          info.data() + b));
  }
};

template <class T>
DevicePinv<T>::DevicePinv(int m, int count, const PinvOptions& options)
    : m_(m),
      count_(count),
      options_(options),
      entries_(options.method == PinvMethod::exact ? 1 : options.iterations + 1),
      inverted_(std::size_t(m) * m * count),
      z_(inverted_.size()),
      residuals_(std::size_t(entries_) * count),
      alphas_(std::size_t(count)),
      batch_alpha_(1),
      info_(std::size_t(3) * count) {
  require(
      options.method == PinvMethod::exact || is_iterative(options.method),
      "CUDA pseudoinverse: the device runs exact, razavi and newton-schulz; truncated and oracle-core run "
      "on the CPU only");
  if (options.tikhonov > 0) product_ = DeviceBuffer<T>(inverted_.size());
  if (options.method == PinvMethod::exact)
    solver_ = std::make_unique<Solver>(m, count);
  else
    workspace_ = DeviceBuffer<T>(4 * inverted_.size());
}

template <class T>
DevicePinv<T>::~DevicePinv() = default;
template <class T>
DevicePinv<T>::DevicePinv(DevicePinv&&) noexcept = default;
template <class T>
DevicePinv<T>& DevicePinv<T>::operator=(DevicePinv&&) noexcept = default;

template <class T>
void DevicePinv<T>::compute(const T* a, bool shared_alpha) {
  const int m = m_;
  const Offset square = Offset(m) * m;
  const cudaStream_t stream = context().stream;
  // The matrix actually inverted: A, A + εI (shift), or AᵀA + εI (Tikhonov; then Z = M⁺Aᵀ), as on the CPU.
  if (options_.tikhonov > 0) {
    gemm_batched(CUBLAS_OP_T, CUBLAS_OP_N, m, m, m, T(1), a, m, square, a, m, square, T(0), inverted_.data(),
                 m, square, count_);
    add_to_diagonal<T>(inverted_.data(), m, m, T(options_.tikhonov), count_, square, stream);
  } else {
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(inverted_.data(), a, sizeof(T) * inverted_.size(), cudaMemcpyDeviceToDevice, stream));
    if (options_.shift > 0)
      add_to_diagonal<T>(inverted_.data(), m, m, T(options_.shift), count_, square, stream);
  }
  if (options_.method == PinvMethod::exact) {
    fill<double>(alphas_.data(), count_, 0.0, stream);  // the iterations write theirs
    const double cut = options_.tolerance > 0 ? options_.tolerance : m * std::numeric_limits<T>::epsilon();
    solver_->decompose(inverted_.data());
    svd_pseudoinverse<T>(solver_->u.data(), solver_->v.data(), !solver_->batched(), solver_->sigma.data(), m,
                         count_, cut, inverted_.data(), z_.data(), residuals_.data(), entries_, info_.data(),
                         stream);
  } else {
    if (shared_alpha) batch_alpha<T>(inverted_.data(), m, count_, batch_alpha_.data(), stream);
    pinv_iterate<T>(inverted_.data(), m, count_, options_.method == PinvMethod::razavi, options_.iterations,
                    options_.alpha, shared_alpha ? batch_alpha_.data() : nullptr, options_.tolerance,
                    z_.data(), workspace_.data(), residuals_.data(), info_.data(), alphas_.data(), stream);
  }
  if (options_.tikhonov > 0)
    gemm_batched(CUBLAS_OP_N, CUBLAS_OP_T, m, m, m, T(1), z_.data(), m, square, a, m, square, T(0),
                 product_.data(), m, square, count_);
}

template <class T>
bool DevicePinv<T>::capturable(int m, const PinvOptions& options) {
  return options.method != PinvMethod::exact || m <= batched_svd_limit;
}

template <class T>
const T* DevicePinv<T>::z() const {
  return options_.tikhonov > 0 ? product_.data() : z_.data();
}

namespace {

PinvStatus status_of(int code) {
  const PinvStatus statuses[] = {PinvStatus::converged, PinvStatus::completed, PinvStatus::diverged,
                                 PinvStatus::non_finite};
  return statuses[code];
}

}  // namespace

template <class T>
PinvResult<T> DevicePinv<T>::result(int b) const {
  PinvResult<T> result;
  int codes[3] = {};
  download(info_.data() + 3 * b, codes, 3);
  double used_alpha = 0;
  download(alphas_.data() + b, &used_alpha, 1);
  const bool exact = options_.method == PinvMethod::exact;
  result.status = status_of(codes[0]);
  result.iterations = codes[1];
  result.rank = exact ? codes[2] : 0;
  result.alpha = exact ? 0.0 : used_alpha;
  result.residuals.resize(exact ? 1 : static_cast<std::size_t>(codes[1]) + 1);
  download(residuals_.data() + Offset(b) * entries_, result.residuals.data(), result.residuals.size());
  result.z = download(z() + Offset(b) * m_ * m_, m_, m_, m_);
  return result;
}

template <class T>
std::vector<std::pair<PinvStatus, double>> DevicePinv<T>::statuses() const {
  std::vector<int> codes(std::size_t(3) * count_);
  std::vector<double> residuals(residuals_.size());
  download(info_.data(), codes.data(), codes.size());
  download(residuals_.data(), residuals.data(), residuals.size());
  std::vector<std::pair<PinvStatus, double>> out;
  for (int b = 0; b < count_; ++b) {
    const int last = options_.method == PinvMethod::exact ? 0 : codes[std::size_t(3 * b + 1)];
    out.emplace_back(status_of(codes[std::size_t(3 * b)]), residuals[std::size_t(b * entries_ + last)]);
  }
  return out;
}

template <class T>
double DevicePinv<T>::shared_alpha() const {
  double alpha = 0;
  download(batch_alpha_.data(), &alpha, 1);
  return alpha;
}

template class DevicePinv<float>;
template class DevicePinv<double>;

}  // namespace detail

template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  require(A.rows() == A.cols(), "cuda::pseudoinverse: the core must be square, got ", A.rows(), "x",
          A.cols());
  require(A.rows() >= 1, "cuda::pseudoinverse: the core is empty (", A.rows(), "x", A.cols(), ")");
  require_finite(A, "cuda::pseudoinverse: the core");
  const detail::DeviceMatrix<T> a = detail::upload<T>(A);
  detail::DevicePinv<T> pinv(a.rows, 1, options);
  pinv.compute(a.data());
  return pinv.result(0);
}

template PinvResult<float> pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template PinvResult<double> pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&);

}  // namespace nystrom::cuda
