// lowering_data.cpp — the lowering of activations that are eltwise chains,
// PRelu, and the data-movement ops (Slice, Split, Pad, Gather): windows of a
// tensor copied by reorders, kept in the tensor's own (blocked) layout where
// oneDNN can describe the window in it, so no partition boundary and no
// round trip through the plain layout is needed around them.
#include "onednn/lowering.hpp"

#include "onednn/support.hpp"

#include <algorithm>
#include <vector>

namespace backplane::onednn {

using dnnl::memory;

namespace {

// The axis attribute of node n normalised to [0, rank).
int64_t axis_attr(ViewInfo& g, int n, int64_t fallback, size_t rank) {
  int64_t a = g.node(n).attr_int("axis", fallback);
  if (a < 0) a += static_cast<int64_t>(rank);
  if (a < 0 || a >= static_cast<int64_t>(rank)) throw fail(g.describe(n) + ": axis out of range");
  return a;
}

}  // namespace

// ---- activations -----------------------------------------------------------------

void Lowering::lower_activation(int x, int y, const std::vector<PostOp>& chain) {
  lower_eltwise(x, y, chain[0]);
  // The rest of the chain in place over the first step's destination.
  const int r = tensors_[y];
  for (size_t i = 1; i < chain.size(); ++i) {
    const PostOp& p = chain[i];
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, p.alg, b_.md(r), p.alpha,
                                  p.beta);
    dnnl::primitive prim;
    auto pd = b_.make<dnnl::eltwise_forward>(d, b_.attr(), "", &prim);
    b_.add_step(prim, {{DNNL_ARG_SRC, r}, {DNNL_ARG_DST, r}}, pd, "eltwise");
  }
}

// y = x < 0 ? slope * x : x, the slope broadcast numpy-style (one oneDNN
// prelu primitive, which takes the slope in the layout it chooses).
void Lowering::lower_prelu(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const Dims ss = left_pad(g_.shape(n.in[1]), xs.size());
  int src = b_.dense(ref_of(n.in[0]));
  // oneDNN 2.6's jit PReLU takes a permuted layout (a Transpose's view:
  // [1,2,2,2] by 0,2,3,1) for another and applies the slopes to the wrong
  // elements, silently: plain, channels-last or blocked only.
  const memory::desc& m = b_.md(src);
  if (!is_blocked(m) && m != plain_md(xs) &&
      (xs.size() < 3 || xs.size() > 5 || m != channels_last_md(xs)))
    src = b_.as_plain(src, xs);
  dnnl::prelu_forward::desc d(dnnl::prop_kind::forward_inference, b_.md(src), any_md(ss));
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::prelu_forward>(d, b_.attr(), "", &prim);
  const int w = b_.const_reordered(plain_md(ss), g_.f32(n.in[1]), pd.weights_desc(),
                                   "prelu" + std::to_string(n.in[1]));
  add_step_to_new(n.out, prim, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}}, pd,
                  g_.describe(n.node));
}

// The view's output shape from the input's by oneDNN resampling (the
// support check made sure its coordinates are ONNX's).
void Lowering::lower_resize(const INode& n) {
  const bool linear = g_.node(n.node).attr_string("mode", "nearest") == "linear";
  const auto alg =
      linear ? dnnl::algorithm::resampling_linear : dnnl::algorithm::resampling_nearest;
  const Dims& ys = g_.shape(n.out);
  dnnl::primitive prim;
  auto make = [&](int src) {
    dnnl::resampling_forward::desc d(dnnl::prop_kind::forward_inference, alg, b_.md(src),
                                     any_md(ys));
    return b_.make<dnnl::resampling_forward>(d, b_.attr(), "", &prim);
  };
  int src = b_.dense(ref_of(n.in[0]));
  dnnl::resampling_forward::primitive_desc pd;
  try {
    pd = make(src);
  } catch (const dnnl::error&) {
    src = b_.as_plain(src, g_.shape(n.in[0]));
    pd = make(src);
  }
  add_step_to_new(n.out, prim, {{DNNL_ARG_SRC, src}}, pd, g_.describe(n.node));
}

// ---- windows -----------------------------------------------------------------------

