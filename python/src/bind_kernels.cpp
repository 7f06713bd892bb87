// Kernels, landmarks, pseudoinverses and the generalized Nyström factors (docs/mathematics.md §1, §2, §4,
// §5).
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <optional>

#include "arguments.hpp"
#include "common.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/pinv.hpp"

namespace nystrom::python {

using namespace nb::literals;

namespace {

/// A property returning a read-only view of the member `get(result)`, kept alive by the Python object.
template <template <class> class Result, class Get>
auto view_property(Get get) {
  return [get](const Typed<Result>& self) {
    const nb::object owner = nb::find(self);
    return self.visit([&](const auto& result) { return view_of(get(result), owner); });
  };
}

}  // namespace

void bind_kernels(nb::module_& m) {
  nb::class_<PinvAny>(
      m, "PinvResult",
      "Z ≈ A⁺ with its diagnostics (docs/mathematics.md §4): status, α, iterations run and the "
      "residual ‖I − MZ_k‖_F of every iteration.")
      .def_prop_ro("z", view_property<PinvResult>([](const auto& r) -> const auto& { return r.z; }),
                   nb::sig(returns_array("z")), "Z ≈ A⁺ (m×m).")
      .def_prop_ro(
          "status",
          [](const PinvAny& self) { return self.visit([](const auto& r) { return to_string(r.status); }); },
          "'converged', 'completed', 'diverged' or 'non-finite' (a numerical outcome, never an error).")
      .def_prop_ro(
          "alpha", [](const PinvAny& self) { return self.visit([](const auto& r) { return r.alpha; }); },
          "α of the start Z₀ = αAᵀ (0 for exact).")
      .def_prop_ro(
          "iterations",
          [](const PinvAny& self) { return self.visit([](const auto& r) { return r.iterations; }); },
          "Iterations run.")
      .def_prop_ro(
          "residuals",
          [](const PinvAny& self) {
            return self.visit([](const auto& r) {
              return Eigen::Map<const Vector<double>>(r.residuals.data(), Index(r.residuals.size())).eval();
            });
          },
          "‖I − MZ_k‖_F for k = 0 (the start) .. iterations, float64; one entry for exact. M is the matrix "
          "inverted: A, A + εI (shift) or AᵀA + εI (tikhonov).")
      .def_prop_ro(
          "residual",
          [](const PinvAny& self) { return self.visit([](const auto& r) { return r.residual(); }); },
          "The last residual.")
      .def_prop_ro(
          "rank", [](const PinvAny& self) { return self.visit([](const auto& r) { return r.rank; }); },
          "exact: the number of singular values kept.")
      .def_prop_ro(
          "seconds", [](const PinvAny& self) { return self.visit([](const auto& r) { return r.seconds; }); },
          "Wall time of the computation.")
      .def("__repr__", [](const PinvAny& self) {
        return self.visit([](const auto& r) {
          return describe("PinvResult(status='", to_string(r.status), "', iterations=", r.iterations,
                          ", residual=", r.residual(), ", m=", r.z.rows(), ")");
        });
      });

  nb::class_<LandmarksAny>(m, "Landmarks",
                           "Landmarks Q̄, K̄ (m×d) and, for selection strategies, the rows of Q and K they are "
                           "(docs/mathematics.md §5).")
      .def_prop_ro("q", view_property<Landmarks>([](const auto& r) -> const auto& { return r.q; }),
                   nb::sig(returns_array("q")), "Q̄ (m×d).")
      .def_prop_ro("k", view_property<Landmarks>([](const auto& r) -> const auto& { return r.k; }),
                   nb::sig(returns_array("k")), "K̄ (m×d).")
      .def_prop_ro(
          "q_indices",
          [](const LandmarksAny& self) {
            return self.visit([](const auto& r) { return index_array(r.q_indices); });
          },
          nb::sig(returns_array("q_indices")), "Rows of Q behind Q̄ (int64; empty for pooling strategies).")
      .def_prop_ro(
          "k_indices",
          [](const LandmarksAny& self) {
            return self.visit([](const auto& r) { return index_array(r.k_indices); });
          },
          nb::sig(returns_array("k_indices")), "Rows of K behind K̄ (int64; empty for pooling strategies).")
      .def("__repr__", [](const LandmarksAny& self) {
        return self.visit([](const auto& r) {
          return describe("Landmarks(m=", r.q.rows(), ", d=", r.q.cols(), ", selected=", !r.q_indices.empty(),
                          ")");
        });
      });

  nb::class_<FactorsAny>(
      m, "NystromFactors",
      "The factors of Ĝ = diag(exp(left_log_scale)) · left · Z · upper with Z = pinv.z ≈ core⁺ "
      "(docs/mathematics.md §2): left = G_L (N×m), core = G_A (m×m), upper = G_U (m×N), row-max scaled by "
      "PnP-Nystra "
      "eq. (8) when stabilization is row-max (then upper_log_scale holds log diag(M_U)). Nothing N×N is "
      "stored.")
      .def_prop_ro("left", view_property<NystromFactors>([](const auto& f) -> const auto& { return f.left; }),
                   nb::sig(returns_array("left")), "G_L or G_Lⁿ, N×m.")
      .def_prop_ro("core", view_property<NystromFactors>([](const auto& f) -> const auto& { return f.core; }),
                   nb::sig(returns_array("core")), "G_A or G_Aⁿ, m×m.")
      .def_prop_ro("upper",
                   view_property<NystromFactors>([](const auto& f) -> const auto& { return f.upper; }),
                   nb::sig(returns_array("upper")), "G_U or G_Uⁿ, m×N (Cᵀ for symmetric-nystrom).")
      .def_prop_ro("z", view_property<NystromFactors>([](const auto& f) -> const auto& { return f.pinv.z; }),
                   nb::sig(returns_array("z")), "Z ≈ core⁺, m×m.")
      .def_prop_ro(
          "left_log_scale",
          view_property<NystromFactors>([](const auto& f) -> const auto& { return f.left_log_scale; }),
          nb::sig(returns_array("left_log_scale")), "log diag(M_L), N entries (zeros unless row-max).")
      .def_prop_ro(
          "upper_log_scale",
          view_property<NystromFactors>([](const auto& f) -> const auto& { return f.upper_log_scale; }),
          nb::sig(returns_array("upper_log_scale")), "log diag(M_U), m entries (zeros unless row-max).")
      .def_prop_ro(
          "pinv",
          [](const FactorsAny& self) { return self.visit([](const auto& f) { return PinvAny{f.pinv}; }); },
          "The pseudoinverse of the core with its diagnostics (a copy).")
      .def_prop_ro(
          "landmarks",
          [](const FactorsAny& self) {
            return self.visit([](const auto& f) { return LandmarksAny{f.landmarks}; });
          },
          "The landmarks Q̄, K̄ (a copy).")
      .def_prop_ro(
          "kernel",
          [](const FactorsAny& self) {
            return self.visit([](const auto& f) { return f.options.kernel.label(); });
          },
          "The kernel, e.g. 'exp(s=0.125)'.")
      .def_prop_ro(
          "stabilization",
          [](const FactorsAny& self) {
            return self.visit([](const auto& f) { return to_string(f.options.stabilization); });
          },
          "'none', 'row-max' or 'clamped'.")
      .def_prop_ro(
          "shape",
          [](const FactorsAny& self) {
            return self.visit([](const auto& f) { return std::make_pair(f.rows(), f.cols()); });
          },
          "(N, N), the shape of Ĝ.")
      .def(
          "dense",
          [](const FactorsAny& self) {
            return self.visit([](const auto& f) {
              auto out = computed([&] { return f.dense(); });
              return to_numpy(std::move(out));
            });
          },
          nb::sig(returns_array("dense")), "Ĝ as a dense N×N array (small N and checks only; O(N²m)).")
      .def(
          "apply",
          [](const FactorsAny& self, const Array& x) {
            require(precision_of(x, "x") == self.precision(), "apply: x is ",
                    precision_name(precision_of(x, "x")), " but the factors are ",
                    precision_name(self.precision()));
            return self.visit([&](const auto& f) {
              using T = typename std::decay_t<decltype(f.left)>::Scalar;
              auto out = computed([&] {
                require(x.ndim() == 1 || x.ndim() == 2, "apply: x has ", x.ndim(),
                        " dimensions; expected a vector or a matrix");
                const MatrixArgument<T> columns =
                    x.ndim() == 1 ? MatrixArgument<T>(static_cast<const T*>(x.data()), Index(x.shape(0)), 1,
                                                      x.stride(0), 0)
                                  : MatrixArgument<T>(x, "x");
                require(columns.rows() == f.cols(), "apply: x has ", columns.rows(),
                        " rows, expected N = ", f.cols());
                const auto in = columns.ref();
                require_finite(in, "apply: x");
                Matrix<T> y(f.rows(), in.cols());
                for (Index c = 0; c < in.cols(); ++c) f.apply(in.col(c).data(), y.col(c).data());
                return y;
              });
              if (x.ndim() == 1) return to_numpy(Vector<T>(out.col(0)));
              return to_numpy(std::move(out));
            });
          },
          "x"_a, nb::sig("def apply(self, x: numpy.typing.ArrayLike) -> numpy.typing.NDArray"),
          "Ĝx for a vector x (N) or ĜX for a matrix X (N×c), in O(Nm) per column, never forming Ĝ.")
      .def(
          "attention",
          [](const FactorsAny& self, const Array& v) {
            return self.visit([&](const auto& f) {
              using T = typename std::decay_t<decltype(f.left)>::Scalar;
              auto out = computed([&] {
                const MatrixArgument<T> values(v, "v");
                return nystrom_attention<T>(f, values.ref());
              });
              return to_numpy(std::move(out));
            });
          },
          "v"_a, nb::sig("def attention(self, v: numpy.typing.ArrayLike) -> numpy.typing.NDArray"),
          "PnP-Nystra Algorithm 1 on these factors: Ô = (Ĝ V) ⊘ (Ĝ 1_N) for V (N×dv), O(Nm(d + dv)).")
      .def("__repr__", [](const FactorsAny& self) {
        return self.visit([](const auto& f) {
          return describe("NystromFactors(N=", f.rows(), ", m=", f.core.rows(), ", kernel='",
                          f.options.kernel.label(), "', stabilization='", to_string(f.options.stabilization),
                          "', pinv='", to_string(f.options.pinv.method), "')");
        });
      });

  m.def(
      "kernel_matrix",
      [](const Array& x, const Array& y, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("kernel_matrix", kernel_keywords, kwargs);
        return with_scalar(common_precision({{&x, "x"}, {&y, "y"}}), [&](auto scalar) {
          using T = decltype(scalar);
          std::optional<MatrixBatch<T>> out;  // huge pages for a large G (MatrixBatch)
          computed([&] {
            const MatrixArgument<T> X(x, "x"), Y(y, "y");
            require_finite(X.ref(), "kernel_matrix: x");
            require_finite(Y.ref(), "kernel_matrix: y");
            const Kernel kernel = arguments.parameters.kernel_for(X.cols());
            out.emplace(std::vector<Index>{}, X.rows(), Y.rows());
            kernel.evaluate<T>(X.ref(), Y.ref(), out->matrix(0));
            require_kernel_in_range<T>(out->matrix(0), X.ref(), Y.ref(), kernel, "kernel_matrix");
          });
          return out->release_to_numpy();
        });
      },
      "x"_a, "y"_a, "kwargs"_a,
      nb::sig(
          signature("kernel_matrix", array_parameters({"x", "y"}), kernel_keywords, "numpy.typing.NDArray")),
      documentation(
          "The kernel block κ(X, Y) (n×p) for token rows X (n×d) and Y (p×d): G = kernel_matrix(q, k), "
          "or the blocks G_L = kernel_matrix(q, k̄), G_A, G_U of the Nyström factors. O(n·p·d).",
          kernel_keywords));

  m.def(
      "attention_matrix",
      [](const Array& q, const Array& k, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("attention_matrix", kernel_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          std::optional<MatrixBatch<T>> out;  // huge pages for a large S (MatrixBatch)
          computed([&] {
            const MatrixArgument<T> Q(q, "q"), K(k, "k");
            require_finite(Q.ref(), "attention_matrix: q");
            require_finite(K.ref(), "attention_matrix: k");
            const Kernel kernel = arguments.parameters.kernel_for(Q.cols());
            out.emplace(std::vector<Index>{}, Q.rows(), K.rows());
            attention_matrix<T>(Q.ref(), K.ref(), kernel, out->matrix(0));
          });
          return out->release_to_numpy();
        });
      },
      "q"_a, "k"_a, "kwargs"_a,
      nb::sig(signature("attention_matrix", array_parameters({"q", "k"}), kernel_keywords,
                        "numpy.typing.NDArray")),
      documentation(
          "The dense attention matrix S = D⁻¹G, D = diag(G 1_N), with a per-row max shift (small N only).",
          kernel_keywords));

