// Registry, partitioner and executor with hand-built graphs and test backends
// written with backend_sdk.hpp, next to the static CpuRef.
#include "core/tensor_data_map.hpp"
#include "partition/partitioner.hpp"
#include "registry/registry.hpp"
#include "session/compiled_model.hpp"

#include <backplane/backend_sdk.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>

namespace backplane {
namespace {

// A backend that runs only Relu, in its own code, and counts executions.
std::atomic<int> g_relu_executions{0};
std::atomic<int> g_hook_calls{0};

class ReluOnly : public sdk::Backend {
 public:
  using sdk::Backend::Backend;
  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.vendor = "Test";
    i.description = "runs Relu only";
    i.flags = BP_BACKEND_FLAG_COMPILE;
    return i;
  }
  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    for (size_t n = 0; n < view.num_nodes; ++n) {
      if (std::string_view(view.nodes[n].op_type) == "Relu") report.supported(n);
      else report.rejected(n, "only Relu");
    }
  }
  struct Ctx : sdk::ExecContext {
    size_t n = 0;
    void execute(size_t, const bp_tensor_t* in, size_t, const bp_tensor_t* out) override {
      const float* x = static_cast<const float*>(in[0].data);
      float* y = static_cast<float*>(out[0].data);
      for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;
      ++g_relu_executions;
    }
  };
  struct Compiled : sdk::CompiledPartition {
    size_t n = 0;
    std::unique_ptr<sdk::ExecContext> create_context() override {
      auto c = std::make_unique<Ctx>();
      c->n = n;
      return c;
    }
  };
  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    if (view.num_nodes != 1) throw sdk::unsupported("one node per partition in this test backend");
    auto c = std::make_unique<Compiled>();
    const bp_value_t& v = view.values[view.inputs[0]];
    c->n = 1;
    for (size_t i = 0; i < v.rank; ++i) c->n *= static_cast<size_t>(v.shape[i]);
    return c;
  }
  void before_load_network(uint64_t) override { ++g_hook_calls; }
  void after_unload_network(uint64_t) override { ++g_hook_calls; }
};

// A backend whose compile throws a plain C++ exception.
class Throwing : public ReluOnly {
 public:
  using ReluOnly::ReluOnly;
  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t&,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    throw std::runtime_error("boom in compile");
  }
};

int add_value(ir::Graph& g, const std::string& name, Shape shape) {
  ir::Value v;
  v.name = name;
  v.dtype = DType::kFloat32;
  v.shape = std::move(shape);
  v.has_shape = true;
  return g.add_value(v);
}

// x -> Relu(r1) -> a -> Abs(abs) -> b -> Relu(r2) -> y
std::unique_ptr<ir::Graph> chain_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->name = "chain";
  g->source = "chain.onnx";
  g->opsets[""] = 13;
  int x = add_value(*g, "x", {2, 3}), a = add_value(*g, "a", {2, 3}),
      b = add_value(*g, "b", {2, 3}), y = add_value(*g, "y", {2, 3});
  g->inputs = {x};
  g->outputs = {y};
  auto node = [](std::string name, std::string op, int in, int out) {
    ir::Node n;
    n.name = std::move(name);
    n.op_type = std::move(op);
    n.inputs = {in};
    n.outputs = {out};
    return n;
  };
  g->nodes.push_back(node("r1", "Relu", x, a));
  g->nodes.push_back(node("abs", "Abs", a, b));
  g->nodes.push_back(node("r2", "Relu", b, y));
  EXPECT_TRUE(g->topo_sort().ok());
  return g;
}

BackendRegistry registry_with(const bp_backend_api_t* table, const std::string& id) {
  BackendRegistry r;
  EXPECT_TRUE(r.register_static(RuntimeOptions{}).ok());
  auto b = LoadedBackend::create(id, table, "test", nullptr);
  EXPECT_TRUE(b.ok()) << b.status().message();
  EXPECT_TRUE(r.add(*b).ok());
  return r;
}

