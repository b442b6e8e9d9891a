// support.cpp — per-node support checks: general ones (domain, operator,
// dtypes, outputs), then one function per operator kind.
#include "onednn/support.hpp"

#include "onednn/impl_check.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace backplane::onednn {

const std::set<std::string_view>& eltwise_ops() {
  static const std::set<std::string_view> ops = {"Relu", "LeakyRelu", "Clip", "Sigmoid",
                                                 "Tanh", "Gelu",      "Sqrt", "Exp",
                                                 "Abs",  "Elu",       "Pow",  "Neg"};
  return ops;
}
const std::set<std::string_view>& activation_ops() {
  static const std::set<std::string_view> ops = {"HardSwish", "HardSigmoid", "Mish",
                                                 "Selu",      "Softplus",    "Round"};
  return ops;
}
const std::set<std::string_view>& data_movement_ops() {
  static const std::set<std::string_view> ops = {"Slice", "Split", "Pad", "Gather", "Resize"};
  return ops;
}
const std::set<std::string_view>& binary_ops() {
  static const std::set<std::string_view> ops = {"Add", "Sub", "Mul", "Div", "Max", "Min"};
  return ops;
}
// Cast among them: from float32 to float32 (check_tensors refuses every other
// type), the identity (a float16 model's casts around an operator its
// converter kept in float32, once it computes in float32: ir/float16.hpp).
const std::set<std::string_view>& view_ops() {
  static const std::set<std::string_view> ops = {"Reshape",  "Flatten", "Squeeze",   "Unsqueeze",
                                                 "Identity", "Dropout", "Transpose", "Cast"};
  return ops;
}

bool winograd_fits(const Dims& x, const Dims& kernel, const Dims& strides, const Dims& dilations,
                   int64_t group) {
  const Dims ones{1, 1};
  return x.size() == 4 && group == 1 && kernel == Dims{3, 3} && x[1] >= 16 && strides == ones &&
         dilations == ones;
}

Window window(ViewInfo& g, int n, const Dims& x, const Dims& y, const Dims& kernel,
              const Dims& before) {
  sdk::NodeRef node = g.node(n);
  const size_t sp = x.size() - 2;
  Window w;
  std::vector<int64_t> strides = node.attr_ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = node.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || kernel.size() != sp)
    throw fail(g.describe(n) + ": strides/dilations/pads/kernel do not match " +
               std::to_string(sp) + " spatial dims");
  for (size_t i = 0; i < sp; ++i) {
    const int64_t ext = (kernel[i] - 1) * dil[i] + 1;
    const int64_t total = (y[i + 2] - 1) * strides[i] + ext - x[i + 2];  // padding the output needs
    int64_t pl = pads[i];
    if (auto_pad == "SAME_UPPER") pl = std::max<int64_t>(total, 0) / 2;
    else if (auto_pad == "SAME_LOWER")
      pl = std::max<int64_t>(total, 0) - std::max<int64_t>(total, 0) / 2;
    else if (auto_pad == "VALID") pl = 0;
    else if (auto_pad != "NOTSET")
      throw fail(g.describe(n) + ": auto_pad '" + auto_pad + "' is not supported");
    if (i < before.size()) pl += before[i];
    w.kernel.push_back(kernel[i]);
    w.strides.push_back(strides[i]);
    w.dilation.push_back(dil[i] - 1);
    w.pad_l.push_back(pl);
    w.pad_r.push_back(std::max<int64_t>(total - pl, 0));
  }
  return w;
}

Window deconv_window(ViewInfo& g, int n, const Dims& x, const Dims& y, const Dims& kernel) {
  sdk::NodeRef node = g.node(n);
  const size_t sp = x.size() - 2;
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID")
    throw fail("ConvTranspose with auto_pad '" + auto_pad + "' is not supported");
  if (node.has_attr("output_shape")) throw fail("ConvTranspose with output_shape is not supported");
  std::vector<int64_t> strides = node.attr_ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = node.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = node.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  if (auto_pad == "VALID") pads.assign(2 * sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || kernel.size() != sp)
    throw fail(g.describe(n) + ": strides/dilations/pads/kernel do not match " +
               std::to_string(sp) + " spatial dims");
  Window w;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t ext = (kernel[i] - 1) * dil[i] + 1;
    // y = (x - 1) * stride + ext - pad_l - pad_r, output_padding in pad_r.
    const int64_t pr = (x[i + 2] - 1) * strides[i] + ext - pads[i] - y[i + 2];
    if (pr < 0) throw fail("ConvTranspose's output_padding exceeds its end padding");
    w.kernel.push_back(kernel[i]);
    w.strides.push_back(strides[i]);
    w.dilation.push_back(dil[i] - 1);
    w.pad_l.push_back(pads[i]);
    w.pad_r.push_back(pr);
  }
  return w;
}

PadSpec pad_spec(ViewInfo& g, int n, size_t rank) {
  sdk::NodeRef node = g.node(n);
  std::vector<int64_t> pads, axes;
  PadSpec s;
  if (node.opset() < 11) {
    pads = node.attr_ints("pads");
    s.value = node.attr_float("value", 0.f);
  } else {
    const auto p = g.ints(g.in(n, 1));
    if (!p) throw fail(g.describe(n) + ": pads are missing");
    pads = *p;
    if (g.num_in(n) > 2 && g.in(n, 2) >= 0) s.value = *g.scalar(g.in(n, 2));
    if (g.num_in(n) > 3 && g.in(n, 3) >= 0) axes = *g.ints(g.in(n, 3));
  }
  if (axes.empty())
    for (size_t i = 0; i < rank; ++i) axes.push_back(static_cast<int64_t>(i));
  if (pads.size() != 2 * axes.size()) throw fail(g.describe(n) + ": pads do not match the axes");
  s.before.assign(rank, 0);
  s.after.assign(rank, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + static_cast<int64_t>(rank) : axes[i];
    if (a < 0 || a >= static_cast<int64_t>(rank)) throw fail(g.describe(n) + ": axis out of range");
    s.before[static_cast<size_t>(a)] = pads[i];
    s.after[static_cast<size_t>(a)] = pads[axes.size() + i];
  }
  return s;
}

