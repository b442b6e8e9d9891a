// kernels_signal.cpp — DFT, STFT, window functions, MelWeightMatrix, losses, random generators.
//
// Arithmetic happens in double whatever the storage type (float16, bfloat16,
// float32, float64, integers for windows), so one kernel per op serves every
// element type the schema allows.
#include "kernel.hpp"
#include "kernel_util.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

constexpr double kPi = 3.14159265358979323846;

[[noreturn]] void fail(const NodeInfo& info, const std::string& why) {
  throw sdk::invalid(info.describe() + ": " + why);
}

bool has_output(const NodeInfo& info, size_t i) {
  return i < info.out_dtypes.size() && info.out_dtypes[i] != BP_DTYPE_UNDEFINED;
}

// ----------------------------------------------------- element conversions

float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

bool is_float_dtype(bp_dtype_t dt) {
  return dt == BP_DTYPE_FLOAT32 || dt == BP_DTYPE_FLOAT64 || dt == BP_DTYPE_FLOAT16 ||
         dt == BP_DTYPE_BFLOAT16;
}

// Element i of a buffer of dtype `dt`, as double.
double load(bp_dtype_t dt, const void* p, int64_t i) {
  switch (dt) {
    case BP_DTYPE_FLOAT32:
      return static_cast<const float*>(p)[i];
    case BP_DTYPE_FLOAT64:
      return static_cast<const double*>(p)[i];
    case BP_DTYPE_FLOAT16:
      return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case BP_DTYPE_BFLOAT16:
      return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case BP_DTYPE_INT8:
      return static_cast<const int8_t*>(p)[i];
    case BP_DTYPE_UINT8:
      return static_cast<const uint8_t*>(p)[i];
    case BP_DTYPE_INT16:
      return static_cast<const int16_t*>(p)[i];
    case BP_DTYPE_UINT16:
      return static_cast<const uint16_t*>(p)[i];
    case BP_DTYPE_INT32:
      return static_cast<const int32_t*>(p)[i];
    case BP_DTYPE_UINT32:
      return static_cast<const uint32_t*>(p)[i];
    case BP_DTYPE_INT64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case BP_DTYPE_UINT64:
      return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    case BP_DTYPE_BOOL:
      return static_cast<const uint8_t*>(p)[i] != 0 ? 1.0 : 0.0;
    default:
      return 0.0;
  }
}

// An integer element type gets the value truncated toward zero and clamped to
// its range (NaN becomes 0), so an out-of-range value is never UB.
template <class I>
I to_int(double v) {
  if (std::isnan(v)) return 0;
  const double lo = static_cast<double>(std::numeric_limits<I>::lowest());
  const double hi = static_cast<double>(std::numeric_limits<I>::max());
  if (v <= lo) return std::numeric_limits<I>::lowest();
  if (v >= hi) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

void store(bp_dtype_t dt, void* p, int64_t i, double v) {
  switch (dt) {
    case BP_DTYPE_FLOAT32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      break;
    case BP_DTYPE_FLOAT64:
      static_cast<double*>(p)[i] = v;
      break;
    case BP_DTYPE_FLOAT16:
      static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v));
      break;
    case BP_DTYPE_BFLOAT16:
      static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v));
      break;
    case BP_DTYPE_INT8:
      static_cast<int8_t*>(p)[i] = to_int<int8_t>(v);
      break;
    case BP_DTYPE_UINT8:
      static_cast<uint8_t*>(p)[i] = to_int<uint8_t>(v);
      break;
    case BP_DTYPE_INT16:
      static_cast<int16_t*>(p)[i] = to_int<int16_t>(v);
      break;
    case BP_DTYPE_UINT16:
      static_cast<uint16_t*>(p)[i] = to_int<uint16_t>(v);
      break;
    case BP_DTYPE_INT32:
      static_cast<int32_t*>(p)[i] = to_int<int32_t>(v);
      break;
    case BP_DTYPE_UINT32:
      static_cast<uint32_t*>(p)[i] = to_int<uint32_t>(v);
      break;
    case BP_DTYPE_INT64:
      static_cast<int64_t*>(p)[i] = to_int<int64_t>(v);
      break;
    case BP_DTYPE_UINT64:
      static_cast<uint64_t*>(p)[i] = to_int<uint64_t>(v);
      break;
    case BP_DTYPE_BOOL:
      static_cast<uint8_t*>(p)[i] = v != 0.0 ? 1 : 0;
      break;
    default:
      break;
  }
}

