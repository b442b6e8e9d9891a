// status.hpp — Status and Result<T>: how fallible calls report failure in Backplane.
//
// No exceptions cross Backplane's API: every fallible call returns Status or
// Result<T>. A Status carries a code and a message; context is added on the
// way up (with_context / BP_RETURN_IF_ERROR), so the final message says what
// failed, where, and with what input.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace backplane {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something wrong (bad name, shape, option)
  kNotFound,         // a file, model input, backend or key does not exist
  kUnsupported,      // valid but not supported (an op, a dtype, a feature)
  kCorruptData,      // a file is truncated, malformed or fails its checksum
  kIoError,          // the operating system refused (open, read, mmap)
  kVersionMismatch,  // incompatible versions (ABI, format, opset)
  kOutOfMemory,
  kBackendError,     // a backend reported a failure
  kInternal,         // a bug in Backplane
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prepends "context: " to the message of a failed status; no-op on success.
  Status& with_context(const std::string& context) & {
    if (!ok()) message_ = context + ": " + message_;
    return *this;
  }
  Status&& with_context(const std::string& context) && { return std::move(with_context(context)); }
  Status& with_context() & { return *this; }
  Status&& with_context() && { return std::move(*this); }

  // "code: message", for logs.
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status corrupt_data(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a failed Status.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).ok()); }  // NOLINT

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status take_status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::move(std::get<T>(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  Result& with_context(const std::string& context) & {
    if (!ok()) std::get<Status>(v_).with_context(context);
    return *this;
  }
  Result&& with_context(const std::string& context) && { return std::move(with_context(context)); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace backplane

#define BP_CONCAT_INNER_(a, b) a##b
#define BP_CONCAT_(a, b) BP_CONCAT_INNER_(a, b)

// Returns the status of `expr` if it failed, with optional context prepended.
#define BP_RETURN_IF_ERROR(expr, ...)                                          \
  do {                                                                         \
    ::backplane::Status bp_status_ = (expr);                                   \
    if (!bp_status_.ok()) return std::move(bp_status_.with_context(__VA_ARGS__)); \
  } while (0)

// `lhs = value of expr` or return its status with optional context.
#define BP_ASSIGN_OR_RETURN(lhs, expr, ...) \
  BP_ASSIGN_OR_RETURN_IMPL_(BP_CONCAT_(bp_result_, __LINE__), lhs, expr, __VA_ARGS__)
#define BP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, ...)                        \
  auto tmp = (expr);                                                          \
  if (!tmp.ok()) return std::move(std::move(tmp).take_status().with_context(__VA_ARGS__)); \
  lhs = std::move(tmp).value()
