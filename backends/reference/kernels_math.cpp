// kernels_math.cpp — Hardmax, LRN, MeanVarianceNormalization, LpNormalization,
// EyeLike, DepthToSpace/SpaceToDepth, ReverseSequence, Det, Upsample,
// MaxUnpool, Einsum, CumSum, LpPool, GlobalLpPool. (The elementwise ops of
// ops_math.cpp — trigonometric, IsNaN/IsInf, Celu, Shrink, Mod, BitShift... —
// are in kernels_elementwise.cpp, next to the broadcasting they share.)
//
// Float kernels compute in the element's math type (float for float16 and
// bfloat16, kernel_numeric.hpp) and accumulate sums in double. Layout kernels
// move elements by size, so they take every dtype.
#include "kernel.hpp"
#include "kernel_numeric.hpp"
#include "kernel_util.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <type_traits>

namespace backplane::cpuref {
namespace {

template <class... Ts>
struct Types {};
using FloatTypes = Types<float, f16, double, bf16>;
using NumericTypes = Types<float, f16, double, bf16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                           uint16_t, uint32_t, uint64_t>;
using AllTypes = Types<float, f16, double, bf16, int8_t, int16_t, int32_t, int64_t, uint8_t,
                       uint16_t, uint32_t, uint64_t, bool>;

template <class... Ts, class F>
std::unique_ptr<Kernel> dispatch_of(Types<Ts...>, bp_dtype_t dt, const NodeInfo& info,
                                    const char* what, F&& f) {
  return dispatch<Ts...>(dt, info, what, std::forward<F>(f));
}

// Calls f(E{}) with an unsigned type E of the element size of `dt` (layout
// kernels only move elements).
template <class F>
std::unique_ptr<Kernel> by_size(bp_dtype_t dt, const NodeInfo& info, F&& f) {
  switch (sdk::dtype_size(dt)) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      throw sdk::unsupported(info.describe() + ": dtype " + sdk::dtype_name(dt) +
                             " is not supported");
  }
}

void check_output(const NodeInfo& info, const Dims& expect, size_t i = 0) {
  if (info.out_shapes.size() <= i || info.out_shapes[i] != expect)
    throw sdk::invalid(info.describe() + ": output shape " +
                       (info.out_shapes.size() > i ? dims_str(info.out_shapes[i]) : "?") +
                       ", expected " + dims_str(expect));
}

void check_same_dtype_out(const NodeInfo& info) {
  if (info.out_dtypes[0] != info.in_dtypes[0])
    throw sdk::invalid(info.describe() + ": output dtype " + sdk::dtype_name(info.out_dtypes[0]) +
                       " differs from the input's " + sdk::dtype_name(info.in_dtypes[0]));
}

// Row-major strides of `dims`.
Dims strides_of(const Dims& dims) {
  Dims s(dims.size(), 1);
  for (size_t d = dims.size(); d-- > 1;) s[d - 1] = s[d] * dims[d];
  return s;
}

// Reads a constant int32/int64 input as int64 values.
std::vector<int64_t> int_constant(const NodeInfo& info, size_t i, const char* what) {
  const void* p = info.constant(i);
  if (p == nullptr)
    throw sdk::unsupported(info.describe() + ": input '" + what + "' must be a constant");
  const int64_t n = sdk::element_count(info.in_shapes[i]);
  std::vector<int64_t> v(static_cast<size_t>(n));
  if (info.in_dtypes[i] == BP_DTYPE_INT64) {
    std::memcpy(v.data(), p, v.size() * sizeof(int64_t));
  } else if (info.in_dtypes[i] == BP_DTYPE_INT32) {
    for (int64_t k = 0; k < n; ++k) v[k] = static_cast<const int32_t*>(p)[k];
  } else {
    throw sdk::invalid(info.describe() + ": input '" + what + "' must be int32 or int64");
  }
  return v;
}

// ---------------------------------------------------------------------------
// Hardmax
// ---------------------------------------------------------------------------

// One-hot of the first maximum of each of `outer * inner` lanes of length n
// (stride inner). Before opset 13 the input is a 2-D [outer, n] matrix
// (flattened at axis), i.e. inner = 1.
template <class T>
class HardmaxKernel final : public Kernel {
 public:
  HardmaxKernel(int64_t outer, int64_t n, int64_t inner) : outer_(outer), n_(n), inner_(inner) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    const T zero = store<T>(0), one = store<T>(1);
    for (int64_t o = 0; o < outer_; ++o) {
      for (int64_t i = 0; i < inner_; ++i) {
        const int64_t base = o * n_ * inner_ + i;
        int64_t best = 0;
        math_t<T> bv = load(x[base]);
        for (int64_t k = 1; k < n_; ++k) {
          const math_t<T> v = load(x[base + k * inner_]);
          if (v > bv || (v != v && bv == bv)) bv = v, best = k;  // NaN wins, as argmax
        }
        for (int64_t k = 0; k < n_; ++k) y[base + k * inner_] = k == best ? one : zero;
      }
    }
  }

 private:
  int64_t outer_, n_, inner_;
};

std::unique_ptr<Kernel> make_hardmax(const NodeInfo& info) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  check_output(info, d);
  const int64_t rank = static_cast<int64_t>(d.size());
  const bool v13 = info.node.opset() >= 13;
  int64_t axis = info.node.attr_int("axis", v13 ? -1 : 1);
  int64_t outer = 1, n = 1, inner = 1;
  if (v13) {
    axis = normalize_axis(axis, std::max<int64_t>(rank, 1), info);
    const AxisSplit s = split_at_axis(d, axis);
    outer = s.outer, inner = s.inner, n = rank == 0 ? 1 : d[axis];
  } else {
    if (axis < -rank || axis > rank)
      throw sdk::invalid(info.describe() + ": axis " + std::to_string(axis) +
                         " is out of range for rank " + std::to_string(rank));
    if (axis < 0) axis += rank;
    for (int64_t k = 0; k < rank; ++k) (k < axis ? outer : n) *= d[k];
  }
  if (sdk::element_count(d) == 0) outer = 0;
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<HardmaxKernel<decltype(tag)>>(outer, n, inner);
                     });
}

// ---------------------------------------------------------------------------
// LRN
// ---------------------------------------------------------------------------

