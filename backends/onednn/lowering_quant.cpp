// lowering_quant.cpp — ONNX QuantizeLinear and DequantizeLinear, bit-exact
// with ONNX (and CpuRef). quant_spec (support.hpp) has checked what fits.
//
// DequantizeLinear, y = (x - zero_point) * scale, is a reorder from the
// integer type to float32 with the zero point and the scales as attributes:
// oneDNN converts x exactly, subtracts the zero point (exact) and multiplies
// once, as ONNX does.
//
// QuantizeLinear, y = saturate(round_half_to_even(x / scale) + zero_point),
// is not a reorder: a reorder's scale multiplies, and x * (1 / scale) is not
// x / scale (x = 2.5 * scale, a tie, can come out a little above or below
// 2.5 and round the other way). It is a binary division by the scales, whose
// post-ops round half to even and add the zero point, written as uint8/int8,
// which saturates: every step exact but the one division ONNX also does.
#include "onednn/lowering.hpp"
#include "onednn/support.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace backplane::onednn {

using dnnl::algorithm;
using dnnl::memory;

namespace {

memory::data_type data_type(bp_dtype_t t) {
  return t == BP_DTYPE_UINT8   ? memory::data_type::u8
         : t == BP_DTYPE_INT8  ? memory::data_type::s8
         : t == BP_DTYPE_INT32 ? memory::data_type::s32
                               : memory::data_type::f32;
}

// `md` with data type `dt`: the same dims and layout (strides count elements).
memory::desc with_data_type(const memory::desc& md, memory::data_type dt) {
  dnnl_memory_desc_t d = md.data;
  d.data_type = static_cast<dnnl_data_type_t>(dt);
  return memory::desc(d);
}

// steps::Quantize by `scale` and `zero` into or from 8-bit type `t`.
steps::Quantize quantization(float scale, int32_t zero, bp_dtype_t t) {
  const bool u8 = t == BP_DTYPE_UINT8;
  const auto z = static_cast<float>(zero);
  return {scale, (u8 ? 0.f : -128.f) - z, (u8 ? 255.f : 127.f) - z, z};
}

// What the attributes of a quantization step hold, as a SharedCache key.
std::string quant_key(const QuantSpec& q) {
  std::string k(reinterpret_cast<const char*>(&q.zero_point), sizeof q.zero_point);
  k.append(reinterpret_cast<const char*>(&q.axis), sizeof q.axis);
  k.append(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * sizeof(float));
  return k;
}

// A SharedCache tag: `what` and a number (built from the number: GCC 12's
// -Wrestrict is wrong about "literal" + std::to_string, bug 105329).
std::string tagged(const char* what, int number) {
  std::string tag = std::to_string(number);
  return tag.insert(0, what);
}

// Appends what the eltwise chain `post` holds to SharedCache key *key.
void append_key(const std::vector<PostOp>& post, std::string* key) {
  for (const PostOp& p : post)
    key->append(reinterpret_cast<const char*>(&p.alpha), sizeof p.alpha)
        .append(reinterpret_cast<const char*>(&p.beta), sizeof p.beta)
        .append(std::to_string(static_cast<int>(p.alg)));
}

}  // namespace

std::optional<memory::data_type> Lowering::data_type_of(int v) const {
  const bp_dtype_t t = g_.values[v].dtype;
  if (t == BP_DTYPE_FLOAT32 || t == BP_DTYPE_UINT8 || t == BP_DTYPE_INT8 || t == BP_DTYPE_INT32)
    return data_type(t);
  return std::nullopt;
}

