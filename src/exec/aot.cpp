#include "exec/aot.hpp"

#include "artifact/artifact.hpp"
#include "core/named_blob_store.hpp"
#include "artifact_generated.h"
#include "core/log.hpp"
#include "core/tensor_data_map.hpp"
#include "registry/byte_writer.hpp"
#include "registry/node_report.hpp"
#include "onnx/importer.hpp"
#include "partition/graph_view.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace backplane {
namespace {

struct MethodWork {
  std::string name;
  std::unique_ptr<ir::Graph> graph;
  std::unique_ptr<TensorDataMap> weights;
  ModelOptions model_options;
  Exclusions excluded;
  Plan plan;
  std::vector<std::unique_ptr<GraphView>> views;  // per partition
  std::vector<bp_compiled_t*> compiled;           // per partition (null if imperative)
};

void release(MethodWork& w) {
  for (size_t i = 0; i < w.compiled.size(); ++i)
    if (w.compiled[i] != nullptr) w.plan.partitions[i].backend->api()->compiled_destroy(w.compiled[i]);
  w.compiled.clear();
  w.views.clear();
}

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

}  // namespace

Result<CompileReport> compile_artifact(const BackendRegistry& registry,
                                       const std::vector<std::pair<std::string, std::string>>& methods,
                                       const std::string& output, const CompileOptions& options, int num_threads) {
  if (methods.empty()) return invalid_argument("nothing to compile");
  std::string external_name;
  if (!options.external_data.empty()) {
    fs::path ext = fs::absolute(options.external_data).lexically_normal();
    fs::path out = fs::absolute(output).lexically_normal();
    if (ext.parent_path() != out.parent_path())
      return invalid_argument("--external-data " + options.external_data + " must be in the same directory as " + output);
    if (ext == out) return invalid_argument("the external data file must differ from the artifact");
    external_name = ext.filename().string();
  }

  std::vector<MethodWork> work;
  std::set<std::string> overridden_seen;
  for (const auto& [name, path] : methods) {
    if (name.empty() || name.find('/') != std::string::npos)
      return invalid_argument("method name '" + name + "' must be non-empty and contain no '/'");
    for (const MethodWork& w : work)
      if (w.name == name) return invalid_argument("method '" + name + "' is given twice");
    BP_ASSIGN_OR_RETURN(ir::Graph imported, onnx_import::import_file(path));
    MethodWork w;
    w.name = name;
    w.graph = std::make_unique<ir::Graph>(std::move(imported));
    if (w.graph->source.empty()) w.graph->source = path;
    std::map<std::string, Shape> shapes;
    for (int v : w.graph->inputs) {
      auto it = options.input_shapes.find(w.graph->values[v].name);
      if (it != options.input_shapes.end()) shapes[it->first] = it->second;
    }
    BP_RETURN_IF_ERROR(ir::infer_shapes(*w.graph, shapes));  // names the file itself
    w.graph->remove_dead();
    BP_RETURN_IF_ERROR(ir::verify(*w.graph), path);
    prefix_constant_keys(*w.graph, name);
    w.weights = std::make_unique<TensorDataMap>(&w.graph->constants);
    w.model_options.backends = options.backends;
    w.model_options.allow_fallback = options.allow_fallback;
    for (const auto& [node, backend] : options.overrides)
      for (const ir::Node& n : w.graph->nodes)
        if (n.name == node) {
          w.model_options.overrides[node] = backend;
          overridden_seen.insert(node);
        }
    work.push_back(std::move(w));
  }
  for (const auto& kv : options.overrides)
    if (!overridden_seen.count(kv.first))
      return not_found("override names node '" + kv.first + "', which is in no method");

  NamedBlobStore store;
  // Plan every method, then let each backend compile all its partitions of
  // all methods in one call; nodes a backend fails go to the next backend and
  // everything is planned again.
  for (int round = 0;; ++round) {
    for (MethodWork& w : work) {
      release(w);
      BP_ASSIGN_OR_RETURN(w.plan, make_plan(*w.graph, registry, w.model_options, *w.weights, w.excluded),
                          w.graph->source);
      for (size_t i = 0; i < w.plan.partitions.size(); ++i)
        w.views.push_back(GraphView::build(*w.graph, w.plan.partitions[i].nodes, w.weights.get(),
                                           w.name + "/partition_" + std::to_string(i)));
      w.compiled.assign(w.plan.partitions.size(), nullptr);
    }
    store = NamedBlobStore();
    bool failed = false;
    for (const auto& backend : registry.all()) {
      std::vector<std::pair<size_t, size_t>> mine;  // (method, partition)
      for (size_t m = 0; m < work.size(); ++m)
        for (size_t i = 0; i < work[m].plan.partitions.size(); ++i)
          if (work[m].plan.partitions[i].backend == backend && !work[m].plan.partitions[i].imperative)
            mine.emplace_back(m, i);
      if (mine.empty()) continue;
      std::vector<const bp_graph_view_t*> views;
      std::vector<bp_node_report> reports;
      for (auto [m, i] : mine) {
        views.push_back(work[m].views[i]->get());
        reports.emplace_back(work[m].plan.partitions[i].nodes.size());
      }
      std::vector<bp_node_report_t*> report_ptrs;
      for (auto& r : reports) report_ptrs.push_back(&r);
      std::vector<bp_compiled_t*> out(mine.size(), nullptr);
      bp_compile_options_t opts{};
      opts.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, blob_store);
      opts.num_threads = static_cast<uint32_t>(std::max(num_threads, 0));
      opts.ahead_of_time = true;
      opts.blob_store = store.as_abi();
      if (BP_TABLE_HAS(backend->api(), compile_all)) {
        BP_RETURN_IF_ERROR(backend->check(backend->api()->compile_all(backend->instance(), views.size(), views.data(),
                                                                      &opts, report_ptrs.data(), out.data()),
                                          "compile_all"));
      } else {
        for (size_t k = 0; k < views.size(); ++k)
          BP_RETURN_IF_ERROR(backend->check(
              backend->api()->compile(backend->instance(), views[k], &opts, report_ptrs[k], &out[k]),
              std::string("compile ") + views[k]->name));
      }
      for (size_t k = 0; k < mine.size(); ++k) {
        auto [m, i] = mine[k];
        work[m].compiled[i] = out[k];
        const Partition& p = work[m].plan.partitions[i];
        for (size_t n = 0; n < p.nodes.size(); ++n)
          if (reports[k].reported[n] && reports[k].outcome[n] != BP_NODE_SUPPORTED) {
            work[m].excluded.insert({p.nodes[n], backend->id()});
            failed = true;
          }
        if (out[k] == nullptr && !failed)
          return internal_error("backend '" + backend->id() + "' compiled " + views[k]->name + " into nothing");
      }
    }
    if (!failed) break;
    if (round > 1000) return internal_error("compile made no progress");
  }

  // Payloads, then the portable graphs' weights, into the store and file.
  std::vector<ArtifactMethod> out_methods;
  CompileReport report;
  for (MethodWork& w : work) {
    ArtifactMethod am;
    am.name = w.name;
    am.graph = w.graph.get();
    am.preference = w.plan.preference;
    for (size_t i = 0; i < w.plan.partitions.size(); ++i) {
      const Partition& p = w.plan.partitions[i];
      ArtifactPartition ap;
      ap.backend = p.backend->id();
      ap.api_major = p.backend->api()->api_major;
      ap.api_minor = p.backend->api()->api_minor;
      ap.nodes = p.nodes;
      ap.imperative = p.imperative;
      if (w.compiled[i] != nullptr && p.backend->has_flag(BP_BACKEND_FLAG_SERIALIZE) &&
          BP_TABLE_HAS(p.backend->api(), serialize)) {
        bp_byte_writer writer;
        BP_RETURN_IF_ERROR(p.backend->check(p.backend->api()->serialize(w.compiled[i], store.as_abi(), &writer),
                                            "serialize " + std::string(w.views[i]->get()->name)));
        ap.has_payload = true;
        ap.payload = std::move(writer.bytes);
      } else if (!p.imperative) {
        log::info(std::string(w.views[i]->get()->name) + ": backend '" + p.backend->id() +
                  "' does not serialize; the artifact keeps the portable graph and it is compiled at load");
      }
      am.partitions.push_back(std::move(ap));
    }
    for (const auto& [key, tensor] : w.graph->constants)
      BP_RETURN_IF_ERROR(store.add_borrowed(key, tensor.data(), tensor.size_bytes(), 0, ""));
    report.methods.push_back(w.name);
    report.partitions += w.plan.partitions.size();
    out_methods.push_back(std::move(am));
  }
  if (!external_name.empty()) store.place_all(external_name);
  auto sizes = write_artifact(output, out_methods, store);
  for (MethodWork& w : work) release(w);
  if (!sizes.ok()) return std::move(sizes).take_status();
  report.payload_bytes = sizes->payload_bytes;
  report.named_data_keys = store.keys().size();
  report.requested_bytes = store.requested_bytes();
  report.stored_bytes = store.stored_bytes();
  report.file_bytes = sizes->file_bytes;
  report.external_bytes = sizes->external_bytes;
  return report;
}

