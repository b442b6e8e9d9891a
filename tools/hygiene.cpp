// hygiene.cpp — the backend hygiene contract (hygiene.hpp): the process state
// a backend must leave alone, captured before and after each step.
#include "hygiene.hpp"

#include <dirent.h>
#include <fenv.h>
#include <locale.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace backplane::cli {
namespace {

namespace fs = std::filesystem;

// The state of this process and of the calling thread that the contract covers.
struct ProcessState {
  std::vector<std::string> environment;  // sorted NAME=VALUE
  std::string affinity;                  // the calling thread's CPUs, "0,1"
  std::string blocked;                   // the calling thread's blocked signals
  std::map<int, std::string> handlers;   // signal -> disposition and flags
  std::string fp;                        // rounding, traps, FTZ/DAZ
  std::string locale;                    // global LC_ALL, and the thread's own
  std::string cwd;
  std::string umask;
  std::set<long> threads;  // task ids of the process
};

std::string cpus_of(const cpu_set_t& set) {
  std::string s;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) s += (s.empty() ? "" : ",") + std::to_string(c);
  return s.empty() ? "none" : s;
}

std::string thread_affinity(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(tid, sizeof set, &set) != 0) return std::string("unknown: ") + std::strerror(errno);
  return cpus_of(set);
}

std::string read_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0) return line.substr(line.find_first_not_of(" \t", 6));
  // Without /proc: umask can only be read by setting it; this process is
  // single-threaded here (the runtime of the step is not running).
  const mode_t m = ::umask(0);
  ::umask(m);
  std::ostringstream os;
  os << std::oct << m;
  return os.str();
}

std::set<long> task_ids() {
  std::set<long> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ids.insert(std::strtol(e->d_name, nullptr, 10));
    closedir(d);
  }
  return ids;
}

ProcessState capture() {
  ProcessState s;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) s.environment.emplace_back(*e);
  std::sort(s.environment.begin(), s.environment.end());
  s.affinity = thread_affinity(0);
  sigset_t set;
  sigemptyset(&set);
  pthread_sigmask(SIG_BLOCK, nullptr, &set);
  for (int sig = 1; sig < NSIG; ++sig)
    if (sigismember(&set, sig) == 1) s.blocked += (s.blocked.empty() ? "" : ",") + std::to_string(sig);
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction sa {};
    if (sig == SIGKILL || sig == SIGSTOP || sigaction(sig, nullptr, &sa) != 0) continue;
    std::ostringstream os;
    const bool info = (sa.sa_flags & SA_SIGINFO) != 0;
    const void* h = info ? reinterpret_cast<void*>(sa.sa_sigaction) : reinterpret_cast<void*>(sa.sa_handler);
    if (!info && sa.sa_handler == SIG_DFL) os << "default";
    else if (!info && sa.sa_handler == SIG_IGN) os << "ignored";
    else os << "handler " << h;
    os << " flags 0x" << std::hex << sa.sa_flags;
    s.handlers[sig] = os.str();
  }
  std::ostringstream fp;
  const int round = fegetround();
  fp << "rounding " << (round == FE_TONEAREST ? "to nearest" : round == FE_DOWNWARD ? "down"
                        : round == FE_UPWARD   ? "up"
                        : round == FE_TOWARDZERO ? "toward zero" : "unknown");
  fp << ", traps 0x" << std::hex << fegetexcept();
#if defined(__x86_64__) || defined(__i386__)
  const unsigned csr = _mm_getcsr();
  fp << ", FTZ " << ((csr & 0x8000) ? "on" : "off") << ", DAZ " << ((csr & 0x0040) ? "on" : "off");
#endif
  s.fp = fp.str();
  const char* global = setlocale(LC_ALL, nullptr);
  s.locale = std::string(global ? global : "?") +
             (uselocale(static_cast<locale_t>(nullptr)) == LC_GLOBAL_LOCALE ? "" : ", thread locale set");
  std::error_code ec;
  s.cwd = fs::current_path(ec).string();
  s.umask = read_umask();
  s.threads = task_ids();
  return s;
}

