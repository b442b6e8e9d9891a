// Unit tests of CpuRef's signal-family kernels (backends/reference/kernels_signal.cpp):
// losses, DFT/STFT, windows, MelWeightMatrix and the random generators.
//
// Expected values come from the ONNX operator documentation or from naive
// double-precision implementations written here (direct sums, no shared code
// with the kernels); the random generators are checked for shape, range,
// moments and seeding rather than for particular values.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

using test_harness::attr_f;
using test_harness::attr_i;
using test_harness::attr_ints;
using test_harness::attr_s;
using test_harness::AttrSpec;
using test_harness::f32;
using test_harness::i32;
using test_harness::i64;
using test_harness::OutSpec;
using test_harness::TensorSpec;

constexpr double kPi = 3.14159265358979323846;

// The signal kernels alone (the family registers every op it owns).
const KernelRegistry& signal_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_signal_kernels(reg);
    return reg;
  }();
  return r;
}

// One node of `op` through this family's registry: its kernel, and runs of it
// with outputs poisoned first (so an unwritten element shows).
class Op {
 public:
  Op(std::string op, int64_t opset, std::vector<TensorSpec> ins, std::vector<OutSpec> outs,
     std::vector<AttrSpec> attrs = {})
      : op_(op),
        ins_(ins),
        outs_(outs),
        t_(std::move(op), opset, std::move(ins), std::move(outs), std::move(attrs)) {}
  std::unique_ptr<Kernel> kernel() const {
    const KernelFactory* f = signal_registry().find(op_);
    if (f == nullptr) throw std::runtime_error("no kernel for " + op_);
    return (*f)(t_.info());
  }
  std::vector<std::vector<uint8_t>> run(const Kernel& k) const {
    std::vector<std::vector<uint8_t>> outs;
    std::vector<void*> out_ptrs;
    for (const OutSpec& o : outs_) {
      outs.emplace_back(static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype), 0xCD);
      out_ptrs.push_back(o.dtype == BP_DTYPE_UNDEFINED ? nullptr : outs.back().data());
    }
    std::vector<const void*> in_ptrs;
    for (const TensorSpec& t : ins_) in_ptrs.push_back(t.present ? t.bytes.data() : nullptr);
    std::vector<double> scratch(k.scratch_bytes() / sizeof(double) + 1);
    k.run(in_ptrs.data(), out_ptrs.data(), scratch.data());
    return outs;
  }
  std::vector<std::vector<uint8_t>> run() const { return run(*kernel()); }
  template <class T>
  std::vector<T> run_as(size_t output = 0) const {
    return as<T>(run()[output]);
  }
  template <class T>
  static std::vector<T> as(const std::vector<uint8_t>& bytes) {
    std::vector<T> v(bytes.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
    return v;
  }

 private:
  std::string op_;
  std::vector<TensorSpec> ins_;
  std::vector<OutSpec> outs_;
  test_harness::OpTest t_;
};

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

void expect_near_all(const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], tol * std::max(1.0, std::fabs(want[i]))) << "at " << i;
}

