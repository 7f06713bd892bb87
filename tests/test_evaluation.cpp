// The point evaluator (evaluation.hpp) for all seven methods against dense oracles built here by naive
// formulas in double (G, Ĝ or Ŝ, full JacobiSVDs), in float and double; the dense, Lanczos and matrix-free
// paths against each other; heads whose logits reach 300-700 against a long double oracle; the landmark terms
// and their overlap with the point; bad inputs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "attention_oracles.hpp"
#include "method_options.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/bounds.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/linformer.hpp"
#include "nystrom/performer.hpp"
#include "nystrom/point_record.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

constexpr Method all_methods[] = {
    Method::pnp_nystra, Method::nystromformer, Method::cur,  Method::symmetric_nystrom,
    Method::performer,  Method::linformer,     Method::exact};

/// Options of every method with m landmarks (r = 4m features, k = m projections) and exact pseudoinverses, so
/// that the oracles below are closed formulas.
ApproximationOptions method_options(const Kernel& kernel, Index m) {
  ApproximationOptions options;
  options.kernel = kernel;
  options.pnp_nystra.landmarks.count = m;
  options.pnp_nystra.stabilization = Stabilization::row_max;
  options.symmetric_nystrom.landmarks.count = m;
  options.symmetric_nystrom.pinv = PinvOptions{};
  options.nystromformer.landmarks = m;
  options.nystromformer.pinv = PinvOptions{};
  options.cur.selection.count = m;
  options.performer.features = 4 * m;
  options.performer.seed = 3;
  options.linformer.projected = m;
  options.linformer.seed = 4;
  return options;
}

Matrix<double> pinv(const Matrix<double>& a) {
  return dense_pinv(a, 1e-15);
}

double norm2(const Matrix<double>& a) {
  return Eigen::JacobiSVD<Matrix<double>>(a).singularValues()(0);
}

/// (Ĝ V) ⊘ (Ĝ 1): the output of an implied kernel approximation.
Matrix<double> normalized_output(const Matrix<double>& g, const Matrix<double>& v) {
  return ((g * v).array().colwise() / g.rowwise().sum().array()).matrix();
}

/// The matrix a method's errors are measured on (G or S), its approximation (Ĝ or Ŝ) and the output, by
/// naive formulas in double on the head's tokens (docs/mathematics.md §2, §6).
struct Oracle {
  Matrix<double> reference, approximate, output;
};

template <class T>
Oracle oracle(Method method, const Head<T>& head, const ApproximationOptions& o) {
  const Matrix<double> q = head.q.template cast<double>(), k = head.k.template cast<double>(),
                       v = head.v.template cast<double>();
  const Kernel& kernel = o.kernel;
  const double s = kernel.param;
  const Matrix<double> g = naive_kernel<double>(q, k, kernel);
  Oracle out;
  const auto kernel_approximation = [&](const LandmarkOptions& landmarks, bool symmetric) {
    const Landmarks<T> marks = select_landmarks<T>(head.q, head.k, landmarks, Kernel{});
    const Matrix<double> qb = marks.q.template cast<double>(), kb = marks.k.template cast<double>();
    const Matrix<double> left = naive_kernel<double>(q, kb, kernel);
    const Matrix<double> upper =
        symmetric ? Matrix<double>(left.transpose()) : naive_kernel<double>(qb, k, kernel);
    out.reference = g;
    out.approximate = left * pinv(naive_kernel<double>(qb, kb, kernel)) * upper;
    out.output = normalized_output(out.approximate, v);
  };
  const Matrix<double> attention = naive_softmax(q, k, s);
  switch (method) {
    case Method::pnp_nystra:
      kernel_approximation(o.pnp_nystra.landmarks, false);
      return out;
    case Method::symmetric_nystrom:
      kernel_approximation(o.symmetric_nystrom.landmarks, true);
      return out;
    case Method::nystromformer: {
      const Matrix<double> qb = naive_segment_means(q, o.nystromformer.landmarks),
                           kb = naive_segment_means(k, o.nystromformer.landmarks);
      out.approximate = naive_softmax(q, kb, s) * pinv(naive_softmax(qb, kb, s)) * naive_softmax(qb, k, s);
      break;
    }
    case Method::cur: {
      const auto rows = select_landmarks<T>(head.q, head.k, o.cur.selection, Kernel{}).q_indices;
      const Matrix<double> columns = naive_softmax(q, rows_at(k, rows), s);
      out.approximate = columns * pinv(rows_at(columns, rows)) * naive_softmax(rows_at(q, rows), k, s);
      break;
    }
    case Method::performer: {
      const Matrix<double> omega = performer_projection(o.performer.features, q.cols(), o.performer.seed);
      const auto features = [&](const Matrix<double>& x) {
        Matrix<double> phi(x.rows(), omega.rows());
        for (Index i = 0; i < x.rows(); ++i)
          for (Index f = 0; f < omega.rows(); ++f)
            phi(i, f) =
                std::exp(std::sqrt(s) * omega.row(f).dot(x.row(i)) - 0.5 * s * x.row(i).squaredNorm()) /
                std::sqrt(double(omega.rows()));
        return phi;
      };
      const Matrix<double> product = features(q) * features(k).transpose();
      out.approximate = (product.array().colwise() / product.rowwise().sum().array()).matrix();
      break;
    }
    case Method::linformer: {
      const auto [e, f] = linformer_projections(o.linformer.projected, q.rows(), o.linformer.seed);
      out.approximate = naive_softmax(q, e * k, s) * f;
      break;
    }
    case Method::exact:
      out.output = normalized_output(g, v);
      return out;
  }
  out.reference = attention;
  out.output = out.approximate * v;
  return out;
}

/// |actual − expected| ≤ tol·max(|expected|, scale); both NaN counts as equal.
bool near(double actual, double expected, double tol, double scale = 0) {
  if (std::isnan(expected)) return std::isnan(actual);
  return std::abs(actual - expected) <= tol * std::max(std::abs(expected), scale);
}

/// Relative accuracy of a point's values in T against the double oracles (the float kernels carry entry
/// errors of a few eps_f, amplified by the conditioning of the m×m cores here).
template <class T>
double accuracy() {
  return std::is_same_v<T, float> ? 2e-3 : 1e-9;
}

}  // namespace

