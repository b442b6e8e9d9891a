// payload.hpp — GpuOcl's serialized payload: the compiled OpenCL program.
//
// What `backplane compile` stores for a GpuOcl partition: the key the program
// binary is valid for (platform, device, driver version, OpenCL C build
// options, a hash of the kernel source) and the binary itself. Loading on a
// device with the same key uses the binary without compiling OpenCL C; on
// another device or driver the backend rebuilds from source, with a note.
// The weights are not in the payload. Those GpuOcl uses as the model has
// them are the artifact's own named blobs (GpuOcl's device layout of a
// weight is the host's); those it derives at compile (a BatchNormalization
// folded into its Conv's weights and bias, or into one per-channel affine
// table) are named blobs it adds ("GpuOcl/<partition>/n<node>/<what>"),
// listed here by key and size. Both are read through the NamedDataMap and
// uploaded at load; nothing is folded again.
//
// Layout (little-endian): "BPGOCL\0\0", u32 format version (2), five strings
// (u32 length + bytes: platform, device, driver, options, source hash as
// 16 hex digits), the derived weights' blob key prefix (a string), a u32
// count of derived weights, each a string (its name in the partition, e.g.
// "n12/bn_w"; its blob key is the prefix and the name) and a u64 byte size,
// then u64 binary size, the binary. Nothing may follow.
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

// A weight derived at compile, stored as the artifact's named blob
// blob_prefix + name.
struct DerivedBlob {
  std::string name;
  uint64_t bytes = 0;
};

struct Payload {
  ProgramKey key;
  std::string blob_prefix;  // e.g. "GpuOcl/resnet18/partition_0/"
  std::vector<DerivedBlob> derived;
  std::vector<unsigned char> binary;
};

constexpr uint32_t kPayloadVersion = 2;
// At most this many derived weights in one payload (two per folded node).
constexpr uint32_t kMaxDerived = 1u << 20;

std::vector<unsigned char> encode_payload(const Payload& p);
// Throws backplane::sdk::Error (BP_STATUS_CORRUPT_DATA or
// BP_STATUS_VERSION_MISMATCH) naming what is wrong.
Payload decode_payload(const void* data, size_t size);

// 16 hex digits (FNV-1a 64) of `text`: stable across builds and processes.
std::string stable_hash(const std::string& text);

}  // namespace gpuocl

#endif  // BACKPLANE_GPUOCL_PAYLOAD_HPP_