void expect_throws(const Op& op, bool at_run, const std::string& fragment) {
  try {
    auto k = op.kernel();
    if (!at_run) {
      ADD_FAILURE() << "the factory accepted the node; expected '" << fragment << "'";
      return;
    }
    op.run(*k);
    ADD_FAILURE() << "the run succeeded; expected '" << fragment << "'";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------------ losses

// Naive NegativeLogLikelihoodLoss on [N, C, D] log-probabilities.
std::vector<double> nll_reference(const std::vector<double>& lp, const std::vector<int64_t>& t,
                                  int64_t n, int64_t c, int64_t d, const std::vector<float>* w,
                                  const int64_t* ignore, const std::string& reduction) {
  std::vector<double> loss(static_cast<size_t>(n * d));
  double sum = 0, wsum = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const int64_t cls = t[i * d + j];
      if (ignore != nullptr && cls == *ignore) continue;
      const double wt = w != nullptr ? (*w)[cls] : 1.0;
      loss[i * d + j] = -lp[(i * c + cls) * d + j] * wt;
      sum += loss[i * d + j];
      wsum += wt;
    }
  if (reduction == "none") return loss;
  if (reduction == "sum") return {sum};
  return {sum / wsum};
}

TEST(CpuRefSignal, NllLossReductionsWeightsAndIgnoreIndex) {
  const int64_t n = 3, c = 4, d = 2;
  const std::vector<float> x = random_vec(n * c * d, 1, -3.0f, 0.0f);
  const std::vector<int64_t> target = {0, 3, 2, 1, 1, 1};
  const std::vector<float> weight = {0.5f, 2.0f, 1.0f, 0.25f};
  const std::vector<double> xd(x.begin(), x.end());
  for (const std::string red : {"none", "sum", "mean"}) {
    for (bool weighted : {false, true}) {
      for (bool ignore : {false, true}) {
        SCOPED_TRACE(red + (weighted ? " weighted" : "") + (ignore ? " ignore_index=1" : ""));
        std::vector<TensorSpec> ins = {f32({n, c, d}, x), i64({n, d}, target)};
        if (weighted) ins.push_back(f32({c}, weight));
        std::vector<AttrSpec> attrs = {attr_s("reduction", red)};
        if (ignore) attrs.push_back(attr_i("ignore_index", 1));
        const Dims out = red == "none" ? Dims{n, d} : Dims{};
        Op op("NegativeLogLikelihoodLoss", 13, ins, {{BP_DTYPE_FLOAT32, out}}, attrs);
        const int64_t ii = 1;
        expect_near_all(op.run_as<float>(),
                        nll_reference(xd, target, n, c, d, weighted ? &weight : nullptr,
                                      ignore ? &ii : nullptr, red),
                        1e-6);
      }
    }
  }
}

TEST(CpuRefSignal, NllLossOfTheOnnxDocumentation) {
  // input [[-1, -2, -3], [-4, -5, -6]] (N=2, C=3), target [2, 1], mean: (3 + 5) / 2.
  Op op("NegativeLogLikelihoodLoss", 13, {f32({2, 3}, {-1, -2, -3, -4, -5, -6}), i32({2}, {2, 1})},
        {{BP_DTYPE_FLOAT32, {}}});
  EXPECT_FLOAT_EQ(op.run_as<float>()[0], 4.0f);
}

TEST(CpuRefSignal, NllLossRejectsAnOutOfRangeTarget) {
  Op op("NegativeLogLikelihoodLoss", 13, {f32({2, 3}, {-1, -2, -3, -4, -5, -6}), i64({2}, {2, 3})},
        {{BP_DTYPE_FLOAT32, {}}}, {attr_s("reduction", "sum")});
  expect_throws(op, true, "target value 3 is out of range");
  // The ignored class may lie outside [0, C).
  Op ignored("NegativeLogLikelihoodLoss", 13,
             {f32({2, 3}, {-1, -2, -3, -4, -5, -6}), i64({2}, {2, 7})}, {{BP_DTYPE_FLOAT32, {}}},
             {attr_s("reduction", "sum"), attr_i("ignore_index", 7)});
  EXPECT_FLOAT_EQ(ignored.run_as<float>()[0], 3.0f);
}

TEST(CpuRefSignal, SoftmaxCrossEntropyWithLogProb) {
  const int64_t n = 2, c = 5, d = 3;
  const std::vector<float> x = random_vec(n * c * d, 2, -4.0f, 4.0f);
  const std::vector<int64_t> target = {4, 0, 2, 1, 3, 3};
  // log-softmax along C, in double.
  std::vector<double> lp(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      double s = 0;
      for (int64_t k = 0; k < c; ++k) s += std::exp(static_cast<double>(x[(i * c + k) * d + j]));
      for (int64_t k = 0; k < c; ++k)
        lp[(i * c + k) * d + j] = x[(i * c + k) * d + j] - std::log(s);
    }
  Op op("SoftmaxCrossEntropyLoss", 13, {f32({n, c, d}, x), i64({n, d}, target)},
        {{BP_DTYPE_FLOAT32, {}}, {BP_DTYPE_FLOAT32, {n, c, d}}});
  auto outs = op.run();
  expect_near_all(Op::as<float>(outs[0]),
                  nll_reference(lp, target, n, c, d, nullptr, nullptr, "mean"), 1e-5);
  expect_near_all(Op::as<float>(outs[1]), lp, 1e-5);
  // Without the log_prob output the loss is the same.
  Op no_lp("SoftmaxCrossEntropyLoss", 13, {f32({n, c, d}, x), i64({n, d}, target)},
           {{BP_DTYPE_FLOAT32, {}}});
  EXPECT_EQ(no_lp.run()[0], outs[0]);
}

TEST(CpuRefSignal, MeanLossOverOnlyIgnoredTargetsIsNaN) {
  Op op("SoftmaxCrossEntropyLoss", 13, {f32({2, 2}, {1, 2, 3, 4}), i64({2}, {1, 1})},
        {{BP_DTYPE_FLOAT32, {}}}, {attr_i("ignore_index", 1)});
  EXPECT_TRUE(std::isnan(op.run_as<float>()[0]));
}

TEST(CpuRefSignal, LossInFloat64) {
  std::vector<double> x = {-0.5, -1.5, -2.5, -0.1};
  Op op("NegativeLogLikelihoodLoss", 13,
        {test_harness::tensor(BP_DTYPE_FLOAT64, {2, 2}, x), i64({2}, {1, 0})},
        {{BP_DTYPE_FLOAT64, {2}}}, {attr_s("reduction", "none")});
  const std::vector<double> y = op.run_as<double>();
  EXPECT_DOUBLE_EQ(y[0], 1.5);
  EXPECT_DOUBLE_EQ(y[1], 2.5);
}

// --------------------------------------------------------------------- DFT

// Naive DFT of complex samples (zero-padded or cut to n).
std::vector<std::complex<double>> dft_reference(const std::vector<std::complex<double>>& x,
                                                int64_t n, bool inverse) {
  std::vector<std::complex<double>> y(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    std::complex<double> s = 0;
    for (int64_t j = 0; j < std::min<int64_t>(n, static_cast<int64_t>(x.size())); ++j)
      s += x[j] * std::polar(1.0, (inverse ? 2.0 : -2.0) * kPi * static_cast<double>(j * k) /
                                      static_cast<double>(n));
    y[k] = inverse ? s / static_cast<double>(n) : s;
  }
  return y;
}

TEST(CpuRefSignal, DftAlongEachAxisMatchesANaiveTransform) {
  // x [2, 5, 3, 1] real; transform along axis 1 (length 5) or 2 (length 3).
  const std::vector<float> x = random_vec(2 * 5 * 3, 3);
  for (int64_t axis : {1, 2}) {
    SCOPED_TRACE("axis " + std::to_string(axis));
    const Dims shape = {2, 5, 3, 1};
    Dims out = shape;
    out.back() = 2;
    Op op("DFT", 17, {f32(shape, x)}, {{BP_DTYPE_FLOAT32, out}}, {attr_i("axis", axis)});
    const std::vector<float> y = op.run_as<float>();
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t other = 0; other < (axis == 1 ? 3 : 5); ++other) {
        const int64_t len = shape[axis];
        auto at = [&](int64_t j) {
          return axis == 1 ? (b * 5 + j) * 3 + other : (b * 5 + other) * 3 + j;
        };
        std::vector<std::complex<double>> sig;
        for (int64_t j = 0; j < len; ++j) sig.emplace_back(x[at(j)], 0.0);
        const auto want = dft_reference(sig, len, false);
        for (int64_t k = 0; k < len; ++k) {
          EXPECT_NEAR(y[at(k) * 2], want[k].real(), 1e-5);
          EXPECT_NEAR(y[at(k) * 2 + 1], want[k].imag(), 1e-5);
        }
      }
  }
}

