// Unit tests of CpuRef's indexing kernels (backends/reference/kernels_indexing.cpp):
// GatherElements, GatherND, ScatterElements, ScatterND, Scatter, OneHot, TopK,
// Unique, Compress, TfIdfVectorizer.
//
// Each test builds a one-node graph view (the harness's OpTest), makes the
// kernel through a registry holding this family's kernels as the backend
// registers them, and compares with values worked out by hand or from the
// NumPy references in onnx/backend/test/case/node. Kernels whose output shape
// depends on data are driven through run_dynamic with a test allocator.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace backplane;
using namespace backplane::cpuref;
using namespace backplane::cpuref::test_harness;

constexpr bp_dtype_t F32 = BP_DTYPE_FLOAT32;
constexpr bp_dtype_t I64 = BP_DTYPE_INT64;
constexpr bp_dtype_t I32 = BP_DTYPE_INT32;
constexpr bp_dtype_t BOOL = BP_DTYPE_BOOL;

const KernelRegistry& indexing_registry() {
  static const KernelRegistry r = [] {
    KernelRegistry reg;
    register_indexing_kernels(reg);
    return reg;
  }();
  return r;
}

// Hands out poisoned memory per output and records the shapes reported.
class TestAllocator final : public OutputAllocator {
 public:
  explicit TestAllocator(std::vector<bp_dtype_t> dtypes) : dtypes_(std::move(dtypes)) {}
  void* allocate(size_t i, const Dims& dims) override {
    EXPECT_LT(i, dtypes_.size()) << "allocated an output the node does not have";
    EXPECT_EQ(dims_.count(i), 0u) << "output " << i << " allocated twice";
    dims_[i] = dims;
    auto& b = bytes_[i];
    b.assign(static_cast<size_t>(numel(dims)) * dtype_bytes(dtypes_.at(i)) + 1, 0xCD);
    return b.data();
  }
  bool allocated(size_t i) const { return dims_.count(i) != 0; }
  const Dims& dims(size_t i) const { return dims_.at(i); }
  template <class T>
  std::vector<T> values(size_t i) const {
    const auto& b = bytes_.at(i);
    std::vector<T> v((b.size() - 1) / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  std::vector<bp_dtype_t> dtypes_;
  std::map<size_t, Dims> dims_;
  std::map<size_t, std::vector<uint8_t>> bytes_;
};

// An OpTest whose kernel comes from this family's registry.
class Case {
 public:
  Case(std::string op, int64_t opset, std::vector<TensorSpec> inputs, std::vector<OutSpec> outputs,
       std::vector<AttrSpec> attrs = {})
      : inputs_(inputs), outputs_(outputs), t_(std::move(op), opset, inputs, outputs, attrs) {}

  std::unique_ptr<Kernel> kernel() const {
    NodeInfo info = t_.info();
    const KernelFactory* f = indexing_registry().find(std::string(info.node.op_type()));
    if (f == nullptr) throw std::runtime_error("no kernel for " + std::string(info.node.op_type()));
    return (*f)(info);
  }

  std::vector<const void*> in_ptrs() const {
    std::vector<const void*> p;
    for (const TensorSpec& t : inputs_) p.push_back(t.present ? t.bytes.data() : nullptr);
    return p;
  }

  // Static run (twice, outputs poisoned differently; both must agree).
  std::vector<std::vector<uint8_t>> run() const {
    std::unique_ptr<Kernel> k = kernel();
    EXPECT_FALSE(k->has_dynamic_outputs());
    std::vector<std::vector<uint8_t>> first;
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::vector<uint8_t>> outs;
      std::vector<void*> ptrs;
      for (const OutSpec& o : outputs_)
        outs.emplace_back(static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype),
                          pass == 0 ? 0xCD : 0x5A);
      for (auto& o : outs) ptrs.push_back(o.data());
      std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
      k->run(in_ptrs().data(), ptrs.data(), scratch.data());
      if (pass == 0) first = outs;
      else EXPECT_EQ(first, outs) << "a second run gave different bytes";
    }
    return first;
  }
  template <class T>
  std::vector<T> run_as(size_t i = 0) const {
    auto outs = run();
    std::vector<T> v(outs[i].size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), outs[i].data(), outs[i].size());
    return v;
  }

  // Dynamic run: outputs with a -1 dim get nullptr and must be allocated.
  std::unique_ptr<TestAllocator> run_dynamic() const {
    std::unique_ptr<Kernel> k = kernel();
    EXPECT_TRUE(k->has_dynamic_outputs());
    std::vector<bp_dtype_t> dtypes;
    for (const OutSpec& o : outputs_) dtypes.push_back(o.dtype);
    auto alloc = std::make_unique<TestAllocator>(dtypes);
    fixed_.clear();
    std::vector<void*> ptrs;
    for (const OutSpec& o : outputs_) {
      bool known = o.dtype != BP_DTYPE_UNDEFINED;
      for (int64_t d : o.shape) known = known && d >= 0;
      fixed_.emplace_back(known ? static_cast<size_t>(numel(o.shape)) * dtype_bytes(o.dtype) : 0,
                          0xCD);
      ptrs.push_back(known ? fixed_.back().data() : nullptr);
    }
    std::vector<uint8_t> scratch(k->scratch_bytes() + 64);
    k->run_dynamic(in_ptrs().data(), ptrs.data(), *alloc, scratch.data());
    return alloc;
  }
  // An output the dynamic run wrote into memory given up front.
  template <class T>
  std::vector<T> fixed(size_t i) const {
    std::vector<T> v(fixed_.at(i).size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), fixed_.at(i).data(), fixed_.at(i).size());
    return v;
  }

 private:
  std::vector<TensorSpec> inputs_;
  std::vector<OutSpec> outputs_;
  OpTest t_;
  mutable std::deque<std::vector<uint8_t>> fixed_;
};

