#pragma once
/// @file batched.hpp
/// Attention on a batch of heads in one call. Vision transformers attend within many windows at once (SwinIR
/// at 256×256: 64 windows of 32×32 tokens × 6 heads per block); the heads arrive in the dump layout of
/// docs/formats.md §1, row-major contiguous [B, H, N, d] as numpy and torch hold a C-contiguous tensor, and
/// the outputs leave as [B, H, N, dv]. Every head runs through approximate_attention (approximation.hpp), so
/// each method is the per-head code; on the CPU the heads are spread over the OpenMP threads and the steps
/// of one head stay on its thread. Two options of the authors' batched code have no per-head counterpart:
/// the pseudoinverse's start α taken over the whole batch (AlphaScope) and the threshold of the clamped
/// exponential (NystromOptions::clamp_threshold, 5 in their SwinIR code, 0 in their Uformer and RVRT code).

#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "nystrom/approximation.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// B × H heads of N rows of `dim` values, row-major contiguous [B, H, N, dim]: entry (b, h, i, c) at
/// data[((b·H + h)·N + i)·dim + c]. Scalar is `const T` for inputs and T for outputs. A view: it owns
/// nothing. Heads are numbered i = b·H + h.
template <class Scalar>
struct BatchView {
  using Element = std::remove_const_t<Scalar>;
  /// One head as an N×dim row-major matrix over the view's memory (read-only for a `const T` view).
  using HeadMap = Eigen::Map<
      std::conditional_t<std::is_const_v<Scalar>, const RowMajorMatrix<Element>, RowMajorMatrix<Element>>>;

  Scalar* data = nullptr;
  Index batch = 0;   ///< B (batch × windows)
  Index heads = 0;   ///< H
  Index tokens = 0;  ///< N
  Index dim = 0;     ///< d (queries, keys) or dv (values, outputs)

  /// B·H.
  Index count() const { return batch * heads; }
  /// N·dim, the values of one head.
  Index head_size() const { return tokens * dim; }
  /// Head i = b·H + h.
  HeadMap head(Index i) const { return HeadMap(data + i * head_size(), tokens, dim); }
  /// The same memory, read-only.
  operator BatchView<const Element>() const requires(!std::is_const_v<Scalar>) {
    return {data, batch, heads, tokens, dim};
  }
};

/// The shape of a batch: Q and K are [B, H, N, d], V and the output [B, H, N, dv].
struct BatchShape {
  Index batch = 0;      ///< B
  Index heads = 0;      ///< H
  Index tokens = 0;     ///< N
  Index dim = 0;        ///< d
  Index value_dim = 0;  ///< dv

  /// B·H.
  Index count() const { return batch * heads; }
};

/// Where the start α of the iterative pseudoinverses (Z₀ = αAᵀ; docs/mathematics.md §4) comes from.
enum class AlphaScope {
  matrix,  ///< each head's own α = 1/(‖A‖₁‖A‖_∞) (Nyströmformer's "exact" init), unless PinvOptions::alpha
           ///< is set
  batch  ///< one α = 1/(max_i ‖A_i‖₁ · max_i ‖A_i‖_∞) over the cores A_i of every head of the batch, as the
         ///< authors' code and the nystrom-attention package compute it (≤ every per-matrix α, so still
         ///< ασ₁(A_i)² ≤ 1; converges more slowly)
};

/// "matrix", "batch".
std::string to_string(AlphaScope scope);
/// Inverse of to_string; throws std::invalid_argument naming an unknown value.
AlphaScope alpha_scope_from_string(const std::string& name);

/// The diagnostics of one head.
struct HeadDiagnostics {
  std::optional<PinvStatus> pinv_status;                            ///< methods with a pseudoinverse
  double pinv_residual = std::numeric_limits<double>::quiet_NaN();  ///< ‖I − AZ‖_F of that pseudoinverse
};

/// What a batched call reports besides the outputs.
struct BatchedDiagnostics {
  std::vector<HeadDiagnostics> heads;  ///< head b·H + h
  /// The batch α used (AlphaScope::batch and an iterative pseudoinverse), else 0: that of the matrices the
  /// heads invert, for pnp-nystra without row-max scaling and symmetric-nystrom with a kernel log-shift c
  /// the cores of κ_c (e^{2c} times the α of κ's cores; core_pinv_options).
  double alpha = 0;
};

/// The message of an error in head i of a batch with H = `heads` heads per entry: "batched attention, head i
/// (b = i / H, h = i % H): what".
std::string batch_head_error(Index i, Index heads, const char* what);

/// Runs `method` on every head: out[b, h] = approximate_attention(method, Q[b, h], K[b, h], V[b, h],
/// options).output, Q and K of shape [B, H, N, d], V and out of shape [B, H, N, dv]. With AlphaScope::batch
/// and an iterative pseudoinverse, a first pass finds every head's core and the batch α, and the second runs
/// each head with PinvOptions::alpha set to it; pnp-nystra and symmetric-nystrom keep each head's factors
/// between the passes (2·N·m values per head), nystromformer recomputes only its m×m core, cur its whole
/// method. Performer's Ω and Linformer's E, F are drawn once for the batch (the same draws every head makes
/// from the seed).
///
/// Threads: with more than one head and threads() > 1, heads are handed out one at a time to the OpenMP
/// threads (dynamic schedule), each head running on one thread, so the output is the same for any thread
/// count; one head (or a call inside a parallel region) runs with the caller's threads.
///
/// Layout: pnp-nystra and symmetric-nystrom read q, k, v and write the output in the batch's own row-major
/// layout (the row-major generalized_nystrom, symmetric_nystrom and nystrom_attention), without copies. The
/// other methods take column-major N×d matrices, so each head's q, k and v are copied to them (OpenBLAS
/// omatcopy) and the output back; the copies are memory-bound (at N = 1024, d = 64 about 25 µs per matrix on
/// this project's 2-core machine). Each thread keeps its buffers from head to head and call to call: the
/// Nyström factors (2·N·m values) and the copies (N·(2d + dv) values).
///
/// Throws std::invalid_argument naming the value for mismatched shapes, an empty batch, overlapping `out`,
/// bad options, or a head with non-finite values (naming the head; `out` is then unspecified).
template <class T>
BatchedDiagnostics batched_attention(Method method, const BatchView<const T>& Q, const BatchView<const T>& K,
                                     const BatchView<const T>& V, const BatchView<T>& out,
                                     const ApproximationOptions& options,
                                     AlphaScope alpha_scope = AlphaScope::matrix);

}  // namespace nystrom
