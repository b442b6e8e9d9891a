// gpuocl_models_test.cpp — GpuOcl (backends/gpuocl) on a real OpenCL device.
//
// GpuOcl and CpuOneDnn are found as every run finds them (this build's
// default backend folder); GpuOcl runs on OpenCL device 0, which the
// configure key `device` names (by default it would open no CPU-only driver
// such as PoCL, CI's device), with its program cache and POCL_CACHE_DIR
// inside the build tree (tests/gpuocl/CMakeLists.txt). For resnet18,
// mobilenet_v2 and the encoder from scripts/gen_models.py:
//  - whole on GpuOcl, matching PyTorch and CpuRef (the numerics policy);
//  - split GpuOcl + CpuOneDnn, the same;
//  - the copies the module performs per run equal the plan's copies, and the
//    host waits only on those copies (kernels are enqueued, not waited for);
//  - every device buffer is released once the session and the model end;
//  - concurrent sessions agree bit for bit;
//  - a compiled artifact's stored program loads without compiling OpenCL C,
//    and with a note in Model::notes() when it was made for another driver.
// And: a kernel build failure is a clear error (or a fallback), never a crash;
// without an OpenCL device the backend loads and claims nothing, saying why.
#include "gpuocl_counter.hpp"
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

namespace backplane::e2e {
namespace {


// A runtime with the default backends, GpuOcl on OpenCL device 0 with the
// build tree's program cache; `settings` adds or replaces GpuOcl's keys.
std::shared_ptr<Runtime> runtime(const std::map<std::string, std::string>& settings = {}) {
  RuntimeOptions o;
  o.log_level = LogLevel::kError;
  std::map<std::string, std::string>& gpuocl = o.backend_config["GpuOcl"];
  gpuocl = {{"device", "0"}, {"program_cache_dir", BACKPLANE_GPUOCL_TEST_CACHE}};
  for (const auto& [key, value] : settings) gpuocl[key] = value;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? rt.value() : nullptr;
}

struct ModelCase {
  const char* name;
  const char* input;
};
std::string case_name(const testing::TestParamInfo<ModelCase>& info) { return info.param.name; }
void PrintTo(const ModelCase& c, std::ostream* os) { *os << c.name; }

class GpuOclModels : public testing::TestWithParam<ModelCase> {};

// Copies per run that involve GpuOcl's device, as the plan lists them.
size_t planned_copies(const Model& m, bool to_device) {
  size_t n = 0;
  for (const CopyDescription& c : m.copies()) {
    if (c.once) continue;
    const std::string& side = to_device ? c.to : c.from;
    if (side.rfind("GpuOcl", 0) == 0) ++n;
  }
  return n;
}

// Runs `model` once on `input`, checking the copies and waits of that run.
Tensor run_counted(Model& model, const ModelCase& c, const Tensor& input) {
  auto session = model.create_session();
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  if (!session.ok()) return Tensor();
  EXPECT_TRUE((*session)->set_input(c.input, input).ok());
  const int64_t to0 = counter("copies_to_device"), from0 = counter("copies_from_device");
  const int64_t waits0 = counter("host_waits"), work0 = counter("kernels") + counter("gemms");
  Status s = (*session)->run();
  EXPECT_TRUE(s.ok()) << s.to_string();
  Tensor out = (*session)->output(0).clone();
  EXPECT_EQ(counter("copies_to_device") - to0, int64_t(planned_copies(model, true)))
      << model.describe_plan(PlanFormat::kText);
  const int64_t from = counter("copies_from_device") - from0;
  EXPECT_EQ(from, int64_t(planned_copies(model, false))) << model.describe_plan(PlanFormat::kText);
  // The host waited only where a value crossed to host memory.
  EXPECT_EQ(counter("host_waits") - waits0, from);
  EXPECT_GT(counter("kernels") + counter("gemms") - work0, 0);
  return out;
}

void expect_close(const Tensor& got, const std::string& name, const Tensor& ref) {
  ASSERT_GT(max_abs(ref), 0.0) << name;
  expect_matches(got, ref, name);
}

TEST_P(GpuOclModels, WholeOnGpuOclMatchesPyTorchAndCpuRef) {
  const ModelCase& c = GetParam();
  auto rt = runtime();
  ASSERT_TRUE(rt);
  const Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  const Tensor expected = read_npy(models_dir() + "/" + c.name + ".expected.npy");
  ASSERT_FALSE(input.empty());
  {
    ModelOptions mo;
    mo.backends = {"GpuOcl"};
    auto model = rt->load_model(model_path(c.name), mo);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"GpuOcl"});
    EXPECT_GT(counter("live_buffers"), 0);  // the weights, on the device
    const Tensor y = run_counted(**model, c, input);
    expect_close(y, "GpuOcl vs PyTorch", expected);
    auto ref = rt->load_model(model_path(c.name), cpuref_only());
    ASSERT_TRUE(ref.ok());
    expect_close(y, "GpuOcl vs CpuRef", run_once(**ref, {{c.input, input}})[0]);
  }
  // Model and sessions gone: every device buffer is released.
  EXPECT_EQ(counter("live_allocations"), 0);
  EXPECT_EQ(counter("live_buffers"), 0);
}

