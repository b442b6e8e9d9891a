#include "session/memory_plan.hpp"

#include <algorithm>
#include <limits>
#include <set>

namespace backplane {
namespace {

constexpr int kForever = std::numeric_limits<int>::max();

// Host buffers: largest first, each at the lowest offset free for its lifetime.
void place_host_buffers(MemoryPlan& mem) {
  std::vector<int> host;
  for (size_t i = 0; i < mem.buffers.size(); ++i)
    if (mem.buffers[i].space == 0) host.push_back(static_cast<int>(i));
  std::stable_sort(host.begin(), host.end(),
                   [&](int a, int b) { return mem.buffers[a].size > mem.buffers[b].size; });
  std::vector<int> placed;
  for (int i : host) {
    MemoryPlan::Buffer& b = mem.buffers[i];
    std::vector<std::pair<size_t, size_t>> busy;
    for (int j : placed) {
      const MemoryPlan::Buffer& o = mem.buffers[j];
      if (!(o.last < b.first || b.last < o.first)) busy.emplace_back(o.offset, o.offset + o.size);
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + b.size <= lo) break;
      offset = std::max(offset, hi);
    }
    b.offset = offset;
    placed.push_back(i);
    mem.arena_size = std::max(mem.arena_size, offset + b.size);
  }
}

// Device buffers: device pointers are opaque, so reuse whole buffers: in
// order of first use, take the smallest free slot that fits, else make a new one.
void place_device_buffers(MemoryPlan& mem) {
  std::vector<int> device;
  for (size_t i = 0; i < mem.buffers.size(); ++i)
    if (mem.buffers[i].space != 0) device.push_back(static_cast<int>(i));
  std::stable_sort(device.begin(), device.end(),
                   [&](int a, int b) { return mem.buffers[a].first < mem.buffers[b].first; });
  std::vector<int> slot_free_after;  // last step of the slot's current tenant
  for (int i : device) {
    MemoryPlan::Buffer& b = mem.buffers[i];
    int best = -1;
    for (size_t s = 0; s < mem.device_slots.size(); ++s) {
      const MemoryPlan::DeviceSlot& slot = mem.device_slots[s];
      if (slot.space != b.space || slot.size < b.size || slot_free_after[s] >= b.first) continue;
      if (best < 0 || slot.size < mem.device_slots[best].size) best = static_cast<int>(s);
    }
    if (best < 0) {
      mem.device_slots.push_back({b.space, b.size});
      slot_free_after.push_back(b.last);
      best = static_cast<int>(mem.device_slots.size()) - 1;
    }
    slot_free_after[best] = b.last;
    b.offset = static_cast<size_t>(best);
  }
}

}  // namespace

size_t align_to_memory_plan(size_t n) {
  return ((std::max<size_t>(n, 1) + MemoryPlan::kAlignment - 1) / MemoryPlan::kAlignment) *
         MemoryPlan::kAlignment;
}

Result<std::vector<int>> assign_spaces(
    const std::vector<std::shared_ptr<ExecutablePartition>>& partitions,
    std::vector<MemorySpace>* spaces) {
  spaces->assign(1, MemorySpace{nullptr, 0, "host"});
  std::vector<int> space_of;
  for (const auto& ep : partitions) {
    const std::shared_ptr<LoadedBackend>& backend = ep->backend;
    if (!backend->has_flag(BP_BACKEND_FLAG_DEVICE_MEMORY)) {
      space_of.push_back(0);
      continue;
    }
    const bp_backend_api_t* api = backend->api();
    if (!BP_TABLE_HAS(api, memory_alloc) || !BP_TABLE_HAS(api, memory_free) ||
        !BP_TABLE_HAS(api, copy_to_device) || !BP_TABLE_HAS(api, copy_from_device))
      return invalid_argument(
          "backend '" + backend->id() +
          "' declares device memory but lacks memory_alloc/memory_free/copy slots");
    auto it = std::find_if(spaces->begin(), spaces->end(), [&](const MemorySpace& s) {
      return s.backend == backend && s.device == 0;
    });
    if (it == spaces->end()) {
      spaces->push_back(MemorySpace{backend, 0, backend->id() + ":0"});
      it = spaces->end() - 1;
    }
    space_of.push_back(static_cast<int>(it - spaces->begin()));
  }
  return space_of;
}

