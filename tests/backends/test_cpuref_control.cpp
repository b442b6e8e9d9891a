// CpuRef kernel tests: NonZero, the kernel whose output shape depends on the
// data (Kernel::run_dynamic hands the shape to an allocator).
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

namespace backplane::cpuref {
namespace {

using namespace test_harness;

// Memory for the outputs a kernel reports, recording their shapes.
struct RecordingAllocator : OutputAllocator {
  void* allocate(size_t i, const Dims& dims) override {
    if (i >= dims_.size()) {
      dims_.resize(i + 1);
      bytes_.resize(i + 1);
    }
    dims_[i] = dims;
    bytes_[i].assign(static_cast<size_t>(numel(dims)) * sizeof(int64_t) + 1, 0);
    return bytes_[i].data();
  }
  std::vector<int64_t> values(size_t i) const {
    std::vector<int64_t> v(static_cast<size_t>(numel(dims_[i])));
    if (!v.empty()) std::memcpy(v.data(), bytes_[i].data(), v.size() * sizeof(int64_t));
    return v;
  }
  std::vector<Dims> dims_;
  std::vector<std::vector<uint8_t>> bytes_;
};

std::pair<Dims, std::vector<int64_t>> run_nonzero(const OpTest& t, const TensorSpec& x) {
  std::unique_ptr<Kernel> k = t.kernel();
  EXPECT_TRUE(k->has_dynamic_outputs());
  RecordingAllocator alloc;
  const void* in[] = {x.bytes.data()};
  void* out[] = {nullptr};
  k->run_dynamic(in, out, alloc, nullptr);
  if (alloc.dims_.empty()) {
    ADD_FAILURE() << "NonZero did not allocate its output";
    return {};
  }
  return {alloc.dims_[0], alloc.values(0)};
}

TEST(CpuRefControl, NonZeroReportsItsShapeAndIndicesInRowMajorOrder) {
  const TensorSpec x = f32({2, 3}, {0, 1.5f, 0, -2, 0, 3});
  OpTest t("NonZero", 13, {x}, {{BP_DTYPE_INT64, {2, -1}}});
  auto [dims, v] = run_nonzero(t, x);
  EXPECT_EQ(dims, (Dims{2, 3}));
  EXPECT_EQ(v, (std::vector<int64_t>{0, 1, 1, 1, 0, 2}));
}

TEST(CpuRefControl, NonZeroCountsByValueForEveryDtype) {
  {  // -0.0 is zero, NaN is not.
    const TensorSpec x = f32({4}, {-0.0f, 0.0f, std::numeric_limits<float>::quiet_NaN(), 1});
    OpTest t("NonZero", 13, {x}, {{BP_DTYPE_INT64, {1, -1}}});
    auto [dims, v] = run_nonzero(t, x);
    EXPECT_EQ(dims, (Dims{1, 2}));
    EXPECT_EQ(v, (std::vector<int64_t>{2, 3}));
  }
  {  // float16 -0.
    const TensorSpec x = f16({3}, {-0.0f, 2, 0});
    OpTest t("NonZero", 13, {x}, {{BP_DTYPE_INT64, {1, -1}}});
    EXPECT_EQ(run_nonzero(t, x).second, (std::vector<int64_t>{1}));
  }
  {  // bool and int64, 3-D, none at all.
    const TensorSpec b = b8({1, 2, 2}, {0, 1, 1, 0});
    OpTest tb("NonZero", 13, {b}, {{BP_DTYPE_INT64, {3, -1}}});
    EXPECT_EQ(run_nonzero(tb, b).second, (std::vector<int64_t>{0, 0, 0, 1, 1, 0}));
    const TensorSpec z = i64({2, 2}, {0, 0, 0, 0});
    OpTest tz("NonZero", 9, {z}, {{BP_DTYPE_INT64, {2, -1}}});
    auto [dims, v] = run_nonzero(tz, z);
    EXPECT_EQ(dims, (Dims{2, 0}));
    EXPECT_TRUE(v.empty());
  }
}

TEST(CpuRefControl, NonZeroWithAKnownShapeChecksIt) {
  OpTest ok("NonZero", 13, {i32({3}, {0, 4, 5})}, {{BP_DTYPE_INT64, {1, 2}}});
  EXPECT_EQ(ok.run_as<int64_t>(), (std::vector<int64_t>{1, 2}));
  OpTest scalar("NonZero", 13, {f32({}, {1})}, {{BP_DTYPE_INT64, {0, -1}}});
  expect_error(scalar, BP_STATUS_UNSUPPORTED, "scalar");
}

}  // namespace
}  // namespace backplane::cpuref
