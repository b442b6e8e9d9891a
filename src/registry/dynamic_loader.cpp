#include "registry/dynamic_loader.hpp"

#include "core/log.hpp"
#include "core/tensor_data_map.hpp"
#include "registry/abi_status.hpp"
#include "registry/host_api.hpp"
#include "registry/node_report.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <unordered_map>

#ifndef BACKPLANE_DYNAMIC_BACKEND_PATHS
#define BACKPLANE_DYNAMIC_BACKEND_PATHS ""
#endif
#ifndef BACKPLANE_CONFIGURED_BACKEND_DIR
#define BACKPLANE_CONFIGURED_BACKEND_DIR "/usr/local/lib/backplane/backends"
#endif
#ifndef BACKPLANE_BIN_TO_BACKEND_DIR
#define BACKPLANE_BIN_TO_BACKEND_DIR "../lib/backplane/backends"
#endif
#ifndef BACKPLANE_LIB_TO_BACKEND_DIR
#define BACKPLANE_LIB_TO_BACKEND_DIR "backplane/backends"
#endif

namespace fs = std::filesystem;

namespace backplane {

const char* fate_name(BackendFileReport::Fate fate) {
  switch (fate) {
    case BackendFileReport::Fate::kLoaded:
      return "loaded";
    case BackendFileReport::Fate::kSuperseded:
      return "superseded";
    case BackendFileReport::Fate::kRejected:
      return "rejected";
  }
  return "rejected";
}

namespace dynamic_backend_utils {

std::vector<std::string> split_paths(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(':', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

namespace {

// The object holding this very function, and whether it is the main program
// (the runtime linked statically, libbackplane.a) rather than a shared
// library. For the main program the loader reports argv[0], which may be
// relative or a bare name: /proc/self/exe is the truth there.
std::pair<std::string, bool> runtime_object() {
  Dl_info info{};
  link_map* map = nullptr;
  if (::dladdr1(reinterpret_cast<void*>(&runtime_object), &info, reinterpret_cast<void**>(&map),
                RTLD_DL_LINKMAP) == 0)
    return {"", true};
  const bool main_program = map == nullptr || map->l_name == nullptr || map->l_name[0] == '\0';
  std::error_code ec;
  fs::path path = fs::canonical(main_program ? "/proc/self/exe" : map->l_name, ec);
  return {ec ? "" : path.string(), main_program};
}

}  // namespace

std::string runtime_binary() { return runtime_object().first; }

std::string installed_backend_dir() {
  auto [binary, main_program] = runtime_object();
  if (!binary.empty()) {
    // A program sits in <prefix>/bin, a shared library in <prefix>/lib.
    fs::path dir = fs::path(binary).parent_path() /
                   (main_program ? BACKPLANE_BIN_TO_BACKEND_DIR : BACKPLANE_LIB_TO_BACKEND_DIR);
    std::error_code ec;
    if (fs::is_directory(dir, ec)) return dir.lexically_normal().string();
  }
  return BACKPLANE_CONFIGURED_BACKEND_DIR;
}

std::vector<std::string> compiled_in_paths() {
  std::vector<std::string> paths = split_paths(BACKPLANE_DYNAMIC_BACKEND_PATHS);
  if (std::string(BACKPLANE_DYNAMIC_BACKEND_PATHS).empty()) paths = {installed_backend_dir()};
#if defined(BACKPLANE_BUILD_TREE) && defined(BACKPLANE_BUILD_TREE_BACKENDS)
  // A program running from this build tree, or a process that loaded this
  // tree's libbackplane.so (a Python interpreter importing the module built
  // here), also finds what the tree built.
  std::error_code ec;
  const fs::path tree = fs::weakly_canonical(BACKPLANE_BUILD_TREE, ec);
  for (const fs::path& file : {fs::canonical("/proc/self/exe", ec), fs::path(runtime_binary())}) {
    if (file.empty() || tree.empty()) continue;
    auto rel = file.lexically_relative(tree);
    if (!rel.empty() && *rel.begin() != ".." &&
        std::find(paths.begin(), paths.end(), BACKPLANE_BUILD_TREE_BACKENDS) == paths.end())
      paths.push_back(BACKPLANE_BUILD_TREE_BACKENDS);
  }
#endif
  return paths;
}

std::vector<std::string> search_paths(const RuntimeOptions& options,
                                      std::vector<BackendPathReport>* reports) {
  std::vector<std::string> requested;
  if (!options.dynamic_backends) return {};
  if (options.backend_path.has_value()) {
    if (options.backend_path->empty()) return {};  // an explicit empty option disables
    requested = {*options.backend_path};
  } else if (const char* env = std::getenv("BACKPLANE_BACKEND_PATHS"); env != nullptr) {
    requested = split_paths(env);  // set but empty disables
  } else {
    requested = compiled_in_paths();
  }
  std::vector<std::string> out;
  for (const std::string& p : requested) {
    BackendPathReport r{p, false, ""};
    std::error_code ec;
    if (p.empty() || p[0] != '/') {
      r.reason = "not an absolute path";
    } else if (!fs::is_directory(p, ec)) {
      r.reason = fs::exists(p, ec) ? "not a directory" : "does not exist";
    } else if (std::find(out.begin(), out.end(), p) != out.end()) {
      r.reason = "listed twice";
    } else {
      r.used = true;
      out.push_back(p);
    }
    if (!r.used) {
      // A missing default directory (e.g. nothing installed yet) is normal;
      // a directory the user named is worth a warning.
      bool user_given =
          options.backend_path.has_value() || std::getenv("BACKPLANE_BACKEND_PATHS") != nullptr;
      log::write(user_given ? LogLevel::kWarn : LogLevel::kDebug,
                 "backend path '" + p + "' skipped: " + r.reason);
    }
    if (reports != nullptr) reports->push_back(r);
  }
  return out;
}

bool parse_file_name(const std::string& file_name, std::string* vendor, std::string* name,
                     std::string* version) {
  static const std::regex pattern(R"(^([A-Za-z0-9]+)_([A-Za-z0-9]+)_backend\.so((\.[0-9]+)*)$)");
  std::smatch m;
  if (!std::regex_match(file_name, m, pattern)) return false;
  if (vendor) *vendor = m[1];
  if (name) *name = m[2];
  if (version) *version = m[3].length() > 0 ? std::string(m[3]).substr(1) : "";
  return true;
}

std::vector<std::string> list_candidates(const std::string& directory) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(directory, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool valid_backend_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  return std::all_of(id.begin(), id.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
}

bool version_compatible(uint32_t bmaj, uint32_t bmin, uint32_t rmaj, uint32_t rmin) {
  return bmaj == rmaj && bmin <= rmin;
}

Status check_permissions(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return io_error(path + ": " + std::strerror(errno));
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
    return Status(
        StatusCode::kInvalidArgument,
        path + " is writable by " + ((st.st_mode & S_IWOTH) ? "every user" : "its group") +
            " (mode " +
            [&] {
              char buf[8];
              std::snprintf(buf, sizeof buf, "%03o", st.st_mode & 0777);
              return std::string(buf);
            }() +
            "); fix with chmod go-w, or allow with --allow-insecure-backend-paths "
            "(RuntimeOptions::allow_insecure_backend_paths)");
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    return Status(
        StatusCode::kInvalidArgument,
        path + " is owned by uid " + std::to_string(st.st_uid) + ", neither root nor this user");
  return ok_status();
}

Result<std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    return internal_error("SHA-256 unavailable");
  std::array<char, 65536> buf;
  while (in) {
    in.read(buf.data(), buf.size());
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 15];
  }
  return out;
}

int compare_versions(const std::string& a, const std::string& b) {
  // Fields are compared as numbers of any width: parse_file_name accepts any
  // run of digits, so converting to an integer type could overflow (and
  // std::stol would throw out of the loader).
  auto fields = [](const std::string& v) {
    std::vector<std::string> out;
    if (v.empty()) return out;
    size_t start = 0;
    for (;;) {
      size_t e = v.find('.', start);
      std::string f = v.substr(start, e == std::string::npos ? std::string::npos : e - start);
      size_t nz = f.find_first_not_of('0');
      out.push_back(nz == std::string::npos ? "0" : f.substr(nz));
      if (e == std::string::npos) break;
      start = e + 1;
    }
    return out;
  };
  std::vector<std::string> x = fields(a), y = fields(b);
  for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    if (i >= x.size()) return -1;  // a missing field is lower than any number
    if (i >= y.size()) return 1;
    if (x[i].size() != y[i].size()) return x[i].size() < y[i].size() ? -1 : 1;
    if (int c = x[i].compare(y[i]); c != 0) return c < 0 ? -1 : 1;
  }
  return 0;
}

namespace {

// The probe child tells the parent where it is: "@<where>\n" before each
// step (an entry point, an ABI slot), "!<reason>" when a step fails. After a
// crash or a hang the last "@" names the step it happened in.
class ProbeTrail {
 public:
  explicit ProbeTrail(int fd) : fd_(fd) {}
  void at(const std::string& where) const { send("@" + where + "\n"); }
  void slot(const char* name) const { at(std::string("slot '") + name + "'"); }
  void send(const std::string& text) const {
    for (size_t done = 0; done < text.size();) {
      ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
      if (n <= 0) return;
      done += static_cast<size_t>(n);
    }
  }

