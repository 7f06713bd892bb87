// End-to-end tests of the output files of the `nystrom` program (atomic_files.hpp): refused runs write
// nothing and leave no temporary file or created directory, an existing file is left intact, and each
// subcommand replaces only files it wrote.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// `nystrom synth -o output -q` with `options`: exit 2 with a one-line message containing each of `named`,
/// `existing` left byte-identical and no new file.
void check_synth_refused(const TempDir& dir, const std::vector<std::string>& options,
                         const std::vector<std::string>& named, const std::string& existing) {
  const std::string before = file_bytes(existing);
  for (const std::string& output : {existing, dir / "new.h5"}) {
    std::vector<std::string> args = {"synth", "-o", output, "-q"};
    args.insert(args.end(), options.begin(), options.end());
    const auto run = run_cli(args);
    CAPTURE(args);
    CAPTURE(run.err);
    CHECK(run.status == 2);
    for (const auto& text : named) CHECK(run.err.find(text) != std::string::npos);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
    CHECK(file_bytes(existing) == before);
    CHECK_FALSE(fs::exists(dir / "new.h5"));
  }
  check_no_temporaries(dir);
}

}  // namespace

TEST_CASE("synth refuses at once sizes beyond memory or disk, 64-bit overflows included, writing nothing") {
  TempDir dir("synth_sizes");
  const auto existing = dir / "existing.h5";
  REQUIRE(run_cli({"synth", "-o", existing, "-n", "8", "-d", "2", "--heads", "1", "--layers", "1", "-q"})
              .status == 0);
  // Each ran until killed, generating one head or layer after another.
  const std::string max = "9223372036854775807";
  check_synth_refused(dir, {"-n", "8", "-d", "2", "--layers", "1", "--heads", max},
                      {"--heads " + max, "GB of memory", "more than this machine's"}, existing);
  check_synth_refused(dir, {"-n", "8", "-d", "2", "--layers", "1", "--batch", max},
                      {"--batch " + max, "GB of memory"}, existing);
  check_synth_refused(dir, {"-n", "8", "-d", "2", "--layers", "1", "--heads", "100000000000"},
                      {"--heads 100000000000", "GB of memory"}, existing);
  check_synth_refused(dir, {"-n", "8", "-d", "2", "--layers", max},
                      {"--layers " + max, "the dump", "GB free for"}, existing);
  check_synth_refused(dir, {"-n", "8", "-d", "2", "--kind", "low-rank", "--rank", max},
                      {"--rank " + max, "rank-r factors", "GB of memory"}, existing);
  check_synth_refused(dir, {"-n", "100000000", "-d", "2", "--heads", "1", "--with-attn"},
                      {"--tokens 100000000", "+ N for --with-attn", "GB of memory"}, existing);
  // 4 × (2^62 + 4) wraps around to 16 in 64 bits: it was taken for a 16-token window.
  check_synth_refused(dir, {"-n", "16", "--kind", "window", "--window", "4611686018427387908x4"},
                      {"option --window: 4611686018427387908x4 does not cover N = 16"}, existing);
}

