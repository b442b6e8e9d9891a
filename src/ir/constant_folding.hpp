// constant_folding.hpp — how shape inference folds a node whose inputs are all
// constants: what it asks of whoever computes the values.
//
// The graph IR evaluates no operator itself (kernels live in backends): it
// folds only what needs no kernel (Shape and Size read shapes, Constant reads
// its attribute) and hands every other node to a ConstantEvaluator. The
// pipeline's runs CpuRef's kernels through the backend ABI
// (pipeline/constant_folding.hpp), so folding computes exactly what CpuRef
// computes at run time, for every op and dtype it runs.
#pragma once

#include "ir/graph.hpp"

#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace backplane::ir {

class OpSchema;

class ConstantEvaluator {
 public:
  virtual ~ConstantEvaluator() = default;
  // Computes node `node` of `graph` (one of graph.nodes). `inputs[i]` is the
  // value of formal input i (nullptr for an omitted optional input);
  // `outputs[i]` is already allocated with the dtype and shape inference gave
  // output i (an empty Tensor for an omitted output): write its bytes.
  // Returns false when this node cannot be computed here (an op, dtype or
  // attribute the evaluator does not run, or a computation that fails on
  // these values): it is then left in the graph and runs with the model.
  // Thread-safe: models are specialised from several threads at once.
  virtual Result<bool> evaluate(const Graph& graph, const Node& node,
                                const std::vector<const Tensor*>& inputs,
                                std::vector<Tensor>& outputs) const = 0;
};

struct InferOptions {
  // Where ops are resolved; nullptr: OpRegistry::builtin(). A Runtime's
  // registry adds the operators its backends define.
  const OpRegistry* registry = nullptr;
  // What computes folded nodes; nullptr folds only Shape, Size and Constant.
  const ConstantEvaluator* evaluator = nullptr;
  // A node whose outputs hold more elements than this is not folded: a cheap
  // kernel at run time beats resident memory (and a slow load).
  int64_t max_fold_elements = int64_t{1} << 22;
  // Per node of the graph inferred, its schema once found and checked
  // against the node (nullptr: looked up and checked at every visit).
  // IncrementalInference keeps one across its calls.
  std::vector<const OpSchema*>* schemas = nullptr;
};

// infer_shapes (graph.hpp) with options: resolves input shapes, infers every
// value's dtype and static shape and folds the nodes whose inputs are all
// constants (and Shape/Size nodes, whose inputs' shapes are static now).
Status infer_shapes(Graph& graph, const std::map<std::string, Shape>& input_shapes,
                    const InferOptions& options);

// fold_constants (graph.hpp) with options: folds every node whose inputs are
// all constants, without input shapes.
Status fold_constants(Graph& graph, const InferOptions& options);

// infer_shapes of one graph at one set of input shapes after another, each
// call inferring again only the nodes its shapes reach: those with an input
// whose dtype, shape or constant value differs from the previous call's. The
// others keep their outputs, folded constants included. A decoder's new
// cache length reaches a few nodes of its graph; the rest cost a comparison.
// What it finds equals what infer_shapes finds on a fresh copy of the graph
// (prune_into gives that copy). Not thread-safe: one call at a time.
class IncrementalInference {
 public:
  // `graph` is not copied until the first infer(); it must outlive this
  // object.
  IncrementalInference(const Graph& graph, const InferOptions& options);
  ~IncrementalInference();
  IncrementalInference(const IncrementalInference&) = delete;
  IncrementalInference& operator=(const IncrementalInference&) = delete;

  // Infers the graph at `input_shapes` (every input's shape, as for
  // infer_shapes). After a failure the next call starts from the graph
  // again; the error is infer_shapes' for the same node, without the
  // graph's source as context.
  Status infer(const std::map<std::string, Shape>& input_shapes);
  // `out` becomes the graph as infer_shapes leaves it after the last
  // successful call: folded nodes dropped, then what nobody needs
  // (Graph::remove_dead), constants renamed by `rename` where it returns
  // a key (constants these shapes made: see specialize_graph). `out`'s
  // storage is reused: a graph pruned here before takes the next
  // signature's with few allocations.
  void prune_into(Graph& out,
                  const std::function<std::string(const Value&)>& rename = nullptr) const;
  // How many nodes the last call inferred again (the rest kept theirs).
  size_t reinferred() const;
  // The calls of infer() so far, and per value the call (numbered from 1)
  // that last changed its dtype, shape or constant value (every value a node
  // makes, and every input, at a call that started afresh; 0: none did);
  // value ids as in inferred().
  uint64_t calls() const;
  const std::vector<uint64_t>& changed_at() const;
  // Whether the last successful call folded a node the call before did not,
  // or the reverse (always after a call that started afresh).
  bool folding_changed() const;
  // What the last successful call found, before prune_into: the graph
  // sorted, every value as inferred (value ids as in prune_into's result),
  // folded nodes kept, and which nodes are folded. Valid until the next call.
  const Graph& inferred() const;
  const std::vector<bool>& folded() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace backplane::ir
