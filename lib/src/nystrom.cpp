#include "nystrom/nystrom.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <type_traits>
#include <utility>

#include "attention_inputs.hpp"
#include "blas_gemm.hpp"
#include "nystrom/enum_names.hpp"
#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"
#include "panels.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<Stabilization>, 3> stabilization_names{{{Stabilization::none, "none"},
                                                                      {Stabilization::row_max, "row-max"},
                                                                      {Stabilization::clamped, "clamped"}}};
}  // namespace

std::string to_string(Stabilization stabilization) {
  return name_of(stabilization, stabilization_names);
}

Stabilization stabilization_from_string(const std::string& name) {
  return parse(name, stabilization_names, "stabilization");
}

void NystromOptions::validate(Index n, Index d) const {
  kernel.validate();
  require(std::isfinite(clamp_threshold), "nystrom: clamp_threshold = ", clamp_threshold, " must be finite");
  landmarks.validate(n, d);
  pinv.validate();
}

PinvOptions core_pinv_options(const NystromOptions& options) {
  PinvOptions pinv = options.pinv;
  const double c = options.kernel.log_shift;
  if (options.stabilization != Stabilization::none || c == 0) return pinv;
  // Each scaled by a power of e^{−c} (at most the largest double: ε of a core of entries e^{−1000} is all of
  // κ_c's); 0 stays 0, for α the automatic start.
  const auto scaled = [](double value, double factor) {
    return value > 0 ? std::min(value * factor, std::numeric_limits<double>::max()) : value;
  };
  pinv.shift = scaled(pinv.shift, std::exp(-c));
  pinv.tikhonov = scaled(pinv.tikhonov, std::exp(-2 * c));
  pinv.alpha = scaled(pinv.alpha, std::exp(2 * c));
  return pinv;
}