TEST_CASE_TEMPLATE("every method's point equals independent dense oracles", T, float, double) {
  const Index n = 96, d = 8, dv = 4, m = 6;
  const Head<T> head = random_head<T>(n, d, dv, 5);
  HeadEvaluator<T> evaluator(head, EvaluationOptions{});
  for (const Kernel& kernel : {Kernel::exponential(1 / std::sqrt(8.0)), Kernel::laplacian(4.0)}) {
    const ApproximationOptions options = method_options(kernel, m);
    for (Method method : all_methods) {
      if (error_matrix(method) == ErrorMatrix::attention && kernel.type != KernelType::exponential) continue;
      CAPTURE(kernel.label());
      CAPTURE(to_string(method));
      const PointResult point = evaluator.evaluate(method, options);
      const Oracle expected = oracle(method, head, options);
      const Matrix<double> q = head.q.template cast<double>(), k = head.k.template cast<double>();
      // O = (GV) ⊘ (G1) for every kernel (softmax attention for the exponential one).
      const Matrix<double> exact_output =
          normalized_output(naive_kernel<double>(q, k, kernel), head.v.template cast<double>());
      const double tol = accuracy<T>();
      CHECK(point.error_matrix == error_matrix(method));
      CHECK_FALSE(point.matrix_free);
      const double largest_logit = kernel.param * (q * k.transpose()).maxCoeff();
      CHECK(point.log_shift ==
            doctest::Approx(kernel.type == KernelType::exponential ? largest_logit : 0).epsilon(1e-6));
      const Matrix<double> output_error = exact_output - expected.output;
      // The outputs carry the rounding of the m×m core's pseudoinverse: compared to a floor of 1e-3.
      CHECK(near(point.output_relative_error, output_error.norm() / exact_output.norm(), 10 * tol, 1e-3));
      CHECK(near(point.output_max_error, output_error.cwiseAbs().maxCoeff(), 10 * tol, 1e-3));
      CHECK(near(point.output_mean_abs_error, output_error.cwiseAbs().mean(), 10 * tol, 1e-3));
      if (method == Method::exact) {
        CHECK(std::isnan(point.spectral_error));
        CHECK(std::isnan(point.frobenius_error));
        CHECK_FALSE(point.pinv_status.has_value());
        continue;
      }
      const Matrix<double> error = expected.reference - expected.approximate;
      const double reference_norm = norm2(expected.reference);
      CHECK(near(point.spectral_error, norm2(error), tol, reference_norm));
      CHECK(near(point.relative_spectral_error, norm2(error) / reference_norm, tol, 1));
      CHECK(near(point.frobenius_error, error.norm(), tol, expected.reference.norm()));
      const bool has_pinv = method != Method::performer && method != Method::linformer;
      CHECK(point.pinv_status.has_value() == has_pinv);
      if (has_pinv) CHECK(*point.pinv_status == PinvStatus::converged);
      CHECK(point.landmark_terms_converged.has_value() == (method == Method::pnp_nystra));
      if (method != Method::pnp_nystra) {
        CHECK(std::isnan(point.sigma1_ext));
        CHECK(std::isnan(point.theorem2_bound));
        CHECK(point.landmark_seconds == 0);
        continue;
      }
      // The Lemma 2.1 terms of the same landmarks (docs/mathematics.md §3).
      const Landmarks<T> marks = select_landmarks<T>(head.q, head.k, options.pnp_nystra.landmarks, Kernel{});
      const Matrix<double> qb = marks.q.template cast<double>(), kb = marks.k.template cast<double>();
      const Matrix<double> ga = naive_kernel<double>(qb, kb, kernel),
                           gu = naive_kernel<double>(qb, k, kernel), gl = naive_kernel<double>(q, kb, kernel);
      Matrix<double> extended(n + m, n + m);
      extended << ga, gu, gl, expected.reference;
      const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(extended).singularValues();
      const Vector<double> core = Eigen::JacobiSVD<Matrix<double>>(ga).singularValues();
      const double condition = core(0) / core(m - 1);
      const double big_k = (1 + norm2(gl * ga.inverse())) * (1 + norm2(ga.inverse() * gu));
      CHECK(*point.landmark_terms_converged);
      CHECK(near(point.sigma1_ext, sigma(0), tol));
      CHECK(near(point.sigma_m1_ext, sigma(m), tol, 1e-6 * sigma(0)));
      CHECK(near(point.sigma_m_core, core(m - 1), tol * condition, 1e-6 * core(0)));
      CHECK(near(point.theorem3_k, big_k, tol * condition * condition));
      // σ(G̃) from a full SVD (N + m below the dense limit): the margin is the rounding floor alone.
      const double margin = sigma_m1_margin<T>(n, m, sigma(0), 0);
      CHECK(near(point.sigma_m1_margin, margin, tol));
      const BoundReport bounds =
          evaluate_bounds({sigma(0), sigma(m), core(m - 1), norm2(error), big_k, margin});
      CHECK(near(point.bound_ratio, bounds.ratio, tol * condition));
      CHECK(near(point.theorem2_bound, bounds.theorem2, tol * condition * condition));
      CHECK(near(point.c_emp, bounds.c_emp, tol * condition));
      CHECK(point.bounds_hold == bounds.holds(bound_slack<T>(n, m, sigma(0), core(m - 1))));
      CHECK(point.pinv_residual <= 1e3 * tol * condition);
      CHECK(point.landmark_seconds > 0);
    }
    CHECK(evaluator.reference(kernel).g_norm2 > 0);
  }
}

TEST_CASE(
    "bounds_hold checks Lemma 2.1 where Ĝ is G_L G_A⁺ G_U, within the rounding a solve with G_A allows") {
  // m = N: the landmarks are the tokens, G̃ has rank N, σ_{m+1}(G̃) is rounding and Ĝ = G (Corollary 2.2), so
  // every applicable bound is near 0 and ‖E‖₂ is the rounding of G_L G_A⁺ G_U. For tokens of d = 2 the core
  // is ill conditioned and that rounding is eps·κ(G_A)·σ₁, far above eps·σ₁.
  const Index n = 30;
  const Head<double> head = random_head<double>(n, 2, 0, 7, 1.0);
  HeadEvaluator<double> evaluator(head, EvaluationOptions{});
  ApproximationOptions options;
  options.kernel = Kernel::exponential(1.0);
  options.pnp_nystra.landmarks.count = n;
  const PointResult exact = evaluator.evaluate(Method::pnp_nystra, options);
  const double condition = exact.sigma1_ext / exact.sigma_m_core;
  REQUIRE(condition > 1e8);
  REQUIRE(std::isfinite(exact.theorem3_bound));
  // Beyond a slack of eps·σ₁ (the bound is rounding), within eps·κ·σ₁.
  CHECK(exact.spectral_error > exact.theorem3_bound + 1e-10 * (exact.theorem3_bound + exact.sigma1_ext));
  CHECK(exact.spectral_error < 2 * n * std::numeric_limits<double>::epsilon() * condition * exact.sigma1_ext);
  CHECK(exact.bounds_hold);

  // Ĝ of other pseudoinverses and of the clamped kernel is not the lemma's: the bounds are reported for
  // comparison, and nothing is checked against them.
  ApproximationOptions razavi = options;
  razavi.pnp_nystra.pinv.method = PinvMethod::razavi;
  razavi.pnp_nystra.pinv.iterations = 1;
  ApproximationOptions clamped = options;
  clamped.pnp_nystra.stabilization = Stabilization::clamped;
  clamped.pnp_nystra.clamp_threshold = -1;
  for (const auto& other : {razavi, clamped}) {
    const PointResult point = evaluator.evaluate(Method::pnp_nystra, other);
    CHECK(point.theorem3_bound == exact.theorem3_bound);
    CHECK(point.spectral_error > 1e-3 * exact.sigma1_ext);
    CHECK(point.bounds_hold);
  }
}

