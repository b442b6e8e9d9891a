// memory_plan.hpp — what one run does and where every tensor lives.
//
// A run is a list of steps: execute a partition, or copy a tensor between
// memories (host and a backend's device memory). Copies are inserted only
// where a producer and a consumer live in different memories; a tensor on one
// device needed on another goes through the host. Every buffer is planned
// once per model: host tensors share one arena by lifetime, device tensors
// reuse device buffers by lifetime. Graph inputs in host memory are not
// planned: they stay where the session keeps them (set_input) or where the
// caller bound them (bind_input).
//
// Plain data, computed once when a model is loaded and read-only afterwards.
#pragma once

#include "ir/graph.hpp"
#include "pipeline/compile.hpp"
#include "registry/loaded_backend.hpp"

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace backplane {

// A memory: 0 is the host; others are one device of one backend.
struct MemorySpace {
  std::shared_ptr<LoadedBackend> backend;  // null for the host
  uint32_t device = 0;
  std::string name;  // "host" or "MockAcc:0"
};

struct ExecStep {
  enum Kind { kRun, kCopy } kind = kRun;
  int partition = -1;                // kRun
  int value = -1, from = 0, to = 0;  // kCopy
};

// The steps of every run, and the copies made once per session (constants
// to devices).
struct StepPlan {
  std::vector<ExecStep> steps;
  std::vector<ExecStep> init_copies;
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

// `n` rounded up to MemoryPlan::kAlignment (at least one unit).
size_t align_to_memory_plan(size_t n);

// The memory space of each partition: the host, or device 0 of a backend
// that declares device memory (added to `spaces`, which starts with the host).
Result<std::vector<int>> assign_spaces(
    const std::vector<std::shared_ptr<ExecutablePartition>>& partitions,
    std::vector<MemorySpace>* spaces);

StepPlan plan_steps(const ir::Graph& graph,
                    const std::vector<std::shared_ptr<ExecutablePartition>>& partitions,
                    const std::vector<int>& space_of);

// `value_bytes(v)` is the size of value v's tensor.
MemoryPlan plan_memory(const ir::Graph& graph,
                       const std::vector<std::shared_ptr<ExecutablePartition>>& partitions,
                       const std::vector<int>& space_of, const StepPlan& steps,
                       const std::function<size_t(int)>& value_bytes);

}  // namespace backplane
