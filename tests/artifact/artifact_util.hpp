// artifact_util.hpp — helpers shared by the compiled-artifact tests.
//
// Models come from the e2e_models fixture (scripts/gen_models.py) in
// BACKPLANE_TEST_DATA/models; every test writes into its own temporary
// directory, removed when the test ends.
#pragma once

#include "artifact/artifact.hpp"
#include "core/checksum.hpp"
#include "core/named_blob_store.hpp"
#include "artifact_generated.h"
#include "../e2e/e2e_util.hpp"
#include "npy.hpp"

#include <backplane/runtime.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace backplane::artifact_test {

namespace fs = std::filesystem;

// The models and helpers every end-to-end test uses (tests/e2e/e2e_util.hpp).
using e2e::cpuref_only;
using e2e::model_path;
using e2e::models_dir;
#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
using e2e::onednn_runtime;
#endif

inline Tensor model_input(const std::string& name) { return e2e::read_npy(models_dir() + "/" + name + ".input.npy"); }

// A runtime with the static backends only (CpuRef), or with the dynamic
// backends of `backend_path` too.
inline std::shared_ptr<Runtime> make_runtime(const std::string& backend_path = "") {
  RuntimeOptions o;
  if (backend_path.empty()) o.dynamic_backends = false;
  else o.backend_path = backend_path;
  auto rt = Runtime::create(o);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? *rt : nullptr;
}

inline CompileOptions cpuref_compile() {
  CompileOptions co;
  co.backends = {"CpuRef"};
  return co;
}

// What loading and running a model once gave: the first failure, or the
// outputs (copied) and the model's notes.
struct RunResult {
  Status status;
  std::vector<Tensor> outputs;
  std::vector<std::string> notes;
  std::vector<std::string> backends_used;
};

inline RunResult run_model(Runtime& rt, const std::string& path, const ModelOptions& mo, const Tensor& input) {
  RunResult r;
  auto model = rt.load_model(path, mo);
  if (!model.ok()) {
    r.status = model.status();
    return r;
  }
  r.notes = (*model)->notes();
  r.backends_used = (*model)->backends_used();
  auto session = (*model)->create_session();
  if (!session.ok()) {
    r.status = session.status();
    return r;
  }
  r.status = (*session)->set_input(0, input);
  if (r.status.ok()) r.status = (*session)->run();
  if (r.status.ok())
    for (size_t i = 0; i < (*session)->num_outputs(); ++i) r.outputs.push_back((*session)->output(i).clone());
  return r;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

inline bool bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!bitwise_equal(a[i], b[i])) return false;
  return true;
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  ASSERT_TRUE(out.good()) << path;
}

inline nlohmann::json inspect_json(const std::string& path, const std::vector<std::string>& external = {}) {
  auto text = inspect_artifact(path, true, external);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? nlohmann::json::parse(*text) : nlohmann::json();
}

// Rewrites the metadata checksum after the test edited the FlatBuffer.
inline void reseal(std::vector<uint8_t>& bytes) {
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  uint64_t sum = checksum64(bytes.data() + 4, fb_size);
  std::memcpy(bytes.data() + 4 + fb_size, &sum, 8);
}

// Lets `edit(data, size)` change the payload of partition `p` of method `m`
// of the artifact in `bytes` in place, then makes every checksum right again:
// what a backend then reads is a well-formed file with a payload it may not
// accept (a producer's bug or another build's format, not disk corruption).
template <class Edit>
void edit_payload(std::vector<uint8_t>& bytes, size_t m, size_t p, Edit edit) {
  const fb::Artifact* a = fb::GetSizePrefixedArtifact(bytes.data());
  const int32_t seg_index = a->methods()->Get(static_cast<flatbuffers::uoffset_t>(m))
                                ->partitions()->Get(static_cast<flatbuffers::uoffset_t>(p))->payload();
  ASSERT_GE(seg_index, 0) << "partition " << p << " has no payload";
  const fb::Segment* seg = a->segments()->Get(static_cast<flatbuffers::uoffset_t>(seg_index));
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, bytes.data(), 4);
  uint8_t* payload = bytes.data() + artifact_data_start(fb_size) + seg->offset();
  edit(payload, static_cast<size_t>(seg->size()));
  const uint64_t sum = checksum64(payload, seg->size());
  // Segment is a struct: file u32, alignment u32, offset u64, size u64, checksum u64.
  uint8_t* seg_bytes = bytes.data() + (reinterpret_cast<const uint8_t*>(seg) - bytes.data());
  std::memcpy(seg_bytes + 24, &sum, 8);
  reseal(bytes);
}

// A fresh temporary directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "backplane_artifact_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

}  // namespace backplane::artifact_test
