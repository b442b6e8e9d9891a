// Tests of ir::infer_shapes: dtype/shape inference, input shape resolution and
// constant folding, on models built with the onnx protobuf API and imported.
#include "ir/graph.hpp"
#include "onnx/importer.hpp"
#include "pipeline/constant_folding.hpp"
#include "support/expect_error.hpp"
#include "support/model_builder.hpp"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>

namespace backplane {
namespace {

using namespace test;  // ModelBuilder, Dim, set_int, ...

constexpr int F = onnx::TensorProto::FLOAT;
constexpr int I64 = onnx::TensorProto::INT64;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Imports `b` (as "m.onnx") and runs infer_shapes, folding as the pipeline
// does (on CpuRef's kernels).
Result<ir::Graph> infer(const ModelBuilder& b, const std::map<std::string, Shape>& shapes = {}) {
  std::string bytes = b.bytes();
  BP_ASSIGN_OR_RETURN(ir::Graph g,
                      onnx_import::import_bytes(bytes.data(), bytes.size(), "m.onnx", "."));
  BP_RETURN_IF_ERROR(ir::infer_shapes(g, shapes, infer_options()));
  return g;
}

Shape shape_of(const ir::Graph& g, const std::string& name) {
  int id = g.find_value(name);
  EXPECT_GE(id, 0) << name;
  return id < 0 ? Shape{} : g.values[id].shape;
}
DType dtype_of(const ir::Graph& g, const std::string& name) {
  int id = g.find_value(name);
  return id < 0 ? DType::kUndefined : g.values[id].dtype;
}
template <class T>
std::vector<T> const_values(const ir::Graph& g, const std::string& name) {
  const Tensor* t = g.constant(g.find_value(name));
  if (t == nullptr) {
    ADD_FAILURE() << "'" << name << "' is not a constant";
    return {};
  }
  return std::vector<T>(t->data_as<T>(), t->data_as<T>() + t->numel());
}

// A model with one node `op` on input x of `dims`; output "y".
ModelBuilder unary(const std::string& op, std::vector<Dim> dims, int64_t opset = 13,
                   int elem = onnx::TensorProto::FLOAT) {
  ModelBuilder b(opset);
  b.input("x", dims, elem).untyped_output("y");
  b.node(op, {"x"}, {"y"}, "n");
  return b;
}

// ---------------------------------------------------------------- graph inputs

TEST(ShapeInference, SymbolicDimWithoutGivenShapeIsAnError) {
  ModelBuilder b = unary("Relu", {"batch", 3});
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "m.onnx",
                   "input 'x' dim 0 ('batch') is symbolic; give a concrete shape");
}

TEST(ShapeInference, GivenShapeResolvesSymbolicDims) {
  ModelBuilder b = unary("Relu", {"batch", 3});
  auto g = infer(b, {{"x", {4, 3}}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "x"), (Shape{4, 3}));
  EXPECT_EQ(shape_of(*g, "y"), (Shape{4, 3}));
  EXPECT_EQ(dtype_of(*g, "y"), DType::kFloat32);
}

TEST(ShapeInference, GivenShapeMustAgreeWithTheModel) {
  ModelBuilder b = unary("Relu", {"batch", 3});
  auto g = infer(b, {{"x", {4, 3, 1}}});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "input 'x'", "rank 3", "rank 2");
  g = infer(b, {{"x", {4, 5}}});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "input 'x'", "[4,5]", "dim 1 = 3");
  g = infer(b, {{"nope", {1}}, {"x", {4, 3}}});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "'nope'", "not a graph input");
}

TEST(ShapeInference, InputWithoutShapeNeedsAGivenShape) {
  ModelBuilder b(13);
  b.input("x", std::nullopt).untyped_output("y");
  b.node("Relu", {"x"}, {"y"});
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "input 'x' has no shape");
  g = infer(b, {{"x", {2, 2}}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 2}));
}

// ---------------------------------------------------------------- folding

TEST(ShapeInference, FoldsTorchDynamicReshapeChain) {
  // y = x.reshape(x.shape[0], -1), as torch.onnx.export writes it.
  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{"N", 3, 4, 5}).untyped_output("y");
  b.node("Shape", {"x"}, {"s"});
  b.init_i64("zero", {}, {0});
  b.node("Gather", {"s", "zero"}, {"n"});
  b.init_i64("axes0", {1}, {0});
  b.node("Unsqueeze", {"n", "axes0"}, {"n1"});
  b.init_i64("minus1", {1}, {-1});
  set_int(b.node("Concat", {"n1", "minus1"}, {"shape"}), "axis", 0);
  b.node("Reshape", {"x", "shape"}, {"y"}, "reshape");
  auto g = infer(b, {{"x", {2, 3, 4, 5}}});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 60}));
  EXPECT_EQ(const_values<int64_t>(*g, "shape"), (std::vector<int64_t>{2, -1}));
  ASSERT_EQ(g->nodes.size(), 1u);  // Shape, Gather, Unsqueeze and Concat folded away
  EXPECT_EQ(g->nodes[0].name, "reshape");
  EXPECT_EQ(g->values[g->find_value("y")].producer, 0);
  EXPECT_TRUE(ir::verify(*g).ok()) << ir::verify(*g).message();
}

