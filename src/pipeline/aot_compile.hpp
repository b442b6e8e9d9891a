// aot_compile.hpp — ahead-of-time compiling (`backplane compile`,
// Runtime::compile): ONNX models in, one artifact (.bpk, and a .bpd when the
// weights go to a data file of their own) out.
#pragma once

#include "registry/registry.hpp"

#include <backplane/runtime.hpp>

#include <string>
#include <utility>
#include <vector>

namespace backplane {

// Imports each {method name, ONNX path} through the front end, plans and
// compiles with the same loop as just-in-time loading (pipeline/compile.hpp),
// but every backend gets all its partitions of all methods in one call
// (compile_all); payloads and weights go through one NamedBlobStore; writes
// `output`.
Result<CompileReport> compile_artifact(
    const BackendRegistry& registry,
    const std::vector<std::pair<std::string, std::string>>& methods, const std::string& output,
    const CompileOptions& options, int num_threads);

}  // namespace backplane
