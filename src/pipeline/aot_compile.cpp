#include "pipeline/aot_compile.hpp"

#include "artifact/artifact.hpp"
#include "core/log.hpp"
#include "core/named_blob_store.hpp"
#include "core/tensor_data_map.hpp"
#include "pipeline/compile.hpp"
#include "pipeline/front_end.hpp"
#include "registry/byte_writer.hpp"
#include "registry/node_report.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

namespace fs = std::filesystem;

namespace backplane {
namespace {

// One method being compiled: its portable graph and placement.
struct MethodWork {
  std::string name;
  std::unique_ptr<ir::Graph> portable;  // constant keys "<name>/<key>"
  PlacementOptions placement;           // the overrides that name one of its nodes
};

// One signature of one method: the portable graph specialised for it, its
// plan and compiled partitions.
struct SpecWork {
  size_t method = 0;
  const ir::Graph* portable = nullptr;  // the method's
  // The method's inputs have open dims: partitions are compiled
  // shape-polymorphic where their backend can, as loading the ONNX does.
  bool polymorphic_first = false;
  std::vector<Shape> signature;  // per input of the portable graph
  std::string name;              // "<method>", or "<method>/<dims>" when the method has several
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<TensorDataMap> weights;
  PlacementOptions placement;
  Exclusions excluded;
  Plan plan;
  std::vector<std::unique_ptr<GraphView>> views;  // per partition
  std::vector<CompiledHandle> compiled;           // per partition (empty if imperative)
  std::vector<bool> polymorphic;                  // per partition: compiled so at load
};

// A partition of one specialisation given to a backend: (spec, partition) indices.
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

bool has_input(const ir::Graph& g, const std::string& name) {
  int v = g.find_value(name);
  return v >= 0 && std::find(g.inputs.begin(), g.inputs.end(), v) != g.inputs.end();
}

// Imports every method's portable graph; each gets the overrides that name
// one of its nodes. Shapes must name an input of some method.
Result<std::vector<MethodWork>> import_methods(
    const std::vector<std::pair<std::string, std::string>>& methods, const CompileOptions& options,
    const BackendRegistry& registry) {
  std::vector<MethodWork> work;
  std::set<std::string> overridden_seen;
  for (const auto& [name, path] : methods) {
    if (name.empty() || name.find('/') != std::string::npos)
      return invalid_argument("method name '" + name + "' must be non-empty and contain no '/'");
    for (const MethodWork& w : work)
      if (w.name == name) return invalid_argument("method '" + name + "' is given twice");
    MethodWork w;
    w.name = name;
    BP_ASSIGN_OR_RETURN(w.portable,
                        import_portable_model(path, &registry, /*freeze_defaults=*/true));
    prefix_constant_keys(*w.portable, name);
    w.placement = options;
    w.placement.input_shapes.clear();
    w.placement.overrides.clear();
    for (const auto& [node, backend] : options.overrides)
      for (const ir::Node& n : w.portable->nodes)
        if (n.name == node) {
          w.placement.overrides[node] = backend;
          overridden_seen.insert(node);
        }
    work.push_back(std::move(w));
  }
  for (const auto& kv : options.overrides)
    if (!overridden_seen.count(kv.first))
      return not_found("override names node '" + kv.first + "', which is in no method");
  std::vector<const std::map<std::string, Shape>*> given = {&options.input_shapes};
  for (const auto& entry : options.shapes) given.push_back(&entry);
  for (const auto* entry : given)
    for (const auto& [input, shape] : *entry)
      if (std::none_of(work.begin(), work.end(),
                       [&](const MethodWork& w) { return has_input(*w.portable, input); }))
        return not_found("a shape is given for '" + input + "', which is an input of no method");
  return work;
}

// "1x128" ("1x128,1x128" for two inputs; "" for a scalar), for names.
std::string dims_tag(const std::vector<Shape>& signature) {
  std::string tag;
  for (size_t i = 0; i < signature.size(); ++i) {
    if (i > 0) tag += ',';
    for (size_t d = 0; d < signature[i].size(); ++d) {
      if (d > 0) tag += 'x';
      tag += std::to_string(signature[i][d]);
    }
  }
  return tag;
}

// Every method specialised for each set of shapes in `options` (shapes, each
// over input_shapes; or input_shapes alone), in the order given; a set that
// gives a method the same signature as an earlier one adds nothing to it.
Result<std::vector<SpecWork>> specialize_methods(const std::vector<MethodWork>& methods,
                                                 const CompileOptions& options,
                                                 const BackendRegistry& registry) {
  std::vector<std::map<std::string, Shape>> sets;
  for (const auto& entry : options.shapes) {
    std::map<std::string, Shape> set = options.input_shapes;
    for (const auto& [input, shape] : entry) set[input] = shape;
    sets.push_back(std::move(set));
  }
  if (sets.empty()) sets.push_back(options.input_shapes);
  std::vector<SpecWork> specs;
  for (size_t m = 0; m < methods.size(); ++m) {
    const MethodWork& method = methods[m];
    const size_t first = specs.size();
    for (const auto& set : sets) {
      std::map<std::string, Shape> mine;
      for (const auto& [input, shape] : set)
        if (has_input(*method.portable, input)) mine[input] = shape;
      SpecWork w;
      w.method = m;
      w.portable = method.portable.get();
      w.polymorphic_first =
          options.shape_polymorphic &&
          std::any_of(method.portable->inputs.begin(), method.portable->inputs.end(),
                      [&](int v) { return !method.portable->values[v].shape_is_static(); });
      BP_ASSIGN_OR_RETURN(w.graph,
                          specialize_graph(*method.portable, mine, method.name + "/", &registry),
                          "method '" + method.name + "'");
      for (int v : w.graph->inputs) w.signature.push_back(w.graph->values[v].shape);
      if (std::any_of(specs.begin() + static_cast<std::ptrdiff_t>(first), specs.end(),
                      [&](const SpecWork& s) { return s.signature == w.signature; }))
        continue;
      w.weights = std::make_unique<TensorDataMap>(&w.graph->constants);
      // Overrides of nodes this signature folded away have nothing to pin.
      w.placement = method.placement;
      for (auto it = w.placement.overrides.begin(); it != w.placement.overrides.end();)
        it = std::any_of(w.graph->nodes.begin(), w.graph->nodes.end(),
                         [&](const ir::Node& n) { return n.name == it->first; })
                 ? std::next(it)
                 : w.placement.overrides.erase(it);
      specs.push_back(std::move(w));
    }
    // Partition names (and the keys of blobs backends derive from them)
    // carry the signature when a method has several.
    const bool several = specs.size() - first > 1;
    for (size_t k = first; k < specs.size(); ++k)
      specs[k].name = several ? method.name + "/" + dims_tag(specs[k].signature) : method.name;
  }
  return specs;
}

Status plan_spec(SpecWork& w, const BackendRegistry& registry) {
  w.compiled.clear();
  w.views.clear();
  BP_ASSIGN_OR_RETURN(w.plan, make_plan(*w.graph, registry, w.placement, *w.weights, w.excluded),
                      w.graph->source);
  for (size_t i = 0; i < w.plan.partitions.size(); ++i)
    w.views.push_back(GraphView::build(*w.graph, w.plan.partitions[i].nodes, w.weights.get(),
                                       w.name + "/partition_" + std::to_string(i)));
  w.compiled.resize(w.plan.partitions.size());
  w.polymorphic.assign(w.plan.partitions.size(), false);
  return ok_status();
}

bool polymorphic_capable(const LoadedBackend& backend) {
  return backend.api()->api_minor >= 2 && BP_TABLE_HAS(backend.api(), execute_shaped) &&
         backend.has_flag(BP_BACKEND_FLAG_SHAPE_POLYMORPHIC);
}

// Asks `backend` to compile each partition of `mine` shape-polymorphic, as
// loading the ONNX model does (CompiledModel::polymorphic: the view keeps
// only the portable graph's constants, every dim open), each distinct view
// once. Those it takes are marked, to be compiled so at load, where one
// compile serves every signature and runs what the ONNX model runs; the
// others are returned, to be compiled for their shapes. What a polymorphic
// compile produces is not stored: backends lower it per shape at run time
// (CpuOneDnn's payload for one is only a marker that compiles the view).
Result<std::vector<PartitionRef>> take_polymorphic(const std::shared_ptr<LoadedBackend>& backend,
                                                   const std::vector<PartitionRef>& mine,
                                                   std::vector<SpecWork>& work, int num_threads) {
  std::map<std::string, bool> taken;  // by view fingerprint
  std::vector<PartitionRef> rest;
  for (auto [s, i] : mine) {
    SpecWork& w = work[s];
    const Partition& p = w.plan.partitions[i];
    std::function<bool(int)> portable_constant = [&w](int v) {
      return w.portable->constants.count(w.graph->values[v].constant_key) > 0;
    };
    std::unique_ptr<GraphView> view = GraphView::build(*w.graph, p.nodes, w.weights.get(),
                                                       w.views[i]->get()->name, &portable_constant);
    auto [it, fresh] = taken.emplace(view->fingerprint(), false);
    if (fresh) {
      bp_compile_options_t opts = compile_options(num_threads, nullptr);
      opts.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, shape_polymorphic);
      opts.shape_polymorphic = true;
      bp_node_report report(p.nodes.size());
      bp_compiled_t* compiled = nullptr;
      Status st = backend->check(backend->call([&] {
        return backend->api()->compile(backend->instance(), view->get(), &opts, &report, &compiled);
      }),
                                 std::string("compile ") + view->get()->name +
                                     " (shape-polymorphic)");
      CompiledHandle held(backend, compiled);  // released here: only the answer counts
      bool declined = st.code() == StatusCode::kUnsupported || (st.ok() && !held);
      for (size_t k = 0; k < p.nodes.size() && st.ok(); ++k)
        if (report.reported[k] && report.outcome[k] != BP_NODE_SUPPORTED) declined = true;
      if (!declined) BP_RETURN_IF_ERROR(st);
      it->second = !declined;
    }
    if (it->second) w.polymorphic[i] = true;
    else rest.emplace_back(s, i);
  }
  return rest;
}

// Compiles `mine` (every symbolic partition `backend` got, of every method
// and signature) in one compile_all call, or one compile each when the
// backend has none. Returns false if the backend failed nodes (now excluded).
Result<bool> compile_on_backend(const std::shared_ptr<LoadedBackend>& backend,
                                const std::vector<PartitionRef>& mine, std::vector<SpecWork>& work,
                                NamedBlobStore& store, int num_threads) {
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
    SpecWork& w = work[mine[k].first];
    if (exclude_failed_nodes(*w.graph, w.plan.partitions[mine[k].second], reports[k], &w.excluded))
      failed = true;
    if (out[k] == nullptr && !failed)
      return internal_error("backend '" + backend->id() + "' compiled " + views[k]->name +
                            " into nothing");
  }
  return !failed;
}

