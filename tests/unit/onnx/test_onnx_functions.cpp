// Tests of function inlining at import (src/onnx/functions.cpp): model-local
// functions and ONNX function-bodied ops, built with the onnx protobuf API.
#include "ir/graph.hpp"
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"
#include "onnx/functions.hpp"
#include "onnx/importer.hpp"
#include "support/expect_error.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <onnx/onnx_pb.h>

#include <google/protobuf/unknown_field_set.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace backplane {
namespace {

using namespace test;  // ModelBuilder, Dim, TempDir, set_float, ...

constexpr const char* kDomain = "test.functions";

// A model-local function Y = X * alpha + B, alpha an attribute of the call.
onnx::FunctionProto& add_scale_add(onnx::ModelProto& m, const std::string& name = "ScaleAdd") {
  onnx::FunctionProto& f = *m.add_functions();
  f.set_name(name);
  f.set_domain(kDomain);
  f.add_input("X");
  f.add_input("B");
  f.add_output("Y");
  f.add_attribute("alpha");
  auto* os = f.add_opset_import();
  os->set_domain("");
  os->set_version(13);
  onnx::NodeProto& c = *f.add_node();
  c.set_op_type("Constant");
  c.add_output("a");
  onnx::AttributeProto* ref = c.add_attribute();
  ref->set_name("value_float");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("alpha");
  onnx::NodeProto& mul = *f.add_node();
  mul.set_op_type("Mul");
  mul.add_input("X");
  mul.add_input("a");
  mul.add_output("t");
  onnx::NodeProto& add = *f.add_node();
  add.set_op_type("Add");
  add.add_input("t");
  add.add_input("B");
  add.add_output("Y");
  return f;
}

void import_domain(ModelBuilder& b, const std::string& domain = kDomain) {
  auto* os = b.model.add_opset_import();
  os->set_domain(domain);
  os->set_version(1);
}

onnx::NodeProto& call(ModelBuilder& b, const std::string& op, std::vector<std::string> ins,
                      std::vector<std::string> outs, const std::string& name) {
  onnx::NodeProto& n = b.node(op, ins, outs, name);
  n.set_domain(kDomain);
  return n;
}

// x -> ScaleAdd(alpha=2) -> h -> ScaleAdd(alpha=3) -> y, with b = [1, 2, 3].
ModelBuilder twice_model() {
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {3}).output("y", {3});
  b.init_f32("b", {3}, {1, 2, 3});
  set_float(call(b, "ScaleAdd", {"x", "b"}, {"h"}, "first"), "alpha", 2.0f);
  set_float(call(b, "ScaleAdd", {"h", "b"}, {"y"}, "second"), "alpha", 3.0f);
  add_scale_add(b.model);
  return b;
}

std::vector<float> run_model(const std::string& path, const std::vector<float>& x,
                             const Dims& shape) {
  auto rt = Runtime::create({});
  EXPECT_TRUE(rt.ok()) << rt.status().message();
  if (!rt.ok()) return {};
  auto model = (*rt)->load_model(path);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok());
  if (!session.ok()) return {};
  Tensor in = Tensor::copy_of(DType::kFloat32, shape, x.data());
  EXPECT_TRUE((*session)->set_input(0, in).ok());
  Status s = (*session)->run();
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  const Tensor& y = (*session)->output(0);
  return std::vector<float>(y.data_as<float>(), y.data_as<float>() + y.numel());
}

