// Unit tests of CpuRef's kernels_math.cpp (Hardmax, LRN, MVN, LpNormalization,
// EyeLike, DepthToSpace/SpaceToDepth, ReverseSequence, Det, Upsample,
// MaxUnpool, Einsum, CumSum, LpPool, GlobalLpPool): one node at a time,
// compared with hand-computed values or an independent reference loop.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using namespace backplane;
using namespace backplane::cpuref;
using namespace backplane::cpuref::test_harness;

// The math family's kernels, registered as the backend registers them.
const KernelRegistry& math_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_math_kernels(reg);
    return reg;
  }();
  return r;
}

// One node of the math family: built through the harness's OpTest (which
// holds the view), prepared through math_registry(), run twice on poisoned
// outputs that must agree.
class MathTest {
 public:
  MathTest(std::string op, int64_t opset, std::vector<TensorSpec> inputs,
           std::vector<OutSpec> outputs, std::vector<AttrSpec> attrs = {})
      : op_(op),
        inputs_(inputs),
        outputs_(outputs),
        t_(std::move(op), opset, std::move(inputs), std::move(outputs), std::move(attrs)) {}

  std::unique_ptr<Kernel> kernel() const {
    const KernelFactory* f = math_registry().find(op_);
    if (f == nullptr) throw std::runtime_error("no math kernel for " + op_);
    return (*f)(t_.info());
  }

  std::vector<std::vector<uint8_t>> run() const {
    std::unique_ptr<Kernel> k = kernel();
    std::vector<std::vector<uint8_t>> first;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::vector<uint8_t>> outs;
      std::vector<void*> out_ptrs;
      for (const OutSpec& o : outputs_) {
        outs.emplace_back(static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype),
                          pass == 0 ? 0xCD : 0x5A);
        out_ptrs.push_back(outs.back().data());
      }
      std::vector<const void*> in_ptrs;
      for (const TensorSpec& s : inputs_) in_ptrs.push_back(s.present ? s.bytes.data() : nullptr);
      std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
      void* aligned = scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64) % 64;
      k->run(in_ptrs.data(), out_ptrs.data(), aligned);
      if (pass == 0) first = outs;
      else EXPECT_EQ(first, outs) << op_ << ": a second run gave different bytes";
    }
    return first;
  }

  template <class T>
  std::vector<T> run_as(size_t output = 0) const {
    const auto outs = run();
    std::vector<T> v(outs[output].size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), outs[output].data(), outs[output].size());
    return v;
  }

  void expect_error(bp_status_code_t code, const std::string& fragment) const {
    try {
      kernel();
      ADD_FAILURE() << "expected an error containing '" << fragment << "'";
    } catch (const sdk::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  }

 private:
  std::string op_;
  std::vector<TensorSpec> inputs_;
  std::vector<OutSpec> outputs_;
  OpTest t_;
};

TensorSpec f64(Dims s, const std::vector<double>& v, bool c = false) {
  return tensor(BP_DTYPE_FLOAT64, s, v, c);
}

// ---------------------------------------------------------------------------
// Hardmax
// ---------------------------------------------------------------------------

TEST(CpuRefMath, HardmaxAlongAxisPicksFirstMaximum) {
  // [2, 3] along the last axis; the tie in row 1 goes to the first one.
  MathTest t("Hardmax", 13, {f32({2, 3}, {1, 3, 2, 5, 5, 0})}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{0, 1, 0, 1, 0, 0}));
  // axis 0 of the same tensor: per column.
  MathTest a0("Hardmax", 13, {f32({2, 3}, {1, 3, 2, 5, 5, 0})}, {{BP_DTYPE_FLOAT32, {2, 3}}},
              {attr_i("axis", 0)});
  EXPECT_EQ(a0.run_as<float>(), (std::vector<float>{0, 0, 1, 1, 1, 0}));
}

