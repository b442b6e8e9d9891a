// CpuOneDnn never runs a oneDNN reference kernel (issue 14).
//
// The backend writes every primitive of every plan it compiles (and of every
// shape-polymorphic instance it lowers) to its "plan_report" file, one
// line each: partition, primitive kind, implementation (oneDNN's
// impl_info_str), layouts, node. These tests load models on the default
// backends (CpuOneDnn as users load it, then CpuRef), run them once (an
// instance is lowered at its first run) and read that report:
//   - a squeeze-excite block (RegNet's: a 1xCx1x1 scale times the 1xCxHxW
//     output of a grouped convolution) runs wholly on CpuOneDnn, its Mul an
//     optimised binary (it ran "ref:any" when the scale kept another layout);
//   - a broadcast no optimised binary kernel takes is left to CpuRef, and the
//     model still computes CpuRef's result;
//   - (OneDnnNoReferenceModels, on generated data) no primitive of any
//     benchmark model (scripts/gen_models.py) or zoo classification model
//     (scripts/gen_zoo.py) is a reference implementation;
//   - (OneDnnLayout*) convolutions run blocked or channels-last as the model
//     suits, and either layout, forced, gives CpuRef's result.
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace backplane {
namespace {

using test::ModelBuilder;
using test::set_int;
using test::set_ints;

struct ReportLine {
  std::string partition, kind, impl, layouts, what;
};

// The plan report's file (CpuOneDnn's configure key "plan_report").
const std::string& report_path() {
  static const test::TempDir dir;
  static const std::string path = dir.path() + "/plan_report.tsv";
  return path;
}

// CpuOneDnn's other settings for runtime(), as the Configured in scope set
// them.
std::map<std::string, std::string>& current_config() {
  static std::map<std::string, std::string> config;
  return config;
}

// Sets one of CpuOneDnn's configure keys for runtime() while it lives.
class Configured {
 public:
  Configured(const std::string& key, const std::string& value) : saved_(current_config()) {
    current_config()[key] = value;
  }
  ~Configured() { current_config() = saved_; }

 private:
  std::map<std::string, std::string> saved_;
};

// A runtime (one thread) per set of settings, each writing the plan report.
std::shared_ptr<Runtime> runtime() {
  static std::map<std::map<std::string, std::string>, std::shared_ptr<Runtime>> runtimes;
  std::map<std::string, std::string> config = current_config();
  config["plan_report"] = report_path();
  std::shared_ptr<Runtime>& rt = runtimes[config];
  if (!rt) rt = e2e::onednn_runtime(1, config);
  return rt;
}

void clear_report() { std::ofstream(report_path(), std::ios::trunc); }

std::vector<ReportLine> read_report() {
  std::vector<ReportLine> lines;
  std::ifstream in(report_path());
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string field; std::getline(ss, field, '\t');) f.push_back(field);
    EXPECT_EQ(f.size(), 5u) << "malformed report line: " << line;
    if (f.size() == 5) lines.push_back({f[0], f[1], f[2], f[3], f[4]});
  }
  return lines;
}

// The names oneDNN 2.x gives its reference kernels (checked independently of
// the backend's own test).
bool is_reference(const std::string& impl) {
  return impl.rfind("ref", 0) == 0 || impl.find(":ref") != std::string::npos;
}

// Seeded inputs for every input of `model`: floats N(0,1), integers 0 (a
// valid token id); open dims `open`.
std::map<std::string, Tensor> inputs_for(const Model& model, int64_t open = 3) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::map<std::string, Tensor> feeds;
  for (const TensorInfo& info : model.inputs()) {
    Shape shape = info.shape;
    for (auto& d : shape)
      if (d < 0) d = open;
    Tensor t(info.dtype, shape);
    if (info.dtype == DType::kFloat32) {
      float* p = t.data_as<float>();
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(rng);
    } else {
      std::memset(t.data(), 0, t.size_bytes());
    }
    feeds[info.name] = t;
  }
  return feeds;
}

