#include "nystrom/parameters.hpp"

#include <cmath>
#include <string>

#include "nystrom/error.hpp"

namespace nystrom {

Kernel Parameters::kernel_for(Index d) const {
  require(d >= 1, "the tokens have d = ", d, " features: q and k need at least one column");
  Kernel out;
  switch (kernel) {
    case KernelType::exponential:
      out = Kernel::exponential(scale != 0 ? scale : 1 / std::sqrt(double(d)));
      break;
    case KernelType::laplacian:
      out = Kernel::laplacian(lambda);
      break;
    case KernelType::gaussian:
      out = Kernel::gaussian(bandwidth);
      break;
  }
  return out;
}

void Parameters::use_kernel(const Kernel& k) {
  kernel = k.type;
  switch (k.type) {
    case KernelType::exponential:
      scale = k.param;
      break;
    case KernelType::laplacian:
      lambda = k.param;
      break;
    case KernelType::gaussian:
      bandwidth = k.param;
      break;
  }
}

LandmarkOptions Parameters::landmark_options(LandmarkStrategy fallback) const {
  LandmarkOptions options;
  options.strategy = strategy.value_or(fallback);
  options.count = landmarks;
  options.oversampling = oversampling;
  options.seed = seed;
  options.different_indices = different_indices;
  options.forced = forced;
  options.q_indices = q_indices;
  options.k_indices = k_indices;
  options.window = window;
  options.window_grid = window_grid;
  options.prefix_tokens = prefix_tokens;
  options.embed_column = embed_column;
  options.kmeans_iterations = kmeans_iterations;
  return options;
}

PinvOptions Parameters::pinv_options(PinvOptions base) const {
  if (pinv) base.method = *pinv;
  if (pinv_iters) base.iterations = *pinv_iters;
  if (alpha != 0) base.alpha = alpha;
  if (pinv_tolerance != 0) base.tolerance = pinv_tolerance;
  if (tikhonov != 0) base.tikhonov = tikhonov;
  if (shift) base.shift = *shift;
  return base;
}

NystromOptions Parameters::nystrom_options(Index d) const {
  const bool symmetric = method == Method::symmetric_nystrom;
  require(symmetric || method == Method::pnp_nystra, "method '", to_string(method),
          "' has no Nyström factors (expected pnp-nystra or symmetric-nystrom)");
  NystromOptions options = symmetric ? ApproximationOptions{}.symmetric_nystrom : NystromOptions{};
  options.kernel = kernel_for(d);
  options.landmarks = landmark_options(LandmarkStrategy::segment_means);
  options.pinv = pinv_options(options.pinv);
  if (stabilization) options.stabilization = *stabilization;
  options.clamp_threshold = clamp_threshold;
  return options;
}

ApproximationOptions Parameters::options(Index d) const {
  ApproximationOptions options;
  options.kernel = kernel_for(d);
  options.storage = precision;
  switch (method) {
    case Method::pnp_nystra:
      options.pnp_nystra = nystrom_options(d);
      break;
    case Method::symmetric_nystrom:
      options.symmetric_nystrom = nystrom_options(d);
      break;
    case Method::nystromformer:
      options.nystromformer.landmarks = landmarks;
      options.nystromformer.pinv = pinv_options(options.nystromformer.pinv);
      options.nystromformer.front_padding = front_padding;
      break;
    case Method::cur:
      options.cur.selection = landmark_options(LandmarkStrategy::step);
      options.cur.pinv = pinv_options(options.cur.pinv);
      options.cur.copy_rows = copy_rows;
      break;
    case Method::performer:
      options.performer.features = features.value_or(landmarks);
      options.performer.seed = seed;
      break;
    case Method::linformer:
      options.linformer.projected = projected.value_or(landmarks);
      options.linformer.seed = seed;
      options.linformer.share_projections = share_projections;
      break;
    case Method::exact:
      break;
  }
  return options;
}

namespace {

void set_landmarks(Parameters& p, const LandmarkOptions& o) {
  p.landmarks = o.count;
  p.strategy = o.strategy;
  p.oversampling = o.oversampling;
  p.seed = o.seed;
  p.different_indices = o.different_indices;
  p.forced = o.forced;
  p.q_indices = o.q_indices;
  p.k_indices = o.k_indices;
  p.window = o.window;
  p.window_grid = o.window_grid;
  p.prefix_tokens = o.prefix_tokens;
  p.embed_column = o.embed_column;
  p.kmeans_iterations = o.kmeans_iterations;
}

void set_pinv(Parameters& p, const PinvOptions& o) {
  p.pinv = o.method;
  p.pinv_iters = o.iterations;
  p.alpha = o.alpha;
  p.pinv_tolerance = o.tolerance;
  p.tikhonov = o.tikhonov;
  p.shift = o.shift;
}

}  // namespace

Parameters Parameters::of(Method method, const ApproximationOptions& options) {
  Parameters p;
  p.method = method;
  p.use_kernel(options.kernel);
  p.precision = options.storage;
  const auto nystrom = [&](const NystromOptions& o) {
    set_landmarks(p, o.landmarks);
    set_pinv(p, o.pinv);
    p.stabilization = o.stabilization;
    p.clamp_threshold = o.clamp_threshold;
  };
  switch (method) {
    case Method::pnp_nystra:
      nystrom(options.pnp_nystra);
      break;
    case Method::symmetric_nystrom:
      nystrom(options.symmetric_nystrom);
      break;
    case Method::nystromformer:
      p.landmarks = options.nystromformer.landmarks;
      p.strategy = LandmarkStrategy::segment_means;
      set_pinv(p, options.nystromformer.pinv);
      p.front_padding = options.nystromformer.front_padding;
      break;
    case Method::cur:
      set_landmarks(p, options.cur.selection);
      set_pinv(p, options.cur.pinv);
      p.copy_rows = options.cur.copy_rows;
      break;
    case Method::performer:
      p.features = options.performer.features;
      p.seed = options.performer.seed;
      break;
    case Method::linformer:
      p.projected = options.linformer.projected;
      p.seed = options.linformer.seed;
      p.share_projections = options.linformer.share_projections;
      break;
    case Method::exact:
      break;
  }
  return p;
}

const std::vector<ParameterName>& parameter_names() {
  static const std::vector<ParameterName> names = {
      {"method", true},
      {"kernel", true},
      {"scale", false},
      {"lambda", false},
      {"bandwidth", false},
      {"landmarks", true},
      {"strategy", true},
      {"oversampling", true},
      {"seed", true},
      {"different_indices", true},
      {"forced", false},
      {"q_indices", false},
      {"k_indices", false},
      {"window", false},
      {"window_grid", false},
      {"prefix_tokens", false},
      {"embed_column", false},
      {"kmeans_iterations", false},
      {"pinv", true},
      {"pinv_iters", true},
      {"alpha", false},
      {"pinv_tolerance", true},
      {"tikhonov", false},
      {"shift", false},
      {"stabilization", true},
      {"clamp_threshold", false},
      {"features", true},
      {"projected", true},
      {"share_projections", true},
      {"copy_rows", true},
      {"front_padding", true},
      {"precision", true},
  };
  return names;
}

std::string option_name(std::string_view name) {
  std::string option(name);
  for (char& c : option)
    if (c == '_') c = '-';
  return option;
}

}  // namespace nystrom
