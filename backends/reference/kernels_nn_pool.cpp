// kernels_nn_pool.cpp — MaxPool (with Indices), AveragePool, GlobalAveragePool,
// GlobalMaxPool (float32; MaxPool and AveragePool also float64, MaxPool also
// int8 and uint8; 1-D, 2-D and 3-D spatial).
//
// Windows are described per spatial axis and per output position by the range
// of kernel taps that land inside the input and the number that land inside
// the padded input (the AveragePool divisor with count_include_pad). Taps past
// the end padding, which only ceil_mode creates, count for neither, as in ONNX
// Runtime. As in kernels_nn_conv.cpp, 1-D and 2-D problems are 3-D ones with
// leading spatial dims of size 1.
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace backplane::cpuref {
namespace nn {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// One spatial axis of a pooling window, tabulated per output position.
struct Axis {
  int64_t in = 1, out = 1, dil = 1;
  std::vector<int64_t> start;  // input position of tap 0 (may be negative)
  std::vector<int64_t> k_lo;   // taps [k_lo, k_hi) read the input
  std::vector<int64_t> k_hi;
  std::vector<int64_t> padded;  // taps inside the padded input

  // A trivial axis: size 1, one tap.
  Axis() : start{0}, k_lo{0}, k_hi{1}, padded{1} {}
  Axis(int64_t in_size, int64_t out_size, int64_t kernel, int64_t stride, int64_t dilation,
       int64_t pad_begin, int64_t pad_end)
      : in(in_size), out(out_size), dil(dilation) {
    for (int64_t o = 0; o < out; ++o) {
      const int64_t s = o * stride - pad_begin;
      // tap k reads position s + k*dil
      const int64_t lo = std::clamp<int64_t>(ceil_div(-s, dil), 0, kernel);
      const int64_t hi = std::clamp<int64_t>(floor_div(in - 1 - s, dil) + 1, lo, kernel);
      const int64_t plo = std::clamp<int64_t>(ceil_div(-pad_begin - s, dil), 0, kernel);
      const int64_t phi =
          std::clamp<int64_t>(floor_div(in + pad_end - 1 - s, dil) + 1, plo, kernel);
      start.push_back(s);
      k_lo.push_back(lo);
      k_hi.push_back(hi);
      padded.push_back(phi - plo);
    }
  }
};

struct PoolGeometry {
  int64_t planes = 0;  // N*C
  Axis axis[3];
  int64_t in_size() const { return axis[0].in * axis[1].in * axis[2].in; }
  int64_t out_size() const { return axis[0].out * axis[1].out * axis[2].out; }
};

enum class PoolMode { kMax, kAverage };

// T: float32 or float64 (both modes), int8 or uint8 (MaxPool only, ONNX
// allows no integer AveragePool).
template <class T>
class PoolKernel final : public Kernel {
 public:
  using Mode = PoolMode;
  PoolKernel(PoolGeometry g, Mode mode, bool count_include_pad, bool with_indices,
             bool column_major)
      : g_(std::move(g)),
        mode_(mode),
        count_include_pad_(count_include_pad),
        with_indices_(with_indices),
        column_major_(column_major) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    int64_t* indices = with_indices_ ? static_cast<int64_t*>(outputs[1]) : nullptr;
    const Axis &ad = g_.axis[0], &ah = g_.axis[1], &aw = g_.axis[2];
    const int64_t is = g_.in_size();
    const int64_t os = ad.out * ah.out * aw.out;
    // Planes are independent: split them across the host's threads (API 1.5)
    // in parts of some 16k outputs at least.
    const size_t grain =
        static_cast<size_t>(std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(os, 1)));
    sdk::parallel_for(static_cast<size_t>(g_.planes), grain, [&](size_t begin, size_t end) {
      run_planes(x, y, indices, static_cast<int64_t>(begin), static_cast<int64_t>(end), is, os);
    });
  }

 private:
  void run_planes(const T* x, T* y, int64_t* indices, int64_t p0, int64_t p1, int64_t is,
                  int64_t os) const {
    const Axis &ad = g_.axis[0], &ah = g_.axis[1], &aw = g_.axis[2];
    y += p0 * os;
    if (indices != nullptr) indices += p0 * os;
    for (int64_t p = p0; p < p1; ++p) {
      const T* xp = x + p * is;
      for (int64_t od = 0; od < ad.out; ++od)
        for (int64_t oh = 0; oh < ah.out; ++oh)
          for (int64_t ow = 0; ow < aw.out; ++ow) {
            if (mode_ == Mode::kMax) {
              T best = std::numeric_limits<T>::lowest();
              int64_t best_at = -1;
              for (int64_t kd = ad.k_lo[od]; kd < ad.k_hi[od]; ++kd) {
                const int64_t id = ad.start[od] + kd * ad.dil;
                for (int64_t kh = ah.k_lo[oh]; kh < ah.k_hi[oh]; ++kh) {
                  const int64_t ih = ah.start[oh] + kh * ah.dil;
                  for (int64_t kw = aw.k_lo[ow]; kw < aw.k_hi[ow]; ++kw) {
                    const int64_t iw = aw.start[ow] + kw * aw.dil;
                    const T v = xp[(id * ah.in + ih) * aw.in + iw];
                    if (v > best || best_at < 0) {
                      best = v;
                      best_at = column_major_ ? id + ih * ad.in + iw * ad.in * ah.in
                                              : (id * ah.in + ih) * aw.in + iw;
                    }
                  }
                }
              }
              *y++ = best;
              if (indices != nullptr) *indices++ = best_at < 0 ? -1 : p * is + best_at;
            } else if constexpr (std::is_floating_point_v<T>) {
              T sum = 0;
              for (int64_t kd = ad.k_lo[od]; kd < ad.k_hi[od]; ++kd) {
                const int64_t id = ad.start[od] + kd * ad.dil;
                for (int64_t kh = ah.k_lo[oh]; kh < ah.k_hi[oh]; ++kh) {
                  const int64_t ih = ah.start[oh] + kh * ah.dil;
                  const T* row = xp + (id * ah.in + ih) * aw.in;
                  for (int64_t kw = aw.k_lo[ow]; kw < aw.k_hi[ow]; ++kw)
                    sum += row[aw.start[ow] + kw * aw.dil];
                }
              }
              const int64_t count =
                  count_include_pad_ ? ad.padded[od] * ah.padded[oh] * aw.padded[ow]
                                     : (ad.k_hi[od] - ad.k_lo[od]) * (ah.k_hi[oh] - ah.k_lo[oh]) *
                                           (aw.k_hi[ow] - aw.k_lo[ow]);
              *y++ = sum / static_cast<T>(count);
            }
          }
    }
  }

 private:
  PoolGeometry g_;
  Mode mode_;
  bool count_include_pad_, with_indices_, column_major_;
};

