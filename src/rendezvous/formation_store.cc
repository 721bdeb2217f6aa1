#include "rendezvous/formation_store.h"

#include <algorithm>

#include "rendezvous/elastic_assignment.h"
#include "ronde/errors.h"

namespace ronde {

using Clock = std::chrono::steady_clock;

FormationStore::FormationStore(std::shared_ptr<Store> inner, std::shared_ptr<Store> root,
                               int64_t generation, Duration check_interval)
    : inner_(std::move(inner)),
      root_(std::move(root)),
      generation_(generation),
      check_interval_(std::max(check_interval, Duration(1))) {}

void FormationStore::throwIfSuperseded() {
  if (!armed_.load()) return;
  if (const int64_t newer = superseded_by_.load()) throwSuperseded(newer);
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  const int64_t last = last_check_ns_.load();
  if (last != 0 &&
      now - last < std::chrono::duration_cast<std::chrono::nanoseconds>(check_interval_).count()) {
    return;
  }
  last_check_ns_.store(now);
  const int64_t published = publishedElasticGeneration(*root_);
  if (published > generation_) {
    superseded_by_.store(published);
    throwSuperseded(published);
  }
}

void FormationStore::throwSuperseded(int64_t newer) const {
  throw makeError(ErrorCode::kPeerLost, "elastic generation ", generation_,
                  " was replaced by generation ", newer,
                  " while it formed (a member left or the hosts changed)");
}

void FormationStore::set(const std::string& key, const Bytes& value) {
  throwIfSuperseded();
  inner_->set(key, value);
}

Bytes FormationStore::get(const std::string& key, Duration timeout) {
  if (!armed_.load()) return inner_->get(key, timeout);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    throwIfSuperseded();
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

bool FormationStore::tryGet(const std::string& key, Bytes* value) {
  throwIfSuperseded();
  return inner_->tryGet(key, value);
}

int64_t FormationStore::add(const std::string& key, int64_t delta) {
  throwIfSuperseded();
  return inner_->add(key, delta);
}

// Never refused: erasing is how a failed formation cleans up after itself.
void FormationStore::erase(const std::string& key) { inner_->erase(key); }

}  // namespace ronde
