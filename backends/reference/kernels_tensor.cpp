// kernels_tensor.cpp — shape/layout ops, gather, reductions.
//
// Ops that only move bytes work on the element size, not the dtype: one
// kernel per size (1, 2, 4, 8 bytes) serves every dtype. Most of them reduce
// to one "strided copy": the output is written in order while the input is
// read through per-dimension strides (a transpose permutes strides, a slice
// scales and offsets them, an expand or tile puts zeros in them). The factory
// drops size-1 dims and merges dims that stay contiguous so the run-time loop
// is a short odometer over rows plus a memcpy or a tight gather per row.
//
// Inputs that hold a shape, indices or axes (Reshape's target, Slice's starts)
// are read through NodeInfo::constant and registered as data inputs
// (kernel.hpp): in a shape-polymorphic partition their bytes come from the run.
// Where the output shape alone determines the result (Reshape, Expand,
// ConstantOfShape, Tile), the data only checks that shape.
#include "kernel.hpp"
#include "kernel_numeric.hpp"
#include "kernel_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace backplane::cpuref {
namespace {

size_t elem_size(const NodeInfo& info, bp_dtype_t dtype) {
  const size_t size = sdk::dtype_size(dtype);
  if (size == 0)
    throw sdk::unsupported(info.describe() + ": dtype " + sdk::dtype_name(dtype) +
                           " is not supported");
  return size;
}

Dims contiguous_strides(const Dims& dims) {
  Dims strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return strides;
}

// Reads an integer list (int32 or int64) from input i: a constant, or in a
// shape-polymorphic partition the bytes of this run (a data input, kernel.hpp).
Dims read_int_constant(const NodeInfo& info, size_t i, const char* what) {
  const void* data = info.constant(i);
  if (data == nullptr)
    throw sdk::unsupported(info.describe() + ": input '" + what +
                           "' must be a constant in a partition compiled for fixed shapes "
                           "(computed at run time it needs a shape-polymorphic compile)");
  const int64_t n = sdk::element_count(info.in_shapes[i]);
  Dims out(static_cast<size_t>(n));
  if (info.in_dtypes[i] == BP_DTYPE_INT64) {
    // An empty list (Reduce's axes) leaves out.data() null: no memcpy then.
    if (n > 0) std::memcpy(out.data(), data, static_cast<size_t>(n) * sizeof(int64_t));
  } else if (info.in_dtypes[i] == BP_DTYPE_INT32) {
    const int32_t* p = static_cast<const int32_t*>(data);
    for (int64_t k = 0; k < n; ++k) out[k] = p[k];
  } else {
    throw sdk::invalid(info.describe() + ": input '" + what + "' has dtype " +
                       sdk::dtype_name(info.in_dtypes[i]) + ", expected int32 or int64");
  }
  return out;
}

// Reads an int64 scalar from a pointer of dtype int32/int64.
inline int64_t read_index_scalar(const void* p, bp_dtype_t dtype) {
  return dtype == BP_DTYPE_INT32 ? *static_cast<const int32_t*>(p)
                                 : *static_cast<const int64_t*>(p);
}

void check_output_shape(const NodeInfo& info, const Dims& computed) {
  if (computed != info.out_shapes[0])
    throw sdk::invalid(info.describe() + ": computed output shape " + dims_str(computed) +
                       " differs from the inferred output shape " + dims_str(info.out_shapes[0]));
}

template <template <class> class K, class... Args>
std::unique_ptr<Kernel> by_elem_size(size_t size, const NodeInfo& info, Args&&... args) {
  switch (size) {
    case 1:
      return std::make_unique<K<uint8_t>>(std::forward<Args>(args)...);
    case 2:
      return std::make_unique<K<uint16_t>>(std::forward<Args>(args)...);
    case 4:
      return std::make_unique<K<uint32_t>>(std::forward<Args>(args)...);
    case 8:
      return std::make_unique<K<uint64_t>>(std::forward<Args>(args)...);
    default:
      throw sdk::unsupported(info.describe() + ": element size " + std::to_string(size) +
                             " is not supported");
  }
}

// Fixed-size odometer for the outer dims of a plan (no heap at run time).
struct Odometer {
  int64_t idx[kMaxRank] = {};
};

// ---------------------------------------------------------------------------
// Plain copy (Reshape, Flatten, Squeeze, Unsqueeze)
// ---------------------------------------------------------------------------

std::unique_ptr<Kernel> make_copy(const NodeInfo& info) {
  require_inputs(info, 1);
  if (sdk::element_count(info.in_shapes[0]) != sdk::element_count(info.out_shapes[0]))
    throw sdk::invalid(info.describe() + ": output shape " + dims_str(info.out_shapes[0]) +
                       " has " + std::to_string(sdk::element_count(info.out_shapes[0])) +
                       " elements but input shape " + dims_str(info.in_shapes[0]) + " has " +
                       std::to_string(sdk::element_count(info.in_shapes[0])));
  return std::make_unique<CopyKernel>(static_cast<size_t>(sdk::element_count(info.in_shapes[0])) *
                                      elem_size(info, info.in_dtypes[0]));
}

// Reshape-5+: the target (0 copies the input dim unless allowzero, one -1
// takes the rest) must give the output shape the copy was planned for.
std::unique_ptr<Kernel> make_reshape(const NodeInfo& info) {
  if (info.has_input(1) && info.constant(1) != nullptr) {
    const Dims target = read_int_constant(info, 1, "shape");
    const Dims& in = info.in_shapes[0];
    const bool allowzero = info.node.attr_int("allowzero", 0) != 0;
    Dims dims = target;
    int64_t known = 1, infer = -1;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (dims[d] == 0 && !allowzero) {
        if (d >= in.size())
          throw sdk::invalid(info.describe() + ": target " + dims_str(target) + " copies dim " +
                             std::to_string(d) + " of an input of rank " +
                             std::to_string(in.size()));
        dims[d] = in[d];
      }
      if (dims[d] == -1 && infer < 0) {
        infer = static_cast<int64_t>(d);
        continue;
      }
      if (dims[d] < 0)
        throw sdk::invalid(info.describe() + ": target " + dims_str(target) + " is not valid");
      known *= dims[d];
    }
    // A -1 beside a 0-sized dim is ambiguous; the inferred shape decides then.
    if (infer >= 0)
      dims[infer] = known == 0 ? info.out_shapes[0][infer] : sdk::element_count(in) / known;
    check_output_shape(info, dims);
  }
  return make_copy(info);
}

// ---------------------------------------------------------------------------
// Strided copy (Transpose, Slice, Expand, Tile)
// ---------------------------------------------------------------------------

struct Strided {
  std::vector<int64_t> dims;     // outer dims, innermost excluded
  std::vector<int64_t> strides;  // input stride (elements) of each outer dim
  int64_t inner = 1;
  int64_t inner_stride = 1;
  int64_t offset = 0;  // input element where the copy starts
  int64_t rows = 1;
  int64_t total = 0;
};

