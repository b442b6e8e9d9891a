// conformance_runner.cpp — runs the ONNX backend node tests against Backplane.
//
//   backplane_conformance DIR [--backends A,B] [--backend-path DIR] [--filter SUBSTR]
//                         [--verbose] [--no-fork]
//
// Dynamic backends are off unless --backend-path names the directory to load
// them from (a plugin backend such as CpuOneDnn).
//
// DIR holds cases as written by scripts/gen_conformance.py (onnx's
// `backend-test-tools generate-data`): DIR/{node,simple}/<case>/model.onnx and
// test_data_set_N/{input_J.pb,output_J.pb} (TensorProto). Each case is loaded
// through backplane::Runtime with the given backends (default CpuRef), run on
// every data set, and each output compared with the expected one the way
// onnx/backend/test/runner does: np.testing.assert_allclose(rtol=1e-3,
// atol=1e-7) for floating point (NaN equals NaN), exact for integers and
// bools; dtype and shape must match.
//
// Backplane compiles for static shapes, so inputs whose model shape is
// symbolic get ModelOptions::input_shapes from the data set, and a case whose
// load fails (for a reason other than an unsupported op) is retried once with
// its small inputs (rank <= 1, <= 8 elements: Reshape's shape, Slice's starts,
// Range's limit, ...) bound as initializers holding the data set's values. The
// summary says how many passes needed that.
//
// Outcomes:
//   pass
//   unsupported  the model uses an op the runtime rejects (load fails with
//                kUnsupported and the message names one of the model's ops);
//                or an input/output dtype Backplane has no DType for (double,
//                string, sequences...); or the model's default-domain opset is
//                outside the importer's documented range [7, 17] and the load
//                fails with kVersionMismatch/kUnsupported.
//   FAILURE      anything else: wrong numbers, wrong dtype/shape, any other
//                load error, run error, crash, timeout.
//
// Every case runs in a forked child so that a crash or hang is recorded as the
// failure of that case and the run continues. Exit status: 0 iff no failure.
#include <backplane/runtime.hpp>
#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <onnx/onnx_pb.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using backplane::DType;
using backplane::Shape;
using backplane::StatusCode;
using backplane::Tensor;

