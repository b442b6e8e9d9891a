#include "exec/executor.hpp"

#include "core/log.hpp"
#include "core/tensor_data_map.hpp"
#include "registry/node_report.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <set>

namespace backplane {
namespace {

constexpr int kForever = std::numeric_limits<int>::max();

size_t align_up(size_t n) {
  return ((std::max<size_t>(n, 1) + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment) * MemoryPlan::kAlignment;
}

}  // namespace

CompiledPartition::~CompiledPartition() {
  if (compiled != nullptr) backend->api()->compiled_destroy(compiled);
}

size_t CompiledModel::value_bytes(int value) const {
  const ir::Value& v = graph_->values[value];
  return static_cast<size_t>(shape_numel(v.shape)) * dtype_size(v.dtype);
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create(std::unique_ptr<ir::Graph> graph,
                                                             const BackendRegistry& registry,
                                                             const ModelOptions& options, uint64_t network_id,
                                                             int num_threads) {
  auto weights = std::make_unique<TensorDataMap>(&graph->constants);
  const ir::Graph* g = graph.get();
  const NamedDataMap* w = weights.get();
  Planner planner = [g, w, &registry, &options](const Exclusions& excluded, std::vector<std::string>*) {
    return make_plan(*g, registry, options, *w, excluded);
  };
  return create_with(std::move(graph), std::move(weights), planner, network_id, num_threads, nullptr);
}

Result<std::shared_ptr<CompiledModel>> CompiledModel::create_with(std::unique_ptr<ir::Graph> graph,
                                                                  std::unique_ptr<NamedDataMap> weights,
                                                                  const Planner& planner, uint64_t network_id,
                                                                  int num_threads,
                                                                  std::shared_ptr<const void> keep_alive) {
  std::shared_ptr<CompiledModel> m(new CompiledModel());
  m->keep_alive_ = std::move(keep_alive);
  m->graph_ = std::move(graph);
  m->weights_ = std::move(weights);
  m->network_id_ = network_id;
  BP_RETURN_IF_ERROR(m->build(planner, num_threads), m->graph_->source);
  return m;
}

Status CompiledModel::build(const Planner& planner, int num_threads) {
  // Plan, compile; nodes a backend fails to compile (ArmNN's "failed
  // subgraphs") go to the next backend and everything is planned again. Each
  // round excludes at least one more (node, backend) pair, so this ends.
  Exclusions excluded;
  std::vector<std::string> plan_notes;
  for (;;) {
    plan_notes.clear();
    BP_ASSIGN_OR_RETURN(plan_, planner(excluded, &plan_notes));
    loaded_backends_.clear();
    for (const Partition& p : plan_.partitions)
      if (std::find(loaded_backends_.begin(), loaded_backends_.end(), p.backend) == loaded_backends_.end())
        loaded_backends_.push_back(p.backend);
    // ArmNN's BeforeLoadNetwork: before the backend compiles anything of it.
    for (const auto& b : loaded_backends_) {
      if (std::find(hooked_.begin(), hooked_.end(), b) != hooked_.end()) continue;
      hooked_.push_back(b);
      if (BP_TABLE_HAS(b->api(), before_load_network))
        BP_RETURN_IF_ERROR(b->check(b->api()->before_load_network(b->instance(), network_id_), "before_load_network"));
    }
    size_t before = excluded.size();
    BP_ASSIGN_OR_RETURN(bool complete, compile_partitions(num_threads, &excluded));
    if (complete) break;
    if (excluded.size() == before) return internal_error("compile made no progress");
    compiled_.clear();
  }
  notes_.insert(notes_.end(), plan_notes.begin(), plan_notes.end());
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), after_load_network))
      BP_RETURN_IF_ERROR(b->check(b->api()->after_load_network(b->instance(), network_id_), "after_load_network"));
  plan_steps();
  plan_memory();

