// kernels_nn_norm.cpp — BatchNormalization (inference, and training_mode=1), LayerNormalization,
// InstanceNormalization (float32), Softmax, LogSoftmax (every float type).
//
// Means and variances are accumulated in double and computed in two passes
// (mean, then squared deviations): this backend is the correctness oracle.
#include "reference/kernel_numeric.hpp"
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace nn {
namespace {

// Mean and 1/sqrt(variance + epsilon) of n floats at stride 1.
void moments(const float* x, int64_t n, float epsilon, double* mean, double* inv_std) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double m = n > 0 ? sum / static_cast<double>(n) : 0.0;
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sq += (x[i] - m) * (x[i] - m);
  const double var = n > 0 ? sq / static_cast<double>(n) : 0.0;
  *mean = m;
  *inv_std = 1.0 / std::sqrt(var + static_cast<double>(epsilon));
}

// ---------------------------------------------------------------------------
// BatchNormalization, inference mode:
//   Y = (X - mean) / sqrt(var + epsilon) * scale + B
// Parameters are per channel, or (opset 7-8, spatial = 0) per channel and
// spatial position.
// ---------------------------------------------------------------------------

class BatchNormKernel final : public Kernel {
 public:
  BatchNormKernel(int64_t batch, int64_t channels, int64_t spatial, bool per_element, float epsilon)
      : n_(batch), c_(channels), s_(spatial), per_element_(per_element), eps_(epsilon) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = static_cast<const float*>(inputs[2]);
    const float* mean = static_cast<const float*>(inputs[3]);
    const float* var = static_cast<const float*>(inputs[4]);
    float* y = static_cast<float*>(outputs[0]);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        const float* xp = x + (n * c_ + c) * s_;
        float* yp = y + (n * c_ + c) * s_;
        if (per_element_) {
          for (int64_t i = 0, p = c * s_; i < s_; ++i, ++p)
            yp[i] = (xp[i] - mean[p]) / std::sqrt(var[p] + eps_) * scale[p] + bias[p];
        } else {
          const float a = scale[c] / std::sqrt(var[c] + eps_);
          const float b = bias[c] - mean[c] * a;
          for (int64_t i = 0; i < s_; ++i) yp[i] = xp[i] * a + b;
        }
      }
  }

 private:
  int64_t n_, c_, s_;
  bool per_element_;
  float eps_;
};

// BatchNormalization, training mode (opset 14+, training_mode=1): the batch's
// own mean and (population) variance per channel normalise X, and the
// optional outputs are the running statistics
//   running_mean = input_mean * momentum + mean * (1 - momentum)
//   running_var  = input_var * momentum + var * (1 - momentum).
class BatchNormTrainKernel final : public Kernel {
 public:
  BatchNormTrainKernel(int64_t batch, int64_t channels, int64_t spatial, float epsilon,
                       float momentum, bool want_mean, bool want_var)
      : n_(batch),
        c_(channels),
        s_(spatial),
        eps_(epsilon),
        momentum_(momentum),
        want_mean_(want_mean),
        want_var_(want_var) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = static_cast<const float*>(inputs[2]);
    const float* in_mean = static_cast<const float*>(inputs[3]);
    const float* in_var = static_cast<const float*>(inputs[4]);
    float* y = static_cast<float*>(outputs[0]);
    float* run_mean = want_mean_ ? static_cast<float*>(outputs[1]) : nullptr;
    float* run_var = want_var_ ? static_cast<float*>(outputs[2]) : nullptr;
    const double count = static_cast<double>(n_ * s_);
    for (int64_t c = 0; c < c_; ++c) {
      double sum = 0.0;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t i = 0; i < s_; ++i) sum += x[(n * c_ + c) * s_ + i];
      const double mean = count > 0 ? sum / count : 0.0;
      double sq = 0.0;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t i = 0; i < s_; ++i) {
          const double d = x[(n * c_ + c) * s_ + i] - mean;
          sq += d * d;
        }
      const double var = count > 0 ? sq / count : 0.0;
      const double a = scale[c] / std::sqrt(var + static_cast<double>(eps_));
      const double b = bias[c] - mean * a;
      for (int64_t n = 0; n < n_; ++n)
        for (int64_t i = 0; i < s_; ++i) {
          const int64_t at = (n * c_ + c) * s_ + i;
          y[at] = static_cast<float>(x[at] * a + b);
        }
      const double m = momentum_;
      if (run_mean != nullptr) run_mean[c] = static_cast<float>(in_mean[c] * m + mean * (1 - m));
      if (run_var != nullptr) run_var[c] = static_cast<float>(in_var[c] * m + var * (1 - m));
    }
  }

 private:
  int64_t n_, c_, s_;
  float eps_, momentum_;
  bool want_mean_, want_var_;
};

