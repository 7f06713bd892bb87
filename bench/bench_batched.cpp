// Batched attention timings: exact attention against PnP-Nystra (and any other method) on batches of heads in
// the [B, H, N, d] layout of vision transformers (SwinIR at 256×256: 64 windows × 6 heads × N = 1024),
// through BatchedAttentionPlan (backend.hpp) on the CPU or the GPU, per thread count. Also times a
// head-by-head loop of approximate_attention over column-major copies of the heads (the per-head API, no
// layout copies inside the timing) and, on the GPU, the device-resident run beside the run with host copies.
//
//   bench_batched --shapes 64x6x1024x64,16x8x4096x64,64x6x1024x32,1x1x4096x64 --threads 1,2
//
// Prints one row per shape, method and thread count: best and median seconds over the repeats (after a
// warm-up run), their spread ((max − min)/median), heads per second, speed-up over exact attention in the
// same run and thread count (on the GPU: the host-copy rows against exact with copies, the "(on device)" rows
// against exact on device), and the relative output error against exact attention (random Gaussian tokens:
// an error measure of the run, not of the method's accuracy on real attention).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "nystrom/approximation.hpp"
#include "nystrom/attention.hpp"
#include "nystrom/backend.hpp"
#include "nystrom/batched.hpp"
#include "nystrom/threads.hpp"

using namespace nystrom;

namespace {

struct Settings {
  std::vector<BatchShape> shapes;
  std::vector<int> threads = {1, 2};
  std::vector<Method> methods = {Method::pnp_nystra};
  Device device = Device::cpu;
  Index landmarks = 16;
  PinvMethod pinv = PinvMethod::exact;
  AlphaScope alpha_scope = AlphaScope::matrix;
  int repeats = 7;
  bool loop = true;  ///< also time the head-by-head loop of approximate_attention
};

/// "64x6x1024x64" (B×H×N×d, dv = d) or "64x6x1024x64x32" (dv given).
BatchShape parse_shape(const std::string& text) {
  std::vector<Index> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, 'x')) parts.push_back(std::stoll(part));
  require(parts.size() == 4 || parts.size() == 5,
          describe("--shapes: '", text, "' is not BxHxNxd or BxHxNxdxdv"));
  return {parts[0], parts[1], parts[2], parts[3], parts.size() == 5 ? parts[4] : parts[3]};
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ',')) out.push_back(part);
  return out;
}

Settings parse(int argc, char** argv) {
  Settings settings;
  for (int i = 1; i < argc; ++i) {
    const std::string option = argv[i];
    require(i + 1 < argc, describe(option, ": missing value"));
    const std::string value = argv[++i];
    if (option == "--shapes") {
      for (const auto& shape : split(value)) settings.shapes.push_back(parse_shape(shape));
    } else if (option == "--threads") {
      settings.threads.clear();
      for (const auto& count : split(value)) settings.threads.push_back(std::stoi(count));
    } else if (option == "--methods") {
      settings.methods.clear();
      for (const auto& name : split(value))
        if (method_from_string(name) != Method::exact) settings.methods.push_back(method_from_string(name));
    } else if (option == "--device") {
      settings.device = device_from_string(value);
    } else if (option == "--landmarks") {
      settings.landmarks = std::stoll(value);
    } else if (option == "--pinv") {
      settings.pinv = pinv_method_from_string(value);
    } else if (option == "--alpha-scope") {
      settings.alpha_scope = alpha_scope_from_string(value);
    } else if (option == "--repeats") {
      settings.repeats = std::stoi(value);
    } else if (option == "--loop") {
      settings.loop = value != "0";
    } else {
      throw std::invalid_argument(describe("unknown option ", option));
    }
  }
  if (settings.shapes.empty())
    settings.shapes = {
        {64, 6, 1024, 64, 64}, {64, 6, 1024, 32, 32}, {16, 8, 4096, 64, 64}, {1, 1, 4096, 64, 64}};
  return settings;
}

/// Best, median and spread of the repeated timings of `work`, after one warm-up run.
struct Timing {
  double best = 0, median = 0, spread = 0;
};

template <class Work>
Timing time_repeats(int repeats, Work&& work) {
  work();
  std::vector<double> seconds;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    work();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  const double median = seconds[seconds.size() / 2];
  return {seconds.front(), median, (seconds.back() - seconds.front()) / median};
}

ApproximationOptions options_for(const Settings& settings, Index d) {
  ApproximationOptions options;
  options.kernel = Kernel::exponential(1 / std::sqrt(double(d)));
  options.nystrom.landmarks.count = settings.landmarks;
  options.nystrom.pinv.method = settings.pinv;
  options.symmetric.landmarks.count = settings.landmarks;
  options.nystromformer.landmarks = settings.landmarks;
  options.cur.selection.count = settings.landmarks;
  return options;
}

void print_row(const std::string& label, const BatchShape& shape, int threads, const Timing& timing,
               double exact_seconds, double error) {
  std::cout << std::left << std::setw(22) << label << std::right << std::setw(4) << shape.batch
            << std::setw(3) << shape.heads << std::setw(6) << shape.tokens << std::setw(4) << shape.dim
            << std::setw(4) << threads << std::scientific << std::setprecision(3) << std::setw(12)
            << timing.best << std::setw(12) << timing.median << std::fixed << std::setprecision(2)
            << std::setw(8) << timing.spread << std::setprecision(0) << std::setw(10)
            << double(shape.count()) / timing.best << std::setprecision(1) << std::setw(9)
            << exact_seconds / timing.best << std::scientific << std::setprecision(2) << std::setw(11)
            << error << std::defaultfloat << "\n";
}

