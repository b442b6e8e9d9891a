// cores.cpp — see cores.hpp.
#include "onednn/cores.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace backplane::onednn {

int Governor::threads(int configured) const {
  if (configured <= 1 || cap_ == 0) return configured;
  return std::min(configured, cap_);
}

void Governor::executed(int configured, int threads, int64_t wall_ns, int64_t delay_ns,
                        int64_t preempted) {
  // A capped execute says nothing of the CPUs it left: see others_runnable.
  if (configured <= 1 || threads < configured || wall_ns <= 0) return;
  wall_ += wall_ns;
  delay_ += std::clamp<int64_t>(delay_ns, 0, wall_ns);
  preempted_ += std::max<int64_t>(0, preempted);
  if (wall_ < kWindowNs) return;
  const double r = std::min(0.9, double(delay_) / double(wall_));
  const bool contended = preempted_ >= 2;  // else: wake-up latency, not others
  wall_ = delay_ = preempted_ = 0;
  if (!contended) return;
  // N + k runnable threads on C CPUs: each runs C / (N + k) of the time.
  const double others = double(cpus_) / (1.0 - r) - double(configured);
  const int k = std::max(0, int(std::floor(others + 0.25)));
  const int free = cpus_ - k;
  if (free < configured) {
    cap_ = std::max(1, free);
    saturated_ = free <= 0;
    why_ = "run-queue delay " + std::to_string(int(r * 100)) +
           "% of the executes: " + std::to_string(k) + " other thread(s) runnable on " +
           std::to_string(cpus_) + " CPUs";
    others_sum_ = others_count_ = 0;
    others_since_ = -1;
  }
}

void Governor::others_runnable(int configured, int others, int64_t now_ns) {
  if (cap_ == 0) return;
  if (others_since_ < 0) others_since_ = now_ns;
  others_sum_ += std::max(0, others);
  ++others_count_;
  if (now_ns - others_since_ < kWindowNs || others_count_ < 4) return;
  const double mean = double(others_sum_) / double(others_count_);
  const int64_t others_count = others_count_;
  others_sum_ = others_count_ = 0;
  others_since_ = -1;
  const int free = cpus_ - int(std::floor(mean + 0.5));
  const std::string seen = "other runnable threads " + std::to_string(mean).substr(0, 4) +
                           " on average over " + std::to_string(others_count) + " samples";
  saturated_ = free <= 0;
  if (free >= configured) {
    cap_ = 0;  // every thread back; the delay decides again
    saturated_ = false;
    wall_ = delay_ = preempted_ = 0;
    why_ = seen;
  } else if (std::max(1, free) != cap_) {
    cap_ = std::max(1, free);
    why_ = seen;
  }
}

int64_t SaturatedWay::median_of_samples() const {
  std::array<int64_t, kSamples> v = samples_;
  std::sort(v.begin(), v.end());
  return v[kSamples / 2];
}

SaturatedWay::SaturatedWay() { start_trials(); }

void SaturatedWay::start_trials() {
  trial_count_ = trial_at_ = 0;
  for (Way w : {kWhole, kOneThread, kBands})
    if (available_[w] && (!decided_ || w != best_)) trials_[trial_count_++] = w;
  trial_ = true;
  count_ = taken_ = 0;
  if (trial_count_ == 0) {  // nothing else to try: keep the way held
    trial_ = false;
    way_ = best_;
    return;
  }
  way_ = trials_[0];
}

