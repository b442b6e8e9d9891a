#include "http_frontend.hpp"

#include <civetweb.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace backplane::serve {

using json = nlohmann::json;

namespace {

constexpr const char* kHeaderLength = "Inference-Header-Content-Length";

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
Error parse_infer(std::string_view body, const char* header_length, size_t max_json_bytes,
                  InferRequest& request) {
  size_t json_len = body.size();
  if (header_length != nullptr) {
    const std::string v = header_length;
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
  json j = json::parse(body.substr(0, json_len), nullptr, false);
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

// One response, written by `send`.
struct Reply {
  int status = 200;
  std::string content_type;
  std::string body;
  std::string header_length;  // Inference-Header-Content-Length, with binary data
};

Reply json_reply(const json& body) {
  return {200, "application/json", body.dump(), {}};
}

Reply error_reply(const Error& e) {
  return {http_status(e.code), "application/json", json{{"error", e.message}}.dump(), {}};
}

Reply infer_reply(const InferResponse& r) {
  json j = {{"model_name", r.model}, {"model_version", r.version}};
  if (!r.id.empty()) j["id"] = r.id;
  json outs = json::array();
  size_t binary_bytes = 0;
  bool binary = false;
  for (const OutputTensor& o : r.outputs) {
    json out = {{"name", o.name}, {"datatype", o.datatype}, {"shape", o.shape}};
    if (o.binary) {
      binary = true;
      out["parameters"] = {{"binary_data_size", o.tensor.size_bytes()}};
      binary_bytes += o.tensor.size_bytes();
    } else {
      out["data"] = data_json(o.tensor);
    }
    outs.push_back(std::move(out));
  }
  j["outputs"] = std::move(outs);
  Reply reply{200, "application/json", j.dump(-1, ' ', false, json::error_handler_t::replace),
              {}};
  if (!binary) return reply;
  reply.content_type = "application/octet-stream";
  reply.header_length = std::to_string(reply.body.size());
  reply.body.reserve(reply.body.size() + binary_bytes);
  for (const OutputTensor& o : r.outputs)
    if (o.binary)
      reply.body.append(static_cast<const char*>(o.tensor.data()), o.tensor.size_bytes());
  return reply;
}

// An infer request's body, read whole before it is parsed; the inputs'
// bytes point into it (InferRequest::keep_alive).
struct Body {
  std::unique_ptr<char[]> bytes;
  size_t size = 0;
  std::string_view view() const { return {bytes.get(), size}; }
};

// The path's segments: "/v2/models/m/infer" is {"v2", "models", "m", "infer"}.
std::vector<std::string_view> segments(std::string_view path) {
  std::vector<std::string_view> out;
  while (!path.empty()) {
    const size_t slash = path.find('/');
    if (slash != 0) out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool has_token(const char* header, std::string_view token) {
  if (header == nullptr) return false;
  std::string lower(header);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find(token) != std::string::npos;
}

// The port of a socket address; -1 for a family other than IPv4 and IPv6.
int port_of(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(&addr)->sin_port);
  if (addr.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&addr)->sin6_port);
  return -1;
}

// Calls `match(fd)` on the process's open descriptors (past stdio) until
// it returns true; returns that descriptor, or -1. civetweb does not say
// which descriptor a listener or a connection is, so it is looked up.
template <typename Match>
int find_fd(Match match) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == dirfd(dir)) continue;
    if (match(fd)) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// Whether the client of a request being handled has closed its connection.
// Only a request that has waited a while is looked at: civetweb keeps the
// connection's descriptor to itself, so the first look finds it among the
// process's sockets by its two ends (the client's address and port, the
// server's port), and later looks poll it. A client that shuts its side
// down (FIN) counts as gone; HTTP clients close the whole connection when
// they give up on a request, and do not half-close to wait for a reply.
class ClientWatch {
 public:
  explicit ClientWatch(const mg_request_info& ri)
      : since_(std::chrono::steady_clock::now()),
        remote_port_(ri.remote_port),
        server_port_(ri.server_port) {
    std::memcpy(remote_addr_, ri.remote_addr, sizeof(remote_addr_));
    remote_addr_[sizeof(remote_addr_) - 1] = '\0';
  }

  bool gone() {
    if (std::chrono::steady_clock::now() - since_ < kFirstLook) return false;
    std::lock_guard<std::mutex> lock(mu_);
    if (!looked_up_) {
      looked_up_ = true;
      fd_ = find_fd([this](int fd) { return is_connection(fd); });
    }
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  }

 private:
  // A request this young is served before a client could be missed.
  static constexpr std::chrono::milliseconds kFirstLook{50};

  bool is_connection(int fd) const {
    sockaddr_storage peer{}, local{};
    socklen_t peer_len = sizeof(peer), local_len = sizeof(local);
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0 ||
        port_of(peer) != remote_port_)
      return false;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len) != 0 ||
        port_of(local) != server_port_)
      return false;
    char text[INET6_ADDRSTRLEN] = "";
    const void* where = peer.ss_family == AF_INET
                            ? static_cast<const void*>(
                                  &reinterpret_cast<const sockaddr_in*>(&peer)->sin_addr)
                            : &reinterpret_cast<const sockaddr_in6*>(&peer)->sin6_addr;
    return inet_ntop(peer.ss_family, where, text, sizeof(text)) != nullptr &&
           std::strcmp(text, remote_addr_) == 0;
  }

  const std::chrono::steady_clock::time_point since_;
  const int remote_port_, server_port_;
  char remote_addr_[48];
  std::mutex mu_;
  bool looked_up_ = false;
  int fd_ = -1;  // the connection; open for as long as its request is handled
};