TEST(CpuRefSignal, DftOnesidedLengthAndInverseRoundTrip) {
  // One real signal of 6 samples, dft_length 8 (zero-padded), onesided: 5 bins.
  const std::vector<float> x = {1, -2, 3, 0.5f, -1, 2};
  Op op("DFT", 17, {f32({1, 6, 1}, x), i64({}, {8}, true)}, {{BP_DTYPE_FLOAT32, {1, 5, 2}}},
        {attr_i("onesided", 1)});
  const std::vector<float> y = op.run_as<float>();
  std::vector<std::complex<double>> sig(x.begin(), x.end());
  const auto want = dft_reference(sig, 8, false);
  for (int64_t k = 0; k < 5; ++k) {
    EXPECT_NEAR(y[2 * k], want[k].real(), 1e-5) << k;
    EXPECT_NEAR(y[2 * k + 1], want[k].imag(), 1e-5) << k;
  }
  // Complex forward then inverse gives the signal back.
  const std::vector<float> z = random_vec(2 * 7 * 2, 4);
  Op fwd("DFT", 17, {f32({2, 7, 2}, z)}, {{BP_DTYPE_FLOAT32, {2, 7, 2}}});
  const std::vector<float> zf = fwd.run_as<float>();
  Op inv("DFT", 17, {f32({2, 7, 2}, zf)}, {{BP_DTYPE_FLOAT32, {2, 7, 2}}}, {attr_i("inverse", 1)});
  const std::vector<float> back = inv.run_as<float>();
  for (size_t i = 0; i < z.size(); ++i) EXPECT_NEAR(back[i], z[i], 1e-5) << i;
  // The same for a power-of-two length (the radix-2 path), against the naive sum too.
  const std::vector<float> p2 = random_vec(16 * 2, 6);
  Op fwd16("DFT", 17, {f32({1, 16, 2}, p2)}, {{BP_DTYPE_FLOAT32, {1, 16, 2}}});
  const std::vector<float> p2f = fwd16.run_as<float>();
  std::vector<std::complex<double>> p2c;
  for (int64_t j = 0; j < 16; ++j) p2c.emplace_back(p2[2 * j], p2[2 * j + 1]);
  const auto p2want = dft_reference(p2c, 16, false);
  for (int64_t k = 0; k < 16; ++k) {
    EXPECT_NEAR(p2f[2 * k], p2want[k].real(), 1e-5) << k;
    EXPECT_NEAR(p2f[2 * k + 1], p2want[k].imag(), 1e-5) << k;
  }
  Op inv16("DFT", 17, {f32({1, 16, 2}, p2f)}, {{BP_DTYPE_FLOAT32, {1, 16, 2}}},
           {attr_i("inverse", 1)});
  const std::vector<float> p2back = inv16.run_as<float>();
  for (size_t i = 0; i < p2.size(); ++i) EXPECT_NEAR(p2back[i], p2[i], 1e-5) << i;
  // Onesided output of a complex input is not defined.
  Op bad("DFT", 17, {f32({2, 7, 2}, z)}, {{BP_DTYPE_FLOAT32, {2, 4, 2}}}, {attr_i("onesided", 1)});
  expect_throws(bad, false, "onesided");
}

