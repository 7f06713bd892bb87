#pragma once
/// @file nystrom.hpp
/// Generalized (non-symmetric) Nyström approximation Ĝ = G_L G_A⁺ G_U (PnP-Nystra; docs/mathematics.md §2),
/// its row-max stabilized form (PnP-Nystra eq. (8)), the authors' clamped-exp variant, and the symmetric form
/// C W⁺ Cᵀ (LaplacianFormer Alg. 1). Only the thin blocks (N×m, m×m, m×N) are formed.

#include <string>

#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// How the blocks are scaled before the pseudoinverse (docs/mathematics.md §2).
enum class Stabilization {
  none,     ///< plain blocks G_L, G_A, G_U
  row_max,  ///< PnP-Nystra eq. (8): G_Lⁿ = M_L⁻¹G_L, G_Aⁿ = M_U⁻¹G_A, G_Uⁿ = M_U⁻¹G_U with row-max exponents
  clamped,  ///< the authors' code: exp(x) → exp(min(x, c)) + max(x − c, 0) in all three blocks, c =
            ///< NystromOptions::clamp_threshold (5 in their SwinIR code, 0 in their Uformer and RVRT code);
            ///< changes the kernel
  row_sum  ///< G_L as row_max; the landmark rows scaled by their sums over the N keys, G_Aⁿ = D_U⁻¹G_A and
           ///< G_Uⁿ = D_U⁻¹G_U with D_U = diag(G_U 1): for an oversampled (p×m) core, the least-squares fit
           ///< in the rows of the attention matrix S = D⁻¹G, each landmark row weighted alike; for a square
           ///< nonsingular core the same Ĝ as row_max (docs/mathematics.md §2)
};

/// "none", "row-max", "clamped", "row-sum".
std::string to_string(Stabilization stabilization);
/// Inverse of to_string; throws std::invalid_argument naming an unknown value.
Stabilization stabilization_from_string(const std::string& name);

/// Options for generalized_nystrom and symmetric_nystrom. With oversampled landmarks (LandmarkOptions::
/// oversampling > 1) the core G_A is p×m: generalized_nystrom only, with a pseudoinverse by SVD (exact,
/// truncated) or the oracle core.
struct NystromOptions {
  Kernel kernel;
  LandmarkOptions landmarks;
  PinvOptions pinv;
  Stabilization stabilization = Stabilization::row_max;
  double clamp_threshold = 5;  ///< c of Stabilization::clamped, exp(min(x, c)) + max(x − c, 0); finite
  /// The format the factors, their pseudoinverse (core_pinv_options) and Algorithm 1 store their matrices in
  /// (docs/mathematics.md §8): half and bfloat16 are emulated in float32 (T = float; the column-major entry
  /// points), float32 and float64 round nothing.
  Precision storage = Precision::float64;

  /// Validates every member for N tokens of dimension d; throws std::invalid_argument naming the bad value.
  void validate(Index n, Index d) const;
};

/// The options the pseudoinverse of the core is computed with: options.pinv in options.storage, except that
/// plain blocks of a kernel with log-shift c (core e^{−c}G_A) get the absolute regularizations and an
/// explicit α rescaled so that Z(e^{−c}G_A) = e^{c}Z(G_A) (εI by e^{−c}, Tikhonov's ε by e^{−2c}, α by
/// e^{2c}; tolerances are relative already).
PinvOptions core_pinv_options(const NystromOptions& options);

/// The factors of Ĝ = diag(exp(left_log_scale)) · left · Z · upper, with Z = pinv.z ≈ core⁺ (or the oracle
/// core, PinvMethod::oracle_core), for the kernel
/// κ_c = exp(φ − c) of options.kernel (c = its log_shift, kernels.hpp): Ĝ_c = e^{−c}·Ĝ in exact arithmetic.
/// Without stabilization left = G_L, core = G_A, upper = G_U of κ_c and left_log_scale = 0; with row-max
/// scaling the blocks are those of κ (exp(φ − l) for the row maxima l of φ) and the log scales are l − c; the
/// clamped blocks are those of the authors' kernel on φ, and left_log_scale = −c.
template <class T>
struct NystromFactors {
  Matrix<T> left;             ///< G_L or G_Lⁿ, N×m
  Matrix<T> core;             ///< G_A or G_Aⁿ, p×m (p = m unless the landmarks are oversampled)
  Matrix<T> upper;            ///< G_U or G_Uⁿ, p×N (Cᵀ for the symmetric form)
  Vector<T> left_log_scale;   ///< log diag(M_L) relative to κ_c, N (row_max, row_sum: l − c; none: 0;
                              ///< clamped: −c)
  Vector<T> upper_log_scale;  ///< log of the landmark rows' scales relative to κ_c, p (row_max: u − c;
                              ///< row_sum: log of the rows' sums; else 0)
  PinvResult<T> pinv;         ///< Z ≈ core⁺ with its diagnostics
  Landmarks<T> landmarks;     ///< Q̄, K̄ (and indices for selection strategies)
  NystromOptions options;     ///< what produced these factors
  /// What rounding to options.storage did in the factors' steps (Q, K, the landmarks, the exponents and the
  /// blocks; docs/mathematics.md §8); the pseudoinverse's are pinv.rounding. None for the native formats.
  RoundingCounts rounding;

  Index rows() const { return left.rows(); }
  Index cols() const { return upper.cols(); }

  /// y = Ĝx (x has cols() entries, y rows()). O(Nm).
  void apply(const T* x, T* y) const;
  /// y = Ĝᵀx (x has rows() entries, y cols()). O(Nm).
  void apply_transpose(const T* x, T* y) const;
  /// Ĝ as a dense N×N matrix (small N and tests only). O(N²m).
  Matrix<T> dense() const;
};

