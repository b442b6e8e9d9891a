// node_report.hpp — the ABI's opaque per-node report (bp_node_report_t): what
// a backend says about each node of a view it was asked to query or compile.
// Filled through the host table's report_node; created and owned by the host
// for the duration of one call.
#pragma once

#include <backplane/backend_abi.h>

#include <cstddef>
#include <string>
#include <vector>

struct bp_node_report {
  explicit bp_node_report(size_t num_nodes)
      : reported(num_nodes, false), outcome(num_nodes, BP_NODE_REJECTED), reason(num_nodes) {}
  std::vector<bool> reported;
  std::vector<bp_node_outcome_t> outcome;
  std::vector<std::string> reason;
};
