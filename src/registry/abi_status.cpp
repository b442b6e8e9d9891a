#include "registry/abi_status.hpp"

#include <cstdlib>

namespace backplane {
namespace {

// The C and C++ status lists are one list: the conversions below are casts.
// `listed` names every C code once; with -Wswitch an error here, a code
// appended to backend_abi.h but not handled fails the build, and the
// static_assert fails if any C++ value differs from the C value of the same
// name or if StatusCode has codes the C list lacks.
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"
constexpr StatusCode listed(bp_status_code_t code) {
  switch (code) {
    case BP_STATUS_OK:
      return StatusCode::kOk;
    case BP_STATUS_INVALID_ARGUMENT:
      return StatusCode::kInvalidArgument;
    case BP_STATUS_UNSUPPORTED:
      return StatusCode::kUnsupported;
    case BP_STATUS_UNIMPLEMENTED:
      return StatusCode::kUnimplemented;
    case BP_STATUS_OUT_OF_MEMORY:
      return StatusCode::kOutOfMemory;
    case BP_STATUS_NOT_FOUND:
      return StatusCode::kNotFound;
    case BP_STATUS_CORRUPT_DATA:
      return StatusCode::kCorruptData;
    case BP_STATUS_VERSION_MISMATCH:
      return StatusCode::kVersionMismatch;
    case BP_STATUS_DEVICE_ERROR:
      return StatusCode::kDeviceError;
    case BP_STATUS_INTERNAL:
      return StatusCode::kInternal;
    case BP_STATUS_IO_ERROR:
      return StatusCode::kIoError;
    case BP_STATUS_BACKEND_ERROR:
      return StatusCode::kBackendError;
    case BP_STATUS_FORCE_INT32_:
      break;
  }
  return static_cast<StatusCode>(-1);
}
#pragma GCC diagnostic pop

constexpr bool lists_agree() {
  for (int32_t n = 0; n <= static_cast<int32_t>(kLastStatusCode) + 1; ++n) {
    bool in_cpp = n <= static_cast<int32_t>(kLastStatusCode);
    StatusCode c = listed(static_cast<bp_status_code_t>(n));
    if (in_cpp ? c != static_cast<StatusCode>(n) : c != static_cast<StatusCode>(-1)) return false;
  }
  return true;
}
static_assert(
    lists_agree(),
    "backplane::StatusCode and bp_status_code_t must hold the same codes with the same numbers");

}  // namespace

bp_status_t* make_abi_status(bp_status_code_t code, const char* message) {
  try {
    return new bp_status{code, message != nullptr ? message : ""};
  } catch (...) {
    // Out of memory while reporting an error: a static status would be
    // released by the receiver, so the best we can do is abort loudly.
    std::abort();
  }
}

bool is_known_status_code(bp_status_code_t code) {
  auto n = static_cast<int32_t>(code);
  return n >= 0 && n <= static_cast<int32_t>(kLastStatusCode);
}

StatusCode code_from_abi(bp_status_code_t code) {
  return is_known_status_code(code) ? static_cast<StatusCode>(code) : StatusCode::kBackendError;
}

bp_status_code_t code_to_abi(StatusCode code) { return static_cast<bp_status_code_t>(code); }

Status from_abi_status(bp_status_t* status, const std::string& context) {
  if (status == nullptr) return ok_status();
  Status s;
  if (status->code == BP_STATUS_OK) {
    // NULL is success; an object claiming "ok" is a broken backend, and the
    // call's outputs cannot be trusted.
    s = Status(StatusCode::kBackendError,
               "returned a failure status with code 0 (BP_STATUS_OK): " + status->message);
  } else if (!is_known_status_code(status->code)) {
    s = Status(StatusCode::kBackendError, "returned status code " +
                                              std::to_string(static_cast<int32_t>(status->code)) +
                                              ", unknown to this runtime: " + status->message);
  } else {
    s = Status(code_from_abi(status->code), status->message);
  }
  delete status;
  return std::move(s.with_context(context));
}

}  // namespace backplane
