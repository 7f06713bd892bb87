#include "nystrom/batched.hpp"

#include <omp.h>

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <type_traits>

#include "batch_inputs.hpp"
#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"

#ifdef NYSTROM_WITH_OPENBLAS
extern "C" {
void cblas_somatcopy(int order, int trans, int rows, int cols, float alpha, const float* a, int lda, float* b,
                     int ldb);
void cblas_domatcopy(int order, int trans, int rows, int cols, double alpha, const double* a, int lda,
                     double* b, int ldb);
}
#endif

namespace nystrom {

namespace {
constexpr std::array<EnumName<AlphaScope>, 2> alpha_scope_names{
    {{AlphaScope::matrix, "matrix"}, {AlphaScope::batch, "batch"}}};
}  // namespace

std::string to_string(AlphaScope scope) {
  return name_of(scope, alpha_scope_names);
}

AlphaScope alpha_scope_from_string(const std::string& name) {
  return parse(name, alpha_scope_names, "alpha scope");
}

std::string batch_head_error(Index i, Index heads, const char* what) {
  return describe("batched attention, head ", i, " (b = ", i / heads, ", h = ", i % heads, "): ", what);
}

namespace {

/// out (rows×cols, column-major) = in (rows×cols, row-major), through OpenBLAS's omatcopy: Eigen's
/// element-by-element assignment writes with a stride of `rows` and took 60 µs for 1024×64 floats, omatcopy
/// 12 µs.
template <class T>
void transpose_copy(const T* in, Index rows, Index cols, T* out) {
#ifdef NYSTROM_WITH_OPENBLAS
  constexpr int row_major = 101, transposed = 112;  // CblasRowMajor, CblasTrans
  if constexpr (std::is_same_v<T, float>)
    cblas_somatcopy(row_major, transposed, int(rows), int(cols), 1.0f, in, int(cols), out, int(rows));
  else
    cblas_domatcopy(row_major, transposed, int(rows), int(cols), 1.0, in, int(cols), out, int(rows));
#else
  Eigen::Map<Matrix<T>>(out, rows, cols) = Eigen::Map<const RowMajorMatrix<T>>(in, rows, cols);
#endif
}

/// The four views of a batched call.
template <class T>
struct Batch {
  BatchView<const T> q, k, v;
  BatchView<T> out;
};

/// What a thread keeps from head to head and from call to call (fresh buffers of N×m or N×d values cost
/// their page faults every time): a Nyström method's factors, and for the other methods one head's q, k (and
/// v) copied to column-major N×d matrices for their per-head code.
template <class T>
struct HeadScratch {
  NystromFactors<T> factors;
  Matrix<T> q, k, v;

  void load_tokens(const Batch<T>& batch, Index i) {
    load(batch.q, i, q);
    load(batch.k, i, k);
  }
  void load_all(const Batch<T>& batch, Index i) {
    load_tokens(batch, i);
    load(batch.v, i, v);
  }

