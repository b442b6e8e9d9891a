// Heterogeneous execution: real models split between MockAcc (a test
// accelerator with its own device memory, loaded dynamically) and CpuRef.
//
// The expected plan is computed here independently of the partitioner, from
// the graph and MockAcc's op list: connected components of same-backend nodes
// are the partitions, and every (tensor, memory) pair a consumer needs beyond
// its producer's memory is one copy.
#include "ir/graph.hpp"
#include "onnx/importer.hpp"
#include "support/e2e_util.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>

#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <set>

namespace backplane {
namespace {

const std::string kModels = e2e::models_dir();
const std::string kAccelDir = BACKPLANE_TESTING_ACCEL_DIR;

std::shared_ptr<Runtime> runtime_with_mockacc() { return e2e::make_runtime(kAccelDir); }

// `path` loaded on `rt` with backend preference `backends`.
auto load_on(Runtime& rt, const std::string& path, std::vector<std::string> backends) {
  ModelOptions o;
  o.backends = std::move(backends);
  return rt.load_model(path, o);
}

uint64_t counter(const std::string& backend, const std::string& key) {
  std::string path = kAccelDir + "/Backplane_" + backend + "_backend.so";
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return 0;
  auto fn = reinterpret_cast<uint64_t (*)(const char*)>(::dlsym(h, "MockAcc_Counter"));
  uint64_t v = fn ? fn(key.c_str()) : 0;
  ::dlclose(h);
  return v;
}

using e2e::relative_error;
using e2e::run_once;

std::map<std::string, Tensor> inputs_for(const std::string& name, const Model& model) {
  std::map<std::string, Tensor> in;
  in[model.inputs()[0].name] = e2e::read_npy(kModels + "/" + name + ".input.npy");
  return in;
}

struct Expected {
  size_t mockacc_nodes = 0;
  size_t partitions = 0;  // connected components; a lower bound when cycles force splits
  size_t copies_to_device = 0, copies_from_device = 0;
};

ir::Graph load_graph(const std::string& path) {
  auto imported = onnx_import::import_file(path);
  EXPECT_TRUE(imported.ok()) << imported.status().message();
  ir::Graph g = std::move(*imported);
  EXPECT_TRUE(ir::infer_shapes(g).ok());
  g.remove_dead();
  return g;
}

// Checks the plan of `model` against the graph: every partition is on one
// backend, connected and runnable in order (the partition graph is acyclic),
// and maximal: two partitions of the same backend joined by an edge could not
// be merged without a cycle through some other partition.
void check_partitions(const std::string& path, const Model& model) {
  ir::Graph g = load_graph(path);
  nlohmann::json plan = nlohmann::json::parse(model.describe_plan(PlanFormat::kJson));
  std::map<std::string, int> part_of_name;
  for (const auto& n : plan["nodes"]) part_of_name[n["name"]] = n["partition"];
  const size_t np = plan["partitions"].size();
  std::vector<int> part(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    ASSERT_TRUE(part_of_name.count(g.nodes[n].name)) << g.nodes[n].name;
    part[n] = part_of_name[g.nodes[n].name];
  }
  std::vector<std::set<int>> succ(np);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].inputs)
      if (v >= 0 && g.values[v].producer >= 0 && part[g.values[v].producer] != part[n])
        succ[part[g.values[v].producer]].insert(part[n]);
  // Executed in order: every edge goes from an earlier partition to a later one.
  for (size_t p = 0; p < np; ++p)
    for (int q : succ[p])
      EXPECT_LT(static_cast<int>(p), q) << "partition " << p << " feeds earlier partition " << q;
  // Connected within each partition.
  for (size_t p = 0; p < np; ++p) {
    std::vector<int> members;
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (part[n] == static_cast<int>(p)) members.push_back(static_cast<int>(n));
    ASSERT_FALSE(members.empty());
    std::set<int> seen = {members[0]};
    std::vector<int> stack = {members[0]};
    auto consumers = g.consumers();
    while (!stack.empty()) {
      int n = stack.back();
      stack.pop_back();
      std::vector<int> nbrs;
      for (int v : g.nodes[n].inputs)
        if (v >= 0 && g.values[v].producer >= 0) nbrs.push_back(g.values[v].producer);
      for (int v : g.nodes[n].outputs)
        if (v >= 0) nbrs.insert(nbrs.end(), consumers[v].begin(), consumers[v].end());
      for (int m : nbrs)
        if (part[m] == static_cast<int>(p) && seen.insert(m).second) stack.push_back(m);
    }
    EXPECT_EQ(seen.size(), members.size()) << "partition " << p << " is not connected";
  }
  // Maximal: adjacent same-backend partitions are separated by a path
  // through another partition.
  auto reaches_via_other = [&](int from, int to) {
    std::vector<int> stack;
    for (int q : succ[from])
      if (q != to) stack.push_back(q);
    std::set<int> seen;
    while (!stack.empty()) {
      int q = stack.back();
      stack.pop_back();
      if (q == to) return true;
      if (!seen.insert(q).second) continue;
      for (int r : succ[q]) stack.push_back(r);
    }
    return false;
  };
  for (size_t p = 0; p < np; ++p)
    for (int q : succ[p])
      if (plan["partitions"][p]["backend"] == plan["partitions"][q]["backend"]) {
        EXPECT_TRUE(reaches_via_other(static_cast<int>(p), q))
            << "partitions " << p << " and " << q << " could be merged";
      }
}