int Lowering::copy_window(int ref, const Dims& offsets, const Dims& sizes) {
  int src = b_.dense(ref);
  if (b_.dims_of(src) == sizes) return src;
  memory::desc sub;
  try {
    sub = b_.md(src).submemory_desc(to_dims(sizes), to_dims(offsets));
  } catch (const dnnl::error&) {
    // A window that cuts a block of a blocked layout: take it from plain.
    src = b_.as_plain(src, b_.dims_of(src));
    sub = b_.md(src).submemory_desc(to_dims(sizes), to_dims(offsets));
  }
  const int dst = b_.new_arena(layout_like(b_.md(src), sizes));
  b_.copy(b_.alias(src, sub), dst);
  return dst;
}

void Lowering::lower_slice(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const int64_t rank = static_cast<int64_t>(xs.size());
  const std::vector<int64_t> starts = *g_.ints(n.in[1]), ends = *g_.ints(n.in[2]);
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (n.in.size() > 3 && n.in[3] >= 0) axes = *g_.ints(n.in[3]);
  else
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (n.in.size() > 4 && n.in[4] >= 0) steps = *g_.ints(n.in[4]);
  Dims offsets(xs.size(), 0), sizes = xs, step(xs.size(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (a < 0 || a >= rank) throw fail(g_.describe(n.node) + ": axis out of range");
    const int64_t dim = xs[static_cast<size_t>(a)];
    auto clamp = [dim](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + dim : v, 0, dim); };
    const int64_t s = clamp(starts[i]), e = clamp(ends[i]);
    offsets[static_cast<size_t>(a)] = s;
    step[static_cast<size_t>(a)] = steps[i];
    sizes[static_cast<size_t>(a)] = e > s ? (e - s + steps[i] - 1) / steps[i] : 0;
  }
  if (sizes != g_.shape(n.out)) throw fail(g_.describe(n.node) + ": output shape mismatch");
  if (step == Dims(xs.size(), 1)) {
    tensors_[n.out] = copy_window(ref_of(n.in[0]), offsets, sizes);
    return;
  }
  // Steps: a strided window of the plain layout (Swin's patch merging).
  const int src = b_.as_plain(b_.dense(ref_of(n.in[0])), xs);
  Dims strides(xs.size(), 1);
  for (size_t i = xs.size(); i-- > 1;) strides[i - 1] = strides[i] * xs[i];
  int64_t offset = 0;
  Dims wide(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    offset += offsets[i] * strides[i];
    wide[i] = strides[i] * step[i];
  }
  memory::desc window;
  try {
    window = memory::desc(to_dims(sizes), memory::data_type::f32, to_dims(wide));
  } catch (const dnnl::error&) {
    // oneDNN describes no layout whose strided axis spans past the stride of
    // the one outside it ([2, 3] by a step of 2 along the last: strides 3
    // and 2 over 2 elements each).
    tensors_[n.out] = slice_by_steps(src, xs, offsets, step, sizes);
    return;
  }
  window.data.offset0 = offset;
  const int dst = b_.new_arena(plain_md(sizes));
  b_.copy(b_.alias(src, window), dst);
  tensors_[n.out] = dst;
}

// The same slice in copies oneDNN can describe: the window of the slice's
// extent along every axis, then per stepped axis, that axis padded to
// step * size (what is past the window is never read) and every step-th
// element of it taken.
int Lowering::slice_by_steps(int src, const Dims& xs, const Dims& offsets, const Dims& step,
                             const Dims& sizes) {
  Dims extent = sizes;
  for (size_t a = 0; a < xs.size(); ++a)
    if (step[a] != 1) extent[a] = std::min(xs[a] - offsets[a], step[a] * sizes[a]);
  int cur = copy_window(src, offsets, extent);
  Dims dims = extent;
  for (size_t a = 0; a < dims.size(); ++a) {
    if (step[a] == 1) continue;
    Dims padded = dims;
    padded[a] = step[a] * sizes[a];
    if (padded[a] != dims[a]) {
      const int wide = b_.new_arena(plain_md(padded));
      b_.copy(
          b_.as_plain(cur, dims),
          b_.alias(wide, b_.md(wide).submemory_desc(to_dims(dims), memory::dims(dims.size(), 0))));
      cur = wide;
    } else {
      cur = b_.as_plain(cur, dims);
    }
    Dims strides(padded.size(), 1);
    for (size_t i = padded.size(); i-- > 1;) strides[i - 1] = strides[i] * padded[i];
    strides[a] *= step[a];
    dims[a] = sizes[a];
    const int taken = b_.new_arena(plain_md(dims));
    b_.copy(b_.alias(cur, memory::desc(to_dims(dims), memory::data_type::f32, to_dims(strides))),
            taken);
    cur = taken;
  }
  return cur;
}