void require_dtype(const NodeInfo& info, bp_dtype_t dt, const char* what, bool allow_ints) {
  const bool ok =
      is_float_dtype(dt) || (allow_ints && dt != BP_DTYPE_UNDEFINED && sdk::dtype_size(dt) != 0);
  if (!ok)
    throw sdk::unsupported(info.describe() + ": " + what + " dtype " + sdk::dtype_name(dt) +
                           " is not supported");
}

// An integer scalar input (int32 or int64).
int64_t load_index(bp_dtype_t dt, const void* p) {
  return dt == BP_DTYPE_INT32 ? *static_cast<const int32_t*>(p) : *static_cast<const int64_t*>(p);
}

// ------------------------------------------------------------------ losses
//
// NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss over input [N, C, D...]
// seen as [N, C, D] (D the product of the trailing dims), target [N, D].
// SoftmaxCrossEntropyLoss first takes the log-softmax along C (into log_prob
// when that output is wanted, else into scratch).

class LossKernel final : public Kernel {
 public:
  struct Params {
    int64_t n = 0, c = 0, d = 0;
    bool softmax = false, weighted = false, has_ignore = false;
    int64_t ignore = 0;
    enum Reduction { kNone, kSum, kMean } reduction = kMean;
    bp_dtype_t dt = BP_DTYPE_FLOAT32, index_dt = BP_DTYPE_INT64;
    bool log_prob_out = false;
    std::string who;
  };
  explicit LossKernel(Params p) : p_(std::move(p)) {}

  size_t scratch_bytes() const override {
    return p_.softmax ? static_cast<size_t>(p_.n * p_.c * p_.d) * sizeof(double) : 0;
  }

  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const void* x = inputs[0];
    const void* target = inputs[1];
    const void* weight = p_.weighted ? inputs[2] : nullptr;
    double* lp = static_cast<double*>(scratch);
    if (p_.softmax) log_softmax(x, lp, p_.log_prob_out ? outputs[1] : nullptr);
    auto logp = [&](int64_t n, int64_t c, int64_t d) {
      const int64_t i = (n * p_.c + c) * p_.d + d;
      return p_.softmax ? lp[i] : load(p_.dt, x, i);
    };
    double total = 0.0, weight_sum = 0.0;
    for (int64_t n = 0; n < p_.n; ++n) {
      for (int64_t d = 0; d < p_.d; ++d) {
        const int64_t t = p_.index_dt == BP_DTYPE_INT32
                              ? static_cast<const int32_t*>(target)[n * p_.d + d]
                              : static_cast<const int64_t*>(target)[n * p_.d + d];
        double loss = 0.0, w = 0.0;
        if (!(p_.has_ignore && t == p_.ignore)) {
          if (t < 0 || t >= p_.c)
            throw sdk::invalid(p_.who + ": target value " + std::to_string(t) +
                               " is out of range for " + std::to_string(p_.c) + " classes");
          w = weight != nullptr ? load(p_.dt, weight, t) : 1.0;
          loss = -logp(n, t, d) * w;
        }
        if (p_.reduction == Params::kNone) store(p_.dt, outputs[0], n * p_.d + d, loss);
        total += loss;
        weight_sum += w;
      }
    }
    // "mean" divides by the summed weights of the targets that count (ONNX,
    // PyTorch); 0/0 when every target is ignored gives NaN, as both do.
    if (p_.reduction == Params::kSum) store(p_.dt, outputs[0], 0, total);
    if (p_.reduction == Params::kMean) store(p_.dt, outputs[0], 0, total / weight_sum);
  }

 private:
  void log_softmax(const void* x, double* lp, void* log_prob) const {
    for (int64_t n = 0; n < p_.n; ++n) {
      for (int64_t d = 0; d < p_.d; ++d) {
        const int64_t base = n * p_.c * p_.d + d;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t c = 0; c < p_.c; ++c) mx = std::max(mx, load(p_.dt, x, base + c * p_.d));
        double sum = 0.0;
        for (int64_t c = 0; c < p_.c; ++c) sum += std::exp(load(p_.dt, x, base + c * p_.d) - mx);
        const double lse = mx + std::log(sum);
        for (int64_t c = 0; c < p_.c; ++c) {
          const int64_t i = base + c * p_.d;
          lp[i] = load(p_.dt, x, i) - lse;
          if (log_prob != nullptr) store(p_.dt, log_prob, i, lp[i]);
        }
      }
    }
  }

  Params p_;
};

