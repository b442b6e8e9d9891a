// registry.hpp — the backends one Runtime can use.
//
// A backend is a function table (bp_backend_api_t) plus the instance this
// runtime created through it. Static and dynamic backends are the same thing
// here; they differ only in where the table came from (`source`).
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>
#include <backplane/status.hpp>

#include <memory>
#include <string>
#include <vector>

namespace backplane {

// One backend instance owned by one runtime.
class Backend {
 public:
  // Creates an instance through `api`; checks the table first.
  // `library` keeps a dynamic backend's shared object loaded (null if static).
  static Result<std::shared_ptr<Backend>> create(std::string id, const bp_backend_api_t* api,
                                                 std::string source, std::shared_ptr<void> library);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  const std::string& id() const { return id_; }
  const std::string& source() const { return source_; }
  const bp_backend_api_t* api() const { return api_; }
  bp_backend_t* instance() const { return instance_; }
  const bp_backend_info_t& info() const { return info_; }
  bool has_flag(uint32_t flag) const { return (info_.flags & flag) != 0; }
  BackendDescription describe() const;

  // "backend 'CpuRef': <what>", for wrapping statuses from this backend.
  Status check(bp_status_t* status, const std::string& what) const;

 private:
  Backend() = default;
  std::string id_;
  std::string source_;
  const bp_backend_api_t* api_ = nullptr;
  bp_backend_t* instance_ = nullptr;
  bp_backend_info_t info_{};
  std::shared_ptr<void> library_;
};

// Checks a table's header before anything in it is called: struct_size, the
// version it was built for, the required slots.
Status validate_backend_table(const bp_backend_api_t* api);

// Ids of the backends linked into this build (registered or not).
std::vector<std::string> static_backend_ids();

class BackendRegistry {
 public:
  // Registers the static backends not disabled by `options`.
  Status register_static(const RuntimeOptions& options);
  // Adds a backend; a second backend with the same id is refused.
  Status add(std::shared_ptr<Backend> backend);

  std::shared_ptr<Backend> find(const std::string& id) const;
  const std::vector<std::shared_ptr<Backend>>& all() const { return backends_; }
  // Default preference: every registered backend, CpuRef last.
  std::vector<std::string> default_preference() const;

 private:
  std::vector<std::shared_ptr<Backend>> backends_;
};

}  // namespace backplane
