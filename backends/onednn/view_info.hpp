// view_info.hpp — a graph view with producers, consumers and constants at
// hand: what the support checks, the pattern matcher, the fusion and the
// lowering of CpuOneDnn read (all by value and node index of the view).
#pragma once

#include <backplane/backend_sdk.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace backplane::onednn {

using Dims = std::vector<int64_t>;

// Pads a shape on the left with 1s up to `rank` (numpy broadcasting).
Dims left_pad(const Dims& d, size_t rank);
// Dim i of left_pad(d, rank), without making it (rank >= d.size()).
inline int64_t padded_dim(const Dims& d, size_t rank, size_t i) {
  return i + d.size() < rank ? 1 : d[i + d.size() - rank];
}
// Whether left_pad(d, full.size()) == full.
inline bool pads_to(const Dims& d, const Dims& full) {
  if (d.size() > full.size()) return false;
  for (size_t i = 0; i < full.size(); ++i)
    if (padded_dim(d, full.size(), i) != full[i]) return false;
  return true;
}

// What CpuOneDnn throws for anything it cannot run: BP_STATUS_UNSUPPORTED.
inline sdk::Error fail(const std::string& what) { return sdk::unsupported(what); }

struct ValueInfo {
  Dims shape;
  bp_dtype_t dtype = BP_DTYPE_UNDEFINED;
  bool constant = false, input = false, output = false;
  int producer = -1;  // view node
  // A DequantizeLinear of constants (the host keeps them, so that int8
  // weights stay int8): its output is a constant here, computed on demand.
  bool dequantized = false;
  // In an instance of a shape-polymorphic partition: a dim before the last
  // is open in the partition (its rows may differ from one instance to the
  // next: Lowering::lower_matmul_collapsed).
  bool open_rows = false;
  // In such an instance: rank 3 or more and a dim other than the channels
  // (dim 1) open: its pixels may differ from one instance to the next
  // (Lowering::lower_pointwise_conv).
  bool open_pixels = false;
  std::vector<int> consumers;  // view nodes (once per node)
};

// Lives no longer than the view. Constants read through data() stay held
// (and readable) until release_constants().
class ViewInfo {
 public:
  ViewInfo(const sdk::Host& host, const bp_graph_view_t& view);

  const bp_graph_view_t& view() const { return view_; }
  size_t num_nodes() const { return view_.num_nodes; }
  sdk::NodeRef node(int n) const { return sdk::NodeRef(&view_, static_cast<size_t>(n)); }
  std::string_view op(int n) const { return view_.nodes[n].op_type; }
  int in(int n, size_t i) const {
    return i < view_.nodes[n].num_inputs ? view_.nodes[n].inputs[i] : -1;
  }
  int out(int n, size_t i = 0) const {
    return i < view_.nodes[n].num_outputs ? view_.nodes[n].outputs[i] : -1;
  }
  size_t num_in(int n) const { return view_.nodes[n].num_inputs; }
  size_t num_out(int n) const { return view_.nodes[n].num_outputs; }
  const Dims& shape(int v) const { return values[v].shape; }
  // False for a view compiled shape-polymorphic, whose non-constant dims are
  // -1: checks that need them wait for the concrete shapes of a run.
  bool shapes_known() const { return shapes_known_; }
  // True while an instance of a shape-polymorphic partition is lowered
  // (polymorphic.hpp), which may do what a compiled plan does not (take an
  // empty cache into a Concat).
  bool instance = false;
  bool is_const(int v) const { return v >= 0 && values[v].constant; }
  // An output value that something reads (inside or outside the view).
  bool used(int v) const { return v >= 0 && (values[v].output || !values[v].consumers.empty()); }
  std::string describe(int n) const {
    return "node '" + std::string(view_.nodes[n].name) + "' (" + std::string(op(n)) + ")";
  }
  std::string value_name(int v) const { return view_.values[v].name; }

  // The only node reading `v`, if `v` is not also a partition output.
  int only_consumer(int v) const {
    if (v < 0 || values[v].output || values[v].consumers.size() != 1) return -1;
    return values[v].consumers[0];
  }
  // The input of binary node n that is not `v` (-1 if n reads v twice).
  int other_input(int n, int v) const {
    if (num_in(n) != 2) return -1;
    if (in(n, 0) == v && in(n, 1) != v) return in(n, 1);
    if (in(n, 1) == v && in(n, 0) != v) return in(n, 0);
    return -1;
  }

  // The bytes of constant `v` (checked against its shape and dtype).
  const void* data(int v);
  // Constant `v`'s bytes held apart from data()'s, for a plan that reads
  // them where the host keeps them, as long as it lives (the host's copy is
  // then the only one).
  sdk::Weight borrow(int v);
  // Constant `v` as float32; throws (UNSUPPORTED) if it is not one.
  const float* f32(int v);
  // The value of a float32 constant of one element, if `v` is one.
  std::optional<float> scalar(int v);
  // An int64/int32 constant as int64s, if `v` is one.
  std::optional<std::vector<int64_t>> ints(int v);
  // The float32 values of a `dequantized` constant.
  const float* dequantized(int v);
  void release_constants() {
    held_.clear();
    dequantized_.clear();
  }
  // Lets go of constant `v` (data() asks the host for it again).
  void release(int v) {
    held_.erase(v);
    dequantized_.erase(v);
  }

  std::vector<ValueInfo> values;
  // Nodes check_node passed: fusion and lowering ask again, and a node's
  // operator, dtypes and shapes do not change while one view is lowered.
  std::vector<bool> node_checked;

 private:
  const bp_graph_view_t& view_;
  const sdk::Host& host_;
  std::map<int, sdk::Weight> held_;
  std::map<int, std::vector<float>> dequantized_;
  bool shapes_known_ = true;
};

}  // namespace backplane::onednn