void Lowering::lower_quant(const INode& n) {
  const QuantSpec q = quant_spec(g_, n.node);
  // In an instance of a shape-polymorphic partition, one scale of 8 bits: a
  // loop that takes any shape, not a oneDNN kernel made for each.
  if (b_.shared() && q.scales.size() == 1 && q.quantized != BP_DTYPE_INT32)
    return quantize_loop(n, q, q.dequantize ? memory::data_type::f32 : data_type(q.quantized), "");
  const Dims& xs = g_.shape(n.in[0]);
  const int x = ref_of(n.in[0]);
  if (q.dequantize) {
    // An int32 input arrives as bytes (lower()); the reorder reads it as int32.
    int src = x;
    if (b_.md(src).data_type() != data_type(q.quantized))
      src = b_.alias(src, plain_md(xs, data_type(q.quantized)));
    dnnl::primitive_attr attr = attr_with({});  // not b_.attr(): a shared handle
    attr.set_output_scales(q.axis < 0 ? 0 : 1 << q.axis, q.scales);
    if (q.zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {q.zero_point});
    const int dst = b_.new_arena(with_data_type(b_.md(src), memory::data_type::f32));
    b_.copy(src, dst, attr, quant_key(q), "dequantize");
    tensors_[n.out] = dst;
    return;
  }
  dnnl::post_ops po;
  po.append_eltwise(1.f, algorithm::eltwise_round, 0.f, 0.f);  // half to even
  if (q.zero_point != 0)
    po.append_eltwise(1.f, algorithm::eltwise_linear, 1.f, static_cast<float>(q.zero_point));
  dnnl::primitive_attr attr = attr_with({});  // not b_.attr(): a shared handle
  attr.set_post_ops(po);
  const memory::data_type qdt = data_type(q.quantized);
  // The division of `src` (dims `shape`) by scales of dims `sdims`.
  auto divide = [&](int src, const Dims& shape, const Dims& sdims) {
    const memory::desc scale_md = plain_md(sdims);
    dnnl::binary::desc d(algorithm::binary_div, b_.md(src), scale_md,
                         with_data_type(b_.md(src), qdt));
    dnnl::primitive prim;
    auto pd = b_.make<dnnl::binary>(d, attr, quant_key(q), &prim);
    const int scales = b_.const_ref(scale_md, q.scales.data(), "qscale" + std::to_string(n.node));
    const int dst = add_step_to_new(n.out, prim, {{DNNL_ARG_SRC_0, src}, {DNNL_ARG_SRC_1, scales}},
                                    pd, "quantize");
    if (shape != xs) tensors_[n.out] = b_.reshaped(dst, xs);
  };
  // As x is, where oneDNN has a kernel for its layout: plain or channels-last,
  // one scale or one per channel (dim 1); not blocked, and not another
  // order of the dims (oneDNN 2.6's binary leaves an int8 destination
  // unwritten for some: [1, 18, 1, 3, 1] in the order acbde).
  const memory::desc& xmd = b_.md(x);
  auto same = [&](const memory::desc& md) {
    const auto &a = xmd.data.format_desc.blocking, &b = md.data.format_desc.blocking;
    return xmd == md && std::equal(a.strides, a.strides + xmd.data.ndims, b.strides);
  };
  if ((same(plain_md(xs)) || same(channels_last_md(xs))) && (q.axis < 0 || q.axis == 1)) {
    Dims sdims(std::max<size_t>(xs.size(), 1), 1);
    if (q.axis == 1) sdims[1] = xs[1];
    try {
      return divide(x, xs, sdims);
    } catch (const dnnl::error&) {
    }
  }
  // Else plain, seen as [n] (one scale) or [outer, axis, inner] (one per index).
  const int plain = b_.as_plain(x, xs);
  const int64_t count = sdk::element_count(xs);
  if (q.axis < 0) return divide(b_.reshaped(plain, {count}), {count}, {1});
  int64_t outer = 1;
  for (int64_t i = 0; i < q.axis; ++i) outer *= xs[static_cast<size_t>(i)];
  const int64_t len = xs[static_cast<size_t>(q.axis)];
  const Dims shape = {outer, len, count / (outer * len)};
  divide(b_.reshaped(plain, shape), shape, {1, len, 1});
}

dnnl::primitive_attr Lowering::product_attr(const INode& n, std::string* key) const {
  const QuantGroup& q = *n.quant;
  std::vector<float> scales(q.w_scales.size());
  for (size_t c = 0; c < scales.size(); ++c) scales[c] = q.x_scale * q.w_scales[c] * q.out_scale;
  dnnl::primitive_attr attr = attr_with(n.post);
  attr.set_output_scales(scales.size() > 1 ? 1 << 1 : 0, scales);
  if (q.x_zero != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {q.x_zero});
  QuantSpec key_spec;
  key_spec.scales = scales;
  key_spec.zero_point = q.x_zero;
  *key = quant_key(key_spec);
  append_key(n.post, key);
  return attr;
}

