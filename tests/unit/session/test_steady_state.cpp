// A steady-state run allocates nothing: every buffer is planned when the
// session is created. Counted in this test binary only (its own executable,
// tests/unit/CMakeLists.txt), by replacing the allocation functions of the
// whole process (counting only; behaviour is unchanged):
// - the C allocator: malloc, calloc, realloc, aligned_alloc, posix_memalign,
//   memalign, valloc, pvalloc forward to glibc's __libc_* functions. An
//   executable's definitions interpose on every shared library, so this sees
//   the runtime, libstdc++, protobuf and any loaded backend alike;
// - every replaceable operator new / delete (plain, array, nothrow, aligned,
//   sized), forwarding to the counted C functions, so no allocation path of
//   C++ escapes whatever libstdc++'s own operator new calls.
// A sanitizer build owns malloc (its interceptors must stay in place), so
// there the sanitizer's allocator hooks count instead, which see the same
// calls.
#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <thread>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define BACKPLANE_SANITIZER_ALLOCATOR 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define BACKPLANE_SANITIZER_ALLOCATOR 1
#endif
// ThreadSanitizer's allocator (GCC 12's libtsan) does not call the malloc hook
// for aligned_alloc / posix_memalign; under it those two are not checked.
#if defined(__SANITIZE_THREAD__)
#define BACKPLANE_HOOKS_MISS_MEMALIGN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BACKPLANE_HOOKS_MISS_MEMALIGN 1
#endif
#endif

namespace {
constinit std::atomic<long> g_allocations{0};
void count_allocation() { g_allocations.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

#ifdef BACKPLANE_SANITIZER_ALLOCATOR

// <sanitizer/allocator_interface.h> (not shipped with every compiler).
extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*,
                                                                             size_t),
                                                         void (*free_hook)(const volatile void*));
namespace {
void on_malloc(const volatile void*, size_t) { count_allocation(); }
void on_free(const volatile void*) {}
const int g_hooks_installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}  // namespace

#else

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* p, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void* __libc_valloc(size_t size);
void* __libc_pvalloc(size_t size);
void __libc_free(void* p);

void* malloc(size_t size) {
  count_allocation();
  return __libc_malloc(size);
}
void* calloc(size_t count, size_t size) {
  count_allocation();
  return __libc_calloc(count, size);
}
void* realloc(void* p, size_t size) {
  count_allocation();
  return __libc_realloc(p, size);
}
void* memalign(size_t alignment, size_t size) {
  count_allocation();
  return __libc_memalign(alignment, size);
}
void* aligned_alloc(size_t alignment, size_t size) { return memalign(alignment, size); }
int posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = memalign(alignment, size);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* valloc(size_t size) {
  count_allocation();
  return __libc_valloc(size);
}
void* pvalloc(size_t size) {
  count_allocation();
  return __libc_pvalloc(size);
}
void free(void* p) { __libc_free(p); }
}  // extern "C"

