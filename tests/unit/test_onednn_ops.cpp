// Per-op tests of the CpuOneDnn backend (backends/onednn) against CpuRef.
//
// Each test writes a small ONNX model (one op, or the short chain a fusion
// needs), loads it twice in one runtime — on {"CpuOneDnn"} and on {"CpuRef"} —
// runs both on the same seeded input and requires
//   max|onednn - ref| <= 1e-4 * max|ref|,
// and that every node really ran on CpuOneDnn (a node it silently rejected
// would otherwise be compared with itself). CpuOneDnn is loaded the way users
// get it: as Backplane_CpuOneDnn_backend.so from this build's backend folder.
#include <backplane/runtime.hpp>

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace fs = std::filesystem;
using Dims = std::vector<int64_t>;

const std::string kModuleDir = std::string(BACKPLANE_BINARY_DIR) + "/lib/backplane/backends";

std::shared_ptr<Runtime> runtime() {
  static std::shared_ptr<Runtime> rt = [] {
    RuntimeOptions o;
    o.backend_path = kModuleDir;
    o.log_level = LogLevel::kError;
    auto r = Runtime::create(o);
    return r.ok() ? r.value() : nullptr;
  }();
  return rt;
}

// A model under construction: inputs, seeded random initializers, nodes.
class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13) {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(opset);
    model_.mutable_graph()->set_name("onednn_op_test");
  }
  ModelBuilder& input(const std::string& name, const Dims& shape) {
    set_value(model_.mutable_graph()->add_input(), name, shape);
    inputs_.push_back({name, shape});
    return *this;
  }
  ModelBuilder& output(const std::string& name) {
    auto* v = model_.mutable_graph()->add_output();
    v->set_name(name);
    v->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    return *this;
  }
  // A float constant with values uniform in [lo, hi).
  ModelBuilder& weight(const std::string& name, const Dims& shape, float lo = -1.f, float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> values(static_cast<size_t>(count(shape)));
    for (float& x : values) x = dist(rng_);
    return constant(name, shape, values);
  }
  ModelBuilder& constant(const std::string& name, const Dims& shape, const std::vector<float>& values) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->add_dims(d);
    for (float x : values) t->add_float_data(x);
    return *this;
  }
  ModelBuilder& ints(const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = model_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t x : values) t->add_int64_data(x);
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, std::initializer_list<std::string> in,
                        std::initializer_list<std::string> out) {
    onnx::NodeProto* n = model_.mutable_graph()->add_node();
    n->set_name(op + "_" + std::to_string(model_.graph().node_size()));
    n->set_op_type(op);
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return *n;
  }
  std::string save() const {
    fs::path dir = fs::temp_directory_path() / ("bp_onednn_ops_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
    std::string path = (dir / (std::string(info->name()) + ".onnx")).string();
    std::ofstream(path, std::ios::binary) << model_.SerializeAsString();
    return path;
  }
  const std::vector<std::pair<std::string, Dims>>& inputs() const { return inputs_; }

  static int64_t count(const Dims& d) {
    int64_t n = 1;
    for (int64_t x : d) n *= x;
    return n;
  }

 private:
  static void set_value(onnx::ValueInfoProto* v, const std::string& name, const Dims& shape) {
    v->set_name(name);
    auto* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : shape) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  onnx::ModelProto model_;
  std::vector<std::pair<std::string, Dims>> inputs_;
  std::mt19937 rng_{1234};
};