  const ir::Graph& g = *graph_;
  for (int v : g.inputs) inputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (int v : g.outputs) outputs_.push_back({g.values[v].name, g.values[v].dtype, g.values[v].shape});
  for (const auto& cp : compiled_) {
    PartitionDescription d;
    d.backend = cp->backend->id();
    d.imperative = cp->imperative;
    for (int n : cp->view->node_ids()) d.nodes.push_back(g.nodes[n].name);
    for (int v : cp->view->input_values()) d.inputs.push_back(g.values[v].name);
    for (int v : cp->view->output_values()) d.outputs.push_back(g.values[v].name);
    partition_desc_.push_back(std::move(d));
  }
  auto describe_copy = [&](const ExecStep& s, bool once) {
    copy_desc_.push_back({g.values[s.value].name, spaces_[s.from].name, spaces_[s.to].name, value_bytes(s.value), once});
  };
  for (const ExecStep& s : init_copies_) describe_copy(s, true);
  for (const ExecStep& s : steps_)
    if (s.kind == ExecStep::kCopy) describe_copy(s, false);
  return ok_status();
}

CompiledModel::~CompiledModel() {
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), before_unload_network))
      (void)b->check(b->api()->before_unload_network(b->instance(), network_id_), "before_unload_network");
  compiled_.clear();
  for (const auto& b : hooked_)
    if (BP_TABLE_HAS(b->api(), after_unload_network))
      (void)b->check(b->api()->after_unload_network(b->instance(), network_id_), "after_unload_network");
}

Result<bool> CompiledModel::compile_partitions(int num_threads, Exclusions* failed) {
  bool complete = true;
  spaces_.assign(1, MemorySpace{nullptr, 0, "host"});
  for (size_t i = 0; i < plan_.partitions.size(); ++i) {
    const Partition& p = plan_.partitions[i];
    auto cp = std::make_unique<CompiledPartition>();
    cp->backend = p.backend;
    cp->imperative = p.imperative;
    std::string name = graph_->name + "/partition_" + std::to_string(i);
    cp->view = GraphView::build(*graph_, p.nodes, weights_.get(), name);
    if (p.imperative) {
      const ir::Node& node = graph_->nodes[p.nodes.front()];
      cp->inputs = node.inputs;
      cp->outputs = node.outputs;
    } else {
      cp->inputs = cp->view->input_values();
      cp->outputs = cp->view->output_values();
      bp_compile_options_t opts{};
      opts.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, blob_store);
      opts.num_threads = static_cast<uint32_t>(std::max(num_threads, 0));
      bp_node_report report(p.nodes.size());
      if (p.payload != nullptr && BP_TABLE_HAS(p.backend->api(), deserialize)) {
        Status s = p.backend->check(p.backend->api()->deserialize(p.backend->instance(), cp->view->get(), p.payload,
                                                                  p.payload_size, &opts, &cp->compiled),
                                    "deserialize " + name);
        if (!s.ok()) {
          // The payload is unusable here (corrupt, or a format this build of
          // the backend does not read): recompile those nodes elsewhere.
          notes_.push_back(name + ": " + s.message() + "; recompiling its nodes from the portable graph");
          log::warn(notes_.back());
          for (int n : p.nodes) failed->insert({n, p.backend->id()});
          complete = false;
          continue;
        }
      } else {
        BP_RETURN_IF_ERROR(p.backend->check(
            p.backend->api()->compile(p.backend->instance(), cp->view->get(), &opts, &report, &cp->compiled),
            "compile " + name));
      }
      bool partial = false;
      for (size_t k = 0; k < p.nodes.size(); ++k)
        if (report.reported[k] && report.outcome[k] != BP_NODE_SUPPORTED) {
          failed->insert({p.nodes[k], p.backend->id()});
          log::info(graph_->nodes[p.nodes[k]].describe() + ": backend '" + p.backend->id() + "' " +
                    (report.outcome[k] == BP_NODE_REJECTED ? "failed to compile it" : "left it untouched") +
                    (report.reason[k].empty() ? "" : ": " + report.reason[k]) + "; giving it to the next backend");
          partial = true;
        }
      if (partial) {
        complete = false;
        continue;  // cp (and its compiled handle) is discarded
      }
      if (cp->compiled == nullptr)
        return internal_error("backend '" + p.backend->id() + "' compiled " + name + " into nothing");
    }
    cp->space = 0;
    if (p.backend->has_flag(BP_BACKEND_FLAG_DEVICE_MEMORY)) {
      if (!BP_TABLE_HAS(p.backend->api(), memory_alloc) || !BP_TABLE_HAS(p.backend->api(), memory_free) ||
          !BP_TABLE_HAS(p.backend->api(), copy_to_device) || !BP_TABLE_HAS(p.backend->api(), copy_from_device))
        return invalid_argument("backend '" + p.backend->id() +
                                "' declares device memory but lacks memory_alloc/memory_free/copy slots");
      auto it = std::find_if(spaces_.begin(), spaces_.end(),
                             [&](const MemorySpace& s) { return s.backend == p.backend && s.device == 0; });
      if (it == spaces_.end()) {
        spaces_.push_back(MemorySpace{p.backend, 0, p.backend->id() + ":0"});
        it = spaces_.end() - 1;
      }
      cp->space = static_cast<int>(it - spaces_.begin());
    }
    compiled_.push_back(std::move(cp));
  }
  return complete;
}

