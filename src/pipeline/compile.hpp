// compile.hpp — the middle of the pipeline: plan -> compile -> exclude ->
// replan, one copy shared by just-in-time loading (session/) and
// ahead-of-time compiling (pipeline/aot_compile.hpp).
//
// Nodes a backend fails to compile (Arm NN's "failed subgraphs") are
// excluded from that backend and everything is planned again, so they go to
// the next backend that supports them. Each round must exclude at least one
// more (node, backend) pair, so the loop ends.
#pragma once

#include "core/named_blob_store.hpp"
#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "partition/graph_view.hpp"
#include "partition/partitioner.hpp"
#include "registry/loaded_backend.hpp"
#include "registry/node_report.hpp"

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace backplane {

// Makes a plan that avoids the excluded (node, backend) pairs, and says what a
// user should know about it in `notes`.
using Planner = std::function<Result<Plan>(const Exclusions&, std::vector<std::string>* notes)>;

// One partition ready to execute: compiled by its backend (or, for an
// imperative backend, just its view). Not to be confused with
// sdk::CompiledPartition, a backend's own object behind bp_compiled_t.
// Immutable once compiled, so sessions on many threads share it.
struct ExecutablePartition {
  // Whatever the view and the compiled partition point into (the graph the
  // view was built from, the weights map); released last.
  std::shared_ptr<const void> keep_alive;
  std::shared_ptr<LoadedBackend> backend;
  std::unique_ptr<GraphView> view;
  CompiledHandle compiled;  // empty when imperative
  bool imperative = false;
  // Compiled once for every shape (API 1.2): shared by the specialisations
  // whose polymorphic view is the same.
  bool polymorphic = false;
  std::vector<int> inputs, outputs;  // graph value ids, in execute order (-1 = omitted)
  // Per node of the view: what the backend said about how it runs it when
  // it compiled it ("" = nothing), shown with the plan.
  std::vector<std::string> notes;
};

// The notes a compile report holds (the reasons given with nodes taken).
std::vector<std::string> compile_notes(const bp_node_report& report);

// Where a shape-polymorphic compile of a partition comes from (the model's
// cache, or the backend): the executable, or null when the backend does not
// compile this partition polymorphically (then it is compiled for the
// concrete shapes of `graph`).
using PolymorphicSource = std::function<Result<std::shared_ptr<ExecutablePartition>>(
    const ir::Graph& graph, const Partition& partition, const std::string& name)>;

// Runs `round` (plan with the exclusions so far, then compile) until it
// returns true (everything compiled). A round that returns false must have
// excluded more pairs than before (`num_excluded`), or the loop stops with
// an internal error instead of spinning.
Status replan_until_compiled(const std::function<Result<bool>()>& round,
                             const std::function<size_t()>& num_excluded);

// The options every compile, compile_all and deserialize call gets.
// `aot_store` is the NamedBlobStore of an ahead-of-time compile (null just
// in time).
bp_compile_options_t compile_options(int num_threads, NamedBlobStore* aot_store);

// Excludes every node of `partition` that `report` says its backend did not
// compile, logging why (node names from `graph`). True if any was.
bool exclude_failed_nodes(const ir::Graph& graph, const Partition& partition,
                          const bp_node_report& report, Exclusions* excluded);

// Just in time: compiles (or, with a stored payload, deserializes) every
// partition of `plan` into `out`. Nodes a backend failed go to `excluded`,
// a payload it cannot read to `notes`; returns false when the plan must be
// made again without them.
// `polymorphic` (may be empty) is asked first for every compiled partition
// without a stored payload.
Result<bool> compile_plan(const ir::Graph& graph, const NamedDataMap& weights, const Plan& plan,
                          int num_threads, Exclusions* excluded, std::vector<std::string>* notes,
                          std::vector<std::shared_ptr<ExecutablePartition>>* out,
                          const PolymorphicSource& polymorphic = {});

}  // namespace backplane
