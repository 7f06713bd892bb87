#include "results_files.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <limits>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "nystrom/error.hpp"
#include "nystrom_git_revision.hpp"

#ifndef NYSTROM_VERSION
#define NYSTROM_VERSION "unknown"
#endif

namespace nystrom::cli {

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
