// One Runtime used from 8 threads at once, as a server would: every thread
// loads the same model (query_support, compile and the network hooks of the
// one MockAcc instance race), creates sessions (memory_acquire, memory_alloc)
// and runs them (copies to and from MockAcc's device memory). The ABI
// promises a backend that the host serialises all of these on one instance;
// MockAcc counts every call that overlaps another ("overlaps"), so this test
// fails if LoadedBackend::call stops serialising. Run under ThreadSanitizer
// in CI (label `concurrency`).
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace backplane {
namespace {

const std::string kAccelDir = BACKPLANE_TESTING_ACCEL_DIR;

uint64_t mockacc_counter(const std::string& key) {
  const std::string path = kAccelDir + "/Backplane_MockAcc_backend.so";
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return 0;
  auto fn = reinterpret_cast<uint64_t (*)(const char*)>(::dlsym(h, "MockAcc_Counter"));
  uint64_t v = fn != nullptr ? fn(key.c_str()) : 0;
  ::dlclose(h);
  return v;
}

TEST(RuntimeConcurrency, EightThreadsLoadCreateSessionsAndRunOnOneRuntime) {
  test::TempDir dir;
  const std::string path = dir.file("cnn.onnx");
  test::write_small_cnn(path);
  std::shared_ptr<Runtime> rt = e2e::make_runtime(kAccelDir);
  ASSERT_NE(rt, nullptr);

  Tensor x(DType::kFloat32, {1, 3, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data_as<float>()[i] = static_cast<float>((i * 37) % 17) / 8.0f - 1.0f;
  const std::map<std::string, Tensor> inputs = {{"x", x}};
  ModelOptions cpu_only;
  cpu_only.backends = {"CpuRef"};
  auto reference_model = rt->load_model(path, cpu_only);
  ASSERT_TRUE(reference_model.ok()) << reference_model.status().to_string();
  const std::vector<Tensor> expected = e2e::run_once(**reference_model, inputs);
  ASSERT_EQ(expected.size(), 1u);

  ModelOptions split;  // MockAcc first: it takes what it can, CpuRef the rest
  split.backends = {"MockAcc", "CpuRef"};
  const uint64_t overlaps_before = mockacc_counter("overlaps");
  const uint64_t compiles_before = mockacc_counter("compiles");
  constexpr int kThreads = 8, kLoads = 3, kSessions = 2, kRuns = 3;
  std::atomic<int> runs{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int l = 0; l < kLoads; ++l) {
        auto model = rt->load_model(path, split);
        if (!model.ok()) {
          ADD_FAILURE() << model.status().to_string();
          ++failures;
          return;
        }
        for (int s = 0; s < kSessions; ++s) {
          auto session = (*model)->create_session();
          if (!session.ok()) {
            ADD_FAILURE() << session.status().to_string();
            ++failures;
            return;
          }
          for (int r = 0; r < kRuns; ++r) {
            Status st = (*session)->set_input("x", x);
            if (st.ok()) st = (*session)->run();
            if (!st.ok() || e2e::relative_error((*session)->output(0), expected[0]) > 1e-5) {
              ADD_FAILURE() << "run: " << st.to_string();
              ++failures;
              return;
            }
            ++runs;
          }
        }
      }
    });
  for (std::thread& t : threads) t.join();

  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(runs.load(), kThreads * kLoads * kSessions * kRuns);
  // The work really reached MockAcc, on one instance, from every thread.
  EXPECT_GE(mockacc_counter("compiles") - compiles_before,
            static_cast<uint64_t>(kThreads * kLoads));
  EXPECT_GT(mockacc_counter("copies_to_device"), 0u);
  EXPECT_EQ(mockacc_counter("overlaps") - overlaps_before, 0u)
      << "the host let calls on one backend instance overlap";
}

}  // namespace
}  // namespace backplane
