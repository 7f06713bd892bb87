#pragma once
/// @file point_record.hpp
/// The columns of one evaluated point (docs/formats.md §2: the /sweep table), single-sourced: the point's
/// description and its PointResult become an ordered list of named, typed cells. `nystrom sweep` writes
/// exactly these columns; the Python module returns the same cells as a dict.
///
/// Parameter columns (the resume key) say what was computed: layer, batch, head, n, d, kernel, kernel_param,
/// strategy, landmarks (m, 0 for methods without landmarks), features (performer's r, else 0), projected
/// (linformer's k, else 0), pinv, pinv_iters (0 for the exact pinv and methods without one), stabilization,
/// method, precision, seed. Axes a method does not have read "none" or 0. The other columns are the results.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "nystrom/approximation.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// What a point is: where (layer, batch, head and the head's sizes) and what (method and options).
struct PointDescription {
  std::string layer;
  Index batch = 0, head = 0, n = 0, d = 0, dv = 0;
  Method method = Method::pnp_nystra;
  ApproximationOptions options;  ///< the kernel (without log-shift) and the method's options
  std::string precision = "double";
  std::uint64_t seed = 0;
};

/// Column types: variable-length UTF-8 strings, int64, float64.
enum class ColumnType { text, int64, float64 };

/// One column of the table.
struct Column {
  std::string name;
  ColumnType type;
  bool parameter;  ///< part of the point's identity (the resume key)
};

/// One cell's value (the alternative matches the column's type).
using Cell = std::variant<std::string, std::int64_t, double>;

/// A named, typed cell.
struct RecordCell {
  Column column;
  Cell value;
};

/// The columns of every point record, in order.
const std::vector<Column>& point_columns();

/// The cells of one point in point_columns() order.
std::vector<RecordCell> point_record(const PointDescription& description, const PointResult& result);

/// The values of point_record alone (a table row).
std::vector<Cell> point_cells(const PointDescription& description, const PointResult& result);

}  // namespace nystrom
