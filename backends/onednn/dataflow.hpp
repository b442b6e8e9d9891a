// dataflow.hpp — pieces of work that several threads run in the order their
// data allows, not step by step.
//
// Each piece lists the byte ranges it reads and writes (Region: a space, such
// as one buffer, and a range in it). Piece j waits for every earlier piece i
// whose ranges overlap its own where one of the two writes (read after
// write, and write after read or write: memory that is reused). A run hands
// each piece, once, to whichever of its threads asks first among the pieces
// whose dependencies are done, the earliest of those first; the calling
// thread takes pieces too, and the others are helpers owned here that spin
// briefly, then sleep on a futex between pieces and between runs. So a
// thread the kernel deschedules in the middle of a piece holds back that
// piece's dependents only, not every thread at the end of a step.
//
// Used by Bands (bands.hpp) for a CpuOneDnn plan's steps cut into pieces;
// nothing here knows oneDNN, and tests/backends/test_dataflow.cpp runs it
// under TSan.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace backplane::onednn {

class Dataflow {
 public:
  struct Region {
    size_t space, begin, end;  // [begin, end) in `space`
    bool write;
  };
  // Runs piece `piece` on thread `slot` (0: the caller of run()).
  using Execute = std::function<void(uint32_t piece, int slot)>;
  // Called once on each helper thread (slot 1 .. threads - 1) as it starts.
  using ThreadStart = std::function<void(int slot)>;

  // `regions[i]`: what piece i reads and writes. `awake`, if given, counts
  // the helpers that are not asleep (the CPU governor discounts them).
  Dataflow(const std::vector<std::vector<Region>>& regions, int threads, Execute execute,
           ThreadStart start = {}, std::atomic<int>* awake = nullptr);
  ~Dataflow();
  Dataflow(const Dataflow&) = delete;
  Dataflow& operator=(const Dataflow&) = delete;

  size_t size() const { return dep_count_.size(); }
  // How many earlier pieces piece i waits for (for tests and traces).
  uint32_t dependencies(size_t i) const { return dep_count_[i]; }

  // Runs every piece once and returns when all are done; rethrows the first
  // exception a piece threw (the other pieces still run). Not reentrant: one
  // run at a time.
  void run();

 private:
  void helper(int slot, uint32_t seen);
  void work(int slot, uint32_t run);
  void wait_completed(uint32_t need);

  // dependents_[i]: the pieces that wait for i; dep_count_[j]: how many j
  // waits for.
  std::vector<std::vector<uint32_t>> dependents_;
  std::vector<uint32_t> dep_count_;
  Execute execute_;
  ThreadStart start_;
  std::atomic<int>* awake_;

  // The run in progress, under mutex_: the pieces whose every dependency is
  // done (a min-heap: the earliest first), how many each still waits for,
  // how many were taken. completed_ counts finished pieces and run_ numbers
  // the runs (futex words).
  std::mutex mutex_;
  uint32_t current_ = 0;
  std::vector<uint32_t> ready_, pending_;
  uint32_t taken_ = 0;
  std::atomic<uint32_t> run_{0};
  std::atomic<uint32_t> completed_{0};
  std::atomic<int> completed_sleepers_{0}, idle_sleepers_{0};
  std::atomic<bool> stop_{false};
  std::mutex error_mutex_;
  std::exception_ptr error_;
  std::vector<std::thread> helpers_;
};

}  // namespace backplane::onednn
