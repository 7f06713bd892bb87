#include "nystrom/bounds.hpp"

#include <cmath>
#include <limits>

#include "nystrom/error.hpp"
#include "nystrom/spectral.hpp"

namespace nystrom {

namespace {
constexpr double not_applicable = std::numeric_limits<double>::quiet_NaN();
}

bool BoundReport::holds(double slack) const {
  const auto respects = [&](bool applies, double bound) {
    return !applies || spectral_error <= bound + slack * (bound + sigma1_ext);
  };
  return respects(theorem1_applies, theorem1) && respects(theorem2_applies, theorem2) &&
         respects(theorem3_applies, theorem3);
}

BoundReport evaluate_bounds(const BoundInputs& in) {
  for (double value : {in.sigma1_ext, in.sigma_m1_ext, in.sigma_m_core, in.spectral_error})
    require(!(value < 0), "evaluate_bounds: singular values and norms must be >= 0, got ", value);
  require(!(in.theorem3_k < 0), "evaluate_bounds: theorem3_k = ", in.theorem3_k,
          " must be >= 0 (+inf or NaN: no finite K)");
  const double s1 = in.sigma1_ext, s = in.sigma_m1_ext, a = in.sigma_m_core;
  // The bounds in units of σ₁ (t = σ_{m+1}/σ₁, b = a/σ₁), then scaled back: their squares of σ₁ and a over-
  // or underflowed for kernels beyond 1e±154 (NaN or 0 for representable bounds).
  const double unit = s1 > 0 ? s1 : 1, t = s / unit, b = a / unit;
  BoundReport r;
  r.spectral_error = in.spectral_error;
  r.sigma1_ext = s1;
  r.theorem3_k = in.theorem3_k;
  // The paper's quantity σ_{m+1}(G̃)/σ_m(G_A) (Lemma 2.1): a term, always reported.
  r.ratio = s / a;
  // Theorem 1 (derived, docs/mathematics.md §3): ‖E‖₂ ≤ σ₁²/(a − σ_{m+1}) · σ_{m+1}/a when a > σ_{m+1}.
  r.theorem1_applies = a > s;
  const double top = s1 / unit;  // 1, or 0 for σ₁ = 0
  r.theorem1 = r.theorem1_applies ? unit * top * top / (b - t) * t / b : not_applicable;
  // Theorem 2: ‖E‖₂ ≤ 2σ₁² σ_{m+1}/a², whenever a > 0.
  r.theorem2_applies = a > 0;
  r.theorem2 = r.theorem2_applies ? unit * 2 * top * top * t / (b * b) : not_applicable;
  // Theorem 3 (a posteriori): ‖E‖₂ ≤ K σ_{m+1} when K σ_{m+1} < a.
  r.theorem3_applies = std::isfinite(in.theorem3_k) && in.theorem3_k * s < a;
  r.theorem3 = r.theorem3_applies ? in.theorem3_k * s : not_applicable;
  // Empirical constant C_emp = ‖E‖₂ a / σ_{m+1} and C_emp/σ₁².
  r.c_emp = s > 0 ? in.spectral_error * (a / s) : not_applicable;
  r.c_emp_normalized = s1 > 0 && s > 0 ? (in.spectral_error / s1) * (b / t) / s1 : not_applicable;
  return r;
}

namespace {

/// ‖X‖₂² from the m×m symmetric Gram matrix XᵀX or XXᵀ (the largest eigenvalue).
double largest_eigenvalue(const Matrix<double>& gram) {
  return Eigen::SelfAdjointEigenSolver<Matrix<double>>(gram, Eigen::EigenvaluesOnly).eigenvalues().maxCoeff();
}

}  // namespace

template <class T>
double theorem3_constant(const ConstMatrixRef<T>& left, const ConstMatrixRef<T>& core,
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
  const double largest = core.template cast<double>().cwiseAbs().maxCoeff();
  const int exponent = largest > 0 ? std::ilogb(largest) : 0;
  const auto unit_scale = [exponent](const auto& block) {
    return Matrix<double>(
        block.template cast<double>().unaryExpr([exponent](double v) { return std::ldexp(v, -exponent); }));
  };
  const Matrix<double> a = unit_scale(core), l = unit_scale(left), u = unit_scale(upper);
  const DenseSvd svd = dense_svd<double>(a, SvdVectors::thin);  // LAPACK dgesdd
  const Vector<double>& sigma = svd.values;
  if (!(sigma(m - 1) > static_cast<double>(m) * std::numeric_limits<double>::epsilon() * sigma(0)))
    return std::numeric_limits<double>::infinity();
  const Matrix<double> inverse = svd.v * sigma.cwiseInverse().asDiagonal() * svd.u.transpose();
  // ‖G_L G_A⁻¹‖₂² = λ_max(G_A⁻ᵀ (G_LᵀG_L) G_A⁻¹), ‖G_A⁻¹G_U‖₂² = λ_max(G_A⁻¹ (G_U G_Uᵀ) G_A⁻ᵀ): m×m only.
  const Matrix<double> left_gram = inverse.transpose() * (l.transpose() * l) * inverse;
  const Matrix<double> upper_gram = inverse * (u * u.transpose()) * inverse.transpose();
  const double left_norm = std::sqrt(std::max(0.0, largest_eigenvalue(left_gram)));
  const double upper_norm = std::sqrt(std::max(0.0, largest_eigenvalue(upper_gram)));
  return (1 + left_norm) * (1 + upper_norm);
}

template double theorem3_constant<float>(const ConstMatrixRef<float>&, const ConstMatrixRef<float>&,
                                         const ConstMatrixRef<float>&);
template double theorem3_constant<double>(const ConstMatrixRef<double>&, const ConstMatrixRef<double>&,
                                          const ConstMatrixRef<double>&);

}  // namespace nystrom
