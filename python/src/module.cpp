// backplane._backplane — the Python binding of the C++ application API
// (include/backplane/runtime.hpp), shaped like onnxruntime.InferenceSession.
// It links libbackplane.so and uses nothing but its public headers.
//
// Why it is built the way it is:
// - Errors: every failed Status becomes a backplane.Error subclass chosen by
//   its code, carrying the Status message unchanged (the text the CLI prints
//   after "error: "). Raised only with the GIL held.
// - One InferenceSession serves many Python threads: it keeps a pool of
//   backplane::Session (one thread at a time each), takes one per run and
//   returns it, so N threads run at once with N sessions and a steady state
//   allocates no session.
// - run() binds C-contiguous, aligned input arrays (bind_input: no copy) and
//   copies others once into a contiguous array; it releases the GIL for the
//   binding and the run. Outputs are copied into new arrays, which therefore
//   stay valid after the next run and after the session is gone. (A copy is
//   the cheaper safe choice: handing the session's arena to Python would
//   mean a new arena per run, which costs more than copying the outputs.)
// - Runtimes are shared between sessions made with the same options, as long
//   as one of them lives, so each session does not rescan backend files.
#include <backplane/runtime.hpp>
#include <backplane/validate.hpp>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace py = pybind11;
namespace bp = backplane;
namespace fs = std::filesystem;

namespace {

// ---- errors -----------------------------------------------------------------

struct ErrorClass {
  bp::StatusCode code;
  const char* name;
  PyObject* extra_base;  // a builtin exception the class also derives from, or null
  const char* doc;
};

// backplane.Error and one subclass per status code. Filled at import.
PyObject* g_error = nullptr;
std::map<bp::StatusCode, PyObject*> g_errors;

// Raises the backplane.Error subclass of `status` (GIL held).
[[noreturn]] void raise_status(const bp::Status& status) {
  auto it = g_errors.find(status.code());
  PyErr_SetString(it == g_errors.end() ? g_error : it->second, status.message().c_str());
  throw py::error_already_set();
}
void check(const bp::Status& status) {
  if (!status.ok()) raise_status(status);
}
template <class T>
T unwrap(bp::Result<T>&& result) {
  if (!result.ok()) raise_status(result.status());
  return std::move(result).value();
}
[[noreturn]] void raise_invalid(const std::string& message) {
  raise_status(bp::invalid_argument(message));
}

// ---- dtypes -----------------------------------------------------------------

// The numpy dtype of a Backplane dtype; None where numpy has none (bfloat16).
py::object numpy_dtype(bp::DType dtype) {
  switch (dtype) {
    case bp::DType::kFloat32:
      return py::dtype::of<float>();
    case bp::DType::kFloat64:
      return py::dtype::of<double>();
    case bp::DType::kFloat16:
      return py::dtype("float16");
    case bp::DType::kInt8:
      return py::dtype::of<int8_t>();
    case bp::DType::kInt16:
      return py::dtype::of<int16_t>();
    case bp::DType::kInt32:
      return py::dtype::of<int32_t>();
    case bp::DType::kInt64:
      return py::dtype::of<int64_t>();
    case bp::DType::kUInt8:
      return py::dtype::of<uint8_t>();
    case bp::DType::kUInt16:
      return py::dtype::of<uint16_t>();
    case bp::DType::kUInt32:
      return py::dtype::of<uint32_t>();
    case bp::DType::kUInt64:
      return py::dtype::of<uint64_t>();
    case bp::DType::kBool:
      return py::dtype::of<bool>();
    default:
      return py::none();
  }
}

// The Backplane dtype of a numpy dtype; kUndefined if none matches.
bp::DType backplane_dtype(const py::dtype& dt) {
  const char kind = dt.kind();
  const size_t size = static_cast<size_t>(dt.itemsize());
  if (kind == 'b' && size == 1) return bp::DType::kBool;
  if (kind == 'f')
    return size == 4   ? bp::DType::kFloat32
           : size == 8 ? bp::DType::kFloat64
           : size == 2 ? bp::DType::kFloat16
                       : bp::DType::kUndefined;
  if (kind == 'i')
    return size == 1   ? bp::DType::kInt8
           : size == 2 ? bp::DType::kInt16
           : size == 4 ? bp::DType::kInt32
           : size == 8 ? bp::DType::kInt64
                       : bp::DType::kUndefined;
  if (kind == 'u')
    return size == 1   ? bp::DType::kUInt8
           : size == 2 ? bp::DType::kUInt16
           : size == 4 ? bp::DType::kUInt32
           : size == 8 ? bp::DType::kUInt64
                       : bp::DType::kUndefined;
  return bp::DType::kUndefined;
}

// ONNX Runtime's NodeArg.type spelling: "tensor(float)", "seq(tensor(int64))".
std::string ort_type(const bp::TensorInfo& info) {
  static const std::map<bp::DType, const char*> names = {
      {bp::DType::kFloat32, "float"},   {bp::DType::kFloat64, "double"},
      {bp::DType::kFloat16, "float16"}, {bp::DType::kBFloat16, "bfloat16"},
      {bp::DType::kInt8, "int8"},       {bp::DType::kInt16, "int16"},
      {bp::DType::kInt32, "int32"},     {bp::DType::kInt64, "int64"},
      {bp::DType::kUInt8, "uint8"},     {bp::DType::kUInt16, "uint16"},
      {bp::DType::kUInt32, "uint32"},   {bp::DType::kUInt64, "uint64"},
      {bp::DType::kBool, "bool"}};
  auto it = names.find(info.dtype);
  std::string tensor =
      std::string("tensor(") + (it == names.end() ? "undefined" : it->second) + ")";
  switch (info.kind) {
    case bp::TensorInfo::Kind::kTensor:
      return tensor;
    case bp::TensorInfo::Kind::kSequence:
      return "seq(" + tensor + ")";
    case bp::TensorInfo::Kind::kOptionalTensor:
      return "optional(" + tensor + ")";
    case bp::TensorInfo::Kind::kOptionalSequence:
      return "optional(seq(" + tensor + "))";
  }
  return tensor;
}

// A new array holding a copy of `t`.
py::array to_numpy(const bp::Tensor& t) {
  py::object dt = numpy_dtype(t.dtype());
  if (dt.is_none())
    raise_status(bp::unsupported(std::string("an output of dtype ") + bp::dtype_name(t.dtype()) +
                                 " has no numpy equivalent"));
  py::array out(py::reinterpret_borrow<py::dtype>(dt),
                std::vector<py::ssize_t>(t.shape().begin(), t.shape().end()));
  if (t.size_bytes() > 0) std::memcpy(out.mutable_data(), t.data(), t.size_bytes());
  return out;
}

// ---- options ----------------------------------------------------------------

const std::map<std::string, bp::LogLevel>& log_levels() {
  static const std::map<std::string, bp::LogLevel> levels = {
      {"trace", bp::LogLevel::kTrace}, {"debug", bp::LogLevel::kDebug},
      {"info", bp::LogLevel::kInfo},   {"warn", bp::LogLevel::kWarn},
      {"error", bp::LogLevel::kError}, {"off", bp::LogLevel::kOff}};
  return levels;
}
std::string log_level_name(bp::LogLevel level) {
  for (const auto& [name, l] : log_levels())
    if (l == level) return name;
  return "warn";
}

// The names RuntimeOptions takes as keyword arguments (its attributes).
const std::vector<std::string>& runtime_option_names() {
  static const std::vector<std::string> names = {"backend_path",
                                                 "dynamic_backends",
                                                 "probe_backends",
                                                 "probe_timeout_ms",
                                                 "allow_insecure_backend_paths",
                                                 "trusted_backend_digests",
                                                 "disabled_static_backends",
                                                 "threads",
                                                 "backend_config",
                                                 "log_level"};
  return names;
}

// Sets the attributes of `options` named in `kwargs`, removing them from
// `kwargs` when `consume`; other names stay for the caller (model options, or
// a TypeError through reject_unknown_kwargs).
void apply_runtime_kwargs(bp::RuntimeOptions& options, py::dict& kwargs, bool consume) {
  py::object target = py::cast(&options, py::return_value_policy::reference);
  for (const std::string& name : runtime_option_names()) {
    if (!kwargs.contains(name)) continue;
    target.attr(name.c_str()) = kwargs[name.c_str()];
    if (consume) PyDict_DelItemString(kwargs.ptr(), name.c_str());
  }
}

// RuntimeOptions from `options` (None, a RuntimeOptions or a dict) and the
// runtime options among `kwargs` (consumed).
bp::RuntimeOptions runtime_options(const py::object& options, py::dict& kwargs) {
  bp::RuntimeOptions out;
  if (py::isinstance<bp::RuntimeOptions>(options)) {
    out = options.cast<bp::RuntimeOptions>();
  } else if (py::isinstance<py::dict>(options)) {
    py::dict d = py::reinterpret_borrow<py::dict>(options);
    py::dict copy(d);
    apply_runtime_kwargs(out, copy, true);
    if (!copy.empty())
      throw py::type_error("options: unknown runtime option(s) " +
                           py::str(py::list(copy.attr("keys")())).cast<std::string>());
  } else if (!options.is_none()) {
    throw py::type_error("options must be a backplane.RuntimeOptions, a dict or None");
  }
  apply_runtime_kwargs(out, kwargs, true);
  return out;
}

void reject_unknown_kwargs(const py::dict& kwargs, const char* where) {
  if (kwargs.empty()) return;
  throw py::type_error(std::string(where) + "() got unexpected keyword argument(s) " +
                       py::str(py::list(kwargs.attr("keys")())).cast<std::string>());
}

// A runtime per distinct set of options, shared while anyone holds it.
std::shared_ptr<bp::Runtime> get_runtime(const bp::RuntimeOptions& o) {
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<bp::Runtime>> cache;
  std::string key = (o.backend_path ? "1" + *o.backend_path : "0") + '\0' +
                    std::to_string(o.dynamic_backends) + std::to_string(o.probe_backends) +
                    std::to_string(o.allow_insecure_backend_paths) + '\0' +
                    std::to_string(o.probe_timeout_ms) + '\0' + std::to_string(o.num_threads) +
                    '\0' + log_level_name(o.log_level) + '\0';
  for (const auto& d : o.trusted_backend_digests) key += d + ',';
  key += '\0';
  for (const auto& d : o.disabled_static_backends) key += d + ',';
  key += '\0';
  for (const auto& [id, settings] : o.backend_config)
    for (const auto& [k, v] : settings) key += id + '\0' + k + '\0' + v + '\0';
  // The environment decides the search path when no backend_path is given.
  if (const char* env = std::getenv("BACKPLANE_BACKEND_PATHS"))
    key += std::string("\0env", 4) + env;
  // The GIL is released before the lock is taken (a thread holding the lock
  // never waits for the GIL), and creating a runtime may take a while.
  std::shared_ptr<bp::Runtime> runtime;
  bp::Status status;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lock(mu);
    runtime = cache[key].lock();
    if (!runtime) {
      auto created = bp::Runtime::create(o);
      if (created.ok()) {
        runtime = std::move(created).value();
        cache[key] = runtime;
      } else {
        status = created.status();
      }
    }
  }
  check(status);
  return runtime;
}

