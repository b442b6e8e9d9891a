// kernels_indexing.cpp — GatherElements, GatherND, ScatterElements, ScatterND,
// Scatter, OneHot, TopK, Unique, Compress, TfIdfVectorizer. (NonZero is in
// kernels_control.cpp.)
//
// Index values come from data, so every one is checked at run time against
// [-n, n) (ONNX allows negative indices); an index out of range throws
// sdk::invalid naming the node, never reads or writes out of bounds.
//
// Outputs whose size depends on data (TopK with a run-time K, OneHot with a
// run-time depth, Compress with a run-time condition, Unique always) reach
// the factory with -1 dims; their kernels then report has_dynamic_outputs()
// and size the output in run_dynamic (kernel.hpp). When the deciding input is
// a constant the shape is static and run() is used.
#include "kernel.hpp"
#include "kernel_util.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace backplane::cpuref {
namespace {

// Storage type of a bfloat16 element (the high half of a float32).
struct BF16 {
  uint16_t bits;
};

}  // namespace

template <>
constexpr bp_dtype_t dtype_of<BF16>() {
  return BP_DTYPE_BFLOAT16;
}

namespace {

// How an element is computed with: f16/bf16 widen to float, the rest as is.
template <class T>
struct Num {
  using C = T;
  static C load(T v) { return v; }
  static T store(C c) { return c; }
};
template <>
struct Num<f16> {
  using C = float;
  static C load(f16 v) { return half_to_float(v.bits); }
  static f16 store(C c) { return f16{float_to_half(c)}; }
};
template <>
struct Num<BF16> {
  using C = float;
  static C load(BF16 v) {
    const uint32_t bits = static_cast<uint32_t>(v.bits) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    return f;
  }
  static BF16 store(C c) {
    uint32_t bits;
    std::memcpy(&bits, &c, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) return BF16{static_cast<uint16_t>((bits >> 16) | 0x40)};
    bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
    return BF16{static_cast<uint16_t>(bits >> 16)};
  }
};

// A strict weak order on computed values in which NaN sorts after every
// number and equals itself (numpy's sort order), so sorting never sees an
// inconsistent comparison.
template <class C>
bool num_less(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

// Every numeric dtype (with bool for the copy-like ops).
#define BP_NUMERIC_TYPES \
  float, f16, BF16, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

size_t elem_bytes(const NodeInfo& info, bp_dtype_t dtype) {
  const size_t size = sdk::dtype_size(dtype);
  if (size == 0)
    throw sdk::unsupported(info.describe() + ": dtype " + sdk::dtype_name(dtype) +
                           " is not supported");
  return size;
}

Dims strides_of(const Dims& dims) {
  Dims s(dims.size());
  int64_t acc = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    s[i] = acc;
    acc *= dims[i];
  }
  return s;
}

bool has_unknown(const Dims& d) {
  return std::any_of(d.begin(), d.end(), [](int64_t x) { return x < 0; });
}

void expect_shape(const NodeInfo& info, size_t output, const Dims& want) {
  if (info.out_shapes.size() <= output || info.out_shapes[output] != want)
    throw sdk::invalid(info.describe() + ": output " + std::to_string(output) + " has shape " +
                       (info.out_shapes.size() > output ? dims_str(info.out_shapes[output]) : "?") +
                       ", expected " + dims_str(want));
}

// An index of a dim of size n, from [-n, n), made non-negative.
int64_t checked_index(int64_t idx, int64_t n, const std::string& who) {
  if (idx < -n || idx >= n)
    throw sdk::invalid(who + ": index " + std::to_string(idx) + " is out of range for a dim of " +
                       std::to_string(n) + " (expected [" + std::to_string(-n) + ", " +
                       std::to_string(n - 1) + "])");
  return idx < 0 ? idx + n : idx;
}

int64_t load_index(const void* p, bool is64, int64_t i) {
  return is64 ? static_cast<const int64_t*>(p)[i] : static_cast<const int32_t*>(p)[i];
}

bool index_dtype_is64(const NodeInfo& info, size_t i, const char* what) {
  if (info.in_dtypes[i] == BP_DTYPE_INT64) return true;
  if (info.in_dtypes[i] == BP_DTYPE_INT32) return false;
  throw sdk::unsupported(info.describe() + ": " + what + " dtype " +
                         sdk::dtype_name(info.in_dtypes[i]) + " is not supported (int32, int64)");
}

// Copies `bytes` from input 0 to output 0 unless the executor made them one buffer.
void copy_through(const void* in, void* out, size_t bytes) {
  if (bytes != 0 && in != out) std::memcpy(out, in, bytes);
}

// copy_through on the host's threads, a few hundred kB each.
void parallel_copy(const void* in, void* out, size_t bytes) {
  constexpr size_t kChunk = size_t{256} << 10;
  if (bytes <= kChunk || in == out) return copy_through(in, out, bytes);
  sdk::parallel_for((bytes + kChunk - 1) / kChunk, 1, [&](size_t b, size_t e) {
    const size_t from = b * kChunk, to = std::min(bytes, e * kChunk);
    std::memcpy(static_cast<char*>(out) + from, static_cast<const char*>(in) + from, to - from);
  });
}

// ------------------------------------------------------------------------
// GatherElements, ScatterElements, Scatter: one index per element, along axis
// ------------------------------------------------------------------------

// The data offset of each element of `indices` (an odometer over its shape
// whose `axis` coordinate is replaced by the index value).
struct ElementwiseIndexPlan {
  Dims idx_shape;        // shape of indices (and updates / output of gather)
  Dims idx_strides;      // strides of indices
  Dims data_strides;     // strides of data
  int64_t axis = 0;      // normalised
  int64_t axis_dim = 0;  // data.shape[axis]
  // The outermost dim but `axis` of more than one element, -1 if none:
  // elements that differ in it reach different data elements, so a scatter
  // over disjoint ranges of it writes disjoint bytes (for_each_in).
  int64_t split = -1;
  bool is64 = true;
  std::string who;

  // Calls f(k, data_offset) for every element k of indices, a row of the
  // last dim at a time (the odometer moves once per row).
  template <class F>
  void for_each(const void* indices, F&& f) const {
    if (!idx_shape.empty()) for_each_in(indices, 0, 0, idx_shape[0], f);
  }

