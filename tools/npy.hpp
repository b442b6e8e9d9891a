// npy.hpp — reading and writing NumPy .npy files (format 1.0-3.0), C order,
// little-endian, for the dtypes Backplane has.
#pragma once

#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <string>

namespace backplane::npy {

Result<Tensor> read(const std::string& path);
Status write(const std::string& path, const Tensor& tensor);

}  // namespace backplane::npy