std::vector<std::string> string_list(const py::object& obj, const char* what) {
  if (obj.is_none()) return {};
  if (py::isinstance<py::str>(obj))
    throw py::type_error(std::string(what) + " must be a list of strings, not a string");
  return obj.cast<std::vector<std::string>>();
}

std::string path_string(const py::handle& obj) {
  return py::str(py::module_::import("os").attr("fspath")(obj)).cast<std::string>();
}

// Fills the placement options (backends, overrides, allow_fallback,
// input_shapes) from keyword arguments, consuming them.
void apply_placement(bp::PlacementOptions& p, const py::object& backends,
                     const py::object& overrides, py::dict& kwargs) {
  p.backends = string_list(backends, "backends");
  if (!overrides.is_none()) p.overrides = overrides.cast<std::map<std::string, std::string>>();
  if (kwargs.contains("allow_fallback")) {
    p.allow_fallback = kwargs["allow_fallback"].cast<bool>();
    PyDict_DelItemString(kwargs.ptr(), "allow_fallback");
  }
  if (kwargs.contains("input_shapes")) {
    p.input_shapes = kwargs["input_shapes"].cast<std::map<std::string, bp::Shape>>();
    PyDict_DelItemString(kwargs.ptr(), "input_shapes");
  }
}

// ---- model from bytes ---------------------------------------------------------