  // The same for the elements whose coordinate in dim `dim` is in [lo, hi),
  // in the same order.
  template <class F>
  void for_each_in(const void* indices, size_t dim, int64_t lo, int64_t hi, F&& f) const {
    const size_t rank = idx_shape.size();
    int64_t begin[kMaxRank], end[kMaxRank], pos[kMaxRank];
    for (size_t d = 0; d < rank; ++d) {
      begin[d] = d == dim ? lo : 0;
      end[d] = d == dim ? hi : idx_shape[d];
      if (begin[d] >= end[d]) return;
      pos[d] = begin[d];
    }
    const bool along_row = axis == static_cast<int64_t>(rank) - 1;
    const int64_t axis_stride = data_strides[axis], last_stride = data_strides[rank - 1];
    while (true) {
      int64_t k0 = 0, base = 0;  // the row's index and offset, its last and axis dims left out
      for (size_t d = 0; d + 1 < rank; ++d) {
        k0 += pos[d] * idx_strides[d];
        if (static_cast<int64_t>(d) != axis) base += pos[d] * data_strides[d];
      }
      for (int64_t j = begin[rank - 1]; j < end[rank - 1]; ++j) {
        const int64_t at = checked_index(load_index(indices, is64, k0 + j), axis_dim, who);
        f(k0 + j, base + (along_row ? 0 : j * last_stride) + at * axis_stride);
      }
      size_t d = rank - 1;
      while (d-- > 0) {  // advance the odometer over the rows
        if (++pos[d] < end[d]) break;
        pos[d] = begin[d];
      }
      if (d == static_cast<size_t>(-1)) return;
    }
  }

  // for_each, on the host's threads over disjoint ranges of `split` where
  // there is one (each range in for_each's order, so a scatter writes what
  // it would on one thread); on the calling thread otherwise.
  template <class F>
  void parallel_for_each(const void* indices, F&& f) const {
    const int64_t n = numel(idx_shape);
    if (split < 0 || n < kParallelIndices) return for_each(indices, f);
    const int64_t per = n / idx_shape[split];
    sdk::parallel_for(static_cast<size_t>(idx_shape[split]),
                      static_cast<size_t>(std::max<int64_t>(1, kParallelIndices / per)),
                      [&](size_t b, size_t e) {
                        for_each_in(indices, static_cast<size_t>(split), static_cast<int64_t>(b),
                                    static_cast<int64_t>(e), f);
                      });
  }
  static constexpr int64_t kParallelIndices = int64_t{1} << 15;
};

ElementwiseIndexPlan plan_elementwise(const NodeInfo& info, const Dims& data, size_t idx_input) {
  ElementwiseIndexPlan p;
  p.idx_shape = info.in_shapes[idx_input];
  const int64_t rank = static_cast<int64_t>(data.size());
  if (rank == 0 || static_cast<int64_t>(p.idx_shape.size()) != rank)
    throw sdk::invalid(info.describe() + ": indices " + dims_str(p.idx_shape) +
                       " must have the rank of data " + dims_str(data) + " (>= 1)");
  if (static_cast<size_t>(rank) > kMaxRank)
    throw sdk::unsupported(info.describe() + ": rank " + std::to_string(rank) + " is over " +
                           std::to_string(kMaxRank));
  p.axis = normalize_axis(info.node.attr_int("axis", 0), rank, info);
  for (int64_t d = 0; d < rank; ++d)
    if (d != p.axis && p.idx_shape[d] > data[d])
      throw sdk::invalid(info.describe() + ": indices " + dims_str(p.idx_shape) +
                         " are larger than data " + dims_str(data) + " in dim " +
                         std::to_string(d));
  p.data_strides = strides_of(data);
  p.idx_strides = strides_of(p.idx_shape);
  p.axis_dim = data[p.axis];
  for (int64_t d = 0; d < rank && p.split < 0; ++d)
    if (d != p.axis && p.idx_shape[d] > 1) p.split = d;
  p.is64 = index_dtype_is64(info, idx_input, "indices");
  p.who = info.describe();
  return p;
}

class GatherElementsKernel final : public Kernel {
 public:
  GatherElementsKernel(ElementwiseIndexPlan plan, size_t esize)
      : plan_(std::move(plan)), esize_(esize) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const char* data = static_cast<const char*>(inputs[0]);
    char* out = static_cast<char*>(outputs[0]);
    plan_.parallel_for_each(inputs[1], [&](int64_t k, int64_t off) {
      std::memcpy(out + static_cast<size_t>(k) * esize_, data + static_cast<size_t>(off) * esize_,
                  esize_);
    });
  }

 private:
  ElementwiseIndexPlan plan_;
  size_t esize_;
};

std::unique_ptr<Kernel> make_gather_elements(const NodeInfo& info) {
  require_inputs(info, 2);
  ElementwiseIndexPlan plan = plan_elementwise(info, info.in_shapes[0], 1);
  expect_shape(info, 0, plan.idx_shape);
  return std::make_unique<GatherElementsKernel>(std::move(plan),
                                                elem_bytes(info, info.in_dtypes[0]));
}

enum class Reduction { kNone, kAdd, kMul, kMax, kMin };

Reduction reduction_of(const NodeInfo& info) {
  const std::string r = info.node.attr_string("reduction", "none");
  if (r == "none") return Reduction::kNone;
  if (r == "add") return Reduction::kAdd;
  if (r == "mul") return Reduction::kMul;
  if (r == "max") return Reduction::kMax;
  if (r == "min") return Reduction::kMin;
  throw sdk::invalid(info.describe() + ": reduction '" + r + "' is not one of none, add, mul");
}

template <class T>
void reduce_into(T* dst, const T* src, size_t count, Reduction r) {
  using N = Num<T>;
  for (size_t i = 0; i < count; ++i) {
    const auto a = N::load(dst[i]), b = N::load(src[i]);
    switch (r) {
      case Reduction::kNone:
        dst[i] = src[i];
        break;
      case Reduction::kAdd:
        dst[i] = N::store(static_cast<typename N::C>(a + b));
        break;
      case Reduction::kMul:
        dst[i] = N::store(static_cast<typename N::C>(a * b));
        break;
      case Reduction::kMax:
        dst[i] = N::store(num_less(a, b) ? b : a);
        break;
      case Reduction::kMin:
        dst[i] = N::store(num_less(b, a) ? b : a);
        break;
    }
  }
}

// bool: add is "or", mul is "and" (what the arithmetic would give, kept 0/1).
template <>
void reduce_into<bool>(bool* dst, const bool* src, size_t count, Reduction r) {
  for (size_t i = 0; i < count; ++i) {
    switch (r) {
      case Reduction::kNone:
        dst[i] = src[i];
        break;
      case Reduction::kAdd:
      case Reduction::kMax:
        dst[i] = dst[i] || src[i];
        break;
      case Reduction::kMul:
      case Reduction::kMin:
        dst[i] = dst[i] && src[i];
        break;
    }
  }
}

