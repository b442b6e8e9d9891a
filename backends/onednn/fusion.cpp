// fusion.cpp — from view nodes to internal nodes: patterns replace their
// nodes, BatchNormalization folds into Conv, and the single-consumer chain
// after each Conv/Gemm/MatMul becomes its post-ops.
#include "onednn/fusion.hpp"

#include "onednn/patterns.hpp"
#include "onednn/support.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>

namespace backplane::onednn {
namespace {

using dnnl::algorithm;

constexpr float kInf = std::numeric_limits<float>::infinity();

// One INode per view node, as it is.
std::vector<INode> view_nodes(const ViewInfo& g) {
  std::vector<INode> nodes(g.num_nodes());
  for (size_t n = 0; n < nodes.size(); ++n) {
    INode& in = nodes[n];
    in.op = std::string(g.op(static_cast<int>(n)));
    in.node = static_cast<int>(n);
    in.covers = {static_cast<int>(n)};
    const bp_node_t& raw = g.view().nodes[n];
    in.in.assign(raw.inputs, raw.inputs + raw.num_inputs);
    in.out = g.out(static_cast<int>(n));
    // A DequantizeLinear of constants is a constant (ViewInfo::dequantized).
    in.dead = in.out >= 0 && g.values[in.out].dequantized;
  }
  return nodes;
}

// Each pattern becomes one INode at the place of its last node.
void replace_patterns(ViewInfo& g, std::vector<INode>& nodes) {
  for (Pattern& p : find_patterns(g)) {
    const int last = *std::max_element(p.nodes.begin(), p.nodes.end());
    for (int k : p.nodes) nodes[k].dead = true;
    INode& in = nodes[last];
    in = INode{};
    in.op = p.op;
    in.node = *std::min_element(p.nodes.begin(), p.nodes.end());
    in.covers = p.nodes;
    // A HardSwish reads x alone, as the operator does.
    in.in = p.op == "HardSwish" ? std::vector<int>{p.x} : std::vector<int>{p.x, p.gamma, p.beta};
    in.out = p.out;
    in.eps = p.eps;
    in.alpha = p.alpha;
  }
}

// Who reads each value among the live `nodes`, into `consumers` (whose
// vectors are reused: fusion asks again after it changed the nodes).
void live_consumers(const ViewInfo& g, const std::vector<INode>& nodes,
                    std::vector<std::vector<int>>& consumers) {
  consumers.resize(g.values.size());
  for (std::vector<int>& c : consumers) c.clear();
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].dead) continue;
    for (int v : nodes[n].in)
      if (v >= 0 && (consumers[v].empty() || consumers[v].back() != static_cast<int>(n)))
        consumers[v].push_back(static_cast<int>(n));
  }
}

// Appends `more` to the post-op chain `post` if oneDNN runs the result as
// written; false (and `post` unchanged) if not. oneDNN 2.6's JIT kernels
// make one eltwise injector per algorithm for a primitive's post-ops, so a
// second eltwise post-op of an algorithm already in the chain runs with the
// first one's alpha and beta: Mul(c) then Add(d) after a convolution would
// compute c * (c * x) instead of c * x + d. A chain therefore holds each
// algorithm once, or again only with the same parameters; a linear step
// right after a linear step composes into it (a2 * (a1 * x + b1) + b2).
bool append_post_ops(std::vector<PostOp>& post, const std::vector<PostOp>& more) {
  std::vector<PostOp> chain = post;
  for (PostOp p : more) {
    if (p.kind != PostOp::kEltwise) {
      chain.push_back(p);
      continue;
    }
    const bool compose = !chain.empty() && chain.back().kind == PostOp::kEltwise &&
                         chain.back().alg == algorithm::eltwise_linear &&
                         p.alg == algorithm::eltwise_linear;
    if (compose) {
      const PostOp last = chain.back();
      chain.pop_back();
      p.beta = p.alpha * last.beta + p.beta;
      p.alpha = p.alpha * last.alpha;
    }
    // The composed step too: Selu, Selu, Sub is elu, linear(g), elu, and
    // linear(g) composed with the Sub, which differs from the first linear.
    for (const PostOp& q : chain)
      if (q.kind == PostOp::kEltwise && q.alg == p.alg && (q.alpha != p.alpha || q.beta != p.beta))
        return false;
    chain.push_back(p);
  }
  post = std::move(chain);
  return true;
}

// Folds y = alpha * conv(x) + beta into Conv m's weights and bias when it is
// the first thing after the convolution (no post-ops yet) and the weights
// are float constants. oneDNN 2.6 takes one eltwise_linear per post-op chain
// (append_post_ops), and exporters write affine steps on both sides of an
// activation (PP-LCNet's learnable affine blocks around its HardSwish): the
// one before it costs nothing in the weights, and the one after it can then
// be a post-op. False if m is not such a Conv.
bool fold_linear(ViewInfo& g, INode& m, float alpha, float beta) {
  if (m.op != "Conv" || !m.post.empty() || m.quant || m.in.size() < 2 || !g.is_const(m.in[1]) ||
      g.values[m.in[1]].dtype != BP_DTYPE_FLOAT32)
    return false;
  if (m.in.size() > 2 && m.in[2] >= 0 &&
      (!g.is_const(m.in[2]) || g.values[m.in[2]].dtype != BP_DTYPE_FLOAT32))
    return false;
  if (g.shape(m.in[1]).empty()) return false;
  if (!m.fold) m.fold = INode::Fold();
  INode::Fold& fold = *m.fold;
  fold.beta = alpha * fold.beta + beta;
  fold.alpha *= alpha;
  return true;
}

// Fuses follower f (reading `cur`, the main node m's result so far) into m,
// if it can be: as a post-op (an activation, scalar arithmetic, or the one
// residual Add: sum_used), or as MatMul's bias. False if it cannot.
bool join_follower(ViewInfo& g, INode& m, const INode& f, int cur, bool& sum_used) {
  if (f.in.empty() || f.in[0] != cur) {
    if (!binary_ops().count(f.op)) return false;
  }
  if (!binary_ops().count(f.op)) {
    if (f.in.size() > 1 && f.op != "Clip" && f.op != "Pow" && f.op != "GeluErf" && f.op != "Swish")
      return false;
    std::optional<std::vector<PostOp>> p = activation_of(g, f);
    return p && append_post_ops(m.post, *p);
  }
  if (f.op == "Max" || f.op == "Min") return false;
  const int other = (f.in[0] == cur) ? f.in[1] : f.in[0];
  if (f.in[0] == f.in[1]) return false;
  if (std::optional<PostOp> p = linear_of(g, f, cur)) {
    if (p->alg == algorithm::eltwise_linear && fold_linear(g, m, p->alpha, p->beta)) return true;
    return append_post_ops(m.post, {*p});
  }
  if (m.op == "MatMul" && m.post.empty() && m.bias_value < 0 && f.op == "Add" &&
      g.is_const(other) && sdk::element_count(g.shape(other)) == g.shape(cur).back() &&
      g.shape(other).back() == g.shape(cur).back() &&
      g.shape(other).size() <= g.shape(cur).size()) {
    m.bias_value = other;
    return true;
  }
  if (f.op == "Add" && !sum_used && !g.is_const(other) && g.shape(other) == g.shape(cur) &&
      g.shape(f.out) == g.shape(cur)) {
    PostOp s;
    s.kind = PostOp::kSum;
    s.residual = other;
    m.post.push_back(s);
    sum_used = true;
    return true;
  }
  return false;
}

// Absorbs the single-consumer chain after main node n: bias (MatMul), one
// residual Add (sum post-op), activations and scalar arithmetic.
void build_group(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  int cur = m.out;
  bool sum_used = false;
  while (true) {
    const int k = f.only_consumer(g, cur);
    if (k < 0 || f.nodes[k].dead || f.nodes[k].group >= 0) break;
    INode& follower = f.nodes[k];
    if (follower.op != "GeluErf" && follower.op != "Swish") {
      try {
        check_node(g, follower.node);
      } catch (const sdk::Error&) {
        break;
      }
    }
    if (!join_follower(g, m, follower, cur, sum_used)) break;
    follower.group = n;
    cur = follower.out;
    m.out = cur;
    m.anchor = k;
  }
}

// The Relu alone reading BatchNormalization node n's output (DenseNet's
// pre-activation BN-ReLU before each convolution, on the concatenated
// features): oneDNN's batch normalization applies it in the same pass
// (fuse_norm_relu), not in a pass of its own over the tensor.
void absorb_relu(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const int k = f.only_consumer(g, m.out);
  if (k < 0 || f.nodes[k].dead || f.nodes[k].group >= 0 || f.nodes[k].op != "Relu" ||
      f.nodes[k].in.empty() || f.nodes[k].in[0] != m.out)
    return;
  try {
    check_node(g, f.nodes[k].node);
  } catch (const sdk::Error&) {
    return;
  }
  PostOp relu;
  relu.alg = algorithm::eltwise_relu;
  m.post.push_back(relu);
  f.nodes[k].group = n;
  m.out = f.nodes[k].out;
  m.anchor = k;
}

// The Concat along the channels that alone feeds BatchNormalization node n
// (DenseNet: every layer normalizes the concatenation of all the block's
// features so far, each time anew). The two become one pass: each input is
// normalized straight into its window of the output, so the concatenation
// is never written (lowering: lower_concat_norm).
void absorb_concat(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const int x = m.in.empty() ? -1 : m.in[0];
  int c = -1;
  for (size_t k = 0; k < f.nodes.size() && c < 0 && x >= 0; ++k)
    if (!f.nodes[k].dead && f.nodes[k].out == x) c = static_cast<int>(k);
  if (c < 0 || f.nodes[c].op != "Concat" || f.nodes[c].group >= 0 || f.only_consumer(g, x) != n)
    return;
  const INode& cat = f.nodes[c];
  const int64_t rank = static_cast<int64_t>(g.shape(x).size());
  try {
    check_node(g, m.node);
    check_node(g, cat.node);
    int64_t axis = g.node(cat.node).attr_int("axis", 0);
    if (axis < 0) axis += rank;
    if (rank < 3 || axis != 1) return;
  } catch (const sdk::Error&) {
    return;
  }
  for (int v : cat.in)
    if (v < 0 || g.values[v].dtype != BP_DTYPE_FLOAT32) return;
  f.nodes[c].group = n;
  m.concat = c;
}

