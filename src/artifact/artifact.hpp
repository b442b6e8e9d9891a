// artifact.hpp — writing and reading compiled artifacts (.bpk) and their
// external data files (.bpd). The layout is in artifact.fbs and
// docs/artifact-format.md.
#pragma once

#include "core/mapped_file.hpp"
#include "core/named_blob_store.hpp"
#include "core/named_data_map.hpp"
#include "ir/graph.hpp"

#include <backplane/status.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace backplane {

namespace fb {
struct Artifact;
struct Graph;
struct Method;
}  // namespace fb

constexpr uint32_t kArtifactFormatMajor = 1;
// 1.1: methods store their portable graph and several specialisations.
constexpr uint32_t kArtifactFormatMinor = 2;
constexpr size_t kCompileIdBytes = 16;

// Where the data area of a file whose FlatBuffer is `fb_size` bytes starts:
// after [u32 size][FlatBuffer][u64 checksum], rounded up to a page.
uint64_t artifact_data_start(uint64_t fb_size);

// ---------------------------------------------------------------- writing

struct ArtifactPartition {
  std::string backend;
  uint32_t api_major = 0, api_minor = 0;
  std::vector<int> nodes;
  bool imperative = false;
  bool polymorphic = false;  // compiled shape-polymorphic at load (no payload)
  bool has_payload = false;
  std::vector<uint8_t> payload;
};

// One signature of a method: the graph specialised for it and its partitions.
struct ArtifactSpecialization {
  std::vector<Shape> signature;      // one per input of the portable graph
  const ir::Graph* graph = nullptr;  // specialised; constants keyed as in the blob store
  uint64_t digest = 0;               // specialization_digest(*graph)
  std::vector<ArtifactPartition> partitions;
};

struct ArtifactMethod {
  std::string name;
  const ir::Graph* portable = nullptr;  // constants keyed as in the blob store
  std::vector<std::string> preference;
  // At least one. The first is also written the way format 1.0 stores a
  // method (Method.graph, Method.partitions), which a 1.0 reader loads.
  std::vector<ArtifactSpecialization> specializations;
};

struct ArtifactSizes {
  size_t file_bytes = 0, external_bytes = 0, payload_bytes = 0;
};

// Writes `path` (and, for blobs placed in an external file, that file, next to
// `path`). The compile id ties the files together.
Result<ArtifactSizes> write_artifact(const std::string& path,
                                     const std::vector<ArtifactMethod>& methods,
                                     const NamedBlobStore& store);

// ---------------------------------------------------------------- reading
//
// What a file says, as plain C++ (no FlatBuffers type leaves artifact/):
// filled and checked by ArtifactFile::open, immutable afterwards.

// One stored byte range: in the artifact (file 0) or in data file `file`.
struct ArtifactSegment {
  uint32_t file = 0;    // 0 = the .bpk, k = data_files()[k - 1]
  uint64_t offset = 0;  // from the start of that file's data area
  uint64_t size = 0;
  uint64_t alignment = 0;
  uint64_t checksum = 0;  // XXH3-64 of the bytes
};

struct ArtifactNamedData {
  std::string key;
  uint32_t segment = 0;  // index into segments()
};

struct ArtifactDataFile {
  std::string name;  // file name next to the .bpk
  uint64_t data_bytes = 0;
};

// One partition as stored: the backend that compiled it and its payload.
struct StoredPartition {
  std::string backend;
  uint32_t api_major = 0, api_minor = 0;  // backend API it was compiled for
  std::vector<int> nodes;                 // node ids of the method's graph
  bool imperative = false;
  int32_t payload_segment = -1;  // -1 = no payload
  // Compiled shape-polymorphic at load, as for the ONNX model (format 1.1).
  bool polymorphic = false;
};

// One signature a method was compiled for.
struct StoredSpecialization {
  // The shape of every input of the method's portable graph. (Format 1.0:
  // filled by load_method, from the one stored graph.)
  std::vector<Shape> signature;
  size_t num_nodes = 0;  // nodes of the graph specialised for it
  // specialization_digest of that graph (pipeline/front_end.hpp); format
  // 1.0 records none (its graph is stored as it was specialised).
  uint64_t digest = 0;
  std::vector<StoredPartition> partitions;  // node ids into that graph
};

struct StoredMethod {
  std::string name;
  size_t num_nodes = 0;                 // of the portable graph
  std::vector<std::string> preference;  // backend preference at compile time
  // Format 1.1: a portable graph and any number of specialisations. Format
  // 1.0: one graph, already specialised, and its one specialisation.
  bool has_portable = false;
  std::vector<StoredSpecialization> specializations;  // at least one
};

