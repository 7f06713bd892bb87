#include "nystrom/bounds.hpp"

#include <cmath>
#include <limits>

#include "lapack.hpp"
#include "nystrom/detail/power_of_two.hpp"
#include "nystrom/error.hpp"
#include "nystrom/spectral.hpp"

namespace nystrom {

namespace {
constexpr double not_applicable = std::numeric_limits<double>::quiet_NaN();
}

bool BoundReport::holds(double slack) const {
  require(std::isfinite(slack) && slack >= 0, "holds: slack = ", slack, " must be finite and >= 0");
  const auto respects = [&](bool applies, double bound) {
    return !applies || spectral_error <= bound + slack * (bound + sigma1_ext);
  };
  return respects(theorem1_applies, theorem1) && respects(theorem2_applies, theorem2) &&
         respects(theorem3_applies, theorem3);
}

BoundReport evaluate_bounds(const BoundInputs& in) {
  for (double value :
       {in.sigma1_ext, in.sigma_m1_ext, in.sigma_m_core, in.spectral_error, in.sigma_m1_margin})
    require(!(value < 0), "evaluate_bounds: singular values, norms and margins must be >= 0, got ", value);
  require(!(in.theorem3_k < 0), "evaluate_bounds: theorem3_k = ", in.theorem3_k,
          " must be >= 0 (+inf or NaN: no finite K)");
  const double s1 = in.sigma1_ext, s = in.sigma_m1_ext, a = in.sigma_m_core;
  // The theorems at σ̄ = σ_{m+1} + margin, the upper end of what σ_{m+1} can be (docs/mathematics.md §3).
  const double upper = s + in.sigma_m1_margin;
  // The bounds in units of σ₁ (t = σ̄/σ₁, b = a/σ₁), then scaled back: their squares of σ₁ and a over- or
  // underflowed for kernels beyond 1e±154 (NaN or 0 for representable bounds).
  const double unit = s1 > 0 ? s1 : 1, t = upper / unit, b = a / unit;
  BoundReport r;
  r.spectral_error = in.spectral_error;
  r.sigma1_ext = s1;
  r.theorem3_k = in.theorem3_k;
  // The paper's quantity σ_{m+1}(G̃)/σ_m(G_A) (Lemma 2.1): a term, always reported.
  r.ratio = s / a;
  // Theorem 1 (derived, docs/mathematics.md §3): ‖E‖₂ ≤ σ₁²/(a − σ_{m+1}) · σ_{m+1}/a when a > σ_{m+1}.
  r.theorem1_applies = a > upper;
  const double top = s1 / unit;  // 1, or 0 for σ₁ = 0
  r.theorem1 = r.theorem1_applies ? unit * top * top / (b - t) * t / b : not_applicable;
  // Theorem 2: ‖E‖₂ ≤ 2σ₁² σ_{m+1}/a², whenever a > 0.
  r.theorem2_applies = a > 0;
  r.theorem2 = r.theorem2_applies ? unit * 2 * top * top * t / (b * b) : not_applicable;
  // Theorem 3 (a posteriori): ‖E‖₂ ≤ K σ_{m+1} when K σ_{m+1} < a.
  r.theorem3_applies = std::isfinite(in.theorem3_k) && in.theorem3_k * upper < a;
  r.theorem3 = r.theorem3_applies ? in.theorem3_k * upper : not_applicable;
  // Empirical constant C_emp = ‖E‖₂ a / σ_{m+1} and C_emp/σ₁².
  r.c_emp = s > 0 ? in.spectral_error * (a / s) : not_applicable;
  r.c_emp_normalized = s1 > 0 && s > 0 ? (in.spectral_error / s1) * (b / (s / unit)) / s1 : not_applicable;
  return r;
}

namespace {

/// ‖Y‖₂² of a dense matrix: the largest eigenvalue of its smaller Gram matrix YYᵀ or YᵀY (0 when Y is empty).
double squared_norm(const Matrix<double>& y) {
  if (y.size() == 0) return 0;
  Matrix<double> gram =
      y.rows() <= y.cols() ? Matrix<double>(y * y.transpose()) : Matrix<double>(y.transpose() * y);
  double largest = 0;
  const lapack_int info = detail::lapack_largest_eigenvalue(gram, largest);
  if (info != 0)
    throw std::runtime_error(describe("theorem3_constant: LAPACK's dsyevr failed (info = ", info, ") on a ",
                                      gram.rows(), "x", gram.cols(), " Gram matrix"));
  return std::max(0.0, largest);
}

}  // namespace

template <class T>
CoreTerms core_terms(const ConstMatrixRef<T>& left, const ConstMatrixRef<T>& core,
                     const ConstMatrixRef<T>& upper) {
  const Index m = core.rows();
  require(m > 0 && core.cols() == m, "theorem3_constant: core is ", core.rows(), "x", core.cols(),
          ", expected a nonempty square matrix");
  require(left.cols() == m && upper.rows() == m && left.rows() == upper.cols(), "theorem3_constant: left is ",
          left.rows(), "x", left.cols(), " and upper is ", upper.rows(), "x", upper.cols(), ", expected N x ",
          m, " and ", m, " x N with one N");
  require_finite(left, "theorem3_constant: left");
  require_finite(upper, "theorem3_constant: upper");
  require_finite(core, "theorem3_constant: core");
  // K is invariant under a common scale of the three blocks: they are divided by the power of two nearest the
  // core's largest entry, so that the Gram products below neither over- nor underflow (kernels of 1e-200).
  // Singular values scale exactly with a power of two.
  const int exponent = largest_exponent(core);
  const auto unit_scale = [exponent](const auto& block) {
    return Matrix<double>(times_power_of_two(block.template cast<double>(), -exponent));
  };
  const Matrix<double> a = unit_scale(core);
  const Vector<double> sigma = singular_values<double>(a);  // LAPACK dgesdd, values only
  CoreTerms terms;
  terms.sigma_m_core = std::ldexp(sigma(m - 1), exponent);
  if (!(sigma(m - 1) > static_cast<double>(m) * std::numeric_limits<double>::epsilon() * sigma(0))) {
    terms.theorem3_k = std::numeric_limits<double>::infinity();
    return terms;
  }
  // G_L G_A⁻¹ and G_A⁻¹ G_U by LU solves with G_A (partial pivoting; backward stable like the SVD's inverse,
  // for a quarter of its work): (G_L G_A⁻¹)ᵀ = G_A⁻ᵀ G_Lᵀ.
  const Eigen::PartialPivLU<Matrix<double>> lu(a);
  const double left_norm = std::sqrt(squared_norm(lu.transpose().solve(unit_scale(left).transpose())));
  const double upper_norm = std::sqrt(squared_norm(lu.solve(unit_scale(upper))));
  terms.theorem3_k = (1 + left_norm) * (1 + upper_norm);
  return terms;
}

template <class T>
double theorem3_constant(const ConstMatrixRef<T>& left, const ConstMatrixRef<T>& core,
                         const ConstMatrixRef<T>& upper) {
  return core_terms<T>(left, core, upper).theorem3_k;
}

template CoreTerms core_terms<float>(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                                     const ConstMatrixRef<float>&);
template CoreTerms core_terms<double>(const ConstMatrixRef<double>&, const ConstMatrixRef<double>&,
                                      const ConstMatrixRef<double>&);
template double theorem3_constant<float>(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                                         const ConstMatrixRef<float>&);
template double theorem3_constant<double>(const ConstMatrixRef<double>&, const ConstMatrixRef<double>&,
                                          const ConstMatrixRef<double>&);

}  // namespace nystrom
