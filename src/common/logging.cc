#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <mutex>

namespace ronde {
namespace {

// The logger is process-wide by nature (stderr is); these two are its only state.
std::atomic<int> g_threshold{static_cast<int>(LogLevel::kWarning)};
std::mutex g_prefix_mutex;
std::string& prefixStorage() {
  static std::string prefix = "[ronde]";
  return prefix;
}

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

void logLine(LogLevel level, const std::string& message) {
  std::string prefix;
  {
    std::lock_guard<std::mutex> lock(g_prefix_mutex);
    prefix = prefixStorage();
  }
  std::string line = prefix + " " + levelName(level) + ": " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ronde
