// kernels_quant.cpp — QuantizeLinear, DequantizeLinear, QLinearConv, QLinearMatMul, MatMulInteger,
// ConvInteger, DynamicQuantizeLinear.
//
// Integer matmuls and convolutions first widen their 8-bit operands to int32
// with the zero point subtracted (in scratch), so one loop serves every
// int8/uint8 combination; sums are exact (int64, stored as int32), and a
// requantized result is round-half-to-even of acc * scale, saturated.
#include "kernel.hpp"
#include "kernel_util.hpp"
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

[[noreturn]] void fail(const NodeInfo& info, const std::string& why) {
  throw sdk::invalid(info.describe() + ": " + why);
}

// 4-bit value i of `bytes`, two a byte, the lower bits first (MatMulNBits'
// and GatherBlockQuantized's packing of values and zero points).
int nibble(const uint8_t* bytes, int64_t i) { return (bytes[i / 2] >> (4 * (i % 2))) & 15; }

bool is_q8(bp_dtype_t dt) { return dt == BP_DTYPE_INT8 || dt == BP_DTYPE_UINT8; }

int32_t load_int(bp_dtype_t dt, const void* p, int64_t i) {
  switch (dt) {
    case BP_DTYPE_INT8:
      return static_cast<const int8_t*>(p)[i];
    case BP_DTYPE_UINT8:
      return static_cast<const uint8_t*>(p)[i];
    case BP_DTYPE_INT32:
      return static_cast<const int32_t*>(p)[i];
    default:
      return 0;
  }
}

// round-half-to-even(v) + zero_point, saturated to int8/uint8; NaN gives the zero point.
void store_q8(bp_dtype_t dt, void* p, int64_t i, double v, int32_t zero_point) {
  const double r = std::isnan(v) ? 0.0 : std::nearbyint(v);
  const double lo = dt == BP_DTYPE_INT8 ? -128.0 : 0.0, hi = dt == BP_DTYPE_INT8 ? 127.0 : 255.0;
  const double q = std::clamp(r + zero_point, lo, hi);
  if (dt == BP_DTYPE_INT8) static_cast<int8_t*>(p)[i] = static_cast<int8_t>(q);
  else static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(q);
}

// A scale / zero-point input: one value, or one per index along an axis.
// count() is 1 or the axis length; an absent zero point reads as 0.
struct QuantParam {
  int64_t count = 1;
  bool present = false;
  bp_dtype_t dt = BP_DTYPE_UNDEFINED;

  static QuantParam of(const NodeInfo& info, size_t i, int64_t axis_len, const char* what) {
    QuantParam q;
    if (!info.has_input(i)) return q;
    q.present = true;
    q.dt = info.in_dtypes[i];
    const Dims& s = info.in_shapes[i];
    const int64_t n = numel(s);
    if (n == 1 && s.size() <= 1) return q;
    if (axis_len >= 0 && s.size() == 1 && n == axis_len) {
      q.count = n;
      return q;
    }
    fail(info, std::string(what) + " " + dims_str(s) + " must have one element" +
                   (axis_len >= 0 ? " or " + std::to_string(axis_len) : std::string()));
  }
  float scale(const void* p, int64_t k) const {
    return static_cast<const float*>(p)[count == 1 ? 0 : k];
  }
  int32_t zero(const void* p, int64_t k) const {
    return present ? load_int(dt, p, count == 1 ? 0 : k) : 0;
  }
  // The zero point from input `i` of the node's inputs array, which has no
  // entry i when the optional input is omitted at the end.
  int32_t zero(const void* const* in, size_t i, int64_t k) const {
    return present ? load_int(dt, in[i], count == 1 ? 0 : k) : 0;
  }
};

// ------------------------------------------------- Quantize / Dequantize