TEST(CpuRefSignal, StftWithAWindowMatchesWindowedFrames) {
  const std::vector<float> sig = random_vec(20, 5);
  std::vector<float> window(8);
  for (int64_t j = 0; j < 8; ++j) window[j] = 0.5f - 0.5f * std::cos(2.0f * 3.14159265f * j / 8);
  // frames = (20 - 8) / 3 + 1 = 5, onesided bins 5.
  Op op("STFT", 17, {f32({1, 20, 1}, sig), i64({}, {3}, true), f32({8}, window)},
        {{BP_DTYPE_FLOAT32, {1, 5, 5, 2}}});
  const std::vector<float> y = op.run_as<float>();
  for (int64_t f = 0; f < 5; ++f) {
    std::vector<std::complex<double>> frame;
    for (int64_t j = 0; j < 8; ++j) frame.emplace_back(sig[f * 3 + j] * window[j], 0.0);
    const auto want = dft_reference(frame, 8, false);
    for (int64_t k = 0; k < 5; ++k) {
      EXPECT_NEAR(y[(f * 5 + k) * 2], want[k].real(), 1e-5);
      EXPECT_NEAR(y[(f * 5 + k) * 2 + 1], want[k].imag(), 1e-5);
    }
  }
}

// ----------------------------------------------------------------- windows