TEST_CASE_TEMPLATE("every method: dense, Lanczos and matrix-free paths agree", T, float, double) {
  // N = 120 < dense_svd_limit: the default path takes ‖E‖₂ by Lanczos on the stored E and σ(G̃) by full SVDs;
  // dense_svd_limit = 0 sends σ(G̃) through Lanczos too; matrix_free evaluates G in row panels
  // (Frobenius norms accumulated there too).
  const Head<T> head = random_head<T>(120, 6, 3, 9);
  EvaluationOptions lanczos;
  lanczos.dense_svd_limit = 0;
  EvaluationOptions free = lanczos;
  free.matrix_free = true;
  free.panel_rows = 32;
  HeadEvaluator<T> dense_evaluator(head, {}), lanczos_evaluator(head, lanczos), free_evaluator(head, free);
  // Float products differ from double ones by a few eps_f relative to ‖G‖.
  const double tol = std::is_same_v<T, float> ? 1e-4 : 1e-9;
  for (const Kernel& kernel : {Kernel::exponential(0.4), Kernel::laplacian(3.0)}) {
    const ApproximationOptions options = method_options(kernel, 6);
    for (Method method : all_methods) {
      if (error_matrix(method) == ErrorMatrix::attention && kernel.type != KernelType::exponential) continue;
      CAPTURE(kernel.label());
      CAPTURE(to_string(method));
      const PointResult expected = dense_evaluator.evaluate(method, options);
      const double scale =
          method == Method::exact ? 0 : expected.spectral_error / expected.relative_spectral_error;
      for (auto* evaluator : {&lanczos_evaluator, &free_evaluator}) {
        const PointResult p = evaluator->evaluate(method, options);
        CHECK(p.matrix_free == (evaluator == &free_evaluator));
        CHECK(near(p.spectral_error, expected.spectral_error, tol, scale));
        CHECK(near(p.relative_spectral_error, expected.relative_spectral_error, tol, 1));
        CHECK(near(p.frobenius_error, expected.frobenius_error, tol, scale));
        CHECK(near(p.output_relative_error, expected.output_relative_error, tol, 1));
        CHECK(near(p.sigma1_ext, expected.sigma1_ext, tol));
        // σ_{m+1}(G̃) by Lanczos on G̃ᵀG̃ carries an absolute error of about eps·σ₁²/σ_{m+1}.
        CHECK(near(p.sigma_m1_ext, expected.sigma_m1_ext, tol,
                   1e3 * expected.sigma1_ext * expected.sigma1_ext / expected.sigma_m1_ext * 1e-13));
        // Its margin: the Lanczos certificate, at least the rounding floor; theorem 1 is taken at σ̄.
        if (method == Method::pnp_nystra) {
          CHECK(p.sigma_m1_margin >= rounding_factor<T>(120, 6) * p.sigma1_ext);
          CHECK(std::isnan(p.theorem1_bound) == !(p.sigma_m_core > p.sigma_m1_ext + p.sigma_m1_margin));
        }
        CHECK(p.pinv_status == expected.pinv_status);
      }
    }
  }
  CHECK(free_evaluator.reference(Kernel::exponential(0.4)).g.size() == 0);
}

TEST_CASE_TEMPLATE(
    "equal and zero tokens: every path recovers G exactly, matrix-free too (a zero error operator)", T, float,
    double) {
  // Equal tokens make G = e^{s‖q‖²}·11ᵀ (rank 1) and every landmark equal: Ĝ = G to rounding, and for zero
  // tokens exactly, so E = G − Ĝ is the zero operator. Lanczos on it used to start from 0/0 (Spectra) and
  // throw; the matrix-free path must give what the dense one gives.
  for (const double value : {0.0, 0.5}) {
    CAPTURE(value);
    Head<T> head = random_head<T>(90, 6, 3, 13);
    head.q.setConstant(T(value));
    head.k.setConstant(T(value));
    EvaluationOptions free;
    free.matrix_free = true;
    HeadEvaluator<T> dense_evaluator(head, {}), free_evaluator(head, free);
    const ApproximationOptions options = method_options(Kernel::exponential(0.4), 4);
    for (Method method : {Method::pnp_nystra, Method::nystromformer, Method::symmetric_nystrom}) {
      CAPTURE(to_string(method));
      const PointResult expected = dense_evaluator.evaluate(method, options);
      const PointResult p = free_evaluator.evaluate(method, options);
      CHECK(p.matrix_free);
      CHECK(expected.relative_spectral_error <= tolerance<T>(90));
      CHECK(p.relative_spectral_error <= tolerance<T>(90));
      CHECK(p.output_relative_error <= tolerance<T>(90));
      // σ_{m+1}(G̃) of the Lemma 2.1 terms: PnP-Nystra only, at G̃'s rounding floor (G̃ has rank 1).
      CHECK(std::isnan(p.sigma_m1_ext) == (method != Method::pnp_nystra));
      if (method == Method::pnp_nystra) CHECK(p.sigma_m1_ext <= tolerance<T>(90) * p.sigma1_ext);
    }
  }
}

namespace {

using LongMatrix = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;

/// exp(s·XYᵀ) in long double (finite for logits far beyond double's exp range).
template <class T>
LongMatrix long_kernel(const Matrix<T>& x, const Matrix<T>& y, double s) {
  const LongMatrix logits =
      (x.template cast<long double>() * y.template cast<long double>().transpose()) * (long double)s;
  return logits.array().exp().matrix();
}

long double long_norm2(const LongMatrix& a) {
  return Eigen::JacobiSVD<LongMatrix>(a).singularValues()(0);
}

/// A head of n tokens whose logits are those of Gaussian tokens plus a common offset, s·qᵀk = L + s·q̃ᵀk̃,
/// with the largest of them `largest` (a last coordinate √(|L|/s) on every token, negated on the keys for
/// L < 0): G = e^{L}·G̃, the situation of real heads with large logits. K = Q makes G̃ positive definite, so
/// Nyström approximates it well.
template <class T>
Head<T> large_logit_head(Index n, double largest, Kernel& kernel) {
  const Index d = 7;
  kernel = Kernel::exponential(1 / std::sqrt(double(d)));
  Head<double> generic = random_head<double>(n, d - 1, 3, 41);
  generic.k = generic.q;
  const double offset = largest - kernel.param * (generic.q * generic.k.transpose()).maxCoeff();  // L
  const double coordinate = std::sqrt(std::abs(offset) / kernel.param);
  Head<T> head;
  head.q.resize(n, d);
  head.k.resize(n, d);
  head.q << generic.q.template cast<T>(), Vector<T>::Constant(n, T(coordinate));
  head.k << generic.k.template cast<T>(), Vector<T>::Constant(n, T(offset < 0 ? -coordinate : coordinate));
  head.v = generic.v.template cast<T>();
  return head;
}

}  // namespace

