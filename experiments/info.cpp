// `nystrom info FILE`: a human summary of an attention dump (layers, shapes, dtypes, source) or of a results
// file (provenance, rows, the values of every parameter column, spectra groups).
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>

#include "hdf5_io.hpp"
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
    out << "\n";
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
  for (const auto& name : context.names) {
    out << indent << name << " = ";
    try {
      out << read_string_attribute(object, name);
    } catch (const std::exception&) {
      const auto values = read_numeric_attribute(object, name);
      for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
    }
    out << "\n";
  }
}

void describe_results(const std::string& path, hid_t file, std::ostream& out) {
  out << path << ": results file\n";
  print_attributes(file, out, "  ");
  if (H5Lexists(file, "sweep", H5P_DEFAULT) > 0) {
    Handle group = open_group(file, "sweep");
    std::vector<Column> columns;
    for (const auto& name : list_group(group.get())) {
      Handle dataset = open_dataset(group.get(), name);
      const auto type = describe_type(dataset.get());
      columns.push_back({name,
                         type == "string"          ? ColumnType::text
                         : type.starts_with("int") ? ColumnType::int64
                                                   : ColumnType::float64,
                         false});
    }
    const ResultsTable table = ResultsTable::open(file, "sweep", columns, path);
    const auto rows = table.read_rows();
    out << "  /sweep: " << rows.size() << " rows, " << columns.size() << " columns\n";
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
  if (H5Lexists(file, "spectra", H5P_DEFAULT) > 0) {
    Handle spectra = open_group(file, "spectra");
    for (const auto& layer : list_group(spectra.get())) {
      Handle group = open_group(spectra.get(), layer);
      out << "  /spectra/" << layer << ":";
      for (const auto& name : list_group(group.get())) {
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
  std::string format;
  {
    Handle file = open_file(path, false);
    if (has_attribute(file.get(), "format")) format = read_string_attribute(file.get(), "format");
    if (format == "nystrom-results") {
      describe_results(path, file.get(), std::cout);
      return 0;
    }
  }
  require(format.empty() || format == "nystrom-dump", path, ": attribute format = '", format,
          "' is neither nystrom-dump nor nystrom-results");
  describe_dump(path, std::cout);
  return 0;
}

}  // namespace nystrom::cli