std::unique_ptr<Kernel> make_batch_norm(const NodeInfo& info) {
  for (size_t i = 0; i < 5; ++i)
    if (!info.has_input(i)) fail_invalid(info, "needs inputs X, scale, B, input_mean, input_var");
  require_float32(info, {0, 1, 2, 3, 4}, {0});
  if (info.node.attr_int("training_mode", 0) != 0) {
    if (info.node.opset() < 14)
      fail_invalid(info, "attribute 'training_mode' exists from opset 14");
    require_float32(info, {}, {1, 2});
    if (info.out_dtypes.size() > 3) fail_invalid(info, "training mode has at most 3 outputs");
    const Dims& x = info.in_shapes[0];
    if (x.size() < 2) fail_invalid(info, "input " + dims_str(x) + " must have rank >= 2");
    const int64_t c = x[1], s = sdk::element_count(x) / std::max<int64_t>(1, x[0] * c);
    for (size_t i = 1; i < 5; ++i)
      if (info.in_shapes[i] != Dims{c})
        fail_invalid(info, "scale, B, mean and var must have shape [" + std::to_string(c) + "]");
    for (size_t i = 1; i < info.out_shapes.size(); ++i)
      if (has_output(info, i) && info.out_shapes[i] != Dims{c})
        fail_invalid(
            info, "running mean and variance outputs must have shape [" + std::to_string(c) + "]");
    const float momentum = info.node.attr_float("momentum", 0.9f);
    return std::make_unique<BatchNormTrainKernel>(x[0], c, s,
                                                  info.node.attr_float("epsilon", 1e-5f), momentum,
                                                  has_output(info, 1), has_output(info, 2));
  }
  for (size_t i = 1; i < info.out_dtypes.size(); ++i)
    if (has_output(info, i))
      fail_unsupported(info,
                       "running/saved mean and variance outputs without training_mode=1 (opset "
                       "9-13 training) are not supported");
  if (info.node.opset() < 7 && info.node.attr_int("is_test", 0) == 0)
    fail_unsupported(info, "is_test=0 (training) is not supported");
  const Dims& x = info.in_shapes[0];
  if (x.size() < 2) fail_invalid(info, "input " + dims_str(x) + " must have rank >= 2");
  const int64_t c = x[1], s = sdk::element_count(x) / std::max<int64_t>(1, x[0] * c);
  int64_t p = sdk::element_count(info.in_shapes[1]);
  for (size_t i = 2; i < 5; ++i)
    if (sdk::element_count(info.in_shapes[i]) != p)
      fail_invalid(info, "scale, B, mean and var must have the same number of elements");
  if (p != c && p != c * s)
    fail_invalid(info,
                 "parameters " + dims_str(info.in_shapes[1]) + " do not fit input " + dims_str(x));
  return std::make_unique<BatchNormKernel>(x[0], c, s, p != c,
                                           info.node.attr_float("epsilon", 1e-5f));
}

// ---------------------------------------------------------------------------
// LayerNormalization (opset 17): normalise over dims [axis, rank); Scale and B
// broadcast to those dims. Optional outputs Mean and InvStdDev.
// ---------------------------------------------------------------------------

// For each element of `shape`, the index of the element of `from` (which
// broadcasts to `shape`, right-aligned) that it reads. Empty when identical.
std::vector<int64_t> broadcast_index(const NodeInfo& info, const Dims& from, const Dims& shape) {
  if (from == shape) return {};
  if (from.size() > shape.size())
    fail_invalid(info, dims_str(from) + " does not broadcast to " + dims_str(shape));
  Dims f(shape.size() - from.size(), 1);
  f.insert(f.end(), from.begin(), from.end());
  Dims stride(shape.size(), 0);
  int64_t st = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (f[d] != 1 && f[d] != shape[d])
      fail_invalid(info, dims_str(from) + " does not broadcast to " + dims_str(shape));
    stride[d] = f[d] == 1 ? 0 : st;
    st *= f[d];
  }
  std::vector<int64_t> index(static_cast<size_t>(sdk::element_count(shape)));
  Dims idx(shape.size(), 0);
  for (auto& out : index) {
    int64_t o = 0;
    for (size_t d = 0; d < shape.size(); ++d) o += idx[d] * stride[d];
    out = o;
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return index;
}

