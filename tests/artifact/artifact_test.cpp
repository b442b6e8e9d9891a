// Compiled artifacts on real models: round trips bit for bit, several methods
// in one file, external data files (.bpd) and their compile id, recompiling
// partitions whose backend is missing or whose payload is for another API,
// and the format version check.
#include "artifact/artifact.hpp"
#include "artifact_generated.h"
#include "artifact_util.hpp"
#include "core/named_blob_store.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace backplane::artifact_test {
namespace {

// Largest |a-b| relative to the largest |b| (float32).
double relative_error(const Tensor& a, const Tensor& b) {
  double m = 0, d = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    m = std::max(m, std::fabs(static_cast<double>(b.data_as<float>()[i])));
    d = std::max(d, std::fabs(static_cast<double>(a.data_as<float>()[i]) - b.data_as<float>()[i]));
  }
  if (std::isnan(d)) return INFINITY;
  return m == 0 ? d : d / m;
}

// Address of a scalar field of a table inside `bytes` (it must be stored,
// i.e. differ from its default).
template <class T>
uint8_t* field(std::vector<uint8_t>& bytes, const T* table, flatbuffers::voffset_t vt) {
  const auto* t = reinterpret_cast<const flatbuffers::Table*>(table);
  flatbuffers::voffset_t off = t->GetOptionalFieldOffset(vt);
  EXPECT_NE(off, 0) << "field not stored";
  return bytes.data() + (reinterpret_cast<const uint8_t*>(table) - bytes.data()) + off;
}

// ------------------------------------------------------------ round trip

class RoundTrip : public TempDirTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(RoundTrip, CompiledEqualsOnnxBitForBit) {
  const std::string name = GetParam();
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  const Tensor input = model_input(name);
  RunResult onnx = run_model(*rt, model_path(name), cpuref_only(), input);
  ASSERT_TRUE(onnx.status.ok()) << onnx.status.to_string();

  auto report = rt->compile({{name, model_path(name)}}, path(name + ".bpk"), cpuref_compile());
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->methods, std::vector<std::string>{name});
  EXPECT_GE(report->partitions, 1u);
  EXPECT_GT(report->payload_bytes, 0u);
  EXPECT_GT(report->named_data_keys, 0u);
  EXPECT_EQ(report->file_bytes, fs::file_size(path(name + ".bpk")));
  EXPECT_EQ(report->external_bytes, 0u);
  // The weights are in the file.
  EXPECT_GE(report->file_bytes, report->stored_bytes);

  // The stored partitions are CpuRef's, each with its payload: loading
  // deserializes rather than recompiles.
  nlohmann::json j = inspect_json(path(name + ".bpk"));
  ASSERT_EQ(j["methods"].size(), 1u);
  EXPECT_EQ(j["methods"][0]["name"], name);
  for (const auto& p : j["methods"][0]["partitions"]) {
    EXPECT_EQ(p["backend"], "CpuRef");
    EXPECT_GT(p["payload_bytes"].get<size_t>(), 0u);
  }

  RunResult loaded = run_model(*rt, path(name + ".bpk"), {}, input);
  ASSERT_TRUE(loaded.status.ok()) << loaded.status.to_string();
  EXPECT_TRUE(loaded.notes.empty()) << loaded.notes.front();
  EXPECT_EQ(loaded.backends_used, std::vector<std::string>{"CpuRef"});
  EXPECT_TRUE(bitwise_equal(loaded.outputs, onnx.outputs))
      << name << ": artifact output differs from the ONNX run";

  // Lazy checksums change when bytes are checked, not what is computed.
  ModelOptions lazy;
  lazy.lazy_checksums = true;
  RunResult lazy_run = run_model(*rt, path(name + ".bpk"), lazy, input);
  ASSERT_TRUE(lazy_run.status.ok()) << lazy_run.status.to_string();
  EXPECT_TRUE(bitwise_equal(lazy_run.outputs, onnx.outputs));
}

INSTANTIATE_TEST_SUITE_P(Models, RoundTrip,
                         ::testing::Values("resnet18", "mobilenet_v2", "squeezenet1_1",
                                           "transformer"),
                         [](const auto& info) { return info.param; });

// ------------------------------------------------------------ methods

class Methods : public TempDirTest {};

