#include "onnx/importer.hpp"

#include "core/constant_block.hpp"
#include "core/mapped_file.hpp"

#include <backplane/runtime.hpp>
#include "onnx/contrib_ops.hpp"
#include "onnx/einsum.hpp"
#include "onnx/functions.hpp"
#include "onnx/matmul_nbits.hpp"
#include "onnx/opset_adapter.hpp"
#include "onnx/wire_split.hpp"

#include <onnx/onnx_pb.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>

namespace backplane::onnx_import {

namespace fs = std::filesystem;
using ir::Attribute;
using ir::AttrType;
using ir::Graph;
using ir::Node;
using ir::Value;
using ir::ValueKind;

namespace {

constexpr int64_t kMinOpset = 1;
// Newer models are read as opset 18 (opset_adapter.hpp), as shape inference
// knows them (ir/shape_inference.cpp).
constexpr int64_t kMaxOpset = kRuntimeOpset;

// Protobuf's own streams take an `int` size; this one hands out a buffer of
// any size in chunks, so the only limit left is CodedInputStream's total
// bytes limit, which parse_model raises to the maximum.
class ChunkedArrayInputStream : public google::protobuf::io::ZeroCopyInputStream {
 public:
  ChunkedArrayInputStream(const void* data, size_t size)
      : data_(static_cast<const uint8_t*>(data)), size_(size) {}

  bool Next(const void** data, int* size) override {
    if (pos_ >= size_) return false;
    size_t n = std::min(size_ - pos_, kChunk);
    *data = data_ + pos_;
    *size = static_cast<int>(n);
    pos_ += n;
    return true;
  }
  void BackUp(int count) override { pos_ -= static_cast<size_t>(count); }
  bool Skip(int count) override {
    size_t n = static_cast<size_t>(count);
    if (n > size_ - pos_) {
      pos_ = size_;
      return false;
    }
    pos_ += n;
    return true;
  }
  int64_t ByteCount() const override { return static_cast<int64_t>(pos_); }

 private:
  static constexpr size_t kChunk = size_t{64} << 20;
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

const char* onnx_type_name(int32_t t) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      return "FLOAT";
    case onnx::TensorProto::UINT8:
      return "UINT8";
    case onnx::TensorProto::INT8:
      return "INT8";
    case onnx::TensorProto::UINT16:
      return "UINT16";
    case onnx::TensorProto::INT16:
      return "INT16";
    case onnx::TensorProto::INT32:
      return "INT32";
    case onnx::TensorProto::INT64:
      return "INT64";
    case onnx::TensorProto::STRING:
      return "STRING";
    case onnx::TensorProto::BOOL:
      return "BOOL";
    case onnx::TensorProto::FLOAT16:
      return "FLOAT16";
    case onnx::TensorProto::DOUBLE:
      return "DOUBLE";
    case onnx::TensorProto::UINT32:
      return "UINT32";
    case onnx::TensorProto::UINT64:
      return "UINT64";
    case onnx::TensorProto::COMPLEX64:
      return "COMPLEX64";
    case onnx::TensorProto::COMPLEX128:
      return "COMPLEX128";
    case onnx::TensorProto::BFLOAT16:
      return "BFLOAT16";
    case onnx::TensorProto::UNDEFINED:
      return "UNDEFINED";
    default:
      break;
  }
  // The types of IR versions 9 to 11, which this protobuf may not name.
  static const char* const newer[] = {
      "FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",
      "INT4",         "FLOAT4E2M1",     "FLOAT8E8M0", "UINT2",          "INT2"};
  return t >= 17 && t <= 26 ? newer[t - 17] : "UNKNOWN";
}

constexpr int32_t kOnnxUInt4 = 21, kOnnxInt4 = 22;  // TensorProto.DataType

// ONNX element type -> DType. Double is deliberately not narrowed to float32:
// doing so silently would change results and clash with Cast(to=DOUBLE).
bool to_dtype(int32_t t, DType* out) {
  switch (t) {
    case onnx::TensorProto::FLOAT:
      *out = DType::kFloat32;
      return true;
    case onnx::TensorProto::UINT8:
      *out = DType::kUInt8;
      return true;
    case onnx::TensorProto::INT8:
      *out = DType::kInt8;
      return true;
    case onnx::TensorProto::INT32:
      *out = DType::kInt32;
      return true;
    case onnx::TensorProto::INT64:
      *out = DType::kInt64;
      return true;
    case onnx::TensorProto::BOOL:
      *out = DType::kBool;
      return true;
    case onnx::TensorProto::FLOAT16:
      *out = DType::kFloat16;
      return true;
    case onnx::TensorProto::UINT16:
      *out = DType::kUInt16;
      return true;
    case onnx::TensorProto::INT16:
      *out = DType::kInt16;
      return true;
    case onnx::TensorProto::DOUBLE:
      *out = DType::kFloat64;
      return true;
    case onnx::TensorProto::UINT32:
      *out = DType::kUInt32;
      return true;
    case onnx::TensorProto::UINT64:
      *out = DType::kUInt64;
      return true;
    case onnx::TensorProto::BFLOAT16:
      *out = DType::kBFloat16;
      return true;
    default:
      return false;
  }
}

Status unsupported_dtype(const std::string& what, int32_t t) {
  return unsupported(what + " has element type " + onnx_type_name(t) +
                     ", which Backplane does not support (supported: float32, float16, "
                     "bfloat16, float64, int8, uint8, int16, uint16, int32, uint32, int64, "
                     "uint64, bool; int4 and uint4 initializers, read as int8 and uint8)");
}

// Per-import state: where external data lives and the files mapped so far
// (one mapping per file, shared by every tensor that points into it).
struct Scope;
struct Context {
  std::string source;
  std::string base_dir;
  int64_t ir_version = 0;
  std::map<std::string, std::shared_ptr<MappedFile>> mapped;
  // The model's own bytes, and the raw_data of the main graph's
  // initializers left in them (wire_split.hpp), by initializer.
  const unsigned char* model_bytes = nullptr;
  std::shared_ptr<const MappedFile> model_file;  // when the bytes are a mapped file
  std::map<const onnx::TensorProto*, ByteRange> raw_in_model;
  // Names of the initializers read from INT4 or UINT4 into int8 and uint8.
  std::set<std::string> four_bit;
  Scope* scope = nullptr;  // of the graph being read (a body's: see convert_subgraph)
};

// The graph being read and those enclosing it: a control-flow body reads the
// values of enclosing graphs by name (ONNX's outer-scope references).
struct Scope {
  Scope* parent = nullptr;
  Graph* graph = nullptr;
  std::vector<int> captured;  // values of `graph` read from an enclosing scope, in order
};

// The value `name` means in `scope`: its own, or one an enclosing graph
// defines, which the graph then captures (a captured input, see
// Graph::captured; each enclosing graph between captures it too). -1 if none.
int resolve_name(Scope& scope, const std::string& name) {
  int id = scope.graph->find_value(name);
  if (id >= 0 || scope.parent == nullptr) return id;
  if (resolve_name(*scope.parent, name) < 0) return -1;
  Value v;
  v.name = name;
  id = scope.graph->add_value(std::move(v));
  scope.captured.push_back(id);
  return id;
}
int find_in_scope(Context& ctx, const Graph& g, const std::string& name) {
  return ctx.scope != nullptr ? resolve_name(*ctx.scope, name) : g.find_value(name);
}

Result<std::shared_ptr<Graph>> convert_subgraph(Context& ctx, const onnx::GraphProto& gp,
                                                const std::string& what);

Result<std::shared_ptr<MappedFile>> map_external(Context& ctx, const std::string& location,
                                                 const std::string& what) {
  fs::path rel(location);
  if (location.empty()) return corrupt_data(what + ": external data has no 'location'");
  if (rel.is_absolute())
    return invalid_argument(what + ": external data location '" + location +
                            "' is an absolute path; it must be relative to the model's directory");
  for (const fs::path& part : rel)
    if (part == "..")
      return invalid_argument(what + ": external data location '" + location +
                              "' escapes the model's directory ('..')");
  fs::path full = fs::path(ctx.base_dir.empty() ? "." : ctx.base_dir) / rel;
  std::string key = full.lexically_normal().string();
  auto it = ctx.mapped.find(key);
  if (it != ctx.mapped.end()) return it->second;
  BP_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(key),
                      what + ": external data");
  ctx.mapped[key] = file;
  return file;
}

