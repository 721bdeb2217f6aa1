#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace ronde {
namespace {

// The logger is process-wide by nature (stderr is); these and the per-thread prefix are its
// only state.
std::atomic<int> g_threshold{static_cast<int>(LogLevel::kWarning)};
std::mutex g_prefix_mutex;
std::string& prefixStorage() {
  static std::string prefix = "[ronde]";
  return prefix;
}
thread_local std::string t_thread_prefix;  // empty: the process's

const char* levelName(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace: return "TRACE";
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
    case LogLevel::kFatal: return "FATAL";
  }
  return "?";
}

}  // namespace

void setLogThreshold(LogLevel level) { g_threshold.store(static_cast<int>(level)); }

bool logEnabled(LogLevel level) { return static_cast<int>(level) >= g_threshold.load(); }

void setLogPrefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_prefix_mutex);
  prefixStorage() = prefix;
}

std::string rankLogPrefix(int world_rank) {
  return "[ronde rank " + std::to_string(world_rank) + "]";
}

std::string logPrefix() {
  if (!t_thread_prefix.empty()) return t_thread_prefix;
  std::lock_guard<std::mutex> lock(g_prefix_mutex);
  return prefixStorage();
}

ThreadLogPrefix::ThreadLogPrefix(const std::string& prefix) : previous_(t_thread_prefix) {
  t_thread_prefix = prefix;
}

ThreadLogPrefix::~ThreadLogPrefix() { t_thread_prefix = previous_; }

void logLine(LogLevel level, const std::string& message) {
  const std::string prefix = logPrefix();
  std::string line = prefix + " " + levelName(level) + ": " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ronde
