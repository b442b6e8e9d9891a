// contrib_ops.cpp — ONNX Runtime's fused operators as the standard operators
// they fused (contrib_ops.hpp).
#include "onnx/contrib_ops.hpp"

#include "onnx/proto_rewrite.hpp"

#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace backplane::onnx_import {
namespace {

using Nodes = std::vector<onnx::NodeProto>;

// The element type of a rewrite's constants: the first operand's, float
// when not found (then a model of another type fails type checking, which
// names the node).
int32_t elem_type_of(const DeclaredTypes& types, const std::string& value) {
  const int32_t t = types.elem_type(value);
  return t != 0 ? t : onnx::TensorProto::FLOAT;
}

// The activation a fused node applies last: none (op empty), an operator
// with float attributes, or a Clip with its bounds.
struct Activation {
  std::string op;
  std::vector<std::pair<std::string, float>> attrs;
  std::optional<float> min, max;
};

// FusedConv's: `activation` and its `activation_params`, in order.
std::optional<Activation> conv_activation(const onnx::NodeProto& n) {
  const onnx::AttributeProto* a = find_attr(n, "activation");
  if (a == nullptr) return Activation{};
  std::vector<float> p;
  if (const onnx::AttributeProto* params = find_attr(n, "activation_params"))
    p.assign(params->floats().begin(), params->floats().end());
  Activation act{a->s(), {}, {}, {}};
  if (act.op == "Relu" || act.op == "Tanh" || act.op == "Sigmoid") return act;
  if (act.op == "LeakyRelu" && p.size() <= 1) {
    if (p.size() == 1) act.attrs = {{"alpha", p[0]}};
    return act;
  }
  if (act.op == "HardSigmoid" && (p.empty() || p.size() == 2)) {
    if (p.size() == 2) act.attrs = {{"alpha", p[0]}, {"beta", p[1]}};
    return act;
  }
  if (act.op == "Clip" && (p.empty() || p.size() == 2)) {
    if (p.size() == 2) act.min = p[0], act.max = p[1];
    return act;
  }
  return std::nullopt;
}

// FusedGemm's: `activation` and its `activation_alpha`, `_beta`, `_gamma`.
std::optional<Activation> gemm_activation(const onnx::NodeProto& n) {
  const onnx::AttributeProto* a = find_attr(n, "activation");
  if (a == nullptr) return Activation{};
  Activation act{a->s(), {}, {}, {}};
  auto take = [&](std::initializer_list<const char*> names) {
    for (const char* name : names)
      if (const onnx::AttributeProto* v = find_attr(n, std::string("activation_") + name))
        act.attrs.emplace_back(name, v->f());
    return act;
  };
  const std::string& op = act.op;
  if (op == "Relu" || op == "Tanh" || op == "Sigmoid" || op == "Softplus" || op == "Softsign")
    return act;
  if (op == "LeakyRelu" || op == "Elu" || op == "ThresholdedRelu") return take({"alpha"});
  if (op == "HardSigmoid") return take({"alpha", "beta"});
  if (op == "Selu") return take({"alpha", "gamma"});
  return std::nullopt;
}

// `act` of x, written to `out`.
void emit_activation(NodeEmitter& e, const Activation& act, const std::string& x,
                     const std::string& out, int32_t type) {
  if (act.op != "Clip") {
    onnx::NodeProto& node = e.node(act.op, {x}, {out});
    for (const auto& [name, value] : act.attrs) set_attr(node, name, value);
    return;
  }
  if (e.opset() < 11) {
    onnx::NodeProto& node = e.node("Clip", {x}, {out});
    if (act.min) set_attr(node, "min", *act.min);
    if (act.max) set_attr(node, "max", *act.max);
    return;
  }
  std::vector<std::string> inputs{x};
  if (act.min || act.max) inputs.push_back(act.min ? e.scalar(*act.min, type) : "");
  if (act.max) inputs.push_back(e.scalar(*act.max, type));
  e.node("Clip", inputs, {out});
}

// A product (Conv or Gemm) then, for FusedConv, the sum with Z, then the activation.
Nodes product_then_activation(const onnx::NodeProto& n, const std::string& product,
                              const std::optional<Activation>& act, const DeclaredTypes& types,
                              int64_t opset, std::string* why) {
  if (!act) {
    const onnx::AttributeProto* a = find_attr(n, "activation");
    *why =
        "its activation '" + (a != nullptr ? a->s() : std::string()) +
        "' is not one of those it can be (docs/operators.md lists them), or its parameters do not "
        "fit it";
    return {};
  }
  if (n.input_size() < 2 || n.output_size() != 1) {
    *why = "it needs at least 2 inputs and has 1 output";
    return {};
  }
  NodeEmitter e(n, opset);
  const bool z = product == "Conv" && has_input(n, 3);
  const bool last = act->op.empty() && !z;
  std::vector<std::string> in;
  for (int i = 0; i < std::min(3, n.input_size()); ++i) in.push_back(n.input(i));
  while (!in.empty() && in.back().empty()) in.pop_back();
  onnx::NodeProto& node = e.node(
      product, in, last ? std::vector<std::string>{n.output(0)} : std::vector<std::string>{});
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name().rfind("activation", 0) != 0) *node.add_attribute() = a;
  std::string y = node.output(0);
  if (z) y = e.op("Add", {y, n.input(3)}, act->op.empty() ? n.output(0) : "");
  if (!act->op.empty()) emit_activation(e, *act, y, n.output(0), elem_type_of(types, n.input(0)));
  return e.finish();
}

// op(A) x op(B) x alpha, op transposing the last two dims where asked.
Nodes fused_matmul(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                   std::string* why) {
  if (n.input_size() != 2 || n.output_size() != 1) {
    *why = "it has 2 inputs and 1 output";
    return {};
  }
  if (attr_i(n, "transBatchA", 0) != 0 || attr_i(n, "transBatchB", 0) != 0) {
    *why = "transBatchA and transBatchB (a transpose of the batch dims) are not supported";
    return {};
  }
  NodeEmitter e(n, opset);
  std::string operands[2];
  for (int k = 0; k < 2; ++k) {
    operands[k] = n.input(k);
    if (attr_i(n, k == 0 ? "transA" : "transB", 0) == 0) continue;
    const int r = types.rank(n.input(k));
    if (r < 2) {
      *why = "input '" + n.input(k) + "' is transposed, and its rank (2 or more) is neither " +
             "declared nor follows from the operators that make it";
      return {};
    }
    std::vector<int64_t> perm;
    for (int d = 0; d < r; ++d) perm.push_back(d);
    std::swap(perm[r - 2], perm[r - 1]);
    operands[k] = e.transpose(operands[k], perm);
  }
  const float alpha = attr_f(n, "alpha", 1.0f);
  if (alpha == 1.0f) {
    e.op("MatMul", {operands[0], operands[1]}, n.output(0));
    return e.finish();
  }
  const std::string product = e.op("MatMul", {operands[0], operands[1]});
  e.op("Mul", {product, e.scalar(alpha, elem_type_of(types, n.input(0)))}, n.output(0));
  return e.finish();
}

Nodes gelu_family(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                  std::string* why) {
  if (!has_input(n, 0) || n.output_size() != 1 || (n.op_type() == "BiasGelu" && !has_input(n, 1))) {
    *why = "its inputs or outputs are not as the operator defines them";
    return {};
  }
  NodeEmitter e(n, opset);
  const std::string& out = n.output(0);
  const int32_t type = elem_type_of(types, n.input(0));
  const std::string& op = n.op_type();
  if (op == "BiasGelu") {
    e.node("Gelu", {e.op("Add", {n.input(0), n.input(1)})}, {out}, "com.microsoft");
  } else if (op == "FastGelu") {
    const std::string x = has_input(n, 1) ? e.op("Add", {n.input(0), n.input(1)}) : n.input(0);
    const std::string cube = e.op("Mul", {e.op("Mul", {x, x}), x});
    const std::string inner = e.op("Add", {x, e.op("Mul", {cube, e.scalar(0.044715, type)})});
    const std::string t = e.op("Tanh", {e.op("Mul", {inner, e.scalar(0.7978845608028654, type)})});
    e.op("Mul", {e.op("Mul", {x, e.scalar(0.5, type)}), e.op("Add", {t, e.scalar(1.0, type)})},
         out);
  } else {  // QuickGelu
    const float alpha = attr_f(n, "alpha", 1.702f);
    const std::string& x = n.input(0);
    const std::string scaled = alpha == 1.0f ? x : e.op("Mul", {x, e.scalar(alpha, type)});
    e.op("Mul", {x, e.op("Sigmoid", {scaled})}, out);
  }
  return e.finish();
}

