// NamedBlobStore rules (DESIGN.md, "The artifact"): same key with different
// bytes is an error, identical bytes under two keys are stored once,
// alignment is at least 64 and a page for blobs of 64 KiB or more — and the
// written file honours it (offsets and the mapped pointers backends get).
#include "artifact/artifact.hpp"
#include "artifact_generated.h"
#include "artifact_util.hpp"
#include "core/named_blob_store.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>
#include <numeric>

namespace backplane::artifact_test {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 7 + (i >> 8));
  return v;
}

TEST(NamedBlobStore, SameKeyDifferentBytesIsAnError) {
  NamedBlobStore s;
  auto a = pattern(100, 1), b = pattern(100, 2);
  ASSERT_TRUE(s.add("w", a.data(), a.size(), 0, "").ok());
  Status st = s.add("w", b.data(), b.size(), 0, "");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(st.message(), "'w'")) << st.message();
  // A different size under the same key too.
  st = s.add("w", a.data(), a.size() - 1, 0, "");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  // The store is unchanged: one key, the first bytes.
  ASSERT_EQ(s.blobs().size(), 1u);
  EXPECT_EQ(std::memcmp(s.blobs()[0].data(), a.data(), a.size()), 0);
  EXPECT_EQ(s.requested_bytes(), 100u);
}

TEST(NamedBlobStore, SameKeySameBytesIsAccepted) {
  NamedBlobStore s;
  auto a = pattern(100, 1);
  auto copy = a;
  ASSERT_TRUE(s.add("w", a.data(), a.size(), 0, "").ok());
  ASSERT_TRUE(s.add("w", copy.data(), copy.size(), 0, "").ok());
  EXPECT_EQ(s.keys().size(), 1u);
  EXPECT_EQ(s.blobs().size(), 1u);
  EXPECT_EQ(s.stored_bytes(), 100u);
}

TEST(NamedBlobStore, IdenticalBytesUnderTwoKeysAreStoredOnce) {
  NamedBlobStore s;
  auto a = pattern(1000, 3);
  auto copy = a;
  auto other = pattern(1000, 4);
  ASSERT_TRUE(s.add("m1/w", a.data(), a.size(), 0, "").ok());
  ASSERT_TRUE(s.add_borrowed("m2/w", copy.data(), copy.size(), 0, "").ok());
  ASSERT_TRUE(s.add("m2/v", other.data(), other.size(), 0, "").ok());
  EXPECT_EQ(s.keys().size(), 3u);
  EXPECT_EQ(s.blobs().size(), 2u);
  EXPECT_EQ(s.keys().at("m1/w"), s.keys().at("m2/w"));
  EXPECT_NE(s.keys().at("m1/w"), s.keys().at("m2/v"));
  EXPECT_EQ(s.requested_bytes(), 3000u);
  EXPECT_EQ(s.stored_bytes(), 2000u);
}

