#pragma once
/// @file evaluation.hpp
/// One point of a sweep for any of the seven methods (approximation.hpp): every error, spectral term and
/// bound of docs/formats.md §2, each computed one way for every method.
///
/// A HeadEvaluator holds one head and what its points share: per kernel the log-shift c and the head
/// reference (G or its matrix-free operator, ‖G‖₂, the exact attention output, and for the softmax methods S
/// = D⁻¹G and ‖S‖₂), per landmark options the landmarks (selected once and used by the factors and the bound
/// terms alike) and, per kernel and landmarks, the Lemma 2.1 terms; consecutive Nyström points that differ
/// only in the pseudoinverse share the factors and continue one iteration (pinv.hpp's PinvIteration). The
/// rules:
///   - dense or matrix-free: EvaluationOptions::matrix_free (a memory budget), one rule for every subcommand;
///   - ‖·‖₂ of a stored matrix: Lanczos on the stored matrix (the full SVD where it does not converge, up to
///     dense_svd_limit); σ(G̃) of the Lemma 2.1 terms: full SVD up to dense_svd_limit, Lanczos above it;
///     matrix-free: Lanczos on the operator of backend.hpp (CPU or GPU), products in double;
///   - ‖·‖_F: exact on the stored difference; matrix-free accumulated in row panels;
///   - the error matrix: E = G − Ĝ for pnp-nystra and symmetric-nystrom, S − Ŝ for the softmax methods;
///   - large logits: kernel matrices of κ_c = e^{−c}κ (kernels.hpp, c = kernel_log_shift) give every σ, ‖E‖
///     and bound scaled by e^{−c} exactly; they are reported multiplied back by e^{c} in double (column
///     log_shift = c). Relative errors, S and the outputs do not depend on c (docs/mathematics.md §1).
/// The exact side: a head with an additive score term B (Head::bias, the model's bias and mask) has
/// G_c = exp(φ(Q, K) + B − c), S its rows normalised and O = S V (docs/mathematics.md §7.1), stored, never
/// matrix-free (the N×N term is stored already); the approximations still see Q and K alone. Without B the
/// exact side is the kernel's, dense or matrix-free by the rule above.
/// On Device::cuda the factors of pnp-nystra, the exact attention output and every matrix-free product run on
/// the GPU; the output error comes from the same factors as the spectral error (Algorithm 1 on the host).

#include <array>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "nystrom/approximation.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/certificates.hpp"
#include "nystrom/head.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/landmarks.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// The largest stored N×N matrix whose floors (PointResult::optimal_error) come from one full SVD of all its
/// singular values, shared by every point of the head; above it from Lanczos per rank on the stored matrix,
/// and matrix-free on kernel tiles. A full SVD of N = 512 costs about what a few Lanczos runs of the top
/// singular values do, at N = 1024 several times more (one sweep point at N = 1024 took 640 ms with the
/// limit at 2048, most of it in the two SVDs of G and S).
constexpr Index full_spectrum_limit = 512;

/// How points are evaluated.
struct EvaluationOptions {
  double memory_budget =
      4.0e9;                 ///< bytes a dense N×N analysis may use; above it the matrix-free path is taken
  bool matrix_free = false;  ///< every head matrix-free, whatever the budget (--matrix-free)
  Device device = Device::cpu;  ///< where factors, attention outputs and matrix-free products run
  SpectralOptions spectral;
  Index panel_rows = 128;  ///< row panel of matrix-free kernel operators (MatrixFreeOptions::panel_rows)
  /// ‖G‖₂, ‖E‖₂ and σ(G̃) by full SVD up to this size, above it by Lanczos on the stored (or matrix-free)
  /// matrix; σ(G̃) of a stored G̃ falls back to the full SVD when the Lanczos σ_{m+1} is not certified to
  /// 1e-10 relative or to (n + m)·eps·σ₁ (SpectralResult::last_error_bound).
  Index dense_svd_limit = 256;
  CertificateOptions certificate;  ///< the certificate of every spectral error (certificates.hpp)
  /// Certificates only: spectral_error NaN, its bounds spectral_error_lower/upper from `certificate` (for
  /// heads where the exact norm is too costly: the certificate takes certificate.steps Gram products).
  bool certificates_only = false;
  /// Throws std::invalid_argument naming the bad value (budget ≤ 0, panel_rows < 1, dense_svd_limit < 0,
  /// spectral, a device that cannot run here).
  void validate() const;
  /// True when a head of n tokens in a scalar of `scalar_bytes` is analysed matrix-free: forced, or the dense
  /// analysis (3 N×N matrices) does not fit memory_budget. The one rule for every subcommand.
  bool uses_matrix_free(Index n, std::size_t scalar_bytes) const;
  /// The tiling of the matrix-free operators.
  MatrixFreeOptions tiling() const { return {.panel_rows = panel_rows}; }
};

