// ops_opset18.cpp — schemas of what changed in ONNX opset 18 (ONNX 1.13), the
// opset newer exporters emit: the reductions take their axes as an input,
// Split gains num_outputs, Pad axes, Resize antialias / keep_aspect_ratio_policy
// / axes, ScatterElements and ScatterND max/min; new ops GroupNormalization,
// CenterCropPad, Col2Im, LpPool (ceil_mode), BitwiseAnd/Or/Xor/Not, Mish.
// (OptionalGetElement/OptionalHasElement 18 live with the optionals, in
// ops_control.cpp.) Type lists are ONNX's; kernels reject what they do not run.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using detail::kMaxElements;

std::string dims(const Shape& s) { return shape_to_string(s); }

const DTypeList kReduceTypes = {DType::kUInt32,  DType::kUInt64,  DType::kInt32,
                                DType::kInt64,   DType::kFloat16, DType::kFloat32,
                                DType::kFloat64, DType::kBFloat16};
const DTypeList kReduceMinMaxTypes = {
    DType::kUInt32,  DType::kUInt64,  DType::kInt32,    DType::kInt64, DType::kFloat16,
    DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kUInt8, DType::kInt8};
const DTypeList kFloat16To64 = {DType::kFloat16, DType::kFloat32, DType::kFloat64};

// -------------------------------------------------------------- reductions

// Reduce*-18: axes is an optional int64 input; none (or an empty one) means
// every axis, or none at all with noop_with_empty_axes.
Status infer_reduce(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t keepdims, c.node.attr_int("keepdims", 1));
  BP_ASSIGN_OR_RETURN(int64_t noop, c.node.attr_int("noop_with_empty_axes", 0));
  std::vector<int64_t> axes;
  if (c.has(1)) {
    if (c.rank(1) != 1) return c.error("input 'axes' must be 1-D, got " + dims(c.shape(1)));
    BP_ASSIGN_OR_RETURN(axes, c.ints_input(1, "axes"));
  }
  const Shape& x = c.shape(0);
  if (axes.empty() && noop != 0) {
    c.set(0, c.dtype(0), x);
    return ok_status();
  }
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, c.normalize_axes(axes, c.rank(0), "axes"));
  std::vector<bool> reduced(x.size(), norm.empty());
  for (int64_t a : norm) reduced[a] = true;
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!reduced[i]) out.push_back(x[i]);
    else if (keepdims != 0) out.push_back(1);
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

void add_reductions(OpRegistry& r) {
  const char* ops[] = {"ReduceL1",   "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp", "ReduceMax",
                       "ReduceMean", "ReduceMin", "ReduceProd",   "ReduceSumSquare"};
  for (const char* op : ops) {
    const std::string name = op;
    const bool minmax = name == "ReduceMax" || name == "ReduceMin";
    (void)r.add(OpSchema("", op, 18)
                    .doc(name + " over the axes given as an input (opset 18)")
                    .input("data", "T")
                    .optional_input("axes", "tensor(int64)")
                    .output("reduced", "T")
                    .type("T", minmax ? kReduceMinMaxTypes : kReduceTypes)
                    .type("tensor(int64)", {DType::kInt64})
                    .attr("keepdims", AttrType::kInt, int64_t{1})
                    .attr("noop_with_empty_axes", AttrType::kInt, int64_t{0})
                    .shape_inputs({"axes"})
                    .infer(infer_reduce));
  }
}

// -------------------------------------------------------------- Split, Pad

