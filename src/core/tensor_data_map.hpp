// tensor_data_map.hpp — a NamedDataMap over tensors held in memory (an
// imported graph's constants), some of them in blocks that can be dropped
// once nobody holds them (core/constant_block.hpp).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include "core/constant_block.hpp"
#include "core/named_data_map.hpp"

#include <backplane/tensor.hpp>

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace backplane {

class TensorDataMap : public NamedDataMap {
 public:
  using Blocks = std::unordered_map<std::string, std::weak_ptr<ConstantBlock>>;
  // `tensors` is borrowed: it must outlive the map and not change while the
  // map lives. `blocks` (optional): blocks some of them view, by any key; a
  // tensor whose bytes lie in a block (its own, or another's it aliases) is
  // read through that block. Blocks no tensor lies in are not this map's.
  //
  // Several maps may share a block (the stages of one model): what a map
  // keeps in memory (settle, pin) it pins, so no other map drops it, until
  // it lets it go or is destroyed.
  explicit TensorDataMap(const std::unordered_map<std::string, Tensor>* tensors,
                         const Blocks* blocks = nullptr);
  ~TensorDataMap() override;
  TensorDataMap(const TensorDataMap&) = delete;
  TensorDataMap& operator=(const TensorDataMap&) = delete;
  // A dropped block is read again first.
  Status get(const std::string& key, const void** data, size_t* size) const override;
  Status hold(const std::string& key, const void** data, size_t* size,
              std::unique_ptr<Hold>* hold) const override;
  size_t num_keys() const override { return keys_.size(); }
  const std::string* key_at(size_t index) const override {
    return index < keys_.size() ? &keys_[index] : nullptr;
  }

  // The block [data, data + size) lies in, if any.
  std::shared_ptr<ConstantBlock> block_containing(const void* data, size_t size) const;
  // hold() for `tensor`, which may be a tensor of another map.
  Status hold_tensor(const Tensor& tensor, const std::string& key,
                     std::unique_ptr<Hold>* hold) const;
  // Lets every block go as soon as its last holder lets go of it (while
  // the backends compile, each weight as soon as it is packed).
  void drop_when_free() const;
  // Then: the blocks that any of `keep` lies in back in memory for good;
  // every other block dropped when its last holder lets go, and (`now`)
  // now if nobody holds it. Returns the bytes out of memory now.
  Result<size_t> settle(const std::vector<const Tensor*>& keep, bool now = true) const;
  // The blocks that any of `keep` lies in back in memory for good (read
  // again if dropped); the others as they were.
  Status pin(const std::vector<const Tensor*>& keep) const;

 private:
  struct Indexed {
    const unsigned char* begin;
    const unsigned char* end;
    std::weak_ptr<ConstantBlock> block;
  };

  // Per block: whether any of `tensors` lies in it.
  std::vector<bool> blocks_of(const std::vector<const Tensor*>& tensors) const;
  // Pins block i for this map, once; or lets this map's pin of it go.
  Status pin_block(size_t i) const;
  void unpin_block(size_t i) const;

  const std::unordered_map<std::string, Tensor>* tensors_;
  std::vector<Indexed> blocks_;    // sorted by begin, not overlapping
  std::vector<std::string> keys_;  // sorted, for stable key_at
  mutable std::mutex mu_;
  mutable std::vector<bool> pinned_;  // per block: pinned by this map
};

}  // namespace backplane
