#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nystrom/precision.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

constexpr Precision emulated[] = {Precision::half, Precision::bfloat16};
constexpr RoundingKernel kernels[] = {RoundingKernel::portable, RoundingKernel::f16c};
constexpr float infinity = std::numeric_limits<float>::infinity();

std::uint32_t bits_of(float x) {
  return std::bit_cast<std::uint32_t>(x);
}

float float_of(std::uint32_t bits) {
  return std::bit_cast<float>(bits);
}

/// The oracle's description of a format: t fraction bits, normal exponents emin … emax.
struct Format {
  int fraction_bits;
  int min_exponent;
  int max_exponent;
};

Format format_of(Precision precision) {
  return precision == Precision::half ? Format{10, -14, 15} : Format{7, -126, 127};
}

/// The slow, obviously correct rounding of x to `format`, straight from IEEE 754: NaN stays NaN, ±Inf and ±0
/// stay; otherwise |x| = s·2^e exactly (s a 53-bit integer, by frexp), the format's spacing around |x| is
/// 2^q with q = max(⌊log₂|x|⌋, emin) − t, the two neighbours are k·2^q and (k+1)·2^q with k = ⌊|x|/2^q⌋,
/// the nearer is taken and a tie goes to the even k; a result of 2^(emax+1) or more is Inf. The sign is x's.
float oracle(double x, Format format) {
  if (std::isnan(x)) return std::numeric_limits<float>::quiet_NaN();
  if (std::isinf(x) || x == 0) return static_cast<float>(x);
  int exponent;
  const double fraction = std::frexp(std::abs(x), &exponent);  // |x| = fraction·2^exponent, ½ ≤ fraction < 1
  const auto significand = static_cast<std::uint64_t>(std::ldexp(fraction, 53));
  const int spacing = std::max(exponent - 1, format.min_exponent) - format.fraction_bits;
  const int shift = spacing - (exponent - 53);  // |x|/2^q = significand/2^shift; shift ≥ 53 − 1 − t > 0
  std::uint64_t k = 0;
  if (shift < 64) {
    k = significand >> shift;
    const std::uint64_t remainder = significand - (k << shift), half = std::uint64_t(1) << (shift - 1);
    if (remainder > half || (remainder == half && k % 2 == 1)) ++k;
  }  // else |x| < 2^53·2^(q−64) < ½·2^q: k = 0
  const double rounded = std::ldexp(static_cast<double>(k), spacing);
  const double magnitude = rounded >= std::ldexp(1.0, format.max_exponent + 1) ? HUGE_VAL : rounded;
  return static_cast<float>(std::copysign(magnitude, x));
}

/// True when `value` is the oracle's `expected`: the same bits, or, for a NaN, a quiet NaN (its payload is
/// not compared).
bool same_result(float value, float expected) {
  if (std::isnan(expected)) return std::isnan(value) && (bits_of(value) & 0x00400000u) != 0;
  return bits_of(value) == bits_of(expected);
}

/// Disagreements found over a set of inputs: how many, and the first one.
struct Mismatches {
  Index count = 0;
  double input = 0;
  float value = 0, expected = 0;
  std::string what;

  void add(double x, float got, float wanted, const std::string& where) {
    if (count++ == 0) input = x, value = got, expected = wanted, what = where;
  }
  void merge(const Mismatches& other) {
    if (count == 0)
      *this = other;
    else
      count += other.count;
  }
};

/// x in C's hexadecimal floating-point notation ("0x1.ffep+15"), exact for every float and double; a NaN as
/// its float bits ("nan 0x7fc00001").
std::string hex(double x) {
  char text[64];
  if (std::isnan(x))
    std::snprintf(text, sizeof text, "nan 0x%08x", unsigned{bits_of(static_cast<float>(x))});
  else
    std::snprintf(text, sizeof text, "%a", x);
  return text;
}

