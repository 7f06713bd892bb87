#pragma once
/// @file options.hpp
/// Shared command-line machinery of the `nystrom` program (docs/formats.md §3): the invocation passed to
/// every subcommand, parsing of the command line plus an optional `--config FILE` (Boost.Program_options INI
/// syntax), and the list forms the options accept: comma-separated lists (`8,16,32`), geometric ranges
/// (`4:256:x2`) and arithmetic ranges (`8:64:+8`). Every parse error throws std::invalid_argument naming the
/// option (exit status 2).

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "nystrom/error.hpp"
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

/// Parses `invocation.args` against `options` (and `positional`), then the INI file named by `--config`; the
/// command line wins over the file. Returns false after printing the subcommand's help for `--help`.
/// Throws std::invalid_argument (naming the option or file) for unknown options, bad values or a missing
/// config file.
bool parse_options(const Invocation& invocation, const std::string& synopsis,
                   const po::options_description& options,
                   const po::positional_options_description& positional, po::variables_map& values);

/// Applies `--threads` (0 or absent: keep the OpenMP default) and returns the thread count in effect.
int apply_threads(const po::variables_map& values);

/// Splits "a,b,c" into trimmed, non-empty items; throws naming `option` for an empty list or item.
std::vector<std::string> split_list(const std::string& text, const std::string& option);

/// Integers from a list whose items are numbers or ranges `first:last:xF` (geometric, factor F ≥ 2) or
/// `first:last:+S` (arithmetic, step S ≥ 1), `last` inclusive when reached. Duplicates are dropped, order
/// kept. Example: "4:64:x2,100" → 4, 8, 16, 32, 64, 100. Throws naming `option` for malformed items or values
/// < minimum.
std::vector<Index> parse_index_list(const std::string& text, const std::string& option, Index minimum = 1);

/// A byte count: a positive number with an optional suffix K, M, G or T (powers of 1024; "B", "iB" may
/// follow), e.g. "512M", "2G", "1.5e9". Throws naming `option` and the text otherwise.
double parse_bytes(const std::string& text, const std::string& option);

/// Finite doubles from a comma-separated list; throws naming `option` for a malformed or non-finite item.
std::vector<double> parse_double_list(const std::string& text, const std::string& option);

/// Enum values from a comma-separated list by the library's `from_string` (e.g. pinv_method_from_string);
/// the library's message (naming the value) is prefixed by the option name.
template <class Enum, class FromString>
std::vector<Enum> parse_enum_list(const std::string& text, const std::string& option,
                                  FromString from_string) {
  std::vector<Enum> values;
  for (const auto& item : split_list(text, option)) {
    try {
      values.push_back(from_string(item));
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
