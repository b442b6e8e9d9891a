// bad_inputs_test.cpp — malformed files, invalid models and API misuse fail
// cleanly: !ok(), a message that names the file / node / reason, no crash.
//
// Models come from scripts/gen_bad_models.py (bad_models/) and
// scripts/gen_models.py (models/, truncated here at several offsets).
#include "support/e2e_util.hpp"
#include "support/files.hpp"

#include <initializer_list>
#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

std::string bad(const std::string& file) { return bad_models_dir() + "/" + file; }

// Loads `path` on CpuRef and returns the failed status (fails the test if it loaded).
Status load_error(const std::string& path) {
  auto rt = make_runtime();
  if (!rt) return internal_error("no runtime");
  auto model = rt->load_model(path, cpuref_only());
  EXPECT_FALSE(model.ok()) << path << " loaded, but it is invalid";
  if (model.ok()) return ok_status();
  EXPECT_FALSE(model.status().message().empty());
  return std::move(model).take_status();
}

// Whether `msg` shows the shape dims in a usual notation: "[2,3]", "2, 3", "2x3".
bool mentions_shape(const std::string& msg, const std::vector<int64_t>& dims) {
  for (const char* sep : {",", ", ", "x", " x "}) {
    std::string s;
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? sep : "") + std::to_string(dims[i]);
    if (contains(msg, s)) return true;
  }
  return false;
}

using test::read_text;
using test::TempDir;
using test::write_bytes;

void expect_truncations_fail(const std::string& model) {
  const std::string bytes = read_text(model_path(model));
  ASSERT_GT(bytes.size(), 1000u);
  TempDir tmp;
  const size_t n = bytes.size();
  for (size_t cut :
       {size_t{1}, size_t{16}, size_t{100}, n / 4, n / 2, (3 * n) / 4, n - 100, n - 1}) {
    const std::string name = model + "_truncated_at_" + std::to_string(cut) + ".onnx";
    const std::string path = tmp.file(name);
    write_bytes(path, bytes.data(), cut);
    Status st = load_error(path);
    EXPECT_TRUE(contains(st.message(), name))
        << "message does not name the file: " << st.to_string();
  }
}

TEST(BadFiles, TruncatedTinyCnn) { expect_truncations_fail("tiny_cnn"); }
TEST(BadFiles, TruncatedResnet18) { expect_truncations_fail("resnet18"); }

TEST(BadFiles, NotOnnx) {
  for (const char* f : {"not_onnx_png.onnx", "not_onnx_text.onnx", "empty.onnx"}) {
    Status st = load_error(bad(f));
    EXPECT_TRUE(contains(st.message(), f)) << st.to_string();
  }
}

TEST(BadFiles, MissingFile) {
  const std::string path = bad("no_such_model.onnx");
  Status st = load_error(path);
  EXPECT_TRUE(st.code() == StatusCode::kNotFound || st.code() == StatusCode::kIoError)
      << st.to_string();
  EXPECT_TRUE(contains(st.message(), "no_such_model.onnx")) << st.to_string();
}

// The control: a valid model from the same generator loads and computes.
TEST(BadModels, ControlModelLoadsAndRuns) {
  auto rt = make_runtime();
  ASSERT_TRUE(rt);
  auto model = rt->load_model(bad("add_ok.onnx"), cpuref_only());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().to_string();
  const float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60};
  ASSERT_TRUE((*session)->set_input("x", Tensor::copy_of(DType::kFloat32, {2, 3}, x)).ok());
  ASSERT_TRUE((*session)->set_input("y", Tensor::copy_of(DType::kFloat32, {2, 3}, y)).ok());
  ASSERT_TRUE((*session)->run().ok());
  auto z = (*session)->get_output("z");
  ASSERT_TRUE(z.ok()) << z.status().to_string();
  ASSERT_EQ(z->shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(z->data_as<float>()[i], x[i] + y[i]);
}

TEST(BadModels, UnknownOp) {
  Status st = load_error(bad("unknown_op.onnx"));
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "FooBar")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "n_foo")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "unknown_op.onnx")) << st.to_string();
}

TEST(BadModels, MissingInput) {
  Status st = load_error(bad("missing_input.onnx"));
  EXPECT_TRUE(contains(st.message(), "ghost")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "n_add")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "missing_input.onnx")) << st.to_string();
}