// Loads `path` on the default backends, runs it once and returns the
// report of what CpuOneDnn compiled for it; its outputs in *out.
std::vector<ReportLine> compile_and_run(const std::string& path,
                                        std::vector<std::string>* used = nullptr,
                                        std::vector<Tensor>* out = nullptr,
                                        const std::map<std::string, Tensor>* feeds = nullptr) {
  clear_report();
  auto model = runtime()->load_model(path, ModelOptions());
  EXPECT_TRUE(model.ok()) << path << ": " << model.status().to_string();
  if (!model.ok()) return {};
  if (used) *used = (*model)->backends_used();
  std::vector<Tensor> got = e2e::run_once(**model, feeds ? *feeds : inputs_for(**model));
  EXPECT_FALSE(got.empty()) << path;
  if (out) *out = got;
  return read_report();
}

void expect_no_reference(const std::string& name, const std::vector<ReportLine>& report) {
  EXPECT_FALSE(report.empty()) << name << ": CpuOneDnn compiled nothing";
  for (const ReportLine& l : report)
    EXPECT_FALSE(is_reference(l.impl)) << name << ": " << l.what << " runs oneDNN's reference "
                                       << l.kind << " '" << l.impl << "' (" << l.layouts << ")";
}

// RegNetY's squeeze-excite block: a grouped 3x3 convolution (group width 8),
// its global average, two 1x1 convolutions and a sigmoid giving a 1xCx1x1
// scale, the Mul of the two, and the 1x1 convolution after it.
ModelBuilder se_block(int64_t c) {
  ModelBuilder b;
  b.input("x", {1, c, 14, 14})
      .random_weight("wg", {c, 8, 3, 3}, -0.3f, 0.3f)
      .random_weight("w1", {c / 4, c, 1, 1}, -0.3f, 0.3f)
      .random_weight("w2", {c, c / 4, 1, 1}, -0.3f, 0.3f)
      .random_weight("w3", {c, c, 1, 1}, -0.3f, 0.3f);
  auto& g = b.node("Conv", {"x", "wg"}, {"a"});
  set_int(g, "group", c / 8);
  set_ints(g, "pads", {1, 1, 1, 1});
  b.node("Relu", {"a"}, {"ar"});
  b.node("GlobalAveragePool", {"ar"}, {"p"});
  b.node("Conv", {"p", "w1"}, {"q"});
  b.node("Relu", {"q"}, {"qr"});
  b.node("Conv", {"qr", "w2"}, {"s"});
  b.node("Sigmoid", {"s"}, {"sg"});
  b.node("Mul", {"ar", "sg"}, {"m"}).set_name("se_mul");
  b.node("Conv", {"m", "w3"}, {"y"});
  b.output("y");
  return b;
}

TEST(OneDnnNoReference, SqueezeExciteMulIsOptimised) {
  ASSERT_TRUE(runtime());
  for (int64_t c : {48, 64, 104}) {
    test::TempDir dir;
    const std::string path = se_block(c).save(dir);
    std::vector<std::string> used;
    std::vector<ReportLine> report = compile_and_run(path, &used);
    EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"}) << "C=" << c;
    expect_no_reference("SE block C=" + std::to_string(c), report);
    int muls = 0;
    for (const ReportLine& l : report)
      if (l.kind == "binary" && e2e::contains(l.what, "se_mul")) ++muls;
    EXPECT_EQ(muls, 1) << "C=" << c << ": the SE Mul is not one CpuOneDnn binary";
  }
}

// [2,3,4,5] + [2,1,4,1]: no oneDNN binary kernel but the reference one takes
// this broadcast (however the dims are merged), so CpuRef runs the Add.
TEST(OneDnnNoReference, UnsupportedBroadcastGoesToCpuRef) {
  ASSERT_TRUE(runtime());
  ModelBuilder b;
  b.input("x", {2, 3, 4, 5}).random_weight("w", {2, 1, 4, 1});
  b.node("Relu", {"x"}, {"r"});
  b.node("Add", {"r", "w"}, {"a"}).set_name("odd_add");
  b.node("Sigmoid", {"a"}, {"y"});
  b.output("y");
  test::TempDir dir;
  const std::string path = b.save(dir);
  std::map<std::string, Tensor> feeds;
  {
    Tensor x(DType::kFloat32, {2, 3, 4, 5});
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data_as<float>()[i] = 0.1f * static_cast<float>(i % 17) - 0.8f;
    feeds["x"] = x;
  }
  std::vector<std::string> used;
  std::vector<Tensor> got;
  std::vector<ReportLine> report = compile_and_run(path, &used, &got, &feeds);
  expect_no_reference("odd broadcast", report);
  for (const ReportLine& l : report) EXPECT_FALSE(e2e::contains(l.what, "odd_add")) << l.impl;
  EXPECT_NE(std::find(used.begin(), used.end(), "CpuRef"), used.end());
  EXPECT_NE(std::find(used.begin(), used.end(), "CpuOneDnn"), used.end());
  ModelOptions ref;
  ref.backends = {"CpuRef"};
  auto model = runtime()->load_model(path, ref);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  std::vector<Tensor> want = e2e::run_once(**model, feeds);
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_LE(e2e::max_abs_diff(got[0], want[0]), 1e-5 * e2e::max_abs(want[0]));
}

