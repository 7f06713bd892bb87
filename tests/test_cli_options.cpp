// End-to-end tests of the `nystrom` program's command line (options.cpp, cli.cpp): option and list parsing,
// dispatch and exit statuses.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "cli_test_support.hpp"
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
