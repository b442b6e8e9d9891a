#include "cmd_conformance.hpp"

#include "conformance_onnx.hpp"
#include "hygiene.hpp"
#include "ir/op_registry.hpp"
#include "npy.hpp"

#include <backplane/numerics.hpp>
#include <backplane/runtime.hpp>
#include <backplane/tensor.hpp>

#include <onnx/onnx_pb.h>
#include <nlohmann/json.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;

namespace backplane::cli {
namespace {

constexpr int kOpset = 13;

// ---------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------

// How an input's values are drawn.
enum class Values { kAny, kPositive, kNonZero, kIndex, kProbability };

struct Input {
  std::string name;
  DType dtype = DType::kFloat32;
  Shape shape;
  Values values = Values::kAny;
  bool constant = false;            // an initializer, not a graph input
  std::vector<int64_t> fixed_ints;  // a constant int64 tensor's exact values
  std::vector<float> fixed_floats;  // a constant float tensor's exact values
};

struct Attr {
  std::string name;
  enum Kind { kInt, kFloat, kInts } kind = kInt;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> ints;
};
Attr int_attr(std::string n, int64_t v) { return {std::move(n), Attr::kInt, v, 0, {}}; }
Attr float_attr(std::string n, float v) { return {std::move(n), Attr::kFloat, 0, v, {}}; }
Attr ints_attr(std::string n, std::vector<int64_t> v) {
  return {std::move(n), Attr::kInts, 0, 0, std::move(v)};
}

// One operator case: a single node.
struct OpSpec {
  std::string op;
  std::vector<Input> inputs;
  std::vector<Attr> attrs;
  DType output_dtype = DType::kFloat32;
  int opset = kOpset;       // of the op's domain
  std::string domain = "";  // ONNX's default one
  // An operator drawing random values (RandomUniform, Bernoulli, ...): its
  // outputs are checked against the distribution the node asks for (range,
  // mean, spread; dtype and shape against CpuRef's), not value by value.
  bool random = false;
};

// A case ready to run: the model and its inputs.
struct Case {
  std::string op;    // the operator it tests
  std::string name;  // what a user reads: "Add [2,3,4] [4] float32"
  std::string kind;  // "op", "edges", "round trip", "threads"
  onnx::ModelProto model;
  std::vector<std::pair<std::string, Tensor>> inputs;
  std::map<std::string, std::string> overrides;  // node -> backend
  size_t size = 0;                               // input elements, to find the smallest
  size_t spec = 0;                               // index into the catalogue
  bool random = false;                           // OpSpec::random
};

// "Add [2,3,4] [4] float32", "Conv [1,3,8,8] [4,3,3,3] pads=[1,1,1,1] float32".
std::string describe(const OpSpec& s) {
  std::ostringstream os;
  auto list = [&os](const std::vector<int64_t>& v) {
    os << '[';
    for (size_t k = 0; k < v.size(); ++k) os << (k ? "," : "") << v[k];
    os << ']';
  };
  os << s.op;
  for (const Input& in : s.inputs) {
    os << ' ';
    if (in.fixed_ints.empty()) {
      os << (in.constant ? "const" : "") << shape_to_string(in.shape);
    } else {
      os << in.name << '=';
      list(in.fixed_ints);
    }
  }
  for (const Attr& a : s.attrs) {
    os << ' ' << a.name << '=';
    if (a.kind == Attr::kInt) os << a.i;
    if (a.kind == Attr::kFloat) os << a.f;
    if (a.kind == Attr::kInts) list(a.ints);
  }
  if (!s.inputs.empty()) os << ' ' << dtype_name(s.inputs[0].dtype);
  return os.str();
}

Tensor make_values(const Input& in, uint32_t seed) {
  Tensor t(in.dtype, in.shape);
  std::mt19937 rng(seed);
  const int64_t n = t.numel();
  if (!in.fixed_ints.empty()) {
    for (int64_t k = 0; k < n; ++k) t.data_as<int64_t>()[k] = in.fixed_ints[k];
    return t;
  }
  if (!in.fixed_floats.empty()) {
    for (int64_t k = 0; k < n; ++k) t.data_as<float>()[k] = in.fixed_floats[k];
    return t;
  }
  auto real = [&]() -> double {
    std::uniform_real_distribution<double> d(-2.0, 2.0);
    double v = d(rng);
    if (in.values == Values::kProbability) return 0.05 + 0.9 * (v + 2.0) / 4.0;
    if (in.values == Values::kPositive) return std::fabs(v) + 0.1;
    if (in.values == Values::kNonZero) return v < 0 ? v - 0.5 : v + 0.5;
    return v;
  };
  auto integer = [&]() -> int64_t {
    if (in.values == Values::kIndex) return static_cast<int64_t>(rng() % 3);
    int64_t v = static_cast<int64_t>(rng() % 11) - 5;
    if (in.values == Values::kPositive) return std::llabs(v) + 1;
    if (in.values == Values::kNonZero) return v == 0 ? 3 : v;
    return v;
  };
  for (int64_t k = 0; k < n; ++k) {
    switch (in.dtype) {
      case DType::kFloat32:
        t.data_as<float>()[k] = static_cast<float>(real());
        break;
      case DType::kFloat64:
        t.data_as<double>()[k] = real();
        break;
      case DType::kInt32:
        t.data_as<int32_t>()[k] = static_cast<int32_t>(integer());
        break;
      case DType::kInt64:
        t.data_as<int64_t>()[k] = integer();
        break;
      case DType::kBool:
        t.data_as<uint8_t>()[k] = static_cast<uint8_t>(rng() % 2);
        break;
      default:
        std::memset(t.data(), 0, t.size_bytes());
    }
  }
  return t;
}

void set_type(onnx::ValueInfoProto* v, const std::string& name, DType dtype, const Shape* shape) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(dtype));
  if (shape != nullptr) {
    auto* sp = tt->mutable_shape();
    for (int64_t d : *shape) sp->add_dim()->set_dim_value(d);
  }
}

void add_initializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  onnx::TensorProto* init = g->add_initializer();
  init->set_name(name);
  init->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) init->add_dims(d);
  init->set_raw_data(t.data(), t.size_bytes());
}

void add_attrs(onnx::NodeProto* node, const std::vector<Attr>& attrs) {
  for (const Attr& a : attrs) {
    onnx::AttributeProto* p = node->add_attribute();
    p->set_name(a.name);
    if (a.kind == Attr::kInt) {
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(a.i);
    } else if (a.kind == Attr::kFloat) {
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(a.f);
    } else {
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t v : a.ints) p->add_ints(v);
    }
  }
}

// A single-node model of `spec` with inputs drawn from `seed`.
Case make_op_case(const OpSpec& spec, uint32_t seed) {
  Case c;
  c.op = spec.op;
  c.random = spec.random;
  c.kind = "op";
  c.name = describe(spec);
  c.model.set_ir_version(8);
  c.model.set_producer_name("backplane conformance");
  onnx::OperatorSetIdProto* opset = c.model.add_opset_import();
  opset->set_domain("");
  opset->set_version(spec.domain.empty() ? spec.opset : kOpset);
  if (!spec.domain.empty()) {
    opset = c.model.add_opset_import();
    opset->set_domain(spec.domain);
    opset->set_version(spec.opset);
  }
  onnx::GraphProto* g = c.model.mutable_graph();
  g->set_name("case");
  onnx::NodeProto* node = g->add_node();
  node->set_op_type(spec.op);
  node->set_domain(spec.domain);
  node->set_name("node");
  for (size_t k = 0; k < spec.inputs.size(); ++k) {
    const Input& in = spec.inputs[k];
    node->add_input(in.name);
    Tensor t = make_values(in, seed * 31u + static_cast<uint32_t>(k));
    if (in.constant) {
      add_initializer(g, in.name, t);
    } else {
      set_type(g->add_input(), in.name, in.dtype, &in.shape);
      c.size += static_cast<size_t>(t.numel());
      c.inputs.emplace_back(in.name, std::move(t));
    }
  }
  node->add_output("y");
  set_type(g->add_output(), "y", spec.output_dtype, nullptr);
  add_attrs(node, spec.attrs);
  return c;
}

// ---------------------------------------------------------------------------
// The catalogue
// ---------------------------------------------------------------------------

Input in(std::string name, Shape shape, DType dtype = DType::kFloat32,
         Values values = Values::kAny) {
  Input i;
  i.name = std::move(name);
  i.shape = std::move(shape);
  i.dtype = dtype;
  i.values = values;
  return i;
}
Input constant(Input i) {
  i.constant = true;
  return i;
}
Input ints_constant(std::string name, std::vector<int64_t> values) {
  Input i = in(std::move(name), {static_cast<int64_t>(values.size())}, DType::kInt64);
  i.constant = true;
  i.fixed_ints = std::move(values);
  return i;
}
Input float_constant(std::string name, std::vector<float> values) {
  Input i = in(std::move(name), {static_cast<int64_t>(values.size())});
  i.constant = true;
  i.fixed_floats = std::move(values);
  return i;
}