// Folds the BatchNormalization that alone reads Conv node `n`'s output into
// the Conv's weights and bias at compile time, when both nodes are supported
// (inference: the statistics are constants), so the pair runs as one
// convolution.
void fold_batch_norm(ViewInfo& g, FusedGraph& fused, int n) {
  INode& conv = fused.nodes[n];
  const int bn = fused.only_consumer(g, conv.out);
  if (bn < 0 || fused.nodes[bn].op != "BatchNormalization" || fused.nodes[bn].in[0] != conv.out)
    return;
  try {
    check_node(g, bn);
    check_node(g, n);
  } catch (const sdk::Error&) {
    return;
  }
  const INode& b = fused.nodes[bn];
  conv.fold = INode::Fold{bn};
  conv.out = b.out;
  conv.covers.insert(conv.covers.end(), b.covers.begin(), b.covers.end());
  fused.nodes[bn].dead = true;
}

// An explicit Pad of zeros before a Conv, or before an AveragePool that
// counts padded cells (PyTorch's avg_pool2d(padding=1) exports as Pad +
// AveragePool: Inception's pooling branches), is the consumer's own
// padding: no padded copy of the tensor (a concat per padded axis) and no
// reorders around it. Only where oneDNN takes the padding: at most the
// kernel's extent - 1 per side.
void fold_pad(ViewInfo& g, FusedGraph& f, int pad) {
  INode& p = f.nodes[pad];
  const int k = f.only_consumer(g, p.out);
  if (k < 0 || p.in.empty() || p.in[0] < 0) return;
  INode& c = f.nodes[k];
  if (c.dead || (c.op != "Conv" && c.op != "AveragePool") || c.in.empty() || c.in[0] != p.out ||
      !c.pad_before.empty())
    return;
  PadSpec spec;
  try {
    check_node(g, p.node);
    check_node(g, c.node);
    spec = pad_spec(g, p.node, g.shape(p.in[0]).size());
  } catch (const sdk::Error&) {
    return;
  }
  const size_t rank = spec.before.size();
  if (spec.value != 0.f || rank < 3) return;
  for (size_t a = 0; a < rank; ++a)
    if (spec.before[a] < 0 || spec.after[a] < 0 || (a < 2 && (spec.before[a] || spec.after[a])))
      return;
  sdk::NodeRef node = g.node(c.node);
  if (node.attr_string("auto_pad", "NOTSET") != "NOTSET") return;
  const size_t sp = rank - 2;
  const std::vector<int64_t> own = node.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  Dims kernel;
  if (c.op == "Conv") {
    const Dims& ws = g.shape(c.in[1]);
    kernel.assign(ws.begin() + 2, ws.end());
  } else {
    kernel = node.attr_ints("kernel_shape", {});
    const bool own_pads = std::any_of(own.begin(), own.end(), [](int64_t x) { return x != 0; });
    if (node.attr_int("count_include_pad", 0) == 0 && own_pads) return;
    if (node.attr_int("ceil_mode", 0) != 0) return;  // cells past the end are not padding
  }
  const std::vector<int64_t> dil = node.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  if (kernel.size() != sp || own.size() != 2 * sp || dil.size() != sp) return;
  for (size_t i = 0; i < sp; ++i) {
    const int64_t ext = (kernel[i] - 1) * dil[i] + 1;
    if (own[i] + spec.before[i + 2] > ext - 1 || own[sp + i] + spec.after[i + 2] > ext - 1) return;
  }
  c.pad_before.assign(spec.before.begin() + 2, spec.before.end());
  c.in[0] = p.in[0];
  c.covers.insert(c.covers.end(), p.covers.begin(), p.covers.end());
  p.dead = true;
  // The Pad's input is read where the consumer runs now.
  std::vector<int>& readers = f.consumers[p.in[0]];
  readers.erase(std::remove(readers.begin(), readers.end(), pad), readers.end());
  if (std::find(readers.begin(), readers.end(), k) == readers.end()) readers.push_back(k);
}

// Records why INode n is no int8 group (the first reason given stays), for
// the notes of the plan (quant_notes); returns false.
bool refuse(FusedGraph& f, int n, std::string why) {
  f.why.emplace(n, std::move(why));
  return false;
}

// The live DequantizeLinear INode producing `v` with one scale for the
// tensor (or one per index along `axis`, when axis >= 0 is given), and its
// spec; -1 if `v` has no such producer.
int dequantizer(ViewInfo& g, const FusedGraph& f, int v, int64_t axis, QuantSpec* spec) {
  if (v < 0) return -1;
  const int p = g.values[v].producer;
  if (p < 0 || (f.nodes[p].dead && !g.values[v].dequantized) || f.nodes[p].group >= 0 ||
      f.nodes[p].op != "DequantizeLinear")
    return -1;
  try {
    check_node(g, p);
    *spec = quant_spec(g, p);
  } catch (const sdk::Error&) {
    return -1;
  }
  if (spec->axis >= 0 && spec->axis != axis) return -1;
  return p;
}

// The INode after `v` in a chain: its only reader, live, not in a group,
// reading it first, and supported here; -1 if none.
int next_in_chain(ViewInfo& g, const FusedGraph& f, int v) {
  const int k = f.only_consumer(g, v);
  if (k < 0 || f.nodes[k].dead || f.nodes[k].group >= 0 || f.nodes[k].in.empty() ||
      f.nodes[k].in[0] != v || f.nodes[k].op == "GeluErf" || f.nodes[k].op == "Swish" ||
      f.nodes[k].op == "LayerNorm")
    return -1;
  try {
    check_node(g, f.nodes[k].node);
  } catch (const sdk::Error&) {
    return -1;
  }
  return k;
}

// True if view node n is a QuantizeLinear or DequantizeLinear to or from
// uint8/int8 with one scale for the tensor (*spec).
bool per_tensor_spec(ViewInfo& g, int n, QuantSpec* spec) {
  try {
    *spec = quant_spec(g, n);
  } catch (const sdk::Error&) {
    return false;
  }
  return spec->axis < 0 && spec->quantized != BP_DTYPE_INT32;
}

// After QuantizeLinear INode `quantize` (spec yq): DequantizeLinear (the
// same scale and zero point), one or more Relu/Clip, QuantizeLinear of one
// scale, each alone reading the one before: those INodes from the
// DequantizeLinear on, or none.
std::vector<int> requantized_activation(ViewInfo& g, const FusedGraph& f, int quantize,
                                        const QuantSpec& yq) {
  const int d = next_in_chain(g, f, f.nodes[quantize].out);
  QuantSpec dq;
  if (d < 0 || f.nodes[d].op != "DequantizeLinear" || !per_tensor_spec(g, f.nodes[d].node, &dq) ||
      dq.scales != yq.scales || dq.zero_point != yq.zero_point || dq.quantized != yq.quantized)
    return {};
  std::vector<int> chain = {d};
  int cur = f.nodes[d].out;
  while (true) {
    const int k = next_in_chain(g, f, cur);
    if (k < 0) return {};
    const std::string& op = f.nodes[k].op;
    chain.push_back(k);
    if (op == "QuantizeLinear") {
      QuantSpec zq;
      if (chain.size() < 3 || !per_tensor_spec(g, f.nodes[k].node, &zq)) return {};
      return chain;
    }
    if (op != "Relu" && op != "Clip") return {};
    for (size_t i = 1; op == "Clip" && i < f.nodes[k].in.size(); ++i)
      if (f.nodes[k].in[i] >= 0 && !g.scalar(f.nodes[k].in[i])) return {};
    cur = f.nodes[k].out;
  }
}

// The post-ops that make a quantized result (scale and zero point of `yq`)
// from the float one divided by yq's scale: y + zero point; or, with
// `act` (requantized_activation: DequantizeLinear, Relu/Clip...,
// QuantizeLinear), round (the first quantization), clamp to its type's
// range and the activations', both in those units less its zero point,
// then scale to the second quantization's units and add its zero point.
std::optional<std::vector<PostOp>> quantized_tail(ViewInfo& g, const FusedGraph& f,
                                                  const std::vector<int>& act,
                                                  const QuantSpec& yq) {
  const float scale = yq.scales[0], zero = static_cast<float>(yq.zero_point);
  PostOp to_int;
  to_int.alg = algorithm::eltwise_linear;
  if (act.empty()) {
    to_int.alpha = 1.f;
    to_int.beta = zero;
    return std::vector<PostOp>{to_int};
  }
  const bool u8 = yq.quantized == BP_DTYPE_UINT8;
  float lo = (u8 ? 0.f : -128.f) - zero, hi = (u8 ? 255.f : 127.f) - zero;
  for (size_t i = 1; i + 1 < act.size(); ++i) {  // act[0] is the DequantizeLinear
    const std::optional<PostOp> a = eltwise_of(g, f.nodes[act[i]]);
    if (!a) return std::nullopt;
    const bool relu = a->alg == algorithm::eltwise_relu;
    lo = std::max(lo, (relu ? 0.f : a->alpha) / scale);
    hi = std::min(hi, (relu ? kInf : a->beta) / scale);
  }
  QuantSpec zq;
  if (!per_tensor_spec(g, f.nodes[act.back()].node, &zq)) return std::nullopt;
  PostOp round, clamp;
  round.alg = algorithm::eltwise_round;
  clamp.alg = algorithm::eltwise_clip;
  clamp.alpha = lo;
  clamp.beta = std::max(lo, hi);
  to_int.alpha = scale / zq.scales[0];
  to_int.beta = static_cast<float>(zq.zero_point);
  return std::vector<PostOp>{round, clamp, to_int};
}

// The quantized result of an int8 group whose float result is `value`:
// the QuantizeLinear (of one scale) reached from it through activations
// (only if `float_acts`), and, where that result is dequantized only to go
// through Relu/Clip and be quantized again, those too. Sets q's output
// fields, the post-ops that make the group's int8 result from its float
// one divided by q.out_scale, and the INodes it absorbs (`chain`).
bool quantized_output(ViewInfo& g, const FusedGraph& f, int value, bool float_acts, QuantGroup& q,
                      std::vector<PostOp>& post, std::vector<int>& chain, std::string* why) {
  // Activations up to the QuantizeLinear.
  int cur = value;
  QuantSpec yq;
  while (true) {
    const int k = next_in_chain(g, f, cur);
    if (k < 0) {
      *why = "its result does not go to one QuantizeLinear that alone reads it";
      return false;
    }
    const INode& follower = f.nodes[k];
    chain.push_back(k);
    if (follower.op == "QuantizeLinear") {
      if (per_tensor_spec(g, follower.node, &yq)) break;
      *why = "its QuantizeLinear has more than one scale";
      return false;
    }
    std::optional<std::vector<PostOp>> p;
    if (float_acts && (follower.in.size() == 1 || follower.op == "Clip"))
      p = activation_of(g, follower);
    if (!p || !append_post_ops(post, *p)) {
      *why = "the " + follower.op + " between it and its QuantizeLinear is not a post-op it takes";
      return false;
    }
    cur = follower.out;
  }
  q.y_scale = yq.scales[0];
  q.y_zero = yq.zero_point;
  PostOp to_int;
  to_int.alg = algorithm::eltwise_linear;
  if (!post.empty()) {
    // The activations on the float product, then y / y_scale + y_zero.
    to_int.alpha = 1.f / q.y_scale;
    to_int.beta = static_cast<float>(q.y_zero);
    if (!append_post_ops(post, {to_int})) {
      *why = "its activations and quantization do not compose as post-ops";
      return false;
    }
  } else {
    // The product in units of y_scale, and where the quantized result is
    // dequantized again only to go through Relu/Clip and be quantized once
    // more (a quantizer's QDQ pair around each activation), those steps too.
    q.out_scale = 1.f / q.y_scale;
    const std::vector<int> act = requantized_activation(g, f, chain.back(), yq);
    std::optional<std::vector<PostOp>> tail = quantized_tail(g, f, act, yq);
    if (!tail) {
      *why = "the activations after its QuantizeLinear are not post-ops it takes";
      return false;
    }
    post = std::move(*tail);
    chain.insert(chain.end(), act.begin(), act.end());
  }
  return true;
}

