#include "server.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>

#ifdef BACKPLANE_SERVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#else
#include <malloc.h>
#endif

#ifndef BACKPLANE_SERVE_VERSION
#define BACKPLANE_SERVE_VERSION "0"
#endif

namespace backplane::serve {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Gives the memory the allocator holds free back to the system now.
void release_free_memory() {
#ifdef BACKPLANE_SERVE_JEMALLOC
  const std::string purge = "arena." + std::to_string(MALLCTL_ARENAS_ALL) + ".purge";
  mallctl(purge.c_str(), nullptr, nullptr, nullptr, 0);
#else
  malloc_trim(0);
#endif
}

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kIoError, path + ": cannot open");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

bool positive_integer(const std::string& s) {
  if (s.empty() || s.size() > 18 || s[0] == '0') return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A model name travels in URLs and metric labels: keep it to what needs no
// escaping.
bool valid_model_name(const std::string& s) {
  if (s.empty() || s.size() > 128 || s[0] == '.') return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

TensorMetadata describe(const TensorInfo& info) {
  TensorMetadata m;
  m.name = info.name;
  m.datatype = std::string(datatype_name(info.dtype));
  m.shape = info.shape;
  return m;
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& text, const std::string& where) {
  auto fail = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, where + ": " + why);
  };
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return fail("not valid JSON");
  if (!j.is_object()) return fail("expected a JSON object");
  ModelConfig c;
  for (const auto& [key, value] : j.items()) {
    if (key == "backends") {
      if (!value.is_array()) return fail("\"backends\" must be an array of backend ids");
      for (const json& b : value) {
        if (!b.is_string()) return fail("\"backends\" must be an array of backend ids");
        c.backends.push_back(b.get<std::string>());
      }
    } else if (key == "overrides") {
      if (!value.is_object()) return fail("\"overrides\" must map node names to backend ids");
      for (const auto& [node, backend] : value.items()) {
        if (!backend.is_string()) return fail("\"overrides\" must map node names to backend ids");
        c.overrides[node] = backend.get<std::string>();
      }
    } else if (key == "threads" || key == "instances" || key == "max_queue_size") {
      if (!value.is_number_integer()) return fail("\"" + key + "\" must be an integer");
      const int64_t v = value.get<int64_t>();
      if (key == "threads") {
        if (v < 0 || v > max_threads())
          return fail(fmt::format("\"threads\" must be 0..{} here", max_threads()));
        c.threads = static_cast<int>(v);
      } else if (key == "instances") {
        if (v < 1 || v > 64) return fail("\"instances\" must be 1..64");
        c.instances = static_cast<int>(v);
      } else {
        if (v < 0 || v > 1000000) return fail("\"max_queue_size\" must be 0..1000000");
        c.max_queue_size = static_cast<size_t>(v);
      }
    } else if (key == "input_shapes") {
      if (!value.is_array())
        return fail("\"input_shapes\" must be an array of {input: [dims]} objects");
      for (const json& sig : value) {
        if (!sig.is_object())
          return fail("\"input_shapes\" must be an array of {input: [dims]} objects");
        std::map<std::string, Shape> shapes;
        for (const auto& [input, dims] : sig.items()) {
          if (!dims.is_array()) return fail("input_shapes: \"" + input + "\" must be [dims]");
          Shape shape;
          for (const json& d : dims) {
            if (!d.is_number_integer() || d.get<int64_t>() < 0)
              return fail("input_shapes: \"" + input + "\" has a dim that is not a size");
            shape.push_back(d.get<int64_t>());
          }
          shapes[input] = std::move(shape);
        }
        c.input_shapes.push_back(std::move(shapes));
      }
    } else if (key == "dynamic_batching") {
      if (!value.is_object())
        return fail("\"dynamic_batching\" must be an object ({} for the defaults)");
      c.batching.enabled = true;
      for (const auto& [k, v] : value.items()) {
        if (k != "max_batch_size" && k != "max_queue_delay_us")
          return fail("dynamic_batching: unknown key \"" + k +
                      "\" (known: max_batch_size, max_queue_delay_us)");
        if (!v.is_number_integer())
          return fail("dynamic_batching: \"" + k + "\" must be an integer");
        const int64_t n = v.get<int64_t>();
        if (k == "max_batch_size") {
          if (n < 1 || n > 4096) return fail("dynamic_batching: max_batch_size must be 1..4096");
          c.batching.max_batch_size = n;
        } else {
          if (n < 0 || n > 10000000)
            return fail("dynamic_batching: max_queue_delay_us must be 0..10000000");
          c.batching.max_queue_delay_us = n;
        }
      }
    } else {
      return fail("unknown key \"" + key +
                  "\" (known: backends, overrides, threads, instances, max_queue_size, "
                  "input_shapes, dynamic_batching)");
    }
  }
  return c;
}

