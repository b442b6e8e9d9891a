#include "pipeline/artifact_load.hpp"

#include "core/log.hpp"
#include "pipeline/front_end.hpp"

#include <algorithm>

namespace backplane {
namespace {

Status verify_constant(const ir::Graph& graph, const NamedDataMap& weights, int v) {
  if (v < 0 || !graph.values[v].is_constant()) return ok_status();
  const void* data = nullptr;
  size_t size = 0;
  return weights.get(graph.values[v].constant_key, &data, &size);
}

Status verify_constants_of(const ir::Graph& graph, const NamedDataMap& weights,
                           const std::vector<int>& nodes) {
  for (int n : nodes)
    for (int v : graph.nodes[n].inputs) BP_RETURN_IF_ERROR(verify_constant(graph, weights, v));
  return ok_status();
}

// Plans one stored specialisation of a method. Constants read from the
// mapping without a backend asking the NamedDataMap, or before nodes are
// compiled again elsewhere, are verified here when checksums are lazy, so
// corruption is reported as such (and not as whatever the next backend makes
// of a failed weight read).
class StoredPlanner {
 public:
  StoredPlanner(BackendRegistry registry, std::shared_ptr<const ArtifactFile> file,
                const std::vector<StoredPartition>* partitions, const ir::Graph* graph,
                const NamedDataMap* weights, std::vector<std::string> preference)
      : registry_(std::move(registry)),
        file_(std::move(file)),
        partitions_(*partitions),
        graph_(graph),
        weights_(weights),
        preference_(std::move(preference)) {}

  Result<Plan> operator()(const Exclusions& excluded, std::vector<std::string>* notes) const {
    Plan plan;
    plan.preference = preference_;
    plan.placement.resize(graph_->nodes.size());
    std::vector<Slot> slots;
    std::vector<int> replace;  // nodes whose stored partition cannot be used
    for (const StoredPartition& stored : partitions_) {
      BP_ASSIGN_OR_RETURN(Slot slot, place(stored, slots.size(), excluded, notes));
      if (slot.keep) {
        for (int n : slot.nodes) plan.placement[n] = NodePlacement{stored.backend, "artifact", {}};
      } else {
        replace.insert(replace.end(), slot.nodes.begin(), slot.nodes.end());
      }
      slots.push_back(std::move(slot));
    }
    BP_RETURN_IF_ERROR(place_afresh(replace, excluded, &plan));
    assemble(slots, &plan);
    BP_RETURN_IF_ERROR(verify_direct_constants(*graph_, *weights_, plan));
    for (const std::string& note : *notes) log::warn(file_->path() + ": " + note);
    return plan;
  }

 private:
  // One stored partition: kept (on its backend) or given up (its nodes
  // placed afresh).
  struct Slot {
    bool keep = false;
    Partition partition;
    std::vector<int> nodes;
  };

  Status verify_constants_of(const std::vector<int>& nodes) const {
    return backplane::verify_constants_of(*graph_, *weights_, nodes);
  }

