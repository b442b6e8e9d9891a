// weights_once_test.cpp — a model's weights are in memory once.
//
// A model of one signature loaded from a .onnx on CpuOneDnn: each weight
// leaves the host's memory as soon as CpuOneDnn has packed it, so loading
// never holds the host's copy and the packed one of every weight at once,
// and the model answers right from its packed weights alone. A weight the
// host reads in place (here a graph output) stays. A model with an open
// batch dim does the same at its first run (CpuOneDnn packs its weights
// when it first lowers the partition for the run's shapes), and answers at
// other batch sizes after.
#include "core/constant_block.hpp"
#include "session/compiled_model.hpp"
#include "session/staged_model.hpp"
#include "support/e2e_util.hpp"
#include "support/files.hpp"
#include "support/memory.hpp"
#include "support/model_builder.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace backplane::e2e {
namespace {

using test::ModelBuilder;
using test::TempDir;

constexpr int kLayers = 8;
constexpr int64_t kWidth = 2048;  // a weight is 16 MiB

// "w3" and the like (not "w" + std::to_string(3): GCC 12 at -O3 reports a
// false -Wrestrict inside libstdc++ for "literal" + std::string&&).
std::string numbered(const char* prefix, size_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

float weight(int layer, int64_t n, int64_t k) {
  return static_cast<float>((n * 31 + k * 17 + layer * 7) % 97 - 48) / 256.f;
}
float input(int64_t k) { return static_cast<float>(k % 11 - 5) / 8.f; }

// y = the sum over layers of x W_l^T (Gemm); `w0_out`: W_0 is an output too;
// `open_batch`: x and y are [batch, width]; `more_rows`: a second input e
// [rows, width] and a second output, x's rows then e's (a Concat).
std::string write_model(const TempDir& dir, bool w0_out, bool open_batch = false,
                        bool more_rows = false) {
  ModelBuilder b;
  if (open_batch) b.input("x", {"batch", kWidth});
  else b.input("x", {1, kWidth});
  if (more_rows) {
    b.input("e", {"rows", kWidth});
    auto& concat = b.node("Concat", {"x", "e"}, {"xe"});
    auto* axis = concat.add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(0);
  }
  std::vector<std::string> terms;
  for (int l = 0; l < kLayers; ++l) {
    // Odd layers store W_l as [K, N] (transB 0), even ones as [N, K].
    const bool trans_b = l % 2 == 0;
    std::vector<float> w(static_cast<size_t>(kWidth * kWidth));
    for (int64_t n = 0; n < kWidth; ++n)
      for (int64_t k = 0; k < kWidth; ++k)
        w[trans_b ? n * kWidth + k : k * kWidth + n] = weight(l, n, k);
    const std::string name = numbered("w", l);
    b.init_f32(name, {kWidth, kWidth}, w);
    auto& gemm = b.node("Gemm", {"x", name}, {numbered("t", l)});
    auto* a = gemm.add_attribute();
    a->set_name("transB");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(trans_b ? 1 : 0);
    terms.push_back(numbered("t", l));
  }
  std::string sum = terms[0];
  for (size_t i = 1; i < terms.size(); ++i) {
    const std::string next = i + 1 == terms.size() ? "y" : numbered("s", i);
    b.node("Add", {sum, terms[i]}, {next});
    sum = next;
  }
  if (open_batch) b.output("y", {"batch", kWidth});
  else b.output("y", {1, kWidth});
  if (more_rows) b.output("xe", {"total", kWidth});
  if (w0_out) b.output("w0", {kWidth, kWidth});
  return b.save(dir);
}

std::vector<double> expected_y() {
  std::vector<double> y(kWidth, 0.0);
  for (int l = 0; l < kLayers; ++l)
    for (int64_t n = 0; n < kWidth; ++n)
      for (int64_t k = 0; k < kWidth; ++k) y[n] += double(input(k)) * weight(l, n, k);
  return y;
}

// `batch` rows, each the same input.
Tensor x_tensor(int64_t batch = 1) {
  Tensor x(DType::kFloat32, {batch, kWidth});
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t k = 0; k < kWidth; ++k) x.data_as<float>()[r * kWidth + k] = input(k);
  return x;
}

void expect_y(const Tensor& y, const std::vector<double>& want) {
  ASSERT_EQ(y.numel() % kWidth, 0);
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    worst = std::max(worst, std::abs(y.data_as<float>()[i] - want[i % kWidth]));
    scale = std::max(scale, std::abs(want[i % kWidth]));
  }
  EXPECT_LT(worst, 1e-4 * scale) << "largest difference " << worst << " of " << scale;
}

