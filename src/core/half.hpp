// half.hpp — IEEE 754 half precision (ONNX float16) to float.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace backplane {

// The float16 of bits `h` as a float (exactly: every half is a float).
inline float half_to_float(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  float v;
  if (exponent == 0) v = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31)
    v = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else v = std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
  return (h & 0x8000) ? -v : v;
}

}  // namespace backplane
