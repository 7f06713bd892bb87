// End-to-end tests of the results files (results_files.hpp, docs/formats.md §2) through `info`: every table
// described, columns cut to the rows they all hold, and malformed results files refused (exit status 2, a
// message naming the file and the fault, nothing on stdout).
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <functional>

#include "cli_test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE("info describes dumps and results files, --config supplies options") {
  TempDir dir("info");
  const auto dump = dir / "d.h5", results = dir / "r.h5", config = dir / "sweep.ini";
  REQUIRE(run_cli({"synth", "-o", dump, "--tokens", "16", "--dim", "4", "--heads", "2", "--layers", "1"})
              .status == 0);
  std::ofstream(config)
      << "# a sweep config\nkernel = laplacian\nlambda = 2,8\nlandmarks = 2:8:x2\npinv = exact\n"
         "strategy = step\nquiet = true\n";
  const auto run = run_cli({"sweep", "-i", dump, "-o", results, "--config", config, "--landmarks", "4"});
  REQUIRE(run.status == 0);
  const auto table = read_sweep(results);
  CHECK(table.rows.size() == 2 * 2);  // 2 heads × 2 lambdas × 1 landmark count (the command line wins)
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CHECK(table.text(r, "kernel") == "laplacian");
    CHECK(table.number(r, "landmarks") == 4);
  }
  const auto info_dump = run_cli({"info", dump});
  CHECK(info_dump.status == 0);
  CHECK(info_dump.out.find("/layers/00: B = 1, H = 2, N = 16, d = 4") != std::string::npos);
  const auto info_results = run_cli({"info", results});
  CHECK(info_results.status == 0);
  CHECK(info_results.out.find("/sweep: 4 rows") != std::string::npos);
  CHECK(info_results.out.find("format = nystrom-results") != std::string::npos);
  // Every table of a results file: here the bench's.
  const auto bench = dir / "bench.h5";
  REQUIRE(run_cli({"bench", "-o", bench, "--n", "16", "--method", "exact", "--precision", "double",
                   "--threads", "1", "--gemm-n", "0", "--steps", "0", "--blas-core", "default"})
              .status == 0);
  const auto info_bench = run_cli({"info", bench});
  CHECK(info_bench.status == 0);
  CHECK_MESSAGE(info_bench.out.find("  /bench: 1 rows") != std::string::npos, info_bench.out);
  CHECK(info_bench.out.find("    method                     exact") != std::string::npos);
  CHECK(run_cli({"sweep", "-i", dump, "-o", results, "--config", dir / "missing.ini"}).status == 2);
  CHECK(run_cli({"info"}).status == 2);
  // A column one row short (a crash between two columns): info shows the rows every column holds and leaves
  // the file as it is (it failed trying to cut the longer columns of a file opened read-only).
  {
    cli::Handle file = cli::open_file(results, true);
    cli::Handle column = cli::open_dataset(file.get(), "sweep/kernel");
    const hsize_t three = 3;
    REQUIRE(H5Dset_extent(column.get(), &three) >= 0);
  }
  const auto short_bytes = file_bytes(results);
  const auto info_short = run_cli({"info", results});
  CHECK(info_short.status == 0);
  CHECK(info_short.out.find("/sweep: 3 rows") != std::string::npos);
  CHECK(file_bytes(results) == short_bytes);
  // A text column stored as fixed-length strings is refused, naming it (exit 1 and "read kernel failed").
  {
    cli::Handle file = cli::open_file(results, true);
    REQUIRE(H5Ldelete(file.get(), "sweep/kernel", H5P_DEFAULT) >= 0);
    cli::Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
    REQUIRE(H5Tset_size(type.get(), 9) >= 0);
    const hsize_t rows = 4;
    cli::Handle space(H5Screate_simple(1, &rows, nullptr), H5Sclose, "H5Screate_simple");
    cli::Handle column(H5Dcreate2(file.get(), "sweep/kernel", type.get(), space.get(), H5P_DEFAULT,
                                  H5P_DEFAULT, H5P_DEFAULT),
                       H5Dclose, "H5Dcreate2");
  }
  const auto info_fixed = run_cli({"info", results});
  CHECK(info_fixed.status == 2);
  CHECK(info_fixed.err.find("/sweep/kernel: unexpected type") != std::string::npos);
}

namespace {

/// Writes a 1-D array of variable-length strings as attribute `name` of `object` (h5py writes a list so).
void write_string_array_attribute(hid_t object, const char* name, std::vector<const char*> values) {
  cli::Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  REQUIRE(H5Tset_size(type.get(), H5T_VARIABLE) >= 0);
  const hsize_t count = values.size();
  cli::Handle space(H5Screate_simple(1, &count, nullptr), H5Sclose, "H5Screate_simple");
  cli::Handle attribute(H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                        "H5Acreate2");
  REQUIRE(H5Awrite(attribute.get(), type.get(), values.data()) >= 0);
}

/// Writes the results file `path`: the root attributes format (unless `format` is false) and format_version,
/// then what `edit` adds.
template <class Edit>
void write_results_file(const std::string& path, Edit edit, bool format = true) {
  cli::Handle file = cli::create_file(path);
  if (format) cli::write_attribute(file.get(), "format", std::string("nystrom-results"));
  cli::write_attribute(file.get(), "format_version", std::vector<std::int64_t>{3});
  edit(file.get());
}

}  // namespace

