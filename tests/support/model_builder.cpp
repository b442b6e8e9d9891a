#include "support/model_builder.hpp"

#include <gtest/gtest.h>

#include <fstream>

namespace backplane::test {

int64_t element_count(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

void set_type(onnx::ValueInfoProto* vi, const std::string& name, int elem,
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

ModelBuilder::ModelBuilder(int64_t opset, const std::string& graph_name) {
  model.set_ir_version(8);
  auto* os = model.add_opset_import();
  os->set_domain("");
  os->set_version(opset);
  graph().set_name(graph_name);
}

ModelBuilder& ModelBuilder::input(const std::string& name, std::optional<std::vector<Dim>> dims,
                                  int elem) {
  if (dims) {
    Dims concrete;
    for (const Dim& d : *dims)
      if (d.param.empty() && d.value >= 0) concrete.push_back(d.value);
    if (concrete.size() == dims->size()) inputs_.emplace_back(name, concrete);
  }
  set_type(graph().add_input(), name, elem, std::move(dims));
  return *this;
}

ModelBuilder& ModelBuilder::output(const std::string& name, std::optional<std::vector<Dim>> dims,
                                   int elem) {
  set_type(graph().add_output(), name, elem, std::move(dims));
  return *this;
}

ModelBuilder& ModelBuilder::untyped_output(const std::string& name) {
  graph().add_output()->set_name(name);
  return *this;
}

ModelBuilder& ModelBuilder::value_info(const std::string& name,
                                       std::optional<std::vector<Dim>> dims, int elem) {
  set_type(graph().add_value_info(), name, elem, std::move(dims));
  return *this;
}

onnx::NodeProto& ModelBuilder::node(const std::string& op, const std::vector<std::string>& ins,
                                    const std::vector<std::string>& outs, const std::string& name) {
  auto* n = graph().add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : ins) n->add_input(i);
  for (const auto& o : outs) n->add_output(o);
  return *n;
}

ModelBuilder& ModelBuilder::init_f32(const std::string& name, const Dims& dims,
                                     const std::vector<float>& data) {
  auto* t = graph().add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(
      std::string(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(float)));
  return *this;
}

ModelBuilder& ModelBuilder::init_i64(const std::string& name, const Dims& dims,
                                     const std::vector<int64_t>& data) {
  auto* t = graph().add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : data) t->add_int64_data(v);
  return *this;
}

ModelBuilder& ModelBuilder::init_ints(const std::string& name, int elem, const Dims& dims,
                                      const std::vector<int32_t>& data) {
  auto* t = graph().add_initializer();
  t->set_name(name);
  t->set_data_type(elem);
  for (int64_t d : dims) t->add_dims(d);
  std::string raw;
  for (int32_t v : data) {
    if (elem == onnx::TensorProto::INT32) raw.append(reinterpret_cast<const char*>(&v), 4);
    else raw.push_back(static_cast<char>(v));
  }
  t->set_raw_data(raw);
  return *this;
}

ModelBuilder& ModelBuilder::weight(const std::string& name, const Dims& dims, float value) {
  return init_f32(name, dims, std::vector<float>(static_cast<size_t>(element_count(dims)), value));
}

ModelBuilder& ModelBuilder::random_weight(const std::string& name, const Dims& dims, float lo,
                                          float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> values(static_cast<size_t>(element_count(dims)));
  for (float& x : values) x = dist(rng_);
  return init_f32(name, dims, values);
}

std::string ModelBuilder::save_as(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  EXPECT_TRUE(model.SerializeToOstream(&f) && f.flush().good()) << "cannot write " << path;
  return path;
}

onnx::AttributeProto* attr(onnx::NodeProto& n, const std::string& name,
                           onnx::AttributeProto::AttributeType type) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(type);
  return a;
}
void set_int(onnx::NodeProto& n, const std::string& name, int64_t v) {
  attr(n, name, onnx::AttributeProto::INT)->set_i(v);
}
void set_float(onnx::NodeProto& n, const std::string& name, float v) {
  attr(n, name, onnx::AttributeProto::FLOAT)->set_f(v);
}
void set_string(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  attr(n, name, onnx::AttributeProto::STRING)->set_s(v);
}
void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = attr(n, name, onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_floats(onnx::NodeProto& n, const std::string& name, const std::vector<float>& v) {
  auto* a = attr(n, name, onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}

void write_relu_model(const std::string& path, const Dims& shape, int relus) {
  ModelBuilder b(13, "relu_chain");
  b.input("x", shape_of(shape));
  std::string prev = "x";
  for (int i = 0; i < relus; ++i) {
    std::string out = "y";
    if (i + 1 < relus) out = std::string("r").append(std::to_string(i));
    b.node("Relu", {prev}, {out}, "relu_" + std::to_string(i));
    prev = out;
  }
  b.output("y", shape_of(shape));
  b.save_as(path);
}

void write_small_cnn(const std::string& path) {
  ModelBuilder b(13, "small_cnn");
  b.input("x", {1, 3, 8, 8});
  b.random_weight("conv_w", {4, 3, 3, 3}).random_weight("conv_b", {4});
  b.random_weight("fc_w", {10, 64}).random_weight("fc_b", {10});
  auto& conv = b.node("Conv", {"x", "conv_w", "conv_b"}, {"c"}, "conv");
  set_ints(conv, "kernel_shape", {3, 3});
  set_ints(conv, "pads", {1, 1, 1, 1});
  b.node("Relu", {"c"}, {"r"}, "relu");
  auto& pool = b.node("MaxPool", {"r"}, {"p"}, "pool");
  set_ints(pool, "kernel_shape", {2, 2});
  set_ints(pool, "strides", {2, 2});
  set_int(b.node("Flatten", {"p"}, {"f"}, "flatten"), "axis", 1);
  set_int(b.node("Gemm", {"f", "fc_w", "fc_b"}, {"g"}, "fc"), "transB", 1);
  set_int(b.node("Softmax", {"g"}, {"y"}, "softmax"), "axis", 1);
  b.output("y", {1, 10});
  b.save_as(path);
}

}  // namespace backplane::test
