#include "http_frontend.hpp"

#include <fmt/format.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>
#include <thread>

#include <sys/socket.h>

namespace backplane::serve {

using json = nlohmann::json;

namespace {

constexpr const char* kHeaderLength = "Inference-Header-Content-Length";

void reply_error(httplib::Response& res, const Error& e) {
  res.status = http_status(e.code);
  res.set_content(json{{"error", e.message}}.dump(), "application/json");
}

void reply_json(httplib::Response& res, const json& body) {
  res.status = 200;
  res.set_content(body.dump(), "application/json");
}

// IEEE half and bfloat16 from and to float, rounding to nearest even: what
// a JSON client's numbers become in FP16 and BF16 inputs, and back.
uint16_t half_from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds past the largest half
  if (abs < 0x33000001u) return sign;             // rounds to zero
  int e = static_cast<int>(abs >> 23);
  uint32_t m = (abs & 0x7fffffu) | 0x800000u;
  int shift = 113 - e;  // > 0: a subnormal half
  if (shift > 0) {
    const uint32_t half = 1u << (shift + 12);
    uint32_t r = m >> (shift + 13);
    const uint32_t rest = m & ((half << 1) - 1);
    if (rest > half || (rest == half && (r & 1))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = ((static_cast<uint32_t>(e - 112)) << 10) | ((m >> 13) & 0x3ffu);
  const uint32_t rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1))) ++r;
  return static_cast<uint16_t>(sign | r);
}