// `dims` are the output dims in order; `strides` the input stride of each.
Strided make_strided(const Dims& dims, const Dims& strides, int64_t offset, const NodeInfo& info) {
  Strided p;
  p.offset = offset;
  p.total = sdk::element_count(dims);
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (!p.dims.empty() && p.strides.back() == strides[d] * dims[d]) {
      p.dims.back() *= dims[d];
      p.strides.back() = strides[d];
      continue;
    }
    p.dims.push_back(dims[d]);
    p.strides.push_back(strides[d]);
  }
  if (!p.dims.empty()) {
    p.inner = p.dims.back();
    p.inner_stride = p.strides.back();
    p.dims.pop_back();
    p.strides.pop_back();
  }
  if (p.dims.size() > kMaxRank)
    throw sdk::unsupported(info.describe() + ": rank " + std::to_string(p.dims.size()) +
                           " is too large");
  for (int64_t d : p.dims) p.rows *= d;
  return p;
}

template <class E>
class StridedKernel final : public Kernel {
 public:
  explicit StridedKernel(Strided plan) : p_(std::move(plan)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    if (p_.total == 0) return;
    const E* in = static_cast<const E*>(inputs[0]);
    E* out = static_cast<E*>(outputs[0]);
    Odometer od;
    const int rank = static_cast<int>(p_.dims.size());
    int64_t off = p_.offset;
    const int64_t n = p_.inner, s = p_.inner_stride;
    for (int64_t row = 0; row < p_.rows; ++row) {
      const E* src = in + off;
      E* dst = out + row * n;
      if (s == 1) {
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(E));
      } else if (s == 0) {
        const E v = *src;
        for (int64_t i = 0; i < n; ++i) dst[i] = v;
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = src[i * s];
      }
      for (int d = rank - 1; d >= 0; --d) {
        off += p_.strides[d];
        if (++od.idx[d] < p_.dims[d]) break;
        off -= p_.strides[d] * p_.dims[d];
        od.idx[d] = 0;
      }
    }
  }

 private:
  Strided p_;
};

std::unique_ptr<Kernel> make_transpose(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const size_t rank = in.size();
  Dims perm = info.node.attr_ints("perm");
  if (!info.node.has_attr("perm")) {
    perm.resize(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = static_cast<int64_t>(rank - 1 - i);
  }
  if (perm.size() != rank)
    throw sdk::invalid(info.describe() + ": perm has " + std::to_string(perm.size()) +
                       " entries for an input of rank " + std::to_string(rank));
  std::vector<bool> seen(rank, false);
  for (int64_t& p : perm) {
    p = normalize_axis(p, static_cast<int64_t>(rank), info);
    if (seen[p]) throw sdk::invalid(info.describe() + ": perm repeats axis " + std::to_string(p));
    seen[p] = true;
  }
  const Dims in_strides = contiguous_strides(in);
  Dims dims(rank), strides(rank);
  for (size_t i = 0; i < rank; ++i) {
    dims[i] = in[perm[i]];
    strides[i] = in_strides[perm[i]];
  }
  check_output_shape(info, dims);
  return by_elem_size<StridedKernel>(elem_size(info, info.in_dtypes[0]), info,
                                     make_strided(dims, strides, 0, info));
}

// Per-axis starts/ends/steps as ONNX Slice defines them (clamped, negative-aware).
std::unique_ptr<Kernel> make_slice(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  Dims starts, ends, axes, steps;
  if (info.node.opset() < 10) {
    starts = info.node.attr_ints("starts");
    ends = info.node.attr_ints("ends");
    axes = info.node.attr_ints("axes");
  } else {
    require_inputs(info, 3);
    starts = read_int_constant(info, 1, "starts");
    ends = read_int_constant(info, 2, "ends");
    if (info.has_input(3)) axes = read_int_constant(info, 3, "axes");
    if (info.has_input(4)) steps = read_int_constant(info, 4, "steps");
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (starts.size() != ends.size() || starts.size() != axes.size() || starts.size() != steps.size())
    throw sdk::invalid(info.describe() + ": starts, ends, axes and steps have different lengths");

  const Dims in_strides = contiguous_strides(in);
  Dims dims = in, strides = in_strides;
  int64_t offset = 0;
  std::vector<bool> seen(in.size(), false);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t axis = normalize_axis(axes[k], rank, info);
    if (seen[axis])
      throw sdk::invalid(info.describe() + ": axis " + std::to_string(axis) + " is sliced twice");
    seen[axis] = true;
    const int64_t n = in[axis], step = steps[k];
    if (step == 0) throw sdk::invalid(info.describe() + ": a step of 0 is not allowed");
    int64_t start = starts[k], end = ends[k];
    if (start < 0) start += n;
    if (end < 0) end += n;
    int64_t count;
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, n);
      end = std::clamp<int64_t>(end, 0, n);
      count = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
      start = n == 0 ? -1 : std::clamp<int64_t>(start, 0, n - 1);
      end = std::clamp<int64_t>(end, -1, n - 1);
      count = start > end ? (start - end - 1) / (-step) + 1 : 0;
    }
    dims[axis] = count;
    strides[axis] = in_strides[axis] * step;
    if (count > 0) offset += start * in_strides[axis];
  }
  check_output_shape(info, dims);
  return by_elem_size<StridedKernel>(elem_size(info, info.in_dtypes[0]), info,
                                     make_strided(dims, strides, offset, info));
}

std::unique_ptr<Kernel> make_expand(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const Dims& out = info.out_shapes[0];
  if (in.size() > out.size())
    throw sdk::invalid(info.describe() + ": input shape " + dims_str(in) +
                       " does not broadcast to " + dims_str(out));
  const Dims in_strides = contiguous_strides(in);
  Dims strides(out.size(), 0);
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] != out[lead + d] && in[d] != 1)
      throw sdk::invalid(info.describe() + ": input shape " + dims_str(in) +
                         " does not broadcast to " + dims_str(out));
    strides[lead + d] = in[d] == 1 ? 0 : in_strides[d];
  }
  if (info.has_input(1) && info.constant(1) != nullptr) {
    // The output is the input and the target shape broadcast together.
    const Dims target = read_int_constant(info, 1, "shape");
    Dims expect(std::max(in.size(), target.size()), 1);
    for (size_t k = 0; k < expect.size(); ++k) {
      const int64_t a = k < in.size() ? in[in.size() - 1 - k] : 1;
      const int64_t b = k < target.size() ? target[target.size() - 1 - k] : 1;
      if (a != b && a != 1 && b != 1)
        throw sdk::invalid(info.describe() + ": input shape " + dims_str(in) +
                           " does not broadcast with target " + dims_str(target));
      expect[expect.size() - 1 - k] = a == 1 ? b : a;
    }
    check_output_shape(info, expect);
  }
  return by_elem_size<StridedKernel>(elem_size(info, info.in_dtypes[0]), info,
                                     make_strided(out, strides, 0, info));
}

