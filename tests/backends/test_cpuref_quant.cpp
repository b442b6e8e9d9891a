// Unit tests of CpuRef's quantization kernels (backends/reference/kernels_quant.cpp).
//
// Expected values: the ONNX operator documentation's examples, and naive
// implementations written here (integer sums in int64, requantization with
// round-half-to-even) for the per-axis, batched and grouped cases.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace backplane::cpuref {
namespace {

using test_harness::attr_i;
using test_harness::attr_ints;
using test_harness::AttrSpec;
using test_harness::f32;
using test_harness::i32;
using test_harness::OutSpec;
using test_harness::TensorSpec;
using test_harness::u8;

TensorSpec s8(Dims s, const std::vector<int8_t>& v) {
  return test_harness::tensor(BP_DTYPE_INT8, s, v);
}

const KernelRegistry& quant_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_quant_kernels(reg);
    return reg;
  }();
  return r;
}

class Op {
 public:
  Op(std::string op, int64_t opset, std::vector<TensorSpec> ins, std::vector<OutSpec> outs,
     std::vector<AttrSpec> attrs = {})
      : op_(op),
        ins_(ins),
        outs_(outs),
        t_(std::move(op), opset, std::move(ins), std::move(outs), std::move(attrs)) {}
  std::unique_ptr<Kernel> kernel() const { return (*quant_registry().find(op_))(t_.info()); }
  std::vector<std::vector<uint8_t>> run() const {
    auto k = kernel();
    std::vector<std::vector<uint8_t>> outs;
    std::vector<void*> ptrs;
    for (const OutSpec& o : outs_) {
      outs.emplace_back(static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype), 0xCD);
      ptrs.push_back(outs.back().data());
    }
    std::vector<const void*> in;
    for (const TensorSpec& t : ins_) in.push_back(t.present ? t.bytes.data() : nullptr);
    std::vector<uint64_t> scratch(k->scratch_bytes() / 8 + 1, ~0ull);
    k->run(in.data(), ptrs.data(), scratch.data());
    return outs;
  }
  template <class T>
  std::vector<T> run_as(size_t i = 0) const {
    const auto outs = run();
    std::vector<T> v(outs[i].size() / sizeof(T));
    std::memcpy(v.data(), outs[i].data(), outs[i].size());
    return v;
  }

 private:
  std::string op_;
  std::vector<TensorSpec> ins_;
  std::vector<OutSpec> outs_;
  test_harness::OpTest t_;
};

template <class T>
std::vector<T> rnd_int(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(gen));
  return v;
}

// Requantization as ONNX specifies it: round half to even, then saturate.
template <class T>
T requant(double v, int zp) {
  const double r = std::nearbyint(v) + zp;
  const double lo = std::is_signed_v<T> ? -128 : 0, hi = std::is_signed_v<T> ? 127 : 255;
  return static_cast<T>(std::min(std::max(r, lo), hi));
}

// -------------------------------------------------- Quantize / Dequantize

TEST(CpuRefQuant, QuantizeLinearOfTheOnnxDocumentation) {
  Op op("QuantizeLinear", 13,
        {f32({6}, {0, 2, 3, 1000, -254, -1000}), f32({}, {2.0f}), u8({}, {128})},
        {{BP_DTYPE_UINT8, {6}}});
  EXPECT_EQ(op.run_as<uint8_t>(), (std::vector<uint8_t>{128, 129, 130, 255, 1, 0}));
}

TEST(CpuRefQuant, QuantizeRoundsHalfToEvenAndSaturatesInt8) {
  // x / 1: 2.5 -> 2, 3.5 -> 4, -2.5 -> -2, 200 -> 127, -200 -> -128; no zero point given.
  Op op("QuantizeLinear", 10,
        {f32({5}, {2.5f, 3.5f, -2.5f, 200.0f, -200.0f}), f32({}, {1.0f}), s8({}, {0})},
        {{BP_DTYPE_INT8, {5}}});
  EXPECT_EQ(op.run_as<int8_t>(), (std::vector<int8_t>{2, 4, -2, 127, -128}));
  // Without a zero point the output is uint8 with zero point 0.
  Op no_zp("QuantizeLinear", 10, {f32({3}, {-1.0f, 0.6f, 300.0f}), f32({}, {1.0f})},
           {{BP_DTYPE_UINT8, {3}}});
  EXPECT_EQ(no_zp.run_as<uint8_t>(), (std::vector<uint8_t>{0, 1, 255}));
}