TEST_F(Methods, SelectByNameAndUnknownNameIsNotFound) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  auto report =
      rt->compile({{"cnn", model_path("tiny_cnn")}, {"squeeze", model_path("squeezenet1_1")}},
                  path("two.bpk"), cpuref_compile());
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->methods, (std::vector<std::string>{"cnn", "squeeze"}));

  const Tensor cnn_in = model_input("tiny_cnn"), sq_in = model_input("squeezenet1_1");
  RunResult cnn_ref = run_model(*rt, model_path("tiny_cnn"), cpuref_only(), cnn_in);
  RunResult sq_ref = run_model(*rt, model_path("squeezenet1_1"), cpuref_only(), sq_in);
  ASSERT_TRUE(cnn_ref.status.ok() && sq_ref.status.ok());

  ModelOptions mo;  // "" = the first method
  RunResult first = run_model(*rt, path("two.bpk"), mo, cnn_in);
  ASSERT_TRUE(first.status.ok()) << first.status.to_string();
  EXPECT_TRUE(bitwise_equal(first.outputs, cnn_ref.outputs));
  mo.method = "squeeze";
  RunResult second = run_model(*rt, path("two.bpk"), mo, sq_in);
  ASSERT_TRUE(second.status.ok()) << second.status.to_string();
  EXPECT_TRUE(bitwise_equal(second.outputs, sq_ref.outputs));

  mo.method = "nope";
  auto bad = rt->load_model(path("two.bpk"), mo);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(contains(bad.status().message(), "nope")) << bad.status().message();
  EXPECT_TRUE(contains(bad.status().message(), "cnn, squeeze")) << bad.status().message();
}

// What the model says about itself comes through a compile: each method
// keeps its own model's.
TEST_F(Methods, EachKeepsItsModelsMetadata) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  auto onnx = rt->load_model(model_path("tiny_cnn"), cpuref_only());
  ASSERT_TRUE(onnx.ok()) << onnx.status().to_string();
  const ModelMetadata& from_onnx = (*onnx)->metadata();
  EXPECT_EQ(from_onnx.producer_name, "pytorch");  // what torch.onnx.export writes
  EXPECT_FALSE(from_onnx.producer_version.empty());
  EXPECT_FALSE(from_onnx.graph_name.empty());

  auto report =
      rt->compile({{"cnn", model_path("tiny_cnn")}, {"squeeze", model_path("squeezenet1_1")}},
                  path("meta.bpk"), cpuref_compile());
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  auto bpk = rt->load_model(path("meta.bpk"));
  ASSERT_TRUE(bpk.ok()) << bpk.status().to_string();
  const ModelMetadata& m = (*bpk)->metadata();
  EXPECT_EQ(m.producer_name, from_onnx.producer_name);
  EXPECT_EQ(m.producer_version, from_onnx.producer_version);
  EXPECT_EQ(m.graph_name, from_onnx.graph_name);
  EXPECT_EQ(m.version, from_onnx.version);
  EXPECT_EQ(m.custom, from_onnx.custom);
}

TEST_F(Methods, BadMethodNamesAreRejected) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  for (const std::string bad : {"", "a/b"}) {
    auto r = rt->compile({{bad, model_path("tiny_cnn")}}, path("x.bpk"), cpuref_compile());
    ASSERT_FALSE(r.ok()) << "'" << bad << "'";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  }
  auto twice = rt->compile({{"m", model_path("tiny_cnn")}, {"m", model_path("tiny_cnn")}},
                           path("x.bpk"), cpuref_compile());
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(path("x.bpk")));
}

// ------------------------------------------------------------ external data

class ExternalData : public TempDirTest {};

