// backplane_serve_inprocess_bench — the in-process peer of the serving load
// benchmark (bench/serve_bench.py): the same model, run through the public
// C++ API by C client threads at once for a fixed time, as backplane-serve
// runs it for C concurrent clients, without the transport.
//
//   backplane_serve_inprocess_bench MODEL [--threads T] [--concurrency C]
//       [--duration S] [--warmup S] [--sessions N] [--shape NAME=DIMS]...
//       [--think-us US] [--backends LIST] [--backend-path DIR]
//
// --threads: RuntimeOptions::num_threads (default 2).
// --sessions: 0 (the default) gives every client thread a session of its
//   own; N > 0 makes the C threads share N sessions through a mutex-protected
//   pool, a thread waiting for a free one as a request waits in the server
//   for one of its "instances" (which run on threads of their own there):
//   the peer of a server with instances = N.
//   The pool hands a released session to the longest waiting thread.
// --shape: the dims of an input with open dims (e.g. input=1x3x224x224);
//   also what the model is specialised for at load, as the server's
//   config.json "input_shapes" does. Fixed inputs need none.
// --think-us: a pause between one thread's requests (not timed), as a remote
//   client's round trip leaves the cores idle between requests (default 0).
// Each request does what backplane-serve's ServedModel::infer does with a
// session: set_input (a copy) of every input, run, get_output and a copy of
// every output. The inputs are one fixed random tensor per input: float
// inputs standard normal, integer inputs uniform in [0, 100).
// Every session runs once (on a client thread) before the clock starts; then
// all threads run for --warmup seconds unrecorded and --duration seconds
// recorded. A request counts if it completes inside the recorded window; its
// latency includes the wait for a pooled session. Prints one JSON object:
//   {"throughput": req/s, "p50_ms", "p99_ms", "mean_ms", "max_ms",
//    "requests", "concurrency", "threads", "sessions", "session_mode",
//    "duration_s", "think_us", "model"}
#include <backplane/runtime.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace bp = backplane;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string model;
  int threads = 2;
  int concurrency = 1;
  double duration_s = 5.0;
  double warmup_s = 1.0;
  int sessions = 0;
  double think_us = 0;
  std::map<std::string, bp::Shape> shapes;
  std::vector<std::string> backends;
  std::string backend_path;
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "backplane_serve_inprocess_bench: %s\n", message.c_str());
  std::exit(1);
}

template <class T>
T check(bp::Result<T> r, const std::string& what) {
  if (!r.ok()) die(what + ": " + r.status().message());
  return std::move(r).value();
}
void check(const bp::Status& s, const std::string& what) {
  if (!s.ok()) die(what + ": " + s.message());
}

std::vector<std::string> split(const std::string& s, const std::string& seps) {
  std::vector<std::string> out;
  std::string item;
  for (char c : s) {
    if (seps.find(c) != std::string::npos) {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else {
      item += c;
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

double number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(d) || d < 0)
    die(flag + ": '" + v + "' is not a number >= 0");
  return d;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      if (!o.model.empty()) die("one MODEL only (got '" + o.model + "' and '" + arg + "')");
      o.model = arg;
      continue;
    }
    if (i + 1 >= argc) die(arg + " needs a value");
    const std::string v = argv[++i];
    if (arg == "--threads") {
      o.threads = static_cast<int>(number(arg, v));
    } else if (arg == "--concurrency") {
      o.concurrency = static_cast<int>(number(arg, v));
      if (o.concurrency < 1) die("--concurrency must be at least 1");
    } else if (arg == "--duration") {
      o.duration_s = number(arg, v);
      if (o.duration_s <= 0) die("--duration must be positive");
    } else if (arg == "--warmup") {
      o.warmup_s = number(arg, v);
    } else if (arg == "--think-us") {
      o.think_us = number(arg, v);
    } else if (arg == "--sessions") {
      o.sessions = static_cast<int>(number(arg, v));
    } else if (arg == "--shape") {
      const size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) die("--shape " + v + ": expected NAME=DIMS");
      bp::Shape shape;
      for (const std::string& d : split(v.substr(eq + 1), "x,")) {
        char* end = nullptr;
        const long long n = std::strtoll(d.c_str(), &end, 10);
        if (*end != '\0' || n < 0) die("--shape " + v + ": '" + d + "' is not a size");
        shape.push_back(n);
      }
      o.shapes[v.substr(0, eq)] = shape;
    } else if (arg == "--backends") {
      o.backends = split(v, ",");
    } else if (arg == "--backend-path") {
      o.backend_path = v;
    } else {
      die("unknown option " + arg + " (see the source's header)");
    }
  }
  if (o.model.empty()) die("usage: backplane_serve_inprocess_bench MODEL [options]");
  return o;
}

