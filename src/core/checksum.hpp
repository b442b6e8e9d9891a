// checksum.hpp — the 64-bit content hash (XXH3-64) shared by the named blob
// store (de-duplication) and the artifact format (segment checksums).
//
// Thread-safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace backplane {

// XXH3-64 of `size` bytes at `data` (data may be null when size is 0).
uint64_t checksum64(const void* data, size_t size);

}  // namespace backplane