template <class T>
class LrnKernel final : public Kernel {
 public:
  LrnKernel(int64_t n, int64_t c, int64_t spatial, int64_t size, double alpha, double beta,
            double bias)
      : n_(n), c_(c), sp_(spatial), size_(size), alpha_(alpha), beta_(beta), bias_(bias) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    // Channels [c - floor((size-1)/2), c + ceil((size-1)/2)], clipped.
    const int64_t lo = (size_ - 1) / 2, hi = size_ - 1 - lo;
    for (int64_t b = 0; b < n_; ++b) {
      const int64_t base = b * c_ * sp_;
      for (int64_t c = 0; c < c_; ++c) {
        const int64_t c0 = std::max<int64_t>(0, c - lo), c1 = std::min<int64_t>(c_ - 1, c + hi);
        for (int64_t s = 0; s < sp_; ++s) {
          double sq = 0;
          for (int64_t k = c0; k <= c1; ++k) {
            const double v = load(x[base + k * sp_ + s]);
            sq += v * v;
          }
          const double v = load(x[base + c * sp_ + s]);
          y[base + c * sp_ + s] =
              store<T>(v / std::pow(bias_ + alpha_ / static_cast<double>(size_) * sq, beta_));
        }
      }
    }
  }

 private:
  int64_t n_, c_, sp_, size_;
  double alpha_, beta_, bias_;
};

std::unique_ptr<Kernel> make_lrn(const NodeInfo& info) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  check_output(info, d);
  if (d.size() < 3) throw sdk::invalid(info.describe() + ": input must have rank >= 3");
  const int64_t size = info.node.attr_int("size", 0);
  if (size <= 0) throw sdk::invalid(info.describe() + ": attribute 'size' must be positive");
  const double alpha = info.node.attr_float("alpha", 0.0001f);
  const double beta = info.node.attr_float("beta", 0.75f);
  const double bias = info.node.attr_float("bias", 1.0f);
  int64_t spatial = 1;
  for (size_t k = 2; k < d.size(); ++k) spatial *= d[k];
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<LrnKernel<decltype(tag)>>(d[0], d[1], spatial, size,
                                                                         alpha, beta, bias);
                     });
}

// ---------------------------------------------------------------------------
// Reductions over a set of axes, per group of the kept ones
// ---------------------------------------------------------------------------

// The elements of a tensor split into groups (one per index of the kept
// dims), each group the elements over the reduced dims. Offsets are computed
// by odometers over the two sets of dims.
struct GroupPlan {
  Dims kept_dims, kept_strides, red_dims, red_strides;
  int64_t groups = 1, per_group = 1;
};

GroupPlan make_group_plan(const Dims& d, const std::vector<bool>& reduced, const NodeInfo& info) {
  if (d.size() > kMaxRank) throw sdk::unsupported(info.describe() + ": rank is too large");
  GroupPlan p;
  const Dims st = strides_of(d);
  for (size_t k = 0; k < d.size(); ++k) {
    (reduced[k] ? p.red_dims : p.kept_dims).push_back(d[k]);
    (reduced[k] ? p.red_strides : p.kept_strides).push_back(st[k]);
    (reduced[k] ? p.per_group : p.groups) *= d[k];
  }
  if (p.per_group == 0) p.groups = 0;
  return p;
}

// Calls f(offset) for each index of dims/strides (rank of them), in
// row-major order.
template <class F>
inline void for_each_offset(const int64_t* dims, const int64_t* strides, size_t n, int64_t base,
                            F&& f) {
  for (size_t d = 0; d < n; ++d)
    if (dims[d] == 0) return;
  int64_t idx[kMaxRank] = {};
  const int rank = static_cast<int>(n);
  int64_t off = base;
  for (;;) {
    f(off);
    int d = rank - 1;
    for (; d >= 0; --d) {
      off += strides[d];
      if (++idx[d] < dims[d]) break;
      off -= strides[d] * dims[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}
template <class F>
inline void for_each_offset(const Dims& dims, const Dims& strides, int64_t base, F&& f) {
  for_each_offset(dims.data(), strides.data(), dims.size(), base, std::forward<F>(f));
}

// MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) per group
// (ONNX's function body: the epsilon is added to the standard deviation).
template <class T>
class MvnKernel final : public Kernel {
 public:
  explicit MvnKernel(GroupPlan p) : p_(std::move(p)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    if (p_.groups == 0) return;
    for_each_offset(p_.kept_dims, p_.kept_strides, 0, [&](int64_t g) {
      double sum = 0;
      for_each_offset(p_.red_dims, p_.red_strides, g, [&](int64_t o) { sum += load(x[o]); });
      const double mean = sum / static_cast<double>(p_.per_group);
      double sq = 0;
      for_each_offset(p_.red_dims, p_.red_strides, g, [&](int64_t o) {
        const double v = load(x[o]) - mean;
        sq += v * v;
      });
      const double sd = std::sqrt(sq / static_cast<double>(p_.per_group)) + 1e-9;
      for_each_offset(p_.red_dims, p_.red_strides, g,
                      [&](int64_t o) { y[o] = store<T>((load(x[o]) - mean) / sd); });
    });
  }

 private:
  GroupPlan p_;
};

std::unique_ptr<Kernel> make_mvn(const NodeInfo& info) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  check_output(info, d);
  const int64_t rank = static_cast<int64_t>(d.size());
  std::vector<bool> reduced(d.size(), false);
  for (int64_t a : info.node.attr_ints("axes", {0, 2, 3})) {
    const int64_t n = normalize_axis(a, rank, info);
    if (reduced[n]) throw sdk::invalid(info.describe() + ": attribute 'axes' repeats an axis");
    reduced[n] = true;
  }
  GroupPlan plan = make_group_plan(d, reduced, info);
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<MvnKernel<decltype(tag)>>(plan);
                     });
}

