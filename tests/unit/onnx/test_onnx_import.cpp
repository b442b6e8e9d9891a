// Tests of the ONNX importer (src/onnx) and MappedFile (src/core): models are
// built with the onnx protobuf API, written to a scratch directory, imported.
#include "core/mapped_file.hpp"
#include "ir/graph.hpp"
#include "onnx/importer.hpp"
#include "support/expect_error.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>
#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

namespace backplane {
namespace {

namespace fs = std::filesystem;
using namespace test;  // ModelBuilder, Dim, TempDir, set_int, ...

using onnx_import::import_bytes;
using onnx_import::import_file;

// A valid one-node model: y = Relu(x + w).
ModelBuilder add_relu_model() {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{"batch", 3}).output("y", std::vector<Dim>{"batch", 3});
  b.init_f32("w", {3}, {1, 2, 3});
  b.node("Add", {"x", "w"}, {"s"}, "add");
  b.node("Relu", {"s"}, {"y"}, "relu");
  return b;
}

// ---------------------------------------------------------------- MappedFile

TEST(MappedFile, MapsContents) {
  TempDir dir;
  write_bytes(dir.file("a.bin"), "hello");
  auto f = MappedFile::open(dir.file("a.bin"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ((*f)->size(), 5u);
  EXPECT_EQ(std::string(static_cast<const char*>((*f)->data()), 5), "hello");
}

TEST(MappedFile, EmptyFileHasNoBytes) {
  TempDir dir;
  write_bytes(dir.file("empty.bin"), "");
  auto f = MappedFile::open(dir.file("empty.bin"));
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ((*f)->size(), 0u);
  EXPECT_EQ((*f)->data(), nullptr);
}

TEST(MappedFile, MissingFileNamesPathAndErrno) {
  auto f = MappedFile::open("/nonexistent/dir/model.onnx");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kNotFound);
  EXPECT_ERROR_HAS(f.status(), "/nonexistent/dir/model.onnx", std::strerror(ENOENT));
}

TEST(MappedFile, DirectoryIsAnError) {
  TempDir dir;
  auto f = MappedFile::open(dir.path());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIoError);
  EXPECT_ERROR_HAS(f.status(), dir.path().c_str(), "directory");
}

// ---------------------------------------------------------------- valid models

TEST(OnnxImport, ImportsInputsOutputsInitializersAndNodes) {
  TempDir dir;
  ModelBuilder b = add_relu_model();
  // Before IR version 4 every initializer is listed as an input too: a
  // constant, not an input.
  b.model.set_ir_version(3);
  b.input("w", std::vector<Dim>{3});
  b.value_info("s", std::vector<Dim>{"batch", 3});
  auto g = import_file(b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->inputs.size(), 1u);
  const ir::Value& x = g->values[g->inputs[0]];
  EXPECT_EQ(x.name, "x");
  EXPECT_EQ(x.dtype, DType::kFloat32);
  EXPECT_TRUE(x.has_shape);
  EXPECT_EQ(x.shape, (Shape{-1, 3}));
  EXPECT_EQ(x.dim_params, (std::vector<std::string>{"batch", ""}));
  ASSERT_EQ(g->outputs.size(), 1u);
  EXPECT_EQ(g->values[g->outputs[0]].name, "y");
  int w = g->find_value("w");
  ASSERT_GE(w, 0);
  const Tensor* wt = g->constant(w);
  ASSERT_NE(wt, nullptr);
  EXPECT_EQ(wt->shape(), (Shape{3}));
  EXPECT_EQ(wt->data_as<float>()[2], 3.0f);
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].op_type, "Add");
  EXPECT_EQ(g->nodes[0].inputs, (std::vector<int>{g->find_value("x"), w}));
  // value_info hints are kept on the value.
  const ir::Value& s = g->values[g->find_value("s")];
  EXPECT_EQ(s.dtype, DType::kFloat32);
  EXPECT_EQ(s.dim_params[0], "batch");
  EXPECT_EQ(g->opset(), 13);
  EXPECT_EQ(g->source, dir.file("model.onnx"));
}

