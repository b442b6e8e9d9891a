// kernels_nn_resize.cpp — Resize, opsets 10 to 18 (float32): modes nearest,
// linear and cubic; every coordinate_transformation_mode of those opsets; from
// opset 18 the axes attribute, keep_aspect_ratio_policy and antialias (linear
// and cubic filters stretched by 1/scale when downsampling).
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

// Input coordinate of output position x along one axis, in R: float, or
// double where the coordinate's fraction becomes a linear weight.
template <class R>
R original_coordinate(Coord mode, R x, R scale, R len_out, R len_in, R roi_start, R roi_end) {
  const R half = R(0.5);
  switch (mode) {
    case Coord::kHalfPixel:
      return (x + half) / scale - half;
    case Coord::kHalfPixelSymmetric: {
      const R adjustment = len_out / (scale * len_in);
      const R offset = len_in / 2 * (1 - adjustment);
      return offset + (x + half) / scale - half;
    }
    case Coord::kPytorchHalfPixel:
      return len_out > 1 ? (x + half) / scale - half : R(0);
    case Coord::kAlignCorners:
      return len_out == 1 ? R(0) : x * (len_in - 1) / (len_out - 1);
    case Coord::kAsymmetric:
      return x / scale;
    case Coord::kTfHalfPixelForNn:
      return (x + half) / scale;
    case Coord::kTfCropAndResize:
      return static_cast<R>(len_out > 1 ? roi_start * (len_in - 1) +
                                              static_cast<double>(x) * (roi_end - roi_start) *
                                                  (len_in - 1) / (len_out - 1)
                                        : 0.5 * (roi_start + roi_end) * (len_in - 1));
  }
  return R(0);
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
  bool antialias = false;
};

// Antialiased linear or cubic taps for a downsampling axis (scale < 1): the
// filter is stretched by 1/scale, so each output reads `taps` inputs around
// its source coordinate x, at base + start + j (base = floor(x), or x - 1
// when x is integral, as the ONNX reference picks its neighbours), weighted
// by filter((position - x) * scale) and normalised; positions beyond the
// edges read the edge pixel unless exclude_outside drops them.
AxisTaps build_axis_antialias(const ResizeParams& p, int64_t len_in, int64_t len_out, float scale,
                              float roi_start, float roi_end, int64_t stride) {
  const bool cubic = p.mode == "cubic";
  const double s = scale;
  const int64_t start = static_cast<int64_t>(std::floor((cubic ? -2.0 : -1.0) / s)) + 1;
  AxisTaps a;
  a.taps = 2 - 2 * start;
  const float fin = static_cast<float>(len_in), fout = static_cast<float>(len_out);
  const float fout_coords = p.coord == Coord::kAlignCorners && p.scales_given ? fin * scale : fout;
  auto filter = [&](double t) {
    t = std::fabs(t);
    if (!cubic) return std::max(0.0, 1.0 - t);
    const double A = p.cubic_a;
    if (t <= 1) return ((A + 2) * t - (A + 3)) * t * t + 1;
    if (t < 2) return ((A * t - 5 * A) * t + 8 * A) * t - 4 * A;
    return 0.0;
  };
  std::vector<double> w(static_cast<size_t>(a.taps));
  for (int64_t o = 0; o < len_out; ++o) {
    const float v = original_coordinate<float>(p.coord, static_cast<float>(o), scale, fout_coords,
                                               fin, roi_start, roi_end);
    const bool outside = p.coord == Coord::kTfCropAndResize && (v < 0 || v > fin - 1);
    a.outside.push_back(outside ? 1 : 0);
    const double x = v;
    const double base = std::floor(x) == x ? x - 1 : std::floor(x);
    double sum = 0.0;
    for (int64_t j = 0; j < a.taps; ++j) {
      const double pos = base + static_cast<double>(start + j);
      w[j] = filter((pos - x) * s);
      if (p.exclude_outside && (pos < 0 || pos > fin - 1)) w[j] = 0.0;
      sum += w[j];
    }
    for (int64_t j = 0; j < a.taps; ++j) {
      const int64_t pos = static_cast<int64_t>(base) + start + j;
      const int64_t idx = len_in > 0 ? std::clamp<int64_t>(pos, 0, len_in - 1) : 0;
      a.offset.push_back(idx * stride);
      a.weight.push_back(static_cast<float>(sum != 0.0 && !outside ? w[j] / sum : 0.0));
    }
  }
  return a;
}