// ---------------------------------------------------------------- ServedModel

ServedModel::ServedModel(std::string name, std::string version, std::string path,
                         ModelConfig config, std::shared_ptr<Runtime> runtime,
                         ModelCounters* counters, uint64_t max_request_elements)
    : name_(std::move(name)),
      version_(std::move(version)),
      path_(std::move(path)),
      config_(std::move(config)),
      runtime_(std::move(runtime)),
      counters_(counters),
      max_request_elements_(max_request_elements) {}

// One request in the queue; the caller's thread waits on `done` while an
// instance runs it.
struct ServedModel::Pending {
  const InferRequest* request;
  InferResponse* response;
  int64_t rows;
  std::string shape_key;  // every input's dims after the leading one: what must agree
  Clock::time_point queued;
  std::promise<Error> done;
};

Result<std::shared_ptr<ServedModel>> ServedModel::start(
    std::string name, std::string version, std::string path, ModelConfig config,
    std::shared_ptr<Runtime> runtime, ModelOptions options, ModelCounters* counters,
    uint64_t max_request_elements) {
  std::shared_ptr<ServedModel> m(new ServedModel(std::move(name), std::move(version),
                                                 std::move(path), std::move(config),
                                                 std::move(runtime), counters,
                                                 max_request_elements));
  const size_t n = static_cast<size_t>(m->config_.instances);
  m->sessions_.resize(n);
  // The model is loaded on instance 0's thread, then each instance makes
  // and warms its session on its own thread: whatever a backend keeps per
  // calling thread is made there, and nowhere else. The threads share what
  // they report through `sync`, which outlives whichever finishes last.
  struct Sync {
    ModelOptions options;
    std::promise<Status> loaded;
    std::shared_future<Status> model_ready;
    std::vector<std::promise<Status>> ready;
  };
  auto sync = std::make_shared<Sync>();
  sync->options = std::move(options);
  sync->model_ready = sync->loaded.get_future().share();
  sync->ready.resize(n);
  std::vector<std::future<Status>> ready;
  for (std::promise<Status>& r : sync->ready) ready.push_back(r.get_future());
  for (size_t i = 0; i < n; ++i) {
    m->instances_.emplace_back([sync, i, raw = m.get()] {
      Status s;
      if (i == 0) {
        s = raw->prepare(0, sync->options);
        sync->loaded.set_value(s);
      } else {
        s = sync->model_ready.get();
        if (s.ok()) s = raw->prepare(i, sync->options);
      }
      const bool ok = s.ok();
      sync->ready[i].set_value(std::move(s));
      if (ok) raw->instance(i);
    });
  }
  Status failed;
  for (std::future<Status>& r : ready) {
    Status s = r.get();
    if (!s.ok() && failed.ok()) failed = std::move(s);
  }
  if (!failed.ok()) return failed;  // ~ServedModel stops the instances that started
  // What loading parsed and copied (the protobuf, the IR's copy of the
  // weights before packing) is free now: it goes back to the system at once.
  release_free_memory();
  return m;
}

Status ServedModel::prepare(size_t index, const ModelOptions& options) {
  if (index == 0) {
    BP_ASSIGN_OR_RETURN(model_, runtime_->load_model(path_, options));
    if (config_.batching.enabled) {
      for (const std::vector<TensorInfo>* list : {&model_->inputs(), &model_->outputs()})
        for (const TensorInfo& t : *list)
          if (t.shape.empty() || t.shape[0] >= 0)
            return Status(StatusCode::kInvalidArgument,
                          fmt::format("dynamic_batching: '{}' has shape {}; every input and "
                                      "output needs an open leading (batch) dim",
                                      t.name, shape_to_string(t.shape)));
    }
    metadata_.name = name_;
    metadata_.versions = {version_};
    metadata_.platform = fs::path(path_).extension() == ".bpk" ? "backplane_bpk" : "onnx";
    for (const TensorInfo& i : model_->inputs()) metadata_.inputs.push_back(describe(i));
    for (const TensorInfo& o : model_->outputs()) metadata_.outputs.push_back(describe(o));
  }
  BP_ASSIGN_OR_RETURN(sessions_[index], model_->create_session());
  // Every signature the config names runs once, on zeros: its first
  // request finds it built.
  Session& s = *sessions_[index];
  for (size_t sig = 0; sig < config_.input_shapes.size(); ++sig) {
    for (const TensorInfo& info : model_->inputs()) {
      auto given = config_.input_shapes[sig].find(info.name);
      Shape shape = given != config_.input_shapes[sig].end() ? given->second : info.shape;
      if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("input_shapes[{}]: input '{}' has open dims; give them", sig,
                                  info.name));
      BP_RETURN_IF_ERROR(s.set_input(info.name, Tensor(info.dtype, shape)),
                         fmt::format("input_shapes[{}]", sig));
    }
    BP_RETURN_IF_ERROR(s.run(), fmt::format("input_shapes[{}]", sig));
  }
  return Status();
}

