#include <backplane/tensor.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

namespace backplane {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kUInt8:
      return 1;
    case DType::kInt8:
      return 1;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kFloat16:
      return 2;
    case DType::kUInt16:
    case DType::kInt16:
    case DType::kBFloat16:
      return 2;
    case DType::kUInt32:
      return 4;
    case DType::kFloat64:
    case DType::kUInt64:
      return 8;
    case DType::kUndefined:
      return 0;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kUInt8:
      return "uint8";
    case DType::kInt8:
      return "int8";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kBool:
      return "bool";
    case DType::kFloat16:
      return "float16";
    case DType::kUInt16:
      return "uint16";
    case DType::kInt16:
      return "int16";
    case DType::kFloat64:
      return "float64";
    case DType::kUInt32:
      return "uint32";
    case DType::kUInt64:
      return "uint64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kUndefined:
      return "undefined";
  }
  return "undefined";
}

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType d : {DType::kFloat32, DType::kUInt8, DType::kInt8, DType::kInt32, DType::kInt64,
                  DType::kBool, DType::kFloat16, DType::kUInt16, DType::kInt16, DType::kFloat64,
                  DType::kUInt32, DType::kUInt64, DType::kBFloat16}) {
    if (name == dtype_name(d)) {
      *out = d;
      return true;
    }
  }
  return false;
}

int64_t shape_numel(const Shape& shape) {
  // A 0 dim anywhere makes the product 0, even after a prefix that overflows.
  for (int64_t d : shape)
    if (d == 0) return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::numeric_limits<int64_t>::max();
  return n;
}

bool checked_size_bytes(const Shape& shape, DType dtype, size_t* out_bytes) {
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return false;
    empty = empty || d == 0;
  }
  size_t bytes = empty ? 0 : dtype_size(dtype);
  for (int64_t d : shape)
    if (!empty && __builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) return false;
  *out_bytes = bytes;
  return true;
}

std::string shape_to_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += shape[i] < 0 ? "?" : std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {
// 64-byte aligned memory for `bytes` bytes, those past them (to the next
// multiple of 64, and at least 64) zeroed; the first `bytes` are left as
// they are unless `zero`.
std::shared_ptr<void> aligned_bytes(size_t bytes, bool zero) {
  const size_t alloc = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, alloc);
  if (p == nullptr) throw std::bad_alloc();
  const size_t from = zero ? 0 : bytes;
  std::memset(static_cast<char*>(p) + from, 0, alloc - from);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  storage_ = aligned_bytes(size_bytes(), /*zero=*/true);
  data_ = storage_.get();
}

Tensor Tensor::view(DType dtype, Shape shape, void* data, std::shared_ptr<void> keep_alive) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.storage_ = std::move(keep_alive);
  t.data_ = data;
  return t;
}

Tensor Tensor::copy_of(DType dtype, Shape shape, const void* data) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  const size_t bytes = t.size_bytes();
  t.storage_ = aligned_bytes(bytes, /*zero=*/false);  // every byte is written next
  t.data_ = t.storage_.get();
  if (bytes > 0) std::memcpy(t.data_, data, bytes);
  return t;
}

Tensor Tensor::clone() const {
  if (empty()) return Tensor();
  return copy_of(dtype_, shape_, data_);
}

}  // namespace backplane