bool looks_like_artifact(const std::string& path) {
  // A .bpk is read as an artifact even if its identifier is damaged, so the
  // error is the artifact reader's ("not a Backplane artifact"), not the
  // ONNX parser's.
  if (fs::path(path).extension() == ".bpk") return true;
  std::ifstream in(path, std::ios::binary);
  char head[12] = {};
  if (!in.read(head, sizeof head)) return false;
  return std::string(head + 8, 4) == fb::ArtifactIdentifier();
}

Result<std::shared_ptr<CompiledModel>> load_artifact(const BackendRegistry& registry, const std::string& path,
                                                     const ModelOptions& options, uint64_t network_id,
                                                     int num_threads) {
  BP_ASSIGN_OR_RETURN(std::shared_ptr<ArtifactFile> file,
                      ArtifactFile::open(path, options.external_data, options.lazy_checksums));
  BP_ASSIGN_OR_RETURN(int m, file->find_method(options.method));
  BP_ASSIGN_OR_RETURN(ir::Graph g, file->method_graph(m));
  auto graph = std::make_unique<ir::Graph>(std::move(g));
  if (!options.input_shapes.empty())
    for (const auto& [name, shape] : options.input_shapes) {
      int v = graph->find_value(name);
      if (v < 0 || std::find(graph->inputs.begin(), graph->inputs.end(), v) == graph->inputs.end())
        return not_found(path + ": artifact has no input named '" + name + "'");
      if (graph->values[v].shape != shape)
        return invalid_argument(path + ": input '" + name + "' was compiled for shape " +
                                shape_to_string(graph->values[v].shape) + ", not " + shape_to_string(shape));
    }
  auto weights = std::make_unique<ArtifactDataMap>(file);
  const fb::Method* method = file->root().methods()->Get(static_cast<flatbuffers::uoffset_t>(m));
  const ir::Graph* gp = graph.get();
  const NamedDataMap* wp = weights.get();
  std::vector<std::string> preference = options.backends;
  if (preference.empty() && method->preference())
    for (const auto* s : *method->preference())
      if (registry.find(s->str())) preference.push_back(s->str());
  if (preference.empty()) preference = registry.default_preference();
  for (const std::string& id : registry.default_preference())
    if (std::find(preference.begin(), preference.end(), id) == preference.end()) preference.push_back(id);

  Planner planner = [&, gp, wp](const Exclusions& excluded, std::vector<std::string>* notes_out) -> Result<Plan> {
    std::vector<std::string>& notes = *notes_out;
    // Constants read from the mapping without a backend asking the
    // NamedDataMap, or before nodes are compiled again elsewhere: with lazy
    // checksums, verify them here, so corruption is reported as such (and not
    // as whatever the next backend makes of a failed weight read).
    auto verify_constant = [&](int v) -> Status {
      if (v < 0 || !gp->values[v].is_constant()) return ok_status();
      const void* data = nullptr;
      size_t size = 0;
      return wp->get(gp->values[v].constant_key, &data, &size);
    };
    auto verify_constants_of = [&](const std::vector<int>& nodes) -> Status {
      for (int n : nodes)
        for (int v : gp->nodes[n].inputs) BP_RETURN_IF_ERROR(verify_constant(v));
      return ok_status();
    };
    Plan plan;
    plan.preference = preference;
    plan.placement.resize(gp->nodes.size());
    // Nodes whose stored partition cannot be used, and why.
    std::vector<int> replace;
    std::vector<std::pair<size_t, std::string>> reasons;  // artifact partition -> reason
    struct Slot {
      bool keep;
      Partition partition;
      std::vector<int> nodes;
    };
    std::vector<Slot> slots;
    for (const fb::Partition* fp : *method->partitions()) {
      const size_t index = slots.size();
      Slot slot{false, {}, std::vector<int>(fp->nodes()->begin(), fp->nodes()->end())};
      std::string id = fp->backend()->str();
      std::shared_ptr<Backend> backend = registry.find(id);
      std::string why;
      bool use_payload = true;
      const bool was_excluded =
          std::any_of(slot.nodes.begin(), slot.nodes.end(), [&](int n) { return excluded.count({n, id}) > 0; });
      if (backend == nullptr) {
        why = "backend '" + id + "' is not available";
      } else if (was_excluded && fp->payload() >= 0 && !fp->imperative() && BP_TABLE_HAS(backend->api(), compile) &&
                 BP_TABLE_HAS(backend->api(), deserialize) && fp->api_major() == backend->api()->api_major) {
        // The backend failed to read its payload (a payload format it no
        // longer reads): compile the partition on it from the portable graph.
        // (Exclusions only ever come from a failed deserialize here: were
        // that compile to fail, the executor stops for lack of progress.)
        use_payload = false;
        BP_RETURN_IF_ERROR(verify_constants_of(slot.nodes));
        notes.push_back("partition " + std::to_string(index) + " on '" + id +
                        "': its stored payload could not be read; compiling it on '" + id +
                        "' from the portable graph");
      } else if (was_excluded) {
        why = "backend '" + id + "' could not load its compiled form";
      } else if (fp->imperative() && !BP_TABLE_HAS(backend->api(), execute_node))
        why = "backend '" + id + "' no longer runs single ops";
      if (why.empty()) {
        slot.keep = true;
        slot.partition.backend = backend;
        slot.partition.nodes = slot.nodes;
        slot.partition.imperative = fp->imperative();
        bool compatible = fp->api_major() == backend->api()->api_major;
        if (fp->payload() >= 0 && compatible && use_payload) {
          const uint8_t* data = nullptr;
          size_t size = 0;
          BP_RETURN_IF_ERROR(file->segment(static_cast<uint32_t>(fp->payload()), &data, &size));
          slot.partition.payload = data;
          slot.partition.payload_size = size;
        } else if (fp->payload() >= 0 && use_payload) {
          notes.push_back("partition on '" + id + "' was compiled for backend API " + std::to_string(fp->api_major()) +
                          ".x; recompiling it from the portable graph");
        }
        for (int n : slot.nodes) plan.placement[n] = NodePlacement{id, "artifact", {}};
      } else {
        BP_RETURN_IF_ERROR(verify_constants_of(slot.nodes));
        notes.push_back(why + ": recompiling its " + std::to_string(slot.nodes.size()) +
                        " node(s) from the portable graph on the next backend that supports them");
        replace.insert(replace.end(), slot.nodes.begin(), slot.nodes.end());
      }
      slots.push_back(std::move(slot));
    }
    std::vector<std::string> placed_by;
    if (!replace.empty()) {
      ModelOptions mo;
      for (const std::string& id : preference) mo.backends.push_back(id);
      // Ask every candidate about the whole graph once, then use the answer
      // for the nodes that need a new home.
      BP_ASSIGN_OR_RETURN(Plan fresh, make_plan(*gp, registry, mo, *wp, excluded));
      for (int n : replace) {
        // A node whose stored backend is gone must not go back to it.
        plan.placement[n] = fresh.placement[n];
        plan.placement[n].why = "recompiled (" + fresh.placement[n].why + ")";
      }
    }
    for (Slot& slot : slots) {
      if (slot.keep) {
        plan.partitions.push_back(std::move(slot.partition));
        continue;
      }
      // Consecutive nodes (in stored order) on the same new backend form one
      // partition; this keeps execution order valid.
      for (int n : slot.nodes) {
        std::shared_ptr<Backend> b = registry.find(plan.placement[n].backend);
        bool imperative = !BP_TABLE_HAS(b->api(), compile);
        if (plan.partitions.empty() || plan.partitions.back().backend != b || imperative ||
            plan.partitions.back().payload != nullptr || plan.partitions.back().imperative ||
            std::find(slot.nodes.begin(), slot.nodes.end(), plan.partitions.back().nodes.front()) == slot.nodes.end())
          plan.partitions.push_back(Partition{b, {}, imperative});
        plan.partitions.back().nodes.push_back(n);
      }
    }
    // Constants the executor hands out straight from the mapping (inputs of
    // single-op partitions, constant graph outputs) bypass the NamedDataMap.
    for (const Partition& p : plan.partitions)
      if (p.imperative) BP_RETURN_IF_ERROR(verify_constants_of(p.nodes));
    for (int v : gp->outputs) BP_RETURN_IF_ERROR(verify_constant(v));
    for (const std::string& note : notes) log::warn(path + ": " + note);
    return plan;
  };
  return CompiledModel::create_with(std::move(graph), std::move(weights), planner, network_id, num_threads, file);
}

