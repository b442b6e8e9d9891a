// Per-op dtype and static-shape inference, ONNX semantics for opsets 7..17.
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace backplane::ir::detail {

namespace {

constexpr DType F32 = DType::kFloat32, F16 = DType::kFloat16, I8 = DType::kInt8, U8 = DType::kUInt8,
                I32 = DType::kInt32, I64 = DType::kInt64, BOOL = DType::kBool;

std::string dims(const Shape& s) { return shape_to_string(s); }

std::string list(const std::vector<int64_t>& v) { return shape_to_string(v); }

// ---------------------------------------------------------------- elementwise

Status float_unary(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status signed_unary(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, I32, I64}, "X"));
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status numeric_unary(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, U8, I32, I64}, "X"));
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_identity(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_leaky_relu(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(float alpha, c.node.attr_float("alpha", 0.01f));
  (void)alpha;
  return float_unary(c);
}

Status infer_hard_sigmoid(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(float alpha, c.node.attr_float("alpha", 0.2f));
  BP_ASSIGN_OR_RETURN(float beta, c.node.attr_float("beta", 0.5f));
  (void)alpha, (void)beta;
  return float_unary(c);
}

Status infer_gelu(InferCtx& c) {
  // Not BP_ASSIGN_OR_RETURN: GCC 12 warns falsely about the moved-out string.
  Result<std::string> approx = c.node.attr_string("approximate", "none");
  if (!approx.ok()) return approx.status();
  if (*approx != "none" && *approx != "tanh")
    return c.error("attribute 'approximate' is '" + *approx + "', expected 'none' or 'tanh'");
  return float_unary(c);
}

Status infer_softmax(InferCtx& c) {
  BP_RETURN_IF_ERROR(float_unary(c));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", c.opset >= 13 ? -1 : 1));
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, std::max<int64_t>(c.rank(0), 1), "axis"));
  (void)a;
  return ok_status();
}

Status infer_clip(InferCtx& c) {
  if (c.opset < 11) {
    BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
    BP_ASSIGN_OR_RETURN(float lo, c.node.attr_float("min", std::numeric_limits<float>::lowest()));
    BP_ASSIGN_OR_RETURN(float hi, c.node.attr_float("max", std::numeric_limits<float>::max()));
    (void)lo, (void)hi;
    BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "input"));
  } else {
    BP_RETURN_IF_ERROR(c.require_inputs(1, 3));
    if (c.opset >= 12) BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, U8, I32, I64}, "input"));
    else BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "input"));
    const char* names[] = {"input", "min", "max"};
    for (size_t i = 1; i < c.num_inputs(); ++i) {
      if (!c.has(i)) continue;
      BP_RETURN_IF_ERROR(c.expect_same_dtype(0, i));
      if (sat_numel(c.shape(i)) != 1 || c.rank(i) > 1)
        return c.error(std::string("input '") + names[i] + "' ('" + c.name(i) +
                       "') must be a scalar, got shape " + dims(c.shape(i)));
    }
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_not(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {BOOL}, "X"));
  c.set(0, BOOL, c.shape(0));
  return ok_status();
}

Status broadcast_inputs(InferCtx& c, DType out_dtype) {
  std::vector<size_t> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) ins.push_back(i);
  BP_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(c, ins));
  c.set(0, out_dtype, std::move(s));
  return ok_status();
}

Status infer_arith(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, U8, I32, I64}, "A"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  return broadcast_inputs(c, c.dtype(0));
}

Status infer_pow(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  if (c.opset >= 12) {
    BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I32, I64}, "X"));
    BP_RETURN_IF_ERROR(c.expect_dtype(1, {F32, F16, I8, U8, I32, I64}, "Y"));
  } else {
    BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  }
  return broadcast_inputs(c, c.dtype(0));
}

Status infer_compare(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  if (c.node.op_type == "Equal")
    BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, U8, I32, I64, BOOL}, "A"));
  else BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, U8, I32, I64}, "A"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  return broadcast_inputs(c, BOOL);
}

Status infer_logical(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {BOOL}, "A"));
  BP_RETURN_IF_ERROR(c.expect_dtype(1, {BOOL}, "B"));
  return broadcast_inputs(c, BOOL);
}

Status infer_min_max(InferCtx& c) {
  if (c.num_inputs() < 1) return c.error("needs at least one input");
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) return c.error("input " + std::to_string(i) + " is missing");
    BP_RETURN_IF_ERROR(c.expect_dtype(i, {F32, F16, I8, U8, I32, I64}, "data_0"));
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, i));
    // Min/Max broadcast since opset 8; before that every input has one shape.
    if (c.opset < 8 && c.shape(i) != c.shape(0))
      return c.error("input '" + c.name(i) + "' has shape " + dims(c.shape(i)) + " but '" +
                     c.name(0) + "' has " + dims(c.shape(0)) + " (no broadcasting before opset 8)");
  }
  return broadcast_inputs(c, c.dtype(0));
}

Status infer_where(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(3, 3));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {BOOL}, "condition"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(1, 2));
  return broadcast_inputs(c, c.dtype(1));
}

Status infer_trilu(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 2));
  if (c.rank(0) < 2)
    return c.error("input '" + c.name(0) + "' must have rank >= 2, got " + dims(c.shape(0)));
  BP_ASSIGN_OR_RETURN(int64_t upper, c.node.attr_int("upper", 1));
  (void)upper;
  if (c.has(1)) {
    BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "k"));
    if (sat_numel(c.shape(1)) != 1) return c.error("input 'k' must be a scalar");
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_dropout(InferCtx& c) {
  if (c.opset >= 12) {
    BP_RETURN_IF_ERROR(c.require_inputs(1, 3));
    if (c.has(1)) BP_RETURN_IF_ERROR(c.expect_dtype(1, {F32, F16}, "ratio"));
    if (c.has(2)) BP_RETURN_IF_ERROR(c.expect_dtype(2, {BOOL}, "training_mode"));
    BP_ASSIGN_OR_RETURN(int64_t seed, c.node.attr_int("seed", 0));
    (void)seed;
  } else {
    BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
    BP_ASSIGN_OR_RETURN(float ratio, c.node.attr_float("ratio", 0.5f));
    (void)ratio;
  }
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "data"));
  c.set(0, c.dtype(0), c.shape(0));
  // The mask is T before opset 10 and bool from then on.
  c.set(1, c.opset >= 10 ? BOOL : c.dtype(0), c.shape(0));
  return ok_status();
}

// ---------------------------------------------------------------- conv / pool

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string auto_pad;
  bool ceil_mode = false;
};

