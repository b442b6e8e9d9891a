#include "artifact/artifact.hpp"

#include "core/checksum.hpp"

#include "artifact_generated.h"
#include "data_file_generated.h"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <thread>

#ifndef BACKPLANE_VERSION
#define BACKPLANE_VERSION "dev"
#endif

namespace fs = std::filesystem;

namespace backplane {

uint64_t artifact_data_start(uint64_t fb_size) {
  const uint64_t header = 4 + fb_size + 8;
  return (header + NamedBlobStore::kPageAlignment - 1) / NamedBlobStore::kPageAlignment * NamedBlobStore::kPageAlignment;
}

namespace {

uint64_t align_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

// ------------------------------------------------------------- writing

flatbuffers::Offset<fb::Graph> write_graph(flatbuffers::FlatBufferBuilder& b, const ir::Graph& g) {
  std::vector<flatbuffers::Offset<fb::Value>> values;
  for (const ir::Value& v : g.values) {
    auto name = b.CreateString(v.name);
    auto shape = b.CreateVector(v.shape);
    auto key = b.CreateString(v.constant_key);
    values.push_back(fb::CreateValue(b, name, static_cast<int32_t>(v.dtype), shape, key));
  }
  std::vector<flatbuffers::Offset<fb::Node>> nodes;
  for (const ir::Node& n : g.nodes) {
    std::vector<flatbuffers::Offset<fb::Attribute>> attrs;
    for (const ir::Attribute& a : n.attributes) {
      flatbuffers::Offset<fb::AttrTensor> t;
      if (a.type == ir::AttrType::kTensor) {
        auto shape = b.CreateVector(a.t.shape());
        auto data = b.CreateVector(static_cast<const uint8_t*>(a.t.data()), a.t.size_bytes());
        t = fb::CreateAttrTensor(b, static_cast<int32_t>(a.t.dtype()), shape, data);
      }
      attrs.push_back(fb::CreateAttribute(b, b.CreateString(a.name), static_cast<int32_t>(a.type), a.i, a.f,
                                          b.CreateString(a.s), b.CreateVector(a.ints), b.CreateVector(a.floats),
                                          b.CreateVectorOfStrings(a.strings), t));
    }
    nodes.push_back(fb::CreateNode(b, b.CreateString(n.name), b.CreateString(n.op_type), b.CreateString(n.domain),
                                   b.CreateVector(n.inputs), b.CreateVector(n.outputs), b.CreateVector(attrs)));
  }
  std::vector<flatbuffers::Offset<fb::Opset>> opsets;
  for (const auto& [domain, version] : g.opsets) opsets.push_back(fb::CreateOpset(b, b.CreateString(domain), version));
  return fb::CreateGraph(b, b.CreateString(g.name), b.CreateVector(values), b.CreateVector(nodes),
                         b.CreateVector(g.inputs), b.CreateVector(g.outputs), b.CreateVector(opsets));
}

struct PlannedSegment {
  uint32_t file = 0;
  uint64_t offset = 0;  // relative to the file's data area
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint32_t alignment = 64;
  uint64_t checksum = 0;
};

// Writes [u32 size][flatbuffer][u64 checksum][pad][data area] to `path`.
Result<size_t> write_file(const std::string& path, const flatbuffers::FlatBufferBuilder& b,
                          const std::vector<PlannedSegment>& segments, uint32_t file) {
  // FinishSizePrefixed already wrote the u32 size in front of the buffer.
  const uint8_t* buf = b.GetBufferPointer();
  const size_t total = b.GetSize();
  const uint64_t fb_size = total - 4;
  const uint64_t start = artifact_data_start(fb_size);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return io_error(path + ": cannot create: " + std::strerror(errno));
  out.write(reinterpret_cast<const char*>(buf), static_cast<std::streamsize>(total));
  uint64_t sum = checksum64(buf + 4, fb_size);
  out.write(reinterpret_cast<const char*>(&sum), 8);
  uint64_t pos = total + 8;
  static const char zeros[4096] = {};
  auto pad_to = [&](uint64_t target) {
    while (pos < target) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof zeros, target - pos));
      out.write(zeros, static_cast<std::streamsize>(n));
      pos += n;
    }
  };
  std::vector<const PlannedSegment*> mine;
  for (const PlannedSegment& s : segments)
    if (s.file == file) mine.push_back(&s);
  std::sort(mine.begin(), mine.end(), [](auto* a, auto* c) { return a->offset < c->offset; });
  for (const PlannedSegment* s : mine) {
    pad_to(start + s->offset);
    out.write(reinterpret_cast<const char*>(s->data), static_cast<std::streamsize>(s->size));
    pos += s->size;
  }
  pad_to(align_to(pos, 64));
  out.flush();
  if (!out) return io_error(path + ": write failed: " + std::strerror(errno));
  return static_cast<size_t>(pos);
}

}  // namespace

