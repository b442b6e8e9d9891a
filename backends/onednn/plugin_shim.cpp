// plugin_shim.cpp — the loadable CpuOneDnn (Backplane_CpuOneDnn_backend.so).
//
// oneDNN here runs on OpenMP (libgomp), which reads its wait policy once,
// when it is loaded. Its default (spin ~300k iterations before sleeping)
// makes 2-thread inference several times slower whenever the machine runs
// anything else, because a spinning thread holds the core its lagging
// partner needs; a purely passive policy (sleep at once) is as bad the other
// way: after an idle gap every parallel region pays a wake-up, and resnet18
// at 2 threads falls back to 1-thread speed. A short bounded spin
// (GOMP_SPINCOUNT=20000, tens of microseconds) keeps both. So the plugin is
// this shim, which depends on nothing but libc: BackendFactory() sets
// GOMP_SPINCOUNT unless the user chose OMP_WAIT_POLICY or GOMP_SPINCOUNT,
// and only then loads the implementation (backend.cpp + compiler.cpp,
// linked with oneDNN) from ../onednn/libBackplane_CpuOneDnn_impl.so relative
// to this file. A process that loaded libgomp earlier keeps its policy.
#include <backplane/backend_abi.h>

#include <dlfcn.h>

#include <cstdlib>
#include <string>

namespace {

using TableFn = const bp_backend_api_t* (*)();

const bp_backend_api_t* load_implementation() {
  if (std::getenv("OMP_WAIT_POLICY") == nullptr && std::getenv("GOMP_SPINCOUNT") == nullptr)
    setenv("GOMP_SPINCOUNT", "20000", /*overwrite=*/0);
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&load_implementation), &info) == 0 || info.dli_fname == nullptr) return nullptr;
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  // Kept loaded for the life of the process: the host may hold the table.
  void* handle = dlopen((dir + "../onednn/libBackplane_CpuOneDnn_impl.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  auto table = reinterpret_cast<TableFn>(dlsym(handle, "bp_cpuonednn_backend_table"));
  return table != nullptr ? table() : nullptr;
}

}  // namespace

extern "C" BP_EXPORT const char* GetBackendId(void) { return "CpuOneDnn"; }

extern "C" BP_EXPORT void GetVersion(uint32_t* outMajor, uint32_t* outMinor) {
  *outMajor = BP_API_VERSION_MAJOR;
  *outMinor = BP_API_VERSION_MINOR;
}

extern "C" BP_EXPORT void* BackendFactory(void) {
  try {
    static const bp_backend_api_t* table = load_implementation();
    return const_cast<bp_backend_api_t*>(table);
  } catch (...) {
    return nullptr;
  }
}

// oneDNN needs SSE4.1; on anything older this backend is skipped quietly.
extern "C" BP_EXPORT uint32_t GetBackendScore(void) { return __builtin_cpu_supports("sse4.1") ? 100u : 0u; }