ServedModel::~ServedModel() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  for (std::thread& t : instances_) t.join();
  // An unloaded or replaced version's memory goes back to the system now,
  // not when the allocator next gets round to it.
  sessions_.clear();
  model_.reset();
  release_free_memory();
}

Error ServedModel::check(InferRequest& request) const {
  const std::vector<TensorInfo>& infos = model_->inputs();
  std::set<std::string_view> seen;
  for (InputTensor& in : request.inputs) {
    const std::string where = "input '" + in.name + "'";
    auto it = std::find_if(infos.begin(), infos.end(),
                           [&](const TensorInfo& i) { return i.name == in.name; });
    if (it == infos.end()) {
      std::string known;
      for (const TensorInfo& i : infos) known += (known.empty() ? "" : ", ") + i.name;
      return error(Code::kInvalidArgument,
                   "model '" + name_ + "' has no " + where + " (its inputs: " + known + ")");
    }
    if (!seen.insert(in.name).second)
      return error(Code::kInvalidArgument, where + " is given twice");
    if (it->kind != TensorInfo::Kind::kTensor)
      return error(Code::kInvalidArgument,
                   where + " is a sequence or an optional, which the protocol cannot carry");
    DType dtype = DType::kUndefined;
    if (!dtype_from_datatype(in.datatype, &dtype))
      return error(Code::kInvalidArgument,
                   where + ": datatype '" + in.datatype + "' is not one Backplane has");
    if (dtype != it->dtype)
      return error(Code::kInvalidArgument,
                   fmt::format("{}: datatype {}, but the model takes {}", where, in.datatype,
                               datatype_name(it->dtype)));
    if (in.shape.size() != it->shape.size())
      return error(Code::kInvalidArgument,
                   fmt::format("{}: shape {} has {} dims, the model's {} has {}", where,
                               shape_to_string(in.shape), in.shape.size(),
                               shape_to_string(it->shape), it->shape.size()));
    for (size_t d = 0; d < in.shape.size(); ++d) {
      if (in.shape[d] < 0)
        return error(Code::kInvalidArgument,
                     fmt::format("{}: shape {} has a negative dim", where,
                                 shape_to_string(in.shape)));
      if (it->shape[d] >= 0 && in.shape[d] != it->shape[d])
        return error(Code::kInvalidArgument,
                     fmt::format("{}: shape {}, but the model fixes dim {} to {}", where,
                                 shape_to_string(in.shape), d, it->shape[d]));
    }
    size_t bytes = 0;
    if (!checked_size_bytes(in.shape, dtype, &bytes))
      return error(Code::kInvalidArgument,
                   fmt::format("{}: shape {} is too large", where, shape_to_string(in.shape)));
    in.dtype = dtype;
    in.expected_bytes = bytes;
    if (in.fill) {
      // The values are in the body as text: a body of n bytes holds at most
      // n/2 of them ("0,"), so a shape asking for more cannot be what it
      // sent, and nothing is allocated for it.
      if (static_cast<uint64_t>(shape_numel(in.shape)) > max_request_elements_)
        return error(Code::kInvalidArgument,
                     fmt::format("{}: shape {} has more elements than the request can hold",
                                 where, shape_to_string(in.shape)));
    } else if (in.size != bytes) {
      return error(Code::kInvalidArgument,
                   fmt::format("{}: {} bytes of data, but {} {} takes {}", where, in.size,
                               in.datatype, shape_to_string(in.shape), bytes));
    }
  }
  for (const TensorInfo& i : infos)
    if ((i.default_value.empty() || config_.batching.enabled) && !seen.count(i.name))
      return error(Code::kInvalidArgument, "input '" + i.name + "' is missing");
  if (config_.batching.enabled) {
    const int64_t rows = request.inputs.front().shape.front();
    for (const InputTensor& in : request.inputs)
      if (in.shape.front() != rows)
        return error(Code::kInvalidArgument,
                     fmt::format("input '{}': leading (batch) dim {}, but input '{}' has {}; "
                                 "with dynamic batching every input has the request's rows",
                                 in.name, in.shape.front(), request.inputs.front().name, rows));
  }
  std::set<std::string_view> wanted;
  for (const RequestedOutput& o : request.outputs) {
    const auto& outs = model_->outputs();
    if (std::none_of(outs.begin(), outs.end(),
                     [&](const TensorInfo& t) { return t.name == o.name; }))
      return error(Code::kInvalidArgument,
                   "model '" + name_ + "' has no output '" + o.name + "'");
    if (!wanted.insert(o.name).second)
      return error(Code::kInvalidArgument, "output '" + o.name + "' is requested twice");
  }
  return ok();
}