Result<Window> read_window(InferCtx& c, size_t n, const std::vector<int64_t>* kernel_from_weight,
                           bool allow_ceil, bool allow_dilations) {
  Window w;
  BP_ASSIGN_OR_RETURN(w.kernel, c.node.attr_ints("kernel_shape"));
  if (kernel_from_weight != nullptr) {
    if (!w.kernel.empty() && w.kernel != *kernel_from_weight)
      return c.error("attribute 'kernel_shape' " + list(w.kernel) +
                     " does not match the weight's spatial dims " + list(*kernel_from_weight));
    w.kernel = *kernel_from_weight;
  } else if (w.kernel.empty()) {
    return c.error("attribute 'kernel_shape' is required");
  }
  BP_ASSIGN_OR_RETURN(w.strides, c.node.attr_ints("strides", std::vector<int64_t>(n, 1)));
  if (allow_dilations) {
    BP_ASSIGN_OR_RETURN(w.dilations, c.node.attr_ints("dilations", std::vector<int64_t>(n, 1)));
  } else {
    w.dilations.assign(n, 1);
  }
  BP_ASSIGN_OR_RETURN(w.pads, c.node.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  BP_ASSIGN_OR_RETURN(w.auto_pad, c.node.attr_string("auto_pad", "NOTSET"));
  if (allow_ceil) {
    BP_ASSIGN_OR_RETURN(int64_t cm, c.node.attr_int("ceil_mode", 0));
    w.ceil_mode = cm != 0;
  }
  auto check_len = [&](const char* name, const std::vector<int64_t>& v, size_t want) -> Status {
    if (v.size() != want)
      return c.error(std::string("attribute '") + name + "' has " + std::to_string(v.size()) +
                     " values, expected " + std::to_string(want) + " for " + std::to_string(n) +
                     " spatial dims");
    return ok_status();
  };
  BP_RETURN_IF_ERROR(check_len("kernel_shape", w.kernel, n));
  BP_RETURN_IF_ERROR(check_len("strides", w.strides, n));
  BP_RETURN_IF_ERROR(check_len("dilations", w.dilations, n));
  BP_RETURN_IF_ERROR(check_len("pads", w.pads, 2 * n));
  // Upper bounds too: the window arithmetic below must not overflow
  // (kernel and dilation under 2^24 make the effective kernel under 2^48;
  // dims are at most kMaxElements = 2^48).
  constexpr int64_t kMaxWindow = int64_t{1} << 24;
  for (size_t i = 0; i < n; ++i) {
    if (w.kernel[i] <= 0 || w.kernel[i] > kMaxWindow)
      return c.error("kernel_shape " + list(w.kernel) + " must be positive (and under 2^24)");
    if (w.strides[i] <= 0 || w.strides[i] > kMaxElements)
      return c.error("strides " + list(w.strides) + " must be positive (and under 2^48)");
    if (w.dilations[i] <= 0 || w.dilations[i] > kMaxWindow)
      return c.error("dilations " + list(w.dilations) + " must be positive (and under 2^24)");
  }
  for (int64_t p : w.pads)
    if (p < 0 || p > kMaxElements)
      return c.error("pads " + list(w.pads) + " must not be negative (or over 2^48)");
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" &&
      w.auto_pad != "VALID")
    return c.error("attribute 'auto_pad' is '" + w.auto_pad +
                   "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  return w;
}

Result<Shape> window_output(InferCtx& c, const Shape& in_spatial, const Window& w) {
  Shape out;
  for (size_t i = 0; i < in_spatial.size(); ++i) {
    const int64_t in = in_spatial[i], s = w.strides[i];
    const int64_t ek = (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out.push_back((in + s - 1) / s);
      continue;
    }
    const int64_t pb = w.auto_pad == "VALID" ? 0 : w.pads[i];
    const int64_t pe = w.auto_pad == "VALID" ? 0 : w.pads[i + in_spatial.size()];
    const int64_t span = in + pb + pe - ek;
    if (span < 0)
      return c.error("spatial dim " + std::to_string(i) + ": effective kernel size " +
                     std::to_string(ek) + " is larger than the padded input " +
                     std::to_string(in + pb + pe));
    int64_t o = (w.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // A window may not start in the end padding (ONNX and PyTorch).
    if (w.ceil_mode && (o - 1) * s >= in + pb) --o;
    out.push_back(o);
  }
  return out;
}

// What Conv and ConvTranspose check alike: operand count and dtypes, ranks
// of X and W, and a positive group (returned).
Result<int64_t> check_conv_operands(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 3));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  const Shape& x = c.shape(0);
  const Shape& wt = c.shape(1);
  if (x.size() < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x.size()) +
                   " dims, expected at least 3 (N, C, spatial...)");
  if (wt.size() != x.size())
    return c.error("weight '" + c.name(1) + "' has " + std::to_string(wt.size()) +
                   " dims, expected " + std::to_string(x.size()));
  BP_ASSIGN_OR_RETURN(int64_t group, c.node.attr_int("group", 1));
  if (group <= 0)
    return c.error("attribute 'group' must be positive, got " + std::to_string(group));
  return group;
}

