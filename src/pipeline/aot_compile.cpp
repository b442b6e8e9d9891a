#include "pipeline/aot_compile.hpp"

#include "artifact/artifact.hpp"
#include "core/log.hpp"
#include "core/named_blob_store.hpp"
#include "core/tensor_data_map.hpp"
#include "pipeline/compile.hpp"
#include "pipeline/front_end.hpp"
#include "registry/byte_writer.hpp"
#include "registry/node_report.hpp"

#include <filesystem>
#include <set>

namespace fs = std::filesystem;

namespace backplane {
namespace {

// One method being compiled: its graph, plan and compiled partitions.
struct MethodWork {
  std::string name;
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<TensorDataMap> weights;
  PlacementOptions placement;
  Exclusions excluded;
  Plan plan;
  std::vector<std::unique_ptr<GraphView>> views;  // per partition
  std::vector<CompiledHandle> compiled;           // per partition (empty if imperative)
};

// A partition of one method given to a backend: (method, partition) indices.
using PartitionRef = std::pair<size_t, size_t>;

// Gives every constant of `g` the key "<method>/<key>", so methods compiled
// together never collide (identical bytes are still stored once).
void prefix_constant_keys(ir::Graph& g, const std::string& method) {
  std::unordered_map<std::string, Tensor> renamed;
  for (ir::Value& v : g.values)
    if (v.is_constant()) {
      std::string key = method + "/" + v.constant_key;
      if (!renamed.count(key)) renamed[key] = g.constants.at(v.constant_key);
      v.constant_key = key;
    }
  g.constants = std::move(renamed);
}

// The data file's name (next to `output`), or "" when weights stay in the .bpk.
Result<std::string> external_data_name(const CompileOptions& options, const std::string& output) {
  if (options.external_data.empty()) return std::string();
  fs::path ext = fs::absolute(options.external_data).lexically_normal();
  fs::path out = fs::absolute(output).lexically_normal();
  if (ext.parent_path() != out.parent_path())
    return invalid_argument("--external-data " + options.external_data +
                            " must be in the same directory as " + output);
  if (ext == out) return invalid_argument("the external data file must differ from the artifact");
  return ext.filename().string();
}

// Imports every method; each gets the overrides that name one of its nodes.
Result<std::vector<MethodWork>> import_methods(
    const std::vector<std::pair<std::string, std::string>>& methods,
    const CompileOptions& options) {
  std::vector<MethodWork> work;
  std::set<std::string> overridden_seen;
  for (const auto& [name, path] : methods) {
    if (name.empty() || name.find('/') != std::string::npos)
      return invalid_argument("method name '" + name + "' must be non-empty and contain no '/'");
    for (const MethodWork& w : work)
      if (w.name == name) return invalid_argument("method '" + name + "' is given twice");
    MethodWork w;
    w.name = name;
    BP_ASSIGN_OR_RETURN(w.graph,
                        import_onnx_model(path, options.input_shapes, UnknownInputShapes::kIgnore));
    prefix_constant_keys(*w.graph, name);
    w.weights = std::make_unique<TensorDataMap>(&w.graph->constants);
    w.placement = options;
    w.placement.overrides.clear();
    for (const auto& [node, backend] : options.overrides)
      for (const ir::Node& n : w.graph->nodes)
        if (n.name == node) {
          w.placement.overrides[node] = backend;
          overridden_seen.insert(node);
        }
    work.push_back(std::move(w));
  }
  for (const auto& kv : options.overrides)
    if (!overridden_seen.count(kv.first))
      return not_found("override names node '" + kv.first + "', which is in no method");
  return work;
}

Status plan_method(MethodWork& w, const BackendRegistry& registry) {
  w.compiled.clear();
  w.views.clear();
  BP_ASSIGN_OR_RETURN(w.plan, make_plan(*w.graph, registry, w.placement, *w.weights, w.excluded),
                      w.graph->source);
  for (size_t i = 0; i < w.plan.partitions.size(); ++i)
    w.views.push_back(GraphView::build(*w.graph, w.plan.partitions[i].nodes, w.weights.get(),
                                       w.name + "/partition_" + std::to_string(i)));
  w.compiled.resize(w.plan.partitions.size());
  return ok_status();
}

// Compiles `mine` (every symbolic partition `backend` got, of every method)
// in one compile_all call, or one compile each when the backend has none.
// Returns false if the backend failed nodes (now excluded).
Result<bool> compile_on_backend(const std::shared_ptr<LoadedBackend>& backend,
                                const std::vector<PartitionRef>& mine,
                                std::vector<MethodWork>& work, NamedBlobStore& store,
                                int num_threads) {
  std::vector<const bp_graph_view_t*> views;
  std::vector<bp_node_report> reports;
  for (auto [m, i] : mine) {
    views.push_back(work[m].views[i]->get());
    reports.emplace_back(work[m].plan.partitions[i].nodes.size());
  }
  std::vector<bp_node_report_t*> report_ptrs;
  for (auto& r : reports) report_ptrs.push_back(&r);
  std::vector<bp_compiled_t*> out(mine.size(), nullptr);
  bp_compile_options_t opts = compile_options(num_threads, &store);
  const bp_backend_api_t* api = backend->api();
  Status status;
  if (BP_TABLE_HAS(api, compile_all)) {
    status = backend->check(backend->call([&] {
      return api->compile_all(backend->instance(), views.size(), views.data(), &opts,
                              report_ptrs.data(), out.data());
    }),
                            "compile_all");
  } else {
    for (size_t k = 0; k < views.size() && status.ok(); ++k)
      status = backend->check(backend->call([&] {
        return api->compile(backend->instance(), views[k], &opts, report_ptrs[k], &out[k]);
      }),
                              std::string("compile ") + views[k]->name);
  }
  // Whatever came back is owned now, also on failure.
  for (size_t k = 0; k < mine.size(); ++k)
    work[mine[k].first].compiled[mine[k].second] = CompiledHandle(backend, out[k]);
  BP_RETURN_IF_ERROR(status);
  bool failed = false;
  for (size_t k = 0; k < mine.size(); ++k) {
    MethodWork& w = work[mine[k].first];
    if (exclude_failed_nodes(*w.graph, w.plan.partitions[mine[k].second], reports[k], &w.excluded))
      failed = true;
    if (out[k] == nullptr && !failed)
      return internal_error("backend '" + backend->id() + "' compiled " + views[k]->name +
                            " into nothing");
  }
  return !failed;
}

// One round: plan every method, then let each backend compile all its
// partitions of all methods at once.
Result<bool> plan_and_compile_all(std::vector<MethodWork>& work, const BackendRegistry& registry,
                                  NamedBlobStore& store, int num_threads) {
  for (MethodWork& w : work) BP_RETURN_IF_ERROR(plan_method(w, registry));
  store = NamedBlobStore();
  bool complete = true;
  for (const auto& backend : registry.all()) {
    std::vector<PartitionRef> mine;
    for (size_t m = 0; m < work.size(); ++m)
      for (size_t i = 0; i < work[m].plan.partitions.size(); ++i)
        if (work[m].plan.partitions[i].backend == backend && !work[m].plan.partitions[i].imperative)
          mine.emplace_back(m, i);
    if (mine.empty()) continue;
    BP_ASSIGN_OR_RETURN(bool compiled, compile_on_backend(backend, mine, work, store, num_threads));
    if (!compiled) complete = false;
  }
  return complete;
}

// What the artifact stores of one compiled method: partitions with their
// backends' payloads; the method's weights go into `store`.
Result<ArtifactMethod> serialize_method(const MethodWork& w, NamedBlobStore& store) {
  ArtifactMethod method;
  method.name = w.name;
  method.graph = w.graph.get();
  method.preference = w.plan.preference;
  for (size_t i = 0; i < w.plan.partitions.size(); ++i) {
    const Partition& p = w.plan.partitions[i];
    const LoadedBackend& backend = *p.backend;
    ArtifactPartition stored;
    stored.backend = backend.id();
    stored.api_major = backend.api()->api_major;
    stored.api_minor = backend.api()->api_minor;
    stored.nodes = p.nodes;
    stored.imperative = p.imperative;
    const std::string name = w.views[i]->get()->name;
    if (w.compiled[i] && backend.has_flag(BP_BACKEND_FLAG_SERIALIZE) &&
        BP_TABLE_HAS(backend.api(), serialize)) {
      bp_byte_writer writer;
      BP_RETURN_IF_ERROR(backend.check(backend.call([&] {
        return backend.api()->serialize(w.compiled[i].get(), store.as_abi(), &writer);
      }),
                                       "serialize " + name));
      stored.has_payload = true;
      stored.payload = std::move(writer.bytes);
    } else if (!p.imperative) {
      log::info(
          name + ": backend '" + backend.id() +
          "' does not serialize; the artifact keeps the portable graph and it is compiled at load");
    }
    method.partitions.push_back(std::move(stored));
  }
  for (const auto& [key, tensor] : w.graph->constants)
    BP_RETURN_IF_ERROR(store.add_borrowed(key, tensor.data(), tensor.size_bytes(), 0, ""));
  return method;
}

}  // namespace

Result<CompileReport> compile_artifact(
    const BackendRegistry& registry,
    const std::vector<std::pair<std::string, std::string>>& methods, const std::string& output,
    const CompileOptions& options, int num_threads) {
  if (methods.empty()) return invalid_argument("nothing to compile");
  BP_ASSIGN_OR_RETURN(std::string external_name, external_data_name(options, output));
  BP_ASSIGN_OR_RETURN(std::vector<MethodWork> work, import_methods(methods, options));

  NamedBlobStore store;
  auto num_excluded = [&] {
    size_t n = 0;
    for (const MethodWork& w : work) n += w.excluded.size();
    return n;
  };
  BP_RETURN_IF_ERROR(replan_until_compiled(
      [&] { return plan_and_compile_all(work, registry, store, num_threads); }, num_excluded));

  // Payloads, then the portable graphs' weights, into the store and file.
  std::vector<ArtifactMethod> stored_methods;
  CompileReport report;
  for (const MethodWork& w : work) {
    BP_ASSIGN_OR_RETURN(ArtifactMethod method, serialize_method(w, store));
    report.methods.push_back(w.name);
    report.partitions += w.plan.partitions.size();
    stored_methods.push_back(std::move(method));
  }
  if (!external_name.empty()) store.place_all(external_name);
  BP_ASSIGN_OR_RETURN(ArtifactSizes sizes, write_artifact(output, stored_methods, store));
  report.payload_bytes = sizes.payload_bytes;
  report.named_data_keys = store.keys().size();
  report.requested_bytes = store.requested_bytes();
  report.stored_bytes = store.stored_bytes();
  report.file_bytes = sizes.file_bytes;
  report.external_bytes = sizes.external_bytes;
  return report;
}

}  // namespace backplane
