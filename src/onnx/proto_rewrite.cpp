// proto_rewrite.cpp — types, ranks, an emitter and the node walk shared by
// the import-time rewrites (proto_rewrite.hpp).
#include "onnx/proto_rewrite.hpp"

#include <backplane/tensor.hpp>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <unordered_set>

namespace backplane::onnx_import {
namespace {

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// Operators whose result has their first input's element type and shape.
bool keeps_input(const std::string& op) {
  // clang-format off
  static const std::unordered_set<std::string> ops = {
      "Identity", "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Neg", "Abs",
      "Exp", "Log", "Sqrt", "Erf", "Clip", "Dropout", "LayerNormalization", "BatchNormalization",
      "Elu", "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Reciprocal"};
  // clang-format on
  return ops.count(op) > 0;
}

// float to IEEE half (round to nearest even) or bfloat16 (the same), as bits.
uint16_t half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (((x >> 23) & 0xff) == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - exp);
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // may carry into the exponent: right
  return static_cast<uint16_t>(sign | h);
}

uint16_t bfloat16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace

void DeclaredTypes::add(const onnx::GraphProto& g) {
  auto take = [&](const onnx::ValueInfoProto& v) {
    if (!v.type().has_tensor_type()) return;
    const auto& t = v.type().tensor_type();
    if (t.elem_type() != 0) elem_types_[v.name()] = t.elem_type();
    if (t.has_shape()) ranks_[v.name()] = t.shape().dim_size();
  };
  for (const auto& v : g.input()) take(v);
  for (const auto& v : g.value_info()) take(v);
  for (const auto& v : g.output()) take(v);
  for (const auto& t : g.initializer()) {
    elem_types_[t.name()] = t.data_type();
    ranks_[t.name()] = t.dims_size();
    constants_[t.name()] = &t;
  }
  for (const auto& n : g.node()) {
    for (const std::string& out : n.output()) producer_[out] = &n;
    if (is_default_domain(n.domain()) && n.op_type() == "Constant" && n.output_size() == 1)
      if (const onnx::AttributeProto* a = find_attr(n, "value"); a != nullptr && a->has_t()) {
        elem_types_[n.output(0)] = a->t().data_type();
        ranks_[n.output(0)] = a->t().dims_size();
        constants_[n.output(0)] = &a->t();
      }
    // Ranks forward, in the file's order (topological in every exporter's
    // output; a value met before its producer stays unknown).
    if (n.output_size() >= 1 && !n.output(0).empty() && ranks_.count(n.output(0)) == 0) {
      const int r = rank_of(n.output(0));
      if (r >= 0) ranks_[n.output(0)] = r;
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g()) add(a.g());
      for (const auto& sg : a.graphs()) add(sg);
    }
  }
}

int32_t DeclaredTypes::elem_type(const std::string& value) const {
  // clang-format off
  static const std::unordered_set<std::string> more = {
      "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile", "Slice",
      "Gather", "GatherElements", "GatherND", "Split", "Concat", "Pad", "Add", "Sub", "Mul",
      "Div", "Pow", "MatMul", "Gemm", "Einsum", "Max", "Min", "ReduceSum", "ReduceMean",
      "ReduceMax", "ReduceMin", "Conv", "MaxPool", "AveragePool", "Resize"};
  // clang-format on
  std::string v = value;
  for (int steps = 0; steps < 64; ++steps) {  // a chain, not a search: bounded
    if (auto d = elem_types_.find(v); d != elem_types_.end()) return d->second;
    auto p = producer_.find(v);
    if (p == producer_.end()) return 0;
    const onnx::NodeProto& n = *p->second;
    if (!is_default_domain(n.domain())) return 0;
    if (n.op_type() == "Cast") {
      const onnx::AttributeProto* to = find_attr(n, "to");
      return to != nullptr ? static_cast<int32_t>(to->i()) : 0;
    }
    const int from = n.op_type() == "Where" || n.op_type() == "CastLike" ? 1 : 0;
    const bool same = keeps_input(n.op_type()) || more.count(n.op_type()) > 0;
    if ((from == 0 && !same) || n.input_size() <= from) return 0;
    v = n.input(from);
  }
  return 0;
}

int DeclaredTypes::rank(const std::string& value) const {
  auto r = ranks_.find(value);
  return r != ranks_.end() ? r->second : -1;
}

