// End-to-end tests of the `nystrom` program's command line, `synth`, `info` and the dump reader: option and
// list parsing, dispatch and exit statuses, synthetic dumps checked against independent formulas, and every
// malformed input (exit status 2, a message naming the file/group/dataset, no output file, an existing file
// left intact).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "cli_test_support.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/landmarks.hpp"
#include "options.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE("landmark lists: numbers, geometric and arithmetic ranges") {
  CHECK(cli::parse_index_list("4:64:x2,100", "landmarks") == std::vector<Index>{4, 8, 16, 32, 64, 100});
  CHECK(cli::parse_index_list("8:30:+8", "landmarks") == std::vector<Index>{8, 16, 24});
  CHECK(cli::parse_index_list("3:40:x3", "landmarks") == std::vector<Index>{3, 9, 27});
  CHECK(cli::parse_index_list(" 16 , 8,16 ", "landmarks") == std::vector<Index>{16, 8});
  CHECK(cli::parse_index_list("0", "heads", 0) == std::vector<Index>{0});
  for (const char* bad :
       {"", "8,", "a", "4:64", "4:64:x1", "4:64:+0", "64:4:x2", "4:64:*2", "0", "-3", "4.5"}) {
    CAPTURE(bad);
    CHECK_THROWS_WITH_AS(cli::parse_index_list(bad, "landmarks"), doctest::Contains("--landmarks"),
                         std::invalid_argument);
  }
  // Ranges reaching the end of long long stop at their last value (they overflowed into negative values).
  CHECK(cli::parse_index_list("2:9223372036854775807:x2", "landmarks").back() == Index(1) << 62);
  CHECK(cli::parse_index_list("1:9223372036854775807:+4611686018427387904", "landmarks") ==
        std::vector<Index>{1, 4611686018427387905});
  // A range of more than a million values is refused at once (it was expanded, for minutes and gigabytes).
  CHECK_THROWS_WITH_AS(cli::parse_index_list("0:100000000000:+1", "heads", 0),
                       "option --heads: range '0:100000000000:+1' has 100000000001 values, more than 1000000",
                       std::invalid_argument);
  CHECK(cli::parse_index_list("1:1000000:+1", "landmarks").size() == 1000000);
}

TEST_CASE("real numbers: one decimal reading for every option, double's whole range, nothing beyond it") {
  CHECK(cli::parse_double_list("4, 0.5,1e-3,+2,4", "lambda") == std::vector<double>{4, 0.5, 1e-3, 2});
  // Subnormal values are numbers: the kernel, not the reader, decides whether its parameter is usable.
  CHECK(cli::parse_real("4.9e-324", "scale") == std::numeric_limits<double>::denorm_min());
  CHECK(cli::parse_real("-0", "scale") == 0);
  CHECK(cli::parse_real(" 3 ", "scale") == 3);
  const std::map<std::string, std::string> refused{
      {"nan", "is not a finite number"},
      {"-inf", "is not a finite number"},
      {"1e-400", "lies beyond double's range"},  // read as 0 before, which means "the layer's scale"
      {"-1e999", "lies beyond double's range"},
      {"0x10", "is not a decimal number"},  // hexadecimal was taken by some options and not by others
      {"4x", "is not a decimal number"},
      {"+-3", "is not a decimal number"},
      {"+", "is not a decimal number"},
      {"3 4", "is not a decimal number"}};
  for (const auto& [text, problem] : refused) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(cli::parse_real(text, "lambda"),
                         doctest::Contains(("option --lambda: '" + text + "' " + problem).c_str()),
                         std::invalid_argument);
    CHECK_THROWS_WITH_AS(cli::parse_double_list("4," + text, "lambda"),
                         doctest::Contains(("option --lambda: '" + text + "' " + problem).c_str()),
                         std::invalid_argument);
  }
  // The single-valued options read the same way, named on the command line and in a config file.
  TempDir dir("real_options");
  for (const auto& [subcommand, option] : std::vector<std::pair<std::string, std::string>>{
           {"sweep", "scale"}, {"spectrum", "rank-tol"}, {"spectrum", "lambda"}, {"synth", "noise"}}) {
    CAPTURE(option);
    const auto output = dir / "out.h5";
    for (const char* text : {"1e-400", "0x1p3"}) {
      const auto run = run_cli({subcommand, "--" + option, text, "-o", output});
      CHECK(run.status == 2);
      CHECK(run.err.find("option --" + option + ": '" + text + "'") != std::string::npos);
      CHECK(!std::filesystem::exists(output));
    }
    const auto config = dir / "options.cfg";
    std::ofstream(config) << option << " = 1e-999\n";
    const auto run = run_cli({subcommand, "--config", config, "-o", output});
    CHECK(run.status == 2);
    CHECK(run.err.find("line 1: option " + option + ": '1e-999' lies beyond double's range") !=
          std::string::npos);
    CHECK(!std::filesystem::exists(output));
  }
}

