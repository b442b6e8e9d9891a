// grpc_frontend.cpp — inference.GRPCInferenceService on gRPC's synchronous
// server: each call runs on one of gRPC's threads, translated into the
// core's InferRequest and back. Every rule about what a request may be is the
// core's (InferenceServer::infer, ServedModel::check), so REST and gRPC refuse
// the same requests with the same messages; only what is gRPC's own (raw
// versus typed contents, the deadline) is checked here.
#include "grpc_frontend.hpp"

#include "grpc_predict_v2.grpc.pb.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <climits>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace backplane::serve {
namespace {

namespace pb = ::inference;

// Raw contents are little-endian on the wire and are handed to the runtime
// as they are.
static_assert(std::endian::native == std::endian::little,
              "the gRPC front end passes little-endian tensor bytes through unswapped");

grpc::StatusCode grpc_code(Code code) {
  switch (code) {
    case Code::kOk:
      return grpc::StatusCode::OK;
    case Code::kInvalidArgument:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case Code::kNotFound:
      return grpc::StatusCode::NOT_FOUND;
    case Code::kUnavailable:
      return grpc::StatusCode::UNAVAILABLE;
    case Code::kResourceExhausted:
    case Code::kTooLarge:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case Code::kDeadlineExceeded:
      return grpc::StatusCode::DEADLINE_EXCEEDED;
    case Code::kCancelled:
      return grpc::StatusCode::CANCELLED;
    case Code::kInternal:
      return grpc::StatusCode::INTERNAL;
  }
  return grpc::StatusCode::UNKNOWN;
}

grpc::Status to_grpc(const Error& e) {
  if (e.ok()) return grpc::Status::OK;
  return grpc::Status(grpc_code(e.code), e.message);
}

grpc::Status invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

size_t element_count(const pb::InferTensorContents& c) {
  return static_cast<size_t>(c.bool_contents_size()) + c.int_contents_size() +
         c.int64_contents_size() + c.uint_contents_size() + c.uint64_contents_size() +
         c.fp32_contents_size() + c.fp64_contents_size() + c.bytes_contents_size();
}

// Writes `values`, the one field of `contents` the input's datatype uses, as
// the little-endian bytes of T into the input, refusing elements anywhere
// else, a count other than the shape's, and a value T cannot hold (rather
// than wrapping it silently).
template <class T, class Field>
Error convert(const Field& values, const char* field, const pb::InferTensorContents& contents,
              InputTensor& t) {
  const auto fail = [&t](const std::string& why) {
    return error(Code::kInvalidArgument, "input '" + t.name + "': " + why);
  };
  const size_t have = static_cast<size_t>(values.size());
  if (element_count(contents) != have) {
    return fail(t.datatype + " elements go in contents." + field + ", and only there");
  }
  const size_t want = t.expected_bytes / sizeof(T);
  if (have != want) {
    return fail(std::string(field) + " has " + std::to_string(have) +
                " elements, the shape needs " + std::to_string(want));
  }
  std::vector<uint8_t> bytes(t.expected_bytes);
  for (size_t i = 0; i < have; ++i) {
    const auto v = values.Get(static_cast<int>(i));
    T x;
    if constexpr (std::is_same_v<decltype(v), const bool>) {
      x = v ? 1 : 0;
    } else if constexpr (std::is_integral_v<T>) {
      if (!std::in_range<T>(v)) {
        return fail(std::string(field) + "[" + std::to_string(i) + "] = " + std::to_string(v) +
                    " is out of range for " + t.datatype);
      }
      x = static_cast<T>(v);
    } else {
      x = v;
    }
    std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T));
  }
  t.set_owned(std::move(bytes));
  return ok();
}

// Fills an input from its typed contents.
Error fill_typed(const pb::InferTensorContents& c, InputTensor& t) {
  switch (t.dtype) {
    case DType::kBool:
      return convert<uint8_t>(c.bool_contents(), "bool_contents", c, t);
    case DType::kInt8:
      return convert<int8_t>(c.int_contents(), "int_contents", c, t);
    case DType::kInt16:
      return convert<int16_t>(c.int_contents(), "int_contents", c, t);
    case DType::kInt32:
      return convert<int32_t>(c.int_contents(), "int_contents", c, t);
    case DType::kInt64:
      return convert<int64_t>(c.int64_contents(), "int64_contents", c, t);
    case DType::kUInt8:
      return convert<uint8_t>(c.uint_contents(), "uint_contents", c, t);
    case DType::kUInt16:
      return convert<uint16_t>(c.uint_contents(), "uint_contents", c, t);
    case DType::kUInt32:
      return convert<uint32_t>(c.uint_contents(), "uint_contents", c, t);
    case DType::kUInt64:
      return convert<uint64_t>(c.uint64_contents(), "uint64_contents", c, t);
    case DType::kFloat32:
      return convert<float>(c.fp32_contents(), "fp32_contents", c, t);
    case DType::kFloat64:
      return convert<double>(c.fp64_contents(), "fp64_contents", c, t);
    default:
      return error(Code::kInvalidArgument,
                   "input '" + t.name + "': " + t.datatype +
                       " has no typed contents field; send it in raw_input_contents");
  }
}

