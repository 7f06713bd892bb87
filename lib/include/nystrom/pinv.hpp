#pragma once
/// @file pinv.hpp
/// Pseudoinverse of the m×m core G_A (docs/mathematics.md §4): exact (SVD with a relative cut), Razavi's
/// third-order iteration (Nyströmformer, PnP-Nystra), Newton–Schulz (LaplacianFormer); optional Tikhonov or
/// εI regularization. A numerical failure is a status, never an exception.

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nystrom/error.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Pseudoinverse methods (docs/mathematics.md §4).
///
/// Convergence of the iterations from Z₀ = αAᵀ, per singular direction of A with x = ασ² (AZ's eigenvalue
/// there) and error e = 1 − x:
/// - Newton–Schulz maps e → e²: converges for 0 < ασ₁² < 2, diverges above.
/// - Razavi maps x → f(x) = ¼x(13 − 15x + 7x² − x³), i.e. e → e³(3 + e)/4:
///   - 0 < x < 3: |e| shrinks every step (third order near e = 0);
///   - x = 3 is a neutral fixed point (f(3) = 3, f′(3) = 1), and from 3 < x ≤ x₁ ≈ 3.4675 (real root of
///     x³ − 4x² + 3x − 4) the iterate creeps down to 3 and stalls with |e| → 2: status `completed`;
///   - x₁ < x < x* ≈ 4.1304 (real root of x³ − 7x² + 15x − 13, where f(x*) = 0): the first step lands in
///     (0, 3), then it converges;
///   - x > x*: f(x) < 0, so e > 1 and e grows without bound: `diverged` (x = x* exactly sticks at e = 1).
///   The safe α = 1/(‖A‖₁‖A‖_∞) gives ασ₁² ≤ 1, inside every convergent range.
enum class PinvMethod {
  exact,          ///< SVD; singular values ≤ tol·σ₁ are dropped (tol default max(p, m)·eps)
  razavi,         ///< Z ← ¼ Z(13I − AZ(15I − AZ(7I − AZ))), Z₀ = αAᵀ (Nyströmformer eq. (15))
  newton_schulz,  ///< X ← X(2I − AX), X₀ = αAᵀ (LaplacianFormer Alg. 1)
  truncated,      ///< SVD cut at a relative tolerance (default √eps): the ε-truncated pseudoinverse of the
                  ///< core that Park & Nakatsukasa (arXiv:2405.06375) show stable for oversampled CUR
  oracle_core     ///< not a pseudoinverse: the Frobenius-optimal core Z = G_L⁺ G G_U⁺ of given landmark
                  ///< blocks, an O(N²d) oracle that needs G (generalized_nystrom evaluates it in panels;
                  ///< Sorensen & Embree, SISC 38(5), 2016); separates bad landmarks from a bad core
};

/// "exact", "razavi", "newton-schulz", "truncated", "oracle-core".
std::string to_string(PinvMethod method);
/// Inverse of to_string; throws std::invalid_argument naming an unknown method.
PinvMethod pinv_method_from_string(const std::string& name);
/// True for the iterations (razavi, newton-schulz), whose count PinvOptions::iterations sets.
constexpr bool is_iterative(PinvMethod method) {
  return method == PinvMethod::razavi || method == PinvMethod::newton_schulz;
}

/// How an iteration ended.
enum class PinvStatus {
  converged,  ///< exact method, or the residual ‖I − MZ‖_F fell below `tolerance`
  completed,  ///< ran every requested iteration, finite and not diverging, without reaching `tolerance`
  diverged,   ///< the residual rose above its starting value, or rose from one step to the next by more than
             ///< rounding (16·m·eps·‖M‖_F‖Z‖_F): α outside the convergence range, or a singular M
  non_finite  ///< NaN or Inf appeared in Z or its residual during the iteration
};

/// "converged", "completed", "diverged", "non-finite".
std::string to_string(PinvStatus status);

/// The most iterations an iterative pseudoinverse runs. From the safe α a direction with ασ² = x ≪ 1 needs
/// about log(1/x)/log(13/4) Razavi or log₂(1/x) Newton–Schulz steps before its quadratic or cubic phase:
/// under 1100 even for x = 1e-300; beyond that the steps only repeat rounding.
constexpr int max_pinv_iterations = 10000;

