// kernels_nn_conv.cpp — Conv and ConvTranspose (1-D, 2-D and 3-D, float32).
//
// Both lower to GEMM. Conv: im2col gathers every kernel tap of every input
// channel of a group into a [Cg*KS, OS] matrix, then Y_g = W_g * col.
// ConvTranspose: col = W_g^T * X_g ([Mg*KS, IS]), then col2im scatter-adds each
// tap into the output. 1-D and 2-D problems are handled as 3-D ones whose
// leading spatial dims have size 1, so there is one code path to get right.
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace nn {
namespace {

// Positions o in [0, n_o) with 0 <= o*stride + offset < n_target form the
// range [*lo, *hi).
void valid_range(int64_t n_o, int64_t stride, int64_t offset, int64_t n_target, int64_t* lo,
                 int64_t* hi) {
  *lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  *hi = n_target - 1 - offset < 0 ? 0 : floor_div(n_target - 1 - offset, stride) + 1;
  *lo = std::min(*lo, n_o);
  *hi = std::clamp(*hi, *lo, n_o);
}

// Spatial geometry of one convolution, extended to three dims.
struct Geometry {
  int64_t in[3] = {1, 1, 1};   // spatial dims of the convolution's input X
  int64_t out[3] = {1, 1, 1};  // spatial dims of the output Y
  int64_t k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1};
  int64_t dil[3] = {1, 1, 1};
  int64_t pad[3] = {0, 0, 0};  // begin pads; end pads only shape `out`
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

// Attributes common to Conv and ConvTranspose, checked against the weight.
struct WindowAttrs {
  Dims kernel, strides, dilations;
  int64_t group = 1;
};

WindowAttrs read_window_attrs(const NodeInfo& info, const Dims& w) {
  const size_t r = w.size() - 2;
  WindowAttrs a;
  a.kernel.assign(w.begin() + 2, w.end());
  if (info.node.has_attr("kernel_shape") && info.node.attr_ints("kernel_shape") != a.kernel)
    fail_invalid(info, "kernel_shape " + dims_str(info.node.attr_ints("kernel_shape")) +
                           " does not match the weight shape " + dims_str(w));
  a.strides = info.node.attr_ints("strides", Dims(r, 1));
  a.dilations = info.node.attr_ints("dilations", Dims(r, 1));
  if (a.strides.size() != r || a.dilations.size() != r)
    fail_invalid(info, "strides/dilations must have " + std::to_string(r) + " values");
  for (size_t d = 0; d < r; ++d)
    if (a.strides[d] < 1 || a.dilations[d] < 1)
      fail_invalid(info, "strides and dilations must be >= 1");
  a.group = info.node.attr_int("group", 1);
  if (a.group < 1) fail_invalid(info, "group must be >= 1");
  return a;
}

void check_rank(const NodeInfo& info) {
  if (info.in_shapes.size() < 2 || !info.has_input(0) || !info.has_input(1))
    fail_invalid(info, "needs inputs X and W");
  const Dims& x = info.in_shapes[0];
  const Dims& w = info.in_shapes[1];
  if (x.size() < 3 || x.size() > 5)
    fail_unsupported(info, "input rank " + std::to_string(x.size()) +
                               " is not supported (only 1-D, 2-D and 3-D spatial)");
  if (w.size() != x.size())
    fail_invalid(info,
                 "weight shape " + dims_str(w) + " does not match input shape " + dims_str(x));
  if (info.out_shapes.empty() || info.out_shapes[0].size() != x.size())
    fail_invalid(info, "output rank does not match input rank");
}

// ---------------------------------------------------------------------------
// Conv
// ---------------------------------------------------------------------------

class ConvKernel final : public Kernel {
 public:
  ConvKernel(Geometry g, int64_t batch, int64_t channels, int64_t filters, int64_t group,
             bool has_bias)
      : g_(g), batch_(batch), c_(channels), m_(filters), group_(group), has_bias_(has_bias) {
    cg_ = c_ / group_;
    mg_ = m_ / group_;
    kg_ = cg_ * g_.k_size();
    // A 1x1x1, stride 1, unpadded convolution reads X as the col matrix.
    pointwise_ = g_.k_size() == 1;
    for (int d = 0; d < 3; ++d)
      pointwise_ = pointwise_ && g_.stride[d] == 1 && g_.pad[d] == 0 && g_.in[d] == g_.out[d];
  }

  size_t scratch_bytes() const override {
    return pointwise_ ? 0 : static_cast<size_t>(kg_ * g_.out_size()) * sizeof(float);
  }

  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* w = static_cast<const float*>(inputs[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(inputs[2]) : nullptr;
    float* y = static_cast<float*>(outputs[0]);
    float* col = static_cast<float*>(scratch);
    const int64_t is = g_.in_size(), os = g_.out_size();

    for (int64_t n = 0; n < batch_; ++n) {
      for (int64_t gi = 0; gi < group_; ++gi) {
        const float* xg = x + (n * c_ + gi * cg_) * is;
        const float* b_mat = xg;
        if (!pointwise_) {
          im2col(xg, col);
          b_mat = col;
        }
        float* yg = y + (n * m_ + gi * mg_) * os;
        gemm(mg_, os, kg_, 1.0f, w + gi * mg_ * kg_, kg_, 1, b_mat, os, 1, yg, os, false);
        if (bias != nullptr)
          for (int64_t m = 0; m < mg_; ++m) {
            const float bm = bias[gi * mg_ + m];
            float* row = yg + m * os;
            for (int64_t p = 0; p < os; ++p) row[p] += bm;
          }
      }
    }
  }

 private:
  // col[(c, kd, kh, kw), (od, oh, ow)] = x[c, od*s - p + kd*d, ...] or 0 in the padding.
  void im2col(const float* x, float* col) const {
    const Geometry& g = g_;
    const int64_t plane = g.out[1] * g.out[2];
    float* dst = col;
    for (int64_t c = 0; c < cg_; ++c)
      for (int64_t kd = 0; kd < g.k[0]; ++kd)
        for (int64_t kh = 0; kh < g.k[1]; ++kh)
          for (int64_t kw = 0; kw < g.k[2]; ++kw) {
            const int64_t off_w = kw * g.dil[2] - g.pad[2];
            int64_t w_lo, w_hi;
            valid_range(g.out[2], g.stride[2], off_w, g.in[2], &w_lo, &w_hi);
            for (int64_t od = 0; od < g.out[0]; ++od) {
              const int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dil[0];
              if (id < 0 || id >= g.in[0]) {
                std::fill(dst, dst + plane, 0.0f);
                dst += plane;
                continue;
              }
              for (int64_t oh = 0; oh < g.out[1]; ++oh, dst += g.out[2]) {
                const int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dil[1];
                if (ih < 0 || ih >= g.in[1]) {
                  std::fill(dst, dst + g.out[2], 0.0f);
                  continue;
                }
                const float* src = x + ((c * g.in[0] + id) * g.in[1] + ih) * g.in[2];
                std::fill(dst, dst + w_lo, 0.0f);
                if (g.stride[2] == 1 && w_hi > w_lo)
                  std::memcpy(dst + w_lo, src + w_lo + off_w, sizeof(float) * (w_hi - w_lo));
                else
                  for (int64_t ow = w_lo; ow < w_hi; ++ow) dst[ow] = src[ow * g.stride[2] + off_w];
                std::fill(dst + w_hi, dst + g.out[2], 0.0f);
              }
            }
          }
  }

  Geometry g_;
  int64_t batch_, c_, m_, group_;
  bool has_bias_;
  int64_t cg_ = 0, mg_ = 0, kg_ = 0;
  bool pointwise_ = false;
};

std::unique_ptr<Kernel> make_conv(const NodeInfo& info) {
  check_rank(info);
  require_float32(info, {0, 1, 2}, {0});
  const Dims& x = info.in_shapes[0];
  const Dims& w = info.in_shapes[1];
  const Dims& y = info.out_shapes[0];
  const size_t r = x.size() - 2;
  const WindowAttrs a = read_window_attrs(info, w);
  const int64_t channels = x[1], filters = w[0];
  if (channels % a.group != 0 || filters % a.group != 0 || w[1] * a.group != channels)
    fail_invalid(info, "weight " + dims_str(w) + " and group " + std::to_string(a.group) +
                           " do not fit input " + dims_str(x));
  if (y[0] != x[0] || y[1] != filters)
    fail_invalid(info, "output shape " + dims_str(y) + " does not match input and weight");
  if (info.has_input(2) && (info.in_shapes[2].size() != 1 || info.in_shapes[2][0] != filters))
    fail_invalid(info, "bias shape " + dims_str(info.in_shapes[2]) + " is not [" +
                           std::to_string(filters) + "]");

  const Dims in(x.begin() + 2, x.end()), out(y.begin() + 2, y.end());
  const Dims pads = resolve_window_pads(info, in, a.kernel, a.strides, a.dilations, out);
  Geometry g;
  const size_t lead = 3 - r;  // 1-D and 2-D problems sit in the last dims
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = (a.kernel[d] - 1) * a.dilations[d] + 1;
    const int64_t expected = floor_div(in[d] + pads[d] + pads[d + r] - span, a.strides[d]) + 1;
    if (expected != out[d])
      fail_invalid(info, "output shape " + dims_str(y) + " does not match the convolution of " +
                             dims_str(x) + " (spatial dim " + std::to_string(d) + ": expected " +
                             std::to_string(expected) + ")");
    g.in[lead + d] = in[d];
    g.out[lead + d] = out[d];
    g.k[lead + d] = a.kernel[d];
    g.stride[lead + d] = a.strides[d];
    g.dil[lead + d] = a.dilations[d];
    g.pad[lead + d] = pads[d];
  }
  return std::make_unique<ConvKernel>(g, x[0], channels, filters, a.group, info.has_input(2));
}

// ---------------------------------------------------------------------------
// ConvTranspose
// ---------------------------------------------------------------------------

class ConvTransposeKernel final : public Kernel {
 public:
  // g.in: spatial dims of X; g.out: spatial dims of Y.
  ConvTransposeKernel(Geometry g, int64_t batch, int64_t channels, int64_t filters, int64_t group,
                      bool has_bias)
      : g_(g), batch_(batch), c_(channels), m_(filters), group_(group), has_bias_(has_bias) {
    cg_ = c_ / group_;
    mg_ = m_ / group_;
  }

  size_t scratch_bytes() const override {
    return static_cast<size_t>(mg_ * g_.k_size() * g_.in_size()) * sizeof(float);
  }

  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* w = static_cast<const float*>(inputs[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(inputs[2]) : nullptr;
    float* y = static_cast<float*>(outputs[0]);
    float* col = static_cast<float*>(scratch);
    const int64_t is = g_.in_size(), os = g_.out_size(), ks = g_.k_size();
    const int64_t rows = mg_ * ks;  // rows of col: (m, kd, kh, kw)

    for (int64_t n = 0; n < batch_; ++n) {
      for (int64_t gi = 0; gi < group_; ++gi) {
        const float* xg = x + (n * c_ + gi * cg_) * is;
        // W_g is [Cg, Mg*KS] row-major; col = W_g^T * X_g.
        const float* wg = w + gi * cg_ * rows;
        gemm(rows, is, cg_, 1.0f, wg, 1, rows, xg, is, 1, col, is, false);
        float* yg = y + (n * m_ + gi * mg_) * os;
        for (int64_t m = 0; m < mg_; ++m) {
          const float b = bias != nullptr ? bias[gi * mg_ + m] : 0.0f;
          std::fill(yg + m * os, yg + (m + 1) * os, b);
        }
        col2im(col, yg);
      }
    }
  }

 private:
  // y[m, i*s - p + k*d] += col[(m, k), i] over every tap k and input position i.
  void col2im(const float* col, float* y) const {
    const Geometry& g = g_;
    const float* src = col;
    for (int64_t m = 0; m < mg_; ++m) {
      float* ym = y + m * g.out_size();
      for (int64_t kd = 0; kd < g.k[0]; ++kd)
        for (int64_t kh = 0; kh < g.k[1]; ++kh)
          for (int64_t kw = 0; kw < g.k[2]; ++kw) {
            const int64_t off_w = kw * g.dil[2] - g.pad[2];
            int64_t w_lo, w_hi;
            valid_range(g.in[2], g.stride[2], off_w, g.out[2], &w_lo, &w_hi);
            for (int64_t id = 0; id < g.in[0]; ++id) {
              const int64_t od = id * g.stride[0] - g.pad[0] + kd * g.dil[0];
              for (int64_t ih = 0; ih < g.in[1]; ++ih, src += g.in[2]) {
                const int64_t oh = ih * g.stride[1] - g.pad[1] + kh * g.dil[1];
                if (od < 0 || od >= g.out[0] || oh < 0 || oh >= g.out[1]) continue;
                float* dst = ym + (od * g.out[1] + oh) * g.out[2];
                for (int64_t iw = w_lo; iw < w_hi; ++iw) dst[iw * g.stride[2] + off_w] += src[iw];
              }
            }
          }
    }
  }

  Geometry g_;
  int64_t batch_, c_, m_, group_;
  bool has_bias_;
  int64_t cg_ = 0, mg_ = 0;
};

std::unique_ptr<Kernel> make_conv_transpose(const NodeInfo& info) {
  check_rank(info);
  require_float32(info, {0, 1, 2}, {0});
  const Dims& x = info.in_shapes[0];
  const Dims& w = info.in_shapes[1];
  const Dims& y = info.out_shapes[0];
  const size_t r = x.size() - 2;
  const WindowAttrs a = read_window_attrs(info, w);
  const int64_t channels = x[1];
  if (w[0] != channels || channels % a.group != 0)
    fail_invalid(info, "weight " + dims_str(w) + " and group " + std::to_string(a.group) +
                           " do not fit input " + dims_str(x));
  const int64_t filters = w[1] * a.group;
  if (y[0] != x[0] || y[1] != filters)
    fail_invalid(info, "output shape " + dims_str(y) + " does not match input and weight");
  if (info.has_input(2) && (info.in_shapes[2].size() != 1 || info.in_shapes[2][0] != filters))
    fail_invalid(info, "bias shape " + dims_str(info.in_shapes[2]) + " is not [" +
                           std::to_string(filters) + "]");
  const Dims output_padding = info.node.attr_ints("output_padding", Dims(r, 0));
  if (output_padding.size() != r)
    fail_invalid(info, "output_padding must have " + std::to_string(r) + " values");

  // The full (unpadded) output is stride*(in-1) + output_padding + span; the
  // pads say how much of it is cut at each end. With auto_pad SAME_* or an
  // explicit output_shape the total cut follows from the (already inferred)
  // output shape and is split as the ONNX spec says: SAME_UPPER puts the
  // larger half at the end, otherwise at the beginning. Python floor division
  // keeps a negative total (output_shape larger than the full output) exact:
  // the extra output is at the end and holds only the bias.
  const std::string auto_pad = info.node.attr_string("auto_pad", "NOTSET");
  const bool from_output_shape = info.node.has_attr("output_shape");
  Dims pads(2 * r, 0);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER" || from_output_shape) {
    for (size_t d = 0; d < r; ++d) {
      const int64_t span = (a.kernel[d] - 1) * a.dilations[d] + 1;
      const int64_t total = a.strides[d] * (x[2 + d] - 1) + output_padding[d] + span - y[2 + d];
      const int64_t half = floor_div(total, 2);
      pads[d] = auto_pad == "SAME_UPPER" ? half : total - half;
      pads[d + r] = total - pads[d];
    }
  } else if (auto_pad == "NOTSET") {
    pads = info.node.attr_ints("pads", pads);
    if (pads.size() != 2 * r)
      fail_invalid(info, "pads must have " + std::to_string(2 * r) + " values");
  } else if (auto_pad != "VALID") {
    fail_unsupported(info, "auto_pad '" + auto_pad + "' is not supported");
  }

  Geometry g;
  const size_t lead = 3 - r;
  for (size_t d = 0; d < r; ++d) {
    const int64_t span = (a.kernel[d] - 1) * a.dilations[d] + 1;
    const int64_t expected =
        a.strides[d] * (x[2 + d] - 1) + output_padding[d] + span - pads[d] - pads[d + r];
    if (expected != y[2 + d])
      fail_invalid(info, "output shape " + dims_str(y) +
                             " does not match the transposed convolution of " + dims_str(x) +
                             " (spatial dim " + std::to_string(d) + ": expected " +
                             std::to_string(expected) + ")");
    g.in[lead + d] = x[2 + d];
    g.out[lead + d] = y[2 + d];
    g.k[lead + d] = a.kernel[d];
    g.stride[lead + d] = a.strides[d];
    g.dil[lead + d] = a.dilations[d];
    g.pad[lead + d] = pads[d];
  }
  return std::make_unique<ConvTransposeKernel>(g, x[0], channels, filters, a.group,
                                               info.has_input(2));
}

}  // namespace

void register_conv(KernelRegistry& registry) {
  registry.add("Conv", make_conv);
  registry.add("ConvTranspose", make_conv_transpose);
}

}  // namespace nn
}  // namespace backplane::cpuref