 private:
  int fd_;
};

// A one-node view, written out by hand (the loader sits below the graph IR):
// `op` on float32[1,4] input(s), one output.
struct ProbeGraph {
  static constexpr int64_t kShape[2] = {1, 4};
  bp_value_t values[3] = {};
  int32_t inputs[2] = {0, 1};
  int32_t outputs[1] = {2};
  bp_node_t node{};
  bp_graph_view_t view{};
  bp_shape_t shapes[3] = {};

  ProbeGraph(const char* op, size_t num_inputs, const bp_named_data_map_t* weights) {
    static const char* names[3] = {"x", "y", "z"};
    for (int k = 0; k < 3; ++k) {
      values[k].struct_size = BP_STRUCT_SIZE(bp_value_t, data_key);
      values[k].name = names[k];
      values[k].dtype = BP_DTYPE_FLOAT32;
      values[k].rank = 2;
      values[k].shape = kShape;
      shapes[k] = bp_shape_t{2, kShape};
    }
    node.struct_size = BP_STRUCT_SIZE(bp_node_t, attributes);
    node.name = "probe_node";
    node.op_type = op;
    node.domain = "";
    node.opset = 13;
    node.num_inputs = num_inputs;
    node.inputs = inputs;
    node.num_outputs = 1;
    node.outputs = outputs;
    view.struct_size = BP_STRUCT_SIZE(bp_graph_view_t, weights);
    view.name = "probe";
    view.num_values = 3;
    view.values = values;
    view.num_nodes = 1;
    view.nodes = &node;
    view.num_inputs = num_inputs;
    view.inputs = inputs;
    view.num_outputs = 1;
    view.outputs = outputs;
    view.weights = weights;
  }
};

// Status of a slot as a failure text ("" when OK); releases the status.
std::string slot_failure(bp_status_t* status, const char* slot) {
  if (status == nullptr) return "";
  return from_abi_status(status, std::string(slot)).message();
}

// Runs the graph's node through `api`: compile, context, execute (or
// execute_shaped), or execute_node for an imperative backend, with the
// tensors in device memory when the backend has its own. "" on success.
std::string probe_execute(const bp_backend_api_t* api, bp_backend_t* backend,
                          const bp_backend_info_t& info, ProbeGraph& g, const ProbeTrail& trail) {
  const size_t n_in = g.view.num_inputs;
  std::vector<float> host[3];
  for (size_t k = 0; k < 3; ++k) host[k] = {-1.0f, 0.5f, -2.0f, 3.0f};
  const size_t bytes = 4 * sizeof(float);
  void* data[3] = {host[0].data(), host[1].data(), host[2].data()};
  uint32_t device = 0;
  const bool device_memory = (info.flags & BP_BACKEND_FLAG_DEVICE_MEMORY) != 0 &&
                             BP_TABLE_HAS(api, memory_alloc) && BP_TABLE_HAS(api, memory_free) &&
                             BP_TABLE_HAS(api, copy_to_device) &&
                             BP_TABLE_HAS(api, copy_from_device);
  if (device_memory) {
    device = 1;
    for (size_t k : {size_t{0}, size_t{1}, size_t{2}}) {
      if (k >= n_in && k < 2) continue;
      trail.slot("memory_alloc");
      if (auto f = slot_failure(api->memory_alloc(backend, 0, bytes, 64, &data[k]), "memory_alloc");
          !f.empty())
        return f;
      if (k < n_in) {
        trail.slot("copy_to_device");
        if (auto f = slot_failure(api->copy_to_device(backend, 0, data[k], host[k].data(), bytes),
                                  "copy_to_device");
            !f.empty())
          return f;
      }
    }
  }
  auto tensor = [&](size_t k) {
    bp_tensor_t t{};
    t.struct_size = BP_STRUCT_SIZE(bp_tensor_t, device);
    t.dtype = BP_DTYPE_FLOAT32;
    t.rank = 2;
    t.shape = ProbeGraph::kShape;
    t.data = data[k];
    t.size_bytes = bytes;
    t.device = device;
    return t;
  };
  bp_tensor_t in[2] = {tensor(0), tensor(1)};
  bp_tensor_t out[1] = {tensor(2)};
  const bool symbolic =
      BP_TABLE_HAS(api, compile) && BP_TABLE_HAS(api, context_create) && BP_TABLE_HAS(api, execute);
  if (symbolic) {
    bp_compile_options_t options{};
    options.struct_size = BP_STRUCT_SIZE(bp_compile_options_t, shape_polymorphic);
    bp_node_report report(1);
    bp_compiled_t* compiled = nullptr;
    trail.slot("compile");
    if (auto f =
            slot_failure(api->compile(backend, &g.view, &options, &report, &compiled), "compile");
        !f.empty())
      return f;
    if (report.reported[0] && report.outcome[0] == BP_NODE_REJECTED) {
      trail.slot("compiled_destroy");
      api->compiled_destroy(compiled);
      return "";  // rejected at compile: the host would move the node elsewhere
    }
    bp_exec_context_t* context = nullptr;
    trail.slot("context_create");
    if (auto f = slot_failure(api->context_create(compiled, &context), "context_create");
        !f.empty())
      return f;
    std::string f;
    if (api->api_minor >= 2 && BP_TABLE_HAS(api, execute_shaped)) {
      bp_execute_args_t args{};
      args.struct_size = BP_STRUCT_SIZE(bp_execute_args_t, sink);
      args.num_inputs = n_in;
      args.inputs = in;
      args.num_outputs = 1;
      args.outputs = out;
      args.num_values = 3;
      args.value_shapes = g.shapes;
      trail.slot("execute_shaped");
      f = slot_failure(api->execute_shaped(context, &args), "execute_shaped");
    } else {
      trail.slot("execute");
      f = slot_failure(api->execute(context, n_in, in, 1, out), "execute");
    }
    if (!f.empty()) return f;
    trail.slot("context_destroy");
    api->context_destroy(context);
    trail.slot("compiled_destroy");
    api->compiled_destroy(compiled);
  } else if (BP_TABLE_HAS(api, execute_node)) {
    trail.slot("execute_node");
    if (auto f =
            slot_failure(api->execute_node(backend, &g.view, 0, n_in, in, 1, out), "execute_node");
        !f.empty())
      return f;
  }
  if (device_memory) {
    trail.slot("copy_from_device");
    if (auto f = slot_failure(api->copy_from_device(backend, 0, host[2].data(), data[2], bytes),
                              "copy_from_device");
        !f.empty())
      return f;
    for (size_t k = 0; k < 3; ++k)
      if (data[k] != host[k].data()) {
        trail.slot("memory_free");
        api->memory_free(backend, 0, data[k]);
      }
  }
  return "";
}

// Everything the child does; returns "" on success or the failure. Each
// step is announced on `trail` first.
std::string probe_steps(const std::string& path, const ProbeTrail& trail) {
  trail.at("dlopen (the library's initialisers)");
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return std::string("dlopen: ") + ::dlerror();
  auto get_id = reinterpret_cast<bp_get_backend_id_fn>(::dlsym(handle, BP_ENTRY_GET_BACKEND_ID));
  auto get_version = reinterpret_cast<bp_get_version_fn>(::dlsym(handle, BP_ENTRY_GET_VERSION));
  auto factory = reinterpret_cast<bp_backend_factory_fn>(::dlsym(handle, BP_ENTRY_BACKEND_FACTORY));
  if (!get_id || !get_version || !factory) return "missing entry point";
  try {
    trail.at("entry point GetBackendId");
    const char* id = get_id();
    if (id == nullptr || !valid_backend_id(id)) return "invalid backend id";
    uint32_t major = 0, minor = 0;
    trail.at("entry point GetVersion");
    get_version(&major, &minor);
    if (!version_compatible(major, minor, BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR))
      return "incompatible version";
    trail.at("entry point BackendFactory");
    auto* api = static_cast<const bp_backend_api_t*>(factory());
    if (api == nullptr) return "BackendFactory returned NULL";
    if (Status table = validate_backend_table(api); !table.ok()) return table.message();
    bp_backend_t* backend = nullptr;
    trail.slot("create");
    if (auto f = slot_failure(
            api->create(host_api(), BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR, &backend),
            "create");
        !f.empty())
      return f;
    if (backend == nullptr) return "create returned no instance";
    bp_backend_info_t info{};
    info.struct_size = sizeof info;
    trail.slot("get_info");
    if (auto f = slot_failure(api->get_info(backend, &info), "get_info"); !f.empty()) return f;
    if (api->api_minor >= 3 && BP_TABLE_HAS(api, get_op_schemas)) {
      size_t count = 0;
      const bp_op_schema_t* schemas = nullptr;
      trail.slot("get_op_schemas");
      if (auto f = slot_failure(api->get_op_schemas(backend, &count, &schemas), "get_op_schemas");
          !f.empty())
        return f;
    }
    // The first of these one-node graphs the backend claims is compiled and
    // executed; one that claims none is only asked.
    const std::unordered_map<std::string, Tensor> no_constants;
    TensorDataMap weights(&no_constants);
    static const std::pair<const char*, size_t> kOps[] = {
        {"Relu", 1}, {"Add", 2}, {"Mul", 2}, {"Sigmoid", 1}, {"Identity", 1}, {"Abs", 1}};
    for (const auto& [op, arity] : kOps) {
      ProbeGraph g(op, arity, weights.as_abi());
      bp_node_report report(1);
      trail.slot("query_support");
      if (auto f = slot_failure(api->query_support(backend, &g.view, &report), "query_support");
          !f.empty())
        return f;
      if (!report.reported[0] || report.outcome[0] != BP_NODE_SUPPORTED) continue;
      if (auto f = probe_execute(api, backend, info, g, trail); !f.empty()) return f;
      break;
    }
    trail.slot("destroy");
    api->destroy(backend);
  } catch (const std::exception& e) {
    return std::string("C++ exception: ") + e.what();
  } catch (...) {
    return "unknown C++ exception";
  }
  return "";
}

// Splits what the child sent into the last step it announced and its
// failure text.
std::pair<std::string, std::string> parse_trail(const std::string& text) {
  std::string where, failure;
  size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == '!') {
      failure = text.substr(pos + 1);
      break;
    }
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    if (text[pos] == '@') where = text.substr(pos + 1, end - pos - 1);
    pos = end + 1;
  }
  return {where, failure};
}

}  // namespace

