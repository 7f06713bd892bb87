#include "nystrom/nystrom.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>

#include "attention_inputs.hpp"
#include "blas_gemm.hpp"
#include "emulation.hpp"
#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"
#include "panels.hpp"
#include "wall_clock.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<Stabilization>, 4> stabilization_names{{{Stabilization::none, "none"},
                                                                      {Stabilization::row_max, "row-max"},
                                                                      {Stabilization::clamped, "clamped"},
                                                                      {Stabilization::row_sum, "row-sum"}}};
}  // namespace

std::string to_string(Stabilization stabilization) {
  return name_of(stabilization, stabilization_names);
}

Stabilization stabilization_from_string(const std::string& name) {
  return parse(name, stabilization_names, "stabilization");
}

void NystromOptions::validate(Index n, Index d) const {
  kernel.validate();
  require(std::isfinite(clamp_threshold), "nystrom: clamp_threshold = ", clamp_threshold, " must be finite");
  landmarks.validate(n, d);
  pinv.validate();
  require(landmarks.query_count() == landmarks.count || !is_iterative(pinv.method),
          "nystrom: oversampled landmarks (", landmarks.query_count(),
          " query rows for m = ", landmarks.count, ") make a rectangular core, which ",
          to_string(pinv.method), " cannot invert; use pinv exact, truncated or oracle-core");
  require(pinv.method != PinvMethod::oracle_core || stabilization != Stabilization::clamped,
          "nystrom: the oracle core is the optimal core of the kernel's own blocks, not of the clamped map");
  require(pinv.method != PinvMethod::oracle_core || !is_emulated(storage),
          "nystrom: storage = ", to_string(storage),
          " emulates what a kernel in that format computes; the oracle core (pinv ", to_string(pinv.method),
          ") is an analysis in float or double, with no such kernel");
}

PinvOptions core_pinv_options(const NystromOptions& options) {
  PinvOptions pinv = options.pinv;
  pinv.storage = options.storage;
  const double c = options.kernel.log_shift;
  if (options.stabilization != Stabilization::none || c == 0) return pinv;
  // Each scaled by a power of e^{−c} (at most the largest double: ε of a core of entries e^{−1000} is all of
  // κ_c's); 0 stays 0, for α the automatic start.
  const auto scaled = [](double value, double factor) {
    return value > 0 ? std::min(value * factor, std::numeric_limits<double>::max()) : value;
  };
  pinv.shift = scaled(pinv.shift, std::exp(-c));
  pinv.tikhonov = scaled(pinv.tikhonov, std::exp(-2 * c));
  pinv.alpha = scaled(pinv.alpha, std::exp(2 * c));
  return pinv;
}