TEST_P(GpuOclModels, SplitWithCpuOneDnnMatchesPyTorch) {
  const ModelCase& c = GetParam();
  auto rt = runtime();
  ASSERT_TRUE(rt);
  const Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  const Tensor expected = read_npy(models_dir() + "/" + c.name + ".expected.npy");
  {
    ModelOptions whole;
    whole.backends = {"GpuOcl"};
    auto first = rt->load_model(model_path(c.name), whole);
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    const std::vector<std::string> nodes = (*first)->partitions().at(0).nodes;
    ASSERT_GT(nodes.size(), 6u);
    // Two stretches of nodes pinned to CpuOneDnn: GpuOcl, CpuOneDnn,
    // GpuOcl, CpuOneDnn, GpuOcl, with copies at every edge.
    ModelOptions split;
    split.backends = {"GpuOcl", "CpuOneDnn"};
    for (size_t at : {nodes.size() / 3, 2 * nodes.size() / 3})
      for (size_t k = at; k < at + 2; ++k) split.overrides[nodes[k]] = "CpuOneDnn";
    auto model = rt->load_model(model_path(c.name), split);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const std::vector<std::string> used = (*model)->backends_used();
    EXPECT_NE(std::find(used.begin(), used.end(), "GpuOcl"), used.end());
    EXPECT_NE(std::find(used.begin(), used.end(), "CpuOneDnn"), used.end());
    EXPECT_GE((*model)->partitions().size(), 3u) << (*model)->describe_plan(PlanFormat::kText);
    EXPECT_GT(planned_copies(**model, true), 0u);
    expect_close(run_counted(**model, c, input), "GpuOcl+CpuOneDnn vs PyTorch", expected);
  }
  EXPECT_EQ(counter("live_allocations"), 0);
  EXPECT_EQ(counter("live_buffers"), 0);
}

TEST_P(GpuOclModels, RepeatedAndConcurrentRunsAgree) {
  const ModelCase& c = GetParam();
  auto rt = runtime();
  ASSERT_TRUE(rt);
  const Tensor input = read_npy(models_dir() + "/" + c.name + ".input.npy");
  ModelOptions mo;
  mo.backends = {"GpuOcl"};
  auto model = rt->load_model(model_path(c.name), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const Tensor first = run_once(**model, {{c.input, input}})[0].clone();
  std::vector<Tensor> results(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      auto s = (*model)->create_session();
      if (!s.ok()) return;
      for (int i = 0; i < 2; ++i)
        if (!(*s)->set_input(c.input, input).ok() || !(*s)->run().ok()) return;
      results[t] = (*s)->output(0).clone();
    });
  for (auto& th : threads) th.join();
  for (const Tensor& r : results) {
    ASSERT_FALSE(r.empty());
    EXPECT_TRUE(bitwise_equal(r, first)) << "a concurrent run differs";
  }
}

// API 1.4 get_devices: the OpenCL devices, one of them selected.
TEST(GpuOclDevices, EnumeratedAndOneSelected) {
  auto rt = runtime();
  ASSERT_TRUE(rt);
  for (const BackendDescription& b : rt->backends()) {
    if (b.id != "GpuOcl") continue;
    EXPECT_GE(b.api_minor, 4u);  // get_devices is a 1.4 slot; a newer header keeps it
    ASSERT_FALSE(b.devices.empty());
    int selected = 0;
    for (const DeviceDescription& d : b.devices) {
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.memory_bytes, 0u) << d.name;
      EXPECT_GT(d.compute_units, 0u) << d.name;
      EXPECT_TRUE(d.kind == "gpu" || d.kind == "cpu" || d.kind == "accelerator") << d.kind;
      selected += d.selected ? 1 : 0;
    }
    EXPECT_EQ(selected, 1);
    return;
  }
  FAIL() << "GpuOcl is not registered";
}

