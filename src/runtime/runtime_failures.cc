// How the runtime ends on a failure: every waiting handle fails with the first error, and
// the liveness monitor's findings (a silent peer, or another rank's published failure) abort
// every communicator so that no wait outlasts them.
#include <functional>
#include <iomanip>
#include <sstream>

#include "common/logging.h"
#include "runtime/runtime_impl.h"

namespace ronde::runtime {

void RuntimeImpl::failEverything(std::exception_ptr error) {
  std::vector<std::shared_ptr<HandleImpl>> victims;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!fatal_) fatal_ = error;
    stopped_ = true;
    for (LocalRequest& r : incoming_) {
      if (r.handle) victims.push_back(r.handle);  // refusal notices have none
    }
    incoming_.clear();
    in_flight_.clear();
  }
  // A drain that threw leaves its rest in draining_ (the moved-on entries have no handle).
  for (LocalRequest& r : draining_) {
    if (r.handle) victims.push_back(r.handle);
  }
  draining_.clear();
  for (auto& [key, r] : pending_) victims.push_back(r.handle);
  pending_.clear();
  to_announce_.clear();
  notices_.clear();
  for (auto& handle : victims) handle->fail(error);
}

void RuntimeImpl::onPeerSilent(int rank, double seconds,
                               const std::function<void()>& before_telling) {
  std::ostringstream message;
  message << "rank " << rank << " on host " << comms_->world().host(rank)
          << " has not answered for " << std::fixed << std::setprecision(1) << seconds
          << " s (stopped or wedged; noticed by rank " << rank_
          << ", RONDE_LIVENESS_TIMEOUT_SECONDS is " << std::defaultfloat << std::setprecision(6)
          << settings_.liveness_timeout_seconds << ")";
  bool ended = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ended = stopped_;
    if (!ended && !peer_lost_)
      peer_lost_ = std::make_exception_ptr(Error(ErrorCode::kPeerLost, message.str()));
  }
  // Even where the runtime already ended: a stopped store would hold the monitor's round, and
  // so shutdown, for the store's request timeout.
  before_telling();
  if (ended) return;  // nothing waits for that peer
  log(LogLevel::kError, message.str());
  // Wakes the background thread from any wait (it fails every handle with peer_lost_), and
  // tells the peers why, with the code they should report.
  comms_->abortAll(ErrorCode::kPeerLost, message.str());
}

void RuntimeImpl::onJobFailed(const Error& first) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped_) return;
    // A silent peer that another rank watched: this rank's handles say the same.
    if (!peer_lost_ && first.code() == ErrorCode::kPeerLost)
      peer_lost_ = std::make_exception_ptr(first);
  }
  // This rank may be blocked on a link that will not close (the silent peer's), or idle: the
  // abort wakes it now instead of at the collective timeout, and its handles carry `first`.
  log(LogLevel::kError, "another rank failed the job: ", first.what());
  comms_->abortAll(first.code(), first.what());
}

}  // namespace ronde::runtime