TEST(Registry, ValidatesTablesBeforeUse) {
  EXPECT_FALSE(validate_backend_table(nullptr).ok());
  bp_backend_api_t t = *sdk::backend_table<ReluOnly>();
  EXPECT_TRUE(validate_backend_table(&t).ok());
  bp_backend_api_t newer = t;
  newer.api_minor = BP_API_VERSION_MINOR + 1;
  Status s = validate_backend_table(&newer);
  EXPECT_EQ(s.code(), StatusCode::kVersionMismatch) << s.message();
  bp_backend_api_t other_major = t;
  other_major.api_major = BP_API_VERSION_MAJOR + 1;
  EXPECT_EQ(validate_backend_table(&other_major).code(), StatusCode::kVersionMismatch);
  bp_backend_api_t no_query = t;
  no_query.query_support = nullptr;
  s = validate_backend_table(&no_query);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("query_support"), std::string::npos);
  bp_backend_api_t tiny = t;
  tiny.struct_size = 8;
  EXPECT_FALSE(validate_backend_table(&tiny).ok());
}

TEST(Registry, DuplicateIdIsRefusedAndDefaultPreferencePutsCpuRefLast) {
  BackendRegistry r = registry_with(sdk::backend_table<ReluOnly>(), "TestRelu");
  auto again = LoadedBackend::create("TestRelu", sdk::backend_table<ReluOnly>(), "test", nullptr);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(r.add(*again).ok());
  std::vector<std::string> pref = r.default_preference();
  ASSERT_EQ(pref.size(), 2u);
  EXPECT_EQ(pref.back(), "CpuRef");
}

TEST(Executor, SplitsAcrossBackendsAndComputesTheSameAsCpuRef) {
  BackendRegistry r = registry_with(sdk::backend_table<ReluOnly>(), "TestRelu");
  ModelOptions options;
  options.backends = {"TestRelu", "CpuRef"};
  int hooks_before = g_hook_calls;
  {
    auto model = CompiledModel::create(chain_graph(), r, options, 1, 0);
    ASSERT_TRUE(model.ok()) << model.status().message();
    ASSERT_EQ((*model)->partitions().size(), 3u);
    EXPECT_EQ((*model)->partitions()[0].backend, "TestRelu");
    EXPECT_EQ((*model)->partitions()[1].backend, "CpuRef");
    EXPECT_EQ((*model)->partitions()[2].backend, "TestRelu");
    EXPECT_EQ(g_hook_calls, hooks_before + 1);  // before_load_network

    auto session = (*model)->create_session();
    ASSERT_TRUE(session.ok()) << session.status().message();
    Tensor x(DType::kFloat32, {2, 3});
    const float in[6] = {-1.5f, 2.0f, -0.0f, 3.25f, -4.0f, 0.5f};
    std::copy(in, in + 6, x.data_as<float>());
    ASSERT_TRUE((*session)->set_input("x", x).ok());
    int before = g_relu_executions;
    ASSERT_TRUE((*session)->run().ok());
    EXPECT_EQ(g_relu_executions, before + 2);
    const Tensor& y = (*session)->output(0);
    for (int i = 0; i < 6; ++i)
      EXPECT_FLOAT_EQ(y.data_as<float>()[i], std::fabs(std::max(in[i], 0.0f)));
  }
  EXPECT_EQ(g_hook_calls, hooks_before + 2);  // after_unload_network
}

TEST(Executor, MemoryPlanReusesBuffersWhoseLifetimesDoNotOverlap) {
  BackendRegistry r = registry_with(sdk::backend_table<ReluOnly>(), "TestRelu");
  ModelOptions options;
  options.backends = {"TestRelu", "CpuRef"};
  auto model = CompiledModel::create(chain_graph(), r, options, 1, 0);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // a (steps 0-1), b (steps 1-2), y (step 2 on, kept; x is the session's
  // input memory, not the arena's): a and b overlap, but y can take a's
  // bytes: 3 buffers in 2 x 64.
  const MemoryPlan& mem = (*model)->memory();
  EXPECT_EQ(mem.buffers.size(), 3u);
  EXPECT_EQ(mem.arena_size, 2 * 64u);
  EXPECT_TRUE((*model)->copies().empty());  // all host memory: no copies
}

TEST(Executor, RejectsWrongInputsClearly) {
  BackendRegistry r;
  ASSERT_TRUE(r.register_static(RuntimeOptions{}).ok());
  auto model = CompiledModel::create(chain_graph(), r, ModelOptions{}, 1, 0);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Status s = (*session)->run();
  EXPECT_NE(s.message().find("'x' was not set"), std::string::npos) << s.message();
  s = (*session)->set_input("nope", Tensor(DType::kFloat32, {2, 3}));
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("nope"), std::string::npos);
  s = (*session)->set_input("x", Tensor(DType::kFloat32, {3, 2}));
  EXPECT_NE(s.message().find("[2,3]"), std::string::npos) << s.message();
  s = (*session)->set_input("x", Tensor(DType::kInt64, {2, 3}));
  EXPECT_NE(s.message().find("float32"), std::string::npos) << s.message();
  EXPECT_FALSE((*session)->get_output("missing").ok());
}