// Makes INode n the int8 group q whose post-ops are `post`, absorbing `chain`.
void commit_group(FusedGraph& f, int n, std::shared_ptr<QuantGroup> q, std::vector<PostOp> post,
                  const std::vector<int>& chain) {
  INode& m = f.nodes[n];
  for (int k : chain) f.nodes[k].group = n;
  m.post = std::move(post);
  m.out = f.nodes[chain.back()].out;
  m.anchor = chain.back();
  m.quant = std::move(q);
}

// Makes Add INode n an int8 group: both operands dequantized int8 of one
// scale each and the same shape as the result, which is quantized.
bool quantize_add(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  if (m.op != "Add" || m.in.size() != 2 || m.in[0] == m.in[1] || m.in[0] < 0 || m.in[1] < 0)
    return false;
  if (g.shape(m.in[0]) != g.shape(m.out) || g.shape(m.in[1]) != g.shape(m.out))
    return refuse(f, n, "an operand is broadcast (an int8 Add takes two of the result's shape)");
  try {
    check_node(g, m.node);
  } catch (const sdk::Error&) {
    return false;
  }
  QuantSpec aq, bq;
  const int da = dequantizer(g, f, m.in[0], -1, &aq);
  const int db = dequantizer(g, f, m.in[1], -1, &bq);
  if (da < 0 || db < 0 || g.values[m.in[0]].dequantized || g.values[m.in[1]].dequantized ||
      aq.quantized == BP_DTYPE_INT32 || bq.quantized == BP_DTYPE_INT32)
    return refuse(f, n, "an operand is not a uint8/int8 tensor dequantized with one scale");
  auto q = std::make_shared<QuantGroup>();
  q->x = f.nodes[da].in[0];
  q->x_scale = aq.scales[0];
  q->x_zero = aq.zero_point;
  q->x2 = f.nodes[db].in[0];
  q->x2_scale = bq.scales[0];
  q->x2_zero = bq.zero_point;
  q->dequantize = {da, db};
  std::vector<PostOp> post;
  std::vector<int> chain;
  std::string why;
  if (!quantized_output(g, f, m.out, false, *q, post, chain, &why)) return refuse(f, n, why);
  commit_group(f, n, q, std::move(post), chain);
  return true;
}

// Makes Mul INode n an int8 group: x * s with both dequantized int8 of one
// scale, s broadcast along some dims of x (a squeeze-and-excitation's
// channel weights) with a zero point of 0, quantized. x_scale * x_s_scale *
// (x - x_zero) * s, one binary pass (Lowering::lower_qmul).
bool quantize_mul(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  if (m.op != "Mul" || m.in.size() != 2 || m.in[0] < 0 || m.in[1] < 0 || m.in[0] == m.in[1])
    return false;
  try {
    check_node(g, m.node);
  } catch (const sdk::Error&) {
    return false;
  }
  const Dims& ys = g.shape(m.out);
  int a = m.in[0], b = m.in[1];
  if (g.shape(a) != ys) std::swap(a, b);
  const Dims& bs = g.shape(b);
  const char* shapes =
      "its operands are not a tensor and one broadcast along some of its dims (an int8 Mul "
      "scales a tensor, as squeeze-and-excitation does)";
  if (g.shape(a) != ys || bs == ys || bs.size() > ys.size()) return refuse(f, n, shapes);
  const Dims padded = left_pad(bs, ys.size());
  for (size_t i = 0; i < ys.size(); ++i)
    if (padded[i] != 1 && padded[i] != ys[i]) return refuse(f, n, shapes);
  QuantSpec aq, bq;
  const int da = dequantizer(g, f, a, -1, &aq), db = dequantizer(g, f, b, -1, &bq);
  if (da < 0 || db < 0 || g.values[a].dequantized || g.values[b].dequantized ||
      aq.quantized == BP_DTYPE_INT32 || bq.quantized == BP_DTYPE_INT32)
    return refuse(f, n, "an operand is not a uint8/int8 tensor dequantized with one scale");
  if (bq.zero_point != 0) return refuse(f, n, "the broadcast operand's zero point is not 0");
  auto q = std::make_shared<QuantGroup>();
  q->x = f.nodes[da].in[0];
  q->x_scale = aq.scales[0];
  q->x_zero = aq.zero_point;
  q->x2 = f.nodes[db].in[0];
  q->x2_scale = bq.scales[0];
  q->dequantize = {da, db};
  std::vector<PostOp> tail;
  std::vector<int> chain;
  std::string why;
  if (!quantized_output(g, f, m.out, false, *q, tail, chain, &why)) return refuse(f, n, why);
  PostOp scale;
  scale.alg = algorithm::eltwise_linear;
  scale.alpha = q->x_scale * q->x2_scale * q->out_scale;
  std::vector<PostOp> post = {scale};
  if (!append_post_ops(post, tail)) return false;
  commit_group(f, n, q, std::move(post), chain);
  return true;
}

// Makes a pooling INode n an int8 group: the pooling of dequantized int8
// of one scale, quantized. The maximum commutes with dequantization: the
// pooling runs on the integers, and a reorder after it quantizes again
// where the scale or zero point changes. The average is linear in it: the
// pooling's post-op dequantizes its average and quantizes it again.
bool quantize_pool(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const bool max = m.op == "MaxPool" || m.op == "GlobalMaxPool";
  if ((!max && m.op != "AveragePool" && m.op != "GlobalAveragePool") || m.in.empty() ||
      m.in[0] < 0 || !m.pad_before.empty() || g.num_out(m.node) != 1)
    return false;
  try {
    check_node(g, m.node);
  } catch (const sdk::Error&) {
    return false;
  }
  QuantSpec xq;
  const int dx = dequantizer(g, f, m.in[0], -1, &xq);
  if (dx < 0 || g.values[m.in[0]].dequantized || xq.quantized == BP_DTYPE_INT32)
    return refuse(f, n, "its input is not a uint8/int8 tensor dequantized with one scale");
  if (m.op == "AveragePool" && xq.zero_point != 0 &&
      g.node(m.node).attr_int("count_include_pad", 0) != 0) {
    // oneDNN pads the integers with 0, ONNX the dequantized values.
    const std::vector<int64_t> pads = g.node(m.node).attr_ints("pads", {});
    if (std::any_of(pads.begin(), pads.end(), [](int64_t p) { return p != 0; }))
      return refuse(f, n, "it counts padding, and its input's zero point is not 0");
  }
  auto q = std::make_shared<QuantGroup>();
  q->x = f.nodes[dx].in[0];
  q->x_scale = xq.scales[0];
  q->x_zero = xq.zero_point;
  q->dequantize = {dx};
  std::vector<PostOp> tail;
  std::vector<int> chain;
  std::string why;
  if (!quantized_output(g, f, m.out, false, *q, tail, chain, &why)) return refuse(f, n, why);
  if (max) {
    if (chain.size() != 1) return refuse(f, n, "activations come before its QuantizeLinear");
    commit_group(f, n, q, {}, chain);
    return true;
  }
  PostOp deq;
  deq.alg = algorithm::eltwise_linear;
  deq.alpha = q->x_scale * q->out_scale;
  deq.beta = -static_cast<float>(q->x_zero) * deq.alpha;
  std::vector<PostOp> post = {deq};
  if (!append_post_ops(post, tail)) return false;
  commit_group(f, n, q, std::move(post), chain);
  return true;
}

// Why dequantized weights (DequantizeLinear INode dw, spec wq, or -1) are
// not an int8 group's: constant int8 of zero point 0, one scale or one per
// output channel; nullptr if they are.
const char* weights_refusal(ViewInfo& g, const FusedGraph& f, int dw, const QuantSpec& wq) {
  if (dw < 0) return "its weights are not int8 dequantized with one scale, or one per channel";
  if (!g.is_const(f.nodes[dw].in[0])) return "its weights are computed at run time";
  if (wq.quantized != BP_DTYPE_INT8) return "its weights are not int8";
  if (wq.zero_point != 0) return "its weights' zero point is not 0";
  return nullptr;
}

// The DequantizeLinear (of one scale, uint8/int8, not of constants) whose
// result `v` is, directly or through one Flatten/Reshape/Squeeze/Unsqueeze
// (*reshape: that INode, else -1); -1 if none.
int dequantized_source(ViewInfo& g, const FusedGraph& f, int v, QuantSpec* spec, int* reshape) {
  *reshape = -1;
  if (v < 0 || g.values[v].dequantized) return -1;
  const int p = g.values[v].producer;
  const std::string& op = p >= 0 ? f.nodes[p].op : "";
  const bool reshape_op =
      op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
  if (reshape_op && !f.nodes[p].dead && f.nodes[p].group < 0 && !f.nodes[p].in.empty()) {
    const int u = f.nodes[p].in[0];
    if (u < 0 || g.values[u].dequantized) return -1;
    try {
      check_node(g, f.nodes[p].node);
    } catch (const sdk::Error&) {
      return -1;
    }
    const int d = dequantizer(g, f, u, -1, spec);
    if (d < 0 || spec->quantized == BP_DTYPE_INT32) return -1;
    *reshape = p;
    return d;
  }
  const int d = dequantizer(g, f, v, -1, spec);
  return d >= 0 && spec->quantized != BP_DTYPE_INT32 ? d : -1;
}

