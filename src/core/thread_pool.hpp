// thread_pool.hpp — the runtime's thread pool: one per Runtime, sized by
// RuntimeOptions::num_threads, lent to backends through the host table
// (bp_host_api_t.parallel_for, API 1.5) for each execute_shaped.
//
// parallel_for splits [0, n) into chunks handed out dynamically: the calling
// thread takes chunks like any worker, so a worker that has not started (the
// kernel descheduled it on a busy machine) never holds the call up; its share
// is run by whoever is running. Workers spin briefly after a job (the next
// kernel of a partition usually follows within microseconds), then sleep on
// a condition variable; park() sends spinning workers to sleep at once (the
// session calls it when another backend's partition comes next).
//
// Thread-safety: every member may be called from any thread at any time. One
// caller at a time has the workers; a call that finds them taken runs on its
// own thread alone, as does a nested call (from inside a chunk).
#pragma once

#include <backplane/backend_abi.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace backplane {

class ThreadPool {
 public:
  using ChunkFn = void (*)(void* ctx, size_t begin, size_t end);

  // `threads` >= 1, the calling thread included: threads - 1 workers, started
  // at the first parallel_for that can use them.
  explicit ThreadPool(int threads);
  ~ThreadPool();  // joins the workers; no parallel_for may be running
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return size_; }

  // Calls fn(ctx, begin, end) over disjoint chunks of at least `grain`
  // items (0 reads as 1; the last may be smaller) covering [0, n) once, and
  // returns when all have returned. false: a chunk threw; the chunks not yet
  // started were skipped (the exception does not leave this call).
  bool parallel_for(size_t n, size_t grain, ChunkFn fn, void* ctx);

  // Workers spinning for the next job go to sleep now.
  void park();

  bp_thread_pool_t* abi() { return reinterpret_cast<bp_thread_pool_t*>(this); }
  static ThreadPool* from_abi(bp_thread_pool_t* p) { return reinterpret_cast<ThreadPool*>(p); }
  static const ThreadPool* from_abi(const bp_thread_pool_t* p) {
    return reinterpret_cast<const ThreadPool*>(p);
  }

  // For tests: while held, workers take no job, as if descheduled (so every
  // parallel_for runs on its caller alone). Chunks run by workers so far.
  void hold_workers_for_test(bool hold) { hold_.store(hold); }
  uint64_t worker_chunks() const { return worker_chunks_.load(); }

 private:
  struct Job;
  void start_workers();
  void worker_loop();
  bool wait_for_job(uint64_t& seen);
  void run_chunks(Job& job, bool on_worker);

  const int size_;
  std::once_flag started_;
  std::vector<std::thread> workers_;
  std::atomic<bool> busy_{false};  // a caller has the workers
  std::atomic<bool> hold_{false};
  std::atomic<uint64_t> epoch_{0};  // bumped for each job published
  std::atomic<uint64_t> park_{0};   // bumped by park()
  std::atomic<uint64_t> worker_chunks_{0};
  std::mutex mu_;
  std::condition_variable wake_;  // workers wait here for a job
  std::condition_variable idle_;  // the caller waits here for attached workers
  Job* job_ = nullptr;            // under mu_
  std::atomic<int> attached_{0};  // workers holding job_; changed under mu_
  int sleeping_ = 0;              // under mu_
  bool stop_ = false;             // under mu_
};

}  // namespace backplane
