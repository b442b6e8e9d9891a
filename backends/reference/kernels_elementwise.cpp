// kernels_elementwise.cpp — arithmetic, activations, comparisons, logic, Where, Cast,
// and the elementwise math of ops_math.cpp (trigonometric, IsNaN/IsInf, Mod, BitShift...).
//
// Every binary/variadic op uses numpy multidirectional broadcasting. The
// factory aligns every input to the output rank, drops size-1 output dims and
// merges adjacent dims that are contiguous for every input, so at run time the
// work is "rows" of one innermost run in which each input either advances
// (stride 1) or repeats one element (stride 0). Equal shapes collapse to one
// row; per-channel and scalar operands stay a tight inner loop.
#include "kernel.hpp"
#include "kernel_numeric.hpp"
#include "kernel_util.hpp"

#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>

namespace backplane::cpuref {
namespace {

static_assert(sizeof(bool) == 1, "bool tensors are one byte per element");

constexpr size_t kMaxInputs = 3;

void require_same_dtype(const NodeInfo& info, size_t first, size_t last) {
  for (size_t i = first + 1; i <= last; ++i) {
    if (info.in_dtypes[i] != info.in_dtypes[first])
      throw sdk::invalid(info.describe() + ": input " + std::to_string(i) + " has dtype " +
                         sdk::dtype_name(info.in_dtypes[i]) + " but input " +
                         std::to_string(first) + " has " + sdk::dtype_name(info.in_dtypes[first]));
  }
}

// ---------------------------------------------------------------------------
// Broadcasting plan
// ---------------------------------------------------------------------------

struct Broadcast {
  size_t nin = 0;
  std::vector<int64_t> dims;                             // outer dims (innermost excluded)
  std::vector<std::array<int64_t, kMaxInputs>> strides;  // per outer dim, per input (elements)
  int64_t inner = 1;                                     // length of the innermost run
  std::array<int64_t, kMaxInputs> inner_stride{};        // 0 or 1 per input
  int64_t rows = 1;
  int64_t total = 0;
};

Broadcast make_broadcast(const std::vector<Dims>& ins, const Dims& out, const NodeInfo& info) {
  Broadcast b;
  b.nin = ins.size();
  b.total = sdk::element_count(out);
  const size_t rank = out.size();
  // Aligned strides of every input against the output.
  std::vector<std::array<int64_t, kMaxInputs>> st(rank);
  for (size_t k = 0; k < ins.size(); ++k) {
    const Dims& in = ins[k];
    if (in.size() > rank)
      throw sdk::invalid(info.describe() + ": input shape " + dims_str(in) +
                         " does not broadcast to output shape " + dims_str(out));
    int64_t stride = 1;
    for (size_t j = 0; j < rank; ++j) {
      const size_t d = rank - 1 - j;
      const int64_t in_dim = j < in.size() ? in[in.size() - 1 - j] : 1;
      if (in_dim != out[d] && in_dim != 1)
        throw sdk::invalid(info.describe() + ": input shape " + dims_str(in) +
                           " does not broadcast to output shape " + dims_str(out));
      st[d][k] = in_dim == 1 ? 0 : stride;
      stride *= in_dim;
    }
  }
  // Drop size-1 dims, then merge a dim into its inner neighbour when every
  // input's stride allows it.
  std::vector<int64_t> dims;
  std::vector<std::array<int64_t, kMaxInputs>> strides;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    if (!dims.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < b.nin; ++k)
        if (strides.back()[k] != st[d][k] * out[d]) mergeable = false;
      if (mergeable) {
        dims.back() *= out[d];
        strides.back() = st[d];
        continue;
      }
    }
    dims.push_back(out[d]);
    strides.push_back(st[d]);
  }
  if (!dims.empty()) {
    b.inner = dims.back();
    b.inner_stride = strides.back();
    dims.pop_back();
    strides.pop_back();
  }
  if (dims.size() > kMaxRank)
    throw sdk::unsupported(info.describe() + ": broadcast of rank " + std::to_string(dims.size()) +
                           " is not supported");
  b.dims = std::move(dims);
  b.strides = std::move(strides);
  for (int64_t d : b.dims) b.rows *= d;
  return b;
}

// Calls f(out_offset, in_offsets) for the innermost runs [row0, row1), in
// output order.
template <class F>
inline void for_each_row_in(const Broadcast& b, int64_t row0, int64_t row1, F&& f) {
  int64_t idx[kMaxRank] = {};
  int64_t off[kMaxInputs] = {};
  const int rank = static_cast<int>(b.dims.size());
  int64_t r = row0;  // row0's index in the outer dims, innermost last
  for (int d = rank - 1; d >= 0; --d) {
    idx[d] = r % b.dims[d];
    r /= b.dims[d];
    for (size_t k = 0; k < b.nin; ++k) off[k] += idx[d] * b.strides[d][k];
  }
  for (int64_t row = row0; row < row1; ++row) {
    f(row * b.inner, static_cast<const int64_t*>(off));
    for (int d = rank - 1; d >= 0; --d) {
      for (size_t k = 0; k < b.nin; ++k) off[k] += b.strides[d][k];
      if (++idx[d] < b.dims[d]) break;
      for (size_t k = 0; k < b.nin; ++k) off[k] -= b.strides[d][k] * b.dims[d];
      idx[d] = 0;
    }
  }
}

// Calls f(out_offset, in_offsets) for every innermost run, in output order.
template <class F>
inline void for_each_row(const Broadcast& b, F&& f) {
  if (b.total == 0) return;
  for_each_row_in(b, 0, b.rows, std::forward<F>(f));
}

// Element-wise work is split across the host's threads (API 1.5) in pieces
// of at least this many elements: below it a worker's wake-up costs more
// than the memory traffic it shares.
constexpr int64_t kParallelElements = int64_t{1} << 15;

// ---------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------