namespace {

// The values of `t` from its raw_data or its typed field.
template <class T, class Typed>
void values_of(const onnx::TensorProto& t, const Typed& typed, std::vector<T>* out) {
  out->clear();
  if (t.has_raw_data()) {
    const std::string& raw = t.raw_data();
    out->resize(raw.size() / sizeof(T));
    if (!out->empty()) std::memcpy(out->data(), raw.data(), out->size() * sizeof(T));
  } else {
    out->assign(typed.begin(), typed.end());
  }
}

}  // namespace

bool DeclaredTypes::int64_values(const std::string& value, std::vector<int64_t>* out) const {
  auto c = constants_.find(value);
  if (c == constants_.end() || c->second->data_type() != onnx::TensorProto::INT64) return false;
  values_of(*c->second, c->second->int64_data(), out);
  // Values kept elsewhere (external data, a weight the import reads from
  // the file) are not known here.
  return static_cast<int64_t>(out->size()) == constant_numel(value);
}

bool DeclaredTypes::float_values(const std::string& value, std::vector<float>* out) const {
  auto c = constants_.find(value);
  if (c == constants_.end() || c->second->data_type() != onnx::TensorProto::FLOAT) return false;
  values_of(*c->second, c->second->float_data(), out);
  return static_cast<int64_t>(out->size()) == constant_numel(value);
}

int64_t DeclaredTypes::constant_numel(const std::string& value) const {
  std::vector<int64_t> dims;
  if (!constant_dims(value, &dims)) return -1;
  return shape_numel(dims);  // saturates: a corrupt initializer's dims may overflow
}

bool DeclaredTypes::constant_dims(const std::string& value, std::vector<int64_t>* dims) const {
  auto c = constants_.find(value);
  if (c == constants_.end()) return false;
  dims->assign(c->second->dims().begin(), c->second->dims().end());
  return true;
}

// The rank of a node's first output from its inputs' ranks, for the
// operators whose rule is plain; -1 for any other.
int DeclaredTypes::rank_of(const std::string& value) const {
  auto p = producer_.find(value);
  if (p == producer_.end()) return -1;
  const onnx::NodeProto& n = *p->second;
  if (!is_default_domain(n.domain()) && n.domain() != "com.microsoft") return -1;
  // clang-format off
  static const std::unordered_set<std::string> same = {
      "Cast", "InstanceNormalization", "Conv", "ConvTranspose", "MaxPool", "AveragePool",
      "Resize", "Transpose", "Slice", "Concat", "Split", "Pad", "Tile", "CumSum", "Not", "Floor",
      "Ceil", "Round", "Sign", "FusedConv", "SkipLayerNormalization",
      "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization", "FastGelu",
      "QuickGelu", "CastLike", "Softsign", "Selu", "ThresholdedRelu", "GlobalAveragePool",
      "GlobalMaxPool", "GlobalLpPool", "LpPool", "LRN", "Upsample", "DepthToSpace",
      "SpaceToDepth", "Hardmax", "TopK", "QuantizeLinear", "DequantizeLinear", "QLinearConv",
      "ConvInteger", "DynamicQuantizeLinear", "QLinearSigmoid", "QLinearLeakyRelu",
      "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax", "Mish", "Celu",
      "Shrink", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "IsNaN", "IsInf",
      "MeanVarianceNormalization", "GroupNormalization", "ReverseSequence", "Trilu",
      "ScatterElements", "ScatterND", "Scatter", "RotaryEmbedding", "MatMulNBits", "Gelu"};
  // clang-format on
  // clang-format off
  static const std::unordered_set<std::string> broadcast = {
      "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Where", "Equal", "Less",
      "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Mod", "BiasGelu", "PRelu"};
  // clang-format on
  auto in = [&](int i) {
    return i < n.input_size() && !n.input(i).empty() ? rank(n.input(i)) : -1;
  };
  const std::string& op = n.op_type();
  if (keeps_input(op) || same.count(op)) return in(0);
  if (broadcast.count(op)) {
    int r = 0;
    for (int i = 0; i < n.input_size(); ++i) {
      const int ri = in(i);
      if (ri < 0) return -1;
      r = std::max(r, ri);
    }
    return n.input_size() > 0 ? r : -1;
  }
  if (op == "MatMul" || op == "FusedMatMul") {
    const int a = in(0), b = in(1);
    if (a < 1 || b < 1) return -1;
    if (a == 1 && b == 1) return 0;
    return a == 1 ? b - 1 : b == 1 ? a - 1 : std::max(a, b);
  }
  if (op == "Gemm" || op == "FusedGemm" || op == "Flatten") return 2;
  // [B, S, D]; the present [2, B, N, T, h] or [B, N, T, h].
  if (op == "Attention" &&
      is_default_domain(n.domain()))  // ONNX's: Q's rank, presents [B, M, T, h]
    return value == n.output(0) ? in(0) : 4;
  if (op == "Attention" || op == "MultiHeadAttention" || op == "GroupQueryAttention")
    return value == n.output(0) ? 3 : op == "Attention" ? 5 : 4;
  if (op == "Shape") return 1;
  if (op == "Size") return 0;
  std::vector<int64_t> v;
  if (op == "Reshape" || op == "ConstantOfShape")
    return int64_values(n.input(op == "Reshape" ? 1 : 0), &v) ? static_cast<int>(v.size()) : -1;
  if (op == "Unsqueeze" || op == "Squeeze") {
    const onnx::AttributeProto* axes = find_attr(n, "axes");
    size_t count = 0;
    if (axes != nullptr) count = static_cast<size_t>(axes->ints_size());
    else if (n.input_size() > 1 && int64_values(n.input(1), &v)) count = v.size();
    else return -1;
    const int r = in(0);
    if (r < 0) return -1;
    return op == "Unsqueeze" ? r + static_cast<int>(count) : r - static_cast<int>(count);
  }
  // Reductions keep their rank unless keepdims is 0 (1 by default).
  if (op.rfind("Reduce", 0) == 0 || op == "ArgMax" || op == "ArgMin") {
    const onnx::AttributeProto* keep = find_attr(n, "keepdims");
    if (keep == nullptr || keep->i() != 0) return in(0);
    const onnx::AttributeProto* axes = find_attr(n, "axes");
    if (op == "ArgMax" || op == "ArgMin") return in(0) >= 1 ? in(0) - 1 : -1;
    return axes != nullptr && in(0) >= axes->ints_size() ? in(0) - axes->ints_size() : -1;
  }
  if (op == "GatherElements") return in(1);
  if (op == "Gather") {
    const int a = in(0), b = in(1);
    return a >= 1 && b >= 0 ? a - 1 + b : -1;
  }
  return -1;
}