// x / sqrt(mean(x², axes) + epsilon) · scale into `out`, and 1 / that
// square root into `inv_out` when it is named.
void rms_norm(NodeEmitter& e, const std::string& x, const std::string& scale,
              const std::vector<int64_t>& axes, float epsilon, int32_t type, const std::string& out,
              const std::string& inv_out) {
  const std::string mean = e.axes_op("ReduceMean", e.op("Mul", {x, x}), axes, 1);
  const std::string root = e.op("Sqrt", {e.op("Add", {mean, e.scalar(epsilon, type)})});
  if (!inv_out.empty()) e.op("Reciprocal", {root}, inv_out);
  e.op("Mul", {e.op("Div", {x, root}), scale}, out);
}

// input + skip [+ bias] (bias at `bias`), written to `sum_out` when named.
std::string skip_sum(NodeEmitter& e, const onnx::NodeProto& n, int bias,
                     const std::string& sum_out) {
  const bool with_bias = has_input(n, bias);
  std::string s = e.op("Add", {n.input(0), n.input(1)}, with_bias ? "" : sum_out);
  if (with_bias) s = e.op("Add", {s, n.input(bias)}, sum_out);
  return s;
}

Nodes layer_norm_family(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                        std::string* why) {
  const std::string& op = n.op_type();
  const int inputs = op == "SimplifiedLayerNormalization" ? 2 : 3;
  if (n.output_size() < 1 || n.output(0).empty() || n.input_size() < inputs) {
    *why = "it needs at least " + std::to_string(inputs) + " inputs and its first output";
    return {};
  }
  NodeEmitter e(n, opset);
  const int32_t type = elem_type_of(types, n.input_size() > 0 ? n.input(0) : "");
  if (op == "SkipLayerNormalization") {
    const std::string s = skip_sum(e, n, 4, output_or_empty(n, 3));
    std::vector<std::string> in{s, n.input(2)};
    if (has_input(n, 3)) in.push_back(n.input(3));
    std::vector<std::string> out{n.output(0), output_or_empty(n, 1), output_or_empty(n, 2)};
    while (out.back().empty()) out.pop_back();
    onnx::NodeProto& ln = e.node("LayerNormalization", in, out);
    set_attr(ln, "axis", int64_t{-1});
    set_attr(ln, "epsilon", attr_f(n, "epsilon", 1e-12f));
    return e.finish();
  }
  if (op == "SkipSimplifiedLayerNormalization") {
    if (!output_or_empty(n, 1).empty() || !output_or_empty(n, 2).empty()) {
      *why = "its mean and inv_std_var outputs are not supported";
      return {};
    }
    const std::string s = skip_sum(e, n, 3, output_or_empty(n, 3));
    rms_norm(e, s, n.input(2), {-1}, attr_f(n, "epsilon", 1e-12f), type, n.output(0), "");
    return e.finish();
  }
  // SimplifiedLayerNormalization: over the dims from `axis` on.
  int64_t axis = attr_i(n, "axis", -1);
  std::vector<int64_t> axes{-1};
  if (axis != -1) {
    const int r = types.rank(n.input(0));
    if (axis < 0) axis += r;
    if (r < 1 || axis < 0 || axis >= r) {
      *why =
          "its axis is not -1 and the rank of its input is not declared (or the axis is "
          "outside it)";
      return {};
    }
    axes.clear();
    for (int64_t d = axis; d < r; ++d) axes.push_back(d);
  }
  rms_norm(e, n.input(0), n.input(1), axes, attr_f(n, "epsilon", 1e-5f), type, n.output(0),
           output_or_empty(n, 1));
  return e.finish();
}

// ONNX Runtime's quantized operators (its QOperator format, and what its
// optimiser makes of QDQ groups and of dynamic quantization): the operands
// dequantized, the float operator, the result quantized, which is what ONNX
// Runtime's integer kernels approximate; CpuOneDnn runs such groups as int8
// where it has the kernel (docs/numerics.md, "Quantized models").

// DequantizeLinear(x, scale [, zero point]), on `axis` if it is not negative.
std::string dequantize(NodeEmitter& e, const std::string& x, const std::string& scale,
                       const std::string& zero_point, int64_t axis = -1) {
  std::vector<std::string> in{x, scale};
  if (!zero_point.empty()) in.push_back(zero_point);
  onnx::NodeProto& node = e.node("DequantizeLinear", in);
  if (axis >= 0) set_attr(node, "axis", axis);
  return node.output(0);
}

void quantize(NodeEmitter& e, const std::string& y, const std::string& scale,
              const std::string& zero_point, const std::string& out) {
  std::vector<std::string> in{y, scale};
  if (!zero_point.empty()) in.push_back(zero_point);
  e.node("QuantizeLinear", in, {out});
}

// QLinearAdd and QLinearMul (A, A_scale, A_zp, B, B_scale, B_zp, C_scale,
// C_zp), QLinearConcat (Y_scale, Y_zp, then X, X_scale, X_zp per operand)
// and the unary ones (X, X_scale, X_zp, Y_scale, Y_zp).
Nodes qlinear(const onnx::NodeProto& n, int64_t opset, std::string* why) {
  const std::string& op = n.op_type();
  const std::string float_op = op.substr(std::string("QLinear").size());
  auto in = [&](int i) { return input_or_empty(n, i); };
  const bool binary = op == "QLinearAdd" || op == "QLinearMul";
  const int needed = binary ? 7 : op == "QLinearConcat" ? 5 : 4;
  if (n.output_size() != 1 || n.input_size() < needed ||
      (op == "QLinearConcat" && (n.input_size() - 2) % 3 != 0)) {
    *why = "its inputs or outputs are not as the operator defines them";
    return {};
  }
  if (attr_i(n, "channels_last", 0) != 0) {
    *why = "channels_last (an NHWC layout) is not supported";
    return {};
  }
  if (op == "QLinearSoftmax" && (attr_i(n, "opset", opset) >= 13) != (opset >= 13)) {
    *why = "its Softmax is of opset " + std::to_string(attr_i(n, "opset", opset)) +
           ", whose meaning differs from the model's opset " + std::to_string(opset);
    return {};
  }
  NodeEmitter e(n, opset);
  std::string y;
  if (binary) {
    y = e.op(float_op, {dequantize(e, in(0), in(1), in(2)), dequantize(e, in(3), in(4), in(5))});
    quantize(e, y, in(6), in(7), n.output(0));
    return e.finish();
  }
  if (op == "QLinearConcat") {
    std::vector<std::string> parts;
    for (int i = 2; i < n.input_size(); i += 3)
      parts.push_back(dequantize(e, in(i), in(i + 1), in(i + 2)));
    onnx::NodeProto& concat = e.node("Concat", parts);
    set_attr(concat, "axis", attr_i(n, "axis", 0));
    y = concat.output(0);
    quantize(e, y, in(0), in(1), n.output(0));
    return e.finish();
  }
  onnx::NodeProto& node = e.node(float_op, {dequantize(e, in(0), in(1), in(2))});
  for (const onnx::AttributeProto& a : n.attribute())
    if (a.name() != "channels_last" && a.name() != "opset") *node.add_attribute() = a;
  y = node.output(0);
  quantize(e, y, in(3), in(4), n.output(0));
  return e.finish();
}

