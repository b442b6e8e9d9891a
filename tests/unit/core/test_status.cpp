// Status, Result<T> and the one status-code list shared with the backend ABI:
// a Result is never "OK without a value", its accessors are checked, and a
// code crosses the ABI in either direction without changing.
#include "core/named_data_map.hpp"
#include "registry/abi_status.hpp"
#include "registry/host_api.hpp"

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <type_traits>

namespace backplane {
namespace {

// `return ok_status();` in a function returning Result<T> must not compile.
static_assert(!std::is_convertible_v<detail::OkStatus, Result<int>>);
static_assert(!std::is_constructible_v<Result<int>, detail::OkStatus>);
// A failed Status and a value still convert implicitly.
static_assert(std::is_convertible_v<Status, Result<int>>);
static_assert(std::is_convertible_v<int, Result<int>>);

int g_ok_return_line = 0;

// The bug the guard is for: success reported as a Status where a value was due.
Result<int> forgets_the_value(const Status& outcome) {
  g_ok_return_line = __LINE__ + 1;
  if (outcome.ok()) return Status();
  return outcome;
}

Result<std::string> parse(const std::string& text) {
  if (text.empty()) return invalid_argument("empty text");
  return "parsed " + text;
}

Status parse_twice(const std::string& text, std::string* out) {
  BP_ASSIGN_OR_RETURN(std::string once, parse(text), "first parse");
  BP_ASSIGN_OR_RETURN(*out, parse(once), "second parse");
  return ok_status();
}

TEST(Result, BuiltFromOkStatusIsAnInternalErrorNamingTheSite) {
  Result<int> r = forgets_the_value(Status());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("bug"), std::string::npos) << m;
  EXPECT_NE(m.find("test_status.cpp:" + std::to_string(g_ok_return_line)), std::string::npos) << m;
  EXPECT_NE(m.find("forgets_the_value"), std::string::npos) << m;

  // Built directly, too, and it stays an error through with_context.
  Result<std::string> direct{Status(StatusCode::kOk, "fine")};
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), StatusCode::kInternal);
  direct.with_context("loading");
  EXPECT_EQ(direct.status().message().rfind("loading: bug", 0), 0u) << direct.status().message();

  // A failed status passes through untouched.
  Result<int> failed = forgets_the_value(not_found("no weight 'w'"));
  EXPECT_EQ(failed.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(failed.status().message(), "no weight 'w'");
}

TEST(Result, AccessorsAndValueOr) {
  Result<std::string> good = parse("x");
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(good.value(), "parsed x");
  EXPECT_EQ(*good, "parsed x");
  EXPECT_EQ(good->size(), 8u);
  EXPECT_EQ(good.value_or("fallback"), "parsed x");

  Result<std::string> bad = parse("");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.value_or("fallback"), "fallback");
  EXPECT_EQ(bad.status().to_string(), "invalid argument: empty text");

  // Move-only values: value_or on an rvalue moves the value out.
  Result<std::unique_ptr<int>> owned = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(owned).value_or(nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
  Result<std::unique_ptr<int>> none = Status(StatusCode::kOutOfMemory, "no room");
  EXPECT_EQ(std::move(none).value_or(nullptr), nullptr);

  std::string out;
  EXPECT_TRUE(parse_twice("y", &out).ok());
  EXPECT_EQ(out, "parsed parsed y");
  Status s = parse_twice("", &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "first parse: empty text");
}

TEST(ResultDeathTest, CheckedAccessorsAbortWithTheStatus) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Result<std::string> bad = Status(StatusCode::kNotFound, "model 'm.onnx' has no input 'x'");
  const auto& cbad = bad;
  const char* expected =
      "value\\(\\) called on an error.*not found: model 'm.onnx' has no input 'x'";
  EXPECT_DEATH((void)bad.value(), expected);
  EXPECT_DEATH((void)cbad.value(), expected);
  EXPECT_DEATH((void)*bad, expected);
  EXPECT_DEATH((void)bad->size(), expected);
  EXPECT_DEATH((void)std::move(bad).value(), expected);
}

