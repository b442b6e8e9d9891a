// kernels_rnn.cpp — RNN, GRU, LSTM.
//
// One kernel for the three ONNX recurrent ops, templated on the element type
// (float32, float64). Per direction and time step, each gate's pre-activation
// is X_t W^T + H_{t-1} R^T + Wb + Rb (GRU's candidate gate and LSTM's
// peepholes differ as ONNX specifies); sequence_lens cuts each batch entry's
// sequence short (Y is 0 past its length, Y_h/Y_c hold the state at its last
// step), a reverse direction walks each entry's own sequence backwards.
#include "kernel.hpp"
#include "kernel_util.hpp"
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

[[noreturn]] void fail(const NodeInfo& info, const std::string& why) {
  throw sdk::invalid(info.describe() + ": " + why);
}

// --------------------------------------------------------------- activations

struct Activation {
  enum Kind {
    kRelu,
    kTanh,
    kSigmoid,
    kAffine,
    kLeakyRelu,
    kThresholdedRelu,
    kScaledTanh,
    kHardSigmoid,
    kElu,
    kSoftsign,
    kSoftplus
  } kind = kTanh;
  double alpha = 0, beta = 0;

  template <class T>
  T operator()(T x) const {
    switch (kind) {
      case kRelu:
        return x > T(0) ? x : T(0);
      case kTanh:
        return std::tanh(x);
      case kSigmoid:
        return T(1) / (T(1) + std::exp(-x));
      case kAffine:
        return T(alpha) * x + T(beta);
      case kLeakyRelu:
        return x >= T(0) ? x : T(alpha) * x;
      case kThresholdedRelu:
        return x > T(alpha) ? x : T(0);
      case kScaledTanh:
        return T(alpha) * std::tanh(T(beta) * x);
      case kHardSigmoid:
        return std::clamp(T(alpha) * x + T(beta), T(0), T(1));
      case kElu:
        return x >= T(0) ? x : T(alpha) * (std::exp(x) - T(1));
      case kSoftsign:
        return x / (T(1) + std::fabs(x));
      case kSoftplus:
        return std::log1p(std::exp(-std::fabs(x))) + std::max(x, T(0));
    }
    return x;
  }
};

