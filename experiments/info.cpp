// `nystrom info FILE`: a human summary of an attention dump (layers, shapes, dtypes, source) or of a results
// file (provenance, rows, the values of every parameter column, spectra groups).
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "dumps.hpp"
#include "hdf5_handles.hpp"
#include "results_files.hpp"
#include "subcommands.hpp"

namespace nystrom::cli {

namespace {

void describe_dump(const std::string& path, std::ostream& out) {
  const DumpInfo dump = inspect_dump(path);
  // Read q, k and v too, so that `info` rejects non-finite values like every other reader.
  for (const auto& layer : dump.layers) read_layer_heads<double>(dump, layer);
  out << path << ": attention dump (format_version " << dump.format_version << ")\n";
  if (!dump.source.empty()) out << "  source: " << dump.source << "\n";
  out << "  layers: " << dump.layers.size() << "\n";
  for (const auto& layer : dump.layers) {
    out << "  /layers/" << layer.name << ": B = " << layer.batch << ", H = " << layer.heads
        << ", N = " << layer.tokens << ", d = " << layer.dim
        << ", dv = " << (layer.value_dim ? std::to_string(layer.value_dim) : "- (no v)") << ", "
        << layer.dtype << (layer.rank == 3 ? " (rank 3)" : "") << ", scale = " << layer.scale
        << (layer.scale_given ? "" : " (default 1/sqrt(d))");
    if (layer.window[0] > 0) out << ", window " << layer.window[0] << "x" << layer.window[1];
    if (layer.prefix_tokens > 0) out << ", prefix_tokens " << layer.prefix_tokens;
    if (layer.has_attention) out << ", attn";
    if (layer.has_bias) out << ", bias";
    if (layer.has_mask) out << ", mask";
    out << "\n";
  }
}

/// The type class and element count of an attribute (read_string_attribute reads one string).
struct AttributeShape {
  H5T_class_t type_class;
  hssize_t count;
};

AttributeShape attribute_shape(hid_t object, const std::string& name) {
  const Handle attribute(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "open attribute " + name);
  const Handle type(H5Aget_type(attribute.get()), H5Tclose, "H5Aget_type " + name);
  const Handle space(H5Aget_space(attribute.get()), H5Sclose, "H5Aget_space " + name);
  return {H5Tget_class(type.get()), H5Sget_simple_extent_npoints(space.get())};
}

/// The value of attribute `name` of `object` as text: a string, or numbers joined by ", ". An attribute no
/// writer of docs/formats.md makes (an array of strings, a compound) is named by its kind only.
std::string attribute_text(hid_t object, const std::string& name) {
  const auto [type_class, count] = attribute_shape(object, name);
  switch (type_class) {
    case H5T_STRING:
      return count == 1 ? read_string_attribute(object, name) : describe("(", count, " strings, not shown)");
    case H5T_INTEGER:
    case H5T_FLOAT: {
      std::vector<std::string> items;
      for (double value : read_numeric_attribute(object, name)) items.push_back(describe(value));
      return join(items);
    }
    default:
      return "(neither a string nor a number, not shown)";
  }
}

/// Every attribute of `object` as name = value (strings and numbers).
void print_attributes(hid_t object, std::ostream& out, const std::string& indent) {
  struct Context {
    std::vector<std::string> names;
  } context;
  H5Aiterate2(
      object, H5_INDEX_NAME, H5_ITER_INC, nullptr,
      [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
        static_cast<Context*>(data)->names.emplace_back(name);
        return 0;
      },
      &context);
  for (const auto& name : context.names)
    out << indent << name << " = " << attribute_text(object, name) << "\n";
}

/// Throws std::invalid_argument naming `path` (the file) when the link `name` of `location`, shown as
/// `shown`, is not a `kind` (H5I_GROUP or H5I_DATASET) object, saying what it is and what was `expected`.
void require_object(hid_t location, const std::string& name, H5I_type_t kind, const std::string& path,
                    const std::string& shown, const std::string& expected) {
  require(H5Oexists_by_name(location, name.c_str(), H5P_DEFAULT) > 0, path, ": ", shown,
          " is a link to nothing, expected ", expected);
  const H5I_type_t actual = object_type(location, name);
  require(actual == kind, path, ": ", shown, " is a ",
          actual == H5I_GROUP     ? "group"
          : actual == H5I_DATASET ? "dataset"
                                  : "named datatype",
          ", expected ", expected);
}

/// The columns of the results table /<table> with their types, checked to be a table (docs/formats.md §2): a
/// group of 1-D column datasets of one length, but for the one-row shortfall a crash between two columns
/// leaves (ResultsTable::open reads the rows every column holds).
std::vector<Column> table_columns(hid_t file, const std::string& table, const std::string& path) {
  const std::string where = "/" + table;
  require_object(file, table, H5I_GROUP, path, where, "a group of column datasets");
  Handle group = open_group(file, table);
  std::vector<Column> columns;
  std::vector<hsize_t> lengths;
  for (const auto& name : list_group(group.get())) {
    require_object(group.get(), name, H5I_DATASET, path, where + "/" + name, "a column dataset");
    Handle dataset = open_dataset(group.get(), name);
    const auto dims = dataset_dims(dataset.get());
    require(dims.size() == 1, path, ": ", where, "/", name, " has rank ", dims.size(),
            ", expected a 1-D column");
    const auto type = describe_type(dataset.get());
    columns.push_back({name,
                       type == "string"          ? ColumnType::text
                       : type.starts_with("int") ? ColumnType::int64
                                                 : ColumnType::float64,
                       false});
    lengths.push_back(dims[0]);
  }
  require(!columns.empty(), path, ": ", where, " has no column datasets (a table is a group of 1-D columns)");
  const auto [shortest, longest] = std::minmax_element(lengths.begin(), lengths.end());
  require(*longest - *shortest <= 1, path, ": ", where,
          " columns have different lengths: ", columns[shortest - lengths.begin()].name, " has ", *shortest,
          " rows, ", columns[longest - lengths.begin()].name, " has ", *longest,
          " (a crash between two columns leaves one row of difference at most)");
  return columns;
}

/// Writes the `/<table>: R rows, C columns` line and each column's distinct values or range.
void describe_table(hid_t file, const std::string& table, const std::string& path, std::ostream& out) {
  const std::vector<Column> columns = table_columns(file, table, path);
  const auto rows = ResultsTable::open(file, table, columns, path).read_rows();
  out << "  /" << table << ": " << rows.size() << " rows, " << columns.size() << " columns\n";
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (rows.empty()) break;
    out << "    " << std::left << std::setw(26) << columns[c].name << " ";
    if (columns[c].type == ColumnType::text) {
      std::set<std::string> distinct;
      for (const auto& row : rows) distinct.insert(std::get<std::string>(row[c]));
      if (distinct.size() <= 8) {
        out << join(std::vector<std::string>(distinct.begin(), distinct.end()));
      } else {
        out << distinct.size() << " distinct values";
      }
    } else {
      double low = INFINITY, high = -INFINITY;
      std::size_t nan = 0;
      std::set<double> distinct;
      for (const auto& row : rows) {
        const double x = columns[c].type == ColumnType::int64 ? double(std::get<std::int64_t>(row[c]))
                                                              : std::get<double>(row[c]);
        if (std::isnan(x)) {
          ++nan;
          continue;
        }
        low = std::min(low, x);
        high = std::max(high, x);
        if (distinct.size() <= 8) distinct.insert(x);
      }
      if (distinct.size() <= 8 && columns[c].type == ColumnType::int64) {
        std::vector<std::string> items;
        for (double x : distinct) items.push_back(describe(x));
        out << join(items);
      } else if (nan < rows.size()) {
        out << "[" << low << ", " << high << "]";
      }
      if (nan) out << (nan < rows.size() ? ", " : "") << nan << " NaN";
    }
    out << "\n";
  }
}

/// Writes one line per /spectra/<layer> group: its datasets with their shapes, then its attributes.
void describe_spectra(hid_t file, const std::string& path, std::ostream& out) {
  require_object(file, "spectra", H5I_GROUP, path, "/spectra", "a group of layer groups");
  Handle spectra = open_group(file, "spectra");
  for (const auto& layer : list_group(spectra.get())) {
    const std::string shown = "/spectra/" + layer;
    require_object(spectra.get(), layer, H5I_GROUP, path, shown, "a group of spectrum datasets");
    Handle group = open_group(spectra.get(), layer);
    out << "  " << shown << ":";
    for (const auto& name : list_group(group.get())) {
      require_object(group.get(), name, H5I_DATASET, path, shown + "/" + name, "a dataset");
      Handle dataset = open_dataset(group.get(), name);
      out << " " << name << "[";
      const auto dims = dataset_dims(dataset.get());
      for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? "," : "") << dims[i];
      out << "]";
    }
    out << "\n";
    print_attributes(group.get(), out, "    ");
  }
}

