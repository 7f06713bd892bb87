#include "nystrom/attention.hpp"

#include "attention_inputs.hpp"
#include "blas_gemm.hpp"
#include "emulation.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "nystrom/detail/power_of_two.hpp"
#include "nystrom/error.hpp"
#include "nystrom/threads.hpp"

namespace nystrom {

namespace {

/// Queries per panel of exact_attention (a thread's unit of work) and keys per tile: the logit tile (panel ×
/// tile values of T, 512 KiB in float) and the panel's b × dv accumulator stay in L2 (1 MiB per Zen 5 core).
/// Measured at N = 4096, float, 1 thread: 128 to 1024 × 256 to 2048 all within ±3% of this choice.
constexpr Index attention_panel_rows = 256;
constexpr Index attention_tile_keys = 512;

/// Queries per panel of the emulated exact attention: its 64×N logits, 1 MiB in float at N = 4096.
constexpr Index emulated_panel_rows = 64;

/// Throws std::invalid_argument unless the kernel is valid, Q and K are finite tokens of one dimension, and
/// V is finite with a row per key.
template <class T>
void require_exact_inputs(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel) {
  kernel.validate();
  detail::require_tokens<T>(Q, K, "exact_attention");
  require(V.rows() == K.rows(), "exact_attention: V has ", V.rows(), " rows, K has N = ", K.rows());
  require_finite(V, "exact_attention: V");
}

/// exact_attention in emulated `storage` (docs/mathematics.md §8): Q, K, V rounded, then per panel of
/// queries the rounding points of the logits, P = R(exp(φ − μ)), ℓ = R(P 1), R(P V) and O = R(R(P V) / ℓ),
/// each panel's counts added in panel order.
Matrix<float> emulated_exact_attention(const ConstMatrixRef<float>& Q, const ConstMatrixRef<float>& K,
                                       const ConstMatrixRef<float>& V, const Kernel& kernel,
                                       Precision storage, RoundingCounts& rounding) {
  detail::Emulation inputs(storage);
  const Matrix<float> q = inputs.stored(Q), k = inputs.stored(K), v = inputs.stored(V);
  rounding += inputs.counts();
  const Index n = q.rows(), panels = (n + emulated_panel_rows - 1) / emulated_panel_rows;
  Matrix<float> out(n, v.cols());
  std::vector<RoundingCounts> counts(static_cast<std::size_t>(panels));
  const bool threaded = double(n) * double(k.rows()) * double(q.cols() + v.cols()) >= detail::parallel_work;
#pragma omp parallel for schedule(dynamic) if (threaded)
  for (Index p = 0; p < panels; ++p) {
    detail::Emulation emulation(storage);
    const Index r = p * emulated_panel_rows, b = std::min(emulated_panel_rows, n - r);
    Matrix<float> weights = detail::rounded_exponents(emulation, kernel, q.middleRows(r, b), k);
    detail::rounded_exp(emulation, weights, detail::row_max(weights));
    const Vector<float> sums = detail::rounded_row_sums(emulation, weights);
    Matrix<float> rows = detail::rounded_product(emulation, weights, v);
    detail::rounded_row_division(emulation, rows, sums);
    out.middleRows(r, b) = rows;
    counts[static_cast<std::size_t>(p)] = emulation.counts();
  }
  for (const RoundingCounts& panel : counts) rounding += panel;
  return out;
}

}  // namespace

template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel, Precision storage, RoundingCounts& rounding) {
  if constexpr (std::is_same_v<T, float>) {
    if (is_emulated(storage)) {
      require_exact_inputs<T>(Q, K, V, kernel);
      return emulated_exact_attention(Q, K, V, kernel, storage, rounding);
    }
  }
  require_storage_for<T>(storage, "exact_attention");
  return exact_attention<T>(Q, K, V, kernel);
}

