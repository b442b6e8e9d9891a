#include "ir/graph.hpp"

#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>

namespace backplane::ir {

const char* attr_type_name(AttrType type) {
  switch (type) {
    case AttrType::kFloat:
      return "FLOAT";
    case AttrType::kInt:
      return "INT";
    case AttrType::kString:
      return "STRING";
    case AttrType::kTensor:
      return "TENSOR";
    case AttrType::kFloats:
      return "FLOATS";
    case AttrType::kInts:
      return "INTS";
    case AttrType::kStrings:
      return "STRINGS";
    case AttrType::kGraph:
      return "GRAPH";
    case AttrType::kGraphs:
      return "GRAPHS";
    case AttrType::kTypeProto:
      return "TYPE_PROTO";
    case AttrType::kUndefined:
      break;
  }
  return "UNDEFINED";
}

bool Value::shape_is_static() const {
  if (!has_shape) return false;
  return std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d >= 0; });
}

const Attribute* Node::attr(const std::string& name) const {
  for (const Attribute& a : attributes)
    if (a.name == name) return &a;
  return nullptr;
}

std::string Node::describe() const { return "node '" + name + "' (" + op_type + ")"; }

namespace {

Status wrong_type(const Node& node, const Attribute& a, AttrType expected) {
  return invalid_argument(node.describe() + ": attribute '" + a.name + "' has type " +
                          attr_type_name(a.type) + ", expected " + attr_type_name(expected));
}

}  // namespace

Result<int64_t> Node::attr_int(const std::string& name, int64_t fallback) const {
  const Attribute* a = attr(name);
  if (a == nullptr) return fallback;
  if (a->type != AttrType::kInt) return wrong_type(*this, *a, AttrType::kInt);
  return a->i;
}

const char* value_kind_name(ValueKind kind) {
  switch (kind) {
    case ValueKind::kTensor:
      return "tensor";
    case ValueKind::kSequence:
      return "sequence";
    case ValueKind::kOptionalTensor:
      return "optional tensor";
    case ValueKind::kOptionalSequence:
      return "optional sequence";
  }
  return "?";
}

Result<float> Node::attr_float(const std::string& name, float fallback) const {
  const Attribute* a = attr(name);
  if (a == nullptr) return fallback;
  if (a->type != AttrType::kFloat) return wrong_type(*this, *a, AttrType::kFloat);
  return a->f;
}

Result<std::string> Node::attr_string(const std::string& name, const std::string& fallback) const {
  const Attribute* a = attr(name);
  if (a == nullptr) return fallback;
  if (a->type != AttrType::kString) return wrong_type(*this, *a, AttrType::kString);
  return a->s;
}

Result<std::vector<int64_t>> Node::attr_ints(const std::string& name,
                                             const std::vector<int64_t>& fallback) const {
  const Attribute* a = attr(name);
  if (a == nullptr) return fallback;
  if (a->type != AttrType::kInts) return wrong_type(*this, *a, AttrType::kInts);
  return a->ints;
}

Result<std::vector<float>> Node::attr_floats(const std::string& name,
                                             const std::vector<float>& fallback) const {
  const Attribute* a = attr(name);
  if (a == nullptr) return fallback;
  if (a->type != AttrType::kFloats) return wrong_type(*this, *a, AttrType::kFloats);
  return a->floats;
}

int64_t Graph::opset(const std::string& domain) const {
  auto it = opsets.find(domain);
  if (it == opsets.end() && domain.empty()) it = opsets.find("ai.onnx");
  return it == opsets.end() ? 0 : it->second;
}

int Graph::find_value(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? -1 : it->second;
}

int Graph::add_value(Value value) {
  int id = static_cast<int>(values.size());
  by_name_[value.name] = id;
  values.push_back(std::move(value));
  return id;
}

int Graph::add_constant(const std::string& name, Tensor tensor) {
  Value v;
  v.name = name;
  int id = add_value(std::move(v));
  make_constant(id, std::move(tensor));
  return id;
}

void Graph::make_constant(int id, Tensor tensor) {
  Value& v = values[id];
  v.dtype = tensor.dtype();
  v.shape = tensor.shape();
  v.has_shape = true;
  v.dim_params.assign(v.shape.size(), "");
  v.producer = -1;
  v.constant_key = v.name;
  constants[v.constant_key] = std::move(tensor);
}

