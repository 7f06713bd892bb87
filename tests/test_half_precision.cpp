/// @file test_half_precision.cpp
/// Emulated half and bfloat16 storage (docs/mathematics.md §8) against a slow direct oracle that performs
/// each documented step in float32 and rounds its result with round_to, entry by entry: products as float32
/// sums of fused multiply-adds in ascending order of the inner index (the order §8 fixes), exponentials by
/// std::exp, every rounding point counted. The landmark choice and the SVD of the exact pseudoinverse are the
/// library's own (tested in test_landmarks and test_pinv); every step after them is the oracle's.

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "method_options.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/linformer.hpp"
#include "nystrom/performer.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

constexpr Precision emulated_formats[] = {Precision::half, Precision::bfloat16};
constexpr Index tokens = 37, dim = 8, value_dim = 5;
constexpr double scale = 0.25;

/// The oracle's storage: R(x) by round_to, entry by entry, counting as docs/mathematics.md §8 says: a finite
/// nonzero value that becomes ±Inf (overflowed) or ±0 (underflowed), and every NaN written.
class Oracle {
 public:
  explicit Oracle(Precision format) : format_(format) {}
  const RoundingCounts& counts() const { return counts_; }

  Matrix<float> R(Matrix<float> x) {
    for (Index i = 0; i < x.size(); ++i) x.data()[i] = rounded(x.data()[i]);
    return x;
  }
  /// Each entry rounded once from double.
  Matrix<float> R_from_double(const Matrix<double>& x) {
    Matrix<float> out(x.rows(), x.cols());
    for (Index i = 0; i < x.size(); ++i) out.data()[i] = rounded(x.data()[i]);
    return out;
  }

 private:
  template <class Float>
  float rounded(Float x) {
    const float y = round_to(format_, x);
    const bool finite_nonzero = std::isfinite(x) && x != 0;
    counts_.overflowed += finite_nonzero && std::isinf(y);
    counts_.underflowed += finite_nonzero && y == 0;
    counts_.nan += std::isnan(y);
    return y;
  }

  Precision format_;
  RoundingCounts counts_;
};

/// A·B, each entry one float32 sum over k = 0, 1, … of fused multiply-adds from +0.
Matrix<float> product(const Matrix<float>& A, const Matrix<float>& B) {
  REQUIRE(A.cols() == B.rows());
  Matrix<float> C(A.rows(), B.cols());
  for (Index i = 0; i < A.rows(); ++i)
    for (Index j = 0; j < B.cols(); ++j) {
      float sum = 0;
      for (Index k = 0; k < A.cols(); ++k) sum = std::fma(A(i, k), B(k, j), sum);
      C(i, j) = sum;
    }
  return C;
}

Matrix<float> ones(Index n) {
  return Matrix<float>::Ones(n, 1);
}

/// The largest entry of each row, NaN skipped.
Matrix<float> row_max(const Matrix<float>& x) {
  Matrix<float> out = Matrix<float>::Constant(x.rows(), 1, -std::numeric_limits<float>::infinity());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j)
      if (x(i, j) > out(i, 0)) out(i, 0) = x(i, j);
  return out;
}

/// exp(x_ij − shift_i) in float32.
Matrix<float> exp_minus(const Matrix<float>& x, const Matrix<float>& shift) {
  Matrix<float> out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j) out(i, j) = std::exp(x(i, j) - shift(i, 0));
  return out;
}

/// x_ij / (d_i + δ) in float32.
Matrix<float> divided(const Matrix<float>& x, const Matrix<float>& d, float delta = 0) {
  Matrix<float> out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index j = 0; j < x.cols(); ++j) out(i, j) = x(i, j) / (d(i, 0) + delta);
  return out;
}

/// c·I − P in float32.
Matrix<float> identity_minus(float c, const Matrix<float>& P) {
  Matrix<float> out = -P;
  for (Index i = 0; i < P.rows(); ++i) out(i, i) = c - P(i, i);
  return out;
}

/// α·x in float32.
Matrix<float> times(float alpha, Matrix<float> x) {
  for (Index i = 0; i < x.size(); ++i) x.data()[i] = alpha * x.data()[i];
  return x;
}

/// R(φ(X, Y)): R(s·(X Yᵀ)), or the distance kernels' R(f·Σ_c |x_c − y_c|) and R(f·Σ_c (x_c − y_c)²).
Matrix<float> exponent(Oracle& oracle, const Kernel& kernel, const Matrix<float>& X, const Matrix<float>& Y) {
  if (kernel.type == KernelType::exponential)
    return oracle.R(times(float(kernel.param), product(X, Y.transpose())));
  const bool l1 = kernel.type == KernelType::laplacian;
  const float factor = float(l1 ? -1.0 / kernel.param : -0.5 / kernel.param / kernel.param);
  Matrix<float> out(X.rows(), Y.rows());
  for (Index i = 0; i < X.rows(); ++i)
    for (Index j = 0; j < Y.rows(); ++j) {
      float sum = 0;
      for (Index c = 0; c < X.cols(); ++c) {
        const float difference = X(i, c) - Y(j, c);
        sum = l1 ? sum + std::abs(difference) : std::fma(difference, difference, sum);
      }
      out(i, j) = factor * sum;
    }
  return oracle.R(out);
}

