// A small evaluator for constant folding: enough ops and dtypes (int32,
// int64, float32, bool for comparisons) to fold the shape arithmetic that
// exporters such as torch.onnx emit (Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape). Output types come from inference, which already validated them.
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <type_traits>

namespace backplane::ir::detail {

namespace {

// Folding larger results would trade a cheap kernel for resident memory.
constexpr int64_t kMaxFoldElements = int64_t{1} << 22;

// (Saturating: a tensor with a 0 dim may have other dims of any size; its
// strides are never used to address anything.)
std::vector<int64_t> contiguous_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = sat_mul(st[d], std::max<int64_t>(s[d], 0));
  return st;
}

// Element stride of `in` for each dim of `out` under numpy broadcasting.
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  const std::vector<int64_t> cs = contiguous_strides(in);
  std::vector<int64_t> st(out.size(), 0);
  const size_t off = out.size() - in.size();
  for (size_t j = 0; j < in.size(); ++j) st[j + off] = in[j] == 1 ? 0 : cs[j];
  return st;
}

// Element offset into the source for every element of `out`, in row-major order.
std::vector<int64_t> offsets(const Shape& out, const std::vector<int64_t>& stride, int64_t base) {
  const int64_t n = sat_numel(out);
  std::vector<int64_t> res(static_cast<size_t>(n));
  std::vector<int64_t> idx(out.size(), 0);
  int64_t off = base;
  for (int64_t k = 0; k < n; ++k) {
    res[k] = off;
    for (size_t d = out.size(); d-- > 0;) {
      off += stride[d];
      if (++idx[d] < out[d]) break;
      off -= stride[d] * out[d];
      idx[d] = 0;
    }
  }
  return res;
}

Tensor gather_elements(const Tensor& src, const Shape& out, const std::vector<int64_t>& offs) {
  Tensor t(src.dtype(), out);
  const size_t es = dtype_size(src.dtype());
  const auto* s = static_cast<const unsigned char*>(src.data());
  auto* d = static_cast<unsigned char*>(t.data());
  for (size_t k = 0; k < offs.size(); ++k) std::memcpy(d + k * es, s + offs[k] * es, es);
  return t;
}

// Calls f.template operator()<T>() for the C++ type of `t`; false if none.
template <class F>
bool with_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f.template operator()<float>();
      return true;
    case DType::kInt32:
      f.template operator()<int32_t>();
      return true;
    case DType::kInt64:
      f.template operator()<int64_t>();
      return true;
    default:
      return false;
  }
}

template <class T>
T elem(const Tensor& t, int64_t i) {
  return t.data_as<T>()[i];
}

// Converts one element between the supported types; bool is stored as uint8.
template <class S, class D>
D convert(S v) {
  if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D>) {
    // Out-of-range float -> int is undefined in C++; saturate instead.
    if (std::isnan(v)) return 0;
    const long double lo = static_cast<long double>(std::numeric_limits<D>::min());
    const long double hi = static_cast<long double>(std::numeric_limits<D>::max());
    const long double x = std::trunc(static_cast<long double>(v));
    if (x <= lo) return std::numeric_limits<D>::min();
    if (x >= hi) return std::numeric_limits<D>::max();
    return static_cast<D>(x);
  } else {
    return static_cast<D>(v);
  }
}

template <class F>
bool with_cast_type(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f.template operator()<float>();
      return true;
    case DType::kInt32:
      f.template operator()<int32_t>();
      return true;
    case DType::kInt64:
      f.template operator()<int64_t>();
      return true;
    case DType::kInt8:
      f.template operator()<int8_t>();
      return true;
    case DType::kUInt8:
      f.template operator()<uint8_t>();
      return true;
    case DType::kBool:
      f.template operator()<bool>();
      return true;
    default:
      return false;
  }
}

Result<bool> eval_cast(const InferCtx& c, const Tensor& x, std::vector<Tensor>* outs) {
  const DType to = c.out[0].dtype;
  Tensor y(to, x.shape());
  const int64_t n = x.numel();
  bool ok = false;
  with_cast_type(x.dtype(), [&]<class S>() {
    ok = with_cast_type(to, [&]<class D>() {
      for (int64_t i = 0; i < n; ++i) {
        S v;
        if constexpr (std::is_same_v<S, bool>) v = static_cast<const uint8_t*>(x.data())[i] != 0;
        else v = x.data_as<S>()[i];
        if constexpr (std::is_same_v<D, bool>) static_cast<uint8_t*>(y.data())[i] = v != S(0);
        else if constexpr (std::is_same_v<S, bool>) y.data_as<D>()[i] = static_cast<D>(v ? 1 : 0);
        else y.data_as<D>()[i] = convert<S, D>(v);
      }
    });
  });
  if (!ok) return false;
  outs->push_back(std::move(y));
  return true;
}

