// opset_adapter.cpp — nodes of opsets 19 to 25 as opset 18's (opset_adapter.hpp).
#include "onnx/opset_adapter.hpp"

#include "onnx/proto_rewrite.hpp"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace backplane::onnx_import {
namespace {

using Nodes = std::vector<onnx::NodeProto>;

// `n` without the attributes named.
onnx::NodeProto without(const onnx::NodeProto& n, std::initializer_list<const char*> names) {
  onnx::NodeProto copy = n;
  auto* attrs = copy.mutable_attribute();
  attrs->erase(std::remove_if(attrs->begin(), attrs->end(),
                              [&](const onnx::AttributeProto& a) {
                                return std::find(names.begin(), names.end(), a.name()) !=
                                       names.end();
                              }),
               attrs->end());
  return copy;
}

// Sets string attribute `name` of `n`, added or replaced.
void put_string(onnx::NodeProto& n, const std::string& name, const std::string& value) {
  for (onnx::AttributeProto& a : *n.mutable_attribute())
    if (a.name() == name) {
      a.set_s(value);
      return;
    }
  set_attr(n, name, value);
}

std::string attr_s(const onnx::NodeProto& n, const std::string& name,
                   const std::string& otherwise) {
  const onnx::AttributeProto* a = find_attr(n, name);
  return a != nullptr ? a->s() : otherwise;
}

// A ConstantOfShape of `shape` filled with `value` in element type `elem_type`.
std::string filled(NodeEmitter& e, const std::string& shape, int32_t elem_type, double value) {
  onnx::NodeProto& n = e.node("ConstantOfShape", {shape});
  onnx::AttributeProto& a = *n.add_attribute();
  a.set_name("value");
  a.set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto& t = *a.mutable_t();
  t.set_data_type(elem_type);
  t.add_dims(1);
  if (elem_type == onnx::TensorProto::FLOAT) t.add_float_data(static_cast<float>(value));
  else t.add_int32_data(static_cast<int32_t>(value));  // the 8- and 16-bit integers
  return n.output(0);
}

Nodes quantize_linear(const onnx::NodeProto& n, const DeclaredTypes& types, std::string* why) {
  const int64_t precision = attr_i(n, "precision", 0);
  if (precision != 0 && precision != types.elem_type(input_or_empty(n, 1))) {
    *why = "its precision (" + std::to_string(precision) +
           ", opset 23) is not the element type of its scale";
    return {};
  }
  const int64_t output_dtype = attr_i(n, "output_dtype", 0);
  onnx::NodeProto q = without(n, {"saturate", "precision", "output_dtype"});
  // (A node without its scale is left for the operator's checks to name.)
  if (output_dtype == 0 || has_input(n, 2) || !has_input(n, 1)) return {q};
  // No zero point: one of the type output_dtype asks for, shaped as the scale.
  NodeEmitter e(n, kRuntimeOpset);
  const std::string zero =
      filled(e, e.op("Shape", {n.input(1)}), static_cast<int32_t>(output_dtype), 0.0);
  while (q.input_size() < 2) q.add_input("");
  if (q.input_size() == 2) q.add_input(zero);
  else q.set_input(2, zero);
  Nodes nodes = e.finish();
  nodes.push_back(std::move(q));
  return nodes;
}

Nodes dequantize_linear(const onnx::NodeProto& n, const DeclaredTypes& types) {
  const int64_t output_dtype = attr_i(n, "output_dtype", 0);
  onnx::NodeProto dq = without(n, {"output_dtype"});
  if (output_dtype == 0 || output_dtype == types.elem_type(input_or_empty(n, 1))) return {dq};
  NodeEmitter e(n, kRuntimeOpset);
  const std::string y = e.fresh("dequantized");
  dq.set_output(0, y);
  onnx::NodeProto& cast = e.node("Cast", {y}, {n.output(0)});
  set_attr(cast, "to", output_dtype);
  Nodes nodes{std::move(dq)};
  for (onnx::NodeProto& c : e.finish()) nodes.push_back(std::move(c));
  return nodes;
}

Nodes resize(const onnx::NodeProto& n, const DeclaredTypes& types, std::string* why) {
  if (attr_s(n, "coordinate_transformation_mode", "") != "half_pixel_symmetric") return {};
  // half_pixel_symmetric moves the sampling grid by the part of an output
  // length that is cut off; with whole output lengths it is half_pixel.
  bool whole = false;
  if (has_input(n, 3)) {
    whole = attr_s(n, "keep_aspect_ratio_policy", "stretch") == "stretch";
  } else if (std::vector<float> scales;
             has_input(n, 2) && types.float_values(n.input(2), &scales)) {
    whole = std::all_of(scales.begin(), scales.end(),
                        [](float s) { return s >= 1.0f && std::floor(s) == s; });
  }
  if (!whole) {
    *why =
        "its coordinate_transformation_mode half_pixel_symmetric (opset 19) differs from "
        "half_pixel here: its scales are not constant whole numbers, nor its sizes stretched";
    return {};
  }
  onnx::NodeProto r = n;
  put_string(r, "coordinate_transformation_mode", "half_pixel");
  return {r};
}

Nodes dft(const onnx::NodeProto& n, const DeclaredTypes& types, std::string* why) {
  int64_t axis = -2;
  if (has_input(n, 2)) {
    std::vector<int64_t> v;
    if (!types.int64_values(n.input(2), &v) || v.size() != 1) {
      *why = "its axis (an input since opset 20) is not a constant";
      return {};
    }
    axis = v[0];
  }
  onnx::NodeProto d = n;
  while (d.input_size() > 2) d.mutable_input()->RemoveLast();
  while (d.input_size() > 1 && d.input(d.input_size() - 1).empty()) d.mutable_input()->RemoveLast();
  set_attr(d, "axis", axis);
  return {d};
}

Nodes grid_sample(const onnx::NodeProto& n) {
  const std::string mode = attr_s(n, "mode", "linear");
  onnx::NodeProto g = n;
  put_string(g, "mode", mode == "linear" ? "bilinear" : mode == "cubic" ? "bicubic" : mode);
  return {g};
}

// GroupNormalization-21: normalised per group by opset 18's operator (scale 1,
// bias 0 per group), then each channel's scale and bias, over [N, C, rest].
Nodes group_normalization(const onnx::NodeProto& n, std::string* why) {
  if (!has_input(n, 0) || !has_input(n, 1) || !has_input(n, 2) || n.output_size() != 1 ||
      find_attr(n, "num_groups") == nullptr) {
    *why = "it needs X, scale, bias and num_groups";
    return {};
  }
  NodeEmitter e(n, kRuntimeOpset);
  const std::string& x = n.input(0);
  const std::string groups = e.int64s({attr_i(n, "num_groups", 1)});
  const std::string ones = e.op("CastLike", {filled(e, groups, onnx::TensorProto::FLOAT, 1.0), x});
  const std::string zeros = e.op("CastLike", {filled(e, groups, onnx::TensorProto::FLOAT, 0.0), x});
  onnx::NodeProto& gn = e.node("GroupNormalization", {x, ones, zeros});
  set_attr(gn, "num_groups", attr_i(n, "num_groups", 1));
  set_attr(gn, "epsilon", attr_f(n, "epsilon", 1e-5f));
  const std::string normalized = gn.output(0);
  onnx::NodeProto& rows =
      e.node("Concat", {e.int64s({0}), e.op("Shape", {n.input(1)}), e.int64s({-1})});
  set_attr(rows, "axis", int64_t{0});
  const std::string by_channel = e.op("Reshape", {normalized, rows.output(0)});
  const std::string scale = e.axes_op("Unsqueeze", n.input(1), {1});
  const std::string bias = e.axes_op("Unsqueeze", n.input(2), {1});
  const std::string affine = e.op("Add", {e.op("Mul", {by_channel, scale}), bias});
  e.op("Reshape", {affine, e.op("Shape", {x})}, n.output(0));
  return e.finish();
}

// Pad's wrap mode (19): along each padded axis, negative pads first crop it
// (by c0 at its start, to a length L), then output i reads input
// c0 + (i - before) mod L for i in [0, before + L + after), the positive
// pads' extent: a Gather of those indices, whatever the pads' size. Constant
// pads and axes.
Nodes pad_wrap(const onnx::NodeProto& n, const DeclaredTypes& types, std::string* why) {
  std::vector<int64_t> pads, axes;
  if (!has_input(n, 0) || n.output_size() < 1 || !has_input(n, 1) ||
      !types.int64_values(n.input(1), &pads) || pads.size() % 2 != 0 ||
      (has_input(n, 3) && !types.int64_values(n.input(3), &axes))) {
    *why = "its mode 'wrap' (opset 19) is supported with constant pads and axes only";
    return {};
  }
  const int64_t count = static_cast<int64_t>(pads.size() / 2);
  if (axes.empty())
    for (int64_t a = 0; a < count; ++a) axes.push_back(a);
  const int rank = types.rank(n.input(0));
  if (static_cast<int64_t>(axes.size()) != count) {
    *why = "its pads do not give two values per axis";
    return {};
  }
  NodeEmitter e(n, kRuntimeOpset);
  const int32_t i64 = onnx::TensorProto::INT64;
  std::string x = n.input(0);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t before = pads[static_cast<size_t>(k)],
                  after = pads[static_cast<size_t>(k + count)];
    int64_t axis = axes[static_cast<size_t>(k)];
    if (before == 0 && after == 0) continue;
    if (axis < 0 && rank < 0) {
      *why = "its mode 'wrap' needs the rank of its input for a negative axis";
      return {};
    }
    if (axis < 0) axis += rank;
    onnx::NodeProto& dim = e.node("Shape", {x});
    set_attr(dim, "start", axis);
    set_attr(dim, "end", axis + 1);
    const int64_t crop_start = std::max<int64_t>(-before, 0),
                  crop_end = std::max<int64_t>(-after, 0);
    const int64_t grow_start = std::max<int64_t>(before, 0), grow_end = std::max<int64_t>(after, 0);
    std::string length = e.axes_op("Squeeze", dim.output(0), {0});
    if (crop_start + crop_end > 0)
      length = e.op("Sub", {length, e.scalar(static_cast<double>(crop_start + crop_end), i64)});
    const std::string from = e.scalar(static_cast<double>(-grow_start), i64);
    const std::string to = e.op("Add", {length, e.scalar(static_cast<double>(grow_end), i64)});
    std::string positions = e.op("Mod", {e.op("Range", {from, to, e.scalar(1.0, i64)}), length});
    if (crop_start > 0)
      positions = e.op("Add", {positions, e.scalar(static_cast<double>(crop_start), i64)});
    onnx::NodeProto& gather = e.node("Gather", {x, positions});
    set_attr(gather, "axis", axis);
    x = gather.output(0);
  }
  return e.finish(x, n.output(0));
}