// out[i] = fn(in[i]) over equal shapes.
template <class I, class O, class Fn>
class MapKernel final : public Kernel {
 public:
  MapKernel(int64_t n, Fn fn) : n_(n), fn_(std::move(fn)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const I* in = static_cast<const I*>(inputs[0]);
    O* out = static_cast<O*>(outputs[0]);
    sdk::parallel_for(static_cast<size_t>(n_), kParallelElements, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) out[i] = store<O>(fn_(load(in[i])));
    });
  }

 private:
  int64_t n_;
  Fn fn_;
};

// out = fn(a, b) with broadcasting.
template <class A, class B, class O, class Fn>
class BinaryKernel final : public Kernel {
 public:
  BinaryKernel(Broadcast plan, Fn fn) : plan_(std::move(plan)), fn_(std::move(fn)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const A* a = static_cast<const A*>(inputs[0]);
    const B* b = static_cast<const B*>(inputs[1]);
    O* out = static_cast<O*>(outputs[0]);
    const int64_t n = plan_.inner;
    const int64_t sa = plan_.inner_stride[0], sb = plan_.inner_stride[1];
    // Elements [i0, i1) of the run at output offset o.
    auto run_part = [&](int64_t o, const int64_t* off, int64_t i0, int64_t i1) {
      const A* pa = a + off[0];
      const B* pb = b + off[1];
      O* po = out + o;
      if (sa == 1 && sb == 1) {
        for (int64_t i = i0; i < i1; ++i) po[i] = store<O>(fn_(load(pa[i]), load(pb[i])));
      } else if (sa == 1) {
        const auto vb = load(pb[0]);
        for (int64_t i = i0; i < i1; ++i) po[i] = store<O>(fn_(load(pa[i]), vb));
      } else if (sb == 1) {
        const auto va = load(pa[0]);
        for (int64_t i = i0; i < i1; ++i) po[i] = store<O>(fn_(va, load(pb[i])));
      } else {
        const O v = store<O>(fn_(load(pa[0]), load(pb[0])));
        for (int64_t i = i0; i < i1; ++i) po[i] = v;
      }
    };
    if (plan_.total == 0) return;
    if (plan_.rows == 1) {  // one run (equal shapes, or a scalar operand): split it
      static const int64_t zero[kMaxInputs] = {};
      sdk::parallel_for(static_cast<size_t>(n), kParallelElements, [&](size_t begin, size_t end) {
        run_part(0, zero, static_cast<int64_t>(begin), static_cast<int64_t>(end));
      });
      return;
    }
    const size_t rows_per_part = static_cast<size_t>(std::max<int64_t>(1, kParallelElements / n));
    sdk::parallel_for(
        static_cast<size_t>(plan_.rows), rows_per_part, [&](size_t begin, size_t end) {
          for_each_row_in(plan_, static_cast<int64_t>(begin), static_cast<int64_t>(end),
                          [&](int64_t o, const int64_t* off) { run_part(o, off, 0, n); });
        });
  }

 private:
  Broadcast plan_;
  Fn fn_;
};

// Variadic fold (Min, Max, Sum, Mean): out = in0 broadcast, then out = fn(out, in_k).
template <class T, class Fn>
class VariadicKernel final : public Kernel {
 public:
  VariadicKernel(std::vector<Broadcast> plans, Fn fn, bool mean)
      : plans_(std::move(plans)), fn_(std::move(fn)), mean_(mean) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    T* out = static_cast<T*>(outputs[0]);
    {
      const Broadcast& p = plans_[0];
      const T* in = static_cast<const T*>(inputs[0]);
      for_each_row(p, [&](int64_t o, const int64_t* off) {
        for (int64_t i = 0; i < p.inner; ++i) out[o + i] = in[off[0] + i * p.inner_stride[0]];
      });
    }
    for (size_t k = 1; k < plans_.size(); ++k) {
      const Broadcast& p = plans_[k];
      const T* in = static_cast<const T*>(inputs[k]);
      const int64_t s = p.inner_stride[1];
      for_each_row(p, [&](int64_t o, const int64_t* off) {
        T* po = out + o;
        const T* pi = in + off[1];
        for (int64_t i = 0; i < p.inner; ++i) po[i] = store<T>(fn_(load(po[i]), load(pi[i * s])));
      });
    }
    if (mean_) {
      const int64_t n = plans_[0].total;
      const auto count = static_cast<math_t<T>>(plans_.size());
      for (int64_t i = 0; i < n; ++i) out[i] = store<T>(load(out[i]) / count);
    }
  }

 private:
  std::vector<Broadcast> plans_;
  Fn fn_;
  bool mean_;
};

// Where(cond, x, y), moved by element size.
template <class E>
class WhereKernel final : public Kernel {
 public:
  explicit WhereKernel(Broadcast plan) : plan_(std::move(plan)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const bool* c = static_cast<const bool*>(inputs[0]);
    const E* x = static_cast<const E*>(inputs[1]);
    const E* y = static_cast<const E*>(inputs[2]);
    E* out = static_cast<E*>(outputs[0]);
    const int64_t n = plan_.inner;
    const int64_t sc = plan_.inner_stride[0], sx = plan_.inner_stride[1],
                  sy = plan_.inner_stride[2];
    for_each_row(plan_, [&](int64_t o, const int64_t* off) {
      const bool* pc = c + off[0];
      const E* px = x + off[1];
      const E* py = y + off[2];
      E* po = out + o;
      for (int64_t i = 0; i < n; ++i) po[i] = pc[i * sc] ? px[i * sx] : py[i * sy];
    });
  }

 private:
  Broadcast plan_;
};

