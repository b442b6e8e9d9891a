// conformance_runner.cpp — runs the ONNX backend node tests against Backplane.
//
//   backplane_conformance DIR [--backends A,B] [--backend-path DIR] [--filter SUBSTR]
//                         [--verbose] [--no-fork] [--json FILE]
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
//   unsupported  with a reason, one of:
//                - unknown op: the operator registry has no schema for an op
//                  of the model, or none at the opset the model imports
//                  (asked before anything loads);
//                - no backend: the registry knows the op but no backend of
//                  --backends runs the node (the partitioner's answer, with
//                  each backend's reason);
//                - the runtime rejects the node as unsupported (kUnsupported
//                  naming one of the model's ops: a dtype or attribute value it
//                  does not implement);
//                - an input/output type Backplane has no DType for (string,
//                  complex, sequences...);
//                - the model's default-domain opset is outside the importer's
//                  range and the load fails with kVersionMismatch/kUnsupported;
//                - test data that contradicts its own model (an input whose
//                  shape differs from the static shape the model declares, as
//                  ONNX 1.12's castlike bfloat16 cases do).
//   FAILURE      anything else: wrong numbers, wrong dtype/shape, any other
//                load error, run error, crash, timeout.
//
// --json FILE writes every case's outcome and reason, and per op (the ops a
// case's model uses) how many cases passed, failed and were unsupported;
// `backplane ops --markdown --conformance FILE` turns it into
// docs/operators.md.
//
// Every case runs in a forked child so that a crash or hang is recorded as the
// failure of that case and the run continues. Exit status: 0 iff no failure.
#include "ir/op_registry.hpp"