// Elementwise over broadcast inputs; `op` gets the flat output index and the
// element offsets of each input.
template <class F>
void elementwise(const InferCtx& c, const std::vector<const Tensor*>& ins, const Shape& out,
                 F&& op) {
  std::vector<std::vector<int64_t>> offs;
  for (const Tensor* t : ins) offs.push_back(offsets(out, broadcast_strides(t->shape(), out), 0));
  const int64_t n = sat_numel(out);
  std::vector<int64_t> at(ins.size());
  for (int64_t k = 0; k < n; ++k) {
    for (size_t j = 0; j < ins.size(); ++j) at[j] = offs[j][k];
    op(k, at);
  }
}

Result<bool> eval_arith(const InferCtx& c, const std::vector<const Tensor*>& ins,
                        std::vector<Tensor>* outs) {
  const std::string& op = c.node.op_type;
  const OutInfo& o = c.out[0];
  Tensor y(o.dtype, o.shape);
  bool ok = true;
  bool typed = with_type(ins[0]->dtype(), [&]<class T>() {
    T* out = y.data_as<T>();
    // Integers wrap around (as ONNX Runtime and NumPy do); computed unsigned,
    // since signed overflow is undefined in C++ and values come from files.
    using Wide = typename std::conditional_t<std::is_integral_v<T>, std::make_unsigned<T>,
                                             std::type_identity<T>>::type;
    auto neg = [](T v) {
      if constexpr (std::is_integral_v<T>) return static_cast<T>(Wide{} - static_cast<Wide>(v));
      else return static_cast<T>(-v);
    };
    elementwise(c, ins, o.shape, [&](int64_t k, const std::vector<int64_t>& at) {
      if (op == "Neg") {
        out[k] = neg(elem<T>(*ins[0], at[0]));
        return;
      }
      if (op == "Abs") {
        T v = elem<T>(*ins[0], at[0]);
        out[k] = v < 0 ? neg(v) : v;
        return;
      }
      if (op == "Min" || op == "Max") {
        T v = elem<T>(*ins[0], at[0]);
        for (size_t j = 1; j < ins.size(); ++j) {
          T w = elem<T>(*ins[j], at[j]);
          v = op == "Min" ? std::min(v, w) : std::max(v, w);
        }
        out[k] = v;
        return;
      }
      const T a = elem<T>(*ins[0], at[0]), b = elem<T>(*ins[1], at[1]);
      if (op == "Add") out[k] = static_cast<T>(static_cast<Wide>(a) + static_cast<Wide>(b));
      else if (op == "Sub") out[k] = static_cast<T>(static_cast<Wide>(a) - static_cast<Wide>(b));
      else if (op == "Mul") out[k] = static_cast<T>(static_cast<Wide>(a) * static_cast<Wide>(b));
      else {  // Div
        if constexpr (std::is_integral_v<T>) {
          // Integer division by zero (or INT_MIN / -1) has no value; leave it to run time.
          if (b == 0 || (b == -1 && a == std::numeric_limits<T>::min())) {
            ok = false;
            return;
          }
        }
        out[k] = static_cast<T>(a / b);
      }
    });
  });
  if (!typed || !ok) return false;
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_compare(const InferCtx& c, const std::vector<const Tensor*>& ins,
                          std::vector<Tensor>* outs) {
  const std::string& op = c.node.op_type;
  const OutInfo& o = c.out[0];
  Tensor y(DType::kBool, o.shape);
  uint8_t* out = static_cast<uint8_t*>(y.data());
  auto run = [&]<class T>() {
    elementwise(c, ins, o.shape, [&](int64_t k, const std::vector<int64_t>& at) {
      const T a = elem<T>(*ins[0], at[0]), b = elem<T>(*ins[1], at[1]);
      out[k] = op == "Equal" ? a == b : op == "Less" ? a < b : a > b;
    });
  };
  if (ins[0]->dtype() == DType::kBool) {
    if (op != "Equal") return false;
    run.template operator()<uint8_t>();
  } else if (!with_type(ins[0]->dtype(), run)) {
    return false;
  }
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_logical(const InferCtx& c, const std::vector<const Tensor*>& ins,
                          std::vector<Tensor>* outs) {
  const std::string& op = c.node.op_type;
  const OutInfo& o = c.out[0];
  Tensor y(DType::kBool, o.shape);
  uint8_t* out = static_cast<uint8_t*>(y.data());
  elementwise(c, ins, o.shape, [&](int64_t k, const std::vector<int64_t>& at) {
    const bool a = elem<uint8_t>(*ins[0], at[0]) != 0;
    if (op == "Not") {
      out[k] = !a;
      return;
    }
    const bool b = elem<uint8_t>(*ins[1], at[1]) != 0;
    out[k] = op == "And" ? (a && b) : (a || b);
  });
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_where(const InferCtx& c, const std::vector<const Tensor*>& ins,
                        std::vector<Tensor>* outs) {
  const OutInfo& o = c.out[0];
  Tensor y(o.dtype, o.shape);
  const size_t es = dtype_size(o.dtype);
  auto* out = static_cast<unsigned char*>(y.data());
  elementwise(c, ins, o.shape, [&](int64_t k, const std::vector<int64_t>& at) {
    const bool cond = elem<uint8_t>(*ins[0], at[0]) != 0;
    const Tensor& src = cond ? *ins[1] : *ins[2];
    std::memcpy(out + k * es, static_cast<const unsigned char*>(src.data()) + at[cond ? 1 : 2] * es,
                es);
  });
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_range(const InferCtx& c, const std::vector<const Tensor*>& ins,
                        std::vector<Tensor>* outs) {
  const OutInfo& o = c.out[0];
  Tensor y(o.dtype, o.shape);
  const int64_t n = sat_numel(o.shape);
  bool typed = with_type(o.dtype, [&]<class T>() {
    const T start = elem<T>(*ins[0], 0), delta = elem<T>(*ins[2], 0);
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_integral_v<T>) {
        // Every element lies between start and limit, but i * delta alone may
        // not fit (start -2^63, delta 2^62): computed unsigned, where it wraps.
        using U = std::make_unsigned_t<T>;
        y.data_as<T>()[i] =
            static_cast<T>(static_cast<U>(start) + static_cast<U>(i) * static_cast<U>(delta));
      } else {
        y.data_as<T>()[i] = static_cast<T>(start + static_cast<T>(i) * delta);
      }
    }
  });
  if (!typed) return false;
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_gather(const InferCtx& c, const Tensor& data, std::vector<Tensor>* outs) {
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  const Shape& ds = data.shape();
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(ds.size()) : axis;
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> idx, c.ints_input(1, "indices"));
  const int64_t outer = sat_numel(Shape(ds.begin(), ds.begin() + ax));
  const int64_t inner = sat_numel(Shape(ds.begin() + ax + 1, ds.end()));
  const int64_t dim = ds[ax];
  const size_t block = static_cast<size_t>(inner) * dtype_size(data.dtype());
  Tensor y(data.dtype(), c.out[0].shape);
  const auto* s = static_cast<const unsigned char*>(data.data());
  auto* d = static_cast<unsigned char*>(y.data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : idx) {
      const int64_t j = i < 0 ? i + dim : i;  // range checked by inference
      std::memcpy(d, s + (o * dim + j) * block, block);
      d += block;
    }
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_concat(const InferCtx& c, const std::vector<const Tensor*>& ins,
                         std::vector<Tensor>* outs) {
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 0));
  const Shape& os = c.out[0].shape;
  const int64_t ax = axis < 0 ? axis + static_cast<int64_t>(os.size()) : axis;
  const int64_t outer = sat_numel(Shape(os.begin(), os.begin() + ax));
  const size_t es = dtype_size(c.out[0].dtype);
  Tensor y(c.out[0].dtype, os);
  auto* d = static_cast<unsigned char*>(y.data());
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor* t : ins) {
      const Shape& s = t->shape();
      const size_t block = static_cast<size_t>(sat_numel(Shape(s.begin() + ax, s.end()))) * es;
      std::memcpy(d, static_cast<const unsigned char*>(t->data()) + o * block, block);
      d += block;
    }
  outs->push_back(std::move(y));
  return true;
}

}  // namespace

