// partitioner.hpp — decides which backend runs each node and groups nodes
// into partitions the executor can run in order.
#pragma once

#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace backplane {

struct NodePlacement {
  std::string backend;                  // chosen backend id
  std::string why;                      // "preferred", "override", "fallback: ..."
  std::vector<std::string> rejections;  // "<backend>: <reason>" for backends that said no
};

struct Partition {
  std::shared_ptr<LoadedBackend> backend;
  std::vector<int> nodes;  // node ids in execution order
  // Run one node at a time through execute_node (the backend has no compile).
  bool imperative = false;
  // From a compiled artifact: the backend's serialized partition (points into
  // the mapped file), to deserialize instead of compiling.
  const uint8_t* payload = nullptr;
  size_t payload_size = 0;
};

struct Plan {
  std::vector<std::string> preference;
  std::vector<NodePlacement> placement;  // per node
  std::vector<Partition> partitions;     // in execution order
};

// (node id, backend id) pairs a backend failed to compile: the next plan
// gives those nodes to the next backend that supports them.
using Exclusions = std::set<std::pair<int, std::string>>;

// Asks every preferred backend what it supports (one query on the whole
// graph each), applies overrides and exclusions, and forms partitions.
Result<Plan> make_plan(const ir::Graph& graph, const BackendRegistry& registry,
                       const PlacementOptions& options, const NamedDataMap& weights,
                       const Exclusions& excluded = {});

// Groups nodes (in topological order, each with a backend) into connected
// partitions, merging a node into a producer's partition of the same backend
// unless that would make the partition graph cyclic (then it starts a new
// one), then a partition into one of its backend that reads it directly and
// reaches it through no other. Returns partitions in an order the executor
// can run. Exposed for tests.
std::vector<std::vector<int>> group_nodes(const ir::Graph& graph,
                                          const std::vector<std::string>& backend_of_node);

}  // namespace backplane
