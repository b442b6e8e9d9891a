// Tests of the operator registry: version lookup, overlays, and
// OpSchema::check's errors on nodes that do not match their signature.
#include "ir/graph.hpp"
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"
#include "support/expect_error.hpp"

#include <gtest/gtest.h>

#include <set>

namespace backplane {
namespace {

using ir::OpRegistry;
using ir::OpSchema;

// A graph with typed values and one node, built by hand: check() needs
// no importer, and a test can write nodes the importer would reorder.
struct OneNode {
  explicit OneNode(int64_t opset) { g.opsets[""] = opset; }

  OneNode& in(const std::string& name, DType dtype, Shape shape = {2}) {
    ir::Value v;
    v.name = name;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.has_shape = true;
    ids.push_back(g.add_value(v));
    return *this;
  }
  // The node: inputs by name ("" = omitted), `n_out` outputs.
  ir::Node& node(const std::string& op, const std::vector<std::string>& inputs, size_t n_out = 1) {
    ir::Node n;
    n.name = "n";
    n.op_type = op;
    for (const std::string& s : inputs) n.inputs.push_back(s.empty() ? -1 : g.find_value(s));
    for (size_t i = 0; i < n_out; ++i) {
      ir::Value v;
      v.name = "out" + std::to_string(i);
      n.outputs.push_back(g.add_value(v));
    }
    g.nodes.push_back(std::move(n));
    return g.nodes.back();
  }
  Status check() const {
    const ir::Node& n = g.nodes.back();
    const OpSchema* s = OpRegistry::builtin().find(n.domain, n.op_type, g.opset(n.domain));
    if (s == nullptr) return not_found("no schema for " + n.op_type);
    return s->check(g, n);
  }

  ir::Graph g;
  std::vector<int> ids;
};

ir::Attribute int_attr(const std::string& name, int64_t v) {
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInt;
  a.i = v;
  return a;
}

OpSchema custom(const std::string& domain, const std::string& op, int since) {
  OpSchema s(domain, op, since);
  s.input("X", "T")
      .output("Y", "T")
      .type("T", {DType::kFloat32})
      .infer(ir::detail::infer_same_as_input0);
  return s;
}

// ---------------------------------------------------------------- lookup

TEST(OpRegistry, LookupPicksTheLatestVersionAtOrBelowTheOpset) {
  const OpRegistry& r = OpRegistry::builtin();
  const OpSchema* s = r.find("", "Softmax", 12);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->since_version(), 1);
  EXPECT_EQ(s->last_version(), 12);
  s = r.find("ai.onnx", "Softmax", 17);  // "ai.onnx" is the default domain
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->since_version(), 13);
  EXPECT_EQ(s->last_version(), INT32_MAX);
  // ReduceSum's axes become an input at opset 13; the other reductions keep the attribute.
  ASSERT_NE(r.find("", "ReduceSum", 13), nullptr);
  EXPECT_EQ(r.find("", "ReduceSum", 13)->inputs().size(), 2u);
  EXPECT_EQ(r.find("", "ReduceSum", 12)->inputs().size(), 1u);
  EXPECT_NE(r.find("", "ReduceSum", 12)->find_attr("axes"), nullptr);
  EXPECT_EQ(r.find("", "ReduceMean", 13)->inputs().size(), 1u);
  // Slice: attributes before opset 10, inputs from it on.
  EXPECT_NE(r.find("", "Slice", 9)->find_attr("starts"), nullptr);
  EXPECT_EQ(r.find("", "Slice", 10)->find_attr("starts"), nullptr);
  EXPECT_EQ(r.find("", "Slice", 10)->inputs().size(), 5u);
}

TEST(OpRegistry, OpsImportAtTheFirstOpsetWithTheirMeaning) {
  // The node tests of these ops import opset 1 or 6.
  const std::vector<std::pair<std::string, int>> old = {
      {"Elu", 6},           {"HardSigmoid", 6}, {"Selu", 6},
      {"Softplus", 1},      {"Softsign", 1},    {"GlobalAveragePool", 1},
      {"GlobalMaxPool", 1}, {"Not", 1},         {"InstanceNormalization", 6}};
  for (const auto& [op, opset] : old) {
    const OpSchema* s = OpRegistry::builtin().find("", op, opset);
    ASSERT_NE(s, nullptr) << op << " at opset " << opset;
    EXPECT_LE(s->since_version(), opset) << op;
  }
}

