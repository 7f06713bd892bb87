#pragma once
/// @file results_files.hpp
/// Results files (docs/formats.md §2): provenance, the root attributes, and results tables made of
/// equal-length, extendable 1-D column datasets that h5py and pandas read without this tool.

#include <cstdint>
#include <iosfwd>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "dumps.hpp"
#include "hdf5_handles.hpp"
#include "nystrom/point_record.hpp"

namespace nystrom::cli {

/// Provenance attributes of a results file.
struct Provenance {
  std::string program_version;
  std::string git_revision;
  std::string command_line;
  std::string created;  ///< ISO 8601 UTC
  std::int64_t threads = 1;
  std::string input;
};

/// Provenance for this run: version, git revision (see git_revision), the command line, now, threads, input.
Provenance make_provenance(const std::string& command_line, int threads, const std::string& input);
/// `git describe --always --dirty` of the source tree when the program was built (cmake/GitRevision.cmake),
/// or "unknown" where it was built without git.
std::string git_revision();
/// The current time as ISO 8601 UTC, e.g. "2026-11-21T21:07:19Z".
std::string utc_timestamp();
/// The results format version this build writes (docs/formats.md §2). Version 2: /sweep's `landmarks` holds
/// m only (0 for methods without landmarks), performer's r is in `features`, linformer's k in `projected`.
/// Version 3: the /bench tables likewise, and their `dtype` column is `precision` (`float`, `double`).
/// Version 4: one vocabulary (CHANGELOG.md): the root attribute `matrix_free_forced` is `matrix_free`,
/// `method_switches` gave way to the /sweep parameter columns different_indices, copy_rows,
/// share_projections and front_padding, and the columns of optimality and certificates are new.
constexpr std::int64_t results_format_version = 4;
/// The oldest results format version whose /sweep table is this build's: a sweep resumes into such a file.
constexpr std::int64_t resumable_format_version = 4;

/// Writes format = "nystrom-results", format_version = results_format_version and the provenance attributes
/// on the root group.
void write_results_header(hid_t file, const Provenance& provenance);

/// The root attribute `attention_reference` of `sweep` and `spectrum` (docs/formats.md §2): what the exact
/// side is computed from. `model` false (`--reference kernel`): the kernels of each head's q and k alone,
/// naming the layers among `layers` whose dump holds a `bias` or `mask` (docs/formats.md §1) that is not
/// applied; `model` true: those layers' bias and mask added to the exponent, naming them.
std::string attention_reference(const std::vector<DumpLayer>& layers, bool model);
/// Prints `program: attention reference: ...` on `out` where some of `layers` has a bias or mask.
void print_attention_reference(std::ostream& out, const std::string& program,
                               const std::vector<DumpLayer>& layers, bool model);

/// Column types, columns and cells of a results table: the library's (point_record.hpp).
using nystrom::Cell;
using nystrom::Column;
using nystrom::ColumnType;
/// One row (cells in column order).
using Row = std::vector<Cell>;

/// A group of equal-length, chunked, extendable 1-D column datasets, appended one row at a time.
class ResultsTable {
 public:
  /// Creates the column datasets in a new group `group` of `file`.
  static ResultsTable create(hid_t file, const std::string& group, std::vector<Column> columns);
  /// Opens an existing table; throws std::invalid_argument naming the file and column when a column is
  /// missing or has another type. Columns of unequal
  /// length (a crash between columns) are cut to the shortest.
  static ResultsTable open(hid_t file, const std::string& group, std::vector<Column> columns,
                           const std::string& where);

  const std::vector<Column>& columns() const { return columns_; }
  hsize_t rows() const { return rows_; }
  /// The first column of fixed size, which append cannot extend (a column rewritten by another tool, e.g.
  /// h5py without maxshape); empty where every column is extendable.
  std::string fixed_size_column() const;
  /// Every stored row.
  std::vector<Row> read_rows() const;
  /// Appends one row (extends every column by one element). The caller flushes the file.
  void append(const Row& row);
  /// Appends rows, each column extended and written once for all of them.
  void append(std::span<const Row> rows);
  /// Cuts every column back to its first `rows` rows (at most rows()).
  void truncate(hsize_t rows);

 private:
  std::vector<Column> columns_;
  std::vector<Handle> datasets_;
  Handle transfer_;  ///< dataset transfer properties of append
  hsize_t rows_ = 0;
};

/// The resume key of a row: its parameter cells, printed exactly (%.17g for doubles), joined by '\x1f'.
std::string row_key(const std::vector<Column>& columns, const Row& row);

}  // namespace nystrom::cli
