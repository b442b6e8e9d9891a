// graph_view.hpp — builds the plain-C subgraph view (bp_graph_view_t) that a
// backend sees, for any subset of an ir::Graph's nodes.
#pragma once

#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "registry/abi_attributes.hpp"

#include <backplane/backend_abi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace backplane {

// Owns every array the view points into. Strings and attribute lists point
// into `graph`, which must outlive the view and not change while it lives.
class GraphView {
 public:
  // A view of `node_ids` (in execution order). Inputs: non-constant values the
  // nodes read that none of them produce, in order of first use. Outputs:
  // values they produce that other nodes or the graph outputs need.
  //
  // With `polymorphic` (API 1.2 shape-polymorphic compiles): only constants
  // for which it returns true (by graph value id) stay constants; every
  // other value keeps its dtype and rank with -1 for each dim, and those of
  // them the nodes read without producing become view inputs.
  static std::unique_ptr<GraphView> build(const ir::Graph& graph, const std::vector<int>& node_ids,
                                          const NamedDataMap* weights, const std::string& name,
                                          const std::function<bool(int)>* polymorphic = nullptr);

  // A view of `node` alone (one of graph.nodes), for running it by itself
  // (execute_node), e.g. to fold it: every input and output of the node in
  // node order, constants as constants; its outputs are the view's outputs.
  // Cheaper than build(): it never looks at the rest of the graph.
  static std::unique_ptr<GraphView> for_node(const ir::Graph& graph, const ir::Node& node,
                                             const NamedDataMap* weights, const std::string& name);

  const bp_graph_view_t* get() const { return &view_; }
  // Graph value ids of the view's inputs / outputs, in view order.
  const std::vector<int>& input_values() const { return input_values_; }
  const std::vector<int>& output_values() const { return output_values_; }
  const std::vector<int>& node_ids() const { return node_ids_; }
  // Graph value id of each view value, in view order.
  const std::vector<int>& value_ids() const { return value_ids_; }
  bool polymorphic() const { return polymorphic_; }
  // Everything a backend sees of the view except its name and weights map,
  // as bytes: two views with equal fingerprints compile to the same thing.
  std::string fingerprint() const;

 private:
  GraphView() = default;
  // Appends node `node`'s attributes (kept in this view) to attributes_.
  void add_attributes(const ir::Node& node);
  // Points view_ at the arrays.
  void finish(const NamedDataMap* weights);
  bp_graph_view_t view_{};
  std::string name_;
  std::vector<int> node_ids_;
  std::vector<bp_value_t> values_;
  std::vector<bp_node_t> nodes_;
  std::vector<std::vector<int32_t>> node_inputs_, node_outputs_;
  std::vector<AbiAttributes> attributes_;  // per node
  std::vector<int32_t> inputs_, outputs_;
  std::vector<int> input_values_, output_values_;
  std::vector<int> value_ids_;
  // The -1 dims of a polymorphic view, at stable addresses (a deque would
  // allocate even for the one-node views constant folding makes).
  std::vector<std::unique_ptr<std::vector<int64_t>>> open_shapes_;
  bool polymorphic_ = false;
};

}  // namespace backplane