template <class Src, class Dst>
void convert_into(const Src* src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src[i]);
}

// A tensor's dtype and dims as the file declares them, checked.
struct TensorLayout {
  std::string what;
  DType dtype = DType::kUndefined;
  Shape shape;
  int64_t numel = 1;
  size_t bytes = 0;

  Status mismatch(const std::string& field, size_t have, bool in_bytes) const {
    return corrupt_data(what + ": shape mismatch: " + field + " has " + std::to_string(have) + " " +
                        (in_bytes ? "bytes" : "elements") + " but shape " + shape_to_string(shape) +
                        " of " + dtype_name(dtype) + " needs " +
                        std::to_string(in_bytes ? bytes : static_cast<size_t>(numel)));
  }
};

Result<TensorLayout> tensor_layout(const onnx::TensorProto& tp, const std::string& what) {
  TensorLayout l;
  l.what = what;
  if (!to_dtype(tp.data_type(), &l.dtype)) return unsupported_dtype(what, tp.data_type());
  for (int64_t d : tp.dims()) {
    if (d < 0) return corrupt_data(what + ": negative dimension " + std::to_string(d));
    l.shape.push_back(d);
  }
  if (tp.has_segment()) return unsupported(what + ": segmented tensors are not supported");
  // The dims come from the file: their product must not overflow (no tensor
  // a file can hold has 2^48 elements).
  for (int64_t d : l.shape) {
    if (d != 0 && l.numel > (int64_t{1} << 48) / d)
      return corrupt_data(what + ": shape " + shape_to_string(l.shape) + " is too large");
    l.numel *= d;
  }
  l.bytes = static_cast<size_t>(l.numel) * dtype_size(l.dtype);
  return l;
}

// data_location = EXTERNAL: a range of a file next to the model, mapped.
// Initializers at least this large are kept in a ConstantBlock (when `block`
// asks for one), so that their bytes can leave memory once packed.
constexpr size_t kBlockBytes = size_t{64} << 10;

Result<Tensor> read_external(Context& ctx, const onnx::TensorProto& tp, const TensorLayout& l,
                             std::shared_ptr<ConstantBlock>* block) {
  const std::string& what = l.what;
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : tp.external_data()) {
    const std::string& k = kv.key();
    if (k == "location") {
      location = kv.value();
    } else if (k == "offset" || k == "length") {
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(kv.value().c_str(), &end, 10);
      if (kv.value().empty() || *end != '\0' || errno != 0 || v < 0)
        return corrupt_data(what + ": external data " + k + " '" + kv.value() +
                            "' is not a non-negative integer");
      (k == "offset" ? offset : length) = v;
    }
    // "checksum" and unknown keys are ignored, as ONNX Runtime does.
  }
  BP_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, map_external(ctx, location, what));
  const uint64_t fsize = file->size();
  if (static_cast<uint64_t>(offset) > fsize)
    return corrupt_data(what + ": external data offset " + std::to_string(offset) +
                        " is past the end of '" + location + "' (" + std::to_string(fsize) +
                        " bytes)");
  if (length < 0) length = static_cast<int64_t>(fsize - offset);
  if (static_cast<uint64_t>(length) > fsize - static_cast<uint64_t>(offset))
    return corrupt_data(what + ": external data offset " + std::to_string(offset) + " + length " +
                        std::to_string(length) + " exceeds the size of '" + location + "' (" +
                        std::to_string(fsize) + " bytes)");
  if (static_cast<size_t>(length) != l.bytes)
    return l.mismatch("external data '" + location + "'", static_cast<size_t>(length), true);
  if (l.bytes == 0) return Tensor(l.dtype, l.shape);
  const unsigned char* p = file->bytes() + offset;
  // Kernels read elements through typed pointers, so a misaligned blob is
  // copied; an aligned one is used in place and keeps the mapping alive.
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(l.dtype) != 0)
    return Tensor::copy_of(l.dtype, l.shape, p);
  if (block != nullptr && l.bytes >= kBlockBytes) {
    *block = ConstantBlock::view(file, static_cast<size_t>(offset), l.bytes);
    return Tensor::view(l.dtype, l.shape, (*block)->data(), *block);
  }
  return Tensor::view(l.dtype, l.shape, const_cast<unsigned char*>(p), file);
}