TEST(CpuRefMath, HardmaxBeforeOpset13FlattensAtAxis) {
  // [2, 2, 2] with axis 1: rows of 4; opset 13 would take a max per [n, :, k].
  const std::vector<float> x{1, 8, 3, 4, 9, 2, 7, 6};
  MathTest old("Hardmax", 11, {f32({2, 2, 2}, x)}, {{BP_DTYPE_FLOAT32, {2, 2, 2}}},
               {attr_i("axis", 1)});
  EXPECT_EQ(old.run_as<float>(), (std::vector<float>{0, 1, 0, 0, 1, 0, 0, 0}));
  MathTest v13("Hardmax", 13, {f32({2, 2, 2}, x)}, {{BP_DTYPE_FLOAT32, {2, 2, 2}}},
               {attr_i("axis", 1)});
  EXPECT_EQ(v13.run_as<float>(), (std::vector<float>{0, 1, 1, 0, 1, 0, 0, 1}));
}

TEST(CpuRefMath, HardmaxRejectsAxisOutOfRange) {
  MathTest t("Hardmax", 13, {f32({2, 3}, iota_f(6))}, {{BP_DTYPE_FLOAT32, {2, 3}}},
             {attr_i("axis", 2)});
  t.expect_error(BP_STATUS_INVALID_ARGUMENT, "axis 2");
}

// ---------------------------------------------------------------------------
// LRN, MeanVarianceNormalization, LpNormalization
// ---------------------------------------------------------------------------

TEST(CpuRefMath, LrnMatchesReferenceLoop) {
  const Dims shape{2, 5, 2, 2};
  const std::vector<float> x = iota_f(numel(shape), -3.0f, 0.15f);
  const float alpha = 0.002f, beta = 0.5f, bias = 2.0f;
  const int64_t size = 3;
  MathTest t(
      "LRN", 13, {f32(shape, x)}, {{BP_DTYPE_FLOAT32, shape}},
      {attr_f("alpha", alpha), attr_f("beta", beta), attr_f("bias", bias), attr_i("size", size)});
  std::vector<float> want(x.size());
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t c = 0; c < 5; ++c)
      for (int64_t s = 0; s < 4; ++s) {
        double sq = 0;
        for (int64_t k = std::max<int64_t>(0, c - 1); k <= std::min<int64_t>(4, c + 1); ++k)
          sq += double(x[(n * 5 + k) * 4 + s]) * x[(n * 5 + k) * 4 + s];
        const float v = x[(n * 5 + c) * 4 + s];
        want[(n * 5 + c) * 4 + s] = float(v / std::pow(bias + alpha / size * sq, beta));
      }
  expect_floats(t.run_as<float>(), want, 1e-6f);
}

TEST(CpuRefMath, LrnRejectsNonPositiveSize) {
  MathTest t("LRN", 13, {f32({1, 2, 1, 1}, {1, 2})}, {{BP_DTYPE_FLOAT32, {1, 2, 1, 1}}},
             {attr_i("size", 0)});
  t.expect_error(BP_STATUS_INVALID_ARGUMENT, "size");
}

TEST(CpuRefMath, MeanVarianceNormalizationOverDefaultAxes) {
  // [2, 2, 1, 2]: axes {0, 2, 3} group by channel.
  const std::vector<float> x{1, 2, 10, 20, 3, 4, 30, 40};
  MathTest t("MeanVarianceNormalization", 13, {f32({2, 2, 1, 2}, x)},
             {{BP_DTYPE_FLOAT32, {2, 2, 1, 2}}});
  // Channel 0: {1, 2, 3, 4}, mean 2.5, std sqrt(1.25); channel 1: ten times that.
  const double sd0 = std::sqrt(1.25), sd1 = std::sqrt(125.0);
  std::vector<float> want;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool c1 = (i / 2) % 2 == 1;
    want.push_back(float((x[i] - (c1 ? 25.0 : 2.5)) / ((c1 ? sd1 : sd0) + 1e-9)));
  }
  expect_floats(t.run_as<float>(), want, 1e-6f);
}

