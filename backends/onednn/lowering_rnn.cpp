// lowering_rnn.cpp — ONNX LSTM, GRU and RNN nodes as oneDNN's lstm_forward,
// gru_forward / lbr_gru_forward and vanilla_rnn_forward (forward inference,
// f32, one layer). rnn_spec (support.hpp) has checked what fits and that the
// shapes agree. A bidirectional node at batch 1 on two or more threads is a
// step per direction, the two run side by side (directions_beside).
//
// oneDNN names its GRU implementation "ref" (impl_check.cpp lets recurrent
// primitives through): its gate products are GEMMs all the same, about four
// times as fast as CpuRef's GRU on a 2-layer bidirectional 256-wide model.
#include "onednn/lowering.hpp"
#include "onednn/support.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace backplane::onednn {

using dnnl::memory;

namespace {

// For each of oneDNN's gates, the ONNX gate it is: LSTM gates are i, o, f, c
// in ONNX and i, f, c, o in oneDNN; LSTM peepholes i, o, f and i, f, o; GRU
// gates z, r, h in ONNX are oneDNN's u, r, o in that order.
constexpr int64_t kLstmGates[] = {0, 2, 3, 1};
constexpr int64_t kGruGates[] = {0, 1, 2};
constexpr int64_t kRnnGates[] = {0};
constexpr int64_t kPeepholes[] = {0, 2, 1};

// ONNX weights [D, G*H, K] as oneDNN's ldigo [1, D, K, G, H].
std::vector<float> to_ldigo(const float* w, const RnnSpec& s, int64_t k, const int64_t* gates,
                            int64_t g) {
  const int64_t h = s.hidden;
  std::vector<float> out(static_cast<size_t>(s.dirs * k * g * h));
  for (int64_t d = 0; d < s.dirs; ++d)
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < g; ++j)
        for (int64_t o = 0; o < h; ++o)
          out[static_cast<size_t>(((d * k + i) * g + j) * h + o)] =
              w[((d * g + gates[j]) * h + o) * k + i];
  return out;
}

// ONNX rows [D, R*G*H] (R blocks of G gates) as oneDNN's ldgo [1, D, G, H]:
// the sum of the R blocks, gates reordered (bias: Wb + Rb; peepholes: R = 1).
std::vector<float> to_ldgo(const float* b, const RnnSpec& s, int64_t blocks, const int64_t* gates,
                           int64_t g) {
  const int64_t h = s.hidden;
  std::vector<float> out(static_cast<size_t>(s.dirs * g * h), 0.f);
  for (int64_t d = 0; d < s.dirs; ++d)
    for (int64_t r = 0; r < blocks; ++r)
      for (int64_t j = 0; j < g; ++j)
        for (int64_t o = 0; o < h; ++o)
          out[static_cast<size_t>((d * g + j) * h + o)] +=
              b[((d * blocks + r) * g + gates[j]) * h + o];
  return out;
}

// A linear-before-reset GRU's bias [1, D, 4, H]: Wb + Rb for the update and
// reset gates, Wb of the hidden gate, and its Rb apart (oneDNN adds it to
// R h before the reset gate multiplies, as ONNX does).
std::vector<float> lbr_gru_bias(const float* b, const RnnSpec& s) {
  const int64_t h = s.hidden;
  std::vector<float> out(static_cast<size_t>(s.dirs * 4 * h));
  for (int64_t d = 0; d < s.dirs; ++d) {
    const float* wb = b + d * 6 * h;  // Wb of z, r, h, then Rb of z, r, h
    const float* rb = wb + 3 * h;
    float* row = out.data() + d * 4 * h;
    for (int64_t o = 0; o < h; ++o) {
      row[o] = wb[o] + rb[o];
      row[h + o] = wb[h + o] + rb[h + o];
      row[2 * h + o] = wb[2 * h + o];
      row[3 * h + o] = rb[2 * h + o];
    }
  }
  return out;
}

std::string rnn_tag(const char* what, int n, int64_t dir) {
  std::string tag = what + std::to_string(n);
  if (dir >= 0) tag.append("d").append(std::to_string(dir));
  return tag;
}

