// profiler.cpp — spans, the trace file and the summary (profiler.hpp).
#include "core/profiler.hpp"

#include "core/atomic_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

namespace backplane {
namespace profile {
namespace {

thread_local Recorder* t_current = nullptr;

uint32_t thread_number() {
  static std::atomic<uint32_t> next{1};
  thread_local const uint32_t mine = next.fetch_add(1);
  return mine;
}

double ms(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

// Rows largest first, each with its share of `total_ms`.
std::vector<ProfileSummary::Row> rows(const std::map<std::string, ProfileSummary::Row>& by,
                                      double total_ms) {
  std::vector<ProfileSummary::Row> out;
  for (const auto& [name, row] : by) {
    out.push_back(row);
    out.back().name = name;
    out.back().share = total_ms > 0 ? row.ms / total_ms : 0;
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.ms > b.ms; });
  return out;
}

void add_to(std::map<std::string, ProfileSummary::Row>& by, const std::string& name, double t) {
  ProfileSummary::Row& row = by[name];
  row.count += 1;
  row.ms += t;
}

std::string arg_of(const Event& e, const std::string& key) {
  for (const auto& [k, v] : e.args)
    if (k == key) return v;
  return {};
}

// True if `inner` lies within `outer` on the same thread.
bool within(const Event& inner, const Event& outer) {
  return inner.thread == outer.thread && inner.begin_ns >= outer.begin_ns &&
         inner.end_ns <= outer.end_ns;
}
}  // namespace

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kRun: return "run";
    case Kind::kStage: return "stage";
    case Kind::kPartition: return "partition";
    case Kind::kCopy: return "copy";
    case Kind::kBuild: return "specialisation";
    case Kind::kNode: return "node";
    case Kind::kOther: break;
  }
  return "other";
}

Result<std::unique_ptr<Recorder>> Recorder::open(const std::string& path) {
  if (path.empty()) return invalid_argument("profile: no path given for the trace");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument("profile: " + path + " is a directory, not a file for the trace");
  // A temporary file beside the path, removed at once: the directory exists
  // and can be written.
  Result<AtomicFile> probe = AtomicFile::create(path);
  if (!probe.ok()) return Status(probe.status()).with_context("profile: cannot write the trace");
  return std::unique_ptr<Recorder>(new Recorder(path));
}

void Recorder::add(Event event) {
  event.thread = event.thread != 0 ? event.thread : thread_number();
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(event));
}

Status Recorder::write() const {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = events_;
  }
  uint64_t origin = UINT64_MAX;
  for (const Event& e : events) origin = std::min(origin, e.begin_ns);
  // Enclosing spans first at equal starts, so viewers nest them.
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.begin_ns != b.begin_ns ? a.begin_ns < b.begin_ns : a.end_ns > b.end_ns;
  });
  nlohmann::json trace = nlohmann::json::array();
  std::vector<uint32_t> threads;
  for (const Event& e : events) {
    nlohmann::json j = {{"name", e.name},
                        {"cat", kind_name(e.kind)},
                        {"ph", "X"},
                        {"pid", 1},
                        {"tid", e.thread},
                        {"ts", static_cast<double>(e.begin_ns - origin) / 1e3},
                        {"dur", static_cast<double>(e.end_ns - e.begin_ns) / 1e3}};
    if (!e.args.empty()) {
      nlohmann::json args = nlohmann::json::object();
      for (const auto& [k, v] : e.args) args[k] = v;
      j["args"] = std::move(args);
    }
    trace.push_back(std::move(j));
    if (std::find(threads.begin(), threads.end(), e.thread) == threads.end())
      threads.push_back(e.thread);
  }
  trace.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1},
                   {"args", {{"name", "Backplane"}}}});
  for (uint32_t t : threads)
    trace.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", t},
                     {"args", {{"name", "thread " + std::to_string(t)}}}});
  nlohmann::json doc = {{"traceEvents", std::move(trace)}, {"displayTimeUnit", "ms"}};
  return write_file_atomically(path_, doc.dump(1) + "\n")
      .with_context("profile: writing the trace");
}