void CompiledModel::plan_steps() {
  const ir::Graph& g = *graph_;
  std::vector<int> home(g.values.size(), 0);
  std::vector<std::set<int>> available(g.values.size());
  for (int v : g.inputs) available[v].insert(0);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) available[v].insert(0);

  // Makes `v` available in `space`, through the host if it lives on a device.
  auto ensure = [&](int v, int space) {
    if (available[v].count(space)) return;
    bool once = g.values[v].is_constant();
    std::vector<ExecStep>& out = once ? init_copies_ : steps_;
    if (space != 0 && home[v] != 0 && !available[v].count(0)) {
      out.push_back(ExecStep{ExecStep::kCopy, -1, v, home[v], 0});
      available[v].insert(0);
    }
    int from = available[v].count(0) ? 0 : home[v];
    out.push_back(ExecStep{ExecStep::kCopy, -1, v, from, space});
    available[v].insert(space);
  };

  for (size_t i = 0; i < compiled_.size(); ++i) {
    const CompiledPartition& cp = *compiled_[i];
    for (int v : cp.inputs)
      if (v >= 0) ensure(v, cp.space);
    steps_.push_back(ExecStep{ExecStep::kRun, static_cast<int>(i), -1, 0, 0});
    for (int v : cp.outputs)
      if (v >= 0) {
        home[v] = cp.space;
        available[v] = {cp.space};
      }
  }
  for (int v : g.outputs) ensure(v, 0);
}

