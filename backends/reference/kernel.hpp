// kernel.hpp — how CpuRef's operator kernels plug into the reference backend.
//
// A kernel is prepared once per node at compile time, when every shape and
// dtype is static and constant inputs can be read; at run time it only sees
// data pointers. Everything a kernel needs per run (index tables, strides,
// temporaries) is computed in its factory or lives in the scratch buffer it
// asks for, so a steady-state run allocates nothing.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/backend_sdk.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace backplane::cpuref {

using Dims = std::vector<int64_t>;

// Static facts about one node handed to a kernel factory.
struct NodeInfo {
  sdk::NodeRef node;
  std::vector<bp_dtype_t> in_dtypes;  // BP_DTYPE_UNDEFINED for an omitted input
  std::vector<Dims> in_shapes;
  std::vector<bp_dtype_t> out_dtypes;
  std::vector<Dims> out_shapes;
  // Bytes of constant input i, or nullptr if input i is not a constant (or is
  // omitted). Valid for the lifetime of the compiled partition.
  std::vector<const void*> in_constants;

  bool has_input(size_t i) const {
    return i < in_dtypes.size() && in_dtypes[i] != BP_DTYPE_UNDEFINED;
  }
  const void* constant(size_t i) const {
    return i < in_constants.size() ? in_constants[i] : nullptr;
  }
  // "node 'Conv_3' (Conv)", for messages.
  std::string describe() const {
    return "node '" + std::string(node.name()) + "' (" + std::string(node.op_type()) + ")";
  }
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Bytes of scratch memory run() needs (64-byte aligned), 0 if none.
  virtual size_t scratch_bytes() const { return 0; }
  // Computes outputs from inputs. Must be thread-safe (const, no shared
  // mutable state): several execution contexts run one kernel at once.
  // inputs[i] is nullptr for an omitted optional input.
  virtual void run(const void* const* inputs, void* const* outputs, void* scratch) const = 0;
};

// Builds the kernel for a node, or throws sdk::Error (BP_STATUS_UNSUPPORTED
// with a reason, e.g. "dtype int8 is not supported") if it cannot.
using KernelFactory = std::function<std::unique_ptr<Kernel>(const NodeInfo&)>;

class KernelRegistry {
 public:
  void add(const std::string& op_type, KernelFactory factory) {
    factories_[op_type] = std::move(factory);
  }
  const KernelFactory* find(const std::string& op_type) const {
    auto it = factories_.find(op_type);
    return it == factories_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> ops() const {
    std::vector<std::string> out;
    for (const auto& kv : factories_) out.push_back(kv.first);
    return out;
  }

 private:
  std::map<std::string, KernelFactory> factories_;
};

// Each kernel file registers its ops here (called once by the backend).
void register_nn_kernels(KernelRegistry& registry);  // conv, gemm, pool, norm, resize, softmax
void register_elementwise_kernels(
    KernelRegistry& registry);                           // arithmetic, activations, compare, logic
void register_tensor_kernels(KernelRegistry& registry);  // shape/layout ops, gather, reductions

// Shared helpers.
// The kernels use the SDK's sdk::dtype_size / dtype_name / element_count;
// these short names stay for the kernel tests.
inline size_t dtype_bytes(bp_dtype_t dtype) { return sdk::dtype_size(dtype); }
inline const char* dtype_str(bp_dtype_t dtype) { return sdk::dtype_name(dtype); }
inline int64_t numel(const Dims& dims) { return sdk::element_count(dims); }
// The elements of a shape before `axis` (outer) and after it (inner): the
// loop bounds of an operation along one axis.
struct AxisSplit {
  int64_t outer = 1, inner = 1;
};
inline AxisSplit split_at_axis(const Dims& dims, int64_t axis) {
  AxisSplit s;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    if (d < axis) s.outer *= dims[d];
    if (d > axis) s.inner *= dims[d];
  }
  return s;
}
// Normalises a possibly negative axis against `rank`; throws on out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const NodeInfo& info);
// Float16 <-> float32 (IEEE 754 binary16).
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

}  // namespace backplane::cpuref