Result<ArtifactSizes> write_artifact(const std::string& path, const std::vector<ArtifactMethod>& methods,
                                     const NamedBlobStore& store) {
  std::vector<uint8_t> compile_id(kCompileIdBytes);
  std::random_device rd;
  for (uint8_t& x : compile_id) x = static_cast<uint8_t>(rd());

  // External data files, by the name the .bpk records (relative to it).
  std::vector<std::string> files;
  for (const NamedBlobStore::Blob& blob : store.blobs())
    if (!blob.external_file.empty() && std::find(files.begin(), files.end(), blob.external_file) == files.end())
      files.push_back(blob.external_file);
  for (const std::string& f : files)
    if (f.find('/') != std::string::npos || f == "." || f == "..")
      return invalid_argument("external data file name '" + f + "' must be a plain file name next to the artifact");

  // Segments: payloads first, then blobs; offsets within each file's data area.
  std::vector<PlannedSegment> segments;
  std::vector<uint64_t> file_top(files.size() + 1, 0);
  auto add_segment = [&](uint32_t file, const uint8_t* data, size_t size, uint32_t alignment) {
    PlannedSegment s;
    s.file = file;
    s.offset = align_to(file_top[file], alignment);
    s.data = data;
    s.size = size;
    s.alignment = alignment;
    s.checksum = checksum64(data, size);
    file_top[file] = s.offset + size;
    segments.push_back(s);
    return static_cast<int32_t>(segments.size() - 1);
  };
  ArtifactSizes sizes;
  std::vector<std::vector<int32_t>> payload_segment(methods.size());
  for (size_t m = 0; m < methods.size(); ++m)
    for (const ArtifactPartition& p : methods[m].partitions) {
      payload_segment[m].push_back(p.has_payload ? add_segment(0, p.payload.data(), p.payload.size(), 64) : -1);
      sizes.payload_bytes += p.has_payload ? p.payload.size() : 0;
    }
  std::vector<uint32_t> blob_segment(store.blobs().size());
  for (size_t i = 0; i < store.blobs().size(); ++i) {
    const NamedBlobStore::Blob& blob = store.blobs()[i];
    uint32_t file = 0;
    if (!blob.external_file.empty())
      file = static_cast<uint32_t>(std::find(files.begin(), files.end(), blob.external_file) - files.begin()) + 1;
    blob_segment[i] = static_cast<uint32_t>(add_segment(file, blob.data(), blob.size, static_cast<uint32_t>(blob.alignment)));
  }

  flatbuffers::FlatBufferBuilder b(1 << 16);
  std::vector<flatbuffers::Offset<fb::Method>> fb_methods;
  for (size_t m = 0; m < methods.size(); ++m) {
    const ArtifactMethod& method = methods[m];
    auto graph = write_graph(b, *method.graph);
    std::vector<flatbuffers::Offset<fb::Partition>> parts;
    for (size_t i = 0; i < method.partitions.size(); ++i) {
      const ArtifactPartition& p = method.partitions[i];
      parts.push_back(fb::CreatePartition(b, b.CreateString(p.backend), p.api_major, p.api_minor,
                                          b.CreateVector(p.nodes), p.imperative, payload_segment[m][i]));
    }
    fb_methods.push_back(fb::CreateMethod(b, b.CreateString(method.name), graph, b.CreateVector(parts),
                                          b.CreateVectorOfStrings(method.preference)));
  }
  std::vector<flatbuffers::Offset<fb::NamedData>> named;
  for (const auto& [key, blob] : store.keys())  // std::map: sorted by key
    named.push_back(fb::CreateNamedData(b, b.CreateString(key), blob_segment[blob]));
  std::vector<fb::Segment> fb_segments;
  for (const PlannedSegment& s : segments)
    fb_segments.emplace_back(s.file, s.alignment, s.offset, s.size, s.checksum);
  std::vector<flatbuffers::Offset<fb::DataFile>> fb_files;
  for (size_t f = 0; f < files.size(); ++f)
    fb_files.push_back(fb::CreateDataFile(b, b.CreateString(files[f]), file_top[f + 1]));
  auto root = fb::CreateArtifact(b, kArtifactFormatMajor, kArtifactFormatMinor, b.CreateVector(compile_id),
                                 b.CreateString(std::string("backplane ") + BACKPLANE_VERSION),
                                 b.CreateVector(fb_methods), b.CreateVector(named),
                                 b.CreateVectorOfStructs(fb_segments), b.CreateVector(fb_files));
  fb::FinishSizePrefixedArtifactBuffer(b, root);
  BP_ASSIGN_OR_RETURN(sizes.file_bytes, write_file(path, b, segments, 0));

  const fs::path dir = fs::path(path).parent_path();
  for (size_t f = 0; f < files.size(); ++f) {
    flatbuffers::FlatBufferBuilder hb(256);
    auto header = fb::CreateDataFileHeader(hb, kArtifactFormatMajor, kArtifactFormatMinor,
                                           hb.CreateVector(compile_id), hb.CreateString(files[f]));
    fb::FinishSizePrefixedDataFileHeaderBuffer(hb, header);
    BP_ASSIGN_OR_RETURN(size_t n, write_file((dir / files[f]).string(), hb, segments, static_cast<uint32_t>(f + 1)));
    sizes.external_bytes += n;
  }
  return sizes;
}

