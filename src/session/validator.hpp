// validator.hpp — backplane::validate (include/backplane/validate.hpp): a plan
// compared with CpuRef tensor by tensor, and the first wrong node found by
// planning again with nodes pinned.
#pragma once

#include "registry/registry.hpp"
#include "session/compiled_model.hpp"

#include <backplane/validate.hpp>

#include <atomic>
#include <cstdint>
#include <string>

namespace backplane {

// Validates the ONNX model at `path` over `registry`. Every model it plans
// is made with `base` (threads, pool, cache size) and a network id from
// `network_ids`.
Result<ValidationReport> validate_model(const BackendRegistry& registry,
                                        const CompiledModel::Options& base,
                                        std::atomic<uint64_t>* network_ids, const std::string& path,
                                        const ValidateOptions& options);

}  // namespace backplane
