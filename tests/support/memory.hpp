// memory.hpp — how much resident memory a piece of work takes, measured in a
// child process so that what the test process holds already does not count.
#pragma once

#include <functional>

namespace backplane::test {

struct MemoryGrowth {
  bool ok = false;   // the child ran `work` and it returned true
  long peak_kb = 0;  // VmHWM after `work`, above VmRSS before it
  long now_kb = 0;   // VmRSS after `work`, above VmRSS before it
};

// Forks; the child runs `setup` (not counted), then `work`, and reports.
// The child's peak starts where the parent's resident memory is, so growth
// reads low, never high.
MemoryGrowth memory_growth_in_child(const std::function<bool()>& work,
                                    const std::function<void()>& setup = {});

}  // namespace backplane::test
