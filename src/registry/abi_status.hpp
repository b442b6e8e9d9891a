// abi_status.hpp — the ABI's opaque status object (bp_status_t) and its
// conversion into the runtime's Status.
//
// A bp_status_t is created by the host table's status_create (for the
// backend) and owned by whoever receives it; from_abi_status consumes it.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>

#include <string>

// The opaque status object of the ABI.
struct bp_status {
  bp_status_code_t code;
  std::string message;
};

namespace backplane {

// A new status owned by the caller (it is released by from_abi_status or
// the host table's status_release). Aborts if it cannot be allocated.
bp_status_t* make_abi_status(bp_status_code_t code, const char* message);

// Converts a status returned by a backend into a Status and releases it.
// `context` is prepended, e.g. "backend 'CpuRef': compile". NULL is OK; a
// status with code BP_STATUS_OK or a code this runtime does not know becomes
// kBackendError, its message naming the number.
Status from_abi_status(bp_status_t* status, const std::string& context);

// The C and C++ codes are one list with the same numbers (status.hpp), so
// these are casts. code_from_abi maps a code outside the list to kBackendError.
bool is_known_status_code(bp_status_code_t code);
StatusCode code_from_abi(bp_status_code_t code);
bp_status_code_t code_to_abi(StatusCode code);

}  // namespace backplane