const Tensor* Graph::constant(int value_id) const {
  if (value_id < 0 || value_id >= static_cast<int>(values.size())) return nullptr;
  const Value& v = values[value_id];
  if (!v.is_constant()) return nullptr;
  auto it = constants.find(v.constant_key);
  return it == constants.end() ? nullptr : &it->second;
}

std::vector<std::vector<int>> Graph::consumers() const {
  std::vector<std::vector<int>> out(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (int v : nodes[n].inputs)
      if (v >= 0 && (out[v].empty() || out[v].back() != static_cast<int>(n)))
        out[v].push_back(static_cast<int>(n));
  return out;
}

Status Graph::topo_sort() {
  const size_t n = nodes.size();
  std::vector<int> producer(values.size(), -1);
  for (size_t i = 0; i < n; ++i)
    for (int v : nodes[i].outputs) {
      if (v < 0) continue;
      if (producer[v] >= 0)
        return invalid_argument(nodes[i].describe() + ": output '" + values[v].name +
                                "' is also produced by " + nodes[producer[v]].describe());
      if (values[v].is_constant())
        return invalid_argument(nodes[i].describe() + ": output '" + values[v].name +
                                "' is also an initializer");
      producer[v] = static_cast<int>(i);
    }
  std::vector<bool> is_input(values.size(), false);
  for (int v : inputs) is_input[v] = true;
  auto set_producers = [&] {
    for (Value& v : values) v.producer = -1;
    for (size_t i = 0; i < n; ++i)
      for (int v : nodes[i].outputs)
        if (v >= 0) values[v].producer = static_cast<int>(i);
  };

  // Already in order (the usual case: a copy of a graph sorted before, each
  // specialisation's): every input made by an earlier node. The order below
  // would be this very one; anything else (a cycle, an undefined input)
  // takes the full walk, which reports it.
  bool in_order = true;
  for (size_t i = 0; i < n && in_order; ++i)
    for (int v : nodes[i].inputs)
      if (v >= 0 && (producer[v] >= static_cast<int>(i) ||
                     (producer[v] < 0 && !is_input[v] && !values[v].is_constant()))) {
        in_order = false;
        break;
      }
  if (in_order) {
    set_producers();
    return ok_status();
  }

  // Kahn's algorithm, always taking the lowest original index first so the
  // order is stable and matches the file when the file was already sorted.
  std::vector<int> pending(n, 0);
  std::vector<std::vector<int>> users(n);
  for (size_t i = 0; i < n; ++i) {
    for (int v : nodes[i].inputs) {
      if (v < 0) continue;
      if (producer[v] >= 0) {
        ++pending[i];
        users[producer[v]].push_back(static_cast<int>(i));
      } else if (!is_input[v] && !values[v].is_constant()) {
        return invalid_argument(nodes[i].describe() + ": input '" + values[v].name +
                                "' is not produced by any node, initializer or graph input");
      }
    }
  }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (pending[i] == 0) ready.push(static_cast<int>(i));
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    order.push_back(i);
    for (int u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != n) {
    for (size_t i = 0; i < n; ++i)
      if (pending[i] > 0)
        return invalid_argument("graph has a cycle through " + nodes[i].describe());
  }
  std::vector<Node> sorted;
  sorted.reserve(n);
  for (int i : order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
  set_producers();
  return ok_status();
}

void Graph::remove_dead() {
  std::vector<bool> live_value(values.size(), false);
  for (int v : outputs) live_value[v] = true;
  std::vector<bool> live_node(nodes.size(), false);
  // Nodes are topologically sorted: walk backwards.
  for (size_t k = nodes.size(); k-- > 0;) {
    const Node& node = nodes[k];
    bool needed = false;
    for (int v : node.outputs)
      if (v >= 0 && live_value[v]) needed = true;
    if (!needed) continue;
    live_node[k] = true;
    for (int v : node.inputs)
      if (v >= 0) live_value[v] = true;
  }
  std::vector<Node> kept;
  for (size_t k = 0; k < nodes.size(); ++k)
    if (live_node[k]) kept.push_back(std::move(nodes[k]));
  nodes = std::move(kept);
  // Drop constants nobody reads any more; value ids stay stable.
  for (size_t v = 0; v < values.size(); ++v)
    if (!live_value[v] && values[v].is_constant()) {
      constants.erase(values[v].constant_key);
      values[v].constant_key.clear();
    }
  for (Value& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].outputs)
      if (v >= 0) values[v].producer = static_cast<int>(i);
}

std::vector<size_t> Graph::kept_nodes(const Graph& from, const std::vector<bool>& drop,
                                      std::vector<bool>* live_value) {
  // remove_dead's liveness, over the nodes `drop` leaves.
  std::vector<bool>& live = *live_value;
  live.assign(from.values.size(), false);
  for (int v : from.outputs) live[v] = true;
  std::vector<size_t> kept;  // last first
  for (size_t k = from.nodes.size(); k-- > 0;) {
    if (drop[k]) continue;
    const Node& node = from.nodes[k];
    bool needed = false;
    for (int v : node.outputs)
      if (v >= 0 && live[v]) needed = true;
    if (!needed) continue;
    kept.push_back(k);
    for (int v : node.inputs)
      if (v >= 0) live[v] = true;
  }
  std::reverse(kept.begin(), kept.end());
  return kept;
}

void Graph::assign_pruned(const Graph& from, const std::vector<bool>& drop) {
  std::vector<bool> live_value;
  const std::vector<size_t> kept = kept_nodes(from, drop, &live_value);
  name = from.name;
  source = from.source;
  metadata = from.metadata;
  values = from.values;
  nodes.resize(kept.size());
  for (size_t i = 0; i < kept.size(); ++i) nodes[i] = from.nodes[kept[i]];
  inputs = from.inputs;
  outputs = from.outputs;
  captured = from.captured;
  opsets = from.opsets;
  input_defaults = from.input_defaults;
  by_name_ = from.by_name_;
  // The constants of `from` but those of dead values, with their keys cleared.
  std::vector<std::string_view> dead;  // into from.values
  for (size_t v = 0; v < values.size(); ++v)
    if (!live_value[v] && values[v].is_constant()) {
      dead.push_back(from.values[v].constant_key);
      values[v].constant_key.clear();
    }
  std::sort(dead.begin(), dead.end());
  auto is_dead = [&](const std::string& key) {
    return std::binary_search(dead.begin(), dead.end(), std::string_view(key));
  };
  // One lookup per constant: this storage usually held a specialisation of
  // the same graph, so most keys are here already.
  size_t kept_constants = 0;
  for (const auto& [key, tensor] : from.constants) {
    if (is_dead(key)) continue;
    ++kept_constants;
    auto [it, added] = constants.try_emplace(key, tensor);
    if (!added) it->second = tensor;
  }
  if (constants.size() != kept_constants)
    for (auto it = constants.begin(); it != constants.end();)
      it = from.constants.count(it->first) == 0 || is_dead(it->first) ? constants.erase(it)
                                                                      : std::next(it);
  for (Value& v : values) v.producer = -1;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (int v : nodes[i].outputs)
      if (v >= 0) values[v].producer = static_cast<int>(i);
}

Status verify(const Graph& graph) {
  const int nv = static_cast<int>(graph.values.size());
  // `where` names the place; called only to build a message.
  auto check_id = [&](int v, auto&& where) -> Status {
    if (v < -1 || v >= nv)
      return internal_error(std::string(where()) + ": value id " + std::to_string(v) +
                            " out of range");
    return ok_status();
  };
  std::vector<int> produced_by(graph.values.size(), -1);
  std::vector<bool> defined(graph.values.size(), false);
  for (int v : graph.inputs) {
    BP_RETURN_IF_ERROR(check_id(v, [] { return "graph input"; }));
    if (v < 0) return internal_error("graph input with no value");
    defined[v] = true;
  }
  for (int v = 0; v < nv; ++v)
    if (graph.values[v].is_constant()) {
      if (graph.constants.find(graph.values[v].constant_key) == graph.constants.end())
        return internal_error("constant '" + graph.values[v].name + "' has no data");
      defined[v] = true;
    }
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = graph.nodes[i];
    for (int v : node.inputs) {
      BP_RETURN_IF_ERROR(check_id(v, [&] { return node.describe(); }));
      if (v >= 0 && !defined[v])
        return invalid_argument(node.describe() + ": input '" + graph.values[v].name +
                                "' is used before it is defined");
    }
    for (int v : node.outputs) {
      BP_RETURN_IF_ERROR(check_id(v, [&] { return node.describe(); }));
      if (v < 0) continue;
      if (defined[v])
        return invalid_argument(node.describe() + ": output '" + graph.values[v].name +
                                "' is defined twice");
      defined[v] = true;
      produced_by[v] = static_cast<int>(i);
    }
  }
  for (int v : graph.outputs) {
    BP_RETURN_IF_ERROR(check_id(v, [] { return "graph output"; }));
    if (v < 0 || !defined[v])
      return invalid_argument("graph output '" +
                              (v >= 0 ? graph.values[v].name : std::string("?")) +
                              "' is not produced by any node, input or initializer");
  }
  return ok_status();
}