TEST_CASE("dispatch: help, unknown subcommands and options exit 2 with a message") {
  CHECK(run_cli({}).status == 2);
  const auto help = run_cli({"--help"});
  CHECK(help.status == 0);
  for (const char* name : {"sweep", "spectrum", "synth", "info", "bench"}) {
    CHECK(help.out.find(name) != std::string::npos);
    const auto sub = run_cli({name, "--help"});
    CHECK(sub.status == 0);
    CHECK(sub.out.find(std::string("usage: nystrom ") + name) != std::string::npos);
    if (std::string(name) == "info") continue;
    // One vocabulary: every subcommand that computes takes --precision (old spelling --dtype) and -q.
    CAPTURE(sub.out);
    CHECK(sub.out.find("--precision") != std::string::npos);
    CHECK(sub.out.find("deprecated alias of --precision") != std::string::npos);
    CHECK(sub.out.find("-q [ --quiet ]") != std::string::npos);
  }
  const auto unknown = run_cli({"sweeep"});
  CHECK(unknown.status == 2);
  CHECK(unknown.err.find("unknown subcommand 'sweeep'") != std::string::npos);
  const auto option = run_cli({"synth", "--output", "x.h5", "--bogus", "3"});
  CHECK(option.status == 2);
  CHECK(option.err.find("bogus") != std::string::npos);
  const auto kind = run_cli({"synth", "--output", "x.h5", "--kind", "gaussian,cauchy"});
  CHECK(kind.status == 2);
  CHECK(kind.err.find("--kind") != std::string::npos);
  CHECK(kind.err.find("cauchy") != std::string::npos);
  CHECK_FALSE(fs::exists("x.h5"));
  // A thread count OpenMP could not start ended a sweep in std::terminate (40,000 threads); it is refused.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"synth", "--output", "x.h5", "--threads", "100000"},
        {"sweep", "--output", "x.h5", "--threads", "100000"},
        {"bench", "--output", "x.h5", "--threads", "1,100000"}}) {
    CAPTURE(args[0]);
    const auto threads = run_cli(args);
    CHECK(threads.status == 2);
    CHECK(threads.err.find("--threads: 100000") != std::string::npos);
  }
  // A bad line of a config file is named with the file and its line: help and config (command-line options
  // only: in a config file they were silently ignored), an unknown option, a value of the wrong type, a
  // repeated option (at its repetition).
  const std::pair<const char*, const char*> bad_lines[] = {{"help = 1", "command-line option only"},
                                                           {"config = other.ini", "command-line option only"},
                                                           {"bogus = 3", "unrecognised option 'bogus'"},
                                                           {"seed = abc", "'abc'"},
                                                           {"seed = -1", "'-1'"},  // was read modulo 2^64
                                                           {"layers = 2", "more than once"}};
  for (const auto& [line, named] : bad_lines) {
    CAPTURE(line);
    { std::ofstream("bad.ini") << "# synthetic\nlayers = 1\n" << line << "\n"; }
    const auto config = run_cli({"synth", "--output", "x.h5", "--config", "bad.ini"});
    CHECK(config.status == 2);
    CHECK_MESSAGE(config.err.find("config file 'bad.ini', line 3: ") != std::string::npos, config.err);
    CHECK_MESSAGE(config.err.find(named) != std::string::npos, config.err);
    CHECK_FALSE(fs::exists("x.h5"));
  }
  fs::remove("bad.ini");
  // Sizes beyond memory: a clear message and exit 2 (was std::bad_alloc, exit 1), nothing written.
  const auto huge = run_cli({"synth", "--output", "x.h5", "--tokens", "100000000", "--dim", "100000",
                             "--heads", "1000", "--layers", "1"});
  CHECK(huge.status == 2);
  CHECK(huge.err.find("GB of memory") != std::string::npos);
  CHECK_FALSE(fs::exists("x.h5"));
}

