// Unit tests of CpuRef's recurrent kernels (backends/reference/kernels_rnn.cpp):
// RNN, GRU, LSTM against a naive double-precision implementation of ONNX's
// equations written here (one time step at a time, layout 0), plus a few
// values worked out by hand.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

using test_harness::absent;
using test_harness::attr_f;
using test_harness::attr_floats;
using test_harness::attr_i;
using test_harness::attr_s;
using test_harness::AttrSpec;
using test_harness::f32;
using test_harness::i32;
using test_harness::OutSpec;
using test_harness::TensorSpec;

const KernelRegistry& rnn_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_rnn_kernels(reg);
    return reg;
  }();
  return r;
}

// The node, optionally with an `activations` attribute (a string list the
// harness's AttrSpec cannot hold), run through this family's registry.
class Op {
 public:
  Op(std::string op, int64_t opset, std::vector<TensorSpec> ins, std::vector<OutSpec> outs,
     std::vector<AttrSpec> attrs, std::vector<std::string> activations = {})
      : op_(op),
        ins_(ins),
        outs_(outs),
        acts_(std::move(activations)),
        t_(std::move(op), opset, std::move(ins), std::move(outs), std::move(attrs)) {
    if (!acts_.empty()) {
      for (const std::string& a : acts_) act_ptrs_.push_back(a.c_str());
      bp_attribute_t a{};
      a.struct_size = sizeof(a);
      a.name = "activations";
      a.type = BP_ATTR_STRINGS;
      a.count = act_ptrs_.size();
      a.strings = act_ptrs_.data();
      t_.add_raw_attr(a);
    }
  }
  std::unique_ptr<Kernel> kernel() const { return (*rnn_registry().find(op_))(t_.info()); }
  // Outputs as float vectors (empty for an absent output).
  std::vector<std::vector<float>> run() const {
    auto k = kernel();
    std::vector<std::vector<float>> outs;
    std::vector<void*> ptrs;
    for (const OutSpec& o : outs_) {
      outs.emplace_back(o.dtype == BP_DTYPE_UNDEFINED ? 0 : static_cast<size_t>(numel(o.shape)),
                        std::nanf(""));
      ptrs.push_back(o.dtype == BP_DTYPE_UNDEFINED ? nullptr : outs.back().data());
    }
    std::vector<const void*> in;
    for (const TensorSpec& t : ins_) in.push_back(t.present ? t.bytes.data() : nullptr);
    std::vector<uint8_t> scratch(k->scratch_bytes() + 8, 0xFF);
    k->run(in.data(), ptrs.data(), scratch.data());
    return outs;
  }

 private:
  std::string op_;
  std::vector<TensorSpec> ins_;
  std::vector<OutSpec> outs_;
  std::vector<std::string> acts_;
  std::vector<const char*> act_ptrs_;
  test_harness::OpTest t_;
};

