// Spectral norms and singular values, dense, by Lanczos on stored matrices and matrix-free
// (docs/mathematics.md §7), and the Lemma 2.1 terms and bounds (§3).
#include <nanobind/stl/string.h>

#include "arguments.hpp"
#include "common.hpp"
#include "nystrom/bounds.hpp"
#include "nystrom/detail/power_of_two.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/head.hpp"
#include "nystrom/matrix_free.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/spectral.hpp"

namespace nystrom::python {

using namespace nb::literals;

namespace {

/// The top `count` singular values of an operator, by Lanczos on the Gram or the augmented operator; a bad
/// count is named as `function`'s argument (the library's k would read as the keys).
template <class Operator>
SpectralResult top_values(const char* function, const Operator& op, Index count,
                          const KeywordArguments& arguments) {
  detail::require_rank_count(op, count, function, "count");
  const SpectralOptions options = spectral_options(arguments);
  return arguments.augmented ? top_singular_values_augmented(op, count, options)
                             : top_singular_values(op, count, options);
}

/// ‖A‖₂ of a stored matrix by the chosen solver (dense or lanczos), computed for 2⁻ᵖA with its largest
/// entry in [1, 2) (an exact scaling): Lanczos's products AᵀAx of a float32 A with entries beyond 1e19
/// would overflow.
template <class T>
SpectralResult stored_norm(Matrix<T> a, const KeywordArguments& arguments) {
  const int p = largest_exponent(a);  // a non-finite A is left to the solvers' own messages
  a = times_power_of_two(a, -p);
  SpectralResult result;
  if (arguments.solver == Solver::dense) {
    result.values = singular_values<T>(a).head(1);
    result.converged = true;
  } else {
    result = spectral_norm(DenseOperator<T>(a), spectral_options(arguments));
  }
  result.values *= std::ldexp(1.0, p);
  result.last_error_bound *= std::ldexp(1.0, p);
  return result;
}

/// σ₁ of a norm's result. Where Lanczos did not converge, σ₁ is NaN (Spectra returns converged values
/// only), and a RuntimeWarning says so and which keywords reach it (the GIL held; raises where warnings are
/// errors).
double norm_value(const char* function, const SpectralResult& result, const KeywordArguments& arguments) {
  if (!result.converged) {
    const SpectralOptions& options = arguments.evaluation.spectral;
    const std::string message =
        describe(function, ": Lanczos did not reach spectral_tolerance = ", options.tolerance, " within ",
                 "max_restarts = ", options.max_restarts, " (subspace = ", options.subspace,
                 "), so the norm is NaN: raise max_restarts or subspace");
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) throw nb::python_error();
  }
  return result.values(0);
}

/// Throws naming `function` and q or k where one holds NaN or Inf; checked before the logits, whose message
/// would otherwise blame an overflow.
template <class T>
void require_finite_tokens(const char* function, const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k) {
  require_finite(q, describe(function, ": q"));
  require_finite(k, describe(function, ": k"));
}

/// The tokens and the factors of one call, the factors in the tokens' precision; the tokens finite.
template <class T>
struct FactorInputs {
  MatrixArgument<T> q, k;
  const NystromFactors<T>& factors;
  FactorInputs(const char* function, const Array& q_array, const Array& k_array, const FactorsAny& any)
      : q(q_array, "q"), k(k_array, "k"), factors(any.as<T>("the factors")) {
    require(q.rows() == factors.rows() && k.rows() == factors.cols(), "the factors approximate a ",
            factors.rows(), "x", factors.cols(), " kernel, but q has ", q.rows(), " and k has ", k.rows(),
            " rows");
    const Index d = factors.landmarks.q.cols();
    require(q.cols() == d && k.cols() == d, "the factors' landmarks have d = ", d, ", but q has ", q.cols(),
            " and k has ", k.cols(), " columns");
    require_finite_tokens(function, q.ref(), k.ref());
    require_representable_kernel<T>(q.ref(), k.ref(), factors.options.kernel, function);
  }
};

/// A result on E = G − Ĝ computed matrix-free on κ_c, c the tokens' largest logit as kernel_norm takes it
/// (kernel_log_shift): `solve` gets κ_c and returns the result on E_c = G_c − Ĝ_c, Ĝ brought from the
/// factors' own log-shift c₀ by widened_factors(factors, c); its values and certificate are multiplied back
/// by e^{c − c₀}. The Gram products hold σ₁(E)², which overflows from logits near 355 (mathematics.md §1,
/// "Large logits").
template <class T, class Solve>
SpectralResult on_shifted_kernel(const FactorInputs<T>& in, const Solve& solve) {
  const Kernel& kernel = in.factors.options.kernel;
  const double c = kernel_log_shift<T>(kernel, in.q.ref(), in.k.ref());
  SpectralResult result = solve(kernel.shifted(c));
  const double scale = std::exp(c - kernel.log_shift);
  result.values *= scale;
  result.last_error_bound *= scale;
  return result;
}

const std::string factor_parameters = array_parameters({"q", "k"}) + ", factors: NystromFactors";

constexpr unsigned kernel_norm_keywords =
    kernel_keywords | solver_keywords | lanczos_keywords | tiling_keywords;
constexpr unsigned kernel_values_keywords =
    kernel_keywords | lanczos_keywords | top_keywords | tiling_keywords;
constexpr unsigned error_norm_keywords = solver_keywords | lanczos_keywords | tiling_keywords;
constexpr unsigned error_values_keywords = lanczos_keywords | top_keywords | tiling_keywords;
constexpr unsigned terms_keywords = lanczos_keywords | tiling_keywords | evaluation_keywords;

}  // namespace

