// compiler.cpp — compile_partition and unsupported_reasons: the steps of
// turning a graph view into a compiled CpuOneDnn partition, each in its own
// file:
//
//   view_info     the view with producers, consumers and constants at hand
//   support       which nodes can run here, and why not
//   patterns      decomposed LayerNorm and erf-GELU, matched as one node
//   fusion        internal nodes: patterns, followers fused as post-ops,
//   bn_folding      and BatchNormalization folded into Conv
//   lowering      internal nodes to oneDNN primitives, one function per kind
//   plan_builder  buffers, memory references, steps, layouts, the arena
//   polymorphic   compiled once for every shape: a lowering per new shape
#include "onednn/compiler.hpp"

#include "onednn/compiled.hpp"
#include "onednn/lowering.hpp"
#include "onednn/patterns.hpp"
#include "onednn/support.hpp"
#include "onednn/view_info.hpp"

#include <omp.h>
#include <dnnl.hpp>

#include <algorithm>
#include <optional>

namespace backplane::onednn {
namespace {

// The process's OpenMP default (OMP_NUM_THREADS or the CPUs it may use),
// read before this backend changes any thread's setting.
int default_threads() {
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

}  // namespace

int threads_to_use(int requested) { return requested > 0 ? requested : default_threads(); }

std::string library_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string library_description() {
  const dnnl_version_t* v = dnnl_version();
  const char* rt = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                   : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                   : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                        : "threadpool";
  return "oneDNN " + library_version() + " (" + rt + ")";
}

std::vector<std::string> unsupported_reasons(const sdk::Host& host, const bp_graph_view_t& view) {
  (void)default_threads();  // read the OpenMP default before compile changes it
  ViewInfo g(host, view);
  std::vector<std::string> reasons(view.num_nodes);
  std::vector<bool> in_pattern(view.num_nodes, false);
  for (const Pattern& p : find_patterns(g))
    for (int k : p.nodes) in_pattern[k] = true;
  for (size_t n = 0; n < view.num_nodes; ++n) {
    if (in_pattern[n] && g.op(static_cast<int>(n)) == "Erf") continue;
    try {
      check_node(g, static_cast<int>(n));
    } catch (const sdk::Error& e) {
      reasons[n] = e.what();
      if (reasons[n].empty()) reasons[n] = "unsupported";
    }
  }
  return reasons;
}

std::unique_ptr<sdk::CompiledPartition> compile_partition(const sdk::Host& host,
                                                          const bp_graph_view_t& view,
                                                          int num_threads,
                                                          sdk::NodeReport& report) {
  auto compiled = std::make_unique<Compiled>(host);
  compiled->threads =
      threads_to_use(num_threads);  // first thing: before any thread count is changed
  compiled->name = view.name;
  omp_set_num_threads(compiled->threads);
  ViewInfo g(host, view);
  Lowering lowering(g, *compiled);
  try {
    lowering.prepare();
  } catch (const std::exception& e) {
    for (size_t n = 0; n < view.num_nodes; ++n)
      report.rejected(n, std::string("pattern analysis failed: ") + e.what());
    compiled->empty = true;
    return compiled;
  }
  if (std::optional<LowerFailure> failure = lowering.lower()) {
    for (int n : failure->nodes) report.rejected(static_cast<size_t>(n), failure->why);
    compiled->empty = true;
    compiled->steps.clear();
  }
  g.release_constants();  // every weight now lives in oneDNN memory
  omp_set_num_threads(compiled->threads);
  return compiled;
}

}  // namespace backplane::onednn