// A model given as bytes goes through a temporary file (the runtime loads
// paths; a .bpk stays mapped after the file is removed). Messages name
// "<bytes>" instead of the temporary path.
class TempModelFile {
 public:
  explicit TempModelFile(const std::string& bytes) {
    const char* dir = std::getenv("TMPDIR");
    std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/backplane-model-XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    int fd = mkstemp(name.data());
    if (fd < 0) raise_status(bp::io_error("cannot create a temporary file for the model bytes"));
    path_ = name.data();
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) {
        // The destructor does not run for a constructor that throws.
        ::close(fd);
        ::unlink(path_.c_str());
        raise_status(bp::io_error("cannot write the model bytes to " + path_));
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  ~TempModelFile() { ::unlink(path_.c_str()); }
  TempModelFile(const TempModelFile&) = delete;
  TempModelFile& operator=(const TempModelFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

// ---- InferenceSession -----------------------------------------------------------

// get_inputs() / get_outputs() entries (ONNX Runtime's NodeArg).
struct NodeArg {
  std::string name;
  py::object dtype;  // numpy dtype, None if unknown until a run (or bfloat16)
  py::list shape;    // int, str (a symbolic dim), or None (unknown, unnamed)
  std::string type;  // "tensor(float)", "seq(tensor(int64))", ...
  std::string kind;  // "tensor", "sequence", "optional"
};

NodeArg node_arg(const bp::TensorInfo& info) {
  NodeArg a;
  a.name = info.name;
  a.dtype = numpy_dtype(info.dtype);
  for (size_t d = 0; d < info.shape.size(); ++d) {
    if (info.shape[d] >= 0) a.shape.append(info.shape[d]);
    else if (d < info.dim_names.size() && !info.dim_names[d].empty())
      a.shape.append(info.dim_names[d]);
    else a.shape.append(py::none());
  }
  a.type = ort_type(info);
  a.kind = info.kind == bp::TensorInfo::Kind::kTensor     ? "tensor"
           : info.kind == bp::TensorInfo::Kind::kSequence ? "sequence"
                                                          : "optional";
  return a;
}

class InferenceSession {
 public:
  InferenceSession(const py::object& model, const py::object& backends, const py::object& overrides,
                   const py::object& options, py::kwargs kwargs) {
    py::dict kw(kwargs);
    bp::RuntimeOptions ro = runtime_options(options, kw);
    bp::ModelOptions mo;
    apply_placement(mo, backends, overrides, kw);
    if (kw.contains("method")) {
      mo.method = kw["method"].cast<std::string>();
      PyDict_DelItemString(kw.ptr(), "method");
    }
    if (kw.contains("external_data")) {
      for (const auto& item : py::reinterpret_borrow<py::list>(py::list(kw["external_data"])))
        mo.external_data.push_back(path_string(item));
      PyDict_DelItemString(kw.ptr(), "external_data");
    }
    if (kw.contains("max_specializations")) {
      mo.max_specializations = kw["max_specializations"].cast<size_t>();
      PyDict_DelItemString(kw.ptr(), "max_specializations");
    }
    if (kw.contains("warm_up")) {
      mo.warm_up = kw["warm_up"].cast<bool>();
      PyDict_DelItemString(kw.ptr(), "warm_up");
    }
    reject_unknown_kwargs(kw, "InferenceSession");

    runtime_ = get_runtime(ro);
    std::unique_ptr<TempModelFile> temp;
    if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
        py::isinstance<py::memoryview>(model)) {
      temp = std::make_unique<TempModelFile>(
          py::bytes(py::module_::import("builtins").attr("bytes")(model)).cast<std::string>());
      path_ = "<bytes>";
    } else {
      path_ = path_string(model);
    }
    const std::string load_path = temp ? temp->path() : path_;
    bp::Result<std::shared_ptr<bp::Model>> loaded = bp::invalid_argument("");
    {
      py::gil_scoped_release nogil;
      loaded = runtime_->load_model(load_path, mo);
    }
    if (!loaded.ok() && temp)
      raise_status(bp::Status(loaded.status().code(),
                              replace_all(loaded.status().message(), temp->path(), path_)));
    model_ = unwrap(std::move(loaded));
    for (size_t i = 0; i < model_->inputs().size(); ++i) input_index_[model_->inputs()[i].name] = i;
    for (size_t i = 0; i < model_->outputs().size(); ++i)
      output_index_[model_->outputs()[i].name] = i;
    // The first run's session, made now: a constructed InferenceSession is
    // ready to run (as ONNX Runtime's is), and its first run does not pay
    // for the backends' contexts, arenas and warm-up (MobileNetV2: 5.3 ms
    // first against 1.8 steady when the pool started empty).
    bp::Result<std::unique_ptr<bp::Session>> first = bp::invalid_argument("");
    {
      py::gil_scoped_release nogil;
      first = model_->create_session();
    }
    idle_.push_back(unwrap(std::move(first)));
  }

  std::vector<NodeArg> get_inputs() const {
    std::vector<NodeArg> out;
    for (const auto& info : model_->inputs()) out.push_back(node_arg(info));
    return out;
  }
  std::vector<NodeArg> get_outputs() const {
    std::vector<NodeArg> out;
    for (const auto& info : model_->outputs()) out.push_back(node_arg(info));
    return out;
  }

  py::list run(const py::object& output_names, const py::object& input_feed,
               const py::object& run_options) {
    const std::string profile_path = profile_of(run_options);
    if (!py::isinstance<py::dict>(input_feed))
      throw py::type_error("input_feed must be a dict {input name: numpy array}");
    const std::vector<size_t> wanted = output_indices(output_names);
    Inputs in = gather_inputs(py::reinterpret_borrow<py::dict>(input_feed));
    Lease lease(*this);
    check(run_leased(*lease, in, profile_path));
    return collect_outputs(*lease, wanted);
  }

  // run() with outputs written where the caller says (IOBinding): `outputs`
  // is a list of (name, array or None); an array is bound (the run writes
  // into it, no copy) and returned as it is, None gets the run's own memory
  // (copied out). An empty list: every output, in model order.
  py::list run_bound(const py::dict& input_feed, const py::list& outputs,
                     const py::object& run_options) {
    const std::string profile_path = profile_of(run_options);
    std::vector<size_t> wanted;
    std::vector<py::object> given;
    if (outputs.empty()) {
      wanted = output_indices(py::none());
      given.assign(wanted.size(), py::none());
    }
    for (auto item : outputs) {
      auto pair = py::reinterpret_borrow<py::tuple>(item);
      wanted.push_back(output_indices(py::make_tuple(pair[0]))[0]);
      given.push_back(py::reinterpret_borrow<py::object>(pair[1]));
    }
    Inputs in = gather_inputs(input_feed);
    Lease lease(*this);
    std::vector<std::string> bound;
    bp::Status status;
    for (size_t k = 0; k < wanted.size() && status.ok(); ++k) {
      if (given[k].is_none()) continue;
      const bp::TensorInfo& info = model_->outputs()[wanted[k]];
      auto a = py::reinterpret_borrow<py::array>(given[k]);
      if (!(a.flags() & py::array::c_style) || !a.writeable())
        raise_invalid(path_ + ": output '" + info.name +
                      "' is bound to an array that is not C-contiguous and writable");
      status = lease->bind_output(
          info.name, bp::Tensor::view(backplane_dtype(a.dtype()),
                                      bp::Shape(a.shape(), a.shape() + a.ndim()),
                                      a.mutable_data()));
      status.with_context(path_);
      if (status.ok()) bound.push_back(info.name);
    }
    if (status.ok()) status = run_leased(*lease, in, profile_path);
    // The pooled session must not keep writing into the caller's arrays.
    for (const std::string& name : bound) (void)lease->bind_output(name, bp::Tensor());
    check(status);
    std::vector<size_t> unbound;
    for (size_t k = 0; k < wanted.size(); ++k)
      if (given[k].is_none()) unbound.push_back(wanted[k]);
    py::list copied = collect_outputs(*lease, unbound);
    py::list out;
    for (size_t k = 0, j = 0; k < wanted.size(); ++k)
      out.append(given[k].is_none() ? copied[j++] : given[k]);
    return out;
  }

  py::dict metadata() const {
    const bp::ModelMetadata& m = model_->metadata();
    py::dict d;
    d["producer_name"] = m.producer_name;
    d["producer_version"] = m.producer_version;
    d["domain"] = m.domain;
    d["description"] = m.description;
    d["version"] = m.version;
    d["graph_name"] = m.graph_name;
    d["graph_description"] = m.graph_description;
    d["custom_metadata_map"] = m.custom;
    return d;
  }

  // The summary of the last run profiled (run_options={'profile': path}).
  py::object last_profile() {
    std::optional<bp::ProfileSummary> p;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      p = last_profile_;
    }
    if (!p) return py::none();
    auto rows = [](const std::vector<bp::ProfileSummary::Row>& rs) {
      py::list out;
      for (const auto& r : rs) {
        py::dict d;
        d["name"] = r.name;
        d["ms"] = r.ms;
        d["share"] = r.share;
        d["count"] = r.count;
        out.append(d);
      }
      return out;
    };
    py::dict d;
    d["trace"] = p->path;
    d["runs"] = p->runs;
    d["run_ms"] = p->run_ms;
    d["by_backend"] = rows(p->by_backend);
    d["by_op_type"] = rows(p->by_op_type);
    d["text"] = p->to_string();
    return d;
  }

  std::vector<std::string> backends_used() const { return model_->backends_used(); }
  const std::vector<bp::PartitionDescription>& partitions() const { return model_->partitions(); }
  const std::vector<std::string>& notes() const { return model_->notes(); }
  bool runs_in_stages() const { return model_->runs_in_stages(); }
  std::string describe_plan(const std::string& format) const {
    bp::PlanFormat f;
    if (format == "text") f = bp::PlanFormat::kText;
    else if (format == "json") f = bp::PlanFormat::kJson;
    else if (format == "dot") f = bp::PlanFormat::kDot;
    else raise_invalid("describe_plan: format '" + format + "' is not one of text, json, dot");
    return model_->describe_plan(f);
  }
  py::dict specialization_stats() const {
    bp::SpecializationStats s = model_->specialization_stats();
    py::dict d;
    d["hits"] = s.hits;
    d["misses"] = s.misses;
    d["builds"] = s.builds;
    d["evictions"] = s.evictions;
    d["cached"] = s.cached;
    d["variants"] = s.variants;
    d["capacity"] = s.capacity;
    d["polymorphic_partitions"] = s.polymorphic_partitions;
    d["build_ms"] = s.build_ms;
    return d;
  }
  const std::string& model_path() const { return path_; }
  size_t pooled_sessions() {
    std::lock_guard<std::mutex> lock(pool_mu_);
    return idle_.size();
  }

 private:
  // A backplane::Session taken from the pool for one run and given back.
  class Lease {
   public:
    explicit Lease(InferenceSession& owner) : owner_(owner) {
      {
        std::lock_guard<std::mutex> lock(owner_.pool_mu_);
        if (!owner_.idle_.empty()) {
          session_ = std::move(owner_.idle_.back());
          owner_.idle_.pop_back();
        }
      }
      if (!session_) {
        bp::Result<std::unique_ptr<bp::Session>> made = bp::invalid_argument("");
        {
          py::gil_scoped_release nogil;
          made = owner_.model_->create_session();
        }
        session_ = unwrap(std::move(made));
      }
    }
    ~Lease() {
      std::lock_guard<std::mutex> lock(owner_.pool_mu_);
      owner_.idle_.push_back(std::move(session_));
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    bp::Session* operator->() { return session_.get(); }
    bp::Session& operator*() { return *session_; }

   private:
    InferenceSession& owner_;
    std::unique_ptr<bp::Session> session_;
  };

  // The inputs of one run: a tensor view over an array `arrays` holds (or a
  // value of another kind) per model input, made before the GIL is released.
  struct Inputs {
    std::vector<py::array> arrays;
    std::vector<bp::AnyValue> values;
    std::vector<bool> is_view;
  };

  Inputs gather_inputs(const py::dict& feed) const {
    const auto& infos = model_->inputs();
    for (auto item : feed) {
      const std::string name = py::str(item.first).cast<std::string>();
      if (!input_index_.count(name))
        raise_invalid(path_ + ": model has no input named '" + name + "' (inputs: " + names(infos) +
                      ")");
    }
    Inputs in;
    in.values.resize(infos.size());
    in.is_view.assign(infos.size(), false);
    for (size_t i = 0; i < infos.size(); ++i) {
      const auto& info = infos[i];
      py::str key(info.name);
      if (!feed.contains(key) && !info.default_value.empty()) {
        // The model's default (an initializer listed among the inputs),
        // bound in place: a leased session may hold an earlier run's feed.
        in.values[i] = bp::AnyValue::of(info.default_value);
        in.is_view[i] = true;
        continue;
      }
      if (!feed.contains(key))
        raise_invalid(path_ + ": input '" + info.name + "' is not given (inputs: " + names(infos) +
                      ")");
      py::object v = feed[key];
      if (info.kind != bp::TensorInfo::Kind::kTensor) {
        in.values[i] = any_value(info, v, in.arrays);
        continue;
      }
      in.arrays.push_back(as_input_array(info, v));
      const py::array& a = in.arrays.back();
      in.values[i] = bp::AnyValue::of(bp::Tensor::view(backplane_dtype(a.dtype()),
                                                       bp::Shape(a.shape(), a.shape() + a.ndim()),
                                                       const_cast<void*>(a.data())));
      in.is_view[i] = true;
    }
    return in;
  }

  // The outputs `wanted` of the session's last run, copied into new arrays.
  // run_options: None or {"profile": path}. The path, or "".
  static std::string profile_of(const py::object& run_options) {
    std::string profile_path;
    if (run_options.is_none()) return profile_path;
    if (!py::isinstance<py::dict>(run_options))
      throw py::type_error("run_options must be None or a dict, e.g. {'profile': 'trace.json'}");
    for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(run_options)) {
      const std::string k = py::str(key).cast<std::string>();
      if (k != "profile") raise_invalid("run_options: unknown key '" + k + "' (known: profile)");
      profile_path = py::str(value).cast<std::string>();
    }
    return profile_path;
  }

  // Sets the inputs and runs, profiling into `profile_path` if not empty.
  bp::Status run_leased(bp::Session& session, const Inputs& in, const std::string& profile_path) {
    const auto& infos = model_->inputs();
    bp::Status status;
    py::gil_scoped_release nogil;
    for (size_t i = 0; i < infos.size() && status.ok(); ++i) {
      if (in.is_view[i]) status = session.bind_input(infos[i].name, in.values[i].tensor);
      else status = session.set_input_value(infos[i].name, in.values[i]);
      // As `backplane run` says it: an input's error names the model.
      status.with_context(path_);
    }
    if (status.ok() && !profile_path.empty()) status = session.start_profiling(profile_path);
    if (status.ok()) status = session.run();
    if (!profile_path.empty()) {
      bp::Result<bp::ProfileSummary> ended = session.end_profiling();
      if (status.ok() && !ended.ok()) status = ended.status();
      if (ended.ok()) {
        std::lock_guard<std::mutex> lock(pool_mu_);
        last_profile_ = std::move(*ended);
      }
    }
    return status;
  }

  py::list collect_outputs(const bp::Session& session, const std::vector<size_t>& wanted) const {
    py::list out;
    for (size_t i : wanted) {
      const auto& info = model_->outputs()[i];
      if (info.kind == bp::TensorInfo::Kind::kTensor) {
        out.append(to_numpy(session.output(i)));
        continue;
      }
      bp::AnyValue value = unwrap(session.get_output_value(info.name));
      if (value.kind == bp::AnyValue::Kind::kNone) {
        out.append(py::none());
      } else if (value.kind == bp::AnyValue::Kind::kSequence) {
        py::list seq;
        for (const auto& t : value.sequence) seq.append(to_numpy(t));
        out.append(seq);
      } else {
        out.append(to_numpy(value.tensor));
      }
    }
    return out;
  }

  static std::string names(const std::vector<bp::TensorInfo>& infos) {
    std::string s;
    for (const auto& i : infos) s += (s.empty() ? "" : ", ") + i.name;
    return s;
  }

  std::vector<size_t> output_indices(const py::object& output_names) const {
    std::vector<size_t> out;
    if (output_names.is_none()) {
      for (size_t i = 0; i < model_->outputs().size(); ++i) out.push_back(i);
      return out;
    }
    for (const std::string& name : string_list(output_names, "output_names")) {
      auto it = output_index_.find(name);
      if (it == output_index_.end())
        raise_status(bp::not_found(path_ + ": model has no output named '" + name +
                                   "' (outputs: " + names(model_->outputs()) + ")"));
      out.push_back(it->second);
    }
    return out;
  }

  // The array a tensor input is read from: `v` itself when it is a
  // C-contiguous, aligned ndarray (read in place), else one converted copy
  // (non-ndarrays take the input's dtype; ndarrays keep theirs, so a wrong
  // dtype is reported rather than silently cast).
  py::array as_input_array(const bp::TensorInfo& info, const py::object& v) const {
    if (py::isinstance<py::array>(v)) {
      py::array a = py::reinterpret_borrow<py::array>(v);
      if (backplane_dtype(a.dtype()) == bp::DType::kUndefined)
        raise_invalid(path_ + ": input '" + info.name + "': numpy dtype " +
                      py::str(a.dtype()).cast<std::string>() + " is not supported");
      constexpr int kReady = static_cast<int>(py::array::c_style) |
                             static_cast<int>(py::detail::npy_api::NPY_ARRAY_ALIGNED_);
      if (!a.dtype().attr("isnative").cast<bool>()) {  // bytes in the other order: swap once
        py::object native = a.dtype().attr("newbyteorder")("=");
        return py::module_::import("numpy").attr("ascontiguousarray")(a, native);
      }
      if ((a.flags() & kReady) == kReady) return a;
      return py::array::ensure(a, py::array::c_style | py::array::forcecast);
    }
    py::object dt = numpy_dtype(info.dtype);
    py::object np = py::module_::import("numpy");
    return np.attr("ascontiguousarray")(v, dt.is_none() ? py::object(py::none()) : dt);
  }

  // A sequence (list of arrays) or an optional (None, or a value) input.
  bp::AnyValue any_value(const bp::TensorInfo& info, const py::object& v,
                         std::vector<py::array>& keep) const {
    auto tensor_of = [&](const py::handle& item) {
      keep.push_back(as_input_array(info, py::reinterpret_borrow<py::object>(item)));
      const py::array& a = keep.back();
      return bp::Tensor::view(backplane_dtype(a.dtype()),
                              bp::Shape(a.shape(), a.shape() + a.ndim()),
                              const_cast<void*>(a.data()));
    };
    if (v.is_none()) return bp::AnyValue::none(info.dtype);
    const bool sequence = info.kind == bp::TensorInfo::Kind::kSequence ||
                          info.kind == bp::TensorInfo::Kind::kOptionalSequence;
    if (sequence) {
      if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v))
        raise_invalid(path_ + ": input '" + info.name +
                      "' is a sequence: pass a list of numpy arrays");
      std::vector<bp::Tensor> items;
      for (auto item : v) items.push_back(tensor_of(item));
      return bp::AnyValue::of_sequence(std::move(items), info.dtype);
    }
    return bp::AnyValue::of(tensor_of(v));
  }

  std::shared_ptr<bp::Runtime> runtime_;
  std::shared_ptr<bp::Model> model_;
  std::string path_;
  std::unordered_map<std::string, size_t> input_index_, output_index_;
  std::mutex pool_mu_;
  std::optional<bp::ProfileSummary> last_profile_;  // guarded by pool_mu_
  std::vector<std::unique_ptr<bp::Session>> idle_;
};

