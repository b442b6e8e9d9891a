// Opset-18 models through the importer and shape inference (the schemas of
// src/ir/ops_opset18.cpp): the new forms infer the right shapes, the old forms
// and bad values are errors naming the node and the reason.
#include "ir/graph.hpp"
#include "onnx/importer.hpp"
#include "support/expect_error.hpp"
#include "support/model_builder.hpp"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace backplane {
namespace {

using namespace test;

// Imports `b` and infers shapes; the status of whichever step fails.
Result<ir::Graph> load(const ModelBuilder& b) {
  const std::string bytes = b.bytes();
  BP_ASSIGN_OR_RETURN(ir::Graph g,
                      onnx_import::import_bytes(bytes.data(), bytes.size(), "m18", "."));
  BP_RETURN_IF_ERROR(ir::infer_shapes(g));
  return g;
}

Shape shape_of_value(const ir::Graph& g, const std::string& name) {
  const int v = g.find_value(name);
  return v < 0 ? Shape{-99} : g.values[v].shape;
}

TEST(Opset18, ReductionsTakeAxesAsAnInput) {
  ModelBuilder b(18);
  b.input("x", {2, 3, 4}).untyped_output("m").untyped_output("l");
  b.init_i64("axes", {2}, {0, -1});
  set_int(b.node("ReduceMean", {"x", "axes"}, {"m"}), "keepdims", 0);
  b.node("ReduceL2", {"x"}, {"l"});  // no axes: every axis, kept as 1s
  auto g = load(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of_value(*g, "m"), (Shape{3}));
  EXPECT_EQ(shape_of_value(*g, "l"), (Shape{1, 1, 1}));

  // The opset-13 form (axes as an attribute) is not ReduceMean-18.
  ModelBuilder old(18);
  old.input("x", {2, 3}).untyped_output("m");
  set_ints(old.node("ReduceMean", {"x"}, {"m"}, "rm"), "axes", {1});
  auto e = load(old);
  ASSERT_FALSE(e.ok());
  EXPECT_ERROR_HAS(e.status(), "node 'rm' (ReduceMean)", "unknown attribute 'axes'");
}

TEST(Opset18, SplitNumOutputs) {
  ModelBuilder b(18);
  b.input("x", {2, 7}).untyped_output("a").untyped_output("b").untyped_output("c");
  onnx::NodeProto& n = b.node("Split", {"x"}, {"a", "b", "c"});
  set_int(n, "axis", 1);
  set_int(n, "num_outputs", 3);
  auto g = load(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of_value(*g, "a"), (Shape{2, 3}));
  EXPECT_EQ(shape_of_value(*g, "c"), (Shape{2, 1}));

  ModelBuilder wrong(18);
  wrong.input("x", {6}).untyped_output("a").untyped_output("b");
  set_int(wrong.node("Split", {"x"}, {"a", "b"}, "sp"), "num_outputs", 3);
  auto e = load(wrong);
  ASSERT_FALSE(e.ok());
  EXPECT_ERROR_HAS(e.status(), "node 'sp' (Split)", "num_outputs is 3", "2 outputs");

  // 4 chunks of ceil(5 / 4) = 2 leave nothing for the last.
  ModelBuilder empty(18);
  empty.input("x", {5}).untyped_output("a").untyped_output("b").untyped_output("c").untyped_output(
      "d");
  set_int(empty.node("Split", {"x"}, {"a", "b", "c", "d"}, "sp"), "num_outputs", 4);
  auto e2 = load(empty);
  ASSERT_FALSE(e2.ok());
  EXPECT_ERROR_HAS(e2.status(), "node 'sp' (Split)", "the last would be empty");
}

TEST(Opset18, PadAxes) {
  ModelBuilder b(18);
  b.input("x", {2, 3, 4}).untyped_output("y");
  b.init_i64("pads", {4}, {1, 0, 2, 3});
  b.init_i64("axes", {2}, {-1, 0});
  b.node("Pad", {"x", "pads", "", "axes"}, {"y"});
  auto g = load(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of_value(*g, "y"), (Shape{5, 3, 7}));

  ModelBuilder bad(18);
  bad.input("x", {2, 3}).untyped_output("y");
  bad.init_i64("pads", {4}, {1, 1, 1, 1});
  bad.init_i64("axes", {1}, {1});
  bad.node("Pad", {"x", "pads", "", "axes"}, {"y"}, "pad");
  auto e = load(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_ERROR_HAS(e.status(), "node 'pad' (Pad)", "expected 2 (two per axis)");
}

TEST(Opset18, ResizeAxesAndKeepAspectRatio) {
  ModelBuilder b(18);
  b.input("x", {1, 2, 12, 10}).untyped_output("y").untyped_output("z");
  b.init_i64("sizes", {2}, {7, 9});
  onnx::NodeProto& r = b.node("Resize", {"x", "", "", "sizes"}, {"y"});
  set_ints(r, "axes", {2, 3});
  set_string(r, "keep_aspect_ratio_policy", "not_larger");
  onnx::NodeProto& s = b.node("Resize", {"x", "", "", "sizes"}, {"z"});
  set_ints(s, "axes", {-1, 2});
  set_string(s, "keep_aspect_ratio_policy", "not_smaller");
  auto g = load(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  // not_larger: min(7/12, 9/10) -> (7, 5.83 -> 6); not_smaller over (W, H):
  // max(7/10, 9/12) = 0.75 -> (H 9, W 7.5 -> 8).
  EXPECT_EQ(shape_of_value(*g, "y"), (Shape{1, 2, 7, 6}));
  EXPECT_EQ(shape_of_value(*g, "z"), (Shape{1, 2, 9, 8}));

  ModelBuilder bad(18);
  bad.input("x", {1, 2}).untyped_output("y");
  bad.init_i64("sizes", {2}, {3, 4});
  set_string(bad.node("Resize", {"x", "", "", "sizes"}, {"y"}, "rs"), "keep_aspect_ratio_policy",
             "fit");
  auto e = load(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_ERROR_HAS(e.status(), "node 'rs' (Resize)", "keep_aspect_ratio_policy", "'fit'");
}

TEST(Opset18, NewOpsInferAndRejectBadShapes) {
  ModelBuilder b(18);
  b.input("x", {2, 4, 3})
      .input("col", {1, 8, 6})
      .untyped_output("g")
      .untyped_output("c")
      .untyped_output("i");
  b.init_f32("scale", {2}, {1, 1});
  b.init_f32("bias", {2}, {0, 0});
  b.init_i64("shape", {1}, {5});
  b.init_i64("image", {2}, {3, 4});
  b.init_i64("block", {2}, {2, 2});
  set_int(b.node("GroupNormalization", {"x", "scale", "bias"}, {"g"}), "num_groups", 2);
  set_ints(b.node("CenterCropPad", {"x", "shape"}, {"c"}), "axes", {1});
  b.node("Col2Im", {"col", "image", "block"}, {"i"});
  auto g = load(b);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(shape_of_value(*g, "g"), (Shape{2, 4, 3}));
  EXPECT_EQ(shape_of_value(*g, "c"), (Shape{2, 5, 3}));
  EXPECT_EQ(shape_of_value(*g, "i"), (Shape{1, 2, 3, 4}));

  ModelBuilder gn(18);  // opset 18 takes scale/bias per group, not per channel
  gn.input("x", {2, 4, 3}).untyped_output("g");
  gn.init_f32("scale", {4}, {1, 1, 1, 1});
  gn.init_f32("bias", {4}, {0, 0, 0, 0});
  set_int(gn.node("GroupNormalization", {"x", "scale", "bias"}, {"g"}, "gn"), "num_groups", 2);
  auto e = load(gn);
  ASSERT_FALSE(e.ok());
  EXPECT_ERROR_HAS(e.status(), "node 'gn' (GroupNormalization)", "one value per group");

  ModelBuilder ci(18);
  ci.input("col", {1, 8, 5}).untyped_output("i");
  ci.init_i64("image", {2}, {3, 4});
  ci.init_i64("block", {2}, {2, 2});
  ci.node("Col2Im", {"col", "image", "block"}, {"i"}, "c2i");
  auto e2 = load(ci);
  ASSERT_FALSE(e2.ok());
  EXPECT_ERROR_HAS(e2.status(), "node 'c2i' (Col2Im)", "number of blocks, 6");
}

TEST(Opset18, BitwiseTypesAreChecked) {
  ModelBuilder b(18);
  b.input("a", {2, 3}, onnx::TensorProto::FLOAT)
      .input("b", {3}, onnx::TensorProto::FLOAT)
      .untyped_output("y");
  b.node("BitwiseAnd", {"a", "b"}, {"y"}, "and");
  auto e = load(b);
  ASSERT_FALSE(e.ok());
  EXPECT_ERROR_HAS(e.status(), "node 'and' (BitwiseAnd)", "float32");
}

TEST(Opset18, Opset26IsRejected) {
  ModelBuilder b(26);
  b.input("x", {2}).output("y", {2});
  b.node("Relu", {"x"}, {"y"});
  auto e = load(b);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kVersionMismatch);
  EXPECT_ERROR_HAS(e.status(), "opset 26", "1 to 25");
}

// A model of opset 21 is read as opset 18: GroupNormalization-21's scale
// and bias per channel become opset 18's per group (1 and 0) and an affine
// per channel, and the graph says opset 18.
TEST(Opset18, Opset21IsReadAsEighteen) {
  ModelBuilder b(21);
  b.input("x", {2, 6, 5}).output("y", {2, 6, 5});
  b.init_f32("s", {6}, {1, 2, 3, 4, 5, 6});
  b.init_f32("b", {6}, {0, 1, 0, 1, 0, 1});
  set_int(b.node("GroupNormalization", {"x", "s", "b"}, {"y"}, "gn"), "num_groups", 3);
  const std::string bytes = b.bytes();
  auto g = onnx_import::import_bytes(bytes.data(), bytes.size(), "m21", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->opsets.at(""), 18);
  int group_norms = 0, muls = 0;
  for (const auto& n : g->nodes) {
    group_norms += n.op_type == "GroupNormalization";
    muls += n.op_type == "Mul";
  }
  EXPECT_EQ(group_norms, 1);
  EXPECT_EQ(muls, 1);
}

}  // namespace
}  // namespace backplane