  Result<Slot> place(const StoredPartition& stored, size_t index, const Exclusions& excluded,
                     std::vector<std::string>* notes) const {
    Slot slot{false, {}, stored.nodes};
    const std::string& id = stored.backend;
    std::shared_ptr<LoadedBackend> backend = registry_.find(id);
    std::string why;
    bool use_payload = true;
    const bool was_excluded = std::any_of(slot.nodes.begin(), slot.nodes.end(), [&](int n) {
      return excluded.count({n, id}) > 0;
    });
    // A partition stored shape-polymorphic has no payload to read: it is
    // compiled so at load (compile_plan asks the model's polymorphic cache
    // first), as for the ONNX model.
    const bool has_payload = stored.payload_segment >= 0 && !stored.polymorphic;
    if (backend == nullptr) {
      why = "backend '" + id + "' is not available";
    } else if (was_excluded && has_payload && !stored.imperative &&
               BP_TABLE_HAS(backend->api(), compile) && BP_TABLE_HAS(backend->api(), deserialize) &&
               stored.api_major == backend->api()->api_major) {
      // The backend failed to read its payload (a payload format it no
      // longer reads): compile the partition on it from the portable graph.
      // (Exclusions only ever come from a failed deserialize here: were
      // that compile to fail, the executor stops for lack of progress.)
      use_payload = false;
      BP_RETURN_IF_ERROR(verify_constants_of(slot.nodes));
      // (The deserialize failure itself is already a note, with the
      // backend's reason: a payload it cannot read, or one made for another
      // device or driver.)
      notes->push_back("partition " + std::to_string(index) + " on '" + id +
                       "': compiling it on '" + id +
                       "' from the portable graph, its stored payload refused (see above)");
    } else if (was_excluded) {
      why = "backend '" + id + "' could not load its compiled form";
    } else if (stored.imperative && !BP_TABLE_HAS(backend->api(), execute_node)) {
      why = "backend '" + id + "' no longer runs single ops";
    }
    if (!why.empty()) {
      BP_RETURN_IF_ERROR(verify_constants_of(slot.nodes));
      notes->push_back(why + ": recompiling its " + std::to_string(slot.nodes.size()) +
                       " node(s) from the portable graph on the next backend that supports them");
      return slot;
    }
    slot.keep = true;
    slot.partition.backend = backend;
    slot.partition.nodes = slot.nodes;
    slot.partition.imperative = stored.imperative;
    const bool compatible = stored.api_major == backend->api()->api_major;
    if (has_payload && compatible && use_payload) {
      const uint8_t* data = nullptr;
      size_t size = 0;
      BP_RETURN_IF_ERROR(
          file_->segment(static_cast<uint32_t>(stored.payload_segment), &data, &size));
      slot.partition.payload = data;
      slot.partition.payload_size = size;
    } else if (has_payload && use_payload) {
      notes->push_back("partition on '" + id + "' was compiled for backend API " +
                       std::to_string(stored.api_major) +
                       ".x; recompiling it from the portable graph");
    }
    return slot;
  }

  // Asks every candidate about the whole graph once, then uses the answer
  // for the nodes that need a new home (never the backend that lost them).
  Status place_afresh(const std::vector<int>& replace, const Exclusions& excluded,
                      Plan* plan) const {
    if (replace.empty()) return ok_status();
    PlacementOptions placement;
    placement.backends = preference_;
    BP_ASSIGN_OR_RETURN(Plan fresh, make_plan(*graph_, registry_, placement, *weights_, excluded));
    for (int n : replace) {
      plan->placement[n] = fresh.placement[n];
      plan->placement[n].why = "recompiled (" + fresh.placement[n].why + ")";
    }
    return ok_status();
  }

  // Kept partitions as stored; the nodes of a given-up one form partitions
  // of consecutive nodes (in stored order) on the same new backend, which
  // keeps execution order valid.
  void assemble(std::vector<Slot>& slots, Plan* plan) const {
    for (Slot& slot : slots) {
      if (slot.keep) {
        plan->partitions.push_back(std::move(slot.partition));
        continue;
      }
      for (int n : slot.nodes) {
        std::shared_ptr<LoadedBackend> b = registry_.find(plan->placement[n].backend);
        bool imperative = !BP_TABLE_HAS(b->api(), compile);
        std::vector<Partition>& parts = plan->partitions;
        if (parts.empty() || parts.back().backend != b || imperative ||
            parts.back().payload != nullptr || parts.back().imperative ||
            std::find(slot.nodes.begin(), slot.nodes.end(), parts.back().nodes.front()) ==
                slot.nodes.end())
          parts.push_back(Partition{b, {}, imperative});
        parts.back().nodes.push_back(n);
      }
    }
  }