// QGemm (A, a_scale, a_zp, B, b_scale, b_zp, [C: int32 of scale
// a_scale·b_scale], [y_scale, y_zp]; alpha, transA, transB): float output
// without y_scale.
Nodes qgemm(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset, std::string* why) {
  auto in = [&](int i) { return input_or_empty(n, i); };
  if (n.input_size() < 6 || n.output_size() != 1) {
    *why = "its inputs or outputs are not as the operator defines them";
    return {};
  }
  // One weight scale per output column: on B's axis of them.
  const int64_t scales = types.constant_numel(in(4));
  if (scales < 0 && types.rank(in(4)) != 0) {
    *why = "its b_scale '" + in(4) + "' is not a constant, so whether it is per column is unknown";
    return {};
  }
  const bool per_column = scales > 1;
  if (per_column && opset < 13) {
    *why = "per-column weight scales need opset 13 or later (DequantizeLinear's axis)";
    return {};
  }
  NodeEmitter e(n, opset);
  const int64_t axis = per_column ? (attr_i(n, "transB", 0) != 0 ? 0 : 1) : -1;
  std::vector<std::string> operands{dequantize(e, in(0), in(1), in(2)),
                                    dequantize(e, in(3), in(4), in(5), axis)};
  if (has_input(n, 6))
    operands.push_back(dequantize(e, in(6), e.op("Mul", {in(1), in(4)}), "", per_column ? 0 : -1));
  const bool quantized = has_input(n, 7);
  onnx::NodeProto& gemm =
      e.node("Gemm", operands,
             quantized ? std::vector<std::string>{} : std::vector<std::string>{n.output(0)});
  for (const char* name : {"alpha", "transA", "transB"})
    if (const onnx::AttributeProto* a = find_attr(n, name)) *gemm.add_attribute() = *a;
  const std::string y = gemm.output(0);
  if (quantized) quantize(e, y, in(7), in(8), n.output(0));
  return e.finish();
}

// MatMulIntegerToFloat (A, B, a_scale, b_scale, [a_zp], [b_zp], [bias]) and
// DynamicQuantizeMatMul (A float, B, b_scale, [b_zp], [bias]): the integer
// product, as float, times a_scale·b_scale, plus the bias; A quantized by
// DynamicQuantizeLinear first for the latter, as ONNX Runtime's dynamic
// quantizer writes it before its optimiser fuses it.
Nodes integer_matmul(const onnx::NodeProto& n, int64_t opset, std::string* why) {
  const bool dynamic = n.op_type() == "DynamicQuantizeMatMul";
  auto in = [&](int i) { return input_or_empty(n, i); };
  if (n.input_size() < (dynamic ? 3 : 4) || n.output_size() != 1) {
    *why = "its inputs or outputs are not as the operator defines them";
    return {};
  }
  NodeEmitter e(n, opset);
  std::string a = in(0), a_scale, a_zero;
  if (dynamic) {
    a = e.fresh("quantized"), a_scale = e.fresh("scale"), a_zero = e.fresh("zero_point");
    e.node("DynamicQuantizeLinear", {in(0)}, {a, a_scale, a_zero});
  } else {
    a_scale = in(2), a_zero = in(4);
  }
  const std::string b_scale = in(dynamic ? 2 : 3), b_zero = in(dynamic ? 3 : 5);
  const std::string bias = in(dynamic ? 4 : 6);
  std::vector<std::string> operands{a, in(1), a_zero, b_zero};
  while (operands.back().empty()) operands.pop_back();
  onnx::NodeProto& cast = e.node("Cast", {e.op("MatMulInteger", operands)});
  set_attr(cast, "to", int64_t{onnx::TensorProto::FLOAT});
  const std::string product = cast.output(0);
  const std::string scale = e.op("Mul", {a_scale, b_scale});
  if (bias.empty()) {
    e.op("Mul", {product, scale}, n.output(0));
  } else {
    e.op("Add", {e.op("Mul", {product, scale}), bias}, n.output(0));
  }
  return e.finish();
}

// A 1-D int64 tensor holding dim `axis` of x.
std::string dim_of(NodeEmitter& e, const std::string& x, int64_t axis) {
  if (e.opset() >= 15) {
    onnx::NodeProto& shape = e.node("Shape", {x});
    set_attr(shape, "start", axis);
    set_attr(shape, "end", axis + 1);
    return shape.output(0);
  }
  return e.op("Slice", {e.op("Shape", {x}), e.int64s({axis}), e.int64s({axis + 1})});
}

std::string cast(NodeEmitter& e, const std::string& x, int32_t to) {
  onnx::NodeProto& node = e.node("Cast", {x});
  set_attr(node, "to", int64_t{to});
  return node.output(0);
}

// x [B, L, N·h] as heads [B, N, L, h].
std::string split_heads(NodeEmitter& e, const std::string& x, int64_t heads) {
  return e.transpose(e.op("Reshape", {x, e.int64s({0, 0, heads, -1})}), {0, 2, 1, 3});
}

// Heads [B, N, S, h] joined again into `out` [B, S, N·h].
void join_heads(NodeEmitter& e, const std::string& x, const std::string& out) {
  e.op("Reshape", {e.transpose(x, {0, 2, 1, 3}), e.int64s({0, 0, -1})}, out);
}

// What is added to the scaled scores Q·Kᵀ [B, N, S, T] before the softmax.
struct ScoreTerms {
  double scale = 0.0;  // of Q·Kᵀ; 0: 1/√h
  std::string mask;    // 1 (attend) and 0 (masked), [B, T] or [B, S, T]; "" for none
  int mask_rank = 0;
  float filter = -10000.0f;  // what a masked score gets added
  std::string bias;          // [B or 1, N or 1, S, T], added
  bool causal = false;       // query i sees key j only if j <= i + T - S
  float softcap = 0.0f;      // c: scores become c·tanh(scores / c) before the terms
};

// [S, T]: 0 where query i may see key j (j <= i + T - S, the query's
// position after T - S cached keys), `filter` elsewhere.
std::string causal_bias(NodeEmitter& e, const std::string& q, const std::string& kt, float filter,
                        int32_t type) {
  const int32_t i64 = onnx::TensorProto::INT64;
  const std::string s = dim_of(e, q, 2), t = dim_of(e, kt, 3);
  const std::string zero = e.scalar(0.0, i64), one = e.scalar(1.0, i64);
  const std::string rows = e.op("Range", {zero, e.axes_op("Squeeze", s, {0}), one});
  const std::string cols = e.op("Range", {zero, e.axes_op("Squeeze", t, {0}), one});
  const std::string last = e.op("Add", {e.axes_op("Unsqueeze", rows, {1}), e.op("Sub", {t, s})});
  return e.op("Where",
              {e.op("Greater", {cols, last}), e.scalar(filter, type), e.scalar(0.0, type)});
}

// softmax(Q·Kᵀ·scale + terms)·V of heads q [B, N, S, h], kt (Kᵀ) [B, N, h, T]
// and v [B, N, T, hv]: [B, N, S, hv].
std::string attend(NodeEmitter& e, const std::string& q, const std::string& kt,
                   const std::string& v, const ScoreTerms& terms, int32_t type) {
  const std::string scale =
      terms.scale != 0.0 ? e.scalar(terms.scale, type)
                         : e.op("Reciprocal", {e.op("Sqrt", {cast(e, dim_of(e, q, 3), type)})});
  std::string scores = e.op("Mul", {e.op("MatMul", {q, kt}), scale});
  if (terms.softcap != 0.0f) {
    const std::string c = e.scalar(terms.softcap, type);
    scores = e.op("Mul", {e.op("Tanh", {e.op("Div", {scores, c})}), c});
  }
  if (terms.mask_rank != 0) {
    // (1 - mask) · filter, [B, 1, 1, T] or [B, 1, S, T].
    const std::string masked =
        e.op("Mul", {e.op("Sub", {e.scalar(1.0, type), cast(e, terms.mask, type)}),
                     e.scalar(terms.filter, type)});
    scores = e.op("Add", {scores, e.axes_op("Unsqueeze", masked,
                                            terms.mask_rank == 2 ? std::vector<int64_t>{1, 2}
                                                                 : std::vector<int64_t>{1})});
  }
  if (!terms.bias.empty()) scores = e.op("Add", {scores, terms.bias});
  if (terms.causal) scores = e.op("Add", {scores, causal_bias(e, q, kt, terms.filter, type)});
  onnx::NodeProto& softmax = e.node("Softmax", {scores});
  set_attr(softmax, "axis", int64_t{3});  // the last of 4: the same before and after opset 13
  return e.op("MatMul", {softmax.output(0), v});
}

