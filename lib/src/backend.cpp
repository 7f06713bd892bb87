#include "nystrom/backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <type_traits>

#include "attention_inputs.hpp"
#include "batch_inputs.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/matrix_free.hpp"
#include "nystrom/operators.hpp"
#include "wall_clock.hpp"

// The one file that tests NYSTROM_WITH_CUDA: each factory below checks the device, then
// takes the CUDA branch only when the backend is compiled in. The backend is a module loaded on first use.
#ifdef NYSTROM_WITH_CUDA
#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <filesystem>

#include "nystrom/cuda/module.hpp"
#endif

namespace nystrom {

namespace {

/// Owns G's operator, Ĝ's factors and operator in S, and their difference (which refers to both) at stable
/// addresses; one kernel pass per Gram product (DifferenceOperator's fused products).
template <class T, class S>
struct CpuErrorOperator {
  CpuErrorOperator(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const NystromFactors<T>& f,
                   const MatrixFreeOptions& tiling)
      : kernel(Q, K, f.options.kernel, tiling),
        factors(converted_factors(f)),
        approximation(factors),
        difference(kernel, approximation) {}
  using Scalar = S;
  Index rows() const { return difference.rows(); }
  Index cols() const { return difference.cols(); }
  void perform_op(const S* x, S* y) const { difference.perform_op(x, y); }
  void perform_transpose_op(const S* x, S* y) const { difference.perform_transpose_op(x, y); }
  void perform_inner_gram_op(const S* x, S* y) const { difference.perform_inner_gram_op(x, y); }
  void perform_outer_gram_op(const S* x, S* y) const { difference.perform_outer_gram_op(x, y); }
  void perform_augmented_op(const S* x, S* y) const { difference.perform_augmented_op(x, y); }

  static NystromFactors<S> converted_factors(const NystromFactors<T>& f) {
    if constexpr (std::is_same_v<S, T>)
      return f;
    else
      return widened_factors<T>(f);
  }

  KernelOperator<T, S> kernel;
  NystromFactors<S> factors;
  NystromOperator<S> approximation;
  DifferenceOperator<KernelOperator<T, S>, NystromOperator<S>> difference;
};

/// An operator in T seen with products in S (vectors converted on the way in and out).
template <class T, class S>
struct ConvertedOperator {
  using Scalar = S;
  AnyOperator<T> op;
  Index rows() const { return op.rows(); }
  Index cols() const { return op.cols(); }
  void perform_op(const S* x, S* y) const { convert(x, y, cols(), rows(), &AnyOperator<T>::perform_op); }
  void perform_transpose_op(const S* x, S* y) const {
    convert(x, y, rows(), cols(), &AnyOperator<T>::perform_transpose_op);
  }
  void convert(const S* x, S* y, Index in, Index out,
               void (AnyOperator<T>::*product)(const T*, T*) const) const {
    const Vector<T> input = Eigen::Map<const Vector<S>>(x, in).template cast<T>();
    Vector<T> output(out);
    (op.*product)(input.data(), output.data());
    Eigen::Map<Vector<S>>(y, out) = output.template cast<S>();
  }
};

/// A T operator with products in S: itself, or wrapped in ConvertedOperator.
template <class T, class S>
AnyOperator<S> with_products_in(AnyOperator<T> op) {
  if constexpr (std::is_same_v<S, T>)
    return op;
  else
    return AnyOperator<S>(std::make_shared<ConvertedOperator<T, S>>(ConvertedOperator<T, S>{std::move(op)}));
}

}  // namespace

namespace {
constexpr std::array<EnumName<Device>, 2> device_names{{{Device::cpu, "cpu"}, {Device::cuda, "cuda"}}};
}  // namespace

std::string to_string(Device device) {
  return name_of(device, device_names);
}

Device device_from_string(const std::string& name) {
  return parse(name, device_names, "device");
}

#ifdef NYSTROM_WITH_CUDA
namespace {

/// The CUDA module, loaded (once, on first call) by cuda_module_paths.
struct LoadedModule {
  const cuda::Module* module = nullptr;
  std::string error;  ///< why loading failed
};

/// Where the module is looked for, in order: $NYSTROM_CUDA_MODULE alone when it is set; else
/// NYSTROM_CUDA_MODULE_RELATIVE from the directory of the file holding this code (the program, or
/// libnystrom.so), so an installed or moved tree finds its own module; then the path the module was built at.
std::vector<std::string> cuda_module_paths() {
  if (const char* path = std::getenv("NYSTROM_CUDA_MODULE"); path && *path) return {path};
  std::vector<std::string> paths;
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(&device_names, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) && map) {
    std::error_code error;  // the program's own link map has an empty name
    const std::filesystem::path file = *map->l_name ? std::filesystem::path(map->l_name)
                                                    : std::filesystem::read_symlink("/proc/self/exe", error);
    if (!error)
      paths.push_back((file.parent_path() / NYSTROM_CUDA_MODULE_RELATIVE).lexically_normal().string());
  }
  if (paths.empty() || paths.back() != NYSTROM_CUDA_MODULE_BUILT)
    paths.emplace_back(NYSTROM_CUDA_MODULE_BUILT);
  return paths;
}

const LoadedModule& cuda_module() {
  static const LoadedModule loaded = [] {
    LoadedModule result;
    for (const auto& path : cuda_module_paths()) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      const auto entry =
          handle ? reinterpret_cast<const cuda::Module* (*)()>(dlsym(handle, "nystrom_cuda_module"))
                 : nullptr;
      if (entry) {
        result.module = entry();
        return result;
      }
      const char* why = dlerror();
      result.error += describe(result.error.empty() ? "" : "; ", why ? why : path);
    }
    result.error += " (NYSTROM_CUDA_MODULE may name the module's path)";
    return result;
  }();
  return loaded;
}

