// The ABI promises a backend that the host serialises calls on one instance
// (all but execute and execute_node). A backend that notices two of its
// calls overlapping, loaded from 8 threads at once on one registry, proves
// LoadedBackend::call keeps that promise; and the default preference orders
// backends by score, CpuRef last.
#include "registry/registry.hpp"
#include "session/compiled_model.hpp"

#include <backplane/backend_sdk.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace backplane {
namespace {

std::atomic<int> g_inside{0};
std::atomic<int> g_overlaps{0};
std::atomic<int> g_calls{0};

// Counts how many calls are inside it at once, and lingers in each so that
// unserialised callers would overlap.
struct InsideCall {
  InsideCall() {
    if (g_inside.fetch_add(1) > 0) ++g_overlaps;
    ++g_calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~InsideCall() { --g_inside; }
};

class NotReentrant : public sdk::Backend {
 public:
  using sdk::Backend::Backend;
  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.vendor = "Test";
    i.description = "Relu, and notices overlapping calls";
    i.flags = BP_BACKEND_FLAG_COMPILE;
    return i;
  }
  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    InsideCall inside;
    for (size_t n = 0; n < view.num_nodes; ++n) report.supported(n);
  }
  struct Ctx : sdk::ExecContext {
    size_t n = 0;
    void execute(size_t, const bp_tensor_t* in, size_t, const bp_tensor_t* out) override {
      const float* x = static_cast<const float*>(in[0].data);
      float* y = static_cast<float*>(out[0].data);
      for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;
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
    InsideCall inside;
    auto c = std::make_unique<Compiled>();
    const bp_value_t& v = view.values[view.inputs[0]];
    c->n = 1;
    for (size_t i = 0; i < v.rank; ++i) c->n *= static_cast<size_t>(v.shape[i]);
    return c;
  }
  void before_load_network(uint64_t) override { InsideCall inside; }
  void after_unload_network(uint64_t) override { InsideCall inside; }
};

// x -> Relu -> y, float32[1, 8].
std::unique_ptr<ir::Graph> relu_graph() {
  auto g = std::make_unique<ir::Graph>();
  g->name = "relu";
  g->source = "relu.onnx";
  g->opsets[""] = 13;
  ir::Value x, y;
  x.name = "x";
  y.name = "y";
  x.dtype = y.dtype = DType::kFloat32;
  x.shape = y.shape = {1, 8};
  x.has_shape = y.has_shape = true;
  int xi = g->add_value(x), yi = g->add_value(y);
  ir::Node relu;
  relu.name = "relu";
  relu.op_type = "Relu";
  relu.inputs = {xi};
  relu.outputs = {yi};
  g->nodes.push_back(relu);
  g->inputs = {xi};
  g->outputs = {yi};
  return g;
}

TEST(BackendSerialisation, CallsOnOneInstanceNeverOverlap) {
  BackendRegistry registry;
  auto backend =
      LoadedBackend::create("NotReentrant", sdk::backend_table<NotReentrant>(), "test", nullptr);
  ASSERT_TRUE(backend.ok()) << backend.status().message();
  ASSERT_TRUE(registry.add(*backend).ok());
  g_overlaps = 0;
  g_calls = 0;
  std::atomic<int> runs{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 4; ++i) {
        auto model =
            CompiledModel::create(relu_graph(), registry, PlacementOptions{}, 100 * t + i + 1, 0);
        ASSERT_TRUE(model.ok()) << model.status().message();
        auto session = (*model)->create_session();
        ASSERT_TRUE(session.ok()) << session.status().message();
        std::vector<float> x = {-1, 2, -3, 4, -5, 6, -7, 8};
        ASSERT_TRUE((*session)->set_input(0, Tensor::view(DType::kFloat32, {1, 8}, x.data())).ok());
        ASSERT_TRUE((*session)->run().ok());
        EXPECT_EQ((*session)->output(0).data_as<float>()[1], 2.0f);
        EXPECT_EQ((*session)->output(0).data_as<float>()[0], 0.0f);
        ++runs;
      }
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(runs.load(), 32);
  EXPECT_GE(g_calls.load(), 32 * 4);  // query, compile and two hooks per model
  EXPECT_EQ(g_overlaps.load(), 0) << "calls on one backend instance overlapped";
}

TEST(BackendRegistry, DefaultPreferenceIsByScoreWithCpuRefLast) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.register_static(RuntimeOptions{}).ok());
  const bp_backend_api_t* table = sdk::backend_table<NotReentrant>();
  for (auto [id, score] :
       {std::pair<const char*, uint32_t>{"Low", 1}, {"High", 7}, {"Mid", 3}, {"AlsoLow", 1}}) {
    auto b = LoadedBackend::create(id, table, "test", nullptr, score);
    ASSERT_TRUE(b.ok()) << b.status().message();
    ASSERT_TRUE(registry.add(*b).ok());
  }
  EXPECT_EQ(registry.default_preference(),
            (std::vector<std::string>{"High", "Mid", "Low", "AlsoLow", "CpuRef"}));
}

}  // namespace
}  // namespace backplane
