// kernels_control.cpp — NonZero: the kernel whose output shape depends on the
// data it reads (Kernel::run_dynamic).
#include "kernel.hpp"

#include <cstring>

namespace backplane::cpuref {

namespace {

// Whether element k of `data` (of `dtype`) is non-zero: by value, so -0.0 is
// zero and NaN is not.
bool nonzero_at(const void* data, bp_dtype_t dtype, int64_t k) {
  switch (dtype) {
    case BP_DTYPE_FLOAT32:
      return static_cast<const float*>(data)[k] != 0.0f;
    case BP_DTYPE_FLOAT64:
      return static_cast<const double*>(data)[k] != 0.0;
    case BP_DTYPE_FLOAT16:
    case BP_DTYPE_BFLOAT16:
      return (static_cast<const uint16_t*>(data)[k] & 0x7fff) != 0;
    default:
      break;
  }
  const size_t size = sdk::dtype_size(dtype);
  const unsigned char* p = static_cast<const unsigned char*>(data) + static_cast<size_t>(k) * size;
  for (size_t b = 0; b < size; ++b)
    if (p[b] != 0) return true;
  return false;
}

// Y = the indices of X's non-zero elements, int64 [rank, count], row-major
// order. count is known only after reading X: the output comes from the
// allocator (a concrete compile that somehow knows the shape writes in place).
class NonZeroKernel : public Kernel {
 public:
  NonZeroKernel(bp_dtype_t dtype, Dims in, Dims out, std::string node)
      : dtype_(dtype), in_(std::move(in)), out_(std::move(out)), node_(std::move(node)) {}

  bool has_dynamic_outputs() const override { return true; }

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const int64_t count = count_nonzero(inputs[0]);
    if (out_.size() != 2 || out_[1] != count)
      throw sdk::invalid(node_ + ": the output was planned as " + shape_text(out_) +
                         ", the data has " + std::to_string(count) + " non-zero elements");
    write(inputs[0], static_cast<int64_t*>(outputs[0]), count);
  }

  void run_dynamic(const void* const* inputs, void* const*, OutputAllocator& allocator,
                   void*) const override {
    const int64_t count = count_nonzero(inputs[0]);
    void* out = allocator.allocate(0, Dims{static_cast<int64_t>(in_.size()), count});
    write(inputs[0], static_cast<int64_t*>(out), count);
  }

 private:
  static std::string shape_text(const Dims& d) {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
  }
  int64_t count_nonzero(const void* x) const {
    const int64_t n = numel(in_);
    int64_t count = 0;
    for (int64_t k = 0; k < n; ++k) count += nonzero_at(x, dtype_, k) ? 1 : 0;
    return count;
  }
  void write(const void* x, int64_t* y, int64_t count) const {
    const size_t rank = in_.size();
    const int64_t n = numel(in_);
    std::vector<int64_t> index(rank, 0);
    int64_t j = 0;
    for (int64_t k = 0; k < n; ++k) {
      if (nonzero_at(x, dtype_, k)) {
        for (size_t d = 0; d < rank; ++d) y[static_cast<int64_t>(d) * count + j] = index[d];
        ++j;
      }
      for (size_t d = rank; d-- > 0;) {  // the next index, row-major
        if (++index[d] < in_[d]) break;
        index[d] = 0;
      }
    }
  }

  bp_dtype_t dtype_;
  Dims in_, out_;
  std::string node_;
};

}  // namespace

void register_control_kernels(KernelRegistry& registry) {
  registry.add("NonZero", [](const NodeInfo& info) -> std::unique_ptr<Kernel> {
    if (info.in_dtypes.size() != 1 || info.out_dtypes.size() != 1)
      throw sdk::invalid(info.describe() + ": NonZero has one input and one output");
    if (info.out_dtypes[0] != BP_DTYPE_INT64)
      throw sdk::invalid(info.describe() + ": the output must be int64");
    if (sdk::dtype_size(info.in_dtypes[0]) == 0)
      throw sdk::unsupported(info.describe() + ": dtype " + dtype_str(info.in_dtypes[0]) +
                             " is not supported");
    if (info.in_shapes[0].empty())
      throw sdk::unsupported(info.describe() + ": a scalar input is not supported");
    return std::make_unique<NonZeroKernel>(info.in_dtypes[0], info.in_shapes[0], info.out_shapes[0],
                                           info.describe());
  });
}

}  // namespace backplane::cpuref