TEST(ShapeInference, ReshapeShapeMustBeConstant) {
  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{2, 6}).input("s", std::vector<Dim>{2}, I64).untyped_output("y");
  b.node("Reshape", {"x", "s"}, {"y"}, "X");
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'X' (Reshape): input 'shape'",
                   "must be constant to infer a static shape");
}

TEST(ShapeInference, FoldsArithmeticCastWhereRangeAndFriends) {
  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{2, 3}).untyped_output("y");
  b.init_i64("a", {3}, {1, 2, 3});
  b.init_i64("two", {}, {2});
  b.node("Mul", {"a", "two"}, {"m"});               // 2 4 6
  b.node("Sub", {"m", "a"}, {"d"});                 // 1 2 3
  b.node("Div", {"m", "two"}, {"q"});               // 1 2 3
  b.node("Equal", {"q", "d"}, {"eq"});              // T T T
  b.node("Neg", {"a"}, {"neg"});                    // -1 -2 -3
  b.node("Where", {"eq", "neg", "a"}, {"w"});       // -1 -2 -3
  set_int(b.node("Cast", {"w"}, {"wf"}), "to", F);  // float
  b.init_i64("r0", {}, {5});
  b.init_i64("r1", {}, {-1});
  b.init_i64("rd", {}, {-2});
  b.node("Range", {"r0", "r1", "rd"}, {"range"});  // 5 3 1
  b.init_i64("cshape", {2}, {2, 2});
  auto& cos = b.node("ConstantOfShape", {"cshape"}, {"cs"});
  auto* t = attr(cos, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::INT32);
  t->add_dims(1);
  t->add_int32_data(7);
  b.init_i64("eshape", {2}, {2, 1});
  b.node("Expand", {"a", "eshape"}, {"ex"});  // [[1,2,3],[1,2,3]]
  set_ints(b.node("Transpose", {"ex"}, {"tr"}), "perm", {1, 0});
  b.node("Max", {"a", "two", "q"}, {"mx"});  // 2 2 3
  b.node("Add", {"x", "wf"}, {"y"});
  // Folded values nobody reads are dropped by remove_dead; keep these as outputs.
  for (const char* o : {"neg", "eq", "range", "cs", "tr", "mx"}) b.untyped_output(o);
  auto g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(const_values<int64_t>(*g, "neg"), (std::vector<int64_t>{-1, -2, -3}));
  EXPECT_EQ(const_values<float>(*g, "wf"), (std::vector<float>{-1, -2, -3}));
  EXPECT_EQ(dtype_of(*g, "eq"), DType::kBool);
  EXPECT_EQ(const_values<int64_t>(*g, "range"), (std::vector<int64_t>{5, 3, 1}));
  EXPECT_EQ(const_values<int32_t>(*g, "cs"), (std::vector<int32_t>{7, 7, 7, 7}));
  EXPECT_EQ(shape_of(*g, "tr"), (Shape{3, 2}));
  EXPECT_EQ(const_values<int64_t>(*g, "tr"), (std::vector<int64_t>{1, 1, 2, 2, 3, 3}));
  EXPECT_EQ(const_values<int64_t>(*g, "mx"), (std::vector<int64_t>{2, 2, 3}));
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].op_type, "Add");
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 3}));
}

TEST(ShapeInference, FoldsSliceWithNegativeStepsAndGatherNegativeIndex) {
  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{1}).untyped_output("y");
  b.init_i64("v", {6}, {10, 11, 12, 13, 14, 15});
  b.init_i64("st", {1}, {-1});
  b.init_i64("en", {1}, {kMin});
  b.init_i64("ax", {1}, {0});
  b.init_i64("sp", {1}, {-2});
  b.node("Slice", {"v", "st", "en", "ax", "sp"}, {"rev"});  // 15 13 11
  b.init_i64("gi", {}, {-1});
  b.node("Gather", {"v", "gi"}, {"last"});  // 15
  b.node("Shape", {"x"}, {"y"});
  b.untyped_output("rev").untyped_output("last");
  auto g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(const_values<int64_t>(*g, "rev"), (std::vector<int64_t>{15, 13, 11}));
  EXPECT_EQ(shape_of(*g, "last"), Shape{});
  EXPECT_EQ(const_values<int64_t>(*g, "last"), (std::vector<int64_t>{15}));
  // A Shape of a non-constant input with a static shape folds too.
  EXPECT_EQ(const_values<int64_t>(*g, "y"), (std::vector<int64_t>{1}));
  EXPECT_TRUE(g->nodes.empty());
}

// ---------------------------------------------------------------- type checks

