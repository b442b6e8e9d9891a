// backplane_bench — Backplane side of `make bench`, driven by run_bench.py.
//
//   backplane_bench        dynamic MODEL.onnx|MODEL.bpk INPUT.npy THREADS [BACKEND_DIR [lazy]]
//   backplane_bench_static static  MODEL.onnx INPUT.npy THREADS
//
// dynamic: the public API, exactly what an application does; CpuOneDnn comes
//          from Backplane_CpuOneDnn_backend.so in BACKEND_DIR.
// static:  the same pipeline with CpuOneDnn linked in (backplane_backend_CpuOneDnn)
//          and registered by hand through the runtime's internal registry, so
//          the two differ only in how the backend's function table was obtained.
//          (OpenMP is then loaded at start-up rather than with the plugin;
//          neither build sets an OpenMP variable: both take the environment's.)
// MODEL may be an .onnx file or a compiled .bpk (dynamic mode; "lazy" loads
// it with lazy checksums).
// Protocol (the same as ort_runner.js): prints {"ready", "load_ms", ...} once
// the first result exists (ready_ms: start to a ready session; runtime_ms: of
// that, Runtime::create; first_ms: the first inference alone; load_ms: start
// to first result, ready_ms + first_ms; ready_rss_kb and ready_anon_kb: VmRSS
// and RssAnon with the session ready, read outside both spans), then answers
// "run K", "save PATH" and "quit".
#include "ir/graph.hpp"
#include "pipeline/front_end.hpp"
#include "registry/registry.hpp"
#include "session/compiled_model.hpp"
#include "session/staged_model.hpp"

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>

#include "npy.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#ifdef BENCH_STATIC
namespace backplane {
namespace cpuref {
const bp_backend_api_t* static_table();
}
namespace onednn {
const bp_backend_api_t* static_table();
}
}  // namespace backplane
#endif

namespace {

using namespace backplane;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Resident memory from /proc/self/statm, read through a descriptor opened
// once: all resident pages (VmRSS) and the private ones (RssAnon: resident
// minus file-backed and shared), in kB; 0 if unknown. Cheaper than
// /proc/self/status (two of whose reads took about 0.05 ms, a sixth of the
// encoder's run, and left the first run after them 4-9% slower on the
// encoder: statm's few counters disturb the caches far less).
struct Rss {
  long kb = 0, anon_kb = 0;
};
Rss rss_now() {
  static const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  static const long page_kb = sysconf(_SC_PAGESIZE) / 1024;
  char text[128];
  const ssize_t n = fd < 0 ? -1 : pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return {};
  text[n] = '\0';
  long size = 0, resident = 0, shared = 0;
  if (std::sscanf(text, "%ld %ld %ld", &size, &resident, &shared) != 3) return {};
  return {resident * page_kb, (resident - shared) * page_kb};
}

[[noreturn]] void die(const std::string& what) {
  std::cerr << "backplane_bench: " << what << "\n";
  std::exit(1);
}

// Keeps everything a static-mode model needs alive.
struct StaticHolder {
  BackendRegistry registry;
  std::shared_ptr<Model> model;
};

#ifdef BENCH_STATIC
std::shared_ptr<Model> load_static(const std::string& path, int threads, StaticHolder& h) {
  auto add = [&](const char* id, const bp_backend_api_t* table) {
    auto b = LoadedBackend::create(id, table, "static", nullptr);
    if (!b.ok()) die(b.status().to_string());
    if (threads > 0) {
      std::string n = std::to_string(threads);
      const char* key = "num_threads";
      const char* value = n.c_str();
      Status st =
          (*b)->check((*b)->api()->configure((*b)->instance(), 1, &key, &value), "configure");
      if (!st.ok()) die(st.to_string());
    }
    Status st = h.registry.add(std::move(*b));
    if (!st.ok()) die(st.to_string());
  };
  add("CpuOneDnn", onednn::static_table());
  add("CpuRef", cpuref::static_table());
  // As Runtime::load_model does: the portable graph, run in stages when it
  // has control flow or shapes that depend on data.
  auto graph = import_portable_model(path, &h.registry);
  if (!graph.ok()) die(graph.status().to_string());
  CompiledModel::Options options;
  options.num_threads = threads;
  if (Program::needs_staging(**graph)) {
    auto staged = StagedModel::create(std::move(*graph), h.registry, options);
    if (!staged.ok()) die(staged.status().to_string());
    return *staged;
  }
  auto model = CompiledModel::create(std::move(*graph), h.registry, options);
  if (!model.ok()) die(model.status().to_string());
  return *model;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::cerr
        << "usage: backplane_bench dynamic|static MODEL.onnx INPUT.npy THREADS [BACKEND_DIR]\n";
    return 2;
  }
  const std::string mode = argv[1], model_path = argv[2], input_path = argv[3];
  const int threads = std::stoi(argv[4]);
  auto input = npy::read(input_path);
  if (!input.ok()) die(input.status().to_string());

