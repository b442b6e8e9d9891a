// cmd_conformance.hpp — `backplane conformance`: a backend's operators
// checked against CpuRef, in the spirit of ggml's test-backend-ops.
//
//   backplane conformance --backend ID [--strict] [--filter SUBSTR]
//                         [--case-dir DIR] [--case-data DIR] [--verbose]
//
// Two sources of cases, neither needing a build tree:
// - The catalogue, generated here: for each of its operators, small models
//   across shapes, broadcasting, attributes and dtypes, each run on the
//   backend alone and on CpuRef with the same pseudo-random inputs and
//   compared (floating point within a relative and absolute tolerance,
//   integers and bools exactly). For each operator the backend takes, also: a
//   graph that crosses partition edges (the operator on the backend, Neg
//   pinned to CpuRef between, so tensors move between memories), a
//   serialize/deserialize round trip through a compiled artifact, and several
//   sessions (execution contexts) of one model run from several threads.
// - ONNX's node test cases (conformance_onnx.hpp), installed with the CLI in
//   <bin>/../share/backplane/conformance (or --case-data DIR): each case is
//   planned with the backend first and CpuRef after it, and the op types of
//   the nodes the backend gets are claimed; every case whose operators are
//   all claimed then runs on the backend alone, compared with ONNX's expected
//   outputs and with CpuRef's.
// An operator is "claimed" when the backend takes it in some case; a
// registry operator no case covers is probed (a one-node model) and, if the
// backend takes it, named on a "no cases:" line. A case the backend does not
// take is "unsupported"; --strict counts a case of a claimed operator that
// the backend rejects as a failure.
//
// Before any of that, with the backend loaded alone, the hygiene contract
// (hygiene.hpp): each rule of the process state a backend must leave alone
// is one case, kept or broken (--no-hygiene skips it).
//
// Prints the counts per claimed operator and "ID: N passed, N failed, N
// unsupported"; on failure, writes the smallest failing case as an ONNX model
// plus its inputs (.npy) to --case-dir and prints the two `backplane run`
// commands that compare it. Exit status 0 iff nothing failed.
#pragma once

#include <backplane/runtime.hpp>

#include <CLI/CLI.hpp>

#include <string>

namespace backplane::cli {

struct ConformanceCommand {
  CLI::App* app = nullptr;  // the subcommand, owned by the parent App
  std::string backend;
  bool strict = false;
  std::string filter;
  std::string case_dir = ".";
  std::string case_data;  // the ONNX node cases; "" = <bin>/../share/backplane/conformance
  bool verbose = false;
  bool skip_hygiene = false;  // --no-hygiene

  bool selected() const { return app != nullptr && app->parsed(); }
  // Runs the cases with a runtime made from `options`; prints on stdout.
  // 0 when nothing failed, 1 otherwise ("error: ..." on stderr when the run
  // itself could not be made).
  int run(const RuntimeOptions& options) const;
};

// Adds the `conformance` subcommand to `parent`. The result must outlive
// parsing.
void add_conformance_command(CLI::App& parent, ConformanceCommand* cmd);

}  // namespace backplane::cli