TEST(ShapeInference, DtypeMismatchNamesTheNode) {
  ModelBuilder b(13);
  b.input("a", std::vector<Dim>{3}).input("b", std::vector<Dim>{3}, I64).untyped_output("y");
  b.node("Add", {"a", "b"}, {"y"}, "add7");
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "m.onnx: node 'add7' (Add)", "input 'B' ('b') has dtype int64",
                   "input 'A' ('a') has float32 (both are T)");
}

TEST(ShapeInference, BroadcastMismatch) {
  ModelBuilder b(13);
  b.input("a", std::vector<Dim>{2, 3}).input("b", std::vector<Dim>{4}).untyped_output("y");
  b.node("Mul", {"a", "b"}, {"y"}, "mul");
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'mul' (Mul)", "cannot broadcast", "'a' [2,3]", "'b' [4]");
}

TEST(ShapeInference, BroadcastShapes) {
  ModelBuilder b(13);
  b.input("a", std::vector<Dim>{2, 1, 3}).input("b", std::vector<Dim>{4, 1}).untyped_output("y");
  b.input("c", std::vector<Dim>{2, 4, 3}, onnx::TensorProto::BOOL);
  b.node("Add", {"a", "b"}, {"s"});
  b.node("Where", {"c", "s", "a"}, {"y"});
  b.node("Less", {"a", "b"}, {"lt"});
  b.node("Not", {"c"}, {"nc"});
  auto g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "s"), (Shape{2, 4, 3}));
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 4, 3}));
  EXPECT_EQ(dtype_of(*g, "lt"), DType::kBool);
}

TEST(ShapeInference, DeclaredShapeContradiction) {
  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{2, 3}).output("y", std::vector<Dim>{3, 2});
  b.node("Relu", {"x"}, {"y"}, "r");
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'r' (Relu)", "output 'y'", "declared with shape [3,2]",
                   "inferred [2,3]");
  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{2, 3}).untyped_output("y");
  c.value_info("h", std::vector<Dim>{"n", 3}, I64);
  c.node("Relu", {"x"}, {"h"}, "r");
  c.node("Relu", {"h"}, {"y"});
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "output 'h' is declared int64", "inferred float32");
}

TEST(ShapeInference, UnknownOpInAnotherDomain) {
  ModelBuilder b(13);
  auto* os = b.model.add_opset_import();
  os->set_domain("com.acme");
  os->set_version(1);
  b.input("x", std::vector<Dim>{3}).untyped_output("y");
  b.node("Relu", {"x"}, {"y"}, "r").set_domain("com.acme");
  auto g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(g.status(), "node 'r' (Relu): unsupported operator 'Relu' (domain 'com.acme')");
  EXPECT_TRUE(ir::is_known_op("", "Conv"));
  EXPECT_TRUE(ir::is_known_op("com.microsoft", "Gelu"));
  EXPECT_FALSE(ir::is_known_op("", "FooBar"));
}

// ---------------------------------------------------------------- conv / pool

Result<ir::Graph> conv(std::vector<Dim> x, std::vector<int64_t> w,
                       const std::function<void(onnx::NodeProto&)>& attrs, bool bias = false) {
  ModelBuilder b(13);
  b.input("x", x).untyped_output("y");
  b.weight("w", w);
  std::vector<std::string> ins{"x", "w"};
  if (bias) {
    b.weight("bias", {w[0]});
    ins.push_back("bias");
  }
  attrs(b.node("Conv", ins, {"y"}, "Conv_12"));
  return infer(b);
}

TEST(ShapeInference, ConvPadsStridesDilationsGroupsAutoPad) {
  auto g = conv(
      {1, 3, 32, 32}, {8, 3, 3, 3},
      [](auto& n) {
        set_ints(n, "pads", {1, 1, 1, 1});
      },
      true);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 8, 32, 32}));
  g = conv({1, 3, 32, 31}, {8, 3, 3, 3}, [](auto& n) {
    set_string(n, "auto_pad", "SAME_UPPER");
    set_ints(n, "strides", {2, 2});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 8, 16, 16}));
  g = conv({1, 3, 32, 32}, {8, 3, 3, 3}, [](auto& n) {
    set_string(n, "auto_pad", "VALID");
    set_ints(n, "dilations", {2, 3});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 8, 28, 26}));  // 32-5+1, 32-7+1
  g = conv({2, 8, 10, 10}, {16, 2, 3, 3}, [](auto& n) {
    set_int(n, "group", 4);
    set_ints(n, "strides", {3, 3});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 16, 3, 3}));
  g = conv({1, 4, 9}, {4, 4, 3}, [](auto& n) {  // 1-D conv, asymmetric pads
    set_ints(n, "pads", {2, 0});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 4, 9}));
}

TEST(ShapeInference, ConvErrors) {
  auto g = conv({1, 3, 8, 8}, {8, 3, 3}, [](auto&) {});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "m.onnx: node 'Conv_12' (Conv): weight 'w' has 3 dims, expected 4");
  g = conv({1, 4, 8, 8}, {8, 3, 3, 3}, [](auto&) {});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'Conv_12' (Conv)", "4 channels", "expects 3");
  g = conv({1, 3, 2, 2}, {8, 3, 3, 3}, [](auto&) {});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "effective kernel size 3");
  g = conv({1, 3, 8, 8}, {8, 3, 3, 3}, [](auto& n) { set_ints(n, "strides", {1}); });
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "attribute 'strides' has 1 values, expected 2");
}