Status infer_conv(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t group, check_conv_operands(c));
  const Shape& x = c.shape(0);
  const Shape& wt = c.shape(1);
  const size_t n = x.size() - 2;
  if (x[1] != wt[1] * group)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x[1]) +
                   " channels but weight '" + c.name(1) + "' " + dims(wt) + " with group " +
                   std::to_string(group) + " expects " + std::to_string(wt[1] * group));
  if (wt[0] % group != 0)
    return c.error("weight '" + c.name(1) + "' has " + std::to_string(wt[0]) +
                   " output channels, not divisible by group " + std::to_string(group));
  if (c.has(2)) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
    if (c.shape(2) != Shape{wt[0]})
      return c.error("bias '" + c.name(2) + "' has shape " + dims(c.shape(2)) + ", expected [" +
                     std::to_string(wt[0]) + "]");
  }
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  BP_ASSIGN_OR_RETURN(Window w, read_window(c, n, &kernel, false, true));
  BP_ASSIGN_OR_RETURN(Shape sp, window_output(c, Shape(x.begin() + 2, x.end()), w));
  Shape out{x[0], wt[0]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_conv_transpose(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t group, check_conv_operands(c));
  const Shape& x = c.shape(0);
  const Shape& wt = c.shape(1);
  const size_t n = x.size() - 2;
  if (x[1] != wt[0])
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x[1]) +
                   " channels but weight '" + c.name(1) + "' " + dims(wt) + " expects " +
                   std::to_string(wt[0]));
  const int64_t m = wt[1] * group;
  if (c.has(2)) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
    if (c.shape(2) != Shape{m})
      return c.error("bias '" + c.name(2) + "' has shape " + dims(c.shape(2)) + ", expected [" +
                     std::to_string(m) + "]");
  }
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  BP_ASSIGN_OR_RETURN(Window w, read_window(c, n, &kernel, false, true));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> opad,
                      c.node.attr_ints("output_padding", std::vector<int64_t>(n, 0)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> oshape, c.node.attr_ints("output_shape"));
  if (opad.size() != n)
    return c.error("attribute 'output_padding' has " + std::to_string(opad.size()) +
                   " values, expected " + std::to_string(n));
  Shape out{x[0], m};
  if (!oshape.empty()) {
    // Either the spatial dims alone or the full output shape.
    if (oshape.size() == n + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);
    if (oshape.size() != n)
      return c.error("attribute 'output_shape' " + list(oshape) + " has the wrong length for " +
                     std::to_string(n) + " spatial dims");
    for (int64_t d : oshape)
      if (d <= 0) return c.error("attribute 'output_shape' " + list(oshape) + " must be positive");
    out.insert(out.end(), oshape.begin(), oshape.end());
  } else {
    for (size_t i = 0; i < n; ++i) {
      const int64_t in = x[i + 2], s = w.strides[i];
      const int64_t ek = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t o;
      if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
        o = in * s;
      } else {
        const int64_t pads = w.auto_pad == "VALID" ? 0 : w.pads[i] + w.pads[i + n];
        o = s * (in - 1) + opad[i] + ek - pads;
      }
      if (o <= 0)
        return c.error("spatial dim " + std::to_string(i) + " of the output would be " +
                       std::to_string(o));
      out.push_back(o);
    }
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_pool(InferCtx& c) {
  const bool is_max = c.node.op_type == "MaxPool";
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  if (is_max && c.opset >= 12) BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I8, U8}, "X"));
  else BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
  const Shape& x = c.shape(0);
  if (x.size() < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x.size()) +
                   " dims, expected at least 3 (N, C, spatial...)");
  const size_t n = x.size() - 2;
  // ceil_mode arrived in opset 10; dilations for MaxPool too (AveragePool: 19).
  BP_ASSIGN_OR_RETURN(Window w, read_window(c, n, nullptr, c.opset >= 10, is_max && c.opset >= 10));
  if (is_max) {
    BP_ASSIGN_OR_RETURN(int64_t so, c.node.attr_int("storage_order", 0));
    if (so != 0 && so != 1) return c.error("attribute 'storage_order' must be 0 or 1");
  } else {
    BP_ASSIGN_OR_RETURN(int64_t cip, c.node.attr_int("count_include_pad", 0));
    (void)cip;
  }
  BP_ASSIGN_OR_RETURN(Shape sp, window_output(c, Shape(x.begin() + 2, x.end()), w));
  Shape out{x[0], x[1]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.set(0, c.dtype(0), out);
  if (is_max) c.set(1, I64, out);
  return ok_status();
}

Status infer_global_pool(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
  if (c.rank(0) < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(c.rank(0)) +
                   " dims, expected at least 3 (N, C, spatial...)");
  Shape out = c.shape(0);
  std::fill(out.begin() + 2, out.end(), 1);
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// ---------------------------------------------------------------- linear algebra

Status infer_gemm(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(c.opset >= 11 ? 2 : 3, 3));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I32, I64}, "A"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  BP_ASSIGN_OR_RETURN(int64_t ta, c.node.attr_int("transA", 0));
  BP_ASSIGN_OR_RETURN(int64_t tb, c.node.attr_int("transB", 0));
  BP_ASSIGN_OR_RETURN(float alpha, c.node.attr_float("alpha", 1.0f));
  BP_ASSIGN_OR_RETURN(float beta, c.node.attr_float("beta", 1.0f));
  (void)alpha, (void)beta;
  BP_RETURN_IF_ERROR(c.expect_rank(0, 2, "A"));
  BP_RETURN_IF_ERROR(c.expect_rank(1, 2, "B"));
  const Shape& a = c.shape(0);
  const Shape& b = c.shape(1);
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != kb)
    return c.error("inner dims differ: A '" + c.name(0) + "' " + dims(a) +
                   (ta ? " (transposed)" : "") + " has K=" + std::to_string(k) + ", B '" +
                   c.name(1) + "' " + dims(b) + (tb ? " (transposed)" : "") +
                   " has K=" + std::to_string(kb));
  if (c.has(2)) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
    const Shape& cs = c.shape(2);
    const Shape target{m, n};
    bool ok = cs.size() <= 2;
    for (size_t i = 0; ok && i < cs.size(); ++i) {
      int64_t t = target[2 - cs.size() + i];
      ok = cs[i] == 1 || cs[i] == t;
    }
    if (!ok)
      return c.error("C '" + c.name(2) + "' " + dims(cs) + " cannot be broadcast to " +
                     dims(target));
  }
  c.set(0, c.dtype(0), {m, n});
  return ok_status();
}

Status infer_matmul(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I32, I64}, "A"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) return c.error("inputs must have at least 1 dim");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  const int64_t k = a[a.size() - 1], kb = b[b.size() - 2];
  if (k != kb)
    return c.error("inner dims differ: A '" + c.name(0) + "' " + dims(c.shape(0)) +
                   " has K=" + std::to_string(k) + ", B '" + c.name(1) + "' " + dims(c.shape(1)) +
                   " has K=" + std::to_string(kb));
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch;
  const size_t r = std::max(ba.size(), bb.size());
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + ba.size() >= r ? ba[i + ba.size() - r] : 1;
    int64_t db = i + bb.size() >= r ? bb[i + bb.size() - r] : 1;
    if (da != db && da != 1 && db != 1)
      return c.error("batch dims of '" + c.name(0) + "' " + dims(c.shape(0)) + " and '" +
                     c.name(1) + "' " + dims(c.shape(1)) + " cannot be broadcast");
    batch.push_back(da == 1 ? db : da);
  }
  if (!a_vec) batch.push_back(a[a.size() - 2]);
  if (!b_vec) batch.push_back(b[b.size() - 1]);
  c.set(0, c.dtype(0), batch);
  return ok_status();
}

// ---------------------------------------------------------------- normalization

