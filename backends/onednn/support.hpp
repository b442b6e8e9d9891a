// support.hpp — which nodes CpuOneDnn can run, and why not (shared by
// query_support and compile).
#pragma once

#include "onednn/view_info.hpp"

#include <dnnl.hpp>

#include <set>
#include <string_view>
#include <vector>

namespace backplane::onednn {

// One-input activations (one oneDNN eltwise algorithm each).
const std::set<std::string_view>& eltwise_ops();
// One-input activations that take an eltwise chain (fusion.hpp activation_of).
const std::set<std::string_view>& activation_ops();
// Slice, Split, Pad, Gather (constant indices): copies between layouts.
const std::set<std::string_view>& data_movement_ops();
// Two-operand arithmetic (oneDNN binary).
const std::set<std::string_view>& binary_ops();
// Ops that only describe their input's bytes again (reshape, permute).
const std::set<std::string_view>& view_ops();

// Conv/Pool padding: ONNX pads (begin..., end...) or auto_pad, per spatial axis.
struct Window {
  dnnl::memory::dims kernel, strides, dilation, pad_l,
      pad_r;  // dilation in oneDNN's convention (d - 1)
};

// The window of node n (input shape x, output shape y, kernel extent per
// spatial axis); throws (UNSUPPORTED) what oneDNN cannot express. `before`:
// padding a folded Pad adds at the start of each spatial axis (x is then the
// Pad's input; its padding at the end follows from the shapes).
// A convolution oneDNN's Winograd kernels take: 2-D, 3x3, stride 1,
// undilated (ONNX's dilations, 1 = none), ungrouped, and channels enough to
// fill a block. Both the layout rule (compiler.cpp) and the lowering ask.
bool winograd_fits(const Dims& x, const Dims& kernel, const Dims& strides, const Dims& dilations,
                   int64_t group);

// ConvTranspose node n's window as oneDNN's deconvolution takes it (pad_r
// from the output's dims, so output_padding is in it): x and y as above.
// Throws for auto_pad SAME_* or output_shape (CpuRef runs those), and for an
// output_padding wider than the end padding.
Window deconv_window(ViewInfo& g, int n, const Dims& x, const Dims& y, const Dims& kernel);
Window window(ViewInfo& g, int n, const Dims& x, const Dims& y, const Dims& kernel,
              const Dims& before = {});

// A constant-mode Pad (node n, input of rank `rank`): its pads per axis
// (negative ones crop) and its value. Throws what it cannot read.
struct PadSpec {
  Dims before, after;
  float value = 0.f;
};
PadSpec pad_spec(ViewInfo& g, int n, size_t rank);

// An ONNX LSTM, GRU or RNN node as oneDNN's lstm_forward, gru_forward /
// lbr_gru_forward (linear_before_reset) or vanilla_rnn_forward runs it:
// time-major (layout 0), default activations (an RNN's one activation may be
// Tanh, Relu or Sigmoid), no clip, no input_forget, constant weights, every
// sequence as long as X. Shapes are checked against each other, so the
// lowering may index the weights by them.
struct RnnSpec {
  bool lstm = false, gru = false;
  bool linear_before_reset = false;  // GRU only
  int64_t gates() const { return lstm ? 4 : gru ? 3 : 1; }
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  dnnl::rnn_direction direction = dnnl::rnn_direction::unidirectional_left2right;
  dnnl::algorithm activation = dnnl::algorithm::eltwise_tanh;  // RNN only
};
// Throws (UNSUPPORTED) what does not fit, naming the attribute or input.
RnnSpec rnn_spec(ViewInfo& g, int n);

// A QuantizeLinear or DequantizeLinear node as CpuOneDnn runs it
// (lowering_quant.cpp): float32 to uint8/int8, or uint8/int8/int32 to
// float32, with a constant scale per tensor or per index along `axis`, and
// one constant zero point (oneDNN's reorder takes one per tensor, so per-axis
// zero points must all be equal; int32's is 0).
struct QuantSpec {
  bool dequantize = false;
  bp_dtype_t quantized = BP_DTYPE_UNDEFINED;  // the integer side: UINT8, INT8 (or INT32)
  int64_t axis = -1;                          // -1: one scale for the tensor
  std::vector<float> scales;                  // one, or one per index along axis
  int32_t zero_point = 0;
};
// Throws (UNSUPPORTED) what does not fit, naming the input.
QuantSpec quant_spec(ViewInfo& g, int n);

// Throws sdk::Error(UNSUPPORTED) with the reason if node n cannot run here.
void check_node(ViewInfo& g, int n);

}  // namespace backplane::onednn