// Clip with bounds that are known now or read from inputs 1/2 at run time.
template <class T>
class ClipKernel final : public Kernel {
 public:
  ClipKernel(int64_t n, math_t<T> lo, math_t<T> hi, bool lo_at_run, bool hi_at_run)
      : n_(n), lo_(lo), hi_(hi), lo_at_run_(lo_at_run), hi_at_run_(hi_at_run) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const math_t<T> lo = lo_at_run_ ? load(*static_cast<const T*>(inputs[1])) : lo_;
    const math_t<T> hi = hi_at_run_ ? load(*static_cast<const T*>(inputs[2])) : hi_;
    const T* in = static_cast<const T*>(inputs[0]);
    T* out = static_cast<T*>(outputs[0]);
    for (int64_t i = 0; i < n_; ++i) {
      math_t<T> v = load(in[i]);
      if (v < lo) v = lo;
      if (v > hi) v = hi;  // min > max gives max, as ONNX specifies
      out[i] = store<T>(v);
    }
  }

 private:
  int64_t n_;
  math_t<T> lo_, hi_;
  bool lo_at_run_, hi_at_run_;
};

// MT19937 seeded as numpy's legacy np.random.seed(int) seeds it, and its
// doubles as numpy's random_sample makes them (53 bits from two draws): a
// seeded training-mode Dropout then drops exactly the elements ONNX's
// reference implementation drops. State on the stack: run() allocates nothing.
class Mt19937 {
 public:
  explicit Mt19937(uint32_t seed) {
    mt_[0] = seed;
    for (uint32_t i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
  }
  uint32_t next() {
    if (idx_ >= kN) twist();
    uint32_t y = mt_[idx_++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  double uniform() {  // [0, 1)
    const uint32_t a = next() >> 5, b = next() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }

 private:
  static constexpr uint32_t kN = 624, kM = 397;
  void twist() {
    for (uint32_t k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % kN] & 0x7fffffffu);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    idx_ = 0;
  }
  uint32_t mt_[kN];
  uint32_t idx_ = kN;
};

// Dropout. Inference (no training_mode, or false) and ratio 0: the identity
// and an all-true (all-ones) mask. Training: element kept when a uniform draw
// is >= ratio, scaled by 1 / (1 - ratio). ratio and training_mode are read
// when constant, else from their inputs at run time. Without a seed each run
// draws a fresh one.
struct DropoutConfig {
  int64_t n = 0;
  bool mask = false;
  bool training = false, training_at_run = false;
  float ratio = 0.5f;
  bool ratio_at_run = false;
  bool seeded = false;
  uint32_t seed = 0;
};

template <class T, class M>
class DropoutKernel final : public Kernel {
 public:
  explicit DropoutKernel(DropoutConfig c) : c_(c) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const bool training = c_.training_at_run ? *static_cast<const bool*>(inputs[2]) : c_.training;
    float ratio = c_.ratio_at_run ? load(*static_cast<const T*>(inputs[1])) : c_.ratio;
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    M* m = c_.mask ? static_cast<M*>(outputs[1]) : nullptr;
    if (!training || !(ratio > 0.0f)) {
      if (c_.n != 0 && static_cast<const void*>(y) != static_cast<const void*>(x))
        std::memcpy(y, x, static_cast<size_t>(c_.n) * sizeof(T));
      if (m != nullptr)
        for (int64_t i = 0; i < c_.n; ++i) m[i] = store<M>(1);
      return;
    }
    if (ratio > 1.0f) ratio = 1.0f;  // out of ONNX's [0, 1): everything is dropped
    const math_t<T> scale = ratio < 1.0f ? static_cast<math_t<T>>(1.0 / (1.0 - ratio)) : 0;
    static std::atomic<uint32_t> runs{0};
    Mt19937 rng(c_.seeded ? c_.seed : 0x9e3779b9u * (runs.fetch_add(1) + 1));
    for (int64_t i = 0; i < c_.n; ++i) {
      const bool keep = rng.uniform() >= static_cast<double>(ratio);
      y[i] = keep ? store<T>(load(x[i]) * scale) : store<T>(0);
      if (m != nullptr) m[i] = store<M>(keep ? 1 : 0);
    }
  }

 private:
  DropoutConfig c_;
};

// ---------------------------------------------------------------------------
// Arithmetic helpers
// ---------------------------------------------------------------------------

// Integer add/sub/mul wrap around (two's complement) instead of overflowing.
template <class T>
inline T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return static_cast<T>(a + b);
  }
}
template <class T>
inline T wrap_sub(T a, T b) {
  if constexpr (std::is_integral_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) - static_cast<U>(b));
  } else {
    return static_cast<T>(a - b);
  }
}
template <class T>
inline T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T> && sizeof(T) >= sizeof(int)) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return static_cast<T>(a * b);
  }
}
// Integer division truncates toward zero like C; x/0 gives 0 instead of trapping.
template <class T>
inline T safe_div(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return wrap_sub<T>(0, a);
    }
    return static_cast<T>(a / b);
  } else {
    return a / b;
  }
}

template <class R, class X, class Y>
inline R power(X x, Y y) {
  if constexpr (std::is_integral_v<X> && std::is_integral_v<Y>) {
    // Exact integer power by squaring (wrapping on overflow).
    if constexpr (std::is_signed_v<Y>) {
      if (y < 0) {
        if (x == 1) return 1;
        if (x == -1) return (y % 2 == 0) ? 1 : -1;
        return 0;
      }
    }
    using U = std::make_unsigned_t<std::conditional_t<(sizeof(X) > 4), int64_t, int32_t>>;
    U result = 1, base = static_cast<U>(x);
    uint64_t exp_bits;  // y >= 0 here; widened through int64 so int8 is not misread
    if constexpr (std::is_signed_v<Y>) exp_bits = static_cast<uint64_t>(static_cast<int64_t>(y));
    else exp_bits = static_cast<uint64_t>(y);
    for (uint64_t e = exp_bits; e != 0; e >>= 1) {
      if (e & 1u) result *= base;
      base *= base;
    }
    return static_cast<R>(result);
  } else {
    const double p = std::pow(static_cast<double>(x), static_cast<double>(y));
    if constexpr (std::is_integral_v<R>) {
      if (std::isnan(p)) return 0;
      if (p >= static_cast<double>(std::numeric_limits<R>::max()))
        return std::numeric_limits<R>::max();
      if (p <= static_cast<double>(std::numeric_limits<R>::lowest()))
        return std::numeric_limits<R>::lowest();
    }
    return static_cast<R>(p);
  }
}

