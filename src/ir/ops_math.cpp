// ops_math.cpp — schemas: unary math, activations, normalisations and layout ops beyond the basics.
//
// Type lists are ONNX's for each version (from onnx.defs), less the element
// types Backplane has no DType for (string, complex). A new schema version is
// registered only where ONNX changed the meaning or the type list.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using detail::kMaxElements;
using detail::sat_mul;

constexpr DType F16 = DType::kFloat16, BF16 = DType::kBFloat16, F32 = DType::kFloat32,
                F64 = DType::kFloat64, I8 = DType::kInt8, I16 = DType::kInt16, I32 = DType::kInt32,
                I64 = DType::kInt64, U8 = DType::kUInt8, U16 = DType::kUInt16, U32 = DType::kUInt32,
                U64 = DType::kUInt64, BOOL = DType::kBool;

const DTypeList kF = {F16, F32, F64};         // ONNX's float list before opset 13
const DTypeList kFB = {F16, F32, F64, BF16};  // ... and from 13
const DTypeList kNum = {U8, U16, U32, U64, I8, I16, I32, I64, F16, F32, F64};
const DTypeList kNumB = {U8, U16, U32, U64, I8, I16, I32, I64, F16, F32, F64, BF16};
const DTypeList kAllNoStr = {U8, U16, U32, U64, I8, I16, I32, I64, F16, F32, F64, BOOL};
const DTypeList kAllNoStrB = {U8, U16, U32, U64, I8, I16, I32, I64, F16, F32, F64, BOOL, BF16};

std::string dims(const Shape& s) { return shape_to_string(s); }

// Dims may be -1 (unknown until a data-dependent producer has run): such a
// dim is not checked and makes the output dims computed from it unknown too.
constexpr int64_t kUnknown = -1;
inline bool unknown(int64_t d) { return d < 0; }
inline int64_t mul_dim(int64_t d, int64_t k) { return unknown(d) ? kUnknown : sat_mul(d, k); }
inline int64_t div_dim(int64_t d, int64_t k) { return unknown(d) ? kUnknown : d / k; }

Status same_as_input(InferCtx& c) {
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status bool_like_input(InferCtx& c) {
  c.set(0, BOOL, c.shape(0));
  return ok_status();
}

Status broadcast_two(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(Shape s, detail::broadcast_shapes(c, {0, 1}));
  c.set(0, c.dtype(0), std::move(s));
  return ok_status();
}

// A unary op X -> Y of one type list.
OpSchema unary(const char* op, int since, const DTypeList& types, const char* doc,
               const char* in = "input", const char* out = "output") {
  OpSchema s("", op, since);
  s.doc(doc).input(in, "T").output(out, "T").type("T", types).infer(same_as_input);
  return s;
}

Status need_rank_at_least(InferCtx& c, size_t i, int64_t r, const char* what) {
  if (c.rank(i) >= r) return ok_status();
  return c.error("input '" + c.name(i) + "' has " + std::to_string(c.rank(i)) + " dims " +
                 dims(c.shape(i)) + ", expected at least " + std::to_string(r) + " (" + what + ")");
}

// ------------------------------------------------------------ activations

Status infer_mod(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t fmod, c.node.attr_int("fmod", 0));
  if (fmod != 0 && fmod != 1) return c.error("attribute 'fmod' must be 0 or 1");
  const DType t = c.dtype(0);
  if (fmod == 0 && (t == F16 || t == F32 || t == F64 || t == BF16))
    return c.error("fmod=0 on floating-point inputs is not allowed (ONNX requires fmod=1)");
  return broadcast_two(c);
}

Status infer_bitshift(InferCtx& c) {
  // Not BP_ASSIGN_OR_RETURN: GCC 12 warns falsely about the moved-out string.
  Result<std::string> dir = c.node.attr_string("direction", "");
  if (!dir.ok()) return dir.status();
  if (*dir != "LEFT" && *dir != "RIGHT")
    return c.error("attribute 'direction' is '" + *dir + "', expected 'LEFT' or 'RIGHT'");
  return broadcast_two(c);
}

Status infer_isinf(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t neg, c.node.attr_int("detect_negative", 1));
  BP_ASSIGN_OR_RETURN(int64_t pos, c.node.attr_int("detect_positive", 1));
  (void)neg, (void)pos;
  return bool_like_input(c);
}