namespace {

/// No temporary file of an AtomicFile is left in `dir`.
void check_no_temporaries(const TempDir& dir) {
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().string().find(".tmp-") == std::string::npos);
}

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

TEST_CASE("synth heavy-tailed: Student-t of any degrees of freedom, its variance nu / (nu - 2)") {
  // Above 32 degrees of freedom χ² is drawn as a gamma variable: --dof 2000000000 drew that many normals per
  // value and ran for hours. The sample variance of 4·2048·16 values against ν/(ν − 2): a standard error of
  // about 0.006 at ν = 40 (the gamma path) and 0.0055 at 10⁹ (nearly normal).
  TempDir dir("synth_dof");
  for (const auto& [dof, variance] : {std::pair{40, 40.0 / 38.0}, std::pair{1000000000, 1.0}}) {
    CAPTURE(dof);
    const auto path = dir / (std::to_string(dof) + ".h5");
    REQUIRE(run_cli({"synth", "-o", path, "--kind", "heavy-tailed", "--dof", std::to_string(dof), "--layers",
                     "1", "--heads", "4", "--tokens", "2048", "--dim", "16", "--precision", "double", "-q"})
                .status == 0);
    const auto dump = cli::inspect_dump(path);
    double sum = 0, squares = 0, count = 0;
    for (const auto& head : cli::read_layer_heads<double>(dump, dump.layers[0])) {
      sum += head.q.sum();
      squares += head.q.squaredNorm();
      count += double(head.q.size());
    }
    const double mean = sum / count;
    CHECK(std::abs(mean) < 0.01);
    CHECK(squares / count - mean * mean == doctest::Approx(variance).epsilon(0.03));
  }
}