// ONNX Cast: float -> integer truncates toward zero (NaN gives 0 and
// out-of-range values saturate rather than being undefined); integer
// narrowing wraps; anything -> bool is "!= 0".
template <class O, class I>
inline O convert(I v) {
  if constexpr (std::is_same_v<O, I>) {
    return v;
  } else {
    const auto x = load(v);
    using X = decltype(x);
    if constexpr (std::is_same_v<O, bool>) {
      return x != 0;
    } else if constexpr (std::is_same_v<O, f16> || std::is_same_v<O, bf16>) {
      return store<O>(x);
    } else if constexpr (std::is_floating_point_v<O>) {
      return static_cast<O>(x);
    } else if constexpr (std::is_floating_point_v<X>) {
      if (std::isnan(x)) return 0;
      const double d = static_cast<double>(x);
      if (d >= static_cast<double>(std::numeric_limits<O>::max()))
        return std::numeric_limits<O>::max();
      if (d <= static_cast<double>(std::numeric_limits<O>::lowest()))
        return std::numeric_limits<O>::lowest();
      return static_cast<O>(d);
    } else {
      return static_cast<O>(x);
    }
  }
}

template <class T>
inline T abs_of(T x) {
  if constexpr (std::is_unsigned_v<T>) return x;
  else if constexpr (std::is_floating_point_v<T>) return std::fabs(x);
  else return x < 0 ? wrap_sub(T(0), x) : x;
}

// Sign; NaN stays NaN.
template <class T>
inline T sign_of(T x) {
  if constexpr (std::is_unsigned_v<T>) return x > 0 ? T(1) : T(0);
  else return x > 0 ? T(1) : (x < 0 ? T(-1) : x);
}

template <class T>
inline bool is_negative(T x) {
  if constexpr (std::is_unsigned_v<T>) return false;
  else return x < T(0);
}

// Mod. fmod=1: C's fmod / truncated remainder (sign of the dividend);
// fmod=0 (integers only): Python's %, the sign of the divisor. x mod 0 gives
// 0 (numpy warns and gives 0) instead of trapping, and INT_MIN mod -1 is 0.
template <class T>
inline T mod_of(T a, T b, bool fmod) {
  if constexpr (std::is_floating_point_v<T>) {
    (void)fmod;
    return std::fmod(a, b);
  } else {
    if (b == 0) return 0;
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return 0;
      const T r = static_cast<T>(a % b);
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(a % b);
    }
  }
}

// Min/Max propagate NaN like numpy.
template <class T>
inline T max_of(T a, T b) {
  return (b > a || b != b) ? b : a;
}
template <class T>
inline T min_of(T a, T b) {
  return (b < a || b != b) ? b : a;
}

template <class T>
inline T sigmoid(T x) {
  if (x >= 0) return T(1) / (T(1) + std::exp(-x));
  const T e = std::exp(x);
  return e / (T(1) + e);
}

// ---------------------------------------------------------------------------
// Factory builders
// ---------------------------------------------------------------------------

// Same-dtype unary op over the types Ts.
template <class... Ts, class Fn>
std::unique_ptr<Kernel> unary(const NodeInfo& info, Fn fn) {
  require_inputs(info, 1);
  const int64_t n = sdk::element_count(info.out_shapes[0]);
  if (sdk::element_count(info.in_shapes[0]) != n)
    throw sdk::invalid(info.describe() + ": output shape " + dims_str(info.out_shapes[0]) +
                       " differs from input shape " + dims_str(info.in_shapes[0]));
  return dispatch<Ts...>(info.in_dtypes[0], info, "input",
                         [&](auto tag) -> std::unique_ptr<Kernel> {
                           using T = decltype(tag);
                           return std::make_unique<MapKernel<T, T, Fn>>(n, fn);
                         });
}

template <class... Ts>
struct Types {};

// Binary op, both inputs of dtype T; output T (or bool when kBoolOut).
template <bool kBoolOut, class... Ts, class Fn>
std::unique_ptr<Kernel> binary(const NodeInfo& info, Types<Ts...>, Fn fn) {
  require_inputs(info, 2);
  require_same_dtype(info, 0, 1);
  Broadcast plan = make_broadcast({info.in_shapes[0], info.in_shapes[1]}, info.out_shapes[0], info);
  return dispatch<Ts...>(info.in_dtypes[0], info, "input",
                         [&](auto tag) -> std::unique_ptr<Kernel> {
                           using T = decltype(tag);
                           using O = std::conditional_t<kBoolOut, bool, T>;
                           return std::make_unique<BinaryKernel<T, T, O, Fn>>(plan, fn);
                         });
}

// The element types ONNX's elementwise ops take (their schemas' lists).
using FloatTypes = Types<float, f16, double, bf16>;
using SignedTypes = Types<float, f16, double, bf16, int8_t, int16_t, int32_t, int64_t>;
using NumericTypes = Types<float, f16, double, bf16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                           uint16_t, uint32_t, uint64_t>;
using AllTypes = Types<float, f16, double, bf16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                       uint16_t, uint32_t, uint64_t, bool>;

template <class... Ts, class F>
std::unique_ptr<Kernel> dispatch_of(Types<Ts...>, bp_dtype_t dt, const NodeInfo& info,
                                    const char* what, F&& f) {
  return dispatch<Ts...>(dt, info, what, std::forward<F>(f));
}

template <class... Ts, class Fn>
std::unique_ptr<Kernel> unary_of(const NodeInfo& info, Types<Ts...>, Fn fn) {
  return unary<Ts...>(info, std::move(fn));
}