// One node of `op` in com.microsoft over the same inputs and outputs.
Nodes as_contrib(const onnx::NodeProto& n, const std::string& op,
                 std::initializer_list<const char*> dropped) {
  onnx::NodeProto c = without(n, dropped);
  c.set_op_type(op);
  c.set_domain("com.microsoft");
  return {c};
}

// What replaces `n` (empty: kept as it is, unless `why` says it is refused).
Nodes adapt(const onnx::NodeProto& n, const DeclaredTypes& types, std::string* why) {
  if (!n.domain().empty() && n.domain() != "ai.onnx") return {};
  // A node without its first output is left for the operator's checks to name.
  if (n.output_size() < 1 || n.output(0).empty()) return {};
  const std::string& op = n.op_type();
  if (op == "Cast" || op == "CastLike") {
    if (find_attr(n, "saturate") == nullptr && find_attr(n, "round_mode") == nullptr) return {};
    return {without(n, {"saturate", "round_mode"})};
  }
  if (op == "QuantizeLinear" || op == "DequantizeLinear") {
    // A blocked DequantizeLinear of constants is dequantized after the
    // import (expand_blocked_dequantize); blocked QuantizeLinear is refused.
    if (op == "QuantizeLinear" && attr_i(n, "block_size", 0) != 0) {
      *why = "blocked quantization (block_size " + std::to_string(attr_i(n, "block_size", 0)) +
             ", opset 21) is not supported";
      return {};
    }
    return op == "QuantizeLinear" ? quantize_linear(n, types, why) : dequantize_linear(n, types);
  }
  if (op == "AveragePool") {
    const onnx::AttributeProto* d = find_attr(n, "dilations");
    if (d == nullptr) return {};
    if (std::any_of(d->ints().begin(), d->ints().end(), [](int64_t v) { return v != 1; })) {
      *why = "dilations other than 1 (opset 19) are not supported";
      return {};
    }
    return {without(n, {"dilations"})};
  }
  if (op == "Pad" && attr_s(n, "mode", "constant") == "wrap") return pad_wrap(n, types, why);
  if (op == "Resize") return resize(n, types, why);
  if (op == "DFT") return dft(n, types, why);
  if (op == "GridSample") return grid_sample(n);
  if (op == "GroupNormalization") return group_normalization(n, why);
  if (op == "Gelu")
    return as_contrib(n, attr_s(n, "approximate", "none") == "tanh" ? "FastGelu" : "Gelu",
                      {"approximate"});
  if (op == "RMSNormalization") {  // ONNX Runtime's operator of the default domain
    onnx::NodeProto r = without(n, {"stash_type"});
    r.set_op_type("SimplifiedLayerNormalization");
    return {r};
  }
  if (op == "Swish") {
    Nodes q = as_contrib(n, "QuickGelu", {"alpha"});
    set_attr(q[0], "alpha", attr_f(n, "alpha", 1.0f));
    return q;
  }
  return {};
}

}  // namespace

