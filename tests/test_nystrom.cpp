#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <utility>

#include "nystrom/evaluation.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// Options for generalized Nyström with segment means, the exact pseudoinverse and the given stabilization.
NystromOptions options_for(const Kernel& kernel, Index m, Stabilization stabilization) {
  NystromOptions options;
  options.kernel = kernel;
  options.landmarks.strategy = LandmarkStrategy::segment_means;
  options.landmarks.count = m;
  options.stabilization = stabilization;
  return options;
}

/// Tokens constant on m contiguous blocks of N/m rows (N divisible by m): rank(G̃) = m with segment means.
template <class T>
Matrix<T> blockwise_constant(Index n, Index d, Index m, std::uint64_t seed) {
  const Matrix<T> values = random_matrix<T>(m, d, seed);
  Matrix<T> out(n, d);
  for (Index i = 0; i < n; ++i) out.row(i) = values.row(i / (n / m));
  return out;
}

/// The oracle Ĝ = G_L G_A⁺ G_U from naive kernel blocks and a JacobiSVD pseudoinverse, in double.
Matrix<double> naive_nystrom(const Matrix<double>& Q, const Matrix<double>& K, const Matrix<double>& Qbar,
                             const Matrix<double>& Kbar, const Kernel& kernel) {
  const Matrix<double> core = naive_kernel<double>(Qbar, Kbar, kernel);
  return naive_kernel<double>(Q, Kbar, kernel) * dense_pinv(core, 1e-15) *
         naive_kernel<double>(Qbar, K, kernel);
}

/// The condition number σ₁/σ_m of a square matrix (JacobiSVD in double).
double condition(const Matrix<double>& a) {
  const Vector<double> s = Eigen::JacobiSVD<Matrix<double>>(a).singularValues();
  return s(0) / s(s.size() - 1);
}

/// Algorithm 1's output from the factors against the dense oracle (Ĝ V) ⊘ (Ĝ 1) in double (the clamped
/// variant adds its 1e-12 to the row sums), to n·m·eps times the core's condition number.
template <class T>
void check_algorithm1(const NystromFactors<T>& f, const Matrix<T>& V, Stabilization stabilization) {
  const Index n = V.rows(), m = f.core.rows();
  const Matrix<double> G = f.dense().template cast<double>();
  Vector<double> rowsum = G.rowwise().sum();
  if (stabilization == Stabilization::clamped) rowsum.array() += 1e-12;
  const Matrix<double> expected =
      ((G * V.template cast<double>()).array().colwise() / rowsum.array()).matrix();
  CHECK(relative_difference(nystrom_attention<T>(f, V), expected) <=
        tolerance<T>(n * m) * condition(f.core.template cast<double>()));
}

/// Every member of two sets of factors is the same, bit for bit.
template <class T>
void check_same_factors(const NystromFactors<T>& a, const NystromFactors<T>& b) {
  CHECK(a.left == b.left);
  CHECK(a.upper == b.upper);
  CHECK(a.core == b.core);
  CHECK(a.left_log_scale == b.left_log_scale);
  CHECK(a.upper_log_scale == b.upper_log_scale);
  CHECK(a.pinv.z == b.pinv.z);
  CHECK(a.pinv.rank == b.pinv.rank);
  CHECK(a.landmarks.q == b.landmarks.q);
  CHECK(a.landmarks.k == b.landmarks.k);
  CHECK(a.options.stabilization == b.options.stabilization);
}

}  // namespace

TEST_CASE("stabilization names round-trip and unknown names throw") {
  for (auto s : {Stabilization::none, Stabilization::row_max, Stabilization::clamped})
    CHECK(stabilization_from_string(to_string(s)) == s);
  CHECK(throws_naming([] { stabilization_from_string("rowmax"); }, "rowmax"));
}

TEST_CASE("Corollary 2.2: blockwise-constant tokens with segment means are recovered exactly") {
  const Index n = 96, d = 6, m = 8;
  const Matrix<double> Q = blockwise_constant<double>(n, d, m, 11);
  const Matrix<double> K = blockwise_constant<double>(n, d, m, 12);
  for (const Kernel& kernel : {Kernel::exponential(0.4), Kernel::laplacian(4.0)}) {
    for (auto stabilization : {Stabilization::none, Stabilization::row_max}) {
      CAPTURE(kernel.label());
      CAPTURE(to_string(stabilization));
      const auto f = generalized_nystrom<double>(Q, K, options_for(kernel, m, stabilization));
      const Matrix<double> G = naive_kernel<double>(Q, K, kernel);
      const Matrix<double> E = G - f.dense();
      CHECK(singular_values<double>(E)(0) / singular_values<double>(G)(0) <= 1e-10);
    }
  }
}

