#pragma once
/// @file precision.hpp
/// Storage formats of an analysis and the exact rounding that emulates the low-precision ones on the CPU:
/// IEEE binary16 ("half", float16) and bfloat16 are computed in float32 with every stored value rounded to
/// the format (Higham & Pranesh, "Simulating low precision floating-point arithmetic", SIAM J. Sci. Comput.
/// 41(5), 2019, the `chop` approach). Rounding is to nearest, ties to even, with the format's subnormals,
/// overflow to ±Inf and signed zeros exactly as IEEE 754 prescribes; NaN stays a (quiet) NaN.
///
/// | format   | fraction bits t | normal exponents | largest finite         | smallest subnormal |
/// |----------|-----------------|------------------|------------------------|--------------------|
/// | half     | 10              | −14 … 15         | 65504 = (2 − 2⁻¹⁰)·2¹⁵ | 2⁻²⁴               |
/// | bfloat16 | 7               | −126 … 127       | (2 − 2⁻⁷)·2¹²⁷         | 2⁻¹³³              |
///
/// A value rounds to ±Inf from the midpoint between the largest finite value and 2^(emax+1) on (65520 for
/// half), since that midpoint's tie goes to the even neighbour 2^(emax+1), which the format cannot hold.

#include <concepts>
#include <string>
#include <type_traits>

#include <Eigen/Core>

#include "nystrom/error.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// The storage formats of an analysis (docs/mathematics.md describes where values are rounded).
enum class Precision {
  half,      ///< IEEE binary16: emulated, computed in float32 with every stored value rounded to it
  bfloat16,  ///< bfloat16 (float32's exponent range, 7 fraction bits): emulated like half
  float32,   ///< IEEE binary32, native
  float64    ///< IEEE binary64, native
};

/// "half", "bfloat16", "float", "double".
std::string to_string(Precision precision);
/// Inverse of to_string, also accepting "float16", "fp16", "bf16", "float32", "fp32", "float64" and "fp64";
/// throws std::invalid_argument naming an unknown value and listing the accepted ones.
Precision precision_from_string(const std::string& name);

/// True for the formats computed in float32 with rounded storage (half, bfloat16).
constexpr bool is_emulated(Precision precision) {
  return precision == Precision::half || precision == Precision::bfloat16;
}

/// The spacing of `precision`'s values at 1: 2⁻¹⁰ (half), 2⁻⁷ (bfloat16), 2⁻²³ (float32), 2⁻⁵² (float64).
constexpr double machine_epsilon(Precision precision) {
  switch (precision) {
    case Precision::half:
      return 0x1.0p-10;
    case Precision::bfloat16:
      return 0x1.0p-7;
    case Precision::float32:
      return 0x1.0p-23;
    case Precision::float64:
      return 0x1.0p-52;
  }
  return 0x1.0p-52;
}

/// Throws std::invalid_argument naming `storage` and `where` when `storage` is emulated (half, bfloat16) and
/// T is not float: emulation computes in float32 (docs/mathematics.md §8). The native formats take any T
/// (they round nothing).
template <class T>
void require_storage_for(Precision storage, const char* where) {
  require(!is_emulated(storage) || std::is_same_v<T, float>, where, ": storage = ", to_string(storage),
          " is emulated in float32 and needs the float computation (T = float), not double");
}

/// The value of `precision` nearest to x (ties to even), as a float; identity for float32 and float64.
/// O(1), branch-free bit manipulation.
float round_to(Precision precision, float x);
/// The value of `precision` nearest to x, rounded once from x (not through float, which would round twice:
/// 1 + 2⁻¹¹ + 2⁻⁴⁰ is 1 + 2⁻¹⁰ in half but 1 through float), as a float; float(x) for float32 and float64.
/// numpy's float64 → float16 conversion rounds the same way.
float round_to(Precision precision, double x);

/// What rounding did to an array, accumulated over the steps of a computation with `+=`.
struct RoundingCounts {
  Index overflowed = 0;   ///< finite nonzero inputs that became ±Inf
  Index underflowed = 0;  ///< finite nonzero inputs that became ±0
  Index nan = 0;          ///< NaN outputs (rounding makes no NaN: these were NaN on input)

  RoundingCounts& operator+=(const RoundingCounts& other) {
    overflowed += other.overflowed;
    underflowed += other.underflowed;
    nan += other.nan;
    return *this;
  }
  bool operator==(const RoundingCounts&) const = default;
};

/// Rounds data[0 .. n) once from double to `precision` (round_to(precision, double)) into out[0 .. n) and
/// counts as round_in_place does (a finite nonzero double that becomes ±Inf or ±0 in float is counted for
/// float32 and float64 too); O(n). For parameters held in double (Performer's Ω, Linformer's E and F).
/// Throws std::invalid_argument for n < 0 or a null pointer with n > 0.
RoundingCounts round_into(Precision precision, const double* data, Index n, float* out);

/// How half rounding of an array is computed: both give the same bits for every input (NaN payloads
/// included), only their speed differs.
enum class RoundingKernel {
  portable,  ///< integer bit manipulation that compilers vectorize (every build; the only bfloat16 kernel)
  f16c       ///< the x86 F16C conversions float32 → binary16 → float32 (vcvtps2ph / vcvtph2ps)
};

/// True when this build of the library holds the f16c kernel (compiled for a target with F16C).
bool has_f16c_kernel();

/// Rounds data[0 .. n) in place to `precision` by `kernel` (which matters for half only) and counts what
/// rounding did; O(n), memory-bound. Throws std::invalid_argument for n < 0, a null data with n > 0, or the
/// f16c kernel in a build without it.
RoundingCounts round_in_place(Precision precision, float* data, Index n, RoundingKernel kernel);
/// round_in_place with the fastest kernel of this build (f16c where has_f16c_kernel()).
RoundingCounts round_in_place(Precision precision, float* data, Index n);

/// A writable float expression with direct access to its storage (Matrix, Block, Map, Ref, MatrixRef<float>,
/// row-major or column-major, with any strides).
template <class X>
concept WritableFloatBlock = !std::is_const_v<std::remove_reference_t<X>> &&
                             std::same_as<typename std::remove_cvref_t<X>::Scalar, float> &&
                             bool(std::remove_cvref_t<X>::Flags & Eigen::DirectAccessBit) &&
                             bool(std::remove_cvref_t<X>::Flags & Eigen::LvalueBit);

/// Rounds every entry of a float block in place to `precision` (round_in_place on each contiguous inner
/// vector: a column of a column-major block); O(rows·cols). Takes temporaries such as `A.block(...)`.
template <WritableFloatBlock X>
RoundingCounts round_in_place(Precision precision, X&& block) {
  RoundingCounts counts;
  for (Index outer = 0; outer < block.outerSize(); ++outer) {
    float* const inner = block.data() + outer * block.outerStride();
    if (block.innerStride() == 1) {
      counts += round_in_place(precision, inner, block.innerSize());
      continue;
    }
    for (Index i = 0; i < block.innerSize(); ++i)
      counts += round_in_place(precision, inner + i * block.innerStride(), 1);
  }
  return counts;
}

}  // namespace nystrom
