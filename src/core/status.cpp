#include <backplane/status.hpp>

#include <cstdio>
#include <cstdlib>

namespace backplane {

const char* status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kUnsupported:
      return "unsupported";
    case StatusCode::kUnimplemented:
      return "unimplemented";
    case StatusCode::kOutOfMemory:
      return "out of memory";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kCorruptData:
      return "corrupt data";
    case StatusCode::kVersionMismatch:
      return "version mismatch";
    case StatusCode::kDeviceError:
      return "device error";
    case StatusCode::kInternal:
      return "internal error";
    case StatusCode::kIoError:
      return "i/o error";
    case StatusCode::kBackendError:
      return "backend error";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(status_code_name(code_)) + ": " + message_;
}

namespace detail {

void result_error_access(const Status& status) {
  // No exception (none crosses Backplane's API) and no way to return: the
  // caller asked for a value that is not there. Say what the error was, so the
  // crash report carries the real failure, then stop.
  std::fprintf(stderr, "backplane: Result::value() called on an error (check ok() first): %s\n",
               status.to_string().c_str());
  std::fflush(stderr);
  std::abort();
}

Status ok_status_in_result(const CallSite& where) {
  return internal_error(std::string("bug: a Result was built from an OK status at ") + where.file +
                        ":" + std::to_string(where.line) + " (in " + where.function +
                        "); a function returning Result<T> must return a value or an error");
}

}  // namespace detail
}  // namespace backplane
