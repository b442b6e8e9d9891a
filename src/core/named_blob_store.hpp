// named_blob_store.hpp — NamedBlobStore (ExecuTorch blob-storage RFC): the named,
// de-duplicated, aligned blobs an ahead-of-time compile writes.
//
// add(key, bytes, alignment, external file): the same key with different bytes
// is an error; identical bytes under two keys are stored once. Every method and
// backend of one compile shares one store, so shared weights are stored once.
// Backends reach it only through the host table's blob_store_add.
//
// Thread-safety: none; one compile fills it from one thread.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace backplane {

class NamedBlobStore {
 public:
  static constexpr size_t kMinAlignment = 64;
  static constexpr size_t kPageAlignment = 4096;
  static constexpr size_t kLargeBlob = 64 * 1024;  // page-aligned from this size on

  struct Blob {
    std::vector<uint8_t> owned;         // copied bytes, or
    const uint8_t* borrowed = nullptr;  // bytes someone keeps alive until write
    size_t size = 0;
    size_t alignment = kMinAlignment;
    std::string external_file;  // "" = the artifact itself
    uint64_t hash = 0;
    const uint8_t* data() const { return borrowed != nullptr ? borrowed : owned.data(); }
  };

  // Copies `data`. alignment 0 = default; must be a power of two.
  Status add(const std::string& key, const void* data, size_t size, size_t alignment,
             const std::string& external_file);
  // Like add, without copying: `data` must outlive the store's use.
  Status add_borrowed(const std::string& key, const void* data, size_t size, size_t alignment,
                      const std::string& external_file);

  // Moves every blob into `file` (e.g. all weights into one .bpd), or back
  // into the artifact with "".
  void place_all(const std::string& file);

  const std::map<std::string, size_t>& keys() const { return keys_; }  // key -> blob index
  const std::vector<Blob>& blobs() const { return blobs_; }
  // Sum of the sizes of every add, before de-duplication.
  size_t requested_bytes() const { return requested_bytes_; }
  size_t stored_bytes() const;

  bp_blob_store_t* as_abi() { return reinterpret_cast<bp_blob_store_t*>(this); }
  static NamedBlobStore* from_abi(bp_blob_store_t* s) {
    return reinterpret_cast<NamedBlobStore*>(s);
  }

 private:
  Status insert(const std::string& key, const void* data, size_t size, size_t alignment,
                const std::string& external_file, bool copy);
  std::map<std::string, size_t> keys_;
  std::vector<Blob> blobs_;
  std::unordered_multimap<uint64_t, size_t> by_hash_;
  size_t requested_bytes_ = 0;
};

}  // namespace backplane
