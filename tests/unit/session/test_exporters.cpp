// ONNX as other exporters write it (spox, tf2onnx, Paddle2ONNX, PyTorch,
// files saved after ONNX Runtime's optimiser), through the public API: body
// outputs and value_info without a type, dims named "", opset imports of
// domains the model never uses, initializers listed as graph inputs,
// Constant nodes in place of initializers, every opset from 7 to 18; and bad
// models of the same kinds, errors naming the node and the reason.
// tests/corpus runs the real models these come from.
#include "support/expect_error.hpp"
#include "support/model_builder.hpp"
#include "static_runtime.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace bt = backplane::test;

std::shared_ptr<Runtime> runtime() { return bt::static_runtime(); }

Tensor floats(Shape shape, std::vector<float> v) {
  return Tensor::copy_of(DType::kFloat32, std::move(shape), v.data());
}
Tensor boolean(bool b) { return Tensor::copy_of(DType::kBool, {}, &b); }
std::vector<float> values_f(const Tensor& t) {
  return std::vector<float>(t.data_as<float>(), t.data_as<float>() + t.numel());
}

onnx::GraphProto* graph_attr(onnx::NodeProto& n, const std::string& name) {
  return bt::attr(n, name, onnx::AttributeProto::GRAPH)->mutable_g();
}
onnx::NodeProto* add_node(onnx::GraphProto* g, const std::string& op,
                          const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                          const std::string& name) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return n;
}
// A body output as spox writes it: a name and a TypeProto with nothing in it.
void empty_typed_output(onnx::GraphProto* g, const std::string& name) {
  onnx::ValueInfoProto* vi = g->add_output();
  vi->set_name(name);
  vi->mutable_type();
}

// Runs `path` with `feeds` on a fresh session; the outputs, or the error.
Result<std::vector<Tensor>> run_model(Runtime& rt, const std::string& path,
                                      const std::vector<std::pair<std::string, Tensor>>& feeds) {
  BP_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, rt.load_model(path));
  BP_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, model->create_session());
  for (const auto& [name, t] : feeds) BP_RETURN_IF_ERROR(session->set_input(name, t));
  BP_RETURN_IF_ERROR(session->run());
  std::vector<Tensor> outs;
  for (size_t i = 0; i < session->num_outputs(); ++i) outs.push_back(session->output(i).clone());
  return outs;
}

