// CpuOneDnn never runs a oneDNN reference kernel (issue 14).
//
// The backend writes every primitive of every plan it compiles (and of every
// shape-polymorphic instance it lowers) to BACKPLANE_ONEDNN_PLAN_REPORT, one
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
//     (scripts/gen_zoo.py) is a reference implementation.
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
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

// The report file, set before the runtime (and so the plugin) exists.
const std::string& report_path() {
  static const std::string path = [] {
    static test::TempDir dir;
    std::string p = dir.path() + "/plan_report.tsv";
    setenv("BACKPLANE_ONEDNN_PLAN_REPORT", p.c_str(), 1);
    return p;
  }();
  return path;
}

std::shared_ptr<Runtime> runtime() {
  (void)report_path();
  static std::shared_ptr<Runtime> rt = e2e::onednn_runtime(1);
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
// valid token id); open dims 3.
std::map<std::string, Tensor> inputs_for(const Model& model) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1.f);
  std::map<std::string, Tensor> feeds;
  for (const TensorInfo& info : model.inputs()) {
    Shape shape = info.shape;
    for (auto& d : shape)
      if (d < 0) d = 3;
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

}  // namespace
}  // namespace backplane
