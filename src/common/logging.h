// Minimal leveled logging to stderr, prefixed with the world rank when known. The level comes
// from Settings::log_level. Two prefixes: the process's, set where the world communicator is
// made (never by a sub-communicator, whose rank is not the world's), and a thread's own, which
// a runtime's background thread sets to its world rank so that several runtimes in one process
// (the tests' in-process ranks) each log as themselves.
#pragma once

#include <chrono>
#include <sstream>
#include <string>

#include "ronde/settings.h"

namespace ronde {

void setLogThreshold(LogLevel level);
// Whether each line starts with the local time, "[2026-01-31 13:05:59.123456] " (the default,
// as Horovod's lines do; Settings::log_hide_time turns it off).
void setLogTimestamps(bool on);
// The threshold and the timestamps that `settings` ask for.
void configureLogging(const Settings& settings);
// The line logLine writes, without the newline; `now` is the time it states.
std::string formatLogLine(LogLevel level, const std::string& message,
                          std::chrono::system_clock::time_point now);
bool logEnabled(LogLevel level);
// Prefix for this process's lines, e.g. "[ronde rank 3]"; set once the world rank is known.
void setLogPrefix(const std::string& prefix);
// "[ronde rank <world_rank>]".
std::string rankLogPrefix(int world_rank);
// The prefix of lines logged from this thread now.
std::string logPrefix();

// Gives the current thread its own prefix while it lives (a runtime's background thread).
class ThreadLogPrefix {
 public:
  explicit ThreadLogPrefix(const std::string& prefix);
  ~ThreadLogPrefix();
  ThreadLogPrefix(const ThreadLogPrefix&) = delete;
  ThreadLogPrefix& operator=(const ThreadLogPrefix&) = delete;

 private:
  std::string previous_;
};
void logLine(LogLevel level, const std::string& message);

template <typename... Parts>
void log(LogLevel level, const Parts&... parts) {
  if (!logEnabled(level)) return;
  std::ostringstream out;
  (out << ... << parts);
  logLine(level, out.str());
}

}  // namespace ronde
