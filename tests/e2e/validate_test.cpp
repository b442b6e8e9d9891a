// backplane::validate (include/backplane/validate.hpp) through the C++ API.
// MockFuse (backends/testing/mock_acc) is right on every op alone but wrong
// on a Conv fused with the Add of a constant: validate must name the Add, its
// backend and shapes, and the Conv as its group; a plan without the pair, or
// with the Add pinned to CpuRef, matches.
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/validate.hpp>

#include <gtest/gtest.h>

namespace backplane::test {
namespace {

// x -> Conv -> [Relu ->] Add(constant) -> Sigmoid -> y; the Relu between
// the Conv and the Add keeps MockFuse from fusing them.
std::string conv_add_model(const TempDir& dir, bool relu_between) {
  ModelBuilder b(13);
  b.input("x", {1, 4, 6, 6});
  b.random_weight("w", {4, 4, 3, 3}, -0.3f, 0.3f);
  b.random_weight("c", {1, 4, 1, 1});
  set_ints(b.node("Conv", {"x", "w"}, {"conv_out"}, "conv"), "pads", {1, 1, 1, 1});
  std::string last = "conv_out";
  if (relu_between) {
    b.node("Relu", {last}, {"relu_out"}, "relu");
    last = "relu_out";
  }
  b.node("Add", {last, "c"}, {"add_out"}, "add");
  b.node("Sigmoid", {"add_out"}, {"y"}, "sigmoid");
  b.output("y", {1, 4, 6, 6});
  return b.save(dir, relu_between ? "right.onnx" : "planted.onnx");
}

std::shared_ptr<Runtime> fuse_runtime() {
  RuntimeOptions o;
  o.backend_path = BACKPLANE_TESTING_FUSE_DIR;
  return Runtime::create(o).value();
}

TEST(Validate, NamesTheWrongNodeAndItsFusedGroup) {
  TempDir dir;
  auto rt = fuse_runtime();
  Result<ValidationReport> r = validate(*rt, conv_add_model(dir, false));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->ok);
  EXPECT_EQ(r->backends, (std::vector<std::string>{"MockFuse", "CpuRef"}));
  ASSERT_TRUE(r->wrong.has_value());
  const WrongNode& w = *r->wrong;
  EXPECT_EQ(w.name, "add");
  EXPECT_EQ(w.op_type, "Add");
  EXPECT_EQ(w.backend, "MockFuse");
  EXPECT_EQ(w.group, (std::vector<std::string>{"conv", "add"}));
  EXPECT_EQ(w.group_ops, (std::vector<std::string>{"Conv", "Add"}));
  ASSERT_EQ(w.inputs.size(), 2u);
  EXPECT_EQ(w.inputs[0].shape, (Shape{1, 4, 6, 6}));
  EXPECT_EQ(w.inputs[1].shape, (Shape{1, 4, 1, 1}));
  EXPECT_TRUE(w.inputs[1].constant);
  ASSERT_EQ(w.outputs.size(), 1u);
  EXPECT_EQ(w.outputs[0].dtype, DType::kFloat32);
  EXPECT_EQ(w.tensor, "add_out");
  EXPECT_FALSE(w.comparison.within());
  EXPECT_NE(w.error.find("max|got-ref|"), std::string::npos) << w.error;
  EXPECT_EQ(r->generated_inputs, (std::vector<std::string>{"x"}));
}

TEST(Validate, RightPlansMatch) {
  TempDir dir;
  auto rt = fuse_runtime();
  Result<ValidationReport> right = validate(*rt, conv_add_model(dir, true));
  ASSERT_TRUE(right.ok()) << right.status().to_string();
  EXPECT_TRUE(right->ok);
  EXPECT_FALSE(right->wrong.has_value());
  EXPECT_GT(right->nodes_off_cpuref, 0u);

  ValidateOptions pinned;
  pinned.overrides["add"] = "CpuRef";
  pinned.inputs["x"] = Tensor(DType::kFloat32, {1, 4, 6, 6});
  Result<ValidationReport> r = validate(*rt, conv_add_model(dir, false), pinned);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->ok);
  EXPECT_TRUE(r->generated_inputs.empty());
  for (const TensorCheck& c : r->checks) EXPECT_TRUE(c.within()) << c.name << ": " << c.describe();
}

TEST(Validate, FindNodeFalseOnlyCompares) {
  TempDir dir;
  auto rt = fuse_runtime();
  ValidateOptions o;
  o.find_node = false;
  Result<ValidationReport> r = validate(*rt, conv_add_model(dir, false), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_FALSE(r->ok);
  EXPECT_FALSE(r->wrong.has_value());
  EXPECT_EQ(r->plans, 3u);
}

TEST(Validate, ErrorsNameTheFile) {
  TempDir dir;
  auto rt = fuse_runtime();
  const std::string missing = dir.file("missing.onnx");
  Result<ValidationReport> r = validate(*rt, missing);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(missing), std::string::npos) << r.status().message();

  ValidateOptions o;
  o.inputs["nope"] = Tensor(DType::kFloat32, {1});
  r = validate(*rt, conv_add_model(dir, false), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("'nope'"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace backplane::test
