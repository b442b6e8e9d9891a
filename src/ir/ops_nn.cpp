// ops_nn.cpp — schemas: convolution, pooling, linear algebra, normalisation, softmax, dropout and
// activations.
//
// The ops Backplane started with, as ONNX declares them (onnx.defs): one
// schema per ONNX version whose signature, type lists or attributes change,
// from the first version whose meaning the infer function handles (versions
// with the legacy `consumed_inputs`, `broadcast` or `is_test` attributes are
// not registered). Type lists are ONNX's, not what any backend runs: a
// backend that cannot run a dtype says so when asked to place the node.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using detail::kMaxElements;
using detail::sat_numel;
using namespace detail::dt;

std::string dims(const Shape& s) { return shape_to_string(s); }
std::string list(const std::vector<int64_t>& v) { return shape_to_string(v); }

// OpSchema::check has matched counts and dtypes against the signature before
// these run: they compute shapes and check what the signature cannot say.

Status infer_softmax(InferCtx& c) {
  c.set(0, c.dtype(0), c.shape(0));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", c.opset >= 13 ? -1 : 1));
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, std::max<int64_t>(c.rank(0), 1), "axis"));
  (void)a;
  return ok_status();
}

Status infer_dropout(InferCtx& c) {
  if (c.has(1) && sat_numel(c.shape(1)) != 1)
    return c.error("input 'ratio' ('" + c.name(1) + "') must be a scalar, got shape " +
                   dims(c.shape(1)));
  c.set(0, c.dtype(0), c.shape(0));
  // The mask is T before opset 10 and bool from then on.
  c.set(1, c.opset >= 10 ? BOOL : c.dtype(0), c.shape(0));
  return ok_status();
}

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;
  std::string auto_pad;
  bool ceil_mode = false;
};

Result<Window> read_window(InferCtx& c, size_t n, const std::vector<int64_t>* kernel_from_weight,
                           bool allow_ceil, bool allow_dilations) {
  Window w;
  BP_ASSIGN_OR_RETURN(w.kernel, c.node.attr_ints("kernel_shape"));
  if (kernel_from_weight != nullptr) {
    if (!w.kernel.empty() && w.kernel != *kernel_from_weight)
      return c.error("attribute 'kernel_shape' " + list(w.kernel) +
                     " does not match the weight's spatial dims " + list(*kernel_from_weight));
    w.kernel = *kernel_from_weight;
  } else if (w.kernel.empty()) {
    return c.error("attribute 'kernel_shape' is required");
  }
  BP_ASSIGN_OR_RETURN(w.strides, c.node.attr_ints("strides", std::vector<int64_t>(n, 1)));
  if (allow_dilations) {
    BP_ASSIGN_OR_RETURN(w.dilations, c.node.attr_ints("dilations", std::vector<int64_t>(n, 1)));
  } else {
    w.dilations.assign(n, 1);
  }
  BP_ASSIGN_OR_RETURN(w.pads, c.node.attr_ints("pads", std::vector<int64_t>(2 * n, 0)));
  BP_ASSIGN_OR_RETURN(w.auto_pad, c.node.attr_string("auto_pad", "NOTSET"));
  if (allow_ceil) {
    BP_ASSIGN_OR_RETURN(int64_t cm, c.node.attr_int("ceil_mode", 0));
    w.ceil_mode = cm != 0;
  }
  auto check_len = [&](const char* name, const std::vector<int64_t>& v, size_t want) -> Status {
    if (v.size() != want)
      return c.error(std::string("attribute '") + name + "' has " + std::to_string(v.size()) +
                     " values, expected " + std::to_string(want) + " for " + std::to_string(n) +
                     " spatial dims");
    return ok_status();
  };
  BP_RETURN_IF_ERROR(check_len("kernel_shape", w.kernel, n));
  BP_RETURN_IF_ERROR(check_len("strides", w.strides, n));
  BP_RETURN_IF_ERROR(check_len("dilations", w.dilations, n));
  BP_RETURN_IF_ERROR(check_len("pads", w.pads, 2 * n));
  // Upper bounds too: the window arithmetic below must not overflow
  // (kernel and dilation under 2^24 make the effective kernel under 2^48;
  // dims are at most kMaxElements = 2^48).
  constexpr int64_t kMaxWindow = int64_t{1} << 24;
  for (size_t i = 0; i < n; ++i) {
    if (w.kernel[i] <= 0 || w.kernel[i] > kMaxWindow)
      return c.error("kernel_shape " + list(w.kernel) + " must be positive (and under 2^24)");
    if (w.strides[i] <= 0 || w.strides[i] > kMaxElements)
      return c.error("strides " + list(w.strides) + " must be positive (and under 2^48)");
    if (w.dilations[i] <= 0 || w.dilations[i] > kMaxWindow)
      return c.error("dilations " + list(w.dilations) + " must be positive (and under 2^24)");
  }
  for (int64_t p : w.pads)
    if (p < 0 || p > kMaxElements)
      return c.error("pads " + list(w.pads) + " must not be negative (or over 2^48)");
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" &&
      w.auto_pad != "VALID")
    return c.error("attribute 'auto_pad' is '" + w.auto_pad +
                   "', expected NOTSET, SAME_UPPER, SAME_LOWER or VALID");
  return w;
}