// Tile: output axis d of size r*n is read as (r, n) with strides (0, stride_d).
std::unique_ptr<Kernel> make_tile(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const Dims& out = info.out_shapes[0];
  if (in.size() != out.size())
    throw sdk::invalid(info.describe() + ": output rank differs from input rank");
  const Dims in_strides = contiguous_strides(in);
  Dims dims, strides;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 0 || out[d] == 0) {
      dims.push_back(out[d]);
      strides.push_back(in_strides[d]);
      continue;
    }
    if (out[d] % in[d] != 0)
      throw sdk::invalid(info.describe() + ": output dim " + std::to_string(out[d]) +
                         " is not a multiple of input dim " + std::to_string(in[d]));
    dims.push_back(out[d] / in[d]);
    strides.push_back(0);
    dims.push_back(in[d]);
    strides.push_back(in_strides[d]);
  }
  if (info.constant(1) != nullptr) {
    const Dims repeats = read_int_constant(info, 1, "repeats");
    Dims expect(in.size());
    for (size_t d = 0; d < in.size() && d < repeats.size(); ++d) expect[d] = in[d] * repeats[d];
    if (repeats.size() != in.size())
      throw sdk::invalid(info.describe() + ": repeats length differs from rank");
    check_output_shape(info, expect);
  }
  return by_elem_size<StridedKernel>(elem_size(info, info.in_dtypes[0]), info,
                                     make_strided(dims, strides, 0, info));
}

// ---------------------------------------------------------------------------
// Concat, Split
// ---------------------------------------------------------------------------

class ConcatKernel final : public Kernel {
 public:
  ConcatKernel(int64_t outer, std::vector<size_t> chunks)
      : outer_(outer), chunks_(std::move(chunks)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    char* out = static_cast<char*>(outputs[0]);
    for (int64_t o = 0; o < outer_; ++o) {
      for (size_t k = 0; k < chunks_.size(); ++k) {
        const size_t c = chunks_[k];
        if (c == 0) continue;
        std::memcpy(out, static_cast<const char*>(inputs[k]) + o * c, c);
        out += c;
      }
    }
  }

 private:
  int64_t outer_;
  std::vector<size_t> chunks_;  // bytes of input k per outer index
};

std::unique_ptr<Kernel> make_concat(const NodeInfo& info) {
  const size_t n = info.in_dtypes.size();
  if (n == 0) throw sdk::invalid(info.describe() + ": Concat needs at least one input");
  require_inputs(info, n);
  const Dims& out = info.out_shapes[0];
  const int64_t axis =
      normalize_axis(info.node.attr_int("axis", 0), static_cast<int64_t>(out.size()), info);
  const size_t esize = elem_size(info, info.in_dtypes[0]);
  const auto [outer, inner] = split_at_axis(out, axis);
  std::vector<size_t> chunks;
  int64_t total = 0;
  for (size_t k = 0; k < n; ++k) {
    const Dims& in = info.in_shapes[k];
    if (info.in_dtypes[k] != info.in_dtypes[0])
      throw sdk::invalid(info.describe() + ": input " + std::to_string(k) + " has dtype " +
                         sdk::dtype_name(info.in_dtypes[k]) + ", expected " +
                         sdk::dtype_name(info.in_dtypes[0]));
    bool ok = in.size() == out.size();
    for (size_t d = 0; ok && d < in.size(); ++d)
      if (static_cast<int64_t>(d) != axis && in[d] != out[d]) ok = false;
    if (!ok)
      throw sdk::invalid(info.describe() + ": input " + std::to_string(k) + " shape " +
                         dims_str(in) + " does not match output shape " + dims_str(out) +
                         " outside axis " + std::to_string(axis));
    total += in[axis];
    chunks.push_back(static_cast<size_t>(in[axis] * inner) * esize);
  }
  if (total != out[axis])
    throw sdk::invalid(info.describe() + ": inputs add up to " + std::to_string(total) +
                       " along axis " + std::to_string(axis) + " but the output has " +
                       std::to_string(out[axis]));
  return std::make_unique<ConcatKernel>(outer, std::move(chunks));
}

class SplitKernel final : public Kernel {
 public:
  SplitKernel(int64_t outer, std::vector<size_t> chunks)
      : outer_(outer), chunks_(std::move(chunks)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const char* in = static_cast<const char*>(inputs[0]);
    for (int64_t o = 0; o < outer_; ++o) {
      for (size_t k = 0; k < chunks_.size(); ++k) {
        const size_t c = chunks_[k];
        if (c != 0 && outputs[k] != nullptr)
          std::memcpy(static_cast<char*>(outputs[k]) + o * c, in, c);
        in += c;
      }
    }
  }

 private:
  int64_t outer_;
  std::vector<size_t> chunks_;
};

// The split sizes are the inferred output dims along the axis, so the 'split'
// attribute/input, 'num_outputs' and the equal split all arrive here resolved.
std::unique_ptr<Kernel> make_split(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const int64_t axis =
      normalize_axis(info.node.attr_int("axis", 0), static_cast<int64_t>(in.size()), info);
  const size_t esize = elem_size(info, info.in_dtypes[0]);
  const auto [outer, inner] = split_at_axis(in, axis);
  std::vector<size_t> chunks;
  int64_t total = 0;
  for (size_t k = 0; k < info.out_shapes.size(); ++k) {
    const Dims& out = info.out_shapes[k];
    if (out.size() != in.size())
      throw sdk::invalid(info.describe() + ": output " + std::to_string(k) +
                         " rank differs from the input");
    total += out[axis];
    chunks.push_back(static_cast<size_t>(out[axis] * inner) * esize);
  }
  if (total != in[axis])
    throw sdk::invalid(info.describe() + ": outputs add up to " + std::to_string(total) +
                       " along axis " + std::to_string(axis) + " but the input has " +
                       std::to_string(in[axis]));
  if (info.constant(1) != nullptr) {
    const Dims split = read_int_constant(info, 1, "split");
    for (size_t k = 0; k < split.size() && k < info.out_shapes.size(); ++k)
      if (split[k] != info.out_shapes[k][axis])
        throw sdk::invalid(info.describe() + ": split[" + std::to_string(k) +
                           "] = " + std::to_string(split[k]) + " disagrees with output " +
                           std::to_string(k) + " shape " + dims_str(info.out_shapes[k]));
  }
  return std::make_unique<SplitKernel>(outer, std::move(chunks));
}

// ---------------------------------------------------------------------------
// Gather
// ---------------------------------------------------------------------------

