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

}  // namespace backplane
