// matmul_nbits.cpp — MatMulNBits as a MatMul by its dequantized weights, and
// blocked DequantizeLinear of constants as their values (matmul_nbits.hpp).
#include "onnx/matmul_nbits.hpp"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace backplane::onnx_import {
namespace {

// Value `k` of `bits` bits from bytes packed lowest bits first.
inline uint32_t unpack(const uint8_t* bytes, int64_t k, int bits) {
  const int64_t bit = k * bits;
  return (bytes[bit / 8] >> (bit % 8)) & ((1u << bits) - 1u);
}

struct NBits {
  int64_t k = 0, n = 0, bits = 4, block = 0, blocks = 0;
};

Result<NBits> read_attributes(const ir::Node& node) {
  NBits p;
  BP_ASSIGN_OR_RETURN(p.k, node.attr_int("K", 0));
  BP_ASSIGN_OR_RETURN(p.n, node.attr_int("N", 0));
  BP_ASSIGN_OR_RETURN(p.bits, node.attr_int("bits", 4));
  BP_ASSIGN_OR_RETURN(p.block, node.attr_int("block_size", 0));
  if (p.k < 1 || p.n < 1 || p.block < 1)
    return invalid_argument("needs positive K, N and block_size");
  if (p.bits != 2 && p.bits != 4 && p.bits != 8)
    return unsupported("bits " + std::to_string(p.bits) + " (2, 4 and 8 are supported)");
  if ((p.block * p.bits) % 8 != 0)
    return unsupported("a block of " + std::to_string(p.block) + " values of " +
                       std::to_string(p.bits) + " bits is not whole bytes");
  p.blocks = (p.k + p.block - 1) / p.block;
  if (p.n > (int64_t{1} << 40) / p.k)
    return invalid_argument("K·N of " + std::to_string(p.k) + "·" + std::to_string(p.n) +
                            " is too large");
  return p;
}

// The constant input `i` of `node`, of `dtype` and `numel` elements.
Result<const Tensor*> constant_input(const ir::Graph& g, const ir::Node& node, size_t i,
                                     const char* what, DType dtype, int64_t numel) {
  const Tensor* t = node.has_input(i) ? g.constant(node.inputs[i]) : nullptr;
  if (t == nullptr) return unsupported(std::string(what) + " must be a constant (an initializer)");
  if (t->dtype() != dtype || t->numel() != numel)
    return invalid_argument(std::string(what) + " is " + dtype_name(t->dtype()) + std::string(" ") +
                            shape_to_string(t->shape()) + ", expected " + dtype_name(dtype) +
                            " of " + std::to_string(numel) + " elements");
  return t;
}

// W [K, N] float32 of node's constant weights, scales and zero points.
Result<Tensor> dequantized(const ir::Graph& g, const ir::Node& node, const NBits& p) {
  const int64_t blob = p.block * p.bits / 8;
  BP_ASSIGN_OR_RETURN(const Tensor* b,
                      constant_input(g, node, 1, "B", DType::kUInt8, p.n * p.blocks * blob));
  BP_ASSIGN_OR_RETURN(const Tensor* scales,
                      constant_input(g, node, 2, "scales", DType::kFloat32, p.n * p.blocks));
  const Tensor* zp = nullptr;
  const int64_t zp_row = (p.blocks * p.bits + 7) / 8;  // packed bytes per column
  if (node.has_input(3)) {
    const Tensor* z = g.constant(node.inputs[3]);
    const DType type =
        z != nullptr && z->dtype() == DType::kFloat32 ? DType::kFloat32 : DType::kUInt8;
    BP_ASSIGN_OR_RETURN(zp, constant_input(g, node, 3, "zero_points", type,
                                           type == DType::kUInt8 ? p.n * zp_row : p.n * p.blocks));
  }
  Tensor w(DType::kFloat32, {p.k, p.n});
  float* out = w.data_as<float>();
  const uint8_t* q = b->data_as<uint8_t>();
  const float* s = scales->data_as<float>();
  const float fallback = static_cast<float>(1u << (p.bits - 1));
  const int bits = static_cast<int>(p.bits);
  // Columns are decoded kTile at a time into `tile` (each column's values
  // contiguous, as B stores them), then written row by row: W is [K, N].
  constexpr int64_t kTile = 16;
  std::vector<float> tile(static_cast<size_t>(kTile * p.k));
  for (int64_t n0 = 0; n0 < p.n; n0 += kTile) {
    const int64_t width = std::min(kTile, p.n - n0);
    for (int64_t c = 0; c < width; ++c) {
      const int64_t n = n0 + c;
      const uint8_t* column = q + n * p.blocks * blob;
      float* values = tile.data() + c * p.k;
      for (int64_t block = 0; block < p.blocks; ++block) {
        float zero = fallback;
        if (zp != nullptr && zp->dtype() == DType::kUInt8)
          zero = static_cast<float>(unpack(zp->data_as<uint8_t>() + n * zp_row, block, bits));
        else if (zp != nullptr)
          zero = zp->data_as<float>()[n * p.blocks + block];
        const float scale = s[n * p.blocks + block];
        const uint8_t* bytes = column + block * blob;
        const int64_t first = block * p.block, count = std::min(p.block, p.k - first);
        for (int64_t j = 0; j < count; ++j)
          values[first + j] = (static_cast<float>(unpack(bytes, j, bits)) - zero) * scale;
      }
    }
    for (int64_t k = 0; k < p.k; ++k)
      for (int64_t c = 0; c < width; ++c) out[k * p.n + n0 + c] = tile[c * p.k + k];
  }
  return w;
}

// Whether `node` is in the form backends take whole (ir/ops_nn.cpp's
// MatMulNBits): 4-bit values in blocks of a power of 2 from 16, constant
// B, scales and (packed uint8) zero points of the sizes K and N give, float32
// A and bias. Its weights then stay 4-bit in memory.
bool runs_whole(const ir::Graph& g, const ir::Node& node, const NBits& p) {
  if (p.bits != 4 || p.block < 16 || (p.block & (p.block - 1)) != 0 || node.has_input(4))
    return false;
  auto is = [&](size_t i, DType dtype, int64_t numel) {
    const Tensor* t = node.has_input(i) ? g.constant(node.inputs[i]) : nullptr;
    return t != nullptr && t->dtype() == dtype && t->numel() == numel;
  };
  const DType a = g.values[node.inputs[0]].dtype;
  if (a != DType::kFloat32 && a != DType::kUndefined) return false;
  if (!is(1, DType::kUInt8, p.n * p.blocks * p.block / 2) ||
      !is(2, DType::kFloat32, p.n * p.blocks) ||
      (node.has_input(3) && !is(3, DType::kUInt8, p.n * ((p.blocks + 1) / 2))))
    return false;
  if (node.has_input(5)) {
    const ir::Value& bias = g.values[node.inputs[5]];
    if ((bias.dtype != DType::kFloat32 && bias.dtype != DType::kUndefined) ||
        (bias.has_shape && bias.shape_is_static() && shape_numel(bias.shape) != p.n))
      return false;
  }
  return true;
}

std::string fresh(const ir::Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.find_value(name) >= 0; ++i) name = base + "_" + std::to_string(i);
  return name;
}