TEST_CASE("synth writes the dump format, the reader gets back the same heads, attn is the exact softmax") {
  TempDir dir("synth");
  const auto path = dir / "g.h5";
  // Two float64 layers of low-rank (noise-free) tokens with attn; written twice below to check determinism.
  // `precision` spells the arithmetic: --precision double, or the deprecated alias --dtype float64.
  const auto synth_low_rank = [](const std::filesystem::path& out,
                                 const std::vector<std::string>& precision = {"--precision", "double"}) {
    std::vector<std::string> args = {"synth",       "-o",       out.string(),  "--kind", "gaussian,low-rank",
                                     "--layers",    "2",        "--batch",     "2",      "--heads",
                                     "3",           "--tokens", "24",          "--dim",  "5",
                                     "--value-dim", "4",        "--with-attn", "--seed", "7",
                                     "--rank",      "2",        "--noise",     "0",      "-q"};
    args.insert(args.end(), precision.begin(), precision.end());
    return run_cli(args);
  };
  const auto run = synth_low_rank(path);
  REQUIRE(run.status == 0);
  CHECK(run.err.empty());  // -q: no summary
  const auto dump = cli::inspect_dump(path);
  CHECK(dump.format_version == 1);
  CHECK(dump.source.find("synth") != std::string::npos);
  REQUIRE(dump.layers.size() == 2);
  const auto& layer = dump.layers[1];
  CHECK(layer.name == "01");
  CHECK(layer.batch == 2);
  CHECK(layer.heads == 3);
  CHECK(layer.tokens == 24);
  CHECK(layer.dim == 5);
  CHECK(layer.value_dim == 4);
  CHECK(layer.has_attention);
  CHECK(layer.dtype == "float64");
  CHECK(layer.scale == doctest::Approx(1 / std::sqrt(5.0)));
  const auto heads = cli::read_layer_heads<double>(dump, layer);
  REQUIRE(heads.size() == 6);
  // low-rank with zero noise: rank(Q) = 2 exactly.
  Eigen::JacobiSVD<Matrix<double>> svd(heads[4].q);
  CHECK(svd.singularValues()(2) < 1e-12 * svd.singularValues()(0));
  CHECK(svd.singularValues()(1) > 1e-3 * svd.singularValues()(0));
  // attn of head (b = 1, h = 1) against the softmax recomputed from q and k.
  const Matrix<double> attn = cli::read_attention<double>(dump, layer, 1, 1);
  const Matrix<double> logits = layer.scale * heads[4].q * heads[4].k.transpose();
  Matrix<double> softmax = (logits.colwise() - logits.rowwise().maxCoeff()).array().exp().matrix();
  softmax = softmax.array().colwise() / softmax.rowwise().sum().array();
  CHECK((attn - softmax).cwiseAbs().maxCoeff() < 1e-14);
  // Deterministic: the same seed gives the same data (here spelt with the deprecated --dtype float64),
  // another seed different data.
  const auto again = dir / "again.h5", other = dir / "other.h5";
  REQUIRE(synth_low_rank(again, {"--dtype", "float64"}).status == 0);
  CHECK(cli::inspect_dump(again).layers[1].dtype == "float64");
  REQUIRE(run_cli({"synth", "-o", other, "--tokens", "24", "--dim", "5", "--seed", "8", "--layers", "2"})
              .status == 0);
  const auto same =
      cli::read_layer_heads<double>(cli::inspect_dump(again), cli::inspect_dump(again).layers[1]);
  CHECK(same[4].q == heads[4].q);
  CHECK(same[5].v == heads[5].v);
  const auto first = cli::read_layer_heads<double>(dump, dump.layers[0]);
  const auto different =
      cli::read_layer_heads<double>(cli::inspect_dump(other), cli::inspect_dump(other).layers[0]);
  CHECK(first[0].q != different[0].q);
  // float32 dumps read back as float within float rounding of the float64 values.
  const auto f32 = dir / "f32.h5";
  REQUIRE(run_cli({"synth",       "-o",       f32,       "--kind", "gaussian,low-rank",
                   "--layers",    "2",        "--batch", "2",      "--heads",
                   "3",           "--tokens", "24",      "--dim",  "5",
                   "--value-dim", "4",        "--seed",  "7",      "--rank",
                   "2",           "--noise",  "0"})
              .status == 0);
  const auto f32_dump = cli::inspect_dump(f32);
  CHECK(f32_dump.layers[1].dtype == "float32");
  const auto as_float = cli::read_layer_heads<float>(f32_dump, f32_dump.layers[1]);
  CHECK((as_float[4].q.cast<double>() - heads[4].q).cwiseAbs().maxCoeff() <=
        1e-6 * heads[4].q.cwiseAbs().maxCoeff());
}

TEST_CASE(
    "synth kinds: block-constant tokens follow the segment-means partition, window fields carry the window") {
  TempDir dir("kinds");
  const auto path = dir / "k.h5";
  REQUIRE(run_cli({"synth",    "-o",    path,          "--kind",   "block-constant,window,heavy-tailed",
                   "--layers", "3",     "--heads",     "1",        "--tokens",
                   "30",       "--dim", "4",           "--blocks", "4",
                   "--window", "5x6",   "--value-dim", "0",        "--no-batch-axis"})
              .status == 0);
  const auto dump = cli::inspect_dump(path);
  REQUIRE(dump.layers.size() == 3);
  CHECK(dump.layers[0].rank == 3);
  CHECK(dump.layers[0].value_dim == 0);
  CHECK(dump.layers[1].window == std::array<Index, 2>{5, 6});
  CHECK(dump.layers[0].window == std::array<Index, 2>{0, 0});
  const auto blocks = cli::read_layer_heads<double>(dump, dump.layers[0]);
  // Segment means of m = 4 segments of the block-constant tokens are the block values themselves, and the
  // tokens take exactly 4 distinct values: rank(Q) = 4.
  const Matrix<double> means = segment_means<double>(blocks[0].q, 4);
  for (Index i = 0; i < 30; ++i) {
    const Index nearest = [&] {
      Index best = 0;
      (means.rowwise() - blocks[0].q.row(i)).rowwise().norm().minCoeff(&best);
      return best;
    }();
    CHECK((means.row(nearest) - blocks[0].q.row(i)).norm() < 1e-12);
  }
  const auto heavy = cli::read_layer_heads<double>(dump, dump.layers[2]);
  CHECK(heavy[0].q.allFinite());
  CHECK(run_cli({"info", path}).status == 0);
  CHECK(run_cli({"synth", "-o", dir / "bad.h5", "--kind", "window", "--tokens", "30"}).status == 2);
  CHECK(run_cli({"synth", "-o", dir / "bad.h5", "--kind", "window", "--tokens", "30", "--window", "4x7"})
            .status == 2);
  CHECK_FALSE(fs::exists(dir / "bad.h5"));
}

