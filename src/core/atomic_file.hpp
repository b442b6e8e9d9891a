// atomic_file.hpp — writing a file so that nobody ever sees it half-written.
//
// Every file Backplane writes (.bpk, .bpd, .npy, DOT, JSON) goes through
// AtomicFile: the bytes go to a temporary file in the target's directory
// ("<name>.tmp-XXXXXX"), and commit() flushes, fsyncs and checks it, then
// renames it over the target and fsyncs the directory. So:
//   - a write that fails half way (a full disk, an I/O error) is an error
//     naming the file and the OS reason, and the previous file is untouched;
//   - a process that has the previous file open or mapped keeps reading the
//     previous bytes (rename replaces the directory entry, not the inode), so
//     recompiling an artifact under a running model is safe. Overwriting a
//     mapped file in place (cp, dd, an editor saving in place) is not.
// An AtomicFile destroyed without commit() removes its temporary file.
//
// Thread-safety: one AtomicFile is used by one thread; distinct ones are
// independent (each has its own unique temporary name).
#pragma once

#include <backplane/status.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace backplane {

class AtomicFile {
 public:
  // Creates the temporary file beside `path`. kIoError (with the OS reason)
  // when the directory does not exist or is not writable.
  static Result<AtomicFile> create(const std::string& path);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temporary file unless committed

  // Appends all of `size` bytes, or fails with kIoError naming the target and
  // the OS reason (e.g. "No space left on device"). After a failure the file
  // cannot be committed.
  Status write(const void* data, size_t size);
  Status write(std::string_view bytes) { return write(bytes.data(), bytes.size()); }
  // Appends `count` zero bytes.
  Status write_zeros(uint64_t count);
  uint64_t bytes_written() const { return written_; }

  // fsync, close (checked), rename over the target, fsync the directory.
  Status commit();

  const std::string& path() const { return path_; }

 private:
  AtomicFile(std::string path, std::string temp_path, int fd)
      : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}
  void discard();

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool failed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
Status write_file_atomically(const std::string& path, std::string_view bytes);

}  // namespace backplane