// The node's activations, `per_dir` per direction (defaults when absent),
// with activation_alpha/beta consumed in order by the functions that take
// them (ONNX's defaults for the rest).
std::vector<Activation> read_activations(const NodeInfo& info, size_t per_dir, size_t dirs,
                                         const std::vector<std::string>& defaults) {
  std::vector<std::string> names;
  if (const bp_attribute_t* a = info.node.find_attr("activations")) {
    if (a->type != BP_ATTR_STRINGS) fail(info, "attribute 'activations' must be strings");
    for (size_t i = 0; i < a->count; ++i) names.emplace_back(a->strings[i]);
  }
  if (names.empty()) names = defaults;
  // One set for a bidirectional node means the same functions both ways.
  if (names.size() == per_dir && dirs == 2) {
    const std::vector<std::string> one_way = names;  // not insert(end, begin, end): self-aliasing
    names.insert(names.end(), one_way.begin(), one_way.end());
  }
  if (names.size() != per_dir * dirs)
    fail(info, "expected " + std::to_string(per_dir * dirs) + " activations, got " +
                   std::to_string(names.size()));
  const std::vector<float> alphas = info.node.attr_floats("activation_alpha");
  const std::vector<float> betas = info.node.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  auto next = [](const std::vector<float>& v, size_t& i, double fallback) {
    return i < v.size() ? static_cast<double>(v[i++]) : fallback;
  };
  std::vector<Activation> out;
  for (std::string n : names) {
    for (char& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    Activation f;
    if (n == "relu") f.kind = Activation::kRelu;
    else if (n == "tanh") f.kind = Activation::kTanh;
    else if (n == "sigmoid") f.kind = Activation::kSigmoid;
    else if (n == "affine") f = {Activation::kAffine, next(alphas, ai, 1.0), next(betas, bi, 0.0)};
    else if (n == "leakyrelu") f = {Activation::kLeakyRelu, next(alphas, ai, 0.01), 0};
    else if (n == "thresholdedrelu") f = {Activation::kThresholdedRelu, next(alphas, ai, 1.0), 0};
    else if (n == "scaledtanh")
      f = {Activation::kScaledTanh, next(alphas, ai, 1.0), next(betas, bi, 1.0)};
    else if (n == "hardsigmoid")
      f = {Activation::kHardSigmoid, next(alphas, ai, 0.2), next(betas, bi, 0.5)};
    else if (n == "elu") f = {Activation::kElu, next(alphas, ai, 1.0), 0};
    else if (n == "softsign") f.kind = Activation::kSoftsign;
    else if (n == "softplus") f.kind = Activation::kSoftplus;
    else fail(info, "unknown activation function '" + n + "'");
    out.push_back(f);
  }
  return out;
}

// ------------------------------------------------------------------- kernel

struct RnnParams {
  enum Kind { kRnn, kGru, kLstm } kind = kRnn;
  int64_t gates = 1;  // 1, 3, 4
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  bool reverse_only = false;  // direction "reverse"
  int64_t layout = 0;
  bool has_b = false, has_lens = false, has_h0 = false, has_c0 = false, has_p = false;
  bool linear_before_reset = false, input_forget = false;
  bool has_clip = false;
  double clip = 0;
  std::vector<Activation> acts;  // per_dir per direction, forward's first
  bool out_y = false, out_h = false, out_c = false;
  std::string who;
};

// C[M, N] (+)= A[M, K] B[K, N], operands addressed by (row, column) strides.
// float32 goes to the nn family's blocked GEMM; float64 is a plain loop.
template <class T>
void matmul(int64_t M, int64_t N, int64_t K, const T* A, int64_t a_rs, int64_t a_cs, const T* B,
            int64_t b_rs, int64_t b_cs, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      T acc = T(0);
      for (int64_t k = 0; k < K; ++k) acc += A[i * a_rs + k * a_cs] * B[k * b_rs + j * b_cs];
      C[i * ldc + j] = acc;
    }
}
template <>
void matmul<float>(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_rs, int64_t a_cs,
                   const float* B, int64_t b_rs, int64_t b_cs, float* C, int64_t ldc) {
  nn::gemm(M, N, K, 1.0f, A, a_rs, a_cs, B, b_rs, b_cs, C, ldc, false);
}

// Per direction: the input projection X W^T + biases of every time step is
// one GEMM up front (xw); each step then multiplies the batch's hidden
// states by R^T (one GEMM for all entries, also those whose sequence has
// ended: their rows are computed and ignored) and applies the gates.
template <class T>
class RnnKernel final : public Kernel {
 public:
  explicit RnnKernel(RnnParams p) : p_(std::move(p)) {}

  // xw, h, c, recurrent products, GRU's r (.) H, the per-entry step counts.
  size_t scratch_bytes() const override {
    const int64_t B = p_.batch, H = p_.hidden, GH = p_.gates * H;
    const int64_t elems = p_.seq * B * GH + 2 * B * H + B * GH + B * H;
    return static_cast<size_t>(elems) * sizeof(T) + static_cast<size_t>(B) * sizeof(int64_t);
  }