TEST_CASE_TEMPLATE(
    "Corollary 2.2 through a whole point: error and σ_{m+1}(G̃) at the rounding floor, bounds finite where "
    "their hypotheses are certain",
    T, float, double) {
  // Segment-constant tokens (uneven splits included) and m = blocks segment-means landmarks: rank(G̃) = m.
  // Sizes on both sides of the dense-SVD limit (256), so σ(G̃) comes from the full SVD, from Lanczos, or from
  // Lanczos falling back to the full SVD when it cannot certify σ_{m+1}.
  const double eps = std::numeric_limits<T>::epsilon();
  const EvaluationOptions evaluation;
  for (auto [n, d, m] : {std::array<Index, 3>{200, 4, 6}, {300, 12, 8}, {480, 12, 8}, {517, 7, 13}}) {
    for (std::uint64_t seed : {1, 2, 3}) {
      CAPTURE(n);
      CAPTURE(m);
      CAPTURE(seed);
      Head<T> head{segment_constant<T>(n, d, m, 10 * seed),
                   segment_constant<T>(n, d, m, 10 * seed + 1),
                   random_matrix<T>(n, 3, 10 * seed + 2),
                   {}};
      ApproximationOptions options;
      options.kernel = Kernel::exponential(1 / std::sqrt(double(d)));
      options.pnp_nystra = options_for(options.kernel, m, Stabilization::row_max);
      const PointResult point = HeadEvaluator<T>(head, evaluation).evaluate(Method::pnp_nystra, options);
      // Ĝ = G up to the rounding of G and of the products in T (1e-10 asked in double).
      CHECK(point.relative_spectral_error <= (std::is_same_v<T, double> ? 1e-10 : double(n) * eps));
      CHECK(point.sigma_m1_ext <= double(n + m) * eps * point.sigma1_ext);
      CHECK(point.sigma_m_core > 1e-8 * point.sigma1_ext);
      for (double value :
           {point.sigma1_ext, point.sigma_m1_ext, point.sigma_m_core, point.bound_ratio, point.theorem2_bound,
            point.theorem3_k, point.pinv_residual, point.output_relative_error})
        CHECK(std::isfinite(value));
      // Theorems 1 and 3 are taken at σ̄ = σ_{m+1}(G̃) + its margin, the rounding floor (N + m)·eps(T)·σ₁ of
      // G̃'s entries: in double both apply (a > 1e-8·σ₁ ≫ K·1e-13·σ₁); in float, where a true σ_{m+1} of 0
      // cannot be told from one of about 1e-5·σ₁, they apply only as far as a and K allow.
      CHECK(point.sigma_m1_margin == doctest::Approx(double(n + m) * eps * point.sigma1_ext).epsilon(1e-12));
      const double upper = point.sigma_m1_ext + point.sigma_m1_margin;
      CHECK(std::isfinite(point.theorem1_bound) == (point.sigma_m_core > upper));
      CHECK(std::isfinite(point.theorem3_bound) == (point.theorem3_k * upper < point.sigma_m_core));
      if (std::is_same_v<T, double>)
        CHECK((std::isfinite(point.theorem1_bound) && std::isfinite(point.theorem3_bound)));
      // Every applicable bound holds within bounds_hold's slack, max(1e-10, (N + m)·eps(T))·(B + σ₁): in
      // float the measured error is the rounding of G and Ĝ in float, far above 1e-10·σ₁.
      CHECK(point.bounds_hold);
      if (std::is_same_v<T, float>) CHECK(point.spectral_error > 1e-10 * point.sigma1_ext);
    }
  }
}

TEST_CASE_TEMPLATE("Ĝ.dense() equals G_L G_A⁺ G_U computed naively", T, float, double) {
  const Index n = 80, d = 8, m = 6;
  const Matrix<T> Q = random_matrix<T>(n, d, 21, 0.7);
  const Matrix<T> K = random_matrix<T>(n, d, 22, 0.7);
  for (const Kernel& kernel : {Kernel::exponential(0.35), Kernel::laplacian(4.0), Kernel::gaussian(2.0)}) {
    for (auto stabilization : {Stabilization::none, Stabilization::row_max}) {
      CAPTURE(kernel.label());
      CAPTURE(to_string(stabilization));
      const auto f = generalized_nystrom<T>(Q, K, options_for(kernel, m, stabilization));
      const Matrix<double> core = naive_kernel<double>(f.landmarks.q.template cast<double>(),
                                                       f.landmarks.k.template cast<double>(), kernel);
      const Matrix<double> expected =
          naive_nystrom(Q.template cast<double>(), K.template cast<double>(),
                        f.landmarks.q.template cast<double>(), f.landmarks.k.template cast<double>(), kernel);
      CHECK(relative_difference(f.dense(), expected) <= tolerance<T>(n) * condition(core));
    }
  }
}

TEST_CASE_TEMPLATE("apply and apply_transpose equal the dense products", T, float, double) {
  const Index n = 70, d = 5, m = 7;
  const Matrix<T> Q = random_matrix<T>(n, d, 31);
  const Matrix<T> K = random_matrix<T>(n, d, 32);
  const Vector<T> x = random_matrix<T>(n, 1, 33);
  for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
    CAPTURE(to_string(stabilization));
    const auto f = generalized_nystrom<T>(Q, K, options_for(Kernel::exponential(0.45), m, stabilization));
    const Matrix<T> dense = f.dense();
    Vector<T> y(n), z(n);
    f.apply(x.data(), y.data());
    f.apply_transpose(x.data(), z.data());
    // The two orders of evaluation differ by rounding amplified by the conditioning of the core.
    const double tol = tolerance<T>(n * m) * condition(f.core.template cast<double>());
    CHECK(relative_difference(y, dense * x) <= tol);
    CHECK(relative_difference(z, dense.transpose() * x) <= tol);
  }
}

