// A store whose calls stop once something its owner watches has happened: every wait is cut
// into slices of the check interval, the condition is looked at between them (at most once
// per interval over all calls, so polling loops do not double the store's traffic), and once it
// has thrown, every later call throws the same error without asking again. What is watched
// belongs to the subclass: a newer elastic generation (FormationStore), the job's first failure
// (FailureWatchingStore, src/comm). erase() always passes through: it is how a failed
// formation cleans up after itself.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {

class WatchedStore : public Store {
 public:
  void set(const std::string& key, const Bytes& value) final;
  // Waits in slices of the check interval, checking between them. The caller's own timeout
  // is rethrown as the inner store raised it (callers name the wait).
  Bytes get(const std::string& key, Duration timeout) final;
  bool tryGet(const std::string& key, Bytes* value) final;
  bool tryGetWithin(const std::string& key, Bytes* value, Duration answer_bound) final;
  int64_t add(const std::string& key, int64_t delta) final;
  void erase(const std::string& key) final;
  void abandon() final { inner_->abandon(); }

 protected:
  WatchedStore(std::shared_ptr<Store> inner, Duration check_interval);
  // Throws the error that must end the store's calls, when it has happened.
  virtual void check() = 0;
  // False: calls pass straight through, unwatched (and an error seen before is not repeated).
  virtual bool watching() const { return true; }

 private:
  void throwIfStopped();

  std::shared_ptr<Store> inner_;
  const Duration check_interval_;
  std::atomic<int64_t> last_check_ns_{0};  // steady clock, since its epoch
  std::mutex mutex_;
  std::optional<Error> stopped_;  // guarded by mutex_: what check() threw
};

}  // namespace ronde
