// Tests of Einsum's rewrite at import (src/onnx/einsum.cpp): which equations
// become Transpose/ReduceSum/Unsqueeze/MatMul/Squeeze, and that every one
// computes what the equation says (a plain loop over every index here), at
// opset 12 (axes as attributes) and 13 (axes as inputs).
#include "onnx/einsum.hpp"
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <onnx/onnx_pb.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace backplane {
namespace {

using namespace test;  // ModelBuilder, TempDir, set_string

struct Case {
  std::string equation;
  std::vector<Dims> shapes;
  bool rewritten;  // covered by the rule, or left whole
};

std::string output_of(const std::string& equation, const std::vector<std::string>& terms) {
  const size_t arrow = equation.find("->");
  std::string out;
  if (arrow != std::string::npos) {
    for (char c : equation.substr(arrow + 2))
      if (c != ' ') out += c;
    return out;
  }
  std::string all;
  for (const auto& t : terms) all += t;
  for (char c : all)
    if (std::count(all.begin(), all.end(), c) == 1) out += c;
  std::sort(out.begin(), out.end());
  return out;
}

// The equation evaluated by a loop over every assignment of its letters.
std::vector<double> reference(const Case& c, const std::vector<std::vector<float>>& data,
                              Dims* out_shape) {
  std::string eq = c.equation;
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  std::vector<std::string> terms;
  const std::string lhs = eq.substr(0, eq.find("->"));
  for (size_t s = 0;;) {
    const size_t comma = lhs.find(',', s);
    terms.push_back(lhs.substr(s, comma - s));
    if (comma == std::string::npos) break;
    s = comma + 1;
  }
  const std::string out = output_of(eq, terms);
  std::map<char, int64_t> size;
  for (size_t t = 0; t < terms.size(); ++t)
    for (size_t i = 0; i < terms[t].size(); ++i) size[terms[t][i]] = c.shapes[t][i];
  std::string letters;
  for (const auto& [l, n] : size) letters += l;
  out_shape->clear();
  for (char l : out) out_shape->push_back(size[l]);
  int64_t out_n = 1;
  for (int64_t d : *out_shape) out_n *= d;
  std::vector<double> y(static_cast<size_t>(out_n), 0.0);
  std::map<char, int64_t> at;
  for (char l : letters) at[l] = 0;
  auto offset = [&](const std::string& term, const Dims& shape) {
    int64_t o = 0;
    for (size_t i = 0; i < term.size(); ++i) o = o * shape[i] + at[term[i]];
    return o;
  };
  for (;;) {
    double p = 1;
    for (size_t t = 0; t < terms.size(); ++t) p *= data[t][offset(terms[t], c.shapes[t])];
    y[offset(out, *out_shape)] += p;
    size_t i = letters.size();
    while (i > 0 && ++at[letters[i - 1]] == size[letters[i - 1]]) at[letters[--i]] = 0;
    if (i == 0) break;
  }
  return y;
}

ModelBuilder einsum_model(const Case& c, int64_t opset) {
  ModelBuilder b(opset);
  std::vector<std::string> ins;
  for (size_t i = 0; i < c.shapes.size(); ++i) {
    ins.push_back("x" + std::to_string(i));
    std::vector<Dim> dims(c.shapes[i].begin(), c.shapes[i].end());
    b.input(ins.back(), dims);
  }
  set_string(b.node("Einsum", ins, {"y"}, "attention"), "equation", c.equation);
  b.untyped_output("y");
  return b;
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"bghid,bghjd->bghij", {{2, 1, 2, 3, 4}, {2, 1, 2, 5, 4}}, true},  // MaxViT's q k^T
      {"B G H I J, B G H J D -> B G H I D", {{2, 1, 2, 3, 5}, {2, 1, 2, 5, 4}}, true},
      {"ij,jk->ik", {{3, 4}, {4, 5}}, true},
      {"ij,jk", {{3, 4}, {4, 5}}, true},  // implicit output: "ik"
      {"bsh,hd->bsd", {{2, 3, 4}, {4, 5}}, true},
      {"bsh,hd->dbs", {{2, 3, 4}, {4, 5}}, true},
      {"i,j->ij", {{3}, {4}}, true},
      {"i,i->", {{5}, {5}}, true},
      {"bij,bkj->bik", {{2, 3, 4}, {2, 5, 4}}, true},
      {"ij,kl->ikjl", {{2, 3}, {4, 2}}, true},
      {"bij,bjk->b", {{2, 3, 4}, {2, 4, 5}}, true},  // i and k summed first
      {"bij->bji", {{2, 3, 4}}, true},
      {"ij->i", {{3, 4}}, true},
      {"ij->ij", {{3, 4}}, true},
      {"ijk,jkl->il", {{2, 3, 4}, {3, 4, 5}}, false},  // two contracted letters
      {"ii->i", {{3, 3}}, false},                      // a diagonal
  };
  return all;
}