/// The rounded softmax rows of rounded logits: R(E ⊘ R(E 1)) with E = R(exp(L − μ)).
Matrix<float> softmax(Oracle& oracle, const Matrix<float>& logits) {
  const Matrix<float> E = oracle.R(exp_minus(logits, row_max(logits)));
  return oracle.R(divided(E, oracle.R(product(E, ones(E.cols())))));
}

Matrix<float> nan_matrix(Index rows, Index cols) {
  return Matrix<float>::Constant(rows, cols, std::numeric_limits<float>::quiet_NaN());
}

/// The pseudoinverse of a rounded A as §8 lists it, `steps` steps of an iteration (the count the library
/// ran: the oracle does not decide divergence).
Matrix<float> pinv_oracle(Oracle& oracle, const Matrix<float>& A, const PinvOptions& options, int steps) {
  if (!A.allFinite()) return nan_matrix(A.cols(), A.rows());
  Matrix<float> M = options.tikhonov > 0 ? oracle.R(product(A.transpose(), A)) : A;
  const double epsilon = options.tikhonov > 0 ? options.tikhonov : options.shift;
  if (epsilon > 0) {
    for (Index i = 0; i < M.rows(); ++i) M(i, i) = M(i, i) + float(epsilon);
    M = oracle.R(M);
  }
  if (!M.allFinite()) return nan_matrix(A.cols(), A.rows());
  Matrix<float> Z;
  if (!is_iterative(options.method)) {
    PinvOptions svd;
    svd.method = options.method;
    svd.tolerance = options.tolerance;
    // The float computation's cut, from A's shape (M is AᵀA for Tikhonov).
    if (svd.tolerance == 0 && svd.method == PinvMethod::exact)
      svd.tolerance = double(std::max(A.rows(), A.cols())) * std::numeric_limits<float>::epsilon();
    Z = oracle.R(pseudoinverse<float>(M, svd).z);
  } else {
    const Matrix<double> m = M.cast<double>();
    const double alpha = options.alpha > 0 ? options.alpha : safe_alpha<double>(m);
    Z = oracle.R_from_double(alpha * m.transpose());
    for (int step = 0; step < steps; ++step) {
      const Matrix<float> P = oracle.R(product(M, Z));
      if (options.method == PinvMethod::newton_schulz) {
        Z = oracle.R(product(Z, oracle.R(identity_minus(2, P))));
        continue;
      }
      const Matrix<float> inner = oracle.R(product(P, oracle.R(identity_minus(7, P))));
      const Matrix<float> middle = oracle.R(product(P, oracle.R(identity_minus(15, inner))));
      Z = oracle.R(times(0.25f, product(Z, oracle.R(identity_minus(13, middle)))));
    }
  }
  return options.tikhonov > 0 ? oracle.R(product(Z, A.transpose())) : Z;
}

/// The oracle's output and counts.
struct Expected {
  Matrix<float> output;
  RoundingCounts counts;
};

/// PnP-Nystra Algorithm 1 on rounded blocks: R(R(G_L R(Z R(G_U Ṽ))) ⊘ (R(G_L R(Z R(G_U 1))) + δ)).
Matrix<float> algorithm1(Oracle& oracle, const Matrix<float>& left, const Matrix<float>& Z,
                         const Matrix<float>& upper, const Matrix<float>& values, float delta) {
  const Matrix<float> W = oracle.R(product(Z, oracle.R(product(upper, values))));
  const Matrix<float> w = oracle.R(product(Z, oracle.R(product(upper, ones(upper.cols())))));
  const Matrix<float> denominators = oracle.R(product(left, w));
  return oracle.R(divided(oracle.R(product(left, W)), denominators, delta));
}