Status infer_batch_norm(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(5, 5));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
  BP_ASSIGN_OR_RETURN(float eps, c.node.attr_float("epsilon", 1e-5f));
  BP_ASSIGN_OR_RETURN(float momentum, c.node.attr_float("momentum", 0.9f));
  (void)eps, (void)momentum;
  if (c.rank(0) < 2)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(c.rank(0)) +
                   " dims, expected at least 2 (N, C, ...)");
  int64_t spatial = 1;
  if (c.opset < 9) {
    BP_ASSIGN_OR_RETURN(spatial, c.node.attr_int("spatial", 1));
  }
  const Shape& x = c.shape(0);
  const Shape param = spatial ? Shape{x[1]} : Shape(x.begin() + 1, x.end());
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) {
    if (c.opset < 15 || i == 2) BP_RETURN_IF_ERROR(c.expect_same_dtype(i == 2 ? 1 : 0, i));
    if (c.opset >= 15) BP_RETURN_IF_ERROR(c.expect_dtype(i, {F32, F16}, names[i]));
    if (c.opset >= 15 && i == 4) BP_RETURN_IF_ERROR(c.expect_same_dtype(3, 4));
    if (c.shape(i) != param)
      return c.error(std::string(names[i]) + " '" + c.name(i) + "' has shape " + dims(c.shape(i)) +
                     ", expected " + dims(param) + " for input " + dims(x));
  }
  c.set(0, c.dtype(0), x);
  const size_t max_outputs = c.opset >= 14 ? 3 : 5;
  if (c.out.size() > max_outputs)
    return c.error("has " + std::to_string(c.out.size()) + " outputs, at most " +
                   std::to_string(max_outputs) + " in opset " + std::to_string(c.opset));
  for (size_t i = 1; i < c.out.size(); ++i) c.set(i, c.dtype(3), param);
  return ok_status();
}

Status infer_layer_norm(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 3));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "X"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", -1));
  BP_ASSIGN_OR_RETURN(float eps, c.node.attr_float("epsilon", 1e-5f));
  BP_ASSIGN_OR_RETURN(int64_t stash, c.node.attr_int("stash_type", 1));
  (void)eps;
  const Shape& x = c.shape(0);
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, c.rank(0), "axis"));
  const Shape norm(x.begin() + a, x.end());
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, i));
    const Shape& s = c.shape(i);
    bool ok = s.size() <= norm.size();
    for (size_t j = 0; ok && j < s.size(); ++j)
      ok = s[j] == 1 || s[j] == norm[norm.size() - s.size() + j];
    if (!ok)
      return c.error(std::string(i == 1 ? "Scale" : "B") + " '" + c.name(i) + "' has shape " +
                     dims(s) + ", which does not broadcast to the normalized shape " + dims(norm));
  }
  DType stash_dtype = static_cast<DType>(stash);
  if (stash_dtype != F32 && stash_dtype != F16)
    return c.error("attribute 'stash_type' " + std::to_string(stash) +
                   " is not float32 or float16");
  c.set(0, c.dtype(0), x);
  Shape reduced = x;
  std::fill(reduced.begin() + a, reduced.end(), 1);
  c.set(1, stash_dtype, reduced);
  c.set(2, stash_dtype, reduced);
  return ok_status();
}

Status infer_instance_norm(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(3, 3));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16}, "input"));
  BP_ASSIGN_OR_RETURN(float eps, c.node.attr_float("epsilon", 1e-5f));
  (void)eps;
  if (c.rank(0) < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(c.rank(0)) +
                   " dims, expected at least 3 (N, C, spatial...)");
  const Shape param{c.shape(0)[1]};
  for (size_t i = 1; i < 3; ++i) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, i));
    if (c.shape(i) != param)
      return c.error(std::string(i == 1 ? "scale" : "B") + " '" + c.name(i) + "' has shape " +
                     dims(c.shape(i)) + ", expected " + dims(param));
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

// ---------------------------------------------------------------- shape manipulation

Status infer_flatten(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 1));
  const Shape& x = c.shape(0);
  const int64_t r = c.rank(0);
  if (c.opset < 11 && axis < 0)
    return c.error("attribute 'axis' " + std::to_string(axis) + " must be >= 0 before opset 11");
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, r, "axis", true));
  Shape outer(x.begin(), x.begin() + a), inner(x.begin() + a, x.end());
  c.set(0, c.dtype(0), {sat_numel(outer), sat_numel(inner)});
  return ok_status();
}

Status infer_reshape(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "shape"));
  BP_RETURN_IF_ERROR(c.expect_rank(1, 1, "shape"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> target, c.ints_input(1, "shape"));
  int64_t allowzero = 0;
  if (c.opset >= 14) {
    BP_ASSIGN_OR_RETURN(allowzero, c.node.attr_int("allowzero", 0));
  }
  const Shape& x = c.shape(0);
  Shape out(target.size());
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < target.size(); ++i) {
    const int64_t d = target[i];
    if (d == -1) {
      if (infer_at >= 0) return c.error("shape " + list(target) + " has more than one -1");
      infer_at = static_cast<int>(i);
      out[i] = 1;
    } else if (d == 0 && !allowzero) {
      if (i >= x.size())
        return c.error("shape " + list(target) + ": 0 at index " + std::to_string(i) +
                       " copies a dim the input " + dims(x) + " does not have");
      out[i] = x[i];
    } else if (d < 0) {
      return c.error("shape " + list(target) + " has invalid dim " + std::to_string(d));
    } else {
      has_zero |= d == 0;
      out[i] = d;
    }
  }
  if (has_zero && infer_at >= 0)
    return c.error("shape " + list(target) + " has both 0 and -1 with allowzero=1");
  const int64_t total = sat_numel(x);
  if (infer_at >= 0) {
    const int64_t known = sat_numel(out);
    if (known == 0 || total % known != 0)
      return c.error("cannot reshape input '" + c.name(0) + "' " + dims(x) + " to " + list(target));
    out[infer_at] = total / known;
  }
  if (sat_numel(out) != total)
    return c.error("cannot reshape input '" + c.name(0) + "' " + dims(x) + " (" +
                   std::to_string(total) + " elements) to " + dims(out) + " (" +
                   std::to_string(sat_numel(out)) + " elements)");
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_transpose(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  const int64_t r = c.rank(0);
  std::vector<int64_t> rev;
  for (int64_t i = r - 1; i >= 0; --i) rev.push_back(i);
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> perm, c.node.attr_ints("perm", rev));
  if (static_cast<int64_t>(perm.size()) != r)
    return c.error("attribute 'perm' " + list(perm) + " has " + std::to_string(perm.size()) +
                   " values for an input of rank " + std::to_string(r));
  std::vector<bool> seen(r, false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= r || seen[p])
      return c.error("attribute 'perm' " + list(perm) + " is not a permutation of 0.." +
                     std::to_string(r - 1));
    seen[p] = true;
    out.push_back(c.shape(0)[p]);
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_concat(InferCtx& c) {
  if (c.num_inputs() < 1) return c.error("needs at least one input");
  const Attribute* a = c.node.attr("axis");
  if (a == nullptr) return c.error("attribute 'axis' is required");
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  for (size_t i = 0; i < c.num_inputs(); ++i)
    if (!c.has(i)) return c.error("input " + std::to_string(i) + " is missing");
  const int64_t r = c.rank(0);
  if (r == 0) return c.error("cannot concatenate scalars");
  BP_ASSIGN_OR_RETURN(int64_t ax, c.normalize_axis(axis, r, "axis"));
  Shape out = c.shape(0);
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, i));
    const Shape& s = c.shape(i);
    if (static_cast<int64_t>(s.size()) != r)
      return c.error("input '" + c.name(i) + "' has rank " + std::to_string(s.size()) + " but '" +
                     c.name(0) + "' has rank " + std::to_string(r));
    for (int64_t d = 0; d < r; ++d) {
      if (d == ax) continue;
      if (s[d] != out[d])
        return c.error("input '" + c.name(i) + "' " + dims(s) + " does not match '" + c.name(0) +
                       "' " + dims(c.shape(0)) + " in dim " + std::to_string(d) +
                       " (concatenating on axis " + std::to_string(ax) + ")");
    }
    out[ax] += s[ax];
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_split(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, c.opset >= 13 ? 2 : 1));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  BP_ASSIGN_OR_RETURN(int64_t ax, c.normalize_axis(axis, c.rank(0), "axis"));
  std::vector<int64_t> split;
  if (c.opset >= 13) {
    if (c.has(1)) {
      BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "split"));
      BP_ASSIGN_OR_RETURN(split, c.ints_input(1, "split"));
    }
  } else {
    BP_ASSIGN_OR_RETURN(split, c.node.attr_ints("split"));
  }
  const int64_t dim = c.shape(0)[ax];
  const int64_t n = static_cast<int64_t>(c.out.size());
  if (n == 0) return c.error("has no outputs");
  if (split.empty()) {
    if (dim % n != 0)
      return c.error("dim " + std::to_string(ax) + " of '" + c.name(0) + "' " + dims(c.shape(0)) +
                     " cannot be split evenly into " + std::to_string(n) + " outputs");
    split.assign(n, dim / n);
  }
  if (static_cast<int64_t>(split.size()) != n)
    return c.error("split " + list(split) + " has " + std::to_string(split.size()) +
                   " values but the node has " + std::to_string(n) + " outputs");
  int64_t sum = 0;
  for (int64_t s : split) {
    if (s < 0) return c.error("split " + list(split) + " has a negative size");
    sum += s;
  }
  if (sum != dim)
    return c.error("split " + list(split) + " sums to " + std::to_string(sum) + " but dim " +
                   std::to_string(ax) + " of '" + c.name(0) + "' is " + std::to_string(dim));
  for (int64_t i = 0; i < n; ++i) {
    Shape s = c.shape(0);
    s[ax] = split[i];
    c.set(i, c.dtype(0), s);
  }
  return ok_status();
}