TEST(NamedBlobStore, EmptyBlobsAndBadArguments) {
  NamedBlobStore s;
  EXPECT_TRUE(s.add("empty", nullptr, 0, 0, "").ok());
  EXPECT_TRUE(s.add("empty2", nullptr, 0, 0, "").ok());
  EXPECT_EQ(s.blobs().size(), 1u);  // two empty blobs are the same bytes
  auto a = pattern(10, 0);
  EXPECT_EQ(s.add("", a.data(), a.size(), 0, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.add("x", nullptr, 10, 0, "").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.add("y", a.data(), a.size(), 48, "").code(),
            StatusCode::kInvalidArgument);  // not a power of two
}

TEST(NamedBlobStore, AlignmentRules) {
  NamedBlobStore s;
  auto small = pattern(10, 1), medium = pattern(65535, 2), large = pattern(65536, 3),
       wide = pattern(100, 4);
  ASSERT_TRUE(s.add("small", small.data(), small.size(), 0, "").ok());
  ASSERT_TRUE(s.add("tiny_request", small.data() + 1, 5, 8, "").ok());  // below the minimum
  ASSERT_TRUE(s.add("medium", medium.data(), medium.size(), 0, "").ok());
  ASSERT_TRUE(s.add("large", large.data(), large.size(), 0, "").ok());
  ASSERT_TRUE(s.add("wide", wide.data(), wide.size(), 256, "").ok());
  auto align = [&](const std::string& k) { return s.blobs()[s.keys().at(k)].alignment; };
  EXPECT_EQ(align("small"), 64u);
  EXPECT_EQ(align("tiny_request"), 64u);
  EXPECT_EQ(align("medium"), 64u);
  EXPECT_EQ(align("large"), 4096u);
  EXPECT_EQ(align("wide"), 256u);
  // A shared blob gets the strictest alignment any of its keys asked for.
  auto same = wide;
  ASSERT_TRUE(s.add("wide_again", same.data(), same.size(), 1024, "").ok());
  EXPECT_EQ(align("wide"), 1024u);
  EXPECT_EQ(align("wide_again"), 1024u);
}

// A graph with no constants (X -> Identity -> Y) to carry a store of blobs.
ir::Graph identity_graph() {
  ir::Graph g;
  g.name = "identity";
  g.opsets[""] = 17;
  ir::Value x;
  x.name = "X";
  x.dtype = DType::kFloat32;
  x.shape = {1, 4};
  x.has_shape = true;
  x.dim_params = {"", ""};
  ir::Value y = x;
  y.name = "Y";
  int xi = g.add_value(x), yi = g.add_value(y);
  ir::Node n;
  n.name = "id";
  n.op_type = "Identity";
  n.inputs = {xi};
  n.outputs = {yi};
  g.nodes.push_back(n);
  g.values[yi].producer = 0;
  g.inputs = {xi};
  g.outputs = {yi};
  return g;
}

class WrittenAlignment : public TempDirTest {};

TEST_F(WrittenAlignment, OffsetsAndPointersAreAligned) {
  NamedBlobStore s;
  // Sizes chosen so a packed layout would misalign the next blob.
  std::vector<std::vector<uint8_t>> blobs = {
      pattern(1, 1),     pattern(100, 2), pattern(65536, 3), pattern(3, 4),
      pattern(70001, 5), pattern(200, 6), pattern(65535, 7), pattern(4097, 8)};
  std::vector<size_t> asked = {0, 0, 0, 512, 0, 128, 0, 0};
  for (size_t i = 0; i < blobs.size(); ++i)
    ASSERT_TRUE(
        s.add("blob" + std::to_string(i), blobs[i].data(), blobs[i].size(), asked[i], "").ok());
  ir::Graph g = identity_graph();
  ArtifactMethod m;
  m.name = "main";
  m.portable = &g;
  ArtifactSpecialization& spec = m.specializations.emplace_back();
  spec.graph = &g;
  spec.signature = {g.values[g.inputs[0]].shape};
  ArtifactPartition p;
  p.backend = "CpuRef";
  p.nodes = {0};
  spec.partitions.push_back(p);
  auto sizes = write_artifact(path("a.bpk"), {m}, s);
  ASSERT_TRUE(sizes.ok()) << sizes.status().to_string();
  EXPECT_EQ(sizes->file_bytes, fs::file_size(path("a.bpk")));

  auto file = ArtifactFile::open(path("a.bpk"), {}, false);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto bytes = read_bytes(path("a.bpk"));
  const fb::Artifact& r = *fb::GetSizePrefixedArtifact(bytes.data());
  ASSERT_NE(r.segments(), nullptr);
  ASSERT_EQ(r.segments()->size(), blobs.size());
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  const uint64_t data_start = artifact_data_start(fb_size);
  EXPECT_EQ(data_start % 4096, 0u);
  EXPECT_GE(data_start, 4u + fb_size + 8u);
  // Segments do not overlap and each starts at a multiple of its alignment,
  // both relative to the data area and in the file.
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const fb::Segment* seg : *r.segments()) {
    EXPECT_GE(seg->alignment(), 64u);
    EXPECT_EQ(seg->offset() % seg->alignment(), 0u);
    EXPECT_EQ((data_start + seg->offset()) % seg->alignment(), 0u);
    if (seg->size() >= 65536) {
      EXPECT_EQ(seg->alignment(), 4096u);
    }
    ranges.emplace_back(seg->offset(), seg->offset() + seg->size());
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) EXPECT_LE(ranges[i - 1].second, ranges[i].first);

  ArtifactDataMap map(*file);
  ASSERT_EQ(map.num_keys(), blobs.size());
  for (size_t i = 0; i < blobs.size(); ++i) {
    const std::string key = "blob" + std::to_string(i);
    const void* data = nullptr;
    size_t size = 0;
    ASSERT_TRUE(map.get(key, &data, &size).ok()) << key;
    ASSERT_EQ(size, blobs[i].size()) << key;
    EXPECT_EQ(std::memcmp(data, blobs[i].data(), size), 0) << key;
    const size_t want =
        std::max<size_t>({64, asked[i], blobs[i].size() >= 65536 ? size_t{4096} : size_t{0}});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % want, 0u)
        << key << " at " << data << " needs " << want;
  }
  const void* d;
  size_t n;
  EXPECT_EQ(map.get("no_such_key", &d, &n).code(), StatusCode::kNotFound);
}