/// pnp-nystra (generalized) or symmetric-nystrom by §8, with `steps` pseudoinverse steps.
Expected nystrom_oracle(Precision format, const Matrix<float>& Q, const Matrix<float>& K,
                        const Matrix<float>& V, const NystromOptions& options, bool generalized, int steps) {
  Oracle oracle(format);
  const Landmarks<float> chosen = select_landmarks<float>(Q, K, options.landmarks, options.kernel);
  const Matrix<float> q = oracle.R(Q), v = oracle.R(V);
  const Matrix<float> q_bar = oracle.R(chosen.q), k_bar = oracle.R(chosen.k);
  const bool clamped = options.stabilization == Stabilization::clamped;
  const bool row_max_scaled =
      options.stabilization == Stabilization::row_max || options.stabilization == Stabilization::row_sum;
  const auto block = [&](const Matrix<float>& phi, const Matrix<float>& shift) {
    if (!clamped) return oracle.R(exp_minus(phi, shift));
    const float tau = float(options.clamp_threshold);
    Matrix<float> out(phi.rows(), phi.cols());
    for (Index i = 0; i < phi.size(); ++i)
      out.data()[i] = std::exp(std::min(phi.data()[i], tau)) + std::max(phi.data()[i] - tau, 0.0f);
    return oracle.R(out);
  };
  const float c = float(options.kernel.log_shift);
  const Matrix<float> phi_left = exponent(oracle, options.kernel, q, k_bar);
  const Matrix<float> phi_upper =
      generalized ? exponent(oracle, options.kernel, q_bar, oracle.R(K)) : Matrix<float>();
  const Matrix<float> phi_core = exponent(oracle, options.kernel, q_bar, k_bar);
  const Matrix<float> core_shift =
      row_max_scaled ? row_max(phi_upper) : Matrix<float>::Constant(q_bar.rows(), 1, c);
  const Matrix<float> left =
      block(phi_left, row_max_scaled ? row_max(phi_left) : Matrix<float>::Constant(Q.rows(), 1, c));
  Matrix<float> upper = generalized ? block(phi_upper, core_shift) : Matrix<float>(left.transpose());
  Matrix<float> core = block(phi_core, core_shift);
  if (options.stabilization == Stabilization::row_sum) {
    Matrix<float> sums = oracle.R(product(upper, ones(upper.cols())));
    for (Index i = 0; i < sums.rows(); ++i)
      if (!(sums(i, 0) > 0)) sums(i, 0) = 1;
    upper = oracle.R(divided(upper, sums));
    core = oracle.R(divided(core, sums));
  }
  const Matrix<float> Z = pinv_oracle(oracle, core, options.pinv, steps);
  const Matrix<float> output = algorithm1(oracle, left, Z, upper, v, clamped ? 1e-12f : 0.0f);
  return {output, oracle.counts()};
}

/// Exact attention by §8: R(R(P Ṽ) ⊘ R(P 1)) with P = R(exp(φ − μ)) of the rounded logits.
Expected exact_oracle(Precision format, const Matrix<float>& Q, const Matrix<float>& K,
                      const Matrix<float>& V, const Kernel& kernel) {
  Oracle oracle(format);
  const Matrix<float> logits = exponent(oracle, kernel, oracle.R(Q), oracle.R(K));
  const Matrix<float> P = oracle.R(exp_minus(logits, row_max(logits)));
  const Matrix<float> sums = oracle.R(product(P, ones(P.cols())));
  const Matrix<float> output = oracle.R(divided(oracle.R(product(P, oracle.R(V))), sums));
  return {output, oracle.counts()};
}

/// Nyströmformer by §8 (no front padding), with `steps` Razavi steps.
Expected nystromformer_oracle(Precision format, const Matrix<float>& Q, const Matrix<float>& K,
                              const Matrix<float>& V, const NystromformerOptions& options, int steps) {
  Oracle oracle(format);
  const Kernel kernel = Kernel::exponential(scale);
  const Matrix<float> q_bar = oracle.R(segment_means<float>(Q, options.landmarks));
  const Matrix<float> k_bar = oracle.R(segment_means<float>(K, options.landmarks));
  const Matrix<float> q = oracle.R(Q), k = oracle.R(K), v = oracle.R(V);
  const Matrix<float> left = softmax(oracle, exponent(oracle, kernel, q, k_bar));
  const Matrix<float> core = softmax(oracle, exponent(oracle, kernel, q_bar, k_bar));
  const Matrix<float> upper = softmax(oracle, exponent(oracle, kernel, q_bar, k));
  const Matrix<float> Z = pinv_oracle(oracle, core, options.pinv, steps);
  const Matrix<float> output = oracle.R(product(left, oracle.R(product(Z, oracle.R(product(upper, v))))));
  return {output, oracle.counts()};
}

/// CUR attention by §8.
Expected cur_oracle(Precision format, const Matrix<float>& Q, const Matrix<float>& K, const Matrix<float>& V,
                    const CurOptions& options, int steps) {
  Oracle oracle(format);
  const Kernel kernel = Kernel::exponential(scale);
  const Landmarks<float> chosen = select_landmarks<float>(Q, K, options.selection, kernel);
  const Matrix<float> q = oracle.R(Q), k = oracle.R(K), v = oracle.R(V);
  const Matrix<float> columns = softmax(oracle, exponent(oracle, kernel, q, oracle.R(chosen.k)));
  const Matrix<float> rows = softmax(oracle, exponent(oracle, kernel, oracle.R(chosen.q), k));
  Matrix<float> intersection(rows.rows(), columns.cols());
  for (Index i = 0; i < intersection.rows(); ++i) intersection.row(i) = columns.row(chosen.q_indices[i]);
  const Matrix<float> Z = pinv_oracle(oracle, intersection, options.pinv, steps);
  const Matrix<float> row_values = oracle.R(product(rows, v));
  Matrix<float> output = oracle.R(product(columns, oracle.R(product(Z, row_values))));
  if (options.copy_rows)
    for (Index i = 0; i < row_values.rows(); ++i) output.row(chosen.q_indices[i]) = row_values.row(i);
  return {output, oracle.counts()};
}

