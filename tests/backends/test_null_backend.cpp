// The Null skeleton backend (backends/null), loaded the way users load theirs:
// as a shared object from a directory given as the runtime's backend path.
// BACKPLANE_NULL_BACKEND_DIR is where the build wrote Backplane_Null_backend.so
// (not the default backend directory, so other tests never see it).
#include "support/model_builder.hpp"

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

#ifndef BACKPLANE_NULL_BACKEND_DIR
#error "BACKPLANE_NULL_BACKEND_DIR must name the directory holding Backplane_Null_backend.so"
#endif

namespace backplane {
namespace {

namespace fs = std::filesystem;

const std::string kNullDir = BACKPLANE_NULL_BACKEND_DIR;
const std::string kNullFile = kNullDir + "/Backplane_Null_backend.so";

RuntimeOptions null_options() {
  RuntimeOptions o;
  o.backend_path = kNullDir;  // overrides BACKPLANE_BACKEND_PATHS and the default
  o.log_level = LogLevel::kError;
  return o;
}

// y = Relu(x + x) on float32[2,3], written to a scratch file.
class NullBackendModel : public ::testing::Test {
 protected:
  void SetUp() override {
    test::ModelBuilder b(13, "add_relu");
    b.input("x", {2, 3}).output("y", {2, 3});
    b.node("Add", {"x", "x"}, {"s"}, "add");
    b.node("Relu", {"s"}, {"y"}, "relu");
    path_ = b.save(dir_, "add_relu.onnx");
  }
  test::TempDir dir_;
  std::string path_;
};

TEST(NullBackend, FileExportsOnlyTheEntryPoints) {
  ASSERT_TRUE(fs::exists(kNullFile)) << kNullFile;
  void* h = ::dlopen(kNullFile.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << ::dlerror();
  auto get_id = reinterpret_cast<bp_get_backend_id_fn>(::dlsym(h, BP_ENTRY_GET_BACKEND_ID));
  auto get_version = reinterpret_cast<bp_get_version_fn>(::dlsym(h, BP_ENTRY_GET_VERSION));
  ASSERT_NE(get_id, nullptr);
  ASSERT_NE(get_version, nullptr);
  EXPECT_STREQ(get_id(), "Null");
  // The skeleton declares the API it implements, which this runtime serves.
  uint32_t major = 99, minor = 99;
  get_version(&major, &minor);
  EXPECT_EQ(major, BP_API_VERSION_MAJOR);
  EXPECT_LE(minor, BP_API_VERSION_MINOR);
  auto factory = reinterpret_cast<bp_backend_factory_fn>(::dlsym(h, BP_ENTRY_BACKEND_FACTORY));
  ASSERT_NE(factory, nullptr);
  auto* table = static_cast<const bp_backend_api_t*>(factory());
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->api_major, major);  // table and GetVersion agree
  EXPECT_EQ(table->api_minor, minor);
  // Internal functions stay hidden (visibility + version script).
  EXPECT_EQ(::dlsym(h, "null_create"), nullptr);
  EXPECT_EQ(::dlsym(h, "null_table"), nullptr);
  ::dlclose(h);
}

TEST(NullBackend, RegistersFromBackendPath) {
  auto rt = Runtime::create(null_options());
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  auto backends = (*rt)->backends();
  auto null = std::find_if(backends.begin(), backends.end(),
                           [](const BackendDescription& b) { return b.id == "Null"; });
  ASSERT_NE(null, backends.end()) << "Null is not registered";
  EXPECT_EQ(null->vendor, "Backplane");
  EXPECT_EQ(null->api_major, BP_API_VERSION_MAJOR);
  EXPECT_LE(null->api_minor, BP_API_VERSION_MINOR);
  EXPECT_EQ(fs::path(null->source).filename(), "Backplane_Null_backend.so");

  auto files = (*rt)->backend_files();
  auto file = std::find_if(files.begin(), files.end(),
                           [](const BackendFileReport& f) { return f.id == "Null"; });
  ASSERT_NE(file, files.end());
  EXPECT_EQ(file->fate, BackendFileReport::Fate::kLoaded) << file->step << ": " << file->reason;
  EXPECT_EQ(file->api_version,
            std::to_string(null->api_major) + "." + std::to_string(null->api_minor));
}

TEST(NullBackend, AcceptsNumThreads) {
  // The runtime configures every backend with num_threads when asked; the
  // skeleton must not turn that into a failure.
  RuntimeOptions o = null_options();
  o.num_threads = 2;
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().message();
}

TEST_F(NullBackendModel, RejectsEveryNodeSoCpuRefRunsThem) {
  auto rt = Runtime::create(null_options());
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  ModelOptions mo;
  mo.backends = {"Null", "CpuRef"};
  auto model = (*rt)->load_model(path_, mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"CpuRef"});
  ASSERT_EQ((*model)->partitions().size(), 1u);
  EXPECT_EQ((*model)->partitions()[0].nodes, (std::vector<std::string>{"add", "relu"}));

  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Tensor x(DType::kFloat32, {2, 3});
  float* px = static_cast<float*>(x.data());
  for (int i = 0; i < 6; ++i) px[i] = static_cast<float>(i) - 2.5f;
  ASSERT_TRUE((*session)->set_input("x", x).ok());
  ASSERT_TRUE((*session)->run().ok());
  const Tensor& y = (*session)->output(0);
  const float* py = static_cast<const float*>(y.data());
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(py[i], std::max(0.0f, 2 * px[i]));
}

TEST_F(NullBackendModel, AloneItRejectsWithItsReason) {
  RuntimeOptions o = null_options();
  o.disabled_static_backends = {"CpuRef"};
  auto rt = Runtime::create(o);
  ASSERT_TRUE(rt.ok()) << rt.status().message();  // Null alone is enough to start
  ASSERT_EQ((*rt)->backends().size(), 1u);
  EXPECT_EQ((*rt)->backends()[0].id, "Null");
  auto model = (*rt)->load_model(path_, {});
  ASSERT_FALSE(model.ok());
  const std::string& msg = model.status().message();
  EXPECT_NE(msg.find("Null: not implemented"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'add'"), std::string::npos) << msg;
}

}  // namespace
}  // namespace backplane