// x at element `i` as a float, for the integer types DequantizeLinear takes.
float element(const Tensor& x, int64_t i) {
  switch (x.dtype()) {
    case DType::kInt8:
      return x.data_as<int8_t>()[i];
    case DType::kUInt8:
      return x.data_as<uint8_t>()[i];
    case DType::kInt16:
      return x.data_as<int16_t>()[i];
    case DType::kUInt16:
      return x.data_as<uint16_t>()[i];
    default:  // kInt32, checked by the caller
      return static_cast<float>(x.data_as<int32_t>()[i]);
  }
}

// Element `at` of int4 or uint4 values (read as int8 and uint8) as a uint4:
// int4 shifted by 8, so that q + 8 less zero + 8 is q less zero.
uint8_t uint4_of(const Tensor& t, int64_t at) {
  return static_cast<uint8_t>(static_cast<int>(element(t, at)) +
                              (t.dtype() == DType::kInt8 ? 8 : 0)) &
         15;
}

bool integer_type(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt16 || t == DType::kUInt16 ||
         t == DType::kInt32;
}

// y = (x - zero point) · scale, each scale and zero point shared by `block`
// consecutive elements along `axis` (`zero` when there is no zero point):
// y float32 of x's shape.
Result<Tensor> dequantize_blocks(const Tensor& x, const Tensor& scale, const Tensor* zp, float zero,
                                 int64_t axis, int64_t block) {
  if (!integer_type(x.dtype()))
    return unsupported(std::string("its quantized input is ") + dtype_name(x.dtype()) +
                       " (8-, 16- and 32-bit integers and 4-bit ones are supported)");
  if (scale.dtype() != DType::kFloat32)
    return unsupported(std::string("its scale is ") + dtype_name(scale.dtype()) +
                       " (float32 is supported)");
  const Shape& dims = x.shape();
  const int64_t rank = static_cast<int64_t>(dims.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return invalid_argument("its axis is outside its input's rank");
  if (block < 1) return invalid_argument("its block_size is not positive");
  Shape want = dims;
  want[static_cast<size_t>(axis)] = (dims[static_cast<size_t>(axis)] + block - 1) / block;
  if (scale.shape() != want || (zp != nullptr && (zp->shape() != want || zp->dtype() != x.dtype())))
    return invalid_argument("its scale (and zero point) must be " + shape_to_string(want) +
                            " for input " + shape_to_string(dims) + " in blocks of " +
                            std::to_string(block) + " (the zero point of the input's type)");
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dims[static_cast<size_t>(d)];
  for (int64_t d = axis + 1; d < rank; ++d) inner *= dims[static_cast<size_t>(d)];
  const int64_t len = dims[static_cast<size_t>(axis)], groups = want[static_cast<size_t>(axis)];
  Tensor y(DType::kFloat32, dims);
  float* out = y.data_as<float>();
  const float* s = scale.data_as<float>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t a = 0; a < len; ++a) {
      const int64_t row = (o * len + a) * inner, srow = (o * groups + a / block) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        const float z = zp != nullptr ? element(*zp, srow + i) : zero;
        out[row + i] = (element(x, row + i) - z) * s[srow + i];
      }
    }
  return y;
}