// x -> bool over the types Ts (IsNaN, IsInf).
template <class... Ts, class Fn>
std::unique_ptr<Kernel> predicate(const NodeInfo& info, Types<Ts...>, Fn fn) {
  require_inputs(info, 1);
  const int64_t n = sdk::element_count(info.out_shapes[0]);
  if (sdk::element_count(info.in_shapes[0]) != n || info.out_dtypes[0] != BP_DTYPE_BOOL)
    throw sdk::invalid(info.describe() + ": output must be bool of the input's shape");
  return dispatch<Ts...>(info.in_dtypes[0], info, "input",
                         [&](auto tag) -> std::unique_ptr<Kernel> {
                           using T = decltype(tag);
                           return std::make_unique<MapKernel<T, bool, Fn>>(n, fn);
                         });
}

template <class... Ts, class Fn>
std::unique_ptr<Kernel> variadic(const NodeInfo& info, Types<Ts...>, Fn fn, bool mean) {
  const size_t n = info.in_dtypes.size();
  if (n == 0) throw sdk::invalid(info.describe() + ": at least one input is required");
  require_inputs(info, n);
  require_same_dtype(info, 0, n - 1);
  std::vector<Broadcast> plans;
  plans.push_back(make_broadcast({info.in_shapes[0]}, info.out_shapes[0], info));
  for (size_t k = 1; k < n; ++k)
    plans.push_back(
        make_broadcast({info.out_shapes[0], info.in_shapes[k]}, info.out_shapes[0], info));
  return dispatch<Ts...>(info.in_dtypes[0], info, "input",
                         [&](auto tag) -> std::unique_ptr<Kernel> {
                           using T = decltype(tag);
                           return std::make_unique<VariadicKernel<T, Fn>>(plans, fn, mean);
                         });
}

// Reads a scalar constant of dtype T as its math type.
template <class T>
math_t<T> scalar_constant(const NodeInfo& info, size_t i) {
  return load(*static_cast<const T*>(info.constant(i)));
}

std::unique_ptr<Kernel> make_clip(const NodeInfo& info) {
  require_inputs(info, 1);
  const int64_t n = sdk::element_count(info.out_shapes[0]);
  const bool attrs = info.node.opset() < 11;
  return dispatch_of(
      NumericTypes{}, info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
        using T = decltype(tag);
        using M = math_t<T>;
        M lo = std::numeric_limits<M>::lowest();
        M hi = std::numeric_limits<M>::max();
        bool lo_run = false, hi_run = false;
        if (attrs) {
          if constexpr (!is_float_v<T>) {
            throw sdk::unsupported(info.describe() +
                                   ": Clip before opset 11 takes float inputs only");
          } else {
            // Absent bounds stay the type's limits (not a float's: M may be double).
            if (info.node.has_attr("min")) lo = info.node.attr_float("min", 0.0f);
            if (info.node.has_attr("max")) hi = info.node.attr_float("max", 0.0f);
          }
        } else {
          for (size_t i = 1; i <= 2; ++i) {
            if (!info.has_input(i)) continue;
            if (info.in_dtypes[i] != info.in_dtypes[0])
              throw sdk::invalid(info.describe() + ": Clip bound " + std::to_string(i) +
                                 " has dtype " + sdk::dtype_name(info.in_dtypes[i]) +
                                 ", expected " + sdk::dtype_name(info.in_dtypes[0]));
            if (sdk::element_count(info.in_shapes[i]) != 1)
              throw sdk::invalid(info.describe() + ": Clip bound " + std::to_string(i) +
                                 " must be a scalar");
            M& bound = i == 1 ? lo : hi;
            bool& at_run = i == 1 ? lo_run : hi_run;
            if (info.constant(i) != nullptr) bound = scalar_constant<T>(info, i);
            else at_run = true;
          }
        }
        return std::make_unique<ClipKernel<T>>(n, lo, hi, lo_run, hi_run);
      });
}

std::unique_ptr<Kernel> make_pow(const NodeInfo& info) {
  require_inputs(info, 2);
  Broadcast plan = make_broadcast({info.in_shapes[0], info.in_shapes[1]}, info.out_shapes[0], info);
  return dispatch_of(Types<float, f16, double, bf16, int32_t, int64_t>{}, info.in_dtypes[0], info,
                     "base", [&](auto base_tag) -> std::unique_ptr<Kernel> {
                       using A = decltype(base_tag);
                       return dispatch_of(
                           NumericTypes{}, info.in_dtypes[1], info, "exponent",
                           [&](auto exp_tag) -> std::unique_ptr<Kernel> {
                             using B = decltype(exp_tag);
                             auto fn = [](math_t<A> x, math_t<B> y) {
                               return power<math_t<A>>(x, y);
                             };
                             return std::make_unique<BinaryKernel<A, B, A, decltype(fn)>>(plan, fn);
                           });
                     });
}

std::unique_ptr<Kernel> make_cast(const NodeInfo& info) {
  require_inputs(info, 1);
  const int64_t n = sdk::element_count(info.out_shapes[0]);
  const bp_dtype_t to = info.out_dtypes[0];
  if (info.node.op_type() == "Cast" && info.node.has_attr("to") &&
      info.node.attr_int("to", 0) != to)
    throw sdk::invalid(info.describe() + ": attribute 'to' (" +
                       std::to_string(info.node.attr_int("to", 0)) +
                       ") disagrees with the output dtype " + sdk::dtype_name(to));
  return dispatch_of(
      AllTypes{}, info.in_dtypes[0], info, "input", [&](auto in_tag) -> std::unique_ptr<Kernel> {
        using I = decltype(in_tag);
        return dispatch_of(AllTypes{}, to, info, "output",
                           [&](auto out_tag) -> std::unique_ptr<Kernel> {
                             using O = decltype(out_tag);
                             // MapKernel loads (16-bit floats -> float) before calling fn and
                             // stores the result as O; a float16/bfloat16 output is stored
                             // (rounded to nearest even) from the wide value.
                             auto fn = [](math_t<I> v) {
                               if constexpr (std::is_same_v<O, f16> || std::is_same_v<O, bf16>)
                                 return v;
                               else return convert<O>(v);
                             };
                             return std::make_unique<MapKernel<I, O, decltype(fn)>>(n, fn);
                           });
      });
}

