// ops_signal.cpp — schemas: DFT, STFT, windows, MelWeightMatrix, losses, random generators.
#include "ir/op_registry.hpp"
#include "ir/shape_inference_internal.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace backplane::ir::ops {

namespace {

using detail::InferCtx;
using detail::sat_numel;

constexpr DType I32 = DType::kInt32, I64 = DType::kInt64;

const DTypeList kFloat3 = {DType::kFloat16, DType::kFloat32, DType::kFloat64};
const DTypeList kWindowOut = {DType::kUInt8,   DType::kUInt16,  DType::kUInt32,  DType::kUInt64,
                              DType::kInt8,    DType::kInt16,   DType::kInt32,   DType::kInt64,
                              DType::kFloat16, DType::kFloat32, DType::kFloat64, DType::kBFloat16};

std::string dims(const Shape& s) { return shape_to_string(s); }

// A dtype given as an attribute (ONNX TensorProto numbering, which DType
// shares), checked against what the op may produce.
Result<DType> dtype_attr(const InferCtx& c, const char* name, int64_t fallback,
                         const DTypeList& allowed) {
  BP_ASSIGN_OR_RETURN(int64_t v, c.node.attr_int(name, fallback));
  for (DType d : allowed)
    if (static_cast<int64_t>(d) == v) return d;
  std::string names;
  for (DType d : allowed) names += std::string(names.empty() ? "" : ", ") + dtype_name(d);
  return c.error("attribute '" + std::string(name) + "' is " + std::to_string(v) +
                 ", which is not one of the element types the op produces (" + names + ")");
}

// A scalar (or one-element) integer input whose value decides a shape.
Result<int64_t> scalar_int(const InferCtx& c, size_t i, const char* param) {
  if (sat_numel(c.shape(i)) != 1)
    return c.error(std::string("input '") + param + "' must be a scalar, got shape " +
                   dims(c.shape(i)));
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> v, c.ints_input(i, param));
  return v.at(0);
}

// ------------------------------------------------------------------ losses

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: input [N, C, d1..dk],
// target [N, d1..dk], weight [C].
Status infer_loss(InferCtx& c) {
  const Shape& x = c.shape(0);
  const Shape& t = c.shape(1);
  if (x.size() < 2)
    return c.error("input '" + c.name(0) + "' must have rank >= 2 (N, C, ...), got " + dims(x));
  Shape want = {x[0]};
  want.insert(want.end(), x.begin() + 2, x.end());
  if (t != want)
    return c.error("target '" + c.name(1) + "' has shape " + dims(t) + ", expected " + dims(want) +
                   " for input shape " + dims(x));
  if (c.has(2) && c.shape(2) != Shape{x[1]})
    return c.error("weight '" + c.name(2) + "' has shape " + dims(c.shape(2)) + ", expected [" +
                   std::to_string(x[1]) + "]");
  Result<std::string> reduction = c.node.attr_string("reduction", "mean");
  if (!reduction.ok()) return reduction.status();
  if (*reduction != "none" && *reduction != "sum" && *reduction != "mean")
    return c.error("attribute 'reduction' is '" + *reduction + "', expected none, sum or mean");
  c.set(0, c.dtype(0), *reduction == "none" ? t : Shape{});
  if (c.out.size() > 1) c.set(1, c.dtype(0), x);
  return ok_status();
}

// --------------------------------------------------------------------- DFT

Status infer_dft(InferCtx& c) {
  const Shape& x = c.shape(0);
  const int64_t r = c.rank(0);
  if (r < 3)
    return c.error("input '" + c.name(0) +
                   "' must have rank >= 3 ([batch, signal..., 1 or 2]), got " + dims(x));
  if (x.back() != 1 && x.back() != 2)
    return c.error("the last dim of input '" + c.name(0) +
                   "' must be 1 (real) or 2 (complex), got " + dims(x));
  BP_ASSIGN_OR_RETURN(int64_t axis, c.node.attr_int("axis", 1));
  const int64_t a = axis < 0 ? axis + r : axis;
  if (a < 0 || a > r - 2)
    return c.error("attribute 'axis' is " + std::to_string(axis) + ", expected a signal axis of " +
                   dims(x) + " (not the last, real/imaginary dim)");
  BP_ASSIGN_OR_RETURN(int64_t onesided, c.node.attr_int("onesided", 0));
  BP_ASSIGN_OR_RETURN(int64_t inverse, c.node.attr_int("inverse", 0));
  (void)inverse;
  if (onesided != 0 && x.back() == 2)
    return c.error("onesided output is only defined for a real input (last dim 1), got " + dims(x));
  int64_t n = x[a];
  if (c.has(1)) {
    BP_ASSIGN_OR_RETURN(n, scalar_int(c, 1, "dft_length"));
    if (n < 1) return c.error("dft_length is " + std::to_string(n) + ", expected >= 1");
  }
  Shape out = x;
  out[a] = onesided != 0 ? n / 2 + 1 : n;
  out.back() = 2;
  c.set(0, c.dtype(0), out);
  return ok_status();
}

