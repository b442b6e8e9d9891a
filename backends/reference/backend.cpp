// CpuRef: the reference backend. Portable C++ kernels, one per op, run in the
// order the runtime gives; the oracle every other backend is compared with.
//
// It reaches the runtime only through the ABI (via backend_sdk.hpp): the same
// table serves the static registration and Backplane_CpuRef_backend.so.
//
// A partition is compiled either for the view's shapes (kernels prepared at
// compile, RefContext) or, when the host asks (API 1.2, shape_polymorphic),
// once for every shape: kernels are then prepared by each context for the
// shapes execute_shaped gives, and again when they change (PolyContext).
#include "reference/kernel.hpp"
#include "reference/kernel_util.hpp"

#include <backplane/backend_sdk.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
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
    register_math_kernels(r);
    register_indexing_kernels(r);
    register_detection_kernels(r);
    register_rnn_kernels(r);
    register_quant_kernels(r);
    register_signal_kernels(r);
    register_opset18_kernels(r);
    register_control_kernels(r);
    return r;
  }();
  return registry;
}

bool domain_ok(const sdk::NodeRef& node) {
  return node.domain().empty() || node.domain() == "ai.onnx" || node.op_type() == "Gelu" ||
         (node.domain() == "com.microsoft" &&
          (node.op_type() == "MatMulNBits" || node.op_type() == "GatherBlockQuantized"));
}

// A floating-point constant this large is a weight: no kernel reads one to
// decide whether it can run the node (the inputs kernels read when they are
// made are shapes, axes, indices and scalars).
constexpr size_t kWeightBytes = size_t{64} << 10;

bool is_weight(const bp_value_t& v) {
  const bool floating = v.dtype == BP_DTYPE_FLOAT32 || v.dtype == BP_DTYPE_FLOAT16 ||
                        v.dtype == BP_DTYPE_BFLOAT16 || v.dtype == BP_DTYPE_FLOAT64;
  return floating && sdk::byte_size(v) >= kWeightBytes;
}

// Builds the NodeInfo for node `index`; constant inputs are read through the
// NamedDataMap and the buffers appended to `held` (kept for the kernel's life).
// `read_weights` false: weights (is_weight) are not read and are given as
// inputs known at run time (nullptr), for a support query, which must not
// bring a weight its owner let go of back into memory.
NodeInfo make_info(const sdk::Host& host, const bp_graph_view_t& view, size_t index,
                   std::vector<sdk::Weight>& held, bool read_weights = true) {
  NodeInfo info{sdk::NodeRef(&view, index), {}, {}, {}, {}, {}};
  const bp_node_t& node = view.nodes[index];
  info.in_dtypes.reserve(node.num_inputs);
  info.in_shapes.reserve(node.num_inputs);
  info.in_constants.reserve(node.num_inputs);
  info.out_dtypes.reserve(node.num_outputs);
  info.out_shapes.reserve(node.num_outputs);
  held.reserve(held.size() + node.num_inputs);
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
    if ((v.flags & BP_VALUE_CONSTANT) != 0 && v.data_key != nullptr &&
        (read_weights || !is_weight(v))) {
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

// Whether this backend has a kernel for the node's op (whatever its shapes).
const KernelFactory& check_op(const sdk::NodeRef& node) {
  if (!domain_ok(node))
    throw sdk::unsupported("domain '" + std::string(node.domain()) + "' is not supported");
  const KernelFactory* factory = kernels().find(std::string(node.op_type()));
  if (factory == nullptr)
    throw sdk::unsupported("operator '" + std::string(node.op_type()) + "' is not implemented");
  return *factory;
}

std::unique_ptr<Kernel> make_kernel(const NodeInfo& info) { return check_op(info.node)(info); }

// True if an input or output of node n has a dim the view does not know (-1).
bool has_unknown_dims(const bp_graph_view_t& view, size_t n) {
  const bp_node_t& node = view.nodes[n];
  for (const auto& [ids, count] :
       {std::pair{node.inputs, node.num_inputs}, std::pair{node.outputs, node.num_outputs}})
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] < 0) continue;
      const bp_value_t& v = view.values[ids[i]];
      for (size_t d = 0; d < v.rank; ++d)
        if (v.shape[d] < 0) return true;
    }
  return false;
}

// Where a value of the partition lives during a run.
struct Location {
  enum Kind { kNone, kInput, kOutput, kConstant, kArena } kind = kNone;
  size_t index = 0;  // kInput/kOutput: position; kArena: byte offset (concrete partitions)
  const void* constant = nullptr;
};

struct Step {
  std::unique_ptr<Kernel> kernel;        // concrete partitions; null when shape-polymorphic
  std::vector<int32_t> inputs, outputs;  // view value ids, -1 = omitted
  // Shape-polymorphic partitions: the positions of the inputs whose bytes the
  // kernel is planned from (KernelRegistry::data_inputs) and that are not
  // constants, so each run reads them.
  std::vector<size_t> run_data;
};

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<void, FreeDeleter>;

