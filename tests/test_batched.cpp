#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_oracles.hpp"
#include "batch_tensor.hpp"
#include "method_options.hpp"
#include "nystrom/batched.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// Every method's pseudoinverse set to Razavi's iteration (so that α matters).
ApproximationOptions iterative_options(Index m) {
  ApproximationOptions options = small_options(m);
  for (auto method : methods)
    if (PinvOptions* pinv = pinv_options(method, options)) {
      pinv->method = PinvMethod::razavi;
      pinv->iterations = 5;
    }
  return options;
}

/// The batched output of every head against the per-head functions on the same head with `options`: the
/// same bits as the same code (approximate_attention; for pnp-nystra and symmetric-nystrom the row-major
/// factors and nystrom_attention that batched_attention uses on the head in place), and for those two methods
/// within rounding of approximate_attention on column-major copies (the GEMMs sum in another order for
/// transposed operands, amplified by the core's conditioning through Z).
template <class T>
void check_heads(Method method, const Tensor<T>& Q, const Tensor<T>& K, const Tensor<T>& V,
                 const Tensor<T>& out, const ApproximationOptions& options) {
  for (Index i = 0; i < Q.batch * Q.heads; ++i) {
    CAPTURE(i);
    const Approximation<T> expected =
        approximate_attention<T>(method, Q.head(i), K.head(i), V.head(i), options);
    if (!expected.kernel_factors) {
      CHECK(out.head(i) == expected.output);
      continue;
    }
    NystromOptions nystrom = method == Method::pnp_nystra ? options.pnp_nystra : options.symmetric_nystrom;
    nystrom.kernel = options.kernel;
    const auto head = [&](const Tensor<T>& X) {
      return ConstRowMajorMap<T>(X.view().head(i).data(), X.tokens, X.dim, Eigen::OuterStride<>(X.dim));
    };
    const NystromFactors<T> factors = method == Method::pnp_nystra
                                          ? generalized_nystrom<T>(head(Q), head(K), nystrom)
                                          : symmetric_nystrom<T>(head(Q), head(K), nystrom);
    RowMajorMatrix<T> same_code(V.tokens, V.dim);
    nystrom_attention<T>(factors, V.view().head(i), same_code);
    CHECK(out.head(i) == Matrix<T>(same_code));
    const Vector<double> sigma =
        Eigen::JacobiSVD<Matrix<double>>(expected.kernel_factors->core.template cast<double>())
            .singularValues();
    CHECK(relative_difference(out.head(i), expected.output) <=
          tolerance<T>(V.tokens) * sigma(0) / sigma(sigma.size() - 1));
  }
}

/// The clamped exponential exp(min(x, c)) + max(x − c, 0).
double clamped(double x, double threshold) {
  return std::exp(std::min(x, threshold)) + std::max(x - threshold, 0.0);
}

/// PnP-Nystra with segment means and the clamped kernel from naive loops in double: Ĝ = G_L G_A⁺ G_U with the
/// exact pseudoinverse, Ô = (Ĝ V) ⊘ (Ĝ 1 + 1e-12) (the authors' code).
Matrix<double> naive_clamped_nystra(const Matrix<double>& Q, const Matrix<double>& K, const Matrix<double>& V,
                                    Index m, double scale, double threshold) {
  const Matrix<double> q_bar = naive_segment_means(Q, m), k_bar = naive_segment_means(K, m);
  const auto block = [&](const Matrix<double>& X, const Matrix<double>& Y) {
    Matrix<double> out(X.rows(), Y.rows());
    for (Index i = 0; i < X.rows(); ++i)
      for (Index j = 0; j < Y.rows(); ++j) out(i, j) = clamped(scale * X.row(i).dot(Y.row(j)), threshold);
    return out;
  };
  const Matrix<double> G = block(Q, k_bar) * dense_pinv(block(q_bar, k_bar), 1e-15) * block(q_bar, K);
  const Vector<double> sums = G.rowwise().sum().array() + 1e-12;
  return (G * V).array().colwise() / sums.array();
}

}  // namespace

