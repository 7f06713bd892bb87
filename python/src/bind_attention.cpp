// Attention outputs of every method (docs/mathematics.md §1, §2, §6), batched over leading dimensions, the
// approximations with their implied attention matrices, and one sweep point's every column (§7).
#include <Python.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <array>
#include <chrono>
#include <exception>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "arguments.hpp"
#include "common.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/batched.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/head.hpp"
#include "nystrom/point_record.hpp"

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
    require(k.rows() == q.rows() && k.cols() == q.cols(), "k is ", k.rows(), "x", k.cols(), " but q is ",
            q.rows(), "x", q.cols(), " (N x d per head)");
    require(v.rows() == q.rows(), "v has N = ", v.rows(), " rows but q has N = ", q.rows());
    const auto q_rows = row_major_batch<T>(q_array), k_rows = row_major_batch<T>(k_array),
               v_rows = row_major_batch<T>(v_array);
    if (q_rows && k_rows && v_rows) row_major = std::array{*q_rows, *k_rows, *v_rows};
  }
  /// The method on every head of row-major inputs into `out` (batched_attention, each head read and written
  /// in place).
  void run_row_major(Method method, const BatchView<T>& out, const ApproximationOptions& options) const {
    const auto& [Q, K, V] = *row_major;
    batched_attention<T>(method, Q, K, V, out, options);
  }
  /// q, k and v as batches of row-major heads read in place, when all three are C-contiguous
  /// (row_major_batch).
  std::optional<std::array<BatchView<const T>, 3>> row_major;

  /// Throws naming `function` unless the inputs are single heads (2-D).
  void require_one_head(const char* function) const {
    require(q.leading().empty(), function,
            " takes one head (2-D q, k, v); attention() takes batches [..., N, d]");
  }
};

/// The rows of each head's Ô that are not finite: where PnP-Nystra's and symmetric Nyström's Ô = (ĜV) ⊘ (Ĝ1)
/// divides by row sums that vanish or overflow, and, for every method, where a kernel parameter far beyond
/// the tokens' range takes the logits out of the dtype's range (scale=1e38 in float32).
class UndefinedRows {
 public:
  /// The rows of `heads` heads of `method`, warned of as `function`'s.
  UndefinedRows(const char* function, Method method, Index heads)
      : function_(function), method_(method), rows_(heads, 0) {}

  /// Counts head `index`'s rows (any thread, the GIL released); a finite head costs one vectorized pass.
  template <class Output>
  void count(Index index, const Output& out) {
    if (all_finite(out)) return;
    rows_[std::size_t(index)] = out.rows() - out.array().isFinite().rowwise().all().count();
  }

  /// A RuntimeWarning naming the rows, as numpy warns of invalid values (the GIL held); raises where warnings
  /// are errors.
  void warn(Index rows_per_head) const {
    Index rows = 0, heads = 0, first = -1;
    for (std::size_t i = 0; i < rows_.size(); ++i)
      if (rows_[i] > 0) {
        rows += rows_[i];
        heads += 1;
        if (first < 0) first = Index(i);
      }
    if (rows == 0) return;
    const bool row_sums = method_ == Method::pnp_nystra || method_ == Method::symmetric_nystrom;
    const std::string message = describe(
        function_, ": ", to_string(method_), " gave ", rows, " of ", Index(rows_.size()) * rows_per_head,
        " output rows that are not finite",
        rows_.size() == 1 ? std::string()
                          : describe(", in ", heads, " of ", rows_.size(), " heads (the first: head ", first,
                                     " of the flattened leading dimensions)"),
        ": ",
        row_sums
            ? "the approximation's row sums, which normalize the output, vanish or are not finite there, "
              "as when the core's entries underflow or overflow (logits far beyond exp's range; an "
              "overflowed core has pinv_status 'non-finite'); stabilization='clamped' avoids both"
            : "the logits or the kernel's row sums overflow or vanish in the arrays' dtype there (a scale "
              "or kernel parameter far beyond the tokens' range)");
    if (PyErr_WarnEx(PyExc_RuntimeWarning, message.c_str(), 1) < 0) throw nb::python_error();
  }

 private:
  const char* function_;
  Method method_;
  std::vector<Index> rows_;
};