Buffer aligned_buffer(size_t bytes) {
  Buffer b(std::aligned_alloc(kAlign, std::max<size_t>(align_up(bytes), kAlign)));
  if (!b) throw std::bad_alloc();
  return b;
}

std::string partition_name(const bp_graph_view_t& view) {
  return "CpuRef partition '" + std::string(view.name != nullptr ? view.name : "") + "'";
}

std::string shape_str(const int64_t* dims, size_t rank) {
  return dims_str(rank == 0 ? Dims{} : Dims(dims, dims + rank));
}

bool same_dims(const int64_t* a, size_t rank_a, const int64_t* b, size_t rank_b) {
  if (rank_a != rank_b) return false;
  for (size_t d = 0; d < rank_a; ++d)
    if (a[d] != b[d]) return false;
  return true;
}

class RefCompiled : public sdk::CompiledPartition {
 public:
  RefCompiled(const sdk::Host& host, const bp_graph_view_t& view, bool polymorphic)
      : host_(host), polymorphic_(polymorphic), view_(view) {
    const size_t nv = view.num_values;
    locations_.resize(nv);
    producers_.assign(nv, -1);
    for (size_t k = 0; k < view.num_inputs; ++k)
      locations_[view.inputs[k]] = {Location::kInput, k, nullptr};
    for (size_t k = 0; k < view.num_outputs; ++k)
      locations_[view.outputs[k]] = {Location::kOutput, k, nullptr};
    for (size_t v = 0; v < nv; ++v) {
      dim_offsets_.push_back(total_dims_);
      total_dims_ += view.values[v].rank;
    }
    if (polymorphic) check_polymorphic(view);
    for (size_t n = 0; n < view.num_nodes; ++n) {
      const bp_node_t& node = view.nodes[n];
      Step step;
      step.inputs.assign(node.inputs, node.inputs + node.num_inputs);
      step.outputs.assign(node.outputs, node.outputs + node.num_outputs);
      for (int32_t v : step.outputs)
        if (v >= 0) producers_[v] = static_cast<int32_t>(n);
      if (polymorphic) prepare_later(view, n, step);
      else prepare_now(view, n, step);
      steps_.push_back(std::move(step));
      op_types_.push_back(node.op_type);
    }
    plan_lifetimes(view);
    num_inputs_ = view.num_inputs;
    num_outputs_ = view.num_outputs;
  }

  std::unique_ptr<sdk::ExecContext> create_context() override;

  // CpuRef rebuilds its kernels from the view and the NamedDataMap, so the
  // payload only identifies what it was made from: a format tag, whether it
  // is shape-polymorphic, and the op type of every node, checked again at
  // deserialize.
  void serialize(bp_blob_store_t*, bp_byte_writer_t* writer) override {
    std::string payload = payload_for(op_types_, polymorphic_);
    host_.append(writer, payload.data(), payload.size());
  }
  static std::string payload_for(const std::vector<std::string>& op_types, bool polymorphic) {
    std::string p = kPayloadTag;
    // A concrete payload is unchanged from before API 1.2, so older
    // artifacts still load.
    if (polymorphic) p += "shape-polymorphic\n";
    for (const std::string& op : op_types) p += op + '\n';
    return p;
  }
  static constexpr const char* kPayloadTag = "CpuRef payload 1\n";

  bool polymorphic() const { return polymorphic_; }
  // The partition's view as compiled (a copy: the host's lives only for the
  // compile call); its non-constant shapes are -1 when polymorphic.
  const bp_graph_view_t& view() const { return view_.view(); }
  const std::vector<Step>& steps() const { return steps_; }
  const std::vector<Location>& locations() const { return locations_; }
  int32_t producer(size_t v) const { return producers_[v]; }
  // Values get dims_[dim_offset(v) ...] in a flat array of every value's dims.
  size_t dim_offset(size_t v) const { return dim_offsets_[v]; }
  size_t total_dims() const { return total_dims_; }
  // The intermediates placed in the arena and the steps each lives through.
  const std::vector<sdk::ArenaTensor>& arena_tensors() const { return arena_tensors_; }
  const std::vector<int32_t>& arena_values() const { return arena_values_; }
  size_t arena_bytes() const { return arena_bytes_; }
  size_t scratch_bytes() const { return scratch_bytes_; }
  size_t num_values() const { return locations_.size(); }
  size_t num_inputs() const { return num_inputs_; }
  size_t num_outputs() const { return num_outputs_; }