TEST_F(ExternalData, SameOutputsSmallerArtifactMovableDataFile) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  const std::string name = "squeezenet1_1";
  const Tensor input = model_input(name);
  auto inside = rt->compile({{name, model_path(name)}}, path("in.bpk"), cpuref_compile());
  ASSERT_TRUE(inside.ok()) << inside.status().to_string();
  CompileOptions co = cpuref_compile();
  co.external_data = path("ext.bpd");
  auto outside = rt->compile({{name, model_path(name)}}, path("ext.bpk"), co);
  ASSERT_TRUE(outside.ok()) << outside.status().to_string();

  ASSERT_TRUE(fs::exists(path("ext.bpd")));
  EXPECT_EQ(outside->external_bytes, fs::file_size(path("ext.bpd")));
  EXPECT_GE(outside->external_bytes, outside->stored_bytes);
  EXPECT_EQ(outside->stored_bytes, inside->stored_bytes);
  // The weights (~5 MB) left the .bpk: what remains is metadata and payloads.
  EXPECT_LT(fs::file_size(path("ext.bpk")) * 10, fs::file_size(path("in.bpk")))
      << fs::file_size(path("ext.bpk")) << " vs " << fs::file_size(path("in.bpk"));
  nlohmann::json j = inspect_json(path("ext.bpk"));
  ASSERT_EQ(j["data_files"].size(), 1u);
  EXPECT_EQ(j["data_files"][0]["name"], "ext.bpd");
  for (const auto& d : j["named_data"]) EXPECT_EQ(d["file"], "ext.bpd") << d.dump();
  nlohmann::json ji = inspect_json(path("in.bpk"));
  for (const auto& d : ji["named_data"]) EXPECT_EQ(d["file"], "(artifact)") << d.dump();

  RunResult a = run_model(*rt, path("in.bpk"), {}, input);
  RunResult b = run_model(*rt, path("ext.bpk"), {}, input);
  ASSERT_TRUE(a.status.ok()) << a.status.to_string();
  ASSERT_TRUE(b.status.ok()) << b.status.to_string();
  EXPECT_TRUE(bitwise_equal(a.outputs, b.outputs));

  // Moved elsewhere: not found next to the .bpk (a clear error naming it),
  // found when given.
  fs::create_directory(path("elsewhere"));
  fs::rename(path("ext.bpd"), path("elsewhere/ext.bpd"));
  RunResult missing = run_model(*rt, path("ext.bpk"), {}, input);
  ASSERT_FALSE(missing.status.ok());
  EXPECT_EQ(missing.status.code(), StatusCode::kNotFound) << missing.status.to_string();
  EXPECT_TRUE(contains(missing.status.message(), "ext.bpd")) << missing.status.message();
  EXPECT_TRUE(contains(missing.status.message(), "ext.bpk")) << missing.status.message();

  ModelOptions given;
  given.external_data = {path("elsewhere/ext.bpd")};
  RunResult moved = run_model(*rt, path("ext.bpk"), given, input);
  ASSERT_TRUE(moved.status.ok()) << moved.status.to_string();
  EXPECT_TRUE(bitwise_equal(moved.outputs, a.outputs));
  given.lazy_checksums = true;
  RunResult moved_lazy = run_model(*rt, path("ext.bpk"), given, input);
  ASSERT_TRUE(moved_lazy.status.ok()) << moved_lazy.status.to_string();
  EXPECT_TRUE(bitwise_equal(moved_lazy.outputs, a.outputs));
  // inspect takes the same list.
  auto text = inspect_artifact(path("ext.bpk"), false, {path("elsewhere/ext.bpd")});
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_FALSE(inspect_artifact(path("ext.bpk"), false).ok());
}

TEST_F(ExternalData, DataFileOfAnotherCompileIsRejected) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  fs::create_directory(path("one"));
  fs::create_directory(path("two"));
  for (const char* d : {"one", "two"}) {
    CompileOptions co = cpuref_compile();
    co.external_data = path(std::string(d) + "/m.bpd");
    auto r = rt->compile({{"m", model_path("tiny_cnn")}}, path(std::string(d) + "/m.bpk"), co);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  }
  const std::string id_one = inspect_json(path("one/m.bpk"))["compile_id"];
  const std::string id_two = inspect_json(path("two/m.bpk"))["compile_id"];
  ASSERT_EQ(id_one.size(), 32u);
  ASSERT_NE(id_one, id_two) << "two compiles must get different ids";
  // Same model, same options: only the compile id tells the files apart.
  fs::copy_file(path("two/m.bpd"), path("one/m.bpd"), fs::copy_options::overwrite_existing);
  const Tensor input = model_input("tiny_cnn");
  for (bool lazy : {false, true}) {
    ModelOptions mo;
    mo.lazy_checksums = lazy;
    RunResult r = run_model(*rt, path("one/m.bpk"), mo, input);
    ASSERT_FALSE(r.status.ok());
    EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.to_string();
    const std::string& msg = r.status.message();
    EXPECT_TRUE(contains(msg, "another compile")) << msg;
    EXPECT_TRUE(contains(msg, id_one)) << msg;
    EXPECT_TRUE(contains(msg, id_two)) << msg;
    EXPECT_TRUE(contains(msg, "one/m.bpd")) << msg;
  }
  // Given explicitly, the same check applies.
  ModelOptions mo;
  mo.external_data = {path("two/m.bpd")};
  RunResult r = run_model(*rt, path("one/m.bpk"), mo, input);
  EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << r.status.to_string();
  // The right pair still works.
  RunResult ok = run_model(*rt, path("two/m.bpk"), {}, input);
  EXPECT_TRUE(ok.status.ok()) << ok.status.to_string();
}

