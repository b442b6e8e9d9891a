// Unit tests of CpuRef's detection kernels (backends/reference/kernels_detection.cpp):
// NonMaxSuppression, RoiAlign, GridSample.
//
// Each test builds a one-node graph view (the harness's OpTest), makes the
// kernel through a registry holding this family's kernels, and compares with
// the ONNX node tests' values or with values worked out by hand (constant
// images, linear ramps, identity grids). NonMaxSuppression's output length
// depends on data, so it runs through run_dynamic with a test allocator.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace backplane;
using namespace backplane::cpuref;
using namespace backplane::cpuref::test_harness;

constexpr bp_dtype_t F32 = BP_DTYPE_FLOAT32;
constexpr bp_dtype_t I64 = BP_DTYPE_INT64;

const KernelRegistry& detection_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_detection_kernels(reg);
    return reg;
  }();
  return r;
}

std::unique_ptr<Kernel> make(const OpTest& t) {
  NodeInfo info = t.info();
  const KernelFactory* f = detection_registry().find(std::string(info.node.op_type()));
  if (f == nullptr) throw std::runtime_error("no kernel for " + std::string(info.node.op_type()));
  return (*f)(info);
}

std::vector<const void*> pointers(const std::vector<TensorSpec>& in) {
  std::vector<const void*> p;
  for (const TensorSpec& t : in) p.push_back(t.present ? t.bytes.data() : nullptr);
  return p;
}

// Runs a static kernel on `in` (twice: both runs must agree) and returns
// output 0 as floats.
std::vector<float> run_f32(const OpTest& t, const std::vector<TensorSpec>& in, int64_t n_out) {
  std::unique_ptr<Kernel> k = make(t);
  EXPECT_FALSE(k->has_dynamic_outputs());
  std::vector<float> first;
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<float> out(static_cast<size_t>(n_out), pass == 0 ? -777.0f : 777.0f);
    void* outs[] = {out.data()};
    std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
    k->run(pointers(in).data(), outs, scratch.data());
    if (pass == 0) first = out;
    else EXPECT_EQ(first, out);
  }
  return first;
}

// NonMaxSuppression's one output, as allocated by run_dynamic.
class Selected final : public OutputAllocator {
 public:
  void* allocate(size_t i, const Dims& dims) override {
    EXPECT_EQ(i, 0u);
    EXPECT_EQ(calls++, 0) << "allocated twice";
    EXPECT_EQ(dims.size(), 2u);
    shape = dims;
    data.assign(static_cast<size_t>(numel(dims)) + 1, -99);
    return data.data();
  }
  std::vector<int64_t> values() const { return std::vector<int64_t>(data.begin(), data.end() - 1); }
  Dims shape;
  std::vector<int64_t> data;
  int calls = 0;
};

Selected run_nms(const std::vector<TensorSpec>& in, std::vector<AttrSpec> attrs = {}) {
  OpTest t("NonMaxSuppression", 11, in, {{I64, {-1, 3}}}, std::move(attrs));
  std::unique_ptr<Kernel> k = make(t);
  EXPECT_TRUE(k->has_dynamic_outputs());
  Selected alloc;
  void* outs[] = {nullptr};
  std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
  k->run_dynamic(pointers(in).data(), outs, alloc, scratch.data());
  EXPECT_EQ(alloc.calls, 1);
  return alloc;
}

// The boxes of onnx's NonMaxSuppression tests: three overlapping near 0,
// two near 10, one at 100.
const std::vector<float> kBoxes{0, 0,  1, 1,  0, 0.1f,  1, 1.1f,  0, -0.1f, 1, 0.9f,
                                0, 10, 1, 11, 0, 10.1f, 1, 11.1f, 0, 100,   1, 101};
const std::vector<float> kScores{0.9f, 0.75f, 0.6f, 0.95f, 0.5f, 0.3f};