 private:
  // A polymorphic compile checks what it can without shapes: every op has a
  // kernel (else BP_STATUS_UNSUPPORTED, and the host compiles concrete views
  // instead, which reject the node with the same reason) and constants have
  // static shapes. Kernels are prepared by each context at run time.
  void check_polymorphic(const bp_graph_view_t& view) const {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      try {
        check_op(sdk::NodeRef(&view, n));
      } catch (const sdk::Error& e) {
        throw sdk::Error(e.code(), partition_name(view) + ": node '" + view.nodes[n].name + "' (" +
                                       view.nodes[n].op_type + "): " + e.what());
      }
    }
    for (size_t v = 0; v < view.num_values; ++v) {
      const bp_value_t& value = view.values[v];
      if ((value.flags & BP_VALUE_CONSTANT) == 0) continue;
      for (size_t d = 0; d < value.rank; ++d)
        if (value.shape[d] < 0)
          throw sdk::invalid(partition_name(view) + ": constant '" + value.name + "' has shape " +
                             shape_str(value.shape, value.rank) + "; constants need static shapes");
    }
  }

  // Concrete: the kernel is built now, from the view's shapes (as before API 1.2).
  void prepare_now(const bp_graph_view_t& view, size_t n, Step& step) {
    NodeInfo info = make_info(host_, view, n, weights_);
    for (size_t i = 0; i < info.in_constants.size(); ++i)
      if (info.in_constants[i] != nullptr)
        locations_[view.nodes[n].inputs[i]] = {Location::kConstant, 0, info.in_constants[i]};
    step.kernel = make_kernel(info);
    scratch_bytes_ = std::max(scratch_bytes_, align_up(step.kernel->scratch_bytes()));
  }

  // Polymorphic: constants are read once now; the kernel waits for shapes.
  void prepare_later(const bp_graph_view_t& view, size_t n, Step& step) {
    for (int32_t v : step.inputs) {
      if (v < 0 || locations_[v].kind == Location::kConstant) continue;
      const bp_value_t& value = view.values[v];
      if ((value.flags & BP_VALUE_CONSTANT) == 0 || value.data_key == nullptr) continue;
      weights_.push_back(host_.weight(view.weights, value.data_key));
      if (weights_.back().size() != sdk::byte_size(value))
        throw sdk::Error(BP_STATUS_CORRUPT_DATA,
                         partition_name(view) + ": constant '" + value.name + "' has " +
                             std::to_string(weights_.back().size()) + " bytes, expected " +
                             std::to_string(sdk::byte_size(value)));
      locations_[v] = {Location::kConstant, 0, weights_.back().data()};
    }
    for (size_t i : kernels().data_inputs(view.nodes[n].op_type))
      if (i < step.inputs.size() && step.inputs[i] >= 0 &&
          locations_[step.inputs[i]].kind != Location::kConstant)
        step.run_data.push_back(i);
  }

  // Intermediate values live in an arena (sdk::plan_arena), each from the
  // step producing it to its last reader. A concrete partition places them
  // now; a polymorphic one keeps the lifetimes and each context places them
  // for the sizes of its run.
  void plan_lifetimes(const bp_graph_view_t& view) {
    std::vector<size_t> last_use(view.num_values, 0);
    for (size_t s = 0; s < steps_.size(); ++s) {
      for (int32_t v : steps_[s].inputs)
        if (v >= 0) last_use[v] = s;
      for (int32_t v : steps_[s].outputs)
        if (v >= 0) last_use[v] = std::max(last_use[v], s);
    }
    for (size_t s = 0; s < steps_.size(); ++s)
      for (int32_t v : steps_[s].outputs) {
        if (v < 0 || locations_[v].kind != Location::kNone) continue;
        locations_[v].kind = Location::kArena;
        arena_tensors_.push_back(
            {s, last_use[v], polymorphic_ ? 0 : sdk::byte_size(view.values[v])});
        arena_values_.push_back(v);
      }
    if (polymorphic_) return;
    sdk::ArenaPlan plan = sdk::plan_arena(arena_tensors_, kAlign);
    for (size_t t = 0; t < arena_values_.size(); ++t)
      locations_[arena_values_[t]].index = plan.offsets[t];
    arena_bytes_ = plan.bytes;
  }

  sdk::Host host_;
  bool polymorphic_;
  sdk::OwnedView view_;
  std::vector<std::string> op_types_;
  std::vector<sdk::Weight> weights_;  // keeps constant inputs readable
  std::vector<Step> steps_;
  std::vector<Location> locations_;
  std::vector<int32_t> producers_;  // per value: the node producing it, -1 if none
  std::vector<size_t> dim_offsets_;
  size_t total_dims_ = 0;
  std::vector<sdk::ArenaTensor> arena_tensors_;
  std::vector<int32_t> arena_values_;
  size_t arena_bytes_ = 0, scratch_bytes_ = 0;
  size_t num_inputs_ = 0, num_outputs_ = 0;
};