class QuantizeKernel final : public Kernel {
 public:
  QuantizeKernel(bool dequantize, bp_dtype_t x_dt, bp_dtype_t y_dt, QuantParam scale,
                 QuantParam zero, int64_t n, int64_t axis_len, int64_t inner)
      : dequantize_(dequantize),
        x_dt_(x_dt),
        y_dt_(y_dt),
        scale_(scale),
        zero_(zero),
        n_(n),
        axis_len_(axis_len),
        inner_(inner) {}
  void run(const void* const* in, void* const* out, void*) const override {
    // The inputs array has as many entries as the node has inputs: without a
    // zero point there is no in[2] to read.
    const void* zero_point = zero_.present ? in[2] : nullptr;
    for (int64_t i = 0; i < n_; ++i) {
      const int64_t k = axis_len_ > 1 ? (i / inner_) % axis_len_ : 0;
      const float s = scale_.scale(in[1], k);
      const int32_t z = zero_.zero(zero_point, k);
      if (dequantize_) {
        // float arithmetic, as ONNX's reference: (float(x) - float(zp)) * scale.
        const float x = static_cast<float>(load_int(x_dt_, in[0], i));
        static_cast<float*>(out[0])[i] = (x - static_cast<float>(z)) * s;
      } else {
        const float x = x_dt_ == BP_DTYPE_FLOAT32 ? static_cast<const float*>(in[0])[i]
                                                  : static_cast<float>(load_int(x_dt_, in[0], i));
        store_q8(y_dt_, out[0], i, static_cast<double>(x / s), z);
      }
    }
  }

 private:
  bool dequantize_;
  bp_dtype_t x_dt_, y_dt_;
  QuantParam scale_, zero_;
  int64_t n_, axis_len_, inner_;
};

KernelFactory quantize_factory(bool dequantize) {
  return [dequantize](const NodeInfo& info) -> std::unique_ptr<Kernel> {
    require_inputs(info, 2);
    const bp_dtype_t x_dt = info.in_dtypes[0], y_dt = info.out_dtypes[0];
    if (dequantize ? !(is_q8(x_dt) || x_dt == BP_DTYPE_INT32)
                   : !(x_dt == BP_DTYPE_FLOAT32 || x_dt == BP_DTYPE_INT32))
      throw sdk::unsupported(info.describe() + ": x dtype " + sdk::dtype_name(x_dt) +
                             " is not supported");
    if (dequantize ? y_dt != BP_DTYPE_FLOAT32 : !is_q8(y_dt))
      fail(info, std::string("output dtype ") + sdk::dtype_name(y_dt) + " is not valid");
    if (info.in_dtypes[1] != BP_DTYPE_FLOAT32) fail(info, "the scale must be float32");
    const Dims& x = info.in_shapes[0];
    int64_t axis_len = -1, inner = 1;
    const bool per_tensor = numel(info.in_shapes[1]) == 1 && info.in_shapes[1].size() <= 1;
    if (info.node.opset() >= 13 && !x.empty() && !per_tensor) {
      const int64_t axis =
          normalize_axis(info.node.attr_int("axis", 1), static_cast<int64_t>(x.size()), info);
      axis_len = x[axis];
      inner = split_at_axis(x, axis).inner;
    }
    QuantParam scale = QuantParam::of(info, 1, axis_len, "scale");
    QuantParam zero = QuantParam::of(info, 2, axis_len, "zero point");
    if (zero.present && (zero.count != scale.count || zero.dt != (dequantize ? x_dt : y_dt)))
      fail(info, "the zero point must match the scale's shape and the quantized dtype");
    if (dequantize && x_dt == BP_DTYPE_INT32 && zero.present && info.constant(2) != nullptr)
      for (int64_t k = 0; k < zero.count; ++k)
        if (zero.zero(info.constant(2), k) != 0)
          fail(info, "an int32 input needs a zero point of 0");
    return std::make_unique<QuantizeKernel>(dequantize, x_dt, y_dt, scale, zero, numel(x),
                                            std::max<int64_t>(scale.count, 1), inner);
  };
}