Error ServedModel::infer(const InferRequest& request, InferResponse* response) {
  Pending p;
  p.request = &request;
  p.response = response;
  p.rows = config_.batching.enabled ? request.inputs.front().shape.front() : 1;
  if (config_.batching.enabled) {
    // Inputs in the model's order, so two requests that list them
    // differently still batch together.
    for (const TensorInfo& info : model_->inputs())
      for (const InputTensor& in : request.inputs)
        if (in.name == info.name)
          p.shape_key += shape_to_string(Shape(in.shape.begin() + 1, in.shape.end()));
  }
  p.queued = Clock::now();
  std::future<Error> done = p.done.get_future();
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (queue_.size() >= config_.max_queue_size)
      return error(Code::kResourceExhausted,
                   fmt::format("model '{}': {} requests are waiting already (max_queue_size)",
                               name_, queue_.size()));
    queue_.push_back(&p);
  }
  queue_cv_.notify_all();
  if (!request.deadline && !request.cancelled) return done.get();
  // Wake up now and then to notice a client that went away, and at the
  // deadline; a request still queued then leaves the queue, one an
  // instance has taken is answered by it.
  for (;;) {
    auto until = Clock::now() + std::chrono::milliseconds(50);
    if (request.deadline && *request.deadline < until) until = *request.deadline;
    if (done.wait_until(until) == std::future_status::ready) return done.get();
    const bool expired = request.deadline && Clock::now() >= *request.deadline;
    const bool gone = request.cancelled && request.cancelled();
    if (!expired && !gone) continue;
    std::unique_lock<std::mutex> lock(queue_mu_);
    auto it = std::find(queue_.begin(), queue_.end(), &p);
    if (it == queue_.end()) {
      lock.unlock();
      return done.get();
    }
    queue_.erase(it);
    return expired ? error(Code::kDeadlineExceeded,
                           "model '" + name_ + "': the request's deadline passed while it "
                           "waited")
                   : error(Code::kCancelled, "the client went away");
  }
}

void ServedModel::instance(size_t index) {
  std::unique_lock<std::mutex> lock(queue_mu_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and nothing left to answer
    std::vector<Pending*> batch = next_batch(lock);
    if (batch.empty()) continue;  // another instance took them
    lock.unlock();
    run_batch(*sessions_[index], batch);
    lock.lock();
  }
}

