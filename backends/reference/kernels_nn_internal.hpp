// kernels_nn_internal.hpp — helpers of CpuRef's "nn" operator family, defined in
// kernels_nn.cpp and used by kernels_nn_*.cpp, plus the per-family registration
// functions that register_nn_kernels() calls. Private to the reference backend.
#pragma once

#include "kernel.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace backplane::cpuref::nn {

// Registration, one per kernels_nn_*.cpp file.
void register_conv(KernelRegistry& registry);
void register_matmul(KernelRegistry& registry);
void register_pool(KernelRegistry& registry);
void register_norm(KernelRegistry& registry);
void register_resize(KernelRegistry& registry);

// "[1,3,224,224]", for messages.
std::string dims_str(const Dims& d);
// Floor division for possibly negative numerators (b > 0).
int64_t floor_div(int64_t a, int64_t b);

// Throw sdk::Error (BP_STATUS_UNSUPPORTED / BP_STATUS_INVALID_ARGUMENT) with a
// message naming the node.
[[noreturn]] void fail_unsupported(const NodeInfo& info, const std::string& why);
[[noreturn]] void fail_invalid(const NodeInfo& info, const std::string& why);

// True if output i is present (has a dtype and is wired to a value).
bool has_output(const NodeInfo& info, size_t i);
// Rejects the node unless the listed inputs/outputs (those present) are float32.
void require_float32(const NodeInfo& info, const std::vector<size_t>& inputs,
                     const std::vector<size_t>& outputs);
// Pads (begin..., end...) of a sliding window over `in` spatial dims that
// produces `out`, from the node's auto_pad / pads attributes.
std::vector<int64_t> resolve_window_pads(const NodeInfo& info, const Dims& in, const Dims& kernel,
                                         const Dims& strides, const Dims& dilations,
                                         const Dims& out);

// C[M,N] = alpha * A[M,K] * B[K,N] (+ C if accumulate); A and B addressed
// through (row stride, column stride).
void gemm(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t a_rs, int64_t a_cs,
          const float* B, int64_t b_rs, int64_t b_cs, float* C, int64_t ldc, bool accumulate);

}  // namespace backplane::cpuref::nn