void bind_spectral(nb::module_& m) {
  nb::class_<SpectralResult>(m, "SpectralResult",
                             "Singular values from Lanczos with their cost and certificate.")
      .def_ro("values", &SpectralResult::values, "Singular values, σ₁ first (float64).")
      .def_ro("matvecs", &SpectralResult::matvecs, "Operator products (A and Aᵀ each count one).")
      .def_ro("converged", &SpectralResult::converged, "False when Lanczos did not reach its tolerance.")
      .def_ro("last_error_bound", &SpectralResult::last_error_bound,
              "Some singular value lies within this distance of the last value (0 on full-SVD paths).")
      .def("__repr__", [](const SpectralResult& r) {
        return describe("SpectralResult(k=", r.values.size(),
                        ", sigma1=", r.values.size() ? r.values(0) : 0.0, ", matvecs=", r.matvecs,
                        ", converged=", r.converged ? "True" : "False", ")");
      });

  nb::class_<LandmarkTerms>(m, "LandmarkTerms",
                            "The Lemma 2.1 terms of a landmark set, on the unstabilized blocks of "
                            "G̃ = κ([Q̄; Q], [K̄; K]) (docs/mathematics.md §3).")
      .def_ro("sigma1_ext", &LandmarkTerms::sigma1_ext, "σ₁(G̃).")
      .def_ro("sigma_m1_ext", &LandmarkTerms::sigma_m1_ext, "σ_{m+1}(G̃).")
      .def_ro(
          "sigma_m1_margin", &LandmarkTerms::sigma_m1_margin,
          "How far the exact σ_{m+1}(G̃) may lie above sigma_m1_ext: the larger of the Lanczos certificate "
          "and the rounding floor (N + m)·eps·σ₁(G̃); the theorems are taken at their sum "
          "(docs/mathematics.md §3).")
      .def_ro("sigma_m_core", &LandmarkTerms::sigma_m_core, "σ_m(G_A).")
      .def_ro("theorem3_k", &LandmarkTerms::theorem3_k,
              "K = (1+‖G_L G_A⁻¹‖₂)(1+‖G_A⁻¹G_U‖₂) (Inf when singular).")
      .def_ro("converged", &LandmarkTerms::converged, "False when the Lanczos run for σ(G̃) did not converge.")
      .def("__repr__", [](const LandmarkTerms& t) {
        return describe("LandmarkTerms(sigma1_ext=", t.sigma1_ext, ", sigma_m1_ext=", t.sigma_m1_ext,
                        ", sigma_m1_margin=", t.sigma_m1_margin, ", sigma_m_core=", t.sigma_m_core,
                        ", theorem3_k=", t.theorem3_k, ")");
      });

  nb::class_<BoundReport>(
      m, "BoundReport",
      "The bounds of docs/mathematics.md §3 with whether each applies; a bound that does not "
      "apply is NaN.")
      .def_ro("ratio", &BoundReport::ratio, "σ_{m+1}(G̃)/σ_m(G_A) (bound_ratio).")
      .def_ro("theorem1", &BoundReport::theorem1, "σ₁²/(a − σ_{m+1}) · σ_{m+1}/a (theorem1_bound).")
      .def_ro("theorem2", &BoundReport::theorem2, "2σ₁²σ_{m+1}/a² (theorem2_bound).")
      .def_ro("theorem3", &BoundReport::theorem3, "K σ_{m+1} (theorem3_bound).")
      .def_ro("theorem3_k", &BoundReport::theorem3_k, "K of theorem 3.")
      .def_ro("c_emp", &BoundReport::c_emp, "‖E‖₂ · a / σ_{m+1}.")
      .def_ro("c_emp_normalized", &BoundReport::c_emp_normalized, "C_emp / σ₁².")
      .def_ro("spectral_error", &BoundReport::spectral_error, "The measured ‖E‖₂.")
      .def_ro("sigma1_ext", &BoundReport::sigma1_ext, "σ₁(G̃).")
      .def_ro("theorem1_applies", &BoundReport::theorem1_applies, "a > σ_{m+1}.")
      .def_ro("theorem2_applies", &BoundReport::theorem2_applies, "a > 0.")
      .def_ro("theorem3_applies", &BoundReport::theorem3_applies, "K σ_{m+1} < a.")
      .def("holds", &BoundReport::holds, "slack"_a = 1e-10,
           "True when every applicable bound B satisfies ‖E‖₂ ≤ B + slack·(B + σ₁(G̃)) (sweeps take slack = "
           "max(1e-10, (N + m)·eps) of their precision).")
      .def("__repr__", [](const BoundReport& b) {
        return describe("BoundReport(ratio=", b.ratio, ", theorem1=", b.theorem1, ", theorem2=", b.theorem2,
                        ", theorem3=", b.theorem3, ", c_emp=", b.c_emp, ")");
      });

  m.def(
      "singular_values",
      [](const Array& a) {
        return with_scalar(precision_of(a, "a"), [&](auto scalar) {
          using T = decltype(scalar);
          const MatrixArgument<T> A(a, "a");
          require_finite(A.ref(), "singular_values: a");
          return singular_values<T>(A.ref());
        });
      },
      "a"_a, nb::call_guard<Compute>(),
      nb::sig("def singular_values(a: numpy.typing.ArrayLike) -> numpy.typing.NDArray[numpy.float64]"),
      "All singular values of a dense matrix by a full SVD in double, σ₁ first (the oracle; O(n³)).");

  m.def(
      "top_singular_values",
      [](const Array& a, nb::handle count, const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("top_singular_values", lanczos_keywords | top_keywords, kwargs);
        const auto k = integer_argument<Index>("top_singular_values", "count", count);
        return with_scalar(precision_of(a, "a"), [&](auto scalar) {
          using T = decltype(scalar);
          return computed([&] {
            const MatrixArgument<T> A(a, "a");
            require_finite(A.ref(), "top_singular_values: a");
            return top_values("top_singular_values", DenseOperator<T>(A.ref()), k, arguments);
          });
        });
      },
      "a"_a, "count"_a, "kwargs"_a,
      nb::sig(signature("top_singular_values", array_parameters({"a"}) + ", count: int",
                        lanczos_keywords | top_keywords, "SpectralResult")),
      documentation(
          "The top `count` singular values of a stored matrix by Lanczos (Spectra) on AᵀA or AAᵀ, or on "
          "[[0, A], [Aᵀ, 0]] with augmented=True; a full SVD where the basis would span the matrix, and for "
          "count ≥ min(rows, cols)/6 (where it is the faster).",
          lanczos_keywords | top_keywords));

  m.def(
      "kernel_norm",
      [](const Array& q, const Array& k, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("kernel_norm", kernel_norm_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          const SpectralResult result = computed([&] {
            const MatrixArgument<T> Q(q, "q"), K(k, "k");
            const Kernel kernel = arguments.parameters.kernel_for(Q.cols());
            require_finite_tokens("kernel_norm", Q.ref(), K.ref());
            require_representable_kernel<T>(Q.ref(), K.ref(), kernel, "kernel_norm");
            // ‖G‖₂ = e^c‖κ_c(Q, K)‖₂ with the sweep's log-shift c: logits beyond T's range either way
            // (mathematics.md §1), and a σ₁ whose square, in the matrix-free Gram form, would overflow.
            const double c = kernel_log_shift<T>(kernel, Q.ref(), K.ref());
            const Kernel shifted = kernel.shifted(c);
            SpectralResult result =
                arguments.solver == Solver::matrix_free
                    ? matrix_free_kernel_norm<T>(Q.ref(), K.ref(), shifted, spectral_options(arguments),
                                                 tiling_options(arguments))
                    : stored_norm<T>(shifted.block<T>(Q.ref(), K.ref()), arguments);
            result.values *= std::exp(c);
            return result;
          });
          return norm_value("kernel_norm", result, arguments);
        });
      },
      "q"_a, "k"_a, "kwargs"_a,
      nb::sig(signature("kernel_norm", array_parameters({"q", "k"}), kernel_norm_keywords, "float")),
      documentation(
          "‖G‖₂ of G = κ(Q, K): full SVD, Lanczos on the stored G, or matrix-free (nothing N×N stored).",
          kernel_norm_keywords));

  m.def(
      "kernel_singular_values",
      [](const Array& q, const Array& k, nb::handle count, const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("kernel_singular_values", kernel_values_keywords, kwargs);
        const auto values = integer_argument<Index>("kernel_singular_values", "count", count);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          return computed([&] {
            const MatrixArgument<T> Q(q, "q"), K(k, "k");
            const Kernel kernel = arguments.parameters.kernel_for(Q.cols());
            require_finite_tokens("kernel_singular_values", Q.ref(), K.ref());
            require_representable_kernel<T>(Q.ref(), K.ref(), kernel, "kernel_singular_values");
            const KernelOperator<T, double> g(Q.ref(), K.ref(), kernel, tiling_options(arguments));
            return top_values("kernel_singular_values", g, values, arguments);
          });
        });
      },
      "q"_a, "k"_a, "count"_a, "kwargs"_a,
      nb::sig(signature("kernel_singular_values", array_parameters({"q", "k"}) + ", count: int",
                        kernel_values_keywords, "SpectralResult")),
      documentation(
          "The top `count` singular values of G = κ(Q, K), matrix-free: Lanczos on kernel tiles "
          "evaluated on the fly in double, one kernel pass per Gram product (docs/mathematics.md §7).",
          kernel_values_keywords));

  m.def(
      "error_norm",
      [](const Array& q, const Array& k, const FactorsAny& factors, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("error_norm", error_norm_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          const SpectralResult result = computed([&] {
            const FactorInputs<T> in("error_norm", q, k, factors);
            const Kernel& kernel = in.factors.options.kernel;
            if (arguments.solver == Solver::matrix_free) {
              const auto norm = [&](const Kernel& shifted) {
                return matrix_free_error_norm<T>(in.q.ref(), in.k.ref(), in.factors, shifted,
                                                 spectral_options(arguments), tiling_options(arguments));
              };
              return on_shifted_kernel(in, norm);
            }
            Matrix<T> g = kernel.block<T>(in.q.ref(), in.k.ref());
            require_kernel_in_range<T>(g, in.q.ref(), in.k.ref(), kernel, "error_norm");
            g -= in.factors.dense();
            return stored_norm<T>(std::move(g), arguments);
          });
          return norm_value("error_norm", result, arguments);
        });
      },
      "q"_a, "k"_a, "factors"_a, "kwargs"_a,
      nb::sig(signature("error_norm", factor_parameters, error_norm_keywords, "float")),
      documentation(
          "‖G − Ĝ‖₂ for G = κ(Q, K) and Ĝ from Nyström factors of the same q, k (row scales included): "
          "full SVD of the formed difference, Lanczos on it, or matrix-free (E products fused into one "
          "kernel pass; docs/mathematics.md §7). Matrix-free, E is computed on κ_c = exp(φ − c), Ĝ scaled "
          "alike, c the largest logit, and multiplied back by e^c (docs/mathematics.md §1): an error whose "
          "square overflows float64 (logits up to 709) is computed; the stored solvers need G in the "
          "arrays' dtype.",
          error_norm_keywords));

  m.def(
      "error_singular_values",
      [](const Array& q, const Array& k, const FactorsAny& factors, nb::handle count,
         const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("error_singular_values", error_values_keywords, kwargs);
        const auto values = integer_argument<Index>("error_singular_values", "count", count);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          return computed([&] {
            const FactorInputs<T> in("error_singular_values", q, k, factors);
            return on_shifted_kernel(in, [&](const Kernel& shifted) {
              const KernelOperator<T, double> g(in.q.ref(), in.k.ref(), shifted, tiling_options(arguments));
              const NystromFactors<double> wide = widened_factors(in.factors, shifted.log_shift);
              const NystromOperator<double> approximation(wide);
              const DifferenceOperator<KernelOperator<T, double>, NystromOperator<double>> error(
                  g, approximation);
              return top_values("error_singular_values", error, values, arguments);
            });
          });
        });
      },
      "q"_a, "k"_a, "factors"_a, "count"_a, "kwargs"_a,
      nb::sig(signature("error_singular_values", factor_parameters + ", count: int", error_values_keywords,
                        "SpectralResult")),
      documentation(
          "The top `count` singular values of E = G − Ĝ, matrix-free (products in double), computed "
          "on κ_c = exp(φ − c), Ĝ scaled alike, c the largest logit, and multiplied back by e^c, as "
          "error_norm's (docs/mathematics.md §1): values whose squares overflow float64 are computed.",
          error_values_keywords));

  m.def(
      "landmark_terms",
      [](const Array& q, const Array& k, const FactorsAny& factors, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("landmark_terms", terms_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          return computed([&] {
            const FactorInputs<T> in("landmark_terms", q, k, factors);
            Head<T> head;
            head.q = in.q.ref();
            head.k = in.k.ref();
            // On κ_c, c the largest logit, as the sweep: the σ scale by e^c, K does not (mathematics.md §1).
            const Kernel& kernel = in.factors.options.kernel;
            const double c = kernel_log_shift<T>(kernel, head.q, head.k);
            LandmarkTerms terms = landmark_terms<T>(head, kernel.shifted(c), in.factors.landmarks,
                                                    evaluation_options(arguments));
            for (double* sigma :
                 {&terms.sigma1_ext, &terms.sigma_m1_ext, &terms.sigma_m1_margin, &terms.sigma_m_core})
              *sigma *= std::exp(c);
            return terms;
          });
        });
      },
      "q"_a, "k"_a, "factors"_a, "kwargs"_a,
      nb::sig(signature("landmark_terms", factor_parameters, terms_keywords, "LandmarkTerms")),
      documentation("σ₁(G̃), σ_{m+1}(G̃), σ_m(G_A) and theorem 3's K for the landmarks of the factors, on the "
                    "unstabilized blocks of G̃ = κ([Q̄; Q], [K̄; K]) (what the sweep's columns sigma1_ext, "
                    "sigma_m1_ext, sigma_m_core, theorem3_k hold).",
                    terms_keywords));

  m.def(
      "evaluate_bounds",
      [](double sigma1_ext, double sigma_m1_ext, double sigma_m_core, double spectral_error,
         double theorem3_k, double sigma_m1_margin) {
        return evaluate_bounds(
            {sigma1_ext, sigma_m1_ext, sigma_m_core, spectral_error, theorem3_k, sigma_m1_margin});
      },
      nb::kw_only(), "sigma1_ext"_a, "sigma_m1_ext"_a, "sigma_m_core"_a, "spectral_error"_a, "theorem3_k"_a,
      "sigma_m1_margin"_a = 0.0,
      "The bounds of Lemma 2.1 in the explicit forms of docs/mathematics.md §3 from σ₁(G̃), σ_{m+1}(G̃), "
      "σ_m(G_A), the measured ‖G − Ĝ‖₂ and K, the theorems taken at σ_{m+1}(G̃) + sigma_m1_margin.");
  m.def(
      "evaluate_bounds",
      [](const LandmarkTerms& terms, double spectral_error) {
        return evaluate_bounds({terms.sigma1_ext, terms.sigma_m1_ext, terms.sigma_m_core, spectral_error,
                                terms.theorem3_k, terms.sigma_m1_margin});
      },
      "terms"_a, "spectral_error"_a,
      "The bounds from landmark_terms() and the measured ‖G − Ĝ‖₂ (error_norm()).");

  m.def(
      "theorem3_constant",
      [](const Array& left, const Array& core, const Array& upper) {
        return with_scalar(common_precision({{&left, "left"}, {&core, "core"}, {&upper, "upper"}}),
                           [&](auto scalar) {
                             using T = decltype(scalar);
                             const MatrixArgument<T> L(left, "left"), A(core, "core"), U(upper, "upper");
                             return theorem3_constant<T>(L.ref(), A.ref(), U.ref());
                           });
      },
      "left"_a, "core"_a, "upper"_a, nb::call_guard<Compute>(),
      nb::sig("def theorem3_constant(left: numpy.typing.ArrayLike, core: numpy.typing.ArrayLike, "
              "upper: numpy.typing.ArrayLike) -> float"),
      "K = (1+‖G_L G_A⁻¹‖₂)(1+‖G_A⁻¹G_U‖₂) for unscaled blocks G_L (N×m), G_A (m×m), G_U (m×N), in double "
      "by LU solves with G_A; Inf when G_A is numerically singular.");

  m.def(
      "numerical_rank",
      [](const Array& values, double tol) {
        return numerical_rank(double_vector(values, "numerical_rank: singular_values"), tol);
      },
      "singular_values"_a, "tol"_a = 0.0,
      nb::sig("def numerical_rank(singular_values: numpy.typing.ArrayLike, tol: float = 0.0) -> int"),
      "The number of singular values > tol·σ₁ (tol ≤ 0: n·eps for n values).");
  m.def(
      "energy_fraction",
      [](const Array& values, nb::handle k) {
        return energy_fraction(double_vector(values, "energy_fraction: singular_values"),
                               integer_argument<Index>("energy_fraction", "k", k));
      },
      "singular_values"_a, "k"_a,
      nb::sig("def energy_fraction(singular_values: numpy.typing.ArrayLike, k: int) -> float"),
      "The fraction of Σσᵢ² captured by the first k singular values.");
}

}  // namespace nystrom::python