/// Performer's features of §8 for rounded X and Ω̃: X̃ = R(√s·X), P = R(X̃ Ω̃ᵀ), h = R(½·Σ x̃²), E = R(P − h).
std::pair<Matrix<float>, Matrix<float>> performer_exponents(Oracle& oracle, const Matrix<float>& X,
                                                            const Matrix<float>& omega) {
  const Matrix<float> scaled = oracle.R(times(float(std::sqrt(scale)), X));
  const Matrix<float> projections = oracle.R(product(scaled, omega.transpose()));
  Matrix<float> half_norms = Matrix<float>::Zero(X.rows(), 1);
  for (Index i = 0; i < X.rows(); ++i)
    for (Index c = 0; c < X.cols(); ++c)
      half_norms(i, 0) = std::fma(scaled(i, c), scaled(i, c), half_norms(i, 0));
  half_norms = oracle.R(times(0.5f, half_norms));
  Matrix<float> exponents(X.rows(), omega.rows());
  for (Index i = 0; i < X.rows(); ++i)
    for (Index f = 0; f < omega.rows(); ++f) exponents(i, f) = projections(i, f) - half_norms(i, 0);
  return {projections, oracle.R(exponents)};
}

/// R(ρ·(exp(E_if + offset_f − shift_i) + ε)).
Matrix<float> performer_features(Oracle& oracle, const Matrix<float>& E, const Matrix<float>& offset,
                                 bool row_max_shift, const Matrix<float>& shift, double epsilon) {
  const float ratio = float(1 / std::sqrt(double(E.cols())));
  Matrix<float> x = E;
  for (Index i = 0; i < x.rows(); ++i)
    for (Index f = 0; f < x.cols(); ++f) x(i, f) = x(i, f) + (offset.size() ? offset(f, 0) : 0.0f);
  const Matrix<float> shifts = row_max_shift ? row_max(x) : shift;
  Matrix<float> out(x.rows(), x.cols());
  for (Index i = 0; i < x.rows(); ++i)
    for (Index f = 0; f < x.cols(); ++f)
      out(i, f) = ratio * (std::exp(shifts.size() ? x(i, f) - shifts(i, 0) : x(i, f)) + float(epsilon));
  return oracle.R(out);
}

/// FAVOR+ by §8 on the projection Ω (double).
Expected performer_oracle(Precision format, const Matrix<float>& Q, const Matrix<float>& K,
                          const Matrix<float>& V, const Matrix<double>& projection, double epsilon) {
  Oracle oracle(format);
  const Matrix<float> q = oracle.R(Q), k = oracle.R(K), v = oracle.R(V);
  const Matrix<float> omega = oracle.R_from_double(projection);
  const auto [q_projections, q_exponents] = performer_exponents(oracle, q, omega);
  const auto [k_projections, k_exponents] = performer_exponents(oracle, k, omega);
  Matrix<float> q_features, k_features;
  if (epsilon > 0) {
    const float key_shift = k_projections.maxCoeff();
    q_features =
        performer_features(oracle, q_exponents, Matrix<float>(), false, row_max(q_projections), epsilon);
    k_features = performer_features(oracle, k_exponents, Matrix<float>(), false,
                                    Matrix<float>::Constant(K.rows(), 1, key_shift), epsilon);
  } else {
    const Matrix<float> key_max = row_max(k_exponents.transpose());
    q_features = performer_features(oracle, q_exponents, key_max, true, Matrix<float>(), 0);
    k_features = performer_features(oracle, k_exponents, -key_max, false, Matrix<float>(), 0);
  }
  const Matrix<float> context = oracle.R(product(k_features.transpose(), v));
  const Matrix<float> normalizer =
      oracle.R(product(q_features, oracle.R(product(k_features.transpose(), ones(K.rows())))));
  const Matrix<float> output = oracle.R(divided(oracle.R(product(q_features, context)), normalizer));
  return {output, oracle.counts()};
}

/// Linformer by §8 on the projections E, F (double).
Expected linformer_oracle(Precision format, const Matrix<float>& Q, const Matrix<float>& K,
                          const Matrix<float>& V, const Matrix<double>& e, const Matrix<double>& f) {
  Oracle oracle(format);
  const Matrix<float> q = oracle.R(Q), k = oracle.R(K), v = oracle.R(V);
  const Matrix<float> e_rounded = oracle.R_from_double(e), f_rounded = oracle.R_from_double(f);
  const Matrix<float> projected_keys = oracle.R(product(e_rounded, k));
  const Matrix<float> projected_values = oracle.R(product(f_rounded, v));
  const Matrix<float> P = softmax(oracle, exponent(oracle, Kernel::exponential(scale), q, projected_keys));
  return {oracle.R(product(P, projected_values)), oracle.counts()};
}

