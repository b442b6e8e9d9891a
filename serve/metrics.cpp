#include "metrics.hpp"

#include <prometheus/text_serializer.h>

namespace backplane::serve {

namespace {
prometheus::Family<prometheus::Counter>& counter(prometheus::Registry& r, const char* name,
                                                 const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      success_(counter(*registry_, "nv_inference_request_success",
                       "Number of successful inference requests, all batch sizes")),
      failure_(counter(*registry_, "nv_inference_request_failure",
                       "Number of failed inference requests, all batch sizes")),
      inferences_(counter(*registry_, "nv_inference_count",
                          "Number of inferences performed (a batch of n counts n)")),
      executions_(counter(*registry_, "nv_inference_exec_count",
                          "Number of model executions performed")),
      request_us_(counter(*registry_, "nv_inference_request_duration_us",
                          "Cumulative inference request duration in microseconds")),
      queue_us_(counter(*registry_, "nv_inference_queue_duration_us",
                        "Cumulative inference queuing duration in microseconds")),
      input_us_(counter(*registry_, "nv_inference_compute_input_duration_us",
                        "Cumulative compute input duration in microseconds")),
      infer_us_(counter(*registry_, "nv_inference_compute_infer_duration_us",
                        "Cumulative compute inference duration in microseconds")),
      output_us_(counter(*registry_, "nv_inference_compute_output_duration_us",
                         "Cumulative inference compute output duration in microseconds")),
      pending_(prometheus::BuildGauge()
                   .Name("nv_inference_pending_request_count")
                   .Help("Instantaneous number of pending requests awaiting execution")
                   .Register(*registry_)) {}

ModelCounters* Metrics::for_model(const std::string& model, const std::string& version) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, added] = models_.try_emplace({model, version});
  ModelCounters& c = it->second;
  if (added) {
    const prometheus::Labels labels{{"model", model}, {"version", version}};
    c.success = &success_.Add(labels);
    c.failure = &failure_.Add(labels);
    c.inferences = &inferences_.Add(labels);
    c.executions = &executions_.Add(labels);
    c.request_us = &request_us_.Add(labels);
    c.queue_us = &queue_us_.Add(labels);
    c.input_us = &input_us_.Add(labels);
    c.infer_us = &infer_us_.Add(labels);
    c.output_us = &output_us_.Add(labels);
    c.pending = &pending_.Add(labels);
  }
  return &c;
}

std::string Metrics::text() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace backplane::serve