template <class I>
class GatherKernel final : public Kernel {
 public:
  GatherKernel(int64_t outer, int64_t axis_dim, int64_t count, size_t block, std::string who)
      : outer_(outer), axis_dim_(axis_dim), count_(count), block_(block), who_(std::move(who)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const char* data = static_cast<const char*>(inputs[0]);
    const I* indices = static_cast<const I*>(inputs[1]);
    char* out = static_cast<char*>(outputs[0]);
    for (int64_t o = 0; o < outer_; ++o) {
      const char* base = data + static_cast<size_t>(o * axis_dim_) * block_;
      for (int64_t j = 0; j < count_; ++j) {
        int64_t idx = indices[j];
        if (idx < 0) idx += axis_dim_;
        if (idx < 0 || idx >= axis_dim_)
          throw sdk::invalid(who_ + ": index " + std::to_string(indices[j]) +
                             " is out of range for a dim of " + std::to_string(axis_dim_));
        std::memcpy(out, base + static_cast<size_t>(idx) * block_, block_);
        out += block_;
      }
    }
  }

 private:
  int64_t outer_, axis_dim_, count_;
  size_t block_;
  std::string who_;
};

std::unique_ptr<Kernel> make_gather(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& data = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(data.size());
  const int64_t axis = normalize_axis(info.node.attr_int("axis", 0), rank, info);
  const auto [outer, inner] = split_at_axis(data, axis);
  const int64_t count = sdk::element_count(info.in_shapes[1]);
  Dims expect(data.begin(), data.begin() + axis);
  expect.insert(expect.end(), info.in_shapes[1].begin(), info.in_shapes[1].end());
  expect.insert(expect.end(), data.begin() + axis + 1, data.end());
  check_output_shape(info, expect);
  const size_t block = static_cast<size_t>(inner) * elem_size(info, info.in_dtypes[0]);
  if (info.in_dtypes[1] == BP_DTYPE_INT64)
    return std::make_unique<GatherKernel<int64_t>>(outer, data[axis], count, block,
                                                   info.describe());
  if (info.in_dtypes[1] == BP_DTYPE_INT32)
    return std::make_unique<GatherKernel<int32_t>>(outer, data[axis], count, block,
                                                   info.describe());
  throw sdk::unsupported(info.describe() + ": indices dtype " + sdk::dtype_name(info.in_dtypes[1]) +
                         " is not supported (int32, int64)");
}

// ---------------------------------------------------------------------------
// Shape, Size, Constant, ConstantOfShape
// ---------------------------------------------------------------------------

// Writes bytes fixed at compile time.
class BytesKernel final : public Kernel {
 public:
  explicit BytesKernel(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  void run(const void* const*, void* const* outputs, void*) const override {
    if (!bytes_.empty()) std::memcpy(outputs[0], bytes_.data(), bytes_.size());
  }

 private:
  std::vector<uint8_t> bytes_;
};

template <class T>
std::vector<uint8_t> to_bytes(const T* data, size_t count) {
  std::vector<uint8_t> bytes(count * sizeof(T));
  if (count != 0) std::memcpy(bytes.data(), data, bytes.size());
  return bytes;
}

void check_bytes_for_output(const NodeInfo& info, size_t bytes) {
  const size_t expect = static_cast<size_t>(sdk::element_count(info.out_shapes[0])) *
                        sdk::dtype_size(info.out_dtypes[0]);
  if (bytes != expect)
    throw sdk::invalid(info.describe() + ": value has " + std::to_string(bytes) +
                       " bytes but output " + dims_str(info.out_shapes[0]) + " of " +
                       sdk::dtype_name(info.out_dtypes[0]) + " needs " + std::to_string(expect));
}

std::unique_ptr<Kernel> make_shape(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  int64_t start = info.node.attr_int("start", 0);
  int64_t end = info.node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  Dims dims;
  for (int64_t d = start; d < end; ++d) dims.push_back(in[d]);
  if (info.out_dtypes[0] != BP_DTYPE_INT64)
    throw sdk::invalid(info.describe() + ": output dtype must be int64");
  check_output_shape(info, Dims{static_cast<int64_t>(dims.size())});
  return std::make_unique<BytesKernel>(to_bytes(dims.data(), dims.size()));
}

std::unique_ptr<Kernel> make_size(const NodeInfo& info) {
  require_inputs(info, 1);
  const int64_t n = sdk::element_count(info.in_shapes[0]);
  if (info.out_dtypes[0] != BP_DTYPE_INT64)
    throw sdk::invalid(info.describe() + ": output dtype must be int64");
  return std::make_unique<BytesKernel>(to_bytes(&n, 1));
}

std::unique_ptr<Kernel> make_constant(const NodeInfo& info) {
  if (info.out_shapes.empty()) throw sdk::invalid(info.describe() + ": the node has no output");
  const sdk::NodeRef& node = info.node;
  std::vector<uint8_t> bytes;
  bp_dtype_t dtype;
  if (const bp_attribute_t* a = node.find_attr("value")) {
    if (a->type != BP_ATTR_TENSOR || a->t == nullptr)
      throw sdk::invalid(info.describe() + ": attribute 'value' is not a tensor");
    dtype = a->t->dtype;
    bytes = to_bytes(static_cast<const uint8_t*>(a->t->data), a->t->size_bytes);
  } else if (node.has_attr("value_float")) {
    const float v = node.attr_float("value_float", 0.0f);
    dtype = BP_DTYPE_FLOAT32;
    bytes = to_bytes(&v, 1);
  } else if (node.has_attr("value_floats")) {
    const std::vector<float> v = node.attr_floats("value_floats");
    dtype = BP_DTYPE_FLOAT32;
    bytes = to_bytes(v.data(), v.size());
  } else if (node.has_attr("value_int")) {
    const int64_t v = node.attr_int("value_int", 0);
    dtype = BP_DTYPE_INT64;
    bytes = to_bytes(&v, 1);
  } else if (node.has_attr("value_ints")) {
    const std::vector<int64_t> v = node.attr_ints("value_ints");
    dtype = BP_DTYPE_INT64;
    bytes = to_bytes(v.data(), v.size());
  } else {
    throw sdk::unsupported(info.describe() +
                           ": only value, value_float(s) and value_int(s) are supported "
                           "(not sparse_value or strings)");
  }
  if (dtype != info.out_dtypes[0])
    throw sdk::invalid(info.describe() + ": value has dtype " + sdk::dtype_name(dtype) +
                       " but the output is " + sdk::dtype_name(info.out_dtypes[0]));
  check_bytes_for_output(info, bytes.size());
  return std::make_unique<BytesKernel>(std::move(bytes));
}

template <class E>
class FillKernel final : public Kernel {
 public:
  FillKernel(int64_t n, E value) : n_(n), value_(value) {}
  void run(const void* const*, void* const* outputs, void*) const override {
    E* out = static_cast<E*>(outputs[0]);
    for (int64_t i = 0; i < n_; ++i) out[i] = value_;
  }