std::string concat(NodeEmitter& e, const std::vector<std::string>& parts, int64_t axis,
                   const std::string& out = "") {
  onnx::NodeProto& node = e.node(
      "Concat", parts, out.empty() ? std::vector<std::string>{} : std::vector<std::string>{out});
  set_attr(node, "axis", axis);
  return node.output(0);
}

// x split into `count` equal parts along `axis`, that axis removed from each.
std::vector<std::string> unstack(NodeEmitter& e, const std::string& x, int64_t axis, int count) {
  std::vector<std::string> parts;
  for (int i = 0; i < count; ++i) parts.push_back(e.fresh("part" + std::to_string(i)));
  onnx::NodeProto& split = e.node("Split", {x}, parts);
  set_attr(split, "axis", axis);
  if (e.opset() >= 18) set_attr(split, "num_outputs", int64_t{count});
  for (std::string& p : parts) p = e.axes_op("Squeeze", p, {axis});
  return parts;
}

// x[..., from:to] on the last axis.
std::string last_axis_slice(NodeEmitter& e, const std::string& x, const std::string& from,
                            const std::string& to) {
  return e.op("Slice", {x, from, to, e.int64s({-1})});
}

// Attention (BERT's and GPT-2's self-attention as ONNX Runtime's transformer
// optimiser fuses them): input [B, S, H_in] x weights [H_in, 3H] + bias,
// split into Q, K and V of num_heads heads, softmax(Q·Kᵀ·scale + mask)·V,
// heads joined again. The mask: a 2-D [B, T] or 3-D [B, S, T] of 1
// (attend) and 0, which adds mask_filter_value where 0; attention_bias,
// added; unidirectional, each token sees only the keys up to its own
// position. past [2, B, N, P, h] holds the keys and values of the tokens
// before, put ahead of this run's; present is them all, [2, B, N, P + S, h].
// Not covered: other mask forms, qkv_hidden_sizes that differ, rotary
// embeddings, a past shared with the present (past_sequence_length).
Nodes attention(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                std::string* why) {
  auto in = [&](int i) { return input_or_empty(n, i); };
  const int64_t heads = attr_i(n, "num_heads", 0);
  std::vector<int64_t> w_dims;
  if (n.input_size() < 2 || n.output_size() < 1 || heads < 1 ||
      !types.constant_dims(in(1), &w_dims) || w_dims.size() != 2 || w_dims[1] % 3 != 0 ||
      (w_dims[1] / 3) % heads != 0) {
    *why = "it needs num_heads and constant weights [H_in, 3H] whose H num_heads divides";
    return {};
  }
  const int64_t hidden = w_dims[1] / 3, head = hidden / heads;
  if (const onnx::AttributeProto* sizes = find_attr(n, "qkv_hidden_sizes")) {
    for (int64_t v : sizes->ints())
      if (v != hidden) {
        *why = "its qkv_hidden_sizes differ";
        return {};
      }
  }
  const bool past = has_input(n, 4);
  const bool present = n.output_size() > 1 && !n.output(1).empty();
  const bool causal = attr_i(n, "unidirectional", 0) != 0;
  if (attr_i(n, "do_rotary", 0) != 0 || has_input(n, 6) ||
      attr_i(n, "past_present_share_buffer", 0) != 0) {
    *why =
        "rotary embeddings and a past shared with the present (past_sequence_length) are not "
        "supported";
    return {};
  }
  if (causal && opset < 11) {
    *why = "unidirectional needs opset 11 or later";
    return {};
  }
  const int mask_rank = has_input(n, 3) ? types.rank(in(3)) : 0;
  if (mask_rank != 0 && mask_rank != 2 && mask_rank != 3) {
    *why = "its mask_index must be a raw mask [B, T] or [B, S, T] of declared rank";
    return {};
  }
  const int32_t type = elem_type_of(types, in(0));
  NodeEmitter e(n, opset);
  std::string qkv = e.op("MatMul", {in(0), in(1)});
  if (has_input(n, 2)) qkv = e.op("Add", {qkv, in(2)});
  const std::string parts[3] = {e.fresh("q"), e.fresh("k"), e.fresh("v")};
  const std::string sizes = e.int64s({hidden, hidden, hidden});
  onnx::NodeProto& split = opset >= 13
                               ? e.node("Split", {qkv, sizes}, {parts[0], parts[1], parts[2]})
                               : e.node("Split", {qkv}, {parts[0], parts[1], parts[2]});
  set_attr(split, "axis", int64_t{-1});
  if (opset < 13) set_attr(split, "split", std::vector<int64_t>{hidden, hidden, hidden});
  ScoreTerms terms;
  const float scale = attr_f(n, "scale", 0.0f);
  terms.scale = scale != 0.0f ? scale : 1.0 / std::sqrt(double(head));
  terms.mask = in(3);
  terms.mask_rank = mask_rank;
  terms.filter = attr_f(n, "mask_filter_value", -10000.0f);
  terms.bias = in(5);
  terms.causal = causal;
  const std::string q = split_heads(e, parts[0], heads);
  std::string v = split_heads(e, parts[2], heads), kt;
  if (!past && !present) {
    kt = e.transpose(e.op("Reshape", {parts[1], e.int64s({0, 0, heads, -1})}), {0, 2, 3, 1});
  } else {
    std::string k = split_heads(e, parts[1], heads);
    if (past) {
      auto cached = [&](int i) {
        onnx::NodeProto& gather = e.node("Gather", {in(4), e.scalar(i, onnx::TensorProto::INT64)});
        set_attr(gather, "axis", int64_t{0});
        return gather.output(0);
      };
      k = concat(e, {cached(0), k}, 2);
      v = concat(e, {cached(1), v}, 2);
    }
    if (present)
      concat(e, {e.axes_op("Unsqueeze", k, {0}), e.axes_op("Unsqueeze", v, {0})}, 0, n.output(1));
    kt = e.transpose(k, {0, 1, 3, 2});
  }
  join_heads(e, attend(e, q, kt, v, terms, type), n.output(0));
  return e.finish();
}