namespace {

/// The authors' clamped exponential exp(min(x, c)) + max(x − c, 0) with threshold c (PnP-Nystra public code),
/// elementwise in place, as array expressions that Eigen vectorizes (its exp agrees with std::exp to an ulp;
/// eight times faster than std::exp element by element).
template <class Block>
void clamped_exp(Block&& x, double threshold) {
  using T = typename std::decay_t<Block>::Scalar;
  const T c = T(threshold);
  x = (x.array().min(c).exp() + (x.array() - c).max(T(0))).matrix();
}

/// exp(φ − l 1ᵀ) in place: a stabilized kernel block from its exponent φ and row log-scales l. Two passes on
/// purpose: Eigen vectorizes exp of a plain array but calls scalar expf on the fused broadcast expression
/// (G_U's m×b panels are contiguous: detail::exp_in_place takes them as one flat array).
template <class T, class Block>
void exp_shifted_rows(Block&& exponent, const Vector<T>& log_scale) {
  exponent.colwise() -= log_scale;
  detail::exp_in_place(exponent);
}

/// The blocks from their exponents, in place: exp(φ − l) with the row log-scales l (the row maxima, or the
/// kernel's log-shift without stabilization), or the clamped exponential with options.clamp_threshold.
template <class T, class Block>
void kernel_from_exponent(Block&& exponent, const Vector<T>& log_scale, const NystromOptions& options) {
  if (options.stabilization == Stabilization::clamped)
    clamped_exp(exponent, options.clamp_threshold);
  else
    exp_shifted_rows<T>(exponent, log_scale);
}

/// The row log-scale subtracted inside the exponentials of blocks that are not row-max scaled: the kernel's
/// log-shift c for plain blocks (exp(φ − c), the blocks of κ_c), 0 for the clamped map (which applies to φ).
template <class T>
T plain_log_scale(const NystromOptions& options) {
  return options.stabilization == Stabilization::none ? T(options.kernel.log_shift) : T(0);
}

/// Sets the log scales of finished factors relative to κ_c (NystromFactors): row-max scales l and u of φ
/// become l − c and u − c; plain blocks are κ_c's own (scales 0); clamped blocks take e^{−c} as their row
/// scale.
template <class T>
void scales_relative_to_shift(NystromFactors<T>& f) {
  const T shift = T(f.options.kernel.log_shift);
  switch (f.options.stabilization) {
    case Stabilization::row_max:
      f.left_log_scale.array() -= shift;
      f.upper_log_scale.array() -= shift;
      return;
    case Stabilization::none:
      f.upper_log_scale.setZero();
      return;
    case Stabilization::clamped:
      f.left_log_scale.setConstant(-shift);
      return;
  }
}

/// Throws std::invalid_argument naming `where` unless the landmarks are m×d with m ≥ 1 for tokens of
/// dimension d.
template <class T>
void require_landmarks(const Landmarks<T>& landmarks, Index d, const char* where) {
  require(landmarks.q.rows() >= 1 && landmarks.k.rows() == landmarks.q.rows() && landmarks.q.cols() == d &&
              landmarks.k.cols() == d,
          where, ": landmarks are ", landmarks.q.rows(), "x", landmarks.q.cols(), " and ", landmarks.k.rows(),
          "x", landmarks.k.cols(), ", expected m x d with m >= 1 and d = ", d);
}

/// generalized_nystrom for Q and K of either layout (Tokens: ConstMatrixRef or ConstRowMajorMap), read in
/// place: the GEMMs take a row-major panel as the transpose of a column-major one. Into f, whose N×m blocks
/// keep their storage when their shapes do not change. `finished_upper_panel`, when given, is called on the
/// thread that finished a panel of G_U, right after its exponentials (generalized_nystrom_attention).
template <class T, class Tokens>
void generalized_factors(const Tokens& Q, const Tokens& K, Landmarks<T> landmarks,
                         const NystromOptions& options, NystromFactors<T>& f,
                         const std::function<void(const detail::Panel&)>& finished_upper_panel = {}) {
  require_landmarks(landmarks, Q.cols(), "generalized_nystrom");
  f.options = options;
  f.landmarks = std::move(landmarks);
  const Kernel& kernel = options.kernel;
  const bool row_max_scaled = options.stabilization == Stabilization::row_max;
  const T plain_scale = plain_log_scale<T>(options);
  const Index n = Q.rows(), m = f.landmarks.q.rows();
  f.core = kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  f.left.resize(n, m);
  f.upper.resize(m, n);
  f.left_log_scale.setZero(n);
  // The plain scale without row-max stabilization; with it, the maximum over the threads' partial maxima.
  f.upper_log_scale =
      Vector<T>::Constant(m, row_max_scaled ? -std::numeric_limits<T>::infinity() : plain_scale);
  // Row panels of Q (for G_L = κ(Q, K̄)) and of K (columns of G_U = κ(Q̄, K)) spread over the threads with
  // single-threaded BLAS. PnP-Nystra eq. (8): M_L = diag(exp(max_j φ(Q, K̄)_ij)) is per row, so a G_L panel is
  // finished at once; M_U = diag(exp(max_j φ(Q̄, K)_ij)) needs the maxima over all N columns, so G_U is
  // exponentiated after a reduction. M_U scales the rows of both G_A and G_U, so Ĝ = M_L G_Lⁿ (G_Aⁿ)⁺ G_Uⁿ
  // for a nonsingular G_A.
  // Threads only above detail::parallel_work multiply-adds: a parallel region waits for all its threads, and
  // one that another process keeps off its core costs a scheduler time slice (milliseconds).
  const Index panels = detail::panel_count(n);
  const int workers = detail::workers_for(panels, 2.0 * double(n) * double(m) * double(Q.cols()));
  detail::PanelSchedule exponent_panels(panels, workers), upper_panels(panels, workers);
  const SingleThreadedBlas single_threaded_blas;
  std::exception_ptr core_failure;  // an exception leaves an OpenMP region only through this
#pragma omp parallel num_threads(workers)
  {
    Vector<T> upper_max = Vector<T>::Constant(m, -std::numeric_limits<T>::infinity());
    exponent_panels.for_each([&](Index p) {
      const auto [index, r, b] = detail::panel_of(p, n);
      auto left = f.left.middleRows(r, b);
      auto upper = f.upper.middleCols(r, b);
      detail::kernel_exponent<T>(kernel, Q.middleRows(r, b), f.landmarks.k, left);
      detail::kernel_exponent<T>(kernel, f.landmarks.q, K.middleRows(r, b), upper);
      // Eigen 3.4 vectorizes these row reductions across the columns.
      const Vector<T> left_scale =
          row_max_scaled ? Vector<T>(left.rowwise().maxCoeff()) : Vector<T>::Constant(b, plain_scale);
      if (row_max_scaled) {
        f.left_log_scale.segment(r, b) = left_scale;
        upper_max = upper_max.cwiseMax(upper.rowwise().maxCoeff());
      }
      kernel_from_exponent<T>(left, left_scale, options);
    });
    if (row_max_scaled) {
#pragma omp critical
      f.upper_log_scale = f.upper_log_scale.cwiseMax(upper_max);
    }
#pragma omp barrier
    // The core and its pseudoinverse (serial, an m×m SVD or iteration) on one thread while the others
    // exponentiate G_U's panels (and multiply them by V in generalized_nystrom_attention); the thread joins
    // the panels when it is done.
#pragma omp single nowait
    try {
      kernel_from_exponent<T>(f.core, f.upper_log_scale, options);
      f.pinv = core_pseudoinverse<T>(f.core, core_pinv_options(options));
    } catch (...) {
      core_failure = std::current_exception();
    }
    upper_panels.for_each([&](Index p) {
      const detail::Panel panel = detail::panel_of(p, n);
      kernel_from_exponent<T>(f.upper.middleCols(panel.first, panel.rows), f.upper_log_scale, options);
      if (finished_upper_panel) finished_upper_panel(panel);
    });
  }
  if (core_failure) std::rethrow_exception(core_failure);
  scales_relative_to_shift(f);
}

/// symmetric_nystrom for Q and K of either layout, into f (as generalized_factors).
template <class T, class Tokens>
void symmetric_factors(const Tokens& Q, Landmarks<T> landmarks, const NystromOptions& options,
                       NystromFactors<T>& f) {
  require_landmarks(landmarks, Q.cols(), "symmetric_nystrom");
  require(options.stabilization != Stabilization::row_max,
          "symmetric_nystrom: stabilization row-max is not defined for the symmetric form C W+ C^T (its row "
          "and column scalings differ); use none or clamped");
  // LaplacianFormer Alg. 1: W = κ(Q̄, K̄), C = κ(Q, K̄), Ĝ = C W⁺ Cᵀ.
  f.options = options;
  f.landmarks = std::move(landmarks);
  const Index n = Q.rows(), m = f.landmarks.k.rows();
  const T plain_scale = plain_log_scale<T>(options);
  f.left.resize(n, m);
  f.upper.resize(m, n);
  // C and Cᵀ by row panels of Q over the threads (as G_L of generalized_factors).
  detail::for_each_panel(n, double(n) * double(m) * double(Q.cols()), [&](const detail::Panel& panel) {
    auto left = f.left.middleRows(panel.first, panel.rows);
    detail::kernel_exponent<T>(options.kernel, Q.middleRows(panel.first, panel.rows), f.landmarks.k, left);
    kernel_from_exponent<T>(left, Vector<T>::Constant(panel.rows, plain_scale), options);
    f.upper.middleCols(panel.first, panel.rows) = left.transpose();
  });
  f.core = options.kernel.exponent_block<T>(f.landmarks.q, f.landmarks.k);
  kernel_from_exponent<T>(f.core, Vector<T>::Constant(m, plain_scale), options);
  f.left_log_scale.setZero(n);
  f.upper_log_scale.setZero(m);
  f.pinv = core_pseudoinverse<T>(f.core, core_pinv_options(options));
  scales_relative_to_shift(f);
}

/// generalized_factors on the landmarks options.landmarks selects; select_landmarks checks that Q and K are
/// finite (for segment means: only when a mean is not).
template <class T, class Tokens>
void selected_generalized_factors(const Tokens& Q, const Tokens& K, const NystromOptions& options,
                                  NystromFactors<T>& f) {
  detail::require_nystrom_shapes(Q, K, options, "generalized_nystrom");
  generalized_factors<T>(Q, K, select_landmarks<T>(Q, K, options.landmarks), options, f);
}

/// symmetric_factors on the landmarks options.landmarks selects (finiteness as above).
template <class T, class Tokens>
void selected_symmetric_factors(const Tokens& Q, const Tokens& K, const NystromOptions& options,
                                NystromFactors<T>& f) {
  detail::require_nystrom_shapes(Q, K, options, "symmetric_nystrom");
  symmetric_factors<T>(Q, select_landmarks<T>(Q, K, options.landmarks), options, f);
}

}  // namespace

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const NystromOptions& options) {
  NystromFactors<T> f;
  selected_generalized_factors<T>(Q, K, options, f);
  return f;
}