  void run(const void* const* in, void* const* out, void* scratch) const override {
    const int64_t B = p_.batch, H = p_.hidden, GH = p_.gates * H;
    // The step counts first: the scratch is 64-byte aligned and a float16
    // or float32 array before them would leave them misaligned.
    int64_t* lens = static_cast<int64_t*>(scratch);
    T* xw = reinterpret_cast<T*>(lens + B);
    T* h = xw + p_.seq * B * GH;
    T* c = h + B * H;
    T* g = c + B * H;
    T* rh = g + B * GH;
    for (int64_t b = 0; b < B; ++b) {
      lens[b] = p_.seq;
      if (p_.has_lens) {
        lens[b] = static_cast<const int32_t*>(in[4])[b];
        if (lens[b] < 0 || lens[b] > p_.seq)
          throw sdk::invalid(p_.who + ": sequence_lens[" + std::to_string(b) +
                             "] = " + std::to_string(lens[b]) + " is outside [0, " +
                             std::to_string(p_.seq) + "]");
      }
    }
    T* y = p_.out_y ? static_cast<T*>(out[0]) : nullptr;
    if (y != nullptr) std::fill(y, y + p_.seq * p_.dirs * B * H, T(0));
    for (int64_t d = 0; d < p_.dirs; ++d) {
      project_inputs(in, d, xw);
      init_state(in, d, h, c);
      for (int64_t s = 0; s < p_.seq; ++s) step(in, d, s, lens, xw, h, c, g, rh, y);
      for (int64_t b = 0; b < B; ++b) {
        if (p_.out_h)
          std::copy(h + b * H, h + (b + 1) * H, static_cast<T*>(out[1]) + state_at(d, b));
        if (p_.out_c)
          std::copy(c + b * H, c + (b + 1) * H, static_cast<T*>(out[2]) + state_at(d, b));
      }
    }
  }

 private:
  // Row of X (and of xw) holding time t of batch entry b.
  int64_t row(int64_t t, int64_t b) const {
    return p_.layout == 0 ? t * p_.batch + b : b * p_.seq + t;
  }
  int64_t y_at(int64_t t, int64_t d, int64_t b) const {
    return (p_.layout == 0 ? (t * p_.dirs + d) * p_.batch + b : (b * p_.seq + t) * p_.dirs + d) *
           p_.hidden;
  }
  int64_t state_at(int64_t d, int64_t b) const {
    return (p_.layout == 0 ? d * p_.batch + b : b * p_.dirs + d) * p_.hidden;
  }
  bool gru() const { return p_.kind == RnnParams::kGru; }