// A DequantizeLinear's constant input, scale and zero point dequantized.
Result<Tensor> dequantized_blocks(const ir::Graph& g, const ir::Node& node, int64_t block) {
  const Tensor* x = node.has_input(0) ? g.constant(node.inputs[0]) : nullptr;
  const Tensor* scale = node.has_input(1) ? g.constant(node.inputs[1]) : nullptr;
  const Tensor* zp = node.has_input(2) ? g.constant(node.inputs[2]) : nullptr;
  if (x == nullptr || scale == nullptr || (node.has_input(2) && zp == nullptr))
    return unsupported("its input, scale and zero point must be constants (initializers)");
  BP_ASSIGN_OR_RETURN(int64_t axis, node.attr_int("axis", 1));
  return dequantize_blocks(*x, *scale, zp, 0.0f, axis, block);
}

// `packed` [..., n] of uint8 as [..., n·8/bits] values of `bits` bits,
// lowest bits first.
Tensor unpacked(const Tensor& packed, int bits) {
  Shape dims = packed.shape();
  const int64_t per_byte = 8 / bits, n = dims.back();
  dims.back() = n * per_byte;
  Tensor t(DType::kUInt8, dims);
  const uint8_t* in = packed.data_as<uint8_t>();
  uint8_t* out = t.data_as<uint8_t>();
  const int64_t rows = n > 0 ? packed.numel() / n : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < n * per_byte; ++k)
      out[r * n * per_byte + k] = static_cast<uint8_t>(unpack(in + r * n, k, bits));
  return t;
}

