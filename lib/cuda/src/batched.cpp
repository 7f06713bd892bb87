#include "nystrom/cuda/batched.hpp"

#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include "device.hpp"
#include "nystrom_pipeline.hpp"

namespace nystrom::cuda {

using namespace detail;

namespace {

/// A CUDA event on the calling thread's stream.
class Event {
 public:
  Event() { NYSTROM_CUDA_CHECK(cudaEventCreate(&event_)); }
  ~Event() {
    if (event_) cudaEventDestroy(event_);
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record() { NYSTROM_CUDA_CHECK(cudaEventRecord(event_, context().stream)); }
  void synchronize() const { NYSTROM_CUDA_CHECK(cudaEventSynchronize(event_)); }
  /// Seconds from `earlier` to this event, both recorded and completed.
  double seconds_since(const Event& earlier) const {
    float milliseconds = 0;
    NYSTROM_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, earlier.event_, event_));
    return 1e-3 * milliseconds;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

/// One plan's work for fixed device arrays as a CUDA graph: captured from the stream at the first run on
/// those arrays, then replayed by one launch, which removes the host's per-launch cost and the gaps between
/// the twenty-odd small steps of a PnP-Nystra run. Work that synchronizes (capturable false) is queued
/// directly at every run.
class CapturedWork {
 public:
  using Arrays = std::array<const void*, 4>;
  explicit CapturedWork(bool capturable) : capturable_(capturable) {}
  CapturedWork(const CapturedWork&) = delete;
  CapturedWork& operator=(const CapturedWork&) = delete;
  ~CapturedWork() { reset(); }

  /// Runs `enqueue` (which queues the work on the context stream) for `arrays`, through the graph.
  template <class Enqueue>
  void launch(const Arrays& arrays, Enqueue&& enqueue) {
    if (!capturable_) return enqueue();
    const cudaStream_t stream = context().stream;
    if (!graph_ || arrays != arrays_) {
      reset();
      NYSTROM_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
      cudaGraph_t graph = nullptr;
      try {
        enqueue();
      } catch (...) {
        cudaStreamEndCapture(stream, &graph);
        if (graph) cudaGraphDestroy(graph);
        throw;
      }
      NYSTROM_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
      const cudaError_t instantiated = cudaGraphInstantiate(&graph_, graph, 0);
      cudaGraphDestroy(graph);
      NYSTROM_CUDA_CHECK(instantiated);
      arrays_ = arrays;
    }
    NYSTROM_CUDA_CHECK(cudaGraphLaunch(graph_, stream));
  }

 private:
  void reset() {
    if (graph_) cudaGraphExecDestroy(graph_);
    graph_ = nullptr;
  }

  bool capturable_;
  cudaGraphExec_t graph_ = nullptr;
  Arrays arrays_{};
};

/// What the plans share: the shape, the captured work, and the device copies of host inputs for run_host.
template <class T>
class DevicePlan : public nystrom::detail::BatchedRunner<T> {
 public:
  DevicePlan(const BatchShape& shape, bool capturable)
      : count(int(shape.count())),
        n(int(shape.tokens)),
        d(int(shape.dim)),
        dv(int(shape.value_dim)),
        captured_(capturable) {}

  void run(const T* q, const T* k, const T* v, T* out) final {
    captured_.launch({q, k, v, out}, [&] { enqueue(q, k, v, out); });
  }

  TransferSeconds run_host(const T* q, const T* k, const T* v, T* out) final {
    const std::size_t tokens = std::size_t(count) * n * d, values = std::size_t(count) * n * dv;
    if (!staged_)
      staged_.emplace(Staged{DeviceBuffer<T>(tokens), DeviceBuffer<T>(tokens), DeviceBuffer<T>(values),
                             DeviceBuffer<T>(values)});
    const cudaStream_t stream = context().stream;
    start_.record();
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(staged_->q.data(), q, tokens * sizeof(T), cudaMemcpyHostToDevice, stream));
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(staged_->k.data(), k, tokens * sizeof(T), cudaMemcpyHostToDevice, stream));
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(staged_->v.data(), v, values * sizeof(T), cudaMemcpyHostToDevice, stream));
    copied_.record();
    this->run(staged_->q.data(), staged_->k.data(), staged_->v.data(), staged_->out.data());
    computed_.record();
    NYSTROM_CUDA_CHECK(
        cudaMemcpyAsync(out, staged_->out.data(), values * sizeof(T), cudaMemcpyDeviceToHost, stream));
    done_.record();
    done_.synchronize();
    return {copied_.seconds_since(start_), computed_.seconds_since(copied_), done_.seconds_since(computed_)};
  }

  void wait() final { context().synchronize(); }

 protected:
  /// Queues the work of one run on the context stream.
  virtual void enqueue(const T* q, const T* k, const T* v, T* out) = 0;

  int count, n, d, dv;

 private:
  CapturedWork captured_;
  struct Staged {
    DeviceBuffer<T> q, k, v, out;
  };
  std::optional<Staged> staged_;
  Event start_, copied_, computed_, done_;
};

/// Exact attention O = softmax(φ(Q, K)) V of every head, in chunks of heads whose logits fit panel_budget
/// (64 heads of N = 1024), or for larger N one head at a time in panels of queries: per chunk one strided
/// batched GEMM (or distance kernel) for the logits φ(K_b, Q_b) (keys × queries, so each query's softmax runs
/// down a contiguous column), one launch for the row max / exp / sum of every query, one strided batched GEMM
/// V_bᵀ P_b straight into the row-major output, one launch for the division.
template <class T>
class ExactPlan final : public DevicePlan<T> {
 public:
  ExactPlan(const BatchShape& shape, const Kernel& kernel) : DevicePlan<T>(shape, true), kernel_(kernel) {
    const Index n = shape.tokens;
    panel_ = panel_rows(n, n);
    chunk_ = panel_ == n ? int(std::clamp<Index>(panel_budget / (n * n), 1, shape.count())) : 1;
    logits_ = DeviceBuffer<T>(std::size_t(chunk_) * n * panel_);
    sums_ = DeviceBuffer<T>(std::size_t(chunk_) * panel_);
  }