Status probe_in_child(const std::string& path, int timeout_ms) {
  int fds[2];
  if (::pipe(fds) != 0) return io_error(std::string("probe: pipe: ") + std::strerror(errno));
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return io_error(std::string("probe: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::close(fds[0]);
    // A crash here is an expected outcome, not something to debug: no core
    // file, and no time spent writing one (or in a core handler) that would
    // turn "killed by a signal" into "timed out".
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    // Nor a handler inherited from the host process (a crash reporter, a
    // sanitizer's): it would turn the backend's crash into an exit status,
    // or into a report of the host's own crash.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, SIG_DFL);
    ProbeTrail trail(fds[1]);
    std::string failure = probe_steps(path, trail);
    if (!failure.empty()) trail.send("!" + failure);
    ::_exit(failure.empty() ? 0 : 3);
  }
  ::close(fds[1]);
  std::string message;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  bool timed_out = false;
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now())
                                    .count());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int r = ::poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      break;
    }
    char buf[512];
    ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;  // EOF: the child exited (or closed the pipe)
    if (message.size() < 65536) message.append(buf, static_cast<size_t>(n));
  }
  const auto [where, failure] = parse_trail(message);
  const std::string in = where.empty() ? "" : " in " + where;
  ::close(fds[0]);
  int status = 0;
  if (timed_out) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    return Status(StatusCode::kBackendError,
                  "probe timed out after " + std::to_string(timeout_ms) + " ms" + in);
  }
  // EOF can come before exit; wait for the exit, still bounded by the deadline.
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return Status(StatusCode::kBackendError,
                    "probe timed out after " + std::to_string(timeout_ms) + " ms" + in);
    }
    ::usleep(1000);
  }
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return Status(StatusCode::kBackendError, "probe crashed" + in + ": killed by signal " +
                                                 std::to_string(sig) + " (" + ::strsignal(sig) +
                                                 ")");
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
    return Status(StatusCode::kBackendError, "probe failed (exit " +
                                                 std::to_string(WEXITSTATUS(status)) + ")" + in +
                                                 (failure.empty() ? "" : ": " + failure));
  return ok_status();
}

}  // namespace dynamic_backend_utils

