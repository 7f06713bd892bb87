#pragma once
/// @file cli_test_support.hpp
/// Helpers of the end-to-end tests of the `nystrom` program: run it in-process with captured stderr (or as a
/// process of its own), temporary directories, file bytes, reading a results table back, and writing small
/// and malformed dumps.

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "atomic_files.hpp"
#include "cli.hpp"
#include "dumps.hpp"
#include "hdf5_handles.hpp"
#include "results_files.hpp"

namespace nystrom::test {

namespace fs = std::filesystem;

/// The exit status and stderr of one in-process run of `nystrom args...`.
struct CliRun {
  int status = -1;
  std::string err, out;
};

/// The dumps the tests write (AtomicFile): any earlier test dump at the same path is replaced.
inline const cli::OutputKind test_dump{"test", "nystrom-dump", "layers"};

inline CliRun run_cli(std::vector<std::string> args) {
  args.insert(args.begin(), "nystrom");
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::ostringstream err, out;
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  CliRun run;
  run.status = cli::run(int(args.size()), argv.data());
  std::cerr.rdbuf(old_err);
  std::cout.rdbuf(old_out);
  run.err = err.str();
  run.out = out.str();
  return run;
}

/// A fresh temporary directory removed at the end of the test.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(fs::temp_directory_path() / ("nystrom_test_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& file) const { return (path_ / file).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The exit status and stderr of `nystrom args...` run as a process of its own (the built program): for runs
/// that re-execute the program (bench --blas-core), which in-process would replace the test executable, and
/// for runs limited to files of at most `file_size_limit` bytes (RLIMIT_FSIZE, SIGXFSZ ignored: a write
/// beyond it fails as on a full disk).
inline CliRun run_program(std::vector<std::string> args, rlim_t file_size_limit = RLIM_INFINITY) {
  const std::string program = std::string(NYSTROM_BINARY_DIR) + "/bin/nystrom";
  REQUIRE(fs::exists(program));
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  char err_path[] = "/tmp/nystrom_test_stderr_XXXXXX";
  const int err = mkstemp(err_path);
  REQUIRE(err >= 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    if (file_size_limit != RLIM_INFINITY) {
      const rlimit limit{file_size_limit, file_size_limit};
      setrlimit(RLIMIT_FSIZE, &limit);
      std::signal(SIGXFSZ, SIG_IGN);
    }
    dup2(err, STDERR_FILENO);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(child, &status, 0);
  close(err);
  CliRun run;
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.err = file_bytes(err_path);
  fs::remove(err_path);
  return run;
}

/// Every column of /sweep by name, cells as stored.
struct Table {
  std::vector<cli::Column> columns;
  std::vector<cli::Row> rows;
  std::size_t index(const std::string& name) const {
    for (std::size_t c = 0; c < columns.size(); ++c)
      if (columns[c].name == name) return c;
    FAIL("no column " << name);
    return 0;
  }
  double number(std::size_t row, const std::string& name) const {
    const auto& cell = rows[row][index(name)];
    if (const auto* i = std::get_if<std::int64_t>(&cell)) return double(*i);
    return std::get<double>(cell);
  }
  std::string text(std::size_t row, const std::string& name) const {
    return std::get<std::string>(rows[row][index(name)]);
  }
};

/// Every value of the double dataset `name` (e.g. "spectra/00/sv_Gext") of a results file, flattened in
/// storage order, with its dimensions.
struct Doubles {
  std::vector<hsize_t> dims;
  std::vector<double> values;
};

inline Doubles read_doubles(const std::string& path, const std::string& name) {
  cli::Handle file = cli::open_file(path, false);
  cli::Handle dataset = cli::open_dataset(file.get(), name);
  Doubles out{cli::dataset_dims(dataset.get()), {}};
  hsize_t count = 1;
  for (hsize_t dim : out.dims) count *= dim;
  out.values.resize(count);
  H5Dread(dataset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.values.data());
  return out;
}

inline Table read_sweep(const std::string& path) {
  cli::Handle file = cli::open_file(path, false);
  cli::Handle group = cli::open_group(file.get(), "sweep");
  Table table;
  for (const auto& name : cli::list_group(group.get())) {
    cli::Handle dataset = cli::open_dataset(group.get(), name);
    const auto type = cli::describe_type(dataset.get());
    table.columns.push_back({name,
                             type == "string"          ? cli::ColumnType::text
                             : type.starts_with("int") ? cli::ColumnType::int64
                                                       : cli::ColumnType::float64,
                             false});
  }
  table.rows = cli::ResultsTable::open(file.get(), "sweep", table.columns, path).read_rows();
  return table;
}

/// No temporary file of an AtomicFile is left in `dir`.
inline void check_no_temporaries(const TempDir& dir) {
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().string().find(".tmp-") == std::string::npos);
}

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

/// Writes the float64 dataset `name` of shape `dims` (row-major `data`) into `group`.
inline void write_tensor(hid_t group, const char* name, std::vector<hsize_t> dims,
                         const std::vector<double>& data) {
  cli::write_array(group, name, dims, data.data());
}

/// A synthetic dump of one head, N = 12, d = 3, written by synth into `dir`.
inline std::string tiny_dump(const TempDir& dir, const std::string& name) {
  const auto path = dir / name;
  REQUIRE(run_cli({"synth", "-o", path, "--tokens", "12", "--dim", "3", "--heads", "1", "--layers", "1"})
              .status == 0);
  return path;
}

}  // namespace nystrom::test
