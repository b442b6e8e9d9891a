// The runtime's thread pool (core/thread_pool.hpp) and the host table's
// parallel_for / thread_pool_size slots (API 1.5) in front of it.
#include "core/thread_pool.hpp"
#include "registry/host_api.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace backplane {
namespace {

// Counts how often each index is visited, and on which threads.
struct Coverage {
  explicit Coverage(size_t n) : hits(n) {}
  std::vector<std::atomic<int>> hits;
  std::atomic<int> calls{0};
  std::mutex mu;
  std::vector<std::thread::id> threads;
  size_t grain = 1;
  size_t chunks_below_grain = 0;

  static void visit(void* ctx, size_t begin, size_t end) {
    auto* c = static_cast<Coverage*>(ctx);
    for (size_t i = begin; i < end; ++i) c->hits[i].fetch_add(1);
    c->calls.fetch_add(1);
    std::lock_guard<std::mutex> lock(c->mu);
    c->threads.push_back(std::this_thread::get_id());
    if (end - begin < c->grain) ++c->chunks_below_grain;
  }
  bool each_once() const {
    for (const auto& h : hits)
      if (h.load() != 1) return false;
    return true;
  }
  bool only_on(std::thread::id id) {
    std::lock_guard<std::mutex> lock(mu);
    for (auto t : threads)
      if (t != id) return false;
    return true;
  }
};

TEST(ThreadPool, CoversEveryIndexOnceForAnySizeAndGrain) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{1000}, size_t{100003}}) {
      for (size_t grain : {size_t{0}, size_t{1}, size_t{3}, size_t{1000}}) {
        Coverage c(n);
        c.grain = grain;
        ASSERT_TRUE(pool.parallel_for(n, grain, &Coverage::visit, &c));
        EXPECT_TRUE(c.each_once()) << "threads " << threads << " n " << n << " grain " << grain;
        // Every chunk but the last has at least `grain` items.
        EXPECT_LE(c.chunks_below_grain, 1u) << "n " << n << " grain " << grain;
      }
    }
  }
}

TEST(ThreadPool, ZeroItemsCallNothingAndOneItemRunsOnTheCaller) {
  ThreadPool pool(4);
  Coverage none(0);
  EXPECT_TRUE(pool.parallel_for(0, 1, &Coverage::visit, &none));
  EXPECT_EQ(none.calls.load(), 0);
  Coverage one(1);
  EXPECT_TRUE(pool.parallel_for(1, 1, &Coverage::visit, &one));
  EXPECT_EQ(one.calls.load(), 1);
  EXPECT_TRUE(one.only_on(std::this_thread::get_id()));
}