// MultiHeadAttention (ONNX Runtime's attention after the projections, as its
// optimiser fuses decoders and cross attention): query [B, S, D], key and
// value [B, L, D] each (with the projections' bias [3D] added), or packed
// QKV [B, S, N, 3, h], or packed KV [B, L, N, 2, h], or key and value
// already in heads [B, N, L, h]; past_key and past_value [B, N, P, h] put
// ahead of this run's keys and values, and present_key and present_value
// them all. The mask, attention_bias, unidirectional and scale as Attention's.
// Not covered: key lengths as the mask, past_sequence_length,
// cache_indirection, the qk output.
Nodes multi_head_attention(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                           std::string* why) {
  auto in = [&](int i) { return input_or_empty(n, i); };
  const int64_t heads = attr_i(n, "num_heads", 0);
  const int qr = types.rank(in(0));
  const int kr = has_input(n, 1) ? types.rank(in(1)) : 0;
  const int vr = has_input(n, 2) ? types.rank(in(2)) : 0;
  const bool bias = has_input(n, 3);
  const bool past = has_input(n, 6) || has_input(n, 7);
  const int mask_rank = has_input(n, 4) ? types.rank(in(4)) : 0;
  enum class Form { kSeparate, kPackedQkv, kPackedKv, kKeysInHeads, kNone };
  const Form form = qr == 3 && kr == 3 && vr == 3   ? Form::kSeparate
                    : qr == 5 && kr == 0 && vr == 0 ? Form::kPackedQkv
                    : qr == 3 && kr == 5 && vr == 0 ? Form::kPackedKv
                    : qr == 3 && kr == 4 && vr == 4 ? Form::kKeysInHeads
                                                    : Form::kNone;
  if (heads < 1 || n.input_size() < 1 || n.output_size() < 1) {
    *why = "it needs num_heads";
  } else if (has_input(n, 8) || has_input(n, 9) || (n.output_size() > 3 && !n.output(3).empty())) {
    *why =
        "past_sequence_length (a past shared with the present), cache_indirection and the qk "
        "output are not supported";
  } else if (form == Form::kNone) {
    *why =
        "its query, key and value must be of known ranks: [B, S, D] each, packed QKV "
        "[B, S, N, 3, h], packed KV [B, L, N, 2, h], or key and value in heads [B, N, L, h]";
  } else if (bias && form != Form::kSeparate) {
    *why = "a bias is supported with a separate query, key and value only";
  } else if (past && (!has_input(n, 6) || !has_input(n, 7) || form == Form::kKeysInHeads)) {
    *why = "past_key and past_value go together, and not with a key and value in heads";
  } else if (mask_rank != 0 && mask_rank != 2 && mask_rank != 3) {
    *why = "its key_padding_mask must be a raw mask [B, T] or [B, S, T] of declared rank";
  } else if (opset < 11) {
    *why = "it needs opset 11 or later";
  }
  if (!why->empty()) return {};
  const int32_t type = elem_type_of(types, in(0));
  NodeEmitter e(n, opset);
  std::string q, k, v;
  if (form == Form::kSeparate) {
    std::string qx = in(0), kx = in(1), vx = in(2);
    if (bias) {  // [D | D | Dv]
      const std::string d = dim_of(e, qx, 2), d2 = e.op("Add", {d, d});
      auto part = [&](const std::string& from, const std::string& to) {
        return e.op("Slice", {in(3), from, to, e.int64s({0})});
      };
      qx = e.op("Add", {qx, part(e.int64s({0}), d)});
      kx = e.op("Add", {kx, part(d, d2)});
      vx = e.op("Add", {vx, part(d2, e.int64s({std::numeric_limits<int64_t>::max()}))});
    }
    q = split_heads(e, qx, heads);
    k = split_heads(e, kx, heads);
    v = split_heads(e, vx, heads);
  } else if (form == Form::kPackedQkv) {
    const std::vector<std::string> qkv = unstack(e, in(0), 3, 3);  // [B, S, N, h] each
    q = e.transpose(qkv[0], {0, 2, 1, 3});
    k = e.transpose(qkv[1], {0, 2, 1, 3});
    v = e.transpose(qkv[2], {0, 2, 1, 3});
  } else {
    q = split_heads(e, in(0), heads);
    if (form == Form::kPackedKv) {
      const std::vector<std::string> kv = unstack(e, in(1), 3, 2);
      k = e.transpose(kv[0], {0, 2, 1, 3});
      v = e.transpose(kv[1], {0, 2, 1, 3});
    } else {
      k = in(1);
      v = in(2);
    }
  }
  if (past) {
    k = concat(e, {in(6), k}, 2);
    v = concat(e, {in(7), v}, 2);
  }
  if (n.output_size() > 1 && !n.output(1).empty()) e.op("Identity", {k}, n.output(1));
  if (n.output_size() > 2 && !n.output(2).empty()) e.op("Identity", {v}, n.output(2));
  ScoreTerms terms;
  terms.scale = attr_f(n, "scale", 0.0f);
  terms.mask = in(4);
  terms.mask_rank = mask_rank;
  terms.filter = attr_f(n, "mask_filter_value", -10000.0f);
  terms.bias = in(5);
  terms.causal = attr_i(n, "unidirectional", 0) != 0;
  join_heads(e, attend(e, q, e.transpose(k, {0, 1, 3, 2}), v, terms, type), n.output(0));
  return e.finish();
}

// x [..., h] (rank 4) with its first 2·half dims turned by the angles whose
// cosines and sines c, s [..., half] broadcast against it: halves x1, x2
// (or, interleaved, even and odd elements) become x1·c - x2·s and
// x2·c + x1·s; the rest of the last axis, when `partial`, is kept. A half
// of -1 (not known at import) turns all of h.
std::string rotate(NodeEmitter& e, const std::string& x, std::string c, std::string s,
                   int64_t half, bool interleaved, bool partial) {
  const int64_t dims = half < 0 ? -1 : 2 * half;
  auto ints = [&](int64_t v) { return e.int64s({v}); };
  const std::string turned = partial ? last_axis_slice(e, x, ints(0), ints(dims)) : x;
  std::string x1, x2;
  if (interleaved) {  // pairs [..., half, 2]
    const std::string pairs = e.op("Reshape", {turned, e.int64s({0, 0, 0, half, 2})});
    x1 = last_axis_slice(e, pairs, ints(0), ints(1));
    x2 = last_axis_slice(e, pairs, ints(1), ints(2));
    c = e.axes_op("Unsqueeze", c, {-1});
    s = e.axes_op("Unsqueeze", s, {-1});
  } else if (half < 0) {
    x1 = e.fresh("x1");
    x2 = e.fresh("x2");
    onnx::NodeProto& split = e.node("Split", {turned}, {x1, x2});
    set_attr(split, "axis", int64_t{-1});
    set_attr(split, "num_outputs", int64_t{2});
  } else {
    x1 = last_axis_slice(e, turned, ints(0), ints(half));
    x2 = last_axis_slice(e, turned, ints(half), ints(dims));
  }
  std::string y = concat(e,
                         {e.op("Sub", {e.op("Mul", {x1, c}), e.op("Mul", {x2, s})}),
                          e.op("Add", {e.op("Mul", {x2, c}), e.op("Mul", {x1, s})})},
                         -1);
  if (interleaved) y = e.op("Reshape", {y, e.int64s({0, 0, 0, dims})});
  if (partial)
    y = concat(e, {y, last_axis_slice(e, x, ints(dims), ints(std::numeric_limits<int64_t>::max()))},
               -1);
  return y;
}

// RotaryEmbedding (rotary position embeddings of LLaMA-like models): per
// head of the input ([B, S, N·h] or [B, N, S, h]), its first rotary dims r
// (2·the caches' width) turned by the angle of the token's position: with
// c, s the rows of cos_cache and sin_cache at the position, halves x1, x2
// (or, interleaved, even and odd elements) become x1·c - x2·s and
// x2·c + x1·s; the rest of the head is kept. position_ids: [B, S], or one
// offset p for positions p, p + 1, ... ONNX's own (opset 23) takes
// (input, cos_cache, sin_cache, position_ids) and, without position_ids,
// caches already of each token, [B, S, r / 2].
Nodes rotary_embedding(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                       std::string* why) {
  const bool onnx_form = n.domain().empty() || n.domain() == "ai.onnx";
  auto in = [&](int i) { return input_or_empty(n, i); };
  const std::string ids = onnx_form ? in(3) : in(1);
  const std::string cos = in(onnx_form ? 1 : 2), sin = in(onnx_form ? 2 : 3);
  const int rank = types.rank(in(0));
  const int64_t heads = attr_i(n, "num_heads", 0), rotary = attr_i(n, "rotary_embedding_dim", 0);
  // The caches' width: the rotary dims' half, or the constant cache's, or
  // (a full rotation) not needed.
  std::vector<int64_t> cache;
  int64_t half = rotary > 0 ? rotary / 2 : -1;
  if (types.constant_dims(cos, &cache) && !cache.empty()) half = cache.back();
  if (n.input_size() < (onnx_form ? 3 : 4) || n.output_size() < 1 || (rank != 3 && rank != 4)) {
    *why = "its input must be of known rank: [B, S, N·h] or [B, N, S, h]";
  } else if (attr_i(n, "is_packed_batching", 0) != 0) {
    *why = "packed batching is not supported";
  } else if (!onnx_form && cache.size() != 2) {
    *why = "its cos_cache must be a constant [positions, rotary dims / 2]";
  } else if (rotary > 0 && (heads < 1 || rotary != 2 * half)) {
    *why = "a rotary_embedding_dim needs num_heads and must be twice the caches' width";
  } else if (rank == 3 && heads < 1 && half < 1) {
    *why = "a 3-D input needs num_heads or constant caches";
  } else if (opset < 11) {
    *why = "it needs opset 11 or later";
  }
  if (!why->empty()) return {};
  const int32_t i64 = onnx::TensorProto::INT64;
  NodeEmitter e(n, opset);
  // [B, S, N, h] or [B, N, S, h]: heads on the last axis.
  const std::string x = rank == 4
                            ? in(0)
                            : e.op("Reshape", {in(0), heads > 0 ? e.int64s({0, 0, heads, -1})
                                                                : e.int64s({0, 0, -1, 2 * half})});
  // cos and sin [..., S, 1 or N, half] against [B, S, N, ·], [..., 1, S, half]
  // against [B, N, S, ·]: the caches' rows at the positions, or the caches
  // as they are when ONNX's form has no position_ids.
  std::string positions = ids;
  auto rows = [&](const std::string& table) {
    const std::string per_token = ids.empty() ? table : e.op("Gather", {table, positions});
    return e.axes_op("Unsqueeze", per_token, {rank == 3 ? -2 : -3});
  };
  // Positions: [B, S] as given, or p + 0..S-1 from one offset p (a scalar
  // or one element); when the rank is not declared, p + (0..S-1)·(size == 1).
  const int ids_rank = types.rank(ids);
  if (!ids.empty() && ids_rank != 2) {
    std::string steps =
        e.op("Range",
             {e.scalar(0.0, i64), e.axes_op("Squeeze", dim_of(e, in(0), rank == 3 ? 1 : 2), {0}),
              e.scalar(1.0, i64)});
    if (ids_rank < 0)
      steps = e.op("Mul",
                   {steps, cast(e, e.op("Equal", {e.op("Size", {ids}), e.scalar(1.0, i64)}), i64)});
    positions = e.op("Add", {ids, steps});
  }
  const std::string y =
      rotate(e, x, rows(cos), rows(sin), half, attr_i(n, "interleaved", 0) != 0, rotary > 0);
  if (rank == 3) e.op("Reshape", {y, e.op("Shape", {in(0)})}, n.output(0));
  else e.op("Identity", {y}, n.output(0));
  return e.finish();
}

