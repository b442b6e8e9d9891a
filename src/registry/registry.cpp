#include "registry/registry.hpp"

#include "core/log.hpp"
#include "registry/abi_status.hpp"
#include "registry/host_api.hpp"

#include <algorithm>

namespace backplane {

// Static backends linked into libbackplane (each backend folder provides one).
namespace cpuref {
const bp_backend_api_t* static_table();
const char* static_id();
}  // namespace cpuref

namespace {

struct StaticBackend {
  const char* (*id)();
  const bp_backend_api_t* (*table)();
};

const StaticBackend kStaticBackends[] = {
    {&cpuref::static_id, &cpuref::static_table},
};

}  // namespace

Status validate_backend_table(const bp_backend_api_t* api) {
  if (api == nullptr) return invalid_argument("function table is NULL");
  if (api->struct_size < BP_STRUCT_SIZE(bp_backend_api_t, api_minor))
    return invalid_argument("function table struct_size " + std::to_string(api->struct_size) +
                            " is too small to hold a version");
  if (api->api_major != BP_API_VERSION_MAJOR || api->api_minor > BP_API_VERSION_MINOR)
    return Status(StatusCode::kVersionMismatch,
                  "function table built for API " + std::to_string(api->api_major) + "." +
                      std::to_string(api->api_minor) + ", runtime has " +
                      std::to_string(BP_API_VERSION_MAJOR) + "." +
                      std::to_string(BP_API_VERSION_MINOR));
  // A table must be as large as the minor it claims.
  const size_t minimum = api->api_minor >= 4   ? BP_BACKEND_API_SIZE_1_4
                         : api->api_minor == 3 ? BP_BACKEND_API_SIZE_1_3
                         : api->api_minor == 2 ? BP_BACKEND_API_SIZE_1_2
                         : api->api_minor == 1 ? BP_BACKEND_API_SIZE_1_1
                                               : BP_BACKEND_API_SIZE_1_0;
  if (api->struct_size < minimum)
    return invalid_argument("function table of API " + std::to_string(api->api_major) + "." +
                            std::to_string(api->api_minor) + " has struct_size " +
                            std::to_string(api->struct_size) + ", expected at least " +
                            std::to_string(minimum));
  if (api->struct_size < BP_BACKEND_API_SIZE_1_0)
    return invalid_argument("function table struct_size " + std::to_string(api->struct_size) +
                            " is smaller than API 1.0's " +
                            std::to_string(BP_BACKEND_API_SIZE_1_0));
  struct Required {
    const char* name;
    bool present;
  };
  const Required required[] = {
      {"create", api->create != nullptr},
      {"destroy", api->destroy != nullptr},
      {"get_info", api->get_info != nullptr},
      {"query_support", api->query_support != nullptr},
  };
  for (const Required& r : required)
    if (!r.present) return invalid_argument(std::string("required slot '") + r.name + "' is NULL");
  // A backend must be able to run something: compile+execute or single-op.
  bool symbolic = api->compile && api->compiled_destroy && api->context_create &&
                  api->context_destroy && api->execute;
  if (!symbolic && api->execute_node == nullptr)
    return invalid_argument("table has neither compile/execute slots nor execute_node");
  return ok_status();
}

std::vector<std::string> static_backend_ids() {
  std::vector<std::string> ids;
  for (const StaticBackend& s : kStaticBackends) ids.push_back(s.id());
  return ids;
}

std::shared_ptr<LoadedBackend> reference_backend() {
  static const std::shared_ptr<LoadedBackend> backend = [] {
    auto created =
        LoadedBackend::create(cpuref::static_id(), cpuref::static_table(), "static", nullptr);
    return created.ok() ? *created : std::shared_ptr<LoadedBackend>();
  }();
  return backend;
}

Status BackendRegistry::register_static(const RuntimeOptions& options) {
  for (const StaticBackend& s : kStaticBackends) {
    std::string id = s.id();
    const auto& disabled = options.disabled_static_backends;
    if (std::find(disabled.begin(), disabled.end(), id) != disabled.end()) continue;
    BP_ASSIGN_OR_RETURN(std::shared_ptr<LoadedBackend> backend,
                        LoadedBackend::create(id, s.table(), "static", nullptr));
    BP_RETURN_IF_ERROR(add(std::move(backend)));
  }
  return ok_status();
}

Status BackendRegistry::add(std::shared_ptr<LoadedBackend> backend) {
  if (find(backend->id()) != nullptr)
    return invalid_argument("a backend with id '" + backend->id() + "' is already registered");
  const bool defines_ops = !backend->ops().empty();
  backends_.push_back(std::move(backend));
  if (!defines_ops) return ok_status();
  auto ops = std::make_shared<ir::OpRegistry>(&ir::OpRegistry::builtin());
  for (const auto& b : backends_)
    for (const BackendOp& op : b->ops()) {
      if (ops->knows(op.domain, op.name)) {
        log::info("backend '" + b->id() + "' also defines operator '" + op.name + "' (domain '" +
                  op.domain + "'); its inference is the first definer's");
        continue;
      }
      BP_RETURN_IF_ERROR(ops->add(to_ir_schema(op, b), b->id()), "backend '" + b->id() + "'");
    }
  ops_ = std::move(ops);
  return ok_status();
}

std::shared_ptr<LoadedBackend> BackendRegistry::find(const std::string& id) const {
  for (const auto& b : backends_)
    if (b->id() == id) return b;
  return nullptr;
}

std::vector<std::string> BackendRegistry::default_preference() const {
  std::vector<std::shared_ptr<LoadedBackend>> order;
  for (const auto& b : backends_)
    if (b->id() != "CpuRef") order.push_back(b);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& x, const auto& y) { return x->score() > y->score(); });
  std::vector<std::string> ids;
  for (const auto& b : order) ids.push_back(b->id());
  if (find("CpuRef")) ids.push_back("CpuRef");
  return ids;
}

}  // namespace backplane
