#include "pipeline/compile.hpp"

#include "core/log.hpp"

#include <algorithm>

namespace backplane {

Status replan_until_compiled(const std::function<Result<bool>()>& round,
                             const std::function<size_t()>& num_excluded) {
  for (;;) {
    const size_t before = num_excluded();
    BP_ASSIGN_OR_RETURN(bool complete, round());
    if (complete) return ok_status();
    if (num_excluded() == before) return internal_error("compile made no progress");
  }
}

bp_compile_options_t compile_options(int num_threads, NamedBlobStore* aot_store) {
  bp_compile_options_t opts{};
  opts.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, blob_store);
  opts.num_threads = static_cast<uint32_t>(std::max(num_threads, 0));
  opts.ahead_of_time = aot_store != nullptr;
  opts.blob_store = aot_store != nullptr ? aot_store->as_abi() : nullptr;
  return opts;
}

bool exclude_failed_nodes(const ir::Graph& graph, const Partition& partition,
                          const bp_node_report& report, Exclusions* excluded) {
  bool any = false;
  const std::string& id = partition.backend->id();
  for (size_t k = 0; k < partition.nodes.size(); ++k) {
    if (!report.reported[k] || report.outcome[k] == BP_NODE_SUPPORTED) continue;
    excluded->insert({partition.nodes[k], id});
    log::info(
        graph.nodes[partition.nodes[k]].describe() + ": backend '" + id + "' " +
        (report.outcome[k] == BP_NODE_REJECTED ? "failed to compile it" : "left it untouched") +
        (report.reason[k].empty() ? "" : ": " + report.reason[k]) +
        "; giving it to the next backend");
    any = true;
  }
  return any;
}

std::vector<std::string> compile_notes(const bp_node_report& report) {
  std::vector<std::string> notes(report.reported.size());
  for (size_t k = 0; k < notes.size(); ++k)
    if (report.reported[k] && report.outcome[k] == BP_NODE_SUPPORTED) notes[k] = report.reason[k];
  return notes;
}

namespace {

// Compiles or deserializes one symbolic partition into `ep`. Returns false
// (with the nodes excluded) when they must go elsewhere.
Result<bool> compile_partition(const ir::Graph& graph, const Partition& p, const std::string& name,
                               int num_threads, Exclusions* excluded,
                               std::vector<std::string>* notes, ExecutablePartition* ep) {
  const LoadedBackend& backend = *p.backend;
  bp_compile_options_t opts = compile_options(num_threads, nullptr);
  bp_node_report report(p.nodes.size());
  bp_compiled_t* compiled = nullptr;
  if (p.payload != nullptr && BP_TABLE_HAS(backend.api(), deserialize)) {
    Status s = backend.check(backend.call([&] {
      return backend.api()->deserialize(backend.instance(), ep->view->get(), p.payload,
                                        p.payload_size, &opts, &compiled);
    }),
                             "deserialize " + name);
    ep->compiled = CompiledHandle(p.backend, compiled);
    if (!s.ok()) {
      // The payload is unusable here (corrupt, or a format this build of
      // the backend does not read): recompile those nodes elsewhere.
      notes->push_back(name + ": " + s.message() +
                       "; recompiling its nodes from the portable graph");
      log::warn(notes->back());
      for (int n : p.nodes) excluded->insert({n, backend.id()});
      return false;
    }
  } else {
    Status s = backend.check(backend.call([&] {
      return backend.api()->compile(backend.instance(), ep->view->get(), &opts, &report, &compiled);
    }),
                             "compile " + name);
    ep->compiled = CompiledHandle(p.backend, compiled);
    BP_RETURN_IF_ERROR(s);
  }
  if (exclude_failed_nodes(graph, p, report, excluded))
    return false;  // the handle is discarded with ep
  if (!ep->compiled)
    return internal_error("backend '" + backend.id() + "' compiled " + name + " into nothing");
  ep->notes = compile_notes(report);
  return true;
}

}  // namespace

Result<bool> compile_plan(const ir::Graph& graph, const NamedDataMap& weights, const Plan& plan,
                          int num_threads, Exclusions* excluded, std::vector<std::string>* notes,
                          std::vector<std::shared_ptr<ExecutablePartition>>* out,
                          const PolymorphicSource& polymorphic) {
  bool complete = true;
  for (size_t i = 0; i < plan.partitions.size(); ++i) {
    const Partition& p = plan.partitions[i];
    const std::string name = graph.name + "/partition_" + std::to_string(i);
    if (!p.imperative && p.payload == nullptr && polymorphic) {
      BP_ASSIGN_OR_RETURN(std::shared_ptr<ExecutablePartition> shared, polymorphic(graph, p, name));
      if (shared != nullptr) {
        out->push_back(std::move(shared));
        continue;
      }
    }
    auto ep = std::make_shared<ExecutablePartition>();
    ep->backend = p.backend;
    ep->imperative = p.imperative;
    ep->view = GraphView::build(graph, p.nodes, &weights, name);
    if (p.imperative) {
      const ir::Node& node = graph.nodes[p.nodes.front()];
      ep->inputs = node.inputs;
      ep->outputs = node.outputs;
    } else {
      ep->inputs = ep->view->input_values();
      ep->outputs = ep->view->output_values();
      BP_ASSIGN_OR_RETURN(
          bool compiled, compile_partition(graph, p, name, num_threads, excluded, notes, ep.get()));
      if (!compiled) {
        complete = false;
        continue;
      }
    }
    out->push_back(std::move(ep));
  }
  return complete;
}

}  // namespace backplane
