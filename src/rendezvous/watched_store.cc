#include "rendezvous/watched_store.h"

#include <algorithm>
#include <chrono>

namespace ronde {

using Clock = std::chrono::steady_clock;

WatchedStore::WatchedStore(std::shared_ptr<Store> inner, Duration check_interval)
    : inner_(std::move(inner)), check_interval_(std::max(check_interval, Duration(1))) {}

void WatchedStore::throwIfStopped() {
  if (!watching()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) throw *stopped_;
  }
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const int64_t last = last_check_ns_.load();
  if (last != 0 &&
      now - last < std::chrono::duration_cast<std::chrono::nanoseconds>(check_interval_).count()) {
    return;
  }
  last_check_ns_.store(now);
  try {
    check();
  } catch (const Error& error) {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = error;
    throw;
  }
}

void WatchedStore::set(const std::string& key, const Bytes& value) {
  throwIfStopped();
  inner_->set(key, value);
}

Bytes WatchedStore::get(const std::string& key, Duration timeout) {
  if (!watching()) return inner_->get(key, timeout);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    throwIfStopped();
    const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    const Duration slice = std::clamp(left, Duration(1), check_interval_);
    try {
      return inner_->get(key, slice);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::kTimeout || slice >= left) throw;
    }
  }
}

bool WatchedStore::tryGet(const std::string& key, Bytes* value) {
  throwIfStopped();
  return inner_->tryGet(key, value);
}

bool WatchedStore::tryGetWithin(const std::string& key, Bytes* value, Duration answer_bound) {
  throwIfStopped();
  return inner_->tryGetWithin(key, value, answer_bound);
}

int64_t WatchedStore::add(const std::string& key, int64_t delta) {
  throwIfStopped();
  return inner_->add(key, delta);
}

void WatchedStore::erase(const std::string& key) { inner_->erase(key); }

}  // namespace ronde