namespace {

template <class T>
void append_bytes(std::string& key, const T& v) {
  key.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void append_string(std::string& key, const std::string& s) {
  append_bytes(key, s.size());
  key += s;
}

void append_tensor(std::string& key, const Tensor& t) {
  append_bytes(key, t.dtype());
  append_bytes(key, t.shape().size());
  for (int64_t d : t.shape()) append_bytes(key, d);
  key.append(static_cast<const char*>(t.data()), t.size_bytes());
}

// What identifies node `n`'s computation (its inputs already renamed; a
// small constant input by its value, as each rewrite makes its own), or ""
// when it must stay as it is.
std::string computation_key(const Graph& g, const Node& n) {
  if (detail::nondeterministic(n)) return "";
  std::string key;
  append_string(key, n.domain);
  append_string(key, n.op_type);
  append_bytes(key, n.inputs.size());
  for (int v : n.inputs) {
    const Tensor* t = v >= 0 ? g.constant(v) : nullptr;
    if (t != nullptr && t->size_bytes() <= 64) {
      key += 'c';
      append_tensor(key, *t);
    } else {
      key += 'v';
      append_bytes(key, v);
    }
  }
  append_bytes(key, n.implicit_inputs);
  append_bytes(key, n.outputs.size());
  for (int v : n.outputs) append_bytes(key, v >= 0);
  std::vector<const Attribute*> attrs;
  for (const Attribute& a : n.attributes) attrs.push_back(&a);
  std::sort(attrs.begin(), attrs.end(),
            [](const Attribute* a, const Attribute* b) { return a->name < b->name; });
  for (const Attribute* a : attrs) {
    if (a->type == AttrType::kGraph || a->type == AttrType::kGraphs) return "";
    append_string(key, a->name);
    append_bytes(key, a->type);
    append_bytes(key, a->i);
    append_bytes(key, a->f);
    append_string(key, a->s);
    append_bytes(key, a->ints.size());
    for (int64_t v : a->ints) append_bytes(key, v);
    append_bytes(key, a->floats.size());
    for (float v : a->floats) append_bytes(key, v);
    append_bytes(key, a->strings.size());
    for (const std::string& v : a->strings) append_string(key, v);
    if (!a->t.empty()) {
      if (a->t.size_bytes() > 64) return "";
      append_tensor(key, a->t);
    }
  }
  return key;
}

}  // namespace

int merge_common_subexpressions(Graph& graph) {
  std::vector<bool> pinned(graph.values.size(), false);  // graph outputs, values bodies read
  for (int v : graph.outputs)
    if (v >= 0) pinned[v] = true;
  for (const Node& n : graph.nodes)
    for (size_t i = n.inputs.size() - n.implicit_inputs; i < n.inputs.size(); ++i)
      if (n.inputs[i] >= 0) pinned[n.inputs[i]] = true;
  std::vector<int> renamed(graph.values.size());
  for (size_t v = 0; v < renamed.size(); ++v) renamed[v] = static_cast<int>(v);
  std::unordered_map<std::string, size_t> seen;
  std::vector<bool> merged(graph.nodes.size(), false);
  int count = 0;
  for (size_t k = 0; k < graph.nodes.size(); ++k) {
    Node& n = graph.nodes[k];
    for (int& v : n.inputs)
      if (v >= 0) v = renamed[v];
    std::string key = computation_key(graph, n);
    if (key.empty()) continue;
    bool mergeable = true;
    for (int v : n.outputs) mergeable = mergeable && (v < 0 || !pinned[v]);
    auto [it, first] = seen.emplace(std::move(key), k);
    if (first || !mergeable) continue;
    const Node& earlier = graph.nodes[it->second];
    for (size_t i = 0; i < n.outputs.size(); ++i)
      if (n.outputs[i] >= 0) renamed[n.outputs[i]] = earlier.outputs[i];
    merged[k] = true;
    ++count;
  }
  if (count == 0) return 0;
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size() - static_cast<size_t>(count));
  for (size_t k = 0; k < graph.nodes.size(); ++k)
    if (!merged[k]) kept.push_back(std::move(graph.nodes[k]));
  graph.nodes = std::move(kept);
  graph.remove_dead();  // fixes the producers
  return count;
}

}  // namespace backplane::ir
