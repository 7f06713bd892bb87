#pragma once
/// @file batch_inputs.hpp
/// Shape checks of the batched entry points, CPU and GPU (internal to the library).

#include <ostream>
#include <string>

#include "nystrom/batched.hpp"
#include "nystrom/error.hpp"

namespace nystrom::detail {

/// A view's shape, written "[B, H, N, dim]" into messages (only when a message is built).
struct ViewShape {
  Index batch = 0, heads = 0, tokens = 0, dim = 0;
};

inline std::ostream& operator<<(std::ostream& out, const ViewShape& shape) {
  return out << "[" << shape.batch << ", " << shape.heads << ", " << shape.tokens << ", " << shape.dim << "]";
}

template <class Scalar>
ViewShape shape_of(const BatchView<Scalar>& view) {
  return {view.batch, view.heads, view.tokens, view.dim};
}

/// Throws std::invalid_argument naming `where` and the shapes unless Q and K are [B, H, N, d], V and out are
/// [B, H, N, dv] with B, H, N, d, dv ≥ 1, every view has data, and `out` overlaps none of the inputs.
template <class T>
void require_batch(const BatchView<const T>& Q, const BatchView<const T>& K, const BatchView<const T>& V,
                   const BatchView<T>& out, const std::string& where) {
  require(Q.batch >= 1 && Q.heads >= 1 && Q.tokens >= 1 && Q.dim >= 1, where, ": Q is ", shape_of(Q),
          ", expected B, H, N, d >= 1");
  require(K.batch == Q.batch && K.heads == Q.heads && K.tokens == Q.tokens && K.dim == Q.dim, where,
          ": K is ", shape_of(K), ", expected the shape of Q ", shape_of(Q));
  require(V.batch == Q.batch && V.heads == Q.heads && V.tokens == Q.tokens && V.dim >= 1, where, ": V is ",
          shape_of(V), ", expected [", Q.batch, ", ", Q.heads, ", ", Q.tokens, ", dv >= 1]");
  require(out.batch == V.batch && out.heads == V.heads && out.tokens == V.tokens && out.dim == V.dim, where,
          ": out is ", shape_of(out), ", expected the shape of V ", shape_of(V));
  require(Q.data && K.data && V.data && out.data, where, ": a view without data");
  const T* first = out.data;
  const T* last = out.data + out.count() * out.head_size();
  for (const auto* input : {&Q, &K, &V})
    require(last <= input->data || input->data + input->count() * input->head_size() <= first, where,
            ": out overlaps an input");
}

}  // namespace nystrom::detail