// ---- module functions -------------------------------------------------------------

std::vector<std::string> available_backends(const py::object& options, py::kwargs kwargs) {
  py::dict kw(kwargs);
  bp::RuntimeOptions ro = runtime_options(options, kw);
  reject_unknown_kwargs(kw, "available_backends");
  std::vector<std::string> ids;
  for (const auto& b : get_runtime(ro)->backends()) ids.push_back(b.id);
  return ids;
}

std::shared_ptr<bp::Runtime> runtime_for(const char* where, const py::object& options,
                                         py::kwargs& kwargs) {
  py::dict kw(kwargs);
  bp::RuntimeOptions ro = runtime_options(options, kw);
  reject_unknown_kwargs(kw, where);
  return get_runtime(ro);
}

py::dict compile_report(const bp::CompileReport& r) {
  py::dict d;
  d["methods"] = r.methods;
  d["specializations"] = r.specializations;
  d["partitions"] = r.partitions;
  d["payload_bytes"] = r.payload_bytes;
  d["named_data_keys"] = r.named_data_keys;
  d["requested_bytes"] = r.requested_bytes;
  d["stored_bytes"] = r.stored_bytes;
  d["file_bytes"] = r.file_bytes;
  d["external_bytes"] = r.external_bytes;
  return d;
}

