#pragma once
/// @file hdf5_handles.hpp
/// RAII handles over the HDF5 C API and the calls the `nystrom` program makes through them: files, groups,
/// datasets, attributes and whole arrays. Every input error throws std::invalid_argument naming the file,
/// group and dataset.

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace nystrom::cli {

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

/// Throws std::runtime_error "HDF5: `what` failed" when `status` is negative (the call failed).
void check(herr_t status, const std::string& what);
/// A simple dataspace of dimensions `dims`.
Handle simple_space(const std::vector<hsize_t>& dims);
/// The variable-length UTF-8 string type of string attributes and text columns.
Handle utf8_string_type();

/// The native HDF5 type of float, double or std::int64_t.
template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
}

}  // namespace nystrom::cli
