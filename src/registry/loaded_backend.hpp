// loaded_backend.hpp — LoadedBackend: one backend instance this runtime
// created through a backend's function table (bp_backend_api_t), and the RAII
// owners of what that instance hands out (compiled partitions, execution
// contexts, device buffers).
//
// Static and dynamic backends are the same thing here; they differ only in
// where the table came from (`source`). Not to be confused with sdk::Backend
// (the C++ base class a backend author derives from, backend_sdk.hpp) or
// bp_backend_t (the opaque instance handle of the ABI, `instance()` here).
//
// Thread-safety: immutable after create(). The ABI promises a backend that
// the host serialises calls on one instance (all but execute and
// execute_node): make every other call through call(), which holds this
// instance's lock for the duration of the call.
#pragma once

#include "registry/backend_ops.hpp"

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>
#include <backplane/status.hpp>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace backplane {

class LoadedBackend {
 public:
  // Creates an instance through `api`; checks the table first.
  // `library` keeps a dynamic backend's shared object loaded (null if
  // static). `score` is GetBackendScore's answer (1 when the backend has
  // none); the default preference orders backends by it.
  static Result<std::shared_ptr<LoadedBackend>> create(std::string id, const bp_backend_api_t* api,
                                                       std::string source,
                                                       std::shared_ptr<void> library,
                                                       uint32_t score = 1);
  // Destroys the instance, then lets the library go.
  ~LoadedBackend();
  LoadedBackend(const LoadedBackend&) = delete;
  LoadedBackend& operator=(const LoadedBackend&) = delete;

  const std::string& id() const { return id_; }
  const std::string& source() const { return source_; }
  uint32_t score() const { return score_; }
  const bp_backend_api_t* api() const { return api_; }
  // Owned by this object; lives as long as it.
  bp_backend_t* instance() const { return instance_; }
  const bp_backend_info_t& info() const { return info_; }
  // Asks get_info again: after configure, which may change what a backend
  // reports (its description, its device memory flag). Not while other
  // threads use this object.
  Status read_info();
  bool has_flag(uint32_t flag) const { return (info_.flags & flag) != 0; }
  // The operators this backend defines (API 1.3 get_op_schemas, read and
  // checked once at create); empty for an older backend.
  const std::vector<BackendOp>& ops() const { return ops_; }
  bool defines_op(const std::string& domain, const std::string& name) const;
  BackendDescription describe() const;
  // The devices it reports (API 1.4 get_devices); none if it has no such slot
  // or the call fails.
  std::vector<DeviceDescription> devices() const;

  // "backend 'CpuRef': <what>", for wrapping statuses from this backend.
  Status check(bp_status_t* status, const std::string& what) const;

  // Runs `slot_call` (one call into this backend's table) under this
  // instance's lock and returns what it returns. Never nest: the lock is
  // not recursive.
  template <class F>
  auto call(F&& slot_call) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return slot_call();
  }

 private:
  LoadedBackend() = default;
  Status read_ops();
  std::string id_;
  std::string source_;
  uint32_t score_ = 1;
  const bp_backend_api_t* api_ = nullptr;
  bp_backend_t* instance_ = nullptr;
  bp_backend_info_t info_{};
  std::vector<BackendOp> ops_;
  std::shared_ptr<void> library_;
  mutable std::mutex mutex_;  // serialises calls on instance_
};

// A move-only owner of one handle that `backend` handed out: Release(backend,
// handle) runs once, when the owner goes, and the backend instance lives at
// least as long (the ABI forbids destroying an instance before what it
// handed out). An owner holding Handle{} is empty.
template <class Handle, void (*Release)(const LoadedBackend&, Handle)>
class BackendOwned {
 public:
  BackendOwned() = default;
  BackendOwned(std::shared_ptr<LoadedBackend> backend, Handle handle)
      : backend_(std::move(backend)), handle_(handle) {}
  ~BackendOwned() { reset(); }
  BackendOwned(BackendOwned&& other) noexcept
      : backend_(std::move(other.backend_)), handle_(std::exchange(other.handle_, Handle{})) {}
  BackendOwned& operator=(BackendOwned&& other) noexcept {
    if (this != &other) {
      reset();
      backend_ = std::move(other.backend_);
      handle_ = std::exchange(other.handle_, Handle{});
    }
    return *this;
  }
  BackendOwned(const BackendOwned&) = delete;
  BackendOwned& operator=(const BackendOwned&) = delete;

  // Owned by this object; Handle{} when empty.
  const Handle& get() const { return handle_; }
  explicit operator bool() const { return !(handle_ == Handle{}); }
  void reset() {
    if (!(handle_ == Handle{})) Release(*backend_, handle_);
    handle_ = Handle{};
  }

 private:
  std::shared_ptr<LoadedBackend> backend_;
  Handle handle_{};
};

// A device buffer: a pointer opaque to the host, on one device of a backend.
struct DevicePointer {
  uint32_t device = 0;
  void* ptr = nullptr;
  bool operator==(const DevicePointer&) const = default;
};

namespace backend_release {
inline void compiled(const LoadedBackend& b, bp_compiled_t* c) {
  b.call([&] { b.api()->compiled_destroy(c); });
}
// context_destroy is thread-safe on one compiled partition (backend_abi.h).
inline void context(const LoadedBackend& b, bp_exec_context_t* c) { b.api()->context_destroy(c); }
inline void device_memory(const LoadedBackend& b, DevicePointer p) {
  b.call([&] { b.api()->memory_free(b.instance(), p.device, p.ptr); });
}
}  // namespace backend_release

using CompiledHandle =
    BackendOwned<bp_compiled_t*, &backend_release::compiled>;  // a compiled partition
using ContextHandle =
    BackendOwned<bp_exec_context_t*, &backend_release::context>;  // an execution context
using DeviceBuffer = BackendOwned<DevicePointer, &backend_release::device_memory>;  // device memory

}  // namespace backplane