namespace {

/// The authors' clamped exponential exp(min(x, c)) + max(x − c, 0) with threshold c (PnP-Nystra public code),
/// elementwise in place, as array expressions that Eigen vectorizes (its exp agrees with std::exp to an ulp;
/// eight times faster than std::exp element by element).
template <class Block>
void clamped_exp(Block&& x, double threshold) {
  using T = typename std::decay_t<Block>::Scalar;
  const T c = T(threshold);
  x = (x.array().min(c).exp() + (x.array() - c).max(T(0))).matrix();
}

/// exp(φ − l 1ᵀ) in place: a stabilized kernel block from its exponent φ and row log-scales l. Two passes on
/// purpose: Eigen vectorizes exp of a plain array but calls scalar expf on the fused broadcast expression
/// (G_U's m×b panels are contiguous: detail::exp_in_place takes them as one flat array).
template <class T, class Block>
void exp_shifted_rows(Block&& exponent, const Vector<T>& log_scale) {
  exponent.colwise() -= log_scale;
  detail::exp_in_place(exponent);
}

/// The blocks from their exponents, in place: exp(φ − l) with the row log-scales l (the row maxima, or the
/// kernel's log-shift without stabilization), or the clamped exponential with options.clamp_threshold.
template <class T, class Block>
void kernel_from_exponent(Block&& exponent, const Vector<T>& log_scale, const NystromOptions& options) {
  if (options.stabilization == Stabilization::clamped)
    clamped_exp(exponent, options.clamp_threshold);
  else
    exp_shifted_rows<T>(exponent, log_scale);
}

/// The row log-scale subtracted inside the exponentials of blocks that are not row-max scaled: the kernel's
/// log-shift c for plain blocks (exp(φ − c), the blocks of κ_c), 0 for the clamped map (which applies to φ).
template <class T>
T plain_log_scale(const NystromOptions& options) {
  return options.stabilization == Stabilization::none ? T(options.kernel.log_shift) : T(0);
}

/// Sets the log scales of finished factors relative to κ_c (NystromFactors): row-max scales l and u of φ
/// become l − c and u − c; plain blocks are κ_c's own (scales 0); clamped blocks take e^{−c} as their row
/// scale.
template <class T>
void scales_relative_to_shift(NystromFactors<T>& f) {
  const T shift = T(f.options.kernel.log_shift);
  switch (f.options.stabilization) {
    case Stabilization::row_max:
    case Stabilization::row_sum:
      f.left_log_scale.array() -= shift;
      f.upper_log_scale.array() -= shift;
      return;
    case Stabilization::none:
      f.upper_log_scale.setZero();
      return;
    case Stabilization::clamped:
      f.left_log_scale.setConstant(-shift);
      return;
  }
}

/// Throws std::invalid_argument naming `where` unless the landmarks are Q̄ p×d and K̄ m×d with p ≥ m ≥ 1
/// (p = m where `square`) for tokens of dimension d.
template <class T>
void require_landmarks(const Landmarks<T>& landmarks, Index d, const char* where, bool square) {
  const Index p = landmarks.q.rows(), m = landmarks.k.rows();
  require(m >= 1 && (square ? p == m : p >= m) && landmarks.q.cols() == d && landmarks.k.cols() == d, where,
          ": landmarks are ", p, "x", landmarks.q.cols(), " and ", m, "x", landmarks.k.cols(), ", expected ",
          square ? "m x d and m x d" : "p x d and m x d with p >= m", ", m >= 1 and d = ", d);
}

/// The Frobenius-optimal core Z = C⁺ G_c R⁺ of the finished blocks C = diag(e^{left_log_scale}) G_L and
/// R = G_U (Sorensen & Embree, SISC 38(5), 2016): the best Ĝ = C Z R any core gives these landmarks, an
/// O(N²(d + p)) oracle. G_c R⁺ is formed in row panels of G_c (never stored); the pseudoinverses are SVDs in
/// double cut at max(N, p)·eps relative. Status converged; no residual (NaN): Z inverts nothing.
template <class T, class Tokens>
PinvResult<T> oracle_core(const Tokens& Q, const Tokens& K, const NystromFactors<T>& f) {
  const auto start = detail::Clock::now();
  const Index n = Q.rows(), p = f.upper.rows();
  const auto pinv_of = [](const Matrix<double>& a) {
    PinvOptions exact;
    return pseudoinverse<double>(a, exact).z;
  };
  const Matrix<double> right = pinv_of(f.upper.template cast<double>());  // R⁺, N×p
  Matrix<double> projected(n, p);                                         // G_c R⁺
  detail::for_each_panel(n, double(n) * double(n) * double(Q.cols() + p), [&](const detail::Panel& panel) {
    const Matrix<T> rows = f.options.kernel.template block<T>(Q.middleRows(panel.first, panel.rows), K);
    projected.middleRows(panel.first, panel.rows).noalias() = rows.template cast<double>() * right;
  });
  const Matrix<double> left = f.left_log_scale.template cast<double>().array().exp().matrix().asDiagonal() *
                              f.left.template cast<double>();
  PinvResult<T> result;
  result.z = (pinv_of(left) * projected).template cast<T>();
  result.status = result.z.allFinite() ? PinvStatus::converged : PinvStatus::non_finite;
  result.residuals.push_back(std::numeric_limits<double>::quiet_NaN());
  result.rank = result.z.rows();
  result.seconds = detail::seconds_since(start);
  return result;
}

/// Divides each landmark row of the core and of G_U by its sum over the N keys (Stabilization::row_sum),
/// adding its logarithm to upper_log_scale; the sums in double.
template <class T>
void scale_rows_by_sums(NystromFactors<T>& f) {
  const Vector<double> sums = f.upper.template cast<double>().rowwise().sum();
  for (Index i = 0; i < f.upper.rows(); ++i) {
    if (!(sums(i) > 0)) continue;  // a row of zeros (all of it underflowed) keeps its scale
    f.upper.row(i) /= T(sums(i));
    f.core.row(i) /= T(sums(i));
    f.upper_log_scale(i) += T(std::log(sums(i)));
  }
}

/// generalized_nystrom for Q and K of either layout (Tokens: ConstMatrixRef or ConstRowMajorMap), read in
/// place: the GEMMs take a row-major panel as the transpose of a column-major one. Into f, whose N×m blocks
/// keep their storage when their shapes do not change. `finished_upper_panel`, when given, is called on the
/// thread that finished a panel of G_U, right after its exponentials (generalized_nystrom_attention).
template <class T, class Tokens>
void generalized_factors(const Tokens& Q, const Tokens& K, Landmarks<T> landmarks,
                         const NystromOptions& options, NystromFactors<T>& f,
                         const std::function<void(const detail::Panel&)>& finished_upper_panel = {}) {
  require_landmarks(landmarks, Q.cols(), "generalized_nystrom", false);
  f.options = options;
  f.landmarks = std::move(landmarks);
  const Kernel& kernel = options.kernel;
  // row_sum scales the rows by their maxima first, as row_max, and by their sums once G_U is complete.
  const bool row_sums = options.stabilization == Stabilization::row_sum;
  const bool row_max_scaled = options.stabilization == Stabilization::row_max || row_sums;
  // The core's pseudoinverse waits for the finished blocks where it needs them: row sums, or the oracle core.
  const bool core_after_blocks = row_sums || options.pinv.method == PinvMethod::oracle_core;
  const T plain_scale = plain_log_scale<T>(options);
  const Index n = Q.rows(), m = f.landmarks.k.rows(), p = f.landmarks.q.rows();
  f.core = kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  f.left.resize(n, m);
  f.upper.resize(p, n);
  f.left_log_scale.setZero(n);
  // The plain scale without row-max stabilization; with it, the maximum over the threads' partial maxima.
  f.upper_log_scale =
      Vector<T>::Constant(p, row_max_scaled ? -std::numeric_limits<T>::infinity() : plain_scale);
  // Row panels of Q (for G_L = κ(Q, K̄)) and of K (columns of G_U = κ(Q̄, K)) spread over the threads with
  // single-threaded BLAS. PnP-Nystra eq. (8): M_L = diag(exp(max_j φ(Q, K̄)_ij)) is per row, so a G_L panel is
  // finished at once; M_U = diag(exp(max_j φ(Q̄, K)_ij)) needs the maxima over all N columns, so G_U is
  // exponentiated after a reduction. M_U scales the rows of both G_A and G_U, so Ĝ = M_L G_Lⁿ (G_Aⁿ)⁺ G_Uⁿ
  // for a nonsingular G_A.
  // Threads only above detail::parallel_work multiply-adds: a parallel region waits for all its threads, and
  // one that another process keeps off its core costs a scheduler time slice (milliseconds).
  const Index panels = detail::panel_count(n);
  const int workers = detail::workers_for(panels, 2.0 * double(n) * double(m) * double(Q.cols()));
  detail::PanelSchedule exponent_panels(panels, workers), upper_panels(panels, workers);
  const SingleThreadedBlas single_threaded_blas;
  std::exception_ptr core_failure;  // an exception leaves an OpenMP region only through this
#pragma omp parallel num_threads(workers)
  {
    Vector<T> upper_max = Vector<T>::Constant(p, -std::numeric_limits<T>::infinity());
    exponent_panels.for_each([&](Index p) {
      const auto [index, r, b] = detail::panel_of(p, n);
      auto left = f.left.middleRows(r, b);
      auto upper = f.upper.middleCols(r, b);
      detail::kernel_exponent<T>(kernel, Q.middleRows(r, b), f.landmarks.k, left);
      detail::kernel_exponent<T>(kernel, f.landmarks.q, K.middleRows(r, b), upper);
      // Eigen 3.4 vectorizes these row reductions across the columns.
      const Vector<T> left_scale =
          row_max_scaled ? Vector<T>(left.rowwise().maxCoeff()) : Vector<T>::Constant(b, plain_scale);
      if (row_max_scaled) {
        f.left_log_scale.segment(r, b) = left_scale;
        upper_max = upper_max.cwiseMax(upper.rowwise().maxCoeff());
      }
      kernel_from_exponent<T>(left, left_scale, options);
    });
    if (row_max_scaled) {
#pragma omp critical
      f.upper_log_scale = f.upper_log_scale.cwiseMax(upper_max);
    }
#pragma omp barrier
    // The core and its pseudoinverse (serial, an m×m SVD or iteration) on one thread while the others
    // exponentiate G_U's panels (and multiply them by V in generalized_nystrom_attention); the thread joins
    // the panels when it is done.
#pragma omp single nowait
    try {
      kernel_from_exponent<T>(f.core, f.upper_log_scale, options);
      if (!core_after_blocks) f.pinv = core_pseudoinverse<T>(f.core, core_pinv_options(options));
    } catch (...) {
      core_failure = std::current_exception();
    }
    upper_panels.for_each([&](Index p) {
      const detail::Panel panel = detail::panel_of(p, n);
      kernel_from_exponent<T>(f.upper.middleCols(panel.first, panel.rows), f.upper_log_scale, options);
      if (finished_upper_panel) finished_upper_panel(panel);
    });
  }
  if (core_failure) std::rethrow_exception(core_failure);
  if (row_sums) scale_rows_by_sums(f);
  scales_relative_to_shift(f);
  if (options.pinv.method == PinvMethod::oracle_core)
    f.pinv = oracle_core<T>(Q, K, f);
  else if (core_after_blocks)
    f.pinv = core_pseudoinverse<T>(f.core, core_pinv_options(options));
}

/// Throws std::invalid_argument unless the landmarks are square (require_landmarks) and the options define
/// the symmetric form: stabilization none or clamped, a pseudoinverse of W.
template <class T>
void require_symmetric(const Landmarks<T>& landmarks, Index d, const NystromOptions& options) {
  require_landmarks(landmarks, d, "symmetric_nystrom", true);
  require(options.stabilization != Stabilization::row_max && options.stabilization != Stabilization::row_sum,
          "symmetric_nystrom: stabilization ", to_string(options.stabilization),
          " is not defined for the symmetric form C W+ C^T (its row and column scalings differ); use none or "
          "clamped");
  require(options.pinv.method != PinvMethod::oracle_core,
          "symmetric_nystrom: the oracle core is the generalized form's (pnp-nystra)");
}

/// symmetric_nystrom for Q and K of either layout, into f (as generalized_factors).
template <class T, class Tokens>
void symmetric_factors(const Tokens& Q, Landmarks<T> landmarks, const NystromOptions& options,
                       NystromFactors<T>& f) {
  require_symmetric(landmarks, Q.cols(), options);
  // LaplacianFormer Alg. 1: W = κ(Q̄, K̄), C = κ(Q, K̄), Ĝ = C W⁺ Cᵀ.
  f.options = options;
  f.landmarks = std::move(landmarks);
  const Index n = Q.rows(), m = f.landmarks.k.rows();
  const T plain_scale = plain_log_scale<T>(options);
  f.left.resize(n, m);
  f.upper.resize(m, n);
  // C and Cᵀ by row panels of Q over the threads (as G_L of generalized_factors).
  detail::for_each_panel(n, double(n) * double(m) * double(Q.cols()), [&](const detail::Panel& panel) {
    auto left = f.left.middleRows(panel.first, panel.rows);
    detail::kernel_exponent<T>(options.kernel, Q.middleRows(panel.first, panel.rows), f.landmarks.k, left);
    kernel_from_exponent<T>(left, Vector<T>::Constant(panel.rows, plain_scale), options);
    f.upper.middleCols(panel.first, panel.rows) = left.transpose();
  });
  f.core = options.kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  kernel_from_exponent<T>(f.core, Vector<T>::Constant(m, plain_scale), options);
  f.left_log_scale.setZero(n);
  f.upper_log_scale.setZero(m);
  f.pinv = core_pseudoinverse<T>(f.core, core_pinv_options(options));
  scales_relative_to_shift(f);
}

/// True for the computations that can be emulated (docs/mathematics.md §8): float on column-major tokens.
template <class T, class Tokens>
constexpr bool emulable = std::is_same_v<T, float> && !Tokens::IsRowMajor;

/// Throws std::invalid_argument naming `where` when options.storage is emulated: called where the
/// computation is native, for T = double or row-major tokens (the batched entry points).
template <class T>
void require_native_storage(const NystromOptions& options, const char* where) {
  require_storage_for<T>(options.storage, where);
  require(!is_emulated(options.storage), where, ": storage = ", to_string(options.storage),
          " is emulated on column-major tokens (approximate_attention, generalized_nystrom of matrices); the "
          "row-major batched entry points compute in float or double");
}

/// The rounding point of a block from its rounded exponents in emulated storage: R(exp(φ − l)) with the row
/// log-scales l, or the clamped exponential.
void emulated_kernel_from_exponent(detail::Emulation& emulation, Matrix<float>& exponent,
                                   const Vector<float>& log_scale, const NystromOptions& options) {
  if (options.stabilization == Stabilization::clamped)
    detail::rounded_clamped_exp(emulation, exponent, float(options.clamp_threshold));
  else
    detail::rounded_exp(emulation, exponent, log_scale);
}

/// Stabilization::row_sum in emulated storage: σ = R(G_U 1), then R(G_U ⊘ σ) and R(G_A ⊘ σ) with the rows
/// whose σ is not > 0 left as they are (divided by 1), and log σ (in double) added to upper_log_scale.
void emulated_scale_rows_by_sums(detail::Emulation& emulation, NystromFactors<float>& f) {
  Vector<float> sums = detail::rounded_row_sums(emulation, f.upper);
  for (Index i = 0; i < sums.size(); ++i) {
    if (sums(i) > 0)
      f.upper_log_scale(i) += float(std::log(double(sums(i))));
    else
      sums(i) = 1;  // a row of zeros (all of it underflowed) keeps its scale
  }
  detail::rounded_row_division(emulation, f.upper, sums);
  detail::rounded_row_division(emulation, f.core, sums);
}

/// The generalized blocks in emulated storage from rounded Q, K and f.landmarks (docs/mathematics.md §8): the
/// exponents R(φ) of G_L, G_U and G_A, their row maxima l and u (row-max, row-sum), the blocks R(exp(φ_L −
/// l)), R(exp(φ_U − u)), R(exp(φ_A − u)) (with c for plain blocks; the clamped map for clamped), and the row
/// sums of row-sum.
void emulated_generalized_blocks(const Matrix<float>& Q, const Matrix<float>& K, NystromFactors<float>& f,
                                 detail::Emulation& emulation) {
  const NystromOptions& options = f.options;
  const bool row_max_scaled =
      options.stabilization == Stabilization::row_max || options.stabilization == Stabilization::row_sum;
  const Index n = Q.rows(), p = f.landmarks.q.rows();
  const float plain_scale = plain_log_scale<float>(options);
  f.left = detail::rounded_exponents(emulation, options.kernel, Q, f.landmarks.k);
  f.upper = detail::rounded_exponents(emulation, options.kernel, f.landmarks.q, K);
  f.core = detail::rounded_exponents(emulation, options.kernel, f.landmarks.q, f.landmarks.k);
  f.left_log_scale = row_max_scaled ? detail::row_max(f.left) : Vector<float>(Vector<float>::Zero(n));
  f.upper_log_scale =
      row_max_scaled ? detail::row_max(f.upper) : Vector<float>(Vector<float>::Constant(p, plain_scale));
  emulated_kernel_from_exponent(
      emulation, f.left,
      row_max_scaled ? f.left_log_scale : Vector<float>(Vector<float>::Constant(n, plain_scale)), options);
  emulated_kernel_from_exponent(emulation, f.upper, f.upper_log_scale, options);
  emulated_kernel_from_exponent(emulation, f.core, f.upper_log_scale, options);
  if (options.stabilization == Stabilization::row_sum) emulated_scale_rows_by_sums(emulation, f);
}

/// The symmetric blocks in emulated storage from rounded Q and f.landmarks: C = R(exp(R(φ(Q, K̄)) − c)) (or
/// clamped), Cᵀ, W = R(exp(R(φ(Q̄, K̄)) − c)).
void emulated_symmetric_blocks(const Matrix<float>& Q, NystromFactors<float>& f,
                               detail::Emulation& emulation) {
  const NystromOptions& options = f.options;
  const Index n = Q.rows(), m = f.landmarks.k.rows();
  const float plain_scale = plain_log_scale<float>(options);
  f.left = detail::rounded_exponents(emulation, options.kernel, Q, f.landmarks.k);
  emulated_kernel_from_exponent(emulation, f.left, Vector<float>::Constant(n, plain_scale), options);
  f.upper = f.left.transpose();
  f.core = detail::rounded_exponents(emulation, options.kernel, f.landmarks.q, f.landmarks.k);
  emulated_kernel_from_exponent(emulation, f.core, Vector<float>::Constant(m, plain_scale), options);
  f.left_log_scale.setZero(n);
  f.upper_log_scale.setZero(m);
}

/// The generalized (or symmetric) factors in emulated storage (docs/mathematics.md §8): the landmarks chosen
/// from Q and K as given (or `given`), then Q, K and the landmarks rounded, the blocks, and the core's
/// pseudoinverse in the same storage (core_pinv_options).
void emulated_factors(const ConstMatrixRef<float>& Q, const ConstMatrixRef<float>& K,
                      const Landmarks<float>* given, const NystromOptions& options, bool generalized,
                      NystromFactors<float>& f) {
  f.options = options;
  f.landmarks = given ? *given : select_landmarks<float>(Q, K, options.landmarks, options.kernel);
  if (generalized)
    require_landmarks(f.landmarks, Q.cols(), "generalized_nystrom", false);
  else
    require_symmetric(f.landmarks, Q.cols(), options);
  detail::Emulation emulation(options.storage);
  const Matrix<float> q = emulation.stored(Q);
  emulation.store(f.landmarks.q);
  emulation.store(f.landmarks.k);
  if (generalized)
    emulated_generalized_blocks(q, emulation.stored(K), f, emulation);
  else
    emulated_symmetric_blocks(q, f, emulation);
  scales_relative_to_shift(f);
  f.rounding = emulation.counts();
  f.pinv = core_pseudoinverse<float>(f.core, core_pinv_options(options));
}

/// The factors of Q and K of either layout into f, on `given` landmarks or (null) on those options.landmarks
/// selects: emulated_factors in an emulated storage (column-major, T = float), else generalized_factors or
/// symmetric_factors. select_landmarks checks that Q and K are finite (for segment means: only when a mean
/// is not); given landmarks come with finite tokens (require_nystrom_inputs).
template <class T, class Tokens>
void nystrom_factors(const Tokens& Q, const Tokens& K, const Landmarks<T>* given,
                     const NystromOptions& options, bool generalized, NystromFactors<T>& f) {
  const char* where = generalized ? "generalized_nystrom" : "symmetric_nystrom";
  if (given)
    detail::require_nystrom_inputs<T>(Q, K, options, where);
  else
    detail::require_nystrom_shapes(Q, K, options, where);
  if constexpr (emulable<T, Tokens>)
    if (is_emulated(options.storage)) return emulated_factors(Q, K, given, options, generalized, f);
  require_native_storage<T>(options, where);
  Landmarks<T> landmarks = given ? *given : select_landmarks<T>(Q, K, options.landmarks, options.kernel);
  if (generalized)
    generalized_factors<T>(Q, K, std::move(landmarks), options, f);
  else
    symmetric_factors<T>(Q, std::move(landmarks), options, f);
}

}  // namespace

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options) {
  NystromFactors<T> f;
  nystrom_factors<T>(Q, K, nullptr, options, true, f);
  return f;
}