class DynamicQuantizeKernel final : public Kernel {
 public:
  explicit DynamicQuantizeKernel(int64_t n) : n_(n) {}
  void run(const void* const* in, void* const* out, void*) const override {
    const float* x = static_cast<const float*>(in[0]);
    // The range always includes 0, so that 0 is exactly representable.
    float lo = 0.0f, hi = 0.0f;
    for (int64_t i = 0; i < n_; ++i) {
      if (std::isnan(x[i])) continue;
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const float scale = (hi - lo) / 255.0f;
    float zp = 0.0f;
    if (scale > 0.0f) zp = std::clamp(std::nearbyint((0.0f - lo) / scale), 0.0f, 255.0f);
    for (int64_t i = 0; i < n_; ++i)
      store_q8(BP_DTYPE_UINT8, out[0], i, scale > 0.0f ? x[i] / scale : 0.0f,
               static_cast<int32_t>(zp));
    if (out[1] != nullptr) *static_cast<float*>(out[1]) = scale;
    if (out[2] != nullptr) *static_cast<uint8_t*>(out[2]) = static_cast<uint8_t>(zp);
  }

 private:
  int64_t n_;
};

std::unique_ptr<Kernel> make_dynamic_quantize(const NodeInfo& info) {
  require_inputs(info, 1);
  if (info.in_dtypes[0] != BP_DTYPE_FLOAT32) fail(info, "x must be float32");
  if (info.out_dtypes[0] != BP_DTYPE_UINT8) fail(info, "y must be uint8");
  return std::make_unique<DynamicQuantizeKernel>(numel(info.in_shapes[0]));
}

// ------------------------------------------------------------------ matmul

// ONNX Runtime's MatMulNBits as the import keeps it (ir/ops_nn.cpp): each
// weight w[k][n] = (q - zero) * scale from its 4-bit value, then Y = A x W
// (+ bias), summed in double.
class MatMulNBitsKernel final : public Kernel {
 public:
  struct Params {
    int64_t rows = 0, k = 0, n = 0, block = 0, blocks = 0;
    bool zero_points = false, bias = false;
  };
  explicit MatMulNBitsKernel(Params p) : p_(p) {}
  size_t scratch_bytes() const override {
    return static_cast<size_t>(p_.k) * static_cast<size_t>(p_.n) * sizeof(float);
  }
  void run(const void* const* in, void* const* out, void* scratch) const override {
    const auto* a = static_cast<const float*>(in[0]);
    const auto* q = static_cast<const uint8_t*>(in[1]);
    const auto* scales = static_cast<const float*>(in[2]);
    const auto* zeros = p_.zero_points ? static_cast<const uint8_t*>(in[3]) : nullptr;
    const auto* bias = p_.bias ? static_cast<const float*>(in[5]) : nullptr;
    auto* y = static_cast<float*>(out[0]);
    auto* w = static_cast<float*>(scratch);  // [K, N]
    const int64_t row_bytes = p_.blocks * p_.block / 2, zero_bytes = (p_.blocks + 1) / 2;
    for (int64_t j = 0; j < p_.n; ++j)
      for (int64_t kk = 0; kk < p_.k; ++kk) {
        const int64_t b = kk / p_.block;
        const int value = nibble(q + j * row_bytes, kk);
        const int zero = zeros ? nibble(zeros + j * zero_bytes, b) : 8;
        w[kk * p_.n + j] = static_cast<float>(value - zero) * scales[j * p_.blocks + b];
      }
    for (int64_t i = 0; i < p_.rows; ++i)
      for (int64_t j = 0; j < p_.n; ++j) {
        double acc = bias ? bias[j] : 0.0;
        for (int64_t kk = 0; kk < p_.k; ++kk)
          acc += static_cast<double>(a[i * p_.k + kk]) * w[kk * p_.n + j];
        y[i * p_.n + j] = static_cast<float>(acc);
      }
  }