std::vector<OpSpec> catalogue() {
  std::vector<OpSpec> out;
  auto add = [&](OpSpec s) { out.push_back(std::move(s)); };
  const std::vector<Shape> unary_shapes = {{4}, {2, 3}, {2, 3, 4, 5}, {1, 8, 3, 3}, {}};

  // Unary elementwise, float32, with the values each op is defined on.
  const std::vector<std::pair<std::string, Values>> unary = {
      {"Relu", Values::kAny},      {"Sigmoid", Values::kAny},  {"Tanh", Values::kAny},
      {"Exp", Values::kAny},       {"Abs", Values::kAny},      {"Neg", Values::kAny},
      {"Sqrt", Values::kPositive}, {"Log", Values::kPositive}, {"Erf", Values::kAny},
      {"Floor", Values::kAny},     {"Ceil", Values::kAny},     {"Reciprocal", Values::kNonZero},
      {"Softplus", Values::kAny},  {"Identity", Values::kAny}};
  for (const auto& [op, values] : unary)
    for (const Shape& s : unary_shapes) add({op, {in("x", s, DType::kFloat32, values)}, {}});
  for (const Shape& s : {Shape{2, 3}, Shape{1, 4, 2, 2}}) {
    add({"LeakyRelu", {in("x", s)}, {float_attr("alpha", 0.1f)}});
    add({"LeakyRelu", {in("x", s)}, {}});
    add({"Elu", {in("x", s)}, {float_attr("alpha", 0.5f)}});
    add({"HardSigmoid", {in("x", s)}, {float_attr("alpha", 0.25f), float_attr("beta", 0.4f)}});
  }
  for (DType t : {DType::kInt32, DType::kInt64}) {
    add({"Abs", {in("x", {2, 3}, t)}, {}, t});
    add({"Neg", {in("x", {2, 3}, t)}, {}, t});
  }
  add({"Identity", {in("x", {2, 3}, DType::kInt64)}, {}, DType::kInt64});

  // Binary elementwise: same shapes and every kind of broadcast.
  const std::vector<std::pair<Shape, Shape>> pairs = {{{2, 3, 4}, {2, 3, 4}},
                                                      {{2, 3, 4}, {4}},
                                                      {{2, 3, 4}, {3, 1}},
                                                      {{2, 1, 4}, {1, 3, 1}},
                                                      {{1}, {2, 3}},
                                                      {{}, {2, 3}},
                                                      {{4, 1}, {1, 5}},
                                                      {{1, 8, 4, 4}, {1, 8, 1, 1}},
                                                      {{5}, {5}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    for (const auto& [a, b] : pairs) {
      Values bv = std::string(op) == "Div" ? Values::kNonZero : Values::kAny;
      add({op, {in("a", a), in("b", b, DType::kFloat32, bv)}, {}});
    }
  for (const auto& [a, b] : pairs)
    add({"Pow", {in("a", a, DType::kFloat32, Values::kPositive), in("b", b)}, {}});
  for (DType t : {DType::kInt32, DType::kInt64})
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"}) {
      Values bv = std::string(op) == "Div" ? Values::kNonZero : Values::kAny;
      add({op, {in("a", {2, 3}, t), in("b", {3}, t, bv)}, {}, t});
      add({op, {in("a", {2, 3}, t), in("b", {2, 3}, t, bv)}, {}, t});
    }
  for (const char* op : {"Greater", "Less", "Equal"}) {
    add({op, {in("a", {2, 3}), in("b", {3})}, {}, DType::kBool});
    add({op, {in("a", {2, 3}, DType::kInt64), in("b", {2, 3}, DType::kInt64)}, {}, DType::kBool});
  }
  // A constant operand (a bias, a scale): the backend reads it as a weight.
  add({"Add", {in("a", {2, 3, 4}), constant(in("b", {4}))}, {}});
  add({"Mul", {in("a", {1, 8, 4, 4}), constant(in("b", {1, 8, 1, 1}))}, {}});

  // MatMul: 1-D operands, batches, broadcast batches, a constant weight.
  for (const auto& [a, b] : std::vector<std::pair<Shape, Shape>>{{{2, 3}, {3, 4}},
                                                                 {{3}, {3, 4}},
                                                                 {{2, 3}, {3}},
                                                                 {{2, 2, 3}, {3, 4}},
                                                                 {{2, 2, 3}, {2, 3, 4}},
                                                                 {{1, 2, 3, 4}, {2, 4, 5}},
                                                                 {{7, 16}, {16, 9}}})
    add({"MatMul", {in("a", a), in("b", b)}, {}});
  add({"MatMul", {in("a", {4, 8}), constant(in("b", {8, 3}))}, {}});

  // Gemm: transposes, alpha/beta, C broadcast from a vector or a scalar.
  add({"Gemm", {in("a", {2, 3}), in("b", {3, 4}), in("c", {4})}, {}});
  add({"Gemm", {in("a", {3, 2}), in("b", {3, 4}), in("c", {2, 4})}, {int_attr("transA", 1)}});
  add({"Gemm", {in("a", {2, 3}), in("b", {4, 3}), in("c", {1})}, {int_attr("transB", 1)}});
  add({"Gemm",
       {in("a", {2, 3}), constant(in("b", {3, 4})), constant(in("c", {4}))},
       {float_attr("alpha", 0.5f), float_attr("beta", 2.0f)}});
  add({"Gemm", {in("a", {2, 3}), in("b", {3, 4})}, {}});

  // Conv: padding, strides, dilations, groups, 1x1, no bias, asymmetric pads.
  auto conv = [&](Shape x, Shape w, bool bias, std::vector<Attr> attrs) {
    OpSpec s{"Conv", {in("x", x), constant(in("w", w))}, std::move(attrs)};
    if (bias) s.inputs.push_back(constant(in("b", {w[0]})));
    add(std::move(s));
  };
  conv({1, 3, 8, 8}, {4, 3, 3, 3}, true, {ints_attr("pads", {1, 1, 1, 1})});
  conv({1, 3, 8, 8}, {4, 3, 3, 3}, false, {});
  conv({2, 3, 9, 9}, {4, 3, 3, 3}, true, {ints_attr("strides", {2, 2})});
  conv({1, 2, 9, 9}, {3, 2, 3, 3}, true, {ints_attr("dilations", {2, 2})});
  conv({1, 4, 6, 6}, {4, 1, 3, 3}, true, {int_attr("group", 4), ints_attr("pads", {1, 1, 1, 1})});
  conv({1, 4, 6, 6}, {6, 2, 3, 3}, true, {int_attr("group", 2)});
  conv({1, 8, 5, 5}, {4, 8, 1, 1}, true, {});
  conv({1, 3, 7, 7}, {2, 3, 3, 3}, true, {ints_attr("pads", {0, 1, 2, 1})});

  // Pools.
  for (const char* op : {"MaxPool", "AveragePool"}) {
    add({op,
         {in("x", {1, 2, 6, 6})},
         {ints_attr("kernel_shape", {2, 2}), ints_attr("strides", {2, 2})}});
    add({op,
         {in("x", {1, 3, 7, 7})},
         {ints_attr("kernel_shape", {3, 3}), ints_attr("pads", {1, 1, 1, 1})}});
    add({op,
         {in("x", {2, 2, 7, 7})},
         {ints_attr("kernel_shape", {3, 3}), ints_attr("strides", {2, 2}),
          int_attr("ceil_mode", 1)}});
  }
  add({"AveragePool",
       {in("x", {1, 3, 7, 7})},
       {ints_attr("kernel_shape", {3, 3}), ints_attr("pads", {1, 1, 1, 1}),
        int_attr("count_include_pad", 1)}});
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    add({op, {in("x", {1, 3, 5, 5})}, {}});
    add({op, {in("x", {2, 8, 3, 3})}, {}});
  }

  // Normalisation and friends.
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    add({op, {in("x", {2, 5})}, {}});
    add({op, {in("x", {2, 3, 4})}, {int_attr("axis", 1)}});
    add({op, {in("x", {2, 3, 4})}, {int_attr("axis", 0)}});
  }
  {
    OpSpec bn{
        "BatchNormalization",
        {in("x", {1, 3, 4, 4}), constant(in("scale", {3})), constant(in("bias", {3})),
         constant(in("mean", {3})), constant(in("var", {3}, DType::kFloat32, Values::kPositive))},
        {float_attr("epsilon", 1e-3f)}};
    add(bn);
    bn.inputs[0].shape = {2, 3, 2, 5};
    add(bn);
  }

  // Shape movers.
  add({"Transpose", {in("x", {2, 3, 4})}, {ints_attr("perm", {2, 0, 1})}});
  add({"Transpose", {in("x", {2, 3, 4})}, {}});
  add({"Transpose", {in("x", {1, 2, 3, 4})}, {ints_attr("perm", {0, 2, 3, 1})}});
  add({"Reshape", {in("x", {2, 3, 4}), ints_constant("shape", {4, 6})}, {}});
  add({"Reshape", {in("x", {2, 3, 4}), ints_constant("shape", {-1, 4})}, {}});
  add({"Reshape", {in("x", {2, 3, 4}), ints_constant("shape", {2, 0, -1})}, {}});
  for (int64_t axis : {0, 1, 2}) add({"Flatten", {in("x", {2, 3, 4})}, {int_attr("axis", axis)}});
  add({"Concat", {in("a", {2, 3}), in("b", {2, 4})}, {int_attr("axis", 1)}});
  add({"Concat", {in("a", {1, 3}), in("b", {2, 3}), in("c", {3, 3})}, {int_attr("axis", 0)}});
  add({"Concat", {in("a", {1, 2, 2, 2}), in("b", {1, 3, 2, 2})}, {int_attr("axis", 1)}});
  add({"Squeeze", {in("x", {2, 1, 3, 1}), ints_constant("axes", {1, 3})}, {}});
  add({"Unsqueeze", {in("x", {2, 3}), ints_constant("axes", {0, 3})}, {}});
  add({"Slice",
       {in("x", {4, 6}), ints_constant("starts", {1, 0}), ints_constant("ends", {3, 6})},
       {}});
  add({"Slice",
       {in("x", {4, 6}), ints_constant("starts", {0}), ints_constant("ends", {6}),
        ints_constant("axes", {1}), ints_constant("steps", {2})},
       {}});
  {
    Input idx = in("indices", {3}, DType::kInt64, Values::kIndex);
    add({"Gather", {in("data", {5, 4}), idx}, {}});
    add({"Gather", {in("data", {5, 4}), idx}, {int_attr("axis", 1)}});
  }

  // Reductions.
  for (const char* op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"}) {
    add({op, {in("x", {2, 3, 4})}, {ints_attr("axes", {1})}});
    add({op, {in("x", {2, 3, 4})}, {ints_attr("axes", {0, 2}), int_attr("keepdims", 0)}});
    add({op, {in("x", {2, 3, 4})}, {}});
  }
  add({"ReduceSum", {in("x", {2, 3, 4}), ints_constant("axes", {1})}, {}});
  add({"ReduceSum",
       {in("x", {2, 3, 4}), ints_constant("axes", {0, 2})},
       {int_attr("keepdims", 0)}});

  // Clip with constant bounds, Cast, Where.
  {
    Input lo = float_constant("min", {-0.5f});
    Input hi = float_constant("max", {0.5f});
    lo.shape = hi.shape = {};
    add({"Clip", {in("x", {2, 3, 4}), lo, hi}, {}});
  }
  add({"Cast",
       {in("x", {2, 3})},
       {int_attr("to", static_cast<int64_t>(DType::kInt32))},
       DType::kInt32});
  add({"Cast", {in("x", {2, 3}, DType::kInt64)}, {int_attr("to", 1)}, DType::kFloat32});
  add({"Where", {in("c", {2, 3}, DType::kBool), in("a", {2, 3}), in("b", {3})}, {}});

  // Operators no ONNX node case of onnx 1.12 covers (newer than it, or not
  // ONNX's): the opset or domain they are defined in.
  for (DType t : {DType::kInt32, DType::kInt64}) {
    for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) {
      add({op, {in("a", {2, 3, 4}, t), in("b", {2, 3, 4}, t)}, {}, t, 18});
      add({op, {in("a", {2, 3, 4}, t), in("b", {4}, t)}, {}, t, 18});
    }
    add({"BitwiseNot", {in("x", {2, 3}, t)}, {}, t, 18});
  }
  for (const Shape& s : {Shape{2, 3}, Shape{1, 4, 2, 2}}) {
    add({"Mish", {in("x", s)}, {}, DType::kFloat32, 18});
    add({"Gelu", {in("x", s)}, {}, DType::kFloat32, 1, "com.microsoft"});
  }
  // ONNX Runtime's 4-bit MatMul, weights [N, blocks, block / 2] two values a
  // byte: one row (a token) and several, with and without zero points.
  for (const Shape& a : {Shape{1, 64}, Shape{2, 3, 64}}) {
    const int64_t n = 8, blocks = 2;
    const Input q = constant(in("B", {n, blocks, 16}, DType::kUInt8));
    const Input scales = constant(in("scales", {n * blocks}, DType::kFloat32, Values::kPositive));
    const std::vector<Attr> attrs = {int_attr("K", 64), int_attr("N", n), int_attr("bits", 4),
                                     int_attr("block_size", 32)};
    add({"MatMulNBits", {in("a", a), q, scales}, attrs, DType::kFloat32, 1, "com.microsoft"});
    add({"MatMulNBits",
         {in("a", a), q, scales,
          constant(in("zero_points", {n * ((blocks + 1) / 2)}, DType::kUInt8))},
         attrs,
         DType::kFloat32,
         1,
         "com.microsoft"});
  }
  // ONNX Runtime's 4-bit embedding table, uint8 [rows, width / 2] two values
  // a byte in blocks along the width: with and without zero points.
  for (bool zero_points : {false, true}) {
    const int64_t rows = 5, blocks = 3;
    std::vector<Input> inputs = {
        constant(in("data", {rows, 24}, DType::kUInt8)),
        in("indices", {2, 2}, DType::kInt64, Values::kIndex),
        constant(in("scales", {rows, blocks}, DType::kFloat32, Values::kPositive))};
    if (zero_points)
      inputs.push_back(constant(in("zero_points", {rows, (blocks + 1) / 2}, DType::kUInt8)));
    add({"GatherBlockQuantized",
         inputs,
         {int_attr("block_size", 16), int_attr("bits", 4)},
         DType::kFloat32,
         1,
         "com.microsoft"});
  }
  add({"LpNormalization", {in("x", {2, 3, 4})}, {}});
  add({"LpNormalization", {in("x", {2, 3, 4})}, {int_attr("axis", 1), int_attr("p", 1)}});
  add({"GlobalLpPool", {in("x", {1, 3, 5, 5})}, {}});
  add({"GlobalLpPool", {in("x", {2, 2, 3, 3})}, {int_attr("p", 1)}});
  add({"LpPool",
       {in("x", {1, 2, 6, 6})},
       {ints_attr("kernel_shape", {2, 2}), ints_attr("strides", {2, 2})}});
  add({"LpPool",
       {in("x", {1, 3, 5, 5})},
       {ints_attr("kernel_shape", {3, 3}), ints_attr("pads", {1, 1, 1, 1}), int_attr("p", 1)}});
  add({"GroupNormalization",
       {in("x", {2, 4, 3, 3}), constant(in("scale", {2})), constant(in("bias", {2}))},
       {int_attr("num_groups", 2)},
       DType::kFloat32,
       18});
  add({"CenterCropPad",
       {in("x", {5, 6}), ints_constant("shape", {3, 8})},
       {},
       DType::kFloat32,
       18});
  add({"Col2Im",
       {in("x", {1, 4, 9}), ints_constant("image_shape", {4, 4}),
        ints_constant("block_shape", {2, 2})},
       {},
       DType::kFloat32,
       18});
  // Random values, checked against their distribution (OpSpec::random).
  auto random = [&](OpSpec spec) {
    spec.random = true;
    add(std::move(spec));
  };
  random({"RandomUniform",
          {},
          {ints_attr("shape", {64, 64}), float_attr("low", -2), float_attr("high", 3),
           float_attr("seed", 5)}});
  random({"RandomNormal",
          {},
          {ints_attr("shape", {64, 64}), float_attr("mean", 1), float_attr("scale", 2)}});
  random(
      {"RandomUniformLike", {in("x", {64, 64})}, {float_attr("low", -1), float_attr("high", 1)}});
  random({"RandomNormalLike",
          {in("x", {64, 64})},
          {float_attr("mean", -1), float_attr("scale", 0.5f)}});
  random({"Bernoulli",
          {in("p", {64, 64}, DType::kFloat32, Values::kProbability)},
          {},
          DType::kFloat32,
          15});
  random({"Multinomial", {in("logits", {2, 5})}, {int_attr("sample_size", 2000)}, DType::kInt32});
  {
    Input rois = float_constant("rois", {0, 0, 0, 3, 3, 0, 1, 2, 5, 5});  // [batch, x1, y1, x2, y2]
    rois.shape = {2, 5};
    add({"MaxRoiPool", {in("x", {1, 2, 6, 6}), rois}, {ints_attr("pooled_shape", {2, 2})}});
  }
  return out;
}

