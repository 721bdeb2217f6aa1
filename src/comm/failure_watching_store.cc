#include "comm/failure_watching_store.h"

#include "comm/failure_record.h"

namespace ronde {

FailureWatchingStore::FailureWatchingStore(std::shared_ptr<Store> inner,
                                           std::shared_ptr<Store> failures,
                                           Duration check_interval)
    : WatchedStore(std::move(inner), check_interval), failures_(std::move(failures)) {}

void FailureWatchingStore::check() {
  // Lost to this communicator, whatever the failure was where it happened; its message names
  // the rank that published it.
  if (std::optional<Error> first = publishedFirstFailure(*failures_, Duration(200))) {
    throw Error(ErrorCode::kPeerLost, first->what());
  }
}

}  // namespace ronde