// oneDNN 2.6's reorder of int8 weights into a layout that carries their
// compensation (per output channel, the sum of its weights: -128 times it
// for a signed source, minus it for a source zero point; the primitive adds
// it) writes wrong sums for some small grouped shapes (weights
// [4, 2, 8, 1, 1] and [8, 1, 8, 1, 1], which the differential tests found).
// The sums follow the weights (as padded) in the buffer, the signed
// source's first, one int32 per index of the masked dims as padded. A wrong one throws, and the
// group runs as its float operators.
void Lowering::check_compensation(int ref, const std::vector<int64_t>& sums, const Dims& channels,
                                  int first_dim) {
  const dnnl::memory& m = c_.refs[ref].constant;
  const memory::desc md = m.get_desc();
  const dnnl_memory_extra_desc_t& extra = md.data.extra;
  const bool s8s8 = (extra.flags & dnnl_memory_extra_flag_compensation_conv_s8s8) != 0;
  const bool zero = (extra.flags & dnnl_memory_extra_flag_compensation_conv_asymmetric_src) != 0;
  if (!s8s8 && !zero) return;
  // Weights halved for CPUs without VNNI: the sums are of those.
  if ((extra.flags & dnnl_memory_extra_flag_scale_adjust) != 0 && extra.scale_adjust != 1.f) return;
  // Where channel c's sum is in a compensation of mask `mask`, and how many
  // it holds: c's index along each channel dim (row-major over `channels`,
  // dims first_dim on), row-major over the masked dims as padded.
  auto layout = [&](int mask, int64_t c, int64_t* count) {
    std::vector<int64_t> index(static_cast<size_t>(md.data.ndims), 0);
    for (size_t k = channels.size(); k-- > 0;) {
      index[static_cast<size_t>(first_dim) + k] = c % channels[k];
      c /= channels[k];
    }
    int64_t at = 0;
    *count = 1;
    for (int d = 0; d < md.data.ndims; ++d) {
      if ((mask & (1 << d)) == 0) continue;
      at = at * md.data.padded_dims[d] + index[static_cast<size_t>(d)];
      *count *= md.data.padded_dims[d];
    }
    return at;
  };
  int64_t s8s8_count = 0, zero_count = 0, weights = 1;
  layout(extra.compensation_mask, 0, &s8s8_count);
  layout(extra.asymm_compensation_mask, 0, &zero_count);
  for (int d = 0; d < md.data.ndims; ++d) weights *= md.data.padded_dims[d];
  const size_t extra_bytes =
      sizeof(int32_t) * static_cast<size_t>((s8s8 ? s8s8_count : 0) + (zero ? zero_count : 0));
  if (static_cast<size_t>(weights) + extra_bytes > md.get_size())
    throw fail("int8 weights: a compensation layout this build does not know");
  const auto* base = static_cast<const uint8_t*>(m.get_data_handle()) + weights;
  const auto* s8s8_sums = reinterpret_cast<const int32_t*>(base);
  const int32_t* zero_sums = s8s8_sums + (s8s8 ? s8s8_count : 0);
  int64_t count = 0;
  for (size_t c = 0; c < sums.size(); ++c) {
    const int64_t ci = static_cast<int64_t>(c);
    if ((s8s8 && s8s8_sums[layout(extra.compensation_mask, ci, &count)] != -128 * sums[c]) ||
        (zero && zero_sums[layout(extra.asymm_compensation_mask, ci, &count)] != -sums[c]))
      throw fail("oneDNN's reorder wrote wrong compensation for these int8 weights");
  }
}

void Lowering::add_qwindow_step(const INode& n, dnnl::primitive prim,
                                const dnnl::primitive_desc_base& pd, int wref,
                                const memory::desc& bias_md) {
  const QuantGroup& q = *n.quant;
  const int src = b_.as_md(ref_of(q.x), pd.query_md(dnnl::query::src_md));
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
  if (!q.bias.empty())
    args.push_back({DNNL_ARG_BIAS, b_.const_ref(bias_md, q.bias.data(), tagged("qbias", n.node))});
  add_step_to_new(n.out, prim, std::move(args), pd, g_.describe(n.node) + " (int8)");
}

void Lowering::lower_qconv(const INode& n) {
  const QuantGroup& q = *n.quant;
  const Dims& xs = g_.shape(q.x);
  const Dims& ws = g_.shape(q.w);
  const Dims& ys = g_.shape(n.out);
  Dims wdims;
  const Window w = conv_window(n, xs, ws, ys, &wdims);
  const memory::data_type src_dt = data_type(g_.values[q.x].dtype);
  const memory::data_type dst_dt = data_type(g_.values[n.out].dtype);
  auto md = [](const Dims& d, memory::data_type t) {
    return memory::desc(to_dims(d), t, memory::format_tag::any);
  };
  const memory::desc bias_md = q.bias.empty() ? memory::desc() : plain_md({ws[0]});
  dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference,
                                    algorithm::convolution_direct, md(xs, src_dt),
                                    md(wdims, memory::data_type::s8), bias_md, md(ys, dst_dt),
                                    w.strides, w.dilation, w.pad_l, w.pad_r);
  std::string key;
  const dnnl::primitive_attr attr = product_attr(n, &key);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::convolution_forward>(d, attr, key, &prim);
  const int wref = b_.const_reordered(plain_md(wdims, memory::data_type::s8), g_.data(q.w),
                                      pd.weights_desc(), tagged("q", q.w));
  {
    // Each output channel's weights are contiguous in the ONNX layout.
    const auto* w = static_cast<const int8_t*>(g_.data(q.w));
    const int64_t per = sdk::element_count(ws) / ws[0];
    std::vector<int64_t> sums(static_cast<size_t>(ws[0]), 0);
    for (int64_t c = 0; c < ws[0]; ++c)
      for (int64_t i = 0; i < per; ++i) sums[c] += w[c * per + i];
    check_compensation(wref, sums, Dims(wdims.begin(), wdims.end() - (ws.size() - 1)), 0);
  }
  add_qwindow_step(n, prim, pd, wref, bias_md);
}