// GatherBlockQuantized's table dequantized: uint8 data packs 8/bits values a
// byte along its last axis (the quantized one), zero points packed the same
// way, 2^(bits-1) when absent (MatMulNBits' convention); int4 and uint4 data
// (read as int8 and uint8, `four_bit`) hold one value an element, zero
// points of their type, 0 when absent.
Result<Tensor> dequantized_table(const ir::Graph& g, const ir::Node& node, bool four_bit) {
  const Tensor* data = node.has_input(0) ? g.constant(node.inputs[0]) : nullptr;
  const Tensor* scales = node.has_input(2) ? g.constant(node.inputs[2]) : nullptr;
  const Tensor* zp = node.has_input(3) ? g.constant(node.inputs[3]) : nullptr;
  if (data == nullptr || scales == nullptr || (node.has_input(3) && zp == nullptr))
    return unsupported("its data, scales and zero points must be constants (initializers)");
  const int64_t rank = static_cast<int64_t>(data->shape().size());
  BP_ASSIGN_OR_RETURN(int64_t gather_axis, node.attr_int("gather_axis", 0));
  BP_ASSIGN_OR_RETURN(int64_t quantize_axis, node.attr_int("quantize_axis", 1));
  BP_ASSIGN_OR_RETURN(int64_t block, node.attr_int("block_size", 128));
  BP_ASSIGN_OR_RETURN(int64_t bits, node.attr_int("bits", 4));
  if (quantize_axis < 0) quantize_axis += rank;
  if (gather_axis < 0) gather_axis += rank;
  if (four_bit || data->dtype() != DType::kUInt8) {
    if (bits != 4) return unsupported("4-bit data needs bits 4");
    return dequantize_blocks(*data, *scales, zp, 0.0f, quantize_axis, block);
  }
  if (bits != 2 && bits != 4 && bits != 8)
    return unsupported("bits " + std::to_string(bits) + " (2, 4 and 8 are supported)");
  if (gather_axis != 0 || quantize_axis != rank - 1)
    return unsupported("uint8 data must be gathered on axis 0 and quantized on its last axis");
  const Tensor values = bits == 8 ? data->clone() : unpacked(*data, static_cast<int>(bits));
  std::optional<Tensor> zeros;
  if (zp != nullptr) {
    if (zp->dtype() != DType::kUInt8 || zp->shape().size() != scales->shape().size())
      return invalid_argument("its zero points must be uint8 of the scales' rank");
    zeros = bits == 8 ? zp->clone() : unpacked(*zp, static_cast<int>(bits));
    // Packed rows may end in a spare value: the scales' width counts.
    Shape want = scales->shape();
    if (zeros->shape() != want) {
      if (zeros->shape().back() < want.back())
        return invalid_argument("its zero points are fewer than its scales");
      Tensor cut(DType::kUInt8, want);
      const int64_t from = zeros->shape().back(), to = want.back();
      const int64_t rows = to > 0 ? cut.numel() / to : 0;
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(zeros->data_as<uint8_t>() + r * from, to, cut.data_as<uint8_t>() + r * to);
      zeros = std::move(cut);
    }
  }
  return dequantize_blocks(values, *scales, zeros ? &*zeros : nullptr,
                           static_cast<float>(1 << (bits - 1)), quantize_axis, block);
}

// Sets integer attribute `name` of `node` to `value`, adding it if absent.
void set_int(ir::Node& node, const char* name, int64_t value) {
  for (ir::Attribute& a : node.attributes)
    if (a.name == name) {
      a.type = ir::AttrType::kInt;
      a.i = value;
      return;
    }
  ir::Attribute a;
  a.name = name;
  a.type = ir::AttrType::kInt;
  a.i = value;
  node.attributes.push_back(std::move(a));
}

