// einsum.cpp — Einsum as Transpose/ReduceSum/Unsqueeze/MatMul/Squeeze
// (einsum.hpp).
#include "onnx/einsum.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace backplane::onnx_import {
namespace {

// The terms of an equation this rewrite covers, or false.
bool parse(std::string eq, int operands, std::vector<std::string>* terms, std::string* out) {
  eq.erase(std::remove_if(eq.begin(), eq.end(), [](unsigned char c) { return std::isspace(c); }),
           eq.end());
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  terms->clear();
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms->push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (static_cast<int>(terms->size()) != operands) return false;
  auto letters_only = [](const std::string& t) {
    for (size_t i = 0; i < t.size(); ++i)
      if (!std::isalpha(static_cast<unsigned char>(t[i])) || t.find(t[i], i + 1) != std::string::npos)
        return false;  // "...", a digit, or a repeated letter (a diagonal)
    return true;
  };
  for (const std::string& t : *terms)
    if (!letters_only(t)) return false;
  std::string all;
  for (const std::string& t : *terms) all += t;
  if (arrow != std::string::npos) {
    *out = eq.substr(arrow + 2);
    if (!letters_only(*out)) return false;
    for (char c : *out)
      if (all.find(c) == std::string::npos) return false;  // invalid: the importer says why
  } else {  // implicit: the letters used once, in alphabetical order
    out->clear();
    for (char c : all)
      if (std::count(all.begin(), all.end(), c) == 1) *out += c;
    std::sort(out->begin(), out->end());
  }
  return true;
}

bool has(const std::string& s, char c) { return s.find(c) != std::string::npos; }

// Emits the nodes of one rewrite, in order.
class Emitter {
 public:
  Emitter(const onnx::NodeProto& einsum, int64_t opset)
      : base_(einsum.name().empty() ? einsum.output(0) : einsum.name()),
        value_base_(einsum.output(0)),
        opset_(opset) {}

  std::string transpose(const std::string& x, const std::string& from, const std::string& to) {
    std::vector<int64_t> perm;
    for (char c : to) perm.push_back(static_cast<int64_t>(from.find(c)));
    bool identity = true;
    for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
    if (identity) return x;
    onnx::NodeProto& n = node("Transpose", {x});
    onnx::AttributeProto& a = *n.add_attribute();
    a.set_name("perm");
    a.set_type(onnx::AttributeProto::INTS);
    for (int64_t p : perm) a.add_ints(p);
    return n.output(0);
  }
  // ReduceSum (keepdims 0), Unsqueeze or Squeeze over `axes`; x if none.
  std::string axes_op(const char* op, const std::string& x, const std::vector<int64_t>& axes) {
    if (axes.empty()) return x;
    const bool as_input = opset_ >= 13;
    std::vector<std::string> inputs{x};
    if (as_input) inputs.push_back(constant(axes));
    onnx::NodeProto& n = node(op, inputs);
    if (!as_input) {
      onnx::AttributeProto& a = *n.add_attribute();
      a.set_name("axes");
      a.set_type(onnx::AttributeProto::INTS);
      for (int64_t v : axes) a.add_ints(v);
    }
    if (std::string(op) == "ReduceSum") {
      onnx::AttributeProto& k = *n.add_attribute();
      k.set_name("keepdims");
      k.set_type(onnx::AttributeProto::INT);
      k.set_i(0);
    }
    return n.output(0);
  }
  std::string matmul(const std::string& a, const std::string& b) {
    return node("MatMul", {a, b}).output(0);
  }

  // The nodes, the last one writing `output` (an Identity when the rewrite
  // is no node at all: "ij->ij").
  std::vector<onnx::NodeProto> finish(const std::string& result, const std::string& output) {
    if (nodes_.empty() || nodes_.back().output(0) != result) node("Identity", {result});
    nodes_.back().set_output(0, output);
    return std::move(nodes_);
  }