// LpNormalization: x / ||x||_p along one axis (p = 1 or 2). A zero norm
// divides as IEEE says (0/0 = NaN), like ONNX's reference.
template <class T>
class LpNormKernel final : public Kernel {
 public:
  LpNormKernel(AxisSplit s, int64_t n, int64_t p) : s_(s), n_(n), p_(p) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t o = 0; o < s_.outer; ++o) {
      for (int64_t i = 0; i < s_.inner; ++i) {
        const int64_t base = o * n_ * s_.inner + i;
        double acc = 0;
        for (int64_t k = 0; k < n_; ++k) {
          const double v = load(x[base + k * s_.inner]);
          acc += p_ == 1 ? std::fabs(v) : v * v;
        }
        const double norm = p_ == 1 ? acc : std::sqrt(acc);
        for (int64_t k = 0; k < n_; ++k)
          y[base + k * s_.inner] = store<T>(load(x[base + k * s_.inner]) / norm);
      }
    }
  }

 private:
  AxisSplit s_;
  int64_t n_, p_;
};

std::unique_ptr<Kernel> make_lp_norm(const NodeInfo& info) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  check_output(info, d);
  const int64_t p = info.node.attr_int("p", 2);
  if (p != 1 && p != 2)
    throw sdk::invalid(info.describe() + ": attribute 'p' must be 1 or 2, got " +
                       std::to_string(p));
  const int64_t rank = static_cast<int64_t>(d.size());
  if (rank == 0) throw sdk::invalid(info.describe() + ": input must have rank >= 1");
  const int64_t axis = normalize_axis(info.node.attr_int("axis", -1), rank, info);
  AxisSplit s = split_at_axis(d, axis);
  if (sdk::element_count(d) == 0) s.outer = 0;
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<LpNormKernel<decltype(tag)>>(s, d[axis], p);
                     });
}

// ---------------------------------------------------------------------------
// EyeLike
// ---------------------------------------------------------------------------

template <class O>
class EyeLikeKernel final : public Kernel {
 public:
  EyeLikeKernel(int64_t rows, int64_t cols, int64_t k) : rows_(rows), cols_(cols), k_(k) {}
  void run(const void* const*, void* const* outputs, void*) const override {
    O* y = static_cast<O*>(outputs[0]);
    const O zero = store<O>(0), one = store<O>(1);
    for (int64_t i = 0; i < rows_ * cols_; ++i) y[i] = zero;
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t c = r + k_;
      if (c >= 0 && c < cols_) y[r * cols_ + c] = one;
    }
  }

 private:
  int64_t rows_, cols_, k_;
};

std::unique_ptr<Kernel> make_eye_like(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& d = info.in_shapes[0];
  if (d.size() != 2) throw sdk::invalid(info.describe() + ": input must be 2-D");
  check_output(info, d);
  const int64_t k = info.node.attr_int("k", 0);
  if (info.node.has_attr("dtype") && info.node.attr_int("dtype", 0) != info.out_dtypes[0])
    throw sdk::invalid(info.describe() + ": attribute 'dtype' disagrees with the output dtype");
  return dispatch_of(AllTypes{}, info.out_dtypes[0], info, "output",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<EyeLikeKernel<decltype(tag)>>(d[0], d[1], k);
                     });
}

// ---------------------------------------------------------------------------
// DepthToSpace / SpaceToDepth
// ---------------------------------------------------------------------------

// Both are a permutation of the 4-D input; the factory computes, for every
// output element, its input offset (a table: index arithmetic out of run()).
template <class E>
class GatherTableKernel final : public Kernel {
 public:
  explicit GatherTableKernel(std::vector<int64_t> src) : src_(std::move(src)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const E* x = static_cast<const E*>(inputs[0]);
    E* y = static_cast<E*>(outputs[0]);
    for (size_t i = 0; i < src_.size(); ++i) y[i] = x[src_[i]];
  }

 private:
  std::vector<int64_t> src_;
};

std::unique_ptr<Kernel> make_depth_space(const NodeInfo& info, bool to_space) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  if (d.size() != 4) throw sdk::invalid(info.describe() + ": input must be 4-D (N, C, H, W)");
  const int64_t b = info.node.attr_int("blocksize", 0);
  if (b <= 0) throw sdk::invalid(info.describe() + ": attribute 'blocksize' must be positive");
  const int64_t n = d[0], c = d[1], h = d[2], w = d[3];
  std::vector<int64_t> src;
  if (to_space) {
    const std::string mode = info.node.attr_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD")
      throw sdk::invalid(info.describe() + ": attribute 'mode' is '" + mode +
                         "', expected DCR or CRD");
    if (c % (b * b) != 0)
      throw sdk::invalid(info.describe() + ": channels are not a multiple of blocksize^2");
    const int64_t oc = c / (b * b);
    check_output(info, {n, oc, h * b, w * b});
    src.reserve(static_cast<size_t>(sdk::element_count(d)));
    for (int64_t bn = 0; bn < n; ++bn)
      for (int64_t ch = 0; ch < oc; ++ch)
        for (int64_t y = 0; y < h * b; ++y)
          for (int64_t x = 0; x < w * b; ++x) {
            const int64_t i = y % b, j = x % b;
            const int64_t ic = mode == "DCR" ? (i * b + j) * oc + ch : ch * b * b + i * b + j;
            src.push_back(((bn * c + ic) * h + y / b) * w + x / b);
          }
  } else {
    if (h % b != 0 || w % b != 0)
      throw sdk::invalid(info.describe() + ": spatial dims are not multiples of blocksize");
    check_output(info, {n, c * b * b, h / b, w / b});
    src.reserve(static_cast<size_t>(sdk::element_count(d)));
    for (int64_t bn = 0; bn < n; ++bn)
      for (int64_t oc = 0; oc < c * b * b; ++oc)
        for (int64_t y = 0; y < h / b; ++y)
          for (int64_t x = 0; x < w / b; ++x) {
            const int64_t ch = oc % c, blk = oc / c, i = blk / b, j = blk % b;
            src.push_back(((bn * c + ch) * h + y * b + i) * w + x * b + j);
          }
  }
  return by_size(info.in_dtypes[0], info, [&](auto tag) -> std::unique_ptr<Kernel> {
    return std::make_unique<GatherTableKernel<decltype(tag)>>(std::move(src));
  });
}

// ---------------------------------------------------------------------------
// ReverseSequence
// ---------------------------------------------------------------------------