// If(c1): then If(c2): then x + 1, else x * 2; else -x. Every body output is
// untyped (an empty TypeProto, or no type at all), as are the value_info
// entries of the bodies and the outer If's output.
std::string write_untyped_nested_if(const bt::TempDir& dir) {
  bt::ModelBuilder b(16, "untyped_bodies");
  b.input("c1", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
  b.input("c2", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
  b.input("x", {""});
  b.init_f32("one", {1}, {1.f});
  b.init_f32("two", {1}, {2.f});
  auto& outer = b.node("If", {"c1"}, {"r"}, "outer");
  onnx::GraphProto* then1 = graph_attr(outer, "then_branch");
  then1->set_name("outer_then");
  onnx::NodeProto* inner = add_node(then1, "If", {"c2"}, {"inner_r"}, "inner");
  onnx::GraphProto* then2 = graph_attr(*inner, "then_branch");
  then2->set_name("inner_then");
  add_node(then2, "Add", {"x", "one"}, {"plus"}, "plus_one");
  empty_typed_output(then2, "plus");
  onnx::GraphProto* else2 = graph_attr(*inner, "else_branch");
  else2->set_name("inner_else");
  add_node(else2, "Mul", {"x", "two"}, {"times"}, "times_two");
  else2->add_output()->set_name("times");  // no type at all
  empty_typed_output(then1, "inner_r");
  then1->add_value_info()->set_name("inner_r");
  onnx::GraphProto* else1 = graph_attr(outer, "else_branch");
  else1->set_name("outer_else");
  add_node(else1, "Neg", {"x"}, {"neg"}, "negate");
  empty_typed_output(else1, "neg");
  b.node("Identity", {"r"}, {"y"}, "out");
  onnx::ValueInfoProto* r = b.graph().add_value_info();
  r->set_name("r");
  r->mutable_type();
  b.output("y", {""});
  return b.save(dir);
}

TEST(Exporters, BodyOutputsAndValueInfoWithoutATypeTakeTheTypeTheirBodyMakes) {
  bt::TempDir dir;
  auto rt = runtime();
  const std::string path = write_untyped_nested_if(dir);
  auto model = rt->load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->outputs()[0].dtype, DType::kFloat32);
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  ASSERT_TRUE(s.set_input("x", floats({3}, {1, 2, 3})).ok());
  struct Case {
    bool c1, c2;
    std::vector<float> want;
  };
  for (const Case& c : {Case{true, true, {2, 3, 4}}, Case{true, false, {2, 4, 6}},
                        Case{false, true, {-1, -2, -3}}}) {
    ASSERT_TRUE(s.set_input("c1", boolean(c.c1)).ok());
    ASSERT_TRUE(s.set_input("c2", boolean(c.c2)).ok());
    Status st = s.run();
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(values_f(s.output(0)), c.want) << "c1=" << c.c1 << " c2=" << c.c2;
  }
}

TEST(Exporters, DimsNamedEmptyAreUnknownNotOneSymbol) {
  bt::TempDir dir;
  auto rt = runtime();
  bt::ModelBuilder b(13, "empty_dim_names");
  b.input("a", {"", 2}).input("b", {"", 2});
  // Written as dim_param "" (what spox writes), not as a dim with no value.
  for (int i = 0; i < 2; ++i)
    b.graph()
        .mutable_input(i)
        ->mutable_type()
        ->mutable_tensor_type()
        ->mutable_shape()
        ->mutable_dim(0)
        ->set_dim_param("");
  bt::set_int(b.node("Concat", {"a", "b"}, {"y"}, "cat"), "axis", 0);
  b.output("y", {"", 2});
  auto out = run_model(*rt, b.save(dir),
                       {{"a", floats({1, 2}, {1, 2})}, {"b", floats({3, 2}, {3, 4, 5, 6, 7, 8})}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ((*out)[0].shape(), (Shape{4, 2}));
  EXPECT_EQ(values_f((*out)[0]), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST(Exporters, OpsetImportsOfDomainsTheModelNeverUsesAreIgnored) {
  bt::TempDir dir;
  auto rt = runtime();
  bt::ModelBuilder b(16, "many_domains");
  // What a model saved after ONNX Runtime's optimiser imports.
  for (auto [domain, version] :
       std::vector<std::pair<const char*, int>>{{"ai.onnx.ml", 3},
                                                {"ai.onnx.training", 1},
                                                {"com.ms.internal.nhwc", 19},
                                                {"ai.onnx.preview.training", 1},
                                                {"com.microsoft", 1},
                                                {"com.microsoft.experimental", 1},
                                                {"com.microsoft.nchwc", 1},
                                                {"org.pytorch.aten", 1}}) {
    auto* os = b.model.add_opset_import();
    os->set_domain(domain);
    os->set_version(version);
  }
  b.input("x", {2});
  b.node("Relu", {"x"}, {"y"}, "relu");
  b.output("y", {2});
  auto out = run_model(*rt, b.save(dir), {{"x", floats({2}, {-1, 3})}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(values_f((*out)[0]), (std::vector<float>{0, 3}));
}

TEST(Exporters, ConstantNodesServeAsInitializers) {
  bt::TempDir dir;
  auto rt = runtime();
  bt::ModelBuilder b(13, "constant_nodes");
  b.input("x", {2, 3});
  // Paddle2ONNX and TorchScript write weights and shapes as Constant nodes.
  onnx::NodeProto& w = b.node("Constant", {}, {"w"}, "w_const");
  onnx::TensorProto* t = bt::attr(w, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(3);
  for (float v : {1.f, 2.f, 3.f}) t->add_float_data(v);
  onnx::NodeProto& k = b.node("Constant", {}, {"k"}, "k_const");
  bt::set_float(k, "value_float", 10.f);
  onnx::NodeProto& shape = b.node("Constant", {}, {"shape"}, "shape_const");
  bt::set_ints(shape, "value_ints", {3, 2});
  b.node("Add", {"x", "w"}, {"s"}, "add");
  b.node("Mul", {"s", "k"}, {"m"}, "mul");
  b.node("Reshape", {"m", "shape"}, {"y"}, "reshape");
  b.output("y", {3, 2});
  auto out = run_model(*rt, b.save(dir), {{"x", floats({2, 3}, {0, 0, 0, 1, 1, 1})}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ((*out)[0].shape(), (Shape{3, 2}));
  EXPECT_EQ(values_f((*out)[0]), (std::vector<float>{10, 20, 30, 20, 30, 40}));
}

TEST(Exporters, InitializerListedAsInputIsADefaultAFeedOverrides) {
  bt::TempDir dir;
  auto rt = runtime();
  bt::ModelBuilder b(13, "overridable");
  b.input("x", {2});
  b.init_f32("w", {2}, {1, 2});
  b.input("w", {2});
  b.node("Add", {"x", "w"}, {"y"}, "add");
  b.output("y", {2});
  const std::string path = b.save(dir);
  auto model = rt->load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_EQ((*model)->inputs().size(), 2u);
  EXPECT_EQ((*model)->inputs()[1].name, "w");
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  ASSERT_TRUE(s.set_input("x", floats({2}, {0, 1})).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{1, 3}));  // the initializer
  ASSERT_TRUE(s.set_input("w", floats({2}, {10, 20})).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(values_f(s.output(0)), (std::vector<float>{10, 21}));  // the feed

  // A compiled artifact stores it as a constant.
  CompileOptions co;
  ASSERT_TRUE(rt->compile({{"main", path}}, dir.file("m.bpk"), co).ok());
  auto out = run_model(*rt, dir.file("m.bpk"), {{"x", floats({2}, {0, 1})}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(values_f((*out)[0]), (std::vector<float>{1, 3}));

  // Before IR version 4 an initializer is listed as an input as a matter of
  // course: a constant.
  b.model.set_ir_version(3);
  model = rt->load_model(b.save(dir, "ir3.onnx"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->inputs().size(), 1u);
}

class Opsets : public ::testing::TestWithParam<int> {};

TEST_P(Opsets, ModelsOfEveryOpsetFrom7To18Run) {
  const int opset = GetParam();
  bt::TempDir dir;
  auto rt = runtime();
  bt::ModelBuilder b(opset, "opset_" + std::to_string(opset));
  b.model.set_ir_version(opset < 8 ? 3 : opset < 10 ? 4 : 7);
  b.input("x", {2, 3});
  b.init_f32("w", {3}, {1, -2, 3});
  b.node("Add", {"x", "w"}, {"s"}, "add");
  b.node("Relu", {"s"}, {"r"}, "relu");
  bt::set_ints(b.node("Transpose", {"r"}, {"t"}, "transpose"), "perm", {1, 0});
  b.init_i64("flat", {1}, {-1});
  b.node("Reshape", {"t", "flat"}, {"y"}, "reshape");
  b.output("y", {6});
  auto out = run_model(*rt, b.save(dir), {{"x", floats({2, 3}, {0, 1, 2, 3, 4, 5})}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(values_f((*out)[0]), (std::vector<float>{1, 4, 0, 2, 5, 8}));
}
INSTANTIATE_TEST_SUITE_P(Exporters, Opsets, ::testing::Range(7, 19));

// ------------------------------------------------------------------ bad models

TEST(Exporters, BodyOutputTypeContradictingItsBodyIsAnErrorNamingTheNode) {
  bt::TempDir dir;
  auto rt = runtime();
  bt::ModelBuilder b(13, "body_type_lies");
  b.input("c", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
  b.input("x", {2});
  auto& node = b.node("If", {"c"}, {"y"}, "branch");
  onnx::GraphProto* t = graph_attr(node, "then_branch");
  t->set_name("then");
  onnx::NodeProto* cast = add_node(t, "Cast", {"x"}, {"a"}, "to_int");
  bt::set_int(*cast, "to", onnx::TensorProto::INT64);
  bt::set_type(t->add_output(), "a", onnx::TensorProto::FLOAT, std::nullopt);  // it is int64
  onnx::GraphProto* e = graph_attr(node, "else_branch");
  e->set_name("else");
  add_node(e, "Relu", {"x"}, {"r"}, "relu");
  bt::set_type(e->add_output(), "r", onnx::TensorProto::FLOAT, std::nullopt);
  b.untyped_output("y");
  auto out = run_model(*rt, b.save(dir), {{"c", boolean(true)}, {"x", floats({2}, {1, 2})}});
  ASSERT_FALSE(out.ok());
  EXPECT_ERROR_HAS(out.status(), "node 'to_int' (Cast)", "declared float32", "int64");
  // The other branch is fine.
  out = run_model(*rt, b.save(dir), {{"c", boolean(false)}, {"x", floats({2}, {-1, 2})}});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(values_f((*out)[0]), (std::vector<float>{0, 2}));
}

TEST(Exporters, DeclaredShapesContradictingTheDataAreErrorsNamingWhere) {
  bt::TempDir dir;
  auto rt = runtime();
  {  // A feed of another shape than the model fixes.
    bt::ModelBuilder b(13, "fixed_input");
    b.input("x", {2, 3});
    b.node("Relu", {"x"}, {"y"}, "relu");
    b.output("y", {2, 3});
    auto out = run_model(*rt, b.save(dir, "fixed.onnx"), {{"x", floats({2, 2}, {1, 2, 3, 4})}});
    ASSERT_FALSE(out.ok());
    EXPECT_ERROR_HAS(out.status(), "input 'x'", "[2,3]", "[2,2]");
  }
  {  // A value_info whose shape the node cannot produce.
    bt::ModelBuilder b(13, "value_info_lies");
    b.input("x", {"n", 3});
    b.node("Relu", {"x"}, {"r"}, "relu");
    b.value_info("r", {"n", 4});
    b.node("Neg", {"r"}, {"y"}, "neg");
    b.output("y", {"n", 3});
    auto out = run_model(*rt, b.save(dir, "value_info.onnx"), {{"x", floats({1, 3}, {1, 2, 3})}});
    ASSERT_FALSE(out.ok());
    EXPECT_ERROR_HAS(out.status(), "node 'relu' (Relu)", "output 'r'", "declared with shape [?,4]",
                     "inferred [1,3]");
  }
  {  // A branch that makes another shape than the If's output declares.
    bt::ModelBuilder b(13, "branch_shape_lies");
    b.input("c", std::vector<bt::Dim>{}, onnx::TensorProto::BOOL);
    b.input("x", {"n"});
    auto& node = b.node("If", {"c"}, {"y"}, "branch");
    onnx::GraphProto* t = graph_attr(node, "then_branch");
    t->set_name("then");
    bt::set_int(*add_node(t, "Concat", {"x", "x"}, {"a"}, "twice"), "axis", 0);
    empty_typed_output(t, "a");
    onnx::GraphProto* e = graph_attr(node, "else_branch");
    e->set_name("else");
    add_node(e, "Relu", {"x"}, {"r"}, "relu");
    empty_typed_output(e, "r");
    b.output("y", {5});
    auto out = run_model(*rt, b.save(dir, "branch.onnx"),
                         {{"c", boolean(true)}, {"x", floats({3}, {1, 2, 3})}});
    ASSERT_FALSE(out.ok());
    EXPECT_ERROR_HAS(out.status(), "node 'branch' (If)", "output 'y'", "[5]", "[6]");
  }
}

}  // namespace
}  // namespace backplane
