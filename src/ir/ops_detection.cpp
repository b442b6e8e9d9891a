// ops_detection.cpp — schemas: NonMaxSuppression, RoiAlign, MaxRoiPool, GridSample.
//
// NonMaxSuppression's output length depends on the scores and boxes
// (ShapeDependence::kData: [-1, 3]). RoiAlign, MaxRoiPool and GridSample
// have static shapes.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <string>
#include <vector>

namespace backplane::ir::ops {
namespace {

using detail::InferCtx;

std::string dims(const Shape& s) { return shape_to_string(s); }

// ONNX's list for GridSample's T1: every type but bfloat16 (and string, complex).
DTypeList without_bf16() {
  DTypeList out;
  for (DType d : dtypes::kAll)
    if (d != DType::kBFloat16) out.push_back(d);
  return out;
}

Status infer_nms(InferCtx& c) {
  const Shape& boxes = c.shape(0);
  const Shape& scores = c.shape(1);
  if (boxes.size() != 3 || boxes[2] != 4)
    return c.error("'boxes' must have shape [batch, boxes, 4], it has " + dims(boxes));
  if (scores.size() != 3)
    return c.error("'scores' must have shape [batch, classes, boxes], it has " + dims(scores));
  if (scores[0] != boxes[0] || scores[2] != boxes[1])
    return c.error("'scores' " + dims(scores) + " does not match 'boxes' " + dims(boxes) +
                   " (expected [" + std::to_string(boxes[0]) + ", classes, " +
                   std::to_string(boxes[1]) + "])");
  const char* names[] = {"boxes", "scores", "max_output_boxes_per_class", "iou_threshold",
                         "score_threshold"};
  for (size_t i = 2; i < c.num_inputs(); ++i)
    if (c.has(i) && detail::sat_numel(c.shape(i)) != 1)
      return c.error(std::string("'") + names[i] + "' must hold one value, it has shape " +
                     dims(c.shape(i)));
  BP_ASSIGN_OR_RETURN(int64_t center, c.node.attr_int("center_point_box", 0));
  if (center != 0 && center != 1)
    return c.error("center_point_box must be 0 or 1, got " + std::to_string(center));
  c.set(0, DType::kInt64, {-1, 3});
  return ok_status();
}

Status infer_roi_align(InferCtx& c) {
  const Shape& x = c.shape(0);
  const Shape& rois = c.shape(1);
  if (x.size() != 4) return c.error("'X' must be 4-D [N, C, H, W], it has shape " + dims(x));
  if (rois.size() != 2 || rois[1] != 4)
    return c.error("'rois' must have shape [num_rois, 4], it has " + dims(rois));
  if (c.rank(2) != 1 || c.shape(2)[0] != rois[0])
    return c.error("'batch_indices' must have shape [" + std::to_string(rois[0]) + "], it has " +
                   dims(c.shape(2)));
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", "avg"));
  if (mode != "avg" && mode != "max") return c.error("mode '" + mode + "' is not avg or max");
  if (c.opset >= 16) {
    BP_ASSIGN_OR_RETURN(std::string ctm,
                        c.node.attr_string("coordinate_transformation_mode", "half_pixel"));
    if (ctm != "half_pixel" && ctm != "output_half_pixel")
      return c.error("coordinate_transformation_mode '" + ctm +
                     "' is not half_pixel or output_half_pixel");
  }
  BP_ASSIGN_OR_RETURN(int64_t oh, c.node.attr_int("output_height", 1));
  BP_ASSIGN_OR_RETURN(int64_t ow, c.node.attr_int("output_width", 1));
  BP_ASSIGN_OR_RETURN(int64_t ratio, c.node.attr_int("sampling_ratio", 0));
  if (oh < 1 || ow < 1)
    return c.error("output_height " + std::to_string(oh) + " and output_width " +
                   std::to_string(ow) + " must be >= 1");
  if (ratio < 0) return c.error("sampling_ratio must be >= 0, got " + std::to_string(ratio));
  c.set(0, c.dtype(0), {rois[0], x[1], oh, ow});
  return ok_status();
}

Status infer_grid_sample(InferCtx& c) {
  const Shape& x = c.shape(0);
  const Shape& grid = c.shape(1);
  if (x.size() != 4) return c.error("'X' must be 4-D [N, C, H, W], it has shape " + dims(x));
  if (grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
    return c.error("'grid' must have shape [" + std::to_string(x[0]) +
                   ", H_out, W_out, 2], it has " + dims(grid));
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", "bilinear"));
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic")
    return c.error("mode '" + mode + "' is not bilinear, nearest or bicubic");
  BP_ASSIGN_OR_RETURN(std::string pad, c.node.attr_string("padding_mode", "zeros"));
  if (pad != "zeros" && pad != "border" && pad != "reflection")
    return c.error("padding_mode '" + pad + "' is not zeros, border or reflection");
  BP_ASSIGN_OR_RETURN(int64_t align, c.node.attr_int("align_corners", 0));
  if (align != 0 && align != 1) return c.error("align_corners must be 0 or 1");
  // ONNX types Y as T2 (floats) but also propagates X's type to Y, so only a
  // float X yields a valid output.
  const DType t = c.dtype(0);
  if (t != DType::kFloat16 && t != DType::kFloat32 && t != DType::kFloat64)
    return c.unsupported_error("'X' has dtype " + std::string(dtype_name(t)) +
                               "; the output takes X's dtype, which must be float16, float32 "
                               "or float64");
  c.set(0, t, {x[0], x[1], grid[1], grid[2]});
  return ok_status();
}

// MaxRoiPool: rois are [num_rois, 5] rows (batch_index, x1, y1, x2, y2).
Status infer_max_roi_pool(InferCtx& c) {
  const Shape& x = c.shape(0);
  const Shape& rois = c.shape(1);
  if (x.size() != 4) return c.error("'X' must be 4-D [N, C, H, W], it has shape " + dims(x));
  if (rois.size() != 2 || rois[1] != 5)
    return c.error("'rois' must have shape [num_rois, 5], it has " + dims(rois));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pooled, c.node.attr_ints("pooled_shape"));
  if (pooled.size() != 2 || pooled[0] < 1 || pooled[1] < 1)
    return c.error("pooled_shape must be two positive sizes");
  c.set(0, c.dtype(0), {rois[0], x[1], pooled[0], pooled[1]});
  return ok_status();
}

}  // namespace

void register_detection_ops(OpRegistry& r) {
  const DTypeList f32 = {DType::kFloat32};
  const DTypeList i64 = {DType::kInt64};
  const DTypeList floats = {DType::kFloat16, DType::kFloat32, DType::kFloat64};

  for (int since : {10, 11})
    (void)r.add(OpSchema("", "NonMaxSuppression", since)
                    .doc("greedy per-class selection of boxes by score, dropping overlaps")
                    .input("boxes", "F")
                    .input("scores", "F")
                    .optional_input("max_output_boxes_per_class", "I")
                    .optional_input("iou_threshold", "F")
                    .optional_input("score_threshold", "F")
                    .output("selected_indices", "I")
                    .type("F", f32)
                    .type("I", i64)
                    .attr("center_point_box", AttrType::kInt, int64_t{0})
                    .shape_dependence(ShapeDependence::kData)
                    .infer(infer_nms));

  for (int since : {10, 16}) {
    OpSchema s("", "RoiAlign", since);
    s.doc("bilinear-sampled average (or max) pooling of each region of interest")
        .input("X", "T1")
        .input("rois", "T1")
        .input("batch_indices", "T2")
        .output("Y", "T1")
        .type("T1", floats)
        .type("T2", i64)
        .attr("mode", AttrType::kString, std::string("avg"))
        .attr("output_height", AttrType::kInt, int64_t{1})
        .attr("output_width", AttrType::kInt, int64_t{1})
        .attr("sampling_ratio", AttrType::kInt, int64_t{0})
        .attr("spatial_scale", AttrType::kFloat, 1.0f)
        .infer(infer_roi_align);
    if (since >= 16)
      s.attr("coordinate_transformation_mode", AttrType::kString, std::string("half_pixel"));
    (void)r.add(std::move(s));
  }

  (void)r.add(OpSchema("", "MaxRoiPool", 1)
                  .doc("max pooling of each region of interest over a pooled_shape grid")
                  .input("X", "T")
                  .input("rois", "T")
                  .output("Y", "T")
                  .type("T", floats)
                  .required_attr("pooled_shape", AttrType::kInts)
                  .attr("spatial_scale", AttrType::kFloat, 1.0f)
                  .infer(infer_max_roi_pool));

  (void)r.add(OpSchema("", "GridSample", 16)
                  .doc("samples X at the normalised locations of grid (torch grid_sample)")
                  .input("X", "T1")
                  .input("grid", "T1")
                  .output("Y", "T2")
                  .type("T1", without_bf16())
                  .type("T2", floats)
                  .attr("align_corners", AttrType::kInt, int64_t{0})
                  .attr("mode", AttrType::kString, std::string("bilinear"))
                  .attr("padding_mode", AttrType::kString, std::string("zeros"))
                  .infer(infer_grid_sample));
}

}  // namespace backplane::ir::ops