TEST(ShapeInference, ConvTranspose) {
  auto run = [](const std::function<void(onnx::NodeProto&)>& attrs) {
    ModelBuilder b(13);
    b.input("x", std::vector<Dim>{1, 4, 5, 5}).untyped_output("y");
    b.weight("w", {4, 2, 3, 3});
    auto& n = b.node("ConvTranspose", {"x", "w"}, {"y"});
    attrs(n);
    return infer(b);
  };
  auto g = run([](auto& n) { set_ints(n, "strides", {2, 2}); });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 2, 11, 11}));
  g = run([](auto& n) {
    set_ints(n, "strides", {2, 2});
    set_ints(n, "pads", {1, 1, 1, 1});
    set_ints(n, "output_padding", {1, 0});
    set_int(n, "group", 2);
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 4, 10, 9}));
  g = run([](auto& n) {
    set_ints(n, "strides", {2, 2});
    set_ints(n, "output_shape", {10, 10});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 2, 10, 10}));
  g = run([](auto& n) {
    set_ints(n, "strides", {3, 3});
    set_string(n, "auto_pad", "SAME_LOWER");
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 2, 15, 15}));
}

TEST(ShapeInference, PoolsWithCeilModeAndIndices) {
  auto run = [](const std::string& op, std::vector<Dim> x,
                const std::function<void(onnx::NodeProto&)>& attrs, int64_t opset = 13) {
    ModelBuilder b(opset);
    b.input("x", x).untyped_output("y");
    auto& n = b.node(
        op, {"x"},
        op == "MaxPool" ? std::vector<std::string>{"y", "idx"} : std::vector<std::string>{"y"});
    attrs(n);
    return infer(b);
  };
  auto g = run("MaxPool", {1, 2, 6, 6}, [](auto& n) {
    set_ints(n, "kernel_shape", {3, 3});
    set_ints(n, "strides", {2, 2});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 2, 2, 2}));
  EXPECT_EQ(dtype_of(*g, "idx"), DType::kInt64);
  EXPECT_EQ(shape_of(*g, "idx"), (Shape{1, 2, 2, 2}));
  g = run("MaxPool", {1, 2, 6, 6}, [](auto& n) {
    set_ints(n, "kernel_shape", {3, 3});
    set_ints(n, "strides", {2, 2});
    set_int(n, "ceil_mode", 1);
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 2, 3, 3}));
  // The last window would start in the end padding: dropped (ceil gives 4, not 3... here 3).
  g = run("AveragePool", {1, 1, 5, 5}, [](auto& n) {
    set_ints(n, "kernel_shape", {2, 2});
    set_ints(n, "strides", {2, 2});
    set_ints(n, "pads", {1, 1, 1, 1});
    set_int(n, "ceil_mode", 1);
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 1, 3, 3}));
  g = run("MaxPool", {1, 1, 7, 7}, [](auto& n) {
    set_ints(n, "kernel_shape", {3, 3});
    set_ints(n, "dilations", {2, 2});
    set_string(n, "auto_pad", "SAME_LOWER");
    set_ints(n, "strides", {2, 2});
  });
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 1, 4, 4}));
  g = run("GlobalAveragePool", {2, 5, 7, 3}, [](auto&) {});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 5, 1, 1}));
  g = run("AveragePool", {1, 1, 5, 5}, [](auto&) {});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "(AveragePool): required attribute 'kernel_shape' is missing");
}

// ---------------------------------------------------------------- linear algebra

TEST(ShapeInference, GemmTransposes) {
  auto run = [](std::vector<Dim> a, std::vector<Dim> bs, int64_t ta, int64_t tb,
                std::vector<int64_t> c) {
    ModelBuilder b(13);
    b.input("a", a).input("b", bs).untyped_output("y");
    b.weight("c", c);
    auto& n = b.node("Gemm", {"a", "b", "c"}, {"y"}, "gemm");
    set_int(n, "transA", ta);
    set_int(n, "transB", tb);
    return infer(b);
  };
  auto g = run({4, 3}, {5, 4}, 1, 1, {5});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{3, 5}));
  g = run({3, 4}, {4, 5}, 0, 0, {3, 1});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{3, 5}));
  g = run({3, 4}, {5, 4}, 0, 0, {5});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'gemm' (Gemm)", "inner dims differ");
  g = run({3, 4}, {4, 5}, 0, 0, {4});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "C 'c' [4] cannot be broadcast to [3,5]");
}