TEST(CpuRefQuant, PerAxisQuantizeAndDequantizeRoundTrip) {
  // x [2, 3, 4], axis 1: scale and zero point per channel.
  std::vector<float> x(24);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 1.7f - 20.0f;
  const std::vector<float> scale = {0.5f, 0.25f, 2.0f};
  const std::vector<uint8_t> zp = {10, 128, 200};
  Op q("QuantizeLinear", 13, {f32({2, 3, 4}, x), f32({3}, scale), u8({3}, zp)},
       {{BP_DTYPE_UINT8, {2, 3, 4}}}, {attr_i("axis", 1)});
  const std::vector<uint8_t> y = q.run_as<uint8_t>();
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t ch = (i / 4) % 3;
    EXPECT_EQ(y[i], requant<uint8_t>(x[i] / scale[ch], zp[ch])) << i;
  }
  Op dq("DequantizeLinear", 13, {u8({2, 3, 4}, y), f32({3}, scale), u8({3}, zp)},
        {{BP_DTYPE_FLOAT32, {2, 3, 4}}}, {attr_i("axis", -2)});
  const std::vector<float> back = dq.run_as<float>();
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t ch = (i / 4) % 3;
    EXPECT_FLOAT_EQ(back[i], (static_cast<float>(y[i]) - zp[ch]) * scale[ch]) << i;
  }
}

TEST(CpuRefQuant, DequantizeLinearOfTheOnnxDocumentationAndInt32) {
  Op op("DequantizeLinear", 10, {u8({4}, {0, 3, 128, 255}), f32({}, {2.0f}), u8({}, {128})},
        {{BP_DTYPE_FLOAT32, {4}}});
  test_harness::expect_floats(op.run_as<float>(), {-256, -250, 0, 254});
  Op i32op("DequantizeLinear", 13, {i32({3}, {-7, 0, 1000}), f32({}, {0.5f})},
           {{BP_DTYPE_FLOAT32, {3}}});
  test_harness::expect_floats(i32op.run_as<float>(), {-3.5f, 0.0f, 500.0f});
}