template <class E>
class ReverseSequenceKernel final : public Kernel {
 public:
  ReverseSequenceKernel(int64_t steps, int64_t batch, int64_t inner, bool batch_major,
                        std::string who)
      : t_(steps), b_(batch), inner_(inner), batch_major_(batch_major), who_(std::move(who)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const E* x = static_cast<const E*>(inputs[0]);
    const int64_t* lens = static_cast<const int64_t*>(inputs[1]);
    E* y = static_cast<E*>(outputs[0]);
    for (int64_t b = 0; b < b_; ++b) {
      const int64_t len = lens[b];
      if (len < 0 || len > t_)
        throw sdk::invalid(who_ + ": sequence_lens[" + std::to_string(b) + "] = " +
                           std::to_string(len) + " is outside [0, " + std::to_string(t_) + "]");
      for (int64_t t = 0; t < t_; ++t) {
        const int64_t from = t < len ? len - 1 - t : t;
        std::memcpy(y + offset(t, b), x + offset(from, b), static_cast<size_t>(inner_) * sizeof(E));
      }
    }
  }

 private:
  int64_t offset(int64_t t, int64_t b) const {
    return (batch_major_ ? b * t_ + t : t * b_ + b) * inner_;
  }
  int64_t t_, b_, inner_;
  bool batch_major_;
  std::string who_;
};

std::unique_ptr<Kernel> make_reverse_sequence(const NodeInfo& info) {
  require_inputs(info, 2);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  check_output(info, d);
  const int64_t batch_axis = info.node.attr_int("batch_axis", 1);
  const int64_t time_axis = info.node.attr_int("time_axis", 0);
  if (d.size() < 2 || batch_axis + time_axis != 1 || (batch_axis != 0 && batch_axis != 1))
    throw sdk::invalid(info.describe() +
                       ": batch_axis and time_axis must be 0 and 1 in some "
                       "order, on an input of rank >= 2");
  if (info.in_dtypes[1] != BP_DTYPE_INT64 || info.in_shapes[1] != Dims{d[batch_axis]})
    throw sdk::invalid(info.describe() + ": sequence_lens must be int64 of shape [" +
                       std::to_string(d[batch_axis]) + "]");
  int64_t inner = 1;
  for (size_t k = 2; k < d.size(); ++k) inner *= d[k];
  return by_size(info.in_dtypes[0], info, [&](auto tag) -> std::unique_ptr<Kernel> {
    return std::make_unique<ReverseSequenceKernel<decltype(tag)>>(
        d[time_axis], d[batch_axis], inner, batch_axis == 0, info.describe());
  });
}

// ---------------------------------------------------------------------------
// Det
// ---------------------------------------------------------------------------

// LU decomposition with partial pivoting, in double, per matrix; the n x n
// working copy lives in the scratch buffer.
template <class T>
class DetKernel final : public Kernel {
 public:
  DetKernel(int64_t batch, int64_t n) : batch_(batch), n_(n) {}
  size_t scratch_bytes() const override { return static_cast<size_t>(n_ * n_) * sizeof(double); }
  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    double* a = static_cast<double*>(scratch);
    const int64_t n = n_;
    for (int64_t m = 0; m < batch_; ++m) {
      for (int64_t i = 0; i < n * n; ++i) a[i] = load(x[m * n * n + i]);
      double det = 1;
      for (int64_t col = 0; col < n && det != 0; ++col) {
        int64_t piv = col;
        for (int64_t r = col + 1; r < n; ++r)
          if (std::fabs(a[r * n + col]) > std::fabs(a[piv * n + col])) piv = r;
        if (a[piv * n + col] == 0) {
          det = 0;
          break;
        }
        if (piv != col) {
          for (int64_t k = 0; k < n; ++k) std::swap(a[piv * n + k], a[col * n + k]);
          det = -det;
        }
        const double p = a[col * n + col];
        det *= p;
        for (int64_t r = col + 1; r < n; ++r) {
          const double f = a[r * n + col] / p;
          for (int64_t k = col; k < n; ++k) a[r * n + k] -= f * a[col * n + k];
        }
      }
      y[m] = store<T>(det);
    }
  }

 private:
  int64_t batch_, n_;
};

std::unique_ptr<Kernel> make_det(const NodeInfo& info) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  if (d.size() < 2 || d[d.size() - 1] != d[d.size() - 2])
    throw sdk::invalid(info.describe() + ": input must be square matrices, got " + dims_str(d));
  const Dims out(d.begin(), d.end() - 2);
  check_output(info, out);
  const int64_t batch = sdk::element_count(out), n = d.back();
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<DetKernel<decltype(tag)>>(batch, n);
                     });
}

// ---------------------------------------------------------------------------
// Upsample (opset 7-9; Resize replaced it)
// ---------------------------------------------------------------------------

// Nearest: each output index i of a dim reads floor(i / scale) (clamped).
// Linear: multilinear interpolation at i / scale (asymmetric), the neighbour
// clamped at the edge. Per dim the factory tabulates the two source indices
// and the weight of the upper one.
struct UpsampleAxis {
  std::vector<int64_t> lo, hi;
  std::vector<double> w;  // weight of hi
};

template <class T>
class UpsampleKernel final : public Kernel {
 public:
  UpsampleKernel(Dims in, Dims out, std::vector<UpsampleAxis> axes, bool linear)
      : in_(std::move(in)),
        out_(std::move(out)),
        axes_(std::move(axes)),
        linear_(linear),
        in_strides_(strides_of(in_)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    const int64_t total = sdk::element_count(out_);
    const size_t rank = out_.size();
    int64_t idx[kMaxRank] = {};
    for (int64_t i = 0; i < total; ++i) {
      if (!linear_) {
        int64_t off = 0;
        for (size_t d = 0; d < rank; ++d) off += axes_[d].lo[idx[d]] * in_strides_[d];
        y[i] = x[off];
      } else {
        // 2^rank corners; dims whose weight is 0 contribute one corner only.
        double acc = 0;
        const uint64_t corners = uint64_t{1} << rank;
        for (uint64_t m = 0; m < corners; ++m) {
          double w = 1;
          int64_t off = 0;
          for (size_t d = 0; d < rank && w != 0; ++d) {
            const bool up = (m >> d) & 1u;
            const double wd = axes_[d].w[idx[d]];
            w *= up ? wd : 1 - wd;
            off += (up ? axes_[d].hi[idx[d]] : axes_[d].lo[idx[d]]) * in_strides_[d];
          }
          if (w != 0) acc += w * static_cast<double>(load(x[off]));
        }
        y[i] = store<T>(acc);
      }
      for (size_t d = rank; d-- > 0;) {
        if (++idx[d] < out_[d]) break;
        idx[d] = 0;
      }
    }
  }