// A fixed random tensor for one input: float normal, integers in [0, 100).
bp::Tensor make_input(const bp::TensorInfo& info, const bp::Shape& shape, uint64_t seed) {
  bp::Tensor t(info.dtype, shape);
  std::mt19937_64 rng(seed);
  const size_t n = static_cast<size_t>(t.numel());
  std::normal_distribution<double> normal;
  std::uniform_int_distribution<int64_t> ints(0, 99);
  auto fill = [&](auto* p, auto gen) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<std::remove_pointer_t<decltype(p)>>(gen());
  };
  switch (info.dtype) {
    case bp::DType::kFloat32:
      fill(static_cast<float*>(t.data()), [&] { return normal(rng); });
      break;
    case bp::DType::kFloat64:
      fill(static_cast<double*>(t.data()), [&] { return normal(rng); });
      break;
    case bp::DType::kInt64:
      fill(static_cast<int64_t*>(t.data()), [&] { return ints(rng); });
      break;
    case bp::DType::kInt32:
      fill(static_cast<int32_t*>(t.data()), [&] { return ints(rng); });
      break;
    default:
      die("input '" + info.name + "' is " + bp::dtype_name(info.dtype) +
          "; this benchmark makes float32/float64/int32/int64 inputs");
  }
  return t;
}

// Sessions shared by the client threads, as the server shares its
// instances; a released session goes to the longest waiting thread (first
// come, first served), so no thread starves however tight its loop.
class Pool {
 public:
  explicit Pool(size_t n) {
    for (size_t i = n; i-- > 0;) free_.push_back(i);
  }
  size_t acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!free_.empty() && waiters_.empty()) {
      const size_t i = free_.back();
      free_.pop_back();
      return i;
    }
    Waiter w;
    waiters_.push_back(&w);
    w.cv.wait(lock, [&] { return w.given; });
    return w.index;
  }
  void release(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    if (waiters_.empty()) {
      free_.push_back(i);
      return;
    }
    Waiter* w = waiters_.front();
    waiters_.pop_front();
    w->index = i;
    w->given = true;
    w->cv.notify_one();
  }

 private:
  struct Waiter {
    std::condition_variable cv;
    size_t index = 0;
    bool given = false;
  };
  std::mutex mu_;
  std::vector<size_t> free_;
  std::deque<Waiter*> waiters_;
};

