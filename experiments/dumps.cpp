#include "dumps.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nystrom/error.hpp"

namespace nystrom::cli {

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

}  // namespace nystrom::cli