/// The index of the first entry where a and b differ in their bits (NaN matches any NaN), −1 where none does,
/// −2 for different shapes.
Index first_difference(const Matrix<float>& a, const Matrix<float>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return -2;
  for (Index i = 0; i < a.size(); ++i) {
    const float x = a.data()[i], y = b.data()[i];
    if (std::bit_cast<std::uint32_t>(x) != std::bit_cast<std::uint32_t>(y) &&
        !(std::isnan(x) && std::isnan(y)))
      return i;
  }
  return -1;
}

/// Bit-for-bit equality of an emulated result with the oracle's, outputs and counts.
template <class Result>
void check_matches(const Result& result, const Expected& expected) {
  CHECK(first_difference(result.output, expected.output) == -1);
  CHECK(result.rounding.overflowed == expected.counts.overflowed);
  CHECK(result.rounding.underflowed == expected.counts.underflowed);
  CHECK(result.rounding.nan == expected.counts.nan);
}

/// A result's counts with its pseudoinverse's added (as Approximation::rounding sums them).
template <class Result>
Result with_pinv_counts(Result result) {
  result.rounding += result.pinv.rounding;
  return result;
}

/// The inputs of the oracle comparisons: N = 37 tokens of d = 8, dv = 5.
struct Inputs {
  std::string name;
  Matrix<float> q, k, v;
};

/// Random tokens; logits around 11.09, where exp overflows half (no shift); equal tokens (a rank-one G and a
/// singular core); logits near −11.5, whose small kernel entries give a core with a pseudoinverse beyond
/// half's range.
std::vector<Inputs> oracle_inputs() {
  const Matrix<float> noise_q = random_matrix<float>(tokens, dim, 11, 0.3f),
                      noise_k = random_matrix<float>(tokens, dim, 12, 0.3f);
  const Matrix<float> v = random_matrix<float>(tokens, value_dim, 13);
  const Matrix<float> offset = Matrix<float>::Constant(tokens, dim, 2.4f);
  const Matrix<float> equal_q = random_matrix<float>(1, dim, 14).replicate(tokens, 1),
                      equal_k = random_matrix<float>(1, dim, 15).replicate(tokens, 1);
  return {
      {"random", random_matrix<float>(tokens, dim, 1, 0.9f), random_matrix<float>(tokens, dim, 2, 0.9f), v},
      {"large logits", offset + noise_q, offset + noise_k, v},
      {"equal tokens", equal_q, equal_k, v},
      {"small kernel", offset + noise_q, -offset - noise_k, v}};
}

/// Every stabilization with every pseudoinverse of pnp-nystra.
constexpr Stabilization stabilizations[] = {Stabilization::row_max, Stabilization::clamped,
                                            Stabilization::none, Stabilization::row_sum};
constexpr PinvMethod pinv_methods[] = {PinvMethod::exact, PinvMethod::razavi, PinvMethod::newton_schulz,
                                       PinvMethod::truncated};

ApproximationOptions emulating(Precision format, Index m) {
  ApproximationOptions options = small_options(m);
  options.storage = format;
  return options;
}

}  // namespace

TEST_CASE("emulation: exp of a logit overflows float16 above 11.09, bfloat16 keeps float32's range") {
  CHECK(std::isfinite(round_to(Precision::half, std::exp(11.089f))));
  CHECK(std::isinf(round_to(Precision::half, std::exp(11.091f))));
  CHECK(std::isfinite(round_to(Precision::bfloat16, std::exp(88.7f))));
  CHECK(std::isinf(round_to(Precision::bfloat16, std::exp(88.8f))));
  CHECK(machine_epsilon(Precision::half) == 0x1.0p-10);
  CHECK(machine_epsilon(Precision::bfloat16) == 0x1.0p-7);
}

TEST_CASE("emulation: round_into rounds doubles once and counts as round_in_place does") {
  // 1 + 2⁻¹¹ + 2⁻⁴⁰ is above half's midpoint 1 + 2⁻¹¹ only in double: through float it would round to 1.
  const double values[] = {1 + 0x1.0p-11 + 0x1.0p-40, 1e6, 1e-9, 0, std::numeric_limits<double>::quiet_NaN()};
  float out[5];
  const RoundingCounts counts = round_into(Precision::half, values, 5, out);
  CHECK(out[0] == 1 + 0x1.0p-10f);
  CHECK(std::isinf(out[1]));
  CHECK(out[2] == 0);
  CHECK(out[3] == 0);
  CHECK(std::isnan(out[4]));
  CHECK(counts == RoundingCounts{1, 1, 1});
}

