// ONNX model builder shared by the importer and shape-inference unit tests
// (tests/unit/test_onnx_import.cpp, test_shape_inference.cpp): builds small
// ONNX models in memory with the onnx protobuf API.
//
// Header-only and included by several .cpp files of one binary, so everything
// here is inline (or a class) in a named namespace: one definition, no ODR clash.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>
#include <unistd.h>

namespace backplane::onnx_test {

struct Dim {
  Dim(int v) : value(v) {}              // NOLINT: implicit so dims read like shapes
  Dim(int64_t v) : value(v) {}          // NOLINT
  Dim(const char* p) : param(p) {}      // NOLINT: a symbolic dim
  int64_t value = -1;
  std::string param;
};

// A scratch directory removed with its contents at scope exit.
struct TempDir {
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("bp_onnx_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::filesystem::path path;
};

inline void set_type(onnx::ValueInfoProto* vi, const std::string& name, int elem,
              std::optional<std::vector<Dim>> dims) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem);
  if (!dims) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *dims) {
    auto* dim = shape->add_dim();
    if (!d.param.empty()) dim->set_dim_param(d.param);
    else if (d.value >= 0) dim->set_dim_value(d.value);
  }
}

struct ModelBuilder {
  explicit ModelBuilder(int64_t opset = 13) {
    model.set_ir_version(8);
    auto* os = model.add_opset_import();
    os->set_domain("");
    os->set_version(opset);
    graph().set_name("test");
  }
  onnx::GraphProto& graph() { return *model.mutable_graph(); }

  ModelBuilder& input(const std::string& name, std::optional<std::vector<Dim>> dims,
                      int elem = onnx::TensorProto::FLOAT) {
    set_type(graph().add_input(), name, elem, std::move(dims));
    return *this;
  }
  ModelBuilder& output(const std::string& name, std::optional<std::vector<Dim>> dims = std::nullopt,
                       int elem = onnx::TensorProto::FLOAT) {
    set_type(graph().add_output(), name, elem, std::move(dims));
    return *this;
  }
  // An output whose type is left for inference.
  ModelBuilder& untyped_output(const std::string& name) {
    graph().add_output()->set_name(name);
    return *this;
  }
  ModelBuilder& value_info(const std::string& name, std::optional<std::vector<Dim>> dims,
                           int elem = onnx::TensorProto::FLOAT) {
    set_type(graph().add_value_info(), name, elem, std::move(dims));
    return *this;
  }
  onnx::NodeProto& node(const std::string& op, std::vector<std::string> ins,
                        std::vector<std::string> outs, const std::string& name = "") {
    auto* n = graph().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return *n;
  }
  onnx::TensorProto& init_f32(const std::string& name, std::vector<int64_t> dims,
                              const std::vector<float>& data) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * 4));
    return *t;
  }
  onnx::TensorProto& init_i64(const std::string& name, std::vector<int64_t> dims,
                              const std::vector<int64_t>& data) {
    auto* t = graph().add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : data) t->add_int64_data(v);
    return *t;
  }
  // A float32 initializer of `dims` filled with 0.5.
  onnx::TensorProto& weight(const std::string& name, std::vector<int64_t> dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return init_f32(name, dims, std::vector<float>(static_cast<size_t>(n), 0.5f));
  }
  std::string bytes() const { return model.SerializeAsString(); }
  std::string save(const TempDir& dir, const std::string& name = "model.onnx") const {
    std::string path = dir.file(name);
    std::ofstream f(path, std::ios::binary);
    f << bytes();
    return path;
  }
  onnx::ModelProto model;
};

inline onnx::AttributeProto* attr(onnx::NodeProto& n, const std::string& name,
                           onnx::AttributeProto::AttributeType type) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}
inline void set_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
  attr(n, name, onnx::AttributeProto::INT)->set_i(v);
}
inline void set_float(onnx::NodeProto& n, const std::string& name, float v) {
  attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
inline void set_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
inline void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = attr(n, name, onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void set_floats(onnx::NodeProto& n, const std::string& name, const std::vector<float>& v) {
  auto* a = attr(n, name, onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}

}  // namespace backplane::onnx_test