/// Terms that depend on the landmarks but not on the pseudoinverse, of the kernel as given (with a log-shift
/// c: the values of κ_c, e^{−c} times those of κ; K is scale-free).
struct LandmarkTerms {
  double sigma1_ext = 0;    ///< σ₁(G̃)
  double sigma_m1_ext = 0;  ///< σ_{m+1}(G̃)
  double sigma_m_core = 0;  ///< σ_m(G_A)
  double theorem3_k = 0;    ///< K of theorem 3
  /// How far the exact σ_{m+1}(G̃) may lie above sigma_m1_ext: sigma_m1_margin of bounds.hpp (the Lanczos
  /// certificate or the rounding floor of G̃'s entries, the larger)
  double sigma_m1_margin = 0;
  bool converged = true;  ///< false when the Lanczos run for σ(G̃) did not reach its tolerance
};

/// σ₁(G̃), σ_{m+1}(G̃), σ_m(G_A), K for `landmarks` (computed on the unstabilized blocks of
/// G̃ = κ([Q̄; Q], [K̄; K]), docs/mathematics.md §2; with a bias, G̃'s N×N block is the head's G,
/// head_extended_matrix). G̃ is stored in double or matrix-free (kernel_operator on options.device, products
/// in double) by matrix_free_head, and built here, so the terms need no head reference and can be computed
/// beside it.
template <class T>
LandmarkTerms landmark_terms(const Head<T>& head, const Kernel& kernel, const Landmarks<T>& landmarks,
                             const EvaluationOptions& options);

/// True when landmark_terms for n tokens and m landmarks is best run beside the rest of a point
/// (run_concurrently): G̃ is stored and small enough that its Lanczos products run on one thread
/// ((n + m)² < detail::parallel_work), so the other cores would otherwise idle through them.
template <class T>
bool overlap_landmark_terms(Index n, Index m, const EvaluationOptions& options) {
  const double extended = double(n + m);
  return !options.uses_matrix_free(n, sizeof(T)) && extended * extended < detail::parallel_work;
}