bool const_eval_supported(const std::string& op) {
  static const std::set<std::string> ops = {"Shape",    "Gather",    "Unsqueeze", "Squeeze",
                                            "Concat",   "Slice",     "Cast",      "Add",
                                            "Sub",      "Mul",       "Div",       "Equal",
                                            "Less",     "Greater",   "Where",     "ConstantOfShape",
                                            "Range",    "Reshape",   "Identity",  "Flatten",
                                            "Constant", "Expand",    "Not",       "And",
                                            "Or",       "Min",       "Max",       "Neg",
                                            "Abs",      "Transpose", "Size"};
  return ops.count(op) > 0;
}

namespace {

Result<bool> eval_shape(const InferCtx& c, std::vector<Tensor>* outs) {
  int64_t first, last;
  BP_RETURN_IF_ERROR(shape_range(c, &first, &last));
  const Shape& s = c.shape(0);
  Tensor y(DType::kInt64, c.out[0].shape);
  for (int64_t i = first; i < last; ++i) y.data_as<int64_t>()[i - first] = s[i];
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_constant_of_shape(const InferCtx& c, std::vector<Tensor>* outs) {
  const OutInfo& o = c.out[0];
  Tensor y(o.dtype, o.shape);
  if (const Attribute* a = c.node.attr("value")) {
    const size_t es = dtype_size(o.dtype);
    auto* d = static_cast<unsigned char*>(y.data());
    for (int64_t i = 0; i < y.numel(); ++i) std::memcpy(d + i * es, a->t.data(), es);
  }
  outs->push_back(std::move(y));
  return true;
}

Result<bool> eval_transpose(const InferCtx& c, const Tensor& x, std::vector<Tensor>* outs) {
  const int64_t r = static_cast<int64_t>(x.rank());
  std::vector<int64_t> rev;
  for (int64_t i = r - 1; i >= 0; --i) rev.push_back(i);
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> perm, c.node.attr_ints("perm", rev));
  const std::vector<int64_t> cs = contiguous_strides(x.shape());
  std::vector<int64_t> st;
  for (int64_t p : perm) st.push_back(cs[p]);
  outs->push_back(gather_elements(x, c.out[0].shape, offsets(c.out[0].shape, st, 0)));
  return true;
}

Result<bool> eval_slice(const InferCtx& c, const Tensor& x, std::vector<Tensor>* outs) {
  BP_ASSIGN_OR_RETURN(SlicePlan p, slice_plan_for(c));
  const std::vector<int64_t> cs = contiguous_strides(x.shape());
  std::vector<int64_t> st(cs.size());
  int64_t base = 0;
  for (size_t d = 0; d < cs.size(); ++d) {
    st[d] = cs[d] * p.step[d];
    base += cs[d] * p.start[d];
  }
  outs->push_back(gather_elements(x, p.out, offsets(p.out, st, base)));
  return true;
}

}  // namespace