class EinsumRewrite : public testing::TestWithParam<int64_t> {};

TEST_P(EinsumRewrite, EveryEquationComputesWhatItSays) {
  const int64_t opset = GetParam();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok()) << rt.status().message();
  TempDir dir;
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.equation);
    ModelBuilder b = einsum_model(c, opset);
    onnx::ModelProto m = b.model;
    EXPECT_EQ(onnx_import::decompose_einsums(m), c.rewritten ? 1 : 0);
    bool einsum_left = false;
    for (const onnx::NodeProto& n : m.graph().node()) {
      einsum_left = einsum_left || n.op_type() == "Einsum";
      if (c.rewritten) {
        EXPECT_EQ(n.name().rfind("attention/", 0), 0u) << n.name();
      }
    }
    EXPECT_EQ(einsum_left, !c.rewritten);
    EXPECT_EQ(m.graph().node(m.graph().node_size() - 1).output(0), "y");

    auto model = (*rt)->load_model(b.save(dir, "einsum.onnx"));
    ASSERT_TRUE(model.ok()) << model.status().message();
    auto session = (*model)->create_session();
    ASSERT_TRUE(session.ok());
    std::vector<std::vector<float>> data;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      int64_t n = 1;
      for (int64_t d : c.shapes[i]) n *= d;
      data.emplace_back(static_cast<size_t>(n));
      for (float& v : data.back()) v = u(rng);
      ASSERT_TRUE((*session)
                      ->set_input(i, Tensor::copy_of(DType::kFloat32, c.shapes[i], data.back().data()))
                      .ok());
    }
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    Dims shape;
    const std::vector<double> want = reference(c, data, &shape);
    const Tensor& y = (*session)->output(0);
    ASSERT_EQ(y.shape(), shape);
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(y.data_as<float>()[i], want[i], 1e-5) << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Opsets, EinsumRewrite, testing::Values(12, 13));

TEST(EinsumRewrite, SubgraphsAreRewrittenToo) {
  ModelBuilder b(13);
  b.input("c", std::vector<Dim>{}, onnx::TensorProto::BOOL);
  b.input("x", {3, 4});
  onnx::NodeProto& n = b.node("If", {"c"}, {"y"}, "branch");
  for (const char* branch : {"then_branch", "else_branch"}) {
    onnx::GraphProto& g = *attr(n, branch, onnx::AttributeProto::GRAPH)->mutable_g();
    g.set_name(branch);
    onnx::NodeProto& e = *g.add_node();
    e.set_op_type("Einsum");
    e.set_name(std::string(branch) + "_einsum");
    e.add_input("x");
    e.add_output(std::string(branch) + "_y");
    set_string(e, "equation", "ij->ji");
    g.add_output()->set_name(std::string(branch) + "_y");
  }
  b.untyped_output("y");
  onnx::ModelProto m = b.model;
  EXPECT_EQ(onnx_import::decompose_einsums(m), 2);
  for (const onnx::AttributeProto& a : m.graph().node(0).attribute())
    for (const onnx::NodeProto& inner : a.g().node()) EXPECT_NE(inner.op_type(), "Einsum");
}

