#include "partition/graph_view.hpp"

#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace backplane {

std::unique_ptr<GraphView> GraphView::build(const ir::Graph& graph,
                                            const std::vector<int>& node_ids,
                                            const NamedDataMap* weights, const std::string& name,
                                            const std::function<bool(int)>* polymorphic) {
  std::unique_ptr<GraphView> v(new GraphView());
  v->name_ = name;
  v->node_ids_ = node_ids;
  v->polymorphic_ = polymorphic != nullptr;
  // A polymorphic view keeps only the constants of every run; the rest have
  // their rank and -1 for each dim.
  auto is_const = [&](int gv) {
    return graph.values[gv].is_constant() && (polymorphic == nullptr || (*polymorphic)(gv));
  };

  std::unordered_map<int, int32_t> local;  // graph value id -> view value index
  auto local_of = [&](int gv) -> int32_t {
    if (gv < 0) return -1;
    auto it = local.find(gv);
    if (it != local.end()) return it->second;
    const ir::Value& value = graph.values[gv];
    bp_value_t bv{};
    bv.struct_size = BP_STRUCT_SIZE(bp_value_t, data_key);
    bv.name = value.name.c_str();
    bv.dtype = static_cast<bp_dtype_t>(value.dtype);
    bv.rank = value.shape.size();
    bv.shape = value.shape.data();
    if (is_const(gv)) {
      bv.flags |= BP_VALUE_CONSTANT;
      bv.data_key = value.constant_key.c_str();
    } else if (polymorphic != nullptr) {
      v->open_shapes_.emplace_back(value.shape.size(), int64_t{-1});
      bv.shape = v->open_shapes_.back().data();
    }
    int32_t id = static_cast<int32_t>(v->values_.size());
    v->values_.push_back(bv);
    v->value_ids_.push_back(gv);
    local.emplace(gv, id);
    return id;
  };

  std::unordered_set<int> produced_inside;
  std::unordered_set<int> in_view(node_ids.begin(), node_ids.end());
  for (int n : node_ids)
    for (int o : graph.nodes[n].outputs)
      if (o >= 0) produced_inside.insert(o);

  std::unordered_set<int> seen_input;
  v->node_inputs_.resize(node_ids.size());
  v->node_outputs_.resize(node_ids.size());
  v->attributes_.resize(node_ids.size());
  for (size_t k = 0; k < node_ids.size(); ++k) {
    const ir::Node& node = graph.nodes[node_ids[k]];
    for (int in : node.inputs) {
      v->node_inputs_[k].push_back(local_of(in));
      if (in >= 0 && !is_const(in) && !produced_inside.count(in) && seen_input.insert(in).second)
        v->input_values_.push_back(in);
    }
    for (int out : node.outputs) v->node_outputs_[k].push_back(local_of(out));
    for (const ir::Attribute& a : node.attributes) {
      bp_attribute_t ba{};
      ba.struct_size = BP_STRUCT_SIZE(bp_attribute_t, t);
      ba.name = a.name.c_str();
      ba.type = static_cast<bp_attr_type_t>(a.type);
      ba.i = a.i;
      ba.f = a.f;
      ba.s = a.s.c_str();
      switch (a.type) {
        case ir::AttrType::kInts:
          ba.count = a.ints.size();
          ba.ints = a.ints.data();
          break;
        case ir::AttrType::kFloats:
          ba.count = a.floats.size();
          ba.floats = a.floats.data();
          break;
        case ir::AttrType::kStrings: {
          std::vector<const char*> strs;
          for (const std::string& s : a.strings) strs.push_back(s.c_str());
          v->attr_strings_.push_back(std::move(strs));
          ba.count = a.strings.size();
          ba.strings = v->attr_strings_.back().data();
          break;
        }
        case ir::AttrType::kTensor: {
          auto t = std::make_unique<bp_attr_tensor_t>();
          t->struct_size = BP_STRUCT_SIZE(bp_attr_tensor_t, size_bytes);
          t->dtype = static_cast<bp_dtype_t>(a.t.dtype());
          t->rank = a.t.rank();
          t->shape = a.t.shape().data();
          t->data = a.t.data();
          t->size_bytes = a.t.size_bytes();
          ba.t = t.get();
          v->attr_tensors_.push_back(std::move(t));
          break;
        }
        default:
          break;
      }
      v->attributes_[k].push_back(ba);
    }
  }
  // Outputs: produced inside and needed outside (another node or the graph).
  std::unordered_set<int> graph_outputs(graph.outputs.begin(), graph.outputs.end());
  std::unordered_set<int> needed_outside;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (in_view.count(static_cast<int>(n))) continue;
    for (int in : graph.nodes[n].inputs)
      if (in >= 0 && produced_inside.count(in)) needed_outside.insert(in);
  }
  for (int n : node_ids)
    for (int o : graph.nodes[n].outputs)
      if (o >= 0 && (needed_outside.count(o) || graph_outputs.count(o)))
        v->output_values_.push_back(o);

  for (int in : v->input_values_) {
    v->inputs_.push_back(local_of(in));
    v->values_[v->inputs_.back()].flags |= BP_VALUE_VIEW_INPUT;
  }
  for (int out : v->output_values_) {
    v->outputs_.push_back(local_of(out));
    v->values_[v->outputs_.back()].flags |= BP_VALUE_VIEW_OUTPUT;
  }

  for (size_t k = 0; k < node_ids.size(); ++k) {
    const ir::Node& node = graph.nodes[node_ids[k]];
    bp_node_t bn{};
    bn.struct_size = BP_STRUCT_SIZE(bp_node_t, attributes);
    bn.name = node.name.c_str();
    bn.op_type = node.op_type.c_str();
    bn.domain = node.domain.c_str();
    bn.opset = graph.opset(node.domain);
    bn.num_inputs = v->node_inputs_[k].size();
    bn.inputs = v->node_inputs_[k].data();
    bn.num_outputs = v->node_outputs_[k].size();
    bn.outputs = v->node_outputs_[k].data();
    bn.num_attributes = v->attributes_[k].size();
    bn.attributes = v->attributes_[k].data();
    v->nodes_.push_back(bn);
  }

  bp_graph_view_t& view = v->view_;
  view.struct_size = BP_STRUCT_SIZE(bp_graph_view_t, weights);
  view.name = v->name_.c_str();
  view.num_values = v->values_.size();
  view.values = v->values_.data();
  view.num_nodes = v->nodes_.size();
  view.nodes = v->nodes_.data();
  view.num_inputs = v->inputs_.size();
  view.inputs = v->inputs_.data();
  view.num_outputs = v->outputs_.size();
  view.outputs = v->outputs_.data();
  view.weights = weights != nullptr ? weights->as_abi() : nullptr;
  return v;
}

