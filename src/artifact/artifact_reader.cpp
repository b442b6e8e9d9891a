// Reading .bpk/.bpd files: nothing in them is trusted.
#include "artifact/artifact.hpp"

#include "core/checksum.hpp"

#include "artifact_generated.h"
#include "data_file_generated.h"

#include <backplane/runtime.hpp>
#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

namespace fs = std::filesystem;

namespace backplane {

// ------------------------------------------------------------- reading

namespace {

// Checks [u32 size][flatbuffer][u64 checksum] at the start of `file`; returns
// the FlatBuffer's size.
Result<uint64_t> check_header(const MappedFile& file, const char* what, const char* identifier) {
  if (file.size() < 4 + 8 + 8) return corrupt_data(file.path() + ": too short to be " + what);
  // The identifier first: a file of another kind is not a "truncated" one.
  if (!flatbuffers::BufferHasIdentifier(file.bytes(), identifier, true))
    return corrupt_data(file.path() + ": not " + what + " (file identifier is not '" + identifier +
                        "')");
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, file.bytes(), 4);
  if (static_cast<uint64_t>(fb_size) + 12 > file.size())
    return corrupt_data(file.path() + ": truncated (header says " + std::to_string(fb_size) +
                        " bytes of metadata, file has " + std::to_string(file.size()) + ")");
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

// A portable graph's declared shape: dims of -1 (not known) allowed, the
// known ones bounded as checked_bytes bounds them.
bool plausible_dims(const Shape& shape) {
  constexpr int64_t kLimit = int64_t{1} << 40;
  return std::all_of(shape.begin(), shape.end(), [](int64_t d) { return d >= -1 && d <= kLimit; });
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

// Every partition names a backend and at least one node; the partitions
// cover the `num_nodes` nodes of their graph exactly once.
Status check_partitions(const flatbuffers::Vector<flatbuffers::Offset<fb::Partition>>& partitions,
                        size_t num_nodes, size_t num_segments, const std::string& where) {
  std::vector<bool> covered(num_nodes, false);
  for (const fb::Partition* p : partitions) {
    if (p->backend() == nullptr || p->nodes() == nullptr || p->nodes()->size() == 0)
      return corrupt_data(where + " has an invalid partition");
    if (p->payload() >= static_cast<int32_t>(num_segments) || p->payload() < -1)
      return corrupt_data(where + ": partition payload segment out of range");
    if (p->imperative() && p->polymorphic())
      return corrupt_data(where + ": a partition is both imperative and shape-polymorphic");
    for (int32_t n : *p->nodes()) {
      if (n < 0 || static_cast<size_t>(n) >= num_nodes || covered[n])
        return corrupt_data(where + ": partition node index invalid or repeated");
      covered[n] = true;
    }
  }
  if (std::find(covered.begin(), covered.end(), false) != covered.end())
    return corrupt_data(where + ": a node belongs to no partition");
  return ok_status();
}

}  // namespace

Result<std::shared_ptr<ArtifactFile>> ArtifactFile::open(
    const std::string& path, const std::vector<std::string>& external_data, bool lazy_checksums) {
  std::shared_ptr<ArtifactFile> a(new ArtifactFile());
  a->path_ = path;
  BP_ASSIGN_OR_RETURN(a->main_, MappedFile::open(path));
  BP_ASSIGN_OR_RETURN(uint64_t fb_size,
                      check_header(*a->main_, "a Backplane artifact", fb::ArtifactIdentifier()));
  // The FlatBuffer is size-prefixed: its alignment is relative to byte 0,
  // which the page-aligned mapping keeps.
  const uint8_t* buf = a->main_->bytes();
  flatbuffers::Verifier verifier(buf, 4 + fb_size, 64, 10'000'000);
  if (!fb::VerifySizePrefixedArtifactBuffer(verifier))
    return corrupt_data(path + ": artifact metadata fails verification");
  a->root_ = fb::GetSizePrefixedArtifact(buf);
  const fb::Artifact& r = *a->root_;
  if (r.format_major() != kArtifactFormatMajor)
    return Status(StatusCode::kVersionMismatch,
                  path + ": artifact format " + std::to_string(r.format_major()) + "." +
                      std::to_string(r.format_minor()) + ", this reader reads " +
                      std::to_string(kArtifactFormatMajor) + ".x");
  if (r.compile_id() == nullptr || r.compile_id()->size() != kCompileIdBytes)
    return corrupt_data(path + ": artifact has no compile id");
  if (!elements_aligned(r.segments()))
    return corrupt_data(path + ": artifact metadata is misaligned");

  BP_RETURN_IF_ERROR(a->open_data_files(external_data));
  BP_RETURN_IF_ERROR(a->check_structure());
  a->read_tables();
  const size_t n = a->segments_.size();
  a->verified_ = std::make_unique<std::atomic<bool>[]>(n);
  for (size_t i = 0; i < n; ++i) a->verified_[i] = false;
  if (!lazy_checksums) BP_RETURN_IF_ERROR(a->verify_all());
  return a;
}

// External data files: given paths first (matched by name), else next to the .bpk.
Status ArtifactFile::open_data_files(const std::vector<std::string>& external_data) {
  const fb::Artifact& r = *root_;
  const fs::path dir = fs::path(path_).parent_path();
  if (r.data_files() != nullptr) {
    for (const fb::DataFile* df : *r.data_files()) {
      if (df->name() == nullptr) return corrupt_data(path_ + ": data file entry without a name");
      std::string name = df->name()->str();
      // Only a plain name next to the .bpk: never a path the file chooses.
      if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
          name.find('\0') != std::string::npos)
        return corrupt_data(path_ + ": data file name '" + name + "' is not a plain file name");
      std::string where = (dir / name).string();
      for (const std::string& given : external_data)
        if (fs::path(given).filename() == name) where = given;
      auto mapped = MappedFile::open(where);
      if (!mapped.ok())
        return std::move(mapped).take_status().with_context(path_ + ": external data file '" +
                                                            name + "'");
      BP_ASSIGN_OR_RETURN(uint64_t hsize, check_header(**mapped, "a Backplane data file",
                                                       fb::DataFileHeaderIdentifier()));
      const uint8_t* hb = (*mapped)->bytes();
      flatbuffers::Verifier hv(hb, 4 + hsize);
      if (!fb::VerifySizePrefixedDataFileHeaderBuffer(hv))
        return corrupt_data(where + ": data file header fails verification");
      const fb::DataFileHeader* h = fb::GetSizePrefixedDataFileHeader(hb);
      if (h->format_major() != kArtifactFormatMajor)
        return Status(StatusCode::kVersionMismatch,
                      where + ": data file format " + std::to_string(h->format_major()));
      if (hex_id(h->compile_id()) != hex_id(r.compile_id()))
        return invalid_argument(where + ": data file belongs to another compile (id " +
                                hex_id(h->compile_id()) + ", " + path_ + " expects " +
                                hex_id(r.compile_id()) + ")");
      data_files_.push_back(*mapped);
    }
  }
  return check_given_data_files(external_data);
}

// A data file the caller names but the artifact does not record is a mistake
// (a wrong path, a file of another artifact): say so, never ignore it.
Status ArtifactFile::check_given_data_files(const std::vector<std::string>& external_data) const {
  const fb::Artifact& r = *root_;
  const size_t recorded = r.data_files() == nullptr ? 0 : r.data_files()->size();
  for (const std::string& given : external_data) {
    const std::string name = fs::path(given).filename().string();
    bool found = false;
    for (size_t i = 0; i < recorded && !found; ++i)
      found = r.data_files()->Get(static_cast<flatbuffers::uoffset_t>(i))->name()->str() == name;
    if (!found)
      return invalid_argument(
          path_ + ": external data file '" + given + "' is not one this artifact records (" +
          (recorded == 0 ? std::string("it has none")
                         : "it records " + std::to_string(recorded) + ": see 'backplane inspect'") +
          ")");
  }
  return ok_status();
}

// Copies the tables a reader needs into plain structs (after check_structure,
// so every field read here is present and in range).
void ArtifactFile::read_tables() {
  const fb::Artifact& r = *root_;
  format_major_ = r.format_major();
  format_minor_ = r.format_minor();
  producer_ = r.producer() ? r.producer()->str() : "";
  compile_id_hex_ = hex_id(r.compile_id());
  if (r.data_files())
    for (const fb::DataFile* d : *r.data_files())
      data_file_info_.push_back({d->name()->str(), d->size()});
  if (r.segments())
    for (const fb::Segment* g : *r.segments())
      segments_.push_back({g->file(), g->offset(), g->size(), g->alignment(), g->checksum()});
  if (r.named_data())
    for (const fb::NamedData* d : *r.named_data())
      named_data_.push_back({d->key()->str(), d->segment()});
  for (const fb::Method* m : *r.methods()) {
    StoredMethod method;
    method.name = m->name()->str();
    method.num_nodes = m->graph()->nodes() ? m->graph()->nodes()->size() : 0;
    if (m->preference())
      for (const auto* id : *m->preference()) method.preference.push_back(id->str());
    auto read_partitions = [](const auto& partitions, StoredSpecialization* spec) {
      for (const fb::Partition* p : partitions)
        spec->partitions.push_back({p->backend()->str(), p->api_major(), p->api_minor(),
                                    std::vector<int>(p->nodes()->begin(), p->nodes()->end()),
                                    p->imperative(), p->payload(), p->polymorphic()});
    };
    method.has_portable = m->portable() != nullptr;
    if (method.has_portable) {
      method.num_nodes = m->portable()->nodes() ? m->portable()->nodes()->size() : 0;
      for (const fb::Specialization* fs : *m->specializations()) {
        StoredSpecialization spec;
        for (const fb::InputShape* in : *fs->signature())
          spec.signature.emplace_back(in->dims() ? Shape(in->dims()->begin(), in->dims()->end())
                                                 : Shape());
        spec.num_nodes = fs->num_nodes();
        spec.digest = fs->digest();
        read_partitions(*fs->partitions(), &spec);
        method.specializations.push_back(std::move(spec));
      }
    } else {
      StoredSpecialization spec;  // its signature: the graph's input shapes (load_method)
      spec.num_nodes = method.num_nodes;
      read_partitions(*m->partitions(), &spec);
      method.specializations.push_back(std::move(spec));
    }
    methods_.push_back(std::move(method));
  }
}

const uint8_t* ArtifactFile::segment_address(const ArtifactSegment& s) const {
  const MappedFile& f = s.file == 0 ? *main_ : *data_files_[s.file - 1];
  uint32_t fb_size = 0;
  std::memcpy(&fb_size, f.bytes(), 4);
  return f.bytes() + artifact_data_start(fb_size) + s.offset;
}

Status ArtifactFile::check_structure() const {
  const fb::Artifact& r = *root_;
  const size_t nseg = r.segments() ? r.segments()->size() : 0;
  for (size_t i = 0; i < nseg; ++i) {
    const fb::Segment* s = r.segments()->Get(static_cast<flatbuffers::uoffset_t>(i));
    const std::string where = path_ + ": segment " + std::to_string(i);
    if (s->file() > data_files_.size())
      return corrupt_data(where + " names data file " + std::to_string(s->file()) +
                          ", which does not exist");
    const MappedFile& f = s->file() == 0 ? *main_ : *data_files_[s->file() - 1];
    uint32_t fb_size = 0;
    std::memcpy(&fb_size, f.bytes(), 4);
    const uint64_t start = artifact_data_start(fb_size);
    if (s->alignment() == 0 || (s->alignment() & (s->alignment() - 1)) != 0 ||
        s->offset() % s->alignment() != 0)
      return corrupt_data(where + " has a bad alignment");
    if (s->offset() > f.size() || s->size() > f.size() ||
        start + s->offset() + s->size() > f.size())
      return corrupt_data(where + " lies outside " + f.path() + " (truncated?)");
  }
  if (r.named_data() != nullptr) {
    std::string previous;
    for (const fb::NamedData* d : *r.named_data()) {
      if (d->key() == nullptr || d->segment() >= nseg)
        return corrupt_data(path_ + ": named data entry is invalid");
      if (!previous.empty() && d->key()->str() <= previous)
        return corrupt_data(path_ + ": named data is not sorted");
      previous = d->key()->str();
    }
  }
  if (r.methods() == nullptr || r.methods()->size() == 0)
    return corrupt_data(path_ + ": artifact has no method");
  for (const fb::Method* m : *r.methods()) {
    if (m->name() == nullptr || m->graph() == nullptr || m->partitions() == nullptr)
      return corrupt_data(path_ + ": method without name, graph or partitions");
    const size_t nodes = m->graph()->nodes() ? m->graph()->nodes()->size() : 0;
    BP_RETURN_IF_ERROR(check_partitions(*m->partitions(), nodes, nseg,
                                        path_ + ": method '" + m->name()->str() + "'"));
    if (m->portable() != nullptr || m->specializations() != nullptr)
      BP_RETURN_IF_ERROR(check_specializations(*m));
  }
  return ok_status();
}

// Format 1.1: a portable graph and at least one specialisation, each with a
// signature and partitions over its graph. Specialising never adds nodes,
// so a specialisation has at most the portable graph's.
Status ArtifactFile::check_specializations(const fb::Method& m) const {
  const std::string where = path_ + ": method '" + m.name()->str() + "'";
  if (m.portable() == nullptr || m.specializations() == nullptr || m.specializations()->size() == 0)
    return corrupt_data(where +
                        " has a specialisation table without a portable graph, or a "
                        "portable graph without specialisations");
  const size_t portable_nodes = m.portable()->nodes() ? m.portable()->nodes()->size() : 0;
  const size_t nseg = root_->segments() ? root_->segments()->size() : 0;
  size_t k = 0;
  for (const fb::Specialization* s : *m.specializations()) {
    const std::string spec = where + " specialisation " + std::to_string(k++);
    if (s->signature() == nullptr || s->partitions() == nullptr)
      return corrupt_data(spec + " has no signature or no partitions");
    for (const fb::InputShape* in : *s->signature())
      if (!elements_aligned(in->dims()))
        return corrupt_data(spec + ": its signature is misaligned");
    if (s->num_nodes() > portable_nodes)
      return corrupt_data(spec + " has " + std::to_string(s->num_nodes()) +
                          " nodes, more than the portable graph's " +
                          std::to_string(portable_nodes));
    BP_RETURN_IF_ERROR(check_partitions(*s->partitions(), s->num_nodes(), nseg, spec));
  }
  return ok_status();
}

// Hashing is cheap next to faulting the mapped pages in, and both scale with
// cores: the segments are shared out (largest first, to the least loaded
// worker) between a few threads. The first failure in segment order wins.
Status ArtifactFile::verify_all() const {
  const uint32_t n = static_cast<uint32_t>(segments_.size());
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  auto bytes = [&](uint32_t i) { return segments_[i].size; };
  std::sort(order.begin(), order.end(),
            [&](uint32_t x, uint32_t y) { return bytes(x) > bytes(y); });
  uint64_t total = 0;
  for (uint32_t i = 0; i < n; ++i) total += bytes(i);
  constexpr uint64_t kPerWorker = 16u << 20;  // below this a thread costs more than it saves
  const size_t workers = static_cast<size_t>(std::clamp<uint64_t>(
      std::min<uint64_t>(total / kPerWorker, std::max(1u, std::thread::hardware_concurrency())), 1,
      4));
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
      // Hashed, the pages go: a blob nobody reads (the portable weights
      // beside a backend's packed ones) is not kept in memory by the check.
      const ArtifactSegment& s = segments_[i];
      const MappedFile& f = s.file == 0 ? *main_ : *data_files_[s.file - 1];
      if (st.ok()) f.release(static_cast<size_t>(d - f.bytes()), sz);
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
  if (index >= segments_.size())
    return corrupt_data(path_ + ": segment " + std::to_string(index) + " does not exist");
  const ArtifactSegment& s = segments_[index];
  const uint8_t* p = segment_address(s);
  if (!verified_[index].load(std::memory_order_acquire)) {
    if (checksum64(p, s.size) != s.checksum) {
      const MappedFile& f = s.file == 0 ? *main_ : *data_files_[s.file - 1];
      return corrupt_data(f.path() + ": checksum mismatch in segment " + std::to_string(index) +
                          " (" + std::to_string(s.size) + " bytes at offset " +
                          std::to_string(static_cast<uint64_t>(p - f.bytes())) +
                          "): the file is corrupt");
    }
    verified_[index].store(true, std::memory_order_release);
  }
  *data = p;
  *size = s.size;
  return ok_status();
}

Result<int> ArtifactFile::find_method(const std::string& name) const {
  if (name.empty()) return 0;
  std::string names;
  for (size_t i = 0; i < methods_.size(); ++i) {
    if (methods_[i].name == name) return static_cast<int>(i);
    names += (names.empty() ? "" : ", ") + methods_[i].name;
  }
  return not_found(path_ + ": no method named '" + name + "' (methods: " + names + ")");
}

namespace {

// The pieces of one method's graph, decoded from the file with every index
// and size checked; `where` names the file and method in errors.
struct GraphReader {
  const fb::Graph& fg;
  const std::string& where;
  int num_values = 0;