namespace {

/// Writes a dump with layer 00 built by `edit` (q, k of shape [1, 2, 6, 3] unless edited), for
/// malformed-input tests.
template <class Edit>
void write_bad_dump(const std::string& path, Edit edit, std::int64_t format_version = 1) {
  cli::Handle file = cli::create_file(path);
  cli::write_dump_header(file.get(), "test");
  cli::write_attribute(file.get(), "format_version", std::vector<std::int64_t>{format_version});
  cli::Handle group = cli::create_group(file.get(), "layers/00");
  std::vector<double> data(1 * 2 * 6 * 3, 0.25);
  edit(group.get(), data);
}

void write_tensor(hid_t group, const char* name, std::vector<hsize_t> dims, const std::vector<double>& data) {
  cli::write_array(group, name, dims, data.data());
}

/// A synthetic dump of one head, N = 12, d = 3, written by synth into `dir`.
std::string tiny_dump(const TempDir& dir, const std::string& name) {
  const auto path = dir / name;
  REQUIRE(run_cli({"synth", "-o", path, "--tokens", "12", "--dim", "3", "--heads", "1", "--layers", "1"})
              .status == 0);
  return path;
}

}  // namespace

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

TEST_CASE(
    "malformed dumps: exit 2, a message naming file, group and dataset, no output, existing output intact") {
  TempDir dir("bad");
  const auto good = tiny_dump(dir, "good.h5");
  // An existing output of each subcommand (each replaces only its own kind of file).
  const std::map<std::string, std::string> existing = {{"sweep", dir / "existing_sweep.h5"},
                                                       {"spectrum", dir / "existing_spectrum.h5"}};
  for (const auto& [subcommand, path] : existing)
    REQUIRE(run_cli({subcommand, "-i", good, "-o", path, "--kernel", "exp", "--strategy", "step",
                     "--landmarks", "2", "-q"})
                .status == 0);
  const std::map<std::string, std::string> existing_bytes = {
      {"sweep", file_bytes(existing.at("sweep"))}, {"spectrum", file_bytes(existing.at("spectrum"))}};

  const std::vector<std::int64_t> dims{1, 2, 6, 3};
  struct Case {
    std::string name, expect;
    std::function<void(const std::string&)> make;
  };
  const std::vector<Case> cases = {
      {"missing", "no such file", [](const std::string&) {}},
      {"text", "not an HDF5 file", [](const std::string& p) { std::ofstream(p) << "q,k\n1,2\n"; }},
      {"no_q", "/layers/00: missing dataset 'q'",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) { write_tensor(g, "k", {1, 2, 6, 3}, d); });
       }},
      {"q_group", "/layers/00/q: is not a dataset",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           cli::create_group(g, "q");
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
       }},
      {"layers_dataset", "/layers is not a group",
       [](const std::string& p) {
         cli::Handle file = cli::create_file(p);
         cli::write_dump_header(file.get(), "test");
         write_tensor(file.get(), "layers", {1, 2, 6, 3}, std::vector<double>(36, 0.25));
       }},
      {"layer_dataset", "/layers/01: is not a group",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
         cli::Handle file = cli::open_file(p, true);
         write_tensor(file.get(), "layers/01", {1, 2, 6, 3}, std::vector<double>(36, 0.25));
       }},
      {"no_k", "/layers/00: missing dataset 'k'",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) { write_tensor(g, "q", {1, 2, 6, 3}, d); });
       }},
      {"shape", "/layers/00/k: shape [1, 2, 5, 3] does not match q",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 5, 3}, std::vector<double>(30, 0.5));
         });
       }},
      {"v_shape", "/layers/00/v: shape",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
           write_tensor(g, "v", {1, 1, 6, 3}, std::vector<double>(18, 0.5));
         });
       }},
      {"empty", "/layers/00/q: N·d = 0",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto&) {
           write_tensor(g, "q", {1, 2, 6, 0}, {});
           write_tensor(g, "k", {1, 2, 6, 0}, {});
         });
       }},
      {"rank", "/layers/00/q: rank 2",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {12, 3}, d);
           write_tensor(g, "k", {12, 3}, d);
         });
       }},
      {"nan", "/layers/00/k: non-finite value nan at [0, 1, 4, 2]",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           auto bad = d;
           bad[(1 * 6 + 4) * 3 + 2] = std::nan("");
           write_tensor(g, "k", {1, 2, 6, 3}, bad);
         });
       }},
      {"inf_v", "/layers/00/v: non-finite value inf",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
           auto bad = d;
           bad[5] = INFINITY;
           write_tensor(g, "v", {1, 2, 6, 3}, bad);
         });
       }},
      {"float16", "/layers/00/q: type float16, expected float32 or float64",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           // IEEE half precision: 1 sign, 5 exponent (bias 15) and 10 mantissa bits.
           cli::Handle half(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "H5Tcopy");
           REQUIRE(H5Tset_fields(half.get(), 15, 10, 5, 0, 10) >= 0);
           REQUIRE(H5Tset_size(half.get(), 2) >= 0);
           REQUIRE(H5Tset_ebias(half.get(), 15) >= 0);
           const hsize_t dims[4] = {1, 2, 6, 3};
           cli::Handle space(H5Screate_simple(4, dims, nullptr), H5Sclose, "H5Screate_simple");
           cli::Handle q(H5Dcreate2(g, "q", half.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose, "H5Dcreate2");
           REQUIRE(H5Dwrite(q.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.data()) >= 0);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
       }},
      // Links to nothing were "HDF5: open object v failed", exit 1.
      {"dangling_v", "/layers/00/v: is a link to nothing",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
           REQUIRE(H5Lcreate_soft("/nowhere", g, "v", H5P_DEFAULT, H5P_DEFAULT) >= 0);
         });
       }},
      {"external_layer", "/layers/01: is a link to nothing",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
         cli::Handle file = cli::open_file(p, true);
         REQUIRE(H5Lcreate_external("missing.h5", "/layers/00", file.get(), "layers/01", H5P_DEFAULT,
                                    H5P_DEFAULT) >= 0);
       }},
      {"version", "unknown format_version 2",
       [](const std::string& p) {
         write_bad_dump(
             p,
             [](hid_t g, auto& d) {
               write_tensor(g, "q", {1, 2, 6, 3}, d);
               write_tensor(g, "k", {1, 2, 6, 3}, d);
             },
             2);
       }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const auto input = dir / (c.name + ".h5");
    c.make(input);
    for (const bool replace : {false, true}) {
      for (const std::string subcommand : {"sweep", "spectrum"}) {
        CAPTURE(subcommand);
        const std::string output = replace ? existing.at(subcommand) : dir / "new.h5";
        const auto run =
            run_cli({subcommand, "-i", input, "-o", output, "-q", "--landmarks", "2", "--strategy", "step"});
        CAPTURE(run.err);
        CHECK(run.status == 2);
        CHECK(run.err.find(input) != std::string::npos);
        CHECK(run.err.find(c.expect) != std::string::npos);
        CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "new.h5"));
        CHECK_FALSE(fs::exists(output + ".partial"));
        for (const auto& [name, path] : existing) CHECK(file_bytes(path) == existing_bytes.at(name));
      }
    }
    {
      const auto info = run_cli({"info", input});
      CHECK(info.status == 2);
      CHECK(info.err.find(c.expect) != std::string::npos);
    }
  }
  // No leftover temporary files in the directory.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().string().find(".tmp-") == std::string::npos);
}

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

