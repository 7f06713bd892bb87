// The backend factory (nystrom/backend.hpp) and the CUDA backend against the CPU path.
// Suite "backend" runs everywhere. Suite "gpu" compares every GPU result with the CPU code (float and
// double); without a CUDA device each of its cases ends the process with status 77, which ctest
// (SKIP_RETURN_CODE 77) reports as "Not Run", so a machine without a GPU never counts these cases as passed.

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "batch_tensor.hpp"
#include "method_options.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/batched.hpp"
#include "nystrom/evaluation.hpp"
#include "nystrom/nystrom.hpp"
#include "nystrom/operators.hpp"
#include "nystrom/pinv.hpp"
#include "nystrom/spectral.hpp"
#include "test_support.hpp"

using namespace nystrom;
using test::random_matrix;
using test::relative_difference;
using test::Tensor;
using test::throws_naming;

namespace {

/// Exit status that ctest's SKIP_RETURN_CODE maps to "Not Run".
constexpr int not_run_status = 77;

/// Ends the process with status 77 when no CUDA device can run the case (see the file comment).
void skip_without_gpu() {
  if (cuda_available()) return;
  std::printf("test_cuda: %s; GPU case not run (exit %d)\n",
              cuda_compiled() ? "no CUDA device found" : "this build has no CUDA backend", not_run_status);
  std::fflush(stdout);
  std::_Exit(not_run_status);
}

/// Tolerance for two computations of the same quantity in T that differ only in rounding: 8·√n·eps(T),
/// amplified by `amplification` (a condition number, or 1 + |exponent| for quantities passed through exp).
template <class T>
double tolerance(Index n, double amplification = 1) {
  return test::tolerance<T>(n) * amplification;
}

/// Condition number σ₁/σ_r in double, σ_r the smallest singular value above m·eps(T)·σ₁ (the default pinv
/// cut).
template <class T>
double condition_number(const Matrix<T>& a) {
  const Eigen::JacobiSVD<Matrix<double>> svd(a.template cast<double>());
  const auto& sigma = svd.singularValues();
  double smallest = sigma(0);
  for (Index i = 0; i < sigma.size(); ++i)
    if (sigma(i) > static_cast<double>(a.rows()) * std::numeric_limits<T>::epsilon() * sigma(0))
      smallest = sigma(i);
  return sigma(0) / smallest;
}

/// 1 + max |log κ| over a kernel block: how much rounding in the exponent is amplified by exp.
template <class T>
double exponent_amplification(const Matrix<T>& block) {
  return 1 + block.template cast<double>().array().log().abs().maxCoeff();
}

/// Options for PnP-Nystra with m landmarks taken as every ⌊N/m⌋-th token (well-conditioned cores for random
/// tokens).
NystromOptions nystrom_options(Kernel kernel, Index m, Stabilization stabilization, PinvMethod method) {
  NystromOptions options;
  options.kernel = kernel;
  options.landmarks.strategy = LandmarkStrategy::step;
  options.landmarks.count = m;
  options.stabilization = stabilization;
  options.pinv.method = method;
  options.pinv.iterations = method == PinvMethod::razavi ? 6 : 12;
  return options;
}

const Kernel tested_kernels[] = {Kernel::exponential(0.25), Kernel::laplacian(4), Kernel::gaussian(3)};

/// Options of every method with m landmarks (method_options.hpp) and the given kernel.
ApproximationOptions batch_options(const Kernel& kernel, Index m) {
  ApproximationOptions options = test::small_options(m);
  options.kernel = kernel;
  return options;
}

/// The largest |φ(q_i, k_j)| over the heads of a batch: exact attention's rounding grows with it (the
/// amplification of the tolerances).
template <class T>
double largest_logit(const Kernel& kernel, const Tensor<T>& q, const Tensor<T>& k) {
  double largest = 0;
  for (Index i = 0; i < q.batch * q.heads; ++i)
    largest = std::max(
        largest,
        kernel.exponent_block<T>(q.head(i), k.head(i)).template cast<double>().cwiseAbs().maxCoeff());
  return largest;
}

/// Runs `plan` on copies of q, k and v in the memory of its device (DeviceArray), waits for it and returns
/// the output copied back.
template <class T>
std::vector<T> run_on_device(BatchedAttentionPlan<T>& plan, const Tensor<T>& q, const Tensor<T>& k,
                             const Tensor<T>& v) {
  DeviceArray<T> dq(plan.device(), Index(q.values.size())), dk(plan.device(), Index(k.values.size())),
      dv(plan.device(), Index(v.values.size())), dout(plan.device(), Index(v.values.size()));
  dq.copy_from(q.values.data());
  dk.copy_from(k.values.data());
  dv.copy_from(v.values.data());
  plan.run(dq.data(), dk.data(), dv.data(), dout.data());
  plan.wait();
  std::vector<T> out(v.values.size());
  dout.copy_to(out.data());
  return out;
}

/// GPU batched PnP-Nystra against the CPU batched call on the same heads: the batch α, each head's
/// pseudoinverse status, and each head's output within rounding amplified by its core's condition number and
/// its largest logit; a head the CPU reports non-finite (an overflowed core) is NaN on the GPU too. Returns
/// the CPU's diagnostics.
template <class T>
BatchedDiagnostics check_batched_nystra(const BatchShape& shape, const Tensor<T>& q, const Tensor<T>& k,
                                        const Tensor<T>& v, const ApproximationOptions& options,
                                        AlphaScope scope = AlphaScope::matrix) {
  const Index m = options.pnp_nystra.landmarks.count;
  Tensor<T> cpu(shape, shape.value_dim, 134), gpu(shape, shape.value_dim, 135);
  const BatchedDiagnostics expected =
      batched_attention<T>(Method::pnp_nystra, q.view(), k.view(), v.view(), cpu.view(), options, scope);
  BatchedAttentionPlan<T> plan(Device::cuda, Method::pnp_nystra, shape, options, scope);
  plan.run(q.view(), k.view(), v.view(), gpu.view());
  const BatchedDiagnostics diagnostics = plan.diagnostics();
  CHECK(diagnostics.alpha == doctest::Approx(expected.alpha).epsilon(tolerance<T>(m * m)));
  NystromOptions nystrom = options.pnp_nystra;
  nystrom.kernel = options.kernel;
  for (Index i = 0; i < shape.count(); ++i) {
    CAPTURE(i);
    const auto status = expected.heads[std::size_t(i)].pinv_status;
    CHECK(diagnostics.heads[std::size_t(i)].pinv_status == status);
    if (status == PinvStatus::non_finite) {
      CHECK(gpu.head(i).array().isNaN().all());
      continue;
    }
    const NystromFactors<T> factors = generalized_nystrom<T>(q.head(i), k.head(i), nystrom);
    const double amplification =
        condition_number<T>(factors.core) * (1 + options.kernel.exponent_block<T>(q.head(i), k.head(i))
                                                     .template cast<double>()
                                                     .cwiseAbs()
                                                     .maxCoeff());
    CHECK(relative_difference(gpu.head(i), cpu.head(i)) <= tolerance<T>(shape.tokens, amplification));
  }
  return expected;
}

}  // namespace

