// http_frontend.hpp — the Open Inference Protocol over HTTP/1.1 (REST, JSON
// bodies, and Triton's binary tensor data extension), on civetweb, plus
// GET /metrics (Prometheus text).
#pragma once

#include "server.hpp"

#include <memory>
#include <string>

namespace backplane::serve {

class HttpFrontend {
 public:
  virtual ~HttpFrontend() = default;
  virtual int port() const = 0;
  // Stops listening and waits for the requests in flight.
  virtual void shutdown() = 0;
};

// Starts serving `server` on `host`:`port` (port 0 = any free port) with
// `threads` worker threads, one per open connection. The server must
// outlive the front end.
Result<std::unique_ptr<HttpFrontend>> start_http(InferenceServer& server, const std::string& host,
                                                 int port, int threads);

}  // namespace backplane::serve
