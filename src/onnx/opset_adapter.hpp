// opset_adapter.hpp — a model of default-domain opset 19 to 25 read as the
// opset-18 model it is equivalent to.
//
// Opsets 19 to 25 changed the meaning of few operators; the others only
// gained element types (float8, 4- and 2-bit integers, bfloat16 for more
// operators), which a model that uses them fails on at import, naming the
// tensor or the node. adapt_to_opset18 rewrites each node of a model at
// those opsets (and of its subgraphs) into opset-18 operators, or into ONNX
// Runtime's com.microsoft ones that the import rewrites next
// (contrib_ops.hpp), and sets the model's default-domain import to 18, so
// that shape inference, every backend and a compiled artifact see one
// meaning of each operator, as ONNX's version converter would give it:
//
//   Cast, CastLike          saturate (19) and round_mode (24), which only
//                           float8 targets read, are dropped
//   QuantizeLinear          saturate dropped; output_dtype (21) with no zero
//                           point becomes a zero point of that type;
//                           precision (23) only as the scale's own type
//   DequantizeLinear        output_dtype (23) other than the scale's type
//                           becomes a Cast of the result; block_size (21)
//                           is left to expand_blocked_dequantize
//                           (matmul_nbits.hpp), which dequantizes constants
//   AveragePool             dilations (19) of 1 only
//   Resize                  half_pixel_symmetric (19) as half_pixel where
//                           they agree: sizes given (stretched), or whole
//                           constant scales
//   Pad                     wrap (19), of constant pads and axes, as a Gather
//                           per padded axis of the indices it reads
//   DFT                     axis as an input (20) back to the attribute
//   GridSample              linear and cubic (20) are bilinear and bicubic
//   GroupNormalization      scale and bias per channel (21): opset 18's per
//                           group with 1 and 0, then the channel's scale
//                           and bias
//   Gelu (20), RMSNormalization (23), Swish (24): ONNX Runtime's Gelu or
//                           FastGelu, SimplifiedLayerNormalization, QuickGelu
//
// Refused with kUnsupported, naming the node and why: blocked QuantizeLinear
// (block_size, 21), Pad's wrap mode of non-constant pads, AveragePool's dilations, a
// half_pixel_symmetric Resize that differs from half_pixel, a DFT axis that
// is not a constant. Attention and RotaryEmbedding (23) are left to the
// rewrites of contrib_ops.hpp, which share their parts with ONNX Runtime's
// operators of those names; the other operators new in these opsets
// (AffineGrid, DeformConv, TensorScatter, the string and image operators)
// fail later as operators the runtime lacks.
#pragma once

#include <backplane/status.hpp>

#include <cstdint>

namespace onnx {
class ModelProto;
}

namespace backplane::onnx_import {

// The newest default-domain opset a model may import.
inline constexpr int64_t kMaxModelOpset = 25;
// The opset whose meaning the runtime's operators have (ir/op_registry.hpp).
inline constexpr int64_t kRuntimeOpset = 18;

// Rewrites `model` in place as described above when it imports the default
// domain at an opset above kRuntimeOpset; a model at kRuntimeOpset or below
// is left as it is. `count`, when given, receives the nodes rewritten.
// kVersionMismatch above kMaxModelOpset.
Status adapt_to_opset18(onnx::ModelProto& model, int* count = nullptr);

}  // namespace backplane::onnx_import
