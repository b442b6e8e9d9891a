#include "exec/executor.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace backplane {

CompiledPartition::~CompiledPartition() {
  if (compiled != nullptr) backend->api()->compiled_destroy(compiled);
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create(std::unique_ptr<ir::Graph> graph,
                                                             const BackendRegistry& registry,
                                                             const ModelOptions& options, uint64_t network_id,
                                                             int num_threads) {
  std::shared_ptr<CompiledModel> m(new CompiledModel());
  m->graph_ = std::move(graph);
  m->network_id_ = network_id;
  m->weights_ = std::make_unique<TensorDataMap>(&m->graph_->constants);
  BP_ASSIGN_OR_RETURN(m->plan_, make_plan(*m->graph_, registry, options, *m->weights_), m->graph_->source);

  for (const Partition& p : m->plan_.partitions)
    if (std::find(m->loaded_backends_.begin(), m->loaded_backends_.end(), p.backend) == m->loaded_backends_.end())
      m->loaded_backends_.push_back(p.backend);
  for (const auto& b : m->loaded_backends_)
    if (BP_TABLE_HAS(b->api(), before_load_network))
      BP_RETURN_IF_ERROR(b->check(b->api()->before_load_network(b->instance(), network_id), "before_load_network"));
  BP_RETURN_IF_ERROR(m->compile_partitions(num_threads), m->graph_->source);
  for (const auto& b : m->loaded_backends_)
    if (BP_TABLE_HAS(b->api(), after_load_network))
      BP_RETURN_IF_ERROR(b->check(b->api()->after_load_network(b->instance(), network_id), "after_load_network"));
  m->plan_memory();

  const ir::Graph& g = *m->graph_;
  for (int v : g.inputs) m->inputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (int v : g.outputs) m->outputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (const Partition& p : m->plan_.partitions) {
    PartitionDescription d;
    d.backend = p.backend->id();
    for (int n : p.nodes) d.nodes.push_back(g.nodes[n].name);
    m->partition_desc_.push_back(std::move(d));
  }
  return m;
}

CompiledModel::~CompiledModel() {
  for (const auto& b : loaded_backends_)
    if (BP_TABLE_HAS(b->api(), before_unload_network))
      (void)b->check(b->api()->before_unload_network(b->instance(), network_id_), "before_unload_network");
  compiled_.clear();
  for (const auto& b : loaded_backends_)
    if (BP_TABLE_HAS(b->api(), after_unload_network))
      (void)b->check(b->api()->after_unload_network(b->instance(), network_id_), "after_unload_network");
}

Status CompiledModel::compile_partitions(int num_threads) {
  for (size_t i = 0; i < plan_.partitions.size(); ++i) {
    const Partition& p = plan_.partitions[i];
    auto cp = std::make_unique<CompiledPartition>();
    cp->backend = p.backend;
    std::string name = graph_->name + "/partition_" + std::to_string(i);
    cp->view = GraphView::build(*graph_, p.nodes, weights_.get(), name);
    if (!BP_TABLE_HAS(p.backend->api(), compile))
      return unsupported("backend '" + p.backend->id() + "' has no compile slot");
    bp_compile_options_t opts{};
    opts.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, blob_store);
    opts.num_threads = static_cast<uint32_t>(std::max(num_threads, 0));
    bp_node_report report(p.nodes.size());
    BP_RETURN_IF_ERROR(p.backend->check(
        p.backend->api()->compile(p.backend->instance(), cp->view->get(), &opts, &report, &cp->compiled),
        "compile " + name));
    for (size_t k = 0; k < p.nodes.size(); ++k)
      if (report.reported[k] && report.outcome[k] == BP_NODE_REJECTED)
        return unsupported("backend '" + p.backend->id() + "' failed to compile " +
                           graph_->nodes[p.nodes[k]].describe() + ": " + report.reason[k]);
    if (cp->compiled == nullptr)
      return internal_error("backend '" + p.backend->id() + "' compiled " + name + " into nothing");
    compiled_.push_back(std::move(cp));
  }
  return ok_status();
}

