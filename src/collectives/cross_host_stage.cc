#include "collectives/cross_host_stage.h"

#include <algorithm>
#include <utility>

namespace ronde {

CrossHostStage::CrossHostStage(size_t chunks, std::function<void(size_t)> cross,
                               const CollectiveContext& ctx,
                               std::function<void(const Error&)> abort_all)
    : chunks_(chunks),
      cross_(std::move(cross)),
      ctx_(ctx),
      abort_all_(std::move(abort_all)),
      thread_([this] { loop(); }) {}

CrossHostStage::~CrossHostStage() { stopAndJoin(); }

void CrossHostStage::post(size_t through) {
  std::lock_guard<std::mutex> lock(mutex_);
  posted_ = std::max(posted_, through + 1);
  changed_.notify_all();
}

void CrossHostStage::waitCrossed(size_t k) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [&] { return crossed_ > k || error_ != nullptr; };
  const Deadline::Clock::time_point at = ctx_.deadline.at();
  // No timed wait on "never": some C libraries overflow converting the farthest time point.
  bool ended = true;
  if (at == Deadline::Clock::time_point::max()) {
    changed_.wait(lock, done);
  } else {
    ended = changed_.wait_until(lock, at, done);
  }
  if (error_) std::rethrow_exception(error_);
  if (!ended) {
    throw makeError(ErrorCode::kTimeout, ctx_.what(), " timed out waiting for chunk ", k + 1,
                    " of ", chunks_, " to cross hosts");
  }
}

void CrossHostStage::stopAndJoin() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    changed_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

std::exception_ptr CrossHostStage::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void CrossHostStage::loop() {
  for (size_t k = 0; k < chunks_; ++k) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // No deadline needed here: the calling thread either posts or stops, within its own.
      changed_.wait(lock, [&] { return posted_ > k || stop_; });
      if (posted_ <= k) return;
    }
    try {
      cross_(k);
    } catch (const Error& e) {
      fail(e, std::current_exception());
      return;
    } catch (const std::exception& e) {
      fail(Error(ErrorCode::kInternal, e.what()), std::current_exception());
      return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    crossed_ = k + 1;
    changed_.notify_all();
  }
}

void CrossHostStage::fail(const Error& e, std::exception_ptr error) {
  // First wake the calling thread's shared-memory waits and the peers (abort), then tell it.
  if (abort_all_) abort_all_(e);
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = std::move(error);
  changed_.notify_all();
}

void runWithCrossHostStage(CrossHostStage& stage, const std::function<void(const Error&)>& abort_all,
                           const std::function<void()>& body) {
  try {
    body();
  } catch (const Error& e) {
    if (abort_all) abort_all(e);
    stage.stopAndJoin();
    // A lost peer or an abort here may be the echo of the helper's failure, which names the
    // cause; any other error (a mismatch inside the host) is the cause itself.
    const bool echo = e.code() == ErrorCode::kAborted || e.code() == ErrorCode::kPeerLost;
    if (std::exception_ptr helper = stage.error(); helper && echo) std::rethrow_exception(helper);
    throw;
  }
  stage.stopAndJoin();
}

}  // namespace ronde