/// The generalized Nyström factors of G = κ(Q, K) for Q, K (N×d). O(Nmd + m³). G_L and G_U are formed in
/// 256-row panels shared by the OpenMP threads (above detail::parallel_work multiply-adds; single-threaded
/// BLAS inside; detail::PanelSchedule); M_U's row maxima are reduced over the threads before G_U is
/// exponentiated, while one thread computes the core's pseudoinverse. The same factors on any thread count.
/// In an emulated options.storage (T = float): the landmarks are chosen from Q and K as given, then Q, K,
/// the landmarks and every block are rounded to it (docs/mathematics.md §8).
template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options);

/// The same on row-major Q and K (C-ordered arrays, heads of a [B, H, N, d] batch), read in place without a
/// copy to column-major: the same landmarks as for column-major copies of Q and K, bit for bit, and the same
/// factors to rounding (the GEMMs read row-major operands as transposed column-major ones, which BLAS may sum
/// in another order). The row-major entry points compute in the native formats: an emulated storage throws
/// std::invalid_argument naming it.
template <class T>
NystromFactors<T> generalized_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                      const NystromOptions& options);

/// The same into `factors`, reusing its storage: for calls in a loop (the heads of a batch), where fresh
/// N×m blocks each time cost their page faults (at N = 4096 a quarter of the call). On an exception `factors`
/// is left unspecified.
template <class T>
void generalized_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                         const NystromOptions& options, NystromFactors<T>& factors);

/// The same with given landmarks Q̄, K̄ (m×d each, e.g. selected once and shared with the bound terms of the
/// same point); options.landmarks is recorded, not used for selection. Throws std::invalid_argument for
/// landmarks of the wrong shape.
template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options);

/// The symmetric Nyström factors C W⁺ Cᵀ with W = κ(Q̄, K̄), C = κ(Q, K̄) (LaplacianFormer Alg. 1); exact only
/// for a symmetric G. Use options.pinv.shift for LaplacianFormer's W + εI (under a log-shift c of the
/// kernel, ε is taken relative to κ: W_c + e^{−c}εI, so that Ĝ_c = e^{−c}Ĝ).
template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const NystromOptions& options);

/// The same on row-major Q and K, read in place (as for generalized_nystrom).
template <class T>
NystromFactors<T> symmetric_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                    const NystromOptions& options);

/// The same into `factors`, reusing its storage (as for generalized_nystrom).
template <class T>
void symmetric_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                       const NystromOptions& options, NystromFactors<T>& factors);

/// The same with given landmarks (as for generalized_nystrom).
template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const Landmarks<T>& landmarks, const NystromOptions& options);

/// PnP-Nystra Algorithm 1, reassociated: W = Z [G_U V, G_U 1_N] (m×(dv+1)), then row panel by row panel
/// Ĝ1 = G_L W_1 and Ô = (diag(1/Ĝ1) G_L) W_V, one GEMM writing Ô; the same Ô as (P(G_U V)) ⊘ (P(G_U 1_N))
/// with P = G_L Z up to rounding, without the N×m P. O(Nm(d + dv)), never N×N; threads (above
/// detail::parallel_work multiply-adds per step) over 256-column panels of G_U, summed in panel order, and
/// row panels of G_L, so the result is the same on any thread count. The clamped variant divides by (Ĝ1 +
/// 1e-12) as the authors' code does. Factors of an emulated storage (factors.options.storage) are multiplied
/// in it, each product rounded: Ô = R(R(G_L R(Z R(G_U V))) ⊘ R(G_L R(Z R(G_U 1)))) (docs/mathematics.md §8).
template <class T>
Matrix<T> nystrom_attention(const NystromFactors<T>& factors, const ConstMatrixRef<T>& V);

/// The same, adding what rounding to the factors' storage did in Algorithm 1's steps (V, the products, Ô) to
/// `rounding` (nothing for the native formats).
template <class T>
Matrix<T> nystrom_attention(const NystromFactors<T>& factors, const ConstMatrixRef<T>& V,
                            RoundingCounts& rounding);

/// The same with V and Ô row-major (a head of a [B, H, N, dv] batch, batched.hpp): Ô is written into `out`
/// (N×dv), and neither V nor Ô is copied to another layout.
template <class T>
void nystrom_attention(const NystromFactors<T>& factors, const ConstRowMajorRef<T>& V, RowMajorRef<T> out);

/// generalized_nystrom and nystrom_attention in one call, the factors into `factors` and Ô returned: each
/// 256-column panel of G_U is multiplied by its rows of V right after its exponentials, while one thread
/// computes the core's pseudoinverse (with the two calls, the other threads wait for it). The same factors
/// and the same Ô as the two calls, bit for bit, on any thread count; in an emulated storage the two calls
/// themselves (Algorithm 1's rounding counts are then those of nystrom_attention with `rounding`).
template <class T>
Matrix<T> generalized_nystrom_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                        const ConstMatrixRef<T>& V, const NystromOptions& options,
                                        NystromFactors<T>& factors);

/// The same on row-major Q, K, V and Ô (a head of a batch, batched.hpp), read and written in place, into
/// `factors` reusing its storage (as generalized_nystrom does) and Ô into `out` (N×dv).
template <class T>
void generalized_nystrom_attention(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                   const ConstRowMajorRef<T>& V, const NystromOptions& options,
                                   NystromFactors<T>& factors, RowMajorRef<T> out);

}  // namespace nystrom