TEST(OnnxImport, ModelMetadataIsKept) {
  TempDir dir;
  ModelBuilder b = add_relu_model();
  b.model.set_producer_name("exporter");
  b.model.set_producer_version("2.1");
  b.model.set_domain("ai.example");
  b.model.set_doc_string("adds and rectifies");
  b.model.set_model_version(7);
  b.model.mutable_graph()->set_name("main");
  b.model.mutable_graph()->set_doc_string("the graph");
  auto* prop = b.model.add_metadata_props();
  prop->set_key("labels");
  prop->set_value("a,b,c");
  auto g = import_file(b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_NE(g->metadata, nullptr);
  const ModelMetadata& m = *g->metadata;
  EXPECT_EQ(m.producer_name, "exporter");
  EXPECT_EQ(m.producer_version, "2.1");
  EXPECT_EQ(m.domain, "ai.example");
  EXPECT_EQ(m.description, "adds and rectifies");
  EXPECT_EQ(m.version, 7);
  EXPECT_EQ(m.graph_name, "main");
  EXPECT_EQ(m.graph_description, "the graph");
  EXPECT_EQ(m.custom, (std::map<std::string, std::string>{{"labels", "a,b,c"}}));
}

TEST(OnnxImport, InitializerListedAsInputIsTheInputsDefaultFromIrVersion4) {
  ModelBuilder b = add_relu_model();
  b.model.set_ir_version(4);
  b.graph().add_input()->set_name("w");  // no type: the initializer's
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem.onnx", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->inputs.size(), 2u);
  const ir::Value& w = g->values[g->inputs[1]];
  EXPECT_EQ(w.name, "w");
  EXPECT_FALSE(w.is_constant());
  EXPECT_EQ(w.dtype, DType::kFloat32);
  EXPECT_EQ(w.shape, (Shape{3}));
  ASSERT_EQ(g->input_defaults.count("w"), 1u);
  EXPECT_EQ(g->input_defaults.at("w").data_as<float>()[1], 2.0f);

  // The declaration must agree with the initializer.
  ModelBuilder bad = add_relu_model();
  bad.input("w", std::vector<Dim>{4});
  bytes = bad.bytes();
  g = import_bytes(bytes.data(), bytes.size(), "mem.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "graph input 'w'", "[4]", "initializer has shape [3]");
  ModelBuilder mistyped = add_relu_model();
  mistyped.input("w", std::vector<Dim>{3}, onnx::TensorProto::INT64);
  bytes = mistyped.bytes();
  g = import_bytes(bytes.data(), bytes.size(), "mem.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "graph input 'w'", "declared int64", "initializer is float32");
}

TEST(OnnxImport, SortsNodesGivenOutOfOrder) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{2}).output("z");
  b.node("Relu", {"y"}, {"z"}, "second");
  b.node("Neg", {"x"}, {"y"}, "first");
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem.onnx", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->nodes[0].name, "first");
  EXPECT_EQ(g->values[g->find_value("z")].producer, 1);
}

TEST(OnnxImport, TypedFieldInitializers) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{2}).output("y");
  b.node("Identity", {"x"}, {"y"});
  auto* f = b.graph().add_initializer();
  f->set_name("f");
  f->set_data_type(onnx::TensorProto::FLOAT);
  f->add_dims(2);
  f->add_float_data(1.5f);
  f->add_float_data(-2.0f);
  auto* i32 = b.graph().add_initializer();
  i32->set_name("i32");
  i32->set_data_type(onnx::TensorProto::INT32);
  i32->add_int32_data(7);  // scalar
  auto* i8 = b.graph().add_initializer();
  i8->set_name("i8");
  i8->set_data_type(onnx::TensorProto::INT8);
  i8->add_dims(2);
  i8->add_int32_data(-5);
  i8->add_int32_data(100);
  auto* u8 = b.graph().add_initializer();
  u8->set_name("u8");
  u8->set_data_type(onnx::TensorProto::UINT8);
  u8->add_dims(1);
  u8->add_int32_data(250);
  auto* bo = b.graph().add_initializer();
  bo->set_name("b");
  bo->set_data_type(onnx::TensorProto::BOOL);
  bo->add_dims(2);
  bo->add_int32_data(0);
  bo->add_int32_data(1);
  auto* h = b.graph().add_initializer();
  h->set_name("h");
  h->set_data_type(onnx::TensorProto::FLOAT16);
  h->add_dims(1);
  h->add_int32_data(0x3c00);  // 1.0 in half
  b.init_i64("i64", {3}, {1, -1, int64_t{1} << 40});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto c = [&](const char* n) { return g->constant(g->find_value(n)); };
  ASSERT_NE(c("f"), nullptr);
  EXPECT_EQ(c("f")->data_as<float>()[1], -2.0f);
  EXPECT_EQ(c("i32")->shape(), Shape{});
  EXPECT_EQ(c("i32")->data_as<int32_t>()[0], 7);
  EXPECT_EQ(c("i8")->dtype(), DType::kInt8);
  EXPECT_EQ(c("i8")->data_as<int8_t>()[0], -5);
  EXPECT_EQ(c("u8")->data_as<uint8_t>()[0], 250);
  EXPECT_EQ(c("b")->dtype(), DType::kBool);
  EXPECT_EQ(c("b")->data_as<uint8_t>()[1], 1);
  EXPECT_EQ(c("h")->data_as<uint16_t>()[0], 0x3c00);
  EXPECT_EQ(c("i64")->data_as<int64_t>()[2], int64_t{1} << 40);
}