/// The module's operations in T; only after require_device(Device::cuda).
template <class T>
const cuda::Operations<T>& gpu() {
  return cuda_module().module->operations<T>();
}

/// Throws std::invalid_argument unless the device can apply the kernel's log-shift: the device evaluates κ_c
/// by a GEMM onto −c for the exponential kernel; the distance kernels (κ ≤ 1 without a shift) take none.
void require_device_shift(const Kernel& kernel) {
  require(kernel.log_shift == 0 || kernel.type == KernelType::exponential,
          "--device cuda: a log_shift of the ", to_string(kernel.type),
          " kernel is not supported on the GPU (its kernel values are <= 1 without one)");
}

/// The options the device runs generalized Nyström with, so that its factors mean what the CPU's do
/// (NystromFactors): the core's pseudoinverse options of core_pinv_options, and for the clamped map (which
/// applies to φ itself) the unshifted kernel, e^{−c} then going into the row scale (set_clamped_scale).
NystromOptions device_nystrom_options(const NystromOptions& options) {
  require_device_shift(options.kernel);
  NystromOptions device = options;
  device.pinv = core_pinv_options(options);
  if (options.stabilization == Stabilization::clamped) device.kernel = options.kernel.shifted(0);
  return device;
}

}  // namespace
#endif

bool cuda_compiled() {
#ifdef NYSTROM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool cuda_available() {
#ifdef NYSTROM_WITH_CUDA
  const cuda::Module* module = cuda_module().module;
  return module && module->device_count() > 0;
#else
  return false;
#endif
}

void require_device(Device device) {
  if (device == Device::cpu) return;
  require(cuda_compiled(),
          "--device cuda: this build has no CUDA backend (configure with -DNYSTROM_WITH_CUDA=ON "
          "and the CUDA Toolkit's nvcc)");
#ifdef NYSTROM_WITH_CUDA
  require(cuda_module().module != nullptr,
          "--device cuda: cannot load the CUDA backend module: ", cuda_module().error);
#endif
  require(cuda_available(),
          "--device cuda: no CUDA device found (the CUDA backend is built, but the driver reports "
          "no GPU on this machine)");
}

std::string describe_device(Device device) {
  require_device(device);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) return cuda_module().module->device_description();
#endif
  return "cpu";
}

template <class T>
Matrix<T> exact_attention(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                          const ConstMatrixRef<T>& V, const Kernel& kernel) {
  require_device(device);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    kernel.validate();
    detail::require_tokens<T>(Q, K, "exact_attention");
    require_finite(V, "exact_attention: V");
    return gpu<T>().exact_attention(Q, K, V, kernel);
  }
#endif
  return exact_attention<T>(Q, K, V, kernel);
}