// ------------------------------------------------------------- reading

namespace {

// Checks [u32 size][flatbuffer][u64 checksum] at the start of `file`; returns
// the FlatBuffer's size.
Result<uint64_t> check_header(const MappedFile& file, const char* what, const char* identifier) {
  if (file.size() < 4 + 8 + 8) return corrupt_data(file.path() + ": too short to be " + what);
  // The identifier first: a file of another kind is not a "truncated" one.
  if (!flatbuffers::BufferHasIdentifier(file.bytes(), identifier, true))
    return corrupt_data(file.path() + ": not " + what + " (file identifier is not '" + identifier + "')");
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, file.bytes(), 4);
  if (static_cast<uint64_t>(fb_size) + 12 > file.size())
    return corrupt_data(file.path() + ": truncated (header says " + std::to_string(fb_size) + " bytes of metadata, file has " +
                        std::to_string(file.size()) + ")");
  uint64_t stored = 0;
  std::memcpy(&stored, file.bytes() + 4 + fb_size, 8);
  if (checksum64(file.bytes() + 4, fb_size) != stored)
    return corrupt_data(file.path() + ": metadata checksum mismatch (the file is corrupt)");
  return static_cast<uint64_t>(fb_size);
}

// Bytes of a tensor of `shape` and `dtype`, or -1 if a dim is negative or the
// size is absurd (over 2^40 bytes): shapes come from the file, and their
// product must not overflow.
int64_t checked_bytes(const Shape& shape, DType dtype) {
  constexpr int64_t kLimit = int64_t{1} << 40;
  int64_t n = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t d : shape) {
    if (d < 0 || d > kLimit) return -1;
    if (d != 0 && n > kLimit / d) return -1;
    n *= d;
  }
  return n;
}

