#include "nystrom/precision.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

#ifdef __F16C__
#include <immintrin.h>
#endif

#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"

namespace nystrom {

namespace {

constexpr std::array<EnumName<Precision>, 11> precision_names{{{Precision::half, "half"},
                                                               {Precision::bfloat16, "bfloat16"},
                                                               {Precision::float32, "float"},
                                                               {Precision::float64, "double"},
                                                               {Precision::half, "float16"},
                                                               {Precision::half, "fp16"},
                                                               {Precision::bfloat16, "bf16"},
                                                               {Precision::float32, "float32"},
                                                               {Precision::float32, "fp32"},
                                                               {Precision::float64, "float64"},
                                                               {Precision::float64, "fp64"}}};

/// A binary floating-point format rounded to: t fraction bits and normal exponents emin … emax.
struct Format {
  int fraction_bits;
  int min_exponent;
  int max_exponent;
};
constexpr Format half_format{10, -14, 15};
constexpr Format bfloat16_format{7, -126, 127};

/// The IEEE layout of the type rounded from (float or double).
template <class Float>
struct Layout;
template <>
struct Layout<float> {
  using Bits = std::uint32_t;
  static constexpr int fraction_bits = 23, min_exponent = -126, bias = 127;
};
template <>
struct Layout<double> {
  using Bits = std::uint64_t;
  static constexpr int fraction_bits = 52, min_exponent = -1022, bias = 1023;
};

/// The bits of 2^exponent (a normal number of Float).
template <class Float>
constexpr typename Layout<Float>::Bits power_of_two_bits(int exponent) {
  using L = Layout<Float>;
  return static_cast<typename L::Bits>(exponent + L::bias) << L::fraction_bits;
}

/// x rounded to `format`, to nearest with ties to even, as a Float (every value of the format is one).
/// Branch-free so that loops over it vectorize:
/// - normal results: |x|'s bit pattern rounded to a multiple of 2^(F − t) (F: Float's fraction bits), ties to
///   the even multiple; a carry moves into the exponent field, and a result ≥ 2^(emax+1) is ±Inf;
/// - |x| < 2^emin, where the format's subnormals are coarser than Float's: c = 2^(emin−t+F) has spacing
///   2^(emin−t), so (|x| + c) − c rounds |x| to a multiple of 2^(emin−t) in Float's own arithmetic (round to
///   nearest even, the default mode; IEEE semantics, no -ffast-math); where the subnormals coincide
///   (bfloat16 from float) the bit rounding above is already exact;
/// - NaN: quiet bit set and the payload cut to the format's t bits (what a conversion to it and back does).
template <Format format, class Float>
Float round_format(Float x) {
  using L = Layout<Float>;
  using Bits = typename L::Bits;
  constexpr int dropped = L::fraction_bits - format.fraction_bits;
  constexpr Bits dropped_mask = (Bits(1) << dropped) - 1;
  constexpr Bits sign_mask = Bits(1) << (sizeof(Bits) * 8 - 1);
  constexpr Bits infinity = power_of_two_bits<Float>(L::bias + 1);
  constexpr Bits quiet = Bits(1) << (L::fraction_bits - 1);
  constexpr Bits overflow = power_of_two_bits<Float>(format.max_exponent + 1);
  constexpr Bits min_normal = power_of_two_bits<Float>(format.min_exponent);
  constexpr bool coarser_subnormals = format.min_exponent > L::min_exponent;
  const Float c = std::bit_cast<Float>(
      power_of_two_bits<Float>(format.min_exponent - format.fraction_bits + L::fraction_bits));

  const Bits bits = std::bit_cast<Bits>(x);
  const Bits magnitude = bits & ~sign_mask;
  const Bits normal = (magnitude + (dropped_mask >> 1) + ((magnitude >> dropped) & 1)) & ~dropped_mask;
  const Bits subnormal = std::bit_cast<Bits>((std::bit_cast<Float>(magnitude) + c) - c);
  const Bits finite = coarser_subnormals && magnitude < min_normal ? subnormal
                      : normal >= overflow                         ? infinity
                                                                   : normal;
  const Bits nan = (magnitude | quiet) & ~dropped_mask;
  return std::bit_cast<Float>((bits & sign_mask) | (magnitude > infinity ? nan : finite));
}

/// Rounds data[0 .. n) to `format` by round_format (the portable kernel).
template <Format format>
void round_portable(float* data, Index n) {
  for (Index i = 0; i < n; ++i) data[i] = round_format<format>(data[i]);
}

#ifdef __F16C__
/// Rounds data[0 .. n) to half by the F16C conversions, eight values at a time; the last n mod 8 through a
/// padded buffer, so that every value takes the same instructions.
void round_half_f16c(float* data, Index n) {
  const auto round8 = [](float* values) {
    const __m128i half = _mm256_cvtps_ph(_mm256_loadu_ps(values), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(values, _mm256_cvtph_ps(half));
  };
  Index i = 0;
  for (; i + 8 <= n; i += 8) round8(data + i);
  if (i == n) return;
  std::array<float, 8> tail{};
  std::copy(data + i, data + n, tail.begin());
  round8(tail.data());
  std::copy(tail.begin(), tail.begin() + (n - i), data + i);
}
#endif

/// Rounds data[0 .. n) in place to `precision` by `kernel`; the native formats are left as they are.
void round_values(Precision precision, [[maybe_unused]] RoundingKernel kernel, float* data, Index n) {
#ifdef __F16C__
  if (precision == Precision::half && kernel == RoundingKernel::f16c) return round_half_f16c(data, n);
#endif
  if (precision == Precision::half) round_portable<half_format>(data, n);
  if (precision == Precision::bfloat16) round_portable<bfloat16_format>(data, n);
}

/// What rounding before[i] to after[i] did, i < n < 2³²: finite nonzero inputs that became ±Inf or ±0, and
/// NaN outputs. One vectorizable pass over the bit patterns.
RoundingCounts count_changes(const float* before, const float* after, Index n) {
  constexpr std::uint32_t magnitude_mask = 0x7fffffffu, infinity = 0x7f800000u;
  std::uint32_t overflowed = 0, underflowed = 0, nan = 0;
  for (Index i = 0; i < n; ++i) {
    const std::uint32_t in = std::bit_cast<std::uint32_t>(before[i]) & magnitude_mask;
    const std::uint32_t out = std::bit_cast<std::uint32_t>(after[i]) & magnitude_mask;
    const bool finite_nonzero = in - 1 < infinity - 1;  // 0 < in < infinity, by unsigned wrap-around
    overflowed += finite_nonzero & (out == infinity);
    underflowed += finite_nonzero & (out == 0);
    nan += out > infinity;
  }
  return {overflowed, underflowed, nan};
}

}  // namespace

std::string to_string(Precision precision) {
  return name_of(precision, precision_names);
}

Precision precision_from_string(const std::string& name) {
  return parse(name, precision_names, "precision");
}

float round_to(Precision precision, float x) {
  return precision == Precision::half       ? round_format<half_format>(x)
         : precision == Precision::bfloat16 ? round_format<bfloat16_format>(x)
                                            : x;
}

float round_to(Precision precision, double x) {
  // Exact: every value of half and bfloat16, ±Inf and NaN are floats.
  return static_cast<float>(precision == Precision::half       ? round_format<half_format>(x)
                            : precision == Precision::bfloat16 ? round_format<bfloat16_format>(x)
                                                               : x);
}

bool has_f16c_kernel() {
#ifdef __F16C__
  return true;
#else
  return false;
#endif
}

RoundingCounts round_in_place(Precision precision, float* data, Index n, RoundingKernel kernel) {
  require(n >= 0, "round_in_place: n = ", n, " must be >= 0");
  require(data != nullptr || n == 0, "round_in_place: data is null for n = ", n);
  require(kernel != RoundingKernel::f16c || has_f16c_kernel(),
          "round_in_place: kernel = f16c, but this build has no F16C (compile for a target with F16C)");
  // In chunks that stay in L1: a copy of the inputs, the rounding, and the counts from both (the native
  // formats only count their NaNs).
  constexpr Index chunk = 1024;
  std::array<float, chunk> before;
  RoundingCounts counts;
  for (Index start = 0; start < n; start += chunk) {
    const Index length = std::min(chunk, n - start);
    float* const values = data + start;
    const float* inputs = values;
    if (is_emulated(precision)) {
      std::copy(values, values + length, before.begin());
      inputs = before.data();
      round_values(precision, kernel, values, length);
    }
    counts += count_changes(inputs, values, length);
  }
  return counts;
}

RoundingCounts round_into(Precision precision, const double* data, Index n, float* out) {
  require(n >= 0, "round_into: n = ", n, " must be >= 0");
  require((data != nullptr && out != nullptr) || n == 0, "round_into: a null pointer for n = ", n);
  RoundingCounts counts;
  for (Index i = 0; i < n; ++i) {
    out[i] = round_to(precision, data[i]);
    const bool finite_nonzero = std::isfinite(data[i]) && data[i] != 0;
    counts.overflowed += finite_nonzero && std::isinf(out[i]);
    counts.underflowed += finite_nonzero && out[i] == 0;
    counts.nan += std::isnan(out[i]);
  }
  return counts;
}

RoundingCounts round_in_place(Precision precision, float* data, Index n) {
  return round_in_place(precision, data, n,
                        has_f16c_kernel() ? RoundingKernel::f16c : RoundingKernel::portable);
}

}  // namespace nystrom
