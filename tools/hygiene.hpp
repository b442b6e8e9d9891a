// hygiene.hpp — the backend hygiene contract, checked by `backplane conformance`.
//
// Loading a backend must change nothing in the application but which kernels
// run. Across load, configure, compile, execute and unload, a backend leaves
// unchanged:
//   environment      the process environment (no setenv/putenv/unsetenv)
//   affinity         the calling thread's CPU affinity, also while it runs
//   signal mask      the calling thread's blocked signals
//   signal handlers  every signal's disposition
//   floating point   the calling thread's rounding mode, enabled traps and
//                    (x86) flush-to-zero / denormals-are-zero
//   locale           the global locale and the calling thread's
//   working dir      the current working directory
//   umask            the file mode creation mask
//   threads          no thread the backend started outlives its unload
// docs/writing-a-backend.md states the contract for backend authors.
#pragma once

#include <backplane/runtime.hpp>

#include <functional>
#include <string>
#include <vector>

namespace backplane::cli {

// One rule's verdict: `violation` is "" when the backend kept it, else what
// changed and in which step ("after compile: ...").
struct HygieneResult {
  std::string rule;
  std::string violation;
};

// A model the check may compile and run: a path and its inputs by name.
struct HygieneModel {
  std::string path;
  std::vector<std::pair<std::string, Tensor>> inputs;
};

struct HygieneReport {
  std::vector<HygieneResult> rules;  // one per rule, in the order above
  std::string note;                  // what was not exercised, or ""
};

// Checks backend `id` against the contract. A child process first lists the
// registered backends (with `options`); this process then loads the backend
// under test alone (a dynamic one through a private directory holding a link
// to its file; CpuRef beside it), configures it, compiles and runs on it the
// first of `candidates` it takes (on two threads at least, with a thread
// watching the caller's affinity during the runs), and unloads it, comparing
// the process state before and after each step. Call it before any runtime
// of this process has loaded a backend: a backend loaded before is not seen
// loading. `scratch` is a private directory for the link.
Result<HygieneReport> check_hygiene(const std::string& id, const RuntimeOptions& options,
                                    const std::string& scratch,
                                    const std::vector<std::function<HygieneModel()>>& candidates);

}  // namespace backplane::cli
