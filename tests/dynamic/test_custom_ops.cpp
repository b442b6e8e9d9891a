// Backend-defined operators (API 1.3): ExampleOps (backends/testing/custom_ops)
// defines com.example.Swish2 through get_op_schemas. A model using it loads
// with its shapes inferred by the backend's callback, places that node on
// ExampleOps (and only there) and runs with the right numbers; without the
// backend, the load fails naming the op, its domain and every backend's
// reason; a backend that tries to redefine an ONNX op does not load.
#include "registry/backend_ops.hpp"
#include "registry/host_api.hpp"
#include "registry/registry.hpp"
#include "support/expect_error.hpp"
#include "support/files.hpp"
#include "support/mock_testing.hpp"
#include "support/model_builder.hpp"

#include <backplane/backend_sdk.hpp>
#include <backplane/runtime.hpp>

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace bt = backplane::test;

const std::string kGoodDir = BACKPLANE_TESTING_CUSTOM_OPS_DIR "/good";
const std::string kRedefineDir = BACKPLANE_TESTING_CUSTOM_OPS_DIR "/redefine";

// x [2, 3] -> Mul(x, 2) -> com.example.Swish2(beta) -> Add(., 1) -> y.
bt::ModelBuilder swish2_model(float beta, bool int_beta = false) {
  bt::ModelBuilder b(13);
  auto* opset = b.model.add_opset_import();
  opset->set_domain("com.example");
  opset->set_version(1);
  b.input("x", {2, 3});
  b.init_f32("two", {}, {2.0f});
  b.init_f32("one", {}, {1.0f});
  b.node("Mul", {"x", "two"}, {"x2"}, "double");
  onnx::NodeProto& s = b.node("Swish2", {"x2"}, {"s"}, "act");
  s.set_domain("com.example");
  if (int_beta) bt::set_int(s, "beta", 1);
  else bt::set_float(s, "beta", beta);
  b.node("Add", {"s", "one"}, {"y"}, "plus_one");
  b.output("y", {2, 3});
  return b;
}

RuntimeOptions example_ops_runtime() {
  RuntimeOptions o = bt::with_dir(kGoodDir);  // ExampleOps next to the static CpuRef
  return o;
}

TEST(CustomOps, BackendRegistersItsOperator) {
  auto rt = Runtime::create(example_ops_runtime());
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  std::vector<std::string> ids;
  for (const BackendDescription& d : (*rt)->backends()) {
    ids.push_back(d.id);
    if (d.id == "ExampleOps") {
      EXPECT_GE(d.api_minor, 3u);  // backend-defined operators came with 1.3
    }
  }
  EXPECT_NE(std::find(ids.begin(), ids.end(), "ExampleOps"), ids.end());
}

TEST(CustomOps, ModelWithTheOperatorRunsEndToEnd) {
  bt::TempDir tmp;
  const std::string path = swish2_model(0.5f).save(tmp);
  auto rt = Runtime::create(example_ops_runtime());
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  auto model = (*rt)->load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<std::string> used = (*model)->backends_used();
  EXPECT_NE(std::find(used.begin(), used.end(), "ExampleOps"), used.end());
  EXPECT_NE(std::find(used.begin(), used.end(), "CpuRef"), used.end());
  for (const PartitionDescription& p : (*model)->partitions())
    for (const std::string& node : p.nodes)
      if (node == "act") {
        EXPECT_EQ(p.backend, "ExampleOps");
      }

  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  const std::vector<float> x = {-2.0f, -0.5f, 0.0f, 0.25f, 1.5f, 3.0f};
  ASSERT_TRUE((*session)->set_input("x", Tensor::copy_of(DType::kFloat32, {2, 3}, x.data())).ok());
  Status s = (*session)->run();
  ASSERT_TRUE(s.ok()) << s.message();
  const Tensor& y = (*session)->output(0);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = 2.0f * x[i];
    const float want = v / (1.0f + std::exp(-0.5f * v)) + 1.0f;
    EXPECT_NEAR(y.data_as<float>()[i], want, 1e-6f) << i;
  }
}

