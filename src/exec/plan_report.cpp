// The printable plan: text for people, JSON for scripts, DOT for Graphviz.
#include "exec/executor.hpp"

#include <nlohmann/json.hpp>

#include <map>
#include <sstream>

namespace backplane {
namespace {

// Distinct, readable fill colours, one per backend in order of first use.
const char* kPalette[] = {"#8dd3c7", "#fdb462", "#bebada", "#fb8072", "#80b1d3",
                          "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5"};

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string CompiledModel::describe_plan(PlanFormat format) const {
  const ir::Graph& g = *graph_;
  std::vector<int> partition_of(g.nodes.size(), -1);
  for (size_t i = 0; i < compiled_.size(); ++i)
    for (int n : compiled_[i]->view->node_ids()) partition_of[n] = static_cast<int>(i);

  if (format == PlanFormat::kJson) {
    nlohmann::json j;
    j["model"] = g.source;
    j["preference"] = plan_.preference;
    j["nodes"] = nlohmann::json::array();
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      const NodePlacement& p = plan_.placement[n];
      j["nodes"].push_back({{"name", g.nodes[n].name},
                            {"op_type", g.nodes[n].op_type},
                            {"backend", p.backend},
                            {"why", p.why},
                            {"partition", partition_of[n]},
                            {"rejected_by", p.rejections}});
    }
    j["partitions"] = nlohmann::json::array();
    for (const PartitionDescription& d : partition_desc_)
      j["partitions"].push_back({{"backend", d.backend},
                                 {"nodes", d.nodes},
                                 {"imperative", d.imperative},
                                 {"inputs", d.inputs},
                                 {"outputs", d.outputs}});
    j["copies"] = nlohmann::json::array();
    for (const CopyDescription& c : copy_desc_)
      j["copies"].push_back(
          {{"value", c.value}, {"from", c.from}, {"to", c.to}, {"bytes", c.bytes}, {"once", c.once}});
    return j.dump(2);
  }

  std::ostringstream os;
  if (format == PlanFormat::kDot) {
    std::map<std::string, std::string> colour;
    for (const auto& d : partition_desc_)
      if (!colour.count(d.backend)) colour[d.backend] = kPalette[colour.size() % std::size(kPalette)];
    os << "digraph plan {\n  rankdir=TB;\n  node [shape=box, style=\"filled,rounded\", fontname=\"Helvetica\"];\n";
    for (size_t i = 0; i < compiled_.size(); ++i) {
      const PartitionDescription& d = partition_desc_[i];
      os << "  subgraph cluster_" << i << " {\n    label=\"partition " << i << ": " << dot_escape(d.backend)
         << (d.imperative ? " (imperative)" : "") << "\";\n    style=dashed;\n";
      for (int n : compiled_[i]->view->node_ids())
        os << "    n" << n << " [label=\"" << dot_escape(g.nodes[n].name) << "\\n" << dot_escape(g.nodes[n].op_type)
           << "\", fillcolor=\"" << colour[d.backend] << "\"];\n";
      os << "  }\n";
    }
    std::vector<bool> is_input(g.values.size(), false), is_output(g.values.size(), false);
    for (int v : g.inputs) {
      is_input[v] = true;
      os << "  v" << v << " [label=\"" << dot_escape(g.values[v].name) << "\", shape=ellipse, style=solid];\n";
    }
    for (int v : g.outputs) {
      is_output[v] = true;
      os << "  out" << v << " [label=\"" << dot_escape(g.values[v].name) << "\", shape=ellipse, style=solid];\n";
    }
    std::map<std::string, std::string> copied;  // value name -> "from -> to"
    for (const CopyDescription& c : copy_desc_) copied[c.value] += (copied[c.value].empty() ? "" : ", ") + c.from + "->" + c.to;
    for (size_t n = 0; n < g.nodes.size(); ++n)
      for (int v : g.nodes[n].inputs) {
        if (v < 0 || g.values[v].is_constant()) continue;
        int producer = g.values[v].producer;
        std::string from = producer >= 0 ? "n" + std::to_string(producer) : (is_input[v] ? "v" + std::to_string(v) : "");
        if (from.empty()) continue;
        auto c = copied.find(g.values[v].name);
        os << "  " << from << " -> n" << n;
        if (c != copied.end()) os << " [color=red, penwidth=2, label=\"copy " << dot_escape(c->second) << "\"]";
        os << ";\n";
      }
    for (int v : g.outputs)
      if (g.values[v].producer >= 0) os << "  n" << g.values[v].producer << " -> out" << v << ";\n";
    os << "  subgraph cluster_legend {\n    label=\"backends\";\n";
    size_t k = 0;
    for (const auto& [backend, fill] : colour)
      os << "    legend" << k++ << " [label=\"" << dot_escape(backend) << "\", fillcolor=\"" << fill << "\"];\n";
    os << "  }\n}\n";
    return os.str();
  }

  os << "model       " << g.source << "\n";
  os << "preference  ";
  for (size_t i = 0; i < plan_.preference.size(); ++i) os << (i ? ", " : "") << plan_.preference[i];
  os << "\nnodes       " << g.nodes.size() << "\n";
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const NodePlacement& p = plan_.placement[n];
    os << "  " << g.nodes[n].name << " (" << g.nodes[n].op_type << ") -> " << p.backend << " [" << p.why
       << ", partition " << partition_of[n] << "]\n";
    for (const std::string& r : p.rejections) os << "      not on " << r << "\n";
  }
  os << "partitions  " << partition_desc_.size() << "\n";
  for (size_t i = 0; i < partition_desc_.size(); ++i) {
    const PartitionDescription& d = partition_desc_[i];
    os << "  [" << i << "] " << d.backend << (d.imperative ? " (imperative)" : "") << ": " << d.nodes.size()
       << " nodes, " << d.inputs.size() << " inputs, " << d.outputs.size() << " outputs\n";
  }
  os << "copies      " << copy_desc_.size() << "\n";
  for (const CopyDescription& c : copy_desc_)
    os << "  " << c.value << ": " << c.from << " -> " << c.to << " (" << c.bytes << " bytes" << (c.once ? ", once" : "")
       << ")\n";
  return os.str();
}

}  // namespace backplane
