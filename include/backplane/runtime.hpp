// runtime.hpp — the C++ application API: Runtime, Model, Session.
//
//   auto rt = backplane::Runtime::create({}).value();
//   auto model = rt->load_model("resnet18.onnx").value();
//   auto session = model->create_session().value();
//   session->set_input("input", tensor);     // by name or index
//   session->run();
//   const backplane::Tensor& y = session->output(0);
//
// Thread-safety: Runtime and Model are thread-safe. A Session is for one thread
// at a time; many threads may each run their own Session of one Model at once.
#pragma once

#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace backplane {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

struct RuntimeOptions {
  // Dynamic backends. `backend_path` (one absolute directory; a relative or
  // missing one is an error of Runtime::create) overrides every other
  // source; otherwise BACKPLANE_BACKEND_PATHS, then the compile-time list
  // (by default the lib/backplane/backends of the install this runtime runs
  // from, found relative to the program or library holding it).
  std::optional<std::string> backend_path;
  // false: load no dynamic backend at all.
  bool dynamic_backends = true;
  // Load and exercise each backend file in a child process first (up to
  // compiling and executing a one-node graph); one that crashes, aborts or
  // hangs there (probe_timeout_ms) is never loaded here, and its report names
  // the ABI slot it was in.
  bool probe_backends = false;
  int probe_timeout_ms = 10000;
  // Accept backend files or directories writable by group or others.
  bool allow_insecure_backend_paths = false;
  // If not empty, only files whose SHA-256 (lowercase hex) is listed load.
  std::vector<std::string> trusted_backend_digests;
  // Statically linked backends not to register (e.g. {"CpuRef"}).
  std::vector<std::string> disabled_static_backends;
  // Threads per backend (0 = backend default); passed as "num_threads".
  // 0..max_threads(); anything else is kInvalidArgument from Runtime::create.
  int num_threads = 0;
  // Settings of one backend, by its id: {{"CpuOneDnn", {{"layout", "blocked"}}}}.
  // Each key reaches that backend's configure once, in Runtime::create,
  // after num_threads; a backend that is not registered, or that rejects a
  // key or its value, makes create fail with the backend's reason. The keys
  // of the shipped backends: docs/performance.md.
  std::map<std::string, std::map<std::string, std::string>> backend_config;
  LogLevel log_level = LogLevel::kWarn;
};

// The largest RuntimeOptions::num_threads accepted: 4 threads per hardware
// thread of this machine (std::thread::hardware_concurrency, at least 1),
// and never more than 1024. More threads than that only oversubscribe the
// cores, and unbounded counts exhaust thread stacks inside OpenMP.
int max_threads();

// Where a model's nodes run, and the shapes of its inputs: the part of the
// options that loading a model (ModelOptions) and compiling one ahead of
// time (CompileOptions) share.
struct PlacementOptions {
  // Ordered backend preference; empty = every registered backend by score
  // (highest first), the reference backend CpuRef last.
  std::vector<std::string> backends;
  // Pin node (by name) to a backend. Compiling several methods: a node of
  // any method.
  std::map<std::string, std::string> overrides;
  // Allow a pinned node to fall back when its backend is absent or rejects it.
  bool allow_fallback = false;
  // Loading: shapes to specialise the model for ahead of the first run (a
  // hint; every run may still use other shapes). Compiling ahead of time:
  // the shapes to compile for, required for inputs with symbolic or unknown
  // dims. Compiling several methods: an input of any method.
  std::map<std::string, Shape> input_shapes;
};

