#include "arguments.hpp"

#include <nanobind/stl/array.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cmath>
#include <deque>

namespace nystrom::python {

namespace {

/// One keyword: its Python name, group, annotation and default as Python text, help line, and how it is read.
struct Keyword {
  std::string_view name;
  unsigned group;
  std::string_view annotation;
  std::string_view default_value;
  std::string_view help;
  void (*set)(KeywordArguments&, nb::handle);
};

template <class T>
std::optional<T> optional_cast(nb::handle value) {
  if (value.is_none()) return std::nullopt;
  return nb::cast<T>(value);
}

std::string text(nb::handle value) {
  return nb::cast<std::string>(value);
}

/// A bool keyword: True or False, or numpy's bool scalars (np.True_, the result of a comparison).
bool flag(nb::handle value) {
  const nb::handle type = value.type();
  if (nb::hasattr(type, "__module__") && nb::cast<std::string>(type.attr("__module__")) == "numpy" &&
      nb::cast<std::string>(type.attr("__name__")).starts_with("bool"))
    return PyObject_IsTrue(value.ptr()) == 1;
  return nb::cast<bool>(value);
}

Solver solver_from_string(const std::string& name) {
  if (name == "dense") return Solver::dense;
  if (name == "lanczos") return Solver::lanczos;
  if (name == "matrix-free") return Solver::matrix_free;
  throw std::invalid_argument("unknown solver '" + name + "' (expected dense, lanczos or matrix-free)");
}

// clang-format off
const Keyword keywords[] = {
    {"method", factor_keywords, "str", "'pnp-nystra'",
     "pnp-nystra, nystromformer, cur, symmetric-nystrom, performer, linformer or exact (nystrom_factors: "
     "pnp-nystra or symmetric-nystrom)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.method = method_from_string(text(v)); }},
    {"kernel", kernel_keywords, "str", "'exp'",
     "exp: exp(s qᵀk); laplacian: exp(−‖q − k‖₁/λ); gaussian: exp(−‖q − k‖₂²/(2h²)) (docs/mathematics.md §1)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.kernel = kernel_type_from_string(text(v)); }},
    {"scale", kernel_keywords, "float | None", "None", "exp: the scale s (None: 1/√d)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.scale = optional_cast<double>(v).value_or(0); }},
    {"lambda_", kernel_keywords, "float", "4.0", "laplacian: λ > 0 (--lambda on the command line)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.lambda = nb::cast<double>(v); }},
    {"bandwidth", kernel_keywords, "float", "8.0", "gaussian: h > 0",
     [](KeywordArguments& a, nb::handle v) { a.parameters.bandwidth = nb::cast<double>(v); }},
    {"landmarks", landmark_keywords, "int", "16", "m, the number of landmarks or selected rows (1 ≤ m ≤ N)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.landmarks = nb::cast<Index>(v); }},
    {"strategy", landmark_keywords, "str | None", "None",
     "one of STRATEGIES (docs/mathematics.md §5, §9): segment-means, window-pool, step, random, top-*, kmeans, "
     "given, cross, softmax-cross, maxvol, rpcholesky, farthest-point, farthest-point-means, oracle-qdeim (None: "
     "segment-means; cur: step; nystromformer always takes segment means)",
     [](KeywordArguments& a, nb::handle v) {
       a.parameters.strategy = v.is_none() ? std::nullopt : std::optional(landmark_strategy_from_string(text(v)));
     }},
    {"oversampling", landmark_keywords, "float", "1.0",
     "pnp-nystra: query landmarks per key landmark (≥ 1): Q̄ has ⌈oversampling·m⌉ rows, the core is rectangular "
     "and its pseudoinverse exact, truncated or oracle-core (docs/mathematics.md §9)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.oversampling = nb::cast<double>(v); }},
    {"seed", landmark_keywords, "int", "0",
     "seed of random and k-means landmarks, Performer's features and Linformer's projections",
     [](KeywordArguments& a, nb::handle v) { a.parameters.seed = nb::cast<std::uint64_t>(v); }},
    {"window", landmark_keywords, "tuple[int, int] | None", "None",
     "window-pool: the h×w token grid, h·w = N (None: a square grid)",
     [](KeywordArguments& a, nb::handle v) {
       a.parameters.window = v.is_none() ? std::array<Index, 2>{} : nb::cast<std::array<Index, 2>>(v);
     }},
    {"window_grid", landmark_keywords, "str", "'aspect'",
     "window-pool: the pooling grid, aspect (the factorization of m closest to the window's aspect) or square "
     "(the closest-square factors of m, the authors' code) (docs/mathematics.md §5)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.window_grid = window_grid_from_string(text(v)); }},
    {"prefix_tokens", landmark_keywords, "int", "0",
     "leading tokens not on the window grid (a ViT's CLS token), landmarks of their own (docs/formats.md §1)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.prefix_tokens = nb::cast<Index>(v); }},
    {"different_indices", landmark_keywords, "bool", "False",
     "selection strategies (and cur): select the rows of Q and K separately instead of the same rows",
     [](KeywordArguments& a, nb::handle v) { a.parameters.different_indices = flag(v); }},
    {"forced", landmark_keywords, "collections.abc.Sequence[int]", "()",
     "selection strategies: token indices always selected (counted within m), e.g. a CLS token",
     [](KeywordArguments& a, nb::handle v) { a.parameters.forced = nb::cast<std::vector<Index>>(v); }},
    {"q_indices", landmark_keywords, "collections.abc.Sequence[int]", "()", "strategy 'given': the rows of Q",
     [](KeywordArguments& a, nb::handle v) { a.parameters.q_indices = nb::cast<std::vector<Index>>(v); }},
    {"k_indices", landmark_keywords, "collections.abc.Sequence[int]", "()",
     "strategy 'given': the rows of K (empty: q_indices)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.k_indices = nb::cast<std::vector<Index>>(v); }},
    {"embed_column", landmark_keywords, "int", "0", "top-embed: the embedding column scored",
     [](KeywordArguments& a, nb::handle v) { a.parameters.embed_column = nb::cast<Index>(v); }},
    {"kmeans_iterations", landmark_keywords, "int", "25", "kmeans: Lloyd iterations after k-means++ seeding",
     [](KeywordArguments& a, nb::handle v) { a.parameters.kmeans_iterations = nb::cast<int>(v); }},
    {"pinv", pinv_keywords, "str | None", "None",
     "pseudoinverse: exact, razavi, newton-schulz, truncated or oracle-core (None: the method's own: exact for "
     "pnp-nystra and cur, razavi for nystromformer, newton-schulz for symmetric-nystrom)",
     [](KeywordArguments& a, nb::handle v) {
       a.parameters.pinv = v.is_none() ? std::nullopt : std::optional(pinv_method_from_string(text(v)));
     }},
    {"pinv_iters", pinv_keywords, "int | None", "None",
     "iterations of razavi and newton-schulz (None: 6; symmetric-nystrom: 20)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.pinv_iters = optional_cast<int>(v); }},
    {"alpha", pinv_keywords, "float | None", "None",
     "start Z₀ = αAᵀ of the iterations (None or 0: α = 1/(‖A‖₁‖A‖_∞) per matrix)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.alpha = optional_cast<double>(v).value_or(0); }},
    {"pinv_tolerance", pinv_keywords, "float | None", "None",
     "exact: relative singular-value cut (None or 0: m·eps); iterative: stop once ‖I − AZ‖_F is below it",
     [](KeywordArguments& a, nb::handle v) { a.parameters.pinv_tolerance = optional_cast<double>(v).value_or(0); }},
    {"tikhonov", pinv_keywords, "float | None", "None", "ε > 0: Z = (AᵀA + εI)⁻¹Aᵀ instead of A⁺",
     [](KeywordArguments& a, nb::handle v) { a.parameters.tikhonov = optional_cast<double>(v).value_or(0); }},
    {"shift", pinv_keywords, "float | None", "None",
     "ε > 0: invert A + εI (None: 0; symmetric-nystrom: 1e-6 as LaplacianFormer)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.shift = optional_cast<double>(v); }},
    {"stabilization", factor_keywords, "str | None", "None",
     "pnp-nystra: none, row-max (PnP-Nystra eq. (8)), clamped (the authors' clamped exp) or row-sum (the "
     "landmark rows weighted by their sums) (None: row-max; symmetric-nystrom: none)",
     [](KeywordArguments& a, nb::handle v) {
       a.parameters.stabilization = v.is_none() ? std::nullopt : std::optional(stabilization_from_string(text(v)));
     }},
    {"clamp_threshold", factor_keywords, "float", "5.0",
     "pnp-nystra, stabilization clamped: the threshold c of exp(min(x, c)) + max(x − c, 0) (the authors' code)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.clamp_threshold = nb::cast<double>(v); }},
    {"features", other_method_keywords, "int | None", "None", "performer: random features r (None: landmarks)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.features = optional_cast<Index>(v); }},
    {"projected", other_method_keywords, "int | None", "None", "linformer: projected length k (None: landmarks)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.projected = optional_cast<Index>(v); }},
    {"share_projections", other_method_keywords, "bool", "False", "linformer: F = E (the package's share_kv)",
     [](KeywordArguments& a, nb::handle v) { a.parameters.share_projections = flag(v); }},
    {"copy_rows", other_method_keywords, "bool", "False", "cur: copy the exact rows (R V) into the output",
     [](KeywordArguments& a, nb::handle v) { a.parameters.copy_rows = flag(v); }},
    {"front_padding", other_method_keywords, "bool", "False",
     "nystromformer: the package's front zero padding when N % m ≠ 0",
     [](KeywordArguments& a, nb::handle v) { a.parameters.front_padding = flag(v); }},
    {"precision", precision_keywords, "str | None", "None",
     "the format every matrix is stored in (docs/mathematics.md §8): 'half' or 'bfloat16' emulated in float32 "
     "(arrays of float16, bfloat16 or float32; results in the arrays' dtype), 'float' or 'double' (None: the "
     "arrays' dtype)",
     [](KeywordArguments& a, nb::handle v) {
       a.parameters.precision = v.is_none() ? Precision::float64 : precision_from_string(text(v));
     }},
    {"solver", solver_keywords, "str", "'lanczos'",
     "dense (full SVD, the oracle), lanczos (Lanczos on the stored N×N matrix) or matrix-free (Lanczos on "
     "kernel tiles evaluated on the fly, for large N)",
     [](KeywordArguments& a, nb::handle v) { a.solver = solver_from_string(text(v)); }},
    {"subspace", lanczos_keywords, "int", "0", "Lanczos basis size (0: max(2k + 1, 10))",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.spectral.subspace = nb::cast<int>(v); }},
    {"max_restarts", lanczos_keywords, "int", "1000", "Lanczos restarts at most",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.spectral.max_restarts = nb::cast<int>(v); }},
    {"spectral_tolerance", lanczos_keywords, "float", "1e-13", "Lanczos relative tolerance",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.spectral.tolerance = nb::cast<double>(v); }},
    {"augmented", top_keywords, "bool", "False",
     "top singular values: Lanczos on [[0, A], [Aᵀ, 0]] (small values to about eps·σ₁) instead of AᵀA",
     [](KeywordArguments& a, nb::handle v) { a.augmented = flag(v); }},
    {"panel_rows", tiling_keywords, "int", "128", "matrix-free: rows of G evaluated per panel",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.panel_rows = nb::cast<Index>(v); }},
    {"matrix_free", evaluation_keywords, "bool", "False", "force the matrix-free path (--matrix-free)",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.matrix_free = flag(v); }},
    {"memory", evaluation_keywords, "float", "4e9",
     "bytes a dense N×N analysis may use; above it the matrix-free path is taken (--memory)",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.memory_budget = nb::cast<double>(v); }},
    {"certificates_only", evaluation_keywords, "bool", "False",
     "no exact spectral_error (NaN): only its certified bounds spectral_error_lower and spectral_error_upper "
     "(--certificates-only)",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.certificates_only = flag(v); }},
    {"certificate_steps", evaluation_keywords, "int", "30",
     "Lanczos steps of the certificates of spectral_error (--certificate-steps)",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.certificate.steps = nb::cast<int>(v); }},
    {"certificate_failure", evaluation_keywords, "float", "1e-06",
     "failure probability of spectral_error_upper (--certificate-failure)",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.certificate.failure_probability = nb::cast<double>(v); }},
    {"dense_svd_limit", evaluation_keywords, "int", "256",
     "σ(G̃) by full SVDs up to this size, Lanczos above; norms by Lanczos (--dense-svd-limit)",
     [](KeywordArguments& a, nb::handle v) { a.evaluation.dense_svd_limit = nb::cast<Index>(v); }},
    {"repeat", timing_keywords, "int", "100", "calls timed (the best is returned)",
     [](KeywordArguments& a, nb::handle v) { a.repeat = nb::cast<int>(v); }},
    {"out", output_keywords, "numpy.typing.NDArray | None", "None",
     "a writable C-contiguous array [..., N, dv] of q's dtype that receives the output and is returned (reused "
     "across calls, it saves allocating and first touching a new one); it must not overlap q, k or v; where the "
     "call raises (a head with NaN, say), its contents are unspecified",
     [](KeywordArguments& a, nb::handle v) { a.out = v.is_none() ? nb::handle() : v; }},
};
// clang-format on

/// Deprecated spellings of keywords, read as their new names with a DeprecationWarning.
constexpr std::pair<std::string_view, std::string_view> deprecated_keywords[] = {
    {"iterations", "pinv_iters"},
    {"tolerance", "pinv_tolerance"},
};

const Keyword* find_keyword(std::string_view name) {
  for (const auto& keyword : keywords)
    if (keyword.name == name) return &keyword;
  return nullptr;
}

template <class Enum, std::size_t N>
std::vector<std::string> names_of(const std::array<Enum, N>& values) {
  std::vector<std::string> names;
  for (auto value : values) names.push_back(to_string(value));
  return names;
}

/// Runs `convert`, which casts `value`, the argument `name` of `function` annotated `annotation`; a value of
/// the wrong type raises TypeError naming it, an integer the C++ type cannot hold (a negative seed, a count
/// beyond 2³¹) ValueError saying it is out of range.
template <class Convert>
void converted(const char* function, std::string_view name, std::string_view annotation, nb::handle value,
               const Convert& convert) {
  try {
    convert();
  } catch (const nb::cast_error&) {
    const std::string prefix = describe(function, "(): ", name, " = ", nb::repr(value).c_str());
    if (PyIndex_Check(value.ptr()) && !PyBool_Check(value.ptr()))
      throw nb::value_error((prefix + " is out of range").c_str());
    throw nb::type_error(describe(prefix, " is not ", annotation).c_str());
  }
}

}  // namespace

KeywordArguments parse_arguments(const char* function, unsigned groups, const nb::kwargs& kwargs) {
  KeywordArguments arguments;
  for (auto [key, value] : kwargs) {
    std::string name = nb::cast<std::string>(key);
    for (const auto& [alias, current] : deprecated_keywords)
      if (name == alias) {
        const std::string warning =
            describe(function, "(): the keyword '", alias, "' is deprecated; use '", current, "'");
        if (PyErr_WarnEx(PyExc_DeprecationWarning, warning.c_str(), 1) != 0) throw nb::python_error();
        name = current;
      }
    const Keyword* keyword = find_keyword(name);
    if (!keyword || !(keyword->group & groups))
      throw nb::type_error(describe(function, "() got an unexpected keyword argument '", name, "'").c_str());
    converted(function, name, keyword->annotation, value, [&] { keyword->set(arguments, value); });
  }
  return arguments;
}

template <class T>
T integer_argument(const char* function, std::string_view name, nb::handle value) {
  T result{};
  converted(function, name, "int", value, [&] { result = nb::cast<T>(value); });
  return result;
}

template Index integer_argument<Index>(const char*, std::string_view, nb::handle);
template int integer_argument<int>(const char*, std::string_view, nb::handle);

const char* kept(std::string text) {
  static std::deque<std::string> texts;
  return texts.emplace_back(std::move(text)).c_str();
}

const char* returns_array(const char* name) {
  return kept(describe("def ", name, "(self, /) -> numpy.typing.NDArray"));
}

std::string array_parameters(std::initializer_list<std::string_view> names) {
  std::string text;
  for (auto name : names) text += describe(text.empty() ? "" : ", ", name, ": numpy.typing.ArrayLike");
  return text;
}

const char* signature(const char* function, const std::string& positional, unsigned groups,
                      const char* returns) {
  std::string text = describe("def ", function, "(", positional, ", *");
  for (const auto& keyword : keywords)
    if (keyword.group & groups)
      text += describe(", ", keyword.name, ": ", keyword.annotation, " = ", keyword.default_value);
  return kept(text + ") -> " + returns);
}

const char* documentation(const char* doc, unsigned groups) {
  std::string text = doc;
  text +=
      "\n\nKeyword arguments (named as on the command line, `nystrom sweep --help`, where it has them):\n";
  for (const auto& keyword : keywords)
    if (keyword.group & groups) text += describe("    ", keyword.name, ": ", keyword.help, "\n");
  return kept(text);
}

SpectralOptions spectral_options(const KeywordArguments& arguments) {
  arguments.evaluation.spectral.validate();
  return arguments.evaluation.spectral;
}

MatrixFreeOptions tiling_options(const KeywordArguments& arguments) {
  const MatrixFreeOptions tiling = arguments.evaluation.tiling();
  tiling.validate();
  return tiling;
}

EvaluationOptions evaluation_options(const KeywordArguments& arguments) {
  arguments.evaluation.validate();
  return arguments.evaluation;
}

std::vector<std::string> method_names() {
  return names_of(std::array{Method::pnp_nystra, Method::nystromformer, Method::cur,
                             Method::symmetric_nystrom, Method::performer, Method::linformer, Method::exact});
}

std::vector<std::string> kernel_names() {
  return names_of(std::array{KernelType::exponential, KernelType::laplacian, KernelType::gaussian});
}

std::vector<std::string> strategy_names() {
  return names_of(std::array{LandmarkStrategy::segment_means, LandmarkStrategy::window_pool,
                             LandmarkStrategy::step, LandmarkStrategy::random, LandmarkStrategy::top_sum,
                             LandmarkStrategy::top_abs, LandmarkStrategy::top_embed, LandmarkStrategy::kmeans,
                             LandmarkStrategy::given, LandmarkStrategy::cross,
                             LandmarkStrategy::softmax_cross, LandmarkStrategy::maxvol,
                             LandmarkStrategy::rpcholesky, LandmarkStrategy::farthest_point,
                             LandmarkStrategy::farthest_point_means, LandmarkStrategy::oracle_qdeim});
}

std::vector<std::string> pinv_names() {
  return names_of(std::array{PinvMethod::exact, PinvMethod::razavi, PinvMethod::newton_schulz,
                             PinvMethod::truncated, PinvMethod::oracle_core});
}

std::vector<std::string> stabilization_names() {
  return names_of(std::array{Stabilization::none, Stabilization::row_max, Stabilization::clamped,
                             Stabilization::row_sum});
}

}  // namespace nystrom::python
