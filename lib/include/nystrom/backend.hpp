#pragma once
/// @file backend.hpp
/// Choosing where the work runs: the CPU code or the CUDA backend (lib/cuda/, built when
/// NYSTROM_WITH_CUDA is ON as the module libnystrom_cuda.so, loaded on the first request for Device::cuda so
/// CPU runs never load the CUDA libraries), behind the same signatures. The implementation (src/backend.cpp)
/// is the only place that tests NYSTROM_WITH_CUDA. Asking for Device::cuda in a build without the backend, or
/// on a machine without a GPU, throws std::invalid_argument with a message saying which (drivers turn that
/// into exit status 2).

#include <functional>
#include <memory>
#include <string>

#include "nystrom/approximation.hpp"
#include "nystrom/batched.hpp"
#include "nystrom/detail/kernel_passes.hpp"
#include "nystrom/detail/operator_concepts.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Where a computation runs.
enum class Device { cpu, cuda };

/// "cpu", "cuda".
std::string to_string(Device device);
/// Inverse of to_string; throws std::invalid_argument naming an unknown device.
Device device_from_string(const std::string& name);

/// True when this build has the CUDA backend (compiled in).
bool cuda_compiled();
/// True when the CUDA backend is compiled in AND a CUDA device is present at run time.
bool cuda_available();
/// "cpu", or the GPU's name, compute capability and memory for Device::cuda; throws like require_device.
std::string describe_device(Device device);
/// Throws std::invalid_argument unless `device` can run here: "--device cuda: this build has no CUDA backend
/// (configure with -DNYSTROM_WITH_CUDA=ON and nvcc)" or "--device cuda: no CUDA device found".
void require_device(Device device);

/// Exact attention O = (κ(Q,K) V) ⊘ (κ(Q,K) 1) on `device` (nystrom::exact_attention or
/// cuda::exact_attention). Host matrices in and out: on the GPU a call includes the host↔device copies (as
/// `nystrom bench --device cuda` times it).
template <class T>
Matrix<T> exact_attention(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                          const ConstMatrixRef<T>& V, const Kernel& kernel);

/// Z ≈ A⁺ of a square A on `device` (nystrom::pseudoinverse or cuda::pseudoinverse), with the same
/// diagnostics.
template <class T>
PinvResult<T> pseudoinverse(Device device, const ConstMatrixRef<T>& A, const PinvOptions& options);

/// The generalized Nyström factors of κ(Q, K) on `device`; landmarks are always selected on the host, so both
/// devices use the same Q̄, K̄ (nystrom::generalized_nystrom or cuda::generalized_nystrom).
template <class T>
NystromFactors<T> generalized_nystrom(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options);

/// The same with given landmarks (selected once by the caller and shared, e.g. with the bound terms). The
/// factors mean the same on both devices, the kernel's log-shift included (NystromFactors).
template <class T>
NystromFactors<T> generalized_nystrom(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options);

/// PnP-Nystra Algorithm 1 from the tokens: nystrom_attention(generalized_nystrom(Q, K, options), V) on the
/// CPU, the whole pipeline in one pass on the GPU (only Ô comes back; a call includes the copies of Q, K, V
/// to the device and of Ô back).
template <class T>
Matrix<T> nystrom_attention(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                            const ConstMatrixRef<T>& V, const NystromOptions& options);

/// The kernel block κ(X, Y) (n×p) on `device`.
template <class T>
Matrix<T> kernel_block(Device device, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                       const Kernel& kernel);

/// Seconds of one n×n×n GEMM in T on `device` (best of three after a warm-up; on the CPU Eigen through
/// OpenBLAS on as many OpenBLAS threads as OpenMP threads (BlasThreads), on the GPU cuBLAS): the reference
/// rate `nystrom bench` reports fractions of.
template <class T>
double gemm_seconds(Device device, Index n);