// Whether GatherBlockQuantized `node` runs whole (ir/ops_nn.cpp's form: a
// table [N, D] of 4-bit values packed two a byte in uint8 [N, D / 2],
// gathered on axis 0, in blocks of a power of 2 from 16 along D, float32
// scales [N, blocks], packed uint8 zero points or none) once the import has
// made it so: int4 and uint4 tables of that shape are repacked into it (int4
// shifted to uint4, its zero points with it; uint4's absent zero points, 0,
// written out, since the packed form's absent ones are 8).
bool gather_to_whole(ir::Graph& g, ir::Node& node, bool four_bit) {
  const Tensor* data = g.constant(node.inputs[0]);
  const Tensor* scales = g.constant(node.inputs[2]);
  const Tensor* zero = node.has_input(3) ? g.constant(node.inputs[3]) : nullptr;
  if (data == nullptr || scales == nullptr || (node.has_input(3) && zero == nullptr) ||
      data->shape().size() != 2 || scales->dtype() != DType::kFloat32)
    return false;
  Result<int64_t> gather_axis = node.attr_int("gather_axis", 0);
  Result<int64_t> quantize_axis = node.attr_int("quantize_axis", 1);
  Result<int64_t> block = node.attr_int("block_size", 128);
  Result<int64_t> bits = node.attr_int("bits", 4);
  if (!gather_axis.ok() || !quantize_axis.ok() || !block.ok() || !bits.ok() ||
      (*gather_axis != 0 && *gather_axis != -2) || (*quantize_axis != 1 && *quantize_axis != -1) ||
      *bits != 4 || *block < 16 || (*block & (*block - 1)) != 0)
    return false;
  const DType ids = g.values[node.inputs[1]].dtype;
  if (ids != DType::kInt64 && ids != DType::kInt32 && ids != DType::kUndefined) return false;
  const bool typed = four_bit || data->dtype() != DType::kUInt8;
  const int64_t n = data->shape()[0], d = data->shape()[1] * (typed ? 1 : 2);
  const int64_t blocks = (d + *block - 1) / *block, zero_bytes = (blocks + 1) / 2;
  if (n < 1 || d < 2 || d % 2 != 0 || scales->shape() != Shape{n, blocks}) return false;
  if (!typed) {
    if (zero != nullptr &&
        (zero->dtype() != DType::kUInt8 || zero->shape() != Shape{n, zero_bytes}))
      return false;
  } else {
    if (!four_bit ||
        (zero != nullptr && (zero->dtype() != data->dtype() || zero->shape() != Shape{n, blocks})))
      return false;
    const bool is_signed = data->dtype() == DType::kInt8;
    Tensor packed(DType::kUInt8, {n, d / 2});
    uint8_t* out = packed.data_as<uint8_t>();  // zero-filled
    for (int64_t i = 0; i < n * d; ++i)
      out[i / 2] |= static_cast<uint8_t>(uint4_of(*data, i) << (4 * (i % 2)));
    const std::string base = g.values[node.inputs[0]].name;
    node.inputs[0] = g.add_constant(fresh(g, base + "/packed"), std::move(packed));
    // No zero point is 0; the packed form's absent one is 8.
    if (zero != nullptr || !is_signed) {
      Tensor z(DType::kUInt8, {n, zero_bytes});
      for (int64_t r = 0; r < n; ++r)
        for (int64_t b = 0; b < blocks; ++b)
          z.data_as<uint8_t>()[r * zero_bytes + b / 2] |= static_cast<uint8_t>(
              (zero != nullptr ? uint4_of(*zero, r * blocks + b) : 0) << (4 * (b % 2)));
      node.inputs.resize(4);
      node.inputs[3] = g.add_constant(fresh(g, base + "/zero_points"), std::move(z));
    }
  }
  set_int(node, "gather_axis", 0);
  set_int(node, "quantize_axis", 1);
  set_int(node, "bits", 4);
  set_int(node, "block_size", *block);
  return true;
}

}  // namespace

