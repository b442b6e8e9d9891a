// executor.hpp — a compiled model (plan + compiled partitions + memory plan)
// and the sessions that run it.
//
// A run is a list of steps: execute a partition, or copy a tensor between
// memories (host and a backend's device memory). Copies are inserted only
// where a producer and a consumer live in different memories; a tensor on one
// device needed on another goes through the host. Every buffer is planned
// once per model: host tensors share one arena by lifetime, device tensors
// reuse device buffers by lifetime.
#pragma once

#include "ir/graph.hpp"
#include "partition/graph_view.hpp"
#include "partition/partitioner.hpp"
#include "core/named_data_map.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace backplane {

// One partition compiled by its backend (or, for an imperative backend, just
// its view). Immutable after construction, so sessions on many threads share it.
struct CompiledPartition {
  std::shared_ptr<Backend> backend;
  std::unique_ptr<GraphView> view;
  bp_compiled_t* compiled = nullptr;  // null when imperative
  bool imperative = false;
  int space = 0;                      // memory space its tensors live in
  std::vector<int> inputs, outputs;   // graph value ids, in execute order (-1 = omitted)
  ~CompiledPartition();
};

// A memory: 0 is the host; others are one device of one backend.
struct MemorySpace {
  std::shared_ptr<Backend> backend;  // null for the host
  uint32_t device = 0;
  std::string name;                  // "host" or "MockAcc:0"
};

struct ExecStep {
  enum Kind { kRun, kCopy } kind = kRun;
  int partition = -1;               // kRun
  int value = -1, from = 0, to = 0; // kCopy
};

// Where every (value, memory space) pair lives.
struct MemoryPlan {
  static constexpr size_t kAlignment = 64;
  struct Buffer {
    int value = -1;
    int space = 0;
    size_t size = 0;
    int first = 0, last = 0;  // step range it must survive
    size_t offset = 0;        // host: arena offset; device: index into device_slots
  };
  struct DeviceSlot {
    int space = 0;
    size_t size = 0;
  };
  std::vector<Buffer> buffers;
  std::map<std::pair<int, int>, int> buffer_of;  // (value, space) -> index into buffers
  std::vector<DeviceSlot> device_slots;
  size_t arena_size = 0;
};

// Makes a plan that avoids the excluded (node, backend) pairs, and says what a
// user should know about it in `notes`.
using Planner = std::function<Result<Plan>(const Exclusions&, std::vector<std::string>* notes)>;

class CompiledModel : public Model, public std::enable_shared_from_this<CompiledModel> {
 public:
  // Partitions, compiles and plans memory for `graph` (shapes already inferred).
  static Result<std::shared_ptr<CompiledModel>> create(std::unique_ptr<ir::Graph> graph,
                                                       const BackendRegistry& registry,
                                                       const ModelOptions& options, uint64_t network_id,
                                                       int num_threads);
  // The same with a given weights map and planner (compiled artifacts:
  // partitions come from the file, payloads are deserialized). `keep_alive`
  // holds whatever the graph's constants and payloads point into.
  static Result<std::shared_ptr<CompiledModel>> create_with(std::unique_ptr<ir::Graph> graph,
                                                            std::unique_ptr<NamedDataMap> weights,
                                                            const Planner& planner, uint64_t network_id,
                                                            int num_threads, std::shared_ptr<const void> keep_alive);
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
  const std::vector<std::unique_ptr<CompiledPartition>>& compiled() const { return compiled_; }
  const std::vector<MemorySpace>& spaces() const { return spaces_; }
  const std::vector<ExecStep>& steps() const { return steps_; }
  const std::vector<ExecStep>& init_copies() const { return init_copies_; }
  const MemoryPlan& memory() const { return memory_; }
  size_t value_bytes(int value) const;

 private:
  CompiledModel() = default;
  // Compiles every partition; on nodes a backend failed, adds them to
  // `failed` and returns false so the caller plans again without them.
  Result<bool> compile_partitions(int num_threads, Exclusions* failed);
  Status build(const Planner& planner, int num_threads);
  void plan_steps();
  void plan_memory();

  std::shared_ptr<const void> keep_alive_;  // destroyed last
  std::unique_ptr<ir::Graph> graph_;
  std::unique_ptr<NamedDataMap> weights_;
  std::vector<std::string> notes_;
  Plan plan_;
  std::vector<std::unique_ptr<CompiledPartition>> compiled_;
  std::vector<MemorySpace> spaces_;
  std::vector<ExecStep> steps_;        // every run
  std::vector<ExecStep> init_copies_;  // once per session (constants to devices)
  MemoryPlan memory_;
  std::vector<TensorInfo> inputs_, outputs_;
  std::vector<PartitionDescription> partition_desc_;
  std::vector<CopyDescription> copy_desc_;
  std::vector<std::shared_ptr<Backend>> loaded_backends_;  // backends of the final plan
  std::vector<std::shared_ptr<Backend>> hooked_;           // got before_load_network
  uint64_t network_id_ = 0;
};

}  // namespace backplane
