// Corrupt and truncated artifacts (.bpk) and data files (.bpd): every case
// either fails cleanly — a status of the documented kinds whose message names
// the damaged file — or, only when the damaged bytes are padding nobody reads,
// computes exactly what the intact file computes. Never a crash, never a
// different answer; with lazy checksums too (corruption then surfaces at load
// or at run, still before a wrong result).
#include "artifact/artifact.hpp"
#include "artifact_generated.h"
#include "artifact_util.hpp"

#include <gtest/gtest.h>

#include <random>
#include <set>

namespace backplane::artifact_test {
namespace {

// Which bytes of a file are read: the header and metadata, and the data
// segments stored in it. Everything else is padding.
struct Layout {
  uint64_t header_end = 0;  // [u32 size][FlatBuffer][u64 checksum]
  uint64_t data_start = 0;
  std::vector<std::pair<uint64_t, uint64_t>> segments;  // [begin, end) in the file
  uint64_t last_byte_read() const {
    uint64_t end = header_end;
    for (const auto& s : segments) end = std::max(end, s.second);
    return end;
  }
  bool is_read(uint64_t pos) const {
    if (pos < header_end) return true;
    for (const auto& s : segments)
      if (pos >= s.first && pos < s.second) return true;
    return false;
  }
};

Layout layout_of(const std::string& bpk, uint32_t file_index, const std::string& file) {
  Layout l;
  auto bytes = read_bytes(file);
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  l.header_end = 4 + uint64_t{fb_size} + 8;
  l.data_start = artifact_data_start(fb_size);
  auto art = ArtifactFile::open(bpk, {}, false);
  EXPECT_TRUE(art.ok()) << art.status().to_string();
  if (art.ok())
    for (const ArtifactSegment& s : (*art)->segments())
      if (s.file == file_index)
        l.segments.emplace_back(l.data_start + s.offset, l.data_start + s.offset + s.size);
  return l;
}

class Corruption : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    rt_ = make_runtime();
    ASSERT_NE(rt_, nullptr);
    input_ = model_input("tiny_cnn");
  }

  // Compiles tiny_cnn to `name`.bpk (weights in `name`.bpd if external) and
  // returns the outputs of the intact artifact.
  std::vector<Tensor> compile(const std::string& name, bool external) {
    CompileOptions co = cpuref_compile();
    if (external) co.external_data = path(name + ".bpd");
    auto r = rt_->compile({{"m", model_path("tiny_cnn")}}, path(name + ".bpk"), co);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    RunResult intact = run_model(*rt_, path(name + ".bpk"), {}, input_);
    EXPECT_TRUE(intact.status.ok()) << intact.status.to_string();
    RunResult onnx = run_model(*rt_, model_path("tiny_cnn"), cpuref_only(), input_);
    EXPECT_TRUE(bitwise_equal(intact.outputs, onnx.outputs));
    return intact.outputs;
  }

  // Loads and runs `bpk` (whose file `damaged` was damaged at `pos`);
  // checks the outcome. `may_succeed`: the damage touched only padding.
  void check(const std::string& bpk, const std::string& damaged, bool lazy, bool may_succeed,
             const std::vector<Tensor>& expected, const std::string& what) {
    SCOPED_TRACE(what + (lazy ? " (lazy checksums)" : ""));
    ModelOptions mo;
    mo.lazy_checksums = lazy;
    RunResult r = run_model(*rt_, bpk, mo, input_);
    ++cases_;
    if (r.status.ok()) {
      ++succeeded_;
      EXPECT_TRUE(may_succeed) << "damage to bytes that are read went unnoticed";
      EXPECT_TRUE(bitwise_equal(r.outputs, expected))
          << "a damaged file computed a different answer";
      return;
    }
    static const std::set<StatusCode> allowed = {
        StatusCode::kCorruptData, StatusCode::kVersionMismatch, StatusCode::kInvalidArgument,
        StatusCode::kNotFound};
    EXPECT_TRUE(allowed.count(r.status.code())) << r.status.to_string();
    EXPECT_TRUE(contains(r.status.message(), fs::path(damaged).filename().string()))
        << r.status.to_string();
    // inspect reads as strictly as loading: it must not accept what loading refused
    // for a reason other than lazily found corruption.
    auto text = inspect_artifact(bpk, true);
    if (!lazy) {
      EXPECT_FALSE(text.ok()) << "inspect accepted a file loading rejected: "
                              << r.status.to_string();
    }
  }

  std::shared_ptr<Runtime> rt_;
  Tensor input_;
  int cases_ = 0, succeeded_ = 0;
};