INSTANTIATE_TEST_SUITE_P(E2E, GpuOclModels,
                         testing::Values(ModelCase{"resnet18", "input"},
                                         ModelCase{"mobilenet_v2", "input"},
                                         ModelCase{"transformer", "input_ids"}),
                         case_name);

// Device code in artifacts: `compile` stores GpuOcl's program binary (every
// kernel finalised by the driver, GEMMs included: no CLBlast); a fresh
// runtime on the same device loads it and runs without building any OpenCL
// C (its kernel cache off), with no note. One whose key differs (other build
// options; another driver, faked by the configure key driver_version)
// refuses the payload: the model notes why (Model::notes) and GpuOcl
// compiles the partition again from the portable graph, from source.
// (artifact_no_compile_test.sh checks the driver side: PoCL compiles nothing.)
TEST(GpuOclArtifact, StoredProgramLoadsWithoutCompilingAndRebuildsWithANoteWhenTheKeyDiffers) {
  auto keep = runtime();  // holds the module, so its counters run on
  ASSERT_TRUE(keep);
  test::TempDir tmp;
  const std::string bpk = tmp.file("resnet18.bpk");
  CompileOptions co;
  co.backends = {"GpuOcl"};
  auto report = keep->compile({{"resnet18", model_path("resnet18")}}, bpk, co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  const Tensor input = read_npy(models_dir() + "/resnet18.input.npy");
  const Tensor expected = read_npy(models_dir() + "/resnet18.expected.npy");

  struct Variant {
    const char* options;
    const char* driver;  // nullptr: the real one
    const char* noted;   // what the note names, or nullptr: no note
  };
  for (const Variant& v : {Variant{"", nullptr, nullptr},
                           Variant{"-cl-mad-enable", nullptr, "options '-cl-mad-enable'"},
                           Variant{"", "0.0-other", "driver 0.0-other"}}) {
    SCOPED_TRACE(std::string("build options '") + v.options + "', driver " +
                 (v.driver ? v.driver : "(real)"));
    std::map<std::string, std::string> settings = {{"build_options", v.options},
                                                   {"program_cache_dir", ""}};
    if (v.driver) settings["driver_version"] = v.driver;
    const bool same = v.noted == nullptr;
    const int64_t builds = counter("program_builds"), loads = counter("program_loads");
    const int64_t clblast = counter("clblast_gemms"), gemms = counter("gemms");
    auto fresh = runtime(settings);
    ASSERT_TRUE(fresh);
    const auto t0 = std::chrono::steady_clock::now();
    auto model = fresh->load_model(bpk);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"GpuOcl"});
    const std::vector<std::string>& notes = (*model)->notes();
    if (same) {
      EXPECT_TRUE(notes.empty()) << notes.front();
    } else {
      ASSERT_FALSE(notes.empty());
      EXPECT_TRUE(contains(notes.front(), "GpuOcl: the stored program was compiled for"))
          << notes.front();
      EXPECT_TRUE(contains(notes.front(), v.noted)) << notes.front();
    }
    std::printf("GpuOcl: resnet18.bpk loaded in %.1f ms (%s)\n", ms,
                same ? "stored program" : "recompiled from source, with a note");
    expect_close(run_once(**model, {{"input", input}})[0], "bpk vs PyTorch", expected);
    // Load and first run: a build from source only where the key differs.
    EXPECT_EQ(counter("program_builds") - builds, same ? 0 : 1);
    EXPECT_EQ(counter("program_loads") - loads, same ? 1 : 0);
    EXPECT_GT(counter("gemms") - gemms, 0);
    EXPECT_EQ(counter("clblast_gemms") - clblast, 0);
  }
}

