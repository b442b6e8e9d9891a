// Unit tests of CpuRef's nn kernels (backends/reference/kernels_nn*.cpp).
//
// Each test builds a one-node bp_graph_view_t by hand, makes the kernel through
// the KernelRegistry as the backend does, runs it, and compares with values
// from the ONNX operator documentation or with a naive implementation written
// here independently of the kernels (direct loops, double accumulation).
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"
#include "reference/kernel_util.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

constexpr bp_dtype_t F32 = BP_DTYPE_FLOAT32;

using test_harness::Node;

// The nn kernels alone, to check that this family registers every op it owns.
const KernelRegistry& nn_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_nn_kernels(reg);
    return reg;
  }();
  return r;
}

// Runs `k` with scratch and outputs pre-filled with NaN bytes, so a kernel
// that reads scratch before writing it, or leaves an output element unwritten,
// fails the comparison.
void run(const Kernel& k, std::vector<const void*> ins, std::vector<void*> outs) {
  const size_t bytes = (k.scratch_bytes() + 63) / 64 * 64;
  void* scratch = bytes ? std::aligned_alloc(64, bytes) : nullptr;
  if (scratch) std::memset(scratch, 0xFF, bytes);
  k.run(ins.data(), outs.data(), scratch);
  std::free(scratch);
}

std::vector<float> nan_buffer(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
}

// Runs a one-output kernel, returning the output.
std::vector<float> run1(Node& node, std::vector<const void*> ins) {
  auto k = node.kernel();
  std::vector<float> y = nan_buffer(numel(node.info().out_shapes[0]));
  run(*k, std::move(ins), {y.data()});
  return y;
}

std::vector<float> random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<float> iota_vec(int64_t n, float start = 0.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<float>(i);
  return v;
}

template <class Want>
void expect_close(const std::vector<float>& got, const std::vector<Want>& want, double tol,
                  const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = static_cast<double>(want[i]);
    const double t = tol * std::max(1.0, std::fabs(w));
    ASSERT_TRUE(std::fabs(got[i] - w) <= t || (std::isnan(w) && std::isnan(got[i])))
        << what << " element " << i << ": got " << got[i] << ", want " << w;
  }
}

void expect_rejected(Node& node, bp_status_code_t code, const std::string& fragment) {
  try {
    node.kernel();
    FAIL() << "factory accepted the node; expected a rejection mentioning '" << fragment << "'";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'n0'"), std::string::npos)
        << "message does not name the node: " << e.what();
  }
}

// ===========================================================================
// Naive references
// ===========================================================================

// Direct convolution; spatial rank 1..3 handled as 3-D with leading 1s.
struct ConvCase {
  Dims x;                         // N, C, spatial...
  Dims w;                         // M, C/group, k...
  Dims strides, dilations, pads;  // pads: begin..., end...
  int64_t group = 1;
  bool bias = false;
};

Dims conv_out_shape(const ConvCase& c) {
  const size_t r = c.x.size() - 2;
  Dims y{c.x[0], c.w[0]};
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = (c.w[2 + d] - 1) * c.dilations[d] + 1;
    y.push_back((c.x[2 + d] + c.pads[d] + c.pads[d + r] - span) / c.strides[d] + 1);
  }
  return y;
}

std::vector<double> conv_ref(const ConvCase& c, const std::vector<float>& x,
                             const std::vector<float>& w, const std::vector<float>& b,
                             const Dims& yshape) {
  const size_t r = c.x.size() - 2;
  auto ext = [](const Dims& v, int64_t fill) {  // right-align into 3 dims
    Dims e(3, fill);
    for (size_t i = 0; i < v.size(); ++i) e[3 - v.size() + i] = v[i];
    return e;
  };
  const Dims in = ext(Dims(c.x.begin() + 2, c.x.end()), 1),
             k = ext(Dims(c.w.begin() + 2, c.w.end()), 1);
  const Dims out = ext(Dims(yshape.begin() + 2, yshape.end()), 1);
  const Dims st = ext(c.strides, 1), dl = ext(c.dilations, 1);
  const Dims pd = ext(Dims(c.pads.begin(), c.pads.begin() + r), 0);
  const int64_t N = c.x[0], C = c.x[1], M = c.w[0], cg = C / c.group, mg = M / c.group;
  std::vector<double> y;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t o0 = 0; o0 < out[0]; ++o0)
        for (int64_t o1 = 0; o1 < out[1]; ++o1)
          for (int64_t o2 = 0; o2 < out[2]; ++o2) {
            double acc = c.bias ? b[m] : 0.0;
            const int64_t g = m / mg;
            for (int64_t ci = 0; ci < cg; ++ci)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t i0 = o0 * st[0] - pd[0] + k0 * dl[0];
                    const int64_t i1 = o1 * st[1] - pd[1] + k1 * dl[1];
                    const int64_t i2 = o2 * st[2] - pd[2] + k2 * dl[2];
                    if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] || i2 < 0 || i2 >= in[2])
                      continue;
                    const int64_t c_abs = g * cg + ci;
                    const double xv = x[(((n * C + c_abs) * in[0] + i0) * in[1] + i1) * in[2] + i2];
                    const double wv = w[(((m * cg + ci) * k[0] + k0) * k[1] + k1) * k[2] + k2];
                    acc += xv * wv;
                  }
            y.push_back(acc);
          }
  return y;
}

// Direct transposed convolution (scatter form).
std::vector<double> conv_transpose_ref(const Dims& xs, const Dims& ws, const Dims& ys,
                                       const Dims& strides, const Dims& dilations,
                                       const Dims& pad_begin, int64_t group,
                                       const std::vector<float>& x, const std::vector<float>& w,
                                       const std::vector<float>* b) {
  auto ext = [](const Dims& v, int64_t fill) {
    Dims e(3, fill);
    for (size_t i = 0; i < v.size(); ++i) e[3 - v.size() + i] = v[i];
    return e;
  };
  const Dims in = ext(Dims(xs.begin() + 2, xs.end()), 1),
             out = ext(Dims(ys.begin() + 2, ys.end()), 1);
  const Dims k = ext(Dims(ws.begin() + 2, ws.end()), 1);
  const Dims st = ext(strides, 1), dl = ext(dilations, 1), pd = ext(pad_begin, 0);
  const int64_t N = xs[0], C = xs[1], mg = ws[1], M = mg * group, cg = C / group;
  const int64_t os = out[0] * out[1] * out[2];
  std::vector<double> y(static_cast<size_t>(N * M * os), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t p = 0; p < os; ++p) y[(n * M + m) * os + p] = b ? (*b)[m] : 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t g = c / cg;
      for (int64_t i0 = 0; i0 < in[0]; ++i0)
        for (int64_t i1 = 0; i1 < in[1]; ++i1)
          for (int64_t i2 = 0; i2 < in[2]; ++i2) {
            const double xv = x[(((n * C + c) * in[0] + i0) * in[1] + i1) * in[2] + i2];
            for (int64_t mm = 0; mm < mg; ++mm)
              for (int64_t k0 = 0; k0 < k[0]; ++k0)
                for (int64_t k1 = 0; k1 < k[1]; ++k1)
                  for (int64_t k2 = 0; k2 < k[2]; ++k2) {
                    const int64_t o0 = i0 * st[0] - pd[0] + k0 * dl[0];
                    const int64_t o1 = i1 * st[1] - pd[1] + k1 * dl[1];
                    const int64_t o2 = i2 * st[2] - pd[2] + k2 * dl[2];
                    if (o0 < 0 || o0 >= out[0] || o1 < 0 || o1 >= out[1] || o2 < 0 || o2 >= out[2])
                      continue;
                    const double wv = w[(((c * mg + mm) * k[0] + k0) * k[1] + k1) * k[2] + k2];
                    const int64_t m = g * mg + mm;
                    y[(n * M + m) * os + (o0 * out[1] + o1) * out[2] + o2] += xv * wv;
                  }
          }
    }
  return y;
}

// Naive 2-D pooling over [N, C, H, W] with explicit pads.
std::vector<double> pool2d_ref(const std::vector<float>& x, const Dims& xs, const Dims& ys,
                               const Dims& k, const Dims& s, const Dims& pads, bool max,
                               bool count_include_pad, std::vector<int64_t>* argmax = nullptr) {
  const int64_t H = xs[2], W = xs[3], OH = ys[2], OW = ys[3];
  std::vector<double> y;
  for (int64_t p = 0; p < xs[0] * xs[1]; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -INFINITY, sum = 0;
        int64_t best_at = -1, valid = 0, padded = 0;
        for (int64_t kh = 0; kh < k[0]; ++kh)
          for (int64_t kw = 0; kw < k[1]; ++kw) {
            const int64_t h = oh * s[0] - pads[0] + kh, w = ow * s[1] - pads[1] + kw;
            if (h >= -pads[0] && h < H + pads[2] && w >= -pads[1] && w < W + pads[3]) ++padded;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = x[(p * H + h) * W + w];
            ++valid;
            sum += v;
            if (v > best) {
              best = v;
              best_at = p * H * W + h * W + w;
            }
          }
        y.push_back(max ? best : sum / static_cast<double>(count_include_pad ? padded : valid));
        if (argmax) argmax->push_back(best_at);
      }
  return y;
}