template <class T>
NystromFactors<T> generalized_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                      const NystromOptions& options) {
  NystromFactors<T> f;
  nystrom_factors<T>(Q, K, nullptr, options, true, f);
  return f;
}

template <class T>
void generalized_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                         const NystromOptions& options, NystromFactors<T>& factors) {
  nystrom_factors<T>(Q, K, nullptr, options, true, factors);
}

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options) {
  NystromFactors<T> f;
  nystrom_factors<T>(Q, K, &landmarks, options, true, f);
  return f;
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const NystromOptions& options) {
  NystromFactors<T> f;
  nystrom_factors<T>(Q, K, nullptr, options, false, f);
  return f;
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                    const NystromOptions& options) {
  NystromFactors<T> f;
  nystrom_factors<T>(Q, K, nullptr, options, false, f);
  return f;
}

template <class T>
void symmetric_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                       const NystromOptions& options, NystromFactors<T>& factors) {
  nystrom_factors<T>(Q, K, nullptr, options, false, factors);
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const Landmarks<T>& landmarks, const NystromOptions& options) {
  NystromFactors<T> f;
  nystrom_factors<T>(Q, K, &landmarks, options, false, f);
  return f;
}

template <class T>
void NystromFactors<T>::apply(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, cols());
  Eigen::Map<Vector<T>> out(y, rows());
  const Vector<T> core_side = pinv.z * (upper * in);
  out.noalias() = left * core_side;
  out.array() *= left_log_scale.array().exp();
}

