// Weight sharing: methods compiled together share one NamedBlobStore, so a
// weight two methods use (the same model twice, or two models with an equal
// initializer under different names) is stored once in the .bpk.
#include "artifact_util.hpp"

#include <gtest/gtest.h>
#include "support/model_builder.hpp"

namespace backplane::artifact_test {
namespace {

class Sharing : public TempDirTest {};

TEST_F(Sharing, SameModelTwiceStoresItsWeightsOnce) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  const std::string name = "squeezenet1_1";
  const Tensor input = model_input(name);
  auto one = rt->compile({{"a", model_path(name)}}, path("one.bpk"), cpuref_compile());
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  auto two = rt->compile({{"a", model_path(name)}, {"b", model_path(name)}}, path("two.bpk"),
                         cpuref_compile());
  ASSERT_TRUE(two.ok()) << two.status().to_string();

  // (squeezenet1_1 has a few equal tensors of its own: requested >= stored.)
  EXPECT_GE(one->requested_bytes, one->stored_bytes);
  EXPECT_GT(one->stored_bytes, 4'000'000u);  // squeezenet1_1 has ~1.2 M float weights
  EXPECT_EQ(two->named_data_keys, 2 * one->named_data_keys);
  EXPECT_EQ(two->requested_bytes, 2 * one->requested_bytes);
  EXPECT_EQ(two->stored_bytes, one->stored_bytes);
  EXPECT_EQ(two->file_bytes, fs::file_size(path("two.bpk")));
  EXPECT_LT(static_cast<double>(two->file_bytes), 1.1 * static_cast<double>(one->file_bytes))
      << two->file_bytes << " vs " << one->file_bytes;

  nlohmann::json j = inspect_json(path("two.bpk"));
  ASSERT_EQ(j["methods"].size(), 2u);
  EXPECT_EQ(j["named_data_bytes"]["requested"], two->requested_bytes);
  EXPECT_EQ(j["named_data_bytes"]["stored"], two->stored_bytes);
  EXPECT_EQ(j["named_data_bytes"]["saved_by_dedup"], two->requested_bytes - one->stored_bytes);
  // Key "a/w" and "b/w" name the same segment.
  std::map<std::string, uint32_t> segment_of;
  for (const auto& d : j["named_data"]) segment_of[d["key"]] = d["segment"];
  size_t shared = 0;
  for (const auto& [key, seg] : segment_of)
    if (key.rfind("a/", 0) == 0) {
      auto other = segment_of.find("b/" + key.substr(2));
      ASSERT_NE(other, segment_of.end()) << key;
      EXPECT_EQ(other->second, seg) << key;
      ++shared;
    }
  EXPECT_EQ(shared, one->named_data_keys);

  // Both methods run and agree with each other and with the ONNX run.
  RunResult ref = run_model(*rt, model_path(name), cpuref_only(), input);
  ASSERT_TRUE(ref.status.ok());
  for (const char* m : {"a", "b"}) {
    ModelOptions mo;
    mo.method = m;
    RunResult r = run_model(*rt, path("two.bpk"), mo, input);
    ASSERT_TRUE(r.status.ok()) << m << ": " << r.status.to_string();
    EXPECT_TRUE(bitwise_equal(r.outputs, ref.outputs)) << m;
  }
}

// Two different models, Y = Relu(X W) and Y = X W + B, whose W is the same
// 256 KiB under different initializer names.
void write_model(const std::string& file, bool with_bias, const std::string& w_name,
                 const std::vector<float>& w, const std::vector<float>& b) {
  test::ModelBuilder m(17, with_bias ? "affine" : "relu_matmul");
  m.input("X", {1, 128}).output("Y", {1, 512});
  m.init_f32(w_name, {128, 512}, w);
  m.node("MatMul", {"X", w_name}, {"XW"}, "mm");
  if (with_bias) {
    m.init_f32("B", {512}, b);
    m.node("Add", {"XW", "B"}, {"Y"}, "last");
  } else {
    m.node("Relu", {"XW"}, {"Y"}, "last");
  }
  m.save_as(file);
}

TEST_F(Sharing, TwoModelsWithAnEqualInitializerStoreItOnce) {
  std::vector<float> w(128 * 512), b(512);
  for (size_t i = 0; i < w.size(); ++i)
    w[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i) / 512.0f;
  write_model(path("relu.onnx"), false, "W", w, b);
  write_model(path("affine.onnx"), true, "weight", w, b);

  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  auto single = rt->compile({{"relu", path("relu.onnx")}}, path("single.bpk"), cpuref_compile());
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  auto both = rt->compile({{"relu", path("relu.onnx")}, {"affine", path("affine.onnx")}},
                          path("both.bpk"), cpuref_compile());
  ASSERT_TRUE(both.ok()) << both.status().to_string();
  const size_t w_bytes = w.size() * 4, b_bytes = b.size() * 4;
  EXPECT_EQ(single->stored_bytes, w_bytes);
  EXPECT_EQ(both->named_data_keys, 3u);
  EXPECT_EQ(both->requested_bytes, 2 * w_bytes + b_bytes);
  EXPECT_EQ(both->stored_bytes, w_bytes + b_bytes);
  EXPECT_LT(static_cast<double>(both->file_bytes), 1.1 * static_cast<double>(single->file_bytes))
      << both->file_bytes << " vs " << single->file_bytes;

  nlohmann::json j = inspect_json(path("both.bpk"));
  EXPECT_EQ(j["named_data_bytes"]["saved_by_dedup"], w_bytes);
  std::map<std::string, nlohmann::json> by_key;
  for (const auto& d : j["named_data"]) by_key[d["key"]] = d;
  ASSERT_TRUE(by_key.count("relu/W") && by_key.count("affine/weight")) << j["named_data"].dump();
  EXPECT_EQ(by_key["relu/W"]["segment"], by_key["affine/weight"]["segment"]);
  EXPECT_EQ(by_key["relu/W"]["alignment"], 4096);  // 256 KiB: page-aligned

  // Each method computes what its ONNX model computes.
  Tensor x = Tensor::copy_of(DType::kFloat32, {1, 128}, std::vector<float>(128, 0.25f).data());
  for (const std::string m : {"relu", "affine"}) {
    RunResult ref = run_model(*rt, path(m + ".onnx"), cpuref_only(), x);
    ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();
    ModelOptions mo;
    mo.method = m;
    RunResult r = run_model(*rt, path("both.bpk"), mo, x);
    ASSERT_TRUE(r.status.ok()) << r.status.to_string();
    EXPECT_TRUE(bitwise_equal(r.outputs, ref.outputs)) << m;
  }
}

TEST_F(Sharing, ExternalDataIsSharedToo) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  CompileOptions co = cpuref_compile();
  co.external_data = path("w.bpd");
  auto one = rt->compile({{"a", model_path("tiny_cnn")}}, path("one.bpk"), co);
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  co.external_data = path("w2.bpd");
  auto two = rt->compile({{"a", model_path("tiny_cnn")}, {"b", model_path("tiny_cnn")}},
                         path("two.bpk"), co);
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(two->stored_bytes, one->stored_bytes);
  EXPECT_EQ(fs::file_size(path("w2.bpd")), fs::file_size(path("w.bpd")));
}

}  // namespace
}  // namespace backplane::artifact_test
