// compiler.cpp — graph view -> oneDNN primitives, arena plan, execution.
//
// Layout policy: tensors entering or leaving a partition are dense row-major
// (the ABI's layout). Inside, each tensor keeps whatever layout its producer
// chose (convolutions pick blocked layouts through format_tag::any); a
// consumer that wants another layout gets one reorder, cached per (tensor,
// layout). Reshape/Flatten/Squeeze/Unsqueeze/Identity/Transpose are views of
// their input's bytes (memory::desc::reshape / permute_axes) whenever oneDNN
// can express them, so they cost nothing.
#include "onednn/compiler.hpp"
#include "onednn/compiled.hpp"

#include <dnnl.hpp>
#include <omp.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace backplane::onednn {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using Dims = std::vector<int64_t>;
using tag = memory::format_tag;

constexpr float kInf = std::numeric_limits<float>::infinity();

int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

memory::dims to_dims(const Dims& d) { return d.empty() ? memory::dims{1} : memory::dims(d.begin(), d.end()); }

memory::desc plain_md(const Dims& shape) {
  memory::dims dims = to_dims(shape);
  memory::dims strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(dims[i], 1);
  }
  return memory::desc(dims, memory::data_type::f32, strides);
}
memory::desc any_md(const Dims& shape) { return memory::desc(to_dims(shape), memory::data_type::f32, tag::any); }

bool is_blocked(const memory::desc& md) { return md.data.format_desc.blocking.inner_nblks > 0; }
bool is_dense(const memory::desc& md) {
  int64_t n = 1;
  for (int i = 0; i < md.data.ndims; ++i) n *= md.data.dims[i];
  return md.get_size() == static_cast<size_t>(n) * sizeof(float);
}

// Pads a shape on the left with 1s up to `rank` (numpy broadcasting).
Dims left_pad(const Dims& d, size_t rank) {
  Dims out(rank - std::min(rank, d.size()), 1);
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

sdk::Error fail(const std::string& what) { return sdk::unsupported(what); }

// ---------------------------------------------------------------------------
// The view, with producers, consumers and constants at hand
// ---------------------------------------------------------------------------

struct ValueInfo {
  Dims shape;
  bp_dtype_t dtype = BP_DTYPE_UNDEFINED;
  bool constant = false, input = false, output = false;
  int producer = -1;           // view node
  std::vector<int> consumers;  // view nodes (once per node)
};

class ViewInfo {
 public:
  ViewInfo(const sdk::Host& host, const bp_graph_view_t& view) : view_(view), host_(host) {
    values.resize(view.num_values);
    for (size_t v = 0; v < view.num_values; ++v) {
      const bp_value_t& bv = view.values[v];
      values[v].shape = sdk::shape_of(bv);
      values[v].dtype = bv.dtype;
      values[v].constant = (bv.flags & BP_VALUE_CONSTANT) != 0 && bv.data_key != nullptr;
      values[v].input = (bv.flags & BP_VALUE_VIEW_INPUT) != 0;
    }
    for (size_t k = 0; k < view.num_outputs; ++k) values[view.outputs[k]].output = true;
    for (size_t k = 0; k < view.num_inputs; ++k) values[view.inputs[k]].input = true;
    for (size_t n = 0; n < view.num_nodes; ++n) {
      const bp_node_t& node = view.nodes[n];
      for (size_t i = 0; i < node.num_outputs; ++i)
        if (node.outputs[i] >= 0) values[node.outputs[i]].producer = static_cast<int>(n);
      for (size_t i = 0; i < node.num_inputs; ++i) {
        int v = node.inputs[i];
        if (v < 0) continue;
        auto& c = values[v].consumers;
        if (c.empty() || c.back() != static_cast<int>(n)) c.push_back(static_cast<int>(n));
      }
    }
  }

  const bp_graph_view_t& view() const { return view_; }
  size_t num_nodes() const { return view_.num_nodes; }
  sdk::NodeRef node(int n) const { return sdk::NodeRef(&view_, static_cast<size_t>(n)); }
  std::string_view op(int n) const { return view_.nodes[n].op_type; }
  int in(int n, size_t i) const { return i < view_.nodes[n].num_inputs ? view_.nodes[n].inputs[i] : -1; }
  int out(int n, size_t i = 0) const { return i < view_.nodes[n].num_outputs ? view_.nodes[n].outputs[i] : -1; }
  size_t num_in(int n) const { return view_.nodes[n].num_inputs; }
  size_t num_out(int n) const { return view_.nodes[n].num_outputs; }
  const Dims& shape(int v) const { return values[v].shape; }
  bool is_const(int v) const { return v >= 0 && values[v].constant; }
  // An output value that something reads (inside or outside the view).
  bool used(int v) const { return v >= 0 && (values[v].output || !values[v].consumers.empty()); }
  std::string describe(int n) const {
    return "node '" + std::string(view_.nodes[n].name) + "' (" + std::string(op(n)) + ")";
  }
  std::string value_name(int v) const { return view_.values[v].name; }

  // The only node reading `v`, if `v` is not also a partition output.
  int only_consumer(int v) const {
    if (v < 0 || values[v].output || values[v].consumers.size() != 1) return -1;
    return values[v].consumers[0];
  }
  // The input of binary node n that is not `v` (-1 if n reads v twice).
  int other_input(int n, int v) const {
    if (num_in(n) != 2) return -1;
    if (in(n, 0) == v && in(n, 1) != v) return in(n, 1);
    if (in(n, 1) == v && in(n, 0) != v) return in(n, 0);
    return -1;
  }

  const void* data(int v) {
    auto it = held_.find(v);
    if (it == held_.end()) {
      const bp_value_t& bv = view_.values[v];
      sdk::Weight w = host_.weight(view_.weights, bv.data_key);
      size_t elem = bv.dtype == BP_DTYPE_INT64 ? 8 : bv.dtype == BP_DTYPE_FLOAT16 ? 2 : bv.dtype == BP_DTYPE_UINT8 ||
                                                                                     bv.dtype == BP_DTYPE_INT8 ||
                                                                                     bv.dtype == BP_DTYPE_BOOL
                                                                                 ? 1
                                                                                 : 4;
      if (w.size() != static_cast<size_t>(numel(values[v].shape)) * elem)
        throw sdk::Error(BP_STATUS_CORRUPT_DATA, std::string("constant '") + bv.name + "' has " +
                                                     std::to_string(w.size()) + " bytes, expected " +
                                                     std::to_string(numel(values[v].shape) * elem));
      it = held_.emplace(v, std::move(w)).first;
    }
    return it->second.data();
  }
  const float* f32(int v) {
    if (!is_const(v) || values[v].dtype != BP_DTYPE_FLOAT32)
      throw fail("'" + value_name(v) + "' must be a float32 constant");
    return static_cast<const float*>(data(v));
  }
  std::optional<float> scalar(int v) {
    if (!is_const(v) || values[v].dtype != BP_DTYPE_FLOAT32 || numel(values[v].shape) != 1) return std::nullopt;
    return f32(v)[0];
  }
  std::optional<std::vector<int64_t>> ints(int v) {
    if (!is_const(v)) return std::nullopt;
    const int64_t n = numel(values[v].shape);
    std::vector<int64_t> out(static_cast<size_t>(n));
    if (values[v].dtype == BP_DTYPE_INT64) {
      // An empty list (Reduce's axes) leaves out.data() null: no memcpy then.
      if (n > 0) std::memcpy(out.data(), data(v), static_cast<size_t>(n) * 8);
    } else if (values[v].dtype == BP_DTYPE_INT32) {
      const int32_t* p = static_cast<const int32_t*>(data(v));
      for (int64_t i = 0; i < n; ++i) out[i] = p[i];
    } else {
      return std::nullopt;
    }
    return out;
  }
  void release_constants() { held_.clear(); }

  std::vector<ValueInfo> values;

 private:
  const bp_graph_view_t& view_;
  const sdk::Host& host_;
  std::map<int, sdk::Weight> held_;
};

// ---------------------------------------------------------------------------
// Patterns: decomposed LayerNorm and erf-GELU, as exported by PyTorch
// ---------------------------------------------------------------------------

struct Pattern {
  std::string op;          // "LayerNorm" or "GeluErf"
  std::vector<int> nodes;  // view nodes it replaces
  int x = -1, gamma = -1, beta = -1, out = -1;
  float eps = 0;
};

bool near(std::optional<float> v, float want, float tol = 1e-4f) { return v && std::fabs(*v - want) <= tol; }

// Axes of a ReduceMean (attribute before opset 18, input after).
std::optional<std::vector<int64_t>> reduce_axes(ViewInfo& g, int n) {
  if (g.num_in(n) > 1 && g.in(n, 1) >= 0) return g.ints(g.in(n, 1));
  return g.node(n).attr_ints("axes", {});
}

bool reduces_last_axis(ViewInfo& g, int n) {
  if (g.op(n) != "ReduceMean" || g.node(n).attr_int("keepdims", 1) != 1) return false;
  auto axes = reduce_axes(g, n);
  const int64_t rank = static_cast<int64_t>(g.shape(g.in(n, 0)).size());
  return axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == rank - 1);
}

