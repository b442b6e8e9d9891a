// cores.cpp — see cores.hpp.
#include "onednn/cores.hpp"

#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>

namespace backplane::onednn {

namespace {

// Parses the unsigned integer at the front of `s` (after spaces), advancing it.
bool next_number(std::string_view& s, uint64_t& out) {
  size_t i = 0;
  while (i < s.size() && s[i] == ' ') ++i;
  auto [p, ec] = std::from_chars(s.data() + i, s.data() + s.size(), out);
  if (ec != std::errc()) return false;
  s.remove_prefix(static_cast<size_t>(p - s.data()));
  return true;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

double process_cpu_seconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) return 0;
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

bool read_proc_stat(const std::vector<int>& cpus, CpuTimes& out) {
  std::ifstream f("/proc/stat");
  if (!f) return false;
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  out = parse_proc_stat(text, cpus);
  return out.total > 0;
}

// Off unless BACKPLANE_ONEDNN_ADAPT_THREADS=1: measured, the cap made the
// contended benchmark slower, not faster (docs/performance.md).
bool adapt_enabled() {
  const char* v = std::getenv("BACKPLANE_ONEDNN_ADAPT_THREADS");
  return v != nullptr && std::string_view(v) == "1";
}

// The measurement shared by every thread of the process.
struct Monitor {
  static constexpr auto kWindow = std::chrono::milliseconds(100);

  std::mutex update;  // held by the one caller that re-reads a window
  std::atomic<int> free{1 << 30};
  std::atomic<int64_t> next_read_ns{0};
  // Guarded by `update`:
  bool have_base = false;
  CpuTimes base;
  double base_self = 0;
  std::vector<int> cpus = allowed_cpus();
  double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));

  void maybe_update() {
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (now < next_read_ns.load(std::memory_order_relaxed)) return;
    std::unique_lock<std::mutex> lock(update, std::try_to_lock);
    if (!lock.owns_lock()) return;  // another thread is reading this window
    next_read_ns.store(now + std::chrono::nanoseconds(kWindow).count(), std::memory_order_relaxed);
    CpuTimes t;
    if (cpus.empty() || ticks <= 0 || !read_proc_stat(cpus, t)) return;
    const double self = process_cpu_seconds();
    if (have_base)
      free.store(free_cores(base, t, self - base_self, ticks, static_cast<int>(cpus.size())),
                 std::memory_order_relaxed);
    base = t;
    base_self = self;
    have_base = true;
  }
};

}  // namespace

CpuTimes parse_proc_stat(std::string_view text, const std::vector<int>& cpus) {
  CpuTimes sum;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    line.remove_prefix(3);
    uint64_t id = 0;
    if (!next_number(line, id) ||
        std::find(cpus.begin(), cpus.end(), static_cast<int>(id)) == cpus.end())
      continue;
    // user nice system idle iowait irq softirq steal (guest time is in user)
    uint64_t v[8] = {};
    int n = 0;
    while (n < 8 && next_number(line, v[n])) ++n;
    if (n < 4) continue;
    const uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    sum.busy += busy;
    sum.total += busy + v[3] + v[4];
  }
  return sum;
}

int free_cores(const CpuTimes& before, const CpuTimes& after, double self_cpu_seconds,
               double ticks_per_second, int cpus) {
  if (cpus < 1) return 1;
  if (after.total <= before.total || after.busy < before.busy || ticks_per_second <= 0) return cpus;
  // Wall time of the interval: the total jiffies are counted on every CPU.
  const double elapsed = static_cast<double>(after.total - before.total) / ticks_per_second / cpus;
  const double busy = static_cast<double>(after.busy - before.busy) / ticks_per_second;
  const double others = std::max(0.0, busy - self_cpu_seconds) / elapsed;
  // A process that held 0.6 of a core or more (a busy loop sharing a CPU with
  // our threads gets about 2/3 of it) takes that core; background noise does not.
  const int taken = static_cast<int>(std::floor(others + 0.4));
  return std::clamp(cpus - taken, 1, cpus);
}

int threads_now(int configured) {
  if (configured <= 1) return configured;
  static const bool enabled = adapt_enabled();
  if (!enabled) return configured;
  static Monitor monitor;
  monitor.maybe_update();
  return std::min(configured, monitor.free.load(std::memory_order_relaxed));
}

}  // namespace backplane::onednn