TEST_CASE("synth refuses a noise level that makes non-finite values in the precision, writing nothing") {
  TempDir dir("synth_noise");
  const auto existing = dir / "existing.h5";
  REQUIRE(run_cli({"synth", "-o", existing, "-n", "8", "-d", "2", "--heads", "1", "--layers", "1", "-q"})
              .status == 0);
  // Each wrote a dump that its own readers then refused ("/layers/00/q: non-finite value -inf").
  const std::vector<std::string> small = {"-n", "8", "-d", "2", "--heads", "1", "--layers", "1"};
  const auto small_dump_with = [&](std::vector<std::string> options) {
    options.insert(options.begin(), small.begin(), small.end());
    return options;
  };
  check_synth_refused(dir, small_dump_with({"--kind", "low-rank", "--noise", "1e308"}),
                      {"option --noise: 1e+308", "--precision float", "/layers/00/q (--kind low-rank)"},
                      existing);
  check_synth_refused(dir, small_dump_with({"--kind", "low-rank", "--noise", "1e40"}),
                      {"option --noise: 1e+40", "--precision float"}, existing);
  check_synth_refused(
      dir,
      small_dump_with({"--kind", "low-rank", "--noise", "1e160", "--precision", "double", "--with-attn"}),
      {"option --noise: 1e+160", "--precision double", "/layers/00/attn"}, existing);
  // The second layer's kind overflows after the first was written: the partial file is removed too.
  check_synth_refused(dir,
                      {"-n", "16", "-d", "2", "--heads", "1", "--layers", "2", "--kind", "gaussian,window",
                       "--noise", "1e40"},
                      {"/layers/01/q (--kind window)"}, existing);
  // The directories created for the output go too; one that existed stays.
  const auto nested = dir / "made/for/it.h5";
  CHECK(run_cli({"synth", "-o", nested, "--kind", "low-rank", "--noise", "1e40", "-q"}).status == 2);
  CHECK_FALSE(fs::exists(dir / "made"));
  CHECK(fs::exists(dir.path()));
  // Large noise that float32 holds is written, and its readers accept it.
  const auto noisy = dir / "noisy.h5";
  REQUIRE(run_cli({"synth", "-o", noisy, "-n", "8", "-d", "2", "--heads", "1", "--layers", "1", "--kind",
                   "low-rank", "--noise", "1e30", "--with-attn", "-q"})
              .status == 0);
  CHECK(run_cli({"info", noisy}).status == 0);
}

TEST_CASE(
    "spectrum, bench and synth replace only files they wrote: a sweep's results, a dump, other files stay") {
  TempDir dir("replace");
  const auto dump = tiny_dump(dir, "dump.h5");
  const auto results = dir / "results.h5";
  REQUIRE(run_cli({"sweep", "-i", dump, "-o", results, "--kernel", "exp", "--strategy", "step", "--landmarks",
                   "2", "--pinv", "exact", "-q"})
              .status == 0);
  const auto text = dir / "notes.txt";
  std::ofstream(text) << "not a results file\n";
  const auto model_dump = dir / "model.h5";  // a dump from elsewhere: another `source`
  fs::copy_file(dump, model_dump);
  {
    cli::Handle file = cli::open_file(model_dump, true);
    H5Adelete(file.get(), "source");
    cli::write_attribute(file.get(), "source", std::string("dump_attention.py: a model"));
  }
  const auto spectrum = [&](const std::string& output) {
    return run_cli({"spectrum", "-i", dump, "-o", output, "--kernel", "exp", "-m", "2", "-k", "3", "-q"});
  };
  const auto bench = [&](const std::string& output) {
    return run_cli({"bench", "-o", output, "--n", "16", "--method", "exact", "--threads", "1", "--gemm-n",
                    "0", "--steps", "0", "--min-seconds", "0.001", "--blas-core", "default", "-q"});
  };
  const auto synth = [&](const std::string& output) {
    return run_cli({"synth", "-o", output, "--tokens", "8", "--dim", "2", "--heads", "1", "--layers", "1"});
  };
  struct Refused {
    std::string output, expect;
    std::function<CliRun(const std::string&)> run;
  };
  const std::vector<Refused> refused = {{results, "holds a sweep's results", spectrum},
                                        {results, "holds a sweep's results", bench},
                                        {results, "holds a sweep's results", synth},
                                        {dump, "is not a file nystrom spectrum writes", spectrum},
                                        {text, "is not an HDF5 file", bench},
                                        {model_dump, "is a dump from 'dump_attention.py", synth},
                                        {dir.path().string(), "is a directory", synth},
                                        {"", "option --output: empty value", synth}};
  for (const Refused& r : refused) {
    CAPTURE(r.output);
    const std::string before = r.output.empty() || fs::is_directory(r.output) ? "" : file_bytes(r.output);
    const CliRun result = r.run(r.output);
    CAPTURE(result.err);
    CHECK(result.status == 2);
    CHECK(result.err.find(r.expect) != std::string::npos);
    if (!before.empty()) CHECK(file_bytes(r.output) == before);
  }
  // A file of the command's own kind is replaced: a rerun.
  const auto own = dir / "own.h5";
  for (const std::function<CliRun(const std::string&)>& run :
       std::vector<std::function<CliRun(const std::string&)>>{spectrum, bench, synth}) {
    REQUIRE(run(own).status == 0);
    CHECK(run(own).status == 0);
    fs::remove(own);
  }
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().string().find(".tmp-") == std::string::npos);
}