// The typed fields (float_data, int64_data, double_data, uint64_data for
// uint32/uint64, int32_data for the rest).
Result<Tensor> read_typed_fields(const onnx::TensorProto& tp, const TensorLayout& l) {
  const char* field = "int32_data";
  int count = tp.int32_data_size();
  if (l.dtype == DType::kFloat32) field = "float_data", count = tp.float_data_size();
  if (l.dtype == DType::kInt64) field = "int64_data", count = tp.int64_data_size();
  if (l.dtype == DType::kFloat64) field = "double_data", count = tp.double_data_size();
  if (l.dtype == DType::kUInt32 || l.dtype == DType::kUInt64)
    field = "uint64_data", count = tp.uint64_data_size();
  if (l.dtype == DType::kUndefined) return internal_error(l.what + ": undefined dtype");
  // The element count is checked before allocating what the dims claim.
  if (count != l.numel) return l.mismatch(field, static_cast<size_t>(count), false);
  Tensor t(l.dtype, l.shape);
  const int64_t n = l.numel;
  switch (l.dtype) {
    case DType::kFloat32:
      if (n) std::memcpy(t.data(), tp.float_data().data(), l.bytes);
      break;
    case DType::kInt64:
      if (n) std::memcpy(t.data(), tp.int64_data().data(), l.bytes);
      break;
    case DType::kInt32:
      if (n) std::memcpy(t.data(), tp.int32_data().data(), l.bytes);
      break;
    case DType::kInt8:
      convert_into(tp.int32_data().data(), t.data_as<int8_t>(), n);
      break;
    case DType::kUInt8:
      convert_into(tp.int32_data().data(), t.data_as<uint8_t>(), n);
      break;
    case DType::kBool: {
      uint8_t* d = t.data_as<uint8_t>();
      for (int64_t i = 0; i < n; ++i) d[i] = tp.int32_data(static_cast<int>(i)) != 0;
      break;
    }
    case DType::kFloat16:
    case DType::kBFloat16:
      // ONNX stores each half's bit pattern in the low 16 bits of an int32.
      convert_into(tp.int32_data().data(), t.data_as<uint16_t>(), n);
      break;
    case DType::kInt16:
      convert_into(tp.int32_data().data(), t.data_as<int16_t>(), n);
      break;
    case DType::kUInt16:
      convert_into(tp.int32_data().data(), t.data_as<uint16_t>(), n);
      break;
    case DType::kFloat64:
      if (n) std::memcpy(t.data(), tp.double_data().data(), l.bytes);
      break;
    case DType::kUInt32:
      convert_into(tp.uint64_data().data(), t.data_as<uint32_t>(), n);
      break;
    case DType::kUInt64:
      if (n) std::memcpy(t.data(), tp.uint64_data().data(), l.bytes);
      break;
    case DType::kUndefined:
      return internal_error(l.what + ": undefined dtype");
  }
  return t;
}

// INT4 and UINT4 (IR version 10): two values a byte, the first in the low
// bits, read into int8 and uint8, whose operators (DequantizeLinear above
// all) give them the same meaning.
Result<Tensor> read_4bit(Context& ctx, const onnx::TensorProto& tp, const std::string& what) {
  const bool is_signed = tp.data_type() == kOnnxInt4;
  ctx.four_bit.insert(tp.name());
  TensorLayout values;
  values.what = what;
  values.dtype = is_signed ? DType::kInt8 : DType::kUInt8;
  for (int64_t d : tp.dims()) {
    if (d < 0) return corrupt_data(what + ": negative dimension " + std::to_string(d));
    if (d != 0 && values.numel > (int64_t{1} << 48) / d)
      return corrupt_data(what + ": its shape is too large");
    values.shape.push_back(d);
    values.numel *= d;
  }
  TensorLayout packed = values;
  packed.dtype = DType::kUInt8;
  packed.numel = (values.numel + 1) / 2;
  packed.shape = {packed.numel};
  packed.bytes = static_cast<size_t>(packed.numel);
  Tensor bytes;
  if (tp.data_location() == onnx::TensorProto::EXTERNAL) {
    BP_ASSIGN_OR_RETURN(bytes, read_external(ctx, tp, packed, nullptr));
  } else if (auto in_model = ctx.raw_in_model.find(&tp); in_model != ctx.raw_in_model.end()) {
    if (in_model->second.size != packed.bytes)
      return packed.mismatch("raw_data", in_model->second.size, true);
    bytes = Tensor::copy_of(DType::kUInt8, packed.shape, ctx.model_bytes + in_model->second.offset);
  } else if (tp.has_raw_data()) {
    if (tp.raw_data().size() != packed.bytes)
      return packed.mismatch("raw_data", tp.raw_data().size(), true);
    bytes = Tensor::copy_of(DType::kUInt8, packed.shape, tp.raw_data().data());
  } else {
    return unsupported(what + ": 4-bit values are read from raw_data or external data only");
  }
  Tensor t(values.dtype, values.shape);
  const uint8_t* in = bytes.data_as<uint8_t>();
  uint8_t* out = t.data_as<uint8_t>();
  for (int64_t i = 0; i < values.numel; ++i) {
    const int v = (in[i / 2] >> (4 * (i % 2))) & 0xf;
    out[i] = static_cast<uint8_t>(is_signed && v >= 8 ? v - 16 : v);
  }
  return t;
}

