// float16.cpp — a float16 model computed in float32 (float16.hpp).
#include "ir/float16.hpp"

#include "core/half.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace backplane::ir {
namespace {

constexpr int64_t kOnnxFloat = 1, kOnnxFloat16 = 10;

Tensor widened(const Tensor& t) {
  Tensor out(DType::kFloat32, t.shape());
  const auto* h = t.data_as<uint16_t>();
  auto* f = out.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) f[i] = half_to_float(h[i]);
  return out;
}

// A name no value of `g` has, from `base`.
std::string fresh_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 2; g.find_value(name) >= 0; ++k) name = base + "_" + std::to_string(k);
  return name;
}

bool is_product(const std::string& op) {
  return op == "Conv" || op == "ConvTranspose" || op == "MatMul" || op == "Gemm" ||
         op == "Einsum" || op == "LSTM" || op == "GRU" || op == "RNN";
}

Node cast_node(std::string name, int from, int to, int64_t type) {
  Node cast;
  cast.name = std::move(name);
  cast.op_type = "Cast";
  cast.inputs = {from};
  cast.outputs = {to};
  Attribute a;
  a.name = "to";
  a.type = AttrType::kInt;
  a.i = type;
  cast.attributes.push_back(std::move(a));
  return cast;
}

}  // namespace

int compute_float16_in_float32(Graph& graph, std::string* why_not) {
  std::vector<bool> io(graph.values.size(), false);
  for (int v : graph.inputs) io[v] = true;
  for (int v : graph.outputs)
    if (v >= 0) io[v] = true;
  // A product in float16: what a model converted to float16 has, and what no
  // backend computes (CpuRef and GpuOcl compute elementwise operators in
  // float16; a graph of those alone stays as it is).
  bool products = false;
  for (const Node& node : graph.nodes) {
    if (!is_product(node.op_type) || !node.domain.empty()) continue;
    for (int v : node.inputs)
      products = products || (v >= 0 && graph.values[v].dtype == DType::kFloat16);
    for (int v : node.outputs)
      products = products || (v >= 0 && graph.values[v].dtype == DType::kFloat16);
  }
  if (!products) return 0;
  for (const Node& node : graph.nodes) {
    for (const Attribute& a : node.attributes) {
      if (a.type == AttrType::kGraph || a.type == AttrType::kGraphs) {
        *why_not = node.describe() + " has a control-flow body";
        return 0;
      }
      if (a.type == AttrType::kInt && a.i == kOnnxFloat16 &&
          (a.name == "dtype" || (a.name == "to" && node.op_type != "Cast"))) {
        *why_not = node.describe() + " makes float16 by its '" + a.name + "'";
        return 0;
      }
    }
    if (node.domain != "" && node.domain != "ai.onnx") {
      *why_not = node.describe() + " is of domain '" + node.domain + "'";
      return 0;
    }
  }
  int changed = 0;
  // Constants and the values between nodes.
  for (size_t v = 0; v < graph.values.size(); ++v) {
    Value& value = graph.values[v];
    if (value.dtype != DType::kFloat16 || io[v]) continue;
    if (value.is_constant()) {
      auto it = graph.constants.find(value.constant_key);
      if (it != graph.constants.end()) it->second = widened(it->second);
    }
    value.dtype = DType::kFloat32;
    ++changed;
  }
  for (Node& node : graph.nodes)
    for (Attribute& a : node.attributes) {
      if (a.type == AttrType::kTensor && a.t.dtype() == DType::kFloat16) a.t = widened(a.t);
      if (node.op_type == "Cast" && a.name == "to" && a.i == kOnnxFloat16) a.i = kOnnxFloat;
    }
  // The interface: a float16 input read as float32, a float16 output written from float32.
  std::vector<Node> before, after;
  for (int in : graph.inputs) {
    if (graph.values[in].dtype != DType::kFloat16) continue;
    Value wide = graph.values[in];
    wide.name = fresh_name(graph, wide.name + "_float32");
    wide.dtype = DType::kFloat32;
    wide.producer = -1;
    const int w = graph.add_value(std::move(wide));
    for (Node& node : graph.nodes)
      for (int& i : node.inputs)
        if (i == in) i = w;
    before.push_back(cast_node(graph.values[w].name + "_cast", in, w, kOnnxFloat));
    ++changed;
  }
  for (int out : graph.outputs) {
    if (out < 0 || graph.values[out].dtype != DType::kFloat16 || graph.values[out].producer < 0 ||
        graph.values[out].is_constant())
      continue;
    Value wide = graph.values[out];
    wide.name = fresh_name(graph, wide.name + "_float32");
    wide.dtype = DType::kFloat32;
    const int w = graph.add_value(std::move(wide));
    for (Node& node : graph.nodes) {
      for (int& o : node.outputs)
        if (o == out) o = w;
      for (int& i : node.inputs)
        if (i == out) i = w;
    }
    after.push_back(cast_node(graph.values[w].name + "_cast", w, out, kOnnxFloat16));
    ++changed;
  }
  graph.nodes.insert(graph.nodes.begin(), before.begin(), before.end());
  graph.nodes.insert(graph.nodes.end(), after.begin(), after.end());
  (void)graph.topo_sort();  // producers again; the order holds by construction
  return changed;
}

}  // namespace backplane::ir
