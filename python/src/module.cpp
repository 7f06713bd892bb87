// The extension module nystrom._nystrom: the library's functions on numpy arrays and torch tensors (the
// package python/nystrom re-exports them). Every computation runs with the GIL released on the module's
// OpenMP thread count; std::invalid_argument from the library arrives in Python as ValueError with the same
// message, std::bad_alloc as MemoryError saying what it means.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <atomic>
#include <exception>
#include <new>

#include "arguments.hpp"
#include "common.hpp"
#include "nystrom/threads.hpp"

namespace nystrom::python {

namespace {
std::atomic<int> module_threads{1};
}  // namespace

int configured_threads() {
  return module_threads.load();
}

void configure_threads(int threads) {
  nystrom::set_threads(threads);
  module_threads = threads;
}

Compute::Compute() {
  const int threads = configured_threads();
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
}

}  // namespace nystrom::python

NB_MODULE(_nystrom, m) {
  using namespace nystrom::python;
  namespace nb = nanobind;
  using namespace nb::literals;

  m.doc() =
      "nystrom: low-rank approximations of softmax attention (PnP-Nystra's generalized Nyström, "
      "Nyströmformer, "
      "CUR, symmetric Nyström, Performer, Linformer), their spectral errors and the Lemma 2.1 bounds, on "
      "numpy "
      "arrays and torch CPU tensors (float32 or float64; results keep the inputs' dtype).";

  // Sizes that are valid but too large (features=10**12) fail to allocate: nanobind's MemoryError would say
  // only "std::bad_alloc".
  nb::register_exception_translator([](const std::exception_ptr& error, void*) {
    try {
      std::rethrow_exception(error);
    } catch (const std::bad_alloc&) {
      PyErr_SetString(PyExc_MemoryError,
                      "out of memory: the sizes asked for need more memory than this machine can allocate");
    }
  });

  // OpenMP's default count (OMP_NUM_THREADS, else the cores), with OpenBLAS single-threaded inside the
  // library's own parallel regions.
  configure_threads(omp_get_max_threads());

  m.def(
      "set_threads",
      [](nb::handle threads) { configure_threads(integer_argument<int>("set_threads", "threads", threads)); },
      "threads"_a, nb::sig("def set_threads(threads: int) -> None"),
      "Sets the number of OpenMP threads the library's computations use (≥ 1), from any Python thread. The "
      "default is OpenMP's (OMP_NUM_THREADS, else the number of cores).");
  m.def("threads", &configured_threads, "The number of OpenMP threads the library's computations use.");
  m.def("blas_core", &nystrom::blas_core,
        "The OpenBLAS kernel set in use (e.g. 'SkylakeX', 'Haswell'); OPENBLAS_CORETYPE chooses it when the "
        "module is first imported.");

  m.attr("METHODS") = nb::tuple(nb::cast(method_names()));
  m.attr("KERNELS") = nb::tuple(nb::cast(kernel_names()));
  m.attr("STRATEGIES") = nb::tuple(nb::cast(strategy_names()));
  m.attr("PINV_METHODS") = nb::tuple(nb::cast(pinv_names()));
  m.attr("STABILIZATIONS") = nb::tuple(nb::cast(stabilization_names()));
  // The library's parameter vocabulary (parameters.hpp): (name, is a /sweep column) for every parameter; the
  // keyword of `lambda` is lambda_.
  nb::list parameters;
  for (const nystrom::ParameterName& parameter : nystrom::parameter_names())
    parameters.append(nb::make_tuple(std::string(parameter.name), parameter.column));
  m.attr("PARAMETERS") = nb::tuple(parameters);

  bind_kernels(m);
  bind_attention(m);
  bind_spectral(m);
}
