// models_test.cpp — real models on CpuRef against PyTorch's float32 output.
//
// For each model from scripts/gen_models.py: load with backends {"CpuRef"},
// run on NAME.input.npy, and require max|y - expected| <= 1e-4 * max|expected|.
#include "support/e2e_util.hpp"

#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

struct ModelCase {
  const char* name;
  const char* input;
  const char* output;
  DType input_dtype;
  Shape input_shape;
  Shape output_shape;
};

std::string case_name(const testing::TestParamInfo<ModelCase>& info) { return info.param.name; }

class ModelsTest : public testing::TestWithParam<ModelCase> {};

TEST_P(ModelsTest, MatchesPyTorchOnCpuRef) {
  const ModelCase& c = GetParam();
  auto rt = make_runtime();
  ASSERT_TRUE(rt);
  auto model = rt->load_model(model_path(c.name), cpuref_only());
  ASSERT_TRUE(model.ok()) << model.status().to_string();

  // Interface as exported.
  ASSERT_EQ((*model)->inputs().size(), 1u);
  EXPECT_EQ((*model)->inputs()[0].name, c.input);
  EXPECT_EQ((*model)->inputs()[0].dtype, c.input_dtype);
  EXPECT_EQ((*model)->inputs()[0].shape, c.input_shape);
  ASSERT_EQ((*model)->outputs().size(), 1u);
  EXPECT_EQ((*model)->outputs()[0].name, c.output);
  EXPECT_EQ((*model)->outputs()[0].dtype, DType::kFloat32);
  EXPECT_EQ((*model)->outputs()[0].shape, c.output_shape);

  // Everything ran on the one backend asked for.
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
  ASSERT_FALSE((*model)->partitions().empty());
  for (const auto& p : (*model)->partitions()) {
    EXPECT_EQ(p.backend, "CpuRef");
    EXPECT_FALSE(p.nodes.empty());
  }

  Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  Tensor expected = read_npy(models_dir() + "/" + c.name + ".expected.npy");
  ASSERT_FALSE(input.empty());
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected.shape(), c.output_shape);

  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  auto st = (*session)->set_input(c.input, input);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = (*session)->run();
  ASSERT_TRUE(st.ok()) << st.to_string();

  ASSERT_EQ((*session)->num_outputs(), 1u);
  auto y = (*session)->get_output(c.output);
  ASSERT_TRUE(y.ok()) << y.status().to_string();
  ASSERT_EQ(y->dtype(), DType::kFloat32);
  ASSERT_EQ(y->shape(), expected.shape());
  const double scale = max_abs(expected);
  ASSERT_GT(scale, 0.0);
  const double diff = max_abs_diff(*y, expected);
  EXPECT_LE(diff, 1e-4 * scale) << c.name << ": max|y-expected| = " << diff
                                << ", max|expected| = " << scale;

  // A second run of the same session, with the input set by index, gives
  // the same bits, and output(0) is the named output.
  Tensor first = y->clone();
  st = (*session)->set_input(size_t{0}, input);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = (*session)->run();
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(bitwise_equal((*session)->output(0), first));
}

INSTANTIATE_TEST_SUITE_P(
    E2E, ModelsTest,
    testing::Values(
        ModelCase{"resnet18", "input", "output", DType::kFloat32, {1, 3, 224, 224}, {1, 1000}},
        ModelCase{"mobilenet_v2", "input", "output", DType::kFloat32, {1, 3, 224, 224}, {1, 1000}},
        ModelCase{"squeezenet1_1", "input", "output", DType::kFloat32, {1, 3, 224, 224}, {1, 1000}},
        ModelCase{
            "transformer", "input_ids", "last_hidden_state", DType::kInt64, {1, 32}, {1, 32, 128}},
        ModelCase{"tiny_cnn", "input", "output", DType::kFloat32, {1, 3, 32, 32}, {1, 10}},
        ModelCase{"block_attention", "input", "output", DType::kFloat32, {2, 16, 49, 32},
                  {2, 16, 49, 32}}),
    case_name);

}  // namespace
}  // namespace backplane::e2e