std::unique_ptr<Kernel> make_loss(const NodeInfo& info, bool softmax) {
  require_inputs(info, 2);
  LossKernel::Params p;
  p.softmax = softmax;
  p.who = info.describe();
  p.dt = info.in_dtypes[0];
  require_dtype(info, p.dt, "input", false);
  p.index_dt = info.in_dtypes[1];
  if (p.index_dt != BP_DTYPE_INT32 && p.index_dt != BP_DTYPE_INT64)
    fail(info, std::string("target dtype ") + sdk::dtype_name(p.index_dt) + " is not int32/int64");
  const Dims& x = info.in_shapes[0];
  if (x.size() < 2) fail(info, "input " + dims_str(x) + " must have rank >= 2");
  p.n = x[0];
  p.c = x[1];
  p.d = 1;
  for (size_t i = 2; i < x.size(); ++i) p.d *= x[i];
  Dims want = {x[0]};
  want.insert(want.end(), x.begin() + 2, x.end());
  if (info.in_shapes[1] != want)
    fail(info, "target " + dims_str(info.in_shapes[1]) + " does not match input " + dims_str(x));
  p.weighted = info.has_input(2);
  if (p.weighted && (info.in_shapes[2] != Dims{p.c} || info.in_dtypes[2] != p.dt))
    fail(info, "weight " + dims_str(info.in_shapes[2]) + " must be [" + std::to_string(p.c) +
                   "] of the input's dtype");
  p.has_ignore = info.node.has_attr("ignore_index");
  p.ignore = info.node.attr_int("ignore_index", 0);
  const std::string red = info.node.attr_string("reduction", "mean");
  if (red == "none") p.reduction = LossKernel::Params::kNone;
  else if (red == "sum") p.reduction = LossKernel::Params::kSum;
  else if (red == "mean") p.reduction = LossKernel::Params::kMean;
  else fail(info, "reduction '" + red + "' is not none, sum or mean");
  if (info.out_dtypes[0] != p.dt ||
      info.out_shapes[0] != (p.reduction == LossKernel::Params::kNone ? want : Dims{}))
    fail(info, "output " + dims_str(info.out_shapes[0]) + " does not match the reduction");
  p.log_prob_out = softmax && has_output(info, 1);
  if (p.log_prob_out && info.out_shapes[1] != x)
    fail(info, "log_prob " + dims_str(info.out_shapes[1]) + " must have the input's shape");
  return std::make_unique<LossKernel>(std::move(p));
}

// ---------------------------------------------------------------- DFT/STFT

// exp(-2 pi i m / n) for m in [0, n): the DFT's twiddle factors, so a
// transform of length n indexes them by (j * k) mod n instead of calling
// cos/sin per term.
struct Twiddles {
  std::vector<double> re, im;
  explicit Twiddles(int64_t n) : re(static_cast<size_t>(n)), im(static_cast<size_t>(n)) {
    for (int64_t m = 0; m < n; ++m) {
      const double a = -2.0 * kPi * static_cast<double>(m) / static_cast<double>(n);
      re[m] = std::cos(a);
      im[m] = std::sin(a);
    }
  }
};

// One transform of `count` input samples (zero-padded or cut to length n),
// writing `out_len` bins: element j of the input is at in + j * in_stride
// (real at [0], imaginary at [1] when complex), bin k goes to out + k * out_stride.
struct Transform {
  int64_t n = 0, count = 0, out_len = 0;
  bool complex_in = false, inverse = false;
  bp_dtype_t dt = BP_DTYPE_FLOAT32;
  const Twiddles* tw = nullptr;

  // A power-of-two length runs as a radix-2 FFT in scratch (2n doubles);
  // any other length as the direct O(n^2) sum.
  bool pow2() const { return n >= 2 && (n & (n - 1)) == 0; }
  size_t scratch_bytes() const { return pow2() ? 2 * static_cast<size_t>(n) * sizeof(double) : 0; }

  template <class Sample>
  void operator()(Sample&& sample, void* out, int64_t out_base, int64_t out_stride,
                  double* buf) const {
    const double scale = inverse ? 1.0 / static_cast<double>(n) : 1.0;
    if (pow2()) {
      fft(sample, buf);
      for (int64_t k = 0; k < out_len; ++k) {
        store(dt, out, out_base + k * out_stride, buf[2 * k] * scale);
        store(dt, out, out_base + k * out_stride + 1, buf[2 * k + 1] * scale);
      }
      return;
    }
    for (int64_t k = 0; k < out_len; ++k) {
      double re = 0.0, im = 0.0;
      for (int64_t j = 0; j < count; ++j) {
        double xr, xi;
        sample(j, &xr, &xi);
        const int64_t m = (j * k) % n;
        const double wr = tw->re[m], wi = inverse ? -tw->im[m] : tw->im[m];
        re += xr * wr - xi * wi;
        im += xr * wi + xi * wr;
      }
      store(dt, out, out_base + k * out_stride, re * scale);
      store(dt, out, out_base + k * out_stride + 1, im * scale);
    }
  }

