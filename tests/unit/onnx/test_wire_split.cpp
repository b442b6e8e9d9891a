// Tests of onnx/wire_split: the model without its weights' raw_data, where
// each lies in the input, and the importer reading weights from there (each
// held once while a model loads).
#include "onnx/importer.hpp"
#include "onnx/wire_split.hpp"
#include "support/expect_error.hpp"
#include "support/memory.hpp"
#include "support/model_builder.hpp"

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace backplane {
namespace {

using namespace test;  // ModelBuilder, Dim, TempDir
using onnx_import::ByteRange;
using onnx_import::import_bytes;
using onnx_import::import_file;
using onnx_import::split_raw_data;

// y = (x + a) * b, with `a` as raw_data and `b` as float_data.
ModelBuilder two_weight_model(int64_t n) {
  ModelBuilder b;
  b.input("x", std::vector<Dim>{n}).output("y", std::vector<Dim>{n});
  std::vector<float> a(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
  b.init_f32("a", {n}, a);
  onnx::TensorProto* t = b.model.mutable_graph()->add_initializer();
  t->set_name("b");
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_dims(n);
  for (int64_t i = 0; i < n; ++i) t->add_float_data(static_cast<float>(i % 7));
  b.node("Add", {"x", "a"}, {"s"}, "add");
  b.node("Mul", {"s", "b"}, {"y"}, "mul");
  return b;
}

TEST(WireSplit, RestIsTheModelWithoutRawDataAndRangesPointAtIt) {
  ModelBuilder b = two_weight_model(2000);
  const std::string bytes = b.bytes();
  auto split = split_raw_data(bytes.data(), bytes.size());
  ASSERT_TRUE(split.has_value());
  ASSERT_EQ(split->raw_data.size(), 2u);
  ASSERT_TRUE(split->raw_data[0].has_value());
  EXPECT_FALSE(split->raw_data[1].has_value());  // float_data stays in the rest
  const ByteRange r = *split->raw_data[0];
  EXPECT_EQ(split->raw_bytes, 8000u);
  ASSERT_EQ(r.size, 8000u);
  EXPECT_EQ(bytes.substr(r.offset, r.size), b.model.graph().initializer(0).raw_data());

  onnx::ModelProto rest;
  ASSERT_TRUE(rest.ParseFromString(split->rest));
  EXPECT_FALSE(rest.graph().initializer(0).has_raw_data());
  EXPECT_EQ(rest.graph().initializer(1).float_data_size(), 2000);
  // Put back, it is the model again, byte for byte.
  rest.mutable_graph()->mutable_initializer(0)->set_raw_data(bytes.substr(r.offset, r.size));
  EXPECT_EQ(rest.SerializeAsString(), bytes);
}

// A small raw_data (a shape, axes, a scale) stays in the rest, where the
// import's rewrites read it.
TEST(WireSplit, SmallRawDataStaysInTheRest) {
  ModelBuilder b = two_weight_model(2000);
  b.init_f32("scale", {2}, {0.5f, 2.0f});
  const std::string bytes = b.bytes();
  auto split = split_raw_data(bytes.data(), bytes.size());
  ASSERT_TRUE(split.has_value());
  ASSERT_EQ(split->raw_data.size(), 3u);
  EXPECT_TRUE(split->raw_data[0].has_value());
  EXPECT_FALSE(split->raw_data[2].has_value());
  onnx::ModelProto rest;
  ASSERT_TRUE(rest.ParseFromString(split->rest));
  EXPECT_EQ(rest.graph().initializer(2).raw_data(), b.model.graph().initializer(2).raw_data());
}

TEST(WireSplit, SubgraphInitializersStayInTheRest) {
  ModelBuilder b = two_weight_model(4);
  onnx::NodeProto* n = b.model.mutable_graph()->add_node();
  n->set_op_type("If");
  onnx::AttributeProto* attr = n->add_attribute();
  attr->set_name("then_branch");
  attr->set_type(onnx::AttributeProto::GRAPH);
  onnx::TensorProto* inner = attr->mutable_g()->add_initializer();
  inner->set_name("inner");
  inner->set_data_type(onnx::TensorProto::FLOAT);
  inner->set_raw_data(std::string(16, '\x01'));
  const std::string bytes = b.bytes();
  auto split = split_raw_data(bytes.data(), bytes.size());
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->raw_data.size(), 2u);  // the main graph's only
  onnx::ModelProto rest;
  ASSERT_TRUE(rest.ParseFromString(split->rest));
  const onnx::GraphProto& body = rest.graph().node(2).attribute(0).g();
  EXPECT_EQ(body.initializer(0).raw_data(), std::string(16, '\x01'));
}

TEST(WireSplit, MalformedInputIsLeftToProtobuf) {
  ModelBuilder b = two_weight_model(64);
  const std::string bytes = b.bytes();
  // Every cut: no crash, and a range it gives lies inside what it was given.
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto split = split_raw_data(bytes.data(), n);
    if (!split) continue;
    for (const auto& r : split->raw_data)
      if (r) {
        EXPECT_LE(r->offset + r->size, n);
      }
  }
  // A graph field given twice is merged by protobuf, not here.
  onnx::ModelProto twice;
  twice.mutable_graph()->set_name("second");
  const std::string doubled = bytes + twice.SerializeAsString();
  EXPECT_FALSE(split_raw_data(doubled.data(), doubled.size()).has_value());
  // So is a raw_data given twice (the last one counts).
  onnx::ModelProto again = b.model;
  onnx::TensorProto extra;
  extra.set_raw_data(std::string(8, '\0'));
  std::string t = again.graph().initializer(0).SerializeAsString() + extra.SerializeAsString();
  again.mutable_graph()->mutable_initializer(0)->ParseFromString(t);
  const std::string raw_twice = again.SerializeAsString();
  // (Serialized again, protobuf writes the one that counts.)
  EXPECT_TRUE(split_raw_data(raw_twice.data(), raw_twice.size()).has_value());
  const std::string garbage = "\x3a\xff\xff\xff\xff\x0f";  // field 7, a length past the end
  EXPECT_FALSE(split_raw_data(garbage.data(), garbage.size()).has_value());
}

TEST(WireSplit, ImportReadsWeightsFromTheInput) {
  TempDir dir;
  ModelBuilder b = two_weight_model(1000);
  for (bool from_file : {false, true}) {
    SCOPED_TRACE(from_file ? "import_file" : "import_bytes");
    const std::string bytes = b.bytes();
    auto g = from_file ? import_file(b.save(dir))
                       : import_bytes(bytes.data(), bytes.size(), "mem.onnx", dir.path());
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Tensor* a = g->constant(g->find_value("a"));
    const Tensor* w = g->constant(g->find_value("b"));
    ASSERT_NE(a, nullptr);
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(a->shape(), (Shape{1000}));
    EXPECT_EQ(a->data_as<float>()[999], 499.5f);
    EXPECT_EQ(w->data_as<float>()[999], 999 % 7);
  }
}

TEST(WireSplit, RawDataOfTheWrongSizeNamesTheInitializer) {
  TempDir dir;
  ModelBuilder b = two_weight_model(1000);
  b.model.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(3996);
  auto g = import_file(b.save(dir));
  ASSERT_FALSE(g.ok());
  EXPECT_ERROR_HAS(g.status(), "model.onnx", "initializer 'a'", "raw_data");
}

// Loading a model holds its weights once: not the file's pages, protobuf's
// copy and the graph's tensors at the same time.
TEST(WireSplit, ImportHoldsTheWeightsOnce) {
  TempDir dir;
  constexpr int64_t kFloats = int64_t{16} << 20;  // 64 MiB
  ModelBuilder b = two_weight_model(4);
  onnx::TensorProto* big = b.model.mutable_graph()->add_initializer();
  big->set_name("big");
  big->set_data_type(onnx::TensorProto::FLOAT);
  big->add_dims(kFloats);
  big->mutable_raw_data()->assign(static_cast<size_t>(kFloats) * 4, '\x01');
  const std::string path = b.save(dir);
  b.model.Clear();

  const test::MemoryGrowth grown =
      test::memory_growth_in_child([&] { return import_file(path).ok(); });
  ASSERT_TRUE(grown.ok) << "the child could not import the model";
  const long weights_kb = (kFloats * 4) >> 10;
  EXPECT_LT(grown.peak_kb, weights_kb * 3 / 2)
      << "peak grew by " << grown.peak_kb << " kB for " << weights_kb << " kB of weights";
}

}  // namespace
}  // namespace backplane