// Split-18: `split` sizes, or num_outputs chunks of ceil(dim / n) (the last
// one smaller), or equal parts.
Status infer_split(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  BP_ASSIGN_OR_RETURN(int64_t ax, c.normalize_axis(axis, c.rank(0), "axis"));
  const int64_t dim = c.shape(0)[ax];
  const int64_t n = static_cast<int64_t>(c.out.size());
  const Attribute* num = c.node.attr("num_outputs");
  std::vector<int64_t> split;
  if (c.has(1)) {
    if (num != nullptr) return c.error("give either input 'split' or attribute 'num_outputs'");
    BP_ASSIGN_OR_RETURN(split, c.ints_input(1, "split"));
  } else if (num != nullptr) {
    if (num->i != n)
      return c.error("num_outputs is " + std::to_string(num->i) + " but the node has " +
                     std::to_string(n) + " outputs");
    const int64_t chunk = (dim + n - 1) / n;
    if (chunk * (n - 1) > dim)
      return c.error("dim " + std::to_string(ax) + " of '" + c.name(0) + "' " + dims(c.shape(0)) +
                     " cannot be split into " + std::to_string(n) + " chunks of " +
                     std::to_string(chunk) + " (the last would be empty)");
    split.assign(n, chunk);
    split.back() = dim - chunk * (n - 1);
  } else {
    if (dim % n != 0)
      return c.error("dim " + std::to_string(ax) + " of '" + c.name(0) + "' " + dims(c.shape(0)) +
                     " cannot be split evenly into " + std::to_string(n) + " outputs");
    split.assign(n, dim / n);
  }
  if (static_cast<int64_t>(split.size()) != n)
    return c.error("split " + dims(split) + " has " + std::to_string(split.size()) +
                   " values but the node has " + std::to_string(n) + " outputs");
  int64_t sum = 0;
  for (int64_t s : split) {
    if (s < 0 || s > kMaxElements)
      return c.error("split " + dims(split) + " has a size out of range");
    sum += s;
  }
  if (sum != dim)
    return c.error("split " + dims(split) + " sums to " + std::to_string(sum) + " but dim " +
                   std::to_string(ax) + " of '" + c.name(0) + "' is " + std::to_string(dim));
  for (int64_t i = 0; i < n; ++i) {
    Shape s = c.shape(0);
    s[ax] = split[i];
    c.set(i, c.dtype(0), s);
  }
  return ok_status();
}