 private:
  Dims in_, out_;
  std::vector<UpsampleAxis> axes_;
  bool linear_;
  Dims in_strides_;
};

std::unique_ptr<Kernel> make_upsample(const NodeInfo& info) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& in = info.in_shapes[0];
  const std::string mode = info.node.attr_string("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "bilinear")
    throw sdk::invalid(info.describe() + ": attribute 'mode' is '" + mode +
                       "', expected nearest or linear");
  std::vector<double> scales;
  if (info.node.opset() < 9) {
    for (float s : info.node.attr_floats("scales")) scales.push_back(s);
  } else {
    require_inputs(info, 2);
    const void* p = info.constant(1);
    if (p == nullptr || info.in_dtypes[1] != BP_DTYPE_FLOAT32)
      throw sdk::unsupported(info.describe() + ": input 'scales' must be a float32 constant");
    const float* f = static_cast<const float*>(p);
    scales.assign(f, f + sdk::element_count(info.in_shapes[1]));
  }
  if (scales.size() != in.size() || in.size() > 16)
    throw sdk::invalid(info.describe() + ": 'scales' must have one value per input dim");
  Dims out;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!(scales[d] >= 1.0) || !std::isfinite(scales[d]))
      throw sdk::invalid(info.describe() + ": 'scales' must be finite and at least 1");
    out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in[d]) * scales[d])));
  }
  check_output(info, out);
  const bool linear = mode != "nearest";
  std::vector<UpsampleAxis> axes(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    auto& a = axes[d];
    for (int64_t i = 0; i < out[d]; ++i) {
      const double pos = static_cast<double>(i) / scales[d];
      const int64_t lo = std::min<int64_t>(static_cast<int64_t>(std::floor(pos)), in[d] - 1);
      a.lo.push_back(lo);
      a.hi.push_back(std::min<int64_t>(lo + 1, in[d] - 1));
      a.w.push_back(linear ? pos - static_cast<double>(lo) : 0.0);
    }
  }
  if (!linear) {
    return dispatch_of(
        AllTypes{}, info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
          return std::make_unique<UpsampleKernel<decltype(tag)>>(in, out, axes, false);
        });
  }
  return dispatch_of(NumericTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<UpsampleKernel<decltype(tag)>>(in, out, axes, true);
                     });
}

// ---------------------------------------------------------------------------
// MaxUnpool
// ---------------------------------------------------------------------------

// Scatters X into a zeroed output at the positions I names. I holds flat
// indices into the tensor MaxPool read (the default output shape); with a
// larger output_shape each lands at the same (n, c, spatial...) position.
template <class T>
class MaxUnpoolKernel final : public Kernel {
 public:
  MaxUnpoolKernel(int64_t count, Dims pooled_in, Dims out, std::string who)
      : count_(count),
        in_(std::move(pooled_in)),
        out_(std::move(out)),
        out_strides_(strides_of(out_)),
        total_in_(sdk::element_count(in_)),
        total_out_(sdk::element_count(out_)),
        who_(std::move(who)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    const int64_t* ind = static_cast<const int64_t*>(inputs[1]);
    T* y = static_cast<T*>(outputs[0]);
    const T zero = store<T>(0);
    for (int64_t i = 0; i < total_out_; ++i) y[i] = zero;
    for (int64_t i = 0; i < count_; ++i) {
      int64_t flat = ind[i];
      if (flat < 0 || flat >= total_in_)
        throw sdk::invalid(who_ + ": index " + std::to_string(flat) + " is outside [0, " +
                           std::to_string(total_in_) + ")");
      int64_t off = 0;
      for (size_t d = in_.size(); d-- > 0;) {
        off += (flat % in_[d]) * out_strides_[d];
        flat /= in_[d];
      }
      y[off] = x[i];
    }
  }

 private:
  int64_t count_;
  Dims in_, out_, out_strides_;
  int64_t total_in_, total_out_;
  std::string who_;
};

std::unique_ptr<Kernel> make_max_unpool(const NodeInfo& info) {
  require_inputs(info, 2);
  check_same_dtype_out(info);
  const Dims& x = info.in_shapes[0];
  if (x.size() < 3 || info.in_shapes[1] != x || info.in_dtypes[1] != BP_DTYPE_INT64)
    throw sdk::invalid(info.describe() + ": X must have rank >= 3 and I be int64 of X's shape");
  const size_t n = x.size() - 2;
  const std::vector<int64_t> kernel = info.node.attr_ints("kernel_shape");
  const std::vector<int64_t> strides = info.node.attr_ints("strides", std::vector<int64_t>(n, 1));
  const std::vector<int64_t> pads = info.node.attr_ints("pads", std::vector<int64_t>(2 * n, 0));
  if (kernel.size() != n || strides.size() != n || pads.size() != 2 * n)
    throw sdk::invalid(info.describe() + ": kernel_shape, strides and pads do not match the rank");
  Dims pooled{x[0], x[1]};
  for (size_t i = 0; i < n; ++i) {
    if (kernel[i] <= 0 || strides[i] <= 0 || pads[i] < 0 || pads[i + n] < 0)
      throw sdk::invalid(info.describe() + ": kernel_shape and strides must be positive");
    pooled.push_back((x[i + 2] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + n]);
  }
  Dims out = pooled;
  if (info.has_input(2)) {
    out = int_constant(info, 2, "output_shape");
    if (out.size() != x.size())
      throw sdk::invalid(info.describe() + ": 'output_shape' does not match the rank");
    for (size_t i = 0; i < out.size(); ++i)
      if (i < 2 ? out[i] != x[i] : out[i] < pooled[i])
        throw sdk::invalid(info.describe() + ": 'output_shape' " + dims_str(out) +
                           " is smaller than the default output " + dims_str(pooled));
  }
  check_output(info, out);
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "X",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<MaxUnpoolKernel<decltype(tag)>>(
                           sdk::element_count(x), pooled, out, info.describe());
                     });
}

// ---------------------------------------------------------------------------
// Einsum
// ---------------------------------------------------------------------------