/// Every column of one point (docs/formats.md §2; point_record.hpp turns it into the table's cells). NaN
/// marks what does not apply. Absolute quantities are of κ (scaled back from κ_c by e^{log_shift}).
struct PointResult {
  static constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  ErrorMatrix error_matrix = ErrorMatrix::none;  ///< the matrix the spectral and Frobenius errors are of
  double spectral_error = nan, relative_spectral_error = nan, frobenius_error = nan;
  /// Ô against the exact output: computed in T, or for an emulated storage (half, bfloat16) in float64
  /// (docs/mathematics.md §8), so that the format's error is part of the figure.
  double output_relative_error = nan, output_max_error = nan, output_mean_abs_error = nan;
  Index nonfinite_output_rows = -1;  ///< rows of Ô with an entry not finite; -1 without values
  /// What rounding to the point's storage did over every rounding point (none for float32, float64).
  RoundingCounts rounding;
  double sigma1_ext = nan, sigma_m1_ext = nan, sigma_m1_margin = nan, sigma_m_core = nan;
  double bound_ratio = nan, theorem1_bound = nan, theorem2_bound = nan, theorem3_bound = nan,
         theorem3_k = nan;
  double c_emp = nan, c_emp_normalized = nan;
  double pinv_residual = nan;
  /// How far from the best possible: σ_{r+1} of the error matrix (G or S; r = m, Performer's r or Linformer's
  /// k), the Eckart–Young floor of ‖M − M̂‖₂ over every M̂ of rank r (in the units of spectral_error), and a
  /// certified lower bound of it (Ritz values, interlacing: certificates.hpp).
  double optimal_error = nan, optimal_error_lower = nan;
  double relative_optimal_error = nan;  ///< optimal_error / ‖M‖₂, beside relative_spectral_error
  /// The certificate of ‖M − M̂‖₂ (certificates.hpp): lower ≤ it always, upper ≥ it except with probability
  /// spectral_error_upper_failure.
  double spectral_error_lower = nan, spectral_error_upper = nan, spectral_error_upper_failure = nan;
  /// The attention matrix's side for every method with an Ŝ: ‖S − Ŝ‖₂/‖S‖₂ and its floor σ_{r+1}(S)/‖S‖₂
  /// (for the softmax methods the relative spectral error itself, for pnp-nystra and symmetric-nystrom Ŝ =
  /// diag(1/(Ĝ1)) Ĝ).
  double attention_relative_error = nan, attention_optimal_error = nan;
  double selection_entries = 0;                  ///< kernel entries κ(x, y) the landmark selection evaluated
  std::optional<PinvStatus> pinv_status;         ///< none for methods without a pseudoinverse
  std::optional<bool> landmark_terms_converged;  ///< pnp-nystra: the Lanczos run for σ(G̃) converged
  bool bounds_hold =
      true;  ///< every applicable bound ≥ the measured error, where Ĝ is Lemma 2.1's (else true)
  bool matrix_free = false;
  double log_shift = 0;          ///< c of κ_c for this head and kernel (kernel_log_shift)
  double seconds = 0;            ///< the point's own work (landmark selection, factors, errors, output)
  double reference_seconds = 0;  ///< the head reference it used (on each row that uses it)
  double landmark_seconds = 0;   ///< the landmark terms it used (pnp-nystra; on each row that uses them)
  double elapsed_seconds = 0;    ///< the call from start to end, shared computations it built included
};

/// Quantities of one head and kernel, shared by all its points: of κ_c (kernel carries the log-shift).
template <class T>
struct HeadReference {
  Kernel kernel;  ///< the kernel with its log-shift c
  bool matrix_free = false;
  Matrix<T> g;         ///< dense G_c (head_kernel_matrix; empty when matrix-free)
  double g_norm2 = 0;  ///< ‖G_c‖₂
  /// Top singular values of G_c for the floors, by their count (floor_of: every value of a stored G, or
  /// rank + 1 by Lanczos), so that a floor does not depend on which points came first.
  std::map<Index, SpectralResult> g_spectra;
  Matrix<T> output;    ///< exact attention O (empty without V)
  double seconds = 0;  ///< time to build it
  /// Softmax methods only, built on their first point: S = D⁻¹G dense (empty when matrix-free), G_c 1 (the
  /// row sums S is formed with on the matrix-free path) and ‖S‖₂.
  struct Attention {
    Matrix<T> s;
    Vector<double> row_sums;
    double norm2 = 0;
    std::map<Index, SpectralResult> spectra;  ///< top singular values of S for the floors, as g_spectra
  };
  std::optional<Attention> attention;
};

/// The head's log-shift c, its error naming `where` and the kernel: kernel_log_shift of its tokens, or with a
/// bias (Head::bias) log_shift_for the larger of the tokens' largest exponent and the exact side's, max_ij
/// (φ(Q, K) + B)_ij, so both the approximations' kernel blocks and G_c have entries ≤ 1; the error also names
/// that exponent when exp of it overflows double.
template <class T>
double head_log_shift(const Head<T>& head, const Kernel& kernel, const std::string& where);