template <class T>
void NystromFactors<T>::apply_transpose(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, rows());
  Eigen::Map<Vector<T>> out(y, cols());
  const Vector<T> scaled = in.array() * left_log_scale.array().exp();
  const Vector<T> core_side = pinv.z.transpose() * (left.transpose() * scaled);
  out.noalias() = upper.transpose() * core_side;
}

template <class T>
Matrix<T> NystromFactors<T>::dense() const {
  const Matrix<T> right = pinv.z * upper;
  Matrix<T> out = left * right;
  out.array().colwise() *= left_log_scale.array().exp();
  return out;
}

namespace {

/// [G_U V, G_U 1] (m×(dv+1)) of one panel of keys into `term`: the first step of Algorithm 1 (algorithm1).
template <class T, class Values>
void upper_values_term(const NystromFactors<T>& factors, const Values& V, const detail::Panel& panel,
                       MatrixRef<T> term) {
  const Index dv = V.cols();
  const auto upper = factors.upper.middleCols(panel.first, panel.rows);
  const auto [op_v, values] = detail::blas_operand(detail::Op::plain, V.middleRows(panel.first, panel.rows));
  detail::gemm<T>(detail::Op::plain, op_v, T(1), upper, values, T(0), term.leftCols(dv));
  term.col(dv).noalias() = upper * Vector<T>::Ones(panel.rows);  // G_U 1 as a GEMV
}

/// Algorithm 1 after its sum over the keys, from [G_U V, G_U 1] (algorithm1) into `out`.
template <class T, class Values, class Output>
void algorithm1_from_upper_values(const NystromFactors<T>& factors, const Values& V,
                                  const Matrix<T>& upper_values, Output& out) {
  const Index n = factors.rows(), m = factors.upper.rows(), dv = V.cols();
  if (!all_finite(upper_values)) require_finite(V, "nystrom_attention: V");
  const Matrix<T> weights = factors.pinv.z * upper_values;  // W = Z [G_U V, G_U 1]
  const T denominator_shift = factors.options.stabilization == Stabilization::clamped ? T(1e-12) : T(0);
  const Matrix<T> values_weights =
      Output::IsRowMajor ? Matrix<T>(weights.leftCols(dv).transpose()) : Matrix<T>();
  // A panel of b queries: its denominators Ĝ1 = G_L W_1 (a GEMV), its rows of G_L divided by them, then
  // Ô = (D⁻¹G_L) W_V as one GEMM straight into Ô's rows: Ô is written once, by BLAS, with no N×dv
  // intermediate and no division pass over it. A row-major Ô is written as its transpose (Ô's rows read as
  // columns) = W_Vᵀ (D⁻¹G_L)ᵀ with both factors formed transposed (W_Vᵀ once, (D⁻¹G_L)ᵀ per panel), so that
  // both enter the GEMM plain (OpenBLAS's small-matrix kernel for two transposed operands took twice as
  // long).
  detail::for_each_panel(n, double(n) * double(m) * double(dv + 1), [&](const detail::Panel& panel) {
    const auto left = factors.left.middleRows(panel.first, panel.rows);
    const Vector<T> inverse = (T(1) / ((left * weights.col(dv)).array() + denominator_shift)).matrix();
    if constexpr (Output::IsRowMajor) {
      const Matrix<T> scaled = (left.array().colwise() * inverse.array()).matrix().transpose();
      auto rows = out.middleRows(panel.first, panel.rows).transpose();
      detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), values_weights, scaled, T(0), rows);
    } else {
      const Matrix<T> scaled = left.array().colwise() * inverse.array();
      auto rows = out.middleRows(panel.first, panel.rows);
      detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), scaled, weights.leftCols(dv), T(0), rows);
    }
  });
}