void Lowering::lower_qdeconv(const INode& n) {
  const QuantGroup& q = *n.quant;
  const Dims& xs = g_.shape(q.x);
  const Dims& ws = g_.shape(q.w);
  const Dims& ys = g_.shape(n.out);
  const int64_t group = g_.node(n.node).attr_int("group", 1);
  const Window w = deconv_window(g_, n.node, xs, ys, Dims(ws.begin() + 2, ws.end()));
  const memory::desc user = deconv_weights_md(ws, group, memory::data_type::s8);
  const memory::dims wdims = user.dims();
  auto md = [](const memory::dims& d, memory::data_type t) {
    return memory::desc(d, t, memory::format_tag::any);
  };
  const memory::desc bias_md = q.bias.empty() ? memory::desc() : plain_md({ys[1]});
  dnnl::deconvolution_forward::desc d(
      dnnl::prop_kind::forward_inference, algorithm::deconvolution_direct,
      md(to_dims(xs), data_type(g_.values[q.x].dtype)), md(wdims, memory::data_type::s8), bias_md,
      md(to_dims(ys), data_type(g_.values[n.out].dtype)), w.strides, w.dilation, w.pad_l, w.pad_r);
  std::string key;
  const dnnl::primitive_attr attr = product_attr(n, &key);
  // oneDNN 2.6's int8 1x1 deconvolution over groups reads out of bounds
  // with an activation post-op (a logistic or a clip, at 8 or 24 of 32
  // input channels a group, among others, and at 8 of 8): such a group
  // runs in float. The linear post-op of requantization alone is safe.
  const auto activation = [](const PostOp& p) {
    return p.kind == PostOp::kEltwise && p.alg != algorithm::eltwise_linear &&
           p.alg != algorithm::eltwise_round;
  };
  if (group > 1 && std::any_of(n.post.begin(), n.post.end(), activation)) {
    const std::string impl =
        dnnl::deconvolution_forward::primitive_desc(d, attr, engine()).impl_info_str();
    if (impl.rfind("jit_int8_1x1", 0) == 0)
      throw sdk::unsupported("oneDNN's " + impl +
                             " deconvolution fails over groups with an activation after it");
  }
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::deconvolution_forward>(d, attr, key, &prim);
  const int wref = b_.const_reordered(user, g_.data(q.w), pd.weights_desc(), tagged("q", q.w));
  {
    // Output channel (g, o)'s weights: [g * C_in / group + i][o][kernel...].
    const auto* wv = static_cast<const int8_t*>(g_.data(q.w));
    const int64_t icg = ws[0] / group, ocg = ws[1];
    const int64_t window = sdk::element_count(ws) / (ws[0] * ws[1]);
    std::vector<int64_t> sums(static_cast<size_t>(group * ocg), 0);
    for (int64_t gi = 0; gi < group; ++gi)
      for (int64_t i = 0; i < icg; ++i)
        for (int64_t o = 0; o < ocg; ++o)
          for (int64_t k = 0; k < window; ++k)
            sums[gi * ocg + o] += wv[((gi * icg + i) * ocg + o) * window + k];
    check_compensation(wref, sums, group > 1 ? Dims{group, ocg} : Dims{ocg}, 0);
  }
  add_qwindow_step(n, prim, pd, wref, bias_md);
}

void Lowering::lower_qmove(const INode& n) {
  if (n.op == "Concat") {
    const size_t steps = c_.steps.size();
    lower_concat(n);
    if (c_.steps.size() > steps) c_.steps.back().what += " (int8)";
    return;
  }
  if (n.op == "Transpose") return lower_transpose(n);
  tensors_[n.out] = b_.reshaped(ref_of(n.in[0]), g_.shape(n.out));
}