// Makes Gemm or MatMul INode n an int8 group: a product of a dequantized
// uint8/int8 activation (one scale) by dequantized constant int8 weights
// (zero point 0, one scale or one per output column), Gemm's bias float or
// dequantized int32, quantized after activations. Runs as a matmul of the
// activation's rows.
bool quantize_product(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  if ((m.op != "Gemm" && m.op != "MatMul") || m.in.size() < 2 || m.in[0] < 0 || m.in[1] < 0)
    return false;
  try {
    check_node(g, m.node);
  } catch (const sdk::Error&) {
    return false;
  }
  const Dims& ws = g.shape(m.in[1]);
  if (ws.size() != 2) return refuse(f, n, "its weights are not a 2-D constant");
  bool trans_b = false;
  if (m.op == "Gemm") {
    sdk::NodeRef node = g.node(m.node);
    if (node.attr_int("transA", 0) != 0 || node.attr_float("alpha", 1.f) != 1.f ||
        node.attr_float("beta", 1.f) != 1.f)
      return refuse(f, n, "it has transA, or alpha or beta other than 1");
    trans_b = node.attr_int("transB", 0) != 0;
  }
  const int64_t columns = trans_b ? ws[0] : ws[1];
  QuantSpec xq, wq;
  int reshape = -1;
  const int dx = dequantized_source(g, f, m.in[0], &xq, &reshape);
  const int dw = dequantizer(g, f, m.in[1], trans_b ? 0 : 1, &wq);
  if (dx < 0)
    return refuse(f, n, "its input is not a uint8/int8 tensor dequantized with one scale");
  if (const char* why = weights_refusal(g, f, dw, wq)) return refuse(f, n, why);
  auto q = std::make_shared<QuantGroup>();
  q->x = f.nodes[dx].in[0];
  q->x_scale = xq.scales[0];
  q->x_zero = xq.zero_point;
  q->w = f.nodes[dw].in[0];
  q->w_scales = wq.scales;
  q->trans_b = trans_b;
  q->x_shape = g.shape(m.in[0]);
  q->dequantize = {dw, dx};
  if (reshape >= 0) q->dequantize.insert(q->dequantize.begin(), reshape);
  auto w_scale = [&](int64_t c) { return q->w_scales[q->w_scales.size() == 1 ? 0 : c]; };
  const int b = m.in.size() > 2 ? m.in[2] : -1;
  if (b >= 0) {
    if (!g.is_const(b) || g.values[b].dtype != BP_DTYPE_FLOAT32 ||
        sdk::element_count(g.shape(b)) != columns)
      return refuse(f, n, "its bias is not one constant per column");
    const float* bv = g.f32(b);  // dequantized at compile time if it is int32
    q->bias.resize(static_cast<size_t>(columns));
    for (int64_t c = 0; c < columns; ++c) q->bias[c] = bv[c] / (q->x_scale * w_scale(c));
    const int db = g.values[b].producer;
    if (db >= 0 && g.values[b].dequantized) q->dequantize.push_back(db);
  }
  std::vector<PostOp> post;
  std::vector<int> chain;
  std::string why;
  if (!quantized_output(g, f, m.out, true, *q, post, chain, &why)) return refuse(f, n, why);
  commit_group(f, n, q, std::move(post), chain);
  return true;
}

// Makes MatMulInteger or ConvInteger INode n a product quantized at run time,
// as ONNX Runtime's dynamic quantizer writes it: DynamicQuantizeLinear(x) ->
// MatMulInteger/ConvInteger(x_q, w, x_zero_point, w_zero_point) ->
// Cast(float) -> Mul by (x_scale * w_scale), with w constant and w_scale
// constant (one, or one per output column or channel). The group reads x
// and writes the Mul's result, or that of a bias Add after it (a constant of
// one value per column or channel) and of the activations after that (a
// convolution's post-ops) (QuantGroup::dynamic).
// A matmul's weights are int8 of zero point 0 and it runs in int8. A
// convolution's weights may be uint8 of any zero point, which oneDNN's int8
// convolutions do not take: it runs in float on x's integers less their zero
// point and w's less theirs, exact while its sums stay within 2^24 as the
// int32 ones do, then times the scales as the Mul does.
bool dynamic_product(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const bool conv = m.op == "ConvInteger";
  if ((!conv && m.op != "MatMulInteger") || m.in.size() < 2 || m.in[0] < 0 || m.in[1] < 0)
    return false;
  const int w = m.in[1];
  const int x_zp = m.in.size() > 2 ? m.in[2] : -1, w_zp = m.in.size() > 3 ? m.in[3] : -1;
  const int d = g.values[m.in[0]].producer;
  if (d < 0 || f.nodes[d].dead || f.nodes[d].group >= 0 ||
      f.nodes[d].op != "DynamicQuantizeLinear" || g.num_out(d) != 3)
    return false;
  // The quantizer may be shared: ONNX Runtime's quantizer quantizes a tensor
  // once for all its products (a transformer's Q, K and V). Each group
  // quantizes x itself; the quantizer goes once nothing else reads it
  // (drop_dequantizers).
  const int xq = g.out(d, 0), xs = g.out(d, 1), xz = g.out(d, 2);
  if (xq != m.in[0] || (x_zp >= 0 && x_zp != xz)) return false;
  const bp_dtype_t wt = g.values[w].dtype;
  if (!g.is_const(w) || (wt != BP_DTYPE_INT8 && !(conv && wt == BP_DTYPE_UINT8))) return false;
  const Dims& wdims = g.shape(w);
  if (conv ? wdims.size() < 3 : wdims.size() != 2) return false;
  // Output columns (a matmul's) or channels (a convolution's), and the rank
  // a per-channel constant broadcasts from ([C, 1...] or [1, C, 1...]).
  const int64_t cols = conv ? wdims[0] : wdims[1];
  const Dims& ys = g.shape(m.out);
  auto per_column = [&](int v) {
    const Dims& s = g.shape(v);
    const int64_t count = sdk::element_count(s);
    if (count == 1) return true;
    if (count != cols || s.empty()) return false;
    if (!conv) return s.back() == cols;
    const size_t trailing = ys.size() - 2;  // the spatial axes after the channels'
    return s.size() > trailing && s.size() <= ys.size() && s[s.size() - trailing - 1] == cols;
  };
  std::vector<int32_t> w_zeros;
  if (w_zp >= 0) {
    if (!g.is_const(w_zp) || g.values[w_zp].dtype != wt) return false;
    const int64_t count = sdk::element_count(g.shape(w_zp));
    if (count != 1 && count != cols) return false;
    for (int64_t i = 0; i < count; ++i)
      w_zeros.push_back(wt == BP_DTYPE_UINT8 ? static_cast<const uint8_t*>(g.data(w_zp))[i]
                                             : static_cast<const int8_t*>(g.data(w_zp))[i]);
    if (!conv && std::any_of(w_zeros.begin(), w_zeros.end(), [](int32_t z) { return z != 0; }))
      return false;
  }
  // Cast to float, then Mul by the product of the scales.
  const int cast = g.only_consumer(m.out);
  if (cast < 0 || f.nodes[cast].op != "Cast" || f.nodes[cast].dead || f.nodes[cast].group >= 0 ||
      g.values[f.nodes[cast].out].dtype != BP_DTYPE_FLOAT32)
    return false;
  const int mul = g.only_consumer(f.nodes[cast].out);
  if (mul < 0 || f.nodes[mul].op != "Mul" || f.nodes[mul].dead || f.nodes[mul].group >= 0 ||
      f.nodes[mul].in.size() != 2)
    return false;
  const int prod =
      f.nodes[mul].in[0] == f.nodes[cast].out ? f.nodes[mul].in[1] : f.nodes[mul].in[0];
  const int p = prod >= 0 ? g.values[prod].producer : -1;
  if (p < 0 || f.nodes[p].op != "Mul" || f.nodes[p].dead || f.nodes[p].group >= 0 ||
      g.only_consumer(prod) != mul || f.nodes[p].in.size() != 2 ||
      (f.nodes[p].in[0] != xs && f.nodes[p].in[1] != xs))
    return false;
  const int ws = f.nodes[p].in[0] == xs ? f.nodes[p].in[1] : f.nodes[p].in[0];
  if (!g.is_const(ws) || g.values[ws].dtype != BP_DTYPE_FLOAT32 || !per_column(ws) ||
      !per_column(prod) || g.shape(f.nodes[mul].out) != ys)
    return false;
  // CpuOneDnn runs DynamicQuantizeLinear, MatMulInteger, ConvInteger and
  // Cast only so: no check_node for them, their types are checked here (and
  // x's inner dim where the view has it: a shape-polymorphic view has it
  // only when lowered), a convolution's attributes and window as a Conv's.
  const int x = f.nodes[d].in[0];
  const Dims& x_dims = g.shape(x);
  if (g.values[x].dtype != BP_DTYPE_FLOAT32 || g.values[xq].dtype != BP_DTYPE_UINT8 ||
      g.values[m.out].dtype != BP_DTYPE_INT32 || x_dims.empty())
    return false;
  if (!conv && x_dims.back() >= 0 && x_dims.back() != wdims[0]) return false;
  if (conv) {
    if (x_dims.size() != wdims.size() || ys.size() != wdims.size() ||
        std::any_of(x_dims.begin(), x_dims.end(), [](int64_t v) { return v < 0; }))
      return false;
    try {
      (void)window(g, m.node, x_dims, ys, Dims(wdims.begin() + 2, wdims.end()));
    } catch (const sdk::Error&) {
      return false;
    }
  }
  try {
    for (int k : {mul, p}) check_node(g, f.nodes[k].node);
  } catch (const sdk::Error&) {
    return false;
  }
  auto q = std::make_shared<QuantGroup>();
  q->dynamic = true;
  q->x = x;
  q->x_shape = x_dims;
  q->w = w;
  q->w_zeros = std::move(w_zeros);
  const float* wsv = g.f32(ws);
  q->w_scales.assign(wsv, wsv + sdk::element_count(g.shape(ws)));
  q->dequantize = {d};
  for (int k : {p, cast, mul}) f.nodes[k].group = n;
  m.out = f.nodes[mul].out;
  m.anchor = std::max(mul, p);
  // The bias Add after it (a constant of one value per column or channel).
  const int add = g.only_consumer(m.out);
  if (add >= 0 && f.nodes[add].op == "Add" && !f.nodes[add].dead && f.nodes[add].group < 0 &&
      f.nodes[add].in.size() == 2 && g.shape(f.nodes[add].out) == ys) {
    const int b = f.nodes[add].in[0] == m.out ? f.nodes[add].in[1] : f.nodes[add].in[0];
    if (g.is_const(b) && g.values[b].dtype == BP_DTYPE_FLOAT32 &&
        sdk::element_count(g.shape(b)) == cols && per_column(b)) {
      const float* bv = g.f32(b);
      q->bias.assign(bv, bv + cols);
      f.nodes[add].group = n;
      m.out = f.nodes[add].out;
      m.anchor = add;
    }
  }
  // A convolution's activations after it, as post-ops.
  for (int a = g.only_consumer(m.out); conv && a >= 0; a = g.only_consumer(m.out)) {
    INode& act = f.nodes[a];
    if (act.dead || act.group >= 0 || act.in.empty() || act.in[0] != m.out) break;
    std::optional<std::vector<PostOp>> chain = activation_of(g, act);
    if (!chain) break;
    try {
      check_node(g, act.node);
    } catch (const sdk::Error&) {
      break;
    }
    m.post.insert(m.post.end(), chain->begin(), chain->end());
    act.group = n;
    m.out = act.out;
    m.anchor = a;
  }
  m.quant = q;
  return true;
}