/// Options for pseudoinverse.
struct PinvOptions {
  PinvMethod method = PinvMethod::exact;
  int iterations = 6;  ///< iterative methods: number of iterations (1 ≤ iterations ≤ max_pinv_iterations)
  double alpha = 0;  ///< iterative start Z₀ = αAᵀ; 0 selects the per-matrix safe α = 1/(‖A‖₁‖A‖_∞)
  double tolerance = 0;  ///< exact, truncated: relative singular-value cut (0: max(p, m)·eps for exact, √eps
                         ///< for truncated); iterative: stop when ‖I − AZ‖_F ≤ it
  double tikhonov = 0;  ///< ε > 0: Z = (AᵀA + εI)⁻¹Aᵀ instead of A⁺ (non-symmetric safe regularization)
  double shift = 0;  ///< ε > 0: invert A + εI (LaplacianFormer; valid for symmetric PSD A)
  /// The format the computation stores its matrices in (docs/mathematics.md §8): half and bfloat16 are
  /// emulated in float32 (T = float) with A, M, Z₀, every product of a step and Z rounded to the format,
  /// without the power-of-two scaling; float32 and float64 round nothing. The Nyström methods set it from
  /// their own storage.
  Precision storage = Precision::float64;

  /// Throws std::invalid_argument naming the bad value (iterations < 1, α < 0, negative ε, non-finite
  /// values).
  void validate() const;

  /// validate(), and throws naming tikhonov or shift where it is > 0 but T holds no such number (it would
  /// read as Inf or 0 in T, where the matrix inverted, A + εI or AᵀA + εI, is formed), or naming the storage
  /// where it is emulated and T is not float.
  template <class T>
  void validate_in() const {
    validate();
    require_storage_for<T>(storage, "pinv");
    for (const auto& [epsilon, name] : {std::pair{tikhonov, "tikhonov"}, std::pair{shift, "shift"}}) {
      const T rounded = T(epsilon);
      require(epsilon == 0 || (std::isfinite(rounded) && rounded != 0), "pinv: ", name, " = ", epsilon,
              " lies beyond ", sizeof(T) == 4 ? "float" : "double", "'s range (magnitudes ",
              std::numeric_limits<T>::denorm_min(), " to ", std::numeric_limits<T>::max(), ")");
    }
  }
};

/// A pseudoinverse with its diagnostics.
template <class T>
struct PinvResult {
  Matrix<T> z;  ///< Z ≈ A⁺ (m×m)
  PinvStatus status = PinvStatus::converged;
  double alpha = 0;               ///< α used by an iterative method (0 for exact)
  int iterations = 0;             ///< iterations run
  std::vector<double> residuals;  ///< ‖I − MZ_k‖_F for k = 0 (start) .. iterations; one entry for exact.
                                  ///< M is the matrix actually inverted: A, A + εI (shift) or AᵀA + εI
                                  ///< (Tikhonov, where Z_k approximates M⁻¹ before the final ·Aᵀ)
  Index rank = 0;           ///< exact: singular values kept
  double seconds = 0;       ///< wall time of the computation on the host (an iteration: all its steps so far)
  RoundingCounts rounding;  ///< what rounding to PinvOptions::storage did, over every rounding point (none
                            ///< for the native formats)
  double residual() const { return residuals.empty() ? 0.0 : residuals.back(); }
};

/// The safe per-matrix starting scale α = 1/(‖A‖₁‖A‖_∞) (Nyströmformer's "exact" init); ασ₁² ≤ 1. In double
/// whatever T; throws std::invalid_argument for an empty or non-finite A.
template <class T>
double safe_alpha(const ConstMatrixRef<T>& A);

/// The start α = 1/(max_i ‖M_i‖₁ · max_i ‖M_i‖_∞) shared by several matrices (the authors' code and the
/// nystrom-attention package take it over every window and head of a batch); ≤ safe_alpha of each M_i, so
/// ασ₁(M_i)² ≤ 1 for all of them. A matrix with a non-finite entry (an overflowed core, whose
/// core_pseudoinverse is NaN whatever α) takes no part: it would make α = 0 for every other matrix. Throws
/// std::invalid_argument for an empty list or an empty matrix.
template <class T>
double batch_alpha(const std::vector<Matrix<T>>& matrices);

