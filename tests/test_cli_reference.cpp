// End-to-end tests of `--reference kernel|model` (`nystrom sweep`, `nystrom spectrum`): a dump whose layer
// has a `bias` [H, N, N] and a `mask` [B, N, N] (docs/formats.md §1); every row recomputed by the library's
// evaluator on heads built here (bias of the head plus mask of the batch entry), the spectra against full
// SVDs of exp(s q k^T + bias + mask), the attributes that say which reference was used, and bad bias and
// mask datasets (exit 2 naming the dataset, no file); on the bundled DAT-light dump, S of the model equals
// the spectra of its own `attn`.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cli_test_support.hpp"
#include "nystrom/evaluation.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

constexpr Index batch = 2, heads = 2, n = 32, d = 4, dv = 3;
const double scale = 0.5;

/// The tokens and score terms of the test dump, column-major per head (index b·H + h) or window.
struct Layer {
  std::vector<Matrix<double>> q, k, v;
  std::vector<Matrix<double>> bias;  ///< per head h
  std::vector<Matrix<double>> mask;  ///< per batch entry b: 0 in batch 0, 0 / −100 between halves in batch 1
};

Layer make_layer() {
  Layer layer;
  for (Index i = 0; i < batch * heads; ++i) {
    layer.q.push_back(random_matrix<double>(n, d, 10 + i, 0.8));
    layer.k.push_back(random_matrix<double>(n, d, 20 + i, 0.8));
    layer.v.push_back(random_matrix<double>(n, dv, 30 + i));
  }
  for (Index h = 0; h < heads; ++h) layer.bias.push_back(random_matrix<double>(n, n, 40 + h, 2.0));
  for (Index b = 0; b < batch; ++b) {
    Matrix<double> mask = Matrix<double>::Zero(n, n);
    for (Index i = 0; i < n; ++i)
      for (Index j = 0; j < n; ++j)
        if (b == 1 && (i < n / 2) != (j < n / 2)) mask(i, j) = -100;
    layer.mask.push_back(mask);
  }
  return layer;
}

/// Appends the row-major entries of each matrix.
std::vector<double> row_major(const std::vector<Matrix<double>>& matrices) {
  std::vector<double> out;
  for (const auto& m : matrices)
    for (Index i = 0; i < m.rows(); ++i)
      for (Index j = 0; j < m.cols(); ++j) out.push_back(m(i, j));
  return out;
}

/// Writes the layer as /layers/00 (with its bias and mask unless `score_terms` is false).
void write_dump(const std::string& path, const Layer& layer, bool score_terms = true) {
  cli::AtomicFile file(path, test_dump);
  cli::write_dump_header(file.get(), "test");
  cli::DumpLayerData<double> data;
  data.batch = batch;
  data.heads = heads;
  data.tokens = n;
  data.dim = d;
  data.value_dim = dv;
  data.q = row_major(layer.q);
  data.k = row_major(layer.k);
  data.v = row_major(layer.v);
  if (score_terms) {
    data.bias = row_major(layer.bias);
    data.mask = row_major(layer.mask);
  }
  data.scale = scale;
  cli::write_dump_layer(file.get(), "00", data);
  file.commit();
}

/// The head b·H + h as the program reads it, with the model's score term where `model`.
Head<double> head_of(const Layer& layer, Index b, Index h, bool model) {
  const Index i = b * heads + h;
  Head<double> head{layer.q[i], layer.k[i], layer.v[i]};
  if (model) head.bias = layer.bias[h] + layer.mask[b];
  return head;
}

std::string string_attribute(const std::string& path, const std::string& name) {
  cli::Handle file = cli::open_file(path, false);
  return cli::read_string_attribute(file.get(), name);
}

std::vector<std::string> sweep_args(const std::string& input, const std::string& output,
                                    const std::string& reference) {
  return {"sweep",       "-i",      input,        "-o",       output,
          "--kernel",    "exp",     "--strategy", "step",     "--pinv",
          "exact",       "-m",      "4,8",        "--method", "pnp-nystra,nystromformer,exact",
          "--reference", reference, "-q"};
}

}  // namespace

