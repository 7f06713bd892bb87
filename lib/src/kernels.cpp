#include "nystrom/kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <ostream>
#include <sstream>
#include <type_traits>

#include "nystrom/detail/enum_names.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<KernelType>, 3> kernel_names{{{KernelType::exponential, "exp"},
                                                            {KernelType::laplacian, "laplacian"},
                                                            {KernelType::gaussian, "gaussian"}}};
}  // namespace

std::string to_string(KernelType type) {
  return name_of(type, kernel_names);
}

KernelType kernel_type_from_string(const std::string& name) {
  return parse(name, kernel_names, "kernel");
}

namespace {
/// The kernel parameter's name: s (exponential), lambda (Laplacian), h (Gaussian bandwidth).
const char* parameter_name(KernelType type) {
  return type == KernelType::exponential ? "s" : type == KernelType::laplacian ? "lambda" : "h";
}

/// "kernel laplacian: lambda = 0" in a message (written only when a message is built).
struct NamedParameter {
  KernelType type;
  double param;
};

std::ostream& operator<<(std::ostream& out, const NamedParameter& named) {
  return out << "kernel " << to_string(named.type) << ": " << parameter_name(named.type) << " = "
             << named.param;
}
}  // namespace

void Kernel::validate() const {
  const NamedParameter named{type, param};
  require(std::isfinite(param), named, " is not finite");
  if (type != KernelType::exponential) require(param > 0, named, " must be > 0");
  require(std::isfinite(log_shift), "kernel ", to_string(type), ": log_shift = ", log_shift,
          " is not finite");
}

void Kernel::require_block(Index n, Index p, Index d, Index e, Index out_rows, Index out_cols) const {
  validate();
  require(d == e, "kernel: token dimensions differ, d = ", d, " and ", e);
  require(out_rows == n && out_cols == p, "kernel: output block is ", out_rows, "x", out_cols, ", expected ",
          n, "x", p);
}

std::string Kernel::label() const {
  return describe(*this);
}

std::ostream& operator<<(std::ostream& out, const Kernel& kernel) {
  out << to_string(kernel.type) << "(" << parameter_name(kernel.type) << "=" << kernel.param;
  if (kernel.log_shift != 0) out << ", log_shift=" << kernel.log_shift;
  return out << ")";
}

template <class T>
double largest_exponent(const Kernel& kernel, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y) {
  kernel.require_block(X.rows(), Y.rows(), X.cols(), Y.cols(), X.rows(), Y.rows());
  constexpr Index panel = 256;
  const Index n = X.rows();
  const double work = double(n) * double(Y.rows()) * double(std::max<Index>(X.cols(), 1));
  const int workers = work < detail::parallel_work ? 1 : omp_get_max_threads();
  double largest = -std::numeric_limits<double>::infinity();
  const SingleThreadedBlas single_threaded_blas;
#pragma omp parallel num_threads(workers) reduction(max : largest)
  {
    Matrix<T> block;
#pragma omp for schedule(static)
    for (Index first = 0; first < n; first += panel) {
      const Index count = std::min(panel, n - first);
      block.resize(count, Y.rows());
      kernel.exponent<T>(X.middleRows(first, count), Y, block);
      largest = std::max(largest, double(block.maxCoeff()));
    }
  }
  return largest;
}

template <class T>
double log_shift_for(const Kernel& kernel, double largest) {
  const bool is_float = std::is_same_v<T, float>;
  require(std::isfinite(largest), "largest logit ", largest, " is not finite: the exponents overflow ",
          is_float ? "float32 (tokens whose products exceed 3.4e38; --precision double computes them)"
                   : "float64");
  require(largest <= double_exponent_limit, "largest logit ", largest, " exceeds ", double_exponent_limit,
          " = log(DBL_MAX): exp of it overflows even in double");
  const double underflow = -0.5 * std::log(double(std::numeric_limits<T>::max()));
  return kernel.type == KernelType::exponential && largest < underflow ? largest : std::max(0.0, largest);
}

template <class T>
double kernel_log_shift(const Kernel& kernel, const ConstMatrixRef<T>& X, const ConstMatrixRef<T>& Y) {
  if (kernel.type != KernelType::exponential) return 0;
  return log_shift_for<T>(kernel, largest_exponent<T>(kernel, X, Y));
}

#define NYSTROM_INSTANTIATE(T)                                                                            \
  template double largest_exponent<T>(const Kernel&, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&); \
  template double log_shift_for<T>(const Kernel&, double);                                                \
  template double kernel_log_shift<T>(const Kernel&, const ConstMatrixRef<T>&, const ConstMatrixRef<T>&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
