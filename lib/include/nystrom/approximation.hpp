#pragma once
/// @file approximation.hpp
/// The family of attention approximations the seeds compare (docs/mathematics.md §6), behind one dispatcher
/// so a sweep runs them on the same inputs with the same error measures:
///   pnp-nystra         generalized Nyström Ĝ = G_L G_A⁺ G_U, Ô by PnP-Nystra Algorithm 1 (nystrom.hpp)
///   nystromformer      Ô = F̃ Ã⁺ (B̃V) (nystromformer.hpp)
///   cur                Ô = C U⁺ (RV) (cur.hpp)
///   symmetric-nystrom  Ĝ = C W⁺ Cᵀ (LaplacianFormer Alg. 1; nystrom.hpp), Ô = (ĜV) ⊘ (Ĝ1)
///   performer          FAVOR+ (performer.hpp)
///   linformer          Ô = softmax(sQ(EK)ᵀ)(FV) (linformer.hpp)
///   exact              O = (GV) ⊘ (G1) (attention.hpp)
/// Every method but exact implies an N×N attention matrix Ŝ, exposed as an operator (factored_operator.hpp)
/// so that ‖S − Ŝ‖₂ with S = D⁻¹G can be computed without forming N×N; `implied_matrix(method)` says which
/// matrix it is, `error_matrix(method)` which matrix a point's errors are measured on (evaluation.hpp).

#include <limits>
#include <optional>
#include <string>

#include "nystrom/cur.hpp"
#include "nystrom/factored_operator.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/linformer.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/nystromformer.hpp"
#include "nystrom/performer.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// The approximation methods (docs/formats.md §2 column `method`).
enum class Method { pnp_nystra, nystromformer, cur, symmetric_nystrom, performer, linformer, exact };

/// "pnp-nystra", "nystromformer", "cur", "symmetric-nystrom", "performer", "linformer", "exact".
std::string to_string(Method method);
/// Inverse of to_string; throws std::invalid_argument naming an unknown method.
Method method_from_string(const std::string& name);

/// The N×N matrix a method's spectral and Frobenius errors are measured on (docs/formats.md §2 column
/// `error_matrix`): the kernel matrix G for the kernel approximations Ĝ (pnp-nystra, symmetric-nystrom), the
/// attention matrix S = D⁻¹G for the softmax methods' Ŝ (nystromformer, cur, performer, linformer), none for
/// exact.
enum class ErrorMatrix { none, kernel, attention };

/// "none", "G", "S".
std::string to_string(ErrorMatrix matrix);
/// The matrix `method` is measured on.
ErrorMatrix error_matrix(Method method);

/// A column-friendly description of the N×N matrix a method's operator represents, e.g.
/// "S_hat = F~ pinv(A~) B~ (Nystromformer eq. 15)"; "none" for exact. Its spectral error is always against S
/// = D⁻¹G.
std::string implied_matrix(Method method);

/// Options of every method; only the member of the chosen method (and `kernel`, `storage`) is read.
struct ApproximationOptions {
  /// κ of every method. nystromformer, cur, performer and linformer are softmax methods and require the
  /// exponential kernel (s = kernel.param); pnp-nystra, symmetric-nystrom and exact accept any kernel.
  Kernel kernel;
  /// The format every method stores its matrices in (docs/mathematics.md §8), replacing the storage member
  /// of the chosen method's options: half and bfloat16 emulate a kernel in that format in float32 (T = float;
  /// with T = double they throw std::invalid_argument naming the storage), every matrix a step writes
  /// rounded to it, with what rounding did in Approximation::rounding; float32 and float64 (the default)
  /// round nothing, the computation in T as it is.
  Precision storage = Precision::float64;
  NystromOptions pnp_nystra;  ///< pnp-nystra (its kernel member is replaced by `kernel`)
  /// symmetric-nystrom (kernel replaced by `kernel`): LaplacianFormer's Newton–Schulz on W + εI, no row-max
  /// scaling (row-max is undefined for C W⁺ Cᵀ).
  NystromOptions symmetric_nystrom = {
      {}, {}, {PinvMethod::newton_schulz, 20, 0, 0, 0, 1e-6}, Stabilization::none};
  NystromformerOptions nystromformer;
  CurOptions cur;
  PerformerOptions performer;
  LinformerOptions linformer;