template <class T>
PinvResult<T> pseudoinverse(Device device, const ConstMatrixRef<T>& A, const PinvOptions& options) {
  require_device(device);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    options.validate_in<T>();
    return gpu<T>().pseudoinverse(A, options);
  }
#endif
  return pseudoinverse<T>(A, options);
}

template <class T>
NystromFactors<T> generalized_nystrom(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options) {
  require_device(device);
  detail::require_nystrom_inputs<T>(Q, K, options, "generalized_nystrom");
  return generalized_nystrom<T>(device, Q, K, select_landmarks<T>(Q, K, options.landmarks, options.kernel),
                                options);
}

template <class T>
NystromFactors<T> generalized_nystrom(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options) {
  require_device(device);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    detail::require_nystrom_inputs<T>(Q, K, options, "generalized_nystrom");
    NystromFactors<T> f = gpu<T>().generalized_nystrom(Q, K, landmarks, device_nystrom_options(options));
    f.options = options;
    if (options.stabilization == Stabilization::clamped)
      f.left_log_scale.setConstant(-T(options.kernel.log_shift));
    return f;
  }
#endif
  return generalized_nystrom<T>(Q, K, landmarks, options);
}

template <class T>
Matrix<T> nystrom_attention(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                            const ConstMatrixRef<T>& V, const NystromOptions& options) {
  require_device(device);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    detail::require_nystrom_inputs<T>(Q, K, options, "generalized_nystrom");
    require_finite(V, "nystrom_attention: V");
    return gpu<T>().nystrom_attention(Q, K, V, select_landmarks<T>(Q, K, options.landmarks, options.kernel),
                                      device_nystrom_options(options));
  }
#endif
  NystromFactors<T> factors;
  return generalized_nystrom_attention<T>(Q, K, V, options, factors);
}

template <class T>
Matrix<T> kernel_block(Device device, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                       const Kernel& kernel) {
  require_device(device);
  kernel.validate();
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    require_device_shift(kernel);
    return gpu<T>().kernel_block(X, Y, kernel);
  }
#endif
  return kernel.block<T>(X, Y);
}

template <class T, class S>
AnyOperator<S> kernel_operator(Device device, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y,
                               const Kernel& kernel, const MatrixFreeOptions& tiling) {
  require_device(device);
  kernel.validate();
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    require_device_shift(kernel);
    return with_products_in<T, S>(gpu<T>().kernel_operator(X, Y, kernel));
  }
#endif
  return AnyOperator<S>(std::make_shared<KernelOperator<T, S>>(X, Y, kernel, tiling));
}

template <class T, class S>
AnyOperator<S> error_operator(Device device, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                              const NystromFactors<T>& factors, const MatrixFreeOptions& tiling) {
  require_device(device);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    require_device_shift(factors.options.kernel);
    return with_products_in<T, S>(gpu<T>().error_operator(Q, K, factors));
  }
#endif
  return AnyOperator<S>(std::make_shared<CpuErrorOperator<T, S>>(Q, K, factors, tiling));
}

template <class T>
double gemm_seconds(Device device, Index n) {
  require_device(device);
  require(n >= 1, "gemm_seconds: n = ", n, " must be >= 1");
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) return gpu<T>().gemm_seconds(n);
#endif
  const Matrix<T> a = Matrix<T>::Random(n, n), b = Matrix<T>::Random(n, n);
  Matrix<T> c(n, n);
  const BlasThreads blas_threads(threads());  // the reference is BLAS's own multithreaded GEMM
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 4; ++run) {
    const auto start = detail::Clock::now();
    c.noalias() = a * b;
    const double seconds = detail::seconds_since(start);
    if (run > 0) best = std::min(best, seconds);  // run 0 warms up caches and BLAS threads
  }
  return best;
}

template <class T>
DeviceArray<T>::DeviceArray(Device device, Index size)
    : device_(device),
      size_(size),
      data_(
          nullptr, +[](void*) {}) {
  require(size >= 0, "DeviceArray: size = ", size, " must be >= 0");
  require_device(device);
  const std::size_t bytes = static_cast<std::size_t>(std::max<Index>(size, 1)) * sizeof(T);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    const cuda::Module& module = *cuda_module().module;
    data_ = {static_cast<T*>(module.allocate(bytes)), module.release};
    return;
  }
#endif
  data_ = {static_cast<T*>(std::malloc(bytes)), +[](void* data) { std::free(data); }};
  if (!data_) throw std::bad_alloc();
}

