// npy.hpp — reading and writing NumPy .npy files (format 1.0-3.0), C order,
// little-endian, for the dtypes Backplane has.
#pragma once

#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <cstddef>
#include <string>

namespace backplane::npy {

// Reads a .npy file. Every size the header claims is checked against the
// bytes present before anything is allocated; trailing bytes after the array
// are an error (kCorruptData, naming the file).
Result<Tensor> read(const std::string& path);
// The same on bytes in memory; `name` is used in messages.
Result<Tensor> parse(const std::string& name, const unsigned char* bytes, size_t size);
// Writes atomically (core/atomic_file.hpp): on any failure the previous file
// is untouched and the error names the file and the OS reason.
Status write(const std::string& path, const Tensor& tensor);

}  // namespace backplane::npy