// The HTTP/1.1 front end on civetweb: a pool of `threads` workers, each
// serving one connection at a time for as long as it is kept alive. Every
// request reaches `handle`, which routes it by its path.
class HttpServer final : public HttpFrontend {
 public:
  explicit HttpServer(InferenceServer& server) : server_(server) {
    static const unsigned init = mg_init_library(0);
    (void)init;
  }
  ~HttpServer() override { shutdown(); }

  Result<int> start(const std::string& host, int port, int threads) {
    const std::string where = fmt::format("{}:{}", host, port);
    const std::string listen = host.find(':') != std::string::npos
                                   ? fmt::format("[{}]:{}", host, port)
                                   : where;
    const std::string workers = std::to_string(std::max(threads, 1));
    const std::string backlog = std::to_string(SOMAXCONN);
    const char* options[] = {
        "listening_ports", listen.c_str(), "num_threads", workers.c_str(),
        // Connections accepted while every worker is busy wait here, then
        // in the kernel's listen queue: a burst of new connections (a load
        // balancer opening its pool) waits rather than being reset.
        "connection_queue", "256", "listen_backlog", backlog.c_str(),
        "enable_keep_alive", "yes", "keep_alive_timeout_ms", "5000",
        "request_timeout_ms", "30000",
        // A response goes out in one or two writes; without TCP_NODELAY the
        // second would wait for the client's delayed ACK (40 ms on Linux).
        "tcp_nodelay", "1", nullptr};
    mg_callbacks callbacks{};
    // The library's own log (a client that went away, a malformed request
    // line it answered itself) is not the server's business; errors at
    // start come back through `error` below.
    callbacks.log_message = [](const mg_connection*, const char*) { return 1; };
    unsigned code = 0;
    char text[256] = "";
    mg_error_data error{&code, text, sizeof(text)};
    mg_init_data init{&callbacks, this, options};
    ctx_ = mg_start2(&init, &error);
    if (ctx_ == nullptr)
      return Status(StatusCode::kIoError,
                    fmt::format("HTTP: cannot listen on {} (in use?): {}", where, text));
    mg_set_request_handler(ctx_, "**", &HttpServer::handle, this);
    mg_server_port ports[1] = {};
    if (mg_get_server_ports(ctx_, 1, ports) != 1) {
      shutdown();
      return Status(StatusCode::kIoError, "HTTP: cannot tell the port listened on");
    }
    port_ = ports[0].port;
    listener_ = find_listener(port_);
    return port_;
  }

  int port() const override { return port_; }

  // Refuses new connections at once, lets the requests being handled finish
  // (up to the request timeout), then stops the library, which closes the
  // idle kept-alive connections. A request that arrives on a kept-alive
  // connection meanwhile is served and answered "Connection: close".
  void shutdown() override {
    if (ctx_ == nullptr) return;
    stop_listening();
    {
      std::unique_lock<std::mutex> lock(mu_);
      draining_ = true;
      idle_.wait_for(lock, std::chrono::seconds(30), [this] { return active_ == 0; });
    }
    mg_stop(ctx_);
    ctx_ = nullptr;
  }

