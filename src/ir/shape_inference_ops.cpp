// Shared pieces of per-op inference: the helpers the schemas in ops_*.cpp
// use (same-as-input, broadcasting) and the op semantics constant folding
// shares with inference (Slice plans, Shape ranges, Constant values).
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace backplane::ir::detail {

namespace {

constexpr DType F32 = DType::kFloat32, I64 = DType::kInt64;

std::string list(const std::vector<int64_t>& v) { return shape_to_string(v); }

}  // namespace

void add_schema(OpRegistry& registry, OpSchema schema) {
  const std::string what =
      schema.domain() + "::" + schema.name() + "-" + std::to_string(schema.since_version());
  Status s = registry.add(std::move(schema));
  if (s.ok()) return;
  // The built-in tables are code: a duplicate is a bug, found by every test.
  std::fprintf(stderr, "backplane: built-in schema %s: %s\n", what.c_str(), s.message().c_str());
  std::abort();
}

Status infer_same_as_input0(InferCtx& c) {
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_broadcast(InferCtx& c, DType out_dtype) {
  std::vector<size_t> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) return c.error("input " + std::to_string(i) + " is missing");
    ins.push_back(i);
  }
  BP_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(c, ins));
  c.set(0, out_dtype, std::move(s));
  return ok_status();
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
    // len = ceil(distance / |step|), written so that no step (INT64_MIN,
    // INT64_MAX) overflows: distance is under 2^49.
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s - 1) / step + 1 : 0;
    } else if (dim == 0) {
      // Walking down an empty axis selects nothing; the clamp below would
      // have reversed bounds [0, -1].
      s = 0;
      len = 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      const int64_t stride = step == INT64_MIN ? INT64_MAX : -step;
      len = s > e ? (s - e - 1) / stride + 1 : 0;
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