std::optional<Pattern> match_layer_norm(ViewInfo& g, int r1) {
  if (!reduces_last_axis(g, r1)) return std::nullopt;
  Pattern p{"LayerNorm", {r1}, g.in(r1, 0)};
  const int x = p.x;
  const int s = g.only_consumer(g.out(r1));
  if (s < 0 || g.op(s) != "Sub" || g.in(s, 0) != x || g.in(s, 1) != g.out(r1)) return std::nullopt;
  const int d = g.out(s);
  if (g.values[d].output || g.values[d].consumers.size() != 2) return std::nullopt;
  int pw = -1, dv = -1;
  for (int c : g.values[d].consumers) {
    if (g.op(c) == "Pow" && g.in(c, 0) == d) pw = c;
    if (g.op(c) == "Div" && g.in(c, 0) == d) dv = c;
  }
  if (pw < 0 || dv < 0 || !near(g.scalar(g.in(pw, 1)), 2.f, 0.f)) return std::nullopt;
  const int r2 = g.only_consumer(g.out(pw));
  if (r2 < 0 || !reduces_last_axis(g, r2)) return std::nullopt;
  const int ad = g.only_consumer(g.out(r2));
  if (ad < 0 || g.op(ad) != "Add") return std::nullopt;
  auto eps = g.scalar(g.other_input(ad, g.out(r2)));
  if (!eps) return std::nullopt;
  const int sq = g.only_consumer(g.out(ad));
  if (sq < 0 || g.op(sq) != "Sqrt" || g.only_consumer(g.out(sq)) != dv || g.in(dv, 1) != g.out(sq))
    return std::nullopt;
  p.nodes.insert(p.nodes.end(), {s, pw, r2, ad, sq, dv});
  p.eps = *eps;
  p.out = g.out(dv);
  const int64_t c = g.shape(x).back();
  auto per_channel = [&](int v) {
    return v >= 0 && g.is_const(v) && g.values[v].dtype == BP_DTYPE_FLOAT32 && numel(g.shape(v)) == c &&
           g.shape(v).size() <= g.shape(x).size();
  };
  const int mul = g.only_consumer(p.out);
  if (mul >= 0 && g.op(mul) == "Mul" && per_channel(g.other_input(mul, p.out))) {
    p.gamma = g.other_input(mul, p.out);
    p.nodes.push_back(mul);
    p.out = g.out(mul);
    const int add = g.only_consumer(p.out);
    if (add >= 0 && g.op(add) == "Add" && per_channel(g.other_input(add, p.out))) {
      p.beta = g.other_input(add, p.out);
      p.nodes.push_back(add);
      p.out = g.out(add);
    }
  }
  if (g.shape(p.out) != g.shape(x)) return std::nullopt;
  return p;
}

// y = x * 0.5 * (1 + erf(x / sqrt(2))), in the two orders PyTorch exports.
std::optional<Pattern> match_gelu(ViewInfo& g, int e) {
  if (g.op(e) != "Erf") return std::nullopt;
  const int a = g.in(e, 0);
  const int d = a >= 0 ? g.values[a].producer : -1;
  if (d < 0 || g.only_consumer(a) != e) return std::nullopt;
  const int x = g.in(d, 0);
  if (!((g.op(d) == "Div" && near(g.scalar(g.in(d, 1)), 1.41421356f, 1e-3f)) ||
        (g.op(d) == "Mul" && near(g.scalar(g.in(d, 1)), 0.70710678f, 1e-3f))))
    return std::nullopt;
  const int f = g.only_consumer(g.out(e));
  if (f < 0 || g.op(f) != "Add" || !near(g.scalar(g.other_input(f, g.out(e))), 1.f)) return std::nullopt;
  const int m = g.only_consumer(g.out(f));
  if (m < 0 || g.op(m) != "Mul") return std::nullopt;
  const int other = g.other_input(m, g.out(f));
  Pattern p{"GeluErf", {d, e, f, m}, x};
  if (other == x) {  // (x * (1 + erf)) * 0.5
    const int h = g.only_consumer(g.out(m));
    if (h < 0 || g.op(h) != "Mul" || !near(g.scalar(g.other_input(h, g.out(m))), 0.5f)) return std::nullopt;
    p.nodes.push_back(h);
    p.out = g.out(h);
  } else {  // (x * 0.5) * (1 + erf)
    const int h = other >= 0 ? g.values[other].producer : -1;
    if (h < 0 || g.op(h) != "Mul" || g.only_consumer(other) != m || g.other_input(h, x) < 0 ||
        !near(g.scalar(g.other_input(h, x)), 0.5f))
      return std::nullopt;
    p.nodes.push_back(h);
    p.out = g.out(m);
  }
  if (g.shape(p.out) != g.shape(x)) return std::nullopt;
  return p;
}

std::vector<Pattern> find_patterns(ViewInfo& g) {
  std::vector<Pattern> out;
  std::vector<bool> taken(g.num_nodes(), false);
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    std::optional<Pattern> p;
    if (g.op(n) == "ReduceMean") p = match_layer_norm(g, static_cast<int>(n));
    if (g.op(n) == "Erf") p = match_gelu(g, static_cast<int>(n));
    if (!p) continue;
    bool free = true;
    for (int k : p->nodes) free = free && !taken[k];
    if (!free) continue;
    for (int k : p->nodes) taken[k] = true;
    out.push_back(std::move(*p));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Per-node support checks (shared by query_support and compile)
// ---------------------------------------------------------------------------

const std::set<std::string_view>& eltwise_ops() {
  static const std::set<std::string_view> ops = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "Gelu",
                                                  "Sqrt", "Exp",       "Abs",  "Elu",     "Pow",  "Neg"};
  return ops;
}
const std::set<std::string_view>& binary_ops() {
  static const std::set<std::string_view> ops = {"Add", "Sub", "Mul", "Div", "Max", "Min"};
  return ops;
}
const std::set<std::string_view>& view_ops() {
  static const std::set<std::string_view> ops = {"Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                                  "Identity", "Dropout", "Transpose"};
  return ops;
}

// Conv/Pool padding: ONNX pads (begin..., end...) or auto_pad, per spatial axis.
struct Window {
  memory::dims kernel, strides, dilation, pad_l, pad_r;  // dilation in oneDNN's convention (d - 1)
};

Window window(ViewInfo& g, int n, const Dims& x, const Dims& y, const Dims& kernel) {
  sdk::NodeRef node = g.node(n);
  const size_t sp = x.size() - 2;
  Window w;
  std::vector<int64_t> strides = node.attr_ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = node.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || kernel.size() != sp)
    throw fail(g.describe(n) + ": strides/dilations/pads/kernel do not match " + std::to_string(sp) +
               " spatial dims");
  for (size_t i = 0; i < sp; ++i) {
    const int64_t ext = (kernel[i] - 1) * dil[i] + 1;
    const int64_t total = (y[i + 2] - 1) * strides[i] + ext - x[i + 2];  // padding the output needs
    int64_t pl = pads[i];
    if (auto_pad == "SAME_UPPER") pl = std::max<int64_t>(total, 0) / 2;
    else if (auto_pad == "SAME_LOWER") pl = std::max<int64_t>(total, 0) - std::max<int64_t>(total, 0) / 2;
    else if (auto_pad == "VALID") pl = 0;
    else if (auto_pad != "NOTSET") throw fail(g.describe(n) + ": auto_pad '" + auto_pad + "' is not supported");
    w.kernel.push_back(kernel[i]);
    w.strides.push_back(strides[i]);
    w.dilation.push_back(dil[i] - 1);
    w.pad_l.push_back(pl);
    w.pad_r.push_back(std::max<int64_t>(total - pl, 0));
  }
  return w;
}