// The equation is compiled into "loop labels": every distinct letter and one
// per ellipsis dim. The output labels form the outer loops and the summed ones
// the inner loops; each operand has a stride per loop label (the sum of its
// strides for a label it repeats: a diagonal; 0 for a broadcast ellipsis dim).
struct EinsumPlan {
  Dims out_sizes, sum_sizes;
  std::vector<Dims> out_strides, sum_strides;  // per operand
};

EinsumPlan plan_einsum(const NodeInfo& info) {
  const std::string raw = info.node.attr_string("equation", "");
  std::string eq;
  for (char ch : raw)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  const size_t nin = info.in_shapes.size();
  auto fail = [&](const std::string& why) {
    return sdk::invalid(info.describe() + ": equation '" + raw + "': " + why);
  };
  // Parses a term into letters, '.' marking the ellipsis.
  auto parse = [&](const std::string& t) {
    std::string labels;
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.compare(i, 3, "...") == 0) {
        if (labels.find('.') != std::string::npos) throw fail("two ellipses in a term");
        labels += '.';
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(t[i]))) {
        labels += t[i];
      } else {
        throw fail("unexpected character '" + std::string(1, t[i]) + "'");
      }
    }
    return labels;
  };
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse(lhs.substr(start, comma == std::string::npos ? comma : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != nin) throw fail("the number of terms differs from the number of inputs");
  // Ellipsis rank (broadcast across operands) and letter sizes.
  size_t ell_rank = 0;
  for (size_t k = 0; k < nin; ++k) {
    const size_t named = terms[k].size() - (terms[k].find('.') != std::string::npos ? 1 : 0);
    const size_t rank = info.in_shapes[k].size();
    if (terms[k].find('.') != std::string::npos ? rank < named : rank != named)
      throw fail("operand " + std::to_string(k) + " has rank " + std::to_string(rank));
    if (terms[k].find('.') != std::string::npos) ell_rank = std::max(ell_rank, rank - named);
  }
  // Loop labels: letters as themselves, ellipsis dim j as the char (j + 1).
  std::map<char, int64_t> size;
  std::map<char, int> uses;
  auto note = [&](char l, int64_t dim) {
    auto [it, fresh] = size.emplace(l, dim);
    if (!fresh && it->second != dim) {
      if (it->second == 1) it->second = dim;
      else if (dim != 1) throw fail("label '" + std::string(1, l) + "' has two sizes");
    }
  };
  // The (label, dim) list of each operand.
  std::vector<std::vector<std::pair<char, size_t>>> dims_of(nin);
  for (size_t k = 0; k < nin; ++k) {
    const Dims& s = info.in_shapes[k];
    const size_t named = terms[k].size() - (terms[k].find('.') != std::string::npos ? 1 : 0);
    size_t d = 0;
    for (char l : terms[k]) {
      if (l == '.') {
        const size_t e = s.size() - named;
        for (size_t j = 0; j < e; ++j, ++d) {
          const char label = static_cast<char>(ell_rank - e + j + 1);
          note(label, s[d]);
          dims_of[k].push_back({label, d});
        }
      } else {
        note(l, s[d]);
        ++uses[l];
        dims_of[k].push_back({l, d++});
      }
    }
  }
  std::string out;
  if (arrow != std::string::npos) {
    const std::string o = parse(eq.substr(arrow + 2));
    for (char l : o) {
      if (l == '.') {
        for (size_t j = 0; j < ell_rank; ++j) out += static_cast<char>(j + 1);
      } else {
        if (size.count(l) == 0) throw fail("output label '" + std::string(1, l) + "' is unused");
        if (out.find(l) != std::string::npos) throw fail("output label repeated");
        out += l;
      }
    }
  } else {
    for (size_t j = 0; j < ell_rank; ++j) out += static_cast<char>(j + 1);
    for (const auto& [l, n] : uses)
      if (n == 1) out += l;
  }
  std::string summed;
  for (const auto& [l, n] : size)
    if (out.find(l) == std::string::npos) summed += l;
  if (out.size() + summed.size() > kMaxRank)
    throw sdk::unsupported(info.describe() + ": too many labels");
  EinsumPlan p;
  Dims expect;
  for (char l : out) p.out_sizes.push_back(size[l]);
  for (char l : summed) p.sum_sizes.push_back(size[l]);
  for (size_t k = 0; k < nin; ++k) {
    const Dims st = strides_of(info.in_shapes[k]);
    auto stride_for = [&](char l) {
      int64_t s = 0;
      for (const auto& [label, d] : dims_of[k])
        if (label == l && info.in_shapes[k][d] != 1) s += st[d];
      return s;
    };
    Dims os, ss;
    for (char l : out) os.push_back(stride_for(l));
    for (char l : summed) ss.push_back(stride_for(l));
    p.out_strides.push_back(os);
    p.sum_strides.push_back(ss);
  }
  // numpy accepts an ellipsis dropped from the output only when it is empty
  // or all ones; summing it away is not einsum's meaning.
  if (arrow != std::string::npos && eq.find("...", arrow) == std::string::npos)
    for (size_t j = 0; j < ell_rank; ++j)
      if (size[static_cast<char>(j + 1)] != 1)
        throw fail("the output drops non-trivial ellipsis dims");
  check_output(info, p.out_sizes);
  return p;
}

template <class T>
class EinsumKernel final : public Kernel {
  // Accumulate in the math type; integers wrap (as numpy's do) without
  // signed overflow: modulo 2^64, then truncated to the type.
  using M = math_t<T>;
  using A = accumulator_t<T>;