// DenseNet normalizes the concatenation of its features before every layer:
// each Concat and the BatchNormalization (+ ReLU) reading it are one pass
// (concat_norm), so no oneDNN concat or batch normalization is left.
TEST(OneDnnNoReference, DenseNetConcatsNormalizeInOnePass) {
  ASSERT_TRUE(runtime());
  // The one pass writes channels-last; with AVX2 oneDNN's convolutions
  // choose blocked nChw8c, and the Concats and normalizations run as steps.
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2"))
    GTEST_SKIP() << "this CPU's convolutions are blocked (AVX2)";
  const std::string path = std::string(BACKPLANE_TEST_DATA) + "/zoo/densenet121.onnx";
  ASSERT_TRUE(std::ifstream(path).good()) << path << " was not generated";
  int fused = 0;
  for (const ReportLine& l : compile_and_run(path)) {
    EXPECT_NE(l.kind, "concat") << l.what;
    EXPECT_NE(l.kind, "batch_normalization") << l.what;
    fused += l.kind == "concat_norm";
  }
  EXPECT_GE(fused, 4) << "no Concat + BatchNormalization ran as one pass";
}

// ---- every benchmark and zoo classification model (generated data) --------------

class OneDnnNoReferenceModels : public testing::TestWithParam<std::string> {};

TEST_P(OneDnnNoReferenceModels, NoReferenceKernel) {
  ASSERT_TRUE(runtime());
  const std::string path = std::string(BACKPLANE_TEST_DATA) + "/" + GetParam() + ".onnx";
  ASSERT_TRUE(std::ifstream(path).good()) << path << " was not generated";
  expect_no_reference(GetParam(), compile_and_run(path));
}

// The models scripts/gen_models.py makes (bench/ measures them).
INSTANTIATE_TEST_SUITE_P(Benchmark, OneDnnNoReferenceModels,
                         testing::Values("models/resnet18", "models/mobilenet_v2",
                                         "models/squeezenet1_1", "models/transformer",
                                         "models/tiny_cnn", "models/encoder_dyn",
                                         "models/decoder_kv"));
// The zoo's classification models (image and video; tests/e2e/zoo).
INSTANTIATE_TEST_SUITE_P(Zoo, OneDnnNoReferenceModels,
                         testing::Values("zoo/resnet18", "zoo/mobilenet_v3_small",
                                         "zoo/regnet_y_400mf", "zoo/shufflenet_v2_x0_5",
                                         "zoo/densenet121", "zoo/googlenet", "zoo/convnext",
                                         "zoo/vit", "zoo/swin", "zoo/maxvit", "zoo/r3d_18",
                                         "zoo/mc3_18", "zoo/r2plus1d_18", "zoo/mvit_v2"));

// ---- blocked or channels-last convolutions --------------------------------------
// CpuOneDnn runs a model's convolutions in oneDNN's blocked layout (nChw16c
// with AVX-512, nChw8c with AVX2) where its depthwise, grouped or batched
// convolutions gain from it and no Concat, Split, Slice, Transpose or
// channel shuffle would pay for it; elsewhere in the layout oneDNN picks
// (compiler.cpp, blocked_pays): channels-last with AVX-512, mostly blocked
// (nChw8c) with AVX2. The configure key "layout" (onednn or blocked) forces
// either.

// The channel block of the blocked kernels this CPU has (the ISA oneDNN
// dispatches on: avx512_core needs AVX-512 F, BW, VL and DQ), 0 if none.
int cpu_block() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return 16;
  return __builtin_cpu_supports("avx2") ? 8 : 0;
}