/// True when `head` is analysed matrix-free: EvaluationOptions::matrix_free for its N and no bias (a head
/// with a stored N×N bias has its G stored too).
template <class T>
bool matrix_free_head(const Head<T>& head, const EvaluationOptions& options) {
  return head.bias.size() == 0 && options.uses_matrix_free(head.tokens(), sizeof(T));
}

/// The exponent of the head's exact side, φ(Q, K) of `kernel` without its log-shift (kernels.hpp) plus the
/// head's bias B where it has one: N×N, O(N²d).
template <class T>
Matrix<T> head_exponent(const Head<T>& head, const Kernel& kernel);

/// The head's G_c, dense: κ_c(Q, K) of `shifted`, or exp(φ(Q, K) + B − c) with a bias.
template <class T>
Matrix<T> head_kernel_matrix(const Head<T>& head, const Kernel& shifted);

/// The head's S = D⁻¹G, dense, each row normalised with its own max shift (independent of the log-shift):
/// attention_matrix of Q and K, or softmax_rows(φ(Q, K) + B) with a bias.
template <class T>
Matrix<T> head_attention_matrix(const Head<T>& head, const Kernel& kernel);

/// The head's extended matrix G̃ = [[G_A, G_U], [G_L, G]] of κ_c for `tokens` = extended_tokens of its
/// landmarks, dense, with the head's G_c (its bias included) as the N×N block.
template <class T>
Matrix<T> head_extended_matrix(const Head<T>& head, const Kernel& shifted, const ExtendedTokens<T>& tokens);

/// Throws std::invalid_argument naming `where`, the kernel and the largest logit where κ(Q, K) of the head
/// overflows even in double (kernel_log_shift); O(Nd) where the Cauchy–Schwarz bound |s|·max‖q‖·max‖k‖ on
/// the logits rules that out, one pass over the logits otherwise. Drivers call it for every head and kernel
/// before they write anything.
template <class T>
void require_representable_kernel(const Head<T>& head, const Kernel& kernel, const std::string& where);

/// require_representable_kernel for tokens without a bias (the Python module's spectral functions); also
/// throws, naming `where` and the shapes, unless Q and K hold at least one token each.
template <class T>
void require_representable_kernel(const ConstMatrixRef<T>& q, const ConstMatrixRef<T>& k,
                                  const Kernel& kernel, const std::string& where);

/// Landmark options placed on a head's token grid: without a window of their own ({0, 0}), the given window
/// and prefix tokens (docs/formats.md §1).
LandmarkOptions on_token_grid(LandmarkOptions landmarks, const std::array<Index, 2>& window,
                              Index prefix_tokens);
/// The landmark options of every method of `options` placed on the token grid.
ApproximationOptions on_token_grid(ApproximationOptions options, const std::array<Index, 2>& window,
                                   Index prefix_tokens);

namespace detail {
struct MatrixErrors;  ///< the norms of one error matrix (internal: lib/src/matrix_errors.hpp)
}  // namespace detail

/// Evaluates points of one head (a copy is kept), reusing what its points share (file comment). Build one per
/// head and keep it while its points are evaluated: a sweep rank works through the points of one head and
/// kernel before it takes another (cache-affinity scheduling).
template <class T>
class HeadEvaluator {
 public:
  /// Throws std::invalid_argument naming `where` (e.g. "/layers/00 batch 0 head 3") for a bad head, or
  /// naming the option for bad evaluation options.
  HeadEvaluator(Head<T> head, const EvaluationOptions& options, std::string where = "head");

  /// Every column of `method` with `options` on this head (landmark options without a window take the head's
  /// token grid, on_token_grid; the kernel's own log_shift is replaced by the head's). New landmark terms of
  /// a pnp-nystra point are computed beside the head reference and the point where overlap_landmark_terms
  /// says so. Throws std::invalid_argument naming the value for options that do not fit the head, and naming
  /// `where` and the largest logit where κ overflows even in double.
  PointResult evaluate(Method method, const ApproximationOptions& options);

  /// The log-shift c of `kernel` on this head (kernel_log_shift), computed once per kernel.
  double log_shift(const Kernel& kernel);
  /// The head reference of `kernel` (built on first use; one kernel is kept at a time).
  const HeadReference<T>& reference(const Kernel& kernel);