bool SaturatedWay::next_trial() {
  count_ = taken_ = 0;
  // A way found unavailable after this round was planned is passed over.
  while (++trial_at_ < trial_count_)
    if (available_[trials_[trial_at_]]) {
      way_ = trials_[trial_at_];
      return false;
    }
  // Every way tried: the fastest, another than the whole plan only by the
  // margin.
  Way winner = available_[kWhole] && median_[kWhole] >= 0 ? kWhole : kOneThread;
  for (Way w : {kOneThread, kBands}) {
    if (!available_[w] || median_[w] < 0 || w == winner) continue;
    const double limit =
        winner == kWhole ? kOthersAtMost * double(median_[kWhole]) : double(median_[winner]);
    if (double(median_[w]) <= limit) winner = w;
  }
  // A clear lead over every other way: trying them costs more than their
  // chance of winning on an unchanged load is worth, so they wait longer.
  bool clear = true;
  for (Way w : {kWhole, kOneThread, kBands})
    if (w != winner && available_[w] && median_[w] >= 0 &&
        double(median_[w]) < kClearLead * double(median_[winner]))
      clear = false;
  const int least = clear ? kClearHold : kMinHold;
  hold_ = decided_ && winner == best_ ? std::min(std::max(hold_ * 2, least), kMaxHold) : least;
  decided_ = true;
  best_ = way_ = winner;
  trial_ = false;
  return true;
}

bool SaturatedWay::ran(Way w, int64_t wall_ns) {
  if (w != way_ || wall_ns <= 0) return false;
  ++count_;
  if (!trial_) {
    // Holding: keep the latest executes, the way's current pace.
    samples_[taken_++ % kSamples] = wall_ns;
    if (count_ < hold_) return false;
    if (taken_ >= kSamples) median_[way_] = median_of_samples();
    start_trials();
    return false;
  }
  if (count_ == 1) return false;  // the first after a switch: the switch's cost
  samples_[taken_++] = wall_ns;
  if (taken_ < kSamples) return false;
  median_[way_] = median_of_samples();
  return next_trial();
}

void SaturatedWay::unavailable(Way w) {
  if (w == kOneThread || !available_[w]) return;  // one thread always runs
  available_[w] = false;
  median_[w] = -1;
  if (way_ != w) return;
  if (trial_) {
    next_trial();
  } else {  // held (it won before it was found unavailable): try again
    decided_ = false;
    start_trials();
  }
}

std::string SaturatedWay::why() const {
  auto ms = [](int64_t ns) {
    const std::string s = std::to_string(double(ns) / 1e6);
    return s.substr(0, s.find('.') + 3) + " ms";
  };
  const char* names[] = {"in bands", "on one thread", "whole on every thread"};
  std::string out = std::string(names[best_]) + " (median " + ms(median_[best_]) + ") rather than ";
  bool first = true;
  for (Way w : {kWhole, kOneThread, kBands}) {
    if (w == best_ || median_[w] < 0) continue;
    out += std::string(first ? "" : " or ") + names[w] + " (" + ms(median_[w]) + ")";
    first = false;
  }
  if (first) out += "nothing else";
  return out + "; tried again in " + std::to_string(hold_) + " executes";
}

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

// Field n (0-based; fields end at a space, "/" or newline) of a /proc file
// read through `fd` (kept open: pread at 0 has the kernel write it afresh),
// as an unsigned number, or -1. /proc/loadavg's "running/total" is two.
int64_t read_number(int fd, int n) {
  if (fd < 0) return -1;
  char buf[160];
  const ssize_t got = pread(fd, buf, sizeof(buf) - 1, 0);
  if (got <= 0) return -1;
  std::string_view s(buf, size_t(got));
  for (int i = 0;; ++i) {
    const size_t start = s.find_first_not_of(" /\n");
    if (start == std::string_view::npos) return -1;
    s.remove_prefix(start);
    const size_t end = std::min(s.find_first_of(" /\n"), s.size());
    if (i == n) {
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(s.data(), s.data() + end, v);
      return ec == std::errc() && p == s.data() + end ? int64_t(v) : -1;
    }
    s.remove_prefix(end);
  }
}

// This thread's run-queue delay so far (ns), -1 if the kernel does not say.
int64_t thread_delay_ns() {
  struct Fd {
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    ~Fd() {
      if (fd >= 0) close(fd);
    }
  };
  thread_local Fd f;
  return read_number(f.fd, 1);
}

// This thread's involuntary context switches so far.
int64_t thread_preemptions() {
  rusage u{};
  if (getrusage(RUSAGE_THREAD, &u) != 0) return 0;
  return int64_t(u.ru_nivcsw);
}

