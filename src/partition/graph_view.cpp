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
      v->open_shapes_.push_back(
          std::make_unique<std::vector<int64_t>>(value.shape.size(), int64_t{-1}));
      bv.shape = v->open_shapes_.back()->data();
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
  for (size_t k = 0; k < node_ids.size(); ++k) {
    const ir::Node& node = graph.nodes[node_ids[k]];
    for (int in : node.inputs) {
      v->node_inputs_[k].push_back(local_of(in));
      if (in >= 0 && !is_const(in) && !produced_inside.count(in) && seen_input.insert(in).second)
        v->input_values_.push_back(in);
    }
    for (int out : node.outputs) v->node_outputs_[k].push_back(local_of(out));
    v->add_attributes(node);
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

  v->finish(weights);
  return v;
}

void GraphView::add_attributes(const ir::Node& node) { attributes_.emplace_back(node); }

void GraphView::finish(const NamedDataMap* weights) {
  bp_graph_view_t& view = view_;
  view.struct_size = BP_STRUCT_SIZE(bp_graph_view_t, weights);
  view.name = name_.c_str();
  view.num_values = values_.size();
  view.values = values_.data();
  view.num_nodes = nodes_.size();
  view.nodes = nodes_.data();
  view.num_inputs = inputs_.size();
  view.inputs = inputs_.data();
  view.num_outputs = outputs_.size();
  view.outputs = outputs_.data();
  view.weights = weights != nullptr ? weights->as_abi() : nullptr;
}

std::unique_ptr<GraphView> GraphView::for_node(const ir::Graph& graph, const ir::Node& node,
                                               const NamedDataMap* weights,
                                               const std::string& name) {
  std::unique_ptr<GraphView> v(new GraphView());
  v->name_ = name;
  // One entry per input and output, even when a value appears twice (Add(x,
  // x)): a backend only indexes values through the node.
  auto add = [&](int gv, uint32_t flags) -> int32_t {
    if (gv < 0) return -1;
    const ir::Value& value = graph.values[gv];
    bp_value_t bv{};
    bv.struct_size = BP_STRUCT_SIZE(bp_value_t, data_key);
    bv.name = value.name.c_str();
    bv.dtype = static_cast<bp_dtype_t>(value.dtype);
    bv.rank = value.shape.size();
    bv.shape = value.shape.data();
    bv.flags = flags;
    if (value.is_constant()) {
      bv.flags |= BP_VALUE_CONSTANT;
      bv.data_key = value.constant_key.c_str();
    }
    v->values_.push_back(bv);
    v->value_ids_.push_back(gv);
    return static_cast<int32_t>(v->values_.size() - 1);
  };
  const size_t n_in = node.inputs.size(), n_out = node.outputs.size();
  v->values_.reserve(n_in + n_out);
  v->value_ids_.reserve(n_in + n_out);
  v->node_inputs_.resize(1);
  v->node_outputs_.resize(1);
  v->node_inputs_[0].reserve(n_in);
  v->node_outputs_[0].reserve(n_out);
  v->inputs_.reserve(n_in);
  v->input_values_.reserve(n_in);
  v->outputs_.reserve(n_out);
  v->output_values_.reserve(n_out);
  for (int in : node.inputs) {
    const bool view_input = in >= 0 && !graph.values[in].is_constant();
    const int32_t id = add(in, view_input ? BP_VALUE_VIEW_INPUT : 0u);
    v->node_inputs_[0].push_back(id);
    if (view_input) {
      v->inputs_.push_back(id);
      v->input_values_.push_back(in);
    }
  }
  for (int out : node.outputs) {
    const int32_t id = add(out, BP_VALUE_VIEW_OUTPUT);
    v->node_outputs_[0].push_back(id);
    if (id >= 0) {
      v->outputs_.push_back(id);
      v->output_values_.push_back(out);
    }
  }
  v->add_attributes(node);
  bp_node_t bn{};
  bn.struct_size = BP_STRUCT_SIZE(bp_node_t, attributes);
  bn.name = node.name.c_str();
  bn.op_type = node.op_type.c_str();
  bn.domain = node.domain.c_str();
  bn.opset = graph.opset(node.domain);
  bn.num_inputs = v->node_inputs_[0].size();
  bn.inputs = v->node_inputs_[0].data();
  bn.num_outputs = v->node_outputs_[0].size();
  bn.outputs = v->node_outputs_[0].data();
  bn.num_attributes = v->attributes_[0].size();
  bn.attributes = v->attributes_[0].data();
  v->nodes_.push_back(bn);
  v->finish(weights);
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
