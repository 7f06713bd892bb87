#include "nystrom/evaluation.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/error.hpp"
#include "nystrom/matrix_free.hpp"
#include "nystrom/operators.hpp"

namespace nystrom {

template <class T>
void Head<T>::validate(const std::string& where) const {
  require(q.rows() > 0 && q.cols() > 0, describe(where, ": empty head, Q is ", q.rows(), "x", q.cols()));
  require(k.rows() == q.rows() && k.cols() == q.cols(),
          describe(where, ": K is ", k.rows(), "x", k.cols(), ", expected the shape of Q, ", q.rows(), "x",
                   q.cols()));
  require(v.size() == 0 || v.rows() == q.rows(),
          describe(where, ": V has ", v.rows(), " rows, expected N = ", q.rows()));
  require(
      window[0] * window[1] == 0 || window[0] * window[1] == q.rows(),
      describe(where, ": window ", window[0], "x", window[1], " does not hold N = ", q.rows(), " tokens"));
  require_finite(q, where + ": Q");
  require_finite(k, where + ": K");
  require_finite(v, where + ": V");
}

void EvaluationOptions::validate() const {
  require(std::isfinite(memory_budget) && memory_budget > 0,
          describe("evaluation: memory_budget = ", memory_budget, " bytes must be finite and > 0"));
  require(panel_rows >= 1, describe("evaluation: panel_rows = ", panel_rows, " must be >= 1"));
  require(dense_svd_limit >= 0, describe("evaluation: dense_svd_limit = ", dense_svd_limit, " must be >= 0"));
  spectral.validate();
  require_device(device);
}

bool EvaluationOptions::matrix_free(Index n, std::size_t scalar_bytes) const {
  const double tokens = static_cast<double>(n);
  return force_matrix_free || 3.0 * tokens * tokens * double(scalar_bytes) > memory_budget;
}

namespace {

/// σ₁ of a dense matrix: full SVD up to the dense limit, Lanczos on the stored matrix (one-pass Gram
/// products, relative accuracy ~tolerance on σ₁²) above it.
template <class T>
double dense_spectral_norm(const Matrix<T>& a, const EvaluationOptions& options) {
  if (std::max(a.rows(), a.cols()) <= options.dense_svd_limit) return singular_values<T>(a)(0);
  return spectral_norm(DenseOperator<T>(a), options.spectral).values(0);
}

/// The tiling of the matrix-free operators.
MatrixFreeOptions tiling(const EvaluationOptions& options) {
  return {.panel_rows = options.panel_rows};
}

/// ‖G − Ĝ‖_F with G = κ(Q, K) and Ĝ evaluated in row panels (threaded), never storing N×N; accumulated in
/// double.
template <class T>
double difference_frobenius(const Head<T>& head, const Kernel& kernel, const NystromFactors<T>& f,
                            Index panel_rows) {
  const Matrix<T> right = f.pinv.z * f.upper;  // Z G_U, m×N
  const Vector<double> total = detail::reduce_over_panels(
      head.q.rows(), panel_rows, 1,
      double(head.q.rows()) * double(head.k.rows()) * double(head.q.cols() + f.left.cols()),
      [&](Index first, Index count, Vector<double>& partial) {
        Matrix<T> block = kernel.block<T>(head.q.middleRows(first, count), head.k);
        Matrix<T> approximation = f.left.middleRows(first, count) * right;
        approximation.array().colwise() *= f.left_log_scale.segment(first, count).array().exp();
        block -= approximation;
        partial(0) += block.template cast<double>().squaredNorm();
      });
  return std::sqrt(total(0));
}

/// `a` in double: moved when it is double already, else converted.
template <class T>
Matrix<double> in_double(Matrix<T>&& a) {
  if constexpr (std::is_same_v<T, double>)
    return std::move(a);
  else
    return a.template cast<double>();
}

bool same_kernel(const Kernel& a, const Kernel& b) {
  return a.type == b.type && a.param == b.param;
}

}  // namespace

template <class T>
HeadReference<T> make_reference(const Head<T>& head, const Kernel& kernel, const EvaluationOptions& options) {
  head.validate("make_reference");
  kernel.validate();
  options.validate();
  HeadReference<T> reference;
  reference.kernel = kernel;
  reference.matrix_free = options.matrix_free(head.q.rows(), sizeof(T));
  if (reference.matrix_free) {
    reference.g_norm2 =
        matrix_free_kernel_norm<T>(head.q, head.k, kernel, options.spectral, tiling(options)).values(0);
  } else {
    reference.g = kernel.block<T>(head.q, head.k);
    reference.g_norm2 = dense_spectral_norm(reference.g, options);
  }
  if (head.v.size() > 0)
    reference.output = exact_attention<T>(options.device, head.q, head.k, head.v, kernel);
  return reference;
}

template <class T>
LandmarkTerms landmark_terms(const Head<T>& head, const Kernel& kernel, const Landmarks<T>& marks,
                             const EvaluationOptions& options) {
  head.validate("landmark_terms");
  kernel.validate();
  options.validate();
  const Index m = marks.q.rows(), n = head.q.rows();
  require(m >= 1 && marks.k.rows() == m && marks.q.cols() == head.q.cols() && marks.k.cols() == head.q.cols(),
          describe("landmark_terms: landmarks are ", marks.q.rows(), "x", marks.q.cols(), " and ",
                   marks.k.rows(), "x", marks.k.cols(), ", expected m x d with d = ", head.q.cols()));
  // Unstabilized blocks of G̃ = [[G_A, G_U], [G_L, G]] (MATH.md §2): the bounds are stated for the true
  // kernel.
  const Matrix<T> core = kernel.block<T>(marks.q, marks.k);
  const Matrix<T> upper = kernel.block<T>(marks.q, head.k);
  const Matrix<T> left = kernel.block<T>(head.q, marks.k);
  LandmarkTerms terms;
  terms.sigma_m_core = singular_values<T>(core)(m - 1);
  terms.theorem3_k = theorem3_constant<T>(left, core, upper);
  // σ₁(G̃) and σ_{m+1}(G̃) by Lanczos on G̃ᵀG̃ (stored in double, or matrix-free), with a full SVD below the
  // dense limit. A stored G̃ keeps the Lanczos σ_{m+1} when its certificate (SpectralResult::last_error_bound)
  // is within 1e-10 relative or at the floor a full SVD has too, (n + m)·eps·σ₁; otherwise it goes to the
  // full SVD. The matrix-free path keeps the Gram form and its documented accuracy.
  SpectralResult top;
  const auto full_svd = [&](const Matrix<double>& extended) {
    top.values = singular_values<double>(extended).head(m + 1);
    top.converged = true;
  };
  if (options.matrix_free(n, sizeof(T)) && n + m > options.dense_svd_limit) {
    const KernelOperator<T> extended =
        extended_kernel_operator<T>(head.q, head.k, marks, kernel, options.panel_rows);
    top = top_singular_values(extended, m + 1, options.spectral);
  } else {
    const ExtendedTokens<T> tokens = extended_tokens<T>(head.q, head.k, marks);
    const Matrix<double> extended = in_double<T>(kernel.block<T>(tokens.queries, tokens.keys));
    if (n + m <= options.dense_svd_limit) {
      full_svd(extended);
    } else {
      top = top_singular_values(DenseOperator<double>(extended), m + 1, options.spectral);
      const double svd_floor = double(n + m) * std::numeric_limits<double>::epsilon() * top.values(0);
      if (!(top.converged && top.last_error_bound <= std::max(1e-10 * top.values(m), svd_floor)))
        full_svd(extended);
    }
  }
  terms.sigma1_ext = top.values(0);
  terms.sigma_m1_ext = top.values(m);
  terms.converged = top.converged;
  return terms;
}

template <class T>
PointResult measure_nystrom(const Head<T>& head, const HeadReference<T>& reference,
                            const NystromOptions& options, const EvaluationOptions& evaluation) {
  const auto start = std::chrono::steady_clock::now();
  head.validate("evaluate_nystrom");
  evaluation.validate();
  require(same_kernel(options.kernel, reference.kernel),
          describe("evaluate_nystrom: options kernel ", options.kernel.label(),
                   " differs from the reference kernel ", reference.kernel.label()));
  const NystromFactors<T> factors = generalized_nystrom<T>(head.q, head.k, options);
  PointResult point;
  point.matrix_free = reference.matrix_free;
  // ‖G − Ĝ‖₂ for the true Ĝ (row scales M_L included), MATH.md §7.
  if (reference.matrix_free) {
    point.spectral_error = evaluation.device == Device::cpu
                               ? matrix_free_error_norm<T>(head.q, head.k, factors, reference.kernel,
                                                           evaluation.spectral, tiling(evaluation))
                                     .values(0)
                               : spectral_norm(error_operator<T>(evaluation.device, head.q, head.k, factors),
                                               evaluation.spectral)
                                     .values(0);
    point.frobenius_error = difference_frobenius(head, reference.kernel, factors, evaluation.panel_rows);
  } else {
    const Matrix<T> error = reference.g - factors.dense();
    point.spectral_error = dense_spectral_norm(error, evaluation);
    point.frobenius_error = frobenius_norm<T>(error);
  }
  point.relative_spectral_error = point.spectral_error / reference.g_norm2;
  if (head.v.size() > 0 && reference.output.size() > 0) {
    const Matrix<T> output = evaluation.device == Device::cpu
                                 ? nystrom_attention<T>(factors, head.v)
                                 : nystrom_attention<T>(evaluation.device, head.q, head.k, head.v, options);
    const OutputErrors errors = output_errors<T>(reference.output, output);
    point.output_relative_error = errors.relative_frobenius;
    point.output_max_error = errors.max_abs;
    point.output_mean_abs_error = errors.mean_abs;
  }
  point.pinv_residual = factors.pinv.residual();
  point.pinv_status = to_string(factors.pinv.status);
  point.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return point;
}

void apply_landmark_terms(const LandmarkTerms& terms, PointResult& point) {
  point.sigma1_ext = terms.sigma1_ext;
  point.sigma_m1_ext = terms.sigma_m1_ext;
  point.sigma_m_core = terms.sigma_m_core;
  point.theorem3_k = terms.theorem3_k;
  const BoundReport bounds = evaluate_bounds(
      {terms.sigma1_ext, terms.sigma_m1_ext, terms.sigma_m_core, point.spectral_error, terms.theorem3_k});
  point.bound_ratio = bounds.ratio;
  point.theorem1_bound = bounds.theorem1;
  point.theorem2_bound = bounds.theorem2;
  point.theorem3_bound = bounds.theorem3;
  point.c_emp = bounds.c_emp;
  point.c_emp_normalized = bounds.c_emp_normalized;
  point.bounds_hold = bounds.holds();
}

template <class T>
PointResult evaluate_nystrom(const Head<T>& head, const HeadReference<T>& reference,
                             const NystromOptions& options, const EvaluationOptions& evaluation,
                             const LandmarkTerms* terms) {
  PointResult point;
  LandmarkTerms computed;
  const auto measure = [&] { point = measure_nystrom(head, reference, options, evaluation); };
  if (terms) {
    measure();
    computed = *terms;
  } else {
    const auto compute_terms = [&] {
      computed = landmark_terms(head, reference.kernel,
                                select_landmarks<T>(head.q, head.k, options.landmarks), evaluation);
    };
    run_with_landmark_terms<T>(head.q.rows(), options.landmarks.count, evaluation, measure, compute_terms);
  }
  apply_landmark_terms(computed, point);
  return point;
}

#define NYSTROM_INSTANTIATE(T)                                                                             \
  template struct Head<T>;                                                                                 \
  template HeadReference<T> make_reference<T>(const Head<T>&, const Kernel&, const EvaluationOptions&);    \
  template LandmarkTerms landmark_terms<T>(const Head<T>&, const Kernel&, const Landmarks<T>&,             \
                                           const EvaluationOptions&);                                      \
  template PointResult measure_nystrom<T>(const Head<T>&, const HeadReference<T>&, const NystromOptions&,  \
                                          const EvaluationOptions&);                                       \
  template PointResult evaluate_nystrom<T>(const Head<T>&, const HeadReference<T>&, const NystromOptions&, \
                                           const EvaluationOptions&, const LandmarkTerms*);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
