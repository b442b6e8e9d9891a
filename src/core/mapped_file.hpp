// mapped_file.hpp — a whole file mapped read-only into memory.
//
// Used for ONNX models and their external data, so multi-gigabyte weights are
// paged in by the kernel instead of copied. Hold the shared_ptr (directly or
// as a Tensor's keep_alive) for as long as any pointer into data() is used;
// the mapping is removed when the last owner goes away.
//
// Thread-safety: immutable after open(); data() may be read from any thread.
#pragma once

#include <backplane/status.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace backplane {

class MappedFile {
 public:
  // Maps `path` read-only (PROT_READ, MAP_PRIVATE). Errors (kNotFound for a
  // missing file, kIoError otherwise) name the path and the errno text. An
  // empty file succeeds with size() == 0 and data() == nullptr.
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // First byte of the file; nullptr when size() == 0. Never write through it.
  const void* data() const { return data_; }
  const unsigned char* bytes() const { return static_cast<const unsigned char*>(data_); }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Drops the whole pages inside [offset, offset + size) from memory; read
  // again, they come from the file. For bytes that have been copied out, so
  // that they are not held twice.
  void release(size_t offset, size_t size) const;

 private:
  MappedFile(std::string path, void* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace backplane