// ---- tables ------------------------------------------------------------------

// CpuRef's float arithmetic for the operators a table stands for
// (backends/reference: kernels_elementwise.cpp, kernels_quant.cpp).
float reference_sigmoid(float x) {
  if (x >= 0) return 1.f / (1.f + std::exp(-x));
  const float e = std::exp(x);
  return e / (1.f + e);
}

// What a node of a table computes, read once for the table's 256 bytes:
// its operator, its operands (a value the table computes, or a constant
// scalar) and its attributes.
struct TabStep {
  enum Kind {
    kDequantize,
    kQuantize,
    kSigmoid,
    kTanh,
    kRelu,
    kIdentity,
    kLeakyRelu,
    kHardSigmoid,
    kHardSwish,
    kClip,
    kAdd,
    kSub,
    kMul,
    kDiv
  } kind = kIdentity;
  int out = -1;
  int operand[2] = {-1, -1};       // values the table computes
  float constant[2] = {0.f, 0.f};  // the operand where it is a constant
  float a = 0.f, b = 0.f;          // alpha and beta; Clip's bounds
  QuantSpec q;                     // a QuantizeLinear's or DequantizeLinear's
};

// The operators a table may stand for (elementwise on float, one result).
const std::map<std::string, TabStep::Kind>& tab_kinds() {
  static const std::map<std::string, TabStep::Kind> kinds = {
      {"DequantizeLinear", TabStep::kDequantize},
      {"QuantizeLinear", TabStep::kQuantize},
      {"Sigmoid", TabStep::kSigmoid},
      {"Tanh", TabStep::kTanh},
      {"Relu", TabStep::kRelu},
      {"Identity", TabStep::kIdentity},
      {"LeakyRelu", TabStep::kLeakyRelu},
      {"HardSigmoid", TabStep::kHardSigmoid},
      {"HardSwish", TabStep::kHardSwish},
      {"Clip", TabStep::kClip},
      {"Add", TabStep::kAdd},
      {"Sub", TabStep::kSub},
      {"Mul", TabStep::kMul},
      {"Div", TabStep::kDiv}};
  return kinds;
}

bool tabulable(const std::string& op) { return tab_kinds().count(op) > 0; }

// Node k as a TabStep; nullopt if a table cannot compute it (an operand
// neither computed in the table, `computed`, nor a constant scalar).
std::optional<TabStep> tab_step(ViewInfo& g, const INode& k, const std::set<int>& computed) {
  const auto& kinds = tab_kinds();
  auto kind = kinds.find(k.op);
  if (kind == kinds.end()) return std::nullopt;
  TabStep t;
  t.kind = kind->second;
  t.out = k.out;
  const bool binary = t.kind >= TabStep::kAdd;
  for (size_t i = 0; i < (binary ? 2u : 1u); ++i) {
    if (i >= k.in.size() || k.in[i] < 0) return std::nullopt;
    if (computed.count(k.in[i])) {
      t.operand[i] = k.in[i];
      continue;
    }
    const std::optional<float> c = g.scalar(k.in[i]);
    if (!c) return std::nullopt;
    t.constant[i] = *c;
  }
  sdk::NodeRef node = g.node(k.node);
  switch (t.kind) {
    case TabStep::kDequantize:
    case TabStep::kQuantize:
      if (!per_tensor_spec(g, k.node, &t.q)) return std::nullopt;
      break;
    case TabStep::kLeakyRelu:
      t.a = node.attr_float("alpha", 0.01f);
      break;
    case TabStep::kHardSigmoid:
      t.a = node.attr_float("alpha", 0.2f);
      t.b = node.attr_float("beta", 0.5f);
      break;
    case TabStep::kClip:
      t.a = -kInf, t.b = kInf;
      if (node.opset() < 11) {
        t.a = node.attr_float("min", -kInf);
        t.b = node.attr_float("max", kInf);
        break;
      }
      for (size_t i = 1; i < 3; ++i) {
        if (k.in.size() <= i || k.in[i] < 0) continue;
        const std::optional<float> v = g.scalar(k.in[i]);
        if (!v) return std::nullopt;
        (i == 1 ? t.a : t.b) = *v;
      }
      break;
    default:
      break;
  }
  return t;
}

// Step t at operands x and y, as CpuRef computes it (an integer for the
// quantized values).
float tabulate(const TabStep& t, float x, float y) {
  switch (t.kind) {
    case TabStep::kDequantize:
      return (x - static_cast<float>(t.q.zero_point)) * t.q.scales[0];
    case TabStep::kQuantize: {
      const double lo = t.q.quantized == BP_DTYPE_INT8 ? -128.0 : 0.0;
      const double hi = t.q.quantized == BP_DTYPE_INT8 ? 127.0 : 255.0;
      const double v = static_cast<double>(x / t.q.scales[0]);
      const double r = std::isnan(v) ? 0.0 : std::nearbyint(v);
      return static_cast<float>(std::clamp(r + t.q.zero_point, lo, hi));
    }
    case TabStep::kSigmoid:
      return reference_sigmoid(x);
    case TabStep::kTanh:
      return std::tanh(x);
    case TabStep::kRelu:
      return x > 0 ? x : 0.f;
    case TabStep::kIdentity:
      return x;
    case TabStep::kLeakyRelu:
      return x >= 0 ? x : t.a * x;
    case TabStep::kHardSigmoid:
      return std::fmax(0.f, std::fmin(1.f, t.a * x + t.b));
    case TabStep::kHardSwish:
      return x * std::fmax(0.f, std::fmin(1.f, x / 6.f + 0.5f));
    case TabStep::kClip:
      return std::min(std::max(x, t.a), t.b);
    case TabStep::kAdd:
      return x + y;
    case TabStep::kSub:
      return x - y;
    case TabStep::kMul:
      return x * y;
    case TabStep::kDiv:
      return x / y;
  }
  return x;
}

// Makes QuantizeLinear INode n a table (QuantGroup::table) when what it
// quantizes is a function of one quantized tensor alone, elementwise:
// DequantizeLinear -> Sigmoid -> QuantizeLinear, or SiLU as a quantizer
// writes it, x * Q/DQ(sigmoid(x)) with x dequantized from one tensor. The
// 256 results are computed at compile time with CpuRef's arithmetic, so the table is
// exact; the group is one lookup per element.
bool table_group(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  QuantSpec yq;
  if (m.op != "QuantizeLinear" || !per_tensor_spec(g, m.node, &yq)) return false;
  std::set<int> region = {n}, sources_dq;
  std::vector<int> stack = {n};
  int source = -1;
  while (!stack.empty()) {
    const INode& k = f.nodes[stack.back()];
    stack.pop_back();
    const size_t operands = k.op == "QuantizeLinear" || k.op == "DequantizeLinear" ? 1 : 2;
    for (size_t i = 0; i < k.in.size() && i < operands; ++i) {
      const int v = k.in[i];
      if (v < 0 || g.is_const(v)) continue;
      const int p = g.values[v].producer;
      if (p < 0 || f.nodes[p].dead || f.nodes[p].group >= 0 || !tabulable(f.nodes[p].op))
        return false;
      if (region.count(p)) continue;
      if (g.shape(v) != g.shape(m.out)) return false;  // elementwise, no broadcast
      if (f.nodes[p].op == "DequantizeLinear") {
        QuantSpec dq;
        if (!per_tensor_spec(g, f.nodes[p].node, &dq) || g.values[v].dequantized) return false;
        const int q = f.nodes[p].in[0];
        const int qp = g.values[q].producer;
        const bool inner = qp >= 0 && !f.nodes[qp].dead && f.nodes[qp].group < 0 &&
                           f.nodes[qp].op == "QuantizeLinear" && !f.nodes[qp].in.empty() &&
                           f.nodes[qp].in[0] >= 0 && g.values[f.nodes[qp].in[0]].producer >= 0 &&
                           f.nodes[g.values[f.nodes[qp].in[0]].producer].op != "DequantizeLinear" &&
                           tabulable(f.nodes[g.values[f.nodes[qp].in[0]].producer].op);
        region.insert(p);
        if (inner) {
          if (!region.count(qp)) {
            region.insert(qp);
            stack.push_back(qp);
          }
        } else {
          if (source >= 0 && source != q) return false;
          source = q;
          sources_dq.insert(p);
        }
        continue;
      }
      region.insert(p);
      stack.push_back(p);
    }
    if (region.size() > 12) return false;
  }
  if (source < 0) return false;
  const bp_dtype_t st = g.values[source].dtype;
  if (st != BP_DTYPE_UINT8 && st != BP_DTYPE_INT8) return false;
  bool computes = false;
  for (int k : region) {
    const std::string& op = f.nodes[k].op;
    computes = computes || (op != "QuantizeLinear" && op != "DequantizeLinear" && op != "Identity");
    if (k == n) continue;
    // Nothing outside reads what the region computes (but its sources).
    const int v = f.nodes[k].out;
    if (g.values[v].output && !sources_dq.count(k)) return false;
    for (int c : f.consumers[v])
      if (!region.count(c) && !sources_dq.count(k)) return false;
    if (g.num_out(f.nodes[k].node) != 1) return false;
  }
  if (!computes) return false;
  // The region's nodes in the view's order (topological), read once for
  // the 256 bytes; computed[v]: the slot of value v's result.
  std::set<int> computed = {source};
  std::vector<TabStep> steps;
  for (int k : region) {
    std::optional<TabStep> t = tab_step(g, f.nodes[k], computed);
    if (!t) return false;
    steps.push_back(*t);
    computed.insert(t->out);
  }
  std::map<int, size_t> slot;
  slot[source] = 0;
  for (size_t i = 0; i < steps.size(); ++i) slot[steps[i].out] = i + 1;
  auto at = [&](int v) { return v < 0 ? SIZE_MAX : slot.at(v); };
  std::vector<std::array<size_t, 2>> reads;
  for (const TabStep& t : steps) reads.push_back({at(t.operand[0]), at(t.operand[1])});
  const size_t result = slot.at(m.out);
  std::vector<uint8_t> table(256);
  std::vector<float> val(steps.size() + 1);
  for (int byte = 0; byte < 256; ++byte) {
    val[0] = st == BP_DTYPE_INT8 ? static_cast<float>(static_cast<int8_t>(byte))
                                 : static_cast<float>(byte);
    for (size_t i = 0; i < steps.size(); ++i) {
      const TabStep& t = steps[i];
      const float x = reads[i][0] == SIZE_MAX ? t.constant[0] : val[reads[i][0]];
      const float y = reads[i][1] == SIZE_MAX ? t.constant[1] : val[reads[i][1]];
      val[i + 1] = tabulate(t, x, y);
    }
    const float y = val[result];
    table[static_cast<size_t>(byte)] = yq.quantized == BP_DTYPE_INT8
                                           ? static_cast<uint8_t>(static_cast<int8_t>(y))
                                           : static_cast<uint8_t>(y);
  }
  auto q = std::make_shared<QuantGroup>();
  q->x = source;
  q->table = std::move(table);
  // The table stands for the region: its nodes go (their reads of the
  // source's DequantizeLinear with them), their view nodes are the table's.
  for (int k : region) {
    if (k == n) continue;
    if (sources_dq.count(k)) {
      q->dequantize.push_back(k);
      continue;
    }
    f.nodes[k].dead = true;
    m.covers.insert(m.covers.end(), f.nodes[k].covers.begin(), f.nodes[k].covers.end());
  }
  m.anchor = n;
  m.quant = q;
  return true;
}