// ===========================================================================
// Conv
// ===========================================================================

TEST(CpuRefNn, RegistersEveryNnOp) {
  for (const char* op :
       {"Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool",
        "GlobalMaxPool", "BatchNormalization", "LayerNormalization", "InstanceNormalization",
        "Softmax", "LogSoftmax", "Resize"})
    EXPECT_NE(nn_registry().find(op), nullptr) << op;
}

// ONNX Operators.md, Conv example "conv_with_padding" / "conv_without_padding".
TEST(CpuRefNn, ConvOnnxExamplePadding) {
  const std::vector<float> x = iota_vec(25);
  const std::vector<float> w(9, 1.0f);
  Node padded("Conv", 11);
  padded.in({1, 1, 5, 5})
      .in({1, 1, 3, 3})
      .out({1, 1, 5, 5})
      .ints("kernel_shape", {3, 3})
      .ints("pads", {1, 1, 1, 1});
  expect_close(run1(padded, {x.data(), w.data()}),
               std::vector<float>{12,  21, 27, 33,  24,  33,  54,  63, 72,  51,  63,  99, 108,
                                  117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84},
               1e-6);
  Node unpadded("Conv", 11);
  unpadded.in({1, 1, 5, 5}).in({1, 1, 3, 3}).out({1, 1, 3, 3}).ints("kernel_shape", {3, 3});
  expect_close(run1(unpadded, {x.data(), w.data()}),
               std::vector<float>{54, 63, 72, 99, 108, 117, 144, 153, 162}, 1e-6);
}

// ONNX example "conv_with_autopad_same": SAME_LOWER, stride 2.
TEST(CpuRefNn, ConvAutoPadSameLowerAndUpper) {
  const std::vector<float> x = iota_vec(25);
  const std::vector<float> w(9, 1.0f);
  Node lower("Conv", 11);
  lower.in({1, 1, 5, 5})
      .in({1, 1, 3, 3})
      .out({1, 1, 3, 3})
      .s("auto_pad", "SAME_LOWER")
      .ints("strides", {2, 2});
  expect_close(run1(lower, {x.data(), w.data()}),
               std::vector<float>{12, 27, 24, 63, 108, 81, 72, 117, 84}, 1e-6);
  // 4x4 input, 3x3 kernel, stride 2: total padding 1, at the end for SAME_UPPER.
  const std::vector<float> x4 = iota_vec(16);
  Node upper("Conv", 11);
  upper.in({1, 1, 4, 4})
      .in({1, 1, 3, 3})
      .out({1, 1, 2, 2})
      .s("auto_pad", "SAME_UPPER")
      .ints("strides", {2, 2});
  ConvCase c{{1, 1, 4, 4}, {1, 1, 3, 3}, {2, 2}, {1, 1}, {0, 0, 1, 1}};
  expect_close(run1(upper, {x4.data(), w.data()}), conv_ref(c, x4, w, {}, {1, 1, 2, 2}), 1e-6);
  Node lower4("Conv", 11);
  lower4.in({1, 1, 4, 4})
      .in({1, 1, 3, 3})
      .out({1, 1, 2, 2})
      .s("auto_pad", "SAME_LOWER")
      .ints("strides", {2, 2});
  c.pads = {1, 1, 0, 0};
  expect_close(run1(lower4, {x4.data(), w.data()}), conv_ref(c, x4, w, {}, {1, 1, 2, 2}), 1e-6);
}

TEST(CpuRefNn, ConvMatchesNaiveAcrossConfigurations) {
  const std::vector<ConvCase> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true},
      {{1, 4, 9, 8}, {6, 2, 3, 2}, {2, 1}, {1, 2}, {0, 1, 2, 0}, 2, true},   // groups, asym pads
      {{1, 6, 8, 8}, {6, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}, 6, false},  // depthwise
      {{1, 5, 6, 7}, {9, 5, 1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1, true},   // pointwise fast path
      {{1, 5, 6, 7}, {3, 5, 1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1, false},  // strided 1x1
      {{2, 3, 11}, {5, 3, 4}, {3}, {2}, {2, 1}, 1, true},                    // 1-D
      {{1, 2, 5, 6, 4}, {3, 2, 2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 1, 1}, 1, true},  // 3-D
      {{1, 7, 13, 11}, {37, 7, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, true},  // several GEMM row
                                                                               // tiles
  };
  uint32_t seed = 1;
  for (const ConvCase& c : cases) {
    const Dims ys = conv_out_shape(c);
    const std::vector<float> x = random_vec(numel(c.x), seed++), w = random_vec(numel(c.w), seed++),
                             b = random_vec(c.w[0], seed++);
    Node node("Conv", 11);
    node.in(c.x).in(c.w);
    if (c.bias) node.in({c.w[0]});
    node.out(ys)
        .ints("strides", c.strides)
        .ints("dilations", c.dilations)
        .ints("pads", c.pads)
        .i("group", c.group);
    std::vector<const void*> ins{x.data(), w.data()};
    if (c.bias) ins.push_back(b.data());
    expect_close(run1(node, ins), conv_ref(c, x, w, b, ys), 1e-4, "case " + std::to_string(seed));
  }
}

TEST(CpuRefNn, ConvRejectsUnsupportedAndInconsistentNodes) {
  Node int8("Conv", 11);
  int8.in({1, 1, 3, 3}, BP_DTYPE_INT8)
      .in({1, 1, 3, 3}, BP_DTYPE_INT8)
      .out({1, 1, 1, 1}, BP_DTYPE_INT8);
  expect_rejected(int8, BP_STATUS_UNSUPPORTED, "int8");
  Node wrong_out("Conv", 11);
  wrong_out.in({1, 1, 5, 5}).in({1, 1, 3, 3}).out({1, 1, 5, 5});  // no pads: must be 3x3
  expect_rejected(wrong_out, BP_STATUS_INVALID_ARGUMENT, "output shape");
  Node bad_group("Conv", 11);
  bad_group.in({1, 3, 5, 5}).in({2, 3, 3, 3}).out({1, 2, 3, 3}).i("group", 2);
  expect_rejected(bad_group, BP_STATUS_INVALID_ARGUMENT, "group");
}

// ===========================================================================
// ConvTranspose
// ===========================================================================

// ONNX Operators.md, ConvTranspose example "convtranspose".
TEST(CpuRefNn, ConvTransposeOnnxExample) {
  const std::vector<float> x = iota_vec(9);
  const std::vector<float> w(18, 1.0f);
  Node node("ConvTranspose", 11);
  node.in({1, 1, 3, 3}).in({1, 2, 3, 3}).out({1, 2, 5, 5});
  const std::vector<float> plane{0,  1,  3, 3,  2,  3,  8,  15, 12, 7,  9,  21, 36,
                                 27, 15, 9, 20, 33, 24, 13, 6,  13, 21, 15, 8};
  std::vector<float> want = plane;
  want.insert(want.end(), plane.begin(), plane.end());
  expect_close(run1(node, {x.data(), w.data()}), want, 1e-6);
}

TEST(CpuRefNn, ConvTransposeMatchesNaive) {
  struct Case {
    Dims x, w, y, strides, dilations, pads, output_padding;
    int64_t group;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{1, 2, 3, 4}, {2, 3, 3, 3}, {1, 3, 7, 9}, {2, 2}, {1, 1}, {0, 0, 0, 0}, {0, 0}, 1, true},
      {{2, 4, 3, 3}, {4, 2, 2, 3}, {2, 4, 6, 4}, {2, 1}, {1, 1}, {1, 0, 0, 1}, {1, 0}, 2, true},
      {{1, 3, 4}, {3, 2, 3}, {1, 2, 14}, {3}, {2}, {1, 1}, {2}, 1, false},  // 1-D, dilation
      {{1, 2, 2, 3, 2},
       {2, 2, 2, 2, 3},
       {1, 2, 4, 4, 2},
       {2, 1, 1},
       {1, 1, 1},
       {0, 0, 1, 0, 0, 1},
       {0, 0, 0},
       1,
       true},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    const std::vector<float> x = random_vec(numel(c.x), seed++), w = random_vec(numel(c.w), seed++);
    const int64_t m = c.w[1] * c.group;
    const std::vector<float> b = random_vec(m, seed++);
    Node node("ConvTranspose", 11);
    node.in(c.x).in(c.w);
    if (c.bias) node.in({m});
    node.out(c.y)
        .ints("strides", c.strides)
        .ints("dilations", c.dilations)
        .ints("pads", c.pads)
        .ints("output_padding", c.output_padding)
        .i("group", c.group);
    std::vector<const void*> ins{x.data(), w.data()};
    if (c.bias) ins.push_back(b.data());
    const size_t r = c.x.size() - 2;
    const Dims pb(c.pads.begin(), c.pads.begin() + r);
    expect_close(run1(node, ins),
                 conv_transpose_ref(c.x, c.w, c.y, c.strides, c.dilations, pb, c.group, x, w,
                                    c.bias ? &b : nullptr),
                 1e-4, "case " + std::to_string(seed));
  }
}