// GroupQueryAttention (LLMs' attention as ONNX Runtime's model builder
// writes it): num_heads query heads share kv_num_heads key and value heads
// (query head n reads key head n / (num_heads / kv_num_heads)); query [B, S,
// N·h] with key and value [B, S, M·h], or packed QKV [B, S, (N + 2M)·h].
// Sequence b's tokens of this run are at positions p_b + s, where p_b =
// seqlens_k[b] + 1 - S (0 on the first prompt, when total_sequence_length is
// S): their rotary embeddings (do_rotary) are of those positions, their keys
// and values are written there into present [B, M, P + S, h], a copy of the
// past (ScatterElements), and query s sees the keys up to p_b + s (with a
// local_window_size w, the last w of them); attention_bias is added. Rows
// of a present past a sequence's length are left as they come (ONNX
// Runtime's are zeros; no query reads them), and so are the outputs of a
// padded first prompt's padding (ONNX Runtime turns them as position 1).
// Not covered: position_ids, softcap, smooth softmax, head sinks, quantized
// or windowed caches, the qk output, bidirectional attention (causal 0).
Nodes group_query_attention(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                            std::string* why) {
  auto in = [&](int i) { return input_or_empty(n, i); };
  const int64_t heads = attr_i(n, "num_heads", 0), kv_heads = attr_i(n, "kv_num_heads", 0);
  const bool packed = !has_input(n, 1);
  const bool past = has_input(n, 3);
  const bool rotary = attr_i(n, "do_rotary", 0) != 0;
  const int64_t window = attr_i(n, "local_window_size", -1);
  std::vector<int64_t> cache;
  bool unsupported_parts = attr_f(n, "softcap", 0.0f) != 0.0f ||
                           attr_i(n, "smooth_softmax", 0) != 0 || attr_i(n, "qk_output", 0) != 0 ||
                           attr_i(n, "sliding_window_cache", 0) != 0 ||
                           attr_i(n, "causal", 1) != 1 ||
                           (n.output_size() > 3 && !n.output(3).empty());
  for (const char* a : {"k_quant_type", "v_quant_type"})
    if (const onnx::AttributeProto* q = find_attr(n, a))
      unsupported_parts = unsupported_parts || (q->s() != "NONE" && !q->s().empty());
  for (int i = 9; i < n.input_size(); ++i)
    unsupported_parts = unsupported_parts || (i != 10 && has_input(n, i));
  if (heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || n.input_size() < 7 ||
      n.output_size() < 1 || !has_input(n, 5) || !has_input(n, 6)) {
    *why = "it needs num_heads a multiple of kv_num_heads, seqlens_k and total_sequence_length";
  } else if (packed == has_input(n, 2) || past != has_input(n, 4)) {
    *why = "key and value go together (or neither, for packed QKV), and so do past_key and "
           "past_value";
  } else if (unsupported_parts) {
    *why = "position_ids, head sinks, quantized or windowed caches, softcap, smooth softmax, "
           "the qk output and bidirectional attention are not supported";
  } else if (rotary && (!types.constant_dims(in(7), &cache) || cache.size() != 2 ||
                        cache[1] < 1 || !has_input(n, 8))) {
    *why = "do_rotary needs a constant cos_cache [positions, rotary dims / 2] and a sin_cache";
  } else if (opset < 13) {
    *why = "it needs opset 13 or later";
  }
  if (!why->empty()) return {};
  const int32_t type = elem_type_of(types, in(0));
  const int32_t i64 = onnx::TensorProto::INT64;
  NodeEmitter e(n, opset);
  // Heads: q [B, N, S, h], k and v [B, M, S, h].
  std::string q, k, v;
  if (packed) {
    const std::string by_heads =
        e.op("Reshape", {in(0), e.int64s({0, 0, heads + 2 * kv_heads, -1})});
    const std::string parts[3] = {e.fresh("q"), e.fresh("k"), e.fresh("v")};
    onnx::NodeProto& split = e.node("Split", {by_heads, e.int64s({heads, kv_heads, kv_heads})},
                                    {parts[0], parts[1], parts[2]});
    set_attr(split, "axis", int64_t{2});
    q = e.transpose(parts[0], {0, 2, 1, 3});
    k = e.transpose(parts[1], {0, 2, 1, 3});
    v = e.transpose(parts[2], {0, 2, 1, 3});
  } else {
    q = split_heads(e, in(0), heads);
    k = split_heads(e, in(1), kv_heads);
    v = split_heads(e, in(2), kv_heads);
  }
  // The positions of this run's tokens, p_b + s: [B, S].
  const std::string length = dim_of(e, in(0), 1);
  const std::string first =
      e.op("Equal", {e.op("Reshape", {cast(e, in(6), i64), e.int64s({1})}), length});
  const std::string start =
      e.op("Where", {first, e.int64s({0}),
                     e.op("Sub", {e.op("Add", {cast(e, in(5), i64), e.int64s({1})}), length})});
  const std::string steps = e.op("Range", {e.scalar(0.0, i64), e.axes_op("Squeeze", length, {0}),
                                           e.scalar(1.0, i64)});
  const std::string positions = e.op("Add", {e.axes_op("Unsqueeze", start, {1}), steps});
  if (rotary) {
    auto rows = [&](const std::string& table) {  // [B, 1, S, half]
      return e.axes_op("Unsqueeze", e.op("Gather", {table, positions}), {1});
    };
    const std::string c = rows(in(7)), s = rows(in(8));
    const bool interleaved = attr_i(n, "rotary_interleaved", 0) != 0;
    q = rotate(e, q, c, s, cache[1], interleaved, true);
    k = rotate(e, k, c, s, cache[1], interleaved, true);
  }
  const std::string at = e.axes_op("Unsqueeze", positions, {1, 3});  // [B, 1, S, 1]
  auto place = [&](const std::string& before, const std::string& x, int out) {
    std::string all = x;
    if (past) {
      onnx::NodeProto& scatter = e.node(
          "ScatterElements", {concat(e, {before, x}, 2), e.op("Expand", {at, e.op("Shape", {x})}), x});
      set_attr(scatter, "axis", int64_t{2});
      all = scatter.output(0);
    }
    if (n.output_size() > out && !n.output(out).empty()) e.op("Identity", {all}, n.output(out));
    return all;
  };
  k = place(in(3), k, 1);
  v = place(in(4), v, 2);
  // Scores [B, N, S, T] of the grouped heads: q as [B, M, G·S, h] times kᵀ.
  const float scale_attr = attr_f(n, "scale", 0.0f);
  const std::string scale =
      scale_attr != 0.0f ? e.scalar(scale_attr, type)
                         : e.op("Reciprocal", {e.op("Sqrt", {cast(e, dim_of(e, q, 3), type)})});
  const std::string grouped = e.op("Reshape", {q, e.int64s({0, kv_heads, -1, 0})});
  std::string scores = e.op(
      "Mul", {e.op("Reshape", {e.op("MatMul", {grouped, e.transpose(k, {0, 1, 3, 2})}),
                               e.int64s({0, heads, -1, 0})}),
              scale});
  // Keys past each query's position (or before its window) take no part.
  const std::string keys = e.op("Range", {e.scalar(0.0, i64),
                                          e.axes_op("Squeeze", dim_of(e, k, 2), {0}),
                                          e.scalar(1.0, i64)});
  std::string blocked = e.op("Greater", {keys, at});
  if (window > 0)  // keys from p_b + s - w + 1 on
    blocked = e.op("Or", {blocked, e.op("Less", {keys, e.op("Sub", {at, e.int64s({window - 1})})})});
  scores = e.op("Add", {scores, e.op("Where", {blocked,
                                               e.scalar(std::numeric_limits<float>::lowest(), type),
                                               e.scalar(0.0, type)})});
  if (has_input(n, 10)) scores = e.op("Add", {scores, in(10)});
  onnx::NodeProto& softmax = e.node("Softmax", {scores});
  set_attr(softmax, "axis", int64_t{3});
  const std::string context =
      e.op("MatMul", {e.op("Reshape", {softmax.output(0), e.int64s({0, kv_heads, -1, 0})}), v});
  join_heads(e, e.op("Reshape", {context, e.int64s({0, heads, -1, 0})}), n.output(0));
  return e.finish();
}