TEST(CpuRefQuant, DynamicQuantizeLinearOfTheOnnxDocumentation) {
  // Expected scale 0.0196078438 and zero point 153.
  const std::vector<float> x = {0, 2, -3, -2.5f, 1.34f, 0.5f};
  Op op("DynamicQuantizeLinear", 11, {f32({6}, x)},
        {{BP_DTYPE_UINT8, {6}}, {BP_DTYPE_FLOAT32, {}}, {BP_DTYPE_UINT8, {}}});
  const auto outs = op.run();
  float scale;
  std::memcpy(&scale, outs[1].data(), 4);
  EXPECT_NEAR(scale, 0.0196078438f, 1e-9f);
  EXPECT_EQ(outs[2][0], 153);
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(outs[0][i], requant<uint8_t>(x[i] / scale, 153)) << i;
  // All zeros: scale 0, zero point 0, y 0 (no division by zero).
  Op zeros("DynamicQuantizeLinear", 11, {f32({2}, {0, 0})},
           {{BP_DTYPE_UINT8, {2}}, {BP_DTYPE_FLOAT32, {}}, {BP_DTYPE_UINT8, {}}});
  const auto z = zeros.run();
  EXPECT_EQ(z[0], (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(z[2][0], 0);
}

// ------------------------------------------------------------------ matmul

TEST(CpuRefQuant, MatMulIntegerOfTheOnnxDocumentation) {
  Op op("MatMulInteger", 10,
        {u8({4, 3}, {11, 7, 3, 10, 6, 2, 9, 5, 1, 8, 4, 0}), u8({3, 2}, {1, 4, 2, 5, 3, 6}),
         u8({1}, {12}), u8({1}, {0})},
        {{BP_DTYPE_INT32, {4, 2}}});
  EXPECT_EQ(op.run_as<int32_t>(), (std::vector<int32_t>{-38, -83, -44, -98, -50, -113, -56, -128}));
}

TEST(CpuRefQuant, MatMulIntegerBroadcastsBatchesWithPerRowAndColumnZeroPoints) {
  // A [2, 1, 3, 4] int8 against B [3, 4, 5] uint8 -> [2, 3, 3, 5].
  const auto a = rnd_int<int8_t>(24, 1, -128, 127);
  const auto b = rnd_int<uint8_t>(60, 2, 0, 255);
  const std::vector<int8_t> azp = {-3, 5, 0};
  const std::vector<uint8_t> bzp = {1, 2, 3, 4, 200};
  Op op("MatMulInteger", 10, {s8({2, 1, 3, 4}, a), u8({3, 4, 5}, b), s8({3}, azp), u8({5}, bzp)},
        {{BP_DTYPE_INT32, {2, 3, 3, 5}}});
  const std::vector<int32_t> y = op.run_as<int32_t>();
  for (int bi = 0; bi < 2; ++bi)
    for (int bj = 0; bj < 3; ++bj)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 5; ++j) {
          int64_t acc = 0;
          for (int k = 0; k < 4; ++k)
            acc += (a[(bi * 3 + i) * 4 + k] - azp[i]) * (b[(bj * 4 + k) * 5 + j] - bzp[j]);
          EXPECT_EQ(y[((bi * 3 + bj) * 3 + i) * 5 + j], acc);
        }
}

TEST(CpuRefQuant, QLinearMatMulOfTheOnnxDocumentation) {
  Op op("QLinearMatMul", 10,
        {u8({2, 4}, {208, 236, 0, 238, 3, 214, 255, 29}), f32({1}, {0.0066f}), u8({1}, {113}),
         u8({4, 3}, {152, 51, 244, 60, 26, 255, 0, 127, 246, 127, 254, 247}), f32({1}, {0.00705f}),
         u8({1}, {114}), f32({1}, {0.0107f}), u8({1}, {118})},
        {{BP_DTYPE_UINT8, {2, 3}}});
  EXPECT_EQ(op.run_as<uint8_t>(), (std::vector<uint8_t>{168, 115, 255, 1, 66, 151}));
}

// --------------------------------------------------------------------- conv

TEST(CpuRefQuant, ConvIntegerOfTheOnnxDocumentation) {
  const std::vector<uint8_t> x = {2, 3, 4, 5, 6, 7, 8, 9, 10};
  Op op("ConvInteger", 10, {u8({1, 1, 3, 3}, x), u8({1, 1, 2, 2}, {1, 1, 1, 1}), u8({}, {1})},
        {{BP_DTYPE_INT32, {1, 1, 2, 2}}});
  EXPECT_EQ(op.run_as<int32_t>(), (std::vector<int32_t>{12, 16, 24, 28}));
  Op padded("ConvInteger", 10, {u8({1, 1, 3, 3}, x), u8({1, 1, 2, 2}, {1, 1, 1, 1}), u8({}, {1})},
            {{BP_DTYPE_INT32, {1, 1, 4, 4}}}, {attr_ints("pads", {1, 1, 1, 1})});
  EXPECT_EQ(padded.run_as<int32_t>(),
            (std::vector<int32_t>{1, 3, 5, 3, 5, 12, 16, 9, 11, 24, 28, 15, 7, 15, 17, 9}));
}

TEST(CpuRefQuant, QLinearConvGroupedStridedPerChannelWithBias) {
  // x [1, 4, 5, 6] uint8, w [6, 2, 3, 3] int8 in 2 groups, stride 2, pads 1:
  // y [1, 6, 3, 3]; per-channel w_scale and w_zero_point, int32 bias.
  const auto x = rnd_int<uint8_t>(120, 3, 0, 255);
  const auto w = rnd_int<int8_t>(108, 4, -128, 127);
  const std::vector<float> w_scale = {0.01f, 0.02f, 0.005f, 0.03f, 0.015f, 0.008f};
  const std::vector<int8_t> w_zp = {0, 1, -2, 3, 0, -1};
  const std::vector<int32_t> bias = {100, -200, 0, 5000, -7, 42};
  const float x_scale = 0.02f, y_scale = 0.5f;
  const uint8_t x_zp = 128, y_zp = 100;
  Op op("QLinearConv", 10,
        {u8({1, 4, 5, 6}, x), f32({}, {x_scale}), u8({}, {x_zp}), s8({6, 2, 3, 3}, w),
         f32({6}, w_scale), s8({6}, w_zp), f32({}, {y_scale}), u8({}, {y_zp}), i32({6}, bias)},
        {{BP_DTYPE_UINT8, {1, 6, 3, 3}}},
        {attr_i("group", 2), attr_ints("strides", {2, 2}), attr_ints("pads", {1, 1, 1, 1})});
  const std::vector<uint8_t> y = op.run_as<uint8_t>();
  for (int m = 0; m < 6; ++m)
    for (int oy = 0; oy < 3; ++oy)
      for (int ox = 0; ox < 3; ++ox) {
        int64_t acc = bias[m];
        const int g = m / 3;
        for (int c = 0; c < 2; ++c)
          for (int ky = 0; ky < 3; ++ky)
            for (int kx = 0; kx < 3; ++kx) {
              const int iy = oy * 2 + ky - 1, ix = ox * 2 + kx - 1;
              if (iy < 0 || iy >= 5 || ix < 0 || ix >= 6) continue;
              acc += (x[((g * 2 + c) * 5 + iy) * 6 + ix] - x_zp) *
                     (w[((m * 2 + c) * 3 + ky) * 3 + kx] - w_zp[m]);
            }
        const double real = static_cast<double>(acc) * x_scale * w_scale[m] / y_scale;
        EXPECT_EQ(y[(m * 3 + oy) * 3 + ox], requant<uint8_t>(real, y_zp))
            << "m " << m << " at " << oy << "," << ox;
      }
}

TEST(CpuRefQuant, MismatchedZeroPointsAreErrors) {
  // A zero point of another dtype than its operand.
  Op op("MatMulInteger", 10, {u8({2, 2}, {1, 2, 3, 4}), u8({2, 2}, {1, 2, 3, 4}), s8({}, {1})},
        {{BP_DTYPE_INT32, {2, 2}}});
  EXPECT_THROW(op.kernel(), sdk::Error);
  // A per-axis scale of the wrong length.
  Op q("QuantizeLinear", 13, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), f32({2}, {1, 1}), u8({2}, {0, 0})},
       {{BP_DTYPE_UINT8, {2, 3}}}, {attr_i("axis", 1)});
  EXPECT_THROW(q.kernel(), sdk::Error);
}

