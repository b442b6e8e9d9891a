#include <backplane/status.hpp>

namespace backplane {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kUnsupported: return "unsupported";
    case StatusCode::kCorruptData: return "corrupt data";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kVersionMismatch: return "version mismatch";
    case StatusCode::kOutOfMemory: return "out of memory";
    case StatusCode::kBackendError: return "backend error";
    case StatusCode::kInternal: return "internal error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

}  // namespace backplane
