// MyAcc: an out-of-tree Backplane backend written with the C++ SDK.
//
// It runs two operators for real, on float32 tensors: Relu, and Add of two
// tensors of the same shape (either may be a constant weight). Everything else
// it rejects with a reason, and the runtime gives those nodes to the next
// backend in the preference list (CpuRef last).
//
// Built as Example_MyAcc_backend.so: vendor "Example", id "MyAcc". The file
// name and GetBackendId() must agree on the id.
//
// What to keep when you copy this file:
//   1. a class deriving from backplane::sdk::Backend (info, query_support,
//      compile), a CompiledPartition and an ExecContext;
//   2. its kIdentity: id, vendor (and optionally a score function and the API
//      version), declared once;
//   3. BP_DEFINE_BACKEND_ENTRY_POINTS at the end, which exports GetBackendId,
//      GetVersion, GetBackendScore and BackendFactory with C linkage.
// The SDK turns any exception you throw into a status for the runtime
// (sdk::Error keeps its code), so nothing unwinds across the C boundary.
#include <backplane/backend_sdk.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace example {
namespace sdk = backplane::sdk;

// Why this backend cannot run node `n` of `view`; "" if it can.
std::string why_not(const bp_graph_view_t& view, size_t n) {
  sdk::NodeRef node(&view, n);
  if (!node.domain().empty() && node.domain() != "ai.onnx") return "custom domain";
  const bool relu = node.op_type() == "Relu";
  const bool add = node.op_type() == "Add";
  if (!relu && !add) return "operator " + std::string(node.op_type()) + " is not implemented";
  if (node.num_inputs() != (add ? 2u : 1u) || node.num_outputs() != 1) return "unexpected arity";
  for (size_t i = 0; i < node.num_inputs(); ++i) {
    if (!node.has_input(i)) return "missing input";
    if (node.input(i).dtype != BP_DTYPE_FLOAT32) return "only float32 is supported";
  }
  if (add && sdk::shape_of(node.input(0)) != sdk::shape_of(node.input(1)))
    return "Add with broadcasting is not supported";
  return "";
}

size_t numel(const bp_value_t& v) { return static_cast<size_t>(sdk::element_count(v)); }

// Where a value's floats are during one execute().
struct Slot {
  enum Kind { kInput, kOutput, kConstant, kScratch } kind = kScratch;
  size_t index = 0;  // kInput/kOutput: position in execute()'s arrays; kScratch: buffer number
  const float* constant = nullptr;
};

struct Step {
  bool is_add;
  int32_t a, b, y;  // value ids in the view; b = -1 for Relu
  size_t n;         // elements
};

class Compiled;

class Context : public sdk::ExecContext {
 public:
  explicit Context(const Compiled& compiled);
  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override;

 private:
  const Compiled& compiled_;
  std::vector<std::vector<float>>
      scratch_;  // intermediate values: per context, so contexts run in parallel
};

class Compiled : public sdk::CompiledPartition {
 public:
  Compiled(const sdk::Host& host, const bp_graph_view_t& view) {
    // The view lives only for the duration of compile(): copy what execute needs.
    slots_.resize(view.num_values);
    std::vector<bool> placed(view.num_values, false);
    for (size_t k = 0; k < view.num_inputs; ++k) {
      slots_[view.inputs[k]] = {Slot::kInput, k, nullptr};
      placed[view.inputs[k]] = true;
    }
    for (size_t k = 0; k < view.num_outputs; ++k) {
      slots_[view.outputs[k]] = {Slot::kOutput, k, nullptr};
      placed[view.outputs[k]] = true;
    }
    for (size_t v = 0; v < view.num_values; ++v) {
      const bp_value_t& value = view.values[v];
      if (placed[v]) continue;
      if ((value.flags & BP_VALUE_CONSTANT) != 0) {
        // Weights are never copied into the view: ask the NamedDataMap. The
        // buffer stays valid while we hold it (sdk::Weight frees it).
        weights_.push_back(host.weight(view.weights, value.data_key));
        if (weights_.back().size() != sdk::byte_size(value))
          throw sdk::Error(BP_STATUS_CORRUPT_DATA,
                           "constant '" + std::string(value.name) + "' has the wrong size");
        slots_[v] = {Slot::kConstant, 0, weights_.back().as<float>()};
      } else {
        slots_[v] = {Slot::kScratch, scratch_sizes_.size(), nullptr};
        scratch_sizes_.push_back(numel(value));
      }
    }
    for (size_t n = 0; n < view.num_nodes; ++n) {
      const bp_node_t& node = view.nodes[n];
      bool is_add = std::string_view(node.op_type) == "Add";
      steps_.push_back({is_add, node.inputs[0], is_add ? node.inputs[1] : -1, node.outputs[0],
                        numel(view.values[node.outputs[0]])});
    }
  }