  // xw = X W_d^T + Wb + Rb, except GRU's candidate rows, which get Wb only
  // (their Rb sits inside the reset gate's product).
  void project_inputs(const void* const* in, int64_t d, T* xw) const {
    const int64_t I = p_.input, H = p_.hidden, GH = p_.gates * H, rows = p_.seq * p_.batch;
    const T* W = static_cast<const T*>(in[1]) + d * GH * I;
    matmul<T>(rows, GH, I, static_cast<const T*>(in[0]), I, 1, W, 1, I, xw, GH);
    if (!p_.has_b) return;
    const T* Bv = static_cast<const T*>(in[3]) + d * 2 * GH;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < GH; ++j)
        xw[r * GH + j] += Bv[j] + (gru() && j >= 2 * H ? T(0) : Bv[GH + j]);
  }

  void init_state(const void* const* in, int64_t d, T* h, T* c) const {
    const int64_t H = p_.hidden;
    for (int64_t b = 0; b < p_.batch; ++b) {
      const T* h0 = p_.has_h0 ? static_cast<const T*>(in[5]) + state_at(d, b) : nullptr;
      const T* c0 = p_.has_c0 ? static_cast<const T*>(in[6]) + state_at(d, b) : nullptr;
      for (int64_t j = 0; j < H; ++j) {
        h[b * H + j] = h0 != nullptr ? h0[j] : T(0);
        c[b * H + j] = c0 != nullptr ? c0[j] : T(0);
      }
    }
  }

  T clipped(T v) const { return p_.has_clip ? std::clamp(v, T(-p_.clip), T(p_.clip)) : v; }

  // Step s of direction d for every batch entry whose sequence is that long
  // (a reverse direction walks each entry's own sequence backwards).
  void step(const void* const* in, int64_t d, int64_t s, const int64_t* lens, const T* xw, T* h,
            T* c, T* g, T* rh, T* y) const {
    const int64_t B = p_.batch, H = p_.hidden, GH = p_.gates * H;
    const bool reverse = p_.reverse_only || d == 1;
    const size_t per_dir = p_.kind == RnnParams::kRnn ? 1 : gru() ? 2 : 3;
    const Activation* f = &p_.acts[static_cast<size_t>(d) * per_dir];
    const T* R = static_cast<const T*>(in[2]) + d * GH * H;
    const T* Rbh =
        p_.has_b && gru() ? static_cast<const T*>(in[3]) + d * 2 * GH + GH + 2 * H : nullptr;
    // g = H R^T (GRU without linear_before_reset: gates z and r only for now).
    const int64_t n_rec = gru() && !p_.linear_before_reset ? 2 * H : GH;
    matmul<T>(B, n_rec, H, h, H, 1, R, 1, H, g, GH);
    auto time_of = [&](int64_t b) { return reverse ? lens[b] - 1 - s : s; };
    if (gru()) {
      // z and r for every active entry, then the candidate's recurrent term.
      for (int64_t b = 0; b < B; ++b) {
        T* gb = g + b * GH;
        if (s >= lens[b]) {
          std::fill(rh + b * H, rh + (b + 1) * H, T(0));
          continue;
        }
        const T* xr = xw + row(time_of(b), b) * GH;
        for (int64_t j = 0; j < 2 * H; ++j) gb[j] = f[0](clipped(xr[j] + gb[j]));
        for (int64_t j = 0; j < H; ++j) rh[b * H + j] = gb[H + j] * h[b * H + j];
      }
      if (!p_.linear_before_reset) matmul<T>(B, H, H, rh, H, 1, R + 2 * H * H, 1, H, g + 2 * H, GH);
    }
    for (int64_t b = 0; b < B; ++b) {
      if (s >= lens[b]) continue;
      const int64_t t = time_of(b);
      const T* xr = xw + row(t, b) * GH;
      T* gb = g + b * GH;
      T* hb = h + b * H;
      T* cb = c + b * H;
      for (int64_t j = 0; j < H; ++j) {
        if (p_.kind == RnnParams::kRnn) {
          hb[j] = f[0](clipped(xr[j] + gb[j]));
        } else if (gru()) {
          // (r (.) H) Rh^T + Rbh, or r (.) (H Rh^T + Rbh) with linear_before_reset.
          const T rb = Rbh != nullptr ? Rbh[j] : T(0);
          const T rec =
              p_.linear_before_reset ? gb[H + j] * (gb[2 * H + j] + rb) : gb[2 * H + j] + rb;
          const T cand = f[1](clipped(xr[2 * H + j] + rec));
          hb[j] = (T(1) - gb[j]) * cand + gb[j] * hb[j];
        } else {
          // Gates i, o, f, c; peepholes P = [Pi, Po, Pf].
          const T* P = p_.has_p ? static_cast<const T*>(in[7]) + d * 3 * H : nullptr;
          const T pi = P != nullptr ? P[j] : T(0), po = P != nullptr ? P[H + j] : T(0),
                  pf = P != nullptr ? P[2 * H + j] : T(0);
          const T ig = f[0](clipped(xr[j] + gb[j] + pi * cb[j]));
          const T fg = p_.input_forget ? T(1) - ig
                                       : f[0](clipped(xr[2 * H + j] + gb[2 * H + j] + pf * cb[j]));
          const T cg = f[1](clipped(xr[3 * H + j] + gb[3 * H + j]));
          cb[j] = fg * cb[j] + ig * cg;
          const T og = f[0](clipped(xr[H + j] + gb[H + j] + po * cb[j]));
          hb[j] = og * f[2](cb[j]);
        }
      }
      if (y != nullptr) std::copy(hb, hb + H, y + y_at(t, d, b));
    }
  }

  RnnParams p_;
};