namespace {

template <class T>
void put(std::string& out, const T& x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof(x));
}
void put_str(std::string& out, const char* s) {
  size_t n = s != nullptr ? std::strlen(s) : 0;
  put(out, n);
  out.append(s != nullptr ? s : "", n);
}
void put_dims(std::string& out, size_t rank, const int64_t* dims) {
  put(out, rank);
  if (rank > 0) out.append(reinterpret_cast<const char*>(dims), rank * sizeof(int64_t));
}

}  // namespace

std::string GraphView::fingerprint() const {
  std::string out;
  const bp_graph_view_t& g = view_;
  put(out, g.num_values);
  for (size_t i = 0; i < g.num_values; ++i) {
    const bp_value_t& x = g.values[i];
    put_str(out, x.name);
    put(out, x.dtype);
    put_dims(out, x.rank, x.shape);
    put(out, x.flags);
    put_str(out, x.data_key);
  }
  put(out, g.num_nodes);
  for (size_t i = 0; i < g.num_nodes; ++i) {
    const bp_node_t& n = g.nodes[i];
    put_str(out, n.name);
    put_str(out, n.op_type);
    put_str(out, n.domain);
    put(out, n.opset);
    put(out, n.num_inputs);
    out.append(reinterpret_cast<const char*>(n.inputs), n.num_inputs * sizeof(int32_t));
    put(out, n.num_outputs);
    out.append(reinterpret_cast<const char*>(n.outputs), n.num_outputs * sizeof(int32_t));
    put(out, n.num_attributes);
    for (size_t a = 0; a < n.num_attributes; ++a) {
      const bp_attribute_t& at = n.attributes[a];
      put_str(out, at.name);
      put(out, at.type);
      put(out, at.i);
      put(out, at.f);
      put_str(out, at.s);
      put(out, at.count);
      if (at.ints != nullptr)
        out.append(reinterpret_cast<const char*>(at.ints), at.count * sizeof(int64_t));
      if (at.floats != nullptr)
        out.append(reinterpret_cast<const char*>(at.floats), at.count * sizeof(float));
      if (at.strings != nullptr)
        for (size_t k = 0; k < at.count; ++k) put_str(out, at.strings[k]);
      if (at.t != nullptr) {
        put(out, at.t->dtype);
        put_dims(out, at.t->rank, at.t->shape);
        out.append(static_cast<const char*>(at.t->data), at.t->size_bytes);
      }
    }
  }
  put(out, g.num_inputs);
  out.append(reinterpret_cast<const char*>(g.inputs), g.num_inputs * sizeof(int32_t));
  put(out, g.num_outputs);
  out.append(reinterpret_cast<const char*>(g.outputs), g.num_outputs * sizeof(int32_t));
  return out;
}

}  // namespace backplane
