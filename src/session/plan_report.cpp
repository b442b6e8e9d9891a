// The printable plan: text for people, JSON for scripts, DOT for Graphviz.
#include "session/specialization.hpp"

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

// What every format reads: the model's graph, plan, partitions and copies.
struct PlanReport {
  const ir::Graph& g;
  const Plan& plan;
  const std::vector<PartitionDescription>& partitions;
  const std::vector<CopyDescription>& copies;
  std::vector<std::vector<int>> nodes_of;  // node ids per partition
  std::vector<int> partition_of;           // per node
  std::vector<std::string> note_of;        // per node: its backend's note, or ""
};

std::string as_json(const PlanReport& r) {
  const ir::Graph& g = r.g;
  nlohmann::json j;
  j["model"] = g.source;
  j["preference"] = r.plan.preference;
  j["nodes"] = nlohmann::json::array();
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const NodePlacement& p = r.plan.placement[n];
    j["nodes"].push_back({{"name", g.nodes[n].name},
                          {"op_type", g.nodes[n].op_type},
                          {"backend", p.backend},
                          {"why", p.why},
                          {"partition", r.partition_of[n]},
                          {"note", r.note_of[n]},
                          {"rejected_by", p.rejections}});
  }
  j["partitions"] = nlohmann::json::array();
  for (const PartitionDescription& d : r.partitions)
    j["partitions"].push_back({{"backend", d.backend},
                               {"nodes", d.nodes},
                               {"imperative", d.imperative},
                               {"inputs", d.inputs},
                               {"outputs", d.outputs}});
  j["copies"] = nlohmann::json::array();
  for (const CopyDescription& c : r.copies)
    j["copies"].push_back(
        {{"value", c.value}, {"from", c.from}, {"to", c.to}, {"bytes", c.bytes}, {"once", c.once}});
  return j.dump(2);
}

// Graphviz: one cluster per partition, nodes coloured by backend, copies in red.
std::string as_dot(const PlanReport& r) {
  const ir::Graph& g = r.g;
  std::ostringstream os;
  std::map<std::string, std::string> colour;
  for (const auto& d : r.partitions)
    if (!colour.count(d.backend)) colour[d.backend] = kPalette[colour.size() % std::size(kPalette)];
  os << "digraph plan {\n  rankdir=TB;\n  node [shape=box, style=\"filled,rounded\", "
        "fontname=\"Helvetica\"];\n";
  for (size_t i = 0; i < r.nodes_of.size(); ++i) {
    const PartitionDescription& d = r.partitions[i];
    os << "  subgraph cluster_" << i << " {\n    label=\"partition " << i << ": "
       << dot_escape(d.backend) << (d.imperative ? " (imperative)" : "")
       << "\";\n    style=dashed;\n";
    for (int n : r.nodes_of[i])
      os << "    n" << n << " [label=\"" << dot_escape(g.nodes[n].name) << "\\n"
         << dot_escape(g.nodes[n].op_type) << "\", fillcolor=\"" << colour[d.backend] << "\"];\n";
    os << "  }\n";
  }
  std::vector<bool> is_input(g.values.size(), false), is_output(g.values.size(), false);
  for (int v : g.inputs) {
    is_input[v] = true;
    os << "  v" << v << " [label=\"" << dot_escape(g.values[v].name)
       << "\", shape=ellipse, style=solid];\n";
  }
  for (int v : g.outputs) {
    is_output[v] = true;
    os << "  out" << v << " [label=\"" << dot_escape(g.values[v].name)
       << "\", shape=ellipse, style=solid];\n";
  }
  std::map<std::string, std::string> copied;  // value name -> "from -> to"
  for (const CopyDescription& c : r.copies)
    copied[c.value] += (copied[c.value].empty() ? "" : ", ") + c.from + "->" + c.to;
  for (size_t n = 0; n < g.nodes.size(); ++n)
    for (int v : g.nodes[n].inputs) {
      if (v < 0 || g.values[v].is_constant()) continue;
      int producer = g.values[v].producer;
      std::string from = producer >= 0
                             ? std::string("n").append(std::to_string(producer))
                             : (is_input[v] ? std::string("v").append(std::to_string(v)) : "");
      if (from.empty()) continue;
      auto c = copied.find(g.values[v].name);
      os << "  " << from << " -> n" << n;
      if (c != copied.end())
        os << " [color=red, penwidth=2, label=\"copy " << dot_escape(c->second) << "\"]";
      os << ";\n";
    }
  for (int v : g.outputs)
    if (g.values[v].producer >= 0) os << "  n" << g.values[v].producer << " -> out" << v << ";\n";
  os << "  subgraph cluster_legend {\n    label=\"backends\";\n";
  size_t k = 0;
  for (const auto& [backend, fill] : colour)
    os << "    legend" << k++ << " [label=\"" << dot_escape(backend) << "\", fillcolor=\"" << fill
       << "\"];\n";
  os << "  }\n}\n";
  return os.str();
}

std::string as_text(const PlanReport& r) {
  const ir::Graph& g = r.g;
  std::ostringstream os;
  os << "model       " << g.source << "\n";
  os << "preference  ";
  for (size_t i = 0; i < r.plan.preference.size(); ++i)
    os << (i ? ", " : "") << r.plan.preference[i];
  os << "\nnodes       " << g.nodes.size() << "\n";
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const NodePlacement& p = r.plan.placement[n];
    os << "  " << g.nodes[n].name << " (" << g.nodes[n].op_type << ") -> " << p.backend << " ["
       << p.why << ", partition " << r.partition_of[n] << "]\n";
    if (!r.note_of[n].empty()) os << "      " << r.note_of[n] << "\n";
    for (const std::string& why : p.rejections) os << "      not on " << why << "\n";
  }
  os << "partitions  " << r.partitions.size() << "\n";
  for (size_t i = 0; i < r.partitions.size(); ++i) {
    const PartitionDescription& d = r.partitions[i];
    os << "  [" << i << "] " << d.backend << (d.imperative ? " (imperative)" : "") << ": "
       << d.nodes.size() << " nodes, " << d.inputs.size() << " inputs, " << d.outputs.size()
       << " outputs\n";
  }
  os << "copies      " << r.copies.size() << "\n";
  for (const CopyDescription& c : r.copies)
    os << "  " << c.value << ": " << c.from << " -> " << c.to << " (" << c.bytes << " bytes"
       << (c.once ? ", once" : "") << ")\n";
  return os.str();
}

}  // namespace

std::string Specialization::describe_plan(PlanFormat format) const {
  const size_t num_nodes = graph_->nodes.size();
  PlanReport report{*graph_,
                    plan(),
                    partitions(),
                    copies(),
                    {},
                    std::vector<int>(num_nodes, -1),
                    std::vector<std::string>(num_nodes)};
  for (size_t i = 0; i < executable().size(); ++i) {
    report.nodes_of.push_back(plan().partitions[i].nodes);
    const std::vector<std::string>& notes = executable()[i]->notes;
    for (size_t k = 0; k < report.nodes_of.back().size(); ++k) {
      const int n = report.nodes_of.back()[k];
      report.partition_of[n] = static_cast<int>(i);
      if (k < notes.size()) report.note_of[n] = notes[k];
    }
  }
  switch (format) {
    case PlanFormat::kJson:
      return as_json(report);
    case PlanFormat::kDot:
      return as_dot(report);
    case PlanFormat::kText:
      break;
  }
  return as_text(report);
}

}  // namespace backplane
