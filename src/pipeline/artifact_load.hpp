// artifact_load.hpp — the pipeline's side of loading a compiled artifact: one
// method of a .bpk opened, its portable graph rebuilt, the signatures it was
// compiled for, and for each a Planner that keeps every stored partition on
// its backend (deserializing its payload) or, when that backend is missing or
// cannot read it, places its nodes afresh. The session layer compiles the
// model from these (CompiledModel::create_with), through the same plan ->
// compile -> replan loop as an ONNX model, and compiles signatures the
// artifact does not store from the portable graph.
#pragma once

#include "artifact/artifact.hpp"
#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "pipeline/compile.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace backplane {

// The specialisations a method stores, and how to use them.
struct StoredSpecializations {
  std::string method;      // its name, for notes
  std::string key_prefix;  // specialize_graph's, as at compile time: "<method>/"
  // The signature of each (the shape of every input of the portable graph).
  std::vector<std::vector<Shape>> signatures;
  // A Planner for stored specialisation `index` over `graph`, which must be
  // specialize_graph(portable, signatures[index], key_prefix), and
  // `weights`, which reads its constants (both borrowed: use the Planner
  // while they live). Empty, with the reason in *why, when `graph` is not
  // the one the stored partitions were compiled for (another build of
  // Backplane specialises differently, or the table is damaged): compile the
  // signature from the portable graph instead. Thread-safe; holds the file
  // and the registry.
  std::function<Planner(size_t index, const ir::Graph& graph, const NamedDataMap& weights,
                        std::string* why)>
      planner;
};

struct ArtifactMethodLoad {
  std::shared_ptr<ArtifactFile> file;  // the graph's constants and the payloads point into it
  std::unique_ptr<ir::Graph> portable;
  // The artifact's named data (checksums verified on first use when lazy).
  std::unique_ptr<NamedDataMap> weights;
  // The caller's backend preference, else the stored one (backends present
  // here), then every other registered backend: what signatures compiled
  // from the portable graph are placed by.
  std::vector<std::string> preference;
  StoredSpecializations stored;
};

// Maps `path` and picks options.method.
Result<ArtifactMethodLoad> load_artifact_method(const BackendRegistry& registry,
                                                const std::string& path,
                                                const ModelOptions& options);

// Verifies, through `weights` (an artifact's map: checksums on first use),
// the constants of `graph` that the executor reads straight from the
// mapping rather than through the map: inputs of single-op partitions of
// `plan` and constant graph outputs.
Status verify_direct_constants(const ir::Graph& graph, const NamedDataMap& weights,
                               const Plan& plan);

}  // namespace backplane