TEST_CASE("spectrum: N = 1 gives the 1x1 kernel itself on the dense and the matrix-free path") {
  TempDir dir("spectrum_one_token");
  const auto input = dir / "one.h5";
  const std::vector<double> q = {0.5, -1.25, 0.75, 2.0}, k = {1.5, 0.25, -0.5, 1.0};
  write_bad_dump(input, [&](hid_t g, auto&) {
    write_tensor(g, "q", {1, 1, 1, 4}, q);
    write_tensor(g, "k", {1, 1, 1, 4}, k);
    write_tensor(g, "v", {1, 1, 1, 4}, q);
  });
  // G = exp(s q·k) with the default scale s = 1/√d = 1/2; one segment-means landmark is the token itself, so
  // G̃ is the 2×2 matrix of that entry, of singular value twice it.
  double dot = 0;
  for (std::size_t i = 0; i < q.size(); ++i) dot += q[i] * k[i];
  const double entry = std::exp(0.5 * dot);
  // --memory 1 takes the matrix-free path, which asked Lanczos for N − 1 = 0 values (exit 2).
  for (const char* memory : {"4G", "1"}) {
    CAPTURE(memory);
    const auto output = dir / (std::string("spectrum") + memory + ".h5");
    const auto run = run_cli({"spectrum", "-i", input, "-o", output, "--memory", memory, "-q"});
    CAPTURE(run.err);
    REQUIRE(run.status == 0);
    const auto sv_g = read_doubles(output, "spectra/00/sv_G"),
               sv_ext = read_doubles(output, "spectra/00/sv_Gext");
    CHECK(sv_g.dims == std::vector<hsize_t>{1, 1, 1});
    CHECK(sv_g.values[0] == doctest::Approx(entry).epsilon(1e-12));
    CHECK(sv_ext.values[0] == doctest::Approx(2 * entry).epsilon(1e-12));
  }
}