  const Rss base = rss_now();  // before anything is loaded
  const Clock::time_point t0 = Clock::now();
  std::shared_ptr<Runtime> runtime;
  StaticHolder holder;
  std::shared_ptr<Model> model;
  double runtime_ms = 0;  // dynamic: Runtime::create (backend discovery and loading)
  if (mode == "dynamic") {
    RuntimeOptions o;
    if (argc > 5) o.backend_path = std::filesystem::absolute(argv[5]).lexically_normal().string();
    o.num_threads = threads;
    auto rt = Runtime::create(o);
    if (!rt.ok()) die(rt.status().to_string());
    runtime = *rt;
    runtime_ms = ms_since(t0);
    ModelOptions mo;
    mo.lazy_checksums = argc > 6 && std::string(argv[6]) == "lazy";
    auto m = runtime->load_model(model_path, mo);
    if (!m.ok()) die(m.status().to_string());
    model = *m;
#ifdef BENCH_STATIC
  } else if (mode == "static") {
    model = load_static(model_path, threads, holder);
#endif
  } else {
    die("mode must be dynamic or static");
  }
  auto session = model->create_session();
  if (!session.ok()) die(session.status().to_string());
  const double ready_ms = ms_since(t0);
  const Rss ready = rss_now();  // outside the timed spans
  const std::string input_name = model->inputs().at(0).name;
  auto run = [&] {
    Status st = (*session)->set_input(input_name, *input);
    if (st.ok()) st = (*session)->run();
    if (!st.ok()) die(st.to_string());
  };
  const Clock::time_point first_start = Clock::now();
  run();
  const double first_ms = ms_since(first_start);
  const double load_ms = ready_ms + first_ms;
  std::ostringstream backends;
  for (const std::string& b : model->backends_used())
    backends << (backends.tellp() > 0 ? "," : "") << b;
  std::ostringstream notes;
  for (const std::string& n : model->notes()) notes << (notes.tellp() > 0 ? "; " : "") << n;
  std::string note_text = notes.str();
  for (char& ch : note_text)
    if (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  std::printf(
      "{\"ready\": true, \"load_ms\": %.3f, \"ready_ms\": %.3f, \"first_ms\": %.4f, "
      "\"runtime_ms\": %.3f, "
      "\"base_rss_kb\": %ld, \"ready_rss_kb\": %ld, \"base_anon_kb\": %ld, \"ready_anon_kb\": %ld, "
      "\"backends\": \"%s\", \"partitions\": %zu, "
      "\"notes\": \"%s\"}\n",
      load_ms, ready_ms, first_ms, runtime_ms, base.kb, ready.kb, base.anon_kb, ready.anon_kb,
      backends.str().c_str(), model->partitions().size(), note_text.c_str());
  std::fflush(stdout);

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd, arg;
    in >> cmd >> arg;
    if (cmd == "run") {
      const int k = std::stoi(arg);
      std::string out = "{\"times_ms\": [";
      for (int i = 0; i < k; ++i) {
        const Clock::time_point s = Clock::now();
        run();
        char buf[32];
        std::snprintf(buf, sizeof buf, "%s%.4f", i ? ", " : "", ms_since(s));
        out += buf;
      }
      std::printf("%s]}\n", out.c_str());
    } else if (cmd == "save") {
      Status st = npy::write(arg, (*session)->output(0));
      if (!st.ok()) die(st.to_string());
      std::printf("{\"saved\": \"%s\"}\n", arg.c_str());
    } else if (cmd == "quit") {
      break;
    } else {
      std::printf("{\"error\": \"unknown command\"}\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
