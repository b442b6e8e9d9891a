#include "core/checksum.hpp"

#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h>  // the widest vector unit this CPU has (same hash values)
#endif

namespace backplane {

uint64_t checksum64(const void* data, size_t size) {
#if defined(__x86_64__)
  return XXH3_64bits_dispatch(data, size);
#else
  return XXH3_64bits(data, size);
#endif
}

}  // namespace backplane