Status infer_shrink(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(float lambd, c.node.attr_float("lambd", 0.5f));
  BP_ASSIGN_OR_RETURN(float bias, c.node.attr_float("bias", 0.0f));
  if (!std::isfinite(lambd) || !std::isfinite(bias))
    return c.error("attributes 'lambd' and 'bias' must be finite");
  return same_as_input(c);
}

Status infer_axis_op(InferCtx& c) {
  // Hardmax (and the softmax family before 13) at opset < 13 flattens to 2-D
  // at `axis`, which may then equal the rank; from 13 it is one axis.
  const int64_t fallback = c.opset >= 13 ? -1 : 1;
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", fallback));
  const int64_t r = std::max<int64_t>(c.rank(0), 1);
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, r, "axis", c.opset < 13));
  (void)a;
  return same_as_input(c);
}

// ------------------------------------------------------------ normalisations

Status infer_lrn(InferCtx& c) {
  BP_RETURN_IF_ERROR(need_rank_at_least(c, 0, 3, "N, C, spatial..."));
  BP_ASSIGN_OR_RETURN(int64_t size, c.node.attr_int("size", 0));
  if (size <= 0) return c.error("attribute 'size' must be positive, got " + std::to_string(size));
  return same_as_input(c);
}

Status infer_mvn(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                      c.node.attr_ints("axes", std::vector<int64_t>{0, 2, 3}));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm, c.normalize_axes(axes, c.rank(0), "axes"));
  (void)norm;
  return same_as_input(c);
}

Status infer_lp_norm(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t p, c.node.attr_int("p", 2));
  if (p != 1 && p != 2) return c.error("attribute 'p' must be 1 or 2, got " + std::to_string(p));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", -1));
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, std::max<int64_t>(c.rank(0), 1), "axis"));
  (void)a;
  return same_as_input(c);
}

// ------------------------------------------------------------ layout

Status infer_eye_like(InferCtx& c) {
  if (c.rank(0) != 2)
    return c.error("input '" + c.name(0) + "' must be 2-D, got " + dims(c.shape(0)));
  BP_ASSIGN_OR_RETURN(int64_t k, c.node.attr_int("k", 0));
  (void)k;
  DType out = c.dtype(0);
  if (c.node.attr("dtype") != nullptr) {
    BP_ASSIGN_OR_RETURN(int64_t dt, c.node.attr_int("dtype", 0));
    out = static_cast<DType>(dt);
    if (std::find(kAllNoStr.begin(), kAllNoStr.end(), out) == kAllNoStr.end())
      return c.error("attribute 'dtype' is " + std::to_string(dt) +
                     ", which is not a type EyeLike produces");
  }
  c.set(0, out, c.shape(0));
  return ok_status();
}

Result<int64_t> blocksize(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t b, c.node.attr_int("blocksize", 0));
  if (b <= 0 || b > (int64_t{1} << 24))
    return c.error("attribute 'blocksize' must be positive (and under 2^24), got " +
                   std::to_string(b));
  if (c.rank(0) != 4)
    return c.error("input '" + c.name(0) + "' must be 4-D (N, C, H, W), got " + dims(c.shape(0)));
  return b;
}

Status infer_depth_to_space(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t b, blocksize(c));
  Result<std::string> mode = c.node.attr_string("mode", "DCR");
  if (!mode.ok()) return mode.status();
  if (*mode != "DCR" && *mode != "CRD")
    return c.error("attribute 'mode' is '" + *mode + "', expected 'DCR' or 'CRD'");
  const Shape& x = c.shape(0);
  if (!unknown(x[1]) && x[1] % (b * b) != 0)
    return c.error("channels " + std::to_string(x[1]) + " of '" + c.name(0) +
                   "' are not a multiple of blocksize^2 = " + std::to_string(b * b));
  c.set(0, c.dtype(0), {x[0], div_dim(x[1], b * b), mul_dim(x[2], b), mul_dim(x[3], b)});
  return ok_status();
}

Status infer_space_to_depth(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t b, blocksize(c));
  const Shape& x = c.shape(0);
  if ((!unknown(x[2]) && x[2] % b != 0) || (!unknown(x[3]) && x[3] % b != 0))
    return c.error("spatial dims " + dims(x) + " of '" + c.name(0) +
                   "' are not multiples of blocksize " + std::to_string(b));
  c.set(0, c.dtype(0), {x[0], mul_dim(x[1], b * b), div_dim(x[2], b), div_dim(x[3], b)});
  return ok_status();
}