TEST_CASE_TEMPLATE(
    "logits of 300-700: every absolute quantity scaled back from e^(-c) G, checked in long double", T, float,
    double) {
  // The long double oracle forms G = exp(s QKᵀ) itself (entries up to e^700, far beyond double's Gram
  // products and float's exp), Ĝ from the same landmarks, and full SVDs: nothing shifted, independent of the
  // library.
  const Index n = 64, m = 5;
  for (double largest : {300.0, 500.0, 700.0}) {
    CAPTURE(largest);
    Kernel kernel;
    const Head<T> head = large_logit_head<T>(n, largest, kernel);
    ApproximationOptions options = method_options(kernel, m);
    options.pnp_nystra.landmarks.strategy =
        LandmarkStrategy::step;  // rows of Q and K: a well-conditioned G_A
    for (bool matrix_free : {false, true}) {
      CAPTURE(matrix_free);
      EvaluationOptions evaluation;
      evaluation.matrix_free = matrix_free;
      HeadEvaluator<T> evaluator(head, evaluation);
      const PointResult point = evaluator.evaluate(Method::pnp_nystra, options);
      CHECK(point.log_shift == doctest::Approx(largest).epsilon(1e-5));
      const Landmarks<T> marks = select_landmarks<T>(head.q, head.k, options.pnp_nystra.landmarks, Kernel{});
      const double s = kernel.param;
      const LongMatrix g = long_kernel<T>(head.q, head.k, s), ga = long_kernel<T>(marks.q, marks.k, s),
                       gl = long_kernel<T>(head.q, marks.k, s), gu = long_kernel<T>(marks.q, head.k, s);
      Eigen::JacobiSVD<LongMatrix> core(ga, Eigen::ComputeFullU | Eigen::ComputeFullV);
      const LongMatrix core_pinv =
          core.matrixV() * core.singularValues().cwiseInverse().asDiagonal() * core.matrixU().transpose();
      const LongMatrix error = g - gl * core_pinv * gu;
      LongMatrix extended(n + m, n + m);
      extended << ga, gu, gl, g;
      const auto sigma = Eigen::JacobiSVD<LongMatrix>(extended).singularValues();
      const long double g_norm = long_norm2(g), error_norm = long_norm2(error);
      const long double condition = core.singularValues()(0) / core.singularValues()(m - 1);
      // Logits computed in T carry absolute errors of about eps_T·largest, so entries of G carry relative
      // errors of that size; the error matrix amplifies them by the conditioning of G_A.
      const double tol =
          8 * std::numeric_limits<T>::epsilon() * largest * double(std::max<long double>(condition, 1));
      const auto check_absolute = [&](double actual, long double expected, long double scale) {
        CHECK(std::isfinite(actual));
        CHECK(std::abs((long double)actual - expected) <= tol * std::max(std::abs(expected), scale));
      };
      check_absolute(point.spectral_error, error_norm, g_norm);
      check_absolute(point.frobenius_error, error.norm(), g.norm());
      check_absolute(point.sigma1_ext, sigma(0), 0);
      check_absolute(point.sigma_m_core, core.singularValues()(m - 1), 0);
      CHECK(near(point.relative_spectral_error, double(error_norm / g_norm), tol, 1));
      CHECK(std::isfinite(point.sigma_m1_ext));
      // Theorem 2 = 2σ₁²σ_{m+1}/a² may itself exceed the double range (then +Inf); C_emp = ‖E‖a/σ_{m+1} and
      // C_emp/σ₁² follow from the other columns (degrees 1 and −1 in the scale).
      const long double theorem2 =
          2 * sigma(0) * sigma(0) * sigma(m) / (core.singularValues()(m - 1) * core.singularValues()(m - 1));
      if (theorem2 < std::numeric_limits<double>::max())
        CHECK(std::abs((long double)point.theorem2_bound - theorem2) <= 4 * tol * theorem2);
      else
        CHECK(std::isinf(point.theorem2_bound));
      CHECK(near(point.c_emp * (point.sigma_m1_ext / point.sigma_m_core), point.spectral_error, 1e-12));
      CHECK(near(point.c_emp_normalized * point.sigma1_ext * point.sigma1_ext, point.c_emp, 1e-12));
      // S and Ŝ do not depend on the scale: a softmax method against its double oracle.
      const PointResult softmax = evaluator.evaluate(Method::nystromformer, options);
      const Oracle expected = oracle(Method::nystromformer, head, options);
      const double softmax_error = norm2(expected.reference - expected.approximate);
      CHECK(near(softmax.spectral_error, softmax_error, tol, norm2(expected.reference)));
      CHECK(std::isfinite(softmax.output_relative_error));
    }
  }
}