// ONNX examples "convtranspose_output_shape" (output larger than the full
// result: the extra row/column is zero) and "convtranspose_autopad_same".
TEST(CpuRefNn, ConvTransposeOutputShapeAndAutoPad) {
  const std::vector<float> x = iota_vec(9);
  const std::vector<float> w(18, 1.0f);
  Node shaped("ConvTranspose", 11);
  shaped.in({1, 1, 3, 3})
      .in({1, 2, 3, 3})
      .out({1, 2, 10, 8})
      .ints("strides", {3, 2})
      .ints("output_shape", {10, 8});
  const std::vector<float> got = run1(shaped, {x.data(), w.data()});
  expect_close(got,
               conv_transpose_ref({1, 1, 3, 3}, {1, 2, 3, 3}, {1, 2, 10, 8}, {3, 2}, {1, 1}, {0, 0},
                                  1, x, w, nullptr),
               1e-6);
  EXPECT_EQ(got[0 * 8 + 1], 0.0f);  // x[0]=0 contributes nothing
  EXPECT_EQ(got[1 * 8 + 2], 1.0f);  // only x[0][1] reaches (1, 2)
  EXPECT_EQ(got[9 * 8 + 7], 0.0f);  // the extra last row

  // SAME_UPPER, stride 2: output 6x6 from the full 7x7, one row/column cut at the end.
  Node same("ConvTranspose", 11);
  same.in({1, 1, 3, 3})
      .in({1, 2, 3, 3})
      .out({1, 2, 6, 6})
      .ints("strides", {2, 2})
      .s("auto_pad", "SAME_UPPER");
  const std::vector<float> same_plane{0, 0, 1, 1, 3, 2, 0, 0, 1,  1,  3,  2,  3, 3, 8,  5, 12, 7,
                                      3, 3, 7, 4, 9, 5, 9, 9, 20, 11, 24, 13, 6, 6, 13, 7, 15, 8};
  const std::vector<float> same_got = run1(same, {x.data(), w.data()});
  expect_close(std::vector<float>(same_got.begin(), same_got.begin() + 36), same_plane, 1e-6,
               "ONNX convtranspose_autopad_same");
  expect_close(same_got,
               conv_transpose_ref({1, 1, 3, 3}, {1, 2, 3, 3}, {1, 2, 6, 6}, {2, 2}, {1, 1}, {0, 0},
                                  1, x, w, nullptr),
               1e-6);
  Node same_lower("ConvTranspose", 11);
  same_lower.in({1, 1, 3, 3})
      .in({1, 2, 3, 3})
      .out({1, 2, 6, 6})
      .ints("strides", {2, 2})
      .s("auto_pad", "SAME_LOWER");
  expect_close(run1(same_lower, {x.data(), w.data()}),
               conv_transpose_ref({1, 1, 3, 3}, {1, 2, 3, 3}, {1, 2, 6, 6}, {2, 2}, {1, 1}, {1, 1},
                                  1, x, w, nullptr),
               1e-6);
}

// ===========================================================================
// Gemm / MatMul
// ===========================================================================

std::vector<double> matmul_ref(const std::vector<float>& a, const std::vector<float>& b, int64_t m,
                               int64_t k, int64_t n) {
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p)
        y[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
  return y;
}

std::vector<float> transpose(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}

TEST(CpuRefNn, GemmTransposesAlphaBetaAndBroadcastC) {
  const int64_t M = 5, K = 7, N = 6;
  const std::vector<float> a = random_vec(M * K, 1), b = random_vec(K * N, 2);
  const std::vector<double> ab = matmul_ref(a, b, M, K, N);
  struct Case {
    bool ta, tb;
    Dims c_shape;
  };
  for (const Case& c : std::vector<Case>{{false, false, {M, N}},
                                         {true, false, {N}},
                                         {false, true, {M, 1}},
                                         {true, true, {}},
                                         {false, false, {1, N}}}) {
    const std::vector<float> cv = random_vec(std::max<int64_t>(1, numel(c.c_shape)), 3);
    const std::vector<float> at = c.ta ? transpose(a, M, K) : a, bt = c.tb ? transpose(b, K, N) : b;
    Node node("Gemm", 13);
    node.in(c.ta ? Dims{K, M} : Dims{M, K})
        .in(c.tb ? Dims{N, K} : Dims{K, N})
        .in(c.c_shape)
        .out({M, N})
        .i("transA", c.ta)
        .i("transB", c.tb)
        .f("alpha", 0.5f)
        .f("beta", -2.0f);
    std::vector<double> want(ab.size());
    const Dims c2 = c.c_shape.size() == 2   ? c.c_shape
                    : c.c_shape.size() == 1 ? Dims{1, c.c_shape[0]}
                                            : Dims{1, 1};
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        want[i * N + j] =
            0.5 * ab[i * N + j] - 2.0 * cv[(c2[0] == 1 ? 0 : i) * c2[1] + (c2[1] == 1 ? 0 : j)];
    expect_close(run1(node, {at.data(), bt.data(), cv.data()}), want, 1e-5,
                 "transA=" + std::to_string(c.ta) + " transB=" + std::to_string(c.tb));
  }
  Node no_c("Gemm", 13);
  no_c.in({M, K}).in({N, K}).none().out({M, N}).i("transB", 1);
  const std::vector<float> bt = transpose(b, K, N);
  expect_close(run1(no_c, {a.data(), bt.data(), nullptr}), ab, 1e-5, "no C");
}

// Gemm in float64 and float16, against the float32 case's formula in double:
// transposed A and B, alpha, beta, a C broadcast along rows.
TEST(CpuRefNn, GemmOfFloat64AndFloat16) {
  const int64_t M = 3, K = 4, N = 2;
  std::vector<double> a(M * K), b(K * N), c(N), want(M * N);
  for (int64_t i = 0; i < M * K; ++i) a[i] = static_cast<double>(i % 5) - 2;
  for (int64_t i = 0; i < K * N; ++i) b[i] = static_cast<double>(i % 3) + 1;
  for (int64_t j = 0; j < N; ++j) c[j] = static_cast<double>(j) + 1;
  // A is given as A^T [K, M], B as B^T [N, K].
  std::vector<double> at(K * M), bt(N * K);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t q = 0; q < K; ++q) at[q * M + i] = a[i * K + q];
  for (int64_t q = 0; q < K; ++q)
    for (int64_t j = 0; j < N; ++j) bt[j * K + q] = b[q * N + j];
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = 0;
      for (int64_t q = 0; q < K; ++q) sum += a[i * K + q] * b[q * N + j];
      want[i * N + j] = 0.5 * sum - 2.0 * c[j];
    }
  auto node_of = [&](Node& node, bp_dtype_t dt) -> Node& {
    return node.in({K, M}, dt)
        .in({N, K}, dt)
        .in({N}, dt)
        .out({M, N}, dt)
        .i("transA", 1)
        .i("transB", 1)
        .f("alpha", 0.5f)
        .f("beta", -2.0f);
  };
  Node f64("Gemm", 13);
  std::vector<double> y64(M * N, std::numeric_limits<double>::quiet_NaN());
  run(*node_of(f64, BP_DTYPE_FLOAT64).kernel(), {at.data(), bt.data(), c.data()}, {y64.data()});
  EXPECT_EQ(y64, want);
  // float16: every value here is a small integer or half of one, exact.
  auto halves = [](const std::vector<double>& v) {
    std::vector<f16> out;
    for (double x : v) out.push_back(f16{float_to_half(static_cast<float>(x))});
    return out;
  };
  const std::vector<f16> at16 = halves(at), bt16 = halves(bt), c16 = halves(c);
  std::vector<f16> y16(M * N, f16{0x7e00});
  Node f16n("Gemm", 13);
  run(*node_of(f16n, BP_DTYPE_FLOAT16).kernel(), {at16.data(), bt16.data(), c16.data()},
      {y16.data()});
  for (int64_t i = 0; i < M * N; ++i)
    EXPECT_EQ(half_to_float(y16[i].bits), static_cast<float>(want[i])) << "element " << i;
  // Integers: alpha and beta are floats, so no integer Gemm.
  Node ints("Gemm", 13);
  ints.in({M, K}, BP_DTYPE_INT64).in({K, N}, BP_DTYPE_INT64).out({M, N}, BP_DTYPE_INT64);
  expect_rejected(ints, BP_STATUS_UNSUPPORTED, "dtype int64 is not supported");
}

