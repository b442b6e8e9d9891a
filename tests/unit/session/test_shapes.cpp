// Shapes that change from run to run: one loaded model, one session, any
// input shapes consistent with the model; specialisations cached per
// signature, bounded, built once; clear errors for shapes that do not fit;
// inputs and outputs bound to the caller's memory.
#include "support/model_builder.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace backplane {
namespace {

namespace bt = backplane::test;

constexpr int kHidden = 8;

// x[batch,seq,8], mask[batch,seq] -> y = Softmax(Reshape(x W + b + mask[...,None], Shape(x)))
// The Reshape's target comes from Shape(x): a constant only once the shapes
// of a run are known.
std::string write_model(const bt::TempDir& dir) {
  bt::ModelBuilder b;
  b.input("x", {"batch", "seq", kHidden});
  b.input("mask", {"batch", "seq"});
  b.random_weight("W", {kHidden, kHidden});
  b.random_weight("bias", {kHidden});
  b.init_i64("axes", {1}, {2});
  b.node("MatMul", {"x", "W"}, {"xw"}, "matmul");
  b.node("Add", {"xw", "bias"}, {"xwb"}, "add_bias");
  b.node("Unsqueeze", {"mask", "axes"}, {"m3"}, "unsqueeze");
  b.node("Add", {"xwb", "m3"}, {"logits"}, "add_mask");
  b.node("Shape", {"x"}, {"x_shape"}, "shape");
  b.node("Reshape", {"logits", "x_shape"}, {"r"}, "reshape");
  bt::set_int(b.node("Softmax", {"r"}, {"y"}, "softmax"), "axis", -1);
  b.output("y", {"batch", "seq", kHidden});
  return b.save(dir);
}

// The same in plain C++, from the model's own weights (read back from the file).
struct Reference {
  std::vector<float> w, bias;
  explicit Reference(const std::string& path) {
    onnx::ModelProto m;
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(m.ParseFromIstream(&in));
    for (const auto& t : m.graph().initializer()) {
      if (t.name() != "W" && t.name() != "bias") continue;
      std::vector<float> v(t.raw_data().size() / sizeof(float));
      std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
      (t.name() == "W" ? w : bias) = v;
    }
  }
  std::vector<float> operator()(const Tensor& x, const Tensor& mask) const {
    const int64_t rows = x.shape()[0] * x.shape()[1];
    std::vector<float> y(static_cast<size_t>(rows * kHidden));
    for (int64_t r = 0; r < rows; ++r) {
      double logits[kHidden];
      double mx = -1e300;
      for (int j = 0; j < kHidden; ++j) {
        double s = bias[j] + mask.data_as<float>()[r];
        for (int k = 0; k < kHidden; ++k)
          s += double(x.data_as<float>()[r * kHidden + k]) * w[k * kHidden + j];
        logits[j] = s;
        mx = std::max(mx, s);
      }
      double sum = 0;
      for (double& l : logits) sum += (l = std::exp(l - mx));
      for (int j = 0; j < kHidden; ++j) y[r * kHidden + j] = static_cast<float>(logits[j] / sum);
    }
    return y;
  }
};

Tensor filled(Shape shape, uint32_t seed) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  for (int64_t i = 0; i < t.numel(); ++i) t.data_as<float>()[i] = d(rng);
  return t;
}

std::shared_ptr<Runtime> runtime() {
  RuntimeOptions o;
  o.log_level = LogLevel::kError;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().message();
  return *rt;
}

void expect_close(const Tensor& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got.data_as<float>()[i], want[i], 1e-4 * std::max(1.0f, std::fabs(want[i])))
        << what << " element " << i;
}

const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {1, 7}, {2, 5}, {3, 16}, {1, 64}, {4, 3}, {2, 33}, {1, 2}, {5, 9}, {2, 128}};