TEST_CASE("alpha scope names round-trip and unknown names throw") {
  for (auto scope : {AlphaScope::matrix, AlphaScope::batch})
    CHECK(alpha_scope_from_string(to_string(scope)) == scope);
  CHECK(throws_naming([] { alpha_scope_from_string("global"); }, "global"));
}

TEST_CASE("a batch view maps entry (b, h, i, c) to data[((b·H + h)·N + i)·d + c]") {
  std::vector<double> values(2 * 3 * 5 * 4);
  for (std::size_t e = 0; e < values.size(); ++e) values[e] = double(e);
  const BatchView<double> view{values.data(), 2, 3, 5, 4};
  CHECK(view.count() == 6);
  for (Index b = 0; b < 2; ++b)
    for (Index h = 0; h < 3; ++h)
      for (Index i = 0; i < 5; ++i)
        for (Index c = 0; c < 4; ++c)
          CHECK(view.head(b * 3 + h)(i, c) == double(((b * 3 + h) * 5 + i) * 4 + c));
  const BatchView<const double> read_only = view;
  CHECK(read_only.head(5).data() == values.data() + 5 * 20);
}

TEST_CASE_TEMPLATE(
    "every batched method equals the per-head functions head by head, the same bits on 1 and 2 threads", T,
    float, double) {
  // N = 37 is odd and not a multiple of m; dv differs from d.
  const Index batch = 2, heads = 3, n = 37, d = 8, dv = 5, m = 6;
  const Tensor<T> Q(batch, heads, n, d, 1, 0.7), K(batch, heads, n, d, 2, 0.7), V(batch, heads, n, dv, 3);
  const ApproximationOptions options = small_options(m);
  const int before = threads();
  for (auto method : methods) {
    CAPTURE(to_string(method));
    for (int thread_count : {1, 2}) {
      CAPTURE(thread_count);
      set_threads(thread_count);
      Tensor<T> out(batch, heads, n, dv, 4);
      const BatchedDiagnostics diagnostics =
          batched_attention<T>(method, Q.view(), K.view(), V.view(), out.view(), options);
      CHECK(threads() == thread_count);
      REQUIRE(diagnostics.heads.size() == std::size_t(batch * heads));
      CHECK(diagnostics.alpha == 0);
      set_threads(1);
      check_heads<T>(method, Q, K, V, out, options);
      for (Index i = 0; i < batch * heads; ++i) {
        const Approximation<T> expected =
            approximate_attention<T>(method, Q.head(i), K.head(i), V.head(i), options);
        CHECK(diagnostics.heads[std::size_t(i)].pinv_status == expected.pinv_status);
        if (expected.pinv_status)
          CHECK(diagnostics.heads[std::size_t(i)].pinv_residual == expected.pinv_residual);
      }
    }
  }
  set_threads(before);
}

TEST_CASE_TEMPLATE("odd shapes: one head, m = N, and one head large enough for the per-head threads", T,
                   float, double) {
  const int before = threads();
  for (auto method : methods) {
    CAPTURE(to_string(method));
    // B·H = 1 and m = N = 9: every token is a landmark.
    const Tensor<T> Q(1, 1, 9, 4, 11), K(1, 1, 9, 4, 12), V(1, 1, 9, 3, 13);
    Tensor<T> out(1, 1, 9, 3, 14);
    set_threads(2);
    batched_attention<T>(method, Q.view(), K.view(), V.view(), out.view(), small_options(9));
    check_heads<T>(method, Q, K, V, out, small_options(9));
  }
  // One head runs with the caller's threads inside its steps (here above detail::parallel_work, so two
  // threads share its panels): the per-head functions' bits, and the same bits as on one thread.
  const Index n = 3000, d = 36, dv = 70, m = 20;
  REQUIRE(2.0 * n * m * d >= detail::parallel_work);
  const Tensor<T> Q(1, 1, n, d, 21), K(1, 1, n, d, 22), V(1, 1, n, dv, 23);
  Tensor<T> two(1, 1, n, dv, 24), one(1, 1, n, dv, 25);
  set_threads(2);
  batched_attention<T>(Method::pnp_nystra, Q.view(), K.view(), V.view(), two.view(), small_options(m));
  check_heads<T>(Method::pnp_nystra, Q, K, V, two, small_options(m));
  set_threads(1);
  batched_attention<T>(Method::pnp_nystra, Q.view(), K.view(), V.view(), one.view(), small_options(m));
  CHECK(one.values == two.values);
  set_threads(before);
}

