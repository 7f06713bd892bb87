#include "arrays.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>

namespace nystrom::python {

const char* precision_name(Precision precision) {
  return precision == Precision::float32 ? "float32" : "float64";
}

namespace {

std::string dtype_name(const nb::dlpack::dtype& dtype) {
  const int bits = dtype.bits;
  switch (static_cast<nb::dlpack::dtype_code>(dtype.code)) {
    case nb::dlpack::dtype_code::Int:
      return describe("int", bits);
    case nb::dlpack::dtype_code::UInt:
      return describe("uint", bits);
    case nb::dlpack::dtype_code::Float:
      return describe("float", bits);
    case nb::dlpack::dtype_code::Bfloat:
      return describe("bfloat", bits);
    case nb::dlpack::dtype_code::Complex:
      return describe("complex", bits);
    case nb::dlpack::dtype_code::Bool:
      return "bool";
    default:
      return describe("DLPack type code ", int(dtype.code), " of ", bits, " bits");
  }
}

// Eigen's SIMD packet of T (__m512 and the like) as a template argument drops its alignment attributes, which
// is harmless here: packets are only loaded and stored unaligned.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"

/// dst (rows × cols, column-major, leading dimension rows) = the row-major block at src (row stride
/// `src_stride` elements), transposed in square blocks of one SIMD packet per row (16×16 floats with AVX-512)
/// by Eigen's in-register packet transpose: about twice as fast as an element loop (1024×64 floats: 11 µs
/// against 26 µs).
template <class T>
void transpose_rows_to_columns(const T* src, std::int64_t src_stride, Index rows, Index cols, T* dst) {
  using Packet = typename Eigen::internal::packet_traits<T>::type;
  constexpr Index size = Eigen::internal::unpacket_traits<Packet>::size;
  Index r0 = 0;
  for (; r0 + size <= rows; r0 += size) {
    Index c0 = 0;
    for (; c0 + size <= cols; c0 += size) {
      Eigen::internal::PacketBlock<Packet, size> block;
      for (Index i = 0; i < size; ++i)
        block.packet[i] = Eigen::internal::ploadu<Packet>(src + (r0 + i) * src_stride + c0);
      Eigen::internal::ptranspose(block);
      for (Index j = 0; j < size; ++j) Eigen::internal::pstoreu(dst + (c0 + j) * rows + r0, block.packet[j]);
    }
    for (Index c = c0; c < cols; ++c)
      for (Index i = 0; i < size; ++i) dst[c * rows + r0 + i] = src[(r0 + i) * src_stride + c];
  }
  for (Index r = r0; r < rows; ++r)
    for (Index c = 0; c < cols; ++c) dst[c * rows + r] = src[r * src_stride + c];
}

#pragma GCC diagnostic pop

/// The calling thread's free scratch buffers of T.
template <class T>
std::vector<std::vector<T>>& scratch_pool() {
  thread_local std::vector<std::vector<T>> pool;
  return pool;
}

}  // namespace

Precision precision_of(const Array& array, const std::string& name) {
  require(array.device_type() == nb::device::cpu::value, name,
          " is on a device other than the CPU (device type ", array.device_type(),
          "); nystrom computes on CPU arrays (move it with .cpu())");
  const auto dtype = array.dtype();
  if (dtype == nb::dtype<float>()) return Precision::float32;
  if (dtype == nb::dtype<double>()) return Precision::float64;
  throw std::invalid_argument(
      describe(name, " has dtype ", dtype_name(dtype), "; expected float32 or float64"));
}

Precision common_precision(std::initializer_list<std::pair<const Array*, const char*>> arrays) {
  const auto& [first, first_name] = *arrays.begin();
  const Precision precision = precision_of(*first, first_name);
  for (const auto& [array, name] : arrays) {
    const Precision other = precision_of(*array, name);
    require(other == precision, name, " is ", precision_name(other), " but ", first_name, " is ",
            precision_name(precision), "; pass arrays of one dtype");
  }
  return precision;
}

std::vector<Index> shape_of(const Array& array) {
  std::vector<Index> shape(array.ndim());
  for (std::size_t i = 0; i < array.ndim(); ++i) shape[i] = Index(array.shape(i));
  return shape;
}

namespace {

std::string shape_text(const std::vector<Index>& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + (shape.size() == 1 ? ",)" : ")");
}

template <class T>
void require_scalar(const Array& array, const std::string& name) {
  require(array.dtype() == nb::dtype<T>(), name, " has dtype ", dtype_name(array.dtype()), ", expected ",
          precision_name(sizeof(T) == 4 ? Precision::float32 : Precision::float64));
}

}  // namespace

template <class T>
ScratchBuffer<T>::ScratchBuffer(std::size_t size) {
  auto& pool = scratch_pool<T>();
  if (!pool.empty()) {
    buffer_ = std::move(pool.back());
    pool.pop_back();
  }
  buffer_.resize(size);
}

template <class T>
ScratchBuffer<T>::~ScratchBuffer() {
  if (buffer_.capacity() > 0) scratch_pool<T>().push_back(std::move(buffer_));
}

template <class T>
MatrixArgument<T>::MatrixArgument(const Array& array, const std::string& name) {
  require(array.ndim() == 2, name, " has shape ", shape_text(shape_of(array)), "; expected a matrix (2-D)");
  require_scalar<T>(array, name);
  rows_ = Index(array.shape(0));
  cols_ = Index(array.shape(1));
  read(static_cast<const T*>(array.data()), array.stride(0), array.stride(1));
}

template <class T>
MatrixArgument<T>::MatrixArgument(const T* data, Index rows, Index cols, std::int64_t row_stride,
                                  std::int64_t col_stride)
    : rows_(rows), cols_(cols) {
  read(data, row_stride, col_stride);
}

template <class T>
void MatrixArgument<T>::read(const T* data, std::int64_t row_stride, std::int64_t col_stride) {
  if (row_stride == 1 && col_stride >= rows_) {  // column-major: a view
    data_ = data;
    outer_ = std::max<std::int64_t>(col_stride, 1);
    return;
  }
  T* copy = copy_.emplace(std::size_t(rows_ * cols_)).data();
  if (col_stride == 1 && row_stride >= 0) {
    transpose_rows_to_columns(data, row_stride, rows_, cols_, copy);
  } else {
    for (Index c = 0; c < cols_; ++c)
      for (Index r = 0; r < rows_; ++r) copy[c * rows_ + r] = data[r * row_stride + c * col_stride];
  }
  data_ = copy;
  outer_ = std::max<Index>(rows_, 1);
}

template <class T>
MatrixStack<T>::MatrixStack(const Array& array, const std::string& name) {
  const std::vector<Index> shape = shape_of(array);
  require(shape.size() >= 2, name, " has shape ", shape_text(shape), "; expected [..., N, d] (at least 2-D)");
  require_scalar<T>(array, name);
  data_ = static_cast<const T*>(array.data());
  const std::size_t lead = shape.size() - 2;
  leading_.assign(shape.begin(), shape.begin() + lead);
  for (std::size_t i = 0; i < lead; ++i) leading_strides_.push_back(array.stride(i));
  count_ = std::accumulate(leading_.begin(), leading_.end(), Index{1}, std::multiplies<>());
  rows_ = shape[lead];
  cols_ = shape[lead + 1];
  row_stride_ = array.stride(lead);
  col_stride_ = array.stride(lead + 1);
}

template <class T>
MatrixArgument<T> MatrixStack<T>::matrix(Index index) const {
  std::int64_t offset = 0;
  for (std::size_t i = leading_.size(); i-- > 0;) {
    offset += (index % leading_[i]) * leading_strides_[i];
    index /= leading_[i];
  }
  return MatrixArgument<T>(data_ + offset, rows_, cols_, row_stride_, col_stride_);
}

namespace {

/// The first dimension, from the last, whose stride breaks C order in `array` of shape `shape`, with the
/// stride C order expects there; nullopt when the array is C-contiguous (dimensions of size 1 may have any
/// stride).
template <class A>
std::optional<std::pair<std::size_t, std::int64_t>> c_order_break(const A& array,
                                                                  const std::vector<Index>& shape) {
  std::int64_t contiguous = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && array.stride(i) != contiguous) return std::pair{i, contiguous};
    contiguous *= shape[i];
  }
  return std::nullopt;
}