std::unique_ptr<Kernel> make_where(const NodeInfo& info) {
  require_inputs(info, 3);
  if (info.in_dtypes[0] != BP_DTYPE_BOOL)
    throw sdk::invalid(info.describe() + ": condition has dtype " +
                       std::string(sdk::dtype_name(info.in_dtypes[0])) + ", expected bool");
  require_same_dtype(info, 1, 2);
  Broadcast plan = make_broadcast({info.in_shapes[0], info.in_shapes[1], info.in_shapes[2]},
                                  info.out_shapes[0], info);
  switch (sdk::dtype_size(info.in_dtypes[1])) {
    case 1:
      return std::make_unique<WhereKernel<uint8_t>>(std::move(plan));
    case 2:
      return std::make_unique<WhereKernel<uint16_t>>(std::move(plan));
    case 4:
      return std::make_unique<WhereKernel<uint32_t>>(std::move(plan));
    case 8:
      return std::make_unique<WhereKernel<uint64_t>>(std::move(plan));
    default:
      throw sdk::unsupported(info.describe() + ": dtype " + sdk::dtype_name(info.in_dtypes[1]) +
                             " is not supported");
  }
}

std::unique_ptr<Kernel> make_copy(const NodeInfo& info) {
  require_inputs(info, 1);
  return std::make_unique<CopyKernel>(static_cast<size_t>(sdk::element_count(info.in_shapes[0])) *
                                      sdk::dtype_size(info.in_dtypes[0]));
}

std::unique_ptr<Kernel> make_dropout(const NodeInfo& info) {
  require_inputs(info, 1);
  if (info.out_shapes[0] != info.in_shapes[0])
    throw sdk::invalid(info.describe() + ": output shape " + dims_str(info.out_shapes[0]) +
                       " differs from input shape " + dims_str(info.in_shapes[0]));
  const bp_dtype_t dt = info.in_dtypes[0];
  return dispatch_of(FloatTypes{}, dt, info, "data", [&](auto tag) -> std::unique_ptr<Kernel> {
    using T = decltype(tag);
    DropoutConfig cfg;
    cfg.n = sdk::element_count(info.out_shapes[0]);
    if (info.node.opset() >= 12) {
      if (info.has_input(1)) {
        if (info.in_dtypes[1] != dt &&
            !(info.in_dtypes[1] == BP_DTYPE_FLOAT32 || info.in_dtypes[1] == BP_DTYPE_FLOAT16 ||
              info.in_dtypes[1] == BP_DTYPE_FLOAT64 || info.in_dtypes[1] == BP_DTYPE_BFLOAT16))
          throw sdk::invalid(info.describe() + ": ratio must be a float scalar");
        if (info.in_dtypes[1] != dt)
          throw sdk::unsupported(info.describe() + ": ratio of dtype " +
                                 sdk::dtype_name(info.in_dtypes[1]) + " with data of dtype " +
                                 sdk::dtype_name(dt));
        if (sdk::element_count(info.in_shapes[1]) != 1)
          throw sdk::invalid(info.describe() + ": ratio must be a scalar");
        if (const void* r = info.constant(1)) cfg.ratio = load(*static_cast<const T*>(r));
        else cfg.ratio_at_run = true;
        if (!cfg.ratio_at_run && !(cfg.ratio >= 0.0f && cfg.ratio < 1.0f))
          throw sdk::invalid(info.describe() + ": ratio " + std::to_string(cfg.ratio) +
                             " is outside [0, 1)");
      }
      if (info.has_input(2)) {
        if (info.in_dtypes[2] != BP_DTYPE_BOOL || sdk::element_count(info.in_shapes[2]) != 1)
          throw sdk::invalid(info.describe() + ": training_mode must be a bool scalar");
        if (const void* t = info.constant(2)) cfg.training = *static_cast<const bool*>(t);
        else cfg.training_at_run = true;
      }
      cfg.seeded = info.node.has_attr("seed");
      cfg.seed = static_cast<uint32_t>(info.node.attr_int("seed", 0));
    }
    // Before opset 12 Dropout has no training mode here: inference, identity.
    cfg.mask = info.out_dtypes.size() > 1 && info.out_dtypes[1] != BP_DTYPE_UNDEFINED;
    if (cfg.mask && info.out_shapes[1] != info.in_shapes[0])
      throw sdk::invalid(info.describe() + ": mask shape " + dims_str(info.out_shapes[1]) +
                         " differs from input shape " + dims_str(info.in_shapes[0]));
    if (!cfg.mask) return std::make_unique<DropoutKernel<T, bool>>(cfg);
    return dispatch_of(Types<bool, float, f16, double, bf16>{}, info.out_dtypes[1], info, "mask",
                       [&](auto mtag) -> std::unique_ptr<Kernel> {
                         return std::make_unique<DropoutKernel<T, decltype(mtag)>>(cfg);
                       });
  });
}

std::unique_ptr<Kernel> make_gelu(const NodeInfo& info) {
  const std::string approximate = info.node.attr_string("approximate", "none");
  if (approximate == "none") {
    return unary_of(info, FloatTypes{}, [](auto x) {
      using M = decltype(x);
      return M(0.5) * x * (M(1) + std::erf(x * M(0.70710678118654752440)));
    });
  }
  if (approximate == "tanh") {
    return unary_of(info, FloatTypes{}, [](auto x) {
      using M = decltype(x);
      const M k = M(0.79788456080286535588);  // sqrt(2/pi)
      return M(0.5) * x * (M(1) + std::tanh(k * (x + M(0.044715) * x * x * x)));
    });
  }
  throw sdk::unsupported(info.describe() + ": Gelu approximate='" + approximate +
                         "' is not supported (expected 'none' or 'tanh')");
}