TEST(ShapeInference, MatMulBatchedBroadcastAndVectors) {
  auto run = [](std::vector<Dim> a, std::vector<Dim> bs) {
    ModelBuilder b(13);
    b.input("a", a).input("b", bs).untyped_output("y");
    b.node("MatMul", {"a", "b"}, {"y"}, "mm");
    return infer(b);
  };
  auto g = run({2, 1, 3, 4}, {5, 4, 6});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 5, 3, 6}));
  g = run({4}, {2, 4, 6});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 6}));
  g = run({3, 4}, {4});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{3}));
  g = run({4}, {4});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), Shape{});
  g = run({2, 3, 4}, {2, 5, 6});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'mm' (MatMul)", "inner dims differ", "K=4", "K=5");
  g = run({2, 3, 4}, {3, 4, 6});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "batch dims");
}

// ---------------------------------------------------------------- shape manipulation

TEST(ShapeInference, ConcatAndMismatch) {
  ModelBuilder b(13);
  b.input("a", std::vector<Dim>{2, 3}).input("c", std::vector<Dim>{2, 5}).untyped_output("y");
  set_int(b.node("Concat", {"a", "c"}, {"y"}), "axis", -1);
  auto g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 8}));
  ModelBuilder bad(13);
  bad.input("a", std::vector<Dim>{2, 3}).input("c", std::vector<Dim>{3, 3}).untyped_output("y");
  set_int(bad.node("Concat", {"a", "c"}, {"y"}, "cat"), "axis", 1);
  g = infer(bad);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'cat' (Concat)",
                   "'c' [3,3] does not match 'a' [2,3] in dim 0");
}

TEST(ShapeInference, SplitAttributeAndInput) {
  ModelBuilder a(11);
  a.input("x", std::vector<Dim>{2, 10}).untyped_output("p");
  auto& n = a.node("Split", {"x"}, {"p", "q", "r"});
  set_int(n, "axis", -1);
  set_ints(n, "split", {2, 3, 5});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "q"), (Shape{2, 3}));
  EXPECT_EQ(shape_of(*g, "r"), (Shape{2, 5}));

  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{6, 4}).untyped_output("p");
  b.init_i64("s", {2}, {1, 5});
  b.node("Split", {"x", "s"}, {"p", "q"});
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "p"), (Shape{1, 4}));
  EXPECT_EQ(shape_of(*g, "q"), (Shape{5, 4}));

  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{6, 4}).untyped_output("p");
  c.node("Split", {"x"}, {"p", "q", "r"});
  g = infer(c);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "r"), (Shape{2, 4}));

  ModelBuilder d(13);
  d.input("x", std::vector<Dim>{7, 4}).untyped_output("p");
  d.node("Split", {"x"}, {"p", "q"}, "sp");
  g = infer(d);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'sp' (Split)", "cannot be split evenly into 2");
}

TEST(ShapeInference, SliceInputsAndAttributes) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{10, 20, 5}).untyped_output("y");
  a.init_i64("st", {3}, {-1, 2, 0});
  a.init_i64("en", {3}, {kMin, kMax, -1});
  a.init_i64("ax", {3}, {0, 1, -1});
  a.init_i64("sp", {3}, {-3, 4, 1});
  a.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{4, 5, 4}));  // 9,6,3,0 / 2,6,10,14,18 / 0..3

  ModelBuilder b(9);
  b.input("x", std::vector<Dim>{10, 20}).untyped_output("y");
  auto& n = b.node("Slice", {"x"}, {"y"});
  set_ints(n, "starts", {1});
  set_ints(n, "ends", {-2});
  set_ints(n, "axes", {1});
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{10, 17}));

  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{10}).untyped_output("y");
  c.init_i64("st", {1}, {0});
  c.init_i64("en", {1}, {5});
  c.init_i64("ax", {1}, {0});
  c.init_i64("sp", {1}, {0});
  c.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"}, "sl");
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'sl' (Slice)", "contain 0");
}

// The divergence: a negative step on an empty axis selects nothing
// (the kernel's answer); inference gave length 1 through a std::clamp whose
// bounds were reversed.
TEST(ShapeInference, SliceNegativeStepOnEmptyAxisIsEmpty) {
  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{0, 4}).untyped_output("y");
  b.init_i64("st", {1}, {-1});
  b.init_i64("en", {1}, {kMin});
  b.init_i64("ax", {1}, {0});
  b.init_i64("sp", {1}, {-1});
  b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"});
  auto g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{0, 4}));
}

TEST(ShapeInference, SliceExtremeStepsDoNotOverflow) {
  auto run = [](int64_t start, int64_t end, int64_t step) {
    ModelBuilder b(13);
    b.input("x", std::vector<Dim>{10}).untyped_output("y");
    b.init_i64("st", {1}, {start});
    b.init_i64("en", {1}, {end});
    b.init_i64("sp", {1}, {step});
    b.init_i64("ax", {1}, {0});
    b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"});
    auto g = infer(b);
    EXPECT_TRUE(g.ok()) << g.status().message();
    return g.ok() ? shape_of(*g, "y") : Shape{};
  };
  EXPECT_EQ(run(0, kMax, kMax), (Shape{1}));  // element 0 only
  EXPECT_EQ(run(9, kMin, kMin), (Shape{1}));  // element 9 only
  EXPECT_EQ(run(9, kMin, -4), (Shape{3}));    // 9, 5, 1
  EXPECT_EQ(run(2, 9, 3), (Shape{3}));        // 2, 5, 8
}