// What the graph implies for preference MockAcc,CpuRef (ignoring splits that
// only cycle avoidance would force, which these models do not need).
Expected expected_plan(const std::string& path, const std::set<std::string>& pinned_to_cpu = {}) {
  ir::Graph g = load_graph(path);
  static const std::set<std::string> kMockOps = {"Conv", "Relu", "Add", "MatMul", "Gemm"};
  std::vector<bool> on_acc(g.nodes.size());
  Expected e;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    bool f32 = true;
    for (int v : g.nodes[n].inputs)
      if (v >= 0 && g.values[v].dtype != DType::kFloat32) f32 = false;
    on_acc[n] = kMockOps.count(g.nodes[n].op_type) && f32 && !pinned_to_cpu.count(g.nodes[n].name);
    e.mockacc_nodes += on_acc[n];
  }
  // Connected components over edges between nodes on the same backend.
  std::vector<int> parent(g.nodes.size());
  std::iota(parent.begin(), parent.end(), 0);
  std::function<int(int)> find = [&](int x) {
    return parent[x] == x ? x : parent[x] = find(parent[x]);
  };
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].inputs)
      if (v >= 0 && g.values[v].producer >= 0 && on_acc[g.values[v].producer] == on_acc[n])
        parent[find(static_cast<int>(n))] = find(g.values[v].producer);
  std::set<int> roots;
  for (size_t n = 0; n < g.nodes.size(); ++n) roots.insert(find(static_cast<int>(n)));
  e.partitions = roots.size();
  // Copies: per tensor, one per memory that needs it beyond its producer's.
  auto consumers = g.consumers();
  std::set<int> outputs(g.outputs.begin(), g.outputs.end());
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (g.values[v].is_constant()) continue;
    int p = g.values[v].producer;
    bool produced_on_acc = p >= 0 && on_acc[p];
    bool needed_on_acc = false, needed_on_host = outputs.count(static_cast<int>(v)) > 0;
    for (int c : consumers[v]) (on_acc[c] ? needed_on_acc : needed_on_host) = true;
    if (!produced_on_acc && needed_on_acc) ++e.copies_to_device;
    if (produced_on_acc && needed_on_host) ++e.copies_from_device;
  }
  return e;
}

class SplitModels : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitModels, MockAccPlusCpuRefEqualsCpuRefAlone) {
  const std::string name = GetParam();
  const std::string path = kModels + "/" + name + ".onnx";
  auto rt = runtime_with_mockacc();
  ASSERT_TRUE(rt);