  bool read_ids(const flatbuffers::Vector<int32_t>* ids, bool allow_absent,
                std::vector<int>* out) const {
    if (ids == nullptr) return true;
    for (int32_t v : *ids) {
      if (!((allow_absent && v == -1) || (v >= 0 && v < num_values))) return false;
      out->push_back(v);
    }
    return true;
  }

  Result<ir::Attribute> read_attribute(const fb::Attribute& fa, const std::string& node) const {
    ir::Attribute a;
    a.name = fa.name() ? fa.name()->str() : "";
    if (a.name.empty() || !known_attr_type(fa.type()))
      return corrupt_data(where + ": node '" + node +
                          "' has an attribute without a name or of an unknown type");
    a.type = static_cast<ir::AttrType>(fa.type());
    if (!elements_aligned(fa.ints()) || !elements_aligned(fa.floats()) ||
        (fa.t() != nullptr && !elements_aligned(fa.t()->shape())))
      return corrupt_data(where + ": node '" + node + "' attribute '" + a.name + "' is misaligned");
    a.i = fa.i();
    a.f = fa.f();
    a.s = fa.s() ? fa.s()->str() : "";
    if (fa.ints()) a.ints.assign(fa.ints()->begin(), fa.ints()->end());
    if (fa.floats()) a.floats.assign(fa.floats()->begin(), fa.floats()->end());
    if (fa.strings())
      for (const auto* str : *fa.strings()) a.strings.push_back(str->str());
    if (fa.t() != nullptr) {
      const fb::AttrTensor* t = fa.t();
      Shape shape;
      if (t->shape()) shape.assign(t->shape()->begin(), t->shape()->end());
      DType dt = static_cast<DType>(t->dtype());
      const int64_t need = checked_bytes(shape, dt);
      if (dtype_size(dt) == 0 || need < 0 || t->data() == nullptr ||
          t->data()->size() != static_cast<uint64_t>(need))
        return corrupt_data(where + ": node '" + node + "' attribute '" + a.name +
                            "' has a bad tensor");
      a.t = Tensor::copy_of(dt, shape, t->data()->data());
    }
    return a;
  }