// ONNX's Attention (opset 23, as exporters write scaled dot-product
// attention): Q [B, N, S, h] and K, V [B, M, L, h] of M key and value heads
// (query head n reads key head n / (N / M)), or 3-D [B, S, N·h] and [B, L,
// M·h] with q_num_heads and kv_num_heads; past_key/past_value [B, M, P, h]
// put ahead, present_key/present_value them all; softmax(Q·Kᵀ·scale, capped
// by softcap, + the mask)·V, where a boolean attn_mask masks out false and a
// float one is added, and is_causal lets query i see key j only if
// j <= i + T - S; nonpad_kv_seqlen (opset 24) masks each sequence's keys
// from its count on. Not covered: the qk_matmul output, nonpad_kv_seqlen
// with a past.
Nodes onnx_attention(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                     std::string* why) {
  auto in = [&](int i) { return input_or_empty(n, i); };
  const int rank = types.rank(in(0));
  const int64_t heads = attr_i(n, "q_num_heads", 0), kv_heads = attr_i(n, "kv_num_heads", 0);
  if (n.input_size() < 3 || n.output_size() < 1 || (rank != 3 && rank != 4)) {
    *why = "its query must be of known rank, 3 or 4";
  } else if (rank == 3 && (heads < 1 || kv_heads < 1 || heads % kv_heads != 0)) {
    *why = "3-D inputs need q_num_heads and kv_num_heads, the first a multiple of the second";
  } else if (has_input(n, 6) && (has_input(n, 4) || has_input(n, 5))) {
    *why = "nonpad_kv_seqlen (opset 24) is not supported with past_key and past_value";
  } else if (!output_or_empty(n, 3).empty()) {
    *why = "its qk_matmul_output is not supported";
  } else if (has_input(n, 4) != has_input(n, 5)) {
    *why = "it has one of past_key and past_value without the other";
  }
  if (!why->empty()) return {};
  NodeEmitter e(n, opset);
  const int32_t type = elem_type_of(types, in(0));
  const std::string q = rank == 3 ? split_heads(e, in(0), heads) : in(0);
  std::string k = rank == 3 ? split_heads(e, in(1), kv_heads) : in(1);
  std::string v = rank == 3 ? split_heads(e, in(2), kv_heads) : in(2);
  // The past ahead of this run's keys and values; the presents are them all.
  auto with_past = [&](const std::string& now, int past, int present) {
    const std::string out = output_or_empty(n, present);
    if (has_input(n, past)) return concat(e, {in(past), now}, 2, out);
    if (!out.empty()) e.op("Identity", {now}, out);
    return now;
  };
  k = with_past(k, 4, 1);
  v = with_past(v, 5, 2);
  // Each key and value head repeated for its group of query heads: [B, M,
  // G, T, h] as [B, N, T, h]. With 4-D inputs the group is known at run time.
  if (rank == 4 || heads != kv_heads) {
    const std::string group =
        rank == 3 ? e.int64s({heads / kv_heads}) : e.op("Div", {dim_of(e, q, 1), dim_of(e, k, 1)});
    const std::string one = e.int64s({1});
    auto repeat = [&](const std::string& x) {
      const std::string grouped = e.op(
          "Expand", {e.axes_op("Unsqueeze", x, {2}), concat(e, {one, one, group, one, one}, 0)});
      return e.op(
          "Reshape",
          {grouped,
           concat(e, {dim_of(e, x, 0), e.int64s({-1}), dim_of(e, x, 2), dim_of(e, x, 3)}, 0)});
    };
    k = repeat(k);
    v = repeat(v);
  }
  ScoreTerms terms;
  terms.scale = attr_f(n, "scale", 0.0f);
  terms.softcap = attr_f(n, "softcap", 0.0f);
  terms.causal = attr_i(n, "is_causal", 0) != 0;
  terms.filter = std::numeric_limits<float>::lowest();
  if (has_input(n, 3)) {
    terms.bias = types.elem_type(in(3)) == onnx::TensorProto::BOOL
                     ? e.op("Where", {in(3), e.scalar(0.0, type), e.scalar(terms.filter, type)})
                     : in(3);
  }
  if (has_input(n, 6)) {  // keys from nonpad_kv_seqlen[b] on are padding: [B, 1, 1, T]
    const int32_t i64 = onnx::TensorProto::INT64;
    const std::string keys =
        e.op("Range",
             {e.scalar(0.0, i64), e.axes_op("Squeeze", dim_of(e, k, 2), {0}), e.scalar(1.0, i64)});
    const std::string valid = e.op("Less", {keys, e.axes_op("Unsqueeze", in(6), {1})});
    const std::string padding = e.axes_op(
        "Unsqueeze", e.op("Where", {valid, e.scalar(0.0, type), e.scalar(terms.filter, type)}),
        {1, 2});
    terms.bias = terms.bias.empty() ? padding : e.op("Add", {terms.bias, padding});
  }
  const std::string y = attend(e, q, e.transpose(k, {0, 1, 3, 2}), v, terms, type);
  if (rank == 3) join_heads(e, y, n.output(0));
  else e.op("Identity", {y}, n.output(0));
  return e.finish();
}