// float16 nodes run the float32 kernel on widened copies (in scratch) of
// their float16 inputs, and narrow its outputs back.
class Float16Adapter final : public Kernel {
 public:
  Float16Adapter(const NodeInfo& info, RnnParams p)
      : inner_(std::make_unique<RnnKernel<float>>(std::move(p))) {
    for (size_t i = 0; i < info.in_dtypes.size(); ++i)
      in_count_.push_back(info.in_dtypes[i] == BP_DTYPE_FLOAT16 ? numel(info.in_shapes[i]) : -1);
    for (size_t i = 0; i < info.out_dtypes.size(); ++i)
      out_count_.push_back(info.out_dtypes[i] == BP_DTYPE_FLOAT16 ? numel(info.out_shapes[i]) : -1);
  }
  size_t scratch_bytes() const override {
    size_t floats = 0;
    for (int64_t n : in_count_) floats += static_cast<size_t>(std::max<int64_t>(n, 0));
    for (int64_t n : out_count_) floats += static_cast<size_t>(std::max<int64_t>(n, 0));
    return aligned(inner_->scratch_bytes()) + aligned(floats * sizeof(float));
  }
  void run(const void* const* in, void* const* out, void* scratch) const override {
    float* next =
        reinterpret_cast<float*>(static_cast<char*>(scratch) + aligned(inner_->scratch_bytes()));
    const void* ins[8] = {};
    void* outs[3] = {};
    for (size_t i = 0; i < in_count_.size() && i < 8; ++i) {
      ins[i] = in[i];
      if (in_count_[i] < 0 || in[i] == nullptr) continue;
      const auto* h = static_cast<const uint16_t*>(in[i]);
      for (int64_t k = 0; k < in_count_[i]; ++k) next[k] = half_to_float(h[k]);
      ins[i] = next;
      next += in_count_[i];
    }
    for (size_t i = 0; i < out_count_.size() && i < 3; ++i) {
      outs[i] = out[i] != nullptr && out_count_[i] >= 0 ? next : nullptr;
      if (outs[i] != nullptr) next += out_count_[i];
    }
    inner_->run(ins, outs, scratch);
    for (size_t i = 0; i < out_count_.size() && i < 3; ++i) {
      if (outs[i] == nullptr) continue;
      const float* f = static_cast<const float*>(outs[i]);
      for (int64_t k = 0; k < out_count_[i]; ++k)
        static_cast<uint16_t*>(out[i])[k] = float_to_half(f[k]);
    }
  }

 private:
  static size_t aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }
  std::unique_ptr<Kernel> inner_;
  std::vector<int64_t> in_count_, out_count_;  // elements of each float16 tensor, -1 for others
};