py::dict compile(const py::object& methods, const py::object& output,
                 const py::object& external_data, const py::object& backends,
                 const py::object& overrides, const py::object& shapes, bool shape_polymorphic,
                 const py::object& options, py::kwargs kwargs) {
  py::dict kw(kwargs);
  bp::RuntimeOptions ro = runtime_options(options, kw);
  bp::CompileOptions co;
  apply_placement(co, backends, overrides, kw);
  reject_unknown_kwargs(kw, "compile");
  if (!external_data.is_none()) co.external_data = path_string(external_data);
  co.shape_polymorphic = shape_polymorphic;
  if (!shapes.is_none()) co.shapes = shapes.cast<std::vector<std::map<std::string, bp::Shape>>>();
  // Methods: paths (named by their stem, as `backplane compile` names them)
  // or (name, path) pairs.
  std::vector<std::pair<std::string, std::string>> list;
  if (py::isinstance<py::str>(methods) || !py::isinstance<py::sequence>(methods))
    throw py::type_error("methods must be a list of paths or (name, path) pairs");
  for (auto item : methods) {
    if (py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) {
      auto pair = item.cast<std::pair<std::string, py::object>>();
      list.emplace_back(pair.first, path_string(pair.second));
    } else {
      std::string p = path_string(item);
      list.emplace_back(fs::path(p).stem().string(), p);
    }
  }
  if (list.empty()) raise_invalid("compile: no model to compile");
  auto rt = get_runtime(ro);
  const std::string out = path_string(output);
  bp::Result<bp::CompileReport> report = bp::invalid_argument("");
  {
    py::gil_scoped_release nogil;
    report = rt->compile(list, out, co);
  }
  return compile_report(unwrap(std::move(report)));
}

