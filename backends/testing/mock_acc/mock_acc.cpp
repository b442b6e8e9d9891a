// MockAcc — a test accelerator for the partitioner and the executor.
//
// It behaves like a device backend without a device:
//  - its "device memory" is a separate allocation the host cannot use
//    directly: every tensor handed to execute must be one of its own buffers
//    (else execute fails), so a missing copy in the executor is caught;
//  - it supports only Conv, Relu, Add, MatMul and Gemm (float32);
//  - it counts what it executes and copies, readable through the exported
//    MockAcc_Counter(), so tests can see that a split really happened.
// The arithmetic reuses CpuRef's kernels (compiled into this module), so its
// outputs equal CpuRef's bit for bit; like CpuRef's, they run on the thread
// pool the host lends execute (API 1.5, through the SDK's execute_shaped).
//
// Built four times: MockAcc (symbolic: compile + execute); with
// MOCKACC_IMPERATIVE, MockOp (no compile slot: execute_node one op at a
// time); with MOCKACC_WRONG_BROADCAST_ADD, MockWrong, MockAcc with one wrong
// kernel (a broadcasting Add), which `backplane conformance` must catch; with
// MOCKACC_WRONG_FUSION, MockFuse, MockAcc that "fuses" a Conv with the Add of
// a constant that alone consumes its output and reads that constant reversed:
// right on every op alone, wrong only on the pair, which `backplane validate`
// must name (node and group).
#include "reference/kernel.hpp"

#include <backplane/backend_sdk.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(MOCKACC_IMPERATIVE)
#define MOCK_ID "MockOp"
#elif defined(MOCKACC_WRONG_BROADCAST_ADD)
#define MOCK_ID "MockWrong"
#elif defined(MOCKACC_WRONG_FUSION)
#define MOCK_ID "MockFuse"
#else
#define MOCK_ID "MockAcc"
#endif