 private:
  // In-place iterative radix-2 FFT: samples loaded in bit-reversed order
  // (zero-padded past `count`), then log2(n) passes of butterflies.
  template <class Sample>
  void fft(Sample& sample, double* buf) const {
    int bits = 0;
    while ((int64_t{1} << bits) < n) ++bits;
    for (int64_t j = 0; j < n; ++j) {
      int64_t rev = 0;
      for (int b = 0; b < bits; ++b) rev |= ((j >> b) & 1) << (bits - 1 - b);
      if (j < count) {
        sample(j, &buf[2 * rev], &buf[2 * rev + 1]);
      } else {
        buf[2 * rev] = buf[2 * rev + 1] = 0.0;
      }
    }
    for (int64_t len = 2; len <= n; len <<= 1) {
      const int64_t half = len / 2, step = n / len;
      for (int64_t i = 0; i < n; i += len) {
        for (int64_t k = 0; k < half; ++k) {
          const double wr = tw->re[k * step], wi = inverse ? -tw->im[k * step] : tw->im[k * step];
          double* a = buf + 2 * (i + k);
          double* b = buf + 2 * (i + k + half);
          const double tr = b[0] * wr - b[1] * wi, ti = b[0] * wi + b[1] * wr;
          b[0] = a[0] - tr;
          b[1] = a[1] - ti;
          a[0] += tr;
          a[1] += ti;
        }
      }
    }
  }
};

class DftKernel final : public Kernel {
 public:
  DftKernel(int64_t outer, int64_t axis_len, int64_t inner, int64_t comps, Transform t)
      : outer_(outer),
        axis_len_(axis_len),
        inner_(inner),
        comps_(comps),
        t_(t),
        tw_(std::make_shared<Twiddles>(t.n)) {
    t_.tw = tw_.get();
  }
  size_t scratch_bytes() const override { return t_.scratch_bytes(); }
  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const void* x = inputs[0];
    for (int64_t o = 0; o < outer_; ++o) {
      for (int64_t i = 0; i < inner_; ++i) {
        const int64_t in_base = (o * axis_len_ * inner_ + i) * comps_;
        auto sample = [&](int64_t j, double* re, double* im) {
          const int64_t at = in_base + j * inner_ * comps_;
          *re = load(t_.dt, x, at);
          *im = comps_ == 2 ? load(t_.dt, x, at + 1) : 0.0;
        };
        t_(sample, outputs[0], (o * t_.out_len * inner_ + i) * 2, inner_ * 2,
           static_cast<double*>(scratch));
      }
    }
  }

 private:
  int64_t outer_, axis_len_, inner_, comps_;
  Transform t_;
  std::shared_ptr<const Twiddles> tw_;
};

std::unique_ptr<Kernel> make_dft(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& x = info.in_shapes[0];
  const int64_t r = static_cast<int64_t>(x.size());
  if (r < 3 || (x.back() != 1 && x.back() != 2))
    fail(info, "input " + dims_str(x) + " must be [batch, signal..., 1 or 2]");
  Transform t;
  t.dt = info.in_dtypes[0];
  require_dtype(info, t.dt, "input", false);
  int64_t axis = info.node.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r - 2) fail(info, "axis is not a signal axis of " + dims_str(x));
  t.inverse = info.node.attr_int("inverse", 0) != 0;
  const bool onesided = info.node.attr_int("onesided", 0) != 0;
  t.complex_in = x.back() == 2;
  if (onesided && t.complex_in) fail(info, "onesided output needs a real input");
  t.n = x[axis];
  if (info.has_input(1)) {
    if (info.constant(1) == nullptr) fail(info, "dft_length must be a constant");
    t.n = load_index(info.in_dtypes[1], info.constant(1));
  }
  if (t.n < 1) fail(info, "dft_length " + std::to_string(t.n) + " must be >= 1");
  t.count = std::min(t.n, x[axis]);
  t.out_len = onesided ? t.n / 2 + 1 : t.n;
  Dims want = x;
  want[axis] = t.out_len;
  want.back() = 2;
  if (info.out_shapes[0] != want || info.out_dtypes[0] != t.dt)
    fail(info, "output " + dims_str(info.out_shapes[0]) + " is not " + dims_str(want));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  for (int64_t d = axis + 1; d < r - 1; ++d) inner *= x[d];
  return std::make_unique<DftKernel>(outer, x[axis], inner, x.back(), t);
}

