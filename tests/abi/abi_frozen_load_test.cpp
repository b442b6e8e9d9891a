// Backends compiled against the frozen API headers (tests/abi/v1_0/ to
// v1_3/backend_abi.h, never edited once released) load into and run
// under the current runtime. When the live header gains slots, this test is
// what proves the runtime still accepts the older, shorter tables.
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
                             ABI_V1_3_HEADER, "AbiV13"}),
    [](const ::testing::TestParamInfo<Frozen>& info) {
      return "V1_" + std::to_string(info.param.minor);
    });

}  // namespace
}  // namespace backplane