/// Reports the first mismatch and returns whether there were none.
bool none(const Mismatches& mismatches) {
  if (mismatches.count > 0)
    MESSAGE(mismatches.count, " mismatches; first: ", mismatches.what, " of ", hex(mismatches.input),
            " gave ", hex(mismatches.value), ", expected ", hex(mismatches.expected));
  return mismatches.count == 0;
}

/// Checks the float inputs with these bit patterns against the oracle, for half and bfloat16, by round_to
/// and by round_in_place with every kernel of this build; the two half kernels must also agree bit for bit
/// (NaN payloads included). Pure (no doctest macros), so chunks can be checked in parallel.
Mismatches check_patterns(const std::vector<std::uint32_t>& patterns) {
  Mismatches found;
  std::vector<float> inputs(patterns.size());
  std::transform(patterns.begin(), patterns.end(), inputs.begin(), float_of);
  for (const Precision precision : emulated) {
    std::vector<std::vector<float>> by_kernel;
    for (const RoundingKernel kernel : kernels) {
      if (kernel == RoundingKernel::f16c && !has_f16c_kernel()) continue;
      by_kernel.push_back(inputs);
      round_in_place(precision, by_kernel.back().data(), Index(inputs.size()), kernel);
    }
    const Format format = format_of(precision);
    const std::string name = to_string(precision);
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      const float expected = oracle(inputs[i], format), scalar = round_to(precision, inputs[i]);
      if (!same_result(scalar, expected)) found.add(inputs[i], scalar, expected, "round_to(" + name + ")");
      if (!same_result(by_kernel[0][i], expected))
        found.add(inputs[i], by_kernel[0][i], expected, "the portable kernel (" + name + ")");
      if (by_kernel.size() > 1 && bits_of(by_kernel[1][i]) != bits_of(by_kernel[0][i]))
        found.add(inputs[i], by_kernel[1][i], by_kernel[0][i], "f16c against portable (" + name + ")");
    }
  }
  return found;
}

/// Every float bit pattern p with p ≡ offset (mod stride), checked in parallel chunks of 2^14 (small enough
/// that their buffers are reused, not mapped anew).
Mismatches check_strided(std::uint64_t stride, std::uint64_t offset) {
  const std::uint64_t chunk = std::uint64_t(1) << 14, span = chunk * stride;
  const auto chunks = static_cast<std::int64_t>(((std::uint64_t(1) << 32) + span - 1) / span);
  Mismatches found;
#pragma omp parallel for schedule(dynamic)
  for (std::int64_t c = 0; c < chunks; ++c) {
    std::vector<std::uint32_t> patterns;
    for (std::uint64_t p = std::uint64_t(c) * span + offset;
         p < std::min((c + 1) * span, std::uint64_t(1) << 32); p += stride)
      patterns.push_back(static_cast<std::uint32_t>(p));
    const Mismatches local = check_patterns(patterns);
#pragma omp critical
    found.merge(local);
  }
  return found;
}

/// For every sign and exponent field: significands that end in a rounding tie at every bit position (the
/// tie bit, one below and one above it, with an even and an odd last kept bit, with the kept bits above all
/// zeros, all ones or mixed), and the extreme significands 0, 1, 0x3fffff, 0x400000, 0x400001, 0x7fffff.
std::vector<std::uint32_t> tie_patterns() {
  std::vector<std::uint32_t> patterns;
  for (std::uint32_t sign_exponent = 0; sign_exponent < 512; ++sign_exponent) {
    const std::uint32_t top = sign_exponent << 23;
    for (std::uint32_t significand : {0x0u, 0x1u, 0x3fffffu, 0x400000u, 0x400001u, 0x7fffffu})
      patterns.push_back(top | significand);
    for (int kept = 1; kept <= 23; ++kept) {
      const std::uint32_t tie = std::uint32_t(1) << (kept - 1), above_mask = 0x7fffffu & ~((tie << 1) - 1);
      for (std::uint32_t above : {0x0u, 0x7fffffu, 0x5a5a5au})
        for (std::uint32_t low : {tie - 1, tie, tie + 1})
          patterns.push_back(top | (above & above_mask) | low);
    }
  }
  return patterns;
}