Status infer_reverse_sequence(InferCtx& c) {
  BP_RETURN_IF_ERROR(need_rank_at_least(c, 0, 2, "time and batch axes"));
  BP_ASSIGN_OR_RETURN(int64_t batch_axis, c.node.attr_int("batch_axis", 1));
  BP_ASSIGN_OR_RETURN(int64_t time_axis, c.node.attr_int("time_axis", 0));
  if ((batch_axis != 0 && batch_axis != 1) || (time_axis != 0 && time_axis != 1) ||
      batch_axis == time_axis)
    return c.error("attributes 'batch_axis' (" + std::to_string(batch_axis) +
                   ") and 'time_axis' (" + std::to_string(time_axis) +
                   ") must be 0 and 1 in some order");
  const Shape& lens = c.shape(1);
  const int64_t batch = c.shape(0)[batch_axis];
  if (lens.size() != 1 || (lens[0] != batch && !unknown(lens[0]) && !unknown(batch)))
    return c.error("input 'sequence_lens' ('" + c.name(1) + "') has shape " + dims(lens) +
                   ", expected [" + std::to_string(c.shape(0)[batch_axis]) + "] (the batch size)");
  return same_as_input(c);
}

Status infer_det(InferCtx& c) {
  BP_RETURN_IF_ERROR(need_rank_at_least(c, 0, 2, "square matrices in the last two dims"));
  const Shape& x = c.shape(0);
  const int64_t rows = x[x.size() - 2], cols = x[x.size() - 1];
  if (rows != cols && !unknown(rows) && !unknown(cols))
    return c.error("input '" + c.name(0) + "' " + dims(x) + " is not square in its last two dims");
  c.set(0, c.dtype(0), Shape(x.begin(), x.end() - 2));
  return ok_status();
}

// Upsample 7-8: scales attribute; 9-10: scales input (constant for a static shape).
Status infer_upsample(InferCtx& c) {
  Result<std::string> mode = c.node.attr_string("mode", "nearest");
  if (!mode.ok()) return mode.status();
  if (*mode != "nearest" && *mode != "linear" && *mode != "bilinear")
    return c.error("attribute 'mode' is '" + *mode + "', expected 'nearest' or 'linear'");
  std::vector<double> scales;
  if (c.opset < 9) {
    BP_ASSIGN_OR_RETURN(std::vector<float> s, c.node.attr_floats("scales", {}));
    scales.assign(s.begin(), s.end());
  } else {
    BP_ASSIGN_OR_RETURN(scales, c.numbers_input(1, "scales"));
  }
  const Shape& x = c.shape(0);
  if (scales.size() != x.size())
    return c.error("'scales' has " + std::to_string(scales.size()) + " values, expected " +
                   std::to_string(x.size()) + " (one per dim of '" + c.name(0) + "')");
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(scales[i] >= 1.0) || !std::isfinite(scales[i]))
      return c.error("'scales' value " + std::to_string(scales[i]) + " (dim " + std::to_string(i) +
                     ") must be finite and at least 1");
    const double d = std::floor(static_cast<double>(x[i]) * scales[i]);
    if (d > static_cast<double>(kMaxElements))
      return c.error("output dim " + std::to_string(i) + " would be too large");
    out.push_back(unknown(x[i]) ? kUnknown : static_cast<int64_t>(d));
  }
  c.set(0, c.dtype(0), std::move(out));
  return ok_status();
}