// ---------------------------------------------------------------------------
// Checks of execute_shaped's arguments, shared by both kinds of context. They
// build no message (and allocate nothing) unless something is wrong.
// ---------------------------------------------------------------------------

void check_counts(const RefCompiled& compiled, const bp_execute_args_t& args) {
  if (args.num_inputs != compiled.num_inputs() || args.num_outputs != compiled.num_outputs())
    throw sdk::invalid(partition_name(compiled.view()) + ": execute_shaped got " +
                       std::to_string(args.num_inputs) + " inputs and " +
                       std::to_string(args.num_outputs) + " outputs, expected " +
                       std::to_string(compiled.num_inputs()) + " and " +
                       std::to_string(compiled.num_outputs()));
}

// Tensor `k` of `kind` ("input"/"output"), view value `v`, against the shape
// this run gives that value.
void check_tensor(const RefCompiled& compiled, const char* kind, size_t k, int32_t v,
                  const bp_tensor_t& t, const int64_t* dims, size_t rank) {
  const bp_value_t& value = compiled.view().values[v];
  auto fail = [&](const std::string& why) {
    throw sdk::invalid(partition_name(compiled.view()) + ": " + kind + " " + std::to_string(k) +
                       " ('" + value.name + "') " + why);
  };
  if (t.dtype != value.dtype)
    fail(std::string("has dtype ") + sdk::dtype_name(t.dtype) + ", expected " +
         sdk::dtype_name(value.dtype));
  if (t.device != 0) fail("is in device memory; CpuRef reads host memory only");
  if (!same_dims(t.shape, t.rank, dims, rank))
    fail("has shape " + shape_str(t.shape, t.rank) + " but this run's shape of the value is " +
         shape_str(dims, rank));
  const size_t bytes =
      static_cast<size_t>(sdk::element_count(dims, rank)) * sdk::dtype_size(value.dtype);
  if (t.size_bytes < bytes)
    fail("has " + std::to_string(t.size_bytes) + " bytes, its shape needs " +
         std::to_string(bytes));
  if (bytes > 0 && t.data == nullptr) fail("has no data");
}

// Per-caller state of a concrete partition: the arena, the scratch buffer,
// and pointer tables, all allocated here so execute() allocates nothing.
class RefContext : public sdk::ExecContext {
 public:
  explicit RefContext(const RefCompiled& compiled) : compiled_(compiled) {
    memory_ = aligned_buffer(compiled.arena_bytes() + compiled.scratch_bytes());
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
    run(num_inputs, inputs, num_outputs, outputs, nullptr);
  }

  // `profiled`: the execute_shaped call that is being profiled, if any: each
  // step (one node) is timed and reported.
  void run(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
           const bp_tensor_t* outputs, const sdk::ExecuteArgs* profiled) {
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
      const uint64_t begin = profiled != nullptr ? profiled->clock_ns() : 0;
      steps[s].kernel->run(in.data(), out.data(), scratch_);
      if (profiled != nullptr)
        profiled->profile_node(s, nullptr, nullptr, begin, profiled->clock_ns());
    }
  }

  // The shapes of a concrete partition are the view's: value_shapes (when
  // given) and the tensors must say so; then this is execute().
  void execute_shaped(const sdk::ExecuteArgs& args) override {
    const bp_execute_args_t& a = args.raw();
    check_counts(compiled_, a);
    const bp_graph_view_t& view = compiled_.view();
    for (size_t v = 0; v < args.num_values() && v < view.num_values; ++v) {
      const bp_value_t& value = view.values[v];
      const bp_shape_t& s = a.value_shapes[v];
      if (!same_dims(s.dims, s.rank, value.shape, value.rank))
        throw sdk::invalid(partition_name(view) + " was compiled for value '" + value.name +
                           "' of shape " + shape_str(value.shape, value.rank) +
                           " (not shape-polymorphic), execute_shaped gives " +
                           shape_str(s.dims, s.rank));
    }
    for (size_t k = 0; k < a.num_inputs; ++k) {
      const bp_value_t& value = view.values[view.inputs[k]];
      check_tensor(compiled_, "input", k, view.inputs[k], a.inputs[k], value.shape, value.rank);
    }
    for (size_t k = 0; k < a.num_outputs; ++k) {
      const bp_value_t& value = view.values[view.outputs[k]];
      check_tensor(compiled_, "output", k, view.outputs[k], a.outputs[k], value.shape, value.rank);
    }
    run(a.num_inputs, a.inputs, a.num_outputs, a.outputs, args.profiling() ? &args : nullptr);
  }

 private:
  const RefCompiled& compiled_;
  Buffer memory_;
  void* scratch_ = nullptr;
  std::vector<void*> values_;
  std::vector<std::vector<const void*>> in_ptrs_;
  std::vector<std::vector<void*>> out_ptrs_;
};