template <class T>
Matrix<T> exact_attention(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const ConstMatrixRef<T>& V,
                          const Kernel& kernel) {
  require_exact_inputs<T>(Q, K, V, kernel);
  // Online softmax (FlashAttention's tiling) for a panel P of b queries and a tile C of c keys: the logits
  // Φ = φ(Q_P, K_C) (b×c, column-major), their row maxima and the exponentials are taken one contiguous
  // column at a time on b-vectors, the accumulator O_P (b×dv) and the row sums are rescaled when a row max
  // grows, and O_P += exp(Φ − max) V_C is one GEMM whose large operand BLAS packs from contiguous columns
  // (the transposed layout made OpenBLAS gather it with a stride: 14% of the time). The shift by the row max
  // leaves O unchanged and keeps every exponent ≤ 0.
  // Panels of 256 queries, or two panels below 512 (at least 16 queries each): a function of n alone, so
  // that every thread count sums in the same order and gives the same bits.
  const Index n = Q.rows(), keys = K.rows();
  const Index panel = std::max<Index>(16, std::min<Index>(attention_panel_rows, (n + 1) / 2));
  const Index tile = std::min<Index>(keys, attention_tile_keys);
  const Index panels = (n + panel - 1) / panel;
  // The exponential kernel's logits s·q·k as one GEMM per tile against the pre-scaled queries.
  const bool exponential = kernel.type == KernelType::exponential;
  const Matrix<T> scaled_q = exponential ? Matrix<T>(T(kernel.param) * Q) : Matrix<T>();
  Matrix<T> out(n, V.cols());
  SingleThreadedBlas guard;
#pragma omp parallel
  {
    Matrix<T> logits(panel, tile), accumulator(panel, V.cols());
    Vector<T> running_max(panel), running_sum(panel), tile_max(panel);
#pragma omp for schedule(static)
    for (Index p = 0; p < panels; ++p) {
      const Index r = p * panel, b = std::min(panel, n - r);
      auto acc = accumulator.topRows(b);
      auto row_max = running_max.head(b).array(), row_sum = running_sum.head(b).array();
      auto new_max = tile_max.head(b).array();
      row_max.setConstant(-std::numeric_limits<T>::infinity());
      row_sum.setZero();
      for (Index c0 = 0; c0 < keys; c0 += tile) {
        const Index c = std::min(tile, keys - c0);
        auto block = logits.topLeftCorner(b, c);
        if (exponential)
          detail::gemm<T>(detail::Op::plain, detail::Op::transposed, T(1), scaled_q.middleRows(r, b),
                          K.middleRows(c0, c), T(0), block);
        else
          kernel.exponent<T>(Q.middleRows(r, b), K.middleRows(c0, c), block);
        new_max = row_max;
        for (Index j = 0; j < c; ++j) new_max = new_max.max(block.col(j).array());
        // exp(−∞) = 0 on the first tile, where the sums and the accumulator are still empty.
        const auto rescale = (row_max - new_max).exp().eval();
        row_max = new_max;
        row_sum *= rescale;
        for (Index j = 0; j < c; ++j) {
          auto column = block.col(j).array();
          column = (column - new_max).exp();
          row_sum += column;
        }
        if (c0 > 0) acc.array().colwise() *= rescale;
        detail::gemm<T>(detail::Op::plain, detail::Op::plain, T(1), block, V.middleRows(c0, c),
                        c0 > 0 ? T(1) : T(0), acc);
      }
      out.middleRows(r, b) = acc.array().colwise() / row_sum;
    }
  }
  return out;
}

template <class T>
void attention_matrix(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel,
                      MatrixRef<T> out) {
  kernel.validate();
  detail::require_tokens<T>(Q, K, "attention_matrix");
  require(out.rows() == Q.rows() && out.cols() == K.rows(), "attention_matrix: out is ", out.rows(), "x",
          out.cols(), ", expected ", Q.rows(), "x", K.rows());
  // exp(φ − rowmax φ), normalized by its row sums: the shift leaves S unchanged and keeps every exponent ≤ 0.
  kernel.exponent<T>(Q, K, out);
  const Vector<T> shift = out.rowwise().maxCoeff();
  out.colwise() -= shift;
  detail::exp_in_place(out);
  const Vector<T> sums = out.rowwise().sum();
  out.array().colwise() /= sums.array();
}

template <class T>
Matrix<T> attention_matrix(const ConstMatrixRef<T>& Q, const ConstMatrixRef<T>& K, const Kernel& kernel) {
  Matrix<T> out(Q.rows(), K.rows());
  attention_matrix<T>(Q, K, kernel, out);
  return out;
}

template <class T>
OutputErrors output_errors(const ConstMatrixRef<T>& exact, const ConstMatrixRef<T>& approximate) {
  require(exact.rows() == approximate.rows() && exact.cols() == approximate.cols(),
          "output_errors: shapes differ, exact is ", exact.rows(), "x", exact.cols(), ", approximate is ",
          approximate.rows(), "x", approximate.cols());
  OutputErrors errors;
  if (exact.size() == 0) return errors;
  // Both outputs scaled by one power of two 2⁻ᵖ, exactly, so that their difference cannot overflow (outputs
  // of ±1e308 in double); the absolute errors are scaled back (Inf where they exceed double).
  const int p = std::max(largest_exponent(exact.template cast<double>()),
                         largest_exponent(approximate.template cast<double>()));
  const Eigen::ArrayXXd scaled_exact = times_power_of_two(exact.template cast<double>(), -p).array();
  const Eigen::ArrayXXd difference =
      scaled_exact - times_power_of_two(approximate.template cast<double>(), -p).array();
  // Norms without squaring overflow or underflow (stableNorm), NaN wherever a NaN entry is (max_abs too), and
  // 0 for two zero outputs.
  const double difference_norm = difference.matrix().stableNorm(),
               exact_norm = scaled_exact.matrix().stableNorm();
  errors.relative_frobenius = difference_norm == 0 ? 0.0 : difference_norm / exact_norm;
  errors.max_abs = std::ldexp(difference.abs().template maxCoeff<Eigen::PropagateNaN>(), p);
  errors.mean_abs = std::ldexp(difference.abs().mean(), p);
  if (std::isnan(errors.max_abs)) errors.relative_frobenius = errors.mean_abs = errors.max_abs;
  return errors;
}

#define NYSTROM_INSTANTIATE(T)                                                                               \
  template Matrix<T> exact_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,                  \
                                        const ConstMatrixRef<T>&, const Kernel&);                            \
  template Matrix<T> exact_attention<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&,                  \
                                        const ConstMatrixRef<T>&, const Kernel&, Precision,                  \
                                        RoundingCounts&);                                                    \
  template Matrix<T> attention_matrix<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const Kernel&); \
  template void attention_matrix<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&, const Kernel&,       \
                                    MatrixRef<T>);                                                           \
  template OutputErrors output_errors<T>(const ConstMatrixRef<T>&, const ConstMatrixRef<T>&);
NYSTROM_INSTANTIATE(float)
NYSTROM_INSTANTIATE(double)
#undef NYSTROM_INSTANTIATE

}  // namespace nystrom