TEST_CASE("spectrum --reference model refuses a bias row of -inf alone as sweep does, naming the head") {
  TempDir dir("spectrum_infinite_row");
  const std::size_t n = 16;
  // A dump whose bias is `row_two` throughout row 2.
  const auto dump_with_row_two = [&](const std::string& path, double row_two) {
    write_bad_dump(path, [&](hid_t g, auto&) {
      std::vector<double> tokens(n * 4);
      for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::sin(double(i));
      for (const char* name : {"q", "k", "v"}) write_tensor(g, name, {1, 1, n, 4}, tokens);
      std::vector<double> bias(n * n, 0.0);
      std::fill_n(bias.begin() + 2 * n, n, row_two);
      write_tensor(g, "bias", {1, n, n}, bias);
    });
  };
  const auto input = dir / "row.h5";
  dump_with_row_two(input, -INFINITY);  // the model's scores are -inf throughout row 2
  // --reference kernel does not read the bias: an existing spectrum to keep.
  const auto existing = dir / "spectrum.h5";
  REQUIRE(run_cli({"spectrum", "-i", input, "-o", existing, "-m", "2", "-q"}).status == 0);
  const auto before = file_bytes(existing);
  // spectrum said "dense_svd: matrix contains non-finite values (NaN or Inf)", naming neither file nor head.
  for (const std::string command : {"sweep", "spectrum"}) {
    CAPTURE(command);
    const auto output = command == "spectrum" ? existing : dir / "sweep.h5";
    const auto run = run_cli({command, "-i", input, "-o", output, "-m", "2", "--reference", "model", "-q"});
    CAPTURE(run.err);
    CHECK(run.status == 2);
    CHECK(run.err.find(input + ": /layers/00 batch 0 head 0: row 2 of bias + mask is -inf throughout") !=
          std::string::npos);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
  // A finite row of -1e300 is -inf in float alone: the message says so, and double computes it.
  const auto finite = dir / "finite.h5";
  dump_with_row_two(finite, -1e300);
  const auto in_float = run_cli({"sweep", "-i", finite, "-o", dir / "sweep.h5", "-m", "2", "--reference",
                                 "model", "--precision", "float", "-q"});
  CHECK(in_float.status == 2);
  CHECK(in_float.err.find(
            "row 2 of bias + mask is -inf throughout (its softmax is undefined); in float, a bias "
            "or mask below -3.4e38 reads as -inf") != std::string::npos);
  CHECK(run_cli({"sweep", "-i", finite, "-o", dir / "sweep.h5", "-m", "2", "--reference", "model",
                 "--precision", "double", "-q"})
            .status == 0);
  fs::remove(dir / "sweep.h5");
  CHECK(file_bytes(existing) == before);
  CHECK_FALSE(fs::exists(dir / "sweep.h5"));
  CHECK_FALSE(fs::exists(dir / "sweep.h5.partial"));
  check_no_temporaries(dir);
}

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