// The model of `b` run through the public API on `inputs`: a copy of its
// first output (the session's own lives only as long as the session).
Tensor run_model(const ModelBuilder& b, const std::vector<Tensor>& inputs) {
  TempDir dir;
  auto rt = Runtime::create({});
  EXPECT_TRUE(rt.ok());
  auto model = (*rt)->load_model(b.save(dir));
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (!model.ok()) return {};
  auto session = (*model)->create_session();
  EXPECT_TRUE(session.ok());
  for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE((*session)->set_input(i, inputs[i]).ok());
  EXPECT_TRUE((*session)->run().ok());
  return (*session)->output(0).clone();
}

// An operand whose type is not found (it comes from an operator the type
// walk does not follow) takes the other's: ONNX gives both one type. Types
// found to differ leave the Einsum whole.
TEST(EinsumRewrite, AnOperandOfUnknownTypeTakesTheOthers) {
  ModelBuilder b(13);
  b.input("x", {3, 4});
  b.input("w", {4, 5});
  b.node("Sign", {"x"}, {"s"}, "sign");
  set_string(b.node("Einsum", {"s", "w"}, {"y"}, "e"), "equation", "ij,jk->ik");
  b.untyped_output("y");
  onnx::ModelProto m = b.model;
  EXPECT_EQ(onnx_import::decompose_einsums(m), 1);
  std::vector<float> x(12), w(20, 0.5f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = i % 3 == 0 ? -2.0f : 3.0f;
  const Tensor y = run_model(b, {Tensor::copy_of(DType::kFloat32, {3, 4}, x.data()),
                                 Tensor::copy_of(DType::kFloat32, {4, 5}, w.data())});
  ASSERT_EQ(y.shape(), (Dims{3, 5}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 5; ++k) {
      float want = 0;
      for (int64_t j = 0; j < 4; ++j) want += (x[i * 4 + j] < 0 ? -1.0f : 1.0f) * 0.5f;
      EXPECT_EQ(y.data_as<float>()[i * 5 + k], want) << i << "," << k;
    }

  ModelBuilder mixed(13);
  mixed.input("x", {3, 4});
  mixed.input("w", {4, 5}, onnx::TensorProto::DOUBLE);
  set_string(mixed.node("Einsum", {"x", "w"}, {"y"}, "e"), "equation", "ij,jk->ik");
  mixed.untyped_output("y");
  onnx::ModelProto mm = mixed.model;
  EXPECT_EQ(onnx_import::decompose_einsums(mm), 0);
}

// Only a float32 Einsum is decomposed (for CpuOneDnn): another dtype's
// stays whole, and runs on CpuRef.
TEST(EinsumRewrite, OtherDtypesStayWhole) {
  ModelBuilder b(13);
  b.input("x0", {3, 4}, onnx::TensorProto::DOUBLE);
  b.input("x1", {4, 5}, onnx::TensorProto::DOUBLE);
  set_string(b.node("Einsum", {"x0", "x1"}, {"y"}, "e"), "equation", "ij,jk->ik");
  b.untyped_output("y");
  onnx::ModelProto m = b.model;
  EXPECT_EQ(onnx_import::decompose_einsums(m), 0);
  std::vector<double> x0(12, 0.5), x1(20, 2.0);
  const Tensor y = run_model(b, {Tensor::copy_of(DType::kFloat64, {3, 4}, x0.data()),
                                 Tensor::copy_of(DType::kFloat64, {4, 5}, x1.data())});
  ASSERT_EQ(y.shape(), (Dims{3, 5}));
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data_as<double>()[i], 4.0);
}

}  // namespace
}  // namespace backplane
