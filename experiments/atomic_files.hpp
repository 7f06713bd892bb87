#pragma once
/// @file atomic_files.hpp
/// Output files of the `nystrom` program written atomically: which existing files a subcommand may replace,
/// the directories created for an output, file digests, and files renamed onto their target only when whole
/// (removed on failure and on SIGINT or SIGTERM).

#include <filesystem>
#include <string>

#include "hdf5_handles.hpp"

namespace nystrom::cli {

/// The files one subcommand writes, which its AtomicFile may replace: a file with root attribute `format`,
/// root group `group` and no /sweep unless `group` is (only a sweep replaces a sweep's results), and for
/// dumps a `source` attribute starting with `source_prefix` (synth replaces its own synthetic dumps, never a
/// model's).
struct OutputKind {
  const char* command;
  const char* format;
  const char* group;
  const char* source_prefix = "";
};

/// Throws std::invalid_argument naming `target` when it is empty, a directory, or an existing file that is
/// not of `kind` (not HDF5, another command's results, a model's dump): the files a run must not replace.
void require_replaceable(const std::string& target, const OutputKind& kind);

/// Creates the directories missing above `target` and returns the outermost one it created (empty when none
/// was missing); throws std::invalid_argument naming `target` when they cannot be created.
std::filesystem::path create_parent_directories(const std::string& target);

/// Removes the directories above `target`, innermost first up to `outermost` (create_parent_directories),
/// where they are empty: what a failed run created for its output.
void remove_created_directories(const std::string& target, const std::filesystem::path& outermost);

/// A 64-bit FNV-1a hash of the bytes of the file at `path` (taken 8 bytes at a time), as 16 hex digits: what
/// tells a regenerated input from the one a results file was computed from. Throws std::invalid_argument
/// naming the path when it cannot be read.
std::string file_digest(const std::string& path);

/// Copies `source` onto `target` through a temporary file beside the target, removed on failure and on
/// SIGINT or SIGTERM (as AtomicFile's): the target is either absent or the whole copy. Throws
/// std::filesystem::filesystem_error naming the target.
void copy_file_atomically(const std::string& source, const std::string& target);

/// A new HDF5 file written under a temporary name in the target's directory and renamed onto the target only
/// by commit(), so a failed run never leaves a truncated file in place of a good one. Without commit() the
/// temporary file is removed, and so it is when SIGINT or SIGTERM ends the process first. Missing parent
/// directories are created (and removed again, when still empty, without commit()); a target that is a
/// symbolic link is followed. The target must be replaceable by
/// `kind` (require_replaceable); a location that cannot be written throws std::invalid_argument naming it.
class AtomicFile {
 public:
  AtomicFile(std::string target, const OutputKind& kind);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  hid_t get() const { return file_.get(); }
  /// Closes the file and renames it onto the target.
  void commit();

 private:
  std::string target_, temporary_;
  std::filesystem::path created_directory_;  ///< the outermost directory created for the target, if any
  int slot_ = -1;
  Handle file_;
};

}  // namespace nystrom::cli