TEST(Functions, LocalFunctionUsedTwiceWithDifferentAttributes) {
  ModelBuilder b = twice_model();
  onnx_import::InlineStats stats;
  onnx::ModelProto m = b.model;
  ASSERT_TRUE(onnx_import::inline_functions(m, ir::OpRegistry::builtin(), &stats).ok());
  EXPECT_EQ(stats.local_calls, 2);
  EXPECT_EQ(m.functions_size(), 0);
  // Each call's body, its nodes named after the call, its values renamed apart.
  ASSERT_EQ(m.graph().node_size(), 6);
  EXPECT_EQ(m.graph().node(0).name(), "first/Constant_0");
  EXPECT_EQ(m.graph().node(3).name(), "second/Constant_0");
  EXPECT_EQ(m.graph().node(0).attribute(0).f(), 2.0f);
  EXPECT_EQ(m.graph().node(3).attribute(0).f(), 3.0f);
  EXPECT_TRUE(m.graph().node(0).attribute(0).ref_attr_name().empty());
  EXPECT_NE(m.graph().node(0).output(0), m.graph().node(3).output(0));
  EXPECT_EQ(m.graph().node(2).output(0), "h");  // the call's outputs keep their names
  EXPECT_EQ(m.graph().node(5).output(0), "y");

  TempDir dir;
  const std::vector<float> y = run_model(b.save(dir), {1, -1, 0.5f}, {3});
  // ((x * 2 + b) * 3 + b)
  ASSERT_EQ(y.size(), 3u);
  EXPECT_FLOAT_EQ(y[0], (1 * 2 + 1) * 3 + 1);
  EXPECT_FLOAT_EQ(y[1], (-1 * 2 + 2) * 3 + 2);
  EXPECT_FLOAT_EQ(y[2], (0.5f * 2 + 3) * 3 + 3);
}

TEST(Functions, AttributeDefaultFromAttributeProto) {
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {2}).output("y", {2});
  b.init_f32("b", {2}, {10, 20});
  call(b, "ScaleAdd", {"x", "b"}, {"y"}, "call");  // no alpha: the default
  onnx::FunctionProto& f = add_scale_add(b.model);
  f.clear_attribute();
  // FunctionProto.attribute_proto (field 11, ONNX 1.15+): alpha = 5 by default.
  onnx::AttributeProto def;
  def.set_name("alpha");
  def.set_type(onnx::AttributeProto::FLOAT);
  def.set_f(5.0f);
  f.GetReflection()->MutableUnknownFields(&f)->AddLengthDelimited(11, def.SerializeAsString());
  TempDir dir;
  const std::vector<float> y = run_model(b.save(dir), {1, 2}, {2});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_FLOAT_EQ(y[0], 15.0f);
  EXPECT_FLOAT_EQ(y[1], 30.0f);
}

TEST(Functions, NestedFunctionsAndPassThroughOutput) {
  // Outer(X) = (ScaleAdd(X, X, alpha=4), X): a call inside a function, and an
  // output that is an input passed on.
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {2}).output("y", {2}).output("same", {2});
  call(b, "Outer", {"x"}, {"y", "same"}, "outer");
  add_scale_add(b.model);
  onnx::FunctionProto& f = *b.model.add_functions();
  f.set_name("Outer");
  f.set_domain(kDomain);
  f.add_input("X");
  f.add_output("Y");
  f.add_output("X");
  auto* os = f.add_opset_import();
  os->set_domain(kDomain);
  os->set_version(1);
  onnx::NodeProto& inner = *f.add_node();
  inner.set_op_type("ScaleAdd");
  inner.set_domain(kDomain);
  inner.add_input("X");
  inner.add_input("X");
  inner.add_output("Y");
  set_float(inner, "alpha", 4.0f);
  TempDir dir;
  const std::vector<float> y = run_model(b.save(dir), {1, 2}, {2});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_FLOAT_EQ(y[0], 5.0f);
  EXPECT_FLOAT_EQ(y[1], 10.0f);
  auto g = onnx_import::import_file(b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  bool identity = false;
  for (const ir::Node& n : g->nodes) identity = identity || n.op_type == "Identity";
  EXPECT_TRUE(identity) << "the passed-through output needs a node computing it";
}

TEST(Functions, RecursiveFunctionIsAnError) {
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {2}).output("y", {2});
  call(b, "Ping", {"x"}, {"y"}, "start");
  for (const char* name : {"Ping", "Pong"}) {
    onnx::FunctionProto& f = *b.model.add_functions();
    f.set_name(name);
    f.set_domain(kDomain);
    f.add_input("X");
    f.add_output("Y");
    auto* os = f.add_opset_import();
    os->set_domain(kDomain);
    os->set_version(1);
    onnx::NodeProto& n = *f.add_node();
    n.set_op_type(std::string(name) == "Ping" ? "Pong" : "Ping");
    n.set_domain(kDomain);
    n.add_input("X");
    n.add_output("Y");
  }
  auto g = onnx_import::import_bytes(b.bytes().data(), b.bytes().size(), "rec.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "rec.onnx", "calls itself", "Ping -> Pong -> Ping");
}