/// Every NaN bit pattern (both signs, every nonzero payload).
std::vector<std::uint32_t> nan_patterns() {
  std::vector<std::uint32_t> patterns;
  for (std::uint32_t sign : {0x0u, 0x80000000u})
    for (std::uint32_t payload = 1; payload <= 0x7fffffu; ++payload)
      patterns.push_back(sign | 0x7f800000u | payload);
  return patterns;
}

/// x·(1 + j·2⁻⁵²) for j = −2 … 2 and the neighbouring doubles, both signs: the doubles nearest a boundary.
void add_around(std::vector<double>& values, double x) {
  for (int j = -2; j <= 2; ++j)
    for (double sign : {1.0, -1.0}) {
      const double y = sign * x * (1 + j * 0x1p-52);
      values.insert(values.end(), {y, std::nextafter(y, 0.0), std::nextafter(y, HUGE_VAL * sign)});
    }
}

/// Doubles of every class for `format`: its largest value, the midpoint above it (rounds to Inf) and
/// 2^(emax+1); its smallest normal and the midpoint below; every subnormal k·2^(emin−t) for small k and its
/// midpoints (ties to even), and the midpoint below the smallest subnormal (a tie to 0); ties between every
/// pair of neighbours in a few binades; 1e±300 and the double subnormals; ±0, ±Inf, NaN; and uniformly random
/// significands over every binary exponent from 2^−200 to 2^200 (seeded).
std::vector<double> double_inputs(Format format) {
  const int t = format.fraction_bits, emin = format.min_exponent, emax = format.max_exponent;
  std::vector<double> values;
  const double largest = std::ldexp(2 - std::ldexp(1.0, -t), emax);
  for (double x : {largest, largest + std::ldexp(1.0, emax - t - 1), std::ldexp(1.0, emax + 1),
                   std::ldexp(1.0, emin), std::ldexp(1 - std::ldexp(1.0, -t - 1), emin), 1e300, 1e-300,
                   std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::min()})
    add_around(values, x);
  for (int k = 0; k < 8; ++k) {
    add_around(values, std::ldexp(k + 0.5, emin - t));  // subnormal midpoints, from 2^(emin−t−1)
    add_around(values, std::ldexp(k + 1.0, emin - t));  // subnormals
  }
  for (int e : {emin - 1, emin, 0, 1, emax - 1, emax})
    for (int k = 0; k < 8; ++k) add_around(values, std::ldexp(1 + (k + 0.5) * std::ldexp(1.0, -t), e));
  for (double special : {0.0, HUGE_VAL, std::numeric_limits<double>::quiet_NaN()})
    values.insert(values.end(), {special, -special});
  std::mt19937_64 engine(20190917);
  for (int e = -200; e <= 200; ++e)
    for (int i = 0; i < 64; ++i)
      values.push_back(std::ldexp(1 + static_cast<double>(engine() >> 11) * 0x1p-53, e) * (i % 2 ? -1 : 1));
  return values;
}

/// Millions of values rounded per second by round_in_place(precision, ·, kernel) on 2^22 N(0, 1) floats.
double throughput(Precision precision, RoundingKernel kernel) {
  const Matrix<float> source = random_matrix<float>(1 << 22, 1, 7);
  Matrix<float> values = source;
  int repeats = 0;
  const auto start = std::chrono::steady_clock::now();
  std::chrono::duration<double> elapsed{};
  while (repeats < 3 || elapsed.count() < 0.2) {
    values = source;  // a copy per repeat: measured with the rounding, and about 2% of it
    round_in_place(precision, values.data(), values.size(), kernel);
    ++repeats;
    elapsed = std::chrono::steady_clock::now() - start;
  }
  return static_cast<double>(values.size()) * repeats / elapsed.count() / 1e6;
}

}  // namespace

