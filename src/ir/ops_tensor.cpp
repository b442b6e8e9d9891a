// ops_tensor.cpp — schemas: shape manipulation, shapes and constants, Cast, reductions,
// ArgMax/ArgMin and Resize.
//
// The ops Backplane started with, as ONNX declares them (onnx.defs): one
// schema per ONNX version whose signature, type lists or attributes change,
// from the first version whose meaning the infer function handles (versions
// with the legacy `consumed_inputs`, `broadcast` or `is_test` attributes are
// not registered). Type lists are ONNX's, not what any backend runs: a
// backend that cannot run a dtype says so when asked to place the node.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using detail::kMaxElements;
using detail::sat_numel;
using namespace detail::dt;
using detail::SlicePlan;

std::string dims(const Shape& s) { return shape_to_string(s); }
std::string list(const std::vector<int64_t>& v) { return shape_to_string(v); }

Status infer_reshape(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
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
  BP_ASSIGN_OR_RETURN(SlicePlan plan, detail::slice_plan_for(c));
  c.set(0, c.dtype(0), plan.out);
  return ok_status();
}

Status infer_gather(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
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

Status infer_expand(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
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

Status infer_trilu(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 2));
  if (c.rank(0) < 2)
    return c.error("input '" + c.name(0) + "' must have rank >= 2, got " + dims(c.shape(0)));
  BP_ASSIGN_OR_RETURN(int64_t upper, c.node.attr_int("upper", 1));
  (void)upper;
  if (c.has(1)) {
    if (sat_numel(c.shape(1)) != 1) return c.error("input 'k' must be a scalar");
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_shape(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  int64_t first, last;
  BP_RETURN_IF_ERROR(detail::shape_range(c, &first, &last));
  c.set(0, I64, {std::max<int64_t>(last - first, 0)});
  return ok_status();
}

// Ops CpuRef also runs beyond the required list.
Status infer_size(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  c.set(0, I64, {});
  return ok_status();
}

Status infer_constant(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(0, 0));
  BP_ASSIGN_OR_RETURN(Tensor t, detail::constant_attr_value(c));
  c.set(0, t.dtype(), t.shape());
  return ok_status();
}

Status infer_constant_of_shape(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
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

Status infer_range(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(3, 3));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 1));
  BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i)
    if (c.rank(i) != 0 && sat_numel(c.shape(i)) != 1)
      return c.error(std::string("input '") + names[i] + "' must be a scalar, got " +
                     dims(c.shape(i)));
  int64_t n;
  if (c.dtype(0) == F32 || c.dtype(0) == F64) {
    std::vector<double> v[3];
    for (size_t i = 0; i < 3; ++i) {
      BP_ASSIGN_OR_RETURN(v[i], c.numbers_input(i, names[i]));
    }
    // The count as the op computes it: in float for float32, else double.
    double start = v[0][0], limit = v[1][0], delta = v[2][0], quotient;
    if (c.dtype(0) == F32)
      quotient =
          (static_cast<float>(limit) - static_cast<float>(start)) / static_cast<float>(delta);
    else quotient = (limit - start) / delta;
    if (delta == 0) return c.error("input 'delta' is 0");
    const double count = std::max(std::ceil(quotient), 0.0);
    if (!(count <= static_cast<double>(kMaxElements)))  // also NaN and infinity
      return c.error("start, limit and delta give " + std::to_string(count) + " elements");
    n = static_cast<int64_t>(count);
  } else {
    std::vector<int64_t> v[3];
    for (size_t i = 0; i < 3; ++i) {
      if (c.dtype(i) == I16) {  // ints_input reads int32 and int64 only
        const Tensor* t = c.constant(i);
        if (t == nullptr)
          return c.error(std::string("input '") + names[i] + "' ('" + c.name(i) +
                         "') must be constant to infer a static shape");
        v[i] = {*t->data_as<int16_t>()};
        continue;
      }
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

Status infer_cast(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(1, 1));
  const Attribute* a = c.node.attr("to");
  if (a == nullptr) return c.error("attribute 'to' is required");
  BP_ASSIGN_OR_RETURN(int64_t to, c.node.attr_int("to", 0));
  // ONNX's element types are 1..16 (17..20, float8, from opset 19).
  if (to < 1 || to > 20)
    return c.error("attribute 'to' is " + std::to_string(to) + ", not an ONNX element type");
  DType t = static_cast<DType>(to);
  if (dtype_size(t) == 0)
    return c.unsupported_error("cast to ONNX element type " + std::to_string(to) +
                               " (string, complex or float8) is not supported");
  c.set(0, t, c.shape(0));
  return ok_status();
}

Status infer_cast_like(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(2, 2));
  c.set(0, c.dtype(1), c.shape(0));
  return ok_status();
}

