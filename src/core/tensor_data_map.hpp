// tensor_data_map.hpp — a NamedDataMap over tensors held in memory (an
// imported graph's constants).
//
// Thread-safety: immutable after construction.
#pragma once

#include "core/named_data_map.hpp"

#include <backplane/tensor.hpp>

#include <string>
#include <unordered_map>
#include <vector>

namespace backplane {

class TensorDataMap : public NamedDataMap {
 public:
  // `tensors` is borrowed: it must outlive the map and not change while the map lives.
  explicit TensorDataMap(const std::unordered_map<std::string, Tensor>* tensors);
  Status get(const std::string& key, const void** data, size_t* size) const override;
  size_t num_keys() const override { return keys_.size(); }
  const std::string* key_at(size_t index) const override {
    return index < keys_.size() ? &keys_[index] : nullptr;
  }

 private:
  const std::unordered_map<std::string, Tensor>* tensors_;
  std::vector<std::string> keys_;  // sorted, for stable key_at
};

}  // namespace backplane