NodeEmitter::NodeEmitter(const onnx::NodeProto& replaced, int64_t opset)
    : base_(replaced.name().empty() ? replaced.output(0) : replaced.name()),
      value_base_(replaced.output(0)),
      opset_(opset) {}

onnx::NodeProto& NodeEmitter::node(const std::string& op, const std::vector<std::string>& inputs,
                                   const std::vector<std::string>& outputs,
                                   const std::string& domain) {
  const std::string step = std::to_string(nodes_.size()) + "_" + op;
  onnx::NodeProto& n = nodes_.emplace_back();
  n.set_op_type(op);
  n.set_domain(domain);
  n.set_name(base_ + "/" + step);
  for (const std::string& in : inputs) n.add_input(in);
  if (outputs.empty()) n.add_output(value_base_ + "/" + step);
  for (const std::string& out : outputs) n.add_output(out);
  return n;
}

std::string NodeEmitter::fresh(const std::string& what) const {
  return value_base_ + "/" + std::to_string(nodes_.size()) + "_" + what;
}

std::string NodeEmitter::int64s(const std::vector<int64_t>& values) {
  onnx::NodeProto& n = node("Constant", {});
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name("value");
  a.set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto& t = *a.mutable_t();
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t.add_int64_data(v);
  return n.output(0);
}

std::string NodeEmitter::scalar(double value, int32_t elem_type) {
  onnx::NodeProto& n = node("Constant", {});
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name("value");
  a.set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto& t = *a.mutable_t();
  t.set_data_type(elem_type);
  switch (elem_type) {
    case onnx::TensorProto::DOUBLE:
      t.add_double_data(value);
      break;
    case onnx::TensorProto::INT64:
      t.add_int64_data(static_cast<int64_t>(value));
      break;
    case onnx::TensorProto::INT32:
      t.add_int32_data(static_cast<int32_t>(value));
      break;
    case onnx::TensorProto::FLOAT16:
      t.add_int32_data(half_bits(static_cast<float>(value)));
      break;
    case onnx::TensorProto::BFLOAT16:
      t.add_int32_data(bfloat16_bits(static_cast<float>(value)));
      break;
    default:
      t.set_data_type(onnx::TensorProto::FLOAT);
      t.add_float_data(static_cast<float>(value));
  }
  return n.output(0);
}