TEST(Functions, ExponentialExpansionIsBounded) {
  // F0 calls F1 twice, F1 calls F2 twice, ...: 2^24 nodes if expanded.
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {1}).output("y", {1});
  call(b, "F0", {"x"}, {"y"}, "top");
  const int levels = 24;
  for (int i = 0; i <= levels; ++i) {
    onnx::FunctionProto& f = *b.model.add_functions();
    f.set_name("F" + std::to_string(i));
    f.set_domain(kDomain);
    f.add_input("X");
    f.add_output("Y");
    auto* os = f.add_opset_import();
    os->set_domain(i == levels ? "" : kDomain);
    os->set_version(i == levels ? 13 : 1);
    onnx::NodeProto& a = *f.add_node();
    a.set_op_type(i == levels ? "Relu" : "F" + std::to_string(i + 1));
    if (i < levels) a.set_domain(kDomain);
    a.add_input("X");
    a.add_output("T");
    if (i == levels) {
      f.mutable_node(0)->set_output(0, "Y");
      continue;
    }
    onnx::NodeProto& c = *f.add_node();
    c = a;
    c.set_input(0, "T");
    c.set_output(0, "Y");
  }
  auto g = onnx_import::import_bytes(b.bytes().data(), b.bytes().size(), "big.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "more than", "nodes");
}

TEST(Functions, UndefinedValueNamesFunctionAndNode) {
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {3}).output("y", {3});
  b.init_f32("b", {3}, {1, 2, 3});
  set_float(call(b, "ScaleAdd", {"x", "b"}, {"y"}, "call"), "alpha", 1.0f);
  onnx::FunctionProto& f = add_scale_add(b.model);
  f.mutable_node(2)->set_input(0, "nowhere");
  auto g = onnx_import::import_bytes(b.bytes().data(), b.bytes().size(), "u.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_ERROR_HAS(g.status(), "function 'ScaleAdd'", "node 'Add_2' (Add)", "'nowhere'");
}

TEST(Functions, RegistryKnowsTheOpKeepsTheCallWhole) {
  ir::OpRegistry registry(&ir::OpRegistry::builtin());
  ASSERT_TRUE(registry
                  .add(ir::OpSchema(kDomain, "ScaleAdd", 1)
                           .allow_unknown_attrs()
                           .infer([](ir::detail::InferCtx& c) -> Status {
                             c.set(0, c.dtype(0), c.shape(0));
                             return ok_status();
                           }),
                       "TestBackend")
                  .ok());
  ModelBuilder b = twice_model();
  auto g = onnx_import::import_bytes(b.bytes().data(), b.bytes().size(), "k.onnx", ".", registry);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op_type, "ScaleAdd");
  EXPECT_EQ(g->nodes[0].domain, kDomain);
  // The built-in registry does not know it: inlined.
  auto inlined = onnx_import::import_bytes(b.bytes().data(), b.bytes().size(), "k.onnx", ".");
  ASSERT_TRUE(inlined.ok()) << inlined.status().message();
  for (const ir::Node& n : inlined->nodes) EXPECT_NE(n.op_type, "ScaleAdd");
}

TEST(Functions, BodyOpThatChangedBetweenOpsetsIsAnError) {
  // The function imports opset 6, where Clip's bounds are attributes; the
  // model imports 13, where they are inputs (not carried over).
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {3}).output("y", {3});
  call(b, "Bound", {"x"}, {"y"}, "call");
  onnx::FunctionProto& f = *b.model.add_functions();
  f.set_name("Bound");
  f.set_domain(kDomain);
  f.add_input("X");
  f.add_output("Y");
  auto* os = f.add_opset_import();
  os->set_domain("");
  os->set_version(6);
  onnx::NodeProto& n = *f.add_node();
  n.set_op_type("Clip");
  n.add_input("X");
  n.add_output("Y");
  set_float(n, "min", 0.0f);
  auto g = onnx_import::import_bytes(b.bytes().data(), b.bytes().size(), "v.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(g.status(), "function 'Bound'", "opset 6", "opset 13", "'Clip'",
                   "no attribute 'min'");
}