// Per-caller state of a shape-polymorphic partition. Each run brings the
// shape of every value (execute_shaped's value_shapes). The context keeps the
// shapes of its last run, the arena placed for them and, per node, the kernel
// prepared for that node's shapes and data inputs: a run at the shapes of the
// last one prepares nothing and allocates nothing; a run at new shapes places
// the arena again (growing it if needed) and prepares the kernels of the
// nodes whose shapes or data inputs changed, right before each runs (so the
// data inputs computed earlier in the same run are there to read).
class PolyContext : public sdk::ExecContext {
 public:
  explicit PolyContext(const RefCompiled& compiled)
      : compiled_(compiled), prepared_(compiled.steps().size()) {
    dims_.assign(compiled.total_dims(), -1);
    values_.assign(compiled.num_values(), nullptr);
    for (size_t v = 0; v < compiled.num_values(); ++v) {
      const Location& loc = compiled.locations()[v];
      if (loc.kind == Location::kConstant) values_[v] = const_cast<void*>(loc.constant);
    }
    for (const Step& step : compiled.steps()) {
      in_ptrs_.emplace_back(step.inputs.size(), nullptr);
      out_ptrs_.emplace_back(step.outputs.size(), nullptr);
    }
  }

  void execute(size_t, const bp_tensor_t*, size_t, const bp_tensor_t*) override {
    throw sdk::invalid(partition_name(compiled_.view()) +
                       " was compiled shape-polymorphic: run it with execute_shaped (API 1.2), "
                       "which gives the shapes of the run");
  }

  void execute_shaped(const sdk::ExecuteArgs& args) override {
    const bp_execute_args_t& a = args.raw();
    check_shapes(a);
    check_tensors(a);
    take_shapes(a);
    DynamicAllocator allocator(*this, args);
    for (size_t k = 0; k < a.num_inputs; ++k)
      values_[compiled_.view().inputs[k]] = a.inputs[k].data;
    for (size_t k = 0; k < a.num_outputs; ++k)
      values_[compiled_.view().outputs[k]] = a.outputs[k].data;
    const auto& steps = compiled_.steps();
    const bool profiling = args.profiling();
    for (size_t s = 0; s < steps.size(); ++s) {
      // A node's time includes preparing its kernel for new shapes.
      const uint64_t begin = profiling ? args.clock_ns() : 0;
      // Every step is checked, not only after new shapes: a run that failed
      // part way left the steps after the failure prepared for older shapes.
      for (int32_t v : steps[s].inputs)  // reported by a node before, or not at all
        if (v >= 0 && !known(v)) unknown_dim(static_cast<size_t>(v));
      int32_t unknown_out = -1;  // an output whose shape only its kernel can compute
      for (int32_t v : steps[s].outputs)
        if (v >= 0 && !known(v)) unknown_out = v;
      if (!prepared_[s].kernel || !same_step_dims(s) || !same_step_data(s)) {
        if (unknown_out < 0) {
          prepare(s);
        } else {
          // A factory that cannot take the -1 dims is not one of a kernel
          // with dynamic outputs: the value's shape is then unknown here.
          try {
            prepare(s);
          } catch (const sdk::Error&) {
            unknown_dim(static_cast<size_t>(unknown_out));
          }
        }
      }
      std::vector<const void*>& in = in_ptrs_[s];
      std::vector<void*>& out = out_ptrs_[s];
      for (size_t i = 0; i < in.size(); ++i)
        in[i] = steps[s].inputs[i] >= 0 ? values_[steps[s].inputs[i]] : nullptr;
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = steps[s].outputs[i] >= 0 ? values_[steps[s].outputs[i]] : nullptr;
      const Kernel& kernel = *prepared_[s].kernel;
      if (kernel.has_dynamic_outputs()) {
        allocator.step = s;
        kernel.run_dynamic(in.data(), out.data(), allocator, scratch_.get());
        for (int32_t v : steps[s].outputs)
          if (v >= 0 && !known(v))
            throw sdk::invalid(partition_name(compiled_.view()) + ": node '" +
                               compiled_.view().nodes[s].name + "' did not allocate its output '" +
                               compiled_.view().values[v].name + "'");
      } else {
        for (int32_t v : steps[s].outputs)
          if (v >= 0 && !known(v)) unknown_dim(static_cast<size_t>(v));
        kernel.run(in.data(), out.data(), scratch_.get());
      }
      if (profiling) args.profile_node(s, nullptr, nullptr, begin, args.clock_ns());
    }
  }

