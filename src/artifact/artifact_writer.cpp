// Writing .bpk/.bpd files (layout: artifact.fbs, docs/artifact-format.md).
#include "artifact/artifact.hpp"

#include "core/atomic_file.hpp"
#include "core/checksum.hpp"

#include "artifact_generated.h"
#include "data_file_generated.h"

#include <backplane/runtime.hpp>
#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
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
  return (header + NamedBlobStore::kPageAlignment - 1) / NamedBlobStore::kPageAlignment *
         NamedBlobStore::kPageAlignment;
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
    // Symbolic dim names only where the model gave some (portable graphs).
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>> params;
    if (std::any_of(v.dim_params.begin(), v.dim_params.end(),
                    [](const std::string& p) { return !p.empty(); }))
      params = b.CreateVectorOfStrings(v.dim_params);
    values.push_back(
        fb::CreateValue(b, name, static_cast<int32_t>(v.dtype), shape, key, v.has_shape, params));
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
      attrs.push_back(fb::CreateAttribute(
          b, b.CreateString(a.name), static_cast<int32_t>(a.type), a.i, a.f, b.CreateString(a.s),
          b.CreateVector(a.ints), b.CreateVector(a.floats), b.CreateVectorOfStrings(a.strings), t));
    }
    nodes.push_back(fb::CreateNode(b, b.CreateString(n.name), b.CreateString(n.op_type),
                                   b.CreateString(n.domain), b.CreateVector(n.inputs),
                                   b.CreateVector(n.outputs), b.CreateVector(attrs)));
  }
  std::vector<flatbuffers::Offset<fb::Opset>> opsets;
  for (const auto& [domain, version] : g.opsets)
    opsets.push_back(fb::CreateOpset(b, b.CreateString(domain), version));
  return fb::CreateGraph(b, b.CreateString(g.name), b.CreateVector(values), b.CreateVector(nodes),
                         b.CreateVector(g.inputs), b.CreateVector(g.outputs),
                         b.CreateVector(opsets));
}

// A copy of `g` without the values nothing refers to (what is left of
// nodes that folding or dead-code removal dropped), renumbered: a
// specialised graph written for format 1.0 readers, which require every
// value to have a known dtype and shape.
ir::Graph live_values_only(const ir::Graph& g) {
  std::vector<bool> used(g.values.size(), false);
  for (int v : g.inputs) used[v] = true;
  for (int v : g.outputs) used[v] = true;
  for (const ir::Node& n : g.nodes) {
    for (int v : n.inputs)
      if (v >= 0) used[v] = true;
    for (int v : n.outputs)
      if (v >= 0) used[v] = true;
  }
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].is_constant()) used[v] = true;
  std::vector<int> renumber(g.values.size(), -1);
  ir::Graph out;
  out.name = g.name;
  out.opsets = g.opsets;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (used[v]) renumber[v] = out.add_value(g.values[v]);
  auto map = [&](std::vector<int> ids) {
    for (int& v : ids)
      if (v >= 0) v = renumber[v];
    return ids;
  };
  for (ir::Node n : g.nodes) {
    n.inputs = map(n.inputs);
    n.outputs = map(n.outputs);
    out.nodes.push_back(std::move(n));
  }
  out.inputs = map(g.inputs);
  out.outputs = map(g.outputs);
  return out;  // (constants are not written with the graph: only their keys)
}

flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Partition>>> write_partitions(
    flatbuffers::FlatBufferBuilder& b, const std::vector<ArtifactPartition>& partitions,
    const std::vector<int32_t>& payload_segment) {
  std::vector<flatbuffers::Offset<fb::Partition>> parts;
  for (size_t i = 0; i < partitions.size(); ++i) {
    const ArtifactPartition& p = partitions[i];
    parts.push_back(fb::CreatePartition(b, b.CreateString(p.backend), p.api_major, p.api_minor,
                                        b.CreateVector(p.nodes), p.imperative, payload_segment[i],
                                        p.polymorphic));
  }
  return b.CreateVector(parts);
}

flatbuffers::Offset<fb::Specialization> write_specialization(
    flatbuffers::FlatBufferBuilder& b, const ArtifactSpecialization& spec,
    flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<fb::Partition>>> parts) {
  std::vector<flatbuffers::Offset<fb::InputShape>> signature;
  for (const Shape& shape : spec.signature)
    signature.push_back(fb::CreateInputShape(b, b.CreateVector(shape)));
  auto sig = b.CreateVector(signature);
  return fb::CreateSpecialization(b, sig, static_cast<uint32_t>(spec.graph->nodes.size()),
                                  spec.digest, parts);
}

struct PlannedSegment {
  uint32_t file = 0;
  uint64_t offset = 0;  // relative to the file's data area
  const uint8_t* data = nullptr;
  size_t size = 0;
  uint32_t alignment = 64;
  uint64_t checksum = 0;
};