class Shapes : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(Shapes, OneSessionRunsEveryShape) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  Reference ref(path);
  auto rt = runtime();
  ModelOptions mo;
  mo.backends = GetParam();
  auto model = rt->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  // Open shapes: nothing is planned before the first run, and inputs say so.
  EXPECT_TRUE((*model)->partitions().empty());
  EXPECT_EQ((*model)->inputs()[0].shape, (Shape{-1, -1, kHidden}));
  EXPECT_EQ((*model)->inputs()[0].dim_names, (std::vector<std::string>{"batch", "seq", ""}));
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok()) << session.status().message();
  Session& s = **session;
  double first_round_build_ms = 0;
  for (int round = 0; round < 2; ++round) {
    if (round == 1) first_round_build_ms = (*model)->specialization_stats().build_ms;
    for (size_t k = 0; k < kShapes.size(); ++k) {
      auto [batch, seq] = kShapes[k];
      Tensor x = filled({batch, seq, kHidden}, static_cast<uint32_t>(k));
      Tensor mask = filled({batch, seq}, static_cast<uint32_t>(100 + k));
      ASSERT_TRUE(s.set_input("x", x).ok());
      ASSERT_TRUE(s.set_input("mask", mask).ok());
      Status st = s.run();
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(s.output(0).shape(), (Shape{batch, seq, kHidden}));
      expect_close(s.output(0), ref(x, mask),
                   "batch " + std::to_string(batch) + " seq " + std::to_string(seq));
    }
  }
  SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_EQ(stats.builds, kShapes.size());  // the second round built nothing
  // Building took time; hits add none.
  EXPECT_GT(first_round_build_ms, 0.0);
  EXPECT_EQ(stats.build_ms, first_round_build_ms);
  EXPECT_EQ(stats.misses, kShapes.size());
  EXPECT_EQ(stats.hits, kShapes.size());  // every shape of the second round
  EXPECT_EQ(stats.cached, kShapes.size());
  EXPECT_FALSE((*model)->partitions().empty());  // the first run's plan
}

INSTANTIATE_TEST_SUITE_P(Backends, Shapes,
                         ::testing::Values(std::vector<std::string>{"CpuRef"},
                                           std::vector<std::string>{}),
                         [](const auto& info) {
                           return info.param.empty() ? std::string("Default") : info.param[0];
                         });

TEST(ShapesErrors, ShapesThatDoNotFitAreClearErrorsAndTheSessionGoesOn) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  Reference ref(path);
  auto model = runtime()->load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Session& s = **session;

  // Wrong rank.
  Status st = s.set_input("x", filled({2, kHidden}, 1));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'x'"), std::string::npos) << st.message();
  // A fixed dim that differs.
  st = s.set_input("x", filled({1, 4, kHidden + 1}, 1));
  EXPECT_NE(st.message().find("[batch,seq,8]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("dim 2"), std::string::npos) << st.message();

  // One symbol, two sizes: x says seq=4, mask says seq=5.
  ASSERT_TRUE(s.set_input("x", filled({1, 4, kHidden}, 1)).ok());
  ASSERT_TRUE(s.set_input("mask", filled({1, 5}, 2)).ok());
  st = s.run();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("'seq'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("input 'mask' dim 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("input 'x' dim 1"), std::string::npos) << st.message();

  // And the session still works.
  Tensor x = filled({1, 5, kHidden}, 3), mask = filled({1, 5}, 4);
  ASSERT_TRUE(s.set_input("x", x).ok());
  ASSERT_TRUE(s.set_input("mask", mask).ok());
  st = s.run();
  ASSERT_TRUE(st.ok()) << st.message();
  expect_close(s.output(0), ref(x, mask), "after the errors");
}

TEST(ShapesCache, FixedShapesCompileForThoseShapesAtLoad) {
  // A model whose inputs all have fixed shapes has one signature: its
  // partitions are compiled for it when the model loads, not compiled for
  // every shape and then made for these at the first run (which would cost
  // the first run what loading should). A symbolic dim keeps the
  // shape-polymorphic compile.
  bt::TempDir dir;
  bt::ModelBuilder fixed;
  fixed.input("x", {2, 3, kHidden}).random_weight("W", {kHidden, kHidden});
  fixed.node("MatMul", {"x", "W"}, {"xw"});
  bt::set_int(fixed.node("Softmax", {"xw"}, {"y"}), "axis", -1);
  fixed.output("y");
  auto model = runtime()->load_model(fixed.save(dir));
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_FALSE((*model)->partitions().empty());
  for (const auto& p : (*model)->partitions()) EXPECT_FALSE(p.polymorphic) << p.backend;
  EXPECT_EQ((*model)->specialization_stats().polymorphic_partitions, 0u);

  bt::TempDir dir2;
  auto open = runtime()->load_model(write_model(dir2));
  ASSERT_TRUE(open.ok()) << open.status().message();
  auto session = (*open)->create_session();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->set_input("x", filled({2, 3, kHidden}, 1)).ok());
  ASSERT_TRUE((*session)->set_input("mask", filled({2, 3}, 2)).ok());
  ASSERT_TRUE((*session)->run().ok());
  EXPECT_GE((*open)->specialization_stats().polymorphic_partitions, 1u);
}