TEST_CASE_TEMPLATE(
    "batch alpha is 1/(max ||A_i||_1 · max ||A_i||_inf) over the heads' cores, per-matrix alpha each own", T,
    float, double) {
  const Index batch = 2, heads = 2, n = 24, d = 6, dv = 3, m = 4;
  // The heads' scales differ, so their cores' norms (and per-matrix α) differ.
  Tensor<T> Q(batch, heads, n, d, 31), K(batch, heads, n, d, 32);
  for (Index i = 0; i < batch * heads; ++i) {
    auto q = Q.view().head(i);
    q *= T(0.3 + 0.4 * double(i));
  }
  const Tensor<T> V(batch, heads, n, dv, 33);
  const ApproximationOptions options = iterative_options(m);
  const int before = threads();
  set_threads(2);
  for (auto method : {Method::pnp_nystra, Method::symmetric_nystrom, Method::nystromformer, Method::cur}) {
    CAPTURE(to_string(method));
    // The cores by the per-head functions, and α by hand from their absolute column and row sums.
    std::vector<Matrix<double>> cores;
    for (Index i = 0; i < batch * heads; ++i) {
      const Matrix<T> q = Q.head(i), k = K.head(i), v = V.head(i);
      NystromOptions nystrom = method == Method::pnp_nystra ? options.pnp_nystra : options.symmetric_nystrom;
      nystrom.kernel = options.kernel;
      if (method == Method::pnp_nystra)
        cores.push_back(generalized_nystrom<T>(q, k, nystrom).core.template cast<double>());
      if (method == Method::symmetric_nystrom) {
        Matrix<double> core = symmetric_nystrom<T>(q, k, nystrom).core.template cast<double>();
        core.diagonal().array() +=
            options.symmetric_nystrom.pinv.shift;  // what Newton–Schulz on W + εI inverts
        cores.push_back(core);
      }
      if (method == Method::nystromformer)
        cores.push_back(
            nystromformer_core<T>(q, k, options.kernel.param, options.nystromformer).template cast<double>());
      if (method == Method::cur)
        cores.push_back(cur_attention<T>(q, k, v, options.kernel.param, options.cur)
                            .intersection.template cast<double>());
    }
    double largest_column_sum = 0, largest_row_sum = 0;
    std::vector<double> per_matrix;
    for (const auto& core : cores) {
      double column_sum = 0, row_sum = 0;
      for (Index j = 0; j < core.cols(); ++j) {
        double column = 0, row = 0;
        for (Index i = 0; i < core.rows(); ++i) {
          column += std::abs(core(i, j));
          row += std::abs(core(j, i));
        }
        column_sum = std::max(column_sum, column);
        row_sum = std::max(row_sum, row);
      }
      largest_column_sum = std::max(largest_column_sum, column_sum);
      largest_row_sum = std::max(largest_row_sum, row_sum);
      per_matrix.push_back(1 / (column_sum * row_sum));
    }
    const double expected_alpha = 1 / (largest_column_sum * largest_row_sum);
    // The batch α is below every head's own, strictly for some head (the scales differ).
    CHECK(expected_alpha < *std::max_element(per_matrix.begin(), per_matrix.end()) * (1 - 1e-3));

    Tensor<T> out(batch, heads, n, dv, 34), per_matrix_out(batch, heads, n, dv, 35);
    const BatchedDiagnostics diagnostics =
        batched_attention<T>(method, Q.view(), K.view(), V.view(), out.view(), options, AlphaScope::batch);
    CHECK(diagnostics.alpha == doctest::Approx(expected_alpha).epsilon(tolerance<T>(m * m)));
    ApproximationOptions with_alpha = options;
    pinv_options(method, with_alpha)->alpha = diagnostics.alpha;
    set_threads(1);
    check_heads<T>(method, Q, K, V, out, with_alpha);
    set_threads(2);
    // Per matrix (the default) differs: every head starts from its own α.
    batched_attention<T>(method, Q.view(), K.view(), V.view(), per_matrix_out.view(), options,
                         AlphaScope::matrix);
    CHECK(per_matrix_out.values != out.values);
    if (method == Method::pnp_nystra) {
      for (Index i = 0; i < batch * heads; ++i) {
        NystromOptions nystrom = options.pnp_nystra;
        nystrom.kernel = options.kernel;
        const double alpha = generalized_nystrom<T>(Q.head(i), K.head(i), nystrom).pinv.alpha;
        CHECK(alpha == doctest::Approx(per_matrix[std::size_t(i)]).epsilon(tolerance<T>(m * m)));
      }
    }
  }
  // Methods without a pseudoinverse, and the exact pseudoinverse, have no α: both scopes give the same
  // outputs.
  for (auto method : {Method::performer, Method::exact}) {
    Tensor<T> a(batch, heads, n, dv, 36), b(batch, heads, n, dv, 37);
    CHECK(batched_attention<T>(method, Q.view(), K.view(), V.view(), a.view(), options, AlphaScope::batch)
              .alpha == 0);
    batched_attention<T>(method, Q.view(), K.view(), V.view(), b.view(), options, AlphaScope::matrix);
    CHECK(a.values == b.values);
  }
  set_threads(before);
}