// ---------------------------------------------------------------------------
// Running and comparing
// ---------------------------------------------------------------------------

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

Result<std::vector<Tensor>> run_model(Model& model,
                                      const std::vector<std::pair<std::string, Tensor>>& inputs) {
  BP_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, model.create_session());
  for (const auto& [name, t] : inputs) BP_RETURN_IF_ERROR(session->set_input(name, t));
  BP_RETURN_IF_ERROR(session->run());
  std::vector<Tensor> out;
  for (size_t k = 0; k < session->num_outputs(); ++k) out.push_back(session->output(k).clone());
  return out;
}

// "" when every output of `got` matches CpuRef's `want` under the numerics
// policy (include/backplane/numerics.hpp), else what differs first.
std::string compare(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() != want.size())
    return std::to_string(got.size()) + " outputs, CpuRef has " + std::to_string(want.size());
  for (size_t o = 0; o < got.size(); ++o) {
    const numerics::Comparison c = numerics::compare(got[o], want[o]);
    if (!c.within())
      return "output " + std::to_string(o) + ": " + c.describe(want[o].shape()) + " against CpuRef";
  }
  return "";
}

// A float attribute of the case's node, or `fallback`.
float node_float(const Case& c, const char* name, float fallback) {
  for (const onnx::AttributeProto& a : c.model.graph().node(0).attribute())
    if (a.name() == name) return a.f();
  return fallback;
}

