#pragma once
/// @file certificates.hpp
/// Certificates of ‖A‖₂ and of singular values for any operator (operators.hpp), for when the exact norm is
/// too costly: a probabilistic upper bound of ‖A‖₂ and a lower bound from one Lanczos run of `steps` Gram
/// products (2·steps operator products), and a deterministic lower bound of σ_k from a Ritz value.
///
/// Rounding. Every bound carries an allowance for the rounding of the products: a Gram product AᵀA x (or
/// A Aᵀ x) formed by two products with inner dimensions rows and cols errs by about (rows + cols)·eps·σ₁²·‖x‖
/// (eps the operator scalar's machine epsilon) where the entries of A are nonnegative (kernel matrices), and
/// typically far less for signed ones (errors that add like a random walk, ~√(rows + cols)·eps·‖|A|‖·σ₁);
/// the Lanczos recurrence with full reorthogonalization adds O(steps·eps·σ₁²). A Gram eigenvalue (a squared
/// singular value) is therefore taken to err by at most ρ·σ₁², ρ = rounding_allowance(rows + cols, eps) =
/// 4·(rows + cols)·eps; on the tests' 1,300 random and adversarial matrices the largest excess of a Ritz
/// value over σ_k² was 0.15·ρ·σ₁². The
/// products themselves are the operator's: an operator whose products cancel (G − Ĝ with ‖G − Ĝ‖ ≪ ‖G‖)
/// errs relative to its terms, and the certificates then hold for the operator as its products compute it,
/// within their own error. Products must neither overflow (NonFiniteProduct is thrown) nor underflow.

#include <cstdint>
#include <functional>
#include <limits>

#include "nystrom/error.hpp"
#include "nystrom/spectral.hpp"
#include "nystrom/types.hpp"