 private:
  // What a node's kernel was prepared for: the dims of its inputs and
  // outputs, in order, and the bytes of its run-time data inputs (the
  // factory may keep pointers into them: they change only with the kernel).
  struct Prepared {
    std::unique_ptr<Kernel> kernel;
    std::vector<int64_t> dims;
    std::vector<std::vector<uint8_t>> data;
  };

  const int64_t* dims_of(int32_t v) const { return dims_.data() + compiled_.dim_offset(v); }
  // Whether this run knows value v's shape (no -1 dim: given, or reported
  // by the node that made it).
  bool known(int32_t v) const {
    const int64_t* d = dims_of(v);
    return std::all_of(d, d + compiled_.view().values[v].rank, [](int64_t x) { return x >= 0; });
  }
  // 0 while the shape is not known (the value is then not in the arena).
  size_t bytes_of(int32_t v) const {
    if (!known(v)) return 0;
    const bp_value_t& value = compiled_.view().values[v];
    return static_cast<size_t>(sdk::element_count(dims_of(v), value.rank)) *
           sdk::dtype_size(value.dtype);
  }

  // Where a kernel with dynamic outputs (Kernel::run_dynamic) puts them once
  // it knows their shape: a partition output goes to the host (its output
  // sink), an intermediate to memory of this context's own. The nodes after
  // it are prepared with the reported shape.
  struct DynamicAllocator : OutputAllocator {
    DynamicAllocator(PolyContext& c, const sdk::ExecuteArgs& a) : ctx(c), args(a) {}
    void* allocate(size_t i, const Dims& dims) override {
      const Step& st = ctx.compiled_.steps()[step];
      const bp_graph_view_t& view = ctx.compiled_.view();
      const std::string node = "node '" + std::string(view.nodes[step].name) + "'";
      if (i >= st.outputs.size() || st.outputs[i] < 0)
        throw sdk::invalid(partition_name(view) + ": " + node + " allocated output " +
                           std::to_string(i) + ", which it does not have");
      const int32_t v = st.outputs[i];
      const bp_value_t& value = view.values[v];
      if (dims.size() != value.rank)
        throw sdk::invalid(partition_name(view) + ": " + node + " reported rank " +
                           std::to_string(dims.size()) + " for '" + value.name + "', of rank " +
                           std::to_string(value.rank));
      for (int64_t d : dims)
        if (d < 0)
          throw sdk::invalid(partition_name(view) + ": " + node + " reported a negative dim");
      std::copy(dims.begin(), dims.end(), ctx.dims_.data() + ctx.compiled_.dim_offset(v));
      const Location& loc = ctx.compiled_.locations()[v];
      void* data = nullptr;
      if (loc.kind == Location::kOutput) {
        data = args.allocate_output(loc.index, dims);
      } else {
        const size_t bytes = ctx.bytes_of(v);
        auto& own = ctx.dynamic_[v];
        if (own.second < bytes || !own.first) {
          own.first = aligned_buffer(bytes);
          own.second = bytes;
        }
        data = own.first.get();
      }
      ctx.values_[v] = data;
      return data;
    }
    PolyContext& ctx;
    const sdk::ExecuteArgs& args;
    size_t step = 0;
  };

  // value_shapes: one entry per value of the view, of the value's rank, with
  // static dims; constants at their own shape. Nothing here changes state,
  // so a rejected run leaves the context as it was.
  void check_shapes(const bp_execute_args_t& a) const {
    const bp_graph_view_t& view = compiled_.view();
    check_counts(compiled_, a);
    if (a.value_shapes == nullptr || a.num_values != view.num_values)
      throw sdk::invalid(partition_name(view) + ": execute_shaped gave " +
                         std::to_string(a.value_shapes == nullptr ? 0 : a.num_values) +
                         " value shapes, expected one per value of the view (" +
                         std::to_string(view.num_values) + ")");
    for (size_t v = 0; v < view.num_values; ++v) {
      const bp_value_t& value = view.values[v];
      const bp_shape_t& s = a.value_shapes[v];
      if (s.rank != value.rank || (s.rank > 0 && s.dims == nullptr))
        throw sdk::invalid(partition_name(view) + ": value '" + value.name + "' has rank " +
                           std::to_string(value.rank) + ", value_shapes gives " +
                           shape_str(s.dims, s.dims == nullptr ? 0 : s.rank));
      // A node's output may have -1 dims (its shape depends on data); a
      // partition input or constant may not.
      for (size_t d = 0; d < s.rank; ++d)
        if (s.dims[d] < 0 && (compiled_.producer(v) < 0 || s.dims[d] != -1)) unknown_dim(v, s);
      if ((value.flags & BP_VALUE_CONSTANT) != 0 &&
          !same_dims(s.dims, s.rank, value.shape, value.rank))
        throw sdk::invalid(partition_name(view) + ": constant '" + value.name + "' has shape " +
                           shape_str(value.shape, value.rank) + ", value_shapes gives " +
                           shape_str(s.dims, s.rank));
    }
  }