TEST_SUITE("backend") {
  TEST_CASE("device names round-trip and an unknown name is rejected naming it") {
    for (auto device : {Device::cpu, Device::cuda}) CHECK(device_from_string(to_string(device)) == device);
    CHECK(throws_naming([] { device_from_string("gpu0"); }, "gpu0"));
    CHECK(describe_device(Device::cpu) == "cpu");
    CHECK_NOTHROW(require_device(Device::cpu));
    CHECK(!(cuda_available() && !cuda_compiled()));
  }

  TEST_CASE(
      "CPU work never loads the CUDA libraries, the first request for the GPU loads the backend module") {
    const auto mapped = [](const std::string& library) {
      std::ifstream maps("/proc/self/maps");
      std::string line;
      while (std::getline(maps, line))
        if (line.find(library) != std::string::npos) return true;
      return false;
    };
    const Matrix<double> Q = random_matrix<double>(64, 4, 1), K = random_matrix<double>(64, 4, 2);
    const NystromOptions options =
        nystrom_options(Kernel::exponential(0.5), 8, Stabilization::row_max, PinvMethod::exact);
    CHECK(generalized_nystrom<double>(Device::cpu, Q, K, options).dense().allFinite());
    CHECK(exact_attention<double>(Device::cpu, Q, K, Q, options.kernel).allFinite());
    CHECK_FALSE(mapped("libcublas"));
    CHECK_FALSE(mapped("libnystrom_cuda"));
    const bool available = cuda_available();
    CHECK(mapped("libnystrom_cuda") == cuda_compiled());
    CHECK(mapped("libcublas") == cuda_compiled());
    CHECK(!(available && !cuda_compiled()));
  }

  TEST_CASE("asking for Device::cuda where it cannot run throws std::invalid_argument saying why") {
    if (cuda_available()) {
      CHECK_NOTHROW(require_device(Device::cuda));
      CHECK(!describe_device(Device::cuda).empty());
      return;
    }
    const std::string why = cuda_compiled() ? "--device cuda: no CUDA device found"
                                            : "--device cuda: this build has no CUDA backend";
    const Matrix<double> Q = random_matrix<double>(32, 4, 1), K = random_matrix<double>(32, 4, 2),
                         V = random_matrix<double>(32, 3, 3);
    const Kernel kernel = Kernel::exponential(0.5);
    const NystromOptions options = nystrom_options(kernel, 4, Stabilization::row_max, PinvMethod::exact);
    const NystromFactors<double> factors = generalized_nystrom<double>(Q, K, options);
    CHECK(throws_naming([] { require_device(Device::cuda); }, why));
    CHECK(throws_naming([] { describe_device(Device::cuda); }, why));
    CHECK(throws_naming([&] { exact_attention<double>(Device::cuda, Q, K, V, kernel); }, why));
    CHECK(throws_naming([&] { nystrom_attention<double>(Device::cuda, Q, K, V, options); }, why));
    CHECK(throws_naming([&] { generalized_nystrom<double>(Device::cuda, Q, K, options); }, why));
    CHECK(throws_naming([&] { pseudoinverse<double>(Device::cuda, factors.core, options.pinv); }, why));
    CHECK(throws_naming([&] { kernel_block<double>(Device::cuda, Q, K, kernel); }, why));
    CHECK(throws_naming([&] { kernel_operator<double>(Device::cuda, Q, K, kernel); }, why));
    CHECK(throws_naming([&] { error_operator<double>(Device::cuda, Q, K, factors); }, why));
    CHECK(throws_naming([&] { gemm_seconds<double>(Device::cuda, 64); }, why));
    CHECK(throws_naming([] { DeviceArray<double>(Device::cuda, 8); }, why));
    CHECK(throws_naming(
        [&] {
          BatchedAttentionPlan<double>(Device::cuda, Method::exact, {1, 1, 32, 4, 3},
                                       batch_options(kernel, 4));
        },
        why));
  }

  TEST_CASE_TEMPLATE("Device::cpu runs the CPU code unchanged", T, float, double) {
    const Index n = 40, d = 5;
    const Matrix<T> Q = random_matrix<T>(n, d, 11), K = random_matrix<T>(n, d, 12),
                    V = random_matrix<T>(n, 3, 13);
    const NystromOptions options =
        nystrom_options(Kernel::exponential(0.4), 6, Stabilization::row_max, PinvMethod::razavi);
    CHECK(exact_attention<T>(Device::cpu, Q, K, V, options.kernel) ==
          exact_attention<T>(Q, K, V, options.kernel));
    const NystromFactors<T> factors = generalized_nystrom<T>(Q, K, options);
    CHECK(nystrom_attention<T>(Device::cpu, Q, K, V, options) == nystrom_attention<T>(factors, V));
    CHECK(generalized_nystrom<T>(Device::cpu, Q, K, options).pinv.z == factors.pinv.z);
    CHECK(pseudoinverse<T>(Device::cpu, factors.core, options.pinv).z == factors.pinv.z);
    CHECK(kernel_block<T>(Device::cpu, Q, K, options.kernel) == options.kernel.block<T>(Q, K));
    const double seconds = gemm_seconds<T>(Device::cpu, 64);
    CHECK((std::isfinite(seconds) && seconds > 0));
    CHECK(throws_naming([] { gemm_seconds<T>(Device::cpu, 0); }, "n = 0"));
  }

  TEST_CASE_TEMPLATE("a CPU batched plan runs batched_attention, and CPU device arrays hold host memory", T,
                     float, double) {
    const BatchShape shape{2, 3, 40, 6, 4};
    const Tensor<T> q(shape, 6, 1), k(shape, 6, 2), v(shape, 4, 3);
    for (auto method : {Method::exact, Method::pnp_nystra, Method::nystromformer}) {
      CAPTURE(to_string(method));
      const ApproximationOptions options = batch_options(Kernel::exponential(0.4), 8);
      Tensor<T> expected(shape, 4, 4), planned(shape, 4, 5);
      const BatchedDiagnostics direct = batched_attention<T>(method, q.view(), k.view(), v.view(),
                                                             expected.view(), options, AlphaScope::batch);
      BatchedAttentionPlan<T> plan(Device::cpu, method, shape, options, AlphaScope::batch);
      const TransferSeconds seconds = plan.run(q.view(), k.view(), v.view(), planned.view());
      CHECK(seconds.to_device == 0);
      CHECK(seconds.compute > 0);
      CHECK(planned.values == expected.values);
      CHECK(plan.diagnostics().alpha == direct.alpha);
      // The device-resident entry point with arrays of the CPU "device".
      CHECK(run_on_device(plan, q, k, v) == expected.values);
    }
    const ApproximationOptions options = batch_options(Kernel::exponential(0.4), 8);
    CHECK(throws_naming(
        [&] {
          BatchedAttentionPlan<T>(Device::cpu, Method::exact, {2, 0, 40, 6, 4}, options);
        },
        "H = 0"));
    CHECK(throws_naming(
        [&] {
          BatchedAttentionPlan<T>(Device::cpu, Method::pnp_nystra, {1, 1, 5, 6, 4}, options);
        },
        "exceeds the number of tokens N = 5"));
    BatchedAttentionPlan<T> plan(Device::cpu, Method::exact, shape, options);
    Tensor<T> wrong(BatchShape{2, 3, 41, 6, 4}, 4, 7);
    CHECK(
        throws_naming([&] { plan.run(q.view(), k.view(), v.view(), wrong.view()); }, "out is [2, 3, 41, 4]"));
    CHECK(throws_naming([] { DeviceArray<T>(Device::cpu, -1); }, "size = -1"));
  }

  TEST_CASE_TEMPLATE("the CPU operators behind AnyOperator equal dense products", T, float, double) {
    const Index n = 70, d = 6;
    const Matrix<T> Q = random_matrix<T>(n, d, 21), K = random_matrix<T>(n, d, 22);
    const NystromOptions options =
        nystrom_options(Kernel::laplacian(4), 7, Stabilization::row_max, PinvMethod::exact);
    const NystromFactors<T> factors = generalized_nystrom<T>(Q, K, options);
    const Matrix<double> G = test::naive_kernel<T>(Q, K, options.kernel).template cast<double>();
    const Matrix<double> E = G - factors.dense().template cast<double>();
    const Vector<T> x = random_matrix<T>(n, 1, 23);
    Vector<T> y(n);
    const AnyOperator<T> g = kernel_operator<T>(Device::cpu, Q, K, options.kernel);
    g.perform_op(x.data(), y.data());
    CHECK(relative_difference(y, G * x.template cast<double>()) <= tolerance<T>(n, 4));
    g.perform_transpose_op(x.data(), y.data());
    CHECK(relative_difference(y, G.transpose() * x.template cast<double>()) <= tolerance<T>(n, 4));
    const AnyOperator<T> e = error_operator<T>(Device::cpu, Q, K, factors);
    e.perform_op(x.data(), y.data());
    const Vector<double> reference = E * x.template cast<double>();
    CHECK((y.template cast<double>() - reference).norm() <=
          tolerance<T>(n, 4) * G.norm() * x.template cast<double>().norm());
  }

  TEST_CASE_TEMPLATE("AnyOperator keeps the one-pass Gram products: Lanczos through it makes the same passes",
                     T, float, double) {
    const Index n = 90, d = 6;
    const Matrix<T> Q = random_matrix<T>(n, d, 24), K = random_matrix<T>(n, d, 25);
    const Kernel kernel = Kernel::exponential(0.4).shifted(1.5);
    const SpectralOptions spectral;
    const auto direct = std::make_shared<KernelOperator<T, double>>(Q, K, kernel);
    const auto wrapped = std::make_shared<KernelOperator<T, double>>(Q, K, kernel);
    const SpectralResult expected = spectral_norm(*direct, spectral);
    const AnyOperator<double> erased(wrapped);
    CHECK(erased.fused_outer_gram());
    const SpectralResult through = spectral_norm(erased, spectral);
    CHECK(through.values(0) == expected.values(0));
    CHECK(wrapped->passes() == direct->passes());
    // The factory's operators: products in double for float tokens, fused Gram products, the log-shift.
    const AnyOperator<double> g = kernel_operator<T, double>(Device::cpu, Q, K, kernel);
    CHECK(g.fused_outer_gram());
    CHECK(spectral_norm(g, spectral).values(0) == expected.values(0));
    const NystromFactors<T> factors =
        generalized_nystrom<T>(Q, K, nystrom_options(kernel, 6, Stabilization::row_max, PinvMethod::exact));
    const AnyOperator<double> e = error_operator<T, double>(Device::cpu, Q, K, factors);
    CHECK(e.fused_outer_gram());
    const Matrix<double> E =
        std::exp(-kernel.log_shift) * test::naive_kernel<T>(Q, K, kernel).template cast<double>() -
        factors.dense().template cast<double>();
    const Vector<double> x = random_matrix<double>(n, 1, 26);
    Vector<double> y(n);
    e.perform_outer_gram_op(x.data(), y.data());
    CHECK(relative_difference(y, E * (E.transpose() * x)) <= tolerance<T>(n, 8));
  }
}

