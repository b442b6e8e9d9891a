// fusion.cpp — from view nodes to internal nodes: patterns replace their
// nodes, BatchNormalization folds into Conv, and the single-consumer chain
// after each Conv/Gemm/MatMul becomes its post-ops.
#include "onednn/fusion.hpp"

#include "onednn/patterns.hpp"
#include "onednn/support.hpp"

#include <algorithm>
#include <limits>

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
    in.in = {p.x, p.gamma, p.beta};
    in.out = p.out;
    in.eps = p.eps;
  }
}

std::vector<std::vector<int>> live_consumers(const ViewInfo& g, const std::vector<INode>& nodes) {
  std::vector<std::vector<int>> consumers(g.values.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].dead) continue;
    for (int v : nodes[n].in)
      if (v >= 0 && (consumers[v].empty() || consumers[v].back() != static_cast<int>(n)))
        consumers[v].push_back(static_cast<int>(n));
  }
  return consumers;
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
  if (std::optional<PostOp> p = linear_of(g, f, cur)) return append_post_ops(m.post, {*p});
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
  const Dims& ws = g.shape(conv.in[1]);
  const float* w = g.f32(conv.in[1]);
  auto nw = std::make_shared<std::vector<float>>(w, w + sdk::element_count(ws));
  auto nb = std::make_shared<std::vector<float>>(static_cast<size_t>(ws[0]), 0.f);
  if (conv.in.size() > 2 && conv.in[2] >= 0) {
    const float* cb = g.f32(conv.in[2]);
    nb->assign(cb, cb + ws[0]);
  }
  sdk::fold_batch_norm(*nw, *nb, g.f32(b.in[1]), g.f32(b.in[2]), g.f32(b.in[3]), g.f32(b.in[4]),
                       g.node(b.node).attr_float("epsilon", 1e-5f));
  conv.weights = nw;
  conv.bias = nb;
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

}  // namespace

FusedGraph fuse(ViewInfo& g) {
  FusedGraph f;
  f.nodes = view_nodes(g);
  replace_patterns(g, f.nodes);
  f.consumers = live_consumers(g, f.nodes);
  const size_t nn = f.nodes.size();
  for (size_t n = 0; n < nn; ++n)
    if (!f.nodes[n].dead && f.nodes[n].op == "Pad") fold_pad(g, f, static_cast<int>(n));
  for (size_t n = 0; n < nn; ++n)
    if (!f.nodes[n].dead && f.nodes[n].op == "Conv") fold_batch_norm(g, f, static_cast<int>(n));
  for (size_t n = 0; n < nn; ++n) {
    INode& in = f.nodes[n];
    if (in.dead || in.group >= 0) continue;
    in.anchor = static_cast<int>(n);
    if (in.op == "Conv" || in.op == "Gemm" || in.op == "MatMul")
      build_group(g, f, static_cast<int>(n));
    else if (in.op == "BatchNormalization") {
      absorb_relu(g, f, static_cast<int>(n));
      absorb_concat(g, f, static_cast<int>(n));
    }
  }
  return f;
}

std::optional<PostOp> eltwise_of(ViewInfo& g, const INode& n) {
  PostOp p;
  const std::string& op = n.op;
  if (op == "GeluErf") p.alg = algorithm::eltwise_gelu_erf;
  else if (op == "Swish") p.alg = algorithm::eltwise_swish, p.alpha = 1.f;
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
