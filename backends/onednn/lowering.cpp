// lowering.cpp — internal nodes to oneDNN primitives and plan steps.
#include "onednn/lowering.hpp"

#include "onednn/impl_check.hpp"
#include "onednn/support.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace backplane::onednn {

using dnnl::algorithm;
using dnnl::memory;

namespace {
// The SharedCache tag of view value v as it is: by its data key where it
// has one (the same constant in every view of the model), else by its id.
std::string value_tag(const ViewInfo& g, int v) {
  const bp_value_t& value = g.view().values[v];
  if ((value.flags & BP_VALUE_CONSTANT) && value.data_key != nullptr && value.data_key[0] != '\0')
    return SharedCache::data_key_tag(value.data_key);
  std::string tag = std::to_string(v);  // not "v" + ...: GCC 12's false -Wrestrict (bug 105329)
  return tag.insert(0, 1, 'v');
}
// The tag of constant `what` that node n computes from its weights.
std::string node_tag(const char* what, int n) { return what + std::to_string(n); }
// What attr_with(post) holds, as a SharedCache key ("" for none).
std::string post_key(const std::vector<PostOp>& post) {
  std::string k;
  for (const PostOp& p : post) {
    const int32_t kind = p.kind, alg = static_cast<int32_t>(p.alg);
    for (const void* f : {static_cast<const void*>(&kind), static_cast<const void*>(&alg),
                          static_cast<const void*>(&p.alpha), static_cast<const void*>(&p.beta)})
      k.append(static_cast<const char*>(f), 4);
  }
  return k;
}
}  // namespace

std::optional<LowerFailure> Lowering::lower() {
  for (size_t k = 0; k < g_.view().num_inputs; ++k) {
    const int v = g_.view().inputs[k];
    const int b = b_.new_buffer(Buffer::kInput, k, bytes(v));
    // Other integer inputs are the indices of gather steps, which read their
    // bytes (and a DequantizeLinear of int32, which describes them again).
    const std::optional<memory::data_type> dt = data_type_of(v);
    const bool data = dt && *dt != memory::data_type::s32;
    tensors_[v] = b_.add_ref(b, data ? plain_md(g_.shape(v), *dt) : bytes_md(bytes(v)));
    c_.input_bytes.push_back(bytes(v));
  }
  std::vector<std::vector<int>> groups_at(f_.nodes.size());
  for (size_t n = 0; n < f_.nodes.size(); ++n)
    if (!f_.nodes[n].dead && f_.nodes[n].group < 0)
      groups_at[f_.nodes[n].anchor].push_back(static_cast<int>(n));
  // Each weight is let go of once the last node reading it is lowered (or,
  // if it is packed later, once it is): the host may then drop its copy
  // while the rest are packed, so that a model's weights are not in memory
  // twice over.
  std::vector<std::vector<int>> last_read_at(f_.nodes.size());
  {
    std::map<int, size_t> last;
    for (size_t n = 0; n < f_.nodes.size(); ++n) {
      const INode& node = f_.nodes[n];
      if (node.dead) continue;
      const int at = node.group < 0 ? node.anchor : f_.nodes[node.group].anchor;
      if (at < 0) continue;
      for (int j : node.covers) {
        const bp_node_t& vn = g_.view().nodes[j];
        for (size_t i = 0; i < vn.num_inputs; ++i)
          if (g_.is_const(vn.inputs[i]))
            last[vn.inputs[i]] = std::max(last[vn.inputs[i]], static_cast<size_t>(at));
      }
    }
    for (const auto& [v, at] : last) last_read_at[at].push_back(v);
  }
  for (size_t a = 0; a < f_.nodes.size(); ++a) {
    for (int n : groups_at[a]) {
      try {
        lower_node_checked(n);
      } catch (const std::exception& e) {
        LowerFailure failure{f_.nodes[n].covers, e.what()};
        if (f_.nodes[n].quant) failure.int8_node = f_.nodes[n].node;
        for (size_t k = 0; k < f_.nodes.size(); ++k)
          if (f_.nodes[k].group == n)
            for (int j : f_.nodes[k].covers) failure.nodes.push_back(j);
        return failure;
      }
    }
    for (int v : last_read_at[a])
      if (!packed_later_.count(v)) g_.release(v);
  }
  b_.write_pending([this](int v) { g_.release(v); });
  packed_later_.clear();
  for (const INode& n : f_.nodes) c_.int8 = c_.int8 || (!n.dead && n.quant);
  bind_outputs();
  b_.concat_in_place();
  b_.plan_arena();
  report_plan(c_);
  return std::nullopt;
}

void Lowering::lower_node_checked(int n) {
  try {
    lower_node(n);
  } catch (const ReferenceImpl&) {
    // An instance of a shape-polymorphic partition is lowered while running,
    // with no backend to hand the node to: it runs the reference kernel
    // (the plan report shows it); a plan compiled ahead fails to lower.
    if (!b_.shared()) throw;
    b_.set_allow_reference(true);
    lower_node(n);
    b_.set_allow_reference(false);
  }
}

// ---- values, destinations and post-ops ---------------------------------------

int Lowering::weight(int v, const memory::desc& user, const memory::desc& want) {
  const std::string tag = value_tag(g_, v);
  if (const int r = b_.cached_const(tag, user, want); r >= 0) return r;
  // A plan compiled ahead packs its weights once it is lowered
  // (PlanBuilder::write_pending); an instance lowered while running, now.
  if (b_.shared() || user == want) return b_.const_reordered(user, g_.f32(v), want, tag);
  packed_later_.insert(v);
  return b_.const_reordered(user, g_.f32(v), want, tag, v);
}

int Lowering::ref_of(int v, bool in_place) {
  auto it = tensors_.find(v);
  if (it != tensors_.end()) return it->second;
  if (g_.is_const(v)) {
    const std::optional<memory::data_type> dt = data_type_of(v);
    if (!dt) throw fail("constant '" + g_.value_name(v) + "' is not float32, (u)int8 or int32");
    const memory::desc md = plain_md(g_.shape(v), *dt);
    const std::string tag = value_tag(g_, v);
    int r = b_.cached_const(tag, md, md);
    if (r < 0)
      r = in_place ? b_.const_borrowed(md, g_.borrow(v), tag) : b_.const_ref(md, g_.data(v), tag);
    tensors_[v] = r;
    return r;
  }
  throw fail("value '" + g_.value_name(v) + "' is not available (its producer was not lowered)");
}

bool Lowering::buffer_free_after(int buffer, int anchor) const {
  if (buffer < 0 || c_.buffers[buffer].kind != Buffer::kArena) return false;
  for (const auto& [v, r] : tensors_) {
    if (c_.refs[r].buffer != buffer) continue;
    if (g_.values[v].output) return false;
    for (int k : f_.consumers[v]) {
      const INode& n = f_.nodes[k];
      const int at = n.group >= 0 ? f_.nodes[n.group].anchor : n.anchor;
      if (at > anchor) return false;
    }
  }
  return true;
}

dnnl::primitive_attr Lowering::attr_with(const std::vector<PostOp>& post) const {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (!post.empty()) {
    dnnl::post_ops po;
    for (const PostOp& p : post) {
      if (p.kind == PostOp::kSum) po.append_sum(1.f);
      else po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
    }
    a.set_post_ops(po);
  }
  return a;
}

int Lowering::main_dst(const INode& n, const memory::desc& dst_md) {
  for (const PostOp& p : n.post) {
    if (p.kind != PostOp::kSum) continue;
    const int r = ref_of(p.residual);
    // The residual's buffer becomes the dst only if nothing reads it later
    // and the primitive itself does not read it: EfficientNetV2's FusedMBConv
    // adds its convolution's own input back (x + silu(conv(x))), and a 3x3
    // convolution writing over its input reads neighbours already written.
    const int buffer = c_.refs[r].buffer;
    bool read_here = false;
    for (int v : n.in) {
      auto it = v >= 0 ? tensors_.find(v) : tensors_.end();
      read_here = read_here || (it != tensors_.end() && c_.refs[it->second].buffer == buffer);
    }
    if (b_.md(r) == dst_md && !read_here && buffer_free_after(buffer, n.anchor))
      return b_.add_ref(buffer, dst_md);
    const int dst = b_.new_arena(dst_md);
    b_.copy(r, dst);
    return dst;
  }
  return b_.new_arena(dst_md);
}

memory::desc Lowering::dst_hint(const INode& n, const Dims& shape) {
  for (const PostOp& p : n.post)
    if (p.kind == PostOp::kSum) {
      const memory::desc& r = b_.md(ref_of(p.residual));
      if (is_dense(r)) return r;
    }
  return any_md(shape);
}

// ---- operators -------------------------------------------------------------

