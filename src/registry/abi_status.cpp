#include "registry/abi_status.hpp"

#include <cstdlib>

namespace backplane {

bp_status_t* make_abi_status(bp_status_code_t code, const char* message) {
  try {
    return new bp_status{code, message != nullptr ? message : ""};
  } catch (...) {
    // Out of memory while reporting an error: a static status would be
    // released by the receiver, so the best we can do is abort loudly.
    std::abort();
  }
}

StatusCode code_from_abi(bp_status_code_t code) {
  switch (code) {
    case BP_STATUS_OK: return StatusCode::kOk;
    case BP_STATUS_INVALID_ARGUMENT: return StatusCode::kInvalidArgument;
    case BP_STATUS_UNSUPPORTED: return StatusCode::kUnsupported;
    case BP_STATUS_UNIMPLEMENTED: return StatusCode::kUnsupported;
    case BP_STATUS_OUT_OF_MEMORY: return StatusCode::kOutOfMemory;
    case BP_STATUS_NOT_FOUND: return StatusCode::kNotFound;
    case BP_STATUS_CORRUPT_DATA: return StatusCode::kCorruptData;
    case BP_STATUS_VERSION_MISMATCH: return StatusCode::kVersionMismatch;
    case BP_STATUS_DEVICE_ERROR: return StatusCode::kBackendError;
    case BP_STATUS_INTERNAL: return StatusCode::kBackendError;
  }
  return StatusCode::kBackendError;
}

Status from_abi_status(bp_status_t* status, const std::string& context) {
  if (status == nullptr) return ok_status();
  Status s(code_from_abi(status->code), status->message);
  delete status;
  return std::move(s.with_context(context));
}

}  // namespace backplane