// The FlatBuffers verifier (2.0) checks the alignment of a vector's length
// but not of its elements: a crafted file can put a [long] at an address
// that is not a multiple of 8. The mapping is page-aligned, so the address
// says whether the offset in the file is.
template <class T>
bool elements_aligned(const flatbuffers::Vector<T>* v) {
  // (An empty vector has no elements to misalign; writers do not align it.)
  return v == nullptr || v->size() == 0 || reinterpret_cast<uintptr_t>(v->Data()) % alignof(T) == 0;
}

bool known_attr_type(int32_t t) {
  switch (static_cast<ir::AttrType>(t)) {
    case ir::AttrType::kFloat:
    case ir::AttrType::kInt:
    case ir::AttrType::kString:
    case ir::AttrType::kTensor:
    case ir::AttrType::kFloats:
    case ir::AttrType::kInts:
    case ir::AttrType::kStrings:
      return true;
    default:
      return false;
  }
}

std::string hex_id(const flatbuffers::Vector<uint8_t>* id) {
  static const char* h = "0123456789abcdef";
  std::string s;
  if (id != nullptr)
    for (uint8_t x : *id) s += {h[x >> 4], h[x & 15]};
  return s;
}

}  // namespace

Result<std::shared_ptr<ArtifactFile>> ArtifactFile::open(const std::string& path,
                                                         const std::vector<std::string>& external_data,
                                                         bool lazy_checksums) {
  std::shared_ptr<ArtifactFile> a(new ArtifactFile());
  a->path_ = path;
  BP_ASSIGN_OR_RETURN(a->main_, MappedFile::open(path));
  BP_ASSIGN_OR_RETURN(uint64_t fb_size, check_header(*a->main_, "a Backplane artifact", fb::ArtifactIdentifier()));
  // The FlatBuffer is size-prefixed: its alignment is relative to byte 0,
  // which the page-aligned mapping keeps.
  const uint8_t* buf = a->main_->bytes();
  flatbuffers::Verifier verifier(buf, 4 + fb_size, 64, 10'000'000);
  if (!fb::VerifySizePrefixedArtifactBuffer(verifier)) return corrupt_data(path + ": artifact metadata fails verification");
  a->root_ = fb::GetSizePrefixedArtifact(buf);
  const fb::Artifact& r = *a->root_;
  if (r.format_major() != kArtifactFormatMajor)
    return Status(StatusCode::kVersionMismatch, path + ": artifact format " + std::to_string(r.format_major()) + "." +
                                                    std::to_string(r.format_minor()) + ", this reader reads " +
                                                    std::to_string(kArtifactFormatMajor) + ".x");
  if (r.compile_id() == nullptr || r.compile_id()->size() != kCompileIdBytes)
    return corrupt_data(path + ": artifact has no compile id");
  if (!elements_aligned(r.segments())) return corrupt_data(path + ": artifact metadata is misaligned");

  // External data files: given paths first (matched by name), else next to the .bpk.
  const fs::path dir = fs::path(path).parent_path();
  if (r.data_files() != nullptr) {
    for (const fb::DataFile* df : *r.data_files()) {
      if (df->name() == nullptr) return corrupt_data(path + ": data file entry without a name");
      std::string name = df->name()->str();
      // Only a plain name next to the .bpk: never a path the file chooses.
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
          name.find('\0') != std::string::npos)
        return corrupt_data(path + ": data file name '" + name + "' is not a plain file name");
      std::string where = (dir / name).string();
      for (const std::string& given : external_data)
        if (fs::path(given).filename() == name) where = given;
      auto mapped = MappedFile::open(where);
      if (!mapped.ok())
        return std::move(mapped).take_status().with_context(path + ": external data file '" + name + "'");
      BP_ASSIGN_OR_RETURN(uint64_t hsize, check_header(**mapped, "a Backplane data file", fb::DataFileHeaderIdentifier()));
      const uint8_t* hb = (*mapped)->bytes();
      flatbuffers::Verifier hv(hb, 4 + hsize);
      if (!fb::VerifySizePrefixedDataFileHeaderBuffer(hv)) return corrupt_data(where + ": data file header fails verification");
      const fb::DataFileHeader* h = fb::GetSizePrefixedDataFileHeader(hb);
      if (h->format_major() != kArtifactFormatMajor)
        return Status(StatusCode::kVersionMismatch, where + ": data file format " + std::to_string(h->format_major()));
      if (hex_id(h->compile_id()) != hex_id(r.compile_id()))
        return invalid_argument(where + ": data file belongs to another compile (id " + hex_id(h->compile_id()) +
                                ", " + path + " expects " + hex_id(r.compile_id()) + ")");
      a->data_files_.push_back(*mapped);
    }
  }
  BP_RETURN_IF_ERROR(a->check_structure());
  const size_t n = r.segments() ? r.segments()->size() : 0;
  a->verified_ = std::make_unique<std::atomic<bool>[]>(n);
  for (size_t i = 0; i < n; ++i) a->verified_[i] = false;
  if (!lazy_checksums) BP_RETURN_IF_ERROR(a->verify_all());
  return a;
}

