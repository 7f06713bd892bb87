#pragma once
/// @file evaluation.hpp
/// One point of a sweep: every error, spectral term and bound of FORMATS.md §2 for one head, kernel and
/// Nyström configuration. Head-level quantities (G, ‖G‖₂, exact attention) and landmark-level ones (σ(G̃),
/// σ_m(G_A), K) are computed once and shared by every point that needs them. Dense or matrix-free by a memory
/// budget. On Device::cuda the exact and PnP-Nystra attention outputs and the matrix-free error operator run
/// on the GPU (backend.hpp); the dense path and every SVD stay on the CPU.

#include <array>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>

#include "nystrom/backend.hpp"
#include "nystrom/bounds.hpp"
#include "nystrom/kernels.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/threads.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// One attention head: Q, K (N×d) and optionally V (N×dv; empty: no output errors).
template <class T>
struct Head {
  Matrix<T> q, k, v;
  std::array<Index, 2> window{};  ///< h×w token grid when the head is a 2-D window ({0, 0}: none)
  /// Throws std::invalid_argument naming `where` for N·d = 0, mismatched shapes or non-finite values.
  void validate(const std::string& where) const;
};

/// How points are evaluated.
struct EvaluationOptions {
  double memory_budget =
      4.0e9;  ///< bytes a dense N×N analysis may use; above it the matrix-free path is taken
  bool force_matrix_free = false;
  Device device = Device::cpu;  ///< where attention outputs and matrix-free error products run
  SpectralOptions spectral;
  Index panel_rows = 128;  ///< row panel of matrix-free kernel operators (MatrixFreeOptions::panel_rows)
  /// ‖G‖₂, ‖G − Ĝ‖₂ and σ(G̃) by full SVD up to this size, above it by Lanczos on the stored (or
  /// matrix-free) matrix; σ(G̃) of a stored G̃ falls back to the full SVD when the Lanczos σ_{m+1} is not
  /// certified to 1e-10 relative or to (n + m)·eps·σ₁ (SpectralResult::last_error_bound).
  Index dense_svd_limit = 256;
  /// Throws std::invalid_argument naming the bad value (budget ≤ 0, panel_rows < 1, dense_svd_limit < 0,
  /// spectral).
  void validate() const;
  /// True when a head of n tokens in a scalar of `scalar_bytes` is analysed matrix-free: forced, or the dense
  /// analysis (3 N×N matrices) does not fit memory_budget.
  bool matrix_free(Index n, std::size_t scalar_bytes) const;
};

/// Quantities of one head and kernel, shared by all its points.
template <class T>
struct HeadReference {
  Kernel kernel;
  bool matrix_free = false;
  Matrix<T> g;         ///< dense G = κ(Q, K) (empty when matrix-free)
  double g_norm2 = 0;  ///< ‖G‖₂
  Matrix<T> output;    ///< exact attention O (empty without V)
};

/// Builds the head reference (dense G unless options.matrix_free(N, sizeof(T))).
template <class T>
HeadReference<T> make_reference(const Head<T>& head, const Kernel& kernel, const EvaluationOptions& options);

/// Terms that depend on the landmarks but not on the pseudoinverse.
struct LandmarkTerms {
  double sigma1_ext = 0;    ///< σ₁(G̃)
  double sigma_m1_ext = 0;  ///< σ_{m+1}(G̃)
  double sigma_m_core = 0;  ///< σ_m(G_A)
  double theorem3_k = 0;    ///< K of theorem 3
  bool converged = true;    ///< false when the Lanczos run for σ(G̃) did not reach its tolerance
};

/// σ₁(G̃), σ_{m+1}(G̃), σ_m(G_A), K for `landmarks` (computed on the unstabilized blocks of
/// G̃ = κ([Q̄; Q], [K̄; K]), MATH.md §2). G̃ is stored in double or matrix-free by the rule of make_reference,
/// and built here, so the terms need no head reference and can be computed beside it.
template <class T>
LandmarkTerms landmark_terms(const Head<T>& head, const Kernel& kernel, const Landmarks<T>& landmarks,
                             const EvaluationOptions& options);

/// True when landmark_terms for n tokens and m landmarks is best run beside the rest of a point
/// (run_concurrently): G̃ is stored and small enough that its Lanczos products run on one thread
/// ((n + m)² < detail::parallel_work), so the other cores would otherwise idle through them.
template <class T>
bool overlap_landmark_terms(Index n, Index m, const EvaluationOptions& options) {
  const double extended = double(n + m);
  return !options.matrix_free(n, sizeof(T)) && extended * extended < detail::parallel_work;
}

/// Runs `point_task` and `terms_task` (landmark_terms for n tokens and m landmarks) beside each other when
/// overlap_landmark_terms says so (run_concurrently), else the terms first.
template <class T>
void run_with_landmark_terms(Index n, Index m, const EvaluationOptions& options,
                             const std::function<void()>& point_task,
                             const std::function<void()>& terms_task) {
  if (overlap_landmark_terms<T>(n, m, options)) {
    run_concurrently(point_task, terms_task);
  } else {
    terms_task();
    point_task();
  }
}

/// Every column of one sweep point (FORMATS.md §2). NaN marks what does not apply.
struct PointResult {
  static constexpr double nan = std::numeric_limits<double>::quiet_NaN();
  double spectral_error = nan, relative_spectral_error = nan, frobenius_error = nan;
  double output_relative_error = nan, output_max_error = nan, output_mean_abs_error = nan;
  double sigma1_ext = nan, sigma_m1_ext = nan, sigma_m_core = nan;
  double bound_ratio = nan, theorem1_bound = nan, theorem2_bound = nan, theorem3_bound = nan,
         theorem3_k = nan;
  double c_emp = nan, c_emp_normalized = nan;
  double pinv_residual = nan;
  std::string pinv_status;  ///< to_string(PinvStatus)
  bool bounds_hold = true;  ///< every applicable bound ≥ the measured error
  bool matrix_free = false;
  double seconds = 0;
};

/// Every column of one generalized Nyström configuration on a head except those of the landmark terms
/// (σ(G̃), σ_m(G_A), K and the bounds built on them stay NaN): errors of Ĝ and of the attention output, the
/// pseudoinverse diagnostics, `seconds`.
template <class T>
PointResult measure_nystrom(const Head<T>& head, const HeadReference<T>& reference,
                            const NystromOptions& options, const EvaluationOptions& evaluation);

/// Completes a measured point with its landmark terms: σ₁(G̃), σ_{m+1}(G̃), σ_m(G_A), K, the theorem bounds,
/// c_emp and bounds_hold (bounds.hpp).
void apply_landmark_terms(const LandmarkTerms& terms, PointResult& point);

/// Evaluates one generalized Nyström configuration on a head: measure_nystrom completed by
/// apply_landmark_terms. `terms` may come from landmark_terms for the same landmarks; with nullptr they are
/// computed here, beside the measurement when overlap_landmark_terms says so.
template <class T>
PointResult evaluate_nystrom(const Head<T>& head, const HeadReference<T>& reference,
                             const NystromOptions& options, const EvaluationOptions& evaluation,
                             const LandmarkTerms* terms = nullptr);

}  // namespace nystrom