// signal [batch, length, 1 or 2], frame_step, window [frame_length], frame_length.
Status infer_stft(InferCtx& c) {
  const Shape& s = c.shape(0);
  if (s.size() != 3 || (s[2] != 1 && s[2] != 2))
    return c.error("signal '" + c.name(0) + "' must be [batch, length, 1 or 2], got " + dims(s));
  BP_ASSIGN_OR_RETURN(int64_t step, scalar_int(c, 1, "frame_step"));
  if (step < 1) return c.error("frame_step is " + std::to_string(step) + ", expected >= 1");
  int64_t length = -1;
  if (c.has(2)) {
    if (c.rank(2) != 1)
      return c.error("window '" + c.name(2) + "' must be 1-D, got " + dims(c.shape(2)));
    length = c.shape(2)[0];
  }
  if (c.has(3)) {
    BP_ASSIGN_OR_RETURN(int64_t fl, scalar_int(c, 3, "frame_length"));
    if (length >= 0 && fl != length)
      return c.error("frame_length " + std::to_string(fl) + " differs from the window's length " +
                     std::to_string(length));
    length = fl;
  }
  if (length < 0) return c.error("needs a window or a frame_length");
  if (length < 1 || length > s[1])
    return c.error("frame length " + std::to_string(length) + " must be in [1, " +
                   std::to_string(s[1]) + "] (the signal's length)");
  BP_ASSIGN_OR_RETURN(int64_t onesided, c.node.attr_int("onesided", 1));
  if (onesided != 0 && s[2] == 2)
    return c.error("onesided output is only defined for a real signal (last dim 1), got " +
                   dims(s));
  const int64_t frames = (s[1] - length) / step + 1;
  c.set(0, c.dtype(0), {s[0], frames, onesided != 0 ? length / 2 + 1 : length, 2});
  return ok_status();
}

Status infer_window(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(int64_t size, scalar_int(c, 0, "size"));
  if (size < 0) return c.error("size is " + std::to_string(size) + ", expected >= 0");
  BP_ASSIGN_OR_RETURN(int64_t periodic, c.node.attr_int("periodic", 1));
  (void)periodic;
  BP_ASSIGN_OR_RETURN(DType dt, dtype_attr(c, "output_datatype", 1, kWindowOut));
  c.set(0, dt, {size});
  return ok_status();
}

Status infer_mel(InferCtx& c) {
  for (size_t i = 0; i < 5; ++i)
    if (sat_numel(c.shape(i)) != 1)
      return c.error("input '" + c.name(i) + "' must be a scalar, got shape " + dims(c.shape(i)));
  BP_ASSIGN_OR_RETURN(int64_t bins, scalar_int(c, 0, "num_mel_bins"));
  BP_ASSIGN_OR_RETURN(int64_t dft_length, scalar_int(c, 1, "dft_length"));
  if (bins < 1 || dft_length < 1)
    return c.error("num_mel_bins (" + std::to_string(bins) + ") and dft_length (" +
                   std::to_string(dft_length) + ") must be >= 1");
  BP_ASSIGN_OR_RETURN(DType dt, dtype_attr(c, "output_datatype", 1, kWindowOut));
  c.set(0, dt, {dft_length / 2 + 1, bins});
  return ok_status();
}

// ------------------------------------------------------------------ random

Status infer_random(InferCtx& c) {
  BP_ASSIGN_OR_RETURN(std::vector<int64_t> shape, c.node.attr_ints("shape"));
  for (int64_t d : shape)
    if (d < 0) return c.error("attribute 'shape' " + dims(shape) + " has a negative dim");
  BP_ASSIGN_OR_RETURN(DType dt, dtype_attr(c, "dtype", 1, kFloat3));
  c.set(0, dt, shape);
  return ok_status();
}

