// plugin_shim.cpp — the loadable CpuOneDnn (Backplane_CpuOneDnn_backend.so).
//
// The module depends on nothing but libc and the header-only SDK (for the
// backend's identity, shared with backend.cpp) and loads the implementation
// (backend.cpp + compiler.cpp, linked with oneDNN) from
// ../onednn/libBackplane_CpuOneDnn_impl.so relative to this file. It sets
// nothing in the process: OpenMP's wait policy is the application's
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT; docs/performance.md, "Other settings").
#include "onednn/identity.hpp"

#include <backplane/backend_abi.h>

#include <dlfcn.h>

#include <string>

namespace {

using TableFn = const bp_backend_api_t* (*)();

const bp_backend_api_t* load_implementation() {
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
