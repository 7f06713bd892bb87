#include "hdf5_handles.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "nystrom/error.hpp"

namespace nystrom::cli {

Handle::Handle(hid_t id, Closer closer, const std::string& what) : id_(id), closer_(closer) {
  if (id_ < 0) throw std::runtime_error("HDF5: " + what + " failed");
}

Handle& Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    closer_ = other.closer_;
    other.id_ = -1;
  }
  return *this;
}

void Handle::reset() {
  if (id_ >= 0 && closer_) closer_(id_);
  id_ = -1;
}

void prepare_hdf5() {
  H5dont_atexit();
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

void check(herr_t status, const std::string& what) {
  if (status < 0) throw std::runtime_error("HDF5: " + what + " failed");
}

Handle simple_space(const std::vector<hsize_t>& dims) {
  return Handle(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose, "H5Screate_simple");
}

Handle utf8_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
  check(H5Tset_size(type.get(), H5T_VARIABLE), "H5Tset_size");
  check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset");
  return type;
}

namespace {

Handle scalar_space() {
  return Handle(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate");
}

void delete_attribute_if_present(hid_t object, const std::string& name) {
  if (has_attribute(object, name)) check(H5Adelete(object, name.c_str()), "H5Adelete " + name);
}

template <class T>
void write_numeric_attribute(hid_t object, const std::string& name, const std::vector<T>& values) {
  delete_attribute_if_present(object, name);
  Handle space = values.size() == 1 ? scalar_space() : simple_space({hsize_t(values.size())});
  Handle attribute(H5Acreate2(object, name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, "H5Acreate2 " + name);
  check(H5Awrite(attribute.get(), native_type<T>(), values.data()), "H5Awrite " + name);
}

}  // namespace

Handle open_file(const std::string& path, bool writable) {
  require(std::filesystem::exists(path), path, ": no such file");
  require(!std::filesystem::is_directory(path), path, ": is a directory, not an HDF5 file");
  require(H5Fis_hdf5(path.c_str()) > 0, path, ": not an HDF5 file");
  const hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  require(id >= 0, path, ": cannot open the HDF5 file", writable ? " for writing" : "");
  return Handle(id, H5Fclose, "H5Fopen " + path);
}

Handle create_file(const std::string& path) {
  return Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "create " + path);
}

bool has_link(hid_t location, const std::string& path) {
  std::size_t end = 0;
  while (end != std::string::npos) {
    end = path.find('/', end + 1);
    const auto prefix = path.substr(0, end);
    if (prefix.empty() || prefix == "/") continue;
    if (H5Lexists(location, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (end != std::string::npos && H5Oexists_by_name(location, prefix.c_str(), H5P_DEFAULT) <= 0)
      return false;
  }
  return true;
}

Handle open_group(hid_t location, const std::string& path) {
  return Handle(H5Gopen2(location, path.c_str(), H5P_DEFAULT), H5Gclose, "open group " + path);
}

Handle open_dataset(hid_t location, const std::string& path) {
  return Handle(H5Dopen2(location, path.c_str(), H5P_DEFAULT), H5Dclose, "open dataset " + path);
}

Handle create_group(hid_t location, const std::string& path) {
  Handle properties(H5Pcreate(H5P_LINK_CREATE), H5Pclose, "H5Pcreate");
  check(H5Pset_create_intermediate_group(properties.get(), 1), "H5Pset_create_intermediate_group");
  return Handle(H5Gcreate2(location, path.c_str(), properties.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose,
                "create group " + path);
}

std::vector<std::string> list_group(hid_t group) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  };
  check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect, &names), "H5Literate");
  return names;
}

