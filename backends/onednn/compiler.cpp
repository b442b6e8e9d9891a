// compiler.cpp — compile_partition and unsupported_reasons: the steps of
// turning a graph view into a compiled CpuOneDnn partition, each in its own
// file:
//
//   view_info     the view with producers, consumers and constants at hand
//   support       which nodes can run here, and why not
//   patterns      decomposed LayerNorm and erf-GELU, matched as one node
//   fusion        internal nodes: patterns, followers fused as post-ops,
//                 and BatchNormalization folded into Conv
//   lowering      internal nodes to oneDNN primitives, one function per kind
//   plan_builder  buffers, memory references, steps, layouts, the arena
//   polymorphic   compiled once for every shape: a lowering per new shape
#include "onednn/compiler.hpp"

#include "onednn/compiled.hpp"
#include "onednn/fusion.hpp"
#include "onednn/lowering.hpp"
#include "onednn/patterns.hpp"
#include "onednn/support.hpp"
#include "onednn/view_info.hpp"

#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string_view>

namespace backplane::onednn {
namespace {

// The process's OpenMP default (OMP_NUM_THREADS or the CPUs it may use).
int default_threads() {
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

// The channel block of oneDNN's blocked convolution kernels on this CPU:
// 16 with AVX-512, 8 with AVX2, 0 below (no blocked plan is tried).
int cpu_block() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core:
    case dnnl::cpu_isa::avx512_core_vnni:
    case dnnl::cpu_isa::avx512_core_bf16:
    case dnnl::cpu_isa::avx512_core_amx:
      return 16;
    case dnnl::cpu_isa::avx2:
    case dnnl::cpu_isa::avx2_vnni:
      return 8;
    default:
      return 0;
  }
}

}  // namespace