TEST(CpuRefMath, MeanVarianceNormalizationCustomAxesInDouble) {
  const std::vector<double> x{1, 5, 2, 8};
  MathTest t("MeanVarianceNormalization", 13, {f64({2, 2}, x)}, {{BP_DTYPE_FLOAT64, {2, 2}}},
             {attr_ints("axes", {1})});
  const std::vector<double> got = t.run_as<double>();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NEAR(got[0], -1.0, 1e-8);  // rows {1, 5}: mean 3, std 2
  EXPECT_NEAR(got[1], 1.0, 1e-8);
  EXPECT_NEAR(got[2], -1.0, 1e-8);  // {2, 8}: mean 5, std 3
  EXPECT_NEAR(got[3], 1.0, 1e-8);
}

TEST(CpuRefMath, LpNormalizationL1AndL2) {
  const std::vector<float> x{3, -4, 1, 1};
  MathTest l2("LpNormalization", 1, {f32({2, 2}, x)}, {{BP_DTYPE_FLOAT32, {2, 2}}});
  expect_floats(l2.run_as<float>(),
                {0.6f, -0.8f, float(1 / std::sqrt(2.0)), float(1 / std::sqrt(2.0))});
  MathTest l1("LpNormalization", 1, {f32({2, 2}, x)}, {{BP_DTYPE_FLOAT32, {2, 2}}},
              {attr_i("p", 1), attr_i("axis", 0)});
  expect_floats(l1.run_as<float>(), {0.75f, -0.8f, 0.25f, 0.2f});
  MathTest bad("LpNormalization", 1, {f32({2, 2}, x)}, {{BP_DTYPE_FLOAT32, {2, 2}}},
               {attr_i("p", 3)});
  bad.expect_error(BP_STATUS_INVALID_ARGUMENT, "'p'");
}

// ---------------------------------------------------------------------------
// EyeLike
// ---------------------------------------------------------------------------

TEST(CpuRefMath, EyeLikeDiagonalsAndDtype) {
  MathTest up("EyeLike", 9, {f32({3, 4}, iota_f(12))}, {{BP_DTYPE_FLOAT32, {3, 4}}},
              {attr_i("k", 1)});
  EXPECT_EQ(up.run_as<float>(), (std::vector<float>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1}));
  MathTest down("EyeLike", 9, {f32({3, 2}, iota_f(6))}, {{BP_DTYPE_INT32, {3, 2}}},
                {attr_i("k", -1), attr_i("dtype", BP_DTYPE_INT32)});
  EXPECT_EQ(down.run_as<int32_t>(), (std::vector<int32_t>{0, 0, 1, 0, 0, 1}));
  MathTest far("EyeLike", 9, {f32({2, 2}, iota_f(4))}, {{BP_DTYPE_FLOAT32, {2, 2}}},
               {attr_i("k", 5)});
  EXPECT_EQ(far.run_as<float>(), (std::vector<float>{0, 0, 0, 0}));
}

// ---------------------------------------------------------------------------
// DepthToSpace / SpaceToDepth
// ---------------------------------------------------------------------------

// numpy's reshape + transpose + reshape, written out: the reference.
std::vector<float> depth_to_space_ref(const std::vector<float>& x, Dims d, int64_t b, bool dcr) {
  const int64_t n = d[0], c = d[1], h = d[2], w = d[3], oc = c / (b * b);
  std::vector<float> y(x.size());
  for (int64_t i0 = 0; i0 < n; ++i0)
    for (int64_t b1 = 0; b1 < b; ++b1)
      for (int64_t b2 = 0; b2 < b; ++b2)
        for (int64_t ch = 0; ch < oc; ++ch)
          for (int64_t yy = 0; yy < h; ++yy)
            for (int64_t xx = 0; xx < w; ++xx) {
              // DCR: x viewed as [n, b1, b2, oc, h, w]; CRD: [n, oc, b1, b2, h, w].
              const int64_t ic = dcr ? (b1 * b + b2) * oc + ch : (ch * b + b1) * b + b2;
              const float v = x[((i0 * c + ic) * h + yy) * w + xx];
              y[((i0 * oc + ch) * h * b + yy * b + b1) * w * b + xx * b + b2] = v;
            }
  return y;
}