TEST(CpuRefNn, MatMulBroadcastsBatchesAndVectors) {
  struct Case {
    Dims a, b, y;
  };
  const std::vector<Case> cases = {
      {{2, 1, 3, 4}, {3, 4, 5}, {2, 3, 3, 5}},
      {{4}, {4, 5}, {5}},
      {{2, 3, 4}, {4}, {2, 3}},
      {{4}, {4}, {}},
      {{3, 2, 4}, {4, 6}, {3, 2, 6}},  // folds into one taller GEMM
      {{4, 2}, {3, 2, 5}, {3, 4, 5}},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    const std::vector<float> a = random_vec(numel(c.a), seed++), b = random_vec(numel(c.b), seed++);
    Node node("MatMul", 13);
    node.in(c.a).in(c.b).out(c.y);
    // Reference: promote vectors, broadcast batch dims by explicit index arithmetic.
    Dims as = c.a, bs = c.b;
    if (as.size() == 1) as.insert(as.begin(), 1);
    if (bs.size() == 1) bs.push_back(1);
    const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
    const size_t rank = std::max(as.size(), bs.size()) - 2;
    Dims ab(rank, 1), bb(rank, 1), batch(rank);
    for (size_t d = 0; d < as.size() - 2; ++d) ab[rank - (as.size() - 2) + d] = as[d];
    for (size_t d = 0; d < bs.size() - 2; ++d) bb[rank - (bs.size() - 2) + d] = bs[d];
    for (size_t d = 0; d < rank; ++d) batch[d] = std::max(ab[d], bb[d]);
    std::vector<double> want;
    for (int64_t bi = 0; bi < numel(batch); ++bi) {
      int64_t rem = bi, ai = 0, bj = 0, amul = 1, bmul = 1;
      for (size_t d = rank; d-- > 0;) {
        const int64_t idx = rem % batch[d];
        rem /= batch[d];
        ai += (ab[d] == 1 ? 0 : idx) * amul;
        bj += (bb[d] == 1 ? 0 : idx) * bmul;
        amul *= ab[d];
        bmul *= bb[d];
      }
      const std::vector<float> asub(a.begin() + ai * m * k, a.begin() + (ai + 1) * m * k);
      const std::vector<float> bsub(b.begin() + bj * k * n, b.begin() + (bj + 1) * k * n);
      const std::vector<double> part = matmul_ref(asub, bsub, m, k, n);
      want.insert(want.end(), part.begin(), part.end());
    }
    expect_close(run1(node, {a.data(), b.data()}), want, 1e-5, "case " + std::to_string(seed));
  }
}

TEST(CpuRefNn, MatMulLargeBlockedPath) {
  // Crosses the GEMM's row-tile (4), column-block (256) and depth-block (128) edges.
  const int64_t M = 37, K = 300, N = 521;
  const std::vector<float> a = random_vec(M * K, 21), b = random_vec(K * N, 22);
  Node node("MatMul", 13);
  node.in({M, K}).in({K, N}).out({M, N});
  expect_close(run1(node, {a.data(), b.data()}), matmul_ref(a, b, M, K, N), 1e-4);
}

TEST(CpuRefNn, MatMulSumsLongDepthsInBlocks) {
  // Positive terms over a long depth: one running sum per element erred by
  // 6.4e-6 relative here (measured); a sum per depth block of 128, then
  // over the blocks, by 5.5e-7. Deep nets amplify the difference.
  const int64_t M = 8, K = 16384, N = 64;
  const std::vector<float> a = random_vec(M * K, 31, 0.0f, 1.0f);
  const std::vector<float> b = random_vec(K * N, 32, 0.0f, 1.0f);
  Node node("MatMul", 13);
  node.in({M, K}).in({K, N}).out({M, N});
  const std::vector<float> got = run1(node, {a.data(), b.data()});
  const std::vector<double> want = matmul_ref(a, b, M, K, N);
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(got[i] - want[i]) / want[i]);
  EXPECT_LT(worst, 1.5e-6);
}

// MatMul of every dtype ONNX allows, against direct loops here: a batched A
// times a broadcast B. Integers wrap on overflow; the 16-bit floats are summed
// in float32 and rounded once.
template <class T>
void check_typed_matmul(bp_dtype_t dtype, const std::vector<T>& a, const std::vector<T>& b,
                        const std::vector<T>& want) {
  Node node("MatMul", 13);
  node.in({2, 2, 3}, dtype).in({3, 2}, dtype).out({2, 2, 2}, dtype);
  auto k = node.kernel();
  std::vector<T> y(want.size());
  std::memset(y.data(), 0xFF, y.size() * sizeof(T));
  run(*k, {a.data(), b.data()}, {y.data()});
  EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * sizeof(T))) << sdk::dtype_name(dtype);
}

TEST(CpuRefNn, MatMulOfEveryDtype) {
  // A [2,2,3] = 1..12, B [3,2] = 1..6: rows of A times B.
  std::vector<double> a(12), b(6), y(8);
  for (int i = 0; i < 12; ++i) a[i] = i + 1;
  for (int i = 0; i < 6; ++i) b[i] = i + 1;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 2; ++c)
      for (int j = 0; j < 3; ++j) y[r * 2 + c] += a[r * 3 + j] * b[j * 2 + c];
  auto as = [](const std::vector<double>& v, auto tag) {
    std::vector<decltype(tag)> out;
    for (double x : v) out.push_back(static_cast<decltype(tag)>(x));
    return out;
  };
  check_typed_matmul(BP_DTYPE_FLOAT64, a, b, y);
  check_typed_matmul(BP_DTYPE_INT32, as(a, int32_t{}), as(b, int32_t{}), as(y, int32_t{}));
  check_typed_matmul(BP_DTYPE_INT64, as(a, int64_t{}), as(b, int64_t{}), as(y, int64_t{}));
  check_typed_matmul(BP_DTYPE_UINT32, as(a, uint32_t{}), as(b, uint32_t{}), as(y, uint32_t{}));
  check_typed_matmul(BP_DTYPE_UINT64, as(a, uint64_t{}), as(b, uint64_t{}), as(y, uint64_t{}));
  // float16: every value here (at most 1,022) is exact.
  auto halves = [](const std::vector<double>& v) {
    std::vector<f16> out;
    for (double x : v) out.push_back(f16{float_to_half(static_cast<float>(x))});
    return out;
  };
  check_typed_matmul(BP_DTYPE_FLOAT16, halves(a), halves(b), halves(y));
  // bfloat16: 8 significant bits, so keep products and sums small and exact.
  auto bhalves = [](const std::vector<double>& v) {
    std::vector<uint16_t> out;
    for (double x : v) {
      const float f = static_cast<float>(x);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof(bits));
      out.push_back(static_cast<uint16_t>(bits >> 16));
    }
    return out;
  };
  std::vector<double> a2(12, 1.0), b2(6, 2.0), y2(8, 6.0);
  check_typed_matmul(BP_DTYPE_BFLOAT16, bhalves(a2), bhalves(b2), bhalves(y2));
  // int32 overflow wraps: each element is 3 * (2^30 + 1) * 3 modulo 2^32.
  std::vector<int32_t> big(12, (1 << 30) + 1), threes(6, 3), wrapped(8);
  for (auto& w : wrapped) w = static_cast<int32_t>(((1u << 30) + 1u) * 3u * 3u);
  check_typed_matmul(BP_DTYPE_INT32, big, threes, wrapped);
}

TEST(CpuRefNn, MatMulRejectsMixedDtypesAndBool) {
  Node mixed("MatMul", 13);
  mixed.in({2, 3}).in({3, 2}, BP_DTYPE_FLOAT64).out({2, 2});
  expect_rejected(mixed, BP_STATUS_INVALID_ARGUMENT, "one dtype");
  Node boolean("MatMul", 13);
  boolean.in({2, 3}, BP_DTYPE_BOOL).in({3, 2}, BP_DTYPE_BOOL).out({2, 2}, BP_DTYPE_BOOL);
  expect_rejected(boolean, BP_STATUS_UNSUPPORTED, "dtype bool is not supported");
}

TEST(CpuRefNn, MatMulRejectsMismatchedInnerDims) {
  Node node("MatMul", 13);
  node.in({2, 3}).in({4, 5}).out({2, 5});
  expect_rejected(node, BP_STATUS_INVALID_ARGUMENT, "inner dimensions");
}

// ===========================================================================
// Pooling
// ===========================================================================

TEST(CpuRefNn, MaxPoolMatchesNaiveWithIndices) {
  const Dims xs{2, 3, 7, 8}, ys{2, 3, 4, 4};
  const std::vector<float> x = random_vec(numel(xs), 5);
  Node node("MaxPool", 12);
  node.in(xs)
      .out(ys)
      .out(ys, BP_DTYPE_INT64)
      .ints("kernel_shape", {3, 3})
      .ints("strides", {2, 2})
      .ints("pads", {1, 1, 1, 0});
  auto k = node.kernel();
  std::vector<float> y = nan_buffer(numel(ys));
  std::vector<int64_t> idx(static_cast<size_t>(numel(ys)), -7);
  run(*k, {x.data()}, {y.data(), idx.data()});
  std::vector<int64_t> want_idx;
  expect_close(y, pool2d_ref(x, xs, ys, {3, 3}, {2, 2}, {1, 1, 1, 0}, true, false, &want_idx), 0);
  EXPECT_EQ(idx, want_idx);

  // storage_order = 1: indices count down columns first.
  Node col("MaxPool", 12);
  col.in(xs)
      .out(ys)
      .out(ys, BP_DTYPE_INT64)
      .ints("kernel_shape", {3, 3})
      .ints("strides", {2, 2})
      .ints("pads", {1, 1, 1, 0})
      .i("storage_order", 1);
  auto kc = col.kernel();
  std::vector<int64_t> idx_col(idx.size(), -7);
  run(*kc, {x.data()}, {y.data(), idx_col.data()});
  for (size_t i = 0; i < idx.size(); ++i) {
    const int64_t plane = idx[i] / 56, h = idx[i] % 56 / 8, w = idx[i] % 8;
    ASSERT_EQ(idx_col[i], plane * 56 + w * 7 + h) << i;
  }
}

