// host_api.hpp — the runtime side of the backend ABI: the host table given to
// every backend, status conversion, and the C++ classes behind the ABI's
// opaque host objects (NamedDataMap, node reports).
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <string>
#include <unordered_map>
#include <vector>

// The opaque status object of the ABI.
struct bp_status {
  bp_status_code_t code;
  std::string message;
};

// Outcomes a backend reports per node of a view (query or compile).
struct bp_node_report {
  explicit bp_node_report(size_t num_nodes)
      : reported(num_nodes, false), outcome(num_nodes, BP_NODE_REJECTED), reason(num_nodes) {}
  std::vector<bool> reported;
  std::vector<bp_node_outcome_t> outcome;
  std::vector<std::string> reason;
};

// The opaque byte sink a backend's serialize writes its payload into.
struct bp_byte_writer {
  std::vector<uint8_t> bytes;
};

namespace backplane {

// Read-only weights by key (ExecuTorch's NamedDataMap). Backends reach it only
// through the host table; the runtime hands them `as_abi()`.
class NamedDataMap {
 public:
  virtual ~NamedDataMap() = default;
  // Pointer and size of `key`'s bytes; lives as long as the map.
  virtual Status get(const std::string& key, const void** data, size_t* size) const = 0;
  virtual size_t num_keys() const = 0;
  virtual const std::string* key_at(size_t index) const = 0;

  const bp_named_data_map_t* as_abi() const { return reinterpret_cast<const bp_named_data_map_t*>(this); }
  static const NamedDataMap* from_abi(const bp_named_data_map_t* m) {
    return reinterpret_cast<const NamedDataMap*>(m);
  }
};

// A NamedDataMap over tensors held in memory (an imported graph's constants).
class TensorDataMap : public NamedDataMap {
 public:
  explicit TensorDataMap(const std::unordered_map<std::string, Tensor>* tensors);
  Status get(const std::string& key, const void** data, size_t* size) const override;
  size_t num_keys() const override { return keys_.size(); }
  const std::string* key_at(size_t index) const override {
    return index < keys_.size() ? &keys_[index] : nullptr;
  }

 private:
  const std::unordered_map<std::string, Tensor>* tensors_;
  std::vector<std::string> keys_;  // sorted, for stable key_at
};

// The host table, one for the whole process (it is stateless).
const bp_host_api_t* host_api();

// Converts a status returned by a backend into a Status and releases it.
// `context` is prepended, e.g. "backend 'CpuRef': compile". NULL is OK; a
// status with code BP_STATUS_OK or a code this runtime does not know becomes
// kBackendError, its message naming the number.
Status from_abi_status(bp_status_t* status, const std::string& context);

// The C and C++ codes are one list with the same numbers (status.hpp), so
// these are casts. code_from_abi maps a code outside the list to kBackendError.
bool is_known_status_code(bp_status_code_t code);
StatusCode code_from_abi(bp_status_code_t code);
bp_status_code_t code_to_abi(StatusCode code);

}  // namespace backplane