TEST(CpuRefQuant, FamilyRegistersEveryOp) {
  for (const char* op : {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
                         "MatMulInteger", "QLinearMatMul", "ConvInteger", "QLinearConv"})
    EXPECT_NE(quant_registry().find(op), nullptr) << op;
}

// ------------------------------------------- through the runtime (schemas)

Result<std::shared_ptr<Model>> load(const test::ModelBuilder& b) {
  test::TempDir dir;
  RuntimeOptions ro;
  ro.dynamic_backends = false;
  ro.log_level = LogLevel::kOff;
  auto rt = Runtime::create(ro);
  if (!rt.ok()) return rt.status();
  ModelOptions mo;
  mo.backends = {"CpuRef"};
  return (*rt)->load_model(b.save(dir), mo);
}

void expect_load_error(const test::ModelBuilder& b, const std::string& node,
                       const std::string& fragment) {
  auto model = load(b);
  ASSERT_FALSE(model.ok()) << fragment;
  const std::string msg = model.status().to_string();
  EXPECT_NE(msg.find(node), std::string::npos) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos) << msg;
}

TEST(CpuRefQuantModel, QLinearConvShapeAndPerAxisScaleChecks) {
  // x [1, 4, 5, 6] uint8, w [6, 2, 3, 3] int8 in 2 groups, stride 2, pads 1 -> [1, 6, 3, 3].
  test::ModelBuilder b(13);
  b.input("x", {1, 4, 5, 6}, onnx::TensorProto::UINT8);
  b.input("w", {6, 2, 3, 3}, onnx::TensorProto::INT8);
  b.init_f32("xs", {}, {0.02f}).init_f32("ws", {6}, {1, 1, 1, 1, 1, 1}).init_f32("ys", {}, {0.5f});
  b.input("xz", std::vector<test::Dim>{}, onnx::TensorProto::UINT8);
  b.input("wz", {6}, onnx::TensorProto::INT8);
  b.input("yz", std::vector<test::Dim>{}, onnx::TensorProto::UINT8);
  onnx::NodeProto& n =
      b.node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, {"y"}, "qconv0");
  test::set_int(n, "group", 2);
  test::set_ints(n, "strides", {2, 2});
  test::set_ints(n, "pads", {1, 1, 1, 1});
  b.untyped_output("y");
  auto model = load(b);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_EQ((*model)->outputs()[0].shape, (Shape{1, 6, 3, 3}));
  EXPECT_EQ((*model)->outputs()[0].dtype, DType::kUInt8);

  test::ModelBuilder q(13);
  q.input("x", {2, 3});
  q.init_f32("s", {2}, {1.0f, 2.0f});
  test::set_int(q.node("QuantizeLinear", {"x", "s"}, {"y"}, "quant0"), "axis", 1);
  q.untyped_output("y");
  expect_load_error(q, "quant0", "expected one element or [3]");
}