// The registrations, one function per family of operators.

void register_arithmetic(KernelRegistry& registry) {
  registry.add("Add", [](const NodeInfo& info) {
    return binary<false>(info, NumericTypes{}, [](auto a, auto b) { return wrap_add(a, b); });
  });
  registry.add("Sub", [](const NodeInfo& info) {
    return binary<false>(info, NumericTypes{}, [](auto a, auto b) { return wrap_sub(a, b); });
  });
  registry.add("Mul", [](const NodeInfo& info) {
    return binary<false>(info, NumericTypes{}, [](auto a, auto b) { return wrap_mul(a, b); });
  });
  registry.add("Div", [](const NodeInfo& info) {
    return binary<false>(info, NumericTypes{}, [](auto a, auto b) { return safe_div(a, b); });
  });
  registry.add("Pow", make_pow);
  registry.add("PRelu", [](const NodeInfo& info) {
    return binary<false>(info,
                         Types<float, f16, double, bf16, int32_t, int64_t, uint32_t, uint64_t>{},
                         [](auto x, auto slope) { return is_negative(x) ? slope * x : x; });
  });

  // Variadic.
  registry.add("Min", [](const NodeInfo& info) {
    return variadic(
        info, NumericTypes{}, [](auto a, auto b) { return min_of(a, b); }, false);
  });
  registry.add("Max", [](const NodeInfo& info) {
    return variadic(
        info, NumericTypes{}, [](auto a, auto b) { return max_of(a, b); }, false);
  });
  registry.add("Sum", [](const NodeInfo& info) {
    return variadic(
        info, NumericTypes{}, [](auto a, auto b) { return wrap_add(a, b); }, false);
  });
  registry.add("Mean", [](const NodeInfo& info) {
    return variadic(
        info, FloatTypes{}, [](auto a, auto b) { return a + b; }, true);
  });
}

void register_unary_math(KernelRegistry& registry) {
  registry.add("Neg", [](const NodeInfo& info) {
    return unary_of(info, SignedTypes{}, [](auto x) { return wrap_sub(decltype(x)(0), x); });
  });
  registry.add("Abs", [](const NodeInfo& info) {
    return unary_of(info, NumericTypes{}, [](auto x) { return abs_of(x); });
  });
  registry.add("Sign", [](const NodeInfo& info) {
    return unary_of(info, NumericTypes{}, [](auto x) { return sign_of(x); });
  });
  registry.add("Sqrt", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::sqrt(x); });
  });
  registry.add("Exp", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::exp(x); });
  });
  registry.add("Log", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::log(x); });
  });
  registry.add("Reciprocal", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return decltype(x)(1) / x; });
  });
  registry.add("Floor", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::floor(x); });
  });
  registry.add("Ceil", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::ceil(x); });
  });
  registry.add("Round", [](const NodeInfo& info) {  // halves to even
    return unary_of(info, FloatTypes{}, [](auto x) { return std::nearbyint(x); });
  });
  registry.add("Sin", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::sin(x); });
  });
  registry.add("Cos", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::cos(x); });
  });
  registry.add("Tanh", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::tanh(x); });
  });
  registry.add("Erf", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::erf(x); });
  });
}

void register_activations(KernelRegistry& registry) {
  registry.add("Relu", [](const NodeInfo& info) {
    return unary_of(info, SignedTypes{}, [](auto x) { return x > 0 ? x : decltype(x)(0); });
  });
  registry.add("LeakyRelu", [](const NodeInfo& info) {
    const float alpha = info.node.attr_float("alpha", 0.01f);
    return unary_of(info, FloatTypes{},
                    [alpha](auto x) { return x >= 0 ? x : static_cast<decltype(x)>(alpha) * x; });
  });
  registry.add("Elu", [](const NodeInfo& info) {
    const float alpha = info.node.attr_float("alpha", 1.0f);
    return unary_of(info, FloatTypes{}, [alpha](auto x) {
      return x >= 0 ? x : static_cast<decltype(x)>(alpha) * std::expm1(x);
    });
  });
  registry.add("Selu", [](const NodeInfo& info) {
    const float alpha = info.node.attr_float("alpha", 1.67326319217681884765625f);
    const float gamma = info.node.attr_float("gamma", 1.05070102214813232421875f);
    return unary_of(info, FloatTypes{}, [alpha, gamma](auto x) {
      using M = decltype(x);
      return x > 0 ? M(gamma) * x : M(gamma) * M(alpha) * std::expm1(x);
    });
  });
  registry.add("Sigmoid", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return sigmoid(x); });
  });
  registry.add("HardSigmoid", [](const NodeInfo& info) {
    const float alpha = info.node.attr_float("alpha", 0.2f);
    const float beta = info.node.attr_float("beta", 0.5f);
    return unary_of(info, FloatTypes{}, [alpha, beta](auto x) {
      using M = decltype(x);
      return std::fmax(M(0), std::fmin(M(1), M(alpha) * x + M(beta)));
    });
  });
  registry.add("HardSwish", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) {
      using M = decltype(x);
      return x * std::fmax(M(0), std::fmin(M(1), x / M(6) + M(0.5)));
    });
  });
  registry.add("Softplus", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) {
      return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
    });
  });
  registry.add("Softsign", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return x / (decltype(x)(1) + std::fabs(x)); });
  });
  registry.add("Gelu", make_gelu);
  registry.add("Clip", make_clip);
}