// The graph a model was loaded into (a staged model's whole graph).
const ir::Graph* graph_of(const Model& model) {
  if (const auto* m = dynamic_cast<const CompiledModel*>(&model)) return &m->portable();
  if (const auto* m = dynamic_cast<const StagedModel*>(&model)) return &m->program().graph();
  return nullptr;
}

// The blocks of the model's weights that are in memory now.
int resident_blocks(const Model& model) {
  const ir::Graph* g = graph_of(model);
  if (g == nullptr) return -1;
  int n = 0;
  for (const auto& [key, weak] : g->constant_blocks)
    if (auto b = weak.lock(); b != nullptr && b->resident()) ++n;
  return n;
}

// The model at `path` as Runtime::load_model gives it, with CpuOneDnn.
struct Loaded {
  std::shared_ptr<Runtime> rt;
  std::shared_ptr<Model> model;  // destroyed first
};
Loaded load(const std::string& path) {
  Loaded l;
  l.rt = onednn_runtime(1);
  if (l.rt == nullptr) return l;
  Result<std::shared_ptr<Model>> model = l.rt->load_model(path);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (model.ok()) l.model = *model;
  return l;
}

TEST(WeightsOnce, PackedWeightsLeaveTheHostAndTheModelStillAnswers) {
  TempDir dir;
  const Loaded l = load(write_model(dir, false));
  ASSERT_NE(l.model, nullptr);
  Model* model = l.model.get();
  EXPECT_EQ(model->backends_used(), std::vector<std::string>{"CpuOneDnn"});
  EXPECT_EQ(resident_blocks(*model), 0);
  const std::vector<double> want = expected_y();
  for (int session = 0; session < 2; ++session) {
    std::vector<Tensor> out = run_once(*model, {{"x", x_tensor()}});
    ASSERT_EQ(out.size(), 1u);
    expect_y(out[0], want);
  }
  EXPECT_EQ(resident_blocks(*model), 0);
}

TEST(WeightsOnce, AWeightTheHostReadsInPlaceStays) {
  TempDir dir;
  const Loaded l = load(write_model(dir, true));
  ASSERT_NE(l.model, nullptr);
  Model* model = l.model.get();
  EXPECT_EQ(resident_blocks(*model), 1);
  std::vector<Tensor> out = run_once(*model, {{"x", x_tensor()}});
  ASSERT_EQ(out.size(), 2u);
  expect_y(out[0], expected_y());
  ASSERT_EQ(out[1].numel(), kWidth * kWidth);
  for (int64_t i = 0; i < kWidth * kWidth; i += 4099)
    ASSERT_EQ(out[1].data_as<float>()[i], weight(0, i / kWidth, i % kWidth)) << i;
}