// Resize (which the conformance command has no case of) against CpuRef, in
// each mode and coordinate transformation GpuOcl claims, by scales and by
// sizes (opset 13).
TEST(GpuOclOps, ResizeMatchesCpuRef) {
  auto rt = runtime();
  ASSERT_TRUE(rt);
  test::TempDir tmp;
  std::vector<float> xs(1 * 2 * 5 * 7);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float((i * 37) % 23) / 7.0f - 1.5f;
  const Tensor x = Tensor::copy_of(DType::kFloat32, {1, 2, 5, 7}, xs.data());
  struct Variant {
    const char* mode;
    const char* ctm;
    bool by_sizes;
  };
  int k = 0;
  for (const Variant& v :
       {Variant{"nearest", "asymmetric", false}, Variant{"linear", "half_pixel", false},
        Variant{"linear", "pytorch_half_pixel", false}, Variant{"linear", "align_corners", true},
        Variant{"linear", "asymmetric", true}}) {
    SCOPED_TRACE(std::string(v.mode) + " " + v.ctm);
    test::ModelBuilder b(13);
    b.input("x", {1, 2, 5, 7});
    b.init_f32("roi", {0}, {});
    if (v.by_sizes) {
      b.init_i64("sizes", {4}, {1, 2, 8, 11});
      b.node("Resize", {"x", "roi", "", "sizes"}, {"y"}, "resize");
    } else {
      b.init_f32("scales", {4}, {1.f, 1.f, 2.f, 1.5f});
      b.node("Resize", {"x", "roi", "scales"}, {"y"}, "resize");
    }
    onnx::NodeProto& n = *b.graph().mutable_node(0);
    test::set_string(n, "mode", v.mode);
    test::set_string(n, "coordinate_transformation_mode", v.ctm);
    if (std::string(v.mode) == "nearest") test::set_string(n, "nearest_mode", "floor");
    b.output("y");
    const std::string path = b.save(tmp, "resize" + std::to_string(k++) + ".onnx");
    ModelOptions mo;
    mo.backends = {"GpuOcl"};
    auto gpu = rt->load_model(path, mo);
    ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
    auto ref = rt->load_model(path, cpuref_only());
    ASSERT_TRUE(ref.ok());
    expect_close(run_once(**gpu, {{"x", x}})[0], "Resize", run_once(**ref, {{"x", x}})[0]);
  }
}

// Conv -> BatchNormalization -> Relu and depthwise Conv -> BatchNormalization
// -> Clip; with `lead_bn`, a BatchNormalization of its own before them (one
// per-channel affine kernel). Input x [1, 3, 9, 9], output y.
std::string conv_bn_model(const test::TempDir& tmp, const std::string& file, bool lead_bn) {
  test::ModelBuilder b(13);
  b.input("x", {1, 3, 9, 9});
  b.random_weight("w1", {4, 3, 3, 3});
  b.random_weight("w2", {4, 1, 3, 3});
  b.random_weight("bias2", {4});
  for (const char* bn : {"bn0", "bn1", "bn2"}) {
    const std::string p(bn);
    const int64_t c = p == "bn0" ? 3 : 4;
    b.random_weight(p + "_scale", {c}, 0.5f, 1.5f);
    b.random_weight(p + "_shift", {c});
    b.random_weight(p + "_mean", {c});
    b.random_weight(p + "_var", {c}, 0.5f, 2.0f);
  }
  b.init_f32("lo", {}, {0.0f});
  b.init_f32("hi", {}, {0.75f});
  if (lead_bn)
    b.node("BatchNormalization", {"x", "bn0_scale", "bn0_shift", "bn0_mean", "bn0_var"}, {"x0"},
           "bn0");
  test::set_ints(b.node("Conv", {lead_bn ? "x0" : "x", "w1"}, {"c1"}, "conv1"), "pads",
                 {1, 1, 1, 1});
  b.node("BatchNormalization", {"c1", "bn1_scale", "bn1_shift", "bn1_mean", "bn1_var"}, {"n1"},
         "bn1");
  b.node("Relu", {"n1"}, {"r1"}, "relu1");
  onnx::NodeProto& dw = b.node("Conv", {"r1", "w2", "bias2"}, {"c2"}, "conv2");
  test::set_int(dw, "group", 4);
  test::set_ints(dw, "strides", {2, 2});
  b.node("BatchNormalization", {"c2", "bn2_scale", "bn2_shift", "bn2_mean", "bn2_var"}, {"n2"},
         "bn2");
  b.node("Clip", {"n2", "lo", "hi"}, {"y"}, "clip2");
  b.output("y");
  return b.save(tmp, file);
}