// Each output is the window of its own extent along the axis, after the
// previous ones (the output shapes already say how the input splits).
void Lowering::lower_split(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const size_t axis = static_cast<size_t>(axis_attr(g_, n.node, 0, xs.size()));
  const int src = ref_of(n.in[0]);
  Dims offsets(xs.size(), 0);
  for (size_t i = 0; i < g_.num_out(n.node); ++i) {
    const int y = g_.out(n.node, i);
    const Dims& ys = g_.shape(y);
    if (ys.size() != xs.size() || offsets[axis] + ys[axis] > xs[axis])
      throw fail(g_.describe(n.node) + ": output shapes do not split the input");
    if (g_.used(y)) tensors_[y] = copy_window(src, offsets, ys);
    offsets[axis] += ys[axis];
  }
}

// Gather of constant indices along one axis: one window per index (runs of
// consecutive indices are one window); a scalar index drops the axis.
void Lowering::lower_gather(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const size_t axis = static_cast<size_t>(axis_attr(g_, n.node, 0, xs.size()));
  if (!g_.is_const(n.in[1])) {  // indices of the run (an embedding lookup): a gather step
    const int data = b_.as_plain(ref_of(n.in[0]), xs);
    const int dst = b_.new_arena(plain_md(g_.shape(n.out)));
    const int index_bytes = g_.values[n.in[1]].dtype == BP_DTYPE_INT64 ? 8 : 4;
    b_.add_gather(data, ref_of(n.in[1]), dst, static_cast<int>(axis), index_bytes,
                  g_.describe(n.node));
    tensors_[n.out] = dst;
    return;
  }
  std::vector<int64_t> idx = *g_.ints(n.in[1]);
  for (int64_t& i : idx) {
    if (i < -xs[axis] || i >= xs[axis]) throw fail(g_.describe(n.node) + ": index out of range");
    if (i < 0) i += xs[axis];
  }
  Dims gathered = xs;
  gathered[axis] = static_cast<int64_t>(idx.size());
  const int src = ref_of(n.in[0]);
  int dst = -1;
  for (size_t k = 0; k < idx.size();) {
    size_t e = k + 1;
    while (e < idx.size() && idx[e] == idx[e - 1] + 1) ++e;
    Dims offsets(xs.size(), 0), sizes = xs;
    offsets[axis] = idx[k];
    sizes[axis] = static_cast<int64_t>(e - k);
    if (k == 0 && e == idx.size()) {  // one run: the window is the result
      dst = copy_window(src, offsets, sizes);
      break;
    }
    if (dst < 0) dst = b_.new_arena(plain_md(gathered));
    const int from = b_.as_plain(src, xs);
    Dims at(xs.size(), 0);
    at[axis] = static_cast<int64_t>(k);
    b_.copy(b_.alias(from, b_.md(from).submemory_desc(to_dims(sizes), to_dims(offsets))),
            b_.alias(dst, b_.md(dst).submemory_desc(to_dims(sizes), to_dims(at))));
    k = e;
  }
  tensors_[n.out] = b_.reshaped(dst, g_.shape(n.out));
}

// GatherBlockQuantized (support.cpp's check_gather_block_quantized): the
// gather step over the 4-bit table as it is, dequantizing the rows it takes.
void Lowering::lower_gather_block_quantized(const INode& n) {
  const int dst = b_.new_arena(plain_md(g_.shape(n.out)));
  const int index_bytes = g_.values[n.in[1]].dtype == BP_DTYPE_INT64 ? 8 : 4;
  b_.add_nbits_gather(borrowed(n, 0), ref_of(n.in[1]), borrowed(n, 2), borrowed(n, 3), dst,
                      index_bytes, g_.node(n.node).attr_int("block_size", 128),
                      g_.describe(n.node));
  tensors_[n.out] = dst;
}

// MatMulNBits (support.cpp's check_matmul_nbits): the backend's loop over
// the weights as they are, 4-bit (steps::NBitsMatMul), for any rows.
void Lowering::lower_matmul_nbits(const INode& n) {
  const sdk::NodeRef node = g_.node(n.node);
  steps::NBitsMatMul op;
  op.k = node.attr_int("K", 0);
  op.n = node.attr_int("N", 0);
  op.block = node.attr_int("block_size", 0);
  const int src = b_.as_plain(ref_of(n.in[0]), g_.shape(n.in[0]));
  const int dst = b_.new_arena(plain_md(g_.shape(n.out)));
  b_.add_nbits_matmul(src, borrowed(n, 1), borrowed(n, 2), borrowed(n, 3), borrowed(n, 5), dst, op,
                      g_.describe(n.node));
  tensors_[n.out] = dst;
}