TEST_F(ExternalData, PathMustBeNextToTheArtifact) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  fs::create_directory(path("sub"));
  CompileOptions co = cpuref_compile();
  co.external_data = path("sub/w.bpd");
  auto r = rt->compile({{"m", model_path("tiny_cnn")}}, path("m.bpk"), co);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  co.external_data = path("m.bpk");
  r = rt->compile({{"m", model_path("tiny_cnn")}}, path("m.bpk"), co);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------ fallback

class Fallback : public TempDirTest {
 protected:
  // tiny_cnn compiled on CpuRef into m.bpk, and what that artifact computes.
  RunResult compile_tiny_cnn(Runtime& rt, const Tensor& input) {
    auto report = rt.compile({{"m", model_path("tiny_cnn")}}, path("m.bpk"), cpuref_compile());
    EXPECT_TRUE(report.ok()) << report.status().to_string();
    RunResult ref = run_model(rt, path("m.bpk"), {}, input);
    EXPECT_TRUE(ref.status.ok()) << ref.status.to_string();
    return ref;
  }
};

TEST_F(Fallback, MissingBackendIsRecompiledOnTheNextOne) {
  auto with_acc = make_runtime(BACKPLANE_TESTING_ACCEL_DIR);
  ASSERT_NE(with_acc, nullptr);
  auto plain = make_runtime();
  ASSERT_NE(plain, nullptr);
  const std::string name = "resnet18";
  const Tensor input = model_input(name);
  RunResult ref = run_model(*plain, model_path(name), cpuref_only(), input);
  ASSERT_TRUE(ref.status.ok()) << ref.status.to_string();

  CompileOptions co;
  co.backends = {"MockAcc", "CpuRef"};
  auto report = with_acc->compile({{name, model_path(name)}}, path("r.bpk"), co);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  nlohmann::json j = inspect_json(path("r.bpk"));
  size_t acc_parts = 0, acc_nodes = 0, ref_parts = 0;
  for (const auto& p : j["methods"][0]["partitions"]) {
    if (p["backend"] == "MockAcc") {
      ++acc_parts;
      acc_nodes += p["nodes"].get<size_t>();
      EXPECT_EQ(p["payload_bytes"], 0) << "MockAcc does not serialize";
    } else {
      EXPECT_EQ(p["backend"], "CpuRef");
      ++ref_parts;
    }
  }
  ASSERT_GT(acc_parts, 0u) << j.dump(1);
  ASSERT_GT(ref_parts, 0u) << "resnet18 has nodes MockAcc does not run";

  // With MockAcc: its partitions compile at load (no payload), no fallback.
  RunResult acc = run_model(*with_acc, path("r.bpk"), {}, input);
  ASSERT_TRUE(acc.status.ok()) << acc.status.to_string();
  EXPECT_NE(std::find(acc.backends_used.begin(), acc.backends_used.end(), "MockAcc"),
            acc.backends_used.end());
  for (const std::string& n : acc.notes) EXPECT_FALSE(contains(n, "not available")) << n;
  ASSERT_EQ(acc.outputs.size(), 1u);
  EXPECT_LE(relative_error(acc.outputs[0], ref.outputs[0]), 1e-5);

  // Without MockAcc: loads, says so, and computes the same on CpuRef.
  RunResult fallback = run_model(*plain, path("r.bpk"), {}, input);
  ASSERT_TRUE(fallback.status.ok()) << fallback.status.to_string();
  EXPECT_EQ(fallback.backends_used, std::vector<std::string>{"CpuRef"});
  size_t recompiled_notes = 0;
  for (const std::string& n : fallback.notes)
    if (contains(n, "MockAcc") && contains(n, "not available") && contains(n, "recompil"))
      ++recompiled_notes;
  EXPECT_EQ(recompiled_notes, acc_parts) << "one note per MockAcc partition";
  ASSERT_EQ(fallback.outputs.size(), 1u);
  EXPECT_LE(relative_error(fallback.outputs[0], ref.outputs[0]), 1e-5);
  EXPECT_TRUE(bitwise_equal(fallback.outputs, ref.outputs))
      << "MockAcc computes with CpuRef's kernels";
}