TEST(Functions, AttributesThatBecameInputsAreCarriedOver) {
  // A body at opset 11 (Unsqueeze axes, ReduceMean axes as attributes) in a
  // model at opset 18, where both are inputs.
  ModelBuilder b(18);
  import_domain(b);
  b.input("x", {2, 3}).output("y", {1, 2, 1});
  call(b, "RowMeans", {"x"}, {"y"}, "call");
  onnx::FunctionProto& f = *b.model.add_functions();
  f.set_name("RowMeans");
  f.set_domain(kDomain);
  f.add_input("X");
  f.add_output("Y");
  auto* os = f.add_opset_import();
  os->set_domain("");
  os->set_version(11);
  onnx::NodeProto& m = *f.add_node();
  m.set_op_type("ReduceMean");
  m.add_input("X");
  m.add_output("M");
  set_ints(m, "axes", {1});
  onnx::NodeProto& u = *f.add_node();
  u.set_op_type("Unsqueeze");
  u.add_input("M");
  u.add_output("Y");
  set_ints(u, "axes", {0});
  TempDir dir;
  const std::vector<float> y = run_model(b.save(dir), {1, 2, 3, 4, 5, 9}, {2, 3});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_FLOAT_EQ(y[0], 2.0f);
  EXPECT_FLOAT_EQ(y[1], 6.0f);
}

// A graph attribute holding `nodes`, with one output `out`.
onnx::GraphProto* branch(onnx::NodeProto& n, const std::string& name, const std::string& out) {
  onnx::AttributeProto* a = attr(n, name, onnx::AttributeProto::GRAPH);
  onnx::GraphProto* g = a->mutable_g();
  g->set_name(name);
  g->add_output()->set_name(out);
  return g;
}

TEST(Functions, CallsInsideSubgraphsAreInlined) {
  // If(c) then: ScaleAdd(x, b) (a local function) else: Identity(x).
  ModelBuilder b = twice_model();
  onnx::NodeProto& iff = b.node("If", {"c"}, {"z"}, "if");
  onnx::GraphProto* then_g = branch(iff, "then_branch", "t");
  onnx::NodeProto& c = *then_g->add_node();
  c.set_op_type("ScaleAdd");
  c.set_domain(kDomain);
  c.set_name("inner");
  c.add_input("x");
  c.add_input("b");
  c.add_output("t");
  set_float(c, "alpha", 7.0f);
  onnx::GraphProto* else_g = branch(iff, "else_branch", "e");
  onnx::NodeProto& id = *else_g->add_node();
  id.set_op_type("Identity");
  id.add_input("x");
  id.add_output("e");
  onnx::ModelProto m = b.model;
  onnx_import::InlineStats stats;
  ASSERT_TRUE(onnx_import::inline_functions(m, ir::OpRegistry::builtin(), &stats).ok());
  EXPECT_EQ(stats.local_calls, 3);
  const onnx::GraphProto& g = m.graph().node(6).attribute(0).g();
  ASSERT_EQ(g.node_size(), 3);
  EXPECT_EQ(g.node(0).name(), "inner/Constant_0");
  EXPECT_EQ(g.node(0).attribute(0).f(), 7.0f);
  EXPECT_EQ(g.node(1).input(0), "x");   // the outer value, as the call named it
  EXPECT_EQ(g.node(2).output(0), "t");  // the branch's output, as the call named it
  EXPECT_NE(g.node(1).output(0), "t");  // the body's own value got a fresh name
}