struct ConvCount {
  size_t spatial = 0, blocked = 0, winograd = 0;
};
// The report's convolutions over 4-D and 5-D tensors, and those of them
// writing a blocked layout (aBcd16b; a grouped convolution of 8 channels
// per group may get oneDNN's own aBcd8b), and those run by a Winograd kernel.
ConvCount count_convolutions(const std::vector<ReportLine>& report) {
  ConvCount n;
  for (const ReportLine& l : report) {
    if (l.kind != "convolution") continue;
    if (l.impl.find("wino") != std::string::npos) ++n.winograd;
    const size_t at = l.layouts.find("dst:");
    if (at == std::string::npos) continue;
    const std::string dst = l.layouts.substr(at + 4, l.layouts.find(' ', at) - at - 4);
    if (dst.size() < 4) continue;  // abc, aBc8b: 1-D
    ++n.spatial;
    if ((dst.rfind("aBcd", 0) == 0 || dst.rfind("aBcde", 0) == 0) && dst.back() == 'b' &&
        std::isdigit(static_cast<unsigned char>(dst[dst.size() - 2])))
      ++n.blocked;
  }
  return n;
}

std::string zoo_path(const std::string& name) {
  return std::string(BACKPLANE_TEST_DATA) + "/zoo/" + name + ".onnx";
}

TEST(OneDnnLayout, ChosenByWhatTheModelDoesWithItsChannels) {
  ASSERT_TRUE(runtime());
  const int block = cpu_block();
  // One image each (the zoo's batch is open).
  auto one_image = [](const std::string& path) {
    auto model = runtime()->load_model(path, e2e::cpuref_only());
    EXPECT_TRUE(model.ok()) << path;
    return model.ok() ? inputs_for(**model, 1) : std::map<std::string, Tensor>();
  };
  // Depthwise (MobileNetV3) and grouped (RegNetY) convolutions, nothing cut
  // or joined along the channels: blocked, every spatial convolution.
  for (const char* name : {"mobilenet_v3_small", "regnet_y_400mf"}) {
    SCOPED_TRACE(name);
    const auto feeds = one_image(zoo_path(name));
    const ConvCount n =
        count_convolutions(compile_and_run(zoo_path(name), nullptr, nullptr, &feeds));
    EXPECT_GE(n.spatial, 10u);
    EXPECT_EQ(n.blocked, block > 0 ? n.spatial : 0u);
  }
  // Concatenations of one image's channels that the blocked layout does in
  // place (GoogLeNet's), beside Winograd's 3x3 convolutions: blocked, where
  // this CPU has those (AVX-512), every spatial convolution, and no concat
  // step left.
  {
    const auto feeds = one_image(zoo_path("googlenet"));
    const std::vector<ReportLine> plan =
        compile_and_run(zoo_path("googlenet"), nullptr, nullptr, &feeds);
    const ConvCount n = count_convolutions(plan);
    EXPECT_GE(n.spatial, 10u);
    // Without AVX-512 the layout is oneDNN's choice, which with AVX2 is
    // blocked too (nChw8c), the Concats then in place as well.
    const bool blocked = block == 16 || block == 8;
    EXPECT_EQ(n.blocked, blocked ? n.spatial : 0u);
    const auto concats = std::count_if(plan.begin(), plan.end(), [](const ReportLine& l) {
      return l.kind == "concat" || l.kind == "copy_concat";
    });
    EXPECT_EQ(concats, blocked ? 0 : 9);
  }
  // Where the plan leaves the layout to oneDNN ("channels-last" below), its
  // choice is channels-last with AVX-512 and blocked (nChw8c) with AVX2.
  const size_t left_blocked = block == 8;
  // Splits and shuffles (ShuffleNetV2): channels-last.
  for (const char* name : {"shufflenet_v2_x0_5"}) {
    SCOPED_TRACE(name);
    const auto feeds = one_image(zoo_path(name));
    const ConvCount n =
        count_convolutions(compile_and_run(zoo_path(name), nullptr, nullptr, &feeds));
    EXPECT_GE(n.spatial, 10u);
    EXPECT_EQ(n.blocked, left_blocked * n.spatial);
  }
  // Plain convolutions on one image (ResNet-18): blocked, its 3x3 ones of
  // stride 1 by Winograd, where this CPU has oneDNN's Winograd kernels
  // (AVX-512); channels-last without them, or with Winograd turned off.
  {
    const auto feeds = one_image(zoo_path("resnet18"));
    const ConvCount n =
        count_convolutions(compile_and_run(zoo_path("resnet18"), nullptr, nullptr, &feeds));
    EXPECT_GE(n.spatial, 10u);
    EXPECT_EQ(n.blocked, block == 16 || left_blocked ? n.spatial : 0u);
    EXPECT_EQ(n.winograd, block == 16 ? 13u : 0u);  // 16 3x3, 3 of them of stride 2
    const Configured no_winograd("winograd", "off");
    const ConvCount off =
        count_convolutions(compile_and_run(zoo_path("resnet18"), nullptr, nullptr, &feeds));
    EXPECT_EQ(off.blocked, left_blocked * off.spatial);
    EXPECT_EQ(off.winograd, 0u);
  }
  // The same plain convolutions on a batch of 3: blocked.
  const ConvCount batch = count_convolutions(compile_and_run(zoo_path("resnet18")));
  EXPECT_EQ(batch.blocked, block > 0 ? batch.spatial : 0u);
  EXPECT_EQ(batch.winograd, block == 16 ? 13u : 0u);
}

