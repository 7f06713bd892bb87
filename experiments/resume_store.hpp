#pragma once
/// @file resume_store.hpp
/// The results file of a resumable run (docs/formats.md §2): rows are appended to `<output>.partial` and
/// flushed one by one, so a run stopped by a signal keeps every finished row; a rerun with the same output
/// skips every point whose parameter cells (row_key) match a stored row, from the partial file or from a
/// finished `<output>`, which is never modified in place; at the end the rows are rewritten onto `<output>`
/// in grid order, so any schedule and any number of ranks give the same file.
///
/// Crash safety: the partial file appears only complete (header and empty table written under a temporary
/// name, closed and renamed into place, or a finished output copied the same way) and is then reopened for
/// appending, so a process killed at any moment before its first row (SIGKILL included) leaves a readable
/// file.

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "atomic_files.hpp"
#include "hdf5_handles.hpp"
#include "results_files.hpp"

namespace nystrom::cli {

/// A string root attribute that changes the values of every row but is no column of the table (a sweep's
/// `--reference`, its methods' switches, its input's digest): rows are resumed only from files with the same
/// value. A file without the attribute (written before it existed) reads as `absent`; without `absent` it is
/// accepted.
struct RunSetting {
  std::string name, value;
  std::optional<std::string> absent;
};

/// One resumable results table /<group> of `output`.
class ResumeStore {
 public:
  /// Writes a file's root attributes (provenance and run settings) on `file`.
  using AttributeWriter = std::function<void(hid_t file)>;

  /// Reads what is finished: the rows of a finished `output` and of a partial file, each of which must be a
  /// results file of `input` with every one of `settings`, in a format version from resumable_format_version
  /// on, with these columns. Throws std::invalid_argument otherwise, and for an `output` that is not
  /// replaceable (require_replaceable); a partial file that cannot be resumed is named and never removed (a
  /// sweep may still be writing it). Creates nothing. `write_attributes` writes the settings too.
  ResumeStore(std::string output, std::string input, std::vector<RunSetting> settings, std::string group,
              std::vector<Column> columns, AttributeWriter write_attributes);

  const std::string& partial() const { return partial_; }
  /// Resume keys (row_key) of the finished rows.
  const std::unordered_set<std::string>& done() const { return done_; }
  /// True when there is something to write even without new rows (a partial file to finish, or no output).
  bool unfinished() const { return partial_exists_ || !output_exists_; }

  /// Opens the partial file for appending (see the file comment for how it is created).
  void open();
  /// Throws std::invalid_argument naming the file and the column where the file open() appends to (the
  /// partial file, else the output) has a column of fixed size (ResultsTable::fixed_size_column).
  void require_appendable() const;
  /// Appends one row and flushes the file. Where that fails (a full disk) it cuts the file back to the rows
  /// before, if that can still be written, and throws std::runtime_error naming the file.
  void append(const Row& row);
  /// Rows in the partial file.
  hsize_t rows() const { return table_ ? table_->rows() : 0; }
  /// Closes the partial file (it stays for a rerun).
  void close();
  /// Closes the partial file after a failure: removed when open() created it, with the directories created
  /// for it (no partial output of a failed run), kept when it was resumed (its rows are an earlier run's, and
  /// this run's are as valid).
  void abandon();
  /// Closes the partial file and rewrites its rows, and those of `output` it lacks, onto `output`, sorted by
  /// `position` (the index of a row's key in the grid; rows of points outside this grid, from an earlier
  /// sweep into the same file, first in their stored order), then removes the partial file. Returns the
  /// number of rows.
  hsize_t commit(const std::unordered_map<std::string, std::size_t>& position);

 private:
  /// The rows of an existing results file, checked as the constructor says.
  std::vector<Row> stored_rows(const std::string& path) const;
  /// What `output` and the partial file are (require_replaceable).
  OutputKind kind() const { return {"sweep", "nystrom-results", group_.c_str()}; }

  std::string output_, partial_, input_;
  std::vector<RunSetting> settings_;
  std::string group_;
  std::vector<Column> columns_;
  AttributeWriter write_attributes_;
  bool output_exists_ = false, partial_exists_ = false, created_partial_ = false;
  std::filesystem::path created_directory_;  ///< the outermost directory open() created for the output
  std::unordered_set<std::string> done_;
  Handle file_;
  std::optional<ResultsTable> table_;
};

}  // namespace nystrom::cli