namespace nystrom {

/// Options for norm_certificate.
struct CertificateOptions {
  int steps = 30;                           ///< q: Lanczos steps (Gram products, Krylov dimension); ≥ 1
  double failure_probability = 1e-6;        ///< δ ∈ (0, 1): the chance that `upper` is below ‖A‖₂
  std::uint64_t seed = 0x6365727469667921;  ///< seed of the random start (std::mt19937_64)
  /// Throws std::invalid_argument naming the bad value (steps < 1, failure_probability outside (0, 1)).
  void validate() const;
};

/// Bounds of ‖A‖₂ from the largest Ritz value θ of Lanczos on the smaller Gram matrix M (AᵀA or AAᵀ, n×n).
struct NormCertificate {
  double lower = 0;  ///< √(θ(1 − ρ)) ≤ ‖A‖₂ always (θ is a Rayleigh quotient of M)
  double upper = 0;  ///< √(θ/((1 − ε)(1 − ρ))) ≥ ‖A‖₂ except with probability failure_probability;
                     ///< +∞ where ε ≥ 1 (too few steps for δ and n)
  double estimate = 0;  ///< √θ, the Lanczos estimate of ‖A‖₂ (lower ≤ estimate ≤ upper)
  double failure_probability = 0;  ///< δ of the options; 0 where the Krylov space spanned all of ℝⁿ
  double epsilon = 0;   ///< ε = certificate_epsilon(options.steps, n, δ); 0 where the space spanned ℝⁿ
  double rounding = 0;  ///< ρ = rounding_allowance(rows + cols, eps of the operator's scalar)
  int steps = 0;        ///< Lanczos steps run (Gram products): options.steps, or fewer (see invariant)
  int matvecs = 0;      ///< operator products (A and Aᵀ each count one; a one-pass Gram product two)
  bool invariant = false;  ///< stopped before options.steps: the Krylov space was invariant (or all of ℝⁿ)
};

/// ρ = 4·n·eps: the relative rounding allowance on the eigenvalues of a Gram operator of a rows×cols
/// operator whose products round with machine epsilon `eps`, n = rows + cols (file comment: the error of
/// a Gram product through inner dimensions rows and cols, (rows + cols)·eps·σ₁², and of the Lanczos
/// recurrence, with a factor 4 of margin).
constexpr double rounding_allowance(Index n, double eps = std::numeric_limits<double>::epsilon()) {
  return 4 * static_cast<double>(n) * eps;
}

/// ε with 1.648·√n·e^{−√ε(2q − 1)} = δ, i.e. √ε = ln(1.648·√n/δ)/(2q − 1): after q Lanczos steps from a start
/// uniform on the unit sphere of ℝⁿ, the largest Ritz value θ_q of a symmetric positive semidefinite n×n M
/// satisfies P(θ_q < (1 − ε)λ₁(M)) ≤ δ (Kuczyński & Woźniakowski, SIAM J. Matrix Anal. Appl. 13(4), 1992,
/// Theorem 4.2(a)). May be ≥ 1 (no bound). Throws std::invalid_argument for steps < 1, n < 1, or
/// failure_probability outside (0, 1).
double certificate_epsilon(int steps, Index n, double failure_probability);

/// The smallest q with 1/√(1 − ε(q)) ≤ ratio for ε(q) = certificate_epsilon(q, n, δ): the Lanczos steps for
/// which upper/estimate ≤ ratio (rounding aside) at failure probability δ. About ln(1.648·√n/δ)/(2√(1 −
/// 1/ratio²)); e.g. ratio 1.1, n = 1024, δ = 1e-6: 22. Throws std::invalid_argument for ratio ≤ 1 or not
/// finite, n < 1, δ outside (0, 1), or a q beyond int.
int steps_for(double ratio, Index n, double failure_probability);

/// A certified lower bound of σ_k(A) from a Ritz singular value σ̃_k: for any orthonormal V, the k-th
/// eigenvalue of VᵀAᵀAV is ≤ σ_k(A)² (Cauchy interlacing for a compression, the Poincaré separation
/// theorem; Horn & Johnson, Matrix Analysis, 2nd ed., §4.3), so σ̃_k ≤ σ_k up to rounding, whatever the basis,
/// with no probability involved. Returns σ₁·√max((σ̃_k/σ₁)² − ρ, 0) with ρ = rounding_allowance(n, eps): the
/// Ritz value of the squared operator carries an absolute error of at most ρ·σ₁² (file comment) given a basis
/// orthonormal to rounding, so the bound is 0 for values within √ρ·σ₁ of zero. `ritz_value`: a value of
/// top_singular_values (Ritz values of an orthonormal Krylov basis, or exact from a full SVD, whose error
/// p·eps·σ₁ on σ_k is ≤ 2p·eps·σ₁² on σ_k², within ρ·σ₁²); `sigma1`: ‖A‖₂ or a bound or estimate of it
/// (NormCertificate::upper, the first value of top_singular_values; the scale used is max(sigma1,
/// ritz_value)); n = rows + cols; eps: the machine epsilon of the operator's scalar. Throws
/// std::invalid_argument for a negative or non-finite ritz_value or sigma1, n < 1, or eps outside [0, 1).
double singular_value_lower_bound(double ritz_value, double sigma1, Index n,
                                  double eps = std::numeric_limits<double>::epsilon());

namespace detail {

/// y = M x for a symmetric positive semidefinite n×n operator M in double.
using SymmetricProduct = std::function<void(const double* x, double* y)>;

/// The largest Ritz value of a Lanczos run and how it ended.
struct TopRitzValue {
  double theta = 0;        ///< largest eigenvalue of the Lanczos tridiagonal T (≥ 0)
  int steps = 0;           ///< products run: the dimension of the Krylov space
  bool invariant = false;  ///< stopped before options.steps (invariant Krylov space or all of ℝⁿ)
};

/// Plain Lanczos on M from a start uniform on the unit sphere (normalized standard normal vector from
/// options.seed), with full reorthogonalization (two classical Gram–Schmidt passes against the whole basis),
/// for min(options.steps, n) steps; it stops early where the residual of the newest step is ≤ ρ·max‖M v_j‖
/// (`rounding` = ρ: an invariant subspace to rounding, where the Ritz value is exact). Throws
/// NonFiniteProduct for a non-finite product.
TopRitzValue top_ritz_value(Index n, const SymmetricProduct& product, double rounding,
                            const CertificateOptions& options);

/// The certificate of ‖A‖₂ from the top Ritz value θ of the n×n Gram operator divided by root²
/// (GramOperator's ProductScale; σ = √θ·root): Kuczyński–Woźniakowski's ε for options.steps (a run stopped
/// early at an invariant subspace would, in exact arithmetic, keep its θ for all later steps), no probability
/// where the Krylov space spans ℝⁿ (θ is then λ₁ of M up to rounding).
NormCertificate certify(const TopRitzValue& top, double root, Index n, double rounding,
                        const CertificateOptions& options);

}  // namespace detail

/// Certificate of ‖op‖₂ for any operator (operators.hpp): plain Lanczos in double on the smaller Gram
/// matrix M (AᵀA when cols ≤ rows, else AAᵀ; the operator's one-pass perform_inner_gram_op /
/// perform_outer_gram_op where it has them), n = min(rows, cols), from a Gaussian start drawn from
/// options.seed and normalized (uniform on the unit sphere), full reorthogonalization, q = options.steps
/// steps (fewer at an invariant subspace), θ_q the largest Ritz value. Kuczyński & Woźniakowski (SIAM J.
/// Matrix Anal. Appl. 13(4), 1992, Theorem 4.2(a)): P(θ_q < (1 − ε)λ₁) ≤ 1.648·√n·e^{−√ε(2q − 1)} for the
/// first q steps from a start uniform on the sphere; with ε = certificate_epsilon(q, n, δ),
///   lower = √(θ_q(1 − ρ)) ≤ ‖A‖₂ (always),  upper = √(θ_q/((1 − ε)(1 − ρ))) ≥ ‖A‖₂ (except with prob. δ),
/// ρ the rounding allowance (file comment). The probability is over the draw of the start: a fixed seed makes
/// the certificate reproducible, and the statement holds for a seed chosen independently of A (not one
/// tried until a certificate looked good). A zero operator gives lower = upper = 0 (where ε < 1).
/// Cost: `steps` Gram products (2·steps operator products), O(n·steps²) flops of reorthogonalization and
/// n·min(steps, n) doubles. Throws as CertificateOptions::validate, std::invalid_argument for an empty
/// operator, and NonFiniteProduct.
template <class Operator>
NormCertificate norm_certificate(const Operator& op, const CertificateOptions& options = {}) {
  options.validate();
  require(op.rows() >= 1 && op.cols() >= 1, "norm_certificate: the ", op.rows(), "x", op.cols(),
          " operator is empty");
  detail::GramOperator<Operator> gram(op);
  const double rounding =
      rounding_allowance(op.rows() + op.cols(), std::numeric_limits<typename Operator::Scalar>::epsilon());
  const auto product = [&gram](const double* x, double* y) { gram.perform_op(x, y); };
  const detail::TopRitzValue top = detail::top_ritz_value(gram.size(), product, rounding, options);
  NormCertificate certificate = detail::certify(top, gram.scale().root(), gram.size(), rounding, options);
  certificate.matvecs = gram.products();
  return certificate;
}

}  // namespace nystrom
