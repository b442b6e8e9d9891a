// Unit tests of CpuRef's tensor kernels (layout, gather, pad, reductions):
// each test builds a one-node graph view by hand, gets the factory from a
// registry, runs the kernel and compares with hand-computed values or a
// reference loop written here.
#include "cpuref_test_harness.hpp"
#include "reference/kernel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace backplane;
using namespace backplane::cpuref;
using namespace backplane::cpuref::test_harness;

// Row-major unravel / ravel for reference loops.
Dims unravel(int64_t flat, const Dims& shape) {
  Dims idx(shape.size());
  for (size_t j = shape.size(); j-- > 0;) {
    idx[j] = flat % shape[j];
    flat /= shape[j];
  }
  return idx;
}
int64_t ravel(const Dims& idx, const Dims& shape) {
  int64_t flat = 0;
  for (size_t j = 0; j < shape.size(); ++j) flat = flat * shape[j] + idx[j];
  return flat;
}

std::vector<int64_t> iota_i64(int64_t n, int64_t start = 0) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

// A raw tensor attribute (e.g. Constant.value) whose storage the test owns.
struct TensorAttr {
  Dims shape;
  std::vector<uint8_t> bytes;
  bp_attr_tensor_t t{};
  bp_attribute_t a{};
  TensorAttr(const char* name, bp_dtype_t dtype, Dims s, std::vector<uint8_t> b)
      : shape(std::move(s)), bytes(std::move(b)) {
    t.struct_size = sizeof(t);
    t.dtype = dtype;
    t.rank = shape.size();
    t.shape = shape.data();
    t.data = bytes.data();
    t.size_bytes = bytes.size();
    a.struct_size = sizeof(a);
    a.name = name;
    a.type = BP_ATTR_TENSOR;
    a.t = &t;
  }
  TensorAttr(const TensorAttr&) = delete;
};
template <class T>
std::vector<uint8_t> raw(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---------------------------------------------------------------------------
// Copies
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, ReshapeFamilyCopiesBytes) {
  OpTest r("Reshape", 14, {i64({2, 3}, iota_i64(6, 10)), i64({2}, {3, 2}, true)},
           {{BP_DTYPE_INT64, {3, 2}}});
  EXPECT_EQ(r.run_as<int64_t>(), iota_i64(6, 10));
  OpTest f("Flatten", 13, {f32({2, 2, 2}, iota_f(8))}, {{BP_DTYPE_FLOAT32, {2, 4}}},
           {attr_i("axis", 1)});
  EXPECT_EQ(f.run_as<float>(), iota_f(8));
  OpTest s("Squeeze", 13, {u8({1, 3, 1}, {7, 8, 9}), i64({1}, {0}, true)},
           {{BP_DTYPE_UINT8, {3, 1}}});
  EXPECT_EQ(s.run_as<uint8_t>(), (std::vector<uint8_t>{7, 8, 9}));
  OpTest u("Unsqueeze", 11, {f16({2}, {1.5f, -2})}, {{BP_DTYPE_FLOAT16, {1, 2}}},
           {attr_ints("axes", {0})});
  EXPECT_EQ(u.run_as<uint16_t>(), (std::vector<uint16_t>{float_to_half(1.5f), float_to_half(-2)}));
  OpTest bad("Reshape", 14, {i64({2, 3}, iota_i64(6)), i64({1}, {5}, true)},
             {{BP_DTYPE_INT64, {5}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "elements");
}

// ---------------------------------------------------------------------------
// Transpose
// ---------------------------------------------------------------------------

template <class T>
std::vector<T> ref_transpose(const std::vector<T>& in, const Dims& shape, const Dims& perm) {
  Dims out_shape;
  for (int64_t p : perm) out_shape.push_back(shape[p]);
  std::vector<T> out(in.size());
  for (int64_t i = 0; i < static_cast<int64_t>(out.size()); ++i) {
    const Dims oi = unravel(i, out_shape);
    Dims ii(shape.size());
    for (size_t k = 0; k < perm.size(); ++k) ii[perm[k]] = oi[k];
    out[i] = in[ravel(ii, shape)];
  }
  return out;
}

TEST(CpuRefTensor, TransposeMatchesReferenceForEveryElementSize) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{2, 3, 4}, {2, 0, 1}},       {{2, 3, 4}, {1, 0, 2}},       {{2, 3, 4, 5}, {0, 2, 3, 1}},
      {{2, 3, 4, 5}, {0, 3, 1, 2}}, {{1, 3, 1, 4}, {3, 1, 2, 0}}, {{5, 7}, {1, 0}},
      {{2, 3, 4}, {0, 1, 2}}};
  for (const auto& [shape, perm] : cases) {
    Dims out_shape;
    for (int64_t p : perm) out_shape.push_back(shape[p]);
    const int64_t n = numel(shape);
    OpTest tf("Transpose", 13, {f32(shape, iota_f(n))}, {{BP_DTYPE_FLOAT32, out_shape}},
              {attr_ints("perm", perm)});
    EXPECT_EQ(tf.run_as<float>(), ref_transpose(iota_f(n), shape, perm));
    OpTest tl("Transpose", 13, {i64(shape, iota_i64(n, -50))}, {{BP_DTYPE_INT64, out_shape}},
              {attr_ints("perm", perm)});
    EXPECT_EQ(tl.run_as<int64_t>(), ref_transpose(iota_i64(n, -50), shape, perm));
    std::vector<uint8_t> bytes(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 7);
    OpTest tb("Transpose", 13, {u8(shape, bytes)}, {{BP_DTYPE_UINT8, out_shape}},
              {attr_ints("perm", perm)});
    EXPECT_EQ(tb.run_as<uint8_t>(), ref_transpose(bytes, shape, perm));
    std::vector<float> halves(static_cast<size_t>(n));
    std::vector<uint16_t> hbits;
    for (int64_t i = 0; i < n; ++i) {
      halves[i] = static_cast<float>(i) * 0.5f;
      hbits.push_back(float_to_half(halves[i]));
    }
    OpTest th("Transpose", 13, {f16(shape, halves)}, {{BP_DTYPE_FLOAT16, out_shape}},
              {attr_ints("perm", perm)});
    EXPECT_EQ(th.run_as<uint16_t>(), ref_transpose(hbits, shape, perm));
  }
}