  const Head<T>& head() const { return head_; }
  const EvaluationOptions& options() const { return options_; }

 private:
  /// Landmarks selected once per landmark options, and their Lemma 2.1 terms per kernel.
  struct LandmarkSet {
    Landmarks<T> landmarks;
    std::map<std::string, std::pair<LandmarkTerms, double>> terms;  ///< by kernel: terms, seconds
  };
  /// The factors of the last Nyström point on the CPU with the iteration of its pseudoinverse, when it had
  /// an iterative one.
  struct LastFactors {
    std::string key;  ///< what the factors but Z depend on: the method, landmarks, kernel and stabilization
    NystromFactors<T> factors;
    double blocks_seconds = 0;  ///< the time of the factors without their pseudoinverse
    std::optional<PinvIteration<T>> iteration;
  };
  /// The landmarks of `options`, selected on first use with `kernel` where the strategy evaluates the
  /// kernel (`selected` says whether this call selected them).
  LandmarkSet& landmark_set(const LandmarkOptions& options, const Kernel& kernel, bool& selected);
  /// The factors of a Nyström point on `landmarks`: on the CPU, where the last point's differ only in the
  /// pseudoinverse, those with Z recomputed (core_pseudoinverse continuing the last point's iteration where
  /// this one asks for more steps of it: the sweep's rows of 2, 4 and 6 iterations run 6 steps, not 12), the
  /// same values bit for bit; otherwise computed. `seconds` is the time they take computed alone: the
  /// blocks' and the whole iteration's, though only the new steps ran.
  const NystromFactors<T>& nystrom_factors(bool generalized, const Landmarks<T>& landmarks,
                                           const NystromOptions& nystrom, double& seconds);
  /// The reference of the shifted kernel, built when missing.
  const HeadReference<T>& shifted_reference(const Kernel& shifted);
  /// The softmax part of the reference (S, its row sums, ‖S‖₂), built when missing.
  const typename HeadReference<T>::Attention& attention_reference(const Kernel& shifted);
  /// The floor σ_{rank+1} of G_c (`matrix` kernel) or of S (attention) and its certified lower bound, from
  /// the reference's singular values: all of them by one full SVD for a stored matrix of N ≤
  /// full_spectrum_limit, else rank + 1 of them by Lanczos (0, 0 for rank ≥ N: every matrix of rank N is
  /// exact).
  std::pair<double, double> floor_of(ErrorMatrix matrix, Index rank, const Kernel& shifted);
  /// ‖S − Ŝ‖₂ and ‖S − Ŝ‖_F of an implied attention matrix (stored or matrix-free, as the head reference).
  detail::MatrixErrors attention_errors(const FactoredOperator<T>& implied, const Kernel& shifted);
  /// attention_relative_error and attention_optimal_error of a kernel approximation's Ŝ of rank `rank`.
  void set_attention_errors(PointResult& point, const FactoredOperator<T>& implied, Index rank,
                            const Kernel& shifted);

  /// The output columns of `output` (Ô of a point in `storage`): against the reference's exact output, or
  /// for an emulated storage against the float64 exact output of the kernel (computed once per kernel).
  void set_output_errors(Precision storage, const Kernel& shifted, const Matrix<T>& output,
                         PointResult& point);

  PointResult kernel_point(Method method, const ApproximationOptions& options, const Kernel& shifted);
  PointResult attention_point(Method method, const ApproximationOptions& options, const Kernel& shifted);
  PointResult exact_point(const ApproximationOptions& options, const Kernel& shifted);

  Head<T> head_;
  EvaluationOptions options_;
  std::string where_;
  std::map<std::string, double> shifts_;  ///< log-shift by kernel (type and parameter)
  std::optional<HeadReference<T>> reference_;
  std::map<std::string, LandmarkSet> landmark_sets_;  ///< by landmark options
  LastFactors last_factors_;
  std::map<std::string, Matrix<double>> float64_outputs_;  ///< by kernel: the exact Ô in float64
};

}  // namespace nystrom