Status infer_slice(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(SlicePlan plan, slice_plan_for(c));
  c.set(0, c.dtype(0), plan.out);
  return ok_status();
}

Status infer_gather(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(1, {I32, I64}, "indices"));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  const Shape& data = c.shape(0);
  if (data.empty()) return c.error("input '" + c.name(0) + "' must have rank >= 1");
  BP_ASSIGN_OR_RETURN(int64_t ax, c.normalize_axis(axis, c.rank(0), "axis"));
  if (const Tensor* t = c.constant(1)) {
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> idx, c.ints_input(1, "indices"));
    for (int64_t i : idx)
      if (i < -data[ax] || i >= data[ax])
        return c.error("index " + std::to_string(i) + " in '" + c.name(1) +
                       "' is out of range for dim " + std::to_string(ax) + " of size " +
                       std::to_string(data[ax]));
    (void)t;
  }
  Shape out(data.begin(), data.begin() + ax);
  out.insert(out.end(), c.shape(1).begin(), c.shape(1).end());
  out.insert(out.end(), data.begin() + ax + 1, data.end());
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Result<std::vector<int64_t>> axes_attr_or_input(InferCtx& c, int64_t input_since, bool* given) {
  std::vector<int64_t> axes;
  *given = false;
  if (c.opset >= input_since) {
    if (c.has(1)) {
      BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "axes"));
      BP_ASSIGN_OR_RETURN(axes, c.ints_input(1, "axes"));
      *given = true;
    }
  } else {
    if (c.num_inputs() > 1)
      return c.error("takes 1 input before opset " + std::to_string(input_since));
    *given = c.node.attr("axes") != nullptr;
    BP_ASSIGN_OR_RETURN(axes, c.node.attr_ints("axes"));
  }
  return axes;
}

Status infer_squeeze(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, c.opset >= 13 ? 2 : 1));
  bool given;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_attr_or_input(c, 13, &given));
  const Shape& x = c.shape(0);
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, c.normalize_axes(axes, c.rank(0), "axes"));
  std::vector<bool> drop(x.size(), false);
  if (norm.empty()) {
    for (size_t i = 0; i < x.size(); ++i) drop[i] = x[i] == 1;
  } else {
    for (int64_t a : norm) {
      if (x[a] != 1)
        return c.error("cannot squeeze dim " + std::to_string(a) + " of '" + c.name(0) + "' " +
                       dims(x) + ": its size is " + std::to_string(x[a]) + ", not 1");
      drop[a] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < x.size(); ++i)
    if (!drop[i]) out.push_back(x[i]);
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_unsqueeze(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(c.opset >= 13 ? 2 : 1, c.opset >= 13 ? 2 : 1));
  bool given;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axes_attr_or_input(c, 13, &given));
  if (axes.empty()) return c.error("'axes' is required and must not be empty");
  const int64_t r = c.rank(0) + static_cast<int64_t>(axes.size());
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, c.normalize_axes(axes, r, "axes"));
  std::vector<bool> ins(r, false);
  for (int64_t a : norm) ins[a] = true;
  Shape out;
  size_t j = 0;
  for (int64_t i = 0; i < r; ++i) out.push_back(ins[i] ? 1 : c.shape(0)[j++]);
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_shape(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  int64_t first, last;
  BP_RETURN_IF_ERROR(shape_range(c, &first, &last));
  c.set(0, I64, {std::max<int64_t>(last - first, 0)});
  return ok_status();
}

Status infer_constant(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(0, 0));
  BP_ASSIGN_OR_RETURN(Tensor t, constant_attr_value(c));
  c.set(0, t.dtype(), t.shape());
  return ok_status();
}

Status infer_constant_of_shape(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {I64}, "input"));
  BP_RETURN_IF_ERROR(c.expect_rank(0, 1, "input"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ints_input(0, "input"));
  for (int64_t d : shape)
    if (d < 0) return c.error("shape " + list(shape) + " has a negative dim");
  DType dtype = F32;
  if (const Attribute* a = c.node.attr("value")) {
    if (a->type != AttrType::kTensor)
      return c.error(std::string("attribute 'value' has type ") + attr_type_name(a->type) +
                     ", expected TENSOR");
    if (a->t.numel() != 1)
      return c.error("attribute 'value' must hold one element, has " +
                     std::to_string(a->t.numel()));
    dtype = a->t.dtype();
  }
  c.set(0, dtype, shape);
  return ok_status();
}