TEST_CASE("row-max stabilized and unstabilized outputs agree for a nonsingular G_A") {
  const Index n = 128, d = 8, dv = 5, m = 8;
  const Matrix<double> Q = random_matrix<double>(n, d, 41, 2.0);  // logits of order 10: M_L, M_U matter
  const Matrix<double> K = random_matrix<double>(n, d, 42, 2.0);
  const Matrix<double> V = random_matrix<double>(n, dv, 43);
  const Kernel kernel = Kernel::exponential(1.0 / std::sqrt(8.0));
  const auto plain = generalized_nystrom<double>(Q, K, options_for(kernel, m, Stabilization::none));
  const auto scaled = generalized_nystrom<double>(Q, K, options_for(kernel, m, Stabilization::row_max));
  CAPTURE(condition(plain.core));
  REQUIRE(condition(plain.core) < 1e4);
  CHECK(relative_difference(nystrom_attention<double>(scaled, V), nystrom_attention<double>(plain, V)) <=
        1e-10);
  CHECK(relative_difference(scaled.dense(), plain.dense()) <= 1e-10);
  // The scaled factors are bounded by 1 in the rows that define the scales (PnP-Nystra eq. (8)).
  CHECK(scaled.left.maxCoeff() <= 1.0 + 1e-15);
  CHECK(scaled.upper.maxCoeff() <= 1.0 + 1e-15);
}

TEST_CASE_TEMPLATE("nystrom_attention equals (Ĝ V) ⊘ (Ĝ 1) from the dense Ĝ", T, float, double) {
  const Index n = 90, d = 6, dv = 4, m = 9;
  const Matrix<T> Q = random_matrix<T>(n, d, 51);
  const Matrix<T> K = random_matrix<T>(n, d, 52);
  const Matrix<T> V = random_matrix<T>(n, dv, 53);
  for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
    CAPTURE(to_string(stabilization));
    const auto f = generalized_nystrom<T>(Q, K, options_for(Kernel::exponential(0.4), m, stabilization));
    check_algorithm1(f, V, stabilization);
  }
}

TEST_CASE_TEMPLATE("nystrom_attention with row-major V and output equals the column-major one", T, float,
                   double) {
  const Index n = 600, d = 6, dv = 5, m = 9;  // three 256-row panels, the last one ragged
  const Matrix<T> Q = random_matrix<T>(n, d, 91), K = random_matrix<T>(n, d, 92),
                  V = random_matrix<T>(n, dv, 93);
  for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
    CAPTURE(to_string(stabilization));
    const auto f = generalized_nystrom<T>(Q, K, options_for(Kernel::exponential(0.4), m, stabilization));
    const RowMajorMatrix<T> row_major_v = V;
    RowMajorMatrix<T> out(n, dv);
    nystrom_attention<T>(f, row_major_v, out);
    CHECK(relative_difference(out, nystrom_attention<T>(f, V)) <=
          tolerance<T>(n * m) * condition(f.core.template cast<double>()));
    RowMajorMatrix<T> wrong(n, dv + 1);
    CHECK(throws_naming([&] { nystrom_attention<T>(f, row_major_v, wrong); }, "out is 600x6"));
  }
}

TEST_CASE_TEMPLATE(
    "row-major Q, K and V give the landmarks of their column-major copies bit for bit, and the "
    "factors and output to rounding",
    T, float, double) {
  // The landmarks come from the same sums in the same order; the GEMMs read row-major operands as transposed
  // column-major ones, which BLAS may sum in another order (OpenBLAS's small-matrix kernels do).
  // Three 256-row panels, the last one ragged; segments of 66 and 67 rows (16-lane sums plus remainders).
  const Index n = 600, d = 19, dv = 7, m = 9;
  const Matrix<T> Q = random_matrix<T>(n, d, 94), K = random_matrix<T>(n, d, 95),
                  V = random_matrix<T>(n, dv, 96);
  const RowMajorMatrix<T> q_rows = Q, k_rows = K, v_rows = V;
  // Rows of the row-major views twice as long as a token: a row stride other than d.
  RowMajorMatrix<T> padded_q = RowMajorMatrix<T>::Constant(n, 2 * d, T(7)), padded_k = padded_q;
  padded_q.leftCols(d) = Q;
  padded_k.leftCols(d) = K;
  const std::pair<ConstRowMajorMap<T>, ConstRowMajorMap<T>> views[] = {
      {ConstRowMajorMap<T>(q_rows.data(), n, d, Eigen::OuterStride<>(d)),
       ConstRowMajorMap<T>(k_rows.data(), n, d, Eigen::OuterStride<>(d))},
      {ConstRowMajorMap<T>(padded_q.data(), n, d, Eigen::OuterStride<>(2 * d)),
       ConstRowMajorMap<T>(padded_k.data(), n, d, Eigen::OuterStride<>(2 * d))}};
  for (const auto& [q, k] : views) {
    CAPTURE(q.outerStride());
    for (auto strategy :
         {LandmarkStrategy::segment_means, LandmarkStrategy::kmeans, LandmarkStrategy::top_abs})
      for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
        CAPTURE(to_string(strategy));
        CAPTURE(to_string(stabilization));
        NystromOptions options = options_for(Kernel::exponential(0.3), m, stabilization);
        options.landmarks.strategy = strategy;
        const NystromFactors<T> columns = generalized_nystrom<T>(Q, K, options);
        const NystromFactors<T> rows = generalized_nystrom<T>(q, k, options);
        CHECK(rows.landmarks.q == columns.landmarks.q);
        CHECK(rows.landmarks.k == columns.landmarks.k);
        // exp(φ) of an exponent rounded over d terms: relative errors of d·eps·|φ|.
        const double largest =
            std::max(options.kernel.exponent_block<T>(Q, columns.landmarks.k).cwiseAbs().maxCoeff(),
                     options.kernel.exponent_block<T>(columns.landmarks.q, K).cwiseAbs().maxCoeff());
        const double blocks = tolerance<T>(d) * (1 + largest);
        CHECK(relative_difference(rows.left, columns.left) <= blocks);
        CHECK(relative_difference(rows.upper, columns.upper) <= blocks);
        CHECK(relative_difference(rows.core, columns.core) <= blocks);
        const double products =
            tolerance<T>(n * m) * (1 + largest) * condition(columns.core.template cast<double>());
        RowMajorMatrix<T> out(n, dv);
        nystrom_attention<T>(rows, v_rows, out);
        CHECK(relative_difference(out, nystrom_attention<T>(columns, V)) <= products);
        if (stabilization != Stabilization::row_max) {
          const NystromFactors<T> symmetric_columns = symmetric_nystrom<T>(Q, K, options);
          const NystromFactors<T> symmetric_rows = symmetric_nystrom<T>(q, k, options);
          CHECK(symmetric_rows.landmarks.k == symmetric_columns.landmarks.k);
          CHECK(relative_difference(symmetric_rows.left, symmetric_columns.left) <= blocks);
        }
      }
    // A distance kernel reads row-major panels through column-major copies: the same blocks, bit for bit.
    NystromOptions laplacian = options_for(Kernel::laplacian(0.5), m, Stabilization::row_max);
    CHECK(generalized_nystrom<T>(q, k, laplacian).left == generalized_nystrom<T>(Q, K, laplacian).left);
  }
  RowMajorMatrix<T> bad = q_rows;
  bad(3, 4) = std::numeric_limits<T>::quiet_NaN();
  const ConstRowMajorMap<T> bad_q(bad.data(), n, d, Eigen::OuterStride<>(d));
  CHECK(throws_naming(
      [&] {
        generalized_nystrom<T>(bad_q, views[0].second,
                               options_for(Kernel::exponential(0.3), m, Stabilization::row_max));
      },
      "landmarks: Q contains non-finite"));
}

