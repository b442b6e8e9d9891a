#include "partition/partitioner.hpp"

#include "partition/graph_view.hpp"

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

Result<Plan> make_plan(const ir::Graph& graph, const BackendRegistry& registry, const ModelOptions& options,
                       const NamedDataMap& weights) {
  Plan plan;
  plan.preference = options.backends.empty() ? registry.default_preference() : options.backends;
  for (const std::string& id : plan.preference)
    if (registry.find(id) == nullptr)
      return not_found("unknown backend '" + id + "' (registered: " + join(registered_ids(registry), ", ") + ")");
  if (plan.preference.empty()) return not_found("no backend to run the model on");

  std::unordered_map<std::string, int> node_by_name;
  for (size_t n = 0; n < graph.nodes.size(); ++n) node_by_name[graph.nodes[n].name] = static_cast<int>(n);
  for (const auto& [node_name, backend_id] : options.overrides) {
    if (!node_by_name.count(node_name))
      return not_found("override names node '" + node_name + "', which is not in the model");
    if (registry.find(backend_id) == nullptr && !options.allow_fallback)
      return not_found("override pins node '" + node_name + "' to unknown backend '" + backend_id +
                       "' (registered: " + join(registered_ids(registry), ", ") + ")");
  }

  // One whole-graph support query per backend that may be asked.
  std::vector<int> all_nodes(graph.nodes.size());
  for (size_t n = 0; n < all_nodes.size(); ++n) all_nodes[n] = static_cast<int>(n);
  std::unique_ptr<GraphView> whole = GraphView::build(graph, all_nodes, &weights, graph.name);
  std::vector<std::string> asked = plan.preference;
  for (const auto& kv : options.overrides)
    if (registry.find(kv.second) && std::find(asked.begin(), asked.end(), kv.second) == asked.end())
      asked.push_back(kv.second);
  std::unordered_map<std::string, bp_node_report> answers;
  for (const std::string& id : asked) {
    std::shared_ptr<Backend> backend = registry.find(id);
    bp_node_report report(graph.nodes.size());
    BP_RETURN_IF_ERROR(backend->check(backend->api()->query_support(backend->instance(), whole->get(), &report),
                                      "query_support"));
    for (size_t n = 0; n < graph.nodes.size(); ++n)
      if (!report.reported[n]) {
        report.outcome[n] = BP_NODE_REJECTED;
        report.reason[n] = "not claimed by the backend";
      }
    answers.emplace(id, std::move(report));
  }

  plan.placement.resize(graph.nodes.size());
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const ir::Node& node = graph.nodes[n];
    NodePlacement& p = plan.placement[n];
    auto ov = options.overrides.find(node.name);
    if (ov != options.overrides.end()) {
      auto ans = answers.find(ov->second);
      if (ans != answers.end() && ans->second.outcome[n] == BP_NODE_SUPPORTED) {
        p.backend = ov->second;
        p.why = "override";
        continue;
      }
      std::string reason = ans == answers.end() ? "backend '" + ov->second + "' is not registered"
                                                : "backend '" + ov->second + "' rejects it: " + ans->second.reason[n];
      if (!options.allow_fallback)
        return unsupported(node.describe() + " is pinned to '" + ov->second + "' but " + reason);
      p.rejections.push_back(ov->second + ": " + reason);
    }
    for (const std::string& id : plan.preference) {
      const bp_node_report& r = answers.at(id);
      if (r.outcome[n] == BP_NODE_SUPPORTED) {
        p.backend = id;
        p.why = p.rejections.empty() ? "preferred" : "fallback";
        break;
      }
      p.rejections.push_back(id + ": " + r.reason[n]);
    }
    if (p.backend.empty())
      return unsupported(node.describe() + ": no backend supports it (" + join(p.rejections, "; ") + ")");
  }

  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const std::string& id = plan.placement[n].backend;
    if (plan.partitions.empty() || plan.partitions.back().backend->id() != id)
      plan.partitions.push_back(Partition{registry.find(id), {}});
    plan.partitions.back().nodes.push_back(static_cast<int>(n));
  }
  return plan;
}

}  // namespace backplane