template <class T>
class ScatterElementsKernel final : public Kernel {
 public:
  ScatterElementsKernel(ElementwiseIndexPlan plan, size_t data_bytes, Reduction r)
      : plan_(std::move(plan)), data_bytes_(data_bytes), r_(r) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    // Scattering into data itself, every index is checked before the first
    // write, so that a bad one leaves data as it was; into another buffer,
    // as it goes (the run fails, the output is not read).
    if (inputs[0] == outputs[0]) plan_.parallel_for_each(inputs[1], [](int64_t, int64_t) {});
    else parallel_copy(inputs[0], outputs[0], data_bytes_);
    const T* updates = static_cast<const T*>(inputs[2]);
    T* out = static_cast<T*>(outputs[0]);
    if (r_ == Reduction::kNone)
      plan_.parallel_for_each(inputs[1], [&](int64_t k, int64_t off) { out[off] = updates[k]; });
    else
      plan_.parallel_for_each(inputs[1], [&](int64_t k, int64_t off) {
        reduce_into<T>(out + off, updates + k, 1, r_);
      });
  }

 private:
  ElementwiseIndexPlan plan_;
  size_t data_bytes_;
  Reduction r_;
};

std::unique_ptr<Kernel> make_scatter_elements(const NodeInfo& info) {
  require_inputs(info, 3);
  const Dims& data = info.in_shapes[0];
  if (info.in_shapes[2] != info.in_shapes[1])
    throw sdk::invalid(info.describe() + ": updates " + dims_str(info.in_shapes[2]) +
                       " and indices " + dims_str(info.in_shapes[1]) + " differ in shape");
  if (info.in_dtypes[2] != info.in_dtypes[0])
    throw sdk::invalid(info.describe() + ": updates and data differ in dtype");
  expect_shape(info, 0, data);
  ElementwiseIndexPlan plan = plan_elementwise(info, data, 1);
  const Reduction r = reduction_of(info);
  const size_t bytes = static_cast<size_t>(numel(data)) * elem_bytes(info, info.in_dtypes[0]);
  return dispatch<BP_NUMERIC_TYPES, bool>(info.in_dtypes[0], info, "data", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(
        std::make_unique<ScatterElementsKernel<T>>(std::move(plan), bytes, r));
  });
}

// ------------------------------------------------------------------------
// GatherND, ScatterND: the last dim of indices addresses a slice of data
// ------------------------------------------------------------------------

struct SliceIndexPlan {
  int64_t batches = 1;       // product of the batch dims (GatherND's batch_dims)
  int64_t per_batch = 1;     // index tuples per batch
  int64_t m = 0;             // tuple length
  Dims addressed;            // data dims the tuple addresses (after the batch dims)
  Dims addressed_strides;    // their strides in slices
  int64_t slice = 1;         // elements per addressed slice
  int64_t batch_stride = 1;  // data elements per batch
  std::string who;

  // Calls f(t, data_offset) for every tuple t (in the flat order of indices).
  template <class F>
  void for_each(const int64_t* indices, F&& f) const {
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t j = 0; j < per_batch; ++j) {
        const int64_t t = b * per_batch + j;
        const int64_t* tuple = indices + t * m;
        int64_t off = 0;
        for (int64_t d = 0; d < m; ++d)
          off += checked_index(tuple[d], addressed[d], who) * addressed_strides[d];
        f(t, b * batch_stride + off * slice);
      }
    }
  }
};

SliceIndexPlan plan_slices(const NodeInfo& info, int64_t batch_dims) {
  const Dims& data = info.in_shapes[0];
  const Dims& idx = info.in_shapes[1];
  if (info.in_dtypes[1] != BP_DTYPE_INT64)
    throw sdk::invalid(info.describe() + ": indices must be int64");
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(idx.size());
  if (r < 1 || q < 1 || batch_dims < 0 || batch_dims >= std::min(r, q))
    throw sdk::invalid(info.describe() + ": batch_dims " + std::to_string(batch_dims) +
                       " is out of range for data " + dims_str(data) + " and indices " +
                       dims_str(idx));
  SliceIndexPlan p;
  p.m = idx.back();
  if (p.m < 1 || p.m > r - batch_dims)
    throw sdk::invalid(info.describe() + ": the last dim of indices " + dims_str(idx) +
                       " must be in [1, " + std::to_string(r - batch_dims) + "]");
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (idx[d] != data[d])
      throw sdk::invalid(info.describe() + ": batch dim " + std::to_string(d) + " differs");
    p.batches *= data[d];
  }
  for (int64_t d = batch_dims; d < q - 1; ++d) p.per_batch *= idx[d];
  p.addressed.assign(data.begin() + batch_dims, data.begin() + batch_dims + p.m);
  p.addressed_strides = strides_of(p.addressed);
  for (int64_t d = batch_dims + p.m; d < r; ++d) p.slice *= data[d];
  p.batch_stride = numel(p.addressed) * p.slice;
  p.who = info.describe();
  return p;
}

class GatherNDKernel final : public Kernel {
 public:
  GatherNDKernel(SliceIndexPlan plan, size_t esize) : plan_(std::move(plan)), esize_(esize) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const char* data = static_cast<const char*>(inputs[0]);
    char* out = static_cast<char*>(outputs[0]);
    const size_t bytes = static_cast<size_t>(plan_.slice) * esize_;
    plan_.for_each(static_cast<const int64_t*>(inputs[1]), [&](int64_t t, int64_t off) {
      std::memcpy(out + static_cast<size_t>(t) * bytes, data + static_cast<size_t>(off) * esize_,
                  bytes);
    });
  }

 private:
  SliceIndexPlan plan_;
  size_t esize_;
};

std::unique_ptr<Kernel> make_gather_nd(const NodeInfo& info) {
  require_inputs(info, 2);
  const int64_t b = info.node.attr_int("batch_dims", 0);
  SliceIndexPlan plan = plan_slices(info, b);
  const Dims& data = info.in_shapes[0];
  Dims want(info.in_shapes[1].begin(), info.in_shapes[1].end() - 1);
  want.insert(want.end(), data.begin() + b + plan.m, data.end());
  expect_shape(info, 0, want);
  return std::make_unique<GatherNDKernel>(std::move(plan), elem_bytes(info, info.in_dtypes[0]));
}