  ModelOptions ref_opts;
  ref_opts.backends = {"CpuRef"};
  auto ref_model = rt->load_model(path, ref_opts);
  ASSERT_TRUE(ref_model.ok()) << ref_model.status().message();
  auto inputs = inputs_for(name, **ref_model);
  std::vector<Tensor> ref = run_once(**ref_model, inputs);

  ModelOptions split_opts;
  split_opts.backends = {"MockAcc", "CpuRef"};
  auto model = rt->load_model(path, split_opts);
  ASSERT_TRUE(model.ok()) << model.status().message();

  Expected e = expected_plan(path);
  ASSERT_GT(e.mockacc_nodes, 0u);
  // Connected components are a lower bound; inverted-residual and attention
  // blocks force more (the partition check says why each split is needed).
  EXPECT_GE((*model)->partitions().size(), e.partitions);
  if (name == "resnet18") {
    // stem conv+relu | maxpool | all residual blocks | avgpool+flatten | fc
    EXPECT_EQ((*model)->partitions().size(), 5u) << (*model)->describe_plan(PlanFormat::kText);
    EXPECT_EQ(e.copies_to_device + e.copies_from_device, 6u);
  }
  check_partitions(path, **model);
  size_t to_dev = 0, from_dev = 0;
  for (const CopyDescription& c : (*model)->copies()) {
    EXPECT_FALSE(c.once) << c.value;  // compiled partitions read weights via the NamedDataMap
    (c.to == "host" ? from_dev : to_dev)++;
  }
  EXPECT_EQ(to_dev, e.copies_to_device);
  EXPECT_EQ(from_dev, e.copies_from_device);
  std::vector<std::string> used = (*model)->backends_used();
  EXPECT_NE(std::find(used.begin(), used.end(), "MockAcc"), used.end());
  EXPECT_NE(std::find(used.begin(), used.end(), "CpuRef"), used.end());

  uint64_t nodes_before = counter("MockAcc", "nodes");
  uint64_t h2d_before = counter("MockAcc", "copies_to_device");
  uint64_t d2h_before = counter("MockAcc", "copies_from_device");
  std::vector<Tensor> got = run_once(**model, inputs);
  EXPECT_EQ(counter("MockAcc", "nodes") - nodes_before, e.mockacc_nodes);
  EXPECT_EQ(counter("MockAcc", "copies_to_device") - h2d_before, e.copies_to_device);
  EXPECT_EQ(counter("MockAcc", "copies_from_device") - d2h_before, e.copies_from_device);

  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_LE(relative_error(got[i], ref[i]), 1e-5) << name << " output " << i;
}

INSTANTIATE_TEST_SUITE_P(Models, SplitModels,
                         ::testing::Values("resnet18", "mobilenet_v2", "transformer"));

TEST(Overrides, PinningANodeToCpuRefSplitsTheMockAccRegion) {
  const std::string path = kModels + "/resnet18.onnx";
  auto rt = runtime_with_mockacc();
  ASSERT_TRUE(rt);
  ModelOptions base;
  base.backends = {"MockAcc", "CpuRef"};
  auto plain = rt->load_model(path, base);
  ASSERT_TRUE(plain.ok()) << plain.status().message();
  // The first Relu after the stem's max pool: deep inside a MockAcc region.
  std::string pinned;
  bool after_pool = false;
  for (const auto& p : (*plain)->partitions())
    for (const std::string& n : p.nodes) {
      if (n.find("MaxPool") != std::string::npos || n.find("maxpool") != std::string::npos)
        after_pool = true;
      if (after_pool && pinned.empty() && p.backend == "MockAcc" &&
          n.find("Relu") != std::string::npos)
        pinned = n;
    }
  ASSERT_FALSE(pinned.empty()) << (*plain)->describe_plan(PlanFormat::kText);

  ModelOptions pin = base;
  pin.overrides[pinned] = "CpuRef";
  auto split = rt->load_model(path, pin);
  ASSERT_TRUE(split.ok()) << split.status().message();
  check_partitions(path, **split);
  EXPECT_GT((*split)->partitions().size(), (*plain)->partitions().size());
  bool found = false;
  for (const auto& p : (*split)->partitions())
    if (std::find(p.nodes.begin(), p.nodes.end(), pinned) != p.nodes.end()) {
      EXPECT_EQ(p.backend, "CpuRef");
      found = true;
    }
  EXPECT_TRUE(found);
  EXPECT_NE((*split)->describe_plan(PlanFormat::kText).find(pinned + " (Relu) -> CpuRef [override"),
            std::string::npos);

  auto inputs = inputs_for("resnet18", **plain);
  std::vector<Tensor> a = run_once(**plain, inputs), b = run_once(**split, inputs);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_LE(relative_error(b[0], a[0]), 1e-5);
}