namespace {

namespace dbu = dynamic_backend_utils;

// dlopen handles shared by every runtime in the process; closed when the last
// backend instance using one is gone.
class Library {
 public:
  explicit Library(void* handle) : handle_(handle) {}
  ~Library() { ::dlclose(handle_); }
  void* handle() const { return handle_; }

 private:
  void* handle_;
};

std::mutex g_libraries_mutex;
std::map<std::string, std::weak_ptr<Library>> g_libraries;

Result<std::shared_ptr<Library>> open_library(const std::string& canonical) {
  std::lock_guard<std::mutex> lock(g_libraries_mutex);
  auto it = g_libraries.find(canonical);
  if (it != g_libraries.end())
    if (auto lib = it->second.lock()) return lib;
  ::dlerror();
  void* handle = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = ::dlerror();
    return Status(StatusCode::kInvalidArgument, e != nullptr ? e : "dlopen failed");
  }
  auto lib = std::make_shared<Library>(handle);
  g_libraries[canonical] = lib;
  return lib;
}

// Probe outcomes by (canonical path, size, mtime), for the process lifetime.
std::mutex g_probe_mutex;
std::map<std::tuple<std::string, uintmax_t, int64_t>, Status> g_probe_cache;

Status cached_probe(const std::string& canonical, int timeout_ms) {
  struct stat st {};
  if (::stat(canonical.c_str(), &st) != 0) return io_error(canonical + ": " + std::strerror(errno));
  auto key =
      std::make_tuple(canonical, static_cast<uintmax_t>(st.st_size),
                      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec);
  {
    std::lock_guard<std::mutex> lock(g_probe_mutex);
    auto it = g_probe_cache.find(key);
    if (it != g_probe_cache.end()) return it->second;
  }
  Status s = dbu::probe_in_child(canonical, timeout_ms);
  std::lock_guard<std::mutex> lock(g_probe_mutex);
  g_probe_cache[key] = s;
  return s;
}