void Lowering::add_main_step(const INode& n, dnnl::primitive prim,
                             std::vector<std::pair<int, int>> args,
                             const dnnl::primitive_desc_base& pd) {
  const int dst = main_dst(n, pd.query_md(dnnl::query::dst_md));
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_step(std::move(prim), std::move(args), pd, g_.describe(n.node));
  tensors_[n.out] = dst;
}

int Lowering::add_step_to_new(int y, dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                              const dnnl::primitive_desc_base& pd, const std::string& what) {
  const int dst = b_.new_arena(pd.query_md(dnnl::query::dst_md));
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_step(std::move(prim), std::move(args), pd, what);
  tensors_[y] = dst;
  return dst;
}

void Lowering::lower_node(int n) {
  const INode& node = f_.nodes[n];
  const std::string& op = node.op;
  // Operators CpuOneDnn runs only as int8 groups, which fusion.cpp checked.
  const bool dynamic = node.quant && (node.quant->dynamic || op == "QLinearConv" ||
                                      op == "QLinearMatMul" || op == "ConvInteger" ||
                                      op == "MatMulInteger");
  if (op != "GeluErf" && op != "LayerNorm" && op != "Swish" && !dynamic)
    check_node(g_, node.node);
  if (node.quant && node.quant->passthrough) return lower_qmove(node);
  if (op == "Conv") return node.quant ? lower_qconv(node) : lower_conv(node);
  if (op == "ConvTranspose") return node.quant ? lower_qdeconv(node) : lower_conv_transpose(node);
  if (op == "QLinearConv" && node.quant) return lower_qconv(node);
  if (op == "QLinearMatMul" && node.quant) return lower_qproduct(node);
  if (op == "Add" && node.quant) return lower_qadd(node);
  if (op == "Mul" && node.quant) return lower_qmul(node);
  if ((op == "Gemm" || op == "MatMul") && node.quant) return lower_qproduct(node);
  if (op == "MatMulInteger" && node.quant)
    return node.quant->dynamic ? lower_qdynamic(node) : lower_qproduct(node);
  if (op == "ConvInteger" && node.quant)
    return node.quant->dynamic ? lower_qdynamic_conv(node) : lower_qconv(node);
  if (op == "QuantizeLinear" && node.quant) return lower_table(node);
  if (op == "FakeQuantize") return lower_fake_quantize(node);
  if (op == "Erf") return lower_erf(node);
  if (op == "Gemm") return lower_gemm(node);
  if (op == "MatMul") return lower_matmul(node);
  if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool" || op == "GlobalMaxPool")
    return lower_pool(node);
  if (op == "BatchNormalization") return lower_batch_norm(node);
  if (op == "LayerNorm" || op == "LayerNormalization") return lower_layer_norm(node);
  if (op == "Softmax") return lower_softmax(node);
  if (op == "Concat") return lower_concat(node);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") return lower_reduce(node);
  if (binary_ops().count(op)) return lower_binary(node);
  if (op == "Transpose") return lower_transpose(node);
  if (op == "LSTM" || op == "GRU" || op == "RNN") return lower_rnn(node);
  if (op == "Cast" && g_.values[node.in[0]].dtype != BP_DTYPE_FLOAT32) {
    // Integers to float32 (support.cpp): a reorder, which rounds as a
    // conversion does. A partition's int32 input is described as bytes
    // (gather indices read them so): as int32 here.
    const Dims& xs = g_.shape(node.in[0]);
    int src = ref_of(node.in[0]);
    const memory::data_type from = *data_type_of(node.in[0]);
    if (b_.md(src).data_type() != from) src = b_.alias(src, plain_md(xs, from));
    const int dst = b_.new_arena(plain_md(xs));
    b_.copy(b_.as_plain(src, xs), dst);
    tensors_[node.out] = dst;
    return;
  }
  if (view_ops().count(op)) {
    tensors_[node.out] = b_.reshaped(ref_of(node.in[0]), g_.shape(node.out));
    return;
  }
  if (op == "PRelu") return lower_prelu(node);
  if (op == "Slice") return lower_slice(node);
  if (op == "Split") return lower_split(node);
  if (op == "Gather") return lower_gather(node);
  if (op == "MatMulNBits") return lower_matmul_nbits(node);
  if (op == "GatherBlockQuantized") return lower_gather_block_quantized(node);
  if (op == "Pad") return lower_pad(node);
  if (op == "Resize") return lower_resize(node);
  if (op == "QuantizeLinear" || op == "DequantizeLinear") return lower_quant(node);
  if (auto chain = activation_of(g_, node)) return lower_activation(node.in[0], node.out, *chain);
  throw fail("operator '" + op + "' has no lowering");
}

// oneDNN has erf only inside GELU: the backend's loop, in x's layout where
// every element is one (a blocked layout's zero padding stays 0).
void Lowering::lower_erf(const INode& n) {
  int src = ref_of(n.in[0]);
  const memory::desc& md = b_.md(src);
  if (md.data.offset0 != 0 || !(is_dense(md) || is_blocked(md)))
    src = b_.as_plain(src, g_.shape(n.in[0]));
  const int dst = b_.new_arena(b_.md(src));
  b_.add_loop(src, dst, steps::Eltwise{steps::Eltwise::kErf}, g_.describe(n.node));
  tensors_[n.out] = dst;
}

void Lowering::lower_eltwise(int x, int y, const PostOp& p) {
  const int src = b_.dense(ref_of(x));
  // In an instance of a shape-polymorphic partition, a small step is a loop
  // that takes any shape (as lower_binary's SmallBinary).
  const Dims& xs = g_.shape(x);
  const int64_t elements = sdk::element_count(xs);
  using E = steps::Eltwise;
  static const std::map<algorithm, E::Fn> loops = {
      {algorithm::eltwise_linear, E::kLinear},     {algorithm::eltwise_sqrt, E::kSqrt},
      {algorithm::eltwise_pow, E::kPow},           {algorithm::eltwise_abs, E::kAbs},
      {algorithm::eltwise_exp, E::kExp},           {algorithm::eltwise_tanh, E::kTanh},
      {algorithm::eltwise_logistic, E::kLogistic}, {algorithm::eltwise_relu, E::kRelu},
      {algorithm::eltwise_clip, E::kClip}};
  const auto loop = loops.find(p.alg);
  if (b_.shared() && loop != loops.end() && elements > 0 && elements <= kSmallInstanceOpElements &&
      is_dense(b_.md(src)) && b_.md(src).data.offset0 == 0) {
    const int dst = b_.new_arena(b_.md(src));
    b_.add_loop(src, dst, E{loop->second, p.alpha, p.beta}, "eltwise");
    tensors_[y] = dst;
    return;
  }
  // A blocked layout of fewer channels than a block (a one-channel map after a
  // convolution: its padding is most of it) has only oneDNN's reference
  // kernel for some functions (the logistic): those run on the plain layout.
  int from = src;
  if (is_blocked(b_.md(src)) && xs.size() >= 2 && xs[1] < 16) {
    try {
      dnnl::eltwise_forward::primitive_desc probe(
          dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, p.alg, b_.md(src),
                                      p.alpha, p.beta),
          b_.attr(), engine());
      if (std::string(probe.impl_info_str()).rfind("ref", 0) == 0) from = b_.as_plain(src, xs);
    } catch (const dnnl::error&) {
      from = b_.as_plain(src, xs);
    }
  }
  dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, p.alg, b_.md(from), p.alpha,
                                p.beta);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::eltwise_forward>(d, b_.attr(), "", &prim);
  add_step_to_new(y, prim, {{DNNL_ARG_SRC, from}}, pd, "eltwise");
}

Window Lowering::conv_window(const INode& n, const Dims& xs, const Dims& ws, const Dims& ys,
                             Dims* wdims) {
  const int64_t group = g_.node(n.node).attr_int("group", 1);
  const Dims ks(ws.begin() + 2, ws.end());
  if (g_.node(n.node).attr_ints("kernel_shape", ks) != ks)
    throw fail("kernel_shape does not match the weights");
  Window w = window(g_, n.node, xs, ys, ks, n.pad_before);
  if (group < 1 || ws[0] % group != 0 || xs[1] != ws[1] * group)
    throw fail("group does not divide the channels");
  *wdims = ws;
  if (group > 1) {
    *wdims = {group, ws[0] / group};
    wdims->insert(wdims->end(), ws.begin() + 1, ws.end());
  }
  return w;
}