namespace {

// The node's activations, lower-cased (empty when the attribute is absent).
std::vector<std::string> rnn_activations(ViewInfo& g, int n) {
  std::vector<std::string> names;
  const bp_attribute_t* a = g.node(n).find_attr("activations");
  if (a == nullptr) return names;
  if (a->type != BP_ATTR_STRINGS) throw fail("activations must be strings");
  for (size_t i = 0; i < a->count; ++i) {
    std::string s = a->strings[i];
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    names.push_back(std::move(s));
  }
  return names;
}

// The one activation every direction of an RNN uses (oneDNN's cell takes one).
dnnl::algorithm rnn_activation(const std::vector<std::string>& names, int64_t dirs) {
  if (names.empty()) return dnnl::algorithm::eltwise_tanh;
  if (names.size() != 1 && names.size() != static_cast<size_t>(dirs))
    throw fail("RNN: expected " + std::to_string(dirs) + " activations");
  for (const std::string& s : names)
    if (s != names[0]) throw fail("RNN: different activations per direction are not supported");
  if (names[0] == "tanh") return dnnl::algorithm::eltwise_tanh;
  if (names[0] == "relu") return dnnl::algorithm::eltwise_relu;
  if (names[0] == "sigmoid") return dnnl::algorithm::eltwise_logistic;
  throw fail("RNN: activation '" + names[0] + "' is not supported (Tanh, Relu or Sigmoid)");
}

// Absent, or the defaults (LSTM: Sigmoid, Tanh, Tanh; GRU: Sigmoid, Tanh) for
// one or for each direction.
void check_gate_activations(const std::string& op, const std::vector<std::string>& names,
                            int64_t dirs) {
  const std::vector<std::string> one = op == "LSTM"
                                           ? std::vector<std::string>{"sigmoid", "tanh", "tanh"}
                                           : std::vector<std::string>{"sigmoid", "tanh"};
  const size_t k = one.size();
  bool ok = names.empty() || names.size() == k || names.size() == k * static_cast<size_t>(dirs);
  for (size_t i = 0; ok && i < names.size(); ++i) ok = names[i] == one[i % k];
  if (!ok)
    throw fail(op + ": activations other than the default (" +
               (op == "LSTM" ? "Sigmoid, Tanh, Tanh" : "Sigmoid, Tanh") + ") are not supported");
}

// A float32 input i of node n with shape `want`; `constant`: must be one.
void expect_input(ViewInfo& g, int n, size_t i, const Dims& want, bool constant,
                  const std::string& what) {
  const int v = g.in(n, i);
  if (v < 0) return;
  if (g.values[v].dtype != BP_DTYPE_FLOAT32) throw fail(what + " is not float32");
  if (constant && !g.is_const(v)) throw fail(what + " must be a constant");
  if (g.shape(v) != want) throw fail(what + " does not have the shape the other inputs imply");
}

}  // namespace