// A file that passed every check up to the score; waiting for the choice
// between files that provide the same id.
struct Candidate {
  size_t report;  // index into files
  std::shared_ptr<Library> library;
  bp_backend_factory_fn factory = nullptr;
};

// "x.so", "x.so.1.2": what a misnamed backend file looks like.
bool looks_like_shared_object(const std::string& file_name) {
  static const std::regex pattern(R"(.*\.so(\.[0-9]+)*$)");
  return std::regex_match(file_name, pattern);
}

void reject(BackendFileReport& r, const std::string& step, const std::string& reason) {
  r.fate = BackendFileReport::Fate::kRejected;
  r.step = step;
  r.reason = reason;
  // A module build of a static backend next to it is the normal state of a
  // build tree: not worth a warning.
  log::write(step == "register" ? LogLevel::kInfo : LogLevel::kWarn,
             "dynamic backend " + r.path + " rejected at " + step + ": " + reason);
}

// The "trust" step: permissions of the file and the directory it really
// lives in (a symlink from a trusted directory may point into an untrusted
// one), then the digest list.
Status check_trust(const RuntimeOptions& options, const std::string& canonical) {
  if (!options.allow_insecure_backend_paths) {
    BP_RETURN_IF_ERROR(dbu::check_permissions(canonical));
    BP_RETURN_IF_ERROR(dbu::check_permissions(fs::path(canonical).parent_path().string()));
  }
  if (options.trusted_backend_digests.empty()) return ok_status();
  BP_ASSIGN_OR_RETURN(std::string digest, dbu::sha256_file(canonical));
  const auto& list = options.trusted_backend_digests;
  if (std::find(list.begin(), list.end(), digest) == list.end())
    return invalid_argument("SHA-256 " + digest +
                            " is not in RuntimeOptions::trusted_backend_digests");
  return ok_status();
}

