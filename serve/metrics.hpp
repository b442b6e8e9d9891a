// metrics.hpp — the server's Prometheus metrics (prometheus-cpp), served as
// text on GET /metrics. Names are Triton Inference Server's where Triton has
// the metric, so dashboards built for Triton plot Backplane unchanged; every
// series is labelled {model, version}.
//
//   nv_inference_request_success        requests that returned outputs
//   nv_inference_request_failure        requests that returned an error
//   nv_inference_count                  inferences (a batch of n counts n)
//   nv_inference_exec_count             model executions (average batch
//                                       size = count / exec_count)
//   nv_inference_request_duration_us    from arrival to response, summed
//   nv_inference_queue_duration_us      waiting for a session, summed
//   nv_inference_compute_input_duration_us   copying inputs in, summed
//   nv_inference_compute_infer_duration_us   running the model, summed
//   nv_inference_compute_output_duration_us  copying outputs out, summed
//   nv_inference_pending_request_count  requests waiting or running now
//
// Thread-safety: for_model and text may be called from any thread; the
// counters are prometheus-cpp's, atomic.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

namespace backplane::serve {

struct ModelCounters {
  prometheus::Counter* success = nullptr;
  prometheus::Counter* failure = nullptr;
  prometheus::Counter* inferences = nullptr;
  prometheus::Counter* executions = nullptr;
  prometheus::Counter* request_us = nullptr;
  prometheus::Counter* queue_us = nullptr;
  prometheus::Counter* input_us = nullptr;
  prometheus::Counter* infer_us = nullptr;
  prometheus::Counter* output_us = nullptr;
  prometheus::Gauge* pending = nullptr;
};

class Metrics {
 public:
  Metrics();
  // The counters of one model version, made on first use and kept for the
  // server's life (a version unloaded and loaded again goes on counting).
  ModelCounters* for_model(const std::string& model, const std::string& version);
  // The exposition text. Requests naming a model the server does not have
  // are not counted: a label per name a client makes up would let clients
  // grow the metrics without bound.
  std::string text() const;

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& success_;
  prometheus::Family<prometheus::Counter>& failure_;
  prometheus::Family<prometheus::Counter>& inferences_;
  prometheus::Family<prometheus::Counter>& executions_;
  prometheus::Family<prometheus::Counter>& request_us_;
  prometheus::Family<prometheus::Counter>& queue_us_;
  prometheus::Family<prometheus::Counter>& input_us_;
  prometheus::Family<prometheus::Counter>& infer_us_;
  prometheus::Family<prometheus::Counter>& output_us_;
  prometheus::Family<prometheus::Gauge>& pending_;
  std::mutex mu_;
  std::map<std::pair<std::string, std::string>, ModelCounters> models_;
};

}  // namespace backplane::serve
