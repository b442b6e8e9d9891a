// view_info.cpp — the graph view with producers, consumers and constants.
#include "onednn/view_info.hpp"

#include <algorithm>
#include <cstring>

namespace backplane::onednn {

Dims left_pad(const Dims& d, size_t rank) {
  Dims out(rank - std::min(rank, d.size()), 1);
  out.insert(out.end(), d.begin(), d.end());
  return out;
}

ViewInfo::ViewInfo(const sdk::Host& host, const bp_graph_view_t& view) : view_(view), host_(host) {
  values.resize(view.num_values);
  for (size_t v = 0; v < view.num_values; ++v) {
    const bp_value_t& bv = view.values[v];
    values[v].shape = sdk::shape_of(bv);
    values[v].dtype = bv.dtype;
    values[v].constant = (bv.flags & BP_VALUE_CONSTANT) != 0 && bv.data_key != nullptr;
    values[v].input = (bv.flags & BP_VALUE_VIEW_INPUT) != 0;
    for (int64_t d : values[v].shape) shapes_known_ = shapes_known_ && d >= 0;
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
  for (size_t n = 0; n < view.num_nodes; ++n) {
    const bp_node_t& node = view.nodes[n];
    const bool onnx = node.domain == nullptr || *node.domain == '\0';
    if (std::string_view(node.op_type) != "DequantizeLinear" || !onnx || node.num_outputs != 1 ||
        node.num_inputs < 2 || node.outputs[0] < 0)
      continue;
    ValueInfo& y = values[node.outputs[0]];
    bool constant = !y.output && y.dtype == BP_DTYPE_FLOAT32 &&
                    this->node(static_cast<int>(n)).attr_int("block_size", 0) == 0;
    for (size_t i = 0; i < node.num_inputs; ++i)
      constant = constant && (node.inputs[i] < 0 || values[node.inputs[i]].constant);
    const bp_dtype_t xt = values[node.inputs[0]].dtype;
    if (constant && (xt == BP_DTYPE_UINT8 || xt == BP_DTYPE_INT8 || xt == BP_DTYPE_INT32))
      y.constant = y.dequantized = true;
  }
}

namespace {

template <class T>
void dequantize(const T* x, const void* zero_point, const float* scale, int64_t count,
                int64_t len, int64_t inner, float* y) {
  const T* zp = static_cast<const T*>(zero_point);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t k = len == 1 ? 0 : (i / inner) % len;
    const int32_t z = zp != nullptr ? static_cast<int32_t>(zp[k]) : 0;
    // As ONNX (and CpuRef): the difference in integers, then one product.
    y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - z) * scale[k];
  }
}

}  // namespace

const float* ViewInfo::dequantized(int v) {
  auto it = dequantized_.find(v);
  if (it != dequantized_.end()) return it->second.data();
  const int n = values[v].producer;
  const int x = in(n, 0), s = in(n, 1), z = in(n, 2);
  const Dims& xs = shape(x);
  const int64_t count = sdk::element_count(xs);
  const int64_t len = sdk::element_count(shape(s));
  int64_t inner = 1;
  if (len != 1) {
    const int64_t rank = static_cast<int64_t>(xs.size());
    int64_t axis = node(n).attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || xs[axis] != len)
      throw fail("the scale of " + describe(n) + " does not have one value per index along axis");
    for (int64_t a = axis + 1; a < rank; ++a) inner *= xs[a];
  }
  if (values[s].dtype != BP_DTYPE_FLOAT32)
    throw fail("the scale of " + describe(n) + " is not float32");
  if (z >= 0 && (values[z].dtype != values[x].dtype || sdk::element_count(shape(z)) != len))
    throw fail("the zero point of " + describe(n) + " does not match its scale and input");
  std::vector<float> y(static_cast<size_t>(count));
  const void* xd = data(x);
  const void* zd = z >= 0 ? data(z) : nullptr;
  const float* sd = static_cast<const float*>(data(s));
  switch (values[x].dtype) {
    case BP_DTYPE_UINT8:
      dequantize(static_cast<const uint8_t*>(xd), zd, sd, count, len, inner, y.data());
      break;
    case BP_DTYPE_INT8:
      dequantize(static_cast<const int8_t*>(xd), zd, sd, count, len, inner, y.data());
      break;
    default:
      dequantize(static_cast<const int32_t*>(xd), zd, sd, count, len, inner, y.data());
  }
  return dequantized_.emplace(v, std::move(y)).first->second.data();
}

sdk::Weight ViewInfo::borrow(int v) {
  const bp_value_t& bv = view_.values[v];
  sdk::Weight w = host_.weight(view_.weights, bv.data_key);
  if (w.size() != sdk::byte_size(bv))
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, std::string("constant '") + bv.name + "' has " +
                                                 std::to_string(w.size()) + " bytes, expected " +
                                                 std::to_string(sdk::byte_size(bv)));
  return w;
}

const void* ViewInfo::data(int v) {
  if (values[v].dequantized) return dequantized(v);
  auto it = held_.find(v);
  if (it == held_.end()) it = held_.emplace(v, borrow(v)).first;
  return it->second.data();
}

const float* ViewInfo::f32(int v) {
  if (!is_const(v) || values[v].dtype != BP_DTYPE_FLOAT32)
    throw fail("'" + value_name(v) + "' must be a float32 constant");
  return static_cast<const float*>(data(v));
}

std::optional<float> ViewInfo::scalar(int v) {
  if (!is_const(v) || values[v].dtype != BP_DTYPE_FLOAT32 ||
      sdk::element_count(values[v].shape) != 1)
    return std::nullopt;
  return f32(v)[0];
}

std::optional<std::vector<int64_t>> ViewInfo::ints(int v) {
  if (!is_const(v)) return std::nullopt;
  const int64_t n = sdk::element_count(values[v].shape);
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

}  // namespace backplane::onednn