std::vector<hsize_t> dataset_dims(hid_t dataset) {
  Handle space(H5Dget_space(dataset), H5Sclose, "H5Dget_space");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  std::vector<hsize_t> dims(std::max(rank, 0));
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string describe_type(hid_t dataset) {
  Handle type(H5Dget_type(dataset), H5Tclose, "H5Dget_type");
  const auto size = H5Tget_size(type.get());
  switch (H5Tget_class(type.get())) {
    case H5T_FLOAT:
      return describe("float", 8 * size);
    case H5T_INTEGER:
      return describe(H5Tget_sign(type.get()) == H5T_SGN_NONE ? "uint" : "int", 8 * size);
    case H5T_STRING:
      return "string";
    default:
      return "other";
  }
}

bool has_attribute(hid_t object, const std::string& name) {
  return H5Aexists(object, name.c_str()) > 0;
}

namespace {

/// "file.h5: /layers/00" (an object's file and path), for messages.
std::string object_path(hid_t object) {
  std::string file(std::size_t(std::max<ssize_t>(H5Fget_name(object, nullptr, 0), 0)), '\0');
  H5Fget_name(object, file.data(), file.size() + 1);
  std::string path(std::size_t(std::max<ssize_t>(H5Iget_name(object, nullptr, 0), 0)), '\0');
  H5Iget_name(object, path.data(), path.size() + 1);
  return describe(file, ": ", path);
}

}  // namespace

H5I_type_t object_type(hid_t location, const std::string& path) {
  if (H5Oexists_by_name(location, path.c_str(), H5P_DEFAULT) <= 0) {
    const auto where = object_path(location);
    throw std::invalid_argument(describe(where, where.ends_with('/') ? "" : "/", path,
                                         ": is a link to nothing (a soft or external link whose target is "
                                         "missing)"));
  }
  const Handle object(H5Oopen(location, path.c_str(), H5P_DEFAULT), H5Oclose, "open object " + path);
  return H5Iget_type(object.get());
}

std::string read_string_attribute(hid_t object, const std::string& name) {
  Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + name);
  Handle type(H5Aget_type(attribute.get()), H5Tclose, "H5Aget_type");
  require(H5Tget_class(type.get()) == H5T_STRING, object_path(object), ": attribute '", name,
          "' is not a string");
  Handle space(H5Aget_space(attribute.get()), H5Sclose, "H5Aget_space");
  const hssize_t count = H5Sget_simple_extent_npoints(space.get());
  require(count == 1, object_path(object), ": attribute '", name, "' holds ", count,
          " strings, expected one");
  if (H5Tis_variable_str(type.get()) > 0) {
    Handle memory = utf8_string_type();
    char* text = nullptr;
    check(H5Aread(attribute.get(), memory.get(), &text), "H5Aread " + name);
    std::string value = text ? text : "";
    H5free_memory(text);
    return value;
  }
  std::string buffer(H5Tget_size(type.get()), '\0');
  Handle memory(H5Tcopy(type.get()), H5Tclose, "H5Tcopy");
  check(H5Aread(attribute.get(), memory.get(), buffer.data()), "H5Aread " + name);
  return buffer.substr(0, buffer.find('\0'));
}

std::vector<double> read_numeric_attribute(hid_t object, const std::string& name) {
  Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + name);
  Handle type(H5Aget_type(attribute.get()), H5Tclose, "H5Aget_type");
  const auto type_class = H5Tget_class(type.get());
  require(type_class == H5T_FLOAT || type_class == H5T_INTEGER, object_path(object), ": attribute '", name,
          "' is not numeric");
  Handle space(H5Aget_space(attribute.get()), H5Sclose, "H5Aget_space");
  std::vector<double> values(std::max<hssize_t>(H5Sget_simple_extent_npoints(space.get()), 0));
  check(H5Aread(attribute.get(), H5T_NATIVE_DOUBLE, values.data()), "H5Aread " + name);
  return values;
}

void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  delete_attribute_if_present(object, name);
  Handle type = utf8_string_type();
  Handle space = scalar_space();
  Handle attribute(H5Acreate2(object, name.c_str(), type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, "H5Acreate2 " + name);
  const char* text = value.c_str();
  check(H5Awrite(attribute.get(), type.get(), &text), "H5Awrite " + name);
}

void write_attribute(hid_t object, const std::string& name, const std::vector<double>& values) {
  write_numeric_attribute(object, name, values);
}

void write_attribute(hid_t object, const std::string& name, const std::vector<std::int64_t>& values) {
  write_numeric_attribute(object, name, values);
}

template <class T>
void write_array(hid_t location, const std::string& name, const std::vector<hsize_t>& dims, const T* data) {
  Handle space = simple_space(dims);
  Handle dataset(H5Dcreate2(location, name.c_str(), native_type<T>(), space.get(), H5P_DEFAULT, H5P_DEFAULT,
                            H5P_DEFAULT),
                 H5Dclose, "create dataset " + name);
  check(H5Dwrite(dataset.get(), native_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), "write " + name);
}

template void write_array<float>(hid_t, const std::string&, const std::vector<hsize_t>&, const float*);
template void write_array<double>(hid_t, const std::string&, const std::vector<hsize_t>&, const double*);
template void write_array<std::int64_t>(hid_t, const std::string&, const std::vector<hsize_t>&,
                                        const std::int64_t*);

void flush_file(hid_t file, const std::string& path) {
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0)
    throw std::runtime_error(
        describe(path, ": cannot write the file (HDF5's flush failed; is the disk full?)"));
}

}  // namespace nystrom::cli