// The constant arguments of node n's step `pd`: W and R in the layouts pd
// wants, the bias (Wb + Rb) and any peepholes. `dir` >= 0: those of that
// direction of a bidirectional node alone (s.dirs is 1).
void add_rnn_constants(PlanBuilder& pb, ViewInfo& vi, const INode& n, const RnnSpec& s, int64_t dir,
                       const dnnl::rnn_primitive_desc_base& pd,
                       std::vector<std::pair<int, int>>& args) {
  const int64_t g = s.gates(), d = s.dirs, h = s.hidden;
  const int64_t first = std::max<int64_t>(dir, 0);  // in directions of the node's tensors
  const int64_t* gates = s.lstm ? kLstmGates : s.gru ? kGruGates : kRnnGates;
  auto in = [&](size_t i) { return i < n.in.size() ? n.in[i] : -1; };
  auto weights = [&](const char* what, int v, int64_t k, const memory::desc& want) {
    const std::string tag = rnn_tag(what, n.node, dir);
    const memory::desc plain = plain_md({1, d, k, g, h});
    const int r = pb.cached_const(tag, plain, want);
    if (r >= 0) return r;
    const std::vector<float> w = to_ldigo(vi.f32(v) + first * g * h * k, s, k, gates, g);
    return pb.const_reordered(plain, w.data(), want, tag);
  };
  args.push_back(
      {DNNL_ARG_WEIGHTS_LAYER, weights("rnnw", in(1), s.input, pd.weights_layer_desc())});
  args.push_back({DNNL_ARG_WEIGHTS_ITER, weights("rnnr", in(2), h, pd.weights_iter_desc())});
  const int64_t bias_gates = s.linear_before_reset ? 4 : g;
  std::vector<float> bias(static_cast<size_t>(d * bias_gates * h), 0.f);
  if (in(3) >= 0) {
    const float* b = vi.f32(in(3)) + first * 2 * g * h;
    bias = s.linear_before_reset ? lbr_gru_bias(b, s) : to_ldgo(b, s, 2, gates, g);
  }
  args.push_back({DNNL_ARG_BIAS, pb.const_ref(plain_md({1, d, bias_gates, h}), bias.data(),
                                              rnn_tag("rnnb", n.node, dir))});
  if (s.lstm && in(7) >= 0) {
    const std::vector<float> p = to_ldgo(vi.f32(in(7)) + first * 3 * h, s, 1, kPeepholes, 3);
    args.push_back({DNNL_ARG_WEIGHTS_PEEPHOLE,
                    pb.const_ref(plain_md({1, d, 3, h}), p.data(), rnn_tag("rnnp", n.node, dir))});
  }
}

// The primitive of an RNN step over `s` (its directions), with initial
// states and final ones if asked for.
dnnl::rnn_primitive_desc_base make_rnn(PlanBuilder& pb, const RnnSpec& s, bool src_iter,
                                       bool dst_iter, bool peep, dnnl::primitive* prim) {
  const int64_t t = s.seq, b = s.batch, c = s.input, h = s.hidden, d = s.dirs, g = s.gates();
  const memory::desc none, state = plain_md({1, d, b, h});
  const memory::desc x_md = plain_md({t, b, c}), y_md = plain_md({t, b, d * h});
  const memory::desc bias_md = plain_md({1, d, s.linear_before_reset ? 4 : g, h});
  const memory::desc peep_md = plain_md({1, d, 3, h});
  // At batch 1 oneDNN's GEMM-based cell on plain (ldigo) weights ran 1.2 to
  // 1.9 times as fast as the brgemm kernels the layouts it picks itself lead
  // to (LSTM, GRU, RNN, 1 and 2 threads); from batch 2 on those were faster.
  auto weights_md = [&](int64_t k) {
    return b == 1 ? plain_md({1, d, k, g, h}) : any_md({1, d, k, g, h});
  };
  const memory::desc wl_md = weights_md(c), wi_md = weights_md(h);
  const memory::desc si = src_iter ? state : none, di = dst_iter ? state : none;
  const auto fwd = dnnl::prop_kind::forward_inference;
  if (s.lstm) {
    dnnl::lstm_forward::desc desc(fwd, s.direction, x_md, si, si, wl_md, wi_md,
                                  peep ? peep_md : none, bias_md, y_md, di, di);
    return pb.make<dnnl::lstm_forward>(desc, pb.attr(), "", prim);
  }
  if (s.gru && s.linear_before_reset) {
    dnnl::lbr_gru_forward::desc desc(fwd, s.direction, x_md, si, wl_md, wi_md, bias_md, y_md, di);
    return pb.make<dnnl::lbr_gru_forward>(desc, pb.attr(), "", prim);
  }
  if (s.gru) {
    dnnl::gru_forward::desc desc(fwd, s.direction, x_md, si, wl_md, wi_md, bias_md, y_md, di);
    return pb.make<dnnl::gru_forward>(desc, pb.attr(), "", prim);
  }
  dnnl::vanilla_rnn_forward::desc desc(fwd, s.activation, s.direction, x_md, si, wl_md, wi_md,
                                       bias_md, y_md, di);
  return pb.make<dnnl::vanilla_rnn_forward>(desc, pb.attr(), "", prim);
}

