#include <doctest/doctest.h>

#include <array>
#include <limits>
#include <ostream>
#include <string>

#include "nystrom/detail/enum_names.hpp"
#include "nystrom/error.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE_TEMPLATE("all_finite agrees with an entry-by-entry check, including at the extremes", T, float,
                   double) {
  using limits = std::numeric_limits<T>;
  Matrix<T> x = random_matrix<T>(37, 5, 1);
  CHECK(all_finite(x));
  x(3, 2) = limits::max();
  x(4, 2) = -limits::max();
  x(5, 2) = limits::denorm_min();
  CHECK(all_finite(x));  // x·0 = 0 even for the largest finite values
  for (const T bad : {limits::quiet_NaN(), limits::infinity(), -limits::infinity()}) {
    for (const Index entry : {Index(0), Index(17), x.size() - 1}) {
      Matrix<T> y = x;
      y(entry) = bad;
      CHECK_FALSE(all_finite(y));
      CHECK(throws_naming([&] { require_finite(y, "the input"); }, "the input contains non-finite"));
    }
  }
  CHECK(all_finite(Matrix<T>(0, 3)));  // nothing to reject
  CHECK_FALSE(all_finite(x.middleRows(2, 30).cwiseProduct(Matrix<T>::Constant(30, 5, limits::infinity()))));
}

namespace {
/// A message part that counts how often it is written into a message.
struct CountedPart {
  int* writes;
};
std::ostream& operator<<(std::ostream& out, const CountedPart& part) {
  ++*part.writes;
  return out << "part";
}
}  // namespace

TEST_CASE("require builds its message from the parts only when the condition fails") {
  int writes = 0;
  require(true, "m = ", 3, CountedPart{&writes});
  CHECK(writes == 0);
  CHECK(throws_naming([&] { require(false, "m = ", 17, " exceeds N = ", 16.5, ": ", CountedPart{&writes}); },
                      "m = 17 exceeds N = 16.5: part"));
  CHECK(writes == 1);
  CHECK(throws_naming([] { require(false, std::string("a plain message")); }, "a plain message"));
}

namespace {
enum class Shape { circle, square, triangle };
constexpr std::array<EnumName<Shape>, 3> shape_names{
    {{Shape::circle, "circle"}, {Shape::square, "square"}, {Shape::triangle, "triangle"}}};
}  // namespace

TEST_CASE("enum name tables map both ways and list the accepted names on a bad one") {
  for (const auto& entry : shape_names) {
    CHECK(name_of(entry.value, shape_names) == entry.name);
    CHECK(parse(std::string(entry.name), shape_names, "shape") == entry.value);
  }
  CHECK(name_of(static_cast<Shape>(7), shape_names) == "unknown");
  CHECK(throws_naming([] { parse("hexagon", shape_names, "shape"); },
                      "unknown shape 'hexagon' (expected circle, square or triangle)"));
  CHECK(
      throws_naming([] { parse("Circle", shape_names, "shape"); }, "'Circle'"));  // names are case-sensitive
}