// One weight read by two products (weights shared between layers, as ALBERT
// shares them): CpuOneDnn packs it for each, and lets the host's copy go
// only once both are packed; the host drops it then.
TEST(WeightsOnce, AWeightTwoNodesPackLeavesOnceBothHave) {
  TempDir dir;
  constexpr int64_t kDim = 256;  // 256 kB: a block of its own
  std::vector<float> w(static_cast<size_t>(kDim * kDim));
  for (int64_t k = 0; k < kDim; ++k)
    for (int64_t n = 0; n < kDim; ++n) w[k * kDim + n] = weight(0, n, k);
  ModelBuilder b;
  b.input("x", {2, kDim});
  b.init_f32("w", {kDim, kDim}, w);
  b.node("MatMul", {"x", "w"}, {"h"});
  b.node("Relu", {"h"}, {"r"});
  b.node("MatMul", {"r", "w"}, {"y"});
  b.output("y", {2, kDim});
  const Loaded l = load(b.save(dir));
  ASSERT_NE(l.model, nullptr);
  EXPECT_EQ(l.model->backends_used(), std::vector<std::string>{"CpuOneDnn"});
  EXPECT_EQ(resident_blocks(*l.model), 0);
  Tensor x(DType::kFloat32, {2, kDim});
  for (int64_t i = 0; i < 2 * kDim; ++i) x.data_as<float>()[i] = input(i);
  std::vector<Tensor> out = run_once(*l.model, {{"x", x}});
  ASSERT_EQ(out.size(), 1u);
  for (int64_t r = 0; r < 2; ++r) {
    std::vector<double> h(kDim, 0.0), y(kDim, 0.0);
    for (int64_t n = 0; n < kDim; ++n) {
      for (int64_t k = 0; k < kDim; ++k) h[n] += double(input(r * kDim + k)) * weight(0, n, k);
      h[n] = std::max(h[n], 0.0);
    }
    for (int64_t n = 0; n < kDim; ++n)
      for (int64_t k = 0; k < kDim; ++k) y[n] += h[k] * weight(0, n, k);
    for (int64_t n = 0; n < kDim; ++n)
      ASSERT_NEAR(out[0].data_as<float>()[r * kDim + n], y[n], 1e-4 * (1 + std::abs(y[n])))
          << "row " << r << ", column " << n;
  }
}

TEST(WeightsOnce, WithAnOpenBatchPackedWeightsLeaveTheHostAtTheFirstRun) {
  TempDir dir;
  const Loaded l = load(write_model(dir, false, /*open_batch=*/true));
  ASSERT_NE(l.model, nullptr);
  Model* model = l.model.get();
  EXPECT_EQ(resident_blocks(*model), kLayers);  // nothing is compiled before a run
  const std::vector<double> want = expected_y();
  for (int64_t batch : {1, 3, 1, 2}) {
    std::vector<Tensor> out = run_once(*model, {{"x", x_tensor(batch)}});
    ASSERT_EQ(out.size(), 1u);
    ASSERT_EQ(out[0].shape(), (Shape{batch, kWidth}));
    expect_y(out[0], want);
    EXPECT_EQ(resident_blocks(*model), 0) << "after a run at batch " << batch;
  }
  EXPECT_EQ(model->backends_used(), std::vector<std::string>{"CpuOneDnn"});
}

// How many times the model's weights were read back from the file after
// leaving memory.
int reads_back(const Model& model) {
  const ir::Graph* g = graph_of(model);
  if (g == nullptr) return -1;
  int n = 0;
  for (const auto& [key, weak] : g->constant_blocks)
    if (auto b = weak.lock(); b != nullptr) n += b->reads_back();
  return n;
}

// A batch of none: every node's result is empty, so nothing is left to run
// and no weight is read back to run it.
TEST(WeightsOnce, AnEmptyBatchRunsNothingAndReadsNoWeightBack) {
  TempDir dir;
  const Loaded l = load(write_model(dir, false, /*open_batch=*/true));
  ASSERT_NE(l.model, nullptr);
  Model* model = l.model.get();
  const std::vector<double> want = expected_y();
  expect_y(run_once(*model, {{"x", x_tensor(1)}}).at(0), want);
  ASSERT_EQ(resident_blocks(*model), 0);
  const std::vector<Tensor> empty = run_once(*model, {{"x", x_tensor(0)}});
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].shape(), (Shape{0, kWidth}));
  EXPECT_EQ(reads_back(*model), 0);
  EXPECT_EQ(resident_blocks(*model), 0);
  expect_y(run_once(*model, {{"x", x_tensor(2)}}).at(0), want);
  EXPECT_EQ(reads_back(*model), 0);
}