// The earlier of the call's deadline and the request's "timeout" parameter
// (microseconds, as Triton's clients send it), on the steady clock the core
// measures with.
grpc::Status deadline_of(const grpc::ServerContext& context, const pb::ModelInferRequest& request,
                         std::optional<std::chrono::steady_clock::time_point>* out) {
  const auto now = std::chrono::steady_clock::now();
  const auto call = context.deadline();
  if (call != std::chrono::system_clock::time_point::max()) {
    const auto left = call - std::chrono::system_clock::now();
    // A deadline years away is as good as none, and would overflow here.
    if (left < std::chrono::hours(24 * 365)) {
      *out = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(left);
    }
  }
  const auto it = request.parameters().find("timeout");
  if (it == request.parameters().end()) return grpc::Status::OK;
  int64_t us = 0;
  switch (it->second.parameter_choice_case()) {
    case pb::InferParameter::kInt64Param:
      us = it->second.int64_param();
      break;
    case pb::InferParameter::kUint64Param:
      us = static_cast<int64_t>(
          std::min<uint64_t>(it->second.uint64_param(), std::numeric_limits<int64_t>::max()));
      break;
    default:
      return invalid("parameter \"timeout\" must be an integer (us)");
  }
  InferRequest with_timeout;
  with_timeout.deadline = *out;
  if (Error e = apply_timeout(us, with_timeout); !e.ok()) return invalid(e.message);
  *out = with_timeout.deadline;
  return grpc::Status::OK;
}

class Service final : public pb::GRPCInferenceService::Service {
 public:
  explicit Service(InferenceServer& server) : server_(server) {}

