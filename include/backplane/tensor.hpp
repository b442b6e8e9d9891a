// tensor.hpp — dense host tensors of the C++ application API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace backplane {

// Element types; the values equal ONNX TensorProto.DataType and bp_dtype_t.
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,
};

size_t dtype_size(DType dtype);       // bytes per element; 0 for kUndefined
const char* dtype_name(DType dtype);  // "float32", "int64", ...
bool dtype_from_name(const std::string& name, DType* out);

using Shape = std::vector<int64_t>;
int64_t shape_numel(
    const Shape& shape);  // product of dims (1 for a scalar); saturates at INT64_MAX
// numel * dtype_size of `shape`, computed overflow-safe: false (and *out_bytes
// untouched) when a dim is negative or the size does not fit in size_t. Use it
// before allocating for a shape that came from a file or a caller.
bool checked_size_bytes(const Shape& shape, DType dtype, size_t* out_bytes);
std::string shape_to_string(const Shape& shape);  // "[1,3,224,224]"

// A dense row-major tensor. Either owns its bytes (64-byte aligned) or views
// memory owned by someone else (the caller keeps that alive). Copying a Tensor
// shares the bytes; clone() copies them.
class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled.
  Tensor(DType dtype, Shape shape);
  // View over `data`, which must hold numel*dtype_size bytes. `keep_alive`
  // (optional) is held for the tensor's lifetime, e.g. a file mapping.
  static Tensor view(DType dtype, Shape shape, void* data,
                     std::shared_ptr<void> keep_alive = nullptr);
  // Owning copy of `data`.
  static Tensor copy_of(DType dtype, Shape shape, const void* data);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  size_t rank() const { return shape_.size(); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t size_bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return dtype_ == DType::kUndefined; }

  void* data() { return data_; }
  const void* data() const { return data_; }
  template <class T>
  T* data_as() {
    return static_cast<T*>(data_);
  }
  template <class T>
  const T* data_as() const {
    return static_cast<const T*>(data_);
  }

  Tensor clone() const;

 private:
  DType dtype_ = DType::kUndefined;
  Shape shape_;
  std::shared_ptr<void> storage_;  // null for views
  void* data_ = nullptr;
};

}  // namespace backplane