Status ArtifactFile::check_structure() const {
  const fb::Artifact& r = *root_;
  const size_t nseg = r.segments() ? r.segments()->size() : 0;
  for (size_t i = 0; i < nseg; ++i) {
    const fb::Segment* s = r.segments()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const std::string where = path_ + ": segment " + std::to_string(i);
    if (s->file() > data_files_.size()) return corrupt_data(where + " names data file " + std::to_string(s->file()) + ", which does not exist");
    const MappedFile& f = s->file() == 0 ? *main_ : *data_files_[s->file() - 1];
    uint32_t fb_size = 0;
    std::memcpy(&fb_size, f.bytes(), 4);
    const uint64_t start = artifact_data_start(fb_size);
    if (s->alignment() == 0 || (s->alignment() & (s->alignment() - 1)) != 0 || s->offset() % s->alignment() != 0)
      return corrupt_data(where + " has a bad alignment");
    if (s->offset() > f.size() || s->size() > f.size() || start + s->offset() + s->size() > f.size())
      return corrupt_data(where + " lies outside " + f.path() + " (truncated?)");
  }
  if (r.named_data() != nullptr) {
    std::string previous;
    for (const fb::NamedData* d : *r.named_data()) {
      if (d->key() == nullptr || d->segment() >= nseg) return corrupt_data(path_ + ": named data entry is invalid");
      if (!previous.empty() && d->key()->str() <= previous) return corrupt_data(path_ + ": named data is not sorted");
      previous = d->key()->str();
    }
  }
  if (r.methods() == nullptr || r.methods()->size() == 0) return corrupt_data(path_ + ": artifact has no method");
  for (const fb::Method* m : *r.methods()) {
    if (m->name() == nullptr || m->graph() == nullptr || m->partitions() == nullptr)
      return corrupt_data(path_ + ": method without name, graph or partitions");
    const size_t nodes = m->graph()->nodes() ? m->graph()->nodes()->size() : 0;
    std::vector<bool> covered(nodes, false);
    for (const fb::Partition* p : *m->partitions()) {
      if (p->backend() == nullptr || p->nodes() == nullptr || p->nodes()->size() == 0)
        return corrupt_data(path_ + ": method '" + m->name()->str() + "' has an invalid partition");
      if (p->payload() >= static_cast<int32_t>(nseg) || p->payload() < -1)
        return corrupt_data(path_ + ": partition payload segment out of range");
      for (int32_t n : *p->nodes()) {
        if (n < 0 || static_cast<size_t>(n) >= nodes || covered[n])
          return corrupt_data(path_ + ": method '" + m->name()->str() + "': partition node index invalid or repeated");
        covered[n] = true;
      }
    }
    if (std::find(covered.begin(), covered.end(), false) != covered.end())
      return corrupt_data(path_ + ": method '" + m->name()->str() + "': a node belongs to no partition");
  }
  return ok_status();
}

