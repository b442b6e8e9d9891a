// backplane-serve: the Open Inference Protocol over HTTP and gRPC
// (docs/serving.md). `backplane serve ARGS` runs this program.
#include "grpc_frontend.hpp"
#include "http_frontend.hpp"
#include "server.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string item = s.substr(start, comma == std::string::npos ? comma : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace backplane::serve;
  CLI::App app{"backplane-serve: serve models over the Open Inference Protocol (KServe V2), "
               "REST and gRPC"};
  ServerOptions o;
  std::vector<std::string> models;
  std::string host = "0.0.0.0", backends;
  int http_port = 8000, grpc_port = 8001, http_threads = 64;
  app.add_option("--model-repository", o.model_repository,
                 "Serve DIR/<model>/<version>/model.onnx|model.bpk (newest version of each), "
                 "each model configured by DIR/<model>/config.json");
  app.add_option("--model", models, "Serve one model: NAME=PATH (repeatable), as version 1");
  app.add_option("--host", host, "Address to listen on")->capture_default_str();
  app.add_option("--http-port", http_port, "REST port (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--grpc-port", grpc_port, "gRPC port (0 = any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "Threads per backend for each model (0 = backend default; a model's "
                 "config.json may say otherwise)")
      ->check(CLI::Range(0, backplane::max_threads()));
  app.add_option("--backends", backends, "Backend preference for every model, comma-separated");
  app.add_option("--http-threads", http_threads,
                 "REST connections served at once (a kept-alive connection holds one of "
                 "these threads while it is open)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--max-request-bytes", o.max_request_bytes,
                 "Largest request body or gRPC message accepted")
      ->check(CLI::Range(size_t{1} << 10, size_t{1} << 34))
      ->capture_default_str();
  std::string backend_path, log_level = "warn";
  bool no_dynamic = false;
  std::vector<std::string> backend_config;
  app.add_option("--backend-path", backend_path,
                 "Directory of dynamic backends (overrides every other source)");
  app.add_flag("--no-dynamic-backends", no_dynamic, "Do not load dynamic backends");
  app.add_option("--backend-config", backend_config,
                 "Set a backend's key: BACKEND.KEY=VALUE (repeatable; docs/performance.md)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  o.backends = split_commas(backends);
  if (!backend_path.empty()) o.runtime.backend_path = backend_path;
  o.runtime.dynamic_backends = !no_dynamic;
  const std::vector<std::string> levels{"trace", "debug", "info", "warn", "error", "off"};
  for (size_t i = 0; i < levels.size(); ++i)
    if (levels[i] == log_level) o.runtime.log_level = static_cast<backplane::LogLevel>(i);
  for (const std::string& c : backend_config) {
    const size_t dot = c.find('.'), eq = c.find('=');
    if (dot == std::string::npos || eq == std::string::npos || dot == 0 || eq < dot + 2) {
      std::fprintf(stderr, "backplane-serve: --backend-config %s: expected BACKEND.KEY=VALUE\n",
                   c.c_str());
      return 2;
    }
    o.runtime.backend_config[c.substr(0, dot)][c.substr(dot + 1, eq - dot - 1)] =
        c.substr(eq + 1);
  }
  for (const std::string& m : models) {
    const size_t eq = m.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == m.size()) {
      std::fprintf(stderr, "backplane-serve: --model %s: expected NAME=PATH\n", m.c_str());
      return 2;
    }
    o.models.emplace_back(m.substr(0, eq), m.substr(eq + 1));
  }

  // SIGINT and SIGTERM stop the server: blocked in every thread (the front
  // ends' threads inherit the mask) and taken by sigwait below, so no handler
  // runs inside the libraries' threads.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto server = InferenceServer::create(o);
  if (!server.ok()) {
    std::fprintf(stderr, "backplane-serve: %s\n", server.status().message().c_str());
    return 1;
  }
  for (const RepositoryEntry& e : (*server)->repository_index())
    std::printf("backplane-serve: model %s version %s: %s%s%s\n", e.name.c_str(),
                e.version.empty() ? "-" : e.version.c_str(), e.state.c_str(),
                e.reason.empty() ? "" : ": ", e.reason.c_str());
  auto http = start_http(**server, host, http_port, http_threads);
  if (!http.ok()) {
    std::fprintf(stderr, "backplane-serve: %s\n", http.status().message().c_str());
    return 1;
  }
  auto grpc = start_grpc(**server, fmt::format("{}:{}", host, grpc_port), o.max_request_bytes);
  if (!grpc.ok()) {
    std::fprintf(stderr, "backplane-serve: %s\n", grpc.status().message().c_str());
    return 1;
  }
  std::printf("backplane-serve: HTTP on %s:%d\n", host.c_str(), (*http)->port());
  std::printf("backplane-serve: gRPC on %s:%d\n", host.c_str(), (*grpc)->port());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::printf("backplane-serve: %s, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
  std::fflush(stdout);
  (**server).begin_shutdown();
  (*grpc)->shutdown();
  (*http)->shutdown();
  return 0;
}
