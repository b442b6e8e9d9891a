// kernels_nn_resize.cpp — Resize, opsets 10 to 17 (float32): modes nearest,
// linear and cubic; every coordinate_transformation_mode of those opsets.
//
// The factory turns each axis into a table: for every output position, the
// input offsets it reads and their weights (1 tap for nearest, 2 for linear, 4
// for cubic; 1 for an axis that maps output i to input i exactly) and whether
// it falls outside the tf_crop_and_resize region. run() then sums the product
// of those taps. Coordinates are computed in float, as ONNX Runtime does, so
// rounding ties in nearest mode land on the same pixel.
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace nn {
namespace {

constexpr size_t kMaxRank = 8;
constexpr int64_t kMaxOuterTaps = 64;  // taps combined over all axes but the last

struct AxisTaps {
  int64_t taps = 1;
  std::vector<int64_t> offset;   // [out * taps], in elements of X
  std::vector<float> weight;     // [out * taps]
  std::vector<uint8_t> outside;  // [out]: 1 = extrapolation_value
};

class ResizeKernel final : public Kernel {
 public:
  ResizeKernel(Dims out_shape, std::vector<AxisTaps> axes, float extrapolation_value)
      : out_(std::move(out_shape)), axes_(std::move(axes)), extrapolation_(extrapolation_value) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    float* y = static_cast<float*>(outputs[0]);
    const size_t r = out_.size();
    const AxisTaps& last = axes_[r - 1];
    const int64_t width = out_[r - 1];
    int64_t outer = 1;
    for (size_t d = 0; d + 1 < r; ++d) outer *= out_[d];

    int64_t idx[kMaxRank] = {};
    int64_t combo_off[kMaxOuterTaps];
    float combo_w[kMaxOuterTaps];
    for (int64_t row = 0; row < outer; ++row) {
      // Offsets and weights of every tap combination over the outer axes.
      int64_t combos = 1;
      combo_off[0] = 0;
      combo_w[0] = 1.0f;
      bool outside = false;
      for (size_t d = 0; d + 1 < r; ++d) {
        const AxisTaps& a = axes_[d];
        const int64_t o = idx[d];
        outside = outside || a.outside[o] != 0;
        for (int64_t c = combos; c-- > 0;) {
          const int64_t off = combo_off[c];
          const float w = combo_w[c];
          for (int64_t t = a.taps; t-- > 0;) {
            combo_off[c * a.taps + t] = off + a.offset[o * a.taps + t];
            combo_w[c * a.taps + t] = w * a.weight[o * a.taps + t];
          }
        }
        combos *= a.taps;
      }

      for (int64_t ow = 0; ow < width; ++ow, ++y) {
        if (outside || last.outside[ow] != 0) {
          *y = extrapolation_;
          continue;
        }
        const int64_t* toff = &last.offset[ow * last.taps];
        const float* tw = &last.weight[ow * last.taps];
        float acc = 0.0f;
        for (int64_t c = 0; c < combos; ++c) {
          const float* xc = x + combo_off[c];
          float part = 0.0f;
          for (int64_t t = 0; t < last.taps; ++t) part += tw[t] * xc[toff[t]];
          acc += combo_w[c] * part;
        }
        *y = acc;
      }

      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < out_[d]) break;
        idx[d] = 0;
      }
    }
  }

 private:
  Dims out_;
  std::vector<AxisTaps> axes_;
  float extrapolation_;
};

enum class Coord {
  kHalfPixel,
  kHalfPixelSymmetric,
  kPytorchHalfPixel,
  kAlignCorners,
  kAsymmetric,
  kTfHalfPixelForNn,
  kTfCropAndResize
};
enum class Nearest { kRoundPreferFloor, kRoundPreferCeil, kFloor, kCeil, kSimple };

// Input coordinate of output position x along one axis.
float original_coordinate(Coord mode, float x, float scale, float len_out, float len_in,
                          float roi_start, float roi_end) {
  switch (mode) {
    case Coord::kHalfPixel:
      return (x + 0.5f) / scale - 0.5f;
    case Coord::kHalfPixelSymmetric: {
      const float adjustment = len_out / (scale * len_in);
      const float offset = len_in / 2 * (1 - adjustment);
      return offset + (x + 0.5f) / scale - 0.5f;
    }
    case Coord::kPytorchHalfPixel:
      return len_out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
    case Coord::kAlignCorners:
      return len_out == 1 ? 0.0f : x * (len_in - 1) / (len_out - 1);
    case Coord::kAsymmetric:
      return x / scale;
    case Coord::kTfHalfPixelForNn:
      return (x + 0.5f) / scale;
    case Coord::kTfCropAndResize:
      return static_cast<float>(len_out > 1 ? roi_start * (len_in - 1) +
                                                  static_cast<double>(x) * (roi_end - roi_start) *
                                                      (len_in - 1) / (len_out - 1)
                                            : 0.5 * (roi_start + roi_end) * (len_in - 1));
  }
  return 0.0f;
}