TEST_CASE_TEMPLATE(
    "logits far below 0: analysed on e^(-c) G with c < 0, every relative quantity as at logits of 5", T,
    float, double) {
  // G = e^{L}·G̃ for the same G̃ at every L: below −½·log(max T) the entries' squares underflow (all of G from
  // −87 in float, −745 in double), and the relative error was NaN (0/0) or wrong. With c = L the analysed
  // κ_c is the same matrix at every L, up to the rounding of the logits in T (eps·|L|, amplified by G_A's
  // condition).
  const Index n = 64, m = 5;
  const auto point_at = [&](double largest, bool matrix_free) {
    Kernel kernel;
    const Head<T> head = large_logit_head<T>(n, largest, kernel);
    ApproximationOptions options = method_options(kernel, m);
    options.pnp_nystra.landmarks.strategy = LandmarkStrategy::step;
    EvaluationOptions evaluation;
    evaluation.matrix_free = matrix_free;
    return HeadEvaluator<T>(head, evaluation).evaluate(Method::pnp_nystra, options);
  };
  const bool is_float = std::is_same_v<T, float>;
  for (const bool matrix_free : {false, true}) {
    const PointResult expected = point_at(5, matrix_free);
    const double condition = expected.sigma1_ext / expected.sigma_m_core;  // ≥ G_A's: σ₁(G̃) ≥ σ₁(G_A)
    for (const double largest : {is_float ? -60.0 : -500.0, is_float ? -120.0 : -1000.0}) {
      CAPTURE(matrix_free);
      CAPTURE(largest);
      const PointResult point = point_at(largest, matrix_free);
      CHECK(point.log_shift == doctest::Approx(largest).epsilon(1e-5));
      const double tol = 8 * std::numeric_limits<T>::epsilon() * -largest * condition;
      CHECK(near(point.relative_spectral_error, expected.relative_spectral_error, tol, 1));
      CHECK(near(point.output_relative_error, expected.output_relative_error, tol, 1));
      CHECK(near(point.bound_ratio, expected.bound_ratio, tol, 1));
      CHECK(near(point.theorem3_k, expected.theorem3_k, tol, 1));
      // The absolute error, multiplied back by e^c in double, underflows there below c ≈ −745.
      const double scale = std::exp(largest - 5);
      if (scale >= std::numeric_limits<double>::min())
        CHECK(near(point.spectral_error / scale, expected.spectral_error, tol, expected.spectral_error));
      else
        CHECK(point.spectral_error < std::numeric_limits<double>::min());
    }
  }
}

TEST_CASE_TEMPLATE("logits whose exp overflows even in double are rejected naming the head and the logit", T,
                   float, double) {
  Kernel kernel;
  const Head<T> head = large_logit_head<T>(40, 720, kernel);
  HeadEvaluator<T> evaluator(head, {}, "/layers/07 batch 0 head 2");
  const auto options = method_options(kernel, 4);
  CHECK(throws_naming([&] { evaluator.evaluate(Method::pnp_nystra, options); }, "/layers/07 batch 0 head 2"));
  CHECK(throws_naming([&] { evaluator.evaluate(Method::pnp_nystra, options); }, "largest logit 72"));
  CHECK(throws_naming([&] { require_representable_kernel(head, kernel, "h2"); }, "h2"));
  Kernel small;
  const Head<T> fine = large_logit_head<T>(40, 700, small);
  CHECK_NOTHROW(require_representable_kernel(fine, small, "h2"));
  // Tokens without a head: an empty Q or K has no logits to bound, and is refused naming the shapes (the
  // maxima over its rows read past the end: the Python module's kernel_norm crashed on q of 0 rows).
  const Matrix<T> none(0, 3), one = Matrix<T>::Ones(1, 3);
  for (const Kernel& any : {small, Kernel::laplacian(2)}) {
    CHECK(throws_naming([&] { require_representable_kernel<T>(none, one, any, "kernel_norm"); },
                        "kernel_norm: empty tokens, q is 0x3 and k is 1x3"));
    CHECK(throws_naming([&] { require_representable_kernel<T>(one, none, any, "kernel_norm"); },
                        "kernel_norm: empty tokens, q is 1x3 and k is 0x3"));
  }
}

TEST_CASE("landmark terms above the dense limit equal a full SVD of G̃, flat and steep spectra") {
  // Flat: Gaussian tokens, σ_{m+1}(G̃)/σ₁ ≈ 0.1 (Lanczos on G̃ᵀG̃). Steep: rank-2 tokens plus 1e-4 noise,
  // σ_{m+1}/σ₁ far below gram_resolution (the full-SVD fallback).
  const Index n = 300, d = 8, m = 6;
  Head<double> flat = random_head<double>(n, d, 2, 21);
  Head<double> steep = random_head<double>(n, d, 2, 23);
  const Matrix<double> basis = random_matrix<double>(2, d, 25);
  steep.q = random_matrix<double>(n, 2, 26) * basis + 1e-4 * steep.q;
  steep.k = random_matrix<double>(n, 2, 27) * basis + 1e-4 * steep.k;
  for (const Head<double>* head : {&flat, &steep}) {
    const Kernel kernel = Kernel::exponential(1 / std::sqrt(double(d)));
    LandmarkOptions landmarks;
    landmarks.count = m;
    const EvaluationOptions evaluation;
    REQUIRE(n + m > evaluation.dense_svd_limit);
    const Landmarks<double> marks = select_landmarks<double>(head->q, head->k, landmarks, Kernel{});
    const LandmarkTerms terms = landmark_terms(*head, kernel, marks, evaluation);
    Matrix<double> extended(n + m, n + m);
    extended << naive_kernel<double>(marks.q, marks.k, kernel),
        naive_kernel<double>(marks.q, head->k, kernel), naive_kernel<double>(head->q, marks.k, kernel),
        naive_kernel<double>(head->q, head->k, kernel);
    const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(extended).singularValues();
    CAPTURE(sigma(m) / sigma(0));
    CHECK((head == &flat ? sigma(m) / sigma(0) > 1e-2 : sigma(m) / sigma(0) < 1e-6));
    CHECK(terms.converged);
    CHECK(near(terms.sigma1_ext, sigma(0), 1e-12));
    // Both paths carry an absolute error of a few eps·σ₁ at most.
    CHECK(std::abs(terms.sigma_m1_ext - sigma(m)) <= 1e-13 * sigma(0) + 1e-11 * sigma(m));
    // A log-shift c scales every term by e^{−c} (K is scale-free).
    const LandmarkTerms shifted = landmark_terms(*head, kernel.shifted(3.5), marks, evaluation);
    CHECK(near(shifted.sigma1_ext * std::exp(3.5), terms.sigma1_ext, 1e-12));
    CHECK(near(shifted.sigma_m_core * std::exp(3.5), terms.sigma_m_core, 1e-9));
    CHECK(near(shifted.theorem3_k, terms.theorem3_k, 1e-8));
  }
}

TEST_CASE("float heads are evaluated to float accuracy") {
  const Head<double> h = random_head<double>(64, 4, 2, 13);
  Head<float> head{h.q.cast<float>(), h.k.cast<float>(), h.v.cast<float>(), {8, 8}};
  ApproximationOptions options = method_options(Kernel::laplacian(4.0), 4);
  HeadEvaluator<float> single_evaluator(head, {});
  HeadEvaluator<double> double_evaluator(h, {});
  const PointResult single = single_evaluator.evaluate(Method::pnp_nystra, options);
  const PointResult twice = double_evaluator.evaluate(Method::pnp_nystra, options);
  CHECK(near(single.spectral_error, twice.spectral_error, 1e-3));
  CHECK(near(single.sigma_m_core, twice.sigma_m_core, 1e-4));
  // G̃ of a float head is the float kernel block, exact in double from there on. Each entry carries a relative
  // error of a few eps_f (token rounding times |exponent| ≤ 2 here, and exp), and G̃ is entrywise positive, so
  // ‖ΔG̃‖₂ ≤ c·eps_f·‖G̃‖₂ and by Weyl every σ_i moves by at most c·eps_f·σ₁.
  const double float_bound = 8 * std::numeric_limits<float>::epsilon() * twice.sigma1_ext;
  CHECK(std::abs(single.sigma1_ext - twice.sigma1_ext) <= float_bound);
  CHECK(std::abs(single.sigma_m1_ext - twice.sigma_m1_ext) <= float_bound);
}