// x -> Conv(A) -> c ; Sigmoid(B)(c) -> s ; Add(C)(c, s) -> y
// A and C are MockAcc, B is CpuRef. Putting A and C in one partition would
// need B both before and after it: the partitioner must split.
std::string write_diamond_model(const test::TempDir& dir) {
  test::ModelBuilder b(13, "diamond");
  b.input("x", {1, 2, 4, 4}).output("y", {1, 2, 4, 4});
  b.init_f32("w", {2, 2, 1, 1}, {0.5f, -1.0f, 2.0f, 0.25f});
  b.node("Conv", {"x", "w"}, {"c"}, "A_conv");
  b.node("Sigmoid", {"c"}, {"s"}, "B_sigmoid");
  b.node("Add", {"c", "s"}, {"y"}, "C_add");
  return b.save(dir, "diamond.onnx");
}

TEST(Cycles, GreedyGroupingWouldCycleSoThePlanSplitsAndRunsCorrectly) {
  test::TempDir dir;
  const std::string path = write_diamond_model(dir);
  auto rt = runtime_with_mockacc();
  ASSERT_TRUE(rt);
  auto model = load_on(*rt, path, {"MockAcc", "CpuRef"});
  ASSERT_TRUE(model.ok()) << model.status().message();
  const auto& parts = (*model)->partitions();
  ASSERT_EQ(parts.size(), 3u) << (*model)->describe_plan(PlanFormat::kText);
  EXPECT_EQ(parts[0].backend, "MockAcc");
  EXPECT_EQ(parts[1].backend, "CpuRef");
  EXPECT_EQ(parts[2].backend, "MockAcc");

  auto ref = load_on(*rt, path, {"CpuRef"});
  ASSERT_TRUE(ref.ok());
  Tensor x(DType::kFloat32, {1, 2, 4, 4});
  for (int i = 0; i < 32; ++i) x.data_as<float>()[i] = static_cast<float>(i % 7) - 3.0f;
  std::vector<Tensor> a = run_once(**model, {{"x", x}}), b = run_once(**ref, {{"x", x}});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_LE(relative_error(a[0], b[0]), 1e-6);
}

// x -> Conv(A) -> c ; z -> Conv(B) -> d ; Add(C)(c, d) -> y, all MockAcc.
// C joins A's partition; B, which starts at a graph input (as a decoder's
// cache does, quantized on its way in), joins it too, since C reads it
// directly and nothing else lies between them: one partition, not two.
TEST(Grouping, ABranchFromAGraphInputJoinsThePartitionThatReadsIt) {
  test::TempDir dir;
  test::ModelBuilder b(13, "branches");
  b.input("x", {1, 2, 4, 4}).input("z", {1, 2, 4, 4}).output("y", {1, 2, 4, 4});
  b.init_f32("w", {2, 2, 1, 1}, {0.5f, -1.0f, 2.0f, 0.25f});
  b.node("Conv", {"x", "w"}, {"c"}, "A_conv");
  b.node("Conv", {"z", "w"}, {"d"}, "B_conv");
  b.node("Add", {"c", "d"}, {"y"}, "C_add");
  const std::string path = b.save(dir, "branches.onnx");
  auto rt = runtime_with_mockacc();
  ASSERT_TRUE(rt);
  auto model = load_on(*rt, path, {"MockAcc", "CpuRef"});
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_EQ((*model)->partitions().size(), 1u) << (*model)->describe_plan(PlanFormat::kText);
  EXPECT_EQ((*model)->partitions()[0].nodes,
            (std::vector<std::string>{"A_conv", "B_conv", "C_add"}));
  auto ref = load_on(*rt, path, {"CpuRef"});
  ASSERT_TRUE(ref.ok());
  Tensor x(DType::kFloat32, {1, 2, 4, 4}), z(DType::kFloat32, {1, 2, 4, 4});
  for (int i = 0; i < 32; ++i) {
    x.data_as<float>()[i] = static_cast<float>(i % 7) - 3.0f;
    z.data_as<float>()[i] = static_cast<float>(i % 5) - 2.0f;
  }
  std::vector<Tensor> a = run_once(**model, {{"x", x}, {"z", z}});
  std::vector<Tensor> want = run_once(**ref, {{"x", x}, {"z", z}});
  ASSERT_EQ(a.size(), 1u);
  EXPECT_LE(relative_error(a[0], want[0]), 1e-6);
}