namespace {

// Whether Concat node n costs nothing in the blocked layout: it joins the
// channels of one image, each source a whole number of channel blocks that
// no other Concat reads, so its sources are written where it would copy
// them (PlanBuilder::concat_in_place: SqueezeNet's, GoogLeNet's). A DenseNet
// block's are not: every later Concat of the block reads its sources again.
bool concat_in_blocks(const ViewInfo& g, int n, int block) {
  if (g.num_out(n) < 1 || g.out(n) < 0) return false;
  const Dims& ys = g.shape(g.out(n));
  int64_t axis = g.node(n).attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(ys.size());
  if (ys.size() != 4 || axis != 1 || ys[0] != 1) return false;
  for (size_t i = 0; i < g.num_in(n); ++i) {
    const int v = g.in(n, i);
    if (v < 0 || g.is_const(v) || g.shape(v).size() != 4 || g.shape(v)[1] % block != 0)
      return false;
    for (int c : g.values[v].consumers)
      if (c != n && g.op(c) == "Concat") return false;
  }
  return true;
}

// Whether Concat node n pads the channels of one tensor with constants (a
// TFLite model's channel Pad, as tf2onnx writes it before a residual Add):
// one copy of that tensor in any layout.
bool pads_channels(const ViewInfo& g, int n) {
  if (g.num_out(n) < 1 || g.out(n) < 0 || g.shape(g.out(n)).size() != 4) return false;
  int64_t axis = g.node(n).attr_int("axis", 0);
  if (axis < 0) axis += 4;
  size_t variable = 0;
  for (size_t i = 0; i < g.num_in(n); ++i)
    if (!g.is_const(g.in(n, i))) ++variable;
  return axis == 1 && variable == 1;
}

// Whether Transpose node n only changes the layout at the view's edge: of
// an input (an NHWC image), or of a map on its way out, every reader a
// Reshape to fewer dims (a detector's head flattening its anchors).
bool transposes_at_edge(const ViewInfo& g, int n) {
  const int x = g.in(n, 0), y = g.out(n);
  if (x >= 0 && g.values[x].input) return true;
  if (y < 0 || g.values[y].consumers.empty()) return y >= 0 && g.values[y].output;
  for (int c : g.values[y].consumers)
    if (g.op(c) != "Reshape" || g.num_out(c) < 1 || g.out(c) < 0 ||
        g.shape(g.out(c)).size() >= g.shape(y).size())
      return false;
  return true;
}

// Whether oneDNN's blocked convolution kernels (Lowering::block_convolutions)
// beat the channels-last ones it picks when free to, for this view. Blocked
// pays for batches and for depthwise or grouped convolutions. It costs where
// tensors are cut, joined or shuffled along the channels (Concat, Split,
// Slice, Transpose, a 4-D <-> 5-D Reshape: copies or reorders when blocked,
// cheap channels-last; not a Concat that pads one tensor's channels with
// constants, nor a Transpose at the view's edge, which cost the same either
// way), and plain spatial (KxK) convolutions on one image run
// as fast channels-last. With Winograd (oneDNN has it for AVX-512 only), a
// network whose stride-1 3x3 convolutions are at least 30% of its
// multiply-adds goes blocked, unless over a quarter of them are spatial ones
// Winograd does not take. The thresholds come from timing 17 torchvision
// models each way; the "layout" key forces either. Decided from the view
// alone, so a session from the model and one from its .bpk run the same plan.
bool blocked_pays(const ViewInfo& g, int block, bool winograd) {
  size_t convolutions = 0;
  bool grouped = false, batched = false;
  double macs = 0, plain_spatial_macs = 0, winograd_macs = 0;
  for (size_t k = 0; k < g.num_nodes(); ++k) {
    const int n = static_cast<int>(k);
    const std::string_view op = g.op(n);
    const size_t rank = g.num_in(n) > 0 && g.in(n, 0) >= 0 ? g.shape(g.in(n, 0)).size() : 0;
    if (rank < 4) continue;
    if (op == "Conv") {
      ++convolutions;
      const Dims& xs = g.shape(g.in(n, 0));
      const sdk::NodeRef node = g.node(n);
      const int64_t group = node.attr_int("group", 1);
      if (group > 1) grouped = true;
      if (xs[0] > 1) batched = true;
      // Multiply-adds: every output element, times its window's size.
      if (g.num_in(n) < 2 || g.in(n, 1) < 0 || g.num_out(n) < 1) continue;
      const Dims& ws = g.shape(g.in(n, 1));
      double m = 1, window = 1;
      for (int64_t d : g.shape(g.out(n))) m *= static_cast<double>(std::max<int64_t>(d, 1));
      for (size_t d = 1; d < ws.size(); ++d) m *= static_cast<double>(std::max<int64_t>(ws[d], 1));
      for (size_t d = 2; d < ws.size(); ++d) window *= static_cast<double>(ws[d]);
      macs += m;
      if (group == 1 && window > 1) plain_spatial_macs += m;
      const Dims ones(ws.size() > 2 ? ws.size() - 2 : 0, 1);
      if (winograd_fits(xs, Dims(ws.begin() + std::min<size_t>(2, ws.size()), ws.end()),
                        node.attr_ints("strides", ones), node.attr_ints("dilations", ones), group))
        winograd_macs += m;
    } else if ((op == "Concat" && (concat_in_blocks(g, n, block) || pads_channels(g, n))) ||
               (op == "Transpose" && transposes_at_edge(g, n))) {
      continue;
    } else if (op == "Concat" || op == "Split" || op == "Slice" || op == "Transpose" ||
               op == "DepthToSpace" || op == "SpaceToDepth") {
      return false;
    } else if (op == "Reshape" && g.num_out(n) > 0 && g.shape(g.out(n)).size() >= 4 &&
               g.shape(g.out(n)).size() != rank) {
      return false;  // a channel shuffle's 4-D <-> 5-D
    }
  }
  if (convolutions < 4) return false;
  if (batched) return true;
  if (block == 16 && winograd && winograd_macs >= 0.3 * macs &&
      plain_spatial_macs - winograd_macs <= 0.25 * macs)
    return true;
  return grouped && plain_spatial_macs <= 0.25 * macs;
}

}  // namespace

int threads_to_use(int requested) { return requested > 0 ? requested : default_threads(); }