std::vector<ServedModel::Pending*> ServedModel::next_batch(std::unique_lock<std::mutex>& lock) {
  if (config_.batching.enabled) {
    // The first request waits for others up to the delay, unless the queue
    // already holds a full batch.
    const int64_t max_rows = config_.batching.max_batch_size;
    const Clock::time_point until =
        queue_.front()->queued + std::chrono::microseconds(config_.batching.max_queue_delay_us);
    auto rows_waiting = [&] {
      int64_t rows = 0;
      for (const Pending* p : queue_) rows += p->rows;
      return rows;
    };
    while (!stopping_ && !queue_.empty() && rows_waiting() < max_rows && Clock::now() < until)
      queue_cv_.wait_until(lock, until);
    if (queue_.empty()) return {};
    std::vector<Pending*> batch{queue_.front()};
    queue_.pop_front();
    int64_t rows = batch.front()->rows;
    for (auto it = queue_.begin(); it != queue_.end() && rows < max_rows;) {
      if ((*it)->shape_key == batch.front()->shape_key && rows + (*it)->rows <= max_rows) {
        rows += (*it)->rows;
        batch.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    return batch;
  }
  std::vector<Pending*> one{queue_.front()};
  queue_.pop_front();
  return one;
}

Error ServedModel::run_one(Session& session, const InferRequest& request,
                           InferResponse* response) {
  Clock::time_point t0 = Clock::now();
  for (const InputTensor& in : request.inputs) {
    const Tensor view = Tensor::view(in.dtype, in.shape, const_cast<void*>(in.data));
    if (Status s = session.set_input(in.name, view); !s.ok())
      return error(Code::kInvalidArgument, s.message());
  }
  // An input with a default the request leaves out takes the default, not
  // what the session's previous request gave it.
  for (const TensorInfo& info : model_->inputs())
    if (!info.default_value.empty() &&
        std::none_of(request.inputs.begin(), request.inputs.end(),
                     [&](const InputTensor& in) { return in.name == info.name; }))
      if (Status s = session.set_input(info.name, info.default_value); !s.ok())
        return error(Code::kInternal, s.message());
  counters_->input_us->Increment(us_since(t0));

  t0 = Clock::now();
  if (Status s = session.run(); !s.ok()) {
    const Code code = s.code() == StatusCode::kInvalidArgument ? Code::kInvalidArgument
                                                                : Code::kInternal;
    return error(code, "model '" + name_ + "': " + s.message());
  }
  counters_->infer_us->Increment(us_since(t0));
  counters_->executions->Increment();
  // A batching model counts rows, as Triton counts a batch of n as n.
  counters_->inferences->Increment(
      config_.batching.enabled ? static_cast<double>(request.inputs.front().shape.front()) : 1.0);

  t0 = Clock::now();
  response->model = name_;
  response->version = version_;
  response->id = request.id;
  response->outputs.clear();
  auto add = [&](const std::string& name, bool binary) -> Error {
    Result<Tensor> t = session.get_output(name);
    if (!t.ok()) return error(Code::kInternal, t.status().message());
    OutputTensor out;
    out.name = name;
    out.datatype = std::string(datatype_name(t->dtype()));
    if (out.datatype.empty())
      return error(Code::kInternal, fmt::format("output '{}' is {}, which the protocol cannot "
                                                "carry", name, dtype_name(t->dtype())));
    out.shape = t->shape();
    out.tensor = t->clone();
    out.binary = binary;
    response->outputs.push_back(std::move(out));
    return ok();
  };
  if (request.outputs.empty()) {
    for (const TensorInfo& o : model_->outputs())
      if (Error e = add(o.name, request.all_binary); !e.ok()) return e;
  } else {
    for (const RequestedOutput& o : request.outputs)
      if (Error e = add(o.name, o.binary || request.all_binary); !e.ok()) return e;
  }
  counters_->output_us->Increment(us_since(t0));
  return ok();
}

void ServedModel::run_batch(Session& session, std::vector<Pending*>& batch) {
  const Clock::time_point start = Clock::now();
  // Requests that stopped being wanted while they waited are answered now
  // and run with no one else.
  std::vector<Pending*> live;
  for (Pending* p : batch) {
    counters_->queue_us->Increment(
        std::chrono::duration<double, std::micro>(start - p->queued).count());
    if (p->request->deadline && start >= *p->request->deadline)
      p->done.set_value(error(Code::kDeadlineExceeded,
                              "model '" + name_ + "': the request's deadline passed while it "
                              "waited"));
    else if (p->request->cancelled && p->request->cancelled())
      p->done.set_value(error(Code::kCancelled, "the client went away"));
    else
      live.push_back(p);
  }
  if (live.empty()) return;
  if (live.size() == 1) {
    Pending* p = live.front();
    p->done.set_value(run_one(session, *p->request, p->response));
    return;
  }
  auto fail_all = [&](const Error& e) {
    for (Pending* p : live) p->done.set_value(e);
  };
  int64_t rows = 0;
  for (const Pending* p : live) rows += p->rows;

  // Every input, the requests' rows one after another.
  Clock::time_point t0 = Clock::now();
  std::vector<Tensor> inputs;
  for (const TensorInfo& info : model_->inputs()) {
    const InputTensor* first = nullptr;
    for (const InputTensor& in : live.front()->request->inputs)
      if (in.name == info.name) first = &in;
    Shape shape = first->shape;
    shape[0] = rows;
    Tensor t(info.dtype, shape);
    char* at = static_cast<char*>(t.data());
    for (const Pending* p : live)
      for (const InputTensor& in : p->request->inputs)
        if (in.name == info.name) {
          if (in.size) std::memcpy(at, in.data, in.size);
          at += in.size;
        }
    if (Status st = session.bind_input(info.name, t); !st.ok())
      return fail_all(error(Code::kInternal, st.message()));
    inputs.push_back(std::move(t));
  }
  const double input_us = us_since(t0);

  t0 = Clock::now();
  Status st = session.run();
  const double infer_us = us_since(t0);
  if (!st.ok()) {
    const Code code = st.code() == StatusCode::kInvalidArgument ? Code::kInvalidArgument
                                                                 : Code::kInternal;
    return fail_all(error(code, "model '" + name_ + "' (a batch of " + std::to_string(rows) +
                                    " rows): " + st.message()));
  }
  counters_->executions->Increment();

  // Each request's rows of each output it asked for.
  t0 = Clock::now();
  int64_t offset = 0;
  for (Pending* p : live) {
    const InferRequest& request = *p->request;
    InferResponse& response = *p->response;
    response.model = name_;
    response.version = version_;
    response.id = request.id;
    response.outputs.clear();
    std::vector<RequestedOutput> wanted = request.outputs;
    if (wanted.empty())
      for (const TensorInfo& o : model_->outputs()) wanted.push_back({o.name, false});
    Error e = ok();
    for (const RequestedOutput& w : wanted) {
      Result<Tensor> t = session.get_output(w.name);
      if (!t.ok()) {
        e = error(Code::kInternal, t.status().message());
        break;
      }
      if (t->rank() == 0 || t->shape()[0] != rows) {
        e = error(Code::kInternal,
                  fmt::format("model '{}': output '{}' has shape {} for a batch of {} rows; "
                              "its leading dim is not the batch, so the model cannot be "
                              "served with dynamic_batching",
                              name_, w.name, shape_to_string(t->shape()), rows));
        break;
      }
      OutputTensor out;
      out.name = w.name;
      out.datatype = std::string(datatype_name(t->dtype()));
      out.shape = t->shape();
      out.shape[0] = p->rows;
      const size_t row_bytes = t->size_bytes() / static_cast<size_t>(rows);
      out.tensor = Tensor::copy_of(t->dtype(), out.shape,
                                   static_cast<const char*>(t->data()) +
                                       row_bytes * static_cast<size_t>(offset));
      out.binary = w.binary || request.all_binary;
      response.outputs.push_back(std::move(out));
    }
    offset += p->rows;
    counters_->inferences->Increment(static_cast<double>(p->rows));
    counters_->input_us->Increment(input_us);
    counters_->infer_us->Increment(infer_us);
    p->done.set_value(std::move(e));
  }
  counters_->output_us->Increment(us_since(t0));
  // The inputs stay bound to tensors that go now: harmless, as every run
  // sets or binds every input first (with batching, requests give them all).
}

// ------------------------------------------------------------ InferenceServer

InferenceServer::InferenceServer(ServerOptions options) : options_(std::move(options)) {}

const char* InferenceServer::version_string() { return BACKPLANE_SERVE_VERSION; }

std::vector<std::string> InferenceServer::extensions() {
  return {"binary_tensor_data", "model_repository"};
}

Result<std::shared_ptr<Runtime>> InferenceServer::runtime_for(int threads) {
  auto it = runtimes_.find(threads);
  if (it != runtimes_.end()) return it->second;
  RuntimeOptions o = options_.runtime;
  o.num_threads = threads;
  BP_ASSIGN_OR_RETURN(std::shared_ptr<Runtime> rt, Runtime::create(o));
  runtimes_[threads] = rt;
  return rt;
}

void InferenceServer::set_entry(RepositoryEntry entry) {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const RepositoryEntry& e) { return e.name == entry.name; });
  if (it != entries_.end()) {
    *it = std::move(entry);
  } else {
    entries_.push_back(std::move(entry));
    std::sort(entries_.begin(), entries_.end(),
              [](const RepositoryEntry& a, const RepositoryEntry& b) { return a.name < b.name; });
  }
}