Result<Shape> window_output(InferCtx& c, const Shape& in_spatial, const Window& w) {
  Shape out;
  for (size_t i = 0; i < in_spatial.size(); ++i) {
    const int64_t in = in_spatial[i], s = w.strides[i];
    const int64_t ek = (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
      out.push_back((in + s - 1) / s);
      continue;
    }
    const int64_t pb = w.auto_pad == "VALID" ? 0 : w.pads[i];
    const int64_t pe = w.auto_pad == "VALID" ? 0 : w.pads[i + in_spatial.size()];
    const int64_t span = in + pb + pe - ek;
    if (span < 0)
      return c.error("spatial dim " + std::to_string(i) + ": effective kernel size " +
                     std::to_string(ek) + " is larger than the padded input " +
                     std::to_string(in + pb + pe));
    int64_t o = (w.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    // A window may not start in the end padding (ONNX and PyTorch).
    if (w.ceil_mode && (o - 1) * s >= in + pb) --o;
    out.push_back(o);
  }
  return out;
}

// What Conv and ConvTranspose check alike: ranks of X and W, and a positive
// group (returned).
Result<int64_t> check_conv_operands(InferCtx& c) {
  const Shape& x = c.shape(0);
  const Shape& wt = c.shape(1);
  if (x.size() < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x.size()) +
                   " dims, expected at least 3 (N, C, spatial...)");
  if (wt.size() != x.size())
    return c.error("weight '" + c.name(1) + "' has " + std::to_string(wt.size()) +
                   " dims, expected " + std::to_string(x.size()));
  BP_ASSIGN_OR_RETURN(int64_t group, c.node.attr_int("group", 1));
  if (group <= 0)
    return c.error("attribute 'group' must be positive, got " + std::to_string(group));
  return group;
}

