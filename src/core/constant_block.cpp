#include "core/constant_block.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace backplane {

namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

Result<std::shared_ptr<ConstantBlock>> ConstantBlock::copy(std::shared_ptr<const MappedFile> file,
                                                           size_t offset, size_t size) {
  std::shared_ptr<ConstantBlock> b(new ConstantBlock(std::move(file), offset, size));
  const size_t page = page_size();
  b->mapped_ = (size + page - 1) / page * page;
  // From 2 MiB on, starting on a huge page boundary and backed by
  // transparent huge pages where the system allows it: one fault fills 2 MiB
  // instead of 4 KiB, and faults were most of what copying weights cost.
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t spare = b->mapped_ >= kHuge ? kHuge : 0;
  void* p = ::mmap(nullptr, b->mapped_ + spare, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
  if (p == MAP_FAILED)
    return Status(StatusCode::kOutOfMemory, "cannot map " + std::to_string(size) +
                                                " bytes for a constant of '" + b->file_->path() +
                                                "': " + std::strerror(errno));
  auto* base = static_cast<unsigned char*>(p);
  unsigned char* at = base;
  if (spare > 0) {
    at += (kHuge - reinterpret_cast<uintptr_t>(base) % kHuge) % kHuge;
    if (at > base) ::munmap(base, static_cast<size_t>(at - base));
    if (base + b->mapped_ + spare > at + b->mapped_)
      ::munmap(at + b->mapped_, static_cast<size_t>(base + b->mapped_ + spare - (at + b->mapped_)));
    ::madvise(at, b->mapped_, MADV_HUGEPAGE);  // advice: else small pages
  }
  b->pages_ = b->data_ = at;
  std::lock_guard<std::mutex> lock(b->mu_);
  BP_RETURN_IF_ERROR(b->fill_locked());
  return b;
}

std::shared_ptr<ConstantBlock> ConstantBlock::view(std::shared_ptr<const MappedFile> file,
                                                   size_t offset, size_t size) {
  std::shared_ptr<ConstantBlock> b(new ConstantBlock(std::move(file), offset, size));
  b->data_ = const_cast<unsigned char*>(b->file_->bytes()) + offset;
  return b;
}

ConstantBlock::~ConstantBlock() {
  if (pages_ != nullptr) ::munmap(pages_, mapped_);
}

// A piece at a time, each piece's file pages dropped once copied, so that a
// large weight is not in memory twice at any moment.
Status ConstantBlock::fill_locked() {
  if (!resident_) ++reads_back_;
  if (pages_ != nullptr && !resident_ && ::mprotect(pages_, mapped_, PROT_READ | PROT_WRITE) != 0)
    return Status(StatusCode::kOutOfMemory, "cannot make a constant of '" + file_->path() +
                                                "' readable again: " + std::strerror(errno));
  if (pages_ != nullptr) {
    auto* dst = static_cast<unsigned char*>(pages_);
    constexpr size_t kPiece = size_t{4} << 20;
    for (size_t done = 0; done < size_; done += kPiece) {
      const size_t n = std::min(kPiece, size_ - done);
      std::memcpy(dst + done, file_->bytes() + offset_ + done, n);
      file_->release(offset_ + done, n);
    }
  }
  resident_ = true;
  return ok_status();
}

Status ConstantBlock::acquire() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!resident_) BP_RETURN_IF_ERROR(fill_locked());
  ++holds_;
  return ok_status();
}

void ConstantBlock::release() {
  std::lock_guard<std::mutex> lock(mu_);
  if (holds_ > 0 && --holds_ == 0 && pins_ == 0 && drop_when_free_) drop_locked();
}

Status ConstantBlock::pin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!resident_) BP_RETURN_IF_ERROR(fill_locked());
  ++pins_;
  return ok_status();
}

void ConstantBlock::unpin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pins_ > 0 && --pins_ == 0 && holds_ == 0 && drop_when_free_) drop_locked();
}

void ConstantBlock::set_drop_when_free(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_when_free_ = on;
}

Status ConstantBlock::touch() {
  std::lock_guard<std::mutex> lock(mu_);
  return resident_ ? ok_status() : fill_locked();
}

bool ConstantBlock::drop() {
  std::lock_guard<std::mutex> lock(mu_);
  return drop_locked();
}

bool ConstantBlock::drop_locked() {
  if (holds_ > 0 || pins_ > 0) return false;
  if (!resident_) return true;
  if (pages_ == nullptr) {
    file_->release(offset_, size_);  // the kernel reads them again on a touch
    return true;
  }
  // Freed, then unreadable: a reader that did not acquire() faults rather
  // than reading zeros.
  if (::mprotect(pages_, mapped_, PROT_NONE) != 0) return false;
  ::madvise(pages_, mapped_, MADV_DONTNEED);
  resident_ = false;
  return true;
}

int ConstantBlock::reads_back() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reads_back_;
}

bool ConstantBlock::resident() const {
  std::lock_guard<std::mutex> lock(mu_);
  return resident_;
}

int ConstantBlock::holds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return holds_;
}

int ConstantBlock::pins() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pins_;
}

}  // namespace backplane