// Threads of the machine that are runnable now, not counting the reader
// and our own awake band helpers.
int others_runnable_now() {
  static const int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  return std::max(0, int(read_number(fd, 3)) - 1 - band_helpers_awake().load());
}

}  // namespace

bool governor_trace() {
  static const bool trace = [] {
    const char* v = std::getenv("BACKPLANE_ONEDNN_GOVERNOR_TRACE");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return trace;
}

namespace {

struct Process {
  std::mutex mutex;
  const bool trace = governor_trace();
  // Prints the governor's change, if any, since `before`.
  void traced(int before, int configured) {
    if (!trace || governor.cap() == before) return;
    std::fprintf(stderr, "CpuOneDnn: %d of %d threads%s (%s)\n", governor.threads(configured),
                 configured, governor.saturated() ? ", every CPU taken: in bands" : "",
                 governor.why().c_str());
  }
  Governor governor{allowed_cpus()};
  std::atomic<int64_t> last_measured{0};
  bool enabled = [] {
    const char* v = std::getenv("BACKPLANE_ONEDNN_ADAPT_THREADS");
    if (v != nullptr && std::string_view(v) == "0") return false;
    return thread_delay_ns() >= 0;  // no schedstat: no measurement, no cap
  }();
};
Process& process() {
  static Process p;
  return p;
}

// BACKPLANE_ONEDNN_FREE_CORES (0: every CPU taken), or -1 when unset: measure.
int fixed_free_cores() {
  const char* f = std::getenv("BACKPLANE_ONEDNN_FREE_CORES");
  if (f == nullptr || *f == '\0') return -1;
  return std::max(0, std::atoi(f));
}

}  // namespace

ExecuteScope::ExecuteScope(int configured) : configured_(configured), threads_(configured) {
  if (configured <= 1) return;
  if (const int fixed = fixed_free_cores(); fixed >= 0) {
    threads_ = std::clamp(fixed, 1, configured);
    saturated_ = fixed == 0;
    return;
  }
  Process& p = process();
  if (!p.enabled) return;
  const int64_t now = now_ns();
  int64_t last = p.last_measured.load(std::memory_order_relaxed);
  measured_ = now - last >= 500'000 &&
              p.last_measured.compare_exchange_strong(last, now, std::memory_order_relaxed);
  int capped_others = -1;
  {
    std::lock_guard<std::mutex> lock(p.mutex);
    threads_ = p.governor.threads(configured);
  }
  if (measured_ && threads_ < configured) capped_others = others_runnable_now();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (capped_others >= 0) {
    const int before = p.governor.cap();
    p.governor.others_runnable(configured, capped_others, now);
    p.traced(before, configured);
  }
  threads_ = p.governor.threads(configured);
  saturated_ = p.governor.saturated();
  if (measured_) {
    start_delay_ns_ = thread_delay_ns();
    start_preempted_ = thread_preemptions();
    start_ns_ = now_ns();
    measured_ = start_delay_ns_ >= 0;
  }
}

ExecuteScope::~ExecuteScope() {
  if (!measured_) return;
  const int64_t delay = thread_delay_ns() - start_delay_ns_;
  const int64_t preempted = thread_preemptions() - start_preempted_;
  const int64_t wall = now_ns() - start_ns_;
  Process& p = process();
  std::lock_guard<std::mutex> lock(p.mutex);
  const int before = p.governor.cap();
  p.governor.executed(configured_, threads_, wall, delay, preempted);
  p.traced(before, configured_);
}

std::atomic<int>& band_helpers_awake() {
  static std::atomic<int> n{0};
  return n;
}

int threads_now(int configured) {
  if (configured <= 1) return configured;
  if (const int fixed = fixed_free_cores(); fixed >= 0) return std::clamp(fixed, 1, configured);
  Process& p = process();
  if (!p.enabled) return configured;
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.governor.threads(configured);
}

}  // namespace backplane::onednn
