// How far a point is from the best possible (evaluation.hpp): the floors σ_{r+1} of G and S, the attention
// errors of every method's Ŝ, the certificates of ‖M − M̂‖₂ and of σ_{r+1}, and the kernel entries of landmark
// selection, against dense oracles (full JacobiSVDs in double), dense against matrix-free, on random and
// adversarial heads (block-constant, equal tokens, large logits) in float and double.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "method_options.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/evaluation.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

Vector<double> oracle_singular_values(const Matrix<double>& a) {
  return Eigen::JacobiSVD<Matrix<double>>(a).singularValues();
}

/// The rank of the approximation a method's options give: m, performer's r, linformer's k.
Index approximation_rank(Method method, const ApproximationOptions& options, Index d) {
  switch (method) {
    case Method::performer:
      return options.performer.feature_count(d);
    case Method::linformer:
      return options.linformer.projected;
    case Method::nystromformer:
      return options.nystromformer.landmarks;
    case Method::cur:
      return options.cur.selection.count;
    default:
      return options.pnp_nystra.landmarks.count;
  }
}

/// An adversarial head of one of four kinds: Gaussian, block-constant (exact low rank), one token repeated
/// (rank 1), logits up to several hundred (the log-shift path).
template <class T>
Head<T> head_of_kind(int kind, Index n, Index d, std::uint64_t seed) {
  Head<T> head = random_head<T>(n, d, 3, seed);
  if (kind == 1) {
    head.q = segment_constant<T>(n, d, 3, seed + 7);
    head.k = segment_constant<T>(n, d, 3, seed + 8);
  } else if (kind == 2) {
    head.q = head.q.row(0).replicate(n, 1);
    head.k = head.k.row(0).replicate(n, 1);
  } else if (kind == 3) {
    head.q *= T(5);
    head.k *= T(5);
  }
  return head;
}

}  // namespace

TEST_CASE_TEMPLATE("floors and attention errors of every method equal their dense oracles", T, float,
                   double) {
  const Index n = 44, d = 5, m = 6;
  const Head<T> head = random_head<T>(n, d, 3, 101);
  const Kernel kernel = Kernel::exponential(0.45);
  const Matrix<double> q = head.q.template cast<double>(), k = head.k.template cast<double>();
  const Matrix<double> g = kernel.block<double>(q, k);
  const Matrix<double> s = g.array().colwise() / g.rowwise().sum().array();
  const Vector<double> sigma_g = oracle_singular_values(g), sigma_s = oracle_singular_values(s);
  const double tolerance_t = 1e3 * std::numeric_limits<T>::epsilon();
  HeadEvaluator<T> evaluator(head, {});
  ApproximationOptions options = small_options(m);
  options.kernel = kernel;
  for (const Method method : methods) {
    CAPTURE(to_string(method));
    const PointResult point = evaluator.evaluate(method, options);
    if (method == Method::exact) {
      CHECK(std::isnan(point.optimal_error));
      CHECK(std::isnan(point.attention_relative_error));
      continue;
    }
    const Index rank = approximation_rank(method, options, d);
    const bool kernel_error = error_matrix(method) == ErrorMatrix::kernel;
    const Vector<double>& sigma = kernel_error ? sigma_g : sigma_s;
    CHECK(point.optimal_error == doctest::Approx(sigma(rank)).epsilon(tolerance_t));
    CHECK(point.relative_optimal_error == doctest::Approx(sigma(rank) / sigma(0)).epsilon(tolerance_t));
    CHECK(point.optimal_error_lower <= sigma(rank));
    if (std::is_same_v<T, double>) CHECK(point.optimal_error_lower >= 0.99 * sigma(rank));  // not vacuous
    CHECK(point.attention_optimal_error == doctest::Approx(sigma_s(rank) / sigma_s(0)).epsilon(tolerance_t));
    // ‖S − Ŝ‖₂ of the method's own Ŝ: the softmax methods' spectral error, the kernel methods' diag(1/Ĝ1)Ĝ.
    if (kernel_error) {
      const Approximation<T> approximation = approximate_attention<T>(method, head.q, head.k, head.v, [&] {
        ApproximationOptions given = options;
        given.kernel = kernel;
        return given;
      }());
      const Matrix<double> s_hat = approximation.attention()->dense().template cast<double>();
      CHECK(point.attention_relative_error ==
            doctest::Approx(oracle_singular_values(s - s_hat)(0) / sigma_s(0)).epsilon(1e2 * tolerance_t));
    } else {
      CHECK(point.attention_relative_error == point.relative_spectral_error);
    }
    // ‖M − M̂‖₂ ≥ the floor (Eckart–Young), the certificate brackets it, and the ratios follow.
    CHECK(point.spectral_error >= point.optimal_error * (1 - tolerance_t));
    CHECK(point.spectral_error_lower <= point.spectral_error * (1 + tolerance_t));
    CHECK(point.spectral_error_upper >= point.spectral_error * (1 - tolerance_t));
    CHECK(point.spectral_error_upper_failure <= 1e-6);
  }
}