Status infer_conv(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t group, check_conv_operands(c));
  const Shape& x = c.shape(0);
  const Shape& wt = c.shape(1);
  const size_t n = x.size() - 2;
  if (x[1] != wt[1] * group)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x[1]) +
                   " channels but weight '" + c.name(1) + "' " + dims(wt) + " with group " +
                   std::to_string(group) + " expects " + std::to_string(wt[1] * group));
  if (wt[0] % group != 0)
    return c.error("weight '" + c.name(1) + "' has " + std::to_string(wt[0]) +
                   " output channels, not divisible by group " + std::to_string(group));
  if (c.has(2)) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
    if (c.shape(2) != Shape{wt[0]})
      return c.error("bias '" + c.name(2) + "' has shape " + dims(c.shape(2)) + ", expected [" +
                     std::to_string(wt[0]) + "]");
  }
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  BP_ASSIGN_OR_RETURN(Window w, read_window(c, n, &kernel, false, true));
  BP_ASSIGN_OR_RETURN(Shape sp, window_output(c, Shape(x.begin() + 2, x.end()), w));
  Shape out{x[0], wt[0]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_conv_transpose(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t group, check_conv_operands(c));
  const Shape& x = c.shape(0);
  const Shape& wt = c.shape(1);
  const size_t n = x.size() - 2;
  if (x[1] != wt[0])
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x[1]) +
                   " channels but weight '" + c.name(1) + "' " + dims(wt) + " expects " +
                   std::to_string(wt[0]));
  const int64_t m = wt[1] * group;
  if (c.has(2)) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
    if (c.shape(2) != Shape{m})
      return c.error("bias '" + c.name(2) + "' has shape " + dims(c.shape(2)) + ", expected [" +
                     std::to_string(m) + "]");
  }
  std::vector<int64_t> kernel(wt.begin() + 2, wt.end());
  BP_ASSIGN_OR_RETURN(Window w, read_window(c, n, &kernel, false, true));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> opad,
                      c.node.attr_ints("output_padding", std::vector<int64_t>(n, 0)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> oshape, c.node.attr_ints("output_shape"));
  if (opad.size() != n)
    return c.error("attribute 'output_padding' has " + std::to_string(opad.size()) +
                   " values, expected " + std::to_string(n));
  Shape out{x[0], m};
  if (!oshape.empty()) {
    // Either the spatial dims alone or the full output shape.
    if (oshape.size() == n + 2) oshape.erase(oshape.begin(), oshape.begin() + 2);
    if (oshape.size() != n)
      return c.error("attribute 'output_shape' " + list(oshape) + " has the wrong length for " +
                     std::to_string(n) + " spatial dims");
    for (int64_t d : oshape)
      if (d <= 0) return c.error("attribute 'output_shape' " + list(oshape) + " must be positive");
    out.insert(out.end(), oshape.begin(), oshape.end());
  } else {
    for (size_t i = 0; i < n; ++i) {
      const int64_t in = x[i + 2], s = w.strides[i];
      const int64_t ek = (w.kernel[i] - 1) * w.dilations[i] + 1;
      int64_t o;
      if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
        o = in * s;
      } else {
        const int64_t pads = w.auto_pad == "VALID" ? 0 : w.pads[i] + w.pads[i + n];
        o = s * (in - 1) + opad[i] + ek - pads;
      }
      if (o <= 0)
        return c.error("spatial dim " + std::to_string(i) + " of the output would be " +
                       std::to_string(o));
      out.push_back(o);
    }
  }
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_pool(InferCtx& c) {
  const bool is_max = c.node.op_type == "MaxPool";
  const Shape& x = c.shape(0);
  if (x.size() < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(x.size()) +
                   " dims, expected at least 3 (N, C, spatial...)");
  const size_t n = x.size() - 2;
  // ceil_mode arrived in opset 10; dilations for MaxPool too (AveragePool: 19).
  BP_ASSIGN_OR_RETURN(Window w, read_window(c, n, nullptr, c.opset >= 10, is_max && c.opset >= 10));
  if (is_max) {
    BP_ASSIGN_OR_RETURN(int64_t so, c.node.attr_int("storage_order", 0));
    if (so != 0 && so != 1) return c.error("attribute 'storage_order' must be 0 or 1");
  } else {
    BP_ASSIGN_OR_RETURN(int64_t cip, c.node.attr_int("count_include_pad", 0));
    (void)cip;
  }
  BP_ASSIGN_OR_RETURN(Shape sp, window_output(c, Shape(x.begin() + 2, x.end()), w));
  Shape out{x[0], x[1]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.set(0, c.dtype(0), out);
  if (is_max) c.set(1, I64, out);
  return ok_status();
}

Status infer_global_pool(InferCtx& c) {
  if (c.rank(0) < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(c.rank(0)) +
                   " dims, expected at least 3 (N, C, spatial...)");
  Shape out = c.shape(0);
  std::fill(out.begin() + 2, out.end(), 1);
  c.set(0, c.dtype(0), out);
  return ok_status();
}

Status infer_gemm(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t ta, c.node.attr_int("transA", 0));
  BP_ASSIGN_OR_RETURN(int64_t tb, c.node.attr_int("transB", 0));
  BP_ASSIGN_OR_RETURN(float alpha, c.node.attr_float("alpha", 1.0f));
  BP_ASSIGN_OR_RETURN(float beta, c.node.attr_float("beta", 1.0f));
  (void)alpha, (void)beta;
  BP_RETURN_IF_ERROR(c.expect_rank(0, 2, "A"));
  BP_RETURN_IF_ERROR(c.expect_rank(1, 2, "B"));
  const Shape& a = c.shape(0);
  const Shape& b = c.shape(1);
  const int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const int64_t kb = tb ? b[1] : b[0], n = tb ? b[0] : b[1];
  if (k != kb)
    return c.error("inner dims differ: A '" + c.name(0) + "' " + dims(a) +
                   (ta ? " (transposed)" : "") + " has K=" + std::to_string(k) + ", B '" +
                   c.name(1) + "' " + dims(b) + (tb ? " (transposed)" : "") +
                   " has K=" + std::to_string(kb));
  if (c.has(2)) {
    BP_RETURN_IF_ERROR(c.expect_same_dtype(0, 2));
    const Shape& cs = c.shape(2);
    const Shape target{m, n};
    bool ok = cs.size() <= 2;
    for (size_t i = 0; ok && i < cs.size(); ++i) {
      int64_t t = target[2 - cs.size() + i];
      ok = cs[i] == 1 || cs[i] == t;
    }
    if (!ok)
      return c.error("C '" + c.name(2) + "' " + dims(cs) + " cannot be broadcast to " +
                     dims(target));
  }
  c.set(0, c.dtype(0), {m, n});
  return ok_status();
}

Status infer_matmul(InferCtx& c) {
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) return c.error("inputs must have at least 1 dim");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  const int64_t k = a[a.size() - 1], kb = b[b.size() - 2];
  if (k != kb)
    return c.error("inner dims differ: A '" + c.name(0) + "' " + dims(c.shape(0)) +
                   " has K=" + std::to_string(k) + ", B '" + c.name(1) + "' " + dims(c.shape(1)) +
                   " has K=" + std::to_string(kb));
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  Shape batch;
  const size_t r = std::max(ba.size(), bb.size());
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i + ba.size() >= r ? ba[i + ba.size() - r] : 1;
    int64_t db = i + bb.size() >= r ? bb[i + bb.size() - r] : 1;
    if (da != db && da != 1 && db != 1)
      return c.error("batch dims of '" + c.name(0) + "' " + dims(c.shape(0)) + " and '" +
                     c.name(1) + "' " + dims(c.shape(1)) + " cannot be broadcast");
    batch.push_back(da == 1 ? db : da);
  }
  if (!a_vec) batch.push_back(a[a.size() - 2]);
  if (!b_vec) batch.push_back(b[b.size() - 1]);
  c.set(0, c.dtype(0), batch);
  return ok_status();
}

