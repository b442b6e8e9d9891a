// ops_quant.cpp — schemas: quantization operators.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using detail::sat_numel;

constexpr DType F32 = DType::kFloat32, I32 = DType::kInt32, U8 = DType::kUInt8;
const DTypeList kQuant8 = {DType::kInt8, DType::kUInt8};

std::string dims(const Shape& s) { return shape_to_string(s); }

// A scale or zero point: one element (per tensor) or, when `axis_dim` >= 0,
// a 1-D tensor of that many (per axis).
Status check_quant_param(const InferCtx& c, size_t i, int64_t axis_dim, const char* what) {
  if (!c.has(i)) return ok_status();
  const Shape& s = c.shape(i);
  if (sat_numel(s) == 1 && s.size() <= 1) return ok_status();
  if (axis_dim >= 0 && s.size() == 1 && s[0] == axis_dim) return ok_status();
  return c.error(std::string(what) + " '" + c.name(i) + "' has shape " + dims(s) +
                 (axis_dim >= 0 ? ", expected one element or [" + std::to_string(axis_dim) + "]"
                                : ", expected a scalar"));
}

// A constant scale must be finite and positive: a zero scale divides by zero
// in QuantizeLinear and a negative or non-finite one maps every value to a
// saturated or meaningless integer, which would surface as wrong outputs far
// from the node. Scales computed at run time are not checked here.
Status check_scale_values(const InferCtx& c, size_t i, const char* what) {
  const Tensor* t = c.constant(i);
  if (t == nullptr || t->dtype() != F32) return ok_status();
  const float* v = t->data_as<float>();
  for (int64_t k = 0; k < t->numel(); ++k) {
    if (std::isfinite(v[k]) && v[k] > 0) continue;
    char text[32];
    std::snprintf(text, sizeof text, "%g", static_cast<double>(v[k]));
    return c.error(std::string(what) + " '" + c.name(i) + "' has " +
                   (t->numel() == 1 ? "value " : "element " + std::to_string(k) + " = ") + text +
                   ", expected a finite number > 0");
  }
  return ok_status();
}

Status check_scale(const InferCtx& c, size_t i, int64_t axis_dim, const char* what) {
  BP_RETURN_IF_ERROR(check_quant_param(c, i, axis_dim, what));
  return check_scale_values(c, i, what);
}

// The length of the quantization axis of input 0 (opset 13's `axis`), or -1
// when quantization is per tensor (always before opset 13; `axis` is then
// not read, so its default of 1 does not reject a 1-D input).
Result<int64_t> quant_axis_dim(const InferCtx& c) {
  if (c.opset < 13 || (sat_numel(c.shape(1)) == 1 && c.rank(1) <= 1)) return int64_t{-1};
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 1));
  if (c.rank(0) == 0) return int64_t{-1};
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, c.rank(0), "axis"));
  return c.shape(0)[a];
}

