#pragma once
/// @file options.hpp
/// Shared command-line machinery of the `nystrom` program (docs/formats.md §3): the invocation passed to
/// every subcommand, parsing of the command line plus an optional `--config FILE` (Boost.Program_options INI
/// syntax), and the list forms the options accept: comma-separated lists (`8,16,32`), geometric ranges
/// (`4:256:x2`) and arithmetic ranges (`8:64:+8`). Every parse error throws std::invalid_argument naming the
/// option (exit status 2).

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "nystrom/approximation.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/error.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cli {

namespace po = boost::program_options;

/// What a subcommand receives: its own arguments (after the subcommand name) and the full command line.
struct Invocation {
  std::string subcommand;         ///< e.g. "sweep"
  std::vector<std::string> args;  ///< arguments after the subcommand name
  std::string command_line;       ///< the whole command line, shell-quoted, for provenance attributes
};

/// Adds `--help` and `--config FILE` (every subcommand) and, when asked, `--threads N` and `--seed S`.
void add_common_options(po::options_description& options, bool with_threads_and_seed);

/// Adds `--seed S` (default 0): the seed of everything random a subcommand draws.
void add_seed_option(po::options_description& options);

/// The value of --seed (add_seed_option).
std::uint64_t seed_option(const po::variables_map& values);

/// A --seed as Boost.Program_options reads it: an integer in [0, 2⁶⁴ − 1]. Read as std::uint64_t, a negative
/// seed was taken modulo 2⁶⁴.
struct Seed {
  std::uint64_t value = 0;
};

/// Boost.Program_options' parser of Seed (found by argument-dependent lookup): throws
/// po::invalid_option_value for anything but one integer in range, so messages name the option and, in a
/// config file, the line.
void validate(boost::any& value, const std::vector<std::string>& texts, Seed*, int);

/// A real-valued option as Boost.Program_options reads it, through parse_real (Boost's own reading took
/// hexadecimal for some options and not others, and read 1e-400 silently as 0).
struct RealNumber {
  double value = 0;
};

/// Boost.Program_options' parser of RealNumber (found by argument-dependent lookup): the message of
/// parse_real, naming the option and, in a config file, the line.
void validate(boost::any& value, const std::vector<std::string>& texts, RealNumber*, int);

/// A real-valued option's semantic with its default, for options_description::add_options.
po::typed_value<RealNumber>* real_value(double default_value);

/// The value of the real-valued option `name` (declared with real_value).
double real_option(const po::variables_map& values, const std::string& name);

/// Adds `alias` as a deprecated spelling of the string option `name` (so listed in --help); read both with
/// option_text.
void add_deprecated_alias(po::options_description& options, const std::string& alias,
                          const std::string& name);

/// The text of the string option `name`, or of its deprecated alias `alias` where that was given; throws
/// std::invalid_argument when both were given.
std::string option_text(const po::variables_map& values, const std::string& name, const std::string& alias);

/// What a subcommand's `--precision` takes: one native format, a list of them, or a list that may also name
/// the emulated formats half and bfloat16 (docs/mathematics.md §8).
enum class PrecisionValues { one, list, emulated_list };

/// Adds `--precision` (its values as `values` says) with `default_value`, and its deprecated alias `--dtype`.
void add_precision_option(po::options_description& options, const std::string& default_value,
                          PrecisionValues values);

/// The values of `--precision` (or `--dtype`), each `float` or `double`; `float32` and `float64` are read as
/// aliases of them. Throws std::invalid_argument naming the option and the value otherwise.
std::vector<std::string> parse_precisions(const po::variables_map& values);

/// The one value of `--precision` of a subcommand without a list (PrecisionValues::one).
std::string parse_precision(const po::variables_map& values);

/// The formats of `--precision` of PrecisionValues::emulated_list (precision_from_string's names), each
/// once: float64 alone, or any of float32, half and bfloat16 (computed in float32). Throws
/// std::invalid_argument naming the option and the value otherwise.
std::vector<Precision> parse_formats(const po::variables_map& values);

/// Adds `--method` (approximation.hpp names, a comma-separated list) with its deprecated alias `--methods`;
/// no default value where `default_value` is empty.
void add_method_option(po::options_description& options, const std::string& default_value,
                       const std::string& description);

/// The methods of `--method` (or `--methods`), `fallback` where neither was given.
std::vector<Method> parse_methods(const po::variables_map& values, const std::string& fallback = "");

/// Adds `--device` (`cpu` or `cuda`, default cpu), `where` saying what runs on the device.
void add_device_option(po::options_description& options, const std::string& where);

/// The device of `--device`, checked to be usable (require_device: exit 2 naming the reason otherwise).
Device parse_device(const po::variables_map& values);