// The factory throws sdk::Error with `code`, naming the node and `fragment`.
void expect_factory_error(const Case& c, bp_status_code_t code, const std::string& fragment) {
  try {
    c.kernel();
    ADD_FAILURE() << "expected an error containing '" << fragment << "'";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// The run throws sdk::invalid naming the node and `fragment` (bad data).
void expect_run_error(const Case& c, const std::string& fragment) {
  try {
    c.run();
    ADD_FAILURE() << "expected a run error containing '" << fragment << "'";
  } catch (const sdk::Error& e) {
    EXPECT_EQ(e.code(), BP_STATUS_INVALID_ARGUMENT) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(CpuRefIndexing, RegistersEveryOpOfTheFamily) {
  for (const char* op : {"GatherElements", "GatherND", "ScatterElements", "Scatter", "ScatterND",
                         "OneHot", "TopK", "Unique", "Compress", "TfIdfVectorizer"})
    EXPECT_NE(indexing_registry().find(op), nullptr) << op;
}

// ----------------------------------------------------------------- gathers

TEST(CpuRefIndexing, GatherElementsAlongEachAxisWithNegativeIndices) {
  // numpy: take_along_axis.
  Case a1("GatherElements", 13, {f32({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {0, 0, 1, 0})},
          {{F32, {2, 2}}}, {attr_i("axis", 1)});
  EXPECT_EQ(a1.run_as<float>(), (std::vector<float>{1, 1, 4, 3}));
  Case a0("GatherElements", 13,
          {f32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}), i32({2, 3}, {-1, -2, 0, -2, 0, 0})},
          {{F32, {2, 3}}}, {attr_i("axis", 0)});
  EXPECT_EQ(a0.run_as<float>(), (std::vector<float>{7, 5, 3, 4, 2, 3}));
}

TEST(CpuRefIndexing, GatherElementsRejectsAnIndexOutOfRange) {
  Case c("GatherElements", 13, {f32({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {0, 2, 1, 0})},
         {{F32, {2, 2}}}, {attr_i("axis", 1)});
  expect_run_error(c, "index 2 is out of range");
  Case neg("GatherElements", 13, {f32({2, 2}, {1, 2, 3, 4}), i64({2, 2}, {0, -3, 1, 0})},
           {{F32, {2, 2}}}, {attr_i("axis", 1)});
  expect_run_error(neg, "index -3 is out of range");
}

TEST(CpuRefIndexing, GatherNDPlainAndWithBatchDims) {
  Case plain("GatherND", 13, {i32({2, 2}, {0, 1, 2, 3}), i64({2, 2}, {0, 0, 1, 1})}, {{I32, {2}}});
  EXPECT_EQ(plain.run_as<int32_t>(), (std::vector<int32_t>{0, 3}));
  // Slices: indices [[[0,1]],[[1,0]]] into [2,2,2] pick rows.
  Case slices("GatherND", 13, {f32({2, 2, 2}, iota_f(8)), i64({2, 1, 2}, {0, 1, 1, 0})},
              {{F32, {2, 1, 2}}});
  EXPECT_EQ(slices.run_as<float>(), (std::vector<float>{2, 3, 4, 5}));
  Case batch("GatherND", 13, {i32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i64({2, 1}, {1, 0})},
             {{I32, {2, 2}}}, {attr_i("batch_dims", 1)});
  EXPECT_EQ(batch.run_as<int32_t>(), (std::vector<int32_t>{2, 3, 4, 5}));
  Case negative("GatherND", 13, {f32({2, 2}, {0, 1, 2, 3}), i64({1, 2}, {-1, -2})}, {{F32, {1}}});
  EXPECT_EQ(negative.run_as<float>(), (std::vector<float>{2}));
}

TEST(CpuRefIndexing, GatherNDRejectsBadIndicesAndShapes) {
  Case oob("GatherND", 13, {f32({2, 2}, {0, 1, 2, 3}), i64({1, 2}, {0, 2})}, {{F32, {1}}});
  expect_run_error(oob, "index 2 is out of range");
  Case too_long("GatherND", 13, {f32({2, 2}, {0, 1, 2, 3}), i64({1, 3}, {0, 0, 0})}, {{F32, {1}}});
  expect_factory_error(too_long, BP_STATUS_INVALID_ARGUMENT, "last dim of indices");
}

// ---------------------------------------------------------------- scatters

TEST(CpuRefIndexing, ScatterElementsNoneAddMul) {
  const std::vector<float> data{1, 2, 3, 4, 5};
  Case none("ScatterElements", 16,
            {f32({1, 5}, data), i64({1, 2}, {1, -2}), f32({1, 2}, {1.5f, 2.5f})}, {{F32, {1, 5}}},
            {attr_i("axis", 1)});
  EXPECT_EQ(none.run_as<float>(), (std::vector<float>{1, 1.5f, 3, 2.5f, 5}));
  Case add("ScatterElements", 16,
           {f32({1, 5}, data), i64({1, 2}, {1, 1}), f32({1, 2}, {1.5f, 2.5f})}, {{F32, {1, 5}}},
           {attr_i("axis", 1), attr_s("reduction", "add")});
  EXPECT_EQ(add.run_as<float>(), (std::vector<float>{1, 6, 3, 4, 5}));
  Case mul("ScatterElements", 16,
           {i32({1, 5}, {1, 2, 3, 4, 5}), i64({1, 2}, {4, 4}), i32({1, 2}, {2, 3})},
           {{I32, {1, 5}}}, {attr_i("axis", 1), attr_s("reduction", "mul")});
  EXPECT_EQ(mul.run_as<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 30}));
  // Default axis 0 on 3x3 (the ONNX example).
  Case axis0("ScatterElements", 13,
             {f32({3, 3}, std::vector<float>(9, 0.0f)), i64({2, 3}, {1, 0, 2, 0, 2, 1}),
              f32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f})},
             {{F32, {3, 3}}});
  EXPECT_EQ(axis0.run_as<float>(),
            (std::vector<float>{2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f}));
}