Result<std::string> inspect_artifact(const std::string& path, bool json, const std::vector<std::string>& external) {
  BP_ASSIGN_OR_RETURN(std::shared_ptr<ArtifactFile> file, ArtifactFile::open(path, external, false));
  const fb::Artifact& r = file->root();
  nlohmann::json j;
  j["file"] = path;
  j["format"] = std::to_string(r.format_major()) + "." + std::to_string(r.format_minor());
  j["producer"] = r.producer() ? r.producer()->str() : "";
  {
    static const char* hex = "0123456789abcdef";
    std::string id;
    for (uint8_t x : *r.compile_id()) id += {hex[x >> 4], hex[x & 15]};
    j["compile_id"] = id;
  }
  j["file_bytes"] = file->file_size();
  j["data_files"] = nlohmann::json::array();
  if (r.data_files())
    for (const fb::DataFile* d : *r.data_files()) j["data_files"].push_back({{"name", d->name()->str()}, {"data_bytes", d->size()}});
  j["methods"] = nlohmann::json::array();
  for (flatbuffers::uoffset_t mi = 0; mi < r.methods()->size(); ++mi) {
    const fb::Method* m = r.methods()->Get(mi);
    nlohmann::json mj;
    mj["name"] = m->name()->str();
    mj["nodes"] = m->graph()->nodes() ? m->graph()->nodes()->size() : 0;
    // Rebuilding the graph checks it as loading would.
    BP_ASSIGN_OR_RETURN(ir::Graph g, file->method_graph(static_cast<int>(mi)));
    mj["inputs"] = nlohmann::json::array();
    for (int v : g.inputs)
      mj["inputs"].push_back({{"name", g.values[v].name}, {"shape", g.values[v].shape}, {"dtype", dtype_name(g.values[v].dtype)}});
    mj["partitions"] = nlohmann::json::array();
    for (const fb::Partition* p : *m->partitions()) {
      size_t payload = p->payload() >= 0 ? r.segments()->Get(static_cast<flatbuffers::uoffset_t>(p->payload()))->size() : 0;
      mj["partitions"].push_back({{"backend", p->backend()->str()},
                                  {"api_version", std::to_string(p->api_major()) + "." + std::to_string(p->api_minor())},
                                  {"nodes", p->nodes()->size()},
                                  {"imperative", p->imperative()},
                                  {"payload_bytes", payload}});
    }
    j["methods"].push_back(mj);
  }
  // Named data: per key, and de-duplication savings (keys sharing a segment).
  std::map<uint32_t, size_t> users;
  size_t requested = 0, stored = 0;
  j["named_data"] = nlohmann::json::array();
  if (r.named_data())
    for (const fb::NamedData* d : *r.named_data()) {
      const fb::Segment* s = r.segments()->Get(d->segment());
      std::string where = s->file() == 0 ? "(artifact)" : r.data_files()->Get(s->file() - 1)->name()->str();
      j["named_data"].push_back({{"key", d->key()->str()},
                                 {"bytes", s->size()},
                                 {"alignment", s->alignment()},
                                 {"file", where},
                                 {"segment", d->segment()}});
      requested += s->size();
      if (users[d->segment()]++ == 0) stored += s->size();
    }
  j["named_data_bytes"] = {{"requested", requested}, {"stored", stored}, {"saved_by_dedup", requested - stored}};
  if (json) return j.dump(2);

  std::ostringstream os;
  os << "artifact   " << path << " (format " << j["format"].get<std::string>() << ", " << file->file_size()
     << " bytes, " << j["producer"].get<std::string>() << ")\n";
  os << "compile id " << j["compile_id"].get<std::string>() << "\n";
  for (const auto& d : j["data_files"]) os << "data file  " << d["name"].get<std::string>() << " (" << d["data_bytes"] << " data bytes)\n";
  for (const auto& m : j["methods"]) {
    os << "method     " << m["name"].get<std::string>() << ": " << m["nodes"] << " nodes, " << m["partitions"].size()
       << " partitions\n";
    size_t i = 0;
    for (const auto& p : m["partitions"])
      os << "  [" << i++ << "] " << p["backend"].get<std::string>() << " (api " << p["api_version"].get<std::string>()
         << "): " << p["nodes"] << " nodes, payload " << p["payload_bytes"] << " bytes"
         << (p["imperative"].get<bool>() ? ", imperative" : "") << "\n";
  }
  os << "named data " << j["named_data"].size() << " keys, " << requested << " bytes requested, " << stored
     << " stored (" << requested - stored << " saved by de-duplication)\n";
  for (const auto& d : j["named_data"])
    os << "  " << d["key"].get<std::string>() << ": " << d["bytes"] << " bytes, align " << d["alignment"] << ", "
       << d["file"].get<std::string>() << ", segment " << d["segment"] << "\n";
  return os.str();
}

}  // namespace backplane
