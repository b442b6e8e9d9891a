// kernels_detection.cpp — NonMaxSuppression, RoiAlign, MaxRoiPool, GridSample.
//
// Boxes, regions and sampling grids come from data: a batch index out of
// range or a threshold outside [0, 1] throws sdk::invalid naming the node; a
// non-finite or absurdly large coordinate never reaches an integer cast (it
// samples nothing, or is rejected), so bad input cannot cause UB.
#include "kernel.hpp"
#include "kernel_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace {

// Float element access: float16 widens to float.
template <class T>
struct Real {
  using C = T;
  static C load(T v) { return v; }
  static T store(C c) { return c; }
};
template <>
struct Real<f16> {
  using C = float;
  static C load(f16 v) { return half_to_float(v.bits); }
  static f16 store(C c) { return f16{float_to_half(c)}; }
};

// ------------------------------------------------------------------------
// NonMaxSuppression
// ------------------------------------------------------------------------

// A box as (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
struct Box {
  float y1, x1, y2, x2;
};

Box box_at(const float* b, bool center) {
  if (center) {  // [x_center, y_center, width, height]
    const float xc = b[0], yc = b[1], w = b[2], h = b[3];
    return {yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2};
  }
  // [y1, x1, y2, x2] with the corners in either order.
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// IoU(a, b) > threshold; false for empty boxes (and NaN coordinates).
bool overlaps(const Box& a, const Box& b, float threshold) {
  const float iy1 = std::max(a.y1, b.y1), ix1 = std::max(a.x1, b.x1);
  const float iy2 = std::min(a.y2, b.y2), ix2 = std::min(a.x2, b.x2);
  if (!(iy2 > iy1 && ix2 > ix1)) return false;
  const float inter = (iy2 - iy1) * (ix2 - ix1);
  const float area_a = (a.y2 - a.y1) * (a.x2 - a.x1);
  const float area_b = (b.y2 - b.y1) * (b.x2 - b.x1);
  const float uni = area_a + area_b - inter;
  if (!(area_a > 0 && area_b > 0 && uni > 0)) return false;
  return inter / uni > threshold;
}

class NmsKernel final : public Kernel {
  struct Candidate {
    float score;
    int32_t box;
  };

 public:
  // `present[i]`: whether optional input i (2 to 4) is given; the node's
  // input array is only as long as the inputs it lists.
  NmsKernel(int64_t batches, int64_t classes, int64_t boxes, bool center, const bool* present,
            std::string who)
      : batches_(batches),
        classes_(classes),
        boxes_(boxes),
        center_(center),
        has_max_(present[2]),
        has_iou_(present[3]),
        has_score_(present[4]),
        who_(std::move(who)) {}
  // How many boxes each (batch, class) selected, the candidates of one
  // class, the selected boxes of every (batch, class): in that order, so
  // each part stays aligned for its type.
  size_t scratch_bytes() const override {
    const size_t groups = static_cast<size_t>(batches_ * classes_);
    return groups * sizeof(int64_t) + static_cast<size_t>(boxes_) * sizeof(Candidate) +
           groups * static_cast<size_t>(boxes_) * sizeof(int32_t);
  }
  bool has_dynamic_outputs() const override { return true; }
  void run(const void* const*, void* const*, void*) const override {
    throw sdk::invalid(who_ + ": its output shape depends on data; it runs through run_dynamic");
  }
  void run_dynamic(const void* const* inputs, void* const* outputs, OutputAllocator& allocator,
                   void* scratch) const override {
    const float* boxes = static_cast<const float*>(inputs[0]);
    const float* scores = static_cast<const float*>(inputs[1]);
    int64_t max_out = has_max_ ? *static_cast<const int64_t*>(inputs[2]) : 0;
    const float iou = has_iou_ ? *static_cast<const float*>(inputs[3]) : 0.0f;
    const bool has_score_threshold = has_score_;
    const float score_min = has_score_ ? *static_cast<const float*>(inputs[4]) : 0.0f;
    if (!(iou >= 0.0f && iou <= 1.0f))
      throw sdk::invalid(who_ + ": iou_threshold " + std::to_string(iou) + " is not in [0, 1]");
    max_out = std::clamp<int64_t>(max_out, 0, boxes_);

    int64_t* count = static_cast<int64_t*>(scratch);
    Candidate* cand = reinterpret_cast<Candidate*>(count + batches_ * classes_);
    int32_t* selected = reinterpret_cast<int32_t*>(cand + boxes_);
    int64_t total = 0;
    for (int64_t b = 0; b < batches_; ++b)
      for (int64_t c = 0; c < classes_; ++c) {
        const int64_t g = b * classes_ + c;
        int32_t* sel = selected + g * boxes_;
        int64_t n_sel = 0;
        if (max_out > 0) {
          const float* s = scores + g * boxes_;
          int64_t n = 0;
          for (int64_t i = 0; i < boxes_; ++i)
            if (!has_score_threshold || s[i] > score_min)
              cand[n++] = Candidate{s[i], static_cast<int32_t>(i)};
          // Highest score first; equal scores keep the lower box index first.
          std::sort(cand, cand + n, [](const Candidate& x, const Candidate& y) {
            if (x.score != y.score) return x.score > y.score;
            return x.box < y.box;
          });
          const float* bb = boxes + b * boxes_ * 4;
          for (int64_t i = 0; i < n && n_sel < max_out; ++i) {
            const Box cur = box_at(bb + cand[i].box * 4, center_);
            bool keep = true;
            for (int64_t j = 0; j < n_sel && keep; ++j)
              keep = !overlaps(box_at(bb + sel[j] * 4, center_), cur, iou);
            if (keep) sel[n_sel++] = cand[i].box;
          }
        }
        count[g] = n_sel;
        total += n_sel;
      }
    int64_t* out = static_cast<int64_t*>(
        outputs[0] != nullptr ? outputs[0] : allocator.allocate(0, Dims{total, 3}));
    for (int64_t b = 0; b < batches_; ++b)
      for (int64_t c = 0; c < classes_; ++c) {
        const int64_t g = b * classes_ + c;
        for (int64_t j = 0; j < count[g]; ++j) {
          *out++ = b;
          *out++ = c;
          *out++ = selected[g * boxes_ + j];
        }
      }
  }

 private:
  int64_t batches_, classes_, boxes_;
  bool center_, has_max_, has_iou_, has_score_;
  std::string who_;
};

std::unique_ptr<Kernel> make_nms(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& boxes = info.in_shapes[0];
  const Dims& scores = info.in_shapes[1];
  if (info.in_dtypes[0] != BP_DTYPE_FLOAT32 || info.in_dtypes[1] != BP_DTYPE_FLOAT32)
    throw sdk::unsupported(info.describe() + ": boxes and scores must be float32");
  if (boxes.size() != 3 || boxes[2] != 4 || scores.size() != 3 || scores[0] != boxes[0] ||
      scores[2] != boxes[1])
    throw sdk::invalid(info.describe() + ": boxes " + dims_str(boxes) + " and scores " +
                       dims_str(scores) + " must be [B, N, 4] and [B, C, N]");
  if (boxes[1] > INT32_MAX) throw sdk::unsupported(info.describe() + ": too many boxes");
  const char* names[] = {"", "", "max_output_boxes_per_class", "iou_threshold", "score_threshold"};
  const bp_dtype_t want[] = {BP_DTYPE_FLOAT32, BP_DTYPE_FLOAT32, BP_DTYPE_INT64, BP_DTYPE_FLOAT32,
                             BP_DTYPE_FLOAT32};
  bool present[5] = {true, true, false, false, false};
  for (size_t i = 2; i < 5; ++i) {
    present[i] = info.has_input(i);
    if (present[i] && (numel(info.in_shapes[i]) != 1 || info.in_dtypes[i] != want[i]))
      throw sdk::invalid(info.describe() + ": " + names[i] + " must be one " +
                         sdk::dtype_name(want[i]) + " value");
  }
  const int64_t center = info.node.attr_int("center_point_box", 0);
  if (center != 0 && center != 1)
    throw sdk::invalid(info.describe() + ": center_point_box must be 0 or 1");
  return std::make_unique<NmsKernel>(boxes[0], scores[1], boxes[1], center == 1, present,
                                     info.describe());
}

// ------------------------------------------------------------------------
// RoiAlign
// ------------------------------------------------------------------------

template <class T>
class RoiAlignKernel final : public Kernel {
  using C = typename Real<T>::C;

 public:
  RoiAlignKernel(const Dims& x, int64_t rois, int64_t oh, int64_t ow, int64_t ratio, float scale,
                 bool half_pixel, bool max_mode, std::string who)
      : n_(x[0]),
        c_(x[1]),
        h_(x[2]),
        w_(x[3]),
        rois_(rois),
        oh_(oh),
        ow_(ow),
        ratio_(ratio),
        scale_(scale),
        half_pixel_(half_pixel),
        max_(max_mode),
        who_(std::move(who)) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    const T* rois = static_cast<const T*>(inputs[1]);
    const int64_t* batch = static_cast<const int64_t*>(inputs[2]);
    T* y = static_cast<T*>(outputs[0]);
    // Every region is checked before any is sampled.
    std::vector<Region> regions(static_cast<size_t>(rois_));
    for (int64_t r = 0; r < rois_; ++r) {
      const int64_t b = batch[r];
      if (b < 0 || b >= n_)
        throw sdk::invalid(who_ + ": batch_indices[" + std::to_string(r) +
                           "] = " + std::to_string(b) + " is out of range for a batch of " +
                           std::to_string(n_));
      C box[4];
      for (int k = 0; k < 4; ++k) {
        box[k] = Real<T>::load(rois[r * 4 + k]);
        if (!std::isfinite(static_cast<double>(box[k])))
          throw sdk::invalid(who_ + ": roi " + std::to_string(r) + " has a non-finite coordinate");
      }
      regions[static_cast<size_t>(r)] = region(box, b);
    }
    // Work in parts of a region and a block of channels: each part works out
    // its region's sampling taps once and applies them to every channel of
    // its block, so the coordinate arithmetic is not repeated per channel.
    const int64_t blocks = (c_ + kChannelBlock - 1) / kChannelBlock;
    sdk::parallel_for(static_cast<size_t>(rois_ * blocks), 1, [&](size_t begin, size_t end) {
      std::vector<Tap> taps;
      for (size_t part = begin; part < end; ++part) {
        const int64_t r = static_cast<int64_t>(part) / blocks;
        const int64_t c0 = static_cast<int64_t>(part) % blocks * kChannelBlock;
        const Region& g = regions[static_cast<size_t>(r)];
        one_region(x + g.batch * c_ * h_ * w_, g, c0, std::min(c_, c0 + kChannelBlock),
                   y + r * c_ * oh_ * ow_, taps);
      }
    });
  }

 private:
  static constexpr int64_t kChannelBlock = 32;

  // A region in feature-map coordinates and its sampling grid per bin.
  struct Region {
    int64_t batch = 0, gh = 0, gw = 0;
    C sy = 0, sx = 0, bin_h = 0, bin_w = 0, count = 1;
  };
  // One bilinear sample, Caffe2/ONNX Runtime style: the offsets of its four
  // corners in a channel plane and their weights. Outside [-1, size] it is
  // 0 (`inside` false); the last row/column is clamped.
  struct Tap {
    int64_t at[4];
    C w[4];
    bool inside;
  };

  Region region(const C* box, int64_t batch) const {
    Region g;
    g.batch = batch;
    const C offset = half_pixel_ ? C(0.5) : C(0);
    g.sx = box[0] * scale_ - offset;
    g.sy = box[1] * scale_ - offset;
    C rw = box[2] * scale_ - offset - g.sx, rh = box[3] * scale_ - offset - g.sy;
    if (!half_pixel_) {  // output_half_pixel: regions at least one pixel
      rw = std::max(rw, C(1));
      rh = std::max(rh, C(1));
    }
    g.bin_h = rh / static_cast<C>(oh_);
    g.bin_w = rw / static_cast<C>(ow_);
    const double gh_d = ratio_ > 0 ? static_cast<double>(ratio_) : std::ceil(double(rh) / oh_);
    const double gw_d = ratio_ > 0 ? static_cast<double>(ratio_) : std::ceil(double(rw) / ow_);
    // A region far larger than any image would sample forever: reject it.
    if (!(gh_d * gw_d <= double(1 << 24)))
      throw sdk::invalid(who_ + ": a region of " + std::to_string(double(rh)) + " x " +
                         std::to_string(double(rw)) + " needs too many samples per bin");
    g.gh = std::max<int64_t>(static_cast<int64_t>(gh_d), 0);
    g.gw = std::max<int64_t>(static_cast<int64_t>(gw_d), 0);
    g.count = static_cast<C>(std::max<int64_t>(g.gh * g.gw, 1));
    return g;
  }

  Tap tap(C y, C x) const {
    Tap t{};
    t.inside = !(y < -1 || y > static_cast<C>(h_) || x < -1 || x > static_cast<C>(w_));
    if (!t.inside) return t;
    if (y <= 0) y = 0;
    if (x <= 0) x = 0;
    int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x), y1, x1;
    if (y0 >= h_ - 1) {
      y1 = y0 = h_ - 1;
      y = static_cast<C>(y0);
    } else {
      y1 = y0 + 1;
    }
    if (x0 >= w_ - 1) {
      x1 = x0 = w_ - 1;
      x = static_cast<C>(x0);
    } else {
      x1 = x0 + 1;
    }
    const C ly = y - static_cast<C>(y0), lx = x - static_cast<C>(x0);
    const C hy = 1 - ly, hx = 1 - lx;
    t.at[0] = y0 * w_ + x0, t.at[1] = y0 * w_ + x1, t.at[2] = y1 * w_ + x0, t.at[3] = y1 * w_ + x1;
    t.w[0] = hy * hx, t.w[1] = hy * lx, t.w[2] = ly * hx, t.w[3] = ly * lx;
    return t;
  }

  // In max mode the four weighted corners are reduced with max, as ONNX
  // Runtime (the reference ONNX's tests came from) does.
  C sample(const T* plane, const Tap& t) const {
    if (!t.inside) return 0;
    const C v00 = t.w[0] * Real<T>::load(plane[t.at[0]]);
    const C v01 = t.w[1] * Real<T>::load(plane[t.at[1]]);
    const C v10 = t.w[2] * Real<T>::load(plane[t.at[2]]);
    const C v11 = t.w[3] * Real<T>::load(plane[t.at[3]]);
    if (max_) return std::max(std::max(v00, v01), std::max(v10, v11));
    return v00 + v01 + v10 + v11;
  }

  // Calls f(tap) for each sample of bin (ph, pw) of region g, in order.
  template <class F>
  void each_sample(const Region& g, int64_t ph, int64_t pw, F&& f) const {
    for (int64_t iy = 0; iy < g.gh; ++iy) {
      const C yy = g.sy + static_cast<C>(ph) * g.bin_h +
                   (static_cast<C>(iy) + C(0.5)) * g.bin_h / static_cast<C>(g.gh);
      for (int64_t ix = 0; ix < g.gw; ++ix) {
        const C xx = g.sx + static_cast<C>(pw) * g.bin_w +
                     (static_cast<C>(ix) + C(0.5)) * g.bin_w / static_cast<C>(g.gw);
        f(tap(yy, xx));
      }
    }
  }

  // A bin's samples reduced: averaged, or their maximum.
  struct Reduce {
    bool max;
    C acc = 0;
    bool first = true;
    void add(C v) {
      acc = max ? (first ? v : std::max(acc, v)) : acc + v;
      first = false;
    }
    C result(C count) const { return max ? acc : acc / count; }
  };

  // Channels [c0, c1) of one region. The taps of an output row are worked
  // out once for all those channels; a region whose row has more than
  // kMaxTaps samples works each out as it goes.
  void one_region(const T* x, const Region& g, int64_t c0, int64_t c1, T* y,
                  std::vector<Tap>& taps) const {
    constexpr int64_t kMaxTaps = int64_t{1} << 16;
    const int64_t per_bin = g.gh * g.gw;
    const bool kept = ow_ * per_bin <= kMaxTaps;
    for (int64_t ph = 0; ph < oh_; ++ph) {
      if (kept) {
        taps.clear();
        for (int64_t pw = 0; pw < ow_; ++pw)
          each_sample(g, ph, pw, [&](const Tap& t) { taps.push_back(t); });
      }
      for (int64_t ch = c0; ch < c1; ++ch) {
        const T* plane = x + ch * h_ * w_;
        for (int64_t pw = 0; pw < ow_; ++pw) {
          Reduce r{max_};
          if (kept)
            for (int64_t k = pw * per_bin; k < (pw + 1) * per_bin; ++k)
              r.add(sample(plane, taps[static_cast<size_t>(k)]));
          else
            each_sample(g, ph, pw, [&](const Tap& t) { r.add(sample(plane, t)); });
          y[(ch * oh_ + ph) * ow_ + pw] = Real<T>::store(r.result(g.count));
        }
      }
    }
  }

  int64_t n_, c_, h_, w_, rois_, oh_, ow_, ratio_;
  float scale_;
  bool half_pixel_, max_;
  std::string who_;
};