ProfileSummary Recorder::summary() const {
  std::vector<Event> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    events = events_;
  }
  ProfileSummary s;
  s.path = path_;
  std::map<std::string, ProfileSummary::Row> backend, op;
  std::vector<const Event*> runs, containers, nodes;  // nodes by start
  for (const Event& e : events) {
    if (e.kind == Kind::kRun) runs.push_back(&e);
    if (e.kind == Kind::kPartition || e.kind == Kind::kCopy || e.kind == Kind::kBuild)
      containers.push_back(&e);
    if (e.kind == Kind::kNode) nodes.push_back(&e);
  }
  std::stable_sort(nodes.begin(), nodes.end(),
                   [](const Event* a, const Event* b) { return a->begin_ns < b->begin_ns; });
  // Only what lies within a run counts (a specialisation built at load,
  // before the first run, is in the trace but in no run's time).
  auto in_a_run = [&](const Event& e) {
    return std::any_of(runs.begin(), runs.end(), [&](const Event* r) { return within(e, *r); });
  };
  double accounted = 0;
  for (const Event* r : runs) {
    ++s.runs;
    s.run_ms += ms(r->end_ns - r->begin_ns);
  }
  // A partition inside a specialisation build (a warm-up run) or inside
  // another partition (a stage's own session) is counted once, outermost.
  auto nested = [&](const Event& e) {
    return std::any_of(containers.begin(), containers.end(), [&](const Event* o) {
      return o != &e && within(e, *o) && (o->begin_ns != e.begin_ns || o->end_ns != e.end_ns);
    });
  };
  for (const Event& e : events) {
    if (e.kind != Kind::kPartition && e.kind != Kind::kCopy && e.kind != Kind::kBuild) continue;
    if (!in_a_run(e) || nested(e)) continue;
    const double t = ms(e.end_ns - e.begin_ns);
    if (e.kind == Kind::kPartition) {
      const std::string b = arg_of(e, "backend");
      add_to(backend, b, t);
      accounted += t;
      bool timed = false;
      auto n = std::lower_bound(nodes.begin(), nodes.end(), e.begin_ns,
                                [](const Event* x, uint64_t t) { return x->begin_ns < t; });
      for (; n != nodes.end() && (*n)->begin_ns <= e.end_ns && !timed; ++n)
        timed = within(**n, e) && arg_of(**n, "backend") == b;
      if (!timed) add_to(op, b + " (nodes not timed)", t);
    } else if (e.kind == Kind::kCopy) {
      add_to(backend, "copies", t);
      accounted += t;
    } else if (e.kind == Kind::kBuild) {
      add_to(backend, "specialisation builds", t);
      accounted += t;
    }
  }
  for (const Event* n : nodes)
    if (in_a_run(*n)) add_to(op, n->name, ms(n->end_ns - n->begin_ns));
  if (s.runs > 0) {
    ProfileSummary::Row& rest = backend["session"];
    rest.count = s.runs;
    rest.ms = std::max(0.0, s.run_ms - accounted);
  }
  s.by_backend = rows(backend, s.run_ms);
  s.by_op_type = rows(op, s.run_ms);
  return s;
}

Recorder* Recorder::current() { return t_current; }

Recorder::Use::Use(Recorder* recorder) : previous_(t_current) { t_current = recorder; }
Recorder::Use::~Use() { t_current = previous_; }

void Span::end() {
  if (recorder_ == nullptr) return;
  event_.end_ns = now_ns();
  recorder_->add(std::move(event_));
  recorder_ = nullptr;
}

SessionProfile::~SessionProfile() {
  if (recorder_ == nullptr) return;
  Status written = recorder_->write();
  if (!written.ok()) std::fprintf(stderr, "warning: %s\n", written.message().c_str());
}

Status SessionProfile::start(const std::string& path) {
  BP_ASSIGN_OR_RETURN(std::unique_ptr<Recorder> recorder, Recorder::open(path));
  if (recorder_ != nullptr) BP_RETURN_IF_ERROR(recorder_->write());  // the previous trace ends
  recorder_ = std::move(recorder);
  return ok_status();
}

Result<ProfileSummary> SessionProfile::end() {
  if (recorder_ == nullptr)
    return invalid_argument("this session is not profiling (start_profiling first)");
  std::unique_ptr<Recorder> recorder = std::move(recorder_);
  BP_RETURN_IF_ERROR(recorder->write());
  return recorder->summary();
}

SessionProfile::Run::Run(SessionProfile& profile)
    : use_(profile.recorder_ != nullptr ? profile.recorder_.get() : Recorder::current()),
      span_(Kind::kRun, [] { return std::string("run"); }) {
  if (profile.recorder_ == nullptr) span_.cancel();
}

}  // namespace profile

std::string ProfileSummary::to_string() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "profile    %llu run(s), %.3f ms in all; trace %s\n",
                static_cast<unsigned long long>(runs), run_ms, path.c_str());
  out += line;
  auto table = [&](const char* title, const std::vector<Row>& rows) {
    if (rows.empty()) return;
    std::snprintf(line, sizeof line, "  %-32s %10s %7s %8s\n", title, "ms", "share", "count");
    out += line;
    for (const Row& r : rows) {
      std::snprintf(line, sizeof line, "  %-32s %10.3f %6.1f%% %8llu\n", r.name.c_str(), r.ms,
                    100 * r.share, static_cast<unsigned long long>(r.count));
      out += line;
    }
  };
  table("by backend", by_backend);
  table("by operator type", by_op_type);
  return out;
}

}  // namespace backplane