// `block`: where to put the ConstantBlock the bytes are kept in, if they
// are large and come from a mapped file; null for no block.
Result<Tensor> convert_tensor(Context& ctx, const onnx::TensorProto& tp, const std::string& what,
                              std::shared_ptr<ConstantBlock>* block = nullptr) {
  if (tp.data_type() == kOnnxUInt4 || tp.data_type() == kOnnxInt4) return read_4bit(ctx, tp, what);
  BP_ASSIGN_OR_RETURN(TensorLayout layout, tensor_layout(tp, what));
  if (tp.data_location() == onnx::TensorProto::EXTERNAL)
    return read_external(ctx, tp, layout, block);
  if (auto in_model = ctx.raw_in_model.find(&tp); in_model != ctx.raw_in_model.end()) {
    const ByteRange r = in_model->second;
    if (r.size != layout.bytes) return layout.mismatch("raw_data", r.size, true);
    if (ctx.model_file == nullptr)
      return Tensor::copy_of(layout.dtype, layout.shape, ctx.model_bytes + r.offset);
    if (block != nullptr && r.size >= kBlockBytes) {
      BP_ASSIGN_OR_RETURN(*block, ConstantBlock::copy(ctx.model_file, r.offset, r.size));
      return Tensor::view(layout.dtype, layout.shape, (*block)->data(), *block);
    }
    // A small weight: copied, and the file's pages it lay in dropped.
    Tensor t = Tensor::copy_of(layout.dtype, layout.shape, ctx.model_bytes + r.offset);
    ctx.model_file->release(r.offset, r.size);
    return t;
  }
  if (tp.has_raw_data()) {
    const std::string& raw = tp.raw_data();
    if (raw.size() != layout.bytes) return layout.mismatch("raw_data", raw.size(), true);
    // Tensor::copy_of keeps the bytes 64-byte aligned; the proto's string is not.
    return Tensor::copy_of(layout.dtype, layout.shape, raw.data());
  }
  return read_typed_fields(tp, layout);
}

// The tensor type inside a sequence or optional type, setting `v.kind`.
Result<const onnx::TypeProto::Tensor*> host_value_type(const onnx::TypeProto& type, Value& v,
                                                       const std::string& what) {
  auto tensor_of_sequence = [&](const onnx::TypeProto& seq) -> const onnx::TypeProto::Tensor* {
    if (seq.value_case() != onnx::TypeProto::kSequenceType) return nullptr;
    const onnx::TypeProto& elem = seq.sequence_type().elem_type();
    return elem.value_case() == onnx::TypeProto::kTensorType ? &elem.tensor_type() : nullptr;
  };
  if (const onnx::TypeProto::Tensor* t = tensor_of_sequence(type)) {
    v.kind = ValueKind::kSequence;
    return t;
  }
  if (type.value_case() == onnx::TypeProto::kOptionalType) {
    const onnx::TypeProto& elem = type.optional_type().elem_type();
    if (elem.value_case() == onnx::TypeProto::kTensorType) {
      v.kind = ValueKind::kOptionalTensor;
      return &elem.tensor_type();
    }
    if (const onnx::TypeProto::Tensor* t = tensor_of_sequence(elem)) {
      v.kind = ValueKind::kOptionalSequence;
      return t;
    }
  }
  return unsupported(what +
                     " is neither a tensor, a sequence of tensors nor an optional of one "
                     "(maps and sparse tensors are not supported)");
}

Status convert_value_type(const onnx::ValueInfoProto& vi, Value& v, const std::string& what) {
  // A type left empty says nothing (exporters write untyped body outputs and
  // value_info): the value's type comes from what produces it.
  if (!vi.has_type() || vi.type().value_case() == onnx::TypeProto::VALUE_NOT_SET)
    return ok_status();
  const onnx::TypeProto& type = vi.type();
  const onnx::TypeProto::Tensor* tensor_type = &type.tensor_type();
  if (type.value_case() != onnx::TypeProto::kTensorType) {
    BP_ASSIGN_OR_RETURN(tensor_type, host_value_type(type, v, what));
    // An element's shape is not the value's: only the dtype is kept.
    if (tensor_type->elem_type() != onnx::TensorProto::UNDEFINED &&
        !to_dtype(tensor_type->elem_type(), &v.dtype))
      return unsupported_dtype(what, tensor_type->elem_type());
    return ok_status();
  }
  const onnx::TypeProto::Tensor& tt = *tensor_type;
  if (tt.elem_type() != onnx::TensorProto::UNDEFINED) {
    if (!to_dtype(tt.elem_type(), &v.dtype)) return unsupported_dtype(what, tt.elem_type());
  }
  if (tt.has_shape()) {
    v.has_shape = true;
    v.shape.clear();
    v.dim_params.clear();
    for (const auto& d : tt.shape().dim()) {
      if (d.value_case() == onnx::TensorShapeProto::Dimension::kDimValue) {
        if (d.dim_value() < 0)
          return corrupt_data(what + ": negative dimension " + std::to_string(d.dim_value()));
        v.shape.push_back(d.dim_value());
        v.dim_params.emplace_back();
      } else {
        v.shape.push_back(-1);
        v.dim_params.push_back(d.value_case() == onnx::TensorShapeProto::Dimension::kDimParam
                                   ? d.dim_param()
                                   : std::string());
      }
    }
  }
  return ok_status();
}