 private:
  static void load(const BatchView<const T>& X, Index i, Matrix<T>& to) {
    to.resize(X.tokens, X.dim);
    transpose_copy(X.data + i * X.head_size(), X.tokens, X.dim, to.data());
  }
};

/// Runs head(i, scratch) for i < count, each head on one thread, with the thread's own scratch. With
/// threads() > 1 and more than one head, the heads go one at a time (dynamic schedule) to the OpenMP threads,
/// each of which sets its own thread count to 1 first, so the per-head code sees threads() == 1 and opens no
/// nested regions; otherwise in order on the calling thread, the per-head code keeping the caller's threads.
/// The first exception (naming the head when it is std::invalid_argument and the batch has more than one) is
/// rethrown once the threads have stopped.
template <class Scratch, class Head>
void for_each_head(Index count, Index heads_per_batch, const Head& head) {
  const auto run = [&](Index i, Scratch& scratch) {
    try {
      head(i, scratch);
    } catch (const std::invalid_argument& error) {
      if (count == 1) throw;  // one head (a 2-D call from Python): the message needs no head
      throw std::invalid_argument(batch_head_error(i, heads_per_batch, error.what()));
    }
  };
  // Each thread keeps its scratch between calls (OpenMP's threads persist): fresh buffers of a few MiB per
  // call cost their page faults every time, 0.4 ms of a 1 ms call at N = 4096.
  thread_local Scratch scratch;
  const int workers = int(std::min<Index>(threads(), count));
  if (workers < 2 || omp_in_parallel()) {
    for (Index i = 0; i < count; ++i) run(i, scratch);
    return;
  }
  std::exception_ptr error;
  const SingleThreadedBlas single_threaded_blas;
#pragma omp parallel num_threads(workers)
  {
    omp_set_num_threads(1);  // this thread's count: the steps of a head stay on it
#pragma omp for schedule(dynamic, 1)
    for (Index i = 0; i < count; ++i) {
      try {
        run(i, scratch);
      } catch (...) {
#pragma omp critical(nystrom_batched_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

/// The Nyström methods' options as approximate_attention builds them (the kernel taken from `options`).
NystromOptions nystrom_options(Method method, const ApproximationOptions& options) {
  NystromOptions nystrom = method == Method::pnp_nystra ? options.pnp_nystra : options.symmetric_nystrom;
  nystrom.kernel = options.kernel;
  return nystrom;
}

bool is_nystrom(Method method) {
  return method == Method::pnp_nystra || method == Method::symmetric_nystrom;
}

/// The pseudoinverse options of a Nyström method's core in a batch: the shift and Tikhonov ε relative to the
/// core the head actually inverts, κ_c's without row-max stabilization (core_pinv_options), and α as given:
/// the batch α is taken over those very cores.
PinvOptions batch_core_pinv_options(Method method, const ApproximationOptions& options) {
  const NystromOptions nystrom = nystrom_options(method, options);
  PinvOptions pinv = core_pinv_options(nystrom);
  pinv.alpha = nystrom.pinv.alpha;
  return pinv;
}

/// Head i of a batch as a row-major N×dim matrix over the batch's memory.
template <class T>
ConstRowMajorMap<T> head_tokens(const BatchView<const T>& X, Index i) {
  return {X.data + i * X.head_size(), X.tokens, X.dim, Eigen::OuterStride<>(X.dim)};
}

/// The factors of a Nyström method on head i's q and k, read in place (row-major), as approximate_attention
/// makes them from column-major copies, into `factors`.
template <class T>
void nystrom_factors(Method method, const Batch<T>& batch, Index i, const ApproximationOptions& options,
                     NystromFactors<T>& factors) {
  const NystromOptions nystrom = nystrom_options(method, options);
  const ConstRowMajorMap<T> q = head_tokens(batch.q, i), k = head_tokens(batch.k, i);
  if (method == Method::pnp_nystra)
    generalized_nystrom<T>(q, k, nystrom, factors);
  else
    symmetric_nystrom<T>(q, k, nystrom, factors);
}

/// The first pass of AlphaScope::batch for one head: the matrix its pseudoinverse inverts (the core of
/// docs/mathematics.md §2, §6) and, for the Nyström methods, the factors themselves, so that the second pass
/// only redoes the m×m pseudoinverse.
template <class T>
struct CoreOfHead {
  Matrix<T> inverted;
  std::optional<NystromFactors<T>> factors;
};

template <class T>
CoreOfHead<T> core_of_head(Method method, const Batch<T>& batch, Index i, HeadScratch<T>& head,
                           const ApproximationOptions& options, const PinvOptions& pinv) {
  CoreOfHead<T> out;
  if (is_nystrom(method)) {
    nystrom_factors<T>(method, batch, i, options, out.factors.emplace());
    out.inverted = inverted_matrix<T>(out.factors->core, batch_core_pinv_options(method, options));
  } else if (method == Method::nystromformer) {
    head.load_tokens(batch, i);
    out.inverted = inverted_matrix<T>(
        nystromformer_core<T>(head.q, head.k, options.kernel.param, options.nystromformer), pinv);
  } else {  // cur: U = C[q_idx, :] needs C; the method runs once more in the second pass
    head.load_all(batch, i);
    out.inverted = inverted_matrix<T>(
        cur_attention<T>(head.q, head.k, head.v, options.kernel.param, options.cur).intersection, pinv);
  }
  return out;
}

/// Head i into batch.out: a Nyström method by its factors (`kept` ones from the first pass of
/// AlphaScope::batch, with only Z ≈ G_A⁺ redone) from q and k in place and the row-major Algorithm 1, V and Ô
/// in place (PnP-Nystra's factors and Ô in one call, generalized_nystrom_attention); the other methods by
/// approximate_attention on column-major copies of q, k and v, the output copied back.
template <class T>
HeadDiagnostics run_head(Method method, const Batch<T>& batch, Index i, HeadScratch<T>& head,
                         const ApproximationOptions& options, std::optional<NystromFactors<T>>& kept) {
  if (is_nystrom(method)) {
    NystromFactors<T>& factors = head.factors;
    if (kept) {
      factors = std::move(*kept);
      kept.reset();
      factors.pinv = core_pseudoinverse<T>(factors.core, batch_core_pinv_options(method, options));
      nystrom_attention<T>(factors, batch.v.head(i), batch.out.head(i));
    } else if (method == Method::pnp_nystra) {
      generalized_nystrom_attention<T>(head_tokens(batch.q, i), head_tokens(batch.k, i), batch.v.head(i),
                                       nystrom_options(method, options), factors, batch.out.head(i));
    } else {
      nystrom_factors<T>(method, batch, i, options, factors);
      nystrom_attention<T>(factors, batch.v.head(i), batch.out.head(i));
    }
    return {factors.pinv.status, factors.pinv.residual()};
  }
  head.load_all(batch, i);
  const Approximation<T> approximation = approximate_attention<T>(method, head.q, head.k, head.v, options);
  // The transpose of the column-major N×dv output is a row-major dv×N: omatcopy reads it as rows×cols = dv×N.
  const Matrix<T>& output = approximation.output;
  transpose_copy(output.data(), output.cols(), output.rows(), batch.out.data + i * batch.out.head_size());
  return {approximation.pinv_status, approximation.pinv_residual};
}

}  // namespace

template <class T>
BatchedDiagnostics batched_attention(Method method, const BatchView<const T>& Q, const BatchView<const T>& K,
                                     const BatchView<const T>& V, const BatchView<T>& out,
                                     const ApproximationOptions& options, AlphaScope alpha_scope) {
  detail::require_batch<T>(Q, K, V, out, "batched_attention");
  options.validate_in<T>(method, Q.tokens, Q.dim);
  const Index count = Q.count();
  // Performer's Ω and Linformer's E, F drawn once for the batch, not once per head.
  ApproximationOptions prepared = with_drawn_projections(method, options, Q.tokens, Q.dim);
  BatchedDiagnostics result;
  result.heads.resize(static_cast<std::size_t>(count));
  const Batch<T> batch{Q, K, V, out};
  PinvOptions* pinv = pinv_options(method, prepared);
  // AlphaScope::batch with an iterative pseudoinverse: every head's core first, then α over all of them
  // (docs/mathematics.md §4), then the heads with that α.
  std::vector<CoreOfHead<T>> cores(static_cast<std::size_t>(count));
  if (alpha_scope == AlphaScope::batch && pinv && is_iterative(pinv->method)) {
    for_each_head<HeadScratch<T>>(count, Q.heads, [&](Index i, HeadScratch<T>& head) {
      cores[std::size_t(i)] = core_of_head<T>(method, batch, i, head, prepared, *pinv);
    });
    std::vector<Matrix<T>> inverted(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < cores.size(); ++i) inverted[i] = std::move(cores[i].inverted);
    result.alpha = batch_alpha<T>(inverted);
    pinv->alpha = result.alpha;
  }
  for_each_head<HeadScratch<T>>(count, Q.heads, [&](Index i, HeadScratch<T>& head) {
    result.heads[std::size_t(i)] =
        run_head<T>(method, batch, i, head, prepared, cores[std::size_t(i)].factors);
  });
  return result;
}

#define NYSTROM_INSTANTIATE(T)                                                                 \
  template BatchedDiagnostics batched_attention<T>(                                            \
      Method, const BatchView<const T>&, const BatchView<const T>&, const BatchView<const T>&, \
      const BatchView<T>&, const ApproximationOptions&, AlphaScope);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