int64_t nearest_pixel(Nearest mode, float v, bool downsampling) {
  switch (mode) {
    case Nearest::kRoundPreferFloor:
      return v == std::floor(v) + 0.5f ? static_cast<int64_t>(std::floor(v))
                                       : static_cast<int64_t>(std::round(v));
    case Nearest::kRoundPreferCeil:
      return v == std::floor(v) + 0.5f ? static_cast<int64_t>(std::ceil(v))
                                       : static_cast<int64_t>(std::round(v));
    case Nearest::kFloor:
      return static_cast<int64_t>(std::floor(v));
    case Nearest::kCeil:
      return static_cast<int64_t>(std::ceil(v));
    case Nearest::kSimple:  // Resize-10: no nearest_mode attribute yet
      return downsampling ? static_cast<int64_t>(std::ceil(v)) : static_cast<int64_t>(v);
  }
  return 0;
}

// Keys' cubic convolution weights of the taps at floor(x)-1 .. floor(x)+2,
// t = x - floor(x).
void cubic_weights(float a, float t, float w[4]) {
  const float d0 = t + 1, d1 = t, d2 = 1 - t, d3 = 2 - t;
  w[0] = ((a * d0 - 5 * a) * d0 + 8 * a) * d0 - 4 * a;
  w[1] = ((a + 2) * d1 - (a + 3)) * d1 * d1 + 1;
  w[2] = ((a + 2) * d2 - (a + 3)) * d2 * d2 + 1;
  w[3] = ((a * d3 - 5 * a) * d3 + 8 * a) * d3 - 4 * a;
}

struct ResizeParams {
  std::string mode;
  Coord coord;
  Nearest nearest;
  float cubic_a;
  bool exclude_outside;
  // align_corners maps through the *unrounded* output length when scales
  // were given (length_in * scale), as the ONNX reference does.
  bool scales_given = false;
};

AxisTaps build_axis(const ResizeParams& p, int64_t len_in, int64_t len_out, float scale,
                    float roi_start, float roi_end, int64_t stride) {
  AxisTaps a;
  a.taps = p.mode == "nearest" ? 1 : p.mode == "linear" ? 2 : 4;
  const float fin = static_cast<float>(len_in), fout = static_cast<float>(len_out);
  const float fout_coords = p.coord == Coord::kAlignCorners && p.scales_given ? fin * scale : fout;
  const int64_t last = len_in - 1;
  for (int64_t o = 0; o < len_out; ++o) {
    const float v = original_coordinate(p.coord, static_cast<float>(o), scale, fout_coords, fin,
                                        roi_start, roi_end);
    const bool outside = p.coord == Coord::kTfCropAndResize && (v < 0 || v > fin - 1);
    a.outside.push_back(outside ? 1 : 0);
    int64_t idx[4] = {0, 0, 0, 0};
    float w[4] = {1, 0, 0, 0};
    if (len_in > 0 && !outside) {
      if (a.taps == 1) {
        idx[0] = std::clamp<int64_t>(nearest_pixel(p.nearest, v, scale < 1), 0, last);
      } else if (a.taps == 2) {
        const float c = std::clamp(v, 0.0f, fin - 1);
        idx[0] = static_cast<int64_t>(c);
        idx[1] = std::min(idx[0] + 1, last);
        w[1] = c - static_cast<float>(idx[0]);
        w[0] = 1 - w[1];
      } else {
        const float f = std::floor(v);
        cubic_weights(p.cubic_a, v - f, w);
        float sum = 0.0f;
        for (int t = 0; t < 4; ++t) {
          const int64_t i = static_cast<int64_t>(f) - 1 + t;
          if (p.exclude_outside && (i < 0 || i > last)) w[t] = 0.0f;
          sum += w[t];
          idx[t] = std::clamp<int64_t>(i, 0, last);
        }
        if (p.exclude_outside && sum != 0.0f)
          for (float& wt : w) wt /= sum;
      }
    }
    for (int64_t t = 0; t < a.taps; ++t) {
      a.offset.push_back(idx[t] * stride);
      a.weight.push_back(w[t]);
    }
  }
  // An axis where every output reads exactly one input with weight 1 needs one tap.
  bool single = true;
  for (int64_t o = 0; o < len_out && single; ++o) {
    int nonzero = 0;
    for (int64_t t = 0; t < a.taps; ++t) {
      const float w = a.weight[o * a.taps + t];
      if (w != 0.0f) nonzero += (w == 1.0f) ? 1 : 2;
    }
    single = nonzero <= 1;
  }
  if (single && a.taps > 1) {
    AxisTaps s;
    s.outside = a.outside;
    for (int64_t o = 0; o < len_out; ++o) {
      int64_t t = 0;
      while (t + 1 < a.taps && a.weight[o * a.taps + t] == 0.0f) ++t;
      s.offset.push_back(a.offset[o * a.taps + t]);
      s.weight.push_back(a.weight[o * a.taps + t]);
    }
    return s;
  }
  return a;
}