Result<Attribute> convert_attribute(Context& ctx, const onnx::AttributeProto& ap,
                                    const std::string& where) {
  Attribute a;
  a.name = ap.name();
  const std::string what = where + ": attribute '" + ap.name() + "'";
  if (!ap.ref_attr_name().empty())
    return unsupported(what + " refers to a function attribute, which is not supported");
  switch (ap.type()) {
    case onnx::AttributeProto::FLOAT:
      a.type = AttrType::kFloat;
      a.f = ap.f();
      break;
    case onnx::AttributeProto::INT:
      a.type = AttrType::kInt;
      a.i = ap.i();
      break;
    case onnx::AttributeProto::STRING:
      a.type = AttrType::kString;
      a.s = ap.s();
      break;
    case onnx::AttributeProto::FLOATS:
      a.type = AttrType::kFloats;
      a.floats.assign(ap.floats().begin(), ap.floats().end());
      break;
    case onnx::AttributeProto::INTS:
      a.type = AttrType::kInts;
      a.ints.assign(ap.ints().begin(), ap.ints().end());
      break;
    case onnx::AttributeProto::STRINGS:
      a.type = AttrType::kStrings;
      a.strings.assign(ap.strings().begin(), ap.strings().end());
      break;
    case onnx::AttributeProto::TENSOR: {
      a.type = AttrType::kTensor;
      BP_ASSIGN_OR_RETURN(a.t, convert_tensor(ctx, ap.t(), what));
      break;
    }
    case onnx::AttributeProto::GRAPH: {
      a.type = AttrType::kGraph;
      BP_ASSIGN_OR_RETURN(a.g, convert_subgraph(ctx, ap.g(), what));
      break;
    }
    case onnx::AttributeProto::GRAPHS: {
      a.type = AttrType::kGraphs;
      for (int k = 0; k < ap.graphs_size(); ++k) {
        BP_ASSIGN_OR_RETURN(
            std::shared_ptr<Graph> body,
            convert_subgraph(ctx, ap.graphs(k), what + " graph " + std::to_string(k)));
        a.graphs.push_back(std::move(body));
      }
      break;
    }
    case onnx::AttributeProto::TYPE_PROTO: {
      a.type = AttrType::kTypeProto;
      Value v;
      if (ap.tp().value_case() == onnx::TypeProto::kTensorType) {
        if (!to_dtype(ap.tp().tensor_type().elem_type(), &v.dtype))
          return unsupported_dtype(what, ap.tp().tensor_type().elem_type());
      } else {
        BP_ASSIGN_OR_RETURN(const onnx::TypeProto::Tensor* t, host_value_type(ap.tp(), v, what));
        if (!to_dtype(t->elem_type(), &v.dtype)) return unsupported_dtype(what, t->elem_type());
      }
      a.i = static_cast<int64_t>(v.kind);
      a.ints = {static_cast<int64_t>(v.dtype)};
      break;
    }
    case onnx::AttributeProto::UNDEFINED:
      return corrupt_data(what + " has no type");
    default:
      return unsupported(what + " has type " + onnx::AttributeProto::AttributeType_Name(ap.type()) +
                         ", which is not supported (sparse tensors and type protos)");
  }
  return a;
}

// A Constant node's payload as a tensor.
Result<Tensor> constant_node_value(Context& ctx, const onnx::NodeProto& np,
                                   const std::string& where) {
  if (np.attribute_size() != 1)
    return invalid_argument(where + ": expected exactly one value attribute, got " +
                            std::to_string(np.attribute_size()));
  const onnx::AttributeProto& ap = np.attribute(0);
  const std::string what = where + ": attribute '" + ap.name() + "'";
  auto expect = [&](onnx::AttributeProto::AttributeType t) -> Status {
    if (ap.type() != t)
      return invalid_argument(what + " has type " +
                              onnx::AttributeProto::AttributeType_Name(ap.type()) + ", expected " +
                              onnx::AttributeProto::AttributeType_Name(t));
    return ok_status();
  };
  const std::string& n = ap.name();
  if (n == "value") {
    BP_RETURN_IF_ERROR(expect(onnx::AttributeProto::TENSOR));
    return convert_tensor(ctx, ap.t(), what);
  }
  if (n == "value_float") {
    BP_RETURN_IF_ERROR(expect(onnx::AttributeProto::FLOAT));
    float f = ap.f();
    return Tensor::copy_of(DType::kFloat32, {}, &f);
  }
  if (n == "value_floats") {
    BP_RETURN_IF_ERROR(expect(onnx::AttributeProto::FLOATS));
    return Tensor::copy_of(DType::kFloat32, {ap.floats_size()}, ap.floats().data());
  }
  if (n == "value_int") {
    BP_RETURN_IF_ERROR(expect(onnx::AttributeProto::INT));
    int64_t i = ap.i();
    return Tensor::copy_of(DType::kInt64, {}, &i);
  }
  if (n == "value_ints") {
    BP_RETURN_IF_ERROR(expect(onnx::AttributeProto::INTS));
    return Tensor::copy_of(DType::kInt64, {ap.ints_size()}, ap.ints().data());
  }
  if (n == "value_string" || n == "value_strings" || n == "sparse_value")
    return unsupported(what + ": string and sparse constants are not supported");
  return invalid_argument(what + " is not a Constant value attribute");
}

Status add_named(Graph& g, Value v, const std::string& defined_by, int* id) {
  if (v.name.empty()) return invalid_argument(defined_by + " defines a value with an empty name");
  if (g.find_value(v.name) >= 0)
    return invalid_argument("duplicate value name '" + v.name + "' (" + defined_by +
                            " redefines it)");
  *id = g.add_value(std::move(v));
  return ok_status();
}

Status read_opsets(const onnx::ModelProto& model, Graph& g) {
  for (const auto& os : model.opset_import()) {
    std::string domain = os.domain() == "ai.onnx" ? "" : os.domain();
    if (domain.empty() && (os.version() < kMinOpset || os.version() > kMaxOpset))
      return Status(StatusCode::kVersionMismatch,
                    "opset " + std::to_string(os.version()) +
                        " of the default ONNX domain is not supported (supported: " +
                        std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + ")");
    g.opsets[domain] = os.version();
  }
  return ok_status();
}

