// End-to-end tests of the attention dumps (dumps.hpp, docs/formats.md §1): synth's dumps checked against
// independent formulas and read back, and every malformed dump (exit status 2, a message naming the file,
// group and dataset, no output file, an existing file left intact).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "cli_test_support.hpp"
#include "dumps.hpp"
#include "nystrom/landmarks.hpp"

using namespace nystrom;
using namespace nystrom::test;

TEST_CASE("synth heavy-tailed: Student-t of any degrees of freedom, its variance nu / (nu - 2)") {
  // Above 32 degrees of freedom χ² is drawn as a gamma variable: --dof 2000000000 drew that many normals per
  // value and ran for hours. The sample variance of 4·2048·16 values against ν/(ν − 2): a standard error of
  // about 0.006 at ν = 40 (the gamma path) and 0.0055 at 10⁹ (nearly normal).
  TempDir dir("synth_dof");
  for (const auto& [dof, variance] : {std::pair{40, 40.0 / 38.0}, std::pair{1000000000, 1.0}}) {
    CAPTURE(dof);
    const auto path = dir / (std::to_string(dof) + ".h5");
    REQUIRE(run_cli({"synth", "-o", path, "--kind", "heavy-tailed", "--dof", std::to_string(dof), "--layers",
                     "1", "--heads", "4", "--tokens", "2048", "--dim", "16", "--precision", "double", "-q"})
                .status == 0);
    const auto dump = cli::inspect_dump(path);
    double sum = 0, squares = 0, count = 0;
    for (const auto& head : cli::read_layer_heads<double>(dump, dump.layers[0])) {
      sum += head.q.sum();
      squares += head.q.squaredNorm();
      count += double(head.q.size());
    }
    const double mean = sum / count;
    CHECK(std::abs(mean) < 0.01);
    CHECK(squares / count - mean * mean == doctest::Approx(variance).epsilon(0.03));
  }
}

