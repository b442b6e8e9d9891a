// server.hpp — the inference server's core: the models it serves, their
// sessions, and one request's way from checked input to output. The front
// ends (http_frontend, grpc_frontend) only translate their transport into
// InferRequest and back; every rule about what a request may be lives here.
//
// Thread-safety: every member of InferenceServer may be called from any
// thread at once.
#pragma once

#include "metrics.hpp"
#include "protocol.hpp"

#include <backplane/runtime.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace backplane::serve {

// How one model is served: `DIR/<model>/config.json` in a model repository
// (every key optional; unknown keys are an error naming the file):
//   {"backends": ["CpuOneDnn"], "overrides": {"node": "CpuRef"}, "threads": 2,
//    "instances": 2, "max_queue_size": 64,
//    "input_shapes": [{"input": [1, 3, 224, 224]}],
//    "dynamic_batching": {"max_batch_size": 8, "max_queue_delay_us": 500}}
struct BatchingConfig {
  bool enabled = false;
  // Rows (the leading dim) one execution takes at most; a request with more
  // rows runs alone.
  int64_t max_batch_size = 8;
  // How long the first request of a batch waits for others to join it.
  int64_t max_queue_delay_us = 500;
};
struct ModelConfig {
  std::vector<std::string> backends;               // preference order; empty = all
  std::map<std::string, std::string> overrides;    // node name -> backend
  int threads = 0;                                 // 0 = the server's --threads
  int instances = 1;                               // sessions that run at once
  size_t max_queue_size = 128;                     // requests waiting for a session
  std::vector<std::map<std::string, Shape>> input_shapes;  // specialised at load
  // Requests queue and run together, concatenated along their leading dim,
  // which every input and output must leave open. Each request gets its own
  // rows back; an output equals the model's on the batch it ran in.
  BatchingConfig batching;
};
// Parses a config.json; `where` names the file in errors.
Result<ModelConfig> parse_model_config(const std::string& text, const std::string& where);

struct ServerOptions {
  // DIR/<model>/<version>/model.onnx or model.bpk, versions positive integers.
  std::string model_repository;
  // Single models: {name, path}, served as version "1".
  std::vector<std::pair<std::string, std::string>> models;
  int threads = 0;                          // per backend, as RuntimeOptions::num_threads
  std::vector<std::string> backends;        // default preference for every model
  RuntimeOptions runtime;                   // everything else of the runtime
  size_t max_request_bytes = size_t{256} << 20;  // a larger body is refused (413)
};

// One version of one model, loaded: what requests run on. Held by shared_ptr
// so a request in flight keeps the version it started on while the
// repository swaps in another.
//
// Each instance is a thread with its own session, and only those threads
// run the model: requests queue, in order, and an instance takes the next
// one (or, with dynamic batching, the next batch). A backend that keeps
// per-thread state (an OpenMP team per calling thread, CpuOneDnn's) so
// keeps one per instance, however many connections the front ends serve.
class ServedModel {
 public:
  // Loads the model on the first instance's thread, makes every instance's
  // session on its own thread and runs the config's input_shapes there;
  // returns once all are ready, or the first error.
  static Result<std::shared_ptr<ServedModel>> start(std::string name, std::string version,
                                                    std::string path, ModelConfig config,
                                                    std::shared_ptr<Runtime> runtime,
                                                    ModelOptions options,
                                                    ModelCounters* counters,
                                                    uint64_t max_request_elements);
  // Answers what is still queued (with batching, runs it), then stops the
  // instances.
  ~ServedModel();
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  const std::string& name() const { return name_; }
  const std::string& version() const { return version_; }
  const std::string& path() const { return path_; }
  const ModelConfig& config() const { return config_; }
  const Model& model() const { return *model_; }
  const ModelMetadata& metadata() const { return metadata_; }
  ModelCounters& counters() { return *counters_; }

  // Checks every input's name, datatype, shape and byte size against the
  // model, and every requested output's name; fills each input's dtype and
  // expected_bytes. Nothing is allocated for a request that fails here.
  Error check(InferRequest& request) const;
  // Queues a checked request and waits for an instance to answer it: a
  // full queue is kResourceExhausted; a request whose deadline passes or
  // whose client goes away while queued leaves the queue.
  Error infer(const InferRequest& request, InferResponse* response);

