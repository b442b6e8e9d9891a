// named_data_map.hpp — NamedDataMap: read-only weights by key (ExecuTorch's
// NamedDataMap). Backends reach a map only through the host table
// (data_map_get, data_map_num_keys, data_map_key_at); the runtime hands them
// `as_abi()`. Implementations: TensorDataMap (an imported graph's constants,
// core/tensor_data_map.hpp) and ArtifactDataMap (a mapped .bpk's named data,
// artifact/artifact.hpp).
//
// Thread-safety: every method is const and may be called from any thread.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace backplane {

class NamedDataMap {
 public:
  virtual ~NamedDataMap() = default;
  // Pointer and size of `key`'s bytes; they live as long as the map.
  virtual Status get(const std::string& key, const void** data, size_t* size) const = 0;

  // What a reader that says when it is done holds (a backend's buffer until
  // buffer_free): deleting it ends the hold, after which the map may let the
  // bytes leave memory until asked for again.
  struct Hold {
    virtual ~Hold() = default;
  };
  // get() for such a reader; `*hold` is null when there is nothing to end.
  virtual Status hold(const std::string& key, const void** data, size_t* size,
                      std::unique_ptr<Hold>* hold) const {
    hold->reset();
    return get(key, data, size);
  }
  virtual size_t num_keys() const = 0;
  // Key number `index` in a stable order; null when out of range.
  virtual const std::string* key_at(size_t index) const = 0;

  const bp_named_data_map_t* as_abi() const {
    return reinterpret_cast<const bp_named_data_map_t*>(this);
  }
  static const NamedDataMap* from_abi(const bp_named_data_map_t* m) {
    return reinterpret_cast<const NamedDataMap*>(m);
  }
};

}  // namespace backplane
