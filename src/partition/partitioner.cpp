#include "partition/partitioner.hpp"

#include "ir/op_registry.hpp"
#include "partition/graph_view.hpp"
#include "registry/node_report.hpp"

#include <algorithm>
#include <unordered_map>

namespace backplane {
namespace {

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

std::vector<std::string> registered_ids(const BackendRegistry& registry) {
  std::vector<std::string> ids;
  for (const auto& b : registry.all()) ids.push_back(b->id());
  return ids;
}

}  // namespace

std::vector<std::vector<int>> group_nodes(const ir::Graph& graph,
                                          const std::vector<std::string>& backend_of_node) {
  struct Group {
    std::string backend;
    std::vector<int> nodes;
    std::set<int> preds;  // groups this one reads from
  };
  std::vector<Group> groups;
  std::vector<int> group_of(graph.nodes.size(), -1);

  // Does group `from` reach group `to` through the dependency graph?
  auto reaches = [&](int from, int to) {
    std::vector<int> stack = {to};
    std::vector<bool> seen(groups.size(), false);
    while (!stack.empty()) {
      int g = stack.back();
      stack.pop_back();
      if (g == from) return true;
      if (seen[g]) continue;
      seen[g] = true;
      for (int p : groups[g].preds) stack.push_back(p);
    }
    return false;
  };

  // A node that reads only constants (a DequantizeLinear of int8 weights,
  // which is not folded) waits for its first reader and joins that reader's
  // group if it has the same backend, so the weights reach the operator
  // that reads them in the same partition (as constants to its backend).
  auto reads_only_constants = [&](size_t n) {
    for (int v : graph.nodes[n].inputs)
      if (v >= 0 && !graph.values[v].is_constant()) return false;
    return true;
  };
  std::vector<bool> waiting(graph.nodes.size(), false);
  auto place = [&](int n, int chosen, const std::set<int>& deps) {
    groups[chosen].nodes.push_back(n);
    for (int d : deps)
      if (d != chosen) groups[chosen].preds.insert(d);
    group_of[n] = chosen;
  };
  auto own_group = [&](int n) {
    groups.push_back(Group{backend_of_node[n], {}, {}});
    place(n, static_cast<int>(groups.size()) - 1, {});
  };
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (reads_only_constants(n)) {
      waiting[n] = true;
      continue;
    }
    std::set<int> deps;
    std::vector<int> joining;  // waiting producers of n's backend
    for (int v : graph.nodes[n].inputs) {
      const int p = v >= 0 ? graph.values[v].producer : -1;
      if (p < 0) continue;
      if (waiting[p]) {
        waiting[p] = false;
        if (backend_of_node[p] == backend_of_node[n]) {
          joining.push_back(p);
          continue;
        }
        own_group(p);
      }
      if (group_of[p] >= 0 && std::find(joining.begin(), joining.end(), p) == joining.end())
        deps.insert(group_of[p]);
    }
    int chosen = -1;
    for (int candidate : deps) {
      if (groups[candidate].backend != backend_of_node[n]) continue;
      bool cycle = false;
      for (int other : deps)
        if (other != candidate && reaches(candidate, other)) cycle = true;
      if (!cycle) {
        chosen = candidate;
        break;
      }
    }
    if (chosen < 0) {
      groups.push_back(Group{backend_of_node[n], {}, {}});
      chosen = static_cast<int>(groups.size()) - 1;
    }
    for (int p : joining) place(p, chosen, {});
    place(static_cast<int>(n), chosen, deps);
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n)
    if (waiting[n]) own_group(static_cast<int>(n));

  // A node joins one of its producers' groups; another group of the same
  // backend that it reads (a branch from a graph input, such as a decoder's
  // cache quantized as it enters) stays apart. A group that another of its
  // backend reads directly, and reaches through no third group, is merged
  // into the reader: the partition stays connected and the graph of
  // partitions acyclic.
  // A pred of group b that can be merged into it, or -1.
  auto mergeable_into = [&](int b) {
    for (int a : groups[b].preds) {
      if (groups[a].backend != groups[b].backend) continue;
      bool elsewhere = false;
      for (int p : groups[b].preds) elsewhere = elsewhere || (p != a && reaches(a, p));
      if (!elsewhere) return a;
    }
    return -1;
  };
  // Passes until none merges (a merge renames a in the preds of groups scanned before).
  for (bool merged = true; merged;) {
    merged = false;
    for (int b = 0; b < static_cast<int>(groups.size()); ++b)
      for (int a; (a = mergeable_into(b)) >= 0; merged = true) {
        Group& into = groups[b];
        into.nodes.insert(into.nodes.end(), groups[a].nodes.begin(), groups[a].nodes.end());
        std::sort(into.nodes.begin(), into.nodes.end());  // node ids are topological
        for (int n : groups[a].nodes) group_of[n] = b;
        into.preds.insert(groups[a].preds.begin(), groups[a].preds.end());
        for (Group& g : groups)
          if (g.preds.erase(a) > 0 && &g != &into) g.preds.insert(b);
        groups[a] = Group{};  // empty: no partition
      }
  }