TEST(CpuRefDetection, RegistersEveryOpOfTheFamily) {
  for (const char* op : {"NonMaxSuppression", "RoiAlign", "MaxRoiPool", "GridSample"})
    EXPECT_NE(detection_registry().find(op), nullptr) << op;
}

// ------------------------------------------------------- NonMaxSuppression

TEST(CpuRefDetection, NmsSuppressesByIouAndScore) {
  Selected by_iou = run_nms({f32({1, 6, 4}, kBoxes), f32({1, 1, 6}, kScores), i64({1}, {3}),
                             f32({1}, {0.5f}), f32({1}, {0.0f})});
  EXPECT_EQ(by_iou.shape, (Dims{3, 3}));
  EXPECT_EQ(by_iou.values(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
  Selected by_score = run_nms({f32({1, 6, 4}, kBoxes), f32({1, 1, 6}, kScores), i64({1}, {3}),
                               f32({1}, {0.5f}), f32({1}, {0.4f})});
  EXPECT_EQ(by_score.values(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0}));
  Selected limited = run_nms({f32({1, 6, 4}, kBoxes), f32({1, 1, 6}, kScores), i64({1}, {2}),
                              f32({1}, {0.5f}), f32({1}, {0.0f})});
  EXPECT_EQ(limited.values(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0}));
}

TEST(CpuRefDetection, NmsCenterFormatFlippedCornersAndClasses) {
  const std::vector<float> centers{0.5f, 0.5f,  1, 1, 0.5f, 0.6f,  1, 1, 0.5f, 0.4f,   1, 1,
                                   0.5f, 10.5f, 1, 1, 0.5f, 10.6f, 1, 1, 0.5f, 100.5f, 1, 1};
  Selected c = run_nms({f32({1, 6, 4}, centers), f32({1, 1, 6}, kScores), i64({1}, {3}),
                        f32({1}, {0.5f}), f32({1}, {0.0f})},
                       {attr_i("center_point_box", 1)});
  EXPECT_EQ(c.values(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
  const std::vector<float> flipped{1, 1,  0, 0,  0, 0.1f,  1, 1.1f,  0, 0.9f, 1, -0.1f,
                                   0, 10, 1, 11, 1, 10.1f, 0, 11.1f, 1, 101,  0, 100};
  Selected f = run_nms({f32({1, 6, 4}, flipped), f32({1, 1, 6}, kScores), i64({1}, {3}),
                        f32({1}, {0.5f}), f32({1}, {0.0f})});
  EXPECT_EQ(f.values(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 0, 5}));
  // Two classes (the second prefers box 5), two batches: ordered by batch,
  // class, then selection.
  std::vector<float> boxes2 = kBoxes;
  boxes2.insert(boxes2.end(), kBoxes.begin(), kBoxes.end());
  std::vector<float> scores2 = kScores;
  scores2.insert(scores2.end(), {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.8f});
  scores2.insert(scores2.end(), kScores.begin(), kScores.end());
  scores2.insert(scores2.end(), {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.8f});
  Selected two = run_nms({f32({2, 6, 4}, boxes2), f32({2, 2, 6}, scores2), i64({1}, {2}),
                          f32({1}, {0.5f}), f32({1}, {0.2f})});
  EXPECT_EQ(two.shape, (Dims{6, 3}));
  EXPECT_EQ(two.values(), (std::vector<int64_t>{0, 0, 3, 0, 0, 0, 0, 1, 5,  //
                                                1, 0, 3, 1, 0, 0, 1, 1, 5}));
}

TEST(CpuRefDetection, NmsWithoutOptionalInputsSelectsNothing) {
  // max_output_boxes_per_class defaults to 0.
  Selected none = run_nms({f32({1, 6, 4}, kBoxes), f32({1, 1, 6}, kScores)});
  EXPECT_EQ(none.shape, (Dims{0, 3}));
  // Equal scores: the lower box index wins; identical boxes suppress each other.
  Selected same = run_nms({f32({1, 3, 4}, {0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1}),
                           f32({1, 1, 3}, {0.9f, 0.9f, 0.9f}), i64({1}, {3})});
  EXPECT_EQ(same.values(), (std::vector<int64_t>{0, 0, 0}));
}

TEST(CpuRefDetection, NmsRejectsABadIouThresholdAndSurvivesNaNBoxes) {
  try {
    run_nms({f32({1, 6, 4}, kBoxes), f32({1, 1, 6}, kScores), i64({1}, {3}), f32({1}, {1.5f})});
    ADD_FAILURE() << "iou_threshold 1.5 was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("iou_threshold"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Selected s = run_nms({f32({1, 2, 4}, {nan, 0, 1, 1, 0, 0, 1, 1}), f32({1, 1, 2}, {0.9f, 0.8f}),
                        i64({1}, {5}), f32({1}, {0.5f})});
  EXPECT_EQ(s.values(), (std::vector<int64_t>{0, 0, 0, 0, 0, 1}));  // NaN overlaps nothing
}