 private:
  int64_t n_;
  E value_;
};

// Fill kernel for an element given as raw bytes.
std::unique_ptr<Kernel> make_fill(const NodeInfo& info, int64_t n, const void* value,
                                  size_t esize) {
  switch (esize) {
    case 1: {
      uint8_t v;
      std::memcpy(&v, value, 1);
      return std::make_unique<FillKernel<uint8_t>>(n, v);
    }
    case 2: {
      uint16_t v;
      std::memcpy(&v, value, 2);
      return std::make_unique<FillKernel<uint16_t>>(n, v);
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, value, 4);
      return std::make_unique<FillKernel<uint32_t>>(n, v);
    }
    case 8: {
      uint64_t v;
      std::memcpy(&v, value, 8);
      return std::make_unique<FillKernel<uint64_t>>(n, v);
    }
    default:
      throw sdk::unsupported(info.describe() + ": element size " + std::to_string(esize) +
                             " is not supported");
  }
}

std::unique_ptr<Kernel> make_constant_of_shape(const NodeInfo& info) {
  if (info.out_shapes.empty()) throw sdk::invalid(info.describe() + ": the node has no output");
  if (info.has_input(0) && info.constant(0) != nullptr)
    check_output_shape(info, read_int_constant(info, 0, "input"));
  const int64_t n = sdk::element_count(info.out_shapes[0]);
  const bp_attribute_t* a = info.node.find_attr("value");
  if (a == nullptr) {
    if (info.out_dtypes[0] != BP_DTYPE_FLOAT32)
      throw sdk::invalid(info.describe() + ": without 'value' the output must be float32");
    const float zero = 0.0f;
    return make_fill(info, n, &zero, sizeof(zero));
  }
  if (a->type != BP_ATTR_TENSOR || a->t == nullptr)
    throw sdk::invalid(info.describe() + ": attribute 'value' is not a tensor");
  const size_t esize = elem_size(info, a->t->dtype);
  if (a->t->size_bytes != esize)
    throw sdk::invalid(info.describe() + ": attribute 'value' must hold exactly one element");
  if (a->t->dtype != info.out_dtypes[0])
    throw sdk::invalid(info.describe() + ": value has dtype " + sdk::dtype_name(a->t->dtype) +
                       " but the output is " + sdk::dtype_name(info.out_dtypes[0]));
  return make_fill(info, n, a->t->data, esize);
}

// ---------------------------------------------------------------------------
// Pad
// ---------------------------------------------------------------------------

// For every output position of every axis, the input offset (index * stride)
// it reads, or -1 for the constant. Rows of the innermost axis copy their
// in-range middle with one memcpy.
template <class E>
class PadKernel final : public Kernel {
 public:
  struct Plan {
    Dims out;                          // output dims
    std::vector<int64_t> map;          // concatenated per-axis offset tables
    std::vector<size_t> start;         // where axis d's table starts in map
    int64_t copy_lo = 0, copy_hi = 0;  // innermost run [lo, hi) is a contiguous copy
    E value{};
    bool value_at_run = false;  // read the constant from inputs[2]
  };
  explicit PadKernel(Plan plan) : p_(std::move(plan)) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const E* in = static_cast<const E*>(inputs[0]);
    E* out = static_cast<E*>(outputs[0]);
    const E value = p_.value_at_run ? *static_cast<const E*>(inputs[2]) : p_.value;
    const int rank = static_cast<int>(p_.out.size());
    if (sdk::element_count(p_.out) == 0) return;
    if (rank == 0) {
      out[0] = in[0];
      return;
    }
    const int64_t n = p_.out[rank - 1];
    const int64_t* last = p_.map.data() + p_.start[rank - 1];
    int64_t rows = 1;
    for (int d = 0; d < rank - 1; ++d) rows *= p_.out[d];
    Odometer od;
    for (int64_t row = 0; row < rows; ++row) {
      E* dst = out + row * n;
      int64_t base = 0;
      bool pad_row = false;
      for (int d = 0; d < rank - 1; ++d) {
        const int64_t m = p_.map[p_.start[d] + od.idx[d]];
        if (m < 0) pad_row = true;
        base += m;
      }
      if (pad_row) {
        for (int64_t i = 0; i < n; ++i) dst[i] = value;
      } else {
        for (int64_t i = 0; i < p_.copy_lo; ++i) dst[i] = last[i] < 0 ? value : in[base + last[i]];
        if (p_.copy_hi > p_.copy_lo)
          std::memcpy(dst + p_.copy_lo, in + base + last[p_.copy_lo],
                      static_cast<size_t>(p_.copy_hi - p_.copy_lo) * sizeof(E));
        for (int64_t i = std::max(p_.copy_hi, p_.copy_lo); i < n; ++i)
          dst[i] = last[i] < 0 ? value : in[base + last[i]];
      }
      for (int d = rank - 2; d >= 0; --d) {
        if (++od.idx[d] < p_.out[d]) break;
        od.idx[d] = 0;
      }
    }
  }

 private:
  Plan p_;
};

template <class E>
std::unique_ptr<Kernel> build_pad(const NodeInfo& info, const std::string& mode, const Dims& begin,
                                  const Dims& end, const void* value, bool value_at_run) {
  const Dims& in = info.in_shapes[0];
  const size_t rank = in.size();
  if (rank > kMaxRank) throw sdk::unsupported(info.describe() + ": rank is too large");
  typename PadKernel<E>::Plan p;
  if (value != nullptr) std::memcpy(&p.value, value, sizeof(E));
  p.value_at_run = value_at_run;
  const Dims strides = contiguous_strides(in);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t n = in[d];
    const int64_t size = n + begin[d] + end[d];
    if (size < 0)
      throw sdk::invalid(info.describe() + ": pads crop axis " + std::to_string(d) + " below zero");
    if (mode != "constant" && n == 0 && size > 0)
      throw sdk::invalid(info.describe() + ": cannot pad an empty axis in '" + mode + "' mode");
    p.out.push_back(size);
    p.start.push_back(p.map.size());
    for (int64_t j = 0; j < size; ++j) {
      int64_t src = j - begin[d];
      if (src < 0 || src >= n) {
        if (mode == "constant") {
          src = -1;
        } else if (mode == "edge") {
          src = src < 0 ? 0 : n - 1;
        } else if (mode == "wrap") {
          src = ((src % n) + n) % n;
        } else if (n == 1) {  // reflect on a single element repeats it
          src = 0;
        } else {  // reflect (mirror on the edge element, repeatedly)
          const int64_t period = 2 * (n - 1);
          src = ((src % period) + period) % period;
          if (src >= n) src = period - src;
        }
      }
      p.map.push_back(src < 0 ? -1 : src * strides[d]);
    }
  }
  check_output_shape(info, p.out);
  if (rank > 0) {
    // Longest run of the innermost axis that reads consecutive input elements.
    const int64_t n = in[rank - 1];
    p.copy_lo = std::clamp<int64_t>(begin[rank - 1], 0, p.out[rank - 1]);
    p.copy_hi = std::clamp<int64_t>(begin[rank - 1] + n, p.copy_lo, p.out[rank - 1]);
  }
  return std::make_unique<PadKernel<E>>(std::move(p));
}