TEST(Executor, ExceptionInBackendBecomesStatusNamingBackend) {
  BackendRegistry r = registry_with(sdk::backend_table<Throwing>(), "Thrower");
  ModelOptions options;
  options.backends = {"Thrower", "CpuRef"};
  auto model = CompiledModel::create(chain_graph(), r, options, 1, 0);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("boom in compile"), std::string::npos)
      << model.status().message();
  EXPECT_NE(model.status().message().find("Thrower"), std::string::npos);
}

TEST(Partitioner, OverridesUnknownBackendsAndMissingNodes) {
  BackendRegistry r = registry_with(sdk::backend_table<ReluOnly>(), "TestRelu");
  auto g = chain_graph();
  TensorDataMap weights(&g->constants);
  ModelOptions o;
  o.backends = {"NoSuchBackend"};
  auto p = make_plan(*g, r, o, weights);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("NoSuchBackend"), std::string::npos);

  o = ModelOptions{};
  o.backends = {"TestRelu", "CpuRef"};
  o.overrides["r1"] = "CpuRef";
  p = make_plan(*g, r, o, weights);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->placement[0].backend, "CpuRef");
  EXPECT_EQ(p->placement[0].why, "override");
  // r1 and abs now share CpuRef: two partitions.
  EXPECT_EQ(p->partitions.size(), 2u);

  o.overrides.clear();
  o.overrides["abs"] = "TestRelu";  // TestRelu rejects Abs
  p = make_plan(*g, r, o, weights);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("only Relu"), std::string::npos) << p.status().message();
  o.allow_fallback = true;
  p = make_plan(*g, r, o, weights);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->placement[1].backend, "CpuRef");

  o = ModelOptions{};
  o.overrides["no_such_node"] = "CpuRef";
  p = make_plan(*g, r, o, weights);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("no_such_node"), std::string::npos);
}

// A shape-polymorphic backend that runs Relu at any shape but one element:
// there its execute_shaped says kUnsupported, and a compile for that shape
// rejects the node. Counts what it did.
std::atomic<int> g_picky_refusals{0};
std::atomic<int> g_picky_runs{0};

class PickyPolymorphic : public ReluOnly {
 public:
  using ReluOnly::ReluOnly;
  bp_backend_info_t info() override {
    bp_backend_info_t i = ReluOnly::info();
    i.flags = BP_BACKEND_FLAG_COMPILE | BP_BACKEND_FLAG_SHAPE_POLYMORPHIC;
    return i;
  }
  struct ShapedCtx : sdk::ExecContext {
    void execute(size_t, const bp_tensor_t*, size_t, const bp_tensor_t*) override {
      throw sdk::Error(BP_STATUS_INTERNAL, "execute_shaped is the only entry");
    }
    void execute_shaped(const sdk::ExecuteArgs& args) override {
      const size_t n = args.input(0).size_bytes / sizeof(float);
      if (n == 1) {
        ++g_picky_refusals;
        throw sdk::unsupported("cannot run at these shapes (one element)");
      }
      const float* x = static_cast<const float*>(args.input(0).data);
      float* y = static_cast<float*>(args.output(0).data);
      for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;
      ++g_picky_runs;
    }
  };
  struct AnyShape : sdk::CompiledPartition {
    std::unique_ptr<sdk::ExecContext> create_context() override {
      return std::make_unique<ShapedCtx>();
    }
  };
  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t& options,
                                                  sdk::NodeReport& report) override {
    if (view.num_nodes != 1) throw sdk::unsupported("one node per partition in this test backend");
    if (sdk::shape_polymorphic(options)) return std::make_unique<AnyShape>();
    const bp_value_t& v = view.values[view.inputs[0]];
    int64_t n = 1;
    for (size_t i = 0; i < v.rank; ++i) n *= v.shape[i];
    if (n == 1) {
      report.rejected(0, "not at one element");
      return nullptr;
    }
    return std::make_unique<AnyShape>();
  }
};