Status infer_random_like(InferCtx& c) {
  // Without `dtype` the output takes the input's type, which must then be a float.
  DType dt = c.dtype(0);
  if (c.node.attr("dtype") != nullptr) {
    BP_ASSIGN_OR_RETURN(dt, dtype_attr(c, "dtype", 1, kFloat3));
  } else if (std::find(kFloat3.begin(), kFloat3.end(), dt) == kFloat3.end()) {
    return c.error("input '" + c.name(0) + "' is " + dtype_name(dt) +
                   "; without a 'dtype' attribute the output needs a float input type");
  }
  c.set(0, dt, c.shape(0));
  return ok_status();
}

Status infer_bernoulli(InferCtx& c) {
  DType dt = c.dtype(0);
  if (c.node.attr("dtype") != nullptr) {
    BP_ASSIGN_OR_RETURN(dt, dtype_attr(c, "dtype", 1, dtypes::kAll));
  }
  c.set(0, dt, c.shape(0));
  return ok_status();
}

Status infer_multinomial(InferCtx& c) {
  if (c.rank(0) != 2)
    return c.error("input '" + c.name(0) + "' must be [batch_size, class_size], got " +
                   dims(c.shape(0)));
  BP_ASSIGN_OR_RETURN(int64_t n, c.node.attr_int("sample_size", 1));
  if (n < 1) return c.error("attribute 'sample_size' is " + std::to_string(n) + ", expected >= 1");
  BP_ASSIGN_OR_RETURN(DType dt, dtype_attr(c, "dtype", 6, dtypes::kIndex));
  c.set(0, dt, {c.shape(0)[0], n});
  return ok_status();
}

OpSchema loss_schema(const char* op, int since) {
  OpSchema s("", op, since);
  const bool sce = std::string(op) == "SoftmaxCrossEntropyLoss";
  s.input(sce ? "scores" : "input", "T")
      .input(sce ? "labels" : "target", "Tind")
      .optional_input(sce ? "weights" : "weight", "T")
      .output(sce ? "output" : "loss", "T");
  if (sce) s.optional_output("log_prob", "T");
  DTypeList t = kFloat3;
  if (sce && since >= 13) t.push_back(DType::kBFloat16);
  s.type("T", t)
      .type("Tind", dtypes::kIndex)
      .attr("ignore_index", AttrType::kInt)
      .attr("reduction", AttrType::kString, std::string("mean"))
      .infer(infer_loss);
  return s;
}

OpSchema window_schema(const char* op, const char* doc) {
  OpSchema s("", op, 17);
  s.doc(doc)
      .input("size", "T1")
      .output("output", "T2")
      .type("T1", dtypes::kIndex)
      .type("T2", kWindowOut)
      .attr("output_datatype", AttrType::kInt, int64_t{1})
      .attr("periodic", AttrType::kInt, int64_t{1})
      .shape_inputs({"size"})
      .infer(infer_window);
  return s;
}

}  // namespace