// Pad-18: pads (begin values, then end values) for `axes` (all by default).
Status infer_pad(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", "constant"));
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return c.error("attribute 'mode' is '" + mode + "', expected constant, reflect or edge");
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pads, c.ints_input(1, "pads"));
  if (c.has(2) && detail::sat_numel(c.shape(2)) != 1)
    return c.error("input 'constant_value' must hold one value, got " + dims(c.shape(2)));
  const Shape& x = c.shape(0);
  const int64_t r = c.rank(0);
  std::vector<int64_t> axes;
  if (c.has(3)) {
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> given, c.ints_input(3, "axes"));
    BP_ASSIGN_OR_RETURN(axes, c.normalize_axes(given, r, "axes"));
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  const size_t n = axes.size();
  if (pads.size() != 2 * n)
    return c.error("pads " + dims(pads) + " has " + std::to_string(pads.size()) +
                   " values, expected " + std::to_string(2 * n) + " (two per axis)");
  Shape out = x;
  for (size_t k = 0; k < n; ++k) {
    const int64_t a = axes[k], b = pads[k], e = pads[k + n];
    if (b > kMaxElements || b < -kMaxElements || e > kMaxElements || e < -kMaxElements)
      return c.error("pads " + dims(pads) + " has a value out of range");
    out[a] = x[a] + b + e;
    if (out[a] < 0)
      return c.error("pads " + dims(pads) + " make dim " + std::to_string(a) + " of " + dims(x) +
                     " negative");
    if (mode == "reflect" && (b > 0 || e > 0) && (b >= x[a] || e >= x[a]))
      return c.error("reflect pads " + dims(pads) + " must be smaller than dim " +
                     std::to_string(a) + " of " + dims(x));
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// -------------------------------------------------------------- Resize

Status resize_attrs(const InferCtx& c, std::string* ctm, std::string* policy) {
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", "nearest"));
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return c.error("attribute 'mode' is '" + mode + "', expected nearest, linear or cubic");
  BP_ASSIGN_OR_RETURN(*ctm, c.node.attr_string("coordinate_transformation_mode", "half_pixel"));
  BP_ASSIGN_OR_RETURN(*policy, c.node.attr_string("keep_aspect_ratio_policy", "stretch"));
  if (*policy != "stretch" && *policy != "not_larger" && *policy != "not_smaller")
    return c.error("attribute 'keep_aspect_ratio_policy' is '" + *policy +
                   "', expected stretch, not_larger or not_smaller");
  BP_ASSIGN_OR_RETURN(int64_t antialias, c.node.attr_int("antialias", 0));
  if (antialias != 0 && antialias != 1)
    return c.error("attribute 'antialias' is " + std::to_string(antialias) + ", expected 0 or 1");
  return ok_status();
}

// Resize-18: scales or sizes for `axes` (all by default); with sizes and a
// keep_aspect_ratio_policy, one scale for every listed axis (the smallest
// for not_larger, the largest for not_smaller) and sizes rounded from it.
Status infer_resize(InferCtx& c) {
  const Shape& x = c.shape(0);
  const int64_t r = c.rank(0);
  std::string ctm, policy;
  BP_RETURN_IF_ERROR(resize_attrs(c, &ctm, &policy));
  std::vector<int64_t> axes;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> given, c.node.attr_ints("axes"));
  if (c.node.attr("axes") != nullptr) {
    BP_ASSIGN_OR_RETURN(axes, c.normalize_axes(given, r, "axes"));
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  const size_t n = axes.size();
  const bool has_scales = c.has(2) && detail::sat_numel(c.shape(2)) > 0;
  const bool has_sizes = c.has(3) && detail::sat_numel(c.shape(3)) > 0;
  if (has_scales == has_sizes) return c.error("exactly one of 'scales' and 'sizes' must be given");
  Shape out = x;
  if (has_sizes) {
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, c.ints_input(3, "sizes"));
    if (sizes.size() != n)
      return c.error("sizes " + dims(sizes) + " has " + std::to_string(sizes.size()) +
                     " values for " + std::to_string(n) + " axes");
    for (int64_t s : sizes)
      if (s < 0 || s > kMaxElements)
        return c.error("sizes " + dims(sizes) + " has a value out of range");
    if (policy == "stretch") {
      for (size_t k = 0; k < n; ++k) out[axes[k]] = sizes[k];
    } else {
      double scale = policy == "not_larger" ? INFINITY : 0.0;
      for (size_t k = 0; k < n; ++k) {
        if (x[axes[k]] == 0) return c.error("keep_aspect_ratio_policy needs non-empty dims");
        const double s = static_cast<double>(sizes[k]) / static_cast<double>(x[axes[k]]);
        scale = policy == "not_larger" ? std::min(scale, s) : std::max(scale, s);
      }
      for (size_t k = 0; k < n; ++k)
        out[axes[k]] =
            static_cast<int64_t>(std::floor(scale * static_cast<double>(x[axes[k]]) + 0.5));
    }
  } else {
    BP_ASSIGN_OR_RETURN(std::vector<double> scales, c.numbers_input(2, "scales"));
    if (scales.size() != n)
      return c.error("scales has " + std::to_string(scales.size()) + " values for " +
                     std::to_string(n) + " axes");
    std::vector<double> roi;
    if (ctm == "tf_crop_and_resize") {
      if (!c.has(1)) return c.error("input 'roi' is required with tf_crop_and_resize");
      BP_ASSIGN_OR_RETURN(roi, c.numbers_input(1, "roi"));
      if (roi.size() != 2 * n) return c.error("input 'roi' must have two values per axis");
    }
    for (size_t k = 0; k < n; ++k) {
      if (!(scales[k] > 0)) return c.error("scales must be positive");
      const float s = static_cast<float>(scales[k]);  // float32, as the ONNX reference
      float extent = static_cast<float>(x[axes[k]]);
      if (!roi.empty()) extent *= static_cast<float>(roi[k + n] - roi[k]);
      const double size = std::floor(static_cast<double>(extent * s));
      if (!(size >= 0 && size <= static_cast<double>(kMaxElements)))
        return c.error("scales give dim " + std::to_string(axes[k]) + " the size " +
                       std::to_string(size));
      out[axes[k]] = static_cast<int64_t>(size);
    }
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// -------------------------------------------------------------- scatter

Status infer_scatter(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(std::string reduction, c.node.attr_string("reduction", "none"));
  if (reduction != "none" && reduction != "add" && reduction != "mul" && reduction != "max" &&
      reduction != "min")
    return c.error("attribute 'reduction' is '" + reduction +
                   "', expected none, add, mul, max or min");
  if (c.node.op_type == "ScatterElements") {
    BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
    BP_ASSIGN_OR_RETURN(int64_t ax, c.normalize_axis(axis, c.rank(0), "axis"));
    (void)ax;
    if (c.rank(1) != c.rank(0) || c.shape(1) != c.shape(2))
      return c.error("indices " + dims(c.shape(1)) + " and updates " + dims(c.shape(2)) +
                     " must have the same shape, of the rank of data " + dims(c.shape(0)));
  } else {
    // ScatterND: updates = indices[:-1] + data[indices[-1]:].
    const Shape& idx = c.shape(1);
    if (idx.empty()) return c.error("input 'indices' must have at least one dim");
    const int64_t k = idx.back();
    if (k < 1 || k > c.rank(0))
      return c.error("the last dim of indices " + dims(idx) + " must be in [1, " +
                     std::to_string(c.rank(0)) + "]");
    Shape want(idx.begin(), idx.end() - 1);
    want.insert(want.end(), c.shape(0).begin() + k, c.shape(0).end());
    if (c.shape(2) != want)
      return c.error("updates " + dims(c.shape(2)) + " must have shape " + dims(want));
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

// -------------------------------------------------------------- new ops

// GroupNormalization-18: scale and bias hold one value per group.
Status infer_group_norm(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t groups, c.node.attr_int("num_groups", 0));
  if (c.rank(0) < 2) return c.error("input 'X' " + dims(c.shape(0)) + " needs at least 2 dims");
  const int64_t ch = c.shape(0)[1];
  if (groups < 1 || ch % groups != 0)
    return c.error("num_groups " + std::to_string(groups) + " must divide the " +
                   std::to_string(ch) + " channels");
  for (size_t i : {size_t{1}, size_t{2}})
    if (c.shape(i) != Shape{groups})
      return c.error("input '" + c.name(i) + "' " + dims(c.shape(i)) + " must have shape [" +
                     std::to_string(groups) + "] (one value per group, opset 18)");
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_center_crop_pad(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ints_input(1, "shape"));
  const int64_t r = c.rank(0);
  std::vector<int64_t> axes;
  if (c.node.attr("axes") != nullptr) {
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> given, c.node.attr_ints("axes"));
    BP_ASSIGN_OR_RETURN(axes, c.normalize_axes(given, r, "axes"));
  } else {
    for (int64_t d = 0; d < r; ++d) axes.push_back(d);
  }
  if (shape.size() != axes.size())
    return c.error("shape " + dims(shape) + " has " + std::to_string(shape.size()) +
                   " values for " + std::to_string(axes.size()) + " axes");
  Shape out = c.shape(0);
  for (size_t k = 0; k < axes.size(); ++k) {
    if (shape[k] < 0 || shape[k] > kMaxElements)
      return c.error("shape " + dims(shape) + " has a value out of range");
    out[axes[k]] = shape[k];
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// Per spatial dim: attribute `name` or `fill` for each of `n` dims.
Result<std::vector<int64_t>> per_dim(const InferCtx& c, const char* name, size_t n, int64_t fill,
                                     size_t count_factor = 1) {
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> v, c.node.attr_ints(name));
  if (c.node.attr(name) == nullptr) return std::vector<int64_t>(n * count_factor, fill);
  if (v.size() != n * count_factor)
    return c.error(std::string("attribute '") + name + "' " + dims(v) + " has " +
                   std::to_string(v.size()) + " values, expected " +
                   std::to_string(n * count_factor));
  return v;
}

// Col2Im-18: (N, C * prod(block), L) -> (N, C, *image_shape).
Status infer_col2im(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.expect_rank(0, 3, "input"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> image, c.ints_input(1, "image_shape"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> block, c.ints_input(2, "block_shape"));
  const size_t n = image.size();
  if (n == 0 || block.size() != n)
    return c.error("image_shape " + dims(image) + " and block_shape " + dims(block) +
                   " must be non-empty and of the same length");
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, per_dim(c, "dilations", n, 1));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pads, per_dim(c, "pads", n, 0, 2));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> strides, per_dim(c, "strides", n, 1));
  int64_t block_size = 1, blocks = 1;
  for (size_t d = 0; d < n; ++d) {
    if (image[d] < 1 || block[d] < 1 || dil[d] < 1 || strides[d] < 1 || pads[d] < 0 ||
        pads[d + n] < 0 || image[d] > kMaxElements || block[d] > kMaxElements ||
        dil[d] > kMaxElements || pads[d] > kMaxElements || pads[d + n] > kMaxElements)
      return c.error(
          "image_shape, block_shape, dilations, strides and pads must be positive "
          "(pads non-negative) and in range");
    const int64_t extent = image[d] + pads[d] + pads[d + n] - (dil[d] * (block[d] - 1) + 1);
    if (extent < 0) return c.error("block " + std::to_string(d) + " does not fit the padded image");
    blocks = detail::sat_mul(blocks, extent / strides[d] + 1);
    block_size = detail::sat_mul(block_size, block[d]);
  }
  const Shape& in = c.shape(0);
  if (in[1] % block_size != 0)
    return c.error("dim 1 of the input " + dims(in) + " is not a multiple of the block size " +
                   std::to_string(block_size));
  if (in[2] != blocks)
    return c.error("dim 2 of the input " + dims(in) + " must be the number of blocks, " +
                   std::to_string(blocks));
  Shape out = {in[0], in[1] / block_size};
  out.insert(out.end(), image.begin(), image.end());
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// LpPool-18: as the other pools, with ceil_mode and dilations.
Status infer_lp_pool(InferCtx& c) {
  const Shape& x = c.shape(0);
  if (x.size() < 3) return c.error("input 'X' " + dims(x) + " needs at least 3 dims");
  const size_t n = x.size() - 2;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, c.node.attr_ints("kernel_shape"));
  if (kernel.size() != n)
    return c.error("kernel_shape " + dims(kernel) + " must have " + std::to_string(n) + " values");
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> dil, per_dim(c, "dilations", n, 1));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> strides, per_dim(c, "strides", n, 1));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pads, per_dim(c, "pads", n, 0, 2));
  BP_ASSIGN_OR_RETURN(std::string auto_pad, c.node.attr_string("auto_pad", "NOTSET"));
  BP_ASSIGN_OR_RETURN(int64_t ceil_mode, c.node.attr_int("ceil_mode", 0));
  BP_ASSIGN_OR_RETURN(int64_t p, c.node.attr_int("p", 2));
  if (p < 1) return c.error("attribute 'p' is " + std::to_string(p) + ", expected at least 1");
  Shape out = {x[0], x[1]};
  for (size_t d = 0; d < n; ++d) {
    if (kernel[d] < 1 || dil[d] < 1 || strides[d] < 1 || pads[d] < 0 || pads[d + n] < 0 ||
        kernel[d] > kMaxElements || dil[d] > kMaxElements || pads[d] > kMaxElements ||
        pads[d + n] > kMaxElements)
      return c.error("kernel_shape, dilations and strides must be positive, pads non-negative");
    const int64_t window = dil[d] * (kernel[d] - 1) + 1;
    int64_t len;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      len = (x[d + 2] + strides[d] - 1) / strides[d];
    } else if (auto_pad == "VALID") {
      len = x[d + 2] < window ? 0 : (x[d + 2] - window) / strides[d] + 1;
    } else if (auto_pad == "NOTSET") {
      const int64_t span = x[d + 2] + pads[d] + pads[d + n] - window;
      if (span < 0) return c.error("the window does not fit the padded input " + dims(x));
      len = (ceil_mode != 0 ? (span + strides[d] - 1) / strides[d] : span / strides[d]) + 1;
      // With ceil_mode, a last window that would start in the end padding is dropped.
      if (ceil_mode != 0 && (len - 1) * strides[d] >= x[d + 2] + pads[d]) --len;
    } else {
      return c.error("attribute 'auto_pad' is '" + auto_pad + "'");
    }
    out.push_back(len);
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_broadcast_binary(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(Shape out, detail::broadcast_shapes(c, {0, 1}));
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_same(InferCtx& c) {
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

void add_changed_ops(OpRegistry& r) {
  (void)r.add(OpSchema("", "Split", 18)
                  .doc("parts of a tensor along an axis: sizes, num_outputs chunks, or equal parts")
                  .input("input", "T")
                  .optional_input("split", "tensor(int64)")
                  .variadic_output("outputs", "T", 1)
                  .type("T", dtypes::kAll)
                  .type("tensor(int64)", {DType::kInt64})
                  .attr("axis", AttrType::kInt, int64_t{0})
                  .attr("num_outputs", AttrType::kInt)
                  .shape_inputs({"split"})
                  .infer(infer_split));
  (void)r.add(OpSchema("", "Pad", 18)
                  .doc("pads the given axes: constant, reflect or edge")
                  .input("data", "T")
                  .input("pads", "tensor(int64)")
                  .optional_input("constant_value", "T")
                  .optional_input("axes", "Tind")
                  .output("output", "T")
                  .type("T", dtypes::kAll)
                  .type("tensor(int64)", {DType::kInt64})
                  .type("Tind", dtypes::kIndex)
                  .attr("mode", AttrType::kString, std::string("constant"))
                  .shape_inputs({"pads", "axes"})
                  .infer(infer_pad));
  (void)r.add(
      OpSchema("", "Resize", 18)
          .doc("nearest, linear or cubic resampling of the given axes")
          .input("X", "T1")
          .optional_input("roi", "T2")
          .optional_input("scales", "tensor(float)")
          .optional_input("sizes", "tensor(int64)")
          .output("Y", "T1")
          .type("T1", dtypes::kAll)
          .type("T2", kFloat16To64)
          .type("tensor(float)", {DType::kFloat32})
          .type("tensor(int64)", {DType::kInt64})
          .attr("antialias", AttrType::kInt, int64_t{0})
          .attr("axes", AttrType::kInts)
          .attr("coordinate_transformation_mode", AttrType::kString, std::string("half_pixel"))
          .attr("cubic_coeff_a", AttrType::kFloat, -0.75f)
          .attr("exclude_outside", AttrType::kInt, int64_t{0})
          .attr("extrapolation_value", AttrType::kFloat, 0.0f)
          .attr("keep_aspect_ratio_policy", AttrType::kString, std::string("stretch"))
          .attr("mode", AttrType::kString, std::string("nearest"))
          .attr("nearest_mode", AttrType::kString, std::string("round_prefer_floor"))
          .shape_inputs({"scales", "sizes"})
          .infer(infer_resize));
  (void)r.add(OpSchema("", "ScatterElements", 18)
                  .doc("data with updates written at indices along an axis (reduction none, "
                       "add, mul, max, min)")
                  .input("data", "T")
                  .input("indices", "Tind")
                  .input("updates", "T")
                  .output("output", "T")
                  .type("T", dtypes::kAll)
                  .type("Tind", dtypes::kIndex)
                  .attr("axis", AttrType::kInt, int64_t{0})
                  .attr("reduction", AttrType::kString, std::string("none"))
                  .infer(infer_scatter));
  (void)r.add(OpSchema("", "ScatterND", 18)
                  .doc("data with updates written at N-d indices (reduction none, add, mul, "
                       "max, min)")
                  .input("data", "T")
                  .input("indices", "tensor(int64)")
                  .input("updates", "T")
                  .output("output", "T")
                  .type("T", dtypes::kAll)
                  .type("tensor(int64)", {DType::kInt64})
                  .attr("reduction", AttrType::kString, std::string("none"))
                  .infer(infer_scatter));
  (void)r.add(OpSchema("", "LpPool", 18)
                  .doc("Lp norm of each window")
                  .input("X", "T")
                  .output("Y", "T")
                  .type("T", kFloat16To64)
                  .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                  .attr("ceil_mode", AttrType::kInt, int64_t{0})
                  .attr("dilations", AttrType::kInts)
                  .required_attr("kernel_shape", AttrType::kInts)
                  .attr("p", AttrType::kInt, int64_t{2})
                  .attr("pads", AttrType::kInts)
                  .attr("strides", AttrType::kInts)
                  .infer(infer_lp_pool));
}

void add_new_ops(OpRegistry& r) {
  (void)r.add(OpSchema("", "GroupNormalization", 18)
                  .doc("normalisation over groups of channels; scale and bias per group")
                  .input("X", "T")
                  .input("scale", "T")
                  .input("bias", "T")
                  .output("Y", "T")
                  .type("T", dtypes::kFloat)
                  .attr("epsilon", AttrType::kFloat, 1e-5f)
                  .required_attr("num_groups", AttrType::kInt)
                  .infer(infer_group_norm));
  (void)r.add(OpSchema("", "CenterCropPad", 18)
                  .doc("crops or pads (with zeros) the given axes around their centre")
                  .input("input_data", "T")
                  .input("shape", "Tind")
                  .output("output_data", "T")
                  .type("T", dtypes::kAll)
                  .type("Tind", dtypes::kIndex)
                  .attr("axes", AttrType::kInts)
                  .shape_inputs({"shape"})
                  .infer(infer_center_crop_pad));
  (void)r.add(OpSchema("", "Col2Im", 18)
                  .doc("rearranges column blocks into an image, summing overlaps")
                  .input("input", "T")
                  .input("image_shape", "tensor(int64)")
                  .input("block_shape", "tensor(int64)")
                  .output("output", "T")
                  .type("T", dtypes::kAll)
                  .type("tensor(int64)", {DType::kInt64})
                  .attr("dilations", AttrType::kInts)
                  .attr("pads", AttrType::kInts)
                  .attr("strides", AttrType::kInts)
                  .shape_inputs({"image_shape", "block_shape"})
                  .infer(infer_col2im));
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"})
    (void)r.add(OpSchema("", op, 18)
                    .doc("bitwise operation of two integer tensors (numpy broadcasting)")
                    .input("A", "T")
                    .input("B", "T")
                    .output("C", "T")
                    .type("T", dtypes::kInt)
                    .infer(infer_broadcast_binary));
  (void)r.add(OpSchema("", "BitwiseNot", 18)
                  .doc("bitwise complement of an integer tensor")
                  .input("X", "T")
                  .output("Y", "T")
                  .type("T", dtypes::kInt)
                  .infer(infer_same));
  (void)r.add(OpSchema("", "Mish", 18)
                  .doc("x * tanh(softplus(x))")
                  .input("X", "T")
                  .output("Y", "T")
                  .type("T", kFloat16To64)
                  .infer(infer_same));
}

}  // namespace

void register_opset18_ops(OpRegistry& registry) {
  add_reductions(registry);
  add_changed_ops(registry);
  add_new_ops(registry);
}

}  // namespace backplane::ir::ops
