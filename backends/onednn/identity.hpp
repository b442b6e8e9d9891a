// identity.hpp — who CpuOneDnn is: id, vendor, API version and score, in one
// place for both the implementation (backend.cpp) and the loadable shim
// (plugin_shim.cpp), which must agree on them.
#pragma once

#include <backplane/backend_sdk.hpp>

namespace backplane::onednn {

// oneDNN needs SSE4.1; on anything older this backend is skipped quietly.
inline uint32_t backend_score() { return __builtin_cpu_supports("sse4.1") ? 100u : 0u; }

inline constexpr sdk::BackendIdentity kIdentity{"CpuOneDnn", "Backplane", &backend_score};

}  // namespace backplane::onednn
