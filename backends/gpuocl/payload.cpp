#include "gpuocl/payload.hpp"

#include <backplane/backend_sdk.hpp>

#include <cstdio>
#include <cstring>
#include <set>

namespace gpuocl {
namespace sdk = backplane::sdk;

namespace {

constexpr char kMagic[8] = {'B', 'P', 'G', 'O', 'C', 'L', 0, 0};

void put_u32(std::vector<unsigned char>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
void put_u64(std::vector<unsigned char>& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<unsigned char>(v >> (8 * i)));
}
void put_string(std::vector<unsigned char>& out, const std::string& s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

class Reader {
 public:
  Reader(const void* data, size_t size) : p_(static_cast<const unsigned char*>(data)), n_(size) {}
  const unsigned char* take(size_t count, const char* what) {
    if (count > n_ - at_)
      throw sdk::Error(BP_STATUS_CORRUPT_DATA, std::string("GpuOcl payload: truncated in ") + what +
                                                   " (needs " + std::to_string(count) +
                                                   " bytes at offset " + std::to_string(at_) +
                                                   ", " + std::to_string(n_ - at_) + " left)");
    const unsigned char* r = p_ + at_;
    at_ += count;
    return r;
  }
  uint64_t u(int bytes, const char* what) {
    const unsigned char* b = take(size_t(bytes), what);
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(b[i]) << (8 * i);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t len = u(4, what);
    if (len > 4096)
      throw sdk::Error(BP_STATUS_CORRUPT_DATA, std::string("GpuOcl payload: ") + what + " is " +
                                                   std::to_string(len) +
                                                   " bytes long (at most 4096)");
    const unsigned char* b = take(size_t(len), what);
    return std::string(reinterpret_cast<const char*>(b), size_t(len));
  }
  size_t left() const { return n_ - at_; }

 private:
  const unsigned char* p_;
  size_t n_, at_ = 0;
};

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
  std::vector<unsigned char> out(kMagic, kMagic + sizeof(kMagic));
  put_u32(out, kPayloadVersion);
  for (const std::string* s :
       {&p.key.platform, &p.key.device, &p.key.driver, &p.key.options, &p.key.source_hash})
    put_string(out, *s);
  put_string(out, p.blob_prefix);
  put_u32(out, static_cast<uint32_t>(p.derived.size()));
  for (const DerivedBlob& d : p.derived) {
    put_string(out, d.name);
    put_u64(out, d.bytes);
  }
  put_u64(out, p.binary.size());
  out.insert(out.end(), p.binary.begin(), p.binary.end());
  return out;
}

Payload decode_payload(const void* data, size_t size) {
  if (data == nullptr && size != 0)
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: no data");
  Reader r(data, size);
  if (std::memcmp(r.take(sizeof(kMagic), "the magic"), kMagic, sizeof(kMagic)) != 0)
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: not a GpuOcl payload (magic)");
  const uint64_t version = r.u(4, "the format version");
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
  const uint64_t count = r.u(4, "the derived weight count");
  // Each entry takes at least 12 bytes: a count past what is left is a lie.
  if (count > kMaxDerived || count * 12 > r.left())
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: " + std::to_string(count) +
                                                 " derived weights listed, " +
                                                 std::to_string(r.left()) + " bytes left");
  std::set<std::string> seen;
  for (uint64_t i = 0; i < count; ++i) {
    DerivedBlob d;
    d.name = r.str("a derived weight's name");
    d.bytes = r.u(8, "a derived weight's size");
    if (d.name.empty() || d.bytes == 0 || !seen.insert(d.name).second)
      throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: derived weight " +
                                                   std::to_string(i) + " ('" + d.name + "', " +
                                                   std::to_string(d.bytes) +
                                                   " bytes) is empty, unnamed or listed twice");
    p.derived.push_back(std::move(d));
  }
  const uint64_t n = r.u(8, "the binary size");
  if (n == 0) throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: empty program binary");
  if (n != r.left())
    throw sdk::Error(BP_STATUS_CORRUPT_DATA, "GpuOcl payload: the binary is said to be " +
                                                 std::to_string(n) + " bytes, " +
                                                 std::to_string(r.left()) + " follow");
  const unsigned char* b = r.take(size_t(n), "the binary");
  p.binary.assign(b, b + n);
  return p;
}

}  // namespace gpuocl
