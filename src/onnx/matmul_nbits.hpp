// matmul_nbits.hpp — ONNX Runtime's MatMulNBits (a MatMul by weights
// quantized to 2, 4 or 8 bits in blocks along K, what its int4 weight
// quantizer and the LLM builders write).
//
// Weights B [N, k_blocks, blob] hold each column's K values bit-packed per
// block of block_size, lowest bits first; scales [N, k_blocks]; zero points
// packed the same way (uint8) or one per block (float), 2^(bits-1) when
// absent: W[k, n] = (q - zero point) · scale of (n, k / block_size).
//
// 4-bit weights in blocks of a power of 2 from 16, with packed or no zero
// points, stay as they are: the node is kept, an operator of the registry
// (ir/ops_nn.cpp) that CpuOneDnn and CpuRef run from the 4-bit bytes, so a
// model's weights take their 4-bit size in memory. Any other node becomes
// MatMul(A, W) [+ bias] with W [K, N] float32, dequantized once at import, a
// constant of the graph that every backend runs as any float MatMul (at four
// times the memory of 8-bit weights).
//
// Only float32 A and scales with constant weights, scales and zero points
// are covered; g_idx (a deprecated reordering) is not. A node outside that
// fails the import naming itself and why.
#pragma once

#include "ir/graph.hpp"

#include <backplane/status.hpp>

#include <functional>
#include <string>

namespace backplane::onnx_import {

// Rewrites every MatMulNBits of `graph`'s main graph (not in control-flow
// bodies) that is not kept whole as above, setting `count` (may be null) to
// how many.
[[nodiscard]] Status expand_matmul_nbits(ir::Graph& graph, int* count = nullptr);

// ONNX's blocked quantization (DequantizeLinear's block_size, opset 21, as
// ONNX Runtime's 4-bit quantizer writes weights in QDQ form): each scale and
// zero point shared by block_size consecutive elements along `axis`. A
// DequantizeLinear of `graph`'s main graph with a block_size and constant
// input, scale and zero point becomes its float32 values, a constant (the
// MatMul reading it runs as any float MatMul, at the float weights'
// memory); one with a non-constant input fails naming the node.
[[nodiscard]] Status expand_blocked_dequantize(ir::Graph& graph, int* count = nullptr);

// The same blocked DequantizeLinear when its weights are 4-bit (int4 or
// uint4, which the import reads into int8 and uint8 and `four_bit`, given a
// value's name, tells apart), 2-D [K, N] in blocks along K (axis 0) of a
// power of 2 from 16, and every reader a MatMul taking it as its B (ONNX
// Runtime's 4-bit quantizer in QDQ form): each MatMul becomes the
// MatMulNBits that runs whole, its weights repacked 4-bit (MatMulNBits'
// layout, int4 shifted to uint4 with its zero points), so they stay 4-bit
// in memory. Runs before expand_blocked_dequantize, which takes the rest.
[[nodiscard]] Status blocked_matmuls_to_nbits(
    ir::Graph& graph, const std::function<bool(const std::string&)>& four_bit,
    int* count = nullptr);

// ONNX Runtime's GatherBlockQuantized (quantized embedding tables): a Gather
// along gather_axis from a table quantized in blocks of block_size along
// quantize_axis. uint8 data packs 8/bits values a byte along its last axis,
// with zero points packed the same way (2^(bits-1) when absent); int4 and
// uint4 data, which the import reads into int8 and uint8 and `four_bit`
// (given a value's name) tells apart, hold zero points of their type (0
// when absent). A 4-bit table [N, D] gathered on axis 0, in blocks of a
// power of 2 from 16 along D, with float32 scales, stays 4-bit: the node is
// kept, an operator of the registry (ir/ops_nn.cpp) in the uint8 form, int4
// and uint4 tables repacked into it. Any other node becomes a Gather from
// the table dequantized to float32 at import. Constant data, scales and zero
// points only; out-of-range indices fail as Gather's do.
[[nodiscard]] Status expand_gather_block_quantized(
    ir::Graph& graph, const std::function<bool(const std::string&)>& four_bit,
    int* count = nullptr);

}  // namespace backplane::onnx_import
