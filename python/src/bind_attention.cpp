// Attention outputs of every method (docs/mathematics.md §1, §2, §6), batched over leading dimensions, the
// approximations with their implied attention matrices, and the error measures of §7.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <omp.h>

#include <chrono>
#include <exception>
#include <limits>

#include "arguments.hpp"
#include "common.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"

namespace nystrom::python {

using namespace nb::literals;

namespace {

/// Runs body(index) for every matrix of a batch: spread over the OpenMP threads when there are at least as
/// many matrices as threads (each one then computed on one thread), else one after the other with each one's
/// own threading. The first exception is rethrown after every matrix has finished.
template <class Body>
void for_each_matrix(Index count, const Body& body) {
  const bool across = count > 1 && count >= omp_get_max_threads();
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) if (across)
  for (Index index = 0; index < count; ++index) {
    try {
      body(index);
    } catch (...) {
#pragma omp critical(nystrom_python_batch_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

/// The inputs of one method call: q, k ([..., N, d]) and v ([..., N, dv]) with equal leading dimensions.
template <class T>
struct AttentionInputs {
  MatrixStack<T> q, k, v;
  AttentionInputs(const Array& q_array, const Array& k_array, const Array& v_array)
      : q(q_array, "q"), k(k_array, "k"), v(v_array, "v") {
    require_same_leading(q.leading(), "q", k.leading(), "k");
    require_same_leading(q.leading(), "q", v.leading(), "v");
    require(k.rows() == q.rows() && k.cols() == q.cols(),
            describe("k is ", k.rows(), "x", k.cols(), " but q is ", q.rows(), "x", q.cols(),
                     " (N x d per head)"));
    require(v.rows() == q.rows(), describe("v has N = ", v.rows(), " rows but q has N = ", q.rows()));
  }
  /// Throws naming `function` unless the inputs are single heads (2-D).
  void require_one_head(const char* function) const {
    require(q.leading().empty(),
            describe(function, " takes one head (2-D q, k, v); attention() takes batches [..., N, d]"));
  }
};

template <class T>
nb::object attention_output(const Array& q, const Array& k, const Array& v,
                            const KeywordArguments& arguments) {
  const AttentionInputs<T> inputs(q, k, v);
  const ApproximationOptions options = approximation_options(arguments, inputs.q.cols());
  const auto head = [&](Index index) {
    const MatrixArgument<T> Q = inputs.q.matrix(index), K = inputs.k.matrix(index),
                            V = inputs.v.matrix(index);
    return approximate_attention<T>(arguments.method, Q.ref(), K.ref(), V.ref(), options).output;
  };
  if (inputs.q.leading().empty()) return to_numpy(computed([&] { return head(0); }));
  MatrixBatch<T> out(inputs.q.leading(), inputs.q.rows(), inputs.v.cols());
  computed([&] {
    options.validate(arguments.method, inputs.q.rows(), inputs.q.cols());
    for_each_matrix(inputs.q.count(), [&](Index index) { out.set(index, head(index)); });
  });
  return out.release_to_numpy();
}

/// The best wall time of `repeat` calls of the method on one head, timed here (inputs converted once).
template <class T>
double best_seconds(const Array& q, const Array& k, const Array& v, const KeywordArguments& arguments) {
  require(arguments.repeat >= 1, describe("time_attention: repeat = ", arguments.repeat, " must be >= 1"));
  const AttentionInputs<T> inputs(q, k, v);
  inputs.require_one_head("time_attention");
  const MatrixArgument<T> Q = inputs.q.matrix(0), K = inputs.k.matrix(0), V = inputs.v.matrix(0);
  const ApproximationOptions options = approximation_options(arguments, Q.cols());
  double best = std::numeric_limits<double>::infinity();
  for (int call = 0; call < arguments.repeat; ++call) {
    const auto start = std::chrono::steady_clock::now();
    const Matrix<T> output =
        approximate_attention<T>(arguments.method, Q.ref(), K.ref(), V.ref(), options).output;
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

void bind_attention(nb::module_& m) {
  nb::class_<ApproximationAny>(
      m, "Approximation",
      "One method's output Ô, its implied N×N attention matrix Ŝ (in factored form) and "
      "the diagnostics of its pseudoinverse (docs/mathematics.md §6).")
      .def_prop_ro(
          "method",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) { return to_string(a.approximation.method); });
          },
          "The method, e.g. 'pnp-nystra'.")
      .def_prop_ro(
          "output",
          [](const ApproximationAny& self) {
            const nb::object owner = nb::find(self);
            return self.visit([&](const auto& a) { return view_of(a.approximation.output, owner); });
          },
          nb::sig(returns_array("output")), "Ô (N×dv).")
      .def_prop_ro(
          "pinv_status",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) -> std::optional<std::string> {
              if (!a.approximation.pinv_status) return std::nullopt;
              return to_string(*a.approximation.pinv_status);
            });
          },
          "Status of the method's pseudoinverse (None for methods without one).")
      .def_prop_ro(
          "pinv_residual",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) { return a.approximation.pinv_residual; });
          },
          "‖I − AZ‖_F of the method's pseudoinverse (NaN without one).")
      .def_prop_ro(
          "factors",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) -> std::optional<FactorsAny> {
              if (!a.approximation.kernel_factors) return std::nullopt;
              return FactorsAny{*a.approximation.kernel_factors};
            });
          },
          "pnp-nystra and symmetric-nystrom: the Nyström factors of Ĝ ≈ G (a copy); None otherwise.")
      .def_prop_ro(
          "implied_matrix",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) { return implied_matrix(a.approximation.method); });
          },
          "Which N×N matrix Ŝ the method implies, e.g. 'S_hat = F~ pinv(A~) B~ (Nystromformer eq. 15; …)'.")
      .def(
          "implied_attention",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) -> nb::object {
              using T = typename std::decay_t<decltype(a.approximation.output)>::Scalar;
              std::optional<Matrix<T>> dense = computed([&]() -> std::optional<Matrix<T>> {
                const auto implied = a.approximation.attention();
                if (!implied) return std::nullopt;
                return implied->dense();
              });
              if (!dense) return nb::none();
              return to_numpy(std::move(*dense));
            });
          },
          nb::sig("def implied_attention(self) -> numpy.typing.NDArray | None"),
          "Ŝ as a dense N×N array (small N only; O(N²m)); None for exact.")
      .def("__repr__", [](const ApproximationAny& self) {
        return self.visit([](const auto& a) {
          return describe("Approximation(method='", to_string(a.approximation.method),
                          "', N=", a.approximation.output.rows(), ", dv=", a.approximation.output.cols(),
                          ")");
        });
      });

  nb::class_<OutputErrors>(m, "OutputErrors",
                           "Errors of an attention output against the exact one (FORMATS §2).")
      .def_ro("relative_frobenius", &OutputErrors::relative_frobenius,
              "‖O − Ô‖_F/‖O‖_F (output_relative_error).")
      .def_ro("max_abs", &OutputErrors::max_abs, "max|O − Ô| (output_max_error).")
      .def_ro("mean_abs", &OutputErrors::mean_abs, "mean|O − Ô| (output_mean_abs_error).")
      .def("__repr__", [](const OutputErrors& e) {
        return describe("OutputErrors(relative_frobenius=", e.relative_frobenius, ", max_abs=", e.max_abs,
                        ", mean_abs=", e.mean_abs, ")");
      });

  nb::class_<AttentionMatrixErrors>(m, "AttentionMatrixErrors",
                                    "‖S − Ŝ‖ of an implied attention matrix against S = D⁻¹G.")
      .def_ro("spectral", &AttentionMatrixErrors::spectral, "‖S − Ŝ‖₂.")
      .def_ro("relative_spectral", &AttentionMatrixErrors::relative_spectral, "‖S − Ŝ‖₂ / ‖S‖₂.")
      .def_ro("frobenius", &AttentionMatrixErrors::frobenius, "‖S − Ŝ‖_F (dense only, else NaN).")
      .def_ro("matrix_free", &AttentionMatrixErrors::matrix_free, "True when computed matrix-free.")
      .def("__repr__", [](const AttentionMatrixErrors& e) {
        return describe("AttentionMatrixErrors(spectral=", e.spectral,
                        ", relative_spectral=", e.relative_spectral, ", frobenius=", e.frobenius,
                        ", matrix_free=", e.matrix_free ? "True" : "False", ")");
      });

  m.def(
      "attention",
      [](const Array& q, const Array& k, const Array& v, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("attention", method_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}, {&v, "v"}}), [&](auto scalar) {
          return attention_output<decltype(scalar)>(q, k, v, arguments);
        });
      },
      "q"_a, "k"_a, "v"_a, "kwargs"_a,
      nb::sig(
          signature("attention", array_parameters({"q", "k", "v"}), method_keywords, "numpy.typing.NDArray")),
      documentation(
          "The attention output Ô of a method for q, k ([..., N, d]) and v ([..., N, dv]): exact attention "
          "O = (G V) ⊘ (G 1_N), or an approximation (pnp-nystra: PnP-Nystra Algorithm 1 on Ĝ = G_L G_A⁺ "
          "G_U). "
          "Leading dimensions (batch, heads) are looped over in C++, spread over the threads when there are "
          "at "
          "least as many heads as threads. Returns an array [..., N, dv] of q's dtype (each N×dv block "
          "column-major). Inference only: no gradients.",
          method_keywords));

  m.def(
      "approximate",
      [](const Array& q, const Array& k, const Array& v, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("approximate", method_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}, {&v, "v"}}), [&](auto scalar) {
          using T = decltype(scalar);
          return computed([&] {
            const AttentionInputs<T> inputs(q, k, v);
            inputs.require_one_head("approximate");
            const MatrixArgument<T> Q = inputs.q.matrix(0), K = inputs.k.matrix(0), V = inputs.v.matrix(0);
            const ApproximationOptions options = approximation_options(arguments, Q.cols());
            return ApproximationAny{KernelApproximation<T>{
                approximate_attention<T>(arguments.method, Q.ref(), K.ref(), V.ref(), options),
                options.kernel}};
          });
        });
      },
      "q"_a, "k"_a, "v"_a, "kwargs"_a,
      nb::sig(signature("approximate", array_parameters({"q", "k", "v"}), method_keywords, "Approximation")),
      documentation(
          "One method on one head (q, k: N×d, v: N×dv) with everything it produced: the output, the "
          "implied attention matrix Ŝ, the Nyström factors (pnp-nystra, symmetric-nystrom) and the "
          "pseudoinverse's status.",
          method_keywords));

  m.def(
      "attention_matrix_errors",
      [](const Array& q, const Array& k, const ApproximationAny& approximation, bool dense,
         const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("attention_matrix_errors", lanczos_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          return computed([&] {
            const auto& a = approximation.as<T>("the approximation's arrays");
            const auto implied = a.approximation.attention();
            require(implied.has_value(),
                    "attention_matrix_errors: exact attention implies no approximate matrix");
            const MatrixArgument<T> Q(q, "q"), K(k, "k");
            return attention_matrix_errors<T>(Q.ref(), K.ref(), a.kernel, *implied, dense,
                                              spectral_options(arguments));
          });
        });
      },
      "q"_a, "k"_a, "approximation"_a, "dense"_a = false, "kwargs"_a,
      nb::sig(signature("attention_matrix_errors",
                        array_parameters({"q", "k"}) + ", approximation: Approximation, dense: bool = False",
                        lanczos_keywords, "AttentionMatrixErrors")),
      documentation(
          "‖S − Ŝ‖₂ (and ‖S − Ŝ‖_F when dense) of an approximation's implied attention matrix Ŝ "
          "against the exact S = D⁻¹G on the same q, k: dense SVDs (small N), else Lanczos on operators "
          "that evaluate S in row panels.",
          lanczos_keywords));

  m.def(
      "output_errors",
      [](const Array& exact, const Array& approximate) {
        return with_scalar(common_precision({{&exact, "exact"}, {&approximate, "approximate"}}),
                           [&](auto scalar) {
                             using T = decltype(scalar);
                             const MatrixArgument<T> O(exact, "exact"), A(approximate, "approximate");
                             require(O.rows() == A.rows() && O.cols() == A.cols(),
                                     describe("output_errors: approximate is ", A.rows(), "x", A.cols(),
                                              ", expected ", O.rows(), "x", O.cols()));
                             return output_errors<T>(O.ref(), A.ref());
                           });
      },
      "exact"_a, "approximate"_a, nb::call_guard<Compute>(),
      nb::sig("def output_errors(exact: numpy.typing.ArrayLike, approximate: numpy.typing.ArrayLike) -> "
              "OutputErrors"),
      "‖O − Ô‖_F/‖O‖_F, max|O − Ô| and mean|O − Ô| of an output against the exact one (the sweep's "
      "output_relative_error, output_max_error, output_mean_abs_error), accumulated in double.");

  m.def(
      "time_attention",
      [](const Array& q, const Array& k, const Array& v, const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("time_attention", method_keywords | timing_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}, {&v, "v"}}), [&](auto scalar) {
          return computed([&] { return best_seconds<decltype(scalar)>(q, k, v, arguments); });
        });
      },
      "q"_a, "k"_a, "v"_a, "kwargs"_a,
      nb::sig(signature("time_attention", array_parameters({"q", "k", "v"}),
                        method_keywords | timing_keywords, "float")),
      documentation(
          "Seconds of the fastest of `repeat` calls of the library's method on one head (q, k: N×d, v: "
          "N×dv), timed in C++ with the inputs converted once: the cost of attention() without Python "
          "(bench/python_module.py compares the two).",
          method_keywords | timing_keywords));
}

}  // namespace nystrom::python
