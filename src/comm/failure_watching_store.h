// The store a communicator formed inside a running job meets through (sub-communicators,
// device communicators): a WatchedStore that looks at the job's failure record
// (failure_record.h). Once a rank has published the job's first failure, such as a member that
// failed while the others waited for it to join, every call fails at once with
// Error(kPeerLost) and that failure's message, which names the rank that failed, instead of
// waiting out the start timeout for a member that will not come.
#pragma once

#include <memory>

#include "rendezvous/watched_store.h"

namespace ronde {

class FailureWatchingStore final : public WatchedStore {
 public:
  // `inner` holds the communicator's keys; `failures` is the failure record it shares.
  FailureWatchingStore(std::shared_ptr<Store> inner, std::shared_ptr<Store> failures,
                       Duration check_interval = Duration(100));

 protected:
  void check() override;

 private:
  std::shared_ptr<Store> failures_;
};

}  // namespace ronde
