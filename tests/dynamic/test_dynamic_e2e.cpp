// End to end with a real dynamic backend: CpuRef built as a module
// (Backplane_CpuRef_backend.so in this build's lib/backplane/backends) runs a
// small CNN exactly as the statically linked CpuRef does — the seed's "run
// ExecuteNetwork with at least one dynamic backend (wrapping an existing
// backend in a shared object)".
#include "support/mock_testing.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace backplane {
namespace {

namespace fs = std::filesystem;
namespace bt = backplane::test;

const std::string kModuleDir = std::string(BACKPLANE_BINARY_DIR) + "/lib/backplane/backends";
const std::string kCpuRefModule = kModuleDir + "/Backplane_CpuRef_backend.so";

struct RunResult {
  std::vector<PartitionDescription> partitions;
  std::vector<std::string> backends_used;
  std::vector<float> output;
};

RunResult run_cnn(Runtime& rt, const std::string& model_path) {
  RunResult r;
  ModelOptions mo;
  mo.backends = {"CpuRef"};
  auto model = rt.load_model(model_path, mo);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return r;
  r.partitions = (*model)->partitions();
  r.backends_used = (*model)->backends_used();
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok()) << session.status().message();
  if (!session.ok()) return r;
  Tensor x(DType::kFloat32, {1, 3, 8, 8});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data_as<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  EXPECT_TRUE((*session)->set_input("x", x).ok());
  Status s = (*session)->run();
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return r;
  const Tensor& y = (*session)->output(0);
  r.output.assign(y.data_as<float>(), y.data_as<float>() + y.numel());
  return r;
}

TEST(DynamicEndToEnd, CpuRefLoadedDynamicallyMatchesStaticBitForBit) {
  ASSERT_TRUE(fs::exists(kCpuRefModule)) << kCpuRefModule << " was not built";
  bt::TempDir tmp;
  const std::string model = tmp.file("small_cnn.onnx");
  bt::write_small_cnn(model);

  RuntimeOptions static_opts;
  static_opts.dynamic_backends = false;
  static_opts.log_level = LogLevel::kOff;
  auto static_rt = Runtime::create(static_opts);
  ASSERT_TRUE(static_rt.ok()) << static_rt.status().message();

  auto created = Runtime::create(bt::dynamic_only(kModuleDir));
  ASSERT_TRUE(created.ok()) << created.status().message();
  std::shared_ptr<Runtime> dynamic_rt = std::move(*created);

  // The dynamic runtime's CpuRef is the shared object, and says so.
  bool found = false;
  for (const BackendDescription& d : dynamic_rt->backends()) {
    if (d.id != "CpuRef") continue;
    found = true;
    EXPECT_EQ(d.source, fs::canonical(kCpuRefModule).string());
  }
  EXPECT_TRUE(found) << "CpuRef was not loaded from " << kModuleDir;
  for (const BackendDescription& d : (*static_rt)->backends()) {
    if (d.id == "CpuRef") {
      EXPECT_EQ(d.source, "static");
    }
  }
  EXPECT_TRUE(bt::mapped_in_this_process(fs::canonical(kCpuRefModule).string()));

  RunResult a = run_cnn(**static_rt, model);
  RunResult b = run_cnn(*dynamic_rt, model);
  ASSERT_EQ(a.output.size(), 10u);
  ASSERT_EQ(b.output.size(), 10u);
  EXPECT_EQ(a.backends_used, std::vector<std::string>{"CpuRef"});
  EXPECT_EQ(b.backends_used, std::vector<std::string>{"CpuRef"});
  ASSERT_EQ(b.partitions.size(), 1u);
  EXPECT_EQ(b.partitions[0].nodes.size(), 6u);
  EXPECT_EQ(std::memcmp(a.output.data(), b.output.data(), a.output.size() * sizeof(float)), 0);
  // A real result, not zeros: a softmax over 10 classes, not uniform.
  double sum = 0, mx = 0;
  for (float v : b.output) {
    sum += v;
    mx = std::max<double>(mx, v);
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
  EXPECT_GT(mx, 0.11);

  // Once its runtime is gone, the module is unloaded.
  dynamic_rt.reset();
  EXPECT_FALSE(bt::mapped_in_this_process(fs::canonical(kCpuRefModule).string()));
}

}  // namespace
}  // namespace backplane