// ONNX examples "maxpool_2d_ceil" and "maxpool_2d_dilations".
TEST(CpuRefNn, MaxPoolCeilModeAndDilations) {
  const std::vector<float> x = iota_vec(16, 1);
  Node ceil("MaxPool", 12);
  ceil.in({1, 1, 4, 4})
      .out({1, 1, 2, 2})
      .ints("kernel_shape", {3, 3})
      .ints("strides", {2, 2})
      .i("ceil_mode", 1);
  expect_close(run1(ceil, {x.data()}), std::vector<float>{11, 12, 15, 16}, 0);
  Node dil("MaxPool", 12);
  dil.in({1, 1, 4, 4}).out({1, 1, 2, 2}).ints("kernel_shape", {2, 2}).ints("dilations", {2, 2});
  expect_close(run1(dil, {x.data()}), std::vector<float>{11, 12, 15, 16}, 0);
  // 1-D and 3-D share the code path: check a 1-D case by hand.
  const std::vector<float> x1{3, -1, 4, 1, -5, 9, 2};
  Node one("MaxPool", 12);
  one.in({1, 1, 7})
      .out({1, 1, 3})
      .ints("kernel_shape", {3})
      .ints("strides", {3})
      .ints("pads", {1, 1});
  expect_close(run1(one, {x1.data()}), std::vector<float>{3, 4, 9}, 0);
}

// Ties: the first maximum in row-major window order wins (as in ONNX Runtime).
TEST(CpuRefNn, MaxPoolIndicesPreferFirstMaximum) {
  const std::vector<float> x{1, 5, 5, 0, 5, 5, 2, 5, 5};
  Node node("MaxPool", 12);
  node.in({1, 1, 3, 3})
      .out({1, 1, 2, 2})
      .out({1, 1, 2, 2}, BP_DTYPE_INT64)
      .ints("kernel_shape", {2, 2});
  auto k = node.kernel();
  std::vector<float> y = nan_buffer(4);
  std::vector<int64_t> idx(4, -7);
  run(*k, {x.data()}, {y.data(), idx.data()});
  expect_close(y, std::vector<float>{5, 5, 5, 5}, 0);
  EXPECT_EQ(idx, (std::vector<int64_t>{1, 1, 4, 4}));
}

// ONNX examples "averagepool_2d_pads" / "averagepool_2d_pads_count_include_pad"
// (checked with the naive reference) and "averagepool_2d_ceil".
TEST(CpuRefNn, AveragePoolPadsCountIncludePadAndCeil) {
  const Dims xs{1, 3, 28, 28}, ys{1, 3, 30, 30};
  const std::vector<float> x = random_vec(numel(xs), 6);
  for (int include : {0, 1}) {
    Node node("AveragePool", 11);
    node.in(xs)
        .out(ys)
        .ints("kernel_shape", {3, 3})
        .ints("pads", {2, 2, 2, 2})
        .i("count_include_pad", include);
    expect_close(run1(node, {x.data()}),
                 pool2d_ref(x, xs, ys, {3, 3}, {1, 1}, {2, 2, 2, 2}, false, include), 1e-5,
                 "count_include_pad=" + std::to_string(include));
  }
  const std::vector<float> x16 = iota_vec(16, 1);
  Node ceil("AveragePool", 11);
  ceil.in({1, 1, 4, 4})
      .out({1, 1, 2, 2})
      .ints("kernel_shape", {3, 3})
      .ints("strides", {2, 2})
      .i("ceil_mode", 1);
  expect_close(run1(ceil, {x16.data()}), std::vector<float>{6, 7.5, 12, 13.5}, 1e-6);
  // ceil_mode with count_include_pad: taps beyond the end padding are not counted.
  Node ceil_pad("AveragePool", 11);
  ceil_pad.in({1, 1, 4, 4})
      .out({1, 1, 3, 3})
      .ints("kernel_shape", {2, 2})
      .ints("strides", {2, 2})
      .ints("pads", {1, 1, 0, 0})
      .i("ceil_mode", 1)
      .i("count_include_pad", 1);
  expect_close(
      run1(ceil_pad, {x16.data()}),
      pool2d_ref(x16, {1, 1, 4, 4}, {1, 1, 3, 3}, {2, 2}, {2, 2}, {1, 1, 0, 0}, false, true), 1e-6);
}

TEST(CpuRefNn, AveragePoolSameUpperAndLower) {
  const Dims xs{1, 2, 5, 5}, ys{1, 2, 5, 5};
  const std::vector<float> x = random_vec(numel(xs), 7);
  Node upper("AveragePool", 11);
  upper.in(xs).out(ys).ints("kernel_shape", {2, 2}).s("auto_pad", "SAME_UPPER");
  expect_close(run1(upper, {x.data()}),
               pool2d_ref(x, xs, ys, {2, 2}, {1, 1}, {0, 0, 1, 1}, false, false), 1e-5);
  Node lower("AveragePool", 11);
  lower.in(xs).out(ys).ints("kernel_shape", {2, 2}).s("auto_pad", "SAME_LOWER");
  expect_close(run1(lower, {x.data()}),
               pool2d_ref(x, xs, ys, {2, 2}, {1, 1}, {1, 1, 0, 0}, false, false), 1e-5);
}

TEST(CpuRefNn, GlobalPools) {
  const Dims xs{2, 3, 4, 5};
  const std::vector<float> x = random_vec(numel(xs), 8);
  std::vector<double> avg, mx;
  for (int64_t p = 0; p < 6; ++p) {
    double s = 0, m = -INFINITY;
    for (int64_t i = 0; i < 20; ++i) {
      s += x[p * 20 + i];
      m = std::max<double>(m, x[p * 20 + i]);
    }
    avg.push_back(s / 20);
    mx.push_back(m);
  }
  Node ga("GlobalAveragePool", 13);
  ga.in(xs).out({2, 3, 1, 1});
  expect_close(run1(ga, {x.data()}), avg, 1e-6);
  Node gm("GlobalMaxPool", 13);
  gm.in(xs).out({2, 3, 1, 1});
  expect_close(run1(gm, {x.data()}), mx, 0);
}

TEST(CpuRefNn, PoolRejectsFloat16AndMissingKernelShape) {
  Node half("MaxPool", 12);
  half.in({1, 1, 4, 4}, BP_DTYPE_FLOAT16)
      .out({1, 1, 2, 2}, BP_DTYPE_FLOAT16)
      .ints("kernel_shape", {2, 2})
      .ints("strides", {2, 2});
  expect_rejected(half, BP_STATUS_UNSUPPORTED, "float16");
  Node no_kernel("AveragePool", 11);
  no_kernel.in({1, 1, 4, 4}).out({1, 1, 2, 2});
  expect_rejected(no_kernel, BP_STATUS_INVALID_ARGUMENT, "kernel_shape");
}

// ===========================================================================
// Normalisation
// ===========================================================================

TEST(CpuRefNn, BatchNormalizationInference) {
  const Dims xs{2, 3, 2, 2};
  const std::vector<float> x = random_vec(numel(xs), 9);
  const std::vector<float> scale{0.5f, 1.5f, -1.0f}, bias{0.1f, 0.0f, 2.0f},
      mean{0.2f, -0.3f, 0.0f}, var{1.0f, 0.25f, 4.0f};
  Node node("BatchNormalization", 15);
  node.in(xs).in({3}).in({3}).in({3}).in({3}).out(xs).f("epsilon", 1e-3f);
  std::vector<double> want;
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < 4; ++i)
        want.push_back((x[(n * 3 + c) * 4 + i] - mean[c]) / std::sqrt(var[c] + 1e-3) * scale[c] +
                       bias[c]);
  expect_close(run1(node, {x.data(), scale.data(), bias.data(), mean.data(), var.data()}), want,
               1e-5);

  // opset 7, spatial = 0: one parameter per (channel, position).
  const std::vector<float> s12 = random_vec(12, 10, 0.5f, 1.5f), b12 = random_vec(12, 11),
                           m12 = random_vec(12, 12), v12 = random_vec(12, 13, 0.1f, 2.0f);
  Node per_elem("BatchNormalization", 7);
  per_elem.in(xs).in({3, 2, 2}).in({3, 2, 2}).in({3, 2, 2}).in({3, 2, 2}).out(xs).i("spatial", 0);
  want.clear();
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t p = 0; p < 12; ++p)
      want.push_back((x[n * 12 + p] - m12[p]) / std::sqrt(v12[p] + 1e-5) * s12[p] + b12[p]);
  expect_close(run1(per_elem, {x.data(), s12.data(), b12.data(), m12.data(), v12.data()}), want,
               1e-5);
}