 private:
  Params p_;
};

std::unique_ptr<Kernel> make_matmul_nbits(const NodeInfo& info) {
  MatMulNBitsKernel::Params p;
  p.k = info.node.attr_int("K", 0);
  p.n = info.node.attr_int("N", 0);
  p.block = info.node.attr_int("block_size", 0);
  if (info.node.attr_int("bits", 4) != 4 || p.k < 1 || p.n < 1 || p.block < 16 ||
      info.has_input(4) || info.in_dtypes[0] != BP_DTYPE_FLOAT32 ||
      (info.has_input(3) && info.in_dtypes[3] != BP_DTYPE_UINT8))
    fail(info, "only 4-bit weights of float32 A, without g_idx, with uint8 zero points run whole");
  p.blocks = (p.k + p.block - 1) / p.block;
  const Dims& a = info.in_shapes[0];
  if (a.empty() || a.back() != p.k) fail(info, "A does not end in K");
  p.rows = 1;
  for (size_t d = 0; d + 1 < a.size(); ++d) p.rows *= a[d];
  p.zero_points = info.has_input(3);
  p.bias = info.has_input(5);
  const int64_t want[] = {
      0, p.n * p.blocks * p.block / 2, p.n * p.blocks, p.n * ((p.blocks + 1) / 2), 0, p.n};
  for (size_t i = 1; i < 6; ++i)
    if (i != 4 && info.has_input(i) && numel(info.in_shapes[i]) != want[i])
      fail(info, "input " + std::to_string(i) + " has " + std::to_string(numel(info.in_shapes[i])) +
                     " elements, expected " + std::to_string(want[i]));
  return std::make_unique<MatMulNBitsKernel>(p);
}

// ONNX Runtime's GatherBlockQuantized as the import keeps it (ir/ops_nn.cpp):
// each gathered row of the 4-bit table dequantized, (q - zero) * scale, as
// ONNX Runtime computes it.
template <class I>
class GatherBlockQuantizedKernel final : public Kernel {
 public:
  struct Params {
    int64_t rows = 0, width = 0, block = 0, blocks = 0, count = 0;
    bool zero_points = false;
    std::string who;
  };
  explicit GatherBlockQuantizedKernel(Params p) : p_(std::move(p)) {}
  void run(const void* const* in, void* const* out, void*) const override {
    const auto* q = static_cast<const uint8_t*>(in[0]);
    const auto* indices = static_cast<const I*>(in[1]);
    const auto* scales = static_cast<const float*>(in[2]);
    const auto* zeros = p_.zero_points ? static_cast<const uint8_t*>(in[3]) : nullptr;
    auto* y = static_cast<float*>(out[0]);
    const int64_t row_bytes = p_.width / 2, zero_bytes = (p_.blocks + 1) / 2;
    for (int64_t j = 0; j < p_.count; ++j) {
      int64_t r = indices[j];
      if (r < 0) r += p_.rows;
      if (r < 0 || r >= p_.rows)
        throw sdk::invalid(p_.who + ": index " + std::to_string(indices[j]) +
                           " is out of range for a table of " + std::to_string(p_.rows) + " rows");
      for (int64_t k = 0; k < p_.width; ++k) {
        const int64_t b = k / p_.block;
        const int value = nibble(q + r * row_bytes, k);
        const int zero = zeros ? nibble(zeros + r * zero_bytes, b) : 8;
        y[j * p_.width + k] = static_cast<float>(value - zero) * scales[r * p_.blocks + b];
      }
    }
  }

