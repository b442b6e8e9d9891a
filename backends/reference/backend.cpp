// CpuRef: the reference backend. Portable C++ kernels, one per op, run in the
// order the runtime gives; the oracle every other backend is compared with.
//
// It reaches the runtime only through the ABI (via backend_sdk.hpp): the same
// table serves the static registration and Backplane_CpuRef_backend.so.
#include "reference/kernel.hpp"

#include <backplane/backend_sdk.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

constexpr size_t kAlign = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

const KernelRegistry& kernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_nn_kernels(r);
    register_elementwise_kernels(r);
    register_tensor_kernels(r);
    return r;
  }();
  return registry;
}

bool domain_ok(const sdk::NodeRef& node) {
  return node.domain().empty() || node.domain() == "ai.onnx" || node.op_type() == "Gelu";
}

// Builds the NodeInfo for node `index`; constant inputs are read through the
// NamedDataMap and the buffers appended to `held` (kept for the kernel's life).
NodeInfo make_info(const sdk::Host& host, const bp_graph_view_t& view, size_t index,
                   std::vector<sdk::Weight>& held) {
  NodeInfo info{sdk::NodeRef(&view, index), {}, {}, {}, {}, {}};
  const bp_node_t& node = view.nodes[index];
  for (size_t i = 0; i < node.num_inputs; ++i) {
    int32_t id = node.inputs[i];
    if (id < 0) {
      info.in_dtypes.push_back(BP_DTYPE_UNDEFINED);
      info.in_shapes.emplace_back();
      info.in_constants.push_back(nullptr);
      continue;
    }
    const bp_value_t& v = view.values[id];
    info.in_dtypes.push_back(v.dtype);
    info.in_shapes.push_back(sdk::shape_of(v));
    if ((v.flags & BP_VALUE_CONSTANT) != 0 && v.data_key != nullptr) {
      held.push_back(host.weight(view.weights, v.data_key));
      if (held.back().size() != sdk::byte_size(v))
        throw sdk::Error(BP_STATUS_CORRUPT_DATA, info.describe() + ": constant '" + v.name +
                                                     "' has " + std::to_string(held.back().size()) +
                                                     " bytes, expected " +
                                                     std::to_string(sdk::byte_size(v)));
      info.in_constants.push_back(held.back().data());
    } else {
      info.in_constants.push_back(nullptr);
    }
  }
  for (size_t i = 0; i < node.num_outputs; ++i) {
    int32_t id = node.outputs[i];
    if (id < 0) {
      info.out_dtypes.push_back(BP_DTYPE_UNDEFINED);
      info.out_shapes.emplace_back();
      continue;
    }
    info.out_dtypes.push_back(view.values[id].dtype);
    info.out_shapes.push_back(sdk::shape_of(view.values[id]));
  }
  return info;
}

std::unique_ptr<Kernel> make_kernel(const NodeInfo& info) {
  if (!domain_ok(info.node))
    throw sdk::unsupported("domain '" + std::string(info.node.domain()) + "' is not supported");
  const KernelFactory* factory = kernels().find(std::string(info.node.op_type()));
  if (factory == nullptr)
    throw sdk::unsupported("operator '" + std::string(info.node.op_type()) +
                           "' is not implemented");
  return (*factory)(info);
}

// Where a value of the partition lives during a run.
struct Location {
  enum Kind { kNone, kInput, kOutput, kConstant, kArena } kind = kNone;
  size_t index = 0;  // kInput/kOutput: position; kArena: byte offset
  const void* constant = nullptr;
};

struct Step {
  std::unique_ptr<Kernel> kernel;
  std::vector<int32_t> inputs, outputs;  // view value ids, -1 = omitted
};

class RefContext;

class RefCompiled : public sdk::CompiledPartition {
 public:
  RefCompiled(const sdk::Host& host, const bp_graph_view_t& view) : host_(host) {
    const size_t nv = view.num_values;
    locations_.resize(nv);
    for (size_t k = 0; k < view.num_inputs; ++k)
      locations_[view.inputs[k]] = {Location::kInput, k, nullptr};
    for (size_t k = 0; k < view.num_outputs; ++k)
      locations_[view.outputs[k]] = {Location::kOutput, k, nullptr};

    for (size_t n = 0; n < view.num_nodes; ++n) {
      NodeInfo info = make_info(host, view, n, weights_);
      for (size_t i = 0; i < info.in_constants.size(); ++i)
        if (info.in_constants[i] != nullptr)
          locations_[view.nodes[n].inputs[i]] = {Location::kConstant, 0, info.in_constants[i]};
      Step step;
      step.kernel = make_kernel(info);
      step.inputs.assign(view.nodes[n].inputs, view.nodes[n].inputs + view.nodes[n].num_inputs);
      step.outputs.assign(view.nodes[n].outputs, view.nodes[n].outputs + view.nodes[n].num_outputs);
      scratch_bytes_ = std::max(scratch_bytes_, align_up(step.kernel->scratch_bytes()));
      steps_.push_back(std::move(step));
      op_types_.push_back(view.nodes[n].op_type);
    }
    plan_arena(view);
    num_values_ = nv;
    num_inputs_ = view.num_inputs;
    num_outputs_ = view.num_outputs;
  }