// The "id", "version" and "score" steps, through the entry points of an
// opened library. False (with `rep` rejected) if the file cannot be used.
bool read_identity(void* handle, BackendFileReport& rep) {
  auto get_id = reinterpret_cast<bp_get_backend_id_fn>(::dlsym(handle, BP_ENTRY_GET_BACKEND_ID));
  auto get_version = reinterpret_cast<bp_get_version_fn>(::dlsym(handle, BP_ENTRY_GET_VERSION));
  auto get_score =
      reinterpret_cast<bp_get_backend_score_fn>(::dlsym(handle, BP_ENTRY_GET_BACKEND_SCORE));
  try {
    const char* id = get_id();
    rep.id = id != nullptr ? id : "";
  } catch (const std::exception& e) {
    reject(rep, "id", std::string("GetBackendId threw: ") + e.what());
    return false;
  } catch (...) {
    reject(rep, "id", "GetBackendId threw an exception");
    return false;
  }
  if (!dbu::valid_backend_id(rep.id)) {
    reject(rep, "id",
           rep.id.empty() ? "empty backend id"
                          : "invalid backend id '" + rep.id + "' (want [A-Za-z0-9]+)");
    return false;
  }
  uint32_t major = 0, minor = 0;
  try {
    get_version(&major, &minor);
  } catch (...) {
    reject(rep, "version", "GetVersion threw an exception");
    return false;
  }
  rep.api_version = std::to_string(major) + "." + std::to_string(minor);
  if (!dbu::version_compatible(major, minor, BP_API_VERSION_MAJOR, BP_API_VERSION_MINOR)) {
    reject(rep, "version",
           "built for backend API " + rep.api_version + ", runtime has " +
               std::to_string(BP_API_VERSION_MAJOR) + "." + std::to_string(BP_API_VERSION_MINOR) +
               " (needs the same major and a minor <= the runtime's)");
    return false;
  }
  rep.score = 1;
  if (get_score == nullptr) return true;
  try {
    rep.score = get_score();
  } catch (...) {
    reject(rep, "score", "GetBackendScore threw an exception");
    return false;
  }
  if (rep.score == 0) {
    reject(rep, "score", "GetBackendScore is 0: cannot run on this machine");
    return false;
  }
  return true;
}