TEST(CpuRefTensor, TransposeDefaultPermReversesAndBadPermIsRejected) {
  OpTest t("Transpose", 13, {f32({2, 3}, iota_f(6))}, {{BP_DTYPE_FLOAT32, {3, 2}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  OpTest bad("Transpose", 13, {f32({2, 3}, iota_f(6))}, {{BP_DTYPE_FLOAT32, {3, 2}}},
             {attr_ints("perm", {1, 1})});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "perm");
}

// ---------------------------------------------------------------------------
// Concat, Split
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, Concat) {
  OpTest t("Concat", 13,
           {f32({2, 1, 2}, {1, 2, 3, 4}), f32({2, 2, 2}, {10, 11, 12, 13, 14, 15, 16, 17}),
            f32({2, 0, 2}, {})},
           {{BP_DTYPE_FLOAT32, {2, 3, 2}}}, {attr_i("axis", 1)});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{1, 2, 10, 11, 12, 13, 3, 4, 14, 15, 16, 17}));
  OpTest l("Concat", 13, {i64({2, 1}, {1, 2}), i64({2, 2}, {3, 4, 5, 6})},
           {{BP_DTYPE_INT64, {2, 3}}}, {attr_i("axis", -1)});
  EXPECT_EQ(l.run_as<int64_t>(), (std::vector<int64_t>{1, 3, 4, 2, 5, 6}));
  OpTest z("Concat", 13, {i64({1}, {1}), i64({2}, {2, 3})}, {{BP_DTYPE_INT64, {3}}},
           {attr_i("axis", 0)});
  EXPECT_EQ(z.run_as<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  OpTest bad("Concat", 13, {i64({2, 1}, {1, 2}), i64({3, 1}, {3, 4, 5})},
             {{BP_DTYPE_INT64, {2, 2}}}, {attr_i("axis", 1)});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "does not match");
}

