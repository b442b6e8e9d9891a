// Sessions: the inputs a caller set or bound, and, for the specialisation of
// the model their shapes select, one arena, device buffers and execution
// contexts; the specialisation's step plan run in order.
//
// A session switches specialisation when a run's input shapes differ from
// the previous run's. The arena only grows; contexts of partitions shared
// between specialisations (compiled shape-polymorphic) are kept across
// switches, others are dropped once unused for a few switches.
#include "core/log.hpp"
#include "core/profiler.hpp"
#include "registry/host_api.hpp"
#include "registry/output_sink.hpp"
#include "session/compiled_model.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>

namespace backplane {

namespace {

struct ArenaDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Contexts of partitions not used by the last few specialisations go.
constexpr uint64_t kContextGenerations = 4;

class SessionImpl : public Session {
 public:
  explicit SessionImpl(std::shared_ptr<CompiledModel> model) : model_(std::move(model)) {
    const size_t n = model_->inputs().size();
    owned_inputs_.resize(n);
    inputs_.resize(n);
    input_set_.assign(n, false);
    fed_.resize(n);
    bound_outputs_.resize(model_->outputs().size());
    outputs_.resize(model_->outputs().size());
    sink_.allocate = [this](size_t output, const Shape& shape) {
      return allocate_dynamic(output, shape);
    };
    use_defaults();
  }

  ~SessionImpl() override { release(); }

  Status start_profiling(const std::string& path) override { return profile_.start(path); }
  Result<ProfileSummary> end_profiling() override { return profile_.end(); }

  // A model specialised at load gets its resources now, so that a backend
  // failing to make a context fails create_session as it always did.
  Status init() {
    const Specialization* first = model_->primary();
    if (first == nullptr) return ok_status();
    BP_ASSIGN_OR_RETURN(std::shared_ptr<const Specialization> spec,
                        model_->specialization(first->signature()));
    // set_input's copies of the inputs, made (and their pages touched) now,
    // in the shapes the first run most likely has: the first run of a small
    // model would otherwise spend a quarter of its time faulting in the
    // 600 KB of an image. Not for large inputs, which a caller may rather
    // bind than copy.
    constexpr size_t kPrepared = size_t{16} << 20;
    const auto& infos = model_->inputs();
    for (size_t i = 0; i < infos.size() && i < first->signature().size(); ++i) {
      size_t bytes = 0;
      if (infos[i].dtype != DType::kUndefined &&
          checked_size_bytes(first->signature()[i], infos[i].dtype, &bytes) && bytes <= kPrepared)
        owned_inputs_[i] = Tensor(infos[i].dtype, first->signature()[i]);
    }
    BP_RETURN_IF_ERROR(switch_to(std::move(spec)));
    warm_up();
    return ok_status();
  }

  Status set_input(const std::string& name, const Tensor& tensor) override {
    BP_ASSIGN_OR_RETURN(size_t index, input_index(name));
    return set_input(index, tensor);
  }

  Status set_input(size_t index, const Tensor& tensor) override {
    BP_RETURN_IF_ERROR(check_input(index, tensor));
    Tensor& owned = owned_inputs_[index];
    if (owned.dtype() != tensor.dtype() || owned.shape() != tensor.shape())
      owned = Tensor(tensor.dtype(), tensor.shape());
    if (tensor.size_bytes() > 0) std::memcpy(owned.data(), tensor.data(), tensor.size_bytes());
    inputs_[index] = Tensor::view(owned.dtype(), owned.shape(), owned.data());
    input_set_[index] = true;
    fed_[index] = Fed{};
    return ok_status();
  }

  Status bind_input(const std::string& name, const Tensor& tensor) override {
    BP_ASSIGN_OR_RETURN(size_t index, input_index(name));
    BP_RETURN_IF_ERROR(check_input(index, tensor));
    if (tensor.size_bytes() > 0 && tensor.data() == nullptr)
      return invalid_argument("input '" + name + "': bound tensor has no data");
    inputs_[index] = Tensor::view(tensor.dtype(), tensor.shape(), const_cast<void*>(tensor.data()));
    input_set_[index] = true;
    fed_[index] = Fed{};
    return ok_status();
  }

  Status bind_output(const std::string& name, const Tensor& tensor) override {
    const auto& infos = model_->outputs();
    for (size_t i = 0; i < infos.size(); ++i) {
      if (infos[i].name != name) continue;
      for (Fed& f : fed_)
        if (f.output == static_cast<int>(i)) f = Fed{};  // bound, so no longer fed back
      if (tensor.empty()) {
        bound_outputs_[i] = Tensor();
        return ok_status();
      }
      if (tensor.dtype() != infos[i].dtype && infos[i].dtype != DType::kUndefined)
        return invalid_argument("output '" + name + "' is " + dtype_name(infos[i].dtype) +
                                ", the bound tensor " + dtype_name(tensor.dtype()));
      if (tensor.size_bytes() > 0 && tensor.data() == nullptr)
        return invalid_argument("output '" + name + "': bound tensor has no data");
      bound_outputs_[i] =
          Tensor::view(tensor.dtype(), tensor.shape(), const_cast<void*>(tensor.data()));
      return ok_status();
    }
    return not_found("model has no output named '" + name +
                     "' (outputs: " + names(model_->outputs()) + ")");
  }