// EmbedLayerNormalization (BERT's embeddings): LayerNormalization of the
// word embeddings of input_ids + the position embeddings (of position_ids,
// or of 0..S-1) [+ the segment embeddings of segment_ids]; mask_index, the
// count of 1s in each row of mask (0 without one); embedding_sum, the sum
// normalised.
Nodes embed_layer_norm(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
                       std::string* why) {
  auto in = [&](int i) { return input_or_empty(n, i); };
  const bool mask_used = n.output_size() > 1 && !n.output(1).empty();
  if (n.input_size() < 7 || !has_input(n, 0) || !has_input(n, 2) || !has_input(n, 3) ||
      !has_input(n, 5) || !has_input(n, 6) || n.output_size() < 1 ||
      has_input(n, 1) != has_input(n, 4)) {
    *why = "its inputs or outputs are not as the operator defines them";
    return {};
  }
  NodeEmitter e(n, opset);
  std::string sum = e.op("Gather", {in(2), in(0)});
  std::string positions = in(8);
  if (positions.empty()) {
    onnx::NodeProto& gather =
        e.node("Gather", {e.op("Shape", {in(0)}), e.scalar(1.0, onnx::TensorProto::INT64)});
    set_attr(gather, "axis", int64_t{0});
    const std::string length = gather.output(0);
    positions = e.op("Range", {e.scalar(0.0, onnx::TensorProto::INT64), length,
                               e.scalar(1.0, onnx::TensorProto::INT64)});
  }
  sum = e.op("Add", {sum, e.op("Gather", {in(3), positions})});
  const std::string embedding_sum = output_or_empty(n, 2);
  if (has_input(n, 1)) sum = e.op("Add", {sum, e.op("Gather", {in(4), in(1)})}, embedding_sum);
  else if (!embedding_sum.empty()) sum = e.op("Identity", {sum}, embedding_sum);
  onnx::NodeProto& ln = e.node("LayerNormalization", {sum, in(5), in(6)}, {n.output(0)});
  set_attr(ln, "axis", int64_t{-1});
  set_attr(ln, "epsilon", attr_f(n, "epsilon", 1e-12f));
  if (mask_used && !has_input(n, 7)) {  // no mask: zeros, one per row
    onnx::NodeProto& zeros = e.node(
        "ConstantOfShape", {e.op("Slice", {e.op("Shape", {in(0)}), e.int64s({0}), e.int64s({1})})},
        {n.output(1)});
    onnx::AttributeProto& value = *zeros.add_attribute();
    value.set_name("value");
    value.set_type(onnx::AttributeProto::TENSOR);
    value.mutable_t()->set_data_type(onnx::TensorProto::INT32);
    value.mutable_t()->add_dims(1);
    value.mutable_t()->add_int32_data(0);
  } else if (mask_used) {
    onnx::NodeProto& to64 = e.node("Cast", {in(7)});
    set_attr(to64, "to", int64_t{onnx::TensorProto::INT64});
    const std::string count = e.axes_op("ReduceSum", to64.output(0), {1}, 0);
    onnx::NodeProto& to32 = e.node("Cast", {count}, {n.output(1)});
    set_attr(to32, "to", int64_t{onnx::TensorProto::INT32});
  }
  return e.finish();
}

// QuantizeLinear and DequantizeLinear of ONNX Runtime's domain (what its
// quantizer writes with its contrib Q/DQ option): ONNX's own, per tensor
// without an axis, per `axis` with one (from opset 13).
Nodes quantize_linear(const onnx::NodeProto& n, int64_t opset, std::string* why) {
  const onnx::AttributeProto* axis = find_attr(n, "axis");
  if (n.input_size() < 2 || n.input_size() > 3 || n.output_size() != 1) {
    *why = "it has 2 or 3 inputs and 1 output";
  } else if (opset < 10 || (axis != nullptr && opset < 13)) {
    *why = "it needs opset 10 or later, 13 or later with an axis";
  }
  if (!why->empty()) return {};
  NodeEmitter e(n, opset);
  onnx::NodeProto& node = e.node(n.op_type(), {n.input().begin(), n.input().end()}, {n.output(0)});
  if (axis != nullptr) set_attr(node, "axis", axis->i());
  return e.finish();
}

// The rewrite of `n`, or nothing if it is none of the operators above or
// outside what they cover.
Nodes rewrite(const onnx::NodeProto& n, const DeclaredTypes& types, int64_t opset,
              std::string* why) {
  const std::string& op = n.op_type();  // rewritten_op has checked the domain
  if (op == "FusedConv")
    return product_then_activation(n, "Conv", conv_activation(n), types, opset, why);
  if (op == "FusedGemm")
    return product_then_activation(n, "Gemm", gemm_activation(n), types, opset, why);
  // TransposeMatMul: FusedMatMul's name in the models of older versions.
  if (op == "FusedMatMul" || op == "TransposeMatMul") return fused_matmul(n, types, opset, why);
  if (op == "QuantizeLinear" || op == "DequantizeLinear") return quantize_linear(n, opset, why);
  if (op == "BiasGelu" || op == "FastGelu" || op == "QuickGelu")
    return gelu_family(n, types, opset, why);
  if (op == "SkipLayerNormalization" || op == "SkipSimplifiedLayerNormalization" ||
      op == "SimplifiedLayerNormalization")
    return layer_norm_family(n, types, opset, why);
  if (op == "QGemm") return qgemm(n, types, opset, why);
  const bool onnx_domain = n.domain().empty() || n.domain() == "ai.onnx";
  if (op == "Attention")
    return onnx_domain ? onnx_attention(n, types, opset, why) : attention(n, types, opset, why);
  if (op == "MultiHeadAttention") return multi_head_attention(n, types, opset, why);
  if (op == "RotaryEmbedding") return rotary_embedding(n, types, opset, why);
  if (op == "GroupQueryAttention") return group_query_attention(n, types, opset, why);
  if (op == "EmbedLayerNormalization") return embed_layer_norm(n, types, opset, why);
  if (op == "MatMulIntegerToFloat" || op == "DynamicQuantizeMatMul")
    return integer_matmul(n, opset, why);
  return qlinear(n, opset, why);
}

bool rewritten_op(const onnx::NodeProto& n) {
  // clang-format off
  static const char* const ops[] = {
      "FusedConv", "FusedGemm", "FusedMatMul", "BiasGelu", "FastGelu", "QuickGelu",
      "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "SimplifiedLayerNormalization",
      "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid", "QLinearLeakyRelu",
      "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearSoftmax", "QGemm",
      "MatMulIntegerToFloat", "DynamicQuantizeMatMul", "Attention", "EmbedLayerNormalization",
      "MultiHeadAttention", "RotaryEmbedding", "TransposeMatMul", "QuantizeLinear",
      "DequantizeLinear", "GroupQueryAttention"};
  // clang-format on
  // ONNX Runtime defines SimplifiedLayerNormalization in the default domain;
  // ONNX defines Attention and RotaryEmbedding there since opset 23.
  if (n.op_type() == "SimplifiedLayerNormalization" || n.op_type() == "Attention" ||
      n.op_type() == "RotaryEmbedding")
    if (n.domain().empty() || n.domain() == "ai.onnx") return true;
  if (n.domain() != "com.microsoft") return false;
  for (const char* op : ops)
    if (n.op_type() == op) return true;
  return false;
}

}  // namespace

Status rewrite_contrib_ops(onnx::ModelProto& model, const ir::OpRegistry& registry, int* count) {
  if (count != nullptr) *count = 0;
  const int64_t opset = default_opset(model);
  auto of_onnx_runtime = [](const onnx::NodeProto& node) {
    return rewritten_op(node) || node.domain() == "com.microsoft.nchwc";
  };
  if (opset < 1 || !model.has_graph() || !any_node(model.graph(), of_onnx_runtime))
    return ok_status();
  const DeclaredTypes types(model.graph());
  Status refused = ok_status();
  // The NCHWc layout ONNX Runtime's optimiser writes at level "all" stores
  // weights in its own blocked arrangement, for one CPU's vector width.
  const onnx::NodeProto* nchwc = nullptr;
  any_node(model.graph(), [&](const onnx::NodeProto& node) {
    if (node.domain() != "com.microsoft.nchwc" || registry.knows(node.domain(), node.op_type()))
      return false;
    nchwc = &node;
    return true;
  });
  if (nchwc != nullptr)
    return unsupported("node '" + nchwc->name() + "' (" + nchwc->op_type() +
                       ", domain 'com.microsoft.nchwc'): the model was saved by ONNX Runtime at "
                       "optimization level 'all', whose NCHWc layout it marks as specific to the "
                       "machine that saved it; save it at level 'extended' (or 'basic') instead");
  const int n = replace_nodes(*model.mutable_graph(), [&](const onnx::NodeProto& node) {
    // A backend that defines the operator runs it whole.
    if (!rewritten_op(node) || registry.knows(node.domain(), node.op_type()) || !refused.ok())
      return Nodes{};
    std::string why;
    Nodes nodes = rewrite(node, types, opset, &why);
    if (nodes.empty() && !why.empty())
      refused = unsupported("node '" + node.name() + "' (" + node.op_type() + ", domain '" +
                            node.domain() +
                            "'): ONNX Runtime's fused operator runs here as the "
                            "standard operators it fuses, but " +
                            why);
    return nodes;
  });
  if (count != nullptr) *count = n;
  return refused;
}

}  // namespace backplane::onnx_import