TEST_CASE("emulated pseudoinverse: every method and regularization equals the oracle bit for bit") {
  const Matrix<float> well = random_matrix<float>(6, 6, 21) + 4 * Matrix<float>::Identity(6, 6);
  const Matrix<float> singular = random_low_rank<float>(6, 6, 3, 22);
  const Matrix<float> tiny = 1e-5f * (Matrix<float>::Identity(3, 3) + random_matrix<float>(3, 3, 23, 0.1));
  for (const Precision format : emulated_formats)
    for (const PinvMethod method : pinv_methods)
      for (const auto& [A, name] :
           {std::pair{well, "well conditioned"}, std::pair{singular, "rank 3"}, std::pair{tiny, "tiny"}})
        for (const auto& [tikhonov, shift] :
             {std::pair{0.0, 0.0}, std::pair{0.0, 0.5}, std::pair{0.05, 0.0}}) {
          CAPTURE(to_string(format));
          CAPTURE(to_string(method));
          CAPTURE(name);
          CAPTURE(tikhonov);
          CAPTURE(shift);
          PinvOptions options;
          options.method = method;
          options.iterations = 8;
          options.tikhonov = tikhonov;
          options.shift = shift;
          options.storage = format;
          const PinvResult<float> result = pseudoinverse<float>(A, options);
          Oracle oracle(format);
          const Matrix<float> expected = pinv_oracle(oracle, oracle.R(A), options, result.iterations);
          CHECK(first_difference(result.z, expected) == -1);
          CHECK(result.rounding == oracle.counts());
          if (is_iterative(method) && result.status == PinvStatus::completed) CHECK(result.iterations == 8);
          CHECK((result.status == PinvStatus::non_finite) == !expected.allFinite());
        }
}

TEST_CASE("emulated pseudoinverse: a continued iteration gives the same iterates as a fresh one") {
  const Matrix<float> A = random_matrix<float>(5, 5, 31) + 3 * Matrix<float>::Identity(5, 5);
  PinvOptions options;
  options.method = PinvMethod::razavi;
  options.storage = Precision::half;
  std::optional<PinvIteration<float>> iteration;
  for (const int iterations : {2, 4, 6}) {
    options.iterations = iterations;
    const PinvResult<float> continued = core_pseudoinverse<float>(A, options, iteration);
    const PinvResult<float> fresh = pseudoinverse<float>(A, options);
    CHECK(first_difference(continued.z, fresh.z) == -1);
    CHECK(continued.rounding == fresh.rounding);
  }
}

TEST_CASE("emulated pnp-nystra: every stabilization and pseudoinverse equals the oracle bit for bit") {
  const std::vector<Inputs> inputs = oracle_inputs();
  RoundingCounts seen;  // every kind of count occurs among the cases
  for (const Precision format : emulated_formats)
    for (const Index m : {4, 1})
      for (const Inputs& input : inputs)
        for (const Stabilization stabilization : stabilizations)
          for (const PinvMethod method : pinv_methods) {
            CAPTURE(to_string(format));
            CAPTURE(m);
            CAPTURE(input.name);
            CAPTURE(to_string(stabilization));
            CAPTURE(to_string(method));
            ApproximationOptions options = emulating(format, m);
            options.pnp_nystra.stabilization = stabilization;
            options.pnp_nystra.pinv.method = method;
            const Approximation<float> result =
                approximate_attention<float>(Method::pnp_nystra, input.q, input.k, input.v, options);
            NystromOptions nystrom = options.pnp_nystra;
            nystrom.kernel = options.kernel;
            check_matches(result, nystrom_oracle(format, input.q, input.k, input.v, nystrom, true,
                                                 result.kernel_factors->pinv.iterations));
            seen += result.rounding;
          }
  CHECK(seen.overflowed > 0);
  CHECK(seen.underflowed > 0);
  CHECK(seen.nan > 0);
}

TEST_CASE(
    "emulated symmetric-nystrom: none and clamped, Newton-Schulz on W + eps I and exact, equal the oracle") {
  const std::vector<Inputs> inputs = oracle_inputs();
  for (const Precision format : emulated_formats)
    for (const Inputs& input : inputs)
      for (const Stabilization stabilization : {Stabilization::none, Stabilization::clamped})
        for (const PinvMethod method : {PinvMethod::newton_schulz, PinvMethod::exact}) {
          CAPTURE(to_string(format));
          CAPTURE(input.name);
          CAPTURE(to_string(stabilization));
          CAPTURE(to_string(method));
          ApproximationOptions options = emulating(format, 4);
          options.symmetric_nystrom.stabilization = stabilization;
          options.symmetric_nystrom.pinv.method = method;
          const Approximation<float> result =
              approximate_attention<float>(Method::symmetric_nystrom, input.q, input.q, input.v, options);
          NystromOptions nystrom = options.symmetric_nystrom;
          nystrom.kernel = options.kernel;
          check_matches(result, nystrom_oracle(format, input.q, input.q, input.v, nystrom, false,
                                               result.kernel_factors->pinv.iterations));
        }
}

