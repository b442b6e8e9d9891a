#include "session/compiled_model.hpp"

#include "core/tensor_data_map.hpp"

#include <algorithm>

namespace backplane {

size_t CompiledModel::value_bytes(int value) const {
  const ir::Value& v = graph_->values[value];
  return static_cast<size_t>(shape_numel(v.shape)) * dtype_size(v.dtype);
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create(std::unique_ptr<ir::Graph> graph,
                                                             const BackendRegistry& registry,
                                                             const PlacementOptions& options,
                                                             uint64_t network_id, int num_threads) {
  auto weights = std::make_unique<TensorDataMap>(&graph->constants);
  const ir::Graph* g = graph.get();
  const NamedDataMap* w = weights.get();
  Planner planner = [g, w, &registry, &options](const Exclusions& excluded,
                                                std::vector<std::string>*) {
    return make_plan(*g, registry, options, *w, excluded);
  };
  return create_with(std::move(graph), std::move(weights), planner, network_id, num_threads,
                     nullptr);
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create_with(
    std::unique_ptr<ir::Graph> graph, std::unique_ptr<NamedDataMap> weights, const Planner& planner,
    uint64_t network_id, int num_threads, std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<CompiledModel> m(new CompiledModel());
  m->keep_alive_ = std::move(keep_alive);
  m->graph_ = std::move(graph);
  m->weights_ = std::move(weights);
  m->network_id_ = network_id;
  BP_RETURN_IF_ERROR(m->build(planner, num_threads), m->graph_->source);
  return m;
}

// Arm NN's BeforeLoadNetwork: each backend of the plan hears of the network
// before it compiles anything of it (once, however many rounds).
Status CompiledModel::notify_before_load() {
  loaded_backends_.clear();
  for (const Partition& p : plan_.partitions)
    if (std::find(loaded_backends_.begin(), loaded_backends_.end(), p.backend) ==
        loaded_backends_.end())
      loaded_backends_.push_back(p.backend);
  for (const auto& b : loaded_backends_) {
    if (std::find(hooked_.begin(), hooked_.end(), b) != hooked_.end()) continue;
    hooked_.push_back(b);
    if (BP_TABLE_HAS(b->api(), before_load_network))
      BP_RETURN_IF_ERROR(b->check(
          b->call([&] { return b->api()->before_load_network(b->instance(), network_id_); }),
          "before_load_network"));
  }
  return ok_status();
}

Status CompiledModel::build(const Planner& planner, int num_threads) {
  Exclusions excluded;
  std::vector<std::string> plan_notes;
  auto round = [&]() -> Result<bool> {
    plan_notes.clear();
    executable_.clear();
    BP_ASSIGN_OR_RETURN(plan_, planner(excluded, &plan_notes));
    BP_RETURN_IF_ERROR(notify_before_load());
    return compile_plan(*graph_, *weights_, plan_, num_threads, &excluded, &notes_, &executable_);
  };
  BP_RETURN_IF_ERROR(replan_until_compiled(round, [&] { return excluded.size(); }));
  notes_.insert(notes_.end(), plan_notes.begin(), plan_notes.end());
  BP_ASSIGN_OR_RETURN(space_of_, assign_spaces(executable_, &spaces_));
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), after_load_network))
      BP_RETURN_IF_ERROR(b->check(
          b->call([&] { return b->api()->after_load_network(b->instance(), network_id_); }),
          "after_load_network"));
  steps_ = plan_steps(*graph_, executable_, space_of_);
  memory_ = plan_memory(*graph_, executable_, space_of_, steps_,
                        [this](int v) { return value_bytes(v); });
  describe();
  return ok_status();
}

// The public descriptions (Model::inputs, partitions, copies).
void CompiledModel::describe() {
  const ir::Graph& g = *graph_;
  for (int v : g.inputs)
    inputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (int v : g.outputs)
    outputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (const auto& ep : executable_) {
    PartitionDescription d;
    d.backend = ep->backend->id();
    d.imperative = ep->imperative;
    for (int n : ep->view->node_ids()) d.nodes.push_back(g.nodes[n].name);
    for (int v : ep->view->input_values()) d.inputs.push_back(g.values[v].name);
    for (int v : ep->view->output_values()) d.outputs.push_back(g.values[v].name);
    partition_desc_.push_back(std::move(d));
  }
  auto describe_copy = [&](const ExecStep& s, bool once) {
    copy_desc_.push_back({g.values[s.value].name, spaces_[s.from].name, spaces_[s.to].name,
                          value_bytes(s.value), once});
  };
  for (const ExecStep& s : steps_.init_copies) describe_copy(s, true);
  for (const ExecStep& s : steps_.steps)
    if (s.kind == ExecStep::kCopy) describe_copy(s, false);
}

CompiledModel::~CompiledModel() {
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), before_unload_network))
      (void)b->check(
          b->call([&] { return b->api()->before_unload_network(b->instance(), network_id_); }),
          "before_unload_network");
  executable_.clear();
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), after_unload_network))
      (void)b->check(
          b->call([&] { return b->api()->after_unload_network(b->instance(), network_id_); }),
          "after_unload_network");
}

std::vector<std::string> CompiledModel::backends_used() const {
  std::vector<std::string> ids;
  for (const auto& b : loaded_backends_) ids.push_back(b->id());
  return ids;
}

}  // namespace backplane