// The output of a random operator against the distribution its node asks
// for: "" when it fits. Dtype and shape must be CpuRef's; the values are
// checked by range and by mean and spread within several standard errors
// (a backend drawing from the wrong distribution, or the same value
// everywhere, fails; an honest one passes all but astronomically rarely).
std::string compare_random(const Case& c, const std::vector<Tensor>& got,
                           const std::vector<Tensor>& want) {
  if (got.size() != 1 || want.size() != 1)
    return std::to_string(got.size()) + " outputs, CpuRef has " + std::to_string(want.size());
  const Tensor& g = got[0];
  if (g.dtype() != want[0].dtype())
    return std::string("output 0 is ") + dtype_name(g.dtype()) + ", CpuRef's is " +
           dtype_name(want[0].dtype());
  if (g.shape() != want[0].shape())
    return "output 0 has shape " + shape_to_string(g.shape()) + ", CpuRef's is " +
           shape_to_string(want[0].shape());
  const int64_t n = g.numel();
  if (n == 0) return "";
  auto value = [&](int64_t k) -> double {
    switch (g.dtype()) {
      case DType::kFloat32:
        return g.data_as<float>()[k];
      case DType::kFloat64:
        return g.data_as<double>()[k];
      case DType::kInt32:
        return g.data_as<int32_t>()[k];
      case DType::kInt64:
        return static_cast<double>(g.data_as<int64_t>()[k]);
      default:
        return std::nan("");
    }
  };
  double sum = 0, sq = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double v = value(k);
    if (!std::isfinite(v)) return "output 0[" + std::to_string(k) + "] is not a finite number";
    sum += v;
    sq += v * v;
  }
  const double mean = sum / static_cast<double>(n);
  const double sd = std::sqrt(std::max(0.0, sq / static_cast<double>(n) - mean * mean));
  std::ostringstream os;
  auto near = [&](const char* what, double got_v, double want_v, double tolerance) {
    if (std::fabs(got_v - want_v) <= tolerance) return true;
    os << "the " << what << " of the " << n << " values is " << got_v << ", the distribution's is "
       << want_v << " (tolerance " << tolerance << ")";
    return false;
  };
  const std::string& op = c.op;
  const double rn = std::sqrt(static_cast<double>(n));
  if (op == "RandomUniform" || op == "RandomUniformLike") {
    const double lo = node_float(c, "low", 0), hi = node_float(c, "high", 1), w = hi - lo;
    for (int64_t k = 0; k < n; ++k)
      if (value(k) < lo || value(k) > hi)
        return "output 0[" + std::to_string(k) + "] is " + std::to_string(value(k)) +
               ", outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
    // Standard error of the mean w/sqrt(12 n); of the spread about w/sqrt(60 n).
    if (!near("mean", mean, (lo + hi) / 2, 6 * w / std::sqrt(12.0) / rn) ||
        !near("standard deviation", sd, w / std::sqrt(12.0), 6 * w / std::sqrt(60.0) / rn))
      return os.str();
  } else if (op == "RandomNormal" || op == "RandomNormalLike") {
    const double m = node_float(c, "mean", 0), scale = node_float(c, "scale", 1);
    if (!near("mean", mean, m, 6 * scale / rn) ||
        !near("standard deviation", sd, scale, 6 * scale / std::sqrt(2.0) / rn))
      return os.str();
  } else if (op == "Bernoulli") {
    const Tensor& p = c.inputs.at(0).second;
    double expect = 0, var = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (value(k) != 0 && value(k) != 1)
        return "output 0[" + std::to_string(k) + "] is " + std::to_string(value(k)) +
               ", neither 0 nor 1";
      const double pk = p.data_as<float>()[k];
      expect += pk;
      var += pk * (1 - pk);
    }
    if (!near("sum", sum, expect, 6 * std::sqrt(var) + 1)) return os.str();
  } else if (op == "Multinomial") {
    // Per row: how often each class is drawn against softmax(logits).
    const Tensor& logits = c.inputs.at(0).second;
    const int64_t rows = logits.shape()[0], classes = logits.shape()[1], draws = g.shape()[1];
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<double> prob(static_cast<size_t>(classes)), seen(static_cast<size_t>(classes), 0);
      double z = 0;
      for (int64_t j = 0; j < classes; ++j)
        z += prob[j] = std::exp(static_cast<double>(logits.data_as<float>()[r * classes + j]));
      for (int64_t s = 0; s < draws; ++s) {
        const double v = value(r * draws + s);
        if (v < 0 || v >= static_cast<double>(classes) || v != std::floor(v))
          return "output 0[" + std::to_string(r) + "," + std::to_string(s) + "] is " +
                 std::to_string(v) + ", not a class of [0, " + std::to_string(classes) + ")";
        seen[static_cast<size_t>(v)] += 1;
      }
      for (int64_t j = 0; j < classes; ++j) {
        const double pj = prob[j] / z, f = seen[j] / static_cast<double>(draws);
        if (!near("share of class drawn", f, pj,
                  6 * std::sqrt(pj * (1 - pj) / static_cast<double>(draws)) + 1e-3))
          return "row " + std::to_string(r) + ", class " + std::to_string(j) + ": " + os.str();
      }
    }
  } else {
    return "no distribution known for " + op;
  }
  return "";
}

// A case's outputs against CpuRef's: value by value, or by distribution.
std::string check_outputs(const Case& c, const std::vector<Tensor>& got,
                          const std::vector<Tensor>& want) {
  return c.random ? compare_random(c, got, want) : compare(got, want);
}

enum class Outcome { kPass, kFail, kUnsupported };

struct CaseResult {
  Outcome outcome = Outcome::kPass;
  std::string reason;
};

class Runner {
 public:
  // `rerun_options`: the global options a rerun of a failing case needs
  // (" --backend-path DIR"), printed with it.
  Runner(Runtime& rt, const ConformanceCommand& cmd, std::string scratch, std::string rerun_options)
      : rt_(rt), cmd_(cmd), scratch_(std::move(scratch)), rerun_(std::move(rerun_options)) {}

  // Prints the hygiene contract's verdicts (hygiene.hpp) and counts each rule
  // as a case: kept passes, broken fails.
  void record_hygiene(const HygieneReport& report);

  int run();

 private:
  std::string write_model(const Case& c) {
    std::string path = scratch_ + "/case" + std::to_string(files_++) + ".onnx";
    std::ofstream out(path, std::ios::binary);
    c.model.SerializeToOstream(&out);
    return path;
  }
  Result<std::shared_ptr<Model>> load(const std::string& path, std::vector<std::string> backends,
                                      const std::map<std::string, std::string>& overrides = {}) {
    ModelOptions o;
    o.backends = std::move(backends);
    o.overrides = overrides;
    return rt_.load_model(path, o);
  }
  Result<std::vector<Tensor>> reference(const Case& c, const std::string& path) {
    BP_ASSIGN_OR_RETURN(std::shared_ptr<Model> m, load(path, {"CpuRef"}));
    return run_model(*m, c.inputs);
  }
  CaseResult run_op_case(Case& c, bool* taken);
  CaseResult run_edges(const Case& c, bool chain, DType in_dtype, DType out_dtype);
  CaseResult run_round_trip(const Case& c);
  CaseResult run_threads(const Case& base, const OpSpec& spec, uint32_t seed);
  // The installed ONNX node cases (conformance_onnx.hpp) of the operators
  // the backend claims; adds those operators to `claimed`.
  void run_onnx_cases(std::set<std::string>* claimed, std::set<std::string>* covered);
  struct Loaded {
    std::shared_ptr<Model> model;
    std::set<std::string> bound;  // inputs made constants (their data set's values)
    onnx::ModelProto proto;       // the model loaded
  };
  Result<Loaded> load_onnx(const OnnxCase& oc, const OnnxDataSet& ds,
                           std::vector<std::string> backends);
  Result<std::vector<Tensor>> run_onnx(const OnnxCase& oc, const OnnxDataSet& ds,
                                       const Loaded& loaded);
  CaseResult run_onnx_case(const OnnxCase& oc, Case* failing);
  std::string probe_model(const ir::OpSchema& schema);
  void report_uncovered(const std::set<std::string>& covered, std::set<std::string>* claimed);
  // `ops`: the operators the outcome counts for (default: c.op).
  void record(const Case& c, const CaseResult& r, const std::set<std::string>& ops = {});
  void write_smallest_failure();

