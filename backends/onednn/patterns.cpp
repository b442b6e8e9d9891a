// patterns.cpp — matching decomposed LayerNorm, erf-GELU, SiLU and HardSwish in a view.
#include "onednn/patterns.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <utility>

namespace backplane::onednn {
namespace {

bool near(std::optional<float> v, float want, float tol = 1e-4f) {
  return v && std::fabs(*v - want) <= tol;
}

// Axes of a ReduceMean (attribute before opset 18, input after).
std::optional<std::vector<int64_t>> reduce_axes(ViewInfo& g, int n) {
  if (g.num_in(n) > 1 && g.in(n, 1) >= 0) return g.ints(g.in(n, 1));
  return g.node(n).attr_ints("axes", {});
}

bool reduces_last_axis(ViewInfo& g, int n) {
  if (g.op(n) != "ReduceMean" || g.node(n).attr_int("keepdims", 1) != 1) return false;
  auto axes = reduce_axes(g, n);
  const int64_t rank = static_cast<int64_t>(g.shape(g.in(n, 0)).size());
  return axes && axes->size() == 1 && ((*axes)[0] == -1 || (*axes)[0] == rank - 1);
}

std::optional<Pattern> match_layer_norm(ViewInfo& g, int r1) {
  if (!reduces_last_axis(g, r1)) return std::nullopt;
  Pattern p{"LayerNorm", {r1}, g.in(r1, 0)};
  const int x = p.x;
  const int s = g.only_consumer(g.out(r1));
  if (s < 0 || g.op(s) != "Sub" || g.in(s, 0) != x || g.in(s, 1) != g.out(r1)) return std::nullopt;
  const int d = g.out(s);
  if (g.values[d].output || g.values[d].consumers.size() != 2) return std::nullopt;
  int pw = -1, dv = -1;
  for (int c : g.values[d].consumers) {
    if (g.op(c) == "Pow" && g.in(c, 0) == d) pw = c;
    if (g.op(c) == "Div" && g.in(c, 0) == d) dv = c;
  }
  if (pw < 0 || dv < 0 || !near(g.scalar(g.in(pw, 1)), 2.f, 0.f)) return std::nullopt;
  const int r2 = g.only_consumer(g.out(pw));
  if (r2 < 0 || !reduces_last_axis(g, r2)) return std::nullopt;
  const int ad = g.only_consumer(g.out(r2));
  if (ad < 0 || g.op(ad) != "Add") return std::nullopt;
  auto eps = g.scalar(g.other_input(ad, g.out(r2)));
  if (!eps) return std::nullopt;
  const int sq = g.only_consumer(g.out(ad));
  if (sq < 0 || g.op(sq) != "Sqrt" || g.only_consumer(g.out(sq)) != dv || g.in(dv, 1) != g.out(sq))
    return std::nullopt;
  p.nodes.insert(p.nodes.end(), {s, pw, r2, ad, sq, dv});
  p.eps = *eps;
  p.out = g.out(dv);
  const int64_t c = g.shape(x).back();
  // c values along the last axis: [c], [1, c], ... (a [c, 1] of as many
  // values scales rows, not channels).
  auto per_channel = [&](int v) {
    if (v < 0 || !g.is_const(v) || g.values[v].dtype != BP_DTYPE_FLOAT32) return false;
    const Dims& s = g.shape(v);
    return sdk::element_count(s) == c && s.size() <= g.shape(x).size() &&
           (s.empty() ? c == 1 : s.back() == c);
  };
  const int mul = g.only_consumer(p.out);
  if (mul >= 0 && g.op(mul) == "Mul" && per_channel(g.other_input(mul, p.out))) {
    p.gamma = g.other_input(mul, p.out);
    p.nodes.push_back(mul);
    p.out = g.out(mul);
    const int add = g.only_consumer(p.out);
    if (add >= 0 && g.op(add) == "Add" && per_channel(g.other_input(add, p.out))) {
      p.beta = g.other_input(add, p.out);
      p.nodes.push_back(add);
      p.out = g.out(add);
    }
  }
  if (g.shape(p.out) != g.shape(x)) return std::nullopt;
  return p;
}

// y = x * 0.5 * (1 + erf(x / sqrt(2))), in the two orders PyTorch exports.
std::optional<Pattern> match_gelu(ViewInfo& g, int e) {
  if (g.op(e) != "Erf") return std::nullopt;
  const int a = g.in(e, 0);
  const int d = a >= 0 ? g.values[a].producer : -1;
  if (d < 0 || g.only_consumer(a) != e) return std::nullopt;
  const int x = g.in(d, 0);
  if (!((g.op(d) == "Div" && near(g.scalar(g.in(d, 1)), 1.41421356f, 1e-3f)) ||
        (g.op(d) == "Mul" && near(g.scalar(g.in(d, 1)), 0.70710678f, 1e-3f))))
    return std::nullopt;
  const int f = g.only_consumer(g.out(e));
  if (f < 0 || g.op(f) != "Add" || !near(g.scalar(g.other_input(f, g.out(e))), 1.f))
    return std::nullopt;
  const int m = g.only_consumer(g.out(f));
  if (m < 0 || g.op(m) != "Mul") return std::nullopt;
  const int other = g.other_input(m, g.out(f));
  Pattern p{"GeluErf", {d, e, f, m}, x};
  if (other == x) {  // (x * (1 + erf)) * 0.5
    const int h = g.only_consumer(g.out(m));
    if (h < 0 || g.op(h) != "Mul" || !near(g.scalar(g.other_input(h, g.out(m))), 0.5f))
      return std::nullopt;
    p.nodes.push_back(h);
    p.out = g.out(h);
  } else {  // (x * 0.5) * (1 + erf)
    const int h = other >= 0 ? g.values[other].producer : -1;
    if (h < 0 || g.op(h) != "Mul" || g.only_consumer(other) != m || g.other_input(h, x) < 0 ||
        !near(g.scalar(g.other_input(h, x)), 0.5f))
      return std::nullopt;
    p.nodes.push_back(h);
    p.out = g.out(m);
  }
  if (g.shape(p.out) != g.shape(x)) return std::nullopt;
  return p;
}

// y = x * sigmoid(x): SiLU (EfficientNet, YOLO), which PyTorch exports as
// Sigmoid and Mul, so the Conv before it has two readers and fuses neither.
// As one node, it is oneDNN's swish: a post-op of that Conv. Paddle2ONNX
// writes x * sigmoid(beta * x), with a Mul by beta (often 1) first.
std::optional<Pattern> match_swish(ViewInfo& g, int s) {
  if (g.op(s) != "Sigmoid") return std::nullopt;
  int x = g.in(s, 0);
  Pattern p{"Swish", {s}, x};
  const int scaled = x >= 0 ? g.values[x].producer : -1;
  if (scaled >= 0 && g.op(scaled) == "Mul" && g.only_consumer(x) == s) {
    for (int i : {0, 1})
      if (std::optional<float> beta = g.scalar(g.in(scaled, i)); beta && g.in(scaled, 1 - i) >= 0) {
        x = p.x = g.in(scaled, 1 - i);
        p.alpha = *beta;
        p.nodes.push_back(scaled);
        break;
      }
  }
  const int m = g.only_consumer(g.out(s));
  if (x < 0 || m < 0 || g.op(m) != "Mul" || g.other_input(m, g.out(s)) != x) return std::nullopt;
  p.nodes.push_back(m);
  p.out = g.out(m);
  if (g.shape(p.out) != g.shape(x)) return std::nullopt;
  return p;
}

// The bounds of Clip node n, if they are constants (attributes before opset
// 11, inputs after; an absent one is unbounded).
std::optional<std::pair<float, float>> clip_bounds(ViewInfo& g, int n) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (g.node(n).opset() < 11)
    return std::pair{g.node(n).attr_float("min", -kInf), g.node(n).attr_float("max", kInf)};
  std::pair<float, float> b{-kInf, kInf};
  for (int i : {1, 2}) {
    if (g.num_in(n) <= static_cast<size_t>(i) || g.in(n, i) < 0) continue;
    std::optional<float> v = g.scalar(g.in(n, i));
    if (!v) return std::nullopt;
    (i == 1 ? b.first : b.second) = *v;
  }
  return b;
}

// Whether node n divides `v` by 6 (Div by 6, or Mul by 1/6).
bool sixth_of(ViewInfo& g, int n, int v) {
  if (n < 0) return false;
  if (g.op(n) == "Div") return g.in(n, 0) == v && near(g.scalar(g.in(n, 1)), 6.f, 1e-5f);
  return g.op(n) == "Mul" && near(g.scalar(g.other_input(n, v)), 1.f / 6, 1e-6f);
}

// y = x * relu6(x + 3) / 6: HardSwish as exporters without the operator
// write it (opsets before 14). paddle2onnx: Add, Clip(0, 6), Mul by x, Div
// by 6 (PP-LCNet, PP-OCR); also x * (relu6(x + 3) / 6), and PyTorch's
// x * HardSigmoid(x) with alpha 1/6, beta 0.5. As one node, it is oneDNN's
// hardswish: a post-op of the Conv before it, which otherwise has two
// readers and fuses nothing after it.
std::optional<Pattern> match_hard_swish(ViewInfo& g, int n) {
  Pattern p{"HardSwish", {}, -1};
  int gate = -1;  // the node whose result is relu6(x + 3) / 6 or relu6(x + 3)
  if (g.op(n) == "HardSigmoid") {
    if (!near(g.node(n).attr_float("alpha", 0.2f), 1.f / 6, 1e-6f) ||
        !near(g.node(n).attr_float("beta", 0.5f), 0.5f, 1e-6f))
      return std::nullopt;
    p.x = g.in(n, 0);
    p.nodes = {n};
    gate = n;
  } else if (g.op(n) == "Clip") {
    const auto bounds = clip_bounds(g, n);
    const int a = g.in(n, 0);
    const int add = a >= 0 ? g.values[a].producer : -1;
    if (!bounds || bounds->first != 0.f || bounds->second != 6.f || add < 0 || g.op(add) != "Add" ||
        g.only_consumer(a) != n)
      return std::nullopt;
    for (int i : {0, 1})
      if (near(g.scalar(g.in(add, i)), 3.f, 0.f)) p.x = g.in(add, 1 - i);
    p.nodes = {add, n};
    gate = n;
    // x * relu6(x + 3) first, then / 6.
    const int m = g.only_consumer(g.out(n));
    if (p.x >= 0 && m >= 0 && g.op(m) == "Mul" && g.other_input(m, g.out(n)) == p.x) {
      const int d = g.only_consumer(g.out(m));
      if (!sixth_of(g, d, g.out(m))) return std::nullopt;
      p.nodes.insert(p.nodes.end(), {m, d});
      p.out = g.out(d);
    } else {
      const int d = g.only_consumer(g.out(n));
      if (!sixth_of(g, d, g.out(n))) return std::nullopt;
      p.nodes.push_back(d);
      gate = d;
    }
  } else {
    return std::nullopt;
  }
  if (p.x < 0) return std::nullopt;
  if (p.out < 0) {  // x * gate
    const int m = g.only_consumer(g.out(gate));
    if (m < 0 || g.op(m) != "Mul" || g.other_input(m, g.out(gate)) != p.x) return std::nullopt;
    p.nodes.push_back(m);
    p.out = g.out(m);
  }
  if (g.values[p.x].dtype != BP_DTYPE_FLOAT32 || g.shape(p.out) != g.shape(p.x))
    return std::nullopt;
  return p;
}

}  // namespace

std::vector<Pattern> find_patterns(ViewInfo& g) {
  std::vector<Pattern> out;
  std::vector<bool> taken(g.num_nodes(), false);
  for (size_t n = 0; n < g.num_nodes(); ++n) {
    std::optional<Pattern> p;
    if (g.op(n) == "ReduceMean") p = match_layer_norm(g, static_cast<int>(n));
    if (g.op(n) == "Erf") p = match_gelu(g, static_cast<int>(n));
    if (g.op(n) == "Sigmoid") p = match_swish(g, static_cast<int>(n));
    if (g.op(n) == "Clip" || g.op(n) == "HardSigmoid") p = match_hard_swish(g, static_cast<int>(n));
    if (!p) continue;
    bool free = true;
    for (int k : p->nodes) free = free && !taken[k];
    if (!free) continue;
    for (int k : p->nodes) taken[k] = true;
    out.push_back(std::move(*p));
  }
  return out;
}

}  // namespace backplane::onednn