// The steps of one file that passed "name" and "path": trust, probe, dlopen,
// symbols, id, version, score, register. A candidate, or nothing with `rep`
// rejected.
std::optional<Candidate> examine_file(const RuntimeOptions& options,
                                      const std::vector<std::string>& taken_ids,
                                      BackendFileReport& rep, size_t index) {
  Status trusted = check_trust(options, rep.canonical_path);
  if (!trusted.ok()) {
    reject(rep, "trust", trusted.message());
    return std::nullopt;
  }
  if (options.probe_backends) {
    Status s = cached_probe(rep.canonical_path, options.probe_timeout_ms);
    if (!s.ok()) {
      reject(rep, "probe", s.message());
      return std::nullopt;
    }
  }
  auto lib = open_library(rep.canonical_path);
  if (!lib.ok()) {
    reject(rep, "dlopen", lib.status().message());
    return std::nullopt;
  }
  void* h = (*lib)->handle();
  auto factory = reinterpret_cast<bp_backend_factory_fn>(::dlsym(h, BP_ENTRY_BACKEND_FACTORY));
  std::string missing;
  for (const char* entry :
       {BP_ENTRY_GET_BACKEND_ID, BP_ENTRY_GET_VERSION, BP_ENTRY_BACKEND_FACTORY})
    if (::dlsym(h, entry) == nullptr) missing += std::string(missing.empty() ? "" : ", ") + entry;
  if (!missing.empty()) {
    reject(rep, "symbols", "missing entry point " + missing);
    return std::nullopt;
  }
  if (!read_identity(h, rep)) return std::nullopt;
  // The name as found (a link's own name): what the user reads in the directory.
  std::string vendor, named_id;
  dbu::parse_file_name(fs::path(rep.path).filename().string(), &vendor, &named_id);
  if (rep.id != named_id) {
    reject(rep, "name",
           "the file is named for id '" + named_id + "' but GetBackendId() returns '" + rep.id +
               "'; they must match, case included: rename the file to " + vendor + "_" + rep.id +
               "_backend.so" + (rep.file_version.empty() ? "" : "." + rep.file_version) +
               " or return '" + named_id + "'");
    return std::nullopt;
  }
  if (std::find(taken_ids.begin(), taken_ids.end(), rep.id) != taken_ids.end()) {
    reject(rep, "register",
           "id '" + rep.id +
               "' belongs to a statically linked backend, which is never replaced (to use the "
               "file instead: --disable-static-backend " +
               rep.id + ", RuntimeOptions::disabled_static_backends)");
    return std::nullopt;
  }
  return Candidate{index, *lib, factory};
}

