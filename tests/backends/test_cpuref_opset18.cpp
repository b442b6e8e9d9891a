// Unit tests of CpuRef's kernels for what opset 18 added or changed: Bitwise*,
// Mish, GroupNormalization, CenterCropPad, Col2Im (kernels_opset18.cpp) and
// Resize-18's axes / antialias / keep_aspect_ratio_policy, the reductions'
// axes input, Split's num_outputs and Pad's axes at opset 18. Expected values
// are computed by hand or by a reference loop written here.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

using namespace backplane;
using namespace backplane::cpuref;
using namespace backplane::cpuref::test_harness;

TEST(CpuRefOpset18, BitwiseBinaryBroadcasts) {
  const std::vector<uint8_t> a = {0xF0, 0x0F, 0xAA, 0x55, 0xFF, 0x00};
  const std::vector<uint8_t> b = {0x3C, 0xC3};
  struct Case {
    const char* op;
    uint8_t (*f)(uint8_t, uint8_t);
  };
  const Case cases[] = {{"BitwiseAnd", [](uint8_t x, uint8_t y) -> uint8_t { return x & y; }},
                        {"BitwiseOr", [](uint8_t x, uint8_t y) -> uint8_t { return x | y; }},
                        {"BitwiseXor", [](uint8_t x, uint8_t y) -> uint8_t { return x ^ y; }}};
  for (const Case& c : cases) {
    OpTest t(c.op, 18, {u8({3, 2}, a), u8({2}, b)}, {{BP_DTYPE_UINT8, {3, 2}}});
    const std::vector<uint8_t> got = t.run_as<uint8_t>();
    ASSERT_EQ(got.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(got[i], c.f(a[i], b[i % 2])) << c.op << " at " << i;
  }
}

TEST(CpuRefOpset18, BitwiseOnSignedAndWideTypes) {
  OpTest x("BitwiseXor", 18, {i64({2, 1}, {-1, 0x1234}), i64({1, 2}, {0x0F, INT64_MIN})},
           {{BP_DTYPE_INT64, {2, 2}}});
  EXPECT_EQ(x.run_as<int64_t>(),
            (std::vector<int64_t>{-1 ^ 0x0F, -1 ^ INT64_MIN, 0x1234 ^ 0x0F, 0x1234 ^ INT64_MIN}));
  OpTest n("BitwiseNot", 18, {tensor<uint16_t>(BP_DTYPE_UINT16, {3}, {0, 1, 0xFF00})},
           {{BP_DTYPE_UINT16, {3}}});
  EXPECT_EQ(n.run_as<uint16_t>(), (std::vector<uint16_t>{0xFFFF, 0xFFFE, 0x00FF}));
  OpTest f("BitwiseAnd", 18, {f32({2}, {1, 2}), f32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2}}});
  expect_error(f, BP_STATUS_UNSUPPORTED, "float32");
}

TEST(CpuRefOpset18, Mish) {
  const std::vector<float> x = {-40, -3, -0.5f, 0, 0.75f, 5, 50};
  OpTest t("Mish", 18, {f32({7}, x)}, {{BP_DTYPE_FLOAT32, {7}}});
  std::vector<float> want;
  for (float v : x)
    want.push_back(static_cast<float>(v * std::tanh(std::log1p(std::exp(double{v})))));
  expect_floats(t.run_as<float>(), want, 1e-6f);
  OpTest h("Mish", 18, {f16({2}, {1.0f, -1.0f})}, {{BP_DTYPE_FLOAT16, {2}}});
  const std::vector<uint16_t> got = h.run_as<uint16_t>();
  EXPECT_NEAR(half_to_float(got[0]), 0.8651f, 1e-3f);
  EXPECT_NEAR(half_to_float(got[1]), -0.3034f, 1e-3f);
}