TEST_CASE("info refuses malformed results files: exit 2 naming the file and the fault, nothing on stdout") {
  TempDir dir("info_bad");
  const std::vector<double> zeros(5, 0.0);
  struct Case {
    std::string name, expect;
    std::function<void(const std::string&)> make;
  };
  const std::vector<Case> cases = {
      // Was "cannot create std::vector larger than max_size()", exit 1, after the header lines.
      {"empty_sweep", "/sweep has no column datasets",
       [](const std::string& p) { write_results_file(p, [](hid_t f) { cli::create_group(f, "sweep"); }); }},
      // Was "HDF5: open group sweep failed", exit 1.
      {"sweep_dataset", "/sweep is a dataset, expected a group of column datasets",
       [&](const std::string& p) {
         write_results_file(p, [&](hid_t f) { cli::write_array(f, "sweep", {3}, zeros.data()); });
       }},
      // Was read as a table of 3 rows.
      {"uneven_columns", "/sweep columns have different lengths: a has 3 rows, b has 5",
       [&](const std::string& p) {
         write_results_file(p, [&](hid_t f) {
           cli::Handle group = cli::create_group(f, "sweep");
           cli::write_array(group.get(), "a", {3}, zeros.data());
           cli::write_array(group.get(), "b", {5}, zeros.data());
         });
       }},
      {"column_group", "/sweep/a is a group, expected a column dataset",
       [](const std::string& p) { write_results_file(p, [](hid_t f) { cli::create_group(f, "sweep/a"); }); }},
      {"column_rank", "/sweep/a has rank 2, expected a 1-D column",
       [&](const std::string& p) {
         write_results_file(p, [&](hid_t f) {
           cli::Handle group = cli::create_group(f, "sweep");
           cli::write_array(group.get(), "a", {2, 2}, zeros.data());
         });
       }},
      {"spectra_dataset", "/spectra is a dataset, expected a group of layer groups",
       [&](const std::string& p) {
         write_results_file(p, [&](hid_t f) { cli::write_array(f, "spectra", {3}, zeros.data()); });
       }},
      {"spectra_layer_dataset", "/spectra/00 is a dataset, expected a group of spectrum datasets",
       [&](const std::string& p) {
         write_results_file(p, [&](hid_t f) {
           cli::Handle group = cli::create_group(f, "spectra");
           cli::write_array(group.get(), "00", {3}, zeros.data());
         });
       }},
      // Was "unknown format_version 3 (this build reads format_version 1)": read as a dump.
      {"no_format", "has no 'format' attribute and no /layers group",
       [&](const std::string& p) {
         write_results_file(
             p,
             [&](hid_t f) {
               cli::Handle group = cli::create_group(f, "sweep");
               cli::write_array(group.get(), "a", {3}, zeros.data());
             },
             false);
       }},
      // Was a segmentation fault: two strings read into room for one.
      {"format_array", "/: attribute 'format' holds 2 strings, expected one",
       [](const std::string& p) {
         cli::Handle file = cli::create_file(p);
         write_string_array_attribute(file.get(), "format", {"nystrom-results", "nystrom-dump"});
       }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const auto path = dir / (c.name + ".h5");
    c.make(path);
    const auto before = file_bytes(path);
    const auto run = run_cli({"info", path});
    CAPTURE(run.err);
    CHECK(run.status == 2);
    CHECK(run.err.find(path + ": " + c.expect) != std::string::npos);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
    CHECK(run.out.empty());
    CHECK(file_bytes(path) == before);
  }
  // An attribute no writer makes, an array of strings, is shown by its size (was a segmentation fault).
  const auto strings = dir / "strings.h5";
  write_results_file(strings, [](hid_t f) { write_string_array_attribute(f, "names", {"alpha", "beta"}); });
  const auto described = run_cli({"info", strings});
  CHECK(described.status == 0);
  CHECK(described.out.find("names = (2 strings, not shown)") != std::string::npos);
  // A user's dump needs no attributes: without `format` but with /layers, it is a dump.
  const auto bare = dir / "bare.h5";
  {
    cli::Handle file = cli::create_file(bare);
    cli::Handle group = cli::create_group(file.get(), "layers/00");
    for (const char* name : {"q", "k"}) write_tensor(group.get(), name, {1, 1, 5, 1}, zeros);
  }
  const auto dump = run_cli({"info", bare});
  CHECK(dump.status == 0);
  CHECK(dump.out.find("attention dump") != std::string::npos);
}