double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  // Nearest rank, as wrk's latency:percentile reports it.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  rank = std::clamp<size_t>(rank, 1, sorted.size());
  return sorted[rank - 1];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  bp::RuntimeOptions ro;
  ro.num_threads = o.threads;
  if (!o.backend_path.empty()) ro.backend_path = o.backend_path;
  auto rt = check(bp::Runtime::create(ro), "Runtime::create");
  bp::ModelOptions mo;
  mo.backends = o.backends;
  mo.input_shapes = o.shapes;
  auto model = check(rt->load_model(o.model, mo), o.model);

  std::vector<std::pair<std::string, bp::Tensor>> inputs;
  uint64_t seed = 12345;
  for (const bp::TensorInfo& info : model->inputs()) {
    if (info.kind != bp::TensorInfo::Kind::kTensor)
      die("input '" + info.name + "' is not a tensor");
    bp::Shape shape = info.shape;
    if (auto it = o.shapes.find(info.name); it != o.shapes.end()) shape = it->second;
    if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; })) {
      if (!info.default_value.empty()) continue;  // the model's default serves
      die("input '" + info.name + "' has open dims; give them with --shape " + info.name + "=DIMS");
    }
    inputs.emplace_back(info.name, make_input(info, shape, seed++));
  }
  std::vector<std::string> output_names;
  for (const bp::TensorInfo& info : model->outputs()) output_names.push_back(info.name);

  const size_t n_sessions =
      o.sessions > 0 ? static_cast<size_t>(o.sessions) : static_cast<size_t>(o.concurrency);
  std::vector<std::unique_ptr<bp::Session>> sessions;
  for (size_t i = 0; i < n_sessions; ++i)
    sessions.push_back(check(model->create_session(), "create_session"));
  Pool pool(n_sessions);

  auto infer = [&](bp::Session& s, std::vector<bp::Tensor>& outs) {
    for (const auto& [name, t] : inputs) check(s.set_input(name, t), "set_input " + name);
    check(s.run(), "run");
    outs.clear();
    for (const std::string& name : output_names)
      outs.push_back(check(s.get_output(name), "get_output " + name).clone());
  };

  // The clock starts once every client thread has made its sessions' first
  // runs.
  std::mutex start_mu;
  std::condition_variable start_cv;
  int ready = 0;
  bool go = false;
  Clock::time_point record_from, record_until;
  std::vector<std::vector<double>> latencies(static_cast<size_t>(o.concurrency));
  std::vector<std::thread> clients;
  for (int c = 0; c < o.concurrency; ++c) {
    clients.emplace_back([&, c] {
      std::vector<bp::Tensor> outs;
      std::vector<double>& mine = latencies[static_cast<size_t>(c)];
      // Each session's first run is made here, not on the main thread: with
      // OpenMP every thread that calls run() keeps a team of its own, and
      // one team more than the client threads' (more OpenMP threads than
      // cores) makes libgomp stop spinning at its barriers.
      for (size_t i = static_cast<size_t>(c); i < n_sessions;
           i += static_cast<size_t>(o.concurrency))
        infer(*sessions[i], outs);
      {
        std::unique_lock<std::mutex> lock(start_mu);
        ++ready;
        start_cv.notify_all();
        start_cv.wait(lock, [&] { return go; });
      }
      for (;;) {
        const auto t0 = Clock::now();
        if (t0 >= record_until) break;
        if (o.sessions > 0) {
          const size_t i = pool.acquire();
          infer(*sessions[i], outs);
          pool.release(i);
        } else {
          infer(*sessions[static_cast<size_t>(c)], outs);
        }
        const auto t1 = Clock::now();
        if (t1 >= record_from && t1 < record_until)
          mine.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        if (o.think_us > 0)
          std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(o.think_us));
      }
    });
  }
  {
    std::unique_lock<std::mutex> lock(start_mu);
    start_cv.wait(lock, [&] { return ready == o.concurrency; });
    record_from = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.warmup_s));
    record_until = record_from + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.duration_s));
    go = true;
  }
  start_cv.notify_all();
  for (std::thread& t : clients) t.join();

  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  double sum = 0;
  for (double v : all) sum += v;
  json r = {{"model", o.model},
            {"threads", o.threads},
            {"concurrency", o.concurrency},
            {"sessions", n_sessions},
            {"session_mode", o.sessions > 0 ? "pool" : "per-thread"},
            {"duration_s", o.duration_s},
            {"think_us", o.think_us},
            {"requests", all.size()},
            {"throughput", static_cast<double>(all.size()) / o.duration_s},
            {"p50_ms", percentile(all, 50)},
            {"p99_ms", percentile(all, 99)},
            {"mean_ms", all.empty() ? 0.0 : sum / static_cast<double>(all.size())},
            {"max_ms", all.empty() ? 0.0 : all.back()}};
  std::cout << r.dump() << std::endl;
  return 0;
}