  // Kahn over groups, lowest index first: a stable, runnable order.
  std::vector<int> pending(groups.size(), 0);
  std::vector<std::vector<int>> succ(groups.size());
  for (size_t g = 0; g < groups.size(); ++g)
    for (int p : groups[g].preds) {
      ++pending[g];
      succ[p].push_back(static_cast<int>(g));
    }
  std::set<int> ready;
  for (size_t g = 0; g < groups.size(); ++g)
    if (pending[g] == 0) ready.insert(static_cast<int>(g));
  std::vector<std::vector<int>> out;
  while (!ready.empty()) {
    int g = *ready.begin();
    ready.erase(ready.begin());
    if (!groups[g].nodes.empty()) out.push_back(groups[g].nodes);
    for (int s : succ[g])
      if (--pending[s] == 0) ready.insert(s);
  }
  return out;
}

namespace {

// Overrides name nodes of the model and, unless fallback is allowed, registered backends.
Status check_overrides(const ir::Graph& graph, const BackendRegistry& registry,
                       const PlacementOptions& options) {
  std::unordered_map<std::string, int> node_by_name;
  for (size_t n = 0; n < graph.nodes.size(); ++n)
    node_by_name[graph.nodes[n].name] = static_cast<int>(n);
  for (const auto& [node_name, backend_id] : options.overrides) {
    if (!node_by_name.count(node_name))
      return not_found("override names node '" + node_name + "', which is not in the model");
    if (registry.find(backend_id) == nullptr && !options.allow_fallback)
      return not_found("override pins node '" + node_name + "' to unknown backend '" + backend_id +
                       "' (registered: " + join(registered_ids(registry), ", ") + ")");
  }
  return ok_status();
}

using Answers = std::unordered_map<std::string, bp_node_report>;

// One whole-graph support query per backend that may be asked.
Result<Answers> query_backends(const ir::Graph& graph, const BackendRegistry& registry,
                               const PlacementOptions& options, const NamedDataMap& weights,
                               const std::vector<std::string>& preference) {
  std::vector<int> all_nodes(graph.nodes.size());
  for (size_t n = 0; n < all_nodes.size(); ++n) all_nodes[n] = static_cast<int>(n);
  std::unique_ptr<GraphView> whole = GraphView::build(graph, all_nodes, &weights, graph.name);
  std::vector<std::string> asked = preference;
  for (const auto& kv : options.overrides)
    if (registry.find(kv.second) && std::find(asked.begin(), asked.end(), kv.second) == asked.end())
      asked.push_back(kv.second);
  Answers answers;
  for (const std::string& id : asked) {
    std::shared_ptr<LoadedBackend> backend = registry.find(id);
    bp_node_report report(graph.nodes.size());
    BP_RETURN_IF_ERROR(backend->check(backend->call([&] {
      return backend->api()->query_support(backend->instance(), whole->get(), &report);
    }),
                                      "query_support"));
    for (size_t n = 0; n < graph.nodes.size(); ++n)
      if (!report.reported[n]) {
        report.outcome[n] = BP_NODE_REJECTED;
        report.reason[n] = "not claimed by the backend";
      }
    answers.emplace(id, std::move(report));
  }
  return answers;
}

// "operator 'X' of domain 'd'", for a node of an operator a backend defines
// (API 1.3); "" for any other.
std::string backend_op_name(const ir::Graph& graph, const BackendRegistry& registry,
                            const ir::Node& node) {
  const int64_t opset = graph.opset(node.domain);
  const ir::OpSchema* schema =
      registry.ops().find(node.domain, node.op_type, opset > 0 ? opset : INT32_MAX);
  if (schema == nullptr || schema->provider().empty()) return "";
  return "operator '" + node.op_type + "' of domain '" + node.domain + "'";
}

// Node n's backend: its override if that backend takes it, else the first
// preferred backend that supports it and did not fail to compile it. A node
// of an operator a backend defines goes only to a backend that defines it,
// whatever the others answered.
Status place_node(const ir::Graph& graph, size_t n, const BackendRegistry& registry,
                  const PlacementOptions& options, const std::vector<std::string>& preference,
                  const Answers& answers, const Exclusions& excluded, NodePlacement* out) {
  const ir::Node& node = graph.nodes[n];
  NodePlacement& p = *out;
  const std::string backend_op = backend_op_name(graph, registry, node);
  // Why backend `id` may not run the node whatever it answered, or "".
  auto cannot = [&](const std::string& id) -> std::string {
    if (excluded.count({static_cast<int>(n), id}) > 0) return "failed to compile it";
    std::shared_ptr<LoadedBackend> b = registry.find(id);
    if (!backend_op.empty() && b != nullptr && !b->defines_op(node.domain, node.op_type))
      return "does not define " + backend_op;
    return "";
  };
  auto ov = options.overrides.find(node.name);
  if (ov != options.overrides.end()) {
    auto ans = answers.find(ov->second);
    const std::string not_this = cannot(ov->second);
    if (ans != answers.end() && ans->second.outcome[n] == BP_NODE_SUPPORTED && not_this.empty()) {
      p.backend = ov->second;
      p.why = "override";
      return ok_status();
    }
    std::string reason = ans == answers.end() ? "backend '" + ov->second + "' is not registered"
                         : !not_this.empty()
                             ? "backend '" + ov->second + "' " + not_this
                             : "backend '" + ov->second + "' rejects it: " + ans->second.reason[n];
    if (!options.allow_fallback)
      return unsupported(node.describe() + " is pinned to '" + ov->second + "' but " + reason);
    p.rejections.push_back(ov->second + ": " + reason);
  }
  for (const std::string& id : preference) {
    const bp_node_report& r = answers.at(id);
    if (std::string why = cannot(id); !why.empty()) {
      p.rejections.push_back(id + ": " + why);
      continue;
    }
    if (r.outcome[n] == BP_NODE_SUPPORTED) {
      p.backend = id;
      p.why = p.rejections.empty() ? "preferred" : "fallback";
      break;
    }
    p.rejections.push_back(id + ": " + r.reason[n]);
  }
  if (p.backend.empty())
    return unsupported(node.describe() + ": no backend supports " +
                       (backend_op.empty() ? "it" : backend_op) + " (" + join(p.rejections, "; ") +
                       ")");
  return ok_status();
}

}  // namespace

