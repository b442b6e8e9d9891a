// A backend compiled against the frozen API 1.0 header (tests/abi/v1_0/
// backend_abi.h, never edited once released) loads into and runs under the
// current runtime. When the live header gains slots, this test is what proves
// the runtime still accepts the older, shorter table.
#include "support/mock_testing.hpp"

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace backplane {
namespace {

namespace bt = backplane::test;
namespace fs = std::filesystem;

const std::string kDir = ABI_V1_0_BACKEND_DIR;
const std::string kFile = kDir + "/Abi_V10_backend.so";

TEST(AbiV1_0, FrozenHeaderIsStill1_0) {
  std::ifstream in(ABI_V1_0_HEADER);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("#define BP_API_VERSION_MAJOR 1u"), std::string::npos);
  EXPECT_NE(text.str().find("#define BP_API_VERSION_MINOR 0u"), std::string::npos);
  // The live header may only have moved forward within major 1.
  EXPECT_EQ(BP_API_VERSION_MAJOR, 1u);
}

TEST(AbiV1_0, BackendBuiltAgainstFrozenHeaderLoadsAndRuns) {
  ASSERT_TRUE(fs::exists(kFile)) << kFile;
  auto rt = Runtime::create(bt::dynamic_only(kDir));
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  auto backends = (*rt)->backends();
  ASSERT_EQ(backends.size(), 1u);
  EXPECT_EQ(backends[0].id, "AbiV10");
  EXPECT_EQ(backends[0].api_major, 1u);
  EXPECT_EQ(backends[0].api_minor, 0u);
  EXPECT_EQ(backends[0].source, fs::canonical(kFile).string());
  auto files = (*rt)->backend_files();
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].fate, BackendFileReport::Fate::kLoaded)
      << files[0].step << ": " << files[0].reason;
  EXPECT_EQ(files[0].api_version, "1.0");

  bt::TempDir tmp;
  bt::write_relu_model(tmp.file("relu.onnx"), {1, 5}, 3);
  auto model = (*rt)->load_model(tmp.file("relu.onnx"));
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ((*model)->backends_used(), std::vector<std::string>{"AbiV10"});
  bt::expect_relu_runs(**model, {1, 5});
}

}  // namespace
}  // namespace backplane
