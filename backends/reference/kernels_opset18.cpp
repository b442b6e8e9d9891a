// kernels_opset18.cpp — the ops ONNX opset 18 added: BitwiseAnd/Or/Xor/Not,
// Mish, GroupNormalization (scale and bias per group, as opset 18 defines
// them), CenterCropPad, Col2Im. (The ops opset 18 changed keep their kernels:
// reductions, Split, Pad in kernels_tensor.cpp, Resize in
// kernels_nn_resize.cpp.)
//
// Index tables and strides are computed in the factories; run() only walks
// them. Statistics are accumulated in double: this backend is the oracle.
#include "kernel.hpp"
#include "kernel_util.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace backplane::cpuref {
namespace {

// Arithmetic type of a stored element (f16 is computed in float).
template <class T>
using math_of = std::conditional_t<std::is_same_v<T, f16>, float, T>;

template <class T>
math_of<T> load(T v) {
  if constexpr (std::is_same_v<T, f16>) return half_to_float(v.bits);
  else return v;
}

template <class T>
T store(double v) {
  if constexpr (std::is_same_v<T, f16>) return f16{float_to_half(static_cast<float>(v))};
  else return static_cast<T>(v);
}

Dims int_constant(const NodeInfo& info, size_t i, const char* what) {
  const void* p = info.constant(i);
  if (p == nullptr)
    throw sdk::unsupported(info.describe() + ": input '" + what + "' must be a constant");
  const int64_t n = numel(info.in_shapes[i]);
  Dims v(static_cast<size_t>(n));
  if (info.in_dtypes[i] == BP_DTYPE_INT64) {
    std::memcpy(v.data(), p, v.size() * sizeof(int64_t));
  } else if (info.in_dtypes[i] == BP_DTYPE_INT32) {
    const int32_t* q = static_cast<const int32_t*>(p);
    for (size_t k = 0; k < v.size(); ++k) v[k] = q[k];
  } else {
    throw sdk::invalid(info.describe() + ": input '" + what + "' must be int32 or int64");
  }
  return v;
}

void expect_output(const NodeInfo& info, const Dims& want) {
  if (info.out_shapes.empty() || info.out_shapes[0] != want)
    throw sdk::invalid(info.describe() + ": output shape " +
                       (info.out_shapes.empty() ? "none" : dims_str(info.out_shapes[0])) +
                       " differs from the computed " + dims_str(want));
}

// Element strides of `in` aligned (numpy broadcasting) to `out`; 0 where it repeats.
Dims broadcast_strides(const Dims& in, const Dims& out, const NodeInfo& info) {
  if (in.size() > out.size())
    throw sdk::invalid(info.describe() + ": " + dims_str(in) + " does not broadcast to " +
                       dims_str(out));
  Dims st(out.size(), 0);
  int64_t stride = 1;
  for (size_t j = 0; j < in.size(); ++j) {
    const size_t d = out.size() - 1 - j;
    const int64_t dim = in[in.size() - 1 - j];
    if (dim != out[d] && dim != 1)
      throw sdk::invalid(info.describe() + ": " + dims_str(in) + " does not broadcast to " +
                         dims_str(out));
    st[d] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return st;
}

// ---------------------------------------------------------------------------
// BitwiseAnd / BitwiseOr / BitwiseXor (broadcasting), BitwiseNot
// ---------------------------------------------------------------------------

enum class BitOp { kAnd, kOr, kXor };

template <class T, BitOp Op>
class BitwiseKernel final : public Kernel {
 public:
  BitwiseKernel(Dims out, Dims sa, Dims sb)
      : out_(std::move(out)), sa_(std::move(sa)), sb_(std::move(sb)) {
    total_ = numel(out_);
  }
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* a = static_cast<const T*>(inputs[0]);
    const T* b = static_cast<const T*>(inputs[1]);
    T* y = static_cast<T*>(outputs[0]);
    const size_t r = out_.size();
    std::array<int64_t, kMaxRank> idx{};
    int64_t ia = 0, ib = 0;
    for (int64_t i = 0; i < total_; ++i) {
      if constexpr (Op == BitOp::kAnd) y[i] = static_cast<T>(a[ia] & b[ib]);
      else if constexpr (Op == BitOp::kOr) y[i] = static_cast<T>(a[ia] | b[ib]);
      else y[i] = static_cast<T>(a[ia] ^ b[ib]);
      for (size_t d = r; d-- > 0;) {  // odometer over the output dims
        ia += sa_[d];
        ib += sb_[d];
        if (++idx[d] < out_[d]) break;
        ia -= sa_[d] * out_[d];
        ib -= sb_[d] * out_[d];
        idx[d] = 0;
      }
    }
  }

 private:
  Dims out_, sa_, sb_;
  int64_t total_ = 0;
};

template <BitOp Op>
std::unique_ptr<Kernel> make_bitwise(const NodeInfo& info) {
  require_inputs(info, 2);
  if (info.in_dtypes[0] != info.in_dtypes[1])
    throw sdk::invalid(info.describe() + ": inputs A and B differ in dtype");
  const Dims& out = info.out_shapes[0];
  if (out.size() > kMaxRank) throw sdk::unsupported(info.describe() + ": rank above 32");
  Dims sa = broadcast_strides(info.in_shapes[0], out, info);
  Dims sb = broadcast_strides(info.in_shapes[1], out, info);
  return dispatch<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(
      info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
        return std::make_unique<BitwiseKernel<decltype(tag), Op>>(out, sa, sb);
      });
}