// The model at `path` has one output, `got`, within 1e-4 of CpuRef's largest.
void expect_one_output_as_cpuref(const std::string& path, const std::vector<Tensor>& got) {
  auto ref = runtime()->load_model(path, e2e::cpuref_only());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const std::vector<Tensor> want = e2e::run_once(**ref, inputs_for(**ref));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(want.size(), 1u);
  EXPECT_LE(e2e::max_abs_diff(got[0], want[0]), 1e-4 * e2e::max_abs(want[0]) + 1e-6);
}

// A face detector as tf2onnx writes MediaPipe's TFLite BlazeFace: an NHWC
// image transposed in the graph, a 5x5 stem, blocks of a 5x5 depthwise and a
// 1x1 convolution whose residual is the block's input with its channels
// padded by a Concat of zeros, and the map transposed back and flattened at
// the end. Those Concats and Transposes cost the same in either layout, so
// they do not keep the depthwise network off the blocked one (in the
// channels-last plan its 1x1 convolutions, with the residual as a sum, run
// plain on oneDNN's gemm-based kernel, three times slower at 128x128); and
// zeros appended within the last channel block cost nothing there.
TEST(OneDnnLayout, PaddedChannelsAndEdgeTransposesStayBlocked) {
  ASSERT_TRUE(runtime());
  ModelBuilder b;
  b.input("x", {1, 64, 64, 3});
  set_ints(b.node("Transpose", {"x"}, {"nchw"}), "perm", {0, 3, 1, 2});
  b.random_weight("stem_w", {24, 3, 5, 5}, -0.2f, 0.2f);
  auto& stem = b.node("Conv", {"nchw", "stem_w"}, {"stem"});
  set_ints(stem, "pads", {2, 2, 2, 2});
  b.node("Relu", {"stem"}, {"h0"});
  std::string at = "h0";
  int64_t c = 24;
  for (int i = 0; i < 4; ++i) {
    const std::string p = "b" + std::to_string(i) + "_";
    const int64_t out = c + 4 + 2 * i;
    b.random_weight(p + "dw", {c, 1, 5, 5}, -0.2f, 0.2f);
    auto& dw = b.node("Conv", {at, p + "dw"}, {p + "d"});
    set_int(dw, "group", c);
    set_ints(dw, "pads", {2, 2, 2, 2});
    b.random_weight(p + "pw", {out, c, 1, 1}, -0.2f, 0.2f);
    b.node("Conv", {p + "d", p + "pw"}, {p + "c"});
    b.weight(p + "zeros", {1, out - c, 64, 64}, 0.f);
    set_int(b.node("Concat", {at, p + "zeros"}, {p + "pad"}), "axis", 1);
    b.node("Add", {p + "c", p + "pad"}, {p + "sum"});
    b.node("Relu", {p + "sum"}, {p + "h"});
    at = p + "h";
    c = out;
  }
  set_ints(b.node("Transpose", {at}, {"nhwc"}), "perm", {0, 2, 3, 1});
  b.init_i64("flat", {3}, {1, -1, 2});
  b.node("Reshape", {"nhwc", "flat"}, {"y"});
  b.output("y");
  test::TempDir dir;
  const std::string path = b.save(dir);
  const int block = cpu_block();
  std::vector<Tensor> got;
  const std::vector<ReportLine> plan = compile_and_run(path, nullptr, &got);
  const ConvCount n = count_convolutions(plan);
  EXPECT_EQ(n.spatial, 9u);
  EXPECT_EQ(n.blocked, block > 0 ? n.spatial : 0u);
  // Zeros appended where the last channel block has room for them are that
  // block's padding, no copy (24 -> 28 and 34 -> 42 in blocks of 16); the
  // others are copied.
  const auto concats = std::count_if(plan.begin(), plan.end(), [](const ReportLine& l) {
    return l.kind == "concat" || l.kind == "copy_concat";
  });
  EXPECT_EQ(concats, block == 16 ? 2 : 4);
  expect_one_output_as_cpuref(path, got);
}

