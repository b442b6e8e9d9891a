// bn_folding.cpp — a BatchNormalization after a Conv, folded into the Conv's
// weights and bias at compile time (inference only: the statistics are
// constants), so the pair runs as one convolution.
#include "onednn/fusion.hpp"
#include "onednn/support.hpp"

#include <cmath>

namespace backplane::onednn {

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
  const int64_t oc = ws[0], per = sdk::element_count(ws) / oc;
  const float* scale = g.f32(b.in[1]);
  const float* shift = g.f32(b.in[2]);
  const float* mean = g.f32(b.in[3]);
  const float* var = g.f32(b.in[4]);
  const float eps = g.node(b.node).attr_float("epsilon", 1e-5f);
  const float* w = g.f32(conv.in[1]);
  const bool has_bias = conv.in.size() > 2 && conv.in[2] >= 0;
  auto nw = std::make_shared<std::vector<float>>(w, w + sdk::element_count(ws));
  auto nb = std::make_shared<std::vector<float>>(static_cast<size_t>(oc), 0.f);
  const float* cb = has_bias ? g.f32(conv.in[2]) : nullptr;
  for (int64_t o = 0; o < oc; ++o) {
    const double f = scale[o] / std::sqrt(static_cast<double>(var[o]) + eps);
    for (int64_t i = 0; i < per; ++i)
      (*nw)[o * per + i] = static_cast<float>((*nw)[o * per + i] * f);
    (*nb)[o] = static_cast<float>(((cb ? cb[o] : 0.f) - mean[o]) * f + shift[o]);
  }
  conv.weights = nw;
  conv.bias = nb;
  conv.out = b.out;
  conv.covers.insert(conv.covers.end(), b.covers.begin(), b.covers.end());
  fused.nodes[bn].dead = true;
}

}  // namespace backplane::onednn