TEST_CASE_TEMPLATE(
    "with a kernel log-shift c and no row-max scaling, the batch scope inverts the heads' own κ_c cores: a "
    "one-head batch gives its own α and output in both scopes",
    T, float, double) {
  // The shift ε and Tikhonov ε are relative to κ's core: a head inverts κ_c's core with e^{−c}ε (e^{−2c}ε),
  // and a batch of one head has that core's α. With ε as large as the core's entries, inverting the κ_c
  // core with ε itself would change the output by O(1).
  const Index n = 29, d = 6, dv = 4, m = 5;
  const Tensor<T> Q(1, 1, n, d, 51, 0.8), K(1, 1, n, d, 52, 0.8), V(1, 1, n, dv, 53);
  ApproximationOptions options = small_options(m);
  options.kernel = Kernel::exponential(0.5).shifted(3.0);
  options.pnp_nystra.stabilization = Stabilization::none;
  options.pnp_nystra.pinv = {PinvMethod::razavi, 6, 0, 0, 0.05, 0};                // Tikhonov ε = 0.05
  options.symmetric_nystrom.pinv = {PinvMethod::newton_schulz, 12, 0, 0, 0, 0.5};  // shift ε = 0.5
  for (auto method : {Method::pnp_nystra, Method::symmetric_nystrom}) {
    CAPTURE(to_string(method));
    Tensor<T> own(1, 1, n, dv, 54), batch(1, 1, n, dv, 55);
    batched_attention<T>(method, Q.view(), K.view(), V.view(), own.view(), options, AlphaScope::matrix);
    const BatchedDiagnostics diagnostics =
        batched_attention<T>(method, Q.view(), K.view(), V.view(), batch.view(), options, AlphaScope::batch);
    NystromOptions nystrom = method == Method::pnp_nystra ? options.pnp_nystra : options.symmetric_nystrom;
    nystrom.kernel = options.kernel;
    const NystromFactors<T> factors = method == Method::pnp_nystra
                                          ? generalized_nystrom<T>(Q.head(0), K.head(0), nystrom)
                                          : symmetric_nystrom<T>(Q.head(0), K.head(0), nystrom);
    CHECK(diagnostics.alpha == doctest::Approx(factors.pinv.alpha).epsilon(tolerance<T>(m * m)));
    CHECK(batch.values == own.values);  // the same α and options: the same arithmetic
  }
}