RnnSpec rnn_spec(ViewInfo& g, int n) {
  sdk::NodeRef node = g.node(n);
  const std::string op(g.op(n));
  RnnSpec s;
  s.lstm = op == "LSTM";
  s.gru = op == "GRU";
  s.linear_before_reset = s.gru && node.attr_int("linear_before_reset", 0) != 0;
  if (!g.shapes_known()) throw fail(op + " in a shape-polymorphic partition is not supported");
  if (node.attr_int("layout", 0) != 0) throw fail(op + ": layout=1 (batch-major) is not supported");
  if (node.has_attr("clip")) throw fail(op + ": clip is not supported");
  if (node.has_attr("activation_alpha") || node.has_attr("activation_beta"))
    throw fail(op + ": activation_alpha/activation_beta are not supported");
  if (s.lstm && node.attr_int("input_forget", 0) != 0)
    throw fail("LSTM: input_forget=1 is not supported");
  const std::string dir = node.attr_string("direction", "forward");
  if (dir == "reverse") s.direction = dnnl::rnn_direction::unidirectional_right2left;
  else if (dir == "bidirectional") s.direction = dnnl::rnn_direction::bidirectional_concat;
  else if (dir != "forward") throw fail(op + ": direction '" + dir + "' is not supported");
  s.dirs = dir == "bidirectional" ? 2 : 1;
  const int x = g.in(n, 0), w = g.in(n, 1), r = g.in(n, 2);
  if (x < 0 || w < 0 || r < 0) throw fail(op + ": X, W and R are required");
  if (g.values[x].dtype != BP_DTYPE_FLOAT32) throw fail(op + ": X is not float32");
  const Dims& xs = g.shape(x);
  const Dims& rs = g.shape(r);
  if (xs.size() != 3 || rs.size() != 3) throw fail(op + ": X and R must have rank 3");
  s.seq = xs[0];
  s.batch = xs[1];
  s.input = xs[2];
  s.hidden = rs[2];
  if (s.seq < 1 || s.batch < 1 || s.input < 1 || s.hidden < 1) throw fail(op + ": empty tensor");
  if (node.attr_int("hidden_size", s.hidden) != s.hidden)
    throw fail(op + ": hidden_size does not match R");
  const int64_t gh = s.gates() * s.hidden;
  const std::vector<std::string> acts = rnn_activations(g, n);
  if (s.lstm || s.gru) check_gate_activations(op, acts, s.dirs);
  else s.activation = rnn_activation(acts, s.dirs);
  expect_input(g, n, 1, {s.dirs, gh, s.input}, true, op + ": W");
  expect_input(g, n, 2, {s.dirs, gh, s.hidden}, true, op + ": R");
  expect_input(g, n, 3, {s.dirs, 2 * gh}, true, op + ": B");
  expect_input(g, n, 5, {s.dirs, s.batch, s.hidden}, false, op + ": initial_h");
  if (s.lstm) {
    expect_input(g, n, 6, {s.dirs, s.batch, s.hidden}, false, "LSTM: initial_c");
    expect_input(g, n, 7, {s.dirs, 3 * s.hidden}, true, "LSTM: P");
  } else if (g.num_in(n) > 6) {
    throw fail(op + ": more than 6 inputs");
  }
  if (const int lens = g.in(n, 4); lens >= 0) {
    if (!g.is_const(lens)) throw fail(op + ": sequence_lens must be a constant");
    const std::optional<std::vector<int64_t>> v = g.ints(lens);
    if (!v || static_cast<int64_t>(v->size()) != s.batch)
      throw fail(op + ": sequence_lens must hold one int32 per batch entry");
    for (int64_t len : *v)
      if (len != s.seq)
        throw fail(op + ": sequence_lens shorter than the sequence are not supported");
  }
  const Dims state = {s.dirs, s.batch, s.hidden};
  const std::vector<Dims> outs = {{s.seq, s.dirs, s.batch, s.hidden}, state, state};
  if (g.num_out(n) > (s.lstm ? 3u : 2u)) throw fail(op + ": too many outputs");
  for (size_t i = 0; i < g.num_out(n); ++i) {
    const int y = g.out(n, i);
    if (y < 0) continue;
    if (g.values[y].dtype != BP_DTYPE_FLOAT32) throw fail(op + ": an output is not float32");
    if (g.shape(y) != outs[i]) throw fail(op + ": output shapes do not match the inputs");
  }
  return s;
}

QuantSpec quant_spec(ViewInfo& g, int n) {
  sdk::NodeRef node = g.node(n);
  QuantSpec q;
  q.dequantize = g.op(n) == "DequantizeLinear";
  const int x = g.in(n, 0), y = g.out(n);
  if (x < 0 || y < 0 || g.num_in(n) < 2 || g.in(n, 1) < 0) throw fail("x or its scale is missing");
  const bp_dtype_t xt = g.values[x].dtype, yt = g.values[y].dtype;
  q.quantized = q.dequantize ? xt : yt;
  if (q.quantized != BP_DTYPE_UINT8 && q.quantized != BP_DTYPE_INT8 &&
      !(q.dequantize && q.quantized == BP_DTYPE_INT32))
    throw fail(std::string(q.dequantize ? "x" : "y") + " is " + sdk::dtype_name(q.quantized) +
               (q.dequantize ? " (only uint8, int8 and int32 are supported)"
                             : " (only uint8 and int8 are supported)"));
  if ((q.dequantize ? yt : xt) != BP_DTYPE_FLOAT32)
    throw fail(std::string(q.dequantize ? "y" : "x") + " is not float32");
  if (node.attr_int("block_size", 0) != 0) throw fail("blocked quantization is not supported");
  for (int v : {x, y})
    if (g.shapes_known() && sdk::element_count(g.shape(v)) == 0)
      throw fail("an empty tensor is not supported");
  const int s = g.in(n, 1), z = g.num_in(n) > 2 ? g.in(n, 2) : -1;
  if (!g.is_const(s) || g.values[s].dtype != BP_DTYPE_FLOAT32)
    throw fail("the scale must be a float32 constant");
  if (z >= 0 && !g.is_const(z)) throw fail("the zero point must be a constant");
  const Dims& ss = g.shape(s);
  const int64_t count = sdk::element_count(ss);
  const float* sv = g.f32(s);
  q.scales.assign(sv, sv + count);
  if (count != 1 || ss.size() > 1) {
    // Per axis (opset 13): the ranks and lengths were checked at load.
    const int64_t rank = static_cast<int64_t>(g.shape(x).size());
    int64_t axis = node.attr_int("axis", 1);
    if (axis < 0) axis += rank;
    if (ss.size() != 1 || axis < 0 || axis >= rank ||
        (g.shapes_known() && g.shape(x)[axis] != count))
      throw fail("the scale does not have one value per index along the axis");
    q.axis = axis;
  }
  if (z >= 0) {
    if (g.values[z].dtype != q.quantized || sdk::element_count(g.shape(z)) != count)
      throw fail("the zero point does not match the scale and the quantized type");
    const void* zd = g.data(z);
    for (int64_t i = 0; i < count; ++i) {
      const int32_t v = q.quantized == BP_DTYPE_UINT8  ? static_cast<const uint8_t*>(zd)[i]
                        : q.quantized == BP_DTYPE_INT8 ? static_cast<const int8_t*>(zd)[i]
                                                       : static_cast<const int32_t*>(zd)[i];
      if (i > 0 && v != q.zero_point)
        throw fail("per-axis zero points that differ are not supported (oneDNN takes one)");
      q.zero_point = v;
    }
  }
  if (q.quantized == BP_DTYPE_INT32 && q.zero_point != 0)
    throw fail("an int32 input needs a zero point of 0");
  return q;
}

