#pragma once
/// @file common.hpp
/// What every binding file shares: the guard a computation runs under (GIL released, the module's thread
/// count), the float/double result wrappers, and the registration function of each file.

#include <variant>

#include "arrays.hpp"
#include "nystrom/approximation.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/pinv.hpp"

namespace nystrom::python {

/// The OpenMP thread count of the module's computations (set_threads); applied to whichever Python thread
/// calls.
int configured_threads();
/// Sets it (≥ 1); also keeps OpenBLAS single-threaded (nystrom::set_threads).
void configure_threads(int threads);

/// While alive: the GIL is released, and the calling thread computes on configured_threads() OpenMP threads
/// (OpenMP keeps a thread count per thread, so a Python thread started later would otherwise use the
/// default). Used as nb::call_guard<Compute>, or as a scope around the library call where arguments need the
/// GIL first.
class Compute {
 public:
  Compute();

 private:
  nb::gil_scoped_release release_;
};

/// A library result in float or double, one Python class for both (its arrays carry the dtype).
template <template <class> class Result>
struct Typed {
  std::variant<Result<float>, Result<double>> value;

  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), value);
  }
  Precision precision() const { return value.index() == 0 ? Precision::float32 : Precision::float64; }
  /// The result in T; throws naming `what` when it holds the other precision.
  template <class T>
  const Result<T>& as(const char* what) const {
    const auto* result = std::get_if<Result<T>>(&value);
    require(result != nullptr, what, " are ", precision_name(precision()), " but the arrays are ",
            precision_name(sizeof(T) == 4 ? Precision::float32 : Precision::float64));
    return *result;
  }
};

using PinvAny = Typed<PinvResult>;
using LandmarksAny = Typed<Landmarks>;
using FactorsAny = Typed<NystromFactors>;
using ApproximationAny = Typed<Approximation>;

/// The result of `f()`, computed under Compute (the GIL released); it must not create Python objects.
template <class F>
auto computed(F&& f) {
  Compute compute;
  return f();
}

/// Throws std::invalid_argument, naming `where`, the largest exponent and T's limit, when the kernel block
/// `g` = κ(X, Y) in T has an entry that overflowed (the inputs being finite): the exponential kernel's logits
/// beyond log(max T), 88.7 in float32. The check reads g once; the logits are computed only to name them.
template <class T>
void require_kernel_in_range(const ConstMatrixRef<T>& g, const ConstMatrixRef<T>& X,
                             const ConstMatrixRef<T>& Y, const Kernel& kernel, const char* where) {
  if (all_finite(g)) return;
  throw std::invalid_argument(
      describe(where, ": ", kernel, " overflows ", sizeof(T) == 4 ? "float32" : "float64",
               ": its largest exponent ", largest_exponent<T>(kernel, X, Y),
               " exceeds log(max) = ", std::log(double(std::numeric_limits<T>::max())),
               sizeof(T) == 4 ? "; float64 arrays hold entries up to e^709" : ""));
}

/// Registration of each binding file's functions and classes.
void bind_kernels(nb::module_& m);    // kernels, landmarks, pseudoinverses, Nyström factors
void bind_attention(nb::module_& m);  // attention outputs, approximations and their errors
void bind_spectral(nb::module_& m);   // spectral norms, singular values, Lemma 2.1 terms and bounds

}  // namespace nystrom::python
