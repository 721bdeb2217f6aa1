// The store a communicator formed inside a running job meets through (sub-communicators,
// device communicators): every wait is cut into short slices, and between them it looks at
// the job's failure record (failure_record.h). Once a rank has published the job's first
// failure, such as a member that failed while the others waited for it to join, every call
// fails at once with Error(kPeerLost) and that failure's message, which names the rank that
// failed, instead of waiting out the start timeout for a member that will not come.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ronde/errors.h"
#include "ronde/store.h"

namespace ronde {

class FailureWatchingStore final : public Store {
 public:
  // `inner` holds the communicator's keys; `failures` is the failure record it shares.
  FailureWatchingStore(std::shared_ptr<Store> inner, std::shared_ptr<Store> failures,
                       Duration check_interval = Duration(100));

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, Duration timeout) override;
  bool tryGet(const std::string& key, Bytes* value) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // Never refused: erasing is how a failed formation cleans up after itself.
  void erase(const std::string& key) override;

 private:
  // Throws the published first failure; asks the record at most once per check interval.
  void throwIfFailed();

  std::shared_ptr<Store> inner_;
  std::shared_ptr<Store> failures_;
  const Duration check_interval_;
  std::atomic<int64_t> last_check_ns_{0};  // steady clock, since its epoch
  std::mutex mutex_;
  std::optional<std::string> failed_;  // once seen, every later call fails without asking
};

}  // namespace ronde