TEST_CASE("sweep --reference model: rows of exp(s q k^T + bias + mask), kernel rows of q and k alone") {
  TempDir dir("reference_sweep");
  const Layer layer = make_layer();
  const auto input = dir / "dump.h5";
  write_dump(input, layer);
  // info names the score terms a layer carries.
  const auto info = run_cli({"info", input});
  CHECK(info.status == 0);
  CHECK_MESSAGE(info.out.find(", bias, mask\n") != std::string::npos, info.out);
  std::map<std::string, Table> tables;
  for (const std::string reference : {"kernel", "model"}) {
    const auto output = dir / (reference + ".h5");
    const auto run = run_cli(sweep_args(input, output, reference));
    CAPTURE(run.err);
    REQUIRE(run.status == 0);
    CHECK(string_attribute(output, "reference") == reference);
    tables[reference] = read_sweep(output);
  }
  CHECK(string_attribute(dir / "kernel.h5", "attention_reference")
            .ends_with("not the model's attention softmax(s q k^T + bias + mask): bias not applied (layers "
                       "00), mask not applied (layers 00)"));
  const std::string model_text = string_attribute(dir / "model.h5", "attention_reference");
  CHECK(model_text.starts_with("model: exp(phi(q, k) + bias + mask - c)"));
  CHECK(model_text.find("bias applied (layers 00), mask applied (layers 00)") != std::string::npos);

  const Table& kernel = tables["kernel"];
  const Table& model = tables["model"];
  REQUIRE(kernel.rows.size() == model.rows.size());
  REQUIRE(model.rows.size() == std::size_t(batch * heads * (2 * 2 + 1)));  // exact: one row per head
  for (const auto* table : {&kernel, &model}) {
    const bool with_model = table == &model;
    for (std::size_t r = 0; r < table->rows.size(); ++r) {
      const Index b = Index(table->number(r, "batch")), h = Index(table->number(r, "head"));
      const Method method = method_from_string(table->text(r, "method"));
      CAPTURE(with_model);
      CAPTURE(to_string(method));
      HeadEvaluator<double> evaluator(head_of(layer, b, h, with_model), {});
      ApproximationOptions options;
      options.kernel = Kernel::exponential(scale);
      options.pnp_nystra.landmarks.strategy = options.cur.selection.strategy = LandmarkStrategy::step;
      options.pnp_nystra.landmarks.count = options.nystromformer.landmarks =
          Index(table->number(r, "landmarks"));
      options.pnp_nystra.pinv = options.nystromformer.pinv = PinvOptions{};  // --pinv exact
      const PointResult point = evaluator.evaluate(method, options);
      CHECK(table->number(r, "log_shift") == doctest::Approx(point.log_shift).epsilon(1e-14));
      CHECK(table->number(r, "output_relative_error") ==
            doctest::Approx(point.output_relative_error).epsilon(1e-12));
      if (method == Method::exact) continue;
      CHECK(table->number(r, "relative_spectral_error") ==
            doctest::Approx(point.relative_spectral_error).epsilon(1e-10));
    }
  }
  // The bias (and, in batch 1, the mask) changes the exact side: every row's errors differ; the exact
  // method (q and k alone) has an output error only against the model.
  for (std::size_t r = 0; r < model.rows.size(); ++r) {
    CAPTURE(r);
    const double a = kernel.number(r, "output_relative_error"), b = model.number(r, "output_relative_error");
    CHECK(std::abs(a - b) > 1e-3 * std::max(a, b));
    if (model.text(r, "method") == "exact") {
      CHECK(a < 1e-12);
      CHECK(b > 0.01);
    } else {
      CHECK(kernel.number(r, "relative_spectral_error") != model.number(r, "relative_spectral_error"));
    }
  }
  // A results file of one reference is not resumed by the other.
  const auto mixed = run_cli(sweep_args(input, dir / "kernel.h5", "model"));
  CHECK(mixed.status == 2);
  CHECK(mixed.err.find("holds results of reference 'kernel', not 'model'") != std::string::npos);
  // Without bias or mask, model is the kernel: the same rows.
  const auto plain = dir / "plain.h5";
  write_dump(plain, layer, false);
  for (const std::string reference : {"kernel", "model"})
    REQUIRE(run_cli(sweep_args(plain, dir / ("plain-" + reference + ".h5"), reference)).status == 0);
  const Table a = read_sweep(dir / "plain-kernel.h5"), b = read_sweep(dir / "plain-model.h5");
  REQUIRE(a.rows.size() == b.rows.size());
  for (std::size_t r = 0; r < a.rows.size(); ++r) {
    CHECK(a.number(r, "output_relative_error") == b.number(r, "output_relative_error"));
    if (a.text(r, "method") != "exact")
      CHECK(a.number(r, "relative_spectral_error") == b.number(r, "relative_spectral_error"));
  }
  CHECK(string_attribute(dir / "plain-model.h5", "attention_reference")
            .starts_with("model: no selected layer has a bias or mask"));
}

TEST_CASE("spectrum --reference model: singular values of the model's G and S against full SVDs") {
  TempDir dir("reference_spectrum");
  const Layer layer = make_layer();
  const auto input = dir / "dump.h5";
  write_dump(input, layer);
  const auto output = dir / "spectrum.h5";
  const auto run = run_cli({"spectrum", "-i", input, "-o", output, "--reference", "model", "-k", "8", "-q"});
  CAPTURE(run.err);
  REQUIRE(run.status == 0);
  CHECK(string_attribute(output, "reference") == "model");
  const Doubles sv_g = read_doubles(output, "spectra/00/sv_G"),
                sv_s = read_doubles(output, "spectra/00/sv_S");
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h) {
      const Head<double> head = head_of(layer, b, h, true);
      const Matrix<double> g =
          ((scale * head.q * head.k.transpose()) + head.bias).array().exp().matrix();  // small logits
      const Matrix<double> s = (g.array().colwise() / g.rowwise().sum().array()).matrix();
      const Vector<double> sigma_g = Eigen::JacobiSVD<Matrix<double>>(g).singularValues();
      const Vector<double> sigma_s = Eigen::JacobiSVD<Matrix<double>>(s).singularValues();
      for (Index i = 0; i < 8; ++i) {
        const std::size_t at = std::size_t((b * heads + h) * 8 + i);
        CHECK(sv_g.values[at] == doctest::Approx(sigma_g(i)).epsilon(1e-10).scale(sigma_g(0)));
        CHECK(sv_s.values[at] == doctest::Approx(sigma_s(i)).epsilon(1e-10).scale(sigma_s(0)));
      }
    }
}