TEST_CASE_TEMPLATE("factors built into used factors equal fresh ones and keep their storage", T, float,
                   double) {
  // Every member is rewritten: a previous call of the other method, another N, or other tokens leave
  // nothing behind; with the same shapes the N×m blocks keep their memory.
  const Index d = 11, m = 6;
  const auto row_major = [&](Index n, std::uint64_t seed) {
    return RowMajorMatrix<T>(random_matrix<T>(n, d, seed));
  };
  const auto view = [&](const RowMajorMatrix<T>& x) {
    return ConstRowMajorMap<T>(x.data(), x.rows(), d, Eigen::OuterStride<>(d));
  };
  const RowMajorMatrix<T> q1 = row_major(300, 201), k1 = row_major(300, 202);
  const RowMajorMatrix<T> q2 = row_major(300, 203), k2 = row_major(300, 204);
  const RowMajorMatrix<T> q3 = row_major(77, 205), k3 = row_major(77, 206);
  const NystromOptions row_max = options_for(Kernel::exponential(0.4), m, Stabilization::row_max);
  const NystromOptions clamped = options_for(Kernel::exponential(0.4), m, Stabilization::clamped);

  NystromFactors<T> used;
  symmetric_nystrom<T>(view(q3), view(k3), clamped, used);
  check_same_factors(used, symmetric_nystrom<T>(view(q3), view(k3), clamped));
  generalized_nystrom<T>(view(q1), view(k1), row_max, used);
  check_same_factors(used, generalized_nystrom<T>(view(q1), view(k1), row_max));
  const T* left = used.left.data();
  const T* upper = used.upper.data();
  generalized_nystrom<T>(view(q2), view(k2), row_max, used);
  check_same_factors(used, generalized_nystrom<T>(view(q2), view(k2), row_max));
  CHECK(used.left.data() == left);
  CHECK(used.upper.data() == upper);
  symmetric_nystrom<T>(view(q2), view(k2), clamped, used);
  check_same_factors(used, symmetric_nystrom<T>(view(q2), view(k2), clamped));
}