KernelFactory recurrent_factory(RnnParams::Kind kind) {
  return [kind](const NodeInfo& info) -> std::unique_ptr<Kernel> {
    require_inputs(info, 3);
    RnnParams p;
    p.kind = kind;
    p.gates = kind == RnnParams::kRnn ? 1 : kind == RnnParams::kGru ? 3 : 4;
    p.who = info.describe();
    const bp_dtype_t dt = info.in_dtypes[0];
    for (size_t i : {1, 2, 3, 5, 6, 7})
      if (info.has_input(i) && info.in_dtypes[i] != dt)
        fail(info, "input " + std::to_string(i) + " has a different dtype from X");
    if (info.has_input(4) && info.in_dtypes[4] != BP_DTYPE_INT32)
      fail(info, "sequence_lens must be int32");
    p.layout = info.node.attr_int("layout", 0);
    if (p.layout != 0 && p.layout != 1) fail(info, "layout must be 0 or 1");
    const std::string direction = info.node.attr_string("direction", "forward");
    if (direction != "forward" && direction != "reverse" && direction != "bidirectional")
      fail(info, "direction '" + direction + "' is not forward, reverse or bidirectional");
    p.dirs = direction == "bidirectional" ? 2 : 1;
    p.reverse_only = direction == "reverse";
    const Dims& x = info.in_shapes[0];
    const Dims& r = info.in_shapes[2];
    if (x.size() != 3 || r.size() != 3) fail(info, "X and R must have rank 3");
    p.seq = p.layout == 0 ? x[0] : x[1];
    p.batch = p.layout == 0 ? x[1] : x[0];
    p.input = x[2];
    p.hidden = info.node.attr_int("hidden_size", r[2]);
    const int64_t GH = p.gates * p.hidden;
    const Dims state =
        p.layout == 0 ? Dims{p.dirs, p.batch, p.hidden} : Dims{p.batch, p.dirs, p.hidden};
    auto expect = [&](size_t i, const Dims& want, const char* name) {
      if (info.has_input(i) && info.in_shapes[i] != want)
        fail(info,
             std::string(name) + " " + dims_str(info.in_shapes[i]) + " is not " + dims_str(want));
    };
    expect(1, {p.dirs, GH, p.input}, "W");
    expect(2, {p.dirs, GH, p.hidden}, "R");
    expect(3, {p.dirs, 2 * GH}, "B");
    expect(4, {p.batch}, "sequence_lens");
    expect(5, state, "initial_h");
    if (kind == RnnParams::kLstm) {
      expect(6, state, "initial_c");
      expect(7, {p.dirs, 3 * p.hidden}, "P");
    }
    p.has_b = info.has_input(3);
    p.has_lens = info.has_input(4);
    p.has_h0 = info.has_input(5);
    p.has_c0 = kind == RnnParams::kLstm && info.has_input(6);
    p.has_p = kind == RnnParams::kLstm && info.has_input(7);
    p.linear_before_reset = info.node.attr_int("linear_before_reset", 0) != 0;
    p.input_forget = info.node.attr_int("input_forget", 0) != 0;
    p.has_clip = info.node.has_attr("clip");
    p.clip = info.node.attr_float("clip", 0.0f);
    if (p.has_clip && !(p.clip > 0)) fail(info, "clip must be > 0");
    if (kind == RnnParams::kRnn) p.acts = read_activations(info, 1, p.dirs, {"Tanh"});
    else if (kind == RnnParams::kGru)
      p.acts = read_activations(info, 2, p.dirs, {"Sigmoid", "Tanh"});
    else p.acts = read_activations(info, 3, p.dirs, {"Sigmoid", "Tanh", "Tanh"});
    auto present = [&](size_t i) {
      return i < info.out_dtypes.size() && info.out_dtypes[i] != BP_DTYPE_UNDEFINED;
    };
    p.out_y = present(0);
    p.out_h = present(1);
    p.out_c = kind == RnnParams::kLstm && present(2);
    const Dims ys = p.layout == 0 ? Dims{p.seq, p.dirs, p.batch, p.hidden}
                                  : Dims{p.batch, p.seq, p.dirs, p.hidden};
    if ((p.out_y && info.out_shapes[0] != ys) || (p.out_h && info.out_shapes[1] != state) ||
        (p.out_c && info.out_shapes[2] != state))
      fail(info, "output shapes do not match Y " + dims_str(ys) + " and state " + dims_str(state));
    if (dt == BP_DTYPE_FLOAT16) return std::make_unique<Float16Adapter>(info, std::move(p));
    return dispatch<float, double>(dt, info, "X", [&](auto tag) -> std::unique_ptr<Kernel> {
      return std::make_unique<RnnKernel<decltype(tag)>>(std::move(p));
    });
  };
}

}  // namespace

void register_rnn_kernels(KernelRegistry& registry) {
  registry.add("RNN", recurrent_factory(RnnParams::kRnn));
  registry.add("GRU", recurrent_factory(RnnParams::kGru));
  registry.add("LSTM", recurrent_factory(RnnParams::kLstm));
}

}  // namespace backplane::cpuref
