#include "pipeline/constant_folding.hpp"

#include "core/log.hpp"
#include "core/named_data_map.hpp"
#include "partition/graph_view.hpp"
#include "registry/registry.hpp"

namespace backplane {
namespace {

// The weights of a one-node view: the node's constant inputs, by key. Built
// per folded node, so it holds a few pointers rather than indexing every
// constant of the graph (TensorDataMap sorts all their keys).
class NodeInputsMap : public NamedDataMap {
 public:
  void add(const std::string* key, const Tensor* tensor) { entries_.push_back({key, tensor}); }
  Status get(const std::string& key, const void** data, size_t* size) const override {
    for (const Entry& e : entries_)
      if (*e.key == key) {
        *data = e.tensor->data();
        *size = e.tensor->size_bytes();
        return ok_status();
      }
    return not_found("no constant '" + key + "' among the node's inputs");
  }
  size_t num_keys() const override { return entries_.size(); }
  const std::string* key_at(size_t index) const override {
    return index < entries_.size() ? entries_[index].key : nullptr;
  }

 private:
  struct Entry {
    const std::string* key;
    const Tensor* tensor;
  };
  std::vector<Entry> entries_;
};

bp_tensor_t abi_tensor(const Tensor* t, const ir::Value* value) {
  bp_tensor_t bt{};
  bt.struct_size = BP_STRUCT_SIZE(bp_tensor_t, device);
  if (t == nullptr || value == nullptr) return bt;  // an omitted input or output
  bt.dtype = static_cast<bp_dtype_t>(t->dtype());
  bt.rank = t->shape().size();
  bt.shape = t->shape().data();
  bt.data = const_cast<void*>(t->data());
  bt.size_bytes = t->size_bytes();
  return bt;
}

}  // namespace

BackendConstantEvaluator::BackendConstantEvaluator(std::shared_ptr<LoadedBackend> backend)
    : backend_(std::move(backend)) {}

Result<bool> BackendConstantEvaluator::evaluate(const ir::Graph& graph, const ir::Node& node,
                                                const std::vector<const Tensor*>& inputs,
                                                std::vector<Tensor>& outputs) const {
  const LoadedBackend& b = *backend_;
  if (!BP_TABLE_HAS(b.api(), execute_node)) return false;
  NodeInputsMap weights;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i] != nullptr) weights.add(&graph.values[node.inputs[i]].constant_key, inputs[i]);
  std::unique_ptr<GraphView> view = GraphView::for_node(graph, node, &weights, "fold");
  // Every input and output in node order (execute_node's contract); the
  // implicit inputs of a control-flow node are never here (not foldable).
  std::vector<bp_tensor_t> in, out;
  for (size_t i = 0; i < node.inputs.size(); ++i)
    in.push_back(abi_tensor(i < inputs.size() ? inputs[i] : nullptr,
                            node.inputs[i] >= 0 ? &graph.values[node.inputs[i]] : nullptr));
  for (size_t i = 0; i < node.outputs.size(); ++i)
    out.push_back(
        abi_tensor(&outputs[i], node.outputs[i] >= 0 ? &graph.values[node.outputs[i]] : nullptr));
  // execute_node may run concurrently (backend_abi.h): no instance lock.
  bp_status_t* failed = b.api()->execute_node(b.instance(), view->get(), 0, in.size(), in.data(),
                                              out.size(), out.data());
  if (failed != nullptr) {
    const Status s = b.check(failed, "fold " + node.describe());
    log::debug(s.message() + "; left to run time");
    return false;
  }
  return true;
}

const ir::ConstantEvaluator* reference_constant_evaluator() {
  static const std::unique_ptr<BackendConstantEvaluator> evaluator = [] {
    std::shared_ptr<LoadedBackend> cpuref = reference_backend();
    return cpuref != nullptr ? std::make_unique<BackendConstantEvaluator>(std::move(cpuref))
                             : std::unique_ptr<BackendConstantEvaluator>();
  }();
  return evaluator.get();
}

ir::InferOptions infer_options(const ir::OpRegistry* registry) {
  ir::InferOptions options;
  options.registry = registry;
  options.evaluator = reference_constant_evaluator();
  return options;
}

}  // namespace backplane