Result<InferenceServer::Source> InferenceServer::locate(const std::string& name) const {
  for (const auto& [model, path] : options_.models)
    if (model == name) {
      if (!fs::is_regular_file(path))
        return Status(StatusCode::kNotFound, path + ": no such model file");
      return Source{"1", path, ModelConfig{}};
    }
  if (options_.model_repository.empty() || !valid_model_name(name))
    return Status(StatusCode::kNotFound, "no model '" + name + "' in the repository");
  const fs::path dir = fs::path(options_.model_repository) / name;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return Status(StatusCode::kNotFound, "no model '" + name + "' in the repository");
  Source source;
  const fs::path config_path = dir / "config.json";
  if (fs::exists(config_path, ec)) {
    BP_ASSIGN_OR_RETURN(std::string text, read_text(config_path.string()));
    BP_ASSIGN_OR_RETURN(source.config, parse_model_config(text, config_path.string()));
  }
  // The newest version: the largest positive integer directory that holds
  // a model.
  for (const fs::directory_entry& v : fs::directory_iterator(dir, ec)) {
    const std::string ver = v.path().filename().string();
    if (!v.is_directory() || !positive_integer(ver)) continue;
    for (const char* file : {"model.bpk", "model.onnx"}) {
      const fs::path f = v.path() / file;
      if (!fs::is_regular_file(f)) continue;
      if (source.version.empty() || std::stoll(ver) > std::stoll(source.version)) {
        source.version = ver;
        source.path = f.string();
      }
      break;
    }
  }
  if (source.version.empty())
    return Status(StatusCode::kInvalidArgument,
                  "no version directory (" + dir.string() + "/<n>/) holds model.onnx or "
                  "model.bpk");
  return source;
}

