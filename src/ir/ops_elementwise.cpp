// ops_elementwise.cpp — schemas: arithmetic, unary math, Clip, variadic Min/Max/Sum/Mean,
// comparison and logic, Where.
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

std::string dims(const Shape& s) { return shape_to_string(s); }

// OpSchema::check has matched counts and dtypes against the signature before
// these run: they compute shapes and check what the signature cannot say.

Status infer_arith(InferCtx& c) { return detail::infer_broadcast(c, c.dtype(0)); }

Status infer_compare(InferCtx& c) { return detail::infer_broadcast(c, BOOL); }

Status infer_where(InferCtx& c) { return detail::infer_broadcast(c, c.dtype(1)); }

// Pow: the exponent's type is its own from opset 12 (T1); the result is X's.
Status infer_pow(InferCtx& c) { return detail::infer_broadcast(c, c.dtype(0)); }

Status infer_clip(InferCtx& c) {
  // Opset 6-10: min and max are attributes (any float); 11 on: optional
  // scalar inputs of X's type.
  const char* names[] = {"input", "min", "max"};
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    if (sat_numel(c.shape(i)) != 1 || c.rank(i) > 1)
      return c.error(std::string("input '") + names[i] + "' ('" + c.name(i) +
                     "') must be a scalar, got shape " + dims(c.shape(i)));
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

// Min, Max, Sum, Mean.
Status infer_variadic(InferCtx& c) {
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) return c.error("input " + std::to_string(i) + " is missing");
    // Broadcasting since opset 8; before that every input has one shape.
    if (c.opset < 8 && c.shape(i) != c.shape(0))
      return c.error("input '" + c.name(i) + "' has shape " + dims(c.shape(i)) + " but '" +
                     c.name(0) + "' has " + dims(c.shape(0)) + " (no broadcasting before opset 8)");
  }
  return detail::infer_broadcast(c, c.dtype(0));
}

}  // namespace