void Lowering::lower_qproduct(const INode& n) {
  const QuantGroup& q = *n.quant;
  const Dims& ws = g_.shape(q.w);
  const Dims& ys = g_.shape(n.out);
  const int64_t k = q.x_shape.back(), cols = q.trans_b ? ws[0] : ws[1];
  const int64_t rows = sdk::element_count(q.x_shape) / k;
  const memory::data_type src_dt = data_type(g_.values[q.x].dtype);
  const memory::data_type dst_dt = data_type(g_.values[n.out].dtype);
  const int src = b_.alias(b_.as_plain(ref_of(q.x), g_.shape(q.x)), plain_md({rows, k}, src_dt));
  const memory::desc bias_md = q.bias.empty() ? memory::desc() : plain_md({1, cols});
  const memory::desc wmd(to_dims({k, cols}), memory::data_type::s8, memory::format_tag::any);
  std::string key;
  const dnnl::primitive_attr attr = product_attr(n, &key);
  dnnl::primitive prim;
  dnnl::matmul::primitive_desc pd;
  // Rows from an open dim are a runtime dim (as lower_qdynamic's).
  if (b_.shared() && g_.values[q.x].open_rows)
    pd = runtime_rows_matmul(k, cols, src_dt, memory::data_type::s8, bias_md, dst_dt, attr,
                             key + ", any rows", &prim);
  if (!prim)
    pd = b_.make<dnnl::matmul>(
        dnnl::matmul::desc(b_.md(src), wmd, bias_md, plain_md({rows, cols}, dst_dt)), attr, key,
        &prim);
  // The constant as stored: [K, N], or [N, K] read transposed.
  const memory::desc user(to_dims({k, cols}), memory::data_type::s8,
                          q.trans_b ? memory::format_tag::ba : memory::format_tag::ab);
  const int wref = b_.const_reordered(user, g_.data(q.w), pd.weights_desc(), tagged("q", q.w));
  {
    const auto* w = static_cast<const int8_t*>(g_.data(q.w));
    std::vector<int64_t> sums(static_cast<size_t>(cols), 0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t c = 0; c < cols; ++c) sums[c] += q.trans_b ? w[c * k + i] : w[i * cols + c];
    check_compensation(wref, sums, {cols}, 1);
  }
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wref}};
  if (!q.bias.empty())
    args.push_back({DNNL_ARG_BIAS, b_.const_ref(bias_md, q.bias.data(), tagged("qbias", n.node))});
  // Row-major (a runtime-rows primitive's own dst has a runtime dim).
  const int dst = b_.new_arena(plain_md({rows, cols}, dst_dt));
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_step(std::move(prim), std::move(args), pd, g_.describe(n.node) + " (int8)");
  tensors_[n.out] = b_.alias(dst, plain_md(ys, dst_dt));
}

void Lowering::lower_qdynamic(const INode& n) {
  const QuantGroup& q = *n.quant;
  const Dims& ws = g_.shape(q.w);
  const Dims& ys = g_.shape(n.out);
  const int64_t k = ws[0], cols = ws[1];
  const int64_t rows = sdk::element_count(q.x_shape) / k;
  const int64_t nscales = static_cast<int64_t>(q.w_scales.size());
  const int src = b_.alias(b_.as_plain(ref_of(q.x), q.x_shape), plain_md({rows, k}));
  // x quantized here, at run time: its zero point and the output scales
  // (its scale times w's) are the matmul's run-time attributes.
  const int xq = b_.new_arena(plain_md({rows, k}, memory::data_type::u8));
  const int zero_point = b_.new_arena(plain_md({1}, memory::data_type::s32));
  const int scales = b_.new_arena(plain_md({1, nscales}));
  const int w_scales = b_.const_ref(plain_md({nscales}), q.w_scales.data(), tagged("qws", n.node));
  b_.add_dynamic_quantize(src, xq, zero_point, scales, w_scales,
                          g_.describe(n.node) + " (its DynamicQuantizeLinear)");
  // The scales as a binary post-op on a run-time tensor rather than run-time
  // output scales: oneDNN's brgemm matmul takes the former (its gemm, slower
  // here, the latter).
  dnnl::primitive_attr attr = attr_with({});
  attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  dnnl::post_ops po;
  po.append_binary(algorithm::binary_mul, b_.md(scales));
  const memory::desc bias_md = plain_md({1, cols});
  if (!q.bias.empty()) po.append_binary(algorithm::binary_add, bias_md);
  attr.set_post_ops(po);
  dnnl::primitive prim;
  std::string key = nscales > 1 ? "dynamic per column" : "dynamic";
  if (!q.bias.empty()) key += ", bias";
  dnnl::matmul::primitive_desc pd;
  // Rows from an open dim are a runtime dim, as lower_matmul_collapsed makes
  // them: one primitive serves every instance (a decoder's every length).
  if (b_.shared() && g_.values[q.x].open_rows)
    pd = runtime_rows_matmul(k, cols, memory::data_type::u8, memory::data_type::s8, memory::desc(),
                             memory::data_type::f32, attr, key + ", any rows", &prim);
  if (!prim) {
    const memory::desc wmd(to_dims({k, cols}), memory::data_type::s8, memory::format_tag::any);
    pd = b_.make<dnnl::matmul>(dnnl::matmul::desc(b_.md(xq), wmd, plain_md({rows, cols})), attr,
                               key, &prim);
  }
  const int wref = b_.const_reordered(plain_md({k, cols}, memory::data_type::s8), g_.data(q.w),
                                      pd.weights_desc(), tagged("q", q.w));
  std::vector<std::pair<int, int>> args = {
      {DNNL_ARG_SRC, xq},
      {DNNL_ARG_WEIGHTS, wref},
      {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scales},
      {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, zero_point}};
  if (!q.bias.empty())
    args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
                    b_.const_ref(bias_md, q.bias.data(), tagged("qbias", n.node))});
  // Row-major (the primitive's own dst may have a runtime dim).
  const int dst = b_.new_arena(plain_md({rows, cols}));
  args.push_back({DNNL_ARG_DST, dst});
  b_.add_step(std::move(prim), std::move(args), pd, g_.describe(n.node) + " (int8)");
  tensors_[n.out] = b_.alias(dst, plain_md(ys));
}

