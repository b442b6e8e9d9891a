// common.cpp — helpers shared by every CpuRef kernel file (declared in kernel.hpp).
#include "kernel.hpp"

#include <cstring>

namespace backplane::cpuref {

int64_t normalize_axis(int64_t axis, int64_t rank, const NodeInfo& info) {
  if (axis < -rank || axis >= rank) {
    throw sdk::Error(BP_STATUS_INVALID_ARGUMENT,
                     info.describe() + ": axis " + std::to_string(axis) +
                         " is out of range for rank " + std::to_string(rank) + " (expected [" +
                         std::to_string(-rank) + ", " + std::to_string(rank - 1) + "])");
  }
  return axis < 0 ? axis + rank : axis;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal half: renormalise into a normal float.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(112 - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN; a NaN stays a (quiet) NaN
    if (absx == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
  }
  const uint32_t e = absx >> 23;        // biased float exponent
  if (e >= 143) return sign | 0x7c00u;  // >= 65536: overflows to inf
  if (e < 113) {
    // Result is a half subnormal (or zero): value = m * 2^(e-150) = r * 2^-24.
    const uint32_t shift = 126 - e;  // >= 14
    if (shift >= 32) return sign;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | r);
  }
  const uint32_t mant = absx & 0x7fffffu;
  uint32_t r = ((e - 112) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;  // a carry may round up to inf
  return static_cast<uint16_t>(sign | r);
}

}  // namespace backplane::cpuref