 private:
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs) {
    const std::string step = std::to_string(nodes_.size()) + "_" + op;
    onnx::NodeProto& n = nodes_.emplace_back();
    n.set_op_type(op);
    n.set_name(base_ + "/" + step);
    for (const std::string& in : inputs) n.add_input(in);
    n.add_output(value_base_ + "/" + step);
    return n;
  }
  std::string constant(const std::vector<int64_t>& values) {
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

  std::string base_, value_base_;
  int64_t opset_;
  std::vector<onnx::NodeProto> nodes_;
};

// Sums out of `term` (operand `x`) the letters in none of `keep`; returns
// the operand and its letters after.
std::pair<std::string, std::string> sum_out(Emitter& e, const std::string& x, const std::string& term,
                                            const std::string& keep) {
  std::vector<int64_t> axes;
  std::string left;
  for (size_t i = 0; i < term.size(); ++i) {
    if (has(keep, term[i])) left += term[i];
    else axes.push_back(static_cast<int64_t>(i));
  }
  return {e.axes_op("ReduceSum", x, axes), left};
}

// Operand `x` (letters `term`) laid out as `target`: its letters in that
// order, and a dim of 1 where `target` has a letter it lacks or a 0.
std::string place(Emitter& e, const std::string& x, const std::string& term,
                  const std::string& target) {
  std::string present;
  std::vector<int64_t> ones;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] != 0 && has(term, target[i])) present += target[i];
    else ones.push_back(static_cast<int64_t>(i));
  }
  return e.axes_op("Unsqueeze", e.transpose(x, term, present), ones);
}

// The element types the model declares (graph inputs, outputs, value_info,
// initializers) and the producer of every value, over the main graph and
// its subgraphs.
struct Types {
  std::unordered_map<std::string, int32_t> declared;
  std::unordered_map<std::string, const onnx::NodeProto*> producer;

  void add(const onnx::GraphProto& g) {
    auto take = [&](const onnx::ValueInfoProto& v) {
      if (v.type().has_tensor_type() && v.type().tensor_type().elem_type() != 0)
        declared[v.name()] = v.type().tensor_type().elem_type();
    };
    for (const auto& v : g.input()) take(v);
    for (const auto& v : g.value_info()) take(v);
    for (const auto& v : g.output()) take(v);
    for (const auto& t : g.initializer()) declared[t.name()] = t.data_type();
    for (const auto& n : g.node()) {
      for (const std::string& out : n.output()) producer[out] = &n;
      for (const auto& a : n.attribute()) {
        if (a.has_g()) add(a.g());
        for (const auto& sg : a.graphs()) add(sg);
      }
    }
  }

  // The element type of `value`: declared, or followed back through the
  // operators whose output has their input's type; 0 when unknown. No
  // inference of ONNX's own: it runs on models that may be malformed.
  int32_t of(const std::string& value) const {
    static const std::unordered_set<std::string> same_as_first = {
        "Identity", "Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile",
        "Slice", "Gather", "GatherElements", "GatherND", "Split", "Concat", "Pad", "Relu",
        "LeakyRelu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Neg", "Abs", "Exp", "Log", "Sqrt",
        "Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Gemm", "Einsum", "LayerNormalization",
        "BatchNormalization", "Dropout", "Clip", "Max", "Min", "Erf", "ReduceSum", "ReduceMean",
        "ReduceMax", "ReduceMin", "Conv", "MaxPool", "AveragePool", "Resize", "Elu", "Gelu",
        "HardSigmoid", "HardSwish", "Softplus", "Reciprocal"};
    std::string v = value;
    for (int steps = 0; steps < 64; ++steps) {  // a chain, not a search: bounded
      if (auto d = declared.find(v); d != declared.end()) return d->second;
      auto p = producer.find(v);
      if (p == producer.end()) return 0;
      const onnx::NodeProto& n = *p->second;
      if (!n.domain().empty() && n.domain() != "ai.onnx") return 0;
      if (n.op_type() == "Cast") {
        for (const auto& a : n.attribute())
          if (a.name() == "to") return static_cast<int32_t>(a.i());
        return 0;
      }
      if (n.op_type() == "Constant") {
        for (const auto& a : n.attribute())
          if (a.name() == "value" && a.has_t()) return a.t().data_type();
        return 0;
      }
      const int from = n.op_type() == "Where" || n.op_type() == "CastLike" ? 1 : 0;
      if ((from == 0 && !same_as_first.count(n.op_type())) || n.input_size() <= from) return 0;
      v = n.input(from);
    }
    return 0;
  }
};