TEST(CpuRefIndexing, ScatterOpset10IsScatterElements) {
  Case c("Scatter", 10, {f32({1, 5}, {1, 2, 3, 4, 5}), i64({1, 2}, {1, 3}), f32({1, 2}, {9, 8})},
         {{F32, {1, 5}}}, {attr_i("axis", 1)});
  EXPECT_EQ(c.run_as<float>(), (std::vector<float>{1, 9, 3, 8, 5}));
}

TEST(CpuRefIndexing, ScatterRejectsIndicesOutOfRangeAndBadReduction) {
  Case oob("ScatterElements", 16,
           {f32({1, 3}, {1, 2, 3}), i64({1, 2}, {0, 3}), f32({1, 2}, {9, 8})}, {{F32, {1, 3}}},
           {attr_i("axis", 1)});
  expect_run_error(oob, "index 3 is out of range");
  Case red("ScatterElements", 16,
           {f32({1, 3}, {1, 2, 3}), i64({1, 2}, {0, 1}), f32({1, 2}, {9, 8})}, {{F32, {1, 3}}},
           {attr_i("axis", 1), attr_s("reduction", "xor")});
  expect_factory_error(red, BP_STATUS_INVALID_ARGUMENT, "reduction 'xor'");
  Case nd("ScatterND", 16, {f32({4}, {1, 2, 3, 4}), i64({1, 1}, {-5}), f32({1}, {9})},
          {{F32, {4}}});
  expect_run_error(nd, "index -5 is out of range");
}