  void enqueue(const T* q, const T* k, const T* v, T* out) override {
    const int n = this->n, d = this->d, dv = this->dv;
    const Offset tokens = Offset(n) * d, values = Offset(n) * dv, logits = Offset(n) * panel_;
    const cudaStream_t stream = context().stream;
    for (int h0 = 0; h0 < this->count; h0 += chunk_) {
      const int heads = std::min(chunk_, this->count - h0);
      for (int r0 = 0; r0 < n; r0 += panel_) {
        // Either one head (heads = 1) or whole heads (b = panel_ = N): the heads' b columns are contiguous.
        const int b = std::min(panel_, n - r0);
        const Offset first = Offset(h0) * n + r0;  // the first query row of the pass
        exponent<T>(kernel_, {k + Offset(h0) * tokens, d, true, tokens}, n, {q + first * d, d, true, tokens},
                    b, d, logits_.data(), n, logits, heads);
        map_lines<T>(logits_.data(), n, n, heads * b, ExpMap{}, true, nullptr, {sums_.data()}, stream);
        gemm_batched(CUBLAS_OP_N, CUBLAS_OP_N, dv, b, n, T(1), v + Offset(h0) * values, dv, values,
                     logits_.data(), n, logits, T(0), out + first * dv, dv, values, heads);
        divide_columns<T>(out + first * dv, dv, dv, heads * b, sums_.data(), T(0), stream);
      }
    }
  }

  BatchedDiagnostics diagnostics() override {
    this->wait();
    return {std::vector<HeadDiagnostics>(std::size_t(this->count)), 0};
  }

 private:
  Kernel kernel_;
  int panel_ = 0, chunk_ = 0;
  DeviceBuffer<T> logits_, sums_;
};

/// PnP-Nystra for every head (nystrom_pipeline.hpp), the landmarks pooled on the device.
template <class T>
class NystromPlan final : public DevicePlan<T> {
 public:
  NystromPlan(const BatchShape& shape, const ApproximationOptions& options, AlphaScope alpha_scope,
              const LandmarkPooling& pooling)
      : DevicePlan<T>(shape, DevicePinv<T>::capturable(int(options.pnp_nystra.landmarks.count),
                                                       options.pnp_nystra.pinv)),
        options_(options.pnp_nystra),
        pooling_(pooling),
        shared_alpha_(alpha_scope == AlphaScope::batch && is_iterative(options.pnp_nystra.pinv.method)),
        m_(int(options.pnp_nystra.landmarks.count)),
        q_bar_(std::size_t(this->count) * m_ * this->d),
        k_bar_(q_bar_.size()),
        landmark_sums_(std::size_t(pooled_landmarks_scratch(this->n, this->d, this->count, m_))),
        factors_(this->count, this->n, m_, options.pnp_nystra.pinv),
        work_(this->count, m_, this->dv) {
    options_.kernel = options.kernel;
  }

  void enqueue(const T* q, const T* k, const T* v, T* out) override {
    const int n = this->n, d = this->d, dv = this->dv;
    const cudaStream_t stream = context().stream;
    for (auto [tokens, landmarks] : {std::pair{q, q_bar_.data()}, std::pair{k, k_bar_.data()}})
      pooled_landmarks<T>(tokens, n, d, this->count, m_, pooling_.window_rows, pooling_.window_cols,
                          pooling_.grid_rows, pooling_.grid_cols, landmark_sums_.data(), landmarks, stream);
    factors_.compute(options_, {q, d, true, Offset(n) * d}, {k, d, true, Offset(n) * d}, d, q_bar_.data(),
                     k_bar_.data(), shared_alpha_, &work_);
    nystrom_output<T>(factors_, options_, {v, dv, true, Offset(n) * dv}, dv, work_, out, true);
  }

  BatchedDiagnostics diagnostics() override {
    BatchedDiagnostics out;
    for (const auto& [status, residual] : factors_.pinv.statuses()) out.heads.push_back({status, residual});
    out.alpha = shared_alpha_ ? factors_.pinv.shared_alpha() : 0;
    return out;
  }

 private:
  NystromOptions options_;
  LandmarkPooling pooling_;
  bool shared_alpha_;
  int m_;
  DeviceBuffer<T> q_bar_, k_bar_;
  DeviceBuffer<double> landmark_sums_;  ///< partial sums of pooled_landmarks
  DeviceFactors<T> factors_;
  AlgorithmBuffers<T> work_;
};

}  // namespace

template <class T>
std::unique_ptr<nystrom::detail::BatchedRunner<T>> batched_plan(Method method, const BatchShape& shape,
                                                                const ApproximationOptions& options,
                                                                AlphaScope alpha_scope,
                                                                const LandmarkPooling& pooling) {
  if (method == Method::exact) return std::make_unique<ExactPlan<T>>(shape, options.kernel);
  return std::make_unique<NystromPlan<T>>(shape, options, alpha_scope, pooling);
}

template std::unique_ptr<nystrom::detail::BatchedRunner<float>> batched_plan<float>(
    Method, const BatchShape&, const ApproximationOptions&, AlphaScope, const LandmarkPooling&);
template std::unique_ptr<nystrom::detail::BatchedRunner<double>> batched_plan<double>(
    Method, const BatchShape&, const ApproximationOptions&, AlphaScope, const LandmarkPooling&);

}  // namespace nystrom::cuda
