// Backends compiled against the frozen API headers (tests/abi/v1_0/ to
// v1_4/backend_abi.h, never edited once released) load into and run
// under the current runtime; one built against the live header (1.5) runs
// its partition on the host's thread pool. When the live header gains slots, this test is
// what proves the runtime still accepts the older, shorter tables.
#include "support/mock_testing.hpp"

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace backplane {
namespace {

namespace bt = backplane::test;
namespace fs = std::filesystem;

struct Frozen {
  uint32_t minor;
  std::string dir, file, header, id;
};

class AbiFrozen : public ::testing::TestWithParam<Frozen> {};

TEST_P(AbiFrozen, FrozenHeaderIsStillItsVersion) {
  std::ifstream in(GetParam().header);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("#define BP_API_VERSION_MAJOR 1u"), std::string::npos);
  EXPECT_NE(
      text.str().find("#define BP_API_VERSION_MINOR " + std::to_string(GetParam().minor) + "u"),
      std::string::npos);
  // The live header may only have moved forward within major 1.
  EXPECT_EQ(BP_API_VERSION_MAJOR, 1u);
  EXPECT_GT(BP_API_VERSION_MINOR, GetParam().minor);
}

TEST_P(AbiFrozen, BackendBuiltAgainstFrozenHeaderLoadsAndRuns) {
  const Frozen& f = GetParam();
  ASSERT_TRUE(fs::exists(f.file)) << f.file;
  auto rt = Runtime::create(bt::dynamic_only(f.dir));
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  auto backends = (*rt)->backends();
  ASSERT_EQ(backends.size(), 1u);
  EXPECT_EQ(backends[0].id, f.id);
  EXPECT_EQ(backends[0].api_major, 1u);
  EXPECT_EQ(backends[0].api_minor, f.minor);
  EXPECT_EQ(backends[0].source, fs::canonical(f.file).string());
  auto files = (*rt)->backend_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].fate, BackendFileReport::Fate::kLoaded)
      << files[0].step << ": " << files[0].reason;
  EXPECT_EQ(files[0].api_version, "1." + std::to_string(f.minor));

  bt::TempDir tmp;
  bt::write_relu_model(tmp.file("relu.onnx"), {1, 5}, 3);
  auto model = (*rt)->load_model(tmp.file("relu.onnx"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{f.id});
  bt::expect_relu_runs(**model, {1, 5});
}

INSTANTIATE_TEST_SUITE_P(
    Released, AbiFrozen,
    ::testing::Values(Frozen{0, ABI_V1_0_BACKEND_DIR, ABI_V1_0_BACKEND_DIR "/Abi_AbiV10_backend.so",
                             ABI_V1_0_HEADER, "AbiV10"},
                      Frozen{1, ABI_V1_1_BACKEND_DIR, ABI_V1_1_BACKEND_DIR "/Abi_AbiV11_backend.so",
                             ABI_V1_1_HEADER, "AbiV11"},
                      Frozen{2, ABI_V1_2_BACKEND_DIR, ABI_V1_2_BACKEND_DIR "/Abi_AbiV12_backend.so",
                             ABI_V1_2_HEADER, "AbiV12"},
                      Frozen{3, ABI_V1_3_BACKEND_DIR, ABI_V1_3_BACKEND_DIR "/Abi_AbiV13_backend.so",
                             ABI_V1_3_HEADER, "AbiV13"},
                      Frozen{4, ABI_V1_4_BACKEND_DIR, ABI_V1_4_BACKEND_DIR "/Abi_AbiV14_backend.so",
                             ABI_V1_4_HEADER, "AbiV14"}),
    [](const ::testing::TestParamInfo<Frozen>& info) {
      return "V1_" + std::to_string(info.param.minor);
    });

// Mirrors mock_pool_counters_t of mock_backend.c (MOCK_THREAD_POOL).
struct PoolCounters {
  int execute_shaped, chunks, max_pool_size, edge_flags, with_pool;
};