// Hashing is cheap next to faulting the mapped pages in, and both scale with
// cores: the segments are shared out (largest first, to the least loaded
// worker) between a few threads. The first failure in segment order wins.
Status ArtifactFile::verify_all() const {
  const uint32_t n = root_->segments() ? root_->segments()->size() : 0;
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  auto bytes = [&](uint32_t i) { return root_->segments()->Get(i)->size(); };
  std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) { return bytes(x) > bytes(y); });
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += bytes(i);
  constexpr uint64_t kPerWorker = 16u << 20;  // below this a thread costs more than it saves
  const size_t workers = static_cast<size_t>(std::clamp<uint64_t>(
      std::min<uint64_t>(total / kPerWorker, std::max(1u, std::thread::hardware_concurrency())), 1, 4));
  std::vector<std::vector<uint32_t>> share(workers);
  std::vector<uint64_t> load(workers, 0);
  for (uint32_t i : order) {
    const size_t w = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    share[w].push_back(i);
    load[w] += bytes(i);
  }
  std::vector<std::pair<uint32_t, Status>> failures(workers, {UINT32_MAX, ok_status()});
  auto run = [&](size_t w) {
    for (uint32_t i : share[w]) {
      const uint8_t* d;
      size_t sz;
      Status st = segment(i, &d, &sz);
      if (!st.ok() && i < failures[w].first) failures[w] = {i, std::move(st)};
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < workers; ++w) threads.emplace_back(run, w);
  run(0);
  for (std::thread& t : threads) t.join();
  auto first = std::min_element(failures.begin(), failures.end(),
                                [](const auto& x, const auto& y) { return x.first < y.first; });
  return first->second;
}

Status ArtifactFile::segment(uint32_t index, const uint8_t** data, size_t* size) const {
  const fb::Artifact& r = *root_;
  if (r.segments() == nullptr || index >= r.segments()->size())
    return corrupt_data(path_ + ": segment " + std::to_string(index) + " does not exist");
  const fb::Segment* s = r.segments()->Get(index);
  const MappedFile& f = s->file() == 0 ? *main_ : *data_files_[s->file() - 1];
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, f.bytes(), 4);
  const uint8_t* p = f.bytes() + artifact_data_start(fb_size) + s->offset();
  if (!verified_[index].load(std::memory_order_acquire)) {
    if (checksum64(p, s->size()) != s->checksum())
      return corrupt_data(f.path() + ": checksum mismatch in segment " + std::to_string(index) + " (" +
                          std::to_string(s->size()) + " bytes at offset " +
                          std::to_string(artifact_data_start(fb_size) + s->offset()) + "): the file is corrupt");
    verified_[index].store(true, std::memory_order_release);
  }
  *data = p;
  *size = s->size();
  return ok_status();
}

Result<int> ArtifactFile::find_method(const std::string& name) const {
  const auto& methods = *root_->methods();
  if (name.empty()) return 0;
  std::string names;
  for (flatbuffers::uoffset_t i = 0; i < methods.size(); ++i) {
    if (methods.Get(i)->name()->str() == name) return static_cast<int>(i);
    names += (names.empty() ? "" : ", ") + methods.Get(i)->name()->str();
  }
  return not_found(path_ + ": no method named '" + name + "' (methods: " + names + ")");
}