TEST(ShapeInference, ReshapeZeroMinusOneAndAllowZero) {
  auto run = [](std::vector<int64_t> shape, int64_t allowzero, std::vector<Dim> x) {
    ModelBuilder b(14);
    b.input("x", x).untyped_output("y");
    b.init_i64("s", {static_cast<int64_t>(shape.size())}, shape);
    set_int(b.node("Reshape", {"x", "s"}, {"y"}, "rs"), "allowzero", allowzero);
    return infer(b);
  };
  auto g = run({0, -1, 2}, 0, {2, 3, 4});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 6, 2}));
  g = run({0, 4}, 1, {0, 4});
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{0, 4}));
  g = run({0, -1}, 1, {2, 3});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "both 0 and -1");
  g = run({5, -1}, 0, {2, 3});
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'rs' (Reshape)", "cannot reshape input 'x' [2,3]");
}

TEST(ShapeInference, SqueezeUnsqueezeAttrAndInput) {
  ModelBuilder a(11);
  a.input("x", std::vector<Dim>{1, 3, 1, 2}).untyped_output("y");
  set_ints(a.node("Squeeze", {"x"}, {"s"}), "axes", {-2});
  set_ints(a.node("Unsqueeze", {"s"}, {"y"}), "axes", {0, -1});
  a.node("Squeeze", {"x"}, {"all"});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "s"), (Shape{1, 3, 2}));
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 1, 3, 2, 1}));
  EXPECT_EQ(shape_of(*g, "all"), (Shape{3, 2}));

  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{3, 2}).untyped_output("y");
  b.init_i64("ax", {2}, {1, 3});
  b.node("Unsqueeze", {"x", "ax"}, {"u"});
  b.node("Squeeze", {"u", "ax"}, {"y"});
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "u"), (Shape{3, 1, 2, 1}));
  EXPECT_EQ(shape_of(*g, "y"), (Shape{3, 2}));

  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{3, 2}).untyped_output("y");
  c.init_i64("ax", {1}, {0});
  c.node("Squeeze", {"x", "ax"}, {"y"}, "sq");
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'sq' (Squeeze)", "cannot squeeze dim 0");
}

TEST(ShapeInference, ReduceKeepdimsAndAxesInput) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{2, 3, 4}).untyped_output("y");
  set_ints(a.node("ReduceMean", {"x"}, {"m1"}), "axes", {-1});
  auto& n2 = a.node("ReduceMax", {"x"}, {"m2"});
  set_ints(n2, "axes", {0, 2});
  set_int(n2, "keepdims", 0);
  a.node("ReduceMin", {"x"}, {"m3"});
  a.init_i64("ax", {1}, {1});
  set_int(a.node("ReduceSum", {"x", "ax"}, {"y"}), "keepdims", 0);
  auto& n5 = a.node("ReduceSum", {"x"}, {"noop"});
  set_int(n5, "noop_with_empty_axes", 1);
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "m1"), (Shape{2, 3, 1}));
  EXPECT_EQ(shape_of(*g, "m2"), (Shape{3}));
  EXPECT_EQ(shape_of(*g, "m3"), (Shape{1, 1, 1}));
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 4}));
  EXPECT_EQ(shape_of(*g, "noop"), (Shape{2, 3, 4}));

  ModelBuilder b(11);  // ReduceSum takes axes as an attribute before opset 13
  b.input("x", std::vector<Dim>{2, 3}).untyped_output("y");
  set_ints(b.node("ReduceSum", {"x"}, {"y"}), "axes", {0});
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 3}));
}

TEST(ShapeInference, PadInputAndAttribute) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{1, 3, 4, 4}).untyped_output("y");
  a.init_i64("p", {8}, {0, 0, 1, 2, 0, 0, 3, -1});
  a.node("Pad", {"x", "p"}, {"y"});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 3, 8, 5}));

  ModelBuilder b(7);
  b.input("x", std::vector<Dim>{2, 2}).untyped_output("y");
  auto& n = b.node("Pad", {"x"}, {"y"});
  set_ints(n, "pads", {1, 1, 1, 1});
  set_string(n, "mode", "edge");
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{4, 4}));

  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{2, 2}).untyped_output("y");
  c.init_i64("p", {2}, {1, 1});
  c.node("Pad", {"x", "p"}, {"y"}, "pad");
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'pad' (Pad)", "expected 4");
}

