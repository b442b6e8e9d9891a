// compiled_model.hpp — CompiledModel: the Model of the public API. A graph,
// its plan, its executable partitions (pipeline/compile.hpp), the memory
// spaces they run in, and the step and memory plans every Session of it
// follows (session/memory_plan.hpp). Sessions are in session.cpp.
//
// Thread-safety: immutable once created; any number of threads may create
// and run sessions of one model at once.
#pragma once

#include "core/named_data_map.hpp"
#include "ir/graph.hpp"
#include "partition/partitioner.hpp"
#include "pipeline/compile.hpp"
#include "registry/registry.hpp"
#include "session/memory_plan.hpp"

#include <backplane/runtime.hpp>

#include <memory>
#include <string>
#include <vector>

namespace backplane {

class CompiledModel : public Model, public std::enable_shared_from_this<CompiledModel> {
 public:
  // Partitions, compiles and plans memory for `graph` (shapes already inferred).
  static Result<std::shared_ptr<CompiledModel>> create(std::unique_ptr<ir::Graph> graph,
                                                       const BackendRegistry& registry,
                                                       const PlacementOptions& options,
                                                       uint64_t network_id, int num_threads);
  // The same with a given weights map and planner (compiled artifacts:
  // partitions come from the file, payloads are deserialized). `keep_alive`
  // holds whatever the graph's constants and payloads point into.
  static Result<std::shared_ptr<CompiledModel>> create_with(std::unique_ptr<ir::Graph> graph,
                                                            std::unique_ptr<NamedDataMap> weights,
                                                            const Planner& planner,
                                                            uint64_t network_id, int num_threads,
                                                            std::shared_ptr<const void> keep_alive);
  ~CompiledModel() override;

  const std::vector<TensorInfo>& inputs() const override { return inputs_; }
  const std::vector<TensorInfo>& outputs() const override { return outputs_; }
  const std::vector<PartitionDescription>& partitions() const override { return partition_desc_; }
  std::vector<std::string> backends_used() const override;
  const std::vector<CopyDescription>& copies() const override { return copy_desc_; }
  std::string describe_plan(PlanFormat format) const override;
  const std::vector<std::string>& notes() const override { return notes_; }
  Result<std::unique_ptr<Session>> create_session() override;

  const ir::Graph& graph() const { return *graph_; }
  const Plan& plan() const { return plan_; }
  const std::vector<std::unique_ptr<ExecutablePartition>>& executable() const {
    return executable_;
  }
  // Memory space of executable()[i].
  int space_of(size_t partition) const { return space_of_[partition]; }
  const std::vector<MemorySpace>& spaces() const { return spaces_; }
  const std::vector<ExecStep>& steps() const { return steps_.steps; }
  const std::vector<ExecStep>& init_copies() const { return steps_.init_copies; }
  const MemoryPlan& memory() const { return memory_; }
  size_t value_bytes(int value) const;

 private:
  CompiledModel() = default;
  Status build(const Planner& planner, int num_threads);
  Status notify_before_load();
  void describe();

  std::shared_ptr<const void> keep_alive_;  // destroyed last
  std::unique_ptr<ir::Graph> graph_;
  std::unique_ptr<NamedDataMap> weights_;
  std::vector<std::string> notes_;
  Plan plan_;
  std::vector<std::unique_ptr<ExecutablePartition>> executable_;
  std::vector<int> space_of_;
  std::vector<MemorySpace> spaces_;
  StepPlan steps_;
  MemoryPlan memory_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<PartitionDescription> partition_desc_;
  std::vector<CopyDescription> copy_desc_;
  std::vector<std::shared_ptr<LoadedBackend>> loaded_backends_;  // backends of the final plan
  std::vector<std::shared_ptr<LoadedBackend>> hooked_;           // got before_load_network
  uint64_t network_id_ = 0;
};

}  // namespace backplane
