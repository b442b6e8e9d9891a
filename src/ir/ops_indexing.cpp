// ops_indexing.cpp — schemas: gather/scatter, TopK, Unique, Compress, OneHot,
// TfIdfVectorizer. (NonZero lives with the control ops.)
//
// Type lists are ONNX's (onnx.defs type_constraints) minus the element types
// Backplane has no DType for (string, complex). Ops whose output size depends
// on a tensor's values (TopK's K, OneHot's depth, Compress's condition) infer
// the static shape when that tensor is a constant and a -1 dim otherwise
// (ShapeDependence::kData); Unique's sizes always depend on data.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace backplane::ir::ops {
namespace {

using detail::InferCtx;

constexpr int64_t kUnknownDim = -1;

// ONNX's T lists before opset 13 have no bfloat16.
DTypeList without_bfloat16(const DTypeList& list) {
  DTypeList out;
  for (DType d : list)
    if (d != DType::kBFloat16) out.push_back(d);
  return out;
}

std::string dims(const Shape& s) { return shape_to_string(s); }

// ------------------------------------------------------------ gather/scatter

Status infer_gather_elements(InferCtx& c) {
  const Shape& data = c.shape(0);
  const Shape& idx = c.shape(1);
  if (data.empty()) return c.error("input 'data' must have rank >= 1");
  if (idx.size() != data.size())
    return c.error("'indices' " + dims(idx) + " must have the rank of 'data' " + dims(data));
  BP_ASSIGN_OR_RETURN(int64_t axis_attr, c.node.attr_int("axis", 0));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.normalize_axis(axis_attr, c.rank(0), "axis"));
  (void)axis;
  c.set(0, c.dtype(0), idx);
  return ok_status();
}

Status infer_gather_nd(InferCtx& c) {
  const Shape& data = c.shape(0);
  const Shape& idx = c.shape(1);
  const int64_t r = c.rank(0), q = c.rank(1);
  BP_ASSIGN_OR_RETURN(int64_t b, c.node.attr_int("batch_dims", 0));
  if (r < 1 || q < 1) return c.error("'data' and 'indices' must have rank >= 1");
  if (b < 0 || b >= std::min(q, r))
    return c.error("batch_dims " + std::to_string(b) + " must be in [0, min(rank(data) " +
                   std::to_string(r) + ", rank(indices) " + std::to_string(q) + "))");
  for (int64_t d = 0; d < b; ++d)
    if (data[d] != idx[d])
      return c.error("batch dim " + std::to_string(d) + " differs: 'data' " + dims(data) +
                     ", 'indices' " + dims(idx));
  const int64_t m = idx.back();
  if (m < 1 || m > r - b)
    return c.error("the last dim of 'indices' " + dims(idx) + " is " + std::to_string(m) +
                   ", expected 1 to rank(data) - batch_dims = " + std::to_string(r - b));
  Shape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + m, data.end());
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// Scatter, ScatterElements: indices and updates have one shape, of data's rank.
Status infer_scatter_elements(InferCtx& c) {
  const Shape& data = c.shape(0);
  if (data.empty()) return c.error("input 'data' must have rank >= 1");
  if (c.shape(1) != c.shape(2))
    return c.error("'indices' " + dims(c.shape(1)) + " and 'updates' " + dims(c.shape(2)) +
                   " must have the same shape");
  if (c.rank(1) != c.rank(0))
    return c.error("'indices' " + dims(c.shape(1)) + " must have the rank of 'data' " + dims(data));
  BP_ASSIGN_OR_RETURN(int64_t axis_attr, c.node.attr_int("axis", 0));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.normalize_axis(axis_attr, c.rank(0), "axis"));
  for (size_t d = 0; d < data.size(); ++d)
    if (static_cast<int64_t>(d) != axis && c.shape(1)[d] > data[d])
      return c.error("'indices' " + dims(c.shape(1)) + " is larger than 'data' " + dims(data) +
                     " in dim " + std::to_string(d));
  BP_ASSIGN_OR_RETURN(std::string reduction, c.node.attr_string("reduction", "none"));
  if (reduction != "none" && reduction != "add" && reduction != "mul")
    return c.error("reduction '" + reduction + "' is not one of none, add, mul");
  c.set(0, c.dtype(0), data);
  return ok_status();
}

