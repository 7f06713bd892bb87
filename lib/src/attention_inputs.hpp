#pragma once
/// @file attention_inputs.hpp
/// Input checks shared by the attention entry points, CPU and GPU (internal to the library).

#include <cmath>
#include <string>

#include "nystrom/error.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/types.hpp"

namespace nystrom::detail {

/// Throws std::invalid_argument naming `method` unless Q, K are N×d and V is N×dv with N·d > 0, all finite,
/// and the scale is finite and > 0.
template <class T>
void require_attention_inputs(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                              const ConstMatrixRef<T>& V, double scale, const std::string& method) {
  require(Q.rows() > 0 && Q.cols() > 0, method, ": Q is ", Q.rows(), "x", Q.cols(), ", expected N*d > 0");
  require(K.rows() == Q.rows() && K.cols() == Q.cols(), method, ": K is ", K.rows(), "x", K.cols(),
          ", expected ", Q.rows(), "x", Q.cols());
  require(V.rows() == Q.rows(), method, ": V has ", V.rows(), " rows, expected N = ", Q.rows());
  require(std::isfinite(scale) && scale > 0, method, ": scale = ", scale, " must be finite and > 0");
  require_finite(Q, method + ": Q");
  require_finite(K, method + ": K");
  require_finite(V, method + ": V");
}

/// Throws std::invalid_argument naming `where` unless Q (N×d) and K (M×d) share d and are non-empty (either
/// layout).
template <class Tokens>
void require_token_shapes(const Tokens& Q, const Tokens& K, const std::string& where) {
  require(Q.cols() == K.cols(), where, ": token dimensions differ, Q has d = ", Q.cols(),
          " and K has d = ", K.cols());
  require(Q.rows() > 0 && K.rows() > 0 && Q.cols() > 0, where, ": empty tokens, Q is ", Q.rows(), "x",
          Q.cols(), ", K is ", K.rows(), "x", K.cols());
}

/// require_token_shapes, and Q and K finite.
template <class T, class Tokens>
void require_tokens(const Tokens& Q, const Tokens& K, const std::string& where) {
  require_token_shapes(Q, K, where);
  require_finite(Q, where + ": Q");
  require_finite(K, where + ": K");
}

/// The checks of the Nyström factorizations but finiteness: require_token_shapes, as many keys as queries,
/// and valid options. For callers that select the landmarks next (select_landmarks checks finiteness).
template <class Tokens>
void require_nystrom_shapes(const Tokens& Q, const Tokens& K, const NystromOptions& options,
                            const std::string& where) {
  require_token_shapes(Q, K, where);
  require(Q.rows() == K.rows(), where, ": Q has N = ", Q.rows(), " tokens and K has N = ", K.rows(),
          " (must be equal)");
  options.validate(Q.rows(), Q.cols());
}

/// require_nystrom_shapes, and Q and K finite.
template <class T, class Tokens>
void require_nystrom_inputs(const Tokens& Q, const Tokens& K, const NystromOptions& options,
                            const std::string& where) {
  require_nystrom_shapes(Q, K, options, where);
  options.pinv.validate_in<T>();
  require_finite(Q, where + ": Q");
  require_finite(K, where + ": K");
}

}  // namespace nystrom::detail
