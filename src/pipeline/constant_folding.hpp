// constant_folding.hpp — the ConstantEvaluator of the pipeline: a folded node
// runs on a backend's kernels through the backend ABI (execute_node on a
// one-node view), by default CpuRef's, so what folding computes is what the
// reference backend computes at run time, for every op and dtype it runs.
#pragma once

#include "ir/constant_folding.hpp"
#include "registry/loaded_backend.hpp"

#include <memory>
#include <string>
#include <vector>

namespace backplane {

// Runs each node on `backend` (which must implement execute_node). A node the
// backend refuses or fails (an op or dtype it lacks, values it rejects) is
// not folded; it stays in the graph and runs with the model.
// Thread-safe: execute_node may be called concurrently (backend_abi.h).
class BackendConstantEvaluator : public ir::ConstantEvaluator {
 public:
  explicit BackendConstantEvaluator(std::shared_ptr<LoadedBackend> backend);
  Result<bool> evaluate(const ir::Graph& graph, const ir::Node& node,
                        const std::vector<const Tensor*>& inputs,
                        std::vector<Tensor>& outputs) const override;

 private:
  std::shared_ptr<LoadedBackend> backend_;
};

// The evaluator on this process's CpuRef (registry's reference_backend());
// null if that could not be created (then nothing folds but Shape, Size and
// Constant). Lives until the process exits.
const ir::ConstantEvaluator* reference_constant_evaluator();

// What the pipeline infers and folds with: `registry` (null: the built-in
// one) and reference_constant_evaluator().
ir::InferOptions infer_options(const ir::OpRegistry* registry = nullptr);

}  // namespace backplane
