// artifact_load.hpp — the pipeline's side of loading a compiled artifact: one
// method of a .bpk opened, its portable graph rebuilt, and a Planner that
// keeps each stored partition on its backend (deserializing its payload) or,
// when that backend is missing or cannot read it, places its nodes afresh.
// The session layer compiles the model from these (CompiledModel::create_with),
// through the same plan -> compile -> replan loop as an ONNX model.
#pragma once

#include "artifact/artifact.hpp"
#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "pipeline/compile.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <memory>
#include <string>

namespace backplane {

struct ArtifactMethodLoad {
  std::shared_ptr<ArtifactFile> file;  // the graph's constants and the payloads point into it
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<NamedDataMap> weights;
  // Borrows `registry`, `graph` and `weights` (not `file`, which it shares):
  // use it while they live.
  Planner planner;
};

// Maps `path`, picks options.method, checks options.input_shapes against the
// shapes it was compiled for.
Result<ArtifactMethodLoad> load_artifact_method(const BackendRegistry& registry,
                                                const std::string& path,
                                                const ModelOptions& options);

}  // namespace backplane
