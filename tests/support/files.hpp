// files.hpp — scratch directories and whole-file reads and writes for tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace backplane::test {

// A fresh directory (mode 0700, unique: mkdtemp) removed with its contents on
// destruction. Throws std::runtime_error if it cannot be created.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  // `name` inside this directory.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A fixture whose tests each get a fresh TempDir.
class TempDirTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  TempDir dir_;
};

// The whole file, or empty (with a test failure) if it cannot be read.
std::vector<uint8_t> read_bytes(const std::string& path);
std::string read_text(const std::string& path);
// Writes (replaces) `path`; a test failure if that fails.
void write_bytes(const std::string& path, const void* data, size_t size);
inline void write_bytes(const std::string& path, const std::string& bytes) {
  write_bytes(path, bytes.data(), bytes.size());
}

}  // namespace backplane::test