// Unary math and activations beyond the basics (ops_math.cpp's schemas).
void register_more_math(KernelRegistry& registry) {
  registry.add("Acos", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::acos(x); });
  });
  registry.add("Asin", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::asin(x); });
  });
  registry.add("Atan", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::atan(x); });
  });
  registry.add("Tan", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::tan(x); });
  });
  registry.add("Acosh", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::acosh(x); });
  });
  registry.add("Asinh", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::asinh(x); });
  });
  registry.add("Atanh", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::atanh(x); });
  });
  registry.add("Sinh", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::sinh(x); });
  });
  registry.add("Cosh", [](const NodeInfo& info) {
    return unary_of(info, FloatTypes{}, [](auto x) { return std::cosh(x); });
  });
  registry.add("IsNaN", [](const NodeInfo& info) {
    return predicate(info, FloatTypes{}, [](auto x) { return x != x; });
  });
  registry.add("IsInf", [](const NodeInfo& info) {
    const bool neg = info.node.attr_int("detect_negative", 1) != 0;
    const bool pos = info.node.attr_int("detect_positive", 1) != 0;
    return predicate(info, FloatTypes{},
                     [neg, pos](auto x) { return std::isinf(x) && (x > 0 ? pos : neg); });
  });
  registry.add("Celu", [](const NodeInfo& info) {
    const float alpha = info.node.attr_float("alpha", 1.0f);
    if (!(alpha != 0.0f)) throw sdk::invalid(info.describe() + ": attribute 'alpha' must not be 0");
    return unary_of(info, FloatTypes{}, [alpha](auto x) {
      using M = decltype(x);
      const M a = static_cast<M>(alpha);
      return std::fmax(M(0), x) + std::fmin(M(0), a * std::expm1(x / a));
    });
  });
  registry.add("ThresholdedRelu", [](const NodeInfo& info) {
    const float alpha = info.node.attr_float("alpha", 1.0f);
    return unary_of(info, FloatTypes{},
                    [alpha](auto x) { return x > static_cast<decltype(x)>(alpha) ? x : 0; });
  });
  registry.add("Shrink", [](const NodeInfo& info) {
    const double lambd = info.node.attr_float("lambd", 0.5f);
    const double bias = info.node.attr_float("bias", 0.0f);
    // Computed in double and converted back, as ONNX's reference does for
    // integer inputs (x + bias is a float there).
    return unary_of(info, NumericTypes{}, [lambd, bias](auto x) {
      using M = decltype(x);
      const double v = static_cast<double>(x);
      const double r = v < -lambd ? v + bias : (v > lambd ? v - bias : 0.0);
      if constexpr (std::is_integral_v<M>) return convert<M>(r);
      else return static_cast<M>(r);
    });
  });
  registry.add("Mod", [](const NodeInfo& info) {
    const bool fmod = info.node.attr_int("fmod", 0) != 0;
    if (!fmod && (info.in_dtypes[0] == BP_DTYPE_FLOAT32 || info.in_dtypes[0] == BP_DTYPE_FLOAT16 ||
                  info.in_dtypes[0] == BP_DTYPE_FLOAT64 || info.in_dtypes[0] == BP_DTYPE_BFLOAT16))
      throw sdk::invalid(info.describe() +
                         ": fmod=0 on floating-point inputs (ONNX requires "
                         "fmod=1 for them)");
    return binary<false>(info, NumericTypes{},
                         [fmod](auto a, auto b) { return mod_of(a, b, fmod); });
  });
  registry.add("BitShift", [](const NodeInfo& info) {
    const std::string dir = info.node.attr_string("direction", "");
    if (dir != "LEFT" && dir != "RIGHT")
      throw sdk::invalid(info.describe() + ": attribute 'direction' is '" + dir +
                         "', expected 'LEFT' or 'RIGHT'");
    const bool left = dir == "LEFT";
    // Shifts by the type's width or more give 0 (no undefined behaviour).
    return binary<false>(info, Types<uint8_t, uint16_t, uint32_t, uint64_t>{},
                         [left](auto x, auto y) {
                           using T = decltype(x);
                           if (static_cast<uint64_t>(y) >= sizeof(T) * 8) return T(0);
                           const uint64_t v = static_cast<uint64_t>(x);
                           return static_cast<T>(left ? v << y : v >> y);
                         });
  });
}

// Comparison and logic (bool outputs).
void register_logic(KernelRegistry& registry) {
  registry.add("Equal", [](const NodeInfo& info) {
    return binary<true>(info, AllTypes{}, [](auto a, auto b) { return a == b; });
  });
  registry.add("Less", [](const NodeInfo& info) {
    return binary<true>(info, NumericTypes{}, [](auto a, auto b) { return a < b; });
  });
  registry.add("LessOrEqual", [](const NodeInfo& info) {
    return binary<true>(info, NumericTypes{}, [](auto a, auto b) { return a <= b; });
  });
  registry.add("Greater", [](const NodeInfo& info) {
    return binary<true>(info, NumericTypes{}, [](auto a, auto b) { return a > b; });
  });
  registry.add("GreaterOrEqual", [](const NodeInfo& info) {
    return binary<true>(info, NumericTypes{}, [](auto a, auto b) { return a >= b; });
  });
  registry.add("Not", [](const NodeInfo& info) {
    return unary_of(info, Types<bool>{}, [](bool x) { return !x; });
  });
  registry.add("And", [](const NodeInfo& info) {
    return binary<true>(info, Types<bool>{}, [](bool a, bool b) { return a && b; });
  });
  registry.add("Or", [](const NodeInfo& info) {
    return binary<true>(info, Types<bool>{}, [](bool a, bool b) { return a || b; });
  });
  registry.add("Xor", [](const NodeInfo& info) {
    return binary<true>(info, Types<bool>{}, [](bool a, bool b) { return a != b; });
  });
}

}  // namespace

void register_elementwise_kernels(KernelRegistry& registry) {
  register_arithmetic(registry);
  register_unary_math(registry);
  register_activations(registry);
  register_logic(registry);
  register_more_math(registry);
  // Selection, copies and conversions.
  registry.add("Where", make_where);
  registry.add("Identity", make_copy);
  registry.add("Dropout", make_dropout, {1, 2});  // ratio, training_mode: data inputs (kernel.hpp)
  registry.add("Cast", make_cast);
  registry.add("CastLike", make_cast);
}

}  // namespace backplane::cpuref
