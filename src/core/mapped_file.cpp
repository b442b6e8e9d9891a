#include "core/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>

namespace backplane {

namespace {

Status errno_status(const std::string& path, const char* what, int err) {
  std::string msg = path + ": cannot " + what + ": " + std::strerror(err);
  if (err == ENOENT) return not_found(std::move(msg));
  return io_error(std::move(msg));
}

// Closes the descriptor on every path out of open(); the mapping outlives it.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_status(path, "open", errno);
  FdCloser closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_status(path, "stat", errno);
  if (S_ISDIR(st.st_mode)) return io_error(path + ": cannot map: is a directory");
  if (!S_ISREG(st.st_mode)) return io_error(path + ": cannot map: not a regular file");
  const size_t size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  // mmap of length 0 fails with EINVAL; an empty file is simply no bytes.
  if (size > 0) {
    data = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) return errno_status(path, "mmap", errno);
  }
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
}

void MappedFile::release(size_t offset, size_t size) const {
  if (data_ == nullptr || offset >= size_) return;
  size = std::min(size, size_ - offset);
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t first = (offset + page - 1) / page * page;
  const size_t last = (offset + size) / page * page;
  // Advice only: a mapping the kernel cannot drop stays as it is.
  if (last > first) ::madvise(static_cast<char*>(data_) + first, last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace backplane
