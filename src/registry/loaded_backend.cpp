#include "registry/loaded_backend.hpp"

#include "core/log.hpp"
#include "registry/abi_status.hpp"
#include "registry/abi_trace.hpp"
#include "registry/host_api.hpp"
#include "registry/registry.hpp"

namespace backplane {

Result<std::shared_ptr<LoadedBackend>> LoadedBackend::create(std::string id,
                                                             const bp_backend_api_t* api,
                                                             std::string source,
                                                             std::shared_ptr<void> library,
                                                             uint32_t score) {
  BP_RETURN_IF_ERROR(validate_backend_table(api), "backend '" + id + "'");
  std::shared_ptr<LoadedBackend> b(new LoadedBackend());
  b->id_ = std::move(id);
  b->source_ = std::move(source);
  b->api_ = api;
  b->library_ = std::move(library);
  b->score_ = score;
  // At trace level every call through the table is logged (abi_trace.hpp);
  // the level is read once, here, so a normal run pays nothing.
  if (log::level() <= LogLevel::kTrace) {
    b->api_ = acquire_traced_table(api, b->id_);
    api = b->api_;
  }
  bp_backend_t* instance = nullptr;
  // The ABI forbids exceptions across it, but a table written by hand (not
  // with the SDK) may still throw: contain it here rather than terminate.
  bp_status_t* created = nullptr;
  try {
    created = api->create(host_api(), BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR, &instance);
  } catch (...) {
    return Status(StatusCode::kBackendError,
                  "backend '" + b->id_ + "': create threw a C++ exception");
  }
  if (created != nullptr) {
    // *out belongs to the host whatever create returned: an instance handed
    // out along with a refusal is destroyed here rather than leaked.
    if (instance != nullptr) api->destroy(instance);
    return b->check(created, "create");
  }
  if (instance == nullptr)
    return invalid_argument("backend '" + b->id_ + "': create returned no instance");
  b->instance_ = instance;
  BP_RETURN_IF_ERROR(b->read_info());
  BP_RETURN_IF_ERROR(b->read_ops());
  return b;
}

Status LoadedBackend::read_info() {
  bp_backend_info_t info{};
  info.struct_size = sizeof(info);
  bp_status_t* got = nullptr;
  try {
    got = call([&] { return api_->get_info(instance_, &info); });
  } catch (...) {
    return Status(StatusCode::kBackendError,
                  "backend '" + id_ + "': get_info threw a C++ exception");
  }
  BP_RETURN_IF_ERROR(check(got, "get_info"));
  if (info.vendor == nullptr) info.vendor = "";
  if (info.description == nullptr) info.description = "";
  info_ = info;
  return ok_status();
}

Status LoadedBackend::read_ops() {
  if (api_->api_minor < 3 || !BP_TABLE_HAS(api_, get_op_schemas)) return ok_status();
  size_t count = 0;
  const bp_op_schema_t* schemas = nullptr;
  bp_status_t* got = nullptr;
  try {
    got = api_->get_op_schemas(instance_, &count, &schemas);
  } catch (...) {
    return Status(StatusCode::kBackendError,
                  "backend '" + id_ + "': get_op_schemas threw a C++ exception");
  }
  BP_RETURN_IF_ERROR(check(got, "get_op_schemas"));
  BP_ASSIGN_OR_RETURN(ops_, check_backend_ops(schemas, count, ir::OpRegistry::builtin()),
                      "backend '" + id_ + "'");
  return ok_status();
}

bool LoadedBackend::defines_op(const std::string& domain, const std::string& name) const {
  const std::string d = ir::OpRegistry::normalize_domain(domain);
  for (const BackendOp& op : ops_)
    if (op.name == name && ir::OpRegistry::normalize_domain(op.domain) == d) return true;
  return false;
}

LoadedBackend::~LoadedBackend() {
  if (instance_ != nullptr) api_->destroy(instance_);
  release_traced_table(api_);
  // library_ is released after the instance is gone (member order).
}

BackendDescription LoadedBackend::describe() const {
  BackendDescription d;
  d.id = id_;
  d.vendor = info_.vendor;
  d.description = info_.description;
  d.api_major = api_->api_major;
  d.api_minor = api_->api_minor;
  d.source = source_;
  d.devices = devices();
  return d;
}

std::vector<DeviceDescription> LoadedBackend::devices() const {
  std::vector<DeviceDescription> out;
  if (api_->api_minor < 4 || !BP_TABLE_HAS(api_, get_devices)) return out;
  size_t count = 0;
  const bp_device_info_t* infos = nullptr;
  bp_status_t* got = call([&] { return api_->get_devices(instance_, &count, &infos); });
  if (!check(got, "get_devices").ok() || infos == nullptr) return out;
  auto str = [](const char* s) { return std::string(s != nullptr ? s : ""); };
  for (size_t i = 0; i < count; ++i) {
    const bp_device_info_t& info = infos[i];
    DeviceDescription d;
    d.name = str(info.name);
    d.vendor = str(info.vendor);
    d.driver_version = str(info.driver_version);
    d.kind = str(info.kind);
    // A reader never touches a field beyond struct_size.
    if (BP_HAS_FIELD(bp_device_info_t, memory_bytes, info.struct_size))
      d.memory_bytes = info.memory_bytes;
    if (BP_HAS_FIELD(bp_device_info_t, compute_units, info.struct_size))
      d.compute_units = info.compute_units;
    if (BP_HAS_FIELD(bp_device_info_t, selected, info.struct_size)) d.selected = info.selected;
    out.push_back(std::move(d));
  }
  return out;
}

Status LoadedBackend::check(bp_status_t* status, const std::string& what) const {
  return from_abi_status(status, "backend '" + id_ + "': " + what);
}

}  // namespace backplane