 private:
  struct Pending;
  ServedModel(std::string name, std::string version, std::string path, ModelConfig config,
              std::shared_ptr<Runtime> runtime, ModelCounters* counters,
              uint64_t max_request_elements);
  Status prepare(size_t index, const ModelOptions& options);
  void instance(size_t index);
  std::vector<Pending*> next_batch(std::unique_lock<std::mutex>& lock);
  void run_batch(Session& session, std::vector<Pending*>& batch);
  Error run_one(Session& session, const InferRequest& request, InferResponse* response);

  const std::string name_, version_, path_;
  const ModelConfig config_;
  const std::shared_ptr<Runtime> runtime_;  // outlives model_ and the sessions
  std::shared_ptr<Model> model_;            // set before start() returns
  ModelMetadata metadata_;
  std::vector<std::unique_ptr<Session>> sessions_;  // one per instance, used by it alone
  ModelCounters* const counters_;
  const uint64_t max_request_elements_;  // half the largest body the server accepts

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<Pending*> queue_;
  bool stopping_ = false;
  std::vector<std::thread> instances_;
};

// A model's entry in the repository index.
struct RepositoryEntry {
  std::string name;
  std::string version;
  std::string state;   // "READY", "UNAVAILABLE"
  std::string reason;  // why it is not ready
};

class InferenceServer {
 public:
  // Loads every model (a repository's newest version of each, and the single
  // models). A model that fails to load is UNAVAILABLE with its reason (the
  // server still starts); create fails only when the options are wrong.
  static Result<std::unique_ptr<InferenceServer>> create(const ServerOptions& options);

  const ServerOptions& options() const { return options_; }
  bool live() const { return true; }
  // Every model the server was asked for is loaded, and it is not stopping.
  bool ready() const;
  // The server is stopping: ready() is false from now on, so probes and
  // load balancers send nothing new while requests in flight finish.
  void begin_shutdown() { stopping_ = true; }

  // The served model `name` at `version` ("" = newest ready), or
  // kNotFound / kUnavailable.
  Error find(const std::string& name, const std::string& version,
             std::shared_ptr<ServedModel>* out) const;
  std::vector<RepositoryEntry> repository_index() const;

  // find + check + infer, counted in the metrics.
  Error infer(InferRequest& request, InferResponse* response);

  // Repository control (Triton's model repository extension). load reads
  // the model again from where it came from (its repository directory,
  // newest version, and config.json, or its --model path) and swaps it in
  // once it is ready: requests in flight finish on the version they
  // started on. A model that fails to load keeps serving the version it
  // had, and the error says why. unload stops serving the model; requests
  // in flight finish.
  Error load_model(const std::string& name);
  Error unload_model(const std::string& name);

  Metrics& metrics() { return metrics_; }
  static const char* version_string();
  // The protocol extensions both front ends name in the server metadata.
  static std::vector<std::string> extensions();

 private:
  // Where a model comes from: its version, file and config, as the
  // repository (or --model) gives them now.
  struct Source {
    std::string version, path;
    ModelConfig config;
  };
  explicit InferenceServer(ServerOptions options);
  Result<std::shared_ptr<Runtime>> runtime_for(int threads);
  Result<Source> locate(const std::string& name) const;
  Result<std::shared_ptr<ServedModel>> load(const std::string& name, const Source& source);
  void set_entry(RepositoryEntry entry);

  ServerOptions options_;
  Metrics metrics_;
  std::mutex load_mu_;  // one load or unload at a time; never held by requests
  mutable std::mutex mu_;
  std::map<int, std::shared_ptr<Runtime>> runtimes_;  // by thread count
  // name -> version -> model; absent = not loaded (its entry says why).
  std::map<std::string, std::map<std::string, std::shared_ptr<ServedModel>>> models_;
  std::vector<RepositoryEntry> entries_;  // one per model name, sorted
  std::atomic<bool> stopping_{false};
};

}  // namespace backplane::serve