// The "name" and "path" steps of every file of one directory (reported in
// `result`), then examine_file on the ones that pass.
void scan_directory(const std::string& dir, const RuntimeOptions& options,
                    const std::vector<std::string>& taken_ids,
                    std::set<std::string>& seen_canonical, DynamicLoadResult& result,
                    std::vector<Candidate>& candidates) {
  for (const std::string& path : dbu::list_candidates(dir)) {
    std::string file_name = fs::path(path).filename().string();
    BackendFileReport r;
    r.path = path;
    if (!dbu::parse_file_name(file_name, nullptr, nullptr, &r.file_version)) {
      // Not named <vendor>_<name>_backend.so[.version]: not a candidate. A
      // shared object is reported (it is most likely a backend named wrong);
      // anything else a directory may hold is passed over in silence.
      if (looks_like_shared_object(file_name)) {
        reject(r, "name",
               "file name does not follow <vendor>_<name>_backend.so[.<version>] (vendor and "
               "name: letters and digits only), so the file is ignored");
        result.files.push_back(r);
      } else {
        log::debug("ignoring " + path + ": not a shared object");
      }
      continue;
    }
    std::error_code ec;
    fs::path canonical = fs::canonical(path, ec);
    if (ec) {
      reject(r, "path",
             fs::is_symlink(fs::symlink_status(path, ec))
                 ? "symlink resolves to a non-existent file"
                 : "cannot resolve path");
    } else if (r.canonical_path = canonical.string(); !fs::is_regular_file(canonical, ec)) {
      reject(r, "path", "not a regular file");
    } else if (!seen_canonical.insert(r.canonical_path).second) {
      r.fate = BackendFileReport::Fate::kSuperseded;
      r.step = "path";
      r.reason = "same file as one already found (" + r.canonical_path + ")";
      log::info("dynamic backend " + path + ": " + r.reason);
    } else {
      result.files.push_back(r);
      std::optional<Candidate> c =
          examine_file(options, taken_ids, result.files.back(), result.files.size() - 1);
      if (c) candidates.push_back(std::move(*c));
      continue;
    }
    result.files.push_back(r);
  }
}

// The "factory", "table" and "create" steps of the best candidate for `id`;
// the others are superseded once one loads.
void load_best(const std::string& id, const std::vector<Candidate>& candidates,
               DynamicLoadResult& result) {
  std::vector<const Candidate*> group;
  for (const Candidate& c : candidates)
    if (result.files[c.report].id == id) group.push_back(&c);
  std::stable_sort(group.begin(), group.end(), [&](const Candidate* a, const Candidate* b) {
    const BackendFileReport& x = result.files[a->report];
    const BackendFileReport& y = result.files[b->report];
    if (x.score != y.score) return x.score > y.score;
    return dbu::compare_versions(x.file_version, y.file_version) > 0;
  });
  std::string winner;
  for (const Candidate* c : group) {
    BackendFileReport& rep = result.files[c->report];
    if (!winner.empty()) {
      rep.fate = BackendFileReport::Fate::kSuperseded;
      rep.step = "register";
      rep.reason = "superseded by " + winner + " (same id '" + id + "')";
      log::info("dynamic backend " + rep.path + ": " + rep.reason);
      continue;
    }
    const bp_backend_api_t* api = nullptr;
    try {
      api = static_cast<const bp_backend_api_t*>(c->factory());
    } catch (...) {
      reject(rep, "factory", "BackendFactory threw an exception");
      continue;
    }
    if (api == nullptr) {
      reject(rep, "factory", "BackendFactory returned NULL");
      continue;
    }
    Status table = validate_backend_table(api);
    if (!table.ok()) {
      reject(rep, "table", table.message());
      continue;
    }
    auto backend = LoadedBackend::create(id, api, rep.canonical_path, c->library, rep.score);
    if (!backend.ok()) {
      reject(rep, "create", backend.status().message());
      continue;
    }
    rep.fate = BackendFileReport::Fate::kLoaded;
    rep.step = "";
    rep.reason = "";
    winner = rep.path;
    log::info("dynamic backend '" + id + "' loaded from " + rep.canonical_path);
    result.backends.push_back(*backend);
  }
}

}  // namespace

DynamicLoadResult load_dynamic_backends(const RuntimeOptions& options,
                                        const std::vector<std::string>& taken_ids) {
  DynamicLoadResult result;
  std::vector<std::string> dirs = dbu::search_paths(options, &result.paths);
  std::set<std::string> seen_canonical;
  std::vector<Candidate> candidates;
  for (const std::string& dir : dirs) {
    if (!options.allow_insecure_backend_paths) {
      Status s = dbu::check_permissions(dir);
      if (!s.ok()) {
        for (BackendPathReport& p : result.paths)
          if (p.path == dir) p.used = false, p.reason = s.message();
        log::warn("backend path skipped: " + s.message());
        continue;
      }
    }
    scan_directory(dir, options, taken_ids, seen_canonical, result, candidates);
  }
  // Group by id in discovery order; try the best first, the rest in order.
  std::vector<std::string> ids;
  for (const Candidate& c : candidates)
    if (std::find(ids.begin(), ids.end(), result.files[c.report].id) == ids.end())
      ids.push_back(result.files[c.report].id);
  for (const std::string& id : ids) load_best(id, candidates, result);
  return result;
}

}  // namespace backplane
