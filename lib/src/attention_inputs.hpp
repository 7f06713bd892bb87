#pragma once
/// @file attention_inputs.hpp
/// Input checks shared by the attention approximations (internal to the library).

#include <cmath>
#include <string>

#include "nystrom/error.hpp"
#include "nystrom/types.hpp"

namespace nystrom::detail {

/// Throws std::invalid_argument naming `method` unless Q, K are N×d and V is N×dv with N·d > 0, all finite,
/// and the scale is finite and > 0.
template <class T>
void require_attention_inputs(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                              const ConstMatrixRef<T>& V, double scale, const std::string& method) {
  require(Q.rows() > 0 && Q.cols() > 0,
          describe(method, ": Q is ", Q.rows(), "x", Q.cols(), ", expected N*d > 0"));
  require(K.rows() == Q.rows() && K.cols() == Q.cols(),
          describe(method, ": K is ", K.rows(), "x", K.cols(), ", expected ", Q.rows(), "x", Q.cols()));
  require(V.rows() == Q.rows(), describe(method, ": V has ", V.rows(), " rows, expected N = ", Q.rows()));
  require(std::isfinite(scale) && scale > 0,
          describe(method, ": scale = ", scale, " must be finite and > 0"));
  require_finite(Q, method + ": Q");
  require_finite(K, method + ": K");
  require_finite(V, method + ": V");
}

}  // namespace nystrom::detail