template <class T>
void DeviceArray<T>::copy_from(const T* host) {
#ifdef NYSTROM_WITH_CUDA
  if (device_ == Device::cuda) return cuda_module().module->copy_to_device(data(), host, size_ * sizeof(T));
#endif
  std::copy_n(host, size_, data());
}

template <class T>
void DeviceArray<T>::copy_to(T* host) const {
#ifdef NYSTROM_WITH_CUDA
  if (device_ == Device::cuda) return cuda_module().module->copy_to_host(host, data(), size_ * sizeof(T));
#endif
  std::copy_n(data(), size_, host);
}

namespace {

/// The CPU side of BatchedAttentionPlan: batched_attention on host memory.
template <class T>
class CpuBatchedRunner final : public detail::BatchedRunner<T> {
 public:
  CpuBatchedRunner(Method method, const BatchShape& shape, const ApproximationOptions& options,
                   AlphaScope scope)
      : method_(method), shape_(shape), options_(options), scope_(scope) {}

  void run(const T* q, const T* k, const T* v, T* out) override {
    const Index b = shape_.batch, h = shape_.heads, n = shape_.tokens;
    last_ = batched_attention<T>(method_, {q, b, h, n, shape_.dim}, {k, b, h, n, shape_.dim},
                                 {v, b, h, n, shape_.value_dim}, {out, b, h, n, shape_.value_dim}, options_,
                                 scope_);
  }

  TransferSeconds run_host(const T* q, const T* k, const T* v, T* out) override {
    const auto start = detail::Clock::now();
    run(q, k, v, out);
    return {0, detail::seconds_since(start), 0};
  }

  void wait() override {}

  BatchedDiagnostics diagnostics() override { return last_; }

 private:
  Method method_;
  BatchShape shape_;
  ApproximationOptions options_;
  AlphaScope scope_;
  BatchedDiagnostics last_;
};

}  // namespace

template <class T>
BatchedAttentionPlan<T>::BatchedAttentionPlan(Device device, Method method, const BatchShape& shape,
                                              const ApproximationOptions& options, AlphaScope alpha_scope)
    : device_(device), shape_(shape) {
  require_device(device);
  require(shape.batch >= 1 && shape.heads >= 1 && shape.tokens >= 1 && shape.dim >= 1 && shape.value_dim >= 1,
          "batched attention plan: shape B = ", shape.batch, ", H = ", shape.heads, ", N = ", shape.tokens,
          ", d = ", shape.dim, ", dv = ", shape.value_dim, " (each must be >= 1)");
  options.validate_in<T>(method, shape.tokens, shape.dim);
#ifdef NYSTROM_WITH_CUDA
  if (device == Device::cuda) {
    require(method == Method::exact || method == Method::pnp_nystra,
            "batched attention on --device cuda: method ", to_string(method),
            " runs on the CPU only (on the GPU: exact, pnp-nystra)");
    cuda::LandmarkPooling pooling;
    const LandmarkOptions& landmarks = options.pnp_nystra.landmarks;
    if (method == Method::pnp_nystra) {
      require(landmarks.strategy == LandmarkStrategy::segment_means ||
                  landmarks.strategy == LandmarkStrategy::window_pool,
              "batched attention on --device cuda: landmark strategy ", to_string(landmarks.strategy),
              " is not pooled on the GPU (segment-means, window-pool)");
      require(landmarks.prefix_tokens == 0,
              "batched attention on --device cuda: prefix_tokens = ", landmarks.prefix_tokens,
              " is pooled on the CPU only");
      if (landmarks.strategy == LandmarkStrategy::window_pool) {
        Index h = landmarks.window[0], w = landmarks.window[1];
        if (h == 0 && w == 0)
          h = w = static_cast<Index>(std::llround(std::sqrt(static_cast<double>(shape.tokens))));
        const auto [grid_rows, grid_cols] = pooling_grid(h, w, landmarks.count, landmarks.window_grid);
        pooling = {int(h), int(w), int(grid_rows), int(grid_cols)};
      }
    }
    // PnP-Nystra's options as the device runs them (device_nystrom_options), as for one head.
    ApproximationOptions device_options = options;
    if (method == Method::pnp_nystra) {
      NystromOptions nystrom = options.pnp_nystra;
      nystrom.kernel = options.kernel;
      device_options.pnp_nystra = device_nystrom_options(nystrom);
      device_options.kernel = device_options.pnp_nystra.kernel;
    }
    runner_ = gpu<T>().batched_plan(method, shape, device_options, alpha_scope, pooling);
    return;
  }
#endif
  runner_ = std::make_unique<CpuBatchedRunner<T>>(method, shape, options, alpha_scope);
}