memory::desc Lowering::deconv_weights_md(const Dims& ws, int64_t group, memory::data_type dt) {
  const Dims ks(ws.begin() + 2, ws.end());
  const int64_t icg = ws[0] / group, ocg = ws[1];
  int64_t window = 1;
  for (int64_t k : ks) window *= k;
  Dims wdims, wstrides;
  if (group > 1) {
    wdims = {group, ocg, icg};
    wstrides = {icg * ocg * window, window, ocg * window};
  } else {
    wdims = {ocg, icg};
    wstrides = {window, ocg * window};
  }
  int64_t stride = window;
  for (int64_t k : ks) {
    stride /= k;
    wdims.push_back(k);
    wstrides.push_back(stride);
  }
  return memory::desc(to_dims(wdims), dt, to_dims(wstrides));
}

void Lowering::lower_conv_transpose(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const Dims& ws = g_.shape(n.in[1]);
  const Dims& ys = g_.shape(n.out);
  const Window w = deconv_window(g_, n.node, xs, ys, Dims(ws.begin() + 2, ws.end()));
  const memory::desc user =
      deconv_weights_md(ws, g_.node(n.node).attr_int("group", 1), memory::data_type::f32);
  const memory::dims wdims = user.dims();
  const bool has_bias = n.in.size() > 2 && n.in[2] >= 0;
  const memory::desc bias_md = has_bias ? any_md({ys[1]}) : memory::desc();
  dnnl::deconvolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                      algorithm::deconvolution_direct, any_md(xs), any_md(wdims),
                                      bias_md, any_md(ys), w.strides, w.dilation, w.pad_l, w.pad_r);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::deconvolution_forward>(d, attr_with(n.post), post_key(n.post), &prim);
  const int wref = weight(n.in[1], user, pd.weights_desc());
  const int src = b_.as_md(ref_of(n.in[0]), pd.src_desc());
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
  if (has_bias) args.push_back({DNNL_ARG_BIAS, weight(n.in[2], plain_md({ys[1]}), pd.bias_desc())});
  add_main_step(n, prim, std::move(args), pd);
}

int Lowering::folded(const INode& n, bool bias, const memory::desc& user, const memory::desc& want,
                     const char* tag) {
  const std::string t = node_tag(tag, n.node);
  if (const int r = b_.cached_const(t, user, want); r >= 0) return r;
  if (folded_node_ != n.node) {
    folded_conv_weights(g_, f_, n, &folded_w_, &folded_b_);
    folded_node_ = n.node;
  }
  return b_.const_reordered(user, bias ? folded_b_.data() : folded_w_.data(), want, t);
}

// A 1x1 Conv (stride 1, no padding, one group) between channels-last
// tensors in an instance of a shape-polymorphic partition whose pixels come
// from open dims (a text line's width, an image's size): the product of the
// [N * H * W, C] pixels by the [C, OC] weights, as one oneDNN matmul with
// runtime rows (gemm:jit) that every instance shares. oneDNN's 1x1
// convolution generates its code for each new pixel count (0.3 to 1 ms);
// this takes none. False when it does not apply, and nothing was added.
bool Lowering::lower_pointwise_conv(const INode& n) {
  if (!b_.shared() || block_ > 0 || n.in.size() < 2 || !g_.values[n.in[0]].open_pixels)
    return false;
  const Dims& xs = g_.shape(n.in[0]);
  const Dims& ws = g_.shape(n.in[1]);
  const Dims& ys = g_.shape(n.out);
  if (xs.size() < 3 || ws.size() != xs.size() || g_.node(n.node).attr_int("group", 1) != 1 ||
      !g_.is_const(n.in[1]) || g_.values[n.in[1]].dtype != BP_DTYPE_FLOAT32)
    return false;
  for (size_t i = 2; i < ws.size(); ++i)
    if (ws[i] != 1) return false;
  Dims wdims;
  const Window w = conv_window(n, xs, ws, ys, &wdims);
  for (size_t i = 0; i < w.strides.size(); ++i)
    if (w.strides[i] != 1 || w.pad_l[i] != 0 || w.pad_r[i] != 0) return false;
  const int x = ref_of(n.in[0]);
  if (!(b_.md(x) == channels_last_md(xs))) return false;
  const int64_t k = xs[1], cols = ys[1];
  int64_t rows = 1;
  for (size_t i = 0; i < xs.size(); ++i) rows *= i == 1 ? 1 : xs[i];
  const bool has_bias = n.fold || (n.in.size() > 2 && n.in[2] >= 0);
  const memory::desc bias_md = has_bias ? plain_md({1, cols}) : memory::desc();
  // The weights [OC, C] read as the [C, OC] matrix they are transposed.
  const memory::desc user({k, cols}, memory::data_type::f32, memory::format_tag::ba);
  dnnl::primitive prim;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = b_.make<dnnl::matmul>(
        dnnl::matmul::desc(
            memory::desc({DNNL_RUNTIME_DIM_VAL, k}, memory::data_type::f32, memory::format_tag::ab),
            memory::desc({k, cols}, memory::data_type::f32, memory::format_tag::ab), bias_md,
            memory::desc({DNNL_RUNTIME_DIM_VAL, cols}, memory::data_type::f32,
                         memory::format_tag::ab)),
        attr_with(n.post), post_key(n.post), &prim);
  } catch (const dnnl::error&) {
    return false;
  }
  const int wref = n.fold ? folded(n, false, user, pd.weights_desc(), "pww")
                          : weight(n.in[1], user, pd.weights_desc());
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, b_.alias(x, plain_md({rows, k}))},
                                           {DNNL_ARG_WEIGHTS, wref}};
  if (has_bias)
    args.push_back({DNNL_ARG_BIAS,
                    n.fold ? folded(n, true, bias_md, bias_md, "pwb") : weight(n.in[2], bias_md)});
  const int dst = main_dst(n, channels_last_md(ys));
  args.push_back({DNNL_ARG_DST, b_.alias(dst, plain_md({rows, cols}))});
  b_.add_step(std::move(prim), std::move(args), pd, g_.describe(n.node));
  tensors_[n.out] = dst;
  return true;
}

