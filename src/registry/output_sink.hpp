// output_sink.hpp — the object behind bp_output_sink_t (API 1.2): what the
// executor gives execute_shaped so a backend can allocate an output whose
// shape depends on data, once it knows that shape.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/status.hpp>
#include <backplane/tensor.hpp>

#include <functional>

struct bp_output_sink {
  // (output index, shape) -> memory for it, or an error. Set by the executor.
  std::function<backplane::Result<void*>(size_t, const backplane::Shape&)> allocate;
};