// A graph input whose initializer is its default: the declared type must
// agree with the initializer; what the declaration leaves open, the
// initializer gives.
Status add_defaulted_input(const onnx::ValueInfoProto& vi, Tensor initializer, Graph& g) {
  const std::string what = "graph input '" + vi.name() + "'";
  Value v;
  v.name = vi.name();
  BP_RETURN_IF_ERROR(convert_value_type(vi, v, what));
  if (v.kind != ValueKind::kTensor)
    return invalid_argument(what + " has an initializer but is not a tensor");
  if (v.dtype != DType::kUndefined && v.dtype != initializer.dtype())
    return invalid_argument(what + " is declared " + dtype_name(v.dtype) +
                            " but its initializer is " + dtype_name(initializer.dtype()));
  v.dtype = initializer.dtype();
  if (!v.has_shape) {
    v.has_shape = true;
    v.shape = initializer.shape();
    v.dim_params.assign(v.shape.size(), "");
  }
  bool fits = v.shape.size() == initializer.shape().size();
  for (size_t d = 0; fits && d < v.shape.size(); ++d)
    fits = v.shape[d] < 0 || v.shape[d] == initializer.shape()[d];
  if (!fits)
    return invalid_argument(what + " is declared with shape " + shape_to_string(v.shape) +
                            " but its initializer has shape " +
                            shape_to_string(initializer.shape()));
  int id;
  BP_RETURN_IF_ERROR(add_named(g, std::move(v), "graph input", &id));
  g.inputs.push_back(id);
  g.input_defaults[vi.name()] = std::move(initializer);
  return ok_status();
}

Status read_initializers_and_inputs(Context& ctx, const onnx::GraphProto& gp, Graph& g) {
  // From IR version 4 on, an initializer listed among the main graph's
  // inputs is that input's default, which a feed may override (as ONNX
  // Runtime reads it). Before, and in bodies, it is a constant.
  const bool overridable = ctx.scope == nullptr && ctx.ir_version >= 4;
  std::set<std::string> input_names;
  for (const auto& vi : gp.input())
    if (!input_names.insert(vi.name()).second)
      return invalid_argument("duplicate value name '" + vi.name() + "' (two graph inputs)");
  std::map<std::string, Tensor> defaults;
  for (const auto& tp : gp.initializer()) {
    const std::string what = "initializer '" + tp.name() + "'";
    if (tp.name().empty()) return invalid_argument("an initializer has no name");
    if (g.find_value(tp.name()) >= 0 || defaults.count(tp.name()))
      return invalid_argument("duplicate value name '" + tp.name() + "' (two initializers)");
    std::shared_ptr<ConstantBlock> block;
    BP_ASSIGN_OR_RETURN(Tensor t, convert_tensor(ctx, tp, what, &block));
    if (overridable && input_names.count(tp.name())) {
      defaults.emplace(tp.name(), std::move(t));
      continue;
    }
    g.add_constant(tp.name(), std::move(t));
    if (block != nullptr) g.constant_blocks[tp.name()] = block;
  }
  for (const auto& vi : gp.input()) {
    auto d = defaults.find(vi.name());
    if (d != defaults.end()) {
      BP_RETURN_IF_ERROR(add_defaulted_input(vi, std::move(d->second), g));
      continue;
    }
    const int existing = g.find_value(vi.name());
    if (existing >= 0) {
      // Initializer with a declared type: the declaration must agree with the data.
      Value declared;
      BP_RETURN_IF_ERROR(convert_value_type(vi, declared, "graph input '" + vi.name() + "'"));
      const Value& c = g.values[existing];
      if (declared.dtype != DType::kUndefined && declared.dtype != c.dtype)
        return invalid_argument("graph input '" + vi.name() + "' is declared " +
                                dtype_name(declared.dtype) + " but its initializer is " +
                                dtype_name(c.dtype));
      continue;
    }
    Value v;
    v.name = vi.name();
    BP_RETURN_IF_ERROR(convert_value_type(vi, v, "graph input '" + vi.name() + "'"));
    int id;
    BP_RETURN_IF_ERROR(add_named(g, std::move(v), "graph input", &id));
    g.inputs.push_back(id);
  }

  return ok_status();
}

// Nodes as they are named in messages ("<op_type>_<k>" when unnamed).
struct NodeNames {
  std::vector<std::string> names;
  std::vector<bool> is_constant_node;  // Constant nodes become constants
};

// Every node output (and Constant node) becomes a value first, so node
// inputs resolve whatever order the file lists the nodes in.
Result<NodeNames> declare_node_outputs(Context& ctx, const onnx::GraphProto& gp, Graph& g) {
  NodeNames nn;
  std::vector<std::string>& node_names = nn.names;
  std::vector<bool>& is_constant_node = nn.is_constant_node;
  node_names.resize(gp.node_size());
  is_constant_node.assign(gp.node_size(), false);
  for (int k = 0; k < gp.node_size(); ++k) {
    const onnx::NodeProto& np = gp.node(k);
    node_names[k] = np.name().empty() ? np.op_type() + "_" + std::to_string(k) : np.name();
    const std::string domain = np.domain() == "ai.onnx" ? "" : np.domain();
    const std::string where = "node '" + node_names[k] + "' (" + np.op_type() + ")";
    if (np.op_type().empty()) return invalid_argument(where + ": node has no op_type");
    if (!g.opsets.count(domain))
      return invalid_argument(where + ": domain '" + domain + "' has no opset_import entry");
    if (domain.empty() && np.op_type() == "Constant") {
      if (np.output_size() != 1 || np.output(0).empty())
        return invalid_argument(where + ": a Constant has exactly one output");
      BP_ASSIGN_OR_RETURN(Tensor t, constant_node_value(ctx, np, where));
      if (g.find_value(np.output(0)) >= 0)
        return invalid_argument(where + ": duplicate value name '" + np.output(0) + "'");
      g.add_constant(np.output(0), std::move(t));
      is_constant_node[k] = true;
      continue;
    }
    for (const std::string& out : np.output()) {
      if (out.empty()) continue;
      Value v;
      v.name = out;
      int id;
      BP_RETURN_IF_ERROR(add_named(g, std::move(v), where, &id));
    }
  }
  return nn;
}

