// conformance_onnx.cpp — reading the installed ONNX node test cases (see
// conformance_onnx.hpp). The reading and the tolerances follow
// tests/conformance/conformance_runner.cpp, the build tree's runner of the
// same cases, which writes the results docs/operators.md is made from.
#include "conformance_onnx.hpp"

// After onnx_pb.h, which defines ONNX_API.
#include <onnx/onnx-data.pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace fs = std::filesystem;

namespace backplane::cli {
namespace {

std::optional<DType> dtype_from_onnx(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return DType::kFloat32;
    case onnx::TensorProto::FLOAT16:
      return DType::kFloat16;
    case onnx::TensorProto::BFLOAT16:
      return DType::kBFloat16;
    case onnx::TensorProto::DOUBLE:
      return DType::kFloat64;
    case onnx::TensorProto::INT8:
      return DType::kInt8;
    case onnx::TensorProto::UINT8:
      return DType::kUInt8;
    case onnx::TensorProto::INT16:
      return DType::kInt16;
    case onnx::TensorProto::UINT16:
      return DType::kUInt16;
    case onnx::TensorProto::INT32:
      return DType::kInt32;
    case onnx::TensorProto::UINT32:
      return DType::kUInt32;
    case onnx::TensorProto::INT64:
      return DType::kInt64;
    case onnx::TensorProto::UINT64:
      return DType::kUInt64;
    case onnx::TensorProto::BOOL:
      return DType::kBool;
    default:
      return std::nullopt;
  }
}

// A TensorProto of a test data set as a Tensor (raw_data or typed fields).
Result<Tensor> tensor_from_proto(const onnx::TensorProto& p) {
  auto dt = dtype_from_onnx(p.data_type());
  if (!dt) return unsupported("element type " + std::to_string(p.data_type()));
  Tensor t(*dt, Shape(p.dims().begin(), p.dims().end()));
  const size_t n = static_cast<size_t>(t.numel()), es = dtype_size(*dt);
  if (p.has_raw_data()) {
    if (p.raw_data().size() != n * es) return invalid_argument("raw_data of the wrong size");
    if (n) std::memcpy(t.data(), p.raw_data().data(), n * es);
    return t;
  }
  auto count = [n](int got) -> Status {
    if (static_cast<size_t>(got) != n) return invalid_argument("typed data of the wrong size");
    return Status();
  };
  switch (*dt) {
    case DType::kFloat32:
      BP_RETURN_IF_ERROR(count(p.float_data_size()));
      std::copy(p.float_data().begin(), p.float_data().end(), t.data_as<float>());
      break;
    case DType::kFloat64:
      BP_RETURN_IF_ERROR(count(p.double_data_size()));
      std::copy(p.double_data().begin(), p.double_data().end(), t.data_as<double>());
      break;
    case DType::kInt64:
      BP_RETURN_IF_ERROR(count(p.int64_data_size()));
      std::copy(p.int64_data().begin(), p.int64_data().end(), t.data_as<int64_t>());
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      BP_RETURN_IF_ERROR(count(p.uint64_data_size()));
      for (size_t i = 0; i < n; ++i) {
        if (*dt == DType::kUInt32)
          t.data_as<uint32_t>()[i] = static_cast<uint32_t>(p.uint64_data(i));
        else t.data_as<uint64_t>()[i] = p.uint64_data(i);
      }
      break;
    default:  // int32 and the narrower types (float16 as bits) in int32_data
      BP_RETURN_IF_ERROR(count(p.int32_data_size()));
      for (size_t i = 0; i < n; ++i) {
        const int32_t v = p.int32_data(static_cast<int>(i));
        if (es == 4) std::memcpy(static_cast<char*>(t.data()) + 4 * i, &v, 4);
        if (es == 2) static_cast<uint16_t*>(t.data())[i] = static_cast<uint16_t>(v);
        if (es == 1) static_cast<uint8_t*>(t.data())[i] = static_cast<uint8_t>(v);
      }
  }
  return t;
}

Result<Tensor> read_tensor(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::TensorProto p;
  if (!in || !p.ParseFromIstream(&in)) return invalid_argument("cannot read " + path.string());
  return tensor_from_proto(p);
}

// The files DIR/PREFIX<N>.pb (or DIR/PREFIX<N>) in the order of N.
std::vector<fs::path> numbered(const fs::path& dir, const std::string& prefix) {
  std::vector<std::pair<int, fs::path>> items;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string rest = name.substr(prefix.size());
    if (rest.empty() || !std::isdigit(static_cast<unsigned char>(rest[0]))) continue;
    items.emplace_back(std::stoi(rest), e.path());
  }
  std::sort(items.begin(), items.end());
  std::vector<fs::path> out;
  for (auto& [k, p] : items) out.push_back(p);
  return out;
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

// Why a graph input or output cannot go through Session::set_input/output.
std::string not_a_tensor(const onnx::GraphProto& g) {
  for (const auto* list : {&g.input(), &g.output()})
    for (const auto& v : *list) {
      if (!v.type().has_tensor_type()) return "'" + v.name() + "' is not a tensor";
      if (!dtype_from_onnx(v.type().tensor_type().elem_type()))
        return "'" + v.name() + "' has an element type Backplane has no dtype for";
    }
  return "";
}

// Where a data set contradicts its own model (ONNX 1.12's bfloat16 cast cases
// store bfloat16 data as uint16 and feed CastLike's 'like' as [1] to a model
// declaring [3,4]): such a case cannot run as written.
std::string data_contradicts_model(const onnx::GraphProto& g, const OnnxDataSet& ds) {
  for (size_t j = 0; j < ds.inputs.size() && j < static_cast<size_t>(g.input_size()); ++j) {
    const auto& vi = g.input(static_cast<int>(j));
    const auto& tt = vi.type().tensor_type();
    if (dtype_from_onnx(tt.elem_type()) != ds.inputs[j].dtype())
      return "input '" + vi.name() + "' holds " + dtype_name(ds.inputs[j].dtype()) +
             " data, the model declares another type";
    if (!tt.has_shape()) continue;
    bool contradicts = tt.shape().dim_size() != static_cast<int>(ds.inputs[j].rank());
    for (int d = 0; !contradicts && d < tt.shape().dim_size(); ++d)
      contradicts = tt.shape().dim(d).has_dim_value() &&
                    tt.shape().dim(d).dim_value() != ds.inputs[j].shape()[static_cast<size_t>(d)];
    if (contradicts)
      return "input '" + vi.name() + "' has shape " + shape_to_string(ds.inputs[j].shape()) +
             ", the model declares another";
  }
  for (size_t j = 0; j < ds.outputs.size() && j < static_cast<size_t>(g.output_size()); ++j)
    if (dtype_from_onnx(g.output(static_cast<int>(j)).type().tensor_type().elem_type()) !=
        ds.outputs[j].dtype())
      return "output '" + g.output(static_cast<int>(j)).name() + "' holds " +
             dtype_name(ds.outputs[j].dtype()) + " data, the model declares another type";
  return "";
}

// Random generators: the expected outputs come from NumPy's generator, which
// no other generator reproduces bit for bit (CpuRef's generators are tested
// for shape, dtype, distribution and seeding in its unit tests instead).
std::string draws_random_values(const std::set<std::string>& ops) {
  for (const char* op : {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike",
                         "RandomUniform", "RandomUniformLike"})
    if (ops.count(op)) return std::string(op) + " draws random values, NumPy's cannot be matched";
  return "";
}

OnnxCase read_case(const fs::path& dir, std::string name) {
  OnnxCase c;
  c.name = std::move(name);
  c.model_path = (dir / "model.onnx").string();
  std::ifstream in(c.model_path, std::ios::binary);
  if (!in || !c.model.ParseFromIstream(&in)) {
    c.skip = "cannot read " + c.model_path;
    return c;
  }
  collect_ops(c.model.graph(), &c.ops);
  if (c.skip = not_a_tensor(c.model.graph()); !c.skip.empty()) return c;
  if (c.skip = draws_random_values(c.ops); !c.skip.empty()) return c;
  for (const fs::path& set : numbered(dir, "test_data_set_")) {
    OnnxDataSet ds;
    for (auto [prefix, out] : {std::pair{"input_", &ds.inputs}, std::pair{"output_", &ds.outputs}})
      for (const fs::path& file : numbered(set, prefix)) {
        auto t = read_tensor(file);
        if (!t.ok()) {
          c.skip = set.filename().string() + "/" + file.filename().string() + ": " +
                   t.status().message();
          return c;
        }
        out->push_back(std::move(*t));
      }
    if (c.skip = data_contradicts_model(c.model.graph(), ds); !c.skip.empty()) return c;
    c.sets.push_back(std::move(ds));
  }
  if (c.sets.empty()) c.skip = "no test_data_set_N";
  return c;
}

double element(const Tensor& t, size_t i) {
  switch (t.dtype()) {
    case DType::kFloat32:
      return t.data_as<float>()[i];
    case DType::kFloat64:
      return t.data_as<double>()[i];
    case DType::kBFloat16: {
      const uint32_t bits = uint32_t{t.data_as<uint16_t>()[i]} << 16;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    default: {  // float16
      const uint16_t h = t.data_as<uint16_t>()[i];
      const int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
      const double sign = (h & 0x8000) ? -1.0 : 1.0;
      if (exp == 0) return sign * std::ldexp(mant, -24);
      if (exp == 31) return mant ? NAN : sign * INFINITY;
      return sign * std::ldexp(mant + 1024, exp - 25);
    }
  }
}

}  // namespace

std::string default_case_data_dir() {
  std::error_code ec;
  const fs::path exe = fs::canonical("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path() / ".." / "share" / "backplane" / "conformance")
      .lexically_normal()
      .string();
}

Result<std::vector<OnnxCase>> load_onnx_cases(const std::string& dir, const std::string& filter) {
  std::vector<OnnxCase> cases;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found(dir + ": no such directory");
  for (const char* kind : {"node", "simple"}) {
    const fs::path d = fs::path(dir) / kind;
    if (!fs::is_directory(d, ec)) continue;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      const std::string name = std::string(kind) + "/" + e.path().filename().string();
      if (!fs::exists(e.path() / "model.onnx")) continue;
      if (!filter.empty() && name.find(filter) == std::string::npos) continue;
      cases.push_back(read_case(e.path(), name));
    }
    if (ec) return invalid_argument(d.string() + ": " + ec.message());
  }
  std::sort(cases.begin(), cases.end(),
            [](const OnnxCase& a, const OnnxCase& b) { return a.name < b.name; });
  return cases;
}

std::string compare_with_expected(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  if (got.size() < want.size())
    return std::to_string(got.size()) + " outputs, expected " + std::to_string(want.size());
  for (size_t o = 0; o < want.size(); ++o) {
    const Tensor &g = got[o], &w = want[o];
    const std::string which = "output " + std::to_string(o);
    if (g.dtype() != w.dtype())
      return which + " is " + dtype_name(g.dtype()) + ", expected " + dtype_name(w.dtype());
    if (g.shape() != w.shape())
      return which + " has shape " + shape_to_string(g.shape()) + ", expected " +
             shape_to_string(w.shape());
    const size_t n = static_cast<size_t>(w.numel());
    const DType t = w.dtype();
    if (t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kFloat16 ||
        t == DType::kBFloat16) {
      for (size_t i = 0; i < n; ++i) {
        const double a = element(g, i), b = element(w, i);
        const bool ok = std::isnan(a) || std::isnan(b) ? std::isnan(a) && std::isnan(b)
                        : std::isinf(a) || std::isinf(b)
                            ? a == b
                            : std::fabs(a - b) <= 1e-7 + 1e-3 * std::fabs(b);
        if (!ok) {
          std::ostringstream os;
          os.precision(9);
          os << which << "[" << i << "] is " << a << ", expected " << b;
          return os.str();
        }
      }
      continue;
    }
    const size_t es = dtype_size(t);
    const auto* pa = static_cast<const unsigned char*>(g.data());
    const auto* pb = static_cast<const unsigned char*>(w.data());
    for (size_t i = 0; i < n; ++i) {
      const bool eq = t == DType::kBool ? (pa[i] != 0) == (pb[i] != 0)
                                        : std::memcmp(pa + i * es, pb + i * es, es) == 0;
      if (!eq) return which + " differs from the expected output at element " + std::to_string(i);
    }
  }
  return "";
}

}  // namespace backplane::cli