// Makes QLinearConv or QLinearMatMul INode n an int8 group: the operator is
// the group (constant scales and zero points; weights as a Conv's or
// MatMul's in a QDQ group; QLinearConv's bias int32 in accumulator units),
// and a DequantizeLinear -> Relu/Clip -> QuantizeLinear after it joins it
// as after a QDQ group.
bool qlinear_group(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const bool conv = m.op == "QLinearConv";
  if ((!conv && m.op != "QLinearMatMul") || m.in.size() < 8 || m.out < 0) return false;
  for (size_t i = 0; i < 8; ++i)
    if (m.in[i] < 0 && i != 2 && i != 5 && i != 7) return false;
  const int x = m.in[0], w = m.in[3];
  const bp_dtype_t xt = g.values[x].dtype, yt = g.values[m.out].dtype;
  const bool q8 = (xt == BP_DTYPE_UINT8 || xt == BP_DTYPE_INT8) &&
                  (yt == BP_DTYPE_UINT8 || yt == BP_DTYPE_INT8);
  if (!q8 || !g.is_const(w) || g.values[w].dtype != BP_DTYPE_INT8) return false;
  // A zero point: absent (0) or a constant of one value of type `t`.
  auto zero_of = [&](int v, bp_dtype_t t, int32_t* z) {
    *z = 0;
    if (v < 0) return true;
    if (!g.is_const(v) || g.values[v].dtype != t || sdk::element_count(g.shape(v)) != 1)
      return false;
    *z = t == BP_DTYPE_UINT8 ? *static_cast<const uint8_t*>(g.data(v))
                             : *static_cast<const int8_t*>(g.data(v));
    return true;
  };
  const Dims& ws = g.shape(w);
  if (conv ? ws.size() < 3 : ws.size() != 2) return false;
  const int64_t channels = conv ? ws[0] : ws[1];
  auto q = std::make_shared<QuantGroup>();
  const std::optional<float> xs = g.scalar(m.in[1]), ys = g.scalar(m.in[6]);
  if (!xs || !ys || !(*xs > 0) || !(*ys > 0) || !zero_of(m.in[2], xt, &q->x_zero) ||
      !zero_of(m.in[7], yt, &q->y_zero))
    return false;
  const int wsv = m.in[4];
  const int64_t nscales = sdk::element_count(g.shape(wsv));
  if (!g.is_const(wsv) || g.values[wsv].dtype != BP_DTYPE_FLOAT32 ||
      (nscales != 1 && nscales != channels))
    return false;
  if (m.in[5] >= 0) {
    const int wz = m.in[5];
    if (!g.is_const(wz) || g.values[wz].dtype != BP_DTYPE_INT8) return false;
    const int8_t* z = static_cast<const int8_t*>(g.data(wz));
    for (int64_t i = 0; i < sdk::element_count(g.shape(wz)); ++i)
      if (z[i] != 0) return false;
  }
  q->x = x;
  q->x_scale = *xs;
  q->w = w;
  const float* wsd = g.f32(wsv);
  q->w_scales.assign(wsd, wsd + nscales);
  q->x_shape = g.shape(x);
  if (!conv && (q->x_shape.empty() || q->x_shape.back() != ws[0])) return false;
  if (conv && m.in.size() > 8 && m.in[8] >= 0) {
    const int b = m.in[8];
    if (!g.is_const(b) || g.values[b].dtype != BP_DTYPE_INT32 ||
        sdk::element_count(g.shape(b)) != channels)
      return false;
    const int32_t* bv = static_cast<const int32_t*>(g.data(b));
    q->bias.assign(bv, bv + channels);  // int32 in units of x_scale * w_scale already
  }
  if (conv) {
    try {  // the Conv attributes and window, as a Conv's
      const Dims& xsh = g.shape(x);
      (void)window(g, m.node, xsh, g.shape(m.out), Dims(ws.begin() + 2, ws.end()));
    } catch (const sdk::Error&) {
      return false;
    }
  }
  q->y_scale = *ys;
  q->out_scale = 1.f / *ys;
  QuantSpec yq;
  yq.quantized = yt;
  yq.scales = {*ys};
  yq.zero_point = q->y_zero;
  std::vector<int> chain = requantized_activation(g, f, n, yq);
  std::optional<std::vector<PostOp>> post = quantized_tail(g, f, chain, yq);
  if (!post) return false;
  if (chain.empty()) {
    m.quant = q;
    m.post = std::move(*post);
    return true;
  }
  commit_group(f, n, q, std::move(*post), chain);
  return true;
}

// Makes INode n an int8 group that moves integers (QuantGroup::passthrough)
// if it is a Reshape, Flatten, Squeeze, Unsqueeze, Transpose or Concat of
// dequantized uint8/int8 tensors whose result only a QuantizeLinear of the
// same type, scale and zero point reads (as quantizers write around such
// operators): moving the integers is the same, without a float pass.
bool passthrough_group(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const bool concat = m.op == "Concat";
  if (!concat && m.op != "Reshape" && m.op != "Flatten" && m.op != "Squeeze" &&
      m.op != "Unsqueeze" && m.op != "Transpose")
    return false;
  if (m.in.empty() || m.in[0] < 0 || m.out < 0 || g.num_out(m.node) != 1) return false;
  try {
    check_node(g, m.node);
  } catch (const sdk::Error&) {
    return false;
  }
  auto q = std::make_shared<QuantGroup>();
  QuantSpec common;
  const size_t count = concat ? m.in.size() : 1;
  for (size_t i = 0; i < count; ++i) {
    QuantSpec spec;
    const int v = m.in[i];
    const int d = dequantizer(g, f, v, -1, &spec);
    if (d < 0 || g.values[v].dequantized || spec.quantized == BP_DTYPE_INT32)
      return refuse(f, n, "an input is not a uint8/int8 tensor dequantized with one scale");
    if (i > 0 && (spec.scales != common.scales || spec.zero_point != common.zero_point ||
                  spec.quantized != common.quantized))
      return refuse(f, n, "its inputs differ in scale, zero point or type");
    common = spec;
    q->sources.push_back(f.nodes[d].in[0]);
    q->dequantize.push_back(d);
  }
  const int k = next_in_chain(g, f, m.out);
  QuantSpec yq;
  if (k < 0 || f.nodes[k].op != "QuantizeLinear" || !per_tensor_spec(g, f.nodes[k].node, &yq))
    return refuse(f, n, "its result does not go to one QuantizeLinear that alone reads it");
  if (yq.scales != common.scales || yq.zero_point != common.zero_point ||
      yq.quantized != common.quantized)
    return refuse(f, n, "its QuantizeLinear's scale, zero point or type is not its input's");
  q->passthrough = true;
  q->x = q->sources[0];
  q->x_scale = q->y_scale = common.scales[0];
  q->x_zero = q->y_zero = common.zero_point;
  commit_group(f, n, q, {}, {k});
  return true;
}

// Makes ConvInteger or MatMulInteger INode n (not a dynamically quantized
// product's) an int8 group of int32 result: a uint8/int8 input with one
// constant zero point (or none), constant int8 weights of zero point 0
// (2-D for MatMulInteger). A convolution or matmul whose output scales are
// 1 and whose output is the accumulator.
bool integer_product(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  const bool conv = m.op == "ConvInteger";
  if ((!conv && m.op != "MatMulInteger") || m.in.size() < 2 || m.in[0] < 0 || m.in[1] < 0 ||
      m.out < 0)
    return false;
  const int x = m.in[0], w = m.in[1];
  const bp_dtype_t xt = g.values[x].dtype;
  if (xt != BP_DTYPE_UINT8 && xt != BP_DTYPE_INT8)
    return refuse(f, n, "its input is not uint8 or int8");
  if (!g.is_const(w) || g.values[w].dtype != BP_DTYPE_INT8)
    return refuse(f, n, "its weights are not constant int8");
  const Dims& ws = g.shape(w);
  if (conv ? ws.size() < 3 : ws.size() != 2)
    return refuse(f, n, conv ? "its weights have no window" : "its weights are not 2-D");
  auto q = std::make_shared<QuantGroup>();
  if (m.in.size() > 2 && m.in[2] >= 0) {
    const int z = m.in[2];
    if (!g.is_const(z) || g.values[z].dtype != xt || sdk::element_count(g.shape(z)) != 1)
      return refuse(f, n, "its input's zero point is not one constant");
    q->x_zero = xt == BP_DTYPE_UINT8 ? *static_cast<const uint8_t*>(g.data(z))
                                     : *static_cast<const int8_t*>(g.data(z));
  }
  if (m.in.size() > 3 && m.in[3] >= 0) {
    const int z = m.in[3];
    if (!g.is_const(z) || g.values[z].dtype != BP_DTYPE_INT8)
      return refuse(f, n, "its weights' zero point is not 0");
    const auto* zv = static_cast<const int8_t*>(g.data(z));
    for (int64_t i = 0; i < sdk::element_count(g.shape(z)); ++i)
      if (zv[i] != 0) return refuse(f, n, "its weights' zero point is not 0");
  }
  q->x = x;
  q->w = w;
  q->w_scales = {1.f};
  q->x_shape = g.shape(x);
  if (!conv && (q->x_shape.empty() || q->x_shape.back() != ws[0]))
    return refuse(f, n, "its input's last dim is not the weights' first");
  if (conv) {
    try {  // the attributes and window, as a Conv's
      (void)window(g, m.node, q->x_shape, g.shape(m.out), Dims(ws.begin() + 2, ws.end()));
    } catch (const sdk::Error& e) {
      return refuse(f, n, e.what());
    }
  }
  m.quant = q;
  return true;
}