std::string NodeEmitter::axes_op(const std::string& op, const std::string& x,
                                 const std::vector<int64_t>& axes, int keepdims) {
  if (axes.empty()) return x;
  // Axes became an input at 13 (ReduceSum, Squeeze, Unsqueeze) and at 18
  // (the other reductions).
  const bool reduce = op.rfind("Reduce", 0) == 0;
  const bool as_input = opset_ >= ((reduce && op != "ReduceSum") ? 18 : 13);
  std::vector<std::string> inputs{x};
  if (as_input) inputs.push_back(int64s(axes));
  onnx::NodeProto& n = node(op, inputs);
  if (!as_input) set_attr(n, "axes", axes);
  if (keepdims >= 0) set_attr(n, "keepdims", int64_t{keepdims});
  return n.output(0);
}

std::string NodeEmitter::transpose(const std::string& x, const std::vector<int64_t>& perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  onnx::NodeProto& n = node("Transpose", {x});
  set_attr(n, "perm", perm);
  return n.output(0);
}

std::vector<onnx::NodeProto> NodeEmitter::finish(const std::string& result,
                                                 const std::string& output) {
  if (nodes_.empty() || nodes_.back().output(0) != result) node("Identity", {result});
  nodes_.back().set_output(0, output);
  return finish();
}

std::vector<onnx::NodeProto> NodeEmitter::finish() {
  std::vector<onnx::NodeProto> nodes(std::make_move_iterator(nodes_.begin()),
                                     std::make_move_iterator(nodes_.end()));
  nodes_.clear();
  return nodes;
}

void set_attr(onnx::NodeProto& n, const std::string& name, int64_t value) {
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(value);
}

void set_attr(onnx::NodeProto& n, const std::string& name, float value) {
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(value);
}

void set_attr(onnx::NodeProto& n, const std::string& name, const std::string& value) {
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::STRING);
  a.set_s(value);
}

void set_attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& values) {
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a.add_ints(v);
}

const onnx::AttributeProto* find_attr(const onnx::NodeProto& n, const std::string& name) {
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

float attr_f(const onnx::NodeProto& n, const std::string& name, float otherwise) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->f() : otherwise;
}

int64_t attr_i(const onnx::NodeProto& n, const std::string& name, int64_t otherwise) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->i() : otherwise;
}

bool has_input(const onnx::NodeProto& n, int i) {
  return i < n.input_size() && !n.input(i).empty();
}

std::string input_or_empty(const onnx::NodeProto& n, int i) {
  return i < n.input_size() ? n.input(i) : std::string();
}

std::string output_or_empty(const onnx::NodeProto& n, int i) {
  return i < n.output_size() ? n.output(i) : std::string();
}

int64_t default_opset(const onnx::ModelProto& model) {
  int64_t opset = -1;
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (is_default_domain(o.domain())) opset = o.version();
  return opset;
}

bool any_node(const onnx::GraphProto& g, const std::function<bool(const onnx::NodeProto&)>& match) {
  for (const onnx::NodeProto& n : g.node()) {
    if (match(n)) return true;
    for (const onnx::AttributeProto& a : n.attribute()) {
      if (a.has_g() && any_node(a.g(), match)) return true;
      for (const onnx::GraphProto& sg : a.graphs())
        if (any_node(sg, match)) return true;
    }
  }
  return false;
}

int replace_nodes(
    onnx::GraphProto& g,
    const std::function<std::vector<onnx::NodeProto>(const onnx::NodeProto&)>& rewrite) {
  int count = 0;
  std::vector<std::vector<onnx::NodeProto>> parts(static_cast<size_t>(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto& n = *g.mutable_node(i);
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.has_g()) count += replace_nodes(*a.mutable_g(), rewrite);
      for (onnx::GraphProto& sg : *a.mutable_graphs()) count += replace_nodes(sg, rewrite);
    }
    parts[static_cast<size_t>(i)] = rewrite(n);
  }
  if (std::all_of(parts.begin(), parts.end(), [](const auto& p) { return p.empty(); }))
    return count;
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < g.node_size(); ++i) {
    std::vector<onnx::NodeProto>& p = parts[static_cast<size_t>(i)];
    if (p.empty()) {
      *nodes.Add() = std::move(*g.mutable_node(i));
      continue;
    }
    ++count;
    for (onnx::NodeProto& q : p) *nodes.Add() = std::move(q);
  }
  g.mutable_node()->Swap(&nodes);
  return count;
}

}  // namespace backplane::onnx_import