float float_from_half(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
  if (e == 0x1f) {
    x = sign | 0x7f800000u | (m << 13);
  } else if (e == 0) {
    if (m == 0) {
      x = sign;
    } else {  // subnormal: normalise
      int k = -1;
      do {
        ++k;
        m <<= 1;
      } while (!(m & 0x400u));
      x = sign | (static_cast<uint32_t>(112 - k) << 23) | ((m & 0x3ffu) << 13);
    }
  } else {
    x = sign | ((e + 112) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t bf16_from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float float_from_bf16(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Appends the numbers of `data` (flat or nested row-major arrays) as `dtype`
// to `out`; false with `why` on a value of the wrong kind or too many.
template <class T>
bool append_as(const json& v, std::vector<uint8_t>& out) {
  T t;
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return false;
    t = v.get<bool>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return false;
    t = static_cast<T>(v.get<double>());
  } else if constexpr (std::is_signed_v<T>) {
    if (!v.is_number_integer()) return false;
    const int64_t i = v.get<int64_t>();
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      return false;
    if (i < std::numeric_limits<T>::min() || i > std::numeric_limits<T>::max()) return false;
    t = static_cast<T>(i);
  } else {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return false;
    const uint64_t u = v.get<uint64_t>();
    if (u > std::numeric_limits<T>::max()) return false;
    t = static_cast<T>(u);
  }
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &t, sizeof(T));
  return true;
}

bool append_value(const json& v, DType dtype, std::vector<uint8_t>& out) {
  switch (dtype) {
    case DType::kBool: return append_as<bool>(v, out);
    case DType::kUInt8: return append_as<uint8_t>(v, out);
    case DType::kUInt16: return append_as<uint16_t>(v, out);
    case DType::kUInt32: return append_as<uint32_t>(v, out);
    case DType::kUInt64: return append_as<uint64_t>(v, out);
    case DType::kInt8: return append_as<int8_t>(v, out);
    case DType::kInt16: return append_as<int16_t>(v, out);
    case DType::kInt32: return append_as<int32_t>(v, out);
    case DType::kInt64: return append_as<int64_t>(v, out);
    case DType::kFloat32: return append_as<float>(v, out);
    case DType::kFloat64: return append_as<double>(v, out);
    case DType::kFloat16:
    case DType::kBFloat16: {
      if (!v.is_number()) return false;
      const float f = static_cast<float>(v.get<double>());
      const uint16_t h = dtype == DType::kFloat16 ? half_from_float(f) : bf16_from_float(f);
      out.push_back(static_cast<uint8_t>(h & 0xff));
      out.push_back(static_cast<uint8_t>(h >> 8));
      return true;
    }
    default: return false;
  }
}

bool flatten(const json& v, DType dtype, std::vector<uint8_t>& out, size_t max_bytes) {
  if (v.is_array()) {
    for (const json& e : v)
      if (!flatten(e, dtype, out, max_bytes)) return false;
    return true;
  }
  if (out.size() >= max_bytes) return false;
  return append_value(v, dtype, out);
}

template <class T>
void put(json& arr, const void* p, size_t n) {
  const T* t = static_cast<const T*>(p);
  for (size_t i = 0; i < n; ++i) arr.push_back(t[i]);
}

json data_json(const Tensor& t) {
  json arr = json::array();
  const size_t n = static_cast<size_t>(t.numel());
  const void* p = t.data();
  switch (t.dtype()) {
    case DType::kBool: put<bool>(arr, p, n); break;
    case DType::kUInt8: put<uint8_t>(arr, p, n); break;
    case DType::kUInt16: put<uint16_t>(arr, p, n); break;
    case DType::kUInt32: put<uint32_t>(arr, p, n); break;
    case DType::kUInt64: put<uint64_t>(arr, p, n); break;
    case DType::kInt8: put<int8_t>(arr, p, n); break;
    case DType::kInt16: put<int16_t>(arr, p, n); break;
    case DType::kInt32: put<int32_t>(arr, p, n); break;
    case DType::kInt64: put<int64_t>(arr, p, n); break;
    case DType::kFloat32: put<float>(arr, p, n); break;
    case DType::kFloat64: put<double>(arr, p, n); break;
    case DType::kFloat16:
    case DType::kBFloat16: {
      const uint16_t* h = static_cast<const uint16_t*>(p);
      for (size_t i = 0; i < n; ++i)
        arr.push_back(t.dtype() == DType::kFloat16 ? float_from_half(h[i])
                                                   : float_from_bf16(h[i]));
      break;
    }
    default: break;
  }
  return arr;
}

json metadata_json(const ModelMetadata& m) {
  auto tensors = [](const std::vector<TensorMetadata>& ts) {
    json a = json::array();
    for (const TensorMetadata& t : ts)
      a.push_back({{"name", t.name}, {"datatype", t.datatype}, {"shape", t.shape}});
    return a;
  };
  return {{"name", m.name},
          {"versions", m.versions},
          {"platform", m.platform},
          {"inputs", tensors(m.inputs)},
          {"outputs", tensors(m.outputs)}};
}

// What the request's JSON says about one parameter, if it is an integer.
std::optional<int64_t> int_parameter(const json& obj, const char* name) {
  if (!obj.is_object()) return std::nullopt;
  auto p = obj.find("parameters");
  if (p == obj.end() || !p->is_object()) return std::nullopt;
  auto v = p->find(name);
  if (v == p->end() || !v->is_number_integer()) return std::nullopt;
  return v->get<int64_t>();
}

bool bool_parameter(const json& obj, const char* name) {
  if (!obj.is_object()) return false;
  auto p = obj.find("parameters");
  if (p == obj.end() || !p->is_object()) return false;
  auto v = p->find(name);
  return v != p->end() && v->is_boolean() && v->get<bool>();
}

// Parses an infer request's body (JSON, or JSON followed by binary tensor
// data) into `request`. The inputs' bytes view `body`, which the caller
// keeps alive (request.keep_alive).
Error parse_infer(const std::string& body, const httplib::Request& req, size_t max_json_bytes,
                  InferRequest& request) {
  size_t json_len = body.size();
  if (req.has_header(kHeaderLength)) {
    const std::string v = req.get_header_value(kHeaderLength);
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno != 0 || n > body.size())
      return error(Code::kInvalidArgument,
                   fmt::format("{}: '{}' is not a length within the body's {} bytes",
                               kHeaderLength, v, body.size()));
    json_len = static_cast<size_t>(n);
  }
  if (json_len > max_json_bytes)
    return error(Code::kTooLarge,
                 fmt::format("the request's JSON is {} bytes, over the limit of {}; send large "
                             "tensors as binary data ({} header) or over gRPC",
                             json_len, max_json_bytes, kHeaderLength));
  json j = json::parse(std::string_view(body).substr(0, json_len), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return error(Code::kInvalidArgument, "the request body is not a JSON object");
  if (auto id = j.find("id"); id != j.end()) {
    if (!id->is_string()) return error(Code::kInvalidArgument, "\"id\" must be a string");
    request.id = id->get<std::string>();
  }
  if (auto p = j.find("parameters"); p != j.end() && p->is_object()) {
    if (auto t = p->find("timeout"); t != p->end()) {
      if (!t->is_number_integer())
        return error(Code::kInvalidArgument,
                     "parameter \"timeout\" must be an integer (microseconds)");
      const int64_t us = t->is_number_unsigned() && t->get<uint64_t>() > INT64_MAX
                             ? INT64_MAX
                             : t->get<int64_t>();
      if (Error e = apply_timeout(us, request); !e.ok()) return e;
    }
  }
  request.all_binary = bool_parameter(j, "binary_data_output");
  auto inputs = j.find("inputs");
  if (inputs == j.end() || !inputs->is_array())
    return error(Code::kInvalidArgument, "\"inputs\" must be an array");
  size_t binary_at = json_len;
  for (json& in : *inputs) {
    if (!in.is_object()) return error(Code::kInvalidArgument, "an input is not an object");
    InputTensor t;
    auto name = in.find("name");
    auto datatype = in.find("datatype");
    auto shape = in.find("shape");
    if (name == in.end() || !name->is_string())
      return error(Code::kInvalidArgument, "an input has no \"name\" string");
    t.name = name->get<std::string>();
    const std::string where = "input '" + t.name + "'";
    if (datatype == in.end() || !datatype->is_string())
      return error(Code::kInvalidArgument, where + " has no \"datatype\" string");
    t.datatype = datatype->get<std::string>();
    if (shape == in.end() || !shape->is_array())
      return error(Code::kInvalidArgument, where + " has no \"shape\" array");
    for (const json& d : *shape) {
      if (!d.is_number_integer())
        return error(Code::kInvalidArgument, where + ": a dim of \"shape\" is not an integer");
      if (d.is_number_unsigned() && d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
        return error(Code::kInvalidArgument, where + ": a dim of \"shape\" is too large");
      t.shape.push_back(d.get<int64_t>());
    }
    if (auto size = int_parameter(in, "binary_data_size"); size) {
      if (*size < 0 || static_cast<uint64_t>(*size) > body.size() - binary_at)
        return error(Code::kInvalidArgument,
                     fmt::format("{}: binary_data_size {} is more than the {} bytes left in "
                                 "the body",
                                 where, *size, body.size() - binary_at));
      t.data = body.data() + binary_at;
      t.size = static_cast<size_t>(*size);
      binary_at += t.size;
    } else {
      auto data = in.find("data");
      if (data == in.end())
        return error(Code::kInvalidArgument,
                     where + " has neither \"data\" nor binary_data_size");
      // The values are converted after the server has checked the shape
      // (and so knows how many bytes to expect).
      auto values = std::make_shared<json>(std::move(*data));
      t.fill = [values](InputTensor& self) -> Error {
        std::vector<uint8_t> bytes;
        bytes.reserve(self.expected_bytes);
        if (!flatten(*values, self.dtype, bytes, self.expected_bytes))
          return error(Code::kInvalidArgument,
                       fmt::format("input '{}': \"data\" holds a value that is not {}, or more "
                                   "values than shape {} has",
                                   self.name, self.datatype, shape_to_string(self.shape)));
        if (bytes.size() != self.expected_bytes)
          return error(Code::kInvalidArgument,
                       fmt::format("input '{}': \"data\" holds {} values, shape {} has {}",
                                   self.name, bytes.size() / dtype_size(self.dtype),
                                   shape_to_string(self.shape), shape_numel(self.shape)));
        self.set_owned(std::move(bytes));
        return ok();
      };
    }
    request.inputs.push_back(std::move(t));
  }
  if (binary_at != body.size())
    return error(Code::kInvalidArgument,
                 fmt::format("the body has {} bytes after the JSON, the inputs' "
                             "binary_data_size add up to {}",
                             body.size() - json_len, binary_at - json_len));
  if (auto outputs = j.find("outputs"); outputs != j.end()) {
    if (!outputs->is_array()) return error(Code::kInvalidArgument, "\"outputs\" must be an array");
    for (const json& o : *outputs) {
      auto name = o.is_object() ? o.find("name") : o.end();
      if (!o.is_object() || name == o.end() || !name->is_string())
        return error(Code::kInvalidArgument, "a requested output has no \"name\" string");
      request.outputs.push_back({name->get<std::string>(), bool_parameter(o, "binary_data")});
    }
  }
  return ok();
}

void reply_infer(httplib::Response& res, const InferResponse& r) {
  json j = {{"model_name", r.model}, {"model_version", r.version}};
  if (!r.id.empty()) j["id"] = r.id;
  json outs = json::array();
  std::string binary;
  for (const OutputTensor& o : r.outputs) {
    json out = {{"name", o.name}, {"datatype", o.datatype}, {"shape", o.shape}};
    if (o.binary) {
      out["parameters"] = {{"binary_data_size", o.tensor.size_bytes()}};
      binary.append(static_cast<const char*>(o.tensor.data()), o.tensor.size_bytes());
    } else {
      out["data"] = data_json(o.tensor);
    }
    outs.push_back(std::move(out));
  }
  j["outputs"] = std::move(outs);
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  res.status = 200;
  if (binary.empty() && std::none_of(r.outputs.begin(), r.outputs.end(),
                                     [](const OutputTensor& o) { return o.binary; })) {
    res.set_content(std::move(text), "application/json");
    return;
  }
  res.set_header(kHeaderLength, std::to_string(text.size()));
  text += binary;
  res.set_content(std::move(text), "application/octet-stream");
}

class HttpServer final : public HttpFrontend {
 public:
  HttpServer(InferenceServer& server, int threads) : server_(server) {
    // The library gives each open connection a thread until it closes: a
    // kept-alive connection closes after 100 requests or 5 idle seconds, so
    // connections beyond `threads` wait their turn rather than starve.
    svr_.new_task_queue = [threads] {
      return new httplib::ThreadPool(static_cast<size_t>(std::max(threads, 1)));
    };
    svr_.set_keep_alive_max_count(100);
    svr_.set_keep_alive_timeout(5);
    svr_.set_payload_max_length(server_.options().max_request_bytes);
    svr_.set_read_timeout(30, 0);
    // The library writes a response's headers and its body separately: with
    // Nagle's algorithm the body would wait for the client's delayed ACK
    // (40 ms on Linux) on every request of a kept-alive connection after the
    // first, such as a load balancer's.
    svr_.set_tcp_nodelay(true);
    // The library's own socket options take SO_REUSEPORT, with which a
    // second server on the same port would start and silently share it;
    // SO_REUSEADDR only lets a restarted server bind at once.
    svr_.set_socket_options([this](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      listen_fd_ = sock;
    });
    routes();
  }
  ~HttpServer() override { shutdown(); }

  Result<int> start(const std::string& host, int port) {
    if (port == 0) {
      port_ = svr_.bind_to_any_port(host);
      if (port_ < 0) return Status(StatusCode::kIoError, "HTTP: cannot listen on " + host);
    } else {
      if (!svr_.bind_to_port(host, port))
        return Status(StatusCode::kIoError,
                      fmt::format("HTTP: cannot listen on {}:{} (in use?)", host, port));
      port_ = port;
    }
    // The library listens with a backlog of 5: a burst of new connections
    // (a load balancer opening its pool) would overflow it and be reset.
    // listen() again on the listening socket only sets the backlog.
    if (listen_fd_ >= 0) ::listen(listen_fd_, SOMAXCONN);
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
    return port_;
  }

  int port() const override { return port_; }
  void shutdown() override {
    svr_.stop();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void routes() {
    svr_.Get("/v2/health/live", [this](const httplib::Request&, httplib::Response& res) {
      res.status = server_.live() ? 200 : 503;
    });
    svr_.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      res.status = server_.ready() ? 200 : 503;
    });
    svr_.Get("/v2", [](const httplib::Request&, httplib::Response& res) {
      reply_json(res, {{"name", "backplane"},
                       {"version", InferenceServer::version_string()},
                       {"extensions", InferenceServer::extensions()}});
    });
    const std::string model = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";
    svr_.Get(model, [this](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<ServedModel> m;
      if (Error e = server_.find(req.matches[1], req.matches[2], &m); !e.ok())
        return reply_error(res, e);
      reply_json(res, metadata_json(m->metadata()));
    });
    svr_.Get(model + "/ready", [this](const httplib::Request& req, httplib::Response& res) {
      std::shared_ptr<ServedModel> m;
      if (Error e = server_.find(req.matches[1], req.matches[2], &m); !e.ok())
        return reply_error(res, e);
      res.status = 200;
    });
    // The body is read here, not by the library: the library would parse a
    // body sent as a form (curl -d's default Content-Type) and refuse one
    // over 8 KB; the protocol's body is JSON whatever the client calls it.
    svr_.Post(model + "/infer", [this](const httplib::Request& req, httplib::Response& res,
                                       const httplib::ContentReader& read) {
      auto body = std::make_shared<std::string>();
      if (req.has_header("Content-Length"))
        body->reserve(std::min<size_t>(req.get_header_value<uint64_t>("Content-Length"),
                                       server_.options().max_request_bytes));
      const bool whole = read([&](const char* data, size_t n) {
        body->append(data, n);
        return true;
      });
      if (!whole) {
        // The library says 413 for a body over the limit; anything else is
        // a body that did not arrive as announced.
        return reply_error(res, res.status == 413
                                    ? error(Code::kTooLarge, "the request body is over the "
                                                             "server's limit (--max-request-bytes)")
                                    : error(Code::kInvalidArgument,
                                            "the request body did not arrive as announced"));
      }
      InferRequest request;
      request.model = req.matches[1];
      request.version = req.matches[2];
      request.keep_alive = body;
      if (Error e = parse_infer(*body, req, kMaxJsonBytes, request); !e.ok()) {
        count_rejected(request.model, request.version);
        return reply_error(res, e);
      }
      InferResponse response;
      if (Error e = server_.infer(request, &response); !e.ok()) return reply_error(res, e);
      reply_infer(res, response);
    });
    svr_.Post("/v2/repository/index", [this](const httplib::Request&, httplib::Response& res) {
      json a = json::array();
      for (const RepositoryEntry& e : server_.repository_index()) {
        json entry = {{"name", e.name}, {"state", e.state}};
        if (!e.version.empty()) entry["version"] = e.version;
        if (!e.reason.empty()) entry["reason"] = e.reason;
        a.push_back(std::move(entry));
      }
      reply_json(res, a);
    });
    const std::string repository_model = R"(/v2/repository/models/([^/]+)/)";
    svr_.Post(repository_model + "load", [this](const httplib::Request& req,
                                                httplib::Response& res) {
      if (Error e = server_.load_model(req.matches[1]); !e.ok()) return reply_error(res, e);
      res.status = 200;
    });
    svr_.Post(repository_model + "unload", [this](const httplib::Request& req,
                                                  httplib::Response& res) {
      if (Error e = server_.unload_model(req.matches[1]); !e.ok()) return reply_error(res, e);
      res.status = 200;
    });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(server_.metrics().text(), "text/plain; version=0.0.4");
    });
    svr_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413) {
        res.set_content(json{{"error", "the request body is over the server's limit "
                                       "(--max-request-bytes)"}}.dump(),
                        "application/json");
      } else if (res.status == 404) {
        res.set_content(json{{"error", "no route " + req.method + " " + req.path}}.dump(),
                        "application/json");
      }
    });
    svr_.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          reply_error(res, error(Code::kInternal, what));
        });
  }

  // A request that fails to parse still counts against its model, if the
  // server has that model.
  void count_rejected(const std::string& name, const std::string& version) {
    std::shared_ptr<ServedModel> m;
    if (server_.find(name, version, &m).ok()) m->counters().failure->Increment();
  }

  // JSON text is parsed into a tree about eight times its size: larger
  // tensors travel as binary data.
  static constexpr size_t kMaxJsonBytes = size_t{16} << 20;

  InferenceServer& server_;
  httplib::Server svr_;
  std::thread thread_;
  int port_ = 0;
  socket_t listen_fd_ = -1;
};

}  // namespace

Result<std::unique_ptr<HttpFrontend>> start_http(InferenceServer& server, const std::string& host,
                                                 int port, int threads) {
  auto http = std::make_unique<HttpServer>(server, threads);
  BP_ASSIGN_OR_RETURN(int bound, http->start(host, port));
  (void)bound;
  return std::unique_ptr<HttpFrontend>(std::move(http));
}

}  // namespace backplane::serve
