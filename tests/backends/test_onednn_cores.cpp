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

// Saturated, a plan tries each way (the whole plan, one thread, bands) and
// keeps the fastest, another than the whole plan only by a margin; the
// first execute after a switch is not counted.
using Way = SaturatedWay::Way;
constexpr Way kWhole = SaturatedWay::kWhole, kOne = SaturatedWay::kOneThread,
              kBands = SaturatedWay::kBands;
constexpr int kTrial = SaturatedWay::kTrialRuns;

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

TEST(OneDnnSaturatedWay, TriesEachThenKeepsTheFastest) {
  SaturatedWay w;
  EXPECT_EQ(w.next(), kWhole);
  // A first execute 10 times slower (the switch) does not count.
  EXPECT_EQ(run_way(w, kWhole, 23, 300), kTrial);
  EXPECT_EQ(w.median(kWhole), 23 * kMs);
  EXPECT_EQ(w.next(), kOne);
  EXPECT_EQ(run_way(w, kOne, 40), kTrial);
  EXPECT_EQ(w.next(), kBands);
  EXPECT_EQ(run_way(w, kBands, 20, -1, kTrial), kTrial);
  EXPECT_EQ(w.next(), kBands);  // kept
  EXPECT_EQ(w.hold(), SaturatedWay::kMinHold);
  EXPECT_NE(w.why().find("in bands (median 20.00 ms) rather than whole on every thread "
                         "(23.00 ms) or on one thread (40.00 ms)"),
            std::string::npos)
      << w.why();
  // Kept for the hold, then the other two are tried again, in order.
  EXPECT_EQ(run_way(w, kBands, 20), SaturatedWay::kMinHold);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_EQ(run_way(w, kWhole, 23), kTrial);
  EXPECT_EQ(w.next(), kOne);
  EXPECT_EQ(run_way(w, kOne, 40), kTrial);
  EXPECT_EQ(w.next(), kBands);
  EXPECT_EQ(w.hold(), 2 * SaturatedWay::kMinHold);
}

TEST(OneDnnSaturatedWay, OthersWinOverTheWholePlanOnlyByTheMargin) {
  // One thread 5% faster than the whole plan: within a busy machine's
  // noise; the whole plan stays.
  SaturatedWay w;
  run_way(w, kWhole, 20);
  run_way(w, kOne, 19);
  EXPECT_EQ(run_way(w, kBands, 25), kTrial);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_NE(w.why().find("whole on every thread (median 20.00 ms) rather than on one thread "
                         "(19.00 ms) or in bands (25.00 ms)"),
            std::string::npos)
      << w.why();
  // The next trials find one thread 15% faster: it takes over.
  EXPECT_EQ(run_way(w, kWhole, 20), SaturatedWay::kMinHold);
  EXPECT_EQ(run_way(w, kOne, 17), kTrial);
  EXPECT_EQ(run_way(w, kBands, 25, -1, kTrial), kTrial);
  EXPECT_EQ(w.next(), kOne);
  EXPECT_EQ(w.hold(), SaturatedWay::kMinHold);
}

TEST(OneDnnSaturatedWay, TheHoldGrowsWhileTheSameWayWinsAndResetsWhenAnotherDoes) {
  SaturatedWay w;
  run_way(w, kWhole, 23);
  run_way(w, kOne, 20);
  run_way(w, kBands, 30, -1, kTrial);
  EXPECT_EQ(w.next(), kOne);
  int hold = SaturatedWay::kMinHold;
  EXPECT_EQ(w.hold(), hold);
  for (int round = 0; round < 6; ++round) {
    EXPECT_EQ(run_way(w, kOne, 20), hold);      // kept
    EXPECT_EQ(run_way(w, kWhole, 23), kTrial);  // tried
    EXPECT_EQ(run_way(w, kBands, 30, -1, kTrial), kTrial);
    hold = std::min(hold * 2, SaturatedWay::kMaxHold);
    EXPECT_EQ(w.hold(), hold);
  }
  EXPECT_EQ(w.hold(), SaturatedWay::kMaxHold);
  // The load changes: one thread slows down (the hold's latest executes are
  // the pace compared), and the next trials find the whole plan faster.
  EXPECT_EQ(run_way(w, kOne, 40), SaturatedWay::kMaxHold);
  run_way(w, kWhole, 23);
  run_way(w, kBands, 26, -1, kTrial);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_EQ(w.hold(), SaturatedWay::kMinHold);
  EXPECT_EQ(w.median(kOne), 40 * kMs);
}