TEST_CASE_TEMPLATE(
    "certificates hold on 1,000 random and adversarial heads: lower ≤ ‖E‖₂ ≤ upper, lower floor ≤ σ_{m+1}", T,
    float, double) {
  // Every head is evaluated for pnp-nystra (E = G − Ĝ) and performer (E = S − Ŝ); the upper bound must hold
  // on every one (each fails with probability ≤ 1e-6), and lie within 1.5× of the exact norm on ≥ 95%.
  const double slack = 1e3 * std::numeric_limits<T>::epsilon();
  int checked = 0, within = 0;
  for (int h = 0; h < 500; ++h) {
    const int kind = h % 4;
    const Index n = 16 + (h % 13) * 3, d = 2 + h % 5, m = 1 + h % 7;
    CAPTURE(h);
    const Head<T> head = head_of_kind<T>(kind, n, d, 7000 + std::uint64_t(h));
    HeadEvaluator<T> evaluator(head, {});
    ApproximationOptions options = small_options(m);
    options.kernel = Kernel::exponential(kind == 3 ? 1.0 : 0.5);
    options.pnp_nystra.landmarks.strategy = h % 2 ? LandmarkStrategy::cross : LandmarkStrategy::segment_means;
    for (const Method method : {Method::pnp_nystra, Method::performer}) {
      const PointResult point = evaluator.evaluate(method, options);
      if (std::isnan(point.spectral_error)) continue;  // an approximation that is not finite
      ++checked;
      const double scale = std::max(point.spectral_error, std::numeric_limits<double>::min());
      CHECK(point.spectral_error_lower <= point.spectral_error + slack * scale);
      CHECK(point.spectral_error_upper >= point.spectral_error - slack * scale);
      CHECK(point.optimal_error_lower <= point.optimal_error * (1 + slack));
      within += point.spectral_error_upper <= 1.5 * point.spectral_error;
    }
  }
  CHECK(checked >= 1000);
  CHECK(within >= 0.95 * checked);
  MESSAGE("upper within 1.5× of ‖E‖₂ on " << within << " of " << checked << " heads");
}

TEST_CASE("matrix-free floors, attention errors and certificates agree with the dense path") {
  const Head<double> head = random_head<double>(70, 5, 3, 211);
  ApproximationOptions options = small_options(7);
  options.kernel = Kernel::exponential(0.5);
  EvaluationOptions free;
  free.matrix_free = true;
  HeadEvaluator<double> dense(head, {}), matrix_free(head, free);
  for (const Method method : {Method::pnp_nystra, Method::nystromformer, Method::linformer}) {
    CAPTURE(to_string(method));
    const PointResult a = dense.evaluate(method, options), b = matrix_free.evaluate(method, options);
    CHECK(b.matrix_free);
    CHECK(b.optimal_error == doctest::Approx(a.optimal_error).epsilon(1e-8));
    CHECK(b.attention_relative_error == doctest::Approx(a.attention_relative_error).epsilon(1e-8));
    CHECK(b.attention_optimal_error == doctest::Approx(a.attention_optimal_error).epsilon(1e-8));
    CHECK(b.spectral_error_upper >= a.spectral_error * (1 - 1e-10));
    CHECK(b.spectral_error_lower <= a.spectral_error * (1 + 1e-10));
  }
}

TEST_CASE(
    "floors do not depend on the points evaluated before, and certificates only leave spectral_error NaN") {
  const Head<double> head = random_head<double>(60, 4, 3, 307);
  ApproximationOptions options = small_options(4);
  HeadEvaluator<double> first(head, {});
  options.pnp_nystra.landmarks.count = 16;
  first.evaluate(Method::pnp_nystra, options);
  options.pnp_nystra.landmarks.count = 4;
  const PointResult after = first.evaluate(Method::pnp_nystra, options);
  const PointResult fresh = HeadEvaluator<double>(head, {}).evaluate(Method::pnp_nystra, options);
  CHECK(after.optimal_error == fresh.optimal_error);
  CHECK(after.attention_optimal_error == fresh.attention_optimal_error);
  EvaluationOptions certified;
  certified.certificates_only = true;
  const PointResult bounds = HeadEvaluator<double>(head, certified).evaluate(Method::pnp_nystra, options);
  CHECK(std::isnan(bounds.spectral_error));
  CHECK(bounds.spectral_error_lower <= fresh.spectral_error);
  CHECK(bounds.spectral_error_upper >= fresh.spectral_error);
  CHECK(bounds.spectral_error_upper == fresh.spectral_error_upper);
}

TEST_CASE("selection_entries counts the kernel entries of the searched strategies, 0 for the others") {
  const Head<double> head = random_head<double>(64, 4, 3, 401);
  HeadEvaluator<double> evaluator(head, {});
  ApproximationOptions options = small_options(8);
  for (const LandmarkStrategy strategy : {LandmarkStrategy::segment_means, LandmarkStrategy::cross,
                                          LandmarkStrategy::rpcholesky, LandmarkStrategy::oracle_qdeim}) {
    CAPTURE(to_string(strategy));
    options.pnp_nystra.landmarks.strategy = strategy;
    options.cur.selection.strategy =
        strategy == LandmarkStrategy::segment_means ? LandmarkStrategy::step : strategy;
    const PointResult point = evaluator.evaluate(Method::pnp_nystra, options);
    if (strategy == LandmarkStrategy::segment_means) CHECK(point.selection_entries == 0);
    if (strategy == LandmarkStrategy::oracle_qdeim) CHECK(point.selection_entries == 64 * 64);
    if (strategy == LandmarkStrategy::cross) CHECK(point.selection_entries > 0);
    if (strategy != LandmarkStrategy::rpcholesky)
      CHECK(evaluator.evaluate(Method::cur, options).selection_entries == point.selection_entries);
  }
}