TEST(CpuRefOpset18, GroupNormalizationScalesPerGroup) {
  // N=1, C=4, 2 groups of 2 channels x 2 positions.
  const std::vector<float> x = {1, 2, 3, 4, 10, 20, 30, 50};
  OpTest t("GroupNormalization", 18,
           {f32({1, 4, 2}, x), f32({2}, {2.0f, -1.0f}), f32({2}, {0.5f, 3.0f})},
           {{BP_DTYPE_FLOAT32, {1, 4, 2}}}, {attr_i("num_groups", 2), attr_f("epsilon", 0.0f)});
  std::vector<float> want;
  const float scale[2] = {2.0f, -1.0f}, bias[2] = {0.5f, 3.0f};
  for (int g = 0; g < 2; ++g) {
    double mean = 0, var = 0;
    for (int i = 0; i < 4; ++i) mean += x[g * 4 + i] / 4.0;
    for (int i = 0; i < 4; ++i) var += (x[g * 4 + i] - mean) * (x[g * 4 + i] - mean) / 4.0;
    for (int i = 0; i < 4; ++i)
      want.push_back(
          static_cast<float>((x[g * 4 + i] - mean) / std::sqrt(var) * scale[g] + bias[g]));
  }
  expect_floats(t.run_as<float>(), want, 1e-6f);
  OpTest bad("GroupNormalization", 18,
             {f32({1, 4, 2}, x), f32({4}, {1, 1, 1, 1}), f32({4}, {0, 0, 0, 0})},
             {{BP_DTYPE_FLOAT32, {1, 4, 2}}}, {attr_i("num_groups", 2)});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "scale and bias must have shape [2]");
}

