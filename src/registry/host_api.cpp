#include "registry/host_api.hpp"

#include "core/log.hpp"
#include "core/named_blob_store.hpp"
#include "core/named_data_map.hpp"
#include "core/profiler.hpp"
#include "core/thread_pool.hpp"
#include "registry/abi_status.hpp"
#include "registry/backend_ops.hpp"
#include "registry/byte_writer.hpp"
#include "registry/node_report.hpp"
#include "registry/output_sink.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace backplane {
namespace {

bp_status_t* status_create(bp_status_code_t code, const char* message) {
  return make_abi_status(code, message);
}

bp_status_code_t status_code(const bp_status_t* status) {
  return status == nullptr ? BP_STATUS_OK : status->code;
}

const char* status_message(const bp_status_t* status) {
  return status == nullptr ? "" : status->message.c_str();
}

void status_release(bp_status_t* status) { delete status; }

void log_message(bp_log_level_t level, const char* backend_id, const char* message) {
  std::string text =
      std::string("[") + (backend_id ? backend_id : "?") + "] " + (message ? message : "");
  LogLevel l = LogLevel::kInfo;
  switch (level) {
    case BP_LOG_TRACE:
      l = LogLevel::kTrace;
      break;
    case BP_LOG_DEBUG:
      l = LogLevel::kDebug;
      break;
    case BP_LOG_INFO:
      l = LogLevel::kInfo;
      break;
    case BP_LOG_WARN:
      l = LogLevel::kWarn;
      break;
    case BP_LOG_ERROR:
      l = LogLevel::kError;
      break;
  }
  log::write(l, text);
}

bp_status_t* data_map_get(const bp_named_data_map_t* map, const char* key, bp_buffer_t* out) {
  if (map == nullptr || key == nullptr || out == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "data_map_get: NULL argument");
  const void* data = nullptr;
  size_t size = 0;
  std::unique_ptr<NamedDataMap::Hold> hold;
  Status s = ok_status();
  try {
    s = NamedDataMap::from_abi(map)->hold(key, &data, &size, &hold);
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "data_map_get: out of memory");
  }
  // The code goes through as it is: a checksum that fails on first use stays
  // "corrupt", an unreadable data file stays an i/o error.
  if (!s.ok()) return status_create(code_to_abi(s.code()), s.message().c_str());
  out->struct_size = BP_STRUCT_SIZE(bp_buffer_t, host_private);
  out->data = data;
  out->size = size;
  // The map owns the bytes; the hold, if any, lets it drop them once freed.
  out->host_private = hold.release();
  return nullptr;
}

void buffer_free(bp_buffer_t* buffer) {
  if (buffer != nullptr) {
    delete static_cast<NamedDataMap::Hold*>(buffer->host_private);
    buffer->host_private = nullptr;
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
  if (key == nullptr)
    return status_create(BP_STATUS_NOT_FOUND, "data_map_key_at: index out of range");
  *out_key = key->c_str();
  return nullptr;
}

bp_status_t* blob_store_add(bp_blob_store_t* store, const char* key, const void* data, size_t size,
                            size_t alignment, const char* external_file) {
  if (store == nullptr || key == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT,
                         "blob_store_add: NULL store or key (not compiling ahead of time?)");
  try {
    Status s = NamedBlobStore::from_abi(store)->add(key, data, size, alignment,
                                                    external_file ? external_file : "");
    return s.ok() ? nullptr : status_create(code_to_abi(s.code()), s.message().c_str());
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "blob_store_add: out of memory");
  }
}

bp_status_t* writer_append(bp_byte_writer_t* writer, const void* data, size_t size) {
  if (writer == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "writer_append: NULL writer");
  if (size > 0 && data == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "writer_append: NULL data");
  try {
    const auto* p = static_cast<const uint8_t*>(data);
    writer->bytes.insert(writer->bytes.end(), p, p + size);
    return nullptr;
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "writer_append: out of memory");
  }
}

void report_node(bp_node_report_t* report, size_t node_index, bp_node_outcome_t outcome,
                 const char* reason) {
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

bp_status_t* output_allocate(bp_output_sink_t* sink, size_t output_index, size_t rank,
                             const int64_t* dims, void** out_data) {
  if (out_data == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "output_allocate: out_data is NULL");
  *out_data = nullptr;
  if (sink == nullptr || !sink->allocate)
    return status_create(BP_STATUS_INVALID_ARGUMENT,
                         "output_allocate: no output sink (only during execute_shaped)");
  if (rank > 0 && dims == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "output_allocate: dims is NULL");
  try {
    Shape shape(dims, dims + rank);
    for (int64_t d : shape)
      if (d < 0)
        return status_create(
            BP_STATUS_INVALID_ARGUMENT,
            ("output_allocate: negative dim in " + shape_to_string(shape)).c_str());
    Result<void*> r = sink->allocate(output_index, shape);
    if (!r.ok())
      return status_create(static_cast<bp_status_code_t>(r.status().code()),
                           r.status().message().c_str());
    *out_data = r.value();
    return nullptr;
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "output_allocate: out of memory");
  } catch (...) {
    return status_create(BP_STATUS_INTERNAL, "output_allocate failed");
  }
}

