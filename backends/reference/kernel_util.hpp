// kernel_util.hpp — helpers shared by CpuRef's elementwise and tensor kernels
// (kernels_elementwise.cpp, kernels_tensor.cpp): float16 storage type, dtype
// dispatch, input checks, a plain copy kernel. Private to the reference backend.
//
// Everything here is inline, a template or a class, so several kernel files of
// one library (CpuRef, MockAcc) can include it.
#pragma once

#include "kernel.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace backplane::cpuref {

// Largest rank a kernel's run-time odometer handles (fixed arrays, no heap).
inline constexpr size_t kMaxRank = 32;

// Storage type of a float16 element; arithmetic on it happens in a wider type
// (half_to_float / float_to_half convert).
struct f16 {
  uint16_t bits;
};

template <class T>
constexpr bp_dtype_t dtype_of();
template <>
constexpr bp_dtype_t dtype_of<float>() {
  return BP_DTYPE_FLOAT32;
}
template <>
constexpr bp_dtype_t dtype_of<f16>() {
  return BP_DTYPE_FLOAT16;
}
template <>
constexpr bp_dtype_t dtype_of<int8_t>() {
  return BP_DTYPE_INT8;
}
template <>
constexpr bp_dtype_t dtype_of<uint8_t>() {
  return BP_DTYPE_UINT8;
}
template <>
constexpr bp_dtype_t dtype_of<int32_t>() {
  return BP_DTYPE_INT32;
}
template <>
constexpr bp_dtype_t dtype_of<int64_t>() {
  return BP_DTYPE_INT64;
}
template <>
constexpr bp_dtype_t dtype_of<bool>() {
  return BP_DTYPE_BOOL;
}
template <>
constexpr bp_dtype_t dtype_of<double>() {
  return BP_DTYPE_FLOAT64;
}
template <>
constexpr bp_dtype_t dtype_of<int16_t>() {
  return BP_DTYPE_INT16;
}
template <>
constexpr bp_dtype_t dtype_of<uint16_t>() {
  return BP_DTYPE_UINT16;
}
template <>
constexpr bp_dtype_t dtype_of<uint32_t>() {
  return BP_DTYPE_UINT32;
}
template <>
constexpr bp_dtype_t dtype_of<uint64_t>() {
  return BP_DTYPE_UINT64;
}

// Calls f(T{}) for the T among Ts whose dtype is `dt`; rejects any other dtype
// with "<node>: <what> dtype <dt> is not supported (supported: ...)".
template <class... Ts, class F>
std::unique_ptr<Kernel> dispatch(bp_dtype_t dt, const NodeInfo& info, const char* what, F&& f) {
  std::unique_ptr<Kernel> kernel;
  const bool found = ((dt == dtype_of<Ts>() ? (kernel = f(Ts{}), true) : false) || ...);
  if (!found) {
    std::string supported;
    ((supported += (supported.empty() ? "" : ", ") + std::string(sdk::dtype_name(dtype_of<Ts>()))),
     ...);
    throw sdk::unsupported(info.describe() + ": " + what + " dtype " + sdk::dtype_name(dt) +
                           " is not supported (supported: " + supported + ")");
  }
  return kernel;
}

// Throws unless inputs 0..count-1 are present and the node has an output.
inline void require_inputs(const NodeInfo& info, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (!info.has_input(i))
      throw sdk::invalid(info.describe() + ": input " + std::to_string(i) + " is required");
  }
  if (info.out_shapes.empty() || info.out_dtypes.empty())
    throw sdk::invalid(info.describe() + ": the node has no output");
}

// "[1,3,224,224]", for messages.
inline std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    // Not `(i ? "," : "") + std::to_string(...)`: inlined, GCC 12 reports a
    // false -Wrestrict on that.
    if (i > 0) s += ',';
    s += std::to_string(d[i]);
  }
  return s + "]";
}

// Copies `bytes` from input 0 to output 0 (nothing if they alias).
class CopyKernel final : public Kernel {
 public:
  explicit CopyKernel(size_t bytes) : bytes_(bytes) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    if (bytes_ != 0 && outputs[0] != inputs[0]) std::memcpy(outputs[0], inputs[0], bytes_);
  }

 private:
  size_t bytes_;
};

}  // namespace backplane::cpuref