Status infer_batch_norm(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(float eps, c.node.attr_float("epsilon", 1e-5f));
  BP_ASSIGN_OR_RETURN(float momentum, c.node.attr_float("momentum", 0.9f));
  (void)eps, (void)momentum;
  if (c.rank(0) < 2)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(c.rank(0)) +
                   " dims, expected at least 2 (N, C, ...)");
  int64_t spatial = 1;
  if (c.opset < 9) {
    BP_ASSIGN_OR_RETURN(spatial, c.node.attr_int("spatial", 1));
  }
  const Shape& x = c.shape(0);
  const Shape param = spatial ? Shape{x[1]} : Shape(x.begin() + 1, x.end());
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (size_t i = 1; i < 5; ++i) {
    if (c.shape(i) != param)
      return c.error(std::string(names[i]) + " '" + c.name(i) + "' has shape " + dims(c.shape(i)) +
                     ", expected " + dims(param) + " for input " + dims(x));
  }
  c.set(0, c.dtype(0), x);
  // Running (and, before opset 14, saved) statistics: the mean's type.
  for (size_t i = 1; i < c.out.size(); ++i) c.set(i, c.dtype(3), param);
  return ok_status();
}

Status infer_layer_norm(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", -1));
  BP_ASSIGN_OR_RETURN(float eps, c.node.attr_float("epsilon", 1e-5f));
  BP_ASSIGN_OR_RETURN(int64_t stash, c.node.attr_int("stash_type", 1));
  (void)eps;
  const Shape& x = c.shape(0);
  BP_ASSIGN_OR_RETURN(int64_t a, c.normalize_axis(axis, c.rank(0), "axis"));
  const Shape norm(x.begin() + a, x.end());
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    const Shape& s = c.shape(i);
    bool ok = s.size() <= norm.size();
    for (size_t j = 0; ok && j < s.size(); ++j)
      ok = s[j] == 1 || s[j] == norm[norm.size() - s.size() + j];
    if (!ok)
      return c.error(std::string(i == 1 ? "Scale" : "B") + " '" + c.name(i) + "' has shape " +
                     dims(s) + ", which does not broadcast to the normalized shape " + dims(norm));
  }
  // Mean and InvStdDev have the stash type, which ONNX allows to be float32
  // or bfloat16 (U).
  const DType stash_dtype = static_cast<DType>(stash);
  if (stash_dtype != F32 && stash_dtype != BF16)
    return c.error("attribute 'stash_type' " + std::to_string(stash) +
                   " is not float32 (1) or bfloat16 (16)");
  c.set(0, c.dtype(0), x);
  Shape reduced = x;
  std::fill(reduced.begin() + a, reduced.end(), 1);
  c.set(1, stash_dtype, reduced);
  c.set(2, stash_dtype, reduced);
  return ok_status();
}