TEST(OnnxImport, ConstantNodesBecomeConstants) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("y");
  auto& c1 = b.node("Constant", {}, {"c1"});
  auto* t = attr(c1, "value", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(3);
  for (float v : {4.f, 5.f, 6.f}) t->add_float_data(v);
  set_float(b.node("Constant", {}, {"c2"}), "value_float", 2.5f);
  set_ints(b.node("Constant", {}, {"c3"}), "value_ints", {1, 2});
  set_int(b.node("Constant", {}, {"c4"}), "value_int", 9);
  b.node("Add", {"x", "c1"}, {"y"});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->nodes.size(), 1u);  // only the Add
  EXPECT_EQ(g->nodes[0].name, "Add_4");
  auto c = [&](const char* n) { return g->constant(g->find_value(n)); };
  ASSERT_NE(c("c1"), nullptr);
  EXPECT_EQ(c("c1")->data_as<float>()[2], 6.0f);
  EXPECT_EQ(c("c2")->shape(), Shape{});
  EXPECT_EQ(c("c2")->data_as<float>()[0], 2.5f);
  EXPECT_EQ(c("c3")->dtype(), DType::kInt64);
  EXPECT_EQ(c("c3")->shape(), Shape{2});
  EXPECT_EQ(c("c4")->data_as<int64_t>()[0], 9);
}

TEST(OnnxImport, AttributesOfAllKinds) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("y");
  auto& n = b.node("CustomOp", {"x"}, {"y"}, "custom");
  n.set_domain("com.example");
  auto* os = b.model.add_opset_import();
  os->set_domain("com.example");
  os->set_version(1);
  set_int(n, "i", -3);
  set_float(n, "f", 0.25f);
  set_string(n, "s", "hello");
  set_ints(n, "is", {1, 2, 3});
  set_floats(n, "fs", {0.5f});
  auto* ss = attr(n, "ss", onnx::AttributeProto::STRINGS);
  ss->add_strings("a");
  ss->add_strings("b");
  auto* t = attr(n, "t", onnx::AttributeProto::TENSOR)->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(2);
  t->add_int64_data(10);
  t->add_int64_data(20);
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const ir::Node& node = g->nodes.at(0);
  EXPECT_EQ(node.domain, "com.example");
  EXPECT_EQ(node.attr("i")->i, -3);
  EXPECT_EQ(node.attr("f")->f, 0.25f);
  EXPECT_EQ(node.attr("s")->s, "hello");
  EXPECT_EQ(node.attr("is")->ints, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(node.attr("fs")->floats, (std::vector<float>{0.5f}));
  EXPECT_EQ(node.attr("ss")->strings, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(node.attr("t")->type, ir::AttrType::kTensor);
  EXPECT_EQ(node.attr("t")->t.data_as<int64_t>()[1], 20);
  EXPECT_EQ(g->opset("com.example"), 1);
}

TEST(OnnxImport, UnnamedNodesGetStableNamesAndEmptyInputsAreOmitted) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("y");
  b.node("Relu", {"x"}, {"r"});
  b.node("Clip", {"r", "", "hi"}, {"y"});
  b.init_f32("hi", {}, {6});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes[0].name, "Relu_0");
  EXPECT_EQ(g->nodes[1].name, "Clip_1");
  EXPECT_EQ(g->nodes[1].inputs[1], -1);
  EXPECT_EQ(g->nodes[1].inputs[2], g->find_value("hi"));
}

TEST(OnnxImport, AiOnnxDomainIsTheDefaultDomain) {
  ModelBuilder b(11);
  b.model.mutable_opset_import(0)->set_domain("ai.onnx");
  b.input("x", std::vector<Dim>{3}).output("y");
  b.node("Relu", {"x"}, {"y"}).set_domain("ai.onnx");
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "mem", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->opset(""), 11);
  EXPECT_EQ(g->nodes[0].domain, "");
}

// ---------------------------------------------------------------- external data

struct ExternalModel {
  ModelBuilder b;
  // Weight "w" [2,3] float stored in `location` at `offset`.
  explicit ExternalModel(const std::string& location, int64_t offset, int64_t length = 24) {
    b.input("x", std::vector<Dim>{2, 3}).output("y");
    b.node("Add", {"x", "w"}, {"y"});
    auto* t = b.graph().add_initializer();
    t->set_name("w");
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(2);
    t->add_dims(3);
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&](const char* k, const std::string& v) {
      auto* e = t->add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    add("location", location);
    add("offset", std::to_string(offset));
    if (length >= 0) add("length", std::to_string(length));
  }
};