void Lowering::lower_qdynamic_conv(const INode& n) {
  const QuantGroup& q = *n.quant;
  const Dims& xs = q.x_shape;
  const Dims& ws = g_.shape(q.w);
  const Dims& ys = g_.shape(n.out);
  Dims wdims;
  const Window w = conv_window(n, xs, ws, ys, &wdims);
  const int64_t oc = ws[0];
  const auto nscales = static_cast<int64_t>(q.w_scales.size());
  // Per-tensor or per-channel operands of the post-ops: [1, C, 1...].
  auto channels = [&](int64_t c) {
    Dims d(ys.size(), 1);
    d[1] = c;
    return plain_md(d);
  };
  // x's integers less their zero point times w's less theirs, summed in
  // float, then times x_scale * w_scale and plus the bias as the graph's Mul
  // and Add do, then the activations (fusion.cpp: dynamic_product).
  dnnl::primitive_attr attr = attr_with({});
  dnnl::post_ops po;
  po.append_binary(algorithm::binary_mul, channels(nscales));
  if (!q.bias.empty()) po.append_binary(algorithm::binary_add, channels(oc));
  for (const PostOp& p : n.post) po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
  attr.set_post_ops(po);
  std::string key = "dynamic conv " + std::to_string(nscales);
  if (!q.bias.empty()) key += ", bias";
  append_key(n.post, &key);
  dnnl::primitive prim;
  auto any = [](const Dims& d) {
    return memory::desc(to_dims(d), memory::data_type::f32, memory::format_tag::any);
  };
  auto pd = b_.make<dnnl::convolution_forward>(
      dnnl::convolution_forward::desc(
          dnnl::prop_kind::forward_inference, algorithm::convolution_direct, any(xs), any(wdims),
          memory::desc(), any(ys), w.strides, w.dilation, w.pad_l, w.pad_r),
      attr, key, &prim);
  // x in the layout the convolution reads, quantized there element by
  // element: a blocked layout's zero padding gives integers of 0.
  const int src = b_.as_md(ref_of(q.x), pd.src_desc());
  const int xi = b_.new_arena(pd.src_desc());
  const int zero_point = b_.new_arena(plain_md({1}, memory::data_type::s32));
  const int scales = b_.new_arena(channels(nscales));
  const int w_scales = b_.const_ref(plain_md({nscales}), q.w_scales.data(), tagged("qws", n.node));
  b_.add_dynamic_quantize(src, xi, zero_point, scales, w_scales,
                          g_.describe(n.node) + " (its DynamicQuantizeLinear)");
  // The weights' integers less their zero point (each output channel's
  // weights are contiguous in the ONNX layout).
  const int64_t per = sdk::element_count(ws) / oc;
  std::vector<float> integers(static_cast<size_t>(sdk::element_count(ws)));
  const bool u8 = g_.values[q.w].dtype == BP_DTYPE_UINT8;
  for (int64_t c = 0; c < oc; ++c) {
    const int32_t zero = q.w_zeros.empty() ? 0 : q.w_zeros[q.w_zeros.size() == 1 ? 0 : c];
    for (int64_t i = 0; i < per; ++i) {
      const int64_t at = c * per + i;
      const int32_t v = u8 ? static_cast<const uint8_t*>(g_.data(q.w))[at]
                           : static_cast<const int8_t*>(g_.data(q.w))[at];
      integers[static_cast<size_t>(at)] = static_cast<float>(v - zero);
    }
  }
  const int wref =
      b_.const_reordered(plain_md(wdims), integers.data(), pd.weights_desc(), tagged("qdw", q.w));
  std::vector<std::pair<int, int>> args = {
      {DNNL_ARG_SRC, xi},
      {DNNL_ARG_WEIGHTS, wref},
      {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, scales}};
  if (!q.bias.empty())
    args.push_back({DNNL_ARG_ATTR_MULTIPLE_POST_OP(1) | DNNL_ARG_SRC_1,
                    b_.const_ref(channels(oc), q.bias.data(), tagged("qbias", n.node))});
  add_step_to_new(n.out, prim, std::move(args), pd,
                  g_.describe(n.node) + " (quantized at run time)");
}

