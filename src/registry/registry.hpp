// registry.hpp — the backends one Runtime can use (LoadedBackend each) and
// the order it prefers them in.
//
// Thread-safety: filled while the Runtime is created, read-only afterwards.
#pragma once

#include "registry/loaded_backend.hpp"

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>
#include <backplane/status.hpp>

#include <memory>
#include <string>
#include <vector>

namespace backplane {

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
  Status add(std::shared_ptr<LoadedBackend> backend);

  std::shared_ptr<LoadedBackend> find(const std::string& id) const;
  const std::vector<std::shared_ptr<LoadedBackend>>& all() const { return backends_; }
  // Default preference: every registered backend by score (highest first,
  // registration order among equals), the reference backend CpuRef last.
  std::vector<std::string> default_preference() const;

 private:
  std::vector<std::shared_ptr<LoadedBackend>> backends_;
};

}  // namespace backplane
