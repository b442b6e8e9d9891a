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

// What the attributes of a quantization step hold, as a SharedCache key.
std::string quant_key(const QuantSpec& q) {
  std::string k(reinterpret_cast<const char*>(&q.zero_point), sizeof q.zero_point);
  k.append(reinterpret_cast<const char*>(&q.axis), sizeof q.axis);
  k.append(reinterpret_cast<const char*>(q.scales.data()), q.scales.size() * sizeof(float));
  return k;
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
  // one scale or one per channel (dim 1); not blocked.
  if (!is_blocked(b_.md(x)) && (q.axis < 0 || q.axis == 1)) {
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

}  // namespace backplane::onednn
