// cmd_ops.hpp — `backplane ops`: the operator registry, as text or as the
// Markdown of docs/operators.md.
//
//   backplane ops [--markdown] [--json] [--conformance FILE.json]...
//
// Lists every schema of the built-in registry: domain, op, the opsets each
// version covers, whether output shapes depend on data, whether the host runs
// it, and who provides it. Each --conformance file (written by
// `backplane_conformance --json`, one per backend) adds a column saying
// whether that backend ran the op's conformance cases; the first file's
// unsupported cases are listed with their reasons (Markdown only).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace backplane::cli {

struct OpsCommand {
  CLI::App* app = nullptr;  // the subcommand, owned by the parent App
  bool markdown = false;
  bool json = false;
  std::vector<std::string> conformance;

  bool selected() const { return app != nullptr && app->parsed(); }
  // Prints the listing on stdout; 0 on success, 1 with "error: ..." on stderr.
  int run() const;
};

// Adds the `ops` subcommand to `parent`. The result must outlive parsing.
void add_ops_command(CLI::App& parent, OpsCommand* cmd);

}  // namespace backplane::cli