namespace {

// The operator-specific checks: node n, its first input's shape xs, its output y.
using OpCheck = void (*)(ViewInfo& g, int n, const Dims& xs, int y);

void check_conv(ViewInfo& g, int n, const Dims& xs, int y) {
  if (xs.size() < 3 || xs.size() > 5)
    throw fail("only 1-D, 2-D and 3-D convolutions are supported");
  if (!g.is_const(g.in(n, 1))) throw fail("the weights must be a constant");
  if (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !g.is_const(g.in(n, 2)))
    throw fail("the bias must be a constant");
  const Dims& ws = g.shape(g.in(n, 1));
  (void)window(g, n, xs, g.shape(y), Dims(ws.begin() + 2, ws.end()));
}

void check_conv_transpose(ViewInfo& g, int n, const Dims& xs, int y) {
  if (xs.size() < 3 || xs.size() > 5)
    throw fail("only 1-D, 2-D and 3-D transposed convolutions are supported");
  if (!g.is_const(g.in(n, 1))) throw fail("the weights must be a constant");
  if (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !g.is_const(g.in(n, 2)))
    throw fail("the bias must be a constant");
  const Dims& ws = g.shape(g.in(n, 1));
  const int64_t group = g.node(n).attr_int("group", 1);
  if (ws.size() != xs.size() || group < 1 || ws[0] % group != 0 || xs[1] != ws[0])
    throw fail("the weights do not fit the input and group");
  (void)deconv_window(g, n, xs, g.shape(y), Dims(ws.begin() + 2, ws.end()));
}

void check_gemm(ViewInfo& g, int n, const Dims&, int y) {
  if (g.node(n).attr_int("transA", 0) != 0) throw fail("Gemm with transA=1 is not supported");
  if (!g.is_const(g.in(n, 1))) throw fail("Gemm with a non-constant B is not supported");
  // The output's columns, from B (a constant: known even when y's dims are not).
  const Dims& bs = g.shape(g.in(n, 1));
  if (bs.size() != 2) throw fail("Gemm's B must have 2 dims");
  const int64_t nout = g.node(n).attr_int("transB", 0) != 0 ? bs[0] : bs[1];
  (void)y;
  if (g.num_in(n) > 2 && g.in(n, 2) >= 0 &&
      (!g.is_const(g.in(n, 2)) || sdk::element_count(g.shape(g.in(n, 2))) != nout))
    throw fail("Gemm's C must be a constant with one value per output column");
}

void check_matmul(ViewInfo& g, int n, const Dims& xs, int y) {
  if (xs.size() < 2 || g.shape(g.in(n, 1)).size() < 2)
    throw fail("MatMul of 1-D operands is not supported");
  if (g.shape(y).size() > 6) throw fail("MatMul of rank > 6 is not supported");
}

void check_pool(ViewInfo& g, int n, const Dims& xs, int y) {
  sdk::NodeRef node = g.node(n);
  if (xs.size() < 3 || xs.size() > 5) throw fail("only 1-D, 2-D and 3-D pooling is supported");
  if (node.attr_int("storage_order", 0) != 0) throw fail("storage_order=1 is not supported");
  Window w = window(g, n, xs, g.shape(y), node.attr_ints("kernel_shape"));
  // The padding ceil_mode adds depends on the shapes; without them (a
  // shape-polymorphic compile) each run's lowering checks it.
  if (g.op(n) == "AveragePool" && node.attr_int("count_include_pad", 0) != 0 && g.shapes_known()) {
    std::vector<int64_t> pads =
        node.attr_ints("pads", std::vector<int64_t>(2 * (xs.size() - 2), 0));
    for (size_t i = 0; i < w.pad_r.size(); ++i)
      if (w.pad_r[i] > pads[w.pad_r.size() + i])
        throw fail("AveragePool with count_include_pad=1 and ceil_mode padding is not supported");
  }
}

void check_global_pool(ViewInfo&, int, const Dims& xs, int) {
  if (xs.size() < 3 || xs.size() > 5) throw fail("only 1-D, 2-D and 3-D pooling is supported");
}

void check_batch_norm(ViewInfo& g, int n, const Dims& xs, int) {
  if (g.node(n).attr_int("training_mode", 0) != 0) throw fail("training_mode=1 is not supported");
  for (size_t i = 1; i < 5; ++i)
    if (!g.is_const(g.in(n, i))) throw fail("scale, bias, mean and variance must be constants");
  if (xs.size() < 2) throw fail("input of rank < 2");
}

void check_layer_norm(ViewInfo& g, int n, const Dims& xs, int) {
  const int64_t axis = g.node(n).attr_int("axis", -1);
  if (axis != -1 && axis != static_cast<int64_t>(xs.size()) - 1)
    throw fail("LayerNormalization over more than the last axis is not supported");
  if (!g.is_const(g.in(n, 1)) || (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !g.is_const(g.in(n, 2))))
    throw fail("scale and bias must be constants");
}

void check_softmax(ViewInfo& g, int n, const Dims& xs, int) {
  sdk::NodeRef node = g.node(n);
  const int64_t rank = static_cast<int64_t>(xs.size());
  const int64_t axis = node.attr_int("axis", node.opset() >= 13 ? -1 : 1);
  if (node.opset() < 13 && axis != -1 && axis != rank - 1)
    throw fail("Softmax before opset 13 is supported only over the last axis");
}

void check_concat(ViewInfo& g, int n, const Dims&, int y) {
  for (size_t i = 0; i < g.num_in(n); ++i)
    if (g.in(n, i) < 0 || g.shape(g.in(n, i)).size() != g.shape(y).size())
      throw fail("inputs of different rank");
}

void check_reduce(ViewInfo& g, int n, const Dims&, int) {
  // Axes come from an attribute or a constant input; none means every axis.
  if (g.num_in(n) > 1 && g.in(n, 1) >= 0 && !g.is_const(g.in(n, 1)))
    throw fail("the axes must be a constant");
  if (g.node(n).attr_int("noop_with_empty_axes", 0) != 0)
    throw fail("noop_with_empty_axes=1 is not supported");
}

// oneDNN's binary broadcasts only its second operand; a constant scalar
// operand becomes an eltwise (linear, or pow for c / x) instead. Which operand
// broadcasts is known only with the shapes: a shape-polymorphic compile
// leaves this check to the lowering of each run.
void check_binary(ViewInfo& g, int n, const Dims&, int y) {
  if (!g.shapes_known()) return;
  const std::string_view op = g.op(n);
  const Dims& ys = g.shape(y);
  const bool a_full = pads_to(g.shape(g.in(n, 0)), ys);
  const bool b_full = pads_to(g.shape(g.in(n, 1)), ys);
  const bool commutative = op == "Add" || op == "Mul" || op == "Max" || op == "Min";
  const bool a_const_scalar = g.scalar(g.in(n, 0)).has_value() && (op == "Sub" || op == "Div");
  if (!a_full && !b_full) throw fail("broadcasting both operands is not supported");
  if (!a_full && !commutative && !a_const_scalar)
    throw fail("broadcasting the first operand of " + std::string(op) + " is not supported");
  // A broadcast oneDNN has only a reference kernel for stays with CpuRef. An
  // instance of a shape-polymorphic partition has no backend to hand it to:
  // its lowering takes the backend's own loop or, last, that reference kernel.
  const int other = g.in(n, a_full ? 1 : 0);
  if (g.instance || pads_to(g.shape(other), ys) || g.scalar(other)) return;
  const Dims bs = left_pad(g.shape(other), ys.size());
  if (const std::string why = binary_kernel_problem(std::string(op), ys, bs); !why.empty())
    throw fail(why);
}

void check_pow(ViewInfo& g, int n, const Dims&, int) {
  if (!g.scalar(g.in(n, 1))) throw fail("Pow is supported only with a constant scalar exponent");
}

void check_clip(ViewInfo& g, int n, const Dims&, int) {
  for (size_t i = 1; i < g.num_in(n); ++i)
    if (g.in(n, i) >= 0 && !g.scalar(g.in(n, i)))
      throw fail("Clip bounds must be constant scalars");
}

void check_gelu(ViewInfo& g, int n, const Dims&, int) {
  const std::string approx = g.node(n).attr_string("approximate", "none");
  if (approx != "none" && approx != "tanh")
    throw fail("Gelu approximate='" + approx + "' is not supported");
}

void check_transpose(ViewInfo& g, int n, const Dims& xs, int) {
  std::vector<int64_t> perm = g.node(n).attr_ints("perm", {});
  if (!perm.empty() && perm.size() != xs.size()) throw fail("perm does not match the input rank");
}

// ---- data movement (Slice, Split, Pad, Gather) and PRelu -------------

// The constant int64 input i of node n (absent: nullopt), or a failure naming it.
std::optional<std::vector<int64_t>> const_ints(ViewInfo& g, int n, size_t i, const char* what) {
  const int v = g.in(n, i);
  if (v < 0) return std::nullopt;
  if (!g.is_const(v)) throw fail(std::string(what) + " must be a constant");
  std::optional<std::vector<int64_t>> k = g.ints(v);
  if (!k) throw fail(std::string(what) + " must be int32/int64");
  return k;
}

void check_slice(ViewInfo& g, int n, const Dims&, int) {
  if (g.node(n).opset() < 10) throw fail("Slice before opset 10 is not supported");
  const auto starts = const_ints(g, n, 1, "starts"), ends = const_ints(g, n, 2, "ends");
  const auto axes = const_ints(g, n, 3, "axes"), steps = const_ints(g, n, 4, "steps");
  if (!starts || !ends || starts->size() != ends->size()) throw fail("starts/ends do not match");
  if (axes && axes->size() != starts->size()) throw fail("axes do not match starts");
  if (steps)
    for (int64_t s : *steps)
      if (s < 1) throw fail("Slice with a step below 1 is not supported");
  if (steps && steps->size() != starts->size()) throw fail("steps do not match starts");
}

void check_split(ViewInfo& g, int n, const Dims&, int) {
  if (g.node(n).opset() >= 13) (void)const_ints(g, n, 1, "split");
  for (size_t i = 0; i < g.num_out(n); ++i) {
    const int y = g.out(n, i);
    if (y < 0 || g.values[y].dtype != BP_DTYPE_FLOAT32) throw fail("an output is not float32");
    if (g.shapes_known() && sdk::element_count(g.shape(y)) == 0) throw fail("an output is empty");
  }
}

void check_pad(ViewInfo& g, int n, const Dims&, int) {
  sdk::NodeRef node = g.node(n);
  if (node.attr_string("mode", "constant") != "constant")
    throw fail("Pad mode '" + node.attr_string("mode", "constant") + "' is not supported");
  if (node.opset() >= 11) {
    if (!const_ints(g, n, 1, "pads")) throw fail("pads are missing");
    if (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !g.scalar(g.in(n, 2)))
      throw fail("the pad value must be a float32 constant scalar");
    (void)const_ints(g, n, 3, "axes");
  }
}

void check_gather(ViewInfo& g, int n, const Dims& xs, int) {
  const int indices = g.in(n, 1);
  if (indices < 0) throw fail("indices are missing");
  const int64_t axis = g.node(n).attr_int("axis", 0);
  const int64_t r = static_cast<int64_t>(xs.size());
  if (axis < -r || axis >= r) throw fail("axis out of range");
  if (!g.is_const(indices)) {
    // Indices of the run: a gather step (compiled.hpp) reads them where the
    // caller put them (no node CpuOneDnn runs makes integers, so they always
    // come from outside its partition).
    const bp_dtype_t t = g.values[indices].dtype;
    if (t != BP_DTYPE_INT64 && t != BP_DTYPE_INT32) throw fail("indices are not int64 or int32");
    if (g.shapes_known() && sdk::element_count(g.shape(indices)) == 0)
      throw fail("indices are empty");
    return;
  }
  const auto idx = const_ints(g, n, 1, "indices");
  if (!idx) throw fail("indices are missing");
  const size_t rank = g.shape(g.in(n, 1)).size();
  if (rank > 1) throw fail("Gather with indices of rank > 1 is not supported");
  if (idx->size() > 64) throw fail("Gather of more than 64 indices is not supported");
}

// GatherBlockQuantized as the import keeps it (ir/ops_nn.cpp's schema has
// checked the sizes): a 4-bit table, its scales and zero points constants of
// the partition, indices of the run (steps::Gather with a block).
void check_gather_block_quantized(ViewInfo& g, int n, const Dims&, int y) {
  sdk::NodeRef node = g.node(n);
  const int64_t block = node.attr_int("block_size", 128);
  if (node.attr_int("bits", 4) != 4 || node.attr_int("gather_axis", 0) != 0 ||
      node.attr_int("quantize_axis", 1) != 1 || block < 16 || (block & (block - 1)) != 0 ||
      g.num_in(n) < 3)
    throw fail("GatherBlockQuantized other than a 4-bit table gathered on axis 0");
  const int table = g.in(n, 0), indices = g.in(n, 1);
  if (table < 0 || indices < 0 || !g.is_const(table) || g.values[table].dtype != BP_DTYPE_UINT8 ||
      g.shape(table).size() != 2)
    throw fail("the table is not a uint8 constant [rows, width / 2]");
  const int64_t rows = g.shape(table)[0], blocks = (2 * g.shape(table)[1] + block - 1) / block;
  const bp_dtype_t t = g.values[indices].dtype;
  if (t != BP_DTYPE_INT64 && t != BP_DTYPE_INT32) throw fail("indices are not int64 or int32");
  const Dims want[] = {{}, {}, {rows, blocks}, {rows, (blocks + 1) / 2}};
  const bp_dtype_t type[] = {BP_DTYPE_UNDEFINED, BP_DTYPE_UNDEFINED, BP_DTYPE_FLOAT32,
                             BP_DTYPE_UINT8};
  for (size_t i = 2; i < std::min<size_t>(g.num_in(n), 4); ++i) {
    const int v = g.in(n, i);
    if (v >= 0 && (!g.is_const(v) || g.values[v].dtype != type[i] || g.shape(v) != want[i]))
      throw fail("input '" + g.value_name(v) +
                 "' is not a constant of the type and shape GatherBlockQuantized takes here");
  }
  if (g.values[y].dtype != BP_DTYPE_FLOAT32) throw fail("output is not float32");
}

// MatMulNBits as the import keeps it (ir/ops_nn.cpp's schema has checked
// the sizes): float32 A, its 4-bit weights, scales, zero points and bias
// constants of the partition (steps::NBitsMatMul reads them in place).
void check_matmul_nbits(ViewInfo& g, int n, const Dims& xs, int y) {
  sdk::NodeRef node = g.node(n);
  const int64_t k = node.attr_int("K", 0), block = node.attr_int("block_size", 0);
  if (node.attr_int("bits", 4) != 4 || block < 16 || (block & (block - 1)) != 0 ||
      (g.num_in(n) > 4 && g.in(n, 4) >= 0))
    throw fail("MatMulNBits other than 4 bits in blocks of a power of 2, without g_idx");
  if (g.shapes_known() && (xs.empty() || xs.back() != k)) throw fail("A does not end in K");
  const int64_t cols = node.attr_int("N", 0), blocks = k < 1 ? 0 : (k + block - 1) / block;
  if (k < 1 || cols < 1 || g.num_in(n) < 3) throw fail("MatMulNBits needs K, N, B and scales");
  // What the loop reads of each: the weights, scales, zero points and bias.
  const bp_dtype_t want[] = {BP_DTYPE_FLOAT32, BP_DTYPE_UINT8,     BP_DTYPE_FLOAT32,
                             BP_DTYPE_UINT8,   BP_DTYPE_UNDEFINED, BP_DTYPE_FLOAT32};
  const int64_t size[] = {
      0, cols * blocks * block / 2, cols * blocks, cols * ((blocks + 1) / 2), 0, cols};
  for (size_t i = 1; i < std::min<size_t>(g.num_in(n), 6); ++i) {
    const int v = g.in(n, i);
    if (v < 0 || i == 4) continue;
    if (!g.is_const(v) || g.values[v].dtype != want[i] || sdk::element_count(g.shape(v)) != size[i])
      throw fail("input '" + g.value_name(v) +
                 "' is not a constant of the type and size "
                 "MatMulNBits takes here");
  }
  if (g.values[y].dtype != BP_DTYPE_FLOAT32) throw fail("output is not float32");
}

// Resize as oneDNN resampling: linear with half-pixel centres (its only
// linear), nearest where its rounding and ONNX's asymmetric floor agree
// (whole upscaling factors); the size ratio is the scale oneDNN uses.
void check_resize(ViewInfo& g, int n, const Dims& xs, int y) {
  sdk::NodeRef node = g.node(n);
  if (node.opset() < 11) throw fail("Resize before opset 11 is not supported");
  const std::string mode = node.attr_string("mode", "nearest");
  const std::string ctm = node.attr_string("coordinate_transformation_mode", "half_pixel");
  if (node.attr_int("antialias", 0) != 0 || !node.attr_ints("axes", {}).empty())
    throw fail("Resize with antialias or axes is not supported");
  const bool linear = mode == "linear" && (ctm == "half_pixel" || ctm == "pytorch_half_pixel");
  const bool nearest = mode == "nearest" && ctm == "asymmetric" &&
                       node.attr_string("nearest_mode", "round_prefer_floor") == "floor";
  if (!linear && !nearest)
    throw fail("Resize mode '" + mode + "' with coordinate_transformation_mode '" + ctm +
               "' is not supported (linear with half_pixel, nearest asymmetric floor)");
  if (xs.size() < 3 || xs.size() > 5) throw fail("only 1-D, 2-D and 3-D resizing is supported");
  const int scales = g.in(n, 2), sizes = g.in(n, 3);
  if (sizes >= 0 ? !g.is_const(sizes)
                 : scales < 0 || !g.is_const(scales) || g.values[scales].dtype != BP_DTYPE_FLOAT32)
    throw fail("the scales or sizes must be constants");
  if (!g.shapes_known()) return;
  const Dims& ys = g.shape(y);
  if (ys.size() != xs.size() || ys[0] != xs[0] || ys[1] != xs[1])
    throw fail("resizing the batch or channel dims is not supported");
  for (size_t i = 2; i < xs.size(); ++i) {
    if (nearest && ys[i] % xs[i] != 0)
      throw fail("nearest Resize by a factor that is not a whole number is not supported");
    if (ctm == "pytorch_half_pixel" && ys[i] == 1)
      throw fail("pytorch_half_pixel Resize to a length of 1 is not supported");
    if (sizes < 0) {
      const float s = g.f32(scales)[i];
      if (static_cast<double>(s) * static_cast<double>(xs[i]) != static_cast<double>(ys[i]))
        throw fail("Resize scales that are not the ratio of the sizes are not supported");
    }
  }
}

void check_quant(ViewInfo& g, int n, const Dims&, int) { (void)quant_spec(g, n); }

void check_prelu(ViewInfo& g, int n, const Dims& xs, int) {
  const int s = g.in(n, 1);
  if (!g.is_const(s)) throw fail("PRelu's slope must be a constant");
  if (g.shape(s).size() > xs.size()) throw fail("slope of higher rank than the input");
}

// The operator-specific check of each operator that has one.
const std::map<std::string_view, OpCheck>& op_checks() {
  static const std::map<std::string_view, OpCheck> checks = [] {
    std::map<std::string_view, OpCheck> m = {{"Conv", check_conv},
                                             {"ConvTranspose", check_conv_transpose},
                                             {"Gemm", check_gemm},
                                             {"MatMul", check_matmul},
                                             {"MaxPool", check_pool},
                                             {"AveragePool", check_pool},
                                             {"GlobalAveragePool", check_global_pool},
                                             {"GlobalMaxPool", check_global_pool},
                                             {"BatchNormalization", check_batch_norm},
                                             {"LayerNormalization", check_layer_norm},
                                             {"Softmax", check_softmax},
                                             {"Concat", check_concat},
                                             {"ReduceMean", check_reduce},
                                             {"ReduceSum", check_reduce},
                                             {"ReduceMax", check_reduce},
                                             {"Pow", check_pow},
                                             {"Clip", check_clip},
                                             {"Gelu", check_gelu},
                                             {"Transpose", check_transpose},
                                             {"Slice", check_slice},
                                             {"Split", check_split},
                                             {"Pad", check_pad},
                                             {"Gather", check_gather},
                                             {"MatMulNBits", check_matmul_nbits},
                                             {"GatherBlockQuantized", check_gather_block_quantized},
                                             {"PRelu", check_prelu},
                                             {"Resize", check_resize},
                                             {"QuantizeLinear", check_quant},
                                             {"DequantizeLinear", check_quant}};
    for (std::string_view op : binary_ops()) m.emplace(op, check_binary);
    return m;
  }();
  return checks;
}

// The domain, and whether CpuOneDnn knows the operator at all.
void check_known(ViewInfo& g, int n) {
  sdk::NodeRef node = g.node(n);
  const std::string_view op = g.op(n);
  if (!node.domain().empty() && node.domain() != "ai.onnx" &&
      !((op == "Gelu" || op == "MatMulNBits" || op == "GatherBlockQuantized") &&
        node.domain() == "com.microsoft"))
    throw fail("domain '" + std::string(node.domain()) + "' is not supported");
  const bool known = op_checks().count(op) || eltwise_ops().count(op) || view_ops().count(op) ||
                     activation_ops().count(op) || op == "Erf" || op == "LSTM" || op == "GRU" ||
                     op == "RNN";
  if (!known) throw fail("operator '" + std::string(op) + "' is not implemented by CpuOneDnn");
  // Binary primitives take exactly two operands (Max/Min/Sum are variadic in ONNX).
  if (binary_ops().count(op) && g.num_in(n) != 2)
    throw fail(std::string(op) + " with " + std::to_string(g.num_in(n)) +
               " inputs is not supported (only 2)");
}

// Dropout is an identity only in inference: a training_mode input that is
// not a constant false (or any ratio-dependent mask) is not for this backend.
// Exporters keep Dropout(ratio=0, training_mode=true) (Swin's attention):
// with nothing dropped and a scale of 1 / (1 - 0) it is the identity too.
bool dropout_ratio_zero(ViewInfo& g, int n) {
  if (g.num_in(n) < 2 || g.in(n, 1) < 0) return false;  // the default ratio is 0.5
  const std::optional<float> ratio = g.scalar(g.in(n, 1));
  return ratio && *ratio == 0.f;
}

void check_dropout(ViewInfo& g, int n) {
  if (g.num_in(n) > 2 && g.in(n, 2) >= 0 && !dropout_ratio_zero(g, n)) {
    const int t = g.in(n, 2);
    const void* c = g.is_const(t) && g.values[t].dtype == BP_DTYPE_BOOL ? g.data(t) : nullptr;
    if (c == nullptr || *static_cast<const uint8_t*>(c) != 0)
      throw fail(
          "Dropout with a training_mode that is not a constant false (and a ratio not 0) is not "
          "supported");
  }
  if (g.node(n).attr_int("is_test", 1) == 0)
    throw fail("Dropout in training mode (is_test=0) is not supported");
}

// Data tensors are float32 and not empty; shape/axes inputs of view ops may be
// integers. One output, float32 (optional outputs nobody reads are fine).
void check_tensors(ViewInfo& g, int n) {
  const std::string_view op = g.op(n);
  if (op == "LSTM" || op == "GRU" || op == "RNN")
    return (void)rnn_spec(g, n);                                   // also sequence_lens, outputs
  if (op == "QuantizeLinear" || op == "DequantizeLinear") return;  // quant_spec: every dtype
  if (op == "GatherBlockQuantized") {  // check_gather_block_quantized: the table's types
    if (g.shapes_known() && sdk::element_count(g.shape(g.out(n))) == 0)
      throw fail("output is empty");
    return;
  }
  if (op == "MatMulNBits") {  // check_matmul_nbits: the weights' types
    const int a = g.in(n, 0);
    if (a < 0 || g.values[a].dtype != BP_DTYPE_FLOAT32) throw fail("A is not float32");
    if (g.shapes_known() && sdk::element_count(g.shape(g.out(n))) == 0)
      throw fail("output is empty");
    return;
  }
  // MaxPool and the operators that move values take int8 and uint8 as they
  // are (the integers compared or moved, the type kept): ONNX Runtime's
  // QOperator models pool and flatten their quantized tensors so.
  const bool moves = op == "MaxPool" || (view_ops().count(op) && op != "Cast" && op != "Dropout");
  const int x0 = g.num_in(n) > 0 ? g.in(n, 0) : -1, y0 = g.out(n);
  if (moves && x0 >= 0 && y0 >= 0 && g.values[x0].dtype == g.values[y0].dtype &&
      (g.values[x0].dtype == BP_DTYPE_INT8 || g.values[x0].dtype == BP_DTYPE_UINT8)) {
    if (sdk::element_count(g.shape(y0)) == 0) throw fail("output is empty");
    for (size_t i = 1; i < g.num_out(n); ++i)
      if (g.used(g.out(n, i)))
        throw fail("optional output " + std::to_string(i) + " is not supported");
    return;
  }
  // A Cast of integers to float32 (an attention mask's) is a reorder.
  if (op == "Cast" && x0 >= 0 && y0 >= 0 && g.values[y0].dtype == BP_DTYPE_FLOAT32 &&
      (g.values[x0].dtype == BP_DTYPE_INT32 || g.values[x0].dtype == BP_DTYPE_INT8 ||
       g.values[x0].dtype == BP_DTYPE_UINT8)) {
    if (sdk::element_count(g.shape(y0)) == 0) throw fail("output is empty");
    return;
  }
  const size_t data_inputs =
      view_ops().count(op) || op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" ? 1
      : op == "Clip" || data_movement_ops().count(op)                                      ? 1
                                                      : g.num_in(n);
  for (size_t i = 0; i < std::min(data_inputs, g.num_in(n)); ++i) {
    const int v = g.in(n, i);
    if (v < 0) continue;
    if (g.values[v].dtype != BP_DTYPE_FLOAT32)
      throw fail("input '" + g.value_name(v) + "' is " +
                 (g.values[v].dtype == BP_DTYPE_INT64 ? "int64" : "not float32") +
                 " (only float32 is supported)");
    // A Concat of plain tensors is copied by the backend itself, empty ones
    // too (a decoder's first step has an empty key/value cache).
    if (sdk::element_count(g.shape(v)) == 0 && op != "Concat")
      throw fail("input '" + g.value_name(v) + "' is empty");
  }
  if (op == "Split") return;  // every output checked by check_split
  const int y = g.out(n);
  if (y < 0 || g.values[y].dtype != BP_DTYPE_FLOAT32) throw fail("output is not float32");
  if (sdk::element_count(g.shape(y)) == 0) throw fail("output is empty");
  for (size_t i = 1; i < g.num_out(n); ++i)
    if (g.used(g.out(n, i)))
      throw fail("optional output " + std::to_string(i) + " is not supported");
}

}  // namespace

void check_node(ViewInfo& g, int n) {
  if (g.node_checked.size() != g.num_nodes()) g.node_checked.assign(g.num_nodes(), false);
  if (g.node_checked[n]) return;
  check_known(g, n);
  if (g.op(n) == "Dropout") check_dropout(g, n);
  check_tensors(g, n);
  auto it = op_checks().find(g.op(n));
  if (it != op_checks().end()) it->second(g, n, g.shape(g.in(n, 0)), g.out(n));
  g.node_checked[n] = true;
}

}  // namespace backplane::onednn
