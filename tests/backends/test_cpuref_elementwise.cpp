// Unit tests of CpuRef's elementwise kernels and shared helpers: each test
// builds a one-node graph view by hand, gets the factory from a registry, runs
// the kernel and compares with hand-computed values or a reference loop.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace backplane;
using namespace backplane::cpuref;
using namespace backplane::cpuref::test_harness;

// numpy broadcasting reference: the output shape (broadcast_offset, in the harness, gives
// the input offset of each output element).
Dims broadcast_shape(const Dims& a, const Dims& b) {
  Dims out(std::max(a.size(), b.size()));
  for (size_t j = 0; j < out.size(); ++j) {
    int64_t da = j < a.size() ? a[a.size() - 1 - j] : 1;
    int64_t db = j < b.size() ? b[b.size() - 1 - j] : 1;
    out[out.size() - 1 - j] = da == 1 ? db : da;
  }
  return out;
}

TensorSpec f64(Dims s, const std::vector<double>& v, bool c = false) {
  return tensor(BP_DTYPE_FLOAT64, s, v, c);
}

// ---------------------------------------------------------------------------
// Helpers from common.cpp
// ---------------------------------------------------------------------------

TEST(CpuRefCommon, DtypeHelpers) {
  EXPECT_EQ(dtype_bytes(BP_DTYPE_FLOAT32), 4u);
  EXPECT_EQ(dtype_bytes(BP_DTYPE_FLOAT16), 2u);
  EXPECT_EQ(dtype_bytes(BP_DTYPE_INT64), 8u);
  EXPECT_EQ(dtype_bytes(BP_DTYPE_BOOL), 1u);
  EXPECT_EQ(dtype_bytes(BP_DTYPE_UNDEFINED), 0u);
  EXPECT_STREQ(dtype_str(BP_DTYPE_INT32), "int32");
  EXPECT_STREQ(dtype_str(BP_DTYPE_FLOAT16), "float16");
  EXPECT_STREQ(dtype_str(BP_DTYPE_BOOL), "bool");
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({2, 3, 4}), 24);
  EXPECT_EQ(numel({2, 0, 4}), 0);
}

TEST(CpuRefCommon, NormalizeAxis) {
  OpTest t("Relu", 13, {f32({1}, {0})}, {{BP_DTYPE_FLOAT32, {1}}});
  NodeInfo info = t.info();
  EXPECT_EQ(normalize_axis(-1, 4, info), 3);
  EXPECT_EQ(normalize_axis(2, 4, info), 2);
  EXPECT_EQ(normalize_axis(-4, 4, info), 0);
  try {
    normalize_axis(4, 4, info);
    ADD_FAILURE() << "axis 4 of rank 4 accepted";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), BP_STATUS_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("'test_node' (Relu)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(normalize_axis(-5, 4, info), sdk::Error);
}

TEST(CpuRefCommon, HalfToFloatSpecialValues) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_TRUE(std::isinf(half_to_float(0x7C00)) && half_to_float(0x7C00) > 0);
  EXPECT_TRUE(std::isinf(half_to_float(0xFC00)) && half_to_float(0xFC00) < 0);
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
}

TEST(CpuRefCommon, FloatToHalfRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.2f, -11)), 0x3C01);      // above the tie
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // rounds to inf
  EXPECT_EQ(float_to_half(1e10f), 0x7C00);
  EXPECT_EQ(float_to_half(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie -> even zero
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 ulp -> 1
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 ulp tie -> 2
  EXPECT_EQ(float_to_half(std::ldexp(1023.0f, -24)), 0x03FF);
  EXPECT_EQ(float_to_half(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(1e-30f), 0x0000);
  const uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
}

TEST(CpuRefCommon, HalfRoundTripIsExactForEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = half_to_float(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    } else {
      ASSERT_EQ(float_to_half(f), h) << "half 0x" << std::hex << h;
    }
  }
}

// ---------------------------------------------------------------------------
// Binary arithmetic and broadcasting
// ---------------------------------------------------------------------------

TEST(CpuRefElementwise, AddSameShape) {
  OpTest t("Add", 14, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({2, 3}, {10, 20, 30, 40, 50, 60})},
           {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{11, 22, 33, 44, 55, 66}));
}

TEST(CpuRefElementwise, BroadcastMatchesReferenceLoop) {
  const std::vector<std::pair<Dims, Dims>> cases = {{{2, 3, 4}, {4}},
                                                    {{2, 3, 4}, {3, 1}},
                                                    {{2, 1, 4}, {3, 1}},
                                                    {{1}, {2, 3}},
                                                    {{}, {2, 2}},
                                                    {{2, 3, 1, 5}, {1, 3, 4, 1}},
                                                    {{4, 1}, {1, 5}},
                                                    {{2, 3, 4}, {2, 3, 4}},
                                                    {{1, 3, 1, 1}, {2, 3, 2, 2}},
                                                    {{0, 3}, {3}},
                                                    {{5}, {}},
                                                    {{2, 1, 3, 1, 2}, {1, 4, 1, 5, 1}}};
  for (const auto& [sa, sb] : cases) {
    const Dims so = broadcast_shape(sa, sb);
    const std::vector<float> a = iota_f(numel(sa), 1.0f, 1.0f), b = iota_f(numel(sb), 0.5f, 0.25f);
    for (const char* op : {"Sub", "Mul", "Div"}) {
      OpTest t(op, 14, {f32(sa, a), f32(sb, b)}, {{BP_DTYPE_FLOAT32, so}});
      const std::vector<float> got = t.run_as<float>();
      std::vector<float> want(static_cast<size_t>(numel(so)));
      for (int64_t i = 0; i < numel(so); ++i) {
        const float x = a[broadcast_offset(sa, so, i)], y = b[broadcast_offset(sb, so, i)];
        want[i] = op[0] == 'S' ? x - y : op[0] == 'M' ? x * y : x / y;
      }
      SCOPED_TRACE(std::string(op) + " case " + std::to_string(sa.size()) + "x" +
                   std::to_string(sb.size()));
      expect_floats(got, want);
    }
  }
}