template <class T>
NystromFactors<T> generalized_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                      const NystromOptions& options) {
  NystromFactors<T> f;
  selected_generalized_factors<T>(Q, K, options, f);
  return f;
}

template <class T>
void generalized_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                         const NystromOptions& options, NystromFactors<T>& factors) {
  selected_generalized_factors<T>(Q, K, options, factors);
}

template <class T>
NystromFactors<T> generalized_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                      const Landmarks<T>& landmarks, const NystromOptions& options) {
  detail::require_nystrom_inputs<T>(Q, K, options, "generalized_nystrom");
  NystromFactors<T> f;
  generalized_factors<T>(Q, K, landmarks, options, f);
  return f;
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const NystromOptions& options) {
  NystromFactors<T> f;
  selected_symmetric_factors<T>(Q, K, options, f);
  return f;
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                    const NystromOptions& options) {
  NystromFactors<T> f;
  selected_symmetric_factors<T>(Q, K, options, f);
  return f;
}

template <class T>
void symmetric_nystrom(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                       const NystromOptions& options, NystromFactors<T>& factors) {
  selected_symmetric_factors<T>(Q, K, options, factors);
}

template <class T>
NystromFactors<T> symmetric_nystrom(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                    const Landmarks<T>& landmarks, const NystromOptions& options) {
  detail::require_nystrom_inputs<T>(Q, K, options, "symmetric_nystrom");
  NystromFactors<T> f;
  symmetric_factors<T>(Q, landmarks, options, f);
  return f;
}

