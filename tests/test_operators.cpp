#include <doctest/doctest.h>

#include "nystrom/operators.hpp"
#include "test_support.hpp"

using namespace nystrom;
using namespace nystrom::test;

namespace {

/// y = A x and y = Aᵀx through an operator's products.
template <class Op, class T = typename Op::Scalar>
Vector<T> forward(const Op& op, const Vector<T>& x) {
  Vector<T> y(op.rows());
  op.perform_op(x.data(), y.data());
  return y;
}
template <class Op, class T = typename Op::Scalar>
Vector<T> backward(const Op& op, const Vector<T>& x) {
  Vector<T> y(op.cols());
  op.perform_transpose_op(x.data(), y.data());
  return y;
}

}  // namespace

TEST_CASE_TEMPLATE("DenseOperator products and its one-pass Gram products equal dense products", T, float,
                   double) {
  for (auto [rows, cols] : {std::pair<Index, Index>{300, 170}, {170, 300}, {1, 5}, {5000, 7}}) {
    CAPTURE(rows);
    CAPTURE(cols);
    const Matrix<T> A = random_matrix<T>(rows, cols, 1);
    const Vector<T> x = random_matrix<T>(cols, 1, 2), w = random_matrix<T>(rows, 1, 3);
    const Vector<T> s = random_matrix<T>(rows, 1, 4), t = random_matrix<T>(cols, 1, 5);
    const DenseOperator<T> op(A);
    CHECK(relative_difference(forward(op, x), A * x) <= tolerance<T>(cols));
    CHECK(relative_difference(backward(op, w), A.transpose() * w) <= tolerance<T>(rows));
    const Matrix<double> Ad = A.template cast<double>();
    const Vector<double> xd = x.template cast<double>(), wd = w.template cast<double>();
    Vector<T> outer(rows), inner(cols);
    op.perform_outer_gram_op(w.data(), outer.data());
    CHECK(relative_difference(outer, Ad * (Ad.transpose() * wd)) <= tolerance<T>(rows * cols));
    op.perform_inner_gram_op(x.data(), inner.data());
    CHECK(relative_difference(inner, Ad.transpose() * (Ad * xd)) <= tolerance<T>(rows * cols));
    // Fused with a subtraction: r = A x − s, y = Aᵀr and r = Aᵀw − t, y = A r.
    const Vector<double> r_inner = Ad * xd - s.template cast<double>();
    const Vector<double> r_outer = Ad.transpose() * wd - t.template cast<double>();
    Vector<T> residual_inner(rows), residual_outer(cols);
    op.perform_inner_gram_residual_op(x.data(), s.data(), residual_inner.data(), inner.data());
    op.perform_outer_gram_residual_op(w.data(), t.data(), residual_outer.data(), outer.data());
    CHECK(relative_difference(residual_inner, r_inner) <= tolerance<T>(cols) * 10);
    CHECK(relative_difference(inner, Ad.transpose() * r_inner) <= tolerance<T>(rows * cols) * 10);
    CHECK(relative_difference(residual_outer, r_outer) <= tolerance<T>(rows) * 10);
    CHECK(relative_difference(outer, Ad * r_outer) <= tolerance<T>(rows * cols) * 10);
  }
}

TEST_CASE("DenseOperator products above parallel_work agree on one and two threads, to the bit") {
  const Index rows = 2100, cols = 2050;  // 4.3M multiply-adds per product: threaded over panels
  REQUIRE(double(rows) * double(cols) > detail::parallel_work);
  const Matrix<double> A = random_matrix<double>(rows, cols, 41);
  const Vector<double> x = random_matrix<double>(cols, 1, 42), w = random_matrix<double>(rows, 1, 43);
  const DenseOperator<double> op(A);
  const int before = threads();
  // The Gram products sum over panels in a fixed order of groups (detail::reduction_groups): the same bits on
  // one thread and, run after run, on two.
  Vector<double> one_thread_gram, one_thread_inner;
  for (int count : {1, 2, 2, 2}) {
    CAPTURE(count);
    set_threads(count);
    CHECK(relative_difference(forward(op, x), A * x) <= tolerance<double>(cols));
    CHECK(relative_difference(backward(op, w), A.transpose() * w) <= tolerance<double>(rows));
    Vector<double> gram(rows), inner(cols);
    op.perform_outer_gram_op(w.data(), gram.data());
    CHECK(relative_difference(gram, A * (A.transpose() * w)) <= tolerance<double>(rows * cols));
    op.perform_inner_gram_op(x.data(), inner.data());
    CHECK(relative_difference(inner, A.transpose() * (A * x)) <= tolerance<double>(rows * cols));
    if (count == 1) {
      one_thread_gram = gram;
      one_thread_inner = inner;
    }
    CHECK(gram == one_thread_gram);
    CHECK(inner == one_thread_inner);
  }
  set_threads(before);
}