template <class T>
class BitwiseNotKernel final : public Kernel {
 public:
  explicit BitwiseNotKernel(int64_t n) : n_(n) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t i = 0; i < n_; ++i) y[i] = static_cast<T>(~x[i]);
  }

 private:
  int64_t n_;
};

std::unique_ptr<Kernel> make_bitwise_not(const NodeInfo& info) {
  require_inputs(info, 1);
  const int64_t n = numel(info.in_shapes[0]);
  return dispatch<int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t>(
      info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
        return std::make_unique<BitwiseNotKernel<decltype(tag)>>(n);
      });
}

// ---------------------------------------------------------------------------
// Mish: x * tanh(softplus(x)), in double (softplus overflows to x for large x)
// ---------------------------------------------------------------------------

template <class T>
class MishKernel final : public Kernel {
 public:
  explicit MishKernel(int64_t n) : n_(n) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t i = 0; i < n_; ++i) {
      const double v = static_cast<double>(load(x[i]));
      const double sp = v > 30.0 ? v : std::log1p(std::exp(v));
      y[i] = store<T>(v * std::tanh(sp));
    }
  }

 private:
  int64_t n_;
};

std::unique_ptr<Kernel> make_mish(const NodeInfo& info) {
  require_inputs(info, 1);
  const int64_t n = numel(info.in_shapes[0]);
  return dispatch<float, double, f16>(info.in_dtypes[0], info, "input",
                                      [&](auto tag) -> std::unique_ptr<Kernel> {
                                        return std::make_unique<MishKernel<decltype(tag)>>(n);
                                      });
}

// ---------------------------------------------------------------------------
// GroupNormalization-18: per (batch, group) mean and variance over the
// group's channels and spatial positions; scale[g] and bias[g] per group.
// ---------------------------------------------------------------------------

template <class T>
class GroupNormKernel final : public Kernel {
 public:
  GroupNormKernel(int64_t batch, int64_t groups, int64_t group_elems, double eps)
      : batch_(batch), groups_(groups), elems_(group_elems), eps_(eps) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    const T* scale = static_cast<const T*>(inputs[1]);
    const T* bias = static_cast<const T*>(inputs[2]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t n = 0; n < batch_; ++n)
      for (int64_t g = 0; g < groups_; ++g) {
        const int64_t base = (n * groups_ + g) * elems_;
        double sum = 0.0;
        for (int64_t i = 0; i < elems_; ++i) sum += static_cast<double>(load(x[base + i]));
        const double mean = elems_ > 0 ? sum / static_cast<double>(elems_) : 0.0;
        double sq = 0.0;
        for (int64_t i = 0; i < elems_; ++i) {
          const double d = static_cast<double>(load(x[base + i])) - mean;
          sq += d * d;
        }
        const double var = elems_ > 0 ? sq / static_cast<double>(elems_) : 0.0;
        const double a = static_cast<double>(load(scale[g])) / std::sqrt(var + eps_);
        const double b = static_cast<double>(load(bias[g])) - mean * a;
        for (int64_t i = 0; i < elems_; ++i)
          y[base + i] = store<T>(static_cast<double>(load(x[base + i])) * a + b);
      }
  }

 private:
  int64_t batch_, groups_, elems_;
  double eps_;
};

std::unique_ptr<Kernel> make_group_norm(const NodeInfo& info) {
  require_inputs(info, 3);
  const Dims& x = info.in_shapes[0];
  const int64_t groups = info.node.attr_int("num_groups", 0);
  if (x.size() < 2 || groups < 1 || x[1] % groups != 0)
    throw sdk::invalid(info.describe() + ": num_groups " + std::to_string(groups) +
                       " must divide the channels of " + dims_str(x));
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (info.in_shapes[i] != Dims{groups})
      throw sdk::invalid(info.describe() + ": scale and bias must have shape [" +
                         std::to_string(groups) + "]");
    if (info.in_dtypes[i] != info.in_dtypes[0])
      throw sdk::invalid(info.describe() + ": scale and bias must have the dtype of X");
  }
  expect_output(info, x);
  const int64_t elems = numel(x) / std::max<int64_t>(1, x[0] * groups);
  const double eps = info.node.attr_float("epsilon", 1e-5f);
  return dispatch<float, double, f16>(
      info.in_dtypes[0], info, "X", [&](auto tag) -> std::unique_ptr<Kernel> {
        return std::make_unique<GroupNormKernel<decltype(tag)>>(x[0], groups, elems, eps);
      });
}

