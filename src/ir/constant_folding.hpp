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
#include <map>
#include <string>
#include <vector>

namespace backplane::ir {

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
};

// infer_shapes (graph.hpp) with options: resolves input shapes, infers every
// value's dtype and static shape and folds the nodes whose inputs are all
// constants (and Shape/Size nodes, whose inputs' shapes are static now).
Status infer_shapes(Graph& graph, const std::map<std::string, Shape>& input_shapes,
                    const InferOptions& options);

// fold_constants (graph.hpp) with options: folds every node whose inputs are
// all constants, without input shapes.
Status fold_constants(Graph& graph, const InferOptions& options);

}  // namespace backplane::ir
