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
// `context` is prepended, e.g. "backend 'CpuRef': compile".
Status from_abi_status(bp_status_t* status, const std::string& context);

StatusCode code_from_abi(bp_status_code_t code);

}  // namespace backplane