// API 1.5: the backend is lent the runtime's pool (sized by num_threads)
// with every execute_shaped, and its parallel_for covers the tensor.
TEST(AbiV15, BackendRunsOnTheHostThreadPool) {
  const std::string file = ABI_V1_5_BACKEND_DIR "/Abi_AbiV15_backend.so";
  ASSERT_TRUE(fs::exists(file)) << file;
  RuntimeOptions options = bt::dynamic_only(ABI_V1_5_BACKEND_DIR);
  options.num_threads = 3;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  ASSERT_EQ((*rt)->backends().size(), 1u);
  EXPECT_EQ((*rt)->backends()[0].api_minor, 5u);
  void* h = ::dlopen(fs::canonical(file).c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  ASSERT_NE(h, nullptr);
  auto counters = reinterpret_cast<PoolCounters* (*)()>(::dlsym(h, "MockPoolCounters"));
  ASSERT_NE(counters, nullptr);
  const PoolCounters before = *counters();

  bt::TempDir tmp;
  bt::write_relu_model(tmp.file("relu.onnx"), {4, 64}, 2);
  auto model = (*rt)->load_model(tmp.file("relu.onnx"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  bt::expect_relu_runs(**model, {4, 64});
  const PoolCounters after = *counters();
  ::dlclose(h);
  EXPECT_GT(after.execute_shaped, before.execute_shaped);
  EXPECT_EQ(after.with_pool - before.with_pool, after.execute_shaped - before.execute_shaped);
  EXPECT_EQ(after.max_pool_size, 3);
  // grain 1 over 256 floats on 3 threads: split into several chunks.
  EXPECT_GT(after.chunks - before.chunks, after.execute_shaped - before.execute_shaped);
  // One backend only: never a partition edge.
  EXPECT_EQ(after.edge_flags, before.edge_flags);
}

// API 1.5: BP_EXECUTE_EDGE_FOLLOWS is set exactly on a partition whose next
// one (in the run, or the first of the next run) is another backend's.
TEST(AbiV15, EdgeFlagMarksEveryPartitionAnotherBackendFollows) {
  const std::string file = ABI_V1_5_BACKEND_DIR "/Abi_AbiV15_backend.so";
  RuntimeOptions options = bt::with_dir(ABI_V1_5_BACKEND_DIR);  // CpuRef too
  options.num_threads = 2;
  auto rt = Runtime::create(options);
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  void* h = ::dlopen(fs::canonical(file).c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  ASSERT_NE(h, nullptr);
  auto counters = reinterpret_cast<PoolCounters* (*)()>(::dlsym(h, "MockPoolCounters"));
  ASSERT_NE(counters, nullptr);

  bt::TempDir tmp;
  bt::write_relu_model(tmp.file("relu.onnx"), {2, 8}, 5);
  // AbiV15, CpuRef, AbiV15, AbiV15, CpuRef: the first AbiV15 partition and
  // the second (relu_2 and relu_3 together) are followed by CpuRef.
  ModelOptions placement;
  placement.backends = {"AbiV15", "CpuRef"};
  placement.overrides = {{"relu_1", "CpuRef"}, {"relu_4", "CpuRef"}};
  auto model = (*rt)->load_model(tmp.file("relu.onnx"), placement);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_EQ((*model)->partitions().size(), 4u) << (*model)->describe_plan(PlanFormat::kText);
  const PoolCounters before = *counters();
  bt::expect_relu_runs(**model, {2, 8});
  const PoolCounters after = *counters();
  const int executes = after.execute_shaped - before.execute_shaped;
  ASSERT_GT(executes, 0);
  ASSERT_EQ(executes % 2, 0);  // two AbiV15 partitions per run
  EXPECT_EQ(after.edge_flags - before.edge_flags, executes);

  // AbiV15, CpuRef, AbiV15: the last partition is followed by the next
  // run's first, AbiV15's own: not an edge. One flag per run.
  ModelOptions wrap;
  wrap.backends = {"AbiV15", "CpuRef"};
  wrap.overrides = {{"relu_1", "CpuRef"}};
  auto model2 = (*rt)->load_model(tmp.file("relu.onnx"), wrap);
  ASSERT_TRUE(model2.ok()) << model2.status().message();
  ASSERT_EQ((*model2)->partitions().size(), 3u) << (*model2)->describe_plan(PlanFormat::kText);
  const PoolCounters before2 = *counters();
  bt::expect_relu_runs(**model2, {2, 8});
  const PoolCounters after2 = *counters();
  ::dlclose(h);
  const int executes2 = after2.execute_shaped - before2.execute_shaped;
  ASSERT_GT(executes2, 0);
  ASSERT_EQ(executes2 % 2, 0);
  EXPECT_EQ(after2.edge_flags - before2.edge_flags, executes2 / 2);
}

}  // namespace
}  // namespace backplane