void describe_results(const std::string& path, hid_t file, std::ostream& out) {
  out << path << ": results file\n";
  print_attributes(file, out, "  ");
  // Every group but /spectra is a table: /sweep, the /bench tables, /vision and /vision_windows.
  for (const auto& name : list_group(file))
    if (name != "spectra") describe_table(file, name, path, out);
  if (H5Lexists(file, "spectra", H5P_DEFAULT) > 0) describe_spectra(file, path, out);
}

/// True for a results file (format nystrom-results), false for an attention dump: format nystrom-dump, or
/// none on a file with /layers (a user's dump needs no attributes). Throws std::invalid_argument naming
/// `path` for any other format, and for a file with neither a format nor /layers (e.g. results that lost
/// theirs).
bool is_results_file(const std::string& path) {
  const Handle file = open_file(path, false);
  const std::string format =
      has_attribute(file.get(), "format") ? read_string_attribute(file.get(), "format") : "";
  if (format == "nystrom-results") return true;
  require(format.empty() || format == "nystrom-dump", path, ": attribute format = '", format,
          "' is neither nystrom-dump nor nystrom-results");
  require(!format.empty() || H5Lexists(file.get(), "layers", H5P_DEFAULT) > 0, path,
          ": has no 'format' attribute and no /layers group: neither an attention dump nor a results file");
  return false;
}

}  // namespace

int run_info(const Invocation& invocation) {
  po::options_description options("info options");
  add_common_options(options, false);
  options.add_options()("file", po::value<std::string>()->value_name("FILE"), "the dump or results file");
  po::positional_options_description positional;
  positional.add("file", 1);
  po::variables_map values;
  if (!parse_options(invocation, "FILE", options, positional, values)) return 0;
  require(values.count("file"), "missing FILE (usage: nystrom info FILE)");
  const auto path = values["file"].as<std::string>();
  // The whole description is built first: a malformed file is refused (exit 2) with nothing on stdout.
  std::ostringstream text;
  if (is_results_file(path)) {
    const Handle file = open_file(path, false);
    describe_results(path, file.get(), text);
  } else {
    describe_dump(path, text);
  }
  std::cout << text.str();
  return 0;
}

}  // namespace nystrom::cli
