#include "nystrom/cur.hpp"

#include <utility>

#include "attention_inputs.hpp"
#include "softmax_panels.hpp"

namespace nystrom {

void CurOptions::validate(Index n, Index d) const {
  require(is_selection(selection.strategy), "cur: selection strategy '", to_string(selection.strategy),
          "' does not select rows (use step, random, top-sum, top-abs, top-embed or given)");
  selection.validate(n, d);
  pinv.validate();
}

template <class T>
CurResult<T> cur_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                           double scale, const CurOptions& options) {
  detail::require_attention_inputs<T>(Q, K, V, scale, "cur");
  options.validate(Q.rows(), Q.cols());
  const Landmarks<T> selected = select_landmarks<T>(Q, K, options.selection);

  CurResult<T> result;
  result.q_indices = selected.q_indices;
  result.k_indices = selected.k_indices;
  const Index m = static_cast<Index>(result.q_indices.size());
  result.columns = detail::tall_softmax<T>(Q, selected.k, scale);  // C
  // R and R V (m×dv): the exact outputs of the selected queries.
  detail::WideSoftmax<T> rows = detail::wide_softmax<T>(selected.q, K, V, scale);
  result.rows = std::move(rows.matrix);
  const Matrix<T>& row_values = rows.times_values;
  result.intersection.resize(m, result.columns.cols());
  for (Index i = 0; i < m; ++i) result.intersection.row(i) = result.columns.row(result.q_indices[i]);  // U
  result.pinv = core_pseudoinverse<T>(result.intersection, options.pinv);
  result.output = detail::tall_product<T>(result.columns, result.pinv.z * row_values);
  if (options.copy_rows)
    for (Index i = 0; i < m; ++i) result.output.row(result.q_indices[i]) = row_values.row(i);
  return result;
}

template CurResult<float> cur_attention<float>(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                                               const ConstMatrixRef<float>&, double, const CurOptions&);
template CurResult<double> cur_attention<double>(const ConstMatrixRef<double>&, const ConstMatrixRef<double>&,
                                                 const ConstMatrixRef<double>&, double, const CurOptions&);

}  // namespace nystrom
