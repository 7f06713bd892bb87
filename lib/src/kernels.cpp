#include "nystrom/kernels.hpp"

#include <sstream>

#include "nystrom/enum_names.hpp"

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
}  // namespace

void Kernel::validate() const {
  const auto named = [&](const char* condition) {
    return describe("kernel ", to_string(type), ": ", parameter_name(type), " = ", param, condition);
  };
  require(std::isfinite(param), named(" is not finite"));
  if (type != KernelType::exponential) require(param > 0, named(" must be > 0"));
}

void Kernel::require_block(Index n, Index p, Index d, Index e, Index out_rows, Index out_cols) const {
  validate();
  require(d == e, describe("kernel: token dimensions differ, d = ", d, " and ", e));
  require(out_rows == n && out_cols == p,
          describe("kernel: output block is ", out_rows, "x", out_cols, ", expected ", n, "x", p));
}

std::string Kernel::label() const {
  std::ostringstream out;
  out << to_string(type) << "(" << parameter_name(type) << "=" << param << ")";
  return out.str();
}

}  // namespace nystrom