TEST(CpuRefTensor, SplitUsesOutputShapes) {
  // opset 11: 'split' attribute.
  OpTest a("Split", 11, {f32({2, 4}, iota_f(8))},
           {{BP_DTYPE_FLOAT32, {2, 1}}, {BP_DTYPE_FLOAT32, {2, 3}}},
           {attr_i("axis", 1), attr_ints("split", {1, 3})});
  auto outs = a.run();
  std::vector<float> o0(2), o1(6);
  std::memcpy(o0.data(), outs[0].data(), 8);
  std::memcpy(o1.data(), outs[1].data(), 24);
  EXPECT_EQ(o0, (std::vector<float>{0, 4}));
  EXPECT_EQ(o1, (std::vector<float>{1, 2, 3, 5, 6, 7}));
  // opset 13: constant 'split' input, negative axis, int64.
  OpTest b("Split", 13, {i64({5}, iota_i64(5)), i64({2}, {2, 3}, true)},
           {{BP_DTYPE_INT64, {2}}, {BP_DTYPE_INT64, {3}}}, {attr_i("axis", -1)});
  outs = b.run();
  EXPECT_EQ(outs[0], raw(std::vector<int64_t>{0, 1}));
  EXPECT_EQ(outs[1], raw(std::vector<int64_t>{2, 3, 4}));
  // Equal split along axis 0 (three outputs).
  OpTest c("Split", 13, {u8({3, 2}, {1, 2, 3, 4, 5, 6})},
           {{BP_DTYPE_UINT8, {1, 2}}, {BP_DTYPE_UINT8, {1, 2}}, {BP_DTYPE_UINT8, {1, 2}}});
  outs = c.run();
  EXPECT_EQ(outs[2], (std::vector<uint8_t>{5, 6}));
  // Inconsistent constant split.
  OpTest bad("Split", 13, {i64({5}, iota_i64(5)), i64({2}, {1, 4}, true)},
             {{BP_DTYPE_INT64, {2}}, {BP_DTYPE_INT64, {3}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "split");
}

// ---------------------------------------------------------------------------
// Slice
// ---------------------------------------------------------------------------

constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin64 = std::numeric_limits<int64_t>::min();

std::vector<float> run_slice_1d(int64_t start, int64_t end, int64_t step, int64_t expect_len) {
  OpTest t("Slice", 13,
           {f32({10}, iota_f(10)), i64({1}, {start}, true), i64({1}, {end}, true),
            i64({1}, {0}, true), i64({1}, {step}, true)},
           {{BP_DTYPE_FLOAT32, {expect_len}}});
  return t.run_as<float>();
}

TEST(CpuRefTensor, SliceClampsAndStepsAsOnnxDefines) {
  EXPECT_EQ(run_slice_1d(2, 7, 1, 5), (std::vector<float>{2, 3, 4, 5, 6}));
  EXPECT_EQ(run_slice_1d(-3, 100, 1, 3), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(run_slice_1d(8, 2, -2, 3), (std::vector<float>{8, 6, 4}));
  EXPECT_EQ(run_slice_1d(100, -100, -1, 10), (std::vector<float>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(run_slice_1d(-1, kMin64, -3, 4), (std::vector<float>{9, 6, 3, 0}));
  EXPECT_EQ(run_slice_1d(0, kMax64, 3, 4), (std::vector<float>{0, 3, 6, 9}));
  EXPECT_EQ(run_slice_1d(5, 5, 1, 0), (std::vector<float>{}));
  EXPECT_EQ(run_slice_1d(2, 7, -1, 0), (std::vector<float>{}));
}

TEST(CpuRefTensor, SliceMultiAxis) {
  // x[1:3, 3:0:-1] of a 3x4 matrix.
  OpTest t("Slice", 13,
           {f32({3, 4}, iota_f(12)), i32({2}, {1, -1}, true), i32({2}, {3, 0}, true),
            i32({2}, {0, 1}, true), i32({2}, {1, -1}, true)},
           {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(t.run_as<float>(), (std::vector<float>{7, 6, 5, 11, 10, 9}));
  // Negative axis, no steps input.
  OpTest n(
      "Slice", 13,
      {i64({2, 4}, iota_i64(8)), i64({1}, {1}, true), i64({1}, {3}, true), i64({1}, {-1}, true)},
      {{BP_DTYPE_INT64, {2, 2}}});
  EXPECT_EQ(n.run_as<int64_t>(), (std::vector<int64_t>{1, 2, 5, 6}));
  // Opset 9 attributes.
  OpTest a("Slice", 9, {f32({3, 4}, iota_f(12))}, {{BP_DTYPE_FLOAT32, {2, 2}}},
           {attr_ints("starts", {0, 1}), attr_ints("ends", {2, 3})});
  EXPECT_EQ(a.run_as<float>(), (std::vector<float>{1, 2, 5, 6}));
  // 3-D slice checked against a reference loop: x[:, ::-2, 1:]
  const Dims shape{2, 5, 3};
  OpTest r("Slice", 13,
           {f32(shape, iota_f(30)), i64({2}, {-1, 1}, true), i64({2}, {kMin64, kMax64}, true),
            i64({2}, {1, 2}, true), i64({2}, {-2, 1}, true)},
           {{BP_DTYPE_FLOAT32, {2, 3, 2}}});
  std::vector<float> want;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 4; j >= 0; j -= 2)
      for (int64_t k = 1; k < 3; ++k) want.push_back(static_cast<float>(ravel({i, j, k}, shape)));
  EXPECT_EQ(r.run_as<float>(), want);
}

TEST(CpuRefTensor, SliceRejectsNonConstantAndInconsistentShapes) {
  OpTest t("Slice", 13, {f32({4}, iota_f(4)), i64({1}, {1}), i64({1}, {3}, true)},
           {{BP_DTYPE_FLOAT32, {2}}});
  expect_error(t, BP_STATUS_UNSUPPORTED, "starts");
  OpTest s("Slice", 13, {f32({4}, iota_f(4)), i64({1}, {1}, true), i64({1}, {3}, true)},
           {{BP_DTYPE_FLOAT32, {3}}});
  expect_error(s, BP_STATUS_INVALID_ARGUMENT, "shape");
}

// ---------------------------------------------------------------------------
// Gather
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, Gather) {
  OpTest a("Gather", 13, {f32({3, 2}, {1, 2, 3, 4, 5, 6}), i64({2, 2}, {0, 2, -1, 1})},
           {{BP_DTYPE_FLOAT32, {2, 2, 2}}});
  EXPECT_EQ(a.run_as<float>(), (std::vector<float>{1, 2, 5, 6, 5, 6, 3, 4}));
  OpTest b("Gather", 13, {i64({2, 3}, {1, 2, 3, 4, 5, 6}), i32({2}, {2, -3})},
           {{BP_DTYPE_INT64, {2, 2}}}, {attr_i("axis", -1)});
  EXPECT_EQ(b.run_as<int64_t>(), (std::vector<int64_t>{3, 1, 6, 4}));
  OpTest s("Gather", 13, {f16({3, 2}, {1, 2, 3, 4, 5, 6}), i64({}, {1})},
           {{BP_DTYPE_FLOAT16, {2}}});
  EXPECT_EQ(s.run_as<uint16_t>(), (std::vector<uint16_t>{float_to_half(3), float_to_half(4)}));
  // BERT-style embedding lookup: [vocab, hidden] gathered by [batch, seq].
  std::vector<float> table = iota_f(10 * 4);
  OpTest e("Gather", 13, {f32({10, 4}, table), i64({1, 3}, {9, 0, 4})},
           {{BP_DTYPE_FLOAT32, {1, 3, 4}}});
  std::vector<float> want;
  for (int64_t id : {9, 0, 4})
    for (int64_t h = 0; h < 4; ++h) want.push_back(table[id * 4 + h]);
  EXPECT_EQ(e.run_as<float>(), want);
}

TEST(CpuRefTensor, GatherOutOfRangeIndexFailsAtRunTime) {
  OpTest t("Gather", 13, {f32({3}, {1, 2, 3}), i64({1}, {3})}, {{BP_DTYPE_FLOAT32, {1}}});
  try {
    t.run();
    ADD_FAILURE() << "index 3 of a dim of 3 accepted";
  } catch (const sdk::Error& e) {
    EXPECT_NE(std::string(e.what()).find("test_node"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of range"), std::string::npos) << e.what();
  }
  OpTest bad("Gather", 13, {f32({3}, {1, 2, 3}), f32({1}, {0})}, {{BP_DTYPE_FLOAT32, {1}}});
  expect_error(bad, BP_STATUS_UNSUPPORTED, "indices");
}

// ---------------------------------------------------------------------------
// Shape, Size, Constant, ConstantOfShape
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, ShapeAndSize) {
  OpTest s("Shape", 13, {f32({2, 3, 4, 5}, iota_f(120))}, {{BP_DTYPE_INT64, {4}}});
  EXPECT_EQ(s.run_as<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5}));
  OpTest r("Shape", 15, {f32({2, 3, 4, 5}, iota_f(120))}, {{BP_DTYPE_INT64, {2}}},
           {attr_i("start", 1), attr_i("end", -1)});
  EXPECT_EQ(r.run_as<int64_t>(), (std::vector<int64_t>{3, 4}));
  OpTest c("Shape", 15, {f32({2, 3}, iota_f(6))}, {{BP_DTYPE_INT64, {1}}},
           {attr_i("start", -1), attr_i("end", 10)});
  EXPECT_EQ(c.run_as<int64_t>(), (std::vector<int64_t>{3}));
  OpTest z("Size", 13, {u8({2, 3}, {0, 0, 0, 0, 0, 0})}, {{BP_DTYPE_INT64, {}}});
  EXPECT_EQ(z.run_as<int64_t>(), (std::vector<int64_t>{6}));
}

TEST(CpuRefTensor, ConstantVariants) {
  TensorAttr value("value", BP_DTYPE_INT32, {2, 2}, raw(std::vector<int32_t>{1, -2, 3, -4}));
  OpTest t("Constant", 13, {}, {{BP_DTYPE_INT32, {2, 2}}});
  t.add_raw_attr(value.a);
  EXPECT_EQ(t.run_as<int32_t>(), (std::vector<int32_t>{1, -2, 3, -4}));
  OpTest f("Constant", 13, {}, {{BP_DTYPE_FLOAT32, {3}}},
           {attr_floats("value_floats", {0.5f, 1.5f, 2.5f})});
  EXPECT_EQ(f.run_as<float>(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  OpTest i("Constant", 13, {}, {{BP_DTYPE_INT64, {}}}, {attr_i("value_int", -7)});
  EXPECT_EQ(i.run_as<int64_t>(), (std::vector<int64_t>{-7}));
  OpTest is("Constant", 13, {}, {{BP_DTYPE_INT64, {2}}}, {attr_ints("value_ints", {4, 5})});
  EXPECT_EQ(is.run_as<int64_t>(), (std::vector<int64_t>{4, 5}));
  OpTest v("Constant", 13, {}, {{BP_DTYPE_FLOAT32, {}}}, {attr_f("value_float", 2.25f)});
  EXPECT_EQ(v.run_as<float>(), (std::vector<float>{2.25f}));
  OpTest bad("Constant", 13, {}, {{BP_DTYPE_FLOAT32, {2}}}, {attr_f("value_float", 2.25f)});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "bytes");
}

TEST(CpuRefTensor, ConstantOfShape) {
  OpTest d("ConstantOfShape", 9, {i64({2}, {2, 3}, true)}, {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(d.run_as<float>(), std::vector<float>(6, 0.0f));
  TensorAttr value("value", BP_DTYPE_INT64, {1}, raw(std::vector<int64_t>{-3}));
  OpTest i("ConstantOfShape", 9, {i64({1}, {4})}, {{BP_DTYPE_INT64, {4}}});
  i.add_raw_attr(value.a);
  EXPECT_EQ(i.run_as<int64_t>(), std::vector<int64_t>(4, -3));
  TensorAttr one("value", BP_DTYPE_BOOL, {1}, {1});
  OpTest b("ConstantOfShape", 9, {i64({1}, {3})}, {{BP_DTYPE_BOOL, {3}}});
  b.add_raw_attr(one.a);
  EXPECT_EQ(b.run_as<uint8_t>(), (std::vector<uint8_t>{1, 1, 1}));
}

// ---------------------------------------------------------------------------
// Expand, Tile
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, ExpandMatchesBroadcastReference) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{3, 1}, {2, 3, 4}}, {{1}, {2, 2}}, {{2, 1, 3}, {2, 4, 3}},
      {{4}, {3, 4}},       {{}, {3}},     {{1, 1}, {1, 1}}};
  for (const auto& [in, out] : cases) {
    const std::vector<float> x = iota_f(numel(in), 1.0f);
    OpTest t("Expand", 13, {f32(in, x), i64({static_cast<int64_t>(out.size())}, out, true)},
             {{BP_DTYPE_FLOAT32, out}});
    std::vector<float> want;
    for (int64_t i = 0; i < numel(out); ++i) want.push_back(x[broadcast_offset(in, out, i)]);
    EXPECT_EQ(t.run_as<float>(), want);
  }
  OpTest bad("Expand", 13, {f32({3}, {1, 2, 3}), i64({1}, {4}, true)}, {{BP_DTYPE_FLOAT32, {4}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "broadcast");
}

TEST(CpuRefTensor, Tile) {
  OpTest t("Tile", 13, {i64({2, 3}, iota_i64(6)), i64({2}, {2, 2}, true)},
           {{BP_DTYPE_INT64, {4, 6}}});
  std::vector<int64_t> want;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 6; ++j) want.push_back((i % 2) * 3 + j % 3);
  EXPECT_EQ(t.run_as<int64_t>(), want);
  OpTest r("Tile", 13, {f32({1, 2}, {5, 6}), i64({2}, {3, 1})}, {{BP_DTYPE_FLOAT32, {3, 2}}});
  EXPECT_EQ(r.run_as<float>(), (std::vector<float>{5, 6, 5, 6, 5, 6}));
  OpTest bad("Tile", 13, {f32({1, 2}, {5, 6}), i64({2}, {2, 1}, true)},
             {{BP_DTYPE_FLOAT32, {3, 2}}});
  expect_error(bad, BP_STATUS_INVALID_ARGUMENT, "shape");
}

// ---------------------------------------------------------------------------
// Pad
// ---------------------------------------------------------------------------

const std::vector<float> kPadData = {1.0f, 1.2f, 2.3f,
                                     3.4f, 4.5f, 5.7f};  // 3x2, the ONNX spec example

std::vector<float> run_pad(const std::string& mode, const std::vector<int64_t>& pads, Dims out) {
  OpTest t("Pad", 13, {f32({3, 2}, kPadData), i64({4}, pads, true)}, {{BP_DTYPE_FLOAT32, out}},
           {attr_s("mode", mode)});
  return t.run_as<float>();
}

TEST(CpuRefTensor, PadModesMatchTheOnnxExamples) {
  EXPECT_EQ(run_pad("constant", {0, 2, 0, 0}, {3, 4}),
            (std::vector<float>{0, 0, 1.0f, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f}));
  EXPECT_EQ(
      run_pad("reflect", {0, 2, 0, 0}, {3, 4}),
      (std::vector<float>{1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f, 4.5f, 5.7f, 4.5f, 5.7f}));
  EXPECT_EQ(
      run_pad("edge", {0, 2, 0, 0}, {3, 4}),
      (std::vector<float>{1.0f, 1.0f, 1.0f, 1.2f, 2.3f, 2.3f, 2.3f, 3.4f, 4.5f, 4.5f, 4.5f, 5.7f}));
  // wrap: rows -2..3 -> 1,2,0,1,2,0; cols -1..2 -> 1,0,1,0.
  std::vector<float> want;
  for (int64_t r : {1, 2, 0, 1, 2, 0})
    for (int64_t c : {1, 0, 1, 0}) want.push_back(kPadData[r * 2 + c]);
  EXPECT_EQ(run_pad("wrap", {2, 1, 1, 1}, {6, 4}), want);
}

TEST(CpuRefTensor, PadReflectBeyondTheEdgeAndCropping) {
  OpTest r("Pad", 13, {i32({3}, {1, 2, 3}), i64({2}, {5, 0}, true)}, {{BP_DTYPE_INT32, {8}}},
           {attr_s("mode", "reflect")});
  EXPECT_EQ(r.run_as<int32_t>(),
            (std::vector<int32_t>{2, 1, 2, 3, 2, 1, 2, 3}));  // numpy.pad reflect
  // Negative pads crop: drop column 0, append one column of 0.
  OpTest c("Pad", 13, {f32({2, 3}, iota_f(6, 1)), i64({4}, {0, -1, 0, 1}, true)},
           {{BP_DTYPE_FLOAT32, {2, 3}}});
  EXPECT_EQ(c.run_as<float>(), (std::vector<float>{2, 3, 0, 5, 6, 0}));
}

TEST(CpuRefTensor, PadOpsetVariants) {
  // Opset 2: attributes.
  OpTest a("Pad", 2, {f32({1, 2}, {1, 2})}, {{BP_DTYPE_FLOAT32, {3, 3}}},
           {attr_ints("pads", {1, 0, 1, 1}), attr_f("value", 9)});
  EXPECT_EQ(a.run_as<float>(), (std::vector<float>{9, 9, 9, 1, 2, 9, 9, 9, 9}));
  // Opset 18: axes input.
  OpTest x("Pad", 18,
           {i64({2, 2}, {1, 2, 3, 4}), i64({2}, {1, 1}, true), i64({}, {-1}, true),
            i64({1}, {-1}, true)},
           {{BP_DTYPE_INT64, {2, 4}}});
  EXPECT_EQ(x.run_as<int64_t>(), (std::vector<int64_t>{-1, 1, 2, -1, -1, 3, 4, -1}));
  // constant_value read at run time.
  OpTest v("Pad", 13, {f32({2}, {1, 2}), i64({2}, {1, 2}, true), f32({}, {7.5f})},
           {{BP_DTYPE_FLOAT32, {5}}});
  EXPECT_EQ(v.run_as<float>(), (std::vector<float>{7.5f, 1, 2, 7.5f, 7.5f}));
  // 3-D constant pad against a reference loop.
  const Dims in{2, 3, 2};
  const std::vector<int64_t> pads{1, 0, 2, 0, 2, 1};
  const Dims out{3, 5, 5};
  OpTest p("Pad", 13, {f32(in, iota_f(12, 1)), i64({6}, pads, true)}, {{BP_DTYPE_FLOAT32, out}});
  std::vector<float> want;
  for (int64_t i = 0; i < numel(out); ++i) {
    Dims idx = unravel(i, out);
    bool inside = true;
    for (size_t d = 0; d < 3; ++d) {
      idx[d] -= pads[d];
      if (idx[d] < 0 || idx[d] >= in[d]) inside = false;
    }
    want.push_back(inside ? static_cast<float>(ravel(idx, in) + 1) : 0.0f);
  }
  EXPECT_EQ(p.run_as<float>(), want);
  OpTest bad("Pad", 13, {f32({2}, {1, 2}), i64({2}, {1, 1})}, {{BP_DTYPE_FLOAT32, {4}}});
  expect_error(bad, BP_STATUS_UNSUPPORTED, "pads");
}

// ---------------------------------------------------------------------------
// Range, Trilu
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, Range) {
  OpTest f("Range", 11, {f32({}, {1}), f32({}, {2}), f32({}, {0.25f})}, {{BP_DTYPE_FLOAT32, {4}}});
  EXPECT_EQ(f.run_as<float>(), (std::vector<float>{1, 1.25f, 1.5f, 1.75f}));
  OpTest l("Range", 11, {i64({}, {10}, true), i64({}, {4}), i64({}, {-3})},
           {{BP_DTYPE_INT64, {2}}});
  EXPECT_EQ(l.run_as<int64_t>(), (std::vector<int64_t>{10, 7}));
  OpTest i("Range", 11, {i32({}, {-2}, true), i32({}, {3}, true), i32({}, {2}, true)},
           {{BP_DTYPE_INT32, {3}}});
  EXPECT_EQ(i.run_as<int32_t>(), (std::vector<int32_t>{-2, 0, 2}));
}

TEST(CpuRefTensor, Trilu) {
  const std::vector<float> x = iota_f(24, 1);  // 2 x 3 x 4
  auto ref = [&](bool upper, int64_t k) {
    std::vector<float> y(x.size());
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          const bool keep = upper ? j - i >= k : j - i <= k;
          y[(b * 3 + i) * 4 + j] = keep ? x[(b * 3 + i) * 4 + j] : 0;
        }
    return y;
  };
  OpTest u("Trilu", 14, {f32({2, 3, 4}, x)}, {{BP_DTYPE_FLOAT32, {2, 3, 4}}});
  EXPECT_EQ(u.run_as<float>(), ref(true, 0));
  OpTest l("Trilu", 14, {f32({2, 3, 4}, x), i64({}, {-1}, true)}, {{BP_DTYPE_FLOAT32, {2, 3, 4}}},
           {attr_i("upper", 0)});
  EXPECT_EQ(l.run_as<float>(), ref(false, -1));
  OpTest r("Trilu", 14, {f32({2, 3, 4}, x), i64({}, {2})}, {{BP_DTYPE_FLOAT32, {2, 3, 4}}});
  EXPECT_EQ(r.run_as<float>(), ref(true, 2));
}

// ---------------------------------------------------------------------------
// Reductions, ArgMax
// ---------------------------------------------------------------------------

enum class Red { kSum, kMean, kMax, kMin };

std::vector<double> ref_reduce(const std::vector<float>& x, const Dims& shape,
                               const std::vector<bool>& reduced, Red op) {
  Dims out_shape;
  for (size_t d = 0; d < shape.size(); ++d) out_shape.push_back(reduced[d] ? 1 : shape[d]);
  const int64_t n_out = numel(out_shape);
  std::vector<double> acc(static_cast<size_t>(n_out), op == Red::kMax   ? -INFINITY
                                                      : op == Red::kMin ? INFINITY
                                                                        : 0.0);
  std::vector<int64_t> cnt(static_cast<size_t>(n_out), 0);
  for (int64_t i = 0; i < numel(shape); ++i) {
    Dims idx = unravel(i, shape);
    for (size_t d = 0; d < shape.size(); ++d)
      if (reduced[d]) idx[d] = 0;
    const int64_t o = ravel(idx, out_shape);
    const double v = x[i];
    if (op == Red::kMax) acc[o] = std::max(acc[o], v);
    else if (op == Red::kMin) acc[o] = std::min(acc[o], v);
    else acc[o] += v;
    ++cnt[o];
  }
  if (op == Red::kMean)
    for (size_t o = 0; o < acc.size(); ++o) acc[o] /= static_cast<double>(cnt[o]);
  return acc;
}

TEST(CpuRefTensor, ReductionsMatchReferenceLoops) {
  const Dims shape{2, 3, 4};
  std::vector<float> x(24);
  for (int i = 0; i < 24; ++i) x[i] = static_cast<float>((i * 7) % 11) - 4.5f;
  const std::vector<std::vector<int64_t>> axes_cases = {{0},    {1},    {2},    {-1},
                                                        {0, 2}, {1, 2}, {0, 1}, {0, 1, 2}};
  const std::vector<std::pair<const char*, Red>> ops = {{"ReduceSum", Red::kSum},
                                                        {"ReduceMean", Red::kMean},
                                                        {"ReduceMax", Red::kMax},
                                                        {"ReduceMin", Red::kMin}};
  for (const auto& [op, red] : ops) {
    for (const auto& axes : axes_cases) {
      for (int keep : {0, 1}) {
        std::vector<bool> reduced(3, false);
        for (int64_t a : axes) reduced[(a + 3) % 3] = true;
        Dims out;
        for (size_t d = 0; d < 3; ++d)
          if (!reduced[d]) out.push_back(shape[d]);
          else if (keep) out.push_back(1);
        const std::vector<double> want = ref_reduce(x, shape, reduced, red);
        std::vector<float> wantf(want.begin(), want.end());
        SCOPED_TRACE(std::string(op) + " axes " + std::to_string(axes.size()) + " keep " +
                     std::to_string(keep));
        // Attribute form (opset 13) ...
        OpTest a(op, 11, {f32(shape, x)}, {{BP_DTYPE_FLOAT32, out}},
                 {attr_ints("axes", axes), attr_i("keepdims", keep)});
        expect_floats(a.run_as<float>(), wantf, 1e-6f);
        // ... and input form (opset 18).
        OpTest b(op, 18, {f32(shape, x), i64({static_cast<int64_t>(axes.size())}, axes, true)},
                 {{BP_DTYPE_FLOAT32, out}}, {attr_i("keepdims", keep)});
        expect_floats(b.run_as<float>(), wantf, 1e-6f);
      }
    }
  }
}

TEST(CpuRefTensor, ReduceDefaultAxesAndNoop) {
  // No axes: reduce everything (keepdims default 1).
  OpTest all("ReduceSum", 13, {f32({2, 2}, {1, 2, 3, 4})}, {{BP_DTYPE_FLOAT32, {1, 1}}});
  EXPECT_EQ(all.run_as<float>(), (std::vector<float>{10}));
  // Empty axes with noop_with_empty_axes: identity.
  OpTest noop("ReduceSum", 13, {f32({2, 2}, {1, 2, 3, 4}), i64({0}, {}, true)},
              {{BP_DTYPE_FLOAT32, {2, 2}}}, {attr_i("noop_with_empty_axes", 1)});
  EXPECT_EQ(noop.run_as<float>(), (std::vector<float>{1, 2, 3, 4}));
  // Int32 sum and mean.
  OpTest is("ReduceSum", 13, {i32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {1}, true)},
            {{BP_DTYPE_INT32, {2}}}, {attr_i("keepdims", 0)});
  EXPECT_EQ(is.run_as<int32_t>(), (std::vector<int32_t>{6, 15}));
  OpTest im("ReduceMax", 13, {i64({2, 3}, {1, 9, 3, -4, -5, -6})}, {{BP_DTYPE_INT64, {1, 3}}},
            {attr_ints("axes", {0})});
  EXPECT_EQ(im.run_as<int64_t>(), (std::vector<int64_t>{1, 9, 3}));
  // Float16 mean.
  OpTest h("ReduceMean", 13, {f16({4}, {1, 2, 3, 4.5f})}, {{BP_DTYPE_FLOAT16, {1}}});
  EXPECT_EQ(half_to_float(h.run_as<uint16_t>()[0]), 2.625f);
}

TEST(CpuRefTensor, ReduceWithNonConstantAxes) {
  // keepdims=1: the reduced axes follow from the output shape.
  OpTest k("ReduceMean", 18, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {1})},
           {{BP_DTYPE_FLOAT32, {2, 1}}});
  EXPECT_EQ(k.run_as<float>(), (std::vector<float>{2, 5}));
  OpTest n("ReduceMean", 18, {f32({2, 3}, {1, 2, 3, 4, 5, 6}), i64({1}, {1})},
           {{BP_DTYPE_FLOAT32, {2}}}, {attr_i("keepdims", 0)});
  expect_error(n, BP_STATUS_UNSUPPORTED, "axes");
}