TEST(OneDnnSaturatedWay, AWayThatCannotRunIsNotTriedAgain) {
  // A plan no step of which cuts into bands: its bands trial ends the round.
  SaturatedWay w;
  run_way(w, kWhole, 20);
  run_way(w, kOne, 23);
  EXPECT_EQ(w.next(), kBands);
  w.unavailable(kBands);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_EQ(w.median(kBands), -1);
  EXPECT_EQ(run_way(w, kWhole, 20), SaturatedWay::kMinHold);
  EXPECT_EQ(run_way(w, kOne, 23), kTrial);  // the only other
  EXPECT_EQ(w.next(), kWhole);
  // One thread always runs.
  w.unavailable(kOne);
  EXPECT_EQ(run_way(w, kWhole, 20), 2 * SaturatedWay::kMinHold);
  EXPECT_EQ(w.next(), kOne);
}

TEST(OneDnnSaturatedWay, AWayFoundUnavailableBeforeItsTurnIsPassedOver) {
  // BACKPLANE_ONEDNN_BANDS=0 is found at the first execute, while the whole
  // plan's trial runs: the round goes on to one thread and ends there.
  SaturatedWay w;
  w.unavailable(kBands);
  EXPECT_EQ(run_way(w, kWhole, 20), kTrial);
  EXPECT_EQ(run_way(w, kOne, 23), kTrial);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_EQ(w.median(kBands), -1);
  EXPECT_EQ(run_way(w, kWhole, 20), SaturatedWay::kMinHold);
  EXPECT_EQ(run_way(w, kOne, 15, -1, kTrial), kTrial);
  EXPECT_EQ(w.next(), kOne);
  EXPECT_EQ(run_way(w, kOne, 15), SaturatedWay::kClearHold);
  EXPECT_EQ(w.next(), kWhole);  // never bands
}

TEST(OneDnnSaturatedWay, AClearLeadHoldsLonger) {
  // The whole plan twice as fast as one thread and 1.5 times as fast as
  // bands: the losers are tried again after kClearHold executes, not
  // kMinHold.
  SaturatedWay w;
  run_way(w, kWhole, 10);
  run_way(w, kOne, 20);
  run_way(w, kBands, 15);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_EQ(w.hold(), SaturatedWay::kClearHold);
  EXPECT_EQ(run_way(w, kWhole, 10), SaturatedWay::kClearHold);
  run_way(w, kOne, 20);
  run_way(w, kBands, 15);
  EXPECT_EQ(w.hold(), 2 * SaturatedWay::kClearHold);
  // A narrower lead (one thread within 1.2 times) of the same way: the hold
  // still doubles, to kMaxHold.
  EXPECT_EQ(run_way(w, kWhole, 10), 2 * SaturatedWay::kClearHold);
  run_way(w, kOne, 11);
  run_way(w, kBands, 15);
  EXPECT_EQ(w.next(), kWhole);
  EXPECT_EQ(w.hold(), SaturatedWay::kMaxHold);
}

TEST(OneDnnSaturatedWay, AMedianIgnoresOneOutlierAndOtherWaysAreNotCounted) {
  SaturatedWay w;
  // A run in another way forced while the whole plan is measured is not a
  // sample.
  EXPECT_FALSE(w.ran(kBands, 1 * kMs));
  EXPECT_FALSE(w.ran(kOne, 1 * kMs));
  w.ran(kWhole, 50 * kMs);  // the switch
  w.ran(kWhole, 10 * kMs);
  w.ran(kWhole, 90 * kMs);  // descheduled for a while
  w.ran(kWhole, 12 * kMs);
  EXPECT_EQ(w.median(kWhole), 12 * kMs);
  EXPECT_EQ(w.next(), kOne);
  EXPECT_EQ(w.median(kOne), -1);
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