void CompiledModel::plan_memory() {
  const ir::Graph& g = *graph_;
  const int kForever = std::numeric_limits<int>::max();
  // Step 0 is before the first partition; partition i runs at step i + 1.
  std::vector<int> first(g.values.size(), -1), last(g.values.size(), -1);
  auto touch = [&](int v, int step) {
    if (v < 0 || g.values[v].is_constant()) return;
    if (first[v] < 0 || step < first[v]) first[v] = step;
    last[v] = std::max(last[v], step);
  };
  for (int v : g.inputs) {
    touch(v, 0);
    last[v] = kForever;  // inputs survive the run, so run() may be repeated
  }
  for (size_t i = 0; i < compiled_.size(); ++i) {
    for (int v : compiled_[i]->view->input_values()) touch(v, static_cast<int>(i) + 1);
    for (int v : compiled_[i]->view->output_values()) touch(v, static_cast<int>(i) + 1);
  }
  for (int v : g.outputs)
    if (!g.values[v].is_constant()) last[v] = kForever;

  std::vector<int> order;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (first[v] >= 0) order.push_back(static_cast<int>(v));
  auto bytes = [&](int v) {
    size_t n = static_cast<size_t>(shape_numel(g.values[v].shape)) * dtype_size(g.values[v].dtype);
    return ((std::max<size_t>(n, 1) + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment) * MemoryPlan::kAlignment;
  };
  // Largest first, each at the lowest offset free for its whole lifetime.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes(a) > bytes(b); });
  memory_.slot_of_value.assign(g.values.size(), -1);
  std::vector<MemoryPlan::Slot> placed;
  for (int v : order) {
    size_t size = bytes(v);
    std::vector<std::pair<size_t, size_t>> busy;
    for (const MemoryPlan::Slot& s : placed)
      if (!(last[s.value] < first[v] || last[v] < first[s.value])) busy.emplace_back(s.offset, s.offset + s.size);
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [b, e] : busy) {
      if (offset + size <= b) break;
      offset = std::max(offset, e);
    }
    memory_.slot_of_value[v] = static_cast<int>(placed.size());
    placed.push_back({v, offset, size});
    memory_.arena_size = std::max(memory_.arena_size, offset + size);
  }
  memory_.slots = std::move(placed);
}

std::vector<std::string> CompiledModel::backends_used() const {
  std::vector<std::string> ids;
  for (const auto& b : loaded_backends_) ids.push_back(b->id());
  return ids;
}

namespace {

struct ArenaDeleter {
  void operator()(void* p) const { std::free(p); }
};

class SessionImpl : public Session {
 public:
  explicit SessionImpl(std::shared_ptr<const CompiledModel> model) : model_(std::move(model)) {}

  ~SessionImpl() override {
    for (size_t i = 0; i < contexts_.size(); ++i)
      if (contexts_[i] != nullptr) model_->compiled()[i]->backend->api()->context_destroy(contexts_[i]);
  }

  Status init() {
    const ir::Graph& g = model_->graph();
    const MemoryPlan& mem = model_->memory();
    size_t arena = ((std::max<size_t>(mem.arena_size, 1) + 63) / 64) * 64;
    arena_.reset(std::aligned_alloc(MemoryPlan::kAlignment, arena));
    if (!arena_) return Status(StatusCode::kOutOfMemory, "cannot allocate a " + std::to_string(arena) + "-byte arena");
    std::memset(arena_.get(), 0, arena);

    const auto& compiled = model_->compiled();
    contexts_.assign(compiled.size(), nullptr);
    in_tensors_.resize(compiled.size());
    out_tensors_.resize(compiled.size());
    for (size_t i = 0; i < compiled.size(); ++i) {
      const CompiledPartition& cp = *compiled[i];
      BP_RETURN_IF_ERROR(cp.backend->check(cp.backend->api()->context_create(cp.compiled, &contexts_[i]),
                                           "context_create"));
      for (int v : cp.view->input_values()) in_tensors_[i].push_back(tensor_for(v));
      for (int v : cp.view->output_values()) out_tensors_[i].push_back(tensor_for(v));
    }
    for (int v : g.inputs) inputs_.push_back(host_tensor(v));
    for (int v : g.outputs) outputs_.push_back(host_tensor(v));
    input_set_.assign(g.inputs.size(), false);
    return ok_status();
  }