Status infer_max_unpool(InferCtx& c) {
  BP_RETURN_IF_ERROR(need_rank_at_least(c, 0, 3, "N, C, spatial..."));
  const Shape& x = c.shape(0);
  if (c.shape(1) != x)
    return c.error("input 'I' ('" + c.name(1) + "') has shape " + dims(c.shape(1)) +
                   ", expected the shape of 'X' " + dims(x));
  const size_t n = x.size() - 2;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, c.node.attr_ints("kernel_shape", {}));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                      c.node.attr_ints("strides", std::vector<int64_t>(n, 1)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                      c.node.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  if (kernel.size() != n || strides.size() != n || pads.size() != 2 * n)
    return c.error("kernel_shape, strides and pads must have " + std::to_string(n) + ", " +
                   std::to_string(n) + " and " + std::to_string(2 * n) + " values");
  Shape out{x[0], x[1]};
  for (size_t i = 0; i < n; ++i) {
    if (kernel[i] <= 0 || strides[i] <= 0 || pads[i] < 0 || pads[i + n] < 0 ||
        kernel[i] > kMaxElements || strides[i] > kMaxElements || pads[i] > kMaxElements ||
        pads[i + n] > kMaxElements)
      return c.error("kernel_shape and strides must be positive, pads non-negative");
    const int64_t d =
        sat_mul(std::max<int64_t>(x[i + 2] - 1, 0), strides[i]) + kernel[i] - pads[i] - pads[i + n];
    if (d < 0 && !unknown(x[i + 2]))
      return c.error("spatial dim " + std::to_string(i) + " of the output is negative");
    out.push_back(unknown(x[i + 2]) ? kUnknown : d);
  }
  if (c.has(2)) {
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.ints_input(2, "output_shape"));
    if (shape.size() != x.size())
      return c.error("'output_shape' has " + std::to_string(shape.size()) + " values, expected " +
                     std::to_string(x.size()));
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i < 2 ? shape[i] != x[i] : shape[i] < out[i] || shape[i] > kMaxElements)
        return c.error("'output_shape' " + dims(shape) + " is inconsistent with the default " +
                       "output shape " + dims(out) + " (it may only grow spatial dims)");
    }
    out = std::move(shape);
  }
  c.set(0, c.dtype(0), std::move(out));
  return ok_status();
}

// Einsum: parses the equation, checks every operand against its term and
// gives the output shape (explicit "->" output, or numpy's implicit one:
// ellipsis dims, then the labels used once, in alphabetical order).
Status infer_einsum(InferCtx& c) {
  Result<std::string> eq_r = c.node.attr_string("equation", "");
  if (!eq_r.ok()) return eq_r.status();
  std::string eq;
  for (char ch : *eq_r)
    if (ch != ' ') eq += ch;
  std::string lhs = eq, rhs;
  const size_t arrow = eq.find("->");
  const bool explicit_out = arrow != std::string::npos;
  if (explicit_out) lhs = eq.substr(0, arrow), rhs = eq.substr(arrow + 2);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(
        lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.num_inputs())
    return c.error("equation '" + *eq_r + "' has " + std::to_string(terms.size()) +
                   " operands, the node " + std::to_string(c.num_inputs()) + " inputs");
  std::map<char, int64_t> size;
  std::map<char, int> count;
  Shape ell;  // broadcast ellipsis dims
  bool any_ellipsis = false;
  // Splits a term into labels; '.' stands for the ellipsis position.
  auto parse = [&](const std::string& t, std::string* labels) -> Status {
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.compare(i, 3, "...") == 0) {
        if (labels->find('.') != std::string::npos)
          return c.error("equation '" + *eq_r + "': a term has two ellipses");
        *labels += '.';
        i += 2;
      } else if (std::isalpha(static_cast<unsigned char>(t[i]))) {
        *labels += t[i];
      } else {
        return c.error("equation '" + *eq_r + "': unexpected character '" + std::string(1, t[i]) +
                       "'");
      }
    }
    return ok_status();
  };
  for (size_t k = 0; k < terms.size(); ++k) {
    std::string labels;
    BP_RETURN_IF_ERROR(parse(terms[k], &labels));
    const Shape& s = c.shape(k);
    const bool has_ell = labels.find('.') != std::string::npos;
    const int64_t named = static_cast<int64_t>(labels.size()) - (has_ell ? 1 : 0);
    if (has_ell ? c.rank(k) < named : c.rank(k) != named)
      return c.error("operand " + std::to_string(k) + " ('" + c.name(k) + "') has shape " +
                     dims(s) + ", which does not match term '" + terms[k] + "'");
    size_t d = 0;
    for (char l : labels) {
      if (l == '.') {
        const size_t n = s.size() - static_cast<size_t>(named);
        any_ellipsis = true;
        // numpy broadcasting of the ellipsis dims, aligned at the right.
        if (n > ell.size()) ell.insert(ell.begin(), n - ell.size(), 1);
        for (size_t j = 0; j < n; ++j) {
          int64_t& e = ell[ell.size() - n + j];
          const int64_t v = s[d + j];
          if (unknown(v) || unknown(e)) {
            if (e == 1 || (unknown(e) && v != 1)) e = v;
            continue;
          }
          if (v != e && v != 1 && e != 1)
            return c.error("equation '" + *eq_r + "': ellipsis dims of operand " +
                           std::to_string(k) + " " + dims(s) + " do not broadcast");
          if (e == 1) e = v;
        }
        d += n;
        continue;
      }
      auto [it, fresh] = size.emplace(l, s[d]);
      if (!fresh && it->second != s[d]) {
        if (unknown(s[d])) {
          // keep the known size
        } else if (it->second == 1 || unknown(it->second)) {
          it->second = s[d];
        } else if (s[d] != 1) {
          return c.error("equation '" + *eq_r + "': label '" + std::string(1, l) + "' has sizes " +
                         std::to_string(it->second) + " and " + std::to_string(s[d]));
        }
      }
      ++count[l];
      ++d;
    }
  }
  std::string out_labels;
  if (explicit_out) {
    BP_RETURN_IF_ERROR(parse(rhs, &out_labels));
    std::set<char> seen;
    for (char l : out_labels) {
      if (!seen.insert(l).second) return c.error("equation '" + *eq_r + "': output label repeated");
      if (l != '.' && size.count(l) == 0)
        return c.error("equation '" + *eq_r + "': output label '" + std::string(1, l) +
                       "' is not in any input");
    }
    if (any_ellipsis && out_labels.find('.') == std::string::npos && !ell.empty()) {
      bool all_one = true;
      for (int64_t e : ell) all_one = all_one && e == 1;
      if (!all_one) return c.error("equation '" + *eq_r + "': the output drops the ellipsis dims");
    }
  } else {
    if (any_ellipsis) out_labels += '.';
    for (const auto& [l, n] : count)
      if (n == 1) out_labels += l;
  }
  Shape out;
  for (char l : out_labels) {
    if (l == '.') out.insert(out.end(), ell.begin(), ell.end());
    else out.push_back(size[l]);
  }
  c.set(0, c.dtype(0), std::move(out));
  return ok_status();
}