TEST(CpuRefTensor, ArgMaxArgMin) {
  const std::vector<float> x = {1, 5, 5, 0, -2, 7, 7, 3, 7};  // 3 x 3, ties in rows 0 and 2
  OpTest a("ArgMax", 13, {f32({3, 3}, x)}, {{BP_DTYPE_INT64, {3, 1}}}, {attr_i("axis", 1)});
  EXPECT_EQ(a.run_as<int64_t>(), (std::vector<int64_t>{1, 2, 0}));
  OpTest l("ArgMax", 13, {f32({3, 3}, x)}, {{BP_DTYPE_INT64, {3}}},
           {attr_i("axis", -1), attr_i("keepdims", 0), attr_i("select_last_index", 1)});
  EXPECT_EQ(l.run_as<int64_t>(), (std::vector<int64_t>{2, 2, 2}));
  OpTest m("ArgMin", 13, {f32({3, 3}, x)}, {{BP_DTYPE_INT64, {3}}}, {attr_i("keepdims", 0)});
  EXPECT_EQ(m.run_as<int64_t>(), (std::vector<int64_t>{1, 1, 0}));
  OpTest i("ArgMax", 13, {i64({2, 2}, {3, -1, 2, 8})}, {{BP_DTYPE_INT64, {1, 2}}});
  EXPECT_EQ(i.run_as<int64_t>(), (std::vector<int64_t>{0, 1}));
}