std::vector<float> rnd(size_t n, uint32_t seed, float scale = 0.5f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

// ------------------------------------------------------- naive reference

using Fn = std::function<double(double)>;
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Problem {
  int gates = 4;  // 1 RNN, 3 GRU, 4 LSTM
  int64_t seq = 4, batch = 3, input = 3, hidden = 5, dirs = 1;
  bool reverse = false;
  std::vector<float> x, w, r, b, h0, c0, p;  // layout 0; empty = absent
  std::vector<int32_t> lens;                 // empty = absent
  bool linear_before_reset = false, input_forget = false;
  double clip = 0;    // 0 = none
  std::vector<Fn> f;  // per direction: gates' activations, in ONNX order
};

struct Result3 {
  std::vector<double> y, yh, yc;
};

// ONNX's equations, directly.
Result3 reference(const Problem& pb) {
  const int64_t S = pb.seq, B = pb.batch, I = pb.input, H = pb.hidden, G = pb.gates, D = pb.dirs;
  Result3 res;
  res.y.assign(S * D * B * H, 0.0);
  res.yh.assign(D * B * H, 0.0);
  res.yc.assign(D * B * H, 0.0);
  const size_t per = G == 1 ? 1 : G == 3 ? 2 : 3;
  auto cl = [&](double v) { return pb.clip > 0 ? std::min(std::max(v, -pb.clip), pb.clip) : v; };
  for (int64_t d = 0; d < D; ++d) {
    const bool rev = pb.reverse || d == 1;
    const Fn* fn = &pb.f[d * per];
    for (int64_t bt = 0; bt < B; ++bt) {
      const int64_t len = pb.lens.empty() ? S : pb.lens[bt];
      std::vector<double> h(H), c(H);
      for (int64_t j = 0; j < H; ++j) {
        h[j] = pb.h0.empty() ? 0 : pb.h0[(d * B + bt) * H + j];
        c[j] = pb.c0.empty() ? 0 : pb.c0[(d * B + bt) * H + j];
      }
      for (int64_t s = 0; s < len; ++s) {
        const int64_t t = rev ? len - 1 - s : s;
        const float* x = &pb.x[(t * B + bt) * I];
        // Row `row` of (x W^T + Wb) and of (h R^T + Rb), separately.
        auto xw = [&](int64_t row) {
          double v = pb.b.empty() ? 0 : pb.b[d * 2 * G * H + row];
          for (int64_t k = 0; k < I; ++k) v += x[k] * pb.w[(d * G * H + row) * I + k];
          return v;
        };
        auto hr = [&](int64_t row, const std::vector<double>& hv) {
          double v = pb.b.empty() ? 0 : pb.b[d * 2 * G * H + G * H + row];
          for (int64_t k = 0; k < H; ++k) v += hv[k] * pb.r[(d * G * H + row) * H + k];
          return v;
        };
        std::vector<double> nh(H), nc(H);
        for (int64_t j = 0; j < H; ++j) {
          if (G == 1) {
            nh[j] = fn[0](cl(xw(j) + hr(j, h)));
          } else if (G == 3) {
            const double z = fn[0](cl(xw(j) + hr(j, h)));
            const double rr = fn[0](cl(xw(H + j) + hr(H + j, h)));
            double cand;
            if (pb.linear_before_reset) {
              cand = fn[1](cl(xw(2 * H + j) + rr * hr(2 * H + j, h)));
            } else {
              std::vector<double> rh(H);
              for (int64_t k = 0; k < H; ++k) rh[k] = fn[0](cl(xw(H + k) + hr(H + k, h))) * h[k];
              cand = fn[1](cl(xw(2 * H + j) + hr(2 * H + j, rh)));
            }
            nh[j] = (1 - z) * cand + z * h[j];
          } else {
            auto P = [&](int k) { return pb.p.empty() ? 0.0 : pb.p[d * 3 * H + k * H + j]; };
            const double i = fn[0](cl(xw(j) + hr(j, h) + P(0) * c[j]));
            const double f =
                pb.input_forget ? 1 - i : fn[0](cl(xw(2 * H + j) + hr(2 * H + j, h) + P(2) * c[j]));
            const double g = fn[1](cl(xw(3 * H + j) + hr(3 * H + j, h)));
            nc[j] = f * c[j] + i * g;
            const double o = fn[0](cl(xw(H + j) + hr(H + j, h) + P(1) * nc[j]));
            nh[j] = o * fn[2](nc[j]);
          }
        }
        h = nh;
        if (G == 4) c = nc;
        for (int64_t j = 0; j < H; ++j) res.y[((t * D + d) * B + bt) * H + j] = h[j];
      }
      for (int64_t j = 0; j < H; ++j) {
        res.yh[(d * B + bt) * H + j] = h[j];
        res.yc[(d * B + bt) * H + j] = c[j];
      }
    }
  }
  return res;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5) << what << " at " << i;
}