template <class T>
BatchedAttentionPlan<T>::~BatchedAttentionPlan() = default;
template <class T>
BatchedAttentionPlan<T>::BatchedAttentionPlan(BatchedAttentionPlan&&) noexcept = default;
template <class T>
BatchedAttentionPlan<T>& BatchedAttentionPlan<T>::operator=(BatchedAttentionPlan&&) noexcept = default;

template <class T>
void BatchedAttentionPlan<T>::run(const T* q, const T* k, const T* v, T* out) {
  require(q && k && v && out, "batched attention plan: a null array");
  runner_->run(q, k, v, out);
}

template <class T>
TransferSeconds BatchedAttentionPlan<T>::run(const BatchView<const T>& q, const BatchView<const T>& k,
                                             const BatchView<const T>& v, const BatchView<T>& out) {
  detail::require_batch<T>(q, k, v, out, "batched attention plan");
  require(q.batch == shape_.batch && q.heads == shape_.heads && q.tokens == shape_.tokens &&
              q.dim == shape_.dim && v.dim == shape_.value_dim,
          "batched attention plan: Q is ", detail::shape_of(q), " and V ", detail::shape_of(v),
          ", the plan is for [", shape_.batch, ", ", shape_.heads, ", ", shape_.tokens, ", ", shape_.dim,
          "] and dv = ", shape_.value_dim);
  // The CPU's per-head code checks its inputs itself; the GPU's does not.
  if (device_ == Device::cuda)
    for (const auto* view : {&q, &k, &v})
      require_finite(Eigen::Map<const Vector<T>>(view->data, view->count() * view->head_size()),
                     "batched attention plan: an input");
  return runner_->run_host(q.data, k.data, v.data, out.data);
}

template <class T>
void BatchedAttentionPlan<T>::wait() const {
  runner_->wait();
}

template <class T>
BatchedDiagnostics BatchedAttentionPlan<T>::diagnostics() const {
  return runner_->diagnostics();
}

#define NYSTROM_INSTANTIATE(T)                                                                              \
  template PinvResult<T> pseudoinverse<T>(Device, const ConstMatrixRef<T>&, const PinvOptions&);            \
  template Matrix<T> exact_attention<T>(Device, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,         \
                                        const ConstMatrixRef<T>&, const Kernel&);                           \
  template NystromFactors<T> generalized_nystrom<T>(Device, const ConstMatrixRef<T>&,                       \
                                                    const ConstMatrixRef<T>&, const NystromOptions&);       \
  template NystromFactors<T> generalized_nystrom<T>(Device, const ConstMatrixRef<T>&,                       \
                                                    const ConstMatrixRef<T>&, const Landmarks<T>&,          \
                                                    const NystromOptions&);                                 \
  template Matrix<T> nystrom_attention<T>(Device, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,       \
                                          const ConstMatrixRef<T>&, const NystromOptions&);                 \
  template Matrix<T> kernel_block<T>(Device, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,            \
                                     const Kernel&);                                                        \
  template AnyOperator<T> kernel_operator<T, T>(Device, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, \
                                                const Kernel&, const MatrixFreeOptions&);                   \
  template AnyOperator<T> error_operator<T, T>(Device, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,  \
                                               const NystromFactors<T>&, const MatrixFreeOptions&);         \
  template double gemm_seconds<T>(Device, Index);                                                           \
  template class DeviceArray<T>;                                                                            \
  template class BatchedAttentionPlan<T>;
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE
template AnyOperator<double> kernel_operator<float, double>(Device, const ConstMatrixRef<float>&,
                                                            const ConstMatrixRef<float>&, const Kernel&,
                                                            const MatrixFreeOptions&);
template AnyOperator<double> error_operator<float, double>(Device, const ConstMatrixRef<float>&,
                                                           const ConstMatrixRef<float>&,
                                                           const NystromFactors<float>&,
                                                           const MatrixFreeOptions&);

}  // namespace nystrom