  grpc::Status ServerLive(grpc::ServerContext*, const pb::ServerLiveRequest*,
                          pb::ServerLiveResponse* response) override {
    response->set_live(server_.live());
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(grpc::ServerContext*, const pb::ServerReadyRequest*,
                           pb::ServerReadyResponse* response) override {
    response->set_ready(server_.ready());
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(grpc::ServerContext*, const pb::ModelReadyRequest* request,
                          pb::ModelReadyResponse* response) override {
    std::shared_ptr<ServedModel> model;
    response->set_ready(server_.find(request->name(), request->version(), &model).ok());
    return grpc::Status::OK;
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const pb::ServerMetadataRequest*,
                              pb::ServerMetadataResponse* response) override {
    response->set_name("backplane");
    response->set_version(InferenceServer::version_string());
    for (const std::string& extension : InferenceServer::extensions())
      response->add_extensions(extension);
    return grpc::Status::OK;
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const pb::ModelMetadataRequest* request,
                             pb::ModelMetadataResponse* response) override {
    std::shared_ptr<ServedModel> model;
    if (Error e = server_.find(request->name(), request->version(), &model); !e.ok()) {
      return to_grpc(e);
    }
    const serve::ModelMetadata& m = model->metadata();
    response->set_name(m.name);
    for (const std::string& v : m.versions) response->add_versions(v);
    response->set_platform(m.platform);
    auto add = [](const TensorMetadata& t, pb::ModelMetadataResponse::TensorMetadata* out) {
      out->set_name(t.name);
      out->set_datatype(t.datatype);
      for (int64_t d : t.shape) out->add_shape(d);
    };
    for (const TensorMetadata& t : m.inputs) add(t, response->add_inputs());
    for (const TensorMetadata& t : m.outputs) add(t, response->add_outputs());
    return grpc::Status::OK;
  }

  grpc::Status ModelInfer(grpc::ServerContext* context, const pb::ModelInferRequest* request,
                          pb::ModelInferResponse* response) override {
    InferRequest r;
    r.model = request->model_name();
    r.version = request->model_version();
    r.id = request->id();
    const int n = request->inputs_size();
    const bool raw = request->raw_input_contents_size() > 0;
    if (raw && request->raw_input_contents_size() != n) {
      return invalid("raw_input_contents has " +
                     std::to_string(request->raw_input_contents_size()) + " entries for " +
                     std::to_string(n) + " inputs; it needs one per input, in order");
    }
    r.inputs.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      const pb::ModelInferRequest::InferInputTensor& in = request->inputs(i);
      InputTensor& t = r.inputs.emplace_back();
      t.name = in.name();
      t.datatype = in.datatype();
      t.shape.assign(in.shape().begin(), in.shape().end());
      if (raw) {
        if (element_count(in.contents()) > 0) {
          return invalid("input '" + t.name +
                         "' has typed contents in a request with raw_input_contents; "
                         "send every input one way");
        }
        // Views into the request message, which gRPC keeps until this
        // handler returns, after the core is done with them.
        const std::string& bytes = request->raw_input_contents(i);
        t.data = bytes.data();
        t.size = bytes.size();
      } else {
        const pb::InferTensorContents* contents = &in.contents();
        t.fill = [contents](InputTensor& self) { return fill_typed(*contents, self); };
      }
    }
    r.outputs.reserve(static_cast<size_t>(request->outputs_size()));
    for (const auto& out : request->outputs()) r.outputs.push_back({out.name(), false});
    if (grpc::Status s = deadline_of(*context, *request, &r.deadline); !s.ok()) return s;
    r.cancelled = [context] { return context->IsCancelled(); };

    InferResponse result;
    if (Error e = server_.infer(r, &result); !e.ok()) return to_grpc(e);
    response->set_model_name(result.model);
    response->set_model_version(result.version);
    response->set_id(result.id);
    for (const OutputTensor& o : result.outputs) {
      pb::ModelInferResponse::InferOutputTensor* out = response->add_outputs();
      out->set_name(o.name);
      out->set_datatype(o.datatype);
      for (int64_t d : o.shape) out->add_shape(d);
      std::string* bytes = response->add_raw_output_contents();
      if (o.tensor.size_bytes() > 0) {
        bytes->assign(static_cast<const char*>(o.tensor.data()), o.tensor.size_bytes());
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status RepositoryIndex(grpc::ServerContext*, const pb::RepositoryIndexRequest* request,
                               pb::RepositoryIndexResponse* response) override {
    for (const RepositoryEntry& e : server_.repository_index()) {
      if (request->ready() && e.state != "READY") continue;
      pb::RepositoryIndexResponse::ModelIndex* m = response->add_models();
      m->set_name(e.name);
      m->set_version(e.version);
      m->set_state(e.state);
      m->set_reason(e.reason);
    }
    return grpc::Status::OK;
  }

  grpc::Status RepositoryModelLoad(grpc::ServerContext*,
                                   const pb::RepositoryModelLoadRequest* request,
                                   pb::RepositoryModelLoadResponse*) override {
    if (!request->parameters().empty())
      return invalid("RepositoryModelLoad takes no parameters (a config or file given with "
                     "the request is not supported; put it in the repository)");
    if (Error e = server_.load_model(request->model_name()); !e.ok()) return to_grpc(e);
    return grpc::Status::OK;
  }

  grpc::Status RepositoryModelUnload(grpc::ServerContext*,
                                     const pb::RepositoryModelUnloadRequest* request,
                                     pb::RepositoryModelUnloadResponse*) override {
    if (Error e = server_.unload_model(request->model_name()); !e.ok()) return to_grpc(e);
    return grpc::Status::OK;
  }

 private:
  InferenceServer& server_;
};

class Frontend final : public GrpcFrontend {
 public:
  Frontend(std::unique_ptr<Service> service, std::unique_ptr<grpc::Server> server, int port)
      : service_(std::move(service)), server_(std::move(server)), port_(port) {}
  ~Frontend() override { shutdown(); }

  int port() const override { return port_; }

  void shutdown() override {
    std::call_once(shutdown_once_, [this] {
      // Calls still running after the grace period are cancelled; the core
      // sees that through InferRequest::cancelled.
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
    });
  }

 private:
  std::unique_ptr<Service> service_;  // outlives server_, which calls into it
  std::unique_ptr<grpc::Server> server_;
  int port_;
  std::once_flag shutdown_once_;
};

}  // namespace

Result<std::unique_ptr<GrpcFrontend>> start_grpc(InferenceServer& server,
                                                 const std::string& address,
                                                 size_t max_message_bytes) {
  auto service = std::make_unique<Service>(server);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<size_t>(max_message_bytes, static_cast<size_t>(INT_MAX))));
  // gRPC sets SO_REUSEPORT by default on Linux, which would let a second
  // server bind the same port silently instead of failing to start.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  std::unique_ptr<grpc::Server> grpc_server = builder.BuildAndStart();
  if (!grpc_server || port == 0) {
    return Status(StatusCode::kIoError,
                  "gRPC: cannot listen on " + address + " (in use, or not an address)");
  }
  return std::unique_ptr<GrpcFrontend>(
      std::make_unique<Frontend>(std::move(service), std::move(grpc_server), port));
}

}  // namespace backplane::serve