// Random weights, inputs and states for `pb`'s sizes.
void fill(Problem& pb, uint32_t seed, bool bias, bool states, bool peep) {
  const int64_t GH = pb.gates * pb.hidden;
  pb.x = rnd(pb.seq * pb.batch * pb.input, seed, 1.0f);
  pb.w = rnd(pb.dirs * GH * pb.input, seed + 1);
  pb.r = rnd(pb.dirs * GH * pb.hidden, seed + 2);
  if (bias) pb.b = rnd(pb.dirs * 2 * GH, seed + 3);
  if (states) pb.h0 = rnd(pb.dirs * pb.batch * pb.hidden, seed + 4);
  if (states && pb.gates == 4) pb.c0 = rnd(pb.dirs * pb.batch * pb.hidden, seed + 5);
  if (peep) pb.p = rnd(pb.dirs * 3 * pb.hidden, seed + 6);
}

// The node's inputs for `pb` (layout 0).
std::vector<TensorSpec> inputs_of(const Problem& pb) {
  const int64_t GH = pb.gates * pb.hidden;
  // A float input, or absent when `v` is empty.
  auto opt = [](const std::vector<float>& v, Dims shape) {
    return v.empty() ? absent() : f32(shape, v);
  };
  std::vector<TensorSpec> in = {f32({pb.seq, pb.batch, pb.input}, pb.x),
                                f32({pb.dirs, GH, pb.input}, pb.w),
                                f32({pb.dirs, GH, pb.hidden}, pb.r),
                                opt(pb.b, {pb.dirs, 2 * GH}),
                                pb.lens.empty() ? absent() : i32({pb.batch}, pb.lens),
                                opt(pb.h0, {pb.dirs, pb.batch, pb.hidden})};
  if (pb.gates == 4) {
    in.push_back(opt(pb.c0, {pb.dirs, pb.batch, pb.hidden}));
    in.push_back(opt(pb.p, {pb.dirs, 3 * pb.hidden}));
  }
  return in;
}

std::vector<OutSpec> outputs_of(const Problem& pb) {
  std::vector<OutSpec> out = {{BP_DTYPE_FLOAT32, {pb.seq, pb.dirs, pb.batch, pb.hidden}},
                              {BP_DTYPE_FLOAT32, {pb.dirs, pb.batch, pb.hidden}}};
  if (pb.gates == 4) out.push_back({BP_DTYPE_FLOAT32, {pb.dirs, pb.batch, pb.hidden}});
  return out;
}

const char* op_name(int gates) { return gates == 1 ? "RNN" : gates == 3 ? "GRU" : "LSTM"; }

void check(const Problem& pb, std::vector<AttrSpec> attrs, std::vector<std::string> acts = {}) {
  attrs.push_back(attr_i("hidden_size", pb.hidden));
  Op op(op_name(pb.gates), 14, inputs_of(pb), outputs_of(pb), attrs, acts);
  const auto got = op.run();
  const Result3 want = reference(pb);
  expect_close(got[0], want.y, "Y");
  expect_close(got[1], want.yh, "Y_h");
  if (pb.gates == 4) expect_close(got[2], want.yc, "Y_c");
}

const Fn kSig = sigmoid;
const Fn kTanh = [](double x) { return std::tanh(x); };
const Fn kRelu = [](double x) { return x > 0 ? x : 0.0; };

TEST(CpuRefRnn, LstmBidirectionalWithPeepholesStatesAndSequenceLengths) {
  Problem pb;
  pb.dirs = 2;
  pb.lens = {4, 2, 3};
  pb.f = {kSig, kTanh, kTanh, kSig, kTanh, kTanh};
  fill(pb, 10, true, true, true);
  check(pb, {attr_s("direction", "bidirectional")});
}