TEST_CASE_TEMPLATE(
    "generalized_nystrom_attention gives the factors and output of generalized_nystrom and nystrom_attention "
    "bit for bit: column- and row-major, on one thread and two, below and above the parallel threshold",
    T, float, double) {
  // N = 600 stays on one thread; N = 2100 (m = 16, d = 64) runs the factors on the threads while the
  // separate nystrom_attention sums G_U V on one: nine 256-row panels, the last one ragged, either way.
  const Index m = 16, dv = 5;
  const int threads_before = threads();
  for (const auto& [n, d] : {std::pair<Index, Index>{600, 6}, std::pair<Index, Index>{2100, 64}})
    for (const int thread_count : {1, 2}) {
      CAPTURE(n);
      CAPTURE(thread_count);
      set_threads(thread_count);
      const Matrix<T> Q = random_matrix<T>(n, d, 301), K = random_matrix<T>(n, d, 302),
                      V = random_matrix<T>(n, dv, 303);
      const RowMajorMatrix<T> q_rows = Q, k_rows = K, v_rows = V;
      const ConstRowMajorMap<T> q(q_rows.data(), n, d, Eigen::OuterStride<>(d)),
          k(k_rows.data(), n, d, Eigen::OuterStride<>(d));
      for (auto stabilization :
           {Stabilization::none, Stabilization::row_max, Stabilization::clamped, Stabilization::row_sum}) {
        CAPTURE(to_string(stabilization));
        const NystromOptions options = options_for(Kernel::exponential(0.3), m, stabilization);
        NystromFactors<T> fused;
        const Matrix<T> out = generalized_nystrom_attention<T>(Q, K, V, options, fused);
        const NystromFactors<T> separate = generalized_nystrom<T>(Q, K, options);
        check_same_factors(fused, separate);
        CHECK(out == nystrom_attention<T>(separate, V));

        RowMajorMatrix<T> rows_out(n, dv), separate_out(n, dv);
        generalized_nystrom_attention<T>(q, k, v_rows, options, fused, rows_out);
        NystromFactors<T> rows_separate;
        generalized_nystrom<T>(q, k, options, rows_separate);
        nystrom_attention<T>(rows_separate, v_rows, separate_out);
        check_same_factors(fused, rows_separate);
        CHECK(rows_out == separate_out);
      }
      const NystromOptions options = options_for(Kernel::exponential(0.3), m, Stabilization::row_max);
      NystromFactors<T> factors;
      CHECK(throws_naming(
          [&] { generalized_nystrom_attention<T>(Q, K, Matrix<T>(V.topRows(n - 1)), options, factors); },
          describe("V has ", n - 1, " rows")));
      RowMajorMatrix<T> wrong(n, dv + 1);
      CHECK(throws_naming([&] { generalized_nystrom_attention<T>(q, k, v_rows, options, factors, wrong); },
                          describe("out is ", n, "x", dv + 1)));
      Matrix<T> bad_v = V;
      bad_v(n - 1, 2) = std::numeric_limits<T>::infinity();
      CHECK(throws_naming([&] { generalized_nystrom_attention<T>(Q, K, bad_v, options, factors); },
                          "nystrom_attention: V"));
    }
  set_threads(threads_before);
}

TEST_CASE("clamped variant uses exp(min(x,c)) + max(x-c,0) in all three blocks, c = clamp_threshold") {
  const Index n = 40, d = 4, m = 4;
  const Matrix<double> Q = random_matrix<double>(n, d, 61, 3.0);  // large logits reach the clamp
  const Matrix<double> K = random_matrix<double>(n, d, 62, 3.0);
  const Kernel kernel = Kernel::exponential(1.0);
  CHECK((Q * K.transpose()).maxCoeff() > 5.0);
  CHECK((Q * K.transpose()).minCoeff() < 0.0);
  // 5: the authors' SwinIR code; 0: their Uformer and RVRT code.
  for (double threshold : {5.0, 0.0}) {
    CAPTURE(threshold);
    auto options = options_for(kernel, m, Stabilization::clamped);
    options.clamp_threshold = threshold;
    const auto f = generalized_nystrom<double>(Q, K, options);
    const auto clamp = [&](double x) {
      return std::exp(std::min(x, threshold)) + std::max(x - threshold, 0.0);
    };
    const auto naive_clamped = [&](const Matrix<double>& X, const Matrix<double>& Y) {
      return naive_kernel<double>(X, Y, kernel)
          .unaryExpr([&](double g) { return clamp(std::log(g)); })
          .eval();
    };
    CHECK(relative_difference(f.left, naive_clamped(Q, f.landmarks.k)) <= 1e-13);
    CHECK(relative_difference(f.core, naive_clamped(f.landmarks.q, f.landmarks.k)) <= 1e-13);
    CHECK(relative_difference(f.upper, naive_clamped(f.landmarks.q, K)) <= 1e-13);
    CHECK(f.left_log_scale.isZero());
    const auto g = symmetric_nystrom<double>(Q, K, options);
    CHECK(relative_difference(g.left, naive_clamped(Q, g.landmarks.k)) <= 1e-13);
    CHECK(relative_difference(g.core, naive_clamped(g.landmarks.q, g.landmarks.k)) <= 1e-13);
  }
}

TEST_CASE("symmetric Nyström equals C W⁺ Cᵀ and is exact on blockwise-constant symmetric tokens") {
  const Index n = 64, d = 5, m = 8;
  const Kernel kernel = Kernel::laplacian(4.0);
  const Matrix<double> X = random_matrix<double>(n, d, 71);
  auto options = options_for(kernel, m, Stabilization::none);
  const auto f = symmetric_nystrom<double>(X, X, options);
  const Matrix<double> C = naive_kernel<double>(X, f.landmarks.k, kernel);
  const Matrix<double> W = naive_kernel<double>(f.landmarks.q, f.landmarks.k, kernel);
  CHECK(relative_difference(f.dense(), C * dense_pinv(W, 1e-15) * C.transpose()) <= 1e-10);
  const Matrix<double> B = blockwise_constant<double>(n, d, m, 72);
  const auto exact = symmetric_nystrom<double>(B, B, options);
  CHECK(relative_difference(exact.dense(), naive_kernel<double>(B, B, kernel)) <= 1e-10);
  options.stabilization = Stabilization::row_max;
  CHECK(throws_naming([&] { symmetric_nystrom<double>(X, X, options); }, "row-max"));
}

