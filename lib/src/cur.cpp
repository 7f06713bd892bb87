#include "nystrom/cur.hpp"

#include <utility>

#include "attention_inputs.hpp"
#include "emulation.hpp"
#include "softmax_panels.hpp"

namespace nystrom {

void CurOptions::validate(Index n, Index d) const {
  require(is_selection(selection.strategy), "cur: selection strategy '", to_string(selection.strategy),
          "' does not select rows (use step, random, top-sum, top-abs, top-embed or given)");
  selection.validate(n, d);
  pinv.validate();
}

namespace {

/// The selection's indices and cost into a result.
template <class T>
CurResult<T> selection_result(const Landmarks<T>& selected) {
  CurResult<T> result;
  result.q_indices = selected.q_indices;
  result.k_indices = selected.k_indices;
  result.selection_entries = selected.entries;
  return result;
}

/// U = C[q_idx, :] and Z ≈ U⁺ by `pinv` into a result whose columns C are set.
template <class T>
void intersection_pinv(CurResult<T>& result, const PinvOptions& pinv) {
  const Index m = static_cast<Index>(result.q_indices.size());
  result.intersection.resize(m, result.columns.cols());
  for (Index i = 0; i < m; ++i) result.intersection.row(i) = result.columns.row(result.q_indices[i]);
  result.pinv = core_pseudoinverse<T>(result.intersection, pinv);
}

/// With options.copy_rows, the exact rows (R V)[i] into Ô[q_idx[i]].
template <class T>
void copy_exact_rows(CurResult<T>& result, const Matrix<T>& row_values, const CurOptions& options) {
  if (!options.copy_rows) return;
  for (Index i = 0; i < row_values.rows(); ++i) result.output.row(result.q_indices[i]) = row_values.row(i);
}

/// cur_attention in emulated storage (docs/mathematics.md §8): the rows selected on Q and K as given, then
/// Q, K, V and the selected rows rounded; C and R as rounded softmax rows of rounded logits; Z = R(U⁺) in the
/// same storage; R V = R(R Ṽ) and Ô = R(C R(Z R V)).
CurResult<float> emulated_cur(const ConstMatrixRef<float>& Q, const ConstMatrixRef<float>& K,
                              const ConstMatrixRef<float>& V, double scale, const CurOptions& options) {
  using detail::rounded_exponents, detail::rounded_product, detail::rounded_softmax_rows;
  const Kernel kernel = Kernel::exponential(scale);
  const Landmarks<float> selected = select_landmarks<float>(Q, K, options.selection, kernel);
  CurResult<float> result = selection_result(selected);
  detail::Emulation emulation(options.storage);
  const Matrix<float> q = emulation.stored(Q), k = emulation.stored(K), v = emulation.stored(V);
  result.columns = rounded_exponents(emulation, kernel, q, emulation.stored(selected.k));  // C
  rounded_softmax_rows(emulation, result.columns);
  result.rows = rounded_exponents(emulation, kernel, emulation.stored(selected.q), k);  // R
  rounded_softmax_rows(emulation, result.rows);
  PinvOptions pinv = options.pinv;
  pinv.storage = options.storage;
  intersection_pinv(result, pinv);
  const Matrix<float> row_values = rounded_product(emulation, result.rows, v);
  result.output =
      rounded_product(emulation, result.columns, rounded_product(emulation, result.pinv.z, row_values));
  copy_exact_rows(result, row_values, options);
  result.rounding = emulation.counts();
  return result;
}

}  // namespace

template <class T>
CurResult<T> cur_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                           double scale, const CurOptions& options) {
  detail::require_attention_inputs<T>(Q, K, V, scale, "cur");
  options.validate(Q.rows(), Q.cols());
  if constexpr (std::is_same_v<T, float>)
    if (is_emulated(options.storage)) return emulated_cur(Q, K, V, scale, options);
  require_storage_for<T>(options.storage, "cur");
  const Landmarks<T> selected = select_landmarks<T>(Q, K, options.selection, Kernel::exponential(scale));

  CurResult<T> result = selection_result(selected);
  result.columns = detail::tall_softmax<T>(Q, selected.k, scale);  // C
  // R and R V (m×dv): the exact outputs of the selected queries.
  detail::WideSoftmax<T> rows = detail::wide_softmax<T>(selected.q, K, V, scale);
  result.rows = std::move(rows.matrix);
  const Matrix<T>& row_values = rows.times_values;
  intersection_pinv(result, options.pinv);  // U and Z
  result.output = detail::tall_product<T>(result.columns, result.pinv.z * row_values);
  copy_exact_rows(result, row_values, options);
  return result;
}

template CurResult<float> cur_attention<float>(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                                               const ConstMatrixRef<float>&, double, const CurOptions&);
template CurResult<double> cur_attention<double>(const ConstMatrixRef<double>&, const ConstMatrixRef<double>&,
                                                 const ConstMatrixRef<double>&, double, const CurOptions&);

}  // namespace nystrom
