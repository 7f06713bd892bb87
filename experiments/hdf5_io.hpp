#pragma once
/// @file hdf5_io.hpp
/// HDF5 I/O of the `nystrom` program over the HDF5 C API (docs/formats.md §1–2): RAII handles, attributes,
/// the attention dump reader and writer, and results tables made of equal-length, extendable 1-D column
/// datasets that h5py and pandas read without this tool. Every input error throws std::invalid_argument
/// naming the file, group and dataset.

#include <hdf5.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "nystrom/head.hpp"
#include "nystrom/point_record.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cli {

// ---------------------------------------------------------------------------------------------------------------
// Handles and attributes

/// Owns one HDF5 identifier and releases it with its matching close function (H5Fclose, H5Dclose, ...).
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  /// Takes ownership of `id`; throws std::runtime_error with `what` when `id` is negative (the call failed).
  Handle(hid_t id, Closer closer, const std::string& what);
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept;
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  /// Closes the identifier now (idempotent).
  void reset();

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

/// Prepares HDF5 for the program; the first HDF5 call of a run. Silences its automatic error-stack printing
/// (errors surface as exceptions with our own messages) and keeps it from closing, at exit, files whose close
/// failed (a full disk): its exit handler would retry the flush and crash. Every file the program writes is
/// closed by its Handle before exit.
void prepare_hdf5();

/// Flushes an open file; throws std::runtime_error naming `path` when its data cannot be written (a full
/// disk, a lost file system).
void flush_file(hid_t file, const std::string& path);

/// Opens an existing HDF5 file; throws std::invalid_argument naming the path if it is missing or not HDF5.
Handle open_file(const std::string& path, bool writable);
/// Creates (truncating) an HDF5 file.
Handle create_file(const std::string& path);
/// True if `path` (relative to `location`, e.g. "layers/00/q") names an existing link, checking each level.
bool has_link(hid_t location, const std::string& path);
/// Opens a group or dataset by path; throws std::runtime_error naming it on failure.
Handle open_group(hid_t location, const std::string& path);
Handle open_dataset(hid_t location, const std::string& path);
/// The kind of the object at `path` (H5I_GROUP, H5I_DATASET, …), whose link must exist; throws
/// std::invalid_argument naming the file and the link where it leads nowhere (a dangling soft or external
/// link).
H5I_type_t object_type(hid_t location, const std::string& path);
/// Creates a group (and its missing parents).
Handle create_group(hid_t location, const std::string& path);
/// Names of the links directly in a group, in name order.
std::vector<std::string> list_group(hid_t group);
/// Dimensions of a dataset's dataspace.
std::vector<hsize_t> dataset_dims(hid_t dataset);
/// "float32", "float64", "int64", "string", ... for messages and `info`.
std::string describe_type(hid_t dataset);

bool has_attribute(hid_t object, const std::string& name);
/// Reads a scalar string attribute (fixed or variable length).
std::string read_string_attribute(hid_t object, const std::string& name);
/// Reads all elements of a numeric attribute, converted to double.
std::vector<double> read_numeric_attribute(hid_t object, const std::string& name);
/// Writes (replacing) a scalar UTF-8 string attribute.
void write_attribute(hid_t object, const std::string& name, const std::string& value);
/// Writes (replacing) a numeric attribute: a scalar for one value, else a 1-D array.
void write_attribute(hid_t object, const std::string& name, const std::vector<double>& values);
void write_attribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values);

/// Writes a new contiguous dataset of float, double or int64 with the given dims (row-major data).
template <class T>
void write_array(hid_t location, const std::string& name, const std::vector<hsize_t>& dims, const T* data);

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

// ---------------------------------------------------------------------------------------------------------------
// Attention dumps (docs/formats.md §1)

/// One layer of a dump, as described by its datasets and attributes (no data read yet).
struct DumpLayer {
  std::string name;  ///< group name under /layers
  int rank = 4;      ///< 3 ([H, N, d], B = 1) or 4 ([B, H, N, d])
  Index batch = 1, heads = 0, tokens = 0, dim = 0;
  Index value_dim = 0;         ///< dv, 0 without v
  bool has_attention = false;  ///< an `attn` [B, H, N, N] dataset is present
  bool has_bias = false;       ///< a `bias` dataset is present (read with `--reference model`)
  bool has_mask = false;       ///< a `mask` dataset is present (read with `--reference model`)
  double scale = 0;            ///< the `scale` attribute, else 1/√d
  bool scale_given = false;
  std::array<Index, 2> window{};  ///< the `window` attribute (h, w) of the grid tokens, {0, 0} without it
  Index prefix_tokens = 0;        ///< the `prefix_tokens` attribute: leading tokens not on the window grid
  std::string dtype;              ///< storage type of q, e.g. "float32"
};

/// A dump's metadata: attributes and layers, validated for shape consistency.
struct DumpInfo {
  std::string path;
  std::string source;  ///< the `source` attribute ("" without it)
  std::int64_t format_version = 1;
  std::vector<DumpLayer> layers;
};

/// Opens and validates the structure of a dump; throws std::invalid_argument naming the file, group and
/// dataset for a missing file, a file that is not HDF5, a wrong `format`, an unknown format_version, no
/// layers, a missing q or k, a rank other than 3 or 4, a non-float type, mismatched shapes, N·d = 0, a
/// prefix_tokens attribute outside [0, N), or a window attribute that does not hold the N − prefix_tokens
/// grid tokens.
DumpInfo inspect_dump(const std::string& path);

/// Every head of one layer, index b·H + h, converted to T. Where `model` (`--reference model`), each head's
/// Head::bias is the layer's `bias` [H, N, N] of its head plus its `mask` [B, N, N] of its batch entry (those
/// present; none: no bias). Throws std::invalid_argument naming the file, dataset and element for non-finite
/// values (−∞ is allowed in `bias` and `mask`), and naming the dataset for a `bias` or `mask` of another
/// shape or a non-float type.
template <class T>
std::vector<Head<T>> read_layer_heads(const DumpInfo& dump, const DumpLayer& layer, bool model = false);

/// The N×N `attn` of one head of a layer (which must have it), converted to T; non-finite values throw.
template <class T>
Matrix<T> read_attention(const DumpInfo& dump, const DumpLayer& layer, Index batch, Index head);

/// Arrays of one layer to write, row-major [B, H, N, ·] (v and attn may be empty).
template <class T>
struct DumpLayerData {
  Index batch = 1, heads = 1, tokens = 0, dim = 0, value_dim = 0;
  std::vector<T> q, k, v, attention;
  std::vector<T> bias;              ///< [H, N, N], written as `bias` when not empty
  std::vector<T> mask;              ///< [B, N, N], written as `mask` when not empty
  double scale = 0;                 ///< written as the `scale` attribute
  std::array<Index, 2> window{};    ///< written as the `window` attribute when nonzero
  Index prefix_tokens = 0;          ///< written as the `prefix_tokens` attribute when nonzero
  bool without_batch_axis = false;  ///< write rank-3 [H, N, ·] datasets (requires batch = 1)
};

/// Writes the root attributes of a dump (format, format_version = 1, source).
void write_dump_header(hid_t file, const std::string& source);
/// Writes /layers/<name>/{q,k[,v][,attn][,bias][,mask]} with attributes.
template <class T>
void write_dump_layer(hid_t file, const std::string& name, const DumpLayerData<T>& data);

// ---------------------------------------------------------------------------------------------------------------
// Results files (docs/formats.md §2)

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