// Makes Conv INode n an int8 group (QuantGroup) if its input and weights
// are dequantized int8 (uint8/int8 activations with one scale, int8
// weights with a zero point of 0 and one scale per tensor or per output
// channel, a float or dequantized int32 bias) and its result reaches a
// QuantizeLinear of one scale through nothing but activations. The
// DequantizeLinear nodes stay: fuse() drops those nothing reads any more.
bool quantize_conv(ViewInfo& g, FusedGraph& f, int n) {
  INode& m = f.nodes[n];
  // ConvTranspose's weights are [C_in, C_out / group, ...]: one scale per
  // output channel is along axis 1, which holds all of them if ungrouped.
  const bool transposed = m.op == "ConvTranspose";
  if ((m.op != "Conv" && !transposed) || m.fold || m.in.size() < 2) return false;
  try {
    check_node(g, m.node);
  } catch (const sdk::Error&) {
    return false;
  }
  auto q = std::make_shared<QuantGroup>();
  QuantSpec xq, wq;
  const int dx = dequantizer(g, f, m.in[0], -1, &xq);
  const int dw = dequantizer(g, f, m.in[1], transposed ? 1 : 0, &wq);
  if (transposed && wq.scales.size() > 1 && g.node(m.node).attr_int("group", 1) != 1)
    return refuse(f, n, "its weights have one scale per channel of a group");
  if (transposed) {
    // oneDNN 2.6's int8 deconvolution writes input-dependent values where no
    // input reaches (a stride over the kernel's reach, output padding past
    // it), which the differential tests found; the float one does not.
    const Dims& xs = g.shape(m.in[0]);
    const Dims& ws = g.shape(m.in[1]);
    try {
      const Dims& ys = g.shape(m.out);
      const Window w = deconv_window(g, m.node, xs, ys, Dims(ws.begin() + 2, ws.end()));
      for (size_t i = 0; i < w.kernel.size(); ++i) {
        std::vector<bool> reached(static_cast<size_t>(ys[i + 2]), false);
        for (int64_t x = 0; x < xs[i + 2]; ++x)
          for (int64_t k = 0; k < w.kernel[i]; ++k) {
            const int64_t o = x * w.strides[i] + k * (w.dilation[i] + 1) - w.pad_l[i];
            if (o >= 0 && o < ys[i + 2]) reached[static_cast<size_t>(o)] = true;
          }
        if (std::find(reached.begin(), reached.end(), false) != reached.end())
          return refuse(f, n, "an output no input reaches (oneDNN's int8 form gets it wrong)");
      }
    } catch (const sdk::Error& e) {
      return refuse(f, n, e.what());
    }
  }
  if (dx < 0 || xq.quantized == BP_DTYPE_INT32)
    return refuse(f, n, "its input is not a uint8/int8 tensor dequantized with one scale");
  if (const char* why = weights_refusal(g, f, dw, wq)) return refuse(f, n, why);
  q->x = f.nodes[dx].in[0];
  q->x_scale = xq.scales[0];
  q->x_zero = xq.zero_point;
  q->w = f.nodes[dw].in[0];
  q->w_scales = wq.scales;
  q->dequantize = {dx, dw};
  const Dims& ws = g.shape(m.in[1]);
  const int64_t channels = transposed ? ws[1] * g.node(m.node).attr_int("group", 1) : ws[0];
  auto w_scale = [&](int64_t c) { return q->w_scales[q->w_scales.size() == 1 ? 0 : c]; };
  const int b = m.in.size() > 2 ? m.in[2] : -1;
  if (b >= 0) {
    // ONNX adds the float bias (or int32 * its scale) to the float product;
    // the accumulator counts units of x_scale * w_scale.
    q->bias.resize(static_cast<size_t>(channels));
    QuantSpec bq;
    const int db = dequantizer(g, f, b, 0, &bq);
    if (db >= 0 && g.is_const(f.nodes[db].in[0]) && bq.quantized == BP_DTYPE_INT32) {
      const int32_t* bv = static_cast<const int32_t*>(g.data(f.nodes[db].in[0]));
      for (int64_t c = 0; c < channels; ++c) {
        const float real = static_cast<float>(bv[c]) * bq.scales[bq.scales.size() == 1 ? 0 : c];
        q->bias[c] = real / (q->x_scale * w_scale(c));
      }
      q->dequantize.push_back(db);
    } else if (g.is_const(b) && g.values[b].dtype == BP_DTYPE_FLOAT32) {
      const float* bv = g.f32(b);
      for (int64_t c = 0; c < channels; ++c) q->bias[c] = bv[c] / (q->x_scale * w_scale(c));
    } else {
      return refuse(f, n, "its bias is neither float nor dequantized int32 constants");
    }
  }
  std::vector<PostOp> post;
  std::vector<int> chain;
  std::string why;
  if (!quantized_output(g, f, m.out, true, *q, post, chain, &why)) return refuse(f, n, why);
  commit_group(f, n, q, std::move(post), chain);
  return true;
}

// Drops the DequantizeLinear INodes only int8 groups read through (their
// groups read the quantized tensors), and the DynamicQuantizeLinear ones
// only dynamic groups read (they quantize its input themselves), and gives
// their view nodes to the first group that read them.
void drop_dequantizers(ViewInfo& g, FusedGraph& f) {
  std::vector<int> owner(f.nodes.size(), -1);
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    INode& m = f.nodes[n];
    if (m.dead || !m.quant) continue;
    for (int d : m.quant->dequantize)
      if (owner[d] < 0) owner[d] = static_cast<int>(n);
    // It reads the quantized tensors, not the dequantized ones.
    m.in = {m.quant->x};
    for (int v : {m.quant->x2, m.quant->w})
      if (v >= 0) m.in.push_back(v);
    if (m.quant->passthrough) m.in = m.quant->sources;
  }
  // A reshape between a DequantizeLinear and the group goes first, then the
  // DequantizeLinear it read.
  for (bool dropped = true; dropped;) {
    dropped = false;
    live_consumers(g, f.nodes, f.consumers);
    for (size_t d = 0; d < f.nodes.size(); ++d) {
      INode& dq = f.nodes[d];
      if (owner[d] < 0 || dq.dead) continue;
      // What a dynamic group's members read of its own quantizer (the scale,
      // in the Mul of the scales) is not read when it runs.
      auto reads = [&](int c) {
        const int at = f.nodes[c].group >= 0 ? f.nodes[c].group : c;
        const QuantGroup* q = f.nodes[at].quant.get();
        return !(q != nullptr && q->dynamic && !dq.in.empty() && q->x == dq.in[0]);
      };
      bool read = false;
      for (size_t k = 0; k < g.num_out(dq.node) && !read; ++k) {
        const int v = g.out(dq.node, k);
        read = v >= 0 && (g.values[v].output ||
                          std::any_of(f.consumers[v].begin(), f.consumers[v].end(), reads));
      }
      if (read) continue;
      dq.dead = dropped = true;
      std::vector<int>& covers = f.nodes[owner[d]].covers;
      covers.insert(covers.end(), dq.covers.begin(), dq.covers.end());
    }
  }
}

}  // namespace

namespace {

// A QuantizeLinear INode that no group took, of one scale, whose output only
// a DequantizeLinear of the same scale and zero point reads (a QDQ model's
// activation between two float operators): one FakeQuantize INode from the
// first's input to the second's output, one pass over the floats instead of
// a quantization and a dequantization each with a tensor of its own.
void fake_quantize_pairs(ViewInfo& g, FusedGraph& f) {
  live_consumers(g, f.nodes, f.consumers);
  for (size_t n = 0; n < f.nodes.size(); ++n) {
    INode& q = f.nodes[n];
    QuantSpec qs, ds;
    if (q.dead || q.group >= 0 || q.quant || q.op != "QuantizeLinear" || q.in.empty() ||
        q.in[0] < 0 || g.values[q.in[0]].dtype != BP_DTYPE_FLOAT32 || g.values[q.out].output ||
        f.consumers[q.out].size() != 1 || !per_tensor_spec(g, q.node, &qs))
      continue;
    INode& d = f.nodes[f.consumers[q.out][0]];
    if (d.dead || d.group >= 0 || d.quant || d.op != "DequantizeLinear" || d.in[0] != q.out ||
        !per_tensor_spec(g, d.node, &ds) || ds.scales != qs.scales ||
        ds.zero_point != qs.zero_point || ds.quantized != qs.quantized || !(qs.scales[0] > 0.f))
      continue;
    q.op = "FakeQuantize";
    q.in.resize(1);
    q.out = d.out;
    q.covers.insert(q.covers.end(), d.covers.begin(), d.covers.end());
    d.dead = true;
  }
  live_consumers(g, f.nodes, f.consumers);
}

}  // namespace

FusedGraph fuse(ViewInfo& g, const std::set<int>& float_nodes) {
  FusedGraph f;
  f.nodes = view_nodes(g);
  replace_patterns(g, f.nodes);
  live_consumers(g, f.nodes, f.consumers);
  const size_t nn = f.nodes.size();
  for (size_t n = 0; n < nn; ++n)
    if (!f.nodes[n].dead && f.nodes[n].op == "Pad") fold_pad(g, f, static_cast<int>(n));
  for (size_t n = 0; n < nn; ++n)
    if (!f.nodes[n].dead && f.nodes[n].op == "Conv") fold_batch_norm(g, f, static_cast<int>(n));
  for (size_t n = 0; n < nn; ++n) {
    INode& in = f.nodes[n];
    if (in.dead || in.group >= 0) continue;
    in.anchor = static_cast<int>(n);
    if (!float_nodes.count(in.node)) {
      if ((in.op == "Conv" || in.op == "ConvTranspose") && quantize_conv(g, f, static_cast<int>(n)))
        continue;
      if (in.op == "Add" && quantize_add(g, f, static_cast<int>(n))) continue;
      if (in.op == "Mul" && quantize_mul(g, f, static_cast<int>(n))) continue;
      if (quantize_product(g, f, static_cast<int>(n))) continue;
      if (dynamic_product(g, f, static_cast<int>(n))) continue;
      if (integer_product(g, f, static_cast<int>(n))) continue;
      if (passthrough_group(g, f, static_cast<int>(n))) continue;
      if (qlinear_group(g, f, static_cast<int>(n))) continue;
      if (quantize_pool(g, f, static_cast<int>(n))) continue;
    }
    if (in.op == "Conv" || in.op == "Gemm" || in.op == "MatMul")
      build_group(g, f, static_cast<int>(n));
    else if (in.op == "BatchNormalization") {
      absorb_relu(g, f, static_cast<int>(n));
      absorb_concat(g, f, static_cast<int>(n));
    }
  }
  // Tables last (what the groups above take, they do better) and from the
  // end, so that a table takes all it can (SiLU's Mul before its Sigmoid).
  for (size_t n = nn; n-- > 0;) {
    INode& in = f.nodes[n];
    if (!in.dead && in.group < 0 && !in.quant && !float_nodes.count(in.node))
      table_group(g, f, static_cast<int>(n));
  }
  drop_dequantizers(g, f);
  fake_quantize_pairs(g, f);
  return f;
}