Status infer_cumsum(InferCtx& c) {
  if (detail::sat_numel(c.shape(1)) != 1 || c.rank(1) > 1)
    return c.error("input 'axis' ('" + c.name(1) + "') must be a scalar, got shape " +
                   dims(c.shape(1)));
  BP_ASSIGN_OR_RETURN(int64_t ex, c.node.attr_int("exclusive", 0));
  BP_ASSIGN_OR_RETURN(int64_t rev, c.node.attr_int("reverse", 0));
  (void)ex, (void)rev;
  if (const Tensor* t = c.constant(1)) {
    BP_ASSIGN_OR_RETURN(std::vector<int64_t> axis, c.ints_input(1, "axis"));
    (void)t;
    BP_ASSIGN_OR_RETURN(int64_t a,
                        c.normalize_axis(axis[0], std::max<int64_t>(c.rank(0), 1), "axis"));
    (void)a;
  }
  return same_as_input(c);
}

// ------------------------------------------------------------ pooling

Status infer_lp_pool(InferCtx& c) {
  BP_RETURN_IF_ERROR(need_rank_at_least(c, 0, 3, "N, C, spatial..."));
  const Shape& x = c.shape(0);
  const size_t n = x.size() - 2;
  if (c.opset >= 2) {
    BP_ASSIGN_OR_RETURN(int64_t p, c.node.attr_int("p", 2));
    if (p <= 0) return c.error("attribute 'p' must be positive, got " + std::to_string(p));
  }
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, c.node.attr_ints("kernel_shape", {}));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> strides,
                      c.node.attr_ints("strides", std::vector<int64_t>(n, 1)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pads,
                      c.node.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  Result<std::string> auto_pad = c.node.attr_string("auto_pad", "NOTSET");
  if (!auto_pad.ok()) return auto_pad.status();
  if (kernel.size() != n || strides.size() != n || pads.size() != 2 * n)
    return c.error("kernel_shape, strides and pads must have " + std::to_string(n) + ", " +
                   std::to_string(n) + " and " + std::to_string(2 * n) + " values");
  const std::string& ap = *auto_pad;
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID")
    return c.error("attribute 'auto_pad' is '" + ap + "'");
  Shape out{x[0], x[1]};
  for (size_t i = 0; i < n; ++i) {
    if (kernel[i] <= 0 || strides[i] <= 0 || pads[i] < 0 || pads[i + n] < 0 ||
        kernel[i] > kMaxElements || strides[i] > kMaxElements || pads[i] > kMaxElements ||
        pads[i + n] > kMaxElements)
      return c.error("kernel_shape and strides must be positive, pads non-negative");
    const int64_t in = x[i + 2];
    if (unknown(in)) {
      out.push_back(kUnknown);
      continue;
    }
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      out.push_back((in + strides[i] - 1) / strides[i]);
      continue;
    }
    const int64_t span = in + (ap == "VALID" ? 0 : pads[i] + pads[i + n]) - kernel[i];
    if (span < 0)
      return c.error("kernel_shape " + dims(kernel) + " is larger than the padded input");
    out.push_back(span / strides[i] + 1);
  }
  c.set(0, c.dtype(0), std::move(out));
  return ok_status();
}

