// CpuOneDnn in compiled artifacts: its payload (the lowered plan) and its
// weights in their reordered layouts as named blobs. Loading such a .bpk
// must use them as they are (no recompile, no read of the portable weights),
// compute exactly what the ONNX model computes on CpuOneDnn, and fall back to
// compiling from the portable graph, with a note, when the payload comes
// from another oneDNN build; a model with symbolic dims at several
// signatures.
#include "artifact_util.hpp"
#include "support/model_builder.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

namespace backplane::artifact_test {
namespace {

bool uses_onednn(const RunResult& r) {
  return std::find(r.backends_used.begin(), r.backends_used.end(), "CpuOneDnn") !=
         r.backends_used.end();
}

class OneDnnArtifact : public TempDirTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(OneDnnArtifact, StoredPayloadLoadsAndMatchesTheOnnxRunBitForBit) {
  const std::string name = GetParam();
  const Tensor input = model_input(name);
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    auto rt = onednn_runtime(threads);
    ASSERT_NE(rt, nullptr);
    RunResult onnx = run_model(*rt, model_path(name), {}, input);
    ASSERT_TRUE(onnx.status.ok()) << onnx.status.to_string();
    ASSERT_TRUE(uses_onednn(onnx));

    const std::string bpk = path(name + std::to_string(threads) + ".bpk");
    CompileOptions co;
    co.external_data = path(name + std::to_string(threads) + ".bpd");
    auto report = rt->compile({{name, model_path(name)}}, bpk, co);
    ASSERT_TRUE(report.ok()) << report.status().to_string();

    // Every CpuOneDnn partition has a payload, and its weights are stored
    // under its own keys, in the data file like the rest.
    nlohmann::json j = inspect_json(bpk);
    size_t onednn_partitions = 0, onednn_blobs = 0;
    for (const auto& p : j["methods"][0]["partitions"])
      if (p["backend"] == "CpuOneDnn") {
        ++onednn_partitions;
        EXPECT_GT(p["payload_bytes"].get<size_t>(), 0u);
      }
    for (const auto& d : j["named_data"])
      if (d["key"].get<std::string>().rfind("CpuOneDnn/" + name + "/", 0) == 0) {
        ++onednn_blobs;
        EXPECT_EQ(d["file"], fs::path(co.external_data).filename().string());
        EXPECT_EQ(d["alignment"].get<size_t>() % 64, 0u);
      }
    EXPECT_GE(onednn_partitions, 1u);
    EXPECT_GE(onednn_blobs, 1u);

    // Loading deserializes (a recompile would leave a note) and computes
    // the same bits, with eager and with lazy checksums.
    for (bool lazy : {false, true}) {
      ModelOptions mo;
      mo.lazy_checksums = lazy;
      RunResult loaded = run_model(*rt, bpk, mo, input);
      ASSERT_TRUE(loaded.status.ok()) << loaded.status.to_string();
      EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();
      EXPECT_EQ(loaded.backends_used, onnx.backends_used);
      EXPECT_TRUE(bitwise_equal(loaded.outputs, onnx.outputs))
          << name << ": .bpk output differs from the ONNX run";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OneDnnArtifact,
                         ::testing::Values("resnet18", "mobilenet_v2", "squeezenet1_1",
                                           "transformer"),
                         [](const auto& info) { return info.param; });

class OneDnnPayload : public TempDirTest {
 protected:
  // squeezenet1_1 compiled with the default backends (all of it on CpuOneDnn).
  void compile() {
    rt_ = onednn_runtime(1);
    ASSERT_NE(rt_, nullptr);
    input_ = model_input("squeezenet1_1");
    onnx_ = run_model(*rt_, model_path("squeezenet1_1"), {}, input_);
    ASSERT_TRUE(onnx_.status.ok()) << onnx_.status.to_string();
    auto report = rt_->compile({{"sq", model_path("squeezenet1_1")}}, path("sq.bpk"), {});
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    bytes_ = read_bytes(path("sq.bpk"));
    const fb::Artifact* a = fb::GetSizePrefixedArtifact(bytes_.data());
    ASSERT_EQ(a->methods()->Get(0)->partitions()->size(), 1u);
    ASSERT_EQ(a->methods()->Get(0)->partitions()->Get(0)->backend()->str(), "CpuOneDnn");
  }