// ---------------------------------------------------------------------------
// CenterCropPad: per axis, crop (start (dim - size) / 2) or zero-pad (offset
// (size - dim) / 2); a copy of any element type, by bytes.
// ---------------------------------------------------------------------------

class CenterCropPadKernel final : public Kernel {
 public:
  // `offset[d]`: input index of output index 0 along d (negative: padding).
  CenterCropPadKernel(Dims in, Dims out, Dims offset, size_t esize)
      : in_(std::move(in)), out_(std::move(out)), off_(std::move(offset)), esize_(esize) {
    in_strides_.assign(in_.size(), 1);
    for (size_t d = in_.size(); d-- > 1;) in_strides_[d - 1] = in_strides_[d] * in_[d];
    total_ = numel(out_);
  }
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const unsigned char* x = static_cast<const unsigned char*>(inputs[0]);
    unsigned char* y = static_cast<unsigned char*>(outputs[0]);
    const size_t r = out_.size();
    std::array<int64_t, kMaxRank> idx{};
    for (int64_t i = 0; i < total_; ++i) {
      int64_t src = 0;
      bool inside = true;
      for (size_t d = 0; d < r && inside; ++d) {
        const int64_t s = idx[d] + off_[d];
        inside = s >= 0 && s < in_[d];
        src += s * in_strides_[d];
      }
      unsigned char* dst = y + static_cast<size_t>(i) * esize_;
      if (inside) std::memcpy(dst, x + static_cast<size_t>(src) * esize_, esize_);
      else std::memset(dst, 0, esize_);
      for (size_t d = r; d-- > 0;) {
        if (++idx[d] < out_[d]) break;
        idx[d] = 0;
      }
    }
  }

 private:
  Dims in_, out_, off_, in_strides_;
  size_t esize_;
  int64_t total_ = 0;
};