template <class T>
class ScatterNDKernel final : public Kernel {
 public:
  ScatterNDKernel(SliceIndexPlan plan, size_t data_bytes, Reduction r)
      : plan_(std::move(plan)), data_bytes_(data_bytes), r_(r) {}
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const int64_t* indices = static_cast<const int64_t*>(inputs[1]);
    plan_.for_each(indices, [](int64_t, int64_t) {});  // every index valid before any write
    copy_through(inputs[0], outputs[0], data_bytes_);
    const T* updates = static_cast<const T*>(inputs[2]);
    T* out = static_cast<T*>(outputs[0]);
    const size_t n = static_cast<size_t>(plan_.slice);
    if (r_ == Reduction::kNone)
      plan_.for_each(indices, [&](int64_t t, int64_t off) {
        std::copy_n(updates + static_cast<size_t>(t) * n, n, out + off);
      });
    else
      plan_.for_each(indices, [&](int64_t t, int64_t off) {
        reduce_into<T>(out + off, updates + static_cast<size_t>(t) * n, n, r_);
      });
  }

 private:
  SliceIndexPlan plan_;
  size_t data_bytes_;
  Reduction r_;
};

std::unique_ptr<Kernel> make_scatter_nd(const NodeInfo& info) {
  require_inputs(info, 3);
  const Dims& data = info.in_shapes[0];
  SliceIndexPlan plan = plan_slices(info, 0);
  Dims want(info.in_shapes[1].begin(), info.in_shapes[1].end() - 1);
  want.insert(want.end(), data.begin() + plan.m, data.end());
  if (info.in_shapes[2] != want)
    throw sdk::invalid(info.describe() + ": updates have shape " + dims_str(info.in_shapes[2]) +
                       ", expected " + dims_str(want));
  if (info.in_dtypes[2] != info.in_dtypes[0])
    throw sdk::invalid(info.describe() + ": updates and data differ in dtype");
  expect_shape(info, 0, data);
  const Reduction r = reduction_of(info);
  const size_t bytes = static_cast<size_t>(numel(data)) * elem_bytes(info, info.in_dtypes[0]);
  return dispatch<BP_NUMERIC_TYPES, bool>(info.in_dtypes[0], info, "data", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(std::make_unique<ScatterNDKernel<T>>(std::move(plan), bytes, r));
  });
}

// ------------------------------------------------------------------------
// OneHot
// ------------------------------------------------------------------------

// A numeric element of any dtype as double (indices and depth may be floats).
double load_number(const void* p, bp_dtype_t dt, int64_t i) {
  switch (dt) {
    case BP_DTYPE_FLOAT32:
      return static_cast<const float*>(p)[i];
    case BP_DTYPE_FLOAT64:
      return static_cast<const double*>(p)[i];
    case BP_DTYPE_FLOAT16:
      return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case BP_DTYPE_BFLOAT16:
      return Num<BF16>::load(static_cast<const BF16*>(p)[i]);
    case BP_DTYPE_INT8:
      return static_cast<const int8_t*>(p)[i];
    case BP_DTYPE_INT16:
      return static_cast<const int16_t*>(p)[i];
    case BP_DTYPE_INT32:
      return static_cast<const int32_t*>(p)[i];
    case BP_DTYPE_INT64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case BP_DTYPE_UINT8:
      return static_cast<const uint8_t*>(p)[i];
    case BP_DTYPE_UINT16:
      return static_cast<const uint16_t*>(p)[i];
    case BP_DTYPE_UINT32:
      return static_cast<const uint32_t*>(p)[i];
    case BP_DTYPE_UINT64:
      return static_cast<double>(static_cast<const uint64_t*>(p)[i]);
    default:
      return std::nan("");
  }
}