template <class T>
nb::object attention_output(const Array& q, const Array& k, const Array& v,
                            const KeywordArguments& arguments) {
  const AttentionInputs<T> inputs(q, k, v);
  const ApproximationOptions options = arguments.parameters.options(inputs.q.cols());
  const Index count = inputs.q.count();
  const Index heads = inputs.q.leading().empty() ? 1 : inputs.q.leading().back();
  // The batched row-major path computes in the native formats; an emulated storage goes head by head.
  const bool in_place = inputs.row_major && !is_emulated(options.storage);
  UndefinedRows undefined("attention", arguments.parameters.method, count);
  const auto head = [&](Index index) {
    const MatrixArgument<T> Q = inputs.q.matrix(index), K = inputs.k.matrix(index),
                            V = inputs.v.matrix(index);
    try {
      Matrix<T> output =
          approximate_attention<T>(arguments.parameters.method, Q.ref(), K.ref(), V.ref(), options).output;
      undefined.count(index, output);
      return output;
    } catch (const std::invalid_argument& error) {
      if (count == 1) throw;  // one head: the message needs no head
      throw std::invalid_argument(batch_head_error(index, heads, error.what()));
    }
  };
  // Every head into the row-major batch `out`: in place from row-major inputs, else through head().
  const auto into = [&](const BatchView<T>& out) {
    computed([&] {
      if (in_place) {
        inputs.run_row_major(arguments.parameters.method, out, options);
        for_each_matrix(count, [&](Index index) { undefined.count(index, out.head(index)); });
      } else {
        options.validate_in<T>(arguments.parameters.method, inputs.q.rows(), inputs.q.cols());
        for_each_matrix(count, [&](Index index) { out.head(index) = head(index); });
      }
    });
    undefined.warn(inputs.q.rows());
  };
  if (arguments.out.is_valid()) {
    std::vector<Index> shape = inputs.q.leading();
    shape.insert(shape.end(), {inputs.q.rows(), inputs.v.cols()});
    into(output_batch<T>(arguments.out, shape, {{&q, "q"}, {&k, "k"}, {&v, "v"}}));
    return nb::borrow(arguments.out);
  }
  if (in_place) {
    MatrixBatch<T> out(inputs.q.leading(), inputs.q.rows(), inputs.v.cols(), true);
    into(out.view());
    return out.release_to_numpy();
  }
  if (inputs.q.leading().empty()) {
    nb::object out = to_numpy(computed([&] { return head(0); }));
    undefined.warn(inputs.q.rows());
    return out;
  }
  MatrixBatch<T> out(inputs.q.leading(), inputs.q.rows(), inputs.v.cols());
  computed([&] {
    options.validate_in<T>(arguments.parameters.method, inputs.q.rows(), inputs.q.cols());
    for_each_matrix(count, [&](Index index) { out.set(index, head(index)); });
  });
  undefined.warn(inputs.q.rows());
  return out.release_to_numpy();
}