StepPlan plan_steps(const ir::Graph& g,
                    const std::vector<std::shared_ptr<ExecutablePartition>>& partitions,
                    const std::vector<int>& space_of) {
  StepPlan plan;
  std::vector<int> home(g.values.size(), 0);
  std::vector<std::set<int>> available(g.values.size());
  for (int v : g.inputs) available[v].insert(0);
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) available[v].insert(0);

  // Makes `v` available in `space`, through the host if it lives on a device.
  auto ensure = [&](int v, int space) {
    if (available[v].count(space)) return;
    bool once = g.values[v].is_constant();
    std::vector<ExecStep>& out = once ? plan.init_copies : plan.steps;
    if (space != 0 && home[v] != 0 && !available[v].count(0)) {
      out.push_back(ExecStep{ExecStep::kCopy, -1, v, home[v], 0});
      available[v].insert(0);
    }
    int from = available[v].count(0) ? 0 : home[v];
    out.push_back(ExecStep{ExecStep::kCopy, -1, v, from, space});
    available[v].insert(space);
  };

  for (size_t i = 0; i < partitions.size(); ++i) {
    const ExecutablePartition& ep = *partitions[i];
    for (int v : ep.inputs)
      if (v >= 0) ensure(v, space_of[i]);
    plan.steps.push_back(ExecStep{ExecStep::kRun, static_cast<int>(i), -1, 0, 0});
    for (int v : ep.outputs)
      if (v >= 0) {
        home[v] = space_of[i];
        available[v] = {space_of[i]};
      }
  }
  for (int v : g.outputs) ensure(v, 0);
  return plan;
}

MemoryPlan plan_memory(const ir::Graph& g,
                       const std::vector<std::shared_ptr<ExecutablePartition>>& partitions,
                       const std::vector<int>& space_of, const StepPlan& plan,
                       const std::function<size_t(int)>& value_bytes) {
  MemoryPlan mem;
  std::vector<bool> is_input(g.values.size(), false);
  for (int v : g.inputs) is_input[v] = true;
  // Lifetimes in step indices; init copies happen before step 0.
  auto touch = [&](int v, int space, int step) {
    if (v < 0) return;
    if (space == 0 && g.values[v].is_constant()) return;  // read in place
    if (space == 0 && is_input[v]) return;                // the session's input memory
    auto key = std::make_pair(v, space);
    auto it = mem.buffer_of.find(key);
    if (it == mem.buffer_of.end()) {
      MemoryPlan::Buffer b;
      b.value = v;
      b.space = space;
      b.size = align_to_memory_plan(value_bytes(v));
      b.first = b.last = step;
      mem.buffer_of[key] = static_cast<int>(mem.buffers.size());
      mem.buffers.push_back(b);
      return;
    }
    MemoryPlan::Buffer& b = mem.buffers[it->second];
    b.first = std::min(b.first, step);
    b.last = std::max(b.last, step);
  };
  for (const ExecStep& s : plan.init_copies) {
    touch(s.value, s.to, -1);
    touch(s.value, s.to, kForever);
  }
  for (size_t k = 0; k < plan.steps.size(); ++k) {
    const ExecStep& s = plan.steps[k];
    int step = static_cast<int>(k);
    if (s.kind == ExecStep::kCopy) {
      touch(s.value, s.from, step);
      touch(s.value, s.to, step);
      continue;
    }
    const ExecutablePartition& ep = *partitions[s.partition];
    for (int v : ep.inputs) touch(v, space_of[s.partition], step);
    for (int v : ep.outputs) touch(v, space_of[s.partition], step);
  }
  for (int v : g.outputs)
    if (!g.values[v].is_constant()) touch(v, 0, kForever);
  place_host_buffers(mem);
  place_device_buffers(mem);
  return mem;
}

}  // namespace backplane