 private:
  Params p_;
};

std::unique_ptr<Kernel> make_gather_block_quantized(const NodeInfo& info) {
  require_inputs(info, 3);
  typename GatherBlockQuantizedKernel<int64_t>::Params p;
  p.block = info.node.attr_int("block_size", 128);
  const Dims& data = info.in_shapes[0];
  if (info.node.attr_int("bits", 4) != 4 || info.node.attr_int("gather_axis", 0) != 0 ||
      info.node.attr_int("quantize_axis", 1) != 1 || data.size() != 2 || p.block < 16 ||
      info.in_dtypes[0] != BP_DTYPE_UINT8 || info.in_dtypes[2] != BP_DTYPE_FLOAT32 ||
      (info.has_input(3) && info.in_dtypes[3] != BP_DTYPE_UINT8))
    fail(info,
         "only uint8 tables packing 4 bits, gathered on axis 0, with float32 scales run whole");
  p.rows = data[0];
  p.width = 2 * data[1];
  p.blocks = (p.width + p.block - 1) / p.block;
  p.count = numel(info.in_shapes[1]);
  p.zero_points = info.has_input(3);
  p.who = info.describe();
  if (info.in_shapes[2] != Dims{p.rows, p.blocks} ||
      (p.zero_points && info.in_shapes[3] != Dims{p.rows, (p.blocks + 1) / 2}))
    fail(info, "scales or zero points do not match the table's rows and blocks");
  Dims y = info.in_shapes[1];
  y.push_back(p.width);
  if (y != info.out_shapes[0]) fail(info, "the output is not the indices' shape and the row width");
  if (info.in_dtypes[1] == BP_DTYPE_INT64)
    return std::make_unique<GatherBlockQuantizedKernel<int64_t>>(std::move(p));
  if (info.in_dtypes[1] != BP_DTYPE_INT32) fail(info, "indices must be int32 or int64");
  typename GatherBlockQuantizedKernel<int32_t>::Params p32{
      p.rows, p.width, p.block, p.blocks, p.count, p.zero_points, p.who};
  return std::make_unique<GatherBlockQuantizedKernel<int32_t>>(std::move(p32));
}

// Integer matmul (MatMulInteger, QLinearMatMul): numpy broadcasting over
// batch dims; operand element (i, k) of batch b is at a_off[b] + i*K + k.
class IntMatMulKernel final : public Kernel {
 public:
  struct Params {
    int64_t m = 0, n = 0, k = 0;
    std::vector<int64_t> a_off, b_off;
    int64_t a_numel = 0, b_numel = 0;
    bp_dtype_t a_dt = BP_DTYPE_UINT8, b_dt = BP_DTYPE_UINT8, y_dt = BP_DTYPE_INT32;
    size_t a, b, a_zp, b_zp;  // input indices
    QuantParam azp, bzp;
    bool requantize = false;
    QuantParam a_scale, b_scale;  // QLinearMatMul; y_scale / y_zero_point are inputs 6, 7
  };
  explicit IntMatMulKernel(Params p) : p_(std::move(p)) {}
  size_t scratch_bytes() const override {
    return static_cast<size_t>(p_.a_numel + p_.b_numel) * sizeof(int32_t);
  }
  void run(const void* const* in, void* const* out, void* scratch) const override {
    int32_t* a = static_cast<int32_t*>(scratch);
    int32_t* b = a + p_.a_numel;
    // Zero points per row of A / per column of B (or one each).
    for (int64_t i = 0; i < p_.a_numel; ++i)
      a[i] = load_int(p_.a_dt, in[p_.a], i) - p_.azp.zero(in, p_.a_zp, (i / p_.k) % p_.m);
    for (int64_t i = 0; i < p_.b_numel; ++i)
      b[i] = load_int(p_.b_dt, in[p_.b], i) - p_.bzp.zero(in, p_.b_zp, i % p_.n);
    const float y_scale = p_.requantize ? *static_cast<const float*>(in[6]) : 1.0f;
    const int32_t y_zp = p_.requantize ? load_int(p_.y_dt, in[7], 0) : 0;
    for (size_t bt = 0; bt < p_.a_off.size(); ++bt) {
      for (int64_t i = 0; i < p_.m; ++i) {
        for (int64_t j = 0; j < p_.n; ++j) {
          int64_t acc = 0;
          for (int64_t kk = 0; kk < p_.k; ++kk)
            acc += static_cast<int64_t>(a[p_.a_off[bt] + i * p_.k + kk]) *
                   b[p_.b_off[bt] + kk * p_.n + j];
          const int64_t at = (static_cast<int64_t>(bt) * p_.m + i) * p_.n + j;
          if (!p_.requantize) {
            static_cast<int32_t*>(out[0])[at] = static_cast<int32_t>(acc);
          } else {
            const double s = static_cast<double>(p_.a_scale.scale(in[1], i)) *
                             p_.b_scale.scale(in[4], j) / y_scale;
            store_q8(p_.y_dt, out[0], at, static_cast<double>(acc) * s, y_zp);
          }
        }
      }
    }
  }

