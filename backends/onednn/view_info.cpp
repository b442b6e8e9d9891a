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
}

const void* ViewInfo::data(int v) {
  auto it = held_.find(v);
  if (it == held_.end()) {
    const bp_value_t& bv = view_.values[v];
    sdk::Weight w = host_.weight(view_.weights, bv.data_key);
    if (w.size() != sdk::byte_size(bv))
      throw sdk::Error(BP_STATUS_CORRUPT_DATA, std::string("constant '") + bv.name + "' has " +
                                                   std::to_string(w.size()) + " bytes, expected " +
                                                   std::to_string(sdk::byte_size(bv)));
    it = held_.emplace(v, std::move(w)).first;
  }
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