std::unique_ptr<Kernel> make_roi_align(const NodeInfo& info) {
  require_inputs(info, 3);
  const Dims& x = info.in_shapes[0];
  const Dims& rois = info.in_shapes[1];
  if (x.size() != 4 || rois.size() != 2 || rois[1] != 4 || info.in_shapes[2] != Dims{rois[0]})
    throw sdk::invalid(info.describe() + ": X " + dims_str(x) + ", rois " + dims_str(rois) +
                       " and batch_indices " + dims_str(info.in_shapes[2]) +
                       " must be [N, C, H, W], [R, 4] and [R]");
  if (info.in_dtypes[1] != info.in_dtypes[0] || info.in_dtypes[2] != BP_DTYPE_INT64)
    throw sdk::invalid(info.describe() + ": rois must have X's dtype, batch_indices int64");
  const int64_t oh = info.node.attr_int("output_height", 1);
  const int64_t ow = info.node.attr_int("output_width", 1);
  const int64_t ratio = info.node.attr_int("sampling_ratio", 0);
  if (oh < 1 || ow < 1 || ratio < 0)
    throw sdk::invalid(info.describe() +
                       ": output_height and output_width must be >= 1, sampling_ratio >= 0");
  const std::string mode = info.node.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max")
    throw sdk::invalid(info.describe() + ": mode '" + mode + "' is not avg or max");
  // Opset 10 had no attribute and behaved as output_half_pixel.
  const std::string ctm =
      info.node.attr_string("coordinate_transformation_mode",
                            info.node.opset() >= 16 ? "half_pixel" : "output_half_pixel");
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    throw sdk::invalid(info.describe() + ": coordinate_transformation_mode '" + ctm +
                       "' is not half_pixel or output_half_pixel");
  const float scale = info.node.attr_float("spatial_scale", 1.0f);
  if (info.out_shapes[0] != Dims{rois[0], x[1], oh, ow})
    throw sdk::invalid(info.describe() + ": output shape " + dims_str(info.out_shapes[0]) +
                       " differs from [R, C, output_height, output_width]");
  return dispatch<float, f16, double>(info.in_dtypes[0], info, "X", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(std::make_unique<RoiAlignKernel<T>>(
        x, rois[0], oh, ow, ratio, scale, ctm == "half_pixel", mode == "max", info.describe()));
  });
}

