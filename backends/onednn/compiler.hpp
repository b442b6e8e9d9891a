// compiler.hpp — how CpuOneDnn turns a graph view into oneDNN primitives.
//
// compile_partition() does all the work once: it matches node patterns
// (decomposed LayerNorm, erf-GELU, Conv+BatchNormalization), fuses bias,
// activations, scalar arithmetic and residual Adds into the preceding
// Conv/Gemm/MatMul as post-ops, creates every primitive, reorders weights into
// the layouts the primitives prefer, and plans one arena of intermediate
// tensors plus one scratchpad per execution context. execute() then only sets
// the input/output handles and runs the primitives.
#pragma once

#include "onednn/compiled.hpp"

#include <backplane/backend_sdk.hpp>

#include <memory>
#include <string>
#include <vector>

namespace backplane::onednn {

class WeightPool;  // plan_builder.hpp

class ViewInfo;

// For each node of `view`, why CpuOneDnn cannot run it, or "" if it can.
// Nodes that only run as part of a pattern (Erf inside an erf-GELU) are
// accepted when the whole pattern is in the view.
std::vector<std::string> unsupported_reasons(const sdk::Host& host, const bp_graph_view_t& view);

// Lowers `view` to oneDNN primitives. A node that fails to lower is reported
// BP_NODE_REJECTED on `report` (the host gives it to the next backend and
// compiles again) and an empty, never executed partition is returned.
// num_threads: 0 = the OpenMP default.
std::unique_ptr<sdk::CompiledPartition> compile_partition(const sdk::Host& host,
                                                          const bp_graph_view_t& view,
                                                          int num_threads, const Tuning& tuning,
                                                          sdk::NodeReport& report);

// The channel block of the blocked layout (nChw16c: 16) view g's
// convolutions are lowered in (Lowering::block_convolutions), or 0 for the
// layout oneDNN picks (channels-last): blocked where the model gains from it,
// decided from what it does with its channels (compiler.cpp), and where this
// CPU has blocked kernels (AVX2: 8, AVX-512: 16). Tuning::layout may force
// either.
int convolution_block(const ViewInfo& g, const Tuning& tuning);

// "oneDNN 2.6.3 (OpenMP)": the library this backend runs on.
std::string library_description();
// "2.6.3": its version.
std::string library_version();

// Rebuilds a partition from the payload Compiled::serialize wrote for the
// same view (payload.cpp). Throws BP_STATUS_VERSION_MISMATCH when the payload
// was made by another oneDNN build or for another CPU ISA (the runtime then
// compiles the view again), BP_STATUS_CORRUPT_DATA when it is malformed.
std::unique_ptr<sdk::CompiledPartition> deserialize_partition(
    const sdk::Host& host, const bp_graph_view_t& view, const void* payload, size_t size,
    int num_threads, const Tuning& tuning, size_t max_instances, std::shared_ptr<WeightPool> pool);

// The OpenMP thread count a partition runs on: `requested`, or (0) the
// process's default as it was before this backend changed any setting.
int threads_to_use(int requested);

}  // namespace backplane::onednn