std::unique_ptr<Kernel> make_center_crop_pad(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  if (in.size() > kMaxRank) throw sdk::unsupported(info.describe() + ": rank above 32");
  const Dims shape = int_constant(info, 1, "shape");
  Dims axes;
  if (info.node.has_attr("axes")) {
    axes = info.node.attr_ints("axes");
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (axes.size() != shape.size())
    throw sdk::invalid(info.describe() + ": shape and axes differ in length");
  Dims out = in, offset(in.size(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = normalize_axis(axes[k], rank, info);
    if (shape[k] < 0) throw sdk::invalid(info.describe() + ": shape has a negative value");
    out[a] = shape[k];
    offset[a] = shape[k] <= in[a] ? (in[a] - shape[k]) / 2 : -((shape[k] - in[a]) / 2);
  }
  expect_output(info, out);
  const size_t esize = sdk::dtype_size(info.in_dtypes[0]);
  if (esize == 0) throw sdk::unsupported(info.describe() + ": dtype is not supported");
  return std::make_unique<CenterCropPadKernel>(in, out, offset, esize);
}

// ---------------------------------------------------------------------------
// Col2Im: input (N, C * prod(block), L) -> (N, C, *image), each column entry
// added at its image position (overlapping blocks sum). The factory tabulates
// the image offset of every (block position, block) pair, -1 if in padding.
// ---------------------------------------------------------------------------

template <class T>
class Col2ImKernel final : public Kernel {
 public:
  Col2ImKernel(int64_t planes, int64_t kl, int64_t image, std::vector<int64_t> table)
      : planes_(planes), kl_(kl), image_(image), table_(std::move(table)) {}
  size_t scratch_bytes() const override { return static_cast<size_t>(image_) * sizeof(double); }
  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    double* acc = static_cast<double*>(scratch);
    for (int64_t p = 0; p < planes_; ++p) {  // one (batch, channel) plane at a time
      std::fill(acc, acc + image_, 0.0);
      const T* xp = x + p * kl_;
      for (int64_t j = 0; j < kl_; ++j)
        if (table_[j] >= 0) acc[table_[j]] += static_cast<double>(load(xp[j]));
      T* yp = y + p * image_;
      for (int64_t i = 0; i < image_; ++i) yp[i] = store<T>(acc[i]);
    }
  }

 private:
  int64_t planes_, kl_, image_;
  std::vector<int64_t> table_;
};

Dims attr_or(const NodeInfo& info, const char* name, size_t n, int64_t fill) {
  if (!info.node.has_attr(name)) return Dims(n, fill);
  Dims v = info.node.attr_ints(name);
  if (v.size() != n)
    throw sdk::invalid(info.describe() + ": attribute '" + name + "' must have " +
                       std::to_string(n) + " values");
  return v;
}

std::unique_ptr<Kernel> make_col2im(const NodeInfo& info) {
  require_inputs(info, 3);
  const Dims& in = info.in_shapes[0];
  const Dims image = int_constant(info, 1, "image_shape");
  const Dims block = int_constant(info, 2, "block_shape");
  const size_t nd = image.size();
  if (in.size() != 3 || nd == 0 || block.size() != nd)
    throw sdk::invalid(info.describe() +
                       ": expects a 3-D input and image/block shapes of one length");
  const Dims dil = attr_or(info, "dilations", nd, 1);
  const Dims strides = attr_or(info, "strides", nd, 1);
  const Dims pads = attr_or(info, "pads", 2 * nd, 0);
  // Shape inference checked these against the input; the checks here keep
  // every product below the input's (or the output's) element count.
  Dims nblocks(nd);
  int64_t k = 1, l = 1, im = 1;
  const int64_t limit = int64_t{1} << 48;
  for (size_t d = 0; d < nd; ++d) {
    if (image[d] < 1 || block[d] < 1 || dil[d] < 1 || strides[d] < 1 || pads[d] < 0 ||
        pads[d + nd] < 0 || image[d] > limit || block[d] > limit || dil[d] > limit ||
        pads[d] > limit || pads[d + nd] > limit)
      throw sdk::invalid(info.describe() +
                         ": shapes, dilations and strides must be positive, pads non-negative");
    const int64_t span = image[d] + pads[d] + pads[d + nd] - (dil[d] * (block[d] - 1) + 1);
    if (span < 0) throw sdk::invalid(info.describe() + ": a block does not fit the padded image");
    nblocks[d] = span / strides[d] + 1;
    if (block[d] > in[1] / k || nblocks[d] > in[2] / l || image[d] > limit / im)
      throw sdk::invalid(info.describe() + ": input " + dims_str(in) +
                         " does not match the image and block shapes");
    k *= block[d];
    l *= nblocks[d];
    im *= image[d];
  }
  if (in[1] % k != 0 || in[2] != l)
    throw sdk::invalid(info.describe() + ": input " + dims_str(in) + " does not match " +
                       std::to_string(k) + " block positions and " + std::to_string(l) + " blocks");
  Dims out = {in[0], in[1] / k};
  out.insert(out.end(), image.begin(), image.end());
  expect_output(info, out);
  // table[kk * L + ll]: the image offset block position kk of block ll lands on.
  std::vector<int64_t> table(static_cast<size_t>(k * l), -1);
  Dims kk(nd, 0);
  for (int64_t a = 0; a < k; ++a) {
    Dims ll(nd, 0);
    for (int64_t b = 0; b < l; ++b) {
      int64_t off = 0;
      bool inside = true;
      for (size_t d = 0; d < nd; ++d) {
        const int64_t pos = ll[d] * strides[d] - pads[d] + kk[d] * dil[d];
        inside = inside && pos >= 0 && pos < image[d];
        off = off * image[d] + pos;
      }
      if (inside) table[static_cast<size_t>(a * l + b)] = off;
      for (size_t d = nd; d-- > 0;) {
        if (++ll[d] < nblocks[d]) break;
        ll[d] = 0;
      }
    }
    for (size_t d = nd; d-- > 0;) {
      if (++kk[d] < block[d]) break;
      kk[d] = 0;
    }
  }
  const int64_t planes = out[0] * out[1];
  return dispatch<float, double, f16, int32_t, int64_t>(
      info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
        return std::make_unique<Col2ImKernel<decltype(tag)>>(planes, k * l, im, table);
      });
}

}  // namespace

// CenterCropPad's shape and Col2Im's image/block shapes plan the kernel:
// data inputs (kernel.hpp).
void register_opset18_kernels(KernelRegistry& registry) {
  registry.add("BitwiseAnd", make_bitwise<BitOp::kAnd>);
  registry.add("BitwiseOr", make_bitwise<BitOp::kOr>);
  registry.add("BitwiseXor", make_bitwise<BitOp::kXor>);
  registry.add("BitwiseNot", make_bitwise_not);
  registry.add("Mish", make_mish);
  registry.add("GroupNormalization", make_group_norm);
  registry.add("CenterCropPad", make_center_crop_pad, {1});
  registry.add("Col2Im", make_col2im, {1, 2});
}

}  // namespace backplane::cpuref