void register_signal_ops(OpRegistry& registry) {
  auto add = [&](OpSchema s) { (void)registry.add(std::move(s)); };
  for (int since : {12, 13}) {
    add(loss_schema("NegativeLogLikelihoodLoss", since)
            .doc("mean/sum/none of -input[n, target[n, d...], d...] * weight[target]"));
    add(loss_schema("SoftmaxCrossEntropyLoss", since)
            .doc("NegativeLogLikelihoodLoss of LogSoftmax(scores) along axis 1"));
  }

  add(OpSchema("", "DFT", 17)
          .doc("discrete Fourier transform along one signal axis; real or complex input")
          .input("input", "T1")
          .optional_input("dft_length", "T2")
          .output("output", "T1")
          .type("T1", dtypes::kFloat)
          .type("T2", dtypes::kIndex)
          .attr("axis", AttrType::kInt, int64_t{1})
          .attr("inverse", AttrType::kInt, int64_t{0})
          .attr("onesided", AttrType::kInt, int64_t{0})
          .shape_inputs({"dft_length"})
          .infer(infer_dft));
  add(OpSchema("", "STFT", 17)
          .doc("short-time Fourier transform: DFTs of windowed frames")
          .input("signal", "T1")
          .input("frame_step", "T2")
          .optional_input("window", "T1")
          .optional_input("frame_length", "T2")
          .output("output", "T1")
          .type("T1", dtypes::kFloat)
          .type("T2", dtypes::kIndex)
          .attr("onesided", AttrType::kInt, int64_t{1})
          .shape_inputs({"frame_step", "frame_length"})
          .infer(infer_stft));
  add(window_schema("HannWindow", "0.5 - 0.5 cos(2 pi n / N)"));
  add(window_schema("HammingWindow", "25/46 - 21/46 cos(2 pi n / N)"));
  add(window_schema("BlackmanWindow", "0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)"));
  add(OpSchema("", "MelWeightMatrix", 17)
          .doc("triangular mel filter bank [dft_length / 2 + 1, num_mel_bins]")
          .input("num_mel_bins", "T1")
          .input("dft_length", "T1")
          .input("sample_rate", "T1")
          .input("lower_edge_hertz", "T2")
          .input("upper_edge_hertz", "T2")
          .output("output", "T3")
          .type("T1", dtypes::kIndex)
          .type("T2", dtypes::kFloat)
          .type("T3", kWindowOut)
          .attr("output_datatype", AttrType::kInt, int64_t{1})
          .shape_inputs({"num_mel_bins", "dft_length"})
          .infer(infer_mel));

  add(OpSchema("", "RandomUniform", 1)
          .doc("uniform samples in [low, high) of a fixed shape")
          .output("output", "T")
          .type("T", kFloat3)
          .attr("dtype", AttrType::kInt, int64_t{1})
          .attr("high", AttrType::kFloat, 1.0f)
          .attr("low", AttrType::kFloat, 0.0f)
          .attr("seed", AttrType::kFloat)
          .required_attr("shape", AttrType::kInts)
          .infer(infer_random));
  add(OpSchema("", "RandomNormal", 1)
          .doc("normal samples (mean, scale) of a fixed shape")
          .output("output", "T")
          .type("T", kFloat3)
          .attr("dtype", AttrType::kInt, int64_t{1})
          .attr("mean", AttrType::kFloat, 0.0f)
          .attr("scale", AttrType::kFloat, 1.0f)
          .attr("seed", AttrType::kFloat)
          .required_attr("shape", AttrType::kInts)
          .infer(infer_random));
  add(OpSchema("", "RandomUniformLike", 1)
          .doc("uniform samples in [low, high) of the input's shape")
          .input("input", "T1")
          .output("output", "T2")
          .type("T1", dtypes::kAll)
          .type("T2", kFloat3)
          .attr("dtype", AttrType::kInt)
          .attr("high", AttrType::kFloat, 1.0f)
          .attr("low", AttrType::kFloat, 0.0f)
          .attr("seed", AttrType::kFloat)
          .infer(infer_random_like));
  add(OpSchema("", "RandomNormalLike", 1)
          .doc("normal samples (mean, scale) of the input's shape")
          .input("input", "T1")
          .output("output", "T2")
          .type("T1", dtypes::kAll)
          .type("T2", kFloat3)
          .attr("dtype", AttrType::kInt)
          .attr("mean", AttrType::kFloat, 0.0f)
          .attr("scale", AttrType::kFloat, 1.0f)
          .attr("seed", AttrType::kFloat)
          .infer(infer_random_like));
  add(OpSchema("", "Bernoulli", 15)
          .doc("1 with probability input[i], else 0")
          .input("input", "T1")
          .output("output", "T2")
          .type("T1", kFloat3)
          .type("T2", dtypes::kAll)
          .attr("dtype", AttrType::kInt)
          .attr("seed", AttrType::kFloat)
          .infer(infer_bernoulli));
  add(OpSchema("", "Multinomial", 7)
          .doc("sample_size class indices per batch row, drawn from unnormalised log-probabilities")
          .input("input", "T1")
          .output("output", "T2")
          .type("T1", kFloat3)
          .type("T2", dtypes::kIndex)
          .attr("dtype", AttrType::kInt, int64_t{6})
          .attr("sample_size", AttrType::kInt, int64_t{1})
          .attr("seed", AttrType::kFloat)
          .infer(infer_multinomial));
}

}  // namespace backplane::ir::ops