/// PnP-Nystra Algorithm 1 (nystrom_attention) into `out`, V and `out` column-major or row-major.
template <class T, class Values, class Output>
void algorithm1(const NystromFactors<T>& factors, const Values& V, Output& out) {
  // PnP-Nystra Algorithm 1 with the products reassociated: [G_U V, G_U 1] (m×(dv+1), summed over the panels
  // of keys in order), W = Z [G_U V, G_U 1] (m×(dv+1)), then one row panel at a time the denominators
  // Ĝ1 = G_L W_1 and Ô = diag(1/Ĝ1) G_L W_V. Never N×N, and the N×m P = G_L Z of the paper is never formed.
  // The row scale M_L cancels in the ratio, so it is never applied. A NaN or ±∞ in V reaches G_U V (the
  // entries of G_U are finite and ≥ 0, and ∞·0 is NaN), so V is scanned only when [G_U V, G_U 1] is not
  // finite: then either V is bad (throws) or the finite sums overflowed (a numerical outcome). The scan cost
  // 3% of the whole at N = 4096.
  const Index keys = factors.cols(), m = factors.upper.rows(), dv = V.cols();
  const Matrix<T> upper_values = detail::sum_over_panels<T>(
      keys, m, dv + 1, double(m) * double(keys) * double(dv + 1),
      [&](const detail::Panel& panel, MatrixRef<T> term) { upper_values_term(factors, V, panel, term); });
  algorithm1_from_upper_values(factors, V, upper_values, out);
}