// ------------------------------------------------------------------------
// MaxRoiPool (Caffe's RoI pooling: integer bins, max over each)
// ------------------------------------------------------------------------

template <class T>
class MaxRoiPoolKernel final : public Kernel {
  using C = typename Real<T>::C;

 public:
  MaxRoiPoolKernel(const Dims& x, int64_t rois, int64_t ph, int64_t pw, float scale,
                   std::string who)
      : n_(x[0]),
        c_(x[1]),
        h_(x[2]),
        w_(x[3]),
        rois_(rois),
        ph_(ph),
        pw_(pw),
        scale_(scale),
        who_(std::move(who)) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    const T* rois = static_cast<const T*>(inputs[1]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t r = 0; r < rois_; ++r) {
      double v[5];
      for (int k = 0; k < 5; ++k) {
        v[k] = static_cast<double>(Real<T>::load(rois[r * 5 + k]));
        // Coordinates past any image size would overflow the integer bins.
        if (!(std::fabs(v[k]) < 1e15))
          throw sdk::invalid(who_ + ": roi " + std::to_string(r) +
                             " has a non-finite or out-of-range value");
      }
      const int64_t b = static_cast<int64_t>(v[0]);
      if (b < 0 || b >= n_ || static_cast<double>(b) != v[0])
        throw sdk::invalid(who_ + ": roi " + std::to_string(r) + " has batch index " +
                           std::to_string(v[0]) + ", not one of 0.." + std::to_string(n_ - 1));
      const int64_t x1 = std::llround(v[1] * scale_), y1 = std::llround(v[2] * scale_);
      const int64_t x2 = std::llround(v[3] * scale_), y2 = std::llround(v[4] * scale_);
      const double bin_h = static_cast<double>(std::max<int64_t>(y2 - y1 + 1, 1)) / ph_;
      const double bin_w = static_cast<double>(std::max<int64_t>(x2 - x1 + 1, 1)) / pw_;
      for (int64_t ch = 0; ch < c_; ++ch) {
        const T* plane = x + (b * c_ + ch) * h_ * w_;
        T* out = y + (r * c_ + ch) * ph_ * pw_;
        for (int64_t i = 0; i < ph_; ++i) {
          const int64_t hs = clamp(static_cast<int64_t>(std::floor(i * bin_h)) + y1, h_);
          const int64_t he = clamp(static_cast<int64_t>(std::ceil((i + 1) * bin_h)) + y1, h_);
          for (int64_t j = 0; j < pw_; ++j) {
            const int64_t ws = clamp(static_cast<int64_t>(std::floor(j * bin_w)) + x1, w_);
            const int64_t we = clamp(static_cast<int64_t>(std::ceil((j + 1) * bin_w)) + x1, w_);
            C m = 0;  // an empty bin is 0
            bool any = false;
            for (int64_t yy = hs; yy < he; ++yy)
              for (int64_t xx = ws; xx < we; ++xx) {
                const C val = Real<T>::load(plane[yy * w_ + xx]);
                if (!any || val > m) m = val;
                any = true;
              }
            out[i * pw_ + j] = Real<T>::store(m);
          }
        }
      }
    }
  }

 private:
  static int64_t clamp(int64_t v, int64_t size) { return std::min(std::max<int64_t>(v, 0), size); }

  int64_t n_, c_, h_, w_, rois_, ph_, pw_;
  float scale_;
  std::string who_;
};

