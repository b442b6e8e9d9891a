// model_builder.hpp — the one ONNX model builder of the tests: small models
// built in memory with the onnx protobuf API, kept as bytes or saved to a
// file, plus the few models several suites share.
#pragma once

#include "support/files.hpp"

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace backplane::test {

using Dims = std::vector<int64_t>;

// One dimension of a declared shape: a size, or a symbolic name.
struct Dim {
  Dim(int v) : value(v) {}          // NOLINT: implicit so dims read like shapes
  Dim(int64_t v) : value(v) {}      // NOLINT
  Dim(const char* p) : param(p) {}  // NOLINT: a symbolic dim
  int64_t value = -1;
  std::string param;
};

// Elements of a tensor of `dims` (1 for a scalar).
int64_t element_count(const Dims& dims);

// A concrete shape as declared dims.
inline std::vector<Dim> shape_of(const Dims& dims) {
  return std::vector<Dim>(dims.begin(), dims.end());
}

// Declares `name` with element type `elem` and, unless `dims` is nullopt, a
// shape (a negative size leaves that dim unknown).
void set_type(onnx::ValueInfoProto* vi, const std::string& name, int elem,
              std::optional<std::vector<Dim>> dims);

class ModelBuilder {
 public:
  explicit ModelBuilder(int64_t opset = 13, const std::string& graph_name = "test");

  // The model being built; tests may edit it directly (opset imports, ...).
  onnx::ModelProto model;
  onnx::GraphProto& graph() { return *model.mutable_graph(); }

  // Graph inputs, outputs and value infos: `dims` nullopt declares no shape;
  // the std::vector<Dim> overloads take a braced shape, b.input("x", {1, 3}).
  ModelBuilder& input(const std::string& name, std::optional<std::vector<Dim>> dims,
                      int elem = onnx::TensorProto::FLOAT);
  ModelBuilder& input(const std::string& name, std::vector<Dim> dims,
                      int elem = onnx::TensorProto::FLOAT) {
    return input(name, std::optional<std::vector<Dim>>(std::move(dims)), elem);
  }
  ModelBuilder& output(const std::string& name, std::optional<std::vector<Dim>> dims = std::nullopt,
                       int elem = onnx::TensorProto::FLOAT);
  ModelBuilder& output(const std::string& name, std::vector<Dim> dims,
                       int elem = onnx::TensorProto::FLOAT) {
    return output(name, std::optional<std::vector<Dim>>(std::move(dims)), elem);
  }
  // An output whose type is left for inference.
  ModelBuilder& untyped_output(const std::string& name);
  ModelBuilder& value_info(const std::string& name, std::optional<std::vector<Dim>> dims,
                           int elem = onnx::TensorProto::FLOAT);
  ModelBuilder& value_info(const std::string& name, std::vector<Dim> dims,
                           int elem = onnx::TensorProto::FLOAT) {
    return value_info(name, std::optional<std::vector<Dim>>(std::move(dims)), elem);
  }
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& ins,
                        const std::vector<std::string>& outs, const std::string& name = "");

  // Initializers. Floats are stored as raw_data, int64s as int64_data.
  ModelBuilder& init_f32(const std::string& name, const Dims& dims, const std::vector<float>& data);
  ModelBuilder& init_i64(const std::string& name, const Dims& dims,
                         const std::vector<int64_t>& data);
  // A uint8, int8 or int32 initializer (`elem`, ONNX's type), stored as raw_data.
  ModelBuilder& init_ints(const std::string& name, int elem, const Dims& dims,
                          const std::vector<int32_t>& data);
  // A float32 initializer of `dims` filled with `value`.
  ModelBuilder& weight(const std::string& name, const Dims& dims, float value = 0.5f);
  // A float32 initializer of `dims` uniform in [lo, hi), from this builder's
  // seeded generator: the same calls give the same model.
  ModelBuilder& random_weight(const std::string& name, const Dims& dims, float lo = -1.f,
                              float hi = 1.f);

  // The inputs declared with a complete, concrete shape, in order.
  const std::vector<std::pair<std::string, Dims>>& inputs() const { return inputs_; }

  std::string bytes() const { return model.SerializeAsString(); }
  // Writes the model to `path` (a test failure if that fails) and returns it.
  std::string save_as(const std::string& path) const;
  std::string save(const TempDir& dir, const std::string& name = "model.onnx") const {
    return save_as(dir.file(name));
  }

 private:
  std::vector<std::pair<std::string, Dims>> inputs_;
  std::mt19937 rng_{1234};
};

// Node attributes.
onnx::AttributeProto* attr(onnx::NodeProto& n, const std::string& name,
                           onnx::AttributeProto::AttributeType type);
void set_int(onnx::NodeProto& n, const std::string& name, int64_t v);
void set_float(onnx::NodeProto& n, const std::string& name, float v);
void set_string(onnx::NodeProto& n, const std::string& name, const std::string& v);
void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v);
void set_floats(onnx::NodeProto& n, const std::string& name, const std::vector<float>& v);

// ---- models several suites use ------------------------------------------------

// x[shape] -> Relu (relus times, chained) -> y. Saved at `path`.
void write_relu_model(const std::string& path, const Dims& shape, int relus = 1);

// A small CNN: x[1,3,8,8] -> Conv(4,3x3,pad 1) -> Relu -> MaxPool(2) -> Flatten
// -> Gemm(64->10) -> Softmax -> y[1,10]. Saved at `path`.
void write_small_cnn(const std::string& path);

}  // namespace backplane::test