TEST(CustomOps, WithoutTheBackendTheErrorNamesOpDomainAndEveryBackend) {
  bt::TempDir tmp;
  const std::string path = swish2_model(0.5f).save(tmp);
  // The mock backends of the "valid" case: one dynamic backend beside CpuRef.
  auto rt = Runtime::create(bt::with_dir(BACKPLANE_TESTING_BACKENDS_DIR "/valid"));
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  auto model = (*rt)->load_model(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(model.status(), "node 'act' (Swish2)", "operator 'Swish2'",
                   "domain 'com.example'", "CpuRef: defines no operators of its own",
                   "MockA: defines no operators of its own");
}

TEST(CustomOps, PlacedOnlyOnABackendThatDefinesIt) {
  bt::TempDir tmp;
  const std::string path = swish2_model(0.5f).save(tmp);
  auto rt = Runtime::create(example_ops_runtime());
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  ModelOptions pinned;
  pinned.overrides["act"] = "CpuRef";
  auto model = (*rt)->load_model(path, pinned);
  ASSERT_FALSE(model.ok());
  EXPECT_ERROR_HAS(model.status(), "node 'act' (Swish2)",
                   "backend 'CpuRef' does not define operator 'Swish2' of domain 'com.example'");
  // With fallback it goes where it can run.
  pinned.allow_fallback = true;
  model = (*rt)->load_model(path, pinned);
  ASSERT_TRUE(model.ok()) << model.status().message();
  for (const PartitionDescription& p : (*model)->partitions())
    for (const std::string& node : p.nodes)
      if (node == "act") {
        EXPECT_EQ(p.backend, "ExampleOps");
      }
  // Only CpuRef preferred: nobody left who may run it.
  ModelOptions only_cpuref;
  only_cpuref.backends = {"CpuRef"};
  model = (*rt)->load_model(path, only_cpuref);
  ASSERT_FALSE(model.ok());
  EXPECT_ERROR_HAS(model.status(), "no backend supports operator 'Swish2' of domain 'com.example'",
                   "CpuRef: does not define operator 'Swish2' of domain 'com.example'");
}

TEST(CustomOps, TheSchemaChecksAttributesAndTheCallbackChecksTypes) {
  bt::TempDir tmp;
  auto rt = Runtime::create(example_ops_runtime());
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  // beta as an int: the signature ExampleOps declared says float.
  auto model = (*rt)->load_model(swish2_model(0.5f, /*int_beta=*/true).save(tmp, "int.onnx"));
  ASSERT_FALSE(model.ok());
  EXPECT_ERROR_HAS(model.status(), "node 'act' (Swish2)",
                   "attribute 'beta' has type INT, expected FLOAT");
  // An attribute it does not declare.
  bt::ModelBuilder b = swish2_model(0.5f);
  for (onnx::NodeProto& n : *b.graph().mutable_node())
    if (n.name() == "act") bt::set_int(n, "gamma", 3);
  model = (*rt)->load_model(b.save(tmp, "gamma.onnx"));
  ASSERT_FALSE(model.ok());
  EXPECT_ERROR_HAS(model.status(), "node 'act' (Swish2)", "unknown attribute 'gamma'");
  // An int64 input: ExampleOps' inference callback refuses it, and says why.
  bt::ModelBuilder i(13);
  auto* opset = i.model.add_opset_import();
  opset->set_domain("com.example");
  opset->set_version(1);
  i.input("x", {2}, onnx::TensorProto::INT64);
  i.node("Swish2", {"x"}, {"y"}, "act").set_domain("com.example");
  i.untyped_output("y");
  model = (*rt)->load_model(i.save(tmp, "i64.onnx"));
  ASSERT_FALSE(model.ok());
  EXPECT_ERROR_HAS(model.status(), "node 'act' (Swish2)", "backend 'ExampleOps'",
                   "Swish2 takes float32, not int64");
}

TEST(CustomOps, SchemasAreLayeredOverTheBuiltInOnesPerRuntime) {
  auto with = Runtime::create(example_ops_runtime());
  ASSERT_TRUE(with.ok());
  auto without = Runtime::create(bt::with_dir(BACKPLANE_TESTING_BACKENDS_DIR "/empty"));
  ASSERT_TRUE(without.ok());
  bt::TempDir tmp;
  const std::string path = swish2_model(1.0f).save(tmp);
  EXPECT_TRUE((*with)->load_model(path).ok());
  // The other Runtime never saw ExampleOps' operator.
  EXPECT_FALSE((*without)->load_model(path).ok());
  EXPECT_TRUE((*with)->load_model(path).ok());
}

TEST(CustomOps, ABackendCannotRedefineAnOnnxOperator) {
  auto rt = Runtime::create(bt::with_dir(kRedefineDir));
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  for (const BackendDescription& d : (*rt)->backends()) EXPECT_NE(d.id, "ExampleOps");
  auto files = (*rt)->backend_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].fate, BackendFileReport::Fate::kRejected);
  EXPECT_EQ(files[0].step, "create");
  EXPECT_NE(files[0].reason.find("operator 'Relu' (domain '')"), std::string::npos)
      << files[0].reason;
  EXPECT_NE(files[0].reason.find("not of the default ONNX domain"), std::string::npos)
      << files[0].reason;
}