// Throws sdk::Error(UNSUPPORTED) with the reason if node n cannot run here.
void check_node(ViewInfo& g, int n) {
  sdk::NodeRef node = g.node(n);
  const std::string_view op = g.op(n);
  if (!node.domain().empty() && node.domain() != "ai.onnx" && !(op == "Gelu" && node.domain() == "com.microsoft"))
    throw fail("domain '" + std::string(node.domain()) + "' is not supported");
  const bool known = eltwise_ops().count(op) || binary_ops().count(op) || view_ops().count(op) || op == "Conv" ||
                     op == "Gemm" || op == "MatMul" || op == "MaxPool" || op == "AveragePool" ||
                     op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "BatchNormalization" ||
                     op == "LayerNormalization" || op == "Softmax" || op == "Concat" || op == "ReduceMean" ||
                     op == "ReduceSum" || op == "ReduceMax" || op == "Erf";
  if (!known) throw fail("operator '" + std::string(op) + "' is not implemented by CpuOneDnn");
  // Binary primitives take exactly two operands (Max/Min/Sum are variadic in ONNX).
  if (binary_ops().count(op) && g.num_in(n) != 2)
    throw fail(std::string(op) + " with " + std::to_string(g.num_in(n)) + " inputs is not supported (only 2)");
  // Dropout is an identity only in inference: a training_mode input that is
  // not a constant false (or any ratio-dependent mask) is not for this backend.
  if (op == "Dropout") {
    if (g.num_in(n) > 2 && g.in(n, 2) >= 0) {
      const int t = g.in(n, 2);
      const void* c = g.is_const(t) && g.values[t].dtype == BP_DTYPE_BOOL ? g.data(t) : nullptr;
      if (c == nullptr || *static_cast<const uint8_t*>(c) != 0)
        throw fail("Dropout with a training_mode that is not a constant false is not supported");
    }
    if (node.attr_int("is_test", 1) == 0) throw fail("Dropout in training mode (is_test=0) is not supported");
  }
  // Data tensors are float32; shape/axes inputs of view ops may be integers.
  const size_t data_inputs = view_ops().count(op) || op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" ? 1
                             : op == "Clip" ? 1
                                            : g.num_in(n);
  for (size_t i = 0; i < std::min(data_inputs, g.num_in(n)); ++i) {
    const int v = g.in(n, i);
    if (v < 0) continue;
    if (g.values[v].dtype != BP_DTYPE_FLOAT32)
      throw fail("input '" + g.value_name(v) + "' is " + (g.values[v].dtype == BP_DTYPE_INT64 ? "int64" : "not float32") +
                 " (only float32 is supported)");
    if (numel(g.shape(v)) == 0) throw fail("input '" + g.value_name(v) + "' is empty");
  }
  const int y = g.out(n);
  if (y < 0 || g.values[y].dtype != BP_DTYPE_FLOAT32) throw fail("output is not float32");
  if (numel(g.shape(y)) == 0) throw fail("output is empty");
  for (size_t i = 1; i < g.num_out(n); ++i)
    if (g.used(g.out(n, i))) throw fail("optional output " + std::to_string(i) + " is not supported");

  const Dims& xs = g.shape(g.in(n, 0));
  if (op == "Conv") {
    if (xs.size() < 3 || xs.size() > 5) throw fail("only 1-D, 2-D and 3-D convolutions are supported");
    if (!g.is_const(g.in(n, 1))) throw fail("the weights must be a constant");
    if (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !g.is_const(g.in(n, 2))) throw fail("the bias must be a constant");
    const Dims& ws = g.shape(g.in(n, 1));
    (void)window(g, n, xs, g.shape(y), Dims(ws.begin() + 2, ws.end()));
  } else if (op == "Gemm") {
    if (node.attr_int("transA", 0) != 0) throw fail("Gemm with transA=1 is not supported");
    if (!g.is_const(g.in(n, 1))) throw fail("Gemm with a non-constant B is not supported");
    const int64_t nout = g.shape(y)[1];
    if (g.num_in(n) > 2 && g.in(n, 2) >= 0 &&
        (!g.is_const(g.in(n, 2)) || numel(g.shape(g.in(n, 2))) != nout))
      throw fail("Gemm's C must be a constant with one value per output column");
  } else if (op == "MatMul") {
    if (xs.size() < 2 || g.shape(g.in(n, 1)).size() < 2) throw fail("MatMul of 1-D operands is not supported");
    if (g.shape(y).size() > 6) throw fail("MatMul of rank > 6 is not supported");
  } else if (op == "MaxPool" || op == "AveragePool") {
    if (xs.size() < 3 || xs.size() > 5) throw fail("only 1-D, 2-D and 3-D pooling is supported");
    if (node.attr_int("storage_order", 0) != 0) throw fail("storage_order=1 is not supported");
    Window w = window(g, n, xs, g.shape(y), node.attr_ints("kernel_shape"));
    if (op == "AveragePool" && node.attr_int("count_include_pad", 0) != 0) {
      std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * (xs.size() - 2), 0));
      for (size_t i = 0; i < w.pad_r.size(); ++i)
        if (w.pad_r[i] > pads[w.pad_r.size() + i])
          throw fail("AveragePool with count_include_pad=1 and ceil_mode padding is not supported");
    }
  } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (xs.size() < 3 || xs.size() > 5) throw fail("only 1-D, 2-D and 3-D pooling is supported");
  } else if (op == "BatchNormalization") {
    if (node.attr_int("training_mode", 0) != 0) throw fail("training_mode=1 is not supported");
    for (size_t i = 1; i < 5; ++i)
      if (!g.is_const(g.in(n, i))) throw fail("scale, bias, mean and variance must be constants");
    if (xs.size() < 2) throw fail("input of rank < 2");
  } else if (op == "LayerNormalization") {
    const int64_t axis = node.attr_int("axis", -1);
    if (axis != -1 && axis != static_cast<int64_t>(xs.size()) - 1)
      throw fail("LayerNormalization over more than the last axis is not supported");
    if (!g.is_const(g.in(n, 1)) || (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !g.is_const(g.in(n, 2))))
      throw fail("scale and bias must be constants");
  } else if (op == "Softmax") {
    const int64_t rank = static_cast<int64_t>(xs.size());
    const int64_t axis = node.attr_int("axis", node.opset() >= 13 ? -1 : 1);
    if (node.opset() < 13 && axis != -1 && axis != rank - 1)
      throw fail("Softmax before opset 13 is supported only over the last axis");
  } else if (op == "Concat") {
    for (size_t i = 0; i < g.num_in(n); ++i)
      if (g.in(n, i) < 0 || g.shape(g.in(n, i)).size() != g.shape(y).size()) throw fail("inputs of different rank");
  } else if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
    // Axes come from an attribute or a constant input; none means every axis.
    if (g.num_in(n) > 1 && g.in(n, 1) >= 0 && !g.is_const(g.in(n, 1))) throw fail("the axes must be a constant");
    if (node.attr_int("noop_with_empty_axes", 0) != 0) throw fail("noop_with_empty_axes=1 is not supported");
  } else if (binary_ops().count(op)) {
    // oneDNN's binary broadcasts only its second operand; a constant scalar
    // operand becomes an eltwise (linear, or pow for c / x) instead.
    const Dims& ys = g.shape(y);
    const bool a_full = left_pad(g.shape(g.in(n, 0)), ys.size()) == ys;
    const bool b_full = left_pad(g.shape(g.in(n, 1)), ys.size()) == ys;
    const bool commutative = op == "Add" || op == "Mul" || op == "Max" || op == "Min";
    const bool a_const_scalar = g.scalar(g.in(n, 0)).has_value() && (op == "Sub" || op == "Div");
    if (!a_full && !b_full) throw fail("broadcasting both operands is not supported");
    if (!a_full && !commutative && !a_const_scalar)
      throw fail("broadcasting the first operand of " + std::string(op) + " is not supported");
  } else if (op == "Pow") {
    if (!g.scalar(g.in(n, 1))) throw fail("Pow is supported only with a constant scalar exponent");
  } else if (op == "Clip") {
    for (size_t i = 1; i < g.num_in(n); ++i)
      if (g.in(n, i) >= 0 && !g.scalar(g.in(n, i))) throw fail("Clip bounds must be constant scalars");
  } else if (op == "Gelu") {
    const std::string approx = node.attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh") throw fail("Gelu approximate='" + approx + "' is not supported");
  } else if (op == "Erf") {
    throw fail("Erf is supported only inside x*0.5*(1+erf(x/sqrt(2))) (GELU)");
  } else if (op == "Transpose") {
    std::vector<int64_t> perm = node.attr_ints("perm", {});
    if (!perm.empty() && perm.size() != xs.size()) throw fail("perm does not match the input rank");
  }
}