std::unique_ptr<Kernel> make_max_roi_pool(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& x = info.in_shapes[0];
  const Dims& rois = info.in_shapes[1];
  if (x.size() != 4 || rois.size() != 2 || rois[1] != 5)
    throw sdk::invalid(info.describe() + ": X " + dims_str(x) + " and rois " + dims_str(rois) +
                       " must be [N, C, H, W] and [R, 5]");
  if (info.in_dtypes[1] != info.in_dtypes[0])
    throw sdk::invalid(info.describe() + ": rois must have X's dtype");
  const std::vector<int64_t> pooled = info.node.attr_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
    throw sdk::invalid(info.describe() + ": pooled_shape must be two positive sizes");
  if (info.out_shapes[0] != Dims{rois[0], x[1], pooled[0], pooled[1]})
    throw sdk::invalid(info.describe() + ": output shape " + dims_str(info.out_shapes[0]) +
                       " differs from [R, C, pooled_shape]");
  const float scale = info.node.attr_float("spatial_scale", 1.0f);
  return dispatch<float, f16, double>(info.in_dtypes[0], info, "X", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(std::make_unique<MaxRoiPoolKernel<T>>(
        x, rois[0], pooled[0], pooled[1], scale, info.describe()));
  });
}

// ------------------------------------------------------------------------
// GridSample (torch.nn.functional.grid_sample semantics, 4-D)
// ------------------------------------------------------------------------