Tensor conv_bn_input() {
  std::vector<float> xs(3 * 9 * 9);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float((i * 29) % 17) / 5.0f - 1.6f;
  return Tensor::copy_of(DType::kFloat32, {1, 3, 9, 9}, xs.data());
}

// Each BatchNormalization after a Conv folds into its Conv's weights and the
// activation into its epilogue, so a run enqueues 3 kernels of GpuOcl's
// (im2col and bias+activation for the first Conv, one direct convolution
// for the second) and 1 SGEMM; the result equals CpuRef's.
TEST(GpuOclOps, BatchNormAndActivationFoldIntoConv) {
  auto rt = runtime();
  ASSERT_TRUE(rt);
  test::TempDir tmp;
  const std::string path = conv_bn_model(tmp, "conv_bn_act.onnx", false);
  const Tensor x = conv_bn_input();
  ModelOptions mo;
  mo.backends = {"GpuOcl"};
  auto gpu = rt->load_model(path, mo);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  auto session = (*gpu)->create_session();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->set_input("x", x).ok());
  const int64_t kernels = counter("kernels"), gemms = counter("gemms");
  ASSERT_TRUE((*session)->run().ok());
  EXPECT_EQ(counter("kernels") - kernels, 3);
  EXPECT_EQ(counter("gemms") - gemms, 1);
  auto ref = rt->load_model(path, cpuref_only());
  ASSERT_TRUE(ref.ok());
  expect_close((*session)->output(0), "folded Conv", run_once(**ref, {{"x", x}})[0]);
}

// The weights GpuOcl derives (two Conv + BatchNormalization folds, weights
// and bias each, and one BatchNormalization's affine table: 5) are the
// artifact's named blobs: a load from the .bpk on the same device uploads
// them as stored and folds nothing; a load whose program key differs
// compiles from the portable graph and folds again. Both equal CpuRef.
TEST(GpuOclArtifact, DerivedWeightsAreNamedBlobsAndLoadWithoutFolding) {
  auto keep = runtime();  // holds the module, so its counters run on
  ASSERT_TRUE(keep);
  test::TempDir tmp;
  const std::string onnx = conv_bn_model(tmp, "bn_fold.onnx", true);
  const std::string bpk = tmp.file("bn_fold.bpk");
  const Tensor x = conv_bn_input();
  auto ref = keep->load_model(onnx, cpuref_only());
  ASSERT_TRUE(ref.ok());
  const Tensor expected = run_once(**ref, {{"x", x}})[0];

  int64_t computed = counter("derived_computed");
  CompileOptions co;
  co.backends = {"GpuOcl"};
  auto report = keep->compile({{"bn_fold", onnx}}, bpk, co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(counter("derived_computed") - computed, 5);

  for (const bool same : {true, false}) {
    SCOPED_TRACE(same ? "same device" : "another driver");
    std::map<std::string, std::string> settings = {{"program_cache_dir", ""}};
    if (!same) settings["driver_version"] = "0.0-other";
    computed = counter("derived_computed");
    const int64_t loaded = counter("derived_loaded");
    auto fresh = runtime(settings);
    ASSERT_TRUE(fresh);
    auto model = fresh->load_model(bpk);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"GpuOcl"});
    EXPECT_EQ((*model)->notes().empty(), same);
    EXPECT_EQ(counter("derived_loaded") - loaded, same ? 5 : 0);
    EXPECT_EQ(counter("derived_computed") - computed, same ? 0 : 5);
    expect_close(run_once(**model, {{"x", x}})[0], "bpk vs CpuRef", expected);
  }
}