  /// Validates `kernel` and the chosen method's options for N tokens of dimension d.
  void validate(Method method, Index n, Index d) const;

  /// validate(method, n, d), the method's pseudoinverse options in T (PinvOptions::validate_in), and the
  /// storage for T (require_storage_for).
  template <class T>
  void validate_in(Method method, Index n, Index d) const;
};

/// The pseudoinverse options `method` reads from `options` (pnp-nystra, symmetric-nystrom, nystromformer,
/// cur), or null for the methods without a pseudoinverse (performer, linformer, exact).
const PinvOptions* pinv_options(Method method, const ApproximationOptions& options);
PinvOptions* pinv_options(Method method, ApproximationOptions& options);

template <class T>
void ApproximationOptions::validate_in(Method method, Index n, Index d) const {
  validate(method, n, d);
  if (const PinvOptions* pinv = pinv_options(method, *this)) pinv->validate_in<T>();
  require_storage_for<T>(storage, to_string(method).c_str());
}

/// `options` with the random projections `method` would draw from its seed on every call made explicit:
/// Performer's Ω (r×d) and Linformer's E, F (k×N), the same draws. For calls in a loop (the heads of a batch,
/// timings), where the projections are a model's fixed parameters rather than part of the attention; the
/// other methods' options are returned unchanged.
ApproximationOptions with_drawn_projections(Method method, const ApproximationOptions& options, Index n,
                                            Index d);

/// The output of one method, its implied attention matrix and the diagnostics of its pseudoinverse.
template <class T>
struct Approximation {
  Method method = Method::exact;
  Matrix<T> output;  ///< Ô, N×dv
  std::optional<NystromFactors<T>>
      kernel_factors;  ///< pnp-nystra, symmetric-nystrom: Ĝ ≈ G (NystromOperator)
  std::optional<FactoredOperator<T>> softmax_attention;             ///< Ŝ of the softmax methods
  std::optional<PinvStatus> pinv_status;                            ///< methods with a pseudoinverse
  double pinv_residual = std::numeric_limits<double>::quiet_NaN();  ///< ‖I − AZ‖_F of that pseudoinverse
  double selection_entries = 0;  ///< kernel entries the landmark selection evaluated (Landmarks::entries)
  /// What rounding to ApproximationOptions::storage did, summed over every rounding point of the method and
  /// its pseudoinverse (docs/mathematics.md §8): entries that overflowed to ±Inf, underflowed to ±0, NaN.
  /// None for float32 and float64. Ô's non-finite rows are left as they come.
  RoundingCounts rounding;

  /// Ŝ, the implied attention matrix (absent for exact): softmax_attention, or for pnp-nystra and
  /// symmetric-nystrom Ŝ = diag(1/(Ĝⁿ1)) Ĝⁿ built from kernel_factors on each call (it copies G_L and G_U, a
  /// cost only callers that want Ŝ pay).
  std::optional<FactoredOperator<T>> attention() const;
};

/// Ŝ = diag(1/(Ĝⁿ1)) Ĝⁿ of Nyström factors (the row scales exp(l) of a stabilized Ĝ cancel), as an
/// operator holding copies of the blocks.
template <class T>
FactoredOperator<T> implied_attention(const NystromFactors<T>& factors);

/// Runs `method` on Q, K (N×d) and V (N×dv), in options.storage. Throws std::invalid_argument for bad inputs
/// or options.
template <class T>
Approximation<T> approximate_attention(Method method, const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                       const ConstMatrixRef<T>& V, const ApproximationOptions& options);

}  // namespace nystrom