void CompiledModel::plan_memory() {
  const ir::Graph& g = *graph_;
  MemoryPlan& mem = memory_;
  // Lifetimes in step indices; init copies happen before step 0.
  auto touch = [&](int v, int space, int step) {
    if (v < 0) return;
    if (space == 0 && g.values[v].is_constant()) return;  // read in place
    auto key = std::make_pair(v, space);
    auto it = mem.buffer_of.find(key);
    if (it == mem.buffer_of.end()) {
      MemoryPlan::Buffer b;
      b.value = v;
      b.space = space;
      b.size = align_up(value_bytes(v));
      b.first = b.last = step;
      mem.buffer_of[key] = static_cast<int>(mem.buffers.size());
      mem.buffers.push_back(b);
      return;
    }
    MemoryPlan::Buffer& b = mem.buffers[it->second];
    b.first = std::min(b.first, step);
    b.last = std::max(b.last, step);
  };
  for (int v : g.inputs) {
    touch(v, 0, -1);
    touch(v, 0, kForever);  // inputs survive the run, so run() may be repeated
  }
  for (const ExecStep& s : init_copies_) {
    touch(s.value, s.to, -1);
    touch(s.value, s.to, kForever);
  }
  for (size_t k = 0; k < steps_.size(); ++k) {
    const ExecStep& s = steps_[k];
    int step = static_cast<int>(k);
    if (s.kind == ExecStep::kCopy) {
      touch(s.value, s.from, step);
      touch(s.value, s.to, step);
      continue;
    }
    const CompiledPartition& cp = *compiled_[s.partition];
    for (int v : cp.inputs) touch(v, cp.space, step);
    for (int v : cp.outputs) touch(v, cp.space, step);
  }
  for (int v : g.outputs)
    if (!g.values[v].is_constant()) touch(v, 0, kForever);

  // Host: largest first, each at the lowest offset free for its lifetime.
  std::vector<int> host;
  for (size_t i = 0; i < mem.buffers.size(); ++i)
    if (mem.buffers[i].space == 0) host.push_back(static_cast<int>(i));
  std::stable_sort(host.begin(), host.end(), [&](int a, int b) { return mem.buffers[a].size > mem.buffers[b].size; });
  std::vector<int> placed;
  for (int i : host) {
    MemoryPlan::Buffer& b = mem.buffers[i];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int j : placed) {
      const MemoryPlan::Buffer& o = mem.buffers[j];
      if (!(o.last < b.first || b.last < o.first)) busy.emplace_back(o.offset, o.offset + o.size);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + b.size <= lo) break;
      offset = std::max(offset, hi);
    }
    b.offset = offset;
    placed.push_back(i);
    mem.arena_size = std::max(mem.arena_size, offset + b.size);
  }

  // Devices: device pointers are opaque, so reuse whole buffers: in order of
  // first use, take the smallest free slot that fits, else make a new one.
  std::vector<int> device;
  for (size_t i = 0; i < mem.buffers.size(); ++i)
    if (mem.buffers[i].space != 0) device.push_back(static_cast<int>(i));
  std::stable_sort(device.begin(), device.end(),
                   [&](int a, int b) { return mem.buffers[a].first < mem.buffers[b].first; });
  std::vector<int> slot_free_after;  // last step of the slot's current tenant
  for (int i : device) {
    MemoryPlan::Buffer& b = mem.buffers[i];
    int best = -1;
    for (size_t s = 0; s < mem.device_slots.size(); ++s) {
      const MemoryPlan::DeviceSlot& slot = mem.device_slots[s];
      if (slot.space != b.space || slot.size < b.size || slot_free_after[s] >= b.first) continue;
      if (best < 0 || slot.size < mem.device_slots[best].size) best = static_cast<int>(s);
    }
    if (best < 0) {
      mem.device_slots.push_back({b.space, b.size});
      slot_free_after.push_back(b.last);
      best = static_cast<int>(mem.device_slots.size()) - 1;
    }
    slot_free_after[best] = b.last;
    b.offset = static_cast<size_t>(best);
  }
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
    const auto& compiled = model_->compiled();
    for (size_t i = 0; i < contexts_.size(); ++i)
      if (contexts_[i] != nullptr) compiled[i]->backend->api()->context_destroy(contexts_[i]);
    const auto& slots = model_->memory().device_slots;
    for (size_t s = 0; s < device_ptrs_.size(); ++s)
      if (device_ptrs_[s] != nullptr) {
        const MemorySpace& sp = model_->spaces()[slots[s].space];
        sp.backend->api()->memory_free(sp.backend->instance(), sp.device, device_ptrs_[s]);
      }
    for (const auto& b : acquired_)
      if (BP_TABLE_HAS(b->api(), memory_release)) (void)b->check(b->api()->memory_release(b->instance()), "memory_release");
  }

  Status init() {
    const ir::Graph& g = model_->graph();
    const MemoryPlan& mem = model_->memory();
    size_t arena = align_up(mem.arena_size);
    arena_.reset(std::aligned_alloc(MemoryPlan::kAlignment, arena));
    if (!arena_) return Status(StatusCode::kOutOfMemory, "cannot allocate a " + std::to_string(arena) + "-byte arena");
    std::memset(arena_.get(), 0, arena);

    for (size_t s = 1; s < model_->spaces().size(); ++s) {
      const auto& b = model_->spaces()[s].backend;
      if (std::find(acquired_.begin(), acquired_.end(), b) != acquired_.end()) continue;
      if (BP_TABLE_HAS(b->api(), memory_acquire))
        BP_RETURN_IF_ERROR(b->check(b->api()->memory_acquire(b->instance()), "memory_acquire"));
      acquired_.push_back(b);
    }
    device_ptrs_.assign(mem.device_slots.size(), nullptr);
    for (size_t s = 0; s < mem.device_slots.size(); ++s) {
      const MemorySpace& sp = model_->spaces()[mem.device_slots[s].space];
      BP_RETURN_IF_ERROR(sp.backend->check(sp.backend->api()->memory_alloc(sp.backend->instance(), sp.device,
                                                                         mem.device_slots[s].size,
                                                                         MemoryPlan::kAlignment, &device_ptrs_[s]),
                                           "memory_alloc"));
    }

    const auto& compiled = model_->compiled();
    contexts_.assign(compiled.size(), nullptr);
    in_tensors_.resize(compiled.size());
    out_tensors_.resize(compiled.size());
    for (size_t i = 0; i < compiled.size(); ++i) {
      const CompiledPartition& cp = *compiled[i];
      if (!cp.imperative)
        BP_RETURN_IF_ERROR(cp.backend->check(cp.backend->api()->context_create(cp.compiled, &contexts_[i]),
                                             "context_create"));
      for (int v : cp.inputs) in_tensors_[i].push_back(tensor_for(v, cp.space));
      for (int v : cp.outputs) out_tensors_[i].push_back(tensor_for(v, cp.space));
    }
    for (int v : g.inputs) inputs_.push_back(host_tensor(v));
    for (int v : g.outputs) outputs_.push_back(host_tensor(v));
    input_set_.assign(g.inputs.size(), false);
    for (const ExecStep& s : model_->init_copies()) BP_RETURN_IF_ERROR(copy(s));
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
    for (const ExecStep& step : model_->steps()) {
      if (step.kind == ExecStep::kCopy) {
        BP_RETURN_IF_ERROR(copy(step));
        continue;
      }
      const size_t i = static_cast<size_t>(step.partition);
      const CompiledPartition& cp = *compiled[i];
      bp_status_t* s =
          cp.imperative
              ? cp.backend->api()->execute_node(cp.backend->instance(), cp.view->get(), 0, in_tensors_[i].size(),
                                                in_tensors_[i].data(), out_tensors_[i].size(), out_tensors_[i].data())
              : cp.backend->api()->execute(contexts_[i], in_tensors_[i].size(), in_tensors_[i].data(),
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
  void* address_of(int v, int space) const {
    const ir::Graph& g = model_->graph();
    if (space == 0 && g.values[v].is_constant()) return const_cast<void*>(g.constant(v)->data());
    const MemoryPlan& mem = model_->memory();
    const MemoryPlan::Buffer& b = mem.buffers[mem.buffer_of.at({v, space})];
    if (space == 0) return static_cast<char*>(arena_.get()) + b.offset;
    return device_ptrs_[b.offset];
  }

  Status copy(const ExecStep& s) {
    size_t bytes = model_->value_bytes(s.value);
    void* dst = address_of(s.value, s.to);
    void* src = address_of(s.value, s.from);
    if (bytes == 0) return ok_status();
    const auto& spaces = model_->spaces();
    if (s.from == 0 && s.to == 0) {
      std::memcpy(dst, src, bytes);
      return ok_status();
    }
    if (s.from == 0) {
      const MemorySpace& to = spaces[s.to];
      return to.backend->check(to.backend->api()->copy_to_device(to.backend->instance(), to.device, dst, src, bytes),
                               "copy_to_device '" + model_->graph().values[s.value].name + "'");
    }
    const MemorySpace& from = spaces[s.from];
    return from.backend->check(
        from.backend->api()->copy_from_device(from.backend->instance(), from.device, dst, src, bytes),
        "copy_from_device '" + model_->graph().values[s.value].name + "'");
  }

  bp_tensor_t tensor_for(int v, int space) const {
    bp_tensor_t t{};
    t.struct_size = BP_STRUCT_SIZE(bp_tensor_t, device);
    if (v < 0) return t;  // an omitted optional input/output: dtype undefined, no data
    const ir::Value& value = model_->graph().values[v];
    t.dtype = static_cast<bp_dtype_t>(value.dtype);
    t.rank = value.shape.size();
    t.shape = value.shape.data();
    t.data = address_of(v, space);
    t.size_bytes = model_->value_bytes(v);
    t.device = space == 0 ? 0 : model_->spaces()[space].device + 1;
    return t;
  }

  Tensor host_tensor(int v) const {
    const ir::Value& value = model_->graph().values[v];
    return Tensor::view(value.dtype, value.shape, address_of(v, 0));
  }

  std::shared_ptr<const CompiledModel> model_;
  std::unique_ptr<void, ArenaDeleter> arena_;
  std::vector<void*> device_ptrs_;
  std::vector<std::shared_ptr<Backend>> acquired_;
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
