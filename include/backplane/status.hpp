// status.hpp — Status and Result<T>: how fallible calls report failure in Backplane.
//
// No exceptions cross Backplane's API: every fallible call returns Status or
// Result<T>. A Status carries a code and a message; context is added on the
// way up (with_context / BP_RETURN_IF_ERROR), so the final message says what
// failed, where, and with what input.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace backplane {

// The one list of status codes, shared with the backend ABI: each value equals
// the bp_status_code_t of the same meaning in backend_abi.h (BP_STATUS_<NAME>),
// so converting between them is a cast (static_asserts next to the conversion,
// src/registry/abi_status.cpp, keep the two lists equal). Codes are append-only:
// an existing number never changes meaning. A code received from a backend
// that this list does not know becomes kBackendError naming the number.
enum class StatusCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something wrong (bad name, shape, option)
  kUnsupported = 2,      // valid but not supported here (an op, a dtype, a feature)
  kUnimplemented = 3,    // the slot or feature exists in the interface but is not implemented
  kOutOfMemory = 4,
  kNotFound = 5,         // a file, model input, backend or key does not exist
  kCorruptData = 6,      // a file or payload is truncated, malformed or fails its checksum
  kVersionMismatch = 7,  // incompatible versions (ABI, format, opset, payload)
  kDeviceError = 8,      // a device or its driver failed
  kInternal = 9,         // a bug (in Backplane, or in the backend the message names)
  kIoError = 10,         // the operating system refused (open, read, mmap)
  kBackendError = 11,    // a backend failed or broke the ABI contract (threw, crashed,
                         // timed out, returned an unknown code)
};

// The highest code this build knows; every value in [kOk, kLastStatusCode] is a code.
inline constexpr StatusCode kLastStatusCode = StatusCode::kBackendError;

// "invalid argument", "not found", ...; "unknown" for a value outside the list.
const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

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

namespace detail {
// What ok_status() returns: a Status whose distinct type lets Result<T> refuse
// `return ok_status();` at compile time (see Result below).
struct OkStatus : Status {};

// Where a call was written: the default arguments are evaluated at the call
// site, like std::source_location::current(), which the builtins stand in for
// because clang before 15 cannot compile libstdc++'s <source_location>.
struct CallSite {
  const char* file;
  int line;
  const char* function;
  static constexpr CallSite here(const char* file = __builtin_FILE(), int line = __builtin_LINE(),
                                 const char* function = __builtin_FUNCTION()) {
    return {file, line, function};
  }
};

// Result<T>'s checked accessors call this on an error: prints the status to
// stderr and aborts (see Result).
[[noreturn]] void result_error_access(const Status& status);

// The status a Result built from an OK status carries instead.
Status ok_status_in_result(const CallSite& where);
}  // namespace detail

inline detail::OkStatus ok_status() { return {}; }
inline Status invalid_argument(std::string m) {
  return {StatusCode::kInvalidArgument, std::move(m)};
}
inline Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
inline Status corrupt_data(std::string m) { return {StatusCode::kCorruptData, std::move(m)}; }
inline Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
inline Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

// Either a value or a failed Status.
//
// - A Result is never "OK without a value": built from an OK Status (a
//   `return Status();` in a function returning Result<T>), it holds a
//   kInternal error naming the file and line that did it, in every build type.
//   `return ok_status();` there does not compile.
// - value(), operator* and operator-> are checked: on an error they print the
//   status to stderr and abort the process (as ExecuTorch's Result does),
//   because reading a value that is not there is a bug in the caller, not a
//   failure to report. Check ok() first, or use value_or().
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status,                      // NOLINT: implicit by design
         detail::CallSite where = detail::CallSite::here())
      : v_(status.ok() ? detail::ok_status_in_result(where) : std::move(status)) {}
  // `return ok_status();` in a function returning Result<T> is always a bug:
  // a Result holds a value or an error. Return the value.
  Result(detail::OkStatus) = delete;

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error, or an OK status if there is a value.
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }
  Status take_status() && { return ok() ? Status() : std::move(std::get<Status>(v_)); }

  // The value; aborts with the status message if there is none.
  T& value() & { return *checked(); }
  const T& value() const& { return *checked(); }
  T&& value() && { return std::move(*checked()); }
  T* operator->() { return checked(); }
  const T* operator->() const { return checked(); }
  T& operator*() & { return *checked(); }
  const T& operator*() const& { return *checked(); }
  T&& operator*() && { return std::move(*checked()); }

  // The value, or `fallback` on an error.
  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? *std::get_if<T>(&v_) : static_cast<T>(std::forward<U>(fallback));
  }
  template <class U>
  T value_or(U&& fallback) && {
    return ok() ? std::move(*std::get_if<T>(&v_)) : static_cast<T>(std::forward<U>(fallback));
  }

  Result& with_context(const std::string& context) & {
    if (!ok()) std::get<Status>(v_).with_context(context);
    return *this;
  }
  Result&& with_context(const std::string& context) && { return std::move(with_context(context)); }

 private:
  T* checked() {
    if (T* v = std::get_if<T>(&v_)) return v;
    detail::result_error_access(*std::get_if<Status>(&v_));
  }
  const T* checked() const {
    if (const T* v = std::get_if<T>(&v_)) return v;
    detail::result_error_access(*std::get_if<Status>(&v_));
  }

  std::variant<T, Status> v_;
};

}  // namespace backplane

#define BP_CONCAT_INNER_(a, b) a##b
#define BP_CONCAT_(a, b) BP_CONCAT_INNER_(a, b)

// Returns the status of `expr` if it failed, with optional context prepended.
#define BP_RETURN_IF_ERROR(expr, ...)                                             \
  do {                                                                            \
    ::backplane::Status bp_status_ = (expr);                                      \
    if (!bp_status_.ok()) return std::move(bp_status_.with_context(__VA_ARGS__)); \
  } while (0)

// `lhs = value of expr` or return its status with optional context.
#define BP_ASSIGN_OR_RETURN(lhs, expr, ...) \
  BP_ASSIGN_OR_RETURN_IMPL_(BP_CONCAT_(bp_result_, __LINE__), lhs, expr, __VA_ARGS__)
#define BP_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr, ...)                                     \
  auto tmp = (expr);                                                                       \
  if (!tmp.ok()) return std::move(std::move(tmp).take_status().with_context(__VA_ARGS__)); \
  lhs = std::move(tmp).value()