// The typed kernels in one graph, all on GpuOcl and equal to CpuRef:
// float16 (stored as half, computed in float: no cl_khr_fp16 needed) through
// Cast, Mul, Sigmoid and a broadcast Add; int64 through Cast, Sub and Div;
// bool through Less, Not, And and Where.
TEST(GpuOclOps, IntegerBoolAndFloat16ElementWiseMatchCpuRef) {
  auto rt = runtime();
  ASSERT_TRUE(rt);
  test::TempDir tmp;
  test::ModelBuilder b(13);
  b.input("x", {2, 3, 4});
  b.input("z", {4});
  auto cast = [&](const std::string& in, const std::string& out, int64_t to) {
    test::set_int(b.node("Cast", {in}, {out}, "cast_" + out), "to", to);
  };
  cast("x", "xh", onnx::TensorProto::FLOAT16);
  cast("z", "zh", onnx::TensorProto::FLOAT16);
  b.node("Mul", {"xh", "xh"}, {"sq"}, "mul_h");
  b.node("Sigmoid", {"sq"}, {"sg"}, "sigmoid_h");
  b.node("Add", {"sg", "zh"}, {"sum_h"}, "add_h");
  cast("sum_h", "y_half", onnx::TensorProto::FLOAT);
  b.init_f32("ten", {}, {10.0f});
  b.node("Mul", {"x", "ten"}, {"x10"}, "scale");
  cast("x10", "xi", onnx::TensorProto::INT64);
  cast("z", "zi", onnx::TensorProto::INT64);
  b.node("Sub", {"xi", "zi"}, {"d"}, "sub_i");
  b.init_i64("three", {}, {-3});
  b.node("Div", {"d", "three"}, {"q"}, "div_i");
  cast("q", "y_int", onnx::TensorProto::FLOAT);
  b.node("Less", {"x", "z"}, {"lt"}, "less");
  b.node("Not", {"lt"}, {"ge"}, "not");
  b.node("Greater", {"x", "ten"}, {"big"}, "greater");
  b.node("Not", {"big"}, {"small"}, "not2");
  b.node("And", {"ge", "small"}, {"both"}, "and");
  b.node("Where", {"both", "x", "z"}, {"y_bool"}, "where");
  b.output("y_half");
  b.output("y_int");
  b.output("y_bool");
  const std::string path = b.save(tmp, "typed.onnx");
  std::vector<float> xs(24), zs = {-0.5f, 0.25f, 1.5f, -2.0f};
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float((i * 7) % 11) / 3.0f - 1.7f;
  const Tensor x = Tensor::copy_of(DType::kFloat32, {2, 3, 4}, xs.data());
  const Tensor z = Tensor::copy_of(DType::kFloat32, {4}, zs.data());
  ModelOptions mo;
  mo.backends = {"GpuOcl"};
  auto gpu = rt->load_model(path, mo);
  ASSERT_TRUE(gpu.ok()) << gpu.status().to_string();
  EXPECT_EQ((*gpu)->backends_used(), std::vector<std::string>{"GpuOcl"})
      << (*gpu)->describe_plan(PlanFormat::kText);
  auto ref = rt->load_model(path, cpuref_only());
  ASSERT_TRUE(ref.ok());
  const std::vector<Tensor> got = run_once(**gpu, {{"x", x}, {"z", z}});
  const std::vector<Tensor> want = run_once(**ref, {{"x", x}, {"z", z}});
  ASSERT_EQ(got.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("output " + std::to_string(i));
    EXPECT_TRUE(bitwise_equal(got[i], want[i]));
  }
}