TEST(OpRegistry, LookupSaysFromWhichOpsetAnOpIsKnown) {
  auto s = OpRegistry::builtin().lookup("", "HardSwish", 13);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(s.status(), "operator 'HardSwish' (domain '') is known from opset 14",
                   "the model imports opset 13");
  // Add before opset 7 had the legacy broadcast attributes: not registered.
  s = OpRegistry::builtin().lookup("", "Add", 6);
  ASSERT_FALSE(s.ok());
  EXPECT_ERROR_HAS(s.status(), "'Add'", "known from opset 7", "imports opset 6");
}

TEST(OpRegistry, UnknownOpNamesOpAndDomain) {
  auto s = OpRegistry::builtin().lookup("com.acme", "Frobnicate", 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(s.status(), "unsupported operator 'Frobnicate' (domain 'com.acme')");
  EXPECT_FALSE(OpRegistry::builtin().knows("com.acme", "Frobnicate"));
}

// ---------------------------------------------------------------- adding schemas

TEST(OpRegistry, DuplicateVersionIsAnError) {
  OpRegistry r;
  ASSERT_TRUE(r.add(custom("com.acme", "Frob", 1)).ok());
  ASSERT_TRUE(r.add(custom("com.acme", "Frob", 3)).ok());
  Status s = r.add(custom("com.acme", "Frob", 1));
  EXPECT_ERROR_HAS(s, "operator 'Frob' (domain 'com.acme') version 1 is defined twice");
  // Versions cover [since, next since - 1].
  EXPECT_EQ(r.find("com.acme", "Frob", 2)->since_version(), 1);
  EXPECT_EQ(r.find("com.acme", "Frob", 2)->last_version(), 2);
  EXPECT_EQ(r.find("com.acme", "Frob", 9)->since_version(), 3);
}

TEST(OpRegistry, SchemaNeedsInferenceAndAVersion) {
  OpRegistry r;
  OpSchema no_infer("com.acme", "Frob", 1);
  no_infer.input("X").output("Y");
  EXPECT_ERROR_HAS(r.add(no_infer), "operator 'Frob' (domain 'com.acme')",
                   "schema has no shape inference");
  EXPECT_ERROR_HAS(r.add(custom("com.acme", "Frob", 0)), "since_version must be at least 1");
}

// Inputs whose values decide output shapes (OpSchema::shape_inputs): marked
// on every version of the ops that have them, and only on those inputs.
TEST(OpRegistry, ShapeInputsAreMarkedPerInput) {
  struct Case {
    const char* op;
    int opset;
    std::set<std::string> shape_inputs;
  };
  const Case cases[] = {
      {"Reshape", 14, {"shape"}},
      {"Expand", 13, {"shape"}},
      {"Tile", 13, {"repeats"}},
      {"Range", 11, {"start", "limit", "delta"}},
      {"ConstantOfShape", 9, {"input"}},
      {"Slice", 13, {"starts", "ends", "axes", "steps"}},
      {"Pad", 13, {"pads"}},
      {"Pad", 18, {"pads", "axes"}},
      {"Resize", 10, {"scales"}},
      {"Resize", 13, {"scales", "sizes"}},
      {"Resize", 18, {"scales", "sizes"}},
      {"Upsample", 9, {"scales"}},
      {"Split", 18, {"split"}},
      {"Unsqueeze", 13, {"axes"}},
      {"ReduceMax", 18, {"axes"}},
      {"HannWindow", 17, {"size"}},
      {"STFT", 17, {"frame_step", "frame_length"}},
      {"Col2Im", 18, {"image_shape", "block_shape"}},
      {"Add", 14, {}},
      {"Gather", 13, {}},
  };
  for (const Case& c : cases) {
    const OpSchema* s = OpRegistry::builtin().find("", c.op, c.opset);
    ASSERT_NE(s, nullptr) << c.op << "-" << c.opset;
    std::set<std::string> marked;
    for (const ir::ParamSpec& p : s->inputs())
      if (p.decides_shape) marked.insert(p.name);
    EXPECT_EQ(marked, c.shape_inputs) << c.op << "-" << c.opset;
  }
  // A name that is not an input is an error of add().
  OpRegistry r;
  EXPECT_ERROR_HAS(r.add(custom("com.acme", "Frob", 1).shape_inputs({"size"})),
                   "operator 'Frob' (domain 'com.acme')", "shape input 'size'");
}

// A node is data-dependent through an input that decides its shape only
// where that input holds data: not when it is computed from shapes and
// constants alone (Shape, Size), which specialisation folds.
TEST(OpRegistry, DataShapeInputsFollowWhatHoldsData) {
  ir::Graph g;
  g.opsets[""] = 14;
  auto value = [&](const std::string& name, DType dtype, Shape shape) {
    ir::Value v;
    v.name = name;
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.has_shape = true;
    return g.add_value(v);
  };
  const int x = value("x", DType::kFloat32, {2, 3});
  const int given = value("given", DType::kInt64, {1});
  g.inputs = {x, given};
  const int c = g.add_constant("minus_one", Tensor(DType::kInt64, Shape{1}));
  auto node = [&](const std::string& op, std::vector<int> inputs) {
    ir::Node n;
    n.name = op + std::to_string(g.nodes.size());
    n.op_type = op;
    n.inputs = std::move(inputs);
    n.outputs = {value(n.name + "_out", DType::kUndefined, {})};
    g.nodes.push_back(n);
    return n.outputs[0];
  };
  const int shape = node("Shape", {x});
  const int shape_times = node("Mul", {shape, c});      // shapes and constants: not data
  const int from_given = node("Add", {given, c});       // a graph input's values: data
  const int numel = node("Size", {node("Relu", {x})});  // a shape of data is not data
  node("Reshape", {x, shape_times});
  node("Reshape", {x, from_given});
  node("Reshape", {x, numel});
  const std::vector<char> data = ir::values_from_data(g);
  EXPECT_TRUE(data[x]);
  EXPECT_TRUE(data[given]);
  EXPECT_FALSE(data[c]);
  EXPECT_FALSE(data[shape]);
  EXPECT_FALSE(data[shape_times]);
  EXPECT_TRUE(data[from_given]);
  EXPECT_FALSE(data[numel]);
  const OpSchema* reshape = OpRegistry::builtin().find("", "Reshape", 14);
  ASSERT_NE(reshape, nullptr);
  const size_t n = g.nodes.size();
  EXPECT_TRUE(reshape->data_shape_inputs(g.nodes[n - 3], data).empty());
  EXPECT_EQ(reshape->data_shape_inputs(g.nodes[n - 2], data), std::vector<size_t>{1});
  EXPECT_TRUE(reshape->data_shape_inputs(g.nodes[n - 1], data).empty());
}

TEST(OpRegistry, OverlayAddsItsDomainAndCannotRedefineTheParents) {
  OpRegistry overlay(&OpRegistry::builtin());
  // A backend cannot redefine an ONNX op, at any version.
  Status s = overlay.add(custom("", "Relu", 99), "acme");
  EXPECT_ERROR_HAS(s, "operator 'Relu' (domain '')", "already defined by ONNX");
  ASSERT_TRUE(overlay.add(custom("com.acme", "Frob", 1), "acme").ok());
  const OpSchema* frob = overlay.find("com.acme", "Frob", 1);
  ASSERT_NE(frob, nullptr);
  EXPECT_EQ(frob->provider(), "acme");
  // The overlay sees the parent's ops; the parent never sees the overlay's.
  EXPECT_NE(overlay.find("", "Relu", 13), nullptr);
  EXPECT_EQ(OpRegistry::builtin().find("com.acme", "Frob", 1), nullptr);
  // A second overlay on the first cannot take the same op either.
  OpRegistry second(&overlay);
  EXPECT_ERROR_HAS(second.add(custom("com.acme", "Frob", 2), "other"),
                   "operator 'Frob' (domain 'com.acme') is already defined by another provider");
  // schemas() lists both layers, sorted.
  bool saw_frob = false, saw_relu = false;
  for (const OpSchema* x : second.schemas()) {
    saw_frob |= x->name() == "Frob";
    saw_relu |= x->name() == "Relu";
  }
  EXPECT_TRUE(saw_frob && saw_relu);
}

TEST(OpRegistry, BuiltinSchemasDeclareTheirSignature) {
  for (const OpSchema* s : OpRegistry::builtin().schemas()) {
    const std::string what =
        s->domain() + "::" + s->name() + "-" + std::to_string(s->since_version());
    EXPECT_FALSE(s->allows_unknown_attrs()) << what;
    EXPECT_FALSE(s->outputs().empty()) << what;
    EXPECT_TRUE(static_cast<bool>(s->infer_fn())) << what;
    std::set<std::string> vars;
    for (const ir::TypeVar& t : s->type_vars()) {
      EXPECT_FALSE(t.allowed.empty()) << what << " " << t.name;
      vars.insert(t.name);
    }
    for (const auto* params : {&s->inputs(), &s->outputs()})
      for (const ir::ParamSpec& p : *params)
        EXPECT_TRUE(p.type_var.empty() || vars.count(p.type_var) > 0)
            << what << ": '" << p.name << "' names undeclared type " << p.type_var;
  }
}

// An infer function accepts every dtype its schema allows (a backend, not
// inference, decides what runs): for each op whose inputs all share one type
// variable, whatever inference says for float32 it says for every dtype of
// that variable's list.
TEST(OpRegistry, InferenceAcceptsEveryDtypeTheSchemaAllows) {
  int ops_checked = 0;
  for (const OpSchema* s : OpRegistry::builtin().schemas()) {
    if (!s->domain().empty() || s->inputs().empty()) continue;
    const std::string var = s->inputs()[0].type_var;
    bool uniform = !var.empty();
    size_t n_in = 0, n_out = 0;
    for (const ir::ParamSpec& p : s->inputs()) {
      uniform &= p.type_var == var && p.arity != ir::ParamSpec::Arity::kOptional;
      n_in += p.arity == ir::ParamSpec::Arity::kVariadic ? 2 : 1;
    }
    for (const ir::ParamSpec& p : s->outputs())
      n_out += p.arity == ir::ParamSpec::Arity::kSingle ? 1 : 0;
    bool required_attrs = false;
    for (const ir::AttrSpec& a : s->attrs()) required_attrs |= a.required;
    const ir::TypeVar* tv = nullptr;
    for (const ir::TypeVar& t : s->type_vars())
      if (t.name == var) tv = &t;
    if (!uniform || required_attrs || tv == nullptr || n_out == 0) continue;
    auto infer = [&](DType dtype) -> Result<ir::detail::OutInfo> {
      OneNode t(s->since_version());
      std::vector<std::string> names;
      for (size_t i = 0; i < n_in; ++i) {
        names.push_back("x" + std::to_string(i));
        t.in(names.back(), dtype, {1, 2, 3, 3});
      }
      t.node(s->name(), names, n_out);
      BP_RETURN_IF_ERROR(s->check(t.g, t.g.nodes.back()));
      ir::detail::InferCtx c(t.g, t.g.nodes.back());
      BP_RETURN_IF_ERROR(s->infer_fn()(c));
      return c.out[0];
    };
    // Ops whose valid dtypes depend on an attribute the probe leaves at its
    // default: Mod's fmod must be 1 for floating-point inputs; RandomNormalLike
    // and RandomUniformLike take any input but, without `dtype`, their output
    // copies it and must be float16/32/64 (ONNX's T2).
    if (s->name() == "Mod" || s->name() == "RandomNormalLike" || s->name() == "RandomUniformLike")
      continue;
    const DType first = tv->allowed.front();
    auto want = infer(first);
    if (!want.ok()) continue;  // this op wants other shapes than the probe's
    ++ops_checked;
    for (DType d : tv->allowed) {
      auto got = infer(d);
      ASSERT_TRUE(got.ok()) << s->name() << "-" << s->since_version() << " on " << dtype_name(d)
                            << ": " << got.status().message();
      EXPECT_EQ(got->shape, want->shape) << s->name() << " on " << dtype_name(d);
      // The output follows the input's dtype, or is fixed (bool, int64).
      if (want->dtype == first) EXPECT_EQ(got->dtype, d) << s->name() << " on " << dtype_name(d);
      else EXPECT_EQ(got->dtype, want->dtype) << s->name() << " on " << dtype_name(d);
    }
  }
  EXPECT_GT(ops_checked, 100);  // unary, binary, variadic, pooling, conv, ... versions
}

// ---------------------------------------------------------------- check()

TEST(OpSchemaCheck, InputCountNamesNodeAndExpectation) {
  OneNode t(14);
  t.in("a", DType::kFloat32).in("b", DType::kFloat32).in("c", DType::kFloat32);
  t.node("Add", {"a", "b", "c"});
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Add): has 3 inputs, expected 2 (Add at opset 14)");
}

