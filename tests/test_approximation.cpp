#include <doctest/doctest.h>

#include "attention_oracles.hpp"
#include "method_options.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE("method names round-trip and unknown names are rejected") {
  for (auto method : methods) CHECK(method_from_string(to_string(method)) == method);
  CHECK(to_string(Method::symmetric_nystrom) == "symmetric-nystrom");
  CHECK(throws_naming([] { method_from_string("reformer"); }, "reformer"));
  // The matrix each method's errors are measured on (column error_matrix).
  CHECK(to_string(error_matrix(Method::pnp_nystra)) == "G");
  CHECK(to_string(error_matrix(Method::symmetric_nystrom)) == "G");
  for (auto method : {Method::nystromformer, Method::cur, Method::performer, Method::linformer})
    CHECK(to_string(error_matrix(method)) == "S");
  CHECK(to_string(error_matrix(Method::exact)) == "none");
}

TEST_CASE_TEMPLATE("every method: output shape, implied matrix consistent with the output", T, float,
                   double) {
  const Index n = 48;
  const Matrix<T> Q = random_matrix<T>(n, 16, 1, 0.7), K = random_matrix<T>(n, 16, 2, 0.7),
                  V = random_matrix<T>(n, 8, 3);
  const Matrix<double> exact = naive_attention(Q, K, V, 0.25);
  for (auto method : methods) {
    CAPTURE(to_string(method));
    const auto result = approximate_attention<T>(method, Q, K, V, small_options(8));
    REQUIRE(result.output.rows() == n);
    REQUIRE(result.output.cols() == 8);
    CHECK(result.output.allFinite());
    if (method == Method::exact) {
      CHECK(!result.attention());
      CHECK(relative_difference(result.output, exact) < 10 * tolerance<T>(n));
      continue;
    }
    REQUIRE(result.attention());
    CHECK(implied_matrix(method) != "none");
    // Ŝ V reproduces Ô: the operator is the matrix the method really used.
    CHECK(relative_difference(Matrix<T>(result.attention()->dense() * V), result.output) <
          100 * tolerance<T>(n));
  }
}

TEST_CASE_TEMPLATE("logits beyond the type's range: every method answers, a core that overflows is a status",
                   T, float, double) {
  // Tokens of magnitude 1e21 (float) or 1e156 (double): the logits s·qᵀk overflow T. Nyströmformer's Ã and
  // CUR's U are softmax blocks of such logits, NaN there; their pseudoinverse threw "A contains non-finite
  // values" where PnP-Nystra's overflowed core gives status non-finite.
  const double magnitude = sizeof(T) == 4 ? 1e21 : 1e156;
  const Index n = 32;
  const Matrix<T> Q = random_matrix<T>(n, 8, 41, magnitude), K = random_matrix<T>(n, 8, 42, magnitude),
                  V = random_matrix<T>(n, 4, 43);
  for (auto method : methods) {
    CAPTURE(to_string(method));
    const auto result = approximate_attention<T>(method, Q, K, V, small_options(8));
    CHECK(result.output.rows() == n);
    if (method == Method::nystromformer || method == Method::cur) {
      CHECK(result.pinv_status == PinvStatus::non_finite);
      CHECK(!result.output.allFinite());
    }
  }
}

TEST_CASE("softmax methods require the exponential kernel") {
  const Matrix<double> Q = random_matrix<double>(16, 4, 1), V = random_matrix<double>(16, 2, 2);
  ApproximationOptions options = small_options(4);
  options.kernel = Kernel::laplacian(4);
  CHECK(throws_naming([&] { approximate_attention<double>(Method::performer, Q, Q, V, options); },
                      "laplacian"));
  CHECK_NOTHROW(approximate_attention<double>(Method::pnp_nystra, Q, Q, V, options));
}

TEST_CASE_TEMPLATE(
    "with_drawn_projections makes the seed's draws explicit: the same outputs, given ones kept", T, float,
    double) {
  const Index n = 40, d = 12;
  const Matrix<T> Q = random_matrix<T>(n, d, 11, 0.7), K = random_matrix<T>(n, d, 12, 0.7),
                  V = random_matrix<T>(n, 5, 13);
  ApproximationOptions options = small_options(6);
  options.linformer.share_projections = false;
  for (auto method : methods) {
    CAPTURE(to_string(method));
    const ApproximationOptions drawn = with_drawn_projections(method, options, n, d);
    CHECK(approximate_attention<T>(method, Q, K, V, drawn).output ==
          approximate_attention<T>(method, Q, K, V, options).output);
    CHECK((drawn.performer.projection.size() > 0) == (method == Method::performer));
    CHECK((drawn.linformer.e.size() > 0) == (method == Method::linformer));
    CHECK((drawn.linformer.f.size() > 0) == (method == Method::linformer));
  }
  const ApproximationOptions drawn = with_drawn_projections(Method::linformer, options, n, d);
  CHECK(drawn.linformer.e.rows() == options.linformer.projected);
  CHECK(drawn.linformer.e.cols() == n);
  CHECK(drawn.linformer.e != drawn.linformer.f);
  // Given projections are kept; a shared F stays shared (not drawn).
  ApproximationOptions given = options;
  given.linformer.e = Matrix<double>::Constant(options.linformer.projected, n, 0.1);
  given.linformer.share_projections = true;
  const ApproximationOptions kept = with_drawn_projections(Method::linformer, given, n, d);
  CHECK(kept.linformer.e == given.linformer.e);
  CHECK(kept.linformer.f.size() == 0);
}

TEST_CASE_TEMPLATE("every low-rank method above the parallel threshold: two threads give one thread's bits",
                   T, float, double) {
  // N·d·r, k·N·d and N·m·d above detail::parallel_work: the panels of tokens run on two threads, and every
  // sum over N is added in panel order as on one thread.
  const Index n = 1100, d = 64;
  const Matrix<T> Q = random_matrix<T>(n, d, 21, 0.2), K = random_matrix<T>(n, d, 22, 0.2),
                  V = random_matrix<T>(n, 9, 23);
  ApproximationOptions options = small_options(64);
  options.kernel = Kernel::exponential(0.125);
  options.performer.features = 64;
  REQUIRE(double(n) * d * options.performer.features >= detail::parallel_work);
  REQUIRE(double(options.linformer.projected) * n * d >= detail::parallel_work);
  REQUIRE(double(n) * options.nystromformer.landmarks * d >= detail::parallel_work);
  REQUIRE(double(n) * options.cur.selection.count * d >= detail::parallel_work);
  REQUIRE(double(n) * options.symmetric_nystrom.landmarks.count * d >= detail::parallel_work);
  const int before = threads();
  for (const bool share : {false, true}) {
    options.linformer.share_projections = share;
    for (const Method method : {Method::pnp_nystra, Method::symmetric_nystrom, Method::performer,
                                Method::linformer, Method::nystromformer, Method::cur}) {
      CAPTURE(to_string(method));
      CAPTURE(share);
      set_threads(2);
      const Matrix<T> two = approximate_attention<T>(method, Q, K, V, options).output;
      set_threads(1);
      const Matrix<T> one = approximate_attention<T>(method, Q, K, V, options).output;
      CHECK(two == one);
      CHECK(one.allFinite());
    }
  }
  set_threads(before);
}