// ---- the checks of a backend's schemas, and the SDK's declaration --------------

bp_status_t* infer_nothing(void*, const bp_infer_args_t*) { return nullptr; }

bp_op_schema_t good_schema() {
  bp_op_schema_t s{};
  s.struct_size = BP_STRUCT_SIZE(bp_op_schema_t, doc);
  s.domain = "com.example";
  s.name = "Op";
  s.since_version = 1;
  s.min_inputs = s.max_inputs = s.min_outputs = s.max_outputs = 1;
  s.infer = &infer_nothing;
  return s;
}

TEST(CustomOps, MalformedSchemasAreRefusedWithTheReason) {
  const ir::OpRegistry& known = ir::OpRegistry::builtin();
  const bp_op_schema_t good = good_schema();
  ASSERT_TRUE(check_backend_ops(&good, 1, known).ok());
  struct Case {
    const char* what;
    void (*spoil)(bp_op_schema_t&);
    const char* expect;
  };
  static const bp_op_attr_t twice[2] = {
      {BP_STRUCT_SIZE(bp_op_attr_t, required), "a", BP_ATTR_INT, false},
      {BP_STRUCT_SIZE(bp_op_attr_t, required), "a", BP_ATTR_FLOAT, false}};
  static const bp_op_attr_t graph_attr = {BP_STRUCT_SIZE(bp_op_attr_t, required), "g",
                                          static_cast<bp_attr_type_t>(5), false};
  const Case cases[] = {
      {"no name", [](bp_op_schema_t& s) { s.name = nullptr; }, "has no name"},
      {"onnx domain", [](bp_op_schema_t& s) { s.domain = "ai.onnx"; },
       "not of the default ONNX domain"},
      {"known op", [](bp_op_schema_t& s) { s.domain = "com.microsoft", s.name = "Gelu"; },
       "operator 'Gelu' (domain 'com.microsoft') is already known"},
      {"since 0", [](bp_op_schema_t& s) { s.since_version = 0; }, "since_version must be"},
      {"bounds", [](bp_op_schema_t& s) { s.min_inputs = 2; }, "are not ranges"},
      {"no outputs", [](bp_op_schema_t& s) { s.min_outputs = s.max_outputs = 0; },
       "at least one output"},
      {"huge", [](bp_op_schema_t& s) { s.max_inputs = 100000; }, "BP_OP_UNBOUNDED"},
      {"no infer", [](bp_op_schema_t& s) { s.infer = nullptr; }, "no infer callback"},
      {"attr twice", [](bp_op_schema_t& s) { s.num_attributes = 2, s.attributes = twice; },
       "attribute 'a' is listed twice"},
      {"graph attr", [](bp_op_schema_t& s) { s.num_attributes = 1, s.attributes = &graph_attr; },
       "which the ABI does not pass"},
      {"small", [](bp_op_schema_t& s) { s.struct_size = 8; }, "struct_size 8 is too small"},
  };
  for (const Case& c : cases) {
    bp_op_schema_t s = good_schema();
    c.spoil(s);
    auto r = check_backend_ops(&s, 1, known);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_ERROR_HAS(r.status(), "op schema 0", c.expect);
  }
  const bp_op_schema_t dup[2] = {good, good};
  EXPECT_ERROR_HAS(check_backend_ops(dup, 2, known).status(), "op schema 1",
                   "operator 'Op' (domain 'com.example') is defined twice");
  EXPECT_FALSE(check_backend_ops(nullptr, 1, known).ok());
  EXPECT_TRUE(check_backend_ops(nullptr, 0, known).ok());
}

// The SDK: an OpDef becomes the schema the ABI describes, and its inference
// runs through the trampoline with the host's infer_set_output.
class Declares : public sdk::Backend {
 public:
  explicit Declares(const bp_host_api_t* host) : sdk::Backend(host) {}
  bp_backend_info_t info() override { return bp_backend_info_t{}; }
  void query_support(const bp_graph_view_t&, sdk::NodeReport&) override {}
  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t&,
                                                  const bp_compile_options_t&,
                                                  sdk::NodeReport&) override {
    throw sdk::unimplemented("compile");
  }
  std::vector<sdk::OpDef> define_ops() override {
    std::vector<sdk::OpDef> ops;
    ops.push_back(sdk::OpDef("com.example", "Pair", 2)
                      .inputs(1, 2)
                      .outputs(1, BP_OP_UNBOUNDED)
                      .attr("k", BP_ATTR_INT, true)
                      .doc("two of each")
                      .infer([](sdk::InferContext& c) {
                        std::vector<int64_t> s = c.shape(0);
                        s.insert(s.begin(), c.node().attr_int("k", 0));
                        for (size_t i = 0; i < c.num_outputs(); ++i)
                          if (c.has_output(i)) c.set_output(i, c.dtype(0), s);
                      }));
    return ops;
  }
};

