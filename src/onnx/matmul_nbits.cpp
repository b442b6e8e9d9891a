// matmul_nbits.cpp — MatMulNBits as a MatMul by its dequantized weights
// (matmul_nbits.hpp).
#include "onnx/matmul_nbits.hpp"

#include <algorithm>
#include <cstdint>
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

std::string fresh(const ir::Graph& g, const std::string& base) {
  std::string name = base;
  for (int i = 1; g.find_value(name) >= 0; ++i) name = base + "_" + std::to_string(i);
  return name;
}

}  // namespace

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