TEST(Functions, SubgraphsInsideFunctionBodiesAreRenamed) {
  // Pick(X, C) = If(C) then: X * alpha, else: X; alpha from the caller.
  ModelBuilder b(13);
  import_domain(b);
  b.input("x", {2}).input("c", std::vector<Dim>{}, onnx::TensorProto::BOOL).output("y", {2});
  set_float(call(b, "Pick", {"x", "c"}, {"y"}, "pick"), "alpha", 3.0f);
  onnx::FunctionProto& f = *b.model.add_functions();
  f.set_name("Pick");
  f.set_domain(kDomain);
  f.add_input("X");
  f.add_input("C");
  f.add_output("Y");
  f.add_attribute("alpha");
  auto* os = f.add_opset_import();
  os->set_domain("");
  os->set_version(13);
  onnx::NodeProto& iff = *f.add_node();
  iff.set_op_type("If");
  iff.add_input("C");
  iff.add_output("Y");
  onnx::GraphProto* then_g = branch(iff, "then_branch", "T");
  onnx::NodeProto& k = *then_g->add_node();
  k.set_op_type("Constant");
  k.add_output("A");
  onnx::AttributeProto* ref = k.add_attribute();
  ref->set_name("value_float");
  ref->set_type(onnx::AttributeProto::FLOAT);
  ref->set_ref_attr_name("alpha");
  onnx::NodeProto& mul = *then_g->add_node();
  mul.set_op_type("Mul");
  mul.add_input("X");
  mul.add_input("A");
  mul.add_output("T");
  onnx::GraphProto* else_g = branch(iff, "else_branch", "E");
  onnx::NodeProto& id = *else_g->add_node();
  id.set_op_type("Identity");
  id.add_input("X");
  id.add_output("E");
  onnx::ModelProto m = b.model;
  ASSERT_TRUE(onnx_import::inline_functions(m, ir::OpRegistry::builtin()).ok());
  ASSERT_EQ(m.graph().node_size(), 1);
  const onnx::NodeProto& n = m.graph().node(0);
  EXPECT_EQ(n.op_type(), "If");
  EXPECT_EQ(n.input(0), "c");
  EXPECT_EQ(n.output(0), "y");
  const onnx::GraphProto& t = n.attribute(0).g();
  EXPECT_EQ(t.node(0).attribute(0).f(), 3.0f);
  EXPECT_TRUE(t.node(0).attribute(0).ref_attr_name().empty());
  EXPECT_EQ(t.node(1).input(0), "x");                  // X, as the caller named it
  EXPECT_EQ(t.node(1).input(1), t.node(0).output(0));  // renamed consistently
  EXPECT_EQ(t.output(0).name(), t.node(1).output(0));
  EXPECT_EQ(n.attribute(1).g().node(0).input(0), "x");
  // A subgraph reading a value the function does not define is an error.
  f.mutable_node(0)->mutable_attribute(1)->mutable_g()->mutable_node(0)->set_input(0, "ghost");
  onnx::ModelProto bad = b.model;
  Status s = onnx_import::inline_functions(bad, ir::OpRegistry::builtin());
  ASSERT_FALSE(s.ok());
  EXPECT_ERROR_HAS(s, "function 'Pick'", "else_branch", "'ghost'");
}

// ---------------------------------------------------------------- ONNX bodies

