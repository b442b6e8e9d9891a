// profiler.hpp — what a profiled session records: timed spans (a run, a
// stage, a partition, a copy, a specialisation build, a backend's node),
// written as Chrome trace-event JSON and summed by operator type and by
// backend (Session::start_profiling / end_profiling, `backplane run
// --profile`).
//
// A Recorder belongs to one session. While that session runs, the Recorder
// is the thread's current one (Recorder::Use), so that work done on the
// run's behalf deeper down (a specialisation built, a stage's own session
// run) records into it without being handed it. A Span opened while no
// Recorder is current costs one thread-local read.
//
// Thread-safety: a Recorder may be added to from any thread.
#pragma once

#include <backplane/backend_abi.h>
#include <backplane/runtime.hpp>
#include <backplane/status.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace backplane::profile {

// Nanoseconds of std::chrono::steady_clock: the clock of every span, and the
// host table's clock_ns.
uint64_t now_ns();

// What a span is (Chrome's "cat"): the summary sums spans by it.
enum class Kind { kRun, kStage, kPartition, kCopy, kBuild, kNode, kOther };
const char* kind_name(Kind kind);

struct Event {
  Kind kind = Kind::kOther;
  std::string name;
  uint64_t begin_ns = 0, end_ns = 0;
  uint32_t thread = 0;  // small per-thread number, first come first numbered
  std::vector<std::pair<std::string, std::string>> args;
};

class Recorder {
 public:
  // The trace goes to `path` at write(). Fails now, naming the path, when
  // it cannot be written there (so a run's outputs never wait on it).
  static Result<std::unique_ptr<Recorder>> open(const std::string& path);

  void add(Event event);
  // Writes the trace (atomically: a reader never sees half of it).
  Status write() const;
  ProfileSummary summary() const;
  const std::string& path() const { return path_; }

  // The thread's current Recorder, or null.
  static Recorder* current();
  // Makes `recorder` (may be null) the thread's current one for its lifetime.
  class Use {
   public:
    explicit Use(Recorder* recorder);
    ~Use();
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    Recorder* previous_;
  };

 private:
  explicit Recorder(std::string path) : path_(std::move(path)) {}
  std::string path_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

// A span recorded into the thread's current Recorder (none: nothing) when
// it ends. `name` is made only when recording.
class Span {
 public:
  template <typename MakeName>
  Span(Kind kind, MakeName&& make_name) : recorder_(Recorder::current()) {
    if (recorder_ == nullptr) return;
    event_.kind = kind;
    event_.name = make_name();
    event_.begin_ns = now_ns();
  }
  ~Span() { end(); }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

  bool recording() const { return recorder_ != nullptr; }
  void arg(std::string key, std::string value) {
    if (recorder_ != nullptr) event_.args.emplace_back(std::move(key), std::move(value));
  }
  void end();
  void cancel() { recorder_ = nullptr; }  // records nothing

 private:
  Recorder* recorder_;
  Event event_;
};

// A session's side of profiling: Session::start_profiling / end_profiling,
// and the scope of each run.
class SessionProfile {
 public:
  SessionProfile() = default;
  ~SessionProfile();  // writes a trace still being recorded
  SessionProfile(const SessionProfile&) = delete;
  SessionProfile& operator=(const SessionProfile&) = delete;

  Status start(const std::string& path);
  Result<ProfileSummary> end();

  // For the length of a run: the session's recorder is the thread's, and
  // the run is a span. A session that is not profiling (a stage's own
  // session) records into its caller's recorder, with no run span: the
  // caller's spans cover it.
  class Run {
   public:
    explicit Run(SessionProfile& profile);

   private:
    Recorder::Use use_;
    Span span_;
  };

 private:
  std::unique_ptr<Recorder> recorder_;
};

}  // namespace backplane::profile

// The host's side of bp_profile_t: a profiled execute_shaped's partition.
struct bp_profile {
  backplane::profile::Recorder* recorder = nullptr;
  const bp_graph_view_t* view = nullptr;
  const char* backend = "";
};