TEST(OpSchemaCheck, OutputCount) {
  OneNode t(14);
  t.in("a", DType::kFloat32);
  t.node("Relu", {"a"}, 2);
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Relu): has 2 outputs, expected 1");
}

TEST(OpSchemaCheck, MissingRequiredInput) {
  OneNode t(7);  // Gemm's C is optional only from opset 11
  t.in("a", DType::kFloat32, {2, 2}).in("b", DType::kFloat32, {2, 2});
  t.node("Gemm", {"a", "b", ""});
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Gemm): required input 'C' (2) is missing");
  OneNode t11(11);
  t11.in("a", DType::kFloat32, {2, 2}).in("b", DType::kFloat32, {2, 2});
  t11.node("Gemm", {"a", "b", ""});
  EXPECT_TRUE(t11.check().ok()) << t11.check().message();
}

TEST(OpSchemaCheck, UnknownAttributeListsTheKnownOnes) {
  OneNode t(13);
  t.in("a", DType::kFloat32);
  t.node("Relu", {"a"}).attributes.push_back(int_attr("alpha", 1));
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Relu): unknown attribute 'alpha' (Relu has none)");
  OneNode s(13);
  s.in("a", DType::kFloat32);
  s.node("Softmax", {"a"}).attributes.push_back(int_attr("axes", 1));
  EXPECT_ERROR_HAS(s.check(), "node 'n' (Softmax): unknown attribute 'axes' (Softmax has axis)");
}

