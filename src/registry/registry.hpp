// registry.hpp — the backends one Runtime can use (LoadedBackend each), the
// order it prefers them in, and the operators they know: ONNX's (built in)
// and those the backends define (API 1.3).
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

// This process's own instance of the static CpuRef, apart from every
// Runtime's (a Runtime may leave CpuRef out): constant folding runs its
// kernels (pipeline/constant_folding.hpp). Created on first use, then shared;
// null if it could not be created.
std::shared_ptr<LoadedBackend> reference_backend();

class BackendRegistry {
 public:
  // Registers the static backends not disabled by `options`.
  Status register_static(const RuntimeOptions& options);
  // Adds a backend; a second backend with the same id is refused. The
  // operators it defines join ops().
  Status add(std::shared_ptr<LoadedBackend> backend);

  std::shared_ptr<LoadedBackend> find(const std::string& id) const;
  const std::vector<std::shared_ptr<LoadedBackend>>& all() const { return backends_; }
  // Default preference: every registered backend by score (highest first,
  // registration order among equals), the reference backend CpuRef last.
  std::vector<std::string> default_preference() const;

  // Every operator these backends may be given: OpRegistry::builtin() and,
  // layered over it, those the backends define (each schema's provider() is
  // the backend that defined it first; a second backend defining the same
  // one may run it too, with the first one's inference). Lives as long as
  // this registry or a copy of it.
  const ir::OpRegistry& ops() const { return ops_ ? *ops_ : ir::OpRegistry::builtin(); }

 private:
  std::vector<std::shared_ptr<LoadedBackend>> backends_;
  // Null while no backend defines an operator. Rebuilt (not changed) by
  // add(), so a copy of this registry keeps the one it was made with.
  std::shared_ptr<const ir::OpRegistry> ops_;
};

}  // namespace backplane