void Lowering::lower_conv(const INode& n) {
  if (lower_pointwise_conv(n)) return;
  const Dims& xs = g_.shape(n.in[0]);
  const Dims& ws = g_.shape(n.in[1]);
  const Dims& ys = g_.shape(n.out);
  const Dims ks(ws.begin() + 2, ws.end());
  Dims wdims;
  const Window w = conv_window(n, xs, ws, ys, &wdims);
  const int64_t group = g_.node(n.node).attr_int("group", 1);
  const bool has_bias = n.fold || (n.in.size() > 2 && n.in[2] >= 0);
  const memory::desc bias_md = has_bias ? any_md({ws[0]}) : memory::desc();
  const dnnl::primitive_attr attr = attr_with(n.post);
  dnnl::primitive prim;
  auto desc = [&](const memory::desc& src, const memory::desc& dst,
                  algorithm alg = algorithm::convolution_direct) {
    return dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, alg, src,
                                           any_md(wdims), bias_md, dst, w.strides, w.dilation,
                                           w.pad_l, w.pad_r);
  };
  auto make = [&](const memory::desc& src, const memory::desc& dst,
                  algorithm alg = algorithm::convolution_direct) {
    return b_.make<dnnl::convolution_forward>(desc(src, dst, alg), attr, post_key(n.post), &prim);
  };
  dnnl::convolution_forward::primitive_desc pd;
  const memory::desc hint = dst_hint(n, ys);
  bool made = false, split_post = false;
  if (group > 1 && hint.data.format_kind == dnnl_format_kind_any &&
      b_.md(ref_of(n.in[0])) == channels_last_md(xs)) {
    // A grouped convolution between channels-last tensors (RegNet's,
    // ResNeXt's): oneDNN picks a blocked layout when free to, and each one
    // then costs a reorder on either side (and drags the SE block's pooling
    // and product into the blocked layout). Channels-last, where oneDNN has
    // a kernel for it.
    const memory::desc cl = channels_last_md(xs), cl_out = channels_last_md(ys);
    try {
      dnnl::convolution_forward::primitive_desc probe(desc(cl, cl_out), attr, engine());
      if (std::string(probe.impl_info_str()).rfind("ref", 0) != 0) {
        pd = make(cl, cl_out);
        made = true;
      }
    } catch (const dnnl::error&) {
    }
  }
  if (!made && block_ > 0 && (xs.size() == 4 || xs.size() == 5)) {
    // Blocked on both sides; a source of fewer channels than a block (an
    // image's three) stays plain, as the caller gives it: oneDNN has direct
    // kernels from plain to blocked.
    const bool five = xs.size() == 5;
    const memory::format_tag blocked =
        block_ == 16 ? (five ? memory::format_tag::nCdhw16c : memory::format_tag::nChw16c)
                     : (five ? memory::format_tag::nCdhw8c : memory::format_tag::nChw8c);
    const memory::format_tag plain = five ? memory::format_tag::ncdhw : memory::format_tag::nchw;
    const memory::desc src(memory::dims(xs.begin(), xs.end()), memory::data_type::f32,
                           xs[1] < block_ ? plain : blocked);
    const memory::desc dst(memory::dims(ys.begin(), ys.end()), memory::data_type::f32, blocked);
    Dims dilations(w.dilation.begin(), w.dilation.end());
    for (int64_t& d : dilations) ++d;  // oneDNN's d - 1 back to ONNX's
    if (winograd_ &&
        winograd_fits(xs, ks, Dims(w.strides.begin(), w.strides.end()), dilations, group)) {
      try {
        pd = make(src, dst, algorithm::convolution_winograd);
        made = true;
      } catch (const std::exception&) {  // no Winograd kernel for this one
      }
      // Its kernels fuse ReLU-like activations but not every one (SiLU:
      // EfficientNetV2's fused-MBConv): without them, which then run as
      // steps of their own after it, a pass over the output each.
      const bool eltwise_only = std::none_of(
          n.post.begin(), n.post.end(), [](const PostOp& p) { return p.kind == PostOp::kSum; });
      if (!made && !n.post.empty() && eltwise_only) {
        try {
          pd = b_.make<dnnl::convolution_forward>(desc(src, dst, algorithm::convolution_winograd),
                                                  attr_with({}), "", &prim);
          made = split_post = true;
        } catch (const std::exception&) {
        }
      }
    }
    if (!made) {
      try {
        pd = make(src, dst);
        made = true;
      } catch (const std::exception&) {  // no kernel, or only a reference one
      }
    }
  }
  for (const memory::desc& dst : {hint, any_md(ys)}) {
    if (made) break;
    try {
      pd = make(any_md(xs), dst);
      made = true;
    } catch (const dnnl::error&) {
    }
  }
  if (!made && !n.post.empty()) {
    // No optimised kernel takes this chain of post-ops (without AVX-512,
    // oneDNN's convolutions take a sum only as the first post-op, so
    // x + silu(conv(x)) has none): the convolution alone, then each post-op
    // a step of its own. A failure here goes to the host as the node's.
    pd = b_.make<dnnl::convolution_forward>(desc(any_md(xs), any_md(ys)), attr_with({}), "", &prim);
    made = split_post = true;
  }
  if (!made) pd = make(any_md(xs), any_md(ys));
  const int wref = n.fold ? folded(n, false, plain_md(wdims), pd.weights_desc(), "bnw")
                          : weight(n.in[1], plain_md(wdims), pd.weights_desc());
  const int src = b_.as_md(ref_of(n.in[0]), pd.src_desc());
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
  if (has_bias) {
    const memory::desc user = plain_md({ws[0]});
    args.push_back({DNNL_ARG_BIAS, n.fold ? folded(n, true, user, pd.bias_desc(), "bnb")
                                          : weight(n.in[2], user, pd.bias_desc())});
  }
  if (!split_post) return add_main_step(n, prim, std::move(args), pd);
  int at = add_step_to_new(n.out, prim, std::move(args), pd, g_.describe(n.node));
  for (size_t i = 0; i < n.post.size(); ++i) {
    const PostOp& p = n.post[i];
    dnnl::primitive step;
    if (p.kind == PostOp::kSum) {
      // The residual, in the layout of the convolution's result.
      const memory::desc md = b_.md(at);
      const int residual = b_.as_md(ref_of(p.residual), md);
      dnnl::binary::desc d(algorithm::binary_add, md, md, md);
      auto bpd = b_.make<dnnl::binary>(d, b_.attr(), "", &step);
      at = add_step_to_new(n.out, step, {{DNNL_ARG_SRC_0, at}, {DNNL_ARG_SRC_1, residual}}, bpd,
                           g_.describe(n.node) + " (its residual Add)");
      continue;
    }
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, p.alg, b_.md(at), p.alpha,
                                  p.beta);
    auto epd = b_.make<dnnl::eltwise_forward>(d, b_.attr(), "", &step);
    at = add_step_to_new(n.out, step, {{DNNL_ARG_SRC, at}}, epd,
                         g_.describe(n.node) + " (its activation)");
  }
}

void Lowering::lower_gemm(const INode& n) {
  sdk::NodeRef node = g_.node(n.node);
  const Dims& as = g_.shape(n.in[0]);
  const Dims& bs = g_.shape(n.in[1]);
  const Dims& ys = g_.shape(n.out);
  const float alpha = node.attr_float("alpha", 1.f), beta = node.attr_float("beta", 1.f);
  const bool trans_b = node.attr_int("transB", 0) != 0;
  const int64_t m = ys[0], nout = ys[1], k = as[1];
  const bool has_bias = n.in.size() > 2 && n.in[2] >= 0;
  dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_inference, any_md({m, k}),
                                      any_md({nout, k}), has_bias ? any_md({nout}) : memory::desc(),
                                      dst_hint(n, ys));
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::inner_product_forward>(d, attr_with(n.post), post_key(n.post), &prim);
  // B transposed and scaled by alpha, C scaled by beta: computed only if no
  // other instance or partition of the model has them in this layout already
  // (tagged by their constants' data and the scale).
  auto scaled_tag = [&](int v, float scale) {
    if (scale == 1.f) return value_tag(g_, v);
    char exact[32];  // %a: every float its own text (to_string rounds to 6 decimals)
    std::snprintf(exact, sizeof exact, "*%a", static_cast<double>(scale));
    return value_tag(g_, v) + exact;
  };
  const std::string wtag = scaled_tag(n.in[1], alpha);
  // With alpha 1, B as it is ([N, K] or [K, N]): the reorder reads it in place.
  const memory::desc user =
      alpha == 1.f ? memory::desc({nout, k}, memory::data_type::f32,
                                  trans_b ? memory::format_tag::ab : memory::format_tag::ba)
                   : plain_md({nout, k});
  int wref = b_.cached_const(wtag, user, pd.weights_desc());
  if (wref < 0 && alpha == 1.f) {
    wref = b_.const_reordered(user, g_.f32(n.in[1]), pd.weights_desc(), wtag);
  } else if (wref < 0) {
    const float* b = g_.f32(n.in[1]);
    std::vector<float> w(static_cast<size_t>(nout * k));  // [N, K]
    for (int64_t i = 0; i < nout; ++i)
      for (int64_t j = 0; j < k; ++j)
        w[i * k + j] = alpha * (trans_b ? b[i * k + j] : b[j * bs[1] + i]);
    wref = b_.const_reordered(plain_md({nout, k}), w.data(), pd.weights_desc(), wtag);
  }
  const int src = b_.as_md(ref_of(n.in[0]), pd.src_desc());
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
  if (has_bias) {
    const std::string btag = scaled_tag(n.in[2], beta);
    int bref = b_.cached_const(btag, plain_md({nout}), pd.bias_desc());
    if (bref < 0) {
      const float* c = g_.f32(n.in[2]);
      std::vector<float> bias;
      for (int64_t i = 0; i < nout; ++i) bias.push_back(beta * c[i]);
      bref = b_.const_reordered(plain_md({nout}), bias.data(), pd.bias_desc(), btag);
    }
    args.push_back({DNNL_ARG_BIAS, bref});
  }
  add_main_step(n, prim, std::move(args), pd);
}

void Lowering::lower_matmul(const INode& n) {
  const Dims& ys = g_.shape(n.out);
  const size_t rank = ys.size();
  const Dims as = left_pad(g_.shape(n.in[0]), rank);
  const Dims bs = left_pad(g_.shape(n.in[1]), rank);
  int src = b_.reshaped(b_.unblocked(ref_of(n.in[0])), as);
  const bool const_b = g_.is_const(n.in[1]);
  int wref = -1;
  memory::desc wmd = const_b ? any_md(bs) : memory::desc();
  if (!const_b) {
    wref = b_.reshaped(b_.unblocked(ref_of(n.in[1])), bs);
    wmd = b_.md(wref);
  }
  memory::desc bias_md;
  if (n.bias_value >= 0) bias_md = plain_md(left_pad({ys.back()}, rank));
  memory::desc dst_md = dst_hint(n, ys);
  if (dst_md.data.format_kind == dnnl_format_kind_any) dst_md = plain_md(ys);
  if (!const_b && b_.shared() && lower_matmul_any_shape(n, src, wref, dst_md)) return;
  if (const_b && lower_matmul_collapsed(n, src)) return;
  if (const_b) src = row_major_src(n, src, as, wmd, bias_md, dst_md);
  dnnl::matmul::desc d(b_.md(src), wmd, bias_md, dst_md);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::matmul>(d, attr_with(n.post), post_key(n.post), &prim);
  if (const_b) wref = weight(n.in[1], plain_md(bs), pd.weights_desc());
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
  if (n.bias_value >= 0) args.push_back({DNNL_ARG_BIAS, weight(n.bias_value, bias_md)});
  add_main_step(n, prim, std::move(args), pd);
}