TEST(CpuRefSignal, WindowsPeriodicSymmetricAndOutputType) {
  struct W {
    const char* op;
    double a0, a1, a2;
  };
  for (const W& w : {W{"HannWindow", 0.5, 0.5, 0}, W{"HammingWindow", 25.0 / 46, 21.0 / 46, 0},
                     W{"BlackmanWindow", 0.42, 0.5, 0.08}}) {
    for (int64_t periodic : {0, 1}) {
      SCOPED_TRACE(std::string(w.op) + (periodic ? " periodic" : " symmetric"));
      const int64_t n = 10;
      Op op(w.op, 17, {i32({}, {10})}, {{BP_DTYPE_FLOAT64, {n}}},
            {attr_i("periodic", periodic), attr_i("output_datatype", BP_DTYPE_FLOAT64)});
      const std::vector<double> y = op.run_as<double>();
      const double denom = periodic ? n : n - 1;
      for (int64_t i = 0; i < n; ++i)
        EXPECT_NEAR(
            y[i],
            w.a0 - w.a1 * std::cos(2 * kPi * i / denom) + w.a2 * std::cos(4 * kPi * i / denom),
            1e-12);
      if (!periodic) {
        EXPECT_NEAR(y[0], y[n - 1], 1e-12);  // symmetric ends
      }
    }
  }
  // Hann's known values: periodic N=4 is [0, 0.5, 1, 0.5].
  Op hann("HannWindow", 17, {i64({}, {4})}, {{BP_DTYPE_FLOAT32, {4}}});
  test_harness::expect_floats(hann.run_as<float>(), {0.0f, 0.5f, 1.0f, 0.5f}, 1e-6f);
  // A size that differs from the output's length (a changed input) is an error.
  Op wrong("HannWindow", 17, {i64({}, {5})}, {{BP_DTYPE_FLOAT32, {4}}});
  expect_throws(wrong, true, "differs from the output length");
}

TEST(CpuRefSignal, MelWeightMatrixOfTheOnnxDocumentation) {
  // num_mel_bins 8, dft_length 16, sample_rate 8192, 0..4096 Hz: the matrix
  // printed in ONNX's MelWeightMatrix test (rows 0-5 carry the filters).
  Op op("MelWeightMatrix", 17,
        {i32({}, {8}), i32({}, {16}), i32({}, {8192}), f32({}, {0.0f}), f32({}, {4096.0f})},
        {{BP_DTYPE_FLOAT32, {9, 8}}});
  const std::vector<float> y = op.run_as<float>();
  std::vector<float> want(72, 0.0f);
  const int ones[][2] = {{0, 0}, {0, 1}, {1, 2}, {1, 3}, {2, 4}, {3, 5}, {4, 6}, {5, 7}};
  for (const auto& rc : ones) want[rc[0] * 8 + rc[1]] = 1.0f;
  test_harness::expect_floats(y, want, 1e-6f);
}

// ------------------------------------------------------------------ random

struct Moments {
  double mean = 0, var = 0, lo = 1e300, hi = -1e300;
};
Moments moments(const std::vector<float>& v) {
  Moments m;
  for (float x : v) {
    m.mean += x;
    m.lo = std::min(m.lo, static_cast<double>(x));
    m.hi = std::max(m.hi, static_cast<double>(x));
  }
  m.mean /= static_cast<double>(v.size());
  for (float x : v) m.var += (x - m.mean) * (x - m.mean);
  m.var /= static_cast<double>(v.size());
  return m;
}

