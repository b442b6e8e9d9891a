// A runtime of the statically linked backends only (results do not depend
// on which plugins are installed), logging errors only: the session tests'.
#pragma once

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <memory>

namespace backplane::test {

inline std::shared_ptr<Runtime> static_runtime() {
  RuntimeOptions o;
  o.log_level = LogLevel::kError;
  o.dynamic_backends = false;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().message();
  return rt.ok() ? *rt : nullptr;
}

}  // namespace backplane::test