TEST(CpuRefElementwise, IntegerDivisionTruncatesLikeC) {
  OpTest t("Div", 14, {i32({4}, {-7, 7, -7, 7}), i32({4}, {2, -2, -2, 2})},
           {{BP_DTYPE_INT32, {4}}});
  EXPECT_EQ(t.run_as<int32_t>(), (std::vector<int32_t>{-3, -3, 3, 3}));
  OpTest t64("Div", 14, {i64({3}, {-9, 1000000000000, 5}), i64({}, {4})}, {{BP_DTYPE_INT64, {3}}});
  EXPECT_EQ(t64.run_as<int64_t>(), (std::vector<int64_t>{-2, 250000000000, 1}));
  // Division by zero does not trap; the result is defined as 0.
  OpTest z("Div", 14, {i32({2}, {5, -5}), i32({2}, {0, 0})}, {{BP_DTYPE_INT32, {2}}});
  EXPECT_EQ(z.run_as<int32_t>(), (std::vector<int32_t>{0, 0}));
}

TEST(CpuRefElementwise, IntegerArithmetic) {
  OpTest add("Add", 14, {i64({2, 2}, {1, 2, 3, 4}), i64({2}, {100, 200})},
             {{BP_DTYPE_INT64, {2, 2}}});
  EXPECT_EQ(add.run_as<int64_t>(), (std::vector<int64_t>{101, 202, 103, 204}));
  OpTest sub("Sub", 14, {i32({3}, {1, 2, 3}), i32({1}, {5})}, {{BP_DTYPE_INT32, {3}}});
  EXPECT_EQ(sub.run_as<int32_t>(), (std::vector<int32_t>{-4, -3, -2}));
  OpTest mul("Mul", 14, {i32({3}, {1, -2, 3}), i32({3}, {7, 7, -7})}, {{BP_DTYPE_INT32, {3}}});
  EXPECT_EQ(mul.run_as<int32_t>(), (std::vector<int32_t>{7, -14, -21}));
}

TEST(CpuRefElementwise, Float16Add) {
  OpTest t("Add", 14, {f16({3}, {1.5f, -2.0f, 1000.0f}), f16({1}, {0.25f})},
           {{BP_DTYPE_FLOAT16, {3}}});
  const std::vector<uint16_t> h = t.run_as<uint16_t>();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(half_to_float(h[0]), 1.75f);
  EXPECT_EQ(half_to_float(h[1]), -1.75f);
  EXPECT_EQ(half_to_float(h[2]), 1000.0f);  // 1000.25 rounds to 1000 in half
}

TEST(CpuRefElementwise, PowFloatAndIntegerExponents) {
  OpTest ff("Pow", 15, {f32({4}, {2, 9, -2, 4}), f32({4}, {3, 0.5f, 2, -0.5f})},
            {{BP_DTYPE_FLOAT32, {4}}});
  expect_floats(ff.run_as<float>(), {8, 3, 4, 0.5f});
  OpTest fi("Pow", 15, {f32({3}, {2, -3, 10}), i64({}, {3})}, {{BP_DTYPE_FLOAT32, {3}}});
  expect_floats(fi.run_as<float>(), {8, -27, 1000});
  OpTest ii("Pow", 15, {i32({4}, {2, -3, 5, 2}), i32({4}, {10, 3, 0, -1})},
            {{BP_DTYPE_INT32, {4}}});
  EXPECT_EQ(ii.run_as<int32_t>(), (std::vector<int32_t>{1024, -27, 1, 0}));
}

// ---------------------------------------------------------------------------
// Unary math and activations
// ---------------------------------------------------------------------------

struct UnaryCase {
  const char* op;
  std::vector<AttrSpec> attrs;
  double (*ref)(double);
};

TEST(CpuRefElementwise, UnaryOpsMatchReferenceFormulas) {
  const std::vector<float> x = {-6.0f, -3.5f, -1.0f, -0.25f, 0.0f,  0.3f,
                                1.0f,  2.5f,  7.0f,  90.0f,  -90.0f};
  const std::vector<UnaryCase> cases = {
      {"Neg", {}, [](double v) { return -v; }},
      {"Abs", {}, [](double v) { return std::fabs(v); }},
      {"Exp", {}, [](double v) { return std::exp(v); }},
      {"Relu", {}, [](double v) { return v > 0 ? v : 0.0; }},
      {"Tanh", {}, [](double v) { return std::tanh(v); }},
      {"Erf", {}, [](double v) { return std::erf(v); }},
      {"Sigmoid", {}, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"HardSigmoid", {}, [](double v) { return std::max(0.0, std::min(1.0, 0.2 * v + 0.5)); }},
      {"HardSwish", {}, [](double v) { return v * std::max(0.0, std::min(1.0, v / 6.0 + 0.5)); }},
      {"LeakyRelu", {}, [](double v) { return v >= 0 ? v : 0.01 * v; }},
      {"Gelu", {}, [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }},
      {"Softplus", {}, [](double v) { return std::log1p(std::exp(v)); }},
      {"Floor", {}, [](double v) { return std::floor(v); }},
  };
  for (const UnaryCase& c : cases) {
    OpTest t(c.op, 13, {f32({11}, x)}, {{BP_DTYPE_FLOAT32, {11}}}, c.attrs);
    std::vector<float> want;
    for (float v : x) want.push_back(static_cast<float>(c.ref(v)));
    SCOPED_TRACE(c.op);
    expect_floats(t.run_as<float>(), want, 2e-6f);
  }
}