TEST(CpuRefSignal, RandomUniformRangeMomentsAndSeeding) {
  const int64_t n = 200000;
  Op op("RandomUniform", 1, {}, {{BP_DTYPE_FLOAT32, {400, 500}}},
        {attr_ints("shape", {400, 500}), attr_f("low", -2.0f), attr_f("high", 6.0f),
         attr_f("seed", 3.0f)});
  auto k = op.kernel();
  const std::vector<float> a = Op::as<float>(op.run(*k)[0]);
  ASSERT_EQ(static_cast<int64_t>(a.size()), n);
  const Moments m = moments(a);
  EXPECT_GE(m.lo, -2.0);
  EXPECT_LT(m.hi, 6.0);
  EXPECT_NEAR(m.mean, 2.0, 0.05);
  EXPECT_NEAR(m.var, 64.0 / 12.0, 0.1);
  // Seeded: every run, and every kernel made from the node, repeats the values.
  EXPECT_EQ(Op::as<float>(op.run(*k)[0]), a);
  EXPECT_EQ(op.run_as<float>(), a);
  // Another seed, or none, gives other values; unseeded runs differ from each other.
  Op other("RandomUniform", 1, {}, {{BP_DTYPE_FLOAT32, {400, 500}}},
           {attr_ints("shape", {400, 500}), attr_f("low", -2.0f), attr_f("high", 6.0f),
            attr_f("seed", 4.0f)});
  EXPECT_NE(other.run_as<float>(), a);
  Op unseeded("RandomUniform", 1, {}, {{BP_DTYPE_FLOAT32, {1000}}}, {attr_ints("shape", {1000})});
  auto ku = unseeded.kernel();
  EXPECT_NE(unseeded.run(*ku)[0], unseeded.run(*ku)[0]);
}

TEST(CpuRefSignal, RandomNormalLikeMomentsAndDtype) {
  std::vector<int32_t> like(100000, 7);
  Op op("RandomNormalLike", 1, {i32({100, 1000}, like)}, {{BP_DTYPE_FLOAT64, {100, 1000}}},
        {attr_f("mean", 1.5f), attr_f("scale", 0.5f), attr_i("dtype", BP_DTYPE_FLOAT64),
         attr_f("seed", 1.0f)});
  const std::vector<double> y = op.run_as<double>();
  double mean = 0, var = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  for (double v : y) var += (v - mean) * (v - mean);
  var /= static_cast<double>(y.size());
  EXPECT_NEAR(mean, 1.5, 0.01);
  EXPECT_NEAR(var, 0.25, 0.01);
  // Shape of the input is the contract: a different output shape is rejected.
  Op bad("RandomNormalLike", 1, {i32({100, 1000}, like)}, {{BP_DTYPE_FLOAT32, {10}}});
  expect_throws(bad, false, "output shape");
}

TEST(CpuRefSignal, BernoulliFollowsItsProbabilities) {
  const int64_t n = 100000;
  std::vector<float> p(n);
  for (int64_t i = 0; i < n; ++i) p[i] = i % 3 == 0 ? 0.0f : i % 3 == 1 ? 1.0f : 0.3f;
  Op op("Bernoulli", 15, {f32({n}, p)}, {{BP_DTYPE_INT32, {n}}},
        {attr_i("dtype", BP_DTYPE_INT32), attr_f("seed", 9.0f)});
  const std::vector<int32_t> y = op.run_as<int32_t>();
  double ones_at_03 = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 3 == 0) {
      ASSERT_EQ(y[i], 0) << i;
    } else if (i % 3 == 1) {
      ASSERT_EQ(y[i], 1) << i;
    }
    if (i % 3 == 2) {
      ASSERT_TRUE(y[i] == 0 || y[i] == 1);
      ones_at_03 += y[i];
    }
  }
  const int64_t at_03 = n / 3;  // entries with p = 0.3
  EXPECT_NEAR(ones_at_03 / static_cast<double>(at_03), 0.3, 0.01);
}