// One round: plan every specialisation of every method, then let each
// backend compile all its partitions of all of them at once.
Result<bool> plan_and_compile_all(std::vector<SpecWork>& work, const BackendRegistry& registry,
                                  NamedBlobStore& store, int num_threads) {
  for (SpecWork& w : work) BP_RETURN_IF_ERROR(plan_spec(w, registry));
  store = NamedBlobStore();
  bool complete = true;
  for (const auto& backend : registry.all()) {
    std::vector<PartitionRef> mine;
    for (size_t m = 0; m < work.size(); ++m)
      for (size_t i = 0; i < work[m].plan.partitions.size(); ++i)
        if (work[m].plan.partitions[i].backend == backend && !work[m].plan.partitions[i].imperative)
          mine.emplace_back(m, i);
    if (mine.empty()) continue;
    if (polymorphic_capable(*backend)) {
      std::vector<PartitionRef> open, fixed;
      for (PartitionRef ref : mine)
        (work[ref.first].polymorphic_first ? open : fixed).push_back(ref);
      BP_ASSIGN_OR_RETURN(mine, take_polymorphic(backend, open, work, num_threads));
      mine.insert(mine.end(), fixed.begin(), fixed.end());
      if (mine.empty()) continue;
    }
    BP_ASSIGN_OR_RETURN(bool compiled, compile_on_backend(backend, mine, work, store, num_threads));
    if (!compiled) complete = false;
  }
  return complete;
}