// The zeros a Concat appends within the last channel block are read as that
// block's padding, so whatever wrote the tensor must have left its padding
// 0: a Sigmoid (0.5 at 0) fused into the convolution, an Add of a constant
// (a binary over the blocked layout), an Exp. The next convolution reads
// the appended channels; CpuRef's result, and no concat step.
TEST(OneDnnLayout, AppendedZeroChannelsAreTheBlockPadding) {
  ASSERT_TRUE(runtime());
  if (cpu_block() != 16) GTEST_SKIP() << "blocks of 16 (AVX-512) only";
  const Configured blocked("layout", "blocked");
  for (const char* kind : {"Sigmoid", "AddConstant", "Exp"}) {
    SCOPED_TRACE(kind);
    ModelBuilder b;
    b.input("x", {1, 8, 10, 10}).random_weight("w0", {24, 8, 1, 1}, -0.3f, 0.3f);
    b.node("Conv", {"x", "w0"}, {"c0"});
    if (std::string(kind) == "AddConstant") {
      b.random_weight("k", {1, 24, 1, 1}, 1.f, 2.f);
      b.node("Relu", {"c0"}, {"r"});
      b.node("Add", {"r", "k"}, {"a"});
    } else {
      b.node(kind, {"c0"}, {"a"});
    }
    b.weight("zeros", {1, 4, 10, 10}, 0.f);
    set_int(b.node("Concat", {"a", "zeros"}, {"p"}), "axis", 1);
    b.random_weight("w1", {16, 28, 1, 1}, -0.3f, 0.3f);
    b.node("Conv", {"p", "w1"}, {"y"});
    b.output("y");
    test::TempDir dir;
    const std::string path = b.save(dir);
    std::vector<Tensor> got;
    const std::vector<ReportLine> plan = compile_and_run(path, nullptr, &got);
    for (const ReportLine& l : plan) EXPECT_NE(l.kind, "concat") << l.what;
    expect_one_output_as_cpuref(path, got);
  }
}

// Depthwise blocks (1x1 expand, 3x3 depthwise, 1x1 project), with `plain`
// 3x3 convolutions of 32 channels and a SiLU before them (EfficientNetV2's
// fused-MBConv stages): 2 of them are 66% of the multiply-adds.
ModelBuilder depthwise_net(int plain) {
  ModelBuilder b;
  b.input("x", {1, 32, 28, 28});
  std::string at = "x";
  for (int i = 0; i < plain; ++i) {
    const std::string k = std::to_string(i);
    b.random_weight("wp" + k, {32, 32, 3, 3}, -0.1f, 0.1f);
    set_ints(b.node("Conv", {at, "wp" + k}, {"p" + k}), "pads", {1, 1, 1, 1});
    b.node("Sigmoid", {"p" + k}, {"ps" + k});
    b.node("Mul", {"p" + k, "ps" + k}, {"pr" + k});
    at = "pr" + k;
  }
  for (int i = 0; i < 2; ++i) {
    const std::string k = std::to_string(i);
    b.random_weight("we" + k, {64, 32, 1, 1}, -0.2f, 0.2f)
        .random_weight("wd" + k, {64, 1, 3, 3}, -0.3f, 0.3f)
        .random_weight("wo" + k, {32, 64, 1, 1}, -0.2f, 0.2f);
    b.node("Conv", {at, "we" + k}, {"e" + k});
    b.node("Relu", {"e" + k}, {"er" + k});
    auto& dw = b.node("Conv", {"er" + k, "wd" + k}, {"d" + k});
    set_int(dw, "group", 64);
    set_ints(dw, "pads", {1, 1, 1, 1});
    b.node("Relu", {"d" + k}, {"dr" + k});
    b.node("Conv", {"dr" + k, "wo" + k}, {"o" + k});
    b.node("Add", {at, "o" + k}, {"s" + k});
    at = "s" + k;
  }
  b.node("Identity", {at}, {"y"});
  b.output("y");
  return b;
}