// ---------------------------------------------------------------- RoiAlign

// An 8x8 image whose value is the column index: averages over a bin are the
// mean x of its samples.
std::vector<float> ramp_x() {
  std::vector<float> v(64);
  for (int y = 0; y < 8; ++y)
    for (int x = 0; x < 8; ++x) v[y * 8 + x] = static_cast<float>(x);
  return v;
}

TEST(CpuRefDetection, RoiAlignHalfPixelVersusOutputHalfPixel) {
  const std::vector<TensorSpec> in{f32({1, 1, 8, 8}, ramp_x()), f32({1, 4}, {0, 0, 4, 4}),
                                   i64({1}, {0})};
  const std::vector<AttrSpec> attrs{attr_i("output_height", 2), attr_i("output_width", 2),
                                    attr_i("sampling_ratio", 2)};
  // Opset 16 default half_pixel: the region starts at -0.5; samples at x =
  // 0 (clamped from -0) and 1, then 2 and 3.
  OpTest v16("RoiAlign", 16, in, {{F32, {1, 1, 2, 2}}}, attrs);
  EXPECT_EQ(run_f32(v16, in, 4), (std::vector<float>{0.5f, 2.5f, 0.5f, 2.5f}));
  // Opset 10 (output_half_pixel): samples at 0.5, 1.5 and 2.5, 3.5.
  OpTest v10("RoiAlign", 10, in, {{F32, {1, 1, 2, 2}}}, attrs);
  EXPECT_EQ(run_f32(v10, in, 4), (std::vector<float>{1.0f, 3.0f, 1.0f, 3.0f}));
  // Max mode at integer sample points is the largest sample.
  std::vector<AttrSpec> max_attrs = attrs;
  max_attrs.push_back(attr_s("mode", "max"));
  OpTest mx("RoiAlign", 16, in, {{F32, {1, 1, 2, 2}}}, max_attrs);
  EXPECT_EQ(run_f32(mx, in, 4), (std::vector<float>{1.0f, 3.0f, 1.0f, 3.0f}));
}

TEST(CpuRefDetection, RoiAlignPicksTheBatchAndScalesTheRegion) {
  // Two images: constant 1 and constant 7; spatial_scale halves the region.
  std::vector<float> x(2 * 2 * 6 * 6, 1.0f);
  std::fill(x.begin() + 72, x.end(), 7.0f);
  const std::vector<TensorSpec> in{f32({2, 2, 6, 6}, x), f32({2, 4}, {0, 0, 8, 8, 2, 2, 10, 6}),
                                   i64({2}, {1, 0})};
  OpTest t("RoiAlign", 16, in, {{F32, {2, 2, 3, 3}}},
           {attr_i("output_height", 3), attr_i("output_width", 3), attr_f("spatial_scale", 0.5f)});
  std::vector<float> want(36, 7.0f);
  std::fill(want.begin() + 18, want.end(), 1.0f);
  expect_floats(run_f32(t, in, 36), want, 1e-6f);
}

