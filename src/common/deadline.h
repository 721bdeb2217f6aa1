// A point in time after which a wait gives up. Every blocking call in ronde takes one.
#pragma once

#include <algorithm>
#include <chrono>

namespace ronde {

class Deadline {
 public:
  using Clock = std::chrono::steady_clock;

  static Deadline after(std::chrono::milliseconds timeout) {
    // Duration::max() means "no timeout": saturate instead of overflowing.
    if (timeout >= std::chrono::hours(24 * 365)) return Deadline(Clock::time_point::max());
    return Deadline(Clock::now() + timeout);
  }
  static Deadline never() { return Deadline(Clock::time_point::max()); }

  explicit Deadline(Clock::time_point at) : at_(at) {}

  bool expired() const { return Clock::now() >= at_; }
  Clock::time_point at() const { return at_; }
  // Milliseconds left, clamped to [0, cap] — for poll().
  int pollMillis(int cap) const {
    if (at_ == Clock::time_point::max()) return cap;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
    return static_cast<int>(std::clamp<long long>(left, 0, cap));
  }

 private:
  Clock::time_point at_;
};

}  // namespace ronde