/// PnP-Nystra Algorithm 1 in emulated storage (docs/mathematics.md §8), each product a rounding point:
/// Ṽ = R(V), W = R(Z R(G_U Ṽ)), w = R(Z R(G_U 1)), ĝ = R(G_L w), Ô = R(R(G_L W) ⊘ (ĝ + δ)) with δ = 1e-12 for
/// the clamped variant (0 otherwise); the counts added to `rounding`.
Matrix<float> emulated_algorithm1(const NystromFactors<float>& f, const ConstMatrixRef<float>& V,
                                  RoundingCounts& rounding) {
  using detail::rounded_product;
  require_finite(V, "nystrom_attention: V");
  detail::Emulation emulation(f.options.storage);
  const Matrix<float> values = emulation.stored(V);
  const Matrix<float> weights =
      rounded_product(emulation, f.pinv.z, rounded_product(emulation, f.upper, values));
  const Matrix<float> weight_sums =
      rounded_product(emulation, f.pinv.z, detail::rounded_row_sums(emulation, f.upper));
  const Matrix<float> denominators = rounded_product(emulation, f.left, weight_sums);
  Matrix<float> out = rounded_product(emulation, f.left, weights);
  detail::rounded_row_division(emulation, out, denominators.col(0),
                               f.options.stabilization == Stabilization::clamped ? 1e-12f : 0.0f);
  rounding += emulation.counts();
  return out;
}