std::string weights_blob(size_t pad) {
  std::string blob(pad, 'z');
  float w[6] = {1, 2, 3, 4, 5, 6};
  blob.append(reinterpret_cast<const char*>(w), sizeof(w));
  return blob;
}

TEST(OnnxImport, ExternalDataIsMappedRelativeToTheModel) {
  TempDir dir;
  fs::create_directories(fs::path(dir.path()) / "sub");
  write_bytes(dir.file("sub/weights.bin"), weights_blob(64));
  ExternalModel m("sub/weights.bin", 64);
  std::string path = m.b.save(dir);
  ir::Graph graph;
  {
    auto g = import_file(path);
    ASSERT_TRUE(g.ok()) << g.status().message();
    graph = std::move(*g);
  }
  const Tensor* w = graph.constant(graph.find_value("w"));
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w->data_as<float>()[i], i + 1.0f);
}

TEST(OnnxImport, ExternalDataWithoutLengthUsesRestOfFile) {
  TempDir dir;
  write_bytes(dir.file("w.bin"), weights_blob(8));
  ExternalModel m("w.bin", 8, -1);
  auto g = import_file(m.b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->constant(g->find_value("w"))->data_as<float>()[5], 6.0f);
}

TEST(OnnxImport, ExternalDataUnalignedOffsetIsCopied) {
  TempDir dir;
  write_bytes(dir.file("w.bin"), weights_blob(3));
  ExternalModel m("w.bin", 3);
  auto g = import_file(m.b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Tensor* w = g->constant(g->find_value("w"));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data()) % 4, 0u);
  EXPECT_EQ(w->data_as<float>()[0], 1.0f);
}

TEST(OnnxImport, ExternalDataRefusesAbsolutePathsAndEscapes) {
  TempDir dir;
  write_bytes(dir.file("w.bin"), weights_blob(0));
  {
    ExternalModel m(dir.file("w.bin"), 0);
    auto g = import_file(m.b.save(dir));
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "model.onnx", "initializer 'w'", "absolute path");
  }
  {
    ExternalModel m("../w.bin", 0);
    fs::create_directories(fs::path(dir.path()) / "inner");
    auto g = import_file(m.b.save(dir, "inner/model.onnx"));
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "inner/model.onnx", "initializer 'w'", "escapes");
  }
}

TEST(OnnxImport, ExternalDataOutOfBoundsOrMissing) {
  TempDir dir;
  write_bytes(dir.file("w.bin"), weights_blob(0));  // 24 bytes
  {
    ExternalModel m("w.bin", 8);  // 8 + 24 > 24
    auto g = import_file(m.b.save(dir));
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), StatusCode::kCorruptData);
    EXPECT_ERROR_HAS(g.status(), "model.onnx", "initializer 'w'", "exceeds the size of 'w.bin'");
  }
  {
    ExternalModel m("w.bin", 0, 20);  // in bounds, but the shape needs 24 bytes
    auto g = import_file(m.b.save(dir));
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "initializer 'w'", "shape mismatch", "20 bytes");
  }
  {
    ExternalModel m("nope.bin", 0);
    auto g = import_file(m.b.save(dir));
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "model.onnx", "initializer 'w'", "nope.bin");
  }
}

// ---------------------------------------------------------------- bad input

TEST(OnnxImport, MissingFile) {
  auto g = import_file("/no/such/model.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kNotFound);
  EXPECT_ERROR_HAS(g.status(), "/no/such/model.onnx");
}

TEST(OnnxImport, TruncatedFile) {
  TempDir dir;
  ModelBuilder b = add_relu_model();
  std::string bytes = b.bytes();
  write_bytes(dir.file("cut.onnx"), bytes.substr(0, bytes.size() - 7));
  auto g = import_file(dir.file("cut.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kCorruptData);
  EXPECT_ERROR_HAS(g.status(), "cut.onnx", "protobuf parsing failed");
}

TEST(OnnxImport, NonOnnxAndEmptyFiles) {
  TempDir dir;
  write_bytes(dir.file("text.onnx"), "this is not a model, just some text\n");
  auto g = import_file(dir.file("text.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "text.onnx");
  EXPECT_EQ(g.status().code(), StatusCode::kCorruptData);

  write_bytes(dir.file("empty.onnx"), "");
  g = import_file(dir.file("empty.onnx"));
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "empty.onnx", "empty");
}

TEST(OnnxImport, ParseThatYieldsNoModelIsRejected) {
  {
    onnx::ModelProto m;  // parses from zero-ish bytes but is not a model
    m.set_producer_name("x");
    std::string bytes = m.SerializeAsString();
    auto g = import_bytes(bytes.data(), bytes.size(), "a.onnx", ".");
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "a.onnx", "ir_version");
  }
  {
    ModelBuilder b = add_relu_model();
    b.model.clear_graph();
    std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "b.onnx", ".");
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "b.onnx", "no graph");
  }
  {
    ModelBuilder b = add_relu_model();
    b.model.clear_opset_import();
    std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "c.onnx", ".");
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "c.onnx", "opset_import");
  }
}