class StftKernel final : public Kernel {
 public:
  StftKernel(int64_t batch, int64_t length, int64_t comps, int64_t frames, int64_t step,
             bool windowed, Transform t)
      : batch_(batch),
        length_(length),
        comps_(comps),
        frames_(frames),
        step_(step),
        windowed_(windowed),
        t_(t),
        tw_(std::make_shared<Twiddles>(t.n)) {
    t_.tw = tw_.get();
  }
  size_t scratch_bytes() const override { return t_.scratch_bytes(); }
  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const void* x = inputs[0];
    const void* w = windowed_ ? inputs[2] : nullptr;
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t f = 0; f < frames_; ++f) {
        const int64_t in_base = (b * length_ + f * step_) * comps_;
        auto sample = [&](int64_t j, double* re, double* im) {
          const double wj = w != nullptr ? load(t_.dt, w, j) : 1.0;
          *re = load(t_.dt, x, in_base + j * comps_) * wj;
          *im = comps_ == 2 ? load(t_.dt, x, in_base + j * comps_ + 1) * wj : 0.0;
        };
        t_(sample, outputs[0], (b * frames_ + f) * t_.out_len * 2, 2,
           static_cast<double*>(scratch));
      }
    }
  }

 private:
  int64_t batch_, length_, comps_, frames_, step_;
  bool windowed_;
  Transform t_;
  std::shared_ptr<const Twiddles> tw_;
};

std::unique_ptr<Kernel> make_stft(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& s = info.in_shapes[0];
  if (s.size() != 3 || (s[2] != 1 && s[2] != 2))
    fail(info, "signal " + dims_str(s) + " must be [batch, length, 1 or 2]");
  Transform t;
  t.dt = info.in_dtypes[0];
  require_dtype(info, t.dt, "signal", false);
  if (info.constant(1) == nullptr) fail(info, "frame_step must be a constant");
  const int64_t step = load_index(info.in_dtypes[1], info.constant(1));
  int64_t length = -1;
  const bool windowed = info.has_input(2);
  if (windowed) {
    if (info.in_shapes[2].size() != 1 || info.in_dtypes[2] != t.dt)
      fail(info, "window " + dims_str(info.in_shapes[2]) + " must be 1-D of the signal's dtype");
    length = info.in_shapes[2][0];
  }
  if (info.has_input(3)) {
    if (info.constant(3) == nullptr) fail(info, "frame_length must be a constant");
    const int64_t fl = load_index(info.in_dtypes[3], info.constant(3));
    if (length >= 0 && fl != length) fail(info, "frame_length differs from the window's length");
    length = fl;
  }
  if (step < 1 || length < 1 || length > s[1])
    fail(info, "frame_step " + std::to_string(step) + " / frame length " + std::to_string(length) +
                   " do not fit a signal of length " + std::to_string(s[1]));
  const bool onesided = info.node.attr_int("onesided", 1) != 0;
  if (onesided && s[2] == 2) fail(info, "onesided output needs a real signal");
  t.n = t.count = length;
  t.complex_in = s[2] == 2;
  t.out_len = onesided ? length / 2 + 1 : length;
  const int64_t frames = (s[1] - length) / step + 1;
  if (info.out_shapes[0] != Dims{s[0], frames, t.out_len, 2} || info.out_dtypes[0] != t.dt)
    fail(info, "output " + dims_str(info.out_shapes[0]) + " does not match the framing");
  return std::make_unique<StftKernel>(s[0], s[1], s[2], frames, step, windowed, t);
}

// ----------------------------------------------------------------- windows

// Generalised cosine window a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N),
// N = size (periodic) or size - 1 (symmetric).
class WindowKernel final : public Kernel {
 public:
  WindowKernel(double a0, double a1, double a2, bool periodic, int64_t size, bp_dtype_t size_dt,
               bp_dtype_t out_dt, std::string who)
      : a0_(a0),
        a1_(a1),
        a2_(a2),
        periodic_(periodic),
        size_(size),
        size_dt_(size_dt),
        out_dt_(out_dt),
        who_(std::move(who)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    if (load_index(size_dt_, inputs[0]) != size_)
      throw sdk::invalid(who_ + ": size " + std::to_string(load_index(size_dt_, inputs[0])) +
                         " differs from the output length " + std::to_string(size_));
    const double denom = static_cast<double>(periodic_ ? size_ : size_ - 1);
    for (int64_t i = 0; i < size_; ++i) {
      // A symmetric window of one sample is [1] (0/0 otherwise).
      const double x = denom > 0 ? 2.0 * kPi * static_cast<double>(i) / denom : 0.0;
      const double v =
          size_ == 1 && !periodic_ ? 1.0 : a0_ - a1_ * std::cos(x) + a2_ * std::cos(2 * x);
      store(out_dt_, outputs[0], i, v);
    }
  }