/// The addresses [first, last) that an array's elements span; {0, 0} for an empty array.
template <class A>
std::pair<std::uintptr_t, std::uintptr_t> address_span(const A& array) {
  const auto item = std::int64_t(array.itemsize());
  std::int64_t low = 0, high = item;
  for (std::size_t i = 0; i < array.ndim(); ++i) {
    if (array.shape(i) == 0) return {0, 0};
    const std::int64_t reach = (std::int64_t(array.shape(i)) - 1) * array.stride(i) * item;
    (reach < 0 ? low : high) += reach;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(array.data());
  return {base + std::uintptr_t(low), base + std::uintptr_t(high)};
}

}  // namespace

template <class T>
std::optional<BatchView<const T>> row_major_batch(const Array& array) {
  const std::vector<Index> shape = shape_of(array);
  if (shape.size() < 2 || array.dtype() != nb::dtype<T>() || array.size() == 0 || c_order_break(array, shape))
    return std::nullopt;
  return row_major_heads(static_cast<const T*>(array.data()), shape);
}

template <class T>
BatchView<T> output_batch(nb::handle out, const std::vector<Index>& shape,
                          std::initializer_list<std::pair<const Array*, const char*>> inputs) {
  nb::ndarray<> array;
  require(nb::try_cast(out, array, false), "out (type ", nb::type_name(out.type()).c_str(),
          ") is not a writable array (numpy arrays in native byte order and CPU torch tensors are; read-only "
          "and big-endian ones are not)");
  require(array.device_type() == nb::device::cpu::value, "out is on a device other than the CPU");
  require(!nb::hasattr(out, "requires_grad") || !nb::cast<bool>(out.attr("requires_grad")),
          "out requires grad; nystrom computes no gradients, so it writes only into tensors that do not");
  require(!nb::hasattr(out, "is_neg") || !nb::cast<bool>(out.attr("is_neg")()),
          "out has torch's negative bit set (a lazily negated view, which reads its memory negated); pass a "
          "tensor without it (out.resolve_neg() is a new one)");
  require(array.dtype() == nb::dtype<T>(), "out has dtype ", dtype_name(array.dtype()), " but the output is ",
          precision_name(sizeof(T) == 4 ? Precision::float32 : Precision::float64), " (q's dtype)");
  const std::vector<Index> out_shape = shape_of(Array(array));
  require(out_shape == shape, "out has shape ", shape_text(out_shape), " but the output is ",
          shape_text(shape));
  if (const auto broken = array.size() > 0 ? c_order_break(array, shape) : std::nullopt)
    throw std::invalid_argument(describe("out is not C-contiguous (its dimension ", broken->first,
                                         " has stride ", array.stride(broken->first), ", expected ",
                                         broken->second, ")"));
  const auto [first, last] = address_span(array);
  for (const auto& [input, name] : inputs) {
    const auto [input_first, input_last] = address_span(*input);
    require(last <= input_first || input_last <= first, "out overlaps ", name,
            ", which is read while out is written; pass a separate array");
  }
  return row_major_heads(static_cast<T*>(array.data()), shape);
}