// INT4 and UINT4 initializers (two values a byte, the first in the low
// bits) are read as int8 and uint8, an odd count's last byte half used.
TEST(OnnxImport, FourBitInitializersReadAsEightBit) {
  for (const bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "INT4" : "UINT4");
    ModelBuilder b = add_relu_model();
    onnx::TensorProto* t = b.graph().add_initializer();
    t->set_name("q");
    t->set_data_type(is_signed ? 22 : 21);
    t->add_dims(3);
    t->set_raw_data(std::string("\x78\x0f", 2));  // 8, 7, 15
    const std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "q.onnx", ".");
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Tensor* q = g->constant(g->find_value("q"));
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(q->shape(), (Shape{3}));
    if (is_signed) {
      ASSERT_EQ(q->dtype(), DType::kInt8);
      EXPECT_EQ(q->data_as<int8_t>()[0], -8);
      EXPECT_EQ(q->data_as<int8_t>()[1], 7);
      EXPECT_EQ(q->data_as<int8_t>()[2], -1);
    } else {
      ASSERT_EQ(q->dtype(), DType::kUInt8);
      EXPECT_EQ(q->data_as<uint8_t>()[0], 8);
      EXPECT_EQ(q->data_as<uint8_t>()[2], 15);
    }
    t->set_raw_data(std::string("\x78", 1));  // one byte short
    const std::string short_bytes = b.bytes();
    auto bad = import_bytes(short_bytes.data(), short_bytes.size(), "q.onnx", ".");
    ASSERT_FALSE(bad.ok());
    EXPECT_ERROR_HAS(bad.status(), "'q'", "raw_data");
  }
}

// A MatMul by int4 weights dequantized in blocks along K (ONNX Runtime's
// 4-bit quantizer in QDQ form) becomes a MatMulNBits whose weights stay
// 4-bit: repacked per column, int4 shifted by 8 with its zero points. A
// dequantization something else reads stays one (dequantized at import).
TEST(OnnxImport, BlockedInt4MatMulBecomesMatMulNBits) {
  for (const bool also_output : {false, true}) {
    SCOPED_TRACE(also_output ? "the weights are an output too" : "only a MatMul reads them");
    ModelBuilder b(21);
    b.input("x", {2, 32});
    // [K 32, N 2]: w[k][n] has the bits of k % 16 (int4 0 to 7, then -8 to -1).
    onnx::TensorProto* w = b.graph().add_initializer();
    w->set_name("w");
    w->set_data_type(22);
    w->add_dims(32);
    w->add_dims(2);
    std::string raw;
    for (int k = 0; k < 32; ++k) raw.push_back(static_cast<char>((k % 16) | ((k % 16) << 4)));
    w->set_raw_data(raw);
    b.init_f32("s", {2, 2}, {0.5f, 1.f, 2.f, 4.f});  // [blocks 2, N 2]
    onnx::TensorProto* z = b.graph().add_initializer();
    z->set_name("z");
    z->set_data_type(22);
    z->add_dims(2);
    z->add_dims(2);
    z->set_raw_data(std::string("\x1f\x32", 2));  // -1, 1, 2, 3
    onnx::NodeProto& dq = b.node("DequantizeLinear", {"w", "s", "z"}, {"wf"}, "dq");
    set_int(dq, "axis", 0);
    set_int(dq, "block_size", 16);
    b.node("MatMul", {"x", "wf"}, {"y"}, "mm");
    b.output("y");
    if (also_output) b.output("wf");
    const std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "q.onnx", ".");
    ASSERT_TRUE(g.ok()) << g.status().message();
    const ir::Node* nbits = nullptr;
    for (const ir::Node& n : g->nodes)
      if (n.op_type == "MatMulNBits") nbits = &n;
    if (also_output) {
      EXPECT_EQ(nbits, nullptr);
      continue;
    }
    ASSERT_NE(nbits, nullptr);
    EXPECT_EQ(nbits->domain, "com.microsoft");
    EXPECT_EQ(nbits->attr_int("K", 0).value(), 32);
    EXPECT_EQ(nbits->attr_int("N", 0).value(), 2);
    EXPECT_EQ(nbits->attr_int("block_size", 0).value(), 16);
    ASSERT_EQ(nbits->inputs.size(), 4u);
    const Tensor* q = g->constant(nbits->inputs[1]);
    const Tensor* scales = g->constant(nbits->inputs[2]);
    const Tensor* zeros = g->constant(nbits->inputs[3]);
    ASSERT_TRUE(q != nullptr && scales != nullptr && zeros != nullptr);
    ASSERT_EQ(q->shape(), (Shape{2, 2, 8}));
    // Column 0 shifted to uint4: 8 to 15, then 0 to 7; two a byte, the first low.
    EXPECT_EQ(q->data_as<uint8_t>()[0], 0x98);
    EXPECT_EQ(q->data_as<uint8_t>()[7], 0x76);
    ASSERT_EQ(scales->numel(), 4);
    EXPECT_EQ(scales->data_as<float>()[1], 2.f);  // column 0, block 1
    EXPECT_EQ(scales->data_as<float>()[2], 1.f);  // column 1, block 0
    ASSERT_EQ(zeros->numel(), 2);
    EXPECT_EQ(zeros->data_as<uint8_t>()[0], (-1 + 8) | ((2 + 8) << 4));  // column 0, blocks 0, 1
    EXPECT_EQ(zeros->data_as<uint8_t>()[1], (1 + 8) | ((3 + 8) << 4));
  }
}

