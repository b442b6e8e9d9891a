// kernel_numeric.hpp — element types stored narrower than they compute
// (float16, bfloat16) and the load/store pair CpuRef's templated kernels use
// for every dtype: `load` widens an element to its math type (float for the
// 16-bit floats, the type itself otherwise), `store<T>` narrows a result back
// (round to nearest even for float16 and bfloat16, as numpy and ONNX do).
// Private to the reference backend; everything is inline or a template.
#pragma once

#include "kernel_util.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace backplane::cpuref {

// Storage type of a bfloat16 element: the upper 16 bits of a float32.
struct bf16 {
  uint16_t bits;
};

template <>
constexpr bp_dtype_t dtype_of<bf16>() {
  return BP_DTYPE_BFLOAT16;
}

inline float bf16_to_float(uint16_t b) {
  const uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Round to nearest even; a NaN stays a quiet NaN (its sign kept).
inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;  // a carry may round up to inf, as it should
  return static_cast<uint16_t>(x >> 16);
}

template <class T>
struct MathOf {
  using type = T;
};
template <>
struct MathOf<f16> {
  using type = float;
};
template <>
struct MathOf<bf16> {
  using type = float;
};
template <class T>
using math_t = typename MathOf<T>::type;

template <class T>
inline math_t<T> load(T v) {
  return v;
}
inline float load(f16 v) { return half_to_float(v.bits); }
inline float load(bf16 v) { return bf16_to_float(v.bits); }

// double -> float rounded to odd (truncate, then set the last bit if
// anything was cut off): rounding that float again to the nearest float16 or
// bfloat16 gives the same result as rounding the double directly, which a
// plain double -> float -> float16 would not in rare ties.
inline float to_float_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isnan(d) || static_cast<double>(f) == d || std::isinf(f)) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  bits |= 1u;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

template <class V>
inline float narrow_for_16bit(V v) {
  if constexpr (std::is_same_v<V, double>) return to_float_odd(v);
  else return static_cast<float>(v);
}

template <class T, class V>
inline T store(V v) {
  if constexpr (std::is_same_v<T, f16>) {
    return f16{float_to_half(narrow_for_16bit(v))};
  } else if constexpr (std::is_same_v<T, bf16>) {
    return bf16{float_to_bf16(narrow_for_16bit(v))};
  } else {
    return static_cast<T>(v);
  }
}

// The type a sum of T's accumulates in: its math type, or uint64_t for the
// integers, so products and sums wrap modulo 2^64 (never a signed overflow)
// and store<T> truncates them to the same result modulo 2^bits.
template <class T>
using accumulator_t = std::conditional_t<std::is_integral_v<math_t<T>>, uint64_t, math_t<T>>;

// An element (in its math type) as accumulator type A: signed integers are
// widened through int64 first (sign-extended), so sums modulo 2^64 stay
// exact modulo 2^bits.
template <class A, class V>
inline A widen(V v) {
  if constexpr (std::is_integral_v<V> && std::is_signed_v<V>)
    return static_cast<A>(static_cast<int64_t>(v));
  else return static_cast<A>(v);
}

template <class T>
constexpr bool is_float_v = std::is_floating_point_v<math_t<T>>;

}  // namespace backplane::cpuref