struct ModelOptions : PlacementOptions {
  // Compiled artifacts (.bpk) only:
  // The method to load; "" = the first one.
  std::string method;
  // External data files (.bpd) by path; by default each is looked for next
  // to the .bpk under the name the .bpk records.
  std::vector<std::string> external_data;
  // Verify each data segment's checksum on its first use instead of at load
  // (faster load of big weights; corruption is still caught before use).
  bool lazy_checksums = false;
  // How many specialisations (a plan compiled for one set of input shapes)
  // the model keeps, least recently used dropped first; at least 1.
  // Specialisations that differ from a kept one in shapes only (every
  // partition compiled shape-polymorphic, as a decoder's cache lengths) hold
  // only their shapes; 32 times as many of those are kept besides.
  size_t max_specializations = 16;
  // A Loop (control flow) that runs more iterations than this, or whose scan
  // outputs grow past this many bytes, stops the run with an error naming
  // it: an absurd trip count, or a condition that never turns false, must
  // not hang a run or exhaust memory.
  int64_t max_loop_iterations = int64_t{1} << 17;
  int64_t max_loop_bytes = int64_t{1} << 31;
  // create_session runs the session once on zeros (a model with fixed
  // shapes, at most 16 MB of constants, on the host alone), so that its
  // first real run finds code and data warm; nothing of that run stays
  // visible. Off by default: it adds a run to create_session.
  bool warm_up = false;
};

// How a model's specialisations were used (Model::specialization_stats).
struct SpecializationStats {
  uint64_t hits = 0;       // a run whose input shapes were specialised already
  uint64_t misses = 0;     // a run that needed a new specialisation (built, or waited for)
  uint64_t builds = 0;     // specialisations built (failed builds included)
  uint64_t evictions = 0;  // dropped to stay within capacity
  size_t cached = 0;       // held now
  size_t variants = 0;     // of those, shape variants (see max_specializations)
  size_t capacity = 0;     // ModelOptions::max_specializations
  size_t polymorphic_partitions = 0;  // compiled once for every shape (API 1.2), held now
  // Wall-clock milliseconds spent building specialisations on the host
  // (shape inference, planning, compiling what is not shape-polymorphic,
  // memory planning), failed builds included. A backend's own per-shape
  // work at the first run of a shape-polymorphic partition is not in it.
  double build_ms = 0;
};

// Ahead-of-time compilation (backplane compile).
struct CompileOptions : PlacementOptions {
  // Write every named blob (weights) into this data file instead of the
  // .bpk; the .bpk records its file name (relative to the .bpk).
  std::string external_data;
  // The signatures to compile each method for, one specialisation each
  // (`backplane compile --shape x=1x128 --shape x=1x512`): every entry is
  // one set of input shapes, over `input_shapes` (which so gives the shapes
  // common to all); empty = `input_shapes` alone, one specialisation. As
  // with input_shapes, a name may be an input of any method, and an input
  // whose dims are all fixed needs none. A set that gives a method the same
  // shapes as an earlier set adds nothing to it. The first is what loading
  // the artifact specialises for unless ModelOptions::input_shapes says
  // otherwise; a run at shapes not stored compiles them from the portable
  // graph the artifact keeps. The weights are stored once however many
  // signatures there are.
  std::vector<std::map<std::string, Shape>> shapes;
  // For methods whose inputs have open dims: a partition whose backend
  // compiles it shape-polymorphic (API 1.2) is stored as such and compiled
  // so at load, once for every signature, exactly as loading the ONNX model
  // compiles it (so the artifact computes the same bits at every shape);
  // its backend's per-shape work happens at run time, as for the ONNX
  // model. false: every partition is compiled for each signature and its
  // payload stored, which loads those signatures fastest but may round
  // differently from the backend's polymorphic compile. Methods whose
  // inputs are all fixed are always compiled for their shapes.
  bool shape_polymorphic = true;
};

struct CompileReport {
  std::vector<std::string> methods;
  size_t specializations = 0;  // over all methods
  size_t partitions = 0;       // over all specialisations
  size_t payload_bytes = 0;    // backend payloads
  size_t named_data_keys = 0;
  size_t requested_bytes = 0;  // named data before de-duplication
  size_t stored_bytes = 0;     // after
  size_t file_bytes = 0;       // the .bpk
  size_t external_bytes = 0;   // the .bpd, if any
};

