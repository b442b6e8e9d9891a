// thread_pool.cpp — see thread_pool.hpp.
#include "core/thread_pool.hpp"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace backplane {
namespace {

// How long a worker spins for the next job before it sleeps. Kernels of one
// partition follow each other within microseconds, so a short spin saves a
// futex wake per kernel; a long one would hold a core another backend (or
// process) needs. Far below libgomp's default (~300k pauses, a millisecond).
constexpr auto kSpin = std::chrono::microseconds(30);

// Depth of parallel_for on this thread (a worker inside a chunk, or a caller
// running its own chunks): a nested call runs inline.
thread_local int t_depth = 0;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

struct DepthGuard {
  DepthGuard() { ++t_depth; }
  ~DepthGuard() { --t_depth; }
};

}  // namespace

struct ThreadPool::Job {
  ChunkFn fn = nullptr;
  void* ctx = nullptr;
  size_t n = 0, chunk = 1, num_chunks = 0;
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
};

ThreadPool::ThreadPool(int threads) : size_(std::max(threads, 1)) {}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::start_workers() {
  workers_.reserve(static_cast<size_t>(size_ - 1));
  for (int i = 1; i < size_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

void ThreadPool::park() { park_.fetch_add(1, std::memory_order_release); }

void ThreadPool::run_chunks(Job& job, bool on_worker) {
  DepthGuard depth;
  while (!job.failed.load(std::memory_order_relaxed)) {
    const size_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.num_chunks) break;
    const size_t begin = c * job.chunk;
    const size_t end = std::min(job.n, begin + job.chunk);
    try {
      job.fn(job.ctx, begin, end);
    } catch (...) {
      // A backend's chunk must not throw (C ABI); one that does anyway
      // fails the call instead of the process.
      job.failed.store(true, std::memory_order_relaxed);
    }
    if (on_worker) worker_chunks_.fetch_add(1, std::memory_order_relaxed);
  }
}

// Waits until a job newer than `seen` is published (true) or the pool stops
// (false): spins for kSpin unless parked, then sleeps.
bool ThreadPool::wait_for_job(uint64_t& seen) {
  const uint64_t parked = park_.load(std::memory_order_acquire);
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (epoch_.load(std::memory_order_acquire) != seen) break;
    if (park_.load(std::memory_order_relaxed) != parked) break;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > until) break;
    cpu_relax();
  }
  std::unique_lock<std::mutex> lock(mu_);
  ++sleeping_;
  wake_.wait(lock, [&] { return stop_ || epoch_.load(std::memory_order_relaxed) != seen; });
  --sleeping_;
  if (stop_) return false;
  seen = epoch_.load(std::memory_order_relaxed);
  return true;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (wait_for_job(seen)) {
    Job* job = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (job_ == nullptr || hold_.load()) continue;  // finished already, or held
      job = job_;
      attached_.fetch_add(1, std::memory_order_relaxed);
    }
    run_chunks(*job, /*on_worker=*/true);
    std::lock_guard<std::mutex> lock(mu_);
    if (attached_.fetch_sub(1, std::memory_order_acq_rel) == 1) idle_.notify_all();
  }
}

bool ThreadPool::parallel_for(size_t n, size_t grain, ChunkFn fn, void* ctx) {
  if (n == 0 || fn == nullptr) return true;
  grain = std::max<size_t>(grain, 1);
  Job job;
  job.fn = fn;
  job.ctx = ctx;
  job.n = n;
  bool expected = false;
  const bool inline_only =
      size_ == 1 || n <= grain || t_depth > 0 || !busy_.compare_exchange_strong(expected, true);
  if (inline_only) {
    job.chunk = n;
    job.num_chunks = 1;
    run_chunks(job, /*on_worker=*/false);
    return !job.failed.load();
  }
  std::call_once(started_, [this] { start_workers(); });
  // About four chunks per thread: small enough that the threads finish
  // together when one starts late, large enough to keep the per-chunk cost
  // (one atomic increment, one indirect call) negligible.
  const size_t target = static_cast<size_t>(size_) * 4;
  job.chunk = std::max(grain, (n + target - 1) / target);
  job.num_chunks = (n + job.chunk - 1) / job.chunk;
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &job;
    epoch_.fetch_add(1, std::memory_order_release);
    if (sleeping_ > 0) wake_.notify_all();
  }
  run_chunks(job, /*on_worker=*/false);
  // Every chunk is taken. Workers that have not attached yet must not see
  // this job (it lives on this stack); those that did are finishing theirs.
  {
    std::unique_lock<std::mutex> lock(mu_);
    job_ = nullptr;
    if (attached_.load(std::memory_order_acquire) > 0) {
      lock.unlock();
      for (int i = 0; i < 2000 && attached_.load(std::memory_order_acquire) > 0; ++i) cpu_relax();
      lock.lock();
      idle_.wait(lock, [&] { return attached_.load(std::memory_order_acquire) == 0; });
    }
  }
  busy_.store(false, std::memory_order_release);
  return !job.failed.load();
}

}  // namespace backplane