  std::unique_ptr<sdk::ExecContext> create_context() override;

  // CpuRef rebuilds its kernels from the view and the NamedDataMap, so the
  // payload only identifies what it was made from: a format tag and the op
  // type of every node, checked again at deserialize.
  void serialize(bp_blob_store_t*, bp_byte_writer_t* writer) override {
    std::string payload = payload_for(op_types_);
    host_.append(writer, payload.data(), payload.size());
  }
  static std::string payload_for(const std::vector<std::string>& op_types) {
    std::string p = kPayloadTag;
    for (const std::string& op : op_types) p += op + '\n';
    return p;
  }
  static constexpr const char* kPayloadTag = "CpuRef payload 1\n";

  const std::vector<Step>& steps() const { return steps_; }
  const std::vector<Location>& locations() const { return locations_; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t scratch_bytes() const { return scratch_bytes_; }
  size_t num_values() const { return num_values_; }
  size_t num_inputs() const { return num_inputs_; }
  size_t num_outputs() const { return num_outputs_; }

 private:
  // Intermediate values get arena offsets (sdk::plan_arena): each lives from
  // the step producing it to its last reader.
  void plan_arena(const bp_graph_view_t& view) {
    std::vector<size_t> last_use(view.num_values, 0);
    for (size_t s = 0; s < steps_.size(); ++s) {
      for (int32_t v : steps_[s].inputs)
        if (v >= 0) last_use[v] = s;
      for (int32_t v : steps_[s].outputs)
        if (v >= 0) last_use[v] = std::max(last_use[v], s);
    }
    std::vector<sdk::ArenaTensor> tensors;
    std::vector<int32_t> placed;  // the value of each tensor
    for (size_t s = 0; s < steps_.size(); ++s)
      for (int32_t v : steps_[s].outputs) {
        if (v < 0 || locations_[v].kind != Location::kNone) continue;
        locations_[v].kind = Location::kArena;
        tensors.push_back({s, last_use[v], sdk::byte_size(view.values[v])});
        placed.push_back(v);
      }
    sdk::ArenaPlan plan = sdk::plan_arena(tensors, kAlign);
    for (size_t t = 0; t < placed.size(); ++t) locations_[placed[t]].index = plan.offsets[t];
    arena_bytes_ = plan.bytes;
  }

  sdk::Host host_;
  std::vector<std::string> op_types_;
  std::vector<sdk::Weight> weights_;  // keeps constant inputs readable
  std::vector<Step> steps_;
  std::vector<Location> locations_;
  size_t arena_bytes_ = 0, scratch_bytes_ = 0;
  size_t num_values_ = 0, num_inputs_ = 0, num_outputs_ = 0;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Per-caller state: the arena, the scratch buffer, and pointer tables, all
// allocated here so execute() allocates nothing.
class RefContext : public sdk::ExecContext {
 public:
  explicit RefContext(const RefCompiled& compiled) : compiled_(compiled) {
    size_t bytes = compiled.arena_bytes() + compiled.scratch_bytes();
    memory_.reset(std::aligned_alloc(kAlign, std::max<size_t>(align_up(bytes), kAlign)));
    if (!memory_) throw std::bad_alloc();
    scratch_ = static_cast<char*>(memory_.get()) + compiled.arena_bytes();
    values_.assign(compiled.num_values(), nullptr);
    for (size_t v = 0; v < compiled.num_values(); ++v) {
      const Location& loc = compiled.locations()[v];
      if (loc.kind == Location::kArena) values_[v] = static_cast<char*>(memory_.get()) + loc.index;
      if (loc.kind == Location::kConstant) values_[v] = const_cast<void*>(loc.constant);
    }
    for (const Step& step : compiled.steps()) {
      in_ptrs_.emplace_back(step.inputs.size(), nullptr);
      out_ptrs_.emplace_back(step.outputs.size(), nullptr);
    }
  }

  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override {
    if (num_inputs != compiled_.num_inputs() || num_outputs != compiled_.num_outputs())
      throw sdk::invalid("CpuRef execute: expected " + std::to_string(compiled_.num_inputs()) +
                         " inputs and " + std::to_string(compiled_.num_outputs()) + " outputs");
    for (size_t v = 0; v < values_.size(); ++v) {
      const Location& loc = compiled_.locations()[v];
      if (loc.kind == Location::kInput) values_[v] = inputs[loc.index].data;
      if (loc.kind == Location::kOutput) values_[v] = outputs[loc.index].data;
    }
    for (size_t k = 0; k < num_inputs; ++k)
      if (inputs[k].device != 0) throw sdk::invalid("CpuRef reads host memory only");
    const auto& steps = compiled_.steps();
    for (size_t s = 0; s < steps.size(); ++s) {
      std::vector<const void*>& in = in_ptrs_[s];
      std::vector<void*>& out = out_ptrs_[s];
      for (size_t i = 0; i < in.size(); ++i)
        in[i] = steps[s].inputs[i] >= 0 ? values_[steps[s].inputs[i]] : nullptr;
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = steps[s].outputs[i] >= 0 ? values_[steps[s].outputs[i]] : nullptr;
      steps[s].kernel->run(in.data(), out.data(), scratch_);
    }
  }

 private:
  const RefCompiled& compiled_;
  std::unique_ptr<void, FreeDeleter> memory_;
  void* scratch_ = nullptr;
  std::vector<void*> values_;
  std::vector<std::vector<const void*>> in_ptrs_;
  std::vector<std::vector<void*>> out_ptrs_;
};

std::unique_ptr<sdk::ExecContext> RefCompiled::create_context() {
  return std::make_unique<RefContext>(*this);
}

class RefBackend : public sdk::Backend {
 public:
  static constexpr sdk::BackendIdentity kIdentity{"CpuRef", "Backplane"};

  // The reference kernels are single-threaded by design: the SDK's default
  // configure accepts "num_threads" so one runtime-wide option can configure
  // every backend, and nothing here reads it.
  explicit RefBackend(const bp_host_api_t* host) : sdk::Backend(host) {}

  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.description = "portable reference CPU kernels (correctness oracle)";
    i.device_count = 0;
    i.flags = BP_BACKEND_FLAG_COMPILE | BP_BACKEND_FLAG_SINGLE_OP | BP_BACKEND_FLAG_SERIALIZE;
    return i;
  }

  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      std::vector<sdk::Weight> held;
      try {
        NodeInfo info = make_info(host(), view, n, held);
        (void)make_kernel(info);
        report.supported(n);
      } catch (const sdk::Error& e) {
        report.rejected(n, e.what());
      }
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    return std::make_unique<RefCompiled>(host(), view);
  }

