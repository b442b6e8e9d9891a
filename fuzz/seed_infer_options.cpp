// seed_infer_options.cpp — the pipeline's infer_options for make_seed_artifact.
//
// The runtime's version (src/pipeline/constant_folding.cpp) folds with CpuRef
// through the backend registry, which would pull the registry, the dynamic
// loader and CpuRef into the fuzz build. The seed tool only needs valid
// artifacts to start from: it folds Shape, Size and Constant (what ir folds
// without an evaluator), and the rest of each seed's graph stays as nodes.
#include "pipeline/constant_folding.hpp"

namespace backplane {

ir::InferOptions infer_options(const ir::OpRegistry* registry) {
  ir::InferOptions options;
  options.registry = registry;
  return options;
}

}  // namespace backplane