 private:
  // The listening socket the library opened on `port` (it does not say):
  // the one socket of the process listening on that port; -1 if none is.
  static int find_listener(int port) {
    return find_fd([port](int fd) {
      int listening = 0;
      socklen_t len = sizeof(listening);
      if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening)
        return false;
      sockaddr_storage addr{};
      socklen_t addr_len = sizeof(addr);
      return getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &addr_len) == 0 &&
             port_of(addr) == port;
    });
  }

  // Closes the listening socket under the library: its descriptor is
  // pointed at an eventfd nobody signals, so the library's accept loop
  // waits on that until mg_stop, and the socket itself stops listening
  // (new connections are refused; ones the kernel queued are reset).
  void stop_listening() {
    if (listener_ < 0) return;
    const int socket = ::dup(listener_);
    const int placeholder = eventfd(0, EFD_CLOEXEC);
    if (socket < 0 || placeholder < 0 || ::dup2(placeholder, listener_) < 0) {
      if (socket >= 0) ::close(socket);
      if (placeholder >= 0) ::close(placeholder);
      return;
    }
    ::close(placeholder);
    ::shutdown(socket, SHUT_RDWR);
    ::close(socket);
    listener_ = -1;
  }

  // civetweb's request handler: every request, on the worker thread that
  // holds its connection.
  static int handle(mg_connection* conn, void* self_ptr) {
    auto* self = static_cast<HttpServer*>(self_ptr);
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      ++self->active_;
    }
    const mg_request_info& ri = *mg_get_request_info(conn);
    bool close = false;  // the request's body is not read whole
    Reply reply;
    try {
      reply = self->route(conn, ri, close);
    } catch (const std::exception& e) {
      reply = error_reply(error(Code::kInternal, e.what()));
      close = true;
    }
    std::unique_lock<std::mutex> lock(self->mu_);
    close = close || self->draining_;
    lock.unlock();
    send(conn, ri, reply, close);
    lock.lock();
    if (--self->active_ == 0) self->idle_.notify_all();
    return reply.status;
  }

  // Writes `r`: headers and a small body in one write, a large body after.
  static void send(mg_connection* conn, const mg_request_info& ri, const Reply& r, bool close) {
    // The library keeps a connection when the client asked for it (or
    // spoke HTTP/1.1 without saying) and its request's body was read whole;
    // the response says the same.
    const char* connection = mg_get_header(conn, "Connection");
    bool keep = connection != nullptr
                    ? has_token(connection, "keep-alive")
                    : ri.http_version != nullptr && std::strcmp(ri.http_version, "1.1") == 0;
    if (close) {
      mg_disable_connection_keep_alive(conn);
      keep = false;
    }
    std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Length: {}\r\n", r.status,
                                   mg_get_response_code_text(conn, r.status), r.body.size());
    if (!r.content_type.empty()) head += fmt::format("Content-Type: {}\r\n", r.content_type);
    if (!r.header_length.empty())
      head += fmt::format("{}: {}\r\n", kHeaderLength, r.header_length);
    head += keep ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    constexpr size_t kOneWrite = size_t{64} << 10;
    if (r.body.size() <= kOneWrite) {
      head += r.body;
      mg_write(conn, head.data(), head.size());
    } else {
      mg_write(conn, head.data(), head.size());
      mg_write(conn, r.body.data(), r.body.size());
    }
  }

  Reply route(mg_connection* conn, const mg_request_info& ri, bool& close) {
    const std::string_view method = ri.request_method;
    // No local path: a request for another host, or "OPTIONS *".
    const std::string_view path = ri.local_uri != nullptr ? ri.local_uri : "";
    const std::vector<std::string_view> s = segments(path);
    const bool get = method == "GET", post = method == "POST";
    const size_t n = s.size();
    if (get && n == 1 && s[0] == "metrics")
      return {200, "text/plain; version=0.0.4", server_.metrics().text(), {}};
    if (n >= 1 && s[0] == "v2") {
      if (get && n == 1)
        return json_reply({{"name", "backplane"},
                           {"version", InferenceServer::version_string()},
                           {"extensions", InferenceServer::extensions()}});
      if (get && n == 3 && s[1] == "health" && (s[2] == "live" || s[2] == "ready")) {
        const bool up = s[2] == "live" ? server_.live() : server_.ready();
        return {up ? 200 : 503, {}, {}, {}};
      }
      if (n >= 3 && s[1] == "models") {
        // /v2/models/M[/versions/V][/ready|/infer]
        const std::string model(s[2]);
        std::string version;
        size_t at = 3;
        if (n >= 5 && s[3] == "versions") {
          version = s[4];
          at = 5;
        }
        const std::string_view action = at < n ? s[at] : std::string_view();
        if (at + 1 >= n) {
          if (get && (action.empty() || action == "ready")) {
            std::shared_ptr<ServedModel> m;
            if (Error e = server_.find(model, version, &m); !e.ok()) return error_reply(e);
            if (action == "ready") return {200, {}, {}, {}};
            return json_reply(metadata_json(m->metadata()));
          }
          if (post && action == "infer") return infer(conn, ri, model, version, close);
        }
      }
      if (post && n == 3 && s[1] == "repository" && s[2] == "index") {
        json a = json::array();
        for (const RepositoryEntry& e : server_.repository_index()) {
          json entry = {{"name", e.name}, {"state", e.state}};
          if (!e.version.empty()) entry["version"] = e.version;
          if (!e.reason.empty()) entry["reason"] = e.reason;
          a.push_back(std::move(entry));
        }
        return json_reply(a);
      }
      if (post && n == 5 && s[1] == "repository" && s[2] == "models" &&
          (s[4] == "load" || s[4] == "unload")) {
        const std::string model(s[3]);
        Error e = s[4] == "load" ? server_.load_model(model) : server_.unload_model(model);
        return e.ok() ? Reply{200, {}, {}, {}} : error_reply(e);
      }
    }
    return error_reply(error(Code::kNotFound,
                             fmt::format("no route {} {}", method,
                                         ri.request_uri != nullptr ? ri.request_uri : "")));
  }

  // Reads the body whole, up to the server's limit, into `body`; on a body
  // that is over the limit or does not arrive as announced, an error, and
  // the connection closes after the reply.
  Error read_body(mg_connection* conn, const mg_request_info& ri, Body& body, bool& close) {
    const size_t limit = server_.options().max_request_bytes;
    const Error too_large =
        error(Code::kTooLarge, "the request body is over the server's limit "
                               "(--max-request-bytes)");
    const bool chunked = has_token(mg_get_header(conn, "Transfer-Encoding"), "chunked");
    if (ri.content_length > 0 && static_cast<unsigned long long>(ri.content_length) > limit) {
      // The library reads and drops the body after the reply, so that a
      // client still sending it reads the 413 instead of a reset
      // connection; a body far over the limit is not waited for.
      close = static_cast<unsigned long long>(ri.content_length) - limit > kMaxDropped;
      return too_large;
    }
    if (ri.content_length <= 0 && !chunked) return ok();
    // A client that waits to be told to send (curl does, for large bodies).
    if (has_token(mg_get_header(conn, "Expect"), "100-continue"))
      mg_write(conn, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    // Chunked: grown by doubling up to the limit, so a body over it is
    // found at the limit whatever the limit is.
    size_t capacity = ri.content_length > 0 ? static_cast<size_t>(ri.content_length)
                                            : std::min(size_t{64} << 10, limit);
    body.bytes.reset(new char[capacity]);
    for (;;) {
      if (body.size == capacity) {
        if (ri.content_length > 0) break;
        if (capacity >= limit) {
          // One byte more than the limit tells a body over it.
          char probe;
          if (mg_read(conn, &probe, 1) > 0) {
            close = true;
            return too_large;
          }
          break;
        }
        const size_t grown = std::min(capacity * 2, limit);
        std::unique_ptr<char[]> bigger(new char[grown]);
        std::memcpy(bigger.get(), body.bytes.get(), body.size);
        body.bytes = std::move(bigger);
        capacity = grown;
      }
      const int got = mg_read(conn, body.bytes.get() + body.size, capacity - body.size);
      if (got <= 0) {
        if (got < 0 || (ri.content_length > 0 && body.size < capacity)) {
          close = true;
          return error(Code::kInvalidArgument, "the request body did not arrive as announced");
        }
        break;
      }
      body.size += static_cast<size_t>(got);
    }
    return ok();
  }

  Reply infer(mg_connection* conn, const mg_request_info& ri, const std::string& model,
              const std::string& version, bool& close) {
    auto body = std::make_shared<Body>();
    if (Error e = read_body(conn, ri, *body, close); !e.ok()) return error_reply(e);
    InferRequest request;
    request.model = model;
    request.version = version;
    request.keep_alive = body;
    if (Error e = parse_infer(body->view(), mg_get_header(conn, kHeaderLength), kMaxJsonBytes,
                              request);
        !e.ok()) {
      count_rejected(request.model, request.version);
      return error_reply(e);
    }
    request.cancelled = [watch = std::make_shared<ClientWatch>(ri)] { return watch->gone(); };
    InferResponse response;
    if (Error e = server_.infer(request, &response); !e.ok()) return error_reply(e);
    return infer_reply(response);
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
  // How far over the limit a refused body is still read and dropped.
  static constexpr unsigned long long kMaxDropped = 64ull << 20;

  InferenceServer& server_;
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  int listener_ = -1;
  std::mutex mu_;
  std::condition_variable idle_;
  int active_ = 0;  // requests being handled
  bool draining_ = false;
};

}  // namespace

Result<std::unique_ptr<HttpFrontend>> start_http(InferenceServer& server, const std::string& host,
                                                 int port, int threads) {
  auto http = std::make_unique<HttpServer>(server);
  BP_ASSIGN_OR_RETURN(int bound, http->start(host, port, threads));
  (void)bound;
  return std::unique_ptr<HttpFrontend>(std::move(http));
}

}  // namespace backplane::serve
