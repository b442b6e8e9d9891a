// gpuocl_counter.hpp — GpuOcl's own counters (GpuOcl_Counter, exported for
// the tests) read from the module the runtime holds open.
#pragma once

#include <dlfcn.h>

#include <cstdint>

namespace backplane::e2e {

// The counter `name` ("live_buffers", ...) of the loaded GpuOcl module;
// -100 when the module is not loaded, -200 when it has no counters.
inline int64_t counter(const char* name) {
  void* h = dlopen(BACKPLANE_GPUOCL_BACKEND_FILE, RTLD_NOW | RTLD_NOLOAD);
  if (h == nullptr) return -100;
  auto fn = reinterpret_cast<int64_t (*)(const char*)>(dlsym(h, "GpuOcl_Counter"));
  const int64_t v = fn != nullptr ? fn(name) : -200;
  dlclose(h);
  return v;
}

}  // namespace backplane::e2e