// A MatMul of a [..., M, K] activation by constant [K, N] weights as one
// [prod(...) * M, K] x [K, N] product instead of one per batch entry (with
// M = 1, ViT's attention input, 5 times faster), whose 2-D form also gets
// blocked weights. The src is made row-major first if it is not; the dst is
// row-major (a residual summed into another layout keeps the batched form).
// False when it does not apply, and nothing was added.
dnnl::matmul::primitive_desc Lowering::runtime_rows_matmul(
    int64_t k, int64_t cols, memory::data_type src, memory::data_type weights,
    const memory::desc& bias, memory::data_type dst, const dnnl::primitive_attr& attr,
    const std::string& key, dnnl::primitive* prim) {
  const memory::desc any_rows({DNNL_RUNTIME_DIM_VAL, k}, src, memory::format_tag::ab);
  const memory::desc dst_rows({DNNL_RUNTIME_DIM_VAL, cols}, dst, memory::format_tag::ab);
  try {
    return b_.make<dnnl::matmul>(
        dnnl::matmul::desc(any_rows, plain_md({k, cols}, weights), bias, dst_rows), attr, key,
        prim);
  } catch (const dnnl::error&) {
    *prim = dnnl::primitive();
    return {};
  }
}

bool Lowering::lower_matmul_collapsed(const INode& n, int src) {
  const Dims& ys = g_.shape(n.out);
  const Dims& ws = g_.shape(n.in[1]);
  const size_t rank = ys.size();
  if (rank < 3 || ws.size() != 2) return false;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; ++i) rows *= ys[i];
  const memory::desc dst_nd = plain_md(ys);
  const memory::desc hint = dst_hint(n, ys);
  if (hint.data.format_kind != dnnl_format_kind_any && !(hint == dst_nd)) return false;
  const int64_t k = ws[0], cols = ws[1];
  const Dims as = left_pad(g_.shape(n.in[0]), rank);
  if (is_blocked(b_.md(src)) || !(b_.md(src) == plain_md(as))) src = b_.as_md(src, plain_md(as));
  const int src2 = b_.alias(src, plain_md({rows, k}));
  const memory::desc bias_md = n.bias_value >= 0 ? plain_md({1, cols}) : memory::desc();
  dnnl::primitive prim;
  dnnl::matmul::primitive_desc pd;
  // In an instance of a shape-polymorphic partition whose rows come from an
  // open dim, the rows are a runtime dim: one primitive (oneDNN's gemm-based
  // matmul, on plain weights) serves every instance. brgemm's code is made
  // per row count, 0.5 to 2 ms per MatMul at each new shape, on weights
  // packed for it, for runs 0 to 25% faster (a microsecond at a decoder's
  // one row). Every instance takes the same kernel, so the weights are held
  // in one layout.
  if (b_.shared() && g_.values[n.in[0]].open_rows)
    pd = runtime_rows_matmul(k, cols, memory::data_type::f32, memory::data_type::f32, bias_md,
                             memory::data_type::f32, attr_with(n.post), post_key(n.post), &prim);
  if (!prim) {
    dnnl::matmul::desc d(b_.md(src2), any_md({k, cols}), bias_md, plain_md({rows, cols}));
    pd = b_.make<dnnl::matmul>(d, attr_with(n.post), post_key(n.post), &prim);
  }
  const int wref = weight(n.in[1], plain_md(ws), pd.weights_desc());
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src2}, {DNNL_ARG_WEIGHTS, wref}};
  if (n.bias_value >= 0) args.push_back({DNNL_ARG_BIAS, weight(n.bias_value, bias_md)});
  const int dst = main_dst(n, dst_nd);
  args.push_back({DNNL_ARG_DST, b_.alias(dst, plain_md({rows, cols}))});
  b_.add_step(std::move(prim), std::move(args), pd, g_.describe(n.node));
  tensors_[n.out] = dst;
  return true;
}

namespace {
bool same_strides(const memory::desc& a, const memory::desc& b) {
  const auto& sa = a.data.format_desc.blocking.strides;
  const auto& sb = b.data.format_desc.blocking.strides;
  return std::equal(sa, sa + a.data.ndims, sb);
}
}  // namespace

// The src of a MatMul by constant weights as brgemm, oneDNN's fast matmul,
// takes it: a Transpose folded into the src (ViT's [1, seq, dim] read as
// [seq, 1, dim]) leaves a permuted layout, for which oneDNN picks its
// gemm-based matmul, 3-4 times slower. When only size-1 dims moved, the
// bytes are row-major already and only the description changes; otherwise a
// reorder into row-major comes first if brgemm would take that.
int Lowering::row_major_src(const INode& n, int src, const Dims& shape, const memory::desc& wmd,
                            const memory::desc& bias_md, const memory::desc& dst_md) {
  const memory::desc md = b_.md(src);
  const memory::desc row_major = plain_md(shape);
  if (is_blocked(md)) return src;
  // Equal to oneDNN but for the strides of size-1 dims, which its brgemm
  // matmul still rejects: the same bytes, described row-major.
  if (md == row_major) return same_strides(md, row_major) ? src : b_.alias(src, row_major);
  auto impl = [&](const memory::desc& s) -> std::string {
    try {
      return dnnl::matmul::primitive_desc(dnnl::matmul::desc(s, wmd, bias_md, dst_md),
                                          attr_with(n.post), engine())
          .impl_info_str();
    } catch (const dnnl::error&) {
      return "";
    }
  };
  auto brgemm = [](const std::string& name) { return name.rfind("brg", 0) == 0; };
  if (brgemm(impl(md)) || !brgemm(impl(row_major))) return src;
  return b_.as_md(src, row_major);
}

namespace {
// The plain format tag `md` (dense, its dims in some order) has among those a
// matmul takes, if any.
std::optional<memory::format_tag> matmul_tag(const memory::desc& md) {
  using tag = memory::format_tag;
  static const std::vector<std::vector<tag>> by_rank = {
      {},
      {},
      {tag::ab, tag::ba},
      {tag::abc, tag::acb, tag::bac},
      {tag::abcd, tag::abdc, tag::acbd, tag::adbc},
      {tag::abcde, tag::abced, tag::acbde},
      {tag::abcdef, tag::abcdfe, tag::acbdef}};
  const int rank = md.data.ndims;
  if (rank < 2 || rank > 6 || is_blocked(md)) return std::nullopt;
  for (tag t : by_rank[rank])
    if (memory::desc(md.dims(), memory::data_type::f32, t) == md) return t;
  return std::nullopt;
}
}  // namespace

// A MatMul of two activations (attention's q*k^T and probs*v, whose shapes
// change at every decoder step) in an instance of a shape-polymorphic
// partition: the backend's loop over oneDNN's sgemm (steps::BatchGemm) when
// the result is row-major and at most a constant scale follows it, else one primitive with runtime
// dims (oneDNN's gemm-based matmul). Either serves every shape, where a primitive for the shapes
// would need new code (brgemm's) for each; the loop also needs no memory objects, which an instance
// derived for each new cache length would otherwise make. Not when the batch dims broadcast or a
// layout is not a plain one they take; false then, and nothing was added.
bool Lowering::lower_matmul_any_shape(const INode& n, int src, int wref,
                                      const memory::desc& dst_md) {
  const std::optional<memory::format_tag> st = matmul_tag(b_.md(src)), wt = matmul_tag(b_.md(wref)),
                                          dt = matmul_tag(dst_md);
  if (n.bias_value >= 0 || !st || !wt || !dt) return false;
  const memory::dims sd = b_.md(src).dims(), wd = b_.md(wref).dims();
  for (size_t i = 0; i + 2 < sd.size(); ++i)
    if (sd[i] != wd[i]) return false;
  const dnnl_memory_desc_t& y = dst_md.data;
  const bool rows = y.dims[y.ndims - 1] == 1 || y.format_desc.blocking.strides[y.ndims - 1] == 1;
  const bool scaled = n.post.size() == 1 && n.post[0].kind == PostOp::kEltwise &&
                      n.post[0].alg == algorithm::eltwise_linear && n.post[0].beta == 0;
  if (rows && (n.post.empty() || scaled)) {
    const int dst = main_dst(n, dst_md);
    b_.add_batch_gemm(src, wref, dst, scaled ? n.post[0].alpha : 1.f, g_.describe(n.node));
    tensors_[n.out] = dst;
    return true;
  }
  const memory::dims any(sd.size(), DNNL_RUNTIME_DIM_VAL);
  const auto f32 = memory::data_type::f32;
  dnnl::matmul::desc d(memory::desc(any, f32, *st), memory::desc(any, f32, *wt),
                       memory::desc(any, f32, *dt));
  dnnl::primitive prim;
  dnnl::matmul::primitive_desc pd;
  try {
    pd = b_.make<dnnl::matmul>(d, attr_with(n.post), post_key(n.post), &prim);
  } catch (const dnnl::error&) {
    return false;
  }
  const int dst = main_dst(n, dst_md);
  b_.add_step(prim, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}, {DNNL_ARG_DST, dst}}, pd,
              g_.describe(n.node));
  tensors_[n.out] = dst;
  return true;
}