double relative_error(const std::vector<float>& exact, const std::vector<float>& approximate) {
  double difference = 0, norm = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    difference += (double(exact[i]) - approximate[i]) * (double(exact[i]) - approximate[i]);
    norm += double(exact[i]) * exact[i];
  }
  return std::sqrt(difference / norm);
}

/// The inputs of one shape, in host memory and (on the GPU) in device memory.
struct Inputs {
  BatchShape shape;
  std::vector<float> q, k, v;
  std::vector<DeviceArray<float>> on_device;  ///< q, k, v, out (GPU only)

  BatchView<const float> view(const std::vector<float>& data, Index dim) const {
    return {data.data(), shape.batch, shape.heads, shape.tokens, dim};
  }
};

/// The timings of one plan: with host views, and (GPU) on device arrays.
struct PlanTimings {
  Timing host, device;
};

/// Times `plan` on host views (GPU: copies included, the last run's phases printed) and, on the GPU, on the
/// device arrays (plan.diagnostics() waits for each run); the output of the host runs is left in `out`. With
/// `exact`, the rows give the speed-up over `exact_timings` and the error against `exact`.
PlanTimings time_plan(BatchedAttentionPlan<float>& plan, Inputs& inputs, std::vector<float>& out,
                      const std::string& label, int repeats, const PlanTimings& exact_timings,
                      const std::vector<float>* exact) {
  const BatchShape& shape = inputs.shape;
  const BatchView<float> out_view{out.data(), shape.batch, shape.heads, shape.tokens, shape.value_dim};
  const int threads = nystrom::threads();
  PlanTimings timings;
  TransferSeconds phases;
  timings.host = time_repeats(repeats, [&] {
    phases = plan.run(inputs.view(inputs.q, shape.dim), inputs.view(inputs.k, shape.dim),
                      inputs.view(inputs.v, shape.value_dim), out_view);
  });
  print_row(label, shape, threads, timings.host, exact ? exact_timings.host.best : timings.host.best,
            exact ? relative_error(*exact, out) : 0);
  if (plan.device() == Device::cuda) {
    std::cout << "  last run: copies to the device " << phases.to_device << " s, compute " << phases.compute
              << " s, copy back " << phases.to_host << " s (CUDA events)\n";
    auto& arrays = inputs.on_device;
    timings.device = time_repeats(repeats, [&] {
      plan.run(arrays[0].data(), arrays[1].data(), arrays[2].data(), arrays[3].data());
      plan.diagnostics();
    });
    print_row(label + " (on device)", shape, threads, timings.device,
              exact ? exact_timings.device.best : timings.device.best, 0);
  }
  return timings;
}

void run_shape(const BatchShape& shape, const Settings& settings) {
  std::mt19937_64 engine(std::uint64_t(shape.tokens * 1000 + shape.dim));
  std::normal_distribution<float> normal;
  const auto draw = [&](Index size) {
    std::vector<float> values(static_cast<std::size_t>(size));
    for (auto& value : values) value = normal(engine);
    return values;
  };
  const Index tokens = shape.count() * shape.tokens * shape.dim,
              values = shape.count() * shape.tokens * shape.value_dim;
  Inputs inputs{shape, draw(tokens), draw(tokens), draw(values), {}};
  if (settings.device == Device::cuda) {
    for (Index size : {tokens, tokens, values, values}) inputs.on_device.emplace_back(Device::cuda, size);
    inputs.on_device[0].copy_from(inputs.q.data());
    inputs.on_device[1].copy_from(inputs.k.data());
    inputs.on_device[2].copy_from(inputs.v.data());
  }
  const ApproximationOptions options = options_for(settings, shape.dim);
  for (int thread_count : settings.threads) {
    set_threads(thread_count);
    std::vector<float> exact(static_cast<std::size_t>(values)), out(static_cast<std::size_t>(values));
    BatchedAttentionPlan<float> exact_plan(settings.device, Method::exact, shape, options);
    const PlanTimings exact_timings =
        time_plan(exact_plan, inputs, exact, "exact", std::max(1, settings.repeats / 3), {}, nullptr);
    for (auto method : settings.methods) {
      BatchedAttentionPlan<float> plan(settings.device, method, shape, options, settings.alpha_scope);
      time_plan(plan, inputs, out, to_string(method), settings.repeats, exact_timings, &exact);
      if (settings.loop && settings.device == Device::cpu) {
        // The per-head API in a loop over column-major heads (copied outside the timing), the caller's
        // threads inside each head.
        std::vector<Matrix<float>> qs, ks, vs;
        for (Index i = 0; i < shape.count(); ++i) {
          qs.push_back(inputs.view(inputs.q, shape.dim).head(i));
          ks.push_back(inputs.view(inputs.k, shape.dim).head(i));
          vs.push_back(inputs.view(inputs.v, shape.value_dim).head(i));
        }
        const Timing loop = time_repeats(settings.repeats, [&] {
          for (Index i = 0; i < shape.count(); ++i)
            approximate_attention<float>(method, qs[i], ks[i], vs[i], options);
        });
        print_row(to_string(method) + " (head loop)", shape, thread_count, loop, exact_timings.host.best, 0);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Settings settings = parse(argc, argv);
    std::cout
        << "bench_batched: device " << describe_device(settings.device) << ", BLAS core " << blas_core()
        << ", float32, m = " << settings.landmarks << ", pinv " << to_string(settings.pinv) << ", alpha "
        << to_string(settings.alpha_scope) << ", OMP_WAIT_POLICY="
        << (std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "(unset)") << "\n"
        << "method                   B  H     N   d thr     best(s)   median(s)  spread   heads/s  vs exact"
           "  rel.error\n";
    for (const auto& shape : settings.shapes) run_shape(shape, settings);
  } catch (const std::invalid_argument& error) {
    std::cerr << "bench_batched: " << error.what() << "\n";
    return 2;
  }
  return 0;
}