// No rows in e makes another structure (an empty input), which the host
// plans anew, asking every backend which nodes it takes: none reads the
// weights that left memory back to answer (the Gemms' shapes are all known,
// so a backend could check them in full), and CpuOneDnn's partitions of it
// take the weights the first structure's packed.
TEST(WeightsOnce, PlanningAnotherStructureReadsNoWeightBack) {
  TempDir dir;
  const Loaded l = load(write_model(dir, false, /*open_batch=*/false, /*more_rows=*/true));
  ASSERT_NE(l.model, nullptr);
  Model* model = l.model.get();
  const std::vector<double> want = expected_y();
  expect_y(run_once(*model, {{"x", x_tensor()}, {"e", x_tensor(2)}}).at(0), want);
  ASSERT_EQ(resident_blocks(*model), 0);
  const std::vector<Tensor> out = run_once(*model, {{"x", x_tensor()}, {"e", x_tensor(0)}});
  ASSERT_EQ(out.size(), 2u);
  expect_y(out[0], want);
  ASSERT_EQ(out[1].shape(), (Shape{1, kWidth}));
  for (int64_t k = 0; k < kWidth; ++k) ASSERT_EQ(out[1].data_as<float>()[k], input(k)) << k;
  EXPECT_EQ(model->backends_used(), std::vector<std::string>{"CpuOneDnn"});
  EXPECT_EQ(reads_back(*model), 0);
  EXPECT_EQ(resident_blocks(*model), 0);
}

// A model run in stages (a NonZero decides shapes): its stages share the
// graph's weights. W0 is packed by two stages' Gemms and also sliced by a
// length that x's values give, which a stage of its own folds when it is
// built for that length (reading W0 after the stages before have let it go);
// a host op (SequenceConstruct) reads W1 and hands it back as an output.
std::string write_staged_model(const TempDir& dir) {
  ModelBuilder b;
  b.input("x", {1, kWidth});
  for (int l = 0; l < 3; ++l) {
    std::vector<float> w(static_cast<size_t>(kWidth * kWidth));
    for (int64_t n = 0; n < kWidth; ++n)
      for (int64_t k = 0; k < kWidth; ++k) w[n * kWidth + k] = weight(l, n, k);
    b.init_f32(numbered("w", l), {kWidth, kWidth}, w);
  }
  auto gemm = [&](const std::string& a, const std::string& w, const std::string& out) {
    auto* t = b.node("Gemm", {a, w}, {out}).add_attribute();
    t->set_name("transB");
    t->set_type(onnx::AttributeProto::INT);
    t->set_i(1);
  };
  gemm("x", "w0", "a0");
  gemm("x", "w1", "a1");
  b.node("NonZero", {"x"}, {"nz"});
  // x2 = x + 0 * sum(nz): the same rows, known only once the NonZero ran.
  auto* keep = b.node("ReduceSum", {"nz"}, {"count"}).add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  auto* to = b.node("Cast", {"count"}, {"fcount"}).add_attribute();
  to->set_name("to");
  to->set_type(onnx::AttributeProto::INT);
  to->set_i(onnx::TensorProto::FLOAT);
  b.init_f32("zero", {}, {0.f});
  b.node("Mul", {"fcount", "zero"}, {"nothing"});
  b.node("Add", {"x", "nothing"}, {"x2"});
  gemm("x2", "w2", "b2");
  gemm("x2", "w0", "b0");
  b.node("Add", {"a0", "a1"}, {"s1"});
  b.node("Add", {"s1", "b2"}, {"s2"});
  b.node("Add", {"s2", "b0"}, {"y"});
  // z = x2 W0[:k]^T, k the position of x's largest element (a value of x's
  // data, so the Slice is built for each k it meets).
  auto* axis = b.node("ArgMax", {"x"}, {"k"}).add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(1);
  b.init_i64("first", {1}, {0});
  b.node("Slice", {"w0", "first", "k", "first"}, {"w0_rows"});
  gemm("x2", "w0_rows", "z");
  b.node("SequenceConstruct", {"w1"}, {"seq"});
  b.init_i64("at", {}, {0});
  b.node("SequenceAt", {"seq", "at"}, {"w1_again"});
  b.output("y", {1, kWidth});
  b.output("z", {1, "k"});
  b.output("w1_again", {kWidth, kWidth});
  return b.save(dir);
}