  [[noreturn]] void unknown_dim(size_t v) const {
    const bp_value_t& value = compiled_.view().values[v];
    unknown_dim(v, bp_shape_t{value.rank, dims_of(static_cast<int32_t>(v))});
  }
  // A -1 dim: the value's shape depends on data, and nothing here computes
  // it (only a kernel with dynamic outputs does, Kernel::run_dynamic).
  [[noreturn]] void unknown_dim(size_t v, const bp_shape_t& s) const {
    const bp_graph_view_t& view = compiled_.view();
    const int32_t n = compiled_.producer(v);
    const std::string node =
        n < 0 ? std::string("a partition input")
              : "node '" + std::string(view.nodes[n].name) + "' (" + view.nodes[n].op_type + ")";
    throw sdk::Error(BP_STATUS_UNIMPLEMENTED,
                     partition_name(view) + ": value '" + view.values[v].name + "' of " + node +
                         " has shape " + shape_str(s.dims, s.rank) +
                         ", which depends on data, and no kernel of this partition computes it");
  }

  void check_tensors(const bp_execute_args_t& a) const {
    const bp_graph_view_t& view = compiled_.view();
    for (size_t k = 0; k < a.num_inputs; ++k) {
      const bp_shape_t& s = a.value_shapes[view.inputs[k]];
      check_tensor(compiled_, "input", k, view.inputs[k], a.inputs[k], s.dims, s.rank);
    }
    for (size_t k = 0; k < a.num_outputs; ++k) {
      const bp_shape_t& s = a.value_shapes[view.outputs[k]];
      // One whose shape depends on data comes from the output sink.
      if (std::any_of(s.dims, s.dims + s.rank, [](int64_t d) { return d < 0; })) continue;
      check_tensor(compiled_, "output", k, view.outputs[k], a.outputs[k], s.dims, s.rank);
    }
  }

  // Takes this run's shapes; if they differ from the last run's, places the
  // arena for them.
  void take_shapes(const bp_execute_args_t& a) {
    const bp_graph_view_t& view = compiled_.view();
    bool same = placed_;
    for (size_t v = 0; v < view.num_values && same; ++v)
      same = same_dims(a.value_shapes[v].dims, a.value_shapes[v].rank, dims_of(v),
                       view.values[v].rank);
    if (same) return;
    placed_ = false;  // until the arena is placed for the new shapes
    for (size_t v = 0; v < view.num_values; ++v)
      std::copy_n(a.value_shapes[v].dims, view.values[v].rank,
                  dims_.data() + compiled_.dim_offset(v));
    std::vector<sdk::ArenaTensor> tensors = compiled_.arena_tensors();
    const std::vector<int32_t>& placed = compiled_.arena_values();
    for (size_t t = 0; t < tensors.size(); ++t) tensors[t].size = bytes_of(placed[t]);
    const sdk::ArenaPlan plan = sdk::plan_arena(tensors, kAlign);
    if (plan.bytes > arena_capacity_ || !arena_) {
      arena_ = aligned_buffer(plan.bytes);
      arena_capacity_ = plan.bytes;
    }
    for (size_t t = 0; t < placed.size(); ++t)
      values_[placed[t]] = static_cast<char*>(arena_.get()) + plan.offsets[t];
    placed_ = true;
  }

  bool same_step_dims(size_t s) const {
    const Step& step = compiled_.steps()[s];
    const std::vector<int64_t>& key = prepared_[s].dims;
    size_t at = 0;
    for (const std::vector<int32_t>* list : {&step.inputs, &step.outputs})
      for (int32_t v : *list) {
        if (v < 0) continue;
        const size_t rank = compiled_.view().values[v].rank;
        if (at + rank > key.size() ||
            !std::equal(key.begin() + at, key.begin() + at + rank, dims_of(v)))
          return false;
        at += rank;
      }
    return at == key.size();
  }

  bool same_step_data(size_t s) const {
    const Step& step = compiled_.steps()[s];
    const Prepared& p = prepared_[s];
    for (size_t k = 0; k < step.run_data.size(); ++k) {
      const int32_t v = step.inputs[step.run_data[k]];
      const size_t bytes = bytes_of(v);
      if (p.data[k].size() != bytes ||
          (bytes > 0 && std::memcmp(p.data[k].data(), values_[v], bytes) != 0))
        return false;
    }
    return true;
  }