  std::shared_ptr<Runtime> rt_;
  Tensor input_;
  RunResult onnx_;
  std::vector<uint8_t> bytes_;
};

// Runs the model at `onnx_path` (input x of `shape`) on CpuOneDnn alone,
// compiles it with `co` into `bpk` and checks the .bpk loads from its
// payloads (no recompile, so no note) and computes the same bits.
void expect_payload_round_trip(const std::string& onnx_path, const std::string& bpk,
                               const std::vector<int64_t>& shape, const CompileOptions& co,
                               int threads = 1) {
  const std::string name = fs::path(onnx_path).stem().string();
  auto rt = onednn_runtime(threads);
  ASSERT_NE(rt, nullptr);
  Tensor input(DType::kFloat32, shape);
  for (int64_t i = 0; i < input.numel(); ++i)
    input.data_as<float>()[i] = std::sin(0.37f * static_cast<float>(i));
  RunResult onnx = run_model(*rt, onnx_path, {}, input);
  ASSERT_TRUE(onnx.status.ok()) << onnx.status.to_string();
  ASSERT_EQ(onnx.backends_used, std::vector<std::string>{"CpuOneDnn"});
  auto report = rt->compile({{name, onnx_path}}, bpk, co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  RunResult loaded = run_model(*rt, bpk, {}, input);
  ASSERT_TRUE(loaded.status.ok()) << loaded.status.to_string();
  EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();  // no recompile
  EXPECT_TRUE(bitwise_equal(loaded.outputs, onnx.outputs));
}

// The steps that keep data movement inside CpuOneDnn (issue 14) in a
// payload: windows (reorders from descriptors with an offset and wide
// strides), prelu and resampling primitives, the new eltwise algorithms.
// The payload loader checks every descriptor; these must pass its checks
// and compute the same bits.
TEST_F(OneDnnPayload, WindowsAndNewPrimitivesLoadFromThePayload) {
  test::ModelBuilder b(18);
  b.input("x", {1, 8, 6, 6}).random_weight("w", {32, 8, 3, 3}).random_weight("s", {24, 1, 1});
  b.init_i64("st", {1}, {5}).init_i64("en", {1}, {29}).init_i64("ax", {1}, {1});
  b.init_i64("st2", {2}, {0, 1}).init_i64("en2", {2}, {6, 6}).init_i64("ax2", {2}, {2, 3});
  b.init_i64("step2", {2}, {2, 2}).init_i64("pads", {8}, {0, 0, 1, 0, 0, 0, 0, 2});
  b.init_i64("size", {4}, {1, 24, 8, 10});
  test::set_ints(b.node("Conv", {"x", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  b.node("HardSwish", {"c"}, {"h"});
  b.node("Slice", {"h", "st", "en", "ax"}, {"sl"});  // cuts a channel block
  b.node("PRelu", {"sl", "s"}, {"pr"});
  b.node("Slice", {"pr", "st2", "en2", "ax2", "step2"}, {"sub"});  // [1, 24, 3, 3]
  b.node("Pad", {"sub", "pads"}, {"pd"});                          // [1, 24, 4, 5]
  test::set_string(b.node("Resize", {"pd", "", "", "size"}, {"rs"}), "mode", "linear");
  b.node("Mish", {"rs"}, {"y"});
  b.output("y");
  expect_payload_round_trip(b.save_as(path("windows.onnx")), path("windows.bpk"), {1, 8, 6, 6}, {});
}

// What the lowering learned from the broad benchmark, in a payload: SiLU as
// a swish post-op, a BN with its ReLU fused (fuse_norm_relu), a Pad folded
// into an AveragePool, a grouped convolution kept channels-last, a channel
// shuffle copied channels-last, and a MatMul by constant weights as one 2-D
// product. The loader must accept each descriptor and compute the same bits.
TEST_F(OneDnnPayload, BroadBenchmarkLoweringsLoadFromThePayload) {
  test::ModelBuilder b(17);
  b.input("x", {1, 8, 6, 6}).random_weight("w", {16, 8, 1, 1}).random_weight("wg", {16, 4, 3, 3});
  b.random_weight("scale", {16}, 0.5f, 1.5f)
      .random_weight("shift", {16})
      .random_weight("mean", {16})
      .random_weight("var", {16}, 0.5f, 1.5f)
      .random_weight("wm", {6, 5});
  b.init_i64("p", {8}, {0, 0, 1, 1, 0, 0, 1, 1}).init_i64("g", {5}, {1, 2, 8, 6, 6});
  b.init_i64("back", {4}, {1, 16, 6, 6});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Sigmoid", {"c"}, {"cs"});
  b.node("Mul", {"c", "cs"}, {"silu"});
  auto& gc = b.node("Conv", {"silu", "wg"}, {"gc"});
  test::set_int(gc, "group", 4);
  test::set_ints(gc, "pads", {1, 1, 1, 1});
  b.node("BatchNormalization", {"gc", "scale", "shift", "mean", "var"}, {"bn"});
  b.node("Relu", {"bn"}, {"r"});
  b.node("Pad", {"r", "p"}, {"pd"});
  test::set_ints(b.node("AveragePool", {"pd"}, {"ap"}), "kernel_shape", {3, 3});
  b.node("Reshape", {"ap", "g"}, {"r5"});
  test::set_ints(b.node("Transpose", {"r5"}, {"t5"}), "perm", {0, 2, 1, 3, 4});
  b.node("Reshape", {"t5", "back"}, {"sh"});
  b.node("MatMul", {"sh", "wm"}, {"y"});
  b.output("y");
  expect_payload_round_trip(b.save_as(path("broad.onnx")), path("broad.bpk"), {1, 8, 6, 6}, {});
}

// ViT's class token before its patches: oneDNN 2.x has only its reference
// concat for a 1x1xC and a 1xNxC tensor along axis 1, so CpuOneDnn copies
// them itself (a copy_concat step); the payload stores that step and the
// loader checks its windows.
TEST_F(OneDnnPayload, CopyConcatStepLoadsFromThePayload) {
  test::ModelBuilder b(17);
  b.input("x", {1, 16, 2, 2}).random_weight("w", {16, 16, 1, 1}).random_weight("cls", {1, 1, 16});
  b.init_i64("shape", {3}, {1, 16, 4});
  b.node("Conv", {"x", "w"}, {"c"});
  b.node("Reshape", {"c", "shape"}, {"r"});
  test::set_ints(b.node("Transpose", {"r"}, {"t"}), "perm", {0, 2, 1});  // [1, 4, 16]
  test::set_int(b.node("Concat", {"cls", "t"}, {"cat"}), "axis", 1);     // [1, 5, 16]
  b.node("Relu", {"cat"}, {"y"});
  b.output("y");
  CompileOptions co;
  co.shape_polymorphic = false;
  expect_payload_round_trip(b.save_as(path("cls.onnx")), path("cls.bpk"), {1, 16, 2, 2}, co);
}

// An embedding lookup (a constant table, token ids of the run) is a gather
// step of CpuOneDnn's own (no oneDNN primitive): the payload stores it and
// the loader checks its sizes, and it computes the same bits.
TEST_F(OneDnnPayload, GatherStepLoadsFromThePayload) {
  test::ModelBuilder b(17);
  b.input("ids", {2, 5}, onnx::TensorProto::INT64).random_weight("table", {30, 8});
  b.random_weight("w", {8, 8});
  b.node("Gather", {"table", "ids"}, {"emb"});  // [2, 5, 8]
  b.node("MatMul", {"emb", "w"}, {"y"});
  b.output("y");
  const std::string onnx_path = b.save_as(path("emb.onnx")), bpk = path("emb.bpk");
  auto rt = onednn_runtime(1);
  ASSERT_NE(rt, nullptr);
  Tensor ids(DType::kInt64, {2, 5});
  for (int64_t i = 0; i < 10; ++i) ids.data_as<int64_t>()[i] = (i * 7) % 30 - (i == 3 ? 30 : 0);
  RunResult onnx = run_model(*rt, onnx_path, {}, ids);
  ASSERT_TRUE(onnx.status.ok()) << onnx.status.to_string();
  ASSERT_EQ(onnx.backends_used, std::vector<std::string>{"CpuOneDnn"});
  CompileOptions co;
  co.shape_polymorphic = false;
  auto report = rt->compile({{"emb", onnx_path}}, bpk, co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  RunResult loaded = run_model(*rt, bpk, {}, ids);
  ASSERT_TRUE(loaded.status.ok()) << loaded.status.to_string();
  EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();  // no recompile
  EXPECT_TRUE(bitwise_equal(loaded.outputs, onnx.outputs));
}

TEST_F(OneDnnPayload, PortableWeightsAreNotReadWhenThePayloadLoads) {
  compile();
  // Damage one portable weight (a key of the method, not CpuOneDnn's own).
  const fb::Artifact* a = fb::GetSizePrefixedArtifact(bytes_.data());
  const fb::NamedData* portable = nullptr;
  for (const fb::NamedData* d : *a->named_data())
    if (d->key()->str().rfind("sq/", 0) == 0 && a->segments()->Get(d->segment())->size() > 1000)
      portable = d;
  ASSERT_NE(portable, nullptr);
  const fb::Segment* seg = a->segments()->Get(portable->segment());
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes_.data(), 4);
  bytes_[artifact_data_start(fb_size) + seg->offset() + seg->size() / 2] ^= 0x10;
  write_bytes(path("damaged.bpk"), bytes_.data(), bytes_.size());

  // Eager checksums find it at load, naming the file...
  auto eager = rt_->load_model(path("damaged.bpk"));
  ASSERT_FALSE(eager.ok());
  EXPECT_EQ(eager.status().code(), StatusCode::kCorruptData);
  EXPECT_TRUE(contains(eager.status().message(), "damaged.bpk")) << eager.status().message();
  // ...while with lazy ones nothing reads it: CpuOneDnn runs on its own
  // stored weights and gives the ONNX run's bits.
  ModelOptions lazy;
  lazy.lazy_checksums = true;
  RunResult r = run_model(*rt_, path("damaged.bpk"), lazy, input_);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(r.notes.empty()) << r.notes.front();
  EXPECT_TRUE(bitwise_equal(r.outputs, onnx_.outputs));
}

TEST_F(OneDnnPayload, PayloadOfAnotherOneDnnBuildIsRecompiledWithANote) {
  compile();
  // The payload names the oneDNN build that wrote it right after its header
  // ("CpuOneDnn payload\0", format u32, byte order u32, length u32).
  edit_payload(bytes_, 0, 0, [](uint8_t* payload, size_t size) {
    ASSERT_GT(size, 30u);
    ASSERT_EQ(std::memcmp(payload, "CpuOneDnn payload", 18), 0);
    payload[18 + 12] = '9';  // "2.6.3 (...)" -> "9.6.3 (...)"
  });
  write_bytes(path("other.bpk"), bytes_.data(), bytes_.size());
  RunResult r = run_model(*rt_, path("other.bpk"), {}, input_);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_FALSE(r.notes.empty());
  bool said = false;
  for (const std::string& n : r.notes) said |= contains(n, "oneDNN 9.") && contains(n, "recompil");
  EXPECT_TRUE(said) << ::testing::PrintToString(r.notes);
  // Recompiled on CpuOneDnn itself: the same bits as the ONNX run.
  EXPECT_EQ(r.backends_used, onnx_.backends_used);
  EXPECT_TRUE(bitwise_equal(r.outputs, onnx_.outputs));
}

TEST_F(OneDnnPayload, MalformedPayloadIsRecompiledNotTrusted) {
  compile();
  // The second half of the payload overwritten with 0xff (checksums made
  // right): whatever field that lands in, CpuOneDnn must refuse the payload
  // (a count beyond the bytes left, a descriptor it could not have made, an
  // operation oneDNN rejects) rather than hand it to oneDNN.
  edit_payload(bytes_, 0, 0, [](uint8_t* payload, size_t size) {
    std::memset(payload + size / 2, 0xff, size / 2);
  });
  write_bytes(path("cut.bpk"), bytes_.data(), bytes_.size());
  RunResult r = run_model(*rt_, path("cut.bpk"), {}, input_);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  bool said = false;
  for (const std::string& n : r.notes) said |= contains(n, "CpuOneDnn") && contains(n, "recompil");
  EXPECT_TRUE(said) << ::testing::PrintToString(r.notes);
  EXPECT_TRUE(bitwise_equal(r.outputs, onnx_.outputs));
}

// With checksums made right, a flipped payload byte reaches CpuOneDnn's
// reader (only a deliberately edited file gets there: disk corruption is
// caught by the segment checksum). Whatever it hits, loading either refuses
// the payload (and compiles the partition from the portable graph, with a
// note) or runs; it never crashes or fails to load. A byte that runs is one
// no check can judge: an unused descriptor field (most of a 12-dimension
// descriptor of a 4-D tensor), a step's name, a post-op's alpha; such an
// edit is no more detectable than edited weights. `bpk` is compiled from
// `onnx_path` here; every 1/400th byte of its payload is flipped in turn.
void flip_payload_bytes(Runtime& rt, const std::string& onnx_path, const std::string& bpk,
                        const Tensor& input, const std::string& flipped) {
  auto report = rt.compile({{"t", onnx_path}}, bpk, {});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  const std::vector<uint8_t> clean = read_bytes(bpk);
  const fb::Artifact* a = fb::GetSizePrefixedArtifact(clean.data());
  ASSERT_EQ(a->methods()->Get(0)->partitions()->Get(0)->backend()->str(), "CpuOneDnn");
  size_t payload_size = 0;
  {
    std::vector<uint8_t> probe = clean;
    edit_payload(probe, 0, 0, [&](uint8_t*, size_t size) { payload_size = size; });
  }
  ASSERT_GT(payload_size, 100u);
  RunResult clean_run = run_model(rt, bpk, {}, input);
  ASSERT_TRUE(clean_run.status.ok()) << clean_run.status.to_string();
  ASSERT_TRUE(clean_run.notes.empty()) << clean_run.notes.front();  // the unedited payload loads
  size_t refused = 0, same = 0, different = 0;
  const size_t stride = std::max<size_t>(1, payload_size / 400);
  for (size_t at = 0; at < payload_size; at += stride) {
    std::vector<uint8_t> bytes = clean;
    edit_payload(bytes, 0, 0, [&](uint8_t* payload, size_t) {
      payload[at] ^= static_cast<uint8_t>(1u << (at % 8));
    });
    write_bytes(flipped, bytes.data(), bytes.size());
    RunResult r = run_model(rt, flipped, {}, input);
    ASSERT_TRUE(r.status.ok()) << "byte " << at << ": " << r.status.to_string();
    bool recompiled = false;
    for (const std::string& n : r.notes) recompiled |= contains(n, "recompil");
    if (recompiled) ++refused;
    else if (bitwise_equal(r.outputs, clean_run.outputs)) ++same;
    else ++different;
  }
  std::cout << "flipped payload bytes: " << refused << " refused and recompiled, " << same
            << " ran unchanged, " << different << " ran with another result\n";
  EXPECT_GT(refused, 0u);
}

// flip_payload_bytes on `threads` threads with an input x of `shape` filled
// with cos(step * i), the .bpk files named after `stem` in `dir`.
void flip_payload_bytes_of(const std::string& onnx_path, const Shape& shape, float step,
                           const std::string& stem, int threads = 1) {
  auto rt = onednn_runtime(threads);
  ASSERT_NE(rt, nullptr);
  Tensor input(DType::kFloat32, shape);
  for (int64_t i = 0; i < input.numel(); ++i)
    input.data_as<float>()[i] = std::cos(step * static_cast<float>(i));
  flip_payload_bytes(*rt, onnx_path, stem + ".bpk", input, stem + ".flipped.bpk");
}

TEST_F(OneDnnPayload, EveryFlippedPayloadByteIsRefusedOrHarmlessNeverACrash) {
  rt_ = onednn_runtime(1);
  ASSERT_NE(rt_, nullptr);
  flip_payload_bytes(*rt_, model_path("tiny_cnn"), path("t.bpk"), model_input("tiny_cnn"),
                     path("f.bpk"));
}

// 3x3 convolutions of 16 channels, stride 1: the layout rule runs them
// blocked by oneDNN's Winograd kernels where the CPU has them (AVX-512), one
// with the ReLU its kernel fuses, one with a SiLU it does not (then a step
// of its own). The payload keeps oneDNN's Winograd weights layout, which the
// loader accepts only as the convolution, made again, wants it: the round
// trip gives the same bits, and flipped bytes are refused or harmless.
TEST_F(OneDnnPayload, WinogradConvolutionsLoadFromThePayload) {
  test::ModelBuilder b(17);
  b.input("x", {1, 16, 12, 12});
  std::string at = "x";
  for (int i = 0; i < 3; ++i) {
    const std::string k = std::to_string(i);
    b.random_weight("w" + k, {16, 16, 3, 3}, -0.2f, 0.2f).random_weight("b" + k, {16});
    test::set_ints(b.node("Conv", {at, "w" + k, "b" + k}, {"c" + k}), "pads", {1, 1, 1, 1});
    if (i == 1) {
      b.node("Sigmoid", {"c" + k}, {"s" + k});
      b.node("Mul", {"c" + k, "s" + k}, {"a" + k});
    } else {
      b.node("Relu", {"c" + k}, {"a" + k});
    }
    at = "a" + k;
  }
  b.random_weight("wp", {8, 16, 1, 1});
  b.node("Conv", {at, "wp"}, {"y"});
  b.output("y");
  const std::string onnx_path = b.save_as(path("wino.onnx"));
  expect_payload_round_trip(onnx_path, path("wino.bpk"), {1, 16, 12, 12}, {});
  flip_payload_bytes_of(onnx_path, {1, 16, 12, 12}, 0.11f, path("w"));
}

// A bidirectional LSTM over x [6, batch, 5], hidden 8, with initial states
// h0 (and c0 and peepholes with `full`), compiled into `stem`.bpk on
// `threads` threads: the round trip gives the same bits, and flipped bytes
// are refused or harmless.
void expect_lstm_payload(const std::string& stem, int64_t batch, bool full, int threads) {
  test::ModelBuilder b(17);
  const int64_t t = 6, n = batch, c = 5, h = 8;
  b.input("x", {t, n, c});
  b.random_weight("w", {2, 4 * h, c}, -0.5f, 0.5f).random_weight("r", {2, 4 * h, h}, -0.5f, 0.5f);
  b.random_weight("b", {2, 8 * h}, -0.5f, 0.5f).random_weight("h0", {2, n, h});
  std::vector<std::string> ins = {"x", "w", "r", "b", "", "h0"};
  if (full) {
    b.random_weight("c0", {2, n, h}).random_weight("p", {2, 3 * h}, -0.5f, 0.5f);
    ins.insert(ins.end(), {"c0", "p"});
  }
  auto& lstm = b.node("LSTM", ins, {"y", "yh", "yc"}, "lstm");
  test::set_string(lstm, "direction", "bidirectional");
  test::set_int(lstm, "hidden_size", h);
  b.output("y", {t, 2, n, h}).output("yh", {2, n, h}).output("yc", {2, n, h});
  const std::string onnx_path = b.save_as(stem + ".onnx");
  CompileOptions co;
  co.shape_polymorphic = false;
  expect_payload_round_trip(onnx_path, stem + ".bpk", {t, n, c}, co, threads);
  flip_payload_bytes_of(onnx_path, {t, n, c}, 0.23f, stem + "_flipped", threads);
}

// At batch 2, with peepholes and both initial states (lowering_rnn.cpp):
// one lstm_forward step, its weights in the layout oneDNN picked, its output
// Y an alias with swapped axes. The loader checks the RNN descriptor (cell,
// direction, every memory descriptor, the states it must be given).
TEST_F(OneDnnPayload, LstmLoadsFromThePayload) { expect_lstm_payload(path("lstm"), 2, true, 1); }

// At batch 1 on two threads: the directions are two steps run side by side
// (Step::beside_next), the second with a scratchpad of its own. The payload
// keeps them so; the loader checks that the pair shares no memory it writes.
TEST_F(OneDnnPayload, LstmDirectionsBesideEachOtherLoadFromThePayload) {
  expect_lstm_payload(path("lstm1"), 1, false, 2);
}

// QuantizeLinear and DequantizeLinear around a float convolution: before it
// one scale, which runs as one pass over the floats (steps::Quantize);
// after it one scale per channel, a binary division with round and
// zero-point post-ops into int8 and a reorder whose scales and zero point
// are attributes; then an Erf, a loop of the backend's (steps::Eltwise). The
// payload keeps the scales, ranges, zero points and function (a step made
// without them would give other bits), and flipped bytes are refused or
// harmless.
TEST_F(OneDnnPayload, QuantizeAndDequantizeLoadFromThePayload) {
  test::ModelBuilder b(13);
  b.input("x", {1, 8, 6, 6}).random_weight("w", {16, 8, 3, 3});
  std::vector<float> cs(16);
  for (size_t i = 0; i < cs.size(); ++i) cs[i] = 0.015f + 0.001f * static_cast<float>(i);
  b.init_f32("xs", {}, {0.013f}).init_f32("cs", {16}, cs);
  auto zero_point = [&](const std::string& name, int elem, const std::vector<int64_t>& dims,
                        int8_t v) {
    auto* t = b.graph().add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    t->set_raw_data(std::string(static_cast<size_t>(n), static_cast<char>(v)));
  };
  zero_point("xz", onnx::TensorProto::UINT8, {}, 119);
  zero_point("cz", onnx::TensorProto::INT8, {16}, -3);
  b.node("QuantizeLinear", {"x", "xs", "xz"}, {"xq"});
  b.node("DequantizeLinear", {"xq", "xs", "xz"}, {"xd"});
  test::set_ints(b.node("Conv", {"xd", "w"}, {"c"}), "pads", {1, 1, 1, 1});
  test::set_int(b.node("QuantizeLinear", {"c", "cs", "cz"}, {"cq"}), "axis", 1);
  test::set_int(b.node("DequantizeLinear", {"cq", "cs", "cz"}, {"cd"}), "axis", 1);
  b.node("Erf", {"cd"}, {"y"});
  b.output("y", {1, 16, 6, 6});
  const std::string onnx_path = b.save_as(path("qdq.onnx"));
  CompileOptions co;
  co.shape_polymorphic = false;
  expect_payload_round_trip(onnx_path, path("qdq.bpk"), {1, 8, 6, 6}, co);
  flip_payload_bytes_of(onnx_path, {1, 8, 6, 6}, 0.31f, path("q"));
}

// A vanilla RNN (ReLU, reversed, with an initial state): a vanilla_rnn_forward
// step loads from the payload and gives the same bits.
TEST_F(OneDnnPayload, RnnLoadsFromThePayload) {
  test::ModelBuilder b(17);
  const int64_t t = 4, n = 3, c = 5, h = 7;
  b.input("x", {t, n, c});
  b.random_weight("w", {1, h, c}, -0.5f, 0.5f).random_weight("r", {1, h, h}, -0.5f, 0.5f);
  b.random_weight("b", {1, 2 * h}, -0.5f, 0.5f).random_weight("h0", {1, n, h});
  auto& rnn = b.node("RNN", {"x", "w", "r", "b", "", "h0"}, {"y", "yh"}, "rnn");
  test::set_string(rnn, "direction", "reverse");
  test::set_int(rnn, "hidden_size", h);
  onnx::AttributeProto* acts = rnn.add_attribute();
  acts->set_name("activations");
  acts->set_type(onnx::AttributeProto::STRINGS);
  acts->add_strings("Relu");
  b.output("y", {t, 1, n, h}).output("yh", {1, n, h});
  CompileOptions co;
  co.shape_polymorphic = false;
  expect_payload_round_trip(b.save_as(path("rnn.onnx")), path("rnn.bpk"), {t, n, c}, co);
}

// encoder_dyn (BERT-style, symbolic batch and seq) compiled with the default
// backends at three signatures.
class OneDnnShapes : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    rt_ = onednn_runtime(1);
    ASSERT_NE(rt_, nullptr);
    ids_ = model_input("encoder_dyn");
    ASSERT_EQ(ids_.dtype(), DType::kInt64);
    auto onnx = rt_->load_model(model_path("encoder_dyn"));
    ASSERT_TRUE(onnx.ok()) << onnx.status().to_string();
    onnx_ = *onnx;
  }

  // Token ids of any shape, taken from the model's own input (so in its
  // vocabulary).
  Tensor ids_of(const Shape& shape) const {
    Tensor t(DType::kInt64, shape);
    for (int64_t i = 0; i < t.numel(); ++i)
      t.data_as<int64_t>()[i] = ids_.data_as<int64_t>()[(i * 7) % ids_.numel()];
    return t;
  }

  // `model` run at `shape` in a session of its own.
  std::vector<Tensor> run(Model& model, const Shape& shape) const {
    std::vector<Tensor> out;
    auto session = model.create_session();
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    if (!session.ok()) return out;
    Status st = (*session)->set_input("input_ids", ids_of(shape));
    if (st.ok()) st = (*session)->run();
    EXPECT_TRUE(st.ok()) << shape_to_string(shape) << ": " << st.to_string();
    for (size_t i = 0; st.ok() && i < (*session)->num_outputs(); ++i)
      out.push_back((*session)->output(i).clone());
    return out;
  }

  nlohmann::json compile(bool polymorphic) {
    CompileOptions co;
    for (const Shape& s : stored_) co.shapes.push_back({{"input_ids", s}});
    co.shape_polymorphic = polymorphic;
    auto report = rt_->compile({{"enc", model_path("encoder_dyn")}}, path("enc.bpk"), co);
    EXPECT_TRUE(report.ok()) << report.status().to_string();
    if (report.ok()) {
      EXPECT_EQ(report->specializations, 3u);
    }
    return inspect_json(path("enc.bpk"));
  }

  const std::vector<Shape> stored_ = {{1, 8}, {2, 16}, {1, 33}};
  std::shared_ptr<Runtime> rt_;
  Tensor ids_;
  std::shared_ptr<Model> onnx_;
};

// Stored shape-polymorphic (the default): compiled at load as loading the
// ONNX model compiles it, so every signature computes the ONNX model's bits;
// a fourth signature is compiled from the portable graph, with a note.
TEST_F(OneDnnShapes, PolymorphicPartitionsMatchTheOnnxModelBitForBit) {
  nlohmann::json j = compile(true);
  const auto& specs = j["methods"][0]["specializations"];
  ASSERT_EQ(specs.size(), 3u);
  for (const auto& s : specs) {
    size_t onednn = 0;
    for (const auto& p : s["partitions"])
      if (p["backend"] == "CpuOneDnn") {
        ++onednn;
        EXPECT_EQ(p["polymorphic"], true) << s.dump();
      }
    EXPECT_GE(onednn, 1u) << s.dump();
  }
  auto bpk = rt_->load_model(path("enc.bpk"));
  ASSERT_TRUE(bpk.ok()) << bpk.status().to_string();
  for (const Shape& shape : stored_) {
    SCOPED_TRACE(shape_to_string(shape));
    std::vector<Tensor> want = run(*onnx_, shape);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(bitwise_equal(run(**bpk, shape), want));
  }
  EXPECT_TRUE((*bpk)->notes().empty()) << ::testing::PrintToString((*bpk)->notes());
  EXPECT_EQ((*bpk)->backends_used(), onnx_->backends_used());
  const Shape other = {3, 7};
  EXPECT_TRUE(bitwise_equal(run(**bpk, other), run(*onnx_, other)));
  ASSERT_EQ((*bpk)->notes().size(), 1u);
  EXPECT_TRUE(contains((*bpk)->notes()[0], "no specialisation stored for input_ids=[3,7]"))
      << (*bpk)->notes()[0];
}

// Stored concrete (shape_polymorphic = false): each signature's own payload
// and reordered weights, loaded without compiling. CpuOneDnn's concrete
// compile may round differently from its polymorphic one (a MatMul of two
// activations is one runtime-dims primitive there), so the outputs are
// compared with the ONNX model's within float tolerance, not bit for bit.
TEST_F(OneDnnShapes, ConcretePartitionsLoadTheirOwnPayloads) {
  nlohmann::json j = compile(false);
  const auto& specs = j["methods"][0]["specializations"];
  ASSERT_EQ(specs.size(), 3u);
  for (const auto& s : specs)
    for (const auto& p : s["partitions"])
      if (p["backend"] == "CpuOneDnn") {
        EXPECT_EQ(p["polymorphic"], false);
        EXPECT_GT(p["payload_bytes"].get<size_t>(), 0u);
      }
  size_t per_signature_blobs = 0;
  for (const auto& d : j["named_data"])
    per_signature_blobs += d["key"].get<std::string>().rfind("CpuOneDnn/enc/2x16/", 0) == 0;
  EXPECT_GE(per_signature_blobs, 1u) << "CpuOneDnn's blobs are named per signature";

  auto bpk = rt_->load_model(path("enc.bpk"));
  ASSERT_TRUE(bpk.ok()) << bpk.status().to_string();
  for (const Shape& shape : stored_) {
    SCOPED_TRACE(shape_to_string(shape));
    std::vector<Tensor> want = run(*onnx_, shape);
    std::vector<Tensor> got = run(**bpk, shape);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_EQ(got[i].shape(), want[i].shape());
      double worst = 0, scale = 0;
      for (int64_t k = 0; k < got[i].numel(); ++k) {
        scale = std::max(scale, static_cast<double>(std::fabs(want[i].data_as<float>()[k])));
        worst = std::max(worst, static_cast<double>(std::fabs(got[i].data_as<float>()[k] -
                                                              want[i].data_as<float>()[k])));
      }
      EXPECT_LE(worst, 1e-5 * scale);
    }
    // Its payloads were loaded: nothing compiled shape-polymorphic, no note.
    for (const auto& p : (*bpk)->partitions()) EXPECT_FALSE(p.polymorphic) << p.backend;
  }
  EXPECT_TRUE((*bpk)->notes().empty()) << ::testing::PrintToString((*bpk)->notes());
  EXPECT_EQ((*bpk)->specialization_stats().polymorphic_partitions, 0u);
}

}  // namespace
}  // namespace backplane::artifact_test