TEST(CpuRefElementwise, UnaryOpsOnPositiveInputs) {
  const std::vector<float> x = {0.0f, 0.25f, 1.0f, 2.0f, 100.0f};
  OpTest s("Sqrt", 13, {f32({5}, x)}, {{BP_DTYPE_FLOAT32, {5}}});
  expect_floats(s.run_as<float>(), {0.0f, 0.5f, 1.0f, std::sqrt(2.0f), 10.0f});
  OpTest l("Log", 13, {f32({5}, x)}, {{BP_DTYPE_FLOAT32, {5}}});
  const std::vector<float> lg = l.run_as<float>();
  EXPECT_TRUE(std::isinf(lg[0]) && lg[0] < 0);
  expect_floats({lg[1], lg[2], lg[4]}, {std::log(0.25f), 0.0f, std::log(100.0f)});
  OpTest r("Reciprocal", 13, {f32({4}, {0.25f, 1.0f, -2.0f, 8.0f})}, {{BP_DTYPE_FLOAT32, {4}}});
  expect_floats(r.run_as<float>(), {4.0f, 1.0f, -0.5f, 0.125f});
}

TEST(CpuRefElementwise, ActivationAttributes) {
  OpTest lr("LeakyRelu", 16, {f32({3}, {-2, 0, 3})}, {{BP_DTYPE_FLOAT32, {3}}},
            {attr_f("alpha", 0.5f)});
  expect_floats(lr.run_as<float>(), {-1, 0, 3});
  OpTest hs("HardSigmoid", 6, {f32({4}, {-10, 0, 1, 10})}, {{BP_DTYPE_FLOAT32, {4}}},
            {attr_f("alpha", 0.25f), attr_f("beta", 0.25f)});
  expect_floats(hs.run_as<float>(), {0, 0.25f, 0.5f, 1});
  OpTest gt("Gelu", 20, {f32({3}, {-1, 0.5f, 2})}, {{BP_DTYPE_FLOAT32, {3}}},
            {attr_s("approximate", "tanh")});
  std::vector<float> want;
  for (double v : {-1.0, 0.5, 2.0})
    want.push_back(static_cast<float>(
        0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)))));
  expect_floats(gt.run_as<float>(), want, 1e-6f);
  OpTest bad("Gelu", 20, {f32({1}, {0})}, {{BP_DTYPE_FLOAT32, {1}}},
             {attr_s("approximate", "cubic")});
  expect_error(bad, BP_STATUS_UNSUPPORTED, "cubic");
}

TEST(CpuRefElementwise, SigmoidIsStableForLargeInputs) {
  OpTest t("Sigmoid", 13, {f32({3}, {-1000, 1000, 0})}, {{BP_DTYPE_FLOAT32, {3}}});
  const std::vector<float> y = t.run_as<float>();
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.5f);
}

TEST(CpuRefElementwise, IntegerUnary) {
  OpTest n("Neg", 13, {i32({3}, {5, -7, 0})}, {{BP_DTYPE_INT32, {3}}});
  EXPECT_EQ(n.run_as<int32_t>(), (std::vector<int32_t>{-5, 7, 0}));
  OpTest a("Abs", 13, {i64({3}, {-5, 7, -9000000000})}, {{BP_DTYPE_INT64, {3}}});
  EXPECT_EQ(a.run_as<int64_t>(), (std::vector<int64_t>{5, 7, 9000000000}));
  OpTest r("Relu", 14, {i32({3}, {-5, 7, 0})}, {{BP_DTYPE_INT32, {3}}});
  EXPECT_EQ(r.run_as<int32_t>(), (std::vector<int32_t>{0, 7, 0}));
}

TEST(CpuRefElementwise, Float16Unary) {
  OpTest t("Relu", 14, {f16({4}, {-1.5f, 0.5f, 3.0f, -0.0f})}, {{BP_DTYPE_FLOAT16, {4}}});
  const std::vector<uint16_t> h = t.run_as<uint16_t>();
  EXPECT_EQ(half_to_float(h[0]), 0.0f);
  EXPECT_EQ(half_to_float(h[1]), 0.5f);
  EXPECT_EQ(half_to_float(h[2]), 3.0f);
}

TEST(CpuRefElementwise, UnsupportedDtypeIsRejectedWithReason) {
  OpTest t("Sqrt", 13, {i32({2}, {4, 9})}, {{BP_DTYPE_INT32, {2}}});
  expect_error(t, BP_STATUS_UNSUPPORTED, "int32");
  OpTest b("Add", 14, {b8({2}, {1, 0}), b8({2}, {1, 1})}, {{BP_DTYPE_BOOL, {2}}});
  expect_error(b, BP_STATUS_UNSUPPORTED, "bool");
}

TEST(CpuRefElementwise, IncompatibleShapesAreRejected) {
  OpTest t("Add", 14, {f32({2, 3}, iota_f(6)), f32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  expect_error(t, BP_STATUS_INVALID_ARGUMENT, "broadcast");
  OpTest m("Add", 14, {f32({2}, {1, 2}), i32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2}}});
  expect_error(m, BP_STATUS_INVALID_ARGUMENT, "dtype");
}

// ---------------------------------------------------------------------------
// Clip
// ---------------------------------------------------------------------------

TEST(CpuRefElementwise, ClipAttributesBeforeOpset11) {
  OpTest t("Clip", 6, {f32({5}, {-3, -1, 0, 1, 3})}, {{BP_DTYPE_FLOAT32, {5}}},
           {attr_f("min", -1.5f), attr_f("max", 0.5f)});
  expect_floats(t.run_as<float>(), {-1.5f, -1, 0, 0.5f, 0.5f});
  OpTest d("Clip", 6, {f32({2}, {-1e30f, 1e30f})}, {{BP_DTYPE_FLOAT32, {2}}},
           {attr_f("max", 0.0f)});
  expect_floats(d.run_as<float>(), {-1e30f, 0});
}