 private:
  double a0_, a1_, a2_;
  bool periodic_;
  int64_t size_;
  bp_dtype_t size_dt_, out_dt_;
  std::string who_;
};

KernelFactory window_factory(double a0, double a1, double a2) {
  return [=](const NodeInfo& info) -> std::unique_ptr<Kernel> {
    require_inputs(info, 1);
    if (info.in_dtypes[0] != BP_DTYPE_INT32 && info.in_dtypes[0] != BP_DTYPE_INT64)
      fail(info, "size must be int32 or int64");
    if (numel(info.in_shapes[0]) != 1 || info.out_shapes[0].size() != 1)
      fail(info, "size must be a scalar and the output 1-D");
    require_dtype(info, info.out_dtypes[0], "output", true);
    return std::make_unique<WindowKernel>(a0, a1, a2, info.node.attr_int("periodic", 1) != 0,
                                          info.out_shapes[0][0], info.in_dtypes[0],
                                          info.out_dtypes[0], info.describe());
  };
}

// -------------------------------------------------------- MelWeightMatrix

// Triangular filters between mel-spaced points, as ONNX's reference (and
// ONNX Runtime) compute them: num_mel_bins + 2 points evenly spaced in mel
// between the edges, mapped back to hertz and floored to DFT bins.
class MelKernel final : public Kernel {
 public:
  MelKernel(int64_t bins, int64_t rows, bp_dtype_t int_dt, bp_dtype_t float_dt, bp_dtype_t out_dt,
            std::string who)
      : bins_(bins),
        rows_(rows),
        int_dt_(int_dt),
        float_dt_(float_dt),
        out_dt_(out_dt),
        who_(std::move(who)) {}
  size_t scratch_bytes() const override { return static_cast<size_t>(bins_ + 2) * sizeof(int64_t); }

  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const int64_t bins = load_index(int_dt_, inputs[0]);
    const int64_t dft_length = load_index(int_dt_, inputs[1]);
    const int64_t rate = load_index(int_dt_, inputs[2]);
    const double lower = load(float_dt_, inputs[3], 0), upper = load(float_dt_, inputs[4], 0);
    if (bins != bins_ || dft_length < 1 || dft_length / 2 + 1 != rows_)
      throw sdk::invalid(who_ + ": num_mel_bins/dft_length differ from the output's shape");
    if (rate <= 0 || !(lower >= 0.0) || !(upper > lower))
      throw sdk::invalid(who_ +
                         ": needs sample_rate > 0 and 0 <= lower_edge_hertz < upper_edge_hertz");
    const int64_t spectrogram_bins = rows_;
    const int64_t total = spectrogram_bins * bins_;
    for (int64_t i = 0; i < total; ++i) store(out_dt_, outputs[0], i, 0.0);
    auto mel = [](double hz) { return 2595.0 * std::log10(1.0 + hz / 700.0); };
    const double low_mel = mel(lower),
                 step = (mel(upper) - low_mel) / static_cast<double>(bins_ + 2);
    int64_t* points = static_cast<int64_t*>(scratch);
    for (int64_t i = 0; i < bins_ + 2; ++i) {
      const double hz =
          700.0 * (std::pow(10.0, (static_cast<double>(i) * step + low_mel) / 2595.0) - 1.0);
      points[i] = static_cast<int64_t>(
          std::floor(static_cast<double>(dft_length + 1) * hz / static_cast<double>(rate)));
    }
    // Rows past the spectrogram (an upper edge above the Nyquist frequency) are dropped.
    auto put = [&](int64_t row, int64_t col, double v) {
      if (row >= 0 && row < spectrogram_bins) store(out_dt_, outputs[0], row * bins_ + col, v);
    };
    for (int64_t i = 0; i < bins_; ++i) {
      const int64_t lo = points[i], center = points[i + 1], hi = points[i + 2];
      if (center == lo) put(center, i, 1.0);
      for (int64_t j = lo; center > lo && j <= center; ++j)
        put(j, i, static_cast<double>(j - lo) / static_cast<double>(center - lo));
      for (int64_t j = center; j < hi; ++j)
        put(j, i, static_cast<double>(hi - j) / static_cast<double>(hi - center));
    }
  }

 private:
  int64_t bins_, rows_;
  bp_dtype_t int_dt_, float_dt_, out_dt_;
  std::string who_;
};

