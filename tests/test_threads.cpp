#include <doctest/doctest.h>

#include "nystrom/threads.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE("set_threads sets the OpenMP count and rejects counts below one") {
  const int before = threads();
  set_threads(1);
  CHECK(threads() == 1);
  CHECK(throws_naming([] { set_threads(0); }, "0"));
  CHECK(throws_naming([] { set_threads(-3); }, "-3"));
  CHECK(threads() == 1);
  set_threads(before);
  CHECK(threads() == before);
}