void require_values(Index rows, Index n) {
  require(rows == n, "nystrom_attention: V has ", rows, " rows, expected N = ", n);
}

void require_output(Index rows, Index cols, Index n, Index dv) {
  require(rows == n && cols == dv, "nystrom_attention: out is ", rows, "x", cols, ", expected ", n, "x", dv);
}

/// generalized_nystrom_attention for Q, K, V and Ô of either layout: the factors into f, then each panel of
/// G_U times its rows of V (Algorithm 1's first step) as soon as the panel is exponentiated, the rest of
/// Algorithm 1 after the factors.
template <class T, class Tokens, class Values, class Output>
void generalized_attention(const Tokens& Q, const Tokens& K, const Values& V, const NystromOptions& options,
                           NystromFactors<T>& f, Output& out) {
  detail::require_nystrom_shapes(Q, K, options, "generalized_nystrom");
  require_values(V.rows(), K.rows());
  require_output(out.rows(), out.cols(), Q.rows(), V.cols());
  if constexpr (emulable<T, Tokens>) {
    if (is_emulated(options.storage)) {
      nystrom_factors<T>(Q, K, nullptr, options, true, f);
      out = nystrom_attention<T>(f, V);
      return;
    }
  }
  require_native_storage<T>(options, "generalized_nystrom_attention");
  if (options.stabilization == Stabilization::row_sum) {
    // Row-sum scaling divides G_U's rows by their sums after its last panel (scale_rows_by_sums): the panels'
    // [G_U V, G_U 1] would miss it, so Algorithm 1 runs on the finished factors.
    nystrom_factors<T>(Q, K, nullptr, options, true, f);
    algorithm1<T>(f, V, out);
    return;
  }
  Landmarks<T> landmarks = select_landmarks<T>(Q, K, options.landmarks, options.kernel);
  detail::PanelTerms<T> upper_values(K.rows(), landmarks.q.rows(), V.cols() + 1);
  generalized_factors<T>(Q, K, std::move(landmarks), options, f, [&](const detail::Panel& panel) {
    upper_values_term(f, V, panel, MatrixRef<T>(upper_values.term(panel)));
  });
  algorithm1_from_upper_values(f, V, upper_values.sum(), out);
}

}  // namespace

