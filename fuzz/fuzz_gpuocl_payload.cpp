// fuzz_gpuocl_payload — libFuzzer target: bytes as a GpuOcl payload.
//
// The payload reader (backends/gpuocl/payload.cpp) is what a corrupted or
// edited artifact reaches before any OpenCL call; it needs no driver, so
// this target builds without one. An input is decoded; if accepted, encoding
// it again must give back the same bytes (the format has one spelling).
// Refusals (sdk::Error) are expected; a crash, sanitizer report or leak is a
// bug. With BACKPLANE_FUZZ_SEED_DIR set, a valid payload is written there as
// a seed (scripts/fuzz.sh does that).
#include "gpuocl/payload.hpp"

#include <backplane/backend_sdk.hpp>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace {

void write_seed() {
  const char* dir = std::getenv("BACKPLANE_FUZZ_SEED_DIR");
  if (dir == nullptr) return;
  gpuocl::Payload p;
  p.key = {"Portable Computing Language", "pthread-cpu", "3.1", "-cl-fast-relaxed-math",
           gpuocl::stable_hash("kernels")};
  p.blob_prefix = "GpuOcl/model/partition_0/";
  p.derived = {{"n3/bn_w", 1728}, {"n3/bn_b", 64}, {"n9/bn_ab", 128}};
  p.binary.assign(64, 0x7f);
  const std::vector<unsigned char> bytes = gpuocl::encode_payload(p);
  std::ofstream(std::string(dir) + "/seed_payload.bin", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_seed();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const gpuocl::Payload p = gpuocl::decode_payload(data, size);
    const std::vector<unsigned char> again = gpuocl::encode_payload(p);
    if (again.size() != size || std::memcmp(again.data(), data, size) != 0) std::abort();
  } catch (const backplane::sdk::Error&) {
  }
  return 0;
}
