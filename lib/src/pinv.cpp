#include "nystrom/pinv.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "emulation.hpp"
#include "nystrom/detail/enum_names.hpp"
#include "nystrom/detail/power_of_two.hpp"
#include "nystrom/error.hpp"
#include "nystrom/spectral.hpp"
#include "wall_clock.hpp"

namespace nystrom {

namespace {
constexpr std::array<EnumName<PinvMethod>, 5> method_names{{{PinvMethod::exact, "exact"},
                                                            {PinvMethod::razavi, "razavi"},
                                                            {PinvMethod::newton_schulz, "newton-schulz"},
                                                            {PinvMethod::truncated, "truncated"},
                                                            {PinvMethod::oracle_core, "oracle-core"}}};
constexpr std::array<EnumName<PinvStatus>, 4> status_names{{{PinvStatus::converged, "converged"},
                                                            {PinvStatus::completed, "completed"},
                                                            {PinvStatus::diverged, "diverged"},
                                                            {PinvStatus::non_finite, "non-finite"}}};
}  // namespace

std::string to_string(PinvMethod method) {
  return name_of(method, method_names);
}

PinvMethod pinv_method_from_string(const std::string& name) {
  return parse(name, method_names, "pseudoinverse method");
}

std::string to_string(PinvStatus status) {
  return name_of(status, status_names);
}

void PinvOptions::validate() const {
  require(iterations >= 1 && iterations <= max_pinv_iterations, "pinv: iterations = ", iterations,
          " must be between 1 and ", max_pinv_iterations);
  require(std::isfinite(alpha) && alpha >= 0, "pinv: alpha = ", alpha, " must be finite and >= 0");
  require(std::isfinite(tolerance) && tolerance >= 0, "pinv: tolerance = ", tolerance,
          " must be finite and >= 0");
  require(std::isfinite(tikhonov) && tikhonov >= 0, "pinv: tikhonov = ", tikhonov,
          " must be finite and >= 0");
  require(std::isfinite(shift) && shift >= 0, "pinv: shift = ", shift, " must be finite and >= 0");
  require(!(tikhonov > 0 && shift > 0), "pinv: tikhonov = ", tikhonov, " and shift = ", shift,
          " cannot both be > 0");
}

template <class T>
double safe_alpha(const ConstMatrixRef<T>& A) {
  require(A.size() > 0, "safe_alpha: A is empty (", A.rows(), "x", A.cols(), ")");
  require_finite(A, "safe_alpha: A");
  // Nyströmformer's init: ‖A‖₁‖A‖_∞ ≥ ‖A‖₂² = σ₁², so ασ₁² ≤ 1, inside both convergence ranges. The norms in
  // double, and α as (1/‖A‖₁)/‖A‖_∞: their product over- or underflowed for entries beyond 1e±154 (α 0 or ∞).
  const Matrix<double> a = A.template cast<double>();
  const double norm_1 = a.cwiseAbs().colwise().sum().maxCoeff();
  const double norm_inf = a.cwiseAbs().rowwise().sum().maxCoeff();
  return norm_1 > 0 ? 1.0 / norm_1 / norm_inf : 1.0;  // the zero matrix: every α gives Z₀ = 0 = A⁺
}

template <class T>
double batch_alpha(const std::vector<Matrix<T>>& matrices) {
  require(!matrices.empty(), "batch_alpha: no matrices given");
  double norm_1 = 0, norm_inf = 0;
  for (std::size_t i = 0; i < matrices.size(); ++i) {
    const Matrix<T>& M = matrices[i];
    require(M.size() > 0, "batch_alpha: matrix ", i, " is empty (", M.rows(), "x", M.cols(), ")");
    if (!all_finite(M)) continue;  // an overflowed core: its pseudoinverse is NaN whatever α
    const Matrix<double> m = M.template cast<double>();
    norm_1 = std::max(norm_1, m.cwiseAbs().colwise().sum().maxCoeff());
    norm_inf = std::max(norm_inf, m.cwiseAbs().rowwise().sum().maxCoeff());
  }
  return norm_1 > 0 ? 1.0 / norm_1 / norm_inf : 1.0;  // all zero: every α gives Z₀ = 0 = M⁺
}

template <class T>
Matrix<T> inverted_matrix(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  if (options.tikhonov > 0) {
    Matrix<T> M = A.transpose() * A;
    M.diagonal().array() += T(options.tikhonov);
    return M;
  }
  Matrix<T> M = A;
  if (options.shift > 0) M.diagonal().array() += T(options.shift);
  return M;
}

namespace {

/// M Z in double, the product behind both the residual ‖I − MZ‖_F and the next iteration step.
template <class T>
Matrix<double> product_in_double(const Matrix<double>& M, const Matrix<T>& Z) {
  return M * Z.template cast<double>();
}

/// ‖I − P‖_F of a square product P = M Z (in double).
double identity_residual(const Matrix<double>& product) {
  return (Matrix<double>::Identity(product.rows(), product.cols()) - product).stableNorm();  // no overflow
}

/// ‖I − ZM‖_F for a tall M (p > m: ZM → I_m, while MZ is a rank-m projection), ‖I − MZ‖_F otherwise.
template <class T>
double pinv_residual(const Matrix<double>& M, const Matrix<T>& Z) {
  return identity_residual(M.rows() > M.cols() ? Matrix<double>(Z.template cast<double>() * M)
                                               : product_in_double(M, Z));
}

/// Exact pseudoinverse of M by SVD in double (docs/mathematics.md §4; spectral.hpp's dense_svd, LAPACK
/// dgesdd): singular values ≤ cut·σ₁ are dropped. With an emulation, Z is rounded to its format once it is
/// in T (its rounding point), before the residual.
template <class T>
void exact_pseudoinverse(const Matrix<T>& M, double cut, PinvResult<T>& result,
                         detail::Emulation* emulation = nullptr) {
  const DenseSvd svd = dense_svd<T>(M, SvdVectors::thin);
  const Vector<double>& sigma = svd.values;
  const double threshold = sigma.size() > 0 ? cut * sigma(0) : 0;
  Vector<double> inverse = Vector<double>::Zero(sigma.size());
  for (Index i = 0; i < sigma.size(); ++i) {
    if (sigma(i) > threshold) {
      inverse(i) = 1 / sigma(i);
      ++result.rank;
    }
  }
  result.z = (svd.v * inverse.asDiagonal() * svd.u.transpose()).template cast<T>();
  if constexpr (std::is_same_v<T, float>)
    if (emulation) emulation->store(result.z);
  result.residuals.push_back(pinv_residual(M.template cast<double>().eval(), result.z));
  // A⁺ beyond T's range (a core of 1e-310 in double): no pseudoinverse to return.
  result.status = result.z.allFinite() ? PinvStatus::converged : PinvStatus::non_finite;
}

/// One step of the iteration on M from Z and MZ (the product the residual was measured on, rounded to T):
/// Razavi Z ← ¼ Z(13I − MZ(15I − MZ(7I − MZ))) (Nyströmformer eq. (15), PnP-Nystra §3) or Newton–Schulz X ←
/// X(2I − MX) (LaplacianFormer Alg. 1).
template <class T>
Matrix<T> iteration_step(PinvMethod method, const Matrix<T>& Z, const Matrix<T>& MZ) {
  const Index m = Z.rows();
  const Matrix<T> identity = Matrix<T>::Identity(m, m);
  if (method == PinvMethod::newton_schulz) return Z * (T(2) * identity - MZ);
  const Matrix<T> inner = MZ * (T(7) * identity - MZ);
  const Matrix<T> middle = MZ * (T(15) * identity - inner);
  return T(0.25) * (Z * (T(13) * identity - middle));
}

/// The rounding points of M in emulated storage from a rounded A (docs/mathematics.md §8): A itself, R(A +
/// εI) (shift), or R(R(AᵀA) + εI) (Tikhonov); ε in float32.
Matrix<float> emulated_inverted_matrix(detail::Emulation& emulation, const Matrix<float>& A,
                                       const PinvOptions& options) {
  if (options.tikhonov <= 0 && options.shift <= 0) return A;
  Matrix<float> M = options.tikhonov > 0 ? detail::rounded_product(emulation, A.transpose(), A) : A;
  M.diagonal().array() += float(options.tikhonov > 0 ? options.tikhonov : options.shift);
  emulation.store(M);
  return M;
}

/// One step of the iteration in emulated storage from Z and M, each product and difference a rounding point
/// (docs/mathematics.md §8): P = R(MZ), then Newton–Schulz Z ← R(Z·R(2I − P)) or Razavi
/// Z ← R(¼·Z·R(13I − R(P·R(15I − R(P·R(7I − P))))))), ¼ applied to the ordered sums.
Matrix<float> emulated_step(detail::Emulation& emulation, PinvMethod method, const Matrix<float>& M,
                            const Matrix<float>& Z) {
  using detail::rounded_identity_minus, detail::rounded_product;
  const Matrix<float> P = rounded_product(emulation, M, Z);
  if (method == PinvMethod::newton_schulz)
    return rounded_product(emulation, Z, rounded_identity_minus(emulation, 2, P));
  const Matrix<float> inner = rounded_product(emulation, P, rounded_identity_minus(emulation, 7, P));
  const Matrix<float> middle = rounded_product(emulation, P, rounded_identity_minus(emulation, 15, inner));
  return rounded_product(emulation, Z, rounded_identity_minus(emulation, 13, middle), 0.25f);
}

/// The result for a matrix that cannot be inverted because an entry is not finite: Z = NaN (cols×rows of
/// it), status non_finite, residual NaN.
template <class T>
PinvResult<T> non_finite_pinv(Index rows, Index cols) {
  PinvResult<T> result;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  result.z = Matrix<T>::Constant(cols, rows, T(nan));
  result.status = PinvStatus::non_finite;
  result.residuals.push_back(nan);
  return result;
}

/// Throws std::invalid_argument for bad options, an empty A, a non-square A for an iteration or a shift, or
/// an A with NaN or Inf entries.
template <class T>
void require_pinv_input(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  options.validate_in<T>();
  require(options.method != PinvMethod::oracle_core,
          "pinv: oracle-core is the optimal core of landmark blocks, computed with G by generalized_nystrom, "
          "not a pseudoinverse of one matrix");
  require(A.rows() == A.cols() || (!is_iterative(options.method) && options.shift == 0), "pinv: A is ",
          A.rows(), "x", A.cols(), "; ", is_iterative(options.method) ? to_string(options.method) : "shift",
          " needs a square A (exact and truncated take a rectangular one)");
  require(A.rows() >= 1, "pinv: A is empty (", A.rows(), "x", A.cols(), ")");
  require_finite(A, "pinv: A");
}

/// Z·Aᵀ for Tikhonov's (AᵀA + εI)⁻¹Aᵀ, Z itself otherwise; with an emulation the rounding point R(Z Aᵀ) of
/// the rounded A.
template <class T>
void finish_tikhonov(const ConstMatrixRef<T>& A, const PinvOptions& options, PinvResult<T>& result,
                     detail::Emulation* emulation = nullptr) {
  if (options.tikhonov <= 0) return;
  if constexpr (std::is_same_v<T, float>)
    if (emulation) {
      result.z = detail::rounded_product(*emulation, result.z, A.transpose());
      return;
    }
  result.z = (result.z * A.transpose()).eval();
}

/// The SVD methods in emulated storage (docs/mathematics.md §8): A and M rounded, Z the float computation's
/// (SVD in double) rounded, Tikhonov's R(Z Aᵀ); an M that has overflowed the format is not inverted (Z = NaN,
/// status non-finite).
PinvResult<float> emulated_exact_pseudoinverse(const ConstMatrixRef<float>& A, const PinvOptions& options,
                                               double cut) {
  detail::Emulation emulation(options.storage);
  const Matrix<float> stored_a = emulation.stored(A);
  const Matrix<float> M = emulated_inverted_matrix(emulation, stored_a, options);
  PinvResult<float> result;
  if (all_finite(M)) {
    exact_pseudoinverse(M, cut, result, &emulation);
    finish_tikhonov<float>(stored_a, options, result, &emulation);
  } else {
    result = non_finite_pinv<float>(A.rows(), A.cols());
  }
  result.rounding = emulation.counts();
  return result;
}

}  // namespace

/// The iteration starts from Z₀ = αMᵀ, records ‖I − MZ_k‖_F in double and stops at convergence, divergence
/// or a non-finite value; each MZ_k is formed once, in double, for its residual and the next step.
/// Divergence: the residual exceeds its starting value, or grows from one step to the next by more than
/// rounding (c·m·eps·‖M‖_F‖Z‖_F). In exact arithmetic inside the monotone ranges (ασ₁² < 2 Newton–Schulz,
/// ασ₁² < 3 Razavi) every direction's residual shrinks, so neither happens (docs/mathematics.md §4).
/// The steps run on M' = 2⁻ᵖM with its largest entry in [1, 2), from Z'₀ = 2²ᵖα M'ᵀ, and Z = 2⁻ᵖZ': the
/// products MZ are the same numbers, so every iterate is the unscaled one bit for bit wherever that is a
/// normal number, and a matrix of 1e±200 still gets its pseudoinverse (α = 1/(‖M‖₁‖M‖_∞) itself under- or
/// overflows there).
template <class T>
PinvIteration<T>::PinvIteration(const ConstMatrixRef<T>& A, const PinvOptions& options)
    : a_(A), options_(options) {
  const auto start = detail::Clock::now();
  require_pinv_input(A, options);
  require(is_iterative(options.method), "PinvIteration: ", to_string(options.method), " does not iterate");
  const bool emulated = is_emulated(options.storage);
  if (emulated)
    start_emulated();
  else
    start_native();
  product_ = product_in_double(m_, state_.z);
  start_ = identity_residual(product_);
  state_.residuals.push_back(start_);
  const double eps = emulated ? machine_epsilon(options.storage) : std::numeric_limits<T>::epsilon();
  rounding_ = 16.0 * static_cast<double>(m_.rows()) * eps * m_.norm();
  // The rise above the start that rounding excuses (run): at most the start itself, or the rounding of MZ₀
  // where the start is that small (Z₀ = αMᵀ is M⁺ to rounding for M = cI).
  start_allowance_ = std::max(start_, rounding_ * static_cast<double>(state_.z.norm()));
  state_.status = PinvStatus::completed;
  if (!std::isfinite(start_) || !state_.z.allFinite())
    state_.status = PinvStatus::non_finite;
  else if (options.tolerance > 0 && start_ <= options.tolerance)
    state_.status = PinvStatus::converged;
  state_.seconds = detail::seconds_since(start);
}

template <class T>
void PinvIteration<T>::start_native() {
  const Matrix<double> M = inverted_matrix<T>(a_, options_).template cast<double>();
  scale_exponent_ = largest_exponent(M);
  m_ = times_power_of_two(M, -scale_exponent_);
  const double alpha =
      options_.alpha > 0 ? std::ldexp(options_.alpha, 2 * scale_exponent_) : safe_alpha<double>(m_);
  state_.alpha = std::ldexp(alpha, -2 * scale_exponent_);
  // Z₀ = αMᵀ formed in double: α itself may lie beyond float's range (1e40 for a core of 1e-20).
  state_.z = (alpha * m_.transpose()).template cast<T>();
}

template <class T>
void PinvIteration<T>::start_emulated() {
  if constexpr (std::is_same_v<T, float>) {
    // As a kernel in the format runs it: no scaling (an overflow of Z is the format's), α from the rounded
    // M in double and Z₀ = R(αMᵀ) rounded once from double; an M that has overflowed the format is not
    // inverted (Z = NaN: status non-finite, as for the SVD methods).
    detail::Emulation emulation(options_.storage);
    stored_a_ = emulation.stored(a_);
    stored_m_ = emulated_inverted_matrix(emulation, stored_a_, options_);
    m_ = stored_m_.template cast<double>();
    if (all_finite(m_)) {
      state_.alpha = options_.alpha > 0 ? options_.alpha : safe_alpha<double>(m_);
      state_.z = emulation.stored_from_double(state_.alpha * m_.transpose());
    } else {
      state_.alpha = std::numeric_limits<double>::quiet_NaN();
      state_.z = non_finite_pinv<float>(m_.rows(), m_.cols()).z;
    }
    state_.rounding += emulation.counts();
  }
}

template <class T>
bool PinvIteration<T>::continued_by(const ConstMatrixRef<T>& A, const PinvOptions& options) const {
  return options.method == options_.method && options.alpha == options_.alpha &&
         options.tolerance == options_.tolerance && options.tikhonov == options_.tikhonov &&
         options.shift == options_.shift && options.storage == options_.storage &&
         options.iterations >= state_.iterations && A.rows() == a_.rows() && A.cols() == a_.cols() && A == a_;
}

template <class T>
void PinvIteration<T>::run(int iterations) {
  const auto start = detail::Clock::now();
  while (state_.status == PinvStatus::completed && state_.iterations < iterations) {
    state_.z = next_iterate();
    ++state_.iterations;
    product_ = product_in_double(m_, state_.z);
    const double residual = identity_residual(product_);
    const double previous = state_.residuals.back();
    state_.residuals.push_back(residual);
    // The rounding of MZ grows with ‖Z‖; a Z grown so large that it reaches the starting residual (rounding
    // outside range(M) amplified by every step) excuses no rise above the start.
    const double noise = rounding_ * static_cast<double>(state_.z.norm());
    if (!std::isfinite(residual) || !state_.z.allFinite())
      state_.status = PinvStatus::non_finite;
    else if (options_.tolerance > 0 && residual <= options_.tolerance)
      state_.status = PinvStatus::converged;
    else if (residual > start_ + std::min(noise, start_allowance_) || residual > previous + noise)
      state_.status = PinvStatus::diverged;
  }
  state_.seconds += detail::seconds_since(start);
}

template <class T>
Matrix<T> PinvIteration<T>::next_iterate() {
  if constexpr (std::is_same_v<T, float>) {
    if (is_emulated(options_.storage)) {
      detail::Emulation emulation(options_.storage);
      Matrix<float> z = emulated_step(emulation, options_.method, stored_m_, state_.z);
      state_.rounding += emulation.counts();
      return z;
    }
  }
  return iteration_step<T>(options_.method, state_.z, product_.template cast<T>());
}

template <class T>
PinvResult<T> PinvIteration<T>::result() const {
  const auto start = detail::Clock::now();
  PinvResult<T> result = state_;
  result.z = times_power_of_two(state_.z, -scale_exponent_);
  // The iterates are those of M scaled into range; Z itself may lie beyond T's (a core of 1e-310 in double).
  if (!result.z.allFinite()) result.status = PinvStatus::non_finite;
  if (is_emulated(options_.storage)) {
    detail::Emulation emulation(options_.storage);
    finish_tikhonov<T>(stored_a_, options_, result, &emulation);
    result.rounding += emulation.counts();
  } else {
    finish_tikhonov<T>(a_, options_, result);
  }
  result.seconds += detail::seconds_since(start);
  return result;
}

template <class T>
PinvResult<T> pseudoinverse(const ConstMatrixRef<T>& A, const PinvOptions& options) {
  if (is_iterative(options.method)) {
    PinvIteration<T> iteration(A, options);
    iteration.run(options.iterations);
    return iteration.result();
  }
  const auto start = detail::Clock::now();
  require_pinv_input(A, options);
  PinvResult<T> result;
  const double eps = std::numeric_limits<T>::epsilon();
  const double default_cut = options.method == PinvMethod::truncated
                                 ? std::sqrt(eps)
                                 : static_cast<double>(std::max(A.rows(), A.cols())) * eps;
  const double cut = options.tolerance > 0 ? options.tolerance : default_cut;
  if constexpr (std::is_same_v<T, float>)
    if (is_emulated(options.storage)) result = emulated_exact_pseudoinverse(A, options, cut);
  if (!is_emulated(options.storage)) {
    exact_pseudoinverse(inverted_matrix<T>(A, options), cut, result);
    finish_tikhonov<T>(A, options, result);
  }
  result.seconds = detail::seconds_since(start);
  return result;
}

template <class T>
PinvResult<T> core_pseudoinverse(const ConstMatrixRef<T>& core, const PinvOptions& options) {
  if (all_finite(core)) return pseudoinverse<T>(core, options);
  options.validate_in<T>();
  return non_finite_pinv<T>(core.rows(), core.cols());
}

template <class T>
PinvResult<T> core_pseudoinverse(const ConstMatrixRef<T>& core, const PinvOptions& options,
                                 std::optional<PinvIteration<T>>& iteration) {
  if (!is_iterative(options.method) || !all_finite(core)) {
    iteration.reset();
    return core_pseudoinverse<T>(core, options);
  }
  if (!iteration || !iteration->continued_by(core, options)) iteration.emplace(core, options);
  iteration->run(options.iterations);
  return iteration->result();
}

template class PinvIteration<float>;
template class PinvIteration<double>;
template PinvResult<float> core_pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&,
                                                     std::optional<PinvIteration<float>>&);
template PinvResult<double> core_pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&,
                                                       std::optional<PinvIteration<double>>&);
template PinvResult<float> core_pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template PinvResult<double> core_pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&);
template double batch_alpha<float>(const std::vector<Matrix<float>>&);
template double batch_alpha<double>(const std::vector<Matrix<double>>&);
template Matrix<float> inverted_matrix<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template Matrix<double> inverted_matrix<double>(const ConstMatrixRef<double>&, const PinvOptions&);
template double safe_alpha<float>(const ConstMatrixRef<float>&);
template double safe_alpha<double>(const ConstMatrixRef<double>&);
template PinvResult<float> pseudoinverse<float>(const ConstMatrixRef<float>&, const PinvOptions&);
template PinvResult<double> pseudoinverse<double>(const ConstMatrixRef<double>&, const PinvOptions&);

}  // namespace nystrom
