// Constant folding runs CpuRef's kernels (pipeline/constant_folding.hpp):
// nodes whose inputs are all constants become constants computed by the
// reference backend through the ABI, for ops the old built-in evaluator never
// had; the size bound holds; without an evaluator ir folds only Shape, Size
// and Constant. Specializer (pipeline/front_end.hpp) infers one signature after
// another incrementally and gives what specialize_graph gives.
#include "ir/constant_folding.hpp"
#include "onnx/importer.hpp"
#include "pipeline/constant_folding.hpp"
#include "pipeline/front_end.hpp"
#include "support/expect_error.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>

namespace backplane {
namespace {

namespace bt = backplane::test;

Result<ir::Graph> import(const bt::ModelBuilder& b) {
  std::string bytes = b.bytes();
  return onnx_import::import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
}

bool has_op(const ir::Graph& g, const std::string& op) {
  for (const ir::Node& n : g.nodes)
    if (n.op_type == op) return true;
  return false;
}

template <class T>
std::vector<T> constant_values(const ir::Graph& g, const std::string& name) {
  const Tensor* t = g.constant(g.find_value(name));
  if (t == nullptr) {
    ADD_FAILURE() << "'" << name << "' is not a constant";
    return {};
  }
  return std::vector<T>(t->data_as<T>(), t->data_as<T>() + t->numel());
}

// Counts the nodes it is asked to fold and hands them to CpuRef.
class CountingEvaluator : public ir::ConstantEvaluator {
 public:
  Result<bool> evaluate(const ir::Graph& graph, const ir::Node& node,
                        const std::vector<const Tensor*>& inputs,
                        std::vector<Tensor>& outputs) const override {
    ++calls;
    return reference_constant_evaluator()->evaluate(graph, node, inputs, outputs);
  }
  mutable std::atomic<int> calls{0};
};

// Equal -> Where -> ReduceSum of constants, then added to an input: the first
// three fold (the old evaluator had no ReduceSum) and the sum is CpuRef's.
TEST(ConstantFolding, FoldsWhereEqualReduceSumOnCpuRef) {
  bt::ModelBuilder b(13);
  b.input("x", {1});
  b.init_f32("a", {4}, {1, 2, 3, 4});
  b.init_f32("b", {4}, {1, 5, 3, 6});
  b.node("Equal", {"a", "b"}, {"eq"});
  b.node("Where", {"eq", "a", "b"}, {"w"});
  bt::set_int(b.node("ReduceSum", {"w"}, {"sum"}), "keepdims", 1);
  b.node("Add", {"x", "sum"}, {"y"});
  b.output("y", {1});
  auto g = import(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE(ir::infer_shapes(*g, {}, infer_options()).ok());
  EXPECT_FALSE(has_op(*g, "Equal"));
  EXPECT_FALSE(has_op(*g, "Where"));
  EXPECT_FALSE(has_op(*g, "ReduceSum"));
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(constant_values<float>(*g, "sum"), std::vector<float>{1 + 5 + 3 + 6});
  // The portable path (no input shapes) folds them too.
  auto portable = import(b);
  ASSERT_TRUE(portable.ok());
  ASSERT_TRUE(ir::fold_constants(*portable, infer_options()).ok());
  EXPECT_EQ(portable->nodes.size(), 1u);
  EXPECT_EQ(constant_values<float>(*portable, "sum"), std::vector<float>{15});
}

// Without an evaluator, only what needs no kernel folds: Shape, not Gather.
TEST(ConstantFolding, WithoutAnEvaluatorOnlyShapeSizeAndConstantFold) {
  bt::ModelBuilder b(13);
  b.input("x", {2, 3});
  b.init_i64("zero", {}, {0});
  b.node("Shape", {"x"}, {"s"});
  b.node("Gather", {"s", "zero"}, {"d0"});
  b.node("Size", {"x"}, {"n"});
  b.untyped_output("d0");
  b.untyped_output("n");
  auto g = import(b);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(ir::infer_shapes(*g, {}, ir::InferOptions{}).ok());
  EXPECT_FALSE(has_op(*g, "Shape"));
  EXPECT_FALSE(has_op(*g, "Size"));
  EXPECT_TRUE(has_op(*g, "Gather"));
  EXPECT_EQ(constant_values<int64_t>(*g, "n"), std::vector<int64_t>{6});
  auto folded = import(b);
  ASSERT_TRUE(folded.ok());
  ASSERT_TRUE(ir::infer_shapes(*folded, {}, infer_options()).ok());
  EXPECT_TRUE(folded->nodes.empty());
  EXPECT_EQ(constant_values<int64_t>(*folded, "d0"), std::vector<int64_t>{2});
}

// Folding is bounded by the size of what it would keep.
TEST(ConstantFolding, LeavesLargeResultsToRunTime) {
  bt::ModelBuilder b(13);
  b.input("x", {4, 4});
  b.init_f32("c", {1}, {3});
  b.init_i64("shape", {2}, {4, 4});
  b.node("Expand", {"c", "shape"}, {"e"});
  b.node("Add", {"x", "e"}, {"y"});
  b.output("y", {4, 4});
  CountingEvaluator counting;
  ir::InferOptions small;
  small.evaluator = &counting;
  small.max_fold_elements = 15;
  auto g = import(b);
  ASSERT_TRUE(g.ok());
  ASSERT_TRUE(ir::infer_shapes(*g, {}, small).ok());
  EXPECT_TRUE(has_op(*g, "Expand"));
  EXPECT_EQ(counting.calls.load(), 0);
  ir::InferOptions enough = small;
  enough.max_fold_elements = 16;
  auto h = import(b);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(ir::infer_shapes(*h, {}, enough).ok());
  EXPECT_FALSE(has_op(*h, "Expand"));
  EXPECT_EQ(counting.calls.load(), 1);
  EXPECT_EQ(constant_values<float>(*h, "e"), std::vector<float>(16, 3.0f));
}

// An op CpuRef does not run is not folded; the evaluator says so, no error.
TEST(ConstantFolding, AnOpCpuRefLacksIsLeftInTheGraph) {
  ir::Graph g;
  g.opsets[""] = 13;
  Tensor a(DType::kFloat32, {2});
  a.data_as<float>()[0] = 1;
  a.data_as<float>()[1] = 2;
  const int in = g.add_constant("a", a);
  ir::Value out;
  out.name = "y";
  out.dtype = DType::kFloat32;
  out.shape = {2};
  out.has_shape = true;
  const int y = g.add_value(out);
  ir::Node node;
  node.name = "n";
  node.op_type = "NoSuchKernel";
  node.inputs = {in};
  node.outputs = {y};
  g.nodes.push_back(node);
  std::vector<Tensor> outs = {Tensor(DType::kFloat32, {2})};
  const ir::ConstantEvaluator* cpuref = reference_constant_evaluator();
  ASSERT_NE(cpuref, nullptr);
  auto r = cpuref->evaluate(g, g.nodes[0], {g.constant(in)}, outs);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(*r);
}

// A model whose target shape needs Sqrt to fold (the old evaluator had no
// Sqrt): Reshape's shape input is constant only once CpuRef computes it.
TEST(ConstantFolding, ModelNeedingAnOpTheOldEvaluatorLackedLoadsAndRuns) {
  bt::ModelBuilder b(13);
  b.input("x", {6});
  b.init_i64("sq", {2}, {4, 9});
  bt::set_int(b.node("Cast", {"sq"}, {"sqf"}), "to", onnx::TensorProto::FLOAT);
  b.node("Sqrt", {"sqf"}, {"rootf"});
  bt::set_int(b.node("Cast", {"rootf"}, {"root"}), "to", onnx::TensorProto::INT64);
  b.node("Reshape", {"x", "root"}, {"y"}, "reshape");
  b.untyped_output("y");
  bt::TempDir tmp;
  RuntimeOptions options;
  options.dynamic_backends = false;
  options.log_level = LogLevel::kOff;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  auto model = (*rt)->load_model(b.save(tmp));
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE((*session)->set_input("x", Tensor::copy_of(DType::kFloat32, {6}, x.data())).ok());
  Status s = (*session)->run();
  ASSERT_TRUE(s.ok()) << s.message();
  const Tensor& y = (*session)->output(0);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(std::vector<float>(y.data_as<float>(), y.data_as<float>() + 6), x);
}

// A graph whose shape arithmetic folds differently per signature: Shape ->
// Gather -> Unsqueeze -> Concat -> Reshape (small int64 constants), and a
// ConstantOfShape of the input's shape (a large folded constant), beside
// nodes no signature changes (a Mul by a weight).
bt::ModelBuilder shape_arithmetic_model() {
  bt::ModelBuilder b(13);
  b.input("x", {"b", "n"});
  b.random_weight("w", {1, 1});
  b.init_i64("one", {}, {1});
  b.init_i64("zero", {1}, {0});
  b.init_i64("minus_one", {1}, {-1});
  b.node("Mul", {"x", "w"}, {"xw"});
  b.node("Shape", {"xw"}, {"s"});
  b.node("Gather", {"s", "one"}, {"n_scalar"});
  b.node("Unsqueeze", {"n_scalar", "zero"}, {"n_vec"});
  bt::set_int(b.node("Concat", {"minus_one", "n_vec"}, {"target"}), "axis", 0);
  b.node("Reshape", {"xw", "target"}, {"r"});
  b.node("ConstantOfShape", {"s"}, {"ones_f"});
  bt::set_int(b.node("Cast", {"ones_f"}, {"ones"}), "to", onnx::TensorProto::FLOAT);
  b.node("Add", {"r", "ones"}, {"y"});
  b.untyped_output("y");
  return b;
}

void expect_same_graph(const ir::Graph& a, const ir::Graph& b, const std::string& at) {
  ASSERT_EQ(a.nodes.size(), b.nodes.size()) << at;
  for (size_t i = 0; i < a.nodes.size(); ++i) EXPECT_EQ(a.nodes[i].name, b.nodes[i].name) << at;
  ASSERT_EQ(a.values.size(), b.values.size()) << at;
  for (size_t v = 0; v < a.values.size(); ++v) {
    EXPECT_EQ(a.values[v].dtype, b.values[v].dtype) << at << " " << a.values[v].name;
    EXPECT_EQ(a.values[v].shape, b.values[v].shape) << at << " " << a.values[v].name;
    EXPECT_EQ(a.values[v].is_constant(), b.values[v].is_constant())
        << at << " " << a.values[v].name;
    const Tensor* ta = a.constant(static_cast<int>(v));
    const Tensor* tb = b.constant(static_cast<int>(v));
    if (ta == nullptr || tb == nullptr) continue;
    ASSERT_EQ(ta->size_bytes(), tb->size_bytes()) << at << " " << a.values[v].name;
    EXPECT_EQ(std::memcmp(ta->data(), tb->data(), ta->size_bytes()), 0)
        << at << ": constant '" << a.values[v].name << "' differs";
  }
}

// Everything a specialised graph is: the digest (nodes, values, constant
// keys) and every constant's bytes under its key.
void expect_same_specialization(const ir::Graph& want, const ir::Graph& got,
                                const std::string& at) {
  expect_same_graph(want, got, at);
  EXPECT_EQ(specialization_digest(want), specialization_digest(got)) << at;
  ASSERT_EQ(want.constants.size(), got.constants.size()) << at;
  for (const auto& [key, tensor] : want.constants) {
    auto it = got.constants.find(key);
    ASSERT_NE(it, got.constants.end()) << at << ": no constant '" << key << "'";
    ASSERT_EQ(it->second.size_bytes(), tensor.size_bytes()) << at << " " << key;
    EXPECT_EQ(std::memcmp(it->second.data(), tensor.data(), tensor.size_bytes()), 0)
        << at << " " << key;
  }
  for (size_t v = 0; v < want.values.size(); ++v)
    EXPECT_EQ(want.values[v].producer, got.values[v].producer) << at << " " << want.values[v].name;
}

// One signature after another, some again, one whose ConstantOfShape is
// too large to fold (the graph's structure changes and changes back), one
// invalid between valid ones, each result's storage handed to the next
// call: every graph equals specialize_graph's, and every error its error.
TEST(Specializer, GivesWhatSpecializeGraphGivesForEverySignature) {
  auto portable = import(shape_arithmetic_model());
  ASSERT_TRUE(portable.ok()) << portable.status().message();
  ASSERT_TRUE(ir::fold_constants(*portable, infer_options()).ok());
  Specializer specializer(*portable, "m/", nullptr);
  std::unique_ptr<ir::Graph> storage;
  const std::vector<Shape> signatures = {{1, 8}, {1, 9},       {1, 10}, {4, 10}, {1, 8},
                                         {1},    {2048, 4096}, {1, 10}, {0, 3},  {1, 10}};
  for (const Shape& sig : signatures) {
    const std::string at = shape_to_string(sig);
    Result<std::unique_ptr<ir::Graph>> want = specialize_graph(*portable, {{"x", sig}}, "m/");
    Result<std::unique_ptr<ir::Graph>> got =
        specializer.specialize({{"x", sig}}, std::move(storage));
    ASSERT_EQ(want.ok(), got.ok()) << at << ": " << (want.ok() ? got : want).status().message();
    if (!want.ok()) {
      EXPECT_EQ(want.status().message(), got.status().message()) << at;
      continue;
    }
    expect_same_specialization(**want, **got, at);
    storage = std::move(got).value();
  }
}

// A signature infers again only the nodes its new shapes reach: x's chain
// when x changes, p's node when p does, nothing when nothing does.
TEST(Specializer, InfersAgainOnlyWhatNewShapesReach) {
  bt::ModelBuilder b(13);
  b.input("x", {"n"});
  b.input("p", {"m"});
  b.node("Relu", {"x"}, {"rx"});
  b.node("Neg", {"rx"}, {"nx"});
  b.node("Relu", {"p"}, {"rp"});
  b.untyped_output("nx");
  b.untyped_output("rp");
  auto portable = import(b);
  ASSERT_TRUE(portable.ok()) << portable.status().message();
  Specializer specializer(*portable, "", nullptr);
  auto at = [&](int64_t n, int64_t m) -> size_t {
    Result<std::unique_ptr<ir::Graph>> g = specializer.specialize({{"x", {n}}, {"p", {m}}});
    EXPECT_TRUE(g.ok()) << g.status().message();
    if (g.ok()) {
      EXPECT_EQ((*g)->values[(*g)->find_value("nx")].shape, (Shape{n}));
      EXPECT_EQ((*g)->values[(*g)->find_value("rp")].shape, (Shape{m}));
    }
    return specializer.reinferred();
  };
  EXPECT_EQ(at(2, 3), 3u);
  EXPECT_EQ(at(2, 3), 0u);
  EXPECT_EQ(at(2, 4), 1u);
  EXPECT_EQ(at(5, 4), 2u);
  EXPECT_EQ(at(6, 7), 3u);
}

}  // namespace
}  // namespace backplane