Status infer_cast(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  const Attribute* a = c.node.attr("to");
  if (a == nullptr) return c.error("attribute 'to' is required");
  BP_ASSIGN_OR_RETURN(int64_t to, c.node.attr_int("to", 0));
  DType t = static_cast<DType>(to);
  if (dtype_size(t) == 0)
    return c.unsupported_error(
        "cast to ONNX element type " + std::to_string(to) +
        " is not supported (supported: float32, float16, int8, uint8, int32, "
        "int64, bool)");
  c.set(0, t, c.shape(0));
  return ok_status();
}

Status infer_expand(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "shape"));
  BP_RETURN_IF_ERROR(c.expect_rank(1, 1, "shape"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> target, c.ints_input(1, "shape"));
  const Shape& x = c.shape(0);
  const size_t r = std::max(x.size(), target.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t a = i + x.size() >= r ? x[i + x.size() - r] : 1;
    int64_t b = i + target.size() >= r ? target[i + target.size() - r] : 1;
    if (b < 0) return c.error("shape " + list(target) + " has a negative dim");
    if (a != b && a != 1 && b != 1)
      return c.error("input '" + c.name(0) + "' " + dims(x) + " cannot be expanded to " +
                     list(target));
    out[i] = a == 1 ? b : a;
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_tile(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "repeats"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> rep, c.ints_input(1, "repeats"));
  const Shape& x = c.shape(0);
  if (rep.size() != x.size())
    return c.error("repeats " + list(rep) + " has " + std::to_string(rep.size()) +
                   " values for input '" + c.name(0) + "' of rank " + std::to_string(x.size()));
  Shape out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    if (rep[i] < 0) return c.error("repeats " + list(rep) + " has a negative value");
    if (x[i] > 0 && rep[i] > kMaxElements / x[i])
      return c.error("repeats " + list(rep) + " make dim " + std::to_string(i) + " of " + dims(x) +
                     " too large");
    out[i] = x[i] * rep[i];
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_pad(InferCtx& c) {
  std::vector<int64_t> pads;
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", "constant"));
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return c.error("attribute 'mode' is '" + mode + "', expected constant, reflect or edge");
  if (c.opset < 11) {
    BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
    if (c.node.attr("pads") == nullptr) return c.error("attribute 'pads' is required");
    BP_ASSIGN_OR_RETURN(pads, c.node.attr_ints("pads"));
    BP_ASSIGN_OR_RETURN(float value, c.node.attr_float("value", 0.0f));
    (void)value;
  } else {
    BP_RETURN_IF_ERROR(c.require_inputs(2, 3));
    BP_RETURN_IF_ERROR(c.expect_dtype(1, {I64}, "pads"));
    BP_ASSIGN_OR_RETURN(pads, c.ints_input(1, "pads"));
    if (c.has(2)) {
      BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
      if (sat_numel(c.shape(2)) != 1) return c.error("input 'constant_value' must be a scalar");
    }
  }
  const Shape& x = c.shape(0);
  const size_t r = x.size();
  if (pads.size() != 2 * r)
    return c.error("pads " + list(pads) + " has " + std::to_string(pads.size()) +
                   " values, expected " + std::to_string(2 * r) + " for input '" + c.name(0) +
                   "' " + dims(x));
  for (int64_t p : pads)
    if (p > kMaxElements || p < -kMaxElements)
      return c.error("pads " + list(pads) + " has a value out of range");
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    out[i] = x[i] + pads[i] + pads[i + r];  // each term below 2^48: no overflow
    if (out[i] < 0)
      return c.error("pads " + list(pads) + " make dim " + std::to_string(i) + " of " + dims(x) +
                     " negative");
    if (mode == "reflect" && (pads[i] >= x[i] || pads[i + r] >= x[i]) &&
        (pads[i] > 0 || pads[i + r] > 0))
      return c.error("reflect pads " + list(pads) + " must be smaller than dim " +
                     std::to_string(i) + " of " + dims(x));
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_range(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(3, 3));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, I32, I64}, "start"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i)
    if (c.rank(i) != 0 && sat_numel(c.shape(i)) != 1)
      return c.error(std::string("input '") + names[i] + "' must be a scalar, got " +
                     dims(c.shape(i)));
  int64_t n;
  if (c.dtype(0) == F32) {
    std::vector<double> v[3];
    for (size_t i = 0; i < 3; ++i) {
      BP_ASSIGN_OR_RETURN(v[i], c.numbers_input(i, names[i]));
    }
    const float start = static_cast<float>(v[0][0]), limit = static_cast<float>(v[1][0]),
                delta = static_cast<float>(v[2][0]);
    if (delta == 0) return c.error("input 'delta' is 0");
    const double count = std::max(std::ceil(static_cast<double>((limit - start) / delta)), 0.0);
    if (!(count <= static_cast<double>(kMaxElements)))  // also NaN and infinity
      return c.error("start, limit and delta give " + std::to_string(count) + " elements");
    n = static_cast<int64_t>(count);
  } else {
    std::vector<int64_t> v[3];
    for (size_t i = 0; i < 3; ++i) {
      BP_ASSIGN_OR_RETURN(v[i], c.ints_input(i, names[i]));
    }
    const int64_t start = v[0][0], limit = v[1][0], delta = v[2][0];
    if (delta == 0) return c.error("input 'delta' is 0");
    // In 128 bits: limit - start overflows int64 for values of opposite sign.
    const __int128 span = static_cast<__int128>(limit) - start;
    __int128 count = span / delta + ((span % delta != 0 && ((span < 0) == (delta < 0))) ? 1 : 0);
    if (count < 0) count = 0;
    if (count > kMaxElements) return c.error("start, limit and delta give more than 2^48 elements");
    n = static_cast<int64_t>(count);
  }
  c.set(0, c.dtype(0), {n});
  return ok_status();
}

Status infer_reduce(InferCtx& c) {
  const bool axes_input = c.node.op_type == "ReduceSum" && c.opset >= 13;
  BP_RETURN_IF_ERROR(c.require_inputs(1, axes_input ? 2 : 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I32, I64, I8, U8}, "data"));
  BP_ASSIGN_OR_RETURN(int64_t keepdims, c.node.attr_int("keepdims", 1));
  int64_t noop = 0;
  if (axes_input) {
    BP_ASSIGN_OR_RETURN(noop, c.node.attr_int("noop_with_empty_axes", 0));
  }
  bool given;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                      axes_attr_or_input(c, axes_input ? 13 : 1000, &given));
  const Shape& x = c.shape(0);
  if (axes.empty() && noop) {
    c.set(0, c.dtype(0), x);
    return ok_status();
  }
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, c.normalize_axes(axes, c.rank(0), "axes"));
  std::vector<bool> red(x.size(), norm.empty());
  for (int64_t a : norm) red[a] = true;
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!red[i]) out.push_back(x[i]);
    else if (keepdims) out.push_back(1);
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_argmax(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I32, I64, I8, U8}, "data"));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  BP_ASSIGN_OR_RETURN(int64_t keepdims, c.node.attr_int("keepdims", 1));
  BP_ASSIGN_OR_RETURN(int64_t last, c.node.attr_int("select_last_index", 0));
  (void)last;
  BP_ASSIGN_OR_RETURN(int64_t ax, c.normalize_axis(axis, c.rank(0), "axis"));
  Shape out = c.shape(0);
  if (keepdims) out[ax] = 1;
  else out.erase(out.begin() + ax);
  c.set(0, I64, out);
  return ok_status();
}