void register_elementwise_ops(OpRegistry& r) {
  using detail::add_schema;

  // Arithmetic (numpy broadcasting from opset 7).
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    add_schema(r, OpSchema("", op, 7)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T")
                      .type("T", {F16, F32, F64, I32, I64, U32, U64})
                      .infer(infer_arith));
    add_schema(r, OpSchema("", op, 13)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T")
                      .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                      .infer(infer_arith));
    add_schema(r, OpSchema("", op, 14)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T")
                      .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .infer(infer_arith));
  }
  add_schema(r, OpSchema("", "Pow", 7)
                    .input("X", "T")
                    .input("Y", "T")
                    .output("Z", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_pow));
  add_schema(r, OpSchema("", "Pow", 12)
                    .input("X", "T")
                    .input("Y", "T1")
                    .output("Z", "T")
                    .type("T", {F16, F32, F64, I32, I64})
                    .type("T1", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_pow));
  add_schema(r, OpSchema("", "Pow", 13)
                    .input("X", "T")
                    .input("Y", "T1")
                    .output("Z", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64})
                    .type("T1", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_pow));
  add_schema(r, OpSchema("", "Pow", 15)
                    .input("X", "T")
                    .input("Y", "T1")
                    .output("Z", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64})
                    .type("T1", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_pow));

  // Unary math.
  add_schema(r, OpSchema("", "Abs", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Abs", 13)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Neg", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Neg", 13)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Sign", 9)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Sign", 13)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(detail::infer_same_as_input0));
  for (const char* op : {"Reciprocal", "Sqrt"}) {
    add_schema(r, OpSchema("", op, 6)
                      .input("X", "T")
                      .output("Y", "T")
                      .type("T", {F16, F32, F64})
                      .infer(detail::infer_same_as_input0));
    add_schema(r, OpSchema("", op, 13)
                      .input("X", "T")
                      .output("Y", "T")
                      .type("T", {F16, BF16, F32, F64})
                      .infer(detail::infer_same_as_input0));
  }
  for (const char* op : {"Exp", "Log"}) {
    add_schema(r, OpSchema("", op, 6)
                      .input("input", "T")
                      .output("output", "T")
                      .type("T", {F16, F32, F64})
                      .infer(detail::infer_same_as_input0));
    add_schema(r, OpSchema("", op, 13)
                      .input("input", "T")
                      .output("output", "T")
                      .type("T", {F16, BF16, F32, F64})
                      .infer(detail::infer_same_as_input0));
  }
  add_schema(r, OpSchema("", "Erf", 9)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Erf", 13)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(detail::infer_same_as_input0));
  for (const char* op : {"Floor", "Ceil"}) {
    add_schema(r, OpSchema("", op, 6)
                      .input("X", "T")
                      .output("Y", "T")
                      .type("T", {F16, F32, F64})
                      .infer(detail::infer_same_as_input0));
    add_schema(r, OpSchema("", op, 13)
                      .input("X", "T")
                      .output("Y", "T")
                      .type("T", {F16, BF16, F32, F64})
                      .infer(detail::infer_same_as_input0));
  }
  add_schema(r, OpSchema("", "Round", 11)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  for (const char* op : {"Sin", "Cos"}) {
    add_schema(r, OpSchema("", op, 7)
                      .input("input", "T")
                      .output("output", "T")
                      .type("T", {F16, F32, F64})
                      .infer(detail::infer_same_as_input0));
  }
  add_schema(r, OpSchema("", "Clip", 6)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .attr("max", AttrType::kFloat, 3.40282347e+38f)
                    .attr("min", AttrType::kFloat, -3.40282347e+38f)
                    .infer(infer_clip));
  add_schema(r, OpSchema("", "Clip", 11)
                    .input("input", "T")
                    .optional_input("min", "T")
                    .optional_input("max", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_clip));
  add_schema(r, OpSchema("", "Clip", 12)
                    .input("input", "T")
                    .optional_input("min", "T")
                    .optional_input("max", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_clip));
  add_schema(r, OpSchema("", "Clip", 13)
                    .input("input", "T")
                    .optional_input("min", "T")
                    .optional_input("max", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_clip));

  // Variadic (broadcasting from opset 8).
  add_schema(r, OpSchema("", "Min", 6)
                    .variadic_input("data_0", "T", 1)
                    .output("min", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Min", 8)
                    .variadic_input("data_0", "T", 1)
                    .output("min", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Min", 12)
                    .variadic_input("data_0", "T", 1)
                    .output("min", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Min", 13)
                    .variadic_input("data_0", "T", 1)
                    .output("min", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Max", 6)
                    .variadic_input("data_0", "T", 1)
                    .output("max", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Max", 8)
                    .variadic_input("data_0", "T", 1)
                    .output("max", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Max", 12)
                    .variadic_input("data_0", "T", 1)
                    .output("max", "T")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Max", 13)
                    .variadic_input("data_0", "T", 1)
                    .output("max", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Sum", 6)
                    .variadic_input("data_0", "T", 1)
                    .output("sum", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Sum", 8)
                    .variadic_input("data_0", "T", 1)
                    .output("sum", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Sum", 13)
                    .variadic_input("data_0", "T", 1)
                    .output("sum", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Mean", 6)
                    .variadic_input("data_0", "T", 1)
                    .output("mean", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Mean", 8)
                    .variadic_input("data_0", "T", 1)
                    .output("mean", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_variadic));
  add_schema(r, OpSchema("", "Mean", 13)
                    .variadic_input("data_0", "T", 1)
                    .output("mean", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .infer(infer_variadic));

  // Comparison and logic.
  add_schema(r, OpSchema("", "Equal", 7)
                    .input("A", "T")
                    .input("B", "T")
                    .output("C", "T1")
                    .type("T", {I32, I64, BOOL})
                    .type("T1", {BOOL})
                    .infer(infer_compare));
  add_schema(r, OpSchema("", "Equal", 11)
                    .input("A", "T")
                    .input("B", "T")
                    .output("C", "T1")
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {BOOL})
                    .infer(infer_compare));
  add_schema(r, OpSchema("", "Equal", 13)
                    .input("A", "T")
                    .input("B", "T")
                    .output("C", "T1")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .type("T1", {BOOL})
                    .infer(infer_compare));
  for (const char* op : {"Less", "Greater"}) {
    add_schema(r, OpSchema("", op, 7)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T1")
                      .type("T", {F16, F32, F64})
                      .type("T1", {BOOL})
                      .infer(infer_compare));
    add_schema(r, OpSchema("", op, 9)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T1")
                      .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("T1", {BOOL})
                      .infer(infer_compare));
    add_schema(r, OpSchema("", op, 13)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T1")
                      .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("T1", {BOOL})
                      .infer(infer_compare));
  }
  for (const char* op : {"LessOrEqual", "GreaterOrEqual"}) {
    add_schema(r, OpSchema("", op, 12)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T1")
                      .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("T1", {BOOL})
                      .infer(infer_compare));
    add_schema(r, OpSchema("", op, 16)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T1")
                      .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64})
                      .type("T1", {BOOL})
                      .infer(infer_compare));
  }
  add_schema(r, OpSchema("", "Not", 1)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {BOOL})
                    .infer(detail::infer_same_as_input0));
  for (const char* op : {"And", "Or", "Xor"}) {
    add_schema(r, OpSchema("", op, 7)
                      .input("A", "T")
                      .input("B", "T")
                      .output("C", "T1")
                      .type("T", {BOOL})
                      .type("T1", {BOOL})
                      .infer(infer_compare));
  }
  add_schema(r, OpSchema("", "Where", 9)
                    .input("condition", "B")
                    .input("X", "T")
                    .input("Y", "T")
                    .output("output", "T")
                    .type("B", {BOOL})
                    .type("T", {F16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .infer(infer_where));
  add_schema(r, OpSchema("", "Where", 16)
                    .input("condition", "B")
                    .input("X", "T")
                    .input("Y", "T")
                    .output("output", "T")
                    .type("B", {BOOL})
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, BOOL})
                    .infer(infer_where));
}

}  // namespace backplane::ir::ops