enum class Padding { kZeros, kBorder, kReflection };
enum class Interp { kBilinear, kNearest, kBicubic };

// Coordinates beyond this are outside any image; they are treated as such
// before any integer conversion.
constexpr double kCoordLimit = 1e9;

template <class C>
C reflect(C v, C twice_low, C twice_high) {
  if (twice_low == twice_high) return 0;
  const C low = twice_low / 2, span = (twice_high - twice_low) / 2;
  v = std::fabs(v - low);
  const C extra = std::fmod(v, span);
  const int64_t flips = static_cast<int64_t>(std::floor(v / span));
  return flips % 2 == 0 ? extra + low : span - extra + low;
}

template <class T>
class GridSampleKernel final : public Kernel {
  using C = typename Real<T>::C;

 public:
  GridSampleKernel(const Dims& x, const Dims& grid, Interp interp, Padding pad, bool align)
      : n_(x[0]),
        c_(x[1]),
        h_(x[2]),
        w_(x[3]),
        oh_(grid[1]),
        ow_(grid[2]),
        interp_(interp),
        pad_(pad),
        align_(align) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    const T* grid = static_cast<const T*>(inputs[1]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t i = 0; i < oh_; ++i)
        for (int64_t j = 0; j < ow_; ++j) {
          const T* g = grid + ((b * oh_ + i) * ow_ + j) * 2;
          const C gx = unnormalize(Real<T>::load(g[0]), w_);
          const C gy = unnormalize(Real<T>::load(g[1]), h_);
          for (int64_t ch = 0; ch < c_; ++ch) {
            const T* plane = x + (b * c_ + ch) * h_ * w_;
            y[((b * c_ + ch) * oh_ + i) * ow_ + j] = Real<T>::store(at(plane, gx, gy));
          }
        }
  }

 private:
  C unnormalize(C v, int64_t size) const {
    const C s = static_cast<C>(size);
    return align_ ? (v + 1) / 2 * (s - 1) : ((v + 1) * s - 1) / 2;
  }
  // The padding rule applied to a source coordinate (border clamps,
  // reflection mirrors then clamps; zeros leaves it for the bounds check).
  C pad_coord(C v, int64_t size) const {
    const C hi = static_cast<C>(size - 1);
    if (pad_ == Padding::kBorder) return std::clamp(v, C(0), hi);
    if (pad_ == Padding::kReflection) {
      v = align_ ? reflect(v, C(0), 2 * hi) : reflect(v, C(-1), 2 * hi + 1);
      return std::clamp(v, C(0), hi);
    }
    return v;
  }
  // The value at integer pixel (iy, ix), 0 outside the image.
  C pixel(const T* plane, C fy, C fx) const {
    if (!(std::fabs(double(fy)) < kCoordLimit && std::fabs(double(fx)) < kCoordLimit)) return 0;
    const int64_t iy = static_cast<int64_t>(fy), ix = static_cast<int64_t>(fx);
    if (iy < 0 || iy >= h_ || ix < 0 || ix >= w_) return 0;
    return Real<T>::load(plane[iy * w_ + ix]);
  }
  C at(const T* plane, C gx, C gy) const {
    if (!(std::fabs(double(gx)) < kCoordLimit && std::fabs(double(gy)) < kCoordLimit)) {
      // NaN or far outside: torch's border/reflection land on the edge; zeros reads nothing.
      if (pad_ == Padding::kZeros || std::isnan(double(gx)) || std::isnan(double(gy))) return 0;
      gx = std::clamp(gx, C(-kCoordLimit), C(kCoordLimit));
      gy = std::clamp(gy, C(-kCoordLimit), C(kCoordLimit));
    }
    if (interp_ == Interp::kBicubic) return bicubic(plane, gx, gy);
    const C x = pad_coord(gx, w_), y = pad_coord(gy, h_);
    if (interp_ == Interp::kNearest) return pixel(plane, std::nearbyint(y), std::nearbyint(x));
    const C x0 = std::floor(x), y0 = std::floor(y);
    const C lx = x - x0, ly = y - y0;
    return pixel(plane, y0, x0) * (1 - ly) * (1 - lx) + pixel(plane, y0, x0 + 1) * (1 - ly) * lx +
           pixel(plane, y0 + 1, x0) * ly * (1 - lx) + pixel(plane, y0 + 1, x0 + 1) * ly * lx;
  }
  // Cubic convolution (A = -0.75) over the 4x4 neighbourhood; each tap
  // takes the padding rule on its own, as torch does.
  C bicubic(const T* plane, C x, C y) const {
    const C x0 = std::floor(x), y0 = std::floor(y);
    C wx[4], wy[4];
    weights(x - x0, wx);
    weights(y - y0, wy);
    C acc = 0;
    for (int i = 0; i < 4; ++i) {
      C row = 0;
      const C py = pad_coord(y0 - 1 + i, h_);
      for (int j = 0; j < 4; ++j) row += wx[j] * pixel(plane, py, pad_coord(x0 - 1 + j, w_));
      acc += wy[i] * row;
    }
    return acc;
  }
  static void weights(C t, C* w) {
    constexpr C A = C(-0.75);
    auto near = [&](C d) { return ((A + 2) * d - (A + 3)) * d * d + 1; };
    auto far = [&](C d) { return ((A * d - 5 * A) * d + 8 * A) * d - 4 * A; };
    w[0] = far(t + 1);
    w[1] = near(t);
    w[2] = near(1 - t);
    w[3] = far(2 - t);
  }

  int64_t n_, c_, h_, w_, oh_, ow_;
  Interp interp_;
  Padding pad_;
  bool align_;
};