// ---------------------------------------------------------------------------
// Internal nodes: view nodes after pattern matching and BatchNorm folding
// ---------------------------------------------------------------------------

struct PostOp {
  enum Kind { kEltwise, kSum } kind = kEltwise;
  algorithm alg = algorithm::eltwise_linear;
  float alpha = 0, beta = 0;
  int residual = -1;  // kSum: the value added
};

struct INode {
  std::string op;
  int node = -1;            // the view node (attributes); patterns: their first node
  std::vector<int> covers;  // every view node this one stands for
  std::vector<int> in;      // value ids, -1 = absent
  int out = -1;
  bool dead = false;
  // Pattern parameters.
  float eps = 0;
  // Conv with a folded BatchNormalization: replacement weights and bias.
  std::shared_ptr<std::vector<float>> weights, bias;
  // Main ops (Conv/Gemm/MatMul): fused followers.
  std::vector<PostOp> post;
  int bias_value = -1;  // MatMul: a fused Add of a per-column constant
  int anchor = -1;      // index of the INode where this group executes
  int group = -1;       // absorbed node: the INode it was fused into
};

// Eltwise algorithm for a one-input activation node, if it is one.
std::optional<PostOp> eltwise_of(ViewInfo& g, const INode& n) {
  PostOp p;
  const std::string& op = n.op;
  if (op == "GeluErf") p.alg = algorithm::eltwise_gelu_erf;
  else if (op == "Relu") p.alg = algorithm::eltwise_relu;
  else if (op == "LeakyRelu") p.alg = algorithm::eltwise_relu, p.alpha = g.node(n.node).attr_float("alpha", 0.01f);
  else if (op == "Sigmoid") p.alg = algorithm::eltwise_logistic;
  else if (op == "Tanh") p.alg = algorithm::eltwise_tanh;
  else if (op == "Sqrt") p.alg = algorithm::eltwise_sqrt;
  else if (op == "Exp") p.alg = algorithm::eltwise_exp;
  else if (op == "Abs") p.alg = algorithm::eltwise_abs;
  else if (op == "Neg") p.alg = algorithm::eltwise_linear, p.alpha = -1.f;
  else if (op == "Elu") p.alg = algorithm::eltwise_elu, p.alpha = g.node(n.node).attr_float("alpha", 1.f);
  else if (op == "Gelu")
    p.alg = g.node(n.node).attr_string("approximate", "none") == "tanh" ? algorithm::eltwise_gelu_tanh
                                                                        : algorithm::eltwise_gelu_erf;
  else if (op == "Pow") p.alg = algorithm::eltwise_pow, p.alpha = 1.f, p.beta = *g.scalar(n.in[1]);
  else if (op == "Clip") {
    p.alg = algorithm::eltwise_clip;
    p.alpha = -kInf;
    p.beta = kInf;
    if (g.node(n.node).opset() < 11) {
      p.alpha = g.node(n.node).attr_float("min", -kInf);
      p.beta = g.node(n.node).attr_float("max", kInf);
    } else {
      if (n.in.size() > 1 && n.in[1] >= 0) p.alpha = *g.scalar(n.in[1]);
      if (n.in.size() > 2 && n.in[2] >= 0) p.beta = *g.scalar(n.in[2]);
    }
  } else
    return std::nullopt;
  return p;
}

// Add/Sub/Mul/Div of `v` and a constant scalar, as y = alpha * v + beta.
std::optional<PostOp> linear_of(ViewInfo& g, const INode& n, int v) {
  if (n.in.size() != 2 || (n.in[0] == v) == (n.in[1] == v)) return std::nullopt;
  const bool first = n.in[0] == v;
  auto c = g.scalar(first ? n.in[1] : n.in[0]);
  if (!c || g.shape(n.out) != g.shape(v)) return std::nullopt;
  PostOp p;
  p.alg = algorithm::eltwise_linear;
  if (n.op == "Add") p.alpha = 1, p.beta = *c;
  else if (n.op == "Mul") p.alpha = *c, p.beta = 0;
  else if (n.op == "Sub") p.alpha = first ? 1.f : -1.f, p.beta = first ? -*c : *c;
  else if (n.op == "Div" && first) p.alpha = 1.f / *c, p.beta = 0;
  else if (n.op == "Div") p.alg = algorithm::eltwise_pow, p.alpha = *c, p.beta = -1.f;  // c / v
  else return std::nullopt;
  return p;
}

// ---------------------------------------------------------------------------
// Lowering
// ---------------------------------------------------------------------------

class Lowering {
 public:
  Lowering(ViewInfo& g, Compiled& c) : g_(g), c_(c), stream_(engine()) {
    attr_.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  }

  // Builds the internal nodes: patterns, BatchNorm folding, fusion groups.
  void prepare() {
    const size_t nn = g_.num_nodes();
    nodes_.resize(nn);
    for (size_t n = 0; n < nn; ++n) {
      INode& in = nodes_[n];
      in.op = std::string(g_.op(static_cast<int>(n)));
      in.node = static_cast<int>(n);
      in.covers = {static_cast<int>(n)};
      const bp_node_t& raw = g_.view().nodes[n];
      in.in.assign(raw.inputs, raw.inputs + raw.num_inputs);
      in.out = g_.out(static_cast<int>(n));
    }
    for (Pattern& p : find_patterns(g_)) {
      const int last = *std::max_element(p.nodes.begin(), p.nodes.end());
      for (int k : p.nodes) nodes_[k].dead = true;
      INode& in = nodes_[last];
      in = INode{};
      in.op = p.op;
      in.node = *std::min_element(p.nodes.begin(), p.nodes.end());
      in.covers = p.nodes;
      in.in = {p.x, p.gamma, p.beta};
      in.out = p.out;
      in.eps = p.eps;
    }
    consumers_.assign(g_.values.size(), {});
    for (size_t n = 0; n < nn; ++n) {
      if (nodes_[n].dead) continue;
      for (int v : nodes_[n].in)
        if (v >= 0 && (consumers_[v].empty() || consumers_[v].back() != static_cast<int>(n)))
          consumers_[v].push_back(static_cast<int>(n));
    }
    for (size_t n = 0; n < nn; ++n)
      if (!nodes_[n].dead && nodes_[n].op == "Conv") fold_batch_norm(static_cast<int>(n));
    for (size_t n = 0; n < nn; ++n) {
      INode& in = nodes_[n];
      if (in.dead || in.group >= 0) continue;
      in.anchor = static_cast<int>(n);
      if (in.op == "Conv" || in.op == "Gemm" || in.op == "MatMul") build_group(static_cast<int>(n));
    }
  }

  // Emits the steps; on failure reports the node and returns false.
  bool lower(sdk::NodeReport& report) {
    for (size_t k = 0; k < g_.view().num_inputs; ++k) {
      const int v = g_.view().inputs[k];
      const int b = new_buffer(Buffer::kInput, k, bytes(v));
      tensors_[v] = add_ref(b, plain_md(g_.shape(v)));
      c_.input_bytes.push_back(bytes(v));
    }
    std::vector<std::vector<int>> groups_at(nodes_.size());
    for (size_t n = 0; n < nodes_.size(); ++n)
      if (!nodes_[n].dead && nodes_[n].group < 0) groups_at[nodes_[n].anchor].push_back(static_cast<int>(n));
    for (size_t a = 0; a < nodes_.size(); ++a) {
      for (int n : groups_at[a]) {
        try {
          lower_node(n);
        } catch (const std::exception& e) {
          std::string why = e.what();
          for (int k : nodes_[n].covers) report.rejected(static_cast<size_t>(k), why);
          for (size_t k = 0; k < nodes_.size(); ++k)
            if (nodes_[k].group == n)
              for (int j : nodes_[k].covers) report.rejected(static_cast<size_t>(j), why);
          return false;
        }
      }
    }
    bind_outputs();
    plan_arena();
    return true;
  }

 private:
  // ---- preparation ----------------------------------------------------------

  int only_consumer(int v) const {
    if (v < 0 || g_.values[v].output || consumers_[v].size() != 1) return -1;
    return consumers_[v][0];
  }