TEST(CpuRefElementwise, ClipConstantInputs) {
  OpTest t("Clip", 13, {f32({5}, {-3, -1, 0, 1, 3}), f32({}, {-2}, true), f32({}, {2}, true)},
           {{BP_DTYPE_FLOAT32, {5}}});
  expect_floats(t.run_as<float>(), {-2, -1, 0, 1, 2});
  // Only max given; min absent.
  OpTest m("Clip", 13, {f32({3}, {-300, 5, 7}), absent(), f32({}, {6}, true)},
           {{BP_DTYPE_FLOAT32, {3}}});
  expect_floats(m.run_as<float>(), {-300, 5, 6});
  // Relu6 as exported by PyTorch on int.
  OpTest i("Clip", 13, {i32({4}, {-5, 3, 6, 9}), i32({}, {0}, true), i32({}, {6}, true)},
           {{BP_DTYPE_INT32, {4}}});
  EXPECT_EQ(i.run_as<int32_t>(), (std::vector<int32_t>{0, 3, 6, 6}));
  // min > max: everything becomes max.
  OpTest x("Clip", 13, {f32({3}, {-1, 0, 5}), f32({}, {3}, true), f32({}, {1}, true)},
           {{BP_DTYPE_FLOAT32, {3}}});
  expect_floats(x.run_as<float>(), {1, 1, 1});
}

TEST(CpuRefElementwise, ClipBoundsReadAtRunTime) {
  OpTest t("Clip", 12, {f32({4}, {-3, -1, 1, 3}), f32({}, {-0.5f}), f32({}, {2.5f}, true)},
           {{BP_DTYPE_FLOAT32, {4}}});
  expect_floats(t.run_as<float>(), {-0.5f, -0.5f, 1, 2.5f});
}

// ---------------------------------------------------------------------------
// Variadic, comparison, logic, Where
// ---------------------------------------------------------------------------

TEST(CpuRefElementwise, VariadicMinMaxSumMean) {
  auto a = f32({2, 3}, {1, 5, 3, -1, 0, 9});
  auto b = f32({3}, {2, 2, 2});
  auto c = f32({2, 1}, {4, -4});
  OpTest mx("Max", 13, {a, b, c}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  expect_floats(mx.run_as<float>(), {4, 5, 4, 2, 2, 9});
  OpTest mn("Min", 13, {a, b, c}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  expect_floats(mn.run_as<float>(), {1, 2, 2, -4, -4, -4});
  OpTest sm("Sum", 13, {a, b, c}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  expect_floats(sm.run_as<float>(), {7, 11, 9, -3, -2, 7});
  OpTest me("Mean", 13, {a, b}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  expect_floats(me.run_as<float>(), {1.5f, 3.5f, 2.5f, 0.5f, 1, 5.5f});
  OpTest one("Max", 13, {f32({2}, {3, -3})}, {{BP_DTYPE_FLOAT32, {2}}});
  expect_floats(one.run_as<float>(), {3, -3});
  OpTest bc("Max", 13, {f32({1}, {0}), f32({2, 2}, {-1, 1, -2, 2})}, {{BP_DTYPE_FLOAT32, {2, 2}}});
  expect_floats(bc.run_as<float>(), {0, 1, 0, 2});
  OpTest mi("Min", 13, {i64({3}, {5, -5, 0}), i64({}, {1})}, {{BP_DTYPE_INT64, {3}}});
  EXPECT_EQ(mi.run_as<int64_t>(), (std::vector<int64_t>{1, -5, 0}));
}

TEST(CpuRefElementwise, MaxPropagatesNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  OpTest t("Max", 13, {f32({2}, {nan, 1}), f32({2}, {1, nan})}, {{BP_DTYPE_FLOAT32, {2}}});
  const std::vector<float> y = t.run_as<float>();
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_TRUE(std::isnan(y[1]));
}

TEST(CpuRefElementwise, Comparisons) {
  auto a = f32({2, 2}, {1, 2, 3, 4});
  auto b = f32({2}, {2, 3});
  OpTest eq("Equal", 13, {a, b}, {{BP_DTYPE_BOOL, {2, 2}}});
  EXPECT_EQ(eq.run_as<uint8_t>(), (std::vector<uint8_t>{0, 0, 0, 0}));
  OpTest lt("Less", 13, {a, b}, {{BP_DTYPE_BOOL, {2, 2}}});
  EXPECT_EQ(lt.run_as<uint8_t>(), (std::vector<uint8_t>{1, 1, 0, 0}));
  OpTest gt("Greater", 13, {a, b}, {{BP_DTYPE_BOOL, {2, 2}}});
  EXPECT_EQ(gt.run_as<uint8_t>(), (std::vector<uint8_t>{0, 0, 1, 1}));
  OpTest ei("Equal", 13, {i64({3}, {7, 8, 9}), i64({}, {8})}, {{BP_DTYPE_BOOL, {3}}});
  EXPECT_EQ(ei.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 0}));
  OpTest eb("Equal", 13, {b8({4}, {0, 0, 1, 1}), b8({4}, {0, 1, 0, 1})}, {{BP_DTYPE_BOOL, {4}}});
  EXPECT_EQ(eb.run_as<uint8_t>(), (std::vector<uint8_t>{1, 0, 0, 1}));
  OpTest li("Less", 13, {i32({3}, {-1, 0, 1}), i32({1}, {0})}, {{BP_DTYPE_BOOL, {3}}});
  EXPECT_EQ(li.run_as<uint8_t>(), (std::vector<uint8_t>{1, 0, 0}));
}

TEST(CpuRefElementwise, Logic) {
  auto a = b8({4}, {0, 0, 1, 1});
  auto b = b8({4}, {0, 1, 0, 1});
  OpTest n("Not", 1, {a}, {{BP_DTYPE_BOOL, {4}}});
  EXPECT_EQ(n.run_as<uint8_t>(), (std::vector<uint8_t>{1, 1, 0, 0}));
  OpTest an("And", 7, {a, b}, {{BP_DTYPE_BOOL, {4}}});
  EXPECT_EQ(an.run_as<uint8_t>(), (std::vector<uint8_t>{0, 0, 0, 1}));
  OpTest o("Or", 7, {a, b}, {{BP_DTYPE_BOOL, {4}}});
  EXPECT_EQ(o.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 1, 1}));
  OpTest ob("Or", 7, {b8({2, 1}, {0, 1}), b8({2}, {0, 1})}, {{BP_DTYPE_BOOL, {2, 2}}});
  EXPECT_EQ(ob.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 1, 1}));
  OpTest bad("Not", 1, {f32({1}, {1})}, {{BP_DTYPE_FLOAT32, {1}}});
  expect_error(bad, BP_STATUS_UNSUPPORTED, "float32");
}