// Writes [u32 size][flatbuffer][u64 checksum][pad][data area] for `path` into
// an AtomicFile, not yet committed: the caller commits every file of the
// artifact only once all of them are written, so a failure leaves the previous
// artifact whole (core/atomic_file.hpp).
Result<AtomicFile> write_file(const std::string& path, const flatbuffers::FlatBufferBuilder& b,
                              const std::vector<PlannedSegment>& segments, uint32_t file) {
  // FinishSizePrefixed already wrote the u32 size in front of the buffer.
  const uint8_t* buf = b.GetBufferPointer();
  const size_t total = b.GetSize();
  const uint64_t fb_size = total - 4;
  const uint64_t start = artifact_data_start(fb_size);
  BP_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::create(path));
  BP_RETURN_IF_ERROR(out.write(buf, total));
  uint64_t sum = checksum64(buf + 4, fb_size);
  BP_RETURN_IF_ERROR(out.write(&sum, 8));
  std::vector<const PlannedSegment*> mine;
  for (const PlannedSegment& s : segments)
    if (s.file == file) mine.push_back(&s);
  std::sort(mine.begin(), mine.end(), [](auto* a, auto* c) { return a->offset < c->offset; });
  for (const PlannedSegment* s : mine) {
    // An empty segment shares its offset with the next one, which may sort
    // before it: there is nothing to write, and no gap to fill.
    if (s->size == 0) continue;
    BP_RETURN_IF_ERROR(out.write_zeros(start + s->offset - out.bytes_written()));
    BP_RETURN_IF_ERROR(out.write(s->data, s->size));
  }
  BP_RETURN_IF_ERROR(out.write_zeros(align_to(out.bytes_written(), 64) - out.bytes_written()));
  return out;
}

// Where every payload and blob goes: segments at offsets within the data
// area of the artifact (file 0) or of an external data file (k = files[k-1]).
struct Layout {
  std::vector<std::string> files;
  std::vector<PlannedSegment> segments;
  std::vector<uint64_t> file_top;  // per file: end of the last segment
  // per method, specialisation and partition (-1 = none)
  std::vector<std::vector<std::vector<int32_t>>> payload_segment;
  std::vector<uint32_t> blob_segment;  // per blob of the store
  size_t payload_bytes = 0;

  int32_t add(uint32_t file, const uint8_t* data, size_t size, uint32_t alignment) {
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
  }
};

// Payloads first, then blobs.
Result<Layout> plan_layout(const std::vector<ArtifactMethod>& methods,
                           const NamedBlobStore& store) {
  Layout l;
  // External data files, by the name the .bpk records (relative to it).
  for (const NamedBlobStore::Blob& blob : store.blobs())
    if (!blob.external_file.empty() &&
        std::find(l.files.begin(), l.files.end(), blob.external_file) == l.files.end())
      l.files.push_back(blob.external_file);
  for (const std::string& f : l.files)
    if (f.find('/') != std::string::npos || f == "." || f == "..")
      return invalid_argument("external data file name '" + f +
                              "' must be a plain file name next to the artifact");
  l.file_top.assign(l.files.size() + 1, 0);
  l.payload_segment.resize(methods.size());
  for (size_t m = 0; m < methods.size(); ++m)
    for (const ArtifactSpecialization& spec : methods[m].specializations) {
      std::vector<int32_t>& segments = l.payload_segment[m].emplace_back();
      for (const ArtifactPartition& p : spec.partitions) {
        segments.push_back(p.has_payload ? l.add(0, p.payload.data(), p.payload.size(), 64) : -1);
        l.payload_bytes += p.has_payload ? p.payload.size() : 0;
      }
    }
  for (const NamedBlobStore::Blob& blob : store.blobs()) {
    uint32_t file = 0;
    if (!blob.external_file.empty())
      file = static_cast<uint32_t>(std::find(l.files.begin(), l.files.end(), blob.external_file) -
                                   l.files.begin()) +
             1;
    l.blob_segment.push_back(static_cast<uint32_t>(
        l.add(file, blob.data(), blob.size, static_cast<uint32_t>(blob.alignment))));
  }
  return l;
}