TEST_CASE("precision names round-trip, with aliases") {
  for (auto precision : {Precision::half, Precision::bfloat16, Precision::float32, Precision::float64})
    CHECK(precision_from_string(to_string(precision)) == precision);
  CHECK(to_string(Precision::float32) == "float");
  CHECK(to_string(Precision::float64) == "double");
  CHECK(precision_from_string("float16") == Precision::half);
  CHECK(precision_from_string("fp16") == Precision::half);
  CHECK(precision_from_string("bf16") == Precision::bfloat16);
  CHECK(precision_from_string("float32") == Precision::float32);
  CHECK(precision_from_string("fp32") == Precision::float32);
  CHECK(precision_from_string("float64") == Precision::float64);
  CHECK(precision_from_string("fp64") == Precision::float64);
  CHECK(throws_naming([] { precision_from_string("fp8"); }, "'fp8'"));
  CHECK(throws_naming([] { precision_from_string("Half"); }, "half, bfloat16, float, double, float16"));
  CHECK(is_emulated(Precision::half));
  CHECK(is_emulated(Precision::bfloat16));
  CHECK_FALSE(is_emulated(Precision::float32));
  CHECK_FALSE(is_emulated(Precision::float64));
}

TEST_CASE("rounding rules at the format boundaries, value by value") {
  // half: largest 65504; 65520 is the midpoint to 2^16 and rounds (to even) to Inf; subnormal spacing 2^-24.
  CHECK(round_to(Precision::half, 65504.0f) == 65504.0f);
  CHECK(round_to(Precision::half, std::nextafter(65520.0f, 0.0f)) == 65504.0f);
  CHECK(round_to(Precision::half, 65520.0f) == infinity);
  CHECK(round_to(Precision::half, -65520.0) == -infinity);
  CHECK(round_to(Precision::half, std::nextafter(65520.0, 0.0)) == 65504.0f);
  CHECK(round_to(Precision::half, 0x1p-24f) == 0x1p-24f);
  CHECK(std::signbit(round_to(Precision::half, -0x1p-25f)));  // tie between 0 and 2^-24: to +-0 (even)
  CHECK(round_to(Precision::half, -0x1p-25f) == 0.0f);
  CHECK(round_to(Precision::half, 0x1.000002p-25f) == 0x1p-24f);
  CHECK(round_to(Precision::half, 0x3p-25f) == 0x1p-23f);         // 1.5·2^-24: tie to the even 2·2^-24
  CHECK(round_to(Precision::half, 0x5p-25f) == 0x1p-23f);         // 2.5·2^-24: tie to the even 2·2^-24
  CHECK(round_to(Precision::half, 0x1.ff4p-15f) == 0x1.ffp-15f);  // 1022.5·2^-24: tie to the even 1022·2^-24
  CHECK(round_to(Precision::half, 0x1.ffcp-15f) == 0x1p-14f);     // 1023.5·2^-24: tie to the smallest normal
  CHECK(round_to(Precision::half, 1.0f + 0x1p-11f) == 1.0f);      // tie to even
  CHECK(round_to(Precision::half, 1.0f + 0x3p-11f) == 1.0f + 0x1p-9f);
  // bfloat16: float32's exponent range; the midpoint above the largest value rounds to Inf.
  const float bfloat16_max = float_of(0x7f7f0000u);
  CHECK(round_to(Precision::bfloat16, bfloat16_max) == bfloat16_max);
  CHECK(round_to(Precision::bfloat16, float_of(0x7f7f7fffu)) == bfloat16_max);
  CHECK(round_to(Precision::bfloat16, float_of(0x7f7f8000u)) == infinity);
  CHECK(round_to(Precision::bfloat16, std::numeric_limits<float>::max()) == infinity);
  CHECK(round_to(Precision::bfloat16, 0x1.fep+127) == bfloat16_max);    // from double: largest exactly
  CHECK(round_to(Precision::bfloat16, 0x1.ffp+127) == infinity);        // from double: the midpoint above it
  CHECK(round_to(Precision::bfloat16, float_of(0x00008000u)) == 0.0f);  // 2^-134: tie to 0
  CHECK(round_to(Precision::bfloat16, float_of(0x00018000u)) == float_of(0x00020000u));
  CHECK(round_to(Precision::bfloat16, 0x1p-134) == 0.0f);
  CHECK(round_to(Precision::bfloat16, 0x1.0000000000001p-134) == 0x1p-133f);
  // Zeros keep their sign, Inf stays, NaN stays a quiet NaN; float32 and float64 are the identity on floats.
  for (const Precision precision : emulated) {
    CHECK(std::signbit(round_to(precision, -0.0f)));
    CHECK(round_to(precision, -infinity) == -infinity);
    CHECK(std::isnan(round_to(precision, float_of(0x7f800001u))));  // a signalling NaN whose payload is cut
    CHECK(std::isnan(round_to(precision, std::numeric_limits<double>::signaling_NaN())));
  }
  for (const Precision precision : {Precision::float32, Precision::float64}) {
    CHECK(round_to(precision, 0x1.234566p-140f) == 0x1.234566p-140f);
    CHECK(round_to(precision, 1.0 + 0x1p-24) == 1.0f);  // float(x): tie to even
    CHECK(round_to(precision, 1e300) == infinity);
  }
}

