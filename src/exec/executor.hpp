// executor.hpp — a compiled model (plan + compiled partitions + memory plan)
// and the sessions that run it.
#pragma once

#include "ir/graph.hpp"
#include "partition/graph_view.hpp"
#include "partition/partitioner.hpp"
#include "registry/host_api.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <memory>
#include <string>
#include <vector>

namespace backplane {

// One partition compiled by its backend. Immutable after construction, so
// sessions on many threads share it.
struct CompiledPartition {
  std::shared_ptr<Backend> backend;
  std::unique_ptr<GraphView> view;
  bp_compiled_t* compiled = nullptr;
  ~CompiledPartition();
};

// Where each tensor that crosses a partition boundary (or the model's edge)
// lives in a session's arena. Buffers whose lifetimes do not overlap share
// bytes.
struct MemoryPlan {
  static constexpr size_t kAlignment = 64;
  struct Slot {
    int value = -1;
    size_t offset = 0;
    size_t size = 0;
  };
  std::vector<Slot> slots;
  std::vector<int> slot_of_value;  // per graph value, -1 if none
  size_t arena_size = 0;
};

class CompiledModel : public Model, public std::enable_shared_from_this<CompiledModel> {
 public:
  // Partitions, compiles and plans memory for `graph` (shapes already inferred).
  static Result<std::shared_ptr<CompiledModel>> create(std::unique_ptr<ir::Graph> graph,
                                                       const BackendRegistry& registry,
                                                       const ModelOptions& options, uint64_t network_id,
                                                       int num_threads);
  ~CompiledModel() override;

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  const std::vector<PartitionDescription>& partitions() const override { return partition_desc_; }
  std::vector<std::string> backends_used() const override;
  Result<std::unique_ptr<Session>> create_session() override;

  const ir::Graph& graph() const { return *graph_; }
  const Plan& plan() const { return plan_; }
  const std::vector<std::unique_ptr<CompiledPartition>>& compiled() const { return compiled_; }
  const MemoryPlan& memory() const { return memory_; }

 private:
  CompiledModel() = default;
  Status compile_partitions(int num_threads);
  void plan_memory();

  std::unique_ptr<ir::Graph> graph_;
  std::unique_ptr<TensorDataMap> weights_;
  Plan plan_;
  std::vector<std::unique_ptr<CompiledPartition>> compiled_;
  MemoryPlan memory_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<PartitionDescription> partition_desc_;
  std::vector<std::shared_ptr<Backend>> loaded_backends_;  // hooks called on these
  uint64_t network_id_ = 0;
};

}  // namespace backplane