// An empty blob (a Constant of shape [0]) shares its offset with the next
// blob; wherever it sorts among them, nothing is written for it (a gap
// before it would be negative).
TEST_F(WrittenAlignment, EmptyBlobsTakeNoRoomWhereverTheySort) {
  // A failure writes until a write fails: a file-size limit keeps that off the disk.
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  struct rlimit limited = old;
  limited.rlim_cur = rlim_t{64} << 20;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  auto previous = std::signal(SIGXFSZ, SIG_IGN);
  ir::Graph g = identity_graph();
  for (size_t at = 0; at <= 40; ++at) {
    NamedBlobStore s;
    std::vector<std::vector<uint8_t>> blobs;
    for (size_t i = 0; i < 40; ++i) blobs.push_back(pattern(16 + i % 3, static_cast<uint8_t>(i)));
    for (size_t i = 0; i <= blobs.size(); ++i) {
      if (i == at) {
        ASSERT_TRUE(s.add("empty", nullptr, 0, 0, "").ok());
      }
      if (i < blobs.size()) {
        ASSERT_TRUE(
            s.add("blob" + std::to_string(i), blobs[i].data(), blobs[i].size(), 0, "").ok());
      }
    }
    ArtifactMethod m;
    m.name = "main";
    m.portable = &g;
    ArtifactSpecialization& spec = m.specializations.emplace_back();
    spec.graph = &g;
    spec.signature = {g.values[g.inputs[0]].shape};
    ArtifactPartition p;
    p.backend = "CpuRef";
    p.nodes = {0};
    spec.partitions.push_back(p);
    auto sizes = write_artifact(path("e.bpk"), {m}, s);
    ASSERT_TRUE(sizes.ok()) << "empty blob at " << at << ": " << sizes.status().to_string();
    EXPECT_LT(sizes->file_bytes, size_t{1} << 20) << "empty blob at " << at;
    auto file = ArtifactFile::open(path("e.bpk"), {}, false);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    ArtifactDataMap map(*file);
    const void* data = nullptr;
    size_t size = 1;
    ASSERT_TRUE(map.get("empty", &data, &size).ok());
    EXPECT_EQ(size, 0u);
    ASSERT_TRUE(map.get("blob39", &data, &size).ok());
    EXPECT_EQ(std::memcmp(data, blobs[39].data(), size), 0);
  }
  std::signal(SIGXFSZ, previous);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &old), 0);
}

TEST_F(WrittenAlignment, RealModelSegmentsAreAligned) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  auto report =
      rt->compile({{"squeezenet", model_path("squeezenet1_1")}}, path("s.bpk"), cpuref_compile());
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  nlohmann::json j = inspect_json(path("s.bpk"));
  ASSERT_FALSE(j["named_data"].empty());
  size_t large = 0;
  for (const auto& d : j["named_data"]) {
    const size_t bytes = d["bytes"], alignment = d["alignment"];
    EXPECT_GE(alignment, 64u) << d.dump();
    if (bytes >= 65536) {
      EXPECT_EQ(alignment, 4096u) << d.dump();
      ++large;
    }
  }
  EXPECT_GT(large, 0u) << "squeezenet1_1 has weights of 64 KiB or more";
  auto file = ArtifactFile::open(path("s.bpk"), {}, false);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  ArtifactDataMap map(*file);
  for (size_t i = 0; i < map.num_keys(); ++i) {
    const void* data = nullptr;
    size_t size = 0;
    ASSERT_TRUE(map.get(*map.key_at(i), &data, &size).ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % (size >= 65536 ? 4096 : 64), 0u)
        << *map.key_at(i);
  }
}

}  // namespace
}  // namespace backplane::artifact_test