  Runtime& rt_;
  const ConformanceCommand& cmd_;
  std::string scratch_;
  std::string rerun_;
  size_t files_ = 0;
  size_t passed_ = 0, failed_ = 0, unsupported_ = 0;
  std::vector<Case> failures_;
  struct Counts {
    size_t passed = 0, failed = 0, unsupported = 0;
  };
  std::map<std::string, Counts> per_op_;
};

CaseResult fail(std::string why) { return {Outcome::kFail, std::move(why)}; }
CaseResult unsupported(std::string why) { return {Outcome::kUnsupported, std::move(why)}; }

CaseResult Runner::run_op_case(Case& c, bool* taken) {
  *taken = false;
  const std::string path = write_model(c);
  auto want = reference(c, path);
  if (!want.ok())
    return fail("the reference CpuRef cannot run this case: " + want.status().message());
  // The outputs' shapes, now known, complete the model (a file the ONNX
  // checker accepts when it is written as a failing case).
  onnx::GraphProto* g = c.model.mutable_graph();
  for (int k = 0; k < g->output_size() && k < static_cast<int>(want->size()); ++k) {
    auto* shape = g->mutable_output(k)->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : (*want)[k].shape()) shape->add_dim()->set_dim_value(d);
  }
  auto model = load(path, {cmd_.backend});
  if (!model.ok()) {
    if (model.status().code() == StatusCode::kUnsupported)
      return unsupported(first_line(model.status().message()));
    return fail("load: " + first_line(model.status().message()));
  }
  *taken = true;
  auto got = run_model(**model, c.inputs);
  if (!got.ok()) return fail("run: " + first_line(got.status().message()));
  if (std::string diff = check_outputs(c, *got, *want); !diff.empty()) return fail(diff);
  return {};
}

// Dtypes Neg takes (the op pinned to CpuRef around the tested one).
bool negatable(DType t) { return t == DType::kFloat32 || t == DType::kInt32 || t == DType::kInt64; }

// The case's node with Neg, pinned to CpuRef, around it: for an elementwise
// op (`chain`), the node three times with a Neg between each (two edges each
// way); for any other, a Neg before its first input and/or after its output
// (where Neg takes the dtype). Tensors so go to and from the backend's
// memory at every edge. `mine` is how many partitions the backend must get.
CaseResult Runner::run_edges(const Case& c, bool chain, DType in_dtype, DType out_dtype) {
  Case e = c;
  e.kind = "edges";
  onnx::GraphProto* g = e.model.mutable_graph();
  const onnx::NodeProto first = g->node(0);
  g->clear_node();
  auto neg = [&](const std::string& name, const std::string& from, const std::string& to) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type("Neg");
    n->set_name(name);
    n->add_input(from);
    n->add_output(to);
    e.overrides[name] = "CpuRef";
  };
  size_t expected = 1;
  if (chain) {
    e.name = c.name + ", 3 times with Neg on CpuRef between";
    std::string x = first.input(0);
    for (int k = 0; k < 3; ++k) {
      onnx::NodeProto* n = g->add_node();
      *n = first;
      n->set_name("op" + std::to_string(k));
      n->set_input(0, x);
      n->set_output(0, k == 2 ? "y" : "t" + std::to_string(k));
      if (k == 2) break;
      x = "n" + std::to_string(k);
      neg("neg" + std::to_string(k), "t" + std::to_string(k), x);
    }
    expected = 3;
  } else {
    const bool before = negatable(in_dtype), after = negatable(out_dtype);
    if (!before && !after) return unsupported("no edge to make: Neg takes none of its dtypes");
    e.name = c.name + ", with Neg on CpuRef" + (before ? " before" : "") +
             (before && after ? " and" : "") + (after ? " after" : "");
    if (before) neg("neg_in", first.input(0), "x_neg");
    onnx::NodeProto* n = g->add_node();
    *n = first;
    n->set_name("op");
    if (before) n->set_input(0, "x_neg");
    if (after) {
      n->set_output(0, "y_op");
      neg("neg_out", "y_op", first.output(0));
    }
  }
  const std::string path = write_model(e);
  auto ref_model = load(path, {"CpuRef"});
  if (!ref_model.ok())
    return fail("the reference CpuRef cannot run this case: " + ref_model.status().message());
  auto want = run_model(**ref_model, e.inputs);
  if (!want.ok()) return fail("CpuRef: " + want.status().message());
  auto model = load(path, {cmd_.backend, "CpuRef"}, e.overrides);
  if (!model.ok()) return fail("load: " + first_line(model.status().message()));
  size_t mine = 0, all = (*model)->partitions().size();
  for (const PartitionDescription& p : (*model)->partitions()) mine += p.backend == cmd_.backend;
  if (cmd_.backend != "CpuRef" && (mine != expected || all == mine)) {
    failures_.push_back(e);
    return fail("expected " + std::to_string(expected) + " partition(s) on " + cmd_.backend +
                " between CpuRef's, the plan has " + std::to_string(mine) + " of " +
                std::to_string(all));
  }
  auto got = run_model(**model, e.inputs);
  CaseResult r;
  if (!got.ok()) r = fail("run: " + first_line(got.status().message()));
  else if (std::string diff = compare(*got, *want); !diff.empty()) r = fail(diff);
  if (r.outcome == Outcome::kFail) failures_.push_back(e);
  return r;
}

// Compiled into an artifact with the backend, loaded back (deserialize), run.
CaseResult Runner::run_round_trip(const Case& c) {
  const std::string path = write_model(c);
  auto want = reference(c, path);
  if (!want.ok()) return fail("CpuRef: " + want.status().message());
  const std::string bpk = scratch_ + "/case" + std::to_string(files_++) + ".bpk";
  CompileOptions co;
  co.backends = {cmd_.backend};
  auto report = rt_.compile({{"main", path}}, bpk, co);
  if (!report.ok()) {
    // A backend may reject a node when compiling ahead of time that it took
    // when compiling for a run (its compile reports it rejected).
    if (report.status().code() == StatusCode::kUnsupported)
      return unsupported("compile: " + first_line(report.status().message()));
    return fail("compile: " + first_line(report.status().message()));
  }
  if (report->payload_bytes == 0)
    return unsupported("the backend stores no payload (no BP_BACKEND_FLAG_SERIALIZE)");
  auto model = load(bpk, {cmd_.backend});
  if (!model.ok()) return fail("load of the artifact: " + first_line(model.status().message()));
  for (const std::string& note : (*model)->notes())
    return fail("the payload was not deserialized: " + note);
  auto got = run_model(**model, c.inputs);
  if (!got.ok()) return fail("run: " + first_line(got.status().message()));
  if (std::string diff = check_outputs(c, *got, *want); !diff.empty()) return fail(diff);
  return {};
}

// One model, 4 sessions (an execution context each) run from 4 threads at
// once, each on its own inputs, 3 times.
CaseResult Runner::run_threads(const Case& base, const OpSpec& spec, uint32_t seed) {
  constexpr int kThreads = 4;
  std::vector<Case> cases;
  std::vector<std::vector<Tensor>> want;
  const std::string path = write_model(base);
  for (int t = 0; t < kThreads; ++t) {
    // The same model (its constants are base's), other inputs.
    cases.push_back(make_op_case(spec, seed + 1000u * static_cast<uint32_t>(t + 1)));
    cases[t].model = base.model;
    auto w = reference(cases[t], path);
    if (!w.ok()) return fail("CpuRef: " + w.status().message());
    want.push_back(std::move(*w));
  }
  auto model = load(path, {cmd_.backend});
  if (!model.ok()) return fail("load: " + first_line(model.status().message()));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto session = (*model)->create_session();
      if (!session.ok()) {
        errors[t] = session.status().message();
        return;
      }
      for (int round = 0; round < 3 && errors[t].empty(); ++round) {
        for (const auto& [name, tensor] : cases[t].inputs)
          if (Status s = (*session)->set_input(name, tensor); !s.ok()) errors[t] = s.message();
        if (Status s = (*session)->run(); !s.ok()) errors[t] = s.message();
        if (!errors[t].empty()) break;
        std::vector<Tensor> got;
        for (size_t k = 0; k < (*session)->num_outputs(); ++k)
          got.push_back((*session)->output(k).clone());
        errors[t] = check_outputs(cases[t], got, want[t]);
      }
    });
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    if (!errors[t].empty()) {
      Case c = cases[t];
      c.kind = "threads";
      c.name = cases[t].name + ", " + std::to_string(kThreads) + " sessions on " +
               std::to_string(kThreads) + " threads";
      failures_.push_back(c);
      return fail("thread " + std::to_string(t) + ": " + first_line(errors[t]));
    }
  return {};
}

