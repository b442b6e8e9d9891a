// cmd_validate.hpp — `backplane validate MODEL`: the plan compared with
// CpuRef tensor by tensor, and the first wrong node and its group named
// (backplane::validate, include/backplane/validate.hpp).
//
//   backplane validate MODEL [--backends A,B] [--override NODE=BACKEND]
//                            [--input NAME=FILE.npy] [--shape NAME=DIMS] [--json]
//
// Exit status: 0 every tensor matches; 1 a difference was found, or the
// validation failed ("error: ..."); 2 a usage error.
#pragma once

#include <backplane/runtime.hpp>
#include <backplane/validate.hpp>

#include <string>

namespace backplane::cli {

// Validates `model` with a runtime made from `runtime` and prints the report
// (text, or one JSON object with `json`). Returns the exit status.
int run_validate(const RuntimeOptions& runtime, const std::string& model,
                 const ValidateOptions& options, bool json);

}  // namespace backplane::cli