TEST_CASE("landmark terms beside the point give the values of one after the other, float and double") {
  // n + m = 306: stored G̃ with single-threaded products, so the evaluator overlaps the terms.
  const Head<double> h = random_head<double>(300, 8, 4, 31);
  const Head<float> f{h.q.cast<float>(), h.k.cast<float>(), h.v.cast<float>(), {}};
  const ApproximationOptions options = method_options(Kernel::exponential(1 / std::sqrt(8.0)), 6);
  const EvaluationOptions evaluation;
  CHECK(overlap_landmark_terms<double>(300, 6, evaluation));
  const int before = threads();
  const auto both_ways = [&](const auto& head) {
    using Evaluator = HeadEvaluator<typename std::decay_t<decltype(head.q)>::Scalar>;
    set_threads(1);
    const PointResult serial = Evaluator(head, evaluation).evaluate(Method::pnp_nystra, options);
    set_threads(2);
    const PointResult overlapped = Evaluator(head, evaluation).evaluate(Method::pnp_nystra, options);
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
    CHECK(serial.elapsed_seconds >= serial.seconds);
    CHECK(serial.reference_seconds > 0);
    CHECK(serial.landmark_seconds > 0);
  };
  both_ways(h);
  both_ways(f);
}

TEST_CASE("the evaluator reuses its references, landmarks and terms across points") {
  const Head<double> head = random_head<double>(80, 4, 2, 51);
  HeadEvaluator<double> evaluator(head, {});
  ApproximationOptions options = method_options(Kernel::exponential(0.5), 5);
  const PointResult exact_pinv = evaluator.evaluate(Method::pnp_nystra, options);
  options.pnp_nystra.pinv = {PinvMethod::razavi, 4};
  const PointResult razavi = evaluator.evaluate(Method::pnp_nystra, options);
  // Same head and kernel, same landmarks: the shared computations are the cached ones.
  CHECK(razavi.reference_seconds == exact_pinv.reference_seconds);
  CHECK(razavi.landmark_seconds == exact_pinv.landmark_seconds);
  CHECK(razavi.sigma_m1_ext == exact_pinv.sigma_m1_ext);
  CHECK(*razavi.pinv_status != PinvStatus::non_finite);
  // A fresh evaluator gives the same values (the cache changes nothing but time).
  HeadEvaluator<double> fresh(head, {});
  CHECK(fresh.evaluate(Method::pnp_nystra, options).spectral_error == razavi.spectral_error);
}

TEST_CASE_TEMPLATE(
    "points that differ only in the pseudoinverse share factors and iterations: the values of fresh "
    "evaluators, bit for bit",
    T, float, double) {
  const Head<T> head = random_head<T>(90, 6, 3, 61);
  const EvaluationOptions evaluation;
  HeadEvaluator<T> evaluator(head, evaluation);
  // Each pair of points: the second continues the first's iteration, or starts over (fewer steps, another
  // method), or leaves it (exact).
  const std::pair<PinvMethod, int> sequence[] = {
      {PinvMethod::exact, 6},         {PinvMethod::razavi, 2}, {PinvMethod::razavi, 4},
      {PinvMethod::razavi, 6},        {PinvMethod::razavi, 3}, {PinvMethod::newton_schulz, 5},
      {PinvMethod::newton_schulz, 9}, {PinvMethod::exact, 6},  {PinvMethod::razavi, 6}};
  PointDescription description;
  description.n = head.tokens();
  description.d = head.q.cols();
  for (const Method method : {Method::pnp_nystra, Method::symmetric_nystrom})
    for (const Stabilization stabilization :
         {Stabilization::row_max, Stabilization::clamped, Stabilization::none}) {
      if (method == Method::symmetric_nystrom && stabilization == Stabilization::row_max) continue;
      for (const auto& [pinv_method, iterations] : sequence) {
        CAPTURE(to_string(method));
        CAPTURE(to_string(stabilization));
        CAPTURE(to_string(pinv_method));
        CAPTURE(iterations);
        ApproximationOptions options = method_options(Kernel::exponential(0.4), 7);
        NystromOptions& nystrom =
            method == Method::pnp_nystra ? options.pnp_nystra : options.symmetric_nystrom;
        nystrom.stabilization = stabilization;
        nystrom.pinv = {.method = pinv_method, .iterations = iterations};
        const PointResult reused = evaluator.evaluate(method, options);
        const PointResult fresh = HeadEvaluator<T>(head, evaluation).evaluate(method, options);
        CHECK(reused.seconds > 0);
        description.method = method;
        description.options = options;
        const std::vector<RecordCell> a = point_record(description, reused),
                                      b = point_record(description, fresh);
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          const std::string& name = a[i].column.name;
          if (name.ends_with("seconds")) continue;
          CAPTURE(name);
          const double* x = std::get_if<double>(&a[i].value);
          const double* y = std::get_if<double>(&b[i].value);
          if (x && y)
            CHECK_MESSAGE((*x == *y || (std::isnan(*x) && std::isnan(*y))), *x << " vs " << *y);
          else
            CHECK(a[i].value == b[i].value);
        }
      }
    }
}

TEST_CASE("landmark terms overlap the point only where G̃ is stored and its products stay on one thread") {
  const EvaluationOptions evaluation;
  CHECK(overlap_landmark_terms<double>(1024, 16, evaluation));
  CHECK(overlap_landmark_terms<float>(2000, 47, evaluation));  // (n + m)² just below detail::parallel_work
  CHECK_FALSE(overlap_landmark_terms<float>(2000, 48, evaluation));  // 2048² = parallel_work
  EvaluationOptions free = evaluation;
  free.matrix_free = true;
  CHECK_FALSE(overlap_landmark_terms<double>(1024, 16, free));
  free.matrix_free = false;
  free.memory_budget = 3.0 * 1024 * 1024 * 8 - 1;  // dense double 1024-token head no longer fits
  CHECK_FALSE(overlap_landmark_terms<double>(1024, 16, free));
  CHECK(overlap_landmark_terms<float>(1024, 16, free));
}

