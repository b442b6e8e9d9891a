// kernel.hpp — how CpuRef's operator kernels plug into the reference backend.
//
// A kernel is prepared for one node at fixed shapes, when every shape and
// dtype is known and the inputs it plans from (constants, and the "data
// inputs" below) can be read; at run time it only sees data pointers.
// Everything a kernel needs per run (index tables, strides, temporaries) is
// computed in its factory or lives in the scratch buffer it asks for, so a
// steady-state run allocates nothing.
//
// When a kernel is prepared depends on how its partition was compiled:
// - concrete (the default): once, at compile time, from the view's shapes;
// - shape-polymorphic (API 1.2): by each execution context, right before the
//   node runs, from the shapes execute_shaped gives, and again only when
//   those shapes (or the bytes of its data inputs) differ from the last run.
// The factories are the same in both cases, so both give identical results.
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

// Where a kernel whose output shape depends on data gets its output memory
// (see Kernel::run_dynamic).
class OutputAllocator {
 public:
  virtual ~OutputAllocator() = default;
  // Memory for output `i` of the node, now known to have shape `dims` (every
  // dim >= 0); owned by the caller, valid until the run ends.
  virtual void* allocate(size_t i, const Dims& dims) = 0;
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

  // Outputs whose shape depends on data (NonZero, Unique, NonMaxSuppression).
  // Such a node's
  // output shape reaches the factory with -1 in the dims the host could not
  // infer (NodeInfo.out_shapes, from execute_shaped's value_shapes), and its
  // kernel overrides both members: run_dynamic computes the shape, asks
  // `allocator` for the memory (outputs[i] is nullptr for such an output)
  // and writes it. The execution context's allocator hands a partition
  // output to the host (sdk::ExecuteArgs::allocate_output) and places an
  // intermediate in memory of its own; the nodes after it are prepared with
  // the shape it reported, since a polymorphic context prepares each node
  // only when it is about to run. A -1 dim on a partition input, or on the
  // output of a kernel without dynamic outputs, is rejected with
  // BP_STATUS_UNIMPLEMENTED naming the node and value (backend.cpp,
  // PolyContext).
  virtual bool has_dynamic_outputs() const { return false; }
  virtual void run_dynamic(const void* const* inputs, void* const* outputs,
                           OutputAllocator& allocator, void* scratch) const {
    (void)allocator;
    run(inputs, outputs, scratch);
  }
};

// Builds the kernel for a node, or throws sdk::Error (BP_STATUS_UNSUPPORTED
// with a reason, e.g. "dtype int8 is not supported") if it cannot.
using KernelFactory = std::function<std::unique_ptr<Kernel>(const NodeInfo&)>;

class KernelRegistry {
 public:
  void add(const std::string& op_type, KernelFactory factory) {
    factories_[op_type] = std::move(factory);
  }
  // `data_inputs`: the inputs whose *bytes* the factory reads to plan the
  // kernel (NodeInfo::constant), e.g. Slice's starts and ends, Pad's pads,
  // Reshape's target (checked against the output shape). In a concrete view
  // they are usually constants. In a shape-polymorphic partition they are
  // often computed at run time (the host makes a value that was constant for
  // one set of input shapes only a view input); the context then hands the
  // factory a copy of their bytes from the run, and prepares the kernel
  // again whenever those bytes change. Inputs a kernel reads in run() (Range's
  // start, Trilu's k, Clip's bounds when not constant) are not listed.
  void add(const std::string& op_type, KernelFactory factory, std::vector<size_t> data_inputs) {
    data_inputs_[op_type] = std::move(data_inputs);
    add(op_type, std::move(factory));
  }
  const KernelFactory* find(const std::string& op_type) const {
    auto it = factories_.find(op_type);
    return it == factories_.end() ? nullptr : &it->second;
  }
  // The data inputs declared for `op_type` (empty if none); the reference
  // lives as long as the registry.
  const std::vector<size_t>& data_inputs(const std::string& op_type) const {
    static const std::vector<size_t> none;
    auto it = data_inputs_.find(op_type);
    return it == data_inputs_.end() ? none : it->second;
  }
  std::vector<std::string> ops() const {
    std::vector<std::string> out;
    for (const auto& kv : factories_) out.push_back(kv.first);
    return out;
  }

 private:
  std::map<std::string, KernelFactory> factories_;
  std::map<std::string, std::vector<size_t>> data_inputs_;
};

// Each kernel file registers its ops here (called once by the backend).
void register_nn_kernels(KernelRegistry& registry);  // conv, gemm, pool, norm, resize, softmax
void register_elementwise_kernels(
    KernelRegistry& registry);                           // arithmetic, activations, compare, logic
void register_tensor_kernels(KernelRegistry& registry);  // shape/layout ops, gather, reductions
void register_math_kernels(
    KernelRegistry& registry);  // unary math beyond the basics, Mod, BitShift, activations,
                                // Hardmax, LRN, MVN, EyeLike, DepthToSpace/SpaceToDepth,
                                // ReverseSequence, Det, Upsample, MaxUnpool, Einsum, CumSum
void register_indexing_kernels(
    KernelRegistry& registry);  // GatherElements, GatherND, ScatterElements, ScatterND, Scatter,
                                // OneHot, TopK, NonZero, Unique, Compress
void register_detection_kernels(
    KernelRegistry& registry);                        // NonMaxSuppression, RoiAlign, GridSample
void register_rnn_kernels(KernelRegistry& registry);  // RNN, GRU, LSTM
void register_quant_kernels(
    KernelRegistry& registry);  // QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul,
                                // MatMulInteger, ConvInteger, DynamicQuantizeLinear
void register_signal_kernels(
    KernelRegistry&
        registry);  // DFT, STFT, window functions, MelWeightMatrix, losses, random generators
void register_opset18_kernels(
    KernelRegistry& registry);  // ops new in opset 18: Bitwise*, Mish, GroupNormalization,
                                // CenterCropPad, Col2Im
void register_control_kernels(KernelRegistry& registry);  // NonZero (an output shape from data)

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