void Lowering::lower_fake_quantize(const INode& n) {
  const QuantSpec q = quant_spec(g_, n.node);  // the QuantizeLinear's
  quantize_loop(n, q, memory::data_type::f32, " (and its DequantizeLinear)");
}

void Lowering::quantize_loop(const INode& n, const QuantSpec& q, memory::data_type to,
                             const char* what) {
  int src = ref_of(n.in[0]);
  const memory::data_type from = q.dequantize ? data_type(q.quantized) : memory::data_type::f32;
  if (q.dequantize && b_.md(src).data_type() != from)
    src = b_.alias(src, plain_md(g_.shape(n.in[0]), from));
  // Every element once; a blocked layout's zero padding stays 0 only from float to float.
  const memory::desc& md = b_.md(src);
  if (md.data.offset0 != 0 || !(is_dense(md) || (is_blocked(md) && from == to)))
    src = b_.as_plain(src, g_.shape(n.in[0]));
  const int dst = b_.new_arena(with_data_type(b_.md(src), to));
  b_.add_loop(src, dst, quantization(q.scales[0], q.zero_point, q.quantized),
              g_.describe(n.node) + what);
  tensors_[n.out] = dst;
}

void Lowering::lower_table(const INode& n) {
  const QuantGroup& q = *n.quant;
  int src = ref_of(q.x);
  const Dims& xs = g_.shape(q.x);
  // Every byte an element (no gaps, no padded blocks, whose zeros the table
  // would overwrite).
  if (b_.md(src).get_size() != static_cast<size_t>(sdk::element_count(xs)))
    src = b_.as_plain(src, xs);
  const int dst = b_.new_arena(with_data_type(b_.md(src), data_type(g_.values[n.out].dtype)));
  const int table = b_.const_ref(bytes_md(q.table.size()), q.table.data());
  b_.add_table(src, table, dst, g_.describe(n.node) + " (int8 table)");
  tensors_[n.out] = dst;
}

void Lowering::requantize(const INode& n, int ref) {
  const QuantGroup& q = *n.quant;
  const bool same_type = g_.values[q.x].dtype == g_.values[n.out].dtype;
  if (q.x_scale == q.y_scale && q.x_zero == q.y_zero && same_type) return;
  const float ratio = q.x_scale / q.y_scale;
  dnnl::primitive_attr attr = attr_with({});
  attr.set_output_scales(0, {ratio});
  if (q.x_zero != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {q.x_zero});
  if (q.y_zero != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {q.y_zero});
  const int dst = b_.new_arena(with_data_type(b_.md(ref), data_type(g_.values[n.out].dtype)));
  std::string key;
  for (float v : {ratio, static_cast<float>(q.x_zero), static_cast<float>(q.y_zero)})
    key.append(reinterpret_cast<const char*>(&v), sizeof v);
  b_.copy(ref, dst, attr, key, "requantize");
  tensors_[n.out] = dst;
}

void Lowering::lower_qmul(const INode& n) {
  const QuantGroup& q = *n.quant;
  const int a = b_.dense(ref_of(q.x));
  const memory::desc& amd = b_.md(a);
  const Dims& ys = g_.shape(n.out);
  const Dims bs = left_pad(g_.shape(q.x2), ys.size());
  const memory::data_type bt = data_type(g_.values[q.x2].dtype);
  const int b = b_.as_md(b_.reshaped(ref_of(q.x2), bs), with_data_type(layout_like(amd, bs), bt));
  // (x - x_zero): a binary add of the constant -x_zero; then times x2 (a
  // binary post-op) and the scales with the quantization (n.post).
  const float offset = -static_cast<float>(q.x_zero);
  const memory::desc offset_md = plain_md(Dims(ys.size(), 1));
  dnnl::binary::desc d(algorithm::binary_add, amd, offset_md,
                       with_data_type(amd, data_type(g_.values[n.out].dtype)));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::post_ops po;
  po.append_binary(algorithm::binary_mul, b_.md(b));
  for (const PostOp& p : n.post) po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
  attr.set_post_ops(po);
  std::string key = "mul";
  key.append(reinterpret_cast<const char*>(&offset), sizeof offset);
  append_key(n.post, &key);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::binary>(d, attr, key, &prim);
  add_step_to_new(n.out, prim,
                  {{DNNL_ARG_SRC_0, a},
                   {DNNL_ARG_SRC_1, b_.const_ref(offset_md, &offset)},
                   {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, b}},
                  pd, g_.describe(n.node) + " (int8)");
}