Status infer_quantize(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t axis_dim, quant_axis_dim(c));
  BP_RETURN_IF_ERROR(check_scale(c, 1, axis_dim, "y_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 2, axis_dim, "y_zero_point"));
  if (c.has(2) && c.shape(2) != c.shape(1))
    return c.error("y_scale " + dims(c.shape(1)) + " and y_zero_point " + dims(c.shape(2)) +
                   " differ in shape");
  c.set(0, c.has(2) ? c.dtype(2) : U8, c.shape(0));
  return ok_status();
}

Status infer_dequantize(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t axis_dim, quant_axis_dim(c));
  BP_RETURN_IF_ERROR(check_scale(c, 1, axis_dim, "x_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 2, axis_dim, "x_zero_point"));
  if (c.has(2) && c.shape(2) != c.shape(1))
    return c.error("x_scale " + dims(c.shape(1)) + " and x_zero_point " + dims(c.shape(2)) +
                   " differ in shape");
  c.set(0, F32, c.shape(0));
  return ok_status();
}

Status infer_dynamic_quantize(InferCtx& c) {
  c.set(0, U8, c.shape(0));
  c.set(1, F32, {});
  c.set(2, U8, {});
  return ok_status();
}

// numpy matmul of inputs a and b (1-D operands promoted, batch dims broadcast).
Result<Shape> matmul_shape(const InferCtx& c, size_t ia, size_t ib) {
  Shape a = c.shape(ia), b = c.shape(ib);
  if (a.empty() || b.empty())
    return c.error("matmul operands must have rank >= 1, got " + dims(a) + " and " + dims(b));
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    return c.error("inner dims of " + dims(c.shape(ia)) + " and " + dims(c.shape(ib)) + " differ");
  Shape batch;
  const size_t na = a.size() - 2, nb = b.size() - 2, n = std::max(na, nb);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - na ? 1 : a[i - (n - na)];
    const int64_t db = i < n - nb ? 1 : b[i - (n - nb)];
    if (da != db && da != 1 && db != 1)
      return c.error("batch dims of " + dims(c.shape(ia)) + " and " + dims(c.shape(ib)) +
                     " do not broadcast");
    batch.push_back(da == 1 ? db : da);
  }
  if (!a_vec) batch.push_back(a[a.size() - 2]);
  if (!b_vec) batch.push_back(b.back());
  return batch;
}

Status infer_matmul_integer(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(Shape y, matmul_shape(c, 0, 1));
  const Shape& a = c.shape(0);
  const Shape& b = c.shape(1);
  BP_RETURN_IF_ERROR(check_quant_param(c, 2, a.size() >= 2 ? a[a.size() - 2] : -1, "a_zero_point"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 3, b.size() >= 2 ? b.back() : -1, "b_zero_point"));
  c.set(0, I32, y);
  return ok_status();
}

Status infer_qlinear_matmul(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(Shape y, matmul_shape(c, 0, 3));
  const Shape& a = c.shape(0);
  const Shape& b = c.shape(3);
  const int64_t rows = a.size() >= 2 ? a[a.size() - 2] : -1, cols = b.size() >= 2 ? b.back() : -1;
  BP_RETURN_IF_ERROR(check_scale(c, 1, rows, "a_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 2, rows, "a_zero_point"));
  BP_RETURN_IF_ERROR(check_scale(c, 4, cols, "b_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 5, cols, "b_zero_point"));
  BP_RETURN_IF_ERROR(check_scale(c, 6, -1, "y_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 7, -1, "y_zero_point"));
  c.set(0, c.dtype(7), y);
  return ok_status();
}

// Conv's output shape for input `ix` [N, C, spatial...] and weight `iw`
// [M, C/group, kernel...], from auto_pad/pads/strides/dilations/group.
Result<Shape> conv_shape(const InferCtx& c, size_t ix, size_t iw) {
  const Shape& x = c.shape(ix);
  const Shape& w = c.shape(iw);
  if (x.size() < 3 || w.size() != x.size())
    return c.error("input " + dims(x) + " and weight " + dims(w) +
                   " must be [N, C, spatial...] and [M, C/group, kernel...] of one rank");
  const size_t n = x.size() - 2;
  BP_ASSIGN_OR_RETURN(int64_t group, c.node.attr_int("group", 1));
  if (group < 1 || x[1] != w[1] * group || w[0] % group != 0)
    return c.error("group " + std::to_string(group) + " does not fit input " + dims(x) +
                   " and weight " + dims(w));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, c.node.attr_ints("kernel_shape"));
  if (kernel.empty()) kernel.assign(w.begin() + 2, w.end());
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                      c.node.attr_ints("strides", std::vector<int64_t>(n, 1)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> dil,
                      c.node.attr_ints("dilations", std::vector<int64_t>(n, 1)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                      c.node.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  Result<std::string> auto_pad = c.node.attr_string("auto_pad", "NOTSET");
  if (!auto_pad.ok()) return auto_pad.status();
  if (kernel.size() != n || strides.size() != n || dil.size() != n || pads.size() != 2 * n)
    return c.error("kernel_shape, strides, dilations and pads must have " + std::to_string(n) +
                   " (pads " + std::to_string(2 * n) + ") values");
  for (size_t d = 0; d < n; ++d) {
    if (kernel[d] != w[d + 2]) return c.error("kernel_shape disagrees with weight " + dims(w));
    if (strides[d] < 1 || dil[d] < 1 || pads[d] < 0 || pads[d + n] < 0)
      return c.error("strides and dilations must be >= 1 and pads >= 0");
  }
  Shape y = {x[0], w[0]};
  for (size_t d = 0; d < n; ++d) {
    const int64_t in = x[d + 2], ext = dil[d] * (kernel[d] - 1) + 1;
    int64_t out;
    if (*auto_pad == "SAME_UPPER" || *auto_pad == "SAME_LOWER") {
      out = (in + strides[d] - 1) / strides[d];
    } else if (*auto_pad == "VALID") {
      out = in >= ext ? (in - ext) / strides[d] + 1 : 0;
    } else if (*auto_pad == "NOTSET") {
      const int64_t padded = in + pads[d] + pads[d + n];
      out = padded >= ext ? (padded - ext) / strides[d] + 1 : 0;
    } else {
      return c.error("auto_pad '" + *auto_pad + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
    }
    if (out < 1) return c.error("the kernel is larger than the padded input " + dims(x));
    y.push_back(out);
  }
  return y;
}

Status infer_conv_integer(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(Shape y, conv_shape(c, 0, 1));
  BP_RETURN_IF_ERROR(check_quant_param(c, 2, -1, "x_zero_point"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 3, c.shape(1)[0], "w_zero_point"));
  c.set(0, I32, y);
  return ok_status();
}

Status infer_qlinear_conv(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(Shape y, conv_shape(c, 0, 3));
  const int64_t m = c.shape(3)[0];
  BP_RETURN_IF_ERROR(check_scale(c, 1, -1, "x_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 2, -1, "x_zero_point"));
  BP_RETURN_IF_ERROR(check_scale(c, 4, m, "w_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 5, m, "w_zero_point"));
  BP_RETURN_IF_ERROR(check_scale(c, 6, -1, "y_scale"));
  BP_RETURN_IF_ERROR(check_quant_param(c, 7, -1, "y_zero_point"));
  if (c.has(8) && c.shape(8) != Shape{m})
    return c.error("bias '" + c.name(8) + "' has shape " + dims(c.shape(8)) + ", expected [" +
                   std::to_string(m) + "]");
  c.set(0, c.dtype(7), y);
  return ok_status();
}

OpSchema& conv_attrs(OpSchema& s) {
  return s.attr("auto_pad", AttrType::kString, std::string("NOTSET"))
      .attr("dilations", AttrType::kInts)
      .attr("group", AttrType::kInt, int64_t{1})
      .attr("kernel_shape", AttrType::kInts)
      .attr("pads", AttrType::kInts)
      .attr("strides", AttrType::kInts);
}

}  // namespace

void register_quant_ops(OpRegistry& registry) {
  auto add = [&](OpSchema s) { (void)registry.add(std::move(s)); };
  for (int since : {10, 13}) {
    OpSchema q("", "QuantizeLinear", since);
    q.doc("saturate(round(x / y_scale) + y_zero_point); per tensor, or per axis from opset 13")
        .input("x", "T1")
        .input("y_scale", "TS")
        .optional_input("y_zero_point", "T2")
        .output("y", "T2")
        .type("T1", {F32, I32})
        .type("TS", {F32})
        .type("T2", kQuant8)
        .infer(infer_quantize);
    if (since >= 13) q.attr("axis", AttrType::kInt, int64_t{1});
    add(std::move(q));
    OpSchema dq("", "DequantizeLinear", since);
    dq.doc("(x - x_zero_point) * x_scale; per tensor, or per axis from opset 13")
        .input("x", "T")
        .input("x_scale", "TS")
        .optional_input("x_zero_point", "T")
        .output("y", "TS")
        .type("T", {DType::kInt8, U8, I32})
        .type("TS", {F32})
        .infer(infer_dequantize);
    if (since >= 13) dq.attr("axis", AttrType::kInt, int64_t{1});
    add(std::move(dq));
  }
  add(OpSchema("", "DynamicQuantizeLinear", 11)
          .doc("uint8 quantization of x with a scale and zero point computed from its range")
          .input("x", "T1")
          .output("y", "T2")
          .output("y_scale", "TS")
          .output("y_zero_point", "T2")
          .type("T1", {F32})
          .type("TS", {F32})
          .type("T2", {U8})
          .infer(infer_dynamic_quantize));
  add(OpSchema("", "MatMulInteger", 10)
          .doc("int32 matmul of (A - a_zero_point) and (B - b_zero_point)")
          .input("A", "T1")
          .input("B", "T2")
          .optional_input("a_zero_point", "T1")
          .optional_input("b_zero_point", "T2")
          .output("Y", "T3")
          .type("T1", kQuant8)
          .type("T2", kQuant8)
          .type("T3", {I32})
          .infer(infer_matmul_integer));
  add(OpSchema("", "QLinearMatMul", 10)
          .doc("quantized matmul: requantizes the int32 product to y_scale / y_zero_point")
          .input("a", "T1")
          .input("a_scale", "TS")
          .input("a_zero_point", "T1")
          .input("b", "T2")
          .input("b_scale", "TS")
          .input("b_zero_point", "T2")
          .input("y_scale", "TS")
          .input("y_zero_point", "T3")
          .output("y", "T3")
          .type("TS", {F32})
          .type("T1", kQuant8)
          .type("T2", kQuant8)
          .type("T3", kQuant8)
          .infer(infer_qlinear_matmul));
  OpSchema ci("", "ConvInteger", 10);
  ci.doc("int32 convolution of (x - x_zero_point) and (w - w_zero_point)")
      .input("x", "T1")
      .input("w", "T2")
      .optional_input("x_zero_point", "T1")
      .optional_input("w_zero_point", "T2")
      .output("y", "T3")
      .type("T1", kQuant8)
      .type("T2", kQuant8)
      .type("T3", {I32})
      .infer(infer_conv_integer);
  add(std::move(conv_attrs(ci)));
  OpSchema qc("", "QLinearConv", 10);
  qc.doc("quantized convolution with int32 bias, requantized to y_scale / y_zero_point")
      .input("x", "T1")
      .input("x_scale", "TS")
      .input("x_zero_point", "T1")
      .input("w", "T2")
      .input("w_scale", "TS")
      .input("w_zero_point", "T2")
      .input("y_scale", "TS")
      .input("y_zero_point", "T3")
      .optional_input("B", "T4")
      .output("y", "T3")
      .type("TS", {F32})
      .type("T1", kQuant8)
      .type("T2", kQuant8)
      .type("T3", kQuant8)
      .type("T4", {I32})
      .infer(infer_qlinear_conv);
  add(std::move(conv_attrs(qc)));
}

}  // namespace backplane::ir::ops