  Status read_nodes(ir::Graph* g) const {
    if (fg.nodes() == nullptr) return ok_status();
    for (const fb::Node* fn : *fg.nodes()) {
      ir::Node n;
      n.name = fn->name() ? fn->name()->str() : "";
      n.op_type = fn->op_type() ? fn->op_type()->str() : "";
      n.domain = fn->domain() ? fn->domain()->str() : "";
      if (!read_ids(fn->inputs(), true, &n.inputs) || !read_ids(fn->outputs(), true, &n.outputs))
        return corrupt_data(where + ": node '" + n.name +
                            "' refers to a value that does not exist");
      if (fn->attributes())
        for (const fb::Attribute* fa : *fn->attributes()) {
          BP_ASSIGN_OR_RETURN(ir::Attribute a, read_attribute(*fa, n.name));
          n.attributes.push_back(std::move(a));
        }
      g->nodes.push_back(std::move(n));
    }
    return ok_status();
  }
};

}  // namespace

// Values, with constants as views into the mapping (each view keeps the file alive).
Status ArtifactFile::read_values(const fb::Graph& fg, const std::string& where,
                                 const std::map<std::string, uint32_t>& segment_of_key,
                                 bool portable, ir::Graph* g) const {
  std::shared_ptr<const ArtifactFile> self = shared_from_this();
  const int nv = fg.values() ? static_cast<int>(fg.values()->size()) : 0;
  for (int i = 0; i < nv; ++i) {
    const fb::Value* fv = fg.values()->Get(static_cast<flatbuffers::uoffset_t>(i));
    ir::Value v;
    v.name = fv->name() ? fv->name()->str() : "";
    if (v.name.empty() || g->find_value(v.name) >= 0)
      return corrupt_data(where + ": value " + std::to_string(i) +
                          " has an empty or repeated name");
    std::string key = fv->constant_key() ? fv->constant_key()->str() : "";
    v.dtype = static_cast<DType>(fv->dtype());
    // A portable graph keeps what the model declares: values inference has
    // not typed yet may lack a dtype or dims (never inputs or constants).
    const bool open = portable && key.empty();
    if (dtype_size(v.dtype) == 0 && !(open && v.dtype == DType::kUndefined))
      return corrupt_data(where + ": value '" + v.name + "' has an unknown dtype");
    if (!elements_aligned(fv->shape()))
      return corrupt_data(where + ": value '" + v.name + "' is misaligned");
    if (fv->shape()) v.shape.assign(fv->shape()->begin(), fv->shape()->end());
    v.has_shape = !open || fv->has_shape();
    if (open ? !plausible_dims(v.shape) || (!v.has_shape && !v.shape.empty())
             : checked_bytes(v.shape, v.dtype) < 0 || !fv->has_shape())
      return corrupt_data(where + ": value '" + v.name + "' has a bad shape");
    v.dim_params.assign(v.shape.size(), "");
    if (portable && fv->dim_params() != nullptr) {
      if (fv->dim_params()->size() != v.shape.size())
        return corrupt_data(where + ": value '" + v.name + "' has " +
                            std::to_string(fv->dim_params()->size()) + " dim names for " +
                            std::to_string(v.shape.size()) + " dims");
      for (size_t d = 0; d < v.shape.size(); ++d) v.dim_params[d] = fv->dim_params()->Get(d)->str();
    }
    int id = g->add_value(v);
    if (key.empty()) continue;
    auto it = segment_of_key.find(key);
    if (it == segment_of_key.end())
      return corrupt_data(where + ": constant '" + v.name + "' names missing data '" + key + "'");
    const ArtifactSegment& seg = segments_[it->second];
    const size_t expect = static_cast<size_t>(checked_bytes(v.shape, v.dtype));
    if (seg.size != expect)
      return corrupt_data(where + ": constant '" + v.name + "' has " + std::to_string(seg.size) +
                          " bytes, its shape needs " + std::to_string(expect));
    void* p = const_cast<uint8_t*>(segment_address(seg));
    g->values[id].constant_key = key;
    g->constants[key] =
        Tensor::view(v.dtype, v.shape, p, std::const_pointer_cast<ArtifactFile>(self));
  }
  return ok_status();
}

// One graph of a method: the specialised one of format 1.0 (every shape
// checked against inference) or the portable one of 1.1.
Result<ir::Graph> ArtifactFile::read_graph(const fb::Graph& fg, const std::string& method,
                                           bool portable) const {
  const std::string where =
      path_ + ": method '" + method + "'" + (portable ? " (portable graph)" : "");
  ir::Graph g;
  g.name = fg.name() ? fg.name()->str() : method;
  g.source = path_;
  if (fg.opsets())
    for (const fb::Opset* o : *fg.opsets())
      g.opsets[o->domain() ? o->domain()->str() : ""] = o->version();
  std::map<std::string, uint32_t> segment_of_key;
  for (const ArtifactNamedData& d : named_data_) segment_of_key[d.key] = d.segment;
  BP_RETURN_IF_ERROR(read_values(fg, where, segment_of_key, portable, &g));
  GraphReader reader{fg, where, static_cast<int>(g.values.size())};
  BP_RETURN_IF_ERROR(reader.read_nodes(&g));
  if (!reader.read_ids(fg.inputs(), false, &g.inputs) ||
      !reader.read_ids(fg.outputs(), false, &g.outputs))
    return corrupt_data(where + ": graph inputs/outputs refer to values that do not exist");
  if (portable) {
    BP_RETURN_IF_ERROR(check_portable_graph(g, where));
  } else {
    BP_RETURN_IF_ERROR(check_method_graph(g, where, segment_of_key));
  }
  return g;
}

Result<LoadedMethod> ArtifactFile::load_method(int m) const {
  const fb::Method* fm = root_->methods()->Get(static_cast<flatbuffers::uoffset_t>(m));
  const StoredMethod& stored = methods_[static_cast<size_t>(m)];
  LoadedMethod out;
  out.specializations = stored.specializations;
  if (stored.has_portable) {
    BP_ASSIGN_OR_RETURN(out.portable, read_graph(*fm->portable(), stored.name, true));
    if (const fb::ModelMetadata* fmd = fm->metadata()) {
      auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
      auto md = std::make_shared<ModelMetadata>();
      md->producer_name = str(fmd->producer_name());
      md->producer_version = str(fmd->producer_version());
      md->domain = str(fmd->domain());
      md->description = str(fmd->description());
      md->version = fmd->version();
      md->graph_name = str(fmd->graph_name());
      md->graph_description = str(fmd->graph_description());
      if (fmd->custom())
        for (const fb::MetadataEntry* e : *fmd->custom())
          if (e->key() != nullptr) md->custom[e->key()->str()] = str(e->value());
      out.portable.metadata = std::move(md);
    }
  } else {
    // Format 1.0: the one graph, specialised for the shapes of its inputs.
    BP_ASSIGN_OR_RETURN(out.portable, read_graph(*fm->graph(), stored.name, false));
    for (int v : out.portable.inputs)
      out.specializations.front().signature.push_back(out.portable.values[v].shape);
  }
  BP_RETURN_IF_ERROR(check_signatures(out.portable, path_ + ": method '" + stored.name + "'",
                                      &out.specializations));
  return out;
}

// Every signature gives each input a shape the portable graph accepts:
// its rank, its fixed dims, and no more bytes than a tensor can have.
Status ArtifactFile::check_signatures(const ir::Graph& portable, const std::string& where,
                                      std::vector<StoredSpecialization>* specializations) const {
  for (size_t k = 0; k < specializations->size(); ++k) {
    const std::vector<Shape>& signature = (*specializations)[k].signature;
    const std::string spec = where + " specialisation " + std::to_string(k);
    if (signature.size() != portable.inputs.size())
      return corrupt_data(spec + " has shapes for " + std::to_string(signature.size()) +
                          " inputs, the graph has " + std::to_string(portable.inputs.size()));
    for (size_t i = 0; i < signature.size(); ++i) {
      const ir::Value& input = portable.values[portable.inputs[i]];
      const Shape& got = signature[i];
      bool fits = checked_bytes(got, input.dtype) >= 0;
      if (input.has_shape) {
        fits = fits && got.size() == input.shape.size();
        for (size_t d = 0; fits && d < got.size(); ++d)
          fits = input.shape[d] < 0 || input.shape[d] == got[d];
      }
      if (!fits) {
        std::string declared = "[";
        for (size_t d = 0; d < input.shape.size(); ++d)
          declared += (d ? "," : "") + (!input.dim_params[d].empty() ? input.dim_params[d]
                                        : input.shape[d] < 0         ? std::string("?")
                                                             : std::to_string(input.shape[d]));
        return corrupt_data(spec + " gives input '" + input.name + "' the shape " +
                            shape_to_string(got) + ", which its declared shape " +
                            (input.has_shape ? declared + "]" : "(any)") + " does not allow");
      }
    }
  }
  return ok_status();
}

namespace {

// Inputs and execution order: what any stored graph must satisfy.
Status check_inputs_and_order(ir::Graph& g, const std::string& where) {
  // Inputs are written by sessions: never a constant (its bytes are the
  // read-only mapping), never listed twice.
  std::vector<bool> is_input(g.values.size(), false);
  for (int v : g.inputs) {
    if (g.values[v].is_constant() || is_input[v])
      return corrupt_data(where + ": graph input '" + g.values[v].name +
                          "' is a constant or listed twice");
    is_input[v] = true;
  }
  // The stored order must already be topological; topo_sort also checks that
  // every value has at most one producer and nothing is read before defined.
  std::vector<std::string> stored;
  for (const ir::Node& n : g.nodes) stored.push_back(n.name);
  BP_RETURN_IF_ERROR(g.topo_sort(), where);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].name != stored[i])
      return corrupt_data(where + ": nodes are not stored in execution order");
  return ir::verify(g).with_context(where);
}

}  // namespace

