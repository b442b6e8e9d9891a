// numerics.cpp — the numerics policy's comparison (include/backplane/numerics.hpp).
#include "backplane/numerics.hpp"

#include "core/half.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>
#include <vector>

namespace backplane::numerics {
namespace {

double from_bfloat16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Element i of `t` as a double.
double element(const Tensor& t, size_t i) {
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::kFloat32: return static_cast<const float*>(p)[i];
    case DType::kFloat64: return static_cast<const double*>(p)[i];
    case DType::kFloat16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::kBFloat16: return from_bfloat16(static_cast<const uint16_t*>(p)[i]);
    case DType::kUInt8: return static_cast<const uint8_t*>(p)[i];
    case DType::kInt8: return static_cast<const int8_t*>(p)[i];
    case DType::kUInt16: return static_cast<const uint16_t*>(p)[i];
    case DType::kInt16: return static_cast<const int16_t*>(p)[i];
    case DType::kInt32: return static_cast<const int32_t*>(p)[i];
    case DType::kUInt32: return static_cast<const uint32_t*>(p)[i];
    case DType::kBool: return static_cast<const uint8_t*>(p)[i] != 0;
    case DType::kInt64:
    case DType::kUInt64:
    case DType::kUndefined: break;
  }
  return 0;
}

bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 ||
         d == DType::kBFloat16;
}

// Error of one element pair: NaN meets NaN and an infinity the same one.
double error_of(double got, double ref) {
  if (std::isnan(ref) || std::isnan(got))
    return std::isnan(ref) && std::isnan(got) ? 0.0 : std::numeric_limits<double>::infinity();
  if (std::isinf(ref) || std::isinf(got))
    return got == ref ? 0.0 : std::numeric_limits<double>::infinity();
  return std::fabs(got - ref);
}

}  // namespace

double Comparison::ratio() const {
  const double b = bound();
  if (max_abs_error == 0) return 0;
  return b > 0 ? max_abs_error / b : std::numeric_limits<double>::infinity();
}

std::string Comparison::describe(const Shape& shape) const {
  std::ostringstream os;
  if (!comparable) return reason;
  os.precision(3);
  os << "max|got-ref| " << std::scientific << max_abs_error;
  if (count > 0) {
    // The flat index as a multi-index of `shape`.
    std::vector<int64_t> at(shape.size());
    size_t rest = worst_index;
    for (size_t d = shape.size(); d-- > 0;) {
      const auto dim = static_cast<size_t>(shape[d] > 0 ? shape[d] : 1);
      at[d] = static_cast<int64_t>(rest % dim);
      rest /= dim;
    }
    os << " at " << shape_to_string(at) << std::defaultfloat << std::setprecision(7)
       << " (got " << got_at_worst << ", ref " << ref_at_worst << ")";
  }
  os << std::scientific << std::setprecision(2) << ", bound " << bound();
  if (int8_steps > 0) os << " (" << int8_steps << " int8 step" << (int8_steps > 1 ? "s" : "") << ")";
  return os.str();
}

Comparison compare(const Tensor& got, const Tensor& ref) {
  Comparison c;
  if (got.dtype() != ref.dtype()) {
    c.comparable = false;
    c.reason = std::string("dtype ") + dtype_name(got.dtype()) + ", reference " +
               dtype_name(ref.dtype());
    return c;
  }
  if (got.shape() != ref.shape()) {
    c.comparable = false;
    c.reason = "shape " + shape_to_string(got.shape()) + ", reference " +
               shape_to_string(ref.shape());
    return c;
  }
  c.count = static_cast<size_t>(ref.numel());
  c.exact = !is_float(ref.dtype());
  if (ref.dtype() == DType::kInt64 || ref.dtype() == DType::kUInt64) {
    // 64-bit integers are compared as integers: a double cannot hold them all.
    const auto* g = static_cast<const uint64_t*>(got.data());
    const auto* r = static_cast<const uint64_t*>(ref.data());
    for (size_t i = 0; i < c.count; ++i) {
      if (g[i] != r[i]) {
        c.max_abs_error = std::numeric_limits<double>::infinity();
        c.worst_index = i;
        c.got_at_worst = static_cast<double>(static_cast<int64_t>(g[i]));
        c.ref_at_worst = static_cast<double>(static_cast<int64_t>(r[i]));
        break;
      }
    }
    return c;
  }
  for (size_t i = 0; i < c.count; ++i) {
    const double g = element(got, i);
    const double r = element(ref, i);
    if (std::isfinite(r)) c.max_abs_ref = std::max(c.max_abs_ref, std::fabs(r));
    const double e = error_of(g, r);
    if (e > c.max_abs_error || (i == 0 && e == 0)) {
      c.max_abs_error = e;
      c.worst_index = i;
      c.got_at_worst = g;
      c.ref_at_worst = r;
    }
  }
  return c;
}

}  // namespace backplane::numerics
