#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "nystrom/attention.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

Head<double> small_head(Index n, Index d, Index dv, std::uint64_t seed) {
  Head<double> head;
  head.q = random_matrix<double>(n, d, seed, 0.8);
  head.k = random_matrix<double>(n, d, seed + 1, 0.8);
  head.v = random_matrix<double>(n, dv, seed + 2);
  return head;
}

/// Relative closeness of two doubles (both NaN counts as equal).
bool close(double actual, double expected, double tol) {
  if (std::isnan(expected)) return std::isnan(actual);
  return std::abs(actual - expected) <= tol * std::max(std::abs(expected), 1e-300);
}

}  // namespace

TEST_CASE("every PointResult column equals an independent dense computation") {
  const Head<double> head = small_head(96, 8, 4, 5);
  const Index m = 8;
  for (const Kernel& kernel : {Kernel::exponential(1 / std::sqrt(8.0)), Kernel::laplacian(4.0)}) {
    NystromOptions options;
    options.kernel = kernel;
    options.landmarks.count = m;
    options.stabilization = Stabilization::row_max;
    const EvaluationOptions evaluation;
    const HeadReference<double> reference = make_reference(head, kernel, evaluation);
    const PointResult point = evaluate_nystrom(head, reference, options, evaluation);
    CAPTURE(kernel.label());

    // The oracle: naive kernel blocks, JacobiSVD pseudoinverse and norms, softmax attention in double.
    const Landmarks<double> marks = select_landmarks<double>(head.q, head.k, options.landmarks);
    const Matrix<double> G = naive_kernel<double>(head.q, head.k, kernel);
    const Matrix<double> GA = naive_kernel<double>(marks.q, marks.k, kernel);
    const Matrix<double> GL = naive_kernel<double>(head.q, marks.k, kernel);
    const Matrix<double> GU = naive_kernel<double>(marks.q, head.k, kernel);
    const Matrix<double> Ghat = GL * dense_pinv(GA, 1e-15) * GU;
    const Matrix<double> E = G - Ghat;
    const double error2 = Eigen::JacobiSVD<Matrix<double>>(E).singularValues()(0);
    const double g2 = Eigen::JacobiSVD<Matrix<double>>(G).singularValues()(0);
    Matrix<double> extended(96 + m, 96 + m);
    extended << GA, GU, GL, G;
    const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(extended).singularValues();
    const double a = Eigen::JacobiSVD<Matrix<double>>(GA).singularValues()(m - 1);
    const Matrix<double> O = ((G * head.v).array().colwise() / G.rowwise().sum().array()).matrix();
    const Matrix<double> Ohat = ((Ghat * head.v).array().colwise() / Ghat.rowwise().sum().array()).matrix();
    const Matrix<double> GAinv = GA.inverse();
    const double K = (1 + Eigen::JacobiSVD<Matrix<double>>(GL * GAinv).singularValues()(0)) *
                     (1 + Eigen::JacobiSVD<Matrix<double>>(GAinv * GU).singularValues()(0));
    const double cond = Eigen::JacobiSVD<Matrix<double>>(GA).singularValues()(0) / a;
    const double tol = 1e-13 * cond;

    CHECK_FALSE(point.matrix_free);
    CHECK(close(reference.g_norm2, g2, 1e-12));
    CHECK(close(point.spectral_error, error2, tol * g2 / error2));
    CHECK(close(point.relative_spectral_error, error2 / g2, tol * g2 / error2));
    CHECK(close(point.frobenius_error, E.norm(), tol * G.norm() / E.norm()));
    CHECK(close(point.output_relative_error, (O - Ohat).norm() / O.norm(), 1e-6));
    CHECK(close(point.output_max_error, (O - Ohat).cwiseAbs().maxCoeff(), 1e-6));
    CHECK(close(point.output_mean_abs_error, (O - Ohat).cwiseAbs().mean(), 1e-6));
    CHECK(close(point.sigma1_ext, sigma(0), 1e-12));
    CHECK(close(point.sigma_m1_ext, sigma(m), 1e-10));
    CHECK(close(point.sigma_m_core, a, 1e-10 * cond));
    CHECK(close(point.theorem3_k, K, 1e-10 * cond * cond));
    const BoundReport bounds = evaluate_bounds({sigma(0), sigma(m), a, error2, K});
    CHECK(close(point.bound_ratio, bounds.ratio, 1e-9 * cond));
    CHECK(close(point.theorem1_bound, bounds.theorem1, 1e-9 * cond));
    CHECK(close(point.theorem2_bound, bounds.theorem2, 1e-9 * cond));
    CHECK(close(point.theorem3_bound, bounds.theorem3, 1e-9 * cond * cond));
    CHECK(close(point.c_emp, bounds.c_emp, 1e-9 * cond));
    CHECK(close(point.c_emp_normalized, bounds.c_emp_normalized, 1e-9 * cond));
    CHECK(point.bounds_hold == bounds.holds());
    CHECK(point.pinv_status == "converged");
    CHECK(point.pinv_residual <= 1e-10 * cond);
    CHECK(point.seconds > 0);
  }
}