void Lowering::lower_pool(const INode& n) {
  sdk::NodeRef node = g_.node(n.node);
  // An int8 group (QuantGroup) pools the quantized input into its output's
  // type; its post-ops dequantize and quantize again.
  const int x = n.quant ? n.quant->x : n.in[0];
  const Dims& xs = g_.shape(x);
  const Dims& ys = g_.shape(n.out);
  const bool global = n.op == "GlobalAveragePool" || n.op == "GlobalMaxPool";
  Window w;
  if (global) {
    for (size_t i = 2; i < xs.size(); ++i) {
      w.kernel.push_back(xs[i]);
      w.strides.push_back(1);
      w.dilation.push_back(0);
      w.pad_l.push_back(0);
      w.pad_r.push_back(0);
    }
  } else {
    w = window(g_, n.node, xs, ys, node.attr_ints("kernel_shape"), n.pad_before);
  }
  const bool is_max = n.op == "MaxPool" || n.op == "GlobalMaxPool";
  const algorithm alg = is_max ? algorithm::pooling_max
                        : node.attr_int("count_include_pad", 0) != 0 || !n.pad_before.empty()
                            ? algorithm::pooling_avg_include_padding
                            : algorithm::pooling_avg_exclude_padding;
  dnnl::primitive prim;
  // int8: a maximum in the input's type (requantized after), an average
  // straight to the output's through its post-ops.
  // A MaxPool of int8 or uint8 (no group) keeps the type.
  const bool requantized = n.quant && n.post.empty();
  const memory::data_type out_type = *data_type_of(requantized ? n.quant->x : n.out);
  const memory::desc dst_md = n.quant || out_type != memory::data_type::f32
                                  ? memory::desc(to_dims(ys), out_type, memory::format_tag::any)
                                  : any_md(ys);
  auto make = [&](int src) {
    dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, b_.md(src), dst_md,
                                     w.strides, w.kernel, w.dilation, w.pad_l, w.pad_r);
    if (!n.post.empty())
      return b_.make<dnnl::pooling_v2_forward>(d, attr_with(n.post), post_key(n.post), &prim);
    return b_.make<dnnl::pooling_v2_forward>(d, b_.attr(), "", &prim);
  };
  int src = ref_of(x);
  dnnl::pooling_v2_forward::primitive_desc pd;
  try {
    pd = make(src);
  } catch (const dnnl::error&) {
    // oneDNN pools 8-bit integers channels-last only (else its reference kernel).
    const bool int8 = b_.md(src).data_type() != memory::data_type::f32;
    src = int8 && xs.size() == 4
              ? b_.as_md(src, memory::desc(to_dims(xs), b_.md(src).data_type(),
                                           memory::format_tag::nhwc))
              : b_.as_plain(src, xs);
    pd = make(src);
  }
  const int dst = add_step_to_new(n.out, prim, {{DNNL_ARG_SRC, src}}, pd,
                                  g_.describe(n.node) + (n.quant ? " (int8)" : ""));
  if (requantized) requantize(n, dst);
}

void Lowering::lower_batch_norm(const INode& n) {
  if (n.concat >= 0) {
    if (lower_concat_norm(n)) return;
    lower_concat(f_.nodes[n.concat]);  // two steps, as unfused
  }
  const Dims& xs = g_.shape(n.in[0]);
  const float eps = g_.node(n.node).attr_float("epsilon", 1e-5f);
  const int src = b_.dense(ref_of(n.in[0]));
  auto flags = dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
               dnnl::normalization_flags::use_shift;
  if (!n.post.empty()) flags |= dnnl::normalization_flags::fuse_norm_relu;  // absorb_relu's
  dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, b_.md(src), eps,
                                            flags);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::batch_normalization_forward>(d, b_.attr(), "", &prim);
  const memory::desc c = plain_md({xs[1]});
  add_step_to_new(n.out, prim,
                  {{DNNL_ARG_SRC, src},
                   {DNNL_ARG_SCALE, weight(n.in[1], c)},
                   {DNNL_ARG_SHIFT, weight(n.in[2], c)},
                   {DNNL_ARG_MEAN, weight(n.in[3], c)},
                   {DNNL_ARG_VARIANCE, weight(n.in[4], c)}},
                  pd, g_.describe(n.node));
}

bool Lowering::lower_concat_norm(const INode& n) {
  const INode& cat = f_.nodes[n.concat];
  const Dims& out = g_.shape(n.out);
  if (out.size() < 3 || out.size() > 5) return false;
  // Each input read as it is: channels innermost and dense, so input i's
  // pixel p is the run p * C_i .. + C_i, written at p * C + (its offset).
  std::vector<std::pair<int, int>> args;
  for (size_t i = 0; i < cat.in.size(); ++i) {
    const int r = ref_of(cat.in[i]);
    if (b_.md(r) != channels_last_md(g_.shape(cat.in[i]))) return false;
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), r});
  }
  // The normalization as y = x * scale + shift per channel.
  const int64_t channels = out[1];
  const float* gamma = g_.f32(n.in[1]);
  const float* beta = g_.f32(n.in[2]);
  const float* mean = g_.f32(n.in[3]);
  const float* var = g_.f32(n.in[4]);
  const float eps = g_.node(n.node).attr_float("epsilon", 1e-5f);
  std::vector<float> scale(static_cast<size_t>(channels)), shift(scale.size());
  for (int64_t c = 0; c < channels; ++c) {
    const double f = gamma[c] / std::sqrt(static_cast<double>(var[c]) + eps);
    scale[c] = static_cast<float>(f);
    shift[c] = static_cast<float>(beta[c] - mean[c] * f);
  }
  const memory::desc cmd = plain_md({channels});
  args.push_back({DNNL_ARG_SCALE, b_.const_ref(cmd, scale.data(), node_tag("cns", n.node))});
  args.push_back({DNNL_ARG_SHIFT, b_.const_ref(cmd, shift.data(), node_tag("cnb", n.node))});
  const int dst = b_.new_arena(channels_last_md(out));
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_concat_norm(std::move(args), /*relu=*/!n.post.empty(),  // absorb_relu's
                     g_.describe(cat.node) + " + " + g_.describe(n.node));
  tensors_[n.out] = dst;
  return true;
}

void Lowering::lower_layer_norm(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const float eps = n.op == "LayerNorm" ? n.eps : g_.node(n.node).attr_float("epsilon", 1e-5f);
  const int src = b_.as_plain(ref_of(n.in[0]), xs);
  const int64_t c = xs.back();
  std::vector<float> scale(static_cast<size_t>(c), 1.f), shift(static_cast<size_t>(c), 0.f);
  if (n.in.size() > 1 && n.in[1] >= 0)
    std::memcpy(scale.data(), g_.f32(n.in[1]), c * sizeof(float));
  if (n.in.size() > 2 && n.in[2] >= 0)
    std::memcpy(shift.data(), g_.f32(n.in[2]), c * sizeof(float));
  const int scale_ref = b_.const_ref(plain_md({c}), scale.data(), node_tag("lns", n.node));
  const int shift_ref = b_.const_ref(plain_md({c}), shift.data(), node_tag("lnb", n.node));
  // In an instance of a shape-polymorphic partition, the backend's loop,
  // which takes any shape (as lower_softmax's).
  const int64_t elements = sdk::element_count(xs);
  if (b_.shared() && elements > 0 && b_.md(src) == plain_md(xs)) {
    const int dst = b_.new_arena(plain_md(xs));
    b_.add_row_layer_norm(src, scale_ref, shift_ref, dst, eps, g_.describe(n.node));
    tensors_[n.out] = dst;
    return;
  }
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_inference, b_.md(src), eps,
                                            flags);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::layer_normalization_forward>(d, b_.attr(), "", &prim);
  add_step_to_new(n.out, prim,
                  {{DNNL_ARG_SRC, src}, {DNNL_ARG_SCALE, scale_ref}, {DNNL_ARG_SHIFT, shift_ref}},
                  pd, g_.describe(n.node));
}