TEST(ShapeInference, ResizeScalesAndSizes) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{1, 3, 5, 7}).untyped_output("y");
  a.init_f32("scales", {4}, {1, 1, 2, 1.5f});
  a.node("Resize", {"x", "", "scales"}, {"y"});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 3, 10, 10}));  // floor(7*1.5)

  ModelBuilder b(11);
  b.input("x", std::vector<Dim>{1, 3, 5, 7}).untyped_output("y");
  b.init_f32("roi", {0}, {});
  b.init_f32("scales", {0}, {});
  b.init_i64("sizes", {4}, {1, 3, 9, 2});
  b.node("Resize", {"x", "roi", "scales", "sizes"}, {"y"});
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 3, 9, 2}));

  ModelBuilder c(10);
  c.input("x", std::vector<Dim>{1, 1, 4, 4}).untyped_output("y");
  c.init_f32("scales", {4}, {1, 1, 0.5f, 3});
  c.node("Resize", {"x", "scales"}, {"y"});
  g = infer(c);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{1, 1, 2, 12}));

  ModelBuilder d(13);
  d.input("x", std::vector<Dim>{1, 1, 4, 4}).input("s", std::vector<Dim>{4}).untyped_output("y");
  d.node("Resize", {"x", "", "s"}, {"y"}, "rz");
  g = infer(d);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'rz' (Resize): input 'scales'", "must be constant");
}

TEST(ShapeInference, ExpandTileRangeConstantOfShape) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{3, 1}).untyped_output("y");
  a.init_i64("es", {3}, {2, 1, 4});
  a.node("Expand", {"x", "es"}, {"y"});
  a.init_i64("rep", {2}, {2, 3});
  a.node("Tile", {"x", "rep"}, {"t"});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 3, 4}));
  EXPECT_EQ(shape_of(*g, "t"), (Shape{6, 3}));

  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{1}).untyped_output("y");
  b.init_f32("s", {}, {0.f});
  b.init_f32("l", {}, {1.f});
  b.init_f32("d", {}, {0.3f});
  b.node("Range", {"s", "l", "d"}, {"r"});
  b.node("Relu", {"x"}, {"y"});
  g = infer(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "r"), (Shape{4}));

  ModelBuilder c(13);
  c.input("n", std::vector<Dim>{}, I64).untyped_output("y");
  c.init_i64("s", {}, {0});
  c.init_i64("d", {}, {1});
  c.node("Range", {"s", "n", "d"}, {"y"}, "range");
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'range' (Range): input 'limit' ('n') must be constant");

  ModelBuilder e(13);
  e.input("x", std::vector<Dim>{2, 5}).untyped_output("y");
  e.node("Shape", {"x"}, {"s"});
  e.node("ConstantOfShape", {"s"}, {"y"});
  g = infer(e);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 5}));
  EXPECT_EQ(const_values<float>(*g, "y"), std::vector<float>(10, 0.f));
}

// Output sizes that come from tensor data (repeats, pads, range bounds,
// scales) are checked before any arithmetic could overflow: each of these
// once overflowed int64 or converted an out-of-range float.
TEST(ShapeInference, DataDerivedSizesOutOfRangeAreErrors) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{3, 2}).untyped_output("y");
  a.init_i64("rep", {2}, {int64_t{1} << 62, 1});
  a.node("Tile", {"x", "rep"}, {"y"}, "tile");
  auto g = infer(a);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'tile' (Tile): repeats", "too large");

  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{3}).untyped_output("y");
  b.init_i64("pads", {2}, {INT64_MAX, 1});
  b.node("Pad", {"x", "pads"}, {"y"}, "pad");
  g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'pad' (Pad): pads", "out of range");

  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{1}).untyped_output("y");
  c.init_i64("s", {}, {INT64_MIN});
  c.init_i64("l", {}, {INT64_MAX});
  c.init_i64("d", {}, {1});
  c.node("Range", {"s", "l", "d"}, {"r"}, "range");
  c.node("Relu", {"x"}, {"y"});
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(),
                   "node 'range' (Range): start, limit and delta give more than 2^48 elements");

  ModelBuilder d(13);
  d.input("x", std::vector<Dim>{1}).untyped_output("y");
  d.init_f32("s", {}, {0.f});
  d.init_f32("l", {}, {3e38f});
  d.init_f32("d", {}, {1e-30f});
  d.node("Range", {"s", "l", "d"}, {"r"}, "frange");
  d.node("Relu", {"x"}, {"y"});
  g = infer(d);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'frange' (Range): start, limit and delta give");

  ModelBuilder e(13);
  e.input("x", std::vector<Dim>{1, 1, 4, 4}).untyped_output("y");
  e.init_f32("scales", {4}, {1, 1, 3e38f, 1});
  e.node("Resize", {"x", "", "scales"}, {"y"}, "rz");
  g = infer(e);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'rz' (Resize): scales (and roi) give dim 2 the size");
}

