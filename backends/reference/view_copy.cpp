// view_copy.cpp — see view_copy.hpp.
#include "reference/view_copy.hpp"

namespace backplane::cpuref {
namespace {

template <class T>
std::vector<T> list_of(const T* data, size_t count) {
  return data == nullptr || count == 0 ? std::vector<T>{} : std::vector<T>(data, data + count);
}

}  // namespace

const char* ViewCopy::keep(const char* s) {
  if (s == nullptr) return nullptr;
  return strings_.emplace_back(s).c_str();
}

bp_attribute_t ViewCopy::copy_attribute(const bp_attribute_t& a) {
  bp_attribute_t c{};
  c.struct_size = sizeof(bp_attribute_t);
  c.name = keep(a.name);
  c.type = a.type;
  c.i = a.i;
  c.f = a.f;
  c.s = a.type == BP_ATTR_STRING ? keep(a.s) : nullptr;
  c.count = a.count;
  if (a.type == BP_ATTR_INTS) c.ints = int_lists_.emplace_back(list_of(a.ints, a.count)).data();
  if (a.type == BP_ATTR_FLOATS)
    c.floats = float_lists_.emplace_back(list_of(a.floats, a.count)).data();
  if (a.type == BP_ATTR_STRINGS) {
    std::vector<const char*>& list = string_lists_.emplace_back();
    for (size_t k = 0; k < a.count; ++k) list.push_back(keep(a.strings[k]));
    c.strings = list.data();
  }
  if (a.type == BP_ATTR_TENSOR && a.t != nullptr) {
    bp_attr_tensor_t& t = tensors_.emplace_back(*a.t);
    t.struct_size = sizeof(bp_attr_tensor_t);
    t.shape = int_lists_.emplace_back(list_of(a.t->shape, a.t->rank)).data();
    t.data = bytes_.emplace_back(list_of(static_cast<const uint8_t*>(a.t->data), a.t->size_bytes))
                 .data();
    c.t = &t;
  }
  return c;
}

ViewCopy::ViewCopy(const bp_graph_view_t& view) {
  view_ = view;
  view_.struct_size = sizeof(bp_graph_view_t);
  view_.name = keep(view.name);
  for (size_t v = 0; v < view.num_values; ++v) {
    bp_value_t c = view.values[v];
    c.struct_size = sizeof(bp_value_t);
    c.name = keep(c.name);
    c.shape = int_lists_.emplace_back(list_of(c.shape, c.rank)).data();
    c.data_key = keep(c.data_key);
    values_.push_back(c);
  }
  for (size_t n = 0; n < view.num_nodes; ++n) {
    const bp_node_t& src = view.nodes[n];
    bp_node_t c = src;
    c.struct_size = sizeof(bp_node_t);
    c.name = keep(src.name);
    c.op_type = keep(src.op_type);
    c.domain = keep(src.domain);
    c.inputs = index_lists_.emplace_back(list_of(src.inputs, src.num_inputs)).data();
    c.outputs = index_lists_.emplace_back(list_of(src.outputs, src.num_outputs)).data();
    std::vector<bp_attribute_t>& attrs = attribute_lists_.emplace_back();
    for (size_t a = 0; a < src.num_attributes; ++a)
      attrs.push_back(copy_attribute(src.attributes[a]));
    c.attributes = attrs.data();
    nodes_.push_back(c);
  }
  view_.values = values_.data();
  view_.nodes = nodes_.data();
  view_.inputs = index_lists_.emplace_back(list_of(view.inputs, view.num_inputs)).data();
  view_.outputs = index_lists_.emplace_back(list_of(view.outputs, view.num_outputs)).data();
}

}  // namespace backplane::cpuref