TEST_CASE("bad bias and mask datasets exit 2 naming the dataset, read only with --reference model") {
  TempDir dir("reference_bad");
  const Layer layer = make_layer();
  const auto input = dir / "dump.h5";
  const auto check_rejected = [&](const std::string& needle) {
    for (const std::string command : {"sweep", "spectrum"}) {
      const auto output = dir / (command + ".h5");
      auto args = sweep_args(input, output, "model");
      if (command == "spectrum") args = {"spectrum", "-i", input, "-o", output, "--reference", "model", "-q"};
      const auto run = run_cli(args);
      CAPTURE(command);
      CHECK(run.status == 2);
      CHECK(run.err.find(needle) != std::string::npos);
      CHECK_FALSE(fs::exists(output));
      CHECK_FALSE(fs::exists(output + ".partial"));
    }
    // --reference kernel does not read them.
    CHECK(run_cli(sweep_args(input, dir / "kernel.h5", "kernel")).status == 0);
    fs::remove(dir / "kernel.h5");
  };
  {  // bias [H, N, N − 1]
    write_dump(input, layer, false);
    cli::Handle file = cli::open_file(input, true);
    cli::Handle group = cli::open_group(file.get(), "layers/00");
    const std::vector<double> values(std::size_t(heads * n * (n - 1)), 0.0);
    cli::write_array(group.get(), "bias", {hsize_t(heads), hsize_t(n), hsize_t(n - 1)}, values.data());
  }
  check_rejected("/layers/00/bias: shape [2, 32, 31], expected [H, N, N] = [2, 32, 32]");
  for (const double bad :
       {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Layer broken = layer;
    broken.mask[1](3, 5) = bad;
    write_dump(input, broken);
    check_rejected("/layers/00/mask: non-finite value");
    check_rejected("at [1, 3, 5]");
  }
  Layer masked = layer;  // −∞ is a mask value
  masked.mask[1].topRightCorner(n / 2, n / 2).setConstant(-std::numeric_limits<double>::infinity());
  write_dump(input, masked);
  CHECK(run_cli(sweep_args(input, dir / "infinite.h5", "model")).status == 0);
  const auto reference = run_cli({"sweep", "-i", input, "--reference", "exact", "-q"});
  CHECK(reference.status == 2);
  CHECK(reference.err.find("option --reference: 'exact'") != std::string::npos);
}

TEST_CASE("spectrum --reference model on the bundled DAT-light dump: S is the model's own attn") {
  // The dump's attn is what the model computed (rounded to 18 mantissa bits); layer 02's batch entry 1 is a
  // shifted window with Swin's 0 / −100 mask, batch entry 0 has none, and the bias is a constant per head.
  TempDir dir("reference_dat");
  const std::string input = std::string(NYSTROM_SOURCE_DIR) + "/data/dat-light-x2-astronaut-8x32.h5";
  std::map<std::string, Doubles> sv_s;
  Doubles sv_attn;
  for (const std::string reference : {"kernel", "model"}) {
    const auto output = dir / (reference + ".h5");
    const auto run = run_cli({"spectrum", "-i", input, "-o", output, "--layers", "02", "--reference",
                              reference, "-k", "20", "-q"});
    CAPTURE(run.err);
    REQUIRE(run.status == 0);
    sv_s[reference] = read_doubles(output, "spectra/02/sv_S");
    sv_attn = read_doubles(output, "spectra/02/sv_attn");
  }
  REQUIRE(sv_attn.dims == std::vector<hsize_t>{2, 3, 20});
  for (std::size_t window = 0; window < 6; ++window) {
    CAPTURE(window);
    double model = 0, kernel = 0;  // the largest difference of a singular value from attn's
    for (std::size_t i = window * 20; i < window * 20 + 20; ++i) {
      model = std::max(model, std::abs(sv_s["model"].values[i] - sv_attn.values[i]));
      kernel = std::max(kernel, std::abs(sv_s["kernel"].values[i] - sv_attn.values[i]));
    }
    const double largest = sv_attn.values[window * 20];
    CHECK(model <= 1e-5 * largest);
    if (window < 3)  // batch entry 0: no mask, and a constant bias cancels in S
      CHECK(kernel <= 1e-5 * largest);
    else  // the masked window's S is not the kernel's
      CHECK(kernel > 0.1 * largest);
  }
}