bool is_numeric(bp_dtype_t dt) {
  switch (dt) {
    case BP_DTYPE_FLOAT32:
    case BP_DTYPE_FLOAT64:
    case BP_DTYPE_FLOAT16:
    case BP_DTYPE_BFLOAT16:
    case BP_DTYPE_INT8:
    case BP_DTYPE_INT16:
    case BP_DTYPE_INT32:
    case BP_DTYPE_INT64:
    case BP_DTYPE_UINT8:
    case BP_DTYPE_UINT16:
    case BP_DTYPE_UINT32:
    case BP_DTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// OneHot's depth (any numeric dtype; a float is truncated), checked.
int64_t read_depth(const void* p, bp_dtype_t dt, const std::string& who) {
  const double d = load_number(p, dt, 0);
  if (!(d >= 1) || d > static_cast<double>(int64_t{1} << 40))
    throw sdk::invalid(who + ": depth " + std::to_string(d) + " must be a positive number");
  return static_cast<int64_t>(d);
}

// An integer index held in any numeric dtype; floats are truncated (ONNX).
int64_t load_int_like(const void* p, bp_dtype_t dt, int64_t i) {
  if (dt == BP_DTYPE_INT64) return static_cast<const int64_t*>(p)[i];
  if (dt == BP_DTYPE_UINT64) {
    const uint64_t u = static_cast<const uint64_t*>(p)[i];
    return u > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(u);
  }
  const double v = load_number(p, dt, i);
  if (!(v > -9.2e18 && v < 9.2e18)) return v < 0 ? INT64_MIN : INT64_MAX;  // NaN too
  return static_cast<int64_t>(v);
}

class OneHotKernel final : public Kernel {
 public:
  OneHotKernel(const NodeInfo& info, Dims indices_shape, int64_t axis, int64_t depth)
      : in_shape_(std::move(indices_shape)),
        axis_(axis),
        depth_(depth),
        idx_dtype_(info.in_dtypes[0]),
        depth_dtype_(info.in_dtypes[1]),
        esize_(elem_bytes(info, info.in_dtypes[2])),
        who_(info.describe()) {
    for (int64_t d = 0; d < static_cast<int64_t>(in_shape_.size()); ++d)
      (d < axis_ ? outer_ : inner_) *= in_shape_[d];
  }
  bool has_dynamic_outputs() const override { return depth_ < 0; }
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    // Planned for the depth the shape was inferred with; a run-time depth
    // (a polymorphic partition) must still agree with it.
    const int64_t given = read_depth(inputs[1], depth_dtype_, who_);
    if (given != depth_)
      throw sdk::invalid(who_ + ": depth " + std::to_string(given) +
                         " differs from the depth the output shape was planned for (" +
                         std::to_string(depth_) + ")");
    fill(inputs, outputs[0], depth_);
  }
  void run_dynamic(const void* const* inputs, void* const* outputs, OutputAllocator& allocator,
                   void*) const override {
    const int64_t depth = depth_ >= 0 ? depth_ : read_depth(inputs[1], depth_dtype_, who_);
    Dims out = in_shape_;
    out.insert(out.begin() + axis_, depth);
    void* dst = outputs[0] != nullptr ? outputs[0] : allocator.allocate(0, out);
    fill(inputs, dst, depth);
  }

 private:
  void fill(const void* const* inputs, void* out, int64_t depth) const {
    const char* values = static_cast<const char*>(inputs[2]);  // [off, on]
    char* o = static_cast<char*>(out);
    const int64_t total = outer_ * depth * inner_;
    for (int64_t k = 0; k < total; ++k)
      std::memcpy(o + static_cast<size_t>(k) * esize_, values, esize_);
    for (int64_t a = 0; a < outer_; ++a)
      for (int64_t b = 0; b < inner_; ++b) {
        int64_t idx = load_int_like(inputs[0], idx_dtype_, a * inner_ + b);
        if (idx < 0 && idx >= -depth) idx += depth;
        if (idx < 0 || idx >= depth) continue;  // out of range: all off (ONNX)
        std::memcpy(o + static_cast<size_t>((a * depth + idx) * inner_ + b) * esize_,
                    values + esize_, esize_);
      }
  }

  Dims in_shape_;
  int64_t axis_, depth_;
  bp_dtype_t idx_dtype_, depth_dtype_;
  size_t esize_;
  int64_t outer_ = 1, inner_ = 1;
  std::string who_;
};

std::unique_ptr<Kernel> make_one_hot(const NodeInfo& info) {
  require_inputs(info, 3);
  for (size_t i = 0; i < 2; ++i)
    if (!is_numeric(info.in_dtypes[i]))
      throw sdk::unsupported(info.describe() + ": input " + std::to_string(i) + " dtype " +
                             sdk::dtype_name(info.in_dtypes[i]) + " is not supported");
  if (numel(info.in_shapes[2]) != 2 || numel(info.in_shapes[1]) != 1)
    throw sdk::invalid(info.describe() + ": values must hold 2 elements and depth 1");
  const Dims& in = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(in.size());
  const int64_t axis = normalize_axis(info.node.attr_int("axis", -1), rank + 1, info);
  const Dims& out = info.out_shapes[0];
  int64_t depth = out.size() == static_cast<size_t>(rank + 1) ? out[axis] : -1;
  if (const void* c = info.constant(1)) depth = read_depth(c, info.in_dtypes[1], info.describe());
  if (depth >= 0) {
    Dims want = in;
    want.insert(want.begin() + axis, depth);
    expect_shape(info, 0, want);
  }
  return std::make_unique<OneHotKernel>(info, in, axis, depth);
}

// ------------------------------------------------------------------------
// TopK
// ------------------------------------------------------------------------

template <class T>
class TopKKernel final : public Kernel {
  using C = typename Num<T>::C;
  struct Entry {
    C v;
    int64_t i;
  };

 public:
  TopKKernel(Dims shape, int64_t axis, int64_t k, bool k_input, bool largest, std::string who)
      : shape_(std::move(shape)),
        axis_(axis),
        k_(k),
        k_input_(k_input),
        largest_(largest),
        who_(std::move(who)) {
    const auto s = split_at_axis(shape_, axis_);
    outer_ = s.outer;
    inner_ = s.inner;
    n_ = shape_[axis_];
  }
  size_t scratch_bytes() const override { return static_cast<size_t>(n_) * sizeof(Entry); }
  bool has_dynamic_outputs() const override { return k_ < 0; }
  void run(const void* const* inputs, void* const* outputs, void* scratch) const override {
    const int64_t k = k_;
    if (k_input_) {
      const int64_t given = *static_cast<const int64_t*>(inputs[1]);
      if (given != k_)
        throw sdk::invalid(who_ + ": K = " + std::to_string(given) +
                           " differs from the k the output shape was planned for (" +
                           std::to_string(k_) + ")");
    }
    compute(inputs[0], k, outputs[0], outputs[1], scratch);
  }
  void run_dynamic(const void* const* inputs, void* const* outputs, OutputAllocator& allocator,
                   void* scratch) const override {
    int64_t k = k_;
    if (k < 0) {
      k = *static_cast<const int64_t*>(inputs[1]);
      if (k < 0 || k > n_)
        throw sdk::invalid(who_ + ": K = " + std::to_string(k) + " is out of range for axis " +
                           std::to_string(axis_) + " of size " + std::to_string(n_));
    }
    Dims out = shape_;
    out[axis_] = k;
    void* values = outputs[0] != nullptr ? outputs[0] : allocator.allocate(0, out);
    void* indices = outputs[1] != nullptr ? outputs[1] : allocator.allocate(1, out);
    compute(inputs[0], k, values, indices, scratch);
  }

 private:
  void compute(const void* x_ptr, int64_t k, void* values_ptr, void* indices_ptr,
               void* scratch) const {
    const T* x = static_cast<const T*>(x_ptr);
    T* values = static_cast<T*>(values_ptr);
    int64_t* indices = static_cast<int64_t*>(indices_ptr);
    Entry* e = static_cast<Entry*>(scratch);
    // Ties go to the lower index, as ONNX specifies; NaN counts as the largest.
    auto better = [&](const Entry& a, const Entry& b) {
      if (largest_) {
        if (num_less(b.v, a.v)) return true;
        if (num_less(a.v, b.v)) return false;
      } else {
        if (num_less(a.v, b.v)) return true;
        if (num_less(b.v, a.v)) return false;
      }
      return a.i < b.i;
    };
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t in = 0; in < inner_; ++in) {
        const int64_t base = o * n_ * inner_ + in;
        for (int64_t j = 0; j < n_; ++j) e[j] = Entry{Num<T>::load(x[base + j * inner_]), j};
        std::partial_sort(e, e + k, e + n_, better);
        const int64_t obase = o * k * inner_ + in;
        for (int64_t j = 0; j < k; ++j) {
          values[obase + j * inner_] = x[base + e[j].i * inner_];
          if (indices != nullptr) indices[obase + j * inner_] = e[j].i;
        }
      }
  }

  Dims shape_;
  int64_t axis_, k_;
  bool k_input_;  // opset 10 on: K is input 1 (before: the `k` attribute)
  bool largest_;
  std::string who_;
  int64_t outer_ = 1, inner_ = 1, n_ = 0;
};