// Constant-mode Pad: negative pads crop first (a window); then, per padded
// axis, a concat of a constant slab of the pad value, the tensor, and
// another slab, in the tensor's layout where it can be described.
void Lowering::lower_pad(const INode& n) {
  const Dims& xs = g_.shape(n.in[0]);
  const size_t rank = xs.size();
  const PadSpec spec = pad_spec(g_, n.node, rank);
  const Dims &before = spec.before, &after = spec.after;
  const float value = spec.value;
  // Crop (negative pads).
  Dims offsets(rank, 0), sizes = xs;
  for (size_t a = 0; a < rank; ++a) {
    offsets[a] = std::max<int64_t>(-before[a], 0);
    sizes[a] = xs[a] - offsets[a] - std::max<int64_t>(-after[a], 0);
    if (sizes[a] <= 0) throw fail(g_.describe(n.node) + ": the pads crop everything");
  }
  int cur = copy_window(ref_of(n.in[0]), offsets, sizes);
  for (size_t a = 0; a < rank; ++a) {
    const int64_t lo = std::max<int64_t>(before[a], 0), hi = std::max<int64_t>(after[a], 0);
    if (lo == 0 && hi == 0) continue;
    cur = pad_axis(cur, static_cast<int>(a), lo, hi, value, n.node);
  }
  if (b_.dims_of(cur) != g_.shape(n.out))
    throw fail(g_.describe(n.node) + ": output shape mismatch");
  tensors_[n.out] = cur;
}

int Lowering::pad_axis(int cur, int axis, int64_t lo, int64_t hi, float value, int node) {
  auto slab = [&](int64_t extent, const memory::desc& like) {
    Dims s = b_.dims_of(cur);
    s[static_cast<size_t>(axis)] = extent;
    const std::vector<float> fill(static_cast<size_t>(sdk::element_count(s)), value);
    return b_.const_reordered(plain_md(s), fill.data(), layout_like(like, s));
  };
  auto make = [&](int src, dnnl::primitive* prim, std::vector<int>* srcs) {
    srcs->clear();
    if (lo > 0) srcs->push_back(slab(lo, b_.md(src)));
    srcs->push_back(src);
    if (hi > 0) srcs->push_back(slab(hi, b_.md(src)));
    std::vector<memory::desc> mds;
    for (int s : *srcs) mds.push_back(b_.md(s));
    return b_.make_concat(axis, mds, prim);
  };
  dnnl::primitive prim;
  std::vector<int> srcs;
  dnnl::concat::primitive_desc pd;
  try {
    try {
      pd = make(cur, &prim, &srcs);
    } catch (const dnnl::error&) {  // e.g. channel pads of a channel-blocked layout
      pd = make(b_.as_plain(cur, b_.dims_of(cur)), &prim, &srcs);
    }
  } catch (const ReferenceImpl&) {
    // oneDNN has only its reference concat for these layouts (a pad of H
    // and W of a small NCHW tensor): plain slabs and tensor, copied.
    const int plain = b_.as_plain(cur, b_.dims_of(cur));
    srcs.clear();
    if (lo > 0) srcs.push_back(slab(lo, b_.md(plain)));
    srcs.push_back(plain);
    if (hi > 0) srcs.push_back(slab(hi, b_.md(plain)));
    Dims out = b_.dims_of(plain);
    out[static_cast<size_t>(axis)] += lo + hi;
    const int dst = b_.new_arena(plain_md(out));
    std::vector<std::pair<int, int>> args;
    for (size_t i = 0; i < srcs.size(); ++i)
      args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]});
    args.push_back({DNNL_ARG_DST, dst});
    b_.add_copy_concat(std::move(args), axis, g_.describe(node));
    return dst;
  }
  const int dst = b_.new_arena(pd.dst_desc());
  std::vector<std::pair<int, int>> args;
  for (size_t i = 0; i < srcs.size(); ++i)
    args.push_back({DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i), srcs[i]});
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_step(prim, std::move(args), pd, g_.describe(node));
  c_.steps.back().op = steps::Primitive{axis};
  return dst;
}

}  // namespace backplane::onednn
