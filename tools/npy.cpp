#include "npy.hpp"

#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace backplane::npy {
namespace {

const char* descr_of(DType d) {
  switch (d) {
    case DType::kFloat32: return "<f4";
    case DType::kFloat16: return "<f2";
    case DType::kInt8: return "|i1";
    case DType::kUInt8: return "|u1";
    case DType::kInt32: return "<i4";
    case DType::kInt64: return "<i8";
    case DType::kBool: return "|b1";
    case DType::kUndefined: break;
  }
  return nullptr;
}

bool dtype_of(const std::string& descr, DType* out) {
  static const struct {
    const char* d;
    DType t;
  } table[] = {{"<f4", DType::kFloat32}, {"<f2", DType::kFloat16}, {"|i1", DType::kInt8}, {"|u1", DType::kUInt8},
               {"<i4", DType::kInt32},   {"<i8", DType::kInt64},   {"|b1", DType::kBool},  {"<u1", DType::kUInt8},
               {"<i1", DType::kInt8},    {"<b1", DType::kBool}};
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
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(path + ": cannot open: " + std::strerror(errno));
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return corrupt_data(path + ": not a .npy file (bad magic)");
  uint32_t header_len = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    if (!in.read(reinterpret_cast<char*>(b), 2)) return corrupt_data(path + ": truncated header");
    header_len = b[0] | (b[1] << 8);
  } else if (magic[6] == 2 || magic[6] == 3) {
    unsigned char b[4];
    if (!in.read(reinterpret_cast<char*>(b), 4)) return corrupt_data(path + ": truncated header");
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  } else {
    return corrupt_data(path + ": unsupported .npy version " + std::to_string(magic[6]));
  }
  if (header_len > (1u << 20)) return corrupt_data(path + ": header too large");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len)) return corrupt_data(path + ": truncated header");

  DType dtype;
  std::string descr = dict_value(header, "descr");
  if (!dtype_of(descr, &dtype)) return unsupported(path + ": unsupported dtype '" + descr + "'");
  if (dict_value(header, "fortran_order") == "True")
    return unsupported(path + ": Fortran-ordered arrays are not supported");
  std::string shape_text = dict_value(header, "shape");
  if (shape_text.empty() || shape_text.front() != '(') return corrupt_data(path + ": header has no shape");
  Shape shape;
  std::stringstream ss(shape_text.substr(1, shape_text.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(' ');
    if (a == std::string::npos) continue;
    try {
      long long d = std::stoll(item.substr(a));
      if (d < 0) return corrupt_data(path + ": negative dimension in shape");
      shape.push_back(d);
    } catch (...) {
      return corrupt_data(path + ": bad shape '" + shape_text + "'");
    }
  }
  Tensor t(dtype, shape);
  if (t.size_bytes() > 0 && !in.read(static_cast<char*>(t.data()), static_cast<std::streamsize>(t.size_bytes())))
    return corrupt_data(path + ": data is shorter than shape " + shape_to_string(shape) + " needs");
  return t;
}

Status write(const std::string& path, const Tensor& tensor) {
  const char* descr = descr_of(tensor.dtype());
  if (descr == nullptr) return unsupported(path + ": cannot write dtype " + dtype_name(tensor.dtype()));
  std::string shape = "(";
  for (size_t i = 0; i < tensor.shape().size(); ++i) shape += std::to_string(tensor.shape()[i]) + ", ";
  if (tensor.shape().size() > 1) shape.resize(shape.size() - 1), shape.back() = ')';
  else if (tensor.shape().size() == 1) shape.resize(shape.size() - 1), shape.back() = ',', shape += ")";
  else shape += ")";
  std::string header = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return io_error(path + ": cannot create: " + std::strerror(errno));
  out.write("\x93NUMPY\x01\x00", 8);
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                          static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<char*>(len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(tensor.data()), static_cast<std::streamsize>(tensor.size_bytes()));
  if (!out) return io_error(path + ": write failed");
  return ok_status();
}

}  // namespace backplane::npy