std::unique_ptr<Kernel> make_pool(const NodeInfo& info, PoolMode mode) {
  if (!info.has_input(0)) fail_invalid(info, "needs input X");
  const bp_dtype_t dt = info.in_dtypes[0];
  if (info.out_dtypes.empty() || info.out_dtypes[0] != dt)
    fail_invalid(info, "output dtype differs from the input's");
  const bool integer = dt == BP_DTYPE_INT8 || dt == BP_DTYPE_UINT8;
  if (!(dt == BP_DTYPE_FLOAT32 || dt == BP_DTYPE_FLOAT64 || (integer && mode == PoolMode::kMax)))
    fail_unsupported(info, std::string("input dtype ") + sdk::dtype_name(dt) +
                               " is not supported (float32, float64" +
                               (mode == PoolMode::kMax ? ", int8, uint8)" : ")"));
  const Dims& x = info.in_shapes[0];
  const Dims& y = info.out_shapes[0];
  if (x.size() < 3 || x.size() > 5)
    fail_unsupported(info, "input rank " + std::to_string(x.size()) +
                               " is not supported (only 1-D, 2-D and 3-D spatial)");
  if (y.size() != x.size() || y[0] != x[0] || y[1] != x[1])
    fail_invalid(info, "output shape " + dims_str(y) + " does not fit input " + dims_str(x));
  const size_t r = x.size() - 2;
  if (!info.node.has_attr("kernel_shape")) fail_invalid(info, "kernel_shape is required");
  const Dims kernel = info.node.attr_ints("kernel_shape");
  const Dims strides = info.node.attr_ints("strides", Dims(r, 1));
  const Dims dilations = info.node.attr_ints("dilations", Dims(r, 1));
  if (kernel.size() != r || strides.size() != r || dilations.size() != r)
    fail_invalid(info, "kernel_shape/strides/dilations must have " + std::to_string(r) + " values");
  for (size_t d = 0; d < r; ++d)
    if (kernel[d] < 1 || strides[d] < 1 || dilations[d] < 1)
      fail_invalid(info, "kernel_shape, strides and dilations must be >= 1");
  const bool ceil_mode = info.node.attr_int("ceil_mode", 0) != 0;

  const bool with_indices = mode == PoolMode::kMax && has_output(info, 1);
  int64_t storage_order = 0;
  if (mode == PoolMode::kMax) {
    storage_order = info.node.attr_int("storage_order", 0);
    if (storage_order != 0 && storage_order != 1)
      fail_invalid(info, "storage_order must be 0 or 1");
    if (with_indices && info.out_dtypes[1] != BP_DTYPE_INT64)
      fail_invalid(info, "Indices output must be int64");
  }

  const Dims in(x.begin() + 2, x.end()), out(y.begin() + 2, y.end());
  const Dims pads = resolve_window_pads(info, in, kernel, strides, dilations, out);
  PoolGeometry g;
  g.planes = x[0] * x[1];
  const size_t lead = 3 - r;
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = (kernel[d] - 1) * dilations[d] + 1;
    const int64_t room = in[d] + pads[d] + pads[d + r] - span;
    // ceil_mode may or may not drop a last window that starts in the end
    // padding (ONNX changed this over time); accept both.
    const int64_t lo = floor_div(room, strides[d]) + 1;
    const int64_t hi = ceil_mode ? ceil_div(room, strides[d]) + 1 : lo;
    const int64_t min_ok = ceil_mode ? std::max(lo, hi - 1) : lo;
    if (room < 0 || out[d] < min_ok || out[d] > hi)
      fail_invalid(info, "output shape " + dims_str(y) + " does not match pooling " + dims_str(x) +
                             " (spatial dim " + std::to_string(d) + ": expected " +
                             std::to_string(ceil_mode ? hi : lo) + ")");
    g.axis[lead + d] =
        Axis(in[d], out[d], kernel[d], strides[d], dilations[d], pads[d], pads[d + r]);
  }
  const bool count_include_pad = info.node.attr_int("count_include_pad", 0) != 0;
  const bool cm = storage_order == 1;
  switch (dt) {
    case BP_DTYPE_FLOAT64:
      return std::make_unique<PoolKernel<double>>(std::move(g), mode, count_include_pad,
                                                  with_indices, cm);
    case BP_DTYPE_INT8:
      return std::make_unique<PoolKernel<int8_t>>(std::move(g), mode, false, with_indices, cm);
    case BP_DTYPE_UINT8:
      return std::make_unique<PoolKernel<uint8_t>>(std::move(g), mode, false, with_indices, cm);
    default:
      return std::make_unique<PoolKernel<float>>(std::move(g), mode, count_include_pad,
                                                 with_indices, cm);
  }
}