namespace {

// What an int8 group computes, in a few words.
std::string group_kind(const INode& m) {
  const QuantGroup& q = *m.quant;
  if (!q.table.empty()) return "table";
  if (q.dynamic && m.op == "ConvInteger") return "convolution of a tensor quantized at run time";
  if (q.dynamic) return "matmul, quantized at run time";
  if (q.passthrough) {  // "concat", "transpose"...: the op's own name, in lower case
    std::string name = m.op;
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return name;
  }
  if (m.op == "Conv" || m.op == "QLinearConv" || m.op == "ConvInteger") return "convolution";
  if (m.op == "ConvTranspose") return "transposed convolution";
  if (m.op == "Gemm" || m.op == "MatMul" || m.op == "QLinearMatMul" || m.op == "MatMulInteger")
    return "matmul";
  if (m.op == "Add") return "addition";
  if (m.op == "Mul") return "multiplication";
  return "pooling";
}

// The operators some int8 group starts from (tables aside).
bool has_int8_group(const std::string& op) {
  static const std::set<std::string> ops = {
      "Conv",    "ConvTranspose", "Gemm",          "MatMul",      "Add",
      "Mul",     "MaxPool",       "GlobalMaxPool", "AveragePool", "GlobalAveragePool",
      "Reshape", "Flatten",       "Squeeze",       "Unsqueeze",   "Transpose",
      "Concat"};
  return ops.count(op) > 0;
}

}  // namespace

std::vector<std::string> quant_notes(const ViewInfo& g, const FusedGraph& f,
                                     const std::map<int, std::string>& failed) {
  std::vector<std::string> notes(g.num_nodes());
  std::vector<bool> int8(g.num_nodes(), false);
  auto name = [&](int n) { return std::string(g.node(n).name()); };
  for (size_t k = 0; k < f.nodes.size(); ++k) {
    const INode& m = f.nodes[k];
    if (m.dead || !m.quant) continue;
    const std::string kind = group_kind(m);
    auto mark = [&](int v) {
      int8[v] = true;
      notes[v] =
          v == m.node ? "int8 " + kind : "int8, in the " + kind + " of '" + name(m.node) + "'";
    };
    for (int v : m.covers) mark(v);
    for (int d : m.quant->dequantize)  // with those of constants, dequantized when compiled
      for (int v : f.nodes[d].covers) mark(v);
    for (const INode& member : f.nodes)
      if (member.group == static_cast<int>(k))
        for (int v : member.covers) mark(v);
  }
  auto is_quantizer = [&](int n, std::string_view op) { return n >= 0 && g.op(n) == op; };
  for (size_t k = 0; k < g.num_nodes() && k < f.nodes.size(); ++k) {
    const int n = static_cast<int>(k);
    const INode& m = f.nodes[k];
    if (int8[n] || m.dead || m.node != n) continue;
    if (m.op == "DequantizeLinear") {
      if (!g.values[m.out].dequantized)
        notes[n] = g.values[m.out].output ? "float: dequantizes the partition's output"
                                          : "float: dequantizes for float operators";
      continue;
    }
    if (m.op == "QuantizeLinear") {
      notes[n] = "float: quantizes a float result";
      continue;
    }
    bool quantized = false;  // between a DequantizeLinear and a QuantizeLinear
    for (size_t i = 0; i < g.num_in(n); ++i)
      quantized = quantized || (g.in(n, i) >= 0 &&
                                is_quantizer(g.values[g.in(n, i)].producer, "DequantizeLinear"));
    for (size_t i = 0; i < g.num_out(n); ++i)
      if (g.out(n, i) >= 0)
        for (int c : g.values[g.out(n, i)].consumers)
          quantized = quantized || is_quantizer(c, "QuantizeLinear");
    if (!quantized) continue;
    std::string why;
    if (auto fail = failed.find(n); fail != failed.end()) {
      why = fail->second;
    } else if (auto w = f.why.find(n); w != f.why.end()) {
      why = w->second;
    } else if (has_int8_group(m.op)) {
      why = "it does not fit an int8 group (docs/numerics.md, Quantized models)";
    } else if (tabulable(m.op)) {
      why =
          "it is not in a table (a QuantizeLinear of an elementwise function of one "
          "quantized tensor)";
    } else {
      why = "CpuOneDnn has no int8 form of " + m.op;
    }
    notes[n] = "float, not int8: " + why;
  }
  return notes;
}

std::optional<PostOp> eltwise_of(ViewInfo& g, const INode& n) {
  PostOp p;
  const std::string& op = n.op;
  if (op == "GeluErf") p.alg = algorithm::eltwise_gelu_erf;
  else if (op == "Swish") p.alg = algorithm::eltwise_swish, p.alpha = n.alpha;
  else if (op == "Relu") p.alg = algorithm::eltwise_relu;
  else if (op == "LeakyRelu")
    p.alg = algorithm::eltwise_relu, p.alpha = g.node(n.node).attr_float("alpha", 0.01f);
  else if (op == "Sigmoid") p.alg = algorithm::eltwise_logistic;
  else if (op == "Tanh") p.alg = algorithm::eltwise_tanh;
  else if (op == "Sqrt") p.alg = algorithm::eltwise_sqrt;
  else if (op == "Exp") p.alg = algorithm::eltwise_exp;
  else if (op == "Abs") p.alg = algorithm::eltwise_abs;
  else if (op == "Neg") p.alg = algorithm::eltwise_linear, p.alpha = -1.f;
  else if (op == "Elu")
    p.alg = algorithm::eltwise_elu, p.alpha = g.node(n.node).attr_float("alpha", 1.f);
  else if (op == "Gelu")
    p.alg = g.node(n.node).attr_string("approximate", "none") == "tanh"
                ? algorithm::eltwise_gelu_tanh
                : algorithm::eltwise_gelu_erf;
  else if (op == "Pow") p.alg = algorithm::eltwise_pow, p.alpha = 1.f, p.beta = *g.scalar(n.in[1]);
  else if (op == "Clip") {
    p.alg = algorithm::eltwise_clip;
    p.alpha = -kInf;
    p.beta = kInf;
    if (g.node(n.node).opset() < 11) {
      p.alpha = g.node(n.node).attr_float("min", -kInf);
      p.beta = g.node(n.node).attr_float("max", kInf);
    } else {
      if (n.in.size() > 1 && n.in[1] >= 0) p.alpha = *g.scalar(n.in[1]);
      if (n.in.size() > 2 && n.in[2] >= 0) p.beta = *g.scalar(n.in[2]);
    }
  } else return std::nullopt;
  return p;
}

// The activations one eltwise algorithm of oneDNN 2.6 lacks are chains of
// them: HardSigmoid = clip(alpha * x + beta, 0, 1), Selu = gamma * elu(x).
std::optional<std::vector<PostOp>> activation_of(ViewInfo& g, const INode& n) {
  if (std::optional<PostOp> p = eltwise_of(g, n)) return std::vector<PostOp>{*p};
  sdk::NodeRef node = g.node(n.node);
  auto one = [](algorithm alg, float alpha = 0.f, float beta = 0.f) {
    PostOp p;
    p.alg = alg;
    p.alpha = alpha;
    p.beta = beta;
    return p;
  };
  const std::string& op = n.op;
  if (op == "HardSwish") return std::vector<PostOp>{one(algorithm::eltwise_hardswish)};
  if (op == "Mish") return std::vector<PostOp>{one(algorithm::eltwise_mish)};
  if (op == "Softplus") return std::vector<PostOp>{one(algorithm::eltwise_soft_relu)};
  if (op == "Round") return std::vector<PostOp>{one(algorithm::eltwise_round)};
  if (op == "HardSigmoid")
    return std::vector<PostOp>{one(algorithm::eltwise_linear, node.attr_float("alpha", 0.2f),
                                   node.attr_float("beta", 0.5f)),
                               one(algorithm::eltwise_clip, 0.f, 1.f)};
  if (op == "Selu")
    return std::vector<PostOp>{
        one(algorithm::eltwise_elu, node.attr_float("alpha", 1.67326319217681884765625f)),
        one(algorithm::eltwise_linear, node.attr_float("gamma", 1.05070102214813232421875f))};
  return std::nullopt;
}

void folded_conv_weights(ViewInfo& g, const FusedGraph& f, const INode& n,
                         std::vector<float>* weights, std::vector<float>* bias) {
  const Dims& ws = g.shape(n.in[1]);
  const float* w = g.f32(n.in[1]);
  weights->assign(w, w + sdk::element_count(ws));
  bias->assign(static_cast<size_t>(ws[0]), 0.f);
  if (n.in.size() > 2 && n.in[2] >= 0) {
    const float* cb = g.f32(n.in[2]);
    bias->assign(cb, cb + ws[0]);
  }
  if (n.fold->bn >= 0) {
    const INode& b = f.nodes[n.fold->bn];
    sdk::fold_batch_norm(*weights, *bias, g.f32(b.in[1]), g.f32(b.in[2]), g.f32(b.in[3]),
                         g.f32(b.in[4]), g.node(b.node).attr_float("epsilon", 1e-5f));
  }
  if (n.fold->alpha != 1.f || n.fold->beta != 0.f) {
    for (float& x : *weights) x *= n.fold->alpha;
    for (float& x : *bias) x = n.fold->alpha * x + n.fold->beta;
  }
}

// Add/Sub/Mul/Div of `v` and a constant scalar, as y = alpha * v + beta.
std::optional<PostOp> linear_of(ViewInfo& g, const INode& n, int v) {
  if (n.in.size() != 2 || (n.in[0] == v) == (n.in[1] == v)) return std::nullopt;
  const bool first = n.in[0] == v;
  auto c = g.scalar(first ? n.in[1] : n.in[0]);
  if (!c || g.shape(n.out) != g.shape(v)) return std::nullopt;
  PostOp p;
  p.alg = algorithm::eltwise_linear;
  if (n.op == "Add") p.alpha = 1, p.beta = *c;
  else if (n.op == "Mul") p.alpha = *c, p.beta = 0;
  else if (n.op == "Sub") p.alpha = first ? 1.f : -1.f, p.beta = first ? -*c : *c;
  else if (n.op == "Div" && first) p.alpha = 1.f / *c, p.beta = 0;
  else if (n.op == "Div") p.alg = algorithm::eltwise_pow, p.alpha = *c, p.beta = -1.f;  // c / v
  else return std::nullopt;
  return p;
}

}  // namespace backplane::onednn