TEST_SUITE("gpu") {
  TEST_CASE_TEMPLATE("GPU kernel blocks equal the CPU blocks and the naive oracle", T, float, double) {
    skip_without_gpu();
    // Sizes off the 32×32 tiles and the 16-wide depth chunks of the distance kernel.
    const Index n = 37, p = 53, d = 19;
    const Matrix<T> X = random_matrix<T>(n, d, 31, 0.5), Y = random_matrix<T>(p, d, 32, 0.5);
    for (const Kernel& kernel : tested_kernels) {
      CAPTURE(kernel.label());
      const Matrix<T> oracle = test::naive_kernel<T>(X, Y, kernel);
      const Matrix<T> gpu = kernel_block<T>(Device::cuda, X, Y, kernel);
      const double tol = tolerance<T>(d, exponent_amplification(oracle));
      CHECK(relative_difference(gpu, oracle) <= tol);
      CHECK(relative_difference(gpu, kernel.block<T>(X, Y)) <= tol);
    }
  }

  TEST_CASE_TEMPLATE("GPU exact attention equals the CPU, also with logits far beyond exp's range", T, float,
                     double) {
    skip_without_gpu();
    const Index queries = 200, keys = 300, d = 16, dv = 8;
    for (double spread : {1.0, 3.0}) {
      const Matrix<T> Q = random_matrix<T>(queries, d, 41, spread), K = random_matrix<T>(keys, d, 42, spread);
      const Matrix<T> V = random_matrix<T>(keys, dv, 43);
      for (const Kernel& kernel : tested_kernels) {
        CAPTURE(kernel.label());
        CAPTURE(spread);
        const Matrix<T> cpu = exact_attention<T>(Q, K, V, kernel);
        const Matrix<T> gpu = exact_attention<T>(Device::cuda, Q, K, V, kernel);
        REQUIRE(gpu.allFinite());
        // Rounding in a logit of size |φ| ≤ max|φ| moves each weight by about eps·|φ|.
        const double largest_logit =
            kernel.exponent_block<T>(Q, K).template cast<double>().cwiseAbs().maxCoeff();
        CHECK(relative_difference(gpu, cpu) <= tolerance<T>(keys, 1 + largest_logit));
      }
    }
  }

  TEST_CASE("GPU exact attention over several row panels equals the CPU") {
    skip_without_gpu();
    // 70,000 keys leave room for 958 query rows per panel (2^26 entries), so 2,000 queries take three panels.
    const Index queries = 2000, keys = 70000, d = 8, dv = 4;
    const Matrix<double> Q = random_matrix<double>(queries, d, 51), K = random_matrix<double>(keys, d, 52);
    const Matrix<double> V = random_matrix<double>(keys, dv, 53);
    const Kernel kernel = Kernel::exponential(0.35);
    const Matrix<double> cpu = exact_attention<double>(Q, K, V, kernel);
    const Matrix<double> gpu = exact_attention<double>(Device::cuda, Q, K, V, kernel);
    CHECK(relative_difference(gpu, cpu) <= tolerance<double>(keys, 32));
  }

  TEST_CASE_TEMPLATE("GPU pseudoinverses equal the CPU ones: values, status, iterations and residuals", T,
                     float, double) {
    skip_without_gpu();
    const Index m = 12;
    const Matrix<T> well =
        (Matrix<double>::Identity(m, m) + 0.2 * random_matrix<double>(m, m, 61) / std::sqrt(12.0))
            .template cast<T>();
    const Matrix<T> rank_six = test::random_low_rank<T>(m, m, 6, 62);
    const Matrix<T> identity = Matrix<T>::Identity(m, m);
    struct Case {
      const char* name;
      const Matrix<T>* a;
      PinvOptions options;
      double condition;  ///< of the matrix actually inverted (A, A + εI or AᵀA + εI)
    };
    std::vector<Case> cases;
    PinvOptions options;
    cases.push_back({"exact", &well, options, condition_number<T>(well)});
    cases.push_back({"exact, rank 6", &rank_six, options, condition_number<T>(rank_six)});
    options.shift = 0.1;
    cases.push_back({"exact, shift", &well, options, condition_number<T>(well + T(0.1) * identity)});
    options.shift = 0;
    options.tikhonov = 0.01;
    cases.push_back({"exact, tikhonov", &rank_six, options,
                     condition_number<T>(rank_six.transpose() * rank_six + T(0.01) * identity)});
    options.tikhonov = 0;
    options.method = PinvMethod::razavi;
    options.iterations = 6;
    cases.push_back({"razavi", &well, options, condition_number<T>(well)});
    options.tolerance = 1e-3;
    cases.push_back({"razavi, stops at tolerance", &well, options, condition_number<T>(well)});
    options.tolerance = 0;
    options.method = PinvMethod::newton_schulz;
    options.iterations = 12;
    cases.push_back({"newton-schulz", &well, options, condition_number<T>(well)});
    // Newton–Schulz converges iff ασ₁² < 2 (docs/mathematics.md §4): ασ₁² = 10 diverges.
    const double sigma_1 = Eigen::JacobiSVD<Matrix<double>>(well.template cast<double>()).singularValues()(0);
    options.alpha = 10 / (sigma_1 * sigma_1);
    cases.push_back({"newton-schulz, alpha too large", &well, options, condition_number<T>(well)});
    for (const Case& c : cases) {
      CAPTURE(c.name);
      const PinvResult<T> cpu = pseudoinverse<T>(*c.a, c.options);
      const PinvResult<T> gpu = pseudoinverse<T>(Device::cuda, *c.a, c.options);
      if (c.options.alpha > 0) CHECK(cpu.status == PinvStatus::diverged);
      CHECK(to_string(gpu.status) == to_string(cpu.status));
      CHECK(gpu.iterations == cpu.iterations);
      CHECK(gpu.rank == cpu.rank);
      CHECK(gpu.alpha == doctest::Approx(cpu.alpha).epsilon(tolerance<T>(m)));
      REQUIRE(gpu.residuals.size() == cpu.residuals.size());
      const double condition = c.condition;
      if (cpu.status == PinvStatus::diverged) continue;  // diverging iterates amplify rounding without bound
      for (std::size_t k = 0; k < cpu.residuals.size(); ++k)
        CHECK(std::abs(gpu.residuals[k] - cpu.residuals[k]) <=
              tolerance<T>(m * m, condition) * (1 + cpu.residuals[k]));
      CHECK(relative_difference(gpu.z, cpu.z) <= tolerance<T>(m, condition));
    }
  }

  TEST_CASE_TEMPLATE("GPU generalized Nyström factors equal the CPU factors for every stabilization", T,
                     float, double) {
    skip_without_gpu();
    const Index n = 257, d = 16, m = 12;
    const Matrix<T> Q = random_matrix<T>(n, d, 71), K = random_matrix<T>(n, d, 72);
    for (const Kernel& kernel : tested_kernels) {
      for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
        CAPTURE(kernel.label());
        CAPTURE(to_string(stabilization));
        const NystromOptions options = nystrom_options(kernel, m, stabilization, PinvMethod::exact);
        const NystromFactors<T> cpu = generalized_nystrom<T>(Q, K, options);
        const NystromFactors<T> gpu = generalized_nystrom<T>(Device::cuda, Q, K, options);
        const double amplification =
            1 + kernel.exponent_block<T>(Q, K).template cast<double>().cwiseAbs().maxCoeff();
        const double tol = tolerance<T>(d, amplification);
        CHECK(gpu.landmarks.q == cpu.landmarks.q);
        CHECK(relative_difference(gpu.left, cpu.left) <= tol);
        CHECK(relative_difference(gpu.core, cpu.core) <= tol);
        CHECK(relative_difference(gpu.upper, cpu.upper) <= tol);
        CHECK(relative_difference(gpu.left_log_scale, cpu.left_log_scale) <= tol);
        CHECK(relative_difference(gpu.upper_log_scale, cpu.upper_log_scale) <= tol);
        const double condition = condition_number<T>(cpu.core);
        REQUIRE(condition < 1e4);  // the comparison of Z below is meaningful only for a well-conditioned core
        CHECK(gpu.pinv.rank == cpu.pinv.rank);
        CHECK(relative_difference(gpu.pinv.z, cpu.pinv.z) <= tolerance<T>(m, condition * amplification));
      }
    }
  }

  TEST_CASE_TEMPLATE("GPU PnP-Nystra attention equals the CPU for every stabilization and pseudoinverse", T,
                     float, double) {
    skip_without_gpu();
    const Index n = 300, d = 16, dv = 8, m = 16;
    const Matrix<T> Q = random_matrix<T>(n, d, 81), K = random_matrix<T>(n, d, 82),
                    V = random_matrix<T>(n, dv, 83);
    for (const Kernel& kernel : tested_kernels) {
      for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
        for (auto method : {PinvMethod::exact, PinvMethod::razavi, PinvMethod::newton_schulz}) {
          CAPTURE(kernel.label());
          CAPTURE(to_string(stabilization));
          CAPTURE(to_string(method));
          const NystromOptions options = nystrom_options(kernel, m, stabilization, method);
          const NystromFactors<T> factors = generalized_nystrom<T>(Q, K, options);
          const Matrix<T> cpu = nystrom_attention<T>(factors, V);
          const Matrix<T> gpu = nystrom_attention<T>(Device::cuda, Q, K, V, options);
          const double amplification =
              condition_number<T>(factors.core) *
              (1 + kernel.exponent_block<T>(Q, K).template cast<double>().cwiseAbs().maxCoeff());
          CHECK(relative_difference(gpu, cpu) <= tolerance<T>(n, amplification));
        }
      }
    }
  }

  TEST_CASE_TEMPLATE("GPU Nyström is exact when rank(G_A) = rank(G̃) (Corollary 2.2)", T, float, double) {
    skip_without_gpu();
    // N tokens, each a copy of one of m distinct tokens: G has rank m, and the first copies as landmarks give
    // rank(G_A) = m, so Ĝ = G and Ô = O up to rounding.
    const Index n = 240, d = 4, m = 6, dv = 3;
    const Matrix<T> distinct_q = random_matrix<T>(m, d, 91), distinct_k = random_matrix<T>(m, d, 92);
    Matrix<T> Q(n, d), K(n, d);
    for (Index i = 0; i < n; ++i) {
      Q.row(i) = distinct_q.row(i % m);
      K.row(i) = distinct_k.row((i * 5) % m);
    }
    const Matrix<T> V = random_matrix<T>(n, dv, 93);
    NystromOptions options =
        nystrom_options(Kernel::exponential(0.5), m, Stabilization::row_max, PinvMethod::exact);
    options.landmarks.strategy = LandmarkStrategy::given;
    for (Index i = 0; i < m; ++i) options.landmarks.q_indices.push_back(i);
    const NystromFactors<T> factors = generalized_nystrom<T>(Device::cuda, Q, K, options);
    REQUIRE(factors.pinv.rank == m);
    const double condition = condition_number<T>(factors.core);
    const Vector<T> x = random_matrix<T>(n, 1, 94);
    Vector<T> error(n), product(n);
    error_operator<T>(Device::cuda, Q, K, factors).perform_op(x.data(), error.data());
    kernel_operator<T>(Device::cuda, Q, K, options.kernel).perform_op(x.data(), product.data());
    CHECK(error.template cast<double>().norm() <=
          tolerance<T>(n, condition) * product.template cast<double>().norm());
    const Matrix<T> exact = exact_attention<T>(Device::cuda, Q, K, V, options.kernel);
    CHECK(relative_difference(nystrom_attention<T>(Device::cuda, Q, K, V, options), exact) <=
          tolerance<T>(n, condition));
  }

  TEST_CASE_TEMPLATE("GPU matrix-free operators equal dense products, transposes included", T, float,
                     double) {
    skip_without_gpu();
    const Index n = 150, d = 8;
    const Matrix<T> Q = random_matrix<T>(n, d, 101), K = random_matrix<T>(n, d, 102);
    const Vector<T> x = random_matrix<T>(n, 1, 103);
    const Vector<double> xd = x.template cast<double>();
    for (const Kernel& kernel : tested_kernels) {
      CAPTURE(kernel.label());
      const NystromOptions options = nystrom_options(kernel, 10, Stabilization::row_max, PinvMethod::razavi);
      const NystromFactors<T> factors = generalized_nystrom<T>(Q, K, options);
      const Matrix<double> G = test::naive_kernel<T>(Q, K, kernel).template cast<double>();
      const Matrix<double> E = G - factors.dense().template cast<double>();
      const double amplification = exponent_amplification<T>(G.template cast<T>());
      const double scale = G.norm() * xd.norm();
      // The device operator's products with x and its transpose products against the dense matrix.
      const auto check_products = [&](const AnyOperator<T>& op, const Matrix<double>& dense) {
        Vector<T> y(n);
        op.perform_op(x.data(), y.data());
        CHECK((y.template cast<double>() - dense * xd).norm() <= tolerance<T>(n, amplification) * scale);
        op.perform_transpose_op(x.data(), y.data());
        CHECK((y.template cast<double>() - dense.transpose() * xd).norm() <=
              tolerance<T>(n, amplification) * scale);
      };
      check_products(kernel_operator<T>(Device::cuda, Q, K, kernel), G);
      check_products(error_operator<T>(Device::cuda, Q, K, factors), E);
    }
    const double seconds = gemm_seconds<T>(Device::cuda, 256);
    CHECK((std::isfinite(seconds) && seconds > 0));
  }

  TEST_CASE_TEMPLATE("a log-shift on the GPU: κ_c blocks, operators and factors equal the CPU's", T, float,
                     double) {
    skip_without_gpu();
    const Index n = 120, d = 8;
    const Matrix<T> Q = random_matrix<T>(n, d, 111), K = random_matrix<T>(n, d, 112);
    const Kernel kernel = Kernel::exponential(0.4).shifted(2.75);
    const double tol = tolerance<T>(n, 10);
    CHECK(relative_difference(kernel_block<T>(Device::cuda, Q, K, kernel), kernel.block<T>(Q, K)) <= tol);
    for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
      CAPTURE(to_string(stabilization));
      const NystromOptions options = nystrom_options(kernel, 8, stabilization, PinvMethod::exact);
      const NystromFactors<T> cpu = generalized_nystrom<T>(Q, K, options);
      const NystromFactors<T> gpu = generalized_nystrom<T>(Device::cuda, Q, K, options);
      const double amplification = condition_number<T>(cpu.core) * 10;
      CHECK(relative_difference(gpu.dense(), cpu.dense()) <= tolerance<T>(n, amplification));
      const Vector<double> x = random_matrix<double>(n, 1, 113);
      Vector<double> on_gpu(n), on_cpu(n);
      error_operator<T, double>(Device::cuda, Q, K, gpu).perform_op(x.data(), on_gpu.data());
      error_operator<T, double>(Device::cpu, Q, K, cpu).perform_op(x.data(), on_cpu.data());
      CHECK((on_gpu - on_cpu).norm() <=
            tolerance<T>(n, amplification) * kernel.block<T>(Q, K).template cast<double>().norm() * x.norm());
    }
    CHECK(throws_naming([&] { kernel_block<T>(Device::cuda, Q, K, Kernel::laplacian(2).shifted(1)); },
                        "log_shift"));
  }

  TEST_CASE_TEMPLATE("the point evaluator on the GPU equals the CPU for every method, dense and matrix-free",
                     T, float, double) {
    skip_without_gpu();
    const Index n = 150, d = 8;
    Head<T> head;
    head.q = random_matrix<T>(n, d, 121, 0.8);
    head.k = random_matrix<T>(n, d, 122, 0.8);
    head.v = random_matrix<T>(n, 4, 123);
    ApproximationOptions options;
    options.kernel = Kernel::exponential(0.35);
    options.pnp_nystra = nystrom_options(options.kernel, 6, Stabilization::row_max, PinvMethod::exact);
    options.symmetric_nystrom.landmarks.count = 6;
    options.nystromformer.landmarks = 6;
    options.cur.selection.count = 6;
    options.performer.features = 24;
    options.linformer.projected = 6;
    for (bool matrix_free : {false, true}) {
      CAPTURE(matrix_free);
      EvaluationOptions on_cpu, on_gpu;
      on_cpu.matrix_free = on_gpu.matrix_free = matrix_free;
      on_gpu.device = Device::cuda;
      HeadEvaluator<T> cpu(head, on_cpu), gpu(head, on_gpu);
      for (Method method : {Method::pnp_nystra, Method::nystromformer, Method::cur, Method::symmetric_nystrom,
                            Method::performer, Method::linformer, Method::exact}) {
        CAPTURE(to_string(method));
        const PointResult a = cpu.evaluate(method, options), b = gpu.evaluate(method, options);
        const double tol = tolerance<T>(n, 1e3);
        const auto same = [&](double x, double y) {
          return std::isnan(y) ? std::isnan(x) : std::abs(x - y) <= tol * std::max(std::abs(y), 1e-3);
        };
        CHECK(same(b.spectral_error, a.spectral_error));
        CHECK(same(b.relative_spectral_error, a.relative_spectral_error));
        CHECK(same(b.frobenius_error, a.frobenius_error));
        CHECK(same(b.output_relative_error, a.output_relative_error));
        CHECK(same(b.sigma1_ext, a.sigma1_ext));
        CHECK(b.log_shift == a.log_shift);
      }
    }
  }

  TEST_CASE_TEMPLATE("GPU batched exact attention equals the CPU batched call, host and device arrays", T,
                     float, double) {
    skip_without_gpu();
    const BatchShape shape{2, 3, 67, 16, 8};  // N odd, off the tiles of the distance kernel
    const Tensor<T> q(shape, 16, 111), k(shape, 16, 112), v(shape, 8, 113);
    for (const Kernel& kernel : tested_kernels) {
      CAPTURE(kernel.label());
      const ApproximationOptions options = batch_options(kernel, 8);
      Tensor<T> cpu(shape, 8, 114), gpu(shape, 8, 115);
      batched_attention<T>(Method::exact, q.view(), k.view(), v.view(), cpu.view(), options);
      BatchedAttentionPlan<T> plan(Device::cuda, Method::exact, shape, options);
      const TransferSeconds seconds = plan.run(q.view(), k.view(), v.view(), gpu.view());
      CHECK((seconds.to_device > 0 && seconds.compute > 0 && seconds.to_host > 0));
      const double amplification = 1 + largest_logit(kernel, q, k);
      for (Index i = 0; i < shape.count(); ++i) {
        CAPTURE(i);
        CHECK(relative_difference(gpu.head(i), cpu.head(i)) <= tolerance<T>(shape.tokens, amplification));
      }
      CHECK(run_on_device(plan, q, k, v) == gpu.values);
      CHECK(plan.diagnostics().heads.size() == std::size_t(shape.count()));
    }
  }

  TEST_CASE("GPU batched exact attention over query panels of one head at a time equals the CPU") {
    skip_without_gpu();
    // N² = 67.2M entries exceed the 2^26 logit budget: one head per pass, 8,183 queries and then 17.
    const BatchShape shape{1, 2, 8200, 4, 3};
    const Tensor<double> q(shape, 4, 121), k(shape, 4, 122), v(shape, 3, 123);
    const ApproximationOptions options = batch_options(Kernel::exponential(0.5), 8);
    Tensor<double> cpu(shape, 3, 124), gpu(shape, 3, 125);
    batched_attention<double>(Method::exact, q.view(), k.view(), v.view(), cpu.view(), options);
    BatchedAttentionPlan<double>(Device::cuda, Method::exact, shape, options)
        .run(q.view(), k.view(), v.view(), gpu.view());
    for (Index i = 0; i < shape.count(); ++i) CHECK(relative_difference(gpu.head(i), cpu.head(i)) <= 1e-12);
  }

  TEST_CASE_TEMPLATE(
      "a GPU batched plan's later runs see new inputs in the same arrays, and runs on other arrays", T, float,
      double) {
    // The plan replays the work captured at its first run on a set of arrays (a CUDA graph); the replays must
    // read the arrays' current values, and other arrays must get their own capture.
    skip_without_gpu();
    const BatchShape shape{2, 3, 96, 16, 8};
    for (auto method : {Method::exact, Method::pnp_nystra}) {
      CAPTURE(to_string(method));
      ApproximationOptions options = batch_options(Kernel::exponential(0.25), 8);
      options.pnp_nystra.pinv.method = PinvMethod::razavi;
      BatchedAttentionPlan<T> plan(Device::cuda, method, shape, options);
      const Index tokens = shape.count() * shape.tokens * shape.dim,
                  values = shape.count() * shape.tokens * 8;
      DeviceArray<T> dq(Device::cuda, tokens), dk(Device::cuda, tokens), dv(Device::cuda, values),
          dout(Device::cuda, values);
      for (std::uint64_t seed : {150, 160, 170}) {
        CAPTURE(seed);
        const Tensor<T> q(shape, 16, seed), k(shape, 16, seed + 1), v(shape, 8, seed + 2);
        Tensor<T> cpu(shape, 8, seed + 3);
        batched_attention<T>(Method::exact, q.view(), k.view(), v.view(), cpu.view(), options);
        dq.copy_from(q.values.data());
        dk.copy_from(k.values.data());
        dv.copy_from(v.values.data());
        for (int repeat = 0; repeat < 2; ++repeat) plan.run(dq.data(), dk.data(), dv.data(), dout.data());
        std::vector<T> gpu(v.values.size());
        dout.copy_to(gpu.data());
        // Bit for bit what the plan gives on other arrays and what a new plan gives (new plans are checked
        // against the CPU by the other batched tests); exact attention also against the CPU here.
        CHECK(gpu == run_on_device(plan, q, k, v));
        BatchedAttentionPlan<T> fresh(Device::cuda, method, shape, options);
        CHECK(gpu == run_on_device(fresh, q, k, v));
        if (method == Method::exact) {
          const Eigen::Map<const Vector<T>> got(gpu.data(), Index(gpu.size())),
              want(cpu.values.data(), Index(cpu.values.size()));
          CHECK(relative_difference(Matrix<T>(got), Matrix<T>(want)) <=
                tolerance<T>(shape.tokens, 1 + largest_logit(options.kernel, q, k)));
        }
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "GPU batched PnP-Nystra equals the CPU for every kernel and stabilization: odd sizes, segments of "
      "unequal lengths, many and long heads, overlapping pooling bins",
      T, float, double) {
    skip_without_gpu();
    // 8 heads of N = 300 (segments of s = 42 or 43 tokens); 2 heads of N = 3001; 2 × 7×9 windows pooled to a
    // 2×2 grid, whose bins overlap (rows [0, 4) and [3, 7), columns [0, 5) and [4, 9)). d = 5, dv = 3.
    struct Case {
      BatchShape shape;
      Index m;
      LandmarkStrategy strategy;
    };
    const Case cases[] = {{{2, 4, 300, 5, 3}, 7, LandmarkStrategy::segment_means},
                          {{1, 2, 3001, 5, 3}, 7, LandmarkStrategy::segment_means},
                          {{1, 2, 63, 5, 3}, 4, LandmarkStrategy::window_pool}};
    for (const Case& c : cases) {
      const Tensor<T> q(c.shape, c.shape.dim, 141), k(c.shape, c.shape.dim, 142),
          v(c.shape, c.shape.value_dim, 143);
      for (const Kernel& kernel : tested_kernels) {
        for (auto stabilization : {Stabilization::none, Stabilization::row_max, Stabilization::clamped}) {
          CAPTURE(c.shape.tokens);
          CAPTURE(kernel.label());
          CAPTURE(to_string(stabilization));
          ApproximationOptions options = batch_options(kernel, c.m);
          options.pnp_nystra.landmarks.strategy = c.strategy;
          if (c.strategy == LandmarkStrategy::window_pool) options.pnp_nystra.landmarks.window = {7, 9};
          options.pnp_nystra.stabilization = stabilization;
          options.pnp_nystra.pinv.method = PinvMethod::exact;
          check_batched_nystra<T>(c.shape, q, k, v, options);
        }
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "GPU batched PnP-Nystra equals the CPU batched call: stabilizations, clamp thresholds, pseudoinverses, "
      "batch and per-matrix alpha, segment means and window pooling",
      T, float, double) {
    skip_without_gpu();
    const BatchShape shape{2, 2, 64, 16, 8};  // an 8×8 window
    const Tensor<T> q(shape, 16, 131), k(shape, 16, 132), v(shape, 8, 133);
    struct Case {
      Stabilization stabilization;
      double clamp_threshold;
    };
    const Case cases[] = {{Stabilization::none, 5},
                          {Stabilization::row_max, 5},
                          {Stabilization::clamped, 5},
                          {Stabilization::clamped, 0}};
    // m = 16 takes the batched Jacobi SVD for the exact pseudoinverse, m = 36 one SVD per head.
    for (Index m : {Index(16), Index(36)}) {
      for (auto strategy : {LandmarkStrategy::segment_means, LandmarkStrategy::window_pool}) {
        for (const Case& c : cases) {
          for (auto method : {PinvMethod::exact, PinvMethod::razavi, PinvMethod::newton_schulz}) {
            for (auto scope : {AlphaScope::matrix, AlphaScope::batch}) {
              if (method == PinvMethod::exact && scope == AlphaScope::batch) continue;
              CAPTURE(m);
              CAPTURE(to_string(strategy));
              CAPTURE(to_string(c.stabilization));
              CAPTURE(c.clamp_threshold);
              CAPTURE(to_string(method));
              CAPTURE(to_string(scope));
              ApproximationOptions options = batch_options(Kernel::exponential(0.25), m);
              options.pnp_nystra.landmarks.strategy = strategy;
              options.pnp_nystra.stabilization = c.stabilization;
              options.pnp_nystra.clamp_threshold = c.clamp_threshold;
              options.pnp_nystra.pinv.method = method;
              options.pnp_nystra.pinv.iterations = method == PinvMethod::razavi ? 6 : 12;
              check_batched_nystra<T>(shape, q, k, v, options, scope);
            }
          }
        }
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "GPU batched PnP-Nystra with a kernel log-shift equals the CPU: blocks of κ_c with a Tikhonov ε, and "
      "the "
      "clamped map of the logits themselves, with batch and per-matrix alpha",
      T, float, double) {
    skip_without_gpu();
    const BatchShape shape{2, 2, 64, 16, 8};
    const Tensor<T> q(shape, 16, 151), k(shape, 16, 152), v(shape, 8, 153);
    for (auto stabilization : {Stabilization::none, Stabilization::clamped}) {
      for (auto scope : {AlphaScope::matrix, AlphaScope::batch}) {
        CAPTURE(to_string(stabilization));
        CAPTURE(to_string(scope));
        ApproximationOptions options = batch_options(Kernel::exponential(0.25).shifted(3), 16);
        options.pnp_nystra.stabilization = stabilization;
        options.pnp_nystra.pinv = {PinvMethod::razavi, 6, 0, 0, 0.05, 0};  // Tikhonov ε = 0.05
        check_batched_nystra<T>(shape, q, k, v, options, scope);
      }
    }
  }

  TEST_CASE_TEMPLATE(
      "GPU batched PnP-Nystra: a head whose core overflows is NaN and non-finite and takes no part in the "
      "batch "
      "alpha, as on the CPU",
      T, float, double) {
    skip_without_gpu();
    // Head 1's tokens shifted by 30: logits near s·d·30² overflow the unstabilized core in float and double.
    const BatchShape shape{1, 3, 40, 4, 3};
    Tensor<T> q(shape, 4, 161), k(shape, 4, 162);
    const Tensor<T> v(shape, 3, 163);
    for (Index e = 40 * 4; e < 2 * 40 * 4; ++e) {
      q.values[std::size_t(e)] += T(30);
      k.values[std::size_t(e)] += T(30);
    }
    for (auto scope : {AlphaScope::matrix, AlphaScope::batch}) {
      CAPTURE(to_string(scope));
      ApproximationOptions options = batch_options(Kernel::exponential(0.5), 5);
      options.pnp_nystra.stabilization = Stabilization::none;
      options.pnp_nystra.pinv.method = PinvMethod::razavi;
      CHECK(check_batched_nystra<T>(shape, q, k, v, options, scope).heads[1].pinv_status ==
            PinvStatus::non_finite);
    }
  }
}