  void fold_batch_norm(int n) {
    INode& conv = nodes_[n];
    const int bn = only_consumer(conv.out);
    if (bn < 0 || nodes_[bn].op != "BatchNormalization" || nodes_[bn].in[0] != conv.out) return;
    try {
      check_node(g_, bn);
      check_node(g_, n);
    } catch (const sdk::Error&) {
      return;
    }
    const INode& b = nodes_[bn];
    const Dims& ws = g_.shape(conv.in[1]);
    const int64_t oc = ws[0], per = numel(ws) / oc;
    const float* scale = g_.f32(b.in[1]);
    const float* shift = g_.f32(b.in[2]);
    const float* mean = g_.f32(b.in[3]);
    const float* var = g_.f32(b.in[4]);
    const float eps = g_.node(b.node).attr_float("epsilon", 1e-5f);
    const float* w = g_.f32(conv.in[1]);
    const bool has_bias = conv.in.size() > 2 && conv.in[2] >= 0;
    auto nw = std::make_shared<std::vector<float>>(w, w + numel(ws));
    auto nb = std::make_shared<std::vector<float>>(static_cast<size_t>(oc), 0.f);
    const float* cb = has_bias ? g_.f32(conv.in[2]) : nullptr;
    for (int64_t o = 0; o < oc; ++o) {
      const double f = scale[o] / std::sqrt(static_cast<double>(var[o]) + eps);
      for (int64_t i = 0; i < per; ++i) (*nw)[o * per + i] = static_cast<float>((*nw)[o * per + i] * f);
      (*nb)[o] = static_cast<float>(((cb ? cb[o] : 0.f) - mean[o]) * f + shift[o]);
    }
    conv.weights = nw;
    conv.bias = nb;
    conv.out = b.out;
    conv.covers.insert(conv.covers.end(), b.covers.begin(), b.covers.end());
    nodes_[bn].dead = true;
  }

  // Absorbs the single-consumer chain after main node n: bias (MatMul), one
  // residual Add (sum post-op), activations and scalar arithmetic.
  void build_group(int n) {
    INode& m = nodes_[n];
    int cur = m.out;
    bool sum_used = false;
    while (true) {
      const int k = only_consumer(cur);
      if (k < 0 || nodes_[k].dead || nodes_[k].group >= 0) break;
      INode& f = nodes_[k];
      if (f.op != "GeluErf") {
        try {
          check_node(g_, f.node);
        } catch (const sdk::Error&) {
          break;
        }
      }
      std::optional<PostOp> p;
      if (f.in.empty() || f.in[0] != cur) {
        if (!binary_ops().count(f.op)) break;
      }
      if (binary_ops().count(f.op)) {
        if (f.op == "Max" || f.op == "Min") break;
        const int other = (f.in[0] == cur) ? f.in[1] : f.in[0];
        if (f.in[0] == f.in[1]) break;
        p = linear_of(g_, f, cur);
        if (!p && m.op == "MatMul" && m.post.empty() && m.bias_value < 0 && f.op == "Add" && g_.is_const(other) &&
            numel(g_.shape(other)) == g_.shape(cur).back() && g_.shape(other).back() == g_.shape(cur).back() &&
            g_.shape(other).size() <= g_.shape(cur).size()) {
          m.bias_value = other;
        } else if (!p && f.op == "Add" && !sum_used && !g_.is_const(other) && g_.shape(other) == g_.shape(cur) &&
                   g_.shape(f.out) == g_.shape(cur)) {
          PostOp s;
          s.kind = PostOp::kSum;
          s.residual = other;
          p = s;
          sum_used = true;
        } else if (!p) {
          break;
        }
      } else {
        if (f.in.size() > 1 && f.op != "Clip" && f.op != "Pow" && f.op != "GeluErf") break;
        p = eltwise_of(g_, f);
        if (!p) break;
      }
      if (p) m.post.push_back(*p);
      f.group = n;
      cur = f.out;
      m.out = cur;
      m.anchor = k;
    }
  }

  // ---- buffers and refs ---------------------------------------------------------

  size_t bytes(int v) const { return static_cast<size_t>(numel(g_.shape(v))) * sizeof(float); }

  int new_buffer(Buffer::Kind kind, size_t index, size_t size) {
    Buffer b;
    b.kind = kind;
    b.index = index;
    b.size = size;
    c_.buffers.push_back(b);
    return static_cast<int>(c_.buffers.size()) - 1;
  }
  int add_ref(int buffer, const memory::desc& md) {
    MemRef r;
    r.buffer = buffer;
    r.md = md;
    c_.refs.push_back(r);
    return static_cast<int>(c_.refs.size()) - 1;
  }
  int new_arena(const memory::desc& md) { return add_ref(new_buffer(Buffer::kArena, 0, md.get_size()), md); }
  int const_ref(const memory::desc& md, const void* data) {
    MemRef r;
    r.md = md;
    r.constant = dnnl::memory(md, engine());
    std::memcpy(r.constant.get_data_handle(), data, md.get_size());
    c_.refs.push_back(r);
    return static_cast<int>(c_.refs.size()) - 1;
  }
  // A constant reordered once into `want` (e.g. a blocked weights layout).
  int const_reordered(const memory::desc& user, const void* data, const memory::desc& want) {
    if (user == want) return const_ref(user, data);
    dnnl::memory src(user, engine(), const_cast<void*>(data));
    MemRef r;
    r.md = want;
    r.constant = dnnl::memory(want, engine());
    dnnl::reorder(src, r.constant).execute(stream_, src, r.constant);
    stream_.wait();
    c_.refs.push_back(r);
    return static_cast<int>(c_.refs.size()) - 1;
  }

  // The ref holding value v (constants become plain constant refs).
  int ref_of(int v) {
    auto it = tensors_.find(v);
    if (it != tensors_.end()) return it->second;
    if (g_.is_const(v)) {
      const int r = const_ref(plain_md(g_.shape(v)), g_.f32(v));
      tensors_[v] = r;
      return r;
    }
    throw fail("value '" + g_.value_name(v) + "' is not available (its producer was not lowered)");
  }
  const memory::desc& md(int ref) const { return c_.refs[ref].md; }
  Dims dims_of(int ref) const {
    const memory::dims d = md(ref).dims();
    return Dims(d.begin(), d.end());
  }

  void add_step(dnnl::primitive prim, std::vector<std::pair<int, int>> args, const dnnl::primitive_desc_base& pd,
                const std::string& what) {
    const memory::desc sp = pd.scratchpad_desc();
    if (sp.get_size() > 0) {
      MemRef r;
      r.md = sp;
      r.scratch = true;
      c_.refs.push_back(r);
      args.push_back({DNNL_ARG_SCRATCHPAD, static_cast<int>(c_.refs.size()) - 1});
      c_.scratch_bytes = std::max(c_.scratch_bytes, sp.get_size());
    }
    const int s = static_cast<int>(c_.steps.size());
    for (auto [arg, r] : args) {
      const int b = c_.refs[r].buffer;
      if (b < 0) continue;
      c_.buffers[b].first = std::min(c_.buffers[b].first, s);
      c_.buffers[b].last = std::max(c_.buffers[b].last, s);
    }
    Step step;
    step.prim = std::move(prim);
    step.args = std::move(args);
    step.what = what;
    c_.steps.push_back(std::move(step));
  }