Result<std::shared_ptr<ServedModel>> InferenceServer::load(const std::string& name,
                                                           const Source& source) {
  const ModelConfig& config = source.config;
  std::shared_ptr<Runtime> rt;
  {
    std::lock_guard<std::mutex> lock(mu_);
    BP_ASSIGN_OR_RETURN(rt, runtime_for(config.threads > 0 ? config.threads : options_.threads));
  }
  ModelOptions mo;
  mo.backends = config.backends.empty() ? options_.backends : config.backends;
  mo.overrides = config.overrides;
  if (!config.input_shapes.empty()) mo.input_shapes = config.input_shapes.front();
  return ServedModel::start(name, source.version, source.path, config, std::move(rt),
                            std::move(mo), metrics_.for_model(name, source.version),
                            options_.max_request_bytes / 2);
}

Result<std::unique_ptr<InferenceServer>> InferenceServer::create(const ServerOptions& options) {
  if (options.model_repository.empty() && options.models.empty())
    return Status(StatusCode::kInvalidArgument,
                  "nothing to serve: give --model-repository DIR or --model NAME=PATH");
  std::unique_ptr<InferenceServer> server(new InferenceServer(options));
  std::vector<std::string> names;
  for (const auto& [name, path] : options.models) {
    if (!valid_model_name(name))
      return Status(StatusCode::kInvalidArgument,
                    "model name '" + name + "': use letters, digits, '_', '-' and '.'");
    if (std::find(names.begin(), names.end(), name) != names.end())
      return Status(StatusCode::kInvalidArgument, "model name '" + name + "' is given twice");
    if (!fs::is_regular_file(path))
      return Status(StatusCode::kNotFound, path + ": no such model file");
    names.push_back(name);
  }
  if (!options.model_repository.empty()) {
    std::error_code ec;
    if (!fs::is_directory(options.model_repository, ec))
      return Status(StatusCode::kNotFound,
                    options.model_repository + ": not a directory (--model-repository)");
    std::vector<std::string> found;
    for (const fs::directory_entry& e : fs::directory_iterator(options.model_repository, ec)) {
      const std::string name = e.path().filename().string();
      if (e.is_directory() && valid_model_name(name)) found.push_back(name);
    }
    std::sort(found.begin(), found.end());
    for (const std::string& name : found) {
      if (std::find(names.begin(), names.end(), name) != names.end())
        return Status(StatusCode::kInvalidArgument,
                      "model name '" + name + "' is both a --model and in the repository");
      // A config.json that does not parse is the operator's mistake, caught
      // at start; a model that does not load is reported and served around.
      const fs::path config = fs::path(options.model_repository) / name / "config.json";
      if (fs::exists(config, ec)) {
        BP_ASSIGN_OR_RETURN(std::string text, read_text(config.string()));
        BP_RETURN_IF_ERROR(parse_model_config(text, config.string()).status());
      }
      names.push_back(name);
    }
  }
  for (const std::string& name : names) {
    Error e = server->load_model(name);
    if (!e.ok())
      std::fprintf(stderr, "backplane-serve: model '%s': %s\n", name.c_str(),
                   e.message.c_str());
  }
  return server;
}