TEST(CpuRefSignal, MultinomialDrawsFromTheLogProbabilities) {
  // Two rows: log([0.2, 0.8]) and log([0.5, 0.25, 0.25]) padded with -inf.
  const float ninf = -std::numeric_limits<float>::infinity();
  Op op("Multinomial", 7,
        {f32({2, 3}, {std::log(0.2f), std::log(0.8f), ninf, std::log(0.5f), std::log(0.25f),
                      std::log(0.25f)})},
        {{BP_DTYPE_INT64, {2, 50000}}},
        {attr_i("sample_size", 50000), attr_f("seed", 2.0f), attr_i("dtype", BP_DTYPE_INT64)});
  const std::vector<int64_t> y = op.run_as<int64_t>();
  std::vector<double> count(6, 0);
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t s = 0; s < 50000; ++s) {
      const int64_t v = y[r * 50000 + s];
      ASSERT_TRUE(v >= 0 && v < 3) << v;
      count[r * 3 + v] += 1.0 / 50000;
    }
  EXPECT_NEAR(count[0], 0.2, 0.01);
  EXPECT_NEAR(count[1], 0.8, 0.01);
  EXPECT_EQ(count[2], 0.0);  // probability 0 is never drawn
  EXPECT_NEAR(count[3], 0.5, 0.01);
  EXPECT_NEAR(count[4], 0.25, 0.01);
}

TEST(CpuRefSignal, FamilyRegistersEveryOp) {
  for (const char* op :
       {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "DFT", "STFT", "HannWindow",
        "HammingWindow", "BlackmanWindow", "MelWeightMatrix", "RandomUniform", "RandomUniformLike",
        "RandomNormal", "RandomNormalLike", "Bernoulli", "Multinomial"})
    EXPECT_NE(signal_registry().find(op), nullptr) << op;
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

// A model of one RandomNormal [1000] node: runs of one session repeat with a
// seed and differ without one (so the node was not folded into a constant).
TEST(CpuRefSignalModel, RandomNormalSeededRepeatsUnseededDraws) {
  for (bool seeded : {true, false}) {
    SCOPED_TRACE(seeded ? "seeded" : "unseeded");
    test::ModelBuilder b(13);
    onnx::NodeProto& n = b.node("RandomNormal", {}, {"y"}, "rand0");
    test::set_ints(n, "shape", {1000});
    if (seeded) test::set_float(n, "seed", 5.0f);
    b.output("y", {1000});
    auto model = load(b);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    auto session = (*model)->create_session();
    ASSERT_TRUE(session.ok()) << session.status().to_string();
    ASSERT_TRUE((*session)->run().ok());
    const Tensor first = (*session)->output(0).clone();
    ASSERT_TRUE((*session)->run().ok());
    const Tensor& second = (*session)->output(0);
    const bool same = std::memcmp(first.data(), second.data(), first.size_bytes()) == 0;
    EXPECT_EQ(same, seeded);
  }
}

TEST(CpuRefSignalModel, BadLossReductionAndOnesidedComplexDftAreLoadErrors) {
  test::ModelBuilder loss(13);
  loss.input("x", {2, 3});
  loss.input("t", {2}, onnx::TensorProto::INT64);
  test::set_string(loss.node("NegativeLogLikelihoodLoss", {"x", "t"}, {"y"}, "nll0"), "reduction",
                   "average");
  loss.untyped_output("y");
  expect_load_error(loss, "nll0", "reduction");

  test::ModelBuilder wrong_target(13);
  wrong_target.input("x", {2, 3, 4});
  wrong_target.input("t", {2, 3}, onnx::TensorProto::INT64);
  wrong_target.node("SoftmaxCrossEntropyLoss", {"x", "t"}, {"y"}, "sce0");
  wrong_target.untyped_output("y");
  expect_load_error(wrong_target, "sce0", "expected [2,4]");

  test::ModelBuilder dft(17);
  dft.input("x", {1, 8, 2});
  test::set_int(dft.node("DFT", {"x"}, {"y"}, "dft0"), "onesided", 1);
  dft.untyped_output("y");
  expect_load_error(dft, "dft0", "onesided");
}

}  // namespace
}  // namespace backplane::cpuref