// gemm=clblast: GEMM-shaped work through CLBlast, the same result as
// GpuOcl's own gemm_* kernels.
TEST(GpuOclOps, ClblastGemmOptionMatches) {
  const Tensor input = read_npy(models_dir() + "/transformer.input.npy");
  const Tensor expected = read_npy(models_dir() + "/transformer.expected.npy");
  auto rt = runtime({{"gemm", "clblast"}});
  ASSERT_TRUE(rt);
  ModelOptions mo;
  mo.backends = {"GpuOcl"};
  auto model = rt->load_model(model_path("transformer"), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t clblast = counter("clblast_gemms");
  expect_close(run_once(**model, {{"input_ids", input}})[0], "CLBlast GEMMs vs PyTorch", expected);
  EXPECT_GT(counter("clblast_gemms") - clblast, 0);
}

// An OpenCL C option the driver refuses: building the kernels fails. With a
// fallback the model runs elsewhere; with GpuOcl alone loading fails, naming
// the node. Never a crash.
TEST(GpuOclErrors, KernelBuildFailureIsAClearErrorOrAFallback) {
  auto rt = runtime({{"build_options", "-cl-no-such-option"}, {"program_cache_dir", ""}});
  ASSERT_TRUE(rt);
  const Tensor input = read_npy(models_dir() + "/transformer.input.npy");
  ModelOptions only;
  only.backends = {"GpuOcl"};
  auto failed = rt->load_model(model_path("transformer"), only);
  ASSERT_FALSE(failed.ok());
  // The runtime names the node and that GpuOcl failed to compile it (the
  // driver's build log goes to the log).
  EXPECT_TRUE(contains(failed.status().message(), "GpuOcl: failed to compile it"))
      << failed.status().to_string();
  ModelOptions fallback;
  fallback.backends = {"GpuOcl", "CpuRef"};
  auto model = rt->load_model(model_path("transformer"), fallback);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
  const Tensor y = run_once(**model, {{"input_ids", input}})[0];
  expect_close(y, "fallback vs PyTorch", read_npy(models_dir() + "/transformer.expected.npy"));
}

// A device memory budget (max_memory) standing in for a full device. Below
// resnet18's weights: compile reports every node rejected, so the model falls
// back to CpuRef (or, on GpuOcl alone, fails to load naming the node). Enough
// for the weights but not the session's buffers: making the session (or its
// first run) fails with the reason. Either way nothing leaks.
TEST(GpuOclErrors, OutOfDeviceMemoryFallsBackOrFailsCleanly) {
  auto keep = runtime();  // holds the module, so its counters run on
  ASSERT_TRUE(keep);
  const Tensor input = read_npy(models_dir() + "/resnet18.input.npy");
  const Tensor expected = read_npy(models_dir() + "/resnet18.expected.npy");
  ModelOptions only;
  only.backends = {"GpuOcl"};
  int64_t weights = 0;
  {
    auto model = keep->load_model(model_path("resnet18"), only);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    weights = counter("device_bytes");
  }
  ASSERT_GT(weights, 40'000'000);
  ASSERT_EQ(counter("device_bytes"), 0);

  {
    auto rt = runtime({{"max_memory", "1000000"}});
    ASSERT_TRUE(rt);
    auto failed = rt->load_model(model_path("resnet18"), only);
    ASSERT_FALSE(failed.ok());
    EXPECT_TRUE(contains(failed.status().message(), "GpuOcl: failed to compile it"))
        << failed.status().to_string();
    ModelOptions fallback;
    fallback.backends = {"GpuOcl", "CpuRef"};
    auto model = rt->load_model(model_path("resnet18"), fallback);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
    expect_close(run_once(**model, {{"input", input}})[0], "fallback vs PyTorch", expected);
  }
  {
    auto rt = runtime({{"max_memory", std::to_string(weights + 4096)}});
    ASSERT_TRUE(rt);
    auto model = rt->load_model(model_path("resnet18"), only);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    // A model of fixed shapes allocates when its session is made; the first
    // run would otherwise.
    auto session = (*model)->create_session();
    Status s = session.status();
    if (session.ok()) {
      ASSERT_TRUE((*session)->set_input("input", input).ok());
      s = (*session)->run();
    }
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(contains(s.message(), "out of device memory")) << s.to_string();
  }
  EXPECT_EQ(counter("live_allocations"), 0);
  EXPECT_EQ(counter("live_buffers"), 0);
  EXPECT_EQ(counter("device_bytes"), 0);
}

// Run with OCL_ICD_VENDORS naming an empty folder (its own ctest entry).
TEST(GpuOclNoDevice, LoadsClaimsNothingAndSaysWhy) {
  RuntimeOptions o;
  o.log_level = LogLevel::kError;
  auto created = Runtime::create(o);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  std::shared_ptr<Runtime> rt = *created;
  bool found = false;
  for (const auto& b : rt->backends())
    if (b.id == "GpuOcl") {
      found = true;
      EXPECT_TRUE(contains(b.description, "claiming no node: no OpenCL driver (no vendor file in"))
          << b.description;
      EXPECT_TRUE(b.devices.empty());
    }
  ASSERT_TRUE(found) << "GpuOcl did not load without a device";
  ModelOptions mo;
  mo.backends = {"GpuOcl", "CpuRef"};
  auto model = rt->load_model(model_path("resnet18"), mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
  const std::string plan = (*model)->describe_plan(PlanFormat::kText);
  EXPECT_TRUE(contains(plan, "GpuOcl: no OpenCL driver")) << plan;
}

}  // namespace
}  // namespace backplane::e2e