Status blocked_matmuls_to_nbits(ir::Graph& graph,
                                const std::function<bool(const std::string&)>& four_bit,
                                int* count) {
  if (count != nullptr) *count = 0;
  int done = 0;
  const std::vector<int> outputs(graph.outputs.begin(), graph.outputs.end());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node dq = graph.nodes[i];
    if (dq.op_type != "DequantizeLinear" || !dq.domain.empty() || !dq.has_output(0) ||
        !dq.has_input(0) || !dq.has_input(1) || !four_bit)
      continue;
    Result<int64_t> block = dq.attr_int("block_size", 0);
    Result<int64_t> axis = dq.attr_int("axis", 1);
    if (!block.ok() || !axis.ok() || *block < 16 || (*block & (*block - 1)) != 0) continue;
    const Tensor* x = graph.constant(dq.inputs[0]);
    const Tensor* scale = graph.constant(dq.inputs[1]);
    const Tensor* zero = dq.has_input(2) ? graph.constant(dq.inputs[2]) : nullptr;
    if (x == nullptr || x->shape().size() != 2 || (*axis != 0 && *axis != -2) ||
        !four_bit(graph.values[dq.inputs[0]].name) || scale == nullptr ||
        scale->dtype() != DType::kFloat32 || (dq.has_input(2) && zero == nullptr))
      continue;
    const int64_t k = x->shape()[0], n = x->shape()[1], bs = *block;
    const int64_t blocks = (k + bs - 1) / bs;
    if (k < 1 || n < 1 || scale->shape() != Shape{blocks, n} ||
        (zero != nullptr && (zero->dtype() != x->dtype() || zero->shape() != Shape{blocks, n})))
      continue;
    // Every reader a MatMul taking it as B; the value no output of the graph.
    const int v = dq.outputs[0];
    std::vector<size_t> readers;
    bool only_matmuls = std::find(outputs.begin(), outputs.end(), v) == outputs.end();
    for (size_t j = 0; j < graph.nodes.size() && only_matmuls; ++j) {
      const ir::Node& m = graph.nodes[j];
      if (std::find(m.inputs.begin(), m.inputs.end(), v) == m.inputs.end()) continue;
      only_matmuls = m.op_type == "MatMul" && m.domain.empty() && m.inputs.size() == 2 &&
                     m.inputs[1] == v && m.inputs[0] != v && m.has_output(0);
      readers.push_back(j);
    }
    if (!only_matmuls || readers.empty()) continue;
    const bool is_signed = x->dtype() == DType::kInt8;
    Tensor b(DType::kUInt8, {n, blocks, bs / 2});
    Tensor s(DType::kFloat32, {n * blocks});
    uint8_t* packed = b.data_as<uint8_t>();  // zero-filled: the padding past K is 0
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t kk = 0; kk < k; ++kk)
        packed[j * blocks * bs / 2 + kk / 2] |=
            static_cast<uint8_t>(uint4_of(*x, kk * n + j) << (4 * (kk % 2)));
      for (int64_t blk = 0; blk < blocks; ++blk)
        s.data_as<float>()[j * blocks + blk] = scale->data_as<float>()[blk * n + j];
    }
    std::vector<int> inputs = {-1, graph.add_constant(fresh(graph, dq.name + "/B"), std::move(b)),
                               graph.add_constant(fresh(graph, dq.name + "/scales"), std::move(s))};
    // No zero point is 0; MatMulNBits' absent one is 8.
    if (zero != nullptr || !is_signed) {
      Tensor z(DType::kUInt8, {n * ((blocks + 1) / 2)});
      for (int64_t j = 0; j < n; ++j)
        for (int64_t blk = 0; blk < blocks; ++blk)
          z.data_as<uint8_t>()[j * ((blocks + 1) / 2) + blk / 2] |= static_cast<uint8_t>(
              (zero != nullptr ? uint4_of(*zero, blk * n + j) : 0) << (4 * (blk % 2)));
      inputs.push_back(graph.add_constant(fresh(graph, dq.name + "/zero_points"), std::move(z)));
    }
    for (size_t j : readers) {
      ir::Node& m = graph.nodes[j];
      inputs[0] = m.inputs[0];
      m.op_type = "MatMulNBits";
      m.domain = "com.microsoft";
      m.inputs = inputs;
      m.attributes.clear();
      for (auto [name, value] :
           {std::pair<const char*, int64_t>{"K", k}, {"N", n}, {"bits", 4}, {"block_size", bs}}) {
        ir::Attribute a;
        a.name = name;
        a.type = ir::AttrType::kInt;
        a.i = value;
        m.attributes.push_back(std::move(a));
      }
    }
    ++done;
  }
  if (done > 0) {
    graph.opsets.emplace("com.microsoft", 1);
    BP_RETURN_IF_ERROR(graph.topo_sort());
    graph.remove_dead();  // the dequantizations nothing reads now
  }
  if (count != nullptr) *count = done;
  return ok_status();
}

