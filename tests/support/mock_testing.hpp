// mock_testing.hpp — helpers shared by the dynamic-backend tests
// (tests/dynamic, tests/abi/abi_v1_0_load_test.cpp): /proc/self/maps, and
// access to the mock backend's call counters (backends/testing/mock_backend.c).
// Their models and temporary directories come from model_builder.hpp.
#pragma once

#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <dlfcn.h>

#include <fstream>
#include <string>

namespace backplane::test {

// Mirrors mock_counters_t of mock_backend.c.
struct MockCounters {
  int create, destroy, get_info, configure, query_support, compile, compiled_destroy,
      context_create, context_destroy, execute, execute_node, before_load_network,
      after_load_network, before_unload_network, after_unload_network, live_instances;
};

// The counters of a mock already loaded in this process (RTLD_NOLOAD: never
// loads it), or a copy of zeros with `loaded` false. A snapshot: the handle is
// closed again before returning, so it does not keep the library alive.
struct CounterSnapshot {
  bool loaded = false;
  MockCounters counters{};
};
inline CounterSnapshot mock_counters(const std::string& canonical_path) {
  CounterSnapshot s;
  void* h = ::dlopen(canonical_path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
  if (h == nullptr) return s;
  using Fn = MockCounters* (*)();
  auto fn = reinterpret_cast<Fn>(::dlsym(h, "MockCounters"));
  if (fn != nullptr) {
    s.loaded = true;
    s.counters = *fn();
  }
  ::dlclose(h);
  return s;
}

// True if /proc/self/maps maps `canonical_path` (i.e. it is dlopened here).
inline bool mapped_in_this_process(const std::string& canonical_path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    size_t slash = line.find('/');
    if (slash != std::string::npos && line.compare(slash, std::string::npos, canonical_path) == 0)
      return true;
  }
  return false;
}

// Options for a runtime that loads the plugins of `dir` (quietly), next to the
// static CpuRef (with_dir) or alone (dynamic_only).
inline RuntimeOptions with_dir(const std::string& dir) {
  RuntimeOptions o;
  o.backend_path = dir;
  o.log_level = LogLevel::kOff;
  return o;
}
inline RuntimeOptions dynamic_only(const std::string& dir) {
  RuntimeOptions o = with_dir(dir);
  o.disabled_static_backends = {"CpuRef"};
  return o;
}

// Runs `model` (a write_relu_model chain: input "x" of `shape`, one output)
// on values of both signs, zero and tiny ones, and checks y == relu(x).
inline void expect_relu_runs(Model& model, const Dims& shape) {
  static constexpr float kValues[] = {-2.0f, -0.5f, 0.0f, 0.25f, 1.5f, -7.0f, 3.25f, -0.0001f};
  auto session = model.create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Tensor x(DType::kFloat32, shape);
  float* in = x.data_as<float>();
  for (int64_t i = 0; i < x.numel(); ++i) in[i] = kValues[i % 8];
  ASSERT_TRUE((*session)->set_input("x", x).ok());
  Status s = (*session)->run();
  ASSERT_TRUE(s.ok()) << s.message();
  const Tensor& y = (*session)->output(0);
  ASSERT_EQ(y.numel(), x.numel());
  for (int64_t i = 0; i < x.numel(); ++i)
    EXPECT_EQ(y.data_as<float>()[i], in[i] > 0 ? in[i] : 0.0f) << i;
}

}  // namespace backplane::test
