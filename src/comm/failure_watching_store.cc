#include "comm/failure_watching_store.h"

#include <algorithm>
#include <chrono>

#include "comm/failure_record.h"

namespace ronde {

using Clock = std::chrono::steady_clock;

FailureWatchingStore::FailureWatchingStore(std::shared_ptr<Store> inner,
                                           std::shared_ptr<Store> failures,
                                           Duration check_interval)
    : inner_(std::move(inner)),
      failures_(std::move(failures)),
      check_interval_(std::max(check_interval, Duration(1))) {}

void FailureWatchingStore::throwIfFailed() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (failed_) throw Error(ErrorCode::kPeerLost, *failed_);
  }
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const int64_t last = last_check_ns_.load();
  if (last != 0 &&
      now - last < std::chrono::duration_cast<std::chrono::nanoseconds>(check_interval_).count()) {
    return;
  }
  last_check_ns_.store(now);
  // Lost to this communicator, whatever the failure was where it happened; its message names
  // the rank that published it.
  if (std::optional<Error> first = publishedFirstFailure(*failures_, Duration(200))) {
    std::lock_guard<std::mutex> lock(mutex_);
    failed_ = first->what();
    throw Error(ErrorCode::kPeerLost, *failed_);
  }
}

void FailureWatchingStore::set(const std::string& key, const Bytes& value) {
  throwIfFailed();
  inner_->set(key, value);
}

Bytes FailureWatchingStore::get(const std::string& key, Duration timeout) {
  // A key that is there already costs no look at the record.
  Bytes value;
  if (inner_->tryGet(key, &value)) return value;
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    throwIfFailed();
    const auto left = std::chrono::duration_cast<Duration>(deadline - Clock::now());
    const Duration slice = std::clamp(left, Duration(1), check_interval_);
    try {
      return inner_->get(key, slice);
    } catch (const Error& error) {
      // The last slice's timeout is the caller's: rethrown as it is (callers name the wait).
      if (error.code() != ErrorCode::kTimeout || slice >= left) throw;
    }
  }
}

bool FailureWatchingStore::tryGet(const std::string& key, Bytes* value) {
  throwIfFailed();
  return inner_->tryGet(key, value);
}

int64_t FailureWatchingStore::add(const std::string& key, int64_t delta) {
  throwIfFailed();
  return inner_->add(key, delta);
}

void FailureWatchingStore::erase(const std::string& key) { inner_->erase(key); }

}  // namespace ronde