std::unique_ptr<Kernel> make_top_k(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& x = info.in_shapes[0];
  const int64_t axis =
      normalize_axis(info.node.attr_int("axis", -1), static_cast<int64_t>(x.size()), info);
  int64_t k = -1;
  if (info.node.opset() < 10) {
    k = info.node.attr_int("k", -1);
  } else {
    if (!info.has_input(1) || info.in_dtypes[1] != BP_DTYPE_INT64 || numel(info.in_shapes[1]) != 1)
      throw sdk::invalid(info.describe() + ": K must be an int64 tensor of one element");
    if (const void* c = info.constant(1)) k = *static_cast<const int64_t*>(c);
    else if (!has_unknown(info.out_shapes[0])) k = info.out_shapes[0][axis];
  }
  if (k >= 0 || info.constant(1) != nullptr) {
    if (k < 0 || k > x[axis])
      throw sdk::invalid(info.describe() + ": k = " + std::to_string(k) +
                         " is out of range for axis " + std::to_string(axis) + " of size " +
                         std::to_string(x[axis]));
    Dims want = x;
    want[axis] = k;
    expect_shape(info, 0, want);
  }
  const bool largest = info.node.attr_int("largest", 1) != 0;
  return dispatch<float, f16, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                  uint32_t, uint64_t>(info.in_dtypes[0], info, "X", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(std::make_unique<TopKKernel<T>>(
        x, axis, k, info.node.opset() >= 10, largest, info.describe()));
  });
}

// ------------------------------------------------------------------------
// Unique
// ------------------------------------------------------------------------

// Items are elements (no axis) or slices along the axis, compared
// lexicographically in the order numpy.unique(axis=...) uses.
template <class T>
class UniqueKernel final : public Kernel {
  using C = typename Num<T>::C;

 public:
  UniqueKernel(Dims shape, int64_t axis, bool sorted, std::vector<bool> present, std::string who)
      : shape_(std::move(shape)),
        axis_(axis),
        sorted_(sorted),
        present_(std::move(present)),
        who_(std::move(who)) {
    if (axis_ < 0) {
      items_ = numel(shape_);
    } else {
      const auto s = split_at_axis(shape_, axis_);
      outer_ = s.outer;
      inner_ = s.inner;
      items_ = shape_[axis_];
    }
  }
  // order, group of each sorted item, first item of each group, count of
  // each group, output rank of each group, groups in output order.
  size_t scratch_bytes() const override {
    return static_cast<size_t>(items_) * 6 * sizeof(int64_t);
  }
  bool has_dynamic_outputs() const override { return true; }
  void run(const void* const*, void* const*, void*) const override {
    throw sdk::invalid(who_ + ": its output shapes depend on data; it runs through run_dynamic");
  }
  void run_dynamic(const void* const* inputs, void* const* outputs, OutputAllocator& allocator,
                   void* scratch) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    const int64_t n = items_;
    int64_t* order = static_cast<int64_t*>(scratch);
    int64_t* first = order + n;
    int64_t* count = first + n;
    int64_t* rank = count + n;
    int64_t* out_order = rank + n;
    int64_t* group_of = out_order + n;
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    // Ties broken by position: equal items keep their input order, so a
    // group's first entry is its first occurrence.
    std::sort(order, order + n, [&](int64_t a, int64_t b) {
      const int c = compare(x, a, b);
      return c != 0 ? c < 0 : a < b;
    });
    int64_t groups = 0;
    for (int64_t s = 0; s < n; ++s) {
      if (s == 0 || compare(x, order[s - 1], order[s]) != 0) {
        first[groups] = order[s];
        count[groups] = 0;
        ++groups;
      }
      ++count[groups - 1];
      group_of[order[s]] = groups - 1;
    }
    for (int64_t g = 0; g < groups; ++g) out_order[g] = g;
    if (!sorted_)
      std::sort(out_order, out_order + groups,
                [&](int64_t a, int64_t b) { return first[a] < first[b]; });
    for (int64_t r = 0; r < groups; ++r) rank[out_order[r]] = r;

    Dims y_shape{groups};
    if (axis_ >= 0) {
      y_shape = shape_;
      y_shape[axis_] = groups;
    }
    T* y = static_cast<T*>(output(outputs, allocator, 0, y_shape));
    for (int64_t r = 0; r < groups; ++r) copy_item(x, first[out_order[r]], y, r, groups);
    if (auto* idx = static_cast<int64_t*>(output(outputs, allocator, 1, {groups})))
      for (int64_t r = 0; r < groups; ++r) idx[r] = first[out_order[r]];
    if (auto* inv = static_cast<int64_t*>(output(outputs, allocator, 2, {n})))
      for (int64_t i = 0; i < n; ++i) inv[i] = rank[group_of[i]];
    if (auto* cnt = static_cast<int64_t*>(output(outputs, allocator, 3, {groups})))
      for (int64_t r = 0; r < groups; ++r) cnt[r] = count[out_order[r]];
  }

 private:
  void* output(void* const* outputs, OutputAllocator& allocator, size_t i, const Dims& d) const {
    if (i >= present_.size() || !present_[i]) return nullptr;
    return outputs[i] != nullptr ? outputs[i] : allocator.allocate(i, d);
  }
  C at(const T* x, int64_t item, int64_t o, int64_t in) const {
    return Num<T>::load(x[(o * items_ + item) * inner_ + in]);
  }
  int compare(const T* x, int64_t a, int64_t b) const {
    if (axis_ < 0) {
      const C va = Num<T>::load(x[a]), vb = Num<T>::load(x[b]);
      return num_less(va, vb) ? -1 : num_less(vb, va) ? 1 : 0;
    }
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t in = 0; in < inner_; ++in) {
        const C va = at(x, a, o, in), vb = at(x, b, o, in);
        if (num_less(va, vb)) return -1;
        if (num_less(vb, va)) return 1;
      }
    return 0;
  }
  void copy_item(const T* x, int64_t item, T* y, int64_t r, int64_t groups) const {
    if (axis_ < 0) {
      y[r] = x[item];
      return;
    }
    for (int64_t o = 0; o < outer_; ++o)
      std::memcpy(y + (o * groups + r) * inner_, x + (o * items_ + item) * inner_,
                  static_cast<size_t>(inner_) * sizeof(T));
  }

  Dims shape_;
  int64_t axis_;
  bool sorted_;
  std::vector<bool> present_;
  std::string who_;
  int64_t items_ = 0, outer_ = 1, inner_ = 1;
};