std::vector<uint64_t> truncation_points(uint64_t size, const Layout& l) {
  std::set<uint64_t> at;
  for (uint64_t k = 0; k < 64; ++k) at.insert(size * k / 64);
  for (uint64_t i = 0; i <= 64; ++i) at.insert(i);
  for (int64_t d = -2; d <= 2; ++d) at.insert(l.header_end + d);
  at.insert(l.data_start - 1);
  at.insert(l.data_start);
  if (!l.segments.empty()) {
    at.insert(l.segments.front().first + 1);
    at.insert((l.segments.front().first + l.segments.front().second) / 2);
    at.insert(l.segments.front().second - 1);
    at.insert(l.segments.back().second - 1);
    at.insert(l.segments.back().second);
  }
  std::vector<uint64_t> out;
  for (uint64_t p : at)
    if (p < size) out.push_back(p);
  return out;
}

std::vector<uint64_t> flip_points(uint64_t size, const Layout& l, size_t n, uint32_t seed) {
  std::set<uint64_t> at;
  // Evenly over the file, then every region at least a few times.
  for (size_t i = 0; i < n / 2; ++i) at.insert(size * i / (n / 2));
  std::mt19937 rng(seed);
  auto some_in = [&](uint64_t begin, uint64_t end, int count) {
    if (end <= begin) return;
    for (int i = 0; i < count; ++i) at.insert(begin + rng() % (end - begin));
  };
  some_in(0, 16, 8);                           // size prefix, offset, identifier
  some_in(0, l.header_end, 24);                // the metadata and its checksum
  some_in(l.header_end - 8, l.header_end, 4);  // the checksum itself
  for (const auto& s : l.segments) some_in(s.first, s.second, 6);
  while (at.size() < n) at.insert(rng() % size);
  return std::vector<uint64_t>(at.begin(), at.end());
}

TEST_F(Corruption, TruncatedArtifact) {
  const std::vector<Tensor> expected = compile("m", false);
  ASSERT_FALSE(expected.empty());
  const auto bytes = read_bytes(path("m.bpk"));
  const Layout l = layout_of(path("m.bpk"), 0, path("m.bpk"));
  ASSERT_FALSE(l.segments.empty());
  for (uint64_t len : truncation_points(bytes.size(), l)) {
    write_bytes(path("t.bpk"), bytes.data(), len);
    for (bool lazy : {false, true})
      check(
          path("t.bpk"), path("t.bpk"), lazy, len >= l.last_byte_read(), expected,
          "truncated to " + std::to_string(len) + " of " + std::to_string(bytes.size()) + " bytes");
  }
  EXPECT_GT(cases_, 150);
}

TEST_F(Corruption, FlippedArtifactBytes) {
  const std::vector<Tensor> expected = compile("m", false);
  ASSERT_FALSE(expected.empty());
  const auto bytes = read_bytes(path("m.bpk"));
  const Layout l = layout_of(path("m.bpk"), 0, path("m.bpk"));
  ASSERT_FALSE(l.segments.empty());
  std::mt19937 rng(1234);
  int read_and_flipped = 0;
  for (uint64_t pos : flip_points(bytes.size(), l, 200, 99)) {
    auto copy = bytes;
    const uint8_t mask = static_cast<uint8_t>(1u << (rng() % 8));
    copy[pos] ^= mask;
    write_bytes(path("f.bpk"), copy.data(), copy.size());
    read_and_flipped += l.is_read(pos);
    for (bool lazy : {false, true})
      check(path("f.bpk"), path("f.bpk"), lazy, !l.is_read(pos), expected,
            "bit " + std::to_string(mask) + " flipped at " + std::to_string(pos) + " of " +
                std::to_string(bytes.size()));
  }
  EXPECT_GE(cases_, 400);
  EXPECT_GE(read_and_flipped, 80) << "most flips must hit bytes that are read";
}

TEST_F(Corruption, FlippedWeightWithLazyChecksumsFailsAtLoadOrRun) {
  const std::vector<Tensor> expected = compile("m", false);
  ASSERT_FALSE(expected.empty());
  const auto bytes = read_bytes(path("m.bpk"));
  auto art = ArtifactFile::open(path("m.bpk"), {}, false);
  ASSERT_TRUE(art.ok());
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  // Every named weight, damaged in its middle: eager and lazy both refuse.
  ASSERT_FALSE((*art)->named_data().empty());
  int weights = 0;
  for (const ArtifactNamedData& d : (*art)->named_data()) {
    const ArtifactSegment& s = (*art)->segments()[d.segment];
    if (s.size == 0) continue;
    ++weights;
    auto copy = bytes;
    copy[artifact_data_start(fb_size) + s.offset + s.size / 2] ^= 0x01;
    write_bytes(path("w.bpk"), copy.data(), copy.size());
    for (bool lazy : {false, true}) {
      ModelOptions mo;
      mo.lazy_checksums = lazy;
      RunResult r = run_model(*rt_, path("w.bpk"), mo, input_);
      ASSERT_FALSE(r.status.ok()) << d.key << (lazy ? " (lazy)" : "");
      EXPECT_EQ(r.status.code(), StatusCode::kCorruptData) << r.status.to_string();
      EXPECT_TRUE(contains(r.status.message(), "checksum")) << r.status.to_string();
      EXPECT_TRUE(contains(r.status.message(), "w.bpk")) << r.status.to_string();
    }
  }
  EXPECT_GE(weights, 4);
}

