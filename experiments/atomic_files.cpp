#include "atomic_files.hpp"

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "nystrom/error.hpp"

namespace nystrom::cli {

void require_replaceable(const std::string& target, const OutputKind& kind) {
  require(!target.empty(), "nystrom ", kind.command, ": the output path is empty");
  require(std::filesystem::path(target).has_filename(), target,
          ": names a directory (it ends with a separator), not an output file");
  std::error_code error;
  const auto status = std::filesystem::status(target, error);
  if (!std::filesystem::exists(status)) return;
  require(!std::filesystem::is_directory(status), target, ": is a directory, not an output file");
  const auto refuse = [&](const std::string& what) {
    return std::invalid_argument(describe(target, ": exists and ", what, "; nystrom ", kind.command,
                                          " replaces only its own output files (choose another --output)"));
  };
  if (H5Fis_hdf5(target.c_str()) <= 0) throw refuse("is not an HDF5 file");
  Handle file = open_file(target, false);
  const hid_t root = file.get();
  if (std::string(kind.group) != "sweep" && H5Lexists(root, "sweep", H5P_DEFAULT) > 0)
    throw refuse("holds a sweep's results");
  const std::string format = has_attribute(root, "format") ? read_string_attribute(root, "format") : "";
  if (format != kind.format || H5Lexists(root, kind.group, H5P_DEFAULT) <= 0)
    throw refuse(describe("is not a file nystrom ", kind.command, " writes (format '", format, "', no /",
                          kind.group, ")"));
  const std::string source = has_attribute(root, "source") ? read_string_attribute(root, "source") : "";
  if (source.rfind(kind.source_prefix, 0) != 0)
    throw refuse(describe("is a dump from '", source, "', not one nystrom ", kind.command, " wrote"));
}

namespace {

/// The temporary files of live AtomicFiles, removed by the handler of SIGINT and SIGTERM before the signal's
/// default action ends the process (destructors do not run then). Fixed storage: the handler may only call
/// async-signal-safe functions.
constexpr int temporary_slots = 8;
constexpr std::size_t temporary_path_bytes = 4096;
char temporary_paths[temporary_slots][temporary_path_bytes];
volatile std::sig_atomic_t temporary_used[temporary_slots];

extern "C" void remove_temporaries_and_reraise(int signal) {
  for (int slot = 0; slot < temporary_slots; ++slot)
    if (temporary_used[slot]) ::unlink(temporary_paths[slot]);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

/// Registers `path` for removal on SIGINT and SIGTERM (where nothing else handles them); returns its slot, or
/// −1 when the path does not fit (the file is then only removed by the destructor).
int register_temporary(const std::string& path) {
  if (path.size() >= temporary_path_bytes) return -1;
  for (int slot = 0; slot < temporary_slots; ++slot) {
    if (temporary_used[slot]) continue;
    std::memcpy(temporary_paths[slot], path.c_str(), path.size() + 1);
    temporary_used[slot] = 1;
    for (const int signal : {SIGINT, SIGTERM}) {
      struct sigaction current = {};
      ::sigaction(signal, nullptr, &current);
      if (current.sa_handler == SIG_DFL) std::signal(signal, remove_temporaries_and_reraise);
    }
    return slot;
  }
  return -1;
}

void unregister_temporary(int slot) {
  if (slot >= 0) temporary_used[slot] = 0;
}

}  // namespace

std::filesystem::path create_parent_directories(const std::string& target) {
  const auto parent = std::filesystem::path(target).parent_path();
  std::filesystem::path outermost;
  for (auto missing = parent; missing.has_relative_path() && !std::filesystem::exists(missing);
       missing = missing.parent_path())
    outermost = missing;
  std::error_code error;
  if (!outermost.empty()) std::filesystem::create_directories(parent, error);
  if (error) remove_created_directories(target, outermost);
  require(!error, target, ": cannot create its directory ", parent.string(), " (", error.message(), ")");
  return outermost;
}

void remove_created_directories(const std::string& target, const std::filesystem::path& outermost) {
  if (outermost.empty()) return;
  std::error_code ignored;
  for (auto directory = std::filesystem::path(target).parent_path(); directory.has_relative_path();
       directory = directory.parent_path()) {
    std::filesystem::remove(directory, ignored);  // an empty directory only
    if (directory == outermost) return;
  }
}

std::string file_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  require(in.good(), path, ": cannot be read");
  constexpr std::uint64_t prime = 0x100000001b3ULL;
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  std::vector<char> block(std::size_t(1) << 20);
  while (in) {
    in.read(block.data(), std::streamsize(block.size()));
    const auto count = std::size_t(in.gcount());
    std::size_t i = 0;
    for (; i + 8 <= count; i += 8) {
      std::uint64_t word;
      std::memcpy(&word, block.data() + i, 8);
      hash = (hash ^ word) * prime;
    }
    for (; i < count; ++i) hash = (hash ^ std::uint8_t(block[i])) * prime;
  }
  require(in.eof(), path, ": cannot be read to its end");
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

void copy_file_atomically(const std::string& source, const std::string& target) {
  const std::string temporary = target + ".tmp-" + std::to_string(::getpid());
  const int slot = register_temporary(temporary);
  std::error_code error;
  std::filesystem::copy_file(source, temporary, std::filesystem::copy_options::overwrite_existing, error);
  if (!error) std::filesystem::rename(temporary, target, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
  }
  unregister_temporary(slot);
  if (error) throw std::filesystem::filesystem_error("copy " + source, target, error);
}

AtomicFile::AtomicFile(std::string target, const OutputKind& kind) : target_(std::move(target)) {
  // A symbolic link stays one: the file it points to is replaced.
  if (std::filesystem::is_symlink(target_)) target_ = std::filesystem::weakly_canonical(target_).string();
  require_replaceable(target_, kind);
  created_directory_ = create_parent_directories(target_);
  std::error_code error;
  temporary_ = target_ + ".tmp-" + std::to_string(::getpid());
  slot_ = register_temporary(temporary_);
  try {
    // Created by open(2) first, for the reason of a failure (HDF5 reports none), then truncated by HDF5.
    const int descriptor = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0666);
    require(descriptor >= 0, target_, ": cannot write the output there (", std::strerror(errno), ")");
    ::close(descriptor);
    file_ = create_file(temporary_);
  } catch (...) {
    unregister_temporary(slot_);
    std::filesystem::remove(temporary_, error);
    remove_created_directories(target_, created_directory_);
    throw;
  }
}

AtomicFile::~AtomicFile() {
  unregister_temporary(slot_);
  if (!file_.valid()) return;
  file_.reset();
  std::error_code ignored;
  std::filesystem::remove(temporary_, ignored);
  remove_created_directories(target_, created_directory_);
}

void AtomicFile::commit() {
  flush_file(file_.get(), temporary_);
  file_.reset();
  std::error_code error;
  std::filesystem::rename(temporary_, target_, error);
  if (error) {
    std::filesystem::remove(temporary_);
    throw std::invalid_argument(describe(target_, ": cannot write the output there (", error.message(), ")"));
  }
}

}  // namespace nystrom::cli
