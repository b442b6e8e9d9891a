#include "core/log.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>

namespace backplane::log {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kWarn};

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto l = spdlog::stderr_color_mt("backplane");
    l->set_pattern("[backplane %l] %v");
    l->set_level(spdlog::level::trace);  // filtering happens in write()
    return l;
  }();
  return *instance;
}

spdlog::level::level_enum to_spdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return spdlog::level::trace;
    case LogLevel::kDebug:
      return spdlog::level::debug;
    case LogLevel::kInfo:
      return spdlog::level::info;
    case LogLevel::kWarn:
      return spdlog::level::warn;
    case LogLevel::kError:
      return spdlog::level::err;
    case LogLevel::kOff:
      return spdlog::level::off;
  }
  return spdlog::level::info;
}

}  // namespace

void set_level(LogLevel level) { g_level = level; }
LogLevel level() { return g_level; }

void write(LogLevel level, const std::string& message) {
  if (level < g_level.load() || level == LogLevel::kOff) return;
  logger().log(to_spdlog(level), message);
}

}  // namespace backplane::log