// The rewrite of one Einsum node, or empty when the rule does not cover it.
std::vector<onnx::NodeProto> rewrite(const onnx::NodeProto& n, int64_t opset) {
  if (n.output_size() != 1 || n.output(0).empty() || n.input_size() < 1 || n.input_size() > 2)
    return {};
  std::string eq;
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name() == "equation") eq = a.s();
  std::vector<std::string> terms;
  std::string out;
  if (!parse(eq, n.input_size(), &terms, &out)) return {};
  Emitter e(n, opset);
  if (terms.size() == 1) {
    auto [x, letters] = sum_out(e, n.input(0), terms[0], out);
    return e.finish(e.transpose(x, letters, out), n.output(0));
  }
  // Letters of one operand only (not in the output) are summed first.
  auto [a, ta] = sum_out(e, n.input(0), terms[0], terms[1] + out);
  auto [b, tb] = sum_out(e, n.input(1), terms[1], terms[0] + out);
  // A matrix product [batch.., rows, k] x [batch.., k, cols]: the output's
  // last letter of the first operand only is the rows, its last of the
  // second only the columns, and every other output letter a batch dim
  // (one operand lacking it has it as a dim of 1, which MatMul broadcasts).
  char row = 0, col = 0, k = 0;
  for (char c : out) {
    if (has(ta, c) && !has(tb, c)) row = c;
    if (has(tb, c) && !has(ta, c)) col = c;
  }
  for (char c : ta) {
    if (!has(tb, c) || has(out, c)) continue;
    if (k != 0) return {};  // two contracted letters would need a Reshape
    k = c;
  }
  std::string batch;
  for (char c : out)
    if (c != row && c != col) batch += c;
  a = place(e, a, ta, batch + std::string{row, k});
  b = place(e, b, tb, batch + std::string{k, col});
  std::vector<int64_t> squeeze;
  const int64_t nb = static_cast<int64_t>(batch.size());
  if (row == 0) squeeze.push_back(nb);
  if (col == 0) squeeze.push_back(nb + 1);
  const std::string product = e.axes_op("Squeeze", e.matmul(a, b), squeeze);
  std::string letters = batch;
  for (char c : {row, col})
    if (c != 0) letters += c;
  return e.finish(e.transpose(product, letters, out), n.output(0));
}

int rewrite_graph(onnx::GraphProto& g, int64_t opset, const Types& types) {
  int count = 0;
  std::vector<std::vector<onnx::NodeProto>> parts(static_cast<size_t>(g.node_size()));
  for (int i = 0; i < g.node_size(); ++i) {
    onnx::NodeProto& n = *g.mutable_node(i);
    for (onnx::AttributeProto& a : *n.mutable_attribute()) {
      if (a.has_g()) count += rewrite_graph(*a.mutable_g(), opset, types);
      for (onnx::GraphProto& sg : *a.mutable_graphs()) count += rewrite_graph(sg, opset, types);
    }
    // float32 only: what it becomes runs on CpuOneDnn, which takes float32;
    // another dtype's Einsum runs whole on CpuRef, which takes every type
    // Einsum does (MatMul takes fewer: no 8- or 16-bit integers). ONNX gives
    // every operand and the result one type, so one whose type is found
    // tells the others' (an operand read from a sequence, say); types found
    // to differ leave the node whole, for type checking to reject.
    int32_t type = 0;
    bool differ = false;
    for (const std::string& v : n.input())
      if (const int32_t t = types.of(v); t != 0) {
        differ = differ || (type != 0 && t != type);
        type = t;
      }
    const bool float32 = type == onnx::TensorProto::FLOAT && !differ;
    if (n.op_type() == "Einsum" && (n.domain().empty() || n.domain() == "ai.onnx") && float32)
      parts[static_cast<size_t>(i)] = rewrite(n, opset);
  }
  const bool any = std::any_of(parts.begin(), parts.end(), [](const auto& p) { return !p.empty(); });
  if (!any) return count;
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

}  // namespace

int decompose_einsums(onnx::ModelProto& model) {
  int64_t opset = -1;
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  if (opset < 12 || !model.has_graph()) return 0;  // no Einsum before opset 12 (the importer says so)
  bool any = false;
  std::function<void(const onnx::GraphProto&)> find = [&](const onnx::GraphProto& g) {
    for (const onnx::NodeProto& n : g.node()) {
      any = any || n.op_type() == "Einsum";
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (a.has_g()) find(a.g());
        for (const onnx::GraphProto& sg : a.graphs()) find(sg);
      }
    }
  };
  find(model.graph());
  if (!any) return 0;
  Types types;
  types.add(model.graph());
  return rewrite_graph(*model.mutable_graph(), opset, types);
}

}  // namespace backplane::onnx_import