TEST(StatusCodes, EveryCodeIsTheSameNumberOnBothSides) {
  EXPECT_EQ(static_cast<int>(kLastStatusCode), static_cast<int>(BP_STATUS_BACKEND_ERROR));
  for (int n = 0; n <= static_cast<int>(kLastStatusCode); ++n) {
    auto cpp = static_cast<StatusCode>(n);
    auto c = static_cast<bp_status_code_t>(n);
    EXPECT_TRUE(is_known_status_code(c)) << n;
    EXPECT_EQ(code_from_abi(c), cpp) << n;
    EXPECT_EQ(code_to_abi(cpp), c) << n;
    EXPECT_EQ(code_from_abi(code_to_abi(cpp)), cpp) << n;
    EXPECT_STRNE(status_code_name(cpp), "unknown") << n;
  }
  EXPECT_STREQ(status_code_name(static_cast<StatusCode>(static_cast<int>(kLastStatusCode) + 1)),
               "unknown");
  // The pairs that used to be mapped lossily.
  EXPECT_EQ(code_from_abi(BP_STATUS_UNIMPLEMENTED), StatusCode::kUnimplemented);
  EXPECT_EQ(code_from_abi(BP_STATUS_DEVICE_ERROR), StatusCode::kDeviceError);
  EXPECT_EQ(code_from_abi(BP_STATUS_INTERNAL), StatusCode::kInternal);
  EXPECT_EQ(code_to_abi(StatusCode::kIoError), BP_STATUS_IO_ERROR);
  EXPECT_EQ(code_to_abi(StatusCode::kBackendError), BP_STATUS_BACKEND_ERROR);
}

TEST(StatusCodes, BackendStatusKeepsItsCodeAndGainsContext) {
  const bp_host_api_t* host = host_api();
  for (int n = 1; n <= static_cast<int>(kLastStatusCode); ++n) {
    bp_status_t* st = host->status_create(static_cast<bp_status_code_t>(n), "what went wrong");
    ASSERT_EQ(static_cast<int>(host->status_code(st)), n);
    Status s = from_abi_status(st, "backend 'X': compile");
    EXPECT_EQ(s.code(), static_cast<StatusCode>(n)) << n;
    EXPECT_EQ(s.message(), "backend 'X': compile: what went wrong") << n;
  }
  EXPECT_TRUE(from_abi_status(nullptr, "backend 'X': compile").ok());
}

TEST(StatusCodes, UnknownCodeFromABackendIsABackendErrorNamingTheNumber) {
  const bp_host_api_t* host = host_api();
  for (int n : {static_cast<int>(kLastStatusCode) + 1, 42, 0x7FFFFFFF}) {
    auto code = static_cast<bp_status_code_t>(n);
    EXPECT_FALSE(is_known_status_code(code)) << n;
    EXPECT_EQ(code_from_abi(code), StatusCode::kBackendError) << n;
    bp_status_t* st = host->status_create(code, "from the future");
    ASSERT_EQ(static_cast<int>(host->status_code(st)), n);  // the host keeps what it was given
    Status s = from_abi_status(st, "backend 'X': execute");
    EXPECT_EQ(s.code(), StatusCode::kBackendError) << n;
    EXPECT_EQ(s.message(), "backend 'X': execute: returned status code " + std::to_string(n) +
                               ", unknown to this runtime: from the future");
  }
  // A status object that claims success is a failure too: success is NULL.
  Status s =
      from_abi_status(host->status_create(BP_STATUS_OK, "all good?"), "backend 'X': compile");
  EXPECT_EQ(s.code(), StatusCode::kBackendError);
  EXPECT_NE(s.message().find("BP_STATUS_OK"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("all good?"), std::string::npos) << s.message();
}

// A weight map whose every lookup fails with a given status.
class FailingMap : public NamedDataMap {
 public:
  explicit FailingMap(Status failure) : failure_(std::move(failure)) {}
  Status get(const std::string&, const void**, size_t*) const override { return failure_; }
  size_t num_keys() const override { return 0; }
  const std::string* key_at(size_t) const override { return nullptr; }

 private:
  Status failure_;
};

TEST(StatusCodes, HostPassesDataMapErrorsToTheBackendUnchanged) {
  const bp_host_api_t* host = host_api();
  for (Status failure :
       {io_error("weights.bpd: read failed"), corrupt_data("blob 'w': checksum mismatch"),
        not_found("no weight named 'w'")}) {
    FailingMap map(failure);
    bp_buffer_t buffer{};
    bp_status_t* st = host->data_map_get(map.as_abi(), "w", &buffer);
    ASSERT_NE(st, nullptr);
    EXPECT_EQ(host->status_code(st), code_to_abi(failure.code())) << failure.to_string();
    EXPECT_EQ(std::string(host->status_message(st)), failure.message());
    // And back: a backend that passes the host's status up keeps the code.
    Status back = from_abi_status(st, "backend 'X': compile");
    EXPECT_EQ(back.code(), failure.code());
  }
}

}  // namespace
}  // namespace backplane