TEST(ShapesCache, HintSpecialisesAtLoadAndOtherShapesStillRun) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  ModelOptions mo;
  mo.input_shapes = {{"x", {2, 3, kHidden}}, {"mask", {2, 3}}};
  auto model = runtime()->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_FALSE((*model)->partitions().empty());
  EXPECT_EQ((*model)->specialization_stats().builds, 1u);
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->set_input("x", filled({2, 3, kHidden}, 1)).ok());
  ASSERT_TRUE((*session)->set_input("mask", filled({2, 3}, 2)).ok());
  ASSERT_TRUE((*session)->run().ok());
  EXPECT_EQ((*model)->specialization_stats().builds, 1u);  // the hint's
  ASSERT_TRUE((*session)->set_input("x", filled({1, 9, kHidden}, 1)).ok());
  ASSERT_TRUE((*session)->set_input("mask", filled({1, 9}, 2)).ok());
  ASSERT_TRUE((*session)->run().ok());
  EXPECT_EQ((*model)->specialization_stats().builds, 2u);
}

long resident_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

TEST(ShapesCache, LruBoundHoldsOverAThousandLengths) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  ModelOptions mo;
  mo.backends = {"CpuRef"};
  mo.max_specializations = 4;
  auto model = runtime()->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  long rss_at_200 = 0;
  for (int64_t seq = 1; seq <= 1000; ++seq) {
    ASSERT_TRUE((*session)->set_input("x", filled({1, seq, kHidden}, 1)).ok());
    ASSERT_TRUE((*session)->set_input("mask", filled({1, seq}, 2)).ok());
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << st.message();
    const SpecializationStats now = (*model)->specialization_stats();
    ASSERT_LE(now.cached - now.variants, 4u);
    ASSERT_LE(now.variants, 32u * 4u);
    if (seq == 200) rss_at_200 = resident_kb();
  }
  // Every length after the first is a shape variant of it (CpuRef compiles
  // the model shape-polymorphic): 128 of those are kept beside it.
  SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_EQ(stats.builds, 1000u);
  EXPECT_EQ(stats.cached, 1u + 128u);
  EXPECT_EQ(stats.variants, 128u);
  EXPECT_EQ(stats.evictions, 1000u - stats.cached);
  // Inputs grow with the length (1000 x 8 floats = 32 KB at the end); what
  // a specialisation holds must not accumulate: 800 more lengths stay
  // within a few MB (one kept specialisation is a few KB). Not in sanitizer
  // builds, whose allocators keep freed memory in quarantine on purpose.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  EXPECT_LT(resident_kb() - rss_at_200, 4 * 1024) << "RSS grew by KB";
#else
  (void)rss_at_200;
#endif
}