  Status feed(const std::string& output, const std::string& input) override {
    BP_ASSIGN_OR_RETURN(size_t in, input_index(input));
    const auto& outs = model_->outputs();
    size_t out = outs.size();
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i].name == output) out = i;
    if (out == outs.size())
      return not_found("model has no output named '" + output + "' (outputs: " + names(outs) + ")");
    const TensorInfo& info = model_->inputs()[in];
    if (outs[out].dtype != DType::kUndefined && outs[out].dtype != info.dtype)
      return invalid_argument("output '" + output + "' is " + dtype_name(outs[out].dtype) +
                              ", input '" + input + "' " + dtype_name(info.dtype) +
                              ": one cannot feed the other");
    bound_outputs_[out] = Tensor();
    fed_[in] = Fed{};
    fed_[in].output = static_cast<int>(out);
    return ok_status();
  }

  Status run() override {
    profile::SessionProfile::Run profiled(profile_);
    // Fed inputs take the shape (and, on the host, the bytes) the last run left.
    for (size_t i = 0; i < fed_.size(); ++i) {
      const Fed& f = fed_[i];
      if (f.output < 0 || !f.ready) continue;
      inputs_[i] =
          Tensor::view(model_->inputs()[i].dtype, f.shape, f.space == 0 ? f.data : nullptr);
      input_set_[i] = true;
    }
    bool same = spec_ != nullptr;  // the previous run's shapes (no allocation when so)
    for (size_t i = 0; i < input_set_.size(); ++i) {
      if (!input_set_[i])
        return invalid_argument("input '" + model_->inputs()[i].name + "' was not set");
      same = same && inputs_[i].shape() == spec_->signature()[i];
    }
    if (!same) {
      Signature signature;
      for (const Tensor& t : inputs_) signature.push_back(t.shape());
      BP_RETURN_IF_ERROR(model_->check_signature(signature));
      BP_ASSIGN_OR_RETURN(std::shared_ptr<const Specialization> spec,
                          model_->specialization(signature));
      BP_RETURN_IF_ERROR(switch_to(std::move(spec)));
    }
    Status ran = run_steps();
    // A partition compiled shape-polymorphic must run at any shapes; one
    // that cannot at these (its backend says kUnsupported) is compiled for
    // them instead, in a specialisation built again, and the run repeated:
    // the runs before changed nothing the run reads.
    const bool fed =
        std::any_of(fed_.begin(), fed_.end(), [](const Fed& f) { return f.output >= 0; });
    if (ran.ok()) model_->ran(*spec_);
    if (ran.ok() || ran.code() != StatusCode::kUnsupported || fed || failed_ < 0) return ran;
    const ExecutablePartition& failed = *spec_->executable()[static_cast<size_t>(failed_)];
    if (!failed.polymorphic) return ran;
    log::info(ran.message() + "; compiling it for these shapes");
    BP_ASSIGN_OR_RETURN(std::shared_ptr<const Specialization> again,
                        model_->respecialize(spec_->signature(), failed), ran.message());
    BP_RETURN_IF_ERROR(switch_to(std::move(again)));
    BP_RETURN_IF_ERROR(run_steps());
    model_->ran(*spec_);
    return ok_status();
  }

