#pragma once
/// @file arrays.hpp
/// Arrays in and out of the extension. Inputs are any CPU array nanobind's ndarray caster accepts (numpy
/// arrays, torch tensors through DLPack, ...) in float32 or float64. C-contiguous ones (numpy's and torch's
/// default) are read in place as batches of row-major heads (row_major_batch) by the functions that take
/// them (attention); otherwise they become the library's column-major matrices without a copy when their
/// layout is column-major already (Fortran order), else by one copy (a cache-blocked transpose for C order).
/// Outputs are numpy arrays of the inputs' dtype: single matrices through nanobind's Eigen caster (moved,
/// never copied), batches [..., N, dv] as one buffer whose N×dv blocks are column-major or row-major. Bad
/// arrays (another dtype or device, wrong rank, mismatched shapes) throw std::invalid_argument naming the
/// argument, which nanobind raises as ValueError.

#include <nanobind/eigen/dense.h>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "nystrom/batched.hpp"
#include "nystrom/error.hpp"
#include "nystrom/precision.hpp"
#include "nystrom/types.hpp"

namespace nystrom::python {

namespace nb = nanobind;

/// Any array: every dtype, device and layout (checked here, so that errors name the argument).
using Array = nb::ndarray<nb::ro>;

/// The dtype name of the two native precisions (nystrom/precision.hpp): "float32" or "float64".
const char* precision_name(Precision precision);

/// The precision of `array`; throws naming `name` for another dtype or a non-CPU array.
Precision precision_of(const Array& array, const std::string& name);

/// The common precision of several arrays; throws naming the first that differs from the first one.
Precision common_precision(std::initializer_list<std::pair<const Array*, const char*>> arrays);

/// Calls f(T{}) with T = float or double.
template <class F>
decltype(auto) with_scalar(Precision precision, F&& f) {
  if (precision == Precision::float32) return f(float{});
  return f(double{});
}

/// The shape of `array` as a vector.
std::vector<Index> shape_of(const Array& array);

/// A buffer of the calling thread, reused across calls: taken from a per-thread pool and given back on
/// destruction, keeping its capacity. A copy of a large input then costs no page faults: a fresh 256 KiB
/// block per call is returned to the system when freed and faulted in again by the next call, which measured
/// 70–130 µs per 1024×64 float32 input (against 11 µs for the copy itself). A thread keeps as many buffers as
/// it ever had in use at once, each as large as the largest it held.
template <class T>
class ScratchBuffer {
 public:
  explicit ScratchBuffer(std::size_t size);
  ~ScratchBuffer();
  ScratchBuffer(ScratchBuffer&& other) noexcept : buffer_(std::exchange(other.buffer_, {})) {}
  ScratchBuffer& operator=(ScratchBuffer&&) = delete;
  T* data() { return buffer_.data(); }

 private:
  std::vector<T> buffer_;
};

/// A 2-D array as a column-major matrix: a view of the caller's memory when the array is column-major with
/// unit row stride, else a copy in a ScratchBuffer. The array must outlive this object. Construction does not
/// touch Python, so it may run with the GIL released; destruction must happen on the constructing thread.
template <class T>
class MatrixArgument {
 public:
  /// Throws naming `name` unless the array is 2-D and of scalar T.
  MatrixArgument(const Array& array, const std::string& name);
  /// The block of rows × cols starting at `data` with element strides (row_stride, col_stride), copied unless
  /// row_stride is 1.
  MatrixArgument(const T* data, Index rows, Index cols, std::int64_t row_stride, std::int64_t col_stride);
  MatrixArgument(MatrixArgument&&) = default;
  ConstMatrixRef<T> ref() const {
    return Eigen::Map<const Matrix<T>, 0, Eigen::OuterStride<>>(data_, rows_, cols_,
                                                                Eigen::OuterStride<>(outer_));
  }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }

 private:
  void read(const T* data, std::int64_t row_stride, std::int64_t col_stride);

  std::optional<ScratchBuffer<T>> copy_;  ///< the copy, when the layout needs one
  const T* data_ = nullptr;               ///< the caller's column-major data or the copy
  Index rows_ = 0, cols_ = 0, outer_ = 1;
};

/// A stack of matrices [..., rows, cols] (leading dimensions flattened into `count`), each head read as a
/// MatrixArgument. A 2-D array is a stack of one with no leading dimensions.
template <class T>
class MatrixStack {
 public:
  /// Throws naming `name` unless the array has at least 2 dimensions and scalar T.
  MatrixStack(const Array& array, const std::string& name);
  Index count() const { return count_; }
  Index rows() const { return rows_; }
  Index cols() const { return cols_; }
  /// The leading dimensions (empty for a 2-D array).
  const std::vector<Index>& leading() const { return leading_; }
  /// Matrix `index` of the stack (a view or a copy, see MatrixArgument).
  MatrixArgument<T> matrix(Index index) const;