TEST_CASE("synth writes the dump format, the reader gets back the same heads, attn is the exact softmax") {
  TempDir dir("synth");
  const auto path = dir / "g.h5";
  // Two float64 layers of low-rank (noise-free) tokens with attn; written twice below to check determinism.
  // `precision` spells the arithmetic: --precision double, or the deprecated alias --dtype float64.
  const auto synth_low_rank = [](const std::filesystem::path& out,
                                 const std::vector<std::string>& precision = {"--precision", "double"}) {
    std::vector<std::string> args = {"synth",       "-o",       out.string(),  "--kind", "gaussian,low-rank",
                                     "--layers",    "2",        "--batch",     "2",      "--heads",
                                     "3",           "--tokens", "24",          "--dim",  "5",
                                     "--value-dim", "4",        "--with-attn", "--seed", "7",
                                     "--rank",      "2",        "--noise",     "0",      "-q"};
    args.insert(args.end(), precision.begin(), precision.end());
    return run_cli(args);
  };
  const auto run = synth_low_rank(path);
  REQUIRE(run.status == 0);
  CHECK(run.err.empty());  // -q: no summary
  const auto dump = cli::inspect_dump(path);
  CHECK(dump.format_version == 1);
  CHECK(dump.source.find("synth") != std::string::npos);
  REQUIRE(dump.layers.size() == 2);
  const auto& layer = dump.layers[1];
  CHECK(layer.name == "01");
  CHECK(layer.batch == 2);
  CHECK(layer.heads == 3);
  CHECK(layer.tokens == 24);
  CHECK(layer.dim == 5);
  CHECK(layer.value_dim == 4);
  CHECK(layer.has_attention);
  CHECK(layer.dtype == "float64");
  CHECK(layer.scale == doctest::Approx(1 / std::sqrt(5.0)));
  const auto heads = cli::read_layer_heads<double>(dump, layer);
  REQUIRE(heads.size() == 6);
  // low-rank with zero noise: rank(Q) = 2 exactly.
  Eigen::JacobiSVD<Matrix<double>> svd(heads[4].q);
  CHECK(svd.singularValues()(2) < 1e-12 * svd.singularValues()(0));
  CHECK(svd.singularValues()(1) > 1e-3 * svd.singularValues()(0));
  // attn of head (b = 1, h = 1) against the softmax recomputed from q and k.
  const Matrix<double> attn = cli::read_attention<double>(dump, layer, 1, 1);
  const Matrix<double> logits = layer.scale * heads[4].q * heads[4].k.transpose();
  Matrix<double> softmax = (logits.colwise() - logits.rowwise().maxCoeff()).array().exp().matrix();
  softmax = softmax.array().colwise() / softmax.rowwise().sum().array();
  CHECK((attn - softmax).cwiseAbs().maxCoeff() < 1e-14);
  // Deterministic: the same seed gives the same data (here spelt with the deprecated --dtype float64),
  // another seed different data.
  const auto again = dir / "again.h5", other = dir / "other.h5";
  REQUIRE(synth_low_rank(again, {"--dtype", "float64"}).status == 0);
  CHECK(cli::inspect_dump(again).layers[1].dtype == "float64");
  REQUIRE(run_cli({"synth", "-o", other, "--tokens", "24", "--dim", "5", "--seed", "8", "--layers", "2"})
              .status == 0);
  const auto same =
      cli::read_layer_heads<double>(cli::inspect_dump(again), cli::inspect_dump(again).layers[1]);
  CHECK(same[4].q == heads[4].q);
  CHECK(same[5].v == heads[5].v);
  const auto first = cli::read_layer_heads<double>(dump, dump.layers[0]);
  const auto different =
      cli::read_layer_heads<double>(cli::inspect_dump(other), cli::inspect_dump(other).layers[0]);
  CHECK(first[0].q != different[0].q);
  // float32 dumps read back as float within float rounding of the float64 values.
  const auto f32 = dir / "f32.h5";
  REQUIRE(run_cli({"synth",       "-o",       f32,       "--kind", "gaussian,low-rank",
                   "--layers",    "2",        "--batch", "2",      "--heads",
                   "3",           "--tokens", "24",      "--dim",  "5",
                   "--value-dim", "4",        "--seed",  "7",      "--rank",
                   "2",           "--noise",  "0"})
              .status == 0);
  const auto f32_dump = cli::inspect_dump(f32);
  CHECK(f32_dump.layers[1].dtype == "float32");
  const auto as_float = cli::read_layer_heads<float>(f32_dump, f32_dump.layers[1]);
  CHECK((as_float[4].q.cast<double>() - heads[4].q).cwiseAbs().maxCoeff() <=
        1e-6 * heads[4].q.cwiseAbs().maxCoeff());
}

TEST_CASE(
    "synth kinds: block-constant tokens follow the segment-means partition, window fields carry the window") {
  TempDir dir("kinds");
  const auto path = dir / "k.h5";
  REQUIRE(run_cli({"synth",    "-o",    path,          "--kind",   "block-constant,window,heavy-tailed",
                   "--layers", "3",     "--heads",     "1",        "--tokens",
                   "30",       "--dim", "4",           "--blocks", "4",
                   "--window", "5x6",   "--value-dim", "0",        "--no-batch-axis"})
              .status == 0);
  const auto dump = cli::inspect_dump(path);
  REQUIRE(dump.layers.size() == 3);
  CHECK(dump.layers[0].rank == 3);
  CHECK(dump.layers[0].value_dim == 0);
  CHECK(dump.layers[1].window == std::array<Index, 2>{5, 6});
  CHECK(dump.layers[0].window == std::array<Index, 2>{0, 0});
  const auto blocks = cli::read_layer_heads<double>(dump, dump.layers[0]);
  // Segment means of m = 4 segments of the block-constant tokens are the block values themselves, and the
  // tokens take exactly 4 distinct values: rank(Q) = 4.
  const Matrix<double> means = segment_means<double>(blocks[0].q, 4);
  for (Index i = 0; i < 30; ++i) {
    const Index nearest = [&] {
      Index best = 0;
      (means.rowwise() - blocks[0].q.row(i)).rowwise().norm().minCoeff(&best);
      return best;
    }();
    CHECK((means.row(nearest) - blocks[0].q.row(i)).norm() < 1e-12);
  }
  const auto heavy = cli::read_layer_heads<double>(dump, dump.layers[2]);
  CHECK(heavy[0].q.allFinite());
  CHECK(run_cli({"info", path}).status == 0);
  CHECK(run_cli({"synth", "-o", dir / "bad.h5", "--kind", "window", "--tokens", "30"}).status == 2);
  CHECK(run_cli({"synth", "-o", dir / "bad.h5", "--kind", "window", "--tokens", "30", "--window", "4x7"})
            .status == 2);
  CHECK_FALSE(fs::exists(dir / "bad.h5"));
}