  // Prepares step s's kernel for this run's shapes and data inputs, with the
  // factories a concrete compile uses. A failure leaves the step unprepared,
  // so the next run prepares it again.
  void prepare(size_t s) {
    static const uint64_t kEmpty = 0;  // an address for an empty data input
    const Step& step = compiled_.steps()[s];
    const bp_graph_view_t& view = compiled_.view();
    Prepared& p = prepared_[s];
    p.kernel.reset();
    p.dims.clear();
    p.data.assign(step.run_data.size(), {});
    NodeInfo info{sdk::NodeRef(&view, s), {}, {}, {}, {}, {}};
    for (int32_t v : step.inputs) {
      const bool present = v >= 0;
      info.in_dtypes.push_back(present ? view.values[v].dtype : BP_DTYPE_UNDEFINED);
      info.in_shapes.push_back(present ? Dims(dims_of(v), dims_of(v) + view.values[v].rank)
                                       : Dims{});
      info.in_constants.push_back(present ? compiled_.locations()[v].constant : nullptr);
      if (present) p.dims.insert(p.dims.end(), dims_of(v), dims_of(v) + view.values[v].rank);
    }
    for (int32_t v : step.outputs) {
      const bool present = v >= 0;
      info.out_dtypes.push_back(present ? view.values[v].dtype : BP_DTYPE_UNDEFINED);
      info.out_shapes.push_back(present ? Dims(dims_of(v), dims_of(v) + view.values[v].rank)
                                        : Dims{});
      if (present) p.dims.insert(p.dims.end(), dims_of(v), dims_of(v) + view.values[v].rank);
    }
    for (size_t k = 0; k < step.run_data.size(); ++k) {
      const size_t i = step.run_data[k];
      const uint8_t* bytes = static_cast<const uint8_t*>(values_[step.inputs[i]]);
      p.data[k].assign(bytes, bytes + bytes_of(step.inputs[i]));
      info.in_constants[i] =
          p.data[k].empty() ? static_cast<const void*>(&kEmpty) : p.data[k].data();
    }
    std::unique_ptr<Kernel> kernel = make_kernel(info);
    const size_t scratch = align_up(kernel->scratch_bytes());
    if (scratch > scratch_capacity_ || !scratch_) {
      scratch_ = aligned_buffer(scratch);
      scratch_capacity_ = scratch;
    }
    p.kernel = std::move(kernel);
  }

  const RefCompiled& compiled_;
  std::vector<int64_t> dims_;  // this run's dims of every value (RefCompiled::dim_offset)
  bool placed_ = false;        // the arena is placed for dims_
  Buffer arena_, scratch_;
  size_t arena_capacity_ = 0, scratch_capacity_ = 0;
  std::vector<Prepared> prepared_;  // per step
  // Intermediates whose shape a node reported during the run: (memory, bytes).
  std::map<int32_t, std::pair<Buffer, size_t>> dynamic_;
  std::vector<void*> values_;
  std::vector<std::vector<const void*>> in_ptrs_;
  std::vector<std::vector<void*>> out_ptrs_;
};

std::unique_ptr<sdk::ExecContext> RefCompiled::create_context() {
  if (polymorphic_) return std::make_unique<PolyContext>(*this);
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
    i.flags = BP_BACKEND_FLAG_COMPILE | BP_BACKEND_FLAG_SINGLE_OP | BP_BACKEND_FLAG_SERIALIZE |
              BP_BACKEND_FLAG_SHAPE_POLYMORPHIC;
    return i;
  }

  // A node whose shapes are not all known (a -1 dim) is judged by its op
  // alone: its kernel is prepared when the shapes are (a polymorphic compile).
  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      std::vector<sdk::Weight> held;
      try {
        if (has_unknown_dims(view, n)) {
          check_op(sdk::NodeRef(&view, n));
          report.supported(n);
          continue;
        }
        NodeInfo info = make_info(host(), view, n, held, /*read_weights=*/false);
        (void)make_kernel(info);
        report.supported(n);
      } catch (const sdk::Error& e) {
        report.rejected(n, e.what());
      }
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t& options,
                                                  sdk::NodeReport&) override {
    return std::make_unique<RefCompiled>(host(), view, sdk::shape_polymorphic(options));
  }

  std::unique_ptr<sdk::CompiledPartition> deserialize(
      const bp_graph_view_t& view, const void* payload, size_t size,
      const bp_compile_options_t& options) override {
    const bool polymorphic = sdk::shape_polymorphic(options);
    std::vector<std::string> ops;
    for (size_t n = 0; n < view.num_nodes; ++n) ops.push_back(view.nodes[n].op_type);
    std::string expected = RefCompiled::payload_for(ops, polymorphic);
    if (size != expected.size() || std::memcmp(payload, expected.data(), size) != 0)
      throw sdk::Error(BP_STATUS_CORRUPT_DATA,
                       "CpuRef payload does not match partition '" + std::string(view.name) + "'" +
                           (polymorphic ? " compiled shape-polymorphic" : ""));
    return std::make_unique<RefCompiled>(host(), view, polymorphic);
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
