#include "registry/host_api.hpp"

#include "artifact/blob_store.hpp"
#include "core/log.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

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
    case BP_STATUS_OK: return StatusCode::kOk;
    case BP_STATUS_INVALID_ARGUMENT: return StatusCode::kInvalidArgument;
    case BP_STATUS_UNSUPPORTED: return StatusCode::kUnsupported;
    case BP_STATUS_UNIMPLEMENTED: return StatusCode::kUnimplemented;
    case BP_STATUS_OUT_OF_MEMORY: return StatusCode::kOutOfMemory;
    case BP_STATUS_NOT_FOUND: return StatusCode::kNotFound;
    case BP_STATUS_CORRUPT_DATA: return StatusCode::kCorruptData;
    case BP_STATUS_VERSION_MISMATCH: return StatusCode::kVersionMismatch;
    case BP_STATUS_DEVICE_ERROR: return StatusCode::kDeviceError;
    case BP_STATUS_INTERNAL: return StatusCode::kInternal;
    case BP_STATUS_IO_ERROR: return StatusCode::kIoError;
    case BP_STATUS_BACKEND_ERROR: return StatusCode::kBackendError;
    case BP_STATUS_FORCE_INT32_: break;
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
static_assert(lists_agree(), "backplane::StatusCode and bp_status_code_t must hold the same codes with the same numbers");

bp_status_t* status_create(bp_status_code_t code, const char* message) {
  try {
    return new bp_status{code, message != nullptr ? message : ""};
  } catch (...) {
    // Out of memory while reporting an error: a static status would be
    // released by the receiver, so the best we can do is abort loudly.
    std::abort();
  }
}

bp_status_code_t status_code(const bp_status_t* status) {
  return status == nullptr ? BP_STATUS_OK : status->code;
}

const char* status_message(const bp_status_t* status) {
  return status == nullptr ? "" : status->message.c_str();
}

void status_release(bp_status_t* status) { delete status; }

void log_message(bp_log_level_t level, const char* backend_id, const char* message) {
  std::string text = std::string("[") + (backend_id ? backend_id : "?") + "] " + (message ? message : "");
  LogLevel l = LogLevel::kInfo;
  switch (level) {
    case BP_LOG_TRACE: l = LogLevel::kTrace; break;
    case BP_LOG_DEBUG: l = LogLevel::kDebug; break;
    case BP_LOG_INFO: l = LogLevel::kInfo; break;
    case BP_LOG_WARN: l = LogLevel::kWarn; break;
    case BP_LOG_ERROR: l = LogLevel::kError; break;
  }
  log::write(l, text);
}

bp_status_t* data_map_get(const bp_named_data_map_t* map, const char* key, bp_buffer_t* out) {
  if (map == nullptr || key == nullptr || out == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "data_map_get: NULL argument");
  const void* data = nullptr;
  size_t size = 0;
  Status s = NamedDataMap::from_abi(map)->get(key, &data, &size);
  // The code goes through as it is: a checksum that fails on first use stays
  // "corrupt", an unreadable data file stays an i/o error.
  if (!s.ok()) return status_create(code_to_abi(s.code()), s.message().c_str());
  out->struct_size = BP_STRUCT_SIZE(bp_buffer_t, host_private);
  out->data = data;
  out->size = size;
  out->host_private = nullptr;  // the map owns the bytes; nothing to free
  return nullptr;
}

void buffer_free(bp_buffer_t* buffer) {
  if (buffer != nullptr) {
    buffer->data = nullptr;
    buffer->size = 0;
  }
}

size_t data_map_num_keys(const bp_named_data_map_t* map) {
  return map == nullptr ? 0 : NamedDataMap::from_abi(map)->num_keys();
}

bp_status_t* data_map_key_at(const bp_named_data_map_t* map, size_t index, const char** out_key) {
  if (map == nullptr || out_key == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "data_map_key_at: NULL argument");
  const std::string* key = NamedDataMap::from_abi(map)->key_at(index);
  if (key == nullptr) return status_create(BP_STATUS_NOT_FOUND, "data_map_key_at: index out of range");
  *out_key = key->c_str();
  return nullptr;
}