TEST_CASE(
    "malformed dumps: exit 2, a message naming file, group and dataset, no output, existing output intact") {
  TempDir dir("bad");
  const auto good = tiny_dump(dir, "good.h5");
  // An existing output of each subcommand (each replaces only its own kind of file).
  const std::map<std::string, std::string> existing = {{"sweep", dir / "existing_sweep.h5"},
                                                       {"spectrum", dir / "existing_spectrum.h5"}};
  for (const auto& [subcommand, path] : existing)
    REQUIRE(run_cli({subcommand, "-i", good, "-o", path, "--kernel", "exp", "--strategy", "step",
                     "--landmarks", "2", "-q"})
                .status == 0);
  const std::map<std::string, std::string> existing_bytes = {
      {"sweep", file_bytes(existing.at("sweep"))}, {"spectrum", file_bytes(existing.at("spectrum"))}};

  const std::vector<std::int64_t> dims{1, 2, 6, 3};
  struct Case {
    std::string name, expect;
    std::function<void(const std::string&)> make;
  };
  const std::vector<Case> cases = {
      {"missing", "no such file", [](const std::string&) {}},
      {"text", "not an HDF5 file", [](const std::string& p) { std::ofstream(p) << "q,k\n1,2\n"; }},
      {"no_q", "/layers/00: missing dataset 'q'",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) { write_tensor(g, "k", {1, 2, 6, 3}, d); });
       }},
      {"q_group", "/layers/00/q: is not a dataset",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           cli::create_group(g, "q");
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
       }},
      {"layers_dataset", "/layers is not a group",
       [](const std::string& p) {
         cli::Handle file = cli::create_file(p);
         cli::write_dump_header(file.get(), "test");
         write_tensor(file.get(), "layers", {1, 2, 6, 3}, std::vector<double>(36, 0.25));
       }},
      {"layer_dataset", "/layers/01: is not a group",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
         cli::Handle file = cli::open_file(p, true);
         write_tensor(file.get(), "layers/01", {1, 2, 6, 3}, std::vector<double>(36, 0.25));
       }},
      {"no_k", "/layers/00: missing dataset 'k'",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) { write_tensor(g, "q", {1, 2, 6, 3}, d); });
       }},
      {"shape", "/layers/00/k: shape [1, 2, 5, 3] does not match q",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 5, 3}, std::vector<double>(30, 0.5));
         });
       }},
      {"v_shape", "/layers/00/v: shape",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
           write_tensor(g, "v", {1, 1, 6, 3}, std::vector<double>(18, 0.5));
         });
       }},
      {"empty", "/layers/00/q: N·d = 0",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto&) {
           write_tensor(g, "q", {1, 2, 6, 0}, {});
           write_tensor(g, "k", {1, 2, 6, 0}, {});
         });
       }},
      {"rank", "/layers/00/q: rank 2",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {12, 3}, d);
           write_tensor(g, "k", {12, 3}, d);
         });
       }},
      {"nan", "/layers/00/k: non-finite value nan at [0, 1, 4, 2]",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           auto bad = d;
           bad[(1 * 6 + 4) * 3 + 2] = std::nan("");
           write_tensor(g, "k", {1, 2, 6, 3}, bad);
         });
       }},
      {"inf_v", "/layers/00/v: non-finite value inf",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
           auto bad = d;
           bad[5] = INFINITY;
           write_tensor(g, "v", {1, 2, 6, 3}, bad);
         });
       }},
      {"float16", "/layers/00/q: type float16, expected float32 or float64",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           // IEEE half precision: 1 sign, 5 exponent (bias 15) and 10 mantissa bits.
           cli::Handle half(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "H5Tcopy");
           REQUIRE(H5Tset_fields(half.get(), 15, 10, 5, 0, 10) >= 0);
           REQUIRE(H5Tset_size(half.get(), 2) >= 0);
           REQUIRE(H5Tset_ebias(half.get(), 15) >= 0);
           const hsize_t dims[4] = {1, 2, 6, 3};
           cli::Handle space(H5Screate_simple(4, dims, nullptr), H5Sclose, "H5Screate_simple");
           cli::Handle q(H5Dcreate2(g, "q", half.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                         H5Dclose, "H5Dcreate2");
           REQUIRE(H5Dwrite(q.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d.data()) >= 0);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
       }},
      // Links to nothing were "HDF5: open object v failed", exit 1.
      {"dangling_v", "/layers/00/v: is a link to nothing",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
           REQUIRE(H5Lcreate_soft("/nowhere", g, "v", H5P_DEFAULT, H5P_DEFAULT) >= 0);
         });
       }},
      {"external_layer", "/layers/01: is a link to nothing",
       [](const std::string& p) {
         write_bad_dump(p, [](hid_t g, auto& d) {
           write_tensor(g, "q", {1, 2, 6, 3}, d);
           write_tensor(g, "k", {1, 2, 6, 3}, d);
         });
         cli::Handle file = cli::open_file(p, true);
         REQUIRE(H5Lcreate_external("missing.h5", "/layers/00", file.get(), "layers/01", H5P_DEFAULT,
                                    H5P_DEFAULT) >= 0);
       }},
      {"version", "unknown format_version 2",
       [](const std::string& p) {
         write_bad_dump(
             p,
             [](hid_t g, auto& d) {
               write_tensor(g, "q", {1, 2, 6, 3}, d);
               write_tensor(g, "k", {1, 2, 6, 3}, d);
             },
             2);
       }},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const auto input = dir / (c.name + ".h5");
    c.make(input);
    for (const bool replace : {false, true}) {
      for (const std::string subcommand : {"sweep", "spectrum"}) {
        CAPTURE(subcommand);
        const std::string output = replace ? existing.at(subcommand) : dir / "new.h5";
        const auto run =
            run_cli({subcommand, "-i", input, "-o", output, "-q", "--landmarks", "2", "--strategy", "step"});
        CAPTURE(run.err);
        CHECK(run.status == 2);
        CHECK(run.err.find(input) != std::string::npos);
        CHECK(run.err.find(c.expect) != std::string::npos);
        CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
        CHECK_FALSE(fs::exists(dir / "new.h5"));
        CHECK_FALSE(fs::exists(output + ".partial"));
        for (const auto& [name, path] : existing) CHECK(file_bytes(path) == existing_bytes.at(name));
      }
    }
    {
      const auto info = run_cli({"info", input});
      CHECK(info.status == 2);
      CHECK(info.err.find(c.expect) != std::string::npos);
    }
  }
  // No leftover temporary files in the directory.
  for (const auto& entry : fs::directory_iterator(dir.path()))
    CHECK(entry.path().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("spectrum: N = 1 gives the 1x1 kernel itself on the dense and the matrix-free path") {
  TempDir dir("spectrum_one_token");
  const auto input = dir / "one.h5";
  const std::vector<double> q = {0.5, -1.25, 0.75, 2.0}, k = {1.5, 0.25, -0.5, 1.0};
  write_bad_dump(input, [&](hid_t g, auto&) {
    write_tensor(g, "q", {1, 1, 1, 4}, q);
    write_tensor(g, "k", {1, 1, 1, 4}, k);
    write_tensor(g, "v", {1, 1, 1, 4}, q);
  });
  // G = exp(s q·k) with the default scale s = 1/√d = 1/2; one segment-means landmark is the token itself, so
  // G̃ is the 2×2 matrix of that entry, of singular value twice it.
  double dot = 0;
  for (std::size_t i = 0; i < q.size(); ++i) dot += q[i] * k[i];
  const double entry = std::exp(0.5 * dot);
  // --memory 1 takes the matrix-free path, which asked Lanczos for N − 1 = 0 values (exit 2).
  for (const char* memory : {"4G", "1"}) {
    CAPTURE(memory);
    const auto output = dir / (std::string("spectrum") + memory + ".h5");
    const auto run = run_cli({"spectrum", "-i", input, "-o", output, "--memory", memory, "-q"});
    CAPTURE(run.err);
    REQUIRE(run.status == 0);
    const auto sv_g = read_doubles(output, "spectra/00/sv_G"),
               sv_ext = read_doubles(output, "spectra/00/sv_Gext");
    CHECK(sv_g.dims == std::vector<hsize_t>{1, 1, 1});
    CHECK(sv_g.values[0] == doctest::Approx(entry).epsilon(1e-12));
    CHECK(sv_ext.values[0] == doctest::Approx(2 * entry).epsilon(1e-12));
  }
}

TEST_CASE("spectrum --reference model refuses a bias row of -inf alone as sweep does, naming the head") {
  TempDir dir("spectrum_infinite_row");
  const std::size_t n = 16;
  // A dump whose bias is `row_two` throughout row 2.
  const auto dump_with_row_two = [&](const std::string& path, double row_two) {
    write_bad_dump(path, [&](hid_t g, auto&) {
      std::vector<double> tokens(n * 4);
      for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = std::sin(double(i));
      for (const char* name : {"q", "k", "v"}) write_tensor(g, name, {1, 1, n, 4}, tokens);
      std::vector<double> bias(n * n, 0.0);
      std::fill_n(bias.begin() + 2 * n, n, row_two);
      write_tensor(g, "bias", {1, n, n}, bias);
    });
  };
  const auto input = dir / "row.h5";
  dump_with_row_two(input, -INFINITY);  // the model's scores are -inf throughout row 2
  // --reference kernel does not read the bias: an existing spectrum to keep.
  const auto existing = dir / "spectrum.h5";
  REQUIRE(run_cli({"spectrum", "-i", input, "-o", existing, "-m", "2", "-q"}).status == 0);
  const auto before = file_bytes(existing);
  // spectrum said "dense_svd: matrix contains non-finite values (NaN or Inf)", naming neither file nor head.
  for (const std::string command : {"sweep", "spectrum"}) {
    CAPTURE(command);
    const auto output = command == "spectrum" ? existing : dir / "sweep.h5";
    const auto run = run_cli({command, "-i", input, "-o", output, "-m", "2", "--reference", "model", "-q"});
    CAPTURE(run.err);
    CHECK(run.status == 2);
    CHECK(run.err.find(input + ": /layers/00 batch 0 head 0: row 2 of bias + mask is -inf throughout") !=
          std::string::npos);
    CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  }
  // A finite row of -1e300 is -inf in float alone: the message says so, and double computes it.
  const auto finite = dir / "finite.h5";
  dump_with_row_two(finite, -1e300);
  const auto in_float = run_cli({"sweep", "-i", finite, "-o", dir / "sweep.h5", "-m", "2", "--reference",
                                 "model", "--precision", "float", "-q"});
  CHECK(in_float.status == 2);
  CHECK(in_float.err.find(
            "row 2 of bias + mask is -inf throughout (its softmax is undefined); in float, a bias "
            "or mask below -3.4e38 reads as -inf") != std::string::npos);
  CHECK(run_cli({"sweep", "-i", finite, "-o", dir / "sweep.h5", "-m", "2", "--reference", "model",
                 "--precision", "double", "-q"})
            .status == 0);
  fs::remove(dir / "sweep.h5");
  CHECK(file_bytes(existing) == before);
  CHECK_FALSE(fs::exists(dir / "sweep.h5"));
  CHECK_FALSE(fs::exists(dir / "sweep.h5.partial"));
  check_no_temporaries(dir);
}