namespace mockacc {
namespace ref = backplane::cpuref;
namespace sdk = backplane::sdk;

// --- counters -------------------------------------------------------------

std::mutex g_counter_mutex;
std::map<std::string, uint64_t> g_counters;

void count(const std::string& key, uint64_t n = 1) {
  std::lock_guard<std::mutex> lock(g_counter_mutex);
  g_counters[key] += n;
}

// --- the ABI's threading promise ----------------------------------------------

// The host serialises every call on one instance except execute and
// execute_node (backend_abi.h). Each serialised slot holds a Serialised for
// its duration, lingering a little so that callers the host failed to
// serialise would overlap; an overlap is counted as "overlaps" (the
// concurrency tests expect none).
std::atomic<int> g_inside{0};
struct Serialised {
  Serialised() {
    if (g_inside.fetch_add(1) > 0) count("overlaps");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  ~Serialised() { g_inside.fetch_sub(1); }
  Serialised(const Serialised&) = delete;
  Serialised& operator=(const Serialised&) = delete;
};

// --- "device" memory --------------------------------------------------------

// Every live device allocation, so execute can refuse host pointers.
std::mutex g_device_mutex;
std::map<const char*, size_t> g_device_buffers;

void* device_alloc(size_t size) {
  void* p = std::aligned_alloc(64, ((size + 63) / 64) * 64 + 64);
  if (p == nullptr) throw sdk::Error(BP_STATUS_OUT_OF_MEMORY, "MockAcc: out of device memory");
  std::lock_guard<std::mutex> lock(g_device_mutex);
  g_device_buffers[static_cast<const char*>(p)] = size;
  return p;
}

void device_free(void* p) {
  if (p == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_device_mutex);
    g_device_buffers.erase(static_cast<const char*>(p));
  }
  std::free(p);
}

// True if [p, p+size) lies inside one device allocation.
bool is_device(const void* p, size_t size) {
  std::lock_guard<std::mutex> lock(g_device_mutex);
  auto it = g_device_buffers.upper_bound(static_cast<const char*>(p));
  if (it == g_device_buffers.begin()) return false;
  --it;
  const char* c = static_cast<const char*>(p);
  return c >= it->first && c + size <= it->first + it->second;
}

void check_device(const bp_tensor_t& t, const char* what) {
  if (t.data == nullptr) return;  // omitted optional
  if (t.device != 1 || !is_device(t.data, t.size_bytes))
    throw sdk::invalid(std::string("MockAcc: ") + what +
                       " is not in MockAcc device memory (device " + std::to_string(t.device) +
                       ")");
}

// --- support --------------------------------------------------------------

const ref::KernelRegistry& kernels() {
  static const ref::KernelRegistry r = [] {
    ref::KernelRegistry all, mine;
    ref::register_nn_kernels(all);
    ref::register_elementwise_kernels(all);
    for (const char* op : {"Conv", "Relu", "Add", "MatMul", "Gemm"}) mine.add(op, *all.find(op));
    return mine;
  }();
  return r;
}

// Builds a kernel, reading constant inputs (weights) from the NamedDataMap and
// "uploading" them into device memory.
struct PreparedNode {
  std::unique_ptr<ref::Kernel> kernel;
  std::vector<void*> device_constants;  // owned, per input (nullptr if not constant)
  std::vector<int32_t> inputs, outputs;
  ~PreparedNode() {
    for (void* p : device_constants) device_free(p);
  }
};

std::unique_ptr<PreparedNode> prepare(const sdk::Host& host, const bp_graph_view_t& view,
                                      size_t index) {
  const bp_node_t& node = view.nodes[index];
  sdk::NodeRef ref_node(&view, index);
  if (!(ref_node.domain().empty() || ref_node.domain() == "ai.onnx"))
    throw sdk::unsupported("MockAcc runs only the default ONNX domain");
  const ref::KernelFactory* factory = kernels().find(std::string(ref_node.op_type()));
  if (factory == nullptr)
    throw sdk::unsupported("MockAcc runs only Conv, Relu, Add, MatMul and Gemm");
  auto out = std::make_unique<PreparedNode>();
  ref::NodeInfo info{ref_node, {}, {}, {}, {}, {}};
  for (size_t i = 0; i < node.num_inputs; ++i) {
    int32_t id = node.inputs[i];
    out->inputs.push_back(id);
    if (id < 0) {
      info.in_dtypes.push_back(BP_DTYPE_UNDEFINED);
      info.in_shapes.emplace_back();
      info.in_constants.push_back(nullptr);
      out->device_constants.push_back(nullptr);
      continue;
    }
    const bp_value_t& v = view.values[id];
    if (v.dtype != BP_DTYPE_FLOAT32) throw sdk::unsupported("MockAcc runs float32 only");
    info.in_dtypes.push_back(v.dtype);
    info.in_shapes.push_back(sdk::shape_of(v));
    if ((v.flags & BP_VALUE_CONSTANT) != 0) {
      sdk::Weight w = host.weight(view.weights, v.data_key);
      void* d = device_alloc(w.size());
      std::memcpy(d, w.data(), w.size());
      out->device_constants.push_back(d);
      info.in_constants.push_back(d);
    } else {
      out->device_constants.push_back(nullptr);
      info.in_constants.push_back(nullptr);
    }
  }
  for (size_t i = 0; i < node.num_outputs; ++i) {
    int32_t id = node.outputs[i];
    out->outputs.push_back(id);
    info.out_dtypes.push_back(id >= 0 ? view.values[id].dtype : BP_DTYPE_UNDEFINED);
    info.out_shapes.push_back(id >= 0 ? sdk::shape_of(view.values[id]) : ref::Dims{});
  }
  out->kernel = (*factory)(info);
  return out;
}

// --- symbolic mode ------------------------------------------------------------

class Compiled;

class Context : public sdk::ExecContext {
 public:
  explicit Context(const Compiled& c);
  ~Context() override {
    for (void* p : intermediates_) device_free(p);
    device_free(scratch_);
  }
  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override;