struct TensorInfo {
  std::string name;
  DType dtype = DType::kUndefined;
  // -1 for a dim that is not fixed (symbolic or unknown in the model).
  Shape shape;
  // The model's name for each dim ("batch", "seq"), "" where it has none;
  // empty or of the same rank as shape. Dims with one name take one size
  // in a run.
  std::vector<std::string> dim_names;
  // What the input or output holds: a tensor, or (models with control flow)
  // an ONNX sequence of tensors of `dtype`, or an optional of either (pass
  // and read those with Session::set_input_value / get_output_value).
  enum class Kind { kTensor, kSequence, kOptionalTensor, kOptionalSequence };
  Kind kind = Kind::kTensor;
  // Inputs only: the value a run takes when the input is not given (ONNX: an
  // initializer listed among the graph's inputs, IR version 4 on, which a
  // feed may override); empty for an input that must be given. Shares the
  // model's bytes.
  Tensor default_value{};
};
// An input or output that need not be a tensor: ONNX sequences (a list of
// tensors of one dtype) and optionals (a tensor or a sequence, or nothing),
// which models with control flow take and return.
struct AnyValue {
  enum class Kind {
    kTensor,    // `tensor`
    kSequence,  // `sequence`, whose tensors have dtype `dtype`
    kNone,      // an optional with no element (of dtype `dtype`)
  };
  Kind kind = Kind::kTensor;
  Tensor tensor;
  std::vector<Tensor> sequence;
  DType dtype = DType::kUndefined;  // the element dtype of a sequence or an empty optional

  static AnyValue of(Tensor t) {
    AnyValue v;
    v.dtype = t.dtype();
    v.tensor = std::move(t);
    return v;
  }
  static AnyValue of_sequence(std::vector<Tensor> items, DType dtype) {
    AnyValue v;
    v.kind = Kind::kSequence;
    v.sequence = std::move(items);
    v.dtype = dtype;
    return v;
  }
  static AnyValue none(DType dtype) {
    AnyValue v;
    v.kind = Kind::kNone;
    v.dtype = dtype;
    return v;
  }
};

// One device a backend found (backend API 1.4, get_devices).
struct DeviceDescription {
  std::string name, vendor, driver_version;
  std::string kind;  // "gpu", "cpu", "accelerator" or "other"
  uint64_t memory_bytes = 0;
  uint32_t compute_units = 0;
  bool selected = false;  // the device the backend runs on
};

struct BackendDescription {
  std::string id;
  std::string vendor;
  std::string description;
  uint32_t api_major = 0, api_minor = 0;
  std::string source;  // "static" or the canonical path of the shared object
  // Devices the backend reports (API 1.4); empty for a backend without
  // devices of its own, or built against an older API.
  std::vector<DeviceDescription> devices;
};

// What happened to one file found while scanning for dynamic backends.
struct BackendFileReport {
  enum class Fate { kLoaded, kSuperseded, kRejected };
  std::string path;            // as found in the search path
  std::string canonical_path;  // symlinks resolved ("" if it does not resolve)
  std::string id;              // backend id, once known
  std::string file_version;    // from the name: "1.2.3" of X_Y_backend.so.1.2.3
  std::string api_version;     // "M.m" from GetVersion, once known
  uint32_t score = 0;          // GetBackendScore, if exported
  Fate fate = Fate::kRejected;
  std::string step;  // where it stopped: name, path, trust, probe, dlopen,
                     // symbols, id, version, score, factory, table, create, register
  std::string reason;
};
const char* fate_name(BackendFileReport::Fate fate);

// A search directory and whether it was used.
struct BackendPathReport {
  std::string path;
  bool used = false;
  std::string reason;  // why it was skipped
};

// One partition of a loaded model's plan.
struct PartitionDescription {
  std::string backend;
  std::vector<std::string> nodes;            // node names, in execution order
  bool imperative = false;                   // run one op at a time (execute_node)
  bool polymorphic = false;                  // compiled once for every shape (API 1.2)
  std::vector<std::string> inputs, outputs;  // tensors crossing its edge
};

// A tensor copied between memories (host and a backend's device) per run.
struct CopyDescription {
  std::string value;
  std::string from, to;  // "host" or "<backend>:<device>"
  size_t bytes = 0;
  bool once = false;  // a constant, copied when the session is created
};

enum class PlanFormat { kText, kJson, kDot };