  std::unique_ptr<sdk::CompiledPartition> deserialize(const bp_graph_view_t& view,
                                                      const void* payload, size_t size,
                                                      const bp_compile_options_t&) override {
    std::vector<std::string> ops;
    for (size_t n = 0; n < view.num_nodes; ++n) ops.push_back(view.nodes[n].op_type);
    std::string expected = RefCompiled::payload_for(ops);
    if (size != expected.size() || std::memcmp(payload, expected.data(), size) != 0)
      throw sdk::Error(BP_STATUS_CORRUPT_DATA,
                       "CpuRef payload does not match partition '" + std::string(view.name) + "'");
    return std::make_unique<RefCompiled>(host(), view);
  }

  void execute_node(const bp_graph_view_t& view, size_t node, size_t num_inputs,
                    const bp_tensor_t* inputs, size_t num_outputs,
                    const bp_tensor_t* outputs) override {
    std::vector<sdk::Weight> held;
    NodeInfo info = make_info(host(), view, node, held);
    std::unique_ptr<Kernel> kernel = make_kernel(info);
    std::vector<const void*> in(num_inputs);
    std::vector<void*> out(num_outputs);
    for (size_t i = 0; i < num_inputs; ++i)
      in[i] = info.in_constants.size() > i && info.in_constants[i] ? info.in_constants[i]
                                                                   : inputs[i].data;
    for (size_t i = 0; i < num_outputs; ++i) out[i] = outputs[i].data;
    std::vector<char> scratch_storage(kernel->scratch_bytes() + kAlign);
    void* scratch =
        reinterpret_cast<void*>(align_up(reinterpret_cast<size_t>(scratch_storage.data())));
    kernel->run(in.data(), out.data(), scratch);
  }
};

}  // namespace

#ifdef BACKPLANE_BACKEND_MODULE
}  // namespace backplane::cpuref
BP_DEFINE_BACKEND_ENTRY_POINTS(backplane::cpuref::RefBackend)
#else
const bp_backend_api_t* static_table() { return sdk::backend_table<RefBackend>(); }
const char* static_id() { return RefBackend::kIdentity.id; }
}  // namespace backplane::cpuref
#endif