Status infer_global_lp_pool(InferCtx& c) {
  BP_RETURN_IF_ERROR(need_rank_at_least(c, 0, 3, "N, C, spatial..."));
  if (c.opset >= 2) {
    BP_ASSIGN_OR_RETURN(int64_t p, c.node.attr_int("p", 2));
    if (p <= 0) return c.error("attribute 'p' must be positive, got " + std::to_string(p));
  }
  Shape out = c.shape(0);
  std::fill(out.begin() + 2, out.end(), 1);
  c.set(0, c.dtype(0), std::move(out));
  return ok_status();
}

// ReduceLogSumExp (axes as an attribute through opset 17).
Status infer_reduce_attr_axes(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> axes, c.node.attr_ints("axes", {}));
  BP_ASSIGN_OR_RETURN(int64_t keepdims, c.node.attr_int("keepdims", 1));
  const Shape& x = c.shape(0);
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> norm,
                      c.normalize_axes(axes, static_cast<int64_t>(x.size()), "axes"));
  std::vector<bool> reduced(x.size(), norm.empty());
  for (int64_t a : norm) reduced[a] = true;
  Shape out;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) out.push_back(x[d]);
    else if (keepdims != 0) out.push_back(1);
  }
  c.set(0, c.dtype(0), std::move(out));
  return ok_status();
}

void add(OpRegistry& r, OpSchema s) { (void)r.add(std::move(s)); }

void register_unary_math(OpRegistry& r) {
  struct U {
    const char* op;
    int since;
    const char* doc;
  };
  for (const U& u :
       {U{"Acos", 7, "arccos(x)"}, U{"Asin", 7, "arcsin(x)"}, U{"Atan", 7, "arctan(x)"},
        U{"Tan", 7, "tan(x)"}, U{"Acosh", 9, "arccosh(x)"}, U{"Asinh", 9, "arcsinh(x)"},
        U{"Atanh", 9, "arctanh(x)"}, U{"Sinh", 9, "sinh(x)"}, U{"Cosh", 9, "cosh(x)"}})
    add(r, unary(u.op, u.since, kF, u.doc));

  add(r, OpSchema("", "IsNaN", 9)
             .doc("x != x")
             .input("X", "T1")
             .output("Y", "T2")
             .type("T1", kF)
             .type("T2", {BOOL})
             .infer(bool_like_input));
  add(r, OpSchema("", "IsNaN", 13)
             .doc("x != x")
             .input("X", "T1")
             .output("Y", "T2")
             .type("T1", kFB)
             .type("T2", {BOOL})
             .infer(bool_like_input));
  add(r, OpSchema("", "IsInf", 10)
             .doc("x is +inf (detect_positive) or -inf (detect_negative)")
             .input("X", "T1")
             .output("Y", "T2")
             .type("T1", {F32, F64})
             .type("T2", {BOOL})
             .attr("detect_negative", AttrType::kInt, int64_t{1})
             .attr("detect_positive", AttrType::kInt, int64_t{1})
             .infer(infer_isinf));

  for (int since : {10, 13})
    add(r, OpSchema("", "Mod", since)
               .doc("remainder: sign of the divisor (fmod=0, integers) or of the dividend (fmod=1)")
               .input("A", "T")
               .input("B", "T")
               .output("C", "T")
               .type("T", since >= 13 ? kNumB : kNum)
               .attr("fmod", AttrType::kInt, int64_t{0})
               .infer(infer_mod));
  add(r, OpSchema("", "BitShift", 11)
             .doc("x << y or x >> y on unsigned integers")
             .input("X", "T")
             .input("Y", "T")
             .output("Z", "T")
             .type("T", {U8, U16, U32, U64})
             .required_attr("direction", AttrType::kString)
             .infer(infer_bitshift));
}

