// grpc_frontend.hpp — the Open Inference Protocol over gRPC: the service
// inference.GRPCInferenceService of KServe's grpc_predict_v2.proto, field
// numbers as published (serve/proto/grpc_predict_v2.proto), so a client
// generated from the published proto drives it unchanged.
#pragma once

#include "server.hpp"

#include <memory>
#include <string>

namespace backplane::serve {

class GrpcFrontend {
 public:
  virtual ~GrpcFrontend() = default;
  // The port it listens on (the one chosen when asked for port 0).
  virtual int port() const = 0;
  // Stops accepting calls and waits for those in flight.
  virtual void shutdown() = 0;
};

// Starts serving `server` on `address` ("0.0.0.0:8001"; port 0 = any free
// port). `max_message_bytes` bounds a request message (RESOURCE_EXHAUSTED
// beyond it). The server must outlive the front end.
Result<std::unique_ptr<GrpcFrontend>> start_grpc(InferenceServer& server,
                                                 const std::string& address,
                                                 size_t max_message_bytes);

}  // namespace backplane::serve