/// The best wall time of `repeat` calls of the method on one head, timed here as attention() computes it
/// (C-contiguous inputs in place, others converted once).
template <class T>
double best_seconds(const Array& q, const Array& k, const Array& v, const KeywordArguments& arguments) {
  require(arguments.repeat >= 1, "time_attention: repeat = ", arguments.repeat, " must be >= 1");
  const AttentionInputs<T> inputs(q, k, v);
  inputs.require_one_head("time_attention");
  const MatrixArgument<T> Q = inputs.q.matrix(0), K = inputs.k.matrix(0), V = inputs.v.matrix(0);
  const ApproximationOptions options = arguments.parameters.options(Q.cols());
  RowMajorMatrix<T> row_major_output(Q.rows(), V.cols());
  const BatchView<T> out{row_major_output.data(), 1, 1, Q.rows(), V.cols()};
  double best = std::numeric_limits<double>::infinity();
  for (int call = 0; call < arguments.repeat; ++call) {
    const auto start = std::chrono::steady_clock::now();
    if (inputs.row_major)
      inputs.run_row_major(arguments.parameters.method, out, options);
    else
      approximate_attention<T>(arguments.parameters.method, Q.ref(), K.ref(), V.ref(), options);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

/// Every keyword evaluate() accepts: the method's, and how its errors are computed.
constexpr unsigned evaluate_keywords =
    method_keywords | lanczos_keywords | tiling_keywords | evaluation_keywords;

/// The /sweep record of one method on one head (HeadEvaluator, point_record).
template <class T>
std::vector<RecordCell> evaluate_point(const Array& q, const Array& k, const std::optional<Array>& v,
                                       const std::optional<Array>& bias, const KeywordArguments& arguments) {
  const MatrixArgument<T> Q(q, "q"), K(k, "k");
  Head<T> head;
  head.q = Q.ref();
  head.k = K.ref();
  if (v) head.v = MatrixArgument<T>(*v, "v").ref();
  if (bias) head.bias = MatrixArgument<T>(*bias, "bias").ref();
  head.window = arguments.parameters.window;
  head.prefix_tokens = arguments.parameters.prefix_tokens;
  PointDescription point;
  point.n = head.q.rows();
  point.d = head.q.cols();
  point.dv = head.v.cols();
  point.method = arguments.parameters.method;
  point.options = arguments.parameters.options(point.d);
  point.precision = is_emulated(point.options.storage) ? to_string(point.options.storage)
                                                       : std::string(sizeof(T) == 4 ? "float" : "double");
  point.seed = arguments.parameters.seed;
  HeadEvaluator<T> evaluator(std::move(head), evaluation_options(arguments), "evaluate");
  return point_record(point, evaluator.evaluate(point.method, point.options));
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
            return self.visit([](const auto& a) { return to_string(a.method); });
          },
          "The method, e.g. 'pnp-nystra'.")
      .def_prop_ro(
          "output",
          [](const ApproximationAny& self) {
            const nb::object owner = nb::find(self);
            return self.visit([&](const auto& a) { return view_of(a.output, owner); });
          },
          nb::sig(returns_array("output")), "Ô (N×dv).")
      .def_prop_ro(
          "pinv_status",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) -> std::optional<std::string> {
              if (!a.pinv_status) return std::nullopt;
              return to_string(*a.pinv_status);
            });
          },
          "Status of the method's pseudoinverse (None for methods without one).")
      .def_prop_ro(
          "pinv_residual",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) { return a.pinv_residual; });
          },
          "‖I − AZ‖_F of the method's pseudoinverse (NaN without one).")
      .def_prop_ro(
          "factors",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) -> std::optional<FactorsAny> {
              if (!a.kernel_factors) return std::nullopt;
              return FactorsAny{*a.kernel_factors};
            });
          },
          "pnp-nystra and symmetric-nystrom: the Nyström factors of Ĝ ≈ G (a copy); None otherwise.")
      .def_prop_ro(
          "implied_matrix",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) { return implied_matrix(a.method); });
          },
          "Which N×N matrix Ŝ the method implies, e.g. 'S_hat = F~ pinv(A~) B~ (Nystromformer eq. 15; …)'.")
      .def(
          "implied_attention",
          [](const ApproximationAny& self) {
            return self.visit([](const auto& a) -> nb::object {
              using T = typename std::decay_t<decltype(a.output)>::Scalar;
              std::optional<Matrix<T>> dense = computed([&]() -> std::optional<Matrix<T>> {
                const auto implied = a.attention();
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
          return describe("Approximation(method='", to_string(a.method), "', N=", a.output.rows(),
                          ", dv=", a.output.cols(), ")");
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

  m.def(
      "attention",
      [](const Array& q, const Array& k, const Array& v, const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("attention", method_keywords | output_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}, {&v, "v"}}), [&](auto scalar) {
          return attention_output<decltype(scalar)>(q, k, v, arguments);
        });
      },
      "q"_a, "k"_a, "v"_a, "kwargs"_a,
      nb::sig(signature("attention", array_parameters({"q", "k", "v"}), method_keywords | output_keywords,
                        "numpy.typing.NDArray")),
      documentation(
          "The attention output Ô of a method for q, k ([..., N, d]) and v ([..., N, dv]): exact attention "
          "O = (G V) ⊘ (G 1_N), or an approximation (pnp-nystra: PnP-Nystra Algorithm 1 on Ĝ = G_L G_A⁺ "
          "G_U). "
          "Leading dimensions (batch, heads) are looped over in C++, spread over the threads when there are "
          "at "
          "least as many heads as threads. C-contiguous q, k, v (numpy's and torch's default) are read in "
          "place and give a C-contiguous output; other layouts are converted to column-major and give "
          "column-major N×dv blocks. Returns an array [..., N, dv] of q's dtype, or `out` filled. Inference "
          "only: no gradients. Where PnP-Nystra's or symmetric Nyström's row sums Ĝ1 vanish or are not "
          "finite "
          "(a core that under- or overflowed: logits far beyond exp's range), or any method's logits leave "
          "the dtype's range (a scale far beyond the tokens'), those rows are NaN and a "
          "RuntimeWarning counts them. An error in one head of a batch names it: head i (b, h) of the "
          "leading dimensions [..., H], h the index in the last of them and b the flat index over the "
          "others.",
          method_keywords | output_keywords));

  m.def(
      "approximate",
      [](const Array& q, const Array& k, const Array& v, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("approximate", method_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}, {&v, "v"}}), [&](auto scalar) {
          using T = decltype(scalar);
          UndefinedRows undefined("approximate", arguments.parameters.method, 1);
          ApproximationAny approximation = computed([&] {
            const AttentionInputs<T> inputs(q, k, v);
            inputs.require_one_head("approximate");
            const MatrixArgument<T> Q = inputs.q.matrix(0), K = inputs.k.matrix(0), V = inputs.v.matrix(0);
            const ApproximationOptions options = arguments.parameters.options(Q.cols());
            Approximation<T> result =
                approximate_attention<T>(arguments.parameters.method, Q.ref(), K.ref(), V.ref(), options);
            undefined.count(0, result.output);
            return ApproximationAny{std::move(result)};
          });
          undefined.warn(approximation.as<T>("the approximation").output.rows());
          return approximation;
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
      "evaluate",
      [](const Array& q, const Array& k, const std::optional<Array>& v, const std::optional<Array>& bias,
         const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("evaluate", evaluate_keywords, kwargs);
        const Precision precision = common_precision({{&q, "q"}, {&k, "k"}});
        if (v) common_precision({{&q, "q"}, {&*v, "v"}});
        if (bias) common_precision({{&q, "q"}, {&*bias, "bias"}});
        const std::vector<RecordCell> record = with_scalar(precision, [&](auto scalar) {
          return computed([&] { return evaluate_point<decltype(scalar)>(q, k, v, bias, arguments); });
        });
        nb::dict columns;
        for (const auto& cell : record)
          std::visit([&](const auto& value) { columns[cell.column.name.c_str()] = value; }, cell.value);
        return columns;
      },
      "q"_a, "k"_a, "v"_a = nb::none(), "bias"_a = nb::none(), "kwargs"_a,
      nb::sig(
          signature("evaluate",
                    array_parameters({"q", "k"}) +
                        ", v: numpy.typing.ArrayLike | None = None, bias: numpy.typing.ArrayLike | None = "
                        "None",
                    evaluate_keywords, "dict[str, str | int | float]")),
      documentation(
          "One point of a sweep on one head (q, k: N×d, v: N×dv or None): every column `nystrom sweep` "
          "writes "
          "to /sweep (docs/formats.md §2) for the method and its options, computed by the same evaluator "
          "(HeadEvaluator) and named alike: spectral and Frobenius errors of G − Ĝ (pnp-nystra, "
          "symmetric-nystrom) or S − Ŝ (the softmax methods), output errors (with v), the Lemma 2.1 terms "
          "and Theorem bounds (pnp-nystra), pseudoinverse diagnostics and timings. The parameter columns "
          "layer, batch and head read '', 0 and 0. window and prefix_tokens place the head on its token "
          "grid as a dump's attributes do. bias (N×N, the dtype of q, or None) is the model's additive "
          "score term, a dump's bias plus mask (`--reference model`): the exact side G, S, O and the bound "
          "terms are then of exp(φ(q, k) + bias − c) (docs/mathematics.md §7.1), the approximations of q and "
          "k alone.",
          evaluate_keywords));

  m.def(
      "output_errors",
      [](const Array& exact, const Array& approximate) {
        return with_scalar(
            common_precision({{&exact, "exact"}, {&approximate, "approximate"}}), [&](auto scalar) {
              using T = decltype(scalar);
              const MatrixArgument<T> O(exact, "exact"), A(approximate, "approximate");
              require(O.rows() == A.rows() && O.cols() == A.cols(), "output_errors: approximate is ",
                      A.rows(), "x", A.cols(), ", expected ", O.rows(), "x", O.cols());
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