// A portable graph's shapes are declarations: each specialisation infers
// them again from its signature (specialize_graph), and inference checks
// the declarations, so only the structure is checked here.
Status ArtifactFile::check_portable_graph(ir::Graph& g, const std::string& where) const {
  BP_RETURN_IF_ERROR(check_inputs_and_order(g, where));
  for (int v : g.inputs)
    if (g.values[v].dtype == DType::kUndefined)
      return corrupt_data(where + ": graph input '" + g.values[v].name + "' has no dtype");
  return ok_status();
}

// Inputs, execution order, verify, and stored shapes against inference.
Status ArtifactFile::check_method_graph(
    ir::Graph& g, const std::string& where,
    const std::map<std::string, uint32_t>& segment_of_key) const {
  BP_RETURN_IF_ERROR(check_inputs_and_order(g, where));
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
        inconsistent =
            corrupt_data(where + ": value '" + g.values[v].name + "' is stored as " +
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
  return ok_status();
}

ArtifactDataMap::ArtifactDataMap(std::shared_ptr<const ArtifactFile> file)
    : file_(std::move(file)) {
  for (const ArtifactNamedData& d : file_->named_data()) {
    keys_.push_back(d.key);
    segments_.push_back(d.segment);
  }
}

Status ArtifactDataMap::get(const std::string& key, const void** data, size_t* size) const {
  auto it = std::lower_bound(keys_.begin(), keys_.end(), key);
  if (it == keys_.end() || *it != key)
    return not_found(file_->path() + ": no named data '" + key + "'");
  const uint8_t* d = nullptr;
  BP_RETURN_IF_ERROR(file_->segment(segments_[it - keys_.begin()], &d, size));
  *data = d;
  return ok_status();
}

bool looks_like_artifact(const std::string& path) {
  // A .bpk is read as an artifact even if its identifier is damaged, so the
  // error is the artifact reader's ("not a Backplane artifact"), not the
  // ONNX parser's.
  if (fs::path(path).extension() == ".bpk") return true;
  std::ifstream in(path, std::ios::binary);
  char head[12] = {};
  if (!in.read(head, sizeof head)) return false;
  return std::string(head + 8, 4) == fb::ArtifactIdentifier();
}

}  // namespace backplane