// The constant value as bytes of dtype `dtype` (opset < 11 gives it as a float).
std::vector<uint8_t> value_bytes(bp_dtype_t dtype, double v, const NodeInfo& info) {
  switch (dtype) {
    case BP_DTYPE_FLOAT32: {
      const float f = static_cast<float>(v);
      return to_bytes(&f, 1);
    }
    case BP_DTYPE_FLOAT16: {
      const uint16_t h = float_to_half(static_cast<float>(v));
      return to_bytes(&h, 1);
    }
    case BP_DTYPE_INT8: {
      const auto x = static_cast<int8_t>(v);
      return to_bytes(&x, 1);
    }
    case BP_DTYPE_UINT8: {
      const auto x = static_cast<uint8_t>(v);
      return to_bytes(&x, 1);
    }
    case BP_DTYPE_INT32: {
      const auto x = static_cast<int32_t>(v);
      return to_bytes(&x, 1);
    }
    case BP_DTYPE_INT64: {
      const auto x = static_cast<int64_t>(v);
      return to_bytes(&x, 1);
    }
    case BP_DTYPE_BOOL: {
      const uint8_t x = v != 0;
      return to_bytes(&x, 1);
    }
    default:
      throw sdk::unsupported(info.describe() + ": dtype " + sdk::dtype_name(dtype) +
                             " is not supported");
  }
}

std::unique_ptr<Kernel> make_pad(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  const std::string mode = info.node.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    throw sdk::unsupported(info.describe() + ": mode '" + mode + "' is not supported");
  Dims pads, axes;
  std::vector<uint8_t> value = value_bytes(info.in_dtypes[0], 0.0, info);
  bool value_at_run = false;
  if (info.node.opset() < 11) {
    pads = info.node.attr_ints("pads");
    value = value_bytes(info.in_dtypes[0], info.node.attr_float("value", 0.0f), info);
  } else {
    require_inputs(info, 2);
    pads = read_int_constant(info, 1, "pads");
    if (info.has_input(2)) {
      if (info.in_dtypes[2] != info.in_dtypes[0])
        throw sdk::invalid(info.describe() + ": constant_value dtype differs from the data dtype");
      if (sdk::element_count(info.in_shapes[2]) != 1)
        throw sdk::invalid(info.describe() + ": constant_value must be a scalar");
      if (info.constant(2) != nullptr) std::memcpy(value.data(), info.constant(2), value.size());
      else value_at_run = true;
    }
    if (info.has_input(3)) axes = read_int_constant(info, 3, "axes");
  }
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  if (pads.size() != 2 * axes.size())
    throw sdk::invalid(info.describe() + ": pads has " + std::to_string(pads.size()) +
                       " entries, expected " + std::to_string(2 * axes.size()));
  Dims begin(in.size(), 0), end(in.size(), 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t axis = normalize_axis(axes[k], rank, info);
    begin[axis] = pads[k];
    end[axis] = pads[k + axes.size()];
  }
  switch (elem_size(info, info.in_dtypes[0])) {
    case 1:
      return build_pad<uint8_t>(info, mode, begin, end, value.data(), value_at_run);
    case 2:
      return build_pad<uint16_t>(info, mode, begin, end, value.data(), value_at_run);
    case 4:
      return build_pad<uint32_t>(info, mode, begin, end, value.data(), value_at_run);
    case 8:
      return build_pad<uint64_t>(info, mode, begin, end, value.data(), value_at_run);
    default:
      throw sdk::unsupported(info.describe() + ": dtype is not supported");
  }
}

// ---------------------------------------------------------------------------
// Range, Trilu
// ---------------------------------------------------------------------------

template <class T>
class RangeKernel final : public Kernel {
 public:
  RangeKernel(int64_t n, const void* start, const void* delta)
      : n_(n), start_(start), delta_(delta) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T start = *static_cast<const T*>(start_ ? start_ : inputs[0]);
    const T delta = *static_cast<const T*>(delta_ ? delta_ : inputs[2]);
    T* out = static_cast<T*>(outputs[0]);
    for (int64_t i = 0; i < n_; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  }

 private:
  int64_t n_;
  const void* start_;  // constant bytes (partition lifetime) or nullptr: read inputs at run time
  const void* delta_;
};

std::unique_ptr<Kernel> make_range(const NodeInfo& info) {
  require_inputs(info, 3);
  const int64_t n = sdk::element_count(info.out_shapes[0]);
  const void* start = info.constant(0);
  const void* delta = info.constant(2);
  switch (info.in_dtypes[0]) {
    case BP_DTYPE_FLOAT32:
      return std::make_unique<RangeKernel<float>>(n, start, delta);
    case BP_DTYPE_FLOAT64:
      return std::make_unique<RangeKernel<double>>(n, start, delta);
    case BP_DTYPE_INT16:
      return std::make_unique<RangeKernel<int16_t>>(n, start, delta);
    case BP_DTYPE_INT32:
      return std::make_unique<RangeKernel<int32_t>>(n, start, delta);
    case BP_DTYPE_INT64:
      return std::make_unique<RangeKernel<int64_t>>(n, start, delta);
    default:
      throw sdk::unsupported(info.describe() + ": dtype " + sdk::dtype_name(info.in_dtypes[0]) +
                             " is not supported (float32, float64, int16, int32, int64)");
  }
}

template <class E>
class TriluKernel final : public Kernel {
 public:
  TriluKernel(int64_t batch, int64_t rows, int64_t cols, bool upper, int64_t k, const void* k_const,
              bool k_at_run, bp_dtype_t k_dtype)
      : batch_(batch),
        rows_(rows),
        cols_(cols),
        upper_(upper),
        k_(k),
        k_const_(k_const),
        k_at_run_(k_at_run),
        k_dtype_(k_dtype) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    int64_t k = k_;
    if (k_const_ != nullptr) k = read_index_scalar(k_const_, k_dtype_);
    else if (k_at_run_) k = read_index_scalar(inputs[1], k_dtype_);
    const E* in = static_cast<const E*>(inputs[0]);
    E* out = static_cast<E*>(outputs[0]);
    for (int64_t b = 0; b < batch_; ++b) {
      for (int64_t i = 0; i < rows_; ++i) {
        const E* src = in + (b * rows_ + i) * cols_;
        E* dst = out + (b * rows_ + i) * cols_;
        for (int64_t j = 0; j < cols_; ++j) {
          const bool keep = upper_ ? (j - i >= k) : (j - i <= k);
          dst[j] = keep ? src[j] : E{0};
        }
      }
    }
  }

 private:
  int64_t batch_, rows_, cols_;
  bool upper_;
  int64_t k_;
  const void* k_const_;
  bool k_at_run_;
  bp_dtype_t k_dtype_;
};