TEST(CpuRefDetection, RoiAlignAveragesARampToEachBinsCentre) {
  // 40 channels (two blocks of 32), each a ramp along x: channel c holds
  // c + x / 64. Bilinear sampling of a ramp is exact, and a bin's samples
  // lie symmetrically about its centre, so each output is c + the bin's
  // centre x / 64. Sampling ratio 2 keeps a row's taps; 100 (10,000 samples per
  // bin) works them out as it goes.
  const int64_t c = 40, h = 64, w = 64;
  std::vector<float> x(static_cast<size_t>(c * h * w));
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < h * w; ++i) x[ch * h * w + i] = float(ch) + float(i % w) / 64.0f;
  for (int64_t ratio : {2, 100}) {
    const std::vector<TensorSpec> in{f32({1, c, h, w}, x),
                                     f32({2, 4}, {8, 8, 40, 40, 20, 4, 48, 60}), i64({2}, {0, 0})};
    OpTest t("RoiAlign", 16, in, {{F32, {2, c, 7, 7}}},
             {attr_i("output_height", 7), attr_i("output_width", 7),
              attr_i("sampling_ratio", ratio)});
    std::vector<float> want;
    for (const float x1 : {8.0f, 20.0f}) {
      const float x2 = x1 == 8.0f ? 40.0f : 48.0f;
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t ph = 0; ph < 7; ++ph)
          for (int64_t pw = 0; pw < 7; ++pw)
            want.push_back(float(ch) + ((x1 - 0.5f) + (pw + 0.5f) * (x2 - x1) / 7.0f) / 64.0f);
    }
    SCOPED_TRACE("sampling_ratio " + std::to_string(ratio));
    expect_floats(run_f32(t, in, want.size()), want, 2e-5f);
  }
}

TEST(CpuRefDetection, RoiAlignRejectsBadBatchIndicesAndCoordinates) {
  auto expect_run_error = [](const std::vector<TensorSpec>& in, const std::string& fragment) {
    OpTest t("RoiAlign", 16, in, {{F32, {1, 1, 1, 1}}});
    try {
      run_f32(t, in, 1);
      ADD_FAILURE() << "accepted: expected " << fragment;
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), BP_STATUS_INVALID_ARGUMENT);
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
    }
  };
  const std::vector<float> img(16, 1.0f);
  expect_run_error({f32({1, 1, 4, 4}, img), f32({1, 4}, {0, 0, 2, 2}), i64({1}, {1})},
                   "batch_indices[0] = 1 is out of range");
  expect_run_error({f32({1, 1, 4, 4}, img), f32({1, 4}, {0, 0, 2, 2}), i64({1}, {-1})},
                   "is out of range");
  expect_run_error({f32({1, 1, 4, 4}, img),
                    f32({1, 4}, {0, 0, std::numeric_limits<float>::infinity(), 2}), i64({1}, {0})},
                   "non-finite");
  expect_run_error({f32({1, 1, 4, 4}, img), f32({1, 4}, {0, 0, 3e30f, 3e30f}), i64({1}, {0})},
                   "too many samples");
}

// -------------------------------------------------------------- MaxRoiPool

TEST(CpuRefDetection, MaxRoiPoolTakesTheMaxOfIntegerBins) {
  // 4x4 image 0..15; roi (batch 0) x 0..3, y 0..1 -> 2 rows x 4 columns,
  // pooled to 1x2: columns {0,1} and {2,3} of rows {0,1}.
  const std::vector<TensorSpec> in{f32({1, 1, 4, 4}, iota_f(16)),
                                   f32({2, 5}, {0, 0, 0, 3, 1, 0, 2, 2, 2, 2})};
  OpTest t("MaxRoiPool", 1, in, {{F32, {2, 1, 1, 2}}}, {attr_ints("pooled_shape", {1, 2})});
  // Second roi: the single pixel (2, 2) = 10 fills both bins (bins of 0.5
  // round out to that pixel).
  EXPECT_EQ(run_f32(t, in, 4), (std::vector<float>{5, 7, 10, 10}));
  const std::vector<TensorSpec> bad{f32({1, 1, 4, 4}, iota_f(16)), f32({1, 5}, {1, 0, 0, 1, 1})};
  OpTest b("MaxRoiPool", 1, bad, {{F32, {1, 1, 1, 2}}}, {attr_ints("pooled_shape", {1, 2})});
  try {
    run_f32(b, bad, 2);
    ADD_FAILURE() << "batch index 1 of a batch of 1 was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("batch index"), std::string::npos) << e.what();
  }
}

