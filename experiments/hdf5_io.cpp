#include "hdf5_io.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <ostream>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "nystrom/error.hpp"
#include "nystrom_git_revision.hpp"

#ifndef NYSTROM_VERSION
#define NYSTROM_VERSION "unknown"
#endif

namespace nystrom::cli {

// ---------------------------------------------------------------------------------------------------------------
// Handles and attributes

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

namespace {

void check(herr_t status, const std::string& what) {
  if (status < 0) throw std::runtime_error("HDF5: " + what + " failed");
}

Handle scalar_space() {
  return Handle(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate");
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

template <class T>
hid_t native_type() {
  if constexpr (std::is_same_v<T, float>) return H5T_NATIVE_FLOAT;
  if constexpr (std::is_same_v<T, double>) return H5T_NATIVE_DOUBLE;
  if constexpr (std::is_same_v<T, std::int64_t>) return H5T_NATIVE_INT64;
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

void flush_file(hid_t file, const std::string& path) {
  if (H5Fflush(file, H5F_SCOPE_GLOBAL) < 0)
    throw std::runtime_error(
        describe(path, ": cannot write the file (HDF5's flush failed; is the disk full?)"));
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

// ---------------------------------------------------------------------------------------------------------------
// Attention dumps

namespace {

/// "file.h5: /layers/00/q" for messages.
std::string where(const std::string& path, const std::string& layer, const std::string& dataset = "") {
  return describe(path, ": /layers/", layer, dataset.empty() ? "" : "/", dataset);
}

/// Shape [B, H, N, last] of a rank-3 or rank-4 float dataset, validated.
std::array<Index, 4> float_tensor_shape(hid_t group, const std::string& path, const std::string& layer,
                                        const std::string& name, int& rank, std::string& dtype) {
  require(object_type(group, name) == H5I_DATASET, where(path, layer, name), ": is not a dataset");
  Handle dataset = open_dataset(group, name);
  {
    Handle type(H5Dget_type(dataset.get()), H5Tclose, "H5Dget_type");
    const std::size_t size = H5Tget_size(type.get());
    require(H5Tget_class(type.get()) == H5T_FLOAT && (size == 4 || size == 8), where(path, layer, name),
            ": type ", describe_type(dataset.get()), ", expected float32 or float64");
  }
  dtype = describe_type(dataset.get());
  const auto dims = dataset_dims(dataset.get());
  rank = int(dims.size());
  require(rank == 3 || rank == 4, where(path, layer, name), ": rank ", rank,
          ", expected 3 [H, N, d] or 4 [B, H, N, d]");
  if (rank == 3) return {1, Index(dims[0]), Index(dims[1]), Index(dims[2])};
  return {Index(dims[0]), Index(dims[1]), Index(dims[2]), Index(dims[3])};
}

/// The shape of a dataset of rank 3 ([H, N, d], read as B = 1) or 4, as stored.
std::string shape_text(const std::array<Index, 4>& s, int rank) {
  if (rank == 3) return describe("[", s[1], ", ", s[2], ", ", s[3], "]");
  return describe("[", s[0], ", ", s[1], ", ", s[2], ", ", s[3], "]");
}

DumpLayer inspect_layer(hid_t file, const std::string& path, const std::string& name) {
  DumpLayer layer;
  layer.name = name;
  Handle group = open_group(file, "layers/" + name);
  for (const char* required : {"q", "k"})
    require(H5Lexists(group.get(), required, H5P_DEFAULT) > 0, where(path, name), ": missing dataset '",
            required, "'");
  int rank_k = 0;
  std::string dtype_k;
  const auto q = float_tensor_shape(group.get(), path, name, "q", layer.rank, layer.dtype);
  const auto k = float_tensor_shape(group.get(), path, name, "k", rank_k, dtype_k);
  require(q == k && layer.rank == rank_k, where(path, name, "k"), ": shape ", shape_text(k, rank_k),
          " does not match q ", shape_text(q, layer.rank));
  layer.batch = q[0];
  layer.heads = q[1];
  layer.tokens = q[2];
  layer.dim = q[3];
  require(layer.batch * layer.heads > 0, where(path, name, "q"), ": no heads (shape ",
          shape_text(q, layer.rank), ")");
  require(layer.tokens * layer.dim > 0, where(path, name, "q"), ": N·d = 0 (shape ",
          shape_text(q, layer.rank), ")");
  if (H5Lexists(group.get(), "v", H5P_DEFAULT) > 0) {
    int rank_v = 0;
    std::string dtype_v;
    const auto v = float_tensor_shape(group.get(), path, name, "v", rank_v, dtype_v);
    require(rank_v == layer.rank && v[0] == q[0] && v[1] == q[1] && v[2] == q[2] && v[3] > 0,
            where(path, name, "v"), ": shape ", shape_text(v, rank_v), " does not match q ",
            shape_text(q, layer.rank), " (expected [B, H, N, dv] with dv > 0)");
    layer.value_dim = v[3];
  }
  if (H5Lexists(group.get(), "attn", H5P_DEFAULT) > 0) {
    int rank_a = 0;
    std::string dtype_a;
    const auto a = float_tensor_shape(group.get(), path, name, "attn", rank_a, dtype_a);
    require(rank_a == layer.rank && a[0] == q[0] && a[1] == q[1] && a[2] == q[2] && a[3] == q[2],
            where(path, name, "attn"), ": shape ", shape_text(a, rank_a), " does not match q ",
            shape_text(q, layer.rank), " (expected [B, H, N, N])");
    layer.has_attention = true;
  }
  layer.has_bias = H5Lexists(group.get(), "bias", H5P_DEFAULT) > 0;
  layer.has_mask = H5Lexists(group.get(), "mask", H5P_DEFAULT) > 0;
  layer.scale = 1.0 / std::sqrt(double(layer.dim));
  if (has_attribute(group.get(), "scale")) {
    const auto scale = read_numeric_attribute(group.get(), "scale");
    require(scale.size() == 1 && std::isfinite(scale[0]), where(path, name),
            ": attribute 'scale' must be one finite number");
    layer.scale = scale[0];
    layer.scale_given = true;
  }
  if (has_attribute(group.get(), "prefix_tokens")) {
    const auto prefix = read_numeric_attribute(group.get(), "prefix_tokens");
    require(prefix.size() == 1 && prefix[0] >= 0 && prefix[0] < double(layer.tokens) &&
                prefix[0] == std::floor(prefix[0]),
            where(path, name), ": attribute 'prefix_tokens' must be one integer in [0, N = ", layer.tokens,
            ")");
    layer.prefix_tokens = Index(prefix[0]);
  }
  if (has_attribute(group.get(), "window")) {
    const auto window = read_numeric_attribute(group.get(), "window");
    const Index grid = layer.tokens - layer.prefix_tokens;
    require(window.size() == 2 && window[0] >= 1 && window[1] >= 1 && window[0] * window[1] == double(grid),
            where(path, name), ": attribute 'window' must be two integers h, w with h·w = N - ",
            "prefix_tokens = ", grid);
    layer.window = {Index(window[0]), Index(window[1])};
  }
  return layer;
}

/// Reads a whole float dataset converted to T, rejecting non-finite values (but −∞ where
/// `negative_infinity`) with their coordinates.
template <class T>
std::vector<T> read_float_dataset(hid_t group, const std::string& path, const std::string& layer,
                                  const std::string& name, const std::vector<hsize_t>& start,
                                  const std::vector<hsize_t>& count, bool negative_infinity = false) {
  Handle dataset = open_dataset(group, name);
  Handle file_space(H5Dget_space(dataset.get()), H5Sclose, "H5Dget_space");
  hsize_t total = 1;
  for (auto c : count) total *= c;
  std::vector<T> data(total);
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
        "select " + name);
  // The memory space has the selection's shape (the same C-order layout as a flat one): with a flat memory
  // space HDF5 maps every element of a chunked dataset to its chunk one at a time (a compressed [3, 1024,
  // 1024] bias: 90-106 ms, with the selection's shape 13-22 ms).
  Handle memory_space = simple_space(count);
  require(H5Dread(dataset.get(), native_type<T>(), memory_space.get(), file_space.get(), H5P_DEFAULT,
                  data.data()) >= 0,
          where(path, layer, name), ": cannot read the dataset");
  const auto bad = std::find_if(data.begin(), data.end(), [&](T x) {
    return !std::isfinite(x) && !(negative_infinity && x == -std::numeric_limits<T>::infinity());
  });
  if (bad != data.end()) {
    // Report the coordinate of the first non-finite element within the whole dataset.
    auto offset = hsize_t(bad - data.begin());
    std::vector<hsize_t> coordinate(count.size());
    for (std::size_t i = count.size(); i-- > 0;) {
      coordinate[i] = start[i] + offset % count[i];
      offset /= count[i];
    }
    std::string text;
    for (std::size_t i = 0; i < coordinate.size(); ++i)
      text += (i ? ", " : "") + std::to_string(coordinate[i]);
    const bool float_range = std::is_same_v<T, float> && std::isinf(*bad);
    throw std::invalid_argument(
        describe(where(path, layer, name), ": non-finite value ", double(*bad), " at [", text, "]",
                 float_range ? " as float32 (a value in the file beyond float32's range, "
                               "3.4e38, reads as inf; --precision double reads it)"
                             : ""));
  }
  return data;
}

/// Start and count selecting batch b.. (all heads when `head` < 0) of a rank-3 or rank-4 dataset.
std::pair<std::vector<hsize_t>, std::vector<hsize_t>> selection(const DumpLayer& layer, Index batch,
                                                                Index head, Index last) {
  const hsize_t h0 = head < 0 ? 0 : hsize_t(head), hc = head < 0 ? hsize_t(layer.heads) : 1;
  if (layer.rank == 3) return {{h0, 0, 0}, {hc, hsize_t(layer.tokens), hsize_t(last)}};
  const hsize_t b0 = batch < 0 ? 0 : hsize_t(batch), bc = batch < 0 ? hsize_t(layer.batch) : 1;
  return {{b0, h0, 0, 0}, {bc, hc, hsize_t(layer.tokens), hsize_t(last)}};
}

/// Copies the row-major N×cols block number `index` of a flat buffer into a column-major matrix, in 64×64
/// tiles: element by element, the writes of a 1024×1024 block go to a new page each and took 9 ms.
template <class T>
Matrix<T> block_of(const std::vector<T>& data, Index index, Index rows, Index cols) {
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const Eigen::Map<const RowMajor> block(data.data() + index * rows * cols, rows, cols);
  constexpr Index tile = 64;
  Matrix<T> out(rows, cols);
  for (Index j = 0; j < cols; j += tile)
    for (Index i = 0; i < rows; i += tile) {
      const Index r = std::min(tile, rows - i), c = std::min(tile, cols - j);
      out.block(i, j, r, c) = block.block(i, j, r, c);
    }
  return out;
}

/// The additive score dataset `name` of a layer, [count, N, N] (`axis` names its first axis: H for `bias`, B
/// for `mask`), converted to T: shape and type validated, NaN and +∞ rejected with their coordinates.
template <class T>
std::vector<T> read_score_term(hid_t group, const std::string& path, const DumpLayer& layer,
                               const std::string& name, Index count, const char* axis) {
  require(object_type(group, name) == H5I_DATASET, where(path, layer.name, name), ": is not a dataset");
  {
    Handle dataset = open_dataset(group, name);
    Handle type(H5Dget_type(dataset.get()), H5Tclose, "H5Dget_type");
    require(H5Tget_class(type.get()) == H5T_FLOAT, where(path, layer.name, name), ": type ",
            describe_type(dataset.get()), ", expected float32 or float64");
    const auto dims = dataset_dims(dataset.get());
    std::string shape;
    for (std::size_t i = 0; i < dims.size(); ++i) shape += describe(i ? ", " : "", dims[i]);
    require(dims == std::vector<hsize_t>{hsize_t(count), hsize_t(layer.tokens), hsize_t(layer.tokens)},
            where(path, layer.name, name), ": shape [", shape, "], expected [", axis, ", N, N] = [", count,
            ", ", layer.tokens, ", ", layer.tokens, "]");
  }
  const std::vector<hsize_t> start = {0, 0, 0},
                             size = {hsize_t(count), hsize_t(layer.tokens), hsize_t(layer.tokens)};
  return read_float_dataset<T>(group, path, layer.name, name, start, size, true);
}

}  // namespace

DumpInfo inspect_dump(const std::string& path) {
  DumpInfo dump;
  dump.path = path;
  Handle file = open_file(path, false);
  if (has_attribute(file.get(), "format")) {
    const auto format = read_string_attribute(file.get(), "format");
    require(format == "nystrom-dump", path, ": attribute format = '", format,
            "', expected 'nystrom-dump' (an attention dump)");
  }
  if (has_attribute(file.get(), "format_version")) {
    const auto version = read_numeric_attribute(file.get(), "format_version");
    require(version.size() == 1 && version[0] == 1, path, ": unknown format_version ",
            version.empty() ? std::nan("") : version[0], " (this build reads format_version 1)");
  }
  if (has_attribute(file.get(), "source")) dump.source = read_string_attribute(file.get(), "source");
  require(H5Lexists(file.get(), "layers", H5P_DEFAULT) > 0, path, ": missing group /layers");
  require(object_type(file.get(), "layers") == H5I_GROUP, path, ": /layers is not a group");
  Handle layers = open_group(file.get(), "layers");
  for (const auto& name : list_group(layers.get())) {
    require(object_type(layers.get(), name) == H5I_GROUP, where(path, name),
            ": is not a group (a layer is a group of datasets q, k, v)");
    dump.layers.push_back(inspect_layer(file.get(), path, name));
  }
  require(!dump.layers.empty(), path, ": group /layers has no layers");
  return dump;
}

template <class T>
std::vector<Head<T>> read_layer_heads(const DumpInfo& dump, const DumpLayer& layer, bool model) {
  Handle file = open_file(dump.path, false);
  Handle group = open_group(file.get(), "layers/" + layer.name);
  auto [start, count] = selection(layer, -1, -1, layer.dim);
  const auto q = read_float_dataset<T>(group.get(), dump.path, layer.name, "q", start, count);
  const auto k = read_float_dataset<T>(group.get(), dump.path, layer.name, "k", start, count);
  std::vector<T> v;
  if (layer.value_dim > 0) {
    auto [v_start, v_count] = selection(layer, -1, -1, layer.value_dim);
    v = read_float_dataset<T>(group.get(), dump.path, layer.name, "v", v_start, v_count);
  }
  std::vector<Head<T>> heads(layer.batch * layer.heads);
  for (Index i = 0; i < Index(heads.size()); ++i) {
    heads[i].q = block_of(q, i, layer.tokens, layer.dim);
    heads[i].k = block_of(k, i, layer.tokens, layer.dim);
    if (layer.value_dim > 0) heads[i].v = block_of(v, i, layer.tokens, layer.value_dim);
    heads[i].window = layer.window;
    heads[i].prefix_tokens = layer.prefix_tokens;
  }
  if (model && (layer.has_bias || layer.has_mask)) {
    const Index n = layer.tokens;
    std::vector<T> bias, mask;
    if (layer.has_bias) bias = read_score_term<T>(group.get(), dump.path, layer, "bias", layer.heads, "H");
    if (layer.has_mask) mask = read_score_term<T>(group.get(), dump.path, layer, "mask", layer.batch, "B");
    for (Index i = 0; i < Index(heads.size()); ++i) {
      Matrix<T>& term = heads[i].bias;
      term = layer.has_bias ? block_of(bias, i % layer.heads, n, n) : block_of(mask, i / layer.heads, n, n);
      if (layer.has_bias && layer.has_mask) term += block_of(mask, i / layer.heads, n, n);
    }
  }
  return heads;
}

template <class T>
Matrix<T> read_attention(const DumpInfo& dump, const DumpLayer& layer, Index batch, Index head) {
  require(layer.has_attention, where(dump.path, layer.name), ": no 'attn' dataset");
  Handle file = open_file(dump.path, false);
  Handle group = open_group(file.get(), "layers/" + layer.name);
  auto [start, count] = selection(layer, layer.rank == 3 ? -1 : batch, head, layer.tokens);
  return block_of(read_float_dataset<T>(group.get(), dump.path, layer.name, "attn", start, count), 0,
                  layer.tokens, layer.tokens);
}

void write_dump_header(hid_t file, const std::string& source) {
  write_attribute(file, "format", std::string("nystrom-dump"));
  write_attribute(file, "format_version", std::vector<std::int64_t>{1});
  write_attribute(file, "source", source);
}

template <class T>
void write_dump_layer(hid_t file, const std::string& name, const DumpLayerData<T>& data) {
  Handle group = create_group(file, "layers/" + name);
  require(!data.without_batch_axis || data.batch == 1, "rank-3 datasets [H, N, d] need batch = 1");
  const auto dims = [&](Index last) {
    if (data.without_batch_axis)
      return std::vector<hsize_t>{hsize_t(data.heads), hsize_t(data.tokens), hsize_t(last)};
    return std::vector<hsize_t>{hsize_t(data.batch), hsize_t(data.heads), hsize_t(data.tokens),
                                hsize_t(last)};
  };
  write_array(group.get(), "q", dims(data.dim), data.q.data());
  write_array(group.get(), "k", dims(data.dim), data.k.data());
  if (!data.v.empty()) write_array(group.get(), "v", dims(data.value_dim), data.v.data());
  if (!data.attention.empty()) write_array(group.get(), "attn", dims(data.tokens), data.attention.data());
  const auto square = [&](Index count) {
    return std::vector<hsize_t>{hsize_t(count), hsize_t(data.tokens), hsize_t(data.tokens)};
  };
  if (!data.bias.empty()) write_array(group.get(), "bias", square(data.heads), data.bias.data());
  if (!data.mask.empty()) write_array(group.get(), "mask", square(data.batch), data.mask.data());
  write_attribute(group.get(), "scale", std::vector<double>{data.scale});
  if (data.window[0] > 0)
    write_attribute(group.get(), "window", std::vector<std::int64_t>{data.window[0], data.window[1]});
  if (data.prefix_tokens > 0)
    write_attribute(group.get(), "prefix_tokens", std::vector<std::int64_t>{data.prefix_tokens});
}

template std::vector<Head<float>> read_layer_heads(const DumpInfo&, const DumpLayer&, bool);
template std::vector<Head<double>> read_layer_heads(const DumpInfo&, const DumpLayer&, bool);
template Matrix<float> read_attention(const DumpInfo&, const DumpLayer&, Index, Index);
template Matrix<double> read_attention(const DumpInfo&, const DumpLayer&, Index, Index);
template void write_dump_layer(hid_t, const std::string&, const DumpLayerData<float>&);
template void write_dump_layer(hid_t, const std::string&, const DumpLayerData<double>&);

// ---------------------------------------------------------------------------------------------------------------
// Results files

std::string git_revision() {
  return NYSTROM_GIT_REVISION;
}

std::string utc_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::array<char, 32> buffer{};
  std::strftime(buffer.data(), buffer.size(), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer.data();
}

Provenance make_provenance(const std::string& command_line, int threads, const std::string& input) {
  return {NYSTROM_VERSION, git_revision(), command_line, utc_timestamp(), threads, input};
}

std::string attention_reference(const std::vector<DumpLayer>& layers, bool model) {
  std::string with_bias, with_mask;
  for (const auto& layer : layers) {
    if (layer.has_bias) with_bias += (with_bias.empty() ? "" : ", ") + layer.name;
    if (layer.has_mask) with_mask += (with_mask.empty() ? "" : ", ") + layer.name;
  }
  const std::string kernel = "kernel(q, k) of each head's q and k alone (exp: exp(s q k^T))";
  if (with_bias.empty() && with_mask.empty())
    return (model ? "model: no selected layer has a bias or mask, so the " : "") + kernel +
           "; no layer has a bias or mask";
  const std::string applied = model ? " applied (layers " : " not applied (layers ";
  std::string terms;
  if (!with_bias.empty()) terms += " bias" + applied + with_bias + ")";
  if (!with_mask.empty()) terms += (with_bias.empty() ? " mask" : ", mask") + applied + with_mask + ")";
  if (!model) return kernel + "; not the model's attention softmax(s q k^T + bias + mask):" + terms;
  return "model: exp(phi(q, k) + bias + mask - c) of each head and its rows normalised, the model's "
         "attention "
         "softmax(s q k^T + bias + mask) for exp:" +
         terms + "; layers without them: the " + kernel;
}

void print_attention_reference(std::ostream& out, const std::string& program,
                               const std::vector<DumpLayer>& layers, bool model) {
  if (std::any_of(layers.begin(), layers.end(),
                  [](const DumpLayer& layer) { return layer.has_bias || layer.has_mask; }))
    out << program << ": attention reference: " << attention_reference(layers, model) << "\n";
}

void write_results_header(hid_t file, const Provenance& provenance) {
  write_attribute(file, "format", std::string("nystrom-results"));
  write_attribute(file, "format_version", std::vector<std::int64_t>{results_format_version});
  write_attribute(file, "program_version", provenance.program_version);
  write_attribute(file, "git_revision", provenance.git_revision);
  write_attribute(file, "command_line", provenance.command_line);
  write_attribute(file, "created", provenance.created);
  write_attribute(file, "threads", std::vector<std::int64_t>{provenance.threads});
  write_attribute(file, "input", provenance.input);
}

namespace {

constexpr hsize_t column_chunk = 256;

Handle column_memory_type(ColumnType type) {
  switch (type) {
    case ColumnType::text:
      return utf8_string_type();
    case ColumnType::int64:
      return Handle(H5Tcopy(H5T_NATIVE_INT64), H5Tclose, "H5Tcopy");
    case ColumnType::float64:
      return Handle(H5Tcopy(H5T_NATIVE_DOUBLE), H5Tclose, "H5Tcopy");
  }
  throw std::logic_error("column type");
}

/// The transfer properties of ResultsTable::append. HDF5 callocs a type-conversion buffer of the transfer's
/// size for every write that converts (each variable-length string cell), 1 MiB by default: on a sweep's
/// one-cell writes that was most of the coordinator thread's time, in page faults and memset. One cell needs
/// a few bytes.
Handle one_cell_transfer() {
  Handle transfer(H5Pcreate(H5P_DATASET_XFER), H5Pclose, "H5Pcreate");
  check(H5Pset_buffer(transfer.get(), 4096, nullptr, nullptr), "H5Pset_buffer");
  return transfer;
}

H5T_class_t column_class(ColumnType type) {
  return type == ColumnType::text ? H5T_STRING : type == ColumnType::int64 ? H5T_INTEGER : H5T_FLOAT;
}

}  // namespace

ResultsTable ResultsTable::create(hid_t file, const std::string& group_name, std::vector<Column> columns) {
  ResultsTable table;
  Handle group = create_group(file, group_name);
  for (const auto& column : columns) {
    const hsize_t initial = 0, maximum = H5S_UNLIMITED;
    Handle space(H5Screate_simple(1, &initial, &maximum), H5Sclose, "H5Screate_simple");
    Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate");
    check(H5Pset_chunk(properties.get(), 1, &column_chunk), "H5Pset_chunk");
    Handle type = column_memory_type(column.type);
    table.datasets_.emplace_back(H5Dcreate2(group.get(), column.name.c_str(), type.get(), space.get(),
                                            H5P_DEFAULT, properties.get(), H5P_DEFAULT),
                                 H5Dclose, "create column " + column.name);
  }
  table.columns_ = std::move(columns);
  table.transfer_ = one_cell_transfer();
  return table;
}

ResultsTable ResultsTable::open(hid_t file, const std::string& group_name, std::vector<Column> columns,
                                const std::string& where_text) {
  ResultsTable table;
  require(!columns.empty(), where_text, ": /", group_name, " has no columns");
  require(H5Lexists(file, group_name.c_str(), H5P_DEFAULT) > 0, where_text, ": missing group /", group_name);
  Handle group = open_group(file, group_name);
  hsize_t rows = std::numeric_limits<hsize_t>::max();
  for (const auto& column : columns) {
    require(H5Lexists(group.get(), column.name.c_str(), H5P_DEFAULT) > 0, where_text, ": /", group_name, "/",
            column.name, ": missing column (the file has another version's columns: write to a new output)");
    Handle dataset = open_dataset(group.get(), column.name);
    Handle type(H5Dget_type(dataset.get()), H5Tclose, "H5Dget_type");
    const auto dims = dataset_dims(dataset.get());
    // Text columns are variable-length strings (a fixed-length one cannot be read as such).
    require(H5Tget_class(type.get()) == column_class(column.type) && dims.size() == 1 &&
                (column.type != ColumnType::text || H5Tis_variable_str(type.get()) > 0),
            where_text, ": /", group_name, "/", column.name, ": unexpected type or rank");
    rows = std::min(rows, dims[0]);
    table.datasets_.push_back(std::move(dataset));
  }
  // A crash between two columns leaves the later ones one row short: the table has the rows every column
  // holds, and a writer cuts the longer columns to them before it appends (a reader leaves the file as it
  // is).
  unsigned intent = 0;
  check(H5Fget_intent(file, &intent), "H5Fget_intent");
  if (intent & H5F_ACC_RDWR)
    for (auto& dataset : table.datasets_)
      if (dataset_dims(dataset.get())[0] != rows) check(H5Dset_extent(dataset.get(), &rows), "H5Dset_extent");
  table.columns_ = std::move(columns);
  table.rows_ = rows;
  table.transfer_ = one_cell_transfer();
  return table;
}

std::string ResultsTable::fixed_size_column() const {
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    Handle space(H5Dget_space(datasets_[c].get()), H5Sclose, "H5Dget_space");
    hsize_t size = 0, maximum = 0;
    H5Sget_simple_extent_dims(space.get(), &size, &maximum);
    if (maximum != H5S_UNLIMITED) return columns_[c].name;
  }
  return "";
}

std::vector<Row> ResultsTable::read_rows() const {
  std::vector<Row> rows(rows_, Row(columns_.size()));
  if (rows_ == 0) return rows;
  const hsize_t first = 0;
  Handle memory = simple_space({rows_});
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const hid_t dataset = datasets_[c].get();
    Handle type = column_memory_type(columns_[c].type);
    // The first rows_ entries (a longer column of a file opened read-only keeps its extra rows).
    Handle selected(H5Dget_space(dataset), H5Sclose, "H5Dget_space");
    check(H5Sselect_hyperslab(selected.get(), H5S_SELECT_SET, &first, nullptr, &rows_, nullptr),
          "select rows");
    const hid_t space = selected.get();
    switch (columns_[c].type) {
      case ColumnType::text: {
        std::vector<char*> texts(rows_, nullptr);
        check(H5Dread(dataset, type.get(), memory.get(), space, H5P_DEFAULT, texts.data()),
              "read " + columns_[c].name);
        for (hsize_t r = 0; r < rows_; ++r) rows[r][c] = std::string(texts[r] ? texts[r] : "");
        H5Dvlen_reclaim(type.get(), memory.get(), H5P_DEFAULT, texts.data());
        break;
      }
      case ColumnType::int64: {
        std::vector<std::int64_t> values(rows_);
        check(H5Dread(dataset, type.get(), memory.get(), space, H5P_DEFAULT, values.data()),
              "read " + columns_[c].name);
        for (hsize_t r = 0; r < rows_; ++r) rows[r][c] = values[r];
        break;
      }
      case ColumnType::float64: {
        std::vector<double> values(rows_);
        check(H5Dread(dataset, type.get(), memory.get(), space, H5P_DEFAULT, values.data()),
              "read " + columns_[c].name);
        for (hsize_t r = 0; r < rows_; ++r) rows[r][c] = values[r];
        break;
      }
    }
  }
  return rows;
}

namespace {

/// Cell c of every row, contiguous (a numeric column as H5Dwrite reads it).
template <class Cell>
std::vector<Cell> column_cells(std::span<const Row> rows, std::size_t c) {
  std::vector<Cell> cells;
  cells.reserve(rows.size());
  for (const Row& row : rows) cells.push_back(std::get<Cell>(row[c]));
  return cells;
}

}  // namespace

void ResultsTable::append(const Row& row) {
  append(std::span<const Row>(&row, 1));
}

void ResultsTable::append(std::span<const Row> rows) {
  for (const Row& row : rows)
    require(row.size() == columns_.size(), "results row has ", row.size(), " cells for ", columns_.size(),
            " columns");
  if (rows.empty()) return;
  const hsize_t count = rows.size(), extent = rows_ + count;
  Handle memory = simple_space({count});
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const hid_t dataset = datasets_[c].get();
    check(H5Dset_extent(dataset, &extent), "extend " + columns_[c].name);
    Handle space(H5Dget_space(dataset), H5Sclose, "H5Dget_space");
    check(H5Sselect_hyperslab(space.get(), H5S_SELECT_SET, &rows_, nullptr, &count, nullptr), "select");
    Handle type = column_memory_type(columns_[c].type);
    const auto write = [&](const void* data) {
      check(H5Dwrite(dataset, type.get(), memory.get(), space.get(), transfer_.get(), data),
            "write " + columns_[c].name);
    };
    if (columns_[c].type == ColumnType::text) {
      std::vector<const char*> texts;
      texts.reserve(count);
      for (const Row& row : rows) texts.push_back(std::get<std::string>(row[c]).c_str());
      write(texts.data());
    } else if (columns_[c].type == ColumnType::int64) {
      write(column_cells<std::int64_t>(rows, c).data());
    } else {
      write(column_cells<double>(rows, c).data());
    }
  }
  rows_ += count;
}

void ResultsTable::truncate(hsize_t rows) {
  rows_ = std::min(rows, rows_);
  for (std::size_t c = 0; c < columns_.size(); ++c)
    check(H5Dset_extent(datasets_[c].get(), &rows_), "cut " + columns_[c].name);
}

std::string row_key(const std::vector<Column>& columns, const Row& row) {
  std::string key;
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!columns[c].parameter) continue;
    if (const auto* text = std::get_if<std::string>(&row[c])) {
      key += *text;
    } else if (const auto* integer = std::get_if<std::int64_t>(&row[c])) {
      key += std::to_string(*integer);
    } else {
      std::array<char, 32> buffer{};
      std::snprintf(buffer.data(), buffer.size(), "%.17g", std::get<double>(row[c]));
      key += buffer.data();
    }
    key += '\x1f';
  }
  return key;
}

}  // namespace nystrom::cli