void Lowering::lower_qadd(const INode& n) {
  QuantGroup q = *n.quant;
  // In an instance of a shape-polymorphic partition: each operand's
  // DequantizeLinear, a float Add and the QuantizeLinear, as CpuRef computes
  // them, each a loop that takes any shape (a oneDNN int8 binary is made for
  // each shape).
  const Dims& ys = g_.shape(n.out);
  auto bytes = [&](int v) {
    return g_.values[v].dtype == BP_DTYPE_UINT8 || g_.values[v].dtype == BP_DTYPE_INT8;
  };
  // (Its post-ops only add the zero point: no activation comes with it.)
  const bool plain = n.post.size() == 1 && n.post[0].alg == algorithm::eltwise_linear &&
                     n.post[0].alpha == 1.f && n.post[0].beta == static_cast<float>(q.y_zero);
  if (b_.shared() && plain && g_.shape(q.x) == ys && g_.shape(q.x2) == ys && bytes(q.x) &&
      bytes(q.x2) && bytes(n.out) && sdk::element_count(ys) <= kSmallInstanceOpElements) {
    const std::string what = g_.describe(n.node);
    auto dequantize = [&](int v, float scale, int32_t zero) {
      const int dst = b_.new_arena(plain_md(ys));
      b_.add_loop(b_.as_plain(ref_of(v), ys), dst, quantization(scale, zero, g_.values[v].dtype),
                  what + " (its DequantizeLinear)");
      return dst;
    };
    const int sum = b_.new_arena(plain_md(ys));
    b_.add_small_binary(dequantize(q.x, q.x_scale, q.x_zero),
                        dequantize(q.x2, q.x2_scale, q.x2_zero), sum, algorithm::binary_add, what);
    const int dst = b_.new_arena(plain_md(ys, data_type(g_.values[n.out].dtype)));
    b_.add_loop(sum, dst, quantization(q.y_scale, q.y_zero, g_.values[n.out].dtype),
                what + " (its QuantizeLinear)");
    tensors_[n.out] = dst;
    return;
  }
  // The operands in the layout of the one not plain (a convolution's
  // result, channels-last), so that no reorder comes before or after.
  if (b_.md(ref_of(q.x)) == plain_md(g_.shape(q.x), *data_type_of(q.x))) {
    std::swap(q.x, q.x2);
    std::swap(q.x_scale, q.x2_scale);
    std::swap(q.x_zero, q.x2_zero);
  }
  const int a = b_.dense(ref_of(q.x));
  const memory::desc& amd = b_.md(a);
  // The second operand in the first's layout, each in its own type.
  const int b = b_.as_md(ref_of(q.x2), with_data_type(amd, data_type(g_.values[q.x2].dtype)));
  const memory::desc dst_md = with_data_type(amd, data_type(g_.values[n.out].dtype));
  dnnl::binary::desc d(algorithm::binary_add, amd, b_.md(b), dst_md);
  // x_scale * x + x2_scale * x2 (in units of out_scale), less the zero
  // points' share: a binary post-op adding that constant, then n.post.
  const float sa = q.x_scale * q.out_scale, sb = q.x2_scale * q.out_scale;
  const float offset = -(sa * static_cast<float>(q.x_zero) + sb * static_cast<float>(q.x2_zero));
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  attr.set_scales(DNNL_ARG_SRC_0, 0, {sa});
  attr.set_scales(DNNL_ARG_SRC_1, 0, {sb});
  const memory::desc offset_md = plain_md(Dims(static_cast<size_t>(amd.data.ndims), 1));
  dnnl::post_ops po;
  if (offset != 0.f) po.append_binary(algorithm::binary_add, offset_md);
  for (const PostOp& p : n.post) po.append_eltwise(1.f, p.alg, p.alpha, p.beta);
  attr.set_post_ops(po);
  std::string key;
  for (float v : {sa, sb, offset}) key.append(reinterpret_cast<const char*>(&v), sizeof v);
  append_key(n.post, &key);
  dnnl::primitive prim;
  auto pd = b_.make<dnnl::binary>(d, attr, key, &prim);
  std::vector<std::pair<int, int>> args = {{DNNL_ARG_SRC_0, a}, {DNNL_ARG_SRC_1, b}};
  if (offset != 0.f)
    args.push_back(
        {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, b_.const_ref(offset_md, &offset)});
  add_step_to_new(n.out, prim, std::move(args), pd, g_.describe(n.node) + " (int8)");
}

}  // namespace backplane::onednn
