// protocol.hpp — the Open Inference Protocol (KServe V2) as the server's
// front ends share it: errors, datatypes, and one inference request and
// response independent of how they travelled (REST JSON, REST with binary
// tensor data, gRPC).
//
// The server is a layer over the public C++ API (<backplane/runtime.hpp>);
// nothing here reaches into the runtime's own layers.
#pragma once

#include <backplane/tensor.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace backplane::serve {

// What went wrong with a request, in the terms both transports have.
enum class Code {
  kOk,
  kInvalidArgument,    // 400 / INVALID_ARGUMENT: the request is wrong
  kNotFound,           // 404 / NOT_FOUND: no such model or version
  kUnavailable,        // 503 / UNAVAILABLE: the model is not ready (loading, unloading)
  kResourceExhausted,  // 429 / RESOURCE_EXHAUSTED: the model's queue is full
  kTooLarge,           // 413 / RESOURCE_EXHAUSTED: the body is over the configured limit
  kDeadlineExceeded,   // 504 / DEADLINE_EXCEEDED: the request's deadline passed before it ran
  kCancelled,          // 499 / CANCELLED: the client went away
  kInternal,           // 500 / INTERNAL: the model failed to run
};

struct Error {
  Code code = Code::kOk;
  std::string message;
  bool ok() const { return code == Code::kOk; }
};
inline Error ok() { return {}; }
Error error(Code code, std::string message);

int http_status(Code code);
const char* code_name(Code code);  // "invalid argument", ...

// The protocol's datatype names ("FP32", "INT64", "BOOL", "BF16", ...) for
// Backplane's dtypes; "" for one the protocol has no name for. BYTES (strings)
// has no Backplane dtype.
std::string_view datatype_name(DType dtype);
bool dtype_from_datatype(std::string_view datatype, DType* out);

// One input of a request. Its bytes are row-major, little-endian, and either
// borrowed (`data`/`size` point into the request body, which the request's
// `keep_alive` holds) or converted from JSON into `owned`.
struct InputTensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size = 0;
  std::vector<uint8_t> owned;
  // Set by check(): the model's dtype for this input and the bytes the
  // shape needs.
  DType dtype = DType::kUndefined;
  size_t expected_bytes = 0;
  // For an input whose bytes are not in the body as they are (JSON data,
  // gRPC typed contents): called after check(), converts them into `owned`
  // (set_owned), and fails if they are not `expected_bytes` in all.
  std::function<Error(InputTensor&)> fill;

  void set_owned(std::vector<uint8_t> bytes) {
    owned = std::move(bytes);
    data = owned.data();
    size = owned.size();
  }
};

struct RequestedOutput {
  std::string name;
  bool binary = false;  // REST: return it in the binary tensor data extension
};

struct InferRequest {
  std::string model;
  std::string version;  // "" = the newest ready version
  std::string id;       // echoed in the response
  std::vector<InputTensor> inputs;
  std::vector<RequestedOutput> outputs;  // empty = every output
  bool all_binary = false;               // REST: "binary_data_output": true
  // When the request stops being worth running (gRPC deadline, the
  // "timeout" parameter in microseconds).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // True once the client has gone away (closed connection, cancelled call).
  std::function<bool()> cancelled;
  // Owns what the inputs' views point into (the request body).
  std::shared_ptr<const void> keep_alive;
};

// Sets request.deadline from the protocol's "timeout" parameter
// (microseconds), keeping an earlier deadline the request has already.
// Not positive: kInvalidArgument. A year or more: no deadline.
Error apply_timeout(int64_t timeout_us, InferRequest& request);

struct OutputTensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  Tensor tensor;  // owns its bytes
  bool binary = false;
};

struct InferResponse {
  std::string model;
  std::string version;
  std::string id;
  std::vector<OutputTensor> outputs;
};

// Model metadata as the protocol gives it: shapes with -1 for dims the model
// leaves open.
struct TensorMetadata {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
};
struct ModelMetadata {
  std::string name;
  std::vector<std::string> versions;
  std::string platform;  // "onnx" or "backplane_bpk"
  std::vector<TensorMetadata> inputs, outputs;
};

}  // namespace backplane::serve