class LayerNormKernel final : public Kernel {
 public:
  LayerNormKernel(int64_t outer, int64_t inner, float epsilon, bool has_bias,
                  std::vector<int64_t> scale_index, std::vector<int64_t> bias_index, bool mean_out,
                  bool inv_std_out)
      : outer_(outer),
        inner_(inner),
        eps_(epsilon),
        has_bias_(has_bias),
        scale_index_(std::move(scale_index)),
        bias_index_(std::move(bias_index)),
        mean_out_(mean_out),
        inv_std_out_(inv_std_out) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(inputs[2]) : nullptr;
    float* y = static_cast<float*>(outputs[0]);
    float* mean_y = mean_out_ ? static_cast<float*>(outputs[1]) : nullptr;
    float* inv_std_y = inv_std_out_ ? static_cast<float*>(outputs[2]) : nullptr;
    for (int64_t o = 0; o < outer_; ++o) {
      const float* xr = x + o * inner_;
      float* yr = y + o * inner_;
      double mean, inv_std;
      moments(xr, inner_, eps_, &mean, &inv_std);
      for (int64_t i = 0; i < inner_; ++i) {
        const float s = scale[scale_index_.empty() ? i : scale_index_[i]];
        const float b = bias == nullptr ? 0.0f : bias[bias_index_.empty() ? i : bias_index_[i]];
        yr[i] = static_cast<float>((xr[i] - mean) * inv_std) * s + b;
      }
      if (mean_y != nullptr) mean_y[o] = static_cast<float>(mean);
      if (inv_std_y != nullptr) inv_std_y[o] = static_cast<float>(inv_std);
    }
  }

 private:
  int64_t outer_, inner_;
  float eps_;
  bool has_bias_;
  std::vector<int64_t> scale_index_, bias_index_;
  bool mean_out_, inv_std_out_;
};

std::unique_ptr<Kernel> make_layer_norm(const NodeInfo& info) {
  if (!info.has_input(0) || !info.has_input(1)) fail_invalid(info, "needs inputs X and Scale");
  require_float32(info, {0, 1, 2}, {0, 1, 2});
  const Dims& x = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(x.size());
  const int64_t axis = normalize_axis(info.node.attr_int("axis", -1), rank, info);
  const Dims norm_shape(x.begin() + axis, x.end());
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= x[d];
  const int64_t inner = sdk::element_count(norm_shape);
  std::vector<int64_t> scale_index = broadcast_index(info, info.in_shapes[1], norm_shape);
  std::vector<int64_t> bias_index;
  if (info.has_input(2)) bias_index = broadcast_index(info, info.in_shapes[2], norm_shape);
  const bool mean_out = has_output(info, 1), inv_std_out = has_output(info, 2);
  if ((mean_out && sdk::element_count(info.out_shapes[1]) != outer) ||
      (inv_std_out && sdk::element_count(info.out_shapes[2]) != outer))
    fail_invalid(info, "Mean/InvStdDev outputs must have " + std::to_string(outer) + " elements");
  return std::make_unique<LayerNormKernel>(outer, inner, info.node.attr_float("epsilon", 1e-5f),
                                           info.has_input(2), std::move(scale_index),
                                           std::move(bias_index), mean_out, inv_std_out);
}

// ---------------------------------------------------------------------------
// InstanceNormalization: normalise each (n, c) plane; scale and B per channel.
// ---------------------------------------------------------------------------

class InstanceNormKernel final : public Kernel {
 public:
  InstanceNormKernel(int64_t batch, int64_t channels, int64_t spatial, float epsilon)
      : n_(batch), c_(channels), s_(spatial), eps_(epsilon) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const float* x = static_cast<const float*>(inputs[0]);
    const float* scale = static_cast<const float*>(inputs[1]);
    const float* bias = static_cast<const float*>(inputs[2]);
    float* y = static_cast<float*>(outputs[0]);
    for (int64_t n = 0; n < n_; ++n)
      for (int64_t c = 0; c < c_; ++c) {
        const float* xp = x + (n * c_ + c) * s_;
        float* yp = y + (n * c_ + c) * s_;
        double mean, inv_std;
        moments(xp, s_, eps_, &mean, &inv_std);
        for (int64_t i = 0; i < s_; ++i)
          yp[i] = static_cast<float>((xp[i] - mean) * inv_std) * scale[c] + bias[c];
      }
  }

 private:
  int64_t n_, c_, s_;
  float eps_;
};