TEST(CpuRefIndexing, ScatterNDSlicesWithReductions) {
  // data [4, 2]; indices [[0],[2],[0]] address rows; updates [3, 2].
  const std::vector<float> data{1, 2, 3, 4, 5, 6, 7, 8};
  auto run = [&](const char* reduction, std::vector<int64_t> idx) {
    Case c("ScatterND", 16, {f32({4, 2}, data), i64({3, 1}, idx), f32({3, 2}, {1, 1, 2, 2, 3, 3})},
           {{F32, {4, 2}}}, {attr_s("reduction", reduction)});
    return c.run_as<float>();
  };
  EXPECT_EQ(run("none", {0, 2, -1}), (std::vector<float>{1, 1, 3, 4, 2, 2, 3, 3}));
  EXPECT_EQ(run("add", {0, 2, 0}), (std::vector<float>{5, 6, 3, 4, 7, 8, 7, 8}));
  EXPECT_EQ(run("mul", {0, 2, 0}), (std::vector<float>{3, 6, 3, 4, 10, 12, 7, 8}));
  // Full tuples address single elements.
  Case elems("ScatterND", 13,
             {i64({2, 2}, {0, 0, 0, 0}), i64({2, 2}, {0, 1, 1, 0}), i64({2}, {7, 9})},
             {{I64, {2, 2}}});
  EXPECT_EQ(elems.run_as<int64_t>(), (std::vector<int64_t>{0, 7, 9, 0}));
}

TEST(CpuRefIndexing, HalfPrecisionScatterAddAndTopK) {
  // float16 arithmetic goes through float: 1.5 + 2.25 + 0.25 is exact.
  Case add("ScatterElements", 16,
           {f16({3}, {1.5f, 0, 7}), i64({2}, {0, 0}), f16({2}, {2.25f, 0.25f})},
           {{BP_DTYPE_FLOAT16, {3}}}, {attr_s("reduction", "add")});
  std::vector<uint16_t> h = add.run_as<uint16_t>();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(half_to_float(h[0]), 4.0f);
  EXPECT_EQ(half_to_float(h[2]), 7.0f);
  Case top("TopK", 11, {f16({4}, {0.5f, -2, 3, 1}), i64({1}, {2}, true)},
           {{BP_DTYPE_FLOAT16, {2}}, {I64, {2}}});
  std::vector<uint16_t> v = top.run_as<uint16_t>(0);
  EXPECT_EQ(half_to_float(v[0]), 3.0f);
  EXPECT_EQ(half_to_float(v[1]), 1.0f);
  EXPECT_EQ(top.run_as<int64_t>(1), (std::vector<int64_t>{2, 3}));
  // bfloat16 (the high half of a float32): 1.0 = 0x3F80, 2.0 = 0x4000.
  Case bf("ScatterND", 16,
          {tensor<uint16_t>(BP_DTYPE_BFLOAT16, {2}, {0x3F80, 0x3F80}), i64({1, 1}, {1}),
           tensor<uint16_t>(BP_DTYPE_BFLOAT16, {1}, {0x4000})},
          {{BP_DTYPE_BFLOAT16, {2}}}, {attr_s("reduction", "mul")});
  EXPECT_EQ(bf.run_as<uint16_t>(), (std::vector<uint16_t>{0x3F80, 0x4000}));
}

