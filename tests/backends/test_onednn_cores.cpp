// CpuOneDnn's thread cap on a busy machine (backends/onednn/cores.hpp).
#include "onednn/cores.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

namespace backplane::onednn {
namespace {

// Two CPUs and the aggregate line; cpu1 has all eight fields, cpu0 only the
// four of old kernels.
constexpr const char* kStat =
    "cpu  900 10 300 5000 20 5 5 0 0 0\n"
    "cpu0 400 0 100 2500\n"
    "cpu1 500 10 200 2500 20 5 5 7 0 0\n"
    "intr 12345 0 0\n"
    "cpu_not_a_cpu 1 2 3 4\n";

TEST(OneDnnCores, ParsesTheLinesOfTheAllowedCpus) {
  CpuTimes both = parse_proc_stat(kStat, {0, 1});
  EXPECT_EQ(both.busy, 400u + 100 + 500 + 10 + 200 + 5 + 5 + 7);
  EXPECT_EQ(both.total, both.busy + 2500 + 2500 + 20);
  CpuTimes one = parse_proc_stat(kStat, {1});
  EXPECT_EQ(one.busy, 500u + 10 + 200 + 5 + 5 + 7);
  EXPECT_EQ(one.total, one.busy + 2500 + 20);
  EXPECT_EQ(parse_proc_stat(kStat, {7}).total, 0u);
  EXPECT_EQ(parse_proc_stat("", {0}).total, 0u);
}

// `others` cores busy over one second of 2 CPUs at 100 ticks/s, of which
// `self` seconds were this process's.
int free_of(double others, double self, int cpus = 2) {
  const double ticks = 100;
  CpuTimes before{1000, 10000};
  CpuTimes after = before;
  after.total += static_cast<uint64_t>(cpus * ticks);  // one second on every CPU
  after.busy += static_cast<uint64_t>((others + self) * ticks);
  return free_cores(before, after, self, ticks, cpus);
}

TEST(OneDnnCores, OtherProcessesTakeCoresOurOwnTimeDoesNot) {
  EXPECT_EQ(free_of(0.0, 0.0), 2);    // idle machine
  EXPECT_EQ(free_of(0.0, 2.0), 2);    // our own two threads at full speed
  EXPECT_EQ(free_of(0.3, 1.7), 2);    // background noise
  EXPECT_EQ(free_of(0.67, 1.33), 1);  // a busy loop sharing the CPUs with our threads
  EXPECT_EQ(free_of(1.0, 1.0), 1);
  EXPECT_EQ(free_of(2.0, 0.0), 1);  // never below one thread
  EXPECT_EQ(free_of(1.7, 0.0, 4), 2);
  EXPECT_EQ(free_of(3.0, 1.0, 4), 1);
}

TEST(OneDnnCores, NoIntervalMeansNoCap) {
  CpuTimes t{100, 1000};
  EXPECT_EQ(free_cores(t, t, 0, 100, 2), 2);
  EXPECT_EQ(free_cores(CpuTimes{200, 2000}, t, 0, 100, 2), 2);  // counters went back
}

int allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// Live: with twice as many busy processes as this process may use CPUs,
// threads_now caps any thread count at 1 within a few windows. (The reverse,
// a quiet machine giving back every thread, is not asserted: make test runs
// other tests beside this one.)
TEST(OneDnnCores, BusyProcessesCapTheThreadCount) {
  const int cpus = allowed_cpus();
  if (cpus < 2) GTEST_SKIP() << "needs 2 CPUs; this process may use " << cpus;
  setenv("BACKPLANE_ONEDNN_ADAPT_THREADS", "1", 1);  // off by default
  EXPECT_EQ(threads_now(1), 1);
  std::vector<pid_t> busy;
  for (int i = 0; i < 2 * cpus; ++i) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    busy.push_back(pid);
  }
  int seen = cpus;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < until && seen != 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen = threads_now(cpus);
  }
  for (pid_t pid : busy) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(seen, 1) << "with " << 2 * cpus << " busy processes on " << cpus << " CPUs";
}

}  // namespace
}  // namespace backplane::onednn