std::unique_ptr<Kernel> make_unique_op(const NodeInfo& info) {
  require_inputs(info, 1);
  const Dims& x = info.in_shapes[0];
  int64_t axis = -1;
  if (info.node.has_attr("axis"))
    axis = normalize_axis(info.node.attr_int("axis", 0), static_cast<int64_t>(x.size()), info);
  const int64_t sorted = info.node.attr_int("sorted", 1);
  if (sorted != 0 && sorted != 1) throw sdk::invalid(info.describe() + ": sorted must be 0 or 1");
  std::vector<bool> present;
  for (bp_dtype_t d : info.out_dtypes) present.push_back(d != BP_DTYPE_UNDEFINED);
  return dispatch<BP_NUMERIC_TYPES, bool>(info.in_dtypes[0], info, "X", [&](auto t) {
    using T = decltype(t);
    return std::unique_ptr<Kernel>(
        std::make_unique<UniqueKernel<T>>(x, axis, sorted != 0, present, info.describe()));
  });
}

// ------------------------------------------------------------------------
// Compress
// ------------------------------------------------------------------------

class CompressKernel final : public Kernel {
 public:
  CompressKernel(Dims shape, int64_t axis, int64_t cond_len, int64_t kept, size_t esize,
                 std::string who)
      : shape_(std::move(shape)),
        axis_(axis),
        cond_len_(cond_len),
        kept_(kept),
        esize_(esize),
        who_(std::move(who)) {
    if (axis_ < 0) {
      len_ = numel(shape_);
    } else {
      const auto s = split_at_axis(shape_, axis_);
      outer_ = s.outer;
      inner_ = s.inner;
      len_ = shape_[axis_];
    }
  }
  bool has_dynamic_outputs() const override { return kept_ < 0; }
  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const int64_t kept = count(inputs[1]);
    if (kept != kept_)
      throw sdk::invalid(who_ + ": the condition selects " + std::to_string(kept) +
                         " slices, the output was planned for " + std::to_string(kept_));
    copy(inputs, outputs[0]);
  }
  void run_dynamic(const void* const* inputs, void* const* outputs, OutputAllocator& allocator,
                   void*) const override {
    const int64_t kept = count(inputs[1]);
    Dims out{kept};
    if (axis_ >= 0) {
      out = shape_;
      out[axis_] = kept;
    }
    copy(inputs, outputs[0] != nullptr ? outputs[0] : allocator.allocate(0, out));
  }

 private:
  // Selected slices; a condition longer than the axis may only be false
  // past its end (numpy.compress).
  int64_t count(const void* cond) const {
    const uint8_t* c = static_cast<const uint8_t*>(cond);
    int64_t n = 0;
    for (int64_t j = 0; j < cond_len_; ++j) {
      if (c[j] == 0) continue;
      if (j >= len_)
        throw sdk::invalid(who_ + ": condition selects index " + std::to_string(j) +
                           ", out of range for a length of " + std::to_string(len_));
      ++n;
    }
    return n;
  }
  void copy(const void* const* inputs, void* out) const {
    const char* x = static_cast<const char*>(inputs[0]);
    const uint8_t* c = static_cast<const uint8_t*>(inputs[1]);
    char* o = static_cast<char*>(out);
    const size_t block = static_cast<size_t>(inner_) * esize_;
    for (int64_t a = 0; a < outer_; ++a)
      for (int64_t j = 0; j < std::min(cond_len_, len_); ++j)
        if (c[j] != 0) {
          std::memcpy(o, x + static_cast<size_t>(a * len_ + j) * block, block);
          o += block;
        }
  }

  Dims shape_;
  int64_t axis_, cond_len_, kept_;
  size_t esize_;
  std::string who_;
  int64_t outer_ = 1, inner_ = 1, len_ = 0;
};

std::unique_ptr<Kernel> make_compress(const NodeInfo& info) {
  require_inputs(info, 2);
  const Dims& x = info.in_shapes[0];
  if (info.in_dtypes[1] != BP_DTYPE_BOOL || info.in_shapes[1].size() != 1)
    throw sdk::invalid(info.describe() + ": condition must be a 1-D bool tensor");
  int64_t axis = -1, len = numel(x);
  if (info.node.has_attr("axis")) {
    axis = normalize_axis(info.node.attr_int("axis", 0), static_cast<int64_t>(x.size()), info);
    len = x[axis];
  }
  const int64_t cond_len = info.in_shapes[1][0];
  int64_t kept = -1;
  if (const void* c = info.constant(1)) {
    kept = 0;
    for (int64_t j = 0; j < cond_len; ++j) {
      if (static_cast<const uint8_t*>(c)[j] == 0) continue;
      if (j >= len)
        throw sdk::invalid(info.describe() + ": condition selects index " + std::to_string(j) +
                           ", out of range for a length of " + std::to_string(len));
      ++kept;
    }
  } else if (!has_unknown(info.out_shapes[0])) {
    kept = axis < 0 ? info.out_shapes[0][0] : info.out_shapes[0][axis];
  }
  if (kept >= 0) {
    Dims want{kept};
    if (axis >= 0) {
      want = x;
      want[axis] = kept;
    }
    expect_shape(info, 0, want);
  }
  return std::make_unique<CompressKernel>(x, axis, cond_len, kept,
                                          elem_bytes(info, info.in_dtypes[0]), info.describe());
}

// ------------------------------------------------------------------------
// TfIdfVectorizer (integer pools)
// ------------------------------------------------------------------------

// The pool's n-grams as a trie: a path of items from the root spells an
// n-gram prefix; `id` >= 0 where a pool n-gram ends.
struct NgramTrie {
  struct Node {
    std::vector<std::pair<int64_t, int32_t>> children;  // (item, node), sorted by item
    int64_t id = -1;
  };
  std::vector<Node> nodes{Node{}};

  int32_t child(int32_t node, int64_t item) const {
    const auto& c = nodes[node].children;
    auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(item, INT32_MIN));
    return it != c.end() && it->first == item ? it->second : -1;
  }
  void insert(const int64_t* gram, int64_t n, int64_t id) {
    int32_t node = 0;
    for (int64_t i = 0; i < n; ++i) {
      int32_t next = child(node, gram[i]);
      if (next < 0) {
        next = static_cast<int32_t>(nodes.size());
        nodes.emplace_back();
        auto& c = nodes[node].children;
        c.insert(std::lower_bound(c.begin(), c.end(), std::make_pair(gram[i], INT32_MIN)),
                 {gram[i], next});
      }
      node = next;
    }
    nodes[node].id = id;
  }
};

