// CpuOneDnn: the fast CPU backend, on oneDNN.
//
// It reaches the runtime only through the ABI (via backend_sdk.hpp): the same
// table serves Backplane_CpuOneDnn_backend.so (what `backplane run` loads)
// and the static library bench/ links to measure what dynamic loading costs.
// Nodes it cannot run are rejected in query_support with the reason, and the
// partitioner gives them to the next backend (CpuRef). It declares
// BP_BACKEND_FLAG_SHAPE_POLYMORPHIC: a view with open dims is compiled once
// and lowered per new shape at run time (polymorphic.hpp).
#include "onednn/compiled.hpp"
#include "onednn/compiler.hpp"
#include "onednn/polymorphic.hpp"

#include <backplane/backend_sdk.hpp>

#include <string>
#include <string_view>

namespace backplane::onednn {
namespace {

// oneDNN needs SSE4.1; on anything older this backend is skipped quietly.
uint32_t backend_score() { return __builtin_cpu_supports("sse4.1") ? 100u : 0u; }

class OneDnnBackend : public sdk::Backend {
 public:
  static constexpr sdk::BackendIdentity kIdentity{"CpuOneDnn", "Backplane", &backend_score};

  explicit OneDnnBackend(const bp_host_api_t* host) : sdk::Backend(host) {
    description_ =
        "oneDNN CPU primitives: blocked layouts, fused post-ops (" + library_description() + ")";
  }
  // No OpenMP worker this backend started outlives it (the hygiene contract,
  // docs/writing-a-backend.md): the destroying thread's team ends here.
  ~OneDnnBackend() override { end_openmp_team(); }

  bp_backend_info_t info() override {
    bp_backend_info_t i{};
    i.description = description_.c_str();
    i.flags =
        BP_BACKEND_FLAG_COMPILE | BP_BACKEND_FLAG_SERIALIZE | BP_BACKEND_FLAG_SHAPE_POLYMORPHIC;
    return i;
  }

  // Its own keys (Tuning, compiled.hpp, and "shape_instances": how many
  // sets of shapes a shape-polymorphic partition keeps lowered,
  // polymorphic.hpp); the rest goes to the SDK's default ("num_threads",
  // unknown keys refused). Read at compile: a key set later applies to the
  // partitions compiled after it.
  void configure(std::string_view key, std::string_view value) override {
    if (key == "shape_instances") shape_instances_ = sdk::config_uint(key, value, 1, 100000);
    else if (key == "layout")
      tuning_.layout = static_cast<Tuning::Layout>(
          sdk::config_choice(key, value, {"auto", "onednn", "blocked"}));
    else if (key == "winograd") tuning_.winograd = sdk::config_on_off(key, value);
    else if (key == "concat_in_place") tuning_.concat_in_place = sdk::config_on_off(key, value);
    else if (key == "derive_instances") tuning_.derive_instances = sdk::config_on_off(key, value);
    else if (key == "plan_report") tuning_.plan_report = std::string(value);
    else sdk::Backend::configure(key, value);
  }

  void query_support(const bp_graph_view_t& view, sdk::NodeReport& report) override {
    std::vector<std::string> reasons = unsupported_reasons(host(), view);
    for (size_t n = 0; n < view.num_nodes; ++n) {
      if (reasons[n].empty()) report.supported(n);
      else report.rejected(n, reasons[n]);
    }
  }

  std::unique_ptr<sdk::CompiledPartition> compile(const bp_graph_view_t& view,
                                                  const bp_compile_options_t& options,
                                                  sdk::NodeReport& report) override {
    const int threads = static_cast<int>(num_threads(options));
    // Once for every shape (polymorphic.hpp), or for the view's shapes.
    if (sdk::shape_polymorphic(options))
      return compile_polymorphic(host(), view, threads, shape_instances_, tuning_, weight_pool_);
    return compile_partition(host(), view, threads, tuning_, report);
  }

  std::unique_ptr<sdk::CompiledPartition> deserialize(
      const bp_graph_view_t& view, const void* payload, size_t size,
      const bp_compile_options_t& options) override {
    const int threads = static_cast<int>(num_threads(options));
    return deserialize_partition(host(), view, payload, size, threads, tuning_, shape_instances_,
                                 weight_pool_);
  }

 private:
  std::string description_;
  size_t shape_instances_ = kDefaultMaxInstances;
  Tuning tuning_;
  // Reordered weights its shape-polymorphic partitions share (plan_builder.hpp).
  std::shared_ptr<WeightPool> weight_pool_ = std::make_shared<WeightPool>();
};

}  // namespace

#ifdef BACKPLANE_BACKEND_MODULE
}  // namespace backplane::onednn
BP_DEFINE_BACKEND_ENTRY_POINTS(backplane::onednn::OneDnnBackend)
#else
const bp_backend_api_t* static_table() { return sdk::backend_table<OneDnnBackend>(); }
const char* static_id() { return OneDnnBackend::kIdentity.id; }
}  // namespace backplane::onednn
#endif