// A method as loading uses it (ArtifactFile::load_method).
struct LoadedMethod {
  // The portable graph (format 1.0: the one stored graph, whose inputs have
  // fixed shapes). Constants are views into the mapping (each holds the file
  // alive).
  ir::Graph portable;
  // Checked against `portable`: one shape per input, of its rank, with its
  // fixed dims.
  std::vector<StoredSpecialization> specializations;
};

// A mapped .bpk (and its data files).
//
// Thread-safety: immutable after open() except for the per-segment
// "checksum verified" flags, which are atomic; every method may be called
// from any thread.
class ArtifactFile : public std::enable_shared_from_this<ArtifactFile> {
 public:
  // Maps `path` and its data files (found next to it, unless given in
  // `external_data`), checks identifiers, versions, bounds and, unless
  // `lazy_checksums`, every segment's checksum. Never trusts the file.
  static Result<std::shared_ptr<ArtifactFile>> open(const std::string& path,
                                                    const std::vector<std::string>& external_data,
                                                    bool lazy_checksums);

  const std::string& path() const { return path_; }
  size_t file_size() const { return main_->size(); }
  uint32_t format_major() const { return format_major_; }
  uint32_t format_minor() const { return format_minor_; }
  const std::string& producer() const { return producer_; }
  const std::string& compile_id_hex() const { return compile_id_hex_; }
  const std::vector<ArtifactDataFile>& data_files() const { return data_file_info_; }
  const std::vector<ArtifactSegment>& segments() const { return segments_; }
  const std::vector<ArtifactNamedData>& named_data() const { return named_data_; }  // sorted by key
  const std::vector<StoredMethod>& methods() const { return methods_; }

  // Bytes of segment `index` (checksum verified, on first use if lazy); they
  // live as long as this file.
  Status segment(uint32_t index, const uint8_t** data, size_t* size) const;
  // Verifies every segment's checksum now (what open does unless lazy).
  Status verify_all() const;
  // Index of method `name` ("" = the first).
  Result<int> find_method(const std::string& name) const;
  // Method `m`: its portable graph and specialisations, every index, size
  // and shape checked.
  Result<LoadedMethod> load_method(int m) const;

 private:
  ArtifactFile() = default;
  Status open_data_files(const std::vector<std::string>& external_data);
  Status check_given_data_files(const std::vector<std::string>& external_data) const;
  Status check_structure() const;
  void read_tables();
  const uint8_t* segment_address(const ArtifactSegment& s) const;
  Status check_specializations(const fb::Method& m) const;
  Result<ir::Graph> read_graph(const fb::Graph& fg, const std::string& name, bool portable) const;
  Status read_values(const fb::Graph& fg, const std::string& where,
                     const std::map<std::string, uint32_t>& segment_of_key, bool portable,
                     ir::Graph* g) const;
  Status check_method_graph(ir::Graph& g, const std::string& where,
                            const std::map<std::string, uint32_t>& segment_of_key) const;
  Status check_portable_graph(ir::Graph& g, const std::string& where) const;
  Status check_signatures(const ir::Graph& portable, const std::string& where,
                          std::vector<StoredSpecialization>* specializations) const;

  std::string path_;
  std::shared_ptr<MappedFile> main_;
  std::vector<std::shared_ptr<MappedFile>> data_files_;
  const fb::Artifact* root_ = nullptr;  // into main_; never handed out
  uint32_t format_major_ = 0, format_minor_ = 0;
  std::string producer_, compile_id_hex_;
  std::vector<ArtifactDataFile> data_file_info_;
  std::vector<ArtifactSegment> segments_;
  std::vector<ArtifactNamedData> named_data_;
  std::vector<StoredMethod> methods_;
  std::unique_ptr<std::atomic<bool>[]> verified_;
};

// True if `path` starts like a .bpk (size prefix, then "BPK1" at byte 8), or
// is named *.bpk (so a damaged one is reported by the artifact reader).
bool looks_like_artifact(const std::string& path);

// A NamedDataMap over an artifact's named data (keys are binary-searched;
// bytes point into the mapping; checksums verified on first use if lazy).
class ArtifactDataMap : public NamedDataMap {
 public:
  explicit ArtifactDataMap(std::shared_ptr<const ArtifactFile> file);
  Status get(const std::string& key, const void** data, size_t* size) const override;
  size_t num_keys() const override { return keys_.size(); }
  const std::string* key_at(size_t index) const override {
    return index < keys_.size() ? &keys_[index] : nullptr;
  }

 private:
  std::shared_ptr<const ArtifactFile> file_;
  std::vector<std::string> keys_;
  std::vector<uint32_t> segments_;
};

}  // namespace backplane