// -------------------------------------------------------------- GridSample

// A grid that samples every pixel centre of an h x w image (align_corners=1).
std::vector<float> identity_grid(int h, int w) {
  std::vector<float> g;
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      g.push_back(w == 1 ? 0.0f : -1.0f + 2.0f * static_cast<float>(x) / static_cast<float>(w - 1));
      g.push_back(h == 1 ? 0.0f : -1.0f + 2.0f * static_cast<float>(y) / static_cast<float>(h - 1));
    }
  return g;
}

TEST(CpuRefDetection, GridSampleIdentityGridReturnsTheInputInEveryMode) {
  const std::vector<float> x = iota_f(12, 1.0f, 1.5f);
  for (const char* mode : {"bilinear", "nearest", "bicubic"}) {
    const std::vector<TensorSpec> in{f32({1, 1, 3, 4}, x), f32({1, 3, 4, 2}, identity_grid(3, 4))};
    OpTest t("GridSample", 16, in, {{F32, {1, 1, 3, 4}}},
             {attr_s("mode", mode), attr_i("align_corners", 1)});
    expect_floats(run_f32(t, in, 12), x, 1e-5f);
  }
}

TEST(CpuRefDetection, GridSamplePaddingModesMatchOnnx) {
  // onnx's test_gridsample_{zeros,border,reflection}_padding (= torch).
  const std::vector<float> x{0, 1, 2, 3, 4, 5};
  const std::vector<float> grid{-10, -10, -5,    -5,    -0.2f, -0.2f, 10, 10,
                                10,  10,  -0.2f, -0.2f, 5,     5,     10, 10};
  const std::vector<TensorSpec> in{f32({1, 1, 3, 2}, x), f32({1, 2, 4, 2}, grid)};
  auto run = [&](const char* pad) {
    OpTest t("GridSample", 16, in, {{F32, {1, 1, 2, 4}}}, {attr_s("padding_mode", pad)});
    return run_f32(t, in, 8);
  };
  expect_floats(run("zeros"), {0, 0, 1.7f, 0, 0, 1.7f, 0, 0}, 1e-5f);
  expect_floats(run("border"), {0, 0, 1.7f, 5, 5, 1.7f, 5, 5}, 1e-5f);
  expect_floats(run("reflection"), {2.5f, 0, 1.7f, 2.5f, 2.5f, 1.7f, 5, 2.5f}, 1e-5f);
}

TEST(CpuRefDetection, GridSampleBilinearBetweenPixelsAndNaNGrid) {
  // Halfway between the four pixels of a 2x2 image (align_corners=0: the
  // centre is (0, 0)); a NaN location samples nothing.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<TensorSpec> in{f32({1, 1, 2, 2}, {1, 2, 3, 4}),
                                   f32({1, 1, 3, 2}, {0, 0, nan, 0, 1e30f, -1e30f})};
  OpTest t("GridSample", 16, in, {{F32, {1, 1, 1, 3}}});
  expect_floats(run_f32(t, in, 3), {2.5f, 0, 0}, 1e-6f);
  OpTest border("GridSample", 16, in, {{F32, {1, 1, 1, 3}}}, {attr_s("padding_mode", "border")});
  // Far outside with border padding lands on the nearest corner (x max, y min).
  expect_floats(run_f32(border, in, 3), {2.5f, 0, 2}, 1e-6f);
}

}  // namespace