bp_status_t* blob_store_add(bp_blob_store_t* store, const char* key, const void* data, size_t size,
                            size_t alignment, const char* external_file) {
  if (store == nullptr || key == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "blob_store_add: NULL store or key (not compiling ahead of time?)");
  try {
    Status s = BlobStore::from_abi(store)->add(key, data, size, alignment, external_file ? external_file : "");
    return s.ok() ? nullptr : status_create(code_to_abi(s.code()), s.message().c_str());
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "blob_store_add: out of memory");
  }
}

bp_status_t* writer_append(bp_byte_writer_t* writer, const void* data, size_t size) {
  if (writer == nullptr) return status_create(BP_STATUS_INVALID_ARGUMENT, "writer_append: NULL writer");
  if (size > 0 && data == nullptr) return status_create(BP_STATUS_INVALID_ARGUMENT, "writer_append: NULL data");
  try {
    const auto* p = static_cast<const uint8_t*>(data);
    writer->bytes.insert(writer->bytes.end(), p, p + size);
    return nullptr;
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "writer_append: out of memory");
  }
}

void report_node(bp_node_report_t* report, size_t node_index, bp_node_outcome_t outcome, const char* reason) {
  if (report == nullptr || node_index >= report->reported.size()) return;
  try {
    report->reported[node_index] = true;
    report->outcome[node_index] = outcome;
    report->reason[node_index] = reason != nullptr ? reason : "";
  } catch (...) {
  }
}

void* host_alloc(size_t size, size_t alignment) {
  if (alignment < alignof(std::max_align_t)) alignment = alignof(std::max_align_t);
  if ((alignment & (alignment - 1)) != 0) return nullptr;
  size_t rounded = ((std::max<size_t>(size, 1) + alignment - 1) / alignment) * alignment;
  return std::aligned_alloc(alignment, rounded);
}

void host_free(void* p) { std::free(p); }

}  // namespace

TensorDataMap::TensorDataMap(const std::unordered_map<std::string, Tensor>* tensors) : tensors_(tensors) {
  for (const auto& kv : *tensors) keys_.push_back(kv.first);
  std::sort(keys_.begin(), keys_.end());
}

Status TensorDataMap::get(const std::string& key, const void** data, size_t* size) const {
  auto it = tensors_->find(key);
  if (it == tensors_->end()) return not_found("no weight named '" + key + "'");
  *data = it->second.data();
  *size = it->second.size_bytes();
  return ok_status();
}

const bp_host_api_t* host_api() {
  static const bp_host_api_t table = [] {
    bp_host_api_t t{};
    t.struct_size = BP_STRUCT_SIZE(bp_host_api_t, free);
    t.api_major = BP_API_VERSION_MAJOR;
    t.api_minor = BP_API_VERSION_MINOR;
    t.status_create = &status_create;
    t.status_code = &status_code;
    t.status_message = &status_message;
    t.status_release = &status_release;
    t.log = &log_message;
    t.data_map_get = &data_map_get;
    t.buffer_free = &buffer_free;
    t.data_map_num_keys = &data_map_num_keys;
    t.data_map_key_at = &data_map_key_at;
    t.blob_store_add = &blob_store_add;
    t.writer_append = &writer_append;
    t.report_node = &report_node;
    t.alloc = &host_alloc;
    t.free = &host_free;
    return t;
  }();
  return &table;
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
    s = Status(StatusCode::kBackendError, "returned a failure status with code 0 (BP_STATUS_OK): " + status->message);
  } else if (!is_known_status_code(status->code)) {
    s = Status(StatusCode::kBackendError, "returned status code " + std::to_string(static_cast<int32_t>(status->code)) +
                                              ", unknown to this runtime: " + status->message);
  } else {
    s = Status(code_from_abi(status->code), status->message);
  }
  delete status;
  return std::move(s.with_context(context));
}

}  // namespace backplane