namespace {

constexpr double kRtol = 1e-3;
constexpr double kAtol = 1e-7;
constexpr int kMinOpset = 7;
constexpr int kMaxOpset = 17;
constexpr unsigned kCaseTimeoutSeconds = 60;

struct Options {
  fs::path dir;
  std::vector<std::string> backends{"CpuRef"};
  std::string backend_path;  // empty: no dynamic backends
  std::string filter;
  bool verbose = false;
  bool fork_cases = true;
  fs::path scratch;  // models written for a case; removed by main at exit
};

// A private directory for the models the runner writes, removed with its
// contents when main returns: a case's child that crashes or times out
// while loading leaves nothing behind in the system's temporary directory.
struct ScratchDir {
  ScratchDir() {
    std::string tmpl = (fs::temp_directory_path() / "backplane_conformance.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
  fs::path path;
};

// Outcome of one case. `kind` is "pass", "unsupported-op", "unsupported-dtype",
// "unsupported-opset" or "fail"; `detail` is the op/dtype/opset or the reason.
struct Outcome {
  Outcome() = default;
  Outcome(std::string k, std::string d, std::string m = "")
      : kind(std::move(k)), detail(std::move(d)), message(std::move(m)) {}
  std::string kind;
  std::string detail;
  std::string message;  // the runtime's message, for --verbose
};

std::string read_file(const fs::path& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *ok = false;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *ok = true;
  return ss.str();
}

std::optional<DType> dtype_from_onnx(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return DType::kFloat32;
    case onnx::TensorProto::FLOAT16:
      return DType::kFloat16;
    case onnx::TensorProto::INT8:
      return DType::kInt8;
    case onnx::TensorProto::UINT8:
      return DType::kUInt8;
    case onnx::TensorProto::INT32:
      return DType::kInt32;
    case onnx::TensorProto::INT64:
      return DType::kInt64;
    case onnx::TensorProto::BOOL:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

std::string onnx_dtype_name(int32_t t) {
  const auto* desc = onnx::TensorProto::DataType_descriptor();
  const auto* v = desc->FindValueByNumber(t);
  if (!v) return "dtype" + std::to_string(t);
  std::string s = v->name();
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// TensorProto -> Tensor for the supported dtypes (raw_data or typed fields).
bool tensor_from_proto(const onnx::TensorProto& p, Tensor* out, std::string* err) {
  auto dt = dtype_from_onnx(p.data_type());
  if (!dt) {
    *err = "dtype " + onnx_dtype_name(p.data_type());
    return false;
  }
  if (p.has_data_location() && p.data_location() == onnx::TensorProto::EXTERNAL) {
    *err = "external data in test tensor";
    return false;
  }
  Shape shape(p.dims().begin(), p.dims().end());
  Tensor t(*dt, shape);
  const size_t n = static_cast<size_t>(t.numel());
  const size_t es = backplane::dtype_size(*dt);
  if (p.has_raw_data()) {
    if (p.raw_data().size() != n * es) {
      *err = "raw_data has " + std::to_string(p.raw_data().size()) + " bytes, expected " +
             std::to_string(n * es);
      return false;
    }
    if (n) std::memcpy(t.data(), p.raw_data().data(), n * es);
    *out = t;
    return true;
  }
  auto fail_count = [&](size_t got) {
    *err = "typed data has " + std::to_string(got) + " elements, expected " + std::to_string(n);
    return false;
  };
  switch (*dt) {
    case DType::kFloat32:
      if (static_cast<size_t>(p.float_data_size()) != n) return fail_count(p.float_data_size());
      for (size_t i = 0; i < n; ++i) t.data_as<float>()[i] = p.float_data(i);
      break;
    case DType::kInt64:
      if (static_cast<size_t>(p.int64_data_size()) != n) return fail_count(p.int64_data_size());
      for (size_t i = 0; i < n; ++i) t.data_as<int64_t>()[i] = p.int64_data(i);
      break;
    case DType::kInt32:
      if (static_cast<size_t>(p.int32_data_size()) != n) return fail_count(p.int32_data_size());
      for (size_t i = 0; i < n; ++i) t.data_as<int32_t>()[i] = p.int32_data(i);
      break;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool:
      if (static_cast<size_t>(p.int32_data_size()) != n) return fail_count(p.int32_data_size());
      for (size_t i = 0; i < n; ++i)
        t.data_as<uint8_t>()[i] = static_cast<uint8_t>(p.int32_data(i));
      break;
    case DType::kFloat16:  // bit patterns in int32_data
      if (static_cast<size_t>(p.int32_data_size()) != n) return fail_count(p.int32_data_size());
      for (size_t i = 0; i < n; ++i)
        t.data_as<uint16_t>()[i] = static_cast<uint16_t>(p.int32_data(i));
      break;
    default:
      *err = "dtype " + std::string(backplane::dtype_name(*dt));
      return false;
  }
  *out = t;
  return true;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      bits = sign | ((127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

double element_as_double(const Tensor& t, size_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data_as<float>()[i];
    case DType::kFloat16:
      return half_to_float(t.data_as<uint16_t>()[i]);
    default:
      return 0;
  }
}

// Returns "" if equal within tolerance, else a description of the mismatch.
std::string compare(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype())
    return std::string("dtype ") + backplane::dtype_name(got.dtype()) + ", expected " +
           backplane::dtype_name(want.dtype());
  if (got.shape() != want.shape())
    return "shape " + backplane::shape_to_string(got.shape()) + ", expected " +
           backplane::shape_to_string(want.shape());
  if (got.numel() > 0 && got.data() == nullptr) return "output has no data";
  const size_t n = static_cast<size_t>(want.numel());
  size_t bad = 0, first = 0;
  double worst_abs = 0;
  if (want.dtype() == DType::kFloat32 || want.dtype() == DType::kFloat16) {
    for (size_t i = 0; i < n; ++i) {
      const double a = element_as_double(got, i), b = element_as_double(want, i);
      bool ok;
      if (std::isnan(a) || std::isnan(b)) {
        ok = std::isnan(a) && std::isnan(b);
      } else if (std::isinf(a) || std::isinf(b)) {
        ok = a == b;
      } else {
        ok = std::fabs(a - b) <= kAtol + kRtol * std::fabs(b);
      }
      if (!ok) {
        if (!bad) first = i;
        ++bad;
        if (std::isfinite(a) && std::isfinite(b)) worst_abs = std::max(worst_abs, std::fabs(a - b));
      }
    }
    if (bad) {
      std::ostringstream ss;
      ss.precision(9);
      ss << bad << " of " << n << " elements differ (rtol " << kRtol << ", atol " << kAtol
         << "); first at flat index " << first << ": got " << element_as_double(got, first)
         << ", expected " << element_as_double(want, first) << "; max abs diff " << worst_abs;
      return ss.str();
    }
    return "";
  }
  const size_t es = backplane::dtype_size(want.dtype());
  const auto* pa = static_cast<const uint8_t*>(got.data());
  const auto* pb = static_cast<const uint8_t*>(want.data());
  for (size_t i = 0; i < n; ++i) {
    bool eq;
    if (want.dtype() == DType::kBool) {
      eq = (pa[i] != 0) == (pb[i] != 0);
    } else {
      eq = std::memcmp(pa + i * es, pb + i * es, es) == 0;
    }
    if (!eq) {
      if (!bad) first = i;
      ++bad;
    }
  }
  if (bad) {
    auto as_int = [&](const uint8_t* p, size_t i) -> long long {
      switch (want.dtype()) {
        case DType::kInt8:
          return reinterpret_cast<const int8_t*>(p)[i];
        case DType::kUInt8:
        case DType::kBool:
          return p[i];
        case DType::kInt32:
          return reinterpret_cast<const int32_t*>(p)[i];
        case DType::kInt64:
          return reinterpret_cast<const int64_t*>(p)[i];
        default:
          return 0;
      }
    };
    return std::to_string(bad) + " of " + std::to_string(n) +
           " elements differ (exact); first at " + "flat index " + std::to_string(first) +
           ": got " + std::to_string(as_int(pa, first)) + ", expected " +
           std::to_string(as_int(pb, first));
  }
  return "";
}

void collect_ops(const onnx::GraphProto& g, std::set<std::string>* ops) {
  for (const auto& n : g.node()) {
    ops->insert(n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_ops(a.g(), ops);
      for (const auto& sg : a.graphs()) collect_ops(sg, ops);
    }
  }
}

bool is_word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The model op named earliest in `message` as a whole word, or "".
std::string op_named_in(const std::string& message, const std::set<std::string>& ops) {
  size_t best_pos = std::string::npos;
  std::string best;
  for (const auto& op : ops) {
    for (size_t pos = message.find(op); pos != std::string::npos; pos = message.find(op, pos + 1)) {
      const bool left = pos == 0 || !is_word_char(message[pos - 1]);
      const size_t end = pos + op.size();
      const bool right = end >= message.size() || !is_word_char(message[end]);
      if (left && right) {
        if (pos < best_pos || (pos == best_pos && op.size() > best.size())) {
          best_pos = pos;
          best = op;
        }
        break;
      }
    }
  }
  return best;
}

// Checks that every graph input/output is a tensor of a supported dtype.
std::optional<std::string> unsupported_io(const onnx::GraphProto& g) {
  auto check = [](const onnx::ValueInfoProto& v) -> std::optional<std::string> {
    if (!v.type().has_tensor_type()) {
      if (v.type().has_sequence_type()) return std::string("sequence");
      if (v.type().has_optional_type()) return std::string("optional");
      if (v.type().has_map_type()) return std::string("map");
      return std::string("non-tensor");
    }
    int32_t t = v.type().tensor_type().elem_type();
    if (!dtype_from_onnx(t)) return onnx_dtype_name(t);
    return std::nullopt;
  };
  for (const auto& v : g.input())
    if (auto r = check(v)) return r;
  for (const auto& v : g.output())
    if (auto r = check(v)) return r;
  return std::nullopt;
}

bool load_proto(const fs::path& path, google::protobuf::MessageLite* msg, std::string* err) {
  bool ok;
  std::string bytes = read_file(path, &ok);
  if (!ok) {
    *err = "cannot read " + path.string();
    return false;
  }
  if (!msg->ParseFromString(bytes)) {
    *err = "cannot parse " + path.string();
    return false;
  }
  return true;
}

std::vector<fs::path> sorted_matching(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> items;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    std::string rest = name.substr(prefix.size());
    const size_t dot = rest.find('.');
    try {
      items.emplace_back(std::stoi(rest.substr(0, dot)), e.path());
    } catch (...) {
      continue;
    }
  }
  std::sort(items.begin(), items.end());
  std::vector<fs::path> out;
  for (auto& it : items) out.push_back(it.second);
  return out;
}

// Writes a copy of the model in which every small graph input (rank <= 1,
// at most 8 elements) is an initializer holding `inputs`' value, into
// `scratch`, loads it, and deletes the copy. `bound` receives the names of the bound inputs.
backplane::Result<std::shared_ptr<backplane::Model>> load_with_bound_inputs(
    backplane::Runtime& rt, const onnx::ModelProto& original, const std::vector<Tensor>& inputs,
    const backplane::ModelOptions& mo, const fs::path& scratch, std::set<std::string>* bound) {
  onnx::ModelProto mp = original;
  auto* g = mp.mutable_graph();
  for (size_t j = 0; j < inputs.size() && j < static_cast<size_t>(g->input_size()); ++j) {
    const Tensor& t = inputs[j];
    if (t.rank() > 1 || t.numel() > 8) continue;
    const std::string name = g->input(static_cast<int>(j)).name();
    bool already = false;
    for (const auto& init : g->initializer()) already = already || init.name() == name;
    if (already) continue;
    auto* init = g->add_initializer();
    init->set_name(name);
    init->set_data_type(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.shape()) init->add_dims(d);
    init->set_raw_data(std::string(static_cast<const char*>(t.data()), t.size_bytes()));
    bound->insert(name);
  }
  if (bound->empty()) return backplane::invalid_argument("no small inputs to bind");
  // Graph inputs that are initializers are constants only if they are not
  // also listed as inputs (IR >= 4), so drop them from the input list.
  google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> kept;
  for (const auto& vi : g->input())
    if (!bound->count(vi.name())) *kept.Add() = vi;
  g->mutable_input()->Swap(&kept);
  if (mp.ir_version() < 4) mp.set_ir_version(4);

  if (scratch.empty()) return backplane::internal_error("no scratch directory");
  const std::string path = (scratch / ("bound_" + std::to_string(getpid()) + ".onnx")).string();
  {
    std::ofstream out(path, std::ios::binary);
    mp.SerializeToOstream(&out);
  }
  auto model = rt.load_model(path, mo);
  std::remove(path.c_str());
  return model;
}

Outcome run_case(const fs::path& case_dir, const Options& opt) {
  const fs::path model_path = case_dir / "model.onnx";
  onnx::ModelProto mp;
  std::string err;
  if (!load_proto(model_path, &mp, &err)) return {"fail", err};
  if (auto bad = unsupported_io(mp.graph())) return {"unsupported-dtype", *bad};

  int64_t opset = -1;
  for (const auto& o : mp.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();

  // Read every data set first so a dtype the runtime lacks is classified
  // before anything runs.
  struct DataSet {
    fs::path dir;
    std::vector<Tensor> inputs, outputs;
  };
  std::vector<DataSet> sets;
  for (const auto& d : sorted_matching(case_dir, "test_data_set_")) {
    DataSet ds{d, {}, {}};
    for (const auto& [prefix, vec] :
         {std::pair<std::string, std::vector<Tensor>*>{"input_", &ds.inputs},
          {"output_", &ds.outputs}}) {
      for (const auto& f : sorted_matching(d, prefix)) {
        onnx::TensorProto tp;
        if (!load_proto(f, &tp, &err)) return {"fail", err};
        Tensor t;
        if (!tensor_from_proto(tp, &t, &err)) {
          if (!dtype_from_onnx(tp.data_type()))
            return {"unsupported-dtype", onnx_dtype_name(tp.data_type())};
          return {"fail", f.string() + ": " + err};
        }
        vec->push_back(t);
      }
    }
    sets.push_back(std::move(ds));
  }
  if (sets.empty()) return {"fail", "no test_data_set_N directories"};

  backplane::RuntimeOptions ro;
  ro.dynamic_backends = !opt.backend_path.empty();
  if (!opt.backend_path.empty()) ro.backend_path = opt.backend_path;
  ro.log_level = backplane::LogLevel::kOff;
  auto rt = backplane::Runtime::create(ro);
  if (!rt.ok()) return {"fail", "Runtime::create: " + rt.status().to_string()};

  const auto& g = mp.graph();
  bool any_bound = false;
  for (const auto& ds : sets) {
    const std::string where = ds.dir.filename().string() + ": ";
    if (ds.inputs.size() > static_cast<size_t>(g.input_size()))
      return {"fail", where + "more input files than graph inputs"};
    if (ds.outputs.empty()) return {"fail", where + "no expected outputs (output_N.pb)"};
    if (ds.outputs.size() > static_cast<size_t>(g.output_size()))
      return {"fail", where + "more output files than graph outputs"};

    // Concrete shapes for inputs the model leaves symbolic or unknown.
    backplane::ModelOptions mo;
    mo.backends = opt.backends;
    for (size_t j = 0; j < ds.inputs.size(); ++j) {
      const auto& vi = g.input(static_cast<int>(j));
      const auto& tt = vi.type().tensor_type();
      bool is_static =
          tt.has_shape() && tt.shape().dim_size() == static_cast<int>(ds.inputs[j].rank());
      if (is_static)
        for (const auto& d : tt.shape().dim()) is_static = is_static && d.has_dim_value();
      if (!is_static) mo.input_shapes[vi.name()] = ds.inputs[j].shape();
    }

    auto model = (*rt)->load_model(model_path.string(), mo);
    std::set<std::string> bound;
    if (!model.ok()) {
      const auto& st = model.status();
      if (st.code() == StatusCode::kUnsupported) {
        std::set<std::string> ops;
        collect_ops(g, &ops);
        std::string op = op_named_in(st.message(), ops);
        if (!op.empty()) return {"unsupported-op", op, st.message()};
      }
      if ((st.code() == StatusCode::kVersionMismatch || st.code() == StatusCode::kUnsupported) &&
          (opset < kMinOpset || opset > kMaxOpset))
        return {"unsupported-opset", "opset " + std::to_string(opset), st.message()};
      // Backplane compiles for static shapes (DESIGN.md: every dim is
      // inferred at load), while many node tests feed shape-determining
      // values (Reshape's shape, Slice's starts, Range's limit, ...) as graph
      // inputs, which the runtime rejects as invalid. Retry once with the
      // small inputs (rank <= 1, at most 8 elements) bound as initializers
      // holding this data set's values; the outputs are still compared in
      // full. If that load fails too, the original error is the failure.
      if (st.code() != StatusCode::kInvalidArgument)
        return {"fail", where + "load: " + st.to_string()};
      auto retried = load_with_bound_inputs(**rt, mp, ds.inputs, mo, opt.scratch, &bound);
      if (!retried.ok() && retried.status().code() == StatusCode::kUnsupported) {
        std::set<std::string> ops;
        collect_ops(g, &ops);
        std::string op = op_named_in(retried.status().message(), ops);
        if (!op.empty()) return {"unsupported-op", op, retried.status().message()};
      }
      if (!retried.ok()) {
        std::string detail = where + "load: " + st.to_string();
        if (!bound.empty())
          detail +=
              " [retried with small inputs bound as constants: " + retried.status().to_string() +
              "]";
        return {"fail", detail};
      }
      model = std::move(retried);
      any_bound = true;
    }
    auto session = (*model)->create_session();
    if (!session.ok()) return {"fail", where + "create_session: " + session.status().to_string()};

    for (size_t j = 0; j < ds.inputs.size(); ++j) {
      const std::string& name = g.input(static_cast<int>(j)).name();
      if (bound.count(name)) continue;
      auto st = (*session)->set_input(name, ds.inputs[j]);
      if (!st.ok()) return {"fail", where + "set_input '" + name + "': " + st.to_string()};
    }
    auto st = (*session)->run();
    if (!st.ok()) return {"fail", where + "run: " + st.to_string()};
    for (size_t j = 0; j < ds.outputs.size(); ++j) {
      const std::string& name = g.output(static_cast<int>(j)).name();
      auto got = (*session)->get_output(name);
      if (!got.ok())
        return {"fail", where + "get_output '" + name + "': " + got.status().to_string()};
      std::string diff = compare(*got, ds.outputs[j]);
      if (!diff.empty()) return {"fail", where + "output '" + name + "': " + diff};
    }
  }
  return {any_bound ? "pass-bound" : "pass", ""};
}

// Runs one case in a child process; a crash, hang or exception is a failure.
Outcome run_case_isolated(const fs::path& case_dir, const Options& opt) {
  int fds[2];
  if (pipe(fds) != 0) return {"fail", "pipe() failed"};
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = fork();
  if (pid < 0) return {"fail", "fork() failed"};
  if (pid == 0) {
    close(fds[0]);
    alarm(kCaseTimeoutSeconds);
    Outcome o;
    try {
      o = run_case(case_dir, opt);
    } catch (const std::exception& e) {
      o = {"fail", std::string("exception: ") + e.what()};
    } catch (...) {
      o = {"fail", "unknown exception"};
    }
    std::string msg = o.kind + '\0' + o.detail + '\0' + o.message;
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t w = write(fds[1], msg.data() + off, msg.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string msg;
  char buf[4096];
  ssize_t r;
  while ((r = read(fds[0], buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(r));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return {"fail", sig == SIGALRM ? "timeout after " + std::to_string(kCaseTimeoutSeconds) + " s"
                                   : std::string("crashed with signal ") + std::to_string(sig) +
                                         " (" + strsignal(sig) + ")"};
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return {"fail", "child exited with status " + std::to_string(WEXITSTATUS(status))};
  const size_t a = msg.find('\0');
  const size_t b = a == std::string::npos ? a : msg.find('\0', a + 1);
  if (b == std::string::npos) return {"fail", "child reported nothing"};
  return {msg.substr(0, a), msg.substr(a + 1, b - a - 1), msg.substr(b + 1)};
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

int usage(const char* argv0) {
  std::cerr
      << "usage: " << argv0
      << " DIR [--backends A,B] [--backend-path DIR] [--filter SUBSTR] [--verbose] [--no-fork]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--backends" && i + 1 < argc) {
      opt.backends.clear();
      std::stringstream ss(argv[++i]);
      for (std::string b; std::getline(ss, b, ',');)
        if (!b.empty()) opt.backends.push_back(b);
    } else if (a == "--backend-path" && i + 1 < argc) {
      opt.backend_path = argv[++i];
    } else if (a == "--filter" && i + 1 < argc) {
      opt.filter = argv[++i];
    } else if (a == "--verbose") {
      opt.verbose = true;
    } else if (a == "--no-fork") {
      opt.fork_cases = false;
    } else if (!a.empty() && a[0] == '-') {
      return usage(argv[0]);
    } else if (opt.dir.empty()) {
      opt.dir = a;
    } else {
      return usage(argv[0]);
    }
  }
  if (opt.dir.empty()) return usage(argv[0]);
  ScratchDir scratch;
  if (scratch.path.empty()) {
    std::cerr << "error: cannot create a scratch directory in " << fs::temp_directory_path()
              << "\n";
    return 1;
  }
  opt.scratch = scratch.path;

  std::vector<fs::path> cases;
  for (const char* kind : {"node", "simple"}) {
    const fs::path d = opt.dir / kind;
    if (!fs::is_directory(d)) continue;
    for (const auto& e : fs::directory_iterator(d)) {
      if (!fs::exists(e.path() / "model.onnx")) continue;
      if (!opt.filter.empty() && e.path().filename().string().find(opt.filter) == std::string::npos)
        continue;
      cases.push_back(e.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  if (cases.empty()) {
    std::cerr << "error: no test cases (DIR/node/*/model.onnx) under " << opt.dir << "\n";
    return 1;
  }

  const auto t0 = std::chrono::steady_clock::now();
  size_t passed = 0, passed_bound = 0, failed = 0, unsupported = 0;
  std::map<std::string, int> unsupported_ops, unsupported_dtypes;
  for (const auto& c : cases) {
    const std::string name = c.parent_path().filename().string() + "/" + c.filename().string();
    Outcome o = opt.fork_cases ? run_case_isolated(c, opt) : run_case(c, opt);
    if (o.kind == "pass" || o.kind == "pass-bound") {
      ++passed;
      if (o.kind == "pass-bound") ++passed_bound;
      if (opt.verbose)
        std::cout << "pass        " << name
                  << (o.kind == "pass-bound" ? " (small inputs bound as constants)" : "") << "\n";
    } else if (o.kind == "unsupported-op" || o.kind == "unsupported-opset") {
      ++unsupported;
      ++unsupported_ops[o.detail];
      if (opt.verbose)
        std::cout << "unsupported " << name << ": " << o.detail << ": " << o.message << "\n";
    } else if (o.kind == "unsupported-dtype") {
      ++unsupported;
      ++unsupported_dtypes[o.detail];
      if (opt.verbose) std::cout << "unsupported " << name << ": dtype " << o.detail << "\n";
    } else {
      ++failed;
      std::cout << "FAIL " << name << ": " << o.detail << "\n";
    }
    std::cout.flush();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::vector<std::string> ops, dtypes;
  for (const auto& [k, n] : unsupported_ops) ops.push_back(k);
  for (const auto& [k, n] : unsupported_dtypes)
    dtypes.push_back(k + " (" + std::to_string(n) + ")");
  std::cout << "backends: " << join(opt.backends, ",") << "; " << cases.size() << " cases in "
            << static_cast<int>(secs) << " s\n";
  if (passed_bound)
    std::cout
        << "of the passes, " << passed_bound
        << " ran with small shape-determining inputs bound as constants (static-shape runtime)\n";
  if (!dtypes.empty()) std::cout << "unsupported dtypes/types: " << join(dtypes, ", ") << "\n";
  std::cout << "conformance: " << passed << " passed, " << failed << " failed, " << unsupported
            << " unsupported (ops: " << join(ops, ", ") << ")\n";
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed == 0 ? 0 : 1;
}