// A node with bodies reads what they capture: those values become its
// implicit inputs (Node::implicit_inputs), each once, after the formal ones.
void add_implicit_inputs(Context& ctx, Graph& g, Node& node) {
  std::vector<int> implicit;
  for (const Attribute& a : node.attributes) {
    std::vector<const Graph*> bodies;
    if (a.g) bodies.push_back(a.g.get());
    for (const auto& b : a.graphs) bodies.push_back(b.get());
    for (const Graph* body : bodies)
      for (size_t k = body->inputs.size() - body->captured; k < body->inputs.size(); ++k) {
        const int id = find_in_scope(ctx, g, body->values[body->inputs[k]].name);
        if (id >= 0 && std::find(implicit.begin(), implicit.end(), id) == implicit.end())
          implicit.push_back(id);
      }
  }
  node.inputs.insert(node.inputs.end(), implicit.begin(), implicit.end());
  node.implicit_inputs = implicit.size();
}

Status read_nodes(Context& ctx, const onnx::GraphProto& gp, const NodeNames& nn, Graph& g) {
  const std::vector<std::string>& node_names = nn.names;
  const std::vector<bool>& is_constant_node = nn.is_constant_node;
  for (int k = 0; k < gp.node_size(); ++k) {
    if (is_constant_node[k]) continue;
    const onnx::NodeProto& np = gp.node(k);
    Node node;
    node.name = node_names[k];
    node.op_type = np.op_type();
    node.domain = np.domain() == "ai.onnx" ? "" : np.domain();
    const std::string where = node.describe();
    for (const std::string& in : np.input()) {
      if (in.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      int id = find_in_scope(ctx, g, in);
      if (id < 0)
        return invalid_argument(where + ": missing input '" + in +
                                "': no node, initializer or graph input defines it");
      node.inputs.push_back(id);
    }
    for (const std::string& out : np.output())
      node.outputs.push_back(out.empty() ? -1 : g.find_value(out));
    std::set<std::string> seen;
    for (const auto& ap : np.attribute()) {
      if (!seen.insert(ap.name()).second)
        return invalid_argument(where + ": attribute '" + ap.name() + "' is given twice");
      BP_ASSIGN_OR_RETURN(Attribute a, convert_attribute(ctx, ap, where));
      node.attributes.push_back(std::move(a));
    }
    add_implicit_inputs(ctx, g, node);
    g.nodes.push_back(std::move(node));
  }

  return ok_status();
}

Status read_outputs(Context& ctx, const onnx::GraphProto& gp, Graph& g) {
  // value_info: dtype/shape hints for intermediate values, checked by infer_shapes.
  for (const auto& vi : gp.value_info()) {
    int id = g.find_value(vi.name());
    if (id < 0 || g.values[id].is_constant()) continue;  // unused or already known exactly
    Value hint = g.values[id];
    BP_RETURN_IF_ERROR(convert_value_type(vi, hint, "value_info '" + vi.name() + "'"));
    g.values[id] = std::move(hint);
  }
  std::set<std::string> output_names;
  for (const auto& vi : gp.output()) {
    int id = find_in_scope(ctx, g, vi.name());
    if (id < 0)
      return invalid_argument("graph output '" + vi.name() +
                              "' is not produced by any node, initializer or graph input");
    if (!output_names.insert(vi.name()).second)
      return invalid_argument("graph output '" + vi.name() + "' is listed twice");
    Value& v = g.values[id];
    if (v.is_constant()) {
      Value declared;
      BP_RETURN_IF_ERROR(convert_value_type(vi, declared, "graph output '" + vi.name() + "'"));
      if (declared.dtype != DType::kUndefined && declared.dtype != v.dtype)
        return invalid_argument("graph output '" + vi.name() + "' is declared " +
                                dtype_name(declared.dtype) + " but the constant is " +
                                dtype_name(v.dtype));
    } else {
      Value hint = v;
      BP_RETURN_IF_ERROR(convert_value_type(vi, hint, "graph output '" + vi.name() + "'"));
      v = std::move(hint);
    }
    g.outputs.push_back(id);
  }
  if (g.outputs.empty()) return invalid_argument("the graph has no outputs");
  return ok_status();
}

Result<Graph> convert_model(Context& ctx, const onnx::ModelProto& model) {
  if (model.ir_version() <= 0) return corrupt_data("not an ONNX model: ir_version is missing or 0");
  if (!model.has_graph()) return corrupt_data("not an ONNX model: it has no graph");
  if (model.opset_import_size() == 0)
    return corrupt_data("not an ONNX model: it has no opset_import");

  Graph g;
  g.source = ctx.source;
  const onnx::GraphProto& gp = model.graph();
  g.name = gp.name();
  auto meta = std::make_shared<ModelMetadata>();
  meta->producer_name = model.producer_name();
  meta->producer_version = model.producer_version();
  meta->domain = model.domain();
  meta->description = model.doc_string();
  meta->version = model.model_version();
  meta->graph_name = gp.name();
  meta->graph_description = gp.doc_string();
  for (const auto& kv : model.metadata_props()) meta->custom[kv.key()] = kv.value();
  g.metadata = std::move(meta);
  BP_RETURN_IF_ERROR(read_opsets(model, g));
  if (gp.sparse_initializer_size() > 0) return unsupported("sparse initializers are not supported");
  BP_RETURN_IF_ERROR(read_initializers_and_inputs(ctx, gp, g));
  BP_ASSIGN_OR_RETURN(NodeNames names, declare_node_outputs(ctx, gp, g));
  Scope scope;
  scope.graph = &g;
  ctx.scope = &scope;
  BP_RETURN_IF_ERROR(read_nodes(ctx, gp, names, g));
  BP_RETURN_IF_ERROR(read_outputs(ctx, gp, g));
  ctx.scope = nullptr;
  BP_RETURN_IF_ERROR(g.topo_sort());
  return g;
}

// A control-flow body (If's branches, Loop's and Scan's body) as a graph of
// its own: its formal inputs, then the enclosing-scope values it reads as
// captured inputs (Graph::captured). Errors name the attribute and node.
Result<std::shared_ptr<Graph>> convert_subgraph(Context& ctx, const onnx::GraphProto& gp,
                                                const std::string& what) {
  // Bodies nest; a model could nest them without end.
  constexpr int kMaxDepth = 64;
  int depth = 0;
  for (Scope* s = ctx.scope; s != nullptr; s = s->parent) ++depth;
  if (ctx.scope == nullptr) return internal_error(what + ": a body outside any graph");
  if (depth > kMaxDepth)
    return invalid_argument(what + ": bodies nest more than " + std::to_string(kMaxDepth) +
                            " deep");
  auto sub = std::make_shared<Graph>();
  sub->source = ctx.source;
  sub->name = gp.name();
  sub->opsets = ctx.scope->graph->opsets;
  Scope scope;
  scope.parent = ctx.scope;
  scope.graph = sub.get();
  Scope* saved = ctx.scope;
  Status s = [&]() -> Status {
    if (gp.sparse_initializer_size() > 0)
      return unsupported("sparse initializers are not supported");
    BP_RETURN_IF_ERROR(read_initializers_and_inputs(ctx, gp, *sub));
    BP_ASSIGN_OR_RETURN(NodeNames names, declare_node_outputs(ctx, gp, *sub));
    ctx.scope = &scope;
    BP_RETURN_IF_ERROR(read_nodes(ctx, gp, names, *sub));
    return read_outputs(ctx, gp, *sub);
  }();
  ctx.scope = saved;
  BP_RETURN_IF_ERROR(s, what + " (body '" + gp.name() + "')");
  sub->inputs.insert(sub->inputs.end(), scope.captured.begin(), scope.captured.end());
  sub->captured = scope.captured.size();
  BP_RETURN_IF_ERROR(sub->topo_sort(), what + " (body '" + gp.name() + "')");
  return sub;
}

bool parse_model(const void* data, size_t size, onnx::ModelProto& model) {
  ChunkedArrayInputStream stream(data, size);
  google::protobuf::io::CodedInputStream coded(&stream);
  // The default limit has been 64 MB in older protobuf releases.
  coded.SetTotalBytesLimit(INT_MAX);
  return model.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}

// `file`: the mapping `data` lies in, if it is one.
Result<Graph> import_impl(const void* data, size_t size, const std::string& source,
                          const std::string& base_dir, const ir::OpRegistry& registry,
                          std::shared_ptr<const MappedFile> file) {
  if (size == 0) return corrupt_data("not an ONNX model: the file is empty");
  if (size > static_cast<size_t>(INT_MAX))
    return unsupported("the model file is " + std::to_string(size) +
                       " bytes; protobuf cannot parse messages over 2 GB, so store the weights "
                       "as ONNX external data");
  Context ctx;
  ctx.source = source;
  ctx.base_dir = base_dir;
  onnx::ModelProto model;
  // Weights as raw_data stay in `data` and are read from there (wire_split.hpp)
  // when they are most of the model; the rest is parsed as usual.
  std::optional<SplitModel> split = split_raw_data(data, size);
  if (split && split->raw_bytes > split->rest.size() &&
      parse_model(split->rest.data(), split->rest.size(), model) &&
      static_cast<size_t>(model.graph().initializer_size()) == split->raw_data.size()) {
    ctx.model_bytes = static_cast<const unsigned char*>(data);
    ctx.model_file = file;
    for (size_t i = 0; i < split->raw_data.size(); ++i)
      if (split->raw_data[i])
        ctx.raw_in_model.emplace(&model.graph().initializer(static_cast<int>(i)),
                                 *split->raw_data[i]);
  } else {
    model.Clear();
    if (!parse_model(data, size, model))
      return corrupt_data(
          "not a valid ONNX model: protobuf parsing failed (truncated or not ONNX)");
  }
  split.reset();
  BP_RETURN_IF_ERROR(inline_functions(model, registry));
  BP_RETURN_IF_ERROR(adapt_to_opset18(model));
  BP_RETURN_IF_ERROR(rewrite_contrib_ops(model, registry));
  decompose_einsums(model);
  ctx.ir_version = model.ir_version();
  BP_ASSIGN_OR_RETURN(Graph graph, convert_model(ctx, model));
  const auto four_bit = [&](const std::string& name) { return ctx.four_bit.count(name) > 0; };
  BP_RETURN_IF_ERROR(expand_matmul_nbits(graph));
  BP_RETURN_IF_ERROR(blocked_matmuls_to_nbits(graph, four_bit));
  BP_RETURN_IF_ERROR(expand_blocked_dequantize(graph));
  BP_RETURN_IF_ERROR(expand_gather_block_quantized(graph, four_bit));
  if (graph.topo_sort().ok()) ir::merge_common_subexpressions(graph);  // else verify() says why
  return graph;
}

}  // namespace

Result<ir::Graph> import_bytes(const void* data, size_t size, const std::string& source,
                               const std::string& base_dir, const ir::OpRegistry& registry) {
  return import_impl(data, size, source, base_dir, registry, nullptr).with_context(source);
}

Result<ir::Graph> import_file(const std::string& path, const ir::OpRegistry& registry) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) return io_error(path + ": is a directory, not an ONNX model");
  Result<std::shared_ptr<MappedFile>> file = MappedFile::open(path);
  if (!file.ok()) return std::move(file).take_status();  // already names the path
  std::string dir = fs::path(path).parent_path().string();
  Result<ir::Graph> g =
      import_impl((*file)->data(), (*file)->size(), path, dir.empty() ? "." : dir, registry, *file);
  // The model's structure was parsed from these pages; the weights' blocks
  // read the file through them again only if asked.
  (*file)->release(0, (*file)->size());
  return std::move(g).with_context(path);
}

}  // namespace backplane::onnx_import