// What the artifact stores of one compiled specialisation: its partitions
// with their backends' payloads; the constants its signature folded go into
// `store` (under keys of their own: "<method>/<value>@<dims>").
Result<ArtifactSpecialization> serialize_spec(const SpecWork& w, const ir::Graph& portable,
                                              NamedBlobStore& store) {
  ArtifactSpecialization spec;
  spec.signature = w.signature;
  spec.graph = w.graph.get();
  spec.digest = specialization_digest(*w.graph);
  for (size_t i = 0; i < w.plan.partitions.size(); ++i) {
    const Partition& p = w.plan.partitions[i];
    const LoadedBackend& backend = *p.backend;
    ArtifactPartition stored;
    stored.backend = backend.id();
    stored.api_major = backend.api()->api_major;
    stored.api_minor = backend.api()->api_minor;
    stored.nodes = p.nodes;
    stored.imperative = p.imperative;
    stored.polymorphic = w.polymorphic[i];
    const std::string name = w.views[i]->get()->name;
    if (stored.polymorphic) {
      // Compiled at load, once for every signature (take_polymorphic).
    } else if (w.compiled[i] && backend.has_flag(BP_BACKEND_FLAG_SERIALIZE) &&
               BP_TABLE_HAS(backend.api(), serialize)) {
      bp_byte_writer writer;
      Status s = backend.check(backend.call([&] {
        return backend.api()->serialize(w.compiled[i].get(), store.as_abi(), &writer);
      }),
                               "serialize " + name);
      if (s.code() == StatusCode::kUnsupported) {
        // This partition's compiled form has something the backend does not
        // write: the artifact keeps its portable graph, compiled at load.
        log::info(s.message() +
                  "; the artifact keeps the portable graph and it is compiled at load");
      } else {
        BP_RETURN_IF_ERROR(s);
        stored.has_payload = true;
        stored.payload = std::move(writer.bytes);
      }
    } else if (!p.imperative) {
      log::info(
          name + ": backend '" + backend.id() +
          "' does not serialize; the artifact keeps the portable graph and it is compiled at load");
    }
    spec.partitions.push_back(std::move(stored));
  }
  for (const auto& [key, tensor] : w.graph->constants)
    if (portable.constants.count(key) == 0)
      BP_RETURN_IF_ERROR(store.add_borrowed(key, tensor.data(), tensor.size_bytes(), 0, ""));
  return spec;
}

}  // namespace