void register_activations(OpRegistry& r) {
  add(r, OpSchema("", "Celu", 12)
             .doc("max(0, x) + min(0, alpha * (exp(x / alpha) - 1))")
             .input("X", "T")
             .output("Y", "T")
             .type("T", {F32})
             .attr("alpha", AttrType::kFloat, 1.0f)
             .infer(same_as_input));
  add(r, OpSchema("", "Shrink", 9)
             .doc("x < -lambd: x + bias; x > lambd: x - bias; else 0")
             .input("input", "T")
             .output("output", "T")
             .type("T", kNum)
             .attr("bias", AttrType::kFloat, 0.0f)
             .attr("lambd", AttrType::kFloat, 0.5f)
             .infer(infer_shrink));
  add(r, OpSchema("", "ThresholdedRelu", 10)
             .doc("x > alpha ? x : 0")
             .input("X", "T")
             .output("Y", "T")
             .type("T", kF)
             .attr("alpha", AttrType::kFloat, 1.0f)
             .infer(same_as_input));
  for (int since : {1, 11, 13})
    add(r, OpSchema("", "Hardmax", since)
               .doc(since < 13 ? "one-hot of the first maximum of each row of the input "
                                 "flattened to 2-D at axis"
                               : "one-hot of the first maximum along axis")
               .input("input", "T")
               .output("output", "T")
               .type("T", since >= 13 ? kFB : kF)
               .attr("axis", AttrType::kInt, int64_t{since >= 13 ? -1 : 1})
               .infer(infer_axis_op));
}

void register_normalisations(OpRegistry& r) {
  for (int since : {1, 13})
    add(r, OpSchema("", "LRN", since)
               .doc("local response normalisation across channels")
               .input("X", "T")
               .output("Y", "T")
               .type("T", since >= 13 ? kFB : kF)
               .attr("alpha", AttrType::kFloat, 0.0001f)
               .attr("beta", AttrType::kFloat, 0.75f)
               .attr("bias", AttrType::kFloat, 1.0f)
               .required_attr("size", AttrType::kInt)
               .infer(infer_lrn));
  for (int since : {9, 13})
    add(r, OpSchema("", "MeanVarianceNormalization", since)
               .doc("(x - mean) / sqrt(var) over axes")
               .input("X", "T")
               .output("Y", "T")
               .type("T", since >= 13 ? kFB : kF)
               .attr("axes", AttrType::kInts, std::vector<int64_t>{0, 2, 3})
               .infer(infer_mvn));
  add(r, OpSchema("", "LpNormalization", 1)
             .doc("x / ||x||_p along axis")
             .input("input", "T")
             .output("output", "T")
             .type("T", kF)
             .attr("axis", AttrType::kInt, int64_t{-1})
             .attr("p", AttrType::kInt, int64_t{2})
             .infer(infer_lp_norm));
}