void Runner::record_hygiene(const HygieneReport& report) {
  std::cout << cmd_.backend << ": hygiene (process state across load, configure, compile, "
                               "execute and unload)\n";
  for (const HygieneResult& r : report.rules) {
    std::cout << "  " << r.rule << ": " << (r.violation.empty() ? "kept" : "BROKEN " + r.violation)
              << "\n";
    if (r.violation.empty()) ++passed_;
    else ++failed_;
  }
  if (!report.note.empty()) std::cout << "  (" << report.note << ")\n";
}

void Runner::record(const Case& c, const CaseResult& r, const std::set<std::string>& ops) {
  const char* tag = r.outcome == Outcome::kPass   ? "pass"
                    : r.outcome == Outcome::kFail ? "FAIL"
                                                  : "unsupported";
  if (r.outcome == Outcome::kPass) ++passed_;
  if (r.outcome == Outcome::kFail) ++failed_;
  if (r.outcome == Outcome::kUnsupported) ++unsupported_;
  for (const std::string& op : ops.empty() ? std::set<std::string>{c.op} : ops) {
    Counts& n = per_op_[op];
    ++(r.outcome == Outcome::kPass   ? n.passed
       : r.outcome == Outcome::kFail ? n.failed
                                     : n.unsupported);
  }
  if (r.outcome == Outcome::kFail || cmd_.verbose)
    std::cout << "  " << tag << "  " << (c.kind == "op" ? "" : c.kind + ": ") << c.name
              << (r.reason.empty() ? "" : ": " + r.reason) << "\n";
}