// ---------------------------------------------------------------------------
// New dtypes in reductions, ArgMax and Range; ReduceLogSumExp
// ---------------------------------------------------------------------------

TEST(CpuRefTensor, ReduceLogSumExpInDoubleAndFloat) {
  const std::vector<double> x{0, 1, 2, 3, 4, 5};
  OpTest d("ReduceLogSumExp", 13, {tensor(BP_DTYPE_FLOAT64, {2, 3}, x)},
           {{BP_DTYPE_FLOAT64, {2, 1}}}, {attr_ints("axes", {1})});
  const std::vector<double> got = d.run_as<double>();
  EXPECT_NEAR(got[0], std::log(std::exp(0.0) + std::exp(1.0) + std::exp(2.0)), 1e-12);
  EXPECT_NEAR(got[1], std::log(std::exp(3.0) + std::exp(4.0) + std::exp(5.0)), 1e-12);
  OpTest f("ReduceLogSumExp", 13, {f32({2, 2}, {0, 0, 1, 1})}, {{BP_DTYPE_FLOAT32, {}}},
           {attr_i("keepdims", 0)});
  expect_floats(f.run_as<float>(), {float(std::log(2 + 2 * std::exp(1.0)))}, 1e-6f);
}

TEST(CpuRefTensor, ReductionsOnNewDtypes) {
  const uint64_t big = 0x8000000000000001ull;
  OpTest u("ReduceMax", 13, {tensor(BP_DTYPE_UINT64, {2}, std::vector<uint64_t>{big, 7})},
           {{BP_DTYPE_UINT64, {1}}});
  EXPECT_EQ(u.run_as<uint64_t>(), (std::vector<uint64_t>{big}));  // compared as unsigned
  OpTest s("ReduceSum", 13,
           {tensor(BP_DTYPE_UINT32, {3}, std::vector<uint32_t>{4000000000u, 1, 2})},
           {{BP_DTYPE_UINT32, {1}}});
  EXPECT_EQ(s.run_as<uint32_t>(), (std::vector<uint32_t>{4000000003u}));
  OpTest m("ReduceMean", 13, {tensor(BP_DTYPE_FLOAT64, {3}, std::vector<double>{0.1, 0.2, 0.4})},
           {{BP_DTYPE_FLOAT64, {1}}});
  EXPECT_DOUBLE_EQ(m.run_as<double>()[0], (0.1 + 0.2 + 0.4) / 3);
  OpTest b("ReduceSum", 13, {tensor(BP_DTYPE_BFLOAT16, {2}, std::vector<uint16_t>{0x3F80, 0x4000})},
           {{BP_DTYPE_BFLOAT16, {1}}});
  EXPECT_EQ(b.run_as<uint16_t>(), (std::vector<uint16_t>{0x4040}));  // 1 + 2 = 3
  OpTest a("ArgMin", 13, {tensor(BP_DTYPE_INT16, {3}, std::vector<int16_t>{5, -300, 2})},
           {{BP_DTYPE_INT64, {1}}});
  EXPECT_EQ(a.run_as<int64_t>(), (std::vector<int64_t>{1}));
  OpTest r("Range", 11,
           {tensor(BP_DTYPE_FLOAT64, {}, std::vector<double>{1.0}, true),
            tensor(BP_DTYPE_FLOAT64, {}, std::vector<double>{2.0}, true),
            tensor(BP_DTYPE_FLOAT64, {}, std::vector<double>{0.25}, true)},
           {{BP_DTYPE_FLOAT64, {4}}});
  EXPECT_EQ(r.run_as<double>(), (std::vector<double>{1.0, 1.25, 1.5, 1.75}));
}

}  // namespace
