// kernels_nn_matmul.cpp — Gemm (float32, float64, float16, bfloat16) and
// MatMul (every dtype ONNX allows: those and the 32- and 64-bit integers,
// wrapping on overflow). float32 goes through the blocked gemm, the others
// through a plain loop, the 16-bit floats summed in float32.
#include "reference/kernel_numeric.hpp"
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace backplane::cpuref {
namespace nn {
namespace {

// ---------------------------------------------------------------------------
// Gemm: Y = alpha * A' * B' + beta * C, A' = transA ? A^T : A, likewise B'.
// ---------------------------------------------------------------------------

struct GemmParams {
  int64_t m, n, k;
  int64_t a_rs, a_cs, b_rs, b_cs;
  float alpha, beta;
  bool use_c;
  int64_t c_rs, c_cs;  // 0 along broadcast dims
};

// float32 through the blocked gemm; float64, float16 and bfloat16 by a plain
// loop in their math type (the 16-bit floats in float32, rounded once).
template <class T>
class GemmKernel final : public Kernel {
 public:
  explicit GemmKernel(GemmParams p) : p_(p) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* a = static_cast<const T*>(inputs[0]);
    const T* b = static_cast<const T*>(inputs[1]);
    const T* c = p_.use_c ? static_cast<const T*>(inputs[2]) : nullptr;
    T* y = static_cast<T*>(outputs[0]);
    if constexpr (std::is_same_v<T, float>) {
      if (c != nullptr)
        for (int64_t i = 0; i < p_.m; ++i)
          for (int64_t j = 0; j < p_.n; ++j)
            y[i * p_.n + j] = p_.beta * c[i * p_.c_rs + j * p_.c_cs];
      gemm(p_.m, p_.n, p_.k, p_.alpha, a, p_.a_rs, p_.a_cs, b, p_.b_rs, p_.b_cs, y, p_.n, p_.use_c);
    } else {
      using M = math_t<T>;
      for (int64_t i = 0; i < p_.m; ++i)
        for (int64_t j = 0; j < p_.n; ++j) {
          M sum{};
          for (int64_t q = 0; q < p_.k; ++q)
            sum += load(a[i * p_.a_rs + q * p_.a_cs]) * load(b[q * p_.b_rs + j * p_.b_cs]);
          M v = static_cast<M>(p_.alpha) * sum;
          if (c != nullptr) v += static_cast<M>(p_.beta) * load(c[i * p_.c_rs + j * p_.c_cs]);
          y[i * p_.n + j] = store<T>(v);
        }
    }
  }

 private:
  GemmParams p_;
};

std::unique_ptr<Kernel> make_gemm(const NodeInfo& info) {
  if (!info.has_input(0) || !info.has_input(1)) fail_invalid(info, "needs inputs A and B");
  const bp_dtype_t dt = info.in_dtypes[0];
  if (info.in_dtypes[1] != dt || (info.has_input(2) && info.in_dtypes[2] != dt) ||
      info.out_dtypes.empty() || info.out_dtypes[0] != dt)
    fail_invalid(info, "A, B, C and Y must have one dtype");
  const Dims& a = info.in_shapes[0];
  const Dims& b = info.in_shapes[1];
  if (a.size() != 2 || b.size() != 2)
    fail_invalid(info, "A " + dims_str(a) + " and B " + dims_str(b) + " must be 2-D");
  const bool ta = info.node.attr_int("transA", 0) != 0;
  const bool tb = info.node.attr_int("transB", 0) != 0;
  GemmParams p{};
  p.m = ta ? a[1] : a[0];
  p.k = ta ? a[0] : a[1];
  p.n = tb ? b[0] : b[1];
  const int64_t kb = tb ? b[1] : b[0];
  if (kb != p.k)
    fail_invalid(info,
                 "inner dimensions of A " + dims_str(a) + " and B " + dims_str(b) + " differ");
  if (info.out_shapes[0] != Dims{p.m, p.n})
    fail_invalid(info, "output shape " + dims_str(info.out_shapes[0]) + " is not [" +
                           std::to_string(p.m) + "," + std::to_string(p.n) + "]");
  // Element (i, k) of A' is A[i*a_rs + k*a_cs]; likewise for B'.
  p.a_rs = ta ? 1 : a[1];
  p.a_cs = ta ? a[1] : 1;
  p.b_rs = tb ? 1 : b[1];
  p.b_cs = tb ? b[1] : 1;
  p.alpha = info.node.attr_float("alpha", 1.0f);
  p.beta = info.node.attr_float("beta", 1.0f);
  // beta == 0 drops C entirely (as ONNX Runtime does), so Inf/NaN in C do not leak.
  p.use_c = info.has_input(2) && p.beta != 0.0f;
  if (p.use_c) {
    const Dims& c = info.in_shapes[2];
    if (c.size() > 2) fail_invalid(info, "C " + dims_str(c) + " has more than 2 dims");
    const Dims c2 = c.size() == 2 ? c : c.size() == 1 ? Dims{1, c[0]} : Dims{1, 1};
    if ((c2[0] != 1 && c2[0] != p.m) || (c2[1] != 1 && c2[1] != p.n))
      fail_invalid(info, "C " + dims_str(c) + " does not broadcast to [" + std::to_string(p.m) +
                             "," + std::to_string(p.n) + "]");
    p.c_rs = c2[0] == 1 ? 0 : c2[1];
    p.c_cs = c2[1] == 1 ? 0 : 1;
  }
  return dispatch<float, f16, bf16, double>(dt, info, "Gemm",
                                            [&](auto tag) -> std::unique_ptr<Kernel> {
                                              return std::make_unique<GemmKernel<decltype(tag)>>(p);
                                            });
}

// ---------------------------------------------------------------------------
// MatMul: numpy matmul, batch dims broadcast, 1-D operands promoted then
// their unit dim dropped from the result.
// ---------------------------------------------------------------------------

template <class T>
class MatMulKernel final : public Kernel {
 public:
  MatMulKernel(int64_t m, int64_t n, int64_t k, std::vector<int64_t> a_offsets,
               std::vector<int64_t> b_offsets)
      : m_(m), n_(n), k_(k), a_off_(std::move(a_offsets)), b_off_(std::move(b_offsets)) {}

  void run(const void* const* inputs, void* const* outputs, void*) const override {
    const T* a = static_cast<const T*>(inputs[0]);
    const T* b = static_cast<const T*>(inputs[1]);
    T* y = static_cast<T*>(outputs[0]);
    for (size_t i = 0; i < a_off_.size(); ++i) {
      if constexpr (std::is_same_v<T, float>) {
        gemm(m_, n_, k_, 1.0f, a + a_off_[i], k_, 1, b + b_off_[i], n_, 1, y + i * m_ * n_, n_,
             false);
      } else {
        using Acc = accumulator_t<T>;
        const T* ab = a + a_off_[i];
        const T* bb = b + b_off_[i];
        T* yb = y + static_cast<int64_t>(i) * m_ * n_;
        for (int64_t r = 0; r < m_; ++r)
          for (int64_t c = 0; c < n_; ++c) {
            Acc sum{};
            for (int64_t j = 0; j < k_; ++j)
              sum += widen<Acc>(load(ab[r * k_ + j])) * widen<Acc>(load(bb[j * n_ + c]));
            yb[r * n_ + c] = store<T>(sum);
          }
      }
    }
  }

 private:
  int64_t m_, n_, k_;
  std::vector<int64_t> a_off_, b_off_;  // element offset of each output batch's operands
};

std::unique_ptr<Kernel> make_matmul(const NodeInfo& info) {
  if (!info.has_input(0) || !info.has_input(1)) fail_invalid(info, "needs inputs A and B");
  const bp_dtype_t dt = info.in_dtypes[0];
  if (info.in_dtypes[1] != dt || info.out_dtypes.empty() || info.out_dtypes[0] != dt)
    fail_invalid(info, "A, B and Y must have one dtype");
  Dims a = info.in_shapes[0], b = info.in_shapes[1];
  if (a.empty() || b.empty()) fail_invalid(info, "operands must have rank >= 1");
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);
  const int64_t m = a[a.size() - 2], k = a.back(), n = b.back();
  if (b[b.size() - 2] != k)
    fail_invalid(info, "inner dimensions of " + dims_str(info.in_shapes[0]) + " and " +
                           dims_str(info.in_shapes[1]) + " differ");

  // Broadcast the batch dims (everything but the last two), right-aligned.
  const size_t rank = std::max(a.size(), b.size()) - 2;
  Dims a_batch(rank, 1), b_batch(rank, 1), batch(rank, 1);
  std::copy(a.begin(), a.end() - 2, a_batch.end() - (a.size() - 2));
  std::copy(b.begin(), b.end() - 2, b_batch.end() - (b.size() - 2));
  for (size_t d = 0; d < rank; ++d) {
    if (a_batch[d] != b_batch[d] && a_batch[d] != 1 && b_batch[d] != 1)
      fail_invalid(info, "batch dims of " + dims_str(info.in_shapes[0]) + " and " +
                             dims_str(info.in_shapes[1]) + " do not broadcast");
    batch[d] = a_batch[d] == 1 ? b_batch[d] : a_batch[d];
  }
  Dims expected = batch;
  if (!a_vec) expected.push_back(m);
  if (!b_vec) expected.push_back(n);
  if (info.out_shapes[0] != expected)
    fail_invalid(info,
                 "output shape " + dims_str(info.out_shapes[0]) + " is not " + dims_str(expected));

  // Strides of each operand's batch dims in elements; 0 where broadcast.
  Dims a_stride(rank, 0), b_stride(rank, 0);
  int64_t as = m * k, bs = k * n;
  for (size_t d = rank; d-- > 0;) {
    if (a_batch[d] != 1) a_stride[d] = as;
    if (b_batch[d] != 1) b_stride[d] = bs;
    as *= a_batch[d];
    bs *= b_batch[d];
  }
  const int64_t count = sdk::element_count(batch);
  std::vector<int64_t> a_off, b_off;
  Dims idx(rank, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t ao = 0, bo = 0;
    for (size_t d = 0; d < rank; ++d) {
      ao += idx[d] * a_stride[d];
      bo += idx[d] * b_stride[d];
    }
    a_off.push_back(ao);
    b_off.push_back(bo);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  // A batched A times one shared B is a single taller GEMM.
  bool one_b = true, a_dense = true;
  for (int64_t i = 0; i < count; ++i) {
    one_b = one_b && b_off[i] == 0;
    a_dense = a_dense && a_off[i] == i * m * k;
  }
  const bool fold = count > 1 && one_b && a_dense;
  return dispatch<float, f16, bf16, double, int32_t, int64_t, uint32_t, uint64_t>(
      dt, info, "MatMul", [&](auto tag) -> std::unique_ptr<Kernel> {
        using T = decltype(tag);
        if (fold)
          return std::make_unique<MatMulKernel<T>>(count * m, n, k, std::vector<int64_t>{0},
                                                   std::vector<int64_t>{0});
        return std::make_unique<MatMulKernel<T>>(m, n, k, a_off, b_off);
      });
}

}  // namespace

void register_matmul(KernelRegistry& registry) {
  registry.add("Gemm", make_gemm);
  registry.add("MatMul", make_matmul);
}

}  // namespace nn
}  // namespace backplane::cpuref