// Plain 3x3 work beside depthwise blocks: channels-last by direct kernels
// (blocked would gain nothing), blocked where Winograd takes that work, the
// SiLU each one is fused with then a step of its own; and CpuRef's result.
TEST(OneDnnLayout, PlainSpatialWorkBesideDepthwise) {
  ASSERT_TRUE(runtime());
  const int block = cpu_block();
  for (const char* winograd : {"on", "off"}) {
    const Configured setting("winograd", winograd);
    for (int plain : {0, 2}) {
      SCOPED_TRACE("plain 3x3 convolutions: " + std::to_string(plain) + ", winograd " + winograd);
      test::TempDir dir;
      const ModelBuilder b = depthwise_net(plain);
      const std::string path = b.save(dir);
      std::vector<std::string> used;
      std::vector<Tensor> got;
      const ConvCount n = count_convolutions(compile_and_run(path, &used, &got));
      EXPECT_EQ(used, std::vector<std::string>{"CpuOneDnn"});
      EXPECT_EQ(n.spatial, 6u + plain);
      const bool by_winograd = plain > 0 && block == 16 && std::string(winograd) == "on";
      EXPECT_EQ(n.winograd, by_winograd ? 2u : 0u);
      // Where the plan leaves the layout to oneDNN, its choice with AVX2 is
      // blocked (nChw8c) as well.
      EXPECT_EQ(n.blocked,
                (plain == 0 && block > 0) || by_winograd || block == 8 ? n.spatial : 0u);
      auto ref = runtime()->load_model(path, e2e::cpuref_only());
      ASSERT_TRUE(ref.ok()) << ref.status().to_string();
      const std::vector<Tensor> want = e2e::run_once(**ref, inputs_for(**ref));
      ASSERT_EQ(got.size(), want.size());
      for (size_t k = 0; k < got.size(); ++k)
        EXPECT_LE(e2e::max_abs_diff(got[k], want[k]), 1e-4 * std::max(e2e::max_abs(want[k]), 1e-6));
    }
  }
}

// Either layout, forced, on models of every kind of convolution network:
// no reference kernel, and CpuRef's result within 1e-4 of its largest.
class OneDnnLayoutModels : public testing::TestWithParam<std::string> {};

TEST_P(OneDnnLayoutModels, EitherLayoutMatchesCpuRef) {
  ASSERT_TRUE(runtime());
  const std::string path = zoo_path(GetParam());
  ASSERT_TRUE(std::ifstream(path).good()) << path << " was not generated";
  auto ref = runtime()->load_model(path, e2e::cpuref_only());
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();
  const std::map<std::string, Tensor> feeds = inputs_for(**ref);
  const std::vector<Tensor> want = e2e::run_once(**ref, feeds);
  ASSERT_FALSE(want.empty());
  const int block = cpu_block();
  for (const char* layout : {"onednn", "blocked"}) {
    SCOPED_TRACE(std::string("layout ") + layout);
    const Configured setting("layout", layout);
    std::vector<Tensor> got;
    const std::vector<ReportLine> report = compile_and_run(path, nullptr, &got, &feeds);
    expect_no_reference(GetParam(), report);
    const ConvCount n = count_convolutions(report);
    EXPECT_GT(n.spatial, 0u);
    if (std::string(layout) == "onednn") {
      // oneDNN's own choice: channels-last with AVX-512, blocked (nChw8c)
      // for most convolutions with AVX2.
      if (block == 16) {
        EXPECT_EQ(n.blocked, 0u);
      }
    } else if (block > 0) {
      EXPECT_GT(n.blocked, n.spatial / 2);
    }
    ASSERT_EQ(got.size(), want.size());
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k].shape(), want[k].shape());
      if (got[k].dtype() != DType::kFloat32) continue;
      const double scale = e2e::max_abs(want[k]);
      EXPECT_LE(e2e::max_abs_diff(got[k], want[k]), 1e-4 * std::max(scale, 1e-6)) << "output " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, OneDnnLayoutModels,
                         testing::Values("mobilenet_v3_small", "regnet_y_400mf",
                                         "shufflenet_v2_x0_5", "densenet121", "googlenet",
                                         "resnet18", "convnext", "r3d_18"));

}  // namespace
}  // namespace backplane