#include <backplane/runtime.hpp>
#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <onnx/onnx_pb.h>
#include <nlohmann/json.hpp>
// After onnx_pb.h, which defines ONNX_API.
#include <onnx/onnx-data.pb.h>

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
#include <regex>
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
  std::string json_path;  // --json FILE; empty: none
  fs::path scratch;       // models written for a case; removed by main at exit
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
// "unsupported-opset", "unsupported-data" or "fail"; `detail` is the
// op/dtype/opset or the reason.
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
    case onnx::TensorProto::DOUBLE:
      return DType::kFloat64;
    case onnx::TensorProto::INT16:
      return DType::kInt16;
    case onnx::TensorProto::UINT16:
      return DType::kUInt16;
    case onnx::TensorProto::UINT32:
      return DType::kUInt32;
    case onnx::TensorProto::UINT64:
      return DType::kUInt64;
    case onnx::TensorProto::BFLOAT16:
      return DType::kBFloat16;
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
    case DType::kBFloat16:
    case DType::kUInt16:
      if (static_cast<size_t>(p.int32_data_size()) != n) return fail_count(p.int32_data_size());
      for (size_t i = 0; i < n; ++i)
        t.data_as<uint16_t>()[i] = static_cast<uint16_t>(p.int32_data(i));
      break;
    case DType::kInt16:
      if (static_cast<size_t>(p.int32_data_size()) != n) return fail_count(p.int32_data_size());
      for (size_t i = 0; i < n; ++i)
        t.data_as<int16_t>()[i] = static_cast<int16_t>(p.int32_data(i));
      break;
    case DType::kFloat64:
      if (static_cast<size_t>(p.double_data_size()) != n) return fail_count(p.double_data_size());
      for (size_t i = 0; i < n; ++i) t.data_as<double>()[i] = p.double_data(i);
      break;
    case DType::kUInt32:
      if (static_cast<size_t>(p.uint64_data_size()) != n) return fail_count(p.uint64_data_size());
      for (size_t i = 0; i < n; ++i)
        t.data_as<uint32_t>()[i] = static_cast<uint32_t>(p.uint64_data(i));
      break;
    case DType::kUInt64:
      if (static_cast<size_t>(p.uint64_data_size()) != n) return fail_count(p.uint64_data_size());
      for (size_t i = 0; i < n; ++i) t.data_as<uint64_t>()[i] = p.uint64_data(i);
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
    case DType::kFloat64:
      return t.data_as<double>()[i];
    case DType::kBFloat16: {
      const uint32_t bits = uint32_t{t.data_as<uint16_t>()[i]} << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
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
  if (want.dtype() == DType::kFloat32 || want.dtype() == DType::kFloat16 ||
      want.dtype() == DType::kFloat64 || want.dtype() == DType::kBFloat16) {
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

// Every (domain, op) the graph uses, its subgraphs' too.
void collect_domain_ops(const onnx::GraphProto& g,
                        std::set<std::pair<std::string, std::string>>* ops) {
  for (const auto& n : g.node()) {
    ops->emplace(backplane::ir::OpRegistry::normalize_domain(n.domain()), n.op_type());
    for (const auto& a : n.attribute()) {
      if (a.has_g()) collect_domain_ops(a.g(), ops);
      for (const auto& sg : a.graphs()) collect_domain_ops(sg, ops);
    }
  }
}

// "unknown op" when the operator registry has no schema for an op of the
// model at the opset the model imports: no backend is asked.
std::optional<Outcome> registry_verdict(const onnx::ModelProto& mp) {
  std::map<std::string, int64_t> opsets;
  for (const auto& o : mp.opset_import())
    opsets[backplane::ir::OpRegistry::normalize_domain(o.domain())] = o.version();
  std::set<std::pair<std::string, std::string>> ops;
  collect_domain_ops(mp.graph(), &ops);
  const auto& registry = backplane::ir::OpRegistry::builtin();
  for (const auto& [domain, op] : ops) {
    auto it = opsets.find(domain);
    if (it == opsets.end()) continue;  // the importer says what is wrong
    if (!registry.knows(domain, op))
      return Outcome{
          "unsupported-op", op,
          "unknown op: the registry has no schema for '" + op + "' (domain '" + domain + "')"};
    auto schema = registry.lookup(domain, op, it->second);
    if (!schema.ok())
      return Outcome{"unsupported-op", op, "unknown op: " + schema.status().message()};
  }
  return std::nullopt;
}

// Where a data set's input contradicts the static shape its model declares
// (ONNX 1.12's castlike bfloat16 cases feed 'like' as [1] to a model that
// declares [3,4]): such a case cannot run as written.
std::optional<std::string> data_contradicts_model(const onnx::GraphProto& g,
                                                  const std::vector<Tensor>& inputs) {
  for (size_t j = 0; j < inputs.size() && j < static_cast<size_t>(g.input_size()); ++j) {
    const auto& tt = g.input(static_cast<int>(j)).type().tensor_type();
    // ONNX 1.12's cast cases to and from bfloat16 store bfloat16 data as uint16.
    if (auto want = dtype_from_onnx(tt.elem_type()); want && *want != inputs[j].dtype())
      return "input '" + g.input(static_cast<int>(j)).name() + "' holds " +
             backplane::dtype_name(inputs[j].dtype()) + " data but the model declares " +
             backplane::dtype_name(*want);
    if (!tt.has_shape()) continue;
    const Shape& got = inputs[j].shape();
    bool contradicts = tt.shape().dim_size() != static_cast<int>(got.size());
    Shape declared;
    for (int d = 0; d < tt.shape().dim_size(); ++d) {
      const auto& dim = tt.shape().dim(d);
      declared.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
      if (!contradicts && dim.has_dim_value() && dim.dim_value() != got[static_cast<size_t>(d)])
        contradicts = true;
    }
    if (contradicts)
      return "input '" + g.input(static_cast<int>(j)).name() + "' has shape " +
             backplane::shape_to_string(got) + " but the model declares " +
             backplane::shape_to_string(declared);
  }
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

// The reason of a load the runtime refused as unsupported: "no backend" when
// the partitioner found none for a node the registry knows.
std::string unsupported_reason(const std::string& message) {
  if (message.find("no backend supports it") != std::string::npos) return "no backend: " + message;
  return message;
}

// The op a run-time kUnsupported "no backend supports it" names, if any.
std::optional<std::string> unsupported_at_run(const onnx::GraphProto& g,
                                              const backplane::Status& st) {
  if (st.code() != StatusCode::kUnsupported ||
      st.message().find("no backend supports it") == std::string::npos)
    return std::nullopt;
  std::set<std::string> ops;
  collect_ops(g, &ops);
  std::string op = op_named_in(st.message(), ops);
  if (op.empty()) return std::nullopt;
  return op;
}

// ---- Sequences and optionals (models with control flow) ----------------
// Cases whose graph takes or returns a sequence or an optional keep their
// data as SequenceProto / OptionalProto files; they go through
// Session::set_input_value / get_output_value.

bool is_host_value_type(const onnx::TypeProto& t) {
  return t.has_sequence_type() || t.has_optional_type();
}

bool has_host_values(const onnx::GraphProto& g) {
  for (const auto& v : g.input())
    if (is_host_value_type(v.type())) return true;
  for (const auto& v : g.output())
    if (is_host_value_type(v.type())) return true;
  return false;
}

// The value in file `f`, of the graph's type `type`.
bool read_value(const fs::path& f, const onnx::TypeProto& type, backplane::AnyValue* out,
                std::string* err) {
  using backplane::AnyValue;
  auto from_sequence = [&](const onnx::SequenceProto& sp) {
    std::vector<Tensor> items;
    for (const auto& tp : sp.tensor_values()) {
      Tensor t;
      if (!tensor_from_proto(tp, &t, err)) return false;
      items.push_back(t);
    }
    int32_t elem = 0;
    const onnx::TypeProto* et = nullptr;
    if (type.has_sequence_type()) et = &type.sequence_type().elem_type();
    if (type.has_optional_type() && type.optional_type().elem_type().has_sequence_type())
      et = &type.optional_type().elem_type().sequence_type().elem_type();
    if (et != nullptr && et->has_tensor_type()) elem = et->tensor_type().elem_type();
    auto dt = dtype_from_onnx(elem);
    *out = AnyValue::of_sequence(std::move(items), dt ? *dt : DType::kUndefined);
    return true;
  };
  if (type.has_sequence_type()) {
    onnx::SequenceProto sp;
    if (!load_proto(f, &sp, err)) return false;
    return from_sequence(sp);
  }
  if (type.has_optional_type()) {
    onnx::OptionalProto op;
    if (!load_proto(f, &op, err)) return false;
    if (op.has_tensor_value()) {
      Tensor t;
      if (!tensor_from_proto(op.tensor_value(), &t, err)) return false;
      *out = AnyValue::of(t);
      return true;
    }
    if (op.has_sequence_value()) return from_sequence(op.sequence_value());
    const onnx::TypeProto& et = type.optional_type().elem_type();
    int32_t elem = et.has_tensor_type() ? et.tensor_type().elem_type()
                   : et.has_sequence_type() && et.sequence_type().elem_type().has_tensor_type()
                       ? et.sequence_type().elem_type().tensor_type().elem_type()
                       : 0;
    auto dt = dtype_from_onnx(elem);
    *out = AnyValue::none(dt ? *dt : DType::kUndefined);
    return true;
  }
  onnx::TensorProto tp;
  if (!load_proto(f, &tp, err)) return false;
  Tensor t;
  if (!tensor_from_proto(tp, &t, err)) return false;
  *out = AnyValue::of(t);
  return true;
}

std::string compare_values(const backplane::AnyValue& got, const backplane::AnyValue& want) {
  using K = backplane::AnyValue::Kind;
  auto kind = [](K k) {
    return k == K::kTensor ? "a tensor" : k == K::kSequence ? "a sequence" : "an empty optional";
  };
  if (got.kind != want.kind)
    return std::string("got ") + kind(got.kind) + ", expected " + kind(want.kind);
  if (got.kind == K::kTensor) return compare(got.tensor, want.tensor);
  if (got.kind == K::kNone) return "";
  if (got.sequence.size() != want.sequence.size())
    return "sequence of " + std::to_string(got.sequence.size()) + " tensors, expected " +
           std::to_string(want.sequence.size());
  for (size_t k = 0; k < got.sequence.size(); ++k) {
    std::string d = compare(got.sequence[k], want.sequence[k]);
    if (!d.empty()) return "element " + std::to_string(k) + ": " + d;
  }
  return "";
}

Outcome run_value_case(const fs::path& case_dir, const onnx::ModelProto& mp, const Options& opt) {
  const auto& g = mp.graph();
  backplane::RuntimeOptions ro;
  ro.dynamic_backends = !opt.backend_path.empty();
  if (!opt.backend_path.empty()) ro.backend_path = opt.backend_path;
  ro.log_level = backplane::LogLevel::kOff;
  auto rt = backplane::Runtime::create(ro);
  if (!rt.ok()) return {"fail", "Runtime::create: " + rt.status().to_string()};
  backplane::ModelOptions mo;
  mo.backends = opt.backends;
  auto model = (*rt)->load_model((case_dir / "model.onnx").string(), mo);
  if (!model.ok()) {
    if (model.status().code() == StatusCode::kUnsupported) {
      std::set<std::string> ops;
      collect_ops(g, &ops);
      std::string op = op_named_in(model.status().message(), ops);
      if (!op.empty()) return {"unsupported-op", op, model.status().message()};
    }
    return {"fail", "load: " + model.status().to_string()};
  }
  auto session = (*model)->create_session();
  if (!session.ok()) return {"fail", "create_session: " + session.status().to_string()};
  std::string err;
  const auto sets = sorted_matching(case_dir, "test_data_set_");
  if (sets.empty()) return {"fail", "no test_data_set_N directories"};
  for (const auto& d : sets) {
    const std::string where = d.filename().string() + ": ";
    const auto ins = sorted_matching(d, "input_");
    const auto outs = sorted_matching(d, "output_");
    if (ins.size() > static_cast<size_t>(g.input_size()) ||
        outs.size() > static_cast<size_t>(g.output_size()) || outs.empty())
      return {"fail", where + "input/output files do not match the graph"};
    for (size_t j = 0; j < ins.size(); ++j) {
      backplane::AnyValue v;
      if (!read_value(ins[j], g.input(static_cast<int>(j)).type(), &v, &err))
        return {"fail", where + err};
      auto st = (*session)->set_input_value(g.input(static_cast<int>(j)).name(), v);
      if (!st.ok()) return {"fail", where + "set_input_value: " + st.to_string()};
    }
    auto st = (*session)->run();
    if (!st.ok()) {
      // A model that runs in stages (control flow, data-dependent shapes)
      // specialises its later stages during the run: "no backend supports
      // it" then comes from run() rather than from the load.
      if (auto op = unsupported_at_run(g, st)) return {"unsupported-op", *op, st.message()};
      return {"fail", where + "run: " + st.to_string()};
    }
    for (size_t j = 0; j < outs.size(); ++j) {
      const std::string& name = g.output(static_cast<int>(j)).name();
      backplane::AnyValue want;
      if (!read_value(outs[j], g.output(static_cast<int>(j)).type(), &want, &err))
        return {"fail", where + err};
      auto got = (*session)->get_output_value(name);
      if (!got.ok())
        return {"fail", where + "get_output_value '" + name + "': " + got.status().to_string()};
      std::string diff = compare_values(*got, want);
      if (!diff.empty()) return {"fail", where + "output '" + name + "': " + diff};
    }
  }
  return {"pass", ""};
}

Outcome run_case(const fs::path& case_dir, const Options& opt) {
  const fs::path model_path = case_dir / "model.onnx";
  onnx::ModelProto mp;
  std::string err;
  if (!load_proto(model_path, &mp, &err)) return {"fail", err};
  if (has_host_values(mp.graph())) return run_value_case(case_dir, mp, opt);
  if (auto bad = unsupported_io(mp.graph())) return {"unsupported-dtype", *bad};
  // Random generators: the expected outputs come from NumPy's generator,
  // which no other generator reproduces bit for bit. CpuRef's generators are
  // tested for shape, dtype, distribution and seeding in
  // tests/backends/test_cpuref_signal.cpp instead.
  {
    static const std::set<std::string> kRandom = {"Bernoulli",     "Multinomial",
                                                  "RandomNormal",  "RandomNormalLike",
                                                  "RandomUniform", "RandomUniformLike"};
    std::set<std::string> ops;
    collect_ops(mp.graph(), &ops);
    for (const auto& op : ops)
      if (kRandom.count(op) > 0)
        return {"unsupported-op", op,
                op + " draws random values: NumPy's random stream cannot be matched bit for bit"};
  }
  if (auto verdict = registry_verdict(mp)) return *verdict;

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
    if (auto bad = data_contradicts_model(mp.graph(), ds.inputs))
      return {"unsupported-data", "data",
              "test data contradicts its model: " + d.filename().string() + ": " + *bad};
    for (size_t j = 0; j < ds.outputs.size() && j < static_cast<size_t>(mp.graph().output_size());
         ++j) {
      const auto& out = mp.graph().output(static_cast<int>(j));
      auto want = dtype_from_onnx(out.type().tensor_type().elem_type());
      if (want && *want != ds.outputs[j].dtype())
        return {"unsupported-data", "data",
                "test data contradicts its model: " + d.filename().string() + ": output '" +
                    out.name() + "' holds " + backplane::dtype_name(ds.outputs[j].dtype()) +
                    " data but the model declares " + backplane::dtype_name(*want)};
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
        if (!op.empty()) return {"unsupported-op", op, unsupported_reason(st.message())};
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
        if (!op.empty())
          return {"unsupported-op", op, unsupported_reason(retried.status().message())};
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
    if (!st.ok()) {
      // A model that runs in stages (control flow, data-dependent shapes)
      // specialises its later stages during the run: "no backend supports
      // it" then comes from run() rather than from the load.
      if (auto op = unsupported_at_run(g, st)) return {"unsupported-op", *op, st.message()};
      return {"fail", where + "run: " + st.to_string()};
    }
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

// A reason without what differs between runs and machines: the case's own
// path and the scratch copies the retry writes.
std::string portable_reason(std::string reason, const fs::path& case_dir) {
  const std::string model = (case_dir / "model.onnx").string() + ": ";
  for (size_t pos; (pos = reason.find(model)) != std::string::npos;)
    reason.erase(pos, model.size());
  static const std::regex scratch(R"([^ \[]*backplane_conformance\.[^/ ]+/bound_[0-9]+\.onnx: )");
  return std::regex_replace(reason, scratch, "");
}

// One case in the --json record: its outcome and reason, and its model's ops
// counted per outcome.
void record_case(const fs::path& case_dir, const std::string& name, const Outcome& o,
                 nlohmann::json* cases, std::map<std::string, std::map<std::string, int>>* ops) {
  std::string outcome, reason;
  if (o.kind == "pass" || o.kind == "pass-bound") {
    outcome = "passed";
  } else if (o.kind == "fail") {
    outcome = "failed";
    reason = o.detail;
  } else {
    outcome = "unsupported";
    if (o.kind == "unsupported-dtype") reason = "type " + o.detail + " (no Backplane dtype)";
    else if (o.kind == "unsupported-opset") reason = o.detail + ": " + o.message;
    else reason = o.message;
  }
  onnx::ModelProto mp;
  std::string err;
  std::set<std::pair<std::string, std::string>> used;
  if (load_proto(case_dir / "model.onnx", &mp, &err)) collect_domain_ops(mp.graph(), &used);
  nlohmann::json op_names = nlohmann::json::array();
  for (const auto& [domain, op] : used) {
    const std::string key = domain.empty() ? op : domain + "::" + op;
    op_names.push_back(key);
    ++(*ops)[key][outcome];
  }
  cases->push_back({{"name", name},
                    {"outcome", outcome == "passed"   ? "pass"
                                : outcome == "failed" ? "fail"
                                                      : "unsupported"},
                    {"kind", o.kind},
                    {"reason", portable_reason(reason, case_dir)},
                    {"ops", op_names}});
}

int usage(const char* argv0) {
  std::cerr
      << "usage: " << argv0
      << " DIR [--backends A,B] [--backend-path DIR] [--filter SUBSTR] [--verbose] [--no-fork]"
         " [--json FILE]\n";
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
      // The runtime takes absolute directories only; here, as on the
      // backplane command line, a relative one is relative to the caller.
      opt.backend_path = fs::absolute(argv[++i]).lexically_normal().string();
    } else if (a == "--filter" && i + 1 < argc) {
      opt.filter = argv[++i];
    } else if (a == "--verbose") {
      opt.verbose = true;
    } else if (a == "--no-fork") {
      opt.fork_cases = false;
    } else if (a == "--json" && i + 1 < argc) {
      opt.json_path = argv[++i];
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
  nlohmann::json json_cases = nlohmann::json::array();
  std::map<std::string, std::map<std::string, int>> op_counts;  // op -> outcome -> cases
  for (const auto& c : cases) {
    const std::string name = c.parent_path().filename().string() + "/" + c.filename().string();
    Outcome o = opt.fork_cases ? run_case_isolated(c, opt) : run_case(c, opt);
    if (!opt.json_path.empty()) record_case(c, name, o, &json_cases, &op_counts);
    if (o.kind == "pass" || o.kind == "pass-bound") {
      ++passed;
      if (o.kind == "pass-bound") ++passed_bound;
      if (opt.verbose)
        std::cout << "pass        " << name
                  << (o.kind == "pass-bound" ? " (small inputs bound as constants)" : "") << "\n";
    } else if (o.kind == "unsupported-op" || o.kind == "unsupported-opset" ||
               o.kind == "unsupported-data") {
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
  if (!opt.json_path.empty()) {
    nlohmann::json ops_json = nlohmann::json::object();
    for (const auto& [op, counts] : op_counts) {
      nlohmann::json& j = ops_json[op];
      j["cases"] = 0;
      for (const char* k : {"passed", "failed", "unsupported"}) {
        auto it = counts.find(k);
        j[k] = it == counts.end() ? 0 : it->second;
        j["cases"] = j["cases"].get<int>() + j[k].get<int>();
      }
    }
    const nlohmann::json out = {{"backends", opt.backends},
                                {"summary",
                                 {{"cases", cases.size()},
                                  {"passed", passed},
                                  {"failed", failed},
                                  {"unsupported", unsupported}}},
                                {"cases", json_cases},
                                {"ops", ops_json}};
    std::ofstream f(opt.json_path);
    f << out.dump(1) << "\n";
    if (!f) {
      std::cerr << "error: cannot write " << opt.json_path << "\n";
      return 1;
    }
  }
  return failed == 0 ? 0 : 1;
}
