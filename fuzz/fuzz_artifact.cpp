// fuzz_artifact — libFuzzer target: bytes as a compiled artifact (.bpk).
//
// The input is written to a private file and opened as loading would (lazy
// checksums, so mutated data segments still reach the graph reader); if it
// opens, every method's portable graph is rebuilt and every named blob and
// segment is read. Any crash, sanitizer report or leak is a bug.
//
// The metadata checksum ([u64 XXH3] after the FlatBuffer) is recomputed
// before writing, so mutations reach the FlatBuffers verifier and the
// structural checks behind it instead of stopping at the checksum.
#include "artifact/artifact.hpp"
#include "artifact_generated.h"
#include "core/checksum.hpp"
#include "core/named_blob_store.hpp"

#include <unistd.h>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

// One private directory per process (libFuzzer may run several jobs at
// once), removed at exit.
struct ScratchDir {
  std::string dir = std::string(std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp") +
                    "/backplane_fuzz_artifact." + std::to_string(::getpid());
  std::string file = dir + "/input.bpk";
  ScratchDir() { std::filesystem::create_directories(dir); }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

const std::string& scratch_file() {
  static const ScratchDir scratch;
  return scratch.file;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace backplane;
  std::vector<uint8_t> bytes(data, data + size);
  if (bytes.size() >= 12) {
    uint32_t fb_size = 0;
    std::memcpy(&fb_size, bytes.data(), 4);
    if (uint64_t{fb_size} + 12 <= bytes.size()) {
      const uint64_t sum = checksum64(bytes.data() + 4, fb_size);
      std::memcpy(bytes.data() + 4 + fb_size, &sum, 8);
    }
  }
  const std::string path = scratch_file();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  auto file = ArtifactFile::open(path, {}, /*lazy_checksums=*/true);
  if (!file.ok()) return 0;
  const ArtifactFile& a = **file;
  const auto& methods = a.methods();
  for (size_t m = 0; m < methods.size(); ++m) {
    auto found = a.find_method(methods[m].name);
    (void)found;
    auto loaded = a.load_method(static_cast<int>(m));
    if (loaded.ok()) {
      // Touch every constant the graph hands out (views into the mapping).
      uint8_t acc = 0;
      for (const auto& [key, t] : loaded->portable.constants)
        if (t.size_bytes() > 0) acc ^= static_cast<const uint8_t*>(t.data())[t.size_bytes() - 1];
      volatile uint8_t sink = acc;
      (void)sink;
    }
  }
  (void)a.find_method("no such method");
  ArtifactDataMap map(*file);
  for (size_t i = 0; i < map.num_keys(); ++i) {
    const void* d = nullptr;
    size_t n = 0;
    (void)map.get(*map.key_at(i), &d, &n);
  }
  const uint32_t segments = static_cast<uint32_t>(a.segments().size());
  for (uint32_t i = 0; i <= segments; ++i) {
    const uint8_t* d = nullptr;
    size_t n = 0;
    (void)a.segment(i, &d, &n);
  }
  return 0;
}