std::unique_ptr<Kernel> make_grid_sample(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& x = info.in_shapes[0];
  const Dims& grid = info.in_shapes[1];
  if (x.size() != 4 || grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
    throw sdk::invalid(info.describe() + ": X " + dims_str(x) + " and grid " + dims_str(grid) +
                       " must be [N, C, H, W] and [N, H_out, W_out, 2]");
  if (info.in_dtypes[1] != info.in_dtypes[0])
    throw sdk::invalid(info.describe() + ": grid must have X's dtype");
  const std::string mode = info.node.attr_string("mode", "bilinear");
  const std::string pad = info.node.attr_string("padding_mode", "zeros");
  Interp interp;
  if (mode == "bilinear") interp = Interp::kBilinear;
  else if (mode == "nearest") interp = Interp::kNearest;
  else if (mode == "bicubic") interp = Interp::kBicubic;
  else throw sdk::invalid(info.describe() + ": mode '" + mode + "' is not supported");
  Padding padding;
  if (pad == "zeros") padding = Padding::kZeros;
  else if (pad == "border") padding = Padding::kBorder;
  else if (pad == "reflection") padding = Padding::kReflection;
  else throw sdk::invalid(info.describe() + ": padding_mode '" + pad + "' is not supported");
  const bool align = info.node.attr_int("align_corners", 0) != 0;
  if (info.out_shapes[0] != Dims{x[0], x[1], grid[1], grid[2]})
    throw sdk::invalid(info.describe() + ": output shape " + dims_str(info.out_shapes[0]) +
                       " differs from [N, C, H_out, W_out]");
  return dispatch<float, f16, double>(info.in_dtypes[0], info, "X", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(
        std::make_unique<GridSampleKernel<T>>(x, grid, interp, padding, align));
  });
}

}  // namespace

void register_detection_kernels(KernelRegistry& registry) {
  registry.add("NonMaxSuppression", make_nms);
  registry.add("RoiAlign", make_roi_align);
  registry.add("MaxRoiPool", make_max_roi_pool);
  registry.add("GridSample", make_grid_sample);
}

}  // namespace backplane::cpuref