// The artifact's metadata (the size-prefixed FlatBuffer) into `b`.
void build_metadata(flatbuffers::FlatBufferBuilder& b, const std::vector<ArtifactMethod>& methods,
                    const NamedBlobStore& store, const Layout& l,
                    const std::vector<uint8_t>& compile_id) {
  std::vector<flatbuffers::Offset<fb::Method>> fb_methods;
  for (size_t m = 0; m < methods.size(); ++m) {
    const ArtifactMethod& method = methods[m];
    const ArtifactSpecialization& first = method.specializations.front();
    // What a format 1.0 reader loads: the first specialisation, whose
    // partitions are one table with specializations[0]'s (one truth for both
    // readers).
    auto graph = write_graph(b, live_values_only(*first.graph));
    auto parts = write_partitions(b, first.partitions, l.payload_segment[m][0]);
    auto portable = write_graph(b, *method.portable);
    std::vector<flatbuffers::Offset<fb::Specialization>> specs;
    for (size_t k = 0; k < method.specializations.size(); ++k)
      specs.push_back(
          write_specialization(b, method.specializations[k],
                               k == 0 ? parts
                                      : write_partitions(b, method.specializations[k].partitions,
                                                         l.payload_segment[m][k])));
    flatbuffers::Offset<fb::ModelMetadata> meta = 0;
    if (const ModelMetadata* md = method.portable->metadata.get()) {
      std::vector<flatbuffers::Offset<fb::MetadataEntry>> custom;
      for (const auto& [k, v] : md->custom)
        custom.push_back(fb::CreateMetadataEntry(b, b.CreateString(k), b.CreateString(v)));
      meta = fb::CreateModelMetadata(
          b, b.CreateString(md->producer_name), b.CreateString(md->producer_version),
          b.CreateString(md->domain), b.CreateString(md->description), md->version,
          b.CreateString(md->graph_name), b.CreateString(md->graph_description),
          b.CreateVector(custom));
    }
    fb_methods.push_back(fb::CreateMethod(b, b.CreateString(method.name), graph, parts,
                                          b.CreateVectorOfStrings(method.preference), portable,
                                          b.CreateVector(specs), meta));
  }
  std::vector<flatbuffers::Offset<fb::NamedData>> named;
  for (const auto& [key, blob] : store.keys())  // std::map: sorted by key
    named.push_back(fb::CreateNamedData(b, b.CreateString(key), l.blob_segment[blob]));
  std::vector<fb::Segment> fb_segments;
  for (const PlannedSegment& s : l.segments)
    fb_segments.emplace_back(s.file, s.alignment, s.offset, s.size, s.checksum);
  std::vector<flatbuffers::Offset<fb::DataFile>> fb_files;
  for (size_t f = 0; f < l.files.size(); ++f)
    fb_files.push_back(fb::CreateDataFile(b, b.CreateString(l.files[f]), l.file_top[f + 1]));
  auto root = fb::CreateArtifact(
      b, kArtifactFormatMajor, kArtifactFormatMinor, b.CreateVector(compile_id),
      b.CreateString(std::string("backplane ") + BACKPLANE_VERSION), b.CreateVector(fb_methods),
      b.CreateVector(named), b.CreateVectorOfStructs(fb_segments), b.CreateVector(fb_files));
  fb::FinishSizePrefixedArtifactBuffer(b, root);
}

}  // namespace

Result<ArtifactSizes> write_artifact(const std::string& path,
                                     const std::vector<ArtifactMethod>& methods,
                                     const NamedBlobStore& store) {
  for (const ArtifactMethod& m : methods)
    if (m.portable == nullptr || m.specializations.empty())
      return internal_error("method '" + m.name + "' has no portable graph or no specialisation");
  std::vector<uint8_t> compile_id(kCompileIdBytes);
  std::random_device rd;
  for (uint8_t& x : compile_id) x = static_cast<uint8_t>(rd());
  BP_ASSIGN_OR_RETURN(Layout layout, plan_layout(methods, store));

  ArtifactSizes sizes;
  sizes.payload_bytes = layout.payload_bytes;
  flatbuffers::FlatBufferBuilder b(1 << 16);
  build_metadata(b, methods, store, layout, compile_id);
  BP_ASSIGN_OR_RETURN(AtomicFile main_file, write_file(path, b, layout.segments, 0));
  sizes.file_bytes = main_file.bytes_written();

  const fs::path dir = fs::path(path).parent_path();
  std::vector<AtomicFile> data_files;
  for (size_t f = 0; f < layout.files.size(); ++f) {
    flatbuffers::FlatBufferBuilder hb(256);
    auto header =
        fb::CreateDataFileHeader(hb, kArtifactFormatMajor, kArtifactFormatMinor,
                                 hb.CreateVector(compile_id), hb.CreateString(layout.files[f]));
    fb::FinishSizePrefixedDataFileHeaderBuffer(hb, header);
    BP_ASSIGN_OR_RETURN(AtomicFile data, write_file((dir / layout.files[f]).string(), hb,
                                                    layout.segments, static_cast<uint32_t>(f + 1)));
    sizes.external_bytes += data.bytes_written();
    data_files.push_back(std::move(data));
  }
  // Every file is complete: replace the data files, then the artifact that
  // names them. A process that has the previous ones mapped keeps them.
  for (AtomicFile& data : data_files) BP_RETURN_IF_ERROR(data.commit());
  BP_RETURN_IF_ERROR(main_file.commit());
  return sizes;
}

}  // namespace backplane