TEST_CASE("bad arguments throw std::invalid_argument naming the value") {
  const Matrix<double> Q = random_matrix<double>(20, 4, 81);
  const Matrix<double> K = random_matrix<double>(20, 4, 82);
  auto options = options_for(Kernel::exponential(0.5), 4, Stabilization::row_max);
  auto with_m = options;
  with_m.landmarks.count = 0;
  CHECK_THROWS_AS(generalized_nystrom<double>(Q, K, with_m), std::invalid_argument);
  with_m.landmarks.count = 21;
  CHECK(throws_naming([&] { generalized_nystrom<double>(Q, K, with_m); }, "21"));
  for (double threshold : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto bad_clamp = options;
    bad_clamp.clamp_threshold = threshold;
    CHECK(throws_naming([&] { generalized_nystrom<double>(Q, K, bad_clamp); }, "clamp_threshold"));
  }
  auto bad_lambda = options;
  bad_lambda.kernel = Kernel::laplacian(-2.0);
  CHECK(throws_naming([&] { generalized_nystrom<double>(Q, K, bad_lambda); }, "-2"));
  const Matrix<double> K5 = random_matrix<double>(20, 5, 83);
  CHECK(throws_naming([&] { generalized_nystrom<double>(Q, K5, options); }, "d = 5"));
  Matrix<double> Qnan = Q;
  Qnan(3, 2) = std::nan("");
  // Found while the landmarks are selected (segment means: when a mean is not finite).
  CHECK(throws_naming([&] { generalized_nystrom<double>(Qnan, K, options); },
                      "landmarks: Q contains non-finite"));
  Matrix<double> Kinf = K;
  Kinf(19, 0) = -std::numeric_limits<double>::infinity();
  CHECK(throws_naming([&] { generalized_nystrom<double>(Q, Kinf, options); },
                      "landmarks: K contains non-finite"));
  auto symmetric = options;
  symmetric.stabilization = Stabilization::none;
  CHECK(throws_naming([&] { symmetric_nystrom<double>(Q, Kinf, symmetric); },
                      "landmarks: K contains non-finite"));
  const auto f = generalized_nystrom<double>(Q, K, options);
  const Matrix<double> V = random_matrix<double>(19, 3, 84);
  CHECK(throws_naming([&] { nystrom_attention<double>(f, V); }, "19"));
  Matrix<double> Vnan = random_matrix<double>(20, 3, 85);
  Vnan(0, 2) = std::nan("");
  CHECK(throws_naming([&] { nystrom_attention<double>(f, Vnan); }, "nystrom_attention: V"));
}

TEST_CASE_TEMPLATE(
    "factors and outputs over many row panels equal the dense oracle, the same bits on two threads", T, float,
    double) {
  // 3,000 tokens: twelve 256-row panels, the last one ragged; 2·N·m·d and N·m·(dv + 1) multiply-adds above
  // detail::parallel_work, so two threads share the panels, and M_U's maxima span the panels of both. Each
  // block is compared with exp(φ − row max) from naive kernels in double; two threads give the same bits as
  // one (the panels and the order of the sums over N do not depend on the thread count).
  const Index n = 3000, d = 36, dv = 70, m = 20;
  REQUIRE(2.0 * n * m * d >= detail::parallel_work);
  REQUIRE(double(n) * m * (dv + 1) >= detail::parallel_work);
  const Matrix<T> Q = random_matrix<T>(n, d, 71);
  const Matrix<T> K = random_matrix<T>(n, d, 72);
  const Matrix<T> V = random_matrix<T>(n, dv, 73);
  const int before = threads();
  for (const Kernel& kernel : {Kernel::exponential(0.5), Kernel::laplacian(3.0)}) {
    for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
      CAPTURE(kernel.label());
      CAPTURE(to_string(stabilization));
      set_threads(2);
      const auto two_threads = generalized_nystrom<T>(Q, K, options_for(kernel, m, stabilization));
      const Matrix<T> two_threads_output = nystrom_attention<T>(two_threads, V);
      set_threads(1);
      {
        const auto f = generalized_nystrom<T>(Q, K, options_for(kernel, m, stabilization));
        CHECK(two_threads.left == f.left);
        CHECK(two_threads.upper == f.upper);
        CHECK(two_threads.upper_log_scale == f.upper_log_scale);
        CHECK(two_threads.pinv.z == f.pinv.z);
        CHECK(two_threads_output == nystrom_attention<T>(f, V));
        const Matrix<double> Qbar = f.landmarks.q.template cast<double>();
        const Matrix<double> Kbar = f.landmarks.k.template cast<double>();
        const Matrix<double> phi_left =
            naive_kernel<double>(Q.template cast<double>(), Kbar, kernel).array().log();
        const Matrix<double> phi_core = naive_kernel<double>(Qbar, Kbar, kernel).array().log();
        const Matrix<double> phi_upper =
            naive_kernel<double>(Qbar, K.template cast<double>(), kernel).array().log();
        const auto finished = [&](const Matrix<double>& phi, const Vector<double>& shift) -> Matrix<double> {
          if (stabilization == Stabilization::clamped)
            return phi.unaryExpr(
                [](double v) { return std::exp(std::min(v, 5.0)) + std::max(v - 5.0, 0.0); });
          return (phi.colwise() - shift).array().exp().matrix();
        };
        const bool scaled = stabilization == Stabilization::row_max;
        const Vector<double> left_shift =
            scaled ? Vector<double>(phi_left.rowwise().maxCoeff()) : Vector<double>::Zero(n);
        const Vector<double> upper_shift =
            scaled ? Vector<double>(phi_upper.rowwise().maxCoeff()) : Vector<double>::Zero(m);
        const double tol = tolerance<T>(n * d) * 8;
        CHECK(relative_difference(f.left_log_scale, left_shift) <= tol);
        CHECK(relative_difference(f.upper_log_scale, upper_shift) <= tol);
        CHECK(relative_difference(f.left, finished(phi_left, left_shift)) <= tol);
        CHECK(relative_difference(f.core, finished(phi_core, upper_shift)) <= tol);
        CHECK(relative_difference(f.upper, finished(phi_upper, upper_shift)) <= tol);
        check_algorithm1(f, V, stabilization);
      }
    }
  }
  // V is scanned only when G_U [V, 1] is not finite: a NaN or ±∞ anywhere in V (here in the first, a middle
  // and the last panel) must still be reported.
  const auto f =
      generalized_nystrom<T>(Q, K, options_for(Kernel::exponential(0.5), m, Stabilization::row_max));
  for (Index row : {Index(0), n / 2 + 1, n - 1}) {
    for (T value : {std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::infinity(),
                    -std::numeric_limits<T>::infinity()}) {
      CAPTURE(row);
      CAPTURE(value);
      Matrix<T> bad = V;
      bad(row, dv - 1) = value;
      CHECK(throws_naming([&] { nystrom_attention<T>(f, bad); }, "nystrom_attention: V"));
    }
  }
  // Without stabilization, logits of 1,800 overflow the core: a numerical outcome, reported as the status
  // non_finite with Z = NaN on whichever thread computes it (the sweep records such a row), not an exception.
  set_threads(2);
  const Matrix<T> large = (Q.array() + T(10)).matrix();
  const NystromFactors<T> overflowed =
      generalized_nystrom<T>(large, large, options_for(Kernel::exponential(0.5), m, Stabilization::none));
  CHECK_FALSE(all_finite(overflowed.core));
  CHECK(overflowed.pinv.status == PinvStatus::non_finite);
  CHECK(overflowed.pinv.z.array().isNaN().all());
  CHECK(std::isnan(overflowed.pinv.residual()));
  set_threads(before);
}

