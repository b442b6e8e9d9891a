// CpuOneDnn's dataflow scheduler (backends/onednn/dataflow.hpp), which runs a
// plan's pieces on several threads when no CPU is free: every piece once per
// run, after every earlier piece it conflicts with, whatever thread takes it.
// No oneDNN here: CI runs this under TSan (label `concurrency`), where a
// missing dependency is a data race on the plain ints below.
#include "onednn/dataflow.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

namespace backplane::onednn {
namespace {

using Region = Dataflow::Region;

TEST(Dataflow, DependsOnOverlapsWhereOneWrites) {
  const std::vector<std::vector<Region>> regions = {
      {{0, 0, 10, true}},                     // 0 writes space 0 [0, 10)
      {{0, 5, 6, false}, {1, 0, 4, true}},    // 1 reads what 0 wrote: waits
      {{0, 20, 30, false}, {1, 8, 9, true}},  // 2 touches neither: free
      {{0, 0, 4, true}},                      // 3 rewrites 0's bytes: waits for 0
      {{0, 0, 10, false}},                    // 4 reads: waits for 0 and 3, not 1 (both read)
      {{1, 0, 2, false}, {2, 0, 1, false}},   // 5 reads what 1 wrote: waits for 1
      {{2, 0, 1, false}},                     // 6 reads beside 5: free
  };
  Dataflow flow(regions, 1, [](uint32_t, int) {});
  const std::vector<uint32_t> expected = {0, 1, 0, 1, 2, 1, 0};
  for (size_t i = 0; i < regions.size(); ++i) EXPECT_EQ(flow.dependencies(i), expected[i]) << i;
}

// Random pieces over three spaces of cells: each reads some ranges and
// writes a value derived from what it read and its own index into others.
// Run on several threads, the cells must equal a sequential run's, every
// run, and every piece must run once per run.
struct Program {
  std::vector<std::vector<Region>> regions;
  static constexpr size_t kSpaces = 3, kCells = 64;

  explicit Program(uint32_t seed, size_t pieces) {
    std::mt19937 rng(seed);
    auto range = [&](bool write) {
      const size_t space = rng() % kSpaces, begin = rng() % kCells;
      const size_t end = std::min(kCells, begin + 1 + rng() % 12);
      return Region{space, begin, end, write};
    };
    for (size_t i = 0; i < pieces; ++i) {
      std::vector<Region> r;
      for (uint32_t k = 0, n = 1 + rng() % 3; k < n; ++k) r.push_back(range(false));
      for (uint32_t k = 0, n = 1 + rng() % 2; k < n; ++k) r.push_back(range(true));
      regions.push_back(std::move(r));
    }
  }
  // Piece i on `cells` (plain ints: unordered access is a race TSan sees).
  void execute(uint32_t i, std::vector<std::vector<uint64_t>>& cells) const {
    uint64_t h = 1469598103934665603ull ^ i;
    for (const Region& r : regions[i])
      if (!r.write)
        for (size_t c = r.begin; c < r.end; ++c) h = (h ^ cells[r.space][c]) * 1099511628211ull;
    for (const Region& r : regions[i])
      if (r.write)
        for (size_t c = r.begin; c < r.end; ++c) cells[r.space][c] = h + c;
  }
  std::vector<std::vector<uint64_t>> initial() const {
    std::vector<std::vector<uint64_t>> cells(kSpaces, std::vector<uint64_t>(kCells));
    for (size_t s = 0; s < kSpaces; ++s)
      for (size_t c = 0; c < kCells; ++c) cells[s][c] = s * 1000 + c;
    return cells;
  }
};

TEST(Dataflow, RunsLikeTheSequentialOrderOnAnyThreadCount) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    const Program program(seed, 40 + 20 * seed);
    std::vector<std::vector<uint64_t>> expected = program.initial();
    for (uint32_t i = 0; i < program.regions.size(); ++i) program.execute(i, expected);

    for (int threads : {1, 2, 4}) {
      std::vector<std::vector<uint64_t>> cells;
      std::vector<std::atomic<int>> runs(program.regions.size());
      std::atomic<int> bad_slot{0};
      Dataflow flow(program.regions, threads, [&](uint32_t piece, int slot) {
        if (slot < 0 || slot >= threads) bad_slot.fetch_add(1);
        runs[piece].fetch_add(1);
        // A little work, so that threads overlap.
        std::this_thread::yield();
        program.execute(piece, cells);
      });
      for (int run = 1; run <= 25; ++run) {
        cells = program.initial();
        flow.run();
        ASSERT_EQ(cells, expected) << "seed " << seed << ", " << threads << " threads, run " << run;
        for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), run) << "piece " << i;
      }
      EXPECT_EQ(bad_slot.load(), 0);
    }
  }
}

TEST(Dataflow, HelpersTakePiecesAndStartOnce) {
  // 16 independent pieces of 1 ms: the caller cannot take them all before a
  // helper wakes, over 20 runs.
  std::vector<std::vector<Region>> regions;
  for (size_t i = 0; i < 16; ++i) regions.push_back({{0, i, i + 1, true}});
  std::atomic<int> on_helpers{0}, started{0};
  Dataflow flow(
      regions, 3,
      [&](uint32_t, int slot) {
        if (slot != 0) on_helpers.fetch_add(1);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      [&](int slot) {
        EXPECT_GE(slot, 1);
        EXPECT_LT(slot, 3);
        started.fetch_add(1);
      });
  for (int run = 0; run < 20; ++run) flow.run();
  EXPECT_GT(on_helpers.load(), 0);
  EXPECT_EQ(started.load(), 2);
}

TEST(Dataflow, RethrowsAPiecesErrorAfterTheOthersRan) {
  std::vector<std::vector<Region>> regions;
  for (size_t i = 0; i < 12; ++i) regions.push_back({{0, i, i + 1, true}});
  std::atomic<int> ran{0};
  bool fail = true;
  Dataflow flow(regions, 2, [&](uint32_t piece, int) {
    ran.fetch_add(1);
    if (fail && piece == 5) throw std::runtime_error("piece 5 failed");
  });
  try {
    flow.run();
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "piece 5 failed");
  }
  EXPECT_EQ(ran.load(), 12);
  fail = false;
  flow.run();  // the next run starts clean
  EXPECT_EQ(ran.load(), 24);
}

TEST(Dataflow, DestroyedBeforeItsHelpersEverRan) {
  // A helper thread that first gets a CPU after the destructor's stop must
  // still see it (this hung under ASan once: the join waited forever).
  std::vector<std::vector<Region>> regions = {{{0, 0, 1, true}}};
  std::atomic<int> awake{0};
  for (int i = 0; i < 200; ++i) {
    Dataflow flow(
        regions, 3, [](uint32_t, int) {}, {}, &awake);
    if (i % 2 == 1) flow.run();
  }
  EXPECT_EQ(awake.load(), 0);  // every helper counted itself out
}

}  // namespace
}  // namespace backplane::onednn
