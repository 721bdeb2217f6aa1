#include "common/logging.h"

#include <atomic>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ronde {
namespace {

// The logger is process-wide by nature (stderr is); these and the per-thread prefix are its
// only state.
std::atomic<int> g_threshold{static_cast<int>(LogLevel::kWarning)};
std::atomic<bool> g_timestamps{true};
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

// "[2026-01-31 13:05:59.123456] ": local time, as Horovod writes it.
std::string timestamp(std::chrono::system_clock::time_point now) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          now - std::chrono::system_clock::from_time_t(seconds))
                          .count();
  std::tm local{};
  ::localtime_r(&seconds, &local);
  char text[64];
  size_t length = std::strftime(text, sizeof(text), "[%Y-%m-%d %H:%M:%S", &local);
  std::snprintf(text + length, sizeof(text) - length, ".%06lld] ",
                static_cast<long long>(micros));
  return text;
}

}  // namespace

void setLogTimestamps(bool on) { g_timestamps.store(on); }

void configureLogging(const Settings& settings) {
  setLogThreshold(settings.log_level);
  setLogTimestamps(!settings.log_hide_time);
}

std::string formatLogLine(LogLevel level, const std::string& message,
                          std::chrono::system_clock::time_point now) {
  std::string line = g_timestamps.load() ? timestamp(now) : std::string();
  return line + logPrefix() + " " + levelName(level) + ": " + message;
}

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
  std::string line = formatLogLine(level, message, std::chrono::system_clock::now()) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace ronde
