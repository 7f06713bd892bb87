#pragma once
/// @file dumps.hpp
/// Attention dumps (docs/formats.md §1): the reader that inspects and validates a dump and reads its heads
/// and attention, and the writer of dump headers and layers.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "hdf5_handles.hpp"
#include "nystrom/head.hpp"
#include "nystrom/types.hpp"

namespace nystrom::cli {

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

}  // namespace nystrom::cli