void Lowering::lower_softmax(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const int64_t rank = static_cast<int64_t>(xs.size());
  int64_t axis = g_.node(n.node).attr_int("axis", g_.node(n.node).opset() >= 13 ? -1 : 1);
  if (axis < 0) axis += rank;
  if (rank == 0) axis = 0;
  int src = b_.as_plain(ref_of(n.in[0]), xs);
  // An instance of a shape-polymorphic partition meets a new row length at
  // each new shape (a decoder's attention over a cache one token longer
  // every run, an encoder a new sequence length at every request). A
  // softmax over the innermost axis is done by a loop that takes any length,
  // in parallel over blocks of rows, instead of oneDNN generating a kernel per
  // length (about 0.1 ms each, paid once per new length): every instance then
  // has the same steps, and a new length's is derived (derive.hpp).
  const int64_t elements = sdk::element_count(xs);
  if (b_.shared() && rank > 0 && axis == rank - 1 && elements > 0 &&
      b_.md(src) == plain_md(xs)) {
    const int dst = b_.new_arena(plain_md(xs));
    b_.add_loop(src, dst, steps::RowSoftmax{}, g_.describe(n.node));
    tensors_[n.out] = dst;
    return;
  }
  if (rank > 1 && axis != rank - 1) {
    // oneDNN's JIT softmax wants the axis innermost; over another axis of a
    // row-major tensor it has only its reference kernel. The axis is made
    // innermost (the other dims keep their order) where that gives a JIT one.
    memory::dims strides(static_cast<size_t>(rank));
    int64_t stride = 1;
    strides[static_cast<size_t>(axis)] = stride;
    stride *= xs[static_cast<size_t>(axis)];
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (d == axis) continue;
      strides[static_cast<size_t>(d)] = stride;
      stride *= xs[static_cast<size_t>(d)];
    }
    const memory::desc inner(to_dims(xs), memory::data_type::f32, strides);
    try {
      dnnl::softmax_forward::primitive_desc probe(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, inner,
                                      static_cast<int>(axis)),
          b_.attr(), engine());
      if (!is_reference_impl(probe.impl_info_str())) src = b_.as_md(src, inner);
    } catch (const dnnl::error&) {
    }
  }
  dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, b_.md(src),
                                static_cast<int>(axis));
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::softmax_forward>(d, b_.attr(), "", &prim);
  add_step_to_new(n.out, prim, {{DNNL_ARG_SRC, src}}, pd, g_.describe(n.node));
}

namespace {
// The layout a copied concat writes: the inputs' common dense dim order
// (each input laid out as the first), else row-major.
memory::desc common_order_md(const std::vector<memory::desc>& mds, const std::vector<Dims>& shapes,
                             const Dims& out) {
  if (mds.empty()) return plain_md(out);
  if (is_blocked(mds[0])) return plain_md(out, mds[0].data_type());
  for (size_t i = 0; i < mds.size(); ++i)
    if (layout_like(mds[0], shapes[i]) != mds[i]) return plain_md(out, mds[0].data_type());
  return layout_like(mds[0], out);
}
}  // namespace

// A Concat that appends channels of zeros to one tensor (a TFLite model's
// channel Pad, as tf2onnx writes it before a residual Add), where that
// tensor is in a channel-blocked layout whose last block has room for them:
// the same bytes described with more channels, the new ones being the
// layout's padding, which stays 0 (oneDNN's primitives and the backend's
// loops write zeros there). The ref, or -1 if it is not one.
int Lowering::zero_padded_channels(const INode& n, int64_t axis) {
  if (axis != 1 || n.in.size() < 2 || g_.shape(n.out).size() < 3 || g_.is_const(n.in[0])) return -1;
  for (size_t i = 1; i < n.in.size(); ++i) {
    const int v = n.in[i];
    if (!g_.is_const(v) || g_.values[v].dtype != BP_DTYPE_FLOAT32) return -1;
    const float* z = g_.f32(v);
    const int64_t count = sdk::element_count(g_.shape(v));
    if (!std::all_of(z, z + count, [](float f) { return f == 0.f; })) return -1;
  }
  const int src = ref_of(n.in[0]);
  const memory::desc& md = b_.md(src);
  const auto& blk = md.data.format_desc.blocking;
  if (md.data.format_kind != dnnl_blocked || blk.inner_nblks != 1 || blk.inner_idxs[0] != 1 ||
      md.data.offset0 != 0 || md.data_type() != memory::data_type::f32 ||
      md.data.padded_dims[1] < g_.shape(n.out)[1])
    return -1;
  const memory::desc wider = layout_like(md, g_.shape(n.out));
  if (wider.get_size() != md.get_size()) return -1;
  return b_.alias(src, wider);
}

void Lowering::lower_concat(const INode& n) {
  const int64_t rank = static_cast<int64_t>(g_.shape(n.out).size());
  int64_t axis = g_.node(n.node).attr_int("axis", 0);
  if (axis < 0) axis += rank;
  if (const int padded = zero_padded_channels(n, axis); padded >= 0) {
    tensors_[n.out] = padded;
    return;
  }
  std::vector<int> srcs;
  std::vector<memory::desc> mds;
  for (int v : n.in) {
    srcs.push_back(b_.dense(ref_of(v)));
    mds.push_back(b_.md(srcs.back()));
  }
  // Mixed layouts: bring every input to the first one's.
  for (size_t i = 1; i < srcs.size(); ++i)
    if (is_blocked(mds[0]) != is_blocked(mds[i]) ||
        (is_blocked(mds[0]) && mds[0].data.format_desc.blocking.inner_blks[0] !=
                                   mds[i].data.format_desc.blocking.inner_blks[0])) {
      for (size_t j = 0; j < srcs.size(); ++j) {
        srcs[j] = b_.as_plain(srcs[j], g_.shape(n.in[j]));
        mds[j] = b_.md(srcs[j]);
      }
      break;
    }
  // In an instance of a shape-polymorphic partition, plain tensors (a
  // key/value cache and its new entries) are copied here: a oneDNN concat
  // would be made for every cache length. So are they beside an empty one
  // (a decoder's first step), which oneDNN's concat does not take.
  int empty = -1;
  for (int v : n.in)
    if (sdk::element_count(g_.shape(v)) == 0) empty = v;
  bool plain = b_.shared() || empty >= 0;
  for (const memory::desc& m : mds) plain = plain && !is_blocked(m);
  if (!plain && empty >= 0) throw fail("input '" + g_.value_name(empty) + "' is empty");
  // Plain inputs concatenated by copies, without a oneDNN primitive, into
  // the inputs' common dim order (channels-last stays channels-last: the
  // next convolution needs no reorder), else row-major.
  auto copy_concat = [&] {
    // (Its copies move floats: an int8 Concat runs as its float operators.)
    if (mds[0].data_type() != memory::data_type::f32)
      throw fail("concatenating by copies takes float tensors");
    std::vector<Dims> shapes;
    for (int v : n.in) shapes.push_back(g_.shape(v));
    const int dst = b_.new_arena(common_order_md(mds, shapes, g_.shape(n.out)));
    std::vector<std::pair<int, int>> args;
    for (size_t i = 0; i < srcs.size(); ++i)
      args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]});
    args.push_back({DNNL_ARG_DST, dst});
    b_.add_copy_concat(std::move(args), static_cast<int>(axis), g_.describe(n.node));
    tensors_[n.out] = dst;
  };
  // The copies move floats: integers in an instance, none of them empty,
  // take oneDNN's concat, made for their shapes.
  if (plain && empty < 0 && mds[0].data_type() != memory::data_type::f32) plain = false;
  if (plain) return copy_concat();
  dnnl::primitive prim;
  dnnl::concat::primitive_desc pd;
  try {
    pd = b_.make_concat(static_cast<int>(axis), mds, &prim);
  } catch (const dnnl::error&) {
    // Strided inputs (a transposed key) get oneDNN's "ref:any" concat, even
    // when the strides differ only at dims of size 1 (which oneDNN counts as
    // equal to plain, so as_plain keeps them): plain, described as plain.
    for (size_t j = 0; j < srcs.size(); ++j) {
      const Dims& shape = g_.shape(n.in[j]);
      srcs[j] = b_.alias(b_.as_plain(srcs[j], shape), plain_md(shape, mds[j].data_type()));
      mds[j] = b_.md(srcs[j]);
    }
    try {
      pd = b_.make_concat(static_cast<int>(axis), mds, &prim);
    } catch (const ReferenceImpl&) {
      // oneDNN has only "ref:any" even for these plain inputs (ViT's class
      // token before its patches: 1x1xC and 1xNxC along axis 1): copies.
      return copy_concat();
    }
  }
  const int dst = b_.new_arena(pd.dst_desc());
  std::vector<std::pair<int, int>> args;
  for (size_t i = 0; i < srcs.size(); ++i)
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]});
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_step(prim, std::move(args), pd, g_.describe(n.node));
  c_.steps.back().op = steps::Primitive{static_cast<int>(axis)};
  tensors_[n.out] = dst;
}

