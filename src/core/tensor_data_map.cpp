#include "core/tensor_data_map.hpp"

#include <algorithm>

namespace backplane {

TensorDataMap::TensorDataMap(const std::unordered_map<std::string, Tensor>* tensors)
    : tensors_(tensors) {
  for (const auto& kv : *tensors) keys_.push_back(kv.first);
  std::sort(keys_.begin(), keys_.end());
}

Status TensorDataMap::get(const std::string& key, const void** data, size_t* size) const {
  auto it = tensors_->find(key);
  if (it == tensors_->end()) return not_found("no weight named '" + key + "'");
  *data = it->second.data();
  *size = it->second.size_bytes();
  return ok_status();
}

}  // namespace backplane