TEST_CASE("the matrix-free and Lanczos paths agree with the dense path") {
  const Head<double> head = small_head(120, 6, 3, 9);
  NystromOptions options;
  options.kernel = Kernel::exponential(0.4);
  options.landmarks.count = 6;
  EvaluationOptions dense;
  const auto reference = make_reference(head, options.kernel, dense);
  const PointResult expected = evaluate_nystrom(head, reference, options, dense);
  EvaluationOptions lanczos;
  lanczos.dense_svd_limit = 0;
  const PointResult by_lanczos = evaluate_nystrom(head, reference, options, lanczos);
  EvaluationOptions free;
  free.force_matrix_free = true;
  free.dense_svd_limit = 0;
  free.panel_rows = 32;
  const auto free_reference = make_reference(head, options.kernel, free);
  const PointResult matrix_free = evaluate_nystrom(head, free_reference, options, free);
  CHECK(matrix_free.matrix_free);
  CHECK(free_reference.g.size() == 0);
  CHECK(close(free_reference.g_norm2, reference.g_norm2, 1e-10));
  for (const PointResult* p : {&by_lanczos, &matrix_free}) {
    CHECK(close(p->spectral_error, expected.spectral_error, 1e-9));
    CHECK(close(p->frobenius_error, expected.frobenius_error, 1e-10));
    CHECK(close(p->output_relative_error, expected.output_relative_error, 1e-10));
    CHECK(close(p->sigma1_ext, expected.sigma1_ext, 1e-10));
    // σ_{m+1}(G̃) by Lanczos on G̃ᵀG̃ (matrix-free path) carries an absolute error of about eps·σ₁²/σ_{m+1}.
    CHECK(std::abs(p->sigma_m1_ext - expected.sigma_m1_ext) <=
          1e-12 * expected.sigma1_ext * expected.sigma1_ext / expected.sigma_m1_ext);
  }
  // Precomputed landmark terms are used as given.
  LandmarkTerms terms = landmark_terms(head, options.kernel,
                                       select_landmarks<double>(head.q, head.k, options.landmarks), dense);
  terms.theorem3_k = 123;
  CHECK(evaluate_nystrom(head, reference, options, dense, &terms).theorem3_k == 123);
}

TEST_CASE("landmark terms above the dense limit equal a full SVD of G̃, flat and steep spectra") {
  // Flat: Gaussian tokens, σ_{m+1}(G̃)/σ₁ ≈ 0.1 (Lanczos on G̃ᵀG̃). Steep: rank-2 tokens plus 1e-4 noise,
  // σ_{m+1}/σ₁ far below gram_resolution (the full-SVD fallback).
  const Index n = 300, d = 8, m = 6;
  Head<double> flat = small_head(n, d, 2, 21);
  Head<double> steep = small_head(n, d, 2, 23);
  const Matrix<double> basis = random_matrix<double>(2, d, 25);
  steep.q = random_matrix<double>(n, 2, 26) * basis + 1e-4 * steep.q;
  steep.k = random_matrix<double>(n, 2, 27) * basis + 1e-4 * steep.k;
  for (const Head<double>* head : {&flat, &steep}) {
    const Kernel kernel = Kernel::exponential(1 / std::sqrt(double(d)));
    NystromOptions options;
    options.kernel = kernel;
    options.landmarks.count = m;
    const EvaluationOptions evaluation;
    REQUIRE(n + m > evaluation.dense_svd_limit);
    const auto factors = generalized_nystrom<double>(head->q, head->k, options);
    const LandmarkTerms terms = landmark_terms(*head, kernel, factors.landmarks, evaluation);
    Matrix<double> extended(n + m, n + m);
    extended << naive_kernel<double>(factors.landmarks.q, factors.landmarks.k, kernel),
        naive_kernel<double>(factors.landmarks.q, head->k, kernel),
        naive_kernel<double>(head->q, factors.landmarks.k, kernel),
        naive_kernel<double>(head->q, head->k, kernel);
    const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(extended).singularValues();
    CAPTURE(sigma(m) / sigma(0));
    CHECK((head == &flat ? sigma(m) / sigma(0) > 1e-2 : sigma(m) / sigma(0) < 1e-6));
    CHECK(terms.converged);
    CHECK(close(terms.sigma1_ext, sigma(0), 1e-12));
    // Both paths carry an absolute error of a few eps·σ₁ at most.
    CHECK(std::abs(terms.sigma_m1_ext - sigma(m)) <= 1e-13 * sigma(0) + 1e-11 * sigma(m));
  }
}