std::string safe(std::string s) {
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

void Runner::write_smallest_failure() {
  if (failures_.empty()) return;
  const Case& c = *std::min_element(failures_.begin(), failures_.end(),
                                    [](const Case& a, const Case& b) { return a.size < b.size; });
  std::error_code ec;
  fs::create_directories(cmd_.case_dir, ec);
  const std::string base =
      (fs::absolute(cmd_.case_dir) / (cmd_.backend + "_" + safe(c.op) + "_" + safe(c.kind)))
          .lexically_normal()
          .string();
  const std::string model = base + ".onnx";
  std::ofstream out(model, std::ios::binary);
  if (!c.model.SerializeToOstream(&out) || !out.flush()) {
    std::cerr << "error: cannot write " << model << "\n";
    return;
  }
  std::string args;
  for (const auto& [name, t] : c.inputs) {
    const std::string npy = base + "." + safe(name) + ".npy";
    if (Status s = npy::write(npy, t); !s.ok()) {
      std::cerr << "error: " << s.message() << "\n";
      return;
    }
    args += " --input " + name + "=" + npy;
  }
  std::string pins;
  for (const auto& [node, backend] : c.overrides) pins += " --override " + node + "=" + backend;
  std::cout << "smallest failing case: " << c.name << "\n"
            << "  written to " << model << " (inputs beside it)\n"
            << "  rerun: backplane run " << model << " --backends " << cmd_.backend
            << (c.overrides.empty() ? "" : ",CpuRef") << rerun_ << pins << args << " --output-dir "
            << base << ".out\n"
            << "  and:   backplane run " << model << " --backends CpuRef" << args
            << " --output-dir " << base << ".ref\n";
}

// ---------------------------------------------------------------------------
// The installed ONNX node cases
// ---------------------------------------------------------------------------

// Loads the case for `ds` on `backends`. The inputs the model leaves symbolic
// get `ds`'s shapes; a load the runtime refuses as invalid (a shape-deciding
// value, such as Reshape's shape, fed as a graph input) is retried once with
// the small inputs (rank <= 1, at most 8 elements) made constants holding
// `ds`'s values, as the build tree's runner of these cases does.
Result<Runner::Loaded> Runner::load_onnx(const OnnxCase& oc, const OnnxDataSet& ds,
                                         std::vector<std::string> backends) {
  ModelOptions mo;
  mo.backends = std::move(backends);
  const onnx::GraphProto& g = oc.model.graph();
  for (size_t j = 0; j < ds.inputs.size() && j < static_cast<size_t>(g.input_size()); ++j) {
    const auto& vi = g.input(static_cast<int>(j));
    const auto& tt = vi.type().tensor_type();
    bool fixed = tt.has_shape() && tt.shape().dim_size() == static_cast<int>(ds.inputs[j].rank());
    for (int d = 0; fixed && d < tt.shape().dim_size(); ++d)
      fixed = tt.shape().dim(d).has_dim_value();
    if (!fixed) mo.input_shapes[vi.name()] = ds.inputs[j].shape();
  }
  auto model = rt_.load_model(oc.model_path, mo);
  if (model.ok()) return Loaded{*model, {}, oc.model};
  if (model.status().code() != StatusCode::kInvalidArgument) return model.status();
  Loaded l{nullptr, {}, oc.model};
  onnx::GraphProto* pg = l.proto.mutable_graph();
  for (size_t j = 0; j < ds.inputs.size() && j < static_cast<size_t>(pg->input_size()); ++j) {
    const Tensor& t = ds.inputs[j];
    if (t.rank() > 1 || t.numel() > 8) continue;
    const std::string name = pg->input(static_cast<int>(j)).name();
    add_initializer(pg, name, t);
    l.bound.insert(name);
  }
  if (l.bound.empty()) return model.status();
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  for (const auto& vi : pg->input())
    if (!l.bound.count(vi.name())) *kept.Add() = vi;
  pg->mutable_input()->Swap(&kept);
  if (l.proto.ir_version() < 4) l.proto.set_ir_version(4);
  for (const std::string& name : l.bound) mo.input_shapes.erase(name);
  Case bound;
  bound.model = l.proto;
  auto retried = rt_.load_model(write_model(bound), mo);
  if (!retried.ok())
    return Status(retried.status().code(), model.status().message() +
                                               " [retried with its small inputs as constants: " +
                                               first_line(retried.status().message()) + "]");
  l.model = *retried;
  return l;
}

Result<std::vector<Tensor>> Runner::run_onnx(const OnnxCase& oc, const OnnxDataSet& ds,
                                             const Loaded& loaded) {
  std::vector<std::pair<std::string, Tensor>> inputs;
  for (size_t j = 0; j < ds.inputs.size(); ++j) {
    const std::string& name = oc.model.graph().input(static_cast<int>(j)).name();
    if (!loaded.bound.count(name)) inputs.emplace_back(name, ds.inputs[j]);
  }
  return run_model(*loaded.model, inputs);
}

// One case on the backend alone, every data set, compared with the expected
// outputs and with CpuRef's (unless CpuRef itself misses the expected ones:
// CpuRef's own conformance run reports that). `failing` receives the model
// and inputs to write if it fails.
CaseResult Runner::run_onnx_case(const OnnxCase& oc, Case* failing) {
  for (size_t k = 0; k < oc.sets.size(); ++k) {
    const OnnxDataSet& ds = oc.sets[k];
    const std::string where = oc.sets.size() > 1 ? "data set " + std::to_string(k) + ": " : "";
    auto loaded = load_onnx(oc, ds, {cmd_.backend});
    if (!loaded.ok()) {
      if (loaded.status().code() == StatusCode::kUnsupported)
        return unsupported(first_line(loaded.status().message()));
      return fail(where + "load: " + first_line(loaded.status().message()));
    }
    failing->model = loaded->proto;
    failing->inputs.clear();
    failing->size = 0;
    for (size_t j = 0; j < ds.inputs.size(); ++j) {
      const std::string& name = oc.model.graph().input(static_cast<int>(j)).name();
      if (loaded->bound.count(name)) continue;
      failing->inputs.emplace_back(name, ds.inputs[j]);
      failing->size += static_cast<size_t>(ds.inputs[j].numel());
    }
    auto got = run_onnx(oc, ds, *loaded);
    if (!got.ok()) {
      // A model run in stages meets a node the backend rejects only then.
      if (got.status().code() == StatusCode::kUnsupported)
        return unsupported(first_line(got.status().message()));
      return fail(where + "run: " + first_line(got.status().message()));
    }
    if (std::string diff = compare_with_expected(*got, ds.outputs); !diff.empty())
      return fail(where + diff + " (ONNX's expected outputs)");
    if (cmd_.backend == "CpuRef") continue;
    auto ref = load_onnx(oc, ds, {"CpuRef"});
    if (!ref.ok()) continue;  // CpuRef's own run reports it
    auto want = run_onnx(oc, ds, *ref);
    if (!want.ok() || !compare_with_expected(*want, ds.outputs).empty()) continue;
    if (std::string diff = compare(*got, *want); !diff.empty()) return fail(where + diff);
  }
  return {};
}

// Which operators the backend claims: each case is loaded with the backend
// first and CpuRef after it, and every node the plan gives the backend claims
// its op type. Then every case all of whose operators the backend claims runs
// on it alone; a case of a claimed operator it rejects is "unsupported"
// (--strict: a failure). `covered` receives every op type of every case
// that can be checked here.
void Runner::run_onnx_cases(std::set<std::string>* claimed, std::set<std::string>* covered) {
  const std::string dir = cmd_.case_data.empty() ? default_case_data_dir() : cmd_.case_data;
  auto cases = load_onnx_cases(dir, cmd_.filter);
  if (!cases.ok()) {
    std::cout << cmd_.backend << ": no ONNX node cases (" << cases.status().message()
              << "): the catalogue's cases only\n";
    return;
  }
  std::vector<std::set<std::string>> ops(cases->size());
  size_t skipped = 0;
  for (size_t k = 0; k < cases->size(); ++k) {
    const OnnxCase& oc = (*cases)[k];
    ops[k] = oc.ops;
    // A case that cannot be checked covers nothing: its ops may have no case.
    if (oc.skip.empty()) covered->insert(oc.ops.begin(), oc.ops.end());
    if (!oc.skip.empty()) {
      ++skipped;
      if (cmd_.verbose) std::cout << "  skipped  onnx: " << oc.name << ": " << oc.skip << "\n";
      continue;
    }
    std::vector<std::string> backends = {cmd_.backend};
    if (cmd_.backend != "CpuRef") backends.push_back("CpuRef");
    auto loaded = load_onnx(oc, oc.sets[0], backends);
    if (!loaded.ok()) continue;
    if (loaded->model->runs_in_stages()) {
      // Placed stage by stage, when run: on CpuRef alone, every op is its.
      if (cmd_.backend == "CpuRef") claimed->insert(oc.ops.begin(), oc.ops.end());
      continue;
    }
    auto plan =
        nlohmann::json::parse(loaded->model->describe_plan(PlanFormat::kJson), nullptr, false);
    if (plan.is_discarded() || !plan.contains("nodes")) continue;
    ops[k].clear();
    for (const auto& node : plan["nodes"]) {
      const std::string op = node.value("op_type", "");
      ops[k].insert(op);
      covered->insert(op);
      if (node.value("backend", "") == cmd_.backend) claimed->insert(op);
    }
  }
  size_t mine = 0;
  std::map<std::string, std::vector<size_t>> taken;  // op -> cases it took
  std::vector<CaseResult> results(cases->size());
  std::vector<Case> failing(cases->size());
  std::vector<bool> runs(cases->size(), false);
  for (size_t k = 0; k < cases->size(); ++k) {
    const OnnxCase& oc = (*cases)[k];
    if (!oc.skip.empty() || ops[k].empty() ||
        !std::all_of(ops[k].begin(), ops[k].end(),
                     [&](const std::string& op) { return claimed->count(op) > 0; }))
      continue;
    ++mine;
    runs[k] = true;
    results[k] = run_onnx_case(oc, &failing[k]);
    if (results[k].outcome != Outcome::kUnsupported)
      for (const std::string& op : ops[k]) taken[op].push_back(k);
  }
  std::cout << cmd_.backend << ": ONNX node cases (" << dir << ", " << cases->size() << " cases; "
            << mine << " of operators " << cmd_.backend << " claims";
  if (skipped) std::cout << "; " << skipped << " that cannot be checked here";
  std::cout << ")\n";
  for (size_t k = 0; k < cases->size(); ++k) {
    if (!runs[k]) continue;
    const OnnxCase& oc = (*cases)[k];
    CaseResult r = results[k];
    Case c;
    c.kind = "onnx";
    c.name = oc.name;
    c.op = *ops[k].begin();
    if (cmd_.strict && r.outcome == Outcome::kUnsupported)
      for (const std::string& op : ops[k])
        if (taken.count(op)) {
          r = fail("rejected, though " + cmd_.backend + " takes " +
                   std::to_string(taken[op].size()) + " other case(s) of " + op +
                   " (--strict): " + r.reason);
          break;
        }
    if (r.outcome == Outcome::kFail) {
      failing[k].op = c.op;
      failing[k].kind = c.kind;
      failing[k].name = c.name;
      failures_.push_back(std::move(failing[k]));
    }
    record(c, r, ops[k]);
  }
}

// A one-node model of the op's newest schema: its required inputs as
// [1,2,4,4] tensors of a dtype it allows (float32 when it can), no
// attributes. "" when the schema needs an attribute (nothing to guess).
std::string Runner::probe_model(const ir::OpSchema& schema) {
  Case c;
  c.model.set_ir_version(8);
  onnx::OperatorSetIdProto* opset = c.model.add_opset_import();
  opset->set_domain(schema.domain());
  opset->set_version(schema.since_version());
  if (!schema.domain().empty()) {
    opset = c.model.add_opset_import();
    opset->set_domain("");
    opset->set_version(kOpset);
  }
  for (const ir::AttrSpec& a : schema.attrs())
    if (a.required) return "";
  onnx::GraphProto* g = c.model.mutable_graph();
  g->set_name("probe");
  onnx::NodeProto* node = g->add_node();
  node->set_op_type(schema.name());
  node->set_domain(schema.domain());
  node->set_name("node");
  const Shape shape = {1, 2, 4, 4};
  for (const ir::ParamSpec& p : schema.inputs()) {
    if (p.arity == ir::ParamSpec::Arity::kOptional) break;
    DType dtype = DType::kFloat32;
    for (const ir::TypeVar& t : schema.type_vars())
      if (t.name == p.type_var && !t.allowed.empty() &&
          std::find(t.allowed.begin(), t.allowed.end(), dtype) == t.allowed.end())
        dtype = t.allowed.front();
    const int count = p.arity == ir::ParamSpec::Arity::kVariadic ? p.min_count : 1;
    for (int k = 0; k < count; ++k) {
      std::string name = "x";  // (not "x" + ...: GCC 12's -Wrestrict misfires)
      name += std::to_string(node->input_size());
      node->add_input(name);
      set_type(g->add_input(), name, dtype, &shape);
    }
  }
  for (const ir::ParamSpec& p : schema.outputs()) {
    if (p.arity == ir::ParamSpec::Arity::kOptional) break;
    std::string name = "y";
    name += std::to_string(node->output_size());
    node->add_output(name);
    onnx::ValueInfoProto* v = g->add_output();
    v->set_name(name);
  }
  return write_model(c);
}

// The registry's operators that no case covers. Each is probed (a one-node
// model on the backend alone): the ones the backend takes are the claimed
// operators without cases, named so the gap is visible; those whose probe
// the runtime refuses for another reason (a shape the op cannot take, an
// attribute it requires) are named apart, since whether the backend claims
// them is unknown. An op the importer expands or folds away is no backend's.
void Runner::report_uncovered(const std::set<std::string>& covered,
                              std::set<std::string>* claimed) {
  std::vector<std::string> none, unknown;
  std::string previous;
  const auto& schemas = ir::OpRegistry::builtin().schemas();
  for (size_t k = 0; k < schemas.size(); ++k) {
    const ir::OpSchema& s = *schemas[k];
    // The newest version of each op: the last of its run in the list.
    if (k + 1 < schemas.size() && schemas[k + 1]->name() == s.name() &&
        schemas[k + 1]->domain() == s.domain())
      continue;
    if (covered.count(s.name()) || s.is_host_op()) continue;
    const std::string key = s.domain().empty() ? s.name() : s.domain() + "::" + s.name();
    if (!cmd_.filter.empty() && key.find(cmd_.filter) == std::string::npos) continue;
    const std::string path = probe_model(s);
    if (path.empty()) {
      unknown.push_back(key);
      continue;
    }
    auto model = load(path, {cmd_.backend});
    if (!model.ok()) {
      if (model.status().code() != StatusCode::kUnsupported) unknown.push_back(key);
      continue;
    }
    // Taken only if a node of the op is in the plan: an op the importer
    // expands into others (an ONNX function) or folds away is no backend's.
    auto plan = nlohmann::json::parse((*model)->describe_plan(PlanFormat::kJson), nullptr, false);
    if ((*model)->runs_in_stages() || plan.is_discarded() || !plan.contains("nodes")) {
      unknown.push_back(key);
      continue;
    }
    for (const auto& node : plan["nodes"])
      if (node.value("op_type", "") == s.name() && node.value("backend", "") == cmd_.backend) {
        none.push_back(key);
        claimed->insert(s.name());
        break;
      }
  }
  auto print = [this](const char* what, const std::vector<std::string>& ops) {
    if (ops.empty()) return;
    std::cout << cmd_.backend << ": " << what;
    for (size_t k = 0; k < ops.size(); ++k) std::cout << (k ? ", " : "") << ops[k];
    std::cout << "\n";
  };
  print("no cases: ", none);
  print("no cases, and a probe could not tell whether it claims them: ", unknown);
}

int Runner::run() {
  const std::vector<OpSpec> specs = catalogue();
  // Per op: the cases the backend took and the ones it rejected.
  std::map<std::string, std::vector<size_t>> taken, rejected;
  std::map<std::string, std::string> reasons;
  std::vector<Case> cases;
  std::vector<CaseResult> results;
  for (size_t k = 0; k < specs.size(); ++k) {
    Case c = make_op_case(specs[k], static_cast<uint32_t>(k + 1));
    c.spec = k;
    if (!cmd_.filter.empty() && c.name.find(cmd_.filter) == std::string::npos) continue;
    bool took = false;
    CaseResult r = run_op_case(c, &took);
    (took ? taken : rejected)[c.op].push_back(cases.size());
    if (r.outcome == Outcome::kFail) failures_.push_back(c);
    cases.push_back(std::move(c));
    results.push_back(r);
  }
  std::cout << cmd_.backend << ": operator cases\n";
  for (size_t k = 0; k < cases.size(); ++k) {
    CaseResult& r = results[k];
    const std::string& op = cases[k].op;
    if (cmd_.strict && r.outcome == Outcome::kUnsupported && taken.count(op)) {
      r = fail("rejected, though " + cmd_.backend + " takes " + std::to_string(taken[op].size()) +
               " other case(s) of " + op + " (--strict): " + r.reason);
      failures_.push_back(cases[k]);
    }
    record(cases[k], r);
  }
  // For each operator the backend takes: edges, a round trip, threads, on the
  // first case it passed (elementwise ops only for the edges: the op's output
  // must be able to feed its first input again).
  std::cout << cmd_.backend << ": graphs, artifacts, threads\n";
  for (const auto& [op, indices] : taken) {
    const size_t* first = nullptr;
    for (const size_t& k : indices)
      if (results[k].outcome == Outcome::kPass) {
        first = &k;
        break;
      }
    if (first == nullptr) continue;
    const Case& c = cases[*first];
    const OpSpec* spec = &specs[c.spec];
    // Edges: the op's first input must be a graph input (not a weight); not
    // for random values (the Neg around them would change their distribution).
    if (!c.random && !c.inputs.empty() && c.inputs[0].first == spec->inputs[0].name) {
      auto want = reference(c, write_model(c));
      if (want.ok() && want->size() == 1) {
        const bool chain = spec->inputs[0].dtype == DType::kFloat32 &&
                           spec->output_dtype == DType::kFloat32 &&
                           (*want)[0].shape() == c.inputs[0].second.shape();
        CaseResult r = run_edges(c, chain, spec->inputs[0].dtype, spec->output_dtype);
        Case e = c;
        e.kind = "edges";
        e.name = c.name +
                 (chain ? ", 3 times with Neg on CpuRef between" : ", with Neg on CpuRef around");
        record(e, r);
      }
    }
    Case rt = c;
    rt.kind = "round trip";
    CaseResult r = run_round_trip(c);
    if (cmd_.strict && r.outcome == Outcome::kUnsupported && r.reason.rfind("compile: ", 0) == 0)
      r = fail("rejected when compiled ahead of time, though taken for a run (--strict): " +
               r.reason);
    if (r.outcome == Outcome::kFail) failures_.push_back(rt);
    record(rt, r);
    if (spec != nullptr) {
      Case th = c;
      th.kind = "threads";
      th.name = c.name + ", 4 sessions on 4 threads";
      record(th, run_threads(c, *spec, static_cast<uint32_t>(*first + 1)));
    }
  }
  std::set<std::string> claimed, covered;
  for (const auto& [op, indices] : taken) claimed.insert(op);
  for (const OpSpec& spec : specs) covered.insert(spec.op);
  run_onnx_cases(&claimed, &covered);
  report_uncovered(covered, &claimed);
  std::cout << cmd_.backend << ": per operator\n";
  for (const std::string& op : claimed) {
    const Counts& n = per_op_[op];
    std::cout << "  " << op << ": " << n.passed << " passed, " << n.failed << " failed, "
              << n.unsupported << " unsupported\n";
  }
  std::cout << cmd_.backend << ": " << passed_ << " passed, " << failed_ << " failed, "
            << unsupported_ << " unsupported (" << claimed.size() << " operators claimed)\n";
  write_smallest_failure();
  return failed_ == 0 ? 0 : 1;
}

}  // namespace

