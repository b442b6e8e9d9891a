#include "pipeline/front_end.hpp"

#include "onnx/importer.hpp"

namespace backplane {

Result<std::unique_ptr<ir::Graph>> import_onnx_model(
    const std::string& path, const std::map<std::string, Shape>& input_shapes,
    UnknownInputShapes unknown) {
  BP_ASSIGN_OR_RETURN(ir::Graph imported, onnx_import::import_file(path));
  auto graph = std::make_unique<ir::Graph>(std::move(imported));
  if (graph->source.empty()) graph->source = path;
  std::map<std::string, Shape> shapes;
  if (unknown == UnknownInputShapes::kError) {
    shapes = input_shapes;
  } else {
    for (int v : graph->inputs) {
      auto it = input_shapes.find(graph->values[v].name);
      if (it != input_shapes.end()) shapes[it->first] = it->second;
    }
  }
  BP_RETURN_IF_ERROR(ir::infer_shapes(*graph, shapes));  // names the file itself
  graph->remove_dead();
  BP_RETURN_IF_ERROR(ir::verify(*graph), path);
  return graph;
}

Result<std::unique_ptr<ir::Graph>> import_portable_model(const std::string& path) {
  BP_ASSIGN_OR_RETURN(ir::Graph imported, onnx_import::import_file(path));
  auto graph = std::make_unique<ir::Graph>(std::move(imported));
  if (graph->source.empty()) graph->source = path;
  for (const ir::Node& node : graph->nodes)
    if (!ir::is_known_op(node.domain, node.op_type))
      return Status(StatusCode::kUnsupported, node.describe() + ": unsupported operator '" +
                                                  node.op_type + "' (domain '" + node.domain +
                                                  "')")
          .with_context(path);
  for (int v : graph->inputs) {
    const ir::Value& value = graph->values[v];
    if (value.dtype == DType::kUndefined)
      return invalid_argument("input '" + value.name + "' has no element type in the model")
          .with_context(path);
  }
  BP_RETURN_IF_ERROR(ir::fold_constants(*graph));  // names the file itself
  BP_RETURN_IF_ERROR(ir::verify(*graph), path);
  return graph;
}

Result<std::unique_ptr<ir::Graph>> specialize_graph(const ir::Graph& portable,
                                                    const std::map<std::string, Shape>& shapes) {
  auto graph = std::make_unique<ir::Graph>(portable);  // Tensor copies share their bytes
  BP_RETURN_IF_ERROR(ir::infer_shapes(*graph, shapes));
  // Constants made for these shapes only (folded shape arithmetic) get keys
  // of their own, so that the constants of several specialisations can sit
  // side by side in one blob store (an artifact with several shapes).
  std::string tag;
  for (int v : graph->inputs) {
    std::string dims;
    for (int64_t d : graph->values[v].shape) dims += (dims.empty() ? "" : "x") + std::to_string(d);
    tag += (tag.empty() ? "@" : ",") + dims;
  }
  for (ir::Value& value : graph->values) {
    if (!value.is_constant() || portable.constants.count(value.constant_key) > 0) continue;
    auto node = graph->constants.extract(value.constant_key);
    value.constant_key += tag;
    node.key() = value.constant_key;
    graph->constants.insert(std::move(node));
  }
  BP_RETURN_IF_ERROR(ir::verify(*graph), portable.source);
  return graph;
}

}  // namespace backplane
