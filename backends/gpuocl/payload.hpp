// payload.hpp — GpuOcl's serialized payload: the compiled OpenCL program.
//
// What `backplane compile` stores for a GpuOcl partition: the key the program
// binary is valid for (platform, device, driver version, OpenCL C build
// options, a hash of the kernel source) and the binary itself. Loading on a
// device with the same key uses the binary without compiling OpenCL C; on
// another device or driver the backend rebuilds from source, with a note.
// The weights are not in the payload: they are the artifact's own named
// blobs (GpuOcl's device layout is the host's), read through the
// NamedDataMap and uploaded at load.
//
// Layout (little-endian): "BPGOCL\0\0", u32 format version (1), five strings
// (u32 length + bytes: platform, device, driver, options, source hash as
// 16 hex digits), u64 binary size, the binary. Nothing may follow.
// decode_payload checks every length against the bytes present: it is the
// code a corrupted or hostile artifact reaches (fuzz/fuzz_gpuocl_payload.cpp).
// No OpenCL here, so the fuzz target builds without a driver.
#ifndef BACKPLANE_GPUOCL_PAYLOAD_HPP_
#define BACKPLANE_GPUOCL_PAYLOAD_HPP_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpuocl {

struct ProgramKey {
  std::string platform, device, driver, options, source_hash;
  bool operator==(const ProgramKey& o) const {
    return platform == o.platform && device == o.device && driver == o.driver &&
           options == o.options && source_hash == o.source_hash;
  }
  std::string describe() const;  // "device 'X' (platform P, driver D, options 'O')"
};

struct Payload {
  ProgramKey key;
  std::vector<unsigned char> binary;
};

constexpr uint32_t kPayloadVersion = 1;

std::vector<unsigned char> encode_payload(const Payload& p);
// Throws backplane::sdk::Error (BP_STATUS_CORRUPT_DATA or
// BP_STATUS_VERSION_MISMATCH) naming what is wrong.
Payload decode_payload(const void* data, size_t size);

// 16 hex digits (FNV-1a 64) of `text`: stable across builds and processes.
std::string stable_hash(const std::string& text);

}  // namespace gpuocl

#endif  // BACKPLANE_GPUOCL_PAYLOAD_HPP_