TEST(WeightsOnce, AModelRunInStagesKeepsOnlyTheWeightsItsHostReads) {
  TempDir dir;
  const Loaded l = load(write_staged_model(dir));
  ASSERT_NE(l.model, nullptr);
  Model* model = l.model.get();
  ASSERT_TRUE(model->runs_in_stages());
  std::vector<double> want_y(kWidth, 0.0);
  for (int l : {0, 1, 2, 0})
    for (int64_t n = 0; n < kWidth; ++n)
      for (int64_t k = 0; k < kWidth; ++k) want_y[n] += double(input(k)) * weight(l, n, k);
  int64_t rows = 0;  // ArgMax: the first largest
  for (int64_t k = 0; k < kWidth; ++k)
    if (input(k) > input(rows)) rows = k;
  int after_first = -1;
  for (int run = 0; run < 3; ++run) {
    const std::vector<Tensor> out = run_once(*model, {{"x", x_tensor()}});
    ASSERT_EQ(out.size(), 3u);
    expect_y(out[0], want_y);
    ASSERT_EQ(out[1].shape(), (Shape{1, rows}));
    for (int64_t n = 0; n < rows; ++n) {
      double z = 0;
      for (int64_t k = 0; k < kWidth; ++k) z += double(input(k)) * weight(0, n, k);
      ASSERT_NEAR(out[1].data_as<float>()[n], z, 1e-4 * (1 + std::abs(z))) << n;
    }
    ASSERT_EQ(out[2].numel(), kWidth * kWidth);
    for (int64_t i = 0; i < kWidth * kWidth; i += 4099)
      ASSERT_EQ(out[2].data_as<float>()[i], weight(1, i / kWidth, i % kWidth)) << i;
    // W1 (read by the host op) alone stays in memory.
    EXPECT_EQ(resident_blocks(*model), 1) << "after run " << run;
    if (run == 0) after_first = reads_back(*model);
  }
  EXPECT_EQ(reads_back(*model), after_first) << "runs after the first read weights back";
}

constexpr long kWeightsKb = kLayers * (kWidth * kWidth * 4 >> 10);

// The memory a child process grows by loading `path` on CpuOneDnn (and
// running it once if `run`), the model alive when it measures.
test::MemoryGrowth load_in_child(const std::string& path, bool run) {
  std::shared_ptr<Runtime> rt;
  std::shared_ptr<Model> model;
  return test::memory_growth_in_child(
      [&] {
        Result<std::shared_ptr<Model>> loaded =
            rt != nullptr ? rt->load_model(path) : internal_error("no runtime");
        if (!loaded.ok()) return false;
        model = *loaded;
        return !run || run_once(*model, {{"x", x_tensor()}}).size() == 1;
      },
      [&] { rt = onednn_runtime(1); });
}

// Loading holds each weight twice (the host's copy and the packed one) for a
// moment, never all of them; once loaded, the packed ones alone.
TEST(WeightsOnceMemory, LoadingNeverHoldsEveryWeightTwice) {
  TempDir dir;
  const test::MemoryGrowth grown = load_in_child(write_model(dir, false), false);
  ASSERT_TRUE(grown.ok) << "the child could not load the model";
  EXPECT_LT(grown.peak_kb, kWeightsKb * 3 / 2)
      << "peak grew by " << grown.peak_kb << " kB for " << kWeightsKb << " kB of weights";
  EXPECT_LT(grown.now_kb, kWeightsKb * 5 / 4)
      << "resident memory grew by " << grown.now_kb << " kB for " << kWeightsKb << " kB of weights";
}

// With an open batch, the first run packs the weights; each leaves the
// host's memory as it is packed.
TEST(WeightsOnceMemory, WithAnOpenBatchARunModelHoldsItsPackedWeightsOnly) {
  TempDir dir;
  const test::MemoryGrowth grown = load_in_child(write_model(dir, false, true), true);
  ASSERT_TRUE(grown.ok) << "the child could not load and run the model";
  EXPECT_LT(grown.peak_kb, kWeightsKb * 3 / 2)
      << "peak grew by " << grown.peak_kb << " kB for " << kWeightsKb << " kB of weights";
  EXPECT_LT(grown.now_kb, kWeightsKb * 5 / 4)
      << "resident memory grew by " << grown.now_kb << " kB for " << kWeightsKb << " kB of weights";
}

