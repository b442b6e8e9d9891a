// kernels_nn.cpp — CpuRef's "nn" operator family: registration and the helpers
// shared by kernels_nn_*.cpp (dtype checks, pad resolution, the GEMM loop).
//
// The op families live in:
//   kernels_nn_conv.cpp    Conv, ConvTranspose
//   kernels_nn_matmul.cpp  Gemm, MatMul
//   kernels_nn_pool.cpp    MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool
//   kernels_nn_norm.cpp    BatchNormalization, LayerNormalization, InstanceNormalization,
//                          Softmax, LogSoftmax
//   kernels_nn_resize.cpp  Resize
// The helpers below are declared in kernels_nn_internal.hpp, which those files
// include.
#include "reference/kernels_nn_internal.hpp"

#include <algorithm>
#include <string>
#include <vector>

namespace backplane::cpuref {
namespace nn {

std::string dims_str(const Dims& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(d[i]);
  }
  return s + "]";
}

// Floor division for possibly negative numerators (b > 0).
int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

[[noreturn]] void fail_unsupported(const NodeInfo& info, const std::string& why) {
  throw sdk::Error(BP_STATUS_UNSUPPORTED, info.describe() + ": " + why);
}

[[noreturn]] void fail_invalid(const NodeInfo& info, const std::string& why) {
  throw sdk::Error(BP_STATUS_INVALID_ARGUMENT, info.describe() + ": " + why);
}

bool has_output(const NodeInfo& info, size_t i) {
  return i < info.out_dtypes.size() && info.out_dtypes[i] != BP_DTYPE_UNDEFINED &&
         i < info.node.num_outputs() && info.node.raw().outputs[i] >= 0;
}

void require_float32(const NodeInfo& info, const std::vector<size_t>& inputs,
                     const std::vector<size_t>& outputs) {
  for (size_t i : inputs) {
    if (!info.has_input(i)) continue;
    if (info.in_dtypes[i] != BP_DTYPE_FLOAT32)
      fail_unsupported(info, "input " + std::to_string(i) + " has dtype " +
                                 sdk::dtype_name(info.in_dtypes[i]) +
                                 "; only float32 is supported");
  }
  for (size_t i : outputs) {
    if (!has_output(info, i)) continue;
    if (info.out_dtypes[i] != BP_DTYPE_FLOAT32)
      fail_unsupported(info, "output " + std::to_string(i) + " has dtype " +
                                 sdk::dtype_name(info.out_dtypes[i]) +
                                 "; only float32 is supported");
  }
}

// Pads (begin..., end...) of a sliding window over `in` spatial dims that
// produces `out`, from the node's auto_pad / pads attributes. Conv and the
// pools share the rule: SAME_* splits the total padding
// (out-1)*stride + (k-1)*dilation + 1 - in, the odd element going to the end
// (SAME_UPPER) or the beginning (SAME_LOWER).
std::vector<int64_t> resolve_window_pads(const NodeInfo& info, const Dims& in, const Dims& kernel,
                                         const Dims& strides, const Dims& dilations,
                                         const Dims& out) {
  const size_t r = in.size();
  const std::string auto_pad = info.node.attr_string("auto_pad", "NOTSET");
  std::vector<int64_t> pads(2 * r, 0);
  if (auto_pad == "NOTSET") {
    if (info.node.has_attr("pads")) {
      pads = info.node.attr_ints("pads");
      if (pads.size() != 2 * r)
        fail_invalid(info, "pads has " + std::to_string(pads.size()) + " values, expected " +
                               std::to_string(2 * r));
      for (int64_t p : pads)
        if (p < 0) fail_unsupported(info, "negative pads are not supported");
    }
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (size_t d = 0; d < r; ++d) {
      const int64_t total = std::max<int64_t>(
          0, (out[d] - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 - in[d]);
      const int64_t small = total / 2, large = total - total / 2;
      pads[d] = auto_pad == "SAME_UPPER" ? small : large;
      pads[d + r] = auto_pad == "SAME_UPPER" ? large : small;
    }
  } else if (auto_pad != "VALID") {
    fail_unsupported(info, "auto_pad '" + auto_pad + "' is not supported");
  }
  return pads;
}

// --------------------------------------------------------------------------
// GEMM: C[M,N] = alpha * A[M,K] * B[K,N] (+ C if accumulate).
//
// A and B are addressed through (row stride, column stride), so transposed
// operands need no copy. Two loop shapes cover the common layouts:
//  - B rows contiguous (b_cs == 1): i-k-j order, four rows of C at a time over
//    a block of columns, so each loaded row of B feeds four rows of C and the
//    inner j loop vectorises;
//  - otherwise (e.g. B transposed, or N == 1): one dot product per element.
// Each block of kBlockK terms is summed in a tile of its own, then added to
// C: a single running sum over K = 2304 (a 3x3 conv of 256 channels) erred
// ~9 times more than PyTorch's, and deep nets amplify that error.
// --------------------------------------------------------------------------
namespace {

constexpr int64_t kBlockN = 256;
constexpr int64_t kBlockK = 128;

void axpy_rows4(int64_t n, const float* __restrict b, float a0, float a1, float a2, float a3,
                float* __restrict c0, float* __restrict c1, float* __restrict c2,
                float* __restrict c3) {
  for (int64_t j = 0; j < n; ++j) {
    const float bj = b[j];
    c0[j] += a0 * bj;
    c1[j] += a1 * bj;
    c2[j] += a2 * bj;
    c3[j] += a3 * bj;
  }
}

void axpy_row(int64_t n, const float* __restrict b, float a, float* __restrict c) {
  for (int64_t j = 0; j < n; ++j) c[j] += a * b[j];
}

void add_row(int64_t n, const float* __restrict a, float* __restrict c) {
  for (int64_t j = 0; j < n; ++j) c[j] += a[j];
}

float dot(int64_t k, const float* a, int64_t a_stride, const float* b, int64_t b_stride) {
  // Eight independent partial sums: the compiler may keep them in vector
  // registers without reassociating a single running sum.
  float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  if (a_stride == 1 && b_stride == 1) {
    for (; i + 8 <= k; i += 8)
      for (int l = 0; l < 8; ++l) s[l] += a[i + l] * b[i + l];
  }
  for (; i < k; ++i) s[0] += a[i * a_stride] * b[i * b_stride];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

}  // namespace

namespace {

// Rows [i0, i1) and columns [j0, j0 + nb) of C, in the sequential order: the
// same operations on every element whichever thread runs which part (rows
// come in the groups of four the sequential loop forms from row 0, so a part
// never splits a group), hence results that do not depend on the threads.
void gemm_block(int64_t i0, int64_t i1, int64_t j0, int64_t nb, int64_t K, float alpha,
                const float* A, int64_t a_rs, int64_t a_cs, const float* B, int64_t b_rs, float* C,
                int64_t ldc) {
  for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
    const int64_t k1 = std::min(K, k0 + kBlockK);
    float tile[4 * kBlockN];
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) {
      std::fill(tile, tile + 4 * nb, 0.0f);
      for (int64_t k = k0; k < k1; ++k) {
        const float* a = A + i * a_rs + k * a_cs;
        axpy_rows4(nb, B + k * b_rs + j0, alpha * a[0], alpha * a[a_rs], alpha * a[2 * a_rs],
                   alpha * a[3 * a_rs], tile, tile + nb, tile + 2 * nb, tile + 3 * nb);
      }
      for (int64_t r = 0; r < 4; ++r) add_row(nb, tile + r * nb, C + (i + r) * ldc + j0);
    }
    for (; i < i1; ++i) {
      std::fill(tile, tile + nb, 0.0f);
      for (int64_t k = k0; k < k1; ++k)
        axpy_row(nb, B + k * b_rs + j0, alpha * A[i * a_rs + k * a_cs], tile);
      add_row(nb, tile, C + i * ldc + j0);
    }
  }
}

// Below this many multiply-adds a GEMM runs on the calling thread: waking a
// worker costs more than it saves.
constexpr int64_t kParallelMacs = int64_t{1} << 16;

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
          const float* B, int64_t b_rs, int64_t b_cs, float* C, int64_t ldc, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  const bool small = M * N * std::max<int64_t>(K, 1) < kParallelMacs;

  if (b_cs == 1 && N > 1) {
    // Parts: (group of four rows) x (block of kBlockN columns).
    const int64_t row_groups = (M + 3) / 4, col_blocks = (N + kBlockN - 1) / kBlockN;
    const size_t parts = static_cast<size_t>(row_groups * col_blocks);
    sdk::parallel_for(parts, small ? parts : 1, [&](size_t begin, size_t end) {
      for (size_t part = begin; part < end; ++part) {
        const int64_t rg = static_cast<int64_t>(part) / col_blocks;
        const int64_t j0 = (static_cast<int64_t>(part) % col_blocks) * kBlockN;
        const int64_t nb = std::min(kBlockN, N - j0);
        const int64_t i0 = rg * 4, i1 = std::min(M, i0 + 4);
        if (!accumulate)
          for (int64_t i = i0; i < i1; ++i)
            std::fill(C + i * ldc + j0, C + i * ldc + j0 + nb, 0.0f);
        if (K > 0) gemm_block(i0, i1, j0, nb, K, alpha, A, a_rs, a_cs, B, b_rs, C, ldc);
      }
    });
    return;
  }

  sdk::parallel_for(
      static_cast<size_t>(M), small ? static_cast<size_t>(M) : 1, [&](size_t begin, size_t end) {
        for (int64_t i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end); ++i) {
          float* c = C + i * ldc;
          if (!accumulate) std::fill(c, c + N, 0.0f);
          if (K <= 0) continue;
          for (int64_t j = 0; j < N; ++j)
            c[j] += alpha * dot(K, A + i * a_rs, a_cs, B + j * b_cs, b_rs);
        }
      });
}

}  // namespace nn

void register_nn_kernels(KernelRegistry& registry) {
  nn::register_conv(registry);
  nn::register_matmul(registry);
  nn::register_pool(registry);
  nn::register_norm(registry);
  nn::register_resize(registry);
}

}  // namespace backplane::cpuref