TEST(CpuRefMath, DepthToSpaceBothModesMatchReference) {
  const Dims d{2, 8, 2, 3};
  const std::vector<float> x = iota_f(numel(d));
  for (bool dcr : {true, false}) {
    MathTest t("DepthToSpace", 13, {f32(d, x)}, {{BP_DTYPE_FLOAT32, {2, 2, 4, 6}}},
               {attr_i("blocksize", 2), attr_s("mode", dcr ? "DCR" : "CRD")});
    EXPECT_EQ(t.run_as<float>(), depth_to_space_ref(x, d, 2, dcr)) << (dcr ? "DCR" : "CRD");
  }
  MathTest bad("DepthToSpace", 13, {f32(d, x)}, {{BP_DTYPE_FLOAT32, {2, 2, 4, 6}}},
               {attr_i("blocksize", 2), attr_s("mode", "XYZ")});
  bad.expect_error(BP_STATUS_INVALID_ARGUMENT, "mode");
}

TEST(CpuRefMath, SpaceToDepthInvertsDepthToSpaceDcr) {
  const Dims d{1, 3, 4, 6};
  std::vector<float> x = iota_f(numel(d), 0.5f);
  MathTest s2d("SpaceToDepth", 13, {f32(d, x)}, {{BP_DTYPE_FLOAT32, {1, 12, 2, 3}}},
               {attr_i("blocksize", 2)});
  const std::vector<float> packed = s2d.run_as<float>();
  EXPECT_EQ(depth_to_space_ref(packed, {1, 12, 2, 3}, 2, true), x);
  // Element 1 of the first block (h 0, w 1) goes to channel (0 * 2 + 1) * 3 = 3.
  EXPECT_EQ(packed[3 * 6], x[1]);
  MathTest bad("SpaceToDepth", 13, {f32({1, 1, 3, 3}, iota_f(9))},
               {{BP_DTYPE_FLOAT32, {1, 4, 1, 1}}}, {attr_i("blocksize", 2)});
  bad.expect_error(BP_STATUS_INVALID_ARGUMENT, "multiples");
}

// ---------------------------------------------------------------------------
// ReverseSequence
// ---------------------------------------------------------------------------