// A 4-bit embedding table stays 4-bit (matmul_nbits.hpp): ONNX Runtime's
// GatherBlockQuantized is kept, int4 and uint4 tables repacked two values a
// uint8 with their zero points (uint4's absent ones, 0, written out, since
// the packed form's absent ones are 8); an 8-bit table becomes a Gather from
// its dequantized floats.
TEST(OnnxImport, FourBitGatherBlockQuantizedStaysFourBit) {
  // elem: ONNX's type of the table (21 uint4, 22 int4, 2 uint8 of 8 bits).
  for (const int elem : {21, 22, 2}) {
    SCOPED_TRACE("table type " + std::to_string(elem));
    ModelBuilder b(21);
    b.input("ids", {3}, onnx::TensorProto::INT64);
    // [2 rows, 32]: each row's value k is k % 16 (int4: 0 to 7, then -8 to -1).
    onnx::TensorProto* t = b.graph().add_initializer();
    t->set_name("table");
    t->set_data_type(elem);
    t->add_dims(2);
    t->add_dims(32);
    std::string raw;
    for (int i = 0; i < (elem == 2 ? 64 : 32); ++i)
      raw.push_back(
          static_cast<char>(elem == 2 ? i % 16 : ((2 * i) % 16) | (((2 * i + 1) % 16) << 4)));
    t->set_raw_data(raw);
    b.init_f32("s", {2, 2}, {0.5f, 1.f, 2.f, 4.f});  // [rows 2, blocks 2]
    std::vector<std::string> ins = {"table", "ids", "s"};
    if (elem == 22) {
      onnx::TensorProto* z = b.graph().add_initializer();
      z->set_name("z");
      z->set_data_type(22);
      z->add_dims(2);
      z->add_dims(2);
      z->set_raw_data(std::string("2", 2));  // -1, 1, 2, 3
      ins.push_back("z");
    }
    onnx::NodeProto& n = b.node("GatherBlockQuantized", ins, {"y"}, "gbq");
    n.set_domain("com.microsoft");
    set_int(n, "block_size", 16);
    if (elem == 2) set_int(n, "bits", 8);
    auto* os = b.model.add_opset_import();
    os->set_domain("com.microsoft");
    os->set_version(1);
    b.output("y");
    const std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "q.onnx", ".");
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_EQ(g->nodes.size(), 1u);
    const ir::Node& node = g->nodes[0];
    if (elem == 2) {
      EXPECT_EQ(node.op_type, "Gather");
      const Tensor* w = g->constant(node.inputs[0]);
      ASSERT_TRUE(w != nullptr && w->dtype() == DType::kFloat32);
      EXPECT_EQ(w->data_as<float>()[17], (17 % 16 - 128) * 1.f);  // row 0, block 1
      continue;
    }
    EXPECT_EQ(node.op_type, "GatherBlockQuantized");
    ASSERT_EQ(node.inputs.size(), 4u);
    const Tensor* q = g->constant(node.inputs[0]);
    const Tensor* zeros = g->constant(node.inputs[3]);
    ASSERT_TRUE(q != nullptr && zeros != nullptr);
    ASSERT_EQ(q->shape(), (Shape{2, 16}));
    ASSERT_EQ(zeros->shape(), (Shape{2, 1}));
    if (elem == 21) {
      EXPECT_EQ(q->data_as<uint8_t>()[0], 0x10);  // values 0 and 1, the first low
      EXPECT_EQ(zeros->data_as<uint8_t>()[1], 0);
    } else {
      EXPECT_EQ(q->data_as<uint8_t>()[0], 0x98);  // 0 and 1 shifted to uint4
      EXPECT_EQ(q->data_as<uint8_t>()[7], 0x76);  // 14 and 15 are -2 and -1: 6 and 7
      EXPECT_EQ(zeros->data_as<uint8_t>()[0], (-1 + 8) | ((1 + 8) << 4));  // row 0, blocks 0, 1
      EXPECT_EQ(zeros->data_as<uint8_t>()[1], (2 + 8) | ((3 + 8) << 4));
    }
  }
}