Status adapt_to_opset18(onnx::ModelProto& model, int* count) {
  if (count != nullptr) *count = 0;
  const int64_t opset = default_opset(model);
  if (opset <= kRuntimeOpset || !model.has_graph()) return ok_status();
  if (opset > kMaxModelOpset)
    return Status(StatusCode::kVersionMismatch,
                  "opset " + std::to_string(opset) +
                      " of the default ONNX domain is not supported (supported: 1 to " +
                      std::to_string(kMaxModelOpset) + ")");
  const DeclaredTypes types(model.graph());
  Status refused = ok_status();
  bool contrib = false;
  const int n = replace_nodes(*model.mutable_graph(), [&](const onnx::NodeProto& node) {
    if (!refused.ok()) return Nodes{};
    std::string why;
    Nodes nodes = adapt(node, types, &why);
    if (!why.empty())
      refused = unsupported("node '" + node.name() + "' (" + node.op_type() + ", opset " +
                            std::to_string(opset) + "): " + why);
    for (const onnx::NodeProto& m : nodes) contrib = contrib || m.domain() == "com.microsoft";
    return nodes;
  });
  BP_RETURN_IF_ERROR(refused);
  bool has_contrib = false;
  for (onnx::OperatorSetIdProto& os : *model.mutable_opset_import()) {
    if (os.domain().empty() || os.domain() == "ai.onnx") os.set_version(kRuntimeOpset);
    has_contrib = has_contrib || os.domain() == "com.microsoft";
  }
  if (contrib && !has_contrib) {
    onnx::OperatorSetIdProto* os = model.add_opset_import();
    os->set_domain("com.microsoft");
    os->set_version(1);
  }
  if (count != nullptr) *count = n;
  return ok_status();
}

}  // namespace backplane::onnx_import