// Where a profiled session's runs spent their time (Session::end_profiling).
struct ProfileSummary {
  struct Row {
    std::string name;
    uint64_t count = 0;  // spans summed
    double ms = 0;
    double share = 0;  // of run_ms
  };
  std::string path;  // where the trace was written
  uint64_t runs = 0;
  double run_ms = 0;  // wall time of the runs recorded, summed
  // Time in each backend's partitions, then "copies" (between memories),
  // "specialisation builds" and "session" (the session's own work between
  // them), largest first: together, all of run_ms.
  std::vector<Row> by_backend;
  // Time per operator type (or per kind of work a backend names, e.g.
  // CpuOneDnn's "convolution", "reorder"), largest first, for the backends
  // that time their nodes (API 1.6); the partitions of one that does not are
  // one row "BACKEND (nodes not timed)".
  std::vector<Row> by_op_type;
  // Both tables as text, as `backplane run --profile` prints them.
  std::string to_string() const;
};

class Session;

// What a model says about itself: the ONNX ModelProto's fields and its
// graph's name and doc string; empty (version 0) where it says nothing.
struct ModelMetadata {
  std::string producer_name;
  std::string producer_version;
  std::string domain;
  std::string description;  // the model's doc_string
  int64_t version = 0;      // model_version
  std::string graph_name;
  std::string graph_description;  // the graph's doc_string
  std::map<std::string, std::string> custom;  // metadata_props
};

// A loaded model. Each run may use any input shapes consistent with the
// model (a dim named by a symbol takes one size everywhere in that run;
// fixed dims stay fixed). The first run at new shapes specialises the model
// for them (infers shapes, plans, compiles, plans memory); later runs at
// those shapes reuse it. partitions(), copies(), describe_plan() and
// backends_used() describe the first specialisation: the one made at load
// (for a model with fixed shapes, or input_shapes given) or else by the
// first run; empty before it.
class Model {
 public:
  virtual ~Model() = default;
  virtual const std::vector<TensorInfo>& inputs() const = 0;
  // Dtype and shape as far as the model fixes them (-1: depends on the run);
  // a model with fixed input shapes has them all.
  virtual const std::vector<TensorInfo>& outputs() const = 0;
  virtual const std::vector<PartitionDescription>& partitions() const = 0;
  // True for a model with control flow, sequences, optionals or ops whose
  // output shape depends on data: it runs in stages, each planned and
  // compiled when the values before it are known (docs/architecture.md,
  // "Staged execution"). partitions() and copies() are then empty and
  // describe_plan() lists the stages; it cannot be compiled ahead of time.
  virtual bool runs_in_stages() const { return false; }
  // Distinct backends used, in order of first use.
  virtual std::vector<std::string> backends_used() const = 0;
  virtual const std::vector<CopyDescription>& copies() const = 0;
  // The plan: which backend runs each node and why (with every backend's
  // reason for rejecting it), the partitions and the copies. kDot renders
  // with Graphviz, nodes coloured by backend.
  virtual std::string describe_plan(PlanFormat format) const = 0;
  // What happened while loading that a user should know (e.g. a compiled
  // partition whose backend is missing, recompiled elsewhere).
  virtual const std::vector<std::string>& notes() const = 0;
  virtual SpecializationStats specialization_stats() const = 0;
  virtual Result<std::unique_ptr<Session>> create_session() = 0;
  // From the .onnx, or the .bpk it was compiled from.
  virtual const ModelMetadata& metadata() const;
};