TEST(ThreadPool, ManyCallersAtOnceEachGetTheirWholeRange) {
  ThreadPool pool(3);
  std::atomic<int> bad{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t)
    callers.emplace_back([&, t] {
      for (int r = 0; r < 200; ++r) {
        Coverage c(static_cast<size_t>(50 + 37 * t + r));
        if (!pool.parallel_for(c.hits.size(), 1, &Coverage::visit, &c) || !c.each_once()) ++bad;
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

// A parallel_for from inside a chunk runs inline on that chunk's thread.
TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  struct Outer {
    ThreadPool* pool;
    std::atomic<int> inner_ok{0}, inner_total{0};
    static void run(void* ctx, size_t begin, size_t end) {
      auto* o = static_cast<Outer*>(ctx);
      for (size_t i = begin; i < end; ++i) {
        Coverage c(100);
        const bool ok = o->pool->parallel_for(100, 1, &Coverage::visit, &c);
        o->inner_total.fetch_add(1);
        if (ok && c.each_once() && c.calls.load() == 1 && c.only_on(std::this_thread::get_id()))
          o->inner_ok.fetch_add(1);
      }
    }
  } outer{&pool};
  ASSERT_TRUE(pool.parallel_for(16, 1, &Outer::run, &outer));
  EXPECT_EQ(outer.inner_total.load(), 16);
  EXPECT_EQ(outer.inner_ok.load(), 16);
}

void throw_on_seven(void* ctx, size_t begin, size_t end) {
  auto* count = static_cast<std::atomic<int>*>(ctx);
  for (size_t i = begin; i < end; ++i) {
    if (i == 7) throw std::runtime_error("chunk failed");
    count->fetch_add(1);
  }
}

TEST(ThreadPool, AnExceptionIsContainedAndThePoolStaysUsable) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  EXPECT_FALSE(pool.parallel_for(1000, 1, &throw_on_seven, &count));
  EXPECT_LT(count.load(), 1000);
  // Inline (one item per chunk would also go through the pool; one chunk
  // does not).
  std::atomic<int> inline_count{0};
  EXPECT_FALSE(pool.parallel_for(10, 100, &throw_on_seven, &inline_count));
  Coverage after(5000);
  EXPECT_TRUE(pool.parallel_for(5000, 1, &Coverage::visit, &after));
  EXPECT_TRUE(after.each_once());
}

// Workers that never start (held here, descheduled on a busy machine) do not
// hold the call up: the caller runs every chunk.
TEST(ThreadPool, CallerDoesAllTheWorkWhenWorkersDoNotCome) {
  ThreadPool pool(4);
  Coverage warm(1000);
  ASSERT_TRUE(pool.parallel_for(1000, 1, &Coverage::visit, &warm));  // workers started
  pool.hold_workers_for_test(true);
  const uint64_t before = pool.worker_chunks();
  Coverage c(10000);
  ASSERT_TRUE(pool.parallel_for(10000, 1, &Coverage::visit, &c));
  EXPECT_TRUE(c.each_once());
  EXPECT_GT(c.calls.load(), 1);  // split, yet all on the caller
  EXPECT_TRUE(c.only_on(std::this_thread::get_id()));
  EXPECT_EQ(pool.worker_chunks(), before);
  pool.hold_workers_for_test(false);
}

// While one caller has the workers, another runs its whole range itself and
// returns, without waiting for the first.
TEST(ThreadPool, ACallerFindingTheWorkersBusyRunsOnItsOwnThread) {
  ThreadPool pool(2);
  struct Blocker {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    std::atomic<int> entered{0};
    static void run(void* ctx, size_t, size_t) {
      auto* b = static_cast<Blocker*>(ctx);
      b->entered.fetch_add(1);
      std::unique_lock<std::mutex> lock(b->mu);
      b->cv.wait(lock, [&] { return b->release; });
    }
  } blocker;
  std::thread first([&] { EXPECT_TRUE(pool.parallel_for(2, 1, &Blocker::run, &blocker)); });
  while (blocker.entered.load() == 0) std::this_thread::yield();
  Coverage c(4000);
  EXPECT_TRUE(pool.parallel_for(4000, 1, &Coverage::visit, &c));
  EXPECT_TRUE(c.each_once());
  EXPECT_TRUE(c.only_on(std::this_thread::get_id()));
  {
    std::lock_guard<std::mutex> lock(blocker.mu);
    blocker.release = true;
  }
  blocker.cv.notify_all();
  first.join();
}

// Workers do take chunks when they are free: slow chunks leave the caller
// plenty of time to be joined.
TEST(ThreadPool, WorkersShareTheWork) {
  ThreadPool pool(2);
  const uint64_t before = pool.worker_chunks();
  auto slow = [](void*, size_t, size_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  ASSERT_TRUE(pool.parallel_for(50, 1, slow, nullptr));
  EXPECT_GT(pool.worker_chunks(), before);
  // Parked workers sleep, and wake for the next job.
  pool.park();
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const uint64_t parked = pool.worker_chunks();
  ASSERT_TRUE(pool.parallel_for(50, 1, slow, nullptr));
  EXPECT_GT(pool.worker_chunks(), parked);
}

TEST(HostThreadPool, SlotsOfApi15) {
  const bp_host_api_t* host = host_api();
  ASSERT_GE(host->struct_size, BP_HOST_API_SIZE_1_5);
  EXPECT_EQ(host->api_minor, BP_API_VERSION_MINOR);
  ThreadPool pool(3);
  EXPECT_EQ(host->thread_pool_size(pool.abi()), 3u);
  EXPECT_EQ(host->thread_pool_size(nullptr), 1u);

  Coverage c(777);
  EXPECT_EQ(host->parallel_for(pool.abi(), 777, 5, &Coverage::visit, &c), nullptr);
  EXPECT_TRUE(c.each_once());
  Coverage no_pool(50);  // no pool: one chunk, inline
  EXPECT_EQ(host->parallel_for(nullptr, 50, 1, &Coverage::visit, &no_pool), nullptr);
  EXPECT_EQ(no_pool.calls.load(), 1);
  EXPECT_TRUE(no_pool.each_once());
  EXPECT_EQ(host->parallel_for(pool.abi(), 0, 1, nullptr, nullptr), nullptr);

  // A C++ exception reaching the host becomes a status; NULL fn is an error.
  std::atomic<int> count{0};
  for (bp_thread_pool_t* p : {pool.abi(), static_cast<bp_thread_pool_t*>(nullptr)}) {
    bp_status_t* s = host->parallel_for(p, 100, 1, &throw_on_seven, &count);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(host->status_code(s), BP_STATUS_BACKEND_ERROR);
    EXPECT_NE(std::string(host->status_message(s)).find("exception"), std::string::npos);
    host->status_release(s);
  }
  bp_status_t* s = host->parallel_for(pool.abi(), 10, 1, nullptr, nullptr);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(host->status_code(s), BP_STATUS_INVALID_ARGUMENT);
  host->status_release(s);
}

}  // namespace
}  // namespace backplane