AxisTaps build_axis(const ResizeParams& p, int64_t len_in, int64_t len_out, float scale,
                    float roi_start, float roi_end, int64_t stride) {
  if (p.antialias && p.mode != "nearest" && scale < 1.0f && len_in > 0)
    return build_axis_antialias(p, len_in, len_out, scale, roi_start, roi_end, stride);
  AxisTaps a;
  a.taps = p.mode == "nearest" ? 1 : p.mode == "linear" ? 2 : 4;
  const float fin = static_cast<float>(len_in), fout = static_cast<float>(len_out);
  const float fout_coords = p.coord == Coord::kAlignCorners && p.scales_given ? fin * scale : fout;
  const int64_t last = len_in - 1;
  for (int64_t o = 0; o < len_out; ++o) {
    const float v = original_coordinate<float>(p.coord, static_cast<float>(o), scale, fout_coords,
                                               fin, roi_start, roi_end);
    const bool outside = p.coord == Coord::kTfCropAndResize && (v < 0 || v > fin - 1);
    a.outside.push_back(outside ? 1 : 0);
    int64_t idx[4] = {0, 0, 0, 0};
    float w[4] = {1, 0, 0, 0};
    if (len_in > 0 && !outside) {
      if (a.taps == 1) {
        idx[0] = std::clamp<int64_t>(nearest_pixel(p.nearest, v, scale < 1), 0, last);
      } else if (a.taps == 2) {
        // The coordinate in double: in float, (x + 0.5) / scale errs by up
        // to half an ulp of x (4e-6 of a pixel at x = 128), which the
        // weights pass on times the step between neighbouring inputs.
        const double c =
            std::clamp(original_coordinate<double>(p.coord, static_cast<double>(o), scale,
                                                   fout_coords, fin, roi_start, roi_end),
                       0.0, static_cast<double>(fin) - 1);
        idx[0] = static_cast<int64_t>(c);
        idx[1] = std::min(idx[0] + 1, last);
        const double frac = c - static_cast<double>(idx[0]);
        w[1] = static_cast<float>(frac);
        w[0] = static_cast<float>(1 - frac);
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
  ResizeParams p;
  p.antialias = opset >= 18 && info.node.attr_int("antialias", 0) != 0;
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

// The axes scales, sizes and roi refer to: the 'axes' attribute (opset 18),
// else every axis.
std::vector<size_t> resize_axes(const NodeInfo& info, size_t rank) {
  std::vector<size_t> axes;
  if (info.node.opset() >= 18 && info.node.has_attr("axes")) {
    std::vector<bool> seen(rank, false);
    for (int64_t a : info.node.attr_ints("axes")) {
      const size_t d = static_cast<size_t>(normalize_axis(a, static_cast<int64_t>(rank), info));
      if (seen[d]) fail_invalid(info, "axes repeat axis " + std::to_string(a));
      seen[d] = true;
      axes.push_back(d);
    }
  } else {
    for (size_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  return axes;
}

// Per axis: the constant scales input, or the output/input size ratio, or
// (keep_aspect_ratio_policy, opset 18) one ratio for every listed axis.
std::vector<float> resize_scales(const NodeInfo& info, ResizeParams& p,
                                 const std::vector<size_t>& axes) {
  const int64_t opset = info.node.opset();
  const Dims& x = info.in_shapes[0];
  const Dims& y = info.out_shapes[0];
  const size_t rank = x.size(), n = axes.size();
  // Resize-10: (X, scales). Resize-11+: (X, roi, scales, sizes).
  const size_t scales_at = opset >= 11 ? 2 : 1;
  const bool has_scales =
      info.has_input(scales_at) && sdk::element_count(info.in_shapes[scales_at]) > 0;
  std::vector<float> scales(rank, 1.0f);
  const std::string policy =
      opset >= 18 ? info.node.attr_string("keep_aspect_ratio_policy", "stretch") : "stretch";
  if (has_scales) {
    if (info.in_dtypes[scales_at] != BP_DTYPE_FLOAT32) fail_invalid(info, "scales must be float32");
    if (sdk::element_count(info.in_shapes[scales_at]) != static_cast<int64_t>(n))
      fail_invalid(info, "scales must have " + std::to_string(n) + " values");
    const void* data = info.constant(scales_at);
    if (data == nullptr)
      fail_unsupported(info,
                       "scales must be a constant (the interpolation depends on their values)");
    std::vector<float> given(n);
    std::memcpy(given.data(), data, n * sizeof(float));
    for (size_t k = 0; k < n; ++k) {
      if (!(given[k] > 0)) fail_invalid(info, "scales must be positive");
      scales[axes[k]] = given[k];
    }
    p.scales_given = true;
  } else if (policy != "stretch") {
    if (policy != "not_larger" && policy != "not_smaller")
      fail_unsupported(info, "keep_aspect_ratio_policy '" + policy + "' is not supported");
    if (!info.has_input(3) || sdk::element_count(info.in_shapes[3]) != static_cast<int64_t>(n) ||
        info.in_dtypes[3] != BP_DTYPE_INT64)
      fail_invalid(info, "sizes must hold " + std::to_string(n) + " int64 values");
    const int64_t* sizes = static_cast<const int64_t*>(info.constant(3));
    if (sizes == nullptr)
      fail_unsupported(info, "sizes must be a constant with keep_aspect_ratio_policy");
    float common = policy == "not_larger" ? INFINITY : 0.0f;
    for (size_t k = 0; k < n; ++k) {
      if (x[axes[k]] == 0) fail_invalid(info, "keep_aspect_ratio_policy needs non-empty dims");
      const float r =
          static_cast<float>(static_cast<double>(sizes[k]) / static_cast<double>(x[axes[k]]));
      common = policy == "not_larger" ? std::min(common, r) : std::max(common, r);
    }
    for (size_t k = 0; k < n; ++k) scales[axes[k]] = common;
    // The coordinates map through length_in * scale, as with given scales.
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
std::vector<float> resize_roi(const NodeInfo& info, const ResizeParams& p, size_t rank,
                              const std::vector<size_t>& axes) {
  std::vector<float> roi(2 * rank, 0.0f);
  for (size_t d = 0; d < rank; ++d) roi[rank + d] = 1.0f;
  if (p.coord == Coord::kTfCropAndResize) {
    const size_t n = axes.size();
    if (!info.has_input(1) || sdk::element_count(info.in_shapes[1]) != static_cast<int64_t>(2 * n))
      fail_invalid(info, "tf_crop_and_resize needs roi with " + std::to_string(2 * n) + " values");
    if (info.in_dtypes[1] != BP_DTYPE_FLOAT32) fail_unsupported(info, "roi must be float32");
    if (info.constant(1) == nullptr) fail_unsupported(info, "roi must be a constant");
    std::vector<float> given(2 * n);
    std::memcpy(given.data(), info.constant(1), 2 * n * sizeof(float));
    for (size_t k = 0; k < n; ++k) {
      roi[axes[k]] = given[k];
      roi[rank + axes[k]] = given[n + k];
    }
  }
  return roi;
}

std::unique_ptr<Kernel> make_resize(const NodeInfo& info) {
  check_resize_shapes(info);
  const Dims& x = info.in_shapes[0];
  const Dims& y = info.out_shapes[0];
  const size_t rank = x.size();
  ResizeParams p = resize_params(info);
  const std::vector<size_t> resized = resize_axes(info, rank);
  const std::vector<float> scales = resize_scales(info, p, resized);
  const std::vector<float> roi = resize_roi(info, p, rank, resized);

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
// has scales at 1, Resize-11+ roi at 1 and scales at 2; 'sizes' (3) gives the
// output shape, which the factory already has, and with Resize-18's
// keep_aspect_ratio_policy the one scale of every axis.
void register_resize(KernelRegistry& registry) { registry.add("Resize", make_resize, {1, 2, 3}); }

}  // namespace nn
}  // namespace backplane::cpuref
