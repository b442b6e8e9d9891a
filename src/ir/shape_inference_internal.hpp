// shape_inference_internal.hpp — pieces shared by shape_inference*.cpp, the
// ops_*.cpp schema files and the inference callbacks of backend-defined
// operators. Not part of any public contract.
#pragma once

#include "ir/graph.hpp"
#include "ir/op_registry.hpp"

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace backplane::ir::detail {

// Ops whose result differs from run to run (RandomNormal, Multinomial, ...):
// never folded, even when every input is constant, nor merged with another.
bool nondeterministic(const Node& node);

// Elements of a tensor of `shape`, saturating at INT64_MAX instead of
// overflowing: dims come from model files (and from tensor data in them), so
// shape arithmetic here never trusts them to be small. Tensors over
// kMaxElements are rejected after each node (infer_node).
inline int64_t sat_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return d == 0 ? 0 : n;  // negative dims are rejected elsewhere
    if (n > INT64_MAX / d) n = INT64_MAX;
    else n *= d;
  }
  return n;
}
// a * b for non-negative a and b, saturating at INT64_MAX.
inline int64_t sat_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > INT64_MAX / b ? INT64_MAX : a * b;
}
constexpr int64_t kMaxElements = int64_t{1} << 48;

// The inferred type of one node output.
struct OutInfo {
  DType dtype = DType::kUndefined;
  Shape shape;
};

// What an op's inference function sees: the node, its typed inputs, the
// constants known so far; it fills `out` (one entry per node output).
class InferCtx {
 public:
  InferCtx(Graph& graph, const Node& node)
      : graph(graph), node(node), opset(graph.opset(node.domain)), out(node.outputs.size()) {}

  Graph& graph;
  const Node& node;
  int64_t opset;
  std::vector<OutInfo> out;

  // Formal inputs only (not the implicit ones a control-flow node carries).
  size_t num_inputs() const { return node.inputs.size() - node.implicit_inputs; }
  bool has(size_t i) const { return node.has_input(i); }
  const Value& in(size_t i) const { return graph.values[node.inputs[i]]; }
  const std::string& name(size_t i) const { return in(i).name; }
  DType dtype(size_t i) const { return in(i).dtype; }
  const Shape& shape(size_t i) const { return in(i).shape; }
  int64_t rank(size_t i) const { return static_cast<int64_t>(in(i).shape.size()); }
  const Tensor* constant(size_t i) const {
    return has(i) ? graph.constant(node.inputs[i]) : nullptr;
  }

  // invalid_argument("node 'X' (Op): " + message).
  Status error(const std::string& message) const;
  Status unsupported_error(const std::string& message) const;

  // Between `min` and `max` inputs, where present inputs [0, min) are required.
  Status require_inputs(size_t min, size_t max) const;
  Status expect_dtype(size_t i, std::initializer_list<DType> allowed, const char* param) const;
  Status expect_same_dtype(size_t a, size_t b) const;
  Status expect_rank(size_t i, int64_t rank, const char* param) const;
  // Values of a constant int32/int64 input; "input 'shape' must be constant ..." otherwise.
  Result<std::vector<int64_t>> ints_input(size_t i, const char* param) const;
  // Values of a constant float32/float16/int input, as double.
  Result<std::vector<double>> numbers_input(size_t i, const char* param) const;
  // `axis` in [-rank, rank) (or [-rank, rank] when `inclusive`), made non-negative.
  Result<int64_t> normalize_axis(int64_t axis, int64_t rank, const char* what,
                                 bool inclusive = false) const;
  Result<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank,
                                              const char* what) const;

  void set(size_t i, DType dtype, Shape shape) {
    if (i < out.size()) out[i] = OutInfo{dtype, std::move(shape)};
  }
};

using InferFn = Status (*)(InferCtx&);

// Short names for schema type lists: .type("T", {F16, BF16, F32, F64}).
namespace dt {
constexpr DType F16 = DType::kFloat16, BF16 = DType::kBFloat16, F32 = DType::kFloat32,
                F64 = DType::kFloat64, I8 = DType::kInt8, I16 = DType::kInt16, I32 = DType::kInt32,
                I64 = DType::kInt64, U8 = DType::kUInt8, U16 = DType::kUInt16, U32 = DType::kUInt32,
                U64 = DType::kUInt64, BOOL = DType::kBool;
}  // namespace dt

// Adds a built-in schema; a failure (a duplicate version) is a bug in the
// table, reported on stderr before aborting, so every test finds it.
void add_schema(OpRegistry& registry, OpSchema schema);

// Output 0 has input 0's dtype and shape (unary elementwise ops, activations).
Status infer_same_as_input0(InferCtx& c);
// Output 0 is the multidirectional broadcast of every input, of `out_dtype`.
Status infer_broadcast(InferCtx& c, DType out_dtype);

// Multidirectional (numpy) broadcast of `shapes`; `names` name them in errors.
Result<Shape> broadcast_shapes(const InferCtx& c, const std::vector<size_t>& inputs);

// Per-dimension start and step of a Slice, after clamping (ONNX semantics).
struct SlicePlan {
  std::vector<int64_t> start;  // one per input dim
  std::vector<int64_t> step;   // one per input dim (1 for unsliced dims)
  Shape out;
};
Result<SlicePlan> plan_slice(const InferCtx& c, const Shape& in, const std::vector<int64_t>& starts,
                             const std::vector<int64_t>& ends, const std::vector<int64_t>& axes,
                             const std::vector<int64_t>& steps);
// Reads a Slice node's starts/ends/axes/steps (attributes before opset 10,
// inputs after) and plans it.
Result<SlicePlan> slice_plan_for(const InferCtx& c);

// The [first, last) range of input 0's dims a Shape node returns (its
// start/end attributes from opset 15 on, clamped to the rank).
Status shape_range(const InferCtx& c, int64_t* first, int64_t* last);

// The tensor a Constant node's attribute holds.
Result<Tensor> constant_attr_value(const InferCtx& c);

}  // namespace backplane::ir::detail