TEST(CpuRefElementwise, WhereBroadcasts) {
  OpTest t("Where", 16, {b8({2, 1}, {1, 0}), f32({3}, {1, 2, 3}), f32({}, {-1})},
           {{BP_DTYPE_FLOAT32, {2, 3}}});
  expect_floats(t.run_as<float>(), {1, 2, 3, -1, -1, -1});
  OpTest i("Where", 16,
           {b8({3}, {0, 1, 0}), i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({2, 1}, {-7, -8})},
           {{BP_DTYPE_INT64, {2, 3}}});
  EXPECT_EQ(i.run_as<int64_t>(), (std::vector<int64_t>{-7, 2, -7, -8, 5, -8}));
  OpTest bad("Where", 16, {f32({1}, {1}), f32({1}, {1}), f32({1}, {1})}, {{BP_DTYPE_FLOAT32, {1}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "bool");
}

// ---------------------------------------------------------------------------
// Identity, Dropout, Cast
// ---------------------------------------------------------------------------

TEST(CpuRefElementwise, IdentityAndDropout) {
  OpTest id("Identity", 16, {i64({3}, {4, 5, 6})}, {{BP_DTYPE_INT64, {3}}});
  EXPECT_EQ(id.run_as<int64_t>(), (std::vector<int64_t>{4, 5, 6}));
  OpTest d("Dropout", 13, {f32({3}, {1, 2, 3}), f32({}, {0.5f}, true)},
           {{BP_DTYPE_FLOAT32, {3}}, {BP_DTYPE_BOOL, {3}}});
  const auto outs = d.run();
  std::vector<float> y(3);
  std::memcpy(y.data(), outs[0].data(), 12);
  expect_floats(y, {1, 2, 3});
  EXPECT_EQ(outs[1], (std::vector<uint8_t>{1, 1, 1}));
  OpTest bad_ratio("Dropout", 13, {f32({1}, {1}), f32({}, {1.5f}, true), b8({}, {1}, true)},
                   {{BP_DTYPE_FLOAT32, {1}}});
  expect_error(bad_ratio, BP_STATUS_INVALID_ARGUMENT, "ratio");
}

// Training mode with seed 0 drops what ONNX's reference (numpy's legacy
// MT19937 seeded with 0) drops: its first uniforms are 0.5488, 0.7152,
// 0.6028, 0.5449, 0.4237, 0.6459, 0.4376, 0.8918.
TEST(CpuRefElementwise, DropoutTrainingFollowsNumpySeededDraws) {
  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};
  OpTest t("Dropout", 13, {f32({8}, x), f32({}, {0.5f}, true), b8({}, {1}, true)},
           {{BP_DTYPE_FLOAT32, {8}}, {BP_DTYPE_BOOL, {8}}}, {attr_i("seed", 0)});
  const auto outs = t.run();
  std::vector<float> y(8);
  std::memcpy(y.data(), outs[0].data(), 32);
  EXPECT_EQ(y, (std::vector<float>{2, 4, 6, 8, 0, 12, 0, 16}));
  EXPECT_EQ(outs[1], (std::vector<uint8_t>{1, 1, 1, 1, 0, 1, 0, 1}));
  // ratio 0 in training, and training_mode false: the identity.
  OpTest zero("Dropout", 13, {f32({3}, {1, 2, 3}), f32({}, {0.0f}, true), b8({}, {1}, true)},
              {{BP_DTYPE_FLOAT32, {3}}, {BP_DTYPE_BOOL, {3}}}, {attr_i("seed", 0)});
  const auto z = zero.run();
  EXPECT_EQ(z[1], (std::vector<uint8_t>{1, 1, 1}));
  // training_mode read at run time (not a constant): false -> identity.
  OpTest off("Dropout", 13, {f32({2}, {1, 2}), f32({}, {0.9f}, true), b8({}, {0})},
             {{BP_DTYPE_FLOAT32, {2}}});
  expect_floats(off.run_as<float>(), {1, 2});
  // ratio 0.75: scale 4.
  OpTest q("Dropout", 13, {f64({4}, {1, 1, 1, 1}), f64({}, {0.75}, true), b8({}, {1}, true)},
           {{BP_DTYPE_FLOAT64, {4}}}, {attr_i("seed", 0)});
  EXPECT_EQ(q.run_as<double>(), (std::vector<double>{0, 0, 0, 0}));  // all draws < 0.75
}

TEST(CpuRefElementwise, CastFloatToIntegersTruncates) {
  const std::vector<float> x = {-2.7f, -0.5f, 0.0f, 2.7f, 3.999f};
  OpTest i("Cast", 13, {f32({5}, x)}, {{BP_DTYPE_INT32, {5}}}, {attr_i("to", BP_DTYPE_INT32)});
  EXPECT_EQ(i.run_as<int32_t>(), (std::vector<int32_t>{-2, 0, 0, 2, 3}));
  OpTest l("Cast", 13, {f32({5}, x)}, {{BP_DTYPE_INT64, {5}}}, {attr_i("to", BP_DTYPE_INT64)});
  EXPECT_EQ(l.run_as<int64_t>(), (std::vector<int64_t>{-2, 0, 0, 2, 3}));
  OpTest b("Cast", 13, {f32({5}, x)}, {{BP_DTYPE_BOOL, {5}}}, {attr_i("to", BP_DTYPE_BOOL)});
  EXPECT_EQ(b.run_as<uint8_t>(), (std::vector<uint8_t>{1, 1, 0, 1, 1}));
  OpTest u("Cast", 13, {f32({3}, {0.5f, 200.9f, 255.0f})}, {{BP_DTYPE_UINT8, {3}}},
           {attr_i("to", BP_DTYPE_UINT8)});
  EXPECT_EQ(u.run_as<uint8_t>(), (std::vector<uint8_t>{0, 200, 255}));
}

TEST(CpuRefElementwise, CastBetweenIntegersBoolAndHalf) {
  OpTest bf("Cast", 13, {b8({3}, {1, 0, 1})}, {{BP_DTYPE_FLOAT32, {3}}},
            {attr_i("to", BP_DTYPE_FLOAT32)});
  expect_floats(bf.run_as<float>(), {1, 0, 1});
  OpTest uf("Cast", 13, {u8({3}, {0, 128, 255})}, {{BP_DTYPE_FLOAT32, {3}}},
            {attr_i("to", BP_DTYPE_FLOAT32)});
  expect_floats(uf.run_as<float>(), {0, 128, 255});
  OpTest ib("Cast", 13, {i64({3}, {0, -3, 7})}, {{BP_DTYPE_BOOL, {3}}},
            {attr_i("to", BP_DTYPE_BOOL)});
  EXPECT_EQ(ib.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 1}));
  OpTest nar("Cast", 13, {i32({3}, {300, -129, 5})}, {{BP_DTYPE_INT8, {3}}},
             {attr_i("to", BP_DTYPE_INT8)});
  EXPECT_EQ(nar.run_as<int8_t>(), (std::vector<int8_t>{44, 127, 5}));  // wraps modulo 256
  OpTest ih("Cast", 13, {i64({3}, {1, -2049, 70000})}, {{BP_DTYPE_FLOAT16, {3}}},
            {attr_i("to", BP_DTYPE_FLOAT16)});
  const std::vector<uint16_t> h = ih.run_as<uint16_t>();
  EXPECT_EQ(half_to_float(h[0]), 1.0f);
  EXPECT_EQ(half_to_float(h[1]), -2048.0f);  // -2049 ties to even in half
  EXPECT_TRUE(std::isinf(half_to_float(h[2])));
  OpTest hf("Cast", 13, {f16({2}, {0.1f, -65504.0f})}, {{BP_DTYPE_FLOAT32, {2}}},
            {attr_i("to", BP_DTYPE_FLOAT32)});
  expect_floats(hf.run_as<float>(), {half_to_float(float_to_half(0.1f)), -65504.0f}, 0);
  OpTest hi("Cast", 13, {f16({2}, {-7.75f, 1000.5f})}, {{BP_DTYPE_INT32, {2}}},
            {attr_i("to", BP_DTYPE_INT32)});
  EXPECT_EQ(hi.run_as<int32_t>(), (std::vector<int32_t>{-7, 1000}));
  OpTest mismatch("Cast", 13, {f32({1}, {1})}, {{BP_DTYPE_INT32, {1}}},
                  {attr_i("to", BP_DTYPE_INT64)});
  expect_error(mismatch, BP_STATUS_INVALID_ARGUMENT, "'to'");
}

