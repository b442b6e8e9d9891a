// CpuRef's kernels on the host's thread pool (API 1.5): the bytes they write
// do not depend on how many threads run them, and the pool's workers do take
// part. The pool is made current the way the SDK's execute_shaped does it.
#include "core/thread_pool.hpp"
#include "cpuref_test_harness.hpp"
#include "registry/host_api.hpp"

#include <backplane/backend_sdk.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace backplane::cpuref {
namespace {

using namespace test_harness;

std::vector<float> noise(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(static_cast<int32_t>(x >> 8) % 2001 - 1000) / 997.0f;
  }
  return v;
}

// Runs the case with no pool, then on pools of 2 and 3 threads: the same
// bytes every time. Runs it again until the pool's workers have taken part
// (on a busy machine a worker may start only after the caller has done every
// chunk itself, which is the design: the caller never waits for it), within
// a bound a kernel that never uses the pool cannot meet.
void expect_same_bytes_on_any_pool(const OpTest& t, const char* what) {
  const auto alone = t.run();
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    const sdk::ThreadPool lent(host_api(), pool.abi());
    ASSERT_EQ(lent.size(), static_cast<uint32_t>(threads));
    const sdk::ThreadPool::Scope scope(&lent);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    do {
      ASSERT_EQ(t.run(), alone) << what << " on " << threads << " threads";
    } while (pool.worker_chunks() == 0 && std::chrono::steady_clock::now() < until);
    EXPECT_GT(pool.worker_chunks(), 0u) << what << ": the workers took no part";
  }
}

TEST(CpuRefThreads, MatMulAndGemmAreBitIdentical) {
  // 67 rows: sixteen groups of four and a tail of three; 530 columns: two
  // full blocks of 256 and a partial one.
  OpTest matmul("MatMul", 13,
                {f32({67, 300}, noise(67 * 300, 1)), f32({300, 530}, noise(300 * 530, 2))},
                {{BP_DTYPE_FLOAT32, {67, 530}}});
  expect_same_bytes_on_any_pool(matmul, "MatMul");
  // B transposed: one dot product per element, split by rows.
  OpTest gemm("Gemm", 13,
              {f32({37, 129}, noise(37 * 129, 3)), f32({45, 129}, noise(45 * 129, 4)),
               f32({45}, noise(45, 5))},
              {{BP_DTYPE_FLOAT32, {37, 45}}}, {attr_i("transB", 1), attr_f("alpha", 0.5f)});
  expect_same_bytes_on_any_pool(gemm, "Gemm transB");
}

TEST(CpuRefThreads, ConvIsBitIdentical) {
  OpTest conv("Conv", 11,
              {f32({1, 8, 40, 40}, noise(8 * 40 * 40, 6)), f32({16, 8, 3, 3}, noise(16 * 72, 7)),
               f32({16}, noise(16, 8))},
              {{BP_DTYPE_FLOAT32, {1, 16, 40, 40}}},
              {attr_ints("pads", {1, 1, 1, 1}), attr_ints("kernel_shape", {3, 3})});
  expect_same_bytes_on_any_pool(conv, "Conv");
}

TEST(CpuRefThreads, ElementWiseIsBitIdentical) {
  OpTest relu("Relu", 14, {f32({300000}, noise(300000, 9))}, {{BP_DTYPE_FLOAT32, {300000}}});
  expect_same_bytes_on_any_pool(relu, "Relu");
  OpTest add("Add", 14, {f32({300000}, noise(300000, 10)), f32({300000}, noise(300000, 11))},
             {{BP_DTYPE_FLOAT32, {300000}}});
  expect_same_bytes_on_any_pool(add, "Add, equal shapes");
  // Broadcast over an outer dim: rows start mid-way through the index.
  OpTest bcast(
      "Mul", 14,
      {f32({4, 64, 33, 17}, noise(4 * 64 * 33 * 17, 12)), f32({64, 1, 17}, noise(64 * 17, 13))},
      {{BP_DTYPE_FLOAT32, {4, 64, 33, 17}}});
  expect_same_bytes_on_any_pool(bcast, "Mul, broadcast");
}

TEST(CpuRefThreads, PoolingIsBitIdentical) {
  OpTest maxpool("MaxPool", 12, {f32({2, 16, 64, 64}, noise(2 * 16 * 64 * 64, 14))},
                 {{BP_DTYPE_FLOAT32, {2, 16, 32, 32}}, {BP_DTYPE_INT64, {2, 16, 32, 32}}},
                 {attr_ints("kernel_shape", {3, 3}), attr_ints("strides", {2, 2}),
                  attr_ints("pads", {1, 1, 1, 1})});
  expect_same_bytes_on_any_pool(maxpool, "MaxPool with indices");
  OpTest avgpool("AveragePool", 11, {f32({2, 16, 64, 64}, noise(2 * 16 * 64 * 64, 15))},
                 {{BP_DTYPE_FLOAT32, {2, 16, 32, 32}}},
                 {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
  expect_same_bytes_on_any_pool(avgpool, "AveragePool");
}

// Scatters are split over a dim other than their axis, so that each thread
// writes elements no other one does: with indices that repeat (the last
// write wins, in the order of one thread) and with a reduction, the bytes are
// those of one thread. Faster R-CNN scatters its pooled regions this way.
TEST(CpuRefThreads, ScatterAndGatherElementsAreBitIdentical) {
  const Dims data = {50, 64, 7, 7}, idx = {40, 64, 7, 7};
  const int64_t n = 40 * 64 * 49;
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) rows[k] = (k / 3 + k % 5) % 17 - (k % 2 ? 17 : 0);  // repeats
  for (const char* reduction : {"none", "add"}) {
    OpTest scatter("ScatterElements", 16,
                   {f32(data, noise(50 * 64 * 49, 12)), i64(idx, rows), f32(idx, noise(n, 13))},
                   {{BP_DTYPE_FLOAT32, data}}, {attr_i("axis", 0), attr_s("reduction", reduction)});
    expect_same_bytes_on_any_pool(scatter, reduction);
  }
  std::vector<int64_t> cols(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) cols[k] = (k * 7) % 13 - 6;
  OpTest gather("GatherElements", 13, {f32(data, noise(50 * 64 * 49, 14)), i64(idx, cols)},
                {{BP_DTYPE_FLOAT32, idx}}, {attr_i("axis", 2)});
  expect_same_bytes_on_any_pool(gather, "GatherElements");
}

}  // namespace
}  // namespace backplane::cpuref