TEST(CustomOps, SdkDeclaresAnOperatorInAFewLines) {
  const bp_backend_api_t* t = sdk::backend_table<Declares>();
  ASSERT_TRUE(BP_TABLE_HAS(t, get_op_schemas));
  bp_backend_t* b = nullptr;
  ASSERT_EQ(t->create(host_api(), BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR, &b), nullptr);
  size_t count = 0;
  const bp_op_schema_t* schemas = nullptr;
  ASSERT_EQ(t->get_op_schemas(b, &count, &schemas), nullptr);
  ASSERT_EQ(count, 1u);
  const bp_op_schema_t& s = schemas[0];
  EXPECT_STREQ(s.domain, "com.example");
  EXPECT_STREQ(s.name, "Pair");
  EXPECT_EQ(s.since_version, 2);
  EXPECT_EQ(s.min_inputs, 1u);
  EXPECT_EQ(s.max_inputs, 2u);
  EXPECT_EQ(s.max_outputs, BP_OP_UNBOUNDED);
  ASSERT_EQ(s.num_attributes, 1u);
  EXPECT_STREQ(s.attributes[0].name, "k");
  EXPECT_TRUE(s.attributes[0].required);
  EXPECT_STREQ(s.doc, "two of each");
  // Asked again: the same array (it lives as long as the instance).
  const bp_op_schema_t* again = nullptr;
  ASSERT_EQ(t->get_op_schemas(b, &count, &again), nullptr);
  EXPECT_EQ(again, schemas);

  t->destroy(b);

  // Loaded as the runtime does: the schema joins the registry's operators,
  // and infers a node with k = 3 on a [2, 5] input.
  auto loaded = LoadedBackend::create("Declares", t, "test", nullptr);
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ((*loaded)->ops().size(), 1u);
  EXPECT_TRUE((*loaded)->defines_op("com.example", "Pair"));
  EXPECT_FALSE((*loaded)->defines_op("com.example", "Other"));
  BackendRegistry backends;
  ASSERT_TRUE(backends.add(*loaded).ok());
  const ir::OpSchema* schema = backends.ops().find("com.example", "Pair", 2);
  ASSERT_NE(schema, nullptr);
  EXPECT_EQ(schema->provider(), "Declares");
  EXPECT_EQ(backends.ops().find("com.example", "Pair", 1), nullptr);  // since_version 2
  EXPECT_EQ(ir::OpRegistry::builtin().find("com.example", "Pair", 2), nullptr);
  ir::Graph g;
  g.opsets[""] = 13;
  g.opsets["com.example"] = 2;
  ir::Value x;
  x.name = "x";
  x.dtype = DType::kFloat16;
  x.shape = {2, 5};
  x.has_shape = true;
  x.dim_params = {"", ""};
  g.inputs.push_back(g.add_value(x));
  for (const char* name : {"y0", "y1"}) {
    ir::Value y;
    y.name = name;
    g.outputs.push_back(g.add_value(y));
  }
  ir::Node n;
  n.name = "pair";
  n.op_type = "Pair";
  n.domain = "com.example";
  n.inputs = {g.inputs[0]};
  n.outputs = g.outputs;
  ir::Attribute k;
  k.name = "k";
  k.type = ir::AttrType::kInt;
  k.i = 3;
  n.attributes.push_back(k);
  g.nodes.push_back(n);
  Status inferred = ir::infer_shapes(g, {}, &backends.ops());
  ASSERT_TRUE(inferred.ok()) << inferred.message();
  for (int v : g.outputs) {
    EXPECT_EQ(g.values[v].dtype, DType::kFloat16);
    EXPECT_EQ(g.values[v].shape, (Shape{3, 2, 5}));
  }
  // Without the required attribute the schema check stops it first.
  g.nodes[0].attributes.clear();
  for (int v : g.outputs) g.values[v].has_shape = false;
  EXPECT_ERROR_HAS(ir::infer_shapes(g, {}, &backends.ops()), "node 'pair' (Pair)",
                   "required attribute 'k' is missing");
}

}  // namespace
}  // namespace backplane