/// The pseudoinverse of a Nyström core, Nyströmformer's Ã or CUR's U (pseudoinverse with options), or, where
/// the core has overflowed, Z = NaN with status non_finite: a numerical outcome of the approximation, not bad
/// input (Ã and U are softmax rows, NaN where their logits overflow T). A Nyström core's entries
/// κ(q̄_a, k̄_b)/max_j κ(q̄_a, k_j) are not bounded by 1 for kernels other than the exponential (a landmark pair
/// may lie far closer than any token pair: e^750 under a Laplacian kernel of λ = 0.002), and no entry is
/// bounded without row-max scaling.
template <class T>
PinvResult<T> core_pseudoinverse(const ConstMatrixRef<T>& core, const PinvOptions& options);

/// The matrix M that pseudoinverse inverts for `options` (docs/mathematics.md §4): A, A + εI (shift) or AᵀA +
/// εI (Tikhonov); the iterations start from Z₀ = αMᵀ.
template <class T>
Matrix<T> inverted_matrix(const ConstMatrixRef<T>& A, const PinvOptions& options);

/// Z ≈ A⁺ (or the regularized inverse) by `options`; the residuals are computed in double. The SVD methods
/// (exact, truncated) take any p×m A (an oversampled core), with the residual ‖I − ZA‖_F of the smaller
/// product for p > m; the iterations and the shift need a square A. Throws std::invalid_argument for bad
/// options, an empty A, a non-square A where it must be square, an A with NaN or Inf entries, or
/// oracle_core (which needs G); a numerical failure of the iteration is a status. In emulated storage an A or
/// M that overflows the format is such a failure: Z = NaN, status non-finite.
template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options);

/// An iterative pseudoinverse (razavi, newton-schulz) that can be run further: the iterates Z_k of one A and
/// one start are a prefix of those of any larger iteration count, so pseudoinverse(A, options) for 2, 4 and
/// 6 iterations costs 6 steps instead of 12 (a sweep's rows of one landmark set, evaluation.hpp). Every
/// result equals pseudoinverse's for the same iteration count bit for bit; pseudoinverse runs the iterative
/// methods through this class.
template <class T>
class PinvIteration {
 public:
  /// Z₀ = αMᵀ and its residual for M = inverted_matrix(A, options); throws as pseudoinverse does, and for
  /// the exact method.
  PinvIteration(const ConstMatrixRef<T>& A, const PinvOptions& options);
  /// True when pseudoinverse(A, options) continues this iteration: the same A (entry for entry) and options
  /// but a count of at least the iterations run so far.
  bool continued_by(const ConstMatrixRef<T>& A, const PinvOptions& options) const;
  /// Runs steps until `iterations` have run or the iteration has stopped (converged, diverged, non-finite).
  void run(int iterations);
  /// The pseudoinverse after the steps run so far (Tikhonov's final ·Aᵀ applied).
  PinvResult<T> result() const;

 private:
  /// Starts the native iteration: M' = 2⁻ᵖM in double, α and Z'₀.
  void start_native();
  /// Starts the emulated one (PinvOptions::storage half or bfloat16): A and M rounded, Z₀ = R(αMᵀ), p = 0.
  void start_emulated();
  /// Z_{k+1} from Z_k: the native step from M'Z'_k, or the emulated one with its rounding points.
  Matrix<T> next_iterate();

  Matrix<T> a_;
  PinvOptions options_;
  Matrix<T> stored_a_;      ///< emulated storage: A rounded to the format (Tikhonov's final ·Aᵀ reads it)
  Matrix<T> stored_m_;      ///< emulated storage: M as the steps read it, rounded to the format
  int scale_exponent_ = 0;  ///< p: the steps run on M' = 2⁻ᵖM and Z' = 2ᵖZ
  Matrix<double> m_;        ///< M' in double
  Matrix<double> product_;  ///< M'Z'_k = M Z_k in double: the residual's and the next step's
  double start_ = 0;        ///< ‖I − MZ₀‖_F
  double start_allowance_ =
      0;                 ///< the largest rise above start_ rounding excuses: max(start_, rounding of MZ₀)
  double rounding_ = 0;  ///< 16·m·eps·‖M'‖_F: the divergence test's rounding allowance per ‖Z'‖_F
  PinvResult<T> state_;  ///< Z'_k, the residuals, α, k and the status (completed while it may go on)
};

/// core_pseudoinverse that continues `iteration` where it is continued_by(core, options) (and replaces it
/// otherwise) for an iterative method; for the exact method, or a non-finite core, core_pseudoinverse
/// itself, and `iteration` is emptied.
template <class T>
PinvResult<T> core_pseudoinverse(const ConstMatrixRef<T>& core, const PinvOptions& options,
                                 std::optional<PinvIteration<T>>& iteration);

}  // namespace nystrom