// ---------------------------------------------------------------------------
// GlobalAveragePool / GlobalMaxPool: one value per (n, c) plane.
// ---------------------------------------------------------------------------

class GlobalPoolKernel final : public Kernel {
 public:
  GlobalPoolKernel(int64_t planes, int64_t plane_size, bool max)
      : planes_(planes), size_(plane_size), max_(max) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    for (int64_t p = 0; p < planes_; ++p, x += size_) {
      if (max_) {
        float best = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < size_; ++i) best = std::max(best, x[i]);
        y[p] = best;
      } else {
        double sum = 0.0;
        for (int64_t i = 0; i < size_; ++i) sum += x[i];
        y[p] = static_cast<float>(sum / static_cast<double>(size_));
      }
    }
  }

 private:
  int64_t planes_, size_;
  bool max_;
};

std::unique_ptr<Kernel> make_global_pool(const NodeInfo& info, bool max) {
  if (!info.has_input(0)) fail_invalid(info, "needs input X");
  require_float32(info, {0}, {0});
  const Dims& x = info.in_shapes[0];
  if (x.size() < 2) fail_invalid(info, "input " + dims_str(x) + " must have rank >= 2");
  const int64_t planes = x[0] * x[1];
  if (sdk::element_count(info.out_shapes[0]) != planes)
    fail_invalid(info, "output shape " + dims_str(info.out_shapes[0]) + " does not fit input " +
                           dims_str(x));
  return std::make_unique<GlobalPoolKernel>(planes,
                                            planes == 0 ? 0 : sdk::element_count(x) / planes, max);
}

}  // namespace

void register_pool(KernelRegistry& registry) {
  registry.add("MaxPool", [](const NodeInfo& info) { return make_pool(info, PoolMode::kMax); });
  registry.add("AveragePool",
               [](const NodeInfo& info) { return make_pool(info, PoolMode::kAverage); });
  registry.add("GlobalAveragePool",
               [](const NodeInfo& info) { return make_global_pool(info, false); });
  registry.add("GlobalMaxPool", [](const NodeInfo& info) { return make_global_pool(info, true); });
}

}  // namespace nn
}  // namespace backplane::cpuref
