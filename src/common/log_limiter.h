// Bounds how often one kind of log line is written, so that a flood of strangers or a
// failing system call cannot fill the log: at most `burst` lines per `window`; the next line
// written after a quiet spell says how many were held back. Not thread-safe: one owner.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ronde {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(int burst, Clock::duration window) : burst_(burst), window_(window) {}

  // True when a line may be written now. Then *note is empty or says how many lines were
  // suppressed since the last one written (append it to the line).
  bool allow(Clock::time_point now, std::string* note) {
    if (now - window_start_ >= window_) {
      window_start_ = now;
      written_ = 0;
    }
    if (written_ >= burst_) {
      ++suppressed_;
      return false;
    }
    ++written_;
    note->clear();
    if (suppressed_ > 0) {
      *note = " (" + std::to_string(suppressed_) + " similar lines suppressed)";
      suppressed_ = 0;
    }
    return true;
  }

 private:
  const int burst_;
  const Clock::duration window_;
  Clock::time_point window_start_{};
  int written_ = 0;
  uint64_t suppressed_ = 0;
};

}  // namespace ronde
