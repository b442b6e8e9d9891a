// abi_trace.hpp — `--log-level trace` for the backend ABI: every call into a
// backend's function table logged on entry and on return, with the backend id
// and the slot, so that the last line before a crash names the slot it
// happened in.
//
// A traced table is a copy of the backend's table whose filled slots are
// trampolines: each logs "abi call <id>.<slot>", calls the backend's slot and
// logs "abi return <id>.<slot>: ok" (or the status code and message). Slots
// the backend left NULL stay NULL, slots of minors newer than this file stay
// the backend's own (called untraced), and struct_size and the version are
// the backend's, so the host sees the same table.
//
// Thread-safety: acquire and release may be called from any thread; a traced
// table may be called from any thread while it is held.
#pragma once

#include <backplane/backend_abi.h>

#include <string>

namespace backplane {

// A traced copy of `api` for the backend `id`, held until
// release_traced_table; `api` itself (untraced) when every traced table is
// in use (a fixed number: tracing is for debugging, not for a runtime with
// hundreds of backend instances). `api` must outlive the traced table.
const bp_backend_api_t* acquire_traced_table(const bp_backend_api_t* api, const std::string& id);

// Gives back a table acquire_traced_table returned (any other table, NULL
// included, is ignored). No slot of it may be running or called again.
void release_traced_table(const bp_backend_api_t* table);

}  // namespace backplane