TEST_CASE_TEMPLATE("given landmarks give the factors of selected ones, a log-shift c gives e^(-c) times Ĝ", T,
                   float, double) {
  // Ĝ_c = (e^{−c}G_L)(e^{−c}G_A)⁺(e^{−c}G_U) = e^{−c}Ĝ: every stabilization, every pseudoinverse (α per
  // matrix, and the εI of the symmetric form rescaled with the core), and the output does not change.
  const Index n = 50, d = 5, m = 6;
  const Matrix<T> Q = random_matrix<T>(n, d, 61, 0.6), K = random_matrix<T>(n, d, 62, 0.6),
                  V = random_matrix<T>(n, 3, 63);
  const double c = 3.25;
  for (const Kernel& kernel : {Kernel::exponential(0.5), Kernel::laplacian(3.0)}) {
    for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
      for (auto method : {PinvMethod::exact, PinvMethod::razavi}) {
        for (bool symmetric : {false, true}) {
          if (symmetric && stabilization == Stabilization::row_max) continue;
          CAPTURE(kernel.label());
          CAPTURE(to_string(stabilization));
          CAPTURE(to_string(method));
          CAPTURE(symmetric);
          NystromOptions options = options_for(kernel, m, stabilization);
          options.landmarks.strategy = LandmarkStrategy::step;
          options.pinv.method = method;
          if (symmetric) options.pinv.shift = 1e-3;
          const auto factors = [&](const auto&... landmarks) {
            return symmetric ? symmetric_nystrom<T>(Q, K, landmarks..., options)
                             : generalized_nystrom<T>(Q, K, landmarks..., options);
          };
          const NystromFactors<T> selected = factors();
          const Landmarks<T> marks = select_landmarks<T>(Q, K, options.landmarks, Kernel{});
          const NystromFactors<T> given = factors(marks);
          CHECK(given.left == selected.left);
          CHECK(given.pinv.z == selected.pinv.z);
          CHECK(given.landmarks.q == selected.landmarks.q);
          options.kernel = kernel.shifted(c);
          const NystromFactors<T> shifted = factors(marks);
          const Matrix<double> unshifted_dense = selected.dense().template cast<double>();
          const double condition = [&] {
            const Vector<double> sigma = singular_values<T>(selected.core);
            return sigma(0) / sigma(m - 1);
          }();
          const double tol = tolerance<T>(n) * condition * (1 + c);
          CHECK(relative_difference(Matrix<double>(std::exp(c) * shifted.dense().template cast<double>()),
                                    unshifted_dense) <= tol);
          CHECK(relative_difference(nystrom_attention<T>(shifted, V), nystrom_attention<T>(selected, V)) <=
                tol);
          CHECK(shifted.pinv.status == selected.pinv.status);
        }
      }
    }
  }
  Landmarks<double> wrong;
  wrong.q = Matrix<double>::Zero(3, 4);
  wrong.k = Matrix<double>::Zero(3, 4);
  const Matrix<double> tokens = random_matrix<double>(10, 5, 1);
  const NystromOptions plain = options_for(Kernel::exponential(1), 3, Stabilization::none);
  CHECK(
      throws_naming([&] { generalized_nystrom<double>(tokens, tokens, wrong, plain); }, "landmarks are 3x4"));
}