  // `ref` in layout `want`: itself, or a (cached) reorder into a new buffer.
  int as_md(int ref, const memory::desc& want) {
    if (md(ref) == want) return ref;
    for (const auto& [src, dst] : reorders_)
      if (src == ref && md(dst) == want) return dst;
    if (c_.refs[ref].constant) return const_reordered(md(ref), c_.refs[ref].constant.get_data_handle(), want);
    const int dst = new_arena(want);
    copy(ref, dst);
    reorders_.push_back({ref, dst});
    return dst;
  }
  void copy(int src, int dst) {
    dnnl::reorder::primitive_desc pd(engine(), md(src), engine(), md(dst), attr_);
    add_step(dnnl::reorder(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, pd, "reorder");
  }
  int as_plain(int ref, const Dims& shape) { return as_md(ref, plain_md(shape)); }
  // A view of `ref` with another shape (same bytes), reordering to plain first
  // if the layout cannot be reshaped.
  int reshaped(int ref, const Dims& shape) {
    const memory::dims dims = to_dims(shape);
    if (md(ref).dims() == dims) return ref;
    if (!is_blocked(md(ref)) && is_dense(md(ref))) {
      try {
        return alias(ref, md(ref).reshape(dims));
      } catch (const dnnl::error&) {
      }
    }
    const int plain = as_plain(ref, dims_of(ref));
    return alias(plain, plain_md(shape));
  }
  // Another description of the same bytes (buffer or constant).
  int alias(int ref, const memory::desc& new_md) {
    MemRef r = c_.refs[ref];
    r.md = new_md;
    c_.refs.push_back(r);
    return static_cast<int>(c_.refs.size()) - 1;
  }
  // `ref` as a plain (possibly strided) layout that matmul/softmax/etc. take.
  int unblocked(int ref) {
    if (!is_blocked(md(ref))) return ref;
    return as_plain(ref, dims_of(ref));
  }
  // `ref` without gaps other than a blocked layout's channel padding.
  int dense(int ref) {
    if (is_blocked(md(ref)) || is_dense(md(ref))) return ref;
    return as_plain(ref, dims_of(ref));
  }

  // True if nothing reads `buffer` (through any value sharing it) after the
  // group executing at `anchor`, so that group may overwrite it.
  bool buffer_free_after(int buffer, int anchor) const {
    if (buffer < 0 || c_.buffers[buffer].kind != Buffer::kArena) return false;
    for (const auto& [v, r] : tensors_) {
      if (c_.refs[r].buffer != buffer) continue;
      if (g_.values[v].output) return false;
      for (int k : consumers_[v]) {
        const INode& n = nodes_[k];
        const int at = n.group >= 0 ? nodes_[n.group].anchor : n.anchor;
        if (at > anchor) return false;
      }
    }
    return true;
  }

  dnnl::primitive_attr attr_with(const std::vector<PostOp>& post) const {
    dnnl::primitive_attr a;
    a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (!post.empty()) {
      dnnl::post_ops po;
      for (const PostOp& p : post) {
        if (p.kind == PostOp::kSum) po.append_sum(1.f);
        else po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
      }
      a.set_post_ops(po);
    }
    return a;
  }

  // The destination of a main op: a new buffer, or, with a sum post-op, the
  // residual's own buffer when nothing reads it afterwards (else a copy).
  int main_dst(const INode& n, const memory::desc& dst_md) {
    for (const PostOp& p : n.post) {
      if (p.kind != PostOp::kSum) continue;
      const int r = ref_of(p.residual);
      if (md(r) == dst_md && buffer_free_after(c_.refs[r].buffer, n.anchor)) return add_ref(c_.refs[r].buffer, dst_md);
      const int dst = new_arena(dst_md);
      copy(r, dst);
      return dst;
    }
    return new_arena(dst_md);
  }
  // A layout hint for the destination: the residual's, so the sum is in place.
  memory::desc dst_hint(const INode& n, const Dims& shape) {
    for (const PostOp& p : n.post)
      if (p.kind == PostOp::kSum) {
        const memory::desc& r = md(ref_of(p.residual));
        if (is_dense(r)) return r;
      }
    return any_md(shape);
  }

  // ---- operators -------------------------------------------------------------

  void lower_node(int n) {
    const INode& node = nodes_[n];
    const std::string& op = node.op;
    if (op != "GeluErf" && op != "LayerNorm") check_node(g_, node.node);
    if (op == "Conv") return lower_conv(node);
    if (op == "Gemm") return lower_gemm(node);
    if (op == "MatMul") return lower_matmul(node);
    if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool")
      return lower_pool(node);
    if (op == "BatchNormalization") return lower_batch_norm(node);
    if (op == "LayerNorm" || op == "LayerNormalization") return lower_layer_norm(node);
    if (op == "Softmax") return lower_softmax(node);
    if (op == "Concat") return lower_concat(node);
    if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") return lower_reduce(node);
    if (binary_ops().count(op)) return lower_binary(node);
    if (op == "Transpose") return lower_transpose(node);
    if (view_ops().count(op)) {
      tensors_[node.out] = reshaped(ref_of(node.in[0]), g_.shape(node.out));
      return;
    }
    if (auto p = eltwise_of(g_, node)) return lower_eltwise(node.in[0], node.out, *p);
    throw fail("operator '" + op + "' has no lowering");
  }

  void lower_eltwise(int x, int y, const PostOp& p) {
    const int src = dense(ref_of(x));
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, p.alg, md(src), p.alpha, p.beta);
    dnnl::eltwise_forward::primitive_desc pd(d, attr_, engine());
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::eltwise_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, pd, "eltwise");
    tensors_[y] = dst;
  }

  void lower_conv(const INode& n) {
    const Dims& xs = g_.shape(n.in[0]);
    const Dims& ws = g_.shape(n.in[1]);
    const Dims& ys = g_.shape(n.out);
    const int64_t group = g_.node(n.node).attr_int("group", 1);
    const std::vector<int64_t> ks = g_.node(n.node).attr_ints("kernel_shape", Dims(ws.begin() + 2, ws.end()));
    if (ks != Dims(ws.begin() + 2, ws.end())) throw fail("kernel_shape does not match the weights");
    Window w = window(g_, n.node, xs, ys, ks);
    if (ws[0] % group != 0 || xs[1] != ws[1] * group) throw fail("group does not divide the channels");
    Dims wdims = ws;
    if (group > 1) {
      wdims = {group, ws[0] / group};
      wdims.insert(wdims.end(), ws.begin() + 1, ws.end());
    }
    const bool has_bias = n.bias || (n.in.size() > 2 && n.in[2] >= 0);
    const memory::desc bias_md = has_bias ? any_md({ws[0]}) : memory::desc();
    const dnnl::primitive_attr attr = attr_with(n.post);
    auto make = [&](const memory::desc& dst) {
      dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, algorithm::convolution_direct,
                                        any_md(xs), any_md(wdims), bias_md, dst, w.strides, w.dilation, w.pad_l,
                                        w.pad_r);
      return dnnl::convolution_forward::primitive_desc(d, attr, engine());
    };
    dnnl::convolution_forward::primitive_desc pd;
    try {
      pd = make(dst_hint(n, ys));
    } catch (const dnnl::error&) {
      pd = make(any_md(ys));
    }
    const float* wdata = n.weights ? n.weights->data() : g_.f32(n.in[1]);
    const int wref = const_reordered(plain_md(wdims), wdata, pd.weights_desc());
    const int src = as_md(ref_of(n.in[0]), pd.src_desc());
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
    if (has_bias) {
      const float* b = n.bias ? n.bias->data() : g_.f32(n.in[2]);
      args.push_back({DNNL_ARG_BIAS, const_reordered(plain_md({ws[0]}), b, pd.bias_desc())});
    }
    const int dst = main_dst(n, pd.dst_desc());
    args.push_back({DNNL_ARG_DST, dst});
    add_step(dnnl::convolution_forward(pd), std::move(args), pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_gemm(const INode& n) {
    sdk::NodeRef node = g_.node(n.node);
    const Dims& as = g_.shape(n.in[0]);
    const Dims& bs = g_.shape(n.in[1]);
    const Dims& ys = g_.shape(n.out);
    const float alpha = node.attr_float("alpha", 1.f), beta = node.attr_float("beta", 1.f);
    const bool trans_b = node.attr_int("transB", 0) != 0;
    const int64_t m = ys[0], nout = ys[1], k = as[1];
    const float* b = g_.f32(n.in[1]);
    std::vector<float> w(static_cast<size_t>(nout * k));  // [N, K]
    for (int64_t i = 0; i < nout; ++i)
      for (int64_t j = 0; j < k; ++j) w[i * k + j] = alpha * (trans_b ? b[i * k + j] : b[j * bs[1] + i]);
    const bool has_bias = n.in.size() > 2 && n.in[2] >= 0;
    std::vector<float> bias;
    if (has_bias) {
      const float* c = g_.f32(n.in[2]);
      for (int64_t i = 0; i < nout; ++i) bias.push_back(beta * c[i]);
    }
    dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_inference, any_md({m, k}), any_md({nout, k}),
                                        has_bias ? any_md({nout}) : memory::desc(), dst_hint(n, ys));
    dnnl::inner_product_forward::primitive_desc pd(d, attr_with(n.post), engine());
    const int wref = const_reordered(plain_md({nout, k}), w.data(), pd.weights_desc());
    const int src = as_md(ref_of(n.in[0]), pd.src_desc());
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
    if (has_bias) args.push_back({DNNL_ARG_BIAS, const_reordered(plain_md({nout}), bias.data(), pd.bias_desc())});
    const int dst = main_dst(n, pd.dst_desc());
    args.push_back({DNNL_ARG_DST, dst});
    add_step(dnnl::inner_product_forward(pd), std::move(args), pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_matmul(const INode& n) {
    const Dims& ys = g_.shape(n.out);
    const size_t rank = ys.size();
    const Dims as = left_pad(g_.shape(n.in[0]), rank);
    const Dims bs = left_pad(g_.shape(n.in[1]), rank);
    const int src = reshaped(unblocked(ref_of(n.in[0])), as);
    const bool const_b = g_.is_const(n.in[1]);
    int wref = -1;
    memory::desc wmd = const_b ? any_md(bs) : memory::desc();
    if (!const_b) {
      wref = reshaped(unblocked(ref_of(n.in[1])), bs);
      wmd = md(wref);
    }
    memory::desc bias_md;
    if (n.bias_value >= 0) bias_md = plain_md(left_pad({ys.back()}, rank));
    memory::desc dst_md = dst_hint(n, ys);
    if (dst_md.data.format_kind == dnnl_format_kind_any) dst_md = plain_md(ys);
    dnnl::matmul::desc d(md(src), wmd, bias_md, dst_md);
    dnnl::matmul::primitive_desc pd(d, attr_with(n.post), engine());
    if (const_b) wref = const_reordered(plain_md(bs), g_.f32(n.in[1]), pd.weights_desc());
    std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
    if (n.bias_value >= 0) args.push_back({DNNL_ARG_BIAS, const_ref(bias_md, g_.f32(n.bias_value))});
    const int dst = main_dst(n, pd.dst_desc());
    args.push_back({DNNL_ARG_DST, dst});
    add_step(dnnl::matmul(pd), std::move(args), pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_pool(const INode& n) {
    sdk::NodeRef node = g_.node(n.node);
    const Dims& xs = g_.shape(n.in[0]);
    const Dims& ys = g_.shape(n.out);
    const bool global = n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool";
    Window w;
    if (global) {
      for (size_t i = 2; i < xs.size(); ++i) {
        w.kernel.push_back(xs[i]);
        w.strides.push_back(1);
        w.dilation.push_back(0);
        w.pad_l.push_back(0);
        w.pad_r.push_back(0);
      }
    } else {
      w = window(g_, n.node, xs, ys, node.attr_ints("kernel_shape"));
    }
    const bool is_max = n.op == "MaxPool" || n.op == "GlobalMaxPool";
    const algorithm alg = is_max ? algorithm::pooling_max
                          : node.attr_int("count_include_pad", 0) != 0 ? algorithm::pooling_avg_include_padding
                                                                       : algorithm::pooling_avg_exclude_padding;
    auto make = [&](int src) {
      dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, md(src), any_md(ys), w.strides,
                                       w.kernel, w.dilation, w.pad_l, w.pad_r);
      return dnnl::pooling_v2_forward::primitive_desc(d, attr_, engine());
    };
    int src = ref_of(n.in[0]);
    dnnl::pooling_v2_forward::primitive_desc pd;
    try {
      pd = make(src);
    } catch (const dnnl::error&) {
      src = as_plain(src, xs);
      pd = make(src);
    }
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::pooling_v2_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_batch_norm(const INode& n) {
    const Dims& xs = g_.shape(n.in[0]);
    const float eps = g_.node(n.node).attr_float("epsilon", 1e-5f);
    const int src = dense(ref_of(n.in[0]));
    const auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                       dnnl::normalization_flags::use_shift;
    dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md(src), eps, flags);
    dnnl::batch_normalization_forward::primitive_desc pd(d, attr_, engine());
    const memory::desc c = plain_md({xs[1]});
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::batch_normalization_forward(pd),
             {{DNNL_ARG_SRC, src},
              {DNNL_ARG_SCALE, const_ref(c, g_.f32(n.in[1]))},
              {DNNL_ARG_SHIFT, const_ref(c, g_.f32(n.in[2]))},
              {DNNL_ARG_MEAN, const_ref(c, g_.f32(n.in[3]))},
              {DNNL_ARG_VARIANCE, const_ref(c, g_.f32(n.in[4]))},
              {DNNL_ARG_DST, dst}},
             pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_layer_norm(const INode& n) {
    const Dims& xs = g_.shape(n.in[0]);
    const float eps = n.op == "LayerNorm" ? n.eps : g_.node(n.node).attr_float("epsilon", 1e-5f);
    const int src = as_plain(ref_of(n.in[0]), xs);
    const int64_t c = xs.back();
    std::vector<float> scale(static_cast<size_t>(c), 1.f), shift(static_cast<size_t>(c), 0.f);
    if (n.in.size() > 1 && n.in[1] >= 0) std::memcpy(scale.data(), g_.f32(n.in[1]), c * sizeof(float));
    if (n.in.size() > 2 && n.in[2] >= 0) std::memcpy(shift.data(), g_.f32(n.in[2]), c * sizeof(float));
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, md(src), eps, flags);
    dnnl::layer_normalization_forward::primitive_desc pd(d, attr_, engine());
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::layer_normalization_forward(pd),
             {{DNNL_ARG_SRC, src},
              {DNNL_ARG_SCALE, const_ref(plain_md({c}), scale.data())},
              {DNNL_ARG_SHIFT, const_ref(plain_md({c}), shift.data())},
              {DNNL_ARG_DST, dst}},
             pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_softmax(const INode& n) {
    const Dims& xs = g_.shape(n.in[0]);
    const int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = g_.node(n.node).attr_int("axis", g_.node(n.node).opset() >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    if (rank == 0) axis = 0;
    const int src = as_plain(ref_of(n.in[0]), xs);
    dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md(src), static_cast<int>(axis));
    dnnl::softmax_forward::primitive_desc pd(d, attr_, engine());
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, pd, g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_concat(const INode& n) {
    const int64_t rank = static_cast<int64_t>(g_.shape(n.out).size());
    int64_t axis = g_.node(n.node).attr_int("axis", 0);
    if (axis < 0) axis += rank;
    std::vector<int> srcs;
    std::vector<memory::desc> mds;
    for (int v : n.in) {
      srcs.push_back(dense(ref_of(v)));
      mds.push_back(md(srcs.back()));
    }
    // Mixed layouts: bring every input to the first one's.
    for (size_t i = 1; i < srcs.size(); ++i)
      if (is_blocked(mds[0]) != is_blocked(mds[i]) ||
          (is_blocked(mds[0]) && mds[0].data.format_desc.blocking.inner_blks[0] !=
                                     mds[i].data.format_desc.blocking.inner_blks[0])) {
        for (size_t j = 0; j < srcs.size(); ++j) {
          srcs[j] = as_plain(srcs[j], g_.shape(n.in[j]));
          mds[j] = md(srcs[j]);
        }
        break;
      }
    dnnl::concat::primitive_desc pd(static_cast<int>(axis), mds, engine(), attr_);
    const int dst = new_arena(pd.dst_desc());
    std::vector<std::pair<int, int>> args;
    for (size_t i = 0; i < srcs.size(); ++i) args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]});
    args.push_back({DNNL_ARG_DST, dst});
    add_step(dnnl::concat(pd), std::move(args), pd, g_.describe(n.node));
    c_.steps.back().concat_axis = static_cast<int>(axis);
    tensors_[n.out] = dst;
  }

  void lower_reduce(const INode& n) {
    sdk::NodeRef node = g_.node(n.node);
    const Dims& xs = g_.shape(n.in[0]);
    const int64_t rank = static_cast<int64_t>(xs.size());
    std::vector<int64_t> axes;
    if (n.in.size() > 1 && n.in[1] >= 0) axes = *g_.ints(n.in[1]);
    else axes = node.attr_ints("axes", {});
    if (axes.empty())
      for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    Dims kept = xs;
    for (int64_t a : axes) kept[static_cast<size_t>(a < 0 ? a + rank : a)] = 1;
    const algorithm alg = n.op == "ReduceMean" ? algorithm::reduction_mean
                          : n.op == "ReduceSum" ? algorithm::reduction_sum
                                                : algorithm::reduction_max;
    const int src = unblocked(ref_of(n.in[0]));
    dnnl::reduction::desc d(alg, md(src), plain_md(kept), 0.f, 0.f);
    dnnl::reduction::primitive_desc pd(d, attr_, engine());
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::reduction(pd), {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}, pd, g_.describe(n.node));
    tensors_[n.out] = reshaped(dst, g_.shape(n.out));
  }

  void lower_binary(const INode& n) {
    const Dims& ys = g_.shape(n.out);
    const size_t rank = ys.size();
    int a = n.in[0], b = n.in[1];
    // A constant scalar operand: one eltwise_linear pass.
    for (int v : {a, b})
      if (auto p = linear_of(g_, n, v); p && g_.shape(v) == ys && !g_.is_const(v)) return lower_eltwise(v, n.out, *p);
    if (left_pad(g_.shape(a), rank) != ys) std::swap(a, b);  // commutative (checked)
    const Dims as = left_pad(g_.shape(a), rank), bs = left_pad(g_.shape(b), rank);
    const algorithm alg = n.op == "Add" ? algorithm::binary_add
                          : n.op == "Sub" ? algorithm::binary_sub
                          : n.op == "Mul" ? algorithm::binary_mul
                          : n.op == "Div" ? algorithm::binary_div
                          : n.op == "Max" ? algorithm::binary_max
                                          : algorithm::binary_min;
    if (n.in[0] == n.in[1]) b = a;
    int s0 = reshaped(dense(ref_of(a)), as);
    int s1 = reshaped(dense(ref_of(b)), bs);
    if (bs == as && md(s1) != md(s0)) s1 = as_md(s1, md(s0));
    auto make = [&]() {
      dnnl::binary::desc d(alg, md(s0), md(s1), md(s0));
      return dnnl::binary::primitive_desc(d, attr_, engine());
    };
    dnnl::binary::primitive_desc pd;
    try {
      pd = make();
    } catch (const dnnl::error&) {
      s0 = as_plain(s0, as);
      s1 = as_plain(s1, bs);
      pd = make();
    }
    const int dst = new_arena(pd.dst_desc());
    add_step(dnnl::binary(pd), {{DNNL_ARG_SRC_0, s0}, {DNNL_ARG_SRC_1, s1}, {DNNL_ARG_DST, dst}}, pd,
             g_.describe(n.node));
    tensors_[n.out] = dst;
  }

  void lower_transpose(const INode& n) {
    const Dims& xs = g_.shape(n.in[0]);
    const int rank = static_cast<int>(xs.size());
    std::vector<int64_t> perm = g_.node(n.node).attr_ints("perm", {});
    if (perm.empty())
      for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
    // oneDNN's permutation maps input axis i to output axis p[i].
    std::vector<int> p(static_cast<size_t>(rank));
    for (int i = 0; i < rank; ++i) p[static_cast<size_t>(perm[i] < 0 ? perm[i] + rank : perm[i])] = i;
    int src = unblocked(ref_of(n.in[0]));
    if (rank <= 1) {
      tensors_[n.out] = src;
      return;
    }
    tensors_[n.out] = alias(src, md(src).permute_axes(p));
  }

  // ---- outputs and the arena ---------------------------------------------------

  void bind_outputs() {
    std::set<int> bound;
    for (size_t k = 0; k < g_.view().num_outputs; ++k) {
      const int v = g_.view().outputs[k];
      c_.output_bytes.push_back(bytes(v));
      const int r = ref_of(v);
      const int b = c_.refs[r].buffer;
      if (b >= 0 && c_.buffers[b].kind == Buffer::kArena && !bound.count(b) && md(r) == plain_md(g_.shape(v)) &&
          c_.buffers[b].size == bytes(v)) {
        c_.buffers[b].kind = Buffer::kOutput;
        c_.buffers[b].index = k;
        bound.insert(b);
        continue;
      }
      const int out = add_ref(new_buffer(Buffer::kOutput, k, bytes(v)), plain_md(g_.shape(v)));
      if (c_.refs[r].constant) throw fail("output '" + g_.value_name(v) + "' is a constant");
      copy(r, out);
    }
  }

  // First fit over a free list; a buffer's bytes are reused once the last
  // step touching it has run.
  void plan_arena() {
    struct Block {
      size_t offset, size;
    };
    std::vector<Block> free_list;
    size_t top = 0;
    std::vector<int> order;
    for (size_t b = 0; b < c_.buffers.size(); ++b)
      if (c_.buffers[b].kind == Buffer::kArena && c_.buffers[b].last >= 0) order.push_back(static_cast<int>(b));
    std::sort(order.begin(), order.end(), [&](int x, int y) { return c_.buffers[x].first < c_.buffers[y].first; });
    std::vector<std::vector<int>> ending(c_.steps.size());
    for (int b : order) ending[c_.buffers[b].last].push_back(b);
    size_t next = 0;
    for (size_t s = 0; s < c_.steps.size(); ++s) {
      for (; next < order.size() && c_.buffers[order[next]].first == static_cast<int>(s); ++next) {
        Buffer& buf = c_.buffers[order[next]];
        const size_t size = align_up(std::max<size_t>(buf.size, 1));
        bool placed = false;
        for (size_t i = 0; i < free_list.size() && !placed; ++i)
          if (free_list[i].size >= size) {
            buf.offset = free_list[i].offset;
            free_list[i].offset += size;
            free_list[i].size -= size;
            if (free_list[i].size == 0) free_list.erase(free_list.begin() + static_cast<long>(i));
            placed = true;
          }
        if (!placed) {
          buf.offset = top;
          top += size;
        }
      }
      for (int b : ending[s]) free_list.push_back({c_.buffers[b].offset, align_up(std::max<size_t>(c_.buffers[b].size, 1))});
      std::sort(free_list.begin(), free_list.end(), [](const Block& x, const Block& y) { return x.offset < y.offset; });
      std::vector<Block> merged;
      for (const Block& blk : free_list) {
        if (!merged.empty() && merged.back().offset + merged.back().size == blk.offset) merged.back().size += blk.size;
        else merged.push_back(blk);
      }
      free_list = std::move(merged);
    }
    c_.arena_bytes = top;
  }

  ViewInfo& g_;
  Compiled& c_;
  dnnl::stream stream_;
  dnnl::primitive_attr attr_;
  std::vector<INode> nodes_;
  std::vector<std::vector<int>> consumers_;  // per value: INodes reading it
  std::map<int, int> tensors_;               // value -> MemRef
  std::vector<std::pair<int, int>> reorders_;  // (src ref, dst ref)
};