std::unique_ptr<Kernel> make_instance_norm(const NodeInfo& info) {
  for (size_t i = 0; i < 3; ++i)
    if (!info.has_input(i)) fail_invalid(info, "needs inputs input, scale and B");
  require_float32(info, {0, 1, 2}, {0});
  const Dims& x = info.in_shapes[0];
  if (x.size() < 3) fail_invalid(info, "input " + dims_str(x) + " must have rank >= 3");
  const int64_t c = x[1];
  if (sdk::element_count(info.in_shapes[1]) != c || sdk::element_count(info.in_shapes[2]) != c)
    fail_invalid(info, "scale and B must have " + std::to_string(c) + " elements");
  return std::make_unique<InstanceNormKernel>(
      x[0], c, sdk::element_count(x) / std::max<int64_t>(1, x[0] * c),
      info.node.attr_float("epsilon", 1e-5f));
}

// ---------------------------------------------------------------------------
// Softmax / LogSoftmax over `len` elements at stride `inner`, for each of
// outer*inner rows. Opset >= 13 normalises along `axis` (default -1); older
// opsets flatten to 2-D at `axis` (default 1) and normalise each row, which is
// the same loop with len = prod(dims[axis:]) and inner = 1.
// ---------------------------------------------------------------------------

template <class T>
class SoftmaxKernel final : public Kernel {
  using M = math_t<T>;  // float for float16/bfloat16/float32, double for float64

 public:
  SoftmaxKernel(int64_t outer, int64_t len, int64_t inner, bool log)
      : outer_(outer), len_(len), inner_(inner), log_(log) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* x = static_cast<const T*>(inputs[0]);
    T* y = static_cast<T*>(outputs[0]);
    for (int64_t o = 0; o < outer_; ++o)
      for (int64_t i = 0; i < inner_; ++i) {
        const T* xr = x + o * len_ * inner_ + i;
        T* yr = y + o * len_ * inner_ + i;
        M max = -std::numeric_limits<M>::infinity();
        for (int64_t k = 0; k < len_; ++k) max = std::max<M>(max, load(xr[k * inner_]));
        double sum = 0.0;
        for (int64_t k = 0; k < len_; ++k) sum += std::exp(load(xr[k * inner_]) - max);
        if (log_) {
          const M log_sum = static_cast<M>(std::log(sum));
          for (int64_t k = 0; k < len_; ++k)
            yr[k * inner_] = store<T>(load(xr[k * inner_]) - max - log_sum);
        } else {
          const M inv = static_cast<M>(1.0 / sum);
          for (int64_t k = 0; k < len_; ++k)
            yr[k * inner_] = store<T>(std::exp(load(xr[k * inner_]) - max) * inv);
        }
      }
  }

 private:
  int64_t outer_, len_, inner_;
  bool log_;
};

std::unique_ptr<Kernel> make_softmax(const NodeInfo& info, bool log) {
  if (!info.has_input(0)) fail_invalid(info, "needs input");
  const Dims& x = info.in_shapes[0];
  const int64_t rank = static_cast<int64_t>(x.size());
  if (rank == 0) fail_invalid(info, "input must have rank >= 1");
  if (info.out_dtypes.empty() || info.out_dtypes[0] != info.in_dtypes[0])
    fail_invalid(info, "output dtype differs from the input's");
  const bool per_axis = info.node.opset() >= 13;
  const int64_t axis = normalize_axis(info.node.attr_int("axis", per_axis ? -1 : 1), rank, info);
  int64_t outer = 1, len = 1, inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= x[d];
    else if (d == axis || !per_axis) len *= x[d];
    else inner *= x[d];
  }
  return dispatch<float, f16, double, bf16>(
      info.in_dtypes[0], info, "input", [&](auto tag) -> std::unique_ptr<Kernel> {
        return std::make_unique<SoftmaxKernel<decltype(tag)>>(outer, len, inner, log);
      });
}

}  // namespace

void register_norm(KernelRegistry& registry) {
  registry.add("BatchNormalization", make_batch_norm);
  registry.add("LayerNormalization", make_layer_norm);
  registry.add("InstanceNormalization", make_instance_norm);
  registry.add("Softmax", [](const NodeInfo& info) { return make_softmax(info, false); });
  registry.add("LogSoftmax", [](const NodeInfo& info) { return make_softmax(info, true); });
}

}  // namespace nn
}  // namespace backplane::cpuref
