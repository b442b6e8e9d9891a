// Sessions: one arena, device buffers and execution contexts per session;
// the model's step plan run in order.
#include "session/compiled_model.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace backplane {

namespace {

struct ArenaDeleter {
  void operator()(void* p) const { std::free(p); }
};

class SessionImpl : public Session {
 public:
  explicit SessionImpl(std::shared_ptr<const CompiledModel> model) : model_(std::move(model)) {}

  ~SessionImpl() override {
    // Contexts, then device memory, then the backends' memory_release.
    contexts_.clear();
    device_buffers_.clear();
    for (const auto& b : acquired_)
      if (BP_TABLE_HAS(b->api(), memory_release))
        (void)b->check(b->call([&] { return b->api()->memory_release(b->instance()); }),
                       "memory_release");
  }

  Status init() {
    const ir::Graph& g = model_->graph();
    const MemoryPlan& mem = model_->memory();
    size_t arena = align_to_memory_plan(mem.arena_size);
    arena_.reset(std::aligned_alloc(MemoryPlan::kAlignment, arena));
    if (!arena_)
      return Status(StatusCode::kOutOfMemory,
                    "cannot allocate a " + std::to_string(arena) + "-byte arena");
    std::memset(arena_.get(), 0, arena);

    for (size_t s = 1; s < model_->spaces().size(); ++s) {
      const auto& b = model_->spaces()[s].backend;
      if (std::find(acquired_.begin(), acquired_.end(), b) != acquired_.end()) continue;
      if (BP_TABLE_HAS(b->api(), memory_acquire))
        BP_RETURN_IF_ERROR(b->check(
            b->call([&] { return b->api()->memory_acquire(b->instance()); }), "memory_acquire"));
      acquired_.push_back(b);
    }
    for (size_t s = 0; s < mem.device_slots.size(); ++s) {
      const MemorySpace& sp = model_->spaces()[mem.device_slots[s].space];
      const LoadedBackend& b = *sp.backend;
      void* ptr = nullptr;
      Status allocated = b.check(b.call([&] {
        return b.api()->memory_alloc(b.instance(), sp.device, mem.device_slots[s].size,
                                     MemoryPlan::kAlignment, &ptr);
      }),
                                 "memory_alloc");
      device_buffers_.emplace_back(sp.backend, DevicePointer{sp.device, ptr});
      BP_RETURN_IF_ERROR(allocated);
    }

    const auto& executable = model_->executable();
    in_tensors_.resize(executable.size());
    out_tensors_.resize(executable.size());
    for (size_t i = 0; i < executable.size(); ++i) {
      const ExecutablePartition& ep = *executable[i];
      bp_exec_context_t* context = nullptr;
      Status created =
          ep.imperative
              ? ok_status()
              : ep.backend->check(ep.backend->api()->context_create(ep.compiled.get(), &context),
                                  "context_create");
      contexts_.emplace_back(ep.backend, context);
      BP_RETURN_IF_ERROR(created);
      for (int v : ep.inputs) in_tensors_[i].push_back(tensor_for(v, model_->space_of(i)));
      for (int v : ep.outputs) out_tensors_[i].push_back(tensor_for(v, model_->space_of(i)));
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
      return invalid_argument("input '" + info.name + "' expects dtype " + dtype_name(info.dtype) +
                              ", got " + dtype_name(tensor.dtype()));
    if (tensor.shape() != info.shape)
      return invalid_argument("input '" + info.name + "' expects shape " +
                              shape_to_string(info.shape) + ", got " +
                              shape_to_string(tensor.shape()));
    if (tensor.size_bytes() > 0)
      std::memcpy(inputs_[index].data(), tensor.data(), tensor.size_bytes());
    input_set_[index] = true;
    return ok_status();
  }

  Status run() override {
    for (size_t i = 0; i < input_set_.size(); ++i)
      if (!input_set_[i])
        return invalid_argument("input '" + model_->inputs()[i].name + "' was not set");
    const auto& executable = model_->executable();
    for (const ExecStep& step : model_->steps()) {
      if (step.kind == ExecStep::kCopy) {
        BP_RETURN_IF_ERROR(copy(step));
        continue;
      }
      const size_t i = static_cast<size_t>(step.partition);
      const ExecutablePartition& ep = *executable[i];
      const bp_backend_api_t* api = ep.backend->api();
      bp_status_t* s =
          ep.imperative
              ? api->execute_node(ep.backend->instance(), ep.view->get(), 0, in_tensors_[i].size(),
                                  in_tensors_[i].data(), out_tensors_[i].size(),
                                  out_tensors_[i].data())
              : api->execute(contexts_[i].get(), in_tensors_[i].size(), in_tensors_[i].data(),
                             out_tensors_[i].size(), out_tensors_[i].data());
      if (s != nullptr) return ep.backend->check(s, "execute " + std::string(ep.view->get()->name));
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
    return device_buffers_[b.offset].get().ptr;
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
      const LoadedBackend& b = *to.backend;
      return b.check(
          b.call([&] { return b.api()->copy_to_device(b.instance(), to.device, dst, src, bytes); }),
          "copy_to_device '" + model_->graph().values[s.value].name + "'");
    }
    const MemorySpace& from = spaces[s.from];
    const LoadedBackend& b = *from.backend;
    return b.check(b.call([&] {
      return b.api()->copy_from_device(b.instance(), from.device, dst, src, bytes);
    }),
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
  std::vector<std::shared_ptr<LoadedBackend>> acquired_;  // memory_acquire'd
  std::vector<DeviceBuffer> device_buffers_;              // per MemoryPlan device slot
  std::vector<ContextHandle> contexts_;                   // per partition (empty if imperative)
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