py::object inspect(const py::object& path, const py::object& external_data, bool as_text) {
  std::vector<std::string> external;
  if (!external_data.is_none())
    for (auto item : external_data) external.push_back(path_string(item));
  const std::string p = path_string(path);
  bp::Result<std::string> text = bp::invalid_argument("");
  {
    py::gil_scoped_release nogil;
    text = bp::inspect_artifact(p, !as_text, external);
  }
  std::string s = unwrap(std::move(text));
  if (as_text) return py::str(s);
  return py::module_::import("json").attr("loads")(s);
}

// backplane.validate: backplane::validate's report as a dict (the CLI's --json).
py::object validate(const py::object& path, const py::object& inputs, const py::object& backends,
                    const py::object& overrides, bool find_node, const py::object& options,
                    py::kwargs kwargs) {
  py::dict kw(kwargs);
  bp::RuntimeOptions ro = runtime_options(options, kw);
  bp::ValidateOptions vo;
  apply_placement(vo, backends, overrides, kw);
  reject_unknown_kwargs(kw, "validate");
  vo.find_node = find_node;
  if (!inputs.is_none()) {
    if (!py::isinstance<py::dict>(inputs))
      throw py::type_error("inputs must be a dict {input name: numpy array}");
    for (auto item : inputs.cast<py::dict>()) {
      const std::string name = item.first.cast<std::string>();
      py::array a = py::array::ensure(item.second, py::array::c_style);
      if (!a) throw py::type_error("input '" + name + "' is not convertible to a numpy array");
      const bp::DType dtype = backplane_dtype(a.dtype());
      if (dtype == bp::DType::kUndefined)
        raise_invalid("input '" + name + "': numpy dtype " +
                      py::str(a.dtype()).cast<std::string>() + " is not supported");
      vo.inputs[name] =
          bp::Tensor::copy_of(dtype, bp::Shape(a.shape(), a.shape() + a.ndim()), a.data());
    }
  }
  auto rt = get_runtime(ro);
  const std::string p = path_string(path);
  bp::Result<bp::ValidationReport> report = bp::invalid_argument("");
  {
    py::gil_scoped_release nogil;
    report = bp::validate(*rt, p, vo);
  }
  const std::string text = bp::validation_report_json(unwrap(std::move(report)), p);
  return py::module_::import("json").attr("loads")(text);
}

