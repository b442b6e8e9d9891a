// CpuOneDnn's thread count on a busy machine (backends/onednn/cores.hpp).
#include "onednn/cores.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace backplane::onednn {
namespace {

constexpr int64_t kMs = 1'000'000;

// Executes of 5 ms on every thread until a window is full, the calling
// thread waiting `share` of each for a CPU and preempted once in each (or
// never: the wait was for its CPU to wake up).
void run_window(Governor& g, int configured, double share, bool preempted = true) {
  for (int64_t t = 0; t < Governor::kWindowNs; t += 5 * kMs)
    g.executed(configured, g.threads(configured), 5 * kMs, int64_t(share * 5 * kMs),
               preempted ? 1 : 0);
}

// Samples of the other runnable threads, one per ms over a window.
void sample_window(Governor& g, int configured, int others, int64_t& now) {
  for (int i = 0; i <= 20; ++i, now += kMs) g.others_runnable(configured, others, now);
}

TEST(OneDnnGovernor, AloneEveryThreadRuns) {
  Governor g(2);
  for (double share : {0.0, 0.02, 0.1, 0.2}) {  // scheduler noise, a short task beside us
    run_window(g, 2, share);
    EXPECT_EQ(g.threads(2), 2) << "delay share " << share;
  }
  EXPECT_EQ(g.threads(1), 1);
}

// 2 threads and one busy process on 2 CPUs: each runs 2/3 of the time, the
// delay share is 1/3, one CPU is taken. Two busy processes: 1/2, both.
TEST(OneDnnGovernor, RunQueueDelayCapsAtTheCpusLeft) {
  Governor one(2);
  run_window(one, 2, 1.0 / 3);
  EXPECT_EQ(one.threads(2), 1);
  Governor two(2);
  run_window(two, 2, 0.5);
  EXPECT_EQ(two.threads(2), 1);  // never below one
  Governor big(8);               // 8 threads on 8 CPUs, 2 others: 8 / 10 of the time
  run_window(big, 8, 0.2);
  EXPECT_EQ(big.threads(8), 6);
  EXPECT_EQ(big.threads(4), 4);  // a partition made for fewer is not raised
}

TEST(OneDnnGovernor, NothingIsDecidedBeforeAWindowIsFull) {
  Governor g(2);
  g.executed(2, 2, 10 * kMs, 9 * kMs, 3);
  EXPECT_EQ(g.threads(2), 2);
  g.executed(2, 2, 10 * kMs, 0, 0);  // the window: 9 of 20 ms
  EXPECT_EQ(g.threads(2), 1);
}

// Short executes after idle wait for their CPUs to wake up (a halted vCPU),
// a large share of their time, without being preempted: no cap.
TEST(OneDnnGovernor, WakeUpLatencyIsNotContention) {
  Governor g(2);
  run_window(g, 2, 0.5, /*preempted=*/false);
  EXPECT_EQ(g.threads(2), 2);
  g.executed(2, 2, 20 * kMs, 10 * kMs, 1);  // one preemption in a window: noise
  EXPECT_EQ(g.threads(2), 2);
  g.executed(2, 2, 20 * kMs, 10 * kMs, 2);
  EXPECT_EQ(g.threads(2), 1);
}

// Capped, the delay says nothing (our threads fit); the others' runnable
// count decides: still there, the cap stays; gone, every thread is back.
TEST(OneDnnGovernor, CappedUntilTheOthersLeave) {
  Governor g(2);
  run_window(g, 2, 1.0 / 3);
  ASSERT_EQ(g.threads(2), 1);
  run_window(g, 2, 0.0);  // capped executes: no information
  EXPECT_EQ(g.threads(2), 1);
  int64_t now = 1000 * kMs;
  sample_window(g, 2, 1, now);
  EXPECT_EQ(g.threads(2), 1);
  g.others_runnable(2, 0, now);  // one sample is not a window
  EXPECT_EQ(g.threads(2), 1);
  now += 30 * kMs;
  sample_window(g, 2, 0, now);
  EXPECT_EQ(g.threads(2), 2);
  EXPECT_EQ(g.cap(), 0);
  run_window(g, 2, 0.0);
  EXPECT_EQ(g.threads(2), 2);
}

// One CPU left: the cap's one thread runs there. None left: capped too, and
// saturated (CpuOneDnn then runs its plan in bands on every thread, since
// one thread would get only a share of a CPU); the others' count decides
// again while capped, both ways.
TEST(OneDnnGovernor, SaturatedWhenNoCpuIsFree) {
  Governor one(2);
  run_window(one, 2, 1.0 / 3);
  EXPECT_EQ(one.threads(2), 1);
  EXPECT_FALSE(one.saturated());
  Governor two(2);
  run_window(two, 2, 0.5);
  EXPECT_EQ(two.threads(2), 1);
  EXPECT_TRUE(two.saturated());
  int64_t now = 1000 * kMs;
  sample_window(two, 2, 1, now);  // one CPU free again
  EXPECT_EQ(two.threads(2), 1);
  EXPECT_FALSE(two.saturated());
  now += 30 * kMs;
  sample_window(two, 2, 3, now);
  EXPECT_TRUE(two.saturated());
  now += 30 * kMs;
  sample_window(two, 2, 0, now);
  EXPECT_EQ(two.threads(2), 2);
  EXPECT_FALSE(two.saturated());
}

// Saturated, a plan tries both ways (one thread, then bands) and keeps the
// faster, bands only by a margin; the first execute after a switch is not
// counted.
using Way = SaturatedWay::Way;

// Executes of `way` until it is no longer the next way or `limit` ran; the
// first of them takes `first` ms, the others `ms`.
int run_way(SaturatedWay& w, Way way, int64_t ms, int64_t first = -1, int limit = 1000) {
  int n = 0;
  while (w.next() == way && n < limit) {
    w.ran(way, (n == 0 && first >= 0 ? first : ms) * kMs);
    ++n;
  }
  return n;
}

TEST(OneDnnSaturatedWay, TriesBothThenKeepsTheFaster) {
  SaturatedWay w;
  EXPECT_EQ(w.next(), SaturatedWay::kOneThread);
  // A first execute 10 times slower (the switch) does not count.
  EXPECT_EQ(run_way(w, SaturatedWay::kOneThread, 30, 300), SaturatedWay::kTrialRuns);
  EXPECT_EQ(w.median(SaturatedWay::kOneThread), 30 * kMs);
  EXPECT_EQ(w.next(), SaturatedWay::kBands);
  EXPECT_EQ(run_way(w, SaturatedWay::kBands, 20, -1, SaturatedWay::kTrialRuns),
            SaturatedWay::kTrialRuns);
  EXPECT_EQ(w.next(), SaturatedWay::kBands);  // kept
  EXPECT_EQ(w.hold(), SaturatedWay::kMinHold);
  EXPECT_NE(w.why().find("in bands (median 20.00 ms) rather than on one thread (30.00 ms)"),
            std::string::npos)
      << w.why();
  // Kept for the hold, then one thread is tried again.
  EXPECT_EQ(run_way(w, SaturatedWay::kBands, 20), SaturatedWay::kMinHold);
  EXPECT_EQ(w.next(), SaturatedWay::kOneThread);
}

TEST(OneDnnSaturatedWay, BandsWinOnlyByTheMargin) {
  // Bands 5% faster than one thread: within a busy machine's noise, and a
  // helper's CPU taken from the other processes; one thread stays.
  SaturatedWay w;
  run_way(w, SaturatedWay::kOneThread, 20);
  EXPECT_EQ(run_way(w, SaturatedWay::kBands, 19), SaturatedWay::kTrialRuns);
  EXPECT_EQ(w.next(), SaturatedWay::kOneThread);
  EXPECT_NE(w.why().find("on one thread (median 20.00 ms) rather than in bands (19.00 ms)"),
            std::string::npos)
      << w.why();
  // The next trial finds bands 15% faster: they take over.
  EXPECT_EQ(run_way(w, SaturatedWay::kOneThread, 20), SaturatedWay::kMinHold);
  EXPECT_EQ(run_way(w, SaturatedWay::kBands, 17, -1, SaturatedWay::kTrialRuns),
            SaturatedWay::kTrialRuns);
  EXPECT_EQ(w.next(), SaturatedWay::kBands);
  EXPECT_EQ(w.hold(), SaturatedWay::kMinHold);
}

TEST(OneDnnSaturatedWay, TheHoldGrowsWhileTheSameWayWinsAndResetsWhenTheOtherDoes) {
  SaturatedWay w;
  run_way(w, SaturatedWay::kOneThread, 20);
  run_way(w, SaturatedWay::kBands, 10, -1, SaturatedWay::kTrialRuns);
  EXPECT_EQ(w.next(), SaturatedWay::kBands);
  int hold = SaturatedWay::kMinHold;
  EXPECT_EQ(w.hold(), hold);
  for (int round = 0; round < 6; ++round) {
    EXPECT_EQ(run_way(w, SaturatedWay::kBands, 10), hold);                          // kept
    EXPECT_EQ(run_way(w, SaturatedWay::kOneThread, 20), SaturatedWay::kTrialRuns);  // tried
    hold = std::min(hold * 2, SaturatedWay::kMaxHold);
    EXPECT_EQ(w.hold(), hold);
  }
  EXPECT_EQ(w.hold(), SaturatedWay::kMaxHold);
  // The load changes: bands slow down (the hold's latest executes are the
  // pace compared), and the next trial of one thread wins.
  EXPECT_EQ(run_way(w, SaturatedWay::kBands, 40), SaturatedWay::kMaxHold);
  run_way(w, SaturatedWay::kOneThread, 20, -1, SaturatedWay::kTrialRuns);
  EXPECT_EQ(w.next(), SaturatedWay::kOneThread);
  EXPECT_EQ(w.hold(), SaturatedWay::kMinHold);
  EXPECT_EQ(w.median(SaturatedWay::kBands), 40 * kMs);
}

TEST(OneDnnSaturatedWay, AMedianIgnoresOneOutlierAndOtherWaysAreNotCounted) {
  SaturatedWay w;
  // A run in bands forced while one thread is measured (or the reverse) is
  // not a sample.
  EXPECT_FALSE(w.ran(SaturatedWay::kBands, 1 * kMs));
  w.ran(SaturatedWay::kOneThread, 50 * kMs);  // the switch
  w.ran(SaturatedWay::kOneThread, 10 * kMs);
  w.ran(SaturatedWay::kOneThread, 90 * kMs);  // descheduled for a while
  w.ran(SaturatedWay::kOneThread, 12 * kMs);
  EXPECT_EQ(w.median(SaturatedWay::kOneThread), 12 * kMs);
  EXPECT_EQ(w.next(), SaturatedWay::kBands);
  EXPECT_EQ(w.median(SaturatedWay::kBands), -1);
}

// Live: with twice as many busy processes as this process may use CPUs, a
// thread that executes (sleeping stands in for oneDNN's work: its delay is
// what the scheduler gives it once woken) is capped at 1 within a second.
// (The reverse, a quiet machine giving back every thread, is not asserted:
// make test runs other tests beside this one.)
TEST(OneDnnGovernor, BusyProcessesCapTheThreadCount) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  if (cpus < 2) GTEST_SKIP() << "needs 2 CPUs; this process may use " << cpus;
  unsetenv("BACKPLANE_ONEDNN_ADAPT_THREADS");
  unsetenv("BACKPLANE_ONEDNN_FREE_CORES");
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
    ExecuteScope scope(cpus);
    // Work the scheduler must share: spin for 2 ms of wall time.
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(2);
    volatile unsigned long spin = 0;
    while (std::chrono::steady_clock::now() < end) spin = spin + 1;
    seen = threads_now(cpus);
  }
  for (pid_t pid : busy) {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  EXPECT_EQ(seen, 1) << "with " << 2 * cpus << " busy processes on " << cpus << " CPUs";
}

TEST(OneDnnGovernor, FixedFreeCoresAndOff) {
  setenv("BACKPLANE_ONEDNN_FREE_CORES", "1", 1);
  EXPECT_EQ(threads_now(4), 1);
  EXPECT_EQ(ExecuteScope(4).threads(), 1);
  setenv("BACKPLANE_ONEDNN_FREE_CORES", "3", 1);
  EXPECT_EQ(threads_now(4), 3);
  EXPECT_EQ(threads_now(2), 2);
  unsetenv("BACKPLANE_ONEDNN_FREE_CORES");
}

}  // namespace
}  // namespace backplane::onednn