void require_same_leading(const std::vector<Index>& a, const std::string& a_name, const std::vector<Index>& b,
                          const std::string& b_name) {
  require(a == b, b_name, " has leading dimensions ", shape_text(b), " but ", a_name, " has ", shape_text(a),
          "; they must be equal (no broadcasting)");
}

namespace {

/// Memory for count × rows × cols values of T, freed by std::free; std::bad_alloc where the size overflows
/// (the n×p kernel_matrix of 2³¹ tokens in float32 has 2⁶⁴ bytes, which wrapped to 0). Blocks of 4 MiB and
/// more are 2 MiB-aligned and advised to the kernel as transparent huge pages, as numpy's allocator does: the
/// 25,600 faults of 4 KiB pages on the first write of a 64×6×1024×64 float32 output (100 MB) made a
/// PnP-Nystra call 1.45× slower (129 ms against 89).
template <class T>
T* allocate_output(Index count, Index rows, Index cols) {
  constexpr std::size_t huge_page = std::size_t(2) << 20;
  std::size_t bytes = sizeof(T);
  for (const Index factor : {count, rows, cols})
    if (__builtin_mul_overflow(bytes, std::size_t(std::max<Index>(factor, 1)), &bytes) ||
        bytes > std::size_t(std::numeric_limits<std::ptrdiff_t>::max()))
      throw std::bad_alloc();
  const bool huge = bytes >= 2 * huge_page;
  const std::size_t alignment = huge ? huge_page : 64;
  void* data = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  if (data == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  if (huge) madvise(data, bytes, MADV_HUGEPAGE);  // advice only: without huge pages the memory is as good
#endif
  return static_cast<T*>(data);
}

}  // namespace

template <class T>
MatrixBatch<T>::MatrixBatch(std::vector<Index> leading, Index rows, Index cols, bool row_major)
    : leading_(std::move(leading)),
      rows_(rows),
      cols_(cols),
      count_(std::accumulate(leading_.begin(), leading_.end(), Index{1}, std::multiplies<>())),
      row_major_(row_major),
      data_(allocate_output<T>(count_, rows, cols)) {}

template <class T>
MatrixBatch<T>::~MatrixBatch() {
  std::free(data_);
}

template <class T>
void MatrixBatch<T>::set(Index index, const ConstMatrixRef<T>& matrix) {
  require(matrix.rows() == rows_ && matrix.cols() == cols_, "batch: matrix ", index, " is ", matrix.rows(),
          "x", matrix.cols(), ", expected ", rows_, "x", cols_);
  Eigen::Map<Matrix<T>>(data_ + index * rows_ * cols_, rows_, cols_) = matrix;
}

template <class T>
nb::object MatrixBatch<T>::release_to_numpy() {
  std::vector<std::size_t> shape(leading_.begin(), leading_.end());
  shape.push_back(std::size_t(rows_));
  shape.push_back(std::size_t(cols_));
  std::vector<std::int64_t> strides(shape.size());
  strides[shape.size() - 2] = row_major_ ? cols_ : 1;
  strides[shape.size() - 1] = row_major_ ? 1 : rows_;
  std::int64_t block = rows_ * cols_;
  for (std::size_t i = leading_.size(); i-- > 0;) {
    strides[i] = block;
    block *= leading_[i];
  }
  T* data = data_;
  data_ = nullptr;
  nb::capsule owner(data, [](void* p) noexcept { std::free(p); });
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.data(), owner, strides.data()).cast();
}