TEST(OpSchemaCheck, WrongAttributeType) {
  OneNode t(16);
  t.in("a", DType::kFloat32);
  t.node("LeakyRelu", {"a"}).attributes.push_back(int_attr("alpha", 1));
  EXPECT_ERROR_HAS(t.check(),
                   "node 'n' (LeakyRelu): attribute 'alpha' has type INT, expected FLOAT");
}

TEST(OpSchemaCheck, MissingRequiredAttribute) {
  OneNode t(13);
  t.in("a", DType::kFloat32).in("b", DType::kFloat32);
  t.node("Concat", {"a", "b"});
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Concat): required attribute 'axis' is missing");
  t.g.nodes.back().attributes.push_back(int_attr("axis", 0));
  EXPECT_TRUE(t.check().ok());
}

TEST(OpSchemaCheck, TypeVariableBindsOnce) {
  OneNode t(14);
  t.in("a", DType::kFloat32).in("b", DType::kInt64);
  t.node("Add", {"a", "b"});
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Add): input 'B' ('b') has dtype int64",
                   "but input 'A' ('a') has float32 (both are T)");
}

TEST(OpSchemaCheck, DtypeOutsideTheListOfThatVersion) {
  // int8 Add is ONNX only from opset 14.
  OneNode t(13);
  t.in("a", DType::kInt8).in("b", DType::kInt8);
  t.node("Add", {"a", "b"});
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Add): input 'A' ('a') has dtype int8; Add takes",
                   "float16, bfloat16, float32, float64");
  OneNode t14(14);
  t14.in("a", DType::kInt8).in("b", DType::kInt8);
  t14.node("Add", {"a", "b"});
  EXPECT_TRUE(t14.check().ok()) << t14.check().message();
  // A parameter of a fixed type (Reshape's shape is int64).
  OneNode r(14);
  r.in("x", DType::kFloat32).in("shape", DType::kInt32);
  r.node("Reshape", {"x", "shape"});
  EXPECT_ERROR_HAS(r.check(), "node 'n' (Reshape): input 'shape' ('shape') has dtype int32",
                   "takes int64");
}

TEST(OpSchemaCheck, VariadicInputsShareTheirType) {
  OneNode t(13);
  t.in("a", DType::kFloat32).in("b", DType::kFloat32).in("c", DType::kFloat16);
  t.node("Max", {"a", "b", "c"});
  EXPECT_ERROR_HAS(t.check(), "node 'n' (Max): input 'data_0' ('c') has dtype float16",
                   "input 'data_0' ('a') has float32");
}

}  // namespace
}  // namespace backplane
