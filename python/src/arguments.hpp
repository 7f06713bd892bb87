#pragma once
/// @file arguments.hpp
/// The keyword arguments of the module's functions, named as on the command line (`nystrom sweep --help`,
/// `nystrom bench --help`; `lambda_` for --lambda): one table gives each keyword its type, default and help
/// text, parses it from Python, and writes the signatures and docstrings nanobind shows (and stubgen copies
/// into _nystrom.pyi). Each function accepts the subset of the table it names; an unknown keyword is a
/// TypeError, a bad value a ValueError naming it (the library's std::invalid_argument). Keywords that do not
/// apply to the chosen method are ignored, as in a sweep.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "arrays.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/detail/kernel_passes.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/parameters.hpp"
#include "nystrom/pinv.hpp"

namespace nystrom::python {

/// How a spectral norm is computed (docs/mathematics.md §7).
enum class Solver {
  dense,       ///< full SVD of the dense matrix (the oracle; O(N³))
  lanczos,     ///< Lanczos (Spectra) on the stored N×N matrix
  matrix_free  ///< Lanczos on operators that evaluate the kernel in tiles, never storing N×N
};

/// Every keyword's value: the flat parameters of the library (parameters.hpp: each keyword of a parameter is
/// its field's name) and the keywords of the module's own functions (solvers, tiling, timing, output).
struct KeywordArguments {
  Parameters parameters;
  Solver solver = Solver::lanczos;
  bool augmented = false;
  /// The evaluation keywords: the spectral (Lanczos) options, panel_rows, matrix_free, memory,
  /// dense_svd_limit and the certificates.
  EvaluationOptions evaluation;
  int repeat = 100;
  nb::handle
      out;  ///< the array receiving attention's output (None: a new one); borrowed from the call's kwargs
};

/// Groups of keywords, combined per function.
enum KeywordGroup : unsigned {
  kernel_keywords = 1u << 0,        ///< kernel, scale, lambda_, bandwidth
  landmark_keywords = 1u << 1,      ///< landmarks, strategy, seed, window, different_indices, forced, ...
  pinv_keywords = 1u << 2,          ///< pinv, iterations, alpha, tolerance, tikhonov, shift
  factor_keywords = 1u << 3,        ///< method, stabilization
  other_method_keywords = 1u << 4,  ///< features, projected, share_projections, copy_rows, front_padding
  lanczos_keywords = 1u << 5,       ///< subspace, max_restarts, spectral_tolerance
  top_keywords = 1u << 6,           ///< augmented
  tiling_keywords = 1u << 7,        ///< panel_rows
  solver_keywords = 1u << 8,        ///< solver
  evaluation_keywords = 1u << 9,    ///< matrix_free, memory, dense_svd_limit, certificate keywords
  timing_keywords = 1u << 10,       ///< repeat
  output_keywords = 1u << 11,       ///< out
  precision_keywords = 1u << 12,    ///< precision
  /// Everything that defines Nyström factors.
  nystrom_keywords = kernel_keywords | landmark_keywords | pinv_keywords | factor_keywords,
  /// Everything that defines a method's output.
  method_keywords = nystrom_keywords | other_method_keywords | precision_keywords,
};

/// Parses `kwargs` for `function`, which accepts the keyword groups `groups`. Throws nb::type_error for an
/// unknown keyword or a value of the wrong type, std::invalid_argument for a bad value.
KeywordArguments parse_arguments(const char* function, unsigned groups, const nb::kwargs& kwargs);

/// The integer argument `name` of `function` given positionally (count, k, threads) as T, raised on as a
/// keyword's value is (parse_arguments): TypeError for another type, ValueError naming a value T cannot hold.
template <class T>
T integer_argument(const char* function, std::string_view name, nb::handle value);

/// "def <function>(<positional>, *, <keywords of groups>) -> <returns>", kept alive for the module's
/// lifetime.
const char* signature(const char* function, const std::string& positional, unsigned groups,
                      const char* returns);

/// `text` kept alive for the module's lifetime (nanobind keeps pointers to signatures and docstrings).
const char* kept(std::string text);

/// The signature of a property or method `name` of a bound class that returns an array.
const char* returns_array(const char* name);

/// "q: numpy.typing.ArrayLike, k: numpy.typing.ArrayLike" for the names {"q", "k"}.
std::string array_parameters(std::initializer_list<std::string_view> names);

/// `doc` followed by a "Keyword arguments" section listing the groups' keywords, kept alive likewise.
const char* documentation(const char* doc, unsigned groups);

/// The Lanczos options of the spectral keywords.
SpectralOptions spectral_options(const KeywordArguments& arguments);

/// The tiling of the matrix-free operators (panel_rows).
MatrixFreeOptions tiling_options(const KeywordArguments& arguments);

/// The evaluation options of the spectral and evaluation keywords (CPU).
EvaluationOptions evaluation_options(const KeywordArguments& arguments);

/// The names of an enum's values ("pnp-nystra", ...), for the module's constants.
std::vector<std::string> method_names();
std::vector<std::string> kernel_names();
std::vector<std::string> strategy_names();
std::vector<std::string> pinv_names();
std::vector<std::string> stabilization_names();

}  // namespace nystrom::python