void attr(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void attr(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
void attr(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}

std::vector<Tensor> run(const std::string& path, const std::vector<std::string>& backends,
                        const std::vector<std::pair<std::string, Dims>>& inputs, std::vector<std::string>* used,
                        std::string* plan = nullptr) {
  ModelOptions mo;
  mo.backends = backends;
  auto model = runtime()->load_model(path, mo);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  if (used) *used = (*model)->backends_used();
  if (plan) *plan = (*model)->describe_plan(PlanFormat::kText);
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  if (!session.ok()) return {};
  std::mt19937 rng(99);
  std::normal_distribution<float> dist(0.f, 1.f);
  for (const auto& [name, shape] : inputs) {
    Tensor t(DType::kFloat32, shape);
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
    EXPECT_TRUE((*session)->set_input(name, t).ok());
  }
  Status st = (*session)->run();
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok()) return {};
  std::vector<Tensor> out;
  for (size_t i = 0; i < (*session)->num_outputs(); ++i) out.push_back((*session)->output(i).clone());
  return out;
}

// Runs the model on CpuOneDnn alone and on CpuRef, and compares.
// Built with -DBACKPLANE_WITH_ONEDNN=OFF there is no plugin to test; a plugin
// that exists but does not load is a failure.
bool plugin_built() { return fs::exists(kModuleDir + "/Backplane_CpuOneDnn_backend.so"); }

void expect_matches_cpuref(const ModelBuilder& b) {
  if (!plugin_built()) GTEST_SKIP() << "CpuOneDnn was not built (no plugin in " << kModuleDir << ")";
  ASSERT_TRUE(runtime()) << "no runtime";
  bool loaded = false;
  for (const auto& d : runtime()->backends()) loaded = loaded || d.id == "CpuOneDnn";
  ASSERT_TRUE(loaded) << "CpuOneDnn was not loaded from " << kModuleDir;
  const std::string path = b.save();
  std::vector<std::string> used;
  std::vector<Tensor> got = run(path, {"CpuOneDnn"}, b.inputs(), &used);
  EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
  std::vector<Tensor> want = run(path, {"CpuRef"}, b.inputs(), nullptr);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape());
    const float* a = got[k].data_as<float>();
    const float* r = want[k].data_as<float>();
    double scale = 0, diff = 0;
    for (int64_t i = 0; i < want[k].numel(); ++i) {
      scale = std::max(scale, std::fabs(static_cast<double>(r[i])));
      const double d = std::fabs(static_cast<double>(a[i]) - r[i]);
      diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(diff, 1e-4 * scale) << "output " << k << ": max|onednn-ref| = " << diff << ", max|ref| = " << scale;
  }
}

// ---- convolution -------------------------------------------------------------

ModelBuilder conv_model(const Dims& x, int64_t oc, int64_t k, int64_t group, int64_t stride,
                        const std::vector<int64_t>& pads, int64_t dilation, bool bias) {
  ModelBuilder b;
  b.input("x", x).weight("w", {oc, x[1] / group, k, k});
  if (bias) b.weight("b", {oc});
  auto& n = bias ? b.node("Conv", {"x", "w", "b"}, {"y"}) : b.node("Conv", {"x", "w"}, {"y"});
  attr(n, "group", group);
  attr(n, "strides", std::vector<int64_t>{stride, stride});
  attr(n, "pads", pads);
  attr(n, "dilations", std::vector<int64_t>{dilation, dilation});
  attr(n, "kernel_shape", std::vector<int64_t>{k, k});
  b.output("y");
  return b;
}

TEST(OneDnnOps, Conv3x3PaddedWithBias) { expect_matches_cpuref(conv_model({1, 8, 14, 14}, 16, 3, 1, 1, {1, 1, 1, 1}, 1, true)); }
TEST(OneDnnOps, ConvStridedAsymmetricPads) { expect_matches_cpuref(conv_model({2, 3, 17, 15}, 8, 3, 1, 2, {0, 1, 2, 1}, 1, true)); }
TEST(OneDnnOps, ConvDepthwise) { expect_matches_cpuref(conv_model({1, 32, 12, 12}, 32, 3, 32, 1, {1, 1, 1, 1}, 1, true)); }
TEST(OneDnnOps, ConvGrouped) { expect_matches_cpuref(conv_model({1, 16, 10, 10}, 24, 3, 4, 1, {1, 1, 1, 1}, 1, false)); }
TEST(OneDnnOps, ConvDilated) { expect_matches_cpuref(conv_model({1, 8, 16, 16}, 8, 3, 1, 1, {2, 2, 2, 2}, 2, true)); }
TEST(OneDnnOps, Conv1x1NoBias) { expect_matches_cpuref(conv_model({1, 24, 7, 7}, 40, 1, 1, 1, {0, 0, 0, 0}, 1, false)); }