class Session {
 public:
  virtual ~Session() = default;
  // Copies `tensor` into the session's memory for that input. The dtype must
  // match; the shape must fit the model (Model::inputs): its rank, its fixed
  // dims (symbols are checked across inputs by run()).
  virtual Status set_input(const std::string& name, const Tensor& tensor) = 0;
  virtual Status set_input(size_t index, const Tensor& tensor) = 0;
  // Uses the caller's memory for that input, without copying: `tensor`'s
  // bytes must stay valid and unchanged until the runs that read them have
  // returned; it stays bound until the input is set or bound again.
  virtual Status bind_input(const std::string& name, const Tensor& tensor) = 0;
  // Makes each run write output `name` straight into the caller's memory
  // `tensor` (its dtype and shape must be the output's in that run, else
  // run() fails before running anything). Bound until bound again; an empty
  // Tensor unbinds it. output()/get_output() then view that memory.
  virtual Status bind_output(const std::string& name, const Tensor& tensor) = 0;
  // From the next run on, input `input` is the previous run's output
  // `output`, read where that run left it: in a backend's device memory when
  // a device partition wrote it and device partitions read it, so a
  // decoder's key/value cache never goes through the host. The first run
  // reads the input as set. Until the input is set or bound again (or the
  // output bound). output()/get_output() of a fed output still work: the
  // copy to the host is made when asked for.
  virtual Status feed(const std::string& output, const std::string& input) = 0;
  // Runs the model at the shapes of the inputs set. Errors say which input,
  // dim and symbol do not fit; the session stays usable.
  virtual Status run() = 0;
  // Output of the last run(); lives until the next run() or the session's end.
  virtual Result<Tensor> get_output(const std::string& name) const = 0;
  virtual const Tensor& output(size_t index) const = 0;
  virtual size_t num_outputs() const = 0;

  // Inputs and outputs of any kind (TensorInfo::kind): a sequence, an
  // optional (AnyValue::kNone when empty; an optional holding a value is
  // given and returned as the value), or a tensor. A model without sequence
  // or optional inputs takes tensors only.
  virtual Status set_input_value(const std::string& name, const AnyValue& value) {
    if (value.kind != AnyValue::Kind::kTensor)
      return unsupported("input '" + name + "': this model takes tensors only");
    return set_input(name, value.tensor);
  }
  virtual Result<AnyValue> get_output_value(const std::string& name) const {
    BP_ASSIGN_OR_RETURN(Tensor t, get_output(name));
    return AnyValue::of(std::move(t));
  }

  // Profiling. From start_profiling on, every run is timed: the run, its
  // stages, each partition (by backend), each copy between memories, each
  // specialisation built, and each node where its backend reports it (API
  // 1.6: CpuRef and CpuOneDnn do). end_profiling writes the trace to `path` as Chrome
  // trace-event JSON (it opens in Perfetto and chrome://tracing) and returns
  // the summary. start_profiling fails, naming the path, if the trace
  // cannot be written there; nothing else changes. A session destroyed
  // while profiling writes its trace. Timing costs about a microsecond per
  // span: a profiled run is slightly slower, never different.
  virtual Status start_profiling(const std::string& path) {
    return unsupported("this session cannot profile (" + path + ")");
  }
  virtual Result<ProfileSummary> end_profiling() {
    return invalid_argument("this session is not profiling (start_profiling first)");
  }
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  // Registers static backends, loads dynamic ones; fails if none is usable.
  static Result<std::shared_ptr<Runtime>> create(const RuntimeOptions& options = {});

  // The registered backends in the order a model prefers them by default
  // (ModelOptions::backends empty): by score, CpuRef last.
  virtual std::vector<BackendDescription> backends() const = 0;
  // Every file the dynamic loader looked at, with its fate, and the paths.
  virtual std::vector<BackendFileReport> backend_files() const = 0;
  virtual std::vector<BackendPathReport> backend_paths() const = 0;
  // Loads an ONNX model (partitions and compiles it) or a compiled artifact
  // (.bpk: maps it and deserializes each partition with its backend).
  virtual Result<std::shared_ptr<Model>> load_model(const std::string& path,
                                                    const ModelOptions& options = {}) = 0;

  // Compiles ONNX models, one method each ({name, path}), into one artifact
  // at `output`. Every backend sees all its partitions of all methods at
  // once, and weights shared between methods or backends are stored once.
  virtual Result<CompileReport> compile(
      const std::vector<std::pair<std::string, std::string>>& methods, const std::string& output,
      const CompileOptions& options = {}) = 0;
};

// Describes a compiled artifact: methods, partitions with backend and payload
// size, named data with key, size, alignment, file, and de-duplication
// savings. Verifies it as loading would. Text, or one JSON object.
Result<std::string> inspect_artifact(const std::string& path, bool json,
                                     const std::vector<std::string>& external_data = {});

}  // namespace backplane