Vector<double> double_vector(const Array& array, const std::string& name) {
  require(array.ndim() == 1, name, " has shape ", shape_text(shape_of(array)), "; expected a vector (1-D)");
  return with_scalar(precision_of(array, name), [&](auto scalar) {
    using T = decltype(scalar);
    const auto* data = static_cast<const T*>(array.data());
    Vector<double> values(Index(array.shape(0)));
    for (Index i = 0; i < values.size(); ++i) values(i) = static_cast<double>(data[i * array.stride(0)]);
    return values;
  });
}

nb::object index_array(const std::vector<Index>& indices) {
  Eigen::Matrix<std::int64_t, Eigen::Dynamic, 1> out(Index(indices.size()));
  std::copy(indices.begin(), indices.end(), out.data());
  return nb::cast(std::move(out), nb::rv_policy::move);
}

template class ScratchBuffer<float>;
template class ScratchBuffer<double>;
template class MatrixArgument<float>;
template class MatrixArgument<double>;
template class MatrixStack<float>;
template class MatrixStack<double>;
template class MatrixBatch<float>;
template class MatrixBatch<double>;
template std::optional<BatchView<const float>> row_major_batch<float>(const Array&);
template std::optional<BatchView<const double>> row_major_batch<double>(const Array&);
template BatchView<float> output_batch<float>(nb::handle, const std::vector<Index>&,
                                              std::initializer_list<std::pair<const Array*, const char*>>);
template BatchView<double> output_batch<double>(nb::handle, const std::vector<Index>&,
                                                std::initializer_list<std::pair<const Array*, const char*>>);

}  // namespace nystrom::python