TEST_CASE("emulated softmax methods equal the oracle bit for bit") {
  const std::vector<Inputs> inputs = oracle_inputs();
  for (const Precision format : emulated_formats)
    for (const Index m : {4, 1})
      for (const Inputs& input : inputs) {
        CAPTURE(to_string(format));
        CAPTURE(m);
        CAPTURE(input.name);
        const ApproximationOptions options = emulating(format, m);
        // Nyströmformer and CUR through their own entry points, whose results tell the pseudoinverse's steps.
        NystromformerOptions nystromformer = options.nystromformer;
        nystromformer.storage = format;
        const NystromformerResult<float> ours =
            nystromformer_attention<float>(input.q, input.k, input.v, scale, nystromformer);
        check_matches(with_pinv_counts(ours), nystromformer_oracle(format, input.q, input.k, input.v,
                                                                   nystromformer, ours.pinv.iterations));
        CHECK(approximate_attention<float>(Method::nystromformer, input.q, input.k, input.v, options)
                  .rounding == with_pinv_counts(ours).rounding);
        for (const PinvMethod method : {PinvMethod::exact, PinvMethod::razavi})
          for (const bool copy_rows : {false, true}) {
            CAPTURE(to_string(method));
            CAPTURE(copy_rows);
            CurOptions cur = options.cur;
            cur.storage = format;
            cur.pinv.method = method;
            cur.copy_rows = copy_rows;
            const CurResult<float> result = cur_attention<float>(input.q, input.k, input.v, scale, cur);
            check_matches(with_pinv_counts(result),
                          cur_oracle(format, input.q, input.k, input.v, cur, result.pinv.iterations));
          }
        for (const double epsilon : {0.0, 1e-4}) {
          CAPTURE(epsilon);
          ApproximationOptions performer = with_drawn_projections(Method::performer, options, tokens, dim);
          performer.performer.feature_epsilon = epsilon;
          const Approximation<float> result =
              approximate_attention<float>(Method::performer, input.q, input.k, input.v, performer);
          check_matches(result, performer_oracle(format, input.q, input.k, input.v,
                                                 performer.performer.projection, epsilon));
        }
        for (const bool shared : {false, true}) {
          CAPTURE(shared);
          ApproximationOptions linformer = options;
          linformer.linformer.share_projections = shared;
          linformer = with_drawn_projections(Method::linformer, linformer, tokens, dim);
          const Approximation<float> result =
              approximate_attention<float>(Method::linformer, input.q, input.k, input.v, linformer);
          const Matrix<double>& e = linformer.linformer.e;
          check_matches(result, linformer_oracle(format, input.q, input.k, input.v, e,
                                                 shared ? e : linformer.linformer.f));
        }
      }
}

TEST_CASE("emulated exact attention: rounded logits, exp with the row-max shift, sums and products") {
  const std::vector<Inputs> inputs = oracle_inputs();
  for (const Precision format : emulated_formats)
    for (const Inputs& input : inputs)
      for (const Kernel& kernel : {Kernel::exponential(scale), Kernel::laplacian(4), Kernel::gaussian(2)}) {
        CAPTURE(to_string(format));
        CAPTURE(input.name);
        CAPTURE(kernel.label());
        ApproximationOptions options = emulating(format, 4);
        options.kernel = kernel;
        const Approximation<float> result =
            approximate_attention<float>(Method::exact, input.q, input.k, input.v, options);
        check_matches(result, exact_oracle(format, input.q, input.k, input.v, kernel));
      }
}

TEST_CASE(
    "emulation: logits above 11.09 overflow half's plain blocks, and the row-max shift and exact avoid it") {
  const Inputs large = oracle_inputs()[1];
  ApproximationOptions options = emulating(Precision::half, 4);
  options.pnp_nystra.stabilization = Stabilization::none;
  const Approximation<float> plain =
      approximate_attention<float>(Method::pnp_nystra, large.q, large.k, large.v, options);
  CHECK(plain.rounding.overflowed > 0);
  CHECK(plain.pinv_status == PinvStatus::non_finite);
  options.pnp_nystra.stabilization = Stabilization::row_max;
  const Approximation<float> scaled =
      approximate_attention<float>(Method::pnp_nystra, large.q, large.k, large.v, options);
  CHECK(scaled.rounding.overflowed == 0);
  CHECK(scaled.output.allFinite());
  const Approximation<float> exact =
      approximate_attention<float>(Method::exact, large.q, large.k, large.v, options);
  CHECK(exact.rounding == RoundingCounts{});
  // bfloat16 has float32's range: the same plain blocks stay finite.
  options.storage = Precision::bfloat16;
  options.pnp_nystra.stabilization = Stabilization::none;
  CHECK(approximate_attention<float>(Method::pnp_nystra, large.q, large.k, large.v, options)
            .rounding.overflowed == 0);
}

TEST_CASE("emulation: a core whose pseudoinverse overflows half is counted, and Ô's rows come as they are") {
  const Inputs small = oracle_inputs()[3];
  ApproximationOptions options = emulating(Precision::half, 1);
  options.pnp_nystra.stabilization = Stabilization::none;
  const Approximation<float> result =
      approximate_attention<float>(Method::pnp_nystra, small.q, small.k, small.v, options);
  const float core = result.kernel_factors->core(0, 0);
  CHECK(core > 0);
  CHECK(1 / core > 65504);
  CHECK(std::isinf(result.kernel_factors->pinv.z(0, 0)));
  CHECK(result.rounding.overflowed >= 1);
  CHECK(!result.output.allFinite());
}