 private:
  Params p_;
};

std::unique_ptr<Kernel> make_int_matmul(const NodeInfo& info, bool qlinear) {
  IntMatMulKernel::Params p;
  p.requantize = qlinear;
  p.a = 0;
  p.b = qlinear ? 3 : 1;
  p.a_zp = qlinear ? 2 : 2;
  p.b_zp = qlinear ? 5 : 3;
  require_inputs(info, qlinear ? 8 : 2);
  p.a_dt = info.in_dtypes[p.a];
  p.b_dt = info.in_dtypes[p.b];
  p.y_dt = info.out_dtypes[0];
  if (!is_q8(p.a_dt) || !is_q8(p.b_dt)) fail(info, "A and B must be int8 or uint8");
  if (qlinear ? !is_q8(p.y_dt) : p.y_dt != BP_DTYPE_INT32) fail(info, "wrong output dtype");
  Dims a = info.in_shapes[p.a], b = info.in_shapes[p.b];
  if (a.empty() || b.empty()) fail(info, "operands must have rank >= 1");
  p.a_numel = numel(a);
  p.b_numel = numel(b);
  // 1-D operands promoted (assigned, not insert/push_back: GCC 12 -O3
  // reports a false -Warray-bounds on those here).
  if (a.size() == 1) a = Dims{1, a[0]};
  if (b.size() == 1) b = Dims{b[0], 1};
  p.m = a[a.size() - 2];
  p.k = a.back();
  p.n = b.back();
  if (b[b.size() - 2] != p.k) fail(info, "inner dims differ");
  // Batch dims broadcast: walk the output's batch index, mapping to each operand.
  const size_t na = a.size() - 2, nb = b.size() - 2, nbatch = std::max(na, nb);
  Dims batch(nbatch);
  for (size_t d = 0; d < nbatch; ++d) {
    const int64_t da = d < nbatch - na ? 1 : a[d - (nbatch - na)];
    const int64_t db = d < nbatch - nb ? 1 : b[d - (nbatch - nb)];
    if (da != db && da != 1 && db != 1) fail(info, "batch dims do not broadcast");
    batch[d] = std::max(da, db);
  }
  const int64_t total = numel(batch);
  // Sized first, not push_back: GCC 12 -O3 reports a false -Warray-bounds there.
  p.a_off.assign(static_cast<size_t>(total), 0);
  p.b_off.assign(static_cast<size_t>(total), 0);
  for (int64_t t = 0; t < total; ++t) {
    int64_t rem = t, ao = 0, bo = 0, as = p.m * p.k, bs = p.k * p.n;
    for (size_t j = 0; j < nbatch; ++j) {
      const size_t d = nbatch - 1 - j;
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      if (j < na) {
        const int64_t dim = a[a.size() - 3 - j];
        if (dim != 1) ao += idx * as;
        as *= dim;
      }
      if (j < nb) {
        const int64_t dim = b[b.size() - 3 - j];
        if (dim != 1) bo += idx * bs;
        bs *= dim;
      }
    }
    p.a_off[static_cast<size_t>(t)] = ao;
    p.b_off[static_cast<size_t>(t)] = bo;
  }
  if (numel(info.out_shapes[0]) != total * p.m * p.n) fail(info, "output shape does not match");
  p.azp = QuantParam::of(info, p.a_zp, p.m, "a_zero_point");
  p.bzp = QuantParam::of(info, p.b_zp, p.n, "b_zero_point");
  if ((p.azp.present && p.azp.dt != p.a_dt) || (p.bzp.present && p.bzp.dt != p.b_dt))
    fail(info, "a zero point's dtype differs from its operand's");
  if (qlinear) {
    p.a_scale = QuantParam::of(info, 1, p.m, "a_scale");
    p.b_scale = QuantParam::of(info, 4, p.n, "b_scale");
    (void)QuantParam::of(info, 6, -1, "y_scale");
    (void)QuantParam::of(info, 7, -1, "y_zero_point");
    if (info.in_dtypes[7] != p.y_dt) fail(info, "y_zero_point's dtype differs from y's");
  }
  return std::make_unique<IntMatMulKernel>(std::move(p));
}

// -------------------------------------------------------------------- conv

// ConvInteger / QLinearConv over 1 to 3 spatial dims (missing ones are 1).
class IntConvKernel final : public Kernel {
 public:
  struct Params {
    int64_t batch = 0, c = 0, m = 0, group = 1;
    int64_t in[3] = {1, 1, 1}, k[3] = {1, 1, 1}, out[3] = {1, 1, 1};
    int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0};
    int64_t x_numel = 0, w_numel = 0;
    bp_dtype_t x_dt = BP_DTYPE_UINT8, w_dt = BP_DTYPE_UINT8, y_dt = BP_DTYPE_INT32;
    size_t x, w, x_zp, w_zp;
    QuantParam xzp, wzp;
    bool requantize = false, has_bias = false;
    QuantParam w_scale;
  };
  explicit IntConvKernel(Params p) : p_(p) {}
  size_t scratch_bytes() const override {
    return static_cast<size_t>(p_.x_numel + p_.w_numel) * sizeof(int32_t);
  }
  void run(const void* const* in, void* const* out, void* scratch) const override {
    int32_t* x = static_cast<int32_t*>(scratch);
    int32_t* w = x + p_.x_numel;
    const int32_t xz = p_.xzp.zero(in, p_.x_zp, 0);
    for (int64_t i = 0; i < p_.x_numel; ++i) x[i] = load_int(p_.x_dt, in[p_.x], i) - xz;
    const int64_t per_m = p_.w_numel / p_.m;
    for (int64_t i = 0; i < p_.w_numel; ++i)
      w[i] = load_int(p_.w_dt, in[p_.w], i) - p_.wzp.zero(in, p_.w_zp, i / per_m);
    const int64_t cg = p_.c / p_.group, mg = p_.m / p_.group;
    const int64_t in_sp = p_.in[0] * p_.in[1] * p_.in[2],
                  out_sp = p_.out[0] * p_.out[1] * p_.out[2];
    const float x_scale = p_.requantize ? *static_cast<const float*>(in[1]) : 1.0f;
    const float y_scale = p_.requantize ? *static_cast<const float*>(in[6]) : 1.0f;
    const int32_t y_zp = p_.requantize ? load_int(p_.y_dt, in[7], 0) : 0;
    const int32_t* bias = p_.has_bias ? static_cast<const int32_t*>(in[8]) : nullptr;
    for (int64_t n = 0; n < p_.batch; ++n) {
      for (int64_t m = 0; m < p_.m; ++m) {
        const int64_t g = m / mg;
        for (int64_t o = 0; o < out_sp; ++o) {
          const int64_t o0 = o / (p_.out[1] * p_.out[2]), o1 = (o / p_.out[2]) % p_.out[1],
                        o2 = o % p_.out[2];
          int64_t acc = bias != nullptr ? bias[m] : 0;
          for (int64_t ci = 0; ci < cg; ++ci) {
            const int32_t* xs = x + (n * p_.c + g * cg + ci) * in_sp;
            const int32_t* ws = w + (m * cg + ci) * p_.k[0] * p_.k[1] * p_.k[2];
            for (int64_t a = 0; a < p_.k[0]; ++a) {
              const int64_t i0 = o0 * p_.stride[0] + a * p_.dil[0] - p_.pad[0];
              if (i0 < 0 || i0 >= p_.in[0]) continue;  // padding: 0 after the zero point
              for (int64_t b = 0; b < p_.k[1]; ++b) {
                const int64_t i1 = o1 * p_.stride[1] + b * p_.dil[1] - p_.pad[1];
                if (i1 < 0 || i1 >= p_.in[1]) continue;
                for (int64_t cc = 0; cc < p_.k[2]; ++cc) {
                  const int64_t i2 = o2 * p_.stride[2] + cc * p_.dil[2] - p_.pad[2];
                  if (i2 < 0 || i2 >= p_.in[2]) continue;
                  acc += static_cast<int64_t>(xs[(i0 * p_.in[1] + i1) * p_.in[2] + i2]) *
                         ws[(a * p_.k[1] + b) * p_.k[2] + cc];
                }
              }
            }
          }
          const int64_t at = (n * p_.m + m) * out_sp + o;
          if (!p_.requantize) {
            static_cast<int32_t*>(out[0])[at] = static_cast<int32_t>(acc);
          } else {
            const double s = static_cast<double>(x_scale) * p_.w_scale.scale(in[4], m) / y_scale;
            store_q8(p_.y_dt, out[0], at, static_cast<double>(acc) * s, y_zp);
          }
        }
      }
    }
  }