TEST_F(Fallback, PayloadForAnotherApiMajorIsRecompiled) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  const Tensor input = model_input("tiny_cnn");
  RunResult ref = compile_tiny_cnn(*rt, input);
  ASSERT_TRUE(ref.status.ok());

  auto bytes = read_bytes(path("m.bpk"));
  const fb::Artifact* a = fb::GetSizePrefixedArtifact(bytes.data());
  const fb::Partition* p = a->methods()->Get(0)->partitions()->Get(0);
  uint32_t future = 99;
  std::memcpy(field(bytes, p, fb::Partition::VT_API_MAJOR), &future, 4);
  reseal(bytes);
  write_bytes(path("future.bpk"), bytes.data(), bytes.size());
  RunResult r = run_model(*rt, path("future.bpk"), {}, input);
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  ASSERT_FALSE(r.notes.empty());
  EXPECT_TRUE(contains(r.notes[0], "API 99")) << r.notes[0];
  EXPECT_TRUE(contains(r.notes[0], "recompiling")) << r.notes[0];
  EXPECT_TRUE(bitwise_equal(r.outputs, ref.outputs));
}

TEST_F(Fallback, UnreadablePayloadIsCompiledFromTheGraph) {
  // A payload CpuRef cannot read (valid checksum: a producer bug, not disk
  // corruption) is recompiled from the portable graph, with a note.
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  const Tensor input = model_input("tiny_cnn");
  RunResult ref = compile_tiny_cnn(*rt, input);
  ASSERT_TRUE(ref.status.ok());

  auto bytes = read_bytes(path("m.bpk"));
  edit_payload(bytes, 0, 0,
               [](uint8_t* payload, size_t) { payload[0] ^= 0x20; });  // "CpuRef" -> "cpuRef"
  write_bytes(path("odd.bpk"), bytes.data(), bytes.size());
  RunResult r = run_model(*rt, path("odd.bpk"), {}, input);
  // The payload is refused by CpuRef's deserialize; the partition is then
  // compiled on CpuRef itself from the portable graph, and the notes say so.
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_TRUE(bitwise_equal(r.outputs, ref.outputs));
  EXPECT_EQ(r.backends_used, std::vector<std::string>{"CpuRef"});
  bool said = false;
  for (const std::string& n : r.notes)
    said |= contains(n, "stored payload refused") && contains(n, "'CpuRef'");
  EXPECT_TRUE(said) << ::testing::PrintToString(r.notes);
}

// ------------------------------------------------------------ versions

class Versions : public TempDirTest {};

TEST_F(Versions, NewerFormatMajorIsAVersionMismatch) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  auto report = rt->compile({{"m", model_path("tiny_cnn")}}, path("m.bpk"), cpuref_compile());
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  nlohmann::json j = inspect_json(path("m.bpk"));
  EXPECT_EQ(j["format"],
            std::to_string(kArtifactFormatMajor) + "." + std::to_string(kArtifactFormatMinor));
  auto bytes = read_bytes(path("m.bpk"));
  const fb::Artifact* a = fb::GetSizePrefixedArtifact(bytes.data());
  uint32_t next = kArtifactFormatMajor + 1;
  std::memcpy(field(bytes, a, fb::Artifact::VT_FORMAT_MAJOR), &next, 4);
  reseal(bytes);
  write_bytes(path("next.bpk"), bytes.data(), bytes.size());
  auto model = rt->load_model(path("next.bpk"));
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), StatusCode::kVersionMismatch);
  EXPECT_TRUE(contains(model.status().message(), "next.bpk")) << model.status().message();
  EXPECT_TRUE(contains(model.status().message(), "format " + std::to_string(next)))
      << model.status().message();
  auto text = inspect_artifact(path("next.bpk"), false);
  EXPECT_EQ(text.status().code(), StatusCode::kVersionMismatch);
}

TEST_F(Versions, NotAnArtifact) {
  auto rt = make_runtime();
  ASSERT_NE(rt, nullptr);
  // An ONNX file named .bpk, and an empty .bpk.
  fs::copy_file(model_path("tiny_cnn"), path("onnx.bpk"));
  auto r = inspect_artifact(path("onnx.bpk"), false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruptData);
  EXPECT_TRUE(contains(r.status().message(), "onnx.bpk")) << r.status().message();
  write_bytes(path("empty.bpk"), nullptr, 0);
  auto m = rt->load_model(path("empty.bpk"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kCorruptData) << m.status().to_string();
  EXPECT_TRUE(contains(m.status().message(), "empty.bpk")) << m.status().message();
  auto missing = rt->load_model(path("missing.bpk"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace backplane::artifact_test