// Creates backplane.Error and its subclasses in `m`.
void add_errors(py::module_& m) {
  g_error = PyErr_NewExceptionWithDoc(
      "backplane.Error",
      "Base of every error Backplane raises; str(e) is the message the CLI prints.", nullptr,
      nullptr);
  if (g_error == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(g_error));
  const std::array<ErrorClass, 11> classes = {{
      {bp::StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError,
       "The caller passed something wrong: a name, a shape, a dtype, an option."},
      {bp::StatusCode::kUnsupported, "UnsupportedError", nullptr,
       "Valid but not supported here: an operator, a dtype, a feature."},
      {bp::StatusCode::kUnimplemented, "UnimplementedError", PyExc_NotImplementedError,
       "The interface has it, the implementation does not."},
      {bp::StatusCode::kOutOfMemory, "OutOfMemoryError", PyExc_MemoryError, "Out of memory."},
      {bp::StatusCode::kNotFound, "NotFoundError", PyExc_LookupError,
       "A file, model input or output, backend or key does not exist."},
      {bp::StatusCode::kCorruptData, "CorruptDataError", nullptr,
       "A file or payload is truncated, malformed or fails its checksum."},
      {bp::StatusCode::kVersionMismatch, "VersionMismatchError", nullptr,
       "Incompatible versions: ABI, format, opset, payload."},
      {bp::StatusCode::kDeviceError, "DeviceError", nullptr, "A device or its driver failed."},
      {bp::StatusCode::kInternal, "InternalError", nullptr,
       "A bug, in Backplane or in the backend the message names."},
      {bp::StatusCode::kIoError, "IoError", PyExc_OSError,
       "The operating system refused: open, read, mmap."},
      {bp::StatusCode::kBackendError, "BackendError", nullptr,
       "A backend failed or broke the ABI contract."},
  }};
  for (const ErrorClass& c : classes) {
    py::object bases =
        c.extra_base ? py::object(py::make_tuple(py::handle(g_error), py::handle(c.extra_base)))
                     : py::object(py::reinterpret_borrow<py::object>(g_error));
    std::string qualified = std::string("backplane.") + c.name;
    PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr);
    if (type == nullptr) throw py::error_already_set();
    py::handle(type).attr("code") = bp::status_code_name(c.code);
    g_errors[c.code] = type;
    m.add_object(c.name, py::handle(type));
  }
}

}  // namespace