  // One run of the current specialisation's steps, the outputs taken.
  Status run_steps() {
    failed_ = -1;
    const Specialization& spec = *spec_;
    const ir::Graph& g = spec.graph();
    for (size_t i = 0; i < bound_outputs_.size(); ++i) {
      const Tensor& bound = bound_outputs_[i];
      if (bound.empty()) continue;
      const ir::Value& v = g.values[g.outputs[i]];
      if (spec.is_dynamic(g.outputs[i])) continue;  // checked once its shape is known
      const Shape& shape = spec.shape(g.outputs[i]);
      if (bound.dtype() != v.dtype || bound.shape() != shape)
        return invalid_argument("output '" + v.name + "' is " + dtype_name(v.dtype) + " " +
                                shape_to_string(shape) + " in this run, the bound tensor " +
                                dtype_name(bound.dtype()) + " " + shape_to_string(bound.shape()));
    }

    pending_host_copy_.clear();
    for (auto& [v, d] : dynamic_) d.reported = false;
    BP_RETURN_IF_ERROR(prepare_feeds());
    for (size_t i = 0; i < spec.executable().size(); ++i) {
      const ExecutablePartition& ep = *spec.executable()[i];
      fill(ep.inputs, spec.space_of(i), &in_tensors_[i]);
      fill(ep.outputs, spec.space_of(i), &out_tensors_[i]);
    }
    for (const ExecStep& step : spec.steps()) {
      if (step.kind == ExecStep::kCopy) {
        if (skip_copy(step)) continue;
        profile::Span span(profile::Kind::kCopy, [&] {
          return "copy '" + spec.graph().values[step.value].name + "'";
        });
        BP_RETURN_IF_ERROR(copy(step));
        continue;
      }
      BP_RETURN_IF_ERROR(execute(static_cast<size_t>(step.partition)));
    }
    finish_feeds();
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const int v = g.outputs[i];
      const ir::Value& value = g.values[v];
      const Tensor& bound = bound_outputs_[i];
      if (spec.is_dynamic(v)) {
        BP_RETURN_IF_ERROR(take_dynamic(i, v));
        continue;
      }
      void* at = address_of(v, 0);
      if (!bound.empty() && at != bound.data() && bound.size_bytes() > 0)
        std::memcpy(const_cast<void*>(bound.data()), at,
                    bound.size_bytes());  // a constant or an input
      void* data = bound.empty() ? at : const_cast<void*>(bound.data());
      const Shape& shape = spec.shape(v);
      if (outputs_[i].data() != data || outputs_[i].dtype() != value.dtype ||
          outputs_[i].shape() != shape)
        outputs_[i] = Tensor::view(value.dtype, shape, data);
    }
    return ok_status();
  }

  Result<Tensor> get_output(const std::string& name) const override {
    const auto& infos = model_->outputs();
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == name) {
        BP_RETURN_IF_ERROR(fetch_output(i));
        return outputs_[i];
      }
    return not_found("model has no output named '" + name + "' (outputs: " + names(infos) + ")");
  }

  const Tensor& output(size_t index) const override {
    (void)fetch_output(index);  // a failed copy leaves the last bytes; get_output reports it
    return outputs_.at(index);
  }
  size_t num_outputs() const override { return outputs_.size(); }

 private:
  static std::string names(const std::vector<TensorInfo>& infos) {
    std::string out;
    for (const auto& info : infos) out += (out.empty() ? "" : ", ") + info.name;
    return out;
  }

  Result<size_t> input_index(const std::string& name) const {
    const auto& infos = model_->inputs();
    for (size_t i = 0; i < infos.size(); ++i)
      if (infos[i].name == name) return i;
    return not_found("model has no input named '" + name + "' (inputs: " + names(infos) + ")");
  }

  // What one input alone can be checked for: index, dtype, rank, fixed dims.
  Status check_input(size_t index, const Tensor& tensor) const {
    const auto& infos = model_->inputs();
    if (index >= infos.size())
      return not_found("input index " + std::to_string(index) + " out of range (model has " +
                       std::to_string(infos.size()) + " inputs)");
    const TensorInfo& info = infos[index];
    if (tensor.dtype() != info.dtype)
      return invalid_argument("input '" + info.name + "' expects dtype " + dtype_name(info.dtype) +
                              ", got " + dtype_name(tensor.dtype()));
    if (!model_->portable().values[model_->portable().inputs[index]].has_shape)
      return ok_status();  // the model does not even fix the rank
    const Shape& got = tensor.shape();
    if (got.size() != info.shape.size())
      return invalid_argument("input '" + info.name + "' expects shape " + declared(info) +
                              " (rank " + std::to_string(info.shape.size()) + "), got " +
                              shape_to_string(got));
    for (size_t d = 0; d < got.size(); ++d)
      if (info.shape[d] >= 0 && info.shape[d] != got[d])
        return invalid_argument("input '" + info.name + "' expects shape " + declared(info) +
                                ", got " + shape_to_string(got) + ": dim " + std::to_string(d) +
                                " is fixed at " + std::to_string(info.shape[d]));
    return ok_status();
  }

  // "[batch,seq,8]": the model's names for open dims.
  static std::string declared(const TensorInfo& info) {
    std::string out = "[";
    for (size_t d = 0; d < info.shape.size(); ++d) {
      out += d > 0 ? "," : "";
      if (info.shape[d] >= 0) out += std::to_string(info.shape[d]);
      else if (d < info.dim_names.size() && !info.dim_names[d].empty()) out += info.dim_names[d];
      else out += "?";
    }
    return out + "]";
  }

  // Gives this session what `spec` runs with: arena, device buffers,
  // contexts, constants on devices.
  Status switch_to(std::shared_ptr<const Specialization> spec) {
    spec_.reset();  // until everything below worked
    const MemoryPlan& mem = spec->memory();
    size_t arena = align_to_memory_plan(mem.arena_size);
    if (arena > arena_bytes_) {
      // Grown by half again at least: a decoder's arena grows a little per
      // token, and reallocating (and touching) it every token costs more
      // than the token.
      arena = std::max(arena, align_to_memory_plan(arena_bytes_ + arena_bytes_ / 2));
      arena_.reset(std::aligned_alloc(MemoryPlan::kAlignment, arena));
      arena_bytes_ = arena_ ? arena : 0;
      if (!arena_)
        return Status(StatusCode::kOutOfMemory,
                      "cannot allocate a " + std::to_string(arena) + "-byte arena");
      // Not zeroed: every value is written before it is read (as in any run
      // after the first, which finds the last run's bytes), and a large
      // arena's pages are then touched only when a value first needs them.
    }
    device_buffers_.clear();
    for (size_t s = 1; s < spec->spaces().size(); ++s) {
      const auto& b = spec->spaces()[s].backend;
      if (std::find(acquired_.begin(), acquired_.end(), b) != acquired_.end()) continue;
      if (BP_TABLE_HAS(b->api(), memory_acquire))
        BP_RETURN_IF_ERROR(b->check(
            b->call([&] { return b->api()->memory_acquire(b->instance()); }), "memory_acquire"));
      acquired_.push_back(b);
    }
    for (size_t s = 0; s < mem.device_slots.size(); ++s) {
      const MemorySpace& sp = spec->spaces()[mem.device_slots[s].space];
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

    ++generation_;
    const auto& executable = spec->executable();
    contexts_.assign(executable.size(), nullptr);
    for (size_t i = 0; i < executable.size(); ++i) {
      const std::shared_ptr<ExecutablePartition>& ep = executable[i];
      if (ep->imperative) continue;
      auto it = context_cache_.find(ep.get());
      if (it == context_cache_.end()) {
        bp_exec_context_t* context = nullptr;
        Status created = ep->backend->check(
            ep->backend->api()->context_create(ep->compiled.get(), &context), "context_create");
        CachedContext cached{ep, ContextHandle(ep->backend, context), 0};
        BP_RETURN_IF_ERROR(created);
        it = context_cache_.emplace(ep.get(), std::move(cached)).first;
      }
      it->second.generation = generation_;
      contexts_[i] = it->second.context.get();
    }
    for (auto it = context_cache_.begin(); it != context_cache_.end();)
      it = generation_ - it->second.generation >= kContextGenerations ? context_cache_.erase(it)
                                                                      : std::next(it);
    in_tensors_.assign(executable.size(), {});
    out_tensors_.assign(executable.size(), {});
    edge_after_ = edges_of(*spec);
    spec_ = std::move(spec);
    for (const ExecStep& s : spec_->init_copies()) {
      Status copied = copy(s);
      if (!copied.ok()) {
        spec_.reset();
        return copied;
      }
    }
    return ok_status();
  }

  // Fed inputs and outputs that feed, for this run: where each fed input
  // is read (on the host only if something there reads it: then copied
  // once), and a fresh buffer, in the memory of the partition that writes
  // it, for each output that feeds (two per output, taking turns: this
  // run writes one while reading the other).
  Status prepare_feeds() {
    feed_writes_.clear();
    if (std::none_of(fed_.begin(), fed_.end(), [](const Fed& f) { return f.output >= 0; }))
      return ok_status();
    const Specialization& spec = *spec_;
    const ir::Graph& g = spec.graph();
    auto read_on_host = [&](int v, int except_space) {
      for (const ExecStep& st : spec.steps()) {
        if (st.kind == ExecStep::kRun) {
          const ExecutablePartition& ep = *spec.executable()[st.partition];
          if (spec.space_of(st.partition) == 0 &&
              std::find(ep.inputs.begin(), ep.inputs.end(), v) != ep.inputs.end())
            return true;
        } else if (st.value == v && st.from == 0 && st.to != except_space) {
          return true;
        }
      }
      return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
    };
    for (size_t i = 0; i < fed_.size(); ++i) {
      Fed& f = fed_[i];
      if (f.output < 0 || !f.ready || f.space == 0) continue;
      if (!read_on_host(g.inputs[i], f.space)) continue;
      Tensor& owned = owned_inputs_[i];
      if (owned.dtype() != model_->inputs()[i].dtype || owned.shape() != f.shape)
        owned = Tensor(model_->inputs()[i].dtype, f.shape);
      BP_RETURN_IF_ERROR(
          device_to_host(f.space, owned.data(), f.data, f.bytes, model_->inputs()[i].name));
      inputs_[i] = Tensor::view(owned.dtype(), owned.shape(), owned.data());
    }
    feed_buffers_.resize(outputs_.size());
    for (const Fed& f : fed_) {
      if (f.output < 0) continue;
      const int v = g.outputs[f.output];
      if (g.values[v].is_constant() ||
          std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end())
        continue;  // nothing writes it: copied like any output
      int space = 0;
      for (size_t p = 0; p < spec.executable().size(); ++p) {
        const auto& outs = spec.executable()[p]->outputs;
        if (std::find(outs.begin(), outs.end(), v) != outs.end()) space = spec.space_of(p);
      }
      FeedBuffers& fb = feed_buffers_[f.output];
      const size_t bytes = std::max<size_t>(spec.value_bytes(v), 1);
      FeedBuffers::Slot& slot = fb.slot[fb.next];
      if (slot.space != space || slot.bytes < bytes) {
        slot = FeedBuffers::Slot{};
        const size_t size = align_to_memory_plan(bytes + bytes / 2);
        if (space == 0) {
          slot.host.reset(std::aligned_alloc(MemoryPlan::kAlignment, size));
          if (!slot.host) return Status(StatusCode::kOutOfMemory, "cannot allocate a fed output");
          slot.data = slot.host.get();
        } else {
          const MemorySpace& sp = spec.spaces()[space];
          const LoadedBackend& b = *sp.backend;
          void* ptr = nullptr;
          Status allocated = b.check(b.call([&] {
            return b.api()->memory_alloc(b.instance(), sp.device, size, MemoryPlan::kAlignment,
                                         &ptr);
          }),
                                     "memory_alloc");
          slot.device = DeviceBuffer(sp.backend, DevicePointer{sp.device, ptr});
          BP_RETURN_IF_ERROR(allocated);
          slot.data = ptr;
        }
        slot.space = space;
        slot.bytes = size;
      }
      feed_writes_.push_back(FeedWrite{v, space, slot.data, f.output});
    }
    return ok_status();
  }

  // A fed output's copy to the host is left for when someone asks, unless
  // a host partition of this run reads it.
  bool skip_copy(const ExecStep& s) {
    const Specialization& spec = *spec_;
    if (s.from == 0) {
      for (size_t i = 0; i < fed_.size(); ++i)
        if (fed_[i].ready && fed_[i].output >= 0 && fed_[i].space == s.to && s.to != 0 &&
            spec.graph().inputs[i] == s.value)
          return true;  // already there
      return false;
    }
    if (s.to != 0) return false;
    for (const FeedWrite& w : feed_writes_) {
      if (w.value != s.value || w.space != s.from) continue;
      for (const ExecStep& st : spec.steps())
        if (st.kind == ExecStep::kRun && spec.space_of(st.partition) == 0) {
          const auto& ins = spec.executable()[st.partition]->inputs;
          if (std::find(ins.begin(), ins.end(), s.value) != ins.end()) return false;
        }
      pending_host_copy_.push_back(s);
      return true;
    }
    return false;
  }

  void finish_feeds() {
    const ir::Graph& g = spec_->graph();
    for (Fed& f : fed_) {
      if (f.output < 0) continue;
      const int v = g.outputs[f.output];
      auto w = std::find_if(feed_writes_.begin(), feed_writes_.end(),
                            [&](const FeedWrite& x) { return x.output == f.output; });
      f.ready = true;
      f.shape = spec_->shape(v);
      f.bytes = spec_->value_bytes(v);
      if (w != feed_writes_.end()) {
        f.space = w->space;
        f.data = w->data;
        FeedBuffers& fb = feed_buffers_[f.output];
        fb.next ^= 1;
      } else {  // a constant or an input: its host bytes
        f.space = 0;
        f.data = address_of(v, 0);
      }
    }
  }

  // ModelOptions::warm_up: one run of a small model on zeros (the inputs
  // init() prepared), now, so that the application's first run costs what a
  // steady one does: the backends' weights and JIT code are in the cache,
  // and so is this side's path (the session's run, the plugins' entry
  // points, the tables they read). Only for a model whose constants take at
  // most kWarmConstants (one whose run is short enough for that to show; the
  // run adds to the session's ready time), whose every input init()
  // prepared, whose outputs have fixed shapes and which runs on the host
  // alone. A failed run is ignored: the application's own inputs decide.
  // Nothing of it stays visible: the inputs count as not set and there is
  // no output until the first run.
  static constexpr size_t kWarmConstants = size_t{16} << 20;
  void warm_up() {
    if (!model_->warm_up()) return;
    if (spec_ == nullptr || spec_->spaces().size() != 1) return;
    const ir::Graph& g = spec_->graph();
    for (int v : g.outputs)
      if (spec_->is_dynamic(v)) return;
    size_t constants = 0;
    for (const ir::Value& v : g.values) {
      size_t bytes = 0;
      if (!v.is_constant()) continue;
      if (!v.shape_is_static() || !checked_size_bytes(v.shape, v.dtype, &bytes)) return;
      constants += bytes;
      if (constants > kWarmConstants) return;
    }
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Tensor& owned = owned_inputs_[i];
      if (owned.dtype() == DType::kUndefined || owned.shape() != spec_->signature()[i]) return;
      inputs_[i] = Tensor::view(owned.dtype(), owned.shape(), owned.data());
      input_set_[i] = true;
    }
    (void)run();
    for (size_t i = 0; i < inputs_.size(); ++i) {
      inputs_[i] = Tensor();
      input_set_[i] = false;
    }
    for (Tensor& out : outputs_) out = Tensor();
    pending_host_copy_.clear();
    use_defaults();
  }

  // An input the model gives a default (an initializer listed among its
  // inputs) holds it until a feed replaces it.
  void use_defaults() {
    const ir::Graph& g = model_->portable();
    for (size_t i = 0; i < g.inputs.size() && i < inputs_.size(); ++i) {
      auto it = g.input_defaults.find(g.values[g.inputs[i]].name);
      if (it == g.input_defaults.end() || input_set_[i]) continue;
      const Tensor& t = it->second;
      inputs_[i] = Tensor::view(t.dtype(), t.shape(), const_cast<void*>(t.data()));
      input_set_[i] = true;
    }
  }

  // Makes output `index` readable on the host if its copy was left out.
  Status fetch_output(size_t index) const {
    if (pending_host_copy_.empty() || spec_ == nullptr) return ok_status();
    const int v = spec_->graph().outputs[index];
    for (auto it = pending_host_copy_.begin(); it != pending_host_copy_.end(); ++it)
      if (it->value == v) {
        ExecStep s = *it;
        pending_host_copy_.erase(it);
        return const_cast<SessionImpl*>(this)->copy(s);
      }
    return ok_status();
  }

  Status device_to_host(int space, void* dst, const void* src, size_t bytes,
                        const std::string& name) {
    if (bytes == 0) return ok_status();
    const MemorySpace& from = spec_->spaces()[space];
    const LoadedBackend& b = *from.backend;
    return b.check(b.call([&] {
      return b.api()->copy_from_device(b.instance(), from.device, dst, src, bytes);
    }),
                   "copy_from_device '" + name + "'");
  }

  void release() {
    // Contexts, then device memory, then the backends' memory_release.
    contexts_.clear();
    context_cache_.clear();
    feed_buffers_.clear();
    for (Fed& f : fed_) f = Fed{};
    device_buffers_.clear();
    for (const auto& b : acquired_)
      if (BP_TABLE_HAS(b->api(), memory_release))
        (void)b->check(b->call([&] { return b->api()->memory_release(b->instance()); }),
                       "memory_release");
    acquired_.clear();
  }

  // The output sink of execute_shaped: memory for output `output` of the
  // running partition, whose shape its backend now reports. Host memory of
  // this session's, grown as needed and kept for the next runs.
  Result<void*> allocate_dynamic(size_t output, const Shape& shape) {
    if (spec_ == nullptr || running_ >= spec_->executable().size())
      return internal_error("an output was allocated outside of a run");
    const ExecutablePartition& ep = *spec_->executable()[running_];
    const ir::Graph& g = spec_->graph();
    if (output >= ep.outputs.size() || ep.outputs[output] < 0)
      return invalid_argument("output_allocate: partition '" + std::string(ep.view->get()->name) +
                              "' has no output " + std::to_string(output));
    const int v = ep.outputs[output];
    const ir::Value& value = g.values[v];
    if (!spec_->is_dynamic(v))
      return invalid_argument("output_allocate: output '" + value.name + "' has the known shape " +
                              shape_to_string(value.shape) + "; it needs no allocation");
    if (shape.size() != value.shape.size())
      return invalid_argument("output_allocate: output '" + value.name + "' has rank " +
                              std::to_string(value.shape.size()) + ", the backend reported " +
                              shape_to_string(shape));
    for (size_t d = 0; d < shape.size(); ++d)
      if (value.shape[d] >= 0 && value.shape[d] != shape[d])
        return invalid_argument("output_allocate: output '" + value.name + "' is " +
                                shape_to_string(value.shape) + ", the backend reported " +
                                shape_to_string(shape));
    const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(value.dtype);
    Dynamic& d = dynamic_[v];
    if (!d.data || d.capacity < bytes) {
      const size_t size = align_to_memory_plan(std::max<size_t>(bytes + bytes / 2, 1));
      d.data.reset(std::aligned_alloc(MemoryPlan::kAlignment, size));
      d.capacity = d.data ? size : 0;
      if (!d.data)
        return Status(StatusCode::kOutOfMemory, "cannot allocate " + std::to_string(size) +
                                                    " bytes for output '" + value.name + "'");
    }
    d.shape = shape;
    d.reported = true;
    return d.data.get();
  }

  // Output `i`, value `v`, whose shape its backend reported this run.
  Status take_dynamic(size_t i, int v) {
    const ir::Value& value = spec_->graph().values[v];
    auto it = dynamic_.find(v);
    if (it == dynamic_.end() || !it->second.reported)
      return internal_error("output '" + value.name + "' (shape " + shape_to_string(value.shape) +
                            ") was not allocated by the backend that made it");
    const Dynamic& d = it->second;
    const Tensor& bound = bound_outputs_[i];
    if (!bound.empty()) {
      if (bound.dtype() != value.dtype || bound.shape() != d.shape)
        return invalid_argument("output '" + value.name + "' is " + dtype_name(value.dtype) + " " +
                                shape_to_string(d.shape) + " in this run, the bound tensor " +
                                dtype_name(bound.dtype()) + " " + shape_to_string(bound.shape()));
      const size_t bytes = static_cast<size_t>(shape_numel(d.shape)) * dtype_size(value.dtype);
      if (bytes > 0) std::memcpy(const_cast<void*>(bound.data()), d.data.get(), bytes);
      outputs_[i] = bound;
      return ok_status();
    }
    outputs_[i] = Tensor::view(value.dtype, d.shape, d.data.get());
    return ok_status();
  }

  Status execute(size_t i) {
    running_ = i;
    const Specialization& spec = *spec_;
    const ExecutablePartition& ep = *spec.executable()[i];
    const bp_backend_api_t* api = ep.backend->api();
    profile::Span span(profile::Kind::kPartition, [&] { return std::string(ep.view->get()->name); });
    span.arg("backend", ep.backend->id());
    bp_profile_t profiled{profile::Recorder::current(), ep.view->get(), ep.backend->id().c_str()};
    const auto& in = in_tensors_[i];
    const auto& out = out_tensors_[i];
    bp_status_t* s = nullptr;
    if (ep.imperative) {
      const uint64_t begin = span.recording() ? profile::now_ns() : 0;
      s = api->execute_node(ep.backend->instance(), ep.view->get(), 0, in.size(), in.data(),
                            out.size(), out.data());
      if (span.recording()) host_api()->profile_node(&profiled, 0, nullptr, nullptr, begin, profile::now_ns());
    } else if (BP_TABLE_HAS(api, execute_shaped)) {
      const PartitionShapes& shapes = spec.shapes_of(i);
      bp_execute_args_t args{};
      args.struct_size = BP_STRUCT_SIZE(bp_execute_args_t, sink);
      args.num_inputs = in.size();
      args.inputs = in.data();
      args.num_outputs = out.size();
      args.outputs = out.data();
      args.num_values = shapes.values.size();
      args.value_shapes = shapes.values.data();
      args.sink = &sink_;
      if (api->api_minor >= 5) {  // a 1.2-1.4 backend reads only as far as sink
        args.struct_size = BP_EXECUTE_ARGS_SIZE_1_5;
        args.thread_pool = pool_ != nullptr ? pool_->abi() : nullptr;
        args.flags = edge_after_[i] ? BP_EXECUTE_EDGE_FOLLOWS : 0u;
      }
      if (api->api_minor >= 6) {
        args.struct_size = BP_EXECUTE_ARGS_SIZE_1_6;
        args.profile = span.recording() ? &profiled : nullptr;
      }
      s = api->execute_shaped(contexts_[i], &args);
    } else {
      s = api->execute(contexts_[i], in.size(), in.data(), out.size(), out.data());
    }
    // Another backend runs next: the pool's workers, done with this
    // partition, sleep now rather than spin through that one.
    if (edge_after_[i] && pool_ != nullptr) pool_->park();
    if (s != nullptr) {
      failed_ = static_cast<int>(i);
      return ep.backend->check(s, "execute " + std::string(ep.view->get()->name));
    }
    return ok_status();
  }

  // Per partition: does another backend's partition run right after it (in
  // this run, or first in the next)? Never for a model on one backend.
  // BACKPLANE_EDGE_YIELD=0 turns it off, to measure what it is worth.
  static std::vector<bool> edges_of(const Specialization& spec) {
    std::vector<bool> edges(spec.executable().size(), false);
    static const bool enabled = [] {
      const char* v = std::getenv("BACKPLANE_EDGE_YIELD");
      return v == nullptr || std::strcmp(v, "0") != 0;
    }();
    if (!enabled) return edges;
    std::vector<int> order;
    for (const ExecStep& st : spec.steps())
      if (st.kind == ExecStep::kRun) order.push_back(st.partition);
    for (size_t k = 0; k < order.size(); ++k) {
      const int next = order[(k + 1) % order.size()];
      edges[order[k]] = spec.executable()[order[k]]->backend != spec.executable()[next]->backend;
    }
    return edges;
  }

  void* address_of(int v, int space) const {
    const ir::Graph& g = spec_->graph();
    for (const FeedWrite& w : feed_writes_)
      if (w.value == v && w.space == space) return w.data;
    for (size_t i = 0; i < fed_.size(); ++i)
      if (fed_[i].ready && fed_[i].output >= 0 && fed_[i].space == space && space != 0 &&
          g.inputs[i] == v)
        return fed_[i].data;
    if (space == 0) {
      if (g.values[v].is_constant()) return const_cast<void*>(spec_->constant(v)->data());
      for (size_t i = 0; i < g.inputs.size(); ++i)
        if (g.inputs[i] == v) return const_cast<void*>(inputs_[i].data());
      for (size_t i = 0; i < g.outputs.size(); ++i)
        if (g.outputs[i] == v && !bound_outputs_[i].empty())
          return const_cast<void*>(bound_outputs_[i].data());
    }
    const MemoryPlan& mem = spec_->memory();
    const MemoryPlan::Buffer& b = mem.buffers[mem.buffer_of.at({v, space})];
    if (space == 0) return static_cast<char*>(arena_.get()) + b.offset;
    return device_buffers_[b.offset].get().ptr;
  }

  Status copy(const ExecStep& s) {
    size_t bytes = spec_->value_bytes(s.value);
    void* dst = address_of(s.value, s.to);
    void* src = address_of(s.value, s.from);
    if (bytes == 0) return ok_status();
    const auto& spaces = spec_->spaces();
    const std::string& name = spec_->graph().values[s.value].name;
    if (s.from == 0 && s.to == 0) {
      std::memcpy(dst, src, bytes);
      return ok_status();
    }
    if (s.from == 0) {
      const MemorySpace& to = spaces[s.to];
      const LoadedBackend& b = *to.backend;
      return b.check(
          b.call([&] { return b.api()->copy_to_device(b.instance(), to.device, dst, src, bytes); }),
          "copy_to_device '" + name + "'");
    }
    const MemorySpace& from = spaces[s.from];
    const LoadedBackend& b = *from.backend;
    return b.check(b.call([&] {
      return b.api()->copy_from_device(b.instance(), from.device, dst, src, bytes);
    }),
                   "copy_from_device '" + name + "'");
  }

  // The tensors of `values` in `space` for this run.
  void fill(const std::vector<int>& values, int space, std::vector<bp_tensor_t>* out) const {
    out->resize(values.size());
    for (size_t k = 0; k < values.size(); ++k) {
      bp_tensor_t& t = (*out)[k];
      t = bp_tensor_t{};
      t.struct_size = BP_STRUCT_SIZE(bp_tensor_t, device);
      const int v = values[k];
      if (v < 0) continue;  // an omitted optional input/output: dtype undefined, no data
      const Shape& shape = spec_->shape(v);
      t.dtype = static_cast<bp_dtype_t>(spec_->graph().values[v].dtype);
      t.rank = shape.size();
      t.shape = shape.data();
      if (spec_->is_dynamic(v)) continue;  // allocated through the output sink
      t.data = address_of(v, space);
      t.size_bytes = spec_->value_bytes(v);
      t.device = space == 0 ? 0 : spec_->spaces()[space].device + 1;
    }
  }

  struct CachedContext {
    std::shared_ptr<ExecutablePartition> partition;  // keeps it alive with its context
    ContextHandle context;
    uint64_t generation = 0;
  };

  std::shared_ptr<CompiledModel> model_;
  std::shared_ptr<const Specialization> spec_;  // of the last run's shapes
  std::unique_ptr<void, ArenaDeleter> arena_;
  size_t arena_bytes_ = 0;
  std::vector<std::shared_ptr<LoadedBackend>> acquired_;  // memory_acquire'd
  std::vector<DeviceBuffer> device_buffers_;              // per MemoryPlan device slot
  std::map<const ExecutablePartition*, CachedContext> context_cache_;
  uint64_t generation_ = 0;                   // specialisation switches
  std::vector<bp_exec_context_t*> contexts_;  // per partition of spec_
  std::vector<std::vector<bp_tensor_t>> in_tensors_, out_tensors_;
  std::vector<Tensor> owned_inputs_;  // set_input's copies
  std::vector<Tensor> inputs_;        // views: of owned_inputs_, or bound memory
  std::vector<bool> input_set_;
  std::vector<Tensor> bound_outputs_;  // empty = not bound
  // Feeding outputs back (feed()): per input, the output feeding it and
  // where the last run left that output.
  struct Fed {
    int output = -1;  // -1: not fed
    bool ready = false;
    int space = 0;
    Shape shape;
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::vector<Fed> fed_;
  // Per output that feeds: two buffers taking turns.
  struct FeedBuffers {
    struct Slot {
      int space = -1;
      size_t bytes = 0;
      void* data = nullptr;
      std::unique_ptr<void, ArenaDeleter> host;
      DeviceBuffer device;
    };
    Slot slot[2];
    int next = 0;
  };
  std::vector<FeedBuffers> feed_buffers_;
  struct FeedWrite {
    int value, space;
    void* data;
    int output;
  };
  std::vector<FeedWrite> feed_writes_;               // this run's
  mutable std::vector<ExecStep> pending_host_copy_;  // copies to the host left for later
  std::vector<Tensor> outputs_;
  // Outputs whose shape a backend reports during the run (the output sink).
  struct Dynamic {
    Shape shape;
    std::unique_ptr<void, ArenaDeleter> data;
    size_t capacity = 0;
    bool reported = false;  // this run
  };
  std::map<int, Dynamic> dynamic_;
  size_t running_ = 0;  // the partition executing now
  profile::SessionProfile profile_;
  int failed_ = -1;     // the partition whose execute failed in the last run, -1 if none
  bp_output_sink sink_;
  ThreadPool* const pool_ = model_->thread_pool();  // lent to backends (API 1.5)
  std::vector<bool> edge_after_;                    // per partition: edges_of
};

}  // namespace

Result<std::unique_ptr<Session>> CompiledModel::create_session() {
  auto session = std::make_unique<SessionImpl>(shared_from_this());
  BP_RETURN_IF_ERROR(session->init(), "creating a session");
  return std::unique_ptr<Session>(std::move(session));
}

}  // namespace backplane
