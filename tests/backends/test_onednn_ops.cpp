// Per-op tests of the CpuOneDnn backend (backends/onednn) against CpuRef.
//
// Each test writes a small ONNX model (one op, or the short chain a fusion
// needs), loads it twice in one runtime — on {"CpuOneDnn"} and on {"CpuRef"} —
// runs both on the same seeded input and requires
//   max|onednn - ref| <= 1e-4 * max|ref|,
// and that every node really ran on CpuOneDnn (a node it silently rejected
// would otherwise be compared with itself). CpuOneDnn is loaded the way users
// get it: as Backplane_CpuOneDnn_backend.so from this build's backend folder.
#include "support/e2e_util.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>
#include <backplane/validate.hpp>

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <array>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace backplane {
namespace {

using test::Dims;
using test::ModelBuilder;
using test::set_float;
using test::set_int;
using test::set_ints;
using test::set_string;

// This build's CpuOneDnn plugin folder (the binary is built only with it).
const std::string kModuleDir = BACKPLANE_ONEDNN_BACKEND_DIR;

// CpuOneDnn's configure keys (docs/performance.md): "layout", "winograd",
// "concat_in_place", "plan_report".
using Config = std::map<std::string, std::string>;

// A runtime per set of CpuOneDnn settings, CpuOneDnn loaded as users get it.
std::shared_ptr<Runtime> runtime(const Config& config = {}) {
  static std::map<Config, std::shared_ptr<Runtime>> runtimes;
  std::shared_ptr<Runtime>& rt = runtimes[config];
  if (!rt) rt = e2e::onednn_runtime(0, config);
  return rt;
}

// Each of `values` uniform in [lo, hi] (lo + rng() % (hi - lo + 1)).
void fill_uniform(std::vector<int32_t>& values, std::mt19937& rng, int32_t lo, int32_t hi) {
  const auto span = static_cast<uint32_t>(hi - lo + 1);
  for (int32_t& v : values) v = static_cast<int32_t>(rng() % span) + lo;
}

std::vector<Tensor> run(const std::string& path, const std::vector<std::string>& backends,
                        const std::vector<std::pair<std::string, Dims>>& inputs,
                        std::vector<std::string>* used, std::string* plan = nullptr,
                        const Config& config = {}) {
  ModelOptions mo;
  mo.backends = backends;
  auto model = runtime(config)->load_model(path, mo);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  if (used) *used = (*model)->backends_used();
  if (plan) *plan = (*model)->describe_plan(PlanFormat::kText);
  std::mt19937 rng(99);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::map<std::string, Tensor> feeds;
  for (const auto& [name, shape] : inputs) {
    Tensor t(DType::kFloat32, shape);
    float* p = t.data_as<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
    feeds[name] = t;
  }
  return e2e::run_once(**model, feeds);
}

// Runs the model on CpuOneDnn alone (configured with `config`) and on
// CpuRef, and compares. A plugin that does not load is a failure.
void expect_matches_cpuref(const ModelBuilder& b, double tolerance = 1e-4,
                           const Config& config = {}) {
  ASSERT_TRUE(runtime()) << "no runtime";
  bool loaded = false;
  for (const auto& d : runtime()->backends()) loaded = loaded || d.id == "CpuOneDnn";
  ASSERT_TRUE(loaded) << "CpuOneDnn was not loaded from " << kModuleDir;
  test::TempDir dir;
  const std::string path = b.save(dir);
  std::vector<std::string> used;
  std::vector<Tensor> got = run(path, {"CpuOneDnn"}, b.inputs(), &used, nullptr, config);
  EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
  std::vector<Tensor> want = run(path, {"CpuRef"}, b.inputs(), nullptr);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape());
    const double scale = e2e::max_abs(want[k]), diff = e2e::max_abs_diff(got[k], want[k]);
    EXPECT_GT(scale, 0.0);
    EXPECT_LE(diff, tolerance * scale)
        << "output " << k << ": max|onednn-ref| = " << diff << ", max|ref| = " << scale;
  }
}

// ---- convolution -------------------------------------------------------------

struct ConvTransposeCase {
  const char* name;
  Dims x;
  int64_t oc_per_group, k, group, stride, dilation;
  std::vector<int64_t> pads, output_padding;
  bool bias;
};

class OneDnnConvTranspose : public testing::TestWithParam<ConvTransposeCase> {};

// ConvTranspose runs on CpuOneDnn (a oneDNN deconvolution, weights read in
// ONNX's [C_in, C_out / group, kernel...] order) and matches CpuRef.
TEST_P(OneDnnConvTranspose, MatchesCpuRef) {
  const ConvTransposeCase& c = GetParam();
  const size_t sp = c.x.size() - 2;
  ModelBuilder b;
  Dims ws = {c.x[1], c.oc_per_group};
  for (size_t i = 0; i < sp; ++i) ws.push_back(c.k);
  b.input("x", test::shape_of(c.x)).random_weight("w", ws);
  if (c.bias) b.random_weight("b", {c.oc_per_group * c.group});
  auto& n = c.bias ? b.node("ConvTranspose", {"x", "w", "b"}, {"y"})
                   : b.node("ConvTranspose", {"x", "w"}, {"y"});
  set_int(n, "group", c.group);
  set_ints(n, "strides", std::vector<int64_t>(sp, c.stride));
  set_ints(n, "dilations", std::vector<int64_t>(sp, c.dilation));
  set_ints(n, "kernel_shape", std::vector<int64_t>(sp, c.k));
  if (!c.pads.empty()) set_ints(n, "pads", c.pads);
  if (!c.output_padding.empty()) set_ints(n, "output_padding", c.output_padding);
  b.output("y");
  expect_matches_cpuref(b);
}

INSTANTIATE_TEST_SUITE_P(
    OneDnnOps, OneDnnConvTranspose,
    testing::Values(
        ConvTransposeCase{"Upsample2x", {1, 16, 7, 7}, 8, 3, 1, 2, 1, {1, 1, 1, 1}, {1, 1}, true},
        ConvTransposeCase{"Kernel4Stride2", {2, 8, 5, 6}, 12, 4, 1, 2, 1, {1, 1, 1, 1}, {}, false},
        ConvTransposeCase{"Grouped", {1, 12, 6, 6}, 5, 3, 3, 1, 1, {1, 1, 1, 1}, {}, true},
        ConvTransposeCase{"Dilated", {1, 4, 5, 5}, 6, 3, 1, 1, 2, {}, {}, true},
        ConvTransposeCase{"OneD", {1, 6, 9}, 4, 5, 1, 3, 1, {2, 1}, {}, true},
        ConvTransposeCase{"ThreeD", {1, 4, 3, 4, 5}, 3, 2, 1, 2, 1, {}, {}, false}),
    [](const testing::TestParamInfo<ConvTransposeCase>& i) { return i.param.name; });

ModelBuilder conv_model(const Dims& x, int64_t oc, int64_t k, int64_t group, int64_t stride,
                        const std::vector<int64_t>& pads, int64_t dilation, bool bias) {
  ModelBuilder b;
  b.input("x", test::shape_of(x)).random_weight("w", {oc, x[1] / group, k, k});
  if (bias) b.random_weight("b", {oc});
  auto& n = bias ? b.node("Conv", {"x", "w", "b"}, {"y"}) : b.node("Conv", {"x", "w"}, {"y"});
  set_int(n, "group", group);
  set_ints(n, "strides", {stride, stride});
  set_ints(n, "pads", pads);
  set_ints(n, "dilations", {dilation, dilation});
  set_ints(n, "kernel_shape", {k, k});
  b.output("y");
  return b;
}