namespace {
void* checked(void* p) {
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void* aligned(std::size_t n, std::align_val_t al) {
  return memalign(static_cast<size_t>(al), n == 0 ? 1 : n);
}
}  // namespace

void* operator new(std::size_t n) { return checked(malloc(n == 0 ? 1 : n)); }
void* operator new[](std::size_t n) { return checked(malloc(n == 0 ? 1 : n)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return malloc(n == 0 ? 1 : n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return malloc(n == 0 ? 1 : n);
}
void* operator new(std::size_t n, std::align_val_t al) { return checked(aligned(n, al)); }
void* operator new[](std::size_t n, std::align_val_t al) { return checked(aligned(n, al)); }
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return aligned(n, al);
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return aligned(n, al);
}
void operator delete(void* p) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete(void* p, std::size_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t) noexcept { free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { free(p); }
void operator delete(void* p, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { free(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { free(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { free(p); }

#endif  // BACKPLANE_SANITIZER_ALLOCATOR

namespace backplane {
namespace {

// Waits (up to 10 s) until every other thread of the process is asleep. A
// thread pool's worker started by the warm-up run may not have had a CPU yet
// on a busy machine; under ASan its start (AsanThread::Init, through
// pthread_getattr_np) allocates, which would count as the run's. Once it
// sleeps, waiting for work, it has started.
void wait_other_threads_asleep() {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  const std::string self = std::to_string(syscall(SYS_gettid));
  while (std::chrono::steady_clock::now() < until) {
    bool running = false;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      if (task.path().filename() == self) continue;
      std::ifstream f(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      const size_t close = stat.rfind(')');
      if (close != std::string::npos && close + 2 < stat.size() && stat[close + 2] == 'R')
        running = true;
    }
    if (!running) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

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
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data_as<float>()[i] = static_cast<float>(i % 17) / 17.0f;
  EXPECT_TRUE((*session)->set_input(0, x).ok());
  EXPECT_TRUE((*session)->run().ok());  // warm-up: lazy first-run work, if any
  wait_other_threads_asleep();
  long before = g_allocations.load();
  for (int i = 0; i < 5; ++i) {
    Status s = (*session)->run();
    EXPECT_TRUE(s.ok()) << s.message();
  }
  return g_allocations.load() - before;
}

TEST(SteadyState, CpuRefRunAllocatesNothing) { EXPECT_EQ(allocations_during_runs("CpuRef"), 0); }

// The counter itself: each way of allocating must register, or a steady
// state that allocates through it would pass unnoticed.
template <class Allocate>
long allocations_by(Allocate allocate) {
  const long before = g_allocations.load();
  allocate();
  return g_allocations.load() - before;
}

TEST(SteadyState, CountingWorks) {
#ifdef BACKPLANE_SANITIZER_ALLOCATOR
  ASSERT_NE(g_hooks_installed, 0) << "the sanitizer did not accept the allocation hooks";
#endif
  // Each allocation is written through a volatile pointer and freed, so the
  // compiler cannot elide the pair.
  auto use = [](void* p) {
    ASSERT_NE(p, nullptr);
    *static_cast<volatile char*>(p) = 1;
  };
  EXPECT_GE(allocations_by([&] {
              auto* v = new std::vector<int>(10);
              use(v->data());
              delete v;
            }),
            2)
      << "new (the vector and its buffer)";
  EXPECT_GE(allocations_by([&] {
              auto* a = new char[33];
              use(a);
              delete[] a;
            }),
            1)
      << "new[]";
  EXPECT_GE(allocations_by([&] {
              auto* a = new (std::nothrow) char[7];
              use(a);
              delete[] a;
            }),
            1)
      << "nothrow new[]";
  struct alignas(128) Wide {
    char bytes[128];
  };
  EXPECT_GE(allocations_by([&] {
              auto* w = new Wide;
              use(w);
              delete w;
            }),
            1)
      << "aligned new";
  EXPECT_GE(allocations_by([&] {
              auto* w = new Wide[3];
              use(w);
              delete[] w;
            }),
            1)
      << "aligned new[]";
  EXPECT_GE(allocations_by([&] {
              void* p = std::malloc(24);
              use(p);
              std::free(p);
            }),
            1)
      << "malloc";
  EXPECT_GE(allocations_by([&] {
              void* p = std::calloc(3, 8);
              use(p);
              std::free(p);
            }),
            1)
      << "calloc";
  EXPECT_GE(allocations_by([&] {
              void* p = std::malloc(8);
              use(p);
              void* q = std::realloc(p, 4096);
              use(q);
              std::free(q);
            }),
            2)
      << "realloc";
#ifndef BACKPLANE_HOOKS_MISS_MEMALIGN
  EXPECT_GE(allocations_by([&] {
              void* p = std::aligned_alloc(64, 256);
              use(p);
              std::free(p);
            }),
            1)
      << "aligned_alloc";
  EXPECT_GE(allocations_by([&] {
              void* p = nullptr;
              ASSERT_EQ(::posix_memalign(&p, 64, 100), 0);
              use(p);
              std::free(p);
            }),
            1)
      << "posix_memalign";
#endif
}

}  // namespace
}  // namespace backplane
