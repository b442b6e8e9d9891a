#include "pipeline/front_end.hpp"

#include "core/checksum.hpp"
#include "core/log.hpp"
#include "ir/float16.hpp"
#include "onnx/importer.hpp"
#include "pipeline/constant_folding.hpp"

#include <cstring>

namespace backplane {
namespace {

const ir::OpRegistry* ops_of(const BackendRegistry* backends) {
  return backends != nullptr ? &backends->ops() : nullptr;
}

// "node 'n' (Op): unsupported operator 'Op' (domain 'd')", and for a domain
// other than ONNX's (whose operators only a backend can define) what each
// backend defines instead.
Status unknown_operator(const ir::Node& node, const BackendRegistry* backends) {
  std::string m = node.describe() + ": unsupported operator '" + node.op_type + "' (domain '" +
                  node.domain + "')";
  if (!ir::OpRegistry::normalize_domain(node.domain).empty() && backends != nullptr) {
    std::string why;
    for (const auto& b : backends->all()) {
      std::string defined;
      for (const BackendOp& op : b->ops())
        defined += (defined.empty() ? "" : ", ") + op.domain + "." + op.name;
      why += (why.empty() ? "" : "; ") + b->id() + ": " +
             (defined.empty() ? "defines no operators of its own" : "defines only " + defined);
    }
    m += ": no backend defines it (" + (why.empty() ? "no backends" : why) + ")";
  }
  return Status(StatusCode::kUnsupported, m);
}

// A float16 model computed in float32 (ir/float16.hpp), said once in the log.
void widen_float16(ir::Graph& graph, const std::string& path) {
  std::string why_not;
  if (const int changed = ir::compute_float16_in_float32(graph, &why_not))
    log::info(path + ": no backend computes float16: its operators compute in float32 (" +
              std::to_string(changed) + " values widened)");
  else if (!why_not.empty())
    log::warn(path + ": computes float16, which no backend does, and is left as it is: " + why_not);
}

}  // namespace

Result<std::unique_ptr<ir::Graph>> import_onnx_model(
    const std::string& path, const std::map<std::string, Shape>& input_shapes,
    UnknownInputShapes unknown, const BackendRegistry* backends) {
  BP_ASSIGN_OR_RETURN(ir::Graph imported, onnx_import::import_file(path));
  auto graph = std::make_unique<ir::Graph>(std::move(imported));
  if (graph->source.empty()) graph->source = path;
  widen_float16(*graph, path);
  std::map<std::string, Shape> shapes;
  if (unknown == UnknownInputShapes::kError) {
    shapes = input_shapes;
  } else {
    for (int v : graph->inputs) {
      auto it = input_shapes.find(graph->values[v].name);
      if (it != input_shapes.end()) shapes[it->first] = it->second;
    }
  }
  const ir::OpRegistry& ops = backends != nullptr ? backends->ops() : ir::OpRegistry::builtin();
  for (const ir::Node& node : graph->nodes)
    if (!ops.knows(node.domain, node.op_type))
      return unknown_operator(node, backends).with_context(path);
  BP_RETURN_IF_ERROR(ir::infer_shapes(*graph, shapes, infer_options(&ops)));  // names the file
  graph->remove_dead();
  BP_RETURN_IF_ERROR(ir::verify(*graph), path);
  return graph;
}

Result<std::unique_ptr<ir::Graph>> import_portable_model(const std::string& path,
                                                         const BackendRegistry* backends,
                                                         bool freeze_defaults) {
  BP_ASSIGN_OR_RETURN(ir::Graph imported, onnx_import::import_file(path));
  auto graph = std::make_unique<ir::Graph>(std::move(imported));
  if (graph->source.empty()) graph->source = path;
  widen_float16(*graph, path);
  if (freeze_defaults && !graph->input_defaults.empty()) {
    std::vector<int> kept;
    for (int v : graph->inputs) {
      auto it = graph->input_defaults.find(graph->values[v].name);
      if (it == graph->input_defaults.end()) {
        kept.push_back(v);
        continue;
      }
      graph->make_constant(v, std::move(it->second));
    }
    graph->inputs = std::move(kept);
    graph->input_defaults.clear();
  } else if (!graph->input_defaults.empty()) {
    log::info(path + ": " + std::to_string(graph->input_defaults.size()) +
              " initializers are listed among the graph's inputs: they are inputs a feed may "
              "override, with the initializer as default, and so are not folded or packed as "
              "constants (a .bpk stores them as constants)");
  }
  const ir::OpRegistry& ops = backends != nullptr ? backends->ops() : ir::OpRegistry::builtin();
  for (const ir::Node& node : graph->nodes)
    if (!ops.knows(node.domain, node.op_type))
      return unknown_operator(node, backends).with_context(path);
  for (int v : graph->inputs) {
    const ir::Value& value = graph->values[v];
    if (value.dtype == DType::kUndefined)
      return invalid_argument("input '" + value.name + "' has no element type in the model")
          .with_context(path);
  }
  BP_RETURN_IF_ERROR(ir::fold_constants(*graph, infer_options(&ops)));  // names the file itself
  BP_RETURN_IF_ERROR(ir::verify(*graph), path);
  return graph;
}

namespace {

// "@1x128,1x128": the dims of every input of a specialised graph.
std::string signature_tag(const ir::Graph& graph) {
  std::string tag;
  for (int v : graph.inputs) {
    tag += tag.empty() ? '@' : ',';
    const Shape& shape = graph.values[v].shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (d > 0) tag += 'x';
      tag += std::to_string(shape[d]);
    }
  }
  return tag;
}

}  // namespace

