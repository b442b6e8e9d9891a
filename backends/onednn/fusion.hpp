// fusion.hpp — the internal nodes CpuOneDnn lowers: the view's nodes after
// pattern matching (patterns.hpp), BatchNormalization folding into the
// preceding Conv and fusion of followers into Conv/Gemm/MatMul as oneDNN
// post-ops (fusion.cpp).
#pragma once

#include "onednn/view_info.hpp"

#include <dnnl.hpp>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace backplane::onednn {

struct PostOp {
  enum Kind { kEltwise, kSum } kind = kEltwise;
  dnnl::algorithm alg = dnnl::algorithm::eltwise_linear;
  float alpha = 0, beta = 0;
  int residual = -1;  // kSum: the value added
};

// An operator whose operands are dequantized int8 and whose result is
// quantized again (the QDQ form: DequantizeLinear -> op -> [activations] ->
// QuantizeLinear), run as one int8 primitive on the quantized tensors.
// Conv: accumulator = sum((x - x_zero) * w) + bias, in int32; y = the
// accumulator times x_scale * w_scale[oc] * out_scale, through the post-ops
// (fusion.cpp: quantized_output), rounded and saturated to y's type. Add:
// x_scale * (x - x_zero) + x2_scale * (x2 - x2_zero), the same way after.
// Mul: x_scale * x2_scale * (x - x_zero) * x2, x2 broadcast (zero point 0).
// Gemm/MatMul: the Conv's arithmetic on the rows of x by w.
// MaxPool: of x, then (if the scale or zero point changes) a reorder with
// y = x_scale / y_scale * (x - x_zero) + y_zero. AveragePool: of x, whose
// post-ops dequantize and quantize.
struct QuantGroup {
  int x = -1;  // the quantized source (the DequantizeLinear's input)
  float x_scale = 1;
  int32_t x_zero = 0;
  int x2 = -1;  // Add: the second quantized operand
  float x2_scale = 1;
  int32_t x2_zero = 0;
  int w = -1;                   // the int8 weights (a constant)
  std::vector<float> w_scales;  // one, or one per output channel
  bool trans_b = false;         // Gemm: w is [N, K]
  Dims x_shape;                 // Gemm/MatMul: x as the product reads it
  // MatMulInteger or ConvInteger of a DynamicQuantizeLinear (fusion.cpp:
  // dynamic_product): x is float, quantized at run time; the result is
  // float. w_zeros: the weights' zero points (one, or one per output
  // channel; empty: 0).
  bool dynamic = false;
  std::vector<int32_t> w_zeros;
  // An operator that only moves values (Reshape, Flatten, Squeeze,
  // Unsqueeze, Transpose, Concat) between dequantizers and a quantizer of
  // one scale and zero point: it moves the integers of its `sources`
  // (fusion.cpp: passthrough_group).
  bool passthrough = false;
  std::vector<int> sources;
  // QuantizeLinear of a function of x alone (fusion.cpp: table_group): the
  // result for each of x's 256 byte values.
  std::vector<uint8_t> table;
  std::vector<float> bias;  // in accumulator units (dynamic: float); empty: none
  float y_scale = 1;
  int32_t y_zero = 0;
  float out_scale = 1;  // the output scales' factor besides x_scale * w_scales
  // The DequantizeLinear INodes it reads through (and a reshape after one).
  std::vector<int> dequantize;
};

struct INode {
  std::string op;
  int node = -1;            // the view node (attributes); patterns: their first node
  std::vector<int> covers;  // every view node this one stands for
  std::vector<int> in;      // value ids, -1 = absent
  int out = -1;
  bool dead = false;
  // Pattern parameters.
  float eps = 0;
  float alpha = 1;  // a Swish pattern's: y = x * sigmoid(alpha * x)
  // A Conv with steps after it folded into its weights and bias: the
  // BatchNormalization INode `bn` (-1: none), then y = alpha * y + beta
  // (folded_conv_weights computes them, when a lowering needs them).
  struct Fold {
    int bn = -1;
    float alpha = 1, beta = 0;
  };
  std::optional<Fold> fold;
  // Main ops (Conv/Gemm/MatMul): fused followers.
  std::vector<PostOp> post;
  int bias_value = -1;  // MatMul: a fused Add of a per-column constant
  // Conv in int8 (its post-ops end with the quantization's linear step).
  std::shared_ptr<QuantGroup> quant;
  // Conv/AveragePool with a folded Pad (in[0] is then the Pad's input): the
  // padding it adds at the start of each spatial axis; the pool counts the
  // padded cells.
  Dims pad_before;
  // BatchNormalization: the Concat INode (along the channels) it absorbed,
  // whose inputs it normalizes straight into one output (steps::ConcatNorm).
  int concat = -1;
  int anchor = -1;  // index of the INode where this group executes
  int group = -1;   // absorbed node: the INode it was fused into
};

// The internal nodes of a view, one per view node (dead where a pattern, a
// fold or a fusion absorbed it), and who reads each value among them.
struct FusedGraph {
  std::vector<INode> nodes;
  std::vector<std::vector<int>> consumers;  // per value: INodes reading it
  // Per INode that reads a dequantized tensor but is no int8 group: why not
  // (the first reason its matcher gave), for quant_notes.
  std::map<int, std::string> why;

  // The only INode reading `v`, if `v` is not also a partition output.
  int only_consumer(const ViewInfo& g, int v) const {
    if (v < 0 || g.values[v].output || consumers[v].size() != 1) return -1;
    return consumers[v][0];
  }
};

// Builds the internal nodes of `g`: patterns, BatchNorm folding, fusion
// groups, int8 groups (QuantGroup) but of the view nodes in `float_nodes`.
FusedGraph fuse(ViewInfo& g, const std::set<int>& float_nodes = {});

// Per view node, how it runs where quantization is concerned: "int8 ..." for
// the nodes of an int8 group, "float, not int8: why" for an operator
// between a DequantizeLinear and a QuantizeLinear that is not in one, or a
// QuantizeLinear/DequantizeLinear left in float; "" elsewhere. `failed`:
// the groups that failed to lower in int8 (fuse's `float_nodes`), and why.
std::vector<std::string> quant_notes(const ViewInfo& g, const FusedGraph& f,
                                     const std::map<int, std::string>& failed);

// Eltwise algorithm for a one-input activation node, if it is one.
std::optional<PostOp> eltwise_of(ViewInfo& g, const INode& n);
// The eltwise chain of a one-input activation node (eltwise_of's, or the
// HardSwish/HardSigmoid/Mish/Selu/Softplus/Round ones; not Log: oneDNN
// 2.6 gives log(1) = -1.4e-6, short of the conformance tests), if it is one.
std::optional<std::vector<PostOp>> activation_of(ViewInfo& g, const INode& n);
// Add/Sub/Mul/Div of `v` and a constant scalar, as y = alpha * v + beta.
std::optional<PostOp> linear_of(ViewInfo& g, const INode& n, int v);

// The weights and bias of Conv INode n with its fold applied (n.fold set).
void folded_conv_weights(ViewInfo& g, const FusedGraph& f, const INode& n,
                         std::vector<float>* weights, std::vector<float>* bias);

}  // namespace backplane::onednn