std::unique_ptr<Kernel> make_mel(const NodeInfo& info) {
  require_inputs(info, 5);
  const bp_dtype_t int_dt = info.in_dtypes[0];
  if (int_dt != BP_DTYPE_INT32 && int_dt != BP_DTYPE_INT64)
    fail(info, "num_mel_bins must be int32 or int64");
  require_dtype(info, info.in_dtypes[3], "lower_edge_hertz", false);
  require_dtype(info, info.out_dtypes[0], "output", true);
  const Dims& o = info.out_shapes[0];
  if (o.size() != 2 || o[0] < 1 || o[1] < 1) fail(info, "output " + dims_str(o) + " must be 2-D");
  // The run reads every input (none needs to be constant) and checks them
  // against the output's shape.
  return std::make_unique<MelKernel>(o[1], o[0], int_dt, info.in_dtypes[3], info.out_dtypes[0],
                                     info.describe());
}

// ------------------------------------------------------------------ random
//
// Counter-based generation: element i of a run is a hash of (seed, run
// number, i), so run() needs no mutable generator state and several
// execution contexts can run one kernel at once. With a `seed` attribute
// every run gives the same values (reproducible, like a seeded framework
// op); without one each run draws a fresh stream (the run number advances
// atomically and the base seed comes from std::random_device).

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Stream {
 public:
  explicit Stream(uint64_t key) : key_(key) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t i) const {
    return static_cast<double>(splitmix64(key_ ^ splitmix64(i)) >> 11) * 0x1.0p-53;
  }
  // Standard normal (Box-Muller on two uniforms).
  double normal(uint64_t i) const {
    const double u1 = 1.0 - uniform(2 * i), u2 = uniform(2 * i + 1);  // u1 in (0, 1]
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  }

 private:
  uint64_t key_;
};

class RandomSource {
 public:
  explicit RandomSource(const NodeInfo& info) {
    const bp_attribute_t* seed = info.node.find_attr("seed");
    if (seed != nullptr) {
      if (seed->type != BP_ATTR_FLOAT) fail(info, "attribute 'seed' must be a float");
      seeded_ = true;
      uint32_t bits;
      std::memcpy(&bits, &seed->f, sizeof(bits));
      base_ = splitmix64(bits);
    } else {
      std::random_device rd;
      base_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
  }
  // A copy shares nothing mutable: the run counter is per source object.
  Stream next() const {
    if (seeded_) return Stream(base_);
    return Stream(splitmix64(base_ + runs_.fetch_add(1, std::memory_order_relaxed)));
  }

 private:
  bool seeded_ = false;
  uint64_t base_ = 0;
  mutable std::atomic<uint64_t> runs_{0};
};

class RandomKernel final : public Kernel {
 public:
  enum Kind { kUniform, kNormal, kBernoulli };
  RandomKernel(const NodeInfo& info, Kind kind, double a, double b)
      : source_(info),
        kind_(kind),
        a_(a),
        b_(b),
        count_(numel(info.out_shapes[0])),
        out_dt_(info.out_dtypes[0]),
        in_dt_(info.in_dtypes.empty() ? BP_DTYPE_UNDEFINED : info.in_dtypes[0]) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const Stream s = source_.next();
    for (int64_t i = 0; i < count_; ++i) {
      const auto u = static_cast<uint64_t>(i);
      double v;
      switch (kind_) {
        case kUniform:
          v = a_ + (b_ - a_) * s.uniform(u);
          break;
        case kNormal:
          v = a_ + b_ * s.normal(u);
          break;
        default:
          v = s.uniform(u) < load(in_dt_, inputs[0], i) ? 1.0 : 0.0;
          break;
      }
      store(out_dt_, outputs[0], i, v);
    }
  }

 private:
  RandomSource source_;
  Kind kind_;
  double a_, b_;  // low/high or mean/scale
  int64_t count_;
  bp_dtype_t out_dt_, in_dt_;
};