// training_mode=1 (opset 14+): the batch's own statistics, and the running
// ones as outputs (ONNX's _batchnorm_training_mode).
TEST(CpuRefNn, BatchNormalizationTrainingMode) {
  const Dims xs{2, 3, 2, 2};
  const std::vector<float> x = random_vec(numel(xs), 21);
  const std::vector<float> scale{0.5f, 1.5f, -1.0f}, bias{0.1f, 0.0f, 2.0f},
      mean{0.2f, -0.3f, 0.0f}, var{1.0f, 0.25f, 4.0f};
  Node node("BatchNormalization", 15);
  node.in(xs).in({3}).in({3}).in({3}).in({3}).out(xs).out({3}).out({3});
  node.i("training_mode", 1).f("epsilon", 1e-2f).f("momentum", 0.8f);
  std::vector<double> want_y(x.size()), want_mean, want_var;
  for (int64_t c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 4; ++i) m += x[(n * 3 + c) * 4 + i] / 8.0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 4; ++i) v += std::pow(x[(n * 3 + c) * 4 + i] - m, 2) / 8.0;
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t at = (n * 3 + c) * 4 + i;
        want_y[at] = (x[at] - m) / std::sqrt(v + 1e-2) * scale[c] + bias[c];
      }
    want_mean.push_back(mean[c] * 0.8 + m * 0.2);
    want_var.push_back(var[c] * 0.8 + v * 0.2);
  }
  auto k = node.kernel();
  std::vector<float> y = nan_buffer(numel(xs)), rm = nan_buffer(3), rv = nan_buffer(3);
  run(*k, {x.data(), scale.data(), bias.data(), mean.data(), var.data()},
      {y.data(), rm.data(), rv.data()});
  expect_close(y, want_y, 1e-5, "Y");
  expect_close(rm, want_mean, 1e-5, "running_mean");
  expect_close(rv, want_var, 1e-5, "running_var");
  // Y alone (the running statistics not asked for) is the same Y.
  Node y_only("BatchNormalization", 15);
  y_only.in(xs).in({3}).in({3}).in({3}).in({3}).out(xs).i("training_mode", 1).f("epsilon", 1e-2f);
  expect_close(run1(y_only, {x.data(), scale.data(), bias.data(), mean.data(), var.data()}), want_y,
               1e-5, "Y only");
}

TEST(CpuRefNn, BatchNormalizationRejectsOldTrainingOutputs) {
  Node outputs("BatchNormalization", 9);
  outputs.in({1, 2, 2}).in({2}).in({2}).in({2}).in({2}).out({1, 2, 2}).out({2}).out({2});
  expect_rejected(outputs, BP_STATUS_UNSUPPORTED, "training_mode=1");
  Node early("BatchNormalization", 9);
  early.in({1, 2, 2}).in({2}).in({2}).in({2}).in({2}).out({1, 2, 2}).i("training_mode", 1);
  expect_rejected(early, BP_STATUS_INVALID_ARGUMENT, "opset 14");
}

// MaxPool on uint8 and int8 (ONNX 12+): the largest value, and its index.
TEST(CpuRefNn, MaxPoolOnEightBitIntegers) {
  const std::vector<uint8_t> x{1, 200, 3, 4, 5, 6, 255, 8, 9};  // [1, 1, 3, 3]
  Node node("MaxPool", 12);
  node.in({1, 1, 3, 3}, BP_DTYPE_UINT8)
      .out({1, 1, 2, 2}, BP_DTYPE_UINT8)
      .out({1, 1, 2, 2}, BP_DTYPE_INT64)
      .ints("kernel_shape", {2, 2});
  auto k = node.kernel();
  std::vector<uint8_t> y(4, 0xAA);
  std::vector<int64_t> idx(4, -7);
  run(*k, {x.data()}, {y.data(), idx.data()});
  EXPECT_EQ(y, (std::vector<uint8_t>{200, 200, 255, 9}));
  EXPECT_EQ(idx, (std::vector<int64_t>{1, 1, 6, 8}));
  const std::vector<int8_t> s{-128, -100, -5, -120};  // [1, 1, 2, 2]
  Node signed8("MaxPool", 12);
  signed8.in({1, 1, 2, 2}, BP_DTYPE_INT8)
      .out({1, 1, 1, 1}, BP_DTYPE_INT8)
      .ints("kernel_shape", {2, 2});
  auto ks = signed8.kernel();
  int8_t out = 0;
  run(*ks, {s.data()}, {&out});
  EXPECT_EQ(out, -5);
  Node avg("AveragePool", 11);
  avg.in({1, 1, 2, 2}, BP_DTYPE_UINT8)
      .out({1, 1, 1, 1}, BP_DTYPE_UINT8)
      .ints("kernel_shape", {2, 2});
  expect_rejected(avg, BP_STATUS_UNSUPPORTED, "uint8");
}

TEST(CpuRefNn, LayerNormalizationWithStatsOutputs) {
  const Dims xs{2, 3, 4};
  const std::vector<float> x = random_vec(numel(xs), 14, -3.0f, 3.0f);
  const std::vector<float> scale = random_vec(12, 15), bias = random_vec(12, 16);
  Node node("LayerNormalization", 17);
  node.in(xs).in({3, 4}).in({3, 4}).out(xs).out({2, 1, 1}).out({2, 1, 1}).i("axis", 1).f("epsilon",
                                                                                         1e-4f);
  auto k = node.kernel();
  std::vector<float> y = nan_buffer(24), mean = nan_buffer(2), inv = nan_buffer(2);
  run(*k, {x.data(), scale.data(), bias.data()}, {y.data(), mean.data(), inv.data()});
  std::vector<double> want, want_mean, want_inv;
  for (int64_t o = 0; o < 2; ++o) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 12; ++i) m += x[o * 12 + i];
    m /= 12;
    for (int64_t i = 0; i < 12; ++i) v += (x[o * 12 + i] - m) * (x[o * 12 + i] - m);
    const double is = 1 / std::sqrt(v / 12 + 1e-4);
    for (int64_t i = 0; i < 12; ++i) want.push_back((x[o * 12 + i] - m) * is * scale[i] + bias[i]);
    want_mean.push_back(m);
    want_inv.push_back(is);
  }
  expect_close(y, want, 1e-5, "Y");
  expect_close(mean, want_mean, 1e-6, "Mean");
  expect_close(inv, want_inv, 1e-5, "InvStdDev");

  // Default axis -1, Scale broadcast from [1] over the last dim, no B.
  const std::vector<float> s1{2.0f};
  Node last("LayerNormalization", 17);
  last.in(xs).in({1}).out(xs);
  want.clear();
  for (int64_t o = 0; o < 6; ++o) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 4; ++i) m += x[o * 4 + i];
    m /= 4;
    for (int64_t i = 0; i < 4; ++i) v += (x[o * 4 + i] - m) * (x[o * 4 + i] - m);
    for (int64_t i = 0; i < 4; ++i)
      want.push_back((x[o * 4 + i] - m) / std::sqrt(v / 4 + 1e-5) * 2.0);
  }
  expect_close(run1(last, {x.data(), s1.data()}), want, 1e-5, "axis -1");
}

TEST(CpuRefNn, InstanceNormalization) {
  const Dims xs{2, 3, 5};
  const std::vector<float> x = random_vec(numel(xs), 17, -2.0f, 4.0f);
  const std::vector<float> scale{1.0f, -0.5f, 2.0f}, bias{0.0f, 1.0f, -1.0f};
  Node node("InstanceNormalization", 6);
  node.in(xs).in({3}).in({3}).out(xs).f("epsilon", 1e-2f);
  std::vector<double> want;
  for (int64_t p = 0; p < 6; ++p) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < 5; ++i) m += x[p * 5 + i];
    m /= 5;
    for (int64_t i = 0; i < 5; ++i) v += (x[p * 5 + i] - m) * (x[p * 5 + i] - m);
    for (int64_t i = 0; i < 5; ++i)
      want.push_back((x[p * 5 + i] - m) / std::sqrt(v / 5 + 1e-2) * scale[p % 3] + bias[p % 3]);
  }
  expect_close(run1(node, {x.data(), scale.data(), bias.data()}), want, 1e-5);
}

// ===========================================================================
// Softmax / LogSoftmax
// ===========================================================================

// Softmax of x over groups: element e belongs to group group_of(e).
template <class GroupOf>
std::vector<double> softmax_ref(const std::vector<float>& x, GroupOf group_of, bool log) {
  std::vector<double> mx(x.size(), -INFINITY), sum(x.size(), 0.0), y(x.size());
  for (size_t e = 0; e < x.size(); ++e) mx[group_of(e)] = std::max<double>(mx[group_of(e)], x[e]);
  for (size_t e = 0; e < x.size(); ++e) sum[group_of(e)] += std::exp(x[e] - mx[group_of(e)]);
  for (size_t e = 0; e < x.size(); ++e)
    y[e] = log ? x[e] - mx[group_of(e)] - std::log(sum[group_of(e)])
               : std::exp(x[e] - mx[group_of(e)]) / sum[group_of(e)];
  return y;
}

