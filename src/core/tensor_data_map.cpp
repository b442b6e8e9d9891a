#include "core/tensor_data_map.hpp"

#include <algorithm>

namespace backplane {

namespace {

struct BlockHold : NamedDataMap::Hold {
  explicit BlockHold(std::shared_ptr<ConstantBlock> b) : block(std::move(b)) {}
  ~BlockHold() override { block->release(); }
  std::shared_ptr<ConstantBlock> block;
};

}  // namespace

TensorDataMap::TensorDataMap(const std::unordered_map<std::string, Tensor>* tensors,
                             const Blocks* blocks)
    : tensors_(tensors) {
  for (const auto& kv : *tensors) keys_.push_back(kv.first);
  std::sort(keys_.begin(), keys_.end());
  if (blocks == nullptr) return;
  for (const auto& [key, weak] : *blocks)
    if (std::shared_ptr<ConstantBlock> b = weak.lock()) {
      const auto* begin = static_cast<const unsigned char*>(b->data());
      blocks_.push_back({begin, begin + b->size(), weak});
    }
  std::sort(blocks_.begin(), blocks_.end(),
            [](const Indexed& a, const Indexed& b) { return a.begin < b.begin; });
  blocks_.erase(std::unique(blocks_.begin(), blocks_.end(),
                            [](const Indexed& a, const Indexed& b) { return a.begin == b.begin; }),
                blocks_.end());
  std::vector<const Tensor*> all;
  for (const auto& kv : *tensors) all.push_back(&kv.second);
  const std::vector<bool> used = blocks_of(all);
  size_t kept = 0;
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (used[i]) blocks_[kept++] = blocks_[i];
  blocks_.resize(kept);
  pinned_.assign(blocks_.size(), false);
}

TensorDataMap::~TensorDataMap() {
  for (size_t i = 0; i < blocks_.size(); ++i) unpin_block(i);
}

Status TensorDataMap::pin_block(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (pinned_[i]) return ok_status();
  std::shared_ptr<ConstantBlock> b = blocks_[i].block.lock();
  if (b == nullptr) return ok_status();
  BP_RETURN_IF_ERROR(b->pin(), "a weight read in place");
  pinned_[i] = true;
  return ok_status();
}

void TensorDataMap::unpin_block(size_t i) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!pinned_[i]) return;
  pinned_[i] = false;
  if (std::shared_ptr<ConstantBlock> b = blocks_[i].block.lock()) b->unpin();
}

std::shared_ptr<ConstantBlock> TensorDataMap::block_containing(const void* data,
                                                               size_t size) const {
  const auto* p = static_cast<const unsigned char*>(data);
  auto it = std::upper_bound(blocks_.begin(), blocks_.end(), p,
                             [](const unsigned char* q, const Indexed& b) { return q < b.begin; });
  if (p == nullptr || it == blocks_.begin()) return nullptr;
  --it;
  if (p + size > it->end) return nullptr;
  return it->block.lock();
}

Status TensorDataMap::get(const std::string& key, const void** data, size_t* size) const {
  auto it = tensors_->find(key);
  if (it == tensors_->end()) return not_found("no weight named '" + key + "'");
  const Tensor& t = it->second;
  if (std::shared_ptr<ConstantBlock> b = block_containing(t.data(), t.size_bytes()))
    BP_RETURN_IF_ERROR(b->touch(), "weight '" + key + "'");
  *data = t.data();
  *size = t.size_bytes();
  return ok_status();
}

Status TensorDataMap::hold_tensor(const Tensor& tensor, const std::string& key,
                                  std::unique_ptr<Hold>* hold) const {
  hold->reset();
  if (std::shared_ptr<ConstantBlock> b = block_containing(tensor.data(), tensor.size_bytes())) {
    BP_RETURN_IF_ERROR(b->acquire(), "weight '" + key + "'");
    *hold = std::make_unique<BlockHold>(std::move(b));
  }
  return ok_status();
}

Status TensorDataMap::hold(const std::string& key, const void** data, size_t* size,
                           std::unique_ptr<Hold>* hold) const {
  auto it = tensors_->find(key);
  if (it == tensors_->end()) return not_found("no weight named '" + key + "'");
  BP_RETURN_IF_ERROR(hold_tensor(it->second, key, hold));
  *data = it->second.data();
  *size = it->second.size_bytes();
  return ok_status();
}

void TensorDataMap::drop_when_free() const {
  for (size_t i = 0; i < blocks_.size(); ++i) {
    unpin_block(i);
    if (std::shared_ptr<ConstantBlock> b = blocks_[i].block.lock()) b->set_drop_when_free(true);
  }
}

std::vector<bool> TensorDataMap::blocks_of(const std::vector<const Tensor*>& tensors) const {
  std::vector<bool> in(blocks_.size(), false);
  for (const Tensor* t : tensors) {
    const auto* p = static_cast<const unsigned char*>(t->data());
    const auto* end = p + t->size_bytes();
    if (p == nullptr) continue;
    // Blocks are sorted and apart: the first that ends past p, and on.
    auto it = std::partition_point(blocks_.begin(), blocks_.end(),
                                   [&](const Indexed& b) { return b.end <= p; });
    for (; it != blocks_.end() && it->begin < end; ++it) in[it - blocks_.begin()] = true;
  }
  return in;
}

Result<size_t> TensorDataMap::settle(const std::vector<const Tensor*>& keep, bool now) const {
  const std::vector<bool> kept = blocks_of(keep);
  size_t out = 0;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    if (kept[i]) {
      BP_RETURN_IF_ERROR(pin_block(i));
      continue;
    }
    unpin_block(i);
    std::shared_ptr<ConstantBlock> b = blocks_[i].block.lock();
    if (b == nullptr) continue;
    b->set_drop_when_free(true);
    if (now && b->drop()) out += b->size();
  }
  return out;
}

Status TensorDataMap::pin(const std::vector<const Tensor*>& keep) const {
  const std::vector<bool> kept = blocks_of(keep);
  for (size_t i = 0; i < blocks_.size(); ++i)
    if (kept[i]) BP_RETURN_IF_ERROR(pin_block(i));
  return ok_status();
}

}  // namespace backplane