// -------------------- constant scales and zero points checked at load, by node

// A weight w [4, 3] of `w_elem` (an initializer) -> DequantizeLinear 'dq_w' (opset 13)
// -> y, with scale 's' and, unless `z_elem` is 0, zero point 'z' (zeros).
test::ModelBuilder dq_model(int w_elem, const test::Dims& s_dims, const std::vector<float>& s,
                            int z_elem, const test::Dims& z_dims, int64_t axis = 1) {
  test::ModelBuilder b(13);
  b.init_ints("w", w_elem, {4, 3}, std::vector<int>(12, 1));
  b.init_f32("s", s_dims, s);
  std::vector<std::string> ins = {"w", "s"};
  if (z_elem != 0) {
    b.init_ints("z", z_elem, z_dims, std::vector<int>(test::element_count(z_dims), 0));
    ins.push_back("z");
  }
  test::set_int(b.node("DequantizeLinear", ins, {"y"}, "dq_w"), "axis", axis);
  b.untyped_output("y");
  return b;
}

constexpr int kS8 = onnx::TensorProto::INT8, kU8 = onnx::TensorProto::UINT8,
              kI32 = onnx::TensorProto::INT32;
const char* const kDq = "node 'dq_w' (DequantizeLinear)";

TEST(CpuRefQuantModel, ValidConstantParametersLoad) {
  // The controls of the tests below: per tensor, and per axis on either axis.
  for (const auto& b :
       {dq_model(kS8, {}, {0.5f}, kS8, {}), dq_model(kS8, {3}, {0.5f, 1e-30f, 2.0f}, kS8, {3}),
        dq_model(kU8, {4}, {1, 2, 3, 4}, kU8, {4}, 0),
        dq_model(kS8, {4}, {1, 2, 3, 4}, 0, {}, -2)}) {
    auto model = load(b);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
  }
}

TEST(CpuRefQuantModel, ConstantScaleZeroNegativeNanOrInfiniteIsALoadError) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::pair<float, std::string>> bad = {
      {0.0f, "0"}, {-0.25f, "-0.25"}, {nan, "nan"}, {inf, "inf"}, {-inf, "-inf"}};
  for (const auto& [v, text] : bad) {
    expect_load_error(dq_model(kS8, {}, {v}, kS8, {}), kDq,
                      "x_scale 's' has value " + text + ", expected a finite number > 0");
    // Per axis: the element is named.
    expect_load_error(dq_model(kS8, {3}, {0.5f, 0.5f, v}, kS8, {3}), kDq,
                      "x_scale 's' has element 2 = " + text);
  }
  // QuantizeLinear's y_scale, per axis.
  test::ModelBuilder q(13);
  q.input("x", {2, 3});
  q.init_f32("s", {3}, {0.1f, 0.0f, 0.2f});
  q.init_ints("z", kU8, {3}, {0, 0, 0});
  test::set_int(q.node("QuantizeLinear", {"x", "s", "z"}, {"y"}, "q_x"), "axis", 1);
  q.untyped_output("y");
  expect_load_error(q, "node 'q_x' (QuantizeLinear)", "y_scale 's' has element 1 = 0");
}

