#include "nystrom_pipeline.hpp"

namespace nystrom::cuda::detail {

ExpMap exp_map(const NystromOptions& options) {
  return {options.stabilization == Stabilization::clamped, options.clamp_threshold};
}

template <class T>
DeviceFactors<T>::DeviceFactors(int count_, int n_, int m_, const PinvOptions& pinv_options)
    : count(count_),
      n(n_),
      m(m_),
      left_t(std::size_t(m_) * n_ * count_),
      upper_t(left_t.size()),
      core(std::size_t(m_) * m_ * count_),
      left_shift(std::size_t(n_) * count_),
      upper_shift(std::size_t(m_) * count_),
      pinv(m_, count_, pinv_options) {}

template <class T>
void DeviceFactors<T>::compute(const NystromOptions& options, Operand<T> q, Operand<T> k, int d,
                               const T* q_bar, const T* k_bar, bool shared_alpha,
                               AlgorithmBuffers<T>* attention) {
  const cudaStream_t stream = context().stream;
  const Offset landmarks = Offset(m) * d, block = Offset(m) * n, square = Offset(m) * m;
  const Operand<T> q_landmarks{q_bar, m, false, landmarks}, k_landmarks{k_bar, m, false, landmarks};
  // φ is symmetric in its arguments: φ(K̄, Q) = φ(Q, K̄)ᵀ and φ(K, Q̄) = φ(Q̄, K)ᵀ.
  exponent<T>(options.kernel, k_landmarks, m, q, n, d, left_t.data(), m, block, count);
  exponent<T>(options.kernel, k, n, q_landmarks, m, d, upper_t.data(), n, block, count);
  exponent<T>(options.kernel, q_landmarks, m, k_landmarks, m, d, core.data(), m, square, count);
  const bool row_max = options.stabilization == Stabilization::row_max;
  const ExpMap map = exp_map(options);
  if (!row_max && !attention) {  // the factors' log scales; Algorithm 1 reads neither
    fill<T>(left_shift.data(), Offset(n) * count, T(0), stream);
    fill<T>(upper_shift.data(), Offset(m) * count, T(0), stream);
  }
  // PnP-Nystra eq. (8): G_Lⁿ = M_L⁻¹G_L, G_Uⁿ = M_U⁻¹G_U and G_Aⁿ = M_U⁻¹G_A, the shifts found by the fused
  // row-max / exp kernel on the columns of left_t and upper_t; the heads' blocks lie one after another, so
  // one launch covers the columns of all of them. For attention, left_t is mapped by nystrom_output.
  if (!attention)
    map_lines<T>(left_t.data(), m, m, n * count, map, row_max, row_max ? left_shift.data() : nullptr, {},
                 stream);
  LineSums<T> upper_sums;  // Algorithm 1's G_Uⁿ1: the last column of each head's [G_U V, G_U 1]
  if (attention) {
    const Offset wide = Offset(attention->reduced.size()) / count;  // m·(dv + 1)
    upper_sums = {attention->reduced.data() + (wide - m), wide, nullptr, 0, m};
  }
  map_lines<T>(upper_t.data(), n, n, m * count, map, row_max, row_max ? upper_shift.data() : nullptr,
               upper_sums, stream);
  map_rows_shifted<T>(core.data(), m, m, m, map, row_max ? upper_shift.data() : nullptr, count, square, m,
                      stream);
  pinv.compute(core.data(), shared_alpha);
}

template <class T>
AlgorithmBuffers<T>::AlgorithmBuffers(int count, int m, int dv)
    : reduced(std::size_t(m) * (dv + 1) * count), core_side(reduced.size()) {}

template <class T>
void nystrom_output(DeviceFactors<T>& f, const NystromOptions& options, Operand<T> v, int dv,
                    AlgorithmBuffers<T>& work, T* out, bool row_major_out) {
  const int count = f.count, n = f.n, m = f.m;
  const Offset block = Offset(m) * n, wide = Offset(m) * (dv + 1), square = Offset(m) * m;
  // PnP-Nystra Algorithm 1: [G_U V, G_U 1] = upper_tᵀ [V, 1_N] (the GEMM here, the sums by compute()), then
  // W = Z [G_U V, G_U 1].
  gemm_batched(CUBLAS_OP_T, v.row_major ? CUBLAS_OP_T : CUBLAS_OP_N, m, dv, n, T(1), f.upper_t.data(), n,
               block, v.data, v.ld, v.stride, T(0), work.reduced.data(), m, wide, count);
  gemm_batched(CUBLAS_OP_N, CUBLAS_OP_N, m, dv + 1, m, T(1), f.pinv.z(), m, square, work.reduced.data(), m,
               wide, T(0), work.core_side.data(), m, wide, count);
  // Each query's column of left_t (its row of G_L): row max (cancelling in the ratio), map, and the product
  // with 1/(G_L W_1 + offset), W_1 the last column of its head's W; then Ô = (scaled G_L) W_V. The clamped
  // variant divides by (Ĝ1 + 1e-12) as the authors' code does.
  const T offset = options.stabilization == Stabilization::clamped ? T(1e-12) : T(0);
  map_lines<T>(f.left_t.data(), m, m, n * count, exp_map(options),
               options.stabilization == Stabilization::row_max, nullptr,
               {nullptr, 0, work.core_side.data() + Offset(m) * dv, wide, n, true, offset}, context().stream);
  if (row_major_out)
    // Ô_bᵀ = W_Vᵀ G_Lᵀ, dv×N column-major: the row-major N×dv head.
    gemm_batched(CUBLAS_OP_T, CUBLAS_OP_N, dv, n, m, T(1), work.core_side.data(), m, wide, f.left_t.data(), m,
                 block, T(0), out, dv, Offset(n) * dv, count);
  else
    gemm_batched(CUBLAS_OP_T, CUBLAS_OP_N, n, dv, m, T(1), f.left_t.data(), m, block, work.core_side.data(),
                 m, wide, T(0), out, n, Offset(n) * dv, 1);
}

template struct DeviceFactors<float>;
template struct DeviceFactors<double>;
template struct AlgorithmBuffers<float>;
template struct AlgorithmBuffers<double>;
template void nystrom_output<float>(DeviceFactors<float>&, const NystromOptions&, Operand<float>, int,
                                    AlgorithmBuffers<float>&, float*, bool);
template void nystrom_output<double>(DeviceFactors<double>&, const NystromOptions&, Operand<double>, int,
                                     AlgorithmBuffers<double>&, double*, bool);

}  // namespace nystrom::cuda::detail
