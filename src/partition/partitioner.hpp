// partitioner.hpp — decides which backend runs each node and groups nodes
// into partitions the executor can run in order.
#pragma once

#include "ir/graph.hpp"
#include "registry/host_api.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <memory>
#include <string>
#include <vector>

namespace backplane {

struct NodePlacement {
  std::string backend;                 // chosen backend id
  std::string why;                     // "preferred", "override", "fallback: ..."
  std::vector<std::string> rejections; // "<backend>: <reason>" for backends that said no
};

struct Partition {
  std::shared_ptr<Backend> backend;
  std::vector<int> nodes;  // node ids in execution order
};

struct Plan {
  std::vector<std::string> preference;
  std::vector<NodePlacement> placement;  // per node
  std::vector<Partition> partitions;     // in execution order
};

// Asks every preferred backend what it supports (one query on the whole
// graph each), applies overrides, and forms partitions: maximal runs of
// consecutive nodes (in topological order) on the same backend, which keeps
// the partition graph acyclic by construction.
Result<Plan> make_plan(const ir::Graph& graph, const BackendRegistry& registry, const ModelOptions& options,
                       const NamedDataMap& weights);

}  // namespace backplane