/// Adds `--memory BYTES` (default 4G), `above` saying what happens above the budget.
void add_memory_option(po::options_description& options, const std::string& above);

/// Adds `--reference` (`kernel` or `model`, default kernel): the exact side of a head is its kernel of q and
/// k alone, or (`model`) the kernel's exponent plus the layer's `bias` and `mask` (docs/formats.md §1).
void add_reference_option(po::options_description& options);

/// True for `--reference model`, false for `kernel`; throws std::invalid_argument naming the option and the
/// value otherwise.
bool parse_model_reference(const po::variables_map& values);

/// Adds `-q/--quiet`, `silences` saying what it silences.
void add_quiet_option(po::options_description& options, const std::string& silences);

/// Parses `invocation.args` against `options` (and `positional`), then the INI file named by `--config`; the
/// command line wins over the file. Returns false after printing the subcommand's help for `--help`.
/// Throws std::invalid_argument (naming the option or file) for unknown options, bad values or a missing
/// config file.
bool parse_options(const Invocation& invocation, const std::string& synopsis,
                   const po::options_description& options,
                   const po::positional_options_description& positional, po::variables_map& values);

/// Applies `--threads` (0 or absent: keep the OpenMP default) and returns the thread count in effect.
int apply_threads(const po::variables_map& values);

/// Splits "a,b,c" into trimmed, non-empty items, a repeated item dropped (order kept: a grid point is never
/// computed twice); throws naming `option` for an empty list or item.
std::vector<std::string> split_list(const std::string& text, const std::string& option);

/// The most values one arithmetic range of parse_index_list may hold (docs/formats.md §3).
inline constexpr unsigned long long max_range_values = 1000000;

/// Integers from a list whose items are numbers or ranges `first:last:xF` (geometric, factor F ≥ 2) or
/// `first:last:+S` (arithmetic, step S ≥ 1, at most max_range_values values), `last` inclusive when reached.
/// Duplicates are dropped, order kept. Example: "4:64:x2,100" → 4, 8, 16, 32, 64, 100. Throws naming `option`
/// for malformed items, values < minimum or a range of more values.
std::vector<Index> parse_index_list(const std::string& text, const std::string& option, Index minimum = 1);

/// A byte count: a positive number with an optional suffix K, M, G or T (powers of 1024; "B", "iB" may
/// follow), e.g. "512M", "2G", "1.5e9". Throws naming `option` and the text otherwise.
double parse_bytes(const std::string& text, const std::string& option);

/// One finite decimal number within double's range, e.g. "4", " +0.5", "1e-3", "4.9e-324" (subnormal, kept);
/// throws naming `option` for hexadecimal, trailing characters, Inf, NaN, or a number beyond double's range
/// (1e400 would be Inf; 1e-400 would read as 0).
double parse_real(const std::string& text, const std::string& option);

/// parse_real over a comma-separated list, repeated values dropped (order kept).
std::vector<double> parse_double_list(const std::string& text, const std::string& option);

/// Kernel{type, param} after Kernel::validate, a bad parameter named as option --`option`.
Kernel kernel_option(KernelType type, double param, const std::string& option);

/// A landmark strategy by name, as the command line takes them: every strategy but `given`, whose indices
/// only the library and the Python module take (for parse_enum and parse_enum_list).
LandmarkStrategy command_line_strategy(const std::string& name);

/// Enum values from a comma-separated list by the library's `from_string` (e.g. pinv_method_from_string),
/// repeated values dropped (order kept); the library's message (naming the value) is prefixed by the option
/// name.
template <class Enum, class FromString>
std::vector<Enum> parse_enum_list(const std::string& text, const std::string& option,
                                  FromString from_string) {
  std::vector<Enum> values;
  for (const auto& item : split_list(text, option)) {
    try {
      const Enum value = from_string(item);
      if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
    } catch (const std::invalid_argument& error) {
      throw std::invalid_argument(describe("option --", option, ": ", error.what()));
    }
  }
  return values;
}

/// Parses a single enum value, prefixing the library's message with the option name.
template <class Enum, class FromString>
Enum parse_enum(const std::string& text, const std::string& option, FromString from_string) {
  try {
    return from_string(text);
  } catch (const std::invalid_argument& error) {
    throw std::invalid_argument(describe("option --", option, ": ", error.what()));
  }
}

/// Joins values with ", " for help texts and messages.
std::string join(const std::vector<std::string>& items, const std::string& separator = ", ");

/// Shell-quotes one argument when it needs it (for the `command_line` attribute).
std::string shell_quote(const std::string& argument);

}  // namespace nystrom::cli