/// A type-erased operator in the concept of operators.hpp (rows, cols, perform_op, perform_transpose_op), so
/// Spectra-based code takes CPU and GPU operators alike. It carries the optional one-pass products of the
/// wrapped operator (perform_outer_gram_op, perform_inner_gram_op, perform_augmented_op: one kernel pass
/// instead of two for KernelOperator and the matrix-free error operator) and falls back to two products
/// where the wrapped operator has none, so Lanczos through it makes the passes it would make on the operator
/// itself. Copies share the underlying operator.
template <class T>
class AnyOperator {
 public:
  using Scalar = T;
  using Product = std::function<void(const T*, T*)>;
  /// Wraps a shared operator `op` of any type with the four members (and whichever optional ones it has).
  template <class Operator>
  explicit AnyOperator(std::shared_ptr<Operator> op)
      : rows_(op->rows()),
        cols_(op->cols()),
        apply_([op](const T* x, T* y) { op->perform_op(x, y); }),
        apply_transpose_([op](const T* x, T* y) { op->perform_transpose_op(x, y); }) {
    if constexpr (detail::HasOuterGram<Operator>)
      outer_gram_ = [op](const T* x, T* y) { op->perform_outer_gram_op(x, y); };
    if constexpr (detail::HasInnerGram<Operator>)
      inner_gram_ = [op](const T* x, T* y) { op->perform_inner_gram_op(x, y); };
    if constexpr (detail::HasAugmentedProduct<Operator>)
      augmented_ = [op](const T* x, T* y) { op->perform_augmented_op(x, y); };
  }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  void perform_op(const T* x, T* y) const { apply_(x, y); }
  void perform_transpose_op(const T* x, T* y) const { apply_transpose_(x, y); }
  /// y = A Aᵀ x (x, y: rows()).
  void perform_outer_gram_op(const T* x, T* y) const {
    if (outer_gram_) return outer_gram_(x, y);
    Vector<T> middle(cols_);
    apply_transpose_(x, middle.data());
    apply_(middle.data(), y);
  }
  /// y = AᵀA x (x, y: cols()).
  void perform_inner_gram_op(const T* x, T* y) const {
    if (inner_gram_) return inner_gram_(x, y);
    Vector<T> middle(rows_);
    apply_(x, middle.data());
    apply_transpose_(middle.data(), y);
  }
  /// [y_top; y_bottom] = [[0, A], [Aᵀ, 0]] [x_top; x_bottom] (x_top: rows(), x_bottom: cols()).
  void perform_augmented_op(const T* x, T* y) const {
    if (augmented_) return augmented_(x, y);
    apply_(x + rows_, y);
    apply_transpose_(x, y + rows_);
  }
  /// True when the wrapped operator forms A Aᵀ x in one pass (the Gram form Lanczos uses for square A).
  bool fused_outer_gram() const { return static_cast<bool>(outer_gram_); }

 private:
  Index rows_, cols_;
  Product apply_, apply_transpose_;
  Product outer_gram_, inner_gram_, augmented_;  ///< empty where the wrapped operator has no such member
};

/// G = κ(X, Y) as a matrix-free operator on `device` with products in S: on the CPU KernelOperator<T, S>
/// (one kernel pass per Gram product, accumulated in double, rows in panels of tiling.panel_rows), on the GPU
/// cuda::KernelOperator in T (its products widened to S). The kernel's log-shift is honoured on both devices.
template <class T, class S = T>
AnyOperator<S> kernel_operator(Device device, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                               const Kernel& kernel, const MatrixFreeOptions& tiling = {});

/// E = G − Ĝ with G = κ(Q, K) (kernel from factors.options, its log-shift included) evaluated blockwise on
/// `device`, with products in S, for Lanczos (docs/mathematics.md §7). The CPU operator (one kernel pass per
/// Gram product) copies the factors in S; the GPU one copies them to the device.
template <class T, class S = T>
AnyOperator<S> error_operator(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                              const NystromFactors<T>& factors, const MatrixFreeOptions& tiling = {});

/// Seconds of the phases of a batched run with host memory in and out: the copies to the device, the
/// computation, the copy back (CUDA events on the GPU; on the CPU the copies are 0).
struct TransferSeconds {
  double to_device = 0;
  double compute = 0;
  double to_host = 0;
};

