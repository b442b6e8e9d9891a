// lowering.hpp — internal nodes (fusion.hpp) to oneDNN primitives: one
// function per operator kind, each creating its primitive(s) and appending
// steps to the plan (plan_builder.hpp).
#pragma once

#include "onednn/compiled.hpp"
#include "onednn/fusion.hpp"
#include "onednn/plan_builder.hpp"
#include "onednn/support.hpp"
#include "onednn/view_info.hpp"

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace backplane::onednn {

// Why lowering failed: the view nodes it gives up (a node and every node
// fused with it) and the reason.
struct LowerFailure {
  std::vector<int> nodes;
  std::string why;
  int int8_node = -1;  // the view node of the int8 group that failed, if one did
};

// Lowers one view into one Compiled; both (and `weights`) must outlive it.
class Lowering {
 public:
  // shared: what the instances of a shape-polymorphic partition share
  // (weights, primitives); NULL: none.
  Lowering(ViewInfo& g, Compiled& c, SharedCache* shared = nullptr) : g_(g), c_(c), b_(c, shared) {}

  // Builds the internal nodes: patterns, BatchNorm folding, fusion groups,
  // int8 groups but of the view nodes in `float_nodes`.
  void prepare(const std::set<int>& float_nodes = {}) { f_ = fuse(g_, float_nodes); }
  const FusedGraph& fused() const { return f_; }

  // Convolutions over 4-D and 5-D tensors in oneDNN's blocked layout of
  // `block` channels (nChw16c / nCdhw16c for 16), where a kernel exists for
  // it, instead of the layout oneDNN picks when free to (channels-last with
  // AVX-512; with AVX2, blocked nChw8c for most convolutions). Which is faster depends on the model
  // (compiler.cpp measures both); 0 (the default) leaves the choice to oneDNN.
  void block_convolutions(int block) { block_ = block; }
  // With blocked convolutions: a 2-D 3x3 convolution of stride 1, undilated
  // and ungrouped, by oneDNN's Winograd kernels (F(4x4,3x3) or F(2x2,3x3):
  // about half the multiplies, at a rounding error some ten times a direct
  // convolution's) where it has one; the direct kernel otherwise.
  void winograd_convolutions(bool on) { winograd_ = on; }

  // Emits the steps, binds the outputs and plans the arena. On failure
  // returns which nodes failed and why (the plan is then unusable).
  std::optional<LowerFailure> lower();

 private:
  // The bytes of value v as the ABI passes it (dense, its own dtype).
  size_t bytes(int v) const {
    return static_cast<size_t>(sdk::element_count(g_.shape(v))) *
           sdk::dtype_size(g_.values[v].dtype);
  }
  // The oneDNN data type of value v where the plan can hold it as data
  // (float32, uint8, int8, int32); nullopt for other types.
  std::optional<dnnl::memory::data_type> data_type_of(int v) const;
  // Float32 constant v in layout `want`, from `user`: a weight this
  // partition or another of the model's made already (SharedCache), else
  // read from the host now. Read only when missing, so that a host that let
  // the weight's bytes go (they are packed here) is not asked for them again
  // at every new shape.
  int weight(int v, const dnnl::memory::desc& user, const dnnl::memory::desc& want);
  int weight(int v, const dnnl::memory::desc& md) { return weight(v, md, md); }
  // Conv n's weights (or, with `bias`, its bias) with its fold applied
  // (INode::fold), in layout `want` from `user`, tagged `tag` and the node:
  // computed only if no instance or partition of the model made them.
  int folded(const INode& n, bool bias, const dnnl::memory::desc& user,
             const dnnl::memory::desc& want, const char* tag);
  // The ref holding value v (constants become plain constant refs, copied,
  // or `in_place`: read where the host holds them, const_borrowed).
  int ref_of(int v, bool in_place = false);
  // True if nothing reads `buffer` (through any value sharing it) after the
  // group executing at `anchor`, so that group may overwrite it.
  bool buffer_free_after(int buffer, int anchor) const;
  dnnl::primitive_attr attr_with(const std::vector<PostOp>& post) const;
  // The destination of a main op: a new buffer, or, with a sum post-op, the
  // residual's own buffer when nothing reads it afterwards (else a copy).
  int main_dst(const INode& n, const dnnl::memory::desc& dst_md);
  // A layout hint for the destination: the residual's, so the sum is in place.
  dnnl::memory::desc dst_hint(const INode& n, const Dims& shape);
  // The last step of Conv/Gemm/MatMul n: its destination (main_dst), the step
  // with `args` and the destination, and n's output bound to it.
  void add_main_step(const INode& n, dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                     const dnnl::primitive_desc_base& pd);
  // A step writing a new arena buffer that becomes value `y`; `args` are the
  // sources. Returns the destination ref.
  int add_step_to_new(int y, dnnl::primitive prim, std::vector<std::pair<int, int>> args,
                      const dnnl::primitive_desc_base& pd, const std::string& what);

  void lower_node(int n);
  // lower_node, where a reference implementation (impl_check.hpp) fails the
  // node, except in an instance of a shape-polymorphic partition.
  void lower_node_checked(int n);
  void lower_eltwise(int x, int y, const PostOp& p);
  // The window of Conv-like node n (input xs, weights ws, output ys) and,
  // in *wdims, the weights' dims as oneDNN takes them ([group, oc/group, ...]
  // when grouped); throws what does not fit.
  Window conv_window(const INode& n, const Dims& xs, const Dims& ws, const Dims& ys, Dims* wdims);
  void lower_conv(const INode& n);
  void lower_conv_transpose(const INode& n);
  // ONNX's ConvTranspose weights ([C_in, C_out / group, kernel...]) as
  // oneDNN's deconvolution takes them ([C_out, C_in, kernel...], with groups
  // [group, C_out / group, C_in / group, kernel...]): the same bytes,
  // described with those dims' strides.
  static dnnl::memory::desc deconv_weights_md(const Dims& ws, int64_t group,
                                              dnnl::memory::data_type dt);
  void lower_qdeconv(const INode& n);
  // The step of an int8 (de)convolution: its source as `pd` takes it, the
  // weights `wref`, the group's bias in accumulator units (`bias_md`).
  void add_qwindow_step(const INode& n, dnnl::primitive prim, const dnnl::primitive_desc_base& pd,
                        int wref, const dnnl::memory::desc& bias_md);
  void lower_gemm(const INode& n);
  void lower_matmul(const INode& n);
  bool lower_matmul_any_shape(const INode& n, int src, int wref, const dnnl::memory::desc& dst_md);
  bool lower_matmul_collapsed(const INode& n, int src);
  bool lower_pointwise_conv(const INode& n);
  int row_major_src(const INode& n, int src, const Dims& shape, const dnnl::memory::desc& wmd,
                    const dnnl::memory::desc& bias_md, const dnnl::memory::desc& dst_md);
  void lower_pool(const INode& n);
  void lower_batch_norm(const INode& n);
  // A BatchNormalization (+ Relu) of a Concat along the channels, in one
  // pass (fusion.cpp: absorb_concat); false, lowering nothing, when the
  // inputs are not all dense channels-last.
  bool lower_concat_norm(const INode& n);
  void lower_layer_norm(const INode& n);
  void lower_softmax(const INode& n);
  void lower_concat(const INode& n);
  int zero_padded_channels(const INode& n, int64_t axis);
  void lower_reduce(const INode& n);
  void lower_binary(const INode& n);
  void lower_transpose(const INode& n);
  // LSTM, GRU and RNN (lowering_rnn.cpp): one lstm_forward / gru_forward /
  // vanilla_rnn_forward step, or for a bidirectional layer on a team of
  // threads, a step per direction, the two run side by side.
  void lower_rnn(const INode& n);
  // The two directions of `both`'s node over source `x`, beside each other
  // (PlanBuilder::run_beside), then joined as one step would write them.
  void lower_rnn_beside(const INode& n, const RnnSpec& both, int x, bool dst_iter);
  // Node n's outputs from its steps' Y [T, N, D*H] and final states [1, D, N, H].
  void bind_rnn_outputs(const INode& n, const RnnSpec& s, int y, int yh, int yc);
  // QuantizeLinear and DequantizeLinear (lowering_quant.cpp).
  void lower_quant(const INode& n);
  // The attributes of int8 Conv/Gemm/MatMul n (QuantGroup): the product's
  // scale per output channel, the source's zero point, then n.post; *key
  // names them for the SharedCache.
  dnnl::primitive_attr product_attr(const INode& n, std::string* key) const;
  // A Conv in int8 (fusion.hpp: QuantGroup).
  void lower_qconv(const INode& n);
  // An int8 group that only moves its source's integers (QuantGroup::passthrough).
  void lower_qmove(const INode& n);
  // Throws if the compensation oneDNN's reorder wrote with int8 weights
  // (constant `ref`) is not `sums` (per output channel; the channels' dims
  // are `channels`, the weights' dims from `first_dim` on).
  void check_compensation(int ref, const std::vector<int64_t>& sums, const Dims& channels,
                          int first_dim);
  // An Add in int8 (QuantGroup): a binary of the quantized operands.
  void lower_qadd(const INode& n);
  // A Mul in int8 (QuantGroup): (x - x_zero) times the broadcast x2.
  void lower_qmul(const INode& n);
  // A Gemm or MatMul in int8 (QuantGroup): a matmul of x's rows.
  void lower_qproduct(const INode& n);
  // A MatMulInteger of a DynamicQuantizeLinear, to the float result
  // (QuantGroup::dynamic): a DynamicQuantize step, then an int8 matmul.
  void lower_qdynamic(const INode& n);
  // A ConvInteger of a DynamicQuantizeLinear, to the float result (and its
  // activations): a DynamicQuantize step writing x's integers less their
  // zero point as float, then a float convolution by w's integers less
  // theirs whose post-ops scale, add the bias and activate.
  void lower_qdynamic_conv(const INode& n);
  // A QuantizeLinear of a function of one quantized tensor, as a table.
  void lower_table(const INode& n);
  void lower_fake_quantize(const INode& n);
  void lower_erf(const INode& n);
  // steps::Quantize of QuantizeLinear or DequantizeLinear `n` (of `q`, one
  // scale) into a new tensor of type `to`; `what` follows the node's name.
  void quantize_loop(const INode& n, const QuantSpec& q, dnnl::memory::data_type to,
                     const char* what);
  // A MatMul of [rows, k] (rows a runtime dim, `src` type) by plain [k, cols]
  // `weights` into plain [rows, cols] of type `dst`, made by PlanBuilder::make;
  // an empty *prim if oneDNN has no such kernel.
  dnnl::matmul::primitive_desc runtime_rows_matmul(
      int64_t k, int64_t cols, dnnl::memory::data_type src, dnnl::memory::data_type weights,
      const dnnl::memory::desc& bias, dnnl::memory::data_type dst, const dnnl::primitive_attr& attr,
      const std::string& key, dnnl::primitive* prim);
  // The int8 result `ref` of group n (in its input's scale and zero point)
  // quantized again to its output's, as n's output.
  void requantize(const INode& n, int ref);
  // Activations, PRelu and data movement (lowering_data.cpp).
  // An eltwise chain: its first step into a new buffer, the rest in place.
  void lower_activation(int x, int y, const std::vector<PostOp>& chain);
  void lower_prelu(const INode& n);
  // The window (offsets, sizes) of `ref` copied into a new buffer, in ref's
  // layout where oneDNN can describe the window in it, else plain. `ref`
  // itself when the window is all of it.
  int copy_window(int ref, const Dims& offsets, const Dims& sizes);
  void lower_slice(const INode& n);
  // A Slice with steps oneDNN cannot describe as one view (lower_slice).
  int slice_by_steps(int src, const Dims& xs, const Dims& offsets, const Dims& step,
                     const Dims& sizes);
  void lower_split(const INode& n);
  void lower_gather(const INode& n);
  void lower_matmul_nbits(const INode& n);
  // ref_of input i of n in place; -1 if n has no input i.
  int borrowed(const INode& n, size_t i) {
    return i < n.in.size() && n.in[i] >= 0 ? ref_of(n.in[i], true) : -1;
  }
  void lower_gather_block_quantized(const INode& n);
  void lower_pad(const INode& n);
  void lower_resize(const INode& n);
  // `cur` with `lo` and `hi` elements of `value` added along `axis` (one
  // concat step of view node `node`); returns the new ref.
  int pad_axis(int cur, int axis, int64_t lo, int64_t hi, float value, int node);
  // Every view output in its own output buffer: the arena buffer holding it
  // if its layout is plain, else a reorder into one.
  void bind_outputs();

  ViewInfo& g_;
  Compiled& c_;
  PlanBuilder b_;
  FusedGraph f_;
  int block_ = 0;
  bool winograd_ = false;
  std::map<int, int> tensors_;  // value -> MemRef
  // folded()'s last computation: the Conv node's weights and bias, so
  // that its bias does not compute the weights again.
  int folded_node_ = -1;
  std::vector<float> folded_w_, folded_b_;
  std::set<int> packed_later_;  // weights whose packing waits for PlanBuilder::write_pending
};

}  // namespace backplane::onednn
