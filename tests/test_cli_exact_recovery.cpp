// End-to-end exact recovery (PnP-Nystra Corollary 2.2, docs/mathematics.md §3): heads written by `nystrom
// synth
// --kind block-constant` have tokens constant on the segment-means partition, so with m = blocks
// segment-means landmarks rank(G̃) = m, σ_{m+1}(G̃) = 0 and Ĝ = G. `nystrom sweep` (exact pseudoinverse) must
// report every such head with ‖G − Ĝ‖₂/‖G‖₂ ≤ 1e-10, σ_{m+1}(G̃) at the rounding floor and every bound finite,
// and `nystrom spectrum` must put σ_{m+1}(G̃) at that floor, over many seeds, sizes and block counts.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "cli_test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// One family of block-constant heads.
struct Family {
  Index n, d, blocks;
};

/// N ≥ 300 with even and uneven splits (517 = 11·47, 301 = 7·43); each family runs 5 seeds × 8 heads.
constexpr Family families[] = {{480, 12, 8}, {517, 5, 11}, {301, 16, 7}};
constexpr int seeds = 5, heads = 8;

/// The rounding floor of a singular value of the (N + m)-square G̃: (N + m)·eps·σ₁.
double rounding_floor(const Family& family, double sigma1) {
  return double(family.n + family.blocks) * std::numeric_limits<double>::epsilon() * sigma1;
}

}  // namespace

TEST_CASE(
    "block-constant heads: sweep recovers G to 1e-10 with finite bounds, spectrum puts σ_{m+1}(G̃) at "
    "the floor") {
  TempDir dir("exact_recovery");
  int rows_checked = 0;
  for (const Family& family : families) {
    const std::string m = std::to_string(family.blocks);
    for (int seed = 1; seed <= seeds; ++seed) {
      CAPTURE(family.n);
      CAPTURE(family.d);
      CAPTURE(family.blocks);
      CAPTURE(seed);
      const std::string dump = dir / "dump.h5", sweep = dir / "sweep.h5", spectrum = dir / "spectrum.h5";
      for (const auto& file : {dump, sweep, spectrum}) fs::remove(file);
      REQUIRE(run_cli({"synth",
                       "-o",
                       dump,
                       "--kind",
                       "block-constant",
                       "--layers",
                       "1",
                       "--heads",
                       std::to_string(heads),
                       "--tokens",
                       std::to_string(family.n),
                       "--dim",
                       std::to_string(family.d),
                       "--value-dim",
                       "3",
                       "--blocks",
                       m,
                       "--precision",
                       "double",
                       "--seed",
                       std::to_string(seed)})
                  .status == 0);
      const CliRun swept = run_cli({"sweep", "-i", dump, "-o", sweep, "--kernel", "exp", "--landmarks", m,
                                    "--strategy", "segment-means", "--pinv", "exact", "-q"});
      REQUIRE_MESSAGE(swept.status == 0, swept.err);
      const Table table = read_sweep(sweep);
      REQUIRE(table.rows.size() == std::size_t(heads));
      for (std::size_t r = 0; r < table.rows.size(); ++r) {
        CAPTURE(r);
        const double sigma1 = table.number(r, "sigma1_ext");
        CHECK(table.number(r, "relative_spectral_error") <= 1e-10);
        CHECK(table.number(r, "sigma_m1_ext") <= rounding_floor(family, sigma1));
        CHECK(table.number(r, "sigma_m_core") > 1e-8 * sigma1);
        for (const char* column :
             {"spectral_error", "frobenius_error", "output_relative_error", "output_max_error", "sigma1_ext",
              "sigma_m1_ext", "sigma_m_core", "bound_ratio", "theorem1_bound", "theorem2_bound",
              "theorem3_bound", "theorem3_k", "pinv_residual"}) {
          CAPTURE(column);
          CHECK(std::isfinite(table.number(r, column)));
        }
        for (const char* flag : {"theorem1_applies", "theorem2_applies", "theorem3_applies", "bounds_hold"}) {
          CAPTURE(flag);
          CHECK(table.number(r, flag) == 1);
        }
        ++rows_checked;
      }
      const CliRun spectra = run_cli({"spectrum", "-i", dump, "-o", spectrum, "--landmarks", m, "--strategy",
                                      "segment-means", "--top", std::to_string(family.blocks + 2), "-q"});
      REQUIRE_MESSAGE(spectra.status == 0, spectra.err);
      const Index k = family.blocks + 2;
      for (const char* name : {"spectra/00/sv_G", "spectra/00/sv_S", "spectra/00/sv_Gext"}) {
        CAPTURE(name);
        const Doubles sv = read_doubles(spectrum, name);
        REQUIRE(sv.dims == std::vector<hsize_t>{1, hsize_t(heads), hsize_t(k)});
        for (double value : sv.values) CHECK(std::isfinite(value));
        // G, S = D⁻¹G and G̃ all have rank ≤ blocks: σ_{blocks+1} of each lies at its rounding floor.
        for (int h = 0; h < heads; ++h) {
          const double* values = sv.values.data() + h * k;
          CHECK(values[family.blocks] <= rounding_floor(family, values[0]));
          CHECK(values[family.blocks + 1] <= rounding_floor(family, values[0]));
        }
      }
    }
  }
  CHECK(rows_checked == 3 * seeds * heads);
}

TEST_CASE("equal tokens on the matrix-free path: every method recovers G, no Lanczos failure") {
  // One block: every token of a head is the same, so G = c·11ᵀ has rank 1 and Ĝ = G; with --memory 1K every
  // norm is matrix-free Lanczos, which failed on these rank-1 and zero operators ("TridiagEigen: eigen
  // decomposition failed", exit 1) until the start of Spectra's Lanczos was watched (docs/mathematics.md
  // §7.1).
  TempDir dir("equal_tokens");
  const std::string dump = dir / "dump.h5", sweep = dir / "sweep.h5";
  REQUIRE(
      run_cli({"synth",   "-o",       dump,       "--kind",      "block-constant", "--layers", "1",
               "--heads", "2",        "--tokens", "300",         "--dim",          "8",        "--value-dim",
               "3",       "--blocks", "1",        "--precision", "double",         "--seed",   "1"})
          .status == 0);
  const CliRun swept = run_cli({"sweep",
                                "-i",
                                dump,
                                "-o",
                                sweep,
                                "--kernel",
                                "exp",
                                "--landmarks",
                                "1,4",
                                "--strategy",
                                "segment-means",
                                "--pinv",
                                "exact,razavi",
                                "--pinv-iters",
                                "6",
                                "--method",
                                "pnp-nystra,nystromformer,symmetric-nystrom",
                                "--memory",
                                "1K",
                                "-q"});
  REQUIRE_MESSAGE(swept.status == 0, swept.err);
  const Table table = read_sweep(sweep);
  REQUIRE(table.rows.size() == 2 * 2 * 2 * 3);
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    CAPTURE(r);
    CHECK(table.number(r, "matrix_free") == 1);
    // Symmetric Nyström inverts W + 10⁻⁶I (docs/mathematics.md §6): its Ĝ is G only to that shift.
    const bool shifted = table.text(r, "method") == "symmetric-nystrom";
    CHECK(table.number(r, "relative_spectral_error") <= (shifted ? 1e-5 : 1e-12));
    CHECK(table.number(r, "output_relative_error") <= (shifted ? 1e-8 : 1e-12));
  }
}