Result<Plan> make_plan(const ir::Graph& graph, const BackendRegistry& registry,
                       const PlacementOptions& options, const NamedDataMap& weights,
                       const Exclusions& excluded) {
  Plan plan;
  plan.preference = options.backends.empty() ? registry.default_preference() : options.backends;
  for (const std::string& id : plan.preference)
    if (registry.find(id) == nullptr)
      return not_found("unknown backend '" + id +
                       "' (registered: " + join(registered_ids(registry), ", ") + ")");
  if (plan.preference.empty()) return not_found("no backend to run the model on");
  BP_RETURN_IF_ERROR(check_overrides(graph, registry, options));
  // Host ops (control flow, sequences) are never offered to a backend: the
  // host runs them between the stages of a staged model.
  for (const ir::Node& node : graph.nodes) {
    const int64_t opset = graph.opset(node.domain);
    const ir::OpSchema* schema =
        ir::OpRegistry::builtin().find(node.domain, node.op_type, opset > 0 ? opset : INT32_MAX);
    if (schema != nullptr && schema->is_host_op())
      return unsupported(node.describe() +
                         ": runs on the host (control flow, sequences, optionals), never on a "
                         "backend; a model with it runs in stages (Runtime::load_model)");
  }
  BP_ASSIGN_OR_RETURN(Answers answers,
                      query_backends(graph, registry, options, weights, plan.preference));
  plan.placement.resize(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n)
    BP_RETURN_IF_ERROR(place_node(graph, n, registry, options, plan.preference, answers, excluded,
                                  &plan.placement[n]));

  std::vector<std::string> backend_of(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) backend_of[n] = plan.placement[n].backend;
  for (std::vector<int>& nodes : group_nodes(graph, backend_of)) {
    std::shared_ptr<LoadedBackend> backend = registry.find(backend_of[nodes.front()]);
    // A backend that only runs single ops gets one partition per node.
    if (!BP_TABLE_HAS(backend->api(), compile) && BP_TABLE_HAS(backend->api(), execute_node)) {
      for (int n : nodes) plan.partitions.push_back(Partition{backend, {n}, true});
    } else {
      plan.partitions.push_back(Partition{backend, std::move(nodes), false});
    }
  }
  return plan;
}

}  // namespace backplane