bp_status_t* infer_set_output(bp_infer_result_t* result, size_t output_index, bp_dtype_t dtype,
                              size_t rank, const int64_t* dims) {
  if (result == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "infer_set_output: result is NULL");
  if (output_index >= result->dtypes.size())
    return status_create(BP_STATUS_INVALID_ARGUMENT,
                         ("infer_set_output: output " + std::to_string(output_index) +
                          " of a node with " + std::to_string(result->dtypes.size()) + " outputs")
                             .c_str());
  if (rank > 0 && dims == nullptr)
    return status_create(BP_STATUS_INVALID_ARGUMENT, "infer_set_output: dims is NULL");
  const DType d = static_cast<DType>(dtype);
  if (dtype == BP_DTYPE_UNDEFINED || dtype_size(d) == 0)
    return status_create(BP_STATUS_INVALID_ARGUMENT,
                         ("infer_set_output: output " + std::to_string(output_index) + ": dtype " +
                          std::to_string(dtype) + " is not an element type")
                             .c_str());
  try {
    Shape shape(dims, dims + rank);
    for (int64_t v : shape)
      if (v < 0)
        return status_create(BP_STATUS_INVALID_ARGUMENT,
                             ("infer_set_output: output " + std::to_string(output_index) +
                              " has a negative dim in " + shape_to_string(shape))
                                 .c_str());
    result->dtypes[output_index] = d;
    result->shapes[output_index] = std::move(shape);
    return nullptr;
  } catch (const std::bad_alloc&) {
    return status_create(BP_STATUS_OUT_OF_MEMORY, "infer_set_output: out of memory");
  }
}

uint32_t thread_pool_size(const bp_thread_pool_t* pool) {
  return pool == nullptr ? 1u : static_cast<uint32_t>(ThreadPool::from_abi(pool)->size());
}

bp_status_t* parallel_for(bp_thread_pool_t* pool, size_t n, size_t grain,
                          void (*fn)(void* ctx, size_t begin, size_t end), void* ctx) {
  if (n == 0) return nullptr;
  if (fn == nullptr) return status_create(BP_STATUS_INVALID_ARGUMENT, "parallel_for: fn is NULL");
  bool ok = true;
  if (pool == nullptr) {
    try {
      fn(ctx, 0, n);
    } catch (...) {
      ok = false;
    }
  } else {
    ok = ThreadPool::from_abi(pool)->parallel_for(n, grain, fn, ctx);
  }
  return ok ? nullptr
            : status_create(BP_STATUS_BACKEND_ERROR,
                            "parallel_for: a chunk threw a C++ exception across the ABI "
                            "(the chunks not yet started were skipped)");
}

uint64_t clock_ns() { return profile::now_ns(); }

// A node's span within a profiled execute_shaped: named by what the summary
// sums it under (its operator type unless the backend says otherwise).
void profile_node(bp_profile_t* profile, size_t node_index, const char* op_type,
                  const char* label, uint64_t begin_ns, uint64_t end_ns) {
  if (profile == nullptr || profile->recorder == nullptr || end_ns < begin_ns) return;
  auto given = [](const char* s) { return s != nullptr && *s != '\0'; };
  profile::Event e;
  e.kind = profile::Kind::kNode;
  e.begin_ns = begin_ns;
  e.end_ns = end_ns;
  const bp_graph_view_t* view = profile->view;
  const bp_node_t* node =
      view != nullptr && node_index < view->num_nodes ? &view->nodes[node_index] : nullptr;
  e.name = given(op_type)                          ? op_type
           : node != nullptr && given(node->op_type) ? node->op_type
           : given(label)                            ? label
                                                     : "(unnamed work)";
  if (node != nullptr && given(node->name)) e.args.emplace_back("node", node->name);
  if (given(label)) e.args.emplace_back("label", label);
  e.args.emplace_back("backend", profile->backend);
  profile->recorder->add(std::move(e));
}

}  // namespace

const bp_host_api_t* host_api() {
  static const bp_host_api_t table = [] {
    bp_host_api_t t{};
    t.struct_size = BP_HOST_API_SIZE_1_6;
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
    t.output_allocate = &output_allocate;    // since 1.2
    t.infer_set_output = &infer_set_output;  // since 1.3
    t.thread_pool_size = &thread_pool_size;  // since 1.5
    t.parallel_for = &parallel_for;          // since 1.5
    t.clock_ns = &clock_ns;                  // since 1.6
    t.profile_node = &profile_node;          // since 1.6
    return t;
  }();
  return &table;
}

}  // namespace backplane