  std::unique_ptr<sdk::ExecContext> create_context() override {
    return std::make_unique<Context>(*this);
  }

  std::vector<Slot> slots_;
  std::vector<size_t> scratch_sizes_;
  std::vector<Step> steps_;
  std::vector<sdk::Weight> weights_;
};

Context::Context(const Compiled& compiled) : compiled_(compiled) {
  for (size_t n : compiled.scratch_sizes_) scratch_.emplace_back(n);
}

void Context::execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
                      const bp_tensor_t* outputs) {
  auto at = [&](int32_t id) -> float* {
    const Slot& s = compiled_.slots_[id];
    switch (s.kind) {
      case Slot::kInput:
        if (s.index >= num_inputs) throw sdk::invalid("too few inputs");
        return static_cast<float*>(inputs[s.index].data);  // read only
      case Slot::kOutput:
        if (s.index >= num_outputs) throw sdk::invalid("too few outputs");
        return static_cast<float*>(outputs[s.index].data);
      case Slot::kConstant:
        return const_cast<float*>(s.constant);  // read only
      case Slot::kScratch:
        return scratch_[s.index].data();
    }
    return nullptr;
  };
  for (const Step& step : compiled_.steps_) {
    const float* a = at(step.a);
    float* y = at(step.y);
    if (step.is_add) {
      const float* b = at(step.b);
      for (size_t i = 0; i < step.n; ++i) y[i] = a[i] + b[i];
    } else {
      for (size_t i = 0; i < step.n; ++i) y[i] = a[i] > 0.0f ? a[i] : 0.0f;
    }
  }
}

class MyAccBackend : public sdk::Backend {
 public:
  // Who this backend is, in one place: the id (GetBackendId; the file name
  // must agree) and the vendor (get_info). A score function and an older API
  // version can be given here too.
  static constexpr sdk::BackendIdentity kIdentity{"MyAcc", "Example"};

  explicit MyAccBackend(const bp_host_api_t* host) : sdk::Backend(host) {
    // One instance per Runtime. Refuse here (throw) if the device is missing.
    this->host().log(BP_LOG_DEBUG, kIdentity.id, "instance created");
  }

  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.description = "example out-of-tree backend: Relu, Add (float32)";
    i.flags = BP_BACKEND_FLAG_COMPILE;
    return i;
  }

  // configure: the SDK's default accepts "num_threads" (these kernels are
  // single-threaded, so nothing reads it) and rejects unknown keys.

  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      std::string reason = why_not(view, n);
      if (reason.empty()) report.supported(n);
      else report.rejected(n, reason);
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    // The runtime only gives us nodes we claimed, but check anyway: a clear
    // error beats a wrong result.
    for (size_t n = 0; n < view.num_nodes; ++n)
      if (std::string reason = why_not(view, n); !reason.empty())
        throw sdk::unsupported(std::string(view.nodes[n].name) + ": " + reason);
    return std::make_unique<Compiled>(host(), view);
  }
};

}  // namespace example

// The entry points (C linkage, exported), from MyAccBackend::kIdentity:
// GetBackendId() returns "MyAcc", GetVersion() the backend API version of the
// headers compiled against, GetBackendScore() 1 (no score function), and
// BackendFactory() the function table wrapping example::MyAccBackend.
BP_DEFINE_BACKEND_ENTRY_POINTS(example::MyAccBackend)