/// `size` values of T in the memory of `device`: host memory for Device::cpu, GPU memory (through the CUDA
/// module) for Device::cuda. The arrays of the device-resident batched API; copies from and to host memory
/// are explicit and wait for the device. Move-only.
template <class T>
class DeviceArray {
 public:
  /// Throws std::invalid_argument unless `device` can run here and size ≥ 0.
  DeviceArray(Device device, Index size);
  Device device() const { return device_; }
  Index size() const { return size_; }
  /// A host pointer (Device::cpu) or a device pointer (Device::cuda).
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  /// Copies size() values from host memory.
  void copy_from(const T* host);
  /// Copies size() values to host memory, after the device's queued work.
  void copy_to(T* host) const;

 private:
  Device device_;
  Index size_;
  std::unique_ptr<T, void (*)(void*)> data_;
};

namespace detail {

/// What a device implements for BatchedAttentionPlan (the CPU: batched_attention; the GPU: the CUDA module's
/// plan).
template <class T>
class BatchedRunner {
 public:
  virtual ~BatchedRunner() = default;
  /// Q, K, V and out in the device's memory; queued (the GPU returns before the work is done).
  virtual void run(const T* q, const T* k, const T* v, T* out) = 0;
  /// Host memory in and out: copies in, run, copy out, each timed; waits.
  virtual TransferSeconds run_host(const T* q, const T* k, const T* v, T* out) = 0;
  /// Returns when every queued run has finished.
  virtual void wait() = 0;
  /// The diagnostics of the last run (waits for it).
  virtual BatchedDiagnostics diagnostics() = 0;
};

}  // namespace detail

/// Batched attention (batched.hpp) on `device` for one shape and configuration, its buffers allocated once
/// and reused by every run (FINUFFT's plan: make the plan, then execute it). On the CPU a run is
/// batched_attention. On the GPU (exact and pnp-nystra with segment-means or window-pool landmarks) a run is
/// queued on the device without any host synchronization: the landmarks pooled there, the blocks of all heads
/// by strided batched GEMMs and one launch per elementwise step, the m×m pseudoinverses of all heads in one
/// launch (iterations) or one cuSOLVER batched Jacobi SVD (exact, m ≤ 32), Algorithm 1 by strided batched
/// GEMMs. Not thread-safe; a GPU plan belongs to the thread that made it (its stream).
template <class T>
class BatchedAttentionPlan {
 public:
  /// Throws std::invalid_argument naming the value for a device that cannot run, bad options or shape, and
  /// on the GPU a method other than exact and pnp-nystra or a landmark strategy other than segment-means and
  /// window-pool.
  BatchedAttentionPlan(Device device, Method method, const BatchShape& shape,
                       const ApproximationOptions& options, AlphaScope alpha_scope = AlphaScope::matrix);
  ~BatchedAttentionPlan();
  BatchedAttentionPlan(BatchedAttentionPlan&&) noexcept;
  BatchedAttentionPlan& operator=(BatchedAttentionPlan&&) noexcept;

  /// Q, K ([B, H, N, d]), V and out ([B, H, N, dv]) in the device's memory (DeviceArray::data(), or another
  /// library's arrays on the same device). On the GPU the run is queued and returns at once; diagnostics()
  /// and DeviceArray::copy_to wait for it. GPU inputs are not scanned for NaN or Inf (they give NaN outputs).
  void run(const T* q, const T* k, const T* v, T* out);
  /// Host views in and out (checked against the plan's shape, and for finite values, on the CPU head by head
  /// as batched_attention does): copies in, run, copy out; the seconds of each phase.
  TransferSeconds run(const BatchView<const T>& q, const BatchView<const T>& k, const BatchView<const T>& v,
                      const BatchView<T>& out);
  /// Returns when every run queued on the device has finished (on the CPU a run returns when done).
  void wait() const;
  /// Per-head diagnostics and the batch α of the last run (waits for it).
  BatchedDiagnostics diagnostics() const;
  const BatchShape& shape() const { return shape_; }
  Device device() const { return device_; }

 private:
  Device device_;
  BatchShape shape_;
  std::unique_ptr<detail::BatchedRunner<T>> runner_;
};

}  // namespace nystrom