Status infer_instance_norm(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(float eps, c.node.attr_float("epsilon", 1e-5f));
  (void)eps;
  if (c.rank(0) < 3)
    return c.error("input '" + c.name(0) + "' has " + std::to_string(c.rank(0)) +
                   " dims, expected at least 3 (N, C, spatial...)");
  const Shape param{c.shape(0)[1]};
  for (size_t i = 1; i < 3; ++i) {
    if (c.shape(i) != param)
      return c.error(std::string(i == 1 ? "scale" : "B") + " '" + c.name(i) + "' has shape " +
                     dims(c.shape(i)) + ", expected " + dims(param));
  }
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

Status infer_prelu(InferCtx& c) {
  // slope broadcasts to X (unidirectionally): the result has X's shape.
  BP_RETURN_IF_ERROR(detail::infer_broadcast(c, c.dtype(0)));
  if (c.out[0].shape != c.shape(0))
    return c.error("slope '" + c.name(1) + "' " + dims(c.shape(1)) + " does not broadcast to X '" +
                   c.name(0) + "' " + dims(c.shape(0)));
  return ok_status();
}

Status infer_gelu(InferCtx& c) {
  // Not BP_ASSIGN_OR_RETURN: GCC 12 warns falsely about the moved-out string.
  Result<std::string> approx = c.node.attr_string("approximate", "none");
  if (!approx.ok()) return approx.status();
  if (*approx != "none" && *approx != "tanh")
    return c.error("attribute 'approximate' is '" + *approx + "', expected 'none' or 'tanh'");
  c.set(0, c.dtype(0), c.shape(0));
  return ok_status();
}

// ONNX Runtime's MatMulNBits in the form the import keeps whole
// (onnx/matmul_nbits.hpp): Y = A x W + bias, W [K, N] of 4-bit values in
// blocks of block_size along K, w = (q - zero) * scale. B is uint8
// [N, blocks, block_size / 2] (two values a byte, the lower bits first),
// scales float32 [N * blocks], zero points absent (8) or uint8
// [N * ceil(blocks / 2)] packed the same way, bias float32 [N].
Status infer_matmul_nbits(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(3, 6));
  int64_t k = 0, n = 0, bits = 0, block = 0;
  for (auto [name, to] : {std::pair<const char*, int64_t*>{"K", &k},
                          {"N", &n},
                          {"bits", &bits},
                          {"block_size", &block}}) {
    Result<int64_t> v = c.node.attr_int(name, 0);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  if (k < 1 || n < 1) return c.error("needs positive K and N");
  if (bits != 4) return c.unsupported_error("bits " + std::to_string(bits) + " (4 is run whole)");
  if (block < 16 || (block & (block - 1)) != 0)
    return c.error("block_size " + std::to_string(block) + " is not a power of 2 from 16");
  if (c.has(4)) return c.unsupported_error("g_idx (a reordering of K) is not supported");
  const int64_t blocks = (k + block - 1) / block;
  if (c.rank(0) < 1 || c.shape(0).back() != k)
    return c.error("A '" + c.name(0) + "' " + dims(c.shape(0)) +
                   " does not end in K = " + std::to_string(k));
  auto expect = [&](size_t i, const Shape& want, const char* what) -> Status {
    if (shape_numel(c.shape(i)) != shape_numel(want) || (c.rank(i) == 3 && c.shape(i) != want))
      return c.error(std::string(what) + " '" + c.name(i) + "' is " + dims(c.shape(i)) +
                     ", expected " + dims(want));
    return ok_status();
  };
  BP_RETURN_IF_ERROR(expect(1, {n, blocks, block / 2}, "B"));
  BP_RETURN_IF_ERROR(expect(2, {n * blocks}, "scales"));
  if (c.has(3)) {
    if (c.dtype(3) != DType::kUInt8)
      return c.unsupported_error("zero points of " + std::string(dtype_name(c.dtype(3))) +
                                 " (packed uint8 is run whole)");
    BP_RETURN_IF_ERROR(expect(3, {n * ((blocks + 1) / 2)}, "zero_points"));
  }
  if (c.has(5)) BP_RETURN_IF_ERROR(expect(5, {n}, "bias"));
  Shape y = c.shape(0);
  y.back() = n;
  c.set(0, c.dtype(0), std::move(y));
  return ok_status();
}

// ONNX Runtime's GatherBlockQuantized in the form the import keeps whole
// (onnx/matmul_nbits.hpp): rows of a table [N, D] of 4-bit values in blocks
// of block_size along D, w = (q - zero) * scale, gathered on axis 0. data is
// uint8 [N, D / 2] (two values a byte, the lower bits first), scales float32
// [N, ceil(D / block_size)], zero points absent (8) or uint8
// [N, ceil(blocks / 2)] packed the same way; Y is indices' shape + [D].
Status infer_gather_block_quantized(InferCtx& c) {
  BP_RETURN_IF_ERROR(c.require_inputs(3, 4));
  int64_t gather_axis = 0, quantize_axis = 0, bits = 0, block = 0;
  for (auto [name, to, fallback] :
       {std::tuple<const char*, int64_t*, int64_t>{"gather_axis", &gather_axis, 0},
        {"quantize_axis", &quantize_axis, 1},
        {"bits", &bits, 4},
        {"block_size", &block, 128}}) {
    Result<int64_t> v = c.node.attr_int(name, fallback);
    if (!v.ok()) return v.status();
    *to = *v;
  }
  if (c.rank(0) != 2 || (gather_axis != 0 && gather_axis != -2) ||
      (quantize_axis != 1 && quantize_axis != -1) || bits != 4)
    return c.unsupported_error(
        "only 4-bit tables [N, D] gathered on axis 0 and quantized along D run whole");
  if (block < 16 || (block & (block - 1)) != 0)
    return c.error("block_size " + std::to_string(block) + " is not a power of 2 from 16");
  const int64_t n = c.shape(0)[0], d = 2 * c.shape(0)[1];
  const int64_t blocks = (d + block - 1) / block;
  if (c.dtype(1) != DType::kInt64 && c.dtype(1) != DType::kInt32 && c.dtype(1) != DType::kUndefined)
    return c.error("indices '" + c.name(1) + "' are " + dtype_name(c.dtype(1)) +
                   ", expected int32 or int64");
  auto expect = [&](size_t i, const Shape& want, const char* what) -> Status {
    if (c.shape(i) != want)
      return c.error(std::string(what) + " '" + c.name(i) + "' is " + dims(c.shape(i)) +
                     ", expected " + dims(want));
    return ok_status();
  };
  BP_RETURN_IF_ERROR(expect(2, {n, blocks}, "scales"));
  if (c.has(3)) BP_RETURN_IF_ERROR(expect(3, {n, (blocks + 1) / 2}, "zero_points"));
  Shape y = c.shape(1);
  y.push_back(d);
  c.set(0, c.dtype(2), std::move(y));
  return ok_status();
}

}  // namespace

