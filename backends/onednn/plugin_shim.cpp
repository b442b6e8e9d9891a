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
// this shim, which depends on nothing but libc and the header-only SDK
// (for the backend's identity, shared with backend.cpp): BackendFactory() sets
// GOMP_SPINCOUNT unless the user chose OMP_WAIT_POLICY or GOMP_SPINCOUNT,
// and only then loads the implementation (backend.cpp + compiler.cpp,
// linked with oneDNN) from ../onednn/libBackplane_CpuOneDnn_impl.so relative
// to this file. A process that loaded libgomp earlier keeps its policy.
#include "onednn/identity.hpp"

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
  if (dladdr(reinterpret_cast<void*>(&load_implementation), &info) == 0 ||
      info.dli_fname == nullptr)
    return nullptr;
  std::string dir = info.dli_fname;
  dir = dir.substr(0, dir.rfind('/') + 1);
  // Kept loaded for the life of the process: the host may hold the table.
  void* handle =
      dlopen((dir + "../onednn/libBackplane_CpuOneDnn_impl.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return nullptr;
  auto table = reinterpret_cast<TableFn>(dlsym(handle, "bp_cpuonednn_backend_table"));
  return table != nullptr ? table() : nullptr;
}

// Loads the implementation once; its table, or NULL.
const bp_backend_api_t* implementation_table() {
  static const bp_backend_api_t* table = load_implementation();
  return table;
}

}  // namespace

// GetBackendId, GetVersion and GetBackendScore from onednn::kIdentity;
// BackendFactory returns implementation_table().
BP_DEFINE_BACKEND_ENTRY_POINTS_FOR(backplane::onednn::kIdentity, implementation_table)
