// byte_writer.hpp — the ABI's opaque byte sink (bp_byte_writer_t) that a
// backend's serialize appends its payload to, through the host table's
// writer_append. Created and owned by the host for one serialize call.
#pragma once

#include <backplane/backend_abi.h>

#include <cstdint>
#include <vector>

struct bp_byte_writer {
  std::vector<uint8_t> bytes;
};