template <class T>
void NystromFactors<T>::apply(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, cols());
  Eigen::Map<Vector<T>> out(y, rows());
  const Vector<T> core_side = pinv.z * (upper * in);
  out.noalias() = left * core_side;
  out.array() *= left_log_scale.array().exp();
}

template <class T>
void NystromFactors<T>::apply_transpose(const T* x, T* y) const {
  Eigen::Map<const Vector<T>> in(x, rows());
  Eigen::Map<Vector<T>> out(y, cols());
  const Vector<T> scaled = in.array() * left_log_scale.array().exp();
  const Vector<T> core_side = pinv.z.transpose() * (left.transpose() * scaled);
  out.noalias() = upper.transpose() * core_side;
}

template <class T>
Matrix<T> NystromFactors<T>::dense() const {
  const Matrix<T> right = pinv.z * upper;
  Matrix<T> out = left * right;
  out.array().colwise() *= left_log_scale.array().exp();
  return out;
}

namespace {

/// [G_U V, G_U 1] (m×(dv+1)) of one panel of keys into `term`: the first step of Algorithm 1 (algorithm1).
template <class T, class Values>
void upper_values_term(const NystromFactors<T>& factors, const Values& V, const detail::Panel& panel,
                       MatrixRef<T> term) {
  const Index dv = V.cols();
  const auto upper = factors.upper.middleCols(panel.first, panel.rows);
  const auto [op_v, values] = detail::blas_operand(detail::Op::plain, V.middleRows(panel.first, panel.rows));
  detail::gemm<T>(detail::Op::plain, op_v, T(1), upper, values, T(0), term.leftCols(dv));
  term.col(dv).noalias() = upper * Vector<T>::Ones(panel.rows);  // G_U 1 as a GEMV
}

/// Algorithm 1 after its sum over the keys, from [G_U V, G_U 1] (algorithm1) into `out`.
template <class T, class Values, class Output>
void algorithm1_from_upper_values(const NystromFactors<T>& factors, const Values& V,
                                  const Matrix<T>& upper_values, Output& out) {
  const Index n = factors.rows(), m = factors.upper.rows(), dv = V.cols();
  if (!all_finite(upper_values)) require_finite(V, "nystrom_attention: V");
  const Matrix<T> weights = factors.pinv.z * upper_values;  // W = Z [G_U V, G_U 1]
  const T denominator_shift = factors.options.stabilization == Stabilization::clamped ? T(1e-12) : T(0);
  const Matrix<T> values_weights =
      Output::IsRowMajor ? Matrix<T>(weights.leftCols(dv).transpose()) : Matrix<T>();
  // A panel of b queries: its denominators Ĝ1 = G_L W_1 (a GEMV), its rows of G_L divided by them, then
  // Ô = (D⁻¹G_L) W_V as one GEMM straight into Ô's rows: Ô is written once, by BLAS, with no N×dv
  // intermediate and no division pass over it. A row-major Ô is written as its transpose (Ô's rows read as
  // columns) = W_Vᵀ (D⁻¹G_L)ᵀ with both factors formed transposed (W_Vᵀ once, (D⁻¹G_L)ᵀ per panel), so that
  // both enter the GEMM plain (OpenBLAS's small-matrix kernel for two transposed operands took twice as
  // long).
  detail::for_each_panel(n, double(n) * double(m) * double(dv + 1), [&](const detail::Panel& panel) {
    const auto left = factors.left.middleRows(panel.first, panel.rows);
    const Vector<T> inverse = (T(1) / ((left * weights.col(dv)).array() + denominator_shift)).matrix();
    if constexpr (Output::IsRowMajor) {
      const Matrix<T> scaled = (left.array().colwise() * inverse.array()).matrix().transpose();
      auto rows = out.middleRows(panel.first, panel.rows).transpose();
      detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), values_weights, scaled, T(0), rows);
    } else {
      const Matrix<T> scaled = left.array().colwise() * inverse.array();
      auto rows = out.middleRows(panel.first, panel.rows);
      detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), scaled, weights.leftCols(dv), T(0), rows);
    }
  });
}

