// aot.hpp — ahead-of-time compilation into artifacts, and loading them back.
#pragma once

#include "exec/executor.hpp"
#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace backplane {

// Imports, partitions and compiles each {method name, ONNX path}; every
// backend gets all its partitions at once (compile_all); payloads and
// weights go through one NamedBlobStore; writes `output`.
Result<CompileReport> compile_artifact(const BackendRegistry& registry,
                                       const std::vector<std::pair<std::string, std::string>>& methods,
                                       const std::string& output, const CompileOptions& options, int num_threads);

// Maps a .bpk and builds the model of one method from it: each partition is
// deserialized by its backend; a partition whose backend is missing or
// cannot read the payload is recompiled from the portable graph on the next
// backend that supports its nodes (and the model's notes say so).
Result<std::shared_ptr<CompiledModel>> load_artifact(const BackendRegistry& registry, const std::string& path,
                                                     const ModelOptions& options, uint64_t network_id,
                                                     int num_threads);

// True if `path` starts like a .bpk (size prefix, then "BPK1" at byte 8).
bool looks_like_artifact(const std::string& path);

}  // namespace backplane