std::string signal_name(int sig) {
  const char* d = sigdescr_np(sig);
  return "signal " + std::to_string(sig) + (d ? std::string(" (") + d + ")" : "");
}

// "" when `rule` holds between `a` and `b`, else what changed.
std::string differs(const std::string& rule, const ProcessState& a, const ProcessState& b) {
  auto changed = [](const std::string& x, const std::string& y) {
    return x == y ? std::string() : "'" + x + "' became '" + y + "'";
  };
  if (rule == "environment") {
    std::vector<std::string> gone, added;
    std::set_difference(a.environment.begin(), a.environment.end(), b.environment.begin(),
                        b.environment.end(), std::back_inserter(gone));
    std::set_difference(b.environment.begin(), b.environment.end(), a.environment.begin(),
                        a.environment.end(), std::back_inserter(added));
    std::string s;
    for (const std::string& v : added) s += (s.empty() ? "" : "; ") + std::string("set ") + v;
    for (const std::string& v : gone) s += (s.empty() ? "" : "; ") + std::string("removed ") + v;
    return s;
  }
  if (rule == "affinity") return changed(a.affinity, b.affinity);
  if (rule == "signal mask") return changed(a.blocked, b.blocked);
  if (rule == "signal handlers") {
    for (const auto& [sig, what] : b.handlers) {
      auto it = a.handlers.find(sig);
      if (it != a.handlers.end() && it->second != what)
        return signal_name(sig) + ": " + changed(it->second, what);
    }
    return "";
  }
  if (rule == "floating point") return changed(a.fp, b.fp);
  if (rule == "locale") return changed(a.locale, b.locale);
  if (rule == "working directory") return changed(a.cwd, b.cwd);
  if (rule == "umask") return changed(a.umask, b.umask);
  return "";
}

const std::vector<std::string>& state_rules() {
  static const std::vector<std::string> rules = {
      "environment", "affinity", "signal mask",       "signal handlers",
      "floating point", "locale", "working directory", "umask"};
  return rules;
}