Error InferenceServer::load_model(const std::string& name) {
  std::lock_guard<std::mutex> serial(load_mu_);
  std::map<std::string, std::shared_ptr<ServedModel>> replaced;  // released after mu_
  Result<Source> source = locate(name);
  Result<std::shared_ptr<ServedModel>> model =
      source.ok() ? load(name, *source) : Result<std::shared_ptr<ServedModel>>(source.status());
  std::lock_guard<std::mutex> lock(mu_);
  if (!model.ok()) {
    const bool known = std::any_of(entries_.begin(), entries_.end(),
                                   [&](const RepositoryEntry& e) { return e.name == name; });
    if (!known && model.status().code() == StatusCode::kNotFound)
      return error(Code::kNotFound, model.status().message());
    const std::string reason = model.status().message();
    auto it = models_.find(name);
    if (it == models_.end() || it->second.empty()) {
      set_entry({name, source.ok() ? source->version : "", "UNAVAILABLE", reason});
      return error(Code::kUnavailable, "model '" + name + "' failed to load: " + reason);
    }
    // The version being served goes on being served.
    return error(Code::kUnavailable, "model '" + name + "' failed to load (version " +
                                         it->second.begin()->first +
                                         " is still served): " + reason);
  }
  // Swapped in whole: a request that found the old version keeps it.
  replaced = {{(*model)->version(), *model}};
  models_[name].swap(replaced);
  set_entry({name, (*model)->version(), "READY", ""});
  return ok();
}

Error InferenceServer::unload_model(const std::string& name) {
  std::lock_guard<std::mutex> serial(load_mu_);
  // Released after the lock: the model goes once the last request holding
  // it finishes, never under mu_.
  std::map<std::string, std::shared_ptr<ServedModel>> versions;
  std::lock_guard<std::mutex> lock(mu_);
  const bool known = std::any_of(entries_.begin(), entries_.end(),
                                 [&](const RepositoryEntry& e) { return e.name == name; });
  if (!known) return error(Code::kNotFound, "no model '" + name + "'");
  if (auto it = models_.find(name); it != models_.end()) {
    versions = std::move(it->second);
    models_.erase(it);
  }
  set_entry({name, "", "UNAVAILABLE", "unloaded"});
  return ok();
}

bool InferenceServer::ready() const {
  if (stopping_) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return std::all_of(entries_.begin(), entries_.end(),
                     [](const RepositoryEntry& e) { return e.state == "READY"; });
}

std::vector<RepositoryEntry> InferenceServer::repository_index() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

Error InferenceServer::find(const std::string& name, const std::string& version,
                            std::shared_ptr<ServedModel>* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = models_.find(name);
  if (it == models_.end() || it->second.empty()) {
    for (const RepositoryEntry& e : entries_)
      if (e.name == name)
        return error(Code::kUnavailable, "model '" + name + "' is not ready: " + e.reason);
    return error(Code::kNotFound, "no model '" + name + "'");
  }
  if (version.empty()) {
    // The newest: versions compare as numbers.
    const auto newest = std::max_element(
        it->second.begin(), it->second.end(), [](const auto& a, const auto& b) {
          return std::stoll(a.first) < std::stoll(b.first);
        });
    *out = newest->second;
    return ok();
  }
  auto v = it->second.find(version);
  if (v == it->second.end())
    return error(Code::kNotFound, "model '" + name + "' has no version '" + version + "'");
  *out = v->second;
  return ok();
}

Error InferenceServer::infer(InferRequest& request, InferResponse* response) {
  const Clock::time_point t0 = Clock::now();
  std::shared_ptr<ServedModel> model;
  if (Error e = find(request.model, request.version, &model); !e.ok()) return e;
  ModelCounters& c = model->counters();
  c.pending->Increment();
  Error e = model->check(request);
  for (size_t i = 0; e.ok() && i < request.inputs.size(); ++i) {
    InputTensor& in = request.inputs[i];
    if (!in.fill) continue;
    e = in.fill(in);
    if (e.ok() && in.size != in.expected_bytes)
      e = error(Code::kInvalidArgument,
                fmt::format("input '{}': {} bytes of data, but {} {} takes {}", in.name,
                            in.size, in.datatype, shape_to_string(in.shape), in.expected_bytes));
  }
  if (e.ok()) e = model->infer(request, response);
  c.pending->Decrement();
  (e.ok() ? c.success : c.failure)->Increment();
  c.request_us->Increment(us_since(t0));
  return e;
}

}  // namespace backplane::serve
