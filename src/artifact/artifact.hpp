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
}  // namespace fb

constexpr uint32_t kArtifactFormatMajor = 1;
constexpr uint32_t kArtifactFormatMinor = 0;
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
  bool has_payload = false;
  std::vector<uint8_t> payload;
};

struct ArtifactMethod {
  std::string name;
  const ir::Graph* graph = nullptr;  // constants keyed as in the blob store
  std::vector<std::string> preference;
  std::vector<ArtifactPartition> partitions;
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
};

struct StoredMethod {
  std::string name;
  size_t num_nodes = 0;
  std::vector<std::string> preference;  // backend preference at compile time
  std::vector<StoredPartition> partitions;
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
  // The portable graph of method `m`; constants are views into the mapping
  // (each holds the file alive).
  Result<ir::Graph> method_graph(int m) const;

 private:
  ArtifactFile() = default;
  Status open_data_files(const std::vector<std::string>& external_data);
  Status check_given_data_files(const std::vector<std::string>& external_data) const;
  Status check_structure() const;
  void read_tables();
  const uint8_t* segment_address(const ArtifactSegment& s) const;
  Status read_values(const fb::Graph& fg, const std::string& where,
                     const std::map<std::string, uint32_t>& segment_of_key, ir::Graph* g) const;
  Status check_method_graph(ir::Graph& g, const std::string& where,
                            const std::map<std::string, uint32_t>& segment_of_key) const;

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