// The registered backends as "id source" pairs, listed by a child process so
// that this one loads nothing.
Result<std::vector<std::pair<std::string, std::string>>> list_backends(const RuntimeOptions& options) {
  int fds[2];
  if (pipe(fds) != 0) return Status(StatusCode::kInternal, std::string("pipe: ") + std::strerror(errno));
  const pid_t child = fork();
  if (child < 0) return Status(StatusCode::kInternal, std::string("fork: ") + std::strerror(errno));
  if (child == 0) {
    close(fds[0]);
    std::string out;
    if (auto rt = Runtime::create(options); rt.ok())
      for (const BackendDescription& d : (*rt)->backends()) out += d.id + '\t' + d.source + '\n';
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(fds[1], out.data() + done, out.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  std::vector<std::pair<std::string, std::string>> backends;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) backends.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  if (backends.empty())
    return Status(StatusCode::kInternal, "the child process listing the backends found none");
  return backends;
}

// Polls the affinity of thread `tid` until stopped; keeps the first change.
class AffinityWatch {
 public:
  explicit AffinityWatch(pid_t tid, std::string expected)
      : tid_(tid), expected_(std::move(expected)), thread_([this] { watch(); }) {}
  ~AffinityWatch() { stop(); }
  std::string stop() {
    if (thread_.joinable()) {
      stop_ = true;
      thread_.join();
    }
    return seen_;
  }

 private:
  void watch() {
    while (!stop_ && seen_.empty()) {
      const std::string now = thread_affinity(tid_);
      if (now != expected_) seen_ = "'" + expected_ + "' became '" + now + "' while it ran";
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
  pid_t tid_;
  std::string expected_;
  std::string seen_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

Result<HygieneReport> check_hygiene(const std::string& id, const RuntimeOptions& options,
                                    const std::string& scratch,
                                    const std::vector<std::function<HygieneModel()>>& candidates) {
  BP_ASSIGN_OR_RETURN(auto listed, list_backends(options));
  std::string source;
  std::vector<std::string> statics;
  for (const auto& [bid, src] : listed) {
    if (bid == id) source = src;
    if (src == "static") statics.push_back(bid);
  }
  if (source.empty()) {
    std::string ids;
    for (const auto& [bid, src] : listed) ids += (ids.empty() ? "" : ", ") + bid;
    return Status(StatusCode::kNotFound, "backend '" + id + "' is not registered (registered: " +
                                             ids + "); see 'backplane backends'");
  }

  RuntimeOptions opts = options;
  opts.num_threads = std::clamp(std::max(options.num_threads, 2), 1, max_threads());
  for (const std::string& s : statics)
    if (s != id && s != "CpuRef") opts.disabled_static_backends.push_back(s);
  if (source == "static") {
    opts.dynamic_backends = false;
  } else {
    const fs::path dir = fs::path(scratch) / "hygiene_backends";
    std::error_code ec;
    fs::create_directories(dir, ec);
    fs::permissions(dir, fs::perms::owner_all, ec);
    fs::create_symlink(source, dir / fs::path(source).filename(), ec);
    if (ec)
      return Status(StatusCode::kIoError,
                    "cannot link " + source + " into " + dir.string() + ": " + ec.message());
    opts.backend_path = dir.string();
    opts.dynamic_backends = true;
  }

  HygieneReport report;
  std::map<std::string, std::string> found;  // rule -> first violation
  const ProcessState before = capture();
  auto check = [&](const char* step) {
    const ProcessState now = capture();
    for (const std::string& rule : state_rules())
      if (!found.count(rule))
        if (std::string d = differs(rule, before, now); !d.empty())
          found[rule] = std::string("after ") + step + ": " + d;
  };
  {
    BP_ASSIGN_OR_RETURN(std::shared_ptr<Runtime> rt, Runtime::create(opts));
    bool registered = false;
    for (const BackendDescription& d : rt->backends()) registered |= d.id == id;
    if (!registered) return Status(StatusCode::kNotFound, "backend '" + id + "' did not load alone");
    check("load and configure");

    std::shared_ptr<Model> model;
    HygieneModel chosen;
    for (const auto& make : candidates) {
      HygieneModel m = make();
      ModelOptions mo;
      mo.backends = {id};
      auto loaded = rt->load_model(m.path, mo);
      if (!loaded.ok()) continue;
      bool all_here = !(*loaded)->partitions().empty();
      for (const PartitionDescription& p : (*loaded)->partitions()) all_here &= p.backend == id;
      if (!all_here) continue;
      model = *loaded;
      chosen = std::move(m);
      break;
    }
    if (model == nullptr) {
      report.note = "no candidate model was taken whole: compile and execute not exercised";
    } else {
      check("compile");
      BP_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, model->create_session());
      for (const auto& [name, t] : chosen.inputs) BP_RETURN_IF_ERROR(session->set_input(name, t));
      const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
      AffinityWatch watch(tid, before.affinity);
      for (int k = 0; k < 20; ++k) BP_RETURN_IF_ERROR(session->run());
      if (std::string seen = watch.stop(); !seen.empty() && !found.count("affinity"))
        found["affinity"] = "during execute: " + seen;
      check("execute");
    }
  }
  check("unload");
  // A thread the backend started must be gone once it is unloaded; one that
  // was asked to stop may take a moment to exit.
  std::vector<long> left;
  for (int wait = 0; wait < 100; ++wait) {
    left.clear();
    for (long t : task_ids())
      if (!before.threads.count(t)) left.push_back(t);
    if (left.empty()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::string threads;
  if (!left.empty()) {
    threads = std::to_string(left.size()) + " thread(s) started since load still run after unload:";
    for (long t : left) {
      std::ifstream comm("/proc/self/task/" + std::to_string(t) + "/comm");
      std::string name;
      std::getline(comm, name);
      threads += " " + std::to_string(t) + (name.empty() ? "" : " (" + name + ")");
    }
  }
  for (const std::string& rule : state_rules()) report.rules.push_back({rule, found[rule]});
  report.rules.push_back({"threads", threads});
  return report;
}

}  // namespace backplane::cli
