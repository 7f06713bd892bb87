// End-to-end tests of the HDF5 objects a dump names (hdf5_handles.hpp): an object of the wrong kind and a
// link to nothing are refused, naming them.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

#include "cli_test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE("--reference model refuses a bias that is a group and a mask that links to nothing, naming them") {
  TempDir dir("model_terms");
  const std::size_t n = 8;
  std::vector<double> tokens(n * 4);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::sin(double(i));
  const std::map<std::string, std::function<void(hid_t)>> cases = {
      {"bias", [](hid_t g) { cli::create_group(g, "bias"); }},
      {"mask",
       [](hid_t g) { REQUIRE(H5Lcreate_soft("/nowhere", g, "mask", H5P_DEFAULT, H5P_DEFAULT) >= 0); }},
  };
  for (const auto& [name, make] : cases) {
    CAPTURE(name);
    const auto input = dir / (name + ".h5");
    write_bad_dump(input, [&](hid_t g, auto&) {
      for (const char* tensor : {"q", "k", "v"}) write_tensor(g, tensor, {1, 1, n, 4}, tokens);
      make(g);
    });
    // Was "HDF5: open dataset bias failed", exit 1.
    for (const std::string command : {"sweep", "spectrum"}) {
      CAPTURE(command);
      const auto output = dir / "out.h5";
      const auto run = run_cli({command, "-i", input, "-o", output, "-m", "2", "--reference", "model", "-q"});
      CAPTURE(run.err);
      CHECK(run.status == 2);
      CHECK(run.err.find(input + ": /layers/00/" + name + ": is ") != std::string::npos);
      CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
      CHECK_FALSE(fs::exists(output));
      CHECK_FALSE(fs::exists(output + ".partial"));
    }
  }
  check_no_temporaries(dir);
}