TEST_CASE("float heads are evaluated to float accuracy") {
  const Head<double> h = small_head(64, 4, 2, 13);
  Head<float> head{h.q.cast<float>(), h.k.cast<float>(), h.v.cast<float>(), {8, 8}};
  NystromOptions options;
  options.kernel = Kernel::laplacian(4.0);
  options.landmarks.count = 4;
  const auto reference = make_reference(head, options.kernel, {});
  const PointResult single = evaluate_nystrom(head, reference, options, {});
  const PointResult twice = evaluate_nystrom(h, make_reference(h, options.kernel, {}), options, {});
  CHECK(close(single.spectral_error, twice.spectral_error, 1e-3));
  CHECK(close(single.sigma_m_core, twice.sigma_m_core, 1e-4));
  // G̃ of a float head is the float kernel block, exact in double from there on. Each entry carries a relative
  // error of a few eps_f (token rounding times |exponent| ≤ 2 here, and exp), and G̃ is entrywise positive, so
  // ‖ΔG̃‖₂ ≤ c·eps_f·‖G̃‖₂ and by Weyl every σ_i moves by at most c·eps_f·σ₁.
  const double float_bound = 8 * std::numeric_limits<float>::epsilon() * twice.sigma1_ext;
  CHECK(std::abs(single.sigma1_ext - twice.sigma1_ext) <= float_bound);
  CHECK(std::abs(single.sigma_m1_ext - twice.sigma_m1_ext) <= float_bound);
}

TEST_CASE("landmark terms beside the point give the values of one after the other, float and double") {
  // n + m = 306: stored G̃ with single-threaded products, so evaluate_nystrom overlaps the terms.
  const Head<double> h = small_head(300, 8, 4, 31);
  const Head<float> f{h.q.cast<float>(), h.k.cast<float>(), h.v.cast<float>(), {}};
  NystromOptions options;
  options.kernel = Kernel::exponential(1 / std::sqrt(8.0));
  options.landmarks.count = 6;
  options.stabilization = Stabilization::row_max;
  const EvaluationOptions evaluation;
  CHECK(overlap_landmark_terms<double>(300, 6, evaluation));
  const int before = threads();
  const auto both_ways = [&](const auto& head) {
    const auto reference = make_reference(head, options.kernel, evaluation);
    set_threads(1);
    const PointResult serial = evaluate_nystrom(head, reference, options, evaluation);
    set_threads(2);
    const PointResult overlapped = evaluate_nystrom(head, reference, options, evaluation);
    set_threads(before);
    // Each task runs on one thread either way, so the values agree to the last bit.
    for (const auto column :
         {&PointResult::spectral_error, &PointResult::frobenius_error, &PointResult::output_relative_error,
          &PointResult::sigma1_ext, &PointResult::sigma_m1_ext, &PointResult::sigma_m_core,
          &PointResult::theorem3_k, &PointResult::theorem2_bound, &PointResult::c_emp,
          &PointResult::pinv_residual})
      CHECK(overlapped.*column == serial.*column);
    CHECK(overlapped.bounds_hold == serial.bounds_hold);
    CHECK(std::isfinite(serial.sigma_m1_ext));
  };
  both_ways(h);
  both_ways(f);
}

TEST_CASE("landmark terms overlap the point only where G̃ is stored and its products stay on one thread") {
  const EvaluationOptions evaluation;
  CHECK(overlap_landmark_terms<double>(1024, 16, evaluation));
  CHECK(overlap_landmark_terms<float>(2000, 47, evaluation));  // (n + m)² just below detail::parallel_work
  CHECK_FALSE(overlap_landmark_terms<float>(2000, 48, evaluation));  // 2048² = parallel_work
  EvaluationOptions free = evaluation;
  free.force_matrix_free = true;
  CHECK_FALSE(overlap_landmark_terms<double>(1024, 16, free));
  free.force_matrix_free = false;
  free.memory_budget = 3.0 * 1024 * 1024 * 8 - 1;  // dense double 1024-token head no longer fits
  CHECK_FALSE(overlap_landmark_terms<double>(1024, 16, free));
  CHECK(overlap_landmark_terms<float>(1024, 16, free));
}

TEST_CASE("bad heads and options throw naming the value") {
  Head<double> head = small_head(20, 4, 2, 17);
  head.k = random_matrix<double>(20, 5, 1);
  CHECK(throws_naming([&] { head.validate("head 3"); }, "head 3"));
  head = small_head(20, 4, 2, 17);
  head.window = {3, 5};
  CHECK(throws_naming([&] { head.validate("h"); }, "3x5"));
  head = small_head(20, 4, 2, 17);
  head.v(0, 0) = NAN;
  CHECK(throws_naming([&] { make_reference(head, Kernel::exponential(0.5), {}); }, "V"));
  head = small_head(20, 4, 2, 17);
  EvaluationOptions options;
  options.memory_budget = 0;
  CHECK(throws_naming([&] { make_reference(head, Kernel::exponential(0.5), options); }, "memory_budget = 0"));
  NystromOptions nystrom;
  nystrom.kernel = Kernel::laplacian(2);
  const auto reference = make_reference(head, Kernel::exponential(0.5), {});
  CHECK(throws_naming([&] { evaluate_nystrom(head, reference, nystrom, {}); }, "laplacian"));
}