// A bidirectional layer at batch 1 on a team of two or more threads runs as
// its two directions side by side, one thread each. Its cell's products are
// too small to share between threads (a 2-layer, 256-wide bidirectional
// LSTM or GRU over 100 steps ran slower on two threads than on one), and the
// two directions do not depend on each other.
bool directions_beside(ViewInfo& g, const INode& n, const RnnSpec& s, int threads) {
  if (s.dirs != 2 || s.batch != 1 || threads < 2) return false;
  // Initial states are sliced per direction here, so they must be constants.
  for (size_t i : {size_t{5}, size_t{6}})
    if (i < n.in.size() && n.in[i] >= 0 && !g.is_const(n.in[i])) return false;
  return true;
}

}  // namespace

void Lowering::lower_rnn(const INode& n) {
  const RnnSpec s = rnn_spec(g_, n.node);
  const int64_t t = s.seq, b = s.batch, h = s.hidden, d = s.dirs;
  auto in = [&](size_t i) { return i < n.in.size() ? n.in[i] : -1; };
  auto out = [&](size_t i) {
    const int y = i < g_.num_out(n.node) ? g_.out(n.node, i) : -1;
    return g_.used(y) ? y : -1;
  };
  // Both states or neither (a missing one is zeros); likewise for the outputs.
  const bool src_iter = in(5) >= 0 || in(6) >= 0, dst_iter = out(1) >= 0 || out(2) >= 0;
  const bool peep = in(7) >= 0;
  const int x = b_.as_md(ref_of(in(0)), plain_md({t, b, s.input}));
  if (directions_beside(g_, n, s, c_.threads)) return lower_rnn_beside(n, s, x, dst_iter);
  dnnl::primitive prim;
  const dnnl::rnn_primitive_desc_base pd = make_rnn(b_, s, src_iter, dst_iter, peep, &prim);
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC_LAYER, x}};
  add_rnn_constants(b_, g_, n, s, -1, pd, args);
  const memory::desc state = plain_md({1, d, b, h});
  auto initial = [&](int v) {
    if (v >= 0) return b_.as_md(b_.reshaped(ref_of(v), {1, d, b, h}), state);
    const std::vector<float> zeros(static_cast<size_t>(d * b * h), 0.f);
    return b_.const_ref(state, zeros.data());
  };
  if (src_iter) args.push_back({DNNL_ARG_SRC_ITER, initial(in(5))});
  if (src_iter && s.lstm) args.push_back({DNNL_ARG_SRC_ITER_C, initial(in(6))});
  const int y = b_.new_arena(plain_md({t, b, d * h}));
  args.push_back({DNNL_ARG_DST_LAYER, y});
  const int yh = dst_iter ? b_.new_arena(state) : -1;
  const int yc = dst_iter && s.lstm ? b_.new_arena(state) : -1;
  if (yh >= 0) args.push_back({DNNL_ARG_DST_ITER, yh});
  if (yc >= 0) args.push_back({DNNL_ARG_DST_ITER_C, yc});
  b_.add_step(prim, std::move(args), pd, g_.describe(n.node));
  bind_rnn_outputs(n, s, y, yh, yc);
}