// MockOp runs single ops (imperative partitions) in its own device memory:
// the executor copies constant inputs straight from the mapping to the device,
// without a backend asking the NamedDataMap. Lazy checksums must cover them.
TEST_F(Corruption, LazyChecksumsCoverConstantsOfSingleOpPartitions) {
  auto acc = make_runtime(BACKPLANE_TESTING_ACCEL_DIR);
  ASSERT_NE(acc, nullptr);
  CompileOptions co;
  co.backends = {"MockOp", "CpuRef"};
  auto report = acc->compile({{"m", model_path("tiny_cnn")}}, path("op.bpk"), co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  nlohmann::json j = inspect_json(path("op.bpk"));
  size_t imperative = 0;
  for (const auto& p : j["methods"][0]["partitions"])
    imperative += p["backend"] == "MockOp" && p["imperative"] == true;
  ASSERT_GT(imperative, 0u) << j["methods"][0]["partitions"].dump();

  ModelOptions lazy;
  lazy.lazy_checksums = true;
  RunResult intact = run_model(*acc, path("op.bpk"), lazy, input_);
  ASSERT_TRUE(intact.status.ok()) << intact.status.to_string();
  RunResult onnx = run_model(*rt_, model_path("tiny_cnn"), cpuref_only(), input_);
  ASSERT_TRUE(bitwise_equal(intact.outputs, onnx.outputs));

  const auto bytes = read_bytes(path("op.bpk"));
  auto art = ArtifactFile::open(path("op.bpk"), {}, false);
  ASSERT_TRUE(art.ok());
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  int weights = 0;
  for (const ArtifactNamedData& d : (*art)->named_data()) {
    const ArtifactSegment& s = (*art)->segments()[d.segment];
    if (s.size == 0) continue;
    ++weights;
    auto copy = bytes;
    copy[artifact_data_start(fb_size) + s.offset + s.size / 2] ^= 0x10;
    write_bytes(path("op_bad.bpk"), copy.data(), copy.size());
    RunResult r = run_model(*acc, path("op_bad.bpk"), lazy, input_);
    ASSERT_FALSE(r.status.ok()) << d.key << ": a damaged weight computed "
                                << (bitwise_equal(r.outputs, intact.outputs) ? "the same"
                                                                             : "a different")
                                << " answer";
    EXPECT_EQ(r.status.code(), StatusCode::kCorruptData) << r.status.to_string();
    EXPECT_TRUE(contains(r.status.message(), "checksum")) << r.status.to_string();
  }
  EXPECT_GE(weights, 4);
}

TEST_F(Corruption, TruncatedDataFile) {
  const std::vector<Tensor> expected = compile("e", true);
  ASSERT_FALSE(expected.empty());
  const auto bytes = read_bytes(path("e.bpd"));
  const auto pristine = bytes;
  const Layout l = layout_of(path("e.bpk"), 1, path("e.bpd"));
  ASSERT_FALSE(l.segments.empty());
  for (uint64_t len : truncation_points(bytes.size(), l)) {
    write_bytes(path("e.bpd"), bytes.data(), len);
    for (bool lazy : {false, true})
      check(path("e.bpk"), path("e.bpd"), lazy, len >= l.last_byte_read(), expected,
            "data file truncated to " + std::to_string(len) + " of " +
                std::to_string(bytes.size()) + " bytes");
  }
  write_bytes(path("e.bpd"), pristine.data(), pristine.size());
  EXPECT_TRUE(run_model(*rt_, path("e.bpk"), {}, input_).status.ok());
  EXPECT_GT(cases_, 150);
}

TEST_F(Corruption, FlippedDataFileBytes) {
  const std::vector<Tensor> expected = compile("e", true);
  ASSERT_FALSE(expected.empty());
  const auto bytes = read_bytes(path("e.bpd"));
  const Layout l = layout_of(path("e.bpk"), 1, path("e.bpd"));
  ASSERT_FALSE(l.segments.empty());
  std::mt19937 rng(4321);
  for (uint64_t pos : flip_points(bytes.size(), l, 120, 7)) {
    auto copy = bytes;
    const uint8_t mask = static_cast<uint8_t>(1u << (rng() % 8));
    copy[pos] ^= mask;
    write_bytes(path("e.bpd"), copy.data(), copy.size());
    for (bool lazy : {false, true})
      check(path("e.bpk"), path("e.bpd"), lazy, !l.is_read(pos), expected,
            "data file bit " + std::to_string(mask) + " flipped at " + std::to_string(pos));
  }
  EXPECT_GE(cases_, 240);
}

}  // namespace
}  // namespace backplane::artifact_test