TEST(OneDnnOps, Conv3x3PaddedWithBias) {
  expect_matches_cpuref(conv_model({1, 8, 14, 14}, 16, 3, 1, 1, {1, 1, 1, 1}, 1, true));
}
TEST(OneDnnOps, ConvStridedAsymmetricPads) {
  expect_matches_cpuref(conv_model({2, 3, 17, 15}, 8, 3, 1, 2, {0, 1, 2, 1}, 1, true));
}
TEST(OneDnnOps, ConvDepthwise) {
  expect_matches_cpuref(conv_model({1, 32, 12, 12}, 32, 3, 32, 1, {1, 1, 1, 1}, 1, true));
}
TEST(OneDnnOps, ConvGrouped) {
  expect_matches_cpuref(conv_model({1, 16, 10, 10}, 24, 3, 4, 1, {1, 1, 1, 1}, 1, false));
}
TEST(OneDnnOps, ConvGroupedBetweenChannelsLastConvs) {
  // RegNet-Y's block: 1x1 conv (channels-last), grouped 3x3 conv (kept
  // channels-last), squeeze-and-excitation (global pool, 1x1 convs, sigmoid,
  // product), 1x1 conv.
  ModelBuilder b;
  b.input("x", {1, 32, 14, 14}).random_weight("w1", {64, 32, 1, 1});
  b.random_weight("wg", {64, 16, 3, 3}).random_weight("bg", {64});
  b.random_weight("ws1", {16, 64, 1, 1}).random_weight("ws2", {64, 16, 1, 1});
  b.random_weight("w3", {32, 64, 1, 1});
  b.node("Conv", {"x", "w1"}, {"a"});
  b.node("Relu", {"a"}, {"ar"});
  auto& g = b.node("Conv", {"ar", "wg", "bg"}, {"c"});
  set_int(g, "group", 4);
  set_ints(g, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"cr"});
  b.node("GlobalAveragePool", {"cr"}, {"s"});
  b.node("Conv", {"s", "ws1"}, {"s1"});
  b.node("Relu", {"s1"}, {"s1r"});
  b.node("Conv", {"s1r", "ws2"}, {"s2"});
  b.node("Sigmoid", {"s2"}, {"gate"});
  b.node("Mul", {"cr", "gate"}, {"se"});
  b.node("Conv", {"se", "w3"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}
TEST(OneDnnOps, SiLUAsSwishPostOpAndStandalone) {
  // EfficientNet's SiLU as PyTorch exports it (Sigmoid, then Mul of the
  // input and the sigmoid, either order): fused into the Conv before it;
  // standalone on an input; and a Sigmoid also read elsewhere (no pattern).
  ModelBuilder b;
  b.input("x", {1, 8, 6, 6}).input("t", {2, 5, 16}).random_weight("w", {16, 8, 3, 3});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Sigmoid", {"c"}, {"cs"});
  b.node("Mul", {"c", "cs"}, {"y0"});
  b.node("Sigmoid", {"t"}, {"ts"});
  b.node("Mul", {"ts", "t"}, {"y1"});
  b.node("Sigmoid", {"x"}, {"xs"});
  b.node("Mul", {"x", "xs"}, {"y2"});
  b.output("y0").output("y1").output("y2").output("xs");
  expect_matches_cpuref(b);
}
TEST(OneDnnOps, ChannelShuffleBetweenConvs) {
  // ShuffleNet's channel shuffle of a channels-last Conv output (reshape to
  // groups, transpose, reshape back), then a Conv and a Concat with the
  // other half, as its blocks do.
  ModelBuilder b;
  b.input("x", {1, 8, 6, 6}).random_weight("w", {12, 8, 1, 1}).random_weight("w2", {6, 6, 1, 1});
  b.init_i64("g", {5}, {1, 2, 6, 6, 6}).init_i64("back", {4}, {1, 12, 6, 6});
  b.init_i64("halves", {2}, {6, 6});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Reshape", {"c", "g"}, {"r"});
  set_ints(b.node("Transpose", {"r"}, {"t"}), "perm", {0, 2, 1, 3, 4});
  b.node("Reshape", {"t", "back"}, {"s"});
  set_int(b.node("Split", {"s", "halves"}, {"s0", "s1"}), "axis", 1);
  b.node("Conv", {"s1", "w2"}, {"s1c"});
  set_int(b.node("Concat", {"s0", "s1c"}, {"y"}), "axis", 1);
  b.output("y").output("s");
  expect_matches_cpuref(b);
}
TEST(OneDnnOps, ConvResidualOfItsOwnInput) {
  // EfficientNetV2's FusedMBConv at expand ratio 1: x + silu(conv3x3(x)),
  // the residual the convolution's own input (it must not become its dst);
  // and the same with a ReLU.
  ModelBuilder b;
  b.input("in", {1, 8, 7, 7}).random_weight("w0", {16, 8, 1, 1});
  b.random_weight("w1", {16, 16, 3, 3}).random_weight("w2", {16, 16, 3, 3});
  b.node("Conv", {"in", "w0"}, {"x"});
  set_ints(b.node("Conv", {"x", "w1"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Sigmoid", {"c"}, {"cs"});
  b.node("Mul", {"c", "cs"}, {"silu"});
  b.node("Add", {"silu", "x"}, {"y"});
  set_ints(b.node("Conv", {"y", "w2"}, {"d"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"d"}, {"dr"});
  b.node("Add", {"y", "dr"}, {"z"});
  b.output("z");
  expect_matches_cpuref(b);
}
TEST(OneDnnOps, ConvDilated) {
  expect_matches_cpuref(conv_model({1, 8, 16, 16}, 8, 3, 1, 1, {2, 2, 2, 2}, 2, true));
}
TEST(OneDnnOps, Conv1x1NoBias) {
  expect_matches_cpuref(conv_model({1, 24, 7, 7}, 40, 1, 1, 1, {0, 0, 0, 0}, 1, false));
}

TEST(OneDnnOps, ConvBatchNormFoldedReluFused) {
  ModelBuilder b;
  b.input("x", {1, 8, 9, 9}).random_weight("w", {16, 8, 3, 3}).random_weight("b", {16});
  b.random_weight("scale", {16}, 0.5f, 1.5f)
      .random_weight("shift", {16})
      .random_weight("mean", {16})
      .random_weight("var", {16}, 0.5f, 1.5f);
  auto& c = b.node("Conv", {"x", "w", "b"}, {"c"});
  set_ints(c, "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConvResidualAddReluAsSumPostOp) {
  // y = relu(conv2(relu(conv1(x))) + x): the Add becomes a sum post-op that
  // accumulates into x's buffer (x has no reader after it).
  ModelBuilder b;
  b.input("x0", {1, 16, 8, 8})
      .random_weight("w0", {16, 16, 1, 1})
      .random_weight("w1", {16, 16, 3, 3})
      .random_weight("w2", {16, 16, 3, 3});
  b.node("Conv", {"x0", "w0"}, {"x"});
  auto& c1 = b.node("Conv", {"x", "w1"}, {"c1"});
  set_ints(c1, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c1"}, {"r1"});
  auto& c2 = b.node("Conv", {"r1", "w2"}, {"c2"});
  set_ints(c2, "pads", {1, 1, 1, 1});
  b.node("Add", {"c2", "x"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConvResidualWhoseInputIsReadLater) {
  // The residual is also a graph output, so the sum must not overwrite it.
  ModelBuilder b;
  b.input("x0", {1, 8, 6, 6}).random_weight("w0", {8, 8, 1, 1}).random_weight("w1", {8, 8, 1, 1});
  b.node("Conv", {"x0", "w0"}, {"x"});
  b.node("Conv", {"x", "w1"}, {"c"});
  b.node("Add", {"c", "x"}, {"y"});
  b.output("y").output("x");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConvClipSigmoidTanh) {
  ModelBuilder b;
  b.input("x", {1, 4, 8, 8})
      .random_weight("w", {8, 4, 3, 3})
      .init_f32("lo", {}, {0.f})
      .init_f32("hi", {}, {0.5f});
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
  b.input("a", {3, 20}).random_weight("w", {7, 20}).random_weight("c", {7});
  set_int(b.node("Gemm", {"a", "w", "c"}, {"y"}), "transB", 1);
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, GemmAlphaBetaNoTranspose) {
  ModelBuilder b;
  b.input("a", {2, 6}).random_weight("w", {6, 5}).random_weight("c", {1, 5});
  auto& n = b.node("Gemm", {"a", "w", "c"}, {"g"});
  set_float(n, "alpha", 0.5f);
  set_float(n, "beta", 2.0f);
  b.node("Relu", {"g"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, MatMulConstWeightsBiasGelu) {
  // MatMul + Add(bias) + erf-GELU exported the PyTorch way: one primitive.
  ModelBuilder b;
  b.input("x", {1, 6, 16}).random_weight("w", {16, 32}).random_weight("bias", {32});
  b.init_f32("sqrt2", {}, {1.4142135f}).init_f32("one", {}, {1.f}).init_f32("half", {}, {0.5f});
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
  b.input("a", {2, 3, 5, 4}).random_weight("w", {4, 6});
  b.input("c", {1, 6, 2});
  b.node("MatMul", {"a", "w"}, {"m"});
  b.node("MatMul", {"m", "c"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, MatMulOfTransposedActivationByConstWeights) {
  // ViT's attention input: [1, seq, dim] transposed to [seq, 1, dim] (only
  // a size-1 dim moves) times [dim, 3 dim] weights, plus bias; and a truly
  // permuted src ([2, 5, 8] read as [5, 2, 8]). Both run as one 2-D product.
  ModelBuilder b;
  b.input("x", {1, 7, 16}).input("z", {2, 5, 8});
  b.random_weight("w", {16, 48}).random_weight("bias", {48}).random_weight("v", {8, 12});
  set_ints(b.node("Transpose", {"x"}, {"xt"}), "perm", {1, 0, 2});
  b.node("MatMul", {"xt", "w"}, {"m"});
  b.node("Add", {"bias", "m"}, {"y"});
  set_ints(b.node("Transpose", {"z"}, {"zt"}), "perm", {1, 0, 2});
  b.node("MatMul", {"zt", "v"}, {"u"});
  b.output("y").output("u");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, MatMulByConstWeightsWithResidualSum) {
  // A rank-4 activation (ConvNeXt's channels-last MLP) times weights, the
  // residual added as a sum post-op into the collapsed product's dst.
  ModelBuilder b;
  b.input("x", {2, 3, 4, 8}).input("r", {2, 3, 4, 6}).random_weight("w", {8, 6});
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Add", {"m", "r"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, AttentionTransposesAreViews) {
  // scores = softmax((q k^T) / 2) v over a [1, 2, 4, 8] split, as in BERT.
  ModelBuilder b;
  b.input("x", {1, 4, 16})
      .random_weight("wq", {16, 16})
      .random_weight("wk", {16, 16})
      .random_weight("wv", {16, 16});
  b.init_i64("shape", {4}, {1, 4, 2, 8})
      .init_i64("back", {3}, {1, 4, 16})
      .init_f32("two", {}, {2.f});
  for (const char* p : {"q", "k", "v"}) {
    std::string s = p;
    b.node("MatMul", {"x", "w" + s}, {s + "m"});
    b.node("Reshape", {s + "m", "shape"}, {s + "r"});
    set_ints(b.node("Transpose", {s + "r"}, {s + "t"}), "perm", {0, 2, 1, 3});
  }
  set_ints(b.node("Transpose", {"kt"}, {"ktt"}), "perm", {0, 1, 3, 2});
  b.node("MatMul", {"qt", "ktt"}, {"s"});
  b.node("Div", {"s", "two"}, {"sd"});
  set_int(b.node("Softmax", {"sd"}, {"p"}), "axis", -1);
  b.node("MatMul", {"p", "vt"}, {"ctx"});
  set_ints(b.node("Transpose", {"ctx"}, {"ctxt"}), "perm", {0, 2, 1, 3});
  b.node("Reshape", {"ctxt", "back"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

// ---- pooling and normalisation ---------------------------------------------------

TEST(OneDnnOps, MaxPoolCeilMode) {
  ModelBuilder b;
  b.input("x", {1, 16, 13, 13});
  auto& n = b.node("MaxPool", {"x"}, {"y"});
  set_ints(n, "kernel_shape", {3, 3});
  set_ints(n, "strides", {2, 2});
  set_int(n, "ceil_mode", 1);
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
    set_ints(n, "kernel_shape", {3, 3});
    set_ints(n, "strides", {2, 2});
    set_ints(n, "pads", {1, 1, 1, 1});
    set_int(n, "count_include_pad", include);
  }
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, GlobalAveragePoolFlattenGemm) {
  ModelBuilder b;
  b.input("x", {2, 32, 7, 7}).random_weight("w", {10, 32}).random_weight("c", {10});
  b.node("GlobalAveragePool", {"x"}, {"p"});
  b.node("Flatten", {"p"}, {"f"});
  set_int(b.node("Gemm", {"f", "w", "c"}, {"y"}), "transB", 1);
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, BatchNormalizationStandalone) {
  ModelBuilder b;
  b.input("x", {2, 6, 5, 5});
  b.random_weight("scale", {6}, 0.5f, 1.5f)
      .random_weight("shift", {6})
      .random_weight("mean", {6})
      .random_weight("var", {6}, 0.5f, 1.5f);
  b.node("Relu", {"x"}, {"r"});
  set_float(b.node("BatchNormalization", {"r", "scale", "shift", "mean", "var"}, {"y"}), "epsilon",
            1e-3f);
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, BatchNormalizationReluOfConcatenatedFeatures) {
  // DenseNet's pre-activation: BN then ReLU (one oneDNN pass) on features
  // concatenated from two convolutions, then a convolution; and a BN whose
  // output is also read elsewhere (its ReLU stays separate).
  ModelBuilder b;
  b.input("x", {1, 8, 6, 6}).random_weight("w0", {8, 8, 3, 3}).random_weight("w1", {4, 16, 1, 1});
  b.random_weight("scale", {16}, 0.5f, 1.5f)
      .random_weight("shift", {16})
      .random_weight("mean", {16})
      .random_weight("var", {16}, 0.5f, 1.5f);
  set_ints(b.node("Conv", {"x", "w0"}, {"c"}), "pads", {1, 1, 1, 1});
  set_int(b.node("Concat", {"x", "c"}, {"cat"}), "axis", 1);
  b.node("BatchNormalization", {"cat", "scale", "shift", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"r"});
  b.node("Conv", {"r", "w1"}, {"y0"});
  b.node("BatchNormalization", {"cat", "scale", "shift", "mean", "var"}, {"bn2"});
  b.node("Relu", {"bn2"}, {"y1"});
  b.output("y0").output("y1").output("bn2");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ConcatThenBatchNormalizationInOnePass) {
  // A DenseNet block: each layer normalizes (BN, ReLU) the concatenation of
  // every feature so far, its only reader; CpuOneDnn writes the normalized
  // features straight from the sources (concat_norm), the Concat of one
  // source too, with and without the ReLU.
  ModelBuilder b;
  b.input("x", {2, 5, 40, 40}).random_weight("w0", {8, 5, 3, 3}).random_weight("w1", {4, 8, 1, 1});
  b.random_weight("w2", {4, 12, 3, 3}).random_weight("w3", {6, 16, 1, 1});
  for (const char* s : {"1", "2", "3"})
    b.random_weight(std::string("g") + s,
                    {s[0] == '1'   ? 8
                     : s[0] == '2' ? 12
                                   : 16},
                    0.5f, 1.5f)
        .random_weight(std::string("b") + s, {s[0] == '1'   ? 8
                                              : s[0] == '2' ? 12
                                                            : 16})
        .random_weight(std::string("m") + s, {s[0] == '1'   ? 8
                                              : s[0] == '2' ? 12
                                                            : 16})
        .random_weight(std::string("v") + s,
                       {s[0] == '1'   ? 8
                        : s[0] == '2' ? 12
                                      : 16},
                       0.5f, 1.5f);
  set_ints(b.node("Conv", {"x", "w0"}, {"f0"}), "pads", {1, 1, 1, 1});
  set_int(b.node("Concat", {"f0"}, {"c1"}), "axis", 1);
  b.node("BatchNormalization", {"c1", "g1", "b1", "m1", "v1"}, {"n1"});
  b.node("Relu", {"n1"}, {"r1"});
  b.node("Conv", {"r1", "w1"}, {"f1"});
  set_int(b.node("Concat", {"f0", "f1"}, {"c2"}), "axis", -3);
  b.node("BatchNormalization", {"c2", "g2", "b2", "m2", "v2"}, {"n2"});
  b.node("Relu", {"n2"}, {"r2"});
  set_ints(b.node("Conv", {"r2", "w2"}, {"f2"}), "pads", {1, 1, 1, 1});
  set_int(b.node("Concat", {"f0", "f1", "f2"}, {"c3"}), "axis", 1);
  b.node("BatchNormalization", {"c3", "g3", "b3", "m3", "v3"}, {"n3"});
  b.node("Conv", {"n3", "w3"}, {"y"});
  b.output("y").output("n3");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, LayerNormalizationOp) {
  ModelBuilder b(17);
  b.input("x", {2, 5, 24}).random_weight("g", {24}, 0.5f, 1.5f).random_weight("bb", {24});
  set_float(b.node("LayerNormalization", {"x", "g", "bb"}, {"y"}), "epsilon", 1e-5f);
  b.output("y");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, LayerNormDecomposedPattern) {
  // The opset-13 decomposition PyTorch exports; matched into one primitive.
  ModelBuilder b;
  b.input("x", {1, 7, 32}).random_weight("g", {32}, 0.5f, 1.5f).random_weight("bb", {32});
  b.init_f32("two", {}, {2.f}).init_f32("eps", {}, {1e-12f});
  set_ints(b.node("ReduceMean", {"x"}, {"m"}), "axes", {-1});
  b.node("Sub", {"x", "m"}, {"d"});
  b.node("Pow", {"d", "two"}, {"p"});
  set_ints(b.node("ReduceMean", {"p"}, {"v"}), "axes", {-1});
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
  set_int(b.node("Softmax", {"x"}, {"y0"}), "axis", -1);
  set_int(b.node("Softmax", {"x"}, {"y1"}), "axis", 1);
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

// ---- element-wise, concat, layout ops -------------------------------------------------

TEST(OneDnnOps, BinaryBroadcasting) {
  ModelBuilder b;
  b.input("x", {2, 4, 3, 3})
      .input("z", {2, 4, 3, 3})
      .random_weight("per_channel", {4, 1, 1})
      .init_f32("k", {}, {3.f});
  b.random_weight("row", {3}, 0.5f, 1.5f);
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
  b.input("x", {1, 16, 6, 6})
      .random_weight("w1", {16, 16, 1, 1})
      .random_weight("w3", {32, 16, 3, 3});
  b.node("Conv", {"x", "w1"}, {"a"});
  set_ints(b.node("Conv", {"x", "w3"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  set_int(b.node("Concat", {"a", "r", "x"}, {"y"}), "axis", 1);
  b.output("y");
  expect_matches_cpuref(b);
}

// Two SqueezeNet fire modules (a 1x1 squeeze, then 1x1 and 3x3 expands
// joined by a Concat along the channels), the second's Concat inside a
// third, the first's also read by a pooling that is an output.
ModelBuilder fire_modules() {
  ModelBuilder b;
  b.input("x", {1, 16, 10, 10});
  b.random_weight("s1", {16, 16, 1, 1}).random_weight("e1a", {32, 16, 1, 1});
  b.random_weight("e1b", {32, 16, 3, 3}).random_weight("s2", {16, 64, 1, 1});
  b.random_weight("e2a", {16, 16, 1, 1}).random_weight("e2b", {32, 16, 3, 3});
  b.random_weight("side", {16, 64, 1, 1}).random_weight("head", {16, 64, 3, 3});
  b.random_weight("bias", {32});
  b.node("Conv", {"x", "s1"}, {"q1"});
  b.node("Relu", {"q1"}, {"r1"});
  b.node("Conv", {"r1", "e1a", "bias"}, {"a1"});
  b.node("Relu", {"a1"}, {"ra1"});
  set_ints(b.node("Conv", {"r1", "e1b"}, {"b1"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"b1"}, {"rb1"});
  set_int(b.node("Concat", {"ra1", "rb1"}, {"c1"}), "axis", 1);
  auto& pool = b.node("MaxPool", {"c1"}, {"p1"});
  set_ints(pool, "kernel_shape", {2, 2});
  set_ints(pool, "strides", {2, 2});
  b.node("Conv", {"c1", "s2"}, {"q2"});
  b.node("Conv", {"q2", "e2a"}, {"a2"});
  set_ints(b.node("Conv", {"q2", "e2b"}, {"b2"}), "pads", {1, 1, 1, 1});
  set_int(b.node("Concat", {"a2", "b2"}, {"c2"}), "axis", 1);
  b.node("Conv", {"c1", "side"}, {"d"});
  set_int(b.node("Concat", {"d", "c2"}, {"c3"}), "axis", -3);
  set_ints(b.node("Conv", {"c3", "head"}, {"y"}), "pads", {1, 1, 1, 1});
  b.output("y").output("p1");
  return b;
}

// The plan report's lines (impl_check.hpp) of the model loaded on CpuOneDnn
// configured with `config`: "partition<TAB>kind<TAB>impl<TAB>layouts<TAB>what".
// `threads`: the runtime's (0: the default).
std::vector<std::string> plan_report(const ModelBuilder& b, const Config& config, int threads = 0) {
  test::TempDir dir;
  const std::string report = dir.file("plan.tsv"), path = b.save(dir);
  Config with_report = config;
  with_report["plan_report"] = report;
  ModelOptions mo;
  mo.backends = {"CpuOneDnn"};
  const bool loaded = e2e::onednn_runtime(threads, with_report)->load_model(path, mo).ok();
  EXPECT_TRUE(loaded);
  std::ifstream in(report);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  EXPECT_FALSE(lines.empty()) << "no plan report";
  return lines;
}

// How many steps of primitive kind `kind` that plan has.
int steps_of_kind(const ModelBuilder& b, const Config& config, const std::string& kind) {
  int n = 0;
  for (const std::string& line : plan_report(b, config)) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos && line.compare(tab + 1, kind.size() + 1, kind + "\t") == 0) ++n;
  }
  return n;
}

TEST(OneDnnOps, ConfigureRefusesUnknownKeysAndValues) {
  for (const auto& [key, value, why] :
       std::vector<std::array<std::string, 3>>{{"layot", "blocked", "unknown configuration key 'layot'"},
                                               {"layout", "nhwc", "is not auto, onednn or blocked"},
                                               {"winograd", "maybe", "is not on or off"},
                                               {"shape_instances", "0", "from 1 to 100000"}}) {
    RuntimeOptions o;
    o.backend_path = kModuleDir;
    o.backend_config["CpuOneDnn"][key] = value;
    auto rt = Runtime::create(o);
    ASSERT_FALSE(rt.ok()) << key;
    EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument) << key;
    EXPECT_NE(rt.status().message().find(why), std::string::npos) << rt.status().message();
  }
}

TEST(OneDnnOps, GroupedConvolutionsBlocked) {
  // RegNet-Y's grouped 3x3 convolution, 16 channels a group, blocked
  // (nChw16c: a group a block), and groups of 8 channels, where a block of
  // 16 holds two groups.
  ModelBuilder b;
  b.input("x", {1, 64, 28, 28}).random_weight("w1", {64, 64, 1, 1});
  b.random_weight("wg", {64, 16, 3, 3}).random_weight("bg", {64});
  b.node("Conv", {"x", "w1"}, {"a"}, "expand");
  b.node("Relu", {"a"}, {"ar"});
  auto& g = b.node("Conv", {"ar", "wg", "bg"}, {"y"}, "grouped");
  set_int(g, "group", 4);
  set_ints(g, "pads", {1, 1, 1, 1});
  b.output("y");
  expect_matches_cpuref(b, 1e-4, {{"layout", "blocked"}});
  ModelBuilder eights;
  eights.input("x", {1, 64, 28, 28}).random_weight("w1", {64, 64, 1, 1});
  eights.random_weight("wg", {64, 8, 3, 3});
  eights.node("Conv", {"x", "w1"}, {"a"}, "expand");
  auto& h = eights.node("Conv", {"a", "wg"}, {"y"}, "grouped");
  set_int(h, "group", 8);
  set_ints(h, "pads", {1, 1, 1, 1});
  eights.output("y");
  expect_matches_cpuref(eights, 1e-4, {{"layout", "blocked"}});
}

TEST(OneDnnOps, ClassifierGemmsOfOneImage) {
  // MobileNetV3's classifier: Gemm 960 -> 1280, HardSwish, Gemm 1280 -> 1000,
  // one image.
  ModelBuilder b(14);
  b.input("x", {1, 960}).random_weight("w1", {1280, 960}, -0.05f, 0.05f);
  b.random_weight("b1", {1280}).random_weight("w2", {1000, 1280}, -0.05f, 0.05f);
  b.random_weight("b2", {1000});
  set_int(b.node("Gemm", {"x", "w1", "b1"}, {"h"}, "fc1"), "transB", 1);
  b.node("HardSwish", {"h"}, {"hs"});
  set_int(b.node("Gemm", {"hs", "w2", "b2"}, {"y"}, "fc2"), "transB", 1);
  b.output("y");
  expect_matches_cpuref(b);
}

// The model matches CpuRef on CpuOneDnn, whose plan is `convolutions`
// convolutions and nothing else: every activation and product their post-ops.
void expect_convolutions_alone(const ModelBuilder& b, int convolutions) {
  expect_matches_cpuref(b);
  EXPECT_EQ(steps_of_kind(b, {}, "convolution"), convolutions);
  EXPECT_EQ(steps_of_kind(b, {}, "eltwise"), 0);
  EXPECT_EQ(steps_of_kind(b, {}, "binary"), 0);
}

TEST(OneDnnOps, DecomposedHardSwishIsOnePostOp) {
  // HardSwish as exporters write it before opset 14, each after a Conv with
  // an affine step before it and after it (PP-LCNet's blocks, as
  // paddle2onnx exports them): x * clip(x + 3, 0, 6) / 6; x * (relu6(x + 3)
  // * 1/6); PyTorch's x * HardSigmoid(x, 1/6, 0.5). Each block is one
  // convolution: the affine step before folded into its weights, the
  // HardSwish and the affine step after it its post-ops.
  auto scalar = [](ModelBuilder& b, const std::string& name, float v) {
    b.init_f32(name, {}, {v});
  };
  ModelBuilder b(9);
  b.input("x", {1, 8, 9, 11}).random_weight("w0", {16, 8, 3, 3}).random_weight("b0", {16});
  b.random_weight("w1", {16, 1, 3, 3}).random_weight("w2", {8, 16, 1, 1}).random_weight("b2", {8});
  b.random_weight("w3", {8, 8, 1, 1});
  scalar(b, "three", 3.f);
  scalar(b, "six", 6.f);
  scalar(b, "sixth", 1.f / 6);
  scalar(b, "s", 1.38f);
  scalar(b, "t", 0.59f);
  scalar(b, "u", 0.17f);
  scalar(b, "v", -0.2f);
  auto affine = [&](const std::string& in, const std::string& out) {
    b.node("Mul", {"s", in}, {out + "_m"});
    b.node("Add", {out + "_m", "t"}, {out});
  };
  auto affine_after = [&](const std::string& in, const std::string& out) {
    b.node("Mul", {"u", in}, {out + "_m"});
    b.node("Add", {out + "_m", "v"}, {out});
  };
  // relu6(a + 3), the sum's operands in either order (opset 9: Clip's bounds
  // are attributes).
  auto relu6_of_plus3 = [&](const std::string& a, bool three_first, const std::string& out) {
    b.node("Add", three_first ? std::vector<std::string>{"three", a} : std::vector<std::string>{a, "three"},
           {out + "_p"});
    auto& clip = b.node("Clip", {out + "_p"}, {out});
    set_float(clip, "min", 0.f);
    set_float(clip, "max", 6.f);
  };
  set_ints(b.node("Conv", {"x", "w0", "b0"}, {"c0"}), "pads", {1, 1, 1, 1});
  affine("c0", "a0");
  relu6_of_plus3("a0", false, "r0");
  b.node("Mul", {"a0", "r0"}, {"m0"});
  b.node("Div", {"m0", "six"}, {"h0"});
  affine_after("h0", "y0");
  auto& dw = b.node("Conv", {"y0", "w1"}, {"c1"});
  set_int(dw, "group", 16);
  set_ints(dw, "pads", {1, 1, 1, 1});
  affine("c1", "a1");
  relu6_of_plus3("a1", true, "r1");
  b.node("Mul", {"r1", "sixth"}, {"g1"});
  b.node("Mul", {"g1", "a1"}, {"h1"});
  affine_after("h1", "y1");
  b.node("Conv", {"y1", "w2", "b2"}, {"c2"});
  auto& hs = b.node("HardSigmoid", {"c2"}, {"g2"});
  set_float(hs, "alpha", 1.f / 6);
  set_float(hs, "beta", 0.5f);
  b.node("Mul", {"c2", "g2"}, {"h2"});
  b.node("Conv", {"h2", "w3"}, {"y"});
  b.output("y");
  expect_convolutions_alone(b, 4);
}

TEST(OneDnnOps, SwishWithABetaIsOnePostOp) {
  // Paddle2ONNX's swish, x * sigmoid(beta * x) with a Mul by beta first
  // (PP-OCR's SVTR neck: beta 1): a post-op of the Conv before it, with
  // beta 1 and 1.7.
  ModelBuilder b;
  b.input("x", {1, 8, 5, 7}).random_weight("w0", {16, 8, 1, 3}).random_weight("w1", {8, 16, 1, 1});
  b.init_f32("one", {}, {1.f}).init_f32("beta", {}, {1.7f});
  set_ints(b.node("Conv", {"x", "w0"}, {"c0"}), "pads", {0, 1, 0, 1});
  b.node("Mul", {"c0", "one"}, {"s0"});
  b.node("Sigmoid", {"s0"}, {"g0"});
  b.node("Mul", {"c0", "g0"}, {"y0"});
  b.node("Conv", {"y0", "w1"}, {"c1"});
  b.node("Mul", {"beta", "c1"}, {"s1"});
  b.node("Sigmoid", {"s1"}, {"g1"});
  b.node("Mul", {"g1", "c1"}, {"y"});
  b.output("y");
  expect_convolutions_alone(b, 2);
}

TEST(OneDnnOps, PointwiseConvsOfAnOpenWidthAreOneMatmulForEveryWidth) {
  // A text line's convolutions (PP-OCR's recogniser) at a new width each
  // run: the 1x1 ones, between channels-last tensors, are each one matmul
  // whose rows are the pixels, the same primitive at every width (a
  // convolution's code is generated per width). With a bias, an activation,
  // and a residual Add as the last one's post-ops; the results are CpuRef's.
  ModelBuilder b(14);
  b.input("x", {1, 8, 6, "W"}).random_weight("w0", {16, 8, 3, 3}).random_weight("b0", {16});
  b.random_weight("w1", {24, 16, 1, 1}).random_weight("b1", {24});
  b.random_weight("w2", {16, 24, 1, 1});
  set_ints(b.node("Conv", {"x", "w0", "b0"}, {"c0"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c0"}, {"r0"});
  b.node("Conv", {"r0", "w1", "b1"}, {"c1"});
  b.node("HardSwish", {"c1"}, {"h1"});
  b.node("Conv", {"h1", "w2"}, {"c2"});
  b.node("Add", {"c2", "r0"}, {"y"});
  b.output("y");
  test::TempDir dir;
  const std::string path = b.save(dir);
  ModelOptions only;
  only.backends = {"CpuOneDnn"};
  auto fast = runtime()->load_model(path, only);
  ASSERT_TRUE(fast.ok()) << fast.status().to_string();
  only.backends = {"CpuRef"};
  auto ref = runtime()->load_model(path, only);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  auto session = (*fast)->create_session();
  ASSERT_TRUE(session.ok());
  for (int64_t width : {5, 9, 7, 12, 1, 30}) {
    Tensor x(DType::kFloat32, {1, 8, 6, width});
    for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::sin(0.37f * i);
    ASSERT_TRUE((*session)->set_input("x", x).ok());
    const bool profiled = width == 30;
    if (profiled) {
      ASSERT_TRUE((*session)->start_profiling(dir.file("trace.json")).ok());
    }
    const Status ran = (*session)->run();
    ASSERT_TRUE(ran.ok()) << "width " << width << ": " << ran.to_string();
    const Tensor want = e2e::run_once(**ref, {{"x", x}}).at(0);
    const Tensor& got = (*session)->output(0);
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(e2e::max_abs_diff(got, want), 1e-4 * e2e::max_abs(want)) << "width " << width;
    if (!profiled) continue;
    auto summary = (*session)->end_profiling();
    ASSERT_TRUE(summary.ok()) << summary.status().to_string();
    std::map<std::string, uint64_t> kinds;
    for (const auto& row : summary->by_op_type) kinds[row.name] = row.count;
    EXPECT_EQ(kinds["convolution"], 1u) << summary->to_string();
    EXPECT_EQ(kinds["matmul"], 2u) << summary->to_string();
  }
}

TEST(OneDnnOps, ConcatsOfBlockedChannelsAreWrittenInPlace) {
  // In the blocked layout the fire modules' Concats (the nested one too)
  // cost nothing: each source is written into its window of the
  // concatenation, and no concat step is left.
  const ModelBuilder b = fire_modules();
  EXPECT_EQ(steps_of_kind(b, {{"layout", "blocked"}}, "concat"), 0);
  // The same plan without the pass has all three.
  EXPECT_EQ(steps_of_kind(b, {{"layout", "blocked"}, {"concat_in_place", "off"}}, "concat"), 3);
  expect_matches_cpuref(b, 1e-4, {{"layout", "blocked"}});
  // oneDNN's own choice depends on the CPU: channels-last (with AVX-512),
  // where a Concat along the channels interleaves and is copied, or blocked
  // (without), where it is written in place as above.
  bool channels_last = false;
  for (const std::string& line : plan_report(b, {{"layout", "onednn"}}))
    channels_last |= line.find("\tconvolution\t") != std::string::npos &&
                     line.find("dst:acdb") != std::string::npos;
  EXPECT_EQ(steps_of_kind(b, {{"layout", "onednn"}}, "concat"), channels_last ? 3 : 0);
  expect_matches_cpuref(b, 1e-4, {{"layout", "onednn"}});
}

TEST(OneDnnOps, ConcatSourcesThatCannotMoveAreCopied) {
  // A source given twice, a source that is an output of the partition, a
  // source another Concat reads too, channels not a whole block: each of
  // these Concats is copied, and the results stay right.
  ModelBuilder b;
  b.input("x", {1, 16, 6, 6}).random_weight("w", {16, 16, 3, 3}).random_weight("v", {8, 16, 1, 1});
  set_ints(b.node("Conv", {"x", "w"}, {"a"}), "pads", {1, 1, 1, 1});
  b.node("Conv", {"x", "v"}, {"e"});
  set_int(b.node("Concat", {"a", "a"}, {"twice"}), "axis", 1);
  set_int(b.node("Concat", {"a", "x"}, {"with_input"}), "axis", 1);
  set_int(b.node("Concat", {"a", "e"}, {"odd"}), "axis", 1);
  b.output("twice").output("with_input").output("odd").output("a");
  expect_matches_cpuref(b, 1e-4, {{"layout", "blocked"}});
}

TEST(OneDnnOps, TransposeAndReshapeOfBlockedTensor) {
  ModelBuilder b;
  b.input("x", {1, 16, 4, 5})
      .random_weight("w", {16, 16, 1, 1})
      .init_i64("shape", {3}, {1, 16, 20});
  b.node("Conv", {"x", "w"}, {"c"});
  set_ints(b.node("Transpose", {"c"}, {"t"}), "perm", {0, 2, 3, 1});
  b.node("Relu", {"t"}, {"y0"});
  b.node("Reshape", {"c", "shape"}, {"y1"});
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

// ---- support query -------------------------------------------------------------------

// With CpuRef allowed too, the plan runs on `used`, says `reason`, and every
// output is within `tolerance` (absolute) of a run on CpuRef alone.
void expect_falls_back(const ModelBuilder& b, const std::vector<std::string>& used_want,
                       const std::string& reason, double tolerance) {
  ASSERT_TRUE(runtime());
  test::TempDir dir;
  const std::string path = b.save(dir);
  std::vector<std::string> used;
  std::string plan;
  std::vector<Tensor> got = run(path, {"CpuOneDnn", "CpuRef"}, b.inputs(), &used, &plan);
  EXPECT_EQ(used, used_want) << plan;
  EXPECT_NE(plan.find(reason), std::string::npos) << plan;
  std::vector<Tensor> want = run(path, {"CpuRef"}, b.inputs(), nullptr);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape());
    EXPECT_GT(e2e::max_abs(want[k]), 0.0);
    EXPECT_LE(e2e::max_abs_diff(got[k], want[k]), tolerance) << "output " << k;
  }
}

TEST(OneDnnOps, UnsupportedNodesFallBackWithAReason) {
  // CpuOneDnn has no Cos; it goes to CpuRef and the plan says why.
  ModelBuilder b;
  b.input("x", {2, 8});
  b.node("Relu", {"x"}, {"r"});
  b.node("Cos", {"r"}, {"e"});
  b.node("Sigmoid", {"e"}, {"y"});
  b.output("y");
  expect_falls_back(b, {"CpuOneDnn", "CpuRef"}, "operator 'Cos' is not implemented", 1e-5);
}

// oneDNN 2.6 has erf only inside GELU. A lone Erf (a QDQ model quantizes
// GELU between its operators) is the backend's loop, over a plain tensor and
// over a convolution's blocked one.
TEST(OneDnnOps, ALoneErfRunsOnTheBackend) {
  ModelBuilder b;
  b.input("x", {1, 16, 6, 6}).random_weight("w", {16, 16, 3, 3}).init_f32("k", {}, {4.f});
  b.node("Mul", {"x", "k"}, {"wide"});  // erf's range, to where it is 1
  b.node("Erf", {"wide"}, {"plain"});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Erf", {"c"}, {"blocked"});
  b.output("plain").output("blocked");
  expect_matches_cpuref(b, 1e-5, {{"layout", "blocked"}});
}

// ---- recurrent (LSTM, GRU, RNN) ------------------------------------------------------

// One ONNX LSTM / RNN / GRU over X [T, N, C] (time-major; batch-major with
// `batch_major`), hidden H, random W, R, B; initial states as inputs with
// `states`, LSTM peepholes with `peepholes`; every output. `tweak` edits the node.
struct RecurrentSpec {
  std::string op = "LSTM";
  int64_t t = 5, n = 3, c = 4, h = 6;
  std::string direction = "forward";
  bool states = false, peepholes = false, batch_major = false;
  std::function<void(ModelBuilder&, onnx::NodeProto&)> tweak;
};

ModelBuilder recurrent_model(const RecurrentSpec& s) {
  const int64_t d = s.direction == "bidirectional" ? 2 : 1;
  const int64_t g = s.op == "LSTM" ? 4 : s.op == "GRU" ? 3 : 1;
  const bool lstm = s.op == "LSTM";
  ModelBuilder b(14);
  b.input("x", s.batch_major ? std::vector<test::Dim>{s.n, s.t, s.c}
                             : std::vector<test::Dim>{s.t, s.n, s.c});
  b.random_weight("w", {d, g * s.h, s.c}, -0.5f, 0.5f);
  b.random_weight("r", {d, g * s.h, s.h}, -0.5f, 0.5f);
  b.random_weight("b", {d, 2 * g * s.h}, -0.5f, 0.5f);
  const std::vector<test::Dim> state =
      s.batch_major ? std::vector<test::Dim>{s.n, d, s.h} : std::vector<test::Dim>{d, s.n, s.h};
  std::vector<std::string> ins = {"x", "w", "r", "b", "", s.states ? "h0" : ""};
  if (s.states) b.input("h0", state);
  if (lstm) {
    ins.push_back(s.states ? "c0" : "");
    if (s.states) b.input("c0", state);
    if (s.peepholes) {
      b.random_weight("p", {d, 3 * s.h}, -0.5f, 0.5f);
      ins.push_back("p");
    }
  }
  std::vector<std::string> outs = {"y", "yh"};
  if (lstm) outs.push_back("yc");
  onnx::NodeProto& node = b.node(s.op, ins, outs, "rec");
  set_string(node, "direction", s.direction);
  set_int(node, "hidden_size", s.h);
  if (s.tweak) s.tweak(b, node);
  b.output("y", s.batch_major ? std::vector<test::Dim>{s.n, s.t, d, s.h}
                              : std::vector<test::Dim>{s.t, d, s.n, s.h});
  b.output("yh", state);
  if (lstm) b.output("yc", state);
  return b;
}

void set_strings(onnx::NodeProto& n, const std::string& name, const std::vector<std::string>& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRINGS);
  for (const std::string& x : v) a->add_strings(x);
}

// sequence_lens as an int32 initializer, input 4 of `node`.
void set_sequence_lens(ModelBuilder& b, onnx::NodeProto& node, const std::vector<int32_t>& lens) {
  onnx::TensorProto* t = b.graph().add_initializer();
  t->set_name("lens");
  t->set_data_type(onnx::TensorProto::INT32);
  t->add_dims(static_cast<int64_t>(lens.size()));
  for (int32_t v : lens) t->add_int32_data(v);
  node.set_input(4, "lens");
}

// Each within 1e-5 of CpuRef: op, direction, initial states, peepholes,
// batch, sequence length, activations named (none: the defaults),
// sequence_lens given (all of the full length), a GRU's linear_before_reset
// (-1: absent).
struct RecurrentRow {
  const char* name;
  const char* op;
  const char* direction;
  bool states, peepholes;
  int64_t n, t;
  std::vector<std::string> activations;
  bool full_lens;
  int64_t linear_before_reset = -1;
};

class OneDnnRecurrent : public testing::TestWithParam<RecurrentRow> {};

TEST_P(OneDnnRecurrent, MatchesCpuRef) {
  const RecurrentRow& row = GetParam();
  RecurrentSpec s;
  s.op = row.op;
  s.direction = row.direction;
  s.states = row.states;
  s.peepholes = row.peepholes;
  s.n = row.n;
  s.t = row.t;
  s.tweak = [row](ModelBuilder& b, onnx::NodeProto& n) {
    if (row.full_lens) set_sequence_lens(b, n, std::vector<int32_t>(size_t(row.n), int32_t(row.t)));
    if (!row.activations.empty()) set_strings(n, "activations", row.activations);
    if (row.linear_before_reset >= 0) set_int(n, "linear_before_reset", row.linear_before_reset);
  };
  expect_matches_cpuref(recurrent_model(s), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    OneDnnOps, OneDnnRecurrent,
    testing::Values(
        RecurrentRow{"LstmForward", "LSTM", "forward", false, false, 3, 5, {}, false},
        RecurrentRow{"LstmReverseWithStates", "LSTM", "reverse", true, false, 3, 5, {}, false},
        RecurrentRow{"LstmBidirectional", "LSTM", "bidirectional", false, false, 3, 5, {}, false},
        RecurrentRow{"LstmBidirectionalWithStatesAndPeepholes",
                     "LSTM",
                     "bidirectional",
                     true,
                     true,
                     4,
                     5,
                     {},
                     false},
        RecurrentRow{
            "LstmForwardPeepholesBatchOne", "LSTM", "forward", false, true, 1, 7, {}, false},
        RecurrentRow{"LstmFullSequenceLensAndDefaultActivationsNamed",
                     "LSTM",
                     "forward",
                     true,
                     false,
                     3,
                     5,
                     {"Sigmoid", "Tanh", "Tanh"},
                     true},
        RecurrentRow{"RnnTanhBidirectional", "RNN", "bidirectional", true, false, 3, 5, {}, false},
        RecurrentRow{"RnnReluForward", "RNN", "forward", false, false, 2, 5, {"Relu"}, false},
        RecurrentRow{"RnnSigmoidReverse", "RNN", "reverse", true, false, 3, 5, {"Sigmoid"}, false},
        RecurrentRow{"GruForward", "GRU", "forward", false, false, 3, 5, {}, false},
        RecurrentRow{"GruLinearBeforeResetBidirectionalWithStates", "GRU", "bidirectional", true,
                     false, 3, 5, {}, false, 1},
        RecurrentRow{"GruReverseWithStatesAndActivationsNamed", "GRU", "reverse", true, false, 2,
                     6, {"Sigmoid", "Tanh"}, true, 0},
        RecurrentRow{"GruLinearBeforeResetForwardBatchOne", "GRU", "forward", false, false, 1, 7,
                     {}, false, 1},
        RecurrentRow{"GruBidirectional", "GRU", "bidirectional", false, false, 3, 5, {}, false}),
    [](const testing::TestParamInfo<RecurrentRow>& info) { return std::string(info.param.name); });

// At batch 1 on two threads, a bidirectional layer runs as its two
// directions side by side, one thread each (lowering_rnn.cpp): a step per
// direction in the plan, every output (Y, Y_h, Y_c) as CpuRef's. Initial
// states the caller gives, or a batch of 3, keep it one step.
TEST(OneDnnOps, BidirectionalLayersRunTheirDirectionsBesideEachOther) {
  struct Row {
    const char* name;
    const char* op;
    int64_t n;
    bool constant_states, input_states, peepholes;
    int64_t linear_before_reset;
    int steps;  // recurrent steps in the plan
  };
  for (const Row& row :
       std::vector<Row>{{"lstm", "LSTM", 1, false, false, false, -1, 2},
                        {"lstm states peepholes", "LSTM", 1, true, false, true, -1, 2},
                        {"gru lbr states", "GRU", 1, true, false, false, 1, 2},
                        {"gru", "GRU", 1, false, false, false, 0, 2},
                        {"rnn states", "RNN", 1, true, false, false, -1, 2},
                        {"lstm caller's states", "LSTM", 1, false, true, false, -1, 1},
                        {"lstm batch 3", "LSTM", 3, false, false, false, -1, 1}}) {
    SCOPED_TRACE(row.name);
    RecurrentSpec s;
    s.op = row.op;
    s.direction = "bidirectional";
    s.n = row.n;
    s.t = 6;
    s.states = row.input_states;
    s.peepholes = row.peepholes;
    s.tweak = [row](ModelBuilder& b, onnx::NodeProto& node) {
      if (row.linear_before_reset >= 0)
        set_int(node, "linear_before_reset", row.linear_before_reset);
      if (!row.constant_states) return;
      b.random_weight("h0c", {2, row.n, 6}, -0.5f, 0.5f);
      node.set_input(5, "h0c");
      if (std::string(row.op) == "LSTM") {
        b.random_weight("c0c", {2, row.n, 6}, -0.5f, 0.5f);
        node.set_input(6, "c0c");
      }
    };
    const ModelBuilder b = recurrent_model(s);
    int steps = 0;
    for (const std::string& line : plan_report(b, {}, 2))
      if (line.find("\trnn\t") != std::string::npos) ++steps;
    EXPECT_EQ(steps, row.steps);

    test::TempDir dir;
    const std::string path = b.save(dir);
    ModelOptions mo;
    mo.backends = {"CpuOneDnn"};
    auto model = e2e::onednn_runtime(2)->load_model(path, mo);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    std::map<std::string, Tensor> feeds;
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0.f, 1.f);
    for (const auto& [name, shape] : b.inputs()) {
      Tensor t(DType::kFloat32, shape);
      for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = dist(rng);
      feeds[name] = t;
    }
    const std::vector<Tensor> got = e2e::run_once(**model, feeds);
    auto ref = runtime()->load_model(path, e2e::cpuref_only());
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    const std::vector<Tensor> want = e2e::run_once(**ref, feeds);
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].shape(), want[k].shape()) << "output " << k;
      EXPECT_LE(e2e::max_abs_diff(got[k], want[k]), 1e-5 * e2e::max_abs(want[k])) << "output " << k;
    }
  }
}

// With CpuRef allowed too, the node goes there with `reason` in the plan, and
// the model runs as on CpuRef alone.
void expect_left_to_cpuref(const ModelBuilder& b, const std::string& reason) {
  expect_falls_back(b, {"CpuRef"}, reason, 0.0);
}

TEST(OneDnnOps, LstmWithClipIsLeftToCpuRef) {
  RecurrentSpec s;
  s.tweak = [](ModelBuilder&, onnx::NodeProto& n) { set_float(n, "clip", 0.5f); };
  expect_left_to_cpuref(recurrent_model(s), "LSTM: clip is not supported");
}
TEST(OneDnnOps, LstmBatchMajorIsLeftToCpuRef) {
  RecurrentSpec s;
  s.batch_major = true;
  s.states = true;
  s.tweak = [](ModelBuilder&, onnx::NodeProto& n) { set_int(n, "layout", 1); };
  expect_left_to_cpuref(recurrent_model(s), "LSTM: layout=1 (batch-major) is not supported");
}
TEST(OneDnnOps, LstmOtherActivationsAreLeftToCpuRef) {
  RecurrentSpec s;
  s.tweak = [](ModelBuilder&, onnx::NodeProto& n) {
    set_strings(n, "activations", {"HardSigmoid", "Tanh", "Tanh"});
  };
  expect_left_to_cpuref(recurrent_model(s),
                        "LSTM: activations other than the default (Sigmoid, Tanh, Tanh)");
}
TEST(OneDnnOps, RnnOtherActivationIsLeftToCpuRef) {
  RecurrentSpec s;
  s.op = "RNN";
  s.tweak = [](ModelBuilder&, onnx::NodeProto& n) { set_strings(n, "activations", {"Softsign"}); };
  expect_left_to_cpuref(recurrent_model(s), "RNN: activation 'softsign' is not supported");
}
TEST(OneDnnOps, LstmShortSequenceLensAreLeftToCpuRef) {
  RecurrentSpec s;
  s.tweak = [](ModelBuilder& b, onnx::NodeProto& n) { set_sequence_lens(b, n, {5, 3, 5}); };
  expect_left_to_cpuref(recurrent_model(s),
                        "LSTM: sequence_lens shorter than the sequence are not supported");
}
TEST(OneDnnOps, GruOtherActivationsAreLeftToCpuRef) {
  RecurrentSpec s;
  s.op = "GRU";
  s.direction = "bidirectional";
  s.tweak = [](ModelBuilder&, onnx::NodeProto& n) {
    set_strings(n, "activations", {"Sigmoid", "Tanh", "Sigmoid", "Relu"});
  };
  expect_left_to_cpuref(recurrent_model(s),
                        "GRU: activations other than the default (Sigmoid, Tanh)");
}

// ---- activations as eltwise chains and post-ops (no fragmentation) -------------------

TEST(OneDnnOps, ActivationsStandalone) {
  ModelBuilder b(18);  // Mish is from opset 18
  b.input("x", {2, 3, 5, 7});
  b.node("HardSwish", {"x"}, {"y0"});
  auto& hs = b.node("HardSigmoid", {"x"}, {"y1"});
  set_float(hs, "alpha", 0.3f);
  set_float(hs, "beta", 0.4f);
  b.node("Mish", {"x"}, {"y2"});
  b.node("Selu", {"x"}, {"y3"});
  b.node("Softplus", {"x"}, {"y4"});
  b.node("Abs", {"x"}, {"y5"});
  b.node("Round", {"x"}, {"y6"});
  for (const char* y : {"y0", "y1", "y2", "y3", "y4", "y5", "y6"}) b.output(y);
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ActivationsAsPostOpsOfConvGemmMatMul) {
  ModelBuilder b(18);  // Mish is from opset 18
  b.input("x", {1, 8, 9, 9}).input("m", {3, 12});
  b.random_weight("w", {16, 8, 3, 3}).random_weight("g", {12, 6}).random_weight("mw", {12, 5});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("HardSwish", {"c"}, {"y0"});
  b.node("Conv", {"x", "w"}, {"c1"});
  b.node("HardSigmoid", {"c1"}, {"y1"});
  b.node("Conv", {"x", "w"}, {"c2"});
  b.node("Mish", {"c2"}, {"y2"});
  b.node("Gemm", {"m", "g"}, {"gm"});
  b.node("Selu", {"gm"}, {"y3"});
  b.node("MatMul", {"m", "mw"}, {"mm"});
  b.node("Softplus", {"mm"}, {"y4"});
  for (const char* y : {"y0", "y1", "y2", "y3", "y4"}) b.output(y);
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, PReluWithPerChannelSlope) {
  ModelBuilder b;
  b.input("x", {1, 16, 6, 6}).random_weight("w", {16, 16, 1, 1}).random_weight("s", {16, 1, 1});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("PRelu", {"c", "s"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
}

// ---- data movement inside CpuOneDnn -----------------------------------------------------

TEST(OneDnnOps, SliceOfBlockedConvOutput) {
  // Channel windows on and off the 8/16-channel blocks, a spatial window with
  // a negative start, and a ViT-style first-token slice of a sequence.
  ModelBuilder b;
  b.input("x", {1, 8, 10, 10}).input("t", {1, 5, 12}).random_weight("w", {48, 8, 1, 1});
  b.node("Conv", {"x", "w"}, {"c"});
  auto slice = [&](const std::string& in, const std::string& out, const std::vector<int64_t>& st,
                   const std::vector<int64_t>& en, const std::vector<int64_t>& ax) {
    const Dims d = {static_cast<int64_t>(st.size())};
    b.init_i64(out + "_s", d, st).init_i64(out + "_e", d, en).init_i64(out + "_a", d, ax);
    b.node("Slice", {in, out + "_s", out + "_e", out + "_a"}, {out});
    b.output(out);
  };
  slice("c", "aligned", {16}, {32}, {1});
  slice("c", "unaligned", {5}, {29}, {1});
  slice("c", "spatial", {-7, 2}, {100, 9}, {2, 3});
  slice("t", "token", {0}, {1}, {1});
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, SliceWithStepsAndDropoutOfRatioZero) {
  // Swin: patch merging takes every second row and column (steps 2), and its
  // attention keeps Dropout(ratio 0, training_mode true), an identity.
  ModelBuilder b;
  b.input("x", {1, 7, 8, 6});
  b.init_i64("s", {2}, {1, 0}).init_i64("e", {2}, {7, 8}).init_i64("a", {2}, {1, 2});
  b.init_i64("st", {2}, {2, 3}).init_f32("ratio", {}, {0.f});
  onnx::TensorProto* train = b.model.mutable_graph()->add_initializer();
  train->set_name("train");
  train->set_data_type(onnx::TensorProto::BOOL);
  train->add_int32_data(1);
  b.node("Slice", {"x", "s", "e", "a", "st"}, {"y0"});
  b.node("Dropout", {"x", "ratio", "train"}, {"y1"});
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, ResizeLinearAndNearest) {
  // Segmentation heads: bilinear (half_pixel) upsampling to given sizes, from
  // a blocked conv output and from a 1x1 pooled map; nearest x2 by scales.
  ModelBuilder b;
  b.input("x", {1, 8, 5, 7}).random_weight("w", {16, 8, 1, 1});
  b.init_i64("big", {4}, {1, 16, 13, 17}).init_f32("two", {4}, {1.f, 1.f, 2.f, 2.f});
  b.node("Conv", {"x", "w"}, {"c"});
  auto& lin = b.node("Resize", {"c", "", "", "big"}, {"y0"});
  set_string(lin, "mode", "linear");
  set_string(lin, "coordinate_transformation_mode", "half_pixel");
  b.node("GlobalAveragePool", {"c"}, {"p"});
  auto& one = b.node("Resize", {"p", "", "", "big"}, {"y1"});
  set_string(one, "mode", "linear");
  auto& near = b.node("Resize", {"c", "", "two"}, {"y2"});
  set_string(near, "mode", "nearest");
  set_string(near, "coordinate_transformation_mode", "asymmetric");
  set_string(near, "nearest_mode", "floor");
  b.output("y0").output("y1").output("y2");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, SplitUnequalThenConv) {
  ModelBuilder b;
  b.input("x", {1, 8, 6, 6}).random_weight("w", {24, 8, 1, 1}).random_weight("w2", {4, 16, 3, 3});
  b.init_i64("parts", {2}, {16, 8});
  b.node("Conv", {"x", "w"}, {"c"});
  set_int(b.node("Split", {"c", "parts"}, {"a", "bb"}), "axis", 1);
  b.node("Conv", {"a", "w2"}, {"y"});
  b.node("Relu", {"bb"}, {"z"});
  b.output("y").output("z");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, PadConstantThenPoolAndCrop) {
  // DenseNet's Pad before a pooling, a crop (negative pads), and channel
  // pads with a non-zero value.
  ModelBuilder b(13);
  b.input("x", {1, 16, 7, 7}).random_weight("w", {16, 16, 3, 3});
  b.init_i64("p0", {8}, {0, 0, 0, 0, 0, 0, 1, 1});
  b.init_i64("p1", {8}, {0, 3, -1, 2, 0, 1, 1, -2}).init_f32("v", {}, {1.5f});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Pad", {"c", "p0"}, {"pc"});
  auto& pool = b.node("AveragePool", {"pc"}, {"y0"});
  set_ints(pool, "kernel_shape", {2, 2});
  set_ints(pool, "strides", {2, 2});
  b.node("Pad", {"c", "p1", "v"}, {"y1"});
  b.output("y0").output("y1");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, PadFoldedIntoPoolAndConv) {
  // Inception's pooling branch (Pad of zeros, then a 3x3 AveragePool that
  // counts no padding of its own), a Pad of zeros into a Conv with pads of
  // its own, and the cases that must not fold: a pad value other than 0, a
  // ceil-mode pool, a Pad also read by another node.
  ModelBuilder b(17);
  b.input("x", {1, 8, 9, 9}).random_weight("w", {12, 8, 3, 3}).random_weight("w2", {4, 8, 3, 3});
  b.init_i64("p", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
  b.init_i64("q", {8}, {0, 0, 0, 1, 0, 0, 1, 0}).init_f32("v", {}, {0.75f});
  b.node("Pad", {"x", "p"}, {"px"});
  auto& pool = b.node("AveragePool", {"px"}, {"y0"});
  set_ints(pool, "kernel_shape", {3, 3});
  b.node("Pad", {"x", "q"}, {"qx"});
  set_ints(b.node("Conv", {"qx", "w"}, {"y1"}), "pads", {1, 0, 0, 1});
  b.node("Pad", {"x", "p", "v"}, {"vx"});
  b.node("Conv", {"vx", "w2"}, {"y2"});
  b.node("Pad", {"x", "q"}, {"cx"});
  auto& ceil = b.node("AveragePool", {"cx"}, {"y3"});
  set_ints(ceil, "kernel_shape", {2, 2});
  set_ints(ceil, "strides", {2, 2});
  set_int(ceil, "ceil_mode", 1);
  b.node("Pad", {"x", "p"}, {"shared"});
  set_ints(b.node("MaxPool", {"shared"}, {"y4"}), "kernel_shape", {3, 3});
  b.node("Relu", {"shared"}, {"y5"});
  b.output("y0").output("y1").output("y2").output("y3").output("y4").output("y5");
  expect_matches_cpuref(b);
}

TEST(OneDnnOps, GatherConstantIndices) {
  ModelBuilder b;
  b.input("x", {2, 5, 12}).input("img", {1, 8, 4, 4}).random_weight("w", {32, 8, 1, 1});
  b.init_i64("first", {}, {0}).init_i64("perm", {4}, {3, -1, 0, 1}).init_i64("run", {2}, {17, 18});
  set_int(b.node("Gather", {"x", "first"}, {"y0"}), "axis", 1);
  set_int(b.node("Gather", {"x", "perm"}, {"y1"}), "axis", 1);
  b.node("Conv", {"img", "w"}, {"c"});
  set_int(b.node("Gather", {"c", "run"}, {"y2"}), "axis", 1);
  b.output("y0").output("y1").output("y2");
  expect_matches_cpuref(b);
}

// Gather by indices of the run (an embedding lookup, and a gather of a
// run-time tensor along a middle axis): CpuOneDnn's gather step, int64 and
// int32 indices, negative ones counted from the end; the same values as
// CpuRef, every node in CpuOneDnn.
std::vector<Tensor> run_with_ids(const std::string& path, const std::string& backend,
                                 const Tensor& ids, std::vector<std::string>* used,
                                 Status* status = nullptr) {
  ModelOptions mo;
  mo.backends = {backend};
  auto model = runtime()->load_model(path, mo);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  if (used) *used = (*model)->backends_used();
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok());
  Tensor x(DType::kFloat32, {3, 10, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = std::cos(0.3f * i);
  EXPECT_TRUE((*session)->set_input("x", x).ok());
  EXPECT_TRUE((*session)->set_input("ids", ids).ok());
  Status st = (*session)->run();
  if (status) *status = st;
  else EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<Tensor> out;
  if (st.ok())
    for (size_t i = 0; i < (*session)->num_outputs(); ++i)
      out.push_back((*session)->output(i).clone());
  return out;
}

ModelBuilder gather_runtime_model(int elem) {
  ModelBuilder b;
  b.input("x", {3, 10, 4}).input("ids", {2, 3}, elem).random_weight("table", {10, 6});
  b.node("Gather", {"table", "ids"}, {"emb"});  // [2, 3, 6]
  b.node("Relu", {"emb"}, {"y0"});
  set_int(b.node("Gather", {"x", "ids"}, {"picked"}), "axis", 1);  // [3, 2, 3, 4]
  b.node("Sigmoid", {"picked"}, {"y1"});
  b.output("y0").output("y1");
  return b;
}

TEST(OneDnnOps, GatherRuntimeIndices) {
  for (int elem : {onnx::TensorProto::INT64, onnx::TensorProto::INT32}) {
    test::TempDir dir;
    const std::string path = gather_runtime_model(elem).save(dir);
    const std::vector<int64_t> values = {0, 9, -1, 4, -10, 4};
    Tensor ids(elem == onnx::TensorProto::INT64 ? DType::kInt64 : DType::kInt32, {2, 3});
    for (size_t i = 0; i < values.size(); ++i) {
      if (elem == onnx::TensorProto::INT64) ids.data_as<int64_t>()[i] = values[i];
      else ids.data_as<int32_t>()[i] = static_cast<int32_t>(values[i]);
    }
    std::vector<std::string> used;
    std::vector<Tensor> got = run_with_ids(path, "CpuOneDnn", ids, &used);
    EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
    std::vector<Tensor> want = run_with_ids(path, "CpuRef", ids, nullptr);
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(want.size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(got[k].shape(), want[k].shape());
      EXPECT_TRUE(e2e::bitwise_equal(got[k], want[k]) ||
                  e2e::max_abs_diff(got[k], want[k]) <= 1e-6 * e2e::max_abs(want[k]))
          << "output " << k;
    }
  }
}

// An index outside the axis fails the run with the node and the index, and
// the session runs again with good ones.
TEST(OneDnnOps, GatherRuntimeIndexOutOfRangeIsAnError) {
  test::TempDir dir;
  const std::string path = gather_runtime_model(onnx::TensorProto::INT64).save(dir);
  ModelOptions mo;
  mo.backends = {"CpuOneDnn"};
  auto model = runtime()->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Tensor x(DType::kFloat32, {3, 10, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = 1.f;
  Tensor ids(DType::kInt64, {2, 3});
  for (int64_t i = 0; i < 6; ++i) ids.data_as<int64_t>()[i] = i == 4 ? 10 : i;
  ASSERT_TRUE((*session)->set_input("x", x).ok());
  ASSERT_TRUE((*session)->set_input("ids", ids).ok());
  Status st = (*session)->run();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("index 10"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("Gather"), std::string::npos) << st.message();
  ids.data_as<int64_t>()[4] = -10;
  ASSERT_TRUE((*session)->set_input("ids", ids).ok());
  Status again = (*session)->run();
  EXPECT_TRUE(again.ok()) << again.to_string();
}

TEST(OneDnnOps, MobileNetV3BlockIsOnePartition) {
  // conv -> HardSwish -> SE (pool, conv, relu, conv, HardSigmoid, Mul) ->
  // channel Slice -> Pad -> conv: with CpuRef also allowed, everything stays
  // in one CpuOneDnn partition.
  ModelBuilder b(14);  // HardSwish is from opset 14
  b.input("x", {1, 8, 8, 8}).random_weight("w", {32, 8, 3, 3});
  b.random_weight("se1", {8, 32, 1, 1}).random_weight("se2", {32, 8, 1, 1});
  b.random_weight("w2", {8, 16, 3, 3});
  b.init_i64("s", {1}, {16}).init_i64("e", {1}, {32}).init_i64("a", {1}, {1});
  b.init_i64("p", {8}, {0, 0, 1, 1, 0, 0, 1, 1});
  set_ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("HardSwish", {"c"}, {"h"});
  b.node("GlobalAveragePool", {"h"}, {"gp"});
  b.node("Conv", {"gp", "se1"}, {"s1"});
  b.node("Relu", {"s1"}, {"r1"});
  b.node("Conv", {"r1", "se2"}, {"s2"});
  b.node("HardSigmoid", {"s2"}, {"hs"});
  b.node("Mul", {"h", "hs"}, {"m"});
  b.node("Slice", {"m", "s", "e", "a"}, {"sl"});
  b.node("Pad", {"sl", "p"}, {"pd"});
  b.node("Conv", {"pd", "w2"}, {"y"});
  b.output("y");
  expect_matches_cpuref(b);
  test::TempDir dir;
  ModelOptions mo;
  mo.backends = {"CpuOneDnn", "CpuRef"};
  auto model = runtime()->load_model(b.save(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_EQ((*model)->partitions().size(), 1u) << (*model)->describe_plan(PlanFormat::kText);
  EXPECT_EQ((*model)->partitions()[0].backend, "CpuOneDnn");
}

// ---- QuantizeLinear, DequantizeLinear ------------------------------------------

// Runs `b` on `feeds`, on CpuOneDnn alone (every node there) and on CpuRef,
// and requires the outputs to be the same bytes.
void expect_bit_exact(const ModelBuilder& b, const std::map<std::string, Tensor>& feeds) {
  ASSERT_TRUE(runtime());
  test::TempDir dir;
  const std::string path = b.save(dir);
  std::vector<std::vector<Tensor>> outs;
  for (const char* backend : {"CpuOneDnn", "CpuRef"}) {
    ModelOptions mo;
    mo.backends = {backend};
    auto model = runtime()->load_model(path, mo);
    ASSERT_TRUE(model.ok()) << backend << ": " << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{backend});
    outs.push_back(e2e::run_once(**model, feeds));
  }
  ASSERT_EQ(outs[0].size(), outs[1].size());
  ASSERT_FALSE(outs[0].empty());
  for (size_t k = 0; k < outs[0].size(); ++k) {
    const Tensor &got = outs[0][k], &want = outs[1][k];
    ASSERT_EQ(got.shape(), want.shape());
    ASSERT_EQ(got.dtype(), want.dtype());
    const auto* g = static_cast<const uint8_t*>(got.data());
    const auto* w = static_cast<const uint8_t*>(want.data());
    const size_t elem = got.size_bytes() / static_cast<size_t>(got.numel());
    size_t differ = 0;
    for (size_t i = 0; i < got.size_bytes(); i += elem)
      if (std::memcmp(g + i, w + i, elem) != 0 && ++differ <= 3)
        ADD_FAILURE() << "output " << k << " element " << i / elem << " differs from CpuRef's";
    EXPECT_EQ(differ, 0u) << "output " << k;
  }
}

// The k in [-150, 150] for which x = (k + 0.5) * s is a tie (x / s is
// k + 0.5) that x * (1 / s) misses: a quantizer that multiplies by the
// reciprocal instead of dividing rounds those the other way.
std::vector<float> misleading_ties(float s) {
  std::vector<float> ks;
  for (int k = -150; k <= 150; ++k) {
    const float h = static_cast<float>(k) + 0.5f, x = h * s;
    if (x / s == h && x * (1.f / s) != h) ks.push_back(static_cast<float>(k));
  }
  return ks;
}

// n scales that each have misleading ties.
std::vector<float> scales_with_misleading_ties(size_t n) {
  std::vector<float> out;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(0.001f, 0.05f);
  while (out.size() < n) {
    const float s = u(rng);
    if (!misleading_ties(s).empty()) out.push_back(s);
  }
  return out;
}

// x of `shape` for scale scales[c] along `axis` (c = 0 everywhere for one
// scale): ties x / scale = k + 0.5 (misleading ones and others), their
// float neighbours, values from zero to well past saturation, and
// infinities. Counts the ties the reciprocal gets wrong into *misleading.
Tensor quantize_input(const Dims& shape, int64_t axis, const std::vector<float>& scales,
                      int* misleading) {
  Tensor t(DType::kFloat32, shape);
  float* x = t.data_as<float>();
  int64_t inner = 1;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(axis, 0)) + 1; i < shape.size(); ++i)
    inner *= shape[i];
  const int64_t len = axis < 0 ? 1 : shape[static_cast<size_t>(axis)];
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 150.f);
  *misleading = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float s = scales[static_cast<size_t>(axis < 0 ? 0 : (i / inner) % len)];
    const std::vector<float> ks = misleading_ties(s);
    const float k = i % 6 == 0 ? ks[rng() % ks.size()]
                               : static_cast<float>(static_cast<int>(rng() % 400) - 200);
    const float tie = (k + 0.5f) * s;
    switch (i % 6) {
      case 0:
      case 1:
        x[i] = tie;
        if (tie / s == k + 0.5f && tie * (1.f / s) != k + 0.5f) ++*misleading;
        break;
      case 2:
        x[i] = std::nextafter(tie, i % 12 < 6 ? 1e30f : -1e30f);
        break;
      case 3:
        x[i] = normal(rng) * s;  // some saturate
        break;
      case 4:
        x[i] = normal(rng) * s * 10.f;  // most saturate
        break;
      default:
        x[i] = i % 30 == 5 ? INFINITY : i % 30 == 11 ? -INFINITY : i % 30 == 17 ? 1e30f : 0.f;
    }
  }
  return t;
}

struct QuantizeCase {
  const char* name;
  Dims shape;
  int64_t axis;  // -1: one scale
  int elem;      // UINT8 or INT8
  int32_t zero_point;
};

class OneDnnQuantize : public testing::TestWithParam<QuantizeCase> {};

// QuantizeLinear on CpuOneDnn gives CpuRef's bytes, ties and saturation
// included; then DequantizeLinear of its own output (same scales and zero
// point) gives CpuRef's floats.
TEST_P(OneDnnQuantize, BitExactWithCpuRef) {
  const QuantizeCase& c = GetParam();
  const int64_t len = c.axis < 0 ? 1 : c.shape[static_cast<size_t>(c.axis)];
  const std::vector<float> scales = scales_with_misleading_ties(static_cast<size_t>(len));
  int misleading = 0;
  const Tensor x = quantize_input(c.shape, c.axis, scales, &misleading);
  // The data must be able to tell division from multiplication by 1 / scale.
  EXPECT_GE(misleading, 3);
  const Dims sdims = c.axis < 0 ? Dims{} : Dims{len};
  for (bool dequantize : {false, true}) {
    SCOPED_TRACE(dequantize ? "QuantizeLinear then DequantizeLinear" : "QuantizeLinear");
    ModelBuilder b(13);
    b.input("x", test::shape_of(c.shape));
    b.init_f32("s", sdims, scales);
    b.init_ints("z", c.elem, sdims, std::vector<int32_t>(static_cast<size_t>(len), c.zero_point));
    auto& q = b.node("QuantizeLinear", {"x", "s", "z"}, {dequantize ? "q" : "y"});
    if (c.axis >= 0) set_int(q, "axis", c.axis);
    if (dequantize) {
      auto& dq = b.node("DequantizeLinear", {"q", "s", "z"}, {"y"});
      if (c.axis >= 0) set_int(dq, "axis", c.axis);
    }
    b.output("y", test::shape_of(c.shape), dequantize ? onnx::TensorProto::FLOAT : c.elem);
    expect_bit_exact(b, {{"x", x}});
  }
}

INSTANTIATE_TEST_SUITE_P(
    OneDnnOps, OneDnnQuantize,
    testing::Values(
        QuantizeCase{"PerTensorUint8", {2, 8, 5, 7}, -1, onnx::TensorProto::UINT8, 131},
        QuantizeCase{"PerTensorInt8", {3, 4, 50}, -1, onnx::TensorProto::INT8, -5},
        QuantizeCase{"PerTensorUint8NoOffset", {640}, -1, onnx::TensorProto::UINT8, 0},
        QuantizeCase{"PerChannelUint8", {2, 16, 4, 4}, 1, onnx::TensorProto::UINT8, 100},
        QuantizeCase{"PerChannelInt8", {1, 24, 3, 5}, 1, onnx::TensorProto::INT8, 3},
        QuantizeCase{"PerAxis0Int8", {12, 6, 3, 3}, 0, onnx::TensorProto::INT8, 0},
        QuantizeCase{"PerLastAxisUint8", {4, 5, 9}, 2, onnx::TensorProto::UINT8, 17}),
    [](const testing::TestParamInfo<QuantizeCase>& info) { return std::string(info.param.name); });

// DequantizeLinear of every uint8 / int8 value, one scale or one per
// channel, and of int32 (a bias's type) up to where float32 rounds it.
TEST(OneDnnOps, DequantizeLinearBitExactWithCpuRef) {
  const std::vector<float> scales = {0.0371f, 1.5f, 3.1e-5f, 0.1f, 7.7f, 0.0123f, 0.999f, 2e-3f};
  for (int elem : {onnx::TensorProto::UINT8, onnx::TensorProto::INT8, onnx::TensorProto::INT32}) {
    for (int64_t axis : {-1, 1, 2}) {
      SCOPED_TRACE("elem " + std::to_string(elem) + " axis " + std::to_string(axis));
      const Dims shape = {2, 8, 8, 4};
      const int64_t len = axis < 0 ? 1 : shape[static_cast<size_t>(axis)];
      const Dims sdims = axis < 0 ? Dims{} : Dims{len};
      const int32_t zp = elem == onnx::TensorProto::UINT8 ? 77
                         : elem == onnx::TensorProto::INT8 ? -9
                                                           : 0;
      ModelBuilder b(13);
      const DType dt = elem == onnx::TensorProto::UINT8  ? DType::kUInt8
                       : elem == onnx::TensorProto::INT8 ? DType::kInt8
                                                         : DType::kInt32;
      b.input("x", test::shape_of(shape), elem);
      b.init_f32("s", sdims, std::vector<float>(scales.begin(), scales.begin() + len));
      b.init_ints("z", elem, sdims, std::vector<int32_t>(static_cast<size_t>(len), zp));
      auto& dq = b.node("DequantizeLinear", {"x", "s", "z"}, {"y"});
      if (axis >= 0) set_int(dq, "axis", axis);
      b.output("y", test::shape_of(shape));
      Tensor x(dt, shape);
      std::mt19937 rng(3);
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (dt == DType::kInt32)
          x.data_as<int32_t>()[i] = i % 3 == 0 ? static_cast<int32_t>(rng()) : 16777217 + i;
        else static_cast<uint8_t*>(x.data())[i] = static_cast<uint8_t>(i);
      }
      expect_bit_exact(b, {{"x", x}});
    }
  }
}

// Per-axis zero points that differ (oneDNN's reorder takes one) and scales
// computed at run time stay with CpuRef, which says why.
TEST(OneDnnOps, QuantizeLinearOutsideWhatItTakesIsLeftToCpuRef) {
  ModelBuilder b(13);
  b.input("x", {1, 4, 3, 3}).init_f32("s", {4}, {0.1f, 0.2f, 0.3f, 0.4f});
  b.init_ints("z", onnx::TensorProto::UINT8, {4}, {1, 2, 3, 4});
  set_int(b.node("QuantizeLinear", {"x", "s", "z"}, {"q"}), "axis", 1);
  set_int(b.node("DequantizeLinear", {"q", "s", "z"}, {"y"}), "axis", 1);
  b.output("y");
  expect_left_to_cpuref(b, "per-axis zero points that differ are not supported");
  ModelBuilder r(13);
  r.input("x", {2, 8}).input("s", {1});
  r.node("QuantizeLinear", {"x", "s"}, {"q"});
  r.node("Relu", {"x"}, {"y"});
  r.output("q", {2, 8}, onnx::TensorProto::UINT8).output("y");
  ModelOptions mo;
  mo.backends = {"CpuOneDnn", "CpuRef"};
  test::TempDir dir;
  auto model = runtime()->load_model(r.save(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::string plan = (*model)->describe_plan(PlanFormat::kText);
  EXPECT_NE(plan.find("the scale must be a float32 constant"), std::string::npos) << plan;
}

// A QDQ convolution as scripts/quantize_qdq.py writes it (uint8 activations,
// per-channel int8 weights, int32 bias, each behind a DequantizeLinear) runs
// as one CpuOneDnn partition, within one output quantization step of CpuRef
// (the convolution itself is float, summed in another order).
TEST(OneDnnOps, QdqConvolutionIsOneCpuOneDnnPartition) {
  ModelBuilder b(13);
  b.input("x", {1, 8, 10, 10});
  b.init_f32("xs", {}, {0.02f});
  b.init_ints("xz", onnx::TensorProto::UINT8, {}, {128});
  std::vector<int32_t> w(16 * 8 * 9), bias(16);
  std::mt19937 rng(5);
  fill_uniform(w, rng, -127, 127);
  fill_uniform(bias, rng, -1000, 1000);
  std::vector<float> ws(16), bs(16);
  for (size_t i = 0; i < 16; ++i) {
    ws[i] = 0.002f + 0.0005f * static_cast<float>(i);
    bs[i] = 0.02f * ws[i];
  }
  b.init_ints("w", onnx::TensorProto::INT8, {16, 8, 3, 3}, w);
  b.init_f32("ws", {16}, ws);
  b.init_ints("wz", onnx::TensorProto::INT8, {16}, std::vector<int32_t>(16, 0));
  b.init_ints("b", onnx::TensorProto::INT32, {16}, bias);
  b.init_f32("bs", {16}, bs);
  b.init_f32("ys", {}, {0.05f});
  b.init_ints("yz", onnx::TensorProto::UINT8, {}, {10});
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  set_int(b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"}), "axis", 0);
  set_int(b.node("DequantizeLinear", {"b", "bs"}, {"bd"}), "axis", 0);
  set_ints(b.node("Conv", {"xd", "wd", "bd"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"});
  b.node("QuantizeLinear", {"r", "ys", "yz"}, {"yq"});
  b.node("DequantizeLinear", {"yq", "ys", "yz"}, {"y"});
  b.output("y");
  test::TempDir dir;
  const std::string path = b.save(dir);
  std::vector<std::string> used;
  std::vector<Tensor> got = run(path, {"CpuOneDnn"}, b.inputs(), &used);
  EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
  std::vector<Tensor> want = run(path, {"CpuRef"}, b.inputs(), nullptr);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_GT(e2e::max_abs(want[0]), 1.0);
  EXPECT_LE(e2e::max_abs_diff(got[0], want[0]), 0.05 * 1.001);
  ModelOptions mo;
  mo.backends = {"CpuOneDnn", "CpuRef"};
  auto model = runtime()->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_EQ((*model)->partitions().size(), 1u) << (*model)->describe_plan(PlanFormat::kText);
  EXPECT_EQ((*model)->partitions()[0].backend, "CpuOneDnn");
}

// ---- int8 groups ---------------------------------------------------------------

// QDQ models as quantizers write them: the float input quantized to
// uint8 (scale 0.02, zero point 128) and dequantized, then the pattern, its
// result quantized and dequantized into the output "y".
struct Int8Case {
  const char* name;
  // Adds the pattern reading "xd" (and "x2d", a second dequantized input of
  // the same shape) and ending in the QuantizeLinear "yq" whose scale and zero
  // point are "ys"/"yz"; the case adds the input side and the final DQ.
  void (*build)(ModelBuilder& b);
  Dims x;
  const char* kind;  // the primitive kind of the int8 step ("" for a table of ours)
  float y_scale;
};

// Input "x" of `shape`, standard normal from `seed`.
std::map<std::string, Tensor> normal_x(const Dims& shape, uint32_t seed) {
  Tensor x(DType::kFloat32, shape);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = normal(rng);
  return {{"x", x}};
}

// Per-channel int8 weights [oc, ic/group, k, k] with an int32 bias (scale
// x_scale * w_scale), each behind a DequantizeLinear, named w/wd and b/bd.
void qdq_conv_weights(ModelBuilder& b, int64_t oc, int64_t icg, int64_t k, bool per_channel) {
  std::mt19937 rng(7);
  std::vector<int32_t> w(static_cast<size_t>(oc * icg * k * k)), bias(static_cast<size_t>(oc));
  fill_uniform(w, rng, -127, 127);
  fill_uniform(bias, rng, -2000, 2000);
  const size_t ns = per_channel ? static_cast<size_t>(oc) : 1;
  std::vector<float> ws(ns), bs(static_cast<size_t>(oc));
  for (size_t i = 0; i < ns; ++i) ws[i] = 0.001f + 0.0003f * static_cast<float>(i % 7);
  for (size_t i = 0; i < bs.size(); ++i) bs[i] = 0.02f * ws[per_channel ? i : 0];
  b.init_ints("w", onnx::TensorProto::INT8, {oc, icg, k, k}, w);
  const Dims sd = per_channel ? Dims{oc} : Dims{};
  b.init_f32("ws", sd, ws);
  b.init_ints("wz", onnx::TensorProto::INT8, sd, std::vector<int32_t>(ns, 0));
  b.init_ints("b", onnx::TensorProto::INT32, {oc}, bias);
  b.init_f32("bs", {oc}, bs);
  auto& wd = b.node("DequantizeLinear", {"w", "ws", "wz"}, {"wd"});
  if (per_channel) set_int(wd, "axis", 0);
  set_int(b.node("DequantizeLinear", {"b", "bs"}, {"bd"}), "axis", 0);
}

// Int8 weights of a product, [rows, cols], one scale per column of the
// result (`axis`: 0 for Gemm's transposed [N, K], 1 for [K, N]), behind a
// DequantizeLinear named w/wd; and an int32 bias of the result's columns,
// b/bd.
void qdq_product_weights(ModelBuilder& b, int64_t rows, int64_t cols, int64_t axis) {
  std::mt19937 rng(9);
  std::vector<int32_t> w(static_cast<size_t>(rows * cols));
  fill_uniform(w, rng, -127, 127);
  const int64_t n = axis == 0 ? rows : cols;
  std::vector<int32_t> bias(static_cast<size_t>(n));
  fill_uniform(bias, rng, -2000, 2000);
  std::vector<float> ws(static_cast<size_t>(n)), bs(static_cast<size_t>(n));
  for (size_t i = 0; i < ws.size(); ++i) {
    ws[i] = 0.0008f + 0.0002f * static_cast<float>(i % 5);
    bs[i] = 0.02f * ws[i];
  }
  b.init_ints("w", onnx::TensorProto::INT8, {rows, cols}, w);
  b.init_f32("ws", {n}, ws);
  set_int(b.node("DequantizeLinear", {"w", "ws"}, {"wd"}), "axis", axis);
  b.init_ints("b", onnx::TensorProto::INT32, {n}, bias);
  b.init_f32("bs", {n}, bs);
  set_int(b.node("DequantizeLinear", {"b", "bs"}, {"bd"}), "axis", 0);
}

// y quantized to "yq" with scale `s` and zero point `z`, from float "v".
void quantize_to(ModelBuilder& b, const std::string& v, const std::string& out, float s, int z) {
  b.init_f32(out + "_s", {}, {s});
  b.init_ints(out + "_z", onnx::TensorProto::UINT8, {}, {z});
  b.node("QuantizeLinear", {v, out + "_s", out + "_z"}, {out});
}
void dequantize_from(ModelBuilder& b, const std::string& q, const std::string& out) {
  b.node("DequantizeLinear", {q, q + "_s", q + "_z"}, {out});
}

const Int8Case kInt8Cases[] = {
    {"ConvPaddedPerChannel",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 24, 16, 3, true);
       set_ints(b.node("Conv", {"xd", "wd", "bd"}, {"c"}), "pads", {1, 1, 1, 1});
       quantize_to(b, "c", "yq", 0.05f, 120);
     },
     {1, 16, 12, 12}, "convolution", 0.05f},
    {"ConvReluAsFloatPostOp",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 16, 16, 1, false);
       b.node("Conv", {"xd", "wd", "bd"}, {"c"});
       b.node("Relu", {"c"}, {"r"});
       quantize_to(b, "r", "yq", 0.03f, 0);
     },
     {1, 16, 9, 9}, "convolution", 0.03f},
    {"ConvThenQdqReluRequantized",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 32, 16, 3, true);
       auto& c = b.node("Conv", {"xd", "wd", "bd"}, {"c"});
       set_ints(c, "strides", {2, 2});
       set_ints(c, "pads", {1, 1, 1, 1});
       quantize_to(b, "c", "cq", 0.06f, 131);
       dequantize_from(b, "cq", "cd");
       b.node("Relu", {"cd"}, {"r"});
       quantize_to(b, "r", "yq", 0.035f, 0);
     },
     {1, 16, 14, 14}, "convolution", 0.035f},
    {"DepthwiseConvThenQdqClip",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 16, 1, 3, true);
       auto& c = b.node("Conv", {"xd", "wd", "bd"}, {"c"});
       set_int(c, "group", 16);
       set_ints(c, "pads", {1, 1, 1, 1});
       quantize_to(b, "c", "cq", 0.04f, 100);
       dequantize_from(b, "cq", "cd");
       b.init_f32("lo", {}, {0.f});
       b.init_f32("hi", {}, {3.f});
       b.node("Clip", {"cd", "lo", "hi"}, {"r"});
       quantize_to(b, "r", "yq", 0.02f, 0);
     },
     {1, 16, 10, 10}, "convolution", 0.02f},
    {"ResidualAddThenQdqRelu",
     [](ModelBuilder& b) {
       b.node("Add", {"xd", "x2d"}, {"a"});
       quantize_to(b, "a", "aq", 0.045f, 125);
       dequantize_from(b, "aq", "ad");
       b.node("Relu", {"ad"}, {"r"});
       quantize_to(b, "r", "yq", 0.025f, 0);
     },
     {1, 16, 8, 8}, "binary", 0.025f},
    {"MaxPoolRequantized",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 16, 16, 1, true);
       b.node("Conv", {"xd", "wd", "bd"}, {"c"});
       quantize_to(b, "c", "cq", 0.05f, 128);
       dequantize_from(b, "cq", "cd");
       auto& p = b.node("MaxPool", {"cd"}, {"p"});
       set_ints(p, "kernel_shape", {3, 3});
       set_ints(p, "strides", {2, 2});
       set_ints(p, "pads", {1, 1, 1, 1});
       quantize_to(b, "p", "yq", 0.04f, 110);
     },
     {1, 16, 11, 11}, "pooling_v2", 0.04f},
    {"GlobalAveragePoolRequantized",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 16, 16, 1, true);
       b.node("Conv", {"xd", "wd", "bd"}, {"c"});
       quantize_to(b, "c", "cq", 0.05f, 128);
       dequantize_from(b, "cq", "cd");
       b.node("GlobalAveragePool", {"cd"}, {"p"});
       quantize_to(b, "p", "yq", 0.002f, 120);
     },
     {1, 16, 9, 9}, "pooling_v2", 0.002f},
    {"SigmoidAsATable",
     [](ModelBuilder& b) {
       b.node("Sigmoid", {"xd"}, {"s"});
       quantize_to(b, "s", "yq", 1.f / 255.f, 0);
     },
     {1, 8, 5, 5}, "", 1.f / 255.f},
    {"SiLUAsATable",
     [](ModelBuilder& b) {
       qdq_conv_weights(b, 16, 16, 1, true);
       b.node("Conv", {"xd", "wd", "bd"}, {"c"});
       quantize_to(b, "c", "cq", 0.05f, 128);
       dequantize_from(b, "cq", "cd");
       b.node("Sigmoid", {"cd"}, {"s"});
       quantize_to(b, "s", "sq", 1.f / 255.f, 0);
       dequantize_from(b, "sq", "sd");
       b.node("Mul", {"cd", "sd"}, {"m"});
       quantize_to(b, "m", "yq", 0.03f, 10);
     },
     {1, 16, 6, 6}, "", 0.03f},
    {"QLinearConvThenQdqRelu",
     [](ModelBuilder& b) {
       std::mt19937 rng(21);
       std::vector<int32_t> w(24 * 16 * 9), bias(24);
       fill_uniform(w, rng, -127, 127);
       fill_uniform(bias, rng, -2000, 2000);
       std::vector<float> ws(24);
       for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.001f + 0.0002f * static_cast<float>(i % 5);
       b.init_ints("w", onnx::TensorProto::INT8, {24, 16, 3, 3}, w);
       b.init_f32("ws", {24}, ws);
       b.init_ints("wz", onnx::TensorProto::INT8, {24}, std::vector<int32_t>(24, 0));
       b.init_ints("b", onnx::TensorProto::INT32, {24}, bias);
       b.init_f32("cq_s", {}, {0.05f});
       b.init_ints("cq_z", onnx::TensorProto::UINT8, {}, {130});
       auto& c = b.node("QLinearConv",
                        {"xq", "xq_s", "xq_z", "w", "ws", "wz", "cq_s", "cq_z", "b"}, {"cq"});
       set_ints(c, "pads", {1, 1, 1, 1});
       dequantize_from(b, "cq", "cd");
       b.node("Relu", {"cd"}, {"r"});
       quantize_to(b, "r", "yq", 0.03f, 0);
     },
     {1, 16, 8, 8}, "convolution", 0.03f},
    {"QLinearMatMulPerColumn",
     [](ModelBuilder& b) {
       std::mt19937 rng(23);
       std::vector<int32_t> w(32 * 20);
       fill_uniform(w, rng, -127, 127);
       std::vector<float> ws(20);
       for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.001f + 0.0003f * static_cast<float>(i % 4);
       b.init_ints("w", onnx::TensorProto::INT8, {32, 20}, w);
       b.init_f32("ws", {20}, ws);
       b.init_ints("wz", onnx::TensorProto::INT8, {20}, std::vector<int32_t>(20, 0));
       b.init_f32("yq_s", {}, {0.04f});
       b.init_ints("yq_z", onnx::TensorProto::UINT8, {}, {128});
       b.node("QLinearMatMul", {"xq", "xq_s", "xq_z", "w", "ws", "wz", "yq_s", "yq_z"}, {"yq"});
     },
     {2, 5, 32}, "matmul", 0.04f},
    {"SqueezeExcitationMulBroadcast",
     [](ModelBuilder& b) {
       b.node("GlobalAveragePool", {"xd"}, {"p"});
       b.node("Sigmoid", {"p"}, {"s"});
       quantize_to(b, "s", "sq", 1.f / 255.f, 0);
       dequantize_from(b, "sq", "sd");
       b.node("Mul", {"xd", "sd"}, {"m"});
       quantize_to(b, "m", "yq", 0.015f, 128);
     },
     {1, 16, 7, 7}, "binary", 0.015f},
    {"GemmTransBAfterFlatten",
     [](ModelBuilder& b) {
       qdq_product_weights(b, 10, 256, 0);
       b.node("Flatten", {"xd"}, {"flat"});
       set_int(b.node("Gemm", {"flat", "wd", "bd"}, {"g"}), "transB", 1);
       quantize_to(b, "g", "yq", 0.08f, 128);
     },
     {2, 16, 4, 4}, "matmul", 0.08f},
    {"ConvTransposeUpsamplePerChannel",
     [](ModelBuilder& b) {
       // Weights [C_in, C_out, 3, 3], one scale per output channel (axis 1).
       std::mt19937 rng(17);
       std::vector<int32_t> w(16 * 8 * 9), bias(8);
       fill_uniform(w, rng, -127, 127);
       fill_uniform(bias, rng, -1000, 1000);
       std::vector<float> ws(8), bs(8);
       for (size_t i = 0; i < ws.size(); ++i) {
         ws[i] = 0.001f + 0.0003f * static_cast<float>(i % 5);
         bs[i] = 0.02f * ws[i];
       }
       b.init_ints("w", onnx::TensorProto::INT8, {16, 8, 3, 3}, w);
       b.init_f32("ws", {8}, ws);
       set_int(b.node("DequantizeLinear", {"w", "ws"}, {"wd"}), "axis", 1);
       b.init_ints("b", onnx::TensorProto::INT32, {8}, bias);
       b.init_f32("bs", {8}, bs);
       set_int(b.node("DequantizeLinear", {"b", "bs"}, {"bd"}), "axis", 0);
       auto& c = b.node("ConvTranspose", {"xd", "wd", "bd"}, {"c"});
       set_ints(c, "strides", {2, 2});
       set_ints(c, "pads", {1, 1, 1, 1});
       set_ints(c, "output_padding", {1, 1});
       b.node("Relu", {"c"}, {"r"});
       quantize_to(b, "r", "yq", 0.02f, 0);
     },
     {1, 16, 6, 6}, "deconvolution", 0.02f},
    {"MatMulPerColumnThenQdqRelu",
     [](ModelBuilder& b) {
       qdq_product_weights(b, 32, 24, 1);
       b.node("MatMul", {"xd", "wd"}, {"m"});
       quantize_to(b, "m", "mq", 0.06f, 125);
       dequantize_from(b, "mq", "md");
       b.node("Relu", {"md"}, {"r"});
       quantize_to(b, "r", "yq", 0.04f, 0);
     },
     {2, 6, 32}, "matmul", 0.04f},
};

class OneDnnInt8 : public testing::TestWithParam<Int8Case> {};

// The pattern runs as an int8 primitive (the plan report names it), all of
// it on CpuOneDnn, and its output is within one quantization step of
// CpuRef's (which dequantizes, computes in float and quantizes).
TEST_P(OneDnnInt8, WithinOneStepOfCpuRef) {
  const Int8Case& c = GetParam();
  ModelBuilder b(13);
  b.input("x", test::shape_of(c.x));
  quantize_to(b, "x", "xq", 0.02f, 128);
  dequantize_from(b, "xq", "xd");
  // A second operand from the first (so that both are in one partition).
  b.node("Abs", {"xd"}, {"x2"});
  quantize_to(b, "x2", "x2q", 0.03f, 120);
  dequantize_from(b, "x2q", "x2d");
  c.build(b);
  dequantize_from(b, "yq", "y");
  b.output("y");
  // x2 is read only by the Add; elsewhere it is an output of its own.
  if (std::string(c.name).find("Add") == std::string::npos) b.output("x2d");
  int int8_steps = 0;
  std::string kind(c.kind);  // "\tKIND\t"
  kind.insert(0, 1, '\t').push_back('\t');
  std::string report;
  for (const std::string& line : plan_report(b, {})) {
    report += line + "\n";
    if (line.find(kind) != std::string::npos && line.find("(int8") != std::string::npos)
      ++int8_steps;
  }
  EXPECT_EQ(int8_steps, 1) << "no int8 " << c.kind << " step in\n" << report;
  // A table holds CpuRef's results: nothing to round differently.
  const double bound = *c.kind == '\0' ? 0.0 : c.y_scale * 1.001;
  test::TempDir dir;
  const std::string path = b.save(dir);
  std::vector<std::string> used;
  std::vector<Tensor> got = run(path, {"CpuOneDnn"}, b.inputs(), &used);
  EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
  std::vector<Tensor> want = run(path, {"CpuRef"}, b.inputs(), nullptr);
  ASSERT_FALSE(got.empty());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_GT(e2e::max_abs(want[0]), 20 * c.y_scale);  // not all saturated or zero
  EXPECT_LE(e2e::max_abs_diff(got[0], want[0]), bound);
}

INSTANTIATE_TEST_SUITE_P(OneDnnOps, OneDnnInt8, testing::ValuesIn(kInt8Cases),
                         [](const testing::TestParamInfo<Int8Case>& i) { return i.param.name; });

// A MatMul quantized dynamically, as ONNX Runtime's quantize_dynamic writes
// it (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the product
// of the scales, then the bias Add), runs on CpuOneDnn as one int8 matmul
// after a quantizing step, and gives CpuRef's result but for float
// rounding: the integer product is exact and the scales multiply it once.
TEST(OneDnnOps, DynamicallyQuantizedMatMulIsOneInt8Step) {
  for (const int64_t per_column : {0, 1}) {
    SCOPED_TRACE(per_column ? "one weight scale per column" : "one weight scale");
    ModelBuilder b(13);
    b.input("x", {2, 7, 50});  // 700 values: the quantizing loop's tail too
    std::mt19937 rng(13);
    std::vector<int32_t> w(50 * 40);
    fill_uniform(w, rng, -127, 127);
    b.init_ints("w", onnx::TensorProto::INT8, {50, 40}, w);
    const int64_t ns = per_column ? 40 : 1;
    const Dims sd = per_column ? Dims{40} : Dims{};
    b.init_ints("wz", onnx::TensorProto::INT8, sd, std::vector<int32_t>(ns, 0));
    std::vector<float> ws(ns), bias(40);
    for (size_t i = 0; i < ws.size(); ++i) ws[i] = 0.01f + 0.001f * static_cast<float>(i % 9);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = 0.1f * static_cast<float>(i % 11) - 0.5f;
    b.init_f32("ws", sd, ws);
    b.init_f32("bias", {40}, bias);
    b.node("DynamicQuantizeLinear", {"x"}, {"xq", "xs", "xz"});
    b.node("MatMulInteger", {"xq", "w", "xz", "wz"}, {"acc"});
    set_int(b.node("Cast", {"acc"}, {"accf"}), "to", onnx::TensorProto::FLOAT);
    b.node("Mul", {"xs", "ws"}, {"s"});
    b.node("Mul", {"accf", "s"}, {"m"});
    b.node("Add", {"bias", "m"}, {"y"});
    b.output("y");
    int int8 = 0, quantizing = 0, steps = 0;
    for (const std::string& line : plan_report(b, {})) {
      ++steps;
      const bool matmul = line.find("\tmatmul\t") != std::string::npos;
      int8 += matmul && line.find("(int8)") != std::string::npos;
      quantizing += line.find("(its DynamicQuantizeLinear)") != std::string::npos;
    }
    EXPECT_EQ(int8, 1);
    EXPECT_EQ(quantizing, 1);
    EXPECT_EQ(steps, 2);  // the bias too is the matmul's
    expect_matches_cpuref(b, 1e-5);
  }
}

// oneDNN pools 8-bit integers channels-last only, and the lowering takes
// that layout for 2-D windows: a 3-D MaxPool of a plain uint8 tensor has only
// oneDNN's reference int8 kernel, so the group runs as its float operators
// instead, still on CpuOneDnn and exactly as CpuRef.
TEST(OneDnnOps, Int8GroupWithoutAKernelRunsInFloat) {
  ModelBuilder b(13);
  b.input("x", {1, 8, 5, 5, 5});
  quantize_to(b, "x", "xq", 0.02f, 128);
  dequantize_from(b, "xq", "xd");
  set_ints(b.node("MaxPool", {"xd"}, {"p"}), "kernel_shape", {2, 2, 2});
  quantize_to(b, "p", "yq", 0.02f, 128);
  dequantize_from(b, "yq", "y");
  b.output("y");
  for (const std::string& line : plan_report(b, {}))
    EXPECT_EQ(line.find("(int8)"), std::string::npos) << line;
  expect_bit_exact(b, normal_x({1, 8, 5, 5, 5}, 3));
}

// A 2-D one is int8, its plain input reordered channels-last.
TEST(OneDnnOps, Int8MaxPoolOfAPlainTensorIsInt8) {
  ModelBuilder b(13);
  b.input("x", {1, 8, 9, 9});
  quantize_to(b, "x", "xq", 0.02f, 128);
  dequantize_from(b, "xq", "xd");
  set_ints(b.node("MaxPool", {"xd"}, {"p"}), "kernel_shape", {2, 2});
  quantize_to(b, "p", "yq", 0.02f, 128);
  dequantize_from(b, "yq", "y");
  b.output("y");
  int int8 = 0;
  for (const std::string& line : plan_report(b, {}))
    int8 += line.find("pooling") != std::string::npos && line.find("(int8)") != std::string::npos;
  EXPECT_EQ(int8, 1);
  expect_bit_exact(b, normal_x({1, 8, 9, 9}, 3));
}

// ConvInteger and MatMulInteger of constant int8 weights (zero point 0) run
// on CpuOneDnn as one int8 primitive each, whose int32 result is CpuRef's
// exactly (an integer sum, no rounding).
TEST(OneDnnOps, ConvIntegerAndMatMulIntegerAreInt8StepsExactlyAsCpuRef) {
  for (const bool conv : {true, false}) {
    SCOPED_TRACE(conv ? "ConvInteger" : "MatMulInteger");
    ModelBuilder b(13);
    const Dims xs = conv ? Dims{1, 12, 7, 7} : Dims{2, 3, 40};
    b.input("x", test::shape_of(xs));
    quantize_to(b, "x", "xq", 0.02f, 131);
    std::mt19937 rng(31);
    const Dims ws = conv ? Dims{21, 4, 3, 3} : Dims{40, 24};
    std::vector<int32_t> w(static_cast<size_t>(Tensor(DType::kInt8, ws).numel()));
    fill_uniform(w, rng, -127, 127);
    b.init_ints("w", onnx::TensorProto::INT8, ws, w);
    b.init_ints("wz", onnx::TensorProto::INT8, {}, {0});
    auto& node = b.node(conv ? "ConvInteger" : "MatMulInteger", {"xq", "w", "xq_z", "wz"}, {"y"});
    if (conv) {
      set_int(node, "group", 3);
      set_ints(node, "pads", {1, 1, 1, 1});
    }
    b.output("y", std::nullopt, onnx::TensorProto::INT32);
    int int8 = 0;
    for (const std::string& line : plan_report(b, {}))
      int8 += line.find("(int8)") != std::string::npos;
    EXPECT_EQ(int8, 1);
    expect_bit_exact(b, normal_x(xs, 37));
  }
}

// A Transpose, Reshape or Concat between dequantizers and a quantizer of the
// same scale and zero point moves the integers, exactly as CpuRef moves the
// dequantized values and quantizes them again.
TEST(OneDnnOps, MovingQuantizedValuesMovesTheirIntegers) {
  ModelBuilder b(13);
  b.input("x", {1, 8, 5, 6});
  quantize_to(b, "x", "xq", 0.02f, 128);
  dequantize_from(b, "xq", "xd");
  auto& t = b.node("Transpose", {"xd"}, {"t"});
  t.set_name("transpose");
  set_ints(t, "perm", {0, 2, 3, 1});
  b.node("QuantizeLinear", {"t", "xq_s", "xq_z"}, {"tq"});
  b.node("DequantizeLinear", {"tq", "xq_s", "xq_z"}, {"td"});
  b.init_i64("shape", {2}, {1, -1});
  b.node("Reshape", {"td", "shape"}, {"r"}).set_name("reshape");
  b.node("QuantizeLinear", {"r", "xq_s", "xq_z"}, {"rq"});
  b.node("DequantizeLinear", {"rq", "xq_s", "xq_z"}, {"y"});
  b.output("y");
  b.node("Relu", {"xd"}, {"x2"});
  b.node("QuantizeLinear", {"x2", "xq_s", "xq_z"}, {"x2q"});
  b.node("DequantizeLinear", {"x2q", "xq_s", "xq_z"}, {"x2d"});
  auto& c = b.node("Concat", {"xd", "x2d"}, {"c"});
  c.set_name("concat");
  set_int(c, "axis", 1);
  b.node("QuantizeLinear", {"c", "xq_s", "xq_z"}, {"cq"});
  b.node("DequantizeLinear", {"cq", "xq_s", "xq_z"}, {"y2"});
  b.output("y2");
  test::TempDir dir;
  std::string plan;
  run(b.save(dir), {"CpuOneDnn"}, b.inputs(), nullptr, &plan);
  EXPECT_NE(plan.find("  concat (Concat) -> CpuOneDnn [preferred, partition 0]\n"
                      "      int8 concat\n"),
            std::string::npos)
      << plan;
  EXPECT_NE(plan.find("  transpose (Transpose) -> CpuOneDnn [preferred, partition 0]\n"
                      "      int8 transpose\n"),
            std::string::npos)
      << plan;
  EXPECT_NE(plan.find("  reshape (Reshape) -> CpuOneDnn [preferred, partition 0]\n"
                      "      int8 reshape\n"),
            std::string::npos)
      << plan;
  expect_bit_exact(b, normal_x({1, 8, 5, 6}, 5));
}

// `backplane partition` (describe_plan) says for each node of a quantized
// model whether it ran in an int8 group, and if not, why not: the notes
// CpuOneDnn gives with the nodes it compiles.
TEST(OneDnnOps, PlanSaysWhichQuantizedNodesRanAsInt8AndWhyNot) {
  ModelBuilder b(13);
  b.input("x", {1, 16, 8, 8});
  quantize_to(b, "x", "xq", 0.02f, 128);
  dequantize_from(b, "xq", "xd");
  qdq_conv_weights(b, 16, 16, 1, true);
  b.node("Conv", {"xd", "wd", "bd"}, {"c"}).set_name("int8_conv");
  quantize_to(b, "c", "cq", 0.05f, 120);
  dequantize_from(b, "cq", "cd");
  // Weights with a zero point other than 0: no int8 convolution takes them.
  std::vector<int32_t> w(16 * 16, 3);
  b.init_ints("w2", onnx::TensorProto::INT8, {16, 16, 1, 1}, w);
  b.init_f32("w2s", {}, {0.01f});
  b.init_ints("w2z", onnx::TensorProto::INT8, {}, {1});
  b.node("DequantizeLinear", {"w2", "w2s", "w2z"}, {"w2d"});
  b.node("Conv", {"cd", "w2d"}, {"c2"}).set_name("float_conv");
  quantize_to(b, "c2", "c2q", 0.05f, 120);
  dequantize_from(b, "c2q", "c2d");
  auto& concat = b.node("Concat", {"cd", "c2d"}, {"cat"});
  concat.set_name("float_concat");
  set_int(concat, "axis", 1);
  quantize_to(b, "cat", "yq", 0.06f, 120);  // not its inputs' scale
  dequantize_from(b, "yq", "y");
  b.output("y");
  test::TempDir dir;
  std::string plan;
  std::vector<std::string> used;
  run(b.save(dir), {"CpuOneDnn"}, b.inputs(), &used, &plan);
  EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
  // The line after the node's is its note.
  auto note = [&](const std::string& node) {
    const size_t at = plan.find("  " + node + " (");
    if (at == std::string::npos) return std::string("(no node " + node + ")");
    const size_t begin = plan.find('\n', at) + 1, end = plan.find('\n', begin);
    return plan.substr(begin, end - begin);
  };
  EXPECT_EQ(note("int8_conv"), "      int8 convolution") << plan;
  EXPECT_EQ(note("float_conv"), "      float, not int8: its weights' zero point is not 0") << plan;
  EXPECT_EQ(note("float_concat"),
            "      float, not int8: its QuantizeLinear's scale, zero point or type is not its "
            "input's")
      << plan;
  EXPECT_NE(plan.find("int8, in the convolution of 'int8_conv'"), std::string::npos) << plan;
}

// validate judges a quantized model by the int8 rule: a value may differ
// from CpuRef's by one step of its scale per quantizer on the longest path
// to it from a node off CpuRef (here x's and the convolution's: 2), in
// integers for the quantized tensor and times the scale once dequantized.
TEST(OneDnnOps, ValidateJudgesQuantizedValuesByTheInt8Rule) {
  ModelBuilder b(13);
  b.input("x", {1, 16, 10, 10});
  quantize_to(b, "x", "xq", 0.02f, 128);
  dequantize_from(b, "xq", "xd");
  qdq_conv_weights(b, 24, 16, 3, true);
  set_ints(b.node("Conv", {"xd", "wd", "bd"}, {"c"}), "pads", {1, 1, 1, 1});
  quantize_to(b, "c", "yq", 0.05f, 120);
  dequantize_from(b, "yq", "y");
  b.output("y");
  b.output("yq", std::nullopt, onnx::TensorProto::UINT8);
  test::TempDir dir;
  ValidateOptions o;
  o.backends = {"CpuOneDnn"};
  Result<ValidationReport> r = validate(*runtime(), b.save(dir), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->ok);
  ASSERT_EQ(r->checks.size(), 2u);
  for (const TensorCheck& c : r->checks) {
    SCOPED_TRACE(c.name + ": " + c.describe());
    EXPECT_EQ(c.comparison.int8_steps, 2);
    EXPECT_NEAR(c.comparison.int8_allowance, c.name == "y" ? 2 * 0.05 : 2.0, 1e-6);
    EXPECT_NE(c.describe().find("(2 int8 steps)"), std::string::npos);
  }
  // The bound is the float rule's plus the allowance, for a uint8 tensor
  // (judged exactly otherwise) too.
  numerics::Comparison c = r->checks[1].comparison;
  c.max_abs_error = 2;
  EXPECT_TRUE(c.within());
  c.max_abs_error = 3;
  EXPECT_FALSE(c.within());
}

// A dynamically quantized network as ONNX Runtime's quantize_dynamic writes
// a CNN (DynamicQuantizeLinear -> ConvInteger of uint8 weights -> Cast ->
// Mul by the scales -> Add of the bias, per convolution) with bilinear
// upsampling between: CpuOneDnn's Resize and CpuRef's round differently in
// the last bit of some pixels, a quantizer after them then rounds some the
// other way, and the differences grow from layer to layer, on both sides
// correct. validate judges such a float value as a tensor of 8-bit steps of
// its range, one per quantizer on its path (here 6), not by the float rule.
TEST(OneDnnOps, ValidateJudgesDynamicallyQuantizedFloatsByTheInt8Rule) {
  constexpr int kLayers = 6;
  constexpr int64_t kChannels = 16;
  ModelBuilder b(13);
  b.input("x", {1, kChannels, 64, 64});
  std::mt19937 rng(7);
  std::string x = "x";
  b.init_f32("up", {4}, {1.f, 1.f, 3.f, 3.f});
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "l" + std::to_string(l) + "_";
    b.node("DynamicQuantizeLinear", {x}, {p + "q", p + "qs", p + "qz"});
    // As a quantizer writes trained weights: most near the zero point.
    std::normal_distribution<float> normal(127.f, 24.f);
    std::vector<int32_t> w(static_cast<size_t>(kChannels * kChannels * 9));
    for (int32_t& v : w) v = std::clamp(static_cast<int32_t>(std::lround(normal(rng))), 0, 255);
    b.init_ints(p + "w", onnx::TensorProto::UINT8, {kChannels, kChannels, 3, 3}, w);
    b.init_ints(p + "wz", onnx::TensorProto::UINT8, {}, {127});
    b.init_f32(p + "ws", {}, {0.004f});
    set_ints(b.node("ConvInteger", {p + "q", p + "w", p + "qz", p + "wz"}, {p + "acc"}), "pads",
             {1, 1, 1, 1});
    set_int(b.node("Cast", {p + "acc"}, {p + "accf"}), "to", onnx::TensorProto::FLOAT);
    b.node("Mul", {p + "qs", p + "ws"}, {p + "s"});
    b.node("Mul", {p + "accf", p + "s"}, {p + "c"});
    b.random_weight(p + "bias", {1, kChannels, 1, 1}, -0.1f, 0.1f);
    b.node("Add", {p + "c", p + "bias"}, {p + "cb"});
    b.node("Relu", {p + "cb"}, {p + "r"});
    auto& up = b.node("Resize", {p + "r", "", "up"}, {p + "u"});
    set_string(up, "mode", "linear");
    set_string(up, "coordinate_transformation_mode", "half_pixel");
    auto& pool = b.node("MaxPool", {p + "u"}, {p + "y"});
    set_ints(pool, "kernel_shape", {3, 3});
    set_ints(pool, "strides", {3, 3});
    x = p + "y";
  }
  b.node("Sigmoid", {x}, {"y"});
  b.output("y");
  test::TempDir dir;
  ValidateOptions o;
  o.backends = {"CpuOneDnn"};
  o.find_node = false;
  Result<ValidationReport> r = validate(*runtime(), b.save(dir), o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->checks.size(), 1u);
  const TensorCheck& c = r->checks[0];
  SCOPED_TRACE(c.describe());
  EXPECT_TRUE(r->ok);
  // The runs do differ, by more than the float rule alone allows.
  EXPECT_GT(c.comparison.max_abs_error, c.comparison.bound() - c.comparison.int8_allowance);
  EXPECT_EQ(c.comparison.int8_steps, kLayers);
  // Steps of the output's range over 255 (a Sigmoid's: under 1).
  EXPECT_GT(c.comparison.int8_allowance, 0);
  EXPECT_LT(c.comparison.int8_allowance, kLayers / 255.0);
}

}  // namespace
}  // namespace backplane