Status infer_scatter_nd(InferCtx& c) {
  const Shape& data = c.shape(0);
  const Shape& idx = c.shape(1);
  if (data.empty() || idx.empty()) return c.error("'data' and 'indices' must have rank >= 1");
  const int64_t m = idx.back();
  if (m < 1 || m > c.rank(0))
    return c.error("the last dim of 'indices' " + dims(idx) +
                   " must be in [1, rank(data) = " + std::to_string(c.rank(0)) + "]");
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), data.begin() + m, data.end());
  if (c.shape(2) != want)
    return c.error("'updates' has shape " + dims(c.shape(2)) + ", expected " + dims(want) +
                   " (indices.shape[:-1] + data.shape[indices.shape[-1]:])");
  BP_ASSIGN_OR_RETURN(std::string reduction, c.node.attr_string("reduction", "none"));
  if (reduction != "none" && reduction != "add" && reduction != "mul")
    return c.error("reduction '" + reduction + "' is not one of none, add, mul");
  c.set(0, c.dtype(0), data);
  return ok_status();
}

Status infer_scatter_deprecated(InferCtx& c) {
  return c.error("Scatter is deprecated from opset 11 on (use ScatterElements)");
}

// ------------------------------------------------------------------- OneHot

// A scalar (or one-element) constant of any numeric dtype, as a double.
Result<double> scalar_input(const InferCtx& c, size_t i, const char* param) {
  const Tensor* t = c.constant(i);
  if (t == nullptr) return c.error(std::string("input '") + param + "' is not constant");
  if (t->numel() != 1)
    return c.error(std::string("input '") + param + "' must hold one value, it has shape " +
                   dims(t->shape()));
  switch (t->dtype()) {
    case DType::kInt8:
      return static_cast<double>(*t->data_as<int8_t>());
    case DType::kInt16:
      return static_cast<double>(*t->data_as<int16_t>());
    case DType::kInt32:
      return static_cast<double>(*t->data_as<int32_t>());
    case DType::kInt64:
      return static_cast<double>(*t->data_as<int64_t>());
    case DType::kUInt8:
      return static_cast<double>(*t->data_as<uint8_t>());
    case DType::kUInt16:
      return static_cast<double>(*t->data_as<uint16_t>());
    case DType::kUInt32:
      return static_cast<double>(*t->data_as<uint32_t>());
    case DType::kUInt64:
      return static_cast<double>(*t->data_as<uint64_t>());
    case DType::kFloat32:
      return static_cast<double>(*t->data_as<float>());
    case DType::kFloat64:
      return *t->data_as<double>();
    case DType::kBFloat16: {  // the high half of a float32
      const uint32_t bits = static_cast<uint32_t>(*t->data_as<uint16_t>()) << 16;
      float f;
      std::memcpy(&f, &bits, sizeof(f));
      return static_cast<double>(f);
    }
    default: {
      BP_ASSIGN_OR_RETURN(std::vector<double> v, c.numbers_input(i, param));
      return v.at(0);
    }
  }
}

Status infer_one_hot(InferCtx& c) {
  if (detail::sat_numel(c.shape(2)) != 2)
    return c.error("'values' must hold two elements [off_value, on_value], it has shape " +
                   dims(c.shape(2)));
  if (detail::sat_numel(c.shape(1)) != 1)
    return c.error("'depth' must hold one value, it has shape " + dims(c.shape(1)));
  const int64_t r = c.rank(0);
  BP_ASSIGN_OR_RETURN(int64_t axis_attr, c.node.attr_int("axis", -1));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.normalize_axis(axis_attr, r + 1, "axis"));
  int64_t depth = kUnknownDim;
  if (c.constant(1) != nullptr) {
    BP_ASSIGN_OR_RETURN(double d, scalar_input(c, 1, "depth"));
    if (!(d >= 1) || d > static_cast<double>(detail::kMaxElements))
      return c.error("depth " + std::to_string(d) + " is not a positive size");
    depth = static_cast<int64_t>(d);  // ONNX: a float depth is truncated
  }
  Shape out = c.shape(0);
  out.insert(out.begin() + axis, depth);
  c.set(0, c.dtype(2), out);
  return ok_status();
}

// --------------------------------------------------------------------- TopK