TEST(CpuRefMath, ReverseSequenceTimeMajorAndBatchMajor) {
  // time-major [4 steps, 2 batch]: lens {4, 2}.
  MathTest t("ReverseSequence", 10, {f32({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i64({2}, {4, 2})},
             {{BP_DTYPE_FLOAT32, {4, 2}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{6, 3, 4, 1, 2, 5, 0, 7}));
  // batch-major [2 batch, 3 steps, 1]: lens {1, 3}.
  MathTest b("ReverseSequence", 10, {i32({2, 3, 1}, {0, 1, 2, 3, 4, 5}), i64({2}, {1, 3})},
             {{BP_DTYPE_INT32, {2, 3, 1}}}, {attr_i("batch_axis", 0), attr_i("time_axis", 1)});
  EXPECT_EQ(b.run_as<int32_t>(), (std::vector<int32_t>{0, 1, 2, 5, 4, 3}));
}

TEST(CpuRefMath, ReverseSequenceRejectsLengthBeyondSteps) {
  MathTest t("ReverseSequence", 10, {f32({2, 2}, {0, 1, 2, 3}), i64({2}, {3, 1})},
             {{BP_DTYPE_FLOAT32, {2, 2}}});
  try {
    t.run();
    ADD_FAILURE() << "a sequence length of 3 over 2 steps was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence_lens[0] = 3"), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------
// Det
// ---------------------------------------------------------------------------

TEST(CpuRefMath, DetOfBatchIncludingSingularAndPivoting) {
  // [3, 3, 3]: a general matrix, a singular one, one needing a row swap.
  const std::vector<float> x{2, -1, 0, -1, 2, -1, 0, -1, 2,   // det 4
                             1, 2,  3, 4,  5, 6,  7, 8,  9,   // det 0
                             0, 1,  0, 1,  0, 0,  0, 0,  3};  // det -3
  MathTest t("Det", 11, {f32({3, 3, 3}, x)}, {{BP_DTYPE_FLOAT32, {3}}});
  expect_floats(t.run_as<float>(), {4, 0, -3}, 1e-5f);
  MathTest two("Det", 11, {f64({2, 2}, {1.5, 2, 3, -4})}, {{BP_DTYPE_FLOAT64, {}}});
  EXPECT_DOUBLE_EQ(two.run_as<double>()[0], -12.0);
  MathTest bad("Det", 11, {f32({2, 3}, iota_f(6))}, {{BP_DTYPE_FLOAT32, {}}});
  bad.expect_error(BP_STATUS_INVALID_ARGUMENT, "square");
}

// ---------------------------------------------------------------------------
// Upsample
// ---------------------------------------------------------------------------

TEST(CpuRefMath, UpsampleNearestWithScalesInput) {
  const std::vector<float> scales{1, 1, 2, 3};
  MathTest t("Upsample", 9, {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({4}, scales, true)},
             {{BP_DTYPE_FLOAT32, {1, 1, 4, 6}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2,
                                                   3, 3, 3, 4, 4, 4, 3, 3, 3, 4, 4, 4}));
}

TEST(CpuRefMath, UpsampleLinearWithScalesAttribute) {
  MathTest t("Upsample", 7, {f32({1, 2}, {0, 10})}, {{BP_DTYPE_FLOAT32, {1, 4}}},
             {attr_s("mode", "linear"), attr_floats("scales", {1, 2})});
  // Asymmetric: positions 0, 0.5, 1, 1.5 -> the last clamps to the edge.
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{0, 5, 10, 10}));
  MathTest bad("Upsample", 7, {f32({1, 2}, {0, 10})}, {{BP_DTYPE_FLOAT32, {1, 1}}},
               {attr_floats("scales", {1, 0.5f})});
  bad.expect_error(BP_STATUS_INVALID_ARGUMENT, "at least 1");
}

// ---------------------------------------------------------------------------
// MaxUnpool
// ---------------------------------------------------------------------------

TEST(CpuRefMath, MaxUnpoolDefaultAndGivenOutputShape) {
  // The values and indices ONNX's conformance case uses (MaxPool 2x2 stride 2 of 4x4).
  const std::vector<float> x{5, 6, 7, 8};
  const std::vector<int64_t> ind{5, 7, 13, 15};
  MathTest t("MaxUnpool", 11, {f32({1, 1, 2, 2}, x), i64({1, 1, 2, 2}, ind)},
             {{BP_DTYPE_FLOAT32, {1, 1, 4, 4}}},
             {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  EXPECT_EQ(t.run_as<float>(),
            (std::vector<float>{0, 0, 0, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0, 7, 0, 8}));
  const std::vector<int64_t> shape{1, 1, 5, 5};
  MathTest big("MaxUnpool", 11,
               {f32({1, 1, 2, 2}, x), i64({1, 1, 2, 2}, ind), i64({4}, shape, true)},
               {{BP_DTYPE_FLOAT32, {1, 1, 5, 5}}},
               {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  std::vector<float> want(25, 0.0f);
  want[1 * 5 + 1] = 5, want[1 * 5 + 3] = 6, want[3 * 5 + 1] = 7, want[3 * 5 + 3] = 8;
  EXPECT_EQ(big.run_as<float>(), want);
}

TEST(CpuRefMath, MaxUnpoolRejectsIndexOutOfRange) {
  MathTest t("MaxUnpool", 11, {f32({1, 1, 1, 1}, {1}), i64({1, 1, 1, 1}, {4})},
             {{BP_DTYPE_FLOAT32, {1, 1, 2, 2}}},
             {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  EXPECT_THROW(t.run(), sdk::Error);
}

// ---------------------------------------------------------------------------
// Einsum
// ---------------------------------------------------------------------------

TEST(CpuRefMath, EinsumMatmulTransposeAndImplicitOutput) {
  const std::vector<float> a{1, 2, 3, 4, 5, 6};        // [2, 3]
  const std::vector<float> b{1, 0, 2, 1, 0, 3, 1, 1};  // wrong size on purpose below
  const std::vector<float> m{1, 0, 0, 1, 2, 1};        // [3, 2]
  MathTest mm("Einsum", 12, {f32({2, 3}, a), f32({3, 2}, m)}, {{BP_DTYPE_FLOAT32, {2, 2}}},
              {attr_s("equation", "ij,jk->ik")});
  EXPECT_EQ(mm.run_as<float>(), (std::vector<float>{7, 5, 16, 11}));
  // Implicit output: labels used once, alphabetical ("ik").
  MathTest imp("Einsum", 12, {f32({2, 3}, a), f32({3, 2}, m)}, {{BP_DTYPE_FLOAT32, {2, 2}}},
               {attr_s("equation", "ij,jk")});
  EXPECT_EQ(imp.run_as<float>(), (std::vector<float>{7, 5, 16, 11}));
  MathTest tr("Einsum", 12, {f32({2, 3}, a)}, {{BP_DTYPE_FLOAT32, {3, 2}}},
              {attr_s("equation", "ij->ji")});
  EXPECT_EQ(tr.run_as<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  // Implicit "ba": the output is "ab", i.e. the transpose of the input.
  MathTest imp_t("Einsum", 12, {f32({2, 3}, a)}, {{BP_DTYPE_FLOAT32, {3, 2}}},
                 {attr_s("equation", "ba")});
  EXPECT_EQ(imp_t.run_as<float>(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  MathTest sum("Einsum", 12, {f32({2, 3}, a)}, {{BP_DTYPE_FLOAT32, {}}},
               {attr_s("equation", "ij->")});
  EXPECT_EQ(sum.run_as<float>(), (std::vector<float>{21}));
  MathTest wrong("Einsum", 12, {f32({2, 4}, b), f32({3, 2}, m)}, {{BP_DTYPE_FLOAT32, {2, 2}}},
                 {attr_s("equation", "ij,jk->ik")});
  wrong.expect_error(BP_STATUS_INVALID_ARGUMENT, "two sizes");
}

TEST(CpuRefMath, EinsumDiagonalTraceOuterAndBatch) {
  const std::vector<float> sq{1, 2, 3, 4, 5, 6, 7, 8, 9};
  MathTest diag("Einsum", 12, {f32({3, 3}, sq)}, {{BP_DTYPE_FLOAT32, {3}}},
                {attr_s("equation", "ii->i")});
  EXPECT_EQ(diag.run_as<float>(), (std::vector<float>{1, 5, 9}));
  MathTest trace("Einsum", 12, {f32({3, 3}, sq)}, {{BP_DTYPE_FLOAT32, {}}},
                 {attr_s("equation", "ii")});
  EXPECT_EQ(trace.run_as<float>(), (std::vector<float>{15}));
  MathTest outer("Einsum", 12, {i32({2}, {1, 2}), i32({3}, {1, 10, 100})},
                 {{BP_DTYPE_INT32, {2, 3}}}, {attr_s("equation", "i,j->ij")});
  EXPECT_EQ(outer.run_as<int32_t>(), (std::vector<int32_t>{1, 10, 100, 2, 20, 200}));
  // Batched matmul against a reference loop.
  const Dims da{2, 2, 3}, db{2, 3, 2};
  const std::vector<float> x = iota_f(12, 1), y = iota_f(12, -2, 0.5f);
  MathTest bmm("Einsum", 12, {f32(da, x), f32(db, y)}, {{BP_DTYPE_FLOAT32, {2, 2, 2}}},
               {attr_s("equation", "bij , bjk -> bik")});
  std::vector<float> want(8, 0);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k)
        for (int j = 0; j < 3; ++j)
          want[(b * 2 + i) * 2 + k] += x[(b * 2 + i) * 3 + j] * y[(b * 3 + j) * 2 + k];
  expect_floats(bmm.run_as<float>(), want);
}

TEST(CpuRefMath, EinsumEllipsisBroadcastsBatchDims) {
  // "...ij,...jk->...ik" with batch dims [2] and [1]: the second broadcasts.
  const std::vector<float> x = iota_f(8, 1);  // [2, 2, 2]
  const std::vector<float> y{1, 2, 3, 4};     // [1, 2, 2]
  MathTest t("Einsum", 12, {f32({2, 2, 2}, x), f32({1, 2, 2}, y)}, {{BP_DTYPE_FLOAT32, {2, 2, 2}}},
             {attr_s("equation", "...ij,...jk->...ik")});
  std::vector<float> want(8, 0);
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 2; ++k)
        for (int j = 0; j < 2; ++j)
          want[(b * 2 + i) * 2 + k] += x[(b * 2 + i) * 2 + j] * y[j * 2 + k];
  EXPECT_EQ(t.run_as<float>(), want);
  // A diagonal over batch: "b...ii->b...i" on [2, 3, 3] ("..." empty).
  const std::vector<float> z = iota_f(18);
  MathTest d("Einsum", 12, {f32({2, 3, 3}, z)}, {{BP_DTYPE_FLOAT32, {2, 3}}},
             {attr_s("equation", "b...ii->b...i")});
  EXPECT_EQ(d.run_as<float>(), (std::vector<float>{0, 4, 8, 9, 13, 17}));
}

TEST(CpuRefMath, EinsumRejectsBadEquations) {
  MathTest chars("Einsum", 12, {f32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2}}},
                 {attr_s("equation", "i1->i")});
  chars.expect_error(BP_STATUS_INVALID_ARGUMENT, "unexpected character");
  MathTest count("Einsum", 12, {f32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2}}},
                 {attr_s("equation", "i,j->i")});
  count.expect_error(BP_STATUS_INVALID_ARGUMENT, "terms");
  MathTest unused("Einsum", 12, {f32({2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {2}}},
                  {attr_s("equation", "i->k")});
  unused.expect_error(BP_STATUS_INVALID_ARGUMENT, "unused");
}

// ---------------------------------------------------------------------------
// CumSum
// ---------------------------------------------------------------------------

TEST(CpuRefMath, CumSumExclusiveReverseAndAxis) {
  const std::vector<float> x{1, 2, 3, 4, 5, 6};  // [2, 3]
  const std::vector<int32_t> axis1{1};
  MathTest plain("CumSum", 14, {f32({2, 3}, x), i32({}, axis1, true)},
                 {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(plain.run_as<float>(), (std::vector<float>{1, 3, 6, 4, 9, 15}));
  MathTest ex_rev("CumSum", 14, {f32({2, 3}, x), i32({}, axis1, true)},
                  {{BP_DTYPE_FLOAT32, {2, 3}}}, {attr_i("exclusive", 1), attr_i("reverse", 1)});
  EXPECT_EQ(ex_rev.run_as<float>(), (std::vector<float>{5, 3, 0, 11, 6, 0}));
  // Axis read at run time (not a constant), negative: -2 is axis 0.
  MathTest run_axis("CumSum", 14, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i64({}, {-2})},
                    {{BP_DTYPE_INT64, {2, 3}}});
  EXPECT_EQ(run_axis.run_as<int64_t>(), (std::vector<int64_t>{1, 2, 3, 5, 7, 9}));
  MathTest bad("CumSum", 14, {f32({2, 3}, x), i64({}, {2})}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_THROW(bad.run(), sdk::Error);
}

// ---------------------------------------------------------------------------
// LpPool, GlobalLpPool
// ---------------------------------------------------------------------------

TEST(CpuRefMath, LpPoolWithPaddingMatchesReference) {
  const std::vector<float> x{1, -2, 3, 4, -5, 6, 7, 8, -9};  // [1, 1, 3, 3]
  MathTest t("LpPool", 11, {f32({1, 1, 3, 3}, x)}, {{BP_DTYPE_FLOAT32, {1, 1, 2, 2}}},
             {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2}),
              attr_ints("pads", {0, 0, 1, 1}), attr_i("p", 2)});
  expect_floats(t.run_as<float>(),
                {std::sqrt(1.f + 4 + 16 + 25), std::sqrt(9.f + 36), std::sqrt(49.f + 64), 9.f});
  MathTest p3("LpPool", 11, {f32({1, 1, 1, 2}, {1, -2})}, {{BP_DTYPE_FLOAT32, {1, 1, 1, 1}}},
              {attr_ints("kernel_shape", {1, 2}), attr_i("p", 3)});
  expect_floats(p3.run_as<float>(), {std::cbrt(9.0f)}, 1e-6f);
}

TEST(CpuRefMath, LpPoolOpset18DilationsAndCeilMode) {
  // Dilation 2: taps 0, 2 and 2, 4.
  MathTest dil("LpPool", 18, {f32({1, 1, 1, 5}, {1, 2, 3, 4, 5})},
               {{BP_DTYPE_FLOAT32, {1, 1, 1, 2}}},
               {attr_ints("kernel_shape", {1, 2}), attr_ints("dilations", {1, 2}),
                attr_ints("strides", {1, 2}), attr_i("p", 1)});
  EXPECT_EQ(dil.run_as<float>(), (std::vector<float>{4, 8}));
  // ceil_mode keeps the partial last window [5].
  MathTest ceil("LpPool", 18, {f32({1, 1, 1, 5}, {1, 2, 3, 4, 5})},
                {{BP_DTYPE_FLOAT32, {1, 1, 1, 3}}},
                {attr_ints("kernel_shape", {1, 2}), attr_ints("strides", {1, 2}),
                 attr_i("ceil_mode", 1), attr_i("p", 1)});
  EXPECT_EQ(ceil.run_as<float>(), (std::vector<float>{3, 7, 5}));
  MathTest floor("LpPool", 18, {f32({1, 1, 1, 5}, {1, 2, 3, 4, 5})},
                 {{BP_DTYPE_FLOAT32, {1, 1, 1, 3}}},
                 {attr_ints("kernel_shape", {1, 2}), attr_ints("strides", {1, 2}), attr_i("p", 1)});
  floor.expect_error(BP_STATUS_INVALID_ARGUMENT, "output shape");
}

TEST(CpuRefMath, GlobalLpPoolPerChannel) {
  MathTest t("GlobalLpPool", 2, {f32({1, 2, 2, 1}, {3, 4, -1, 1})},
             {{BP_DTYPE_FLOAT32, {1, 2, 1, 1}}}, {attr_i("p", 1)});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{7, 2}));
  MathTest l2("GlobalLpPool", 2, {f32({1, 1, 2, 1}, {3, 4})}, {{BP_DTYPE_FLOAT32, {1, 1, 1, 1}}});
  EXPECT_EQ(l2.run_as<float>(), (std::vector<float>{5}));
}

}  // namespace