TEST_CASE_TEMPLATE("batched PnP-Nystra with the clamped kernel at thresholds 0 and 5 equals the naive oracle",
                   T, float, double) {
  const Index batch = 2, heads = 2, n = 40, d = 4, dv = 3, m = 5;
  // Logits s·q·k of both signs and beyond 5, so both thresholds cut.
  const Tensor<T> Q(batch, heads, n, d, 41, 2.0), K(batch, heads, n, d, 42, 2.0), V(batch, heads, n, dv, 43);
  ApproximationOptions options = small_options(m);
  options.kernel = Kernel::exponential(1.0);
  options.pnp_nystra.stabilization = Stabilization::clamped;
  for (double threshold : {0.0, 5.0}) {
    CAPTURE(threshold);
    options.pnp_nystra.clamp_threshold = threshold;
    Tensor<T> out(batch, heads, n, dv, 44);
    batched_attention<T>(Method::pnp_nystra, Q.view(), K.view(), V.view(), out.view(), options);
    for (Index i = 0; i < batch * heads; ++i) {
      CAPTURE(i);
      const Matrix<double> q = Q.head(i).template cast<double>(), k = K.head(i).template cast<double>();
      CHECK((q * k.transpose()).maxCoeff() > 5);
      const Matrix<double> expected =
          naive_clamped_nystra(q, k, V.head(i).template cast<double>(), m, 1.0, threshold);
      NystromOptions nystrom = options.pnp_nystra;
      nystrom.kernel = options.kernel;
      const Matrix<double> core =
          generalized_nystrom<T>(Q.head(i), K.head(i), nystrom).core.template cast<double>();
      const Vector<double> sigma = Eigen::JacobiSVD<Matrix<double>>(core).singularValues();
      CHECK(relative_difference(out.head(i), expected) <= tolerance<T>(n * m) * sigma(0) / sigma(m - 1));
    }
  }
}

TEST_CASE("batched attention rejects bad shapes, overlapping outputs and non-finite heads, naming them") {
  const Tensor<double> Q(2, 2, 10, 4, 51), K(2, 2, 10, 4, 52), V(2, 2, 10, 3, 53);
  Tensor<double> out(2, 2, 10, 3, 54);
  const ApproximationOptions options = small_options(4);
  const auto run = [&](const BatchView<const double>& q, const BatchView<const double>& k,
                       const BatchView<const double>& v, const BatchView<double>& o) {
    batched_attention<double>(Method::pnp_nystra, q, k, v, o, options);
  };
  const Tensor<double> short_k(2, 2, 9, 4, 55), wide_v(2, 3, 10, 3, 56);
  CHECK(throws_naming([&] { run(Q.view(), short_k.view(), V.view(), out.view()); }, "K is [2, 2, 9, 4]"));
  CHECK(throws_naming([&] { run(Q.view(), K.view(), wide_v.view(), out.view()); }, "V is [2, 3, 10, 3]"));
  Tensor<double> wrong_out(2, 2, 10, 2, 57);
  CHECK(throws_naming([&] { run(Q.view(), K.view(), V.view(), wrong_out.view()); }, "out is [2, 2, 10, 2]"));
  const BatchView<const double> empty{Q.values.data(), 0, 2, 10, 4};
  CHECK(throws_naming([&] { run(empty, empty, V.view(), out.view()); }, "Q is [0, 2, 10, 4]"));
  Tensor<double> in_place = V;
  const BatchView<double> aliased = in_place.view();
  CHECK(throws_naming([&] { run(Q.view(), K.view(), aliased, aliased); }, "overlaps"));
  Tensor<double> bad_q = Q;
  bad_q.values[std::size_t(3 * 10 * 4 + 7)] =
      std::numeric_limits<double>::quiet_NaN();  // head 3: b = 1, h = 1
  CHECK(throws_naming([&] { run(bad_q.view(), K.view(), V.view(), out.view()); }, "head 3 (b = 1, h = 1)"));
  // A batch of one head (Python's 2-D calls) keeps the head's own message: there is no head to name.
  Tensor<double> one_q(1, 1, 10, 4, 58), one_out(1, 1, 10, 4, 61);
  const Tensor<double> one_k(1, 1, 10, 4, 59), one_v(1, 1, 10, 4, 60);
  one_q.values[7] = std::numeric_limits<double>::quiet_NaN();
  const auto one_head = [&] { run(one_q.view(), one_k.view(), one_v.view(), one_out.view()); };
  CHECK(throws_naming(one_head, "landmarks: Q contains non-finite values"));
  CHECK_FALSE(throws_naming(one_head, "head 0"));
  ApproximationOptions too_many = options;
  too_many.pnp_nystra.landmarks.count = 11;
  CHECK(throws_naming(
      [&] {
        batched_attention<double>(Method::pnp_nystra, Q.view(), K.view(), V.view(), out.view(), too_many);
      },
      "11"));
}

