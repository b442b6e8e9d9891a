#include "gpuocl/payload.hpp"

#include <backplane/backend_sdk.hpp>

#include <cstdio>
#include <cstring>
#include <set>

namespace gpuocl {
namespace sdk = backplane::sdk;

namespace {

constexpr char kMagic[8] = {'B', 'P', 'G', 'O', 'C', 'L', 0, 0};

}  // namespace

std::string ProgramKey::describe() const {
  return "device '" + device + "' (platform " + platform + ", driver " + driver + ", options '" +
         options + "')";
}

std::string stable_hash(const std::string& text) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::vector<unsigned char> encode_payload(const Payload& p) {
  sdk::PayloadWriter w;
  w.raw(kMagic, sizeof(kMagic));
  w.pod(kPayloadVersion);
  for (const std::string* s :
       {&p.key.platform, &p.key.device, &p.key.driver, &p.key.options, &p.key.source_hash})
    w.str(*s);
  w.str(p.blob_prefix);
  w.pod(static_cast<uint32_t>(p.derived.size()));
  for (const DerivedBlob& d : p.derived) {
    w.str(d.name);
    w.pod(static_cast<uint64_t>(d.bytes));
  }
  w.pod(static_cast<uint64_t>(p.binary.size()));
  w.raw(p.binary.data(), p.binary.size());
  return std::vector<unsigned char>(w.bytes().begin(), w.bytes().end());
}

Payload decode_payload(const void* data, size_t size) {
  if (data == nullptr && size != 0)
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: no data");
  sdk::PayloadReader r(data, size, "GpuOcl");
  if (std::memcmp(r.take(sizeof(kMagic), "the magic"), kMagic, sizeof(kMagic)) != 0)
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: not a GpuOcl payload (magic)");
  const uint32_t version = r.pod<uint32_t>("the format version");
  if (version != kPayloadVersion)
    throw sdk::Error(BP_STATUS_VERSION_MISMATCH,
                     "GpuOcl payload: format version " + std::to_string(version) +
                         ", this build reads " + std::to_string(kPayloadVersion));
  Payload p;
  p.key.platform = r.str("the platform name");
  p.key.device = r.str("the device name");
  p.key.driver = r.str("the driver version");
  p.key.options = r.str("the build options");
  p.key.source_hash = r.str("the source hash");
  p.blob_prefix = r.str("the blob key prefix");
  const uint64_t count = r.pod<uint32_t>("the derived weight count");
  // Each entry takes at least 12 bytes: a count past what is left is a lie.
  if (count > kMaxDerived || count * 12 > r.left())
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: " + std::to_string(count) +
                                                 " derived weights listed, " +
                                                 std::to_string(r.left()) + " bytes left");
  std::set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    DerivedBlob d;
    d.name = r.str("a derived weight's name");
    d.bytes = r.pod<uint64_t>("a derived weight's size");
    if (d.name.empty() || d.bytes == 0 || !seen.insert(d.name).second)
      throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: derived weight " +
                                                   std::to_string(i) + " ('" + d.name + "', " +
                                                   std::to_string(d.bytes) +
                                                   " bytes) is empty, unnamed or listed twice");
    p.derived.push_back(std::move(d));
  }
  const uint64_t n = r.pod<uint64_t>("the binary size");
  if (n == 0) throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: empty program binary");
  if (n != r.left())
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: the binary is said to be " +
                                                 std::to_string(n) + " bytes, " +
                                                 std::to_string(r.left()) + " follow");
  const auto* b = static_cast<const unsigned char*>(r.take(size_t(n), "the binary"));
  p.binary.assign(b, b + n);
  return p;
}

}  // namespace gpuocl