TEST_CASE(
    "the record of a point: every column once, typed, performer and linformer sizes in their own columns") {
  PointDescription point;
  point.layer = "03";
  point.n = 64;
  point.d = 8;
  point.options = method_options(Kernel::exponential(0.25), 6);
  std::set<std::string> names;
  for (const Column& column : point_columns()) CHECK(names.insert(column.name).second);
  const auto cell = [&](Method method, const std::string& name) {
    point.method = method;
    for (const auto& c : point_record(point, PointResult{}))
      if (c.column.name == name) return c.value;
    FAIL("no column " << name);
    return Cell{};
  };
  CHECK(std::get<std::int64_t>(cell(Method::pnp_nystra, "landmarks")) == 6);
  CHECK(std::get<std::int64_t>(cell(Method::performer, "landmarks")) == 0);
  CHECK(std::get<std::int64_t>(cell(Method::performer, "features")) == 24);
  CHECK(std::get<std::int64_t>(cell(Method::linformer, "projected")) == 6);
  CHECK(std::get<std::int64_t>(cell(Method::linformer, "features")) == 0);
  CHECK(std::get<std::string>(cell(Method::exact, "pinv")) == "none");
  CHECK(std::get<std::string>(cell(Method::performer, "pinv_status")) == "none");
  CHECK(std::get<std::int64_t>(cell(Method::cur, "landmark_terms_converged")) == -1);
  CHECK(std::get<std::string>(cell(Method::nystromformer, "strategy")) == "segment-means");
  CHECK(std::get<std::string>(cell(Method::cur, "error_matrix")) == "none");  // of an empty PointResult
  for (const char* name : {"layer", "kernel", "landmarks", "features", "projected", "pinv", "method", "seed"})
    CHECK(std::any_of(point_columns().begin(), point_columns().end(),
                      [&](const Column& c) { return c.name == name && c.parameter; }));
}

TEST_CASE("bad heads and options throw naming the value") {
  Head<double> head = random_head<double>(20, 4, 2, 17);
  head.k = random_matrix<double>(20, 5, 1);
  CHECK(throws_naming([&] { head.validate("head 3"); }, "head 3"));
  head = random_head<double>(20, 4, 2, 17);
  head.window = {3, 5};
  CHECK(throws_naming([&] { head.validate("h"); }, "3x5"));
  head.window = {4, 4};
  head.prefix_tokens = 4;
  CHECK_NOTHROW(head.validate("h"));       // 16 grid tokens after 4 prefix tokens
  head.window = {3, 6148914691236517211};  // 3 · 6148914691236517211 = 2⁶⁴ + 16 wraps around to 16
  CHECK(throws_naming([&] { head.validate("h"); }, "3x6148914691236517211"));
  head.window = {0, 16};  // one side 0 is neither a grid nor no grid
  CHECK(throws_naming([&] { head.validate("h"); }, "0x16"));
  head.window = {4, 4};
  head.prefix_tokens = 20;
  CHECK(throws_naming([&] { head.validate("h"); }, "prefix_tokens = 20"));
  head = random_head<double>(20, 4, 2, 17);
  head.v(0, 0) = NAN;
  CHECK(throws_naming([&] { HeadEvaluator<double>(head, {}); }, "V"));
  head = random_head<double>(20, 4, 2, 17);
  EvaluationOptions options;
  options.memory_budget = 0;
  CHECK(throws_naming([&] { HeadEvaluator<double>(head, options); }, "memory_budget = 0"));
  HeadEvaluator<double> evaluator(head, {});
  ApproximationOptions laplacian = method_options(Kernel::laplacian(2), 4);
  CHECK(throws_naming([&] { evaluator.evaluate(Method::performer, laplacian); }, "laplacian"));
  ApproximationOptions too_many = method_options(Kernel::exponential(0.5), 21);
  CHECK(throws_naming([&] { evaluator.evaluate(Method::pnp_nystra, too_many); }, "21"));
}

// --- The model's additive score term (Head::bias, `--reference model`) -------------------------------------

namespace {

/// A random N(0, 1) bias plus Swin's 0 / −100 mask between the two halves of the tokens (regions).
template <class T>
Matrix<T> bias_and_mask(Index n, std::uint64_t seed) {
  Matrix<T> bias = random_matrix<T>(n, n, seed);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < n; ++j)
      if ((i < n / 2) != (j < n / 2)) bias(i, j) -= T(100);
  return bias;
}

/// exp(φ(Q, K) + B) of the exact side, entry by entry in double (without a log-shift).
template <class T>
Matrix<double> naive_model_kernel(const Head<T>& head, const Kernel& kernel) {
  const Matrix<double> q = head.q.template cast<double>(), k = head.k.template cast<double>();
  const Matrix<double> phi = naive_kernel<double>(q, k, kernel).array().log().matrix();
  return (phi + head.bias.template cast<double>()).array().exp().matrix();
}

Matrix<double> row_normalized(const Matrix<double>& g) {
  return (g.array().colwise() / g.rowwise().sum().array()).matrix();
}

}  // namespace