// x[?,?] -> Relu -> y, every shape open.
std::unique_ptr<ir::Graph> open_relu_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->name = "open_relu";
  g->source = "open_relu.onnx";
  g->opsets[""] = 13;
  ir::Value x;
  x.name = "x";
  x.dtype = DType::kFloat32;
  x.shape = {-1, -1};
  x.dim_params = {"", ""};
  x.has_shape = true;
  const int xi = g->add_value(x);
  ir::Value y;
  y.name = "y";
  const int yi = g->add_value(y);
  g->inputs = {xi};
  g->outputs = {yi};
  ir::Node n;
  n.name = "relu";
  n.op_type = "Relu";
  n.inputs = {xi};
  n.outputs = {yi};
  g->nodes.push_back(n);
  EXPECT_TRUE(g->topo_sort().ok());
  return g;
}

TEST(Executor, PolymorphicPartitionThatCannotRunAtTheseShapesIsCompiledForThem) {
  BackendRegistry r = registry_with(sdk::backend_table<PickyPolymorphic>(), "Picky");
  CompiledModel::Options options;
  options.placement.backends = {"Picky", "CpuRef"};
  options.placement.allow_fallback = true;
  options.num_threads = 1;
  auto model = CompiledModel::create(open_relu_graph(), r, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  auto run = [&](Shape shape, std::vector<float> x) -> std::vector<float> {
    EXPECT_TRUE(s.set_input("x", Tensor::copy_of(DType::kFloat32, shape, x.data())).ok());
    Status st = s.run();
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) return {};
    const Tensor& y = s.output(0);
    return std::vector<float>(y.data_as<float>(), y.data_as<float>() + y.numel());
  };
  g_picky_refusals = 0;
  g_picky_runs = 0;
  EXPECT_EQ(run({2, 2}, {-1, 2, -3, 4}), (std::vector<float>{0, 2, 0, 4}));
  EXPECT_EQ(g_picky_runs.load(), 1);
  // One element: the polymorphic partition refuses, the node goes to CpuRef.
  EXPECT_EQ(run({1, 1}, {-5}), (std::vector<float>{0}));
  EXPECT_EQ(g_picky_refusals.load(), 1);
  EXPECT_EQ(run({1, 1}, {7}), (std::vector<float>{7}));
  EXPECT_EQ(g_picky_refusals.load(), 1);  // the rebuilt specialisation is kept
  // Other shapes still run on the polymorphic partition.
  EXPECT_EQ(run({1, 3}, {-1, 0, 1}), (std::vector<float>{0, 0, 1}));
  EXPECT_EQ(g_picky_runs.load(), 2);
  // A second session at the refused shapes uses the rebuilt specialisation.
  auto other = (*model)->create_session();
  ASSERT_TRUE(other.ok());
  float v = -2;
  ASSERT_TRUE((*other)->set_input("x", Tensor::copy_of(DType::kFloat32, {1, 1}, &v)).ok());
  ASSERT_TRUE((*other)->run().ok());
  EXPECT_EQ((*other)->output(0).data_as<float>()[0], 0.f);
  EXPECT_EQ(g_picky_refusals.load(), 1);
}

// A backend that compiles for concrete shapes only: every new signature is a
// specialisation of its own (no shape variants), at most max_specializations
// of them kept.
TEST(Executor, SpecialisationsCompiledPerShapeKeepTheirBound) {
  BackendRegistry r = registry_with(sdk::backend_table<ReluOnly>(), "TestRelu");
  CompiledModel::Options options;
  options.placement.backends = {"TestRelu"};
  options.num_threads = 1;
  options.max_specializations = 2;
  auto model = CompiledModel::create(open_relu_graph(), r, options);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  for (int64_t n : {2, 3, 4, 5, 2}) {
    std::vector<float> x(static_cast<size_t>(n), -1.f);
    x[0] = 3.f;
    ASSERT_TRUE(
        (*session)->set_input("x", Tensor::copy_of(DType::kFloat32, {1, n}, x.data())).ok());
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ((*session)->output(0).data_as<float>()[0], 3.f);
    EXPECT_EQ((*session)->output(0).data_as<float>()[n - 1], 0.f);
  }
  const SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_EQ(stats.builds, 5u);  // the last [1,2] was evicted by [1,4]
  EXPECT_EQ(stats.evictions, 3u);
  EXPECT_EQ(stats.cached, 2u);
  EXPECT_EQ(stats.variants, 0u);
}

}  // namespace
}  // namespace backplane