void Lowering::lower_reduce(const INode& n) {
  sdk::NodeRef node = g_.node(n.node);
  const Dims& xs = g_.shape(n.in[0]);
  const int64_t rank = static_cast<int64_t>(xs.size());
  std::vector<int64_t> axes;
  if (n.in.size() > 1 && n.in[1] >= 0) axes = *g_.ints(n.in[1]);
  else axes = node.attr_ints("axes", {});
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
  Dims kept = xs;
  for (int64_t a : axes) kept[static_cast<size_t>(a < 0 ? a + rank : a)] = 1;
  // Every reduced axis has one element (a shape-polymorphic partition's
  // instance may meet such a shape): the result is the input, where oneDNN
  // makes no reduction whose source and destination are alike.
  if (kept == xs) {
    tensors_[n.out] = b_.reshaped(ref_of(n.in[0]), g_.shape(n.out));
    return;
  }
  // In an instance of a shape-polymorphic partition, a mean over the
  // innermost dim (a LayerNormalization that a QDQ model quantizes between
  // its operators) is a loop that takes any shape (as lower_softmax's).
  const int64_t elements = sdk::element_count(xs);
  if (b_.shared() && n.op == "ReduceMean" && rank > 0 && kept[rank - 1] == 1 &&
      std::equal(kept.begin(), kept.end() - 1, xs.begin()) && elements > 0 &&
      b_.md(ref_of(n.in[0])) == plain_md(xs)) {
    const int dst = b_.new_arena(plain_md(kept));
    b_.add_loop(ref_of(n.in[0]), dst, steps::RowMean{}, g_.describe(n.node));
    tensors_[n.out] = b_.reshaped(dst, g_.shape(n.out));
    return;
  }
  const algorithm alg = n.op == "ReduceMean"  ? algorithm::reduction_mean
                        : n.op == "ReduceSum" ? algorithm::reduction_sum
                                              : algorithm::reduction_max;
  int src = b_.unblocked(ref_of(n.in[0]));
  dnnl::primitive prim;
  auto make = [&] {
    dnnl::reduction::desc d(alg, b_.md(src), plain_md(kept), 0.f, 0.f);
    return b_.make<dnnl::reduction>(d, b_.attr(), "", &prim);
  };
  dnnl::reduction::primitive_desc pd;
  try {
    pd = make();
  } catch (const dnnl::error&) {  // e.g. channels-last into plain: only a reference kernel
    src = b_.as_plain(src, xs);
    pd = make();
  }
  const int dst = add_step_to_new(n.out, prim, {{DNNL_ARG_SRC, src}}, pd, g_.describe(n.node));
  tensors_[n.out] = b_.reshaped(dst, g_.shape(n.out));
}

// Binary ops try layouts in turn and take the first oneDNN has an optimised
// kernel for (impl_check.hpp): its jit kernels want both sources alike, a
// blocked one only in the ISA's own block size, and a broadcast operand
// only in some positions. So: the full operand as it is, the broadcast one
// given its layout (a RegNet squeeze-excite Mul: a 1xCx1x1 scale of a
// blocked 1xCxHxW tensor, which ran "ref:any" when the scale stayed plain);
// both channels-last; both plain; both plain, reshaped so that runs of dims
// that do and do not broadcast are merged (binary_shapes). Candidates are
// tried on descriptors alone; only the one taken adds reorders.
void Lowering::lower_binary(const INode& n) {
  const Dims& ys = g_.shape(n.out);
  const size_t rank = ys.size();
  int a = n.in[0], b = n.in[1];
  // A constant scalar operand: one eltwise_linear pass.
  for (int v : {a, b})
    if (auto p = linear_of(g_, n, v); p && g_.shape(v) == ys && !g_.is_const(v))
      return lower_eltwise(v, n.out, *p);
  if (left_pad(g_.shape(a), rank) != ys) std::swap(a, b);  // commutative (checked)
  const Dims as = left_pad(g_.shape(a), rank), bs = left_pad(g_.shape(b), rank);
  const algorithm alg = binary_algorithm(n.op);
  if (n.in[0] == n.in[1]) b = a;
  const int s0 = b_.reshaped(b_.dense(ref_of(a)), as);
  const int s1 = b_.reshaped(b_.dense(ref_of(b)), bs);
  // In an instance of a shape-polymorphic partition, an operation on
  // dense row-major operands is done by a loop that takes any shape rather
  // than by a oneDNN kernel generated for each new one (as lower_softmax).
  const int64_t elements = sdk::element_count(ys);
  bool broadcasts = as == ys;  // b to a's shape, a dim of 1 at a time
  for (size_t d = 0; d < rank && broadcasts; ++d) broadcasts = bs[d] == ys[d] || bs[d] == 1;
  if (b_.shared() && rank > 0 && elements > 0 && broadcasts && b_.md(s0) == plain_md(as) &&
      b_.md(s1) == plain_md(bs)) {
    const int dst = b_.new_arena(plain_md(ys));
    b_.add_small_binary(s0, s1, dst, alg, g_.describe(n.node));
    tensors_[n.out] = dst;
    return;
  }
  std::vector<std::pair<memory::desc, memory::desc>> candidates;
  candidates.push_back({b_.md(s0), layout_like(b_.md(s0), bs)});
  if (rank >= 3 && rank <= 5) {
    const memory::desc cl = channels_last_md(as);
    candidates.push_back({cl, layout_like(cl, bs)});
  }
  candidates.push_back({plain_md(as), plain_md(bs)});
  for (const auto& [ca, cb] : binary_shapes(as, bs))
    candidates.push_back({plain_md(ca), plain_md(cb)});
  dnnl::primitive prim;
  dnnl::binary::primitive_desc pd;
  std::string why;  // the last candidate's failure
  bool reference = false;
  for (const auto& [m0, m1] : candidates) {
    try {
      dnnl::binary::desc d(alg, m0, m1, m0);
      pd = b_.make<dnnl::binary>(d, b_.attr(), "", &prim);
    } catch (const dnnl::error& e) {
      why = e.what();
      reference = dynamic_cast<const ReferenceImpl*>(&e) != nullptr;
      continue;
    }
    const int x0 =
        m0.dims() == b_.md(s0).dims() ? b_.as_md(s0, m0) : b_.alias(b_.as_plain(s0, as), m0);
    const int x1 =
        m1.dims() == b_.md(s1).dims() ? b_.as_md(s1, m1) : b_.alias(b_.as_plain(s1, bs), m1);
    const int dst = add_step_to_new(n.out, prim, {{DNNL_ARG_SRC_0, x0}, {DNNL_ARG_SRC_1, x1}}, pd,
                                    g_.describe(n.node));
    if (m0.dims() != b_.md(s0).dims()) tensors_[n.out] = b_.alias(dst, plain_md(ys));
    return;
  }
  if (reference) throw ReferenceImpl(why);
  throw fail(why);
}

void Lowering::lower_transpose(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const int rank = static_cast<int>(xs.size());
  std::vector<int64_t> perm = g_.node(n.node).attr_ints("perm", {});
  if (perm.empty())
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  // oneDNN's permutation maps input axis i to output axis p[i].
  std::vector<int> p(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) p[static_cast<size_t>(perm[i] < 0 ? perm[i] + rank : perm[i])] = i;
  int src = b_.unblocked(ref_of(n.in[0]));
  if (rank <= 1) {
    tensors_[n.out] = src;
    return;
  }
  tensors_[n.out] = b_.alias(src, b_.md(src).permute_axes(p));
}

// ---- outputs ------------------------------------------------------------------

void Lowering::bind_outputs() {
  std::set<int> bound;
  for (size_t k = 0; k < g_.view().num_outputs; ++k) {
    const int v = g_.view().outputs[k];
    c_.output_bytes.push_back(bytes(v));
    const int r = ref_of(v);
    const int b = c_.refs[r].buffer;
    const memory::desc plain = plain_md(g_.shape(v), b_.md(r).data_type());
    if (b >= 0 && c_.buffers[b].kind == Buffer::kArena && !bound.count(b) && b_.md(r) == plain &&
        c_.buffers[b].size == bytes(v)) {
      c_.buffers[b].kind = Buffer::kOutput;
      c_.buffers[b].index = k;
      bound.insert(b);
      continue;
    }
    const int out = b_.add_ref(b_.new_buffer(Buffer::kOutput, k, bytes(v)), plain);
    if (c_.refs[r].constant) throw fail("output '" + g_.value_name(v) + "' is a constant");
    b_.copy(r, out);
  }
}

}  // namespace backplane::onednn