TEST_CASE_TEMPLATE(
    "a head whose core overflows is reported non-finite with a NaN output, and leaves the other heads and "
    "the "
    "batch alpha as they are without it",
    T, float, double) {
  // Head 1's tokens shifted by 30: logits near s·d·30² = 1,800 overflow the unstabilized core in float and
  // double; heads 0 and 2 are those of a two-head batch without it, bit for bit, with the α of each matrix
  // and with the batch α (taken over the finite cores: the overflowed one would make it 0 for all).
  const Index n = 40, d = 4, m = 5, dv = 3;
  Tensor<T> Q(1, 3, n, d, 71), K(1, 3, n, d, 72);
  const Tensor<T> V(1, 3, n, dv, 73);
  for (Index e = n * d; e < 2 * n * d; ++e) {
    Q.values[std::size_t(e)] += T(30);
    K.values[std::size_t(e)] += T(30);
  }
  const auto without_head_1 = [&](const Tensor<T>& X) {
    Tensor<T> two(1, 2, n, X.dim, 0);
    std::copy_n(X.values.begin(), n * X.dim, two.values.begin());
    std::copy_n(X.values.begin() + 2 * n * X.dim, n * X.dim, two.values.begin() + n * X.dim);
    return two;
  };
  for (auto method : {PinvMethod::exact, PinvMethod::razavi}) {
    for (auto scope : {AlphaScope::matrix, AlphaScope::batch}) {
      CAPTURE(to_string(method));
      CAPTURE(to_string(scope));
      ApproximationOptions options = small_options(m);
      options.kernel = Kernel::exponential(0.5);
      options.pnp_nystra.stabilization = Stabilization::none;
      options.pnp_nystra.pinv.method = method;
      Tensor<T> out(1, 3, n, dv, 74), two_out(1, 2, n, dv, 75);
      const BatchedDiagnostics all =
          batched_attention<T>(Method::pnp_nystra, Q.view(), K.view(), V.view(), out.view(), options, scope);
      const BatchedDiagnostics two =
          batched_attention<T>(Method::pnp_nystra, without_head_1(Q).view(), without_head_1(K).view(),
                               without_head_1(V).view(), two_out.view(), options, scope);
      CHECK(all.heads[1].pinv_status == PinvStatus::non_finite);
      CHECK(out.head(1).array().isNaN().all());
      CHECK(all.alpha == two.alpha);
      CHECK(all.heads[0].pinv_status == two.heads[0].pinv_status);
      CHECK(all.heads[2].pinv_status == two.heads[1].pinv_status);
      CHECK(out.head(0) == two_out.head(0));
      CHECK(out.head(2) == two_out.head(1));
      CHECK(std::all_of(two_out.values.begin(), two_out.values.end(), [](T x) { return std::isfinite(x); }));
    }
  }
}