 private:
  const T* data_ = nullptr;
  std::vector<Index> leading_;
  std::vector<std::int64_t> leading_strides_;
  Index count_ = 1, rows_ = 0, cols_ = 0;
  std::int64_t row_stride_ = 0, col_stride_ = 0;
};

/// The array [..., N, dim] as a batch of row-major N×dim heads over its own memory (count() = the product of
/// the leading dimensions, one head per batch entry) when it is C-contiguous, non-empty and of scalar T;
/// nullopt otherwise. Dimensions of size 1 may have any stride.
template <class T>
std::optional<BatchView<const T>> row_major_batch(const Array& array);

/// Throws naming the arrays unless their leading dimensions agree.
void require_same_leading(const std::vector<Index>& a, const std::string& a_name, const std::vector<Index>& b,
                          const std::string& b_name);

/// The `out` argument of a function whose result is the batch [leading..., rows, cols] of T, as a row-major
/// BatchView over the caller's memory (one head per matrix): a writable, C-contiguous CPU array of exactly
/// that shape and dtype T (never converted), overlapping none of `inputs` (read while it is written). Throws
/// naming what differs. The view is valid while `out` lives.
template <class T>
BatchView<T> output_batch(nb::handle out, const std::vector<Index>& shape,
                          std::initializer_list<std::pair<const Array*, const char*>> inputs);

/// C-ordered `data` of shape [..., H, rows, cols] as a batch of row-major heads, one per matrix: H the last
/// leading dimension (1 without one), B the product of the others, so an error names head (b, h) of a
/// [B, H, N, d] array.
template <class T>
BatchView<T> row_major_heads(T* data, const std::vector<Index>& shape) {
  const std::size_t lead = shape.size() - 2;
  const Index heads = lead > 0 ? shape[lead - 1] : 1;
  const Index count =
      std::accumulate(shape.begin(), shape.begin() + std::ptrdiff_t(lead), Index{1}, std::multiplies<>());
  return {data, heads > 0 ? count / heads : 0, heads, shape[lead], shape[lead + 1]};
}

/// A batch of `count` rows × cols matrices in one buffer, returned to Python as a numpy array of shape
/// [leading..., rows, cols] (each matrix column-major, or row-major so that the array is C-contiguous, the
/// matrices one after the other).
template <class T>
class MatrixBatch {
 public:
  MatrixBatch(std::vector<Index> leading, Index rows, Index cols, bool row_major = false);
  ~MatrixBatch();
  MatrixBatch(const MatrixBatch&) = delete;
  MatrixBatch& operator=(const MatrixBatch&) = delete;
  /// Writes matrix `index` (rows × cols) of a column-major batch; may run with the GIL released, from any
  /// thread.
  void set(Index index, const ConstMatrixRef<T>& matrix);
  /// Matrix `index` of a column-major batch, to be written in place; may run with the GIL released.
  Eigen::Map<Matrix<T>> matrix(Index index) const { return {data_ + index * rows_ * cols_, rows_, cols_}; }
  /// The buffer of a row-major batch as a BatchView (row_major_heads), to be written in place.
  BatchView<T> view() const {
    std::vector<Index> shape = leading_;
    shape.insert(shape.end(), {rows_, cols_});
    return row_major_heads(data_, shape);
  }
  /// The numpy array owning the buffer (needs the GIL; call once).
  nb::object release_to_numpy();

 private:
  std::vector<Index> leading_;
  Index rows_, cols_, count_;
  bool row_major_;
  T* data_;
};

/// A matrix or vector returned to Python: moved into a numpy array by nanobind's Eigen caster.
template <class EigenType>
nb::object to_numpy(EigenType&& matrix) {
  static_assert(!std::is_lvalue_reference_v<EigenType>, "to_numpy takes the matrix over");
  return nb::cast(std::move(matrix), nb::rv_policy::move);
}

/// A read-only numpy view of a stored matrix or vector, kept alive by `owner` (the Python object holding it).
template <class Derived>
nb::object view_of(const Eigen::PlainObjectBase<Derived>& matrix, nb::handle owner) {
  using T = typename Derived::Scalar;
  const std::size_t shape[2] = {std::size_t(matrix.rows()), std::size_t(matrix.cols())};
  const std::int64_t strides[2] = {1, std::int64_t(matrix.rows())};
  const std::size_t ndim = Derived::IsVectorAtCompileTime ? 1 : 2;
  return nb::ndarray<nb::numpy, const T>(matrix.data(), ndim, shape, owner, strides).cast();
}

/// A 1-D array of float32 or float64 values (any stride) as a vector of doubles (a copy); throws naming
/// `name` for another rank, dtype or device.
Vector<double> double_vector(const Array& array, const std::string& name);

/// Indices as a new int64 numpy array.
nb::object index_array(const std::vector<Index>& indices);

}  // namespace nystrom::python
