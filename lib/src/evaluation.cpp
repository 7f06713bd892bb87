#include "nystrom/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>

#include "matrix_errors.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/bounds.hpp"
#include "nystrom/error.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/softmax.hpp"
#include "wall_clock.hpp"

namespace nystrom {

void EvaluationOptions::validate() const {
  require(std::isfinite(memory_budget) && memory_budget > 0, "evaluation: memory_budget = ", memory_budget,
          " bytes must be finite and > 0");
  require(panel_rows >= 1, "evaluation: panel_rows = ", panel_rows, " must be >= 1");
  require(dense_svd_limit >= 0, "evaluation: dense_svd_limit = ", dense_svd_limit, " must be >= 0");
  spectral.validate();
  certificate.validate();
  require_device(device);
}

bool EvaluationOptions::uses_matrix_free(Index n, std::size_t scalar_bytes) const {
  const double tokens = static_cast<double>(n);
  return matrix_free || 3.0 * tokens * tokens * double(scalar_bytes) > memory_budget;
}

namespace {

using detail::Clock;
using detail::seconds_since;

/// `a` in double: moved when it is double already, else converted.
template <class T>
Matrix<double> in_double(Matrix<T>&& a) {
  if constexpr (std::is_same_v<T, double>)
    return std::move(a);
  else
    return a.template cast<double>();
}

/// An exact text of a double for cache keys.
std::string exact(double value) {
  std::array<char, 32> text{};
  std::snprintf(text.data(), text.size(), "%a", value);
  return text.data();
}

/// The cache key of a kernel: type, parameter and log-shift, exactly.
std::string kernel_key(const Kernel& kernel) {
  return describe(to_string(kernel.type), "/", exact(kernel.param), "/", exact(kernel.log_shift));
}

/// The cache key of landmark options: every field that selects the landmarks, and the kernel where the
/// strategy evaluates it.
std::string landmark_key(const LandmarkOptions& o, const Kernel& kernel) {
  std::string key = describe(to_string(o.strategy), "/", o.count, "/", o.oversampling, "/", o.seed, "/",
                             o.different_indices, "/", o.window[0], "x", o.window[1], "/",
                             to_string(o.window_grid), "/", o.prefix_tokens, "/", o.embed_column, "/",
                             o.kmeans_iterations, "/", uses_kernel(o.strategy) ? kernel.label() : "");
  for (const auto* indices : {&o.forced, &o.q_indices, &o.k_indices}) {
    key += "/";
    for (Index i : *indices) key += describe(i, ",");
  }
  return key;
}

/// Runs `main_task` and `terms_task` (landmark_terms for n tokens and m landmarks) beside each other when
/// overlap_landmark_terms says so (run_concurrently), else the terms first.
template <class T>
void run_with_landmark_terms(Index n, Index m, const EvaluationOptions& options,
                             const std::function<void()>& main_task,
                             const std::function<void()>& terms_task) {
  if (overlap_landmark_terms<T>(n, m, options)) {
    run_concurrently(main_task, terms_task);
  } else {
    terms_task();
    main_task();
  }
}

/// The output columns of `approximate` against the exact output.
template <class T>
void set_output_columns(const Matrix<T>& exact, const Matrix<T>& approximate, PointResult& point) {
  const OutputErrors errors = output_errors<T>(exact, approximate);
  point.output_relative_error = errors.relative_frobenius;
  point.output_max_error = errors.max_abs;
  point.output_mean_abs_error = errors.mean_abs;
  point.nonfinite_output_rows = (!approximate.array().isFinite()).rowwise().any().count();
}

/// Whether a pnp-nystra point's Ĝ is the G_L G_A⁺ G_U of PnP-Nystra Lemma 2.1 for the G̃ of its landmark
/// terms: the exact pseudoinverse with its default cut and no regularization, the kernel's own blocks (not
/// the clamped exponential), native storage (float32, float64), and no model score terms on the exact side.
template <class T>
bool lemma_approximation(const NystromOptions& options, const Head<T>& head) {
  const PinvOptions& pinv = options.pinv;
  return pinv.method == PinvMethod::exact && pinv.tolerance == 0 && pinv.tikhonov == 0 && pinv.shift == 0 &&
         !is_emulated(options.storage) && options.stabilization != Stabilization::clamped &&
         head.bias.size() == 0;
}

/// Completes a pnp-nystra point (its errors still of κ_c) with its landmark terms: σ₁(G̃), σ_{m+1}(G̃),
/// σ_m(G_A), K, the theorem bounds and c_emp; bounds_hold within `slack` (bounds.hpp, bound_slack) where the
/// point's Ĝ is the lemma's (`lemma`), else 1: the lemma states nothing about it.
void apply_landmark_terms(const LandmarkTerms& terms, double slack, bool lemma, PointResult& point) {
  point.sigma1_ext = terms.sigma1_ext;
  point.sigma_m1_ext = terms.sigma_m1_ext;
  point.sigma_m1_margin = terms.sigma_m1_margin;
  point.sigma_m_core = terms.sigma_m_core;
  point.theorem3_k = terms.theorem3_k;
  point.landmark_terms_converged = terms.converged;
  if (std::isnan(point.spectral_error)) return;  // no finite approximation to bound
  const BoundReport bounds = evaluate_bounds({terms.sigma1_ext, terms.sigma_m1_ext, terms.sigma_m_core,
                                              point.spectral_error, terms.theorem3_k, terms.sigma_m1_margin});
  point.bound_ratio = bounds.ratio;
  point.theorem1_bound = bounds.theorem1;
  point.theorem2_bound = bounds.theorem2;
  point.theorem3_bound = bounds.theorem3;
  point.c_emp = bounds.c_emp;
  point.c_emp_normalized = bounds.c_emp_normalized;
  point.bounds_hold = !lemma || bounds.holds(slack);
}

/// Multiplies the absolute kernel quantities of a point of κ_c back to κ: every σ, norm and bound by e^{c}
/// (theorem 1, 2 and 3 and C_emp are of degree 1 in the scale, C_emp/σ₁² of degree −1; the ratio, K and the
/// relative errors of degree 0).
void scale_to_kernel(PointResult& point, double log_shift) {
  if (log_shift == 0) return;
  const double scale = std::exp(log_shift);
  for (double* value : {&point.spectral_error, &point.frobenius_error, &point.sigma1_ext, &point.sigma_m1_ext,
                        &point.sigma_m1_margin, &point.sigma_m_core, &point.theorem1_bound,
                        &point.theorem2_bound, &point.theorem3_bound, &point.c_emp, &point.optimal_error,
                        &point.optimal_error_lower, &point.spectral_error_lower, &point.spectral_error_upper})
    *value *= scale;
  point.c_emp_normalized /= scale;
}

/// The norms and the certificate of a point's error matrix.
void set_errors(const detail::MatrixErrors& errors, PointResult& point) {
  point.spectral_error = errors.spectral;
  point.frobenius_error = errors.frobenius;
  point.spectral_error_lower = errors.spectral_lower;
  point.spectral_error_upper = errors.spectral_upper;
  point.spectral_error_upper_failure = errors.failure;
}

/// check(), an std::invalid_argument it throws prefixed with `where` and the kernel.
template <class Check>
auto naming_kernel(const std::string& where, const Kernel& kernel, const Check& check) {
  try {
    return check();
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(describe(where, ": ", kernel, ": ", error.what()));
  }
}

}  // namespace

template <class T>
double head_log_shift(const Head<T>& head, const Kernel& kernel, const std::string& where) {
  return naming_kernel(where, kernel, [&] {
    if (head.bias.size() == 0) return kernel_log_shift<T>(kernel, head.q, head.k);
    // The approximations see the logits without the bias: c covers both.
    const double biased = double(head_exponent(head, kernel).maxCoeff());
    require(biased <= double_exponent_limit, "the largest exponent with the bias, ", biased,
            ", overflows exp in double (above ", double_exponent_limit, ")");
    const double unbiased =
        kernel.type == KernelType::exponential ? largest_exponent<T>(kernel, head.q, head.k) : biased;
    return log_shift_for<T>(kernel, std::max(unbiased, biased));
  });
}

template <class T>
void require_representable_kernel(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                                  const Kernel& kernel, const std::string& where) {
  kernel.validate();
  require(q.rows() > 0 && k.rows() > 0, where, ": empty tokens, q is ", q.rows(), "x", q.cols(), " and k is ",
          k.rows(), "x", k.cols());
  if (kernel.type != KernelType::exponential) return;
  const double bound = std::abs(kernel.param) * std::sqrt(double(q.rowwise().squaredNorm().maxCoeff()) *
                                                          double(k.rowwise().squaredNorm().maxCoeff()));
  if (bound > double_exponent_limit) naming_kernel(where, kernel, [&] { kernel_log_shift<T>(kernel, q, k); });
}

template <class T>
void require_representable_kernel(const Head<T>& head, const Kernel& kernel, const std::string& where) {
  if (head.bias.size() == 0) return require_representable_kernel<T>(head.q, head.k, kernel, where);
  kernel.validate();
  head_log_shift(head, kernel, where);
}

template <class T>
Matrix<T> head_exponent(const Head<T>& head, const Kernel& kernel) {
  Matrix<T> exponent = kernel.exponent_block<T>(head.q, head.k);
  if (head.bias.size() > 0) exponent += head.bias;
  return exponent;
}

template <class T>
Matrix<T> head_kernel_matrix(const Head<T>& head, const Kernel& shifted) {
  if (head.bias.size() == 0) return shifted.block<T>(head.q, head.k);
  Matrix<T> g = head_exponent(head, shifted);
  g.array() -= T(shifted.log_shift);
  return g.array().exp().matrix();
}

template <class T>
Matrix<T> head_attention_matrix(const Head<T>& head, const Kernel& kernel) {
  if (head.bias.size() == 0) return attention_matrix<T>(head.q, head.k, kernel.shifted(0));
  Matrix<T> s = head_exponent(head, kernel);
  softmax_rows<T>(s);
  return s;
}

template <class T>
Matrix<T> head_extended_matrix(const Head<T>& head, const Kernel& shifted, const ExtendedTokens<T>& tokens) {
  if (head.bias.size() == 0) return shifted.block<T>(tokens.queries, tokens.keys);
  // The landmark rows and columns of κ_c, the N×N block from the bias as well (computed once).
  const Index n = head.tokens(), m = tokens.queries.rows() - n;
  Matrix<T> extended(m + n, m + n);
  extended.topRows(m) = shifted.block<T>(tokens.queries.topRows(m), tokens.keys);
  extended.bottomLeftCorner(n, m) = shifted.block<T>(tokens.queries.bottomRows(n), tokens.keys.topRows(m));
  extended.bottomRightCorner(n, n) = head_kernel_matrix(head, shifted);
  return extended;
}

LandmarkOptions on_token_grid(LandmarkOptions landmarks, const std::array<Index, 2>& window,
                              Index prefix_tokens) {
  if (landmarks.window[0] * landmarks.window[1] != 0) return landmarks;
  landmarks.window = window;
  landmarks.prefix_tokens = prefix_tokens;
  return landmarks;
}

ApproximationOptions on_token_grid(ApproximationOptions options, const std::array<Index, 2>& window,
                                   Index prefix_tokens) {
  for (LandmarkOptions* landmarks :
       {&options.pnp_nystra.landmarks, &options.symmetric_nystrom.landmarks, &options.cur.selection})
    *landmarks = on_token_grid(*landmarks, window, prefix_tokens);
  return options;
}

namespace {

/// landmark_terms of a head, kernel and options already validated (HeadEvaluator validates its head once:
/// with a bias, that is a scan of N² values).
template <class T>
LandmarkTerms terms_of_valid_head(const Head<T>& head, const Kernel& kernel, const Landmarks<T>& marks,
                                  const EvaluationOptions& options) {
  const Index m = marks.q.rows(), n = head.q.rows();
  require(m >= 1 && marks.k.rows() == m && marks.q.cols() == head.q.cols() && marks.k.cols() == head.q.cols(),
          "landmark_terms: landmarks are ", marks.q.rows(), "x", marks.q.cols(), " and ", marks.k.rows(), "x",
          marks.k.cols(), ", expected m x d with d = ", head.q.cols());
  // Unstabilized blocks of G̃ = [[G_A, G_U], [G_L, G]] of the kernel as given (docs/mathematics.md §2, §3):
  // the bounds are stated for the kernel itself, not for a row-scaled one.
  const Matrix<T> core = kernel.block<T>(marks.q, marks.k);
  const Matrix<T> upper = kernel.block<T>(marks.q, head.k);
  const Matrix<T> left = kernel.block<T>(head.q, marks.k);
  LandmarkTerms terms;
  const CoreTerms core_part = core_terms<T>(left, core, upper);
  terms.sigma_m_core = core_part.sigma_m_core;
  terms.theorem3_k = core_part.theorem3_k;
  // σ₁(G̃) and σ_{m+1}(G̃) by Lanczos on G̃ᵀG̃ (stored in double, or matrix-free), with a full SVD below the
  // dense limit. A stored G̃ keeps the Lanczos σ_{m+1} when its certificate (SpectralResult::last_error_bound)
  // is within 1e-10 relative or at the floor a full SVD has too, (n + m)·eps·σ₁; otherwise it goes to the
  // full SVD. The matrix-free path keeps the Gram form and its documented accuracy.
  const ExtendedTokens<T> tokens = extended_tokens<T>(head.q, head.k, marks);
  SpectralResult top;
  const auto full_svd = [&](const Matrix<double>& extended) {
    top.values = singular_values<double>(extended).head(m + 1);
    top.converged = true;
    top.last_error_bound = 0;
  };
  if (matrix_free_head(head, options) && n + m > options.dense_svd_limit) {
    top = top_singular_values(
        kernel_operator<T, double>(options.device, tokens.queries, tokens.keys, kernel, options.tiling()),
        m + 1, options.spectral);
  } else {
    const Matrix<double> extended = in_double<T>(head_extended_matrix(head, kernel, tokens));
    if (n + m <= options.dense_svd_limit) {
      full_svd(extended);
    } else {
      top = top_singular_values(DenseOperator<double>(extended), m + 1, options.spectral);
      const double svd_floor = rounding_factor<double>(n, m) * top.values(0);
      if (!(top.converged && top.last_error_bound <= std::max(1e-10 * top.values(m), svd_floor)))
        full_svd(extended);
    }
  }
  terms.sigma1_ext = top.values(0);
  terms.sigma_m1_ext = top.values(m);
  terms.sigma_m1_margin = sigma_m1_margin<T>(n, m, terms.sigma1_ext, top.last_error_bound);
  terms.converged = top.converged;
  return terms;
}

}  // namespace

template <class T>
LandmarkTerms landmark_terms(const Head<T>& head, const Kernel& kernel, const Landmarks<T>& marks,
                             const EvaluationOptions& options) {
  head.validate("landmark_terms");
  kernel.validate();
  options.validate();
  return terms_of_valid_head(head, kernel, marks, options);
}

template <class T>
HeadEvaluator<T>::HeadEvaluator(Head<T> head, const EvaluationOptions& options, std::string where)
    : head_(std::move(head)), options_(options), where_(std::move(where)) {
  head_.validate(where_);
  options_.validate();
}

template <class T>
double HeadEvaluator<T>::log_shift(const Kernel& kernel) {
  kernel.validate();
  const std::string key = kernel_key(kernel.shifted(0));
  if (const auto found = shifts_.find(key); found != shifts_.end()) return found->second;
  return shifts_[key] = head_log_shift(head_, kernel, where_);
}

template <class T>
const HeadReference<T>& HeadEvaluator<T>::reference(const Kernel& kernel) {
  return shifted_reference(kernel.shifted(log_shift(kernel)));
}

template <class T>
const HeadReference<T>& HeadEvaluator<T>::shifted_reference(const Kernel& shifted) {
  if (reference_ && kernel_key(reference_->kernel) == kernel_key(shifted)) return *reference_;
  const auto start = Clock::now();
  reference_.reset();
  HeadReference<T> reference;
  reference.kernel = shifted;
  reference.matrix_free = matrix_free_head(head_, options_);
  if (reference.matrix_free) {
    reference.g_norm2 = spectral_norm(kernel_operator<T, double>(options_.device, head_.q, head_.k, shifted,
                                                                 options_.tiling()),
                                      options_.spectral)
                            .values(0);
  } else {
    reference.g = head_kernel_matrix(head_, shifted);
    reference.g_norm2 = detail::stored_norm(reference.g, options_);
  }
  // O does not depend on the log-shift; the unshifted kernel keeps it the computation a user runs. With a
  // bias, O = S V from the stored S on the host.
  if (head_.v.size() > 0 && head_.bias.size() > 0)
    reference.output = head_attention_matrix(head_, shifted) * head_.v;
  else if (head_.v.size() > 0)
    reference.output = exact_attention<T>(options_.device, head_.q, head_.k, head_.v, shifted.shifted(0));
  reference.seconds = seconds_since(start);
  reference_ = std::move(reference);
  return *reference_;
}

template <class T>
const typename HeadReference<T>::Attention& HeadEvaluator<T>::attention_reference(const Kernel& shifted) {
  shifted_reference(shifted);
  HeadReference<T>& reference = *reference_;
  if (reference.attention) return *reference.attention;
  const auto start = Clock::now();
  typename HeadReference<T>::Attention attention;
  if (reference.matrix_free) {
    const AnyOperator<double> g =
        kernel_operator<T, double>(options_.device, head_.q, head_.k, shifted, options_.tiling());
    attention.row_sums.resize(g.rows());
    const Vector<double> ones = Vector<double>::Ones(g.cols());
    g.perform_op(ones.data(), attention.row_sums.data());
    attention.norm2 =
        spectral_norm(RowScaledOperator<AnyOperator<double>>(g, attention.row_sums.cwiseInverse()),
                      options_.spectral)
            .values(0);
  } else {
    attention.s = head_attention_matrix(head_, shifted);
    attention.norm2 = detail::stored_norm(attention.s, options_);
  }
  reference.seconds += seconds_since(start);
  reference.attention = std::move(attention);
  return *reference.attention;
}

template <class T>
std::pair<double, double> HeadEvaluator<T>::floor_of(ErrorMatrix matrix, Index rank, const Kernel& shifted) {
  const Index n = head_.tokens();
  if (rank >= n) return {0.0, 0.0};
  const bool kernel = matrix == ErrorMatrix::kernel;
  HeadReference<T>& reference = *reference_;
  if (!kernel) attention_reference(shifted);
  std::map<Index, SpectralResult>& spectra = kernel ? reference.g_spectra : reference.attention->spectra;
  const bool full = !reference.matrix_free && n <= full_spectrum_limit;
  const Index count = full ? n : rank + 1;
  auto found = spectra.find(count);
  if (found == spectra.end()) {
    SpectralResult computed;
    if (full) {
      computed.values = singular_values<T>(kernel ? reference.g : reference.attention->s);
      computed.converged = true;
    } else if (!reference.matrix_free) {
      computed = top_singular_values(DenseOperator<T>(kernel ? reference.g : reference.attention->s), count,
                                     options_.spectral);
    } else {
      const AnyOperator<double> g =
          kernel_operator<T, double>(options_.device, head_.q, head_.k, shifted, options_.tiling());
      computed = kernel ? top_singular_values(g, count, options_.spectral)
                        : top_singular_values(RowScaledOperator<AnyOperator<double>>(
                                                  g, reference.attention->row_sums.cwiseInverse()),
                                              count, options_.spectral);
    }
    found = spectra.emplace(count, std::move(computed)).first;
  }
  const SpectralResult& spectrum = found->second;
  const double floor = spectrum.values(rank);
  return {floor,
          singular_value_lower_bound(floor, spectrum.values(0), 2 * n, std::numeric_limits<T>::epsilon())};
}

template <class T>
typename HeadEvaluator<T>::LandmarkSet& HeadEvaluator<T>::landmark_set(const LandmarkOptions& options,
                                                                       const Kernel& kernel, bool& selected) {
  const std::string key = landmark_key(options, kernel);
  auto found = landmark_sets_.find(key);
  selected = found == landmark_sets_.end();
  if (selected)
    found =
        landmark_sets_.emplace(key, LandmarkSet{select_landmarks<T>(head_.q, head_.k, options, kernel), {}})
            .first;
  return found->second;
}

template <class T>
const NystromFactors<T>& HeadEvaluator<T>::nystrom_factors(bool generalized, const Landmarks<T>& landmarks,
                                                           const NystromOptions& nystrom, double& seconds) {
  LastFactors& last = last_factors_;
  const auto start = Clock::now();
  // On the GPU the pseudoinverse is part of the device's computation: nothing is reused there.
  const std::string key =
      options_.device != Device::cpu
          ? std::string()
          : describe(generalized, "|", landmark_key(nystrom.landmarks, nystrom.kernel), "|",
                     kernel_key(nystrom.kernel), "|", to_string(nystrom.stabilization), "|",
                     exact(nystrom.clamp_threshold), "|", to_string(nystrom.storage));
  // The oracle core is not a pseudoinverse of the stored core: its factors are computed whole.
  if (key.empty() || key != last.key || nystrom.pinv.method == PinvMethod::oracle_core) {
    last = {};  // the old blocks freed before the new ones are made (N×m each; large on matrix-free heads)
    last.factors = generalized ? generalized_nystrom<T>(options_.device, head_.q, head_.k, landmarks, nystrom)
                               : symmetric_nystrom<T>(head_.q, head_.k, landmarks, nystrom);
    last.key = key;
    seconds = seconds_since(start);
    last.blocks_seconds = std::max(0.0, seconds - last.factors.pinv.seconds);
    return last.factors;
  }
  last.factors.options = nystrom;
  last.factors.pinv = core_pseudoinverse<T>(last.factors.core, core_pinv_options(nystrom), last.iteration);
  seconds = last.blocks_seconds + last.factors.pinv.seconds;
  return last.factors;
}

template <class T>
PointResult HeadEvaluator<T>::evaluate(Method method, const ApproximationOptions& given) {
  const auto start = Clock::now();
  const ApproximationOptions options = on_token_grid(given, head_.window, head_.prefix_tokens);
  options.validate_in<T>(method, head_.tokens(), head_.q.cols());
  const Kernel shifted = options.kernel.shifted(log_shift(options.kernel));
  PointResult point;
  switch (error_matrix(method)) {
    case ErrorMatrix::kernel:
      point = kernel_point(method, options, shifted);
      break;
    case ErrorMatrix::attention:
      point = attention_point(method, options, shifted);
      break;
    case ErrorMatrix::none:
      point = exact_point(options, shifted);
      break;
  }
  point.error_matrix = error_matrix(method);
  point.log_shift = shifted.log_shift;
  point.elapsed_seconds = seconds_since(start);
  return point;
}

template <class T>
PointResult HeadEvaluator<T>::kernel_point(Method method, const ApproximationOptions& options,
                                           const Kernel& shifted) {
  const bool generalized = method == Method::pnp_nystra;
  NystromOptions nystrom = generalized ? options.pnp_nystra : options.symmetric_nystrom;
  nystrom.kernel = shifted;
  nystrom.storage = options.storage;
  const auto start = Clock::now();
  bool selected = false;
  LandmarkSet& set = landmark_set(nystrom.landmarks, shifted, selected);
  const double selection_seconds = selected ? seconds_since(start) : 0.0;
  const std::string terms_key = kernel_key(shifted);
  PointResult point;
  const auto measure = [&] {
    const HeadReference<T>& reference = shifted_reference(shifted);
    double factors_seconds = 0;
    const NystromFactors<T>& factors = nystrom_factors(generalized, set.landmarks, nystrom, factors_seconds);
    const auto point_start = Clock::now();
    // ‖G − Ĝ‖₂ for the true Ĝ (row scales M_L included), docs/mathematics.md §7, of κ_c.
    detail::MatrixErrors errors;
    if (!detail::finite_factors(factors))
      errors = {};
    else if (reference.matrix_free)
      errors = detail::unless_overflowing(
          [&] { return detail::matrix_free_kernel_errors(head_, factors, options_); });
    else
      errors = detail::stored_errors<T>(reference.g - factors.dense(), options_);
    set_errors(errors, point);
    point.relative_spectral_error = errors.spectral / reference.g_norm2;
    const Index rank = factors.left.cols();
    std::tie(point.optimal_error, point.optimal_error_lower) = floor_of(ErrorMatrix::kernel, rank, shifted);
    point.relative_optimal_error = point.optimal_error / reference.g_norm2;
    set_attention_errors(point, implied_attention(factors), rank, shifted);
    point.selection_entries = set.landmarks.entries;
    // PnP-Nystra Algorithm 1 on the same factors (on either device).
    if (head_.v.size() > 0) {
      RoundingCounts output_rounding;
      set_output_errors(nystrom.storage, shifted, nystrom_attention<T>(factors, head_.v, output_rounding),
                        point);
      point.rounding += output_rounding;
    }
    point.rounding += factors.rounding;
    point.rounding += factors.pinv.rounding;
    point.pinv_status = factors.pinv.status;
    point.pinv_residual = factors.pinv.residual();
    point.matrix_free = reference.matrix_free;
    point.reference_seconds = reference.seconds;
    point.seconds = seconds_since(point_start) + factors_seconds + selection_seconds;
  };
  // Lemma 2.1 is stated for a square core: an oversampled (p×m) one has no terms (NaN columns).
  const bool lemma_terms = generalized && set.landmarks.q.rows() == set.landmarks.k.rows();
  if (lemma_terms && !set.terms.count(terms_key)) {
    std::pair<LandmarkTerms, double> computed;
    const auto compute_terms = [&] {
      const auto terms_start = Clock::now();
      computed.first = terms_of_valid_head(head_, shifted, set.landmarks, options_);
      computed.second = seconds_since(terms_start);
    };
    run_with_landmark_terms<T>(head_.tokens(), set.landmarks.q.rows(), options_, measure, compute_terms);
    set.terms.emplace(terms_key, computed);
  } else {
    measure();
  }
  if (lemma_terms) {
    const auto& [terms, seconds] = set.terms.at(terms_key);
    apply_landmark_terms(
        terms, bound_slack<T>(head_.tokens(), set.landmarks.q.rows(), terms.sigma1_ext, terms.sigma_m_core),
        lemma_approximation(nystrom, head_), point);
    point.landmark_seconds = seconds;
  }
  scale_to_kernel(point, shifted.log_shift);
  return point;
}

template <class T>
detail::MatrixErrors HeadEvaluator<T>::attention_errors(const FactoredOperator<T>& implied,
                                                        const Kernel& shifted) {
  const typename HeadReference<T>::Attention& attention = attention_reference(shifted);
  if (!detail::finite_factors(implied)) return {};
  if (reference_->matrix_free)
    return detail::unless_overflowing([&] {
      return detail::matrix_free_attention_errors(head_, shifted, attention.row_sums, implied, options_);
    });
  return detail::stored_errors<T>(attention.s - implied.dense(), options_);
}

template <class T>
void HeadEvaluator<T>::set_attention_errors(PointResult& point, const FactoredOperator<T>& implied,
                                            Index rank, const Kernel& shifted) {
  const double norm = attention_reference(shifted).norm2;
  point.attention_relative_error = attention_errors(implied, shifted).spectral / norm;
  point.attention_optimal_error = floor_of(ErrorMatrix::attention, rank, shifted).first / norm;
}

template <class T>
PointResult HeadEvaluator<T>::attention_point(Method method, const ApproximationOptions& options,
                                              const Kernel& shifted) {
  const typename HeadReference<T>::Attention& attention = attention_reference(shifted);
  const HeadReference<T>& reference = *reference_;
  const auto start = Clock::now();
  const Matrix<T> no_values(head_.tokens(), 0);
  const Approximation<T> approximation =
      approximate_attention<T>(method, head_.q, head_.k, head_.v.size() ? head_.v : no_values, options);
  PointResult point;
  set_output_errors(options.storage, shifted, approximation.output, point);
  point.rounding = approximation.rounding;
  // ‖S − Ŝ‖ with S = D⁻¹G (docs/mathematics.md §6, §7).
  const FactoredOperator<T>& implied = *approximation.softmax_attention;
  const detail::MatrixErrors errors = attention_errors(implied, shifted);
  set_errors(errors, point);
  point.relative_spectral_error = errors.spectral / attention.norm2;
  std::tie(point.optimal_error, point.optimal_error_lower) =
      floor_of(ErrorMatrix::attention, implied.right().rows(), shifted);
  point.attention_relative_error = point.relative_spectral_error;
  point.relative_optimal_error = point.optimal_error / attention.norm2;
  point.attention_optimal_error = point.relative_optimal_error;
  point.selection_entries = approximation.selection_entries;
  point.pinv_status = approximation.pinv_status;
  point.pinv_residual = approximation.pinv_residual;
  point.matrix_free = reference.matrix_free;
  point.reference_seconds = reference.seconds;
  point.seconds = seconds_since(start);
  return point;
}

template <class T>
void HeadEvaluator<T>::set_output_errors(Precision storage, const Kernel& shifted, const Matrix<T>& output,
                                         PointResult& point) {
  if (head_.v.size() == 0) return;
  if (!is_emulated(storage)) return set_output_columns<T>(shifted_reference(shifted).output, output, point);
  auto [found, missing] = float64_outputs_.try_emplace(shifted.label());
  if (missing) {
    ApproximationOptions exact;
    exact.kernel = shifted;
    found->second =
        approximate_attention<double>(Method::exact, head_.q.template cast<double>(),
                                      head_.k.template cast<double>(), head_.v.template cast<double>(), exact)
            .output;
  }
  set_output_columns<double>(found->second, output.template cast<double>(), point);
}

template <class T>
PointResult HeadEvaluator<T>::exact_point(const ApproximationOptions& options, const Kernel& shifted) {
  const HeadReference<T>& reference = shifted_reference(shifted);
  const auto start = Clock::now();
  const Matrix<T> no_values(head_.tokens(), 0);
  const Approximation<T> approximation = approximate_attention<T>(
      Method::exact, head_.q, head_.k, head_.v.size() ? head_.v : no_values, options);
  PointResult point;
  set_output_errors(options.storage, shifted, approximation.output, point);
  point.rounding = approximation.rounding;
  point.matrix_free = reference.matrix_free;
  point.reference_seconds = reference.seconds;
  point.seconds = seconds_since(start);
  return point;
}

#define NYSTROM_INSTANTIATE(T)                                                                         \
  template LandmarkTerms landmark_terms<T>(const Head<T>&, const Kernel&, const Landmarks<T>&,         \
                                           const EvaluationOptions&);                                  \
  template double head_log_shift<T>(const Head<T>&, const Kernel&, const std::string&);                \
  template void require_representable_kernel<T>(const Head<T>&, const Kernel&, const std::string&);    \
  template void require_representable_kernel<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,    \
                                                const Kernel&, const std::string&);                    \
  template Matrix<T> head_exponent<T>(const Head<T>&, const Kernel&);                                  \
  template Matrix<T> head_kernel_matrix<T>(const Head<T>&, const Kernel&);                             \
  template Matrix<T> head_attention_matrix<T>(const Head<T>&, const Kernel&);                          \
  template Matrix<T> head_extended_matrix<T>(const Head<T>&, const Kernel&, const ExtendedTokens<T>&); \
  template class HeadEvaluator<T>;
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