TEST_CASE("from double, rounding is direct, not through float") {
  // 1 + 2^-11 + 2^-40 lies above half's tie 1 + 2^-11; through float it becomes the tie and goes to 1.
  const double x = 1 + 0x1p-11 + 0x1p-40;
  CHECK(round_to(Precision::half, x) == 1 + 0x1p-10f);
  CHECK(round_to(Precision::half, static_cast<float>(x)) == 1.0f);
  const double y = 1 + 0x1p-8 + 0x1p-40;
  CHECK(round_to(Precision::bfloat16, y) == 1 + 0x1p-7f);
  CHECK(round_to(Precision::bfloat16, static_cast<float>(y)) == 1.0f);
  // Also at the overflow threshold: just below 65520 in double is 65520 in float, which is Inf in half.
  const double below = std::nextafter(65520.0, 0.0);
  CHECK(round_to(Precision::half, below) == 65504.0f);
  CHECK(round_to(Precision::half, static_cast<float>(below)) == infinity);
}

TEST_CASE("float to half and bfloat16 equals the oracle: every tie position, every NaN, a strided subset") {
  CHECK(none(check_patterns(tie_patterns())));
  CHECK(none(check_patterns(nan_patterns())));
  // A prime stride visits every exponent and varies the low bits: 2^32/1021 ≈ 4.2 million patterns.
  CHECK(none(check_strided(1021, 1234)));
}

// Every float bit pattern against the oracle, both kernels bit for bit: about 3 minutes of CPU time (divided
// among the OpenMP threads), so skipped by default; run with
// `test_precision --test-case="*exhaustive*" --no-skip`.
TEST_CASE("float to half and bfloat16 equals the oracle: exhaustive over all 2^32 inputs" * doctest::skip()) {
  const auto start = std::chrono::steady_clock::now();
  CHECK(none(check_strided(1, 0)));
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  MESSAGE("exhaustive check of 2^32 inputs: ", elapsed.count(), " s");
}

TEST_CASE("double to half and bfloat16 equals the oracle on values of every class") {
  for (const Precision precision : emulated) {
    const Format format = format_of(precision);
    Mismatches found;
    for (const double x : double_inputs(format)) {
      const float value = round_to(precision, x), expected = oracle(x, format);
      if (!same_result(value, expected))
        found.add(x, value, expected, "round_to(" + to_string(precision) + ")");
    }
    CAPTURE(to_string(precision));
    CHECK(none(found));
  }
}