 private:
  Params p_;
};

std::unique_ptr<Kernel> make_int_conv(const NodeInfo& info, bool qlinear) {
  IntConvKernel::Params p;
  p.requantize = qlinear;
  p.x = 0;
  p.w = qlinear ? 3 : 1;
  p.x_zp = 2;
  p.w_zp = qlinear ? 5 : 3;
  require_inputs(info, qlinear ? 8 : 2);
  p.x_dt = info.in_dtypes[p.x];
  p.w_dt = info.in_dtypes[p.w];
  p.y_dt = info.out_dtypes[0];
  if (!is_q8(p.x_dt) || !is_q8(p.w_dt)) fail(info, "x and w must be int8 or uint8");
  if (qlinear ? !is_q8(p.y_dt) : p.y_dt != BP_DTYPE_INT32) fail(info, "wrong output dtype");
  const Dims& x = info.in_shapes[p.x];
  const Dims& w = info.in_shapes[p.w];
  const Dims& y = info.out_shapes[0];
  const size_t n = x.size() >= 2 ? x.size() - 2 : 0;
  if (n < 1 || w.size() != x.size() || y.size() != x.size())
    fail(info, "x " + dims_str(x) + ", w " + dims_str(w) + " and y must be [N, C, spatial...]");
  if (n > 3)
    throw sdk::unsupported(info.describe() + ": " + std::to_string(n) +
                           " spatial dims (at most 3 are supported)");
  p.batch = x[0];
  p.c = x[1];
  p.m = w[0];
  p.group = info.node.attr_int("group", 1);
  if (p.group < 1 || p.c != w[1] * p.group || p.m % p.group != 0 || y[1] != p.m || y[0] != x[0])
    fail(info, "group " + std::to_string(p.group) + " does not fit x " + dims_str(x) + " and w " +
                   dims_str(w));
  const Dims in_sp(x.begin() + 2, x.end()), k_sp(w.begin() + 2, w.end()),
      out_sp(y.begin() + 2, y.end());
  const Dims strides = info.node.attr_ints("strides", Dims(n, 1));
  const Dims dil = info.node.attr_ints("dilations", Dims(n, 1));
  if (strides.size() != n || dil.size() != n) fail(info, "strides/dilations have the wrong length");
  const std::vector<int64_t> pads =
      nn::resolve_window_pads(info, in_sp, k_sp, strides, dil, out_sp);
  const size_t off = 3 - n;  // leading unit dims
  for (size_t d = 0; d < n; ++d) {
    if (strides[d] < 1 || dil[d] < 1) fail(info, "strides and dilations must be >= 1");
    p.in[off + d] = in_sp[d];
    p.k[off + d] = k_sp[d];
    p.out[off + d] = out_sp[d];
    p.stride[off + d] = strides[d];
    p.dil[off + d] = dil[d];
    p.pad[off + d] = pads[d];
    const int64_t want =
        (in_sp[d] + pads[d] + pads[d + n] - dil[d] * (k_sp[d] - 1) - 1) / strides[d] + 1;
    if (want != out_sp[d]) fail(info, "output " + dims_str(y) + " does not match the window");
  }
  p.x_numel = numel(x);
  p.w_numel = numel(w);
  p.xzp = QuantParam::of(info, p.x_zp, -1, "x_zero_point");
  p.wzp = QuantParam::of(info, p.w_zp, p.m, "w_zero_point");
  if ((p.xzp.present && p.xzp.dt != p.x_dt) || (p.wzp.present && p.wzp.dt != p.w_dt))
    fail(info, "a zero point's dtype differs from its operand's");
  if (qlinear) {
    (void)QuantParam::of(info, 1, -1, "x_scale");
    p.w_scale = QuantParam::of(info, 4, p.m, "w_scale");
    (void)QuantParam::of(info, 6, -1, "y_scale");
    (void)QuantParam::of(info, 7, -1, "y_zero_point");
    if (info.in_dtypes[7] != p.y_dt) fail(info, "y_zero_point's dtype differs from y's");
    p.has_bias = info.has_input(8);
    if (p.has_bias && (info.in_dtypes[8] != BP_DTYPE_INT32 || info.in_shapes[8] != Dims{p.m}))
      fail(info, "bias must be int32 [" + std::to_string(p.m) + "]");
  }
  return std::make_unique<IntConvKernel>(p);
}

}  // namespace

void register_quant_kernels(KernelRegistry& registry) {
  registry.add("QuantizeLinear", quantize_factory(false));
  registry.add("DequantizeLinear", quantize_factory(true));
  registry.add("DynamicQuantizeLinear", make_dynamic_quantize);
  registry.add("MatMulNBits", make_matmul_nbits);
  registry.add("GatherBlockQuantized", make_gather_block_quantized);
  registry.add("MatMulInteger", [](const NodeInfo& i) { return make_int_matmul(i, false); });
  registry.add("QLinearMatMul", [](const NodeInfo& i) { return make_int_matmul(i, true); });
  registry.add("ConvInteger", [](const NodeInfo& i) { return make_int_conv(i, false); });
  registry.add("QLinearConv", [](const NodeInfo& i) { return make_int_conv(i, true); });
}

}  // namespace backplane::cpuref