// ------------------------------------------------------------------ OneHot

TEST(CpuRefIndexing, OneHotWithConstantDepthAxisAndNegativeIndices) {
  const float depth = 4.0f;
  // indices [0, -1, 5 (out of range: all off), 2] along a new axis 0.
  Case c("OneHot", 11, {i64({4}, {0, -1, 5, 2}), f32({}, {depth}, true), i32({2}, {0, 7})},
         {{I32, {4, 4}}}, {attr_i("axis", 0)});
  EXPECT_EQ(c.run_as<int32_t>(), (std::vector<int32_t>{7, 0, 0, 0,  //
                                                       0, 0, 0, 0,  //
                                                       0, 0, 0, 7,  //
                                                       0, 7, 0, 0}));
  // Float indices are truncated; last axis by default.
  Case f("OneHot", 11, {f32({2}, {1.7f, 0.2f}), i64({1}, {3}, true), f32({2}, {0, 1})},
         {{F32, {2, 3}}});
  EXPECT_EQ(f.run_as<float>(), (std::vector<float>{0, 1, 0, 1, 0, 0}));
}

TEST(CpuRefIndexing, OneHotWithRunTimeDepthReportsItsShape) {
  Case c("OneHot", 11, {i64({2}, {1, 2}), i64({}, {3}), f32({2}, {-1, 1})}, {{F32, {2, -1}}});
  auto alloc = c.run_dynamic();
  ASSERT_TRUE(alloc->allocated(0));
  EXPECT_EQ(alloc->dims(0), (Dims{2, 3}));
  EXPECT_EQ(alloc->values<float>(0), (std::vector<float>{-1, 1, -1, -1, -1, 1}));
  Case bad("OneHot", 11, {i64({2}, {1, 2}), i64({}, {0}), f32({2}, {-1, 1})}, {{F32, {2, -1}}});
  try {
    bad.run_dynamic();
    ADD_FAILURE() << "depth 0 was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("depth"), std::string::npos) << e.what();
  }
}

// -------------------------------------------------------------------- TopK

TEST(CpuRefIndexing, TopKLargestAndSmallestWithTiesByIndex) {
  // Row 0 has a tie (5 at 1 and 3): the lower index comes first.
  const std::vector<float> x{1, 5, 2, 5, 0, 9, 7, 8};
  Case largest("TopK", 11, {f32({2, 4}, x), i64({1}, {2}, true)}, {{F32, {2, 2}}, {I64, {2, 2}}},
               {attr_i("axis", 1)});
  auto outs = largest.run();
  std::vector<float> v(4);
  std::vector<int64_t> i(4);
  std::memcpy(v.data(), outs[0].data(), 16);
  std::memcpy(i.data(), outs[1].data(), 32);
  EXPECT_EQ(v, (std::vector<float>{5, 5, 9, 8}));
  EXPECT_EQ(i, (std::vector<int64_t>{1, 3, 1, 3}));
  Case smallest("TopK", 11, {f32({2, 4}, x), i64({1}, {3}, true)}, {{F32, {2, 3}}, {I64, {2, 3}}},
                {attr_i("largest", 0)});
  EXPECT_EQ(smallest.run_as<float>(0), (std::vector<float>{1, 2, 5, 0, 7, 8}));
  EXPECT_EQ(smallest.run_as<int64_t>(1), (std::vector<int64_t>{0, 2, 1, 0, 2, 3}));
  // Axis 0 of int32; then opset 1 (k as an attribute, no K input).
  Case ints("TopK", 11, {i32({3, 2}, {3, -1, 4, -5, 2, 6}), i64({1}, {1}, true)},
            {{I32, {1, 2}}, {I64, {1, 2}}}, {attr_i("axis", 0)});
  EXPECT_EQ(ints.run_as<int32_t>(0), (std::vector<int32_t>{4, 6}));
  EXPECT_EQ(ints.run_as<int64_t>(1), (std::vector<int64_t>{1, 2}));
  Case v1("TopK", 1, {f32({4}, {3, 1, 4, 1})}, {{F32, {2}}, {I64, {2}}}, {attr_i("k", 2)});
  EXPECT_EQ(v1.run_as<float>(0), (std::vector<float>{4, 3}));
}