int convolution_block(const ViewInfo& g, const Tuning& tuning) {
  const int block = cpu_block();
  if (block == 0) return 0;
  switch (tuning.layout) {
    case Tuning::Layout::kOneDnn:
      return 0;
    case Tuning::Layout::kBlocked:
      return block;
    case Tuning::Layout::kByModel:
      break;
  }
  return blocked_pays(g, block, tuning.winograd) ? block : 0;
}

std::string library_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string library_description() {
  const dnnl_version_t* v = dnnl_version();
  const char* rt = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                   : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                   : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                        : "threadpool";
  return "oneDNN " + library_version() + " (" + rt + ")";
}

std::vector<std::string> unsupported_reasons(const sdk::Host& host, const bp_graph_view_t& view) {
  ViewInfo g(host, view);
  std::vector<std::string> reasons(view.num_nodes);
  std::vector<bool> in_pattern(view.num_nodes, false);
  for (const Pattern& p : find_patterns(g))
    for (int k : p.nodes) in_pattern[k] = true;
  for (size_t n = 0; n < view.num_nodes; ++n) {
    if (in_pattern[n] && g.op(static_cast<int>(n)) == "Erf") continue;
    try {
      check_node(g, static_cast<int>(n));
    } catch (const sdk::Error& e) {
      reasons[n] = e.what();
      if (reasons[n].empty()) reasons[n] = "unsupported";
    }
  }
  // DynamicQuantizeLinear runs here only in a dynamically quantized product
  // (fusion.cpp: dynamic_product); QLinearConv, QLinearMatMul, ConvInteger
  // and MatMulInteger only as int8 groups.
  try {
    const FusedGraph f = fuse(g);
    for (size_t k = 0; k < f.nodes.size(); ++k) {
      const INode& m = f.nodes[k];
      if (m.dead || !m.quant) continue;
      if (m.op != "QLinearConv" && m.op != "QLinearMatMul" && m.op != "ConvInteger" &&
          m.op != "MatMulInteger")
        continue;
      for (int v : m.covers) reasons[v].clear();
      for (const INode& member : f.nodes)
        if (member.group == static_cast<int>(k))
          for (int v : member.covers) reasons[v].clear();
    }
  } catch (const std::exception&) {  // the nodes keep their reasons
  }
  return reasons;
}

std::unique_ptr<sdk::CompiledPartition> compile_partition(const sdk::Host& host,
                                                          const bp_graph_view_t& view,
                                                          int num_threads, const Tuning& tuning,
                                                          sdk::NodeReport& report) {
  const int threads = threads_to_use(num_threads);
  const ScopedOmpThreads omp(threads);
  ViewInfo g(host, view);
  // An int8 group oneDNN has no kernel for runs as the float operators it
  // stands for (DequantizeLinear, the operator, QuantizeLinear) instead.
  std::set<int> float_nodes;
  std::map<int, std::string> int8_failures;  // why each of those is not
  while (true) {
    auto compiled = std::make_unique<Compiled>(host);
    compiled->threads = threads;
    compiled->tuning = tuning;
    compiled->name = view.name;
    Lowering lowering(g, *compiled);
    try {
      lowering.prepare(float_nodes);
    } catch (const std::exception& e) {
      for (size_t n = 0; n < view.num_nodes; ++n)
        report.rejected(n, std::string("pattern analysis failed: ") + e.what());
      compiled->empty = true;
      return compiled;
    }
    if (const int block = convolution_block(g, tuning)) {
      lowering.block_convolutions(block);
      lowering.winograd_convolutions(tuning.winograd);
    }
    if (std::optional<LowerFailure> failure = lowering.lower()) {
      if (failure->int8_node >= 0 && float_nodes.insert(failure->int8_node).second) {
        int8_failures[failure->int8_node] = failure->why;
        continue;
      }
      for (int n : failure->nodes) report.rejected(static_cast<size_t>(n), failure->why);
      compiled->empty = true;
      compiled->steps.clear();
    } else if (report.active()) {
      const std::vector<std::string> notes = quant_notes(g, lowering.fused(), int8_failures);
      for (size_t n = 0; n < notes.size(); ++n)
        if (!notes[n].empty()) report.note(n, notes[n]);
    }
    g.release_constants();  // every weight now lives in oneDNN memory
    return compiled;
  }
}

}  // namespace backplane::onednn