std::unique_ptr<Kernel> make_trilu(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  if (in.size() < 2) throw sdk::invalid(info.describe() + ": input rank must be at least 2");
  const int64_t rows = in[in.size() - 2], cols = in[in.size() - 1];
  const int64_t batch = rows * cols == 0 ? 0 : sdk::element_count(in) / (rows * cols);
  const bool upper = info.node.attr_int("upper", 1) != 0;
  const bool has_k = info.has_input(1);
  const bp_dtype_t k_dtype = has_k ? info.in_dtypes[1] : BP_DTYPE_INT64;
  if (has_k && k_dtype != BP_DTYPE_INT64 && k_dtype != BP_DTYPE_INT32)
    throw sdk::invalid(info.describe() + ": k must be int64");
  const void* k_const = has_k ? info.constant(1) : nullptr;
  const bool k_at_run = has_k && k_const == nullptr;
  return by_elem_size<TriluKernel>(elem_size(info, info.in_dtypes[0]), info, batch, rows, cols,
                                   upper, int64_t{0}, k_const, k_at_run, k_dtype);
}

// ---------------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------------

// Accumulators: double for every float type, int64 for signed and uint64 for
// unsigned integers.
template <class T>
struct AccOf {
  using type = std::conditional_t<
      std::is_floating_point_v<math_t<T>>, double,
      std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>, uint64_t, int64_t>>;
};
template <class T>
using acc_t = typename AccOf<T>::type;

template <class T>
inline acc_t<T> to_acc(T v) {
  return static_cast<acc_t<T>>(load(v));
}
template <class T>
inline T from_acc(acc_t<T> v) {
  return store<T>(v);
}

enum class Reduce { kSum, kMean, kMax, kMin, kProd, kSumSquare, kL1, kL2, kLogSum, kLogSumExp };

template <Reduce R, class A>
constexpr A reduce_init() {
  if constexpr (R == Reduce::kMax)
    return std::is_floating_point_v<A> ? -std::numeric_limits<A>::infinity()
                                       : std::numeric_limits<A>::lowest();
  else if constexpr (R == Reduce::kMin)
    return std::is_floating_point_v<A> ? std::numeric_limits<A>::infinity()
                                       : std::numeric_limits<A>::max();
  else if constexpr (R == Reduce::kProd) return A(1);
  else return A(0);
}

template <Reduce R, class A>
inline A reduce_step(A acc, A x) {
  if constexpr (R == Reduce::kMax) return (x > acc || x != x) ? x : acc;
  else if constexpr (R == Reduce::kMin) return (x < acc || x != x) ? x : acc;
  else if constexpr (R == Reduce::kProd) return acc * x;
  else if constexpr (R == Reduce::kSumSquare || R == Reduce::kL2) return acc + x * x;
  else if constexpr (R == Reduce::kL1) {
    if constexpr (std::is_unsigned_v<A>) return acc + x;
    else return acc + (x < 0 ? -x : x);
  } else if constexpr (R == Reduce::kLogSumExp) {
    return acc + static_cast<A>(std::exp(static_cast<double>(x)));
  } else {
    return acc + x;
  }
}

template <Reduce R, class A>
inline A reduce_finish(A acc, int64_t count) {
  if constexpr (R == Reduce::kMean) {
    if constexpr (std::is_floating_point_v<A>) return acc / static_cast<A>(count);
    else return count == 0 ? 0 : acc / count;
  } else if constexpr (R == Reduce::kL2) {
    return static_cast<A>(std::sqrt(static_cast<double>(acc)));
  } else if constexpr (R == Reduce::kLogSum || R == Reduce::kLogSumExp) {
    return static_cast<A>(std::log(static_cast<double>(acc)));
  } else {
    return acc;
  }
}

// The input is walked in memory order, in rows of its coalesced innermost
// axis; each row either folds into one accumulator (reduced innermost axis) or
// into a run of accumulators (kept innermost axis). Accumulators live in the
// scratch buffer, in double for float types and int64 for integers.
struct ReducePlan {
  std::vector<int64_t> dims;         // coalesced outer dims of the input
  std::vector<int64_t> out_strides;  // accumulator stride of each (0 when reduced)
  int64_t inner = 1;
  bool inner_reduced = false;
  int64_t rows = 1;
  int64_t in_total = 0;
  int64_t out_total = 0;
  int64_t count = 1;  // elements folded into each output
};

template <class T, Reduce R>
class ReduceKernel final : public Kernel {
  using A = acc_t<T>;

 public:
  explicit ReduceKernel(ReducePlan plan) : p_(std::move(plan)) {}
  size_t scratch_bytes() const override { return static_cast<size_t>(p_.out_total) * sizeof(A); }
  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const T* in = static_cast<const T*>(inputs[0]);
    T* out = static_cast<T*>(outputs[0]);
    A* acc = static_cast<A*>(scratch);
    for (int64_t i = 0; i < p_.out_total; ++i) acc[i] = reduce_init<R, A>();
    if (p_.in_total > 0) {
      Odometer od;
      const int rank = static_cast<int>(p_.dims.size());
      int64_t o = 0;
      const int64_t n = p_.inner;
      for (int64_t row = 0; row < p_.rows; ++row) {
        const T* src = in + row * n;
        if (p_.inner_reduced) {
          A a = acc[o];
          for (int64_t i = 0; i < n; ++i) a = reduce_step<R, A>(a, to_acc(src[i]));
          acc[o] = a;
        } else {
          A* dst = acc + o;
          for (int64_t i = 0; i < n; ++i) dst[i] = reduce_step<R, A>(dst[i], to_acc(src[i]));
        }
        for (int d = rank - 1; d >= 0; --d) {
          o += p_.out_strides[d];
          if (++od.idx[d] < p_.dims[d]) break;
          o -= p_.out_strides[d] * p_.dims[d];
          od.idx[d] = 0;
        }
      }
    }
    for (int64_t i = 0; i < p_.out_total; ++i)
      out[i] = from_acc<T>(reduce_finish<R, A>(acc[i], p_.count));
  }

 private:
  ReducePlan p_;
};

ReducePlan make_reduce_plan(const Dims& in, const std::vector<bool>& reduced,
                            const NodeInfo& info) {
  ReducePlan p;
  p.in_total = sdk::element_count(in);
  std::vector<int64_t> dims;
  std::vector<bool> red;
  for (size_t d = 0; d < in.size(); ++d) {
    if (reduced[d]) p.count *= in[d];
    if (in[d] == 1) continue;
    if (!dims.empty() && red.back() == reduced[d]) {
      dims.back() *= in[d];
      continue;
    }
    dims.push_back(in[d]);
    red.push_back(reduced[d]);
  }
  // Accumulator strides: contiguous over the kept dims.
  std::vector<int64_t> strides(dims.size(), 0);
  int64_t s = 1;
  for (size_t d = dims.size(); d-- > 0;) {
    if (red[d]) continue;
    strides[d] = s;
    s *= dims[d];
  }
  p.out_total = s;
  if (!dims.empty()) {
    p.inner = dims.back();
    p.inner_reduced = red.back();
    dims.pop_back();
    strides.pop_back();
  }
  if (dims.size() > kMaxRank) throw sdk::unsupported(info.describe() + ": rank is too large");
  p.dims = std::move(dims);
  p.out_strides = std::move(strides);
  for (int64_t d : p.dims) p.rows *= d;
  if (p.in_total == 0) {
    // Nothing to read; every output gets init/finish.
    p.out_total = sdk::element_count(info.out_shapes[0]);
    p.rows = 0;
  }
  return p;
}