TEST_CASE_TEMPLATE("KernelOperator products equal dense kernel products, panel sizes included", T, float,
                   double) {
  const Index rows = 173, cols = 131, d = 6;
  const Matrix<T> X = random_matrix<T>(rows, d, 11, 0.6), Y = random_matrix<T>(cols, d, 12, 0.6);
  const Vector<T> x = random_matrix<T>(cols, 1, 13), w = random_matrix<T>(rows, 1, 14);
  for (const Kernel& kernel : {Kernel::exponential(0.4), Kernel::laplacian(4.0), Kernel::gaussian(1.5)}) {
    for (Index panel : {1, 16, 256}) {
      CAPTURE(kernel.label());
      CAPTURE(panel);
      const KernelOperator<T> op(X, Y, kernel, panel);
      const Matrix<double> G = naive_kernel<T>(X, Y, kernel).template cast<double>();
      CHECK(relative_difference(forward(op, x), G * x.template cast<double>()) <= tolerance<T>(cols * d));
      CHECK(relative_difference(backward(op, w), G.transpose() * w.template cast<double>()) <=
            tolerance<T>(rows * d));
      Vector<T> gram(cols);
      op.perform_inner_gram_op(x.data(), gram.data());
      CHECK(relative_difference(gram, G.transpose() * (G * x.template cast<double>())) <=
            tolerance<T>(rows * cols * d));
    }
  }
}

TEST_CASE_TEMPLATE("DifferenceOperator and NystromOperator equal G − Ĝ", T, float, double) {
  const Index n = 120, d = 5;
  const Matrix<T> Q = random_matrix<T>(n, d, 21), K = random_matrix<T>(n, d, 22);
  NystromOptions options;
  options.kernel = Kernel::exponential(0.4);
  options.landmarks.count = 6;
  const auto f = generalized_nystrom<T>(Q, K, options);
  const KernelOperator<T> g(Q, K, options.kernel, 32);
  const NystromOperator<T> approximation(f);
  const DifferenceOperator<KernelOperator<T>, NystromOperator<T>> error(g, approximation);
  const Matrix<double> E = (naive_kernel<T>(Q, K, options.kernel) - f.dense()).template cast<double>();
  const Vector<T> x = random_matrix<T>(n, 1, 23);
  const double scale = naive_kernel<T>(Q, K, options.kernel).template cast<double>().norm() / E.norm();
  CHECK(relative_difference(forward(error, x), E * x.template cast<double>()) <= tolerance<T>(n * d) * scale);
  CHECK(relative_difference(backward(error, x), E.transpose() * x.template cast<double>()) <=
        tolerance<T>(n * d) * scale);
  // A stored G: the fused Gram products EᵀE x and EEᵀx read G once and equal the dense ones.
  const Matrix<T> stored = naive_kernel<T>(Q, K, options.kernel);
  const DenseOperator<T> g_stored(stored);
  const DifferenceOperator<DenseOperator<T>, NystromOperator<T>> stored_error(g_stored, approximation);
  static_assert(detail::HasInnerGram<decltype(stored_error)> && detail::HasOuterGram<decltype(stored_error)>);
  Vector<T> gram(n);
  stored_error.perform_inner_gram_op(x.data(), gram.data());
  CHECK(relative_difference(gram, E.transpose() * (E * x.template cast<double>())) <=
        tolerance<T>(n * n) * scale * scale);
  stored_error.perform_outer_gram_op(x.data(), gram.data());
  CHECK(relative_difference(gram, E * (E.transpose() * x.template cast<double>())) <=
        tolerance<T>(n * n) * scale * scale);
  const Matrix<T> other(n, n + 1);
  const DenseOperator<T> wrong(other);
  CHECK(throws_naming([&] { DifferenceOperator<KernelOperator<T>, DenseOperator<T>>(g, wrong); }, "121"));
}

TEST_CASE("extended_kernel_operator is κ of Q̄ stacked on Q and K̄ stacked on K") {
  const Index n = 50, d = 4, m = 5;
  const Matrix<double> Q = random_matrix<double>(n, d, 31), K = random_matrix<double>(n, d, 32);
  Landmarks<double> marks;
  marks.q = random_matrix<double>(m, d, 33);
  marks.k = random_matrix<double>(m, d, 34);
  const Kernel kernel = Kernel::laplacian(2.0);
  const KernelOperator<double> op = extended_kernel_operator<double>(Q, K, marks, kernel, 7);
  REQUIRE(op.rows() == n + m);
  Matrix<double> X(n + m, d), Y(n + m, d);
  X << marks.q, Q;
  Y << marks.k, K;
  const Matrix<double> G = naive_kernel<double>(X, Y, kernel);
  const Vector<double> x = random_matrix<double>(n + m, 1, 35);
  CHECK(relative_difference(forward(op, x), G * x) <= tolerance<double>(n * d));
  CHECK(throws_naming(
      [] { KernelOperator<double>(Matrix<double>(3, 2), Matrix<double>(3, 4), Kernel::exponential(1)); },
      "d = 2"));
}
