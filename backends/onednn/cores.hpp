// cores.hpp — CpuOneDnn's thread count on a busy machine.
//
// oneDNN runs its primitives in OpenMP parallel regions that split the work
// evenly and wait at a barrier for the slowest thread. When other processes
// keep some of our CPUs busy, one of our threads is descheduled for whole
// scheduler slices and every region waits for it: a 2-thread partition on a
// 2-CPU machine with one busy process beside it ran 5-20 times slower than
// alone, where a runtime whose threads take work dynamically slows down by
// about the share of the CPUs it lost. So each execute asks the Governor
// how many threads to run on, and CpuOneDnn runs on that many (compiled.cpp:
// with libgomp's dyn-var on, even regions that name their own thread count).
//
// Two measurements, each where it is unambiguous:
//  - Running on every thread, the calling thread's run-queue delay during
//    its executes (/proc/thread-self/schedstat: time it was runnable but
//    not running) and its involuntary context switches (getrusage). With N
//    of our threads and k others runnable on C CPUs (N + k > C) each thread
//    runs C / (N + k) of the time, so the delay share r gives
//    k = C / (1 - r) - N and the CPUs left to us, C - k. Alone on the
//    machine the delay is not zero: a thread woken at a barrier waits for
//    its CPU to wake up too (on a VM, a halted vCPU: tens to hundreds of
//    microseconds, a large share of a short execute after idle). That wait
//    is no preemption, so a window in which the caller was not preempted
//    (fewer than 2 involuntary switches) caps nothing.
//  - Running on fewer threads, the delay says nothing about the CPUs we left
//    (our threads fit), so the Governor counts the other runnable threads
//    of the machine (/proc/loadavg's running count, less the reader) and
//    gives the threads back once the others leave CPUs free.
// Each decision takes a window of at least 20 ms of executes (delay) or of
// samples (running count). Measuring costs a pread of an open /proc file,
// at most once per 0.5 ms per process. Off for a partition made for one
// thread, and when BACKPLANE_ONEDNN_ADAPT_THREADS=0.
// BACKPLANE_ONEDNN_FREE_CORES=N fixes the count of free CPUs instead (tests,
// or a user who knows the machine better: a container's CPU quota); 0: every
// CPU is taken (one thread's cap, and bands).
// BACKPLANE_ONEDNN_GOVERNOR_TRACE=1 prints every change and why to stderr.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace backplane::onednn {

// The decisions, without clocks or /proc (unit-tested on their own).
class Governor {
 public:
  static constexpr int64_t kWindowNs = 20'000'000;  // 20 ms
  explicit Governor(int cpus) : cpus_(cpus < 1 ? 1 : cpus) {}

  // Threads for an execute of a partition made for `configured` threads.
  int threads(int configured) const;
  // The cap in force (0: none), and why it last changed.
  int cap() const { return cap_; }
  // Capped because no CPU is free at all: the plan then runs whole on all
  // its threads, in bands (bands.hpp) or on one, whichever it measured
  // fastest (SaturatedWay).
  bool saturated() const { return saturated_; }
  const std::string& why() const { return why_; }
  // An execute ran on `threads` of `configured` threads for `wall_ns`, of
  // which the calling thread waited `delay_ns` for a CPU; it was preempted
  // `preempted` times.
  void executed(int configured, int threads, int64_t wall_ns, int64_t delay_ns, int64_t preempted);
  // While capped: `others` threads of other processes were runnable at
  // `now_ns`.
  void others_runnable(int configured, int others, int64_t now_ns);

 private:
  int cpus_;
  int cap_ = 0;
  bool saturated_ = false;
  int64_t wall_ = 0, delay_ = 0, preempted_ = 0;  // uncapped executes of this window
  int64_t others_sum_ = 0, others_count_ = 0;     // capped samples of this window
  int64_t others_since_ = -1;
  std::string why_;
};