template <Reduce R>
std::unique_ptr<Kernel> make_reduce(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  const bool keepdims = info.node.attr_int("keepdims", 1) != 0;
  const bool noop_empty = info.node.attr_int("noop_with_empty_axes", 0) != 0;
  Dims axes;
  std::vector<bool> reduced(in.size(), false);
  bool have_axes = false, inferred = false;
  if (info.node.has_attr("axes")) {
    axes = info.node.attr_ints("axes");
    have_axes = true;
  } else if (info.has_input(1)) {
    if (info.constant(1) != nullptr) {
      axes = read_int_constant(info, 1, "axes");
      have_axes = true;
    } else if (keepdims && info.out_shapes[0].size() == in.size()) {
      // Non-constant axes with keepdims: the reduced axes are the ones the
      // output collapsed to 1 (reducing an axis that already is 1 is a no-op,
      // so whether it was listed does not matter).
      for (size_t d = 0; d < in.size(); ++d) reduced[d] = info.out_shapes[0][d] == 1 && in[d] != 1;
      inferred = true;
    } else {
      throw sdk::unsupported(info.describe() + ": input 'axes' must be a constant when keepdims=0");
    }
  }
  if (!inferred && (!have_axes || axes.empty())) {
    if (noop_empty) {
      // Axes empty and noop_with_empty_axes: nothing is reduced; each output
      // is the reduction of its one element (x for Sum/Max, x*x for SumSquare).
      reduced.assign(in.size(), false);
    } else {
      reduced.assign(in.size(), true);
    }
  } else if (!inferred) {
    for (int64_t a : axes) reduced[normalize_axis(a, rank, info)] = true;
  }
  Dims expect;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) expect.push_back(in[d]);
    else if (keepdims) expect.push_back(1);
  }
  check_output_shape(info, expect);
  ReducePlan plan = make_reduce_plan(in, reduced, info);
  return dispatch<float, f16, double, bf16, int32_t, int64_t, int8_t, int16_t, uint8_t, uint16_t,
                  uint32_t, uint64_t>(info.in_dtypes[0], info, "input",
                                      [&](auto tag) -> std::unique_ptr<Kernel> {
                                        using T = decltype(tag);
                                        return std::make_unique<ReduceKernel<T, R>>(plan);
                                      });
}

// ArgMax / ArgMin: int64 index of the extreme along one axis.
template <class T, bool kMax>
class ArgKernel final : public Kernel {
 public:
  ArgKernel(int64_t outer, int64_t n, int64_t inner, bool last)
      : outer_(outer), n_(n), inner_(inner), last_(last) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* in = static_cast<const T*>(inputs[0]);
    int64_t* out = static_cast<int64_t*>(outputs[0]);
    for (int64_t o = 0; o < outer_; ++o) {
      for (int64_t i = 0; i < inner_; ++i) {
        const T* p = in + o * n_ * inner_ + i;
        auto best = to_acc(p[0]);
        int64_t at = 0;
        for (int64_t j = 1; j < n_; ++j) {
          const auto v = to_acc(p[j * inner_]);
          const bool better =
              kMax ? (last_ ? v >= best : v > best) : (last_ ? v <= best : v < best);
          if (better) {
            best = v;
            at = j;
          }
        }
        out[o * inner_ + i] = at;
      }
    }
  }

 private:
  int64_t outer_, n_, inner_;
  bool last_;
};

template <bool kMax>
std::unique_ptr<Kernel> make_arg(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t axis = normalize_axis(info.node.attr_int("axis", 0), rank, info);
  const bool keepdims = info.node.attr_int("keepdims", 1) != 0;
  const bool last = info.node.attr_int("select_last_index", 0) != 0;
  if (in[axis] == 0)
    throw sdk::invalid(info.describe() + ": cannot take the arg extreme of an empty axis");
  if (info.out_dtypes[0] != BP_DTYPE_INT64)
    throw sdk::invalid(info.describe() + ": output dtype must be int64");
  Dims expect;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= in[d];
    if (d > axis) inner *= in[d];
    if (d != axis) expect.push_back(in[d]);
    else if (keepdims) expect.push_back(1);
  }
  check_output_shape(info, expect);
  return dispatch<float, f16, double, bf16, int32_t, int64_t, int8_t, int16_t, uint8_t, uint16_t,
                  uint32_t, uint64_t>(
      info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
        return std::make_unique<ArgKernel<decltype(tag), kMax>>(outer, in[axis], inner, last);
      });
}

}  // namespace

void register_tensor_kernels(KernelRegistry& registry) {
  // Data inputs (kernel.hpp): the inputs whose bytes the factory reads.
  registry.add("Reshape", make_reshape, {1});
  registry.add("Flatten", make_copy);
  registry.add("Squeeze", make_copy);
  registry.add("Unsqueeze", make_copy);
  registry.add("Transpose", make_transpose);
  registry.add("Slice", make_slice, {1, 2, 3, 4});
  registry.add("Expand", make_expand, {1});
  registry.add("Tile", make_tile, {1});
  registry.add("Concat", make_concat);
  registry.add("Split", make_split, {1});
  registry.add("Gather", make_gather);
  registry.add("Shape", make_shape);
  registry.add("Size", make_size);
  registry.add("Constant", make_constant);
  registry.add("ConstantOfShape", make_constant_of_shape, {0});
  registry.add("Pad", make_pad, {1, 3});
  registry.add("Range", make_range);
  registry.add("Trilu", make_trilu);
  registry.add("ReduceSum", make_reduce<Reduce::kSum>, {1});
  registry.add("ReduceMean", make_reduce<Reduce::kMean>, {1});
  registry.add("ReduceMax", make_reduce<Reduce::kMax>, {1});
  registry.add("ReduceMin", make_reduce<Reduce::kMin>, {1});
  registry.add("ReduceProd", make_reduce<Reduce::kProd>, {1});
  registry.add("ReduceSumSquare", make_reduce<Reduce::kSumSquare>, {1});
  registry.add("ReduceL1", make_reduce<Reduce::kL1>, {1});
  registry.add("ReduceL2", make_reduce<Reduce::kL2>, {1});
  registry.add("ReduceLogSum", make_reduce<Reduce::kLogSum>, {1});
  registry.add("ReduceLogSumExp", make_reduce<Reduce::kLogSumExp>, {1});
  registry.add("ArgMax", make_arg<true>);
  registry.add("ArgMin", make_arg<false>);
}

}  // namespace backplane::cpuref