TEST(BadModels, WrongAttributeType) {
  Status st = load_error(bad("wrong_attr_type.onnx"));
  EXPECT_TRUE(contains(st.message(), "strides")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "n_conv")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "wrong_attr_type.onnx")) << st.to_string();
}

TEST(BadModels, AddShapeMismatch) {
  Status st = load_error(bad("add_shape_mismatch.onnx"));
  EXPECT_TRUE(contains(st.message(), "n_add")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "add_shape_mismatch.onnx")) << st.to_string();
  EXPECT_TRUE(mentions_shape(st.message(), {2, 3}) && mentions_shape(st.message(), {4, 5}))
      << "message should show both shapes: " << st.to_string();
}

TEST(BadModels, ConvWeightChannelMismatch) {
  Status st = load_error(bad("conv_channel_mismatch.onnx"));
  EXPECT_TRUE(contains(st.message(), "n_conv")) << st.to_string();
  EXPECT_TRUE(contains(st.message(), "conv_channel_mismatch.onnx")) << st.to_string();
}

// Session misuse on a valid model (tiny_cnn: input 'input' float32
// [1,3,32,32], output 'output' float32 [1,10]).
class SessionMisuse : public testing::Test {
 protected:
  void SetUp() override {
    rt_ = make_runtime();
    ASSERT_TRUE(rt_);
    auto model = rt_->load_model(model_path("tiny_cnn"), cpuref_only());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = model.value();
    auto session = model_->create_session();
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    session_ = std::move(session).value();
    input_ = read_npy(models_dir() + "/tiny_cnn.input.npy");
    expected_ = read_npy(models_dir() + "/tiny_cnn.expected.npy");
    ASSERT_FALSE(input_.empty());
  }
  // After any misuse the session still computes the right answer.
  void expect_session_still_works() {
    auto st = session_->set_input("input", input_);
    ASSERT_TRUE(st.ok()) << st.to_string();
    st = session_->run();
    ASSERT_TRUE(st.ok()) << st.to_string();
    auto y = session_->get_output("output");
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    ASSERT_EQ(y->shape(), expected_.shape());
    EXPECT_LE(max_abs_diff(*y, expected_), 1e-4 * max_abs(expected_));
  }

  std::shared_ptr<Runtime> rt_;
  std::shared_ptr<Model> model_;
  std::unique_ptr<Session> session_;
  Tensor input_, expected_;
};

TEST_F(SessionMisuse, WrongInputName) {
  Status st = session_->set_input("no_such_input", input_);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "no_such_input")) << st.to_string();
  expect_session_still_works();
}

TEST_F(SessionMisuse, InputIndexOutOfRange) {
  Status st = session_->set_input(size_t{5}, input_);
  EXPECT_FALSE(st.ok());
  EXPECT_FALSE(st.message().empty());
  expect_session_still_works();
}

TEST_F(SessionMisuse, WrongInputShape) {
  Tensor wrong(DType::kFloat32, {1, 3, 16, 16});
  Status st = session_->set_input("input", wrong);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "input")) << st.to_string();
  EXPECT_TRUE(mentions_shape(st.message(), {1, 3, 16, 16}) ||
              mentions_shape(st.message(), {1, 3, 32, 32}))
      << "message should show the shape: " << st.to_string();
  expect_session_still_works();
}

TEST_F(SessionMisuse, WrongInputRank) {
  Tensor wrong(DType::kFloat32, {3, 32, 32});
  Status st = session_->set_input("input", wrong);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "input")) << st.to_string();
  expect_session_still_works();
}

TEST_F(SessionMisuse, WrongInputDtype) {
  Tensor wrong(DType::kInt64, {1, 3, 32, 32});
  Status st = session_->set_input("input", wrong);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "int64") || contains(st.message(), "float32"))
      << st.to_string();
  expect_session_still_works();
}

TEST_F(SessionMisuse, UnknownOutputName) {
  expect_session_still_works();
  auto y = session_->get_output("no_such_output");
  EXPECT_FALSE(y.ok());
  EXPECT_TRUE(contains(y.status().message(), "no_such_output")) << y.status().to_string();
}

}  // namespace
}  // namespace backplane::e2e