void register_nn_ops(OpRegistry& r) {
  using detail::add_schema;

  // Convolution and pooling.
  add_schema(r, OpSchema("", "Conv", 1)
                    .input("X", "T")
                    .input("W", "T")
                    .optional_input("B", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .attr("dilations", AttrType::kInts)
                    .attr("group", AttrType::kInt, int64_t{1})
                    .attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("strides", AttrType::kInts)
                    .infer(infer_conv));
  add_schema(r, OpSchema("", "ConvTranspose", 1)
                    .input("X", "T")
                    .input("W", "T")
                    .optional_input("B", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .attr("dilations", AttrType::kInts)
                    .attr("group", AttrType::kInt, int64_t{1})
                    .attr("kernel_shape", AttrType::kInts)
                    .attr("output_padding", AttrType::kInts)
                    .attr("output_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("strides", AttrType::kInts)
                    .infer(infer_conv_transpose));
  add_schema(r, OpSchema("", "MaxPool", 1)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  add_schema(r, OpSchema("", "MaxPool", 8)
                    .input("X", "T")
                    .output("Y", "T")
                    .optional_output("Indices", "I")
                    .type("T", {F16, F32, F64})
                    .type("I", {I64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("storage_order", AttrType::kInt, int64_t{0})
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  add_schema(r, OpSchema("", "MaxPool", 10)
                    .input("X", "T")
                    .output("Y", "T")
                    .optional_output("Indices", "I")
                    .type("T", {F16, F32, F64})
                    .type("I", {I64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .attr("ceil_mode", AttrType::kInt, int64_t{0})
                    .attr("dilations", AttrType::kInts)
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("storage_order", AttrType::kInt, int64_t{0})
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  add_schema(r, OpSchema("", "MaxPool", 12)
                    .input("X", "T")
                    .output("Y", "T")
                    .optional_output("Indices", "I")
                    .type("T", {F16, F32, F64, I8, U8})
                    .type("I", {I64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .attr("ceil_mode", AttrType::kInt, int64_t{0})
                    .attr("dilations", AttrType::kInts)
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("storage_order", AttrType::kInt, int64_t{0})
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  add_schema(r, OpSchema("", "AveragePool", 1)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  add_schema(r, OpSchema("", "AveragePool", 7)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .attr("count_include_pad", AttrType::kInt, int64_t{0})
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  add_schema(r, OpSchema("", "AveragePool", 10)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("auto_pad", AttrType::kString, std::string("NOTSET"))
                    .attr("ceil_mode", AttrType::kInt, int64_t{0})
                    .attr("count_include_pad", AttrType::kInt, int64_t{0})
                    .required_attr("kernel_shape", AttrType::kInts)
                    .attr("pads", AttrType::kInts)
                    .attr("strides", AttrType::kInts)
                    .infer(infer_pool));
  for (const char* op : {"GlobalAveragePool", "GlobalMaxPool"}) {
    add_schema(r, OpSchema("", op, 1)
                      .input("X", "T")
                      .output("Y", "T")
                      .type("T", {F16, F32, F64})
                      .infer(infer_global_pool));
  }

  // Linear algebra.
  add_schema(r, OpSchema("", "Gemm", 7)
                    .input("A", "T")
                    .input("B", "T")
                    .input("C", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("alpha", AttrType::kFloat, 1.0f)
                    .attr("beta", AttrType::kFloat, 1.0f)
                    .attr("transA", AttrType::kInt, int64_t{0})
                    .attr("transB", AttrType::kInt, int64_t{0})
                    .infer(infer_gemm));
  add_schema(r, OpSchema("", "Gemm", 9)
                    .input("A", "T")
                    .input("B", "T")
                    .input("C", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I32, I64, U32, U64})
                    .attr("alpha", AttrType::kFloat, 1.0f)
                    .attr("beta", AttrType::kFloat, 1.0f)
                    .attr("transA", AttrType::kInt, int64_t{0})
                    .attr("transB", AttrType::kInt, int64_t{0})
                    .infer(infer_gemm));
  add_schema(r, OpSchema("", "Gemm", 11)
                    .input("A", "T")
                    .input("B", "T")
                    .optional_input("C", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I32, I64, U32, U64})
                    .attr("alpha", AttrType::kFloat, 1.0f)
                    .attr("beta", AttrType::kFloat, 1.0f)
                    .attr("transA", AttrType::kInt, int64_t{0})
                    .attr("transB", AttrType::kInt, int64_t{0})
                    .infer(infer_gemm));
  add_schema(r, OpSchema("", "Gemm", 13)
                    .input("A", "T")
                    .input("B", "T")
                    .optional_input("C", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                    .attr("alpha", AttrType::kFloat, 1.0f)
                    .attr("beta", AttrType::kFloat, 1.0f)
                    .attr("transA", AttrType::kInt, int64_t{0})
                    .attr("transB", AttrType::kInt, int64_t{0})
                    .infer(infer_gemm));
  add_schema(r, OpSchema("", "MatMul", 1)
                    .input("A", "T")
                    .input("B", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_matmul));
  add_schema(r, OpSchema("", "MatMul", 9)
                    .input("A", "T")
                    .input("B", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I32, I64, U32, U64})
                    .infer(infer_matmul));
  add_schema(r, OpSchema("", "MatMul", 13)
                    .input("A", "T")
                    .input("B", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                    .infer(infer_matmul));

  // Normalisation.
  add_schema(r, OpSchema("", "BatchNormalization", 7)
                    .input("X", "T")
                    .input("scale", "T")
                    .input("B", "T")
                    .input("mean", "T")
                    .input("var", "T")
                    .output("Y", "T")
                    .optional_output("mean", "T")
                    .optional_output("var", "T")
                    .optional_output("saved_mean", "T")
                    .optional_output("saved_var", "T")
                    .type("T", {F16, F32, F64})
                    .attr("epsilon", AttrType::kFloat, 9.99999975e-06f)
                    .attr("momentum", AttrType::kFloat, 0.899999976f)
                    .attr("spatial", AttrType::kInt, int64_t{1})
                    .infer(infer_batch_norm));
  add_schema(r, OpSchema("", "BatchNormalization", 9)
                    .input("X", "T")
                    .input("scale", "T")
                    .input("B", "T")
                    .input("mean", "T")
                    .input("var", "T")
                    .output("Y", "T")
                    .optional_output("mean", "T")
                    .optional_output("var", "T")
                    .optional_output("saved_mean", "T")
                    .optional_output("saved_var", "T")
                    .type("T", {F16, F32, F64})
                    .attr("epsilon", AttrType::kFloat, 9.99999975e-06f)
                    .attr("momentum", AttrType::kFloat, 0.899999976f)
                    .infer(infer_batch_norm));
  add_schema(r, OpSchema("", "BatchNormalization", 14)
                    .input("X", "T")
                    .input("scale", "T")
                    .input("B", "T")
                    .input("input_mean", "U")
                    .input("input_var", "U")
                    .output("Y", "T")
                    .optional_output("running_mean", "U")
                    .optional_output("running_var", "U")
                    .type("T", {F16, BF16, F32, F64})
                    .type("U", {F16, BF16, F32, F64})
                    .attr("epsilon", AttrType::kFloat, 9.99999975e-06f)
                    .attr("momentum", AttrType::kFloat, 0.899999976f)
                    .attr("training_mode", AttrType::kInt, int64_t{0})
                    .infer(infer_batch_norm));
  add_schema(r, OpSchema("", "BatchNormalization", 15)
                    .input("X", "T")
                    .input("scale", "T1")
                    .input("B", "T1")
                    .input("input_mean", "T2")
                    .input("input_var", "T2")
                    .output("Y", "T")
                    .optional_output("running_mean", "T2")
                    .optional_output("running_var", "T2")
                    .type("T", {F16, BF16, F32, F64})
                    .type("T1", {F16, BF16, F32, F64})
                    .type("T2", {F16, BF16, F32, F64})
                    .attr("epsilon", AttrType::kFloat, 9.99999975e-06f)
                    .attr("momentum", AttrType::kFloat, 0.899999976f)
                    .attr("training_mode", AttrType::kInt, int64_t{0})
                    .infer(infer_batch_norm));
  add_schema(r, OpSchema("", "InstanceNormalization", 6)
                    .input("input", "T")
                    .input("scale", "T")
                    .input("B", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .attr("epsilon", AttrType::kFloat, 9.99999975e-06f)
                    .infer(infer_instance_norm));
  // Standard from opset 17; ONNX Runtime defines the same operator in the
  // default domain from version 1, and its optimiser writes it into models
  // of any opset (onnx/contrib_ops.hpp).
  add_schema(r, OpSchema("", "LayerNormalization", 1)
                    .input("X", "T")
                    .input("Scale", "T")
                    .optional_input("B", "T")
                    .output("Y", "T")
                    .optional_output("Mean", "U")
                    .optional_output("InvStdDev", "U")
                    .type("T", {F16, BF16, F32, F64})
                    .type("U", {BF16, F32})
                    .attr("axis", AttrType::kInt, int64_t{-1})
                    .attr("epsilon", AttrType::kFloat, 9.99999975e-06f)
                    .attr("stash_type", AttrType::kInt, int64_t{1})
                    .infer(infer_layer_norm));

  // Softmax: opset 13 normalises along one axis, before it over the dims from axis on (as 2-D).
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    add_schema(r, OpSchema("", op, 1)
                      .input("input", "T")
                      .output("output", "T")
                      .type("T", {F16, F32, F64})
                      .attr("axis", AttrType::kInt, int64_t{1})
                      .infer(infer_softmax));
    add_schema(r, OpSchema("", op, 13)
                      .input("input", "T")
                      .output("output", "T")
                      .type("T", {F16, BF16, F32, F64})
                      .attr("axis", AttrType::kInt, int64_t{-1})
                      .infer(infer_softmax));
  }
  add_schema(r, OpSchema("", "Dropout", 7)
                    .input("data", "T")
                    .output("output", "T")
                    .optional_output("mask", "T")
                    .type("T", {F16, F32, F64})
                    .attr("ratio", AttrType::kFloat, 0.5f)
                    .infer(infer_dropout));
  add_schema(r, OpSchema("", "Dropout", 10)
                    .input("data", "T")
                    .output("output", "T")
                    .optional_output("mask", "T1")
                    .type("T", {F16, F32, F64})
                    .type("T1", {BOOL})
                    .attr("ratio", AttrType::kFloat, 0.5f)
                    .infer(infer_dropout));
  add_schema(r, OpSchema("", "Dropout", 12)
                    .input("data", "T")
                    .optional_input("ratio", "T1")
                    .optional_input("training_mode", "T2")
                    .output("output", "T")
                    .optional_output("mask", "T2")
                    .type("T", {F16, F32, F64})
                    .type("T1", {F16, F32, F64})
                    .type("T2", {BOOL})
                    .attr("seed", AttrType::kInt)
                    .infer(infer_dropout));
  add_schema(r, OpSchema("", "Dropout", 13)
                    .input("data", "T")
                    .optional_input("ratio", "T1")
                    .optional_input("training_mode", "T2")
                    .output("output", "T")
                    .optional_output("mask", "T2")
                    .type("T", {F16, BF16, F32, F64})
                    .type("T1", {F16, F32, F64})
                    .type("T2", {BOOL})
                    .attr("seed", AttrType::kInt)
                    .infer(infer_dropout));

  // Activations.
  add_schema(r, OpSchema("", "Relu", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Relu", 13)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Relu", 14)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64, I8, I16, I32, I64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "LeakyRelu", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("alpha", AttrType::kFloat, 0.00999999978f)
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "LeakyRelu", 16)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .attr("alpha", AttrType::kFloat, 0.00999999978f)
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "PRelu", 7)
                    .input("X", "T")
                    .input("slope", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(infer_prelu));
  add_schema(r, OpSchema("", "PRelu", 9)
                    .input("X", "T")
                    .input("slope", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64, I32, I64, U32, U64})
                    .infer(infer_prelu));
  add_schema(r, OpSchema("", "PRelu", 16)
                    .input("X", "T")
                    .input("slope", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64, I32, I64, U32, U64})
                    .infer(infer_prelu));
  add_schema(r, OpSchema("", "Sigmoid", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Sigmoid", 13)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "HardSigmoid", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("alpha", AttrType::kFloat, 0.200000003f)
                    .attr("beta", AttrType::kFloat, 0.5f)
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "HardSwish", 14)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Tanh", 6)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Tanh", 13)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Elu", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("alpha", AttrType::kFloat, 1.0f)
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Selu", 6)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .attr("alpha", AttrType::kFloat, 1.67326319f)
                    .attr("gamma", AttrType::kFloat, 1.05070102f)
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Softplus", 1)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));
  add_schema(r, OpSchema("", "Softsign", 1)
                    .input("input", "T")
                    .output("output", "T")
                    .type("T", {F16, F32, F64})
                    .infer(detail::infer_same_as_input0));

  // Gelu is standard only from opset 20; exporters put it in Microsoft's domain.
  add_schema(r, OpSchema("com.microsoft", "Gelu", 1)
                    .input("X", "T")
                    .output("Y", "T")
                    .type("T", {F16, BF16, F32, F64})
                    .infer(infer_gelu));
  add_schema(r, OpSchema("com.microsoft", "MatMulNBits", 1)
                    .input("A", "T1")
                    .input("B", "T2")
                    .input("scales", "T1")
                    .optional_input("zero_points", "T3")
                    .optional_input("g_idx", "T4")
                    .optional_input("bias", "T1")
                    .output("Y", "T1")
                    .type("T1", {F32})
                    .type("T2", {U8})
                    .type("T3", {U8, F32})
                    .type("T4", {I32})
                    .attr("K", AttrType::kInt)
                    .attr("N", AttrType::kInt)
                    .attr("bits", AttrType::kInt, int64_t{4})
                    .attr("block_size", AttrType::kInt)
                    .attr("accuracy_level", AttrType::kInt, int64_t{0})
                    .infer(infer_matmul_nbits));
  add_schema(r, OpSchema("com.microsoft", "GatherBlockQuantized", 1)
                    .input("data", "T1")
                    .input("indices", "Tind")
                    .input("scales", "T2")
                    .optional_input("zero_points", "T1")
                    .output("output", "T2")
                    .type("T1", {U8})
                    .type("T2", {F32})
                    .type("Tind", {I32, I64})
                    .attr("gather_axis", AttrType::kInt, int64_t{0})
                    .attr("quantize_axis", AttrType::kInt, int64_t{1})
                    .attr("bits", AttrType::kInt, int64_t{4})
                    .attr("block_size", AttrType::kInt, int64_t{128})
                    .infer(infer_gather_block_quantized));
}

}  // namespace backplane::ir::ops