TEST(CpuRefRnn, LstmReverseInputForgetClipAndActivations) {
  Problem pb;
  pb.reverse = true;
  pb.input_forget = true;
  pb.clip = 0.3;
  // HardSigmoid(alpha 0.3, beta 0.4) for f, LeakyRelu(alpha 0.1) for g, Tanh for h.
  pb.f = {[](double x) { return std::min(1.0, std::max(0.0, 0.3 * x + 0.4)); },
          [](double x) { return x >= 0 ? x : 0.1 * x; }, kTanh};
  fill(pb, 20, true, false, false);
  check(pb,
        {attr_s("direction", "reverse"), attr_i("input_forget", 1), attr_f("clip", 0.3f),
         attr_floats("activation_alpha", {0.3f, 0.1f}), attr_floats("activation_beta", {0.4f})},
        {"HardSigmoid", "LeakyRelu", "Tanh"});
}

TEST(CpuRefRnn, GruLinearBeforeResetBothWays) {
  for (bool lbr : {false, true}) {
    SCOPED_TRACE(lbr ? "linear_before_reset=1" : "linear_before_reset=0");
    Problem pb;
    pb.gates = 3;
    pb.dirs = 2;
    pb.linear_before_reset = lbr;
    pb.lens = {1, 4, 3};
    pb.f = {kSig, kTanh, kSig, kTanh};
    fill(pb, 30, true, true, false);
    check(pb, {attr_s("direction", "bidirectional"), attr_i("linear_before_reset", lbr ? 1 : 0)});
  }
}

TEST(CpuRefRnn, RnnReluWithoutBias) {
  Problem pb;
  pb.gates = 1;
  pb.f = {kRelu};
  fill(pb, 40, false, true, false);
  check(pb, {}, {"Relu"});
}

TEST(CpuRefRnn, RnnByHand) {
  // hidden 1, input 1, W = 1, R = 0.5, no bias, Tanh: h1 = tanh(1), h2 = tanh(-1 + 0.5 h1).
  Op op("RNN", 7, {f32({2, 1, 1}, {1.0f, -1.0f}), f32({1, 1, 1}, {1.0f}), f32({1, 1, 1}, {0.5f})},
        {{BP_DTYPE_FLOAT32, {2, 1, 1, 1}}, {BP_DTYPE_FLOAT32, {1, 1, 1}}}, {});
  const auto y = op.run();
  const double h1 = std::tanh(1.0), h2 = std::tanh(-1.0 + 0.5 * h1);
  EXPECT_NEAR(y[0][0], h1, 1e-6);
  EXPECT_NEAR(y[0][1], h2, 1e-6);
  EXPECT_NEAR(y[1][0], h2, 1e-6);
}

TEST(CpuRefRnn, GruInFloat64) {
  // hidden 1, input 1, W = [z 1, r 1, h 2], R = [0.5, 0.5, 1], B = 0, linear_before_reset 0:
  // z = r = sigmoid(x + 0.5 h), cand = tanh(2x + r h), h' = (1 - z) cand + z h.
  auto dbl = [](Dims s, std::vector<double> v) {
    return test_harness::tensor(BP_DTYPE_FLOAT64, std::move(s), v);
  };
  const std::vector<double> xs = {0.7, -0.4};
  test_harness::OpTest t(
      "GRU", 14, {dbl({2, 1, 1}, xs), dbl({1, 3, 1}, {1, 1, 2}), dbl({1, 3, 1}, {0.5, 0.5, 1})},
      {{BP_DTYPE_FLOAT64, {2, 1, 1, 1}}, {BP_DTYPE_FLOAT64, {1, 1, 1}}});
  auto k = (*rnn_registry().find("GRU"))(t.info());
  std::vector<double> y(2, std::nan("")), yh(1, std::nan(""));
  std::vector<uint8_t> scratch(k->scratch_bytes() + 8);
  std::vector<const void*> in = {nullptr, nullptr, nullptr};
  std::vector<double> w = {1, 1, 2}, r = {0.5, 0.5, 1};
  in[0] = xs.data();
  in[1] = w.data();
  in[2] = r.data();
  std::vector<void*> out = {y.data(), yh.data()};
  k->run(in.data(), out.data(), scratch.data());
  double h = 0;
  for (double x : xs) {
    const double z = sigmoid(x + 0.5 * h), rr = z, cand = std::tanh(2 * x + rr * h);
    h = (1 - z) * cand + z * h;
  }
  EXPECT_NEAR(y[1], h, 1e-14);
  EXPECT_NEAR(yh[0], h, 1e-14);
}

