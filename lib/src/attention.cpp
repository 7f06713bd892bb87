#include "nystrom/attention.hpp"

#include <algorithm>
#include <cmath>

#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"

namespace nystrom {

namespace {

/// Rows per panel of the blockwise attention: b·N entries per thread stay in cache-friendly sizes.
constexpr Index attention_panel_rows = 64;

template <class T>
void check_attention_tokens(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel,
                            const char* where) {
  kernel.validate();
  require(Q.cols() == K.cols(),
          describe(where, ": token dimensions differ, Q has d = ", Q.cols(), " and K has d = ", K.cols()));
  require(
      Q.rows() > 0 && K.rows() > 0 && Q.cols() > 0,
      describe(where, ": empty tokens, Q is ", Q.rows(), "x", Q.cols(), ", K is ", K.rows(), "x", K.cols()));
  require_finite(Q, describe(where, ": Q"));
  require_finite(K, describe(where, ": K"));
}

/// Rows [r, r+b) of S = D⁻¹G: exp(φ − rowmax φ), normalized by its row sums. A shift by the row max leaves S
/// unchanged and keeps every exponent ≤ 0.
template <class T>
void softmax_rows(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel, Index r,
                  Index b, Matrix<T>& panel) {
  panel.resize(b, K.rows());
  kernel.exponent<T>(Q.middleRows(r, b), K, panel);
  const Vector<T> shift = panel.rowwise().maxCoeff();
  panel.colwise() -= shift;
  panel = panel.array().exp().matrix();
  const Vector<T> sums = panel.rowwise().sum();
  panel.array().colwise() /= sums.array();
}

}  // namespace

template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel) {
  check_attention_tokens<T>(Q, K, kernel, "exact_attention");
  require(V.rows() == K.rows(), describe("exact_attention: V has ", V.rows(), " rows, K has N = ", K.rows()));
  require_finite(V, "exact_attention: V");
  const Index n = Q.rows();
  const Index panels = (n + attention_panel_rows - 1) / attention_panel_rows;
  Matrix<T> out(n, V.cols());
  SingleThreadedBlas guard;
#pragma omp parallel
  {
    Matrix<T> panel;
#pragma omp for schedule(dynamic)
    for (Index p = 0; p < panels; ++p) {
      const Index r = p * attention_panel_rows;
      const Index b = std::min(attention_panel_rows, n - r);
      softmax_rows<T>(Q, K, kernel, r, b, panel);
      out.middleRows(r, b).noalias() = panel * V;
    }
  }
  return out;
}

template <class T>
Matrix<T> attention_matrix(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel) {
  check_attention_tokens<T>(Q, K, kernel, "attention_matrix");
  Matrix<T> out;
  softmax_rows<T>(Q, K, kernel, 0, Q.rows(), out);
  return out;
}

template <class T>
OutputErrors output_errors(const ConstMatrixRef<T>& exact, const ConstMatrixRef<T>& approximate) {
  require(exact.rows() == approximate.rows() && exact.cols() == approximate.cols(),
          describe("output_errors: shapes differ, exact is ", exact.rows(), "x", exact.cols(),
                   ", approximate is ", approximate.rows(), "x", approximate.cols()));
  OutputErrors errors;
  if (exact.size() == 0) return errors;
  const Eigen::ArrayXXd difference = exact.template cast<double>() - approximate.template cast<double>();
  errors.relative_frobenius =
      std::sqrt(difference.square().sum() / exact.template cast<double>().squaredNorm());
  errors.max_abs = difference.abs().maxCoeff();
  errors.mean_abs = difference.abs().mean();
  return errors;
}

#define NYSTROM_INSTANTIATE(T)                                                                               \
  template Matrix<T> exact_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,                  \
                                        const ConstMatrixRef<T>&, const Kernel&);                            \
  template Matrix<T> attention_matrix<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const Kernel&); \
  template OutputErrors output_errors<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
