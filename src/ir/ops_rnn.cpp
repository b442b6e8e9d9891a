// ops_rnn.cpp — schemas: RNN, GRU, LSTM.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;

const DTypeList kRnnFloat = {DType::kFloat16, DType::kFloat32, DType::kFloat64};

std::string dims(const Shape& s) { return shape_to_string(s); }

std::string lower(std::string s) {
  for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// The activation functions ONNX's recurrent ops may name.
bool known_activation(const std::string& name) {
  static const char* const kNames[] = {
      "relu",       "tanh",        "sigmoid", "affine",   "leakyrelu", "thresholdedrelu",
      "scaledtanh", "hardsigmoid", "elu",     "softsign", "softplus"};
  const std::string l = lower(name);
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* n) { return l == n; });
}

// RNN (1 gate), GRU (3) and LSTM (4): X [seq, batch, input] (layout 0) or
// [batch, seq, input] (layout 1, opset 14); W [dirs, gates*hidden, input],
// R [dirs, gates*hidden, hidden], B [dirs, 2*gates*hidden], sequence_lens
// [batch], initial_h/c [dirs, batch, hidden] (layout 1: [batch, dirs,
// hidden]), P [dirs, 3*hidden]. Outputs Y [seq, dirs, batch, hidden]
// (layout 1: [batch, seq, dirs, hidden]), Y_h/Y_c like initial_h.
Status infer_recurrent(InferCtx& c, int64_t gates, size_t activations_per_dir) {
  BP_ASSIGN_OR_RETURN(int64_t layout, c.node.attr_int("layout", 0));
  if (layout != 0 && layout != 1)
    return c.error("attribute 'layout' is " + std::to_string(layout) + ", expected 0 or 1");
  Result<std::string> direction = c.node.attr_string("direction", "forward");
  if (!direction.ok()) return direction.status();
  if (*direction != "forward" && *direction != "reverse" && *direction != "bidirectional")
    return c.error("attribute 'direction' is '" + *direction +
                   "', expected forward, reverse or bidirectional");
  const int64_t dirs = *direction == "bidirectional" ? 2 : 1;
  for (size_t i = 0; i < 3; ++i)
    if (c.rank(i) != 3)
      return c.error("input '" + c.name(i) + "' must have rank 3, got " + dims(c.shape(i)));
  const Shape& x = c.shape(0);
  const int64_t seq = layout == 0 ? x[0] : x[1], batch = layout == 0 ? x[1] : x[0];
  const int64_t input = x[2];
  const Shape& r = c.shape(2);
  int64_t hidden = r[2];
  if (c.node.attr("hidden_size") != nullptr) {
    BP_ASSIGN_OR_RETURN(hidden, c.node.attr_int("hidden_size", hidden));
    if (hidden < 1) return c.error("attribute 'hidden_size' must be >= 1");
  }
  auto expect = [&](size_t i, const Shape& want) -> Status {
    if (c.has(i) && c.shape(i) != want)
      return c.error("input '" + c.name(i) + "' has shape " + dims(c.shape(i)) + ", expected " +
                     dims(want) + " (direction " + *direction + ", hidden_size " +
                     std::to_string(hidden) + ", layout " + std::to_string(layout) + ")");
    return ok_status();
  };
  const Shape state = layout == 0 ? Shape{dirs, batch, hidden} : Shape{batch, dirs, hidden};
  BP_RETURN_IF_ERROR(expect(1, {dirs, gates * hidden, input}));
  BP_RETURN_IF_ERROR(expect(2, {dirs, gates * hidden, hidden}));
  BP_RETURN_IF_ERROR(expect(3, {dirs, 2 * gates * hidden}));
  BP_RETURN_IF_ERROR(expect(4, {batch}));
  BP_RETURN_IF_ERROR(expect(5, state));
  if (gates == 4) {
    BP_RETURN_IF_ERROR(expect(6, state));
    BP_RETURN_IF_ERROR(expect(7, {dirs, 3 * hidden}));
  }
  if (const Attribute* a = c.node.attr("activations")) {
    if (a->strings.size() != activations_per_dir * dirs && a->strings.size() != activations_per_dir)
      return c.error("attribute 'activations' has " + std::to_string(a->strings.size()) +
                     " entries, expected " + std::to_string(activations_per_dir * dirs));
    for (const std::string& f : a->strings)
      if (!known_activation(f)) return c.error("unknown activation function '" + f + "'");
  }
  BP_ASSIGN_OR_RETURN(float clip, c.node.attr_float("clip", 1.0f));
  if (!(clip > 0.0f)) return c.error("attribute 'clip' must be > 0");
  const DType t = c.dtype(0);
  c.set(0, t, layout == 0 ? Shape{seq, dirs, batch, hidden} : Shape{batch, seq, dirs, hidden});
  for (size_t i = 1; i < c.out.size(); ++i) c.set(i, t, state);
  return ok_status();
}

OpSchema recurrent(const char* op, int since, int64_t gates, size_t activations) {
  OpSchema s("", op, since);
  s.input("X", "T")
      .input("W", "T")
      .input("R", "T")
      .optional_input("B", "T")
      .optional_input("sequence_lens", "T1")
      .optional_input("initial_h", "T");
  if (gates == 4) s.optional_input("initial_c", "T").optional_input("P", "T");
  s.optional_output("Y", "T").optional_output("Y_h", "T");
  if (gates == 4) s.optional_output("Y_c", "T");
  s.type("T", kRnnFloat)
      .type("T1", {DType::kInt32})
      .attr("activation_alpha", AttrType::kFloats)
      .attr("activation_beta", AttrType::kFloats)
      .attr("activations", AttrType::kStrings)
      .attr("clip", AttrType::kFloat)
      .attr("direction", AttrType::kString, std::string("forward"))
      .attr("hidden_size", AttrType::kInt);
  if (since >= 14) s.attr("layout", AttrType::kInt, int64_t{0});
  if (gates == 3) s.attr("linear_before_reset", AttrType::kInt, int64_t{0});
  if (gates == 4) s.attr("input_forget", AttrType::kInt, int64_t{0});
  s.infer([gates, activations](InferCtx& c) { return infer_recurrent(c, gates, activations); });
  return s;
}

}  // namespace

void register_rnn_ops(OpRegistry& registry) {
  for (int since : {7, 14}) {
    (void)registry.add(recurrent("RNN", since, 1, 1).doc("H = f(X W^T + H R^T + Wb + Rb)"));
    (void)registry.add(recurrent("GRU", since, 3, 2)
                           .doc("gated recurrent unit; gates z, r, h; linear_before_reset"));
    (void)registry.add(recurrent("LSTM", since, 4, 3)
                           .doc("long short-term memory; gates i, o, f, c; peepholes P"));
  }
}

}  // namespace backplane::ir::ops