// ---------------------------------------------------------------------------
// New dtypes: float64, bfloat16, int16 and unsigned integers
// ---------------------------------------------------------------------------

TEST(CpuRefElementwise, Float64ArithmeticAndActivations) {
  OpTest add("Add", 14, {f64({2}, {0.1, 1e300}), f64({2}, {0.2, 1e300})},
             {{BP_DTYPE_FLOAT64, {2}}});
  const std::vector<double> s = add.run_as<double>();
  EXPECT_EQ(s[0], 0.1 + 0.2);  // double precision, not float's
  EXPECT_EQ(s[1], 2e300);
  OpTest ex("Exp", 13, {f64({1}, {1.0})}, {{BP_DTYPE_FLOAT64, {1}}});
  EXPECT_EQ(ex.run_as<double>()[0], std::exp(1.0));
  OpTest relu("Relu", 14, {f64({2}, {-1.5, 2.25})}, {{BP_DTYPE_FLOAT64, {2}}});
  EXPECT_EQ(relu.run_as<double>(), (std::vector<double>{0, 2.25}));
  OpTest lk("LeakyRelu", 16, {f64({2}, {-2.0, 3.0})}, {{BP_DTYPE_FLOAT64, {2}}},
            {attr_f("alpha", 0.5f)});
  EXPECT_EQ(lk.run_as<double>(), (std::vector<double>{-1.0, 3.0}));
}

TEST(CpuRefElementwise, UnsignedAndInt16MinMaxAndCompare) {
  const uint64_t big = 0xFFFFFFFFFFFFFFF0ull;
  OpTest mx("Max", 13,
            {tensor(BP_DTYPE_UINT64, {2}, std::vector<uint64_t>{big, 1}),
             tensor(BP_DTYPE_UINT64, {2}, std::vector<uint64_t>{5, 2})},
            {{BP_DTYPE_UINT64, {2}}});
  EXPECT_EQ(mx.run_as<uint64_t>(), (std::vector<uint64_t>{big, 2}));  // not a signed compare
  OpTest mn("Min", 13,
            {tensor(BP_DTYPE_INT16, {2}, std::vector<int16_t>{-300, 7}),
             tensor(BP_DTYPE_INT16, {2}, std::vector<int16_t>{5, -32768})},
            {{BP_DTYPE_INT16, {2}}});
  EXPECT_EQ(mn.run_as<int16_t>(), (std::vector<int16_t>{-300, -32768}));
  OpTest gt("Greater", 13,
            {tensor(BP_DTYPE_UINT32, {2}, std::vector<uint32_t>{0x80000000u, 1}),
             tensor(BP_DTYPE_UINT32, {2}, std::vector<uint32_t>{1, 2})},
            {{BP_DTYPE_BOOL, {2}}});
  EXPECT_EQ(gt.run_as<uint8_t>(), (std::vector<uint8_t>{1, 0}));
}