 public:
  explicit EinsumKernel(EinsumPlan p) : p_(std::move(p)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    T* y = static_cast<T*>(outputs[0]);
    const size_t nin = p_.out_strides.size();
    for (int64_t s : p_.sum_sizes)
      if (s == 0) {  // an empty sum: zeros
        for (int64_t i = 0; i < sdk::element_count(p_.out_sizes); ++i) y[i] = store<T>(0);
        return;
      }
    const int64_t total = sdk::element_count(p_.out_sizes);
    int64_t oidx[kMaxRank] = {};
    int64_t base[kMaxRank] = {};  // per operand offset of the output index
    for (int64_t i = 0; i < total; ++i) {
      A acc = 0;
      int64_t sidx[kMaxRank] = {};
      int64_t off[kMaxRank];
      for (size_t k = 0; k < nin; ++k) off[k] = base[k];
      const int sr = static_cast<int>(p_.sum_sizes.size());
      for (;;) {
        A prod = 1;
        for (size_t k = 0; k < nin; ++k)
          prod = static_cast<A>(prod * widen<A>(load(static_cast<const T*>(inputs[k])[off[k]])));
        acc = static_cast<A>(acc + prod);
        int d = sr - 1;
        for (; d >= 0; --d) {
          for (size_t k = 0; k < nin; ++k) off[k] += p_.sum_strides[k][d];
          if (++sidx[d] < p_.sum_sizes[d]) break;
          for (size_t k = 0; k < nin; ++k) off[k] -= p_.sum_strides[k][d] * p_.sum_sizes[d];
          sidx[d] = 0;
        }
        if (d < 0) break;
      }
      y[i] = store<T>(static_cast<M>(acc));
      for (size_t d = p_.out_sizes.size(); d-- > 0;) {
        for (size_t k = 0; k < nin; ++k) base[k] += p_.out_strides[k][d];
        if (++oidx[d] < p_.out_sizes[d]) break;
        for (size_t k = 0; k < nin; ++k) base[k] -= p_.out_strides[k][d] * p_.out_sizes[d];
        oidx[d] = 0;
      }
    }
  }

 private:
  EinsumPlan p_;
};

std::unique_ptr<Kernel> make_einsum(const NodeInfo& info) {
  const size_t nin = info.in_dtypes.size();
  if (nin == 0) throw sdk::invalid(info.describe() + ": at least one input is required");
  if (nin > kMaxRank) throw sdk::unsupported(info.describe() + ": too many operands");
  require_inputs(info, nin);
  for (size_t k = 1; k < nin; ++k)
    if (info.in_dtypes[k] != info.in_dtypes[0])
      throw sdk::invalid(info.describe() + ": operands have different dtypes");
  check_same_dtype_out(info);
  EinsumPlan plan = plan_einsum(info);
  return dispatch_of(NumericTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<EinsumKernel<decltype(tag)>>(plan);
                     });
}

// ---------------------------------------------------------------------------
// CumSum
// ---------------------------------------------------------------------------

template <class T>
class CumSumKernel final : public Kernel {
  using M = math_t<T>;
  using A = accumulator_t<T>;  // integers wrap

 public:
  CumSumKernel(Dims dims, int64_t axis, bool axis_at_run, bool exclusive, bool reverse,
               bp_dtype_t axis_dtype, std::string who)
      : dims_(std::move(dims)),
        axis_(axis),
        axis_at_run_(axis_at_run),
        exclusive_(exclusive),
        reverse_(reverse),
        axis_dtype_(axis_dtype),
        who_(std::move(who)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    int64_t axis = axis_;
    const int64_t rank = static_cast<int64_t>(dims_.size());
    if (axis_at_run_) {
      axis = axis_dtype_ == BP_DTYPE_INT32 ? *static_cast<const int32_t*>(inputs[1])
                                           : *static_cast<const int64_t*>(inputs[1]);
      if (axis < -rank || axis >= rank)
        throw sdk::invalid(who_ + ": axis " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(rank));
      if (axis < 0) axis += rank;
    }
    const AxisSplit s = split_at_axis(dims_, axis);
    const int64_t n = dims_[axis];
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        A acc = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t k = reverse_ ? n - 1 - j : j;
          const int64_t at = (o * n + k) * s.inner + i;
          const A v = widen<A>(load(x[at]));
          if (exclusive_) {
            y[at] = store<T>(static_cast<M>(acc));
            acc = static_cast<A>(acc + v);
          } else {
            acc = static_cast<A>(acc + v);
            y[at] = store<T>(static_cast<M>(acc));
          }
        }
      }
    }
  }

 private:
  Dims dims_;
  int64_t axis_;
  bool axis_at_run_, exclusive_, reverse_;
  bp_dtype_t axis_dtype_;
  std::string who_;
};

std::unique_ptr<Kernel> make_cumsum(const NodeInfo& info) {
  require_inputs(info, 2);
  check_same_dtype_out(info);
  const Dims& d = info.in_shapes[0];
  check_output(info, d);
  if (d.empty()) throw sdk::invalid(info.describe() + ": input must have rank >= 1");
  if (sdk::element_count(info.in_shapes[1]) != 1 ||
      (info.in_dtypes[1] != BP_DTYPE_INT32 && info.in_dtypes[1] != BP_DTYPE_INT64))
    throw sdk::invalid(info.describe() + ": axis must be an int32 or int64 scalar");
  int64_t axis = 0;
  const bool at_run = info.constant(1) == nullptr;
  if (!at_run)
    axis = normalize_axis(int_constant(info, 1, "axis")[0], static_cast<int64_t>(d.size()), info);
  const bool exclusive = info.node.attr_int("exclusive", 0) != 0;
  const bool reverse = info.node.attr_int("reverse", 0) != 0;
  return dispatch_of(NumericTypes{}, info.in_dtypes[0], info, "input",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<CumSumKernel<decltype(tag)>>(
                           d, axis, at_run, exclusive, reverse, info.in_dtypes[1], info.describe());
                     });
}

// ---------------------------------------------------------------------------
// LpPool, GlobalLpPool
// ---------------------------------------------------------------------------

// (sum over the window of |x|^p)^(1/p); padding contributes zeros. The
// factory tabulates, per output position of each spatial dim, the first tap
// inside the input and how many taps land inside (taps step by the dilation).
struct PoolAxis {
  std::vector<int64_t> start, taps;
};