namespace {

// Models the hygiene check may run the backend on: the catalogue's cases,
// those that keep a backend busiest first.
std::vector<std::function<HygieneModel()>> hygiene_candidates(const std::string& scratch) {
  std::vector<std::function<HygieneModel()>> out;
  const std::vector<OpSpec> specs = catalogue();
  for (const char* first : {"Conv", "MatMul", "Gemm", "Add", "Relu", ""})
    for (size_t k = 0; k < specs.size(); ++k) {
      const bool preferred = specs[k].op == first;
      const bool rest = *first == '\0' && specs[k].op != "Conv" && specs[k].op != "MatMul" &&
                        specs[k].op != "Gemm" && specs[k].op != "Add" && specs[k].op != "Relu";
      if (!preferred && !rest) continue;
      out.push_back([spec = specs[k], k, scratch] {
        Case c = make_op_case(spec, static_cast<uint32_t>(k + 1));
        HygieneModel m;
        m.path = scratch + "/hygiene" + std::to_string(k) + ".onnx";
        std::ofstream file(m.path, std::ios::binary);
        c.model.SerializeToOstream(&file);
        m.inputs = std::move(c.inputs);
        return m;
      });
    }
  return out;
}

}  // namespace

int ConformanceCommand::run(const RuntimeOptions& options) const {
  std::string scratch = (fs::temp_directory_path() / "backplane_conformance_XXXXXX").string();
  if (::mkdtemp(scratch.data()) == nullptr) {
    std::cerr << "error: cannot create a scratch directory: " << std::strerror(errno) << "\n";
    return 1;
  }
  struct RemoveScratch {
    std::string dir;
    ~RemoveScratch() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } remove_scratch{scratch};
  // First, before this process has loaded any backend: the hygiene contract.
  std::optional<HygieneReport> hygiene;
  if (!skip_hygiene) {
    auto checked = check_hygiene(backend, options, scratch, hygiene_candidates(scratch));
    if (!checked.ok()) {
      std::cerr << "error: "
                << (checked.status().code() == StatusCode::kNotFound
                        ? ""
                        : "hygiene check of '" + backend + "': ")
                << checked.status().message() << "\n";
      return 1;
    }
    hygiene = std::move(*checked);
  }
  auto rt = Runtime::create(options);
  if (!rt.ok()) {
    std::cerr << "error: " << rt.status().message() << "\n";
    return 1;
  }
  bool found = false, cpuref = false;
  std::string ids;
  for (const BackendDescription& d : (*rt)->backends()) {
    found |= d.id == backend;
    cpuref |= d.id == "CpuRef";
    if (!ids.empty()) ids += ", ";
    ids += d.id;
  }
  if (!found) {
    std::cerr << "error: backend '" << backend << "' is not registered (registered: " << ids
              << "); see 'backplane backends'\n";
    return 1;
  }
  if (!cpuref) {
    std::cerr << "error: the reference backend CpuRef is not registered: conformance compares "
                 "with it\n";
    return 1;
  }
  std::string rerun;
  if (options.backend_path) rerun += " --backend-path " + *options.backend_path;
  if (!options.dynamic_backends) rerun += " --no-dynamic-backends";
  Runner runner(**rt, *this, scratch, rerun);
  if (hygiene) runner.record_hygiene(*hygiene);
  return runner.run();
}

void add_conformance_command(CLI::App& parent, ConformanceCommand* cmd) {
  cmd->app = parent.add_subcommand("conformance",
                                   "Check a backend's operators against CpuRef on generated cases");
  cmd->app->add_option("--backend", cmd->backend, "The backend to check (its id)")->required();
  cmd->app->add_flag("--strict", cmd->strict,
                     "A rejected case of an operator the backend takes in other cases fails");
  cmd->app->add_option("--filter", cmd->filter,
                       "Only cases whose name contains this (catalogue: \"Add [2,3] [3] int32\", "
                       "ONNX: \"node/test_add_bcast\")");
  cmd->app
      ->add_option("--case-dir", cmd->case_dir,
                   "Where to write the smallest failing case (.onnx and .npy inputs)")
      ->capture_default_str();
  cmd->app->add_option("--case-data", cmd->case_data,
                       "The ONNX node cases to run (default: share/backplane/conformance beside "
                       "the program's bin/)");
  cmd->app->add_flag("--verbose", cmd->verbose, "Print every case, not only failures");
  cmd->app->add_flag("--no-hygiene", cmd->skip_hygiene,
                     "Skip the hygiene contract (process state across load, configure, compile, "
                     "execute and unload; docs/writing-a-backend.md)");
}

}  // namespace backplane::cli