TEST(CpuRefIndexing, TopKWithRunTimeKReportsItsShape) {
  Case c("TopK", 11, {f32({2, 3}, {1, 3, 2, 6, 5, 4}), i64({1}, {2})},
         {{F32, {2, -1}}, {I64, {2, -1}}});
  auto alloc = c.run_dynamic();
  EXPECT_EQ(alloc->dims(0), (Dims{2, 2}));
  EXPECT_EQ(alloc->dims(1), (Dims{2, 2}));
  EXPECT_EQ(alloc->values<float>(0), (std::vector<float>{3, 2, 6, 5}));
  EXPECT_EQ(alloc->values<int64_t>(1), (std::vector<int64_t>{1, 2, 0, 1}));
  Case big("TopK", 11, {f32({2, 3}, {1, 3, 2, 6, 5, 4}), i64({1}, {4})},
           {{F32, {2, -1}}, {I64, {2, -1}}});
  try {
    big.run_dynamic();
    ADD_FAILURE() << "K = 4 on an axis of 3 was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("K = 4 is out of range"), std::string::npos) << e.what();
  }
}

TEST(CpuRefIndexing, TopKRejectsAConstantKOutOfRange) {
  Case c("TopK", 11, {f32({3}, {1, 2, 3}), i64({1}, {5}, true)}, {{F32, {5}}, {I64, {5}}});
  expect_factory_error(c, BP_STATUS_INVALID_ARGUMENT, "k = 5 is out of range");
}

// ------------------------------------------------------------------ Unique

