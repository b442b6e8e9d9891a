// dataflow.cpp — see dataflow.hpp.
#include "onednn/dataflow.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <utility>

namespace backplane::onednn {

namespace {

// Spin this many pauses (tens of microseconds) before sleeping on a futex.
constexpr int kSpins = 2000;

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
          nullptr, 0);
}
inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool conflict(const std::vector<Dataflow::Region>& a, const std::vector<Dataflow::Region>& b) {
  for (const Dataflow::Region& x : a)
    for (const Dataflow::Region& y : b)
      if (x.space == y.space && (x.write || y.write) && x.begin < y.end && y.begin < x.end)
        return true;
  return false;
}

}  // namespace

Dataflow::Dataflow(const std::vector<std::vector<Region>>& regions, int threads, Execute execute,
                   ThreadStart start, std::atomic<int>* awake)
    : execute_(std::move(execute)), start_(std::move(start)), awake_(awake) {
  const size_t n = regions.size();
  dependents_.assign(n, {});
  dep_count_.assign(n, 0);
  // Every pair: a few thousand pieces at most (a plan's steps times the
  // pieces per step), made once per session.
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < j; ++i)
      if (conflict(regions[i], regions[j])) {
        dependents_[i].push_back(uint32_t(j));
        ++dep_count_[j];
      }
  // A helper starts from the run number of now, not of when its thread
  // first gets a CPU: a run (or the destructor's stop) issued before that
  // must not look like one it already saw.
  const uint32_t seen = run_.load();
  for (int slot = 1; slot < threads; ++slot)
    helpers_.emplace_back([this, slot, seen] { helper(slot, seen); });
}

Dataflow::~Dataflow() {
  stop_.store(true);
  run_.fetch_add(1);
  futex_wake_all(run_);
  for (std::thread& t : helpers_) t.join();
}

void Dataflow::run() {
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error_ = nullptr;
  }
  const uint32_t run = run_.load() + 1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    current_ = run;
    pending_ = dep_count_;
    ready_.clear();
    for (uint32_t i = 0; i < uint32_t(size()); ++i)
      if (pending_[i] == 0) ready_.push_back(i);
    std::make_heap(ready_.begin(), ready_.end(), std::greater<>());
    taken_ = 0;
    completed_.store(0);
  }
  run_.store(run);
  if (idle_sleepers_.load() > 0) futex_wake_all(run_);
  work(0, run);
  wait_completed(uint32_t(size()));
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(error_mutex_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

void Dataflow::wait_completed(uint32_t need) {
  for (int spin = 0; completed_.load() < need;) {
    if (spin < kSpins) {
      ++spin;
      pause();
      continue;
    }
    completed_sleepers_.fetch_add(1);
    const uint32_t seen = completed_.load();
    if (seen < need) futex_wait(completed_, seen);
    completed_sleepers_.fetch_sub(1);
  }
}

void Dataflow::work(int slot, uint32_t run) {
  const uint32_t total = uint32_t(size());
  for (;;) {
    uint32_t piece = total, seen = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (current_ != run || taken_ == total) return;  // over, or all taken
      if (!ready_.empty()) {
        std::pop_heap(ready_.begin(), ready_.end(), std::greater<>());
        piece = ready_.back();
        ready_.pop_back();
        ++taken_;
      } else {
        seen = completed_.load();
      }
    }
    if (piece == total) {
      // Nothing ready: every piece left waits for one another thread holds.
      wait_completed(seen + 1);
      continue;
    }
    try {
      execute_(piece, slot);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (uint32_t d : dependents_[piece])
        if (--pending_[d] == 0) {
          ready_.push_back(d);
          std::push_heap(ready_.begin(), ready_.end(), std::greater<>());
        }
      completed_.fetch_add(1);
    }
    if (completed_sleepers_.load() > 0) futex_wake_all(completed_);
  }
}

void Dataflow::helper(int slot, uint32_t seen) {
  if (start_) start_(slot);
  if (awake_) awake_->fetch_add(1);
  for (;;) {
    uint32_t run = run_.load();
    for (int spin = 0; run == seen && spin < kSpins; ++spin) {
      pause();
      run = run_.load();
    }
    if (run == seen) {
      if (awake_) awake_->fetch_sub(1);
      idle_sleepers_.fetch_add(1);
      if (run_.load() == seen) futex_wait(run_, seen);
      idle_sleepers_.fetch_sub(1);
      if (awake_) awake_->fetch_add(1);
      continue;
    }
    if (stop_.load()) break;
    seen = run;
    work(slot, run);
  }
  if (awake_) awake_->fetch_sub(1);
}

}  // namespace backplane::onednn