template <class T>
Matrix<T> nystrom_attention(const NystromFactors<T>& factors, const ConstMatrixRef<T>& V,
                            RoundingCounts& rounding) {
  require_values(V.rows(), factors.cols());
  if constexpr (std::is_same_v<T, float>)
    if (is_emulated(factors.options.storage)) return emulated_algorithm1(factors, V, rounding);
  require_storage_for<T>(factors.options.storage, "nystrom_attention");
  Matrix<T> out(factors.rows(), V.cols());
  algorithm1<T>(factors, V, out);
  return out;
}

template <class T>
Matrix<T> nystrom_attention(const NystromFactors<T>& factors, const ConstMatrixRef<T>& V) {
  RoundingCounts rounding;
  return nystrom_attention<T>(factors, V, rounding);
}

template <class T>
void nystrom_attention(const NystromFactors<T>& factors, const ConstRowMajorRef<T>& V, RowMajorRef<T> out) {
  require_native_storage<T>(factors.options, "nystrom_attention");
  require_values(V.rows(), factors.cols());
  require_output(out.rows(), out.cols(), factors.rows(), V.cols());
  algorithm1<T>(factors, V, out);
}

template <class T>
Matrix<T> generalized_nystrom_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                        const ConstMatrixRef<T>& V, const NystromOptions& options,
                                        NystromFactors<T>& factors) {
  Matrix<T> out(Q.rows(), V.cols());
  generalized_attention<T>(Q, K, V, options, factors, out);
  return out;
}

template <class T>
void generalized_nystrom_attention(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                   const ConstRowMajorRef<T>& V, const NystromOptions& options,
                                   NystromFactors<T>& factors, RowMajorRef<T> out) {
  generalized_attention<T>(Q, K, V, options, factors, out);
}

#define NYSTROM_INSTANTIATE(T)                                                                              \
  template struct NystromFactors<T>;                                                                        \
  template NystromFactors<T> generalized_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,     \
                                                    const NystromOptions&);                                 \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,       \
                                                  const NystromOptions&);                                   \
  template NystromFactors<T> generalized_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,     \
                                                    const Landmarks<T>&, const NystromOptions&);            \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,       \
                                                  const Landmarks<T>&, const NystromOptions&);              \
  template NystromFactors<T> generalized_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&, \
                                                    const NystromOptions&);                                 \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,   \
                                                  const NystromOptions&);                                   \
  template void generalized_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,              \
                                       const NystromOptions&, NystromFactors<T>&);                          \
  template void symmetric_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,                \
                                     const NystromOptions&, NystromFactors<T>&);                            \
  template Matrix<T> nystrom_attention<T>(const NystromFactors<T>&, const ConstMatrixRef<T>&);              \
  template Matrix<T> nystrom_attention<T>(const NystromFactors<T>&, const ConstMatrixRef<T>&,               \
                                          RoundingCounts&);                                                 \
  template void nystrom_attention<T>(const NystromFactors<T>&, const ConstRowMajorRef<T>&, RowMajorRef<T>); \
  template Matrix<T> generalized_nystrom_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,   \
                                                      const ConstMatrixRef<T>&, const NystromOptions&,      \
                                                      NystromFactors<T>&);                                  \
  template void generalized_nystrom_attention<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,    \
                                                 const ConstRowMajorRef<T>&, const NystromOptions&,         \
                                                 NystromFactors<T>&, RowMajorRef<T>);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
