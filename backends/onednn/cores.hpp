// cores.hpp — CpuOneDnn's thread count on a busy machine.
//
// oneDNN runs its primitives in OpenMP parallel regions that split the work
// evenly and wait at a barrier for the slowest thread. When other processes
// keep some of our CPUs busy, one of our threads is descheduled for whole
// scheduler slices and every region waits for it: a 2-thread partition on a
// 2-CPU machine with one busy process beside it ran 5-20 times slower than
// alone, where a runtime whose threads take work dynamically slows down by
// about the share of the CPUs it lost. So before each execute CpuOneDnn caps
// its thread count at the CPUs other processes leave free, measured from
// /proc/stat over the last window (~100 ms): the busy time of the CPUs this
// thread may run on, minus this process's own CPU time. Primitives created
// for N threads run correctly on fewer (their scratchpads are sized for N).
// Experimental, off unless BACKPLANE_ONEDNN_ADAPT_THREADS=1: in make bench's
// contended mode the cap made CpuOneDnn slower (docs/performance.md).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace backplane::onednn {

// Jiffies summed over a set of CPUs: busy (user, nice, system, irq, softirq,
// steal) and total (busy + idle + iowait).
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};

// Sums the "cpuN" lines of /proc/stat's text for the CPUs in `cpus`.
CpuTimes parse_proc_stat(std::string_view text, const std::vector<int>& cpus);

// The CPUs of `cpus` (a count) that other processes left free between two
// readings, given this process's CPU time in that interval: the others' busy
// time in cores, rounded so that a process holding most of a core counts as
// one, taken from `cpus`; at least 1.
int free_cores(const CpuTimes& before, const CpuTimes& after, double self_cpu_seconds,
               double ticks_per_second, int cpus);

// The thread count to execute with now: `configured` capped by the free CPUs
// of the last window. Cheap (a clock read) except once per window, when the
// first caller re-reads /proc/stat; concurrent callers use the last value.
int threads_now(int configured);

}  // namespace backplane::onednn
