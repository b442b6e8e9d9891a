// front_end.hpp — the front of the pipeline, shared by just-in-time loading
// (Runtime::load_model) and ahead-of-time compiling (Runtime::compile):
// import an ONNX file, infer shapes, drop dead nodes, verify.
#pragma once

#include "ir/constant_folding.hpp"
#include "ir/graph.hpp"
#include "registry/registry.hpp"

#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace backplane {

// What to do with an entry of `input_shapes` that names no input of the model.
enum class UnknownInputShapes {
  kError,   // it is a mistake (one model: the name must be one of its inputs)
  kIgnore,  // it is for another model (one set of shapes for several methods)
};

// Every function here resolves operators in `backends->ops()` (the
// operators of ONNX and those the backends define; nullptr: ONNX's only) and
// folds constants on CpuRef's kernels (pipeline/constant_folding.hpp).

// Reads `path` and returns its graph, shapes inferred (with `input_shapes`
// for inputs whose dims are symbolic or unknown) and verified. Errors name
// the file.
Result<std::unique_ptr<ir::Graph>> import_onnx_model(
    const std::string& path, const std::map<std::string, Shape>& input_shapes,
    UnknownInputShapes unknown, const BackendRegistry* backends = nullptr);

// Reads `path` and returns its portable graph: every input shape left as the
// model declares it (symbolic dims open), constants folded, dead nodes
// dropped, verified. Shapes are inferred per run (specialize_graph). An
// operator nobody knows is an error naming it, its domain and, for a domain
// of its own, why no backend defines it.
// Inputs with a default (ir::Graph::input_defaults) stay inputs, which a
// feed may override, unless `freeze_defaults` (an artifact stores them as
// constants, folded like any).
Result<std::unique_ptr<ir::Graph>> import_portable_model(const std::string& path,
                                                         const BackendRegistry* backends = nullptr,
                                                         bool freeze_defaults = false);

// A copy of the portable graph `portable` with the given concrete shape for
// every input, every value's shape inferred and what those shapes make
// constant folded. Constants are shared with `portable`, not copied; those
// these shapes made have keys `key_prefix` + value name + "@" + the input dims
// ("@1x128,1x128"), so every signature's own constants have keys of their
// own. An artifact's method keys its constants "<method>/<name>": compiling
// it and loading it both pass "<method>/" (aot_compile.cpp, artifact_load.cpp),
// so the keys a payload was compiled with are the keys it finds at load.
Result<std::unique_ptr<ir::Graph>> specialize_graph(const ir::Graph& portable,
                                                    const std::map<std::string, Shape>& shapes,
                                                    const std::string& key_prefix = "",
                                                    const BackendRegistry* backends = nullptr);

// specialize_graph for one portable graph at one signature after another,
// each inferring again only what its shapes reach (ir::IncrementalInference)
// and copying the result into the storage of an earlier one when given it.
// Each result equals specialize_graph's for the same shapes (errors too).
// Not thread-safe: one call at a time. `portable` and `backends` must
// outlive it.
class Specializer {
 public:
  Specializer(const ir::Graph& portable, std::string key_prefix, const BackendRegistry* backends);
  // `storage`: a graph an earlier call returned and nobody uses any more
  // (or null): its strings and vectors are reused.
  Result<std::unique_ptr<ir::Graph>> specialize(const std::map<std::string, Shape>& shapes,
                                                std::unique_ptr<ir::Graph> storage = nullptr);
  // specialize() in two halves: infer() the shapes (inferred() and
  // folded() then tell what it found, without a copy), then prune() into a
  // graph of its own.
  Status infer(const std::map<std::string, Shape>& shapes);
  const ir::Graph& inferred() const { return inference_.inferred(); }
  const std::vector<bool>& folded() const { return inference_.folded(); }
  Result<std::unique_ptr<ir::Graph>> prune(std::unique_ptr<ir::Graph> storage = nullptr);
  // Nodes the last call inferred again; which call last changed each value
  // (ir::IncrementalInference::changed_at).
  size_t reinferred() const { return inference_.reinferred(); }
  uint64_t inferences() const { return inference_.calls(); }
  const std::vector<uint64_t>& changed_at() const { return inference_.changed_at(); }
  bool folding_changed() const { return inference_.folding_changed(); }

 private:
  const ir::Graph& portable_;
  std::string key_prefix_;
  const BackendRegistry* backends_;
  ir::IncrementalInference inference_;
};

// A digest of what the partitions of a specialised graph depend on: every
// node (name, op type, domain, inputs, outputs, attributes) in order and
// every value (name, dtype, shape, constant key). An artifact stores it with
// each specialisation; at load, the graph specialised again from the portable
// graph must have the same digest for the stored partitions (node ids into
// it) to be used.
uint64_t specialization_digest(const ir::Graph& graph);

}  // namespace backplane