void register_layout(OpRegistry& r) {
  add(r, OpSchema("", "EyeLike", 9)
             .doc("ones on the k-th diagonal of a 2-D tensor of the input's shape")
             .input("input", "T1")
             .output("output", "T2")
             .type("T1", kAllNoStr)
             .type("T2", kAllNoStr)
             .attr("dtype", AttrType::kInt)
             .attr("k", AttrType::kInt, int64_t{0})
             .infer(infer_eye_like));
  for (int since : {1, 11, 13}) {
    OpSchema s("", "DepthToSpace", since);
    s.doc("moves channel blocks into spatial blocks (mode DCR or CRD)")
        .input("input", "T")
        .output("output", "T")
        .type("T", since >= 13 ? kAllNoStrB : kAllNoStr)
        .required_attr("blocksize", AttrType::kInt)
        .infer(infer_depth_to_space);
    if (since >= 11) s.attr("mode", AttrType::kString, std::string("DCR"));
    add(r, std::move(s));
  }
  for (int since : {1, 13})
    add(r, OpSchema("", "SpaceToDepth", since)
               .doc("moves spatial blocks into channels")
               .input("input", "T")
               .output("output", "T")
               .type("T", since >= 13 ? kAllNoStrB : kAllNoStr)
               .required_attr("blocksize", AttrType::kInt)
               .infer(infer_space_to_depth));
  add(r, OpSchema("", "ReverseSequence", 10)
             .doc("reverses the first sequence_lens[b] steps of every batch entry")
             .input("input", "T")
             .input("sequence_lens", "tensor(int64)")
             .output("Y", "T")
             .type("T", kAllNoStr)
             .type("tensor(int64)", {I64})
             .attr("batch_axis", AttrType::kInt, int64_t{1})
             .attr("time_axis", AttrType::kInt, int64_t{0})
             .infer(infer_reverse_sequence));
  add(r, OpSchema("", "Det", 11)
             .doc("determinant of square matrices (batched over leading dims)")
             .input("X", "T")
             .output("Y", "T")
             .type("T", kF)
             .infer(infer_det));
  add(r, OpSchema("", "Upsample", 7)
             .doc("nearest or (bi)linear upsampling by constant scales (deprecated for Resize)")
             .input("X", "T")
             .output("Y", "T")
             .type("T", kAllNoStr)
             .attr("mode", AttrType::kString, std::string("nearest"))
             .required_attr("scales", AttrType::kFloats)
             .infer(infer_upsample));
  add(r, OpSchema("", "Upsample", 9)
             .doc("nearest or (bi)linear upsampling by scales (deprecated for Resize)")
             .input("X", "T")
             .input("scales", "tensor(float)")
             .output("Y", "T")
             .type("T", kAllNoStr)
             .type("tensor(float)", {F32})
             .attr("mode", AttrType::kString, std::string("nearest"))
             .shape_inputs({"scales"})
             .infer(infer_upsample));
  for (int since : {9, 11})
    add(r, OpSchema("", "MaxUnpool", since)
               .doc("scatters pooled values back to the positions MaxPool's indices name")
               .input("X", "T1")
               .input("I", "T2")
               .optional_input("output_shape", "T2")
               .output("output", "T1")
               .type("T1", kF)
               .type("T2", {I64})
               .required_attr("kernel_shape", AttrType::kInts)
               .attr("pads", AttrType::kInts)
               .attr("strides", AttrType::kInts)
               .shape_inputs({"output_shape"})
               .infer(infer_max_unpool));
  add(r, OpSchema("", "Einsum", 12)
             .doc("Einstein summation over the operands (numpy.einsum semantics)")
             .variadic_input("Inputs", "T", 1)
             .output("Output", "T")
             .type("T", kNum)
             .required_attr("equation", AttrType::kString)
             .infer(infer_einsum));
  for (int since : {11, 14})
    add(r, OpSchema("", "CumSum", since)
               .doc("cumulative sum along axis (exclusive, reverse)")
               .input("x", "T")
               .input("axis", "T2")
               .output("y", "T")
               .type("T", since >= 14 ? DTypeList{U32, U64, I32, I64, F16, F32, F64, BF16}
                                      : DTypeList{U32, U64, I32, I64, F32, F64})
               .type("T2", {I32, I64})
               .attr("exclusive", AttrType::kInt, int64_t{0})
               .attr("reverse", AttrType::kInt, int64_t{0})
               .infer(infer_cumsum));
}

void register_pooling(OpRegistry& r) {
  for (int since : {2, 11})
    add(r, OpSchema("", "LpPool", since)
               .doc("(sum over the window of |x|^p)^(1/p)")
               .input("X", "T")
               .output("Y", "T")
               .type("T", kF)
               .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
               .required_attr("kernel_shape", AttrType::kInts)
               .attr("p", AttrType::kInt, int64_t{2})
               .attr("pads", AttrType::kInts)
               .attr("strides", AttrType::kInts)
               .infer(infer_lp_pool));
  add(r, OpSchema("", "GlobalLpPool", 2)
             .doc("(sum over the spatial dims of |x|^p)^(1/p)")
             .input("X", "T")
             .output("Y", "T")
             .type("T", kF)
             .attr("p", AttrType::kInt, int64_t{2})
             .infer(infer_global_lp_pool));
  for (int since : {1, 13})
    add(r, OpSchema("", "ReduceLogSumExp", since)
               .doc("log(sum(exp(x))) over axes")
               .input("data", "T")
               .output("reduced", "T")
               .type("T", since >= 13 ? DTypeList{U32, U64, I32, I64, F16, F32, F64, BF16}
                                      : DTypeList{U32, U64, I32, I64, F16, F32, F64})
               .attr("axes", AttrType::kInts)
               .attr("keepdims", AttrType::kInt, int64_t{1})
               .infer(infer_reduce_attr_axes));
}

}  // namespace

void register_math_ops(OpRegistry& registry) {
  register_unary_math(registry);
  register_activations(registry);
  register_normalisations(registry);
  register_layout(registry);
  register_pooling(registry);
}

}  // namespace backplane::ir::ops
