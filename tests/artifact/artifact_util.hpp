// artifact_util.hpp — helpers shared by the compiled-artifact tests.
//
// Models come from the e2e_models fixture (scripts/gen_models.py) in
// BACKPLANE_TEST_DATA/models; every test writes into its own temporary
// directory, removed when the test ends.
#pragma once

#include "artifact/artifact.hpp"
#include "artifact_generated.h"
#include "core/checksum.hpp"
#include "core/named_blob_store.hpp"
#include "npy.hpp"
#include "support/e2e_util.hpp"
#include "support/files.hpp"

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

// The models and helpers every end-to-end test uses (support/e2e_util.hpp),
// and scratch files (support/files.hpp).
using e2e::bitwise_equal;
using e2e::contains;
using e2e::cpuref_only;
using e2e::make_runtime;
using e2e::model_path;
using e2e::models_dir;
#ifdef BACKPLANE_ONEDNN_BACKEND_DIR
using e2e::onednn_runtime;
#endif
using test::read_bytes;
using test::TempDirTest;
using test::write_bytes;

inline Tensor model_input(const std::string& name) {
  return e2e::read_npy(models_dir() + "/" + name + ".input.npy");
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

inline RunResult run_model(Runtime& rt, const std::string& path, const ModelOptions& mo,
                           const Tensor& input) {
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
    for (size_t i = 0; i < (*session)->num_outputs(); ++i)
      r.outputs.push_back((*session)->output(i).clone());
  return r;
}

inline nlohmann::json inspect_json(const std::string& path,
                                   const std::vector<std::string>& external = {}) {
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
  const int32_t seg_index = a->methods()
                                ->Get(static_cast<flatbuffers::uoffset_t>(m))
                                ->partitions()
                                ->Get(static_cast<flatbuffers::uoffset_t>(p))
                                ->payload();
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

}  // namespace backplane::artifact_test
