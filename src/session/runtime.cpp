// Runtime: the registry of backends, and load_model / compile through the
// pipeline (pipeline/), into CompiledModels (session/compiled_model.hpp).
#include "core/log.hpp"
#include "core/thread_pool.hpp"
#include "pipeline/aot_compile.hpp"
#include "pipeline/artifact_load.hpp"
#include "pipeline/front_end.hpp"
#include "registry/dynamic_loader.hpp"
#include "registry/registry.hpp"
#include "session/compiled_model.hpp"
#include "session/staged_model.hpp"
#include "session/validator.hpp"

#include <backplane/runtime.hpp>
#include <backplane/validate.hpp>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>

namespace backplane {
namespace {

// What no backend can fix later: counts out of range, a directory that is
// not there. (The environment's BACKPLANE_BACKEND_PATHS may list directories
// that do not exist on every machine; those are reported, not errors.)
Status validate(const RuntimeOptions& options) {
  if (options.num_threads < 0 || options.num_threads > max_threads())
    return invalid_argument("num_threads " + std::to_string(options.num_threads) +
                            " is out of range: 0 (the default) to " +
                            std::to_string(max_threads()) +
                            " (4 per hardware thread of this machine)");
  if (options.backend_path.has_value() && !options.backend_path->empty()) {
    // Only absolute directories are searched (a relative one would depend
    // on the caller's working directory); one the user names explicitly and
    // that cannot be used is an error here rather than a skipped path.
    if ((*options.backend_path)[0] != '/')
      return invalid_argument(
          "backend path '" + *options.backend_path +
          "' (RuntimeOptions::backend_path) is not an absolute path: backends "
          "are loaded from absolute directories only (std::filesystem::absolute "
          "makes one; the CLI's --backend-path does so)");
    std::error_code ec;
    if (!std::filesystem::is_directory(*options.backend_path, ec))
      return not_found("backend path '" + *options.backend_path +
                       "' (--backend-path, RuntimeOptions::backend_path) is not a directory" +
                       (ec ? ": " + ec.message() : std::string()));
  }
  return ok_status();
}

class RuntimeImpl : public Runtime {
 public:
  Status init(const RuntimeOptions& options) {
    BP_RETURN_IF_ERROR(validate(options));
    options_ = options;
    log::set_level(options.log_level);
    BP_RETURN_IF_ERROR(registry_.register_static(options), "registering static backends");
    std::vector<std::string> taken;
    for (const auto& b : registry_.all()) taken.push_back(b->id());
    DynamicLoadResult dynamic = load_dynamic_backends(options, taken);
    for (auto& b : dynamic.backends) BP_RETURN_IF_ERROR(registry_.add(std::move(b)));
    files_ = std::move(dynamic.files);
    paths_ = std::move(dynamic.paths);
    if (registry_.all().empty()) {
      std::string why = paths_.empty()
                            ? "dynamic loading is disabled or no search path is set"
                            : std::to_string(files_.size()) + " backend file(s) found, none loaded";
      return not_found(
          "no backend is available: the static backends are disabled and no dynamic backend loaded "
          "(" +
          why + "); see 'backplane backends' and docs/troubleshooting.md");
    }
    // One pool for the runtime, lent to backends at every execute (API
    // 1.5): num_threads threads, or one per hardware thread by default.
    // BACKPLANE_THREAD_POOL=0 lends none (to measure what it is worth).
    const char* lend = std::getenv("BACKPLANE_THREAD_POOL");
    if (lend == nullptr || std::string(lend) != "0")
      pool_ = std::make_shared<ThreadPool>(
          options.num_threads > 0
              ? options.num_threads
              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
    BP_RETURN_IF_ERROR(configure_threads());
    return configure_backends();
  }

  std::vector<BackendDescription> backends() const override {
    std::vector<BackendDescription> out;
    for (const std::string& id : registry_.default_preference())
      out.push_back(registry_.find(id)->describe());
    return out;
  }

  Result<CompileReport> compile(const std::vector<std::pair<std::string, std::string>>& methods,
                                const std::string& output, const CompileOptions& options) override {
    return compile_artifact(registry_, methods, output, options, options_.num_threads);
  }

  std::vector<BackendFileReport> backend_files() const override { return files_; }
  std::vector<BackendPathReport> backend_paths() const override { return paths_; }

  Result<std::shared_ptr<Model>> load_model(const std::string& path,
                                            const ModelOptions& options) override {
    CompiledModel::Options model;
    model.placement = options;
    model.network_id = next_network_id_++;
    model.num_threads = options_.num_threads;
    model.thread_pool = pool_;
    model.max_specializations = options.max_specializations;
    model.warm_up = options.warm_up;
    if (options.max_specializations == 0)
      return invalid_argument("max_specializations must be at least 1").with_context(path);
    std::shared_ptr<CompiledModel> loaded;
    if (looks_like_artifact(path)) {
      BP_ASSIGN_OR_RETURN(ArtifactMethodLoad load, load_artifact_method(registry_, path, options));
      // Signatures the artifact does not store are placed as it was compiled.
      model.placement.backends = load.preference;
      BP_ASSIGN_OR_RETURN(
          loaded, CompiledModel::create_with(std::move(load.portable), std::move(load.weights),
                                             std::move(load.stored), registry_, model, load.file));
    } else {
      BP_ASSIGN_OR_RETURN(std::unique_ptr<ir::Graph> graph,
                          import_portable_model(path, &registry_));
      // The graph is this model's alone (its stages', if staged): its packed
      // weights may leave memory.
      model.release_packed_weights = true;
      // Control flow, sequences, data-dependent shapes: run in stages.
      if (Program::needs_staging(*graph)) {
        LoopBounds bounds;
        bounds.max_iterations = options.max_loop_iterations;
        bounds.max_bytes = options.max_loop_bytes;
        BP_ASSIGN_OR_RETURN(std::shared_ptr<StagedModel> staged,
                            StagedModel::create(std::move(graph), registry_, model, bounds), path);
        return std::shared_ptr<Model>(std::move(staged));
      }
      BP_ASSIGN_OR_RETURN(loaded, CompiledModel::create(std::move(graph), registry_, model));
    }
    return std::shared_ptr<Model>(std::move(loaded));
  }

  Result<ValidationReport> validate_model_at(const std::string& path,
                                             const ValidateOptions& options) {
    CompiledModel::Options base;
    base.num_threads = options_.num_threads;
    base.thread_pool = pool_;
    return validate_model(registry_, base, &next_network_id_, path, options);
  }

 private:
  // RuntimeOptions::num_threads reaches every backend as "num_threads".
  Status configure_threads() {
    if (options_.num_threads <= 0) return ok_status();
    std::string n = std::to_string(options_.num_threads);
    const char* key = "num_threads";
    const char* value = n.c_str();
    for (const auto& b : registry_.all())
      if (BP_TABLE_HAS(b->api(), configure)) {
        BP_RETURN_IF_ERROR(
            b->check(b->call([&] { return b->api()->configure(b->instance(), 1, &key, &value); }),
                     "configure num_threads"));
        BP_RETURN_IF_ERROR(b->read_info());
      }
    return ok_status();
  }

  // RuntimeOptions::backend_config, each backend's keys in one call.
  Status configure_backends() {
    for (const auto& [id, settings] : options_.backend_config) {
      std::shared_ptr<LoadedBackend> b = registry_.find(id);
      if (b == nullptr)
        return invalid_argument("backend_config names backend '" + id +
                                "', which is not registered (see 'backplane backends')");
      if (settings.empty()) continue;
      if (!BP_TABLE_HAS(b->api(), configure))
        return invalid_argument("backend '" + id + "' takes no settings (backend_config)");
      std::vector<const char*> keys, values;
      for (const auto& [key, value] : settings) {
        keys.push_back(key.c_str());
        values.push_back(value.c_str());
      }
      BP_RETURN_IF_ERROR(b->check(b->call([&] {
                                    return b->api()->configure(b->instance(), keys.size(),
                                                               keys.data(), values.data());
                                  }),
                                  "configure"));
      // A setting may change what the backend reports (GpuOcl's device).
      BP_RETURN_IF_ERROR(b->read_info());
    }
    return ok_status();
  }

  RuntimeOptions options_;
  // Before registry_: backends are destroyed before the pool they were lent.
  std::shared_ptr<ThreadPool> pool_;
  BackendRegistry registry_;
  std::vector<BackendFileReport> files_;
  std::vector<BackendPathReport> paths_;
  std::atomic<uint64_t> next_network_id_{1};
};

}  // namespace

int max_threads() {
  const unsigned hardware = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<int>(std::min(4u * hardware, 1024u));
}

Result<ValidationReport> validate(Runtime& runtime, const std::string& path,
                                  const ValidateOptions& options) {
  auto* impl = dynamic_cast<RuntimeImpl*>(&runtime);
  if (impl == nullptr)
    return invalid_argument("validate needs a runtime made by Runtime::create").with_context(path);
  return impl->validate_model_at(path, options);
}

Result<std::shared_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  auto rt = std::make_shared<RuntimeImpl>();
  BP_RETURN_IF_ERROR(rt->init(options));
  return std::shared_ptr<Runtime>(std::move(rt));
}

const ModelMetadata& Model::metadata() const {
  static const ModelMetadata none;
  return none;
}

}  // namespace backplane
