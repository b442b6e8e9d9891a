#include "support/memory.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

namespace backplane::test {

namespace {

long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line))
    if (line.compare(0, n, key) == 0 && line[n] == ':') return std::stol(line.substr(n + 1));
  return -1;
}

}  // namespace

MemoryGrowth memory_growth_in_child(const std::function<bool()>& work,
                                    const std::function<void()>& setup) {
  MemoryGrowth grown;
  int fds[2];
  if (::pipe(fds) != 0) return grown;
  const pid_t child = ::fork();
  if (child < 0) return grown;
  if (child == 0) {
    ::close(fds[0]);
    MemoryGrowth mine;
    if (setup) setup();
    const long before = status_kb("VmRSS");
    mine.ok = work();
    mine.peak_kb = status_kb("VmHWM") - before;
    mine.now_kb = status_kb("VmRSS") - before;
    if (::write(fds[1], &mine, sizeof mine) != sizeof mine) ::_exit(2);
    ::_exit(0);
  }
  ::close(fds[1]);
  if (::read(fds[0], &grown, sizeof grown) != static_cast<ssize_t>(sizeof grown)) grown = {};
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return grown;
}

}  // namespace backplane::test