Result<CompileReport> compile_artifact(
    const BackendRegistry& registry,
    const std::vector<std::pair<std::string, std::string>>& methods, const std::string& output,
    const CompileOptions& options, int num_threads) {
  if (methods.empty()) return invalid_argument("nothing to compile");
  BP_ASSIGN_OR_RETURN(std::string external_name, external_data_name(options, output));
  BP_ASSIGN_OR_RETURN(std::vector<MethodWork> work, import_methods(methods, options, registry));
  BP_ASSIGN_OR_RETURN(std::vector<SpecWork> specs, specialize_methods(work, options, registry));

  NamedBlobStore store;
  auto num_excluded = [&] {
    size_t n = 0;
    for (const SpecWork& w : specs) n += w.excluded.size();
    return n;
  };
  BP_RETURN_IF_ERROR(replan_until_compiled(
      [&] { return plan_and_compile_all(specs, registry, store, num_threads); }, num_excluded));

  // Payloads and the constants of each signature, then the portable graphs'
  // weights (once per method, whatever the number of signatures).
  std::vector<ArtifactMethod> stored_methods(work.size());
  CompileReport report;
  for (size_t m = 0; m < work.size(); ++m) {
    stored_methods[m].name = work[m].name;
    stored_methods[m].portable = work[m].portable.get();
    report.methods.push_back(work[m].name);
  }
  for (const SpecWork& w : specs) {
    ArtifactMethod& method = stored_methods[w.method];
    if (method.specializations.empty()) method.preference = w.plan.preference;
    BP_ASSIGN_OR_RETURN(ArtifactSpecialization spec,
                        serialize_spec(w, *work[w.method].portable, store));
    report.partitions += w.plan.partitions.size();
    ++report.specializations;
    method.specializations.push_back(std::move(spec));
  }
  for (const MethodWork& w : work)
    for (const auto& [key, tensor] : w.portable->constants)
      BP_RETURN_IF_ERROR(store.add_borrowed(key, tensor.data(), tensor.size_bytes(), 0, ""));
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