// x[1,seq,8] -> y = x * seq + Range(0, seq)[None,:,None]: the length reaches
// the data through constants the shapes fold (Shape, Gather, Cast, Range),
// a new value at each length.
std::string write_length_model(const bt::TempDir& dir) {
  bt::ModelBuilder b;
  b.input("x", {1, "seq", kHidden});
  b.init_i64("one", {}, {1});
  b.init_i64("zero", {}, {0});
  b.init_i64("axes", {2}, {0, 2});
  b.node("Shape", {"x"}, {"x_shape"}, "shape");
  bt::set_int(b.node("Gather", {"x_shape", "one"}, {"seq_len"}, "gather"), "axis", 0);
  b.node("Range", {"zero", "seq_len", "one"}, {"positions_i"}, "range");
  bt::set_int(b.node("Cast", {"positions_i"}, {"positions"}, "cast_positions"), "to",
              onnx::TensorProto::FLOAT);
  b.node("Unsqueeze", {"positions", "axes"}, {"positions3"}, "unsqueeze");
  bt::set_int(b.node("Cast", {"seq_len"}, {"len_f"}, "cast_len"), "to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"x", "len_f"}, {"scaled"}, "scale");
  b.node("Add", {"scaled", "positions3"}, {"y"}, "add_positions");
  b.output("y", {1, "seq", kHidden});
  return b.save(dir);
}

// A generation loop's shapes: every length after the first is a shape
// variant of the first specialisation (its plan, partitions and steps, its
// own shapes and folded constants), all kept with the default options, so a
// second pass over the lengths builds nothing. Each length's output is the
// one its own folded constants give.
class ShapeVariants : public ::testing::TestWithParam<std::vector<std::string>> {};

TEST_P(ShapeVariants, ALoopOverFortyLengthsIsKeptAndEachLengthUsesItsOwnConstants) {
  bt::TempDir dir;
  ModelOptions mo;
  mo.backends = GetParam();
  auto model = runtime()->load_model(write_length_model(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  constexpr int64_t kLengths = 40;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t seq = 1; seq <= kLengths; ++seq) {
      const Tensor x = filled({1, seq, kHidden}, static_cast<uint32_t>(seq));
      ASSERT_TRUE((*session)->set_input("x", x).ok());
      Status st = (*session)->run();
      ASSERT_TRUE(st.ok()) << st.message();
      std::vector<float> want(static_cast<size_t>(x.numel()));
      for (size_t i = 0; i < want.size(); ++i)
        want[i] = x.data_as<float>()[i] * static_cast<float>(seq) +
                  static_cast<float>(static_cast<int64_t>(i) / kHidden);
      expect_close((*session)->output(0), want,
                   "pass " + std::to_string(pass) + ", length " + std::to_string(seq));
    }
  const SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_EQ(stats.builds, static_cast<uint64_t>(kLengths));
  EXPECT_EQ(stats.hits, static_cast<uint64_t>(kLengths));
  EXPECT_EQ(stats.evictions, 0u);
  EXPECT_EQ(stats.variants, static_cast<size_t>(kLengths - 1));
  EXPECT_EQ(stats.cached, static_cast<size_t>(kLengths));
}

// Two inputs whose lengths change apart: y = x * n (n folded from x's
// shape), z = p + Range(0, m) (m folded from p's). A variant compares with
// its base only what inference changed since the base was built; a length
// that changes and changes back, while the other moves, must still give each
// output its own shape and constants.
TEST_P(ShapeVariants, TwoInputsThatChangeApartAndBackKeepTheirOwnShapesAndConstants) {
  bt::ModelBuilder b;
  b.input("x", {1, "n", kHidden});
  b.input("p", {1, "m", kHidden});
  b.init_i64("one", {}, {1});
  b.init_i64("zero", {}, {0});
  b.init_i64("axes", {2}, {0, 2});
  b.node("Shape", {"x"}, {"x_shape"});
  bt::set_int(b.node("Gather", {"x_shape", "one"}, {"n_len"}), "axis", 0);
  bt::set_int(b.node("Cast", {"n_len"}, {"n_f"}), "to", onnx::TensorProto::FLOAT);
  b.node("Mul", {"x", "n_f"}, {"y"});
  b.node("Shape", {"p"}, {"p_shape"});
  bt::set_int(b.node("Gather", {"p_shape", "one"}, {"m_len"}), "axis", 0);
  b.node("Range", {"zero", "m_len", "one"}, {"positions_i"});
  bt::set_int(b.node("Cast", {"positions_i"}, {"positions"}), "to", onnx::TensorProto::FLOAT);
  b.node("Unsqueeze", {"positions", "axes"}, {"positions3"});
  b.node("Add", {"p", "positions3"}, {"z"});
  b.output("y", {1, "n", kHidden});
  b.output("z", {1, "m", kHidden});
  bt::TempDir dir;
  ModelOptions mo;
  mo.backends = GetParam();
  auto model = runtime()->load_model(b.save(dir), mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{2, 3}, {4, 3}, {4, 5}, {2, 5}, {2, 3},
                                                            {6, 7}, {2, 7}, {6, 3}, {9, 9}, {2, 3}};
  for (size_t k = 0; k < lengths.size(); ++k) {
    const auto [n, m] = lengths[k];
    const std::string at = "n=" + std::to_string(n) + " m=" + std::to_string(m);
    const Tensor x = filled({1, n, kHidden}, static_cast<uint32_t>(2 * k));
    const Tensor p = filled({1, m, kHidden}, static_cast<uint32_t>(2 * k + 1));
    ASSERT_TRUE((*session)->set_input("x", x).ok());
    ASSERT_TRUE((*session)->set_input("p", p).ok());
    Status st = (*session)->run();
    ASSERT_TRUE(st.ok()) << at << ": " << st.message();
    std::vector<float> y(static_cast<size_t>(x.numel())), z(static_cast<size_t>(p.numel()));
    for (size_t i = 0; i < y.size(); ++i) y[i] = x.data_as<float>()[i] * static_cast<float>(n);
    for (size_t i = 0; i < z.size(); ++i)
      z[i] = p.data_as<float>()[i] + static_cast<float>(static_cast<int64_t>(i) / kHidden);
    expect_close((*session)->output(0), y, at + ", y");
    expect_close((*session)->output(1), z, at + ", z");
  }
  EXPECT_GT((*model)->specialization_stats().variants, 0u);
}

INSTANTIATE_TEST_SUITE_P(Backends, ShapeVariants,
                         ::testing::Values(std::vector<std::string>{"CpuRef"},
                                           std::vector<std::string>{}),
                         [](const auto& info) {
                           return info.param.empty() ? std::string("Default") : info.param[0];
                         });

TEST(ShapesConcurrency, EightThreadsAtDifferentLengthsOnOneModel) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  Reference ref(path);
  ModelOptions mo;
  mo.max_specializations = 64;
  auto model = runtime()->load_model(path, mo);
  ASSERT_TRUE(model.ok()) << model.status().message();
  constexpr int kThreads = 8;
  // Each thread's expected outputs, from one session alone first.
  std::vector<std::vector<std::vector<float>>> expected(kThreads);
  {
    auto s = (*model)->create_session();
    ASSERT_TRUE(s.ok());
    for (int t = 0; t < kThreads; ++t)
      for (int64_t seq = 1 + t; seq <= 24; seq += kThreads / 2) {
        ASSERT_TRUE((*s)->set_input("x", filled({1, seq, kHidden}, seq)).ok());
        ASSERT_TRUE((*s)->set_input("mask", filled({1, seq}, 50 + seq)).ok());
        ASSERT_TRUE((*s)->run().ok());
        const Tensor& y = (*s)->output(0);
        expected[t].emplace_back(y.data_as<float>(), y.data_as<float>() + y.numel());
      }
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      auto s = (*model)->create_session();
      if (!s.ok()) return void(++failures);
      for (int rep = 0; rep < 5; ++rep) {
        size_t k = 0;
        for (int64_t seq = 1 + t; seq <= 24; seq += kThreads / 2, ++k) {
          if (!(*s)->set_input("x", filled({1, seq, kHidden}, seq)).ok() ||
              !(*s)->set_input("mask", filled({1, seq}, 50 + seq)).ok() || !(*s)->run().ok())
            return void(++failures);
          const Tensor& y = (*s)->output(0);
          if (!std::equal(expected[t][k].begin(), expected[t][k].end(), y.data_as<float>()))
            ++failures;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ShapesConcurrency, ANewSignatureMetByManyThreadsIsBuiltOnce) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  auto model = runtime()->load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  std::vector<std::unique_ptr<Session>> sessions;
  for (int t = 0; t < 8; ++t) {
    auto s = (*model)->create_session();
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->set_input("x", filled({3, 11, kHidden}, 1)).ok());
    ASSERT_TRUE((*s)->set_input("mask", filled({3, 11}, 2)).ok());
    sessions.push_back(std::move(*s));
  }
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (auto& s : sessions)
    threads.emplace_back([&, ptr = s.get()] {
      if (!ptr->run().ok()) ++failures;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  SpecializationStats stats = (*model)->specialization_stats();
  EXPECT_EQ(stats.builds, 1u);
  EXPECT_EQ(stats.misses + stats.hits, 8u);
}

TEST(ShapesBinding, InputsAndOutputsInTheCallersMemory) {
  bt::TempDir dir;
  const std::string path = write_model(dir);
  Reference ref(path);
  auto model = runtime()->load_model(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto session = (*model)->create_session();
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  Tensor x = filled({2, 6, kHidden}, 1), mask = filled({2, 6}, 2);
  Tensor y(DType::kFloat32, {2, 6, kHidden});
  ASSERT_TRUE(s.bind_input("x", x).ok());
  ASSERT_TRUE(s.bind_input("mask", mask).ok());
  ASSERT_TRUE(s.bind_output("y", y).ok());
  ASSERT_TRUE(s.run().ok());
  EXPECT_EQ(s.output(0).data(), y.data());  // written in place
  expect_close(y, ref(x, mask), "bound");
  // Bound, not copied: the next run reads the caller's memory as it is now.
  for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] *= -0.5f;
  ASSERT_TRUE(s.run().ok());
  expect_close(y, ref(x, mask), "after changing the bound input");
  // A bound output of the wrong shape for the run fails before running.
  Tensor small(DType::kFloat32, {1, 6, kHidden});
  ASSERT_TRUE(s.bind_output("y", small).ok());
  Status st = s.run();
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("[2,6,8]"), std::string::npos) << st.message();
  ASSERT_TRUE(s.bind_output("y", Tensor()).ok());  // unbound: the session's memory again
  ASSERT_TRUE(s.run().ok());
  EXPECT_NE(s.output(0).data(), small.data());
  expect_close(s.output(0), ref(x, mask), "unbound");
}

}  // namespace
}  // namespace backplane