Result<ir::Graph> ArtifactFile::method_graph(int m) const {
  const fb::Method* method = root_->methods()->Get(static_cast<flatbuffers::uoffset_t>(m));
  const fb::Graph* fg = method->graph();
  const std::string where = path_ + ": method '" + method->name()->str() + "'";
  ir::Graph g;
  g.name = fg->name() ? fg->name()->str() : method->name()->str();
  g.source = path_;
  if (fg->opsets())
    for (const fb::Opset* o : *fg->opsets()) g.opsets[o->domain() ? o->domain()->str() : ""] = o->version();
  const int nv = fg->values() ? static_cast<int>(fg->values()->size()) : 0;
  auto valid_value = [&](int v, bool allow_absent) { return (allow_absent && v == -1) || (v >= 0 && v < nv); };
  std::map<std::string, uint32_t> segment_of_key;
  if (root_->named_data())
    for (const fb::NamedData* d : *root_->named_data()) segment_of_key[d->key()->str()] = d->segment();
  std::shared_ptr<const ArtifactFile> self = shared_from_this();
  for (int i = 0; i < nv; ++i) {
    const fb::Value* fv = fg->values()->Get(static_cast<flatbuffers::uoffset_t>(i));
    ir::Value v;
    v.name = fv->name() ? fv->name()->str() : "";
    if (v.name.empty() || g.find_value(v.name) >= 0) return corrupt_data(where + ": value " + std::to_string(i) + " has an empty or repeated name");
    v.dtype = static_cast<DType>(fv->dtype());
    if (dtype_size(v.dtype) == 0) return corrupt_data(where + ": value '" + v.name + "' has an unknown dtype");
    if (!elements_aligned(fv->shape())) return corrupt_data(where + ": value '" + v.name + "' is misaligned");
    if (fv->shape()) v.shape.assign(fv->shape()->begin(), fv->shape()->end());
    if (checked_bytes(v.shape, v.dtype) < 0) return corrupt_data(where + ": value '" + v.name + "' has a bad shape");
    v.has_shape = true;
    v.dim_params.assign(v.shape.size(), "");
    std::string key = fv->constant_key() ? fv->constant_key()->str() : "";
    int id = g.add_value(v);
    if (!key.empty()) {
      auto it = segment_of_key.find(key);
      if (it == segment_of_key.end()) return corrupt_data(where + ": constant '" + v.name + "' names missing data '" + key + "'");
      const fb::Segment* s = root_->segments()->Get(it->second);
      const size_t expect = static_cast<size_t>(checked_bytes(v.shape, v.dtype));
      if (s->size() != expect)
        return corrupt_data(where + ": constant '" + v.name + "' has " + std::to_string(s->size()) + " bytes, its shape needs " +
                            std::to_string(expect));
      const MappedFile& f = s->file() == 0 ? *main_ : *data_files_[s->file() - 1];
      uint32_t fb_size = 0;
      std::memcpy(&fb_size, f.bytes(), 4);
      void* p = const_cast<uint8_t*>(f.bytes() + artifact_data_start(fb_size) + s->offset());
      g.values[id].constant_key = key;
      g.constants[key] = Tensor::view(v.dtype, v.shape, p, std::const_pointer_cast<ArtifactFile>(self));
    }
  }
  auto read_ids = [&](const flatbuffers::Vector<int32_t>* ids, bool allow_absent, std::vector<int>* out) -> bool {
    if (ids == nullptr) return true;
    for (int32_t v : *ids) {
      if (!valid_value(v, allow_absent)) return false;
      out->push_back(v);
    }
    return true;
  };
  if (fg->nodes())
    for (const fb::Node* fn : *fg->nodes()) {
      ir::Node n;
      n.name = fn->name() ? fn->name()->str() : "";
      n.op_type = fn->op_type() ? fn->op_type()->str() : "";
      n.domain = fn->domain() ? fn->domain()->str() : "";
      if (!read_ids(fn->inputs(), true, &n.inputs) || !read_ids(fn->outputs(), true, &n.outputs))
        return corrupt_data(where + ": node '" + n.name + "' refers to a value that does not exist");
      if (fn->attributes())
        for (const fb::Attribute* fa : *fn->attributes()) {
          ir::Attribute a;
          a.name = fa->name() ? fa->name()->str() : "";
          if (a.name.empty() || !known_attr_type(fa->type()))
            return corrupt_data(where + ": node '" + n.name + "' has an attribute without a name or of an unknown type");
          a.type = static_cast<ir::AttrType>(fa->type());
          if (!elements_aligned(fa->ints()) || !elements_aligned(fa->floats()) ||
              (fa->t() != nullptr && !elements_aligned(fa->t()->shape())))
            return corrupt_data(where + ": node '" + n.name + "' attribute '" + a.name + "' is misaligned");
          a.i = fa->i();
          a.f = fa->f();
          a.s = fa->s() ? fa->s()->str() : "";
          if (fa->ints()) a.ints.assign(fa->ints()->begin(), fa->ints()->end());
          if (fa->floats()) a.floats.assign(fa->floats()->begin(), fa->floats()->end());
          if (fa->strings())
            for (const auto* str : *fa->strings()) a.strings.push_back(str->str());
          if (fa->t() != nullptr) {
            const fb::AttrTensor* t = fa->t();
            Shape shape;
            if (t->shape()) shape.assign(t->shape()->begin(), t->shape()->end());
            DType dt = static_cast<DType>(t->dtype());
            const int64_t need = checked_bytes(shape, dt);
            if (dtype_size(dt) == 0 || need < 0 || t->data() == nullptr || t->data()->size() != static_cast<uint64_t>(need))
              return corrupt_data(where + ": node '" + n.name + "' attribute '" + a.name + "' has a bad tensor");
            a.t = Tensor::copy_of(dt, shape, t->data()->data());
          }
          n.attributes.push_back(std::move(a));
        }
      g.nodes.push_back(std::move(n));
    }
  if (!read_ids(fg->inputs(), false, &g.inputs) || !read_ids(fg->outputs(), false, &g.outputs))
    return corrupt_data(where + ": graph inputs/outputs refer to values that do not exist");
  // Inputs are written by sessions: never a constant (its bytes are the
  // read-only mapping), never listed twice.
  std::vector<bool> is_input(g.values.size(), false);
  for (int v : g.inputs) {
    if (g.values[v].is_constant() || is_input[v])
      return corrupt_data(where + ": graph input '" + g.values[v].name + "' is a constant or listed twice");
    is_input[v] = true;
  }
  // The stored order must already be topological; topo_sort also checks that
  // every value has at most one producer and nothing is read before defined.
  std::vector<std::string> stored;
  for (const ir::Node& n : g.nodes) stored.push_back(n.name);
  BP_RETURN_IF_ERROR(g.topo_sort(), where);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].name != stored[i]) return corrupt_data(where + ": nodes are not stored in execution order");
  BP_RETURN_IF_ERROR(ir::verify(g), where);
  // Stored dtypes and shapes size every buffer the executor and the kernels
  // use: they must be what shape inference derives from the inputs, or a
  // crafted file could make a kernel read or write out of bounds. Checked on
  // a copy (constants are views, so copying is cheap).
  ir::Graph check = g;
  Status inconsistent = ir::infer_shapes(check);
  if (!inconsistent.ok()) {
    inconsistent = corrupt_data(where + ": graph fails shape inference: " + inconsistent.message());
  } else {
    for (size_t v = 0; v < g.values.size() && inconsistent.ok(); ++v)
      if (check.values[v].dtype != g.values[v].dtype || check.values[v].shape != g.values[v].shape)
        inconsistent = corrupt_data(where + ": value '" + g.values[v].name + "' is stored as " +
                                    dtype_name(g.values[v].dtype) + shape_to_string(g.values[v].shape) +
                                    " but its inputs make it " + dtype_name(check.values[v].dtype) +
                                    shape_to_string(check.values[v].shape));
  }
  if (!inconsistent.ok()) {
    // Shape inference reads constants (a Reshape's shape, a Pad's pads): with
    // lazy checksums, a damaged one shows up here first. Say that, naming
    // the file, rather than what the damage made of the shapes.
    for (const auto& [key, segment] : segment_of_key) {
      const uint8_t* d = nullptr;
      size_t n = 0;
      if (g.constants.count(key)) BP_RETURN_IF_ERROR(this->segment(segment, &d, &n), where);
    }
    return inconsistent;
  }
  return g;
}

ArtifactDataMap::ArtifactDataMap(std::shared_ptr<const ArtifactFile> file) : file_(std::move(file)) {
  if (file_->root().named_data())
    for (const fb::NamedData* d : *file_->root().named_data()) {
      keys_.push_back(d->key()->str());
      segments_.push_back(d->segment());
    }
}

Status ArtifactDataMap::get(const std::string& key, const void** data, size_t* size) const {
  auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
  if (it == keys_.end() || *it != key) return not_found(file_->path() + ": no named data '" + key + "'");
  const uint8_t* d = nullptr;
  BP_RETURN_IF_ERROR(file_->segment(segments_[it - keys_.begin()], &d, size));
  *data = d;
  return ok_status();
}

}  // namespace backplane