// The process's OpenMP default (OMP_NUM_THREADS or the CPUs it may use),
// read before this backend changes any thread's setting.
int default_threads() {
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

}  // namespace

int threads_to_use(int requested) { return requested > 0 ? requested : default_threads(); }

std::string library_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string library_description() {
  const dnnl_version_t* v = dnnl_version();
  const char* rt = v->cpu_runtime == DNNL_RUNTIME_OMP ? "OpenMP"
                   : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                   : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                        : "threadpool";
  return "oneDNN " + library_version() + " (" + rt + ")";
}

std::vector<std::string> unsupported_reasons(const sdk::Host& host, const bp_graph_view_t& view) {
  (void)default_threads();  // read the OpenMP default before compile changes it
  ViewInfo g(host, view);
  std::vector<std::string> reasons(view.num_nodes);
  std::vector<bool> in_pattern(view.num_nodes, false);
  for (const Pattern& p : find_patterns(g))
    for (int k : p.nodes) in_pattern[k] = true;
  for (size_t n = 0; n < view.num_nodes; ++n) {
    if (in_pattern[n] && g.op(static_cast<int>(n)) == "Erf") continue;
    try {
      check_node(g, static_cast<int>(n));
    } catch (const sdk::Error& e) {
      reasons[n] = e.what();
      if (reasons[n].empty()) reasons[n] = "unsupported";
    }
  }
  return reasons;
}

std::unique_ptr<sdk::CompiledPartition> compile_partition(const sdk::Host& host, const bp_graph_view_t& view,
                                                           int num_threads, sdk::NodeReport& report) {
  auto compiled = std::make_unique<Compiled>(host);
  compiled->threads = threads_to_use(num_threads);  // first thing: before any thread count is changed
  compiled->name = view.name;
  omp_set_num_threads(compiled->threads);
  ViewInfo g(host, view);
  Lowering lowering(g, *compiled);
  try {
    lowering.prepare();
  } catch (const std::exception& e) {
    for (size_t n = 0; n < view.num_nodes; ++n) report.rejected(n, std::string("pattern analysis failed: ") + e.what());
    compiled->empty = true;
    return compiled;
  }
  if (!lowering.lower(report)) {
    compiled->empty = true;
    compiled->steps.clear();
  }
  g.release_constants();  // every weight now lives in oneDNN memory
  omp_set_num_threads(compiled->threads);
  return compiled;
}

}  // namespace backplane::onednn
