// log.hpp — the runtime's logger (spdlog, to stderr).
#pragma once

#include <backplane/runtime.hpp>

#include <string>

namespace backplane::log {

void set_level(LogLevel level);
LogLevel level();
void write(LogLevel level, const std::string& message);

inline void debug(const std::string& m) { write(LogLevel::kDebug, m); }
inline void info(const std::string& m) { write(LogLevel::kInfo, m); }
inline void warn(const std::string& m) { write(LogLevel::kWarn, m); }
inline void error(const std::string& m) { write(LogLevel::kError, m); }

}  // namespace backplane::log