TEST(CpuRefNn, SoftmaxOpset13IsPerAxisOpset11Flattens) {
  const Dims xs{2, 3, 4};
  const std::vector<float> x = random_vec(24, 18, -5.0f, 5.0f);
  for (bool log : {false, true}) {
    const char* op = log ? "LogSoftmax" : "Softmax";
    // opset 13, axis 1: groups are (n, w).
    Node per_axis(op, 13);
    per_axis.in(xs).out(xs).i("axis", 1);
    expect_close(run1(per_axis, {x.data()}),
                 softmax_ref(
                     x, [](size_t e) { return e / 12 * 4 + e % 4; }, log),
                 1e-5, std::string(op) + " opset 13");
    // opset 11, axis 1: flattened to [2, 12], groups are n.
    Node flat(op, 11);
    flat.in(xs).out(xs).i("axis", 1);
    expect_close(run1(flat, {x.data()}),
                 softmax_ref(
                     x, [](size_t e) { return e / 12; }, log),
                 1e-5, std::string(op) + " opset 11");
    // opset 13 default axis -1: groups of 4.
    Node dflt(op, 13);
    dflt.in(xs).out(xs);
    expect_close(run1(dflt, {x.data()}),
                 softmax_ref(
                     x, [](size_t e) { return e / 4; }, log),
                 1e-5, std::string(op) + " default axis");
  }
  // Large inputs must not overflow (max subtraction).
  const std::vector<float> big{1000.0f, 1001.0f, 1002.0f};
  Node sm("Softmax", 13);
  sm.in({1, 3}).out({1, 3});
  expect_close(run1(sm, {big.data()}), std::vector<double>{0.09003057, 0.24472847, 0.66524096},
               1e-5);
}

TEST(CpuRefNn, SoftmaxInFloat64AndFloat16) {
  const std::vector<double> x{1.0, 2.0, 3.0};
  Node d("Softmax", 13);
  d.in({1, 3}, BP_DTYPE_FLOAT64).out({1, 3}, BP_DTYPE_FLOAT64);
  auto kd = d.kernel();
  std::vector<double> yd(3, 0.0);
  run(*kd, {x.data()}, {yd.data()});
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(yd[i], std::exp(x[i]) / s, 1e-15) << i;
  Node lh("LogSoftmax", 13);
  lh.in({3}, BP_DTYPE_FLOAT16).out({3}, BP_DTYPE_FLOAT16);
  const std::vector<uint16_t> xh{float_to_half(1.0f), float_to_half(2.0f), float_to_half(3.0f)};
  auto kh = lh.kernel();
  std::vector<uint16_t> yh(3, 0);
  run(*kh, {xh.data()}, {yh.data()});
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(half_to_float(yh[i]), x[i] - std::log(s), 2e-3) << i;
}

// ===========================================================================
// Resize
// ===========================================================================

// Resize with constant scales (opset 13 layout: X, roi, scales).
std::vector<float> resize(const std::vector<float>& x, const Dims& xs, const Dims& ys,
                          const std::vector<float>& scales,
                          const std::vector<std::pair<const char*, const char*>>& str_attrs,
                          int64_t opset = 13, float cubic_a = -0.75f, int64_t exclude_outside = 0) {
  Node node("Resize", opset);
  node.in(xs);
  if (opset >= 11) node.none();
  node.in({static_cast<int64_t>(scales.size())}, F32, scales.data()).out(ys);
  for (const auto& [k, v] : str_attrs) node.s(k, v);
  if (cubic_a != -0.75f) node.f("cubic_coeff_a", cubic_a);
  if (exclude_outside) node.i("exclude_outside", exclude_outside);
  std::vector<const void*> ins{x.data()};
  if (opset >= 11) ins.push_back(nullptr);
  ins.push_back(scales.data());
  return run1(node, ins);
}

// ONNX Operators.md Resize examples.
TEST(CpuRefNn, ResizeNearestOnnxExamples) {
  const std::vector<float> x4 = iota_vec(4, 1);
  expect_close(
      resize(x4, {1, 1, 2, 2}, {1, 1, 4, 6}, {1, 1, 2, 3}, {{"mode", "nearest"}}),
      std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}, 0,
      "upsample_scales_nearest");
  const std::vector<float> x8 = iota_vec(8, 1);
  expect_close(resize(x8, {1, 1, 2, 4}, {1, 1, 1, 2}, {1, 1, 0.6f, 0.6f}, {{"mode", "nearest"}}),
               std::vector<float>{1, 3}, 0, "downsample_scales_nearest");
  // Resize-10 (asymmetric coordinates, no nearest_mode) gives the same here.
  expect_close(
      resize(x8, {1, 1, 2, 4}, {1, 1, 1, 2}, {1, 1, 0.6f, 0.6f}, {{"mode", "nearest"}}, 10),
      std::vector<float>{1, 3}, 0, "Resize-10 downsample");
  // nearest_mode on ties: asymmetric 2x upsampling of [1,2,3] reads 0, .5, 1, 1.5, 2, 2.5.
  const std::vector<float> x3{1, 2, 3};
  const std::vector<std::pair<const char*, std::vector<float>>> tie_cases = {
      {"round_prefer_floor", {1, 1, 2, 2, 3, 3}},
      {"round_prefer_ceil", {1, 2, 2, 3, 3, 3}},
      {"floor", {1, 1, 2, 2, 3, 3}},
      {"ceil", {1, 2, 2, 3, 3, 3}}};
  for (const auto& [mode, want] : tie_cases)
    expect_close(resize(x3, {1, 3}, {1, 6}, {1, 2},
                        {{"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", mode}}),
                 want, 0, mode);
  // Off ties: 1.5x upsampling of [1,2] reads 0, 0.67, 1.33.
  const std::vector<float> x2{1, 2};
  const std::vector<std::pair<const char*, std::vector<float>>> off_cases = {
      {"round_prefer_floor", {1, 2, 2}}, {"floor", {1, 1, 2}}, {"ceil", {1, 2, 2}}};
  for (const auto& [mode, want] : off_cases)
    expect_close(resize(x2, {1, 2}, {1, 3}, {1, 1.5f},
                        {{"coordinate_transformation_mode", "asymmetric"}, {"nearest_mode", mode}}),
                 want, 0, std::string(mode) + " off ties");
}

TEST(CpuRefNn, ResizeLinearOnnxExamples) {
  const std::vector<float> x4 = iota_vec(4, 1);
  expect_close(resize(x4, {1, 1, 2, 2}, {1, 1, 4, 4}, {1, 1, 2, 2}, {{"mode", "linear"}}),
               std::vector<float>{1, 1.25, 1.75, 2, 1.5, 1.75, 2.25, 2.5, 2.5, 2.75, 3.25, 3.5, 3,
                                  3.25, 3.75, 4},
               1e-6, "upsample_scales_linear");
  expect_close(resize(x4, {1, 1, 2, 2}, {1, 1, 4, 4}, {1, 1, 2, 2},
                      {{"mode", "linear"}, {"coordinate_transformation_mode", "align_corners"}}),
               std::vector<double>{1, 4.0 / 3, 5.0 / 3, 2, 5.0 / 3, 2, 7.0 / 3, 8.0 / 3, 7.0 / 3,
                                   8.0 / 3, 3, 10.0 / 3, 3, 10.0 / 3, 11.0 / 3, 4},
               1e-6, "upsample_scales_linear_align_corners");
  const std::vector<float> x8 = iota_vec(8, 1);
  expect_close(resize(x8, {1, 1, 2, 4}, {1, 1, 1, 2}, {1, 1, 0.6f, 0.6f}, {{"mode", "linear"}}),
               std::vector<double>{2.6666665, 4.3333331}, 1e-6, "downsample_scales_linear");
  // Resize-10 has no coordinate_transformation_mode: coordinates are asymmetric.
  const std::vector<float> x2{1, 2};
  expect_close(resize(x2, {1, 2}, {1, 4}, {1, 2}, {{"mode", "linear"}}, 10),
               std::vector<float>{1, 1.5, 2, 2}, 1e-6, "Resize-10 linear");
}

TEST(CpuRefNn, ResizeSizesInputAndPytorchHalfPixel) {
  // sizes given (scales empty): scale = out/in; pytorch_half_pixel maps a
  // length-1 output to coordinate 0.
  const std::vector<float> x = iota_vec(16, 1);
  const std::vector<int64_t> sizes{1, 1, 3, 1};
  Node node("Resize", 13);
  node.in({1, 1, 4, 4})
      .none()
      .none()
      .in({4}, BP_DTYPE_INT64, sizes.data())
      .out({1, 1, 3, 1})
      .s("mode", "linear")
      .s("coordinate_transformation_mode", "pytorch_half_pixel");
  // ONNX example "resize_downsample_sizes_linear_pytorch_half_pixel".
  expect_close(run1(node, {x.data(), nullptr, nullptr, sizes.data()}),
               std::vector<double>{1.6666666, 7.0, 12.333333}, 1e-6);
}