Result<bool> const_eval(const InferCtx& c, std::vector<Tensor>* outs) {
  const std::string& op = c.node.op_type;
  outs->clear();
  // Every op folded here has one output; a node that lists none has nothing
  // to fold (and c.out is empty).
  if (c.out.empty()) return false;
  int64_t total = 0;
  for (const OutInfo& o : c.out) total += sat_numel(o.shape);
  if (total > kMaxFoldElements) return false;

  if (op == "Shape") return eval_shape(c, outs);
  if (op == "Size") {
    Tensor y(DType::kInt64, {});
    y.data_as<int64_t>()[0] = sat_numel(c.shape(0));
    outs->push_back(std::move(y));
    return true;
  }
  if (op == "Constant") {
    BP_ASSIGN_OR_RETURN(Tensor t, constant_attr_value(c));
    outs->push_back(t.clone());
    return true;
  }
  if (op == "ConstantOfShape") return eval_constant_of_shape(c, outs);

  std::vector<const Tensor*> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) ins.push_back(c.constant(i));
  if (ins.empty() || ins[0] == nullptr) return false;
  const Tensor& x = *ins[0];

  if (op == "Identity" || op == "Reshape" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Flatten") {
    // Same bytes, new shape.
    outs->push_back(Tensor::copy_of(x.dtype(), c.out[0].shape, x.data()));
    return true;
  }
  if (op == "Transpose") return eval_transpose(c, x, outs);
  if (op == "Expand") {
    const Shape& os = c.out[0].shape;
    outs->push_back(gather_elements(x, os, offsets(os, broadcast_strides(x.shape(), os), 0)));
    return true;
  }
  if (op == "Slice") return eval_slice(c, x, outs);
  if (op == "Gather") return eval_gather(c, x, outs);
  if (op == "Concat") return eval_concat(c, ins, outs);
  if (op == "Cast") return eval_cast(c, x, outs);
  if (op == "Range") return eval_range(c, ins, outs);
  if (op == "Where") return eval_where(c, ins, outs);
  if (op == "Equal" || op == "Less" || op == "Greater") return eval_compare(c, ins, outs);
  if (op == "Not" || op == "And" || op == "Or") return eval_logical(c, ins, outs);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Min" || op == "Max" ||
      op == "Neg" || op == "Abs")
    return eval_arith(c, ins, outs);
  return false;
}

}  // namespace backplane::ir::detail