// The importer takes opsets 1 to 25 (19 to 25 read as 18, opset_adapter.hpp);
// whether an op is known at the model's opset is the registry's question
// (each schema's since_version).
TEST(OnnxImport, OpsetOutsideOneToTwentyFive) {
  for (int64_t v : {0, 26}) {
    ModelBuilder b = add_relu_model();
    b.model.mutable_opset_import(0)->set_version(v);
    std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
    ASSERT_FALSE(g.ok()) << v;
    EXPECT_EQ(g.status().code(), StatusCode::kVersionMismatch);
    EXPECT_ERROR_HAS(g.status(), "m.onnx", ("opset " + std::to_string(v)).c_str());
  }
  for (int64_t v : {1, 6, 7, 17, 18, 19, 25}) {
    ModelBuilder b = add_relu_model();
    b.model.mutable_opset_import(0)->set_version(v);
    std::string bytes = b.bytes();
    EXPECT_TRUE(import_bytes(bytes.data(), bytes.size(), "m.onnx", ".").ok()) << v;
  }
}

TEST(OnnxImport, MissingNodeInput) {
  TempDir dir;
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("y");
  b.node("Add", {"x", "ghost"}, {"y"}, "adder");
  auto g = import_file(b.save(dir));
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "model.onnx", "node 'adder' (Add)", "missing input 'ghost'");
}

TEST(OnnxImport, MissingGraphOutput) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("nowhere");
  b.node("Relu", {"x"}, {"y"});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "m.onnx", "graph output 'nowhere'");
}

TEST(OnnxImport, DuplicateValueNames) {
  {
    ModelBuilder b;
    b.input("x", std::vector<Dim>{3}).output("y");
    b.node("Relu", {"x"}, {"y"}, "a");
    b.node("Neg", {"x"}, {"y"}, "b");
    std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "m.onnx", "duplicate value name 'y'", "node 'b' (Neg)");
  }
  {
    ModelBuilder b;
    b.input("x", std::vector<Dim>{3}).output("y");
    b.init_f32("x2", {1}, {1});
    b.init_f32("x2", {1}, {2});
    b.node("Relu", {"x"}, {"y"});
    std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "duplicate value name 'x2'");
  }
  {
    ModelBuilder b;
    b.input("x", std::vector<Dim>{3}).output("x");
    b.node("Relu", {"x"}, {"x"}, "self");
    std::string bytes = b.bytes();
    auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
    ASSERT_FALSE(g.ok());
    EXPECT_ERROR_HAS(g.status(), "duplicate value name 'x'", "node 'self' (Relu)");
  }
}

TEST(OnnxImport, RawDataSizeMismatch) {
  TempDir dir;
  ModelBuilder b = add_relu_model();
  b.graph().mutable_initializer(0)->set_raw_data(std::string(8, '\0'));  // [3] float needs 12
  auto g = import_file(b.save(dir));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kCorruptData);
  EXPECT_ERROR_HAS(g.status(), "model.onnx", "initializer 'w'", "shape mismatch", "8 bytes", "12");
}

TEST(OnnxImport, TypedFieldCountMismatch) {
  ModelBuilder b = add_relu_model();
  b.init_i64("ids", {4}, {1, 2, 3});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "initializer 'ids'", "shape mismatch", "int64_data has 3");
}

TEST(OnnxImport, DoubleAndUint64InitializersReadTheirTypedFields) {
  ModelBuilder b = add_relu_model();
  auto* t = b.graph().add_initializer();
  t->set_name("d");
  t->set_data_type(onnx::TensorProto::DOUBLE);
  t->add_dims(2);
  t->add_double_data(1.5);
  t->add_double_data(-2.25);
  auto* u = b.graph().add_initializer();
  u->set_name("u");
  u->set_data_type(onnx::TensorProto::UINT32);
  u->add_dims(1);
  u->add_uint64_data(4000000000u);
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const Tensor* d = g->constant(g->find_value("d"));
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->dtype(), DType::kFloat64);
  EXPECT_EQ(d->data_as<double>()[1], -2.25);
  const Tensor* ut = g->constant(g->find_value("u"));
  ASSERT_NE(ut, nullptr);
  EXPECT_EQ(ut->dtype(), DType::kUInt32);
  EXPECT_EQ(ut->data_as<uint32_t>()[0], 4000000000u);
}

