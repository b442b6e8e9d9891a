// A steady-state run allocates nothing: every buffer is planned when the
// session is created. Counted by replacing the global operator new for this
// test binary (counting only; behaviour is unchanged).
#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<long> g_allocations{0};
}

void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
// The nothrow forms too (libstdc++'s std::stable_sort uses them): left to the
// library, they would hand out blocks that the replaced delete below frees,
// which ASan reports as an allocation/deallocation mismatch.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
// GCC 12 inlines these into callers of the (built-in) operator new and then
// reports new/free as mismatched; with the replacements above they match.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace backplane {
namespace {

long allocations_during_runs(const std::string& backend) {
  RuntimeOptions o;
  o.log_level = LogLevel::kOff;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().message();
  ModelOptions mo;
  mo.backends = {backend};
  auto model = (*rt)->load_model(std::string(BACKPLANE_SOURCE_DIR) + "/models/demo.onnx", mo);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return -1;
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok());
  const TensorInfo& in = (*model)->inputs()[0];
  Tensor x(in.dtype, in.shape);
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = static_cast<float>(i % 17) / 17.0f;
  EXPECT_TRUE((*session)->set_input(0, x).ok());
  EXPECT_TRUE((*session)->run().ok());  // warm-up: lazy first-run work, if any
  long before = g_allocations.load();
  for (int i = 0; i < 5; ++i) {
    Status s = (*session)->run();
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return g_allocations.load() - before;
}

TEST(SteadyState, CpuRefRunAllocatesNothing) { EXPECT_EQ(allocations_during_runs("CpuRef"), 0); }

TEST(SteadyState, CountingWorks) {
  long before = g_allocations.load();
  auto* p = new std::vector<int>(10);
  delete p;
  EXPECT_GE(g_allocations.load() - before, 2);  // the vector and its buffer
}

}  // namespace
}  // namespace backplane
