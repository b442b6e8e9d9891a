#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

namespace backplane {
namespace {

std::string os_reason() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

}  // namespace

Result<AtomicFile> AtomicFile::create(const std::string& path) {
  if (path.empty()) return invalid_argument("empty output file name");
  // Not mkstemp: its 0600 would have to be widened through umask(), which is
  // process-wide. O_EXCL with 0666 lets the kernel apply the umask, and the
  // pid plus a counter make the name unique among concurrent writers.
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string temp = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
    int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return AtomicFile(path, std::move(temp), fd);
    if (errno != EEXIST) return io_error(path + ": cannot create: " + os_reason());
  }
  return io_error(path + ": cannot create a temporary file beside it");
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(std::exchange(other.fd_, -1)),
      written_(other.written_),
      failed_(other.failed_) {
  other.temp_path_.clear();
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    discard();
    path_ = std::move(other.path_);
    temp_path_ = std::exchange(other.temp_path_, std::string());
    fd_ = std::exchange(other.fd_, -1);
    written_ = other.written_;
    failed_ = other.failed_;
  }
  return *this;
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) unlink(temp_path_.c_str());
  temp_path_.clear();
}

Status AtomicFile::write(const void* data, size_t size) {
  if (fd_ < 0 || failed_) return io_error(path_ + ": write after a failed write or commit");
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      return io_error(path_ + ": write failed: " + (n < 0 ? os_reason() : "no progress"));
    }
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  return ok_status();
}

Status AtomicFile::write_zeros(uint64_t count) {
  static const char zeros[4096] = {};
  while (count > 0) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(sizeof zeros, count));
    BP_RETURN_IF_ERROR(write(zeros, n));
    count -= n;
  }
  return ok_status();
}

Status AtomicFile::commit() {
  if (fd_ < 0 || failed_) return io_error(path_ + ": commit after a failed write or commit");
  // Some file systems report ENOSPC or EIO only at fsync or close.
  if (fsync(fd_) != 0) {
    failed_ = true;
    return io_error(path_ + ": write failed (fsync): " + os_reason());
  }
  int fd = std::exchange(fd_, -1);
  if (close(fd) != 0) {
    failed_ = true;
    return io_error(path_ + ": write failed (close): " + os_reason());
  }
  if (rename(temp_path_.c_str(), path_.c_str()) != 0) {
    failed_ = true;
    return io_error(path_ + ": cannot replace: " + os_reason());
  }
  temp_path_.clear();
  // The rename itself is durable once the directory is synced; a failure here
  // does not un-write the file, so it is not an error.
  int dir = open(parent_dir(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    fsync(dir);
    close(dir);
  }
  return ok_status();
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  BP_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  BP_RETURN_IF_ERROR(file.write(bytes));
  return file.commit();
}

}  // namespace backplane