class TfIdfKernel final : public Kernel {
 public:
  enum class Mode { kTF, kIDF, kTFIDF };
  TfIdfKernel(NgramTrie trie, std::vector<int64_t> out_index, std::vector<float> weight_at,
              Mode mode, int64_t min_gram, int64_t max_gram, int64_t max_skip, int64_t rows,
              int64_t row_len, int64_t width, bool is64)
      : trie_(std::move(trie)),
        out_index_(std::move(out_index)),
        weight_at_(std::move(weight_at)),
        mode_(mode),
        min_gram_(min_gram),
        max_gram_(max_gram),
        max_skip_(max_skip),
        rows_(rows),
        row_len_(row_len),
        width_(width),
        is64_(is64) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    float* y = static_cast<float*>(outputs[0]);
    std::fill(y, y + rows_ * width_, 0.0f);
    for (int64_t r = 0; r < rows_; ++r) count_row(inputs[0], r * row_len_, y + r * width_);
    if (mode_ == Mode::kTF) return;
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t j = 0; j < width_; ++j) {
        float& v = y[r * width_ + j];
        const float w = weight_at_.empty() ? 1.0f : weight_at_[j];
        v = mode_ == Mode::kIDF ? (v > 0 ? w : 0.0f) : v * w;
      }
  }

 private:
  // Counts n-grams of lengths [min_gram, max_gram] whose items are `skip + 1`
  // apart, for every skip up to max_skip; unigrams only once (skip 0).
  void count_row(const void* x, int64_t base, float* out) const {
    int64_t first_n = min_gram_;
    for (int64_t step = 1; step <= max_skip_ + 1; ++step) {
      for (int64_t start = 0; start < row_len_; ++start) {
        if (start + step * (first_n - 1) >= row_len_) break;
        int32_t node = 0;
        for (int64_t n = 1; n <= max_gram_; ++n) {
          const int64_t pos = start + (n - 1) * step;
          if (pos >= row_len_) break;
          node = trie_.child(node, load_index(x, is64_, base + pos));
          if (node < 0) break;
          const int64_t id = trie_.nodes[node].id;
          if (n >= first_n && id >= 0) out[out_index_[id]] += 1.0f;
        }
      }
      if (first_n == 1) {
        if (++first_n > max_gram_) break;
      }
    }
  }

  NgramTrie trie_;
  std::vector<int64_t> out_index_;
  std::vector<float> weight_at_;
  Mode mode_;
  int64_t min_gram_, max_gram_, max_skip_, rows_, row_len_, width_;
  bool is64_;
};

std::unique_ptr<Kernel> make_tfidf(const NodeInfo& info) {
  require_inputs(info, 1);
  const auto fail = [&](const std::string& m) { return sdk::invalid(info.describe() + ": " + m); };
  if (info.node.has_attr("pool_strings"))
    throw sdk::unsupported(info.describe() + ": pool_strings (string tensors) is not supported");
  const bool is64 = index_dtype_is64(info, 0, "X");
  const Dims& x = info.in_shapes[0];
  if (x.size() != 1 && x.size() != 2) throw fail("X must be 1-D or 2-D");
  const std::string mode_s = info.node.attr_string("mode", "");
  TfIdfKernel::Mode mode;
  if (mode_s == "TF") mode = TfIdfKernel::Mode::kTF;
  else if (mode_s == "IDF") mode = TfIdfKernel::Mode::kIDF;
  else if (mode_s == "TFIDF") mode = TfIdfKernel::Mode::kTFIDF;
  else throw fail("mode '" + mode_s + "' is not one of TF, IDF, TFIDF");
  const int64_t min_gram = info.node.attr_int("min_gram_length", 0);
  const int64_t max_gram = info.node.attr_int("max_gram_length", 0);
  const int64_t max_skip = info.node.attr_int("max_skip_count", 0);
  if (min_gram < 1 || max_gram < min_gram || max_skip < 0)
    throw fail("needs 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0");
  const std::vector<int64_t> counts = info.node.attr_ints("ngram_counts");
  const std::vector<int64_t> indexes = info.node.attr_ints("ngram_indexes");
  const std::vector<int64_t> pool = info.node.attr_ints("pool_int64s");
  const std::vector<float> weights = info.node.attr_floats("weights");
  NgramTrie trie;
  int64_t id = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t n = static_cast<int64_t>(g) + 1;
    const int64_t start = counts[g];
    const int64_t end = g + 1 < counts.size() ? counts[g + 1] : static_cast<int64_t>(pool.size());
    if (start < 0 || end < start || end > static_cast<int64_t>(pool.size()) ||
        (end - start) % n != 0)
      throw fail("ngram_counts does not split pool_int64s into whole n-grams");
    for (int64_t p = start; p < end; p += n) trie.insert(pool.data() + p, n, id++);
  }
  if (static_cast<int64_t>(indexes.size()) != id)
    throw fail("ngram_indexes has " + std::to_string(indexes.size()) + " entries for " +
               std::to_string(id) + " n-grams");
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != id)
    throw fail("weights has " + std::to_string(weights.size()) + " entries for " +
               std::to_string(id) + " n-grams");
  int64_t width = 0;
  for (int64_t i : indexes) {
    if (i < 0) throw fail("ngram_indexes holds a negative index");
    width = std::max(width, i + 1);
  }
  // The weight of pool n-gram i scales output coordinate ngram_indexes[i].
  std::vector<float> weight_at;
  if (!weights.empty()) {
    weight_at.assign(static_cast<size_t>(width), 1.0f);
    for (size_t i = 0; i < indexes.size(); ++i) weight_at[indexes[i]] = weights[i];
  }
  const int64_t rows = x.size() == 2 ? x[0] : 1;
  const int64_t row_len = x.back();
  expect_shape(info, 0, x.size() == 2 ? Dims{rows, width} : Dims{width});
  return std::make_unique<TfIdfKernel>(std::move(trie), indexes, std::move(weight_at), mode,
                                       min_gram, max_gram, max_skip, rows, row_len, width, is64);
}

#undef BP_NUMERIC_TYPES

}  // namespace

void register_indexing_kernels(KernelRegistry& registry) {
  registry.add("GatherElements", make_gather_elements);
  registry.add("GatherND", make_gather_nd);
  registry.add("ScatterElements", make_scatter_elements);
  registry.add("Scatter", make_scatter_elements);
  registry.add("ScatterND", make_scatter_nd);
  registry.add("OneHot", make_one_hot);
  registry.add("TopK", make_top_k);
  registry.add("Unique", make_unique_op);
  registry.add("Compress", make_compress);
  registry.add("TfIdfVectorizer", make_tfidf);
}

}  // namespace backplane::cpuref