 private:
  const Compiled& c_;
  std::vector<void*> values_;         // per view value: where it lives now
  std::vector<void*> intermediates_;  // owned device buffers
  void* scratch_ = nullptr;
  std::vector<const void*> in_;
  std::vector<void*> out_;
};

class Compiled : public sdk::CompiledPartition {
 public:
  Compiled(const sdk::Host& host, const bp_graph_view_t& view) : view_values_(view.num_values) {
    for (size_t i = 0; i < view.num_values; ++i) {
      view_values_[i] = view.values[i];
      flags_.push_back(view.values[i].flags);
      bytes_.push_back(sdk::byte_size(view.values[i]));
    }
    inputs_.assign(view.inputs, view.inputs + view.num_inputs);
    outputs_.assign(view.outputs, view.outputs + view.num_outputs);
    for (size_t n = 0; n < view.num_nodes; ++n) {
      nodes_.push_back(prepare(host, view, n));
      scratch_ = std::max(scratch_, nodes_.back()->kernel->scratch_bytes());
      op_types_.push_back(view.nodes[n].op_type);
      broadcast_add_.push_back(is_broadcast_add(view, view.nodes[n]));
    }
#ifdef MOCKACC_WRONG_FUSION
    plant_wrong_fusion(view);
#endif
  }
  ~Compiled() override {
    for (void* p : fused_constants_) device_free(p);
  }
  std::unique_ptr<sdk::ExecContext> create_context() override {
    return std::make_unique<Context>(*this);
  }

  std::vector<bp_value_t> view_values_;
  std::vector<uint32_t> flags_;
  std::vector<size_t> bytes_;
  std::vector<int32_t> inputs_, outputs_;
  std::vector<std::unique_ptr<PreparedNode>> nodes_;
  std::vector<std::string> op_types_;
  std::vector<bool> broadcast_add_;  // per node: an Add whose inputs' shapes differ
  size_t scratch_ = 0;
  // MockFuse, per node: the constant input an Add fused after a Conv reads
  // instead of its own (owned device memory; null when not fused), and which
  // input that is.
  std::vector<void*> fused_constants_;
  std::vector<size_t> fused_input_;

 private:
#ifdef MOCKACC_WRONG_FUSION
  // The seeded bug: an Add of a float constant whose other input is a Conv's
  // output that nothing else reads (and the view does not return) is fused
  // with that Conv, and the fused kernel reads the constant back to front.
  void plant_wrong_fusion(const bp_graph_view_t& view) {
    fused_constants_.assign(view.num_nodes, nullptr);
    fused_input_.assign(view.num_nodes, 0);
    std::vector<int> producer(view.num_values, -1), readers(view.num_values, 0);
    for (size_t n = 0; n < view.num_nodes; ++n) {
      for (size_t i = 0; i < view.nodes[n].num_outputs; ++i)
        if (view.nodes[n].outputs[i] >= 0) producer[view.nodes[n].outputs[i]] = static_cast<int>(n);
      for (size_t i = 0; i < view.nodes[n].num_inputs; ++i)
        if (view.nodes[n].inputs[i] >= 0) ++readers[view.nodes[n].inputs[i]];
    }
    for (size_t n = 0; n < view.num_nodes; ++n) {
      const bp_node_t& node = view.nodes[n];
      if (std::strcmp(node.op_type, "Add") != 0 || node.num_inputs != 2) continue;
      for (size_t k = 0; k < 2; ++k) {
        const int32_t c = node.inputs[k], x = node.inputs[1 - k];
        if (c < 0 || x < 0 || (view.values[c].flags & BP_VALUE_CONSTANT) == 0) continue;
        if (producer[x] < 0 || std::strcmp(view.nodes[producer[x]].op_type, "Conv") != 0 ||
            readers[x] != 1 || (view.values[x].flags & BP_VALUE_VIEW_OUTPUT) != 0)
          continue;
        const size_t bytes = bytes_[c];
        const float* right = static_cast<const float*>(nodes_[n]->device_constants[k]);
        float* reversed = static_cast<float*>(device_alloc(bytes));
        const size_t count = bytes / sizeof(float);
        for (size_t e = 0; e < count; ++e) reversed[e] = right[count - 1 - e];
        fused_constants_[n] = reversed;
        fused_input_[n] = k;
        break;
      }
    }
  }
#endif

