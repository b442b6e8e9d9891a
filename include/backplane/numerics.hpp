// numerics.hpp — Backplane's numerics policy: the one tolerance by which
// tests, `backplane validate`, `backplane conformance` and the generated-graph
// differential tests judge a result against the reference (CpuRef, or ONNX
// Runtime for the real-model corpus). docs/numerics.md explains it.
//
// A floating-point output tensor `got` matches its reference `ref` when
//
//     max |got - ref|  <=  kRelative * max |ref|  +  kAbsolute
//
// taken over the whole tensor, so an element near zero is judged against the
// tensor's scale, not against its own tiny value, and a tensor that is all
// near zero is judged by kAbsolute alone. NaN must meet NaN and an infinity
// the same infinity. Integer and boolean tensors must be equal. Shapes and
// dtypes must be equal. The same rule is written for Python in
// python/backplane/numerics.py.
//
// Thread-safety: pure functions. Since: 1.6.
#pragma once

#include "backplane/tensor.hpp"

#include <cstddef>
#include <string>

namespace backplane::numerics {

inline constexpr double kRelative = 1e-4;
inline constexpr double kAbsolute = 1e-6;

// What comparing two tensors found. Computed in double precision.
struct Comparison {
  bool comparable = true;    // false: dtype or shape differ (see `reason`)
  std::string reason;        // why not comparable, or "" when comparable
  size_t count = 0;          // elements compared
  double max_abs_error = 0;  // max |got - ref|; infinity where NaN/inf disagree
  double max_abs_ref = 0;    // max |ref| over its finite elements
  size_t worst_index = 0;    // flat index of the largest error
  double got_at_worst = 0;   // got[worst_index]
  double ref_at_worst = 0;   // ref[worst_index]
  bool exact = false;        // integer or bool dtype: judged by equality
  // The int8 rule (docs/numerics.md): the quantization steps a value of a
  // quantized model may differ by, and that many steps in its own units
  // (the steps themselves for a uint8/int8 tensor, steps times the scale for
  // a dequantized one). Set by the caller that knows the graph (validate);
  // 0 for a value no quantizer's rounding reaches.
  int int8_steps = 0;
  double int8_allowance = 0;

  // The error allowed: kRelative * max_abs_ref + kAbsolute (0 when exact),
  // plus int8_allowance.
  double bound() const {
    return (exact ? 0.0 : kRelative * max_abs_ref + kAbsolute) + int8_allowance;
  }
  // True when the tensors match under the policy.
  bool within() const { return comparable && max_abs_error <= bound(); }
  // max_abs_error / bound(): below 1 passes; the figure reports print.
  double ratio() const;
  // One line: "max|got-ref| 3.1e-03 at [2,17] (got 0.51, ref 0.513), bound 1.1e-04".
  std::string describe(const Shape& shape) const;
};

// Compares `got` with `ref` under the policy. Float16 and BFloat16 are
// widened; every dtype of tensor.hpp is handled.
Comparison compare(const Tensor& got, const Tensor& ref);

}  // namespace backplane::numerics
