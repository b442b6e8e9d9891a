#include "onnx/wire_split.hpp"

#include <algorithm>
#include <climits>

namespace backplane::onnx_import {

namespace {

// Field numbers of onnx.proto.
constexpr uint32_t kModelGraph = 7;        // ModelProto.graph
constexpr uint32_t kGraphInitializer = 5;  // GraphProto.initializer
constexpr uint32_t kTensorRawData = 9;     // TensorProto.raw_data
// Smaller raw_data stays in the rest: shapes, axes and scales that the
// import-time rewrites read from the parsed model (proto_rewrite.hpp).
constexpr uint64_t kInlineRawData = 4096;

constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// A cursor over [p, end) of the input; `base` is the input's first byte.
struct Reader {
  const uint8_t* base;
  const uint8_t* p;
  const uint8_t* end;

  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p == end) return false;
      const uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  }
  // One field: its number, wire type and, for a length-delimited one, its
  // payload [*payload, *payload + *size). The cursor is left after it.
  bool field(uint32_t& number, uint32_t& wire, const uint8_t** payload, uint64_t* size) {
    uint64_t tag = 0;
    if (!varint(tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX) return false;
    number = static_cast<uint32_t>(tag >> 3);
    wire = static_cast<uint32_t>(tag & 7);
    uint64_t v = 0;
    switch (wire) {
      case kVarint:
        return varint(v);
      case kFixed64:
        return skip(8);
      case kFixed32:
        return skip(4);
      case kLengthDelimited:
        if (!varint(v) || v > static_cast<uint64_t>(end - p)) return false;
        *payload = p;
        *size = v;
        p += v;
        return true;
      default:  // groups: ONNX has none
        return false;
    }
  }
  bool skip(uint64_t n) {
    if (n > static_cast<uint64_t>(end - p)) return false;
    p += n;
    return true;
  }
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_message(std::string& out, uint32_t number, const std::string& payload) {
  put_varint(out, (static_cast<uint64_t>(number) << 3) | kLengthDelimited);
  put_varint(out, payload.size());
  out += payload;
}

// Calls `on(number, wire, payload, size, out)` for every field of the
// message in [begin, end); a field `on` does not take (returns 0) is copied
// to `out` as it is. `on` returns -1 to reject the input.
template <class On>
bool filter(const uint8_t* base, const uint8_t* begin, const uint8_t* end, std::string& out,
            On&& on) {
  Reader r{base, begin, end};
  while (r.p < r.end) {
    const uint8_t* start = r.p;
    uint32_t number = 0, wire = 0;
    const uint8_t* payload = nullptr;
    uint64_t size = 0;
    if (!r.field(number, wire, &payload, &size)) return false;
    const int taken = on(number, wire, payload, size, out);
    if (taken < 0) return false;
    if (taken == 0) out.append(reinterpret_cast<const char*>(start), r.p - start);
  }
  return true;
}

}  // namespace

std::optional<SplitModel> split_raw_data(const void* data, size_t size) {
  if (data == nullptr || size == 0 || size > static_cast<size_t>(INT_MAX)) return std::nullopt;
  const auto* base = static_cast<const uint8_t*>(data);
  SplitModel split;
  split.rest.reserve(std::min<size_t>(size, size_t{1} << 20));

  auto tensor = [&](const uint8_t* begin, const uint8_t* end, std::string& out) {
    std::optional<ByteRange> raw;
    bool seen = false;
    const bool ok = filter(base, begin, end, out,
                           [&](uint32_t number, uint32_t wire, const uint8_t* payload,
                               uint64_t bytes, std::string&) {
                             if (number != kTensorRawData) return 0;
                             if (wire != kLengthDelimited || seen) return -1;
                             seen = true;
                             if (bytes < kInlineRawData) return 0;
                             raw = ByteRange{static_cast<uint64_t>(payload - base), bytes};
                             return 1;
                           });
    if (!ok) return false;
    split.raw_data.push_back(raw);
    if (raw) split.raw_bytes += raw->size;
    return true;
  };
  auto graph = [&](const uint8_t* begin, const uint8_t* end, std::string& out) {
    return filter(base, begin, end, out,
                  [&](uint32_t number, uint32_t wire, const uint8_t* payload, uint64_t bytes,
                      std::string& o) {
                    if (number != kGraphInitializer) return 0;
                    if (wire != kLengthDelimited) return -1;
                    std::string t;
                    if (!tensor(payload, payload + bytes, t)) return -1;
                    put_message(o, kGraphInitializer, t);
                    return 1;
                  });
  };
  int graphs = 0;
  const bool ok = filter(base, base, base + size, split.rest,
                         [&](uint32_t number, uint32_t wire, const uint8_t* payload,
                             uint64_t bytes, std::string& o) {
                           if (number != kModelGraph) return 0;
                           // Protobuf merges a message field given twice;
                           // leave that to it.
                           if (wire != kLengthDelimited || ++graphs > 1) return -1;
                           std::string g;
                           if (!graph(payload, payload + bytes, g)) return -1;
                           put_message(o, kModelGraph, g);
                           return 1;
                         });
  if (!ok) return std::nullopt;
  return split;
}

}  // namespace backplane::onnx_import