TEST_CASE_TEMPLATE("oversampled landmarks: the p×m core's least-squares fit equals its dense oracle", T,
                   float, double) {
  // Q̄ with p = 2m rows (landmarks.hpp, oversampling), K̄ with m: Ĝ = diag(e^l) G_Lⁿ (W G_A)⁺ W G_U with the
  // weights W of the stabilization (docs/mathematics.md §2): none 1, row-max 1/max_j of each landmark row's
  // kernel, row-sum 1/Σ_j; the factors' own row scales cancel in Ĝ except through W.
  const Index n = 57, d = 4, m = 5;
  const Matrix<T> Q = random_matrix<T>(n, d, 81, 0.6), K = random_matrix<T>(n, d, 82, 0.6);
  const Kernel kernel = Kernel::exponential(0.5);
  for (const Stabilization stabilization :
       {Stabilization::none, Stabilization::row_max, Stabilization::row_sum})
    for (const PinvMethod pinv : {PinvMethod::exact, PinvMethod::truncated}) {
      CAPTURE(to_string(stabilization));
      CAPTURE(to_string(pinv));
      NystromOptions options = options_for(kernel, m, stabilization);
      options.landmarks.oversampling = 2;
      options.pinv.method = pinv;
      const NystromFactors<T> f = generalized_nystrom<T>(Q, K, options);
      REQUIRE(f.core.rows() == 2 * m);
      REQUIRE(f.core.cols() == m);
      const Matrix<double> q_bar = f.landmarks.q.template cast<double>(),
                           k_bar = f.landmarks.k.template cast<double>();
      const Matrix<double> Qd = Q.template cast<double>(), Kd = K.template cast<double>();
      const Matrix<double> left = kernel.block<double>(Qd, k_bar), core = kernel.block<double>(q_bar, k_bar),
                           upper = kernel.block<double>(q_bar, Kd);
      Vector<double> weight = Vector<double>::Ones(2 * m);
      if (stabilization == Stabilization::row_max) weight = upper.rowwise().maxCoeff().cwiseInverse();
      if (stabilization == Stabilization::row_sum) weight = upper.rowwise().sum().cwiseInverse();
      const double cut = pinv == PinvMethod::truncated ? std::sqrt(std::numeric_limits<T>::epsilon()) : 1e-12;
      const Matrix<double> oracle =
          left * dense_pinv(weight.asDiagonal() * core, cut) * weight.asDiagonal() * upper;
      CHECK(relative_difference(f.dense(), oracle) <= 1e3 * std::numeric_limits<T>::epsilon());
    }
  // Iterations need a square core; the symmetric form takes no row sums.
  NystromOptions iterative = options_for(kernel, m, Stabilization::row_max);
  iterative.landmarks.oversampling = 2;
  iterative.pinv = {PinvMethod::razavi, 6};
  CHECK(throws_naming([&] { generalized_nystrom<T>(Q, K, iterative); }, "rectangular core"));
  CHECK(throws_naming([&] { symmetric_nystrom<T>(Q, K, options_for(kernel, m, Stabilization::row_sum)); },
                      "row-sum"));
}

TEST_CASE("row-sum stabilization gives row-max's Ĝ on a square nonsingular core") {
  const Matrix<double> Q = random_matrix<double>(48, 4, 91, 0.7), K = random_matrix<double>(48, 4, 92, 0.7);
  const Kernel kernel = Kernel::exponential(0.5);
  const Matrix<double> row_max =
      generalized_nystrom<double>(Q, K, options_for(kernel, 6, Stabilization::row_max)).dense();
  const NystromFactors<double> row_sum =
      generalized_nystrom<double>(Q, K, options_for(kernel, 6, Stabilization::row_sum));
  CHECK(relative_difference(row_sum.dense(), row_max) <= 1e-11);
  // Each landmark row of G_Uⁿ sums to 1.
  CHECK((row_sum.upper.rowwise().sum().array() - 1).abs().maxCoeff() <= 1e-14);
}

TEST_CASE_TEMPLATE("the oracle core is C⁺GR⁺, no worse in ‖·‖_F than any core of the same landmarks", T,
                   float, double) {
  const Index n = 50, d = 4, m = 6;
  const Matrix<T> Q = random_matrix<T>(n, d, 95, 0.6), K = random_matrix<T>(n, d, 96, 0.6);
  const Kernel kernel = Kernel::exponential(0.6);
  NystromOptions options = options_for(kernel, m, Stabilization::none);
  options.landmarks.strategy = LandmarkStrategy::random;
  const NystromFactors<T> lemma = generalized_nystrom<T>(Q, K, options);
  options.pinv.method = PinvMethod::oracle_core;
  const NystromFactors<T> oracle = generalized_nystrom<T>(Q, K, options);
  const Matrix<double> g = kernel.block<double>(Q.template cast<double>(), K.template cast<double>());
  const Matrix<double> c = oracle.left.template cast<double>(), r = oracle.upper.template cast<double>();
  const Matrix<double> z = dense_pinv(c, 1e-13) * g * dense_pinv(r, 1e-13);
  CHECK(relative_difference(oracle.pinv.z.template cast<double>(), z) <=
        1e3 * std::numeric_limits<T>::epsilon());
  CHECK((g - oracle.dense().template cast<double>()).norm() <=
        (g - lemma.dense().template cast<double>()).norm() * (1 + 1e2 * std::numeric_limits<T>::epsilon()));
  CHECK(std::isnan(oracle.pinv.residual()));
  options.stabilization = Stabilization::clamped;
  CHECK(throws_naming([&] { generalized_nystrom<T>(Q, K, options); }, "clamped"));
}
