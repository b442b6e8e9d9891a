// fuzz_npy — libFuzzer target: bytes as a .npy file (tools/npy.cpp, what
// `backplane run --input` reads).
//
// The reader must validate before it allocates: a header that claims more
// data than the bytes hold is an error at once. libFuzzer's -rss_limit_mb and
// -malloc_limit_mb (set by scripts/fuzz.sh) turn an allocation of the claimed
// size into a failure, so a reader that trusts the header fails this target.
// A parsed array must hold exactly the bytes after the header.
#include "npy.hpp"

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tensor = backplane::npy::parse("input.npy", data, size);
  if (tensor.ok() && tensor->size_bytes() > size) std::abort();  // more data than the file held
  return 0;
}