  Status set_input(const std::string& name, const Tensor& tensor) override {
    const auto& infos = model_->inputs();
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == name) return set_input(i, tensor);
    std::string names;
    for (const auto& info : infos) names += (names.empty() ? "" : ", ") + info.name;
    return not_found("model has no input named '" + name + "' (inputs: " + names + ")");
  }

  Status set_input(size_t index, const Tensor& tensor) override {
    const auto& infos = model_->inputs();
    if (index >= infos.size())
      return not_found("input index " + std::to_string(index) + " out of range (model has " +
                       std::to_string(infos.size()) + " inputs)");
    const TensorInfo& info = infos[index];
    if (tensor.dtype() != info.dtype)
      return invalid_argument("input '" + info.name + "' expects dtype " + dtype_name(info.dtype) + ", got " +
                              dtype_name(tensor.dtype()));
    if (tensor.shape() != info.shape)
      return invalid_argument("input '" + info.name + "' expects shape " + shape_to_string(info.shape) +
                              ", got " + shape_to_string(tensor.shape()));
    if (tensor.size_bytes() > 0) std::memcpy(inputs_[index].data(), tensor.data(), tensor.size_bytes());
    input_set_[index] = true;
    return ok_status();
  }

  Status run() override {
    for (size_t i = 0; i < input_set_.size(); ++i)
      if (!input_set_[i]) return invalid_argument("input '" + model_->inputs()[i].name + "' was not set");
    const auto& compiled = model_->compiled();
    for (size_t i = 0; i < compiled.size(); ++i) {
      const CompiledPartition& cp = *compiled[i];
      bp_status_t* s = cp.backend->api()->execute(contexts_[i], in_tensors_[i].size(), in_tensors_[i].data(),
                                                  out_tensors_[i].size(), out_tensors_[i].data());
      if (s != nullptr) return cp.backend->check(s, "execute " + std::string(cp.view->get()->name));
    }
    return ok_status();
  }

  Result<Tensor> get_output(const std::string& name) const override {
    const auto& infos = model_->outputs();
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == name) return outputs_[i];
    std::string names;
    for (const auto& info : infos) names += (names.empty() ? "" : ", ") + info.name;
    return not_found("model has no output named '" + name + "' (outputs: " + names + ")");
  }

  const Tensor& output(size_t index) const override { return outputs_.at(index); }
  size_t num_outputs() const override { return outputs_.size(); }

 private:
  void* address_of(int v) const {
    const ir::Graph& g = model_->graph();
    if (g.values[v].is_constant()) return const_cast<void*>(g.constant(v)->data());
    const MemoryPlan& mem = model_->memory();
    return static_cast<char*>(arena_.get()) + mem.slots[mem.slot_of_value[v]].offset;
  }
  bp_tensor_t tensor_for(int v) const {
    const ir::Value& value = model_->graph().values[v];
    bp_tensor_t t{};
    t.struct_size = BP_STRUCT_SIZE(bp_tensor_t, device);
    t.dtype = static_cast<bp_dtype_t>(value.dtype);
    t.rank = value.shape.size();
    t.shape = value.shape.data();
    t.data = address_of(v);
    t.size_bytes = static_cast<size_t>(shape_numel(value.shape)) * dtype_size(value.dtype);
    t.device = 0;
    return t;
  }
  Tensor host_tensor(int v) const {
    const ir::Value& value = model_->graph().values[v];
    return Tensor::view(value.dtype, value.shape, address_of(v));
  }

  std::shared_ptr<const CompiledModel> model_;
  std::unique_ptr<void, ArenaDeleter> arena_;
  std::vector<bp_exec_context_t*> contexts_;
  std::vector<std::vector<bp_tensor_t>> in_tensors_, out_tensors_;
  std::vector<Tensor> inputs_, outputs_;
  std::vector<bool> input_set_;
};

}  // namespace

Result<std::unique_ptr<Session>> CompiledModel::create_session() {
  auto session = std::make_unique<SessionImpl>(shared_from_this());
  BP_RETURN_IF_ERROR(session->init(), "creating a session");
  return std::unique_ptr<Session>(std::move(session));
}

}  // namespace backplane