TEST(CpuRefElementwise, PowWithUnsignedExponents) {
  OpTest p("Pow", 15,
           {f32({3}, {2, 3, -2}), tensor(BP_DTYPE_UINT64, {3}, std::vector<uint64_t>{10, 0, 3})},
           {{BP_DTYPE_FLOAT32, {3}}});
  EXPECT_EQ(p.run_as<float>(), (std::vector<float>{1024, 1, -8}));
  OpTest ip("Pow", 15,
            {i64({2}, {3, -2}), tensor(BP_DTYPE_UINT32, {2}, std::vector<uint32_t>{4, 3})},
            {{BP_DTYPE_INT64, {2}}});
  EXPECT_EQ(ip.run_as<int64_t>(), (std::vector<int64_t>{81, -8}));
}

std::vector<uint16_t> bf16_bits(const std::vector<std::vector<uint8_t>>& outs) {
  std::vector<uint16_t> v(outs[0].size() / 2);
  std::memcpy(v.data(), outs[0].data(), outs[0].size());
  return v;
}

TEST(CpuRefElementwise, CastToBfloat16RoundsToNearestEven) {
  // 1 + 2^-8 is halfway between bfloat16 1.0 and 1.0078125: ties to even
  // (down); 1 + 3 * 2^-8 ties up; just above a tie rounds up.
  const std::vector<float> x{1.0f,
                             1.0f + std::ldexp(1.0f, -8),
                             1.0f + 3 * std::ldexp(1.0f, -8),
                             1.0f + std::ldexp(1.2f, -8),
                             -2.5f,
                             std::numeric_limits<float>::quiet_NaN(),
                             std::numeric_limits<float>::max()};
  OpTest t("Cast", 13, {f32({7}, x)}, {{BP_DTYPE_BFLOAT16, {7}}},
           {attr_i("to", BP_DTYPE_BFLOAT16)});
  const std::vector<uint16_t> b = bf16_bits(t.run());
  EXPECT_EQ(b[0], 0x3F80);
  EXPECT_EQ(b[1], 0x3F80);
  EXPECT_EQ(b[2], 0x3F82);
  EXPECT_EQ(b[3], 0x3F81);
  EXPECT_EQ(b[4], 0xC020);
  EXPECT_EQ(b[5] & 0x7F80, 0x7F80);  // still a NaN
  EXPECT_NE(b[5] & 0x007F, 0);
  EXPECT_EQ(b[6], 0x7F80);  // FLT_MAX rounds up to inf
  // And back: bfloat16 -> float is exact.
  OpTest back("Cast", 13, {tensor(BP_DTYPE_BFLOAT16, {2}, std::vector<uint16_t>{0x3F82, 0xC020})},
              {{BP_DTYPE_FLOAT32, {2}}}, {attr_i("to", BP_DTYPE_FLOAT32)});
  EXPECT_EQ(back.run_as<float>(), (std::vector<float>{1.015625f, -2.5f}));
}

TEST(CpuRefElementwise, CastFromDoubleRoundsOnce) {
  // 1 + 2^-11 + 2^-40 is just above the float16 tie between 1 and 1 + 2^-10:
  // rounding to float first would land on the tie and then round to even (1).
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  OpTest t("Cast", 13, {f64({2}, {x, -1e6})}, {{BP_DTYPE_FLOAT16, {2}}},
           {attr_i("to", BP_DTYPE_FLOAT16)});
  const std::vector<uint16_t> h = t.run_as<uint16_t>();
  EXPECT_EQ(h[0], 0x3C01);
  EXPECT_EQ(h[1], 0xFC00);  // -inf
  OpTest d("Cast", 13, {f64({3}, {3.9, -1e20, 1e300})}, {{BP_DTYPE_INT32, {3}}},
           {attr_i("to", BP_DTYPE_INT32)});
  EXPECT_EQ(d.run_as<int32_t>(), (std::vector<int32_t>{3, std::numeric_limits<int32_t>::min(),
                                                       std::numeric_limits<int32_t>::max()}));
  OpTest u("Cast", 13, {tensor(BP_DTYPE_UINT64, {1}, std::vector<uint64_t>{~0ull})},
           {{BP_DTYPE_FLOAT64, {1}}}, {attr_i("to", BP_DTYPE_FLOAT64)});
  EXPECT_EQ(u.run_as<double>()[0], 18446744073709551615.0);
  OpTest s("Cast", 13, {tensor(BP_DTYPE_INT16, {2}, std::vector<int16_t>{-1, 300})},
           {{BP_DTYPE_UINT8, {2}}}, {attr_i("to", BP_DTYPE_UINT8)});
  EXPECT_EQ(s.run_as<uint8_t>(), (std::vector<uint8_t>{255, 44}));
}

// ---------------------------------------------------------------------------
// The elementwise ops of ops_math.cpp
// ---------------------------------------------------------------------------

TEST(CpuRefElementwise, TrigonometricAndHyperbolic) {
  const std::vector<double> x{-0.5, 0.25};
  struct Case {
    const char* op;
    double (*fn)(double);
  };
  for (const Case& c : {Case{"Acos", std::acos}, Case{"Asin", std::asin}, Case{"Atan", std::atan},
                        Case{"Tan", std::tan}, Case{"Asinh", std::asinh}, Case{"Atanh", std::atanh},
                        Case{"Sinh", std::sinh}, Case{"Cosh", std::cosh}}) {
    OpTest t(c.op, 9, {f64({2}, x)}, {{BP_DTYPE_FLOAT64, {2}}});
    EXPECT_EQ(t.run_as<double>(), (std::vector<double>{c.fn(x[0]), c.fn(x[1])})) << c.op;
    OpTest f(c.op, 9, {f32({2}, {-0.5f, 0.25f})}, {{BP_DTYPE_FLOAT32, {2}}});
    expect_floats(f.run_as<float>(), {float(c.fn(x[0])), float(c.fn(x[1]))}, 1e-6f);
  }
  OpTest ach("Acosh", 9, {f32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2}}});
  expect_floats(ach.run_as<float>(), {0, float(std::acosh(2.0))});
}