TEST(ShapeInference, FlattenTransposeGatherShapeCast) {
  ModelBuilder a(15);
  a.input("x", std::vector<Dim>{2, 3, 4, 5}).untyped_output("y");
  set_int(a.node("Flatten", {"x"}, {"f"}), "axis", -1);
  set_ints(a.node("Transpose", {"x"}, {"t"}), "perm", {0, 2, 3, 1});
  a.node("Transpose", {"x"}, {"tr"});
  a.init_i64("idx", {2, 2}, {0, 1, 1, 0});
  set_int(a.node("Gather", {"x", "idx"}, {"g"}), "axis", 2);
  auto& sh = a.node("Shape", {"x"}, {"sh"});
  set_int(sh, "start", 1);
  set_int(sh, "end", -1);
  set_int(a.node("Cast", {"x"}, {"y"}), "to", onnx::TensorProto::FLOAT16);
  a.untyped_output("sh");
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "f"), (Shape{24, 5}));
  EXPECT_EQ(shape_of(*g, "t"), (Shape{2, 4, 5, 3}));
  EXPECT_EQ(shape_of(*g, "tr"), (Shape{5, 4, 3, 2}));
  EXPECT_EQ(shape_of(*g, "g"), (Shape{2, 3, 2, 2, 5}));
  EXPECT_EQ(const_values<int64_t>(*g, "sh"), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(dtype_of(*g, "y"), DType::kFloat16);

  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{4, 3}).untyped_output("y");
  b.init_i64("idx", {1}, {4});
  b.node("Gather", {"x", "idx"}, {"y"}, "ga");
  g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'ga' (Gather)", "index 4", "out of range");
}

TEST(ShapeInference, NormalizationsDropoutArgMaxAndActivations) {
  ModelBuilder a(17);
  a.input("x", std::vector<Dim>{2, 4, 6}).untyped_output("y");
  for (const char* n : {"s", "bb", "m", "v"}) a.weight(n, {4});
  a.node("BatchNormalization", {"x", "s", "bb", "m", "v"}, {"bn", "rm", "rv"});
  a.weight("ls", {6});
  set_int(a.node("LayerNormalization", {"x", "ls"}, {"ln", "mean", "istd"}), "axis", -1);
  a.node("InstanceNormalization", {"x", "s", "bb"}, {"in"});
  a.node("Dropout", {"x"}, {"dr", "mask"});
  auto& am = a.node("ArgMax", {"x"}, {"am"});
  set_int(am, "axis", 1);
  set_int(am, "keepdims", 0);
  a.node("Gelu", {"x"}, {"ge"}, "gelu").set_domain("com.microsoft");
  auto* os = a.model.add_opset_import();
  os->set_domain("com.microsoft");
  os->set_version(1);
  a.node("HardSwish", {"x"}, {"hs"});
  a.node("Trilu", {"x"}, {"tri"});
  set_int(a.node("Softmax", {"x"}, {"y"}), "axis", -1);
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "bn"), (Shape{2, 4, 6}));
  EXPECT_EQ(shape_of(*g, "rm"), (Shape{4}));
  EXPECT_EQ(shape_of(*g, "mean"), (Shape{2, 4, 1}));
  EXPECT_EQ(dtype_of(*g, "istd"), DType::kFloat32);
  EXPECT_EQ(shape_of(*g, "in"), (Shape{2, 4, 6}));
  EXPECT_EQ(dtype_of(*g, "mask"), DType::kBool);
  EXPECT_EQ(shape_of(*g, "mask"), (Shape{2, 4, 6}));
  EXPECT_EQ(shape_of(*g, "am"), (Shape{2, 6}));
  EXPECT_EQ(dtype_of(*g, "am"), DType::kInt64);
  EXPECT_EQ(shape_of(*g, "ge"), (Shape{2, 4, 6}));

  ModelBuilder b(13);
  b.input("x", std::vector<Dim>{2, 4, 6}).untyped_output("y");
  for (const char* n : {"s", "bb", "m"}) b.weight(n, {4});
  b.weight("v", {5});
  b.node("BatchNormalization", {"x", "s", "bb", "m", "v"}, {"y"}, "bn");
  g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'bn' (BatchNormalization)",
                   "input_var 'v' has shape [5], expected [4]");

  ModelBuilder c(13);
  c.input("x", std::vector<Dim>{2, 3}, I64).untyped_output("y");
  c.node("Sqrt", {"x"}, {"y"}, "sq");
  g = infer(c);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'sq' (Sqrt)", "dtype int64");
}

TEST(ShapeInference, ClipAndMinMaxAcrossOpsets) {
  ModelBuilder a(13);
  a.input("x", std::vector<Dim>{2, 3}).input("z", std::vector<Dim>{3}).untyped_output("y");
  a.init_f32("lo", {}, {0});
  a.node("Clip", {"x", "lo"}, {"c"});
  a.node("Min", {"x", "z"}, {"y"});
  auto g = infer(a);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of(*g, "c"), (Shape{2, 3}));
  EXPECT_EQ(shape_of(*g, "y"), (Shape{2, 3}));

  ModelBuilder b(7);  // Min/Max do not broadcast before opset 8
  b.input("x", std::vector<Dim>{2, 3}).input("z", std::vector<Dim>{3}).untyped_output("y");
  b.node("Max", {"x", "z"}, {"y"}, "mx");
  g = infer(b);
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "node 'mx' (Max)", "no broadcasting before opset 8");
}

}  // namespace
}  // namespace backplane