void Lowering::lower_rnn_beside(const INode& n, const RnnSpec& both, int x, bool dst_iter) {
  const int64_t t = both.seq, b = both.batch, h = both.hidden;
  auto in = [&](size_t i) { return i < n.in.size() ? n.in[i] : -1; };
  const memory::desc state = plain_md({1, 1, b, h});
  // Direction k's slice of a constant initial state [2, b, h] (or zeros).
  auto initial = [&](int v, int64_t k) {
    std::vector<float> slice(static_cast<size_t>(b * h), 0.f);
    if (v >= 0) std::copy_n(g_.f32(v) + k * b * h, b * h, slice.begin());
    return b_.const_ref(state, slice.data());
  };
  const bool src_iter = in(5) >= 0 || in(6) >= 0;
  std::vector<std::pair<int, int>> ys, yhs, ycs;  // CopyConcat sources, per direction
  const int first = static_cast<int>(c_.steps.size());
  {
    // Each runs on one thread: made for one.
    const ScopedOmpThreads one(1);
    for (int64_t k = 0; k < 2; ++k) {
      RnnSpec s = both;
      s.dirs = 1;
      s.direction = k == 0 ? dnnl::rnn_direction::unidirectional_left2right
                           : dnnl::rnn_direction::unidirectional_right2left;
      dnnl::primitive prim;
      const dnnl::rnn_primitive_desc_base pd =
          make_rnn(b_, s, src_iter, dst_iter, in(7) >= 0, &prim);
      std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC_LAYER, x}};
      add_rnn_constants(b_, g_, n, s, k, pd, args);
      if (src_iter) args.push_back({DNNL_ARG_SRC_ITER, initial(in(5), k)});
      if (src_iter && s.lstm) args.push_back({DNNL_ARG_SRC_ITER_C, initial(in(6), k)});
      const int src = static_cast<int>(k);
      const int y = b_.new_arena(plain_md({t, b, h}));
      args.push_back({DNNL_ARG_DST_LAYER, y});
      ys.push_back({DNNL_ARG_MULTIPLE_SRC + src, y});
      if (dst_iter) {
        const int yh = b_.new_arena(state);
        args.push_back({DNNL_ARG_DST_ITER, yh});
        yhs.push_back({DNNL_ARG_MULTIPLE_SRC + src, yh});
      }
      if (dst_iter && s.lstm) {
        const int yc = b_.new_arena(state);
        args.push_back({DNNL_ARG_DST_ITER_C, yc});
        ycs.push_back({DNNL_ARG_MULTIPLE_SRC + src, yc});
      }
      b_.add_step(prim, std::move(args), pd,
                  g_.describe(n.node) + (k == 0 ? " (forward)" : " (reverse)"));
    }
  }
  b_.run_beside(first);
  // The directions' outputs side by side, as one bidirectional step writes them.
  auto joined = [&](std::vector<std::pair<int, int>> srcs, const memory::desc& md, int axis) {
    if (srcs.empty()) return -1;
    const int dst = b_.new_arena(md);
    srcs.push_back({DNNL_ARG_DST, dst});
    b_.add_copy_concat(std::move(srcs), axis, g_.describe(n.node) + " (directions joined)");
    return dst;
  };
  const int y = joined(ys, plain_md({t, b, 2 * h}), 2);
  const int yh = joined(yhs, plain_md({1, 2, b, h}), 1);
  const int yc = joined(ycs, plain_md({1, 2, b, h}), 1);
  bind_rnn_outputs(n, both, y, yh, yc);
}

void Lowering::bind_rnn_outputs(const INode& n, const RnnSpec& s, int y, int yh, int yc) {
  const int64_t t = s.seq, b = s.batch, h = s.hidden, d = s.dirs;
  auto out = [&](size_t i) {
    const int v = i < g_.num_out(n.node) ? g_.out(n.node, i) : -1;
    return g_.used(v) ? v : -1;
  };
  // Y [T, D, N, H]: oneDNN's [T, N, D*H] with the middle axes swapped.
  if (out(0) >= 0 && d == 1) tensors_[out(0)] = b_.reshaped(y, {t, 1, b, h});
  if (out(0) >= 0 && d == 2)
    tensors_[out(0)] = b_.alias(y, plain_md({t, b, 2, h}).permute_axes({0, 2, 1, 3}));
  if (out(1) >= 0) tensors_[out(1)] = b_.reshaped(yh, {d, b, h});
  if (out(2) >= 0) tensors_[out(2)] = b_.reshaped(yc, {d, b, h});
}

}  // namespace backplane::onednn