TEST(CpuRefOpset18, CenterCropPadCropsAndPads) {
  // [3, 4] -> [1, 6]: rows cropped from offset 1, columns padded by 1 before.
  const std::vector<float> x = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  OpTest t("CenterCropPad", 18, {f32({3, 4}, x), i64({2}, {1, 6}, true)},
           {{BP_DTYPE_FLOAT32, {1, 6}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{0, 4, 5, 6, 7, 0}));
  // Only axis -1, int32 shape, of int64 data: [3, 4] -> [3, 2] from offset 1.
  OpTest a("CenterCropPad", 18,
           {i64({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), i32({1}, {2}, true)},
           {{BP_DTYPE_INT64, {3, 2}}}, {attr_ints("axes", {-1})});
  EXPECT_EQ(a.run_as<int64_t>(), (std::vector<int64_t>{1, 2, 5, 6, 9, 10}));
  OpTest dyn("CenterCropPad", 18, {f32({3, 4}, x), i64({2}, {1, 6})}, {{BP_DTYPE_FLOAT32, {1, 6}}});
  expect_error(dyn, BP_STATUS_UNSUPPORTED, "must be a constant");
}

TEST(CpuRefOpset18, Col2ImSumsOverlappingBlocks) {
  // One channel, image 3x3, blocks 2x2 at stride 1: 4 blocks; every column
  // entry is 1, so each pixel holds how many blocks cover it.
  std::vector<float> col(4 * 4, 1.0f);
  OpTest t("Col2Im", 18, {f32({1, 4, 4}, col), i64({2}, {3, 3}, true), i64({2}, {2, 2}, true)},
           {{BP_DTYPE_FLOAT32, {1, 1, 3, 3}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{1, 2, 1, 2, 4, 2, 1, 2, 1}));
  // Distinct values, stride 2 and padding 1 (1-D image of 4): blocks of 2 at
  // padded positions 0, 2, 4 -> image positions -1..0, 1..2, 3..4.
  OpTest p("Col2Im", 18,
           {f32({1, 2, 3}, {1, 2, 3, 10, 20, 30}), i64({1}, {4}, true), i64({1}, {2}, true)},
           {{BP_DTYPE_FLOAT32, {1, 1, 4}}}, {attr_ints("pads", {1, 1}), attr_ints("strides", {2})});
  // block positions: k=0 at 2l-1, k=1 at 2l: image[0]=10 (l0,k1), [1]=2 (l1,k0), [2]=20, [3]=3.
  EXPECT_EQ(p.run_as<float>(), (std::vector<float>{10, 2, 20, 3}));
  OpTest bad(
      "Col2Im", 18,
      {f32({1, 4, 5}, std::vector<float>(20, 1)), i64({2}, {3, 3}, true), i64({2}, {2, 2}, true)},
      {{BP_DTYPE_FLOAT32, {1, 1, 3, 3}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "does not match");
}

TEST(CpuRefOpset18, ResizeAntialiasLinearDownsampling) {
  // 4 -> 2 (scale 0.5), half_pixel: the linear filter is stretched to 4 taps,
  // weights 1/8, 3/8, 3/8, 1/8 around 0.5 and 2.5 (edge pixels repeated).
  OpTest t("Resize", 18, {f32({1, 4}, {0, 4, 8, 12}), absent(), f32({1}, {0.5f}, true)},
           {{BP_DTYPE_FLOAT32, {1, 2}}},
           {attr_s("mode", "linear"), attr_i("antialias", 1), attr_ints("axes", {1})});
  expect_floats(t.run_as<float>(), {2.5f, 9.5f}, 1e-6f);
  // Without antialias: plain linear interpolation at 0.5 and 2.5.
  OpTest plain("Resize", 18, {f32({1, 4}, {0, 4, 8, 12}), absent(), f32({1}, {0.5f}, true)},
               {{BP_DTYPE_FLOAT32, {1, 2}}}, {attr_s("mode", "linear"), attr_ints("axes", {1})});
  expect_floats(plain.run_as<float>(), {2.0f, 10.0f}, 1e-6f);
}

TEST(CpuRefOpset18, ResizeKeepAspectRatioUsesOneScale) {
  // sizes (2, 3) for [4, 4] with not_larger: scale min(0.5, 0.75) = 0.5 on
  // both axes, output [2, 2]; nearest at half_pixel picks rows/cols 1 and 3.
  std::vector<float> x(16);
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i);
  OpTest t("Resize", 18, {f32({4, 4}, x), absent(), absent(), i64({2}, {2, 3}, true)},
           {{BP_DTYPE_FLOAT32, {2, 2}}},
           {attr_s("keep_aspect_ratio_policy", "not_larger"), attr_s("nearest_mode", "floor")});
  // (o + 0.5) / 0.5 - 0.5 = 0.5, 2.5 -> floor 0, 2.
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{0, 2, 8, 10}));
}

TEST(CpuRefOpset18, ReduceWithAxesInputSplitNumOutputsPadAxes) {
  OpTest r("ReduceMean", 18, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {-1}, true)},
           {{BP_DTYPE_FLOAT32, {2, 1}}});
  expect_floats(r.run_as<float>(), {2, 5});
  OpTest m("ReduceMax", 18, {f32({2, 3}, {1, 7, 3, 4, 5, 6})}, {{BP_DTYPE_FLOAT32, {}}},
           {attr_i("keepdims", 0)});
  expect_floats(m.run_as<float>(), {7});
  // Split num_outputs=3 of 7: 3, 3, 1 (the kernel follows the output shapes).
  OpTest s("Split", 18, {f32({7}, iota_f(7))},
           {{BP_DTYPE_FLOAT32, {3}}, {BP_DTYPE_FLOAT32, {3}}, {BP_DTYPE_FLOAT32, {1}}},
           {attr_i("num_outputs", 3)});
  const auto outs = s.run();
  ASSERT_EQ(outs.size(), 3u);
  float last = 0;
  std::memcpy(&last, outs[2].data(), sizeof last);
  EXPECT_EQ(last, 6.0f);
  OpTest p(
      "Pad", 18,
      {f32({2, 2}, {1, 2, 3, 4}), i64({2}, {1, 0}, true), f32({}, {9}, true), i64({1}, {1}, true)},
      {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(p.run_as<float>(), (std::vector<float>{9, 1, 2, 9, 3, 4}));
}

}  // namespace
