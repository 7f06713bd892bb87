#include "nystrom/head.hpp"

#include <limits>
#include <stdexcept>

#include "nystrom/error.hpp"
#include "nystrom/landmarks.hpp"

namespace nystrom {

template <class T>
void Head<T>::validate(const std::string& where) const {
  require(q.rows() > 0 && q.cols() > 0, where, ": empty head, Q is ", q.rows(), "x", q.cols());
  require(k.rows() == q.rows() && k.cols() == q.cols(), where, ": K is ", k.rows(), "x", k.cols(),
          ", expected the shape of Q, ", q.rows(), "x", q.cols());
  require(v.size() == 0 || v.rows() == q.rows(), where, ": V has ", v.rows(),
          " rows, expected N = ", q.rows());
  require(prefix_tokens >= 0 && prefix_tokens < q.rows(), where, ": prefix_tokens = ", prefix_tokens,
          " must lie in [0, N = ", q.rows(), ")");
  const Index grid = q.rows() - prefix_tokens;
  require((window[0] == 0 && window[1] == 0) || window_holds(window, grid), where, ": window ", window[0],
          "x", window[1], " does not hold the N - prefix_tokens = ", grid, " grid tokens");
  require_finite(q, where + ": Q");
  require_finite(k, where + ": K");
  require_finite(v, where + ": V");
  if (bias.size() == 0) return;
  require(bias.rows() == q.rows() && bias.cols() == q.rows(), where, ": bias is ", bias.rows(), "x",
          bias.cols(), ", expected N x N with N = ", q.rows());
  const auto values = bias.array();
  const T infinity = std::numeric_limits<T>::infinity();
  if (!(values < infinity).all()) {  // NaN compares false too; name the first in column-major order
    for (Index j = 0; j < bias.cols(); ++j)
      for (Index i = 0; i < bias.rows(); ++i)
        if (!(bias(i, j) < infinity))
          throw std::invalid_argument(
              describe(where, ": bias(", i, ", ", j, ") = ", double(bias(i, j)), " must be finite or -inf"));
  }
  const auto attended = (values > -infinity).rowwise().any().eval();
  for (Index i = 0; i < bias.rows(); ++i)
    if (!attended(i))
      throw std::invalid_argument(
          describe(where, ": row ", i, " of bias + mask is -inf throughout (its softmax is undefined)",
                   sizeof(T) == 4 ? "; in float, a bias or mask below -3.4e38 reads as -inf (the precision "
                                    "double holds it)"
                                  : ""));
}

template struct Head<float>;
template struct Head<double>;

}  // namespace nystrom