TEST_CASE(
    "emulated outputs stay near the float ones, up to the core's condition number for the Nystrom cores") {
  // The output of a method without an inverse (or with Razavi's filtered one) moves by a few units of the
  // format's eps; inverting a rounded core amplifies its rounding by up to its condition number (a forward
  // error; Higham 2002, §7.1): 0.36 in half for pnp-nystra's exact pseudoinverse of a core of κ = 6e3.
  const Inputs random = oracle_inputs()[0];
  for (const Precision format : emulated_formats)
    for (const Method method : methods) {
      CAPTURE(to_string(format));
      CAPTURE(to_string(method));
      const ApproximationOptions native = with_drawn_projections(method, small_options(8), tokens, dim);
      ApproximationOptions emulated = native;
      emulated.storage = format;
      const Approximation<float> reference =
          approximate_attention<float>(method, random.q, random.k, random.v, native);
      const Matrix<float> rounded =
          approximate_attention<float>(method, random.q, random.k, random.v, emulated).output;
      const double difference = relative_difference(rounded, reference.output);
      double amplification = 20;
      if (reference.kernel_factors) {
        const Vector<double> sigma = singular_values<float>(reference.kernel_factors->core);
        amplification = sigma(0) / sigma(sigma.size() - 1);
      }
      CHECK(difference > 0);
      CHECK(difference < amplification * machine_epsilon(format));
    }
}

TEST_CASE_TEMPLATE("float32 and float64 storage leave every method's result as it is, bit for bit", T, float,
                   double) {
  const Matrix<T> Q = random_matrix<T>(tokens, dim, 41), K = random_matrix<T>(tokens, dim, 42),
                  V = random_matrix<T>(tokens, value_dim, 43);
  for (const Method method : methods) {
    CAPTURE(to_string(method));
    const ApproximationOptions plain = with_drawn_projections(method, small_options(4), tokens, dim);
    const Approximation<T> reference = approximate_attention<T>(method, Q, K, V, plain);
    for (const Precision native : {Precision::float32, Precision::float64}) {
      ApproximationOptions options = plain;
      options.storage = native;
      const Approximation<T> result = approximate_attention<T>(method, Q, K, V, options);
      CHECK(result.rounding == RoundingCounts{});
      CHECK(std::memcmp(result.output.data(), reference.output.data(), sizeof(T) * reference.output.size()) ==
            0);
    }
  }
}

TEST_CASE("emulated storage needs T = float and column-major tokens, and has no oracle core") {
  const Matrix<double> Q = random_matrix<double>(16, 4, 51), V = random_matrix<double>(16, 2, 52);
  for (const Precision format : emulated_formats) {
    ApproximationOptions options = emulating(format, 4);
    CHECK(throws_naming([&] { approximate_attention<double>(Method::exact, Q, Q, V, options); },
                        to_string(format)));
    CHECK(throws_naming([&] { approximate_attention<double>(Method::pnp_nystra, Q, Q, V, options); },
                        "needs the float computation"));
    options.pnp_nystra.pinv.method = PinvMethod::oracle_core;
    const Matrix<float> q = Q.cast<float>(), v = V.cast<float>();
    CHECK(
        throws_naming([&] { approximate_attention<float>(Method::pnp_nystra, q, q, v, options); }, "oracle"));
    NystromOptions nystrom;
    nystrom.storage = format;
    const RowMajorMatrix<float> rows = q;
    const ConstRowMajorMap<float> map(rows.data(), rows.rows(), rows.cols(),
                                      Eigen::OuterStride<>(rows.cols()));
    CHECK(throws_naming([&] { generalized_nystrom<float>(map, map, nystrom); }, "column-major"));
  }
}

TEST_CASE("emulated exact and pnp-nystra: the same bits on 1 and 2 threads") {
  // Sizes whose products pass detail::parallel_work (2²² multiply-adds): G_L's logits are 2048×64×32.
  const Index n = 2048;
  const Matrix<float> Q = random_matrix<float>(n, 32, 61, 0.5), K = random_matrix<float>(n, 32, 62, 0.5),
                      V = random_matrix<float>(n, 8, 63);
  const int saved = threads();
  for (const Method method : {Method::exact, Method::pnp_nystra}) {
    CAPTURE(to_string(method));
    const ApproximationOptions options = emulating(Precision::half, 64);
    set_threads(1);
    const Approximation<float> one = approximate_attention<float>(method, Q, K, V, options);
    set_threads(2);
    const Approximation<float> two = approximate_attention<float>(method, Q, K, V, options);
    CHECK(first_difference(one.output, two.output) == -1);
    CHECK(one.rounding == two.rounding);
  }
  set_threads(saved);
}
