#include "nystrom/kernels.hpp"

#include <sstream>

namespace nystrom {

std::string to_string(KernelType type) {
  switch (type) {
    case KernelType::exponential:
      return "exp";
    case KernelType::laplacian:
      return "laplacian";
    case KernelType::gaussian:
      return "gaussian";
  }
  return "unknown";
}

KernelType kernel_type_from_string(const std::string& name) {
  for (auto type : {KernelType::exponential, KernelType::laplacian, KernelType::gaussian})
    if (name == to_string(type)) return type;
  throw std::invalid_argument("unknown kernel '" + name + "' (expected exp, laplacian or gaussian)");
}

void Kernel::validate() const {
  require(std::isfinite(param),
          describe("kernel ", to_string(type), ": parameter ", param, " is not finite"));
  if (type == KernelType::laplacian)
    require(param > 0, describe("kernel laplacian: lambda = ", param, " must be > 0"));
  if (type == KernelType::gaussian)
    require(param > 0, describe("kernel gaussian: bandwidth h = ", param, " must be > 0"));
}

std::string Kernel::label() const {
  const char* name = type == KernelType::exponential ? "s" : type == KernelType::laplacian ? "lambda" : "h";
  std::ostringstream out;
  out << to_string(type) << "(" << name << "=" << param << ")";
  return out.str();
}

}  // namespace nystrom