TEST(CpuRefNn, ResizeLinearCoordinatesExactOnLongAxes) {
  // An image upscaled by 1.25 (a detector's transform): the source
  // coordinate (x + 0.5) / 1.25 - 0.5 computed in float errs by up to half
  // an ulp of x, 3e-5 of a pixel at x = 1000, times the step between
  // neighbours (2 here): 6e-5 off. In double the weights are exact to
  // float rounding.
  const int64_t in = 1000, out = 1250;
  std::vector<float> x(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) x[static_cast<size_t>(i)] = i % 2 ? 1.0f : -1.0f;
  const std::vector<int64_t> sizes{1, 1, 1, out};
  Node node("Resize", 13);
  node.in({1, 1, 1, in}).none().none().in({4}, BP_DTYPE_INT64, sizes.data()).out({1, 1, 1, out});
  node.s("mode", "linear");
  std::vector<double> want(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const double v = std::clamp((o + 0.5) / 1.25 - 0.5, 0.0, double(in - 1));
    const int64_t i0 = static_cast<int64_t>(v), i1 = std::min(i0 + 1, in - 1);
    want[static_cast<size_t>(o)] = (1 - (v - double(i0))) * x[static_cast<size_t>(i0)] +
                                   (v - double(i0)) * x[static_cast<size_t>(i1)];
  }
  expect_close(run1(node, {x.data(), nullptr, nullptr, sizes.data()}), want, 1e-6);
}

// Independent cubic reference: Keys kernel evaluated per tap in double.
std::vector<double> cubic_ref_2d(const std::vector<float>& x, int64_t h, int64_t w, int64_t oh,
                                 int64_t ow, double sh, double sw, double a, bool exclude,
                                 const std::string& coord) {
  auto kernel = [a](double d) {
    d = std::fabs(d);
    if (d <= 1) return ((a + 2) * d - (a + 3)) * d * d + 1;
    if (d < 2) return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
    return 0.0;
  };
  auto orig = [&](int64_t o, double s, int64_t lin, int64_t lout) {
    // With scales given, the ONNX reference maps align_corners through the
    // unrounded output length lin * s (its resize_*_scales_*_align_corners
    // node tests expect this).
    if (coord == "align_corners") return lout == 1 ? 0.0 : o * double(lin - 1) / (lin * s - 1);
    if (coord == "asymmetric") return o / s;
    return (o + 0.5) / s - 0.5;
  };
  auto taps = [&](double v, int64_t len, std::vector<int64_t>& idx, std::vector<double>& wt) {
    idx.clear();
    wt.clear();
    const int64_t f = static_cast<int64_t>(std::floor(v));
    double sum = 0;
    for (int64_t i = f - 1; i <= f + 2; ++i) {
      double k = kernel(v - i);
      if (exclude && (i < 0 || i >= len)) k = 0;
      idx.push_back(std::clamp<int64_t>(i, 0, len - 1));
      wt.push_back(k);
      sum += k;
    }
    if (exclude)
      for (double& k : wt) k /= sum;
  };
  std::vector<double> y;
  std::vector<int64_t> iy, ix;
  std::vector<double> wy, wx;
  for (int64_t r = 0; r < oh; ++r) {
    taps(orig(r, sh, h, oh), h, iy, wy);
    for (int64_t c = 0; c < ow; ++c) {
      taps(orig(c, sw, w, ow), w, ix, wx);
      double acc = 0;
      for (size_t p = 0; p < 4; ++p)
        for (size_t q = 0; q < 4; ++q) acc += wy[p] * wx[q] * x[iy[p] * w + ix[q]];
      y.push_back(acc);
    }
  }
  return y;
}

TEST(CpuRefNn, ResizeCubic) {
  const std::vector<float> x = iota_vec(16, 1);
  const std::vector<float> got =
      resize(x, {1, 1, 4, 4}, {1, 1, 8, 8}, {1, 1, 2, 2}, {{"mode", "cubic"}});
  // First row of ONNX example "resize_upsample_scales_cubic".
  expect_close(std::vector<float>(got.begin(), got.begin() + 4),
               std::vector<double>{0.47265625, 0.76953125, 1.24609375, 1.875}, 1e-5,
               "onnx example row");
  expect_close(got, cubic_ref_2d(x, 4, 4, 8, 8, 2, 2, -0.75, false, "half_pixel"), 1e-5,
               "half_pixel");
  expect_close(
      resize(x, {1, 1, 4, 4}, {1, 1, 8, 8}, {1, 1, 2, 2}, {{"mode", "cubic"}}, 13, -0.5f, 1),
      cubic_ref_2d(x, 4, 4, 8, 8, 2, 2, -0.5, true, "half_pixel"), 1e-5, "A=-0.5 exclude_outside");
  expect_close(resize(x, {1, 1, 4, 4}, {1, 1, 3, 3}, {1, 1, 0.8f, 0.8f},
                      {{"mode", "cubic"}, {"coordinate_transformation_mode", "align_corners"}}),
               cubic_ref_2d(x, 4, 4, 3, 3, 0.8, 0.8, -0.75, false, "align_corners"), 1e-5,
               "align_corners");
  expect_close(resize(x, {1, 1, 4, 4}, {1, 1, 8, 8}, {1, 1, 2, 2},
                      {{"mode", "cubic"}, {"coordinate_transformation_mode", "asymmetric"}}),
               cubic_ref_2d(x, 4, 4, 8, 8, 2, 2, -0.75, false, "asymmetric"), 1e-5, "asymmetric");
}

// ONNX examples "resize_tf_crop_and_resize" and "..._extrapolation_value".
TEST(CpuRefNn, ResizeTfCropAndResize) {
  const std::vector<float> x = iota_vec(16, 1);
  const std::vector<float> roi{0, 0, 0.4f, 0.6f, 1, 1, 0.6f, 0.8f};
  const std::vector<int64_t> sizes{1, 1, 3, 3};
  Node node("Resize", 13);
  node.in({1, 1, 4, 4})
      .in({8}, F32, roi.data())
      .none()
      .in({4}, BP_DTYPE_INT64, sizes.data())
      .out({1, 1, 3, 3})
      .s("mode", "linear")
      .s("coordinate_transformation_mode", "tf_crop_and_resize");
  expect_close(run1(node, {x.data(), roi.data(), nullptr, sizes.data()}),
               std::vector<double>{7.6000004, 7.9, 8.2, 8.8, 9.1, 9.400001, 10.0, 10.3, 10.6}, 1e-5,
               "crop");

  const std::vector<float> roi2{0, 0, 0.4f, 0.6f, 1, 1, 1.2f, 1.7f};
  Node extra("Resize", 13);
  extra.in({1, 1, 4, 4})
      .in({8}, F32, roi2.data())
      .none()
      .in({4}, BP_DTYPE_INT64, sizes.data())
      .out({1, 1, 3, 3})
      .s("mode", "linear")
      .s("coordinate_transformation_mode", "tf_crop_and_resize")
      .f("extrapolation_value", 10.0f);
  expect_close(run1(extra, {x.data(), roi2.data(), nullptr, sizes.data()}),
               std::vector<double>{7.6000004, 10, 10, 12.400001, 10, 10, 10, 10, 10}, 1e-5,
               "extrapolation");
}

TEST(CpuRefNn, ResizeRejectsNonConstantScalesAndUnknownModes) {
  Node dynamic("Resize", 13);
  dynamic.in({1, 1, 2, 2}).none().in({4}).out({1, 1, 4, 4});
  expect_rejected(dynamic, BP_STATUS_UNSUPPORTED, "scales must be a constant");
  const std::vector<float> scales{1, 1, 2, 2};
  Node mode("Resize", 13);
  mode.in({1, 1, 2, 2}).none().in({4}, F32, scales.data()).out({1, 1, 4, 4}).s("mode", "area");
  expect_rejected(mode, BP_STATUS_UNSUPPORTED, "mode 'area'");
}

// ===========================================================================
// Properties the backend relies on
// ===========================================================================

// run() is const and uses only its scratch: two contexts running one kernel
// at once (here: interleaved, with different scratch) get the same answer.
TEST(CpuRefNn, KernelIsReentrantWithSeparateScratch) {
  const ConvCase c{{1, 3, 9, 9}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, false};
  const std::vector<float> x1 = random_vec(numel(c.x), 30), x2 = random_vec(numel(c.x), 31),
                           w = random_vec(numel(c.w), 32);
  Node node("Conv", 11);
  node.in(c.x).in(c.w).out({1, 4, 9, 9}).ints("pads", {1, 1, 1, 1});
  auto k = node.kernel();
  ASSERT_GT(k->scratch_bytes(), 0u);
  std::vector<float> s1(k->scratch_bytes() / 4 + 16), s2(s1.size());
  std::vector<float> y1 = nan_buffer(324), y2 = nan_buffer(324);
  const void* in1[] = {x1.data(), w.data()};
  const void* in2[] = {x2.data(), w.data()};
  void* out1[] = {y1.data()};
  void* out2[] = {y2.data()};
  k->run(in1, out1, s1.data());
  k->run(in2, out2, s2.data());
  expect_close(y1, conv_ref(c, x1, w, {}, {1, 4, 9, 9}), 1e-5, "first");
  expect_close(y2, conv_ref(c, x2, w, {}, {1, 4, 9, 9}), 1e-5, "second");
}

}  // namespace
}  // namespace backplane::cpuref