Status infer_resize(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 4));
  const Shape& x = c.shape(0);
  const size_t r = x.size();
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", "nearest"));
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return c.error("attribute 'mode' is '" + mode + "', expected nearest, linear or cubic");
  std::vector<double> scales;
  std::vector<int64_t> sizes;
  std::string ctm = "half_pixel";
  if (c.opset < 11) {
    BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
    BP_ASSIGN_OR_RETURN(scales, c.numbers_input(1, "scales"));
  } else {
    // roi and scales are required inputs in opsets 11-12, but exporters pass "" for them.
    BP_RETURN_IF_ERROR(c.require_inputs(1, 4));
    BP_ASSIGN_OR_RETURN(ctm, c.node.attr_string("coordinate_transformation_mode", "half_pixel"));
    const bool has_scales = c.has(2) && sat_numel(c.shape(2)) > 0;
    const bool has_sizes = c.has(3) && sat_numel(c.shape(3)) > 0;
    if (has_scales && has_sizes) return c.error("only one of 'scales' and 'sizes' may be given");
    if (!has_scales && !has_sizes) return c.error("one of 'scales' and 'sizes' must be given");
    if (has_scales) {
      BP_RETURN_IF_ERROR(c.expect_dtype(2, {F32, F16}, "scales"));
      BP_ASSIGN_OR_RETURN(scales, c.numbers_input(2, "scales"));
    } else {
      BP_RETURN_IF_ERROR(c.expect_dtype(3, {I64}, "sizes"));
      BP_ASSIGN_OR_RETURN(sizes, c.ints_input(3, "sizes"));
    }
  }
  Shape out(r);
  if (!sizes.empty()) {
    if (sizes.size() != r)
      return c.error("sizes " + list(sizes) + " has " + std::to_string(sizes.size()) +
                     " values for input '" + c.name(0) + "' of rank " + std::to_string(r));
    for (size_t i = 0; i < r; ++i) {
      if (sizes[i] < 0) return c.error("sizes " + list(sizes) + " has a negative value");
      out[i] = sizes[i];
    }
  } else {
    if (scales.size() != r)
      return c.error("scales has " + std::to_string(scales.size()) + " values for input '" +
                     c.name(0) + "' of rank " + std::to_string(r));
    std::vector<double> roi;
    if (ctm == "tf_crop_and_resize") {
      if (!c.has(1)) return c.error("input 'roi' is required with tf_crop_and_resize");
      BP_ASSIGN_OR_RETURN(roi, c.numbers_input(1, "roi"));
      if (roi.size() != 2 * r) return c.error("input 'roi' must have 2*rank values");
    }
    for (size_t i = 0; i < r; ++i) {
      if (!(scales[i] > 0)) return c.error("scales must be positive");
      // Scales arrive as float32; multiply in float as the ONNX reference does.
      const float s = static_cast<float>(scales[i]);
      float extent = static_cast<float>(x[i]);
      if (!roi.empty()) extent *= static_cast<float>(roi[i + r] - roi[i]);
      const double size = std::floor(static_cast<double>(extent * s));
      if (!(size >= 0 && size <= static_cast<double>(kMaxElements)))  // also NaN and infinity
        return c.error("scales (and roi) give dim " + std::to_string(i) + " the size " +
                       std::to_string(size));
      out[i] = static_cast<int64_t>(size);
    }
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// Ops CpuRef also runs beyond the required list.
Status infer_size(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  c.set(0, I64, {});
  return ok_status();
}

Status infer_cast_like(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  c.set(0, c.dtype(1), c.shape(0));
  return ok_status();
}

Status infer_prelu(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  BP_RETURN_IF_ERROR(c.expect_dtype(0, {F32, F16, I32, I64}, "X"));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  // slope broadcasts to X (unidirectionally): the result has X's shape.
  BP_RETURN_IF_ERROR(broadcast_inputs(c, c.dtype(0)));
  return ok_status();
}

// One entry per supported op: a long function that is only a table.
const std::map<std::string, InferFn>& table() {
  static const std::map<std::string, InferFn> t = {
      {"Conv", infer_conv},
      {"ConvTranspose", infer_conv_transpose},
      {"Gemm", infer_gemm},
      {"MatMul", infer_matmul},
      {"Add", infer_arith},
      {"Sub", infer_arith},
      {"Mul", infer_arith},
      {"Div", infer_arith},
      {"Pow", infer_pow},
      {"Sqrt", float_unary},
      {"Exp", float_unary},
      {"Log", float_unary},
      {"Neg", signed_unary},
      {"Abs", numeric_unary},
      {"Reciprocal", float_unary},
      {"Relu", signed_unary},
      {"LeakyRelu", infer_leaky_relu},
      {"Clip", infer_clip},
      {"Sigmoid", float_unary},
      {"HardSigmoid", infer_hard_sigmoid},
      {"HardSwish", float_unary},
      {"Tanh", float_unary},
      {"Erf", float_unary},
      {"Gelu", infer_gelu},
      {"Softmax", infer_softmax},
      {"LogSoftmax", infer_softmax},
      {"MaxPool", infer_pool},
      {"AveragePool", infer_pool},
      {"GlobalAveragePool", infer_global_pool},
      {"GlobalMaxPool", infer_global_pool},
      {"BatchNormalization", infer_batch_norm},
      {"LayerNormalization", infer_layer_norm},
      {"InstanceNormalization", infer_instance_norm},
      {"Flatten", infer_flatten},
      {"Reshape", infer_reshape},
      {"Transpose", infer_transpose},
      {"Concat", infer_concat},
      {"Split", infer_split},
      {"Slice", infer_slice},
      {"Gather", infer_gather},
      {"Squeeze", infer_squeeze},
      {"Unsqueeze", infer_unsqueeze},
      {"Shape", infer_shape},
      {"Constant", infer_constant},
      {"ConstantOfShape", infer_constant_of_shape},
      {"Identity", infer_identity},
      {"Cast", infer_cast},
      {"Expand", infer_expand},
      {"Tile", infer_tile},
      {"Pad", infer_pad},
      {"Range", infer_range},
      {"Where", infer_where},
      {"Equal", infer_compare},
      {"Less", infer_compare},
      {"Greater", infer_compare},
      {"Not", infer_not},
      {"And", infer_logical},
      {"Or", infer_logical},
      {"Trilu", infer_trilu},
      {"ReduceMean", infer_reduce},
      {"ReduceSum", infer_reduce},
      {"ReduceMax", infer_reduce},
      {"ReduceMin", infer_reduce},
      {"ArgMax", infer_argmax},
      {"Resize", infer_resize},
      {"Min", infer_min_max},
      {"Max", infer_min_max},
      {"Dropout", infer_dropout},
      // Beyond the required list (CpuRef runs these too).
      {"PRelu", infer_prelu},
      {"Sum", infer_min_max},
      {"Mean", infer_min_max},
      {"Sign", numeric_unary},
      {"Floor", float_unary},
      {"Ceil", float_unary},
      {"Round", float_unary},
      {"Sin", float_unary},
      {"Cos", float_unary},
      {"Elu", float_unary},
      {"Selu", float_unary},
      {"Softplus", float_unary},
      {"Softsign", float_unary},
      {"Xor", infer_logical},
      {"LessOrEqual", infer_compare},
      {"GreaterOrEqual", infer_compare},
      {"CastLike", infer_cast_like},
      {"Size", infer_size},
      {"ArgMin", infer_argmax},
      {"ReduceProd", infer_reduce},
      {"ReduceSumSquare", infer_reduce},
      {"ReduceL1", infer_reduce},
      {"ReduceL2", infer_reduce},
      {"ReduceLogSum", infer_reduce},
  };
  return t;
}

}  // namespace

