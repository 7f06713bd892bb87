#include <doctest/doctest.h>

#include "nystrom/kernels.hpp"

TEST_CASE("kernel names round-trip") {
  using namespace nystrom;
  for (auto t : {KernelType::exponential, KernelType::laplacian, KernelType::gaussian})
    CHECK(kernel_type_from_string(to_string(t)) == t);
}
