#include "npy.hpp"

#include "core/atomic_file.hpp"
#include "core/mapped_file.hpp"

#include <cstring>
#include <memory>
#include <sstream>
#include <vector>

namespace backplane::npy {
namespace {

const char* descr_of(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "<f4";
    case DType::kFloat16:
      return "<f2";
    case DType::kInt8:
      return "|i1";
    case DType::kUInt8:
      return "|u1";
    case DType::kInt32:
      return "<i4";
    case DType::kInt64:
      return "<i8";
    case DType::kBool:
      return "|b1";
    case DType::kUInt16:
      return "<u2";
    case DType::kInt16:
      return "<i2";
    case DType::kFloat64:
      return "<f8";
    case DType::kUInt32:
      return "<u4";
    case DType::kUInt64:
      return "<u8";
    case DType::kBFloat16:  // NumPy has no bfloat16
    case DType::kUndefined:
      break;
  }
  return nullptr;
}

bool dtype_of(const std::string& descr, DType* out) {
  static const struct {
    const char* d;
    DType t;
  } table[] = {{"<f4", DType::kFloat32}, {"<f2", DType::kFloat16}, {"|i1", DType::kInt8},
               {"|u1", DType::kUInt8},   {"<i4", DType::kInt32},   {"<i8", DType::kInt64},
               {"|b1", DType::kBool},    {"<u1", DType::kUInt8},   {"<i1", DType::kInt8},
               {"<b1", DType::kBool},    {"<u2", DType::kUInt16},  {"<i2", DType::kInt16},
               {"<f8", DType::kFloat64}, {"<u4", DType::kUInt32},  {"<u8", DType::kUInt64}};
  for (const auto& e : table)
    if (descr == e.d) {
      *out = e.t;
      return true;
    }
  return false;
}

// Value of 'key' in the header dict, as raw text up to the next top-level comma.
std::string dict_value(const std::string& header, const std::string& key) {
  size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t colon = header.find(':', k);
  if (colon == std::string::npos) return "";
  size_t i = colon + 1;
  while (i < header.size() && header[i] == ' ') ++i;
  if (i < header.size() && header[i] == '(') {
    size_t e = header.find(')', i);
    return e == std::string::npos ? "" : header.substr(i, e - i + 1);
  }
  size_t e = i;
  while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
  std::string v = header.substr(i, e - i);
  while (!v.empty() && v.back() == ' ') v.pop_back();
  if (v.size() >= 2 && (v.front() == '\'' || v.front() == '"')) v = v.substr(1, v.size() - 2);
  return v;
}

}  // namespace

Result<Tensor> read(const std::string& path) {
  BP_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  return parse(path, file->bytes(), file->size());
}

Result<Tensor> parse(const std::string& path, const unsigned char* bytes, size_t size) {
  if (size < 10 || std::memcmp(bytes, "\x93NUMPY", 6) != 0)
    return corrupt_data(path + ": not a .npy file (bad magic)");
  uint64_t header_len = 0;
  size_t pos = 8;
  if (bytes[6] == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    pos = 10;
  } else if (bytes[6] == 2 || bytes[6] == 3) {
    if (size < 12) return corrupt_data(path + ": truncated header");
    header_len =
        bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<uint32_t>(bytes[11]) << 24);
    pos = 12;
  } else {
    return corrupt_data(path + ": unsupported .npy version " + std::to_string(bytes[6]));
  }
  if (header_len > (1u << 20) || header_len > size - pos)
    return corrupt_data(path + ": header length " + std::to_string(header_len) +
                        " exceeds the file");
  const std::string header(reinterpret_cast<const char*>(bytes + pos), header_len);
  const size_t data_start = pos + header_len;

  DType dtype;
  std::string descr = dict_value(header, "descr");
  if (!dtype_of(descr, &dtype)) return unsupported(path + ": unsupported dtype '" + descr + "'");
  if (dict_value(header, "fortran_order") == "True")
    return unsupported(path + ": Fortran-ordered arrays are not supported");
  std::string shape_text = dict_value(header, "shape");
  if (shape_text.empty() || shape_text.front() != '(')
    return corrupt_data(path + ": header has no shape");
  Shape shape;
  std::stringstream ss(shape_text.substr(1, shape_text.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    // A whole integer, nothing after it but spaces (stoll alone would read
    // "429TTT" as 429).
    const size_t z = item.find_last_not_of(' ');
    const std::string digits = item.substr(a, z + 1 - a);
    size_t used = 0;
    long long d = -1;
    try {
      d = std::stoll(digits, &used);
    } catch (...) {
      used = 0;
    }
    if (used == 0 || used != digits.size())
      return corrupt_data(path + ": bad shape '" + shape_text + "'");
    if (d < 0) return corrupt_data(path + ": negative dimension in shape");
    shape.push_back(d);
  }
  // The size the header claims is checked against the bytes present before
  // anything is allocated: a small file cannot make us allocate gigabytes.
  size_t data_bytes = 0;
  if (!checked_size_bytes(shape, dtype, &data_bytes))
    return corrupt_data(path + ": shape " + shape_to_string(shape) + " is too large");
  const uint64_t present = size - data_start;
  if (data_bytes > present)
    return corrupt_data(path + ": data is shorter than shape " + shape_to_string(shape) +
                        " needs (" + std::to_string(present) + " of " + std::to_string(data_bytes) +
                        " bytes)");
  if (data_bytes < present)
    return corrupt_data(path + ": " + std::to_string(present - data_bytes) +
                        " bytes of trailing data after the " + shape_to_string(shape) + " array");
  Tensor t(dtype, shape);
  if (data_bytes > 0) std::memcpy(t.data(), bytes + data_start, data_bytes);
  return t;
}

Status write(const std::string& path, const Tensor& tensor) {
  const char* descr = descr_of(tensor.dtype());
  if (descr == nullptr)
    return unsupported(path + ": cannot write dtype " + dtype_name(tensor.dtype()));
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape().size(); ++i)
    shape += std::to_string(tensor.shape()[i]) + ", ";
  if (tensor.shape().size() > 1) shape.resize(shape.size() - 1), shape.back() = ')';
  else if (tensor.shape().size() == 1)
    shape.resize(shape.size() - 1), shape.back() = ',', shape += ")";
  else shape += ")";
  std::string header =
      std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  BP_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  BP_RETURN_IF_ERROR(out.write("\x93NUMPY\x01\x00", 8));
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                          static_cast<unsigned char>(header.size() >> 8)};
  BP_RETURN_IF_ERROR(out.write(len, 2));
  BP_RETURN_IF_ERROR(out.write(header));
  BP_RETURN_IF_ERROR(out.write(tensor.data(), tensor.size_bytes()));
  BP_RETURN_IF_ERROR(out.commit());
  return ok_status();
}

}  // namespace backplane::npy
