// Writes inputs, the random matrices and this library's outputs for the cross-checks against the PyPI
// packages (tests/python/crosscheck_*.py, run by ctest after this test). One directory per case under
// <build>/crosscheck/<case>_<dtype>/: meta.txt (key = value lines) and one text matrix per file, written with
// enough digits to round-trip the scalar type exactly.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "nystrom/linformer.hpp"
#include "nystrom/nystromformer.hpp"
#include "nystrom/performer.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

namespace fs = std::filesystem;

template <class Derived>
void write_matrix(const fs::path& path, const Eigen::MatrixBase<Derived>& a) {
  std::ofstream out(path);
  out.precision(std::numeric_limits<typename Derived::Scalar>::max_digits10);
  for (Index i = 0; i < a.rows(); ++i) {
    for (Index j = 0; j < a.cols(); ++j) out << (j ? " " : "") << a(i, j);
    out << '\n';
  }
  REQUIRE(out.good());
}

template <class T>
fs::path case_directory(const std::string& name) {
  const fs::path dir =
      fs::path(NYSTROM_BINARY_DIR) / "crosscheck" / (name + (sizeof(T) == 4 ? "_float32" : "_float64"));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// One head's inputs and this library's output: q_<h>.txt, k_<h>.txt, v_<h>.txt, out_<h>.txt.
template <class T>
void write_head(const fs::path& dir, int head, const Matrix<T>& q, const Matrix<T>& k, const Matrix<T>& v,
                const Matrix<T>& out) {
  const std::string suffix = "_" + std::to_string(head) + ".txt";
  write_matrix(dir / ("q" + suffix), q);
  write_matrix(dir / ("k" + suffix), k);
  write_matrix(dir / ("v" + suffix), v);
  write_matrix(dir / ("out" + suffix), out);
}

void write_meta(const fs::path& dir, const std::string& lines) {
  std::ofstream(dir / "meta.txt") << lines;
}

/// Nyströmformer over `heads` heads with the package's batch-wide α and (when N % m ≠ 0) its front padding.
template <class T>
void dump_nystromformer(const std::string& name, Index n, Index m, int heads) {
  const Index d = 16;
  const double scale = 1 / std::sqrt(double(d));
  const fs::path dir = case_directory<T>(name);
  NystromformerOptions options;
  options.landmarks = m;
  options.front_padding = true;
  options.pinv = {PinvMethod::razavi, 6};
  std::vector<Matrix<T>> q, k, v, cores;
  for (int h = 0; h < heads; ++h) {
    q.push_back(random_matrix<T>(n, d, 100 + 3 * h));
    k.push_back(random_matrix<T>(n, d, 101 + 3 * h));
    v.push_back(random_matrix<T>(n, d, 102 + 3 * h));
    cores.push_back(nystromformer_core<T>(q[h], k[h], scale, options));
  }
  options.pinv.alpha = nystromformer_batch_alpha<T>(cores);
  for (int h = 0; h < heads; ++h) {
    const auto result = nystromformer_attention<T>(q[h], k[h], v[h], scale, options);
    write_head<T>(dir, h, q[h], k[h], v[h], result.output);
  }
  write_meta(dir, describe("heads = ", heads, "\nlandmarks = ", m, "\npinv_iterations = 6\n"));
}

template <class T>
void dump_performer() {
  const Index n = 100, d = 16, r = 40;
  const fs::path dir = case_directory<T>("performer");
  const Matrix<T> q = random_matrix<T>(n, d, 200), k = random_matrix<T>(n, d, 201),
                  v = random_matrix<T>(n, d, 202);
  PerformerOptions options;
  // Ω is drawn here and stored in T, so both sides use the same numbers.
  options.projection = performer_projection(r, d, 203).template cast<T>().template cast<double>();
  options.feature_epsilon = 1e-4;  // the package's softmax_kernel eps
  const auto result = performer_attention<T>(q, k, v, 1 / std::sqrt(double(d)), options);
  write_head<T>(dir, 0, q, k, v, result.output);
  write_matrix(dir / "projection.txt", options.projection.template cast<T>());
  write_meta(dir, describe("heads = 1\nfeatures = ", r, "\n"));
}

template <class T>
void dump_linformer() {
  const Index n = 100, d = 16, projected = 24;
  const fs::path dir = case_directory<T>("linformer");
  const Matrix<T> q = random_matrix<T>(n, d, 300), k = random_matrix<T>(n, d, 301),
                  v = random_matrix<T>(n, d, 302);
  const auto drawn = linformer_projections(projected, n, 303);
  LinformerOptions options;
  options.projected = projected;
  options.e = drawn.e.template cast<T>().template cast<double>();
  options.f = drawn.f.template cast<T>().template cast<double>();
  const auto result = linformer_attention<T>(q, k, v, 1 / std::sqrt(double(d)), options);
  write_head<T>(dir, 0, q, k, v, result.output);
  write_matrix(dir / "e.txt", options.e.template cast<T>());
  write_matrix(dir / "f.txt", options.f.template cast<T>());
  write_meta(dir, describe("heads = 1\nprojected = ", projected, "\n"));
}

}  // namespace

TEST_CASE_TEMPLATE("cross-check dump: nystromformer, performer, linformer inputs and outputs", T, float,
                   double) {
  dump_nystromformer<T>("nystromformer", 128, 16, 2);      // N % m = 0: no padding
  dump_nystromformer<T>("nystromformer_pad", 100, 16, 3);  // N % m = 4: the package's 12 zero tokens in front
  dump_performer<T>();
  dump_linformer<T>();
}