TEST(CpuRefRnn, LstmInFloat16MatchesFloat32) {
  Problem pb;
  pb.dirs = 2;
  pb.f = {kSig, kTanh, kTanh, kSig, kTanh, kTanh};
  fill(pb, 70, true, true, true);
  const Result3 want = reference(pb);
  std::vector<TensorSpec> in = inputs_of(pb);
  for (TensorSpec& t : in) {
    if (!t.present || t.dtype != BP_DTYPE_FLOAT32) continue;
    std::vector<float> v(t.bytes.size() / 4);
    std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
    t = test_harness::f16(t.shape, v);
  }
  std::vector<OutSpec> outs = outputs_of(pb);
  for (OutSpec& o : outs) o.dtype = BP_DTYPE_FLOAT16;
  test_harness::OpTest t("LSTM", 14, in, outs,
                         {attr_s("direction", "bidirectional"), attr_i("hidden_size", pb.hidden)});
  auto k = (*rnn_registry().find("LSTM"))(t.info());
  std::vector<std::vector<uint16_t>> got;
  std::vector<void*> out_ptrs;
  for (const OutSpec& o : outs) got.emplace_back(static_cast<size_t>(numel(o.shape)), 0x7e00);
  for (auto& g : got) out_ptrs.push_back(g.data());
  std::vector<const void*> in_ptrs;
  for (const TensorSpec& s : in) in_ptrs.push_back(s.present ? s.bytes.data() : nullptr);
  std::vector<uint64_t> scratch(k->scratch_bytes() / 8 + 8);
  k->run(in_ptrs.data(), out_ptrs.data(), scratch.data());
  // float16 inputs round the weights: agreement to a few units of 1e-3.
  for (size_t i = 0; i < want.y.size(); ++i)
    ASSERT_NEAR(half_to_float(got[0][i]), want.y[i], 5e-3) << i;
  for (size_t i = 0; i < want.yc.size(); ++i)
    ASSERT_NEAR(half_to_float(got[2][i]), want.yc[i], 5e-3) << i;
}

TEST(CpuRefRnn, LayoutOneIsTheTransposeOfLayoutZero) {
  Problem pb;
  pb.dirs = 2;
  pb.f = {kSig, kTanh, kTanh, kSig, kTanh, kTanh};
  fill(pb, 50, true, true, false);
  const Result3 want = reference(pb);
  // X [batch, seq, input], states [batch, dirs, hidden], Y [batch, seq, dirs, hidden].
  const int64_t S = pb.seq, B = pb.batch, I = pb.input, H = pb.hidden, D = pb.dirs;
  std::vector<float> x1(pb.x.size()), h1(pb.h0.size()), c1(pb.c0.size());
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t k = 0; k < I; ++k) x1[(b * S + t) * I + k] = pb.x[(t * B + b) * I + k];
  for (int64_t d = 0; d < D; ++d)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        h1[(b * D + d) * H + j] = pb.h0[(d * B + b) * H + j];
        c1[(b * D + d) * H + j] = pb.c0[(d * B + b) * H + j];
      }
  std::vector<TensorSpec> in = inputs_of(pb);
  in[0] = f32({B, S, I}, x1);
  in[5] = f32({B, D, H}, h1);
  in[6] = f32({B, D, H}, c1);
  Op op("LSTM", 14, in,
        {{BP_DTYPE_FLOAT32, {B, S, D, H}}, {BP_DTYPE_FLOAT32, {B, D, H}}, {BP_DTYPE_UNDEFINED, {}}},
        {attr_s("direction", "bidirectional"), attr_i("layout", 1), attr_i("hidden_size", H)});
  const auto got = op.run();
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < D; ++d)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < H; ++j)
          ASSERT_NEAR(got[0][((b * S + t) * D + d) * H + j], want.y[((t * D + d) * B + b) * H + j],
                      2e-5);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j)
        ASSERT_NEAR(got[1][(b * D + d) * H + j], want.yh[(d * B + b) * H + j], 2e-5);
}

