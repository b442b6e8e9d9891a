#include "core/named_blob_store.hpp"

#include "core/checksum.hpp"

#include <algorithm>
#include <cstring>

namespace backplane {

Status NamedBlobStore::add(const std::string& key, const void* data, size_t size, size_t alignment,
                           const std::string& external_file) {
  return insert(key, data, size, alignment, external_file, true);
}

Status NamedBlobStore::add_borrowed(const std::string& key, const void* data, size_t size,
                                    size_t alignment, const std::string& external_file) {
  return insert(key, data, size, alignment, external_file, false);
}

Status NamedBlobStore::insert(const std::string& key, const void* data, size_t size,
                              size_t alignment, const std::string& external_file, bool copy) {
  if (key.empty()) return invalid_argument("blob key is empty");
  if (size > 0 && data == nullptr) return invalid_argument("blob '" + key + "' has no data");
  if (alignment == 0) alignment = kMinAlignment;
  if ((alignment & (alignment - 1)) != 0)
    return invalid_argument("blob '" + key + "': alignment " + std::to_string(alignment) +
                            " is not a power of two");
  alignment = std::max(alignment, kMinAlignment);
  if (size >= kLargeBlob) alignment = std::max(alignment, kPageAlignment);

  const uint64_t hash = checksum64(data, size);
  auto same_bytes = [&](const Blob& b) {
    return b.size == size && b.hash == hash &&
           (size == 0 || std::memcmp(b.data(), data, size) == 0);
  };
  auto existing = keys_.find(key);
  if (existing != keys_.end()) {
    Blob& b = blobs_[existing->second];
    if (!same_bytes(b))
      return invalid_argument("blob key '" + key + "' was added twice with different bytes");
    b.alignment = std::max(b.alignment, alignment);
    return ok_status();
  }
  requested_bytes_ += size;
  auto range = by_hash_.equal_range(hash);
  for (auto it = range.first; it != range.second; ++it) {
    Blob& b = blobs_[it->second];
    if (same_bytes(b)) {
      b.alignment = std::max(b.alignment, alignment);
      keys_[key] = it->second;
      return ok_status();
    }
  }
  Blob b;
  if (copy)
    b.owned.assign(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + size);
  else b.borrowed = static_cast<const uint8_t*>(data);
  b.size = size;
  b.alignment = alignment;
  b.external_file = external_file;
  b.hash = hash;
  blobs_.push_back(std::move(b));
  by_hash_.emplace(hash, blobs_.size() - 1);
  keys_[key] = blobs_.size() - 1;
  return ok_status();
}

void NamedBlobStore::place_all(const std::string& file) {
  for (Blob& b : blobs_) b.external_file = file;
}

size_t NamedBlobStore::stored_bytes() const {
  size_t n = 0;
  for (const Blob& b : blobs_) n += b.size;
  return n;
}

}  // namespace backplane