TEST(Imperative, SingleOpBackendRunsEachNodeOnItsOwn) {
  test::TempDir dir;
  const std::string path = write_diamond_model(dir);
  auto rt = runtime_with_mockacc();
  ASSERT_TRUE(rt);
  ModelOptions o;
  o.backends = {"MockOp", "CpuRef"};
  auto model = rt->load_model(path, o);
  ASSERT_TRUE(model.ok()) << model.status().message();
  size_t imperative = 0;
  for (const auto& p : (*model)->partitions()) imperative += p.imperative;
  EXPECT_EQ(imperative, 2u);  // Conv and Add, one partition each
  // The Conv weight is a constant the imperative backend needs on its device:
  // copied once per session.
  size_t once = 0;
  for (const auto& c : (*model)->copies()) once += c.once;
  EXPECT_EQ(once, 1u);

  ModelOptions ref_opts;
  ref_opts.backends = {"CpuRef"};
  auto ref = rt->load_model(path, ref_opts);
  ASSERT_TRUE(ref.ok());
  Tensor x(DType::kFloat32, {1, 2, 4, 4});
  for (int i = 0; i < 32; ++i) x.data_as<float>()[i] = 0.25f * static_cast<float>(i) - 2.0f;
  uint64_t before = counter("MockOp", "nodes");
  std::vector<Tensor> a = run_once(**model, {{"x", x}}), b = run_once(**ref, {{"x", x}});
  EXPECT_EQ(counter("MockOp", "nodes") - before, 2u);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_LE(relative_error(a[0], b[0]), 1e-6);
}

TEST(Errors, UnknownBackendMissingNodeAndRejectingPinnedBackend) {
  const std::string path = kModels + "/resnet18.onnx";
  auto rt = runtime_with_mockacc();
  ASSERT_TRUE(rt);
  ModelOptions o;
  o.backends = {"NoSuchAcc", "CpuRef"};
  auto m = rt->load_model(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("unknown backend 'NoSuchAcc'"), std::string::npos)
      << m.status().message();

  o.backends = {"MockAcc", "CpuRef"};
  o.overrides["no_such_node"] = "CpuRef";
  m = rt->load_model(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'no_such_node'"), std::string::npos) << m.status().message();

  // Find the max pool's name from a plan, then pin it to MockAcc, which
  // cannot run it.
  o.overrides.clear();
  auto plain = rt->load_model(path, o);
  ASSERT_TRUE(plain.ok());
  std::string pool;
  for (const auto& p : (*plain)->partitions())
    for (const auto& n : p.nodes)
      if (n.find("MaxPool") != std::string::npos || n.find("maxpool") != std::string::npos)
        pool = n;
  ASSERT_FALSE(pool.empty());
  o.overrides[pool] = "MockAcc";
  m = rt->load_model(path, o);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("pinned to 'MockAcc'"), std::string::npos)
      << m.status().message();
  EXPECT_NE(m.status().message().find("Conv, Relu, Add"), std::string::npos)
      << m.status().message();
  o.allow_fallback = true;
  m = rt->load_model(path, o);
  EXPECT_TRUE(m.ok()) << m.status().message();
}

}  // namespace
}  // namespace backplane