TEST(CpuRefRnn, BadSequenceLengthAndDirectionAreErrors) {
  Problem pb;
  pb.gates = 3;
  pb.f = {kSig, kTanh};
  pb.lens = {4, 5, 1};  // 5 > seq 4
  fill(pb, 60, false, false, false);
  Op op("GRU", 14, inputs_of(pb), outputs_of(pb), {});
  try {
    (void)op.run();
    ADD_FAILURE() << "expected an error for sequence_lens 5";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence_lens[1] = 5"), std::string::npos) << e.what();
  }
  pb.lens.clear();
  Op dir("GRU", 14, inputs_of(pb), outputs_of(pb), {attr_s("direction", "sideways")});
  EXPECT_THROW(dir.kernel(), sdk::Error);
  Op act("GRU", 14, inputs_of(pb), outputs_of(pb), {}, {"Sigmoid", "Cube"});
  EXPECT_THROW(act.kernel(), sdk::Error);
}

TEST(CpuRefRnn, FamilyRegistersEveryOp) {
  for (const char* op : {"RNN", "GRU", "LSTM"}) EXPECT_NE(rnn_registry().find(op), nullptr) << op;
}

// ------------------------------------------- through the runtime (schemas)

// A one-node LSTM model: x [5, 2, 3], W/R/B for `dirs` directions, hidden 4.
test::ModelBuilder lstm_model(const std::string& direction, int64_t dirs, int64_t w_rows = 16) {
  test::ModelBuilder b(14);
  b.input("x", {5, 2, 3});
  b.random_weight("W", {dirs, w_rows, 3});
  b.random_weight("R", {dirs, 16, 4});
  b.random_weight("B", {dirs, 32});
  onnx::NodeProto& n = b.node("LSTM", {"x", "W", "R", "B"}, {"Y", "Y_h", "Y_c"}, "lstm0");
  test::set_string(n, "direction", direction);
  test::set_int(n, "hidden_size", 4);
  b.untyped_output("Y").untyped_output("Y_h").untyped_output("Y_c");
  return b;
}

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

TEST(CpuRefRnnModel, SchemaInfersEveryOutput) {
  auto model = load(lstm_model("bidirectional", 2));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto& outs = (*model)->outputs();
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].shape, (Shape{5, 2, 2, 4}));
  EXPECT_EQ(outs[1].shape, (Shape{2, 2, 4}));
  EXPECT_EQ(outs[2].shape, (Shape{2, 2, 4}));
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
}

TEST(CpuRefRnnModel, BadAttributesAndShapesNameTheNode) {
  struct Bad {
    test::ModelBuilder model;
    const char* fragment;
  };
  Bad cases[] = {{lstm_model("sideways", 1), "direction"},
                 {lstm_model("forward", 2), "expected [1,16,3]"},       // W for 2 directions
                 {lstm_model("forward", 1, 12), "expected [1,16,3]"}};  // 3 gates' rows
  for (const Bad& c : cases) {
    auto model = load(c.model);
    ASSERT_FALSE(model.ok()) << c.fragment;
    const std::string msg = model.status().to_string();
    EXPECT_NE(msg.find("lstm0"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.fragment), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace backplane::cpuref