TEST(CpuRefIndexing, UniqueSortedAndUnsortedWithoutAxis) {
  const std::vector<float> x{2, 1, 1, 3, 4, 3};
  const std::vector<OutSpec> outs{{F32, {-1}}, {I64, {-1}}, {I64, {6}}, {I64, {-1}}};
  Case sorted("Unique", 11, {f32({6}, x)}, outs);
  auto a = sorted.run_dynamic();
  EXPECT_EQ(a->dims(0), (Dims{4}));
  EXPECT_EQ(a->values<float>(0), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(a->values<int64_t>(1), (std::vector<int64_t>{1, 0, 3, 4}));
  EXPECT_FALSE(a->allocated(2));  // static shape: written where it was given
  EXPECT_EQ(sorted.fixed<int64_t>(2), (std::vector<int64_t>{1, 0, 0, 2, 3, 2}));
  EXPECT_EQ(a->values<int64_t>(3), (std::vector<int64_t>{2, 1, 2, 1}));

  Case unsorted("Unique", 11, {f32({6}, x)}, outs, {attr_i("sorted", 0)});
  auto b = unsorted.run_dynamic();
  EXPECT_EQ(b->values<float>(0), (std::vector<float>{2, 1, 3, 4}));
  EXPECT_EQ(b->values<int64_t>(1), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(unsorted.fixed<int64_t>(2), (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(b->values<int64_t>(3), (std::vector<int64_t>{1, 2, 2, 1}));
}

TEST(CpuRefIndexing, UniqueAlongAnAxisComparesWholeSlices) {
  // numpy.unique(x, axis=1) on [[1,0,0],[1,0,0],[2,3,3]]: columns (1,1,2),
  // (0,0,3), (0,0,3) -> sorted columns (0,0,3), (1,1,2).
  Case c("Unique", 11, {f32({3, 3}, {1, 0, 0, 1, 0, 0, 2, 3, 3})},
         {{F32, {3, -1}}, {I64, {-1}}, {I64, {3}}, {I64, {-1}}}, {attr_i("axis", -1)});
  auto a = c.run_dynamic();
  EXPECT_EQ(a->dims(0), (Dims{3, 2}));
  EXPECT_EQ(a->values<float>(0), (std::vector<float>{0, 1, 0, 1, 3, 2}));
  EXPECT_EQ(a->values<int64_t>(1), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(c.fixed<int64_t>(2), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(a->values<int64_t>(3), (std::vector<int64_t>{2, 1}));
}

TEST(CpuRefIndexing, UniqueWithOnlyYAndIntegers) {
  // Omitted optional outputs are neither written nor allocated.
  Case c(
      "Unique", 11, {i64({5}, {5, -2, 5, 7, -2})},
      {{I64, {-1}}, {BP_DTYPE_UNDEFINED, {}}, {BP_DTYPE_UNDEFINED, {}}, {BP_DTYPE_UNDEFINED, {}}});
  auto a = c.run_dynamic();
  EXPECT_EQ(a->values<int64_t>(0), (std::vector<int64_t>{-2, 5, 7}));
  EXPECT_FALSE(a->allocated(1));
  EXPECT_FALSE(a->allocated(3));
}

// ---------------------------------------------------------------- Compress

TEST(CpuRefIndexing, CompressWithConstantConditionIsStatic) {
  const std::vector<float> x{1, 2, 3, 4, 5, 6};
  Case axis0("Compress", 11, {f32({3, 2}, x), b8({3}, {0, 1, 1}, true)}, {{F32, {2, 2}}},
             {attr_i("axis", 0)});
  EXPECT_EQ(axis0.run_as<float>(), (std::vector<float>{3, 4, 5, 6}));
  Case last("Compress", 11, {f32({3, 2}, x), b8({2}, {0, 1}, true)}, {{F32, {3, 1}}},
            {attr_i("axis", -1)});
  EXPECT_EQ(last.run_as<float>(), (std::vector<float>{2, 4, 6}));
  // No axis: the flattened input; a shorter condition drops the rest.
  Case flat("Compress", 11, {f32({3, 2}, x), b8({5}, {0, 1, 0, 0, 1}, true)}, {{F32, {2}}});
  EXPECT_EQ(flat.run_as<float>(), (std::vector<float>{2, 5}));
}

TEST(CpuRefIndexing, CompressWithRunTimeConditionReportsItsShape) {
  Case c("Compress", 11, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), b8({3}, {1, 0, 1})}, {{I64, {2, -1}}},
         {attr_i("axis", 1)});
  auto a = c.run_dynamic();
  EXPECT_EQ(a->dims(0), (Dims{2, 2}));
  EXPECT_EQ(a->values<int64_t>(0), (std::vector<int64_t>{1, 3, 4, 6}));
  Case none("Compress", 11, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), b8({3}, {0, 0, 0})}, {{I64, {-1}}});
  auto b = none.run_dynamic();
  EXPECT_EQ(b->dims(0), (Dims{0}));
  // Longer than the axis: fine while false past its end (numpy.compress).
  Case longer("Compress", 11, {f32({2}, {1, 2}), b8({4}, {0, 1, 0, 0})}, {{F32, {-1}}});
  auto l = longer.run_dynamic();
  EXPECT_EQ(l->values<float>(0), (std::vector<float>{2}));
  Case past_end("Compress", 11, {f32({2}, {1, 2}), b8({3}, {1, 0, 1})}, {{F32, {-1}}});
  try {
    past_end.run_dynamic();
    ADD_FAILURE() << "a condition selecting index 2 of 2 elements was accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("selects index 2"), std::string::npos) << e.what();
  }
  Case past_end_const("Compress", 11, {f32({2}, {1, 2}), b8({3}, {1, 0, 1}, true)}, {{F32, {2}}});
  expect_factory_error(past_end_const, BP_STATUS_INVALID_ARGUMENT, "selects index 2");
}

// --------------------------------------------------------- TfIdfVectorizer

std::vector<AttrSpec> tfidf_attrs(const char* mode, int64_t min_gram, int64_t max_gram,
                                  int64_t max_skip, std::vector<float> weights = {}) {
  // The pool of onnx's tfidfvectorizer tests: unigrams 2,3,5,4 then
  // bigrams (5,6) (7,8) (6,7).
  std::vector<AttrSpec> a{attr_s("mode", mode),
                          attr_i("min_gram_length", min_gram),
                          attr_i("max_gram_length", max_gram),
                          attr_i("max_skip_count", max_skip),
                          attr_ints("ngram_counts", {0, 4}),
                          attr_ints("ngram_indexes", {0, 1, 2, 3, 4, 5, 6}),
                          attr_ints("pool_int64s", {2, 3, 5, 4, 5, 6, 7, 8, 6, 7})};
  if (!weights.empty()) a.push_back(attr_floats("weights", weights));
  return a;
}

TEST(CpuRefIndexing, TfIdfCountsNgramsWithSkips) {
  const std::vector<int32_t> x{1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8};
  // onnx test_tfidfvectorizer_tf_only_bigrams_skip0.
  Case bigrams("TfIdfVectorizer", 9, {i32({12}, x)}, {{F32, {7}}}, tfidf_attrs("TF", 2, 2, 0));
  EXPECT_EQ(bigrams.run_as<float>(), (std::vector<float>{0, 0, 0, 0, 1, 1, 1}));
  // test_tfidfvectorizer_tf_uniandbigrams_skip5.
  Case both("TfIdfVectorizer", 9, {i32({12}, x)}, {{F32, {7}}}, tfidf_attrs("TF", 1, 2, 5));
  EXPECT_EQ(both.run_as<float>(), (std::vector<float>{0, 3, 1, 0, 1, 3, 1}));
  // Batched rows (test_tfidfvectorizer_tf_batch_onlybigrams_skip5).
  Case batch("TfIdfVectorizer", 9, {i64({2, 6}, {1, 1, 3, 3, 3, 7, 8, 6, 7, 5, 6, 8})},
             {{F32, {2, 7}}}, tfidf_attrs("TF", 2, 2, 5));
  EXPECT_EQ(batch.run_as<float>(), (std::vector<float>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
}

TEST(CpuRefIndexing, TfIdfWeightsInIdfAndTfIdfModes) {
  const std::vector<int64_t> x{2, 2, 3, 5, 6};
  const std::vector<float> w{0.5f, 2, 3, 4, 10, 20, 30};
  Case idf("TfIdfVectorizer", 9, {i64({5}, x)}, {{F32, {7}}}, tfidf_attrs("IDF", 1, 2, 0, w));
  EXPECT_EQ(idf.run_as<float>(), (std::vector<float>{0.5f, 2, 3, 0, 10, 0, 0}));
  Case tfidf("TfIdfVectorizer", 9, {i64({5}, x)}, {{F32, {7}}}, tfidf_attrs("TFIDF", 1, 2, 0, w));
  EXPECT_EQ(tfidf.run_as<float>(), (std::vector<float>{1.0f, 2, 3, 0, 10, 0, 0}));
}

TEST(CpuRefIndexing, TfIdfRejectsABadPoolAndMode) {
  auto attrs = tfidf_attrs("TF", 1, 2, 0);
  attrs[4] = attr_ints("ngram_counts", {0, 5});  // 5 values left for bigrams: not whole
  Case bad("TfIdfVectorizer", 9, {i64({3}, {1, 2, 3})}, {{F32, {7}}}, attrs);
  expect_factory_error(bad, BP_STATUS_INVALID_ARGUMENT, "whole n-grams");
  auto mode = tfidf_attrs("BM25", 1, 2, 0);
  Case bad_mode("TfIdfVectorizer", 9, {i64({3}, {1, 2, 3})}, {{F32, {7}}}, mode);
  expect_factory_error(bad_mode, BP_STATUS_INVALID_ARGUMENT, "mode 'BM25'");
}

}  // namespace