TEST_CASE_TEMPLATE("with a bias and mask, the exact side is exp(s q k^T + B + M) against dense oracles", T,
                   float, double) {
  const Index n = 64, d = 8, dv = 4, m = 6;
  Head<T> head = random_head<T>(n, d, dv, 31);
  head.bias = bias_and_mask<T>(n, 41);
  EvaluationOptions forced;
  forced.matrix_free = true;  // a head with a bias is stored whatever the budget
  for (const EvaluationOptions& evaluation : {EvaluationOptions{}, forced}) {
    HeadEvaluator<T> evaluator(head, evaluation);
    for (const Kernel& kernel : {Kernel::exponential(1 / std::sqrt(8.0)), Kernel::laplacian(4.0)}) {
      const ApproximationOptions options = method_options(kernel, m);
      const Matrix<double> g = naive_model_kernel(head, kernel);  // G of the model (unshifted)
      const Matrix<double> s = row_normalized(g);
      const Matrix<double> exact_output = s * head.v.template cast<double>();
      const Matrix<double> q = head.q.template cast<double>(), k = head.k.template cast<double>();
      const double largest =
          (naive_kernel<double>(q, k, kernel).array().log().matrix() + head.bias.template cast<double>())
              .maxCoeff();
      const double kernel_shift = kernel.type == KernelType::exponential
                                      ? std::max(0.0, kernel.param * (q * k.transpose()).maxCoeff())
                                      : 0.0;
      for (Method method : all_methods) {
        if (error_matrix(method) == ErrorMatrix::attention && kernel.type != KernelType::exponential)
          continue;
        CAPTURE(kernel.label());
        CAPTURE(to_string(method));
        const PointResult point = evaluator.evaluate(method, options);
        const Oracle expected = oracle(method, head, options);  // the approximations see q and k alone
        const double tol = accuracy<T>();
        CHECK_FALSE(point.matrix_free);
        CHECK(point.log_shift == doctest::Approx(std::max(kernel_shift, largest)).epsilon(1e-6));
        const Matrix<double> output_error = exact_output - expected.output;
        CHECK(near(point.output_relative_error, output_error.norm() / exact_output.norm(), 10 * tol, 1e-3));
        CHECK(near(point.output_max_error, output_error.cwiseAbs().maxCoeff(), 10 * tol, 1e-3));
        CHECK(near(point.output_mean_abs_error, output_error.cwiseAbs().mean(), 10 * tol, 1e-3));
        if (method == Method::exact) continue;
        const Matrix<double>& reference = error_matrix(method) == ErrorMatrix::kernel ? g : s;
        const Matrix<double> error = reference - expected.approximate;
        const double reference_norm = norm2(reference);
        CHECK(near(point.spectral_error, norm2(error), tol, reference_norm));
        CHECK(near(point.relative_spectral_error, norm2(error) / reference_norm, tol, 1));
        CHECK(near(point.frobenius_error, error.norm(), tol, reference.norm()));
        if (method != Method::pnp_nystra) continue;
        // G̃ = [[G_A, G_U], [G_L, G]] with the model's G (docs/mathematics.md §3).
        const Landmarks<T> marks =
            select_landmarks<T>(head.q, head.k, options.pnp_nystra.landmarks, Kernel{});
        const Matrix<double> qb = marks.q.template cast<double>(), kb = marks.k.template cast<double>();
        Matrix<double> extended(n + m, n + m);
        extended << naive_kernel<double>(qb, kb, kernel), naive_kernel<double>(qb, k, kernel),
            naive_kernel<double>(q, kb, kernel), g;
        const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(extended).singularValues();
        CHECK(near(point.sigma1_ext, sigma(0), tol));
        CHECK(near(point.sigma_m1_ext, sigma(m), tol, 1e-6 * sigma(0)));
        CHECK(point.bounds_hold);
      }
      const HeadReference<T>& reference = evaluator.reference(kernel);
      CHECK(near(reference.g_norm2 * std::exp(reference.kernel.log_shift), norm2(g), accuracy<T>()));
    }
  }
}

TEST_CASE_TEMPLATE("a zero bias reproduces the kernel reference to rounding", T, float, double) {
  const Index n = 48, m = 5;
  const Head<T> plain = random_head<T>(n, 6, 3, 51);
  Head<T> zero = plain;
  zero.bias = Matrix<T>::Zero(n, n);
  HeadEvaluator<T> kernel_side(plain, {}), model_side(zero, {});
  const ApproximationOptions options = method_options(Kernel::exponential(0.4), m);
  const double tol = 4 * tolerance<T>(n);
  for (Method method : all_methods) {
    CAPTURE(to_string(method));
    const PointResult a = kernel_side.evaluate(method, options), b = model_side.evaluate(method, options);
    CHECK(b.log_shift == a.log_shift);
    const double scale = kernel_side.reference(options.kernel).g_norm2 * std::exp(a.log_shift);
    CHECK(near(b.spectral_error, a.spectral_error, tol,
               error_matrix(method) == ErrorMatrix::kernel ? scale : 1));
    CHECK(near(b.relative_spectral_error, a.relative_spectral_error, tol, 1));
    CHECK(near(b.output_relative_error, a.output_relative_error, tol, 1));
    CHECK(near(b.output_max_error, a.output_max_error, tol, 1));
    CHECK(near(b.sigma1_ext, a.sigma1_ext, tol));
    CHECK(near(b.sigma_m1_ext, a.sigma_m1_ext, tol, tol * a.sigma1_ext));
  }
}

TEST_CASE_TEMPLATE("huge negative masks and a row masked but for one entry stay finite", T, float, double) {
  const Index n = 40;
  Head<T> head = random_head<T>(n, 6, 3, 61);
  head.bias = Matrix<T>::Zero(n, n);
  head.bias.row(0).setConstant(T(-1e4));  // row 0 attends to token 7 alone
  head.bias(0, 7) = 0;
  for (Index i = 1; i < n; ++i)
    for (Index j = 0; j < n; ++j)
      if ((i % 3) != (j % 3)) head.bias(i, j) = -std::numeric_limits<T>::infinity();  // −∞ is allowed
  HeadEvaluator<T> evaluator(head, {});
  const ApproximationOptions options = method_options(Kernel::exponential(0.4), 4);
  for (Method method : all_methods) {
    CAPTURE(to_string(method));
    const PointResult point = evaluator.evaluate(method, options);
    CHECK(std::isfinite(point.output_relative_error));
    CHECK(std::isfinite(point.output_max_error));
    if (method == Method::exact) continue;
    CHECK(std::isfinite(point.spectral_error));
    CHECK(std::isfinite(point.relative_spectral_error));
  }
  // The exact output's row 0 is V's row 7 (S(0, 7) = 1); O = S V of the oracle elsewhere.
  const Matrix<T>& output = evaluator.reference(options.kernel).output;
  CHECK(all_finite(output));
  CHECK((output.row(0) - head.v.row(7)).norm() <= tolerance<T>(n) * head.v.row(7).norm());
  const Matrix<double> expected =
      row_normalized(naive_model_kernel(head, options.kernel)) * head.v.template cast<double>();
  CHECK(relative_difference(output, expected) <= tolerance<T>(n));
}

TEST_CASE("bad biases throw naming the value") {
  Head<double> head = random_head<double>(20, 4, 2, 17);
  head.bias = Matrix<double>::Zero(20, 19);
  CHECK(throws_naming([&] { HeadEvaluator<double>(head, {}, "head 2"); }, "bias is 20x19"));
  head.bias = Matrix<double>::Zero(20, 20);
  head.bias(3, 4) = NAN;
  CHECK(throws_naming([&] { head.validate("h"); }, "bias(3, 4)"));
  head.bias(3, 4) = INFINITY;
  CHECK(throws_naming([&] { head.validate("h"); }, "bias(3, 4)"));
  head.bias(3, 4) = 0;
  head.bias.row(5).setConstant(-INFINITY);
  CHECK(throws_naming([&] { head.validate("h"); }, "row 5 of bias + mask is -inf throughout"));
  head.bias.row(5).setZero();
  head.bias(2, 2) = 800;  // exp(800) overflows double: no shift recovers G
  HeadEvaluator<double> evaluator(head, {}, "head 2");
  CHECK(throws_naming([&] { evaluator.evaluate(Method::exact, method_options(Kernel::exponential(0.5), 4)); },
                      "head 2"));
  CHECK(throws_naming([&] { require_representable_kernel(head, Kernel::laplacian(2), "head 2"); }, "bias"));
}