  m.def(
      "select_landmarks",
      [](const Array& q, const Array& k, const nb::kwargs& kwargs) {
        const KeywordArguments arguments =
            parse_arguments("select_landmarks", landmark_keywords | kernel_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          Compute compute;
          const MatrixArgument<T> Q(q, "q"), K(k, "k");
          return LandmarksAny{select_landmarks<T>(
              Q.ref(), K.ref(), arguments.parameters.landmark_options(LandmarkStrategy::segment_means),
              arguments.parameters.kernel_for(Q.cols()))};
        });
      },
      "q"_a, "k"_a, "kwargs"_a,
      nb::sig(signature("select_landmarks", array_parameters({"q", "k"}), landmark_keywords | kernel_keywords,
                        "Landmarks")),
      documentation(
          "Landmarks of Q and K (N×d each) by a strategy of docs/mathematics.md §5: pooling strategies "
          "return averages, selection strategies rows of Q and K and their indices. Deterministic for a "
          "given seed.",
          landmark_keywords | kernel_keywords));

  m.def(
      "pseudoinverse",
      [](const Array& a, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("pseudoinverse", pinv_keywords, kwargs);
        return with_scalar(precision_of(a, "a"), [&](auto scalar) {
          using T = decltype(scalar);
          Compute compute;
          const MatrixArgument<T> A(a, "a");
          return PinvAny{pseudoinverse<T>(A.ref(), arguments.parameters.pinv_options(PinvOptions{}))};
        });
      },
      "a"_a, "kwargs"_a,
      nb::sig(signature("pseudoinverse", array_parameters({"a"}), pinv_keywords, "PinvResult")),
      documentation("Z ≈ A⁺ of a square matrix by the exact SVD (default), Razavi's third-order iteration "
                    "(Nyströmformer, PnP-Nystra) or Newton–Schulz (LaplacianFormer) from Z₀ = αAᵀ "
                    "(docs/mathematics.md §4). Divergence is a status, not an error.",
                    pinv_keywords));

  m.def(
      "safe_alpha",
      [](const Array& a) {
        return with_scalar(precision_of(a, "a"), [&](auto scalar) {
          using T = decltype(scalar);
          const MatrixArgument<T> A(a, "a");
          return safe_alpha<T>(A.ref());
        });
      },
      "a"_a, nb::call_guard<Compute>(), nb::sig("def safe_alpha(a: numpy.typing.ArrayLike) -> float"),
      "The safe per-matrix start α = 1/(‖A‖₁‖A‖_∞) of the iterations (ασ₁² ≤ 1).");

  m.def(
      "nystrom_factors",
      [](const Array& q, const Array& k, const nb::kwargs& kwargs) {
        const KeywordArguments arguments = parse_arguments("nystrom_factors", nystrom_keywords, kwargs);
        return with_scalar(common_precision({{&q, "q"}, {&k, "k"}}), [&](auto scalar) {
          using T = decltype(scalar);
          Compute compute;
          const MatrixArgument<T> Q(q, "q"), K(k, "k");
          const NystromOptions options = arguments.parameters.nystrom_options(Q.cols());
          return FactorsAny{arguments.parameters.method == Method::symmetric_nystrom
                                ? symmetric_nystrom<T>(Q.ref(), K.ref(), options)
                                : generalized_nystrom<T>(Q.ref(), K.ref(), options)};
        });
      },
      "q"_a, "k"_a, "kwargs"_a,
      nb::sig(signature("nystrom_factors", array_parameters({"q", "k"}), nystrom_keywords, "NystromFactors")),
      documentation("The generalized Nyström factors of G = κ(Q, K) for Q, K (N×d) (PnP-Nystra; "
                    "docs/mathematics.md §2), or with method='symmetric-nystrom' the symmetric C W⁺ Cᵀ "
                    "(LaplacianFormer Alg. 1). O(Nmd + m³); only the N×m, m×m and m×N blocks are formed.",
                    nystrom_keywords));
}

}  // namespace nystrom::python