/// PnP-Nystra Algorithm 1 (nystrom_attention) into `out`, V and `out` column-major or row-major.
template <class T, class Values, class Output>
void algorithm1(const NystromFactors<T>& factors, const Values& V, Output& out) {
  // PnP-Nystra Algorithm 1 with the products reassociated: [G_U V, G_U 1] (m×(dv+1), summed over the panels
  // of keys in order), W = Z [G_U V, G_U 1] (m×(dv+1)), then one row panel at a time the denominators
  // Ĝ1 = G_L W_1 and Ô = diag(1/Ĝ1) G_L W_V. Never N×N, and the N×m P = G_L Z of the paper is never formed.
  // The row scale M_L cancels in the ratio, so it is never applied. A NaN or ±∞ in V reaches G_U V (the
  // entries of G_U are finite and ≥ 0, and ∞·0 is NaN), so V is scanned only when [G_U V, G_U 1] is not
  // finite: then either V is bad (throws) or the finite sums overflowed (a numerical outcome). The scan cost
  // 3% of the whole at N = 4096.
  const Index keys = factors.cols(), m = factors.upper.rows(), dv = V.cols();
  const Matrix<T> upper_values = detail::sum_over_panels<T>(
      keys, m, dv + 1, double(m) * double(keys) * double(dv + 1),
      [&](const detail::Panel& panel, MatrixRef<T> term) { upper_values_term(factors, V, panel, term); });
  algorithm1_from_upper_values(factors, V, upper_values, out);
}

void require_values(Index rows, Index n) {
  require(rows == n, "nystrom_attention: V has ", rows, " rows, expected N = ", n);
}

void require_output(Index rows, Index cols, Index n, Index dv) {
  require(rows == n && cols == dv, "nystrom_attention: out is ", rows, "x", cols, ", expected ", n, "x", dv);
}