  static bool is_broadcast_add(const bp_graph_view_t& view, const bp_node_t& node) {
    if (std::strcmp(node.op_type, "Add") != 0 || node.num_inputs != 2) return false;
    const bp_value_t& a = view.values[node.inputs[0]];
    const bp_value_t& b = view.values[node.inputs[1]];
    return a.rank != b.rank || !std::equal(a.shape, a.shape + a.rank, b.shape);
  }
};

Context::Context(const Compiled& c) : c_(c), values_(c.flags_.size(), nullptr) {
  std::set<int32_t> edge(c.inputs_.begin(), c.inputs_.end());
  edge.insert(c.outputs_.begin(), c.outputs_.end());
  for (const auto& node : c.nodes_) {
    for (size_t i = 0; i < node->inputs.size(); ++i)
      if (node->device_constants[i] != nullptr)
        values_[node->inputs[i]] = node->device_constants[i];
    for (int32_t o : node->outputs)
      if (o >= 0 && !edge.count(o) && values_[o] == nullptr) {
        values_[o] = device_alloc(c.bytes_[o]);
        intermediates_.push_back(values_[o]);
      }
  }
  scratch_ = device_alloc(std::max<size_t>(c.scratch_, 64));
}

void Context::execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
                      const bp_tensor_t* outputs) {
  if (num_inputs != c_.inputs_.size() || num_outputs != c_.outputs_.size())
    throw sdk::invalid("MockAcc: wrong number of tensors");
  for (size_t k = 0; k < num_inputs; ++k) {
    check_device(inputs[k], "an input");
    values_[c_.inputs_[k]] = inputs[k].data;
  }
  for (size_t k = 0; k < num_outputs; ++k) {
    check_device(outputs[k], "an output");
    values_[c_.outputs_[k]] = outputs[k].data;
  }
  for (size_t n = 0; n < c_.nodes_.size(); ++n) {
    const PreparedNode& node = *c_.nodes_[n];
    in_.assign(node.inputs.size(), nullptr);
    out_.assign(node.outputs.size(), nullptr);
    for (size_t i = 0; i < node.inputs.size(); ++i)
      in_[i] = node.inputs[i] >= 0 ? values_[node.inputs[i]] : nullptr;
    for (size_t i = 0; i < node.outputs.size(); ++i)
      out_[i] = node.outputs[i] >= 0 ? values_[node.outputs[i]] : nullptr;
    if (!c_.fused_constants_.empty() && c_.fused_constants_[n] != nullptr)
      in_[c_.fused_input_[n]] = c_.fused_constants_[n];
    node.kernel->run(in_.data(), out_.data(), scratch_);
#ifdef MOCKACC_WRONG_BROADCAST_ADD
    // The seeded bug: a broadcasting Add is off by 0.5 in its first element.
    if (c_.broadcast_add_[n]) static_cast<float*>(out_[0])[0] += 0.5f;
#endif
    count("node:" + c_.op_types_[n]);
    count("nodes");
  }
  count("executions");
}

// --- the backend -----------------------------------------------------------------

class MockAcc : public sdk::Backend {
 public:
  static constexpr sdk::BackendIdentity kIdentity{MOCK_ID, "Backplane"};

