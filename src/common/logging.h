// Minimal leveled logging to stderr, prefixed with the rank when known. The level comes from
// Settings::log_level; the logger has no global mutable state besides the atomic threshold.
#pragma once

#include <sstream>
#include <string>

#include "ronde/settings.h"

namespace ronde {

void setLogThreshold(LogLevel level);
bool logEnabled(LogLevel level);
// Prefix for this process's lines, e.g. "[ronde rank 3]"; set once the rank is known.
void setLogPrefix(const std::string& prefix);
void logLine(LogLevel level, const std::string& message);

template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (!logEnabled(level)) return;
  std::ostringstream out;
  (out << ... << parts);
  logLine(level, out.str());
}

}  // namespace ronde