Status infer_reduce(InferCtx& c) {
  const bool axes_input = c.node.op_type == "ReduceSum" && c.opset >= 13;
  BP_RETURN_IF_ERROR(c.require_inputs(1, axes_input ? 2 : 1));
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
      BP_ASSIGN_OR_RETURN(scales, c.numbers_input(2, "scales"));
    } else {
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

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  using detail::add_schema;

  // Shape manipulation.
  add_schema(r, OpSchema("", "Reshape", 5)
                    .input("data", "T")
                    .input("shape", "tensor(int64)")
                    .output("reshaped", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .shape_inputs({"shape"})
                    .infer(infer_reshape));
  add_schema(r, OpSchema("", "Reshape", 13)
                    .input("data", "T")
                    .input("shape", "tensor(int64)")
                    .output("reshaped", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .shape_inputs({"shape"})
                    .infer(infer_reshape));
  add_schema(r, OpSchema("", "Reshape", 14)
                    .input("data", "T")
                    .input("shape", "tensor(int64)")
                    .output("reshaped", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .attr("allowzero", AttrType::kInt, int64_t{0})
                    .shape_inputs({"shape"})
                    .infer(infer_reshape));
  add_schema(r, OpSchema("", "Flatten", 1)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .attr("axis", AttrType::kInt, int64_t{1})
                    .infer(infer_flatten));
  add_schema(r, OpSchema("", "Flatten", 9)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("axis", AttrType::kInt, int64_t{1})
                    .infer(infer_flatten));
  add_schema(r, OpSchema("", "Flatten", 11)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("axis", AttrType::kInt, int64_t{1})
                    .infer(infer_flatten));
  add_schema(r, OpSchema("", "Flatten", 13)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("axis", AttrType::kInt, int64_t{1})
                    .infer(infer_flatten));
  add_schema(r, OpSchema("", "Transpose", 1)
                    .input("data", "T")
                    .output("transposed", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("perm", AttrType::kInts)
                    .infer(infer_transpose));
  add_schema(r, OpSchema("", "Transpose", 13)
                    .input("data", "T")
                    .output("transposed", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("perm", AttrType::kInts)
                    .infer(infer_transpose));
  add_schema(r, OpSchema("", "Concat", 4)
                    .variadic_input("inputs", "T", 1)
                    .output("concat_result", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .required_attr("axis", AttrType::kInt)
                    .infer(infer_concat));
  add_schema(r, OpSchema("", "Concat", 13)
                    .variadic_input("inputs", "T", 1)
                    .output("concat_result", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .required_attr("axis", AttrType::kInt)
                    .infer(infer_concat));
  add_schema(r, OpSchema("", "Split", 2)
                    .input("input", "T")
                    .variadic_output("outputs", "T", 1)
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("axis", AttrType::kInt, int64_t{0})
                    .attr("split", AttrType::kInts)
                    .infer(infer_split));
  add_schema(r, OpSchema("", "Split", 13)
                    .input("input", "T")
                    .optional_input("split", "tensor(int64)")
                    .variadic_output("outputs", "T", 1)
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .attr("axis", AttrType::kInt, int64_t{0})
                    .shape_inputs({"split"})
                    .infer(infer_split));
  add_schema(r, OpSchema("", "Slice", 1)
                    .input("data", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("axes", AttrType::kInts)
                    .required_attr("ends", AttrType::kInts)
                    .required_attr("starts", AttrType::kInts)
                    .infer(infer_slice));
  add_schema(r, OpSchema("", "Slice", 10)
                    .input("data", "T")
                    .input("starts", "Tind")
                    .input("ends", "Tind")
                    .optional_input("axes", "Tind")
                    .optional_input("steps", "Tind")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("Tind", {I32, I64})
                    .shape_inputs({"starts", "ends", "axes", "steps"})
                    .infer(infer_slice));
  add_schema(r, OpSchema("", "Slice", 13)
                    .input("data", "T")
                    .input("starts", "Tind")
                    .input("ends", "Tind")
                    .optional_input("axes", "Tind")
                    .optional_input("steps", "Tind")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("Tind", {I32, I64})
                    .shape_inputs({"starts", "ends", "axes", "steps"})
                    .infer(infer_slice));
  add_schema(r, OpSchema("", "Gather", 1)
                    .input("data", "T")
                    .input("indices", "Tind")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("Tind", {I32, I64})
                    .attr("axis", AttrType::kInt, int64_t{0})
                    .infer(infer_gather));
  add_schema(r, OpSchema("", "Gather", 13)
                    .input("data", "T")
                    .input("indices", "Tind")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("Tind", {I32, I64})
                    .attr("axis", AttrType::kInt, int64_t{0})
                    .infer(infer_gather));
  add_schema(r, OpSchema("", "Squeeze", 1)
                    .input("data", "T")
                    .output("squeezed", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("axes", AttrType::kInts)
                    .infer(infer_squeeze));
  add_schema(r, OpSchema("", "Squeeze", 13)
                    .input("data", "T")
                    .optional_input("axes", "tensor(int64)")
                    .output("squeezed", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .shape_inputs({"axes"})
                    .infer(infer_squeeze));
  add_schema(r, OpSchema("", "Unsqueeze", 1)
                    .input("data", "T")
                    .output("expanded", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .required_attr("axes", AttrType::kInts)
                    .infer(infer_unsqueeze));
  add_schema(r, OpSchema("", "Unsqueeze", 13)
                    .input("data", "T")
                    .input("axes", "tensor(int64)")
                    .output("expanded", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .shape_inputs({"axes"})
                    .infer(infer_unsqueeze));
  add_schema(r, OpSchema("", "Expand", 8)
                    .input("input", "T")
                    .input("shape", "tensor(int64)")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .shape_inputs({"shape"})
                    .infer(infer_expand));
  add_schema(r, OpSchema("", "Expand", 13)
                    .input("input", "T")
                    .input("shape", "tensor(int64)")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .shape_inputs({"shape"})
                    .infer(infer_expand));
  add_schema(r, OpSchema("", "Tile", 6)
                    .input("input", "T")
                    .input("repeats", "T1")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .shape_inputs({"repeats"})
                    .infer(infer_tile));
  add_schema(r, OpSchema("", "Tile", 13)
                    .input("input", "T")
                    .input("repeats", "T1")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .shape_inputs({"repeats"})
                    .infer(infer_tile));
  add_schema(r, OpSchema("", "Pad", 2)
                    .input("data", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .attr("mode", AttrType::kString, std::string("constant"))
                    .required_attr("pads", AttrType::kInts)
                    .attr("value", AttrType::kFloat, 0.0f)
                    .infer(infer_pad));
  add_schema(r, OpSchema("", "Pad", 11)
                    .input("data", "T")
                    .input("pads", "tensor(int64)")
                    .optional_input("constant_value", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .type("tensor(int64)", {I64})
                    .attr("mode", AttrType::kString, std::string("constant"))
                    .shape_inputs({"pads"})
                    .infer(infer_pad));
  add_schema(r, OpSchema("", "Pad", 13)
                    .input("data", "T")
                    .input("pads", "tensor(int64)")
                    .optional_input("constant_value", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .attr("mode", AttrType::kString, std::string("constant"))
                    .shape_inputs({"pads"})
                    .infer(infer_pad));
  add_schema(r, OpSchema("", "Trilu", 14)
                    .input("input", "T")
                    .optional_input("k", "tensor(int64)")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(int64)", {I64})
                    .attr("upper", AttrType::kInt, int64_t{1})
                    .infer(infer_trilu));

  // Shapes and constants.
  add_schema(r, OpSchema("", "Shape", 1)
                    .input("data", "T")
                    .output("shape", "T1")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .infer(infer_shape));
  add_schema(r, OpSchema("", "Shape", 13)
                    .input("data", "T")
                    .output("shape", "T1")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .infer(infer_shape));
  add_schema(r, OpSchema("", "Shape", 15)
                    .input("data", "T")
                    .output("shape", "T1")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .attr("end", AttrType::kInt)
                    .attr("start", AttrType::kInt, int64_t{0})
                    .infer(infer_shape));
  add_schema(r, OpSchema("", "Size", 1)
                    .input("data", "T")
                    .output("size", "T1")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .infer(infer_size));
  add_schema(r, OpSchema("", "Size", 13)
                    .input("data", "T")
                    .output("size", "T1")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {I64})
                    .infer(infer_size));
  add_schema(r, OpSchema("", "Constant", 1)
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .required_attr("value", AttrType::kTensor)
                    .infer(infer_constant));
  add_schema(r, OpSchema("", "Constant", 9)
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .required_attr("value", AttrType::kTensor)
                    .infer(infer_constant));
  add_schema(r, OpSchema("", "Constant", 11)
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("sparse_value", AttrType::kUndefined)
                    .attr("value", AttrType::kTensor)
                    .infer(infer_constant));
  add_schema(r, OpSchema("", "Constant", 12)
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("sparse_value", AttrType::kUndefined)
                    .attr("value", AttrType::kTensor)
                    .attr("value_float", AttrType::kFloat)
                    .attr("value_floats", AttrType::kFloats)
                    .attr("value_int", AttrType::kInt)
                    .attr("value_ints", AttrType::kInts)
                    .attr("value_string", AttrType::kString)
                    .attr("value_strings", AttrType::kStrings)
                    .infer(infer_constant));
  add_schema(r, OpSchema("", "Constant", 13)
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("sparse_value", AttrType::kUndefined)
                    .attr("value", AttrType::kTensor)
                    .attr("value_float", AttrType::kFloat)
                    .attr("value_floats", AttrType::kFloats)
                    .attr("value_int", AttrType::kInt)
                    .attr("value_ints", AttrType::kInts)
                    .attr("value_string", AttrType::kString)
                    .attr("value_strings", AttrType::kStrings)
                    .infer(infer_constant));
  add_schema(r, OpSchema("", "ConstantOfShape", 9)
                    .input("input", "T1")
                    .output("output", "T2")
                    .type("T1", {I64})
                    .type("T2", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .attr("value", AttrType::kTensor)
                    .shape_inputs({"input"})
                    .infer(infer_constant_of_shape));
  add_schema(r, OpSchema("", "Range", 11)
                    .input("start", "T")
                    .input("limit", "T")
                    .input("delta", "T")
                    .output("output", "T")
                    .type("T", {F32, F64, I16, I32, I64})
                    .shape_inputs({"start", "limit", "delta"})
                    .infer(infer_range));
  add_schema(r, OpSchema("", "Identity", 1)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Identity", 13)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Identity", 14)
                    .input("input", "V")
                    .output("output", "V")
                    .type("V", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Cast", 6)
                    .input("input", "T1")
                    .output("output", "T2")
                    .type("T1", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T2", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .required_attr("to", AttrType::kInt)
                    .infer(infer_cast));
  add_schema(r, OpSchema("", "Cast", 13)
                    .input("input", "T1")
                    .output("output", "T2")
                    .type("T1", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T2", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .required_attr("to", AttrType::kInt)
                    .infer(infer_cast));
  add_schema(r, OpSchema("", "CastLike", 15)
                    .input("input", "T1")
                    .input("target_type", "T2")
                    .output("output", "T2")
                    .type("T1", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T2", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .infer(infer_cast_like));

  // Reductions (ReduceSum takes its axes as an input from opset 13).
  add_schema(r, OpSchema("", "ReduceMean", 1)
                    .input("data", "T")
                    .output("reduced", "T")
                    .type("T", {F16, F32, F64, I32, I64, U32, U64})
                    .attr("axes", AttrType::kInts)
                    .attr("keepdims", AttrType::kInt, int64_t{1})
                    .infer(infer_reduce));
  add_schema(r, OpSchema("", "ReduceMean", 13)
                    .input("data", "T")
                    .output("reduced", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                    .attr("axes", AttrType::kInts)
                    .attr("keepdims", AttrType::kInt, int64_t{1})
                    .infer(infer_reduce));
  add_schema(r, OpSchema("", "ReduceSum", 1)
                    .input("data", "T")
                    .output("reduced", "T")
                    .type("T", {F16, F32, F64, I32, I64, U32, U64})
                    .attr("axes", AttrType::kInts)
                    .attr("keepdims", AttrType::kInt, int64_t{1})
                    .infer(infer_reduce));
  add_schema(r, OpSchema("", "ReduceSum", 13)
                    .input("data", "T")
                    .optional_input("axes", "tensor(int64)")
                    .output("reduced", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                    .type("tensor(int64)", {I64})
                    .attr("keepdims", AttrType::kInt, int64_t{1})
                    .attr("noop_with_empty_axes", AttrType::kInt, int64_t{0})
                    .shape_inputs({"axes"})
                    .infer(infer_reduce));
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    add_schema(r, OpSchema("", op, 1)
                      .input("data", "T")
                      .output("reduced", "T")
                      .type("T", {F16, F32, F64, I32, I64, U32, U64})
                      .attr("axes", AttrType::kInts)
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .infer(infer_reduce));
    add_schema(r, OpSchema("", op, 12)
                      .input("data", "T")
                      .output("reduced", "T")
                      .type("T", {F16, F32, F64, I8, I32, I64, U8, U32, U64})
                      .attr("axes", AttrType::kInts)
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .infer(infer_reduce));
    add_schema(r, OpSchema("", op, 13)
                      .input("data", "T")
                      .output("reduced", "T")
                      .type("T", {F16, BF16, F32, F64, I8, I32, I64, U8, U32, U64})
                      .attr("axes", AttrType::kInts)
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .infer(infer_reduce));
  }
  for (const char* op : {"ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum"}) {
    add_schema(r, OpSchema("", op, 1)
                      .input("data", "T")
                      .output("reduced", "T")
                      .type("T", {F16, F32, F64, I32, I64, U32, U64})
                      .attr("axes", AttrType::kInts)
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .infer(infer_reduce));
    add_schema(r, OpSchema("", op, 13)
                      .input("data", "T")
                      .output("reduced", "T")
                      .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                      .attr("axes", AttrType::kInts)
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .infer(infer_reduce));
  }
  for (const char* op : {"ArgMax", "ArgMin"}) {
    add_schema(r, OpSchema("", op, 1)
                      .input("data", "T")
                      .output("reduced", "tensor(int64)")
                      .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("tensor(int64)", {I64})
                      .attr("axis", AttrType::kInt, int64_t{0})
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .infer(infer_argmax));
    add_schema(r, OpSchema("", op, 12)
                      .input("data", "T")
                      .output("reduced", "tensor(int64)")
                      .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("tensor(int64)", {I64})
                      .attr("axis", AttrType::kInt, int64_t{0})
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .attr("select_last_index", AttrType::kInt, int64_t{0})
                      .infer(infer_argmax));
    add_schema(r, OpSchema("", op, 13)
                      .input("data", "T")
                      .output("reduced", "tensor(int64)")
                      .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("tensor(int64)", {I64})
                      .attr("axis", AttrType::kInt, int64_t{0})
                      .attr("keepdims", AttrType::kInt, int64_t{1})
                      .attr("select_last_index", AttrType::kInt, int64_t{0})
                      .infer(infer_argmax));
  }

  // Resize (opset 10: scales only; 11: roi, scales or sizes, coordinate modes).
  // roi and scales are required inputs in opsets 11-12, but exporters pass ""
  // for them (sizes given): optional here, infer_resize wants one of scales and sizes.
  add_schema(r, OpSchema("", "Resize", 10)
                    .input("X", "T")
                    .input("scales", "tensor(float)")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("tensor(float)", {F32})
                    .attr("mode", AttrType::kString, std::string("nearest"))
                    .shape_inputs({"scales"})
                    .infer(infer_resize));
  add_schema(
      r, OpSchema("", "Resize", 11)
             .input("X", "T1")
             .optional_input("roi", "T2")
             .optional_input("scales", "tensor(float)")
             .optional_input("sizes", "tensor(int64)")
             .output("Y", "T1")
             .type("T1", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
             .type("T2", {F16, F32, F64})
             .type("tensor(float)", {F32})
             .type("tensor(int64)", {I64})
             .attr("coordinate_transformation_mode", AttrType::kString, std::string("half_pixel"))
             .attr("cubic_coeff_a", AttrType::kFloat, -0.75f)
             .attr("exclude_outside", AttrType::kInt, int64_t{0})
             .attr("extrapolation_value", AttrType::kFloat, 0.0f)
             .attr("mode", AttrType::kString, std::string("nearest"))
             .attr("nearest_mode", AttrType::kString, std::string("round_prefer_floor"))
             .shape_inputs({"scales", "sizes"})
             .infer(infer_resize));
  add_schema(
      r, OpSchema("", "Resize", 13)
             .input("X", "T1")
             .optional_input("roi", "T2")
             .optional_input("scales", "tensor(float)")
             .optional_input("sizes", "tensor(int64)")
             .output("Y", "T1")
             .type("T1", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
             .type("T2", {F16, F32, F64})
             .type("tensor(float)", {F32})
             .type("tensor(int64)", {I64})
             .attr("coordinate_transformation_mode", AttrType::kString, std::string("half_pixel"))
             .attr("cubic_coeff_a", AttrType::kFloat, -0.75f)
             .attr("exclude_outside", AttrType::kInt, int64_t{0})
             .attr("extrapolation_value", AttrType::kFloat, 0.0f)
             .attr("mode", AttrType::kString, std::string("nearest"))
             .attr("nearest_mode", AttrType::kString, std::string("round_prefer_floor"))
             .shape_inputs({"scales", "sizes"})
             .infer(infer_resize));
}

}  // namespace backplane::ir::ops