TEST(CpuRefElementwise, IsNaNAndIsInf) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  OpTest n("IsNaN", 13, {f32({4}, {1, nan, inf, -inf})}, {{BP_DTYPE_BOOL, {4}}});
  EXPECT_EQ(n.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 0, 0}));
  OpTest i("IsInf", 10, {f32({4}, {1, nan, inf, -inf})}, {{BP_DTYPE_BOOL, {4}}});
  EXPECT_EQ(i.run_as<uint8_t>(), (std::vector<uint8_t>{0, 0, 1, 1}));
  OpTest pos("IsInf", 10, {f64({3}, {1, inf, -inf})}, {{BP_DTYPE_BOOL, {3}}},
             {attr_i("detect_negative", 0)});
  EXPECT_EQ(pos.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 0}));
  OpTest neg("IsInf", 10, {f32({3}, {1, inf, -inf})}, {{BP_DTYPE_BOOL, {3}}},
             {attr_i("detect_positive", 0)});
  EXPECT_EQ(neg.run_as<uint8_t>(), (std::vector<uint8_t>{0, 0, 1}));
}

TEST(CpuRefElementwise, CeluShrinkThresholdedRelu) {
  OpTest celu("Celu", 12, {f32({3}, {-1, 0, 2})}, {{BP_DTYPE_FLOAT32, {3}}}, {attr_f("alpha", 2)});
  expect_floats(celu.run_as<float>(), {float(2 * std::expm1(-0.5)), 0, 2});
  OpTest zero_alpha("Celu", 12, {f32({1}, {1})}, {{BP_DTYPE_FLOAT32, {1}}}, {attr_f("alpha", 0)});
  expect_error(zero_alpha, BP_STATUS_INVALID_ARGUMENT, "alpha");
  OpTest sh("Shrink", 9, {f32({5}, {-2, -0.5f, 0, 0.6f, 3})}, {{BP_DTYPE_FLOAT32, {5}}},
            {attr_f("lambd", 0.5f), attr_f("bias", 1.5f)});
  expect_floats(sh.run_as<float>(), {-0.5f, 0, 0, -0.9f, 1.5f});
  OpTest shi("Shrink", 9, {tensor(BP_DTYPE_INT8, {4}, std::vector<int8_t>{-5, -1, 1, 5})},
             {{BP_DTYPE_INT8, {4}}}, {attr_f("lambd", 1.5f), attr_f("bias", 1.5f)});
  EXPECT_EQ(shi.run_as<int8_t>(), (std::vector<int8_t>{-3, 0, 0, 3}));  // -3.5, 3.5 truncated
  OpTest tr("ThresholdedRelu", 10, {f32({3}, {0.5f, 1, 2})}, {{BP_DTYPE_FLOAT32, {3}}});
  expect_floats(tr.run_as<float>(), {0, 0, 2});
}

TEST(CpuRefElementwise, ModIntegerAndFmodSemantics) {
  const std::vector<int32_t> a{-4, 7, 5, -7, 3}, b{3, -3, 0, -3, 3};
  OpTest py("Mod", 13, {i32({5}, a), i32({5}, b)}, {{BP_DTYPE_INT32, {5}}});
  EXPECT_EQ(py.run_as<int32_t>(), (std::vector<int32_t>{2, -2, 0, -1, 0}));  // sign of divisor
  OpTest c("Mod", 13, {i32({5}, a), i32({5}, b)}, {{BP_DTYPE_INT32, {5}}}, {attr_i("fmod", 1)});
  EXPECT_EQ(c.run_as<int32_t>(), (std::vector<int32_t>{-1, 1, 0, -1, 0}));  // sign of dividend
  OpTest mn("Mod", 13, {i64({1}, {std::numeric_limits<int64_t>::min()}), i64({1}, {-1})},
            {{BP_DTYPE_INT64, {1}}});
  EXPECT_EQ(mn.run_as<int64_t>(), (std::vector<int64_t>{0}));
  OpTest f("Mod", 13, {f32({2}, {-4.5f, 7.5f}), f32({2}, {2, -2})}, {{BP_DTYPE_FLOAT32, {2}}},
           {attr_i("fmod", 1)});
  expect_floats(f.run_as<float>(), {-0.5f, 1.5f});
  OpTest u("Mod", 13,
           {tensor(BP_DTYPE_UINT16, {2}, std::vector<uint16_t>{65535, 7}),
            tensor(BP_DTYPE_UINT16, {1}, std::vector<uint16_t>{10})},
           {{BP_DTYPE_UINT16, {2}}});
  EXPECT_EQ(u.run_as<uint16_t>(), (std::vector<uint16_t>{5, 7}));
  OpTest bad("Mod", 13, {f32({1}, {1}), f32({1}, {1})}, {{BP_DTYPE_FLOAT32, {1}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "fmod=0");
}

TEST(CpuRefElementwise, BitShiftBothDirectionsAndWideShifts) {
  OpTest l("BitShift", 11,
           {tensor(BP_DTYPE_UINT16, {3}, std::vector<uint16_t>{1, 0xFFFF, 3}),
            tensor(BP_DTYPE_UINT16, {3}, std::vector<uint16_t>{3, 4, 16})},
           {{BP_DTYPE_UINT16, {3}}}, {attr_s("direction", "LEFT")});
  EXPECT_EQ(l.run_as<uint16_t>(), (std::vector<uint16_t>{8, 0xFFF0, 0}));
  OpTest r("BitShift", 11,
           {tensor(BP_DTYPE_UINT64, {2}, std::vector<uint64_t>{~0ull, 16}),
            tensor(BP_DTYPE_UINT64, {1}, std::vector<uint64_t>{60})},
           {{BP_DTYPE_UINT64, {2}}}, {attr_s("direction", "RIGHT")});
  EXPECT_EQ(r.run_as<uint64_t>(), (std::vector<uint64_t>{15, 0}));
  OpTest bad("BitShift", 11, {u8({1}, {1}), u8({1}, {1})}, {{BP_DTYPE_UINT8, {1}}},
             {attr_s("direction", "UP")});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "direction");
}

}  // namespace