Status expand_blocked_dequantize(ir::Graph& graph, int* count) {
  if (count != nullptr) *count = 0;
  std::vector<bool> drop(graph.nodes.size(), false);
  int done = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& node = graph.nodes[i];
    if (node.op_type != "DequantizeLinear" || !node.domain.empty()) continue;
    Result<int64_t> block = node.attr_int("block_size", 0);
    if (block.ok() && *block == 0) continue;
    auto fail = [&](const Status& why) {
      return Status(why.code(), "node '" + node.name +
                                    "' (DequantizeLinear): blocked quantization runs here as "
                                    "its input dequantized at import, but " +
                                    why.message());
    };
    if (!block.ok()) return fail(block.status());
    if (*block < 0) return fail(invalid_argument("its block_size is negative"));
    if (!node.has_output(0)) return fail(invalid_argument("it has no output"));
    Result<Tensor> y = dequantized_blocks(graph, node, *block);
    if (!y.ok()) return fail(y.status());
    graph.make_constant(node.outputs[0], std::move(*y));
    drop[i] = true;
    ++done;
  }
  if (done > 0) {
    std::vector<ir::Node> kept;
    for (size_t i = 0; i < graph.nodes.size(); ++i)
      if (!drop[i]) kept.push_back(std::move(graph.nodes[i]));
    graph.nodes = std::move(kept);
    BP_RETURN_IF_ERROR(graph.topo_sort());
    graph.remove_dead();  // the quantized weights nothing reads now
  }
  if (count != nullptr) *count = done;
  return ok_status();
}