// QLinearConv x [1, 2, 4, 4] uint8, w [3, 2, 1, 1] int8 (constant), per-channel w_scale.
test::ModelBuilder qlinear_conv(const std::vector<float>& w_scale, float y_scale, int yz_elem,
                                int wz_elem = kS8) {
  test::ModelBuilder b(13);
  b.input("x", {1, 2, 4, 4}, kU8);
  b.init_ints("w", kS8, {3, 2, 1, 1}, {1, 2, 3, 4, 5, 6});
  b.init_f32("xs", {}, {0.1f}).init_f32("ys", {}, {y_scale});
  b.init_f32("ws", {static_cast<int64_t>(w_scale.size())}, w_scale);
  b.init_ints("xz", kU8, {}, {128});
  b.init_ints("wz", wz_elem, {static_cast<int64_t>(w_scale.size())},
              std::vector<int>(w_scale.size(), 0));
  b.init_ints("yz", yz_elem, {}, {0});
  b.node("QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, {"y"}, "qconv");
  b.untyped_output("y");
  return b;
}

TEST(CpuRefQuantModel, QLinearConvScalesAreChecked) {
  const char* node = "node 'qconv' (QLinearConv)";
  auto ok = load(qlinear_conv({0.5f, 0.25f, 1.0f}, 0.2f, kU8));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  expect_load_error(qlinear_conv({0.5f, -0.25f, 1.0f}, 0.2f, kU8), node,
                    "w_scale 'ws' has element 1 = -0.25");
  expect_load_error(qlinear_conv({0.5f, 0.25f, 1.0f}, 0.0f, kU8), node, "y_scale 'ys' has value 0");
  expect_load_error(qlinear_conv({0.5f, 0.25f}, 0.2f, kU8), node,
                    "w_scale 'ws' has shape [2], expected one element or [3]");
}

TEST(CpuRefQuantModel, QLinearMatMulScalesAreChecked) {
  // a [2, 3] uint8 input, b [3, 4] int8 constant, per-column b_scale.
  auto build = [](float a_scale, const std::vector<float>& b_scale) {
    test::ModelBuilder b(13);
    b.input("a", {2, 3}, kU8);
    b.init_ints("b", kS8, {3, 4}, std::vector<int>(12, 3));
    b.init_f32("as", {}, {a_scale}).init_f32("ys", {}, {0.5f});
    b.init_f32("bs", {static_cast<int64_t>(b_scale.size())}, b_scale);
    b.init_ints("az", kU8, {}, {0});
    b.init_ints("bz", kS8, {static_cast<int64_t>(b_scale.size())},
                std::vector<int>(b_scale.size(), 0));
    b.init_ints("yz", kU8, {}, {0});
    b.node("QLinearMatMul", {"a", "as", "az", "b", "bs", "bz", "ys", "yz"}, {"y"}, "qmm");
    b.untyped_output("y");
    return b;
  };
  const char* node = "node 'qmm' (QLinearMatMul)";
  auto ok = load(build(0.1f, {1, 2, 3, 4}));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  expect_load_error(build(std::numeric_limits<float>::quiet_NaN(), {1, 2, 3, 4}), node,
                    "a_scale 'as' has value nan");
  expect_load_error(build(0.1f, {1, 2, 3, std::numeric_limits<float>::infinity()}), node,
                    "b_scale 'bs' has element 3 = inf");
  expect_load_error(build(0.1f, {1, 2, 3}), node,
                    "b_scale 'bs' has shape [3], expected one element or [4]");
}

TEST(CpuRefQuantModel, PerAxisLengthMustMatchTheAxis) {
  // w is [4, 3]: axis 1 has 3 entries, axis 0 has 4.
  expect_load_error(dq_model(kS8, {4}, {1, 1, 1, 1}, kS8, {4}), kDq,
                    "x_scale 's' has shape [4], expected one element or [3]");
  expect_load_error(dq_model(kS8, {3}, {1, 1, 1}, kS8, {3}, 0), kDq,
                    "x_scale 's' has shape [3], expected one element or [4]");
  expect_load_error(dq_model(kS8, {3, 1}, {1, 1, 1}, kS8, {3, 1}), kDq,
                    "x_scale 's' has shape [3,1], expected one element or [3]");
  expect_load_error(dq_model(kS8, {3}, {1, 1, 1}, kS8, {3}, 2), kDq,
                    "axis 2 is out of range for rank 2");
  expect_load_error(dq_model(kS8, {3}, {1, 1, 1}, kS8, {3}, -3), kDq,
                    "axis -3 is out of range for rank 2");
  // MatMulInteger: b_zero_point per column of b [3, 4].
  test::ModelBuilder mm(13);
  mm.input("a", {2, 3}, kU8);
  mm.init_ints("b", kS8, {3, 4}, std::vector<int>(12, 1));
  mm.init_ints("az", kU8, {}, {1});
  mm.init_ints("bz", kS8, {3}, {0, 0, 0});
  mm.node("MatMulInteger", {"a", "b", "az", "bz"}, {"y"}, "mmi");
  mm.untyped_output("y");
  expect_load_error(mm, "node 'mmi' (MatMulInteger)",
                    "b_zero_point 'bz' has shape [3], expected one element or [4]");
}

TEST(CpuRefQuantModel, ScaleAndZeroPointShapesMustAgree) {
  expect_load_error(dq_model(kS8, {3}, {1, 1, 1}, kS8, {}), kDq,
                    "x_scale [3] and x_zero_point [] differ in shape");
  // A per-tensor scale makes the zero point per tensor too.
  expect_load_error(dq_model(kS8, {}, {1}, kS8, {3}), kDq,
                    "x_zero_point 'z' has shape [3], expected a scalar");
}

TEST(CpuRefQuantModel, ZeroPointDtypeMustBeTheQuantizedDtype) {
  // An int8 zero point of a uint8 weight, and the reverse.
  expect_load_error(dq_model(kU8, {}, {0.5f}, kS8, {}), kDq,
                    "input 'x_zero_point' ('z') has dtype int8 but input 'x' ('w') has uint8");
  expect_load_error(dq_model(kS8, {3}, {1, 1, 1}, kU8, {3}), kDq,
                    "input 'x_zero_point' ('z') has dtype uint8 but input 'x' ('w') has int8");
  // An int32 zero point of an int8 weight.
  expect_load_error(dq_model(kS8, {}, {0.5f}, kI32, {}), kDq,
                    "input 'x_zero_point' ('z') has dtype int32 but input 'x' ('w') has int8");
  // QuantizeLinear's y_zero_point makes the output type: int32 is not one.
  test::ModelBuilder q(13);
  q.input("x", {2, 3});
  q.init_f32("s", {}, {0.1f});
  q.init_ints("z", kI32, {}, {0});
  q.node("QuantizeLinear", {"x", "s", "z"}, {"y"}, "q_x");
  q.untyped_output("y");
  expect_load_error(q, "node 'q_x' (QuantizeLinear)",
                    "input 'y_zero_point' ('z') has dtype int32; QuantizeLinear takes");
  // QLinearConv: a uint8 w_zero_point of an int8 weight, an int32 y_zero_point.
  const char* node = "node 'qconv' (QLinearConv)";
  expect_load_error(qlinear_conv({0.5f, 0.25f, 1.0f}, 0.2f, kU8, kU8), node,
                    "input 'w_zero_point' ('wz') has dtype uint8 but input 'w' ('w') has int8");
  expect_load_error(qlinear_conv({0.5f, 0.25f, 1.0f}, 0.2f, kI32), node,
                    "input 'y_zero_point' ('yz') has dtype int32; QLinearConv takes");
}

}  // namespace
}  // namespace backplane::cpuref