Result<std::unique_ptr<ir::Graph>> specialize_graph(const ir::Graph& portable,
                                                    const std::map<std::string, Shape>& shapes,
                                                    const std::string& key_prefix,
                                                    const BackendRegistry* backends) {
  auto graph = std::make_unique<ir::Graph>(portable);  // Tensor copies share their bytes
  BP_RETURN_IF_ERROR(ir::infer_shapes(*graph, shapes, infer_options(ops_of(backends))));
  // Constants made for these shapes only (folded shape arithmetic) get keys
  // of their own, so that the constants of several specialisations can sit
  // side by side in one blob store (an artifact with several shapes).
  const std::string tag = signature_tag(*graph);
  for (ir::Value& value : graph->values) {
    if (!value.is_constant() || portable.constants.count(value.constant_key) > 0) continue;
    auto node = graph->constants.extract(value.constant_key);
    value.constant_key = key_prefix + value.constant_key + tag;
    node.key() = value.constant_key;
    graph->constants.insert(std::move(node));
  }
  BP_RETURN_IF_ERROR(ir::verify(*graph), portable.source);
  return graph;
}

Specializer::Specializer(const ir::Graph& portable, std::string key_prefix,
                         const BackendRegistry* backends)
    : portable_(portable),
      key_prefix_(std::move(key_prefix)),
      backends_(backends),
      inference_(portable, infer_options(ops_of(backends))) {}

Result<std::unique_ptr<ir::Graph>> Specializer::specialize(
    const std::map<std::string, Shape>& shapes, std::unique_ptr<ir::Graph> storage) {
  BP_RETURN_IF_ERROR(infer(shapes));
  return prune(std::move(storage));
}

Status Specializer::infer(const std::map<std::string, Shape>& shapes) {
  if (inference_.infer(shapes).ok()) return ok_status();
  // The error again, with its context.
  Result<std::unique_ptr<ir::Graph>> again =
      specialize_graph(portable_, shapes, key_prefix_, backends_);
  if (!again.ok()) return std::move(again).take_status();
  return inference_.infer(shapes);  // it starts afresh after a failure
}

Result<std::unique_ptr<ir::Graph>> Specializer::prune(std::unique_ptr<ir::Graph> storage) {
  if (storage == nullptr) storage = std::make_unique<ir::Graph>();
  std::string tag;
  inference_.prune_into(*storage, [&](const ir::Value& value) -> std::string {
    if (portable_.constants.count(value.constant_key) > 0) return {};
    if (tag.empty()) tag = signature_tag(*storage);
    return key_prefix_ + value.constant_key + tag;
  });
  BP_RETURN_IF_ERROR(ir::verify(*storage), portable_.source);
  return storage;
}

namespace {

// Length-prefixed fields, so that no two different graphs serialise alike.
class DigestWriter {
 public:
  void str(const std::string& s) {
    num(s.size());
    bytes_.append(s);
  }
  void num(uint64_t v) { bytes_.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void bytes(const void* data, size_t size) {
    num(size);
    if (size > 0) bytes_.append(static_cast<const char*>(data), size);
  }
  template <class T>
  void nums(const std::vector<T>& v) {
    num(v.size());
    for (const T& x : v) {
      uint64_t u = 0;
      std::memcpy(&u, &x, sizeof x);
      num(u);
    }
  }
  uint64_t digest() const { return checksum64(bytes_.data(), bytes_.size()); }

 private:
  std::string bytes_;
};

}  // namespace

uint64_t specialization_digest(const ir::Graph& graph) {
  DigestWriter w;
  w.num(graph.values.size());
  for (const ir::Value& v : graph.values) {
    w.str(v.name);
    w.num(static_cast<uint64_t>(v.dtype));
    w.num(v.has_shape);
    w.nums(v.shape);
    w.str(v.constant_key);
  }
  w.num(graph.nodes.size());
  for (const ir::Node& n : graph.nodes) {
    w.str(n.name);
    w.str(n.op_type);
    w.str(n.domain);
    w.nums(n.inputs);
    w.nums(n.outputs);
    w.num(n.attributes.size());
    for (const ir::Attribute& a : n.attributes) {
      w.str(a.name);
      w.num(static_cast<uint64_t>(a.type));
      w.num(static_cast<uint64_t>(a.i));
      w.nums(std::vector<float>{a.f});  // its bits
      w.str(a.s);
      w.nums(a.ints);
      w.nums(a.floats);
      w.num(a.strings.size());
      for (const std::string& s : a.strings) w.str(s);
      w.num(static_cast<uint64_t>(a.t.dtype()));
      w.nums(a.t.shape());
      w.bytes(a.t.data(), a.t.size_bytes());
    }
  }
  w.nums(graph.inputs);
  w.nums(graph.outputs);
  return w.digest();
}

}  // namespace backplane
