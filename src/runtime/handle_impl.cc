#include "runtime/handle_impl.h"

#include "common/deadline.h"
#include "common/logging.h"

namespace ronde::runtime {

HandleImpl::HandleImpl(OnDone on_done, std::shared_ptr<std::atomic<int>> blocked)
    : on_done_(std::move(on_done)), blocked_(std::move(blocked)) {
  if (on_done_ && blocked_) {
    blocked_->fetch_add(1, std::memory_order_relaxed);
    callback_waits_ = true;
  }
}

// A request refused at submission never completes: its count goes with it.
HandleImpl::~HandleImpl() { releaseCallbackWait(); }

void HandleImpl::releaseCallbackWait() {
  if (!callback_waits_) return;
  callback_waits_ = false;
  blocked_->fetch_sub(1, std::memory_order_relaxed);
}

bool HandleImpl::poll() { return done_.load(std::memory_order_acquire); }

void HandleImpl::wait(Duration timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  // Counted while this thread sleeps on an unfinished request (released on every way out).
  struct Blocked {
    std::atomic<int>* count;
    explicit Blocked(std::atomic<int>* c) : count(c) {
      if (count) count->fetch_add(1, std::memory_order_relaxed);
    }
    ~Blocked() {
      if (count) count->fetch_sub(1, std::memory_order_relaxed);
    }
  } blocked(done_.load(std::memory_order_relaxed) ? nullptr : blocked_.get());
  Deadline deadline = Deadline::after(timeout);
  if (deadline.at() == Deadline::Clock::time_point::max()) {
    done_cv_.wait(lock, [&] { return done_.load(std::memory_order_relaxed); });
  } else if (!done_cv_.wait_until(lock, deadline.at(),
                                  [&] { return done_.load(std::memory_order_relaxed); })) {
    throw makeError(ErrorCode::kTimeout, "request still pending after ", timeout.count(), " ms");
  }
  if (error_) std::rethrow_exception(error_);
}

std::shared_ptr<Tensor> HandleImpl::output() {
  std::lock_guard<std::mutex> lock(mutex_);
  return output_;
}

std::vector<int64_t> HandleImpl::result() {
  std::lock_guard<std::mutex> lock(mutex_);
  return result_;
}

void HandleImpl::succeed(std::shared_ptr<Tensor> output, std::vector<int64_t> result) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return;
    output_ = std::move(output);
    result_ = std::move(result);
    done_.store(true, std::memory_order_release);
  }
  notifyDone();
}

void HandleImpl::fail(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_.load(std::memory_order_relaxed)) return;
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
  }
  notifyDone();
}

void HandleImpl::notifyDone() {
  done_cv_.notify_all();
  releaseCallbackWait();
  if (!on_done_) return;
  OnDone on_done = std::move(on_done_);  // whatever it holds is released here, once
  try {
    on_done(*this);
  } catch (const std::exception& e) {
    log(LogLevel::kError, "a request's completion callback threw: ", e.what());
  } catch (...) {
    log(LogLevel::kError, "a request's completion callback threw");
  }
}

}  // namespace ronde::runtime