  const BackendRegistry registry_;
  std::shared_ptr<const ArtifactFile> file_;
  const std::vector<StoredPartition>& partitions_;  // held by the planner's owner
  const ir::Graph* graph_;
  const NamedDataMap* weights_;
  std::vector<std::string> preference_;
};

// The caller's preference, else the one stored (backends present here),
// else the default; then every other registered backend.
std::vector<std::string> preference_for(const BackendRegistry& registry, const StoredMethod& method,
                                        const ModelOptions& options) {
  std::vector<std::string> preference = options.backends;
  if (preference.empty())
    for (const std::string& id : method.preference)
      if (registry.find(id)) preference.push_back(id);
  if (preference.empty()) preference = registry.default_preference();
  for (const std::string& id : registry.default_preference())
    if (std::find(preference.begin(), preference.end(), id) == preference.end())
      preference.push_back(id);
  return preference;
}

// The key of a constant of `graph` the artifact does not store, or "": the
// stored partitions were compiled against those bytes (the portable
// weights, and what the signature folded).
std::string missing_constant(const ArtifactFile& file, const ir::Graph& graph) {
  const auto& named = file.named_data();  // sorted by key
  for (const ir::Value& v : graph.values) {
    if (!v.is_constant()) continue;
    auto it = std::lower_bound(
        named.begin(), named.end(), v.constant_key,
        [](const ArtifactNamedData& d, const std::string& key) { return d.key < key; });
    if (it == named.end() || it->key != v.constant_key) return v.constant_key;
  }
  return "";
}

}  // namespace

Status verify_direct_constants(const ir::Graph& graph, const NamedDataMap& weights,
                               const Plan& plan) {
  for (const Partition& p : plan.partitions)
    if (p.imperative) BP_RETURN_IF_ERROR(verify_constants_of(graph, weights, p.nodes));
  for (int v : graph.outputs) BP_RETURN_IF_ERROR(verify_constant(graph, weights, v));
  return ok_status();
}

Result<ArtifactMethodLoad> load_artifact_method(const BackendRegistry& registry,
                                                const std::string& path,
                                                const ModelOptions& options) {
  ArtifactMethodLoad load;
  BP_ASSIGN_OR_RETURN(load.file,
                      ArtifactFile::open(path, options.external_data, options.lazy_checksums));
  BP_ASSIGN_OR_RETURN(int m, load.file->find_method(options.method));
  BP_ASSIGN_OR_RETURN(LoadedMethod method, load.file->load_method(m));
  const StoredMethod& stored = load.file->methods()[static_cast<size_t>(m)];
  load.portable = std::make_unique<ir::Graph>(std::move(method.portable));
  load.weights = std::make_unique<ArtifactDataMap>(load.file);
  load.preference = preference_for(registry, stored, options);

  // Format 1.0 stores the one graph as it was specialised: specialising it
  // again must give it back, and it is its own digest.
  auto specializations =
      std::make_shared<const std::vector<StoredSpecialization>>(std::move(method.specializations));
  const bool format_1_0 = !stored.has_portable;
  const uint64_t digest_1_0 = format_1_0 ? specialization_digest(*load.portable) : 0;
  load.stored.method = stored.name;
  load.stored.key_prefix = stored.name + "/";
  for (const StoredSpecialization& s : *specializations)
    load.stored.signatures.push_back(s.signature);
  std::shared_ptr<const ArtifactFile> file = load.file;
  load.stored.planner = [registry, file, specializations, format_1_0, digest_1_0,
                         preference = load.preference](size_t index, const ir::Graph& graph,
                                                       const NamedDataMap& weights,
                                                       std::string* why) -> Planner {
    const StoredSpecialization& s = (*specializations)[index];
    const uint64_t expected = format_1_0 ? digest_1_0 : s.digest;
    if (graph.nodes.size() != s.num_nodes) {
      *why = "was compiled for a graph of " + std::to_string(s.num_nodes) +
             " nodes; its signature gives one of " + std::to_string(graph.nodes.size()) + " now";
      return {};
    }
    if (specialization_digest(graph) != expected) {
      *why =
          "was compiled for a graph other than the one its signature gives now (the digests "
          "differ)";
      return {};
    }
    if (std::string key = missing_constant(*file, graph); !key.empty()) {
      *why = "lacks the constant '" + key + "'";
      return {};
    }
    auto planner = std::make_shared<StoredPlanner>(registry, file, &s.partitions, &graph, &weights,
                                                   preference);
    // (`planner` refers to `s`, which `specializations` holds.)
    return [planner, specializations](const Exclusions& excluded, std::vector<std::string>* notes) {
      return (*planner)(excluded, notes);
    };
  };
  return load;
}

}  // namespace backplane