  explicit MockAcc(const bp_host_api_t* host) : sdk::Backend(host) { count("instances"); }

  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.description =
        "test accelerator: own device memory, Conv/Relu/Add/MatMul/Gemm, counts what it runs";
    i.device_count = 1;
    i.flags = BP_BACKEND_FLAG_DEVICE_MEMORY;
#ifdef MOCKACC_IMPERATIVE
    i.flags |= BP_BACKEND_FLAG_SINGLE_OP;
#else
    i.flags |= BP_BACKEND_FLAG_COMPILE;
#endif
    return i;
  }

  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    Serialised one_at_a_time;
    for (size_t n = 0; n < view.num_nodes; ++n) {
      try {
        (void)prepare(host(), view, n);
        report.supported(n);
      } catch (const sdk::Error& e) {
        report.rejected(n, e.what());
      }
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    Serialised one_at_a_time;
    count("compiles");
    return std::make_unique<Compiled>(host(), view);
  }

  void execute_node(const bp_graph_view_t& view, size_t index, size_t num_inputs,
                    const bp_tensor_t* inputs, size_t num_outputs,
                    const bp_tensor_t* outputs) override {
    std::unique_ptr<PreparedNode> node = prepare(host(), view, index);
    std::vector<const void*> in(num_inputs);
    std::vector<void*> out(num_outputs);
    for (size_t i = 0; i < num_inputs; ++i) {
      check_device(inputs[i], "an input");
      in[i] = node->device_constants[i] != nullptr ? node->device_constants[i] : inputs[i].data;
    }
    for (size_t i = 0; i < num_outputs; ++i) {
      check_device(outputs[i], "an output");
      out[i] = outputs[i].data;
    }
    void* scratch = device_alloc(std::max<size_t>(node->kernel->scratch_bytes(), 64));
    node->kernel->run(in.data(), out.data(), scratch);
    device_free(scratch);
    count("node:" + std::string(view.nodes[index].op_type));
    count("nodes");
  }

  void* memory_alloc(uint32_t device, size_t size, size_t) override {
    Serialised one_at_a_time;
    if (device != 0) throw sdk::invalid("MockAcc has one device");
    count("allocs");
    return device_alloc(size);
  }
  void memory_free(uint32_t, void* ptr) override {
    Serialised one_at_a_time;
    device_free(ptr);
  }
  void copy_to_device(uint32_t, void* dst, const void* src, size_t size) override {
    Serialised one_at_a_time;
    if (!is_device(dst, size))
      throw sdk::invalid("copy_to_device: destination is not device memory");
    std::memcpy(dst, src, size);
    count("copies_to_device");
  }
  void copy_from_device(uint32_t, void* dst, const void* src, size_t size) override {
    Serialised one_at_a_time;
    if (!is_device(src, size)) throw sdk::invalid("copy_from_device: source is not device memory");
    std::memcpy(dst, src, size);
    count("copies_from_device");
  }
  void memory_acquire() override {
    Serialised one_at_a_time;
    count("acquire");
  }
  void memory_release() override {
    Serialised one_at_a_time;
    count("release");
  }
  void before_load_network(uint64_t) override {
    Serialised one_at_a_time;
    count("before_load");
  }
  void after_unload_network(uint64_t) override {
    Serialised one_at_a_time;
    count("after_unload");
  }
};

const bp_backend_api_t* table() {
  static const bp_backend_api_t t = [] {
    bp_backend_api_t copy = *sdk::backend_table<MockAcc>();
#ifdef MOCKACC_IMPERATIVE
    // Imperative only: no symbolic slots at all.
    copy.compile = nullptr;
    copy.compiled_destroy = nullptr;
    copy.context_create = nullptr;
    copy.context_destroy = nullptr;
    copy.execute = nullptr;
#endif
    return copy;
  }();
  return &t;
}

}  // namespace mockacc

BP_DEFINE_BACKEND_ENTRY_POINTS_FOR(mockacc::MockAcc::kIdentity, mockacc::table)

// Test hook: the value of a counter ("nodes", "node:Conv", "copies_to_device",
// "executions", "instances", ...), 0 if never counted.
extern "C" BP_EXPORT uint64_t MockAcc_Counter(const char* key) {
  std::lock_guard<std::mutex> lock(mockacc::g_counter_mutex);
  auto it = mockacc::g_counters.find(key);
  return it == mockacc::g_counters.end() ? 0 : it->second;
}