PYBIND11_MODULE(_backplane, m) {
  m.doc() = "Backplane: run ONNX models and compiled artifacts on pluggable backends.";
  m.attr("__version__") = BACKPLANE_VERSION;
  add_errors(m);

  py::class_<bp::RuntimeOptions>(m, "RuntimeOptions",
                                 "How a runtime finds and loads backends (see docs/python.md).")
      .def(py::init([](py::kwargs kwargs) {
        py::dict kw(kwargs);
        bp::RuntimeOptions o;
        apply_runtime_kwargs(o, kw, true);
        reject_unknown_kwargs(kw, "RuntimeOptions");
        return o;
      }))
      .def_property(
          "backend_path",
          [](const bp::RuntimeOptions& o) -> py::object {
            return o.backend_path ? py::object(py::str(*o.backend_path)) : py::object(py::none());
          },
          [](bp::RuntimeOptions& o, const py::object& v) {
            if (v.is_none()) o.backend_path.reset();
            else {
              std::string p = path_string(v);
              // Relative means relative to here, as on the command line.
              o.backend_path = p.empty() ? p : fs::absolute(p).lexically_normal().string();
            }
          })
      .def_readwrite("dynamic_backends", &bp::RuntimeOptions::dynamic_backends)
      .def_readwrite("probe_backends", &bp::RuntimeOptions::probe_backends)
      .def_readwrite("probe_timeout_ms", &bp::RuntimeOptions::probe_timeout_ms)
      .def_readwrite("allow_insecure_backend_paths",
                     &bp::RuntimeOptions::allow_insecure_backend_paths)
      .def_readwrite("trusted_backend_digests", &bp::RuntimeOptions::trusted_backend_digests)
      .def_readwrite("disabled_static_backends", &bp::RuntimeOptions::disabled_static_backends)
      .def_readwrite("threads", &bp::RuntimeOptions::num_threads)
      .def_readwrite("backend_config", &bp::RuntimeOptions::backend_config)
      .def_property(
          "log_level", [](const bp::RuntimeOptions& o) { return log_level_name(o.log_level); },
          [](bp::RuntimeOptions& o, const std::string& v) {
            auto it = log_levels().find(v);
            if (it == log_levels().end())
              raise_invalid("unknown log level '" + v + "'");  // as the CLI says it
            o.log_level = it->second;
          })
      .def("__repr__", [](const bp::RuntimeOptions& o) {
        py::object self = py::cast(o);
        std::string s = "RuntimeOptions(";
        bool first = true;
        for (const std::string& name : runtime_option_names()) {
          s += (first ? "" : ", ") + name + "=" +
               py::repr(self.attr(name.c_str())).cast<std::string>();
          first = false;
        }
        return s + ")";
      });

  py::class_<NodeArg>(m, "NodeArg", "An input or output of a model.")
      .def_readonly("name", &NodeArg::name)
      .def_readonly("dtype", &NodeArg::dtype)
      .def_readonly("shape", &NodeArg::shape)
      .def_readonly("type", &NodeArg::type)
      .def_readonly("kind", &NodeArg::kind)
      .def("__repr__", [](const NodeArg& a) {
        return "NodeArg(name=" + py::repr(py::str(a.name)).cast<std::string>() +
               ", dtype=" + py::repr(a.dtype).cast<std::string>() +
               ", shape=" + py::repr(a.shape).cast<std::string>() + ")";
      });

  py::class_<bp::PartitionDescription>(m, "Partition", "One partition of a model's plan.")
      .def_readonly("backend", &bp::PartitionDescription::backend)
      .def_readonly("nodes", &bp::PartitionDescription::nodes)
      .def_readonly("inputs", &bp::PartitionDescription::inputs)
      .def_readonly("outputs", &bp::PartitionDescription::outputs)
      .def_readonly("imperative", &bp::PartitionDescription::imperative)
      .def_readonly("polymorphic", &bp::PartitionDescription::polymorphic)
      .def("__repr__", [](const bp::PartitionDescription& p) {
        return "Partition(backend='" + p.backend + "', nodes=" + std::to_string(p.nodes.size()) +
               ")";
      });

  py::class_<bp::BackendDescription>(m, "BackendInfo", "A registered backend.")
      .def_readonly("id", &bp::BackendDescription::id)
      .def_readonly("vendor", &bp::BackendDescription::vendor)
      .def_readonly("description", &bp::BackendDescription::description)
      .def_property_readonly("api_version",
                             [](const bp::BackendDescription& b) {
                               return std::to_string(b.api_major) + "." +
                                      std::to_string(b.api_minor);
                             })
      .def_readonly("source", &bp::BackendDescription::source)
      .def_property_readonly("devices",
                             [](const bp::BackendDescription& b) {
                               py::list out;
                               for (const bp::DeviceDescription& d : b.devices) {
                                 py::dict e;
                                 e["name"] = d.name;
                                 e["vendor"] = d.vendor;
                                 e["kind"] = d.kind;
                                 e["selected"] = d.selected;
                                 out.append(e);
                               }
                               return out;
                             })
      .def("__repr__", [](const bp::BackendDescription& b) {
        return "BackendInfo(id='" + b.id + "', source='" + b.source + "')";
      });

  py::class_<bp::BackendFileReport>(m, "BackendFile",
                                    "A file the dynamic loader looked at, and its fate.")
      .def_readonly("path", &bp::BackendFileReport::path)
      .def_readonly("canonical_path", &bp::BackendFileReport::canonical_path)
      .def_readonly("id", &bp::BackendFileReport::id)
      .def_readonly("file_version", &bp::BackendFileReport::file_version)
      .def_readonly("api_version", &bp::BackendFileReport::api_version)
      .def_readonly("score", &bp::BackendFileReport::score)
      .def_property_readonly(
          "fate", [](const bp::BackendFileReport& f) { return std::string(bp::fate_name(f.fate)); })
      .def_readonly("step", &bp::BackendFileReport::step)
      .def_readonly("reason", &bp::BackendFileReport::reason)
      .def("__repr__", [](const bp::BackendFileReport& f) {
        std::string s = "BackendFile(path='" + f.path + "', fate='" + bp::fate_name(f.fate) + "'";
        if (!f.reason.empty())
          s += ", step='" + f.step + "', reason=" + py::repr(py::str(f.reason)).cast<std::string>();
        return s + ")";
      });

  py::class_<bp::BackendPathReport>(m, "BackendPath", "A directory searched for backends.")
      .def_readonly("path", &bp::BackendPathReport::path)
      .def_readonly("used", &bp::BackendPathReport::used)
      .def_readonly("reason", &bp::BackendPathReport::reason)
      .def("__repr__", [](const bp::BackendPathReport& p) {
        return "BackendPath(path='" + p.path + "', used=" + (p.used ? "True" : "False") + ")";
      });

  py::class_<InferenceSession>(m, "InferenceSession",
                               "A loaded model (ONNX or .bpk), run from any number of threads.")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&,
                    py::kwargs>(),
           py::arg("path_or_bytes"), py::arg("backends") = py::none(),
           py::arg("overrides") = py::none(), py::arg("options") = py::none())
      .def("get_inputs", &InferenceSession::get_inputs)
      .def("get_outputs", &InferenceSession::get_outputs)
      .def("run", &InferenceSession::run, py::arg("output_names"), py::arg("input_feed"),
           py::arg("run_options") = py::none())
      .def_property_readonly("backends_used", &InferenceSession::backends_used)
      .def("get_providers", &InferenceSession::backends_used,
           "ONNX Runtime's name for backends_used.")
      .def_property_readonly("partitions", &InferenceSession::partitions)
      .def_property_readonly("notes", &InferenceSession::notes)
      .def_property_readonly("runs_in_stages", &InferenceSession::runs_in_stages)
      .def_property_readonly("specialization_stats", &InferenceSession::specialization_stats)
      .def_property_readonly("last_profile", &InferenceSession::last_profile,
                             "Summary of the last run made with run_options={'profile': path}")
      .def_property_readonly("model_path", &InferenceSession::model_path)
      .def("describe_plan", &InferenceSession::describe_plan, py::arg("format") = "text")
      .def("_run_bound", &InferenceSession::run_bound, py::arg("input_feed"), py::arg("outputs"),
           py::arg("run_options") = py::none())
      .def("_metadata", &InferenceSession::metadata)
      .def("_pooled_sessions", &InferenceSession::pooled_sessions)
      .def("__repr__", [](InferenceSession& s) {
        std::string backends;
        for (const std::string& b : s.backends_used())
          backends += (backends.empty() ? "" : ", ") + b;
        return "InferenceSession(" + py::repr(py::str(s.model_path())).cast<std::string>() +
               ", backends_used=[" + backends + "])";
      });

  m.def("available_backends", &available_backends, py::arg("options") = py::none(),
        "The ids of the registered backends, in default preference order.");
  m.def(
      "backend_files",
      [](const py::object& options, py::kwargs kwargs) {
        return runtime_for("backend_files", options, kwargs)->backend_files();
      },
      py::arg("options") = py::none(),
      "Every file the dynamic loader looked at, with its fate and why.");
  m.def(
      "backends",
      [](const py::object& options, py::kwargs kwargs) {
        return runtime_for("backends", options, kwargs)->backends();
      },
      py::arg("options") = py::none(), "The registered backends, with vendor and source.");
  m.def(
      "backend_paths",
      [](const py::object& options, py::kwargs kwargs) {
        return runtime_for("backend_paths", options, kwargs)->backend_paths();
      },
      py::arg("options") = py::none(), "The directories searched for backends.");
  m.def("compile", &compile, py::arg("methods"), py::arg("output"),
        py::arg("external_data") = py::none(), py::arg("backends") = py::none(),
        py::arg("overrides") = py::none(), py::arg("shapes") = py::none(),
        py::arg("shape_polymorphic") = true, py::arg("options") = py::none(),
        "Compiles ONNX models (one method each) into one .bpk artifact.");
  m.def("inspect", &inspect, py::arg("path"), py::arg("external_data") = py::none(),
        py::arg("as_text") = false,
        "Describes a .bpk: methods, partitions, named data (a dict, or the CLI's text).");
  m.def("validate", &validate, py::arg("path"), py::arg("inputs") = py::none(),
        py::arg("backends") = py::none(), py::arg("overrides") = py::none(),
        py::arg("find_node") = true, py::arg("options") = py::none(),
        "Runs a model as planned and on CpuRef alone, compares every output and every tensor "
        "crossing a partition edge, and names the first wrong node and its fused group (a "
        "dict, as `backplane validate --json` prints).");
  m.def("max_threads", &bp::max_threads, "The largest `threads` option accepted.");
  // For the tests: raises the class a status code maps to.
  m.def("_raise_status", [](int code, const std::string& message) {
    raise_status(bp::Status(static_cast<bp::StatusCode>(code), message));
  });
}