Status infer_top_k(InferCtx& c) {
  const Shape& x = c.shape(0);
  if (x.empty()) return c.error("input 'X' must have rank >= 1");
  BP_ASSIGN_OR_RETURN(int64_t axis_attr, c.node.attr_int("axis", -1));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.normalize_axis(axis_attr, c.rank(0), "axis"));
  int64_t k = kUnknownDim;
  if (c.opset < 10) {
    BP_ASSIGN_OR_RETURN(k, c.node.attr_int("k", -1));
  } else {
    if (c.rank(1) != 1 || c.shape(1)[0] != 1)
      return c.error("'K' must be a 1-D tensor of one element, it has shape " + dims(c.shape(1)));
    if (c.constant(1) != nullptr) {
      BP_ASSIGN_OR_RETURN(std::vector<int64_t> kv, c.ints_input(1, "K"));
      k = kv.at(0);
    }
  }
  if (c.opset < 10 || c.constant(1) != nullptr) {
    if (k < 0 || k > x[axis])
      return c.error("k = " + std::to_string(k) + " is out of range for axis " +
                     std::to_string(axis) + " of size " + std::to_string(x[axis]));
  }
  Shape out = x;
  out[axis] = k;
  c.set(0, c.dtype(0), out);
  c.set(1, DType::kInt64, out);
  return ok_status();
}

// ------------------------------------------------------------------- Unique

Status infer_unique(InferCtx& c) {
  const Shape& x = c.shape(0);
  Shape y{kUnknownDim};
  int64_t inverse = detail::sat_numel(x);
  if (c.node.attr("axis") != nullptr) {
    BP_ASSIGN_OR_RETURN(int64_t axis_attr, c.node.attr_int("axis", 0));
    BP_ASSIGN_OR_RETURN(int64_t axis, c.normalize_axis(axis_attr, c.rank(0), "axis"));
    y = x;
    y[axis] = kUnknownDim;
    inverse = x[axis];
  }
  BP_ASSIGN_OR_RETURN(int64_t sorted, c.node.attr_int("sorted", 1));
  if (sorted != 0 && sorted != 1) return c.error("sorted must be 0 or 1");
  c.set(0, c.dtype(0), y);
  c.set(1, DType::kInt64, {kUnknownDim});
  c.set(2, DType::kInt64, {inverse});
  c.set(3, DType::kInt64, {kUnknownDim});
  return ok_status();
}

// ----------------------------------------------------------------- Compress

Status infer_compress(InferCtx& c) {
  const Shape& x = c.shape(0);
  if (c.rank(1) != 1) return c.error("'condition' must be 1-D, it has shape " + dims(c.shape(1)));
  const bool has_axis = c.node.attr("axis") != nullptr;
  int64_t axis = 0, len = detail::sat_numel(x);
  if (has_axis) {
    BP_ASSIGN_OR_RETURN(int64_t axis_attr, c.node.attr_int("axis", 0));
    if (c.opset < 11 && axis_attr < 0)
      return c.error("axis " + std::to_string(axis_attr) + " must be >= 0 before opset 11");
    BP_ASSIGN_OR_RETURN(axis, c.normalize_axis(axis_attr, c.rank(0), "axis"));
    len = x[axis];
  }
  // A condition longer than the axis may only be false past its end
  // (numpy.compress); a shorter one drops the rest.
  int64_t kept = kUnknownDim;
  if (const Tensor* t = c.constant(1)) {
    kept = 0;
    const uint8_t* p = t->data_as<uint8_t>();
    for (int64_t i = 0; i < t->numel(); ++i) {
      if (p[i] == 0) continue;
      if (i >= len)
        return c.error("'condition' selects index " + std::to_string(i) +
                       ", out of range for a length of " + std::to_string(len));
      ++kept;
    }
  }
  Shape out{kept};
  if (has_axis) {
    out = x;
    out[axis] = kept;
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// ---------------------------------------------------------- TfIdfVectorizer

Status infer_tfidf(InferCtx& c) {
  const Shape& x = c.shape(0);
  if (x.size() != 1 && x.size() != 2)
    return c.error("input 'X' must be 1-D or 2-D, it has shape " + dims(x));
  if (c.node.attr("pool_strings") != nullptr)
    return c.unsupported_error("pool_strings: string tensors are not supported");
  BP_ASSIGN_OR_RETURN(std::string mode, c.node.attr_string("mode", ""));
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF")
    return c.error("mode '" + mode + "' is not one of TF, IDF, TFIDF");
  BP_ASSIGN_OR_RETURN(int64_t min_gram, c.node.attr_int("min_gram_length", 0));
  BP_ASSIGN_OR_RETURN(int64_t max_gram, c.node.attr_int("max_gram_length", 0));
  BP_ASSIGN_OR_RETURN(int64_t max_skip, c.node.attr_int("max_skip_count", 0));
  if (min_gram < 1 || max_gram < min_gram)
    return c.error("min_gram_length " + std::to_string(min_gram) + " and max_gram_length " +
                   std::to_string(max_gram) + " must satisfy 1 <= min <= max");
  if (max_skip < 0) return c.error("max_skip_count must be >= 0");
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> counts, c.node.attr_ints("ngram_counts"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> indexes, c.node.attr_ints("ngram_indexes"));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> pool, c.node.attr_ints("pool_int64s"));
  if (c.node.attr("pool_int64s") == nullptr)
    return c.error("one of pool_int64s and pool_strings is required");
  if (counts.empty()) return c.error("ngram_counts is empty");
  // ngram_counts[n-1] is where the n-grams start in the pool.
  int64_t ngrams = 0;
  for (size_t n = 0; n < counts.size(); ++n) {
    const int64_t start = counts[n];
    const int64_t end = n + 1 < counts.size() ? counts[n + 1] : static_cast<int64_t>(pool.size());
    if (start < 0 || end < start || end > static_cast<int64_t>(pool.size()) ||
        (end - start) % static_cast<int64_t>(n + 1) != 0)
      return c.error("ngram_counts[" + std::to_string(n) + "] = " + std::to_string(start) +
                     " does not split pool_int64s (" + std::to_string(pool.size()) +
                     " values) into whole " + std::to_string(n + 1) + "-grams");
    ngrams += (end - start) / static_cast<int64_t>(n + 1);
  }
  if (static_cast<int64_t>(indexes.size()) != ngrams)
    return c.error("ngram_indexes has " + std::to_string(indexes.size()) +
                   " entries, the pool holds " + std::to_string(ngrams) + " n-grams");
  BP_ASSIGN_OR_RETURN(std::vector<float> weights, c.node.attr_floats("weights"));
  if (!weights.empty() && static_cast<int64_t>(weights.size()) != ngrams)
    return c.error("weights has " + std::to_string(weights.size()) + " entries, the pool holds " +
                   std::to_string(ngrams) + " n-grams");
  int64_t width = 0;
  for (int64_t i : indexes) {
    if (i < 0 || i >= detail::kMaxElements)
      return c.error("ngram_indexes holds " + std::to_string(i) + ", out of range");
    width = std::max(width, i + 1);
  }
  Shape out{width};
  if (x.size() == 2) out = {x[0], width};
  c.set(0, DType::kFloat32, out);
  return ok_status();
}

}  // namespace

