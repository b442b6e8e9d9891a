// owned_view.cpp — deep copy of a graph view, and the same view at other shapes.
#include "onednn/owned_view.hpp"

#include <backplane/backend_sdk.hpp>

#include <type_traits>
#include <utility>

namespace backplane::onednn {

const char* OwnedView::keep(const char* s) {
  if (s == nullptr) return nullptr;
  return strings_.emplace_back(s).c_str();
}

template <class T>
const T* OwnedView::keep(const T* data, size_t count) {
  if (data == nullptr || count == 0) return nullptr;
  std::vector<T> copy(data, data + count);
  if constexpr (std::is_same_v<T, int64_t>) return int64s_.emplace_back(std::move(copy)).data();
  else if constexpr (std::is_same_v<T, int32_t>)
    return int32s_.emplace_back(std::move(copy)).data();
  else if constexpr (std::is_same_v<T, float>) return floats_.emplace_back(std::move(copy)).data();
  else return bytes_.emplace_back(std::move(copy)).data();
}

OwnedView::OwnedView(const bp_graph_view_t& view) {
  values_.reserve(view.num_values);
  for (size_t v = 0; v < view.num_values; ++v) {
    bp_value_t c = view.values[v];
    c.struct_size = BP_STRUCT_SIZE(bp_value_t, data_key);
    c.name = keep(c.name != nullptr ? c.name : "");
    c.shape = keep(c.shape, c.rank);
    c.data_key = keep(c.data_key);
    values_.push_back(c);
  }
  nodes_.reserve(view.num_nodes);
  for (size_t n = 0; n < view.num_nodes; ++n) {
    bp_node_t c = view.nodes[n];
    c.struct_size = BP_STRUCT_SIZE(bp_node_t, attributes);
    c.name = keep(c.name != nullptr ? c.name : "");
    c.op_type = keep(c.op_type != nullptr ? c.op_type : "");
    c.domain = keep(c.domain != nullptr ? c.domain : "");
    c.inputs = keep(c.inputs, c.num_inputs);
    c.outputs = keep(c.outputs, c.num_outputs);
    std::vector<bp_attribute_t>& attrs = attributes_.emplace_back();
    for (size_t a = 0; a < c.num_attributes; ++a) {
      bp_attribute_t at = view.nodes[n].attributes[a];
      at.struct_size = BP_STRUCT_SIZE(bp_attribute_t, t);
      at.name = keep(at.name != nullptr ? at.name : "");
      at.s = keep(at.s);
      at.ints = at.type == BP_ATTR_INTS ? keep(at.ints, at.count) : nullptr;
      at.floats = at.type == BP_ATTR_FLOATS ? keep(at.floats, at.count) : nullptr;
      if (at.type == BP_ATTR_STRINGS && at.strings != nullptr) {
        std::vector<const char*>& list = string_lists_.emplace_back();
        for (size_t i = 0; i < at.count; ++i) list.push_back(keep(at.strings[i]));
        at.strings = list.data();
      } else {
        at.strings = nullptr;
      }
      if (at.type == BP_ATTR_TENSOR && at.t != nullptr) {
        bp_attr_tensor_t t = *at.t;
        t.struct_size = BP_STRUCT_SIZE(bp_attr_tensor_t, size_bytes);
        t.shape = keep(t.shape, t.rank);
        t.data = keep(static_cast<const uint8_t*>(t.data), t.size_bytes);
        at.t = &attr_tensors_.emplace_back(t);
      } else {
        at.t = nullptr;
      }
      attrs.push_back(at);
    }
    c.attributes = attrs.empty() ? nullptr : attrs.data();
    nodes_.push_back(c);
  }
  view_.struct_size = BP_STRUCT_SIZE(bp_graph_view_t, weights);
  view_.name = keep(view.name != nullptr ? view.name : "");
  view_.num_values = values_.size();
  view_.values = values_.data();
  view_.num_nodes = nodes_.size();
  view_.nodes = nodes_.data();
  view_.num_inputs = view.num_inputs;
  view_.inputs = keep(view.inputs, view.num_inputs);
  view_.num_outputs = view.num_outputs;
  view_.outputs = keep(view.outputs, view.num_outputs);
  view_.weights = view.weights;
}

ShapedView::ShapedView(const bp_graph_view_t& view, const std::vector<std::vector<int64_t>>& shapes)
    : view_(view), shapes_(shapes), values_(view.values, view.values + view.num_values) {
  if (shapes_.size() != values_.size())
    throw sdk::Error(BP_STATUS_INTERNAL, "ShapedView: one shape per value expected");
  for (size_t v = 0; v < values_.size(); ++v) {
    values_[v].rank = shapes_[v].size();
    values_[v].shape = shapes_[v].empty() ? nullptr : shapes_[v].data();
  }
  view_.values = values_.data();
}

}  // namespace backplane::onednn
