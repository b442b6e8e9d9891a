// RuntimeOptions are validated before anything is loaded: thread counts are
// bounded by max_threads(), and an explicit backend directory must exist;
// backend_config reaches the backends, which refuse what they do not know.
#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <thread>

namespace backplane {
namespace {

TEST(RuntimeOptions, ThreadCountsOutOfRangeAreInvalidArguments) {
  const int max = max_threads();
  EXPECT_GE(max, 4);
  EXPECT_LE(max, 1024);
  EXPECT_GE(max, static_cast<int>(std::thread::hardware_concurrency()));
  for (int n : {-1, max + 1, 32768, 65536, 99999}) {
    RuntimeOptions o;
    o.dynamic_backends = false;
    o.num_threads = n;
    auto rt = Runtime::create(o);
    ASSERT_FALSE(rt.ok()) << n;
    EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument) << n;
    EXPECT_NE(rt.status().message().find("num_threads " + std::to_string(n) + " is out of range"),
              std::string::npos)
        << rt.status().message();
  }
  for (int n : {0, 1, max}) {
    RuntimeOptions o;
    o.dynamic_backends = false;
    o.num_threads = n;
    EXPECT_TRUE(Runtime::create(o).ok()) << n;
  }
}

TEST(RuntimeOptions, MissingBackendDirectoryIsAnError) {
  RuntimeOptions o;
  o.backend_path = "/nonexistent/backplane/backends";
  auto rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kNotFound);
  EXPECT_NE(rt.status().message().find("/nonexistent/backplane/backends"), std::string::npos);
  o.backend_path = "";  // explicitly empty: dynamic loading off, not an error
  EXPECT_TRUE(Runtime::create(o).ok());
}

TEST(RuntimeOptions, RelativeBackendDirectoryIsAnError) {
  // Not skipped with a warning (the run would go on without the backends the
  // user meant to load): named, and how to make it absolute.
  RuntimeOptions o;
  o.backend_path = "build/lib/backplane/backends";
  auto rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rt.status().message().find("'build/lib/backplane/backends'"), std::string::npos);
  EXPECT_NE(rt.status().message().find("not an absolute path"), std::string::npos);
}

TEST(RuntimeOptions, BackendConfigReachesTheBackendWhichRefusesUnknownKeys) {
  RuntimeOptions o;
  o.dynamic_backends = false;
  o.backend_config["CpuRef"]["num_threads"] = "2";  // a key every SDK backend takes
  EXPECT_TRUE(Runtime::create(o).ok());
  o.backend_config["CpuRef"]["num_thread"] = "2";
  auto rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rt.status().message().find("backend 'CpuRef'"), std::string::npos)
      << rt.status().message();
  EXPECT_NE(rt.status().message().find("unknown configuration key 'num_thread'"),
            std::string::npos)
      << rt.status().message();
  o.backend_config["CpuRef"].erase("num_thread");
  o.backend_config["CpuRef"]["num_threads"] = "two";
  rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("'two' is not a whole number from 0 to 65536"), std::string::npos)
      << rt.status().message();
}

TEST(RuntimeOptions, BackendConfigOfAnUnregisteredBackendIsAnError) {
  RuntimeOptions o;
  o.dynamic_backends = false;
  o.backend_config["CpuOneDnm"]["layout"] = "blocked";
  auto rt = Runtime::create(o);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(rt.status().message().find("'CpuOneDnm', which is not registered"), std::string::npos)
      << rt.status().message();
}

}  // namespace
}  // namespace backplane