TEST(OnnxImport, ComplexInitializerIsUnsupported) {
  ModelBuilder b = add_relu_model();
  auto* t = b.graph().add_initializer();
  t->set_name("c");
  t->set_data_type(onnx::TensorProto::COMPLEX64);
  t->add_float_data(1.0f);
  t->add_float_data(0.0f);
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(g.status(), "m.onnx", "initializer 'c'", "COMPLEX64");
}

TEST(OnnxImport, ConstantNodeWithBadAttribute) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("y");
  set_int(b.node("Constant", {}, {"c"}, "k"), "value_float", 3);
  b.node("Add", {"x", "c"}, {"y"});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "m.onnx", "node 'k' (Constant)", "value_float", "expected FLOAT");
}

// Control-flow bodies: a graph of their own whose reads of the enclosing
// graph are captured inputs, and the node's implicit inputs.
TEST(OnnxImport, GraphAttributesBecomeBodiesThatCaptureTheEnclosingScope) {
  ModelBuilder b;
  b.input("c", std::vector<Dim>{}, onnx::TensorProto::BOOL).input("x", {2}).output("y");
  b.init_f32("one", {1}, {1.f});
  auto& n = b.node("If", {"c"}, {"y"}, "branch");
  onnx::GraphProto* t = attr(n, "then_branch", onnx::AttributeProto::GRAPH)->mutable_g();
  t->set_name("t");
  auto* add = t->add_node();
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("one");
  add->add_output("s");
  set_type(t->add_output(), "s", onnx::TensorProto::FLOAT, std::nullopt);
  onnx::GraphProto* e = attr(n, "else_branch", onnx::AttributeProto::GRAPH)->mutable_g();
  e->set_name("e");
  set_type(e->add_output(), "x", onnx::TensorProto::FLOAT, std::nullopt);
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_TRUE(g.ok()) << g.status().message();
  const ir::Node& node = g->nodes[0];
  ASSERT_EQ(node.implicit_inputs, 2u);  // x and one, each once
  ASSERT_EQ(node.inputs.size(), 3u);
  EXPECT_EQ(g->values[node.inputs[1]].name, "x");
  EXPECT_EQ(g->values[node.inputs[2]].name, "one");
  const ir::Attribute* then_branch = node.attr("then_branch");
  ASSERT_NE(then_branch, nullptr);
  ASSERT_EQ(then_branch->type, ir::AttrType::kGraph);
  const ir::Graph& body = *then_branch->g;
  EXPECT_EQ(body.captured, 2u);
  ASSERT_EQ(body.inputs.size(), 2u);
  EXPECT_EQ(body.values[body.inputs[0]].name, "x");
  EXPECT_EQ(body.outputs.size(), 1u);
  EXPECT_EQ(node.attr("else_branch")->g->captured, 1u);  // its output is x itself

  // A body reading a name nothing defines is an error naming the node.
  add->set_input(1, "nowhere");
  bytes = b.bytes();
  auto bad = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_FALSE(bad.ok());
  EXPECT_ERROR_HAS(bad.status(), "node 'branch' (If)", "then_branch", "nowhere");
}

TEST(OnnxImport, UnsupportedInputElementType) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}, onnx::TensorProto::STRING).output("y");
  b.node("Relu", {"x"}, {"y"});
  std::string bytes = b.bytes();
  auto g = import_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "graph input 'x'", "STRING");
}

// The two errors the importer leaves to infer_shapes, checked end to end.
TEST(OnnxImport, UnknownOpIsReportedByInferShapes) {
  TempDir dir;
  ModelBuilder b;
  b.input("x", std::vector<Dim>{3}).output("y");
  b.node("FooBar", {"x"}, {"y"}, "n1");
  auto g = import_file(b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  Status s = ir::infer_shapes(*g);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_ERROR_HAS(s, "model.onnx",
                   "node 'n1' (FooBar): unsupported operator 'FooBar' (domain '')");
}

TEST(OnnxImport, WrongAttributeTypeIsReportedByInferShapes) {
  TempDir dir;
  ModelBuilder b;
  b.input("x", std::vector<Dim>{1, 1, 5, 5}).output("y");
  b.weight("w", {1, 1, 3, 3});
  set_float(b.node("Conv", {"x", "w"}, {"y"}, "conv"), "strides", 1.f);
  auto g = import_file(b.save(dir));
  ASSERT_TRUE(g.ok()) << g.status().message();
  Status s = ir::infer_shapes(*g);
  ASSERT_FALSE(s.ok());
  EXPECT_ERROR_HAS(s, "model.onnx", "node 'conv' (Conv)", "attribute 'strides' has type FLOAT",
                   "expected INTS");
}

}  // namespace
}  // namespace backplane