Status expand_gather_block_quantized(ir::Graph& graph,
                                     const std::function<bool(const std::string&)>& four_bit,
                                     int* count) {
  if (count != nullptr) *count = 0;
  int done = 0, kept = 0;
  for (ir::Node& node : graph.nodes) {
    if (node.op_type != "GatherBlockQuantized" || node.domain != "com.microsoft") continue;
    auto fail = [&](const Status& why) {
      return Status(why.code(), "node '" + node.name +
                                    "' (GatherBlockQuantized, domain 'com.microsoft'): ONNX "
                                    "Runtime's quantized Gather runs here as a Gather from its "
                                    "table dequantized at import, but " +
                                    why.message());
    };
    if (!node.has_input(0) || !node.has_input(1) || !node.has_input(2) || !node.has_output(0))
      return fail(invalid_argument("it needs data, indices, scales and its output"));
    const bool from_4bit = four_bit && four_bit(graph.values[node.inputs[0]].name);
    if (gather_to_whole(graph, node, from_4bit)) {
      ++kept;
      continue;
    }
    Result<Tensor> table = dequantized_table(graph, node, from_4bit);
    if (!table.ok()) return fail(table.status());
    Result<int64_t> axis = node.attr_int("gather_axis", 0);
    if (!axis.ok()) return fail(axis.status());
    const int weights = graph.add_constant(
        fresh(graph, graph.values[node.inputs[0]].name + "/dequantized"), std::move(*table));
    ir::Node gather;
    gather.name = node.name + "/Gather";
    gather.op_type = "Gather";
    gather.inputs = {weights, node.inputs[1]};
    gather.outputs = {node.outputs[0]};
    ir::Attribute a;
    a.name = "axis";
    a.type = ir::AttrType::kInt;
    a.i = *axis;
    gather.attributes.push_back(std::move(a));
    node = std::move(gather);
    ++done;
  }
  if (done > 0 || kept > 0) {
    BP_RETURN_IF_ERROR(graph.topo_sort());
    graph.remove_dead();  // the tables dequantized or repacked, which nothing reads now
  }
  if (count != nullptr) *count = done;
  return ok_status();
}

Status expand_matmul_nbits(ir::Graph& graph, int* count) {
  if (count != nullptr) *count = 0;
  int done = 0;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].op_type != "MatMulNBits" || graph.nodes[i].domain != "com.microsoft")
      continue;
    const ir::Node node = graph.nodes[i];
    auto fail = [&](const Status& why) {
      return Status(why.code(), "node '" + node.name +
                                    "' (MatMulNBits, domain 'com.microsoft'): ONNX Runtime's "
                                    "quantized MatMul runs here as a MatMul by its dequantized "
                                    "weights, but " +
                                    why.message());
    };
    Result<NBits> p = read_attributes(node);
    if (!p.ok()) return fail(p.status());
    if (!node.has_input(0) || !node.has_output(0))
      return fail(invalid_argument("it needs its input A and output Y"));
    if (node.has_input(4)) return fail(unsupported("g_idx (a reordering of K) is not supported"));
    if (graph.values[node.inputs[0]].dtype != DType::kFloat32 &&
        graph.values[node.inputs[0]].dtype != DType::kUndefined)
      return fail(unsupported(std::string("A is ") +
                              dtype_name(graph.values[node.inputs[0]].dtype) +
                              " (float32 is supported)"));
    if (runs_whole(graph, node, *p)) continue;
    Result<Tensor> w = dequantized(graph, node, *p);
    if (!w.ok()) return fail(w.status());
    const int weights =
        graph.add_constant(fresh(graph, node.name + "/dequantized_B"), std::move(*w));
    ir::Node matmul;
    matmul.name = node.name + "/MatMul";
    matmul.op_type = "MatMul";
    matmul.inputs = {node.inputs[0], weights};
    matmul.outputs = {node.outputs[0]};
    if (node.has_input(5)) {  // + bias [N]
      ir::Value product;
      product.name = fresh(graph, graph.values[node.outputs[0]].name + "/product");
      product.dtype = DType::kFloat32;
      matmul.outputs = {graph.add_value(std::move(product))};
      ir::Node add;
      add.name = node.name + "/Add";
      add.op_type = "Add";
      add.inputs = {matmul.outputs[0], node.inputs[5]};
      add.outputs = {node.outputs[0]};
      graph.nodes[i] = std::move(matmul);
      graph.nodes.insert(graph.nodes.begin() + static_cast<std::ptrdiff_t>(i) + 1, std::move(add));
      ++i;
    } else {
      graph.nodes[i] = std::move(matmul);
    }
    ++done;
  }
  if (done > 0) BP_RETURN_IF_ERROR(graph.topo_sort());  // producers moved with the nodes
  if (count != nullptr) *count = done;
  return ok_status();
}

}  // namespace backplane::onnx_import