TEST_CASE("round_in_place counts overflows, underflows and NaNs") {
  const float nan = std::numeric_limits<float>::quiet_NaN(), float_max = std::numeric_limits<float>::max();
  // Per entry: half overflows 70000, -65520 and float_max; half underflows 1e-8 and -1e-30, bfloat16 only the
  // 2^-134 tie (1e-30 is a normal bfloat16); bfloat16 overflows float_max. 0, Inf and NaN are not counted.
  const std::vector<float> input = {1.0f, 70000.0f,  -65520.0f, 1e-8f,     -1e-30f, 0x1p-134f,
                                    0.0f, -infinity, nan,       float_max, nan,     3.0f};
  const RoundingCounts half_counts{3, 3, 2}, bfloat16_counts{1, 1, 2}, native_counts{0, 0, 2};
  for (const RoundingKernel kernel : kernels) {
    if (kernel == RoundingKernel::f16c && !has_f16c_kernel()) continue;
    for (const auto& item :
         {std::pair{Precision::half, half_counts}, std::pair{Precision::bfloat16, bfloat16_counts},
          std::pair{Precision::float32, native_counts}, std::pair{Precision::float64, native_counts}}) {
      const Precision precision = item.first;  // not a structured binding: CAPTURE's lambda takes it
      const RoundingCounts expected = item.second;
      CAPTURE(to_string(precision));
      std::vector<float> values = input;
      CHECK(round_in_place(precision, values.data(), Index(values.size()), kernel) == expected);
      for (std::size_t i = 0; i < input.size(); ++i)
        CHECK(same_result(values[i], round_to(precision, input[i])));
    }
  }
  RoundingCounts total = half_counts;
  total += bfloat16_counts;
  CHECK(total == RoundingCounts{4, 4, 4});
}

TEST_CASE("round_in_place on Eigen blocks rounds exactly the block") {
  // 67 rows: columns of 67 values leave an odd tail for the 8-wide F16C kernel; the columns' scales give
  // overflows and underflows in half and in bfloat16.
  Matrix<float> A = random_matrix<float>(67, 9, 11);
  const int scales[] = {0, -140, -30, 127, -10, 10, 16, 100, -20};
  for (Index j = 0; j < A.cols(); ++j) A.col(j) *= std::ldexp(1.0f, scales[j]);
  const Matrix<float> original = A;
  const auto expect_rounded = [&](const Matrix<float>& result, Index row, Index col, Index rows, Index cols,
                                  Precision precision, const RoundingCounts& counts) {
    RoundingCounts expected;
    for (Index j = 0; j < A.cols(); ++j)
      for (Index i = 0; i < A.rows(); ++i) {
        const bool inside = i >= row && i < row + rows && j >= col && j < col + cols;
        const float x = original(i, j), wanted = inside ? round_to(precision, x) : x;
        CHECK(bits_of(result(i, j)) == bits_of(wanted));
        if (inside && std::isinf(wanted) && std::isfinite(x)) ++expected.overflowed;
        if (inside && wanted == 0 && x != 0) ++expected.underflowed;
      }
    CHECK(counts == expected);
    CHECK(expected.overflowed + expected.underflowed > 0);
  };
  for (const Precision precision : emulated) {
    CAPTURE(to_string(precision));
    A = original;
    expect_rounded(A, 3, 1, 50, 6, precision, round_in_place(precision, A.block(3, 1, 50, 6)));
    A = original;
    expect_rounded(A, 5, 0, 1, 9, precision, round_in_place(precision, A.row(5)));  // inner stride 67
    A = original;
    MatrixRef<float> whole(A);
    expect_rounded(A, 0, 0, 67, 9, precision, round_in_place(precision, whole));
    RowMajorMatrix<float> row_major = original;
    const RoundingCounts counts = round_in_place(precision, row_major.middleCols(1, 7));
    A = row_major;
    expect_rounded(A, 0, 1, 67, 7, precision, counts);
  }
}