/// generalized_nystrom_attention for Q, K, V and Ô of either layout: the factors into f, then each panel of
/// G_U times its rows of V (Algorithm 1's first step) as soon as the panel is exponentiated, the rest of
/// Algorithm 1 after the factors.
template <class T, class Tokens, class Values, class Output>
void generalized_attention(const Tokens& Q, const Tokens& K, const Values& V, const NystromOptions& options,
                           NystromFactors<T>& f, Output& out) {
  detail::require_nystrom_shapes(Q, K, options, "generalized_nystrom");
  require_values(V.rows(), K.rows());
  require_output(out.rows(), out.cols(), Q.rows(), V.cols());
  Landmarks<T> landmarks = select_landmarks<T>(Q, K, options.landmarks);
  detail::PanelTerms<T> upper_values(K.rows(), landmarks.q.rows(), V.cols() + 1);
  generalized_factors<T>(Q, K, std::move(landmarks), options, f, [&](const detail::Panel& panel) {
    upper_values_term(f, V, panel, MatrixRef<T>(upper_values.term(panel)));
  });
  algorithm1_from_upper_values(f, V, upper_values.sum(), out);
}

}  // namespace

template <class T>
Matrix<T> nystrom_attention(const NystromFactors<T>& factors, const ConstMatrixRef<T>& V) {
  require_values(V.rows(), factors.cols());
  Matrix<T> out(factors.rows(), V.cols());
  algorithm1<T>(factors, V, out);
  return out;
}

template <class T>
void nystrom_attention(const NystromFactors<T>& factors, const ConstRowMajorRef<T>& V, RowMajorRef<T> out) {
  require_values(V.rows(), factors.cols());
  require_output(out.rows(), out.cols(), factors.rows(), V.cols());
  algorithm1<T>(factors, V, out);
}

template <class T>
Matrix<T> generalized_nystrom_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K,
                                        const ConstMatrixRef<T>& V, const NystromOptions& options,
                                        NystromFactors<T>& factors) {
  Matrix<T> out(Q.rows(), V.cols());
  generalized_attention<T>(Q, K, V, options, factors, out);
  return out;
}

template <class T>
void generalized_nystrom_attention(const ConstRowMajorMap<T>& Q, const ConstRowMajorMap<T>& K,
                                   const ConstRowMajorRef<T>& V, const NystromOptions& options,
                                   NystromFactors<T>& factors, RowMajorRef<T> out) {
  generalized_attention<T>(Q, K, V, options, factors, out);
}

#define NYSTROM_INSTANTIATE(T)                                                                              \
  template struct NystromFactors<T>;                                                                        \
  template NystromFactors<T> generalized_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,     \
                                                    const NystromOptions&);                                 \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,       \
                                                  const NystromOptions&);                                   \
  template NystromFactors<T> generalized_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,     \
                                                    const Landmarks<T>&, const NystromOptions&);            \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,       \
                                                  const Landmarks<T>&, const NystromOptions&);              \
  template NystromFactors<T> generalized_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&, \
                                                    const NystromOptions&);                                 \
  template NystromFactors<T> symmetric_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,   \
                                                  const NystromOptions&);                                   \
  template void generalized_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,              \
                                       const NystromOptions&, NystromFactors<T>&);                          \
  template void symmetric_nystrom<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,                \
                                     const NystromOptions&, NystromFactors<T>&);                            \
  template Matrix<T> nystrom_attention<T>(const NystromFactors<T>&, const ConstMatrixRef<T>&);              \
  template void nystrom_attention<T>(const NystromFactors<T>&, const ConstRowMajorRef<T>&, RowMajorRef<T>); \
  template Matrix<T> generalized_nystrom_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,   \
                                                      const ConstMatrixRef<T>&, const NystromOptions&,      \
                                                      NystromFactors<T>&);                                  \
  template void generalized_nystrom_attention<T>(const ConstRowMajorMap<T>&, const ConstRowMajorMap<T>&,    \
                                                 const ConstRowMajorRef<T>&, const NystromOptions&,         \
                                                 NystromFactors<T>&, RowMajorRef<T>);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