// A .bpk keeps the portable weights beside CpuOneDnn's packed ones; once
// loaded and run, only the packed ones are in memory (load's checksum pass
// lets the pages it hashed go).
TEST(WeightsOnceMemory, ACompiledModelHoldsItsPackedWeightsOnly) {
  TempDir dir;
  const std::string onnx = write_model(dir, false);
  const std::string bpk = dir.file("model.bpk");
  {
    std::shared_ptr<Runtime> rt = onednn_runtime(1);
    ASSERT_NE(rt, nullptr);
    Result<CompileReport> compiled = rt->compile({{"main", onnx}}, bpk, CompileOptions());
    ASSERT_TRUE(compiled.ok()) << compiled.status().to_string();
  }
  const test::MemoryGrowth grown = load_in_child(bpk, true);
  ASSERT_TRUE(grown.ok) << "the child could not load and run the artifact";
  EXPECT_LT(grown.now_kb, kWeightsKb * 5 / 4)
      << "resident memory grew by " << grown.now_kb << " kB for " << kWeightsKb << " kB of weights";
}

// Six 3x3 convolutions (512 channels at 14x14, 9 MiB of weights each), then
// a product by a 98 MiB weight. Blocked, oneDNN runs the convolutions by
// Winograd, whose weights are larger than the host's. Packed in the plan's
// order, the large weight would be packed on top of all the grown ones (the
// peak: what the model holds once loaded, and the large weight's host copy
// beside it); CpuOneDnn packs the weights that do not grow first, largest
// first, so the peak is the host's copy of every weight and the large one
// packed, or what the model holds once loaded and one convolution's host
// copy, whichever is more.
TEST(WeightsOnceMemory, TheWeightsThatGrowWhenPackedArePackedLast) {
  constexpr int kConvs = 6;
  constexpr int64_t kC = 512, kS = 14, kN = 256;
  TempDir dir;
  std::string path;
  {
    ModelBuilder b;
    b.input("x", {1, kC, kS, kS});
    std::string cur = "x";
    for (int i = 0; i < kConvs; ++i) {
      const std::string w = numbered("w", i), c = numbered("c", i);
      b.random_weight(w, {kC, kC, 3, 3}, -0.02f, 0.02f);
      auto& conv = b.node("Conv", {cur, w}, {c});
      auto* pads = conv.add_attribute();
      pads->set_name("pads");
      pads->set_type(onnx::AttributeProto::INTS);
      for (int k = 0; k < 4; ++k) pads->add_ints(1);
      cur = numbered("r", i);
      b.node("Relu", {c}, {cur});
    }
    b.node("Flatten", {cur}, {"f"});
    b.random_weight("fc", {kC * kS * kS, kN}, -0.01f, 0.01f);
    b.node("MatMul", {"f", "fc"}, {"y"});
    b.output("y", {1, kN});
    path = b.save(dir);
  }
  std::shared_ptr<Runtime> rt;
  std::shared_ptr<Model> model;
  const test::MemoryGrowth grown = test::memory_growth_in_child(
      [&] {
        Result<std::shared_ptr<Model>> loaded =
            rt != nullptr ? rt->load_model(path) : internal_error("no runtime");
        if (!loaded.ok()) return false;
        model = *loaded;
        Tensor x(DType::kFloat32, {1, kC, kS, kS});
        for (int64_t i = 0; i < x.numel(); ++i) x.data_as<float>()[i] = input(i);
        return run_once(*model, {{"x", x}}).size() == 1;
      },
      [&] {
        rt = onednn_runtime(1, {{"layout", "blocked"}});
      });
  ASSERT_TRUE(grown.ok) << "the child could not load and run the model";
  const long conv_kb = kC * kC * 9 * 4 >> 10, fc_kb = kC * kS * kS * kN * 4 >> 10;
  const long host_kb = kConvs * conv_kb + fc_kb;
  const long bound_kb = std::max(host_kb + fc_kb, grown.now_kb + conv_kb) + (16 << 10);
  EXPECT_LT(grown.peak_kb, bound_kb)
      << "peak grew by " << grown.peak_kb << " kB; weights " << host_kb << " kB, " << fc_kb
      << " kB of them the product's; " << grown.now_kb << " kB once loaded";
}

}  // namespace
}  // namespace backplane::e2e