template <class T>
class LpPoolKernel final : public Kernel {
 public:
  LpPoolKernel(int64_t planes, Dims in_sp, Dims out_sp, std::vector<PoolAxis> axes,
               const Dims& dilations, double p)
      : planes_(planes),
        in_(std::move(in_sp)),
        out_(std::move(out_sp)),
        axes_(std::move(axes)),
        p_(p),
        in_strides_(strides_of(in_)),
        tap_strides_(in_strides_) {
    for (size_t d = 0; d < tap_strides_.size(); ++d) tap_strides_[d] *= dilations[d];
  }
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    const int64_t in_plane = sdk::element_count(in_), out_plane = sdk::element_count(out_);
    const size_t rank = out_.size();
    for (int64_t pl = 0; pl < planes_; ++pl) {
      const T* xp = x + pl * in_plane;
      int64_t oidx[kMaxRank] = {};
      for (int64_t o = 0; o < out_plane; ++o) {
        int64_t taps[kMaxRank];
        int64_t base = 0;
        for (size_t d = 0; d < rank; ++d) {
          taps[d] = axes_[d].taps[oidx[d]];
          base += axes_[d].start[oidx[d]] * in_strides_[d];
        }
        double acc = 0;
        for_each_offset(taps, tap_strides_.data(), rank, base, [&](int64_t off) {
          acc += std::pow(std::fabs(static_cast<double>(load(xp[off]))), p_);
        });
        y[pl * out_plane + o] = store<T>(std::pow(acc, 1.0 / p_));
        for (size_t d = rank; d-- > 0;) {
          if (++oidx[d] < out_[d]) break;
          oidx[d] = 0;
        }
      }
    }
  }

 private:
  int64_t planes_;
  Dims in_, out_;
  std::vector<PoolAxis> axes_;
  double p_;
  Dims in_strides_, tap_strides_;
};

// LpPool (opset 2, 11; 18 adds dilations and ceil_mode) and GlobalLpPool.
std::unique_ptr<Kernel> make_lp_pool(const NodeInfo& info, bool global) {
  require_inputs(info, 1);
  check_same_dtype_out(info);
  const Dims& x = info.in_shapes[0];
  if (x.size() < 3 || x.size() - 2 > kMaxRank)
    throw sdk::invalid(info.describe() + ": input must be (N, C, spatial...)");
  const size_t n = x.size() - 2;
  const int64_t p = info.node.attr_int("p", 2);
  if (p <= 0) throw sdk::invalid(info.describe() + ": attribute 'p' must be positive");
  const Dims in_sp(x.begin() + 2, x.end());
  std::vector<int64_t> kernel = in_sp, strides(n, 1), pads(2 * n, 0), dil(n, 1);
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  if (!global) {
    kernel = info.node.attr_ints("kernel_shape");
    strides = info.node.attr_ints("strides", strides);
    pads = info.node.attr_ints("pads", pads);
    dil = info.node.attr_ints("dilations", dil);
    auto_pad = info.node.attr_string("auto_pad", "NOTSET");
    ceil_mode = info.node.attr_int("ceil_mode", 0) != 0;
    if (kernel.size() != n || strides.size() != n || pads.size() != 2 * n || dil.size() != n)
      throw sdk::invalid(info.describe() +
                         ": kernel_shape, strides, dilations and pads do not match the rank");
  }
  Dims out_sp;
  std::vector<PoolAxis> axes(n);
  for (size_t d = 0; d < n; ++d) {
    if (kernel[d] <= 0 || strides[d] <= 0 || dil[d] <= 0 || pads[d] < 0 || pads[d + n] < 0)
      throw sdk::invalid(info.describe() +
                         ": kernel_shape, strides and dilations must be positive");
    const int64_t window = (kernel[d] - 1) * dil[d] + 1;
    int64_t begin = pads[d], o;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      o = (in_sp[d] + strides[d] - 1) / strides[d];
      const int64_t total = std::max<int64_t>((o - 1) * strides[d] + window - in_sp[d], 0);
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else if (auto_pad == "VALID") {
      begin = 0;
      o = in_sp[d] < window ? 0 : (in_sp[d] - window) / strides[d] + 1;
    } else if (auto_pad == "NOTSET") {
      const int64_t span = in_sp[d] + pads[d] + pads[d + n] - window;
      if (span < 0) throw sdk::invalid(info.describe() + ": the window is larger than the input");
      o = (ceil_mode ? (span + strides[d] - 1) / strides[d] : span / strides[d]) + 1;
      // With ceil_mode, a last window that would start in the end padding is dropped.
      if (ceil_mode && (o - 1) * strides[d] >= in_sp[d] + pads[d]) --o;
    } else {
      throw sdk::invalid(info.describe() + ": attribute 'auto_pad' is '" + auto_pad + "'");
    }
    out_sp.push_back(o);
    for (int64_t i = 0; i < o; ++i) {
      const int64_t s = i * strides[d] - begin;
      // Taps s + k * dil, k in [0, kernel): the ones inside [0, in) are contiguous in k.
      int64_t k_lo = 0, k_hi = kernel[d];
      while (k_lo < k_hi && s + k_lo * dil[d] < 0) ++k_lo;
      while (k_hi > k_lo && s + (k_hi - 1) * dil[d] >= in_sp[d]) --k_hi;
      axes[d].start.push_back(s + k_lo * dil[d]);
      axes[d].taps.push_back(k_hi - k_lo);
    }
  }
  Dims out{x[0], x[1]};
  out.insert(out.end(), out_sp.begin(), out_sp.end());
  check_output(info, out);
  return dispatch_of(FloatTypes{}, info.in_dtypes[0], info, "X",
                     [&](auto tag) -> std::unique_ptr<Kernel> {
                       return std::make_unique<LpPoolKernel<decltype(tag)>>(
                           x[0] * x[1], in_sp, out_sp, axes, dil, static_cast<double>(p));
                     });
}

}  // namespace

void register_math_kernels(KernelRegistry& registry) {
  registry.add("Hardmax", make_hardmax);
  registry.add("LRN", make_lrn);
  registry.add("MeanVarianceNormalization", make_mvn);
  registry.add("LpNormalization", make_lp_norm);
  registry.add("EyeLike", make_eye_like);
  registry.add("DepthToSpace", [](const NodeInfo& info) { return make_depth_space(info, true); });
  registry.add("SpaceToDepth", [](const NodeInfo& info) { return make_depth_space(info, false); });
  registry.add("ReverseSequence", make_reverse_sequence);
  registry.add("Det", make_det);
  registry.add("Upsample", make_upsample, {1});
  registry.add("MaxUnpool", make_max_unpool, {2});
  registry.add("Einsum", make_einsum);
  registry.add("CumSum", make_cumsum, {1});
  registry.add("LpPool", [](const NodeInfo& info) { return make_lp_pool(info, false); });
  registry.add("GlobalLpPool", [](const NodeInfo& info) { return make_lp_pool(info, true); });
}

}  // namespace backplane::cpuref