TEST_CASE("round_in_place rejects bad arguments") {
  float value = 1.0f;
  CHECK(throws_naming([&] { round_in_place(Precision::half, &value, -1); }, "n = -1"));
  CHECK(throws_naming([] { round_in_place(Precision::half, nullptr, 3); }, "null"));
  CHECK(round_in_place(Precision::half, nullptr, 0) == RoundingCounts{});
  if (!has_f16c_kernel())
    CHECK(throws_naming([&] { round_in_place(Precision::half, &value, 1, RoundingKernel::f16c); }, "f16c"));
}

TEST_CASE("rounding throughput of the kernels (reported, not asserted)") {
  MESSAGE("half, portable kernel: ", throughput(Precision::half, RoundingKernel::portable), " M values/s");
  if (has_f16c_kernel())
    MESSAGE("half, f16c kernel: ", throughput(Precision::half, RoundingKernel::f16c), " M values/s");
  MESSAGE("bfloat16: ", throughput(Precision::bfloat16, RoundingKernel::portable), " M values/s");
  CHECK(throughput(Precision::float32, RoundingKernel::portable) > 0);
}

// Reference values written by tests/python/test_precision_oracle.py from numpy's float16 and torch's bfloat16
// conversions, in the file that NYSTROM_PRECISION_VECTORS names: the 8 bytes "NYPREC01", two little-endian
// uint64 counts n32 and n64, then n32 records (float32 input, half, bfloat16 as float32) and n64 records
// (float64 input, half as float32), packed. Skipped by default; the Python test runs it with --no-skip.
TEST_CASE("round_to equals numpy and torch on the vectors of NYSTROM_PRECISION_VECTORS" * doctest::skip()) {
  const char* path = std::getenv("NYSTROM_PRECISION_VECTORS");
  REQUIRE_MESSAGE(path != nullptr, "set NYSTROM_PRECISION_VECTORS to the file of reference vectors");
  std::ifstream file(path, std::ios::binary);
  REQUIRE_MESSAGE(file.good(), "cannot open ", path);
  const std::vector<char> bytes{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  REQUIRE(bytes.size() >= 24);
  REQUIRE(std::string(bytes.data(), 8) == "NYPREC01");
  std::uint64_t n32, n64;
  std::memcpy(&n32, bytes.data() + 8, 8);
  std::memcpy(&n64, bytes.data() + 16, 8);
  REQUIRE(bytes.size() == 24 + 12 * n32 + 12 * n64);
  CHECK(n32 > 0);
  CHECK(n64 > 0);
  const auto read = [&](auto& value, std::size_t offset) {
    std::memcpy(&value, bytes.data() + offset, sizeof value);
  };
  Mismatches found;
  for (std::uint64_t r = 0; r < n32; ++r) {
    float x, half, bfloat16;
    read(x, 24 + 12 * r), read(half, 28 + 12 * r), read(bfloat16, 32 + 12 * r);
    const float got_half = round_to(Precision::half, x), got_bfloat16 = round_to(Precision::bfloat16, x);
    if (!same_result(got_half, half)) found.add(x, got_half, half, "float32 to half (numpy)");
    if (!same_result(got_bfloat16, bfloat16))
      found.add(x, got_bfloat16, bfloat16, "float32 to bfloat16 (torch)");
  }
  for (std::uint64_t r = 0, offset = 24 + 12 * n32; r < n64; ++r, offset += 12) {
    double x;
    float half;
    read(x, offset), read(half, offset + 8);
    const float got = round_to(Precision::half, x);
    if (!same_result(got, half)) found.add(x, got, half, "float64 to half (numpy)");
  }
  MESSAGE("checked ", n32, " float32 and ", n64, " float64 reference vectors");
  CHECK(none(found));
}