// Input X, its shape and the output's.
void check_resize_shapes(const NodeInfo& info) {
  if (!info.has_input(0)) fail_invalid(info, "needs input X");
  require_float32(info, {0}, {0});
  const Dims& x = info.in_shapes[0];
  const Dims& y = info.out_shapes[0];
  const size_t rank = x.size();
  if (rank == 0 || y.size() != rank)
    fail_invalid(info, "output shape " + dims_str(y) + " does not fit input " + dims_str(x));
  if (rank > kMaxRank)
    fail_unsupported(info, "rank above " + std::to_string(kMaxRank) + " is not supported");
  for (size_t d = 0; d < rank; ++d)
    if (x[d] == 0 && y[d] != 0) fail_invalid(info, "cannot resize an empty dim to a non-empty one");
}

// The attributes: mode, coordinate transformation, nearest rounding, cubic.
ResizeParams resize_params(const NodeInfo& info) {
  const int64_t opset = info.node.opset();
  if (info.node.has_attr("axes")) fail_unsupported(info, "the 'axes' attribute is not supported");
  if (info.node.attr_int("antialias", 0) != 0)
    fail_unsupported(info, "antialias=1 is not supported");
  if (info.node.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    fail_unsupported(info, "keep_aspect_ratio_policy other than 'stretch' is not supported");

  ResizeParams p;
  p.mode = info.node.attr_string("mode", "nearest");
  if (p.mode != "nearest" && p.mode != "linear" && p.mode != "cubic")
    fail_unsupported(info, "mode '" + p.mode + "' is not supported");
  const std::string coord =
      opset >= 11 ? info.node.attr_string("coordinate_transformation_mode", "half_pixel")
                  : "asymmetric";
  if (coord == "half_pixel") p.coord = Coord::kHalfPixel;
  else if (coord == "half_pixel_symmetric") p.coord = Coord::kHalfPixelSymmetric;
  else if (coord == "pytorch_half_pixel") p.coord = Coord::kPytorchHalfPixel;
  else if (coord == "align_corners") p.coord = Coord::kAlignCorners;
  else if (coord == "asymmetric") p.coord = Coord::kAsymmetric;
  else if (coord == "tf_half_pixel_for_nn") p.coord = Coord::kTfHalfPixelForNn;
  else if (coord == "tf_crop_and_resize") p.coord = Coord::kTfCropAndResize;
  else fail_unsupported(info, "coordinate_transformation_mode '" + coord + "' is not supported");
  const std::string nearest =
      opset >= 11 ? info.node.attr_string("nearest_mode", "round_prefer_floor") : "simple";
  if (nearest == "round_prefer_floor") p.nearest = Nearest::kRoundPreferFloor;
  else if (nearest == "round_prefer_ceil") p.nearest = Nearest::kRoundPreferCeil;
  else if (nearest == "floor") p.nearest = Nearest::kFloor;
  else if (nearest == "ceil") p.nearest = Nearest::kCeil;
  else if (nearest == "simple") p.nearest = Nearest::kSimple;
  else fail_unsupported(info, "nearest_mode '" + nearest + "' is not supported");
  p.cubic_a = info.node.attr_float("cubic_coeff_a", -0.75f);
  p.exclude_outside = info.node.attr_int("exclude_outside", 0) != 0;
  return p;
}

// Per axis: the constant scales input, or the output/input size ratio.
std::vector<float> resize_scales(const NodeInfo& info, ResizeParams& p) {
  const int64_t opset = info.node.opset();
  const Dims& x = info.in_shapes[0];
  const Dims& y = info.out_shapes[0];
  const size_t rank = x.size();
  // Resize-10: (X, scales). Resize-11+: (X, roi, scales, sizes).
  const size_t scales_at = opset >= 11 ? 2 : 1;
  const bool has_scales =
      info.has_input(scales_at) && sdk::element_count(info.in_shapes[scales_at]) > 0;
  std::vector<float> scales(rank);
  if (has_scales) {
    if (info.in_dtypes[scales_at] != BP_DTYPE_FLOAT32) fail_invalid(info, "scales must be float32");
    if (sdk::element_count(info.in_shapes[scales_at]) != static_cast<int64_t>(rank))
      fail_invalid(info, "scales must have " + std::to_string(rank) + " values");
    const void* data = info.constant(scales_at);
    if (data == nullptr)
      fail_unsupported(info,
                       "scales must be a constant (the interpolation depends on their values)");
    std::memcpy(scales.data(), data, rank * sizeof(float));
    for (float s : scales)
      if (!(s > 0)) fail_invalid(info, "scales must be positive");
    p.scales_given = true;
  } else {
    if (opset < 11 || !info.has_input(3)) fail_invalid(info, "needs either scales or sizes");
    for (size_t d = 0; d < rank; ++d)
      scales[d] = x[d] == 0 ? 1.0f : static_cast<float>(y[d]) / static_cast<float>(x[d]);
  }
  return scales;
}

// The region of interest (starts, then ends): the whole input unless
// tf_crop_and_resize gives one.
std::vector<float> resize_roi(const NodeInfo& info, const ResizeParams& p, size_t rank) {
  std::vector<float> roi(2 * rank, 0.0f);
  for (size_t d = 0; d < rank; ++d) roi[rank + d] = 1.0f;
  if (p.coord == Coord::kTfCropAndResize) {
    if (!info.has_input(1) ||
        sdk::element_count(info.in_shapes[1]) != static_cast<int64_t>(2 * rank))
      fail_invalid(info,
                   "tf_crop_and_resize needs roi with " + std::to_string(2 * rank) + " values");
    if (info.in_dtypes[1] != BP_DTYPE_FLOAT32) fail_unsupported(info, "roi must be float32");
    if (info.constant(1) == nullptr) fail_unsupported(info, "roi must be a constant");
    std::memcpy(roi.data(), info.constant(1), 2 * rank * sizeof(float));
  }
  return roi;
}

std::unique_ptr<Kernel> make_resize(const NodeInfo& info) {
  check_resize_shapes(info);
  const Dims& x = info.in_shapes[0];
  const Dims& y = info.out_shapes[0];
  const size_t rank = x.size();
  ResizeParams p = resize_params(info);
  const std::vector<float> scales = resize_scales(info, p);
  const std::vector<float> roi = resize_roi(info, p, rank);

  std::vector<AxisTaps> axes;
  int64_t stride = 1;
  std::vector<int64_t> strides(rank);
  for (size_t d = rank; d-- > 0;) {
    strides[d] = stride;
    stride *= x[d];
  }
  int64_t outer_taps = 1;
  for (size_t d = 0; d < rank; ++d) {
    axes.push_back(build_axis(p, x[d], y[d], scales[d], roi[d], roi[rank + d], strides[d]));
    if (d + 1 < rank) outer_taps *= axes.back().taps;
  }
  if (outer_taps > kMaxOuterTaps)
    fail_unsupported(info, "interpolating along this many axes at once is not supported");
  return std::make_unique<ResizeKernel>(y, std::move(axes),
                                        info.node.attr_float("extrapolation_value", 0.0f));
}

}  // namespace

// roi and scales plan the interpolation: data inputs (kernel.hpp). Resize-10
// has scales at 1, Resize-11+ roi at 1 and scales at 2 ('sizes' only gives the
// output shape, which the factory already has).
void register_resize(KernelRegistry& registry) { registry.add("Resize", make_resize, {1, 2}); }

}  // namespace nn
}  // namespace backplane::cpuref
