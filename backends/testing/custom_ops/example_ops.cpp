// ExampleOps: a test backend that defines an operator of its own domain (API
// 1.3) and runs only that: com.example.Swish2, y = x * sigmoid(beta * x) on
// float32, `beta` an optional float attribute (1 when absent).
//
// It is what docs/writing-a-backend.md ("Your own operators") walks through:
// the operator is declared in define_ops() in a few lines, claimed in
// query_support like any op, and compiled and executed as a partition. Built
// as a loadable module only (tests/dynamic/test_custom_ops.cpp loads it).
//
// EXAMPLE_OPS_REDEFINE_ONNX builds a variant that also claims to define
// ONNX's Relu, which the runtime must refuse to load.
#include <backplane/backend_sdk.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace example_ops {

namespace sdk = backplane::sdk;

constexpr const char* kDomain = "com.example";

// Output 0 is input 0's shape, float32 only.
void infer_swish2(sdk::InferContext& c) {
  if (c.dtype(0) != BP_DTYPE_FLOAT32)
    throw sdk::invalid(std::string("Swish2 takes float32, not ") + sdk::dtype_name(c.dtype(0)));
  c.set_output(0, BP_DTYPE_FLOAT32, c.shape(0));
}

bool is_swish2(const sdk::NodeRef& n) { return n.domain() == kDomain && n.op_type() == "Swish2"; }

// One Swish2 node of a partition: where it reads and writes (view values).
struct Step {
  int32_t in, out;
  float beta;
  int64_t count;
};

class Compiled;

class Context : public sdk::ExecContext {
 public:
  explicit Context(const Compiled& c);
  void execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
               const bp_tensor_t* outputs) override;

 private:
  const Compiled& compiled_;
  std::vector<std::vector<float>> scratch_;  // per view value; intermediates only
};

class Compiled : public sdk::CompiledPartition {
 public:
  explicit Compiled(const bp_graph_view_t& view) {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      sdk::NodeRef node(&view, n);
      if (!is_swish2(node)) throw sdk::unsupported("ExampleOps runs only com.example.Swish2");
      const bp_value_t& x = node.input(0);
      steps_.push_back(Step{node.raw().inputs[0], node.raw().outputs[0],
                            node.attr_float("beta", 1.0f), sdk::element_count(sdk::shape_of(x))});
    }
    num_values_ = view.num_values;
    inputs_.assign(view.inputs, view.inputs + view.num_inputs);
    outputs_.assign(view.outputs, view.outputs + view.num_outputs);
    sizes_.resize(view.num_values);
    for (size_t v = 0; v < view.num_values; ++v)
      sizes_[v] = sdk::element_count(sdk::shape_of(view.values[v]));
  }
  std::unique_ptr<sdk::ExecContext> create_context() override {
    return std::make_unique<Context>(*this);
  }

  std::vector<Step> steps_;
  size_t num_values_ = 0;
  std::vector<int32_t> inputs_, outputs_;
  std::vector<int64_t> sizes_;
};

Context::Context(const Compiled& c) : compiled_(c), scratch_(c.num_values_) {
  for (const Step& s : c.steps_) scratch_[s.out].resize(static_cast<size_t>(s.count));
}

void Context::execute(size_t num_inputs, const bp_tensor_t* inputs, size_t num_outputs,
                      const bp_tensor_t* outputs) {
  std::vector<float*> at(compiled_.num_values_, nullptr);
  for (size_t v = 0; v < at.size(); ++v)
    if (!scratch_[v].empty()) at[v] = scratch_[v].data();
  for (size_t i = 0; i < num_inputs; ++i)
    at[compiled_.inputs_[i]] = static_cast<float*>(inputs[i].data);
  for (size_t i = 0; i < num_outputs; ++i)
    at[compiled_.outputs_[i]] = static_cast<float*>(outputs[i].data);
  for (const Step& s : compiled_.steps_) {
    const float* x = at[s.in];
    float* y = at[s.out];
    if (x == nullptr || y == nullptr) throw sdk::invalid("Swish2: a tensor is missing");
    // On the host's thread pool (API 1.5), in parts of 16k elements at least.
    sdk::parallel_for(static_cast<size_t>(s.count), size_t{1} << 14, [&](size_t b, size_t e) {
      for (size_t k = b; k < e; ++k) y[k] = x[k] / (1.0f + std::exp(-s.beta * x[k]));
    });
  }
}

class ExampleOps : public sdk::Backend {
 public:
  static constexpr sdk::BackendIdentity kIdentity{"ExampleOps", "Backplane tests"};
  explicit ExampleOps(const bp_host_api_t* host) : sdk::Backend(host) {}

  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.description = "defines and runs com.example.Swish2 (a test of backend-defined operators)";
    i.flags = BP_BACKEND_FLAG_COMPILE;
    return i;
  }

  std::vector<sdk::OpDef> define_ops() override {
    std::vector<sdk::OpDef> ops;
    ops.push_back(sdk::OpDef(kDomain, "Swish2")
                      .attr("beta", BP_ATTR_FLOAT)
                      .doc("x * sigmoid(beta * x), float32")
                      .infer(infer_swish2));
#ifdef EXAMPLE_OPS_REDEFINE_ONNX
    ops.push_back(sdk::OpDef("", "Relu").infer(sdk::infer_same_as_input0));
#endif
    return ops;
  }

  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      sdk::NodeRef node(&view, n);
      if (is_swish2(node) && node.input(0).dtype == BP_DTYPE_FLOAT32) report.supported(n);
      else report.rejected(n, "ExampleOps runs only com.example.Swish2 on float32");
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    return std::make_unique<Compiled>(view);
  }
};

}  // namespace example_ops

BP_DEFINE_BACKEND_ENTRY_POINTS(example_ops::ExampleOps)
