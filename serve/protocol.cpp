#include "protocol.hpp"

#include <array>
#include <utility>

namespace backplane::serve {

Error error(Code code, std::string message) { return Error{code, std::move(message)}; }

int http_status(Code code) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kInvalidArgument: return 400;
    case Code::kNotFound: return 404;
    case Code::kUnavailable: return 503;
    case Code::kResourceExhausted: return 429;
    case Code::kTooLarge: return 413;
    case Code::kDeadlineExceeded: return 504;
    case Code::kCancelled: return 499;
    case Code::kInternal: return 500;
  }
  return 500;
}

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotFound: return "not found";
    case Code::kUnavailable: return "unavailable";
    case Code::kResourceExhausted: return "resource exhausted";
    case Code::kTooLarge: return "request too large";
    case Code::kDeadlineExceeded: return "deadline exceeded";
    case Code::kCancelled: return "cancelled";
    case Code::kInternal: return "internal";
  }
  return "unknown";
}

Error apply_timeout(int64_t timeout_us, InferRequest& request) {
  if (timeout_us <= 0)
    return error(Code::kInvalidArgument, "parameter \"timeout\" must be > 0 (microseconds)");
  // Further off than a year is no deadline, and would overflow the clock.
  if (timeout_us >= int64_t{365} * 24 * 3600 * 1000000) return ok();
  const auto by_timeout =
      std::chrono::steady_clock::now() + std::chrono::microseconds(timeout_us);
  if (!request.deadline || by_timeout < *request.deadline) request.deadline = by_timeout;
  return ok();
}

namespace {
constexpr std::array<std::pair<DType, std::string_view>, 13> kDatatypes{{
    {DType::kBool, "BOOL"},
    {DType::kUInt8, "UINT8"},
    {DType::kUInt16, "UINT16"},
    {DType::kUInt32, "UINT32"},
    {DType::kUInt64, "UINT64"},
    {DType::kInt8, "INT8"},
    {DType::kInt16, "INT16"},
    {DType::kInt32, "INT32"},
    {DType::kInt64, "INT64"},
    {DType::kFloat16, "FP16"},
    {DType::kFloat32, "FP32"},
    {DType::kFloat64, "FP64"},
    {DType::kBFloat16, "BF16"},  // Triton's extension of the protocol's list
}};
}  // namespace

std::string_view datatype_name(DType dtype) {
  for (const auto& [d, name] : kDatatypes)
    if (d == dtype) return name;
  return {};
}

bool dtype_from_datatype(std::string_view datatype, DType* out) {
  for (const auto& [d, name] : kDatatypes)
    if (name == datatype) {
      *out = d;
      return true;
    }
  return false;
}

}  // namespace backplane::serve