// Forces the function path whatever kernels exist: a registry that knows
// no op of the default domain.
TEST(Functions, OpKnownOnlyThroughItsBody) {
  ModelBuilder b(13);
  b.input("x", {4}).output("y", {4});
  set_float(b.node("Celu", {"x"}, {"y"}, "celu"), "alpha", 2.0f);
  const ir::OpRegistry nothing;
  onnx_import::InlineStats stats;
  onnx::ModelProto m = b.model;
  ASSERT_TRUE(onnx_import::inline_functions(m, nothing, &stats).ok());
  EXPECT_EQ(stats.schema_calls, 1);
  for (const auto& n : m.graph().node()) {
    EXPECT_NE(n.op_type(), "Celu");
    EXPECT_EQ(n.name().rfind("celu/", 0), 0u) << n.name();
  }
  // The inlined body runs on the built-in ops and gives Celu's values:
  // max(0, x) + min(0, alpha * (exp(x / alpha) - 1)).
  TempDir dir;
  ModelBuilder inlined(13);
  inlined.model = m;
  const std::vector<float> x = {-3, -0.5f, 0, 2};
  const std::vector<float> y = run_model(inlined.save(dir, "inlined.onnx"), x, {4});
  ASSERT_EQ(y.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const float want = std::max(0.0f, x[i]) + std::min(0.0f, 2.0f * (std::exp(x[i] / 2) - 1));
    EXPECT_NEAR(y[i], want, 1e-6f) << i;
  }
  // Through the runtime (a kernel of its own, or the same inlining): the same.
  const std::vector<float> direct = run_model(b.save(dir), x, {4});
  ASSERT_EQ(direct.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(direct[i], y[i], 1e-6f) << i;
}

TEST(Functions, ContextDependentBodyOnAnIntermediateValue) {
  // LogSoftmax-13's body is built from its input types; its input comes from
  // a node, so that type is known only once inference has run.
  ModelBuilder b(13);
  b.input("x", {2, 3}).output("y", {2, 3});
  b.node("Relu", {"x"}, {"r"}, "relu");
  set_int(b.node("LogSoftmax", {"r"}, {"y"}, "lsm"), "axis", 1);
  const ir::OpRegistry nothing;
  onnx_import::InlineStats stats;
  onnx::ModelProto m = b.model;
  Status s = onnx_import::inline_functions(m, nothing, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(stats.schema_calls, 1);
  for (const auto& n : m.graph().node()) EXPECT_NE(n.op_type(), "LogSoftmax");
  TempDir dir;
  ModelBuilder inlined(13);
  inlined.model = m;
  const std::vector<float> x = {1, 2, 3, -1, 0.5f, 4};
  const std::vector<float> y = run_model(inlined.save(dir, "inlined.onnx"), x, {2, 3});
  ASSERT_EQ(y.size(), 6u);
  for (int row = 0; row < 2; ++row) {
    double sum = 0;
    for (int j = 0; j < 3; ++j) sum += std::exp(std::max(0.0f, x[row * 3 + j]));
    for (int j = 0; j < 3; ++j)
      EXPECT_NEAR(y[row * 3 + j], std::max(0.0f, x[row * 3 + j]) - std::log(sum), 1e-5)
          << row << "," << j;
  }
}

TEST(Functions, NestedContextDependentBodies) {
  // SoftmaxCrossEntropyLoss's body calls NegativeLogLikelihoodLoss on a value
  // of its own body: two rounds of inference before everything is inlined.
  ModelBuilder b(13);
  b.input("x", {2, 3}).output("loss", std::vector<Dim>{});
  b.init_i64("labels", {2}, {0, 2});
  b.node("Relu", {"x"}, {"r"}, "relu");
  b.node("SoftmaxCrossEntropyLoss", {"r", "labels"}, {"loss"}, "sce");
  const ir::OpRegistry nothing;
  onnx_import::InlineStats stats;
  onnx::ModelProto m = b.model;
  Status s = onnx_import::inline_functions(m, nothing, &stats);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(stats.schema_calls, 2);
  bool gather = false;
  for (const auto& n : m.graph().node()) {
    EXPECT_NE(n.op_type(), "SoftmaxCrossEntropyLoss");
    EXPECT_NE(n.op_type(), "NegativeLogLikelihoodLoss");
    gather = gather || n.op_type() == "GatherElements";
  }
  EXPECT_TRUE(gather) << "NegativeLogLikelihoodLoss's body gathers the labelled scores";
}

TEST(Functions, ModelWithoutCallsIsUnchanged) {
  ModelBuilder b(13);
  b.input("x", {3}).output("y", {3});
  b.node("Relu", {"x"}, {"y"}, "relu");
  onnx::ModelProto m = b.model;
  ASSERT_TRUE(onnx_import::inline_functions(m, ir::OpRegistry::builtin()).ok());
  EXPECT_EQ(m.SerializeAsString(), b.model.SerializeAsString());
}

// Mutated models with functions (and context-dependent bodies, so libonnx's
// inference runs on them too) import or fail with a status; none crashes.
// BP_MUTATIONS=N runs N mutants instead of 3000 (100000 passed when written).
TEST(Functions, MutatedModelsNeverCrash) {
  ModelBuilder b = twice_model();
  b.node("Relu", {"y"}, {"r"}, "relu");
  b.node("LogSoftmax", {"r"}, {"z"}, "lsm");
  b.node("Celu", {"z"}, {"c"}, "celu");
  b.untyped_output("c");
  add_scale_add(b.model, "Unused");
  const std::string clean = b.bytes();
  auto base = onnx_import::import_bytes(clean.data(), clean.size(), "clean.onnx", ".");
  ASSERT_TRUE(base.ok()) << base.status().message();
  const int iterations =
      std::getenv("BP_MUTATIONS") ? std::atoi(std::getenv("BP_MUTATIONS")) : 3000;
  std::mt19937 rng(42);
  int imported = 0;
  for (int i = 0; i < iterations; ++i) {
    std::string bytes = clean;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng() % 256);
    auto g = onnx_import::import_bytes(bytes.data(), bytes.size(), "mutant.onnx", ".");
    imported += g.ok() ? 1 : 0;
  }
  // Most single-byte changes leave a valid model (names, values); the point
  // is that the rest fail with a status rather than a crash.
  EXPECT_GT(imported, 0);
}

}  // namespace
}  // namespace backplane