// With no CPU free, a plan of several threads runs in one of three ways:
// whole (its steps as compiled, an OpenMP team of all its threads), in
// bands on all of them (bands.hpp), or on one thread (the cap). None is
// fastest on every plan and every machine. When the governor was written,
// the whole plan beside busy processes stalled at every barrier (5-20x,
// issue 14's table), and one thread or bands won (ResNet-50 beside two busy
// loops on 2 CPUs: bands 38 ms, one thread 64). Measured again on a 6.18
// kernel with libgomp's spin bounded (GOMP_SPINCOUNT=20000), the whole plan
// was the fastest of the
// three on every model tried beside two busy loops, 25-30% ahead: a team
// that slept between inferences comes back ahead of the busy loops in the
// kernel's fair share and both its threads run at once, where one thread
// gets half of one CPU and bands pay for their pieces' joins. Run back to
// back instead, RegNet-Y was fastest in bands (11.9 ms against 14.0).
// So each plan measures the ways while saturated: a trial of each
// (kTrialRuns executes, the first after a switch not counted, the median of
// the rest), then the way with the lowest median, kept for a hold of
// executes after which the others are tried again against the kept way's
// recent median. The hold doubles, up to kMaxHold, each time the same way
// wins again (the cost of trying a loser fades) and is kMinHold again when
// another wins; kClearHold when the winner leads every other way by
// kClearLead (on a 2-CPU machine whose other processes keep their load, a
// trial is then mostly the losers' cost: 8 slow executes in 24).
//
// The whole plan goes first and is kept unless another way is clearly
// faster (a median at most kOthersAtMost of the whole plan's): with three
// executes a trial on a machine this busy, a median is off by 10-20% now
// and then, and the margin keeps such a draw from moving a plan to a slow
// way. Bands' pieces are JIT-compiled at their first run, which a plan that
// never tries them does not pay; a plan that no step of cuts has no bands
// (unavailable()).
class SaturatedWay {
 public:
  enum Way { kBands = 0, kOneThread = 1, kWhole = 2 };
  static constexpr int kWays = 3;
  static constexpr int kTrialRuns = 4;
  static constexpr int kMinHold = 16, kClearHold = 64, kMaxHold = 256;
  static constexpr double kOthersAtMost = 0.9, kClearLead = 1.2;

  SaturatedWay();
  // The way of the next saturated execute.
  Way next() const { return way_; }
  // A saturated execute ran in way `w` for `wall_ns`; true when that made
  // a decision (why() says which and on what).
  bool ran(Way w, int64_t wall_ns);
  // Way `w` cannot run this plan: no more trials of it.
  void unavailable(Way w);
  // The last trial's median of way w, ns (-1: not tried yet).
  int64_t median(Way w) const { return median_[w]; }
  int hold() const { return hold_; }
  std::string why() const;

 private:
  static constexpr int kSamples = kTrialRuns - 1;
  int64_t median_of_samples() const;  // of the kSamples in samples_
  // The trials after a hold of best_ (every way but it), or the first ones.
  void start_trials();
  // The next trial of this round, or the decision when none is left.
  bool next_trial();
  Way way_ = kWhole;
  Way best_ = kWhole;
  bool trial_ = true;
  bool decided_ = false;
  bool available_[kWays] = {true, true, true};
  std::array<Way, kWays> trials_{};  // this round's trials, in order
  int trial_count_ = 0, trial_at_ = 0;
  int count_ = 0;  // executes of this trial or hold
  // This trial's samples, or the hold's latest (a ring): no allocation, as
  // an execute makes none.
  std::array<int64_t, kSamples> samples_{};
  int taken_ = 0;  // samples taken in this trial or hold
  int64_t median_[kWays] = {-1, -1, -1};
  int hold_ = kMinHold;
};

// The process's governor, measuring around each execute of the calling
// thread: construct before the execute, threads() is its thread count.
class ExecuteScope {
 public:
  explicit ExecuteScope(int configured);
  ~ExecuteScope();
  ExecuteScope(const ExecuteScope&) = delete;
  ExecuteScope& operator=(const ExecuteScope&) = delete;
  int threads() const { return threads_; }
  bool saturated() const { return saturated_; }

 private:
  int configured_;
  int threads_;
  bool saturated_ = false;
  bool measured_ = false;
  int64_t start_ns_ = 0, start_delay_ns_ = 0, start_preempted_ = 0;
};

// The thread count an execute would get now (no measurement).
int threads_now(int configured);

// BACKPLANE_ONEDNN_GOVERNOR_TRACE=1: print the governor's decisions.
bool governor_trace();

// Helper threads of the process's Bands (bands.hpp) that are awake (running
// a piece or spinning for one): not another process's runnable threads.
std::atomic<int>& band_helpers_awake();

}  // namespace backplane::onednn
