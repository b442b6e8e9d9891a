// constant_block.hpp — a large constant read from a mapped model file, whose
// bytes can leave memory once every backend that reads it has packed a copy
// of its own, and come back from the file if anyone asks for them again.
//
// Two kinds, by where the bytes are:
// - a copy: the file's bytes do not sit at an address a kernel can read
//   elements from (raw_data inside a .onnx is not aligned), so they are
//   copied into pages of the block's own. Dropped, those pages are freed and
//   made unreadable (a read would fault, never see zeros); acquire() reads
//   them from the file again, at the same address.
// - a view of the file's pages (aligned external data): dropping gives the
//   pages back to the kernel, which reads them from the file again on the
//   next touch, so a reader never sees anything but the file's bytes.
//
// The file must not change while the model is loaded (the same holds for
// external data read in place).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include "core/mapped_file.hpp"

#include <backplane/status.hpp>

#include <cstddef>
#include <memory>
#include <mutex>

namespace backplane {

class ConstantBlock {
 public:
  // Copies [offset, offset + size) of `file` into pages of its own,
  // dropping the file's pages as it goes so that the bytes are in memory
  // once. `size` > 0 and the range lies inside the file.
  static Result<std::shared_ptr<ConstantBlock>> copy(std::shared_ptr<const MappedFile> file,
                                                     size_t offset, size_t size);
  // The file's own pages, in place.
  static std::shared_ptr<ConstantBlock> view(std::shared_ptr<const MappedFile> file, size_t offset,
                                             size_t size);
  ~ConstantBlock();
  ConstantBlock(const ConstantBlock&) = delete;
  ConstantBlock& operator=(const ConstantBlock&) = delete;

  // Where the bytes are; the address never changes.
  void* data() const { return data_; }
  size_t size() const { return size_; }

  // A reader's hold: the bytes are readable until the matching release(),
  // read from the file again first if they were dropped.
  Status acquire();
  void release();
  // Makes the bytes readable without holding them (a reader that cannot say
  // when it is done, such as the host reading a weight it passes on).
  Status touch();
  // Pinned bytes stay in memory, whatever drop_when_free says, until the
  // matching unpin(): a model that may read them in place pins them for as
  // long as it may, so another model sharing the block cannot drop them.
  Status pin();
  void unpin();
  // Frees the bytes if nobody holds or pins them; true when they are gone.
  bool drop();
  // Whether the last release() drops the bytes too (off at first).
  void set_drop_when_free(bool on);
  bool resident() const;
  int holds() const;
  int pins() const;
  // How many times the bytes were read from the file again after a drop.
  int reads_back() const;

 private:
  ConstantBlock(std::shared_ptr<const MappedFile> file, size_t offset, size_t size)
      : file_(std::move(file)), offset_(offset), size_(size) {}
  Status fill_locked();
  bool drop_locked();

  std::shared_ptr<const MappedFile> file_;
  size_t offset_ = 0;
  size_t size_ = 0;
  void* pages_ = nullptr;  // the copy's mapping; null for a view
  size_t mapped_ = 0;
  void* data_ = nullptr;
  mutable std::mutex mu_;
  int holds_ = 0;
  int pins_ = 0;
  bool resident_ = true;
  bool drop_when_free_ = false;
  int reads_back_ = 0;
};

}  // namespace backplane