InferFn find_infer_fn(const std::string& op_type) {
  auto it = table().find(op_type);
  return it == table().end() ? nullptr : it->second;
}

Status shape_range(const InferCtx& c, int64_t* first, int64_t* last) {
  int64_t start = 0, end = std::numeric_limits<int64_t>::max();
  if (c.opset >= 15) {
    BP_ASSIGN_OR_RETURN(start, c.node.attr_int("start", 0));
    BP_ASSIGN_OR_RETURN(end, c.node.attr_int("end", end));
  }
  const int64_t rank = c.rank(0);
  auto clamp = [rank](int64_t v) {
    if (v < 0) v += rank;
    return std::clamp<int64_t>(v, 0, rank);
  };
  *first = clamp(start);
  *last = clamp(end);
  return ok_status();
}

Result<SlicePlan> plan_slice(const InferCtx& c, const Shape& in, const std::vector<int64_t>& starts,
                             const std::vector<int64_t>& ends, const std::vector<int64_t>& axes_in,
                             const std::vector<int64_t>& steps_in) {
  const int64_t r = static_cast<int64_t>(in.size());
  if (starts.size() != ends.size())
    return c.error("starts " + list(starts) + " and ends " + list(ends) + " differ in length");
  std::vector<int64_t> axes = axes_in;
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  std::vector<int64_t> steps = steps_in.empty() ? std::vector<int64_t>(starts.size(), 1) : steps_in;
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return c.error("starts, ends, axes and steps must have the same length");
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, c.normalize_axes(axes, r, "axes"));
  SlicePlan p;
  p.start.assign(r, 0);
  p.step.assign(r, 1);
  p.out = in;
  for (size_t k = 0; k < norm.size(); ++k) {
    const int64_t a = norm[k], dim = in[a], step = steps[k];
    if (step == 0) return c.error("steps " + list(steps) + " contain 0");
    int64_t s = starts[k], e = ends[k];
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    p.start[a] = s;
    p.step[a] = step;
    p.out[a] = len;
  }
  return p;
}

Result<SlicePlan> slice_plan_for(const InferCtx& c) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {
    BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
    if (c.node.attr("starts") == nullptr || c.node.attr("ends") == nullptr)
      return c.error("attributes 'starts' and 'ends' are required");
    BP_ASSIGN_OR_RETURN(starts, c.node.attr_ints("starts"));
    BP_ASSIGN_OR_RETURN(ends, c.node.attr_ints("ends"));
    BP_ASSIGN_OR_RETURN(axes, c.node.attr_ints("axes"));
  } else {
    BP_RETURN_IF_ERROR(c.require_inputs(3, 5));
    const char* names[] = {"data", "starts", "ends", "axes", "steps"};
    for (size_t i = 1; i < c.num_inputs(); ++i)
      if (c.has(i)) BP_RETURN_IF_ERROR(c.expect_dtype(i, {I32, I64}, names[i]));
    BP_ASSIGN_OR_RETURN(starts, c.ints_input(1, "starts"));
    BP_ASSIGN_OR_RETURN(ends, c.ints_input(2, "ends"));
    if (c.has(3)) {
      BP_ASSIGN_OR_RETURN(axes, c.ints_input(3, "axes"));
    }
    if (c.has(4)) {
      BP_ASSIGN_OR_RETURN(steps, c.ints_input(4, "steps"));
    }
  }
  return plan_slice(c, c.shape(0), starts, ends, axes, steps);
}

Result<Tensor> constant_attr_value(const InferCtx& c) {
  if (c.node.attributes.size() != 1)
    return c.error("expected exactly one value attribute, got " +
                   std::to_string(c.node.attributes.size()));
  const Attribute& a = c.node.attributes[0];
  auto expect = [&](AttrType t) -> Status {
    if (a.type != t)
      return c.error("attribute '" + a.name + "' has type " + attr_type_name(a.type) +
                     ", expected " + attr_type_name(t));
    return ok_status();
  };
  if (a.name == "value") {
    BP_RETURN_IF_ERROR(expect(AttrType::kTensor));
    return a.t;
  }
  if (a.name == "value_float") {
    BP_RETURN_IF_ERROR(expect(AttrType::kFloat));
    return Tensor::copy_of(F32, {}, &a.f);
  }
  if (a.name == "value_floats") {
    BP_RETURN_IF_ERROR(expect(AttrType::kFloats));
    return Tensor::copy_of(F32, {static_cast<int64_t>(a.floats.size())}, a.floats.data());
  }
  if (a.name == "value_int") {
    BP_RETURN_IF_ERROR(expect(AttrType::kInt));
    return Tensor::copy_of(I64, {}, &a.i);
  }
  if (a.name == "value_ints") {
    BP_RETURN_IF_ERROR(expect(AttrType::kInts));
    return Tensor::copy_of(I64, {static_cast<int64_t>(a.ints.size())}, a.ints.data());
  }
  return c.unsupported_error("Constant attribute '" + a.name + "' is not supported");
}

}  // namespace backplane::ir::detail
