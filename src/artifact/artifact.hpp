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
#include <memory>
#include <string>
#include <vector>

namespace backplane {

namespace fb {
struct Artifact;
}

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
Result<ArtifactSizes> write_artifact(const std::string& path, const std::vector<ArtifactMethod>& methods,
                                     const NamedBlobStore& store);

// ---------------------------------------------------------------- reading

class ArtifactFile : public std::enable_shared_from_this<ArtifactFile> {
 public:
  // Maps `path` and its data files (found next to it, unless given in
  // `external_data`), checks identifiers, versions, bounds and, unless
  // `lazy_checksums`, every segment's checksum. Never trusts the file.
  static Result<std::shared_ptr<ArtifactFile>> open(const std::string& path,
                                                    const std::vector<std::string>& external_data,
                                                    bool lazy_checksums);

  const fb::Artifact& root() const { return *root_; }
  const std::string& path() const { return path_; }
  size_t file_size() const { return main_->size(); }

  // Bytes of segment `index` (checksum verified, on first use if lazy).
  Status segment(uint32_t index, const uint8_t** data, size_t* size) const;
  // Verifies every segment's checksum now (what open does unless lazy).
  Status verify_all() const;
  // Index of method `name` ("" = the first).
  Result<int> find_method(const std::string& name) const;
  // The portable graph of method `m`; constants are views into the mapping.
  Result<ir::Graph> method_graph(int m) const;

 private:
  ArtifactFile() = default;
  Status check_structure() const;

  std::string path_;
  std::shared_ptr<MappedFile> main_;
  std::vector<std::shared_ptr<MappedFile>> data_files_;
  const fb::Artifact* root_ = nullptr;
  std::unique_ptr<std::atomic<bool>[]> verified_;
};

// A NamedDataMap over an artifact's named data (keys are binary-searched;
// bytes point into the mapping; checksums verified on first use if lazy).
class ArtifactDataMap : public NamedDataMap {
 public:
  explicit ArtifactDataMap(std::shared_ptr<const ArtifactFile> file);
  Status get(const std::string& key, const void** data, size_t* size) const override;
  size_t num_keys() const override { return keys_.size(); }
  const std::string* key_at(size_t index) const override { return index < keys_.size() ? &keys_[index] : nullptr; }

 private:
  std::shared_ptr<const ArtifactFile> file_;
  std::vector<std::string> keys_;
  std::vector<uint32_t> segments_;
};

}  // namespace backplane