KernelFactory random_factory(RandomKernel::Kind kind, bool like) {
  return [=](const NodeInfo& info) -> std::unique_ptr<Kernel> {
    if (info.out_dtypes.empty() || !has_output(info, 0)) fail(info, "the node has no output");
    if (like || kind == RandomKernel::kBernoulli) {
      require_inputs(info, 1);
      if (info.in_shapes[0] != info.out_shapes[0])
        fail(info, "output shape differs from the input's");
    }
    if (kind == RandomKernel::kBernoulli) {
      require_dtype(info, info.in_dtypes[0], "input", false);
      require_dtype(info, info.out_dtypes[0], "output", true);
    } else {
      require_dtype(info, info.out_dtypes[0], "output", false);
    }
    double a = 0.0, b = 1.0;
    if (kind == RandomKernel::kUniform) {
      a = info.node.attr_float("low", 0.0f);
      b = info.node.attr_float("high", 1.0f);
      if (!(a <= b)) fail(info, "low must not exceed high");
    } else if (kind == RandomKernel::kNormal) {
      a = info.node.attr_float("mean", 0.0f);
      b = info.node.attr_float("scale", 1.0f);
    }
    return std::make_unique<RandomKernel>(info, kind, a, b);
  };
}

// Multinomial: input [batch, classes] of unnormalised log-probabilities,
// output [batch, sample_size] of class indices drawn with replacement.
class MultinomialKernel final : public Kernel {
 public:
  MultinomialKernel(const NodeInfo& info, int64_t batch, int64_t classes, int64_t samples)
      : source_(info),
        batch_(batch),
        classes_(classes),
        samples_(samples),
        in_dt_(info.in_dtypes[0]),
        out_dt_(info.out_dtypes[0]) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const Stream s = source_.next();
    for (int64_t b = 0; b < batch_; ++b) {
      const int64_t row = b * classes_;
      double mx = -std::numeric_limits<double>::infinity();
      for (int64_t c = 0; c < classes_; ++c) mx = std::max(mx, load(in_dt_, inputs[0], row + c));
      double total = 0.0;
      for (int64_t c = 0; c < classes_; ++c)
        total += std::exp(load(in_dt_, inputs[0], row + c) - mx);
      for (int64_t k = 0; k < samples_; ++k) {
        const double target = s.uniform(static_cast<uint64_t>(b * samples_ + k)) * total;
        // The last class with a non-zero weight absorbs rounding at the top end.
        int64_t pick = classes_ - 1;
        double acc = 0.0;
        for (int64_t c = 0; c < classes_; ++c) {
          acc += std::exp(load(in_dt_, inputs[0], row + c) - mx);
          if (target < acc) {
            pick = c;
            break;
          }
        }
        store(out_dt_, outputs[0], b * samples_ + k, static_cast<double>(pick));
      }
    }
  }

 private:
  RandomSource source_;
  int64_t batch_, classes_, samples_;
  bp_dtype_t in_dt_, out_dt_;
};

std::unique_ptr<Kernel> make_multinomial(const NodeInfo& info) {
  require_inputs(info, 1);
  require_dtype(info, info.in_dtypes[0], "input", false);
  const Dims& x = info.in_shapes[0];
  const int64_t samples = info.node.attr_int("sample_size", 1);
  if (x.size() != 2 || x[1] < 1)
    fail(info, "input " + dims_str(x) + " must be [batch, classes >= 1]");
  if (info.out_shapes[0] != Dims{x[0], samples} ||
      (info.out_dtypes[0] != BP_DTYPE_INT32 && info.out_dtypes[0] != BP_DTYPE_INT64))
    fail(info, "output must be int32/int64 [batch, sample_size]");
  return std::make_unique<MultinomialKernel>(info, x[0], x[1], samples);
}

}  // namespace

void register_signal_kernels(KernelRegistry& registry) {
  registry.add("NegativeLogLikelihoodLoss", [](const NodeInfo& i) { return make_loss(i, false); });
  registry.add("SoftmaxCrossEntropyLoss", [](const NodeInfo& i) { return make_loss(i, true); });
  registry.add("DFT", make_dft, {1});
  registry.add("STFT", make_stft, {1, 3});
  registry.add("HannWindow", window_factory(0.5, 0.5, 0.0));
  registry.add("HammingWindow", window_factory(25.0 / 46.0, 21.0 / 46.0, 0.0));
  registry.add("BlackmanWindow", window_factory(0.42, 0.5, 0.08));
  registry.add("MelWeightMatrix", make_mel);
  registry.add("RandomUniform", random_factory(RandomKernel::kUniform, false));
  registry.add("RandomUniformLike", random_factory(RandomKernel::kUniform, true));
  registry.add("RandomNormal", random_factory(RandomKernel::kNormal, false));
  registry.add("RandomNormalLike", random_factory(RandomKernel::kNormal, true));
  registry.add("Bernoulli", random_factory(RandomKernel::kBernoulli, false));
  registry.add("Multinomial", make_multinomial);
}

}  // namespace backplane::cpuref
