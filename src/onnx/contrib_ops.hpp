// contrib_ops.hpp — the operators ONNX Runtime's graph optimiser writes into
// the models it saves, rewritten at import into standard ONNX operators.
//
// A model saved after ONNX Runtime's optimiser (SessionOptions'
// optimized_model_filepath, tools that call it, files shipped that way)
// holds fusions of ONNX Runtime's own, mostly in its "com.microsoft"
// domain. Each below becomes the standard operators it fused, which every
// backend runs and CpuOneDnn fuses again its own way:
//
//   FusedConv       Conv [+ Add Z] + its activation (Relu, Tanh, Sigmoid,
//                   LeakyRelu, Clip, HardSigmoid; activation_params in
//                   that order)
//   FusedGemm       Gemm + its activation (those, Elu, Selu, Softplus,
//                   Softsign, ThresholdedRelu; activation_alpha/beta/gamma)
//   FusedMatMul (TransposeMatMul, its older name)
//                   MatMul of the operands transposed as transA/transB say
//                   (a Transpose of the last two dims; the operand's rank
//                   must be known), times alpha
//   BiasGelu        Gelu (com.microsoft, erf) of A + B
//   FastGelu        0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), x = X [+ bias]
//   QuickGelu       x·Sigmoid(alpha·x)
//   SkipLayerNormalization
//                   LayerNormalization (last axis) of input + skip [+ bias];
//                   its optional outputs: the Mean and InvStdDev of that
//                   LayerNormalization, and the sum
//   Attention       BERT's and GPT-2's self-attention: MatMul by the packed
//                   Q/K/V weights, Split, Reshape/Transpose into heads, the
//                   past's keys and values put ahead (present: them all),
//                   MatMul, scale, a raw [B, T] or [B, S, T] mask,
//                   attention_bias and the causal mask of unidirectional
//                   added, Softmax, MatMul, heads joined (no rotary
//                   embeddings, past shared with present, or Q/K/V sizes
//                   that differ)
//   MultiHeadAttention
//                   the same after the projections: query, key and value
//                   [B, L, D] (+ their bias), packed QKV or KV, or key and
//                   value already in heads; past_key/past_value ahead,
//                   present_key/present_value (no key lengths as the mask,
//                   past_sequence_length, cache_indirection or qk output)
//   GroupQueryAttention
//                   LLMs' attention: query heads sharing key/value heads,
//                   each sequence's keys and values placed after its own
//                   past length (ScatterElements), its rotary embeddings, a
//                   causal mask per sequence and a local window (no
//                   position_ids, softcap, head sinks, quantized or shared
//                   caches)
//   RotaryEmbedding the rotation of each head's first dims by the cos/sin
//                   cache rows of its position (Gather, Slice, Mul, Sub,
//                   Add, Concat), halves or interleaved pairs; also ONNX's
//                   own of opset 23 (default domain; caches per token when
//                   it has no position_ids)
//   Attention of ONNX (opset 23, default domain)
//                   scaled dot-product attention of 3-D or 4-D Q, K, V, key
//                   and value heads repeated for grouped queries, past_key and
//                   past_value ahead, presents, a boolean or additive mask,
//                   is_causal, scale, softcap, nonpad_kv_seqlen (opset 24,
//                   without a past; no qk output)
//   EmbedLayerNormalization
//                   Gathers of the word, position (of position_ids or 0..S-1)
//                   and segment embeddings, summed, LayerNormalization;
//                   mask_index the count of each row's mask
//   SkipSimplifiedLayerNormalization, SimplifiedLayerNormalization (the
//                   latter in the default domain, as ONNX Runtime defines it)
//                   the root-mean-square normalisation: x / √(mean(x²) + ε)
//                   · scale over the last axis
//
// and its quantized operators (its QOperator format, and what its optimiser
// makes of QDQ groups and of dynamically quantized MatMuls) as
// DequantizeLinear of the operands, the float operator, QuantizeLinear of
// the result, which CpuOneDnn runs as int8 where it has the kernel:
//
//   QLinearAdd, QLinearMul, QLinearConcat, QLinearSigmoid, QLinearLeakyRelu,
//   QLinearGlobalAveragePool, QLinearAveragePool (channels_last 0),
//   QLinearSoftmax
//   QGemm           Gemm of the dequantized operands (B per column on its
//                   output axis; C int32 of scale a_scale·b_scale), quantized
//                   if y_scale is given
//   MatMulIntegerToFloat, DynamicQuantizeMatMul
//                   MatMulInteger, Cast, Mul by a_scale·b_scale [, Add bias]
//                   (A quantized by DynamicQuantizeLinear first for the
//                   latter), as ONNX Runtime's dynamic quantizer writes them
//   QuantizeLinear, DequantizeLinear
//                   ONNX's (its quantizer writes its own with the contrib
//                   Q/DQ option)
//
// ONNX Runtime also defines LayerNormalization in the default domain from
// version 1, and its optimiser writes it into models of any opset; the
// operator registry takes it as the opset-17 operator at every opset.
//
// A model of ONNX Runtime's NCHWc layout (com.microsoft.nchwc, what its
// optimiser saves at level "all": weights blocked for one CPU) fails with
// an error saying to save it at level "extended". A node the operator
// registry knows (a backend defines the operator itself) is left whole.
// One outside what is listed (transBatchA, an activation ONNX has no
// operator for, a rank not found) fails the import with an error naming
// the node and why. Nodes added are named "<node>/<k>_<op>", values
// "<node's first output>/<k>_<op>"; the node's outputs keep their names.
#pragma once

#include "ir/op_registry.hpp"

#include <backplane/status.hpp>

namespace onnx {
class ModelProto;
}

namespace backplane::onnx_import {

// Rewrites the nodes above in `model` (main graph and subgraphs), setting
// `count` (may be null) to how many. A model with none is left as it is
// (one walk over its nodes). kUnsupported for a node outside the rewrite.
[[nodiscard]] Status rewrite_contrib_ops(onnx::ModelProto& model, const ir::OpRegistry& registry,
                                         int* count = nullptr);

}  // namespace backplane::onnx_import
