#include "nystrom/point_record.hpp"

#include <cmath>
#include <functional>

#include "nystrom/parameters.hpp"

namespace nystrom {

namespace {

/// The axes of the grid as a method has them ("none" / 0 where it has not): its Parameters (the options
/// translated back, Parameters::of), which name a strategy only for the methods with landmarks, a
/// pseudoinverse only for those with one, a stabilization only for the Nyström ones.
struct Axes {
  Parameters parameters;
  std::string strategy = "none";
  Index landmarks = 0, features = 0, projected = 0;
  std::string pinv = "none";
  int pinv_iters = 0;
  std::string stabilization = to_string(Stabilization::none);
};

Axes axes_of(const PointDescription& point) {
  Axes axes{Parameters::of(point.method, point.options)};
  const Parameters& p = axes.parameters;
  if (p.strategy) {
    axes.strategy = to_string(*p.strategy);
    axes.landmarks = p.landmarks;
  }
  if (p.pinv) {
    axes.pinv = to_string(*p.pinv);
    axes.pinv_iters = is_iterative(*p.pinv) ? p.pinv_iters.value_or(0) : 0;
  }
  if (p.stabilization) axes.stabilization = to_string(*p.stabilization);
  if (point.method == Method::performer) axes.features = point.options.performer.feature_count(point.d);
  if (point.method == Method::linformer) axes.projected = p.projected.value_or(0);
  return axes;
}

std::int64_t flag(bool value) {
  return value ? 1 : 0;
}

/// 1 or 0, −1 where the value does not apply.
std::int64_t flag(const std::optional<bool>& value) {
  return value ? flag(*value) : -1;
}

using D = const PointDescription&;
using R = const PointResult&;
using A = const Axes&;

/// One column with how a point's cell is computed.
struct ColumnRule {
  Column column;
  std::function<Cell(D, R, A)> cell;
};

const std::vector<ColumnRule>& column_rules() {
  constexpr auto text = ColumnType::text;
  constexpr auto int64 = ColumnType::int64;
  constexpr auto float64 = ColumnType::float64;
  static const std::vector<ColumnRule> rules = {
      {{"layer", text, true}, [](D d, R, A) { return d.layer; }},
      {{"batch", int64, true}, [](D d, R, A) { return std::int64_t(d.batch); }},
      {{"head", int64, true}, [](D d, R, A) { return std::int64_t(d.head); }},
      {{"n", int64, true}, [](D d, R, A) { return std::int64_t(d.n); }},
      {{"d", int64, true}, [](D d, R, A) { return std::int64_t(d.d); }},
      {{"kernel", text, true}, [](D d, R, A) { return to_string(d.options.kernel.type); }},
      {{"kernel_param", float64, true}, [](D d, R, A) { return d.options.kernel.param; }},
      {{"strategy", text, true}, [](D, R, A a) { return a.strategy; }},
      {{"landmarks", int64, true}, [](D, R, A a) { return std::int64_t(a.landmarks); }},
      {{"oversampling", float64, true},
       [](D, R, A a) { return a.parameters.strategy ? a.parameters.oversampling : 1.0; }},
      {{"features", int64, true}, [](D, R, A a) { return std::int64_t(a.features); }},
      {{"projected", int64, true}, [](D, R, A a) { return std::int64_t(a.projected); }},
      {{"pinv", text, true}, [](D, R, A a) { return a.pinv; }},
      {{"pinv_iters", int64, true}, [](D, R, A a) { return std::int64_t(a.pinv_iters); }},
      {{"pinv_tolerance", float64, true}, [](D, R, A a) { return a.parameters.pinv_tolerance; }},
      {{"stabilization", text, true}, [](D, R, A a) { return a.stabilization; }},
      {{"different_indices", int64, true}, [](D, R, A a) { return flag(a.parameters.different_indices); }},
      {{"copy_rows", int64, true}, [](D, R, A a) { return flag(a.parameters.copy_rows); }},
      {{"share_projections", int64, true}, [](D, R, A a) { return flag(a.parameters.share_projections); }},
      {{"front_padding", int64, true}, [](D, R, A a) { return flag(a.parameters.front_padding); }},
      {{"method", text, true}, [](D d, R, A) { return to_string(d.method); }},
      {{"precision", text, true}, [](D d, R, A) { return d.precision; }},
      {{"seed", int64, true}, [](D d, R, A) { return std::int64_t(d.seed); }},
      {{"dv", int64, false}, [](D d, R, A) { return std::int64_t(d.dv); }},
      {{"error_matrix", text, false}, [](D, R r, A) { return to_string(r.error_matrix); }},
      {{"spectral_error", float64, false}, [](D, R r, A) { return r.spectral_error; }},
      {{"relative_spectral_error", float64, false}, [](D, R r, A) { return r.relative_spectral_error; }},
      {{"frobenius_error", float64, false}, [](D, R r, A) { return r.frobenius_error; }},
      {{"output_relative_error", float64, false}, [](D, R r, A) { return r.output_relative_error; }},
      {{"output_max_error", float64, false}, [](D, R r, A) { return r.output_max_error; }},
      {{"output_mean_abs_error", float64, false}, [](D, R r, A) { return r.output_mean_abs_error; }},
      {{"sigma1_ext", float64, false}, [](D, R r, A) { return r.sigma1_ext; }},
      {{"sigma_m1_ext", float64, false}, [](D, R r, A) { return r.sigma_m1_ext; }},
      {{"sigma_m1_margin", float64, false}, [](D, R r, A) { return r.sigma_m1_margin; }},
      {{"sigma_m_core", float64, false}, [](D, R r, A) { return r.sigma_m_core; }},
      {{"bound_ratio", float64, false}, [](D, R r, A) { return r.bound_ratio; }},
      {{"theorem1_bound", float64, false}, [](D, R r, A) { return r.theorem1_bound; }},
      {{"theorem2_bound", float64, false}, [](D, R r, A) { return r.theorem2_bound; }},
      {{"theorem3_bound", float64, false}, [](D, R r, A) { return r.theorem3_bound; }},
      {{"theorem3_k", float64, false}, [](D, R r, A) { return r.theorem3_k; }},
      {{"theorem1_applies", int64, false}, [](D, R r, A) { return flag(!std::isnan(r.theorem1_bound)); }},
      {{"theorem2_applies", int64, false}, [](D, R r, A) { return flag(!std::isnan(r.theorem2_bound)); }},
      {{"theorem3_applies", int64, false}, [](D, R r, A) { return flag(!std::isnan(r.theorem3_bound)); }},
      {{"bounds_hold", int64, false}, [](D, R r, A) { return flag(r.bounds_hold); }},
      {{"landmark_terms_converged", int64, false},
       [](D, R r, A) { return flag(r.landmark_terms_converged); }},
      {{"c_emp", float64, false}, [](D, R r, A) { return r.c_emp; }},
      {{"c_emp_normalized", float64, false}, [](D, R r, A) { return r.c_emp_normalized; }},
      {{"pinv_residual", float64, false}, [](D, R r, A) { return r.pinv_residual; }},
      {{"optimal_error", float64, false}, [](D, R r, A) { return r.optimal_error; }},
      {{"relative_optimal_error", float64, false}, [](D, R r, A) { return r.relative_optimal_error; }},
      {{"optimality_ratio", float64, false}, [](D, R r, A) { return r.spectral_error / r.optimal_error; }},
      {{"optimal_error_lower", float64, false}, [](D, R r, A) { return r.optimal_error_lower; }},
      {{"spectral_error_lower", float64, false}, [](D, R r, A) { return r.spectral_error_lower; }},
      {{"spectral_error_upper", float64, false}, [](D, R r, A) { return r.spectral_error_upper; }},
      {{"spectral_error_upper_failure", float64, false},
       [](D, R r, A) { return r.spectral_error_upper_failure; }},
      {{"optimality_ratio_upper", float64, false},
       [](D, R r, A) { return r.spectral_error_upper / r.optimal_error_lower; }},
      {{"attention_relative_error", float64, false}, [](D, R r, A) { return r.attention_relative_error; }},
      {{"attention_optimal_error", float64, false}, [](D, R r, A) { return r.attention_optimal_error; }},
      {{"nonfinite_output_rows", int64, false},
       [](D, R r, A) { return std::int64_t(r.nonfinite_output_rows); }},
      {{"overflowed_entries", int64, false}, [](D, R r, A) { return std::int64_t(r.rounding.overflowed); }},
      {{"underflowed_entries", int64, false}, [](D, R r, A) { return std::int64_t(r.rounding.underflowed); }},
      {{"nan_entries", int64, false}, [](D, R r, A) { return std::int64_t(r.rounding.nan); }},
      {{"selection_entries", int64, false}, [](D, R r, A) { return std::int64_t(r.selection_entries); }},
      {{"pinv_status", text, false},
       [](D, R r, A) { return r.pinv_status ? to_string(*r.pinv_status) : std::string("none"); }},
      {{"matrix_free", int64, false}, [](D, R r, A) { return flag(r.matrix_free); }},
      {{"log_shift", float64, false}, [](D, R r, A) { return r.log_shift; }},
      {{"seconds", float64, false}, [](D, R r, A) { return r.seconds; }},
      {{"reference_seconds", float64, false}, [](D, R r, A) { return r.reference_seconds; }},
      {{"landmark_seconds", float64, false}, [](D, R r, A) { return r.landmark_seconds; }},
      {{"elapsed_seconds", float64, false}, [](D, R r, A) { return r.elapsed_seconds; }},
  };
  return rules;
}

}  // namespace

const std::vector<Column>& point_columns() {
  static const std::vector<Column> columns = [] {
    std::vector<Column> out;
    for (const auto& rule : column_rules()) out.push_back(rule.column);
    return out;
  }();
  return columns;
}

std::vector<RecordCell> point_record(const PointDescription& description, const PointResult& result) {
  const Axes axes = axes_of(description);
  std::vector<RecordCell> cells;
  for (const auto& rule : column_rules())
    cells.push_back({rule.column, rule.cell(description, result, axes)});
  return cells;
}

std::vector<Cell> point_cells(const PointDescription& description, const PointResult& result) {
  std::vector<Cell> cells;
  for (auto& cell : point_record(description, result)) cells.push_back(std::move(cell.value));
  return cells;
}

}  // namespace nystrom