void register_indexing_ops(OpRegistry& r) {
  const DTypeList all = dtypes::kAll;
  const DTypeList all12 = without_bfloat16(dtypes::kAll);
  const DTypeList numeric12 = without_bfloat16(dtypes::kNumeric);
  const DTypeList floats12 = without_bfloat16(dtypes::kFloat);
  const DTypeList i64 = {DType::kInt64};

  for (int since : {11, 13})
    (void)r.add(OpSchema("", "GatherElements", since)
                    .doc("output[i][j][k] = data[index[i][j][k]][j][k] along `axis`")
                    .input("data", "T")
                    .input("indices", "Tind")
                    .output("output", "T")
                    .type("T", since >= 13 ? all : all12)
                    .type("Tind", dtypes::kIndex)
                    .attr("axis", AttrType::kInt, int64_t{0})
                    .infer(infer_gather_elements));

  for (int since : {11, 12, 13}) {
    OpSchema s("", "GatherND", since);
    s.doc("slices of data addressed by the last dim of indices, after batch_dims")
        .input("data", "T")
        .input("indices", "I")
        .output("output", "T")
        .type("T", since >= 13 ? all : all12)
        .type("I", i64)
        .infer(infer_gather_nd);
    if (since >= 12) s.attr("batch_dims", AttrType::kInt, int64_t{0});
    (void)r.add(std::move(s));
  }

  for (int since : {11, 13, 16}) {
    OpSchema s("", "ScatterElements", since);
    s.doc("data with updates written (or added, multiplied) at indices along `axis`")
        .input("data", "T")
        .input("indices", "Tind")
        .input("updates", "T")
        .output("output", "T")
        .type("T", since >= 13 ? all : all12)
        .type("Tind", dtypes::kIndex)
        .attr("axis", AttrType::kInt, int64_t{0})
        .infer(infer_scatter_elements);
    if (since >= 16) s.attr("reduction", AttrType::kString, std::string("none"));
    (void)r.add(std::move(s));
  }

  for (int since : {11, 13, 16}) {
    OpSchema s("", "ScatterND", since);
    s.doc("data with slices replaced (or added, multiplied) at the indices' last dim")
        .input("data", "T")
        .input("indices", "I")
        .input("updates", "T")
        .output("output", "T")
        .type("T", since >= 13 ? all : all12)
        .type("I", i64)
        .infer(infer_scatter_nd);
    if (since >= 16) s.attr("reduction", AttrType::kString, std::string("none"));
    (void)r.add(std::move(s));
  }

  (void)r.add(OpSchema("", "Scatter", 9)
                  .doc("ScatterElements without reduction (deprecated from opset 11)")
                  .input("data", "T")
                  .input("indices", "Tind")
                  .input("updates", "T")
                  .output("output", "T")
                  .type("T", all12)
                  .type("Tind", dtypes::kIndex)
                  .attr("axis", AttrType::kInt, int64_t{0})
                  .infer(infer_scatter_elements));
  // From opset 11 a model must use ScatterElements: this version only exists
  // so that such a node gets that message rather than Scatter-9's meaning.
  (void)r.add(OpSchema("", "Scatter", 11)
                  .doc("deprecated: use ScatterElements")
                  .input("data", "T")
                  .input("indices", "Tind")
                  .input("updates", "T")
                  .output("output", "T")
                  .type("T", all12)
                  .type("Tind", dtypes::kIndex)
                  .attr("axis", AttrType::kInt, int64_t{0})
                  .infer(infer_scatter_deprecated));

  for (int since : {9, 11})
    (void)r.add(OpSchema("", "OneHot", since)
                    .doc("one-hot encoding of indices along a new axis of size depth")
                    .input("indices", "T1")
                    .input("depth", "T2")
                    .input("values", "T3")
                    .output("output", "T3")
                    .type("T1", numeric12)
                    .type("T2", numeric12)
                    .type("T3", all12)
                    .attr("axis", AttrType::kInt, int64_t{-1})
                    .shape_dependence(ShapeDependence::kData)
                    .infer(infer_one_hot));

  (void)r.add(OpSchema("", "TopK", 1)
                  .doc("the k largest elements along an axis and their indices")
                  .input("X", "T")
                  .output("Values", "T")
                  .output("Indices", "I")
                  .type("T", floats12)
                  .type("I", i64)
                  .attr("axis", AttrType::kInt, int64_t{-1})
                  .required_attr("k", AttrType::kInt)
                  .infer(infer_top_k));
  for (int since : {10, 11}) {
    OpSchema s("", "TopK", since);
    s.doc("the k largest (or smallest) elements along an axis and their indices")
        .input("X", "T")
        .input("K", "I")
        .output("Values", "T")
        .output("Indices", "I")
        .type("T", since >= 11 ? numeric12 : floats12)
        .type("I", i64)
        .attr("axis", AttrType::kInt, int64_t{-1})
        .shape_dependence(ShapeDependence::kData)
        .infer(infer_top_k);
    if (since >= 11)
      s.attr("largest", AttrType::kInt, int64_t{1}).attr("sorted", AttrType::kInt, int64_t{1});
    (void)r.add(std::move(s));
  }

  (void)r.add(OpSchema("", "Unique", 11)
                  .doc("unique elements (or slices along axis), first indices, inverse, counts")
                  .input("X", "T")
                  .output("Y", "T")
                  .optional_output("indices", "I")
                  .optional_output("inverse_indices", "I")
                  .optional_output("counts", "I")
                  .type("T", all12)
                  .type("I", i64)
                  .attr("axis", AttrType::kInt)
                  .attr("sorted", AttrType::kInt, int64_t{1})
                  .shape_dependence(ShapeDependence::kData)
                  .infer(infer_unique));

  for (int since : {9, 11})
    (void)r.add(OpSchema("", "Compress", since)
                    .doc("the slices along axis (or elements) where condition is true")
                    .input("input", "T")
                    .input("condition", "T1")
                    .output("output", "T")
                    .type("T", all12)
                    .type("T1", {DType::kBool})
                    .attr("axis", AttrType::kInt)
                    .shape_dependence(ShapeDependence::kData)
                    .infer(infer_compress));

  (void)r.add(OpSchema("", "TfIdfVectorizer", 9)
                  .doc("n-gram counts (TF, IDF or TF-IDF) of integer sequences")
                  .input("X", "T")
                  .output("Y", "T1")
                  .type("T", dtypes::kIndex)
                  .type("T1", {DType::kFloat32})
                  .required_attr("max_gram_length", AttrType::kInt)
                  .required_attr("max_skip_count", AttrType::kInt)
                  .required_attr("min_gram_length", AttrType::kInt)
                  .required_attr("mode", AttrType::kString)
                  .required_attr("ngram_counts", AttrType::kInts)
                  .required_attr("ngram_indexes", AttrType::kInts)
                  .attr("pool_int64s", AttrType::kInts)
                  .attr("pool_strings", AttrType::kStrings)
                  .attr("weights", AttrType::kFloats)
                  .infer(infer_tfidf));
}

}  // namespace backplane::ir::ops