TEST(OneDnnOps, ConvBatchNormFoldedReluFused) {
  ModelBuilder b;
  b.input("x", {1, 8, 9, 9}).weight("w", {16, 8, 3, 3}).weight("b", {16});
  b.weight("scale", {16}, 0.5f, 1.5f).weight("shift", {16}).weight("mean", {16}).weight("var", {16}, 0.5f, 1.5f);
  auto& c = b.node("Conv", {"x", "w", "b"}, {"c"});
  attr(c, "pads", std::vector<int64_t>{1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConvResidualAddReluAsSumPostOp) {
  // y = relu(conv2(relu(conv1(x))) + x): the Add becomes a sum post-op that
  // accumulates into x's buffer (x has no reader after it).
  ModelBuilder b;
  b.input("x0", {1, 16, 8, 8}).weight("w0", {16, 16, 1, 1}).weight("w1", {16, 16, 3, 3}).weight("w2", {16, 16, 3, 3});
  b.node("Conv", {"x0", "w0"}, {"x"});
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"});
  attr(c1, "pads", std::vector<int64_t>{1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  auto& c2 = b.node("Conv", {"r1", "w2"}, {"c2"});
  attr(c2, "pads", std::vector<int64_t>{1, 1, 1, 1});
  b.node("Add", {"c2", "x"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConvResidualWhoseInputIsReadLater) {
  // The residual is also a graph output, so the sum must not overwrite it.
  ModelBuilder b;
  b.input("x0", {1, 8, 6, 6}).weight("w0", {8, 8, 1, 1}).weight("w1", {8, 8, 1, 1});
  b.node("Conv", {"x0", "w0"}, {"x"});
  b.node("Conv", {"x", "w1"}, {"c"});
  b.node("Add", {"c", "x"}, {"y"});
  b.output("y").output("x");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConvClipSigmoidTanh) {
  ModelBuilder b;
  b.input("x", {1, 4, 8, 8}).weight("w", {8, 4, 3, 3}).constant("lo", {}, {0.f}).constant("hi", {}, {0.5f});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Clip", {"c", "lo", "hi"}, {"y1"});
  b.node("Sigmoid", {"c"}, {"y2"});
  b.node("Tanh", {"y2"}, {"y3"});
  b.output("y1").output("y3");
  expect_matches_cpuref(b);
}

// ---- dense ---------------------------------------------------------------------

TEST(OneDnnOps, GemmTransBWithBias) {
  ModelBuilder b;
  b.input("a", {3, 20}).weight("w", {7, 20}).weight("c", {7});
  attr(b.node("Gemm", {"a", "w", "c"}, {"y"}), "transB", int64_t{1});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, GemmAlphaBetaNoTranspose) {
  ModelBuilder b;
  b.input("a", {2, 6}).weight("w", {6, 5}).weight("c", {1, 5});
  auto& n = b.node("Gemm", {"a", "w", "c"}, {"g"});
  attr(n, "alpha", 0.5f);
  attr(n, "beta", 2.0f);
  b.node("Relu", {"g"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, MatMulConstWeightsBiasGelu) {
  // MatMul + Add(bias) + erf-GELU exported the PyTorch way: one primitive.
  ModelBuilder b;
  b.input("x", {1, 6, 16}).weight("w", {16, 32}).weight("bias", {32});
  b.constant("sqrt2", {}, {1.4142135f}).constant("one", {}, {1.f}).constant("half", {}, {0.5f});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "bias"}, {"h"});
  b.node("Div", {"h", "sqrt2"}, {"d"});
  b.node("Erf", {"d"}, {"e"});
  b.node("Add", {"e", "one"}, {"f"});
  b.node("Mul", {"h", "f"}, {"g"});
  b.node("Mul", {"g", "half"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, MatMulBatchedRuntimeOperands) {
  ModelBuilder b;
  b.input("a", {2, 3, 5, 4}).input("c", {2, 3, 4, 6});
  b.node("MatMul", {"a", "c"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, MatMulBroadcastBatch) {
  ModelBuilder b;
  b.input("a", {2, 3, 5, 4}).weight("w", {4, 6});
  b.input("c", {1, 6, 2});
  b.node("MatMul", {"a", "w"}, {"m"});
  b.node("MatMul", {"m", "c"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, AttentionTransposesAreViews) {
  // scores = softmax((q k^T) / 2) v over a [1, 2, 4, 8] split, as in BERT.
  ModelBuilder b;
  b.input("x", {1, 4, 16}).weight("wq", {16, 16}).weight("wk", {16, 16}).weight("wv", {16, 16});
  b.ints("shape", {1, 4, 2, 8}).ints("back", {1, 4, 16}).constant("two", {}, {2.f});
  for (const char* p : {"q", "k", "v"}) {
    std::string s = p;
    b.node("MatMul", {"x", "w" + s}, {s + "m"});
    b.node("Reshape", {s + "m", "shape"}, {s + "r"});
    attr(b.node("Transpose", {s + "r"}, {s + "t"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  }
  attr(b.node("Transpose", {"kt"}, {"ktt"}), "perm", std::vector<int64_t>{0, 1, 3, 2});
  b.node("MatMul", {"qt", "ktt"}, {"s"});
  b.node("Div", {"s", "two"}, {"sd"});
  attr(b.node("Softmax", {"sd"}, {"p"}), "axis", int64_t{-1});
  b.node("MatMul", {"p", "vt"}, {"ctx"});
  attr(b.node("Transpose", {"ctx"}, {"ctxt"}), "perm", std::vector<int64_t>{0, 2, 1, 3});
  b.node("Reshape", {"ctxt", "back"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

// ---- pooling and normalisation ---------------------------------------------------

TEST(OneDnnOps, MaxPoolCeilMode) {
  ModelBuilder b;
  b.input("x", {1, 16, 13, 13});
  auto& n = b.node("MaxPool", {"x"}, {"y"});
  attr(n, "kernel_shape", std::vector<int64_t>{3, 3});
  attr(n, "strides", std::vector<int64_t>{2, 2});
  attr(n, "ceil_mode", int64_t{1});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, AveragePoolPaddedBothCountModes) {
  ModelBuilder b;
  b.input("x", {1, 8, 9, 9});
  for (int64_t include : {0, 1}) {
    // Not "y" + std::to_string(...): GCC 12 at -O3 reports a false -Wrestrict
    // inside libstdc++ for "literal" + std::string&&.
    auto& n = b.node("AveragePool", {"x"}, {std::string("y").append(std::to_string(include))});
    attr(n, "kernel_shape", std::vector<int64_t>{3, 3});
    attr(n, "strides", std::vector<int64_t>{2, 2});
    attr(n, "pads", std::vector<int64_t>{1, 1, 1, 1});
    attr(n, "count_include_pad", include);
  }
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, GlobalAveragePoolFlattenGemm) {
  ModelBuilder b;
  b.input("x", {2, 32, 7, 7}).weight("w", {10, 32}).weight("c", {10});
  b.node("GlobalAveragePool", {"x"}, {"p"});
  b.node("Flatten", {"p"}, {"f"});
  attr(b.node("Gemm", {"f", "w", "c"}, {"y"}), "transB", int64_t{1});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, BatchNormalizationStandalone) {
  ModelBuilder b;
  b.input("x", {2, 6, 5, 5});
  b.weight("scale", {6}, 0.5f, 1.5f).weight("shift", {6}).weight("mean", {6}).weight("var", {6}, 0.5f, 1.5f);
  b.node("Relu", {"x"}, {"r"});
  attr(b.node("BatchNormalization", {"r", "scale", "shift", "mean", "var"}, {"y"}), "epsilon", 1e-3f);
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, LayerNormalizationOp) {
  ModelBuilder b(17);
  b.input("x", {2, 5, 24}).weight("g", {24}, 0.5f, 1.5f).weight("bb", {24});
  attr(b.node("LayerNormalization", {"x", "g", "bb"}, {"y"}), "epsilon", 1e-5f);
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, LayerNormDecomposedPattern) {
  // The opset-13 decomposition PyTorch exports; matched into one primitive.
  ModelBuilder b;
  b.input("x", {1, 7, 32}).weight("g", {32}, 0.5f, 1.5f).weight("bb", {32});
  b.constant("two", {}, {2.f}).constant("eps", {}, {1e-12f});
  attr(b.node("ReduceMean", {"x"}, {"m"}), "axes", std::vector<int64_t>{-1});
  b.node("Sub", {"x", "m"}, {"d"});
  b.node("Pow", {"d", "two"}, {"p"});
  attr(b.node("ReduceMean", {"p"}, {"v"}), "axes", std::vector<int64_t>{-1});
  b.node("Add", {"v", "eps"}, {"ve"});
  b.node("Sqrt", {"ve"}, {"s"});
  b.node("Div", {"d", "s"}, {"n"});
  b.node("Mul", {"n", "g"}, {"ng"});
  b.node("Add", {"ng", "bb"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, SoftmaxInnerAndOuterAxis) {
  ModelBuilder b;
  b.input("x", {2, 3, 4});
  attr(b.node("Softmax", {"x"}, {"y0"}), "axis", int64_t{-1});
  attr(b.node("Softmax", {"x"}, {"y1"}), "axis", int64_t{1});
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

// ---- element-wise, concat, layout ops -------------------------------------------------

TEST(OneDnnOps, BinaryBroadcasting) {
  ModelBuilder b;
  b.input("x", {2, 4, 3, 3}).input("z", {2, 4, 3, 3}).weight("per_channel", {4, 1, 1}).constant("k", {}, {3.f});
  b.weight("row", {3}, 0.5f, 1.5f);
  b.node("Add", {"x", "per_channel"}, {"a"});
  b.node("Sub", {"a", "z"}, {"s"});
  b.node("Mul", {"per_channel", "s"}, {"m"});
  b.node("Div", {"m", "row"}, {"d"});
  b.node("Sub", {"k", "d"}, {"y"});
  b.node("Sigmoid", {"x"}, {"sg"});
  b.node("Div", {"k", "sg"}, {"q"});  // constant / tensor: an eltwise pow
  b.output("y").output("q");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConcatOfConvOutputs) {
  ModelBuilder b;
  b.input("x", {1, 16, 6, 6}).weight("w1", {16, 16, 1, 1}).weight("w3", {32, 16, 3, 3});
  b.node("Conv", {"x", "w1"}, {"a"});
  attr(b.node("Conv", {"x", "w3"}, {"c"}), "pads", std::vector<int64_t>{1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  attr(b.node("Concat", {"a", "r", "x"}, {"y"}), "axis", int64_t{1});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, TransposeAndReshapeOfBlockedTensor) {
  ModelBuilder b;
  b.input("x", {1, 16, 4, 5}).weight("w", {16, 16, 1, 1}).ints("shape", {1, 16, 20});
  b.node("Conv", {"x", "w"}, {"c"});
  attr(b.node("Transpose", {"c"}, {"t"}), "perm", std::vector<int64_t>{0, 2, 3, 1});
  b.node("Relu", {"t"}, {"y0"});
  b.node("Reshape", {"c", "shape"}, {"y1"});
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

// ---- support query -------------------------------------------------------------------

TEST(OneDnnOps, UnsupportedNodesFallBackWithAReason) {
  // A lone Erf is not something oneDNN 2.6 has; it goes to CpuRef and the
  // plan says why.
  ModelBuilder b;
  b.input("x", {2, 8});
  b.node("Relu", {"x"}, {"r"});
  b.node("Erf", {"r"}, {"e"});
  b.node("Sigmoid", {"e"}, {"y"});
  b.output("y");
  if (!plugin_built()) GTEST_SKIP() << "CpuOneDnn was not built";
  ASSERT_TRUE(runtime());
  const std::string path = b.save();
  std::vector<std::string> used;
  std::string plan;
  std::vector<Tensor> got = run(path, {"CpuOneDnn", "CpuRef"}, b.inputs(), &used, &plan);
  EXPECT_EQ(used, (std::vector<std::string>{"CpuOneDnn", "CpuRef"}));
  EXPECT_NE(plan.find("Erf is supported only inside"), std::string::npos) << plan;
  std::vector<Tensor> want = run(path, {"CpuRef"}, b.inputs(), nullptr);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  const float* a = got[0].data_as<float>();
  const float* r = want[0].data_as<float>();
  for (int64_t i = 0; i < want[0].numel(); ++i) EXPECT_NEAR(a[i], r[i], 1e-5f);
}

}  // namespace
}  // namespace backplane
